/*-------------------------------------------------------------------------
 *
 * snapread.c
 *	  Reading snapshots: esrc.load (a stream's row of a snapshot table, or
 *	  the initial state) and esrc.snapshot_at (a stream's state at a
 *	  version, replayed from the log).
 *
 * Both read as the caller, with the caller's snapshot rules, after
 * checking that the caller may read the table before locking it;
 * snapshot_at runs the reducer as the table's owner (snapshot.c's fold).
 * What runs as whom is described at the top of snapshot.c.
 *
 * Talks to: snapshot.c (definitions, checks, the fold, through
 * snapshotint.h), read.c (the stream's index scan, the caller's
 * snapshot), append.c (name checks, a stream's category).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "base/base.h"
#include "catalog/namespace.h"
#include "catalog/objectaddress.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

#include "log/log.h"
#include "snapshotint.h"

PG_FUNCTION_INFO_V1(esrc_load);
PG_FUNCTION_INFO_V1(esrc_snapshot_at);

/* ----------------------------------------------------------------
 * Reading snapshots
 * ----------------------------------------------------------------
 */

static void
check_stream_category(SnapshotDef *def, const char *stream)
{
	char	   *category = esrc_stream_category(stream);

	if (strcmp(category, def->category) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("stream \"%s\" is not in category \"%s\" of snapshot \"%s\"",
						stream, def->category, def->relname),
				 errdetail("The category of a stream is the part of its name before the first \"-\"; here it is \"%s\".",
						   category)));
}

/*
 * RangeVarGetRelidExtended() callback of load and snapshot_at: the caller
 * must be allowed to read the table (SELECT on it or on one of its
 * columns) before it is locked, as LOCK TABLE checks before it locks, so
 * that a role cannot queue behind DDL on a table it cannot read, nor hold
 * up the DDL that queues behind it.
 */
static void
snapshot_read_callback(const RangeVar *relation, Oid relId, Oid oldRelId,
					   void *arg)
{
	Oid			userid = GetUserId();
	char		relkind;

	if (!OidIsValid(relId))
		return;
	relkind = get_rel_relkind(relId);
	if (relkind == '\0')
		return;					/* dropped meanwhile; the lookup retries */
	if (pg_class_aclcheck(relId, userid, ACL_SELECT) != ACLCHECK_OK &&
		pg_attribute_aclcheck_all(relId, userid, ACL_SELECT, ACLMASK_ANY) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, get_relkind_objtype(relkind), relation->relname);
}

/*
 * esrc.load(snapshot, stream) -> (state, version).  Reads the table as the
 * caller, with the caller's snapshot rules (a new snapshot at READ
 * COMMITTED).  A stream erased by esrc.erase_stream raises 55000.
 */
Datum
esrc_load(PG_FUNCTION_ARGS)
{
	RangeVar   *rv;
	char	   *stream;
	TupleDesc	tupdesc;
	Oid			relid;
	SnapshotDef *def;
	MemoryContext outer = CurrentMemoryContext;
	Datum		result[2];
	bool		nulls[2] = {false, false};
	Datum		values[1];
	SPIPlanPtr	plan;
	Jsonb	   *initial_state;
	EsrcOwnerContext ctx;
	int			rc;

	snap_check_not_busy("esrc.load()");
	rv = snapshot_rangevar(fcinfo, 0);
	stream = esrc_check_name(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1),
							 "stream name", ESRC_MAX_STREAM_NAME);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	relid = RangeVarGetRelidExtended(rv, AccessShareLock, 0,
									 snapshot_read_callback, NULL);
	def = snap_get_def(relid);
	check_stream_category(def, stream);
	initial_state = DatumGetJsonbPCopy(JsonbPGetDatum(def->initial_state));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = snap_def_plan(def, PLAN_SELECT);
	/* the reducer context (snapshot.c): the lookup runs as the caller */
	esrc_owner_enter(&ctx, InvalidOid, ESRC_OWNER_PIN_PATH);
	values[0] = CStringGetTextDatum(stream);
	snapshot_busy = true;
	PG_TRY();
	{
		rc = SPI_execute_plan(plan, values, NULL, false, 1);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "snapshot row lookup failed: %s", SPI_result_code_string(rc));
	}
	PG_FINALLY();
	{
		snapshot_busy = false;
	}
	PG_END_TRY();
	if (SPI_processed > 0)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		bool		isnull;
		MemoryContext spicxt = MemoryContextSwitchTo(outer);

		result[1] = Int64GetDatum(DatumGetInt64(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull)));
		result[0] = PointerGetDatum(PG_DETOAST_DATUM_COPY(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull)));
		MemoryContextSwitchTo(spicxt);
	}
	else
	{
		result[0] = JsonbPGetDatum(initial_state);
		result[1] = Int64GetDatum(-1);
	}
	esrc_owner_leave(&ctx);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");

	/*
	 * No row: a new stream, or an erased one (erase_stream deleted its row,
	 * rebuilds write none), for which the initial state at version -1 would
	 * be a lie.  Only then is esrc.erasures probed.
	 */
	if (DatumGetInt64(result[1]) < 0)
	{
		Snapshot	snap = esrc_caller_snapshot();

		esrc_check_not_erased(stream, snap, false);
		UnregisterSnapshot(snap);
	}

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), result, nulls)));
}

