/*-------------------------------------------------------------------------
 *
 * kafka.c
 *	  librdkafka glue for the forwarder: configuration, the producer, the
 *	  position record, topic creation and the delivery of one batch.
 *
 * forwarder.c decides what to send and when; this file knows how.  An
 * EsrcKafka handle owns one librdkafka producer (transactional in
 * exactly-once mode) and a cache of topic handles.
 *
 * Threads: librdkafka runs its own threads.  They never call into
 * PostgreSQL: log lines and errors go into a small ring buffer under a
 * pthread mutex (log_cb, error_cb), and delivery reports are served by
 * rd_kafka_poll()/flush() in the worker's own thread, where dr_cb writes
 * nothing but two fields of the record it reports on.  The worker turns
 * the ring buffer into ereport(LOG) with esrc_kafka_emit_log().  Every
 * client is created with all signals blocked (new_rk), so librdkafka's
 * threads, which inherit the mask, never run PostgreSQL's handlers.
 *
 * Waiting: every blocking librdkafka call gets a short timeout and is
 * repeated (the transactional calls are resumable), with
 * CHECK_FOR_INTERRUPTS() in between, so SIGTERM and postmaster death are
 * honoured within about a second.  Nothing here raises an ERROR for a
 * Kafka failure: the caller gets an EsrcKafkaStatus and a message.
 *
 * Exit: the handle being connected and the consumer of read_position()
 * are known to esrc_kafka_shutdown() from the moment they exist, so a
 * SIGTERM in any wait of connect (which ends the process from
 * CHECK_FOR_INTERRUPTS) still closes them.  Closing never flushes:
 * whatever is queued or in flight is purged first, so rd_kafka_destroy()
 * does not wait for a broker that does not answer.
 *
 * Secrets: esrc.kafka_properties may hold passwords.  Messages built here
 * name a property but never show its value.
 *
 * Exactly once: the position record (key = the forwarder's client id,
 * value = {"log_id":..,"database":..,"position":N}, real JSON, read back
 * with PostgreSQL's JSON parser) goes to the compacted offsets topic in the
 * same Kafka transaction as the records up to N.  At connect,
 * init_transactions() fences any earlier incarnation of the same client
 * id and completes or aborts its open transaction; then a read_committed
 * consumer reads the offsets topic to its end to learn N.  With a
 * backlog, two batches are in flight on the two producers (one being
 * committed, the next being sent); the rules that keep that exactly once
 * are at struct EsrcKafka.  See docs/forwarder.md for the failure
 * analysis.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <pthread.h>
#include <signal.h>

#include <librdkafka/rdkafka.h>

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"
#include "utils/hsearch.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "esrc.h"
#include "kafka.h"

/* Bounds of the waits (milliseconds). */
#define SLICE_MS			200		/* one blocking librdkafka call */
#define CONNECT_BUDGET_MS	8000	/* init_transactions, offsets topic */
#define POSITION_BUDGET_MS	90000	/* reading the offsets topic to its end */
#define METADATA_MS			5000
#define ADMIN_MS			10000
#define COMMIT_BUDGET_MS	15000	/* retriable commit/abort/flush errors */
#define QUEUE_FULL_BUDGET_MS 30000

#define MAX_TOPIC_NAME		249		/* Kafka's limit */
#define MAX_PRODUCERS		2

/*
 * Topic handles kept between batches.  A batch may use more (they are
 * evicted only between batches, esrc_kafka_trim_topics); a test build
 * lowers it (make ESRC_TOPIC_CACHE_SIZE=8, test/run-45-forward-topic-cache.sh).
 */
#ifndef ESRC_TOPIC_CACHE_SIZE
#define ESRC_TOPIC_CACHE_SIZE	1024
#endif

struct EsrcKafkaTopic
{
	char		name[MAX_TOPIC_NAME + 1];	/* hash key */
	rd_kafka_topic_t *rkt[MAX_PRODUCERS];	/* one per producer */
	bool		exists;			/* seen in metadata or created by us */
	bool		pinned;			/* used by a batch in flight (trim) */
};

/*
 * Exactly once uses two transactional producers in turn ("esrc-<log>-0"
 * and "-1"), one Kafka transaction per batch, and keeps up to two batches
 * in flight: the next batch's transaction (on the other producer) may
 * send its records while the previous one's commit (EndTxn) is under way
 * (forwarder.c does so only with a backlog).  Three rules keep that safe:
 *
 *   1. a batch's records are produced only after every record of the
 *      batch before it (and its position record) has been acknowledged
 *      by Kafka, so in every partition they come after them (the
 *      idempotent producer keeps the order within one producer; across
 *      the two producers this rule does);
 *   2. a batch's commit is requested only after the commit of the batch
 *      before it has returned successfully;
 *   3. when that commit fails in any way, the later batch is aborted
 *      (or, when even that fails, both producers are dropped: the next
 *      incarnation's init_transactions() aborts a transaction whose
 *      commit was never requested).
 *
 * So Kafka's committed records are always a prefix of the log in position
 * order, and the last committed position record is the largest one: what
 * a read_committed consumer sees is what a strictly sequential forwarder
 * would have committed.  Alternating the producers also keeps a new
 * transaction off a producer whose last transaction's markers the
 * coordinator is still writing (it would be refused with
 * CONCURRENT_TRANSACTIONS and retried by librdkafka 20 ms later).
 *
 * At least once uses one idempotent producer and one batch at a time.
 */

/*
 * One batch between esrc_kafka_start() and esrc_kafka_finish(), on one
 * producer (slot i belongs to producer i).
 */
typedef struct TxnSlot
{
	bool		in_flight;
	bool		begun;			/* exactly once: begin_transaction() done,
								 * nothing produced yet */
	uint32		gen;			/* delivery reports of this batch carry it */
	EsrcKafkaRecord *recs;
	int			nrecs;
	int			nprod;			/* records [0, nprod) were queued */
	int			last;			/* last index the position record covers */
	int			position_err;	/* report of the position record */
	bool		position_acked;
	char		poison_err[512];	/* why recs[nprod] was refused locally */
	instr_time	started;
	bool		waiting;		/* wait_start is set */
	instr_time	wait_start;		/* the commit's time budget counts from here */
	EsrcKafkaTiming timing;
} TxnSlot;

