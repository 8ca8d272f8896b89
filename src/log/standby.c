/*-------------------------------------------------------------------------
 *
 * standby.c
 *	  Commit-safe global reads on hot standbys, the primary's side: the
 *	  horizon publisher (a background worker per database that appends,
 *	  and its launcher) that writes the primary's in-flight registry, as
 *	  order.c reads it, in place into the one row of esrc.standby_horizon.
 *	  A standby reads the row in standbyread.c.  Why that is safe: order.c's
 *	  header, "Hot standbys".
 *
 * The launcher (a worker of the cluster, no database) starts a publisher
 * in a database when a transaction that appended there ends and none runs
 * (the end-of-append hook, esrc_listen_appended, asks it); the publisher
 * then stays while appends go on, woken by its latch from that hook, and
 * overwrites the row when the registry's state changed, at most once per
 * esrc.standby_horizon_interval.  After ESRC_PUBLISHER_IDLE_MS without a
 * wake, or when it finds no esrc (or an esrc without the table) in its
 * database, it leaves, and the next append there asks for a new one; one
 * that stops on an error starts again after launch.c's back-off.  Both start only once recovery is over, so a
 * standby runs neither and a promoted standby starts them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "access/genam.h"
#include "access/relscan.h"
#include "access/xlog.h"
#include "storage/bufmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/latch.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "log/log.h"
#include "logint.h"

/* esrc.standby_horizon_interval: ms between two rows at most; -1 = off */
int			esrc_standby_horizon_interval = 5;

#define HZ_MAX_REQUESTS		64

/* a publisher with nothing to do for this long leaves (leave_if_idle) */
#define ESRC_PUBLISHER_IDLE_MS	1000

typedef struct HzSlot
{
	bool		in_use;			/* given to a publisher by the launcher */
	Oid			dbid;
	pid_t		pid;			/* 0 once it has left */
	Latch	   *latch;
	bool		exited;			/* it is leaving or left: wakes go to the launcher */
	bool		idle_exit;		/* it left with nothing to do */
	bool		published;		/* it wrote a row (resets the back-off) */
} HzSlot;

typedef struct HzShared
{
	slock_t		mutex;
	Latch	   *launcher_latch;
	int			nrequests;
	bool		overflow;		/* requests were dropped */
	Oid			requests[HZ_MAX_REQUESTS];
	int			nslots;
	HzSlot		slots[FLEXIBLE_ARRAY_MEMBER];
} HzShared;

static HzShared *hz_shared = NULL;

Size
esrc_standby_shmem_size(void)
{
	return add_size(offsetof(HzShared, slots),
					mul_size(max_worker_processes, sizeof(HzSlot)));
}

/* Called with AddinShmemInitLock held. */
void
esrc_standby_shmem_init(void)
{
	bool		found;

	hz_shared = ShmemInitStruct("esrc horizon publishers",
								esrc_standby_shmem_size(), &found);
	if (!found)
	{
		memset(hz_shared, 0, esrc_standby_shmem_size());
		SpinLockInit(&hz_shared->mutex);
		hz_shared->nslots = max_worker_processes;
	}
}

/*
 * The end-of-append hook: wake the publisher of the database, or ask the
 * launcher for one.  At the end of a transaction: never raises an error.
 */
