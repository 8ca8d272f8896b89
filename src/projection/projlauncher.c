/*-------------------------------------------------------------------------
 *
 * projlauncher.c
 *	  The launcher of projection workers: a background worker of the
 *	  cluster (no database) that starts esrc.projection_workers workers in
 *	  every database that has projections, restarts those that die, and
 *	  lets those of a database without projections go; and the slots in
 *	  shared memory through which workers and sessions reach each other.
 *	  What it shares with the forwarders' launcher is launch.c's.
 *
 * While esrc.scavenge_interval is set, worker 1 also runs the scavenger
 * (scavenge.c): it is started in every database, stays where there is
 * esrc but no projection, and the launcher asks every database again when
 * a reload turns the interval on (esrc_projection_db_workers).
 *
 * The launcher cannot look into a database, so it asks: at its start it
 * starts worker 1 in every database that accepts connections; a worker
 * that finds no esrc or no projection there records an "idle" exit and
 * is not started again until a session of that database wakes it
 * (esrc_projection_wake, called at the commit of create_projection and of
 * the other functions that give workers something to do).  A worker that
 * exits otherwise (an error, SIGTERM) is started again after a second; a
 * crash of any backend restarts the whole cluster, the launcher with it,
 * and it asks every database again.  Before it starts a worker the
 * launcher checks that the database is still there
 * (esrc_database_availability): one dropped, say by DROP DATABASE ...
 * WITH (FORCE), is forgotten instead of being tried for ever.
 *
 * Lost wake-ups: a worker that decides to exit idle records the wake-up
 * sequence number it read before it looked for projections; the launcher
 * keeps a database active when it has seen a wake-up of that database
 * with a higher number.  So a create that commits while the last worker
 * is leaving still gets a worker.
 *
 * The launcher is latch-driven: sessions set its latch, and the
 * postmaster signals it (bgw_notify_pid) when one of its workers starts
 * or stops.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "lifecycle/lifecycle.h"
#include "projection/projection.h"
#include "projectionint.h"

#define MAX_WAKE_REQUESTS	64

typedef struct ProjSlot
{
	bool		in_use;			/* given to a worker by the launcher */
	Oid			dbid;
	int			number;			/* 1 .. esrc.projection_workers */
	pid_t		pid;			/* 0 once the worker has left */
	Latch	   *latch;
	bool		idle_exit;		/* it left: nothing to do in its database */
	uint64		checked_seq;	/* wake_seq when it looked for projections */
} ProjSlot;

typedef struct WakeRequest
{
	Oid			dbid;
	uint64		seq;
} WakeRequest;

typedef struct ProjShared
{
	slock_t		mutex;
	Latch	   *launcher_latch;
	uint64		wake_seq;
	int			nrequests;
	bool		overflow;		/* requests were dropped: ask every database */
	WakeRequest requests[MAX_WAKE_REQUESTS];
	int			nslots;
	ProjSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} ProjShared;

static ProjShared *proj_shared = NULL;

Size
esrc_projection_shmem_size(void)
{
	return add_size(offsetof(ProjShared, slots),
					mul_size(max_worker_processes, sizeof(ProjSlot)));
}

/* Called with AddinShmemInitLock held. */
void
esrc_projection_shmem_init(void)
{
	bool		found;

	proj_shared = ShmemInitStruct("esrc projection workers",
								  esrc_projection_shmem_size(), &found);
	if (!found)
	{
		memset(proj_shared, 0, esrc_projection_shmem_size());
		SpinLockInit(&proj_shared->mutex);
		proj_shared->nslots = max_worker_processes;
	}
}

void
esrc_projection_register_launcher(void)
{
	esrc_register_launcher("esrc_projection_launcher_main", "esrc projection launcher");
}

/*
 * Give the projection workers of database dbid something to do: set the
 * latches of those running, and ask the launcher to start them where none
 * runs.  Called at commit (projection.c), so it never raises an error.
 */