struct EsrcKafka
{
	rd_kafka_t *rks[MAX_PRODUCERS];
	int			nrk;
	int			cur;			/* producer of the next batch */
	int			oldest;			/* slot of the oldest batch in flight */
	int			nflight;		/* batches in flight: 0, 1 or 2 */
	bool		exactly_once;
	char	   *client_id;
	char	   *source;			/* ce_source */
	char	   *position_prefix;	/* value of the position record up to N */
	char	   *brokers;
	char	   *properties;
	rd_kafka_topic_t *offsets_rkts[MAX_PRODUCERS];
	HTAB	   *topics;
	MemoryContext cxt;
	TxnSlot		slots[MAX_PRODUCERS];
	EsrcKafkaTiming timing;		/* of the last batch finished */
};

/*
 * Delivery reports.  The opaque of each produced message is
 * (generation << 32) | index, the producer's opaque is its TxnSlot;
 * reports of another generation than the slot's (a batch given up on)
 * are ignored, so dr_cb never writes into freed memory.
 */
#define POSITION_INDEX	0xFFFFFFFFu

static uint32 dr_gen = 0;		/* last generation handed out */

/* The ring buffer of log lines from librdkafka threads. */
#define LOG_RING		1024
#define LOG_LINE		400

typedef struct LogLine
{
	int			level;			/* syslog level */
	bool		routine;		/* a connection failure: the status has it */
	char		text[LOG_LINE];
} LogLine;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static LogLine log_ring[LOG_RING];
static int	log_first = 0;
static int	log_count = 0;
static int	log_dropped = 0;
static char last_error[LOG_LINE];	/* latest error_cb text, under log_lock */
static int	log_max_level = 4;	/* 7 when esrc.kafka_properties sets debug */

EsrcKafkaWaitHook esrc_kafka_wait_hook = NULL;

/* time spent producing (queueing) and committing/draining, for DEBUG1 */
double		esrc_kafka_produce_ms = 0;
double		esrc_kafka_commit_ms = 0;

static void
log_push(int level, bool routine, const char *fmt,...)
pg_attribute_printf(3, 4);

static void
log_push(int level, bool routine, const char *fmt,...)
{
	va_list		ap;
	LogLine    *line;

	pthread_mutex_lock(&log_lock);
	if (log_count == LOG_RING)
		log_dropped++;
	else
	{
		line = &log_ring[(log_first + log_count) % LOG_RING];
		line->level = level;
		line->routine = routine;
		va_start(ap, fmt);
		vsnprintf(line->text, LOG_LINE, fmt, ap);
		va_end(ap);
		log_count++;
	}
	pthread_mutex_unlock(&log_lock);
}

/* librdkafka log_cb: any thread; no PostgreSQL calls. */
static void
log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	/*
	 * 0-4: emerg .. warning; 5+ is notice/info/debug.  The user's producer
	 * properties also go to the consumer that reads the position, which
	 * says it ignores them: not worth a log line.
	 */
	if (strcmp(fac, "CONFWARN") == 0 &&
		strstr(buf, "is a producer property and will be ignored") != NULL)
		return;
	if (level <= log_max_level)
		log_push(level,
				 strcmp(fac, "FAIL") == 0 || strcmp(fac, "GETPID") == 0 ||
				 strcmp(fac, "COORDERR") == 0,
				 "%s: %s", fac, buf);
}

/* librdkafka error_cb: served by rd_kafka_poll (our thread), but kept simple */
static void
error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	pthread_mutex_lock(&log_lock);
	snprintf(last_error, sizeof(last_error), "%s", reason);
	pthread_mutex_unlock(&log_lock);

	/* transport errors are reported in the status; log only the serious ones */
	if (err == RD_KAFKA_RESP_ERR__FATAL ||
		err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN ||
		err == RD_KAFKA_RESP_ERR__AUTHENTICATION ||
		err == RD_KAFKA_RESP_ERR__SSL)
		log_push(3, err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN,
				 "%s: %s", rd_kafka_err2name(err), reason);
}

/*
 * Delivery report callback: called from rd_kafka_poll/flush in our thread,
 * opaque is the producer's TxnSlot.
 */
static void
dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
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

/*
 * Write librdkafka's buffered log lines to the server log.  Worker thread
 * only; may ereport(LOG).
 */
void
esrc_kafka_emit_log(void)
{
	for (;;)
	{
		LogLine		line;
		int			dropped = 0;
		bool		have = false;

		pthread_mutex_lock(&log_lock);
		if (log_count > 0)
		{
			line = log_ring[log_first];
			log_first = (log_first + 1) % LOG_RING;
			log_count--;
			have = true;
		}
		else if (log_dropped > 0)
		{
			dropped = log_dropped;
			log_dropped = 0;
		}
		pthread_mutex_unlock(&log_lock);

		/*
		 * Connection failures repeat at every reconnect while Kafka is
		 * down; esrc.forwarder_status and our own warning report them.
		 */
		if (have)
			ereport(line.routine && log_max_level <= 4 ? DEBUG1 : LOG,
					(errmsg("esrc forwarder: librdkafka: %s", line.text)));
		else
		{
			if (dropped > 0)
				ereport(LOG,
						(errmsg("esrc forwarder: %d librdkafka log lines were dropped",
								dropped)));
			break;
		}
	}
}

const char *
esrc_kafka_version(void)
{
	return rd_kafka_version_str();
}

/* ----------------------------------------------------------------
 * Configuration
 * ----------------------------------------------------------------
 */

/*
 * Parse esrc.kafka_properties: "name=value" entries separated by ";",
 * whitespace around names and values ignored, "\;" and "\\" escape a
 * semicolon and a backslash in a value.  Calls cb for each entry; stops
 * when it returns false.  Returns 0 when all entries were accepted, 1 on
 * a syntax error (*errpos says what, statically allocated), 2 when the
 * callback refused an entry.  Works in the current memory context; never
 * ereports.
 */
