/*-------------------------------------------------------------------------
 *
 * snapapply.c
 *	  The trigger on esrc.events that applies each new event to the
 *	  snapshots of its category (esrc.apply_snapshots): the locks it takes,
 *	  the choice of write path per snapshot table, and the two write paths
 *	  -- direct (index lookup, the executor's simple insert/update) and
 *	  SQL through SPI.
 *
 * The invariants this keeps (S1, S2), the locks, what runs as whom and
 * the cache it reads are described at the top of snapshot.c.  Here: an
 * event is applied only when its transaction holds append.c's stream
 * lock; the trigger takes the category lock in ShareLock mode, then
 * RowExclusiveLock on every snapshot table of the category, then reads
 * and writes the rows with a snapshot taken after those locks; every
 * snapshot is applied as its table's owner, security-restricted, in a GUC
 * nest level of its own (apply_to_all).  The tombstones of the life cycle
 * (esrc.erased, esrc.deleted; log/log.h) never reach a reducer.
 *
 * Talks to: snapshot.c (the cache, locks, reducer calls, through
 * snapshotint.h), append.c (whose INSERT fires the trigger; the stream
 * lock; the executor state for a write), compat.h (index scan, EPQ and
 * lock checks across majors).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_am.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/rls.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "log/log.h"
#include "snapshotint.h"

PG_FUNCTION_INFO_V1(esrc_apply_snapshots);

/* ----------------------------------------------------------------
 * The trigger on esrc.events
 * ----------------------------------------------------------------
 */

/* Does this transaction hold append.c's lock on stream? */
static bool
holds_stream_lock(const char *stream)
{
	LOCKTAG		tag;

	esrc_name_locktag(&tag, stream, ESRC_STREAM_LOCK_SPACE);
	return esrc_lock_held_by_me(&tag, ExclusiveLock);
}

static int
attno(TupleDesc desc, const char *name)
{
	int			n = SPI_fnumber(desc, name);

	if (n <= 0)
		elog(ERROR, "esrc.events has no column \"%s\"", name);
	return n;
}

/*
 * The version invariant (S2).  A stream without a row whose new event is
 * not its first may have been erased (erase_stream deleted its row): that
 * is an erased stream taking an event, refused with 55000 as append.c
 * refuses it, not a snapshot out of step.  esrc.erasures is probed only
 * then, with snap.
 */
static void
check_in_step(SnapshotDef *def, const char *stream_str, bool exists,
			  int64 prev, int64 version, Snapshot snap)
{
	if (!exists && version > 0)
		esrc_check_not_erased(stream_str, snap, true);
	if (prev + 1 != version)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("snapshot \"%s\" is out of step with stream \"%s\"",
						def->relname, stream_str),
				 exists ?
				 errdetail("The snapshot row has version " INT64_FORMAT " and the new event has version " INT64_FORMAT ".",
						   prev, version) :
				 errdetail("The snapshot has no row for the stream and the new event has version " INT64_FORMAT ".",
						   version),
				 errhint("Recompute the snapshot with esrc.rebuild_snapshot().")));
}

/*
 * Can the trigger write def's table directly?  It can when the table is
 * exactly what create_snapshot makes -- the four columns (no defaults or
 * generated columns to compute), a btree primary key on stream -- its owner
 * holds SELECT, INSERT and UPDATE on it, and no row-level security applies
 * to the owner.  Otherwise the trigger uses SPI, which handles all of
 * that (and raises the errors).  rel is locked.
 */
