/*-------------------------------------------------------------------------
 *
 * append.c
 *	  The write path: esrc.append() and esrc.append_batch().
 *
 * An append, in order:
 *	 1. checks its input (nothing is locked or written for bad input);
 *	 2. takes the stream lock, a transaction-scoped heavyweight lock on a
 *		64-bit hash of the stream name (an advisory lock tag in a key space
 *		of its own, see ESRC_STREAM_LOCK_SPACE).  Appends to one stream
 *		serialize on it until commit; appends to other streams never wait
 *		for each other;
 *	 3. with the lock held, looks up the event ids it was given
 *		(idempotent retries) and the stream's head version with a fresh
 *		snapshot, so it sees every append that committed before it got the
 *		lock;
 *	 4. checks expected_version (SQLSTATE 40001 on a mismatch);
 *	 5. inserts the events with consecutive versions head+1, head+2, ...,
 *		taking global positions from order.c.
 *
 * Invariants kept: (stream, version) is unique and gap-free within a
 * stream (the lock makes version head+1 the only one that can be written
 * next; the unique index is the backstop); position order agrees with
 * version order within a stream; event ids are unique.
 *
 * The INSERT goes through SPI so that the snapshot triggers of snapshot.c
 * fire in the same transaction.  These functions are SECURITY DEFINER
 * (see the install script): writers hold no privilege on esrc.events.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/trigger.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "esrc.h"

PG_FUNCTION_INFO_V1(esrc_append);
PG_FUNCTION_INFO_V1(esrc_append_batch);

/* expected_version sentinels */
#define EXPECT_NO_STREAM	(-1)
#define EXPECT_EXISTS		(-2)

typedef struct EventInput
{
	char	   *type;
	Jsonb	   *data;
	Jsonb	   *metadata;		/* NULL = none */
	pg_uuid_t  *id;				/* NULL = generate */
} EventInput;

static SPIPlanPtr head_plan = NULL;
static SPIPlanPtr ids_plan = NULL;
static SPIPlanPtr insert_plan = NULL;
static SPIPlanPtr insert_many_plan = NULL;

/*
 * Check a stream name, event type or category given as text and return it
 * as a C string.  NULL, empty, overlong names and control characters are
 * refused with a clear error.
 */
char *
esrc_check_name(text *value, const char *what, int maxlen)
{
	char	   *s;
	int			len;
	int			i;

	if (value == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	len = VARSIZE_ANY_EXHDR(value);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	if (len > maxlen)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is too long", what),
				 errdetail("The limit is %d bytes; the value has %d bytes.",
						   maxlen, len)));
	s = text_to_cstring(value);
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c < 0x20 || c == 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must not contain control characters", what),
					 errdetail("Byte %d of the value is 0x%02x.", i + 1, c)));
	}
	return s;
}

/*
 * The category of a stream: the part of its name before the first "-".
 */
char *
esrc_stream_category(const char *stream)
{
	const char *dash = strchr(stream, '-');

	if (dash == NULL)
		return pstrdup(stream);
	return pnstrdup(stream, dash - stream);
}

static char *
check_stream(text *value)
{
	char	   *stream = esrc_check_name(value, "stream name", ESRC_MAX_STREAM_NAME);

	if (stream[0] == '-')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("stream name must not start with \"-\""),
				 errdetail("The category of a stream is the part of its name before the first \"-\", and it must not be empty.")));
	return stream;
}

static void
check_expected(bool isnull, int64 expected)
{
	if (!isnull && expected < EXPECT_EXISTS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("expected_version must be -2, -1, a version >= 0, or null"),
				 errdetail("The value given was " INT64_FORMAT ".", expected),
				 errhint("Use null for any version, -1 for a new stream, -2 for an existing stream.")));
}

static void
check_event_size(int index, Jsonb *data, Jsonb *metadata)
{
	Size		size = VARSIZE(data) + (metadata ? VARSIZE(metadata) : 0);

	if (size > (Size) esrc_max_event_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("event %d is too large", index),
				 errdetail("Its data and metadata take %zu bytes; esrc.max_event_size is %d bytes.",
						   size, esrc_max_event_size),
				 errhint("Store large payloads elsewhere and put a reference in the event.")));
}