int
esrc_kafka_parse_properties(const char *props,
							bool (*cb) (const char *name, const char *value, void *arg),
							void *arg, const char **errpos)
{
	size_t		len = strlen(props);
	char	   *buf = palloc(len + 1);
	const char *p = props;
	int			result = 0;

	*errpos = NULL;
	while (*p)
	{
		char	   *name;
		char	   *value;
		char	   *o = buf;
		char	   *eq = NULL;
		char	   *end;

		/* copy one entry, unescaping, and remember the first "=" */
		while (*p && *p != ';')
		{
			if (*p == '\\' && (p[1] == ';' || p[1] == '\\'))
				p++;
			else if (*p == '=' && eq == NULL)
				eq = o;
			*o++ = *p++;
		}
		*o = '\0';
		if (*p == ';')
			p++;

		/* skip empty entries (e.g. after a trailing ";") */
		name = buf;
		while (*name == ' ' || *name == '\t' || *name == '\n' || *name == '\r')
			name++;
		if (*name == '\0')
			continue;
		if (eq == NULL)
		{
			*errpos = "an entry has no \"=\"";
			result = 1;
			break;
		}
		*eq = '\0';
		value = eq + 1;
		end = eq;
		while (end > name && (end[-1] == ' ' || end[-1] == '\t' ||
							  end[-1] == '\n' || end[-1] == '\r'))
			*--end = '\0';
		while (*value == ' ' || *value == '\t' || *value == '\n' || *value == '\r')
			value++;
		end = value + strlen(value);
		while (end > value && (end[-1] == ' ' || end[-1] == '\t' ||
							   end[-1] == '\n' || end[-1] == '\r'))
			*--end = '\0';
		if (*name == '\0')
		{
			*errpos = "an entry has an empty property name";
			result = 1;
			break;
		}
		for (end = name; *end; end++)
		{
			if (!((*end >= 'a' && *end <= 'z') || (*end >= 'A' && *end <= 'Z') ||
				  (*end >= '0' && *end <= '9') || *end == '.' || *end == '_' ||
				  *end == '-'))
			{
				*errpos = "a property name contains a character other than letters, digits, \".\", \"_\" and \"-\"";
				result = 1;
				break;
			}
		}
		if (result != 0)
			break;
		if (!cb(name, value, arg))
		{
			result = 2;
			break;
		}
	}
	pfree(buf);
	return result;
}

/* Kafka topic names: 1-249 characters of [a-zA-Z0-9._-], not "." or "..". */
bool
esrc_kafka_valid_topic_name(const char *name)
{
	size_t		len = strlen(name);
	const char *c;

	if (len == 0 || len > MAX_TOPIC_NAME)
		return false;
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return false;
	for (c = name; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			  (*c >= '0' && *c <= '9') || *c == '.' || *c == '_' || *c == '-'))
			return false;
	return true;
}

typedef struct ConfArg
{
	rd_kafka_conf_t *conf;
	char	   *err;
	size_t		errlen;
} ConfArg;

static bool
conf_set_cb(const char *name, const char *value, void *arg)
{
	ConfArg    *a = (ConfArg *) arg;
	char		ignored[512];
	rd_kafka_conf_res_t res;

	/* librdkafka's debug contexts: pass their output to the server log */
	if (strcmp(name, "debug") == 0 && value[0] != '\0')
		log_max_level = 7;

	res = rd_kafka_conf_set(a->conf, name, value, ignored, sizeof(ignored));
	if (res == RD_KAFKA_CONF_OK)
		return true;
	/* never show the value: it may be a password */
	if (res == RD_KAFKA_CONF_UNKNOWN)
		snprintf(a->err, a->errlen,
				 "esrc.kafka_properties: librdkafka %s does not know property \"%s\"",
				 rd_kafka_version_str(), name);
	else
		snprintf(a->err, a->errlen,
				 "esrc.kafka_properties: librdkafka refuses the value of property \"%s\"",
				 name);
	return false;
}

static bool
conf_set(rd_kafka_conf_t *conf, const char *name, const char *value,
		 char *err, size_t errlen)
{
	char		errstr[512];

	if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) == RD_KAFKA_CONF_OK)
		return true;
	snprintf(err, errlen, "cannot set librdkafka property \"%s\": %s", name, errstr);
	return false;
}

typedef enum ConfKind
{
	CONF_PRODUCER,
	CONF_CONSUMER
} ConfKind;

/*
 * A librdkafka configuration: our defaults, then the user's properties,
 * then what the forwarder's guarantees depend on (esrc.kafka_properties
 * cannot change those: fwdconf.c's check hook refuses them).  NULL and
 * a message on failure.
 */
static rd_kafka_conf_t *
build_conf(EsrcKafka *k, ConfKind kind, char *err, size_t errlen)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	const char *errpos;
	ConfArg		arg;
	char		txn_id[128];

	log_max_level = 4;

	if (!conf_set(conf, "bootstrap.servers", k->brokers, err, errlen) ||
		!conf_set(conf, "client.id", "esrc-forwarder", err, errlen) ||
		!conf_set(conf, "log.queue", "true", err, errlen) ||
		!conf_set(conf, "socket.nagle.disable", "true", err, errlen))
		goto fail;
	if (kind == CONF_PRODUCER)
	{
		/* defaults the user may change */
		if (!conf_set(conf, "linger.ms", "1", err, errlen) ||
			!conf_set(conf, "retry.backoff.ms", "20", err, errlen) ||
			!conf_set(conf, "queue.buffering.max.messages", "1000000", err, errlen))
			goto fail;
	}

	arg.conf = conf;
	arg.err = err;
	arg.errlen = errlen;
	switch (esrc_kafka_parse_properties(k->properties, conf_set_cb, &arg, &errpos))
	{
		case 0:
			break;
		case 1:
			snprintf(err, errlen, "esrc.kafka_properties: %s", errpos);
			goto fail;
		default:
			goto fail;
	}

	if (kind == CONF_PRODUCER)
	{
		if (!conf_set(conf, "enable.idempotence", "true", err, errlen) ||
			!conf_set(conf, "acks", "all", err, errlen) ||
			!conf_set(conf, "partitioner", "murmur2_random", err, errlen) ||
			!conf_set(conf, "allow.auto.create.topics", "false", err, errlen))
			goto fail;
		snprintf(txn_id, sizeof(txn_id), "%s-%d", k->client_id, k->nrk);
		if (k->exactly_once &&
			!conf_set(conf, "transactional.id", txn_id, err, errlen))
			goto fail;
		rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
		rd_kafka_conf_set_opaque(conf, &k->slots[k->nrk]);
	}
	else
	{
		if (!conf_set(conf, "isolation.level", "read_committed", err, errlen) ||
			!conf_set(conf, "enable.partition.eof", "true", err, errlen) ||
			!conf_set(conf, "enable.auto.commit", "false", err, errlen) ||
			!conf_set(conf, "enable.auto.offset.store", "false", err, errlen) ||
			!conf_set(conf, "group.id", k->client_id, err, errlen))
			goto fail;
	}
	rd_kafka_conf_set_log_cb(conf, log_cb);
	rd_kafka_conf_set_error_cb(conf, error_cb);
	return conf;

