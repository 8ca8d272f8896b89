/*-------------------------------------------------------------------------
 *
 * forwarder.c
 *	  The Kafka forwarder's background worker: its start (signals, status
 *	  slot, database), its main loop and the waits of a turn (paused, no
 *	  brokers, no extension, idle), its exit.  Its link to Kafka is
 *	  fwdconnect.c (settings, connect, back-off), the sending of a batch
 *	  fwdsend.c.
 *
 * One worker per forwarded database (esrc.databases, or esrc.database),
 * started by the launcher (fwdlauncher.c) with its status slot as its
 * argument; the slot names the database.  It
 * reads events in position order, up to the safe horizon of order.c (so
 * only committed events, and never one that a later commit could still
 * precede), in short transactions (fwdread.c), and hands each batch to
 * kafka.c.  It never holds a PostgreSQL transaction or snapshot while it
 * waits for Kafka.  Appending sessions never wait for it: at commit
 * order.c sets our latch, which is all the coupling there is.  With a
 * backlog it reads the next batch while librdkafka sends one, and in
 * exactly_once mode sends it while the one before is committed
 * (fwdsend.c; kafka.c keeps that exactly once).
 *
 * Position: the last forwarded position lives where it is committed.  In
 * exactly_once mode that is the Kafka offsets topic (written in the same
 * Kafka transaction as the records, see kafkapos.c); in at_least_once mode
 * it is the table esrc.forwarder_state, updated after delivery.  The
 * table also mirrors the Kafka position for esrc.forwarder_status and for
 * a switch between the modes; at connect we start from the larger of the
 * two, since neither is ever ahead of what Kafka has.
 *
 * Failover: a batch goes out only once the standbys of
 * esrc.forwarder_standbys have flushed the WAL of its commits
 * (fwdstandby.c), and after each connect, in both modes, nothing is sent
 * before Kafka's position record has been checked against the log
 * (fwddiverge.c: state "diverged" until the operator decides).  In
 * at_least_once mode kafka.c writes that record after each delivery, so
 * the start is the larger of the record and the table there too.
 *
 * Invariants: positions are sent in increasing order and the position
 * only advances over events that Kafka has (or that an operator skipped
 * with esrc.forwarder_skip); a record Kafka refuses (poison) stops
 * everything after it, so no later event overtakes it.
 *
 * Failures of Kafka are handled in the worker (state, back-off, retry:
 * fwdconnect.c and fwdsend.c); errors of PostgreSQL end the worker (no
 * PG_TRY, as in pg_cron), and the postmaster starts it again after
 * bgw_restart_time: all progress is in Kafka or in tables.  The worker publishes what it does in shared
 * memory through fwdstatus.c.
 *
 * Privileges: the worker connects as the bootstrap superuser, pins its
 * settings and runs all its SQL as the extension's owner in a
 * security-restricted operation: fwdread.c's header has the rules.
 *
 * Encoding: Kafka records are JSON labelled application/json, which is
 * UTF-8.  The worker refuses to serve a database of another encoding
 * (esrc.forwarder_status says why) rather than send other bytes.
 *
 * Talks to: fwdconnect.c (the link to Kafka), fwdsend.c (every send),
 * fwdread.c (every read), fwdstandby.c (the standbys before a batch goes
 * out), fwdstatus.c (the status), fwdconf.c (the GUCs), order.c (which
 * sets our latch at commit); forwardint.h has what they share.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "portability/instr_time.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "forwardint.h"
#include "kafka.h"

PGDLLEXPORT void esrc_forwarder_main(Datum main_arg);

/* Idle waits: nothing to do, or no brokers (HELD_WAIT_*: forwardint.h). */
#define IDLE_WAIT_MS	10000
#define NO_BROKERS_WAIT_MS 60000

/* forwardint.h */
char	   *fwd_served_database = NULL;
int64		fwd_position = -1;
MemoryContext fwd_loop_cxt = NULL;

/* the two batch buffers (forwardint.h) */
static Batch batches[2];

static void
forwarder_exit(int code, Datum arg)
{
	EsrcForwarderShared *f = fwd_slot;
	TimestampTz now;

	/* every Kafka client, also those of a connect a SIGTERM cut short */
	esrc_kafka_shutdown();
	fwd_kafka = NULL;
	pg_atomic_write_u32(&f->procno, 0);
	now = GetCurrentTimestamp();
	fwd_status_write_begin(f);
	if (f->state != FWD_NO_EXTENSION)
		f->state = FWD_STOPPED;
	f->state_since = now;
	f->pid = 0;
	f->log_id[0] = '\0';
	f->standby_wait_since = 0;
	fwd_status_write_end(f);
}

/*
 * The served database is not UTF8: Kafka records are JSON labelled
 * application/json and carry the stream in headers, all of it UTF-8, so
 * nothing is sent.  Waits (serving reloads: the launcher stops us when the
 * database leaves esrc.databases) and never returns.
 */
