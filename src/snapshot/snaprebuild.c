/*-------------------------------------------------------------------------
 *
 * snaprebuild.c
 *	  esrc.rebuild_snapshot: recompute a snapshot table from the event log
 *	  while appends to its category go on.
 *
 * The table is rebuilt into a new heap that is swapped in under a short
 * lock, the way REFRESH MATERIALIZED VIEW swaps a view's heap, after the
 * events appended meanwhile have been caught up:
 *
 *	1. ShareUpdateExclusiveLock on the table: it conflicts with another
 *	   rebuild and with DDL, not with appends (RowExclusiveLock) or readers.
 *	2. H := the read horizon of the category (order.c): every event of it
 *	   at a position <= H is settled and visible to a snapshot taken after.
 *	   A new heap (make_new_heap: the table's row type, owner, tablespace
 *	   and persistence, no index) gets one row per stream, the fold of its
 *	   events at positions <= H (snapbuild.c's sorted fold, bounded memory),
 *	   inserted frozen; then a unique index on stream.
 *	3. Catch-up rounds: H' := the horizon again, and the events in (H, H']
 *	   are applied to the new heap's rows in position order, which is
 *	   version order within a stream; H := H'.  Until a round has applied
 *	   at most CATCHUP_ENOUGH events (or CATCHUP_MAX_ROUNDS rounds).
 *	4. AccessExclusiveLock on the table (lock_for_swap: a wait for it is
 *	   cut short so that appends never queue behind the rebuild for long).
 *	   Under it, the events after H that a snapshot taken now sees are
 *	   applied -- every committed event of the category: an append that has
 *	   not reached the table yet waits for our lock in the trigger and
 *	   applies its event to the swapped table after we commit, as it does
 *	   behind any lock of the table -- and finish_heap_swap() swaps the new
 *	   heap's files with the table's: the table keeps its OID, name, grants,
 *	   comment and dependencies, its indexes are rebuilt, and the new heap
 *	   (now holding the old files) is dropped.
 *
 * So appends to the category wait only in step 4, for the last events and
 * the swap, whose time grows with the rows of the table (its indexes are
 * rebuilt), not with the events of the category; readers of the table
 * wait for step 4 too.  The lock is held until the rebuild's transaction
 * ends: call it in a transaction of its own.
 *
 * Like TRUNCATE and REFRESH MATERIALIZED VIEW, the swap is not MVCC-safe:
 * a transaction whose snapshot predates the rebuild's commit and reads the
 * table only after it sees the rebuilt rows as of some point of the
 * rebuild, not the rows it would have seen before.  esrc's own readers
 * (load, snapshot_at, the trigger) read with snapshots taken after their
 * lock and are not affected.
 *
 * Which tables: those the trigger writes directly (the shape
 * create_snapshot makes, see snapapply.c), with no trigger of their own (a
 * foreign key that references the table is triggers on it), and in no
 * publication (a swap is not replicated row by row).  Any other table is
 * rebuilt in place under ExclusiveLock (snap_replay_in_place): appends to
 * the category then wait for the whole rebuild.
 *
 * Events loaded into the log other than by esrc.append/append_batch (COPY,
 * pg_restore, a superuser's INSERT) are not in the in-flight registry the
 * horizon is made of: one that commits during a rebuild at a position
 * below a horizon the rebuild already passed is missed until the next
 * rebuild.  Load first, rebuild after.
 *
 * Talks to: snapbuild.c (the sorted fold, snap_replay_in_place),
 * snapshot.c (definitions, the fold), snapapply.c (the shape of the
 * table), order.c (horizons), read.c (the category's index scan),
 * PostgreSQL's cluster.c (make_new_heap, finish_heap_swap).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/multixact.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_publication.h"
#include "catalog/pg_type.h"
#include "commands/cluster.h"
#include "commands/tablecmds.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"

#include "base/base.h"
#include "log/log.h"
#include "snapshotint.h"

PG_FUNCTION_INFO_V1(esrc_rebuild_snapshot);

/* a catch-up round that applied no more than this is the last before the swap */
#define CATCHUP_ENOUGH			1000
/* under a load that never lets a round get that small, go on after this many */
#define CATCHUP_MAX_ROUNDS		20
/* the longest one try of the swap's lock keeps appends waiting (ms) */
#define REBUILD_LOCK_WAIT_MS	20

