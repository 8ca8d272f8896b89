/*-------------------------------------------------------------------------
 *
 * kafka.c
 *	  librdkafka glue for the forwarder: connecting, the producers,
 *	  delivery reports, waiting, and the delivery of one batch (produce,
 *	  transactions).
 *
 * The worker (forwarder.c, fwdconnect.c, fwdsend.c) decides what to send
 * and when; this file knows how.  An
 * EsrcKafka handle owns one librdkafka producer (transactional in
 * exactly-once mode; two of them, used in turn) and a cache of topic
 * handles (kafkatopic.c).  The configuration of each client and
 * librdkafka's log are kafkaconf.c's; the position record is kafkapos.c's;
 * kafkaint.h has what the four files share.
 *
 * Threads: librdkafka runs its own threads, its main thread at a lower
 * priority than the worker (kafka_new_rk, kafkaproc.c).  They never call into
 * PostgreSQL (their log lines and errors go to kafkaconf.c's ring
 * buffer), and delivery reports are served by rd_kafka_poll()/flush() in
 * the worker's own thread, where kafka_dr_cb writes nothing but two
 * fields of the record it reports on.  Every client is created with all
 * signals blocked (kafka_new_rk), so librdkafka's threads, which inherit
 * the mask, never run PostgreSQL's handlers.
 *
 * Waiting: every blocking librdkafka call gets a short timeout and is
 * repeated (the transactional calls are resumable), with
 * CHECK_FOR_INTERRUPTS() in between (kafka_between_slices, kafkaproc.c),
 * so SIGTERM and postmaster death are honoured within about a second.  Nothing here
 * raises an ERROR for a Kafka failure: the caller gets an EsrcKafkaStatus
 * and a message.
 *
 * Exit: the handle being connected and the consumer of
 * kafka_read_position() are known to esrc_kafka_shutdown() from the
 * moment they exist, so a SIGTERM in any wait of connect (which ends the
 * process from CHECK_FOR_INTERRUPTS) still closes them.  Closing never
 * flushes: whatever is queued or in flight is purged first, so
 * rd_kafka_destroy() does not wait for a broker that does not answer.
 *
 * Exactly once: the position record (kafkapos.c) goes to the compacted
 * offsets topic in the same Kafka transaction as the records up to its
 * position.  At connect, init_transactions() fences any earlier
 * incarnation of the same client id and completes or aborts its open
 * transaction; then kafka_read_position() reads the offsets topic to its
 * end.  With a backlog, two batches are in flight on the two producers
 * (one being committed, the next being sent); the rules that keep that
 * exactly once are at struct EsrcKafka (kafkaint.h).  See
 * docs/forwarder.md for the failure analysis.
 *
 * Talks to: the worker (fwdconnect.c, fwdsend.c, forwarder.c: its only
 * callers, through kafka.h), kafkaconf.c, kafkatopic.c, kafkapos.c,
 * kafkaproc.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <librdkafka/rdkafka.h>

#include "miscadmin.h"
#include "portability/instr_time.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "kafka.h"
#include "kafkaint.h"

static uint32 dr_gen = 0;		/* last generation handed out (POSITION_INDEX) */

/* time spent producing (queueing) and committing/draining, for DEBUG1 */
double		esrc_kafka_produce_ms = 0;
double		esrc_kafka_commit_ms = 0;

/*
 * Delivery report callback: called from rd_kafka_poll/flush in our thread,
 * opaque is the producer's TxnSlot.
 */
void
kafka_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
	TxnSlot    *slot = (TxnSlot *) opaque;
	uint64		tag = (uint64) (uintptr_t) msg->_private;
	uint32		gen = (uint32) (tag >> 32);
	uint32		index = (uint32) (tag & 0xFFFFFFFFu);

	if (slot == NULL || !slot->in_flight || gen != slot->gen)
		return;
	if (index == POSITION_INDEX)
	{
		slot->position_err = msg->err;
		slot->position_acked = (msg->err == RD_KAFKA_RESP_ERR_NO_ERROR);
	}
	else if (slot->recs != NULL && index < (uint32) slot->nrecs)
	{
		slot->recs[index].err = msg->err;
		slot->recs[index].acked = (msg->err == RD_KAFKA_RESP_ERR_NO_ERROR);
	}
}

/* ----------------------------------------------------------------
 * Errors of librdkafka's transactional calls
 * ----------------------------------------------------------------
 */

static void
copy_error(rd_kafka_error_t *error, const char *what, char *err, size_t errlen)
{
	snprintf(err, errlen, "%s: %s (%s)", what, rd_kafka_error_string(error),
			 rd_kafka_error_name(error));
}

