/*-------------------------------------------------------------------------
 *
 * forwarder.c
 *	  The Kafka forwarder: its GUCs, the background worker that publishes
 *	  committed events, and the SQL functions that watch and steer it
 *	  (esrc.forwarder_status, forwarder_pause/resume).
 *
 * One worker per cluster serves the database named by esrc.database.  It
 * reads events in position order, up to the safe horizon of order.c (so
 * only committed events, and never one that a later commit could still
 * precede), in short transactions, and hands each batch to kafka.c.  It
 * never holds a PostgreSQL transaction or snapshot while it waits for
 * Kafka.  Appending sessions never wait for it: at commit order.c sets
 * our latch, which is all the coupling there is.  With a backlog it reads
 * the next batch while librdkafka sends one, and in exactly_once mode
 * sends it while the one before is committed (forward_batch; kafka.c
 * keeps that exactly once).
 *
 * Position: the last forwarded position lives where it is committed.  In
 * exactly_once mode that is the Kafka offsets topic (written in the same
 * Kafka transaction as the records, see kafka.c); in at_least_once mode
 * it is the table esrc.forwarder_state, updated after delivery.  The
 * table also mirrors the Kafka position for esrc.forwarder_status and for
 * a switch between the modes; at connect we start from the larger of the
 * two, since neither is ever ahead of what Kafka has.
 *
 * Invariants: positions are sent in increasing order and the position
 * only advances over events that Kafka has (or that an operator skipped
 * with esrc.forwarder_skip); a record Kafka refuses (poison) stops
 * everything after it, so no later event overtakes it.
 *
 * Failures of Kafka are handled here (state, back-off, retry); errors of
 * PostgreSQL end the worker (no PG_TRY, as in pg_cron), and the
 * postmaster starts it again after bgw_restart_time: all progress is in
 * Kafka or in tables.  Shared state is EsrcSharedState.forwarder (esrc.h):
 * the worker is its only writer and bumps changecount around each write
 * (odd while writing); esrc.forwarder_status copies it until the count is
 * even and unchanged, so no reader and no writer ever waits on a lock.
 *
 * Privileges: the worker connects as the bootstrap superuser (it cannot
 * know the extension's owner before it is connected, and the extension
 * may be dropped and created again by another role while it runs), but
 * it runs no SQL as that role.  Right after connecting it pins
 * search_path to "pg_catalog, pg_temp" at PGC_S_OVERRIDE, so ALTER
 * DATABASE/ROLE ... SET cannot change it (nor the read-only, isolation
 * and timeout defaults of its transactions), and every operator, function
 * and type in its SQL is schema-qualified.  Each of its transactions
 * first checks that the schema esrc is the extension's (its
 * pg_extension.extnamespace, or a member: getExtensionOfObject); a schema
 * of that name planted in a database without the extension is never
 * read, and is treated like "not installed".  Then it runs its SQL as
 * the extension's owner in a security-restricted operation
 * (SetUserIdAndSecContext, as index_build and REFRESH MATERIALIZED VIEW
 * do): whatever code the tables could run (triggers, defaults, policies)
 * runs with the rights of the role that owns them, never more, and the
 * transaction's abort restores the role after an ERROR.  Reconnecting as
 * the owner would need a new process whenever the owner changes and would
 * apply the owner's ALTER ROLE ... SET settings; the switch does neither.
 * The batch read (BATCH_SQL) runs under the same rules.
 *
 * Encoding: Kafka records are JSON labelled application/json, which is
 * UTF-8.  The worker refuses to serve a database of another encoding
 * (esrc.forwarder_status says why) rather than send other bytes.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "portability/instr_time.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
#include "utils/wait_event.h"

#include "esrc.h"
#include "kafka.h"

PG_FUNCTION_INFO_V1(esrc_forwarder_worker_status);
PG_FUNCTION_INFO_V1(esrc_forwarder_pause);
PG_FUNCTION_INFO_V1(esrc_forwarder_resume);

PGDLLEXPORT void esrc_forwarder_main(Datum main_arg);

/* States shown by esrc.forwarder_status; keep state_names in step. */
typedef enum EsrcForwarderState
{
	FWD_STOPPED = 0,
	FWD_STARTING,
	FWD_IDLE,
	FWD_CONNECTING,
	FWD_RUNNING,
	FWD_PAUSED,
	FWD_DISCONNECTED,
	FWD_ERROR,
	FWD_BLOCKED
} EsrcForwarderState;

static const char *const state_names[] = {
	"stopped", "starting", "idle", "connecting", "running", "paused",
	"disconnected", "error", "blocked"
};

typedef enum EsrcDelivery
{
	DELIVERY_EXACTLY_ONCE,
	DELIVERY_AT_LEAST_ONCE
} EsrcDelivery;

static const struct config_enum_entry delivery_options[] = {
	{"exactly_once", DELIVERY_EXACTLY_ONCE, false},
	{"at_least_once", DELIVERY_AT_LEAST_ONCE, false},
	{NULL, 0, false}
};

/* GUC variables */
static char *esrc_kafka_brokers = NULL;
static char *esrc_database = NULL;
static char *esrc_kafka_topic_template = NULL;
static char *esrc_kafka_offsets_topic = NULL;
static char *esrc_kafka_properties = NULL;
static int	esrc_kafka_batch_size = 10000;
static int	esrc_delivery = DELIVERY_EXACTLY_ONCE;
static bool esrc_forwarder_log_batches = false;

/*
 * Largest total size of the strings of one batch.  A batch ends at
 * esrc.kafka_batch_size events or here, whichever comes first (but holds
 * at least one event), so the worker's memory stays bounded whatever the
 * event sizes.
 */
#define BATCH_BYTES		(16 * 1024 * 1024)

/* Back-off between failed attempts, doubling from the minimum. */
#define BACKOFF_MIN_MS	100
#define BACKOFF_MAX_MS	10000

/* Idle waits: nothing to do, or the horizon held back by open appends. */
#define IDLE_WAIT_MS	10000
#define HELD_WAIT_MIN_MS 1
#define HELD_WAIT_MAX_MS 1000
#define NO_BROKERS_WAIT_MS 60000

/* In exactly_once mode the table mirror is written at most this often. */
#define MIRROR_INTERVAL_MS 200

/* Log the same kind of failure again only after this long. */
#define LOG_REPEAT_MS	60000

/* ----------------------------------------------------------------
 * GUCs
 * ----------------------------------------------------------------
 */

static bool
check_brokers(char **newval, void **extra, GucSource source)
{
	const char *p;
	bool		empty_entry = true;
	bool		any = false;

	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	if (strlen(*newval) >= 4096)
	{
		GUC_check_errdetail("The broker list is longer than 4095 bytes.");
		return false;
	}
	for (p = *newval; *p; p++)
	{
		if ((unsigned char) *p < 0x20 || *p == 0x7f)
		{
			GUC_check_errdetail("The broker list contains a control character.");
			return false;
		}
		if (*p == ',')
		{
			if (empty_entry)
			{
				GUC_check_errdetail("The broker list has an empty entry.");
				return false;
			}
			empty_entry = true;
		}
		else if (*p != ' ')
		{
			empty_entry = false;
			any = true;
		}
	}
	if (empty_entry && any)
	{
		GUC_check_errdetail("The broker list has an empty entry.");
		return false;
	}
	return true;
}

