/*-------------------------------------------------------------------------
 *
 * fwdsend.c
 *	  The forwarder worker's sending of a batch through kafka.c: the topic
 *	  of each record, the cut at a record Kafka refused (poison), the next
 *	  batch read (and, exactly once, sent) while one is in flight, the
 *	  position advanced over what Kafka has, the state after each batch,
 *	  and the batch statistics (DEBUG1, esrc.forwarder_log_batches).
 *
 * The main loop (forwarder.c) reads a batch and hands it to
 * fwd_forward_batch, which returns once nothing is in flight any more.
 * With a backlog it reads the next batch while librdkafka sends one, and
 * in exactly_once mode sends it while the one before is committed
 * (kafka.c, struct EsrcKafka in kafkaint.h, keeps that exactly once and
 * in order).  The position only advances over events that Kafka has, in
 * increasing order; a poison record stops everything after it, so no
 * later event overtakes it, until it goes through or an operator skips it
 * (esrc.forwarder_skip).  Kafka's failures end in the status and the
 * back-off of fwdconnect.c; nothing here raises an ERROR for them.
 *
 * Worker process only.  Talks to: kafka.c (every send), fwdread.c (the
 * read ahead), fwdconf.c (topic names), fwdstandby.c (the standbys
 * before a batch read ahead goes out), fwdconnect.c (the link to Kafka,
 * the back-off), fwdstatus.c (the status); forwardint.h has what the
 * worker's files share.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "portability/instr_time.h"
#include "postmaster/interrupt.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "forwardint.h"
#include "kafka.h"

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

	esrc_kafka_trim_topics(fwd_kafka);
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
		st = esrc_kafka_topic(fwd_kafka, name, &b->recs[i].topic, err, errlen);
		if (st != ESRC_KAFKA_OK)
		{
			*usable = i;
			return st;
		}
	}
	*usable = b->len;
	return ESRC_KAFKA_OK;
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

	esrc_kafka_timing(fwd_kafka, &t);
	ereport(LOG,
			(errmsg("esrc forwarder: batch first=" INT64_FORMAT " last=" INT64_FORMAT " events=%d woke_us=" INT64_FORMAT " read_us=" INT64_FORMAT " started_us=" INT64_FORMAT " queued_us=" INT64_FORMAT " acked_us=" INT64_FORMAT " committed_us=" INT64_FORMAT,
					b->recs[0].position, b->recs[ndone - 1].position, ndone,
					esrc_unix_us(b->woke), esrc_unix_us(b->read_done), esrc_unix_us(t.started),
					esrc_unix_us(t.queued), esrc_unix_us(t.acked), esrc_unix_us(t.committed)),
			 errhidestmt(true)));
}

static void account_batch(Batch *b, instr_time sent);

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
	status = esrc_kafka_start(fwd_kafka, next->recs, next->len, &poison, err, sizeof(err));
	if (status == ESRC_KAFKA_OK)
		return true;
	/* the main loop sends it again on its own and reports what happens */
	if (esrc_kafka_batches_in_flight(fwd_kafka) == 2 &&
		esrc_kafka_abort_newest(fwd_kafka, err, sizeof(err)) != ESRC_KAFKA_OK)
		ereport(DEBUG1,
				(errmsg("esrc forwarder: %s", err)));
	return false;
}

/* May the worker read on (and send) while a batch is in flight? */
static bool
may_go_on(void)
{
	return fwd_poison_position == 0 && !ConfigReloadPending &&
		!fwd_paused();
}

/* No event after a poison record goes before it: cut b there. */
static void
cut_at_poison(Batch *b)
{
	int			n = b->len;
	int			i;

	if (fwd_poison_position > 0)
	{
		if (b->recs[0].position == fwd_poison_position)
			n = 1;
		else
			for (i = 0; i < n; i++)
				if (b->recs[i].position >= fwd_poison_position)
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
		return esrc_kafka_start(fwd_kafka, b->recs, *usable, poison, err, ESRC_FWD_ERROR_LEN);

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

	if (esrc_forwarder_log_batches && fwd_kafka != NULL)
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
			if (fwd_backoff_ms > 0 || fwd_get_state() == FWD_DISCONNECTED)
				ereport(LOG,
						(errmsg("esrc forwarder: delivering to Kafka again, at position " INT64_FORMAT,
								fwd_position)));
			fwd_backoff_ms = 0;
			fwd_forget_logged_failure();
			if (fwd_poison_position > 0 && fwd_position >= fwd_poison_position)
			{
				ereport(LOG,
						(errmsg("esrc forwarder: event at position " INT64_FORMAT " is past, forwarding resumes",
								fwd_poison_position)));
				fwd_poison_position = 0;
				fwd_set_blocked(0, NULL);
			}
			if (fwd_poison_position == 0)
				fwd_set_state(FWD_RUNNING, NULL);
			break;

		case ESRC_KAFKA_POISON:
			{
				EsrcKafkaRecord *r = &b->recs[poison];
				char		detail[ESRC_FWD_ERROR_LEN];

				fwd_poison_position = r->position;
				fwd_set_blocked(r->position, r->stream);
				snprintf(detail, sizeof(detail),
						 "Nothing after position " INT64_FORMAT " is forwarded until it goes through; retrying with back-off. To give up on it, run SELECT esrc.forwarder_skip(" INT64_FORMAT ").",
						 r->position, r->position);
				fwd_report_failure(FWD_BLOCKED, err, detail);
				/* retry at once if records before it remain to be sent */
				if (poison == ndone)
					fwd_schedule_retry();
				break;
			}

		case ESRC_KAFKA_RETRY:
			fwd_report_failure(FWD_DISCONNECTED, err, NULL);
			fwd_schedule_retry();
			break;

		case ESRC_KAFKA_FATAL:
		case ESRC_KAFKA_CONFIG:
			fwd_report_failure(FWD_ERROR, err, "The Kafka producer is recreated.");
			fwd_disconnect();		/* Kafka may have more: fwd_connect_kafka() asks */
			fwd_schedule_retry();
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
void
fwd_forward_batch(Batch **curp, Batch **sparep, bool *prefetched)
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

		if (usable > 0 && esrc_kafka_in_flight(fwd_kafka))
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
				esrc_kafka_wait_acked(fwd_kafka))
				next_started = start_next(next);

			/* commit b; if that fails, next is aborted with it */
			status = esrc_kafka_finish(fwd_kafka, &ndone, &poison, err, sizeof(err));
			if (next_started && !esrc_kafka_in_flight(fwd_kafka))
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
			fwd_new_log();
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
