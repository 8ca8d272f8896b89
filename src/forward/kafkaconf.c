/*-------------------------------------------------------------------------
 *
 * kafkaconf.c
 *	  What esrc tells librdkafka and what librdkafka tells back: the
 *	  syntax of esrc.kafka_properties, the rules of topic names, the
 *	  configuration of each client (kafka_build_conf), and librdkafka's log
 *	  and errors.
 *
 * Configuration: our defaults first, then the user's properties, then
 * what the forwarder's guarantees depend on (idempotence, acks,
 * transactional.id, read_committed ...), which the user cannot change
 * (fwdconf.c's check hook refuses those names).
 *
 * Threads: librdkafka runs its own threads.  They never call into
 * PostgreSQL: log lines and errors go into a small ring buffer under a
 * pthread mutex (log_cb, error_cb), which the worker turns into
 * ereport(LOG) with esrc_kafka_emit_log(); the latest error is kept for
 * the waits of kafka.c (kafka_copy_last_error).
 *
 * Secrets: esrc.kafka_properties may hold passwords.  Messages built here
 * name a property but never show its value.
 *
 * Talks to: kafka.c and kafkapos.c (which build their clients here, and
 * whose delivery report callback is kafka_dr_cb), fwdconf.c (the check
 * hooks parse properties and topic names with the functions here).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <pthread.h>

#include <librdkafka/rdkafka.h>

#include "miscadmin.h"

#include "kafka.h"
#include "kafkaint.h"

/* The ring buffer of log lines from librdkafka threads. */
#define LOG_RING		1024

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

/*
 * librdkafka error_cb: served by rd_kafka_poll (our thread), but kept
 * simple.  "1/1 brokers are down" follows the error that says why (the
 * address and "Connection refused", a name that does not resolve, a
 * failed TLS handshake): it does not replace that one.
 */
static void
error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	pthread_mutex_lock(&log_lock);
	if (err != RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN || last_error[0] == '\0')
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

/*
 * A librdkafka configuration: our defaults, then the user's properties,
 * then what the forwarder's guarantees depend on (esrc.kafka_properties
 * cannot change those: fwdconf.c's check hook refuses them).  NULL and
 * a message on failure.
 */
rd_kafka_conf_t *
kafka_build_conf(EsrcKafka *k, ConfKind kind, char *err, size_t errlen)
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
		rd_kafka_conf_set_dr_msg_cb(conf, kafka_dr_cb);
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

/* Forget librdkafka's latest error, before an operation. */
void
kafka_clear_last_error(void)
{
	pthread_mutex_lock(&log_lock);
	last_error[0] = '\0';
	pthread_mutex_unlock(&log_lock);
}

/* librdkafka's latest error (error_cb), for a wait that reports it. */
void
kafka_copy_last_error(char *buf, size_t len)
{
	pthread_mutex_lock(&log_lock);
	strlcpy(buf, last_error, len);
	pthread_mutex_unlock(&log_lock);
}