static bool
check_database(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0')
	{
		GUC_check_errdetail("A database name is required.");
		return false;
	}
	if (strlen(*newval) >= NAMEDATALEN)
	{
		GUC_check_errdetail("Database names are at most %d bytes long.", NAMEDATALEN - 1);
		return false;
	}
	return true;
}

/*
 * The topic of a category: the template with every "{category}" replaced,
 * into out (outlen bytes, always NUL-terminated).  TOPIC_BAD_TEMPLATE when
 * the template has another "{...}" or "}"; TOPIC_TOO_LONG (out is then "")
 * as soon as the name would not fit, so that no byte of out is ever left
 * unwritten: a longer name is not a Kafka topic name anyway.
 */
typedef enum TopicExpansion
{
	TOPIC_OK,
	TOPIC_BAD_TEMPLATE,
	TOPIC_TOO_LONG
} TopicExpansion;

/* room for any expansion worth checking: Kafka allows 249 bytes */
#define TOPIC_BUF_LEN	512

static TopicExpansion
expand_topic(const char *template, const char *category, char *out, size_t outlen)
{
	const char *p = template;
	size_t		n = 0;
	size_t		clen = strlen(category);

	Assert(outlen > 0);
	out[0] = '\0';
	while (*p)
	{
		if (*p == '{')
		{
			if (strncmp(p, "{category}", 10) != 0)
				return TOPIC_BAD_TEMPLATE;
			if (n + clen >= outlen)
			{
				out[0] = '\0';
				return TOPIC_TOO_LONG;
			}
			memcpy(out + n, category, clen);
			n += clen;
			p += 10;
		}
		else if (*p == '}')
			return TOPIC_BAD_TEMPLATE;
		else
		{
			if (n + 1 >= outlen)
			{
				out[0] = '\0';
				return TOPIC_TOO_LONG;
			}
			out[n++] = *p++;
		}
		out[n] = '\0';
	}
	return TOPIC_OK;
}

static bool
check_topic_template(char **newval, void **extra, GucSource source)
{
	char		sample[TOPIC_BUF_LEN];
	TopicExpansion ex = TOPIC_BAD_TEMPLATE;

	if (*newval != NULL)
		ex = expand_topic(*newval, "c", sample, sizeof(sample));
	if (ex == TOPIC_BAD_TEMPLATE)
	{
		GUC_check_errdetail("The only placeholder allowed is {category}.");
		return false;
	}
	if (ex == TOPIC_TOO_LONG || !esrc_kafka_valid_topic_name(sample))
	{
		GUC_check_errdetail("Topic names consist of 1 to 249 of the characters a-z, A-Z, 0-9, \".\", \"_\" and \"-\".");
		return false;
	}
	return true;
}

/* ----------------------------------------------------------------
 * Checks at append time (any backend)
 *
 * An event the forwarder could never deliver blocks every event after it
 * (see "poison" in docs/forwarder.md), so when this database is forwarded
 * appends refuse such events up front.  These run on the append path:
 * they only read the GUCs (PGC_SIGHUP, so every backend has them) and a
 * few per-backend copies, and cost a string comparison or two per append.
 * ----------------------------------------------------------------
 */

/*
 * Bytes of a Kafka record kept for everything but data and metadata: the
 * key (the stream, at most 512 bytes) and the other headers (the stream
 * twice more, the type up to 256 bytes, ce_source, id, time, ...) take at
 * most about 2.3 kB (kafka.c, produce_record).
 */
#define RECORD_RESERVE	4096

/* librdkafka's default message.max.bytes */
#define DEFAULT_MESSAGE_MAX_BYTES 1000000

/* Is this database the one the forwarder serves, with brokers set? */
static bool
forwarded_here(void)
{
	static char mydb[NAMEDATALEN];

	if (esrc_kafka_brokers == NULL || esrc_kafka_brokers[0] == '\0' ||
		esrc_database == NULL)
		return false;
	if (mydb[0] == '\0')
	{
		/* a database cannot be renamed while we are connected to it */
		char	   *name = get_database_name(MyDatabaseId);

		if (name == NULL)
			return false;
		strlcpy(mydb, name, sizeof(mydb));
	}
	return strcmp(mydb, esrc_database) == 0;
}

static bool
find_message_max_bytes(const char *name, const char *value, void *arg)
{
	if (strcmp(name, "message.max.bytes") == 0)
	{
		char	   *end;
		long		v;

		errno = 0;
		v = strtol(value, &end, 10);
		if (errno == 0 && end != value && *end == '\0' && v > 0 && v <= INT_MAX)
			*(int *) arg = (int) v;
	}
	return true;
}

/* The producer's message.max.bytes, from esrc.kafka_properties. */
static int
message_max_bytes(void)
{
	static char *parsed = NULL;	/* the properties last parsed */
	static int	value = DEFAULT_MESSAGE_MAX_BYTES;
	const char *props = esrc_kafka_properties ? esrc_kafka_properties : "";
	const char *errpos;

	if (parsed == NULL || strcmp(parsed, props) != 0)
	{
		value = DEFAULT_MESSAGE_MAX_BYTES;
		if (esrc_kafka_parse_properties(props, find_message_max_bytes, &value, &errpos) != 0)
			value = DEFAULT_MESSAGE_MAX_BYTES;
		if (parsed)
			pfree(parsed);
		parsed = MemoryContextStrdup(TopMemoryContext, props);
	}
	return value;
}

/*
 * The largest data plus metadata, as JSON text, that one Kafka record of
 * this database can carry; 0 when this database is not forwarded.
 */
Size
esrc_forwarder_event_limit(void)
{
	int			max;

	if (!forwarded_here())
		return 0;
	max = message_max_bytes();
	return max > RECORD_RESERVE ? (Size) (max - RECORD_RESERVE) : 1;
}

void
esrc_forwarder_refuse_size(int index, Size limit)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("event %d is too large to forward to Kafka", index),
			 errdetail("Its data and metadata take more than %zu bytes as JSON text: the Kafka producer's message.max.bytes (%d) less %d bytes kept for the key and headers.",
					   limit, message_max_bytes(), RECORD_RESERVE),
			 errhint("Store large payloads elsewhere and put a reference in the event, or raise message.max.bytes in esrc.kafka_properties (and the brokers' limit).")));
}

/*
 * Refuse an append to a category whose topic name (esrc.kafka_topic) is
 * not a Kafka topic name, when this database is forwarded.
 */
void
esrc_forwarder_check_category(const char *category)
{
	char		name[TOPIC_BUF_LEN];
	TopicExpansion ex;

	if (!forwarded_here())
		return;
	ex = expand_topic(esrc_kafka_topic_template, category, name, sizeof(name));
	if (ex == TOPIC_TOO_LONG ||
		(ex == TOPIC_OK && strlen(name) > 249))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("category cannot be forwarded to Kafka: its topic name would be too long"),
				 errdetail("The topic name (esrc.kafka_topic is \"%s\") would be longer than the 249 bytes Kafka allows; the category has %zu bytes.",
						   esrc_kafka_topic_template, strlen(category)),
				 errhint("Use a shorter category: the part of the stream name before the first \"-\".")));
	if (ex != TOPIC_OK || !esrc_kafka_valid_topic_name(name))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("category \"%s\" cannot be forwarded to Kafka", category),
				 errdetail("Its topic name \"%s\" (from esrc.kafka_topic) is not a Kafka topic name: topic names consist of 1 to 249 of the characters a-z, A-Z, 0-9, \".\", \"_\" and \"-\".",
						   name),
				 errhint("Use a stream name whose category (the part before the first \"-\") consists of those characters.")));
}