fail:
	rd_kafka_conf_destroy(conf);
	return NULL;
}

/* ----------------------------------------------------------------
 * Waiting
 * ----------------------------------------------------------------
 */

static int64
elapsed_ms(instr_time start)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, start);
	return (int64) INSTR_TIME_GET_MILLISEC(now);
}

/*
 * Between two slices of a blocking wait that began at start: honour
 * SIGTERM and postmaster death, and tell the worker how long we have been
 * waiting.  May ereport(FATAL).
 */
static void
between_slices(instr_time start)
{
	CHECK_FOR_INTERRUPTS();
	if (!PostmasterIsAlive())
		proc_exit(1);
	if (esrc_kafka_wait_hook != NULL)
	{
		char		errcopy[LOG_LINE];

		pthread_mutex_lock(&log_lock);
		strlcpy(errcopy, last_error, sizeof(errcopy));
		pthread_mutex_unlock(&log_lock);
		esrc_kafka_wait_hook(elapsed_ms(start), errcopy);
	}
}

/* Forget librdkafka's latest error, before an operation. */
static void
clear_last_error(void)
{
	pthread_mutex_lock(&log_lock);
	last_error[0] = '\0';
	pthread_mutex_unlock(&log_lock);
}

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
 * Topics
 * ----------------------------------------------------------------
 */

/* Errors after which a record or topic can never succeed as it is. */
static bool
is_poison(rd_kafka_resp_err_t e)
{
	switch (e)
	{
		case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
		case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
		case RD_KAFKA_RESP_ERR_INVALID_RECORD:
		case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
		case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
		case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
		case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
		case RD_KAFKA_RESP_ERR_INVALID_PARTITIONS:
		case RD_KAFKA_RESP_ERR_INVALID_REPLICATION_FACTOR:
		case RD_KAFKA_RESP_ERR_INVALID_CONFIG:
		case RD_KAFKA_RESP_ERR_INVALID_REQUEST:
		case RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT:
			return true;
		default:
			return false;
	}
}

/*
 * CreateTopics for one topic: partitions and replication factor -1 mean
 * the broker's defaults.  "Already exists" is success.
 */
static EsrcKafkaStatus
create_topic(EsrcKafka *k, const char *name, int partitions, bool compacted,
			 char *err, size_t errlen)
{
	char		errstr[512];
	rd_kafka_NewTopic_t *nt;
	rd_kafka_AdminOptions_t *opts;
	rd_kafka_queue_t *q;
	rd_kafka_event_t *ev = NULL;
	EsrcKafkaStatus status = ESRC_KAFKA_OK;
	instr_time	start;

	nt = rd_kafka_NewTopic_new(name, partitions, -1, errstr, sizeof(errstr));
	if (nt == NULL)
	{
		snprintf(err, errlen, "cannot create topic \"%s\": %s", name, errstr);
		return ESRC_KAFKA_POISON;
	}
	if (compacted)
	{
		/*
		 * One record per transaction, read from the start at every connect:
		 * small segments that roll hourly keep the uncompacted tail short.
		 */
		rd_kafka_NewTopic_set_config(nt, "cleanup.policy", "compact");
		rd_kafka_NewTopic_set_config(nt, "segment.bytes", "16777216");
		rd_kafka_NewTopic_set_config(nt, "segment.ms", "3600000");
		rd_kafka_NewTopic_set_config(nt, "min.cleanable.dirty.ratio", "0.1");
	}

	opts = rd_kafka_AdminOptions_new(k->rks[0], RD_KAFKA_ADMIN_OP_CREATETOPICS);
	rd_kafka_AdminOptions_set_request_timeout(opts, ADMIN_MS, errstr, sizeof(errstr));
	rd_kafka_AdminOptions_set_operation_timeout(opts, ADMIN_MS, errstr, sizeof(errstr));
	q = rd_kafka_queue_new(k->rks[0]);
	rd_kafka_CreateTopics(k->rks[0], &nt, 1, opts, q);

	INSTR_TIME_SET_CURRENT(start);
	while (ev == NULL)
	{
		ev = rd_kafka_queue_poll(q, SLICE_MS);
		if (ev == NULL)
		{
			if (elapsed_ms(start) > ADMIN_MS + 5000)
				break;
			between_slices(start);
		}
	}

	if (ev == NULL)
	{
		snprintf(err, errlen, "cannot create topic \"%s\": no answer from Kafka", name);
		status = ESRC_KAFKA_RETRY;
	}
	else if (rd_kafka_event_error(ev))
	{
		rd_kafka_resp_err_t e = rd_kafka_event_error(ev);

		snprintf(err, errlen, "cannot create topic \"%s\": %s", name,
				 rd_kafka_event_error_string(ev));
		status = is_poison(e) ? ESRC_KAFKA_POISON : ESRC_KAFKA_RETRY;
	}
	else
	{
		const rd_kafka_CreateTopics_result_t *res = rd_kafka_event_CreateTopics_result(ev);
		size_t		n;
		const rd_kafka_topic_result_t **tr = rd_kafka_CreateTopics_result_topics(res, &n);
		rd_kafka_resp_err_t e = n == 1 ? rd_kafka_topic_result_error(tr[0]) :
		RD_KAFKA_RESP_ERR__FAIL;

		if (e != RD_KAFKA_RESP_ERR_NO_ERROR &&
			e != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
		{
			const char *msg = n == 1 ? rd_kafka_topic_result_error_string(tr[0]) : NULL;

			snprintf(err, errlen, "cannot create topic \"%s\": %s", name,
					 msg ? msg : rd_kafka_err2str(e));
			/* a timeout or a missing controller is transient */
			status = (e == RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT ||
					  e == RD_KAFKA_RESP_ERR__TIMED_OUT ||
					  e == RD_KAFKA_RESP_ERR_NOT_CONTROLLER ||
					  e == RD_KAFKA_RESP_ERR__TRANSPORT) ?
				ESRC_KAFKA_RETRY : ESRC_KAFKA_POISON;
		}
	}
	if (ev)
		rd_kafka_event_destroy(ev);
	rd_kafka_queue_destroy(q);
	rd_kafka_AdminOptions_destroy(opts);
	rd_kafka_NewTopic_destroy(nt);
	return status;
}

/*
 * Does the topic exist?  OK with *partitions set, POISON when it does not
 * exist (*missing) or may not be used, RETRY when Kafka does not answer.
 */
static EsrcKafkaStatus
topic_metadata(EsrcKafka *k, rd_kafka_t *rk, rd_kafka_topic_t *rkt,
			   const char *name, int *partitions, bool *missing,
			   char *err, size_t errlen)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t e;
	instr_time	start;
	EsrcKafkaStatus status;

	*missing = false;
	INSTR_TIME_SET_CURRENT(start);
	for (;;)
	{
		e = rd_kafka_metadata(rk, 0, rkt, &md, 1000);
		if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
			break;
		if (elapsed_ms(start) > METADATA_MS)
		{
			snprintf(err, errlen, "cannot get metadata of topic \"%s\": %s",
					 name, rd_kafka_err2str(e));
			return ESRC_KAFKA_RETRY;
		}
		between_slices(start);
	}

	if (md->topic_cnt != 1)
	{
		snprintf(err, errlen, "metadata of topic \"%s\" is missing", name);
		status = ESRC_KAFKA_RETRY;
	}
	else if (md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
			 md->topics[0].partition_cnt > 0)
	{
		*partitions = md->topics[0].partition_cnt;
		status = ESRC_KAFKA_OK;
	}
	else if (md->topics[0].err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
			 md->topics[0].err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
			 md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		*missing = true;
		snprintf(err, errlen, "topic \"%s\" does not exist", name);
		status = ESRC_KAFKA_POISON;
	}
	else
	{
		snprintf(err, errlen, "cannot use topic \"%s\": %s", name,
				 rd_kafka_err2str(md->topics[0].err));
		status = is_poison(md->topics[0].err) ? ESRC_KAFKA_POISON : ESRC_KAFKA_RETRY;
	}
	rd_kafka_metadata_destroy(md);
	return status;
}

