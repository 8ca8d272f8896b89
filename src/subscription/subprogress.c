/*-------------------------------------------------------------------------
 *
 * subprogress.c
 *	  Read-your-writes waits on a subscription's progress: the check that a
 *	  subscription's checkpoints have reached a position, the wait for it
 *	  (registered in subnotify.c, which wakes it at the commit of a
 *	  transaction that moved those checkpoints or changed what the wait
 *	  looks at), and esrc.wait_for_subscription().  esrc.wait_for_projection
 *	  (projection/projwait.c) waits the same way on its hidden subscription.
 *
 * "Applied up to P" means: every event at a position <= P of the
 * subscription's categories is at or below the checkpoint of its
 * partition.  Checked in three steps, each with a new snapshot (the waits
 * refuse REPEATABLE READ and SERIALIZABLE):
 *   1. the horizon of the categories (order.c) is >= P: every position
 *	  <= P of them has committed or rolled back, visible to the next
 *	  snapshot;
 *   2. the partitions whose checkpoint is < P (none: done);
 *   3. no event of the categories in (lowest such checkpoint, P] lies
 *	  above the checkpoint of its own partition.
 * So events of other categories never hold a wait, nor do partitions that
 * have no event below P, even when no worker moved their checkpoint.
 *
 * The registry has one entry per backend (its subscription key while it
 * waits).  A transaction that moved a checkpoint notes the subscription
 * (esrc_sub_progress_at_commit, from write_checkpoints and the projection
 * code); at its commit, after the commit is visible to new snapshots, it
 * sets the latch of every waiter of those subscriptions.  The waiter
 * registers before its check (ResetLatch, check, sleep), and both sides
 * put a full barrier between their write and their read, so a commit is
 * either seen by the check or wakes the sleep.  While step 1 fails the
 * waiter is also registered as a long poll of the categories (subwait.c),
 * so the commit or abort of the append in flight below P wakes it.  Each
 * sleep is capped at WAIT_SAFETY_MS, a safety net only.
 *
 * Cost for a committer: one atomic read when nobody waits; otherwise a pass
 * over the registry and a SetLatch per waiter of the subscription.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "base/base.h"
#include "log/log.h"
#include "subscription/subscription.h"

/* the longest sleep between two checks; a wake-up ends it sooner */
#define WAIT_SAFETY_MS		1000
PG_FUNCTION_INFO_V1(esrc_wait_for_subscription);

/*
 * Common argument checks of the waits: position (not NULL, >= 0, not above
 * the last position handed out), timeout, isolation level, and that the
 * transaction did not append (its own appends hold back the horizon).
 * Returns the timeout in milliseconds.
 */
long
esrc_progress_wait_args(FunctionCallInfo fcinfo, const char *fname, int64 *position)
{
	Interval   *iv;
	int64		ms;
	int64		last;

	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s: position and timeout must not be null", fname)));
	*position = PG_GETARG_INT64(1);
	iv = PG_GETARG_INTERVAL_P(2);
	ms = iv->time / 1000 + (int64) iv->day * 86400000 +
		(int64) iv->month * INT64CONST(30) * 86400000;
	if (ms < 0 || ms > INT_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: timeout must be between 0 and %d milliseconds", fname, INT_MAX)));
	if (*position < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s: position must not be negative", fname)));
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("%s cannot wait in a REPEATABLE READ or SERIALIZABLE transaction", fname),
				 errdetail("The transaction's snapshot would never show what the wait waits for."),
				 errhint("Call it in a READ COMMITTED transaction, or outside a transaction block.")));
	if (esrc_xact_appended())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("%s cannot wait in a transaction that appended events", fname),
				 errdetail("The transaction's own appends hold back the positions after them until it ends."),
				 errhint("Commit the append first, then wait (esrc.last_position() still gives its position).")));
	last = esrc_sequence_last_value(esrc_relation_oid("position_seq"));
	if (*position > last)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("position " INT64_FORMAT " has not been assigned", *position),
				 errdetail("The last position handed out is " INT64_FORMAT ".", last),
				 errhint("Wait for a position an append returned (esrc.last_position()).")));
	return (long) ms;
}

/*
 * Step 3 of the header comment: does an event of def's categories in
 * (lo, position] lie above the checkpoint of its partition, cps (indexed
 * by partition; the partitions at or past position hold int8 max)?
 */
