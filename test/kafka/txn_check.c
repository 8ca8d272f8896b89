/*
 * txn_check: proves that the system librdkafka (Debian 12: 2.0.2) can run
 * Kafka transactions against the broker started by test/kafka/broker.sh.
 *
 * Build:
 *   cc -O2 -Wall -Wextra -o txn_check test/kafka/txn_check.c -lrdkafka
 * Run:
 *   [TXN_CHECK_DEBUG=eos,protocol] ./txn_check BROKER TOPIC [COMPACTED_TOPIC]
 *     BROKER           e.g. 127.0.0.1:19092
 *     TOPIC            data topic, auto-created by the broker on first produce;
 *                      use a fresh name per run (the check expects exactly 3
 *                      committed records in it)
 *     COMPACTED_TOPIC  default TOPIC.pos; created here with the admin API
 *                      (rd_kafka_CreateTopics, cleanup.policy=compact)
 *
 * Steps (exit status 0 only if all of them succeed):
 *   1. admin: CreateTopics(COMPACTED_TOPIC, 1 partition, rf 1,
 *      cleanup.policy=compact); "already exists" is accepted so reruns work.
 *   2. transactional producer (transactional.id, enable.idempotence=true):
 *      init_transactions; begin; produce 1 record "aborted" to TOPIC; abort.
 *   3. begin; produce 3 records with headers to TOPIC and 1 keyed record
 *      (the "forwarding position") to COMPACTED_TOPIC; commit.
 *   4. read_committed consumer (assign, from the beginning, up to EOF) reads
 *      both topics and prints one line per record:
 *        topic<TAB>partition<TAB>offset<TAB>key<TAB>value<TAB>h1=v1,h2=v2
 *      It checks that TOPIC has exactly the 3 committed records (the aborted
 *      one is invisible) and COMPACTED_TOPIC has the position record.
 */
#include <librdkafka/rdkafka.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TMO_MS 30000

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "txn_check: FAIL: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static void set(rd_kafka_conf_t *conf, const char *k, const char *v)
{
	char err[512];
	if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK)
		die("config %s=%s: %s", k, v, err);
}

/* Frees and checks a transactional API error object. */
static double t0;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void txn_ok(const char *what, rd_kafka_error_t *error)
{
	if (!error) {
		fprintf(stderr, "txn_check: %s: ok (%.2fs)\n", what, now() - t0);
		return;
	}
	die("%s: %s (%s)%s%s%s", what, rd_kafka_error_string(error),
	    rd_kafka_error_name(error),
	    rd_kafka_error_is_fatal(error) ? " [fatal]" : "",
	    rd_kafka_error_is_retriable(error) ? " [retriable]" : "",
	    rd_kafka_error_txn_requires_abort(error) ? " [abortable]" : "");
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void)rk;
	(void)opaque;
	if (m->err)
		die("delivery to %s failed: %s", rd_kafka_topic_name(m->rkt),
		    rd_kafka_err2str(m->err));
}