void
esrc_projection_wake(Oid dbid)
{
	Latch	   *latches[64];
	int			nlatches = 0;
	Latch	   *launcher;
	int			i;

	if (proj_shared == NULL)
		return;
	SpinLockAcquire(&proj_shared->mutex);
	proj_shared->wake_seq++;
	if (proj_shared->nrequests < MAX_WAKE_REQUESTS)
	{
		proj_shared->requests[proj_shared->nrequests].dbid = dbid;
		proj_shared->requests[proj_shared->nrequests].seq = proj_shared->wake_seq;
		proj_shared->nrequests++;
	}
	else
		proj_shared->overflow = true;
	for (i = 0; i < proj_shared->nslots && nlatches < (int) lengthof(latches); i++)
	{
		ProjSlot   *s = &proj_shared->slots[i];

		if (s->in_use && s->dbid == dbid && s->pid != 0 && s->latch != NULL)
			latches[nlatches++] = s->latch;
	}
	launcher = proj_shared->launcher_latch;
	SpinLockRelease(&proj_shared->mutex);
	for (i = 0; i < nlatches; i++)
		SetLatch(latches[i]);
	if (launcher != NULL)
		SetLatch(launcher);
}

/*
 * The workers a database with esrc gets: esrc.projection_workers, and at
 * least worker 1 while esrc.scavenge_interval is set, which runs the
 * scavenger's slices (scavenge.c) in databases without projections too.
 */
int
esrc_projection_db_workers(void)
{
	return Max(esrc_projection_workers, esrc_scavenge_interval_s > 0 ? 1 : 0);
}

/* ----------------------------------------------------------------
 * The worker's side of its slot
 * ----------------------------------------------------------------
 */

static int my_slot = -1;
static bool my_idle_exit = false;
static uint64 my_checked_seq = 0;

static void
worker_detach(int code, Datum arg)
{
	ProjSlot   *s = &proj_shared->slots[DatumGetInt32(arg)];

	SpinLockAcquire(&proj_shared->mutex);
	s->pid = 0;
	s->latch = NULL;
	s->idle_exit = my_idle_exit && code == 0;
	s->checked_seq = my_checked_seq;
	SpinLockRelease(&proj_shared->mutex);
}

void
esrc_projection_worker_attach(int slot, Oid *dbid, int *number)
{
	ProjSlot   *s;

	if (proj_shared == NULL || slot < 0 || slot >= proj_shared->nslots)
		elog(ERROR, "invalid projection worker slot %d", slot);
	s = &proj_shared->slots[slot];
	SpinLockAcquire(&proj_shared->mutex);
	s->pid = MyProcPid;
	s->latch = MyLatch;
	*dbid = s->dbid;
	*number = s->number;
	SpinLockRelease(&proj_shared->mutex);
	my_slot = slot;
	on_shmem_exit(worker_detach, Int32GetDatum(slot));
}

/* The wake-up sequence number now: read it before looking for work. */
uint64
esrc_projection_wake_seq(void)
{
	uint64		seq;

	SpinLockAcquire(&proj_shared->mutex);
	seq = proj_shared->wake_seq;
	SpinLockRelease(&proj_shared->mutex);
	return seq;
}

/*
 * The worker leaves with nothing to do: no esrc or no projection in its
 * database as of checked_seq.
 */
void
esrc_projection_worker_exit_idle(uint64 checked_seq)
{
	my_idle_exit = true;
	my_checked_seq = checked_seq;
	proc_exit(0);
}

/* ----------------------------------------------------------------
 * The launcher
 * ----------------------------------------------------------------
 */

typedef struct DbState
{
	Oid			dbid;
	bool		active;			/* should have workers */
	uint64		last_wake;		/* seq of the last wake-up seen for it */
	int			failures;		/* workers that stopped on an error in a row */
	TimestampTz restart_at;		/* no start before this */
	bool		gone;			/* dropped: no worker until a wake-up */
} DbState;

