/*
 * topic_config: set configuration entries of one Kafka topic, as an
 * operator would with kafka-configs.sh (AlterConfigs, which replaces the
 * topic's dynamic configuration with the entries given).
 *
 * Build: cc -O2 -o topic_config test/forward/topic_config.c -lrdkafka
 * Usage: topic_config BROKER TOPIC NAME=VALUE...
 */
#include <librdkafka/rdkafka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
die(const char *what, const char *detail)
{
	fprintf(stderr, "topic_config: %s: %s\n", what, detail);
	exit(1);
}

int
main(int argc, char **argv)
{
	char		err[512];
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	rd_kafka_ConfigResource_t *res;
	rd_kafka_AdminOptions_t *opts;
	rd_kafka_queue_t *q;
	rd_kafka_event_t *ev;
	const rd_kafka_AlterConfigs_result_t *result;
	const rd_kafka_ConfigResource_t **rres;
	size_t		n;
	int			i;

	if (argc < 4)
	{
		fprintf(stderr, "usage: %s BROKER TOPIC NAME=VALUE...\n", argv[0]);
		return 2;
	}
	conf = rd_kafka_conf_new();
	if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], err, sizeof(err)))
		die("bootstrap.servers", err);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (!rk)
		die("client", err);

	res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, argv[2]);
	for (i = 3; i < argc; i++)
	{
		char	   *eq = strchr(argv[i], '=');

		if (!eq)
			die("not NAME=VALUE", argv[i]);
		*eq = '\0';
		if (rd_kafka_ConfigResource_set_config(res, argv[i], eq + 1))
			die("set_config", argv[i]);
	}
	opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_ALTERCONFIGS);
	rd_kafka_AdminOptions_set_request_timeout(opts, 10000, err, sizeof(err));
	q = rd_kafka_queue_new(rk);
	rd_kafka_AlterConfigs(rk, &res, 1, opts, q);
	ev = rd_kafka_queue_poll(q, 15000);
	if (!ev)
		die("AlterConfigs", "no answer");
	if (rd_kafka_event_error(ev))
		die("AlterConfigs", rd_kafka_event_error_string(ev));
	result = rd_kafka_event_AlterConfigs_result(ev);
	rres = rd_kafka_AlterConfigs_result_resources(result, &n);
	if (n != 1)
		die("AlterConfigs", "unexpected result count");
	if (rd_kafka_ConfigResource_error(rres[0]))
		die("AlterConfigs", rd_kafka_ConfigResource_error_string(rres[0]));
	rd_kafka_event_destroy(ev);
	rd_kafka_queue_destroy(q);
	rd_kafka_AdminOptions_destroy(opts);
	rd_kafka_ConfigResource_destroy(res);
	rd_kafka_destroy(rk);
	return 0;
}
