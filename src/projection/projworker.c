/*-------------------------------------------------------------------------
 *
 * projworker.c
 *	  A projection worker: a background worker of one database that runs
 *	  the handlers of its projections over the log, exactly once.
 *
 * Worker N is member "worker N" of the subscription of every projection
 * of its database, so the partitions of each projection are spread over
 * the database's workers by the leases of sublease.c, and per-stream
 * order holds.  A round: read the projections; for each one not paused,
 * run batches.  A batch is one transaction: esrc_sub_fetch the events of
 * the worker's partitions after their checkpoints (at most batch_size, up
 * to the categories' horizon), call the handler on each in position
 * order in a subtransaction, then move the checkpoints and the applied
 * counters in the same transaction and commit; so a crash anywhere
 * leaves either the whole batch and its checkpoint or neither.  The
 * worker commits with synchronous_commit off: a commit lost in a crash
 * loses its checkpoint with its effects, and the batch runs again.
 *
 * Failures (per partition): a deadlock or serialization failure of the
 * handler (two workers updating the same rows of a cross-stream table)
 * runs the batch again at once, up to TRANSIENT_RETRIES times, before it
 * counts.  When the handler fails at event k, the
 * subtransaction rolls back, events before k are applied again and
 * committed, and the partition of event k records the failure (attempts,
 * error, retry_at).  Its events are then left out of batches; when
 * retry_at comes the event is tried alone, with a delay that doubles up to
 * esrc.projection_retry_max_delay; after esrc.projection_max_attempts
 * failures the partition is blocked until esrc.projection_skip,
 * esrc.projection_resume or a change of its handler (a pg_proc
 * invalidation: it may have been fixed; projretry.c) retries it.  The other
 * partitions go on.  A batch that fails outside the handler (at commit: a
 * deferred constraint of a table the handler wrote; in the checkpoint
 * write) is rolled back and counts the same way (batch_failed; its events
 * are then taken one a batch to find the failing one, projnarrow.c), but for a
 * deadlock or serialization failure (a reset or drop that came first, a
 * lease lost), which runs it again.  A handler may not drop or reset its
 * own projection (esrc_running_projection, projection.c).
 *
 * Every batch first checks that the projection's owner, and the owner of
 * a SECURITY DEFINER handler, may read the log now (projection.c's
 * esrc_projection_owner_reads, logaccess.c): if not,
 * the projection is paused with the reason (42501) in its partitions'
 * last_error, before any event is fetched.
 *
 * With esrc.projection_cost_delay set, the worker naps between batches
 * while events are being appended (projpace.c).
 *
 * After a round that applied events, the worker waits
 * esrc.projection_batch_delay before the next, so that under load events
 * gather into batches instead of a transaction per commit; while the
 * worker is busy the wait grows up to esrc.projection_batch_delay_max
 * (projpace.c).
 *
 * Idle, the worker sleeps on its latch, registered (subwait.c) for the
 * union of its projections' categories: a commit that appends to one of
 * them wakes it, as it wakes a long poll; sessions that change
 * projections wake it too (projlauncher.c).  It wakes at least every
 * third of esrc.subscription_lease to keep its leases.
 *
 * Worker 1 also runs a slice of the scavenger (scavenge.c) every
 * esrc.scavenge_interval, in a transaction of its own, before a round;
 * with the interval set it stays in a database that has esrc but no
 * projection (and runs then no projection), and with
 * esrc.projection_workers = 0 the launcher still starts it for that.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "base/base.h"
#include "log/log.h"
#include "lifecycle/lifecycle.h"
#include "subscription/subscription.h"
#include "owners.h"
#include "projectionint.h"

/* a handler's deadlock or serialization failure: tries at once before it counts */
#define TRANSIENT_RETRIES	3

/* batches of one projection before the worker turns to the next */
#define BATCHES_PER_TURN	20

typedef struct Proj
{
	int64		id;
	char	   *name;
	Oid			owner;
	Oid			handler;		/* InvalidOid: not found */
	bool		batch;			/* handler takes esrc.event[] */
	int			batch_size;
	bool		paused;
	int64		subid;
	ProjErase  *erase;			/* erase_from (projerase.c); NULL = none */
} Proj;

/* per partition, as esrc.projection_partitions says */
typedef struct Failures
{
	int64	   *position;		/* -1: none */
	bool	   *blocked;
	int		   *attempts;
	TimestampTz *retry_at;
	char	  **error;
} Failures;

/*
 * The batch in progress, for a failure outside its handler (batch_failed):
 * how many events it took, its first one, the last position it covers.
 */
typedef struct BatchAt
{
	int			nevents;		/* 0: none taken yet */
	int64		position;
	int32		partition;
	int64		covered;
} BatchAt;

static char member[ESRC_MAX_MEMBER_NAME + 1];
static BatchAt batch_at;
static bool drained = false;	/* the last batch took every event there was */
static EsrcSubKey *held_keys = NULL;	/* subscriptions we may hold leases of */
static int	nheld_keys = 0;