static bool
check_offsets_topic(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || !esrc_kafka_valid_topic_name(*newval))
	{
		GUC_check_errdetail("Topic names consist of 1 to 249 of the characters a-z, A-Z, 0-9, \".\", \"_\" and \"-\".");
		return false;
	}
	return true;
}

/* Properties the forwarder sets itself: its guarantees depend on them. */
static const char *const reserved_properties[] = {
	"bootstrap.servers", "metadata.broker.list", "transactional.id",
	"enable.idempotence", "acks", "request.required.acks", "partitioner",
	"isolation.level", "enable.partition.eof", "enable.auto.commit",
	"enable.auto.offset.store", "group.id", "allow.auto.create.topics",
	"log.queue", NULL
};

static bool
property_allowed(const char *name, const char *value, void *arg)
{
	int			i;

	for (i = 0; reserved_properties[i] != NULL; i++)
	{
		if (strcmp(name, reserved_properties[i]) == 0)
		{
			GUC_check_errdetail("Property \"%s\" is set by the forwarder and cannot be changed.", name);
			return false;
		}
	}
	return true;
}

/*
 * Syntax only: "name=value; ...".  Whether librdkafka knows the names is
 * checked by the worker, which reports it in esrc.forwarder_status; a
 * check hook runs in every backend at each reload, and loading
 * librdkafka's global state there is not worth it.  Never show a value.
 */
static bool
check_properties(char **newval, void **extra, GucSource source)
{
	const char *errpos;

	if (*newval == NULL)
		return true;
	switch (esrc_kafka_parse_properties(*newval, property_allowed, NULL, &errpos))
	{
		case 0:
			return true;
		case 1:
			GUC_check_errdetail("The value is not a list of name=value entries separated by \";\": %s.", errpos);
			break;
		default:
			break;				/* property_allowed set the detail */
	}
	/* instead of "invalid value for parameter ...: <the value>" */
	GUC_check_errmsg("invalid value for parameter \"esrc.kafka_properties\"");
	return false;
}

/*
 * Called from _PG_init (shared_preload_libraries): define the GUCs and
 * register the worker.
 */
