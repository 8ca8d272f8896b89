/*-------------------------------------------------------------------------
 *
 * fwdstatus.c
 *	  The forwarder's status in shared memory, and the SQL functions that
 *	  watch and steer the worker: esrc.forwarder_status (through
 *	  esrc_forwarder_worker_status), esrc.forwarder_pause and
 *	  esrc.forwarder_resume.  (esrc.forwarder_skip is PL/pgSQL: a row in
 *	  esrc.forwarder_skips, which the worker reads, fwdread.c.)
 *
 * Shared state is the status slots of EsrcForwarders (forwardint.h), one
 * per worker, esrc.max_forwarders of them: the worker is the only writer
 * of its slot while it runs and bumps changecount around each write (odd
 * while writing, fwd_status_write_begin/end in forwardint.h); status_read
 * copies a slot until the count is even and unchanged, so no reader and
 * no writer ever waits on a lock.  The one exception is the atomic paused
 * flag (for every worker), which pause/resume write and the workers read;
 * they then set the workers' latches.
 *
 * esrc.forwarder_status has one row per configured database (fwdconf.c,
 * fwd_configured_databases), from any database: a running worker's slot,
 * or what this backend can tell itself of a database without a worker
 * (it does not exist, or no brokers are set).  Under '*' the databases
 * are those with a worker.  A database not forwarded gets a row
 * "inactive" when it is the one the query runs in.
 *
 * Failures are logged when the state is new or the last line is older
 * than LOG_REPEAT_MS, so a Kafka outage that retries every few seconds
 * does not flood the log; esrc.forwarder_status always has the latest.
 *
 * Talks to: the worker's files (forwarder.c, fwdconnect.c, fwdsend.c,
 * fwdread.c, fwdstandby.c, fwddiverge.c report through the functions
 * here; none of the worker's state is read here), fwdconf.c (the GUCs
 * shown for a database no worker serves), fwdlauncher.c (which hands out the
 * slots), esrc.c (which sizes and creates them), order.c (the wake-up).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "forward/forward.h"
#include "forwardint.h"

PG_FUNCTION_INFO_V1(esrc_forwarder_worker_status);
PG_FUNCTION_INFO_V1(esrc_forwarder_pause);
PG_FUNCTION_INFO_V1(esrc_forwarder_resume);

static const char *const state_names[] = {
	"stopped", "starting", "idle", "connecting", "running", "paused",
	"disconnected", "error", "blocked", "no extension",
	"waiting for standby", "diverged"
};

EsrcForwarders *fwd_shared = NULL;
EsrcForwarderShared *fwd_slot = NULL;

/* Log the same kind of failure again only after this long. */
#define LOG_REPEAT_MS	60000

Size
esrc_forwarder_shmem_size(void)
{
	return add_size(offsetof(EsrcForwarders, slots),
					mul_size(esrc_max_forwarders, sizeof(EsrcForwarderShared)));
}

/* Called by esrc.c with AddinShmemInitLock held. */
void
esrc_forwarder_shmem_init(void)
{
	bool		found;
	int			i;

	fwd_shared = ShmemInitStruct("esrc forwarders", esrc_forwarder_shmem_size(), &found);
	if (found)
		return;
	memset(fwd_shared, 0, esrc_forwarder_shmem_size());
	SpinLockInit(&fwd_shared->mutex);
	pg_atomic_init_u32(&fwd_shared->paused, 0);
	fwd_shared->nslots = esrc_max_forwarders;
	for (i = 0; i < fwd_shared->nslots; i++)
	{
		EsrcForwarderShared *f = &fwd_shared->slots[i];

		pg_atomic_init_u32(&f->changecount, 0);
		pg_atomic_init_u32(&f->procno, 0);
		pg_atomic_init_u32(&f->dbid, InvalidOid);
		f->state = FWD_STOPPED;
		f->last_position = -1;
	}
}

/*
 * At the commit of a transaction that appended (order.c): set the latch
 * of the worker serving this database, if one does.  A few atomic reads.
 */
