/*-------------------------------------------------------------------------
 *
 * tags.c
 *	  Tags of events (dynamic consistency boundaries, docs/dcb.md): their
 *	  checks, and the (type, tag) key locks that let conditional appends
 *	  (esrc.append_if, query.c) serialize only with what they could see.
 *
 * A tag is a non-empty string of at most ESRC_MAX_TAG_LEN bytes without
 * control characters; an event has at most ESRC_MAX_TAGS of them, stored
 * sorted without duplicates in esrc.events.tags (null: no tags).
 *
 * Key locks.  Every user append (append.c, after the stream lock) takes,
 * for each event of type A with tags S, the keys (A, *), and (*, s) and
 * (A, s) for every s in S, in the write mode W.  A conditional append
 * takes, for each item of its condition, the key every event matching
 * the item is certain to write: (A, t) for each type A of the item and
 * its first tag t, (A, *) for an item without tags, (*, t) for an item
 * without types, in the condition mode C.  W is RowExclusiveLock and C
 * ShareLock: W does not conflict with W (plain appends never wait for each
 * other), C not with C, and W with C; a key a call needs in both modes is
 * taken in ShareRowExclusiveLock, which conflicts with all three.  So a
 * conditional append waits for (and then sees, with the snapshot it checks
 * with) every append in flight whose events could match its condition, and
 * an append of such an event waits until the conditional append ended;
 * conditions that cannot match each other's events share no key they
 * both write-and-check and never wait for each other.  Keys hash into
 * ESRC_KEY_LOCK_BUCKETS lock buckets, so that a transaction that appends
 * many events with many tags holds at most that many locks (the shared
 * lock table is small); two keys in one bucket only make a conditional
 * append and an append wait where they need not.  Buckets are taken in
 * ascending order, once each.  They are advisory lock tags in
 * key space ESRC_KEY_LOCK_SPACE (pg_locks: objsubid 17749), held to the
 * end of the transaction, like the stream lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "log/log.h"
#include "logint.h"

/* Check one tag (s, len bytes). */
static void
check_tag_bytes(const char *s, int len, const char *what)
{
	int			i;

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the tags of %s must not contain an empty tag", what)));
	if (len > ESRC_MAX_TAG_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("a tag of %s is too long", what),
				 errdetail("The limit is %d bytes; the tag has %d bytes.",
						   ESRC_MAX_TAG_LEN, len)));
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c < 0x20 || c == 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a tag of %s contains a control character", what),
					 errdetail("Byte %d of the tag is 0x%02x.", i + 1, c)));
	}
}

/*
 * Check one tag (s, len bytes) and return it as a C string.
 */
char *
esrc_check_tag(const char *s, int len, const char *what)
{
	check_tag_bytes(s, len, what);
	return pnstrdup(s, len);
}

/*
 * strcmp's order of two tags given as bytes (tags contain no NUL): what
 * make_tags sorts by.
 */
static int
tag_bytes_cmp(const char *a, int alen, const char *b, int blen)
{
	int			c = memcmp(a, b, Min(alen, blen));

	return c != 0 ? c : (alen > blen) - (alen < blen);
}

static int
cstring_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/*
 * The text[] datum of tags[0 .. n-1] (checked): sorted, duplicates
 * refused; 0 for no tags.
 */
static Datum
make_tags(char **tags, int n, const char *what)
{
	Datum	   *elems;
	int			i;

	if (n == 0)
		return (Datum) 0;
	if (n > ESRC_MAX_TAGS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s has too many tags", what),
				 errdetail("The limit is %d tags; %d were given.", ESRC_MAX_TAGS, n)));
	qsort(tags, n, sizeof(char *), cstring_cmp);
	elems = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		if (i > 0 && strcmp(tags[i], tags[i - 1]) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s has the tag \"%s\" twice", what, tags[i])));
		elems[i] = CStringGetTextDatum(tags[i]);
	}
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false,
										   TYPALIGN_INT));
}