static Oid	handler_argtype(Oid funcoid);

/* Leave every group at exit, so the other workers take our partitions now. */
static void
leave_groups(int code, Datum arg)
{
	int			i;

	for (i = 0; i < nheld_keys; i++)
		esrc_lease_leave(&held_keys[i], member);
}

/*
 * esrc's tables (and its sequence) that the worker's transactions use,
 * each in the strongest mode any of them takes there, in one fixed order
 * (see begin_xact).
 */
static const struct
{
	const char *name;
	LOCKMODE	mode;
}			worker_tables[] = {
	{"events", AccessShareLock},
	{"subscriptions", AccessShareLock},
	{"subscription_checkpoints", RowExclusiveLock},
	{"projections", AccessShareLock},
	{"projection_partitions", RowExclusiveLock},
	/* read by esrc.poll through the rules cache (rules.c) */
	{"stream_rules", AccessShareLock},

	/*
	 * Read for the safe horizon (order.c, esrc_sequence_last_value: the
	 * sequence functions lock a sequence in RowExclusiveLock).  It is the
	 * first relation of the install script, so DROP EXTENSION, which locks
	 * the members in the order of pg_depend, holds it while it waits for
	 * esrc.events: a worker that held events and locked the sequence only
	 * when its fetch read the horizon deadlocked with it ("deadlock
	 * detected", the DROP or the worker's batch cancelled).
	 */
	{"position_seq", RowExclusiveLock},
};

/* The table worker_tables[i], or InvalidOid once esrc is gone. */
static Oid
worker_table(int i)
{
	Oid			nsp = get_namespace_oid("esrc", true);

	if (!OidIsValid(nsp))
		return InvalidOid;
	return get_relname_relid(worker_tables[i].name, nsp);
}

/*
 * Lock every table of worker_tables without waiting.  Returns the index of
 * the first one that another transaction holds in a conflicting mode, or
 * -1 when all are locked (or esrc is gone: the caller's next query says so).
 */
static int
lock_worker_tables(void)
{
	int			i;

	for (i = 0; i < (int) lengthof(worker_tables); i++)
	{
		Oid			relid = worker_table(i);

		if (!OidIsValid(relid))
			return -1;
		if (!ConditionalLockRelationOid(relid, worker_tables[i].mode))
			return i;
	}
	return -1;
}

/*
 * Start a transaction holding the locks of worker_tables.
 *
 * A conflicting lock on one of them is DDL on esrc (DROP or ALTER
 * EXTENSION, LOCK TABLE).  The worker must not queue behind it while it
 * holds a lock on another one: DROP EXTENSION locks the tables in the
 * order of pg_depend, the worker's queries in theirs, and a worker that
 * held esrc.projections while it waited for esrc.subscriptions deadlocked
 * with a DROP EXTENSION that held esrc.subscriptions (the DROP failed with
 * "deadlock detected" after deadlock_timeout).  So the worker takes all
 * of its locks first, without waiting; on a conflict it ends the
 * transaction, waits for that one lock in a new one where it holds
 * nothing else (a wait no deadlock can involve), and tries again.
 */
static void
begin_xact(void)
{
	int			contended = -1;

	for (;;)
	{
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		if (contended >= 0)
		{
			Oid			relid = worker_table(contended);

			if (OidIsValid(relid))
				LockRelationOid(relid, worker_tables[contended].mode);
		}
		contended = lock_worker_tables();
		if (contended < 0)
			break;
		CommitTransactionCommand();
	}
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
}

static void
end_xact(void)
{
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
}

/*
 * Does this worker run the scavenger's slices (scavenge.c)?  Worker 1 of
 * each database does while esrc.scavenge_interval is set, projections or
 * not: the launcher starts it in every database with esrc
 * (esrc_projection_db_workers), and it stays when there is no projection.
 */
static bool
scavenges(int number)
{
	return number == 1 && esrc_scavenge_interval_s > 0;
}

/*
 * The projections of the database, in cxt; exits (idle) when there is no
 * esrc, or no projection and this worker does not scavenge.  Registers
 * the wait for their categories.
 */