void
esrc_forwarder_wake(void)
{
	int			i;

	if (fwd_shared == NULL)
		return;
	for (i = 0; i < fwd_shared->nslots; i++)
	{
		EsrcForwarderShared *f = &fwd_shared->slots[i];
		uint32		procno = pg_atomic_read_u32(&f->procno);

		if (procno != 0 && pg_atomic_read_u32(&f->dbid) == MyDatabaseId)
		{
			SetLatch(&ProcGlobal->allProcs[procno - 1].procLatch);
			return;
		}
	}
}

bool
fwd_paused(void)
{
	return pg_atomic_read_u32(&fwd_shared->paused) != 0;
}

/* ----------------------------------------------------------------
 * Status in shared memory (worker side)
 * ----------------------------------------------------------------
 */

static TimestampTz last_logged_at = 0;
static int	last_logged_state = -1;

/* A consistent copy of the worker's status, for any backend. */
static void
status_read(EsrcForwarderShared *f, EsrcForwarderShared *copy)
{
	for (;;)
	{
		uint32		before = pg_atomic_read_u32(&f->changecount);
		uint32		after;

		pg_read_barrier();
		memcpy(copy, f, sizeof(*copy));
		pg_read_barrier();
		after = pg_atomic_read_u32(&f->changecount);
		if (before == after && (before & 1) == 0)
			break;
		CHECK_FOR_INTERRUPTS();
	}
}

void
fwd_set_state(EsrcForwarderState state, const char *detail)
{
	EsrcForwarderShared *f = fwd_slot;
	bool		changed = (f->state != (int) state);
	TimestampTz now = changed ? GetCurrentTimestamp() : 0;

	fwd_status_write_begin(f);
	if (changed)
	{
		f->state = state;
		f->state_since = now;
	}
	strlcpy(f->detail, detail ? detail : "", sizeof(f->detail));
	fwd_status_write_end(f);
	pgstat_report_activity(STATE_RUNNING, state_names[state]);
}

EsrcForwarderState
fwd_get_state(void)
{
	return (EsrcForwarderState) fwd_slot->state;
}

/*
 * Enter a failure state with an error; log it when the state is new or
 * the last log line is old (a Kafka outage retries every few seconds).
 */
void
fwd_report_failure(EsrcForwarderState state, const char *error, const char *detail)
{
	EsrcForwarderShared *f = fwd_slot;
	TimestampTz now = GetCurrentTimestamp();

	fwd_status_write_begin(f);
	strlcpy(f->last_error, error, sizeof(f->last_error));
	f->last_error_at = now;
	fwd_status_write_end(f);
	fwd_set_state(state, detail);
	esrc_metrics_forwarder_error();

	if (last_logged_state != (int) state ||
		TimestampDifferenceExceeds(last_logged_at, now, LOG_REPEAT_MS))
	{
		ereport(WARNING,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("esrc forwarder: %s", error),
				 detail ? errdetail_internal("%s", detail) : 0));
		last_logged_state = state;
		last_logged_at = now;
	}
}

/* The next failure is logged whatever the last one was: things went well. */
void
fwd_forget_logged_failure(void)
{
	last_logged_state = -1;
}

/* Connected to Kafka: the failures before are over. */
void
fwd_clear_last_error(void)
{
	EsrcForwarderShared *f = fwd_slot;

	fwd_status_write_begin(f);
	f->last_error[0] = '\0';
	f->last_error_at = 0;
	fwd_status_write_end(f);
}

void
fwd_set_blocked(int64 position, const char *stream)
{
	EsrcForwarderShared *f = fwd_slot;

	fwd_status_write_begin(f);
	f->blocked_position = position;
	strlcpy(f->blocked_stream, stream ? stream : "", sizeof(f->blocked_stream));
	fwd_status_write_end(f);
}

