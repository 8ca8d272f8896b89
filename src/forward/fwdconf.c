/*-------------------------------------------------------------------------
 *
 * fwdconf.c
 *	  The forwarder's configuration: its GUCs and their check hooks, the
 *	  expansion of esrc.kafka_topic into topic names, the checks an append
 *	  makes when its database is forwarded, and the list of databases to
 *	  forward (fwd_define_settings, from esrc_forwarder_init).
 *
 * Every GUC here but esrc.max_forwarders is PGC_SIGHUP: the workers copy
 * them at start and at each reload (fwdconnect.c, fwd_copy_config), the
 * launcher (fwdlauncher.c) follows esrc.databases, and every backend has
 * them for the append-time checks and esrc.forwarder_status.  The check hooks run in every backend at each
 * reload, so they check syntax only and never load librdkafka; what
 * librdkafka thinks of esrc.kafka_properties the worker finds out when it
 * connects, and esrc.forwarder_status shows.  Properties the forwarder's
 * guarantees depend on (reserved_properties) are refused here, and no
 * message ever shows a property's value: it may be a password.
 *
 * Talks to: the worker (fwdconnect.c copies the GUCs, fwdsend.c expands
 * topic names), kafkaconf.c (property
 * syntax, topic name rules), append.c (which calls the append-time
 * checks through the esrc_append_guard this file sets).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "utils/varlena.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "log/log.h"
#include "forward/forward.h"
#include "forwardint.h"
#include "kafka.h"

static const struct config_enum_entry delivery_options[] = {
	{"exactly_once", DELIVERY_EXACTLY_ONCE, false},
	{"at_least_once", DELIVERY_AT_LEAST_ONCE, false},
	{NULL, 0, false}
};

/* GUC variables (forwardint.h) */
char *esrc_kafka_brokers = NULL;
char *esrc_database = NULL;
char *esrc_databases = NULL;
int	esrc_max_forwarders = 8;
char *esrc_kafka_topic_template = NULL;
char *esrc_kafka_offsets_topic = NULL;
char *esrc_kafka_properties = NULL;
int	esrc_kafka_batch_size = 10000;
int	esrc_delivery = DELIVERY_EXACTLY_ONCE;
bool		esrc_kafka_position_record = true;

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
 * Split esrc.databases: "*", or database names separated by commas
 * (quoted with "" where a name has capitals, commas or spaces, as in
 * search_path).  NULL with *all false when the value is not a list.
 */
static List *
split_databases(const char *value, bool *all)
{
	char	   *copy;
	List	   *names = NIL;

	*all = false;
	while (*value == ' ')
		value++;
	if (value[0] == '*')
	{
		const char *q = value + 1;

		while (*q == ' ')
			q++;
		if (*q == '\0')
		{
			*all = true;
			return NIL;
		}
	}
	copy = pstrdup(value);
	if (!SplitIdentifierString(copy, ',', &names))
		return NULL;
	{
		/* names of their own: the list points into copy */
		List	   *own = NIL;
		ListCell   *lc;

		foreach(lc, names)
			own = lappend(own, pstrdup((const char *) lfirst(lc)));
		list_free(names);
		pfree(copy);
		return own;
	}
}

static bool
check_databases(char **newval, void **extra, GucSource source)
{
	List	   *names;
	ListCell   *lc;
	bool		all;

	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	names = split_databases(*newval, &all);
	if (all)
		return true;
	if (names == NIL)
	{
		GUC_check_errdetail("The value is \"*\" or a list of database names separated by commas.");
		return false;
	}
	foreach(lc, names)
	{
		const char *name = (const char *) lfirst(lc);
		ListCell   *lc2;

		if (strcmp(name, "*") == 0)
		{
			GUC_check_errdetail("\"*\" stands alone: it means every database with esrc.");
			return false;
		}
		if (strlen(name) >= NAMEDATALEN)
		{
			GUC_check_errdetail("Database names are at most %d bytes long.", NAMEDATALEN - 1);
			return false;
		}
		for (lc2 = list_head(names); lfirst(lc2) != lfirst(lc); lc2 = lnext(names, lc2))
		{
			if (strcmp((const char *) lfirst(lc2), name) == 0)
			{
				GUC_check_errdetail("Database \"%s\" is listed twice.", name);
				return false;
			}
		}
	}
	return true;
}

