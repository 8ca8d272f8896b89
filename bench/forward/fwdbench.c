/*
 * fwdbench: the Kafka side of bench/forward/run.sh.
 *
 *   fwdbench raw BROKER TOPIC N VALUE_BYTES [transactional BATCH]
 *       librdkafka's raw producer: N records shaped like the forwarder's
 *       (key = one of 1000 stream names, a JSON value of VALUE_BYTES, the
 *       same 11 CloudEvents headers), idempotent producer, acks=all,
 *       linger.ms=1 like the forwarder.  With "transactional BATCH", BATCH
 *       records per Kafka transaction, as the forwarder does.  Prints
 *       "raw_events_per_s <n>" measured from the first produce to the last
 *       delivery report (or commit).
 *
 *   fwdbench latency BROKER COUNT TIMEOUT_S TOPIC...
 *       A read_committed consumer from the end of the topics; it prints
 *       "ready" once the group has assigned it the partitions and it has
 *       fetched to the end of each (so that joining the group and the
 *       first fetches are not measured).  For each
 *       record: visible_us = time it reached this consumer - ce_time
 *       (recorded_at, taken inside esrc.append, so this includes the
 *       append's own commit); and, when the topic uses LogAppendTime,
 *       broker_ms = broker append time - ce_time (millisecond resolution).
 *       Prints percentiles after COUNT records or TIMEOUT_S seconds.  With
 *       FWDBENCH_RECORDS=FILE, also writes one line per record to FILE:
 *       "position received_us log_append_ms" (ce_esrcposition, when this
 *       consumer had it in microseconds since the epoch, the broker's
 *       LogAppendTime or -1), for run.sh to match with commit timestamps.
 *
 *   fwdbench txnfloor BROKER TOPIC OFFSETS_TOPIC RATE SECONDS
 *       The same-run baseline for the exactly_once latency: a sequential
 *       exactly-once forwarder with no database behind it (see txnfloor()).
 *       Prints "floor_commit_to_kafka_ack n= p50= p90= p99= max=" and the
 *       per-batch split.  FWDBENCH_FLOOR_DEBUG=protocol (any librdkafka
 *       "debug" value) logs its requests to stderr, e.g. to count
 *       AddPartitionsToTxn requests per transaction.
 *
 * Build: cc -O2 -o fwdbench bench/forward/fwdbench.c -lrdkafka -lm
 */
#include <librdkafka/rdkafka.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define Max64(a, b) ((a) > (b) ? (a) : (b))
#define unused_arg __attribute__((unused))

static void
die(const char *msg, const char *detail)
{
	fprintf(stderr, "fwdbench: %s%s%s\n", msg, detail ? ": " : "", detail ? detail : "");
	exit(1);
}

static int64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void
set(rd_kafka_conf_t *conf, const char *k, const char *v)
{
	char		err[512];

	if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK)
		die(k, err);
}

static long delivered = 0;
static long failed = 0;

static void
dr_cb(rd_kafka_t *rk unused_arg, const rd_kafka_message_t *m, void *opaque unused_arg)
{
	if (m->err)
		failed++;
	else
		delivered++;
}

/*
 * One record shaped like the forwarder's: key = stream, a JSON value, the
 * CloudEvents headers and esrc's extension headers.  Waits while the
 * local queue is full.
 */
static void
produce_shaped(rd_kafka_t *rk, const char *topic, const char *key,
			   const char *value, const char *ver, const char *pos)
{
	rd_kafka_resp_err_t e;

	do
	{
		e = rd_kafka_producev(rk,
							  RD_KAFKA_V_TOPIC(topic),
							  RD_KAFKA_V_KEY(key, strlen(key)),
							  RD_KAFKA_V_VALUE((void *) value, strlen(value)),
							  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
							  RD_KAFKA_V_HEADER("ce_specversion", "1.0", -1),
							  RD_KAFKA_V_HEADER("ce_id", "6a0c2a8e-55d4-4a4f-9d47-6a8f0c6a1e01", -1),
							  RD_KAFKA_V_HEADER("ce_source", "/esrc/bench", -1),
							  RD_KAFKA_V_HEADER("ce_type", "Tick", -1),
							  RD_KAFKA_V_HEADER("ce_subject", key, -1),
							  RD_KAFKA_V_HEADER("ce_time", "2024-01-01T00:00:00.000000Z", -1),
							  RD_KAFKA_V_HEADER("content-type", "application/json", -1),
							  RD_KAFKA_V_HEADER("ce_esrcstream", key, -1),
							  RD_KAFKA_V_HEADER("ce_esrcversion", ver, -1),
							  RD_KAFKA_V_HEADER("ce_esrcposition", pos, -1),
							  RD_KAFKA_V_END);
		if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL)
			rd_kafka_poll(rk, 10);
		else if (e)
			die("producev", rd_kafka_err2str(e));
	} while (e);
}

