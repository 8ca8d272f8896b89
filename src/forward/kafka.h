/*-------------------------------------------------------------------------
 *
 * kafka.h
 *	  The librdkafka glue used by the forwarder worker (forwarder.c,
 *	  fwdconnect.c, fwdsend.c).
 *
 * kafka.c (with kafkaconf.c, kafkatopic.c and kafkapos.c, sharing the
 * private kafkaint.h) hides librdkafka behind a handle (EsrcKafka) that knows how to
 * connect, learn the last forwarded position, make sure topics exist and
 * deliver batches of records, each either in one Kafka transaction
 * together with the position record (exactly once) or with the idempotent
 * producer (at least once), in two steps (start, finish) so that the
 * caller can read the next batch while librdkafka sends this one.  In
 * exactly-once mode a second batch may be started once every record of
 * the first is acknowledged (esrc_kafka_wait_acked), so that it is sent
 * while the first is committed; struct EsrcKafka (kafkaint.h) has the
 * rules that keep this exactly once.  Every call is bounded in time and checks for
 * interrupts while it waits, so it may ereport(FATAL) on SIGTERM; it
 * never raises an ERROR for a Kafka failure, it returns a status.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_KAFKA_H
#define ESRC_KAFKA_H

#include "datatype/timestamp.h"

/* Outcome of an operation on the Kafka side. */
typedef enum EsrcKafkaStatus
{
	ESRC_KAFKA_OK,
	ESRC_KAFKA_RETRY,			/* transient (unreachable, timeout): try again
								 * later with the same handle */
	ESRC_KAFKA_FATAL,			/* the handle is unusable (fenced, fatal
								 * producer error): destroy it, connect again */
	ESRC_KAFKA_CONFIG,			/* the configuration is refused: wait for a
								 * reload */
	ESRC_KAFKA_POISON			/* one record can never be delivered as it is */
} EsrcKafkaStatus;

typedef struct EsrcKafka EsrcKafka;
typedef struct EsrcKafkaTopic EsrcKafkaTopic;

/* What a connection is made with; strings are copied. */
typedef struct EsrcKafkaSettings
{
	const char *brokers;		/* bootstrap.servers */
	const char *properties;		/* esrc.kafka_properties (secret) */
	bool		exactly_once;
	bool		position_record;	/* at least once: write and read it too */
	const char *client_id;		/* the forwarder's identity: transactional.id
								 * and key of its position record */
	const char *offsets_topic;	/* compacted position topic */
	const char *database;		/* for the position record's value */
	const char *log_id;			/* ditto */
	const char *source;			/* ce_source header of every record */
} EsrcKafkaSettings;

/*
 * Called between the slices of a long wait (delivery, commit, connect)
 * with the time waited so far and librdkafka's latest error (may be ""),
 * so that the worker can show "disconnected" while it waits, or why a
 * connect does not succeed.  Returns true to give up a connect (a reload
 * is pending): its loops stop after the slice under way and
 * esrc_kafka_connect() fails with ESRC_KAFKA_RETRY.  Worker thread only.
 */
typedef bool (*EsrcKafkaWaitHook) (int64 waited_ms, const char *last_error);
extern EsrcKafkaWaitHook esrc_kafka_wait_hook;

/* One event to send. Strings are NUL-terminated; lengths exclude the NUL. */
typedef struct EsrcKafkaRecord
{
	int64		position;
	int64		version;
	char	   *stream;
	int			stream_len;
	char	   *type;
	char	   *id;				/* uuid, text form */
	char	   *time;			/* recorded_at, RFC 3339 UTC */
	char	   *data;			/* the value: data as JSON text */
	int			data_len;
	char	   *metadata;		/* JSON text, NULL when the event has none */
	char	   *traceparent;	/* valid W3C traceparent of the metadata
								 * (trace.c), NULL = none */
	char	   *tracestate;		/* its tracestate, NULL = none */
	char	   *tags;			/* the event's tags as a JSON array, NULL =
								 * none (header ce_esrctags) */
	EsrcKafkaTopic *topic;		/* from esrc_kafka_topic() */
	bool		skip;			/* skipped by the operator: do not send */
	bool		tombstone;		/* esrc.erased/esrc.deleted: sent with a null
								 * value (compaction removes the key) */
	/* written by kafka.c from delivery reports */
	int			err;			/* rd_kafka_resp_err_t of the report */
	bool		acked;			/* the broker has the record */
} EsrcKafkaRecord;

extern int	esrc_kafka_parse_properties(const char *props,
										bool (*cb) (const char *name, const char *value, void *arg),
										void *arg, const char **errpos);
extern bool esrc_kafka_valid_topic_name(const char *name);
extern const char *esrc_kafka_version(void);

/* the text form of a uuid and its NUL */
#define ESRC_KAFKA_ID_LEN	40

extern EsrcKafka *esrc_kafka_connect(const EsrcKafkaSettings *settings,
									 int64 *position, char *position_id,
									 EsrcKafkaStatus *status,
									 char *err, size_t errlen);
extern void esrc_kafka_destroy(EsrcKafka *k);
extern void esrc_kafka_shutdown(void);
extern void esrc_kafka_poll(EsrcKafka *k);
extern EsrcKafkaStatus esrc_kafka_topic(EsrcKafka *k, const char *name,
										EsrcKafkaTopic **topic,
										char *err, size_t errlen);
extern void esrc_kafka_trim_topics(EsrcKafka *k);
extern EsrcKafkaStatus esrc_kafka_start(EsrcKafka *k, EsrcKafkaRecord *recs,
										int nrecs, int *poison,
										char *err, size_t errlen);
extern bool esrc_kafka_in_flight(EsrcKafka *k);
extern int	esrc_kafka_batches_in_flight(EsrcKafka *k);
extern bool esrc_kafka_wait_acked(EsrcKafka *k);
extern EsrcKafkaStatus esrc_kafka_abort_newest(EsrcKafka *k, char *err, size_t errlen);
extern EsrcKafkaStatus esrc_kafka_finish(EsrcKafka *k, int *ndone, int *poison,
										 char *err, size_t errlen);
extern void esrc_kafka_emit_log(void);

/*
 * When the last batch finished passed each step (GetCurrentTimestamp() values), for
 * esrc.forwarder_log_batches.  acked: every delivery report is in (exactly
 * once: records and position record); committed: commit_transaction()
 * returned (at least once: = acked).  0 = not reached.
 */
typedef struct EsrcKafkaTiming
{
	TimestampTz started;		/* esrc_kafka_start() called */
	TimestampTz queued;			/* every record handed to librdkafka */
	TimestampTz acked;
	TimestampTz committed;
} EsrcKafkaTiming;

extern void esrc_kafka_timing(EsrcKafka *k, EsrcKafkaTiming *timing);

/* milliseconds spent queueing records and in send as a whole (DEBUG1) */
extern double esrc_kafka_produce_ms;
extern double esrc_kafka_commit_ms;

#endif							/* ESRC_KAFKA_H */
