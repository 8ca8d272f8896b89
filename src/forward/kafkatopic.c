/*-------------------------------------------------------------------------
 *
 * kafkatopic.c
 *	  Kafka topics for the forwarder: the cache of topic handles, topic
 *	  metadata, and the creation of a topic that does not exist yet.
 *
 * Each cache entry holds one rd_kafka_topic_t per producer; a record's
 * topic (EsrcKafkaRecord.topic) points at its entry.  Entries are
 * evicted only between batches (esrc_kafka_trim_topics, called before
 * the topics of a batch are resolved), never while a pass resolves
 * topics, and never one that a batch in flight uses: so a record's topic
 * pointer stays valid until its batch is finished.  The cache holds
 * ESRC_TOPIC_CACHE_SIZE handles between batches; one batch may use more.
 *
 * A topic that does not exist is created with the broker's default
 * partition count and replication factor (the offsets topic: one
 * partition, compacted).  POISON means a topic can never be used as
 * configured (invalid name, refused by the broker's policy or ACLs);
 * RETRY that Kafka did not answer.
 *
 * Talks to: kafka.c (the handle, the waits, the batches in flight),
 * kafkapos.c (the offsets topic's metadata), fwdsend.c
 * (resolve_topics).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <librdkafka/rdkafka.h>

#include "utils/hsearch.h"

#include "kafka.h"
#include "kafkaint.h"

/*
 * Topic handles kept between batches.  A batch may use more (they are
 * evicted only between batches, esrc_kafka_trim_topics); a test build
 * lowers it (make ESRC_TOPIC_CACHE_SIZE=8, test/run-45-forward-topic-cache.sh).
 */
#ifndef ESRC_TOPIC_CACHE_SIZE
#define ESRC_TOPIC_CACHE_SIZE	1024
#endif

/* Errors after which a record or topic can never succeed as it is. */
bool
kafka_is_poison(rd_kafka_resp_err_t e)
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
EsrcKafkaStatus
kafka_create_topic(EsrcKafka *k, const char *name, int partitions, bool compacted,
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
			if (kafka_elapsed_ms(start) > ADMIN_MS + 5000)
				break;
			kafka_between_slices(start);
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
		status = kafka_is_poison(e) ? ESRC_KAFKA_POISON : ESRC_KAFKA_RETRY;
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
EsrcKafkaStatus
kafka_topic_metadata(EsrcKafka *k, rd_kafka_t *rk, rd_kafka_topic_t *rkt,
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
		if (kafka_elapsed_ms(start) > METADATA_MS)
		{
			snprintf(err, errlen, "cannot get metadata of topic \"%s\": %s",
					 name, rd_kafka_err2str(e));
			return ESRC_KAFKA_RETRY;
		}
		kafka_between_slices(start);
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
		status = kafka_is_poison(md->topics[0].err) ? ESRC_KAFKA_POISON : ESRC_KAFKA_RETRY;
	}
	rd_kafka_metadata_destroy(md);
	return status;
}

/* The topic cache of a new handle, in k->cxt. */
void
kafka_topics_create(EsrcKafka *k)
{
	HASHCTL		hctl;

	memset(&hctl, 0, sizeof(hctl));
	hctl.keysize = MAX_TOPIC_NAME + 1;
	hctl.entrysize = sizeof(EsrcKafkaTopic);
	hctl.hcxt = k->cxt;
	k->topics = hash_create("esrc kafka topics", 64, &hctl,
							HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

void
kafka_topic_destroy(EsrcKafka *k, EsrcKafkaTopic *t)
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
				kafka_topic_destroy(k, t);
				hash_search(k->topics, key, HASH_REMOVE, NULL);
				return ESRC_KAFKA_POISON;
			}
		}
	}

	status = kafka_topic_metadata(k, k->rks[0], t->rkt[0], name, &partitions, &missing, err, errlen);
	if (status == ESRC_KAFKA_POISON && missing)
	{
		status = kafka_create_topic(k, name, -1, false, err, errlen);
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
 * uses.  Called before the topics of a batch are resolved (fwdsend.c,
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
		kafka_topic_destroy(k, t);
		/* dynahash allows removing the entry just returned */
		hash_search(k->topics, t->name, HASH_REMOVE, NULL);
	}
}

