/*-------------------------------------------------------------------------
 *
 * idcheck.c
 *	  An idempotent retry must be a retry: an append whose event id is
 *	  already stored in the stream returns the stored version only when
 *	  the stored event is the one given again (same type, data and
 *	  metadata); an id that names another event is refused (23505), since
 *	  answering it would hide an application bug (an id reused for a new
 *	  command, or a command replayed with other arguments).
 *
 * What "the same" allows, because a faithful retry does not reproduce it
 * byte for byte:
 *	 - esrc.encrypt envelopes ("esrc:v1:<key id>:<base64>") differ at every
 *	   call (a random nonce): two envelopes of one key (one subject) are
 *	   taken as equal without decrypting (the append path holds no key and
 *	   must stay cheap);
 *	 - the trace context ("traceparent", "tracestate" at the top of the
 *	   metadata) is the request's, copied in from esrc.traceparent
 *	   (trace.c): a retry carries its own;
 *	 - an event redacted by esrc.erase_stream has lost its data: only its
 *	   type is compared.
 * Cost: an exact retry costs one memcmp of the data (and of the
 * metadata); the walk of the documents runs only when the bytes differ.
 *
 * Talks to: append.c (find_existing_ids, with the stored row in a slot).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/tuptable.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
#include "utils/uuid.h"

#include "log/log.h"
#include "logint.h"

#define ENVELOPE_PREFIX "esrc:"

/* The length of an envelope's "esrc:v1:<key id>:" prefix; 0 if s is none. */
static int
envelope_key_len(const char *s, int len)
{
	int			colons = 0;
	int			i;

	if (len < (int) strlen(ENVELOPE_PREFIX) ||
		memcmp(s, ENVELOPE_PREFIX, strlen(ENVELOPE_PREFIX)) != 0)
		return 0;
	for (i = 0; i < len; i++)
		if (s[i] == ':' && ++colons == 3)
			return i + 1;
	return 0;
}

static bool
same_scalar(JsonbValue *a, JsonbValue *b)
{
	int			ka;

	if (a->type != b->type)
		return false;
	switch (a->type)
	{
		case jbvNull:
			return true;
		case jbvBool:
			return a->val.boolean == b->val.boolean;
		case jbvNumeric:
			return DatumGetBool(DirectFunctionCall2(numeric_eq,
													NumericGetDatum(a->val.numeric),
													NumericGetDatum(b->val.numeric)));
		case jbvString:
			if (a->val.string.len == b->val.string.len &&
				memcmp(a->val.string.val, b->val.string.val, a->val.string.len) == 0)
				return true;
			ka = envelope_key_len(a->val.string.val, a->val.string.len);
			return ka > 0 &&
				ka == envelope_key_len(b->val.string.val, b->val.string.len) &&
				memcmp(a->val.string.val, b->val.string.val, ka) == 0;
		default:
			return false;
	}
}

/* Are two documents equal, envelopes of one key taken as equal? */
static bool
same_document(Jsonb *a, Jsonb *b)
{
	JsonbIterator *ia;
	JsonbIterator *ib;
	JsonbValue	va;
	JsonbValue	vb;
	JsonbIteratorToken ta;
	JsonbIteratorToken tb;

	if (VARSIZE(a) == VARSIZE(b) && memcmp(a, b, VARSIZE(a)) == 0)
		return true;
	ia = JsonbIteratorInit(&a->root);
	ib = JsonbIteratorInit(&b->root);
	for (;;)
	{
		ta = JsonbIteratorNext(&ia, &va, false);
		tb = JsonbIteratorNext(&ib, &vb, false);
		if (ta != tb)
			return false;
		if (ta == WJB_DONE)
			return true;
		if (ta == WJB_BEGIN_ARRAY || ta == WJB_BEGIN_OBJECT)
		{
			/* the element or pair count (and raw-scalar flag) must agree */
			if (ta == WJB_BEGIN_ARRAY &&
				(va.val.array.nElems != vb.val.array.nElems ||
				 va.val.array.rawScalar != vb.val.array.rawScalar))
				return false;
			if (ta == WJB_BEGIN_OBJECT && va.val.object.nPairs != vb.val.object.nPairs)
				return false;
			continue;
		}
		if ((ta == WJB_KEY || ta == WJB_VALUE || ta == WJB_ELEM) && !same_scalar(&va, &vb))
			return false;
	}
}

/* metadata without its trace context (trace.c), for the comparison */
static Jsonb *
without_trace(Jsonb *m)
{
	if (m == NULL || !JB_ROOT_IS_OBJECT(m))
		return m;
	m = DatumGetJsonbP(DirectFunctionCall2(jsonb_delete, JsonbPGetDatum(m),
										   CStringGetTextDatum("traceparent")));
	return DatumGetJsonbP(DirectFunctionCall2(jsonb_delete, JsonbPGetDatum(m),
											  CStringGetTextDatum("tracestate")));
}

static bool
same_metadata(Jsonb *stored, Jsonb *given)
{
	if (stored == NULL || given == NULL)
	{
		stored = without_trace(stored);
		given = without_trace(given);
		/* an object left empty by the trace keys is no metadata */
		if (stored != NULL && JB_ROOT_IS_OBJECT(stored) && JB_ROOT_COUNT(stored) == 0)
			stored = NULL;
		if (given != NULL && JB_ROOT_IS_OBJECT(given) && JB_ROOT_COUNT(given) == 0)
			given = NULL;
		return stored == NULL && given == NULL;
	}
	if (VARSIZE(stored) == VARSIZE(given) && memcmp(stored, given, VARSIZE(stored)) == 0)
		return true;
	return same_document(without_trace(stored), without_trace(given));
}

/*
 * The event stored with id (in slot, a row of esrc.events of this stream)
 * is given again as type, data and metadata (NULL = none) by a retry:
 * refuse it (23505) unless it is the same event.  Nothing is copied or
 * formatted unless it is refused.
 */
void
esrc_check_retry_matches(TupleTableSlot *slot, pg_uuid_t *id,
						 const char *type, Jsonb *data, Jsonb *metadata)
{
	bool		isnull;
	bool		metanull;
	text	   *stored_type = DatumGetTextPP(slot_getattr(slot, Anum_events_type, &isnull));
	Datum		d = slot_getattr(slot, Anum_events_data, &isnull);
	Datum		m = slot_getattr(slot, Anum_events_metadata, &metanull);
	int			tlen = strlen(type);
	const char *what = NULL;

	if ((int) VARSIZE_ANY_EXHDR(stored_type) != tlen ||
		memcmp(VARDATA_ANY(stored_type), type, tlen) != 0)
		what = psprintf("has type \"%s\", not \"%s\"", text_to_cstring(stored_type), type);
	else if (esrc_is_redacted(d, isnull, metanull))
		return;					/* erased: its type is all that is left */
	else if (!same_document(DatumGetJsonbP(d), data))
		what = "has other data";
	else if (!same_metadata(metanull ? NULL : DatumGetJsonbP(m), metadata))
		what = "has other metadata";
	if (what == NULL)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_UNIQUE_VIOLATION),
			 errmsg("event id %s names another event",
					DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(id)))),
			 errdetail("The event stored with this id in stream \"%s\" at version " INT64_FORMAT " %s; nothing was written.",
					   TextDatumGetCString(slot_getattr(slot, Anum_events_stream, &isnull)),
					   DatumGetInt64(slot_getattr(slot, Anum_events_version, &isnull)), what),
			 errhint("A retry repeats the first attempt exactly (only esrc.encrypt envelopes of the same subject and the trace context may differ); a new event needs a new id.")));
}
