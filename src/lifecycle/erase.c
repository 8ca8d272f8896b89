/*-------------------------------------------------------------------------
 *
 * erase.c
 *	  The life cycle of the log (issue 16), first slice: esrc.erase_stream()
 *	  and its audit table esrc.erasures.
 *
 * This file owns:
 *	 - the redaction in place (esrc_redactor_*), which erase_stream and the
 *	   scavenger (scavenge.c) share: the one path that writes esrc.events;
 *	 - esrc.erase_stream(stream, reason): redacts every event of a stream in
 *	   place -- data becomes ESRC_ERASED_DATA, metadata NULL; position,
 *	   stream, version, type, id, recorded_at and category stay -- appends
 *	   the stream's tombstone (an esrc.erased event whose data is that
 *	   marker, through append.c's esrc_append_system_event; the Kafka
 *	   forwarder sends it with a null value), removes the stream's rows
 *	   from the snapshot tables of its category, and records the erasure
 *	   in esrc.erasures, all in the caller's transaction;
 *	 - the trigger that keeps esrc.erasures append-only.
 * The log's side of an erasure is redaction.c's: the one exception to the
 * immutability of esrc.events (each row is redacted through
 * esrc_redact_row, which the immutability trigger lets pass), and the
 * answer to "is this stream erased?" that append.c and the snapshot code
 * ask.
 *
 * Invariants kept:
 *	 - an event is never removed and no column but data and metadata ever
 *	   changes, so versions stay contiguous, idempotent retries still find
 *	   their ids and readers never see a hole;
 *	 - an UPDATE of esrc.events passes the (ENABLE ALWAYS) immutability
 *	   trigger only while erase_stream() is updating exactly that row
 *	   (same relation, same tuple id) and only if the new row is exactly the
 *	   redaction of the old one (redaction.c), so a user's UPDATE is
 *	   refused even in a transaction that erased a stream;
 *	 - an erase and an append of the same stream serialize on append.c's
 *	   stream lock; the category lock is taken in ShareLock mode as an
 *	   append does, so create_snapshot/drop_snapshot do not run alongside;
 *	 - the redaction is paced by erasecost.c (esrc.erase_cost_delay,
 *	   esrc.erase_cost_limit): it naps between slices holding all of the
 *	   locks above, so appends to the erased stream wait for the naps too.
 *
 * The log is written as append.c writes it: index scans and the
 * executor's simple update (ExecSimpleRelationUpdate, with the row
 * triggers of esrc.events), no SQL.  The snapshot tables and esrc.erasures
 * are written with SQL through SPI as each table's owner, in the owner
 * context (ownerctx.c's esrc_run_as_owner: security-restricted,
 * search_path pinned), as the snapshot code writes snapshot tables.  EXECUTE on
 * esrc.erase_stream (granted to esrc_admin) is the privilege check.
 *
 * Not erased here (docs/lifecycle.md): the old row versions and TOAST
 * chunks until VACUUM (and their bytes in free page space even after
 * it), WAL and backups, copies already forwarded to Kafka or read by
 * consumers, stream names and event types.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/itemptr.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "log/log.h"
#include "lifecycle/lifecycle.h"
#include "lifecycleint.h"

PG_FUNCTION_INFO_V1(esrc_erase_stream);
PG_FUNCTION_INFO_V1(esrc_erasures_immutable);

/*
 * The snapshot tables of a category (esrc.snapshots, read as its owner),
 * each locked ShareUpdateExclusiveLock: it conflicts with the lock of
 * rebuild_snapshot (online and in place) but not with the RowExclusiveLock
 * of appends or with readers, so that an erase waits for a rebuild in
 * progress and a rebuild waits for the erase -- an online rebuild that
 * folded the stream before the erase would otherwise swap its row back in.
 * Returns the number of tables; their oids in *relids
 * (CurrentMemoryContext).
 */
static int
category_snapshots(const char *category, Oid **relids)
{
	static const char *sql =
		"SELECT s.snapshot::pg_catalog.oid FROM esrc.snapshots s "
		"WHERE s.category OPERATOR(pg_catalog.=) $1 "
		"ORDER BY s.snapshot::pg_catalog.oid";
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	int			n;
	int			i;

	values[0] = CStringGetTextDatum(category);
	esrc_run_as_owner(esrc_relation_owner(esrc_relation_oid("snapshots")), sql, 1,
					  argtypes, values, NULL, SPI_OK_SELECT);
	n = (int) SPI_processed;
	*relids = palloc(sizeof(Oid) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		(*relids)[i] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
													  SPI_tuptable->tupdesc, 1,
													  &isnull));
	}
	for (i = 0; i < n; i++)
		LockRelationOid((*relids)[i], ShareUpdateExclusiveLock);
	return n;
}

