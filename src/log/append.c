/*-------------------------------------------------------------------------
 *
 * append.c
 *	  The write path: esrc.append(), esrc.append_batch() and esrc.append_if()
 *	  (its condition parsed and checked by query.c).
 *
 * An append, in order:
 *	 1. checks its input (nothing is locked or written for bad input), event
 *		types that begin with "esrc." included: those are esrc's own system
 *		events (22023; log.h), which only esrc_append_system_event writes;
 *	 2. takes the stream lock, a transaction-scoped heavyweight lock on a
 *		64-bit hash of the stream name (an advisory lock tag in a key space
 *		of its own, see ESRC_STREAM_LOCK_SPACE).  Appends to one stream
 *		serialize on it until commit; appends to other streams never wait
 *		for each other;
 *	 3. with the lock held, looks up the event ids it was given
 *		(idempotent retries) and the stream's head version with a fresh
 *		snapshot, so it sees every append that committed before it got the
 *		lock;
 *	 4. refuses a stream erased by esrc.erase_stream (55000; erase.c),
 *		then checks expected_version (SQLSTATE 40001 on a mismatch);
 *	 5. inserts the events with consecutive versions head+1, head+2, ...,
 *		taking global positions from order.c;
 *	 6. counts the call for esrc.metrics (metrics.c: at commit; a
 *		conflict at once).
 *
 * Invariants kept: (stream, version) is unique and gap-free within a
 * stream (the lock makes version head+1 the only one that can be written
 * next; the unique index is the backstop); position order agrees with
 * version order within a stream; event ids are unique.
 *
 * No SQL runs here: the lookups are index scans, and the rows go in
 * through the executor's simple insert (what logical replication's apply
 * uses), so constraints, all indexes and the row triggers of esrc.events
 * -- the snapshot trigger of snapapply.c -- are handled as by an INSERT,
 * without parsing, planning or SPI.  Nothing depends on search_path, so
 * the functions need neither SECURITY DEFINER nor a SET clause: writers
 * hold no privilege on esrc.events, EXECUTE on esrc.append/append_batch
 * is the check, and triggers on esrc.events run as the caller, as for any
 * INSERT (snapapply.c's trigger then writes each snapshot table as that
 * table's owner, security-restricted).  order.c refuses positions while
 * esrc.position_seq is not CACHE 1 / increasing / NO CYCLE.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relscan.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "nodes/makefuncs.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "base/base.h"
#include "log/log.h"
#include "logint.h"

/* esrc.max_event_size (defined by esrc.c) */
int			esrc_max_event_size = ESRC_DEFAULT_MAX_EVENT_SIZE;

/* what the forwarder asks of an append (fwdconf.c sets it); NULL: nothing */
const EsrcAppendGuard *esrc_append_guard = NULL;

PG_FUNCTION_INFO_V1(esrc_append);
PG_FUNCTION_INFO_V1(esrc_append_batch);
PG_FUNCTION_INFO_V1(esrc_append_if);

/* expected_version sentinels */
#define EXPECT_NO_STREAM	(-1)
#define EXPECT_EXISTS		(-2)


static char *
check_user_type(char *type, const char *what)
{
	if (esrc_is_system_type(type, strlen(type)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s \"%s\" is reserved", what, type),
				 errdetail("Event types that begin with \"%s\" are esrc's own (the tombstones of esrc.erase_stream and esrc.delete_stream).",
						   ESRC_RESERVED_TYPE_PREFIX),
				 errhint("Use another event type.")));
	return type;
}

void
esrc_check_expected(bool isnull, int64 expected)
{
	if (!isnull && expected < EXPECT_EXISTS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("expected_version must be -2, -1, a version >= 0, or null"),
				 errdetail("The value given was " INT64_FORMAT ".", expected),
				 errhint("Use null for any version, -1 for a new stream, -2 for an existing stream.")));
}

/*
 * Size checks of one event's data and metadata, before anything is
 * locked: the stored (jsonb) size and the size as JSON text, which is what
 * readers print and what the forwarder sends, are each at most
 * esrc.max_event_size; when this database is forwarded, the text must also
 * fit in one Kafka record (fwdconf.c).
 */