static void
prepare_direct(SnapshotDef *def, Relation rel)
{
	static const char *const names[4] = {"stream", "version", "state", "updated_at"};
	TupleDesc	desc = RelationGetDescr(rel);
	int			live = 0;
	int			i;
	Oid			pk;
	Relation	idx;
	Oid			eqop;
	bool		ok;

	def->direct = 0;
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped)
			continue;
		if (att->attgenerated)
			return;
		live++;
	}
	for (i = 0; i < 4; i++)
		if ((def->att[i] = SPI_fnumber(desc, names[i])) <= 0)
			return;
	if (live != 4)
		return;
	if (check_enable_rls(def->relid, def->owner, true) == RLS_ENABLED)
		return;
	if (pg_class_aclcheck(def->relid, def->owner, ACL_SELECT) != ACLCHECK_OK ||
		pg_class_aclcheck(def->relid, def->owner, ACL_INSERT) != ACLCHECK_OK ||
		pg_class_aclcheck(def->relid, def->owner, ACL_UPDATE) != ACLCHECK_OK)
		return;
	pk = esrc_primary_key_index(rel);
	if (!OidIsValid(pk))
		return;
	idx = index_open(pk, RowExclusiveLock);
	ok = (idx->rd_rel->relam == BTREE_AM_OID &&
		  idx->rd_index->indnatts == 1 &&
		  idx->rd_index->indkey.values[0] == def->att[0] &&
		  idx->rd_opcintype[0] == TEXTOID);
	if (ok)
	{
		eqop = get_opfamily_member(idx->rd_opfamily[0], TEXTOID, TEXTOID,
								   BTEqualStrategyNumber);
		ok = OidIsValid(eqop);
		if (ok)
		{
			def->eqproc = get_opcode(eqop);
			def->eqcollation = idx->rd_indcollation[0];
			def->pkindex = pk;
		}
	}
	index_close(idx, NoLock);
	if (ok)
		def->direct = 1;
}

/* prepare_direct(), and say which way it chose (for tests: DEBUG1). */
void
snap_choose_path(SnapshotDef *def)
{
	Relation	rel = table_open(def->relid, NoLock);	/* locked by the caller */

	prepare_direct(def, rel);
	table_close(rel, NoLock);
	elog(DEBUG1, "esrc: the trigger writes snapshot \"%s\" %s", def->relname,
		 def->direct == 1 ? "directly" : "through SQL");
}

/*
 * apply_event() without SPI or the executor's planning: look the row up in
 * the primary key with snap, and write it with the executor's simple
 * insert/update (ExecSimpleRelationInsert/Update, as logical replication
 * applies rows): constraints, indexes and the table's own row triggers are
 * handled as by an INSERT or UPDATE.  prepare_direct() checked that this
 * gives the same result as the SQL of apply_event_spi().  Runs as the
 * owner, security-restricted (apply_to_all()).
 */
