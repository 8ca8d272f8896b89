/*-------------------------------------------------------------------------
 *
 * log.h
 *	  The face of src/log/: the event log itself.  append.c (the
 *	  version-checked write path), read.c (the index scans and the read
 *	  functions), order.c (positions, the in-flight registry and the
 *	  commit-safe horizon), standby.c (that horizon published for hot
 *	  standbys, and read there), rules.c (the stream rules as reads and appends
 *	  apply them), redaction.c (the one update esrc.events allows, and
 *	  erased streams), logaccess.c (may a role read the log), trace.c (the
 *	  trace context of events), jsonsize.c.  The subsystems above the log
 *	  take part in appends only through the hooks declared here
 *	  (esrc_append_guard, esrc_listen_appended).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_LOG_LOG_H
#define ESRC_LOG_LOG_H

#include "postgres.h"
#include "access/sdir.h"
#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "storage/itemptr.h"
#include "utils/jsonb.h"
#include "utils/snapshot.h"
#include "base/base.h"

/* Limits on names; documented in README.md ("Limits"). */
#define ESRC_MAX_STREAM_NAME	512		/* bytes */
#define ESRC_MAX_TYPE_NAME		256		/* bytes */
#define ESRC_MAX_MEMBER_NAME	63		/* bytes; subscription and member names */
#define ESRC_MAX_FILTER_TYPES	64		/* read_category's types */
#define ESRC_MAX_FILTER_PARTITIONS 1024 /* read_category's partitions */

/*
 * Default of esrc.max_event_size: 960 kB, below librdkafka's default
 * message.max.bytes (1,000,000 bytes for key, value and headers, and the
 * metadata travels as a header) with room for the key and headers.
 */
#define ESRC_DEFAULT_MAX_EVENT_SIZE	(960 * 1024)

/* esrc.max_event_size: append.c's, defined as a GUC by esrc.c */
extern int	esrc_max_event_size;

/*
 * esrc.forwarder_log_batches: order.c's, which logs commit times with it;
 * defined as a GUC by fwdconf.c
 */
extern bool esrc_forwarder_log_batches;

/*
 * append.c: what a subsystem above the log asks of every append, before
 * anything is locked (set once, from _PG_init; NULL: nothing): the
 * forwarder (fwdconf.c) refuses a category it could not send, and an
 * event larger as JSON text than one Kafka record of this database can
 * carry (text_limit 0: no limit; refuse_text raises the error).
 */
typedef struct EsrcAppendGuard
{
	void		(*check_category) (const char *category);
	Size		(*text_limit) (void);
	void		(*refuse_text) (int index, Size limit);
} EsrcAppendGuard;
extern const EsrcAppendGuard *esrc_append_guard;

/*
 * order.c: the subsystems above the log that learn of the end (commit or
 * abort) of every transaction that appended, after its positions are
 * released, with the categories it appended to (their hashes, or overflow:
 * more than it kept): the forwarder wakes its worker, subscriptions their
 * long polls.  Registered from _PG_init, called in that order.
 */
typedef void (*EsrcAppendedHook) (Oid dbid, const uint64 *hashes, int nhashes,
								  bool overflow);
extern void esrc_listen_appended(EsrcAppendedHook hook);

/* order.c (the in-flight registry), rulebound.c (append marks): shared memory */
extern Size esrc_order_shmem_size(void);
extern void esrc_order_shmem_init(void);
extern Size esrc_mark_shmem_size(void);
extern void esrc_mark_shmem_init(void);

/* order.c */
extern int64 esrc_allocate_position(Oid seqoid, const char *category);
/*
 * the last position this backend took, 0 = none (esrc.last_position(),
 * lastpos.c); whether the current transaction appended (then it holds
 * back the horizon: the waits of subprogress.c refuse to wait)
 */
extern int64 esrc_last_appended;
extern bool esrc_xact_appended(void);
extern int64 esrc_safe_position(Oid seqoid);
extern int64 esrc_sequence_last_value(Oid seqoid);
extern XLogRecPtr esrc_appended_commit_end(void);