/*
 * The tags of esrc.append's text[] argument.  One pass checks every tag
 * and whether the array is already what esrc.events stores (one
 * dimension from 1, sorted, no duplicates): then it is stored as given,
 * without copying its tags (the common case: callers that know the rule
 * pass sorted tags); else the tags are sorted into a new array.
 */
Datum
esrc_tags_from_array(ArrayType *arr, const char *what)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	char	  **tags;
	bool		sorted = true;
	int			i;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the tags of %s must be a one-dimensional array", what)));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n > ESRC_MAX_TAGS)
		(void) make_tags(NULL, n, what);
	for (i = 0; i < n; i++)
	{
		text	   *t;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("the tags of %s must not contain null", what)));
		t = DatumGetTextPP(elems[i]);
		check_tag_bytes(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), what);
		if (i > 0 && sorted)
		{
			text	   *p = DatumGetTextPP(elems[i - 1]);

			sorted = tag_bytes_cmp(VARDATA_ANY(p), VARSIZE_ANY_EXHDR(p),
								   VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)) < 0;
		}
	}
	if (n == 0)
		return (Datum) 0;
	if (sorted && ARR_LBOUND(arr)[0] == 1)
		return PointerGetDatum(arr);
	tags = palloc(sizeof(char *) * n);
	for (i = 0; i < n; i++)
		tags[i] = TextDatumGetCString(elems[i]);
	return make_tags(tags, n, what);
}

/* The tags of an event of a JSON events array: an array of strings. */
Datum
esrc_tags_from_jsonb(JsonbValue *val, const char *what)
{
	JsonbContainer *arr;
	int			n;
	char	  **tags;
	int			i;

	if (val->type != jbvBinary || !JsonContainerIsArray(val->val.binary.data) ||
		JsonContainerIsScalar(val->val.binary.data))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the tags of %s must be a JSON array of strings", what)));
	arr = val->val.binary.data;
	n = JsonContainerSize(arr);
	if (n > ESRC_MAX_TAGS)
		(void) make_tags(NULL, n, what);
	tags = palloc(sizeof(char *) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		JsonbValue *e = getIthJsonbValueFromContainer(arr, i);

		if (e->type != jbvString)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the tags of %s must be a JSON array of strings", what),
					 errdetail("Element %d is not a string.", i + 1)));
		tags[i] = esrc_check_tag(e->val.string.val, e->val.string.len, what);
	}
	return make_tags(tags, n, what);
}

/*
 * The size of tags (a text[] datum, 0 = none) as a JSON array of strings,
 * what the forwarder sends in the header ce_esrctags: counted towards the
 * event's size as JSON text (append.c).
 */
Size
esrc_tags_json_size(Datum tags)
{
	Datum	   *elems;
	int			n;
	Size		size = 2;
	int			i;

	if (tags == (Datum) 0)
		return 0;
	deconstruct_array(DatumGetArrayTypeP(tags), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, NULL, &n);
	for (i = 0; i < n; i++)
	{
		text	   *t = DatumGetTextPP(elems[i]);
		const char *c = VARDATA_ANY(t);
		int			len = VARSIZE_ANY_EXHDR(t);
		int			j;

		size += len + 2 + (i > 0 ? 1 : 0);
		for (j = 0; j < len; j++)
			if (c[j] == '"' || c[j] == '\\')
				size++;
	}
	return size;
}

/* One key to lock: the hash of (type, tag), and the modes it needs. */
typedef struct KeyLock
{
	uint64		hash;
	bool		write;
	bool		check;
} KeyLock;

typedef struct KeySet
{
	KeyLock    *keys;
	int			n;
	int			alloc;
} KeySet;

/*
 * Add (type, tag) to ks (tlen and glen bytes, at most ESRC_MAX_TYPE_NAME
 * and ESRC_MAX_TAG_LEN); "" stands for any type or any tag.  The key
 * hashes as the bytes type NUL tag NUL.
 */