void
esrc_forwarder_init(void)
{
	BackgroundWorker worker;

	DefineCustomStringVariable("esrc.kafka_brokers",
							   "Kafka bootstrap servers (host:port, comma separated) the forwarder publishes to.",
							   "Empty turns forwarding off: events wait in the log.",
							   &esrc_kafka_brokers,
							   "",
							   PGC_SIGHUP, 0,
							   check_brokers, NULL, NULL);
	DefineCustomStringVariable("esrc.database",
							   "Database whose events the forwarder publishes.",
							   "Changing it restarts the forwarder.",
							   &esrc_database,
							   "postgres",
							   PGC_SIGHUP, 0,
							   check_database, NULL, NULL);
	DefineCustomStringVariable("esrc.kafka_topic",
							   "Kafka topic of an event; {category} is replaced by the stream's category.",
							   NULL,
							   &esrc_kafka_topic_template,
							   "esrc.{category}",
							   PGC_SIGHUP, 0,
							   check_topic_template, NULL, NULL);
	DefineCustomStringVariable("esrc.kafka_offsets_topic",
							   "Compacted Kafka topic where exactly_once mode commits the forwarding position.",
							   NULL,
							   &esrc_kafka_offsets_topic,
							   "esrc.offsets",
							   PGC_SIGHUP, 0,
							   check_offsets_topic, NULL, NULL);
	DefineCustomStringVariable("esrc.kafka_properties",
							   "Extra librdkafka properties for the forwarder, as name=value entries separated by \";\".",
							   "Only superusers can see this setting: it may hold passwords.",
							   &esrc_kafka_properties,
							   "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   check_properties, NULL, NULL);
	DefineCustomIntVariable("esrc.kafka_batch_size",
							"Most events the forwarder sends in one batch (one Kafka transaction in exactly_once mode).",
							NULL,
							&esrc_kafka_batch_size,
							10000,
							1,
							100000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomEnumVariable("esrc.delivery",
							 "Delivery guarantee of the forwarder: exactly_once or at_least_once.",
							 NULL,
							 &esrc_delivery,
							 DELIVERY_EXACTLY_ONCE,
							 delivery_options,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("esrc.forwarder_log_batches",
							 "Logs one line per forwarded batch with its positions and when it passed each step.",
							 "For latency measurements (bench/forward); times are microseconds since the Unix epoch.",
							 &esrc_forwarder_log_batches,
							 false,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "esrc");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "esrc_forwarder_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "esrc forwarder");
	snprintf(worker.bgw_type, BGW_MAXLEN, "esrc forwarder");
	RegisterBackgroundWorker(&worker);
}

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

/*
 * The worker is the only writer of EsrcForwarderShared (but for the
 * atomic paused flag): between status_write_begin and status_write_end
 * the change count is odd, and a reader (status_read) copies until it
 * sees the same even count before and after, as pgstat does for
 * PgBackendStatus.  Only stores and bounded copies of strings happen in
 * between: timestamps are taken before.  The worker reads its own
 * fields directly.
 */
static inline void
status_write_begin(EsrcForwarderShared *f)
{
	pg_atomic_write_u32(&f->changecount, pg_atomic_read_u32(&f->changecount) + 1);
	pg_write_barrier();
}

static inline void
status_write_end(EsrcForwarderShared *f)
{
	pg_write_barrier();
	pg_atomic_write_u32(&f->changecount, pg_atomic_read_u32(&f->changecount) + 1);
}

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

static void
set_state(EsrcForwarderState state, const char *detail)
{
	EsrcForwarderShared *f = &esrc_shared->forwarder;
	bool		changed = (f->state != (int) state);
	TimestampTz now = changed ? GetCurrentTimestamp() : 0;

	status_write_begin(f);
	if (changed)
	{
		f->state = state;
		f->state_since = now;
	}
	strlcpy(f->detail, detail ? detail : "", sizeof(f->detail));
	status_write_end(f);
	pgstat_report_activity(STATE_RUNNING, state_names[state]);
}

static EsrcForwarderState
get_state(void)
{
	return (EsrcForwarderState) esrc_shared->forwarder.state;
}

/*
 * Enter a failure state with an error; log it when the state is new or
 * the last log line is old (a Kafka outage retries every few seconds).
 */
static void
report_failure(EsrcForwarderState state, const char *error, const char *detail)
{
	EsrcForwarderShared *f = &esrc_shared->forwarder;
	TimestampTz now = GetCurrentTimestamp();

	status_write_begin(f);
	strlcpy(f->last_error, error, sizeof(f->last_error));
	f->last_error_at = now;
	status_write_end(f);
	set_state(state, detail);

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

static void
set_blocked(int64 position, const char *stream)
{
	EsrcForwarderShared *f = &esrc_shared->forwarder;

	status_write_begin(f);
	f->blocked_position = position;
	strlcpy(f->blocked_stream, stream ? stream : "", sizeof(f->blocked_stream));
	status_write_end(f);
}

static void
publish_progress(int64 position, int delivered)
{
	EsrcForwarderShared *f = &esrc_shared->forwarder;
	TimestampTz now = delivered > 0 ? GetCurrentTimestamp() : 0;

	status_write_begin(f);
	f->last_position = position;
	if (delivered > 0)
	{
		f->delivered_total += delivered;
		f->last_delivery_at = now;
	}
	status_write_end(f);
}

/* librdkafka is waiting a long time (kafka.c): show it. */
static void
kafka_wait_hook(int64 waited_ms, const char *last_error)
{
	if (waited_ms < 1000)
		return;
	if (get_state() == FWD_RUNNING)
	{
		char		msg[ESRC_FWD_ERROR_LEN];

		snprintf(msg, sizeof(msg), "no answer from Kafka for %d s%s%s",
				 (int) (waited_ms / 1000), last_error[0] ? ": " : "", last_error);
		report_failure(FWD_DISCONNECTED, msg, NULL);
	}
}

/* ----------------------------------------------------------------
 * The worker
 * ----------------------------------------------------------------
 */

/* What the worker runs with; copied from the GUCs at start and reload. */
typedef struct FwdConfig
{
	char	   *brokers;
	char	   *properties;
	char	   *offsets_topic;
	char	   *topic;
	bool		exactly_once;
} FwdConfig;

static FwdConfig cfg;
static char *served_database = NULL;
static EsrcKafka *kafka = NULL;

/* progress */
static char log_id[40];		/* esrc.forwarder_state.log_id, "" = unknown */
static int64 position = -1;		/* last forwarded; -1 = not yet known */
static int64 table_position = 0;	/* esrc.forwarder_state.position */
static bool mirror_dirty = false;
static bool mirror_now = false; /* write it at the next read */
static TimestampTz mirror_at = 0;

/* failure handling */
static int	backoff_ms = 0;
static TimestampTz retry_at = 0;
static bool config_refused = false; /* wait for a reload */
static int64 poison_position = 0;	/* 0 = none */

/*
 * Batches.  Two of them: while librdkafka sends one, the worker reads the
 * next into the other (see forward_batch).
 */
typedef struct Batch
{
	MemoryContext cxt;			/* everything the batch points to */
	EsrcKafkaRecord *recs;
	char	  **categories;		/* per record, for its topic */
	const char **unsendable;	/* per record: why it cannot be sent as it
								 * is (a poison record), NULL = it can */
	int			len;
	int64		bytes;			/* text bytes copied so far */
	bool		held;			/* open appends held the horizon back */
	/* when it was read, for the statistics and esrc.forwarder_log_batches */
	instr_time	read_start;
	instr_time	read_end;
	TimestampTz woke;			/* the reading began */
	TimestampTz read_done;
} Batch;

static Batch batches[2];
static Batch *fill = NULL;		/* the batch read_log() fills */
static MemoryContext loop_cxt = NULL;	/* reset every turn of the loop */

static void
copy_config(void)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	if (cfg.brokers)
	{
		pfree(cfg.brokers);
		pfree(cfg.properties);
		pfree(cfg.offsets_topic);
		pfree(cfg.topic);
	}
	cfg.brokers = pstrdup(esrc_kafka_brokers ? esrc_kafka_brokers : "");
	cfg.properties = pstrdup(esrc_kafka_properties ? esrc_kafka_properties : "");
	cfg.offsets_topic = pstrdup(esrc_kafka_offsets_topic);
	cfg.topic = pstrdup(esrc_kafka_topic_template);
	cfg.exactly_once = (esrc_delivery == DELIVERY_EXACTLY_ONCE);
	MemoryContextSwitchTo(old);

	{
		EsrcForwarderShared *f = &esrc_shared->forwarder;

		status_write_begin(f);
		strlcpy(f->brokers, cfg.brokers, sizeof(f->brokers));
		f->exactly_once = cfg.exactly_once;
		status_write_end(f);
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

	if (served_database != NULL && strcmp(served_database, esrc_database) != 0)
	{
		ereport(LOG,
				(errmsg("esrc forwarder: esrc.database changed from \"%s\" to \"%s\", restarting",
						served_database, esrc_database)));
		proc_exit(1);
	}

	kafka_changed = strcmp(cfg.brokers, esrc_kafka_brokers) != 0 ||
		strcmp(cfg.properties, esrc_kafka_properties) != 0 ||
		strcmp(cfg.offsets_topic, esrc_kafka_offsets_topic) != 0 ||
		cfg.exactly_once != (esrc_delivery == DELIVERY_EXACTLY_ONCE);
	if (kafka_changed || strcmp(cfg.topic, esrc_kafka_topic_template) != 0)
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
	EsrcForwarderShared *f = &esrc_shared->forwarder;
	TimestampTz now;

	/* every Kafka client, also those of a connect a SIGTERM cut short */
	esrc_kafka_shutdown();
	kafka = NULL;
	pg_atomic_write_u32(&esrc_shared->forwarder_procno, 0);
	esrc_shared->forwarder_dbid = InvalidOid;
	now = GetCurrentTimestamp();
	status_write_begin(f);
	f->state = FWD_STOPPED;
	f->state_since = now;
	f->pid = 0;
	status_write_end(f);
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
 * Reading from PostgreSQL
 * ----------------------------------------------------------------
 */

static SPIPlanPtr batch_plan = NULL;
static double wal_flush_ms = 0;	/* for the DEBUG1 statistics */
static SPIPlanPtr state_plan = NULL;
static SPIPlanPtr mirror_plan = NULL;

/*
 * Skipped events are read without their data and metadata, so that no
 * skipped event is ever converted; data and metadata come as jsonb and
 * are converted here (batch_receive), one event at a time, so that an
 * event that cannot be converted blocks forwarding as a poison record
 * instead of failing the read of the whole batch.  Operators and
 * functions are schema-qualified: the worker runs as a superuser.
 */
#define BATCH_SQL \
	"SELECT e.position, e.stream, e.version, e.type," \
	" CASE WHEN s.position IS NULL THEN e.data END," \
	" CASE WHEN s.position IS NULL THEN e.metadata END," \
	" e.id, e.recorded_at, e.category," \
	" s.position IS NOT NULL" \
	" FROM esrc.events e LEFT JOIN esrc.forwarder_skips s" \
	" ON s.position OPERATOR(pg_catalog.=) e.position" \
	" WHERE e.position OPERATOR(pg_catalog.>) $1" \
	" AND e.position OPERATOR(pg_catalog.<=) $2" \
	" ORDER BY e.position LIMIT $3"

/*
 * The largest data plus metadata, as JSON text, that the worker converts:
 * the largest esrc.max_event_size, which appends check against the text
 * size.  Events stored before that check (0.1.0) may expand to more, up
 * to what jsonb_out() cannot build at all (1 GB); they are poison records.
 */
#define MAX_RECORD_TEXT	(MaxAllocSize / 2)

/* A DestReceiver that copies rows into the batch and stops at BATCH_BYTES. */
typedef struct BatchReceiver
{
	DestReceiver pub;
	MemoryContext row_cxt;
} BatchReceiver;

static char *
copy_text(Datum d, int *len)
{
	text	   *t = DatumGetTextPP(d);
	int			n = VARSIZE_ANY_EXHDR(t);
	char	   *s = MemoryContextAlloc(fill->cxt, n + 1);

	memcpy(s, VARDATA_ANY(t), n);
	s[n] = '\0';
	if (len)
		*len = n;
	fill->bytes += n;
	return s;
}

/*
 * jb as JSON text, built in the batch's memory with room for exactly its
 * text (esrc_jsonb_text_size), so that it is written once.  *room is what
 * is left of MAX_RECORD_TEXT for this event; NULL when jb's text would
 * not fit in it.
 */
static char *
json_text(Datum d, int *len, Size *room)
{
	Jsonb	   *jb = DatumGetJsonbP(d);
	Size		size = esrc_jsonb_text_size(jb, *room);
	StringInfoData buf;

	if (size > *room)
		return NULL;
	*room -= size;
	buf.data = MemoryContextAlloc(fill->cxt, size + 1);
	buf.maxlen = size + 1;
	buf.len = 0;
	buf.data[0] = '\0';
	buf.cursor = 0;
	(void) JsonbToCString(&buf, &jb->root, size);
	if (len)
		*len = buf.len;
	fill->bytes += buf.len;
	return buf.data;
}

/* RFC 3339 in UTC with microseconds: 2024-05-01T12:34:56.789012Z; NULL
 * for a time that has no such form (infinity, out of range) */
static char *
format_time(TimestampTz ts)
{
	struct pg_tm tm;
	fsec_t		fsec;
	char	   *s;

	if (TIMESTAMP_NOT_FINITE(ts) ||
		timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) != 0 ||
		tm.tm_year < 1 || tm.tm_year > 9999)
		return NULL;
	s = MemoryContextAlloc(fill->cxt, 40);
	snprintf(s, 40, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ",
			 tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min,
			 tm.tm_sec, (int) fsec);
	return s;
}

static bool
batch_receive(TupleTableSlot *slot, DestReceiver *self)
{
	BatchReceiver *r = (BatchReceiver *) self;
	EsrcKafkaRecord *rec;
	MemoryContext old;
	const char *unsendable = NULL;

	if (fill->len > 0 && fill->bytes >= BATCH_BYTES)
		return false;

	old = MemoryContextSwitchTo(r->row_cxt);
	slot_getallattrs(slot);
	rec = &fill->recs[fill->len];
	memset(rec, 0, sizeof(*rec));
	rec->position = DatumGetInt64(slot->tts_values[0]);
	rec->stream = copy_text(slot->tts_values[1], &rec->stream_len);
	rec->version = DatumGetInt64(slot->tts_values[2]);
	rec->type = copy_text(slot->tts_values[3], NULL);
	rec->skip = DatumGetBool(slot->tts_values[9]);
	rec->data = "";
	if (!rec->skip)
	{
		Size		room = MAX_RECORD_TEXT;

		/* null only for skipped events (BATCH_SQL); data is NOT NULL */
		if (!slot->tts_isnull[4])
			rec->data = json_text(slot->tts_values[4], &rec->data_len, &room);
		if (rec->data != NULL && !slot->tts_isnull[5])
		{
			rec->metadata = json_text(slot->tts_values[5], NULL, &room);
			if (rec->metadata == NULL)
				rec->data = NULL;
		}
		if (rec->data == NULL)
		{
			rec->data = "";
			rec->data_len = 0;
			rec->metadata = NULL;
			unsendable = psprintf("its data and metadata take more than %zu bytes as JSON text",
								  (Size) MAX_RECORD_TEXT);
		}
		rec->time = format_time(DatumGetTimestampTz(slot->tts_values[7]));
		if (rec->time == NULL && unsendable == NULL)
			unsendable = "its recorded_at has no RFC 3339 form";
	}
	if (rec->time == NULL)
		rec->time = "";
	rec->id = MemoryContextStrdup(fill->cxt,
								  DatumGetCString(DirectFunctionCall1(uuid_out,
																	  slot->tts_values[6])));
	fill->categories[fill->len] = copy_text(slot->tts_values[8], NULL);
	fill->unsendable[fill->len] = unsendable ?
		MemoryContextStrdup(fill->cxt, unsendable) : NULL;
	fill->len++;
	MemoryContextSwitchTo(old);
	MemoryContextReset(r->row_cxt);
	return true;
}

static void
batch_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
batch_shutdown(DestReceiver *self)
{
}

static void
batch_destroy(DestReceiver *self)
{
}

static SPIPlanPtr
prepare(const char *sql, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, argtypes);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	return plan;
}

/*
 * The end of the WAL inserted so far, as a position XLogFlush() accepts:
 * the insert position, or the start of its page when it points just past
 * a page header (nothing of the page is written yet, and XLogFlush would
 * refuse a position it cannot reach).
 */
static XLogRecPtr
wal_end_of_inserted(void)
{
	XLogRecPtr	ptr = GetXLogInsertRecPtr();

	if (XLogSegmentOffset(ptr, wal_segment_size) == SizeOfXLogLongPHD)
		ptr -= SizeOfXLogLongPHD;
	else if (ptr % XLOG_BLCKSZ == SizeOfXLogShortPHD)
		ptr -= SizeOfXLogShortPHD;
	return ptr;
}

/*
 * Running as the extension's owner (see the header comment): the role
 * and security context to return to.
 */
static Oid	saved_userid = InvalidOid;
static int	saved_sec_context = 0;
static bool said_foreign_schema = false;

/* The owner and schema of extension ext; InvalidOid when it is gone. */
static Oid
extension_owner(Oid ext, Oid *schema)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	Oid			owner = InvalidOid;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ext));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	*schema = InvalidOid;
	if (HeapTupleIsValid(tup))
	{
		owner = ((Form_pg_extension) GETSTRUCT(tup))->extowner;
		*schema = ((Form_pg_extension) GETSTRUCT(tup))->extnamespace;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return owner;
}

/*
 * In a transaction of the worker, before any SQL: the schema esrc, if it
 * is the extension's, with the current user switched to the extension's
 * owner in a security-restricted operation until leave_extension().
 * InvalidOid, with nothing switched, when the extension is not installed
 * or a schema esrc exists that is not the extension's (logged once: it
 * is never read, whatever it holds).
 */
static Oid
enter_extension(void)
{
	Oid			nsp = get_namespace_oid("esrc", true);
	Oid			ext;
	Oid			owner = InvalidOid;
	Oid			extnsp = InvalidOid;

	if (!OidIsValid(nsp))
		return InvalidOid;
	ext = get_extension_oid("esrc", true);
	if (OidIsValid(ext))
		owner = extension_owner(ext, &extnsp);

	/*
	 * The extension's schema: CREATE EXTENSION made it (control file) or
	 * its script did (then it is a member).
	 */
	if (!OidIsValid(owner) ||
		(nsp != extnsp && getExtensionOfObject(NamespaceRelationId, nsp) != ext))
	{
		if (!said_foreign_schema)
			ereport(LOG,
					(errmsg("esrc forwarder: schema \"esrc\" of database \"%s\" does not belong to extension esrc, not reading it",
							served_database)));
		said_foreign_schema = true;
		return InvalidOid;
	}
	said_foreign_schema = false;
	GetUserIdAndSecContext(&saved_userid, &saved_sec_context);
	SetUserIdAndSecContext(owner, saved_sec_context | SECURITY_RESTRICTED_OPERATION);
	return nsp;
}

/* Back from enter_extension(); an ERROR restores the same by aborting. */
static void
leave_extension(void)
{
	SetUserIdAndSecContext(saved_userid, saved_sec_context);
}

typedef enum ReadResult
{
	READ_OK,
	READ_NO_EXTENSION,
	READ_NEW_LOG				/* log_id is not ours: the extension was
								 * created anew */
} ReadResult;

/*
 * One short transaction: write the position mirror if due, read the
 * forwarder's row of esrc.forwarder_state (into table_position; with
 * READ_NEW_LOG the new log_id is in log_id), and, with want_batch, the
 * events after position "after" up to the safe horizon into *b.  It may
 * run while librdkafka sends another batch, but it never waits for
 * Kafka.  May ereport(ERROR), which ends the worker.
 */
static ReadResult
read_log(Batch *b, bool want_batch, int64 after)
{
	Oid			nsp;
	Oid			seqoid;
	int			rc;
	XLogRecPtr	flush_to = InvalidXLogRecPtr;
	ReadResult	result = READ_OK;
	bool		as_owner = false;

	b->len = 0;
	b->bytes = 0;
	b->held = false;
	MemoryContextReset(b->cxt);
	fill = b;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "esrc forwarder: reading events");

	nsp = enter_extension();
	if (!OidIsValid(nsp))
	{
		result = READ_NO_EXTENSION;
		goto done;
	}
	as_owner = true;
	if (!OidIsValid(get_relname_relid("forwarder_state", nsp)) ||
		!OidIsValid(get_relname_relid("forwarder_skips", nsp)))
	{
		result = READ_NO_EXTENSION;
		goto done;
	}
	seqoid = get_relname_relid("position_seq", nsp);

	/* the mirror of the position (authority in at_least_once mode) */
	if (mirror_dirty && log_id[0] != '\0' &&
		(!cfg.exactly_once || mirror_now ||
		 TimestampDifferenceExceeds(mirror_at, GetCurrentTimestamp(), MIRROR_INTERVAL_MS)))
	{
		Datum		args[2];
		Oid			types[2] = {INT8OID, TEXTOID};

		if (mirror_plan == NULL)
			mirror_plan = prepare("UPDATE esrc.forwarder_state"
								  " SET position = $1, updated_at = pg_catalog.now()"
								  " WHERE log_id OPERATOR(pg_catalog.=) $2::pg_catalog.uuid"
								  " AND position OPERATOR(pg_catalog.<) $1", 2, types);
		args[0] = Int64GetDatum(position);
		args[1] = CStringGetTextDatum(log_id);
		rc = SPI_execute_plan(mirror_plan, args, NULL, false, 0);
		if (rc != SPI_OK_UPDATE)
			elog(ERROR, "update of esrc.forwarder_state failed: %s", SPI_result_code_string(rc));
		mirror_dirty = false;
		mirror_now = false;
		mirror_at = GetCurrentTimestamp();
	}

	/* who we are: a new log_id means the extension was created anew */
	if (state_plan == NULL)
		state_plan = prepare("SELECT log_id::pg_catalog.text, position FROM esrc.forwarder_state",
							 0, NULL);
	rc = SPI_execute_plan(state_plan, NULL, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "read of esrc.forwarder_state failed: %s", SPI_result_code_string(rc));
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("esrc.forwarder_state must hold exactly one row, it has " UINT64_FORMAT,
						SPI_processed)));
	{
		char	   *id = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		bool		isnull;

		table_position = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
													 SPI_tuptable->tupdesc, 2, &isnull));
		if (strcmp(id, log_id) != 0)
		{
			if (log_id[0] != '\0')
			{
				result = READ_NEW_LOG;
				want_batch = false;
			}
			strlcpy(log_id, id, sizeof(log_id));
		}
	}

	if (want_batch)
	{
		int64		horizon = esrc_safe_position(seqoid);
		int64		last = esrc_sequence_last_value(seqoid);
		BatchReceiver recv;
		SPIExecuteOptions options;
		ParamListInfo params;
		Oid			types[3] = {INT8OID, INT8OID, INT8OID};

		b->held = horizon < last;
		if (batch_plan == NULL)
			batch_plan = prepare(BATCH_SQL, 3, types);

		params = makeParamList(3);
		params->params[0].value = Int64GetDatum(after);
		params->params[1].value = Int64GetDatum(horizon);
		params->params[2].value = Int64GetDatum((int64) esrc_kafka_batch_size);
		for (int i = 0; i < 3; i++)
		{
			params->params[i].isnull = false;
			params->params[i].pflags = PARAM_FLAG_CONST;
			params->params[i].ptype = INT8OID;
		}

		b->recs = MemoryContextAlloc(b->cxt, sizeof(EsrcKafkaRecord) * esrc_kafka_batch_size);
		b->categories = MemoryContextAlloc(b->cxt, sizeof(char *) * esrc_kafka_batch_size);
		b->unsendable = MemoryContextAlloc(b->cxt, sizeof(char *) * esrc_kafka_batch_size);
		memset(&recv, 0, sizeof(recv));
		recv.pub.receiveSlot = batch_receive;
		recv.pub.rStartup = batch_startup;
		recv.pub.rShutdown = batch_shutdown;
		recv.pub.rDestroy = batch_destroy;
		recv.pub.mydest = DestTuplestore;	/* anything but DestNone: SPI_OK_SELECT */
		recv.row_cxt = AllocSetContextCreate(CurrentMemoryContext, "esrc batch row",
											 ALLOCSET_DEFAULT_SIZES);

		/* a snapshot taken after the horizon, as read_all does (read.c) */
		memset(&options, 0, sizeof(options));
		options.params = params;
		options.read_only = true;
		options.dest = (DestReceiver *) &recv;
		PushActiveSnapshot(GetLatestSnapshot());
		/* every commit this snapshot sees has its commit record before here */
		flush_to = wal_end_of_inserted();
		rc = SPI_execute_plan_extended(batch_plan, &options);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "read of esrc.events failed: %s", SPI_result_code_string(rc));
		PopActiveSnapshot();
	}

