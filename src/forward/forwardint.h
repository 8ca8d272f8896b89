/*-------------------------------------------------------------------------
 *
 * forwardint.h
 *	  What the pieces of the Kafka forwarder share; private to them.
 *
 * The forwarder is nine files besides the librdkafka glue (kafka*.c,
 * kafka.h): the worker is forwarder.c (its start, main loop and the waits
 * of a turn), fwdconnect.c (its link to Kafka: settings, connect,
 * back-off) and fwdsend.c (the sending of batches through kafka.c);
 * fwdlauncher.c (the launcher: one worker per forwarded database),
 * fwdconf.c (the GUCs, their check hooks, topic names, the append-time
 * checks, registering the launcher), fwdread.c (reading batches and the
 * forwarder's row from PostgreSQL, as the extension's owner), fwdstatus.c
 * (the status slots in shared memory and the SQL functions that watch and
 * steer workers), fwdstandby.c (esrc.forwarder_standbys: waiting for the
 * standbys before a batch goes out) and fwddiverge.c (Kafka's position
 * record against the log at connect, and the operator's accepted
 * divergences).
 * The rest of esrc sees only what forward/forward.h declares.
 *
 * The worker's state below is written by the worker process only; in a
 * backend running SQL it keeps its initial values and is never read.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_FORWARDINT_H
#define ESRC_FORWARDINT_H

#include "nodes/pg_list.h"
#include "access/xlogdefs.h"
#include "portability/instr_time.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "log/log.h"
#include "forward/forward.h"
#include "kafka.h"

/* States shown by esrc.forwarder_status; keep state_names (fwdstatus.c) in step. */
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
	FWD_BLOCKED,
	FWD_NO_EXTENSION,
	FWD_WAITING_STANDBY,
	FWD_DIVERGED
} EsrcForwarderState;

typedef enum EsrcDelivery
{
	DELIVERY_EXACTLY_ONCE,
	DELIVERY_AT_LEAST_ONCE
} EsrcDelivery;

/* GUC variables (fwdconf.c) */
extern char *esrc_kafka_brokers;
extern char *esrc_database;
extern char *esrc_databases;
extern int	esrc_max_forwarders;
extern char *esrc_kafka_topic_template;
extern char *esrc_kafka_offsets_topic;
extern char *esrc_kafka_properties;
extern int	esrc_kafka_batch_size;
extern int	esrc_delivery;
extern bool esrc_kafka_position_record;
extern char *esrc_forwarder_standbys;	/* fwdstandby.c */

/*
 * Largest total size of the strings of one batch.  A batch ends at
 * esrc.kafka_batch_size events or here, whichever comes first (but holds
 * at least one event), so the worker's memory stays bounded whatever the
 * event sizes.
 */
#define BATCH_BYTES		(16 * 1024 * 1024)

/* The topic of a category: fwd_expand_topic (fwdconf.c) */
typedef enum TopicExpansion
{
	TOPIC_OK,
	TOPIC_BAD_TEMPLATE,
	TOPIC_TOO_LONG
} TopicExpansion;

/* room for any expansion worth checking: Kafka allows 249 bytes */
#define TOPIC_BUF_LEN	512

extern TopicExpansion fwd_expand_topic(const char *template, const char *category,
									   const char *database, char *out, size_t outlen);

/*
 * The databases to forward (fwdconf.c): esrc.databases, or when it is
 * empty the one database of esrc.database.  *all for '*'; else a List of
 * names (palloc'd in the current context).
 */
extern List *fwd_configured_databases(bool *all);

/* fwdstatus.c: set the latch of this database's forwarder, if one runs */
extern void esrc_forwarder_wake(void);

/*
 * Status slots in shared memory (fwdstatus.c), one per forwarder worker,
 * esrc.max_forwarders of them.  The launcher (fwdlauncher.c) gives a slot
 * to a worker it starts (in_use, database, dbid) and takes it back once
 * the worker has stopped; in between only the worker writes the status
 * fields, bumping changecount around each write (odd while writing,
 * fwd_status_write_begin/end below), and a reader copies a slot until it
 * sees the same even count before and after, as pgstat does for
 * PgBackendStatus.  The launcher writes in_use, database and dbid the
 * same way, while no worker runs on the slot.  Strings are NUL-terminated
 * and truncated to fit.
 */
