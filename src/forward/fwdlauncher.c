/*-------------------------------------------------------------------------
 *
 * fwdlauncher.c
 *	  The launcher of the Kafka forwarders: a background worker of the
 *	  cluster (connected to no database) that runs one forwarder worker
 *	  (forwarder.c) per database of esrc.databases, starts and stops them
 *	  as the setting changes (SIGHUP), and starts again one that stopped.
 *
 * The databases: esrc.databases names them, or is '*' for every database
 * that accepts connections and has esrc; when it is empty, esrc.database
 * names the one database (fwdconf.c, fwd_configured_databases).  The
 * launcher cannot look into a database, so under '*' it starts a worker
 * in each, and a worker that finds no esrc leaves at once, marking its
 * slot idle_exit; that database is asked again after PROBE_INTERVAL_MS.
 * A listed database that does not exist gets no worker (its row in
 * esrc.forwarder_status says so, fwdstatus.c), nor one that is dropped:
 * each start checks first (still_there); the catalog is read again
 * at each reload and every SCAN_INTERVAL_MS, so a database created later
 * is noticed within that time.  With no brokers no worker runs.
 *
 * Each worker gets a status slot in shared memory (EsrcForwarders,
 * forwardint.h; esrc.max_forwarders of them) from the launcher, which
 * writes its database there before starting it and takes the slot back
 * once the postmaster reports it stopped.  A worker that stops on an
 * error or a SIGTERM is started again after ESRC_RESTART_DELAY_MS, doubling
 * up to a minute while it keeps failing; the others are not touched.  A
 * crash of any backend (kill -9) makes the postmaster restart the whole
 * cluster, as it does for every crash: the launcher starts again and
 * with it every worker.
 *
 * Latch-driven: the postmaster sets our latch when a worker starts or
 * stops (bgw_notify_pid), SIGHUP does at a reload; the only timeouts are
 * the restart delays and the catalog scan.  The launcher's exit stops its
 * workers, so a new launcher starts from free slots.
 *
 * Also esrc_forwarder_init, the folder's start from _PG_init.
 *
 * Talks to: fwdconf.c (the GUCs, the list), fwdstatus.c (the slots),
 * forwarder.c (the workers it starts), launch.c (the catalog scan and
 * the restarts it shares with the projections' launcher).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "log/log.h"
#include "forwardint.h"

PGDLLEXPORT void esrc_forwarder_launcher_main(Datum main_arg);

#define SCAN_INTERVAL_MS	10000
#define PROBE_INTERVAL_MS	30000

/* What the launcher knows of a database (by name). */
typedef struct FwdDb
{
	char		name[NAMEDATALEN];
	Oid			dbid;			/* InvalidOid: not in the catalog */
	bool		present;		/* seen by the last scan */
	bool		wanted;			/* should have a worker */
	bool		stopping;		/* we asked its worker to stop */
	int			slot;			/* its worker's slot, -1 = none */
	int			failures;		/* workers that stopped in a row */
	TimestampTz restart_at;		/* no start before this */
	TimestampTz probe_at;		/* '*': no esrc there; ask again then */
} FwdDb;

static FwdDb *dbs = NULL;
static int	ndbs = 0;
static int	maxdbs = 0;
static BackgroundWorkerHandle **handles = NULL;	/* per slot */
static bool warned_full = false;

/*
 * At the end of a transaction that appended (order.c): a commit has
 * events to forward.
 */
static void
forwarder_appended(Oid dbid, const uint64 *hashes, int nhashes, bool overflow)
{
	esrc_forwarder_wake();
}

/*
 * Called from _PG_init (shared_preload_libraries): the settings
 * (fwdconf.c), the wake-up of the workers at each commit that appended,
 * and this launcher, which starts the workers.
 */
void
esrc_forwarder_init(void)
{
	fwd_define_settings();
	esrc_listen_appended(forwarder_appended);
	esrc_register_launcher("esrc_forwarder_launcher_main", "esrc forwarder launcher");
}

static FwdDb *
find_db(const char *name, bool create)
{
	int			i;

	for (i = 0; i < ndbs; i++)
		if (strcmp(dbs[i].name, name) == 0)
			return &dbs[i];
	if (!create)
		return NULL;
	if (ndbs == maxdbs)
	{
		maxdbs = Max(16, maxdbs * 2);
		dbs = dbs == NULL ? MemoryContextAlloc(TopMemoryContext, sizeof(FwdDb) * maxdbs)
			: repalloc(dbs, sizeof(FwdDb) * maxdbs);
	}
	memset(&dbs[ndbs], 0, sizeof(FwdDb));
	strlcpy(dbs[ndbs].name, name, NAMEDATALEN);
	dbs[ndbs].slot = -1;
	return &dbs[ndbs++];
}

static void
note_database(Oid dbid, const char *name, void *arg)
{
	FwdDb	   *db = find_db(name, true);

	if (db->dbid != dbid)
	{
		/* new, or dropped and created again: a fresh start */
		db->dbid = dbid;
		db->failures = 0;
		db->restart_at = 0;
		db->probe_at = 0;
	}
	db->present = true;
}