static int
raw(int argc, char **argv)
{
	const char *broker = argv[2];
	const char *topic = argv[3];
	long		n = atol(argv[4]);
	int			size = atoi(argv[5]);
	int			txn_batch = (argc >= 8 && strcmp(argv[6], "transactional") == 0) ? atoi(argv[7]) : 0;
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;
	char		err[512];
	char	   *value = malloc(size + 32);
	int64_t		t0;
	double		secs;
	long		i;

	set(conf, "bootstrap.servers", broker);
	set(conf, "enable.idempotence", "true");
	set(conf, "acks", "all");
	set(conf, "linger.ms", "1");
	set(conf, "partitioner", "murmur2_random");
	set(conf, "queue.buffering.max.messages", "1000000");
	if (txn_batch > 0)
	{
		char		id[64];

		snprintf(id, sizeof(id), "fwdbench-%ld", (long) getpid());
		set(conf, "transactional.id", id);
	}
	if (getenv("FWDBENCH_PROPS"))
	{
		/* extra properties: "name=value,name=value" */
		char	   *props = strdup(getenv("FWDBENCH_PROPS"));
		char	   *save = NULL;
		char	   *kv;

		for (kv = strtok_r(props, ",", &save); kv; kv = strtok_r(NULL, ",", &save))
		{
			char	   *eq = strchr(kv, '=');

			if (!eq)
				die("FWDBENCH_PROPS", kv);
			*eq = '\0';
			set(conf, kv, eq + 1);
		}
	}
	rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (!rk)
		die("producer", err);
	if (txn_batch > 0)
	{
		rd_kafka_error_t *e = rd_kafka_init_transactions(rk, 30000);

		if (e)
			die("init_transactions", rd_kafka_error_string(e));
	}

	/* a JSON value of the requested size */
	snprintf(value, size + 32, "{\"i\": 0, \"pad\": \"");
	while ((int) strlen(value) < size - 2)
		strcat(value, "x");
	strcat(value, "\"}");

	t0 = now_us();
	for (i = 0; i < n; i++)
	{
		char		key[32];
		char		pos[24];
		char		ver[24];

		if (txn_batch > 0 && i % txn_batch == 0)
		{
			rd_kafka_error_t *te;

			if (i > 0 && (te = rd_kafka_commit_transaction(rk, 60000)))
				die("commit_transaction", rd_kafka_error_string(te));
			if ((te = rd_kafka_begin_transaction(rk)))
				die("begin_transaction", rd_kafka_error_string(te));
		}
		snprintf(key, sizeof(key), "bench-%ld", i % 1000);
		snprintf(pos, sizeof(pos), "%ld", i + 1);
		snprintf(ver, sizeof(ver), "%ld", i / 1000);
		produce_shaped(rk, topic, key, value, ver, pos);
		rd_kafka_poll(rk, 0);
	}
	if (txn_batch > 0)
	{
		rd_kafka_error_t *te = rd_kafka_commit_transaction(rk, 60000);

		if (te)
			die("commit_transaction", rd_kafka_error_string(te));
	}
	while (delivered + failed < n)
		rd_kafka_poll(rk, 100);
	secs = (now_us() - t0) / 1e6;
	printf("raw_events_per_s %.0f\n", n / secs);
	printf("raw_seconds %.2f\n", secs);
	printf("raw_failed %ld\n", failed);
	rd_kafka_destroy(rk);
	return failed ? 1 : 0;
}

static int
cmp64(const void *a, const void *b)
{
	int64_t		x = *(const int64_t *) a;
	int64_t		y = *(const int64_t *) b;

	return x < y ? -1 : x > y;
}