#define ESRC_FWD_ERROR_LEN		512
#define ESRC_FWD_BROKERS_LEN	256

typedef struct EsrcForwarderShared
{
	pg_atomic_uint32 changecount;	/* odd while a write is under way */
	/* the latch to set at the commit of an append in dbid (order.c) */
	pg_atomic_uint32 procno;	/* pgprocno + 1, 0 = not serving yet */
	pg_atomic_uint32 dbid;		/* Oid of the database it serves */
	bool		in_use;			/* given to a worker by the launcher */
	bool		idle_exit;		/* the worker left: no esrc there ('*') */
	bool		has_extension;	/* the worker found esrc there */
	char		database[NAMEDATALEN];	/* database the worker serves */
	int			state;			/* EsrcForwarderState */
	int			pid;			/* worker pid, 0 = no worker */
	TimestampTz state_since;	/* when state last changed */
	char		detail[ESRC_FWD_ERROR_LEN];	/* why idle/blocked, free text */
	char		brokers[ESRC_FWD_BROKERS_LEN];	/* the worker's broker list */
	bool		exactly_once;	/* delivery mode in use */
	int64		last_position;	/* last forwarded position, -1 = unknown */
	uint64		delivered_total;	/* records acked since server start */
	TimestampTz last_delivery_at;	/* 0 = never */
	char		last_error[ESRC_FWD_ERROR_LEN];	/* "" = none */
	TimestampTz last_error_at;	/* 0 = never */
	int64		blocked_position;	/* poison record's position, 0 = none */
	char		blocked_stream[ESRC_MAX_STREAM_NAME + 1];
	char		log_id[40];		/* esrc.forwarder_state.log_id, "" = unknown */
	TimestampTz standby_wait_since; /* waiting for a standby since, 0 = not */
} EsrcForwarderShared;

typedef struct EsrcForwarders
{
	slock_t		mutex;			/* launcher_latch, in_use */
	Latch	   *launcher_latch;
	pg_atomic_uint32 paused;	/* 1 = esrc.forwarder_pause() in effect */
	int			nslots;			/* esrc.max_forwarders */
	EsrcForwarderShared slots[FLEXIBLE_ARRAY_MEMBER];
} EsrcForwarders;

extern EsrcForwarders *fwd_shared;
extern EsrcForwarderShared *fwd_slot;	/* the worker's own slot */

/* What the worker runs with; copied from the GUCs at start and reload. */
typedef struct FwdConfig
{
	char	   *brokers;
	char	   *properties;
	char	   *offsets_topic;
	char	   *topic;
	bool		exactly_once;
	bool		position_record;	/* esrc.kafka_position_record */
} FwdConfig;

/*
 * Batches.  Two of them: while librdkafka sends one, the worker reads the
 * next into the other (see fwd_forward_batch, fwdsend.c).
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
	XLogRecPtr	flush_to;		/* the end of the WAL of its commits */
	/* when it was read, for the statistics and esrc.forwarder_log_batches */
	instr_time	read_start;
	instr_time	read_end;
	TimestampTz woke;			/* the reading began */
	TimestampTz read_done;
} Batch;

/* The worker's state (forwarder.c) */
extern char *fwd_served_database;
extern int64 fwd_position;		/* last forwarded; -1 = not yet known */
extern MemoryContext fwd_loop_cxt;	/* reset every turn of the loop */

/* Waits while an open append holds the horizon back, doubling (ms) */
#define HELD_WAIT_MIN_MS 1
#define HELD_WAIT_MAX_MS 1000

/* Its link to Kafka and its failures (fwdconnect.c) */
extern FwdConfig fwd_cfg;
extern EsrcKafka *fwd_kafka;	/* NULL = not connected */
extern int	fwd_backoff_ms;		/* back-off after a failure, 0 = none */
extern bool fwd_config_refused; /* Kafka refused the settings: wait for a
								 * reload */
extern int64 fwd_poison_position;	/* a record Kafka refuses (set by
									 * fwdsend.c), 0 = none */