static void
standby_appended(Oid dbid, const uint64 *hashes, int nhashes, bool overflow)
{
	Latch	   *latch = NULL;
	bool		found = false;
	int			i;

	if (hz_shared == NULL || esrc_standby_horizon_interval < 0)
		return;
	SpinLockAcquire(&hz_shared->mutex);
	for (i = 0; i < hz_shared->nslots && !found; i++)
	{
		HzSlot	   *s = &hz_shared->slots[i];

		if (s->in_use && s->dbid == dbid && !s->exited)
		{
			found = true;
			latch = s->latch;	/* NULL while it starts: it publishes first */
		}
	}
	if (!found)
	{
		for (i = 0; i < hz_shared->nrequests && hz_shared->requests[i] != dbid; i++)
			;
		if (i == hz_shared->nrequests)
		{
			if (i < HZ_MAX_REQUESTS)
				hz_shared->requests[hz_shared->nrequests++] = dbid;
			else
				hz_shared->overflow = true;
		}
		latch = hz_shared->launcher_latch;
	}
	SpinLockRelease(&hz_shared->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

void
esrc_standby_init(void)
{
	DefineCustomIntVariable("esrc.standby_horizon_interval",
							"Least time between two rows of the read horizon the primary publishes for its hot standbys (esrc.standby_horizon).",
							"One WAL record (about 330 bytes) and a WAL flush per row, no transaction id; a row only when the horizon changed. -1 turns publishing off: standbys' global reads then stay where the last row left them.",
							&esrc_standby_horizon_interval,
							5,
							-1,
							60000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	esrc_listen_appended(standby_appended);
	esrc_register_launcher("esrc_horizon_launcher_main", "esrc horizon launcher");
}

/* ----------------------------------------------------------------
 * The publisher
 * ----------------------------------------------------------------
 */

static int	my_hz_slot = -1;
static bool my_idle_exit = false;

static void
publisher_detach(int code, Datum arg)
{
	HzSlot	   *s = &hz_shared->slots[DatumGetInt32(arg)];

	SpinLockAcquire(&hz_shared->mutex);
	s->pid = 0;
	s->latch = NULL;
	s->exited = true;
	s->idle_exit = my_idle_exit && code == 0;
	SpinLockRelease(&hz_shared->mutex);
}

static bool
same_capture(const EsrcRegistryCapture *a, const EsrcRegistryCapture *b)
{
	return a->last_position == b->last_position && a->horizon == b->horizon &&
		a->overflow_bound == b->overflow_bound && a->nentries == b->nentries &&
		memcmp(a->hashes, b->hashes, sizeof(uint64) * a->nentries) == 0 &&
		memcmp(a->bounds, b->bounds, sizeof(uint64) * a->nentries) == 0;
}

/* The last reading written (in TopMemoryContext); nentries < 0: none yet. */
static EsrcRegistryCapture last = {0, 0, -1, NULL, NULL, 0};

/*
 * Overwrite the row in place with cap (heap_inplace_update: WAL-logged,
 * no new row version, no transaction id): its global horizon, and, when
 * the row has room for its categories, those and its last(seq) and
 * overflow bound; otherwise the row keeps those of an earlier reading.
 */
static void
write_row(Relation rel, const EsrcRegistryCapture *cap)
{
	HeapTuple	oldtup;
	HeapTuple	newtup;
	void	   *state;
	Datum		values[Natts_sh];
	bool		nulls[Natts_sh] = {false};
	bool		replace[Natts_sh] = {false};

	systable_inplace_update_begin(rel, InvalidOid, false, NULL, 0, NULL, &oldtup, &state);
	if (oldtup == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("esrc.standby_horizon has no row"),
				 errhint("Drop and create the extension esrc again.")));
	values[Anum_sh_published_at - 1] = TimestampTzGetDatum(GetCurrentTimestamp());
	replace[Anum_sh_published_at - 1] = true;
	values[Anum_sh_horizon - 1] = Int64GetDatum(cap->horizon);
	replace[Anum_sh_horizon - 1] = true;
	if (cap->nentries <= SH_CATEGORIES)
	{
		bytea	   *b = palloc0(VARHDRSZ + SH_CATEGORIES * sizeof(ShEntry));
		int			i;

		SET_VARSIZE(b, VARHDRSZ + SH_CATEGORIES * sizeof(ShEntry));
		for (i = 0; i < cap->nentries; i++)
		{
			ShEntry		e = {cap->hashes[i], cap->bounds[i]};

			memcpy(VARDATA(b) + i * sizeof(ShEntry), &e, sizeof(ShEntry));
		}
		values[Anum_sh_last_position - 1] = Int64GetDatum(cap->last_position);
		values[Anum_sh_overflow_bound - 1] = Int64GetDatum((int64) cap->overflow_bound);
		values[Anum_sh_ncategories - 1] = Int32GetDatum(cap->nentries);
		values[Anum_sh_categories - 1] = PointerGetDatum(b);
		replace[Anum_sh_last_position - 1] = true;
		replace[Anum_sh_overflow_bound - 1] = true;
		replace[Anum_sh_ncategories - 1] = true;
		replace[Anum_sh_categories - 1] = true;
	}
	newtup = heap_modify_tuple(oldtup, RelationGetDescr(rel), values, nulls, replace);
	systable_inplace_update_finish(state, newtup);
}

/*
 * Read the registry (order.c) and, when it changed since the last row,
 * overwrite the row and flush the WAL (so that walsenders send it; we
 * never wait for a standby), in a transaction of its own that takes no
 * transaction id.  True if it wrote.
 */
static bool
publish(void)
{
	Oid			nsp;
	Oid			seqoid = InvalidOid;
	Oid			relid = InvalidOid;
	EsrcRegistryCapture cap;
	bool		wrote = false;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	nsp = get_namespace_oid("esrc", true);
	if (OidIsValid(nsp))
	{
		seqoid = get_relname_relid("position_seq", nsp);
		relid = get_relname_relid("standby_horizon", nsp);
	}
	if (!OidIsValid(seqoid) || !OidIsValid(relid))
	{
		PopActiveSnapshot();
		CommitTransactionCommand();
		my_idle_exit = true;
		proc_exit(0);
	}

	/*
	 * Lock both before the capture (which would lock the sequence anyway),
	 * and look again: a DROP EXTENSION that held them has dropped them by
	 * the time our lock is granted (LockRelationOid accepted its
	 * invalidations), and the database then has no esrc to publish for.
	 */
	LockRelationOid(seqoid, RowExclusiveLock);
	LockRelationOid(relid, RowExclusiveLock);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(seqoid)) ||
		!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
	{
		PopActiveSnapshot();
		CommitTransactionCommand();
		my_idle_exit = true;
		proc_exit(0);
	}

	/* the capture comes before the row's WAL record */
	esrc_capture_registry(seqoid, &cap);
	if (last.nentries < 0 || !same_capture(&cap, &last))
	{
		Relation	rel = table_open(relid, RowExclusiveLock);

		write_row(rel, &cap);
		table_close(rel, RowExclusiveLock);
		XLogFlush(XactLastRecEnd);
		wrote = true;

		if (last.hashes != NULL)
		{
			pfree(last.hashes);
			pfree(last.bounds);
		}
		last = cap;
		last.hashes = MemoryContextAlloc(TopMemoryContext, sizeof(uint64) * Max(cap.nentries, 1));
		last.bounds = MemoryContextAlloc(TopMemoryContext, sizeof(uint64) * Max(cap.nentries, 1));
		memcpy(last.hashes, cap.hashes, sizeof(uint64) * cap.nentries);
		memcpy(last.bounds, cap.bounds, sizeof(uint64) * cap.nentries);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	return wrote;
}

/*
 * No wake for ESRC_PUBLISHER_IDLE_MS: leave, so that the database can be
 * dropped (DROP DATABASE waits up to 5 s for its sessions to leave) and
 * an idle database holds no worker.  Once exited is set, the end-of-append
 * hook asks the launcher for a new publisher instead of setting our latch;
 * a wake that set our latch before is handed to the launcher here.  We
 * publish nothing after exited is set, and the launcher starts a new
 * publisher only in a slot not exited: so at most one publisher of a
 * database writes at a time, and rows commit in the order of their
 * captures (order.c, "Hot standbys", monotonic).
 */
static void
leave_if_idle(int slot)
{
	Latch	   *launcher = NULL;

	SpinLockAcquire(&hz_shared->mutex);
	hz_shared->slots[slot].exited = true;
	SpinLockRelease(&hz_shared->mutex);
	if (MyLatch->is_set)
	{
		SpinLockAcquire(&hz_shared->mutex);
		if (hz_shared->nrequests < HZ_MAX_REQUESTS)
			hz_shared->requests[hz_shared->nrequests++] = MyDatabaseId;
		else
			hz_shared->overflow = true;
		launcher = hz_shared->launcher_latch;
		SpinLockRelease(&hz_shared->mutex);
		if (launcher != NULL)
			SetLatch(launcher);
	}
	my_idle_exit = true;
	proc_exit(0);
}


void
esrc_horizon_publisher_main(Datum arg)
{
	int			slot = DatumGetInt32(arg);
	Oid			dbid;
	bool		pending = true; /* a first row at once */
	TimestampTz next_at = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	if (hz_shared == NULL || slot < 0 || slot >= hz_shared->nslots)
		elog(ERROR, "invalid horizon publisher slot %d", slot);
	SpinLockAcquire(&hz_shared->mutex);
	hz_shared->slots[slot].pid = MyProcPid;
	hz_shared->slots[slot].latch = MyLatch;
	dbid = hz_shared->slots[slot].dbid;
	SpinLockRelease(&hz_shared->mutex);
	my_hz_slot = slot;
	on_shmem_exit(publisher_detach, Int32GetDatum(slot));

	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	pgstat_report_appname("esrc horizon publisher");
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);

	for (;;)
	{
		long		timeout = -1;
		int			rc;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (esrc_standby_horizon_interval < 0)
		{
			my_idle_exit = true;
			proc_exit(0);
		}
		if (pending)
		{
			TimestampTz now = GetCurrentTimestamp();

			if (now >= next_at)
			{
				pending = false;
				if (publish())
				{
					next_at = TimestampTzPlusMilliseconds(now, esrc_standby_horizon_interval);
					if (!hz_shared->slots[slot].published)
					{
						SpinLockAcquire(&hz_shared->mutex);
						hz_shared->slots[slot].published = true;
						SpinLockRelease(&hz_shared->mutex);
					}
				}
			}
			else
				timeout = (long) ((next_at - now + 999) / 1000);
		}
		rc = WaitLatch(MyLatch,
					   WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | WL_TIMEOUT,
					   timeout >= 0 ? timeout : ESRC_PUBLISHER_IDLE_MS, PG_WAIT_EXTENSION);
		if (rc & WL_LATCH_SET)
		{
			/* whatever woke us happened after the next capture begins */
			ResetLatch(MyLatch);
			pending = true;
		}
		else if (!pending)
			leave_if_idle(slot);
	}
}

/* ----------------------------------------------------------------
 * The launcher
 * ----------------------------------------------------------------
 */

typedef struct HzDb
{
	Oid			dbid;
	bool		wanted;			/* should have a publisher */
	int			failures;		/* publishers that stopped on an error */
	TimestampTz restart_at;		/* no start before this */
} HzDb;

static HzDb *hzdbs = NULL;
static int	nhzdbs = 0;
static int	maxhzdbs = 0;
static BackgroundWorkerHandle **hz_handles = NULL;

static HzDb *
hz_db(Oid dbid)
{
	int			i;

	for (i = 0; i < nhzdbs; i++)
		if (hzdbs[i].dbid == dbid)
			return &hzdbs[i];
	if (nhzdbs == maxhzdbs)
	{
		maxhzdbs = Max(16, maxhzdbs * 2);
		hzdbs = hzdbs == NULL ? MemoryContextAlloc(TopMemoryContext, sizeof(HzDb) * maxhzdbs)
			: repalloc(hzdbs, sizeof(HzDb) * maxhzdbs);
	}
	memset(&hzdbs[nhzdbs], 0, sizeof(HzDb));
	hzdbs[nhzdbs].dbid = dbid;
	return &hzdbs[nhzdbs++];
}

static void
want_database(Oid dbid, const char *name, void *arg)
{
	hz_db(dbid)->wanted = true;
}

/* Free the slots of publishers that stopped; those that failed start again. */
static void
hz_reap(TimestampTz now)
{
	int			i;

	for (i = 0; i < hz_shared->nslots; i++)
	{
		HzSlot	   *s = &hz_shared->slots[i];
		HzDb	   *db;
		bool		idle;
		bool		published;

		if (!s->in_use || !esrc_launched_worker_stopped(hz_handles[i], s->pid))
			continue;
		SpinLockAcquire(&hz_shared->mutex);
		idle = s->idle_exit;
		published = s->published;
		db = hz_db(s->dbid);
		s->in_use = false;
		SpinLockRelease(&hz_shared->mutex);
		if (hz_handles[i] != NULL)
			pfree(hz_handles[i]);
		hz_handles[i] = NULL;
		if (published)
			db->failures = 0;
		/* an idle one leaves db->wanted as it is: a wake may have come since */
		if (!idle)
		{
			db->wanted = true;
			db->restart_at = TimestampTzPlusMilliseconds(now, esrc_restart_delay(&db->failures));
		}
	}
}

static void
hz_take_requests(void)
{
	Oid			reqs[HZ_MAX_REQUESTS];
	int			n;
	bool		overflow;
	int			i;

	SpinLockAcquire(&hz_shared->mutex);
	n = hz_shared->nrequests;
	memcpy(reqs, hz_shared->requests, sizeof(Oid) * n);
	overflow = hz_shared->overflow;
	hz_shared->nrequests = 0;
	hz_shared->overflow = false;
	SpinLockRelease(&hz_shared->mutex);
	for (i = 0; i < n; i++)
		hz_db(reqs[i])->wanted = true;
	if (overflow)
		esrc_scan_databases(want_database, NULL);
}

/* Start db's publisher; false: try again later. */
static bool
hz_start(HzDb *db)
{
	int			slot = -1;
	int			i;

	for (i = 0; i < hz_shared->nslots; i++)
	{
		if (hz_shared->slots[i].in_use && hz_shared->slots[i].dbid == db->dbid &&
			!hz_shared->slots[i].exited)
		{
			db->wanted = false; /* running */
			return true;
		}
		if (!hz_shared->slots[i].in_use && slot < 0)
			slot = i;
	}
	if (slot < 0)
		return false;
	switch (esrc_database_availability(db->dbid))
	{
		case ESRC_DB_AVAILABLE:
			break;
		case ESRC_DB_BUSY:
			return false;
		case ESRC_DB_GONE:
			db->wanted = false;
			return true;
	}
	SpinLockAcquire(&hz_shared->mutex);
	memset(&hz_shared->slots[slot], 0, sizeof(HzSlot));
	hz_shared->slots[slot].in_use = true;
	hz_shared->slots[slot].dbid = db->dbid;
	SpinLockRelease(&hz_shared->mutex);

	if (!esrc_start_database_worker("esrc_horizon_publisher_main", "esrc horizon publisher",
									"esrc horizon publisher", slot, &hz_handles[slot]))
	{
		SpinLockAcquire(&hz_shared->mutex);
		hz_shared->slots[slot].in_use = false;
		SpinLockRelease(&hz_shared->mutex);
		hz_handles[slot] = NULL;
		return false;
	}
	db->wanted = false;
	return true;
}

static void
hz_launcher_exit(int code, Datum arg)
{
	SpinLockAcquire(&hz_shared->mutex);
	hz_shared->launcher_latch = NULL;
	SpinLockRelease(&hz_shared->mutex);
}


void
esrc_horizon_launcher_main(Datum arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("esrc horizon launcher");

	hz_handles = MemoryContextAllocZero(TopMemoryContext,
										sizeof(BackgroundWorkerHandle *) * hz_shared->nslots);
	SpinLockAcquire(&hz_shared->mutex);
	hz_shared->launcher_latch = MyLatch;
	SpinLockRelease(&hz_shared->mutex);
	on_shmem_exit(hz_launcher_exit, (Datum) 0);

	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		long		timeout = -1;
		int			i;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		hz_reap(now);
		hz_take_requests();
		for (i = 0; i < nhzdbs; i++)
		{
			HzDb	   *db = &hzdbs[i];
			long		ms;

			if (!db->wanted || esrc_standby_horizon_interval < 0)
				continue;
			if (db->restart_at <= now && hz_start(db))
				continue;
			if (db->restart_at <= now)
				db->restart_at = TimestampTzPlusMilliseconds(now, ESRC_RESTART_DELAY_MS);
			ms = (long) ((db->restart_at - now) / 1000) + 1;
			timeout = timeout < 0 ? ms : Min(timeout, ms);
		}
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | (timeout >= 0 ? WL_TIMEOUT : 0),
						 timeout, PG_WAIT_EXTENSION);
	}
}
