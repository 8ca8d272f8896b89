/*-------------------------------------------------------------------------
 *
 * rulebound.c
 *	  Append marks: what lets a backend keep the first visible version of a
 *	  stream with rules (rules.c) from one read to the next, instead of
 *	  probing the stream's newest events in every read.
 *
 * A max_count or max_age rule hides versions that depend on the stream's
 * newest events (its head, their recorded_at), so a read must find them
 * for every such stream it meets: one index probe per stream and read.
 * rules.c keeps the bound a read computed with the stream's rule, and
 * reuses it in a later read when this file says that the later read's
 * snapshot sees the same events of the stream as the read that computed
 * it.  That is so when no append to the stream was in flight or has
 * ended between the two, which the append marks tell:
 *
 * Shared memory holds ESRC_MARK_SLOTS slots (a stream maps to one by the
 * hash of its name; streams share slots, which only costs reuse) and a
 * clock.  Each slot counts
 *	 - started: transactions that appended to one of its streams while the
 *	   stream had rules (once per transaction and slot; bumped by the append,
 *	   under the stream lock, before its row exists);
 *	 - finished: those that ended (commit or abort), bumped at the end of
 *	   the transaction, after ProcArrayEndTransaction made a commit visible;
 *	 - last_finish: the clock value each finish took (clock + 1, the
 *	   highest), stored before finished is bumped.
 * Appends to streams without rules touch nothing here (rules.c looks the
 * stream up in its cache, as the hard-delete check does anyway).
 *
 * A read that may reuse bounds reads the clock (esrc_mark_clock) before
 * it takes its snapshot S.  For a stream of slot k it then reads finished,
 * started and last_finish (in that order; esrc_mark_quiet).  If finished
 * == started and last_finish <= clock, every transaction counted in
 * started had ended before S was taken (a commit is visible to S), and a
 * transaction not counted started its append after S (its row is not
 * visible to S): S sees exactly the committed appends counted in started.
 * Two reads that find the slot quiet with the same started value therefore
 * see the same events of the stream, and the bound one computed is the
 * bound of the other (max_age also depends on the read's clock: rules.c
 * keeps the cutoff interval in which the bound holds).  A read whose
 * snapshot is older than its clock reading (REPEATABLE READ) must not use
 * this; read.c says when it may.
 *
 * An append that did not bump a slot is one to a stream without rules in
 * the appender's cache.  esrc.set_stream_rules takes the stream lock, so
 * such an append committed before the rule did; a reader's rules cache is
 * loaded before its clock reading, so S sees that append.
 *
 * PREPARE TRANSACTION of an appending transaction is refused (order.c);
 * a backend that dies ends its transaction through the abort path, and a
 * crash reinitialises shared memory.
 *
 * Talks to: rules.c (the only caller), esrc.c (shared memory).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "port/atomics.h"
#include "port/pg_bitutils.h"
#include "storage/shmem.h"

#include "log/log.h"
#include "logint.h"

/* a power of two: 4,096 slots of 24 bytes, 96 kB */
#define ESRC_MARK_SLOTS 4096

typedef struct MarkSlot
{
	pg_atomic_uint64 started;
	pg_atomic_uint64 finished;
	pg_atomic_uint64 last_finish;
} MarkSlot;

typedef struct MarkShared
{
	pg_atomic_uint64 clock;
	MarkSlot	slots[ESRC_MARK_SLOTS];
} MarkShared;

static MarkShared *marks = NULL;

/* the slots this transaction bumped started of, as a bitmap */
static uint64 xact_slots[ESRC_MARK_SLOTS / 64];
static int	xact_nslots = 0;
static bool xact_callback_registered = false;

Size
esrc_mark_shmem_size(void)
{
	return sizeof(MarkShared);
}

void
esrc_mark_shmem_init(void)
{
	bool		found;
	int			i;

	marks = ShmemInitStruct("esrc append marks", sizeof(MarkShared), &found);
	if (found)
		return;
	pg_atomic_init_u64(&marks->clock, 0);
	for (i = 0; i < ESRC_MARK_SLOTS; i++)
	{
		pg_atomic_init_u64(&marks->slots[i].started, 0);
		pg_atomic_init_u64(&marks->slots[i].finished, 0);
		pg_atomic_init_u64(&marks->slots[i].last_finish, 0);
	}
}

/* End the transaction's appends in every slot it bumped. */
static void
finish_slots(void)
{
	int			w;

	for (w = 0; w < ESRC_MARK_SLOTS / 64 && xact_nslots > 0; w++)
	{
		while (xact_slots[w] != 0)
		{
			int			bit = pg_rightmost_one_pos64(xact_slots[w]);
			MarkSlot   *slot = &marks->slots[w * 64 + bit];
			uint64		now = pg_atomic_add_fetch_u64(&marks->clock, 1);
			uint64		last = pg_atomic_read_u64(&slot->last_finish);

			/* last_finish = max(last_finish, now); CAS is a full barrier */
			while (last < now &&
				   !pg_atomic_compare_exchange_u64(&slot->last_finish, &last, now))
				;
			/* after last_finish: a reader that sees this finish sees it */
			pg_atomic_fetch_add_u64(&slot->finished, 1);
			xact_slots[w] &= ~(UINT64CONST(1) << bit);
			xact_nslots--;
		}
	}
	memset(xact_slots, 0, sizeof(xact_slots));
	xact_nslots = 0;
}