/*
 * snapshot_at refuses a version the stream rules hide (rules.c): the state
 * at a hidden version would show what the rules hide.  The state at a
 * visible version still folds every event from version 0, hidden or not:
 * it is the state the snapshot table holds (docs/lifecycle.md).
 */
static void
check_visible_version(const char *stream, int64 version, Snapshot snap)
{
	EsrcRuleFilter *rules = esrc_rules_begin(snap);
	int64		first;

	if (rules == NULL || version < 0)
		return;
	first = esrc_rules_first_visible(rules, cstring_to_text(stream));
	esrc_rules_end(rules);
	if (version < first)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("version " INT64_FORMAT " of stream \"%s\" is hidden by the stream's rules",
						version, stream),
				 errdetail("The first visible version is " INT64_FORMAT ".", first),
				 errhint("The stream's rules are in esrc.stream_rules.")));
}

/*
 * esrc.snapshot_at(snapshot, stream, version): replay the stream's events
 * up to version through the reducer.  Reads the events as the caller, by
 * an index scan of (stream, version) with the caller's snapshot rules
 * (logscan.c); runs the reducer as the snapshot's owner.  A stream erased by
 * esrc.erase_stream raises 55000 before anything is replayed.
 */
Datum
esrc_snapshot_at(PG_FUNCTION_ARGS)
{
	RangeVar   *rv;
	char	   *stream;
	int64		version;
	Oid			relid;
	SnapshotDef *def;
	MemoryContext outer = CurrentMemoryContext;
	Snapshot	snap;
	EsrcLogScan *scan;
	Datum		result;
	Fold		f;
	int64		last;
	EsrcOwnerContext ctx;

	snap_check_not_busy("esrc.snapshot_at()");
	rv = snapshot_rangevar(fcinfo, 0);
	stream = esrc_check_name(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1),
							 "stream name", ESRC_MAX_STREAM_NAME);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("version must not be null")));
	version = PG_GETARG_INT64(2);
	if (version < -1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("version must be -1 or greater"),
				 errdetail("The value given was " INT64_FORMAT "; -1 is the state before the first event.",
						   version)));

	relid = RangeVarGetRelidExtended(rv, AccessShareLock, 0,
									 snapshot_read_callback, NULL);
	def = snap_get_def(relid);
	snap_raise_if_broken(def);
	check_stream_category(def, stream);

	snap = esrc_caller_snapshot();
	/* the redacted events of an erased stream have no state to replay */
	esrc_check_not_erased(stream, snap, false);
	scan = esrc_log_begin(ESRC_LOG_BY_STREAM, CStringGetTextDatum(stream),
						  0, version, ForwardScanDirection, snap);
	check_visible_version(stream, version, snap);

	/* the reducer context (snapshot.c), no user switch */
	esrc_owner_enter(&ctx, InvalidOid, ESRC_OWNER_PIN_PATH);
	snap_fold_init(&f, def);
	snap_fold_start(&f, stream);
	snapshot_busy = true;
	PG_TRY();
	{
		TupleTableSlot *slot;

		while ((slot = esrc_log_next(scan)) != NULL)
		{
			Datum		values[ESRC_EVENT_NATTS_MAX];
			bool		isnull[ESRC_EVENT_NATTS_MAX];

			esrc_event_values(slot, snap_cache.event_desc->natts, values, isnull);
			snap_fold_apply(&f, values, isnull);
		}
	}
	PG_FINALLY();
	{
		snapshot_busy = false;
		esrc_owner_restore_user(&ctx);
	}
	PG_END_TRY();
	esrc_owner_leave(&ctx);
	esrc_log_end(scan);
	UnregisterSnapshot(snap);

	last = f.next_version - 1;
	if (last != version)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("stream \"%s\" has no version " INT64_FORMAT, stream, version),
				 last < 0 ? errdetail("The stream has no events.") :
				 errdetail("The stream ends at version " INT64_FORMAT ".", last)));

	{
		MemoryContext oldcxt = MemoryContextSwitchTo(outer);

		result = PointerGetDatum(PG_DETOAST_DATUM_COPY(f.state));
		MemoryContextSwitchTo(oldcxt);
	}
	snap_fold_end(&f);
	PG_RETURN_DATUM(result);
}