static DbState *dbs = NULL;
static int	ndbs = 0;
static int	maxdbs = 0;
static BackgroundWorkerHandle **handles = NULL;

static DbState *
db_state(Oid dbid)
{
	int			i;

	for (i = 0; i < ndbs; i++)
		if (dbs[i].dbid == dbid)
			return &dbs[i];
	if (ndbs == maxdbs)
	{
		maxdbs = Max(16, maxdbs * 2);
		dbs = dbs == NULL ? MemoryContextAlloc(TopMemoryContext, sizeof(DbState) * maxdbs)
			: repalloc(dbs, sizeof(DbState) * maxdbs);
	}
	memset(&dbs[ndbs], 0, sizeof(DbState));
	dbs[ndbs].dbid = dbid;
	return &dbs[ndbs++];
}

static void
make_active(Oid dbid, const char *name, void *arg)
{
	DbState    *db = db_state(dbid);

	db->active = true;
	db->gone = false;
}

/* Every database that accepts connections becomes active (to be asked). */
static void
ask_every_database(void)
{
	esrc_scan_databases(make_active, NULL);
}

/* Take the wake-up requests of sessions. */
static void
take_requests(void)
{
	WakeRequest reqs[MAX_WAKE_REQUESTS];
	int			n;
	bool		overflow;
	int			i;

	SpinLockAcquire(&proj_shared->mutex);
	n = proj_shared->nrequests;
	memcpy(reqs, proj_shared->requests, sizeof(WakeRequest) * n);
	overflow = proj_shared->overflow;
	proj_shared->nrequests = 0;
	proj_shared->overflow = false;
	SpinLockRelease(&proj_shared->mutex);

	for (i = 0; i < n; i++)
	{
		DbState    *db = db_state(reqs[i].dbid);

		db->active = true;
		db->gone = false;
		db->last_wake = Max(db->last_wake, reqs[i].seq);
		db->failures = 0;
		db->restart_at = 0;
	}
	if (overflow)
		ask_every_database();
}

/* Free the slots of workers that have stopped, and learn why they did. */
static void
reap_workers(TimestampTz now)
{
	int			i;

	for (i = 0; i < proj_shared->nslots; i++)
	{
		ProjSlot   *s = &proj_shared->slots[i];
		DbState    *db;
		bool		idle;
		uint64		checked;

		if (!s->in_use || !esrc_launched_worker_stopped(handles[i], s->pid))
			continue;
		SpinLockAcquire(&proj_shared->mutex);
		idle = s->idle_exit;
		checked = s->checked_seq;
		db = db_state(s->dbid);
		s->in_use = false;
		s->pid = 0;
		s->latch = NULL;
		SpinLockRelease(&proj_shared->mutex);
		if (handles[i] != NULL)
			pfree(handles[i]);
		handles[i] = NULL;
		if (db->gone || (idle && db->last_wake <= checked))
			db->active = false;
		else if (!idle)
		{
			/* it is started again, even if another worker left idle before */
			db->active = true;
			db->restart_at = TimestampTzPlusMilliseconds(now, esrc_restart_delay(&db->failures));
		}
		else
			db->failures = 0;
	}
}

/*
 * A database the launcher was about to start workers in is gone (dropped,
 * say by DROP DATABASE ... WITH (FORCE), which stopped its workers): it
 * gets none until a session of a database with that oid wakes it, or the
 * launcher asks every database again.  Said once.
 */
static void
forget_database(DbState *db)
{
	db->active = false;
	db->gone = true;
	db->failures = 0;
	db->restart_at = 0;
	ereport(LOG,
			(errmsg("esrc projection launcher: database %u no longer exists, its projection workers are not started again",
					db->dbid)));
}

/*
 * Start the workers an active database lacks; false if one could not start
 * (or the database is busy being dropped): the caller tries again later.
 */