void
fwd_publish_progress(int64 position, int delivered)
{
	EsrcForwarderShared *f = fwd_slot;
	TimestampTz now = delivered > 0 ? GetCurrentTimestamp() : 0;

	fwd_status_write_begin(f);
	f->last_position = position;
	if (delivered > 0)
	{
		f->delivered_total += delivered;
		f->last_delivery_at = now;
	}
	fwd_status_write_end(f);
}

/*
 * Waiting for a standby of esrc.forwarder_standbys (fwdstandby.c): why
 * (NULL: the wait is over) and since when.  The first time of a wait is
 * logged as a WARNING and counted as a failure; a new reason during the
 * same wait only replaces last_error.
 */
void
fwd_report_standby_wait(const char *why, TimestampTz since, bool first)
{
	EsrcForwarderShared *f = fwd_slot;

	if (why == NULL)
	{
		fwd_status_write_begin(f);
		f->standby_wait_since = 0;
		fwd_status_write_end(f);
		return;
	}
	if (first)
	{
		fwd_report_failure(FWD_WAITING_STANDBY, why,
						   "Nothing more is sent to Kafka until every standby of esrc.forwarder_standbys has flushed the WAL of the next batch, and the synchronous standbys of synchronous_standby_names have confirmed it; appends go on. To give up waiting for a standby that is gone, remove it from the setting that names it and reload.");
	}
	else
	{
		TimestampTz now = GetCurrentTimestamp();

		fwd_status_write_begin(f);
		strlcpy(f->last_error, why, sizeof(f->last_error));
		f->last_error_at = now;
		fwd_status_write_end(f);
	}
	fwd_status_write_begin(f);
	f->standby_wait_since = since;
	fwd_status_write_end(f);
}

/* ----------------------------------------------------------------
 * SQL functions
 * ----------------------------------------------------------------
 */

/* The worker's log_id, once it knows it (fwdread.c); "" = none. */
void
fwd_publish_log_id(const char *log_id)
{
	EsrcForwarderShared *f = fwd_slot;

	fwd_status_write_begin(f);
	strlcpy(f->log_id, log_id, sizeof(f->log_id));
	fwd_status_write_end(f);
}

/*
 * The database of another running worker with this log_id, or NULL.  A
 * database created from a template that has esrc copies its log_id, and
 * two workers with one Kafka identity would fence each other and share
 * one position record: the worker refuses that (fwdconnect.c).
 */
const char *
fwd_log_id_owner(const char *log_id)
{
	static char owner[NAMEDATALEN];
	EsrcForwarderShared copy;
	int			i;

	for (i = 0; i < fwd_shared->nslots; i++)
	{
		if (&fwd_shared->slots[i] == fwd_slot)
			continue;
		status_read(&fwd_shared->slots[i], &copy);
		if (copy.in_use && copy.pid != 0 && copy.log_id[0] != '\0' &&
			strcmp(copy.log_id, log_id) == 0)
		{
			strlcpy(owner, copy.database, sizeof(owner));
			return owner;
		}
	}
	return NULL;
}

/* ----------------------------------------------------------------
 * SQL functions
 * ----------------------------------------------------------------
 */

static void
wake_workers(void)
{
	int			i;

	for (i = 0; i < fwd_shared->nslots; i++)
	{
		uint32		procno = pg_atomic_read_u32(&fwd_shared->slots[i].procno);

		if (procno != 0)
			SetLatch(&ProcGlobal->allProcs[procno - 1].procLatch);
	}
}

/*
 * esrc.forwarder_pause(): every worker finishes the batch in hand, then
 * sends nothing until esrc.forwarder_resume() or a server restart.
 */
Datum
esrc_forwarder_pause(PG_FUNCTION_ARGS)
{
	esrc_require_shared();
	pg_atomic_write_u32(&fwd_shared->paused, 1);
	wake_workers();
	PG_RETURN_VOID();
}