/*
 * Classify a transactional API error: fatal, abortable or retriable.
 * Frees the error object.
 */
typedef enum TxnErr
{
	TXN_RETRIABLE,
	TXN_ABORTABLE,
	TXN_FATAL
} TxnErr;

static TxnErr
txn_error(rd_kafka_error_t *error, const char *what, char *err, size_t errlen)
{
	TxnErr		kind;

	copy_error(error, what, err, errlen);
	if (rd_kafka_error_is_fatal(error))
		kind = TXN_FATAL;
	else if (rd_kafka_error_txn_requires_abort(error))
		kind = TXN_ABORTABLE;
	else if (rd_kafka_error_is_retriable(error))
		kind = TXN_RETRIABLE;
	else
		kind = TXN_FATAL;		/* librdkafka's advice for unclassified errors */
	rd_kafka_error_destroy(error);
	return kind;
}

/* ----------------------------------------------------------------
 * Connecting
 * ----------------------------------------------------------------
 */

static EsrcKafkaStatus begin_txn(EsrcKafka *k, int p, char *err, size_t errlen);

static void
destroy_rk(rd_kafka_t *rk)
{
	/* drop whatever is queued; we never rely on a destroy-time flush */
	rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
	rd_kafka_destroy(rk);
}

void
esrc_kafka_destroy(EsrcKafka *k)
{
	HASH_SEQ_STATUS seq;
	EsrcKafkaTopic *t;
	int			i;

	if (k == NULL)
		return;
	kafka_live_forget(k);
	/* reports of what is still queued must not reach a batch */
	for (i = 0; i < MAX_PRODUCERS; i++)
	{
		k->slots[i].in_flight = false;
		k->slots[i].recs = NULL;
	}

	hash_seq_init(&seq, k->topics);
	while ((t = hash_seq_search(&seq)) != NULL)
		kafka_topic_destroy(k, t);
	for (i = 0; i < k->nrk; i++)
	{
		if (k->offsets_rkts[i])
			rd_kafka_topic_destroy(k->offsets_rkts[i]);
		destroy_rk(k->rks[i]);
	}
	esrc_kafka_emit_log();
	MemoryContextDelete(k->cxt);
}

/*
 * At the worker's exit (a before_shmem_exit callback of forwarder.c):
 * close every client of this process, also those of a connect that a
 * SIGTERM or the postmaster's death interrupted.  Handles the caller
 * held are gone afterwards.
 */
void
esrc_kafka_shutdown(void)
{
	if (kafka_live_connecting() && kafka_live_handle() != NULL)
		ereport(LOG,
				(errmsg("esrc forwarder: closing the Kafka clients of an interrupted connect")));
	kafka_position_shutdown();
	if (kafka_live_handle() != NULL)
		esrc_kafka_destroy(kafka_live_handle());
}

