/*-------------------------------------------------------------------------
 *
 * crypto.c
 *	  Crypto-shredding (issue 16, last part): per-subject keys, encryption
 *	  of event fields at append time, decryption at read time, and
 *	  esrc.forget_subject(), which destroys a subject's key.
 *
 * This file owns:
 *	 - the key table esrc.subject_keys: one row per subject with a random
 *	   256-bit key (pg_strong_random) and a random key id (uuid).  Rows are
 *	   created by esrc.encrypt() on a subject's first use, as the table's
 *	   owner; forget_subject() sets the key to NULL and forgotten_at, as
 *	   the owner.  No row is ever deleted: the row of a forgotten subject
 *	   tells esrc.decrypt() that the key is gone (NULL), not unknown;
 *	 - the envelope (docs/lifecycle.md, "Crypto-shredding"): a JSON string
 *	   "esrc:v1:<key id>:<base64(nonce | ciphertext | tag)>", AES-256-GCM
 *	   with a random 96-bit nonce per value and a 128-bit tag over the
 *	   ciphertext and the associated data "esrc:v1", key id, subject and
 *	   field (NUL-separated), so a value moved to another subject or field
 *	   fails authentication;
 *	 - esrc.encrypt(subject, field, value), esrc.decrypt(subject, field,
 *	   value), esrc.forget_subject(subject, reason).
 *
 * Invariants kept:
 *	 - a key leaves this file only as ciphertext's key: no SQL function
 *	   returns it, copies in backend memory are zeroed after use, and the
 *	   keys are never cached across calls (a forget in another backend
 *	   takes effect at its commit, under MVCC);
 *	 - keys are looked up by index scans of esrc.subject_keys without SQL
 *	   (systable_beginscan, the caller's active snapshot), so EXECUTE on
 *	   the functions is the privilege check; the table itself is readable
 *	   by esrc_admin only;
 *	 - a subject once forgotten gets no new key: encrypt() refuses it.
 *	 - decrypt() opens an envelope only for a role that may read every
 *	   event of esrc.events now (logaccess.c, 42501 otherwise): EXECUTE
 *	   on it, granted to esrc_reader, is not enough alone, so a role that
 *	   kept copies of encrypted fields (a projection's table) cannot open
 *	   them once its right to read the log is gone.
 *
 * OpenSSL (libcrypto's EVP interface) rather than pgcrypto: authenticated
 * encryption, no S2K per call, and no `requires` that every CREATE
 * EXTENSION esrc would have to satisfy; the server links libcrypto
 * already.  Writes go through ownerctx.c's esrc_run_as_owner() and erase.c's
 * esrc_record_erasure(), as erase_stream's do.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <openssl/evp.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/jsonb.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/uuid.h"

#include "base/base.h"
#include "log/log.h"
#include "lifecycle/lifecycle.h"
#include "lifecycleint.h"

PG_FUNCTION_INFO_V1(esrc_encrypt);
PG_FUNCTION_INFO_V1(esrc_decrypt);
PG_FUNCTION_INFO_V1(esrc_forget_subject);

#define ENVELOPE_PREFIX		"esrc:v1:"
#define ENVELOPE_PREFIX_LEN	8
#define ENVELOPE_MARK		"esrc:"	/* any version: not plain data */
#define KEY_ID_LEN			36	/* canonical uuid text */
#define KEY_LEN				32	/* AES-256 */
#define NONCE_LEN			12	/* GCM's 96-bit IV */
#define TAG_LEN				16

/* esrc.subject_keys, by column */
#define Anum_keys_key_id		1
#define Anum_keys_subject		2
#define Anum_keys_key			3
#define Natts_keys				5

/* One row of esrc.subject_keys, as a lookup found it. */
typedef struct SubjectKey
{
	char		key_id[KEY_ID_LEN + 1];
	char	   *subject;
	bool		forgotten;		/* key is NULL */
	uint8		key[KEY_LEN];
} SubjectKey;