static void
topic_destroy(EsrcKafka *k, EsrcKafkaTopic *t)
{
	int			i;

	for (i = 0; i < k->nrk; i++)
		if (t->rkt[i] != NULL)
			rd_kafka_topic_destroy(t->rkt[i]);
}

/*
 * Make sure a topic exists, creating it with the broker's default
 * partition count and replication factor, and return its cached handle.
 * POISON means the topic can never be used as configured (invalid name,
 * refused by the broker's policy or ACLs).
 */
EsrcKafkaStatus
esrc_kafka_topic(EsrcKafka *k, const char *name, EsrcKafkaTopic **topic,
				 char *err, size_t errlen)
{
	EsrcKafkaTopic *t;
	bool		found;
	char		key[MAX_TOPIC_NAME + 1];
	int			partitions;
	bool		missing;
	EsrcKafkaStatus status;
	int			i;

	*topic = NULL;
	if (!esrc_kafka_valid_topic_name(name))
	{
		snprintf(err, errlen,
				 "topic name \"%.*s\" is not valid in Kafka (1 to 249 of the characters a-z, A-Z, 0-9, \".\", \"_\", \"-\")",
				 MAX_TOPIC_NAME + 1, name);
		return ESRC_KAFKA_POISON;
	}
	memset(key, 0, sizeof(key));
	strlcpy(key, name, sizeof(key));

	t = hash_search(k->topics, key, HASH_FIND, NULL);
	if (t != NULL && t->exists)
	{
		*topic = t;
		return ESRC_KAFKA_OK;
	}
	if (t == NULL)
	{
		/*
		 * Never evict here: records resolved earlier in this pass point at
		 * the cached entries (esrc_kafka_trim_topics does it between
		 * batches).
		 */
		t = hash_search(k->topics, key, HASH_ENTER, &found);
		t->exists = false;
		t->pinned = false;
		for (i = 0; i < k->nrk; i++)
		{
			t->rkt[i] = rd_kafka_topic_new(k->rks[i], name, NULL);
			if (t->rkt[i] == NULL)
			{
				snprintf(err, errlen, "cannot use topic \"%s\": %s", name,
						 rd_kafka_err2str(rd_kafka_last_error()));
				topic_destroy(k, t);
				hash_search(k->topics, key, HASH_REMOVE, NULL);
				return ESRC_KAFKA_POISON;
			}
		}
	}

	status = topic_metadata(k, k->rks[0], t->rkt[0], name, &partitions, &missing, err, errlen);
	if (status == ESRC_KAFKA_POISON && missing)
	{
		status = create_topic(k, name, -1, false, err, errlen);
		if (status == ESRC_KAFKA_OK)
			ereport(LOG,
					(errmsg("esrc forwarder: created Kafka topic \"%s\"", name)));
	}
	if (status != ESRC_KAFKA_OK)
		return status;
	t->exists = true;
	*topic = t;
	return ESRC_KAFKA_OK;
}

/*
 * Keep the topic cache bounded: when it holds more than
 * ESRC_TOPIC_CACHE_SIZE handles, drop every handle that no batch in flight
 * uses.  Called before the topics of a batch are resolved (forwarder.c,
 * resolve_topics), which is the only time no record outside the batches
 * in flight points at an entry: a record's topic is a pointer to its
 * entry, so evicting during a pass (what this did before 0.2.0, on the
 * 1,025th topic) sent records resolved earlier in the pass to the topic
 * that took over their entry, or through a destroyed handle.
 */
void
esrc_kafka_trim_topics(EsrcKafka *k)
{
	HASH_SEQ_STATUS seq;
	EsrcKafkaTopic *t;
	int			p;
	int			i;

	if (k == NULL || hash_get_num_entries(k->topics) <= ESRC_TOPIC_CACHE_SIZE)
		return;
	hash_seq_init(&seq, k->topics);
	while ((t = hash_seq_search(&seq)) != NULL)
		t->pinned = false;
	for (p = 0; p < MAX_PRODUCERS; p++)
	{
		TxnSlot    *slot = &k->slots[p];

		if (!slot->in_flight || slot->recs == NULL)
			continue;
		for (i = 0; i < slot->nrecs; i++)
			if (slot->recs[i].topic != NULL)
				slot->recs[i].topic->pinned = true;
	}
	hash_seq_init(&seq, k->topics);
	while ((t = hash_seq_search(&seq)) != NULL)
	{
		if (t->pinned)
			continue;
		topic_destroy(k, t);
		/* dynahash allows removing the entry just returned */
		hash_search(k->topics, t->name, HASH_REMOVE, NULL);
	}
}

/* ----------------------------------------------------------------
 * Connecting
 * ----------------------------------------------------------------
 */

static EsrcKafkaStatus begin_txn(EsrcKafka *k, int p, char *err, size_t errlen);