/* A new handle, with copies of the settings and an empty topic cache. */
static EsrcKafka *
new_handle(const EsrcKafkaSettings *s)
{
	MemoryContext cxt;
	MemoryContext old;
	EsrcKafka  *k;

	cxt = AllocSetContextCreate(TopMemoryContext, "esrc kafka", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	k = palloc0(sizeof(EsrcKafka));
	k->cxt = cxt;
	k->exactly_once = s->exactly_once;
	k->client_id = pstrdup(s->client_id);
	k->source = pstrdup(s->source);
	k->brokers = pstrdup(s->brokers);
	k->properties = pstrdup(s->properties);
	k->position_prefix = kafka_position_prefix(s->log_id, s->database);
	kafka_topics_create(k);
	MemoryContextSwitchTo(old);
	return k;
}

/* The producers of k: two in exactly-once mode, one otherwise. */
static EsrcKafkaStatus
create_producers(EsrcKafka *k, char *err, size_t errlen)
{
	rd_kafka_conf_t *conf;
	char		errstr[512];

	while (k->nrk < (k->exactly_once ? MAX_PRODUCERS : 1))
	{
		rd_kafka_t *rk;

		conf = kafka_build_conf(k, CONF_PRODUCER, err, errlen);
		if (conf == NULL)
			return ESRC_KAFKA_CONFIG;
		rk = kafka_new_rk(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
		if (rk == NULL)
		{
			rd_kafka_conf_destroy(conf);
			snprintf(err, errlen, "cannot create the Kafka producer: %s", errstr);
			return ESRC_KAFKA_CONFIG;
		}
		rd_kafka_set_log_queue(rk, NULL);
		k->rks[k->nrk++] = rk;
	}
	k->cur = 0;
	return ESRC_KAFKA_OK;
}

/*
 * Fence earlier incarnations of both producers before reading the
 * position: after this no older transaction can still commit.
 */
static EsrcKafkaStatus
init_transactions(EsrcKafka *k, char *err, size_t errlen)
{
	instr_time	start;
	int			i;

	INSTR_TIME_SET_CURRENT(start);
	for (i = 0; i < k->nrk;)
	{
		rd_kafka_error_t *error = rd_kafka_init_transactions(k->rks[i], SLICE_MS * 5);

		if (error == NULL)
		{
			i++;
			continue;
		}
		switch (txn_error(error, "init_transactions", err, errlen))
		{
			case TXN_RETRIABLE:
				if (kafka_elapsed_ms(start) < CONNECT_BUDGET_MS && !kafka_connect_given_up())
				{
					kafka_between_slices(start);
					continue;
				}
				return ESRC_KAFKA_RETRY;
			default:
				return ESRC_KAFKA_FATAL;
		}
	}
	return ESRC_KAFKA_OK;
}

/*
 * Exactly once: fence, make sure of the offsets topic, read the position
 * into *position, and begin the first transaction of each producer.
 */
static EsrcKafkaStatus
connect_transactional(EsrcKafka *k, const EsrcKafkaSettings *s, int64 *position,
					  char *position_id, char *err, size_t errlen)
{
	EsrcKafkaStatus status;
	int			i;

	status = init_transactions(k, err, errlen);
	if (status == ESRC_KAFKA_OK)
		status = kafka_open_offsets_topic(k, s->offsets_topic, err, errlen);
	if (status == ESRC_KAFKA_OK)
		status = kafka_read_position(k, s->offsets_topic, position, position_id,
									 err, errlen);

	/* the first transaction of each producer, ahead of time */
	for (i = 0; status == ESRC_KAFKA_OK && i < k->nrk; i++)
		status = begin_txn(k, i, err, errlen);
	return status;
}

/* At least once: check that Kafka answers at all, so that "connected" means it. */
static EsrcKafkaStatus
check_reachable(EsrcKafka *k, const char *brokers, char *err, size_t errlen)
{
	const struct rd_kafka_metadata *md;
	rd_kafka_resp_err_t e;
	instr_time	start;

	INSTR_TIME_SET_CURRENT(start);
	for (;;)
	{
		e = rd_kafka_metadata(k->rks[0], 0, NULL, &md, SLICE_MS * 5);
		if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			rd_kafka_metadata_destroy(md);
			return ESRC_KAFKA_OK;
		}
		if (kafka_elapsed_ms(start) >= CONNECT_BUDGET_MS || kafka_connect_given_up())
		{
			snprintf(err, errlen, "cannot reach Kafka at %s: %s", brokers,
					 rd_kafka_err2str(e));
			return ESRC_KAFKA_RETRY;
		}
		kafka_between_slices(start);
	}
}

/*
 * Create the producer and, in exactly-once mode, initialize transactions
 * (fencing earlier incarnations) and read the last committed position
 * from the offsets topic into *position and the id of the event there
 * into position_id (ESRC_KAFKA_ID_LEN bytes; "" when the record has none,
 * as 0.2.0 wrote them).  In at-least-once mode, check that Kafka answers
 * and read the same (kafkapos.c writes the record there after delivery).
 * NULL with *status and err set on failure.  May ereport(FATAL) on
 * SIGTERM.
 */
EsrcKafka *
esrc_kafka_connect(const EsrcKafkaSettings *s, int64 *position, char *position_id,
				   EsrcKafkaStatus *status, char *err, size_t errlen)
{
	EsrcKafka  *k = new_handle(s);

	/* from here on a SIGTERM in any wait still closes what k holds */
	kafka_live_begin(k);

	kafka_clear_last_error();
	*status = create_producers(k, err, errlen);
	if (*status == ESRC_KAFKA_OK)
	{
		if (s->exactly_once)
			*status = connect_transactional(k, s, position, position_id, err, errlen);
		else
		{
			/* the last position record (kafkapos.c), for the divergence check */
			*status = check_reachable(k, s->brokers, err, errlen);
			if (*status == ESRC_KAFKA_OK && s->position_record)
				*status = kafka_open_offsets_topic(k, s->offsets_topic, err, errlen);
			if (*status == ESRC_KAFKA_OK)
				*status = kafka_read_position(k, s->offsets_topic, position,
											  position_id, err, errlen);
		}
	}
	if (*status != ESRC_KAFKA_OK)
	{
		char		cause[LOG_LINE];

		/* a generic timeout says more with the error that caused it */
		kafka_copy_last_error(cause, sizeof(cause));
		if (*status == ESRC_KAFKA_RETRY && cause[0] && strstr(err, cause) == NULL)
		{
			size_t		len = strlen(err);

			snprintf(err + len, errlen - len, " (%s)", cause);
		}
		esrc_kafka_destroy(k);
		return NULL;
	}

	esrc_kafka_emit_log();
	kafka_live_connected();
	return k;
}

/* Serve librdkafka's callbacks while idle. */
void
esrc_kafka_poll(EsrcKafka *k)
{
	int			i;

	if (k != NULL)
		for (i = 0; i < k->nrk; i++)
			rd_kafka_poll(k->rks[i], 0);
	esrc_kafka_emit_log();
}

/* ----------------------------------------------------------------
 * Sending
 * ----------------------------------------------------------------
 */

/*
 * The tags of an event (dynamic consistency boundaries, docs/dcb.md), as
 * the CloudEvents extension attribute esrctags: a JSON array of strings.
 */
static void
add_tags_header(rd_kafka_headers_t *h, const EsrcKafkaRecord *r)
{
	if (r->tags != NULL)
		rd_kafka_header_add(h, "ce_esrctags", -1, r->tags, -1);
}

/*
 * Produce one record on producer p (a copy: librdkafka owns the bytes
 * afterwards).  A tombstone (r->tombstone: an esrc.erased or esrc.deleted
 * event, docs/forwarder.md) goes with the stream as key, a null value and
 * the usual headers but content-type, so that compaction removes the key's
 * earlier records; it counts like any other record in the position.  On a full local queue, serve delivery reports and try
 * again.  Returns the librdkafka error; MSG_SIZE_TOO_LARGE means the
 * record is larger than message.max.bytes.
 */
static rd_kafka_resp_err_t
produce_record(EsrcKafka *k, int p, EsrcKafkaRecord *r, uint32 index)
{
	rd_kafka_t *rk = k->rks[p];
	rd_kafka_headers_t *h;
	char		version[24];
	char		position[24];
	rd_kafka_resp_err_t e;
	instr_time	start;
	bool		started = false;

	snprintf(version, sizeof(version), INT64_FORMAT, r->version);
	snprintf(position, sizeof(position), INT64_FORMAT, r->position);

	for (;;)
	{
		h = rd_kafka_headers_new(14);
		rd_kafka_header_add(h, "ce_specversion", -1, "1.0", 3);
		rd_kafka_header_add(h, "ce_id", -1, r->id, -1);
		rd_kafka_header_add(h, "ce_source", -1, k->source, -1);
		rd_kafka_header_add(h, "ce_type", -1, r->type, -1);
		rd_kafka_header_add(h, "ce_subject", -1, r->stream, r->stream_len);
		rd_kafka_header_add(h, "ce_time", -1, r->time, -1);
		if (!r->tombstone)
			rd_kafka_header_add(h, "content-type", -1, "application/json", -1);
		rd_kafka_header_add(h, "ce_esrcstream", -1, r->stream, r->stream_len);
		rd_kafka_header_add(h, "ce_esrcversion", -1, version, -1);
		rd_kafka_header_add(h, "ce_esrcposition", -1, position, -1);
		if (r->metadata != NULL)
			rd_kafka_header_add(h, "ce_esrcmetadata", -1, r->metadata, -1);
		if (r->traceparent != NULL)
			rd_kafka_header_add(h, "ce_traceparent", -1, r->traceparent, -1);
		if (r->tracestate != NULL)
			rd_kafka_header_add(h, "ce_tracestate", -1, r->tracestate, -1);
		add_tags_header(h, r);

		e = rd_kafka_producev(rk,
							  RD_KAFKA_V_RKT(r->topic->rkt[p]),
							  RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
							  RD_KAFKA_V_KEY(r->stream, r->stream_len),
							  RD_KAFKA_V_VALUE(r->tombstone ? NULL : r->data,
											   r->tombstone ? 0 : (size_t) r->data_len),
							  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
							  RD_KAFKA_V_OPAQUE((void *) (uintptr_t) (((uint64) k->slots[p].gen << 32) | index)),
							  RD_KAFKA_V_HEADERS(h),
							  RD_KAFKA_V_END);
		if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
			return e;
		/* on failure the headers are still ours */
		rd_kafka_headers_destroy(h);
		if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL)
			return e;
		if (!started)
		{
			INSTR_TIME_SET_CURRENT(start);
			started = true;
		}
		else if (kafka_elapsed_ms(start) > QUEUE_FULL_BUDGET_MS)
			return e;
		rd_kafka_poll(rk, 10);
		kafka_between_slices(start);
	}
}