static SPIPlanPtr
prepare_plan(SPIPlanPtr *cache, const char *sql, int nargs, Oid *argtypes)
{
	if (*cache == NULL)
	{
		/*
		 * A generic plan: these queries are simple enough that a custom plan
		 * per call would only add planning time to every append.
		 */
		SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, argtypes,
											  CURSOR_OPT_GENERIC_PLAN);

		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 sql, SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		*cache = plan;
	}
	return *cache;
}

/*
 * The head version of a stream, -1 if it has no events.  With latest =
 * true the lookup uses the latest snapshot instead of the one SPI would
 * pick (a new one at READ COMMITTED, the transaction's otherwise).
 */
static int64
stream_head(text *stream, bool latest)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	SPIPlanPtr	plan;
	int			rc;
	bool		isnull;

	plan = prepare_plan(&head_plan,
						"SELECT version FROM esrc.events WHERE stream = $1"
						" ORDER BY version DESC LIMIT 1",
						1, argtypes);
	values[0] = PointerGetDatum(stream);
	if (latest)
		rc = SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(),
								  InvalidSnapshot, true, false, 1);
	else
		rc = SPI_execute_plan(plan, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "stream head lookup failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return -1;
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
									   SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Idempotency.  Returns true and sets *version when every event has an id
 * that is already stored in this stream (a retried append); returns false
 * when none of the ids is stored; raises an error for a mix, or for an id
 * stored in another stream.
 */
static bool
find_existing_ids(const char *stream, int nevents, EventInput *events,
				  int64 *version)
{
	Oid			argtypes[1] = {UUIDARRAYOID};
	Datum	   *ids;
	Datum		values[1];
	int			nids = 0;
	int			rc;
	uint64		i;
	int			j;
	SPIPlanPtr	plan;

	ids = palloc(sizeof(Datum) * nevents);
	for (j = 0; j < nevents; j++)
		if (events[j].id != NULL)
			ids[nids++] = UUIDPGetDatum(events[j].id);
	if (nids == 0)
		return false;

	plan = prepare_plan(&ids_plan,
						"SELECT id, stream, version FROM esrc.events WHERE id = ANY ($1)",
						1, argtypes);
	values[0] = PointerGetDatum(construct_array(ids, nids, UUIDOID,
												UUID_LEN, false, TYPALIGN_CHAR));
	rc = SPI_execute_plan(plan, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "event id lookup failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;

	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		char	   *other = SPI_getvalue(tup, SPI_tuptable->tupdesc, 2);

		if (strcmp(other, stream) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNIQUE_VIOLATION),
					 errmsg("event id %s already exists in stream \"%s\"",
							SPI_getvalue(tup, SPI_tuptable->tupdesc, 1), other),
					 errdetail("Event ids are unique across all streams; the append to stream \"%s\" was not written.",
							   stream)));
	}
	if (SPI_processed != (uint64) nevents)
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("append to stream \"%s\" mixes existing and new event ids", stream),
				 errdetail("%d of its %d events are already stored; nothing was written.",
						   (int) SPI_processed, nevents),
				 errhint("Retry an append with exactly the events of the first attempt, or give new events new ids.")));

	/* all stored here: answer with the version of the last given event */
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		bool		isnull;
		pg_uuid_t  *id = DatumGetUUIDP(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull));

		if (memcmp(id->data, events[nevents - 1].id->data, UUID_LEN) == 0)
		{
			*version = DatumGetInt64(SPI_getbinval(tup, SPI_tuptable->tupdesc, 3, &isnull));
			return true;
		}
	}
	elog(ERROR, "event id lookup lost the last event");	/* not reached */
	return false;
}