/*
 * order.c: the categories of in-flight appends (issue 14).  A category is
 * known by a 64-bit hash of its name; esrc_safe_position_for() is the
 * horizon for a reader of the categories hashes[0 .. nhashes - 1]: it
 * waits only for transactions that may append to one of them.
 */
extern uint64 esrc_category_hash(const char *category, int len);
extern int64 esrc_safe_position_for(Oid seqoid, const uint64 *hashes,
									int nhashes);

/*
 * standby.c: the horizon on a hot standby, from what the primary
 * published (nhashes < 0: the global horizon); the publisher's setting,
 * launcher and shared memory.
 */
extern int64 esrc_standby_horizon(const uint64 *hashes, int nhashes);
extern int	esrc_standby_horizon_interval;
extern void esrc_standby_init(void);
extern Size esrc_standby_shmem_size(void);
extern void esrc_standby_shmem_init(void);

/*
 * locktag_field4 of esrc's heavyweight locks on names (advisory lock tags
 * on a 64-bit hash of the name; user advisory locks use 1 and 2).  In
 * pg_locks they show as locktype 'advisory' with objsubid 17747 (stream)
 * and 17748 (category).
 */
#define ESRC_STREAM_LOCK_SPACE		0x4553
#define ESRC_CATEGORY_LOCK_SPACE	0x4554
/* the name of a subscription (or "projection:<name>"), 17749: creates of one name wait */
#define ESRC_SUBSCRIPTION_LOCK_SPACE	0x4555

/* partition.c: the partition of a stream among npartitions (murmur2) */
extern int	esrc_stream_partition_of(const char *stream, int len, int npartitions);

/* append.c: the lock tag of a stream or category name */
struct LOCKTAG;
extern void esrc_name_locktag(struct LOCKTAG *tag, const char *name, uint16 space);

/* the columns of esrc.events, in the order of src/sql/00_core.sql */
#define Anum_events_position	1
#define Anum_events_stream		2
#define Anum_events_version		3
#define Anum_events_type		4
#define Anum_events_data		5
#define Anum_events_metadata	6
#define Anum_events_id			7
#define Anum_events_recorded_at 8
#define Anum_events_category	9
#define Anum_events_tags		10
#define Natts_events			10
/* before ALTER EXTENSION esrc UPDATE to 0.3.0: no tags */
#define Natts_events_min		9

/* logscan.c: refuse an esrc.events whose columns are not those above */
struct RelationData;
extern void esrc_check_log_rowtype(struct RelationData *rel);

/* append.c: an executor state for ExecSimpleRelationInsert/Update */
struct EState;
struct ResultRelInfo;
struct RelationData;
extern struct EState *esrc_make_write_estate(struct RelationData *rel,
											 struct ResultRelInfo **rri);
extern void esrc_free_write_estate(struct EState *estate,
								   struct ResultRelInfo *rri);

/* jsonsize.c: the length of a jsonb value as JSON text, stopping past limit */
extern Size esrc_jsonb_text_size(Jsonb *jb, Size limit);

/* names.c: the checks of names, shared by appends, reads and the life cycle */
extern char *esrc_check_name(text *value, const char *what, int maxlen);
extern char *esrc_stream_category(const char *stream);

/*
 * append.c: the system events of the log's life cycle (docs/lifecycle.md).
 * Event types that begin with ESRC_RESERVED_TYPE_PREFIX are esrc's own;
 * esrc.append/append_batch refuse them (22023).  esrc.erase_stream and
 * esrc.delete_stream append one, the stream's tombstone, which the Kafka
 * forwarder sends with a null value (kafka.c) and the snapshots do not
 * apply (snapapply.c, snapshot.c).  The data of ESRC_TYPE_ERASED is
 * ESRC_ERASED_DATA with null metadata, so the tombstone of an erased stream
 * is itself redacted and its head stays a redacted event.
 */