/*
 * Wait until producer rk holds no message and no undelivered report,
 * serving reports, counting the budget from start.  false when the
 * budget is spent.
 */
static bool
drain_from(rd_kafka_t *rk, instr_time start, int budget_ms)
{
	while (rd_kafka_outq_len(rk) > 0)
	{
		if (kafka_elapsed_ms(start) > budget_ms)
			return false;
		rd_kafka_flush(rk, SLICE_MS);
		kafka_between_slices(start);
	}
	rd_kafka_poll(rk, 0);
	return true;
}

static bool
drain(rd_kafka_t *rk, int budget_ms)
{
	instr_time	start;

	INSTR_TIME_SET_CURRENT(start);
	return drain_from(rk, start, budget_ms);
}

/* A delivery error that retrying the same record cannot cure? */
static int
first_poison(EsrcKafkaRecord *recs, int nrecs)
{
	int			i;

	for (i = 0; i < nrecs; i++)
		if (!recs[i].skip && !recs[i].acked && kafka_is_poison(recs[i].err))
			return i;
	return -1;
}

static void
record_error(EsrcKafkaRecord *r, const char *what, char *err, size_t errlen)
{
	snprintf(err, errlen, "%s event at position " INT64_FORMAT " (stream \"%.200s\", topic \"%s\"): %s",
			 what, r->position, r->stream, r->topic->name,
			 rd_kafka_err2str(r->err));
}