static void
refuse_database_encoding(void)
{
	char		error[ESRC_FWD_ERROR_LEN];

	snprintf(error, sizeof(error),
			 "database \"%s\" has encoding %s: the forwarder only serves UTF8 databases",
			 fwd_served_database, GetDatabaseEncodingName());
	fwd_report_failure(FWD_ERROR, error,
				   "Kafka records are JSON, which is UTF-8; nothing is forwarded. Forward from a database created with ENCODING 'UTF8'.");
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
			fwd_reload_config();
		fwd_wait_latch(NO_BROKERS_WAIT_MS);
	}
}

/*
 * The worker's first steps, before it knows its database: signals, its
 * slot in the status, its latch for pause/resume, the exit callback.
 */
static void
start_worker(int slot)
{
	EsrcForwarderShared *f;

	if (fwd_shared == NULL || slot < 0 || slot >= fwd_shared->nslots ||
		!fwd_shared->slots[slot].in_use)
		elog(ERROR, "invalid esrc forwarder slot %d", slot);
	f = fwd_slot = &fwd_shared->slots[slot];
	fwd_served_database = MemoryContextStrdup(TopMemoryContext, f->database);

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	fwd_status_write_begin(f);
	f->pid = MyProcPid;
	f->standby_wait_since = 0;
	f->last_position = -1;
	f->blocked_position = 0;
	f->blocked_stream[0] = '\0';
	fwd_status_write_end(f);
	fwd_set_state(FWD_STARTING, NULL);

	/* our latch: pause/resume and commits in our database (order.c) set it */
	pg_atomic_write_u32(&f->procno, esrc_my_procno() + 1);
	before_shmem_exit(forwarder_exit, (Datum) 0);
	esrc_kafka_wait_hook = fwd_kafka_wait_hook;
	fwd_copy_config();
}

/* With no brokers there is nothing to do, not even a database to join. */
static void
wait_for_brokers(void)
{
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
			fwd_reload_config();
		if (fwd_cfg.brokers[0] != '\0')
			break;
		fwd_set_state(FWD_IDLE, "esrc.kafka_brokers is empty: events wait in the log.");
		fwd_wait_latch(NO_BROKERS_WAIT_MS);
	}
}

/*
 * Connect to our slot's database and pin the settings our SQL depends on
 * (fwdread.c); refuse a database that is not UTF8 (never returns then).
 */