/*
 * Look up a row of esrc.subject_keys by subject (bykeyid false) or by key
 * id (a uuid Datum), under snap.  Returns false if there is none.  The
 * key bytes are copied into *out; the caller zeroes them.
 */
static bool
key_lookup(bool bykeyid, Datum value, Snapshot snap, SubjectKey *out)
{
	Relation	rel = esrc_open_relation("subject_keys", AccessShareLock);
	Oid			idx = esrc_relation_oid(bykeyid ? "subject_keys_pkey" : "subject_keys_subject_key");
	ScanKeyData skey;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		found = false;

	/* subject is COLLATE "C", the collation ScanKeyInit gives the key */
	ScanKeyInit(&skey, bykeyid ? Anum_keys_key_id : Anum_keys_subject,
				BTEqualStrategyNumber, bykeyid ? F_UUID_EQ : F_TEXTEQ, value);
	scan = systable_beginscan(rel, idx, true, snap, 1, &skey);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		TupleDesc	desc = RelationGetDescr(rel);
		bool		isnull;
		Datum		d;

		if (desc->natts != Natts_keys)
			elog(ERROR, "esrc.subject_keys has %d columns, expected %d",
				 desc->natts, Natts_keys);
		d = heap_getattr(tup, Anum_keys_key_id, desc, &isnull);
		strlcpy(out->key_id, DatumGetCString(DirectFunctionCall1(uuid_out, d)),
				sizeof(out->key_id));
		d = heap_getattr(tup, Anum_keys_subject, desc, &isnull);
		out->subject = TextDatumGetCString(d);
		d = heap_getattr(tup, Anum_keys_key, desc, &isnull);
		out->forgotten = isnull;
		if (!isnull)
		{
			bytea	   *k = DatumGetByteaPP(d);

			if (VARSIZE_ANY_EXHDR(k) != KEY_LEN)
				elog(ERROR, "the key of a subject in esrc.subject_keys is not %d bytes", KEY_LEN);
			memcpy(out->key, VARDATA_ANY(k), KEY_LEN);
			if ((Pointer) k != DatumGetPointer(d))
				explicit_bzero(VARDATA_ANY(k), KEY_LEN);
		}
		found = true;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * The key of a subject for encrypt(), created on first use.  A new key is
 * inserted as the table's owner with ON CONFLICT DO NOTHING; if another
 * transaction inserted one first, that one is used (at REPEATABLE READ,
 * PostgreSQL raises 40001 instead).  Creating one in a read-only
 * transaction raises 25006 naming esrc.encrypt().
 */
static void
subject_key(const char *subject, SubjectKey *out)
{
	static const char *sql =
		"INSERT INTO esrc.subject_keys (subject, key) VALUES ($1, $2) "
		"ON CONFLICT (subject) DO NOTHING RETURNING key_id::pg_catalog.text";
	Datum		subj = CStringGetTextDatum(subject);
	Oid			argtypes[2] = {TEXTOID, BYTEAOID};
	Datum		values[2];
	bytea	   *key;
	bool		inserted;

	if (!key_lookup(false, subj, GetActiveSnapshot(), out))
	{
		/* the first encryption of a subject writes its key */
		PreventCommandIfReadOnly("esrc.encrypt()");
		key = palloc(VARHDRSZ + KEY_LEN);
		SET_VARSIZE(key, VARHDRSZ + KEY_LEN);
		if (!pg_strong_random(VARDATA(key), KEY_LEN))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate a random key")));
		values[0] = subj;
		values[1] = PointerGetDatum(key);
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		esrc_run_as_owner(esrc_relation_owner(esrc_relation_oid("subject_keys")),
						  sql, 2, argtypes, values, NULL, SPI_OK_INSERT_RETURNING);
		inserted = SPI_processed == 1;
		if (inserted)
		{
			strlcpy(out->key_id, SPI_getvalue(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 1),
					sizeof(out->key_id));
			out->subject = NULL;	/* set below, outside SPI's context */
			out->forgotten = false;
			memcpy(out->key, VARDATA(key), KEY_LEN);
		}
		explicit_bzero(VARDATA(key), KEY_LEN);
		if (SPI_finish() != SPI_OK_FINISH)
			elog(ERROR, "SPI_finish failed");
		if (inserted)
			out->subject = pstrdup(subject);
		if (!inserted && !key_lookup(false, subj, GetLatestSnapshot(), out))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to a concurrent key creation for subject \"%s\"",
							subject),
					 errhint("Retry the transaction.")));
	}
	if (out->forgotten)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("subject \"%s\" was forgotten", subject),
				 errdetail("esrc.forget_subject destroyed its key; nothing more is encrypted for it."),
				 errhint("Do not store data of a forgotten subject.")));
}