static void
raise_version_conflict(const char *stream, int64 expected, int64 head)
{
	char		actual[64];

	if (head < 0)
		snprintf(actual, sizeof(actual), "no stream");
	else
		snprintf(actual, sizeof(actual), "version " INT64_FORMAT, head);

	if (expected == EXPECT_NO_STREAM)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("wrong expected version for stream \"%s\": expected no stream, actual %s",
						stream, actual),
				 errdetail("The stream was created by another append."),
				 errhint("Reload the stream's state and retry the command.")));
	else if (expected == EXPECT_EXISTS)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("wrong expected version for stream \"%s\": expected an existing stream, actual %s",
						stream, actual),
				 errdetail("The stream has no events."),
				 errhint("Create the stream first, or append with expected_version -1 or null.")));
	else
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("wrong expected version for stream \"%s\": expected version " INT64_FORMAT ", actual %s",
						stream, expected, actual),
				 errdetail("Another append changed the stream after the command read its state."),
				 errhint("Reload the stream's state and retry the command.")));
}

/*
 * The lock tag of a stream or category name in key space "space": a 64-bit
 * hash of the name in this database.  snapshot.c uses it too, to take
 * category locks and to recognize events appended under the stream lock.
 */
void
esrc_name_locktag(LOCKTAG *tag, const char *name, uint16 space)
{
	uint64		h = hash_bytes_extended((const unsigned char *) name,
										strlen(name), 0);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 space);
}

