/*-------------------------------------------------------------------------
 *
 * kafkapos.c
 *	  The position record: its value, producing it (in a Kafka transaction
 *	  in exactly-once mode, after delivery in at-least-once mode), and
 *	  reading the last one back from the offsets topic at connect.
 *
 * The position record (key = the forwarder's client id, value =
 * {"log_id":..,"database":..,"position":N,"id":"<uuid>"}, real JSON, read
 * back with PostgreSQL's JSON parser) goes to the compacted offsets topic
 * in the same Kafka transaction as the records up to N (kafka.c,
 * esrc_kafka_start).  "id" is the id of the event at position N (0.3.0
 * on): at connect the worker checks it against the log (fwddiverge.c),
 * so that a log that lost or replaced that event (a promoted standby that
 * lagged) is noticed.  At connect, after init_transactions() has fenced
 * any earlier incarnation of the same client id and completed or aborted
 * its open transaction, a read_committed consumer reads the offsets topic
 * to its end to learn N and its id (kafka_read_position).  Only the
 * top-level members "position" and "id" count; a record without exactly
 * one integer "position" is ignored; one without a top-level string "id"
 * of uuid length (0.2.0 wrote none) is read with an id of "".
 *
 * At least once (0.3.0 on): the same record, under the same key, goes to
 * the same topic (and so, by the key, to the same partition) outside any
 * transaction, once the delivery reports of the records up to N are in
 * (kafka_position_delivered).  It costs one small record per batch and
 * nothing on the batch's path; it may lag what Kafka has (a worker that
 * stops between a delivery and its record), never lead it.  The choice
 * against reading the tail of the data topics is in fwddiverge.c.
 *
 * Exit: the consumer is known to esrc_kafka_shutdown() (through
 * kafka_position_shutdown) from the moment it exists, so a SIGTERM in any
 * wait of the read still closes it.
 *
 * Talks to: kafka.c (connect calls the read; the send produces the
 * record), kafkaconf.c (the consumer's configuration), kafkatopic.c (the
 * offsets topic's metadata), compat.h (the JSON parser's API).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <librdkafka/rdkafka.h>

#include "common/jsonapi.h"
#include "utils/json.h"

#include "base/base.h"
#include "kafka.h"
#include "kafkaint.h"

/* The consumer of kafka_read_position() while it exists, for shutdown. */
static rd_kafka_t *live_consumer = NULL;

static void
destroy_consumer(rd_kafka_t *rk)
{
	if (rk == live_consumer)
		live_consumer = NULL;
	rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
}

/*
 * At the worker's exit (esrc_kafka_shutdown): close the consumer of a
 * read that a SIGTERM or the postmaster's death interrupted.
 */
void
kafka_position_shutdown(void)
{
	if (live_consumer != NULL)
		destroy_consumer(live_consumer);
}

/*
 * The value of a position record up to N: {"log_id":..,"database":..,
 * "position": in the memory context of the caller (N and ,"id":".."}
 * follow, kafka_produce_position).
 */
char *
kafka_position_prefix(const char *log_id, const char *database)
{
	StringInfoData v;

	initStringInfo(&v);
	appendStringInfoString(&v, "{\"log_id\":");
	escape_json(&v, log_id);
	appendStringInfoString(&v, ",\"database\":");
	escape_json(&v, database);
	appendStringInfoString(&v, ",\"position\":");
	return v.data;
}

/*
 * Reading a position record's value: {"log_id":..,"database":..,
 * "position":N} as written by kafka_produce_position().  Only the top-level
 * member "position" counts, and it must be there once, as an integer.
 */
typedef struct PositionParse
{
	int			depth;			/* of objects and arrays */
	bool		want;			/* the next value is the top "position" */
	bool		want_id;		/* the next value is the top "id" */
	int			found;
	bool		bad;
	int64		position;
	char		id[ESRC_KAFKA_ID_LEN];	/* "" = none */
} PositionParse;

static ESRC_JSON_ACTION
pp_nest_start(void *state)
{
	PositionParse *pp = (PositionParse *) state;

	if (pp->want)
		pp->bad = true;			/* "position" is not a number */
	pp->want = false;
	pp->want_id = false;
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
	pp->want_id = (pp->depth == 1 && strcmp(fname, "id") == 0);
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

	if (pp->want_id)
	{
		pp->want_id = false;
		pp->id[0] = '\0';
		if (tokentype == JSON_TOKEN_STRING && token != NULL &&
			strlen(token) == ESRC_KAFKA_ID_LEN - 4)
			strlcpy(pp->id, token, sizeof(pp->id));
	}
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
 * The position of a position record's value; -1 when it has none.  The id
 * of the event there into id (ESRC_KAFKA_ID_LEN bytes), "" when it has
 * none.  Frees what it allocates: kafka_read_position() reads every
 * record of the topic.
 */
static int64
parse_position(const char *value, size_t len, char *id)
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
	strlcpy(id, pp.id, ESRC_KAFKA_ID_LEN);
	return pp.position;
}