static Proj *
load_projections(MemoryContext cxt, int *nprojs, uint64 seq, int number)
{
	static const char *sql =
		"SELECT p.id, p.name, p.owner, pg_catalog.to_regprocedure(p.handler), p.batch_size, "
		"p.paused, p.subscription_id, s.categories, p.erase_from, p.erase_column FROM esrc.projections p "
		"JOIN esrc.subscriptions s ON s.id OPERATOR(pg_catalog.=) p.subscription_id ORDER BY p.id";
	Proj	   *projs;
	uint64		hashes[ESRC_WAIT_CATEGORIES];
	int			nhashes = 0;
	bool		all = false;
	bool		ownerless = false;
	uint64		r;
	EsrcSubKey	key;

	begin_xact();
	if (!OidIsValid(get_extension_oid("esrc", true)))
	{
		end_xact();
		esrc_projection_worker_exit_idle(seq);
	}
	catalog_run(sql, 0, NULL, NULL, NULL, SPI_OK_SELECT);
	*nprojs = (int) SPI_processed;
	/* a worker beyond esrc.projection_workers only scavenges (worker 1) */
	if (number > esrc_projection_workers)
		*nprojs = 0;
	if (*nprojs == 0)
	{
		end_xact();
		if (!scavenges(number))
			esrc_projection_worker_exit_idle(seq);
		/* worker 1 stays for the scavenger: no projection, no lease */
		leave_groups(0, (Datum) 0);
		nheld_keys = 0;
		esrc_wait_unregister();
		return NULL;
	}
	key.dbid = MyDatabaseId;
	key.catalog = esrc_relation_oid("subscriptions");
	key.id = 0;
	projs = MemoryContextAllocZero(cxt, sizeof(Proj) * *nprojs);
	if (held_keys != NULL)
		pfree(held_keys);
	held_keys = MemoryContextAlloc(TopMemoryContext, sizeof(EsrcSubKey) * *nprojs);
	nheld_keys = 0;
	for (r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		Proj	   *pj = &projs[r];
		bool		isnull;
		Datum		d;

		pj->id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		pj->name = MemoryContextStrdup(cxt, SPI_getvalue(tup, desc, 2));
		pj->owner = DatumGetObjectId(SPI_getbinval(tup, desc, 3, &isnull));
		d = SPI_getbinval(tup, desc, 4, &isnull);
		pj->handler = isnull ? InvalidOid : DatumGetObjectId(d);
		pj->batch = OidIsValid(pj->handler) &&
			get_func_nargs(pj->handler) == 1 &&
			get_array_type(esrc_event_type_oid()) == handler_argtype(pj->handler);
		pj->batch_size = DatumGetInt32(SPI_getbinval(tup, desc, 5, &isnull));
		pj->paused = DatumGetBool(SPI_getbinval(tup, desc, 6, &isnull));
		/* an owner dropped from another database: paused below (owners.c) */
		if (!pj->paused && !esrc_role_exists(pj->owner))
			pj->paused = ownerless = true;
		pj->subid = DatumGetInt64(SPI_getbinval(tup, desc, 7, &isnull));
		{
			bool		colnull;
			Datum		col = SPI_getbinval(tup, desc, 10, &colnull);

			d = SPI_getbinval(tup, desc, 9, &isnull);
			pj->erase = esrc_projection_erase_load(d, isnull, col, colnull, cxt);
		}
		held_keys[nheld_keys] = key;
		held_keys[nheld_keys++].id = pj->subid;
		d = SPI_getbinval(tup, desc, 8, &isnull);
		if (isnull)
			all = true;
		else if (!all)
		{
			int			n;
			char	  **cats = text_array_to_cstrings(DatumGetArrayTypeP(d), &n);
			int			i;

			for (i = 0; i < n; i++)
			{
				if (nhashes == ESRC_WAIT_CATEGORIES)
				{
					all = true;
					break;
				}
				hashes[nhashes++] = esrc_category_hash(cats[i], strlen(cats[i]));
			}
		}
	}
	end_xact();
	if (ownerless)
		esrc_pause_ownerless_projections();
	/* before the round's checks: a commit after this sets our latch */
	esrc_wait_register(&key, hashes, nhashes, all);
	return projs;
}

static Oid
handler_argtype(Oid funcoid)
{
	Oid		   *argtypes;
	int			nargs;
	Oid			result;

	result = get_func_signature(funcoid, &argtypes, &nargs);
	(void) result;
	return nargs == 1 ? argtypes[0] : InvalidOid;
}

static void
read_failures(Proj *pj, int np, Failures *f)
{
	static const char *sql =
		"SELECT partition, failed_position, blocked, attempts, retry_at, last_error "
		"FROM esrc.projection_partitions WHERE projection_id OPERATOR(pg_catalog.=) $1 "
		"AND failed_position IS NOT NULL";
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1];
	uint64		r;
	int			p;

	f->position = palloc(sizeof(int64) * np);
	f->blocked = palloc0(sizeof(bool) * np);
	f->attempts = palloc0(sizeof(int) * np);
	f->retry_at = palloc0(sizeof(TimestampTz) * np);
	f->error = palloc0(sizeof(char *) * np);
	for (p = 0; p < np; p++)
		f->position[p] = -1;
	values[0] = Int64GetDatum(pj->id);
	catalog_run(sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	for (r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		d;

		p = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
		if (p < 0 || p >= np)
			continue;
		f->position[p] = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
		f->blocked[p] = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));
		f->attempts[p] = DatumGetInt32(SPI_getbinval(tup, desc, 4, &isnull));
		d = SPI_getbinval(tup, desc, 5, &isnull);
		f->retry_at[p] = isnull ? 0 : DatumGetTimestampTz(d);
		f->error[p] = SPI_getvalue(tup, desc, 6);
	}
	SPI_freetuptable(SPI_tuptable);
}