static void create_compacted(const char *brokers, const char *topic)
{
	char err[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;
	rd_kafka_NewTopic_t *nt;
	rd_kafka_AdminOptions_t *opts;
	rd_kafka_queue_t *q;
	rd_kafka_event_t *ev;
	const rd_kafka_CreateTopics_result_t *res;
	const rd_kafka_topic_result_t **tr;
	size_t n;

	set(conf, "bootstrap.servers", brokers);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (!rk)
		die("admin client: %s", err);

	nt = rd_kafka_NewTopic_new(topic, 1, 1, err, sizeof(err));
	if (!nt)
		die("NewTopic: %s", err);
	if (rd_kafka_NewTopic_set_config(nt, "cleanup.policy", "compact"))
		die("NewTopic_set_config failed");

	opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
	if (rd_kafka_AdminOptions_set_operation_timeout(opts, TMO_MS, err,
							sizeof(err)))
		die("AdminOptions: %s", err);
	q = rd_kafka_queue_new(rk);
	rd_kafka_CreateTopics(rk, &nt, 1, opts, q);
	ev = rd_kafka_queue_poll(q, TMO_MS + 5000);
	if (!ev)
		die("CreateTopics: no result");
	if (rd_kafka_event_error(ev))
		die("CreateTopics: %s", rd_kafka_event_error_string(ev));
	res = rd_kafka_event_CreateTopics_result(ev);
	tr = rd_kafka_CreateTopics_result_topics(res, &n);
	if (n != 1)
		die("CreateTopics: %zu results", n);
	if (rd_kafka_topic_result_error(tr[0]) == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
		fprintf(stderr, "txn_check: compacted topic %s already exists\n", topic);
	else if (rd_kafka_topic_result_error(tr[0]))
		die("CreateTopics %s: %s", topic,
		    rd_kafka_topic_result_error_string(tr[0]));
	else
		fprintf(stderr, "txn_check: created compacted topic %s (%.2fs)\n", topic, now() - t0);

	rd_kafka_event_destroy(ev);
	rd_kafka_queue_destroy(q);
	rd_kafka_AdminOptions_destroy(opts);
	rd_kafka_NewTopic_destroy(nt);
	rd_kafka_destroy(rk);
}

static void produce(rd_kafka_t *rk, const char *topic, const char *key,
		    const char *value, int seq)
{
	char seqs[16];
	rd_kafka_resp_err_t e;

	snprintf(seqs, sizeof(seqs), "%d", seq);
	e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
			      RD_KAFKA_V_PARTITION(0),
			      RD_KAFKA_V_KEY(key, strlen(key)),
			      RD_KAFKA_V_VALUE((void *)value, strlen(value)),
			      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
			      RD_KAFKA_V_HEADER("esrc-seq", seqs, -1),
			      RD_KAFKA_V_HEADER("content-type",
						"application/json", -1),
			      RD_KAFKA_V_END);
	if (e)
		die("producev %s: %s", topic, rd_kafka_err2str(e));
}

static void transact(const char *brokers, const char *topic,
		     const char *ctopic)
{
	char err[512], txnid[128], val[128];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;
	int i;

	snprintf(txnid, sizeof(txnid), "txn_check-%s", topic);
	set(conf, "bootstrap.servers", brokers);
	set(conf, "transactional.id", txnid);
	set(conf, "enable.idempotence", "true");
	set(conf, "acks", "all");
	set(conf, "linger.ms", "5");
	if (getenv("TXN_CHECK_DEBUG")) /* e.g. TXN_CHECK_DEBUG=eos,protocol */
		set(conf, "debug", getenv("TXN_CHECK_DEBUG"));
	rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (!rk)
		die("producer: %s", err);

	txn_ok("init_transactions", rd_kafka_init_transactions(rk, TMO_MS));

	/* An aborted transaction: its record must stay invisible. */
	txn_ok("begin_transaction (to abort)", rd_kafka_begin_transaction(rk));
	produce(rk, topic, "k-aborted", "{\"n\":\"aborted\"}", 0);
	/* flush so that the record really is written to the log before the
	 * abort marker (otherwise abort just purges it from the local queue) */
	if (rd_kafka_flush(rk, TMO_MS))
		die("flush before abort timed out");
	txn_ok("abort_transaction", rd_kafka_abort_transaction(rk, TMO_MS));

	txn_ok("begin_transaction", rd_kafka_begin_transaction(rk));
	for (i = 1; i <= 3; i++) {
		char key[32];
		snprintf(key, sizeof(key), "k%d", i);
		snprintf(val, sizeof(val), "{\"n\":%d}", i);
		produce(rk, topic, key, val, i);
	}
	/* forwarding position in the compacted topic, same transaction */
	snprintf(val, sizeof(val), "{\"position\":3}");
	produce(rk, ctopic, "forwarder-1", val, 3);
	txn_ok("commit_transaction", rd_kafka_commit_transaction(rk, TMO_MS));

	rd_kafka_flush(rk, TMO_MS);
	rd_kafka_destroy(rk);
}

static void print_msg(const rd_kafka_message_t *m)
{
	rd_kafka_headers_t *hdrs = NULL;
	size_t idx;
	const char *name;
	const void *v;
	size_t vs;

	printf("%s\t%d\t%lld\t%.*s\t%.*s\t", rd_kafka_topic_name(m->rkt),
	       (int)m->partition, (long long)m->offset, (int)m->key_len,
	       m->key ? (const char *)m->key : "", (int)m->len,
	       m->payload ? (const char *)m->payload : "");
	if (!rd_kafka_message_headers(m, &hdrs))
		for (idx = 0; !rd_kafka_header_get_all(hdrs, idx, &name, &v, &vs); idx++)
			printf("%s%s=%.*s", idx ? "," : "", name, (int)vs,
			       v ? (const char *)v : "");
	printf("\n");
}

static void consume(const char *brokers, const char *topic, const char *ctopic)
{
	char err[512], gid[128];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;
	rd_kafka_topic_partition_list_t *parts;
	rd_kafka_resp_err_t e;
	int eofs = 0, ndata = 0, npos = 0, seen_aborted = 0;
	time_t deadline = time(NULL) + TMO_MS / 1000;

	snprintf(gid, sizeof(gid), "txn_check-%s", topic);
	set(conf, "bootstrap.servers", brokers);
	set(conf, "group.id", gid);
	set(conf, "isolation.level", "read_committed");
	set(conf, "enable.auto.commit", "false");
	set(conf, "enable.partition.eof", "true");
	set(conf, "auto.offset.reset", "earliest");
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
	if (!rk)
		die("consumer: %s", err);

	parts = rd_kafka_topic_partition_list_new(2);
	rd_kafka_topic_partition_list_add(parts, topic, 0)->offset =
		RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_topic_partition_list_add(parts, ctopic, 0)->offset =
		RD_KAFKA_OFFSET_BEGINNING;
	if ((e = rd_kafka_assign(rk, parts)))
		die("assign: %s", rd_kafka_err2str(e));
	rd_kafka_topic_partition_list_destroy(parts);

	while (eofs < 2) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 500);
		if (time(NULL) > deadline)
			die("consume: timed out (eofs=%d)", eofs);
		if (!m)
			continue;
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			eofs++;
		} else if (m->err) {
			die("consume: %s", rd_kafka_message_errstr(m));
		} else {
			print_msg(m);
			if (!strcmp(rd_kafka_topic_name(m->rkt), topic)) {
				ndata++;
				if (m->key_len == 9 && !memcmp(m->key, "k-aborted", 9))
					seen_aborted = 1;
			} else {
				npos++;
			}
		}
		rd_kafka_message_destroy(m);
	}
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);

	fprintf(stderr, "txn_check: read_committed: %d data record(s), %d position record(s) (%.2fs)\n",
		ndata, npos, now() - t0);
	if (seen_aborted)
		die("read_committed consumer saw the aborted record");
	if (ndata != 3)
		die("expected 3 committed records in %s, got %d", topic, ndata);
	if (npos < 1)
		die("expected the position record in %s", ctopic);
}

int main(int argc, char **argv)
{
	char ctopic[256];

	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: %s BROKER TOPIC [COMPACTED_TOPIC]\n", argv[0]);
		return 2;
	}
	if (argc == 4)
		snprintf(ctopic, sizeof(ctopic), "%s", argv[3]);
	else
		snprintf(ctopic, sizeof(ctopic), "%s.pos", argv[1 + 1]);

	t0 = now();
	fprintf(stderr, "txn_check: librdkafka %s, broker %s\n",
		rd_kafka_version_str(), argv[1]);
	create_compacted(argv[1], ctopic);
	transact(argv[1], argv[2], ctopic);
	consume(argv[1], argv[2], ctopic);
	fprintf(stderr, "txn_check: OK\n");
	return 0;
}