done:
	if (as_owner)
		leave_extension();
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(loop_cxt);

	/*
	 * Never publish an event that a crash could still take back: with
	 * synchronous_commit = off an appender's commit is visible before it
	 * is durable.  With synchronous commits this returns at once.
	 */
	if (b->len > 0 && flush_to != InvalidXLogRecPtr)
	{
		instr_time	t0,
					t1;

		INSTR_TIME_SET_CURRENT(t0);
		XLogFlush(flush_to);
		INSTR_TIME_SET_CURRENT(t1);
		INSTR_TIME_SUBTRACT(t1, t0);
		wal_flush_ms += INSTR_TIME_GET_MILLISEC(t1);
	}
	return result;
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

	snprintf(client_id, sizeof(client_id), "esrc-%s", log_id);
	memset(&s, 0, sizeof(s));
	s.brokers = cfg.brokers;
	s.properties = cfg.properties;
	s.exactly_once = cfg.exactly_once;
	s.client_id = client_id;
	s.offsets_topic = cfg.offsets_topic;
	s.database = served_database;
	s.log_id = log_id;
	s.source = make_source(served_database);

	set_state(FWD_CONNECTING, NULL);
	kafka = esrc_kafka_connect(&s, &kafka_position, &status, err, sizeof(err));
	pfree((char *) s.source);
	if (kafka == NULL)
	{
		if (status == ESRC_KAFKA_CONFIG)
		{
			report_failure(FWD_ERROR, err,
						   "Fix esrc.kafka_brokers or esrc.kafka_properties and reload the configuration.");
			config_refused = true;
		}
		else
		{
			report_failure(FWD_DISCONNECTED, err, NULL);
			schedule_retry();
		}
		return false;
	}

	/*
	 * None of the three is ever ahead of what Kafka has: the offsets topic
	 * (exactly_once), the table (written after a commit or a delivery) and
	 * our own position (advanced after one).  After a failed commit Kafka
	 * may have more than we know; after a switch of mode the table or our
	 * position may be ahead of an old position record.
	 */
	position = Max(Max(kafka_position, table_position), position);
	if (position > table_position)
		mirror_dirty = true;
	publish_progress(position, 0);
	backoff_ms = 0;
	ereport(LOG,
			(errmsg("esrc forwarder: connected to Kafka at %s (%s), continuing after position " INT64_FORMAT,
					cfg.brokers, cfg.exactly_once ? "exactly_once" : "at_least_once",
					position)));
	set_state(FWD_RUNNING, NULL);
	last_logged_state = -1;
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
		ex = expand_topic(cfg.topic, b->categories[i], name, sizeof(name));
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
					served_database, log_id, table_position)));
	disconnect();
	position = -1;
	poison_position = 0;
	set_blocked(0, NULL);
	mirror_dirty = false;
}