/*
 * The failure of partition p at position: attempts so far, the error;
 * outside: it came from outside the handler (batch_failed).
 */
static void
record_failure(Proj *pj, int32 p, int64 position, int attempts, ErrorData *edata,
			   bool outside)
{
	static const char *sql =
		"UPDATE esrc.projection_partitions SET attempts = $3, failed_position = $4, "
		"blocked = $5, last_error = $6, last_error_sqlstate = $7, "
		"last_error_at = pg_catalog.now(), "
		"retry_at = pg_catalog.now() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => $8) "
		"WHERE projection_id OPERATOR(pg_catalog.=) $1 AND partition OPERATOR(pg_catalog.=) $2";
	Oid			argtypes[8] = {INT8OID, INT4OID, INT4OID, INT8OID, BOOLOID, TEXTOID, TEXTOID, FLOAT8OID};
	Datum		values[8];
	bool		blocked = attempts >= esrc_projection_max_attempts;
	double		delay = esrc_projection_retry_delay_ms;
	int			i;

	for (i = 1; i < attempts && delay < esrc_projection_retry_max_delay_ms; i++)
		delay *= 2;
	delay = Min(delay, (double) esrc_projection_retry_max_delay_ms);
	values[0] = Int64GetDatum(pj->id);
	values[1] = Int32GetDatum(p);
	values[2] = Int32GetDatum(attempts);
	values[3] = Int64GetDatum(position);
	values[4] = BoolGetDatum(blocked);
	values[5] = CStringGetTextDatum(esrc_handler_error_text(edata));
	values[6] = CStringGetTextDatum(unpack_sql_state(edata->sqlerrcode));
	values[7] = Float8GetDatum(delay / 1000.0);
	catalog_run(sql, 8, argtypes, values, NULL, SPI_OK_UPDATE);
	/* a wait for this projection learns of it at commit (projwait.c) */
	esrc_sub_progress_at_commit(pj->subid);
	ereport(LOG,
			(errmsg("projection \"%s\": %s at position " INT64_FORMAT " (partition %d, attempt %d)%s: %s",
					pj->name, outside ? "batch failed outside the handler" : "handler failed",
					position, p, attempts,
					blocked ? ", partition blocked" : "",
					esrc_handler_error_text(edata))));
}

static void
clear_failure(Proj *pj, int32 p)
{
	static const char *sql =
		"UPDATE esrc.projection_partitions SET failed_position = NULL, blocked = false, "
		"attempts = 0, retry_at = NULL "
		"WHERE projection_id OPERATOR(pg_catalog.=) $1 AND partition OPERATOR(pg_catalog.=) $2";
	Oid			argtypes[2] = {INT8OID, INT4OID};
	Datum		values[2];

	values[0] = Int64GetDatum(pj->id);
	values[1] = Int32GetDatum(p);
	catalog_run(sql, 2, argtypes, values, NULL, SPI_OK_UPDATE);
}

static void
add_applied(Proj *pj, int np, const int64 *counts)
{
	static const char *sql =
		"UPDATE esrc.projection_partitions AS pp SET applied = pp.applied OPERATOR(pg_catalog.+) x.n "
		"FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3)) AS x(p, n) "
		"WHERE pp.projection_id OPERATOR(pg_catalog.=) $1 AND pp.partition OPERATOR(pg_catalog.=) x.p";
	Oid			argtypes[3] = {INT8OID, INT4ARRAYOID, INT8ARRAYOID};
	Datum		values[3];
	int32	   *parts = palloc(sizeof(int32) * np);
	int64	   *ns = palloc(sizeof(int64) * np);
	int			n = 0;
	int			p;

	for (p = 0; p < np; p++)
		if (counts[p] > 0)
		{
			parts[n] = p;
			ns[n++] = counts[p];
		}
	if (n == 0)
		return;
	values[0] = Int64GetDatum(pj->id);
	values[1] = PointerGetDatum(int4_array(parts, n));
	values[2] = PointerGetDatum(int8_array(ns, n));
	catalog_run(sql, 3, argtypes, values, NULL, SPI_OK_UPDATE);
}

/* One event of a batch, as read back from the tuplestore */
typedef struct Applied
{
	int			failed;			/* index of the failing event, -1 = none */
	int64		failed_position;
	int32		failed_partition;
	ErrorData  *error;
	int64		last_position;	/* of the events applied */
	int64	   *counts;			/* per partition */
} Applied;