List *
fwd_configured_databases(bool *all)
{
	List	   *names;

	*all = false;
	if (esrc_databases == NULL || esrc_databases[0] == '\0')
		return list_make1(pstrdup(esrc_database));
	names = split_databases(esrc_databases, all);
	return names;				/* checked by check_databases */
}

/*
 * The topic of a category: the template with every "{category}" replaced
 * by category and every "{database}" by database, into out (outlen bytes,
 * always NUL-terminated).  TOPIC_BAD_TEMPLATE when the template has
 * another "{...}" or "}"; TOPIC_TOO_LONG (out is then "") as soon as the
 * name would not fit, so that no byte of out is ever left unwritten: a
 * longer name is not a Kafka topic name anyway.
 */
TopicExpansion
fwd_expand_topic(const char *template, const char *category, const char *database,
				 char *out, size_t outlen)
{
	const char *p = template;
	size_t		n = 0;

	Assert(outlen > 0);
	out[0] = '\0';
	while (*p)
	{
		if (*p == '{')
		{
			const char *value;
			size_t		vlen;

			if (strncmp(p, "{category}", 10) == 0)
			{
				value = category;
				p += 10;
			}
			else if (strncmp(p, "{database}", 10) == 0)
			{
				value = database;
				p += 10;
			}
			else
				return TOPIC_BAD_TEMPLATE;
			vlen = strlen(value);
			if (n + vlen >= outlen)
			{
				out[0] = '\0';
				return TOPIC_TOO_LONG;
			}
			memcpy(out + n, value, vlen);
			n += vlen;
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
		ex = fwd_expand_topic(*newval, "c", "d", sample, sizeof(sample));
	if (ex == TOPIC_BAD_TEMPLATE)
	{
		GUC_check_errdetail("The only placeholders allowed are {category} and {database}.");
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
 * most about 2.3 kB (kafka.c, produce_record), the trace context
 * (ce_traceparent, ce_tracestate, trace.c) at most 1.1 kB more.
 */
#define RECORD_RESERVE	4096

/* librdkafka's default message.max.bytes */
#define DEFAULT_MESSAGE_MAX_BYTES 1000000

/* This backend's database name (it cannot be renamed while we are in it). */
static const char *
my_database_name(void)
{
	static char mydb[NAMEDATALEN];

	if (mydb[0] == '\0')
	{
		char	   *name = get_database_name(MyDatabaseId);

		if (name == NULL)
			return NULL;
		strlcpy(mydb, name, sizeof(mydb));
	}
	return mydb;
}

/*
 * Is this database forwarded (listed, or esrc.databases is '*'), with
 * brokers set?  The answer is kept until the settings change, so an
 * append pays a string comparison or two.
 */
static bool
forwarded_here(void)
{
	static char *seen_databases = NULL; /* esrc.databases when last asked */
	static char *seen_database = NULL;	/* esrc.database ditto */
	static bool answer = false;
	const char *dbs = esrc_databases ? esrc_databases : "";
	const char *db = esrc_database ? esrc_database : "";
	const char *mydb;

	if (esrc_kafka_brokers == NULL || esrc_kafka_brokers[0] == '\0')
		return false;
	if (seen_databases != NULL && strcmp(seen_databases, dbs) == 0 &&
		strcmp(seen_database, db) == 0)
		return answer;

	mydb = my_database_name();
	if (mydb == NULL)
		return false;
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		bool		all;
		List	   *names = fwd_configured_databases(&all);
		ListCell   *lc;

		answer = all;
		foreach(lc, names)
			answer |= strcmp((const char *) lfirst(lc), mydb) == 0;
		list_free_deep(names);
		if (seen_databases)
		{
			pfree(seen_databases);
			pfree(seen_database);
		}
		seen_databases = pstrdup(dbs);
		seen_database = pstrdup(db);
		MemoryContextSwitchTo(old);
	}
	return answer;
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
static Size
forwarder_event_limit(void)
{
	int			max;

	if (!forwarded_here())
		return 0;
	max = message_max_bytes();
	return max > RECORD_RESERVE ? (Size) (max - RECORD_RESERVE) : 1;
}

static void
forwarder_refuse_size(int index, Size limit)
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
static void
forwarder_check_category(const char *category)
{
	char		name[TOPIC_BUF_LEN];
	TopicExpansion ex;

	if (!forwarded_here())
		return;
	ex = fwd_expand_topic(esrc_kafka_topic_template, category, my_database_name(),
						  name, sizeof(name));
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
				 errhint("Use a stream name whose category (the part before the first \"-\") consists of those characters%s.",
						 strstr(esrc_kafka_topic_template, "{database}") ?
						 ", and a database name that does, or no {database} in esrc.kafka_topic" : "")));
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

/* what an append of a forwarded database must fit (append.c asks) */
static const EsrcAppendGuard forwarder_append_guard = {
	.check_category = forwarder_check_category,
	.text_limit = forwarder_event_limit,
	.refuse_text = forwarder_refuse_size,
};

/*
 * Called by esrc_forwarder_init (fwdlauncher.c), from _PG_init: define
 * the GUCs and install what an append must fit.
 */
void
fwd_define_settings(void)
{
	esrc_append_guard = &forwarder_append_guard;

	DefineCustomStringVariable("esrc.kafka_brokers",
							   "Kafka bootstrap servers (host:port, comma separated) the forwarder publishes to.",
							   "Empty turns forwarding off: events wait in the log.",
							   &esrc_kafka_brokers,
							   "",
							   PGC_SIGHUP, 0,
							   check_brokers, NULL, NULL);
	DefineCustomStringVariable("esrc.database",
							   "Database whose events the forwarder publishes when esrc.databases is empty.",
							   "Changing it stops that database's forwarder and starts one for the new database.",
							   &esrc_database,
							   "postgres",
							   PGC_SIGHUP, 0,
							   check_database, NULL, NULL);
	DefineCustomStringVariable("esrc.databases",
							   "Databases whose events are forwarded, one worker each: names separated by commas, or * for every database with esrc.",
							   "Empty means the one database of esrc.database.",
							   &esrc_databases,
							   "",
							   PGC_SIGHUP, GUC_LIST_INPUT,
							   check_databases, NULL, NULL);
	DefineCustomIntVariable("esrc.max_forwarders",
							"Most forwarder workers (databases forwarded at once); sizes their status slots in shared memory.",
							"Each worker is a background worker: max_worker_processes must leave room for them.",
							&esrc_max_forwarders,
							8,
							1,
							1024,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomStringVariable("esrc.kafka_topic",
							   "Kafka topic of an event; {category} is replaced by the stream's category, {database} by the database's name.",
							   NULL,
							   &esrc_kafka_topic_template,
							   "esrc.{category}",
							   PGC_SIGHUP, 0,
							   check_topic_template, NULL, NULL);
	DefineCustomStringVariable("esrc.kafka_offsets_topic",
							   "Compacted Kafka topic of the forwarding position: committed with the records in exactly_once mode, written after delivery in at_least_once mode.",
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

	DefineCustomBoolVariable("esrc.kafka_position_record",
							 "In at_least_once mode, writes the position record to esrc.kafka_offsets_topic after each delivery and checks it against the log at connect (divergence after a failover).",
							 "exactly_once mode always does. Off: at_least_once mode neither writes nor reads the offsets topic, and a divergence goes unnoticed.",
							 &esrc_kafka_position_record,
							 true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("esrc.forwarder_log_batches",
							 "Logs one line per forwarded batch with its positions and when it passed each step, and one per committed appending transaction with when it became visible.",
							 "For latency measurements (bench/forward); times are microseconds since the Unix epoch.",
							 &esrc_forwarder_log_batches,
							 false,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
	fwd_define_standbys_guc();
}