static void
join_database(void)
{
	fwd_set_state(FWD_CONNECTING, NULL);
	BackgroundWorkerInitializeConnection(fwd_served_database, NULL, 0);
	pgstat_report_appname("esrc forwarder");

	fwd_pin_settings();
	if (GetDatabaseEncoding() != PG_UTF8)
		refuse_database_encoding();

	/*
	 * Our own writes (the position mirror) need not wait for the WAL
	 * flush: losing the last one in a crash only makes us resume earlier.
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	batches[0].cxt = AllocSetContextCreate(TopMemoryContext, "esrc forwarder batch",
										   ALLOCSET_DEFAULT_SIZES);
	batches[1].cxt = AllocSetContextCreate(TopMemoryContext, "esrc forwarder batch",
										   ALLOCSET_DEFAULT_SIZES);
	fwd_loop_cxt = AllocSetContextCreate(TopMemoryContext, "esrc forwarder loop",
										 ALLOCSET_DEFAULT_SIZES);
	fwd_log_id[0] = '\0';
	ereport(LOG,
			(errmsg("esrc forwarder started for database \"%s\" (librdkafka %s)",
					fwd_served_database, esrc_kafka_version())));
}

/*
 * Paused, no brokers, or a configuration Kafka refused: wait (for the
 * latch or a while) and return true, the turn is over.
 */
static bool
wait_if_stopped(void)
{
	if (fwd_paused())
	{
		fwd_set_state(FWD_PAUSED, "esrc.forwarder_pause() is in effect; esrc.forwarder_resume() continues.");
		fwd_wait_latch(IDLE_WAIT_MS);
		return true;
	}
	if (fwd_cfg.brokers[0] == '\0')
	{
		fwd_disconnect();
		fwd_set_state(FWD_IDLE, "esrc.kafka_brokers is empty: events wait in the log.");
		fwd_wait_latch(NO_BROKERS_WAIT_MS);
		return true;
	}
	if (fwd_config_refused)
	{
		/* the error is in the status; only a reload can help */
		fwd_wait_latch(NO_BROKERS_WAIT_MS);
		return true;
	}
	return false;
}

/*
 * The extension is not installed (or not ours): forget the log, wait.
 * Under esrc.databases = '*' leave instead: the launcher asks this
 * database again later (fwdlauncher.c).
 */
static void
wait_for_extension(bool *said_no_extension)
{
	char		msg[256];
	bool		all;

	fwd_disconnect();
	fwd_position = -1;
	fwd_log_id[0] = '\0';
	fwd_publish_log_id("");
	(void) fwd_configured_databases(&all);
	if (all)
	{
		fwd_set_state(FWD_NO_EXTENSION, NULL);
		fwd_status_write_begin(fwd_slot);
		fwd_slot->idle_exit = true;
		fwd_status_write_end(fwd_slot);
		proc_exit(0);
	}
	if (!*said_no_extension)
		ereport(LOG,
				(errmsg("esrc forwarder: extension esrc is not installed in database \"%s\", waiting",
						fwd_served_database)));
	if (!*said_no_extension || fwd_get_state() != FWD_NO_EXTENSION)
	{
		TimestampTz now = GetCurrentTimestamp();

		snprintf(msg, sizeof(msg), "extension esrc is not installed in database \"%s\"",
				 fwd_served_database);
		fwd_status_write_begin(fwd_slot);
		strlcpy(fwd_slot->last_error, msg, sizeof(fwd_slot->last_error));
		fwd_slot->last_error_at = now;
		fwd_status_write_end(fwd_slot);
	}
	*said_no_extension = true;
	fwd_set_state(FWD_NO_EXTENSION,
				  "Nothing is forwarded from this database until CREATE EXTENSION esrc; the other databases are not affected.");
	fwd_wait_latch(IDLE_WAIT_MS);
}

/*
 * Nothing to send: write the mirror if it is behind, else wait for a
 * commit, soon if an open append holds the horizon back.
 */
static void
idle(Batch *cur, long *held_wait)
{
	if (fwd_mirror_dirty)
	{
		fwd_mirror_now = true;	/* write the mirror now that we are idle */
		return;
	}
	if (fwd_poison_position == 0)
		fwd_set_state(FWD_RUNNING, NULL);
	if (cur->held)
	{
		/* an open append holds the horizon: look again soon */
		fwd_wait_latch(*held_wait);
		*held_wait = Min(*held_wait * 2, HELD_WAIT_MAX_MS);
	}
	else
	{
		*held_wait = HELD_WAIT_MIN_MS;
		fwd_wait_latch(IDLE_WAIT_MS);
	}
}

/*
 * Between the waits for the standbys (fwdstandby.c): serve librdkafka's
 * callbacks; false after a reload, so that the batch is read again under
 * the new settings.
 */
static bool
serve_during_wait(void)
{
	esrc_kafka_poll(fwd_kafka);
	if (ConfigReloadPending)
	{
		fwd_reload_config();
		return false;
	}
	return fwd_kafka != NULL;
}

void
esrc_forwarder_main(Datum main_arg)
{
	long		held_wait = HELD_WAIT_MIN_MS;
	bool		said_no_extension = false;
	Batch	   *cur = &batches[0];
	Batch	   *spare = &batches[1];
	bool		have = false;	/* cur holds a batch read ahead, unsent */

	start_worker(DatumGetInt32(main_arg));
	wait_for_brokers();
	join_database();

	for (;;)
	{
		bool		want_batch;
		TimestampTz turn_began = 0;
		instr_time	t_turn;
		ReadResult	rr;

		MemoryContextSwitchTo(fwd_loop_cxt);
		MemoryContextReset(fwd_loop_cxt);
		INSTR_TIME_SET_CURRENT(t_turn);
		if (!have)
			turn_began = GetCurrentTimestamp();
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
			fwd_reload_config();
		esrc_kafka_poll(fwd_kafka);

		if (wait_if_stopped())
			continue;
		if (fwd_kafka == NULL)
			have = false;		/* a batch read ahead waits for no one */
		if (fwd_wait_for_retry())
			continue;
		if (fwd_wait_if_diverged(&held_wait))
			continue;

		if (!have)
		{
			want_batch = (fwd_kafka != NULL && fwd_position >= 0);
			cur->woke = turn_began;
			cur->read_start = t_turn;
			rr = fwd_read_log(cur, want_batch, fwd_position);
			INSTR_TIME_SET_CURRENT(cur->read_end);
			cur->read_done = GetCurrentTimestamp();
			if (rr == READ_NEW_LOG)
			{
				fwd_new_log();
				continue;
			}
			if (rr == READ_NO_EXTENSION)
			{
				wait_for_extension(&said_no_extension);
				continue;
			}
			said_no_extension = false;
			if (!fwd_slot->has_extension)
			{
				fwd_status_write_begin(fwd_slot);
				fwd_slot->has_extension = true;
				fwd_status_write_end(fwd_slot);
			}

			if (fwd_kafka == NULL || fwd_position < 0)
			{
				if (fwd_kafka == NULL)
					fwd_connect_kafka();
				else
					fwd_position = fwd_table_position;	/* cannot happen; be safe */
				continue;
			}
			if (cur->len == 0)
			{
				idle(cur, &held_wait);
				continue;
			}
		}
		have = false;
		held_wait = HELD_WAIT_MIN_MS;
		/* esrc.forwarder_standbys: not before they have the batch's WAL */
		if (!fwd_wait_standbys(cur->flush_to, serve_during_wait))
			continue;			/* read again on the next turn */
		fwd_forward_batch(&cur, &spare, &have);
	}
}