/*
 * Call the handler on the first limit events of ts, in a subtransaction.
 * On success the subtransaction is kept; on an error it is rolled back
 * and a->failed says where (-2: somewhere in a whole batch).  A batch
 * handler (esrc.event[]) gets them in one call when whole, else in arrays
 * of one event, which tells which event fails.
 */
static bool
apply_events(Proj *pj, SubDef *def, Tuplestorestate *ts, TupleTableSlot *slot,
			 int limit, bool whole, Applied *a)
{
	Oid			event_typid = esrc_event_type_oid();
	Datum	   *batch = NULL;
	int			nbatch = 0;
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	MemoryContext evcxt = AllocSetContextCreate(cxt, "esrc projection event", ALLOCSET_DEFAULT_SIZES);
	volatile int i = 0;
	volatile int64 pos = -1;
	volatile int32 part = -1;
	bool		ok = true;
	FmgrInfo	flinfo;

	memset(a->counts, 0, sizeof(int64) * def->npartitions);
	a->failed = -1;
	a->last_position = -1;
	tuplestore_rescan(ts);
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	esrc_running_projection = pj->id;
	esrc_projection_erase_clear(pj->erase);
	PG_TRY();
	{
		if (!OidIsValid(pj->handler))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_FUNCTION),
					 errmsg("the handler of projection \"%s\" does not exist", pj->name)));
		if (esrc_proc_aclcheck(pj->handler, pj->owner, ACL_EXECUTE) != ACLCHECK_OK)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for function %s", format_procedure(pj->handler)),
					 errdetail("The owner of projection \"%s\" runs it.", pj->name)));
		fmgr_info(pj->handler, &flinfo);
		whole = whole && pj->batch;
		if (whole)
			batch = MemoryContextAlloc(evcxt, sizeof(Datum) * Max(limit, 1));
		for (i = 0; i < limit; i++)
		{
			text	   *stream;
			bool		isnull;

			if (!tuplestore_gettupleslot(ts, true, false, slot))
				break;
			pos = DatumGetInt64(slot_getattr(slot, Anum_events_position, &isnull));
			stream = DatumGetTextPP(slot_getattr(slot, Anum_events_stream, &isnull));
			part = stream_partition(VARDATA_ANY(stream), VARSIZE_ANY_EXHDR(stream),
									def->npartitions);
			MemoryContextSwitchTo(evcxt);
			esrc_projection_erase_note(pj->erase, slot);
			if (whole)
				batch[nbatch++] = ExecFetchSlotHeapTupleDatum(slot);
			else
			{
				Datum		ev = ExecFetchSlotHeapTupleDatum(slot);

				if (pj->batch)
					ev = PointerGetDatum(construct_array(&ev, 1, event_typid, -1, false,
														 TYPALIGN_DOUBLE));
				esrc_call_as_owner(pj->owner, &flinfo, 1, ev);
				esrc_projection_erase_flush(pj->erase, pj->owner);
				MemoryContextReset(evcxt);
				CommandCounterIncrement();
			}
			MemoryContextSwitchTo(cxt);
			a->counts[part]++;
			a->last_position = pos;
		}
		if (whole)
		{
			i = -2;				/* an error now: somewhere in the batch */
			MemoryContextSwitchTo(evcxt);
			esrc_call_as_owner(pj->owner, &flinfo, 1,
							   PointerGetDatum(construct_array(batch, nbatch, event_typid,
															   -1, false, TYPALIGN_DOUBLE)));
			esrc_projection_erase_flush(pj->erase, pj->owner);
			MemoryContextSwitchTo(cxt);
			CommandCounterIncrement();
		}
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		a->error = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		a->failed = i;
		a->failed_position = pos;
		a->failed_partition = part;
		ok = false;
	}
	PG_END_TRY();
	esrc_running_projection = 0;
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	MemoryContextDelete(evcxt);
	/* SPI_connect of the batch survives; the subtransaction's went with it */
	return ok;
}

static Tuplestorestate *
new_store(void)
{
	return tuplestore_begin_heap(true, false, work_mem);
}

/* Note the batch just fetched into ts (n events, up to covered). */
static void
note_batch(Tuplestorestate *ts, TupleTableSlot *slot, SubDef *def, int n, int64 covered)
{
	text	   *stream;
	bool		isnull;

	tuplestore_rescan(ts);
	if (!tuplestore_gettupleslot(ts, true, false, slot))
		return;
	batch_at.position = DatumGetInt64(slot_getattr(slot, Anum_events_position, &isnull));
	stream = DatumGetTextPP(slot_getattr(slot, Anum_events_stream, &isnull));
	batch_at.partition = stream_partition(VARDATA_ANY(stream), VARSIZE_ANY_EXHDR(stream),
										  def->npartitions);
	batch_at.covered = covered;
	batch_at.nevents = n;
}

/*
 * Retry the failing event of partition p alone, if this worker holds p.
 * Returns true if it did something.
 */