Datum
esrc_forwarder_resume(PG_FUNCTION_ARGS)
{
	esrc_require_shared();
	pg_atomic_write_u32(&fwd_shared->paused, 0);
	wake_workers();
	PG_RETURN_VOID();
}

#define STATUS_COLS 16

static const char *
delivery_name(bool exactly_once)
{
	return exactly_once ? "exactly_once" : "at_least_once";
}

static bool
brokers_set(void)
{
	return esrc_kafka_brokers != NULL && esrc_kafka_brokers[0] != '\0';
}

/* A row from a worker's slot (a copy). */
static void
slot_row(ReturnSetInfo *rsinfo, const EsrcForwarderShared *c, bool paused)
{
	Datum		values[STATUS_COLS];
	bool		nulls[STATUS_COLS];
	bool		live = c->pid != 0;
	int			i = 0;

	memset(nulls, 0, sizeof(nulls));
	values[i++] = CStringGetTextDatum(state_names[c->state]);
	if (c->detail[0])
		values[i++] = CStringGetTextDatum(c->detail);
	else
		nulls[i++] = true;
	values[i++] = CStringGetTextDatum(c->database);
	if (live && c->brokers[0])
		values[i++] = CStringGetTextDatum(c->brokers);
	else if (brokers_set())
		values[i++] = CStringGetTextDatum(esrc_kafka_brokers);
	else
		nulls[i++] = true;
	values[i++] = CStringGetTextDatum(delivery_name(live ? c->exactly_once :
													esrc_delivery == DELIVERY_EXACTLY_ONCE));
	values[i++] = BoolGetDatum(paused);
	/* last_position, delivered_total, last_delivery_at */
	if (live && c->last_position >= 0)
		values[i++] = Int64GetDatum(c->last_position);
	else
		nulls[i++] = true;
	values[i++] = Int64GetDatum((int64) c->delivered_total);
	if (c->last_delivery_at != 0)
		values[i++] = TimestampTzGetDatum(c->last_delivery_at);
	else
		nulls[i++] = true;
	/* last_error, last_error_at */
	if (c->last_error[0])
	{
		values[i++] = CStringGetTextDatum(c->last_error);
		values[i++] = TimestampTzGetDatum(c->last_error_at);
	}
	else
	{
		nulls[i++] = true;
		nulls[i++] = true;
	}
	/* blocked_position, blocked_stream */
	if (c->blocked_position > 0)
	{
		values[i++] = Int64GetDatum(c->blocked_position);
		values[i++] = CStringGetTextDatum(c->blocked_stream);
	}
	else
	{
		nulls[i++] = true;
		nulls[i++] = true;
	}
	/* pid, state_since */
	if (live)
		values[i++] = Int32GetDatum(c->pid);
	else
		nulls[i++] = true;
	if (c->state_since != 0)
		values[i++] = TimestampTzGetDatum(c->state_since);
	else
		nulls[i++] = true;
	if (live && c->standby_wait_since != 0)
		values[i++] = TimestampTzGetDatum(c->standby_wait_since);
	else
		nulls[i++] = true;
	Assert(i == STATUS_COLS);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* A row this backend makes itself: a database without a worker. */
static void
own_row(ReturnSetInfo *rsinfo, const char *database, const char *state,
		const char *detail, const char *error, bool paused)
{
	Datum		values[STATUS_COLS];
	bool		nulls[STATUS_COLS];
	int			i;

	for (i = 0; i < STATUS_COLS; i++)
		nulls[i] = true;
	values[0] = CStringGetTextDatum(state);
	nulls[0] = false;
	values[1] = CStringGetTextDatum(detail);
	nulls[1] = false;
	values[2] = CStringGetTextDatum(database);
	nulls[2] = false;
	if (brokers_set())
	{
		values[3] = CStringGetTextDatum(esrc_kafka_brokers);
		nulls[3] = false;
	}
	values[4] = CStringGetTextDatum(delivery_name(esrc_delivery == DELIVERY_EXACTLY_ONCE));
	nulls[4] = false;
	values[5] = BoolGetDatum(paused);
	nulls[5] = false;
	if (error)
	{
		values[9] = CStringGetTextDatum(error);
		nulls[9] = false;
	}
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* The row of a configured database that has no worker now. */
static void
workerless_row(ReturnSetInfo *rsinfo, const char *database, bool paused)
{
	if (!OidIsValid(get_database_oid(database, true)))
		own_row(rsinfo, database, "no database",
				psprintf("Database \"%s\" is listed in esrc.databases (or esrc.database) but does not exist; the other databases are forwarded. Its forwarder starts once it is created.",
						 database),
				psprintf("database \"%s\" does not exist", database), paused);
	else if (!brokers_set())
		own_row(rsinfo, database, "idle",
				"esrc.kafka_brokers is empty: events wait in the log.", NULL, paused);
	else
		own_row(rsinfo, database, "stopped",
				"No forwarder runs for this database at the moment; the launcher starts one within seconds (if it does not, see the server log, e.g. for esrc.max_forwarders).",
				NULL, paused);
}

static int
slot_name_cmp(const void *a, const void *b)
{
	return strcmp((*(EsrcForwarderShared *const *) a)->database,
				  (*(EsrcForwarderShared *const *) b)->database);
}

/*
 * esrc.forwarder_worker_status(): one row per configured database, from
 * any database, for the view esrc.forwarder_status (see the header of
 * this file).  The row of a database that is not forwarded and is not
 * this one is left out; this one's is "inactive".
 */
Datum
esrc_forwarder_worker_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	EsrcForwarderShared *copies;
	EsrcForwarderShared **order;
	int			nused = 0;
	bool		all;
	List	   *names;
	ListCell   *lc;
	char	   *mydb;
	bool		mine = false;
	bool		paused;
	int			i;

	esrc_require_shared();
	InitMaterializedSRF(fcinfo, 0);
	paused = fwd_paused();
	mydb = get_database_name(MyDatabaseId);
	if (mydb == NULL)
		mydb = "";

	copies = palloc(sizeof(EsrcForwarderShared) * fwd_shared->nslots);
	order = palloc(sizeof(EsrcForwarderShared *) * fwd_shared->nslots);
	for (i = 0; i < fwd_shared->nslots; i++)
	{
		status_read(&fwd_shared->slots[i], &copies[i]);
		/* under '*', only where the worker found esrc (the others leave) */
		if (copies[i].in_use && copies[i].has_extension)
			order[nused++] = &copies[i];
	}

	names = fwd_configured_databases(&all);
	if (all)
	{
		qsort(order, nused, sizeof(EsrcForwarderShared *), slot_name_cmp);
		for (i = 0; i < nused; i++)
		{
			slot_row(rsinfo, order[i], paused);
			mine |= strcmp(order[i]->database, mydb) == 0;
		}
		/* esrc is installed here (the view is), so it is forwarded */
		if (!mine)
			workerless_row(rsinfo, mydb, paused);
		return (Datum) 0;
	}

	foreach(lc, names)
	{
		const char *name = (const char *) lfirst(lc);
		EsrcForwarderShared *found = NULL;

		for (i = 0; i < fwd_shared->nslots && found == NULL; i++)
			if (copies[i].in_use && strcmp(copies[i].database, name) == 0)
				found = &copies[i];
		if (found)
			slot_row(rsinfo, found, paused);
		else
			workerless_row(rsinfo, name, paused);
		mine |= strcmp(name, mydb) == 0;
	}
	if (!mine)
	{
		if (esrc_databases == NULL || esrc_databases[0] == '\0')
			own_row(rsinfo, mydb, "inactive",
					psprintf("The forwarder serves database \"%s\" (esrc.database); events of this database are not forwarded.",
							 esrc_database), NULL, paused);
		else
			own_row(rsinfo, mydb, "inactive",
					"esrc.databases does not list this database: its events are not forwarded.",
					NULL, paused);
	}
	return (Datum) 0;
}