/*
 * Delete the stream's row from each snapshot table, as the table's owner.
 * A table dropped meanwhile is skipped.
 */
static void
delete_snapshot_rows(int n, Oid *relids, const char *stream)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	int			i;

	values[0] = CStringGetTextDatum(stream);
	for (i = 0; i < n; i++)
	{
		char	   *relname = get_rel_name(relids[i]);
		char	   *nspname;
		char	   *sql;

		if (relname == NULL)
			continue;
		nspname = get_namespace_name(get_rel_namespace(relids[i]));
		sql = psprintf("DELETE FROM %s WHERE stream OPERATOR(pg_catalog.=) $1",
					   quote_qualified_identifier(nspname, relname));
		esrc_run_as_owner(esrc_relation_owner(relids[i]), sql, 1, argtypes, values,
						  NULL, SPI_OK_DELETE);
	}
}

/*
 * Record one call of a life-cycle function in esrc.erasures, as the
 * table's owner; rules may be NULL, and stream too (a scavenge, which
 * spans streams).  Inside an SPI connection.
 */
void
esrc_record_erasure(const char *what, const char *stream, int64 events,
					const char *reason, Jsonb *rules, Oid session_user,
					Oid current_user)
{
	static const char *sql =
		"INSERT INTO esrc.erasures (what, stream, events, reason, "
		"session_user_name, current_user_name, rules) "
		"VALUES ($1, $2, $3, $4, $5, $6, $7)";
	Oid			argtypes[7] = {TEXTOID, TEXTOID, INT8OID, TEXTOID, NAMEOID, NAMEOID, JSONBOID};
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};

	values[0] = CStringGetTextDatum(what);
	values[1] = stream ? CStringGetTextDatum(stream) : (Datum) 0;
	nulls[1] = stream ? ' ' : 'n';
	values[2] = Int64GetDatum(events);
	values[3] = CStringGetTextDatum(reason);
	values[4] = DirectFunctionCall1(namein,
									CStringGetDatum(GetUserNameFromId(session_user, false)));
	values[5] = DirectFunctionCall1(namein,
									CStringGetDatum(GetUserNameFromId(current_user, false)));
	values[6] = rules ? JsonbPGetDatum(rules) : (Datum) 0;
	nulls[6] = rules ? ' ' : 'n';
	esrc_run_as_owner(esrc_relation_owner(esrc_relation_oid("erasures")), sql, 7,
					  argtypes, values, nulls, SPI_OK_INSERT);
}

/*
 * The valid unique btree index of esrc.events on (stream, version) among
 * those ExecOpenIndices() opened.
 */
static Relation
stream_index(ResultRelInfo *rri)
{
	int			i;

	for (i = 0; i < rri->ri_NumIndices; i++)
	{
		Relation	idx = rri->ri_IndexRelationDescs[i];
		Form_pg_index form = idx->rd_index;

		if (form->indisunique && form->indisvalid &&
			idx->rd_rel->relam == BTREE_AM_OID &&
			form->indnkeyatts == 2 &&
			form->indkey.values[0] == Anum_events_stream &&
			form->indkey.values[1] == Anum_events_version &&
			RelationGetIndexPredicate(idx) == NIL &&
			RelationGetIndexExpressions(idx) == NIL)
			return idx;
	}
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("esrc.events has no unique index on (stream, version)"),
			 errhint("Reinstall the extension; the event log's indexes must not be dropped.")));
	return NULL;				/* not reached */
}

/*
 * The only BEFORE UPDATE row trigger of esrc.events must be
 * events_immutable: another one, firing after it, could change the row
 * the immutability trigger let pass.
 */
static void
check_update_triggers(Relation rel)
{
	TriggerDesc *td = rel->trigdesc;
	int			i;

	if (td == NULL)
		return;
	for (i = 0; i < td->numtriggers; i++)
	{
		Trigger    *t = &td->triggers[i];

		if (TRIGGER_FOR_ROW(t->tgtype) && TRIGGER_FOR_BEFORE(t->tgtype) &&
			TRIGGER_FOR_UPDATE(t->tgtype) && t->tgenabled != TRIGGER_DISABLED &&
			strcmp(t->tgname, "events_immutable") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("cannot erase events while esrc.events has the BEFORE UPDATE trigger \"%s\"",
							t->tgname),
					 errdetail("Only the trigger events_immutable may run before an update of the event log."),
					 errhint("Drop or disable the trigger, or make it an AFTER trigger.")));
	}
}