/*
 * Exactly once: begin the next transaction of producer p ahead of time (a
 * round trip to librdkafka's main thread), while another batch is on its
 * way rather than on the path of the next one.
 * Nothing reaches Kafka before the first record is produced; an empty
 * transaction is dropped with its producer.  OK or FATAL.
 */
static EsrcKafkaStatus
begin_txn(EsrcKafka *k, int p, char *err, size_t errlen)
{
	rd_kafka_error_t *error;

	if (k->slots[p].begun)
		return ESRC_KAFKA_OK;
	error = rd_kafka_begin_transaction(k->rks[p]);
	if (error != NULL)
	{
		txn_error(error, "begin_transaction", err, errlen);
		return ESRC_KAFKA_FATAL;
	}
	k->slots[p].begun = true;
	return ESRC_KAFKA_OK;
}

/*
 * Abort the open transaction of producer p and wait for its reports.  OK
 * once aborted; FATAL when that fails (the caller then rebuilds the
 * producers, whose init_transactions aborts it for good).  err keeps an
 * earlier message if there is one.
 */
static EsrcKafkaStatus
abort_txn(EsrcKafka *k, int p, char *err, size_t errlen)
{
	instr_time	start;
	char		abort_err[256];

	k->slots[p].begun = false;
	INSTR_TIME_SET_CURRENT(start);
	for (;;)
	{
		rd_kafka_error_t *error = rd_kafka_abort_transaction(k->rks[p], SLICE_MS);

		if (error == NULL)
			break;
		if (txn_error(error, "abort_transaction", abort_err, sizeof(abort_err)) == TXN_RETRIABLE &&
			kafka_elapsed_ms(start) < COMMIT_BUDGET_MS)
		{
			kafka_between_slices(start);
			continue;
		}
		if (err[0] == '\0')
			strlcpy(err, abort_err, errlen);
		return ESRC_KAFKA_FATAL;
	}
	if (!drain(k->rks[p], COMMIT_BUDGET_MS))
		return ESRC_KAFKA_FATAL;
	return ESRC_KAFKA_OK;
}

/* The slot of the newest batch in flight (nflight > 0). */
static int
newest_slot(EsrcKafka *k)
{
	Assert(k->nflight > 0);
	return (k->oldest + k->nflight - 1) % k->nrk;
}

static void
slot_done(EsrcKafka *k, int p)
{
	TxnSlot    *slot = &k->slots[p];

	/* no later report may touch the records */
	slot->in_flight = false;
	slot->recs = NULL;
	slot->gen = 0;
	k->nflight--;
	k->oldest = (p + 1) % k->nrk;
	esrc_kafka_commit_ms += (double) kafka_elapsed_ms(slot->started);
}