/* Associated data: "esrc:v1", key id, subject, field, NUL-separated. */
static StringInfo
associated_data(const char *key_id, const char *subject, const char *field)
{
	StringInfo	ad = makeStringInfo();

	appendBinaryStringInfo(ad, "esrc:v1", 8);
	appendBinaryStringInfo(ad, key_id, strlen(key_id) + 1);
	appendBinaryStringInfo(ad, subject, strlen(subject) + 1);
	appendBinaryStringInfo(ad, field, strlen(field));
	return ad;
}

/*
 * AES-256-GCM of in[0 .. len - 1] into out (len bytes), with the tag.
 * Encrypts or decrypts; when decrypting, tag is checked and false returned
 * on a mismatch.  No ereport between the context's allocation and its
 * release, so it cannot leak.
 */
static bool
aes_gcm(bool encrypt, const uint8 *key, const uint8 *nonce, StringInfo ad,
		const uint8 *in, int len, uint8 *out, uint8 *tag)
{
	EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
	int			n;
	bool		ok;

	if (ctx == NULL)
		return false;
	ok = EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL, encrypt ? 1 : 0) == 1 &&
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN, NULL) == 1 &&
		EVP_CipherInit_ex(ctx, NULL, NULL, key, nonce, encrypt ? 1 : 0) == 1 &&
		EVP_CipherUpdate(ctx, NULL, &n, (const unsigned char *) ad->data, ad->len) == 1 &&
		(len == 0 || EVP_CipherUpdate(ctx, out, &n, in, len) == 1);
	if (ok && !encrypt)
		ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tag) == 1;
	if (ok)
		ok = EVP_CipherFinal_ex(ctx, out + len, &n) == 1;
	if (ok && encrypt)
		ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag) == 1;
	EVP_CIPHER_CTX_free(ctx);
	return ok;
}

/* subject and field arguments: subject as a stream name, field not null */
static void
check_subject_field(FunctionCallInfo fcinfo, char **subject, char **field)
{
	*subject = esrc_check_name(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
							   "subject", ESRC_MAX_STREAM_NAME);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("field must not be null"),
				 errhint("Pass the name of the field, or '' for none; decrypt needs the same.")));
	*field = text_to_cstring(PG_GETARG_TEXT_PP(1));
}

/*
 * esrc.encrypt(subject, field, value jsonb) -> jsonb: the envelope of
 * value for subject, as a JSON string.  NULL value: NULL.
 */
Datum
esrc_encrypt(PG_FUNCTION_ARGS)
{
	char	   *subject;
	char	   *field;
	char	   *plain;
	int			len;
	uint8	   *blob;
	char	   *env;
	int			envlen;
	SubjectKey	sk;
	bool		ok;

	check_subject_field(fcinfo, &subject, &field);
	if (PG_ARGISNULL(2))
		PG_RETURN_NULL();
	plain = JsonbToCString(NULL, &PG_GETARG_JSONB_P(2)->root, -1);
	len = strlen(plain);
	subject_key(subject, &sk);

	/* nonce | ciphertext | tag, then base64 (4 chars per 3 bytes) */
	blob = palloc(NONCE_LEN + len + TAG_LEN);
	if (!pg_strong_random(blob, NONCE_LEN))
	{
		explicit_bzero(sk.key, KEY_LEN);
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random nonce")));
	}
	ok = aes_gcm(true, sk.key, blob, associated_data(sk.key_id, subject, field),
				 (uint8 *) plain, len, blob + NONCE_LEN, blob + NONCE_LEN + len);
	explicit_bzero(sk.key, KEY_LEN);
	explicit_bzero(plain, len);
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not encrypt the value for subject \"%s\"", subject)));

	envlen = 2 + ENVELOPE_PREFIX_LEN + KEY_ID_LEN + 1 +
		4 * ((NONCE_LEN + len + TAG_LEN + 2) / 3);
	env = palloc(envlen + 1);
	snprintf(env, envlen + 1, "\"%s%s:", ENVELOPE_PREFIX, sk.key_id);
	EVP_EncodeBlock((unsigned char *) env + ENVELOPE_PREFIX_LEN + KEY_ID_LEN + 2,
					blob, NONCE_LEN + len + TAG_LEN);
	strcat(env, "\"");
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(env)));
}