static bool
start_workers(DbState *db)
{
	int			nworkers = esrc_projection_db_workers();
	bool	   *running = palloc0(sizeof(bool) * (nworkers + 1));
	int			number;
	int			i;
	bool		ok = true;
	bool		lacking = false;

	for (i = 0; i < proj_shared->nslots; i++)
		if (proj_shared->slots[i].in_use && proj_shared->slots[i].dbid == db->dbid &&
			proj_shared->slots[i].number <= nworkers)
			running[proj_shared->slots[i].number] = true;
	for (number = 1; number <= nworkers; number++)
		lacking = lacking || !running[number];
	if (lacking)
	{
		switch (esrc_database_availability(db->dbid))
		{
			case ESRC_DB_AVAILABLE:
				break;
			case ESRC_DB_BUSY:
				ok = false;
				break;
			case ESRC_DB_GONE:
				forget_database(db);
				lacking = false;
				break;
		}
	}
	for (number = 1; number <= nworkers && ok && lacking; number++)
	{
		char		name[BGW_MAXLEN];
		int			slot = -1;

		if (running[number])
			continue;
		for (i = 0; i < proj_shared->nslots && slot < 0; i++)
			if (!proj_shared->slots[i].in_use)
				slot = i;
		if (slot < 0)
		{
			ok = false;
			break;
		}
		SpinLockAcquire(&proj_shared->mutex);
		proj_shared->slots[slot].in_use = true;
		proj_shared->slots[slot].dbid = db->dbid;
		proj_shared->slots[slot].number = number;
		proj_shared->slots[slot].pid = 0;
		proj_shared->slots[slot].latch = NULL;
		proj_shared->slots[slot].idle_exit = false;
		SpinLockRelease(&proj_shared->mutex);

		snprintf(name, sizeof(name), "esrc projection worker %d", number);
		if (!esrc_start_database_worker("esrc_projection_worker_main", name,
										"esrc projection worker", slot, &handles[slot]))
		{
			SpinLockAcquire(&proj_shared->mutex);
			proj_shared->slots[slot].in_use = false;
			SpinLockRelease(&proj_shared->mutex);
			handles[slot] = NULL;
			ok = false;
		}
	}
	pfree(running);
	return ok;
}

static void
launcher_exit(int code, Datum arg)
{
	SpinLockAcquire(&proj_shared->mutex);
	proj_shared->launcher_latch = NULL;
	SpinLockRelease(&proj_shared->mutex);
}

void
esrc_projection_launcher_main(Datum arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("esrc projection launcher");

	handles = MemoryContextAllocZero(TopMemoryContext,
									 sizeof(BackgroundWorkerHandle *) * proj_shared->nslots);
	SpinLockAcquire(&proj_shared->mutex);
	proj_shared->launcher_latch = MyLatch;
	SpinLockRelease(&proj_shared->mutex);
	on_shmem_exit(launcher_exit, (Datum) 0);

	ask_every_database();
	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		long		timeout = -1;
		int			i;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			bool		scavenged = esrc_scavenge_interval_s > 0;

			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			/* the scavenger turned on: every database with esrc needs worker 1 */
			if (!scavenged && esrc_scavenge_interval_s > 0)
				ask_every_database();
		}
		reap_workers(now);
		take_requests();
		for (i = 0; i < ndbs; i++)
		{
			DbState    *db = &dbs[i];

			if (!db->active || esrc_projection_db_workers() == 0)
				continue;
			if (db->restart_at > now)
			{
				long		ms = (long) ((db->restart_at - now) / 1000) + 1;

				timeout = timeout < 0 ? ms : Min(timeout, ms);
				continue;
			}
			if (!start_workers(db))
			{
				db->restart_at = TimestampTzPlusMilliseconds(now, ESRC_RESTART_DELAY_MS);
				timeout = timeout < 0 ? ESRC_RESTART_DELAY_MS : Min(timeout, ESRC_RESTART_DELAY_MS);
			}
		}
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | (timeout >= 0 ? WL_TIMEOUT : 0),
						 timeout, PG_WAIT_EXTENSION);
	}
}