/* ce_time "YYYY-MM-DDTHH:MM:SS.ffffffZ" in microseconds since the epoch */
static int64_t
parse_ce_time(const char *s, size_t len)
{
	struct tm	tm;
	char		buf[40];
	int			usec = 0;

	if (len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	memset(&tm, 0, sizeof(tm));
	if (sscanf(buf, "%4d-%2d-%2dT%2d:%2d:%2d.%6dZ", &tm.tm_year, &tm.tm_mon,
			   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &usec) != 7)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t) timegm(&tm) * 1000000 + usec;
}

static void
print_pct(const char *name, int64_t *v, long n, double scale, const char *unit)
{
	if (n == 0)
	{
		printf("%s none\n", name);
		return;
	}
	qsort(v, n, sizeof(int64_t), cmp64);
	printf("%s n=%ld p50=%.2f%s p90=%.2f%s p99=%.2f%s max=%.2f%s\n", name, n,
		   v[n / 2] / scale, unit, v[(long) (n * 0.90)] / scale, unit,
		   v[(long) (n * 0.99)] / scale, unit, v[n - 1] / scale, unit);
}

static int
latency(int argc, char **argv)
{
	const char *broker = argv[2];
	long		count = atol(argv[3]);
	int			timeout_s = atoi(argv[4]);
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;
	rd_kafka_topic_partition_list_t *topics;
	char		err[512];
	int64_t    *visible = calloc(count, sizeof(int64_t));
	int64_t    *broker_ms = calloc(count, sizeof(int64_t));
	long		nv = 0,
				nb = 0;
	int64_t		deadline;
	int			i;
	char		group[64];

	FILE	   *records = NULL;

	if (getenv("FWDBENCH_RECORDS"))
	{
		records = fopen(getenv("FWDBENCH_RECORDS"), "w");
		if (!records)
			die("cannot write", getenv("FWDBENCH_RECORDS"));
	}
	snprintf(group, sizeof(group), "fwdbench-%ld", (long) getpid());
	set(conf, "bootstrap.servers", broker);
	set(conf, "group.id", group);
	set(conf, "isolation.level", "read_committed");
	set(conf, "auto.offset.reset", "latest");
	set(conf, "enable.auto.commit", "false");
	set(conf, "fetch.wait.max.ms", "100");
	set(conf, "fetch.error.backoff.ms", "5");
	set(conf, "enable.partition.eof", "true");
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
	if (!rk)
		die("consumer", err);
	rd_kafka_poll_set_consumer(rk);
	topics = rd_kafka_topic_partition_list_new(argc - 5);
	for (i = 5; i < argc; i++)
		rd_kafka_topic_partition_list_add(topics, argv[i], RD_KAFKA_PARTITION_UA);
	if (rd_kafka_subscribe(rk, topics))
		die("subscribe", NULL);
	/*
	 * Ready once the group has assigned us the partitions and a fetch has
	 * reached the end of each of them: the group join, the offset lookup
	 * and the first fetches are then behind us, not in the measurement.
	 */
	fprintf(stderr, "fwdbench: waiting for partition assignment and the first fetches\n");
	{
		int			assigned = 0;
		int			eofs = 0;

		while (assigned == 0 || eofs < assigned)
		{
			rd_kafka_topic_partition_list_t *a = NULL;
			rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);

			if (m)
			{
				if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
					eofs++;
				rd_kafka_message_destroy(m);
			}
			if (assigned == 0 && rd_kafka_assignment(rk, &a) == 0 && a)
				assigned = a->cnt;
			if (a)
				rd_kafka_topic_partition_list_destroy(a);
		}
	}
	printf("ready\n");
	fflush(stdout);

	deadline = now_us() + (int64_t) timeout_s * 1000000;
	while (nv < count && now_us() < deadline)
	{
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
		int64_t		t = now_us();
		rd_kafka_headers_t *h;
		const void *v;
		size_t		vs;

		if (!m)
			continue;
		if (!m->err && rd_kafka_message_headers(m, &h) == 0 &&
			rd_kafka_header_get_last(h, "ce_time", &v, &vs) == 0)
		{
			int64_t		ce = parse_ce_time(v, vs);
			rd_kafka_timestamp_type_t tt;
			int64_t		ts = rd_kafka_message_timestamp(m, &tt);

			if (ce > 0)
			{
				visible[nv++] = t - ce;
				if (tt == RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME)
					broker_ms[nb++] = ts * 1000 - ce;
			}
			if (records &&
				rd_kafka_header_get_last(h, "ce_esrcposition", &v, &vs) == 0 && vs < 24)
			{
				char		pos[24];

				memcpy(pos, v, vs);
				pos[vs] = '\0';
				fprintf(records, "%s %" PRId64 " %" PRId64 "\n", pos, t,
						tt == RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME ? (int64_t) ts : (int64_t) -1);
			}
		}
		rd_kafka_message_destroy(m);
	}
	print_pct("latency_commit_to_consumer", visible, nv, 1000.0, "ms");
	print_pct("latency_commit_to_broker_append", broker_ms, nb, 1000.0, "ms");
	if (records)
		fclose(records);
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	return 0;
}