/*
 * The decoded payload (nonce | ciphertext | tag) and key id of an envelope
 * env[0 .. len - 1] that starts with ENVELOPE_MARK; 22P02 if malformed.
 */
static uint8 *
parse_envelope(const char *env, int len, char *key_id, int *bloblen)
{
	const char *b64 = env + ENVELOPE_PREFIX_LEN + KEY_ID_LEN + 1;
	int			b64len = len - ENVELOPE_PREFIX_LEN - KEY_ID_LEN - 1;
	uint8	   *blob;
	int			i;
	bool		ok;

	ok = len > ENVELOPE_PREFIX_LEN + KEY_ID_LEN + 1 &&
		strncmp(env, ENVELOPE_PREFIX, ENVELOPE_PREFIX_LEN) == 0 &&
		env[ENVELOPE_PREFIX_LEN + KEY_ID_LEN] == ':' &&
		b64len % 4 == 0 && b64len >= 4 * ((NONCE_LEN + TAG_LEN + 2) / 3);
	for (i = 0; ok && i < KEY_ID_LEN; i++)
	{
		char		c = env[ENVELOPE_PREFIX_LEN + i];

		ok = (i == 8 || i == 13 || i == 18 || i == 23) ? c == '-' :
			((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
	}
	for (i = 0; ok && i < b64len; i++)
	{
		char		c = b64[i];

		ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			(c >= '0' && c <= '9') || c == '+' || c == '/' ||
			(c == '=' && i >= b64len - 2 && (i == b64len - 1 || b64[i + 1] == '='));
	}
	blob = NULL;
	if (ok)
	{
		blob = palloc(b64len / 4 * 3 + 1);
		*bloblen = EVP_DecodeBlock(blob, (const unsigned char *) b64, b64len);
		*bloblen -= (b64[b64len - 1] == '=') + (b64[b64len - 2] == '=');
		ok = *bloblen >= NONCE_LEN + TAG_LEN;
	}
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("malformed esrc encrypted value"),
				 errdetail("An encrypted value is a JSON string \"esrc:v1:<key id>:<base64>\"; values that do not start with \"esrc:\" are plain data.")));
	memcpy(key_id, env + ENVELOPE_PREFIX_LEN, KEY_ID_LEN);
	key_id[KEY_ID_LEN] = '\0';
	return blob;
}

/*
 * esrc.decrypt(subject, field, value jsonb) -> jsonb: the value that
 * esrc.encrypt(subject, field, ...) encrypted; NULL if the subject was
 * forgotten.  A value that is not an envelope (no JSON string starting
 * with "esrc:") is returned as it is, so readers may call it on fields
 * written in plain text before encryption was adopted.
 */
