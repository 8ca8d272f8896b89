/*-------------------------------------------------------------------------
 *
 * forwarder.c
 *	  The Kafka forwarder's background worker: its main loop, its state,
 *	  signals and reloads, and the sending of batches through kafka.c.
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
 * (forward_batch; kafka.c keeps that exactly once).
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
 * Failures of Kafka are handled here (state, back-off, retry); errors of
 * PostgreSQL end the worker (no PG_TRY, as in pg_cron), and the
 * postmaster starts it again after bgw_restart_time: all progress is in
 * Kafka or in tables.  The worker publishes what it does in shared
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
 * Talks to: fwdread.c (every read), kafka.c (every send), fwdstatus.c
 * (the status), fwdconf.c (the GUCs, topic names), order.c (which sets
 * our latch at commit); forwarder.h has what they share.
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
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "base/base.h"
#include "log/log.h"
#include "forwarder.h"
#include "kafka.h"

PGDLLEXPORT void esrc_forwarder_main(Datum main_arg);

/* Back-off between failed attempts, doubling from the minimum. */
#define BACKOFF_MIN_MS	100
#define BACKOFF_MAX_MS	10000

/* Idle waits: nothing to do, or the horizon held back by open appends. */
#define IDLE_WAIT_MS	10000
#define HELD_WAIT_MIN_MS 1
#define HELD_WAIT_MAX_MS 1000
#define NO_BROKERS_WAIT_MS 60000

/* ----------------------------------------------------------------
 * The worker
 * ----------------------------------------------------------------
 */

/* forwarder.h */
FwdConfig	fwd_cfg;
char	   *fwd_served_database = NULL;
int64		fwd_position = -1;
MemoryContext fwd_loop_cxt = NULL;

static EsrcKafka *kafka = NULL;

/* failure handling */
static int	backoff_ms = 0;
static TimestampTz retry_at = 0;
static bool config_refused = false; /* wait for a reload */
static int64 poison_position = 0;	/* 0 = none */

/*
 * Kafka's position record, to check against the log before anything is
 * sent (fwddiverge.c): set at each connect, in both modes.
 */
static bool divergence_pending = false;
static int64 kafka_record_position = 0;
static char kafka_record_id[ESRC_KAFKA_ID_LEN];

/* the two batch buffers (forwarder.h) */
static Batch batches[2];

static void
copy_config(void)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	if (fwd_cfg.brokers)
	{
		pfree(fwd_cfg.brokers);
		pfree(fwd_cfg.properties);
		pfree(fwd_cfg.offsets_topic);
		pfree(fwd_cfg.topic);
	}
	fwd_cfg.brokers = pstrdup(esrc_kafka_brokers ? esrc_kafka_brokers : "");
	fwd_cfg.properties = pstrdup(esrc_kafka_properties ? esrc_kafka_properties : "");
	fwd_cfg.offsets_topic = pstrdup(esrc_kafka_offsets_topic);
	fwd_cfg.topic = pstrdup(esrc_kafka_topic_template);
	fwd_cfg.exactly_once = (esrc_delivery == DELIVERY_EXACTLY_ONCE);
	fwd_cfg.position_record = esrc_kafka_position_record;
	MemoryContextSwitchTo(old);

	{
		EsrcForwarderShared *f = fwd_slot;

		fwd_status_write_begin(f);
		strlcpy(f->brokers, fwd_cfg.brokers, sizeof(f->brokers));
		f->exactly_once = fwd_cfg.exactly_once;
		fwd_status_write_end(f);
	}
}

static void
disconnect(void)
{
	if (kafka != NULL)
	{
		esrc_kafka_destroy(kafka);
		kafka = NULL;
	}
}

static void
schedule_retry(void)
{
	backoff_ms = backoff_ms == 0 ? BACKOFF_MIN_MS : Min(backoff_ms * 2, BACKOFF_MAX_MS);
	retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), backoff_ms);
}