static void
mark_xact_callback(XactEvent event, void *arg)
{
	if (xact_nslots == 0)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			/* order.c refuses it too; a prepared append would never finish */
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot prepare a transaction that appended events")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			/* after ProcArrayEndTransaction(): a commit is visible now */
			finish_slots();
			break;
		default:
			break;
	}
}

/*
 * An append to a stream with rules (hash: hash_bytes() of its name), in
 * this transaction, before its row is inserted.
 */
void
esrc_mark_append(uint32 hash)
{
	uint32		k = hash & (ESRC_MARK_SLOTS - 1);
	uint64		bit = UINT64CONST(1) << (k & 63);

	if (marks == NULL)
		return;
	if (!xact_callback_registered)
	{
		RegisterXactCallback(mark_xact_callback, NULL);
		xact_callback_registered = true;
	}
	if (xact_slots[k >> 6] & bit)
		return;
	xact_slots[k >> 6] |= bit;
	xact_nslots++;
	/* a full barrier: counted before the row exists */
	pg_atomic_fetch_add_u64(&marks->slots[k].started, 1);
}

/*
 * The clock, read before a read takes its snapshot.  0 without shared
 * memory: then no slot is ever quiet.
 */
uint64
esrc_mark_clock(void)
{
	uint64		clock;

	if (marks == NULL)
		return 0;
	clock = pg_atomic_read_u64(&marks->clock);
	pg_memory_barrier();
	return clock;
}

/*
 * Is the slot of the stream quiet for a read whose snapshot was taken after
 * it read clock (see the header comment)?  *mark: the slot's started count,
 * which identifies the events of the stream such a read sees.
 */
bool
esrc_mark_quiet(uint32 hash, uint64 clock, uint64 *mark)
{
	MarkSlot   *slot;
	uint64		finished;
	uint64		started;
	uint64		last;

	*mark = 0;
	if (marks == NULL)
		return false;
	slot = &marks->slots[hash & (ESRC_MARK_SLOTS - 1)];
	finished = pg_atomic_read_u64(&slot->finished);
	pg_read_barrier();
	started = pg_atomic_read_u64(&slot->started);
	pg_read_barrier();
	last = pg_atomic_read_u64(&slot->last_finish);
	*mark = started;
	return finished == started && last <= clock;
}

/* ----------------------------------------------------------------
 * The bound cache: one EsrcBound per stream with rules (rules.c keeps it
 * in its cache entry of the stream, so a reload of the rules empties it)
 * ----------------------------------------------------------------
 */

static uint64 read_serial = 0;

/* A number for a read that uses the bound cache, never 0. */
uint64
esrc_bound_serial(void)
{
	return ++read_serial;
}

/*
 * The first visible version e holds for this read, or -1 if it must be
 * computed: a read (serial, whose snapshot was taken after it read clock)
 * may use e if this read already did, or if e was computed while the slot
 * of the stream (hash) was quiet and the slot is quiet now with the same
 * mark, and the read's max_age cutoff is in the interval where e holds.
 * *mark and *quiet are what esrc_bound_store needs if it returns -1.
 */
int64
esrc_bound_lookup(EsrcBound *e, uint32 hash, uint64 serial, uint64 clock,
				  TimestampTz cutoff, uint64 *mark, bool *quiet)
{
	*quiet = false;
	*mark = 0;
	if (e->serial == serial)
		return e->first_visible;
	*quiet = esrc_mark_quiet(hash, clock, mark);
	if (*quiet && e->clean && e->mark == *mark &&
		e->cut_after < cutoff && cutoff <= e->cut_until)
	{
		e->serial = serial;
		return e->first_visible;
	}
	return -1;
}

/*
 * Keep the bound computed by the read serial: for this read whatever
 * happens, for later ones if the slot was quiet (mark, quiet from
 * esrc_bound_lookup, read before or after the computation: the read's
 * snapshot is what matters) and while cut_after < cutoff <= cut_until.
 */
void
esrc_bound_store(EsrcBound *e, uint64 serial, uint64 mark, bool quiet,
				 int64 first_visible, TimestampTz cut_after, TimestampTz cut_until)
{
	e->serial = serial;
	e->clean = quiet;
	e->mark = mark;
	e->first_visible = first_visible;
	e->cut_after = cut_after;
	e->cut_until = cut_until;
}