static void
check_event_size(int index, Jsonb *data, Jsonb *metadata, Datum tags)
{
	Size		size = VARSIZE(data) + (metadata ? VARSIZE(metadata) : 0);
	Size		limit = (Size) esrc_max_event_size;
	Size		fwd_limit = esrc_append_guard ? esrc_append_guard->text_limit() : 0;
	Size		text;

	if (fwd_limit > 0 && fwd_limit < limit)
		limit = fwd_limit;
	text = esrc_tags_json_size(tags);
	if (text <= limit)
		text += esrc_jsonb_text_size(data, limit - text);
	if (metadata && text <= limit)
		text += esrc_jsonb_text_size(metadata, limit - text);

	if (text > (Size) esrc_max_event_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("event %d is too large", index),
				 errdetail("Its data, metadata and tags take more than %d bytes as JSON text (what readers and the Kafka forwarder get); esrc.max_event_size is %d bytes.",
						   esrc_max_event_size, esrc_max_event_size),
				 errhint("Store large payloads elsewhere and put a reference in the event.")));
	if (text > limit)
		esrc_append_guard->refuse_text(index, fwd_limit);
	if (size > (Size) esrc_max_event_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("event %d is too large", index),
				 errdetail("Its data and metadata take %zu bytes as stored jsonb; esrc.max_event_size is %d bytes.",
						   size, esrc_max_event_size),
				 errhint("Store large payloads elsewhere and put a reference in the event.")));
}

/*
 * The event log as one append sees it: esrc.events opened for insertion
 * (with its indexes, as an INSERT would open them) and the two unique
 * indexes the lookups use.  Set up by open_log(), after the stream lock.
 */
typedef struct EventLog
{
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;		/* a virtual slot to build rows in */
	TupleTableSlot *scanslot;	/* a slot for rows read from the log */
	Relation	stream_idx;		/* UNIQUE (stream, version) */
	Relation	id_idx;			/* UNIQUE (id) */
} EventLog;

/*
 * An index of rel among the ones ExecOpenIndices() opened: the valid
 * unique btree index on exactly the columns (att1[, att2]).
 */
static Relation
find_unique_index(ResultRelInfo *rri, AttrNumber att1, AttrNumber att2,
				  const char *what)
{
	int			i;

	for (i = 0; i < rri->ri_NumIndices; i++)
	{
		Relation	idx = rri->ri_IndexRelationDescs[i];
		Form_pg_index form = idx->rd_index;
		int			natts = att2 == InvalidAttrNumber ? 1 : 2;

		if (form->indisunique && form->indisvalid && form->indimmediate &&
			idx->rd_rel->relam == BTREE_AM_OID &&
			form->indnkeyatts == natts &&
			form->indkey.values[0] == att1 &&
			(natts == 1 || form->indkey.values[1] == att2) &&
			RelationGetIndexPredicate(idx) == NIL &&
			RelationGetIndexExpressions(idx) == NIL)
			return idx;
	}
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("esrc.events has no unique index on %s", what),
			 errhint("Reinstall the extension; the event log's indexes must not be dropped.")));
	return NULL;				/* not reached */
}

/*
 * An executor state for writing rel (locked RowExclusiveLock by the
 * caller) with ExecSimpleRelationInsert/Update, as logical replication's
 * apply sets one up: one range table entry, one result relation, its
 * indexes open.  *rri is the result relation.  snapapply.c writes
 * snapshot rows with it too.  Free it with esrc_free_write_estate().
 */
EState *
esrc_make_write_estate(Relation rel, ResultRelInfo **rri)
{
	EState	   *estate = CreateExecutorState();
	RangeTblEntry *rte = makeNode(RangeTblEntry);

	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = RELKIND_RELATION;
	rte->rellockmode = RowExclusiveLock;
	esrc_init_range_table(estate, rte);
	*rri = makeNode(ResultRelInfo);
	InitResultRelInfo(*rri, rel, 1, NULL, 0);
	estate->es_opened_result_relations = list_make1(*rri);
	ExecOpenIndices(*rri, false);
	return estate;
}

void
esrc_free_write_estate(EState *estate, ResultRelInfo *rri)
{
	ExecCloseIndices(rri);
	ExecResetTupleTable(estate->es_tupleTable, false);
	FreeExecutorState(estate);
}