/*
 * The tuple ids of the stream's events with lo <= version < hi under snap,
 * in version order, and of those not yet redacted (*todo, *ntodo), at most
 * limit of these (-1: all).  Returns the number of events examined; with
 * next_version not NULL, *next_version is the version after the last one
 * examined (lo if none was).
 */
static int64
stream_rows(Relation rel, Relation idx, TupleTableSlot *slot, Datum stream,
			int64 lo, int64 hi, int64 limit, Snapshot snap,
			ItemPointer *todo, int64 *ntodo, int64 *next_version)
{
	ScanKeyData keys[3];
	IndexScanDesc scan;
	int64		nrows = 0;
	int64		cap = 16;
	int			nkeys = 1;

	*todo = palloc(sizeof(ItemPointerData) * cap);
	*ntodo = 0;
	if (next_version != NULL)
		*next_version = lo;
	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   idx->rd_indcollation[0], F_TEXTEQ, stream);
	if (lo > 0)
		ScanKeyEntryInitialize(&keys[nkeys++], 0, 2, BTGreaterEqualStrategyNumber,
							   InvalidOid, InvalidOid, F_INT8GE, Int64GetDatum(lo));
	if (hi < PG_INT64_MAX)
		ScanKeyEntryInitialize(&keys[nkeys++], 0, 2, BTLessStrategyNumber,
							   InvalidOid, InvalidOid, F_INT8LT, Int64GetDatum(hi));
	scan = esrc_index_beginscan(rel, idx, snap, nkeys, 0);
	index_rescan(scan, keys, nkeys, NULL, 0);
	while ((limit < 0 || *ntodo < limit) &&
		   index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		datanull;
		bool		metanull;
		bool		isnull;
		Datum		data = slot_getattr(slot, Anum_events_data, &datanull);

		(void) slot_getattr(slot, Anum_events_metadata, &metanull);
		CHECK_FOR_INTERRUPTS();
		nrows++;
		if (next_version != NULL)
			*next_version = DatumGetInt64(slot_getattr(slot, Anum_events_version,
													   &isnull)) + 1;
		/* raw sizes first: a TOASTed data is not fetched */
		if (esrc_is_redacted(data, datanull, metanull))
			continue;			/* redacted already */
		if (*ntodo == cap)
		{
			cap *= 2;
			*todo = repalloc_huge(*todo, sizeof(ItemPointerData) * cap);
		}
		(*todo)[(*ntodo)++] = slot->tts_tid;
	}
	index_endscan(scan);
	return nrows;
}

/* The version of the stream's last event under snap; -1 if none. */
static int64
stream_head(Relation rel, Relation idx, TupleTableSlot *slot, Datum stream,
			Snapshot snap)
{
	ScanKeyData key;
	IndexScanDesc scan;
	int64		head = -1;

	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   idx->rd_indcollation[0], F_TEXTEQ, stream);
	scan = esrc_index_beginscan(rel, idx, snap, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	if (index_getnext_slot(scan, BackwardScanDirection, slot))
	{
		bool		isnull;

		head = DatumGetInt64(slot_getattr(slot, Anum_events_version, &isnull));
	}
	index_endscan(scan);
	return head;
}

/*
 * Redact the rows todo[0 .. ntodo - 1] of esrc.events, each with the
 * executor's simple update (row triggers fire as for an UPDATE), each in
 * its own erase window, napping as esrc.erase_cost_delay and
 * esrc.erase_cost_limit say (erasecost.c) with every lock of the erase
 * held; *cost says how often and how long.  cost NULL: no naps (the
 * scavenger, whose slices are bounded by esrc.scavenge_max_events).
 */