/* Read the catalog and esrc.databases: which databases want a worker. */
static void
refresh_wanted(TimestampTz now)
{
	bool		all;
	List	   *names;
	ListCell   *lc;
	int			i;

	for (i = 0; i < ndbs; i++)
	{
		dbs[i].present = false;
		dbs[i].wanted = false;
	}
	esrc_scan_databases(note_database, NULL);
	for (i = 0; i < ndbs; i++)
		if (!dbs[i].present)
			dbs[i].dbid = InvalidOid;
	if (esrc_kafka_brokers == NULL || esrc_kafka_brokers[0] == '\0')
		return;

	names = fwd_configured_databases(&all);
	if (all)
	{
		for (i = 0; i < ndbs; i++)
			dbs[i].wanted = dbs[i].present && (dbs[i].slot >= 0 || dbs[i].probe_at <= now);
		return;
	}
	foreach(lc, names)
	{
		FwdDb	   *db = find_db((const char *) lfirst(lc), true);

		db->wanted = db->present;
		db->probe_at = 0;
	}
	list_free_deep(names);
}

static FwdDb *
db_of_slot(int slot)
{
	int			i;

	for (i = 0; i < ndbs; i++)
		if (dbs[i].slot == slot)
			return &dbs[i];
	return NULL;
}

/* Give a slot back (no worker runs on it). */
static void
free_slot(int i)
{
	EsrcForwarderShared *f = &fwd_shared->slots[i];

	SpinLockAcquire(&fwd_shared->mutex);
	fwd_status_write_begin(f);
	f->in_use = false;
	f->pid = 0;
	fwd_status_write_end(f);
	pg_atomic_write_u32(&f->procno, 0);
	pg_atomic_write_u32(&f->dbid, InvalidOid);
	SpinLockRelease(&fwd_shared->mutex);
	if (handles[i] != NULL)
		pfree(handles[i]);
	handles[i] = NULL;
}

/* Take back the slots of workers that stopped, and learn why they did. */
static void
reap_workers(TimestampTz now)
{
	int			i;

	for (i = 0; i < fwd_shared->nslots; i++)
	{
		EsrcForwarderShared *f = &fwd_shared->slots[i];
		FwdDb	   *db;
		bool		idle;

		if (!f->in_use || !esrc_launched_worker_stopped(handles[i], f->pid))
			continue;
		idle = f->idle_exit;
		db = db_of_slot(i);
		free_slot(i);
		if (db == NULL)
			continue;
		db->slot = -1;
		if (db->stopping)
		{
			db->stopping = false;
			db->failures = 0;
			db->restart_at = 0;
		}
		else if (idle)
		{
			/* '*': no esrc there; ask again later */
			db->failures = 0;
			db->probe_at = TimestampTzPlusMilliseconds(now, PROBE_INTERVAL_MS);
			db->wanted = false;
		}
		else
		{
			int			delay = esrc_restart_delay(&db->failures);

			db->restart_at = TimestampTzPlusMilliseconds(now, delay);
			ereport(LOG,
					(errmsg("esrc forwarder launcher: the forwarder of database \"%s\" stopped, starting it again in %d ms",
							db->name, delay)));
		}
	}
}

/* Ask the workers of databases no longer wanted to stop. */
static void
stop_unwanted(void)
{
	int			i;

	for (i = 0; i < ndbs; i++)
	{
		FwdDb	   *db = &dbs[i];

		if (db->slot < 0 || db->wanted || db->stopping)
			continue;
		if (handles[db->slot] == NULL)
			continue;
		ereport(LOG,
				(errmsg("esrc forwarder launcher: stopping the forwarder of database \"%s\", which is no longer forwarded",
						db->name)));
		TerminateBackgroundWorker(handles[db->slot]);
		db->stopping = true;
	}
}

/* Start a worker for db on a free slot; false when none could start. */
static bool
start_worker(FwdDb *db)
{
	char		name[BGW_MAXLEN];
	EsrcForwarderShared *f = NULL;
	int			slot;

	for (slot = 0; slot < fwd_shared->nslots; slot++)
		if (!fwd_shared->slots[slot].in_use)
		{
			f = &fwd_shared->slots[slot];
			break;
		}
	if (f == NULL)
	{
		if (!warned_full)
			ereport(LOG,
					(errmsg("esrc forwarder launcher: no forwarder for database \"%s\": esrc.max_forwarders (%d) are running",
							db->name, fwd_shared->nslots),
					 errhint("Raise esrc.max_forwarders (and max_worker_processes) and restart the server.")));
		warned_full = true;
		return false;
	}

	SpinLockAcquire(&fwd_shared->mutex);
	fwd_status_write_begin(f);
	f->in_use = true;
	f->idle_exit = false;
	f->has_extension = false;
	strlcpy(f->database, db->name, sizeof(f->database));
	f->state = FWD_STARTING;
	f->state_since = 0;
	f->pid = 0;
	f->detail[0] = '\0';
	f->brokers[0] = '\0';
	f->last_position = -1;
	f->delivered_total = 0;
	f->last_delivery_at = 0;
	f->last_error[0] = '\0';
	f->last_error_at = 0;
	f->blocked_position = 0;
	f->blocked_stream[0] = '\0';
	f->log_id[0] = '\0';
	fwd_status_write_end(f);
	pg_atomic_write_u32(&f->dbid, db->dbid);
	SpinLockRelease(&fwd_shared->mutex);

	snprintf(name, sizeof(name), "esrc forwarder for %s", db->name);
	if (!esrc_start_database_worker("esrc_forwarder_main", name, "esrc forwarder",
									slot, &handles[slot]))
	{
		handles[slot] = NULL;
		free_slot(slot);
		if (!warned_full)
			ereport(LOG,
					(errmsg("esrc forwarder launcher: could not start the forwarder of database \"%s\"",
							db->name),
					 errhint("Raise max_worker_processes.")));
		warned_full = true;
		return false;
	}
	db->slot = slot;
	return true;
}