/*
 * Open the log for one append: an executor state just for the inserts, as
 * logical replication's apply has, so that constraints, every index and
 * the row triggers of esrc.events (snapapply.c) are handled as by an
 * INSERT, without planning or SPI.  Writers hold no privilege on the
 * table: the function's EXECUTE privilege is the check, and the rows are
 * written by this code, not by SQL the caller could influence.
 */
static void
open_log(EventLog *log)
{
	TupleDesc	desc;

	log->rel = esrc_open_relation("events", RowExclusiveLock);
	esrc_check_log_rowtype(log->rel);
	desc = RelationGetDescr(log->rel);

	log->estate = esrc_make_write_estate(log->rel, &log->rri);
	log->slot = ExecInitExtraTupleSlot(log->estate, desc, &TTSOpsVirtual);
	log->scanslot = ExecInitExtraTupleSlot(log->estate, desc,
										   table_slot_callbacks(log->rel));
	log->stream_idx = find_unique_index(log->rri, Anum_events_stream,
										Anum_events_version, "(stream, version)");
	log->id_idx = find_unique_index(log->rri, Anum_events_id,
									InvalidAttrNumber, "(id)");
}

static void
close_log(EventLog *log)
{
	esrc_free_write_estate(log->estate, log->rri);
	table_close(log->rel, NoLock);
}

/*
 * Start an index scan of idx for rows whose first column equals value,
 * comparing with the index's own equality operator and collation.
 */
static IndexScanDesc
begin_equal_scan(EventLog *log, Relation idx, Datum value, Snapshot snap)
{
	ScanKeyData key;
	IndexScanDesc scan;
	Oid			eqop;

	eqop = get_opfamily_member(idx->rd_opfamily[0], idx->rd_opcintype[0],
							   idx->rd_opcintype[0], BTEqualStrategyNumber);
	if (!OidIsValid(eqop))
		elog(ERROR, "no equality operator for index \"%s\"",
			 RelationGetRelationName(idx));
	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   idx->rd_indcollation[0], get_opcode(eqop), value);
	scan = esrc_index_beginscan(log->rel, idx, snap, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	return scan;
}

/*
 * The 40001 of a transaction whose snapshot (REPEATABLE READ and above)
 * predates an append to the stream it is about to write: appending on top
 * of an event it cannot see would be a lost update, so fail as PostgreSQL
 * does.  Also raised by esrc.erase_stream (erase.c).
 */
void
esrc_concurrent_append_error(const char *stream)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not serialize access due to concurrent append to stream \"%s\"",
					stream),
			 errhint("Retry the transaction.")));
}

/*
 * The head version of a stream as snap sees it, -1 if it has no events:
 * the last entry of the stream in the (stream, version) index.  *redacted:
 * is that event redacted by esrc.erase_stream (a cheap test of the row
 * already fetched; see append_events)?
 */
static int64
stream_head(EventLog *log, text *stream, Snapshot snap, bool *redacted)
{
	IndexScanDesc scan = begin_equal_scan(log, log->stream_idx,
										  PointerGetDatum(stream), snap);
	int64		head = -1;
	bool		isnull;

	*redacted = false;
	if (index_getnext_slot(scan, BackwardScanDirection, log->scanslot))
	{
		bool		datanull;
		bool		metanull;
		Datum		data = slot_getattr(log->scanslot, Anum_events_data, &datanull);

		(void) slot_getattr(log->scanslot, Anum_events_metadata, &metanull);
		head = DatumGetInt64(slot_getattr(log->scanslot, Anum_events_version, &isnull));
		*redacted = esrc_is_redacted(data, datanull, metanull);
	}
	index_endscan(scan);
	ExecClearTuple(log->scanslot);
	return head;
}

/*
 * Idempotency.  Returns true and sets *version when every event has an id
 * that is already stored in this stream (a retried append); returns false
 * when none of the ids is stored; raises an error for a mix, for an id
 * stored in another stream, or for an id that names another event
 * (idcheck.c).  One probe of the id index per given id.
 */