/*
 * The clients of this process that esrc_kafka_shutdown() closes at exit:
 * the handle being connected or in use (one at a time) and the consumer
 * of read_position() while it exists.
 */
static EsrcKafka *live_handle = NULL;
static bool live_connecting = false;	/* live_handle is in connect */
static rd_kafka_t *live_consumer = NULL;

/*
 * rd_kafka_new with every signal blocked: the threads it starts inherit
 * the mask (and later ones are started by those threads), so no signal
 * meant for the worker lands on a librdkafka thread and runs one of
 * PostgreSQL's handlers there.  Signals that arrive meanwhile stay
 * pending and are handled when the mask is restored.
 */
static rd_kafka_t *
new_rk(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *errstr, size_t errlen)
{
	sigset_t	all;
	sigset_t	old;
	rd_kafka_t *rk;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rk = rd_kafka_new(type, conf, errstr, errlen);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rk;
}

static void
destroy_consumer(rd_kafka_t *rk)
{
	if (rk == live_consumer)
		live_consumer = NULL;
	rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
}

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
	if (k == live_handle)
	{
		live_handle = NULL;
		live_connecting = false;
	}
	/* reports of what is still queued must not reach a batch */
	for (i = 0; i < MAX_PRODUCERS; i++)
	{
		k->slots[i].in_flight = false;
		k->slots[i].recs = NULL;
	}

	hash_seq_init(&seq, k->topics);
	while ((t = hash_seq_search(&seq)) != NULL)
		topic_destroy(k, t);
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
	if (live_connecting && live_handle != NULL)
		ereport(LOG,
				(errmsg("esrc forwarder: closing the Kafka clients of an interrupted connect")));
	if (live_consumer != NULL)
		destroy_consumer(live_consumer);
	if (live_handle != NULL)
		esrc_kafka_destroy(live_handle);
}

/*
 * Reading a position record's value: {"log_id":..,"database":..,
 * "position":N} as written by produce_position().  Only the top-level
 * member "position" counts, and it must be there once, as an integer.
 */
typedef struct PositionParse
{
	int			depth;			/* of objects and arrays */
	bool		want;			/* the next value is the top "position" */
	int			found;
	bool		bad;
	int64		position;
} PositionParse;

static ESRC_JSON_ACTION
pp_nest_start(void *state)
{
	PositionParse *pp = (PositionParse *) state;

	if (pp->want)
		pp->bad = true;			/* "position" is not a number */
	pp->want = false;
	pp->depth++;
	ESRC_JSON_DONE;
}

static ESRC_JSON_ACTION
pp_nest_end(void *state)
{
	((PositionParse *) state)->depth--;
	ESRC_JSON_DONE;
}

static ESRC_JSON_ACTION
pp_field(void *state, char *fname, bool isnull)
{
	PositionParse *pp = (PositionParse *) state;

	pp->want = (pp->depth == 1 && strcmp(fname, "position") == 0);
	pfree(fname);				/* ours (jsonapi.h) */
	ESRC_JSON_DONE;
}

static ESRC_JSON_ACTION
pp_scalar(void *state, char *token, JsonTokenType tokentype)
{
	PositionParse *pp = (PositionParse *) state;
	const char *c;
	char	   *end;
	long long	v;

	if (!pp->want)
	{
		if (token)
			pfree(token);
		ESRC_JSON_DONE;
	}
	pp->want = false;
	pp->found++;
	for (c = token; *c; c++)
		if (*c < '0' || *c > '9')
			break;
	errno = 0;
	v = strtoll(token, &end, 10);
	if (tokentype != JSON_TOKEN_NUMBER || *c != '\0' || c == token ||
		errno != 0 || *end != '\0')
		pp->bad = true;
	else
		pp->position = (int64) v;
	if (token)
		pfree(token);
	ESRC_JSON_DONE;
}

/*
 * The position of a position record's value; -1 when it has none.  Frees
 * what it allocates: read_position() reads every record of the topic.
 */
static int64
parse_position(const char *value, size_t len)
{
	char	   *copy;
	JsonLexContext *lex;
	JsonSemAction sem;
	PositionParse pp;
	JsonParseErrorType rc;

	if (len > 4096)
		return -1;
	copy = palloc(len + 1);
	memcpy(copy, value, len);
	copy[len] = '\0';
	memset(&pp, 0, sizeof(pp));
	memset(&sem, 0, sizeof(sem));
	sem.semstate = &pp;
	sem.object_start = pp_nest_start;
	sem.object_end = pp_nest_end;
	sem.array_start = pp_nest_start;
	sem.array_end = pp_nest_end;
	sem.object_field_start = pp_field;
	sem.scalar = pp_scalar;
	lex = esrc_json_lexer(copy, (int) len);
	rc = pg_parse_json(lex, &sem);
	esrc_json_lexer_free(lex);
	pfree(copy);
	if (rc != JSON_SUCCESS || pp.bad || pp.found != 1)
		return -1;
	return pp.position;
}

/*
 * Exactly once: read the offsets topic with a read_committed consumer up
 * to its end and return the last position recorded under our client id
 * (0 when there is none).  "The end" must include every transaction that
 * was open when we started: init_transactions() has completed ours, but
 * an open transaction of another producer on the topic holds back what a
 * read_committed consumer sees (its last stable offset).  So we read on
 * until we have passed the high watermark seen at the first end of
 * partition, not just to the first end of partition.
 */
