/*-------------------------------------------------------------------------
 *
 * launch.c
 *	  What the launchers (projlauncher.c for the projection workers,
 *	  fwdlauncher.c for the forwarders, log/standby.c for the horizon
 *	  publishers) share: the scan of the databases
 *	  that accept connections, whether a database is still there before a
 *	  worker is started in it, whether a launched worker has stopped, the
 *	  back-off before a failed worker starts again, their registration, and
 *	  the start of a worker in one database.
 *
 * Each runs in a launcher: a background worker connected to no database,
 * which may start transactions of its own to read the shared catalog
 * pg_database.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/snapmgr.h"

#include "base/base.h"

/* May workers connect to this database (not a template, not invalid)? */
static bool
accepts_workers(Form_pg_database db)
{
	/* -2: a database left invalid by an interrupted DROP DATABASE (16+) */
	return db->datallowconn && !db->datistemplate && db->datconnlimit != -2;
}

/*
 * Call fn for every database that accepts connections (not a template,
 * not left invalid by an interrupted DROP DATABASE), in a transaction of
 * its own.  Shared with the forwarders' launcher (fwdlauncher.c); the
 * caller is a background worker connected to no database.
 */
void
esrc_scan_databases(void (*fn) (Oid dbid, const char *name, void *arg), void *arg)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);

		if (accepts_workers(db))
			fn(db->oid, NameStr(db->datname), arg);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/*
 * For both launchers, before they start a worker in database dbid: is it
 * still there?  A worker started in a dropped database dies at once with
 * "FATAL: database ... does not exist", and one stopped by DROP DATABASE
 * ... WITH (FORCE) would be started again for ever; so each start asks.
 *
 * DROP DATABASE holds an AccessExclusiveLock on the database from before
 * it terminates the database's backends until it commits, and a backend
 * connecting waits for that lock (postinit.c).  So a launcher that cannot
 * have the lock at once does not start the worker now (ESRC_DB_BUSY: the
 * caller asks again after a delay): started, it would wait for the drop
 * and die.  With the lock, the catalog row read under a snapshot taken
 * after it is the truth: no row, or a database that takes no connections,
 * is ESRC_DB_GONE.  Runs a transaction of its own; the caller is a
 * background worker connected to no database.
 */
EsrcDbAvailability
esrc_database_availability(Oid dbid)
{
	EsrcDbAvailability result = ESRC_DB_GONE;
	LOCKTAG		tag;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, dbid, 0);
	if (LockAcquire(&tag, AccessShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
	{
		CommitTransactionCommand();
		return ESRC_DB_BUSY;
	}
	PushActiveSnapshot(GetTransactionSnapshot());
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);

		if (db->oid == dbid)
		{
			result = accepts_workers(db) ? ESRC_DB_AVAILABLE : ESRC_DB_GONE;
			break;
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();	/* releases the lock */
	return result;
}

/*
 * For both launchers (this one and fwdlauncher.c): has the worker of a
 * launcher's slot stopped?  Its handle says so; without one (the worker
 * was started by a launcher before this one, which the postmaster
 * restarted) the slot's pid does, which the worker clears as it exits.
 */
bool
esrc_launched_worker_stopped(BackgroundWorkerHandle *handle, pid_t slot_pid)
{
	pid_t		pid;

	if (handle != NULL)
		return GetBackgroundWorkerPid(handle, &pid) == BGWH_STOPPED;
	return slot_pid == 0;
}

/*
 * For both launchers: a worker that stopped on an error starts again after
 * ESRC_RESTART_DELAY_MS, doubling with each failure in a row up to
 * ESRC_RESTART_DELAY_MAX_MS (a dropped database, say, is not asked every
 * second).  Counts the failure; returns the delay in milliseconds.
 */
int
esrc_restart_delay(int *failures)
{
	int			delay = ESRC_RESTART_DELAY_MS;
	int			n;

	for (n = 0; n < *failures && delay < ESRC_RESTART_DELAY_MAX_MS; n++)
		delay *= 2;
	(*failures)++;
	return Min(delay, ESRC_RESTART_DELAY_MAX_MS);
}

/*
 * Register a launcher from _PG_init: a background worker of the cluster
 * (it connects to no database itself, but may start transactions to read
 * pg_database), started once recovery is over, restarted 5 s after a
 * crash; function is its entry point in this library, name its name and
 * type.
 */
void
esrc_register_launcher(const char *function, const char *name)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "esrc");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker.bgw_name, BGW_MAXLEN, "%s", name);
	snprintf(worker.bgw_type, BGW_MAXLEN, "%s", name);
	RegisterBackgroundWorker(&worker);
}

/*
 * From a launcher: start a worker of one database (it connects itself),
 * never restarted by the postmaster (its launcher starts it again),
 * notifying the launcher; slot is its main argument.  function is its
 * entry point in this library, name its name (for ps) and type its type.
 * False when no background worker slot is free.
 */
bool
esrc_start_database_worker(const char *function, const char *name, const char *type,
						   int slot, BackgroundWorkerHandle **handle)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "esrc");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker.bgw_name, BGW_MAXLEN, "%s", name);
	snprintf(worker.bgw_type, BGW_MAXLEN, "%s", type);
	worker.bgw_main_arg = Int32GetDatum(slot);
	worker.bgw_notify_pid = MyProcPid;
	return RegisterDynamicBackgroundWorker(&worker, handle);
}