static bool
retry_partition(Proj *pj, SubDef *def, Failures *f, int32 p, TupleDesc desc,
				TupleTableSlot *slot)
{
	Tuplestorestate *ts = new_store();
	bool	   *skip = palloc(sizeof(bool) * def->npartitions);
	EsrcSubBatch b;
	Applied		a;
	int64		pos;
	bool		isnull;

	memset(skip, 1, sizeof(bool) * def->npartitions);
	skip[p] = false;
	esrc_sub_fetch(def, member, skip, 1, ts, desc, &b);
	if (!b.fetched[p])
		return false;			/* another worker holds it */
	if (b.n == 0 || !tuplestore_gettupleslot(ts, true, false, slot) ||
		(pos = DatumGetInt64(slot_getattr(slot, Anum_events_position, &isnull))) != f->position[p])
	{
		/* skipped or reset meanwhile: the failure is over */
		clear_failure(pj, p);
		return true;
	}
	batch_at.nevents = 1;
	batch_at.position = pos;
	batch_at.partition = p;
	batch_at.covered = pos;
	a.counts = palloc0(sizeof(int64) * def->npartitions);
	if (apply_events(pj, def, ts, slot, 1, false, &a))
	{
		esrc_sub_advance(def, member, &b, b.fetched, pos);
		add_applied(pj, def->npartitions, a.counts);
		clear_failure(pj, p);
	}
	else
		record_failure(pj, p, pos, f->attempts[p] + 1, a.error, false);
	return true;
}

/*
 * One batch of projection pj in its own transaction.  Returns the number
 * of events it applied or retried (0: nothing to do); *next_retry gets
 * the earliest retry time of a failing partition.
 */
static int
run_batch(Proj *pj, TupleDesc desc, TupleTableSlot *slot, TimestampTz *next_retry)
{
	SubDef	   *def;
	Failures	f;
	bool	   *skip;
	Tuplestorestate *ts;
	EsrcSubBatch b;
	Applied		a;
	TimestampTz now = GetCurrentTimestamp();
	int64		until = esrc_projection_narrowed_until(pj->id);
	int			np;
	int			p;
	int			limit;

	memset(&batch_at, 0, sizeof(batch_at));
	drained = false;
	begin_xact();
	/* the owner must be allowed to read the log now, or it gets nothing */
	if (!esrc_projection_owner_reads(pj->id, pj->name, pj->owner, pj->handler))
	{
		pj->paused = true;
		end_xact();
		return 0;
	}
	def = esrc_sub_lookup_id(pj->subid, CurrentMemoryContext);
	if (def == NULL)
	{
		end_xact();				/* dropped */
		return 0;
	}
	np = def->npartitions;
	read_failures(pj, np, &f);
	skip = palloc0(sizeof(bool) * np);
	for (p = 0; p < np; p++)
	{
		if (f.position[p] < 0)
			continue;
		skip[p] = true;
		if (f.blocked[p])
			continue;
		if (f.retry_at[p] <= now)
		{
			if (retry_partition(pj, def, &f, p, desc, slot))
			{
				end_xact();
				return 1;
			}
		}
		else if (*next_retry == 0 || f.retry_at[p] < *next_retry)
			*next_retry = f.retry_at[p];
	}

	ts = new_store();
	esrc_sub_fetch(def, member, skip, until > 0 ? 1 : pj->batch_size, ts, desc, &b);
	if (b.n > 0)
		note_batch(ts, slot, def, b.n, b.covered);
	if (until > 0 && (b.n == 0 || batch_at.position > until))
		esrc_projection_set_narrowed(pj->id, 0);	/* past the batch that failed */
	if (b.n == 0)
	{
		/* moved past events of partitions not ours, or of none */
		if (b.covered > b.lo)
			esrc_sub_advance(def, member, &b, b.fetched, b.covered);
		end_xact();
		return 0;
	}
	a.counts = palloc0(sizeof(int64) * np);
	limit = b.n;
	{
		ErrorData  *fedata = NULL;
		int64		fpos = -1;
		int32		fpart = -1;

		bool		whole = true;
		int			transient = 0;

		while (!apply_events(pj, def, ts, slot, limit, whole, &a))
		{
			if ((a.error->sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED ||
				 a.error->sqlerrcode == ERRCODE_T_R_SERIALIZATION_FAILURE) &&
				transient++ < TRANSIENT_RETRIES)
			{
				/* a deadlock or serialization failure: again, at once */
				FreeErrorData(a.error);
				continue;
			}
			if (a.failed == -2)
			{
				/* a batch handler failed: find the event, one at a time */
				whole = false;
				continue;
			}
			/* the earliest failing event yet; apply what comes before it */
			fedata = a.error;
			fpos = a.failed_position;
			fpart = a.failed_partition;
			limit = a.failed;
			if (limit == 0)
			{
				memset(a.counts, 0, sizeof(int64) * np);
				break;
			}
		}
		if (fedata == NULL)
		{
			esrc_sub_advance(def, member, &b, b.fetched, b.covered);
			add_applied(pj, np, a.counts);
			end_xact();
			/* fewer than asked: nothing more until a commit sets the latch */
			drained = until == 0 && b.n < pj->batch_size && b.to_horizon;
			return b.n;
		}
		esrc_sub_advance(def, member, &b, b.fetched, fpos - 1);
		add_applied(pj, np, a.counts);
		record_failure(pj, fpart, fpos, 1, fedata, false);
		end_xact();
		return Max(limit, 1);
	}
}

