/*-------------------------------------------------------------------------
 *
 * kafkaint.h
 *	  What the pieces of the librdkafka glue share; private to them.
 *
 * The glue is five files: kafka.c (connect, delivery reports, producing
 * and the transactions), kafkaproc.c (creating clients, the one being
 * connected, the sliced waits), kafkaconf.c (esrc.kafka_properties,
 * librdkafka configurations and librdkafka's log), kafkatopic.c (the
 * topic cache and topic creation) and kafkapos.c (the position record:
 * its value, reading it back).  The rest of esrc sees only kafka.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_KAFKAINT_H
#define ESRC_KAFKAINT_H

#include <librdkafka/rdkafka.h>

#include "portability/instr_time.h"
#include "utils/hsearch.h"

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
 * (fwdsend.c does so only with a backlog).  Three rules keep that safe:
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
 * are ignored, so kafka_dr_cb never writes into freed memory.
 */
#define POSITION_INDEX	0xFFFFFFFFu

/* Length of one line of librdkafka's log (and of its latest error). */
#define LOG_LINE		400

/* kafka.c */
extern void kafka_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque);

/* kafkaproc.c: the clients of this process, and the waits */
extern int64 kafka_elapsed_ms(instr_time start);
extern void kafka_between_slices(instr_time start);
extern rd_kafka_t *kafka_new_rk(rd_kafka_type_t type, rd_kafka_conf_t *conf,
								char *errstr, size_t errlen);
extern void kafka_live_begin(EsrcKafka *k);
extern void kafka_live_connected(void);
extern void kafka_live_forget(EsrcKafka *k);
extern EsrcKafka *kafka_live_handle(void);
extern bool kafka_live_connecting(void);
extern bool kafka_connect_given_up(void);

/* kafkaconf.c */
typedef enum ConfKind
{
	CONF_PRODUCER,
	CONF_CONSUMER
} ConfKind;

extern rd_kafka_conf_t *kafka_build_conf(EsrcKafka *k, ConfKind kind,
										 char *err, size_t errlen);
extern void kafka_clear_last_error(void);
extern void kafka_copy_last_error(char *buf, size_t len);

/* kafkatopic.c */
extern void kafka_topics_create(EsrcKafka *k);
extern void kafka_topic_destroy(EsrcKafka *k, EsrcKafkaTopic *t);
extern bool kafka_is_poison(rd_kafka_resp_err_t e);
extern EsrcKafkaStatus kafka_create_topic(EsrcKafka *k, const char *name,
										  int partitions, bool compacted,
										  char *err, size_t errlen);
extern EsrcKafkaStatus kafka_topic_metadata(EsrcKafka *k, rd_kafka_t *rk,
											rd_kafka_topic_t *rkt, const char *name,
											int *partitions, bool *missing,
											char *err, size_t errlen);

/* kafkapos.c */
extern char *kafka_position_prefix(const char *log_id, const char *database);
extern EsrcKafkaStatus kafka_read_position(EsrcKafka *k, const char *offsets_topic,
										   int64 *position, char *position_id,
										   char *err, size_t errlen);
extern rd_kafka_resp_err_t kafka_produce_position(EsrcKafka *k, int p, int64 position,
												  const char *id);
extern void kafka_position_shutdown(void);
extern EsrcKafkaStatus kafka_open_offsets_topic(EsrcKafka *k, const char *offsets_topic,
												char *err, size_t errlen);
extern void kafka_position_delivered(EsrcKafka *k, int p, int64 position,
									 const char *id);

#endif							/* ESRC_KAFKAINT_H */
