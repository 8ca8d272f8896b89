/*-------------------------------------------------------------------------
 *
 * projpace.c
 *	  Pacing of the projection workers under a burst of appends: the
 *	  settings esrc.projection_cost_delay and esrc.projection_cost_limit,
 *	  and the nap a worker takes between two batches (esrc_projection_pace,
 *	  called by projworker.c's run_round after every batch that applied
 *	  events); and the wait between two rounds of a worker, which lets
 *	  events gather into batches (esrc.projection_batch_delay and
 *	  esrc.projection_batch_delay_max, esrc_projection_round_begin/_end).
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
 * The wait between rounds.  After a round that applied events the worker
 * waits before it looks again, so that the events committed meanwhile
 * make one batch (one transaction) instead of one per commit.  Each batch
 * costs the same catalog work whatever its size (the checkpoints, the
 * failures, the counters: about 100 microseconds on the test machine by
 * a perf profile, against 20 for an event of a one-upsert handler), so
 * under a heavy load larger batches spend less CPU per event, CPU the
 * writers share; under a light load the wait is latency and saves nothing
 * that matters.  The
 * wait therefore follows the worker's own load: it starts at
 * esrc.projection_batch_delay (2 ms); when the rounds' CPU time is more
 * than a quarter of the time they and the waits between them took (the
 * worker busy for a quarter of the time or more, over 50 ms or more), it
 * doubles, up to esrc.projection_batch_delay_max (10 ms); below an eighth
 * it halves, down to esrc.projection_batch_delay again, and a round that
 * applied nothing puts it back there at once.  The cost of a round does not
 * depend on its events only: at 1,000 appends/s to one projection on the
 * test machine a worker with the wait fixed at 2 ms is busy about a
 * quarter of the time (rounds of 3 events), so the wait there moves
 * between 2 and 4 ms; under several thousand appends/s to three
 * projections it reaches 10 ms (docs/projections.md, "The wait between
 * rounds", has the figures).  CPU time (the process's clock), not
 * elapsed time: a worker waiting for a core the writers hold is not
 * busier for it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <time.h>

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

/* settings (only this file reads them) */
static int	esrc_projection_cost_delay_ms = 0;
static int	esrc_projection_cost_limit = 1000;
static int	esrc_projection_batch_delay_ms = 2;
static int	esrc_projection_batch_delay_max_ms = 10;

/*
 * The wait between rounds: its length now, the end of the previous round,
 * and the CPU clock at the start of this one.
 */
static int	round_wait_ms = 0;
static TimestampTz previous_round_end = 0;
static int64 round_cpu_start_us = 0;

/* the busy share is measured over rounds of at least this long together */
#define DUTY_WINDOW_US 50000
static int64 window_cpu_us = 0;
static int64 window_us = 0;

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
	DefineCustomIntVariable("esrc.projection_batch_delay",
							"Wait of a projection worker after a round that applied events, so that under load the next events gather into one batch.",
							"0 starts the next round at once. Under a heavy load the wait grows up to esrc.projection_batch_delay_max.",
							&esrc_projection_batch_delay_ms,
							2, 0, 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("esrc.projection_batch_delay_max",
							"Longest wait of a projection worker between two rounds while it is busy for more than a quarter of the time.",
							"At or below esrc.projection_batch_delay the wait does not grow.",
							&esrc_projection_batch_delay_max_ms,
							10, 0, 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/* CPU time of this process, in microseconds */
static int64
cpu_time_us(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
		return 0;
	return (int64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A round of the worker begins (projworker.c's loop, after its wait). */
void
esrc_projection_round_begin(void)
{
	round_cpu_start_us = cpu_time_us();
}

/*
 * The round that began at the last esrc_projection_round_begin has ended,
 * having applied that many events: the wait before the next, in ms (0 when
 * it applied nothing or esrc.projection_batch_delay is 0).  See the header;
 * the share of the time the worker is busy is taken over rounds that last
 * DUTY_WINDOW_US together, so that one slow round does not move the wait.
 */
int
esrc_projection_round_end(int64 applied)
{
	int			base = esrc_projection_batch_delay_ms;
	int			most = Max(base, esrc_projection_batch_delay_max_ms);
	TimestampTz now = GetCurrentTimestamp();
	int64		cpu = cpu_time_us() - round_cpu_start_us;

	/* the wait before, and the round; the first round counts as idle */
	int64		cycle = previous_round_end == 0 ? DUTY_WINDOW_US : now - previous_round_end;

	previous_round_end = now;
	if (applied <= 0 || base <= 0)
	{
		round_wait_ms = base;
		window_cpu_us = window_us = 0;
		return 0;
	}
	/* within the settings, also after a reload changed them */
	round_wait_ms = Min(Max(round_wait_ms, base), most);
	window_cpu_us += cpu;
	window_us += Max(cycle, 1);
	if (window_us >= DUTY_WINDOW_US)
	{
		int			was = round_wait_ms;

		if (window_cpu_us * 4 > window_us)
			round_wait_ms = Min(most, round_wait_ms * 2);
		else if (window_cpu_us * 8 < window_us)
			round_wait_ms = Max(base, round_wait_ms / 2);
		if (round_wait_ms != was)
			elog(DEBUG1, "projection worker busy %d%% of the last %d ms: the wait between rounds is now %d ms",
				 (int) (window_cpu_us * 100 / window_us), (int) (window_us / 1000), round_wait_ms);
		window_cpu_us = window_us = 0;
	}
	return round_wait_ms;
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