/*
 * A handler may have been fixed: every blocked partition of the
 * projections whose handler changed tries once more (projretry.c).
 */
static void
unblock_changed(Proj *projs, int nprojs)
{
	static const char *sql =
		"UPDATE esrc.projection_partitions SET blocked = false, retry_at = pg_catalog.now() "
		"WHERE blocked AND projection_id OPERATOR(pg_catalog.=) ANY ($1)";
	Oid			argtypes[1] = {INT8ARRAYOID};
	Datum		values[1];
	int64	   *ids = palloc(sizeof(int64) * Max(nprojs, 1));
	int			n = 0;
	int			i;

	for (i = 0; i < nprojs; i++)
		if (esrc_projretry_changed(projs[i].handler))
			ids[n++] = projs[i].id;
	esrc_projretry_reset();
	if (n == 0)
	{
		pfree(ids);
		return;
	}
	begin_xact();
	values[0] = PointerGetDatum(int8_array(ids, n));
	catalog_run(sql, 1, argtypes, values, NULL, SPI_OK_UPDATE);
	end_xact();
	pfree(ids);
}

/*
 * The batch of pj that batch_at describes failed outside its handler and
 * was rolled back.  A deadlock or serialization failure (the checkpoint
 * fence of a reset or drop that came first, a lease lost) is only logged:
 * the batch runs again.  Any other error (a deferred constraint of a table
 * the handler wrote, at commit; a lock timeout; ...) fails an event like a
 * handler's error, or the batch would run again for ever, unseen: with one
 * event (a retry, a batch of one) it is recorded against it, in a
 * transaction of its own (attempts, last_error, blocked after
 * esrc.projection_max_attempts, skippable).  With several, which one
 * failed is not known: the projection's next batches take one event at a
 * time up to the last position of this one, and the first that fails is
 * recorded.  An error before any event was taken is only logged.
 */