static void
redact_rows(Relation rel, EState *estate, ResultRelInfo *rri,
			ItemPointer todo, int64 ntodo, Datum marker, Snapshot snap,
			EsrcEraseCost *cost)
{
	TupleDesc	desc = RelationGetDescr(rel);
	TupleTableSlot *oldslot = ExecInitExtraTupleSlot(estate, desc,
													 table_slot_callbacks(rel));
	TupleTableSlot *newslot = ExecInitExtraTupleSlot(estate, desc, &TTSOpsVirtual);
	EPQState	epq;
	int64		i;

	estate->es_output_cid = GetCurrentCommandId(true);
	estate->es_snapshot = snap;
	esrc_epq_init(&epq, estate);
	AfterTriggerBeginQuery();
	if (cost != NULL)
		esrc_erase_cost_begin(cost);
	for (i = 0; i < ntodo; i++)
	{
		int64		work;

		CHECK_FOR_INTERRUPTS();
		if (!table_tuple_fetch_row_version(rel, &todo[i], snap, oldslot))
			elog(ERROR, "event row (%u,%u) of esrc.events vanished during an erase",
				 ItemPointerGetBlockNumber(&todo[i]),
				 ItemPointerGetOffsetNumber(&todo[i]));
		slot_getallattrs(oldslot);
		work = esrc_erase_row_cost(oldslot->tts_values[Anum_events_data - 1],
								   oldslot->tts_isnull[Anum_events_data - 1],
								   oldslot->tts_values[Anum_events_metadata - 1],
								   oldslot->tts_isnull[Anum_events_metadata - 1]);
		ExecClearTuple(newslot);
		memcpy(newslot->tts_values, oldslot->tts_values, sizeof(Datum) * oldslot->tts_tupleDescriptor->natts);
		memcpy(newslot->tts_isnull, oldslot->tts_isnull, sizeof(bool) * oldslot->tts_tupleDescriptor->natts);
		newslot->tts_values[Anum_events_data - 1] = marker;
		newslot->tts_isnull[Anum_events_data - 1] = false;
		newslot->tts_values[Anum_events_metadata - 1] = (Datum) 0;
		newslot->tts_isnull[Anum_events_metadata - 1] = true;
		ExecStoreVirtualTuple(newslot);

		esrc_redact_row(rri, estate, &epq, oldslot, newslot, &todo[i], marker);
		ResetPerTupleExprContext(estate);
		if (cost != NULL)
			esrc_erase_cost_point(cost, work);
	}
	AfterTriggerEndQuery(estate);
	EvalPlanQualEnd(&epq);
}

/* ----------------------------------------------------------------
 * The redaction in place, shared by erase_stream() and scavenge.c
 * ----------------------------------------------------------------
 */

/*
 * Open esrc.events for redaction: RowExclusiveLock, its row type and
 * update triggers checked, an executor state for the simple update, the
 * unique index on (stream, version).  The caller holds the stream lock of
 * every stream it will redact (taken before this for the first one, as an
 * append takes it before the log).
 */
void
esrc_redactor_open(EsrcRedactor *r)
{
	r->rel = esrc_open_relation("events", RowExclusiveLock);
	esrc_check_log_rowtype(r->rel);
	check_update_triggers(r->rel);
	r->estate = esrc_make_write_estate(r->rel, &r->rri);
	r->idx = stream_index(r->rri);
	r->scanslot = ExecInitExtraTupleSlot(r->estate, RelationGetDescr(r->rel),
										 table_slot_callbacks(r->rel));
	r->marker = esrc_erased_marker();
}

/*
 * The events of stream with lo <= version < hi under snap that are not
 * redacted yet, at most limit (-1: all): their tuple ids in *todo (version
 * order).  Returns the number of events examined; *next_version (if not
 * NULL) is the version after the last one examined.
 */
int64
esrc_redactor_collect(EsrcRedactor *r, Datum stream, int64 lo, int64 hi,
					  int64 limit, Snapshot snap, ItemPointer *todo,
					  int64 *ntodo, int64 *next_version)
{
	return stream_rows(r->rel, r->idx, r->scanslot, stream, lo, hi, limit, snap,
					   todo, ntodo, next_version);
}

/*
 * Redact the rows collected (the stream lock held, snap as collected).
 * Runs in the executor state's memory, which lives until
 * esrc_redactor_close(): the slots, the trigger functions' lookups and
 * the like it creates are kept in lists of the state, so they must not go
 * with a shorter context of the caller's (the scavenger resets one per
 * stream).  cost: the pacing of redact_rows (NULL for none).
 */
void
esrc_redactor_redact(EsrcRedactor *r, ItemPointer todo, int64 ntodo, Snapshot snap,
					 EsrcEraseCost *cost)
{
	MemoryContext old;

	if (ntodo == 0)
		return;
	old = MemoryContextSwitchTo(r->estate->es_query_cxt);
	redact_rows(r->rel, r->estate, r->rri, todo, ntodo, r->marker, snap, cost);
	MemoryContextSwitchTo(old);
}

/* Free the executor state; esrc.events stays locked to the end of the transaction. */
void
esrc_redactor_close(EsrcRedactor *r)
{
	esrc_free_write_estate(r->estate, r->rri);
	table_close(r->rel, NoLock);
}

/*
 * The reason of a life-cycle call (NULL if the argument was NULL): required,
 * since it is recorded in esrc.erasures.  what completes "Say why the ...".
 */