static void
add_key(KeySet *ks, const char *type, int tlen, const char *tag, int glen,
		bool check)
{
	char		buf[ESRC_MAX_TYPE_NAME + ESRC_MAX_TAG_LEN + 2];
	KeyLock    *k;

	if (tlen > ESRC_MAX_TYPE_NAME || glen > ESRC_MAX_TAG_LEN)
		elog(ERROR, "lock key of %d + %d bytes is too long", tlen, glen);
	memcpy(buf, type, tlen);
	buf[tlen] = '\0';
	memcpy(buf + tlen + 1, tag, glen);
	buf[tlen + glen + 1] = '\0';
	if (ks->n == ks->alloc)
	{
		ks->alloc *= 2;
		ks->keys = repalloc(ks->keys, sizeof(KeyLock) * ks->alloc);
	}
	k = &ks->keys[ks->n++];
	k->hash = hash_bytes_extended((const unsigned char *) buf, tlen + glen + 2, 0x4555) %
		ESRC_KEY_LOCK_BUCKETS;
	k->write = !check;
	k->check = check;
}

static int
key_cmp(const void *a, const void *b)
{
	uint64		x = ((const KeyLock *) a)->hash;
	uint64		y = ((const KeyLock *) b)->hash;

	return (x > y) - (x < y);
}

/* The keys of one event's writing (see the header comment). */
static void
add_event_keys(KeySet *ks, const EventInput *ev)
{
	int			tlen = strlen(ev->type);

	add_key(ks, ev->type, tlen, "", 0, false);
	if (ev->tags != (Datum) 0)
	{
		ArrayType  *arr = DatumGetArrayTypeP(ev->tags);
		Datum	   *elems;
		int			n;
		int			i;

		deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
		for (i = 0; i < n; i++)
		{
			text	   *t = DatumGetTextPP(elems[i]);

			add_key(ks, "", 0, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), false);
			add_key(ks, ev->type, tlen, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), false);
		}
		pfree(elems);
	}
}

/*
 * Take the key locks of an append: the write keys of its events and the
 * check keys of its condition (NULL: none).
 */
void
esrc_lock_event_keys(int nevents, const EventInput *events,
					 const DcbCondition *cond)
{
	KeySet		ks;
	int			i;
	int			j;

	ks.alloc = 16;
	ks.n = 0;
	ks.keys = palloc(sizeof(KeyLock) * ks.alloc);
	for (i = 0; i < nevents; i++)
		add_event_keys(&ks, &events[i]);
	for (i = 0; cond != NULL && i < cond->query->nitems; i++)
	{
		DcbItem    *item = &cond->query->items[i];
		const char *tag = item->ntags > 0 ? item->tags[0] : "";

		if (item->ntypes == 0)
			add_key(&ks, "", 0, tag, strlen(tag), true);
		for (j = 0; j < item->ntypes; j++)
			add_key(&ks, item->types[j], strlen(item->types[j]), tag,
					strlen(tag), true);
	}
	qsort(ks.keys, ks.n, sizeof(KeyLock), key_cmp);

	for (i = 0; i < ks.n; i = j)
	{
		bool		write = false;
		bool		check = false;
		LOCKTAG		tag;
		LOCKMODE	mode;

		for (j = i; j < ks.n && ks.keys[j].hash == ks.keys[i].hash; j++)
		{
			write |= ks.keys[j].write;
			check |= ks.keys[j].check;
		}
		mode = (write && check) ? ShareRowExclusiveLock :
			check ? ShareLock : RowExclusiveLock;
		SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (ks.keys[i].hash >> 32),
							 (uint32) ks.keys[i].hash, ESRC_KEY_LOCK_SPACE);
		(void) LockAcquire(&tag, mode, false, false);
	}
	pfree(ks.keys);
}
