/*-------------------------------------------------------------------------
 *
 * snapbuild.c
 *	  Filling a snapshot table from the event log in place, and the
 *	  functions that do it: esrc.create_snapshot and esrc.drop_snapshot;
 *	  the fold of a category that esrc.rebuild_snapshot (snaprebuild.c)
 *	  shares.
 *
 * A replay reads the category's events with read.c's index scan, sorts
 * them by stream and version in a tuplesort (bounded memory), folds each
 * stream through the reducer (snapshot.c) and hands one row per stream to
 * a writer: here, an INSERT through SPI as the table's owner after the
 * table was emptied; in snaprebuild.c, a heap insert into a new heap.
 * The locks that make it safe against concurrent appends -- the category
 * lock taken by create and drop, and those of rebuild -- and what runs as
 * whom are described at the top of snapshot.c.
 *
 * Talks to: snapshot.c (definitions, locks, checks, the catalog writes,
 * the fold, through snapshotint.h), read.c (the category's index scan),
 * src/sql/10_snapshot.sql (the SQL functions).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "commands/tablecmds.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplesort.h"

#include "base/base.h"
#include "log/log.h"
#include "snapshotint.h"

PG_FUNCTION_INFO_V1(esrc_create_snapshot);
PG_FUNCTION_INFO_V1(esrc_drop_snapshot);

/* ----------------------------------------------------------------
 * Replaying the event log into a snapshot table
 * ----------------------------------------------------------------
 */

/* A SnapRowWriter: insert the fold's row through SQL, as the table's owner. */
static void
write_row(Fold *f, TimestampTz now, void *arg)
{
	SnapshotDef *def = f->def;
	Datum		values[4];
	int			rc;
	EsrcOwnerContext ctx;

	values[0] = CStringGetTextDatum(f->stream);
	values[1] = Int64GetDatum(f->next_version - 1);
	values[2] = f->state;
	values[3] = TimestampTzGetDatum(now);
	/* inside snap_with_fold's reducer context: search_path is pinned */
	esrc_owner_enter(&ctx, def->owner, 0);
	rc = SPI_execute_plan(snap_def_plan(def, PLAN_INSERT), values, NULL, false, 0);
	esrc_owner_leave(&ctx);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "snapshot row insert failed: %s", SPI_result_code_string(rc));
}

/*
 * Is the stream whose first event (lowest version) is in slot erased, as
 * snap sees esrc.erasures?  erase_stream redacts every event of a stream,
 * its first one included, and appends to an erased stream are refused, so
 * esrc.erasures is probed only for a stream whose first event is redacted:
 * no cost for the others, and no memory beyond one stream.
 */
static bool
erased_stream(TupleTableSlot *slot, const char *stream, Snapshot snap)
{
	if (!esrc_is_redacted(slot->tts_values[Anum_events_data - 1],
						  slot->tts_isnull[Anum_events_data - 1],
						  slot->tts_isnull[Anum_events_metadata - 1]))
		return false;
	return esrc_stream_erased(stream, snap, NULL);
}

/*
 * Fold the category's events at positions <= hi, stream by stream, and
 * hand each stream's final state to write (then f->stream, f->state and
 * f->next_version - 1 describe the row).  Streams erased by
 * esrc.erase_stream get no row (erased_stream).  Runs inside
 * snap_with_fold().
 *
 * The events are read, as the caller, by an index scan of the category in
 * esrc.events (logscan.c), so the cost follows the size of the category, not
 * of the log, and sorted by stream (in the "C" order, the cheapest) and
 * version in a tuplesort, which spills to disk past work_mem: bounded
 * memory for a category of any size.
 */