static bool
find_existing_ids(EventLog *log, const char *stream, int nevents,
				  EventInput *events, Snapshot snap, int64 *version)
{
	int			nfound = 0;
	int64		last_version = -1;
	int			j;

	for (j = 0; j < nevents; j++)
	{
		IndexScanDesc scan;
		bool		isnull;

		if (events[j].id == NULL)
			continue;
		scan = begin_equal_scan(log, log->id_idx, UUIDPGetDatum(events[j].id), snap);
		if (index_getnext_slot(scan, ForwardScanDirection, log->scanslot))
		{
			char	   *other = TextDatumGetCString(slot_getattr(log->scanslot,
																 Anum_events_stream,
																 &isnull));

			if (strcmp(other, stream) != 0)
				ereport(ERROR,
						(errcode(ERRCODE_UNIQUE_VIOLATION),
						 errmsg("event id %s already exists in stream \"%s\"",
								DatumGetCString(DirectFunctionCall1(uuid_out,
																	UUIDPGetDatum(events[j].id))),
								other),
						 errdetail("Event ids are unique across all streams; the append to stream \"%s\" was not written.",
								   stream)));
			esrc_check_retry_matches(log->scanslot, events[j].id,
									 events[j].type, events[j].data, events[j].metadata);
			nfound++;
			if (j == nevents - 1)
				last_version = DatumGetInt64(slot_getattr(log->scanslot,
														  Anum_events_version,
														  &isnull));
		}
		index_endscan(scan);
		ExecClearTuple(log->scanslot);
	}
	if (nfound == 0)
		return false;
	if (nfound != nevents)
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("append to stream \"%s\" mixes existing and new event ids", stream),
				 errdetail("%d of its %d events are already stored; nothing was written.",
						   nfound, nevents),
				 errhint("Retry an append with exactly the events of the first attempt, or give new events new ids.")));
	/* all stored here: answer with the version of the last given event */
	*version = last_version;
	return true;
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
 * hash of the name in this database.  The snapshot code uses it too, to
 * take category locks (snapshot.c) and to recognize events appended under
 * the stream lock (snapapply.c).
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
 * Insert events[0 .. nevents-1] with versions first_version, first_version
 * + 1, ..., taking their global positions from order.c in version order.
 * Row triggers fire as for one INSERT statement: the AFTER ROW triggers
 * (snapapply.c) once every row is in, in version order.
 */
static void
insert_events(EventLog *log, Oid seqoid, text *stream, text *category,
			  const char *category_str, int64 first_version, int nevents,
			  EventInput *events, TimestampTz now)
{
	TupleTableSlot *slot = log->slot;
	int			i;

	log->estate->es_output_cid = GetCurrentCommandId(true);
	log->estate->es_snapshot = GetActiveSnapshot();
	AfterTriggerBeginQuery();
	for (i = 0; i < nevents; i++)
	{
		EventInput *ev = &events[i];
		Datum	   *values;
		bool	   *nulls;

		ExecClearTuple(slot);
		values = slot->tts_values;
		nulls = slot->tts_isnull;
		memset(nulls, 0, sizeof(bool) * slot->tts_tupleDescriptor->natts);
		values[Anum_events_position - 1] =
			Int64GetDatum(esrc_allocate_position(seqoid, category_str));
		values[Anum_events_stream - 1] = PointerGetDatum(stream);
		values[Anum_events_version - 1] = Int64GetDatum(first_version + i);
		values[Anum_events_type - 1] = CStringGetTextDatum(ev->type);
		values[Anum_events_data - 1] = JsonbPGetDatum(ev->data);
		if (ev->metadata)
			values[Anum_events_metadata - 1] = JsonbPGetDatum(ev->metadata);
		else
			nulls[Anum_events_metadata - 1] = true;
		values[Anum_events_id - 1] = ev->id ? UUIDPGetDatum(ev->id)
			: DirectFunctionCall1(gen_random_uuid, (Datum) 0);
		values[Anum_events_recorded_at - 1] = TimestampTzGetDatum(now);
		values[Anum_events_category - 1] = PointerGetDatum(category);
		if (slot->tts_tupleDescriptor->natts >= Anum_events_tags)
		{
			values[Anum_events_tags - 1] = ev->tags;
			nulls[Anum_events_tags - 1] = ev->tags == (Datum) 0;
		}
		else if (ev->tags != (Datum) 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("esrc.events has no column tags"),
					 errhint("Update the extension: ALTER EXTENSION esrc UPDATE.")));
		ExecStoreVirtualTuple(slot);

		ExecSimpleRelationInsert(log->rri, log->estate, slot);
	}
	AfterTriggerEndQuery(log->estate);
}