/* A TimestampTz as microseconds since the Unix epoch. */
static long long
unix_us(TimestampTz t)
{
	if (t == 0)
		return 0;
	return (long long) t +
		(long long) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC;
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
			(errmsg("esrc forwarder: batch first=" INT64_FORMAT " last=" INT64_FORMAT " events=%d woke_us=%lld read_us=%lld started_us=%lld queued_us=%lld acked_us=%lld committed_us=%lld",
					b->recs[0].position, b->recs[ndone - 1].position, ndone,
					unix_us(b->woke), unix_us(b->read_done), unix_us(t.started),
					unix_us(t.queued), unix_us(t.acked), unix_us(t.committed)),
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
	rr = read_log(next, true, after);
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
		pg_atomic_read_u32(&esrc_shared->forwarder.paused) == 0;
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
		int			n = b->len;
		int			ndone = 0;
		int			poison = -1;
		int			usable;
		EsrcKafkaStatus status;
		EsrcKafkaStatus topic_status = ESRC_KAFKA_OK;
		ReadResult	prefetch = READ_OK;
		bool		next_started = false;
		int			delivered = 0;
		int			i;
		instr_time	sent;

		CHECK_FOR_INTERRUPTS();
		have_next = false;
		if (started)
		{
			/* start_next() sent it whole */
			usable = n;
			status = ESRC_KAFKA_OK;
		}
		else
		{
			/* no event after a poison record goes before it */
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

			topic_status = resolve_topics(b, &usable, topic_err, sizeof(topic_err));
			if (usable == 0)
			{
				/* RETRY, FATAL or POISON of the first record's topic */
				status = topic_status;
				strlcpy(err, topic_err, sizeof(err));
				if (status == ESRC_KAFKA_POISON)
					poison = 0;
			}
			else
				status = esrc_kafka_start(kafka, b->recs, usable, &poison, err, sizeof(err));
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
			if (whole && cfg.exactly_once && have_next && may_go_on() &&
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
		{
			if (esrc_forwarder_log_batches && kafka != NULL)
				log_batch(b, ndone);
			for (i = 0; i < ndone; i++)
				if (!b->recs[i].skip)
					delivered++;
			position = b->recs[ndone - 1].position;
			mirror_dirty = true;
			publish_progress(position, delivered);
		}
		if (status != ESRC_KAFKA_OK)
		{
			/* what was read after b does not follow what went out */
			have_next = false;
			Assert(!next_started);
		}

		switch (status)
		{
			case ESRC_KAFKA_OK:
				if (backoff_ms > 0 || get_state() == FWD_DISCONNECTED)
					ereport(LOG,
							(errmsg("esrc forwarder: delivering to Kafka again, at position " INT64_FORMAT,
									position)));
				backoff_ms = 0;
				last_logged_state = -1;
				if (poison_position > 0 && position >= poison_position)
				{
					ereport(LOG,
							(errmsg("esrc forwarder: event at position " INT64_FORMAT " is past, forwarding resumes",
									poison_position)));
					poison_position = 0;
					set_blocked(0, NULL);
				}
				if (poison_position == 0)
					set_state(FWD_RUNNING, NULL);
				break;

			case ESRC_KAFKA_POISON:
				{
					EsrcKafkaRecord *r = &b->recs[poison];
					char		detail[ESRC_FWD_ERROR_LEN];

					poison_position = r->position;
					set_blocked(r->position, r->stream);
					snprintf(detail, sizeof(detail),
							 "Nothing after position " INT64_FORMAT " is forwarded until it goes through; retrying with back-off. To give up on it, run SELECT esrc.forwarder_skip(" INT64_FORMAT ").",
							 r->position, r->position);
					report_failure(FWD_BLOCKED, err, detail);
					/* retry at once if records before it remain to be sent */
					if (poison == ndone)
						schedule_retry();
					break;
				}

			case ESRC_KAFKA_RETRY:
				report_failure(FWD_DISCONNECTED, err, NULL);
				schedule_retry();
				break;

			case ESRC_KAFKA_FATAL:
			case ESRC_KAFKA_CONFIG:
				report_failure(FWD_ERROR, err, "The Kafka producer is recreated.");
				disconnect();	/* Kafka may have more: connect_kafka() asks */
				schedule_retry();
				break;
		}

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
						esrc_kafka_produce_ms / stats.batches, wal_flush_ms / stats.batches)));
		wal_flush_ms = 0;
		memset(&stats, 0, sizeof(stats));
		esrc_kafka_produce_ms = 0;
		esrc_kafka_commit_ms = 0;
	}
}

