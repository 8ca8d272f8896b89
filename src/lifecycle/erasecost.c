/*-------------------------------------------------------------------------
 *
 * erasecost.c
 *	  The cost-based delay of erasure, after VACUUM's: the settings
 *	  esrc.erase_cost_delay and esrc.erase_cost_limit, and the pair of
 *	  functions a loop that redacts rows calls, esrc_erase_cost_begin()
 *	  once and esrc_erase_cost_point() after each row.
 *
 * An erase of a long stream is one transaction that rewrites every row of
 * the stream as fast as one CPU allows; appends to other streams share the
 * machine with it.  The delay turns the erase into slices: after
 * esrc.erase_cost_limit bytes of work the backend sleeps
 * esrc.erase_cost_delay, so the erase takes at most about
 * limit / (limit / speed + delay) of a CPU and appends get the rest.
 *
 * This file owns:
 *	 - the two settings (defined from _PG_init through
 *	   esrc_erase_cost_init(); USERSET, like vacuum_cost_delay: only roles
 *	   that may erase are slowed down or sped up by them);
 *	 - the cost of a redacted row (esrc_erase_row_cost): ESRC_ERASE_ROW_COST
 *	   (one page, BLCKSZ) for the new row version, its index entries and
 *	   its WAL record, plus the stored size of the data and metadata it
 *	   replaces (out-of-line values count their TOAST size: their chunks
 *	   are deleted).  Measured (unpaced erases of 300-byte, 4 kB and
 *	   32 kB events), redacting a row costs about as much CPU as deleting
 *	   6-11 kB of TOAST, so a page per row gives small and TOASTed events
 *	   about the same CPU per byte of the limit;
 *	 - the nap: WaitLatch with a timeout, in a loop until the whole delay
 *	   has passed, CHECK_FOR_INTERRUPTS after every wake-up (a cancel or a
 *	   terminate ends the erase during a nap) and WL_EXIT_ON_PM_DEATH.
 *	   pg_stat_activity shows the napping backend with wait_event_type
 *	   and wait_event 'Extension'.
 *
 * Invariants kept: the caller decides what it holds while it naps; this
 * file takes and releases no lock.  erase_stream (erase.c) naps with
 * the stream lock, the category lock, RowExclusiveLock on esrc.events,
 * SHARE UPDATE EXCLUSIVE on the category's snapshot tables and the row
 * locks of the rows it redacted so far: appends to the erased stream wait
 * for the whole erase, naps included (docs/lifecycle.md).  The scavenger
 * (scavenge.c) redacts through the same code without pacing: its slices
 * are bounded by esrc.scavenge_max_events instead.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "lifecycle/lifecycle.h"
#include "lifecycleint.h"

/* GUC variables */
int			esrc_erase_cost_delay_ms = ESRC_DEFAULT_ERASE_COST_DELAY;
int			esrc_erase_cost_limit = ESRC_DEFAULT_ERASE_COST_LIMIT;

void
esrc_erase_cost_init(void)
{
	DefineCustomIntVariable("esrc.erase_cost_delay",
							"Nap of an erasing backend after each esrc.erase_cost_limit bytes of work; 0 turns the delay off.",
							"Appends to other streams get the CPU the erase leaves; appends to the erased stream wait for the whole erase, naps included.",
							&esrc_erase_cost_delay_ms,
							ESRC_DEFAULT_ERASE_COST_DELAY, 0, 1000,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("esrc.erase_cost_limit",
							"Work of an erasing backend between two naps, in bytes: each redacted row counts one page (8 kB) plus the stored size of its data and metadata.",
							NULL,
							&esrc_erase_cost_limit,
							ESRC_DEFAULT_ERASE_COST_LIMIT, 1, INT_MAX,
							PGC_USERSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
}

/*
 * Start a throttled loop: take the settings as they are now (a backend
 * re-reads its configuration only between statements, so they cannot
 * change in the middle of one call).
 */
void
esrc_erase_cost_begin(EsrcEraseCost *cost)
{
	cost->delay_ms = esrc_erase_cost_delay_ms;
	cost->limit = esrc_erase_cost_limit;
	cost->balance = 0;
	cost->naps = 0;
	cost->slept_us = 0;
}

/* The work of redacting one row whose data and metadata are as given. */
int64
esrc_erase_row_cost(Datum data, bool datanull, Datum metadata, bool metanull)
{
	int64		cost = ESRC_ERASE_ROW_COST;

	if (!datanull)
		cost += toast_datum_size(data);
	if (!metanull)
		cost += toast_datum_size(metadata);
	return cost;
}

/*
 * Sleep usecs, all of it: a latch set by something else (a notify, a
 * sinval catch-up) ends one WaitLatch early, so wait again for the rest.
 * Interrupts are served after every wake-up; a cancel raises its ERROR
 * here, with the caller's locks released by the abort as usual.
 */
static void
erase_cost_nap(int64 usecs)
{
	TimestampTz end = GetCurrentTimestamp() + usecs;

	for (;;)
	{
		long		remain = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), end);

		if (remain <= 0)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 remain, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Count work bytes of work done; nap once the balance reaches the limit.
 * As VACUUM does, the nap is the delay scaled by balance / limit (a row
 * larger than the limit naps longer), at most 4 delays, and the balance
 * starts again from 0.  Checks for interrupts even with the delay off.
 */
void
esrc_erase_cost_point(EsrcEraseCost *cost, int64 work)
{
	TimestampTz start;
	int64		usecs;

	CHECK_FOR_INTERRUPTS();
	if (cost->delay_ms <= 0)
		return;
	cost->balance += work;
	if (cost->balance < cost->limit)
		return;
	usecs = (int64) ((double) cost->delay_ms * 1000.0 * cost->balance / cost->limit);
	usecs = Min(usecs, (int64) cost->delay_ms * 4000);
	start = GetCurrentTimestamp();
	erase_cost_nap(usecs);
	cost->slept_us += GetCurrentTimestamp() - start;
	cost->naps++;
	cost->balance = 0;
}
