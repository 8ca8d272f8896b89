/*-------------------------------------------------------------------------
 *
 * projpace.c
 *	  Pacing of the projection workers under a burst of appends: the
 *	  settings esrc.projection_cost_delay and esrc.projection_cost_limit,
 *	  and the nap a worker takes between two batches (esrc_projection_pace,
 *	  called by projworker.c's run_round after every batch that applied
 *	  events).
 *
 * In the spirit of autovacuum's vacuum_cost_delay: a worker counts the
 * events it applies; once it has applied esrc.projection_cost_limit of
 * them since its last nap, it naps esrc.projection_cost_delay, so that
 * the writers get the CPU and WAL it would have used.  Unlike vacuum's,
 * the nap is taken only while events are being appended to the worker's
 * database: the worker compares esrc.metrics' committed-events counter
 * (metrics.c, one atomic read) with its value at the previous check.
 * During a burst the projections therefore run at most cost_limit events
 * per cost_delay (plus the batches' own time) and fall behind; once the
 * appends stop, the next check finds the counter unchanged and the worker
 * catches up at full speed.  With esrc.track_metrics off in the worker
 * the counter does not move, and the worker naps at every check.
 *
 * A nap is between two batches, outside any transaction: it changes
 * nothing of what a batch applies or commits (exactly once stays a matter
 * of the batch's transaction).  It is a latch wait: SIGTERM ends it at
 * once (CHECK_FOR_INTERRUPTS), SIGHUP ends it early (the round goes on
 * without naps, and the worker's loop reloads the configuration); the
 * worker's wake-up registration (subwait.c) is suspended meanwhile, so
 * the commits of the burst do not wake it once each, and it sets its own
 * latch afterwards, so that its loop checks for events before it sleeps.
 *
 * esrc.projection_cost_delay = 0 (the default) turns pacing off: the
 * workers' latency is today's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "base/base.h"
#include "subscription/subscription.h"
#include "projectionint.h"

/* settings */
int			esrc_projection_cost_delay_ms = 0;
int			esrc_projection_cost_limit = 1000;

/* this worker's balance: events applied since its last nap (or check) */
static int64 balance = 0;
static uint64 events_at_check = 0;
static bool checked_once = false;

void
esrc_projection_pace_init(void)
{
	DefineCustomIntVariable("esrc.projection_cost_delay",
							"Nap of a projection worker, while events are being appended, each time it has applied esrc.projection_cost_limit events.",
							"0 (the default) turns pacing off. Under a burst of appends the projections then lag and catch up once the appends stop.",
							&esrc_projection_cost_delay_ms,
							0, 0, 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("esrc.projection_cost_limit",
							"Events a projection worker applies between two naps of esrc.projection_cost_delay while events are being appended.",
							NULL,
							&esrc_projection_cost_limit,
							1000, 1, 1000000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
}

/*
 * Are events being appended to this database?  True if the committed
 * events counter moved since the previous check (or cannot tell).
 */
static bool
appends_going_on(void)
{
	uint64		now;
	bool		moved;

	if (!esrc_track_metrics)
		return true;
	now = esrc_metrics_events_now();
	moved = !checked_once || now != events_at_check;
	events_at_check = now;
	checked_once = true;
	return moved;
}

/* Nap delay_ms on the latch; SIGTERM exits, SIGHUP ends the nap. */
static void
nap(int delay_ms)
{
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay_ms);
	bool		suspended = esrc_wait_suspend();

	for (;;)
	{
		long		left = (long) ((end - GetCurrentTimestamp()) / 1000);

		if (left <= 0 || ConfigReloadPending)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 left, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	if (suspended)
		esrc_wait_resume();
	/* a commit (or a launcher's wake-up) during the nap woke nobody */
	SetLatch(MyLatch);
}

/*
 * Called after each batch that applied n events (n > 0), outside any
 * transaction: nap if the balance is spent and appends are going on.
 */
void
esrc_projection_pace(int n)
{
	if (esrc_projection_cost_delay_ms <= 0)
	{
		balance = 0;
		return;
	}
	balance += n;
	if (balance < esrc_projection_cost_limit || ConfigReloadPending)
		return;
	balance = 0;
	if (!appends_going_on())
		return;
	pgstat_report_activity(STATE_IDLE, "esrc projection pacing");
	nap(esrc_projection_cost_delay_ms);
	pgstat_report_activity(STATE_IDLE, NULL);
}