/*
 * Is the head event of stream (as snap sees it) already an event of this
 * type with this data?  For esrc_append_system_event: a second
 * delete_stream with nothing appended in between adds no second tombstone.
 */
static bool
head_is_event(EventLog *log, text *stream, Snapshot snap, const char *type,
			  Jsonb *data)
{
	IndexScanDesc scan = begin_equal_scan(log, log->stream_idx,
										  PointerGetDatum(stream), snap);
	bool		same = false;

	if (index_getnext_slot(scan, BackwardScanDirection, log->scanslot))
	{
		bool		isnull;
		text	   *t = DatumGetTextPP(slot_getattr(log->scanslot, Anum_events_type, &isnull));
		Datum		d = slot_getattr(log->scanslot, Anum_events_data, &isnull);

		same = !isnull &&
			VARSIZE_ANY_EXHDR(t) == strlen(type) &&
			memcmp(VARDATA_ANY(t), type, strlen(type)) == 0 &&
			DatumGetBool(DirectFunctionCall2(jsonb_eq, d, JsonbPGetDatum(data)));
	}
	index_endscan(scan);
	ExecClearTuple(log->scanslot);
	return same;
}

/*
 * The common append: steps 2-5 of the header comment.  Returns the
 * stream's version after the append.
 *
 * system: one event of esrc's own (esrc_append_system_event), appended by
 * esrc.erase_stream or esrc.delete_stream, which hold the stream lock
 * already.  It goes through everything an append does -- the stream lock,
 * positions from order.c (the in-flight registry and the safe horizon),
 * the row triggers -- but not the checks that refuse a user's append: no
 * hard-delete check, no erased check, no idempotency lookup (it has no
 * id), no expected version.  Its head comes from a snapshot taken after
 * the lock at every isolation level (the caller has settled what its own
 * snapshot may miss).  Nothing is appended, and the head is returned, when
 * the stream is erased already (its esrc.erased tombstone is the last word)
 * or when its head is the same event (same type and data).
 */