extern void fwd_copy_config(void);
extern void fwd_reload_config(void);
extern void fwd_wait_latch(long timeout_ms);
extern bool fwd_connect_kafka(void);
extern void fwd_disconnect(void);
extern void fwd_schedule_retry(void);
extern void fwd_new_log(void);
extern bool fwd_wait_for_retry(void);
extern bool fwd_wait_if_diverged(long *held_wait);
extern bool fwd_kafka_wait_hook(int64 waited_ms, const char *last_error);

/* Sending a batch (fwdsend.c) */
extern void fwd_forward_batch(Batch **curp, Batch **sparep, bool *prefetched);

/* Its copy of esrc.forwarder_state and the mirror of the position (fwdread.c) */
extern char fwd_log_id[40];		/* esrc.forwarder_state.log_id, "" = unknown */
extern int64 fwd_table_position;	/* esrc.forwarder_state.position */
extern bool fwd_mirror_dirty;	/* fwd_position is not in the table yet */
extern bool fwd_mirror_now;		/* write it at the next read */
extern double fwd_wal_flush_ms; /* for the DEBUG1 statistics */

/* Reading from PostgreSQL (fwdread.c) */
typedef enum ReadResult
{
	READ_OK,
	READ_NO_EXTENSION,
	READ_NEW_LOG				/* log_id is not ours: the extension was
								 * created anew */
} ReadResult;

extern void fwd_pin_settings(void);
extern Oid	fwd_xact_begin(const char *activity);
extern void fwd_xact_end(Oid nsp);
extern ReadResult fwd_read_log(Batch *b, bool want_batch, int64 after);
extern bool fwd_poison_skipped(int64 poison_position);

/*
 * Writing a status slot (see EsrcForwarderShared above): only stores and
 * bounded copies of strings happen between begin and end, timestamps are
 * taken before.  The worker reads its own fields directly.
 */
static inline void
fwd_status_write_begin(EsrcForwarderShared *f)
{
	pg_atomic_write_u32(&f->changecount, pg_atomic_read_u32(&f->changecount) + 1);
	pg_write_barrier();
}

static inline void
fwd_status_write_end(EsrcForwarderShared *f)
{
	pg_write_barrier();
	pg_atomic_write_u32(&f->changecount, pg_atomic_read_u32(&f->changecount) + 1);
}

extern void fwd_set_state(EsrcForwarderState state, const char *detail);
extern EsrcForwarderState fwd_get_state(void);
extern void fwd_report_failure(EsrcForwarderState state, const char *error,
							   const char *detail);
extern void fwd_forget_logged_failure(void);
extern void fwd_clear_last_error(void);
extern void fwd_set_blocked(int64 position, const char *stream);
extern void fwd_publish_progress(int64 position, int delivered);
extern bool fwd_paused(void);
extern void fwd_publish_log_id(const char *log_id);
extern void fwd_report_standby_wait(const char *why, TimestampTz since, bool first);
extern const char *fwd_log_id_owner(const char *log_id);

/* esrc.forwarder_standbys (fwdstandby.c) */
extern void fwd_define_standbys_guc(void);
extern bool fwd_standbys_configured(void);
extern bool fwd_standbys_caught_up(XLogRecPtr lsn);
extern bool fwd_wait_standbys(XLogRecPtr lsn, bool (*serve) (void));

/*
 * Divergence of Kafka's position record from the log (fwddiverge.c): at
 * connect, what Kafka's last position record says against the log.
 */
typedef enum DivergenceCheck
{
	DIV_OK,						/* the log has Kafka's event at its position */
	DIV_WAIT,					/* an append in flight holds that position */
	DIV_DIVERGED,				/* the error is in the status */
	DIV_ACCEPTED				/* the operator accepted it: *after */
} DivergenceCheck;

extern DivergenceCheck fwd_check_divergence(int64 kafka_position, const char *kafka_id,
											int64 *after);

/* fwdconf.c: the GUCs and the append guard, from esrc_forwarder_init */
extern void fwd_define_settings(void);

#endif							/* ESRC_FORWARDINT_H */