/*
 * Reading the offsets topic to its end: the consumer, and per partition
 * the offset that counts as the end (the high watermark at the first end
 * of partition, -1 until then) and whether it was reached.
 */
typedef struct PositionRead
{
	rd_kafka_t *rk;
	const char *topic;
	rd_kafka_topic_partition_list_t *parts;
	int			npart;
	int64	   *target;
	bool	   *done;
	int			ndone;
	int64		found;			/* last position under our client id */
	char		found_id[ESRC_KAFKA_ID_LEN];	/* the id of its event */
	int64		nrecords;
} PositionRead;

/*
 * The read_committed consumer of the offsets topic, assigned to every
 * partition from the beginning, into pr.  Known to
 * esrc_kafka_shutdown() from the moment it exists.
 */
static EsrcKafkaStatus
open_consumer(EsrcKafka *k, PositionRead *pr, char *err, size_t errlen)
{
	rd_kafka_conf_t *conf;
	rd_kafka_topic_t *rkt;
	char		errstr[512];
	bool		missing;
	EsrcKafkaStatus status;
	int			i;

	conf = kafka_build_conf(k, CONF_CONSUMER, err, errlen);
	if (conf == NULL)
		return ESRC_KAFKA_CONFIG;
	pr->rk = kafka_new_rk(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (pr->rk == NULL)
	{
		rd_kafka_conf_destroy(conf);
		snprintf(err, errlen, "cannot create the Kafka consumer: %s", errstr);
		return ESRC_KAFKA_CONFIG;
	}
	live_consumer = pr->rk;
	rd_kafka_poll_set_consumer(pr->rk);
	rd_kafka_set_log_queue(pr->rk, NULL);

	rkt = rd_kafka_topic_new(pr->rk, pr->topic, NULL);
	status = kafka_topic_metadata(k, pr->rk, rkt, pr->topic, &pr->npart, &missing, err, errlen);
	rd_kafka_topic_destroy(rkt);
	if (status != ESRC_KAFKA_OK)
	{
		destroy_consumer(pr->rk);
		return status == ESRC_KAFKA_POISON && !missing ? ESRC_KAFKA_FATAL : ESRC_KAFKA_RETRY;
	}

	pr->parts = rd_kafka_topic_partition_list_new(pr->npart);
	for (i = 0; i < pr->npart; i++)
		rd_kafka_topic_partition_list_add(pr->parts, pr->topic, i)->offset =
			RD_KAFKA_OFFSET_BEGINNING;
	if (rd_kafka_assign(pr->rk, pr->parts) != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		rd_kafka_topic_partition_list_destroy(pr->parts);
		destroy_consumer(pr->rk);
		snprintf(err, errlen, "cannot assign the partitions of topic \"%s\"", pr->topic);
		return ESRC_KAFKA_RETRY;
	}
	return ESRC_KAFKA_OK;
}

/* After an end of partition short of the target, look again. */
static void
check_targets(PositionRead *pr)
{
	int			i;

	for (i = 0; i < pr->npart; i++)
	{
		rd_kafka_topic_partition_list_t *pos;

		if (pr->done[i] || pr->target[i] < 0)
			continue;
		pos = rd_kafka_topic_partition_list_new(1);
		rd_kafka_topic_partition_list_add(pos, pr->topic, i);
		if (rd_kafka_position(pr->rk, pos) == RD_KAFKA_RESP_ERR_NO_ERROR &&
			pos->elems[0].offset >= pr->target[i])
		{
			pr->done[i] = true;
			pr->ndone++;
		}
		rd_kafka_topic_partition_list_destroy(pos);
	}
}

/* An end of partition: the first sets the target; is it reached? */
static void
partition_eof(PositionRead *pr, rd_kafka_message_t *m)
{
	int			p = m->partition;
	int64_t		low,
				high;

	if (p < 0 || p >= pr->npart || pr->done[p])
		return;
	if (pr->target[p] < 0 &&
		rd_kafka_get_watermark_offsets(pr->rk, pr->topic, p, &low, &high) ==
		RD_KAFKA_RESP_ERR_NO_ERROR)
		pr->target[p] = high;
	if (pr->target[p] < 0 || m->offset >= pr->target[p])
	{
		pr->done[p] = true;
		pr->ndone++;
	}
}

/*
 * Read the offsets topic with a read_committed consumer up
 * to its end and return the last position recorded under our client id
 * (0 when there is none), and the id of the event there into position_id
 * (ESRC_KAFKA_ID_LEN bytes, "" when there is none).  "The end" must include every transaction that
 * was open when we started: init_transactions() has completed ours, but
 * an open transaction of another producer on the topic holds back what a
 * read_committed consumer sees (its last stable offset).  So we read on
 * until we have passed the high watermark seen at the first end of
 * partition, not just to the first end of partition.
 */
EsrcKafkaStatus
kafka_read_position(EsrcKafka *k, const char *offsets_topic, int64 *position,
					char *position_id, char *err, size_t errlen)
{
	PositionRead pr;
	EsrcKafkaStatus status;
	instr_time	start;
	size_t		keylen = strlen(k->client_id);
	int			i;

	memset(&pr, 0, sizeof(pr));
	pr.topic = offsets_topic;
	status = open_consumer(k, &pr, err, errlen);
	if (status != ESRC_KAFKA_OK)
		return status;

	pr.target = palloc(sizeof(int64) * pr.npart);
	pr.done = palloc0(sizeof(bool) * pr.npart);
	for (i = 0; i < pr.npart; i++)
		pr.target[i] = -1;

	INSTR_TIME_SET_CURRENT(start);
	while (pr.ndone < pr.npart)
	{
		rd_kafka_message_t *m = rd_kafka_consumer_poll(pr.rk, SLICE_MS);

		if (m == NULL)
		{
			if (kafka_elapsed_ms(start) > POSITION_BUDGET_MS)
			{
				snprintf(err, errlen,
						 "could not read topic \"%s\" to its end within %d s",
						 offsets_topic, POSITION_BUDGET_MS / 1000);
				status = ESRC_KAFKA_RETRY;
				break;
			}
			check_targets(&pr);
			kafka_between_slices(start);
			continue;
		}
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
			partition_eof(&pr, m);
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
			pr.nrecords++;
			if (m->key_len == keylen && memcmp(m->key, k->client_id, keylen) == 0 &&
				m->payload != NULL)
			{
				char		id[ESRC_KAFKA_ID_LEN];
				int64		v = parse_position((const char *) m->payload, m->len, id);

				if (v >= 0)
				{
					pr.found = v;
					strlcpy(pr.found_id, id, sizeof(pr.found_id));
				}
			}
		}
		rd_kafka_message_destroy(m);
	}

	rd_kafka_topic_partition_list_destroy(pr.parts);
	destroy_consumer(pr.rk);
	pfree(pr.target);
	pfree(pr.done);
	esrc_kafka_emit_log();
	if (status == ESRC_KAFKA_OK)
	{
		*position = pr.found;
		strlcpy(position_id, pr.found_id, ESRC_KAFKA_ID_LEN);
		ereport(DEBUG1,
				(errmsg("esrc forwarder: read " INT64_FORMAT " records of topic \"%s\" in " INT64_FORMAT " ms",
						pr.nrecords, offsets_topic, kafka_elapsed_ms(start))));
	}
	return status;
}