#define ESRC_RESERVED_TYPE_PREFIX	"esrc."
#define ESRC_TYPE_ERASED			"esrc.erased"
#define ESRC_TYPE_DELETED			"esrc.deleted"
extern bool esrc_is_system_type(const char *type, int len);
extern bool esrc_is_tombstone_type(const char *type, int len);
extern int64 esrc_append_system_event(const char *stream, const char *type,
									  Jsonb *data);

/*
 * logscan.c: index scans of esrc.events, for the read functions, the
 * stream rules and the snapshot replays (snapbuild.c, snapread.c).  The first
 * ESRC_EVENT_NATTS columns of esrc.events are the columns of the row type
 * esrc.event.
 */
#define ESRC_EVENT_NATTS 8
/*
 * esrc.event since 0.3.0: those columns and tags (esrc.events' column
 * Anum_events_tags).  Before ALTER EXTENSION esrc UPDATE it has
 * ESRC_EVENT_NATTS columns; esrc_event_values fills either shape from a
 * row of esrc.events, esrc_check_event_rowtype accepts either.
 */
#define ESRC_EVENT_NATTS_MAX 9
extern void esrc_event_values(struct TupleTableSlot *slot, int natts,
							  Datum *values, bool *isnull);
extern void esrc_check_event_rowtype(TupleDesc desc);
typedef enum EsrcLogOrder
{
	ESRC_LOG_BY_POSITION,		/* primary key (position) */
	ESRC_LOG_BY_STREAM,			/* (stream, version) */
	ESRC_LOG_BY_CATEGORY		/* (category, position) */
} EsrcLogOrder;
typedef struct EsrcLogScan EsrcLogScan;
struct TupleTableSlot;
extern EsrcLogScan *esrc_log_begin(EsrcLogOrder order, Datum key, int64 lo,
								   int64 hi, ScanDirection dir, Snapshot snap);
extern EsrcLogScan *esrc_log_begin_unchecked(EsrcLogOrder order, Datum key,
											 int64 lo, int64 hi,
											 ScanDirection dir, Snapshot snap);
extern void esrc_log_rescan_stream(EsrcLogScan *scan, Datum key, int64 lo,
								   int64 hi);
extern struct TupleTableSlot *esrc_log_next(EsrcLogScan *scan);
extern void esrc_log_end(EsrcLogScan *scan);
extern Snapshot esrc_caller_snapshot(void);

/*
 * logaccess.c: may a role read every event of esrc.events now (SELECT on
 * the table or on all its columns, and no row-level security applying to
 * it)?  Checked wherever events reach a role's code or tables; cached per
 * transaction.  esrc_check_log_readable raises 42501, why being the first
 * sentence of its detail; esrc_recheck_log_readable does the same with
 * the changes committed since (fresh catalogs), for a statement that
 * slept inside its transaction.
 */
typedef enum EsrcLogAccess
{
	ESRC_LOG_READABLE,
	ESRC_LOG_NO_SELECT,			/* no SELECT on the table nor on every column */
	ESRC_LOG_RLS				/* row-level security would filter it */
} EsrcLogAccess;
extern EsrcLogAccess esrc_log_access(Oid role);
extern char *esrc_log_access_problem(Oid role, EsrcLogAccess access);
extern char *esrc_log_access_fix(Oid role, EsrcLogAccess access);
extern void esrc_check_log_readable(Oid role, const char *why);
extern void esrc_recheck_log_readable(Oid role, const char *why);
extern Oid	esrc_function_runs_as(Oid funcoid, Oid caller);

/*
 * redaction.c: esrc.erase_stream() and the scavenger replace the data of
 * an event with this JSON and its metadata with NULL (docs/lifecycle.md),
 * through esrc_redact_row; append.c's immutability trigger lets exactly
 * that update pass (esrc_erasure_permits) while it is being made.  Is a
 * stream erased (esrc.erasures)?
 */