static int64
append_events(char *stream, int nevents, EventInput *events,
			  bool expected_isnull, int64 expected, bool system,
			  const DcbCondition *cond)
{
	Oid			seqoid;
	text	   *stream_text = cstring_to_text(stream);
	char	   *category_str = esrc_stream_category(stream);
	text	   *category = cstring_to_text(category_str);
	EventLog	log;
	Snapshot	snap;
	int64		head;
	int64		result;
	bool		redacted;
	TimestampTz now = GetCurrentTimestamp();

	esrc_require_shared();
	/* an event of a category without a Kafka topic would block forwarding */
	if (esrc_append_guard)
		esrc_append_guard->check_category(category_str);
	seqoid = esrc_relation_oid("position_seq");

	lock_stream(stream);
	/* the (type, tag) keys of the events and of the condition (tags.c) */
	if (!system)
		esrc_lock_event_keys(nevents, events, cond);
	open_log(&log);

	/*
	 * A snapshot taken after the lock (at READ COMMITTED; the transaction's
	 * at the higher levels), which also sees the rows this transaction
	 * inserted earlier, in this statement too: what a new SQL statement
	 * would see.
	 */
	CommandCounterIncrement();
	PushCopiedSnapshot(system ? GetLatestSnapshot() : GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	snap = GetActiveSnapshot();

	if (system)
	{
		head = stream_head(&log, stream_text, snap, &redacted);
		if ((redacted && esrc_stream_erased(stream, snap, NULL)) ||
			(head >= 0 && head_is_event(&log, stream_text, snap, events[0].type,
										events[0].data)))
		{
			PopActiveSnapshot();
			close_log(&log);
			return head;
		}
		/* a tombstone moves max_count's window like any append (rulebound.c) */
		esrc_rules_mark_append(stream);
		insert_events(&log, seqoid, stream_text, category, category_str,
					  head + 1, nevents, events, now);
		PopActiveSnapshot();
		close_log(&log);
		CommandCounterIncrement();
		return head + nevents;
	}

	/* a stream deleted permanently takes no appends, retries included */
	esrc_rules_check_append(stream);

	if (find_existing_ids(&log, stream, nevents, events, snap, &result))
	{
		PopActiveSnapshot();
		close_log(&log);
		esrc_metrics_append(nevents, true);
		return result;
	}

	head = stream_head(&log, stream_text, snap, &redacted);

	/*
	 * An erased stream takes no new events (docs/lifecycle.md).  erase_stream
	 * redacts every event up to the head under the stream lock, so only a
	 * stream whose head event is redacted can be erased: esrc.erasures is
	 * probed only then.  (An idempotent retry was answered above.)
	 *
	 * At REPEATABLE READ and above the snapshot may predate the last append
	 * to this stream; appending on top of an event the transaction cannot
	 * see would be a lost update, so fail like PostgreSQL does.  The head
	 * a snapshot taken under the lock sees decides whether it was erased.
	 */
	if (IsolationUsesXactSnapshot())
	{
		Snapshot	latest = RegisterSnapshot(GetLatestSnapshot());
		int64		latest_head = stream_head(&log, stream_text, latest, &redacted);

		if (redacted)
			esrc_check_not_erased(stream, latest, true);
		UnregisterSnapshot(latest);
		if (latest_head != head)
		{
			esrc_metrics_conflict();
			esrc_concurrent_append_error(stream);
		}
	}
	else if (redacted)
		esrc_check_not_erased(stream, snap, true);

	if (!expected_isnull && !expected_matches(expected, head))
	{
		esrc_metrics_conflict();
		raise_version_conflict(stream, expected, head);
	}

	/* esrc.append_if: no event matching the condition after its position */
	if (cond != NULL)
		esrc_check_condition(cond, stream);

	insert_events(&log, seqoid, stream_text, category, category_str, head + 1,
				  nevents, events, now);

	PopActiveSnapshot();
	close_log(&log);
	/* later statements, and later appends of this statement, see the rows */
	CommandCounterIncrement();
	esrc_metrics_append(nevents, false);
	return head + nevents;
}

/*
 * Append one system event (log.h) to stream: type is one of esrc's own,
 * data a small object without personal data, metadata null; the caller
 * (erase.c, rules.c) holds the stream lock and has checked that the
 * stream exists.  Returns the version of the event, or the head's when
 * nothing was appended (see append_events).
 */
int64
esrc_append_system_event(const char *stream, const char *type, Jsonb *data)
{
	EventInput	ev;

	Assert(esrc_is_system_type(type, strlen(type)));
	memset(&ev, 0, sizeof(ev));
	ev.type = pstrdup(type);
	ev.data = data;
	return append_events(pstrdup(stream), 1, &ev, true, 0, true, NULL);
}

/*
 * esrc.append(stream, type, data, metadata, expected_version, id)
 */
Datum
esrc_append(PG_FUNCTION_ARGS)
{
	char	   *stream;
	EventInput ev;

	PreventCommandIfReadOnly("esrc.append()");
	stream = esrc_check_stream_name(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	ev.type = check_user_type(esrc_check_name(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1),
											  "event type", ESRC_MAX_TYPE_NAME),
							  "event type");
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("event data must not be null"),
				 errhint("Use '{}' or 'null'::jsonb for an event without data.")));
	ev.data = PG_GETARG_JSONB_P(2);
	ev.metadata = esrc_trace_metadata(PG_ARGISNULL(3) ? NULL : PG_GETARG_JSONB_P(3));
	ev.id = PG_ARGISNULL(5) ? NULL : PG_GETARG_UUID_P(5);
	esrc_check_expected(PG_ARGISNULL(4), PG_ARGISNULL(4) ? 0 : PG_GETARG_INT64(4));
	/* the 0.2.0 esrc.append has no tags argument */
	ev.tags = PG_NARGS() <= 6 || PG_ARGISNULL(6) ? (Datum) 0 :
		esrc_tags_from_array(PG_GETARG_ARRAYTYPE_P(6), "the event");
	check_event_size(1, ev.data, ev.metadata, ev.tags);

	PG_RETURN_INT64(append_events(stream, 1, &ev, PG_ARGISNULL(4),
								  PG_ARGISNULL(4) ? 0 : PG_GETARG_INT64(4),
								  false, NULL));
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
			 errhint("Each element of events must be an object with the keys \"type\" and \"data\", and optionally \"metadata\", \"id\" and \"tags\".")));
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
			ev->type = check_user_type(esrc_check_name(cstring_to_text_with_len(val.val.string.val,
																				val.val.string.len),
													   psprintf("event type of event %d", index),
													   ESRC_MAX_TYPE_NAME),
									   psprintf("event type of event %d", index));
		}
		else if (strcmp(key, "data") == 0)
			ev->data = value_to_jsonb(&val);
		else if (strcmp(key, "metadata") == 0)
			ev->metadata = (val.type == jbvNull) ? NULL : value_to_jsonb(&val);
		else if (strcmp(key, "tags") == 0)
			ev->tags = val.type == jbvNull ? (Datum) 0 :
				esrc_tags_from_jsonb(&val, psprintf("event %d", index));
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
	ev->metadata = esrc_trace_metadata(ev->metadata);
	check_event_size(index, ev->data, ev->metadata, ev->tags);
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
 * Parse and check an events array of append_batch or append_if: nothing is
 * locked or written for bad input.
 */