/*
 * Start delivering recs[0 .. nrecs-1] (in position order; skipped ones are
 * not sent but count as done): queue them, in exactly-once mode in a new
 * transaction together with the position record.  librdkafka sends them
 * in the background; the caller may do other work (but must not free or
 * move recs) until esrc_kafka_finish() has finished this batch.
 *
 * With no batch in flight this is always allowed.  With one, only in
 * exactly-once mode and only after esrc_kafka_wait_acked() returned true
 * for it (rule 1 above): then this batch goes out on the other producer
 * while the first one is committed, and esrc_kafka_finish() finishes the
 * older one first.
 *
 * Returns OK when all were queued, POISON when recs[*poison] was refused
 * before sending (those before it are queued), FATAL when the producer
 * failed.  esrc_kafka_in_flight() says whether esrc_kafka_finish() must
 * follow.  May ereport(FATAL) on SIGTERM.
 */
EsrcKafkaStatus
esrc_kafka_start(EsrcKafka *k, EsrcKafkaRecord *recs, int nrecs,
				 int *poison, char *err, size_t errlen)
{
	int			p = k->cur;
	TxnSlot    *slot = &k->slots[p];
	rd_kafka_resp_err_t e;
	EsrcKafkaStatus status;
	int			i;

	Assert(k->nflight == 0 || (k->exactly_once && k->nflight == 1));
	Assert(!slot->in_flight);
	*poison = -1;
	err[0] = '\0';
	kafka_clear_last_error();
	for (i = 0; i < nrecs; i++)
	{
		recs[i].err = RD_KAFKA_RESP_ERR_NO_ERROR;
		recs[i].acked = false;
	}
	memset(&slot->timing, 0, sizeof(slot->timing));
	slot->timing.started = GetCurrentTimestamp();
	INSTR_TIME_SET_CURRENT(slot->started);
	slot->waiting = false;

	if (k->exactly_once &&
		(status = begin_txn(k, p, err, errlen)) != ESRC_KAFKA_OK)
		return status;

	slot->gen = ++dr_gen;
	if (slot->gen == 0)
		slot->gen = ++dr_gen;
	slot->recs = recs;
	slot->nrecs = nrecs;
	slot->nprod = nrecs;
	slot->last = -1;
	slot->position_err = RD_KAFKA_RESP_ERR_NO_ERROR;
	slot->position_acked = false;
	slot->poison_err[0] = '\0';
	slot->in_flight = true;
	slot->begun = false;
	if (k->nflight == 0)
		k->oldest = p;
	k->nflight++;
	if (k->exactly_once)
		k->cur = (p + 1) % k->nrk;

	for (i = 0; i < nrecs; i++)
	{
		if (!recs[i].skip)
		{
			e = produce_record(k, p, &recs[i], (uint32) i);
			if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
			{
				recs[i].err = e;
				if (!kafka_is_poison(e))
				{
					record_error(&recs[i], "cannot queue", err, errlen);
					if (k->exactly_once)
						abort_txn(k, p, err, errlen);
					slot_done(k, p);
					return ESRC_KAFKA_FATAL;
				}
				/* refused locally (too large): send what comes before it */
				record_error(&recs[i], "cannot send", slot->poison_err, sizeof(slot->poison_err));
				strlcpy(err, slot->poison_err, errlen);
				*poison = i;
				slot->nprod = i;
				break;
			}
		}
		slot->last = i;
	}

	if (k->exactly_once)
	{
		if (slot->last < 0)
		{
			/* nothing to commit: the first record is the poison */
			status = abort_txn(k, p, err, errlen);
			slot_done(k, p);
			strlcpy(err, slot->poison_err, errlen);
			return status == ESRC_KAFKA_OK ? ESRC_KAFKA_POISON : status;
		}
		e = kafka_produce_position(k, p, recs[slot->last].position, recs[slot->last].id);
		if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			snprintf(err, errlen, "cannot queue the position record: %s", rd_kafka_err2str(e));
			abort_txn(k, p, err, errlen);
			slot_done(k, p);
			return ESRC_KAFKA_FATAL;
		}
	}
	esrc_kafka_produce_ms += (double) kafka_elapsed_ms(slot->started);
	slot->timing.queued = GetCurrentTimestamp();

	/*
	 * Begin the other producer's next transaction now, while these
	 * records are on their way, rather than on the next batch's path.  A
	 * failure shows again when that batch begins it.
	 */
	if (k->exactly_once && !k->slots[k->cur].in_flight && !k->slots[k->cur].begun)
	{
		char		begin_err[256];

		begin_err[0] = '\0';
		(void) begin_txn(k, k->cur, begin_err, sizeof(begin_err));
	}
	return *poison >= 0 ? ESRC_KAFKA_POISON : ESRC_KAFKA_OK;
}