/*
 * txnfloor: what a sequential exactly-once forwarder with no database
 * behind it achieves.  Events "commit" at RATE per second (exponential
 * gaps, as pgbench -R); the loop takes every event due so far into one
 * Kafka transaction (records shaped like the forwarder's, plus a position
 * record to a compacted topic), waits for every delivery report and
 * commits; two transactional producers take turns, and the next one's
 * transaction is begun while this one's records are on their way, as the
 * forwarder does.  An event's latency is from its due time to commit_transaction()
 * returning.  The first 2 s are warm-up and not counted.
 */
static int	floor_outstanding[2];

static void
floor_dr_cb(rd_kafka_t *rk unused_arg, const rd_kafka_message_t *m, void *opaque)
{
	if (m->err)
		die("delivery failed", rd_kafka_err2str(m->err));
	(*(int *) opaque)--;
}

static void
create_topic(rd_kafka_t *rk, const char *name, int compacted)
{
	rd_kafka_NewTopic_t *nt;
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
	rd_kafka_event_t *ev;
	const rd_kafka_CreateTopics_result_t *res;
	const rd_kafka_topic_result_t **tr;
	size_t		n;
	char		err[512];

	nt = rd_kafka_NewTopic_new(name, 1, -1, err, sizeof(err));
	if (!nt)
		die("NewTopic", err);
	if (compacted)
		rd_kafka_NewTopic_set_config(nt, "cleanup.policy", "compact");
	rd_kafka_CreateTopics(rk, &nt, 1, NULL, q);
	ev = rd_kafka_queue_poll(q, 30000);
	if (!ev)
		die("CreateTopics", "timed out");
	res = rd_kafka_event_CreateTopics_result(ev);
	tr = rd_kafka_CreateTopics_result_topics(res, &n);
	if (n != 1 || (rd_kafka_topic_result_error(tr[0]) &&
				   rd_kafka_topic_result_error(tr[0]) != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS))
		die("CreateTopics", n == 1 ? rd_kafka_topic_result_error_string(tr[0]) : name);
	rd_kafka_event_destroy(ev);
	rd_kafka_NewTopic_destroy(nt);
	rd_kafka_queue_destroy(q);
}

