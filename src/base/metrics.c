/*-------------------------------------------------------------------------
 *
 * metrics.c
 *	  Counters for esrc.metrics: appends, events, conflicts and idempotent
 *	  hits of the append path, records, batches and failures of the
 *	  forwarder, per database, in shared memory; the SQL function
 *	  esrc.metrics_counters() that the view esrc.metrics wraps.
 *
 * Shared memory holds ESRC_METRICS_DATABASES slots, one per database,
 * claimed by the first backend of that database that counts something
 * (a compare-and-swap of the slot's dbid from 0) and kept until the
 * server stops: counters start at 0 at every server start, as Prometheus
 * counters may.  The last slot is never claimed: databases that find
 * every other slot taken share it, shown as database "(other)".  Each counter is a
 * pg_atomic_uint64: no lock, no wait.
 *
 * The append path stays cheap: an append adds to counters of its own
 * backend (pending[], one entry per subtransaction nesting level), which
 * the transaction's commit adds to the slot (three atomic adds at most).
 * So appends and events count what was committed (a rolled-back
 * transaction or savepoint counts nothing; a PREPAREd transaction counts
 * at PREPARE).  Conflicts (the 40001 of a version check) count when they
 * are raised, since their transaction always ends in an abort.  The
 * forwarder worker counts into the slot of its database when a batch is
 * delivered and when it reports a failure.  esrc.track_metrics = off
 * turns all counting off (for measurements of its cost).
 *
 * Talks to: append.c (esrc_metrics_append, esrc_metrics_conflict),
 * fwdsend.c and fwdstatus.c (esrc_metrics_forwarded,
 * esrc_metrics_forwarder_error), esrc.c (shared memory, GUC),
 * src/sql/60_metrics.sql (the function and the view).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"

#include "base/base.h"

PG_FUNCTION_INFO_V1(esrc_metrics_counters);

/* slots for this many databases; more share the last one */
#define ESRC_METRICS_DATABASES	64
#define OTHER_SLOT				(ESRC_METRICS_DATABASES - 1)

typedef enum MetricCounter
{
	M_APPENDS,					/* append calls that wrote events */
	M_EVENTS,					/* events they wrote */
	M_CONFLICTS,				/* 40001 of a version check */
	M_IDEMPOTENT,				/* append calls answered from stored ids */
	M_FORWARDED,				/* records Kafka acknowledged */
	M_BATCHES,					/* batches (Kafka transactions) delivered */
	M_FWD_ERRORS,				/* failures the forwarder reported */
	M_NCOUNTERS
} MetricCounter;

/* the counters the append path batches per transaction */
#define M_NPENDING	(M_IDEMPOTENT + 1)

typedef struct EsrcMetricsSlot
{
	pg_atomic_uint32 dbid;		/* 0 = free */
	pg_atomic_uint64 counters[M_NCOUNTERS];
} EsrcMetricsSlot;

typedef struct EsrcMetricsShared
{
	EsrcMetricsSlot slots[ESRC_METRICS_DATABASES];
} EsrcMetricsShared;

/* GUC */
bool		esrc_track_metrics = true;

static EsrcMetricsShared *metrics = NULL;
static EsrcMetricsSlot *my_slot = NULL; /* this backend's database's */

/* per backend: counts not committed yet, by nesting level */
typedef struct PendingCounts
{
	uint64		c[M_NPENDING];
} PendingCounts;
static PendingCounts *pending = NULL;
static int	npending = 0;		/* entries allocated */
static int	max_level = 0;		/* highest level counted since the flush */
static bool callbacks_registered = false;

Size
esrc_metrics_shmem_size(void)
{
	return MAXALIGN(sizeof(EsrcMetricsShared));
}

/* Called by esrc.c's shmem_startup hook, AddinShmemInitLock held. */
void
esrc_metrics_shmem_init(void)
{
	bool		found;
	int			i;
	int			j;

	metrics = ShmemInitStruct("esrc metrics", esrc_metrics_shmem_size(), &found);
	if (found)
		return;
	for (i = 0; i < ESRC_METRICS_DATABASES; i++)
	{
		pg_atomic_init_u32(&metrics->slots[i].dbid, 0);
		for (j = 0; j < M_NCOUNTERS; j++)
			pg_atomic_init_u64(&metrics->slots[i].counters[j], 0);
	}
}