static void
apply_event_direct(SnapshotDef *def, Datum stream, const char *stream_str,
				   int64 version, Datum event, Snapshot snap, TimestampTz now)
{
	Relation	rel = table_open(def->relid, NoLock);	/* locked by the trigger */
	Relation	idx = index_open(def->pkindex, RowExclusiveLock);
	TupleTableSlot *oldslot = table_slot_create(rel, NULL);
	TupleTableSlot *newslot;
	ScanKeyData key;
	IndexScanDesc scan;
	bool		exists;
	bool		isnull;
	int64		prev = -1;
	Datum		state;
	Datum		newstate;
	EState	   *estate;
	ResultRelInfo *rri;
	int			i;

	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   def->eqcollation, def->eqproc, stream);
	scan = esrc_index_beginscan(rel, idx, snap, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	exists = index_getnext_slot(scan, ForwardScanDirection, oldslot);
	index_endscan(scan);
	if (exists)
	{
		prev = DatumGetInt64(slot_getattr(oldslot, def->att[1], &isnull));
		state = PointerGetDatum(PG_DETOAST_DATUM_COPY(slot_getattr(oldslot, def->att[2], &isnull)));
	}
	else
		state = JsonbPGetDatum(def->initial_state);

	/* a tombstone (event 0): no new row, no reducer, the version moves on */
	if (event == (Datum) 0 && !exists)
	{
		ExecDropSingleTupleTableSlot(oldslot);
		index_close(idx, NoLock);
		table_close(rel, NoLock);
		return;
	}
	check_in_step(def, stream_str, exists, prev, version, snap);
	newstate = event == (Datum) 0 ? state : snap_call_reducer(def, state, event);

	/* an executor state just for the write, as the replication apply has */
	estate = esrc_make_write_estate(rel, &rri);
	estate->es_output_cid = GetCurrentCommandId(true);
	estate->es_snapshot = snap;
	AfterTriggerBeginQuery();

	newslot = ExecInitExtraTupleSlot(estate, RelationGetDescr(rel), &TTSOpsVirtual);
	ExecClearTuple(newslot);
	for (i = 0; i < newslot->tts_tupleDescriptor->natts; i++)
		newslot->tts_isnull[i] = true;
	newslot->tts_values[def->att[0] - 1] = stream;
	newslot->tts_values[def->att[1] - 1] = Int64GetDatum(version);
	newslot->tts_values[def->att[2] - 1] = newstate;
	newslot->tts_values[def->att[3] - 1] = TimestampTzGetDatum(now);
	for (i = 0; i < 4; i++)
		newslot->tts_isnull[def->att[i] - 1] = false;
	ExecStoreVirtualTuple(newslot);

	if (exists)
	{
		EPQState	epq;

		esrc_epq_init(&epq, estate);
		ExecSimpleRelationUpdate(rri, estate, &epq, oldslot, newslot);
		EvalPlanQualEnd(&epq);
	}
	else
		ExecSimpleRelationInsert(rri, estate, newslot);

	AfterTriggerEndQuery(estate);
	esrc_free_write_estate(estate, rri);
	ExecDropSingleTupleTableSlot(oldslot);
	index_close(idx, NoLock);
	table_close(rel, NoLock);
}

/*
 * Apply one new event to one snapshot: read the stream's row (or the
 * initial state), check the version invariant, call the reducer, write the
 * row.  This is the SQL version, for any table; apply_event_direct() does
 * the same for tables made by create_snapshot.  Runs as the owner,
 * security-restricted (apply_to_all()), so the SELECT sees the rows the
 * owner's row-level security lets it see, not the appender's; snap was
 * taken after the table lock.  Needs an SPI connection.
 */
static void
apply_event_spi(SnapshotDef *def, Datum stream, const char *stream_str,
				int64 version, Datum event, Snapshot snap, TimestampTz now)
{
	Datum		values[4];
	Datum		state;
	int64		prev = -1;
	bool		exists;
	bool		isnull;
	int			rc;

	values[0] = stream;
	rc = SPI_execute_snapshot(snap_def_plan(def, PLAN_SELECT), values, NULL, snap,
							  InvalidSnapshot, true, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "snapshot row lookup failed: %s", SPI_result_code_string(rc));
	exists = (SPI_processed > 0);
	if (exists)
	{
		prev = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		state = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	}
	else
		state = JsonbPGetDatum(def->initial_state);

	/* a tombstone (event 0): no new row, no reducer, the version moves on */
	if (event == (Datum) 0 && !exists)
		return;
	check_in_step(def, stream_str, exists, prev, version, snap);

	values[1] = Int64GetDatum(version);
	values[2] = event == (Datum) 0 ? state : snap_call_reducer(def, state, event);
	values[3] = TimestampTzGetDatum(now);

	rc = SPI_execute_snapshot(snap_def_plan(def, exists ? PLAN_UPDATE : PLAN_INSERT),
							  values, NULL, snap, InvalidSnapshot, false, true, 0);
	if (rc != (exists ? SPI_OK_UPDATE : SPI_OK_INSERT) || SPI_processed != 1)
		elog(ERROR, "snapshot row write failed: %s", SPI_result_code_string(rc));
}