typedef enum NewHeapPlan
{
	NEWHEAP_SELECT,				/* $1 stream -> version, state */
	NEWHEAP_UPDATE,				/* $1 stream, $2 version, $3 state, $4 now */
	NEWHEAP_INSERT,				/* same parameters */
	NUM_NEWHEAP_PLANS
} NewHeapPlan;

typedef struct Rebuild
{
	SnapshotDef *def;
	Oid			relid;			/* the snapshot table */
	Oid			seq;			/* esrc.position_seq */
	uint64		hash;			/* esrc_category_hash of the category */
	Oid			heap;			/* the new heap */
	char	   *heapname;		/* its quoted schema.name, for SQL */
	Relation	heaprel;		/* open while step 2 fills it */
	TupleTableSlot *heapslot;
	SPIPlanPtr	plans[NUM_NEWHEAP_PLANS];
	int64		horizon;		/* the new heap has every event up to here */
	int64		upto;			/* the current catch-up goes this far */
	Snapshot	snap;			/* what the current step reads with */
	int64		events;			/* events applied, all steps */
	int			rounds;			/* catch-up rounds */
	int			tries;			/* tries of the swap's lock */
} Rebuild;

/* The category's read horizon (take the snapshot to read with after it). */
static int64
category_horizon(Rebuild *rb)
{
	return esrc_safe_position_for(rb->seq, &rb->hash, 1);
}

/*
 * Run a statement prepared on the new heap as the table's owner,
 * security-restricted (the caller, inside snap_with_fold's reducer
 * context, has search_path pinned).
 */
static int
run_plan_as_owner(Rebuild *rb, NewHeapPlan which, Datum *args)
{
	EsrcOwnerContext ctx;
	int			rc;

	esrc_owner_enter(&ctx, rb->def->owner, 0);
	rc = SPI_execute_plan(rb->plans[which], args, NULL, false, which == NEWHEAP_SELECT ? 1 : 0);
	esrc_owner_leave(&ctx);
	return rc;
}

/*
 * Step 2's SnapRowWriter: the fold's row into the new heap, frozen (so that,
 * once swapped in, it is visible to every snapshot, as the rows of a
 * refreshed materialized view are).  Memory: the fold's event context,
 * which the next event resets.
 */
static void
write_new_row(Fold *f, TimestampTz now, void *arg)
{
	Rebuild    *rb = (Rebuild *) arg;
	SnapshotDef *def = f->def;
	TupleTableSlot *slot = rb->heapslot;
	MemoryContext old = MemoryContextSwitchTo(f->evcxt);
	int			i;

	ExecClearTuple(slot);
	memset(slot->tts_isnull, true, sizeof(bool) * slot->tts_tupleDescriptor->natts);
	slot->tts_values[def->att[0] - 1] = CStringGetTextDatum(f->stream);
	slot->tts_values[def->att[1] - 1] = Int64GetDatum(f->next_version - 1);
	slot->tts_values[def->att[2] - 1] = f->state;
	slot->tts_values[def->att[3] - 1] = TimestampTzGetDatum(now);
	for (i = 0; i < 4; i++)
		slot->tts_isnull[def->att[i] - 1] = false;
	ExecStoreVirtualTuple(slot);
	table_tuple_insert(rb->heaprel, slot, GetCurrentCommandId(true), TABLE_INSERT_FROZEN, NULL);
	MemoryContextSwitchTo(old);
	MemoryContextReset(f->evcxt);
}

static void
fill_body(Fold *f, void *arg)
{
	Rebuild    *rb = (Rebuild *) arg;

	snap_fold_sorted(f, rb->snap, rb->horizon, write_new_row, rb);
}

