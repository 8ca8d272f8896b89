/*-------------------------------------------------------------------------
 *
 * fwdstatus.c
 *	  The forwarder's status in shared memory, and the SQL functions that
 *	  watch and steer the worker: esrc.forwarder_status (through
 *	  esrc_forwarder_worker_status), esrc.forwarder_pause and
 *	  esrc.forwarder_resume.  (esrc.forwarder_skip is PL/pgSQL: a row in
 *	  esrc.forwarder_skips, which the worker reads, fwdread.c.)
 *
 * Shared state is EsrcSharedState.forwarder (esrc.h): the worker is its
 * only writer and bumps changecount around each write (odd while
 * writing, fwd_status_write_begin/end in forwarder.h); status_read copies
 * it until the count is even and unchanged, so no reader and no writer
 * ever waits on a lock.  The one exception is the atomic paused flag,
 * which pause/resume write and the worker reads; they then set the
 * worker's latch (esrc_shared->forwarder_procno).
 *
 * Failures are logged when the state is new or the last line is older
 * than LOG_REPEAT_MS, so a Kafka outage that retries every few seconds
 * does not flood the log; esrc.forwarder_status always has the latest.
 *
 * Talks to: forwarder.c and fwdread.c (the worker reports through the
 * functions here), kafka.c (its wait hook), fwdconf.c (the GUCs shown for
 * a database the worker does not serve), esrc.c (the shared struct).
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
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "esrc.h"
#include "forwarder.h"

PG_FUNCTION_INFO_V1(esrc_forwarder_worker_status);
PG_FUNCTION_INFO_V1(esrc_forwarder_pause);
PG_FUNCTION_INFO_V1(esrc_forwarder_resume);

static const char *const state_names[] = {
	"stopped", "starting", "idle", "connecting", "running", "paused",
	"disconnected", "error", "blocked"
};

/* Log the same kind of failure again only after this long. */
#define LOG_REPEAT_MS	60000

/* Called by esrc.c when the shared struct is first created. */
void
esrc_forwarder_shmem_init(void)
{
	EsrcForwarderShared *f = &esrc_shared->forwarder;

	memset(f, 0, sizeof(*f));
	pg_atomic_init_u32(&f->paused, 0);
	pg_atomic_init_u32(&f->changecount, 0);
	f->state = FWD_STOPPED;
	f->last_position = -1;
}

/* ----------------------------------------------------------------
 * Status in shared memory (worker side)
 * ----------------------------------------------------------------
 */

static TimestampTz last_logged_at = 0;
static int	last_logged_state = -1;

/* A consistent copy of the worker's status, for any backend. */
static void
status_read(EsrcForwarderShared *copy)
{
	EsrcForwarderShared *f = &esrc_shared->forwarder;

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
	EsrcForwarderShared *f = &esrc_shared->forwarder;
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
	return (EsrcForwarderState) esrc_shared->forwarder.state;
}

/*
 * Enter a failure state with an error; log it when the state is new or
 * the last log line is old (a Kafka outage retries every few seconds).
 */