static void
batch_failed(Proj *pj, ErrorData *edata)
{
	static const char *sql =
		"SELECT attempts FROM esrc.projection_partitions "
		"WHERE projection_id OPERATOR(pg_catalog.=) $1 AND partition OPERATOR(pg_catalog.=) $2 "
		"AND failed_position OPERATOR(pg_catalog.=) $3";
	Oid			argtypes[3] = {INT8OID, INT4OID, INT8OID};
	Datum		values[3];
	int			attempts = 1;
	bool		isnull;

	if (edata->sqlerrcode == ERRCODE_T_R_SERIALIZATION_FAILURE ||
		edata->sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED || batch_at.nevents == 0)
	{
		ereport(edata->sqlerrcode == ERRCODE_T_R_SERIALIZATION_FAILURE ? LOG : WARNING,
				(errmsg("projection \"%s\": batch rolled back: %s", pj->name, edata->message)));
		return;
	}
	if (batch_at.nevents > 1)
	{
		esrc_projection_set_narrowed(pj->id, batch_at.covered);
		ereport(WARNING,
				(errmsg("projection \"%s\": batch rolled back: %s", pj->name, edata->message),
				 errdetail("Its events are applied again one at a time, to find the one that fails.")));
		return;
	}
	begin_xact();
	values[0] = Int64GetDatum(pj->id);
	values[1] = Int32GetDatum(batch_at.partition);
	values[2] = Int64GetDatum(batch_at.position);
	catalog_run(sql, 3, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
		attempts += DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	record_failure(pj, batch_at.partition, batch_at.position, attempts, edata, true);
	end_xact();
}

/*
 * run_batch, where an error outside the handler rolls back the batch,
 * is counted (batch_failed), and the worker moves on to the next
 * projection: -1.
 */
static int
run_batch_safely(Proj *pj, TupleDesc desc, TupleTableSlot *slot, TimestampTz *next_retry)
{
	MemoryContext cxt = CurrentMemoryContext;
	ErrorData  *volatile edata = NULL;
	volatile int n = 0;

	PG_TRY();
	{
		n = run_batch(pj, desc, slot, next_retry);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		MemoryContextSwitchTo(cxt);
		n = -1;
	}
	PG_END_TRY();
	if (edata != NULL)
	{
		batch_failed(pj, edata);
		FreeErrorData(edata);
	}
	return n;
}

/* One round over the projections; true if there may be more to do now. */
static bool
run_round(Proj *projs, int nprojs, TupleDesc desc, TupleTableSlot *slot,
		  TimestampTz *next_retry, int64 *applied)
{
	bool		busy = false;
	int			i;

	for (i = 0; i < nprojs; i++)
	{
		Proj	   *pj = &projs[i];
		int			b;

		if (pj->paused)
			continue;
		for (b = 0; b < BATCHES_PER_TURN; b++)
		{
			int			n;

			CHECK_FOR_INTERRUPTS();
			n = run_batch_safely(pj, desc, slot, next_retry);
			if (n <= 0)
				break;
			*applied += n;
			pgstat_report_activity(STATE_IDLE, NULL);
			esrc_projection_pace(n);	/* projpace.c: a nap under a burst */
			if (drained)
				break;			/* no empty batch to find that out */
			if (b == BATCHES_PER_TURN - 1)
				busy = true;
		}
	}
	return busy;
}

static void
worker_loop(int number)
{
	static MemoryContext roundcxt = NULL;
	static TupleDesc desc = NULL;
	static TupleTableSlot *slot = NULL;
	static TimestampTz next_scavenge = 0;	/* 0: not scavenging */

	if (roundcxt == NULL)
		roundcxt = AllocSetContextCreate(TopMemoryContext, "esrc projection round",
										 ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		TimestampTz next_retry = 0;
		uint64		seq;
		Proj	   *projs;
		int			nprojs;
		bool		busy;
		int64		applied = 0;
		int			gather_ms;
		long		timeout;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			if (number > esrc_projection_db_workers())
				proc_exit(0);
		}
		esrc_projection_round_begin();
		MemoryContextReset(roundcxt);
		seq = esrc_projection_wake_seq();
		projs = load_projections(roundcxt, &nprojs, seq, number);
		if (desc == NULL)
		{
			MemoryContext old;

			begin_xact();
			old = MemoryContextSwitchTo(TopMemoryContext);
			desc = lookup_rowtype_tupdesc_copy(esrc_event_type_oid(), -1);
			slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
			MemoryContextSwitchTo(old);
			end_xact();
		}
		if (esrc_projretry_pending())
			unblock_changed(projs, nprojs);
		if (scavenges(number))
		{
			TimestampTz now = GetCurrentTimestamp();

			if (next_scavenge == 0 || now >= next_scavenge)
			{
				esrc_scavenge_worker_slice();
				next_scavenge = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															(int64) esrc_scavenge_interval_s * 1000);
			}
		}
		else
			next_scavenge = 0;
		MemoryContextSwitchTo(roundcxt);
		busy = run_round(projs, nprojs, desc, slot, &next_retry, &applied);
		gather_ms = esrc_projection_round_end(applied);
		if (busy)
			continue;
		if (gather_ms > 0)
		{
			/*
			 * Let the next events gather: under a steady load a round every
			 * few milliseconds applies them in one batch instead of a
			 * transaction per commit; the wait grows with the worker's load
			 * (projpace.c).  The latch stays set, so the wait below returns
			 * at once if a commit came meanwhile.
			 */
			(void) WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 gather_ms, PG_WAIT_EXTENSION);
		}
		timeout = esrc_subscription_lease_ms / 3;
		if (next_scavenge != 0)
		{
			long		ms = (long) ((next_scavenge - GetCurrentTimestamp()) / 1000) + 1;

			timeout = Max(1, Min(timeout, ms));
		}
		if (next_retry != 0)
		{
			long		ms = (long) ((next_retry - GetCurrentTimestamp()) / 1000) + 1;

			timeout = Max(1, Min(timeout, ms));
		}
		pgstat_report_activity(STATE_IDLE, NULL);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, PG_WAIT_EXTENSION);
	}
}

void
esrc_projection_worker_main(Datum arg)
{
	Oid			dbid;
	int			number;
	sigjmp_buf	local_sigjmp_buf;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	esrc_projection_worker_attach(DatumGetInt32(arg), &dbid, &number);
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	snprintf(member, sizeof(member), "worker %d", number);
	pgstat_report_appname(psprintf("esrc projection worker %d", number));
	SetConfigOption("search_path", PROJECTION_SEARCH_PATH, PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	esrc_projretry_init();
	before_shmem_exit(leave_groups, (Datum) 0);

	/* an error outside a handler: report it, wait a second, go on */
	if (sigsetjmp(local_sigjmp_buf, 1) != 0)
	{
		error_context_stack = NULL;
		HOLD_INTERRUPTS();
		esrc_running_projection = 0;
		EmitErrorReport();
		AbortOutOfAnyTransaction();
		FlushErrorState();
		MemoryContextSwitchTo(TopMemoryContext);
		RESUME_INTERRUPTS();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1000, PG_WAIT_EXTENSION);
	}
	PG_exception_stack = &local_sigjmp_buf;
	worker_loop(number);
}