/*
 * A position record, on producer p: up to position,
 * whose event has the id id (a uuid's text: no character to escape).
 */
rd_kafka_resp_err_t
kafka_produce_position(EsrcKafka *k, int p, int64 position, const char *id)
{
	char	   *value = psprintf("%s" INT64_FORMAT ",\"id\":\"%s\"}", k->position_prefix,
								 position, id);
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
 * The offsets topic's handles, one per producer; create the topic if it
 * does not exist.  Both modes (the position record is written in both).
 */
EsrcKafkaStatus
kafka_open_offsets_topic(EsrcKafka *k, const char *offsets_topic, char *err, size_t errlen)
{
	EsrcKafkaStatus status;
	int			partitions;
	bool		missing;
	int			i;

	for (i = 0; i < k->nrk; i++)
		k->offsets_rkts[i] = rd_kafka_topic_new(k->rks[i], offsets_topic, NULL);
	status = kafka_topic_metadata(k, k->rks[0], k->offsets_rkts[0], offsets_topic,
								  &partitions, &missing, err, errlen);
	if (status == ESRC_KAFKA_POISON && missing)
	{
		status = kafka_create_topic(k, offsets_topic, 1, true, err, errlen);
		if (status == ESRC_KAFKA_OK)
			ereport(LOG,
					(errmsg("esrc forwarder: created compacted Kafka topic \"%s\" for the forwarding position",
							offsets_topic)));
	}
	if (status == ESRC_KAFKA_POISON)
		status = ESRC_KAFKA_FATAL;
	return status;
}

/*
 * At least once: the records up to position, whose event has the id id,
 * are delivered (their delivery reports are in); write the position
 * record, outside any transaction, on producer p.  Nothing waits for it:
 * its delivery report comes with the next batch's (or while idle,
 * esrc_kafka_poll) and is ignored, since the slot's generation has moved
 * on.  A record that is lost or not yet delivered leaves the last one in
 * Kafka behind what Kafka has, never ahead (fwddiverge.c says what that
 * means for the check).
 */
void
kafka_position_delivered(EsrcKafka *k, int p, int64 position, const char *id)
{
	rd_kafka_resp_err_t e;

	if (k->offsets_rkts[p] == NULL)
		return;
	e = kafka_produce_position(k, p, position, id);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
		ereport(DEBUG1,
				(errmsg("esrc forwarder: the position record after position " INT64_FORMAT " was not queued: %s",
						position, rd_kafka_err2str(e))));
}