EventInput *
esrc_parse_batch(Jsonb *batch, int *nevents_out)
{
	int			nevents;
	EventInput *events;
	ErrorContextCallback errcallback;
	int			i;

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

	events = palloc(sizeof(EventInput) * nevents);
	errcallback.callback = batch_error_context;
	errcallback.arg = &i;
	errcallback.previous = error_context_stack;
	error_context_stack = &errcallback;
	for (i = 0; i < nevents; i++)
		parse_batch_event(getIthJsonbValueFromContainer(&batch->root, i), i, &events[i]);
	error_context_stack = errcallback.previous;

	check_duplicate_ids(nevents, events);
	*nevents_out = nevents;
	return events;
}

/* append_events for esrc.append_if (query.c): the input is checked */
int64
esrc_append_checked(char *stream, int nevents, EventInput *events,
					bool expected_isnull, int64 expected,
					const DcbCondition *cond)
{
	return append_events(stream, nevents, events, expected_isnull, expected,
						 false, cond);
}

/*
 * esrc.append_batch(stream, events jsonb, expected_version)
 */
Datum
esrc_append_batch(PG_FUNCTION_ARGS)
{
	char	   *stream;
	int			nevents;
	EventInput *events;

	PreventCommandIfReadOnly("esrc.append_batch()");
	stream = esrc_check_stream_name(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("events must not be null")));
	esrc_check_expected(PG_ARGISNULL(2), PG_ARGISNULL(2) ? 0 : PG_GETARG_INT64(2));
	events = esrc_parse_batch(PG_GETARG_JSONB_P(1), &nevents);

	PG_RETURN_INT64(append_events(stream, nevents, events, PG_ARGISNULL(2),
								  PG_ARGISNULL(2) ? 0 : PG_GETARG_INT64(2),
								  false, NULL));
}

/*
 * esrc.append_if(stream, events jsonb, condition jsonb, expected_version
 * DEFAULT NULL)
 */
Datum
esrc_append_if(PG_FUNCTION_ARGS)
{
	char	   *stream;
	int			nevents;
	EventInput *events;
	DcbCondition *cond;

	PreventCommandIfReadOnly("esrc.append_if()");
	stream = esrc_check_stream_name(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("events must not be null")));
	events = esrc_parse_batch(PG_GETARG_JSONB_P(1), &nevents);
	cond = esrc_condition_arg(fcinfo, 2);
	esrc_check_expected(PG_ARGISNULL(3), PG_ARGISNULL(3) ? 0 : PG_GETARG_INT64(3));
	esrc_check_condition_after(cond);

	PG_RETURN_INT64(esrc_append_checked(stream, nevents, events, PG_ARGISNULL(3),
										PG_ARGISNULL(3) ? 0 : PG_GETARG_INT64(3),
										cond));
}

/*
 * Trigger function for esrc.events: BEFORE UPDATE OR DELETE (row) and
 * BEFORE TRUNCATE (statement).  The event log is append-only; the one
 * exception is the redaction esrc.erase_stream() makes, row by row, which
 * erase.c recognizes (esrc_erasure_permits()).
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
	{
		if (esrc_erasure_permits(trigdata))
			return PointerGetDatum(trigdata->tg_newtuple);
		op = "update";
	}
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