void
snap_fold_sorted(Fold *f, Snapshot snap, int64 hi, SnapRowWriter write, void *arg)
{
	TimestampTz now = GetCurrentTimestamp();
	AttrNumber	sortcols[2] = {2, 3};	/* stream, version */
	Oid			sortops[2] = {TextLessOperator, Int8LessOperator};
	Oid			collations[2] = {C_COLLATION_OID, InvalidOid};
	bool		nullsfirst[2] = {false, false};
	Tuplesortstate *sort;
	TupleTableSlot *inslot;
	TupleTableSlot *outslot;
	TupleTableSlot *slot;
	EsrcLogScan *scan;
	char	   *current = NULL; /* the stream being read */
	bool		have_stream = false;	/* and folded: not erased */

	/* read the category's events as the caller, with snap */
	sort = tuplesort_begin_heap(snap_cache.event_desc, 2, sortcols, sortops, collations,
								nullsfirst, work_mem, NULL, TUPLESORT_NONE);
	inslot = MakeSingleTupleTableSlot(snap_cache.event_desc, &TTSOpsVirtual);
	outslot = MakeSingleTupleTableSlot(snap_cache.event_desc, &TTSOpsMinimalTuple);
	scan = esrc_log_begin(ESRC_LOG_BY_CATEGORY, CStringGetTextDatum(f->def->category),
						  PG_INT64_MIN, hi, ForwardScanDirection, snap);
	while ((slot = esrc_log_next(scan)) != NULL)
	{
		ExecClearTuple(inslot);
		esrc_event_values(slot, snap_cache.event_desc->natts, inslot->tts_values,
						  inslot->tts_isnull);
		ExecStoreVirtualTuple(inslot);
		tuplesort_puttupleslot(sort, inslot);
	}
	esrc_log_end(scan);
	ExecDropSingleTupleTableSlot(inslot);
	tuplesort_performsort(sort);

	while (tuplesort_gettupleslot(sort, true, false, outslot, NULL))
	{
		char	   *stream;

		CHECK_FOR_INTERRUPTS();
		slot_getallattrs(outslot);
		stream = TextDatumGetCString(outslot->tts_values[Anum_events_stream - 1]);
		if (current == NULL || strcmp(stream, current) != 0)
		{
			if (have_stream)
				write(f, now, arg);
			if (current != NULL)
				pfree(current);
			current = stream;
			have_stream = !erased_stream(outslot, stream, snap);
			if (have_stream)
				snap_fold_start(f, stream);
		}
		else
			pfree(stream);
		if (have_stream)
			snap_fold_apply(f, outslot->tts_values, outslot->tts_isnull);
	}
	if (have_stream)
		write(f, now, arg);
	ExecDropSingleTupleTableSlot(outslot);
	tuplesort_end(sort);
}

/*
 * Run body(f, arg) with a fold of def's reducer: in the reducer GUC
 * context, with snapshot_busy set, and the caller's user and security
 * context restored however it ends.  Returns the events the fold applied.
 */
int64
snap_with_fold(SnapshotDef *def, void (*body) (Fold *f, void *arg), void *arg)
{
	Fold		f;
	int64		applied;
	EsrcOwnerContext ctx;

	/* the reducer context (snapshot.c), no user switch */
	esrc_owner_enter(&ctx, InvalidOid, ESRC_OWNER_PIN_PATH);
	snap_fold_init(&f, def);
	snapshot_busy = true;
	PG_TRY();
	{
		body(&f, arg);
	}
	PG_FINALLY();
	{
		snapshot_busy = false;
		esrc_owner_restore_user(&ctx);
	}
	PG_END_TRY();
	esrc_owner_leave(&ctx);
	applied = f.applied;
	snap_fold_end(&f);
	return applied;
}

/* snap_replay_in_place()'s fold: empty the table as its owner, then refill it. */
static void
replay_body(Fold *f, void *arg)
{
	Snapshot	snap = (Snapshot) arg;
	SnapshotDef *def = f->def;
	EsrcOwnerContext ctx;
	int			rc;

	esrc_owner_enter(&ctx, def->owner, 0);
	rc = SPI_execute_snapshot(snap_def_plan(def, PLAN_DELETE_ALL), NULL, NULL, snap,
							  InvalidSnapshot, false, true, 0);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "snapshot delete failed: %s", SPI_result_code_string(rc));
	esrc_owner_leave(&ctx);
	snap_fold_sorted(f, snap, PG_INT64_MAX, write_row, NULL);
}