/*
 * Apply the event to each snapshot of its category, with snapshot_busy set
 * (reset, and the user restored, on error too).
 *
 * Each snapshot is applied as the owner of its table, as a
 * security-restricted operation, in a GUC nest level of its own with
 * search_path pinned: not only the reducer but everything the write runs
 * -- the table's row triggers (AFTER ones included: they fire before the
 * switch back), CHECK constraints, defaults, index expressions, row-level
 * security -- runs with the owner's rights, as REFRESH MATERIALIZED VIEW
 * runs a view's code.  The appender, possibly a superuser, never runs the
 * table owner's code, and the owner cannot queue code for the appender's
 * commit (core refuses deferred triggers queued in a security-restricted
 * operation).  One switch per snapshot and event; an error unwinds the
 * GUC level with the (sub)transaction.
 */
static void
apply_to_all(CategoryEntry *entry, ApplyErrorArg *errarg, Datum stream,
			 const char *stream_str, int64 version, Datum event,
			 Snapshot snap, TimestampTz now)
{
	EsrcOwnerContext caller;

	/* no switch: the caller's user, to return to on error */
	esrc_owner_enter(&caller, InvalidOid, 0);
	snapshot_busy = true;
	PG_TRY();
	{
		int			i;

		for (i = 0; i < entry->count; i++)
		{
			SnapshotDef *def = &snap_cache.defs[entry->first + i];
			EsrcOwnerContext ctx;

			errarg->snapshot = def->relname;
			snap_raise_if_broken(def);
			esrc_owner_enter(&ctx, def->owner, ESRC_OWNER_PIN_PATH);
			if (def->direct == 1)
				apply_event_direct(def, stream, stream_str, version, event, snap, now);
			else
				apply_event_spi(def, stream, stream_str, version, event, snap, now);
			esrc_owner_leave(&ctx);
		}
	}
	PG_FINALLY();
	{
		snapshot_busy = false;
		esrc_owner_restore_user(&caller);
	}
	PG_END_TRY();
}

/*
 * Lock every snapshot table of category (RowExclusiveLock), and return the
 * category's entry in the cache, or NULL when it has no snapshot; start
 * over if the definitions changed meanwhile.
 */
static CategoryEntry *
lock_snapshot_tables(const char *category)
{
	CategoryEntry *entry;
	int			attempt;
	int			i;

	for (attempt = 0;; attempt++)
	{
		snap_ensure_cache();
		if (snap_cache.by_category == NULL)
			return NULL;
		entry = hash_search(snap_cache.by_category, category, HASH_FIND, NULL);
		if (entry == NULL)
			return NULL;
		for (i = 0; i < entry->count; i++)
			LockRelationOid(snap_cache.defs[entry->first + i].relid, RowExclusiveLock);
		if (snap_cache.valid)
			return entry;
		if (attempt >= 100)
			elog(ERROR, "snapshot definitions of category \"%s\" keep changing", category);
	}
}

/*
 * Choose the write path of each snapshot of the category that has none
 * yet; does any of them write through SPI (not the direct path)?
 */
static bool
needs_spi(CategoryEntry *entry)
{
	bool		use_spi = false;
	int			i;

	for (i = 0; i < entry->count; i++)
	{
		SnapshotDef *def = &snap_cache.defs[entry->first + i];

		if (def->direct < 0 && def->broken_msg == NULL)
			snap_choose_path(def);
		if (def->direct != 1)
			use_spi = true;
	}
	return use_spi;
}

/*
 * esrc.apply_snapshots(): AFTER INSERT FOR EACH ROW on esrc.events.
 */