/* Is a batch in flight (esrc_kafka_finish() to be called)? */
bool
esrc_kafka_in_flight(EsrcKafka *k)
{
	return k != NULL && k->nflight > 0;
}

/* How many batches are in flight: 0, 1 or 2. */
int
esrc_kafka_batches_in_flight(EsrcKafka *k)
{
	return k == NULL ? 0 : k->nflight;
}

/*
 * Exactly once, one batch in flight: wait until Kafka has acknowledged
 * every record of it and its position record, serving delivery reports.
 * true when all were acknowledged: esrc_kafka_start() may then send the
 * next batch.  false when a report says a record failed, or when the
 * time budget of the batch's commit is spent (esrc_kafka_finish() sorts
 * that out).  May ereport(FATAL) on SIGTERM.
 */
bool
esrc_kafka_wait_acked(EsrcKafka *k)
{
	int			p;
	TxnSlot    *slot;
	int			i;

	if (!k->exactly_once || k->nflight != 1)
		return false;
	p = k->oldest;
	slot = &k->slots[p];
	if (!slot->waiting)
	{
		INSTR_TIME_SET_CURRENT(slot->wait_start);
		slot->waiting = true;
	}
	if (!drain_from(k->rks[p], slot->wait_start, COMMIT_BUDGET_MS))
		return false;
	if (slot->timing.acked == 0)
		slot->timing.acked = GetCurrentTimestamp();
	if (slot->nprod < slot->nrecs || !slot->position_acked)
		return false;
	for (i = 0; i < slot->nprod; i++)
		if (!slot->recs[i].skip && !slot->recs[i].acked)
			return false;
	return true;
}

/*
 * Exactly once: abort the transaction of the newest batch in flight, the
 * one esrc_kafka_start() sent after the batch still to be committed.  Its
 * records never become visible to read_committed consumers.  OK or FATAL
 * (then the caller drops the connection).
 */
EsrcKafkaStatus
esrc_kafka_abort_newest(EsrcKafka *k, char *err, size_t errlen)
{
	int			p = newest_slot(k);
	EsrcKafkaStatus status;

	Assert(k->exactly_once);
	status = abort_txn(k, p, err, errlen);
	slot_done(k, p);
	/* the slot before is still the oldest; the next batch takes p again */
	k->oldest = (p + k->nrk - k->nflight) % k->nrk;
	k->cur = p;
	return status;
}

/* Exactly once: commit the transaction of the oldest batch in flight. */
static EsrcKafkaStatus
finish_transactional(EsrcKafka *k, TxnSlot *slot, int p, int *ndone,
					 int *poison, char *err, size_t errlen)
{
	EsrcKafkaRecord *recs = slot->recs;
	rd_kafka_t *rk = k->rks[p];
	rd_kafka_error_t *error;
	EsrcKafkaStatus status;
	instr_time	start;

	if (slot->waiting)
		start = slot->wait_start;
	else
		INSTR_TIME_SET_CURRENT(start);

	/*
	 * First every delivery report, within the same budget as the commit:
	 * commit_transaction() would wait for them too (it flushes), but this
	 * way we know when Kafka had the records.
	 */
	if (drain_from(rk, start, COMMIT_BUDGET_MS) && slot->timing.acked == 0)
		slot->timing.acked = GetCurrentTimestamp();
	for (;;)
	{
		error = rd_kafka_commit_transaction(rk, SLICE_MS);
		if (error == NULL)
		{
			slot->timing.committed = GetCurrentTimestamp();
			*ndone = slot->last + 1;
			if (!drain(rk, COMMIT_BUDGET_MS))
				return ESRC_KAFKA_FATAL;
			if (slot->nprod < slot->nrecs)
			{
				strlcpy(err, slot->poison_err, errlen);
				*poison = slot->nprod;
				return ESRC_KAFKA_POISON;
			}
			return ESRC_KAFKA_OK;
		}
		switch (txn_error(error, "commit_transaction", err, errlen))
		{
			case TXN_RETRIABLE:
				if (kafka_elapsed_ms(start) < COMMIT_BUDGET_MS)
				{
					kafka_between_slices(start);
					continue;
				}
				/* give up; a new producer completes or aborts it */
				return ESRC_KAFKA_FATAL;
			case TXN_ABORTABLE:
				{
					char		txn_err[256];
					int			i;

					strlcpy(txn_err, err, sizeof(txn_err));
					status = abort_txn(k, p, err, errlen);
					if (status != ESRC_KAFKA_OK)
						return status;
					/* the broker refused a record: that one is the poison */
					i = first_poison(recs, slot->nprod);
					if (i >= 0)
					{
						record_error(&recs[i], "Kafka refused", err, errlen);
						*poison = i;
						*ndone = 0;
						return ESRC_KAFKA_POISON;
					}
					strlcpy(err, txn_err, errlen);
					return ESRC_KAFKA_RETRY;
				}
			case TXN_FATAL:
				return ESRC_KAFKA_FATAL;
		}
	}
}