/*
 * Recompute the table of def from the stored events of its category, in
 * place.  The caller holds the category lock (create) or ExclusiveLock on
 * the table (a rebuild that cannot be done online, snaprebuild.c), so no
 * append of the category can write the table until we commit, and has an
 * SPI connection.  We read with a snapshot taken now, after those locks,
 * whatever the isolation level: it sees every append that wrote the table
 * before us.  Returns the number of events applied.
 */
int64
snap_replay_in_place(SnapshotDef *def)
{
	Snapshot	snap;
	int64		applied;

	snap_raise_if_broken(def);
	snap = RegisterSnapshot(GetLatestSnapshot());
	applied = snap_with_fold(def, replay_body, snap);
	UnregisterSnapshot(snap);
	return applied;
}

/* ----------------------------------------------------------------
 * Creating, rebuilding and dropping snapshots
 * ----------------------------------------------------------------
 */

static void
run_sql(const char *sql, int expected_rc)
{
	int			rc = SPI_execute(sql, false, 0);

	if (rc != expected_rc)
		elog(ERROR, "\"%s\" failed: %s", sql, SPI_result_code_string(rc));
}

/*
 * esrc.create_snapshot(snapshot, category, reducer, initial_state,
 * if_not_exists)
 *
 * The table is created by the caller (who owns it, and whose reducer and
 * table rights are checked); only the catalog row is written as the owner
 * of esrc.snapshots.  Its readers get what snapmanage.c can grant.  Holds the category lock in ExclusiveLock mode until
 * the transaction ends: appends to the category wait, then see the new
 * snapshot and its filled rows.
 */