/* Step 2: the new heap, with the fold of every event up to the horizon. */
static void
fill_new_heap(Rebuild *rb)
{
	Relation	rel = table_open(rb->relid, NoLock);	/* locked by the caller */

	/* its lock mode is taken on the table: the one we hold, no stronger */
	rb->heap = make_new_heap(rb->relid, rel->rd_rel->reltablespace, rel->rd_rel->relam,
							 rel->rd_rel->relpersistence, ShareUpdateExclusiveLock);
	table_close(rel, NoLock);
	rb->heapname = quote_qualified_identifier(get_namespace_name(get_rel_namespace(rb->heap)),
											  get_rel_name(rb->heap));
	rb->heaprel = table_open(rb->heap, NoLock);
	rb->heapslot = table_slot_create(rb->heaprel, NULL);

	rb->horizon = category_horizon(rb);
	rb->snap = RegisterSnapshot(GetLatestSnapshot());
	rb->events = snap_with_fold(rb->def, fill_body, rb);
	UnregisterSnapshot(rb->snap);

	ExecDropSingleTupleTableSlot(rb->heapslot);
	table_close(rb->heaprel, NoLock);
	CommandCounterIncrement();
}

/* The index and the statements the catch-up needs on the new heap. */
static void
prepare_new_heap(Rebuild *rb)
{
	static Oid	argtypes[4] = {TEXTOID, INT8OID, JSONBOID, TIMESTAMPTZOID};
	const char *sql[NUM_NEWHEAP_PLANS] = {
		"SELECT version, state FROM %s WHERE stream OPERATOR(pg_catalog.=) $1",
		"UPDATE %s SET version = $2, state = $3, updated_at = $4"
		" WHERE stream OPERATOR(pg_catalog.=) $1",
		"INSERT INTO %s (stream, version, state, updated_at) VALUES ($1, $2, $3, $4)",
	};
	int			i;

	esrc_run_as_owner(rb->def->owner, psprintf("CREATE UNIQUE INDEX ON %s (stream)", rb->heapname),
					  0, NULL, NULL, NULL, SPI_OK_UTILITY);
	for (i = 0; i < NUM_NEWHEAP_PLANS; i++)
	{
		rb->plans[i] = SPI_prepare(psprintf(sql[i], rb->heapname), i == NEWHEAP_SELECT ? 1 : 4,
								   argtypes);
		if (rb->plans[i] == NULL)
			elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	}
}

/* Apply one event (the scan's slot) to its stream's row in the new heap. */
static void
catch_up_event(Rebuild *rb, Fold *f, TupleTableSlot *slot)
{
	char	   *stream = TextDatumGetCString(slot->tts_values[1]);
	Datum		args[4];
	bool		found;
	int			rc;
	Datum		evvalues[ESRC_EVENT_NATTS_MAX];
	bool		evnulls[ESRC_EVENT_NATTS_MAX];

	args[0] = slot->tts_values[1];
	rc = run_plan_as_owner(rb, NEWHEAP_SELECT, args);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "snapshot row lookup failed: %s", SPI_result_code_string(rc));
	found = SPI_processed > 0;
	if (found)
	{
		HeapTuple	row = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		int64		version = DatumGetInt64(SPI_getbinval(row, desc, 1, &isnull));

		snap_fold_resume(f, stream, SPI_getbinval(row, desc, 2, &isnull), version);
	}
	else
	{
		bool		isnull;
		int64		version = DatumGetInt64(slot_getattr(slot, Anum_events_version,
														 &isnull));

		/*
		 * A stream without a row whose event is not its first: erased
		 * (erase_stream deleted nothing here -- it waits for us -- but the
		 * fill skipped it), with an event loaded into the log by other
		 * means than esrc.append.  It stays without a row.
		 */
		if (version > 0 && esrc_stream_erased(stream, rb->snap, NULL))
		{
			SPI_freetuptable(SPI_tuptable);
			pfree(stream);
			return;
		}
		snap_fold_start(f, stream);
	}
	SPI_freetuptable(SPI_tuptable);

	esrc_event_values(slot, snap_cache.event_desc->natts, evvalues, evnulls);
	snap_fold_apply(f, evvalues, evnulls);

	args[1] = Int64GetDatum(f->next_version - 1);
	args[2] = f->state;
	args[3] = TimestampTzGetDatum(GetCurrentTimestamp());
	rc = run_plan_as_owner(rb, found ? NEWHEAP_UPDATE : NEWHEAP_INSERT, args);
	if (rc != (found ? SPI_OK_UPDATE : SPI_OK_INSERT))
		elog(ERROR, "snapshot row write failed: %s", SPI_result_code_string(rc));
	pfree(stream);
}