/*
 * At least once: wait for every delivery report.  The records delivered
 * without a gap from the start count as done.
 */
static EsrcKafkaStatus
finish_idempotent(EsrcKafka *k, TxnSlot *slot, int p, int *ndone,
				  int *poison, char *err, size_t errlen)
{
	EsrcKafkaRecord *recs = slot->recs;
	int			i;

	/* message.timeout.ms bounds this; allow for its default of 300 s */
	if (!drain(k->rks[p], 330 * 1000))
	{
		snprintf(err, errlen, "delivery reports did not arrive in time");
		return ESRC_KAFKA_FATAL;
	}
	slot->timing.acked = slot->timing.committed = GetCurrentTimestamp();

	for (i = 0; i < slot->nprod; i++)
		if (!recs[i].skip && !recs[i].acked)
			break;
	*ndone = i;
	if (i > 0)					/* delivered: the position record may follow */
		kafka_position_delivered(k, p, recs[i - 1].position, recs[i - 1].id);
	if (i == slot->nrecs)
		return ESRC_KAFKA_OK;
	if (i == slot->nprod && slot->nprod < slot->nrecs)
	{
		strlcpy(err, slot->poison_err, errlen);
		*poison = i;
		return ESRC_KAFKA_POISON;
	}
	if (kafka_is_poison(recs[i].err))
	{
		record_error(&recs[i], "Kafka refused", err, errlen);
		*poison = i;
		return ESRC_KAFKA_POISON;
	}
	record_error(&recs[i], "cannot deliver", err, errlen);
	if (rd_kafka_fatal_error(k->rks[p], NULL, 0) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return ESRC_KAFKA_FATAL;
	return ESRC_KAFKA_RETRY;
}

/*
 * Finish the oldest batch in flight: commit its transaction (exactly
 * once) or collect its delivery reports (at least once).  Returns OK when
 * all its records are done.  Otherwise *ndone records from the start are
 * done (exactly once: committed together with the position of the last of
 * them), and with POISON, recs[*poison] (>= *ndone) is the record that
 * cannot be delivered.  err says what went wrong.
 *
 * When the result is not OK and a newer batch is in flight, that batch's
 * transaction is aborted here (rule 3 above): esrc_kafka_in_flight() is
 * then false, and the caller must send it again later.  If even the abort
 * fails, the result is FATAL.  May ereport(FATAL) on SIGTERM.
 */
EsrcKafkaStatus
esrc_kafka_finish(EsrcKafka *k, int *ndone, int *poison, char *err, size_t errlen)
{
	int			p = k->oldest;
	TxnSlot    *slot = &k->slots[p];
	EsrcKafkaStatus status;

	Assert(k->nflight > 0 && slot->in_flight);
	*ndone = 0;
	*poison = -1;
	err[0] = '\0';
	if (k->exactly_once)
		status = finish_transactional(k, slot, p, ndone, poison, err, errlen);
	else
		status = finish_idempotent(k, slot, p, ndone, poison, err, errlen);
	k->timing = slot->timing;
	slot_done(k, p);

	if (status != ESRC_KAFKA_OK && k->nflight > 0)
	{
		/* never commit a batch after one that did not commit whole */
		if (esrc_kafka_abort_newest(k, err, errlen) != ESRC_KAFKA_OK)
			status = ESRC_KAFKA_FATAL;
	}
	else if (status == ESRC_KAFKA_OK && k->exactly_once && k->nflight > 0)
	{
		/*
		 * The next transaction of this producer, ahead of time, while the
		 * newer batch is on its way (with none, esrc_kafka_start() does
		 * it after queueing the next batch).
		 */
		char		begin_err[256];

		begin_err[0] = '\0';
		if (begin_txn(k, p, begin_err, sizeof(begin_err)) != ESRC_KAFKA_OK)
			ereport(DEBUG1,
					(errmsg("esrc forwarder: %s", begin_err)));
	}
	esrc_kafka_emit_log();
	return status;
}

/* When the last batch finished passed each step. */
void
esrc_kafka_timing(EsrcKafka *k, EsrcKafkaTiming *timing)
{
	*timing = k->timing;
}