char *
esrc_check_reason(text *reason, const char *what)
{
	if (reason == NULL || VARSIZE_ANY_EXHDR(reason) == 0)
		ereport(ERROR,
				(errcode(reason == NULL ? ERRCODE_NULL_VALUE_NOT_ALLOWED : ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("reason must not be %s", reason == NULL ? "null" : "empty"),
				 errhint("Say why the %s; it is recorded in esrc.erasures.", what)));
	return text_to_cstring(reason);
}

/*
 * esrc.erase_stream(stream, reason) -> bigint: the number of events
 * redacted.  See the header comment; docs/lifecycle.md is the reference.
 * A stream with no events is an error (42704); a stream whose events are
 * all redacted already is a no-op that returns 0 and is recorded too.
 */
Datum
esrc_erase_stream(PG_FUNCTION_ARGS)
{
	char	   *stream;
	char	   *category;
	char	   *reason;
	Datum		stream_datum;
	LOCKTAG		tag;
	EsrcRedactor red;
	Snapshot	snap;
	Oid		   *snapshot_relids;
	int			nsnapshots;
	ItemPointer todo;
	int64		ntodo;
	int64		nrows;
	EsrcEraseCost cost;
	Oid			session_user = GetSessionUserId();
	Oid			current_user = GetUserId();

	/* the log is written without the executor's read-only check */
	PreventCommandIfReadOnly("esrc.erase_stream()");
	stream = esrc_check_name(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
							 "stream name", ESRC_MAX_STREAM_NAME);
	reason = esrc_check_reason(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1),
							   "stream is erased");
	category = esrc_stream_category(stream);
	stream_datum = CStringGetTextDatum(stream);

	/* the locks of an append, in its order: stream, log, category, snapshots */
	esrc_name_locktag(&tag, stream, ESRC_STREAM_LOCK_SPACE);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	esrc_redactor_open(&red);
	esrc_name_locktag(&tag, category, ESRC_CATEGORY_LOCK_SPACE);
	(void) LockAcquire(&tag, ShareLock, false, false);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	nsnapshots = category_snapshots(category, &snapshot_relids);

	/* a snapshot taken after the locks, as an append takes one */
	CommandCounterIncrement();
	PushCopiedSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	snap = GetActiveSnapshot();

	nrows = esrc_redactor_collect(&red, stream_datum, 0, PG_INT64_MAX, -1, snap,
								  &todo, &ntodo, NULL);
	if (nrows == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream \"%s\" does not exist", stream),
				 errdetail("The stream has no events.")));

	/*
	 * At REPEATABLE READ and above the snapshot may predate the last append
	 * to the stream; an erase that left such events unredacted would lie, so
	 * fail like an append does.
	 */
	if (IsolationUsesXactSnapshot())
	{
		Snapshot	latest = RegisterSnapshot(GetLatestSnapshot());
		int64		latest_head = stream_head(red.rel, red.idx, red.scanslot,
											  stream_datum, latest);
		int64		head = stream_head(red.rel, red.idx, red.scanslot, stream_datum, snap);

		UnregisterSnapshot(latest);
		if (latest_head != head)
			esrc_concurrent_append_error(stream);
	}

	esrc_redactor_redact(&red, todo, ntodo, snap, &cost);
	ereport(DEBUG1,
			(errmsg_internal("esrc.erase_stream: %lld events redacted, %lld naps",
							 (long long) ntodo, (long long) cost.naps),
			 errdetail_internal("Slept %.1f ms (esrc.erase_cost_delay = %d ms, esrc.erase_cost_limit = %d bytes).",
								cost.slept_us / 1000.0, cost.delay_ms, cost.limit)));
	PopActiveSnapshot();
	esrc_redactor_close(&red);

	/*
	 * The tombstone, at the next version, before the erasure is recorded:
	 * append.c appends none to a stream that esrc.erasures says is erased
	 * already, so erasing twice adds none.  Its data is the marker, so the
	 * stream's head stays redacted (the cheap test of append.c).
	 */
	(void) esrc_append_system_event(stream, ESRC_TYPE_ERASED,
									DatumGetJsonbP(red.marker));

	delete_snapshot_rows(nsnapshots, snapshot_relids, stream);
	esrc_record_erasure("erase_stream", stream, ntodo, reason, NULL,
						session_user, current_user);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	PG_RETURN_INT64(ntodo);
}

/* Trigger of esrc.erasures: the record of erasures is append-only. */
Datum
esrc_erasures_immutable(PG_FUNCTION_ARGS)
{
	esrc_refuse_change(fcinfo, "esrc.erasures_immutable", "esrc.erasures", "erasures",
					   "Every erasure stays recorded.");
}