/* While blocked: has the operator skipped the poison record? */
static bool
poison_skipped(void)
{
	bool		skipped = false;
	Datum		arg = Int64GetDatum(poison_position);
	Oid			type = INT8OID;
	int			rc;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	if (OidIsValid(enter_extension()))
	{
		rc = SPI_execute_with_args("SELECT 1 FROM esrc.forwarder_skips"
								   " WHERE position OPERATOR(pg_catalog.=) $1",
								   1, &type, &arg, NULL, true, 1);
		skipped = (rc == SPI_OK_SELECT && SPI_processed > 0);
		leave_extension();
	}
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(loop_cxt);
	return skipped;
}

/*
 * The served database is not UTF8: Kafka records are JSON labelled
 * application/json and carry the stream in headers, all of it UTF-8, so
 * nothing is sent.  Waits (serving reloads: a new esrc.database restarts
 * the worker) and never returns.
 */
static void
refuse_database_encoding(void)
{
	char		error[ESRC_FWD_ERROR_LEN];

	snprintf(error, sizeof(error),
			 "database \"%s\" has encoding %s: the forwarder only serves UTF8 databases",
			 served_database, GetDatabaseEncodingName());
	report_failure(FWD_ERROR, error,
				   "Kafka records are JSON, which is UTF-8; nothing is forwarded. Forward from a database created with ENCODING 'UTF8'.");
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
			reload_config();
		wait_latch(NO_BROKERS_WAIT_MS);
	}
}