static void
catch_up_body(Fold *f, void *arg)
{
	Rebuild    *rb = (Rebuild *) arg;
	EsrcLogScan *scan;
	TupleTableSlot *slot;

	scan = esrc_log_begin(ESRC_LOG_BY_CATEGORY, CStringGetTextDatum(rb->def->category),
						  rb->horizon + 1, rb->upto, ForwardScanDirection, rb->snap);
	while ((slot = esrc_log_next(scan)) != NULL)
	{
		CHECK_FOR_INTERRUPTS();
		catch_up_event(rb, f, slot);
	}
	esrc_log_end(scan);
}

/*
 * Apply the events after rb->horizon up to upto (PG_INT64_MAX: every one)
 * that a snapshot taken now sees.  Returns how many.
 */
static int64
catch_up(Rebuild *rb, int64 upto)
{
	int64		n;

	rb->upto = upto;
	rb->snap = RegisterSnapshot(GetLatestSnapshot());
	n = snap_with_fold(rb->def, catch_up_body, rb);
	UnregisterSnapshot(rb->snap);
	if (upto != PG_INT64_MAX)
		rb->horizon = upto;
	rb->events += n;
	rb->rounds++;
	return n;
}

/*
 * AccessExclusiveLock on relid if it can be had within ms; false if not.
 * The wait runs in a subtransaction with lock_timeout set to ms, which a
 * timeout rolls back; any other error goes on up.
 */
static bool
lock_within(Oid relid, int ms)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool locked = false;
	char		value[32];

	if (ConditionalLockRelationOid(relid, AccessExclusiveLock))
		return true;
	snprintf(value, sizeof(value), "%d", ms);
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		int			gucs = NewGUCNestLevel();

		(void) set_config_option("lock_timeout", value, PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		LockRelationOid(relid, AccessExclusiveLock);
		AtEOXact_GUC(false, gucs);
		ReleaseCurrentSubTransaction();
		locked = true;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			PG_RE_THROW();
		FlushErrorState();
		FreeErrorData(edata);
		RollbackAndReleaseCurrentSubTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return locked;
}

/*
 * Step 4's lock.  While we wait for AccessExclusiveLock, every append that
 * comes after us queues behind us; appends in flight end within
 * milliseconds, but a long reader of the table, or an open transaction
 * that appended to the category, would hold all of them back for as long
 * as it runs.  So a wait is cut short after REBUILD_LOCK_WAIT_MS; then we
 * wait for the transactions that hold a lock on the table to end without
 * queueing (WaitForLockers, as CREATE INDEX CONCURRENTLY waits), catch up
 * with what they committed, and try again.
 */
static void
lock_for_swap(Rebuild *rb)
{
	LOCKTAG		tag;

	for (;;)
	{
		(void) catch_up(rb, category_horizon(rb));
		rb->tries++;
		if (lock_within(rb->relid, REBUILD_LOCK_WAIT_MS))
			return;
		SET_LOCKTAG_RELATION(tag, MyDatabaseId, rb->relid);
		WaitForLockers(tag, AccessExclusiveLock, false);
	}
}