/* Called by _PG_init (esrc.c). */
void
esrc_metrics_init(void)
{
	DefineCustomBoolVariable("esrc.track_metrics",
							 "Count appends, events, conflicts, idempotent hits and the forwarder's deliveries for esrc.metrics.",
							 "Off only to measure what counting costs.",
							 &esrc_track_metrics,
							 true,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
}

/*
 * The slot of database dbid, claimed if it has none; the last slot, which
 * is never claimed, when every other slot is taken.  NULL without shared
 * memory.
 */
static EsrcMetricsSlot *
slot_of(Oid dbid)
{
	int			i;

	if (metrics == NULL || !OidIsValid(dbid))
		return NULL;
	for (i = 0; i < OTHER_SLOT; i++)
	{
		EsrcMetricsSlot *s = &metrics->slots[i];
		uint32		cur = pg_atomic_read_u32(&s->dbid);

		if (cur == 0)
		{
			uint32		expected = 0;

			if (pg_atomic_compare_exchange_u32(&s->dbid, &expected, dbid))
				return s;
			cur = expected;		/* another backend took it first */
		}
		if (cur == dbid)
			return s;
	}
	return &metrics->slots[OTHER_SLOT];
}

static EsrcMetricsSlot *
my_database_slot(void)
{
	if (my_slot == NULL)
		my_slot = slot_of(MyDatabaseId);
	return my_slot;
}

/*
 * Events committed so far in this backend's database (the counter of
 * esrc.metrics' esrc_events_total), read without a lock; 0
 * without shared memory.  projpace.c reads it to tell whether appends are
 * going on.
 */
uint64
esrc_metrics_events_now(void)
{
	EsrcMetricsSlot *s = my_database_slot();

	return s == NULL ? 0 : pg_atomic_read_u64(&s->counters[M_EVENTS]);
}

static void
count_now(MetricCounter c, uint64 n)
{
	EsrcMetricsSlot *s;

	if (!esrc_track_metrics || n == 0 || (s = my_database_slot()) == NULL)
		return;
	pg_atomic_fetch_add_u64(&s->counters[c], n);
}

static void
forget_pending(void)
{
	if (max_level > 0)
		memset(pending, 0, sizeof(PendingCounts) * (max_level + 1));
	max_level = 0;
}

static void
metrics_xact_callback(XactEvent event, void *arg)
{
	int			i;

	if (max_level == 0)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			/* subtransactions have been merged into level 1 */
			for (i = 0; i < M_NPENDING; i++)
				count_now((MetricCounter) i, pending[1].c[i]);
			forget_pending();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			forget_pending();
			break;
		default:
			break;
	}
}

/* A subtransaction's counts go to its parent at its commit, away at its abort. */
static void
metrics_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						 SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	int			i;

	if (level > max_level || level < 2)
		return;
	if (event == SUBXACT_EVENT_COMMIT_SUB)
		for (i = 0; i < M_NPENDING; i++)
			pending[level - 1].c[i] += pending[level].c[i];
	if (event == SUBXACT_EVENT_COMMIT_SUB || event == SUBXACT_EVENT_ABORT_SUB)
		memset(&pending[level], 0, sizeof(PendingCounts));
}

/*
 * An append call that returned: it wrote nevents events, or (idempotent)
 * it was answered from the ids already stored.  Counted when its
 * transaction commits.  May ereport (out of memory) on the first call of
 * a backend or at a new nesting level only.
 */
void
esrc_metrics_append(int nevents, bool idempotent)
{
	int			level;

	if (!esrc_track_metrics)
		return;
	level = GetCurrentTransactionNestLevel();
	if (level >= npending)
	{
		int			n = Max(8, level * 2);

		if (pending == NULL)
			pending = MemoryContextAllocZero(TopMemoryContext, sizeof(PendingCounts) * n);
		else
		{
			pending = repalloc(pending, sizeof(PendingCounts) * n);
			memset(&pending[npending], 0, sizeof(PendingCounts) * (n - npending));
		}
		npending = n;
	}
	if (!callbacks_registered)
	{
		RegisterXactCallback(metrics_xact_callback, NULL);
		RegisterSubXactCallback(metrics_subxact_callback, NULL);
		callbacks_registered = true;
	}
	if (idempotent)
		pending[level].c[M_IDEMPOTENT]++;
	else
	{
		pending[level].c[M_APPENDS]++;
		pending[level].c[M_EVENTS] += nevents;
	}
	max_level = Max(max_level, level);
}

/* A version check failed with 40001: counted now (its transaction aborts). */
void
esrc_metrics_conflict(void)
{
	count_now(M_CONFLICTS, 1);
}

/* The forwarder worker: a batch of which "records" records are in Kafka. */
void
esrc_metrics_forwarded(int records)
{
	count_now(M_BATCHES, 1);
	count_now(M_FORWARDED, records);
}

/* The forwarder worker reported a failure (fwdstatus.c). */
void
esrc_metrics_forwarder_error(void)
{
	count_now(M_FWD_ERRORS, 1);
}

/*
 * esrc.metrics_counters(): one row per database with a slot, the
 * counters as bigint (they wrap past 2^63 only after centuries).
 */
Datum
esrc_metrics_counters(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	esrc_require_shared();
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < ESRC_METRICS_DATABASES; i++)
	{
		EsrcMetricsSlot *s = &metrics->slots[i];
		Oid			dbid = pg_atomic_read_u32(&s->dbid);
		Datum		values[1 + M_NCOUNTERS];
		bool		nulls[1 + M_NCOUNTERS];
		char	   *name;
		int			j;

		if (i == OTHER_SLOT)
		{
			bool		used = false;

			for (j = 0; j < M_NCOUNTERS; j++)
				used |= pg_atomic_read_u64(&s->counters[j]) != 0;
			if (!used)
				continue;
			name = "(other)";
		}
		else if (dbid == 0 || (name = get_database_name(dbid)) == NULL)
			continue;			/* free, or a dropped database */
		memset(nulls, 0, sizeof(nulls));
		values[0] = DirectFunctionCall1(namein, CStringGetDatum(name));
		for (j = 0; j < M_NCOUNTERS; j++)
			values[1 + j] = Int64GetDatum((int64) pg_atomic_read_u64(&s->counters[j]));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