static bool
event_pending(SubDef *def, int64 lo, int64 position, const int64 *cps)
{
	static const char *sql =
		"SELECT 1 FROM esrc.events e WHERE e.position OPERATOR(pg_catalog.>) $1 "
		"AND e.position OPERATOR(pg_catalog.<=) $2 "
		"AND ($3::text[] IS NULL OR e.category OPERATOR(pg_catalog.=) ANY ($3)) "
		"AND e.position OPERATOR(pg_catalog.>) "
		"($4::int8[])[esrc.stream_partition(e.stream, $5) OPERATOR(pg_catalog.+) 1] LIMIT 1";
	Oid			argtypes[5] = {INT8OID, INT8OID, TEXTARRAYOID, INT8ARRAYOID, INT4OID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	bool		pending;

	values[0] = Int64GetDatum(lo);
	values[1] = Int64GetDatum(position);
	if (def->ncats == 0)
	{
		values[2] = (Datum) 0;
		nulls[2] = 'n';
	}
	else
	{
		Datum	   *d = palloc(sizeof(Datum) * def->ncats);
		int			i;

		for (i = 0; i < def->ncats; i++)
			d[i] = CStringGetTextDatum(def->cats[i]);
		values[2] = PointerGetDatum(construct_array(d, def->ncats, TEXTOID, -1, false, TYPALIGN_INT));
	}
	values[3] = PointerGetDatum(int8_array(cps, def->npartitions));
	values[4] = Int32GetDatum(def->npartitions);
	catalog_run(sql, 5, argtypes, values, nulls, SPI_OK_SELECT);
	pending = SPI_processed > 0;
	SPI_freetuptable(SPI_tuptable);
	return pending;
}

/*
 * Has subscription def applied every event of its categories up to
 * position (SPI connected)?  *horizon_short: no, because an append below
 * position is in flight.
 */
bool
esrc_sub_applied_upto(SubDef *def, int64 position, bool *horizon_short)
{
	static const char *sql =
		"SELECT partition, checkpoint FROM esrc.subscription_checkpoints "
		"WHERE subscription_id OPERATOR(pg_catalog.=) $1 "
		"AND checkpoint OPERATOR(pg_catalog.<) $2";
	Oid			argtypes[2] = {INT8OID, INT8OID};
	Datum		values[2];
	int64	   *cps;
	int64		lo = PG_INT64_MAX;
	uint64		r;
	int			p;

	*horizon_short = subscription_horizon(def) < position;
	if (*horizon_short)
		return false;
	values[0] = Int64GetDatum(def->id);
	values[1] = Int64GetDatum(position);
	catalog_run(sql, 2, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return true;
	cps = palloc(sizeof(int64) * def->npartitions);
	for (p = 0; p < def->npartitions; p++)
		cps[p] = PG_INT64_MAX;
	for (r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		int32		part = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));
		int64		cp = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull));

		if (part >= 0 && part < def->npartitions)
		{
			cps[part] = cp;
			lo = Min(lo, cp);
		}
	}
	SPI_freetuptable(SPI_tuptable);
	return !event_pending(def, lo, position, cps);
}

/*
 * Wait until check(arg) says done (true) or timeout_ms pass (false), woken
 * by the commits that note subscription def (esrc_sub_progress_at_commit).
 * check runs in the caller's SPI connection, with a new snapshot per query;
 * it sets *horizon_short when an append below the position is in flight
 * (the wait then also listens to the appends of def's categories).
 */
bool
esrc_progress_wait(SubDef *def, long timeout_ms,
				   bool (*check) (void *arg, bool *horizon_short), void *arg)
{
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "esrc progress wait",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = CurrentMemoryContext;
	volatile bool done = false;
	volatile bool polling = false;

	esrc_progress_register(&def->key);
	PG_TRY();
	{
		for (;;)
		{
			bool		short_horizon = false;
			long		left;

			ResetLatch(MyLatch);
			MemoryContextReset(cxt);
			MemoryContextSwitchTo(cxt);
			done = check(arg, &short_horizon);
			MemoryContextSwitchTo(old);
			if (done)
				break;
			if (short_horizon && !polling)
			{
				/* an append below is in flight: its end wakes us too */
				esrc_wait_register(&def->key, def->cathashes, def->ncats, def->ncats == 0);
				polling = true;
				continue;		/* check again after registering */
			}
			if (!short_horizon && polling)
			{
				esrc_wait_unregister();
				polling = false;
			}
			left = (long) ((end - GetCurrentTimestamp()) / 1000);
			if (left <= 0)
				break;
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(left, WAIT_SAFETY_MS), PG_WAIT_EXTENSION);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_FINALLY();
	{
		MemoryContextSwitchTo(old);
		esrc_progress_unregister();
		if (polling)
			esrc_wait_unregister();
	}
	PG_END_TRY();
	MemoryContextDelete(cxt);
	return done;
}

typedef struct SubWaitArg
{
	SubDef	   *def;
	int64		position;
} SubWaitArg;

static bool
sub_check(void *arg, bool *horizon_short)
{
	SubWaitArg *a = (SubWaitArg *) arg;

	return esrc_sub_applied_upto(a->def, a->position, horizon_short);
}

/*
 * esrc.wait_for_subscription(name, position, timeout): 'applied' once the
 * consumer group has acknowledged every event of the subscription's
 * categories up to position, 'timeout' otherwise.
 */
Datum
esrc_wait_for_subscription(PG_FUNCTION_ARGS)
{
	char	   *name = subscription_name_arg(fcinfo, 0);
	SubWaitArg	a;
	long		timeout_ms;
	bool		done;

	timeout_ms = esrc_progress_wait_args(fcinfo, "esrc.wait_for_subscription()", &a.position);
	SPI_connect();
	a.def = lookup_subscription(name, CurrentMemoryContext, false);
	check_consumer(a.def);
	done = esrc_progress_wait(a.def, timeout_ms, sub_check, &a);
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(done ? "applied" : "timeout"));
}