/* Steps 2 to 4 (the caller holds ShareUpdateExclusiveLock on relid). */
static int64
rebuild_online(SnapshotDef *def, Oid relid)
{
	Rebuild		rb;
	Relation	rel;
	char		relpersistence;
	int			round;
	int			i;
	TimestampTz start = GetCurrentTimestamp();
	TimestampTz filled;
	TimestampTz locked;
	int64		filled_events;
	int64		tail;

	memset(&rb, 0, sizeof(rb));
	rb.def = def;
	rb.relid = relid;
	rb.seq = esrc_relation_oid("position_seq");
	rb.hash = esrc_category_hash(def->category, strlen(def->category));

	fill_new_heap(&rb);
	prepare_new_heap(&rb);
	filled = GetCurrentTimestamp();
	filled_events = rb.events;
	for (round = 0; round < CATCHUP_MAX_ROUNDS; round++)
		if (catch_up(&rb, category_horizon(&rb)) <= CATCHUP_ENOUGH)
			break;
	lock_for_swap(&rb);
	locked = GetCurrentTimestamp();
	tail = catch_up(&rb, PG_INT64_MAX);

	for (i = 0; i < NUM_NEWHEAP_PLANS; i++)
		SPI_freeplan(rb.plans[i]);
	rel = table_open(relid, NoLock);
	CheckTableNotInUse(rel, "esrc.rebuild_snapshot()");
	relpersistence = rel->rd_rel->relpersistence;
	table_close(rel, NoLock);
	elog(DEBUG1, "esrc: rebuild of snapshot \"%s\": " INT64_FORMAT " events to the horizon in %ld ms, "
		 INT64_FORMAT " in %d catch-up rounds, lock after %d tries at %ld ms, "
		 INT64_FORMAT " events under it",
		 def->relname, filled_events, (long) ((filled - start) / 1000),
		 rb.events - filled_events - tail, rb.rounds - 1, rb.tries,
		 (long) ((locked - start) / 1000), tail);
	/* def may be freed from here on: the swap invalidates the cache */
	finish_heap_swap(relid, rb.heap, false, false, true, true,
					 RecentXmin, ReadNextMultiXactId(), relpersistence);
	elog(DEBUG1, "esrc: snapshot swapped in %ld ms after the lock",
		 (long) ((GetCurrentTimestamp() - locked) / 1000));
	return rb.events;
}

/* Why the table cannot be rebuilt online (see the top), or NULL. */
static const char *
online_problem(SnapshotDef *def, Relation rel)
{
	if (def->direct < 0)
		snap_choose_path(def);
	if (def->direct != 1)
		return "its columns, privileges or row-level security are not those esrc.create_snapshot makes";
	if (rel->rd_rel->relkind != RELKIND_RELATION)
		return "it is not a plain table";
	if (rel->trigdesc != NULL)
		return "it has triggers";
	if (GetRelationPublications(RelationGetRelid(rel)) != NIL ||
		GetSchemaPublications(RelationGetNamespace(rel)) != NIL ||
		GetAllTablesPublications() != NIL)
		return "it is published";
	return NULL;
}

/*
 * esrc.rebuild_snapshot(snapshot): owner or superuser.  Online (above)
 * when the table allows it, else in place under ExclusiveLock: readers go
 * on (and see the old rows until we commit); appends to the category wait
 * in the trigger and then apply their event on top of the rebuilt rows.
 * Returns the events applied.
 */
Datum
esrc_rebuild_snapshot(PG_FUNCTION_ARGS)
{
	RangeVar   *rv;
	Oid			relid;
	SnapshotDef *def;
	Relation	rel;
	const char *problem;
	int64		applied;

	PreventCommandIfReadOnly("esrc.rebuild_snapshot()");
	snap_check_not_busy("esrc.rebuild_snapshot()");
	rv = snapshot_rangevar(fcinfo, 0);
	relid = RangeVarGetRelidExtended(rv, ShareUpdateExclusiveLock, 0,
									 RangeVarCallbackOwnsRelation, NULL);
	def = snap_get_def(relid);
	snap_raise_if_broken(def);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* after a restore or pg_upgrade without triggers, they may be missing */
	snap_record_dependencies(relid, def->reducer);
	rel = table_open(relid, NoLock);
	problem = online_problem(def, rel);
	table_close(rel, NoLock);
	if (problem == NULL)
		applied = rebuild_online(def, relid);
	else
	{
		elog(DEBUG1, "esrc: snapshot \"%s\" is rebuilt in place under ExclusiveLock: %s",
			 def->relname, problem);
		LockRelationOid(relid, ExclusiveLock);
		applied = snap_replay_in_place(def);
	}
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	PG_RETURN_INT64(applied);
}