static EsrcKafkaStatus
read_position(EsrcKafka *k, const char *offsets_topic, int64 *position,
			  char *err, size_t errlen)
{
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	rd_kafka_topic_t *rkt;
	rd_kafka_topic_partition_list_t *parts;
	char		errstr[512];
	int			npart = 0;
	int			ndone = 0;
	int64	   *target;
	bool	   *done;
	bool		missing;
	EsrcKafkaStatus status;
	instr_time	start;
	size_t		keylen = strlen(k->client_id);
	int			i;
	int64		found = 0;
	int64		nrecords = 0;

	conf = build_conf(k, CONF_CONSUMER, err, errlen);
	if (conf == NULL)
		return ESRC_KAFKA_CONFIG;
	rk = new_rk(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (rk == NULL)
	{
		rd_kafka_conf_destroy(conf);
		snprintf(err, errlen, "cannot create the Kafka consumer: %s", errstr);
		return ESRC_KAFKA_CONFIG;
	}
	live_consumer = rk;
	rd_kafka_poll_set_consumer(rk);
	rd_kafka_set_log_queue(rk, NULL);

	rkt = rd_kafka_topic_new(rk, offsets_topic, NULL);
	status = topic_metadata(k, rk, rkt, offsets_topic, &npart, &missing, err, errlen);
	rd_kafka_topic_destroy(rkt);
	if (status != ESRC_KAFKA_OK)
	{
		destroy_consumer(rk);
		return status == ESRC_KAFKA_POISON && !missing ? ESRC_KAFKA_FATAL : ESRC_KAFKA_RETRY;
	}

	parts = rd_kafka_topic_partition_list_new(npart);
	for (i = 0; i < npart; i++)
		rd_kafka_topic_partition_list_add(parts, offsets_topic, i)->offset =
			RD_KAFKA_OFFSET_BEGINNING;
	if (rd_kafka_assign(rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		rd_kafka_topic_partition_list_destroy(parts);
		destroy_consumer(rk);
		snprintf(err, errlen, "cannot assign the partitions of topic \"%s\"", offsets_topic);
		return ESRC_KAFKA_RETRY;
	}

	target = palloc(sizeof(int64) * npart);
	done = palloc0(sizeof(bool) * npart);
	for (i = 0; i < npart; i++)
		target[i] = -1;

	INSTR_TIME_SET_CURRENT(start);
	status = ESRC_KAFKA_OK;
	while (ndone < npart)
	{
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, SLICE_MS);

		if (m == NULL)
		{
			if (elapsed_ms(start) > POSITION_BUDGET_MS)
			{
				snprintf(err, errlen,
						 "could not read topic \"%s\" to its end within %d s",
						 offsets_topic, POSITION_BUDGET_MS / 1000);
				status = ESRC_KAFKA_RETRY;
				break;
			}
			/* after an end of partition short of the target, look again */
			for (i = 0; i < npart; i++)
			{
				rd_kafka_topic_partition_list_t *pos;

				if (done[i] || target[i] < 0)
					continue;
				pos = rd_kafka_topic_partition_list_new(1);
				rd_kafka_topic_partition_list_add(pos, offsets_topic, i);
				if (rd_kafka_position(rk, pos) == RD_KAFKA_RESP_ERR_NO_ERROR &&
					pos->elems[0].offset >= target[i])
				{
					done[i] = true;
					ndone++;
				}
				rd_kafka_topic_partition_list_destroy(pos);
			}
			between_slices(start);
			continue;
		}
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
		{
			int			p = m->partition;

			if (p >= 0 && p < npart && !done[p])
			{
				int64_t		low,
							high;

				if (target[p] < 0 &&
					rd_kafka_get_watermark_offsets(rk, offsets_topic, p, &low, &high) ==
					RD_KAFKA_RESP_ERR_NO_ERROR)
					target[p] = high;
				if (target[p] < 0 || m->offset >= target[p])
				{
					done[p] = true;
					ndone++;
				}
			}
		}
		else if (m->err)
		{
			/* transient consumer errors are retried by librdkafka */
			if (m->err == RD_KAFKA_RESP_ERR__FATAL ||
				m->err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
				m->err == RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED)
			{
				snprintf(err, errlen, "cannot read topic \"%s\": %s",
						 offsets_topic, rd_kafka_message_errstr(m));
				status = ESRC_KAFKA_FATAL;
				rd_kafka_message_destroy(m);
				break;
			}
		}
		else
		{
			nrecords++;
			if (m->key_len == keylen && memcmp(m->key, k->client_id, keylen) == 0 &&
				m->payload != NULL)
			{
				int64		v = parse_position((const char *) m->payload, m->len);

				if (v >= 0)
					found = v;
			}
		}
		rd_kafka_message_destroy(m);
	}

	rd_kafka_topic_partition_list_destroy(parts);
	destroy_consumer(rk);
	pfree(target);
	pfree(done);
	esrc_kafka_emit_log();
	if (status == ESRC_KAFKA_OK)
	{
		*position = found;
		ereport(DEBUG1,
				(errmsg("esrc forwarder: read " INT64_FORMAT " records of topic \"%s\" in " INT64_FORMAT " ms",
						nrecords, offsets_topic, elapsed_ms(start))));
	}
	return status;
}

/*
 * Create the producer and, in exactly-once mode, initialize transactions
 * (fencing earlier incarnations) and read the last committed position
 * from the offsets topic into *position (unchanged in at-least-once
 * mode).  NULL with *status and err set on failure.  May ereport(FATAL)
 * on SIGTERM.
 */
EsrcKafka *
esrc_kafka_connect(const EsrcKafkaSettings *s, int64 *position,
				   EsrcKafkaStatus *status, char *err, size_t errlen)
{
	MemoryContext cxt;
	MemoryContext old;
	EsrcKafka  *k;
	rd_kafka_conf_t *conf;
	char		errstr[512];
	HASHCTL		hctl;

	cxt = AllocSetContextCreate(TopMemoryContext, "esrc kafka", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	k = palloc0(sizeof(EsrcKafka));
	k->cxt = cxt;
	k->exactly_once = s->exactly_once;
	k->client_id = pstrdup(s->client_id);
	k->source = pstrdup(s->source);
	k->brokers = pstrdup(s->brokers);
	k->properties = pstrdup(s->properties);
	{
		StringInfoData v;

		initStringInfo(&v);
		appendStringInfoString(&v, "{\"log_id\":");
		escape_json(&v, s->log_id);
		appendStringInfoString(&v, ",\"database\":");
		escape_json(&v, s->database);
		appendStringInfoString(&v, ",\"position\":");
		k->position_prefix = v.data;
	}
	memset(&hctl, 0, sizeof(hctl));
	hctl.keysize = MAX_TOPIC_NAME + 1;
	hctl.entrysize = sizeof(EsrcKafkaTopic);
	hctl.hcxt = cxt;
	k->topics = hash_create("esrc kafka topics", 64, &hctl,
							HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	MemoryContextSwitchTo(old);

	/* from here on a SIGTERM in any wait still closes what k holds */
	Assert(live_handle == NULL);
	live_handle = k;
	live_connecting = true;

	clear_last_error();
	while (k->nrk < (s->exactly_once ? MAX_PRODUCERS : 1))
	{
		rd_kafka_t *rk;

		conf = build_conf(k, CONF_PRODUCER, err, errlen);
		if (conf == NULL)
		{
			*status = ESRC_KAFKA_CONFIG;
			goto fail;
		}
		rk = new_rk(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
		if (rk == NULL)
		{
			rd_kafka_conf_destroy(conf);
			snprintf(err, errlen, "cannot create the Kafka producer: %s", errstr);
			*status = ESRC_KAFKA_CONFIG;
			goto fail;
		}
		rd_kafka_set_log_queue(rk, NULL);
		k->rks[k->nrk++] = rk;
	}
	k->cur = 0;

	if (s->exactly_once)
	{
		instr_time	start;
		int			partitions;
		bool		missing;
		int			i;

		/*
		 * Fence earlier incarnations of both producers before reading the
		 * position: after this no older transaction can still commit.
		 */
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
					if (elapsed_ms(start) < CONNECT_BUDGET_MS)
					{
						between_slices(start);
						continue;
					}
					*status = ESRC_KAFKA_RETRY;
					break;
				default:
					*status = ESRC_KAFKA_FATAL;
					break;
			}
			goto fail;
		}

		for (i = 0; i < k->nrk; i++)
			k->offsets_rkts[i] = rd_kafka_topic_new(k->rks[i], s->offsets_topic, NULL);
		*status = topic_metadata(k, k->rks[0], k->offsets_rkts[0], s->offsets_topic,
								 &partitions, &missing, err, errlen);
		if (*status == ESRC_KAFKA_POISON && missing)
		{
			*status = create_topic(k, s->offsets_topic, 1, true, err, errlen);
			if (*status == ESRC_KAFKA_OK)
				ereport(LOG,
						(errmsg("esrc forwarder: created compacted Kafka topic \"%s\" for the forwarding position",
								s->offsets_topic)));
		}
		if (*status == ESRC_KAFKA_POISON)
			*status = ESRC_KAFKA_FATAL;
		if (*status != ESRC_KAFKA_OK)
			goto fail;

		*status = read_position(k, s->offsets_topic, position, err, errlen);
		if (*status != ESRC_KAFKA_OK)
			goto fail;

		/* the first transaction of each producer, ahead of time */
		for (i = 0; i < k->nrk; i++)
		{
			*status = begin_txn(k, i, err, errlen);
			if (*status != ESRC_KAFKA_OK)
				goto fail;
		}
	}
	else
	{
		/* check that Kafka answers at all, so that "connected" means it */
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
				break;
			}
			if (elapsed_ms(start) >= CONNECT_BUDGET_MS)
			{
				snprintf(err, errlen, "cannot reach Kafka at %s: %s", s->brokers,
						 rd_kafka_err2str(e));
				*status = ESRC_KAFKA_RETRY;
				goto fail;
			}
			between_slices(start);
		}
	}

	esrc_kafka_emit_log();
	live_connecting = false;
	*status = ESRC_KAFKA_OK;
	return k;

fail:
	esrc_kafka_destroy(k);
	return NULL;
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
 * Produce one record on producer p (a copy: librdkafka owns the bytes
 * afterwards).  On a full local queue, serve delivery reports and try
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
		h = rd_kafka_headers_new(12);
		rd_kafka_header_add(h, "ce_specversion", -1, "1.0", 3);
		rd_kafka_header_add(h, "ce_id", -1, r->id, -1);
		rd_kafka_header_add(h, "ce_source", -1, k->source, -1);
		rd_kafka_header_add(h, "ce_type", -1, r->type, -1);
		rd_kafka_header_add(h, "ce_subject", -1, r->stream, r->stream_len);
		rd_kafka_header_add(h, "ce_time", -1, r->time, -1);
		rd_kafka_header_add(h, "content-type", -1, "application/json", -1);
		rd_kafka_header_add(h, "ce_esrcstream", -1, r->stream, r->stream_len);
		rd_kafka_header_add(h, "ce_esrcversion", -1, version, -1);
		rd_kafka_header_add(h, "ce_esrcposition", -1, position, -1);
		if (r->metadata != NULL)
			rd_kafka_header_add(h, "ce_esrcmetadata", -1, r->metadata, -1);

		e = rd_kafka_producev(rk,
							  RD_KAFKA_V_RKT(r->topic->rkt[p]),
							  RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
							  RD_KAFKA_V_KEY(r->stream, r->stream_len),
							  RD_KAFKA_V_VALUE(r->data, r->data_len),
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
		else if (elapsed_ms(start) > QUEUE_FULL_BUDGET_MS)
			return e;
		rd_kafka_poll(rk, 10);
		between_slices(start);
	}
}