static void
lock_stream(const char *stream)
{
	LOCKTAG		tag;

	esrc_name_locktag(&tag, stream, ESRC_STREAM_LOCK_SPACE);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/*
 * Does expected_version "expected" (not null) accept a stream at "head"?
 */
static bool
expected_matches(int64 expected, int64 head)
{
	if (expected == EXPECT_NO_STREAM)
		return head == -1;
	if (expected == EXPECT_EXISTS)
		return head >= 0;
	return expected == head;
}

/*
 * Insert one event at version head + 1, where the head lookup and the
 * expected-version check are part of the INSERT (one executor run for the
 * common case).  Returns the new version, or -1 when the expected version
 * did not match and nothing was inserted.  The stream lock is held, so the
 * head cannot move between the check and the insert.  The INSERT goes
 * through SPI so that row triggers on esrc.events (snapshot.c) fire.
 */
static int64
insert_one(Oid seqoid, text *stream, char *category, EventInput *ev,
		   TimestampTz now, bool expected_isnull, int64 expected)
{
	Oid			argtypes[9] = {INT8OID, TEXTOID, INT8OID, TEXTOID, JSONBOID,
	JSONBOID, UUIDOID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[9];
	char		nulls[9];
	SPIPlanPtr	plan;
	bool		isnull;
	int			rc;

	plan = prepare_plan(&insert_plan,
						"INSERT INTO esrc.events (position, stream, version, type, data,"
						" metadata, id, recorded_at, category)"
						" SELECT $1, $2, h.head + 1, $4, $5, $6, $7, $8, $9"
						" FROM (SELECT coalesce((SELECT e.version FROM esrc.events e"
						"  WHERE e.stream = $2 ORDER BY e.version DESC LIMIT 1), -1) AS head OFFSET 0) h"
						" WHERE $3 IS NULL OR ($3 = -1 AND h.head = -1)"
						"  OR ($3 = -2 AND h.head >= 0) OR ($3 >= 0 AND h.head = $3)"
						" RETURNING version",
						9, argtypes);

	memset(nulls, ' ', sizeof(nulls));
	values[0] = Int64GetDatum(esrc_allocate_position(seqoid));
	values[1] = PointerGetDatum(stream);
	values[2] = Int64GetDatum(expected);
	nulls[2] = expected_isnull ? 'n' : ' ';
	values[3] = CStringGetTextDatum(ev->type);
	values[4] = JsonbPGetDatum(ev->data);
	values[5] = ev->metadata ? JsonbPGetDatum(ev->metadata) : (Datum) 0;
	nulls[5] = ev->metadata ? ' ' : 'n';
	values[6] = ev->id ? UUIDPGetDatum(ev->id)
		: DirectFunctionCall1(gen_random_uuid, (Datum) 0);
	values[7] = TimestampTzGetDatum(now);
	values[8] = CStringGetTextDatum(category);

	rc = SPI_execute_plan(plan, values, nulls, false, 0);
	if (rc != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "event insert failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return -1;
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
									   SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Insert a batch with versions first_version, first_version + 1, ... in one
 * INSERT ... SELECT FROM unnest(arrays): one executor run instead of one
 * per event.  Positions are taken in version order before the insert.
 */
static void
insert_many(Oid seqoid, text *stream, char *category, int64 first_version,
			int nevents, EventInput *events, TimestampTz now)
{
	Oid			argtypes[9] = {INT8ARRAYOID, TEXTOID, INT8ARRAYOID, TEXTARRAYOID,
		JSONBARRAYOID, JSONBARRAYOID, UUIDARRAYOID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[9];
	Datum	   *positions = palloc(sizeof(Datum) * nevents);
	Datum	   *versions = palloc(sizeof(Datum) * nevents);
	Datum	   *types = palloc(sizeof(Datum) * nevents);
	Datum	   *datas = palloc(sizeof(Datum) * nevents);
	Datum	   *metas = palloc(sizeof(Datum) * nevents);
	bool	   *metanulls = palloc(sizeof(bool) * nevents);
	Datum	   *ids = palloc(sizeof(Datum) * nevents);
	int			dims[1] = {nevents};
	int			lbs[1] = {1};
	SPIPlanPtr	plan;
	int			rc;
	int			i;

	plan = prepare_plan(&insert_many_plan,
						"INSERT INTO esrc.events (position, stream, version, type, data,"
						" metadata, id, recorded_at, category)"
						" SELECT p, $2, v, t, d, m, i, $8, $9"
						" FROM unnest($1, $3, $4, $5, $6, $7) AS u(p, v, t, d, m, i)",
						9, argtypes);

	for (i = 0; i < nevents; i++)
	{
		positions[i] = Int64GetDatum(esrc_allocate_position(seqoid));
		versions[i] = Int64GetDatum(first_version + i);
		types[i] = CStringGetTextDatum(events[i].type);
		datas[i] = JsonbPGetDatum(events[i].data);
		metas[i] = events[i].metadata ? JsonbPGetDatum(events[i].metadata) : (Datum) 0;
		metanulls[i] = events[i].metadata == NULL;
		ids[i] = events[i].id ? UUIDPGetDatum(events[i].id)
			: DirectFunctionCall1(gen_random_uuid, (Datum) 0);
	}

	values[0] = PointerGetDatum(construct_array(positions, nevents, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = PointerGetDatum(stream);
	values[2] = PointerGetDatum(construct_array(versions, nevents, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[3] = PointerGetDatum(construct_array(types, nevents, TEXTOID, -1, false, TYPALIGN_INT));
	values[4] = PointerGetDatum(construct_array(datas, nevents, JSONBOID, -1, false, TYPALIGN_INT));
	values[5] = PointerGetDatum(construct_md_array(metas, metanulls, 1, dims, lbs, JSONBOID, -1, false, TYPALIGN_INT));
	values[6] = PointerGetDatum(construct_array(ids, nevents, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
	values[7] = TimestampTzGetDatum(now);
	values[8] = CStringGetTextDatum(category);

	rc = SPI_execute_plan(plan, values, NULL, false, 0);
	if (rc != SPI_OK_INSERT || SPI_processed != (uint64) nevents)
		elog(ERROR, "event batch insert failed: %s", SPI_result_code_string(rc));
}

/*
 * The common append: steps 2-5 of the header comment.  Returns the
 * stream's version after the append.
 */
static int64
append_events(char *stream, int nevents, EventInput *events,
			  bool expected_isnull, int64 expected)
{
	Oid			seqoid;
	text	   *stream_text = cstring_to_text(stream);
	char	   *category = esrc_stream_category(stream);
	int64		head;
	int64		result;
	TimestampTz now = GetCurrentTimestamp();

	esrc_require_shared();
	seqoid = esrc_relation_oid("position_seq");

	lock_stream(stream);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	if (find_existing_ids(stream, nevents, events, &result))
	{
		SPI_finish();
		return result;
	}

	/*
	 * At REPEATABLE READ and above the snapshot may predate the last append
	 * to this stream; appending on top of an event the transaction cannot
	 * see would be a lost update, so fail like PostgreSQL does.
	 */
	if (IsolationUsesXactSnapshot())
	{
		head = stream_head(stream_text, false);
		if (stream_head(stream_text, true) != head)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent append to stream \"%s\"",
							stream),
					 errhint("Retry the transaction.")));
	}

	if (nevents == 1)
	{
		/* the common case: check and insert in one statement */
		result = insert_one(seqoid, stream_text, category, &events[0], now,
							expected_isnull, expected);
		if (result < 0)
			raise_version_conflict(stream, expected, stream_head(stream_text, false));
		SPI_finish();
		return result;
	}

	head = stream_head(stream_text, false);
	if (!expected_isnull && !expected_matches(expected, head))
		raise_version_conflict(stream, expected, head);
	insert_many(seqoid, stream_text, category, head + 1, nevents, events, now);

	SPI_finish();
	return head + nevents;
}

/*
 * esrc.append(stream, type, data, metadata, expected_version, id)
 */
Datum
esrc_append(PG_FUNCTION_ARGS)
{
	char	   *stream = check_stream(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	EventInput ev;

	ev.type = esrc_check_name(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1),
							  "event type", ESRC_MAX_TYPE_NAME);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("event data must not be null"),
				 errhint("Use '{}' or 'null'::jsonb for an event without data.")));
	ev.data = PG_GETARG_JSONB_P(2);
	ev.metadata = PG_ARGISNULL(3) ? NULL : PG_GETARG_JSONB_P(3);
	ev.id = PG_ARGISNULL(5) ? NULL : PG_GETARG_UUID_P(5);
	check_expected(PG_ARGISNULL(4), PG_ARGISNULL(4) ? 0 : PG_GETARG_INT64(4));
	check_event_size(1, ev.data, ev.metadata);

	PG_RETURN_INT64(append_events(stream, 1, &ev, PG_ARGISNULL(4),
								  PG_ARGISNULL(4) ? 0 : PG_GETARG_INT64(4)));
}

/*
 * Raise an error about element "index" (1-based) of an append_batch array.
 */
static void
batch_error(int index, const char *msg, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid event %d in batch: %s", index, msg),
			 detail ? errdetail("%s", detail) : 0,
			 errhint("Each element of events must be an object with the keys \"type\" and \"data\", and optionally \"metadata\" and \"id\".")));
}

/* A JsonbValue as a Jsonb datum of its own. */
static Jsonb *
value_to_jsonb(JsonbValue *v)
{
	return JsonbValueToJsonb(v);
}

/*
 * Parse element i (0-based) of the events array into *ev.
 */
static void
parse_batch_event(JsonbValue *elem, int i, EventInput *ev)
{
	JsonbContainer *obj;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	int			index = i + 1;

	memset(ev, 0, sizeof(*ev));
	if (elem->type != jbvBinary || !JsonContainerIsObject(elem->val.binary.data))
		batch_error(index, "not a JSON object", NULL);
	obj = elem->val.binary.data;

	it = JsonbIteratorInit(obj);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *key;
		JsonbValue	val;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		tok = JsonbIteratorNext(&it, &val, true);
		Assert(tok == WJB_VALUE);

		if (strcmp(key, "type") == 0)
		{
			if (val.type != jbvString)
				batch_error(index, "\"type\" is not a string", NULL);
			ev->type = esrc_check_name(cstring_to_text_with_len(val.val.string.val,
																val.val.string.len),
									   psprintf("event type of event %d", index),
									   ESRC_MAX_TYPE_NAME);
		}
		else if (strcmp(key, "data") == 0)
			ev->data = value_to_jsonb(&val);
		else if (strcmp(key, "metadata") == 0)
			ev->metadata = (val.type == jbvNull) ? NULL : value_to_jsonb(&val);
		else if (strcmp(key, "id") == 0)
		{
			if (val.type == jbvNull)
				continue;
			if (val.type != jbvString)
				batch_error(index, "\"id\" is not a string", NULL);
			ev->id = DatumGetUUIDP(DirectFunctionCall1(uuid_in,
													   CStringGetDatum(pnstrdup(val.val.string.val,
																				val.val.string.len))));
		}
		else
			batch_error(index, psprintf("unknown key \"%s\"", key), NULL);
	}
	if (ev->type == NULL)
		batch_error(index, "\"type\" is missing", NULL);
	if (ev->data == NULL)
		batch_error(index, "\"data\" is missing", "Use {} or null for an event without data.");
	check_event_size(index, ev->data, ev->metadata);
}

/* error context while parsing a batch: which element */
static void
batch_error_context(void *arg)
{
	errcontext("event %d of the batch", *(int *) arg + 1);
}

typedef struct IdRef
{
	pg_uuid_t  *id;
	int			index;
} IdRef;

static int
idref_cmp(const void *a, const void *b)
{
	const IdRef *x = a;
	const IdRef *y = b;
	int			c = memcmp(x->id->data, y->id->data, UUID_LEN);

	if (c != 0)
		return c;
	return (x->index > y->index) - (x->index < y->index);
}

/*
 * An id given twice in one batch would fail at insert time; say so now,
 * clearly, naming the first event that repeats an earlier one.  Sorting
 * keeps this O(n log n) for large batches.
 */
static void
check_duplicate_ids(int nevents, EventInput *events)
{
	IdRef	   *refs = palloc(sizeof(IdRef) * nevents);
	int			nrefs = 0;
	int			dup = -1;
	int			first = -1;
	int			i;

	for (i = 0; i < nevents; i++)
		if (events[i].id != NULL)
		{
			refs[nrefs].id = events[i].id;
			refs[nrefs].index = i;
			nrefs++;
		}
	qsort(refs, nrefs, sizeof(IdRef), idref_cmp);
	for (i = 1; i < nrefs; i++)
		if (memcmp(refs[i].id->data, refs[i - 1].id->data, UUID_LEN) == 0 &&
			(dup < 0 || refs[i].index < dup))
		{
			dup = refs[i].index;
			first = refs[i - 1].index;
		}
	if (dup >= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid event %d in batch: id is the same as the id of event %d",
						dup + 1, first + 1)));
	pfree(refs);
}

/*
 * esrc.append_batch(stream, events jsonb, expected_version)
 */
Datum
esrc_append_batch(PG_FUNCTION_ARGS)
{
	char	   *stream = check_stream(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	Jsonb	   *batch;
	int			nevents;
	EventInput *events;
	ErrorContextCallback errcallback;
	int			i;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("events must not be null")));
	batch = PG_GETARG_JSONB_P(1);
	if (!JB_ROOT_IS_ARRAY(batch) || JB_ROOT_IS_SCALAR(batch))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("events must be a JSON array"),
				 errhint("Pass an array of objects such as [{\"type\": \"Created\", \"data\": {}}].")));
	nevents = JB_ROOT_COUNT(batch);
	if (nevents == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("events must not be an empty array")));
	check_expected(PG_ARGISNULL(2), PG_ARGISNULL(2) ? 0 : PG_GETARG_INT64(2));

	events = palloc(sizeof(EventInput) * nevents);
	errcallback.callback = batch_error_context;
	errcallback.arg = &i;
	errcallback.previous = error_context_stack;
	error_context_stack = &errcallback;
	for (i = 0; i < nevents; i++)
		parse_batch_event(getIthJsonbValueFromContainer(&batch->root, i), i, &events[i]);
	error_context_stack = errcallback.previous;

	check_duplicate_ids(nevents, events);

	PG_RETURN_INT64(append_events(stream, nevents, events, PG_ARGISNULL(2),
								  PG_ARGISNULL(2) ? 0 : PG_GETARG_INT64(2)));
}

/*
 * Trigger function for esrc.events: BEFORE UPDATE OR DELETE (row) and
 * BEFORE TRUNCATE (statement).  The event log is append-only.
 */
PG_FUNCTION_INFO_V1(esrc_events_immutable);

Datum
esrc_events_immutable(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	const char *op = "change";

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("esrc.events_immutable() must be called as a trigger")));
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		op = "update";
	else if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		op = "delete";
	else if (TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
		op = "truncate";

	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("cannot %s events: the esrc event log is append-only", op),
			 errdetail("Stored events are never changed or removed."),
			 errhint("Append a compensating event instead.")));
	PG_RETURN_NULL();			/* not reached */
}