Datum
esrc_create_snapshot(PG_FUNCTION_ARGS)
{
	RangeVar   *rv;
	char	   *category;
	Oid			reducer;
	Jsonb	   *initial_state;
	Oid			nsp;
	char	   *qualname;
	Oid			relid;
	int64		applied;
	Oid			argtypes[4] = {REGCLASSOID, TEXTOID, TEXTOID, JSONBOID};
	Datum		values[4];

	/* PG_NARGS: the 0.2.0 SQL function, before ALTER EXTENSION UPDATE, has 4 */
	bool		if_not_exists = PG_NARGS() > 4 && !PG_ARGISNULL(4) && PG_GETARG_BOOL(4);

	PreventCommandIfReadOnly("esrc.create_snapshot()");
	snap_check_not_busy("esrc.create_snapshot()");
	rv = snapshot_rangevar(fcinfo, 0);
	category = snap_check_category(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1));
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("reducer must not be null"),
				 errhint("Pass a function such as 'esrc.merge(jsonb, esrc.event)'.")));
	reducer = PG_GETARG_OID(2);
	if (PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("initial_state must not be null"),
				 errhint("Use '{}' for an empty state.")));
	initial_state = PG_GETARG_JSONB_P(3);

	snap_check_reducer(reducer);
	if (esrc_proc_aclcheck(reducer, GetUserId(), ACL_EXECUTE) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_FUNCTION, get_func_name(reducer));
	if (pg_class_aclcheck(esrc_relation_oid("events"), GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for table esrc.events"),
				 errdetail("A new snapshot is filled from the stored events of its category."),
				 errhint("Grant esrc_reader to the role.")));

	nsp = RangeVarGetCreationNamespace(rv);
	if (isAnyTempNamespace(nsp))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("snapshot tables cannot be temporary"),
				 errdetail("Appends in every session write the snapshot table.")));
	qualname = quote_qualified_identifier(get_namespace_name(nsp), rv->relname);

	/*
	 * if_not_exists: an existing snapshot is compared before the category
	 * lock (start-up code must not stall the category's appends), and again
	 * after it, which waited for a create of the same snapshot that was
	 * under way.
	 */
	if (if_not_exists && snap_exists_same(nsp, rv->relname, category, reducer, initial_state))
		PG_RETURN_INT64(0);
	if (snap_lock_category(category, ExclusiveLock) != LOCKACQUIRE_ALREADY_HELD &&
		if_not_exists)
	{
		AcceptInvalidationMessages();
		if (snap_exists_same(nsp, rv->relname, category, reducer, initial_state))
			PG_RETURN_INT64(0);
	}

	esrc_warn_unqualified_names(reducer, psprintf("The reducer of snapshot \"%s\"", rv->relname));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	run_sql(psprintf("CREATE TABLE %s (stream pg_catalog.text PRIMARY KEY,"
					 " version pg_catalog.int8 NOT NULL,"
					 " state pg_catalog.jsonb NOT NULL,"
					 " updated_at pg_catalog.timestamptz NOT NULL)", qualname),
			SPI_OK_UTILITY);
	CommandCounterIncrement();
	relid = get_relname_relid(rv->relname, nsp);
	if (!OidIsValid(relid))
		elog(ERROR, "snapshot table %s was not created", qualname);
	run_sql(psprintf("COMMENT ON TABLE %s IS %s", qualname,
					 quote_literal_cstr(psprintf("esrc snapshot of category \"%s\", reduced by %s; written by esrc only.",
												 category, format_procedure_qualified(reducer)))),
			SPI_OK_UTILITY);
	snap_grant_readers(nsp, qualname);

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(category);
	values[2] = CStringGetTextDatum(format_procedure_qualified(reducer));
	values[3] = JsonbPGetDatum(initial_state);
	snap_catalog_write("INSERT INTO esrc.snapshots (snapshot, category, reducer, initial_state)"
					   " VALUES ($1, $2, $3, $4)", 4, argtypes, values, SPI_OK_INSERT);
	CommandCounterIncrement();

	applied = snap_replay_in_place(snap_get_def(relid));

	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	PG_RETURN_INT64(applied);
}

/*
 * esrc.drop_snapshot(snapshot): owner or superuser.  Takes the category
 * lock like create_snapshot, then AccessExclusiveLock on the table (in
 * that order, the order appends take them).
 */
Datum
esrc_drop_snapshot(PG_FUNCTION_ARGS)
{
	RangeVar   *rv;
	Oid			relid;
	SnapshotDef *def;
	char	   *qualname;
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];

	PreventCommandIfReadOnly("esrc.drop_snapshot()");
	snap_check_not_busy("esrc.drop_snapshot()");
	rv = snapshot_rangevar(fcinfo, 0);
	relid = RangeVarGetRelidExtended(rv, NoLock, 0, RangeVarCallbackOwnsRelation, NULL);
	def = snap_get_def(relid);

	if (snap_lock_category(def->category, ExclusiveLock) != LOCKACQUIRE_ALREADY_HELD)
		AcceptInvalidationMessages();
	if (RangeVarGetRelidExtended(rv, AccessExclusiveLock, 0,
								 RangeVarCallbackOwnsRelation, NULL) != relid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("snapshot \"%s\" was changed by another session", rv->relname),
				 errhint("Retry the command.")));
	def = snap_get_def(relid);
	qualname = pstrdup(def->qualname);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	values[0] = ObjectIdGetDatum(relid);
	snap_catalog_write("DELETE FROM esrc.snapshots WHERE snapshot::pg_catalog.oid OPERATOR(pg_catalog.=) $1",
					   1, argtypes, values, SPI_OK_DELETE);
	run_sql(psprintf("DROP TABLE %s", qualname), SPI_OK_UTILITY);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	PG_RETURN_VOID();
}