/* SIGHUP: reload, and start over with Kafka if its settings changed. */
static void
reload_config(void)
{
	bool		kafka_changed;

	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);

	/* esrc.databases: the launcher stops us when we are no longer wanted */
	kafka_changed = strcmp(fwd_cfg.brokers, esrc_kafka_brokers) != 0 ||
		strcmp(fwd_cfg.properties, esrc_kafka_properties) != 0 ||
		strcmp(fwd_cfg.offsets_topic, esrc_kafka_offsets_topic) != 0 ||
		fwd_cfg.exactly_once != (esrc_delivery == DELIVERY_EXACTLY_ONCE) ||
		fwd_cfg.position_record != esrc_kafka_position_record;
	if (kafka_changed || strcmp(fwd_cfg.topic, esrc_kafka_topic_template) != 0)
	{
		copy_config();
		if (kafka_changed)
			disconnect();		/* connect_kafka() learns the position anew */
		config_refused = false;
		backoff_ms = 0;
		retry_at = 0;
		ereport(LOG,
				(errmsg("esrc forwarder: configuration reloaded")));
	}
}

static void
forwarder_exit(int code, Datum arg)
{
	EsrcForwarderShared *f = fwd_slot;
	TimestampTz now;

	/* every Kafka client, also those of a connect a SIGTERM cut short */
	esrc_kafka_shutdown();
	kafka = NULL;
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
 * Wait for the latch (a commit that appended, pause/resume, SIGHUP) or
 * the timeout.  Serves librdkafka callbacks first.
 */
static void
wait_latch(long timeout_ms)
{
	esrc_kafka_poll(kafka);
	if (timeout_ms <= 0)
		return;
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 timeout_ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/* ce_source: "/esrc/" and the database name, percent-encoded as a URI path. */
static char *
make_source(const char *dbname)
{
	StringInfoData s;
	const unsigned char *p;

	initStringInfo(&s);
	appendStringInfoString(&s, "/esrc/");
	for (p = (const unsigned char *) dbname; *p; p++)
	{
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			(*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' || *p == '~')
			appendStringInfoChar(&s, *p);
		else
			appendStringInfo(&s, "%%%02X", *p);
	}
	return s.data;
}

/* ----------------------------------------------------------------
 * The main loop
 * ----------------------------------------------------------------
 */

/* Connect to Kafka and learn where to continue. false on failure. */
static bool
connect_kafka(void)
{
	EsrcKafkaSettings s;
	EsrcKafkaStatus status;
	char		err[ESRC_FWD_ERROR_LEN];
	char		client_id[64];
	int64		kafka_position = 0;

	kafka_record_id[0] = '\0';

	/*
	 * Our Kafka identity is esrc-<log_id>: a database copied from another
	 * that has esrc (CREATE DATABASE ... TEMPLATE) has the same log_id,
	 * and two workers with one identity would fence each other and share
	 * one position record.  Publish ours, then look for another.
	 */
	fwd_publish_log_id(fwd_log_id);
	{
		const char *owner = fwd_log_id_owner(fwd_log_id);

		if (owner != NULL)
		{
			snprintf(err, sizeof(err),
					 "database \"%s\" has the same log_id as database \"%s\" (a copy of it)",
					 fwd_served_database, owner);
			fwd_report_failure(FWD_ERROR, err,
							   "Two forwarders with one Kafka identity would fence each other; this one does not start. Give the copy an identity of its own: UPDATE esrc.forwarder_state SET log_id = gen_random_uuid(), position = 0 (it is then forwarded from the start).");
			schedule_retry();
			return false;
		}
	}
	snprintf(client_id, sizeof(client_id), "esrc-%s", fwd_log_id);
	memset(&s, 0, sizeof(s));
	s.brokers = fwd_cfg.brokers;
	s.properties = fwd_cfg.properties;
	s.exactly_once = fwd_cfg.exactly_once;
	s.position_record = fwd_cfg.position_record;
	s.client_id = client_id;
	s.offsets_topic = fwd_cfg.offsets_topic;
	s.database = fwd_served_database;
	s.log_id = fwd_log_id;
	s.source = make_source(fwd_served_database);

	fwd_set_state(FWD_CONNECTING, NULL);
	kafka = esrc_kafka_connect(&s, &kafka_position, kafka_record_id, &status,
							   err, sizeof(err));
	pfree((char *) s.source);
	if (kafka == NULL)
	{
		if (status == ESRC_KAFKA_CONFIG)
		{
			fwd_report_failure(FWD_ERROR, err,
						   "Fix esrc.kafka_brokers or esrc.kafka_properties and reload the configuration.");
			config_refused = true;
		}
		else
		{
			fwd_report_failure(FWD_DISCONNECTED, err, NULL);
			schedule_retry();
		}
		return false;
	}
	fwd_clear_last_error();		/* connected: what failed before is over */

	/*
	 * None of the three is ever ahead of what Kafka has: the offsets topic
	 * (a transaction's or, at_least_once, written after delivery), the table (written after a commit or a delivery) and
	 * our own position (advanced after one).  After a failed commit Kafka
	 * may have more than we know; after a switch of mode the table or our
	 * position may be ahead of an old position record.
	 */
	fwd_position = Max(Max(kafka_position, fwd_table_position), fwd_position);
	if (fwd_position > fwd_table_position)
		fwd_mirror_dirty = true;
	/* before anything is sent: does the log have what Kafka says it has? */
	kafka_record_position = kafka_position;
	divergence_pending = kafka_position > 0;	/* both modes */
	fwd_publish_progress(fwd_position, 0);
	backoff_ms = 0;
	ereport(LOG,
			(errmsg("esrc forwarder: connected to Kafka at %s (%s), continuing after position " INT64_FORMAT,
					fwd_cfg.brokers, fwd_cfg.exactly_once ? "exactly_once" : "at_least_once",
					fwd_position)));
	fwd_set_state(FWD_RUNNING, NULL);
	fwd_forget_logged_failure();
	return true;
}

/*
 * Look up (creating if need be) the topic of every record of b; on the
 * first record that cannot be sent (its topic cannot be used, or it could
 * not be converted, see batch_receive), cut there.  Returns the status of
 * that record (OK when all are usable) and in *usable how many records
 * can be sent.  Nothing of b is in flight here: kafka.c may first evict
 * topic handles that no batch in flight uses, and the records of b hold
 * handles of this pass only.
 */
static EsrcKafkaStatus
resolve_topics(Batch *b, int *usable, char *err, size_t errlen)
{
	int			i;

	esrc_kafka_trim_topics(kafka);
	for (i = 0; i < b->len; i++)
		b->recs[i].topic = NULL;
	for (i = 0; i < b->len; i++)
	{
		char		name[TOPIC_BUF_LEN];
		EsrcKafkaStatus st;
		TopicExpansion ex;

		if (b->recs[i].skip)
			continue;			/* not sent anywhere: no topic needed */
		if (b->unsendable[i] != NULL)
		{
			snprintf(err, errlen, "cannot forward event at position " INT64_FORMAT " (stream \"%.200s\"): %s",
					 b->recs[i].position, b->recs[i].stream, b->unsendable[i]);
			*usable = i;
			return ESRC_KAFKA_POISON;
		}
		ex = fwd_expand_topic(fwd_cfg.topic, b->categories[i], fwd_served_database,
							  name, sizeof(name));
		if (ex == TOPIC_TOO_LONG)
		{
			snprintf(err, errlen, "cannot forward event at position " INT64_FORMAT " (stream \"%.200s\"): its topic name would be longer than Kafka allows (249 bytes)",
					 b->recs[i].position, b->recs[i].stream);
			*usable = i;
			return ESRC_KAFKA_POISON;
		}
		if (ex != TOPIC_OK)
			name[0] = '\0';	/* refused by the name check */
		st = esrc_kafka_topic(kafka, name, &b->recs[i].topic, err, errlen);
		if (st != ESRC_KAFKA_OK)
		{
			*usable = i;
			return st;
		}
	}
	*usable = b->len;
	return ESRC_KAFKA_OK;
}

/* The extension was created anew: a new log, with a new Kafka identity. */
static void
new_log(void)
{
	ereport(LOG,
			(errmsg("esrc forwarder: the log of database \"%s\" is new (log_id %s), starting after its position " INT64_FORMAT,
					fwd_served_database, fwd_log_id, fwd_table_position)));
	disconnect();
	fwd_position = -1;
	poison_position = 0;
	divergence_pending = false;
	fwd_set_blocked(0, NULL);
	fwd_mirror_dirty = false;
}

/*
 * esrc.forwarder_log_batches: one LOG line per batch that went out, for
 * bench/forward/run.sh, which matches it with the commit timestamps of
 * the events.  "woke" is when the reading of the batch began: the turn
 * of the main loop that the latch woke, or the read of the next batch
 * while this one was sent.
 */
static void
log_batch(Batch *b, int ndone)
{
	EsrcKafkaTiming t;

	esrc_kafka_timing(kafka, &t);
	ereport(LOG,
			(errmsg("esrc forwarder: batch first=" INT64_FORMAT " last=" INT64_FORMAT " events=%d woke_us=" INT64_FORMAT " read_us=" INT64_FORMAT " started_us=" INT64_FORMAT " queued_us=" INT64_FORMAT " acked_us=" INT64_FORMAT " committed_us=" INT64_FORMAT,
					b->recs[0].position, b->recs[ndone - 1].position, ndone,
					esrc_unix_us(b->woke), esrc_unix_us(b->read_done), esrc_unix_us(t.started),
					esrc_unix_us(t.queued), esrc_unix_us(t.acked), esrc_unix_us(t.committed)),
			 errhidestmt(true)));
}

static void account_batch(Batch *b, instr_time sent);
static void reload_config(void);

/*
 * Between the waits for the standbys (fwdstandby.c): serve librdkafka's
 * callbacks; false after a reload, so that the batch is read again under
 * the new settings.
 */
static bool
serve_during_wait(void)
{
	esrc_kafka_poll(kafka);
	if (ConfigReloadPending)
	{
		reload_config();
		return false;
	}
	return kafka != NULL;
}

/* Read the batch after position "after" into next while a batch is in flight. */
static ReadResult
read_next(Batch *next, int64 after)
{
	ReadResult	rr;

	next->woke = GetCurrentTimestamp();
	INSTR_TIME_SET_CURRENT(next->read_start);
	rr = fwd_read_log(next, true, after);
	INSTR_TIME_SET_CURRENT(next->read_end);
	next->read_done = GetCurrentTimestamp();
	return rr;
}

/*
 * Exactly once, batch in flight and acknowledged: start next, read after
 * it, so that it is sent while the batch before it is committed.  Only a
 * whole batch (every topic usable, queued whole); otherwise next stays
 * read but unsent, for the main loop.  true when next is in flight.
 */
static bool
start_next(Batch *next)
{
	char		err[ESRC_FWD_ERROR_LEN];
	int			usable;
	int			poison;
	EsrcKafkaStatus status;

	if (!fwd_standbys_caught_up(next->flush_to))
		return false;			/* the main loop waits for them */
	if (resolve_topics(next, &usable, err, sizeof(err)) != ESRC_KAFKA_OK ||
		usable < next->len)
		return false;
	status = esrc_kafka_start(kafka, next->recs, next->len, &poison, err, sizeof(err));
	if (status == ESRC_KAFKA_OK)
		return true;
	/* the main loop sends it again on its own and reports what happens */
	if (esrc_kafka_batches_in_flight(kafka) == 2 &&
		esrc_kafka_abort_newest(kafka, err, sizeof(err)) != ESRC_KAFKA_OK)
		ereport(DEBUG1,
				(errmsg("esrc forwarder: %s", err)));
	return false;
}

/* May the worker read on (and send) while a batch is in flight? */
static bool
may_go_on(void)
{
	return poison_position == 0 && !ConfigReloadPending &&
		!fwd_paused();
}

/* No event after a poison record goes before it: cut b there. */
static void
cut_at_poison(Batch *b)
{
	int			n = b->len;
	int			i;

	if (poison_position > 0)
	{
		if (b->recs[0].position == poison_position)
			n = 1;
		else
			for (i = 0; i < n; i++)
				if (b->recs[i].position >= poison_position)
				{
					n = i;
					break;
				}
	}
	b->len = n;
}

/*
 * Start sending b: the records up to the first whose topic cannot be used
 * (*usable of them; *topic_status and topic_err say why that one cannot).
 * Returns the status of the start, or the topic's when no record is
 * usable.  err and topic_err have ESRC_FWD_ERROR_LEN bytes.
 */
static EsrcKafkaStatus
start_batch(Batch *b, int *usable, int *poison, EsrcKafkaStatus *topic_status,
			char *topic_err, char *err)
{
	*topic_status = resolve_topics(b, usable, topic_err, ESRC_FWD_ERROR_LEN);
	if (*usable > 0)
		return esrc_kafka_start(kafka, b->recs, *usable, poison, err, ESRC_FWD_ERROR_LEN);

	/* RETRY, FATAL or POISON of the first record's topic */
	strlcpy(err, topic_err, ESRC_FWD_ERROR_LEN);
	if (*topic_status == ESRC_KAFKA_POISON)
		*poison = 0;
	return *topic_status;
}

/* The first ndone records of b are in Kafka: advance the position. */
static void
note_delivered(Batch *b, int ndone)
{
	int			delivered = 0;
	int			i;

	if (esrc_forwarder_log_batches && kafka != NULL)
		log_batch(b, ndone);
	for (i = 0; i < ndone; i++)
		if (!b->recs[i].skip)
			delivered++;
	fwd_position = b->recs[ndone - 1].position;
	fwd_mirror_dirty = true;
	fwd_publish_progress(fwd_position, delivered);
	esrc_metrics_forwarded(delivered);
}

/*
 * The state after sending b: status and err from Kafka (or from the topic
 * of record poison), ndone records of b delivered.
 */
static void
report_outcome(Batch *b, EsrcKafkaStatus status, int poison, int ndone,
			   const char *err)
{
	switch (status)
	{
		case ESRC_KAFKA_OK:
			if (backoff_ms > 0 || fwd_get_state() == FWD_DISCONNECTED)
				ereport(LOG,
						(errmsg("esrc forwarder: delivering to Kafka again, at position " INT64_FORMAT,
								fwd_position)));
			backoff_ms = 0;
			fwd_forget_logged_failure();
			if (poison_position > 0 && fwd_position >= poison_position)
			{
				ereport(LOG,
						(errmsg("esrc forwarder: event at position " INT64_FORMAT " is past, forwarding resumes",
								poison_position)));
				poison_position = 0;
				fwd_set_blocked(0, NULL);
			}
			if (poison_position == 0)
				fwd_set_state(FWD_RUNNING, NULL);
			break;

		case ESRC_KAFKA_POISON:
			{
				EsrcKafkaRecord *r = &b->recs[poison];
				char		detail[ESRC_FWD_ERROR_LEN];

				poison_position = r->position;
				fwd_set_blocked(r->position, r->stream);
				snprintf(detail, sizeof(detail),
						 "Nothing after position " INT64_FORMAT " is forwarded until it goes through; retrying with back-off. To give up on it, run SELECT esrc.forwarder_skip(" INT64_FORMAT ").",
						 r->position, r->position);
				fwd_report_failure(FWD_BLOCKED, err, detail);
				/* retry at once if records before it remain to be sent */
				if (poison == ndone)
					schedule_retry();
				break;
			}

		case ESRC_KAFKA_RETRY:
			fwd_report_failure(FWD_DISCONNECTED, err, NULL);
			schedule_retry();
			break;

		case ESRC_KAFKA_FATAL:
		case ESRC_KAFKA_CONFIG:
			fwd_report_failure(FWD_ERROR, err, "The Kafka producer is recreated.");
			disconnect();		/* Kafka may have more: connect_kafka() asks */
			schedule_retry();
			break;
	}
}

/*
 * Send batch *curp and account for the outcome; *sparep is the other
 * batch buffer.  With a backlog, while librdkafka sends a batch, the
 * worker reads the next one.  In exactly_once mode that next batch is
 * sent as soon as Kafka has acknowledged every record of
 * the batch before it, while that one is committed (see kafka.c for why
 * this keeps exactly once and order), and so on while there is more to
 * read: this returns when nothing is in flight any more.  On return,
 * *prefetched says whether *curp holds a batch read but not sent yet
 * (only after a batch that went out whole).
 */
static void
forward_batch(Batch **curp, Batch **sparep, bool *prefetched)
{
	Batch	   *b = *curp;
	Batch	   *next = *sparep;
	bool		started = false;	/* b is in flight already */
	bool		have_next = false;

	for (;;)
	{
		char		err[ESRC_FWD_ERROR_LEN];
		char		topic_err[ESRC_FWD_ERROR_LEN];
		int			n;
		int			ndone = 0;
		int			poison = -1;
		int			usable;
		EsrcKafkaStatus status;
		EsrcKafkaStatus topic_status = ESRC_KAFKA_OK;
		ReadResult	prefetch = READ_OK;
		bool		next_started = false;
		instr_time	sent;

		CHECK_FOR_INTERRUPTS();
		have_next = false;
		if (started)
		{
			/* start_next() sent it whole */
			n = usable = b->len;
			status = ESRC_KAFKA_OK;
		}
		else
		{
			cut_at_poison(b);
			n = b->len;
			status = start_batch(b, &usable, &poison, &topic_status, topic_err, err);
		}

		if (usable > 0 && esrc_kafka_in_flight(kafka))
		{
			bool		whole = (status == ESRC_KAFKA_OK && usable == n);

			/*
			 * With a backlog (b was cut by the batch limits), read the
			 * next batch at once, while b is sent.  Not at a low rate:
			 * there, reading and sending the next batch while b is
			 * committed was measured to delay b's commit by more than it
			 * gains (bench/forward, docs/forwarder.md), and the events
			 * that commit meanwhile are better taken by the next read.
			 */
			if (whole && may_go_on() &&
				(n >= esrc_kafka_batch_size || b->bytes >= BATCH_BYTES))
			{
				prefetch = read_next(next, b->recs[n - 1].position);
				have_next = (prefetch == READ_OK && next->len > 0);
			}

			/*
			 * Exactly once: once Kafka has every record of b, send the
			 * next batch, while b is committed.
			 */
			if (whole && fwd_cfg.exactly_once && have_next && may_go_on() &&
				esrc_kafka_wait_acked(kafka))
				next_started = start_next(next);

			/* commit b; if that fails, next is aborted with it */
			status = esrc_kafka_finish(kafka, &ndone, &poison, err, sizeof(err));
			if (next_started && !esrc_kafka_in_flight(kafka))
				next_started = false;
		}
		if (status == ESRC_KAFKA_OK && usable < n)
		{
			/* everything before the unusable topic went out */
			status = topic_status;
			strlcpy(err, topic_err, sizeof(err));
			if (status == ESRC_KAFKA_POISON)
				poison = usable;
		}

		if (ndone > 0)
			note_delivered(b, ndone);
		if (status != ESRC_KAFKA_OK)
		{
			/* what was read after b does not follow what went out */
			have_next = false;
			Assert(!next_started);
		}
		report_outcome(b, status, poison, ndone, err);

		INSTR_TIME_SET_CURRENT(sent);
		account_batch(b, sent);

		if (prefetch == READ_NEW_LOG)
		{
			Assert(!next_started);
			have_next = false;
			new_log();
		}

		if (!next_started)
			break;
		/* next is in flight: it is the batch to finish now */
		{
			Batch	   *t = b;

			b = next;
			next = t;
		}
		started = true;
	}

	*prefetched = have_next;
	if (have_next)
	{
		*curp = next;
		*sparep = b;
	}
	else
	{
		*curp = b;
		*sparep = next;
	}
}

/*
 * Batch statistics, logged at DEBUG1 every 10 s while the worker sends:
 * how many batches, how large, and where the time goes (PostgreSQL read
 * versus Kafka delivery).
 */
static struct
{
	int64		batches;
	int64		events;
	double		read_ms;
	double		send_ms;
	instr_time	since;
} stats;

static void
account_batch(Batch *b, instr_time sent)
{
	instr_time	t0 = b->read_start;
	instr_time	t1 = b->read_end;
	instr_time	t2 = sent;
	instr_time	now = sent;

	if (INSTR_TIME_IS_ZERO(stats.since))
		stats.since = t0;
	stats.batches++;
	stats.events += b->len;
	INSTR_TIME_SUBTRACT(t2, t1);
	INSTR_TIME_SUBTRACT(t1, t0);
	stats.read_ms += INSTR_TIME_GET_MILLISEC(t1);
	stats.send_ms += INSTR_TIME_GET_MILLISEC(t2);
	INSTR_TIME_SUBTRACT(now, stats.since);
	if (INSTR_TIME_GET_MILLISEC(now) >= 10000)
	{
		ereport(DEBUG1,
				(errmsg("esrc forwarder: " INT64_FORMAT " batches, " INT64_FORMAT " events in %.1f s; per batch: %.1f events, read %.2f ms, send %.2f ms (queueing %.2f ms, WAL flush %.2f ms)",
						stats.batches, stats.events, INSTR_TIME_GET_MILLISEC(now) / 1000.0,
						(double) stats.events / stats.batches,
						stats.read_ms / stats.batches, stats.send_ms / stats.batches,
						esrc_kafka_produce_ms / stats.batches, fwd_wal_flush_ms / stats.batches)));
		fwd_wal_flush_ms = 0;
		memset(&stats, 0, sizeof(stats));
		esrc_kafka_produce_ms = 0;
		esrc_kafka_commit_ms = 0;
	}
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
			reload_config();
		wait_latch(NO_BROKERS_WAIT_MS);
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
	copy_config();
}

/* With no brokers there is nothing to do, not even a database to join. */
static void
wait_for_brokers(void)
{
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
			reload_config();
		if (fwd_cfg.brokers[0] != '\0')
			break;
		fwd_set_state(FWD_IDLE, "esrc.kafka_brokers is empty: events wait in the log.");
		wait_latch(NO_BROKERS_WAIT_MS);
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
		wait_latch(IDLE_WAIT_MS);
		return true;
	}
	if (fwd_cfg.brokers[0] == '\0')
	{
		disconnect();
		fwd_set_state(FWD_IDLE, "esrc.kafka_brokers is empty: events wait in the log.");
		wait_latch(NO_BROKERS_WAIT_MS);
		return true;
	}
	if (config_refused)
	{
		/* the error is in the status; only a reload can help */
		wait_latch(NO_BROKERS_WAIT_MS);
		return true;
	}
	return false;
}

/*
 * Before the next attempt after a failure: wait (up to the retry time)
 * and return true, the turn is over.
 */
static bool
wait_for_retry(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		ms;

	if (retry_at <= now)
		return false;
	ms = (long) ((retry_at - now) / 1000) + 1;

	/* while blocked, notice esrc.forwarder_skip() within a second */
	if (poison_position > 0 && kafka != NULL && fwd_poison_skipped(poison_position))
		retry_at = 0;
	else
		wait_latch(poison_position > 0 ? Min(ms, 1000) : ms);
	return true;
}

/*
 * Connected, before anything is sent: check Kafka's position record
 * against the log (fwddiverge.c).  Returns true, the turn is over, while
 * an append in flight holds that position or while the divergence waits
 * for the operator (esrc.forwarder_accept_divergence, looked for every
 * second).
 */
static bool
wait_if_diverged(long *held_wait)
{
	int64		after = 0;

	if (!divergence_pending || kafka == NULL)
		return false;
	switch (fwd_check_divergence(kafka_record_position, kafka_record_id, &after))
	{
		case DIV_OK:
			break;
		case DIV_WAIT:
			wait_latch(*held_wait);
			*held_wait = Min(*held_wait * 2, HELD_WAIT_MAX_MS);
			return true;
		case DIV_DIVERGED:
			wait_latch(1000);
			return true;
		case DIV_ACCEPTED:
			fwd_position = after;
			fwd_mirror_dirty = false;	/* the function set the table */
			fwd_publish_progress(fwd_position, 0);
			fwd_set_state(FWD_RUNNING, NULL);
			fwd_forget_logged_failure();
			break;
	}
	divergence_pending = false;
	*held_wait = HELD_WAIT_MIN_MS;
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

	disconnect();
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
	wait_latch(IDLE_WAIT_MS);
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
	if (poison_position == 0)
		fwd_set_state(FWD_RUNNING, NULL);
	if (cur->held)
	{
		/* an open append holds the horizon: look again soon */
		wait_latch(*held_wait);
		*held_wait = Min(*held_wait * 2, HELD_WAIT_MAX_MS);
	}
	else
	{
		*held_wait = HELD_WAIT_MIN_MS;
		wait_latch(IDLE_WAIT_MS);
	}
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
			reload_config();
		esrc_kafka_poll(kafka);

		if (wait_if_stopped())
			continue;
		if (kafka == NULL)
			have = false;		/* a batch read ahead waits for no one */
		if (wait_for_retry())
			continue;
		if (wait_if_diverged(&held_wait))
			continue;

		if (!have)
		{
			want_batch = (kafka != NULL && fwd_position >= 0);
			cur->woke = turn_began;
			cur->read_start = t_turn;
			rr = fwd_read_log(cur, want_batch, fwd_position);
			INSTR_TIME_SET_CURRENT(cur->read_end);
			cur->read_done = GetCurrentTimestamp();
			if (rr == READ_NEW_LOG)
			{
				new_log();
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

			if (kafka == NULL || fwd_position < 0)
			{
				if (kafka == NULL)
					connect_kafka();
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
		forward_batch(&cur, &spare, &have);
	}
}