/* The position record of exactly-once mode, on producer p. */
static rd_kafka_resp_err_t
produce_position(EsrcKafka *k, int p, int64 position)
{
	char	   *value = psprintf("%s" INT64_FORMAT "}", k->position_prefix, position);
	rd_kafka_resp_err_t e;

	e = rd_kafka_producev(k->rks[p],
						  RD_KAFKA_V_RKT(k->offsets_rkts[p]),
						  RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
						  RD_KAFKA_V_KEY(k->client_id, strlen(k->client_id)),
						  RD_KAFKA_V_VALUE(value, strlen(value)),
						  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
						  RD_KAFKA_V_OPAQUE((void *) (uintptr_t) (((uint64) k->slots[p].gen << 32) | POSITION_INDEX)),
						  RD_KAFKA_V_HEADER("content-type", "application/json", -1),
						  RD_KAFKA_V_END);
	pfree(value);
	return e;
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
		if (elapsed_ms(start) > budget_ms)
			return false;
		rd_kafka_flush(rk, SLICE_MS);
		between_slices(start);
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
		if (!recs[i].skip && !recs[i].acked && is_poison(recs[i].err))
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
			elapsed_ms(start) < COMMIT_BUDGET_MS)
		{
			between_slices(start);
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
	esrc_kafka_commit_ms += (double) elapsed_ms(slot->started);
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
	clear_last_error();
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
				if (!is_poison(e))
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
		e = produce_position(k, p, recs[slot->last].position);
		if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			snprintf(err, errlen, "cannot queue the position record: %s", rd_kafka_err2str(e));
			abort_txn(k, p, err, errlen);
			slot_done(k, p);
			return ESRC_KAFKA_FATAL;
		}
	}
	esrc_kafka_produce_ms += (double) elapsed_ms(slot->started);
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
				if (elapsed_ms(start) < COMMIT_BUDGET_MS)
				{
					between_slices(start);
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
	if (i == slot->nrecs)
		return ESRC_KAFKA_OK;
	if (i == slot->nprod && slot->nprod < slot->nrecs)
	{
		strlcpy(err, slot->poison_err, errlen);
		*poison = i;
		return ESRC_KAFKA_POISON;
	}
	if (is_poison(recs[i].err))
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