Datum
esrc_decrypt(PG_FUNCTION_ARGS)
{
	char	   *subject;
	char	   *field;
	Jsonb	   *jb;
	JsonbValue	v;
	char		key_id[KEY_ID_LEN + 1];
	uint8	   *blob;
	int			bloblen;
	int			len;
	char	   *plain;
	SubjectKey	sk;
	bool		ok;

	check_subject_field(fcinfo, &subject, &field);
	if (PG_ARGISNULL(2))
		PG_RETURN_NULL();
	jb = PG_GETARG_JSONB_P(2);
	if (!JB_ROOT_IS_SCALAR(jb) || !JsonbExtractScalar(&jb->root, &v) ||
		v.type != jbvString || v.val.string.len < (int) strlen(ENVELOPE_MARK) ||
		strncmp(v.val.string.val, ENVELOPE_MARK, strlen(ENVELOPE_MARK)) != 0)
		PG_RETURN_JSONB_P(jb);
	/* a plain value of an event, for a role that may read the events only */
	esrc_check_log_readable(GetUserId(),
							"esrc.decrypt returns the plain values of encrypted event fields.");
	blob = parse_envelope(v.val.string.val, v.val.string.len, key_id, &bloblen);

	if (!key_lookup(true, DirectFunctionCall1(uuid_in, CStringGetDatum(key_id)),
					GetActiveSnapshot(), &sk))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("the key of an encrypted value of subject \"%s\" does not exist", subject),
				 errdetail("Key id %s is not in esrc.subject_keys.", key_id),
				 errhint("Was esrc.subject_keys restored from another backup than the events?")));
	if (strcmp(sk.subject, subject) != 0)
	{
		explicit_bzero(sk.key, KEY_LEN);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the value was not encrypted for subject \"%s\"", subject),
				 errdetail("Its key (id %s) belongs to another subject.", key_id)));
	}
	if (sk.forgotten)
		PG_RETURN_NULL();

	len = bloblen - NONCE_LEN - TAG_LEN;
	plain = palloc(len + 1);
	ok = aes_gcm(false, sk.key, blob, associated_data(key_id, subject, field),
				 blob + NONCE_LEN, len, (uint8 *) plain, blob + NONCE_LEN + len);
	explicit_bzero(sk.key, KEY_LEN);
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("could not decrypt a value of subject \"%s\": authentication failed", subject),
				 errdetail("The value was changed, or it was encrypted for another field than \"%s\".", field)));
	plain[len] = '\0';
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(plain)));
}

/*
 * esrc.forget_subject(subject, reason) -> boolean: destroy the subject's
 * key (key NULL, forgotten_at set; the row stays) and record the call in
 * esrc.erasures, in the caller's transaction.  True if a key was
 * destroyed, false (still recorded) if the subject was forgotten already;
 * 42704 if it never had a key.  The row is locked first, so two forgets
 * of a subject run one after the other.
 */
Datum
esrc_forget_subject(PG_FUNCTION_ARGS)
{
	static const char *lock_sql =
		"SELECT key IS NOT NULL FROM esrc.subject_keys "
		"WHERE subject OPERATOR(pg_catalog.=) $1 FOR UPDATE";
	static const char *forget_sql =
		"UPDATE esrc.subject_keys SET key = NULL, forgotten_at = pg_catalog.now() "
		"WHERE subject OPERATOR(pg_catalog.=) $1";
	char	   *subject;
	char	   *reason;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	Oid			owner;
	bool		live;
	bool		isnull;

	PreventCommandIfReadOnly("esrc.forget_subject()");
	subject = esrc_check_name(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
							  "subject", ESRC_MAX_STREAM_NAME);
	reason = esrc_check_reason(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1),
							   "subject is forgotten");
	values[0] = CStringGetTextDatum(subject);
	owner = esrc_relation_owner(esrc_relation_oid("subject_keys"));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	esrc_run_as_owner(owner, lock_sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("subject \"%s\" has no key", subject),
				 errdetail("Nothing was ever encrypted for it with esrc.encrypt."),
				 errhint("Check the name; to erase a stream's plain data use esrc.erase_stream.")));
	live = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
									  SPI_tuptable->tupdesc, 1, &isnull));
	if (live)
		esrc_run_as_owner(owner, forget_sql, 1, argtypes, values, NULL, SPI_OK_UPDATE);
	esrc_record_erasure("forget_subject", subject, live ? 1 : 0, reason, NULL,
						GetSessionUserId(), GetUserId());
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	PG_RETURN_BOOL(live);
}