Datum
esrc_apply_snapshots(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;
	TupleDesc	desc;
	bool		isnull;
	char	   *category;
	CategoryEntry *entry = NULL;
	Datum		stream;
	char	   *stream_str;
	int64		version;
	Datum		evvalues[ESRC_EVENT_NATTS_MAX];
	bool		evnulls[ESRC_EVENT_NATTS_MAX];
	Datum		event;
	Snapshot	snap;
	TimestampTz now;
	int			i;
	EsrcOwnerContext reducer_ctx;
	ErrorContextCallback errcb;
	ApplyErrorArg errarg;
	bool		use_spi;
	text	   *type;
	bool		system;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("esrc.apply_snapshots() must be called as an AFTER INSERT row trigger")));
	snap_check_not_busy("esrc.append");

	tuple = trigdata->tg_trigtuple;
	desc = RelationGetDescr(trigdata->tg_relation);
	stream = heap_getattr(tuple, attno(desc, "stream"), desc, &isnull);
	stream_str = TextDatumGetCString(stream);

	/*
	 * Only events appended by esrc.append/append_batch, which hold the
	 * stream lock, are applied.  Rows loaded into the log otherwise --
	 * pg_restore (in any order and with any -j: the snapshot tables are
	 * restored as dumped), COPY, logical replication, a superuser's INSERT
	 * -- are not: the snapshot tables are loaded along with them, or
	 * rebuilt afterwards.
	 */
	if (!holds_stream_lock(stream_str))
		return PointerGetDatum(NULL);

	/*
	 * The tombstones of the life cycle (log/log.h) are not applied: the
	 * snapshot of an erased stream has no row and gets none; on a deleted
	 * stream's row the tombstone only moves the version on (state
	 * unchanged), so a later append stays in step (S2).  Rebuilds and
	 * replays do the same (snap_fold_apply).
	 */
	type = DatumGetTextPP(heap_getattr(tuple, attno(desc, "type"), desc, &isnull));
	system = esrc_is_system_type(VARDATA_ANY(type), VARSIZE_ANY_EXHDR(type));
	if (system && VARSIZE_ANY_EXHDR(type) == strlen(ESRC_TYPE_ERASED) &&
		memcmp(VARDATA_ANY(type), ESRC_TYPE_ERASED, strlen(ESRC_TYPE_ERASED)) == 0)
		return PointerGetDatum(NULL);

	category = TextDatumGetCString(heap_getattr(tuple, attno(desc, "category"), desc, &isnull));

	/*
	 * The category lock first: if we had to wait for a create or drop, the
	 * invalidations it sent at commit are processed before we look.
	 */
	if (snap_lock_category(category, ShareLock) != LOCKACQUIRE_ALREADY_HELD)
		AcceptInvalidationMessages();

	entry = lock_snapshot_tables(category);
	if (entry == NULL)
		return PointerGetDatum(NULL);

	version = DatumGetInt64(heap_getattr(tuple, attno(desc, "version"), desc, &isnull));
	for (i = 0; i < snap_cache.event_desc->natts; i++)
		evvalues[i] = heap_getattr(tuple,
								   attno(desc, NameStr(TupleDescAttr(snap_cache.event_desc, i)->attname)),
								   desc, &evnulls[i]);
	event = system ? (Datum) 0 : snap_make_event(evvalues, evnulls);
	now = GetCurrentTimestamp();

	use_spi = needs_spi(entry);
	if (use_spi && SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/*
	 * Make earlier writes of this command visible (several events of one
	 * stream inserted by one statement), then take the snapshot: after the
	 * table locks, so that it sees what a rebuild or create we waited for
	 * committed, at any isolation level.
	 */
	CommandCounterIncrement();
	snap = RegisterSnapshot(GetLatestSnapshot());
	/* the reducer context: search_path pinned once per event (snapshot.c) */
	esrc_owner_enter(&reducer_ctx, InvalidOid, ESRC_OWNER_PIN_PATH);

	errarg.stream = stream_str;
	errarg.version = version;
	errcb.callback = snap_apply_error_callback;
	errcb.arg = &errarg;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	apply_to_all(entry, &errarg, stream, stream_str, version, event, snap, now);

	error_context_stack = errcb.previous;
	esrc_owner_leave(&reducer_ctx);
	UnregisterSnapshot(snap);
	if (use_spi && SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	return PointerGetDatum(NULL);
}