static int
txnfloor(int argc unused_arg, char **argv)
{
	const char *broker = argv[2];
	const char *topic = argv[3];
	const char *offsets_topic = argv[4];
	double		rate = atof(argv[5]);
	double		secs = atof(argv[6]);
	long		n = (long) (rate * secs);
	int64_t    *due = malloc(sizeof(int64_t) * n);
	int64_t    *lat = malloc(sizeof(int64_t) * n);
	int64_t    *acks = malloc(sizeof(int64_t) * n);
	int64_t    *commits = malloc(sizeof(int64_t) * n);
	int64_t    *queues = malloc(sizeof(int64_t) * n);
	long		nlat = 0;
	long		next = 0;
	long		batches = 0;
	long		counted_batches = 0;
	double		busy_us = 0;
	rd_kafka_t *rks[2];
	char		err[512];
	int			p;
	int64_t		t0,
				warm;
	double		gap = 0;
	unsigned short seed[3] = {1, 2, 3};

	for (p = 0; p < 2; p++)
	{
		rd_kafka_conf_t *conf = rd_kafka_conf_new();
		char		id[64];
		rd_kafka_error_t *e;

		snprintf(id, sizeof(id), "fwdbench-floor-%ld-%d", (long) getpid(), p);
		set(conf, "bootstrap.servers", broker);
		set(conf, "transactional.id", id);
		set(conf, "linger.ms", "1");
		set(conf, "socket.nagle.disable", "true");
		set(conf, "partitioner", "murmur2_random");
		if (getenv("FWDBENCH_FLOOR_DEBUG"))
			set(conf, "debug", getenv("FWDBENCH_FLOOR_DEBUG"));
		rd_kafka_conf_set_dr_msg_cb(conf, floor_dr_cb);
		rd_kafka_conf_set_opaque(conf, &floor_outstanding[p]);
		rks[p] = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
		if (!rks[p])
			die("producer", err);
		if ((e = rd_kafka_init_transactions(rks[p], 30000)))
			die("init_transactions", rd_kafka_error_string(e));
	}
	create_topic(rks[0], topic, 0);
	create_topic(rks[0], offsets_topic, 1);

	t0 = now_us() + 100000;
	warm = t0 + 2000000;
	for (long i = 0; i < n; i++)
	{
		due[i] = t0 + (int64_t) gap;
		gap += -log(1.0 - erand48(seed)) * 1e6 / rate;
	}

	p = 0;
	while (next < n)
	{
		int64_t		t = now_us();
		long		upto = next;
		rd_kafka_t *rk = rks[p];
		rd_kafka_error_t *e;
		char		posval[64];
		int64_t		done,
					queued,
					acked;

		while (upto < n && due[upto] <= t)
			upto++;
		if (upto == next)
		{
			usleep((useconds_t) Max64(due[next] - t, 1));
			continue;
		}
		if (batches == 0 && (e = rd_kafka_begin_transaction(rk)))
			die("begin_transaction", rd_kafka_error_string(e));
		floor_outstanding[p] = (int) (upto - next) + 1;
		for (long i = next; i < upto; i++)
		{
			char		key[32];
			char		pos[24];

			snprintf(key, sizeof(key), "lat-%ld", i % 100);
			snprintf(pos, sizeof(pos), "%ld", i + 1);
			produce_shaped(rk, topic, key, "{\"x\": 1}", "0", pos);
		}
		snprintf(posval, sizeof(posval), "{\"position\": %ld}", upto);
		if (rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(offsets_topic),
							  RD_KAFKA_V_KEY("fwdbench", 8),
							  RD_KAFKA_V_VALUE(posval, strlen(posval)),
							  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
							  RD_KAFKA_V_END))
			die("producev", "position record");
		queued = now_us();
		/* begin the other producer's next transaction now, as esrc does */
		if ((e = rd_kafka_begin_transaction(rks[1 - p])))
			die("begin_transaction", rd_kafka_error_string(e));
		while (floor_outstanding[p] > 0)
			rd_kafka_flush(rk, 200);
		acked = now_us();
		if ((e = rd_kafka_commit_transaction(rk, 30000)))
			die("commit_transaction", rd_kafka_error_string(e));
		done = now_us();
		batches++;
		if (due[next] >= warm)
		{
			queues[counted_batches] = queued - t;
			acks[counted_batches] = acked - queued;
			commits[counted_batches] = done - acked;
			counted_batches++;
			busy_us += done - t;
		}
		for (long i = next; i < upto; i++)
			if (due[i] >= warm)
				lat[nlat++] = done - due[i];
		next = upto;
		p = 1 - p;
	}
	print_pct("floor_commit_to_kafka_ack", lat, nlat, 1000.0, "ms");
	print_pct("floor_batch_turn_to_queued", queues, counted_batches, 1000.0, "ms");
	print_pct("floor_batch_queued_to_acked", acks, counted_batches, 1000.0, "ms");
	print_pct("floor_batch_acked_to_committed", commits, counted_batches, 1000.0, "ms");
	printf("floor_batches n=%ld events_per_batch=%.1f busy_per_batch=%.2fms\n",
		   counted_batches, counted_batches ? (double) nlat / counted_batches : 0.0,
		   counted_batches ? busy_us / counted_batches / 1000.0 : 0.0);
	for (p = 0; p < 2; p++)
		rd_kafka_destroy(rks[p]);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc >= 6 && strcmp(argv[1], "raw") == 0)
		return raw(argc, argv);
	if (argc >= 6 && strcmp(argv[1], "latency") == 0)
		return latency(argc, argv);
	if (argc >= 7 && strcmp(argv[1], "txnfloor") == 0)
		return txnfloor(argc, argv);
	fprintf(stderr, "usage: fwdbench raw BROKER TOPIC N VALUE_BYTES [transactional BATCH]\n"
			"       fwdbench latency BROKER COUNT TIMEOUT_S TOPIC...\n"
			"       fwdbench txnfloor BROKER TOPIC OFFSETS_TOPIC RATE SECONDS\n");
	return 2;
}