void
fwd_report_failure(EsrcForwarderState state, const char *error, const char *detail)
{
	EsrcForwarderShared *f = &esrc_shared->forwarder;
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

void
fwd_set_blocked(int64 position, const char *stream)
{
	EsrcForwarderShared *f = &esrc_shared->forwarder;

	fwd_status_write_begin(f);
	f->blocked_position = position;
	strlcpy(f->blocked_stream, stream ? stream : "", sizeof(f->blocked_stream));
	fwd_status_write_end(f);
}

void
fwd_publish_progress(int64 position, int delivered)
{
	EsrcForwarderShared *f = &esrc_shared->forwarder;
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

/* librdkafka is waiting a long time (kafka.c): show it. */
void
fwd_kafka_wait_hook(int64 waited_ms, const char *last_error)
{
	if (waited_ms < 1000)
		return;
	if (fwd_get_state() == FWD_RUNNING)
	{
		char		msg[ESRC_FWD_ERROR_LEN];

		snprintf(msg, sizeof(msg), "no answer from Kafka for %d s%s%s",
				 (int) (waited_ms / 1000), last_error[0] ? ": " : "", last_error);
		fwd_report_failure(FWD_DISCONNECTED, msg, NULL);
	}
}


/* ----------------------------------------------------------------
 * SQL functions
 * ----------------------------------------------------------------
 */

static void
wake_worker(void)
{
	uint32		procno = pg_atomic_read_u32(&esrc_shared->forwarder_procno);

	if (procno != 0)
		SetLatch(&ProcGlobal->allProcs[procno - 1].procLatch);
}

/*
 * esrc.forwarder_pause(): the worker finishes the batch in hand, then
 * sends nothing until esrc.forwarder_resume() or a server restart.
 */
Datum
esrc_forwarder_pause(PG_FUNCTION_ARGS)
{
	esrc_require_shared();
	pg_atomic_write_u32(&esrc_shared->forwarder.paused, 1);
	wake_worker();
	PG_RETURN_VOID();
}

Datum
esrc_forwarder_resume(PG_FUNCTION_ARGS)
{
	esrc_require_shared();
	pg_atomic_write_u32(&esrc_shared->forwarder.paused, 0);
	wake_worker();
	PG_RETURN_VOID();
}

/*
 * esrc.forwarder_worker_status(): what the worker published, for the view
 * esrc.forwarder_status.  In a database the worker does not serve, the
 * state is "inactive" and the worker's other fields are null.
 */
Datum
esrc_forwarder_worker_status(PG_FUNCTION_ARGS)
{
	EsrcForwarderShared *f;
	EsrcForwarderShared copy;
	TupleDesc	tupdesc;
	Datum		values[15];
	bool		nulls[15];
	char	   *mydb;
	bool		served;
	bool		paused;
	int			i = 0;

	esrc_require_shared();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	f = &esrc_shared->forwarder;
	status_read(&copy);
	paused = pg_atomic_read_u32(&f->paused) != 0;

	mydb = get_database_name(MyDatabaseId);
	served = (strcmp(mydb ? mydb : "", esrc_database) == 0);
	memset(nulls, 0, sizeof(nulls));

	/* state, detail */
	if (!served)
	{
		values[i++] = CStringGetTextDatum("inactive");
		values[i++] = CStringGetTextDatum(psprintf("The forwarder serves database \"%s\" (esrc.database); events of this database are not forwarded.",
												   esrc_database));
	}
	else
	{
		values[i++] = CStringGetTextDatum(state_names[copy.state]);
		if (copy.detail[0])
			values[i++] = CStringGetTextDatum(copy.detail);
		else
			nulls[i++] = true;
	}
	/* database, brokers, delivery: what the server is configured with */
	values[i++] = CStringGetTextDatum(esrc_database);
	if (served && copy.pid != 0 && copy.brokers[0])
		values[i++] = CStringGetTextDatum(copy.brokers);
	else if (esrc_kafka_brokers && esrc_kafka_brokers[0])
		values[i++] = CStringGetTextDatum(esrc_kafka_brokers);
	else
		nulls[i++] = true;
	values[i++] = CStringGetTextDatum(served && copy.pid != 0 ?
									  (copy.exactly_once ? "exactly_once" : "at_least_once") :
									  (esrc_delivery == DELIVERY_EXACTLY_ONCE ? "exactly_once" : "at_least_once"));
	values[i++] = BoolGetDatum(paused);
	/* last_position */
	if (served && copy.last_position >= 0 && copy.pid != 0)
		values[i++] = Int64GetDatum(copy.last_position);
	else
		nulls[i++] = true;
	/* delivered_total, last_delivery_at */
	if (served)
	{
		values[i++] = Int64GetDatum((int64) copy.delivered_total);
		if (copy.last_delivery_at != 0)
			values[i++] = TimestampTzGetDatum(copy.last_delivery_at);
		else
			nulls[i++] = true;
	}
	else
	{
		nulls[i++] = true;
		nulls[i++] = true;
	}
	/* last_error, last_error_at */
	if (served && copy.last_error[0])
	{
		values[i++] = CStringGetTextDatum(copy.last_error);
		values[i++] = TimestampTzGetDatum(copy.last_error_at);
	}
	else
	{
		nulls[i++] = true;
		nulls[i++] = true;
	}
	/* blocked_position, blocked_stream */
	if (served && copy.blocked_position > 0)
	{
		values[i++] = Int64GetDatum(copy.blocked_position);
		values[i++] = CStringGetTextDatum(copy.blocked_stream);
	}
	else
	{
		nulls[i++] = true;
		nulls[i++] = true;
	}
	/* pid, state_since */
	if (served && copy.pid != 0)
		values[i++] = Int32GetDatum(copy.pid);
	else
		nulls[i++] = true;
	if (served && copy.state_since != 0)
		values[i++] = TimestampTzGetDatum(copy.state_since);
	else
		nulls[i++] = true;

	Assert(i == 15);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