/*
 * Before a start: is db still there?  The catalog scan that made it wanted
 * may be up to SCAN_INTERVAL_MS old, and DROP DATABASE ... WITH (FORCE)
 * stops its worker, which would be started again in a database that no
 * longer exists (esrc_database_availability).  A dropped database is
 * forgotten until a scan finds it again (listed by name, it may be created
 * again: it then gets a worker within SCAN_INTERVAL_MS, and meanwhile its
 * row in esrc.forwarder_status says "no database"), and said once; one
 * that a DROP DATABASE holds is asked again after ESRC_RESTART_DELAY_MS.
 */
static bool
still_there(FwdDb *db, TimestampTz now)
{
	switch (esrc_database_availability(db->dbid))
	{
		case ESRC_DB_AVAILABLE:
			return true;
		case ESRC_DB_BUSY:
			db->restart_at = TimestampTzPlusMilliseconds(now, ESRC_RESTART_DELAY_MS);
			return false;
		case ESRC_DB_GONE:
			break;
	}
	ereport(LOG,
			(errmsg("esrc forwarder launcher: database \"%s\" no longer exists, its forwarder is not started again",
					db->name),
			 errdetail("A database of that name is forwarded again if it is created and listed in esrc.databases, or esrc.databases is '*' and it has esrc.")));
	db->dbid = InvalidOid;
	db->present = false;
	db->wanted = false;
	db->failures = 0;
	db->restart_at = 0;
	db->probe_at = 0;
	return false;
}

/* Start the workers wanted; the time to look again (-1 = no need). */
static long
start_wanted(TimestampTz now)
{
	long		timeout = -1;
	bool		all_started = true;
	int			i;

	for (i = 0; i < ndbs; i++)
	{
		FwdDb	   *db = &dbs[i];

		if (!db->wanted || db->slot >= 0)
			continue;
		if (db->restart_at > now)
		{
			long		ms = (long) ((db->restart_at - now) / 1000) + 1;

			timeout = timeout < 0 ? ms : Min(timeout, ms);
			continue;
		}
		if (!still_there(db, now))
		{
			if (db->wanted)		/* busy: being dropped, say */
				timeout = timeout < 0 ? ESRC_RESTART_DELAY_MS : Min(timeout, ESRC_RESTART_DELAY_MS);
			continue;
		}
		if (!start_worker(db))
		{
			all_started = false;
			db->restart_at = TimestampTzPlusMilliseconds(now, ESRC_RESTART_DELAY_MS);
			timeout = timeout < 0 ? ESRC_RESTART_DELAY_MS : Min(timeout, ESRC_RESTART_DELAY_MS);
		}
	}
	if (all_started)
		warned_full = false;
	return timeout;
}

/* Our workers go with us: a new launcher starts from free slots. */
static void
launcher_exit(int code, Datum arg)
{
	int			i;

	SpinLockAcquire(&fwd_shared->mutex);
	fwd_shared->launcher_latch = NULL;
	SpinLockRelease(&fwd_shared->mutex);
	for (i = 0; i < fwd_shared->nslots; i++)
		if (handles[i] != NULL)
			TerminateBackgroundWorker(handles[i]);
}

void
esrc_forwarder_launcher_main(Datum main_arg)
{
	TimestampTz next_scan = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("esrc forwarder launcher");

	handles = MemoryContextAllocZero(TopMemoryContext,
									 sizeof(BackgroundWorkerHandle *) * fwd_shared->nslots);
	SpinLockAcquire(&fwd_shared->mutex);
	fwd_shared->launcher_latch = MyLatch;
	SpinLockRelease(&fwd_shared->mutex);
	before_shmem_exit(launcher_exit, (Datum) 0);

	for (;;)
	{
		TimestampTz now;
		long		timeout;
		long		to_scan;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			next_scan = 0;
		}
		now = GetCurrentTimestamp();
		reap_workers(now);
		if (now >= next_scan)
		{
			refresh_wanted(now);
			next_scan = TimestampTzPlusMilliseconds(now, SCAN_INTERVAL_MS);
		}
		stop_unwanted();
		timeout = start_wanted(now);
		to_scan = (long) ((next_scan - now) / 1000) + 1;
		timeout = timeout < 0 ? to_scan : Min(timeout, to_scan);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, PG_WAIT_EXTENSION);
	}
}