#define ESRC_ERASED_DATA "{\"erased\": true}"
struct TriggerData;
struct ResultRelInfo;
struct EPQState;
extern Datum esrc_erased_marker(void);
extern void esrc_redact_row(struct ResultRelInfo *rri, struct EState *estate,
							struct EPQState *epq, struct TupleTableSlot *oldslot,
							struct TupleTableSlot *newslot, ItemPointer tid,
							Datum marker);
extern bool esrc_erasure_permits(struct TriggerData *trigdata);
extern bool esrc_is_redacted(Datum data, bool datanull, bool metanull);
extern bool esrc_stream_erased(const char *stream, Snapshot snap,
							   TimestampTz *first_at);
extern void esrc_check_not_erased(const char *stream, Snapshot snap, bool appending);

/* rules.c: a stream's first visible version from esrc.stream_rules itself */
extern bool esrc_rules_first_visible_now(const char *stream, Snapshot snap,
										 TimestampTz now, int64 *first_visible);

/*
 * rules.c: a stream's current rules, from the cache brought up to date
 * (for retention.c's set_stream_rules and delete_stream, under the stream
 * lock); -1 and false mean no such rule.
 */
typedef struct EsrcStreamRules
{
	int64		truncate_before;	/* -1: none */
	int64		max_count;		/* -1: none */
	bool		has_max_age;
	Interval	max_age;
	bool		hard_deleted;
} EsrcStreamRules;
extern void esrc_rules_current(const char *stream, EsrcStreamRules *rv);

/*
 * rules.c: the stream rules (esrc.stream_rules), as the read paths apply
 * them.  esrc_rules_begin returns NULL when no stream of the database has
 * rules, so that a read without rules costs one check.  A filter is valid
 * for one read, under the snapshot it was made with.
 */
typedef struct EsrcRuleFilter EsrcRuleFilter;
extern EsrcRuleFilter *esrc_rules_begin(Snapshot snap);
extern int64 esrc_rules_first_visible(EsrcRuleFilter *f, text *stream);
extern bool esrc_rules_visible(EsrcRuleFilter *f, struct TupleTableSlot *slot);
extern void esrc_rules_end(EsrcRuleFilter *f);
extern void esrc_rules_check_append(const char *stream);
extern void esrc_rules_mark_append(const char *stream);

/*
 * A read that takes a new snapshot may reuse the bounds of earlier reads
 * (rulebound.c): esrc_rules_prepare before the snapshot, then
 * esrc_rules_begin_fresh with it.
 */
typedef struct EsrcRulesToken
{
	uint64		generation;		/* of the rules cache, before the snapshot */
	uint64		clock;			/* esrc_mark_clock(), before the snapshot */
	bool		ok;				/* rules exist, and marks may be used */
} EsrcRulesToken;
extern void esrc_rules_prepare(EsrcRulesToken *tok);
extern EsrcRuleFilter *esrc_rules_begin_fresh(Snapshot snap, const EsrcRulesToken *tok);

/*
 * trace.c: W3C trace context (esrc.traceparent, esrc.tracestate; the
 * metadata keys "traceparent" and "tracestate"; headers ce_traceparent and
 * ce_tracestate of forwarded records).
 */
#define ESRC_TRACEPARENT_MAX	512		/* bytes; version 00 has 55 */
#define ESRC_TRACESTATE_MAX		512		/* bytes */
extern char *esrc_traceparent;
extern char *esrc_tracestate;
extern void esrc_trace_init(void);
extern bool esrc_traceparent_valid(const char *s, int len);
extern Jsonb *esrc_trace_metadata(Jsonb *metadata);
extern void esrc_trace_of_event(Jsonb *metadata, char **traceparent,
								char **tracestate);

/* append.c: the 40001 of an append (or erase) over an event its snapshot misses */
extern esrc_noreturn void esrc_concurrent_append_error(const char *stream);

#endif							/* ESRC_LOG_LOG_H */