void
esrc_forwarder_main(Datum main_arg)
{
	EsrcForwarderShared *f = &esrc_shared->forwarder;
	long		held_wait = HELD_WAIT_MIN_MS;
	bool		said_no_extension = false;
	Batch	   *cur = &batches[0];
	Batch	   *spare = &batches[1];
	bool		have = false;	/* cur holds a batch read ahead, unsent */

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	status_write_begin(f);
	f->pid = MyProcPid;
	f->last_position = -1;
	f->database[0] = '\0';
	f->blocked_position = 0;
	f->blocked_stream[0] = '\0';
	status_write_end(f);
	set_state(FWD_STARTING, NULL);

	/* our latch: pause/resume set it now, commits once we serve a database */
	pg_atomic_write_u32(&esrc_shared->forwarder_procno, esrc_my_procno() + 1);
	before_shmem_exit(forwarder_exit, (Datum) 0);
	esrc_kafka_wait_hook = kafka_wait_hook;
	copy_config();

	/* with no brokers there is nothing to do, not even a database to join */
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
			reload_config();
		if (cfg.brokers[0] != '\0')
			break;
		set_state(FWD_IDLE, "esrc.kafka_brokers is empty: events wait in the log.");
		wait_latch(NO_BROKERS_WAIT_MS);
	}

	served_database = MemoryContextStrdup(TopMemoryContext, esrc_database);
	status_write_begin(f);
	strlcpy(f->database, served_database, sizeof(f->database));
	status_write_end(f);
	set_state(FWD_CONNECTING, NULL);
	BackgroundWorkerInitializeConnection(served_database, NULL, 0);
	pgstat_report_appname("esrc forwarder");

	/*
	 * What the names in our SQL mean is ours to say, not the database's
	 * or a role's (ALTER DATABASE/ROLE ... SET): see the header comment.
	 */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	/* nor may they make our transactions fail or change what they see */
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	if (GetDatabaseEncoding() != PG_UTF8)
		refuse_database_encoding();

	/*
	 * Our own writes (the position mirror) need not wait for the WAL
	 * flush: losing the last one in a crash only makes us resume earlier.
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	esrc_shared->forwarder_dbid = MyDatabaseId;
	batches[0].cxt = AllocSetContextCreate(TopMemoryContext, "esrc forwarder batch",
										   ALLOCSET_DEFAULT_SIZES);
	batches[1].cxt = AllocSetContextCreate(TopMemoryContext, "esrc forwarder batch",
										   ALLOCSET_DEFAULT_SIZES);
	loop_cxt = AllocSetContextCreate(TopMemoryContext, "esrc forwarder loop",
									 ALLOCSET_DEFAULT_SIZES);
	log_id[0] = '\0';
	ereport(LOG,
			(errmsg("esrc forwarder started for database \"%s\" (librdkafka %s)",
					served_database, esrc_kafka_version())));

	for (;;)
	{
		bool		want_batch;
		TimestampTz now;
		TimestampTz turn_began = 0;
		char		msg[256];
		instr_time	t_turn;
		ReadResult	rr;

		MemoryContextSwitchTo(loop_cxt);
		MemoryContextReset(loop_cxt);
		INSTR_TIME_SET_CURRENT(t_turn);
		if (!have)
			turn_began = GetCurrentTimestamp();
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
			reload_config();
		esrc_kafka_poll(kafka);

		if (pg_atomic_read_u32(&f->paused) != 0)
		{
			set_state(FWD_PAUSED, "esrc.forwarder_pause() is in effect; esrc.forwarder_resume() continues.");
			wait_latch(IDLE_WAIT_MS);
			continue;
		}
		if (cfg.brokers[0] == '\0')
		{
			disconnect();
			set_state(FWD_IDLE, "esrc.kafka_brokers is empty: events wait in the log.");
			wait_latch(NO_BROKERS_WAIT_MS);
			continue;
		}
		if (config_refused)
		{
			/* the error is in the status; only a reload can help */
			wait_latch(NO_BROKERS_WAIT_MS);
			continue;
		}
		if (kafka == NULL)
			have = false;		/* a batch read ahead waits for no one */
		now = GetCurrentTimestamp();
		if (retry_at > now)
		{
			long		ms = (long) ((retry_at - now) / 1000) + 1;

			/* while blocked, notice esrc.forwarder_skip() within a second */
			if (poison_position > 0 && kafka != NULL && poison_skipped())
				retry_at = 0;
			else
				wait_latch(poison_position > 0 ? Min(ms, 1000) : ms);
			continue;
		}

		if (have)
			goto send;

		want_batch = (kafka != NULL && position >= 0);
		cur->woke = turn_began;
		cur->read_start = t_turn;
		rr = read_log(cur, want_batch, position);
		INSTR_TIME_SET_CURRENT(cur->read_end);
		cur->read_done = GetCurrentTimestamp();
		if (rr == READ_NEW_LOG)
		{
			new_log();
			continue;
		}
		if (rr == READ_NO_EXTENSION)
		{
			disconnect();
			position = -1;
			log_id[0] = '\0';
			if (!said_no_extension)
				ereport(LOG,
						(errmsg("esrc forwarder: extension esrc is not installed in database \"%s\", waiting",
								served_database)));
			said_no_extension = true;
			snprintf(msg, sizeof(msg), "Extension esrc is not installed in database \"%s\".",
					 served_database);
			set_state(FWD_IDLE, msg);
			wait_latch(IDLE_WAIT_MS);
			continue;
		}
		said_no_extension = false;

		if (kafka == NULL || position < 0)
		{
			if (kafka == NULL)
				connect_kafka();
			else
				position = table_position;	/* cannot happen; be safe */
			continue;
		}

		if (cur->len == 0)
		{
			if (mirror_dirty)
			{
				mirror_now = true;	/* write the mirror now that we are idle */
				continue;
			}
			if (poison_position == 0)
				set_state(FWD_RUNNING, NULL);
			if (cur->held)
			{
				/* an open append holds the horizon: look again soon */
				wait_latch(held_wait);
				held_wait = Min(held_wait * 2, HELD_WAIT_MAX_MS);
			}
			else
			{
				held_wait = HELD_WAIT_MIN_MS;
				wait_latch(IDLE_WAIT_MS);
			}
			continue;
		}
send:
		have = false;
		held_wait = HELD_WAIT_MIN_MS;
		forward_batch(&cur, &spare, &have);
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
