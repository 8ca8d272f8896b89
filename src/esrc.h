/*-------------------------------------------------------------------------
 *
 * esrc.h
 *	  Declarations shared by the esrc source files.
 *
 * esrc.c owns the module (GUCs, shared memory); order.c owns the
 * registry of in-flight appends and the safe read horizon; append.c owns
 * the version-checked write path; read.c owns the read functions and
 * the index scans of the log;
 * forwarder.c owns the Kafka forwarder's background worker (one per
 * forwarded database, started by fwdlauncher.c), with its GUCs in
 * fwdconf.c, its reads in fwdread.c and its status slots in fwdstatus.c
 * (forwarder.h), and the librdkafka glue in kafka.c;
 * lifecycle.c owns esrc.erase_stream() and the audit table esrc.erasures;
 * rules.c owns the stream rules (esrc.set_stream_rules(),
 * esrc.delete_stream()) and the cache the read paths apply them from;
 * rulebound.c owns the append marks that let reads reuse the first visible
 * version of a stream with rules.
 * scavenge.c owns esrc.scavenge(), which redacts what the rules hide
 * through lifecycle.c's redactor, and its worker slice.
 * crypto.c owns crypto-shredding (per-subject keys, esrc.encrypt,
 * esrc.decrypt, esrc.forget_subject).
 * trace.c owns the W3C trace context of events (esrc.traceparent,
 * esrc.tracestate, the ce_traceparent/ce_tracestate headers); metrics.c
 * owns the counters of esrc.metrics (shared memory, per database).
 * ownerctx.c owns the owner context (run as an owner, security-restricted,
 * search_path pinned) that all of them use.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_H
#define ESRC_H

#include "postgres.h"

#include "compat.h"

#include "access/sdir.h"
#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/itemptr.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "utils/jsonb.h"
#include "utils/snapshot.h"

/* Limits on names; documented in README.md ("Limits"). */
#define ESRC_MAX_STREAM_NAME	512		/* bytes */
#define ESRC_MAX_TYPE_NAME		256		/* bytes */
#define ESRC_MAX_MEMBER_NAME	63		/* bytes; subscription and member names */

/*
 * Default of esrc.max_event_size: 960 kB, below librdkafka's default
 * message.max.bytes (1,000,000 bytes for key, value and headers, and the
 * metadata travels as a header) with room for the key and headers.
 */
#define ESRC_DEFAULT_MAX_EVENT_SIZE	(960 * 1024)

/* GUC variables (esrc.c) */
extern int	esrc_max_event_size;

/*
 * One slot per backend (indexed by PGPROC->pgprocno) in the in-flight
 * registry.  min_position is 0 when the backend's current transaction has
 * allocated no event position; PENDING (high bit set) while it is about to
 * take its first; otherwise it is a lower bound of the lowest position the
 * transaction holds.  The same holds per category: categories[0 ..
 * ncategories - 1] are the categories (by esrc_category_hash) the
 * transaction appended to, each with a bound of the positions it takes in
 * that category, and overflow_bound bounds the positions it takes in any
 * other category once it appended to more than ESRC_SLOT_CATEGORIES
 * (ESRC_SLOT_OVERFLOW set in ncategories).  generation counts the
 * transactions that ended holding the slot.  See order.c for the protocol.
 */
#define ESRC_SLOT_CATEGORIES	4
#define ESRC_SLOT_OVERFLOW		0x100	/* in ncategories */

typedef struct EsrcInflightCategory
{
	pg_atomic_uint64 hash;		/* esrc_category_hash of the category */
	pg_atomic_uint64 bound;		/* like min_position, for this category */
} EsrcInflightCategory;

typedef struct EsrcInflightSlot
{
	pg_atomic_uint32 dbid;		/* database of the transaction */
	pg_atomic_uint32 ncategories;	/* entries in use | ESRC_SLOT_OVERFLOW */
	pg_atomic_uint64 min_position;	/* 0 = none */
	pg_atomic_uint64 generation;	/* + 1 at each end of a transaction */
	pg_atomic_uint64 overflow_bound;	/* valid with ESRC_SLOT_OVERFLOW */
	EsrcInflightCategory categories[ESRC_SLOT_CATEGORIES];
} EsrcInflightSlot;

/*
 * The one shared-memory struct of esrc.  (The forwarders' status slots
 * are a struct of their own, fwdstatus.c.)
 */
typedef struct EsrcSharedState
{
	/*
	 * The largest end of a commit record of a transaction that appended
	 * events (order.c), published before its slot is cleared: the WAL the
	 * forwarder must flush before it sends what it read (fwdread.c).
	 */
	pg_atomic_uint64 commit_end;
	int			nslots;			/* entries in inflight[] */
	EsrcInflightSlot inflight[FLEXIBLE_ARRAY_MEMBER];
} EsrcSharedState;

extern EsrcSharedState *esrc_shared;

/* A TimestampTz as microseconds since the Unix epoch (0 stays 0), for logs. */
static inline int64
esrc_unix_us(TimestampTz t)
{
	if (t == 0)
		return 0;
	return (int64) t +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC;
}

/* esrc.c */
extern void esrc_require_shared(void);

/*
 * fwdconf.c: the forwarders' GUCs and launcher; fwdstatus.c: their status
 * slots in shared memory, and esrc_forwarder_wake (at the commit of an
 * append, order.c) which sets the latch of this database's forwarder
 */
extern void esrc_forwarder_init(void);
extern Size esrc_forwarder_shmem_size(void);
extern void esrc_forwarder_shmem_init(void);
extern void esrc_forwarder_wake(void);
/* esrc.forwarder_log_batches (fwdconf.c): also read at commit (order.c) */
extern bool esrc_forwarder_log_batches;

/* projlauncher.c: every database that accepts connections (launchers) */
extern void esrc_scan_databases(void (*fn) (Oid dbid, const char *name, void *arg),
								void *arg);
/* projlauncher.c, for both launchers: a stopped worker and its restart */
#define ESRC_RESTART_DELAY_MS		1000
#define ESRC_RESTART_DELAY_MAX_MS	60000
struct BackgroundWorkerHandle;
extern bool esrc_launched_worker_stopped(struct BackgroundWorkerHandle *handle,
										 pid_t slot_pid);
extern int	esrc_restart_delay(int *failures);
/* projlauncher.c, for both launchers: may a worker start in a database now? */
typedef enum EsrcDbAvailability
{
	ESRC_DB_AVAILABLE,			/* it exists and accepts connections */
	ESRC_DB_BUSY,				/* DROP/ALTER DATABASE holds it: ask again later */
	ESRC_DB_GONE				/* dropped, or no longer accepts connections */
} EsrcDbAvailability;
extern EsrcDbAvailability esrc_database_availability(Oid dbid);
/* fwdconf.c: what an append may hold when this database is forwarded */
extern Size esrc_forwarder_event_limit(void);
extern void esrc_forwarder_refuse_size(int index, Size limit);
extern void esrc_forwarder_check_category(const char *category);

/* order.c */
extern Size esrc_order_shmem_size(void);
extern void esrc_order_shmem_init(bool found);
extern int64 esrc_allocate_position(Oid seqoid, const char *category);
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
 * subwait.c: the long polls of esrc.poll() (subscription.c) wait on their
 * latch; a commit or abort that appended wakes those it concerns (order.c).
 * A poll tracks up to ESRC_WAIT_CATEGORIES categories, beyond that all.
 */
#define ESRC_WAIT_CATEGORIES	8

/*
 * A subscription as shared memory knows it: its database, the esrc.subscriptions
 * table it is a row of (so that a subscription of a dropped and re-created
 * extension, whose ids start again at 1, is another one), and its id.
 */
typedef struct EsrcSubKey
{
	Oid			dbid;
	Oid			catalog;
	int64		id;
} EsrcSubKey;
extern Size esrc_wait_shmem_size(void);
extern void esrc_wait_shmem_init(void);
extern void esrc_wait_register(const EsrcSubKey *sub, const uint64 *hashes,
							   int nhashes, bool all);
extern void esrc_wait_unregister(void);
extern bool esrc_wait_sleep(long timeout_ms);
extern void esrc_wake_subscribers(Oid dbid, const uint64 *hashes, int nhashes,
								  bool any);
extern void esrc_wake_subscription(const EsrcSubKey *sub);

/* sublease.c: partition leases of subscriptions, in shared memory */
extern int	esrc_max_partition_leases;
extern Size esrc_lease_shmem_size(void);
extern void esrc_lease_shmem_request(void);
extern void esrc_lease_shmem_init(void);
extern int	esrc_lease_poll(const EsrcSubKey *sub, int npartitions,
							const char *member, int lease_ms, int32 *held,
							bool *taken, bool *others_over, bool *released);
extern int	esrc_lease_ack(const EsrcSubKey *sub, int npartitions,
						   const char *member, int lease_ms, int32 *held,
						   int64 *polled, int64 *covered_to);
extern void esrc_lease_record(const EsrcSubKey *sub, const char *member,
							  int nheld, const int32 *held,
							  const int64 *checkpoints, int64 covered_to);
extern void esrc_lease_holders(const EsrcSubKey *sub, int npartitions,
							   char **members, TimestampTz *expires);
extern void esrc_lease_forget(const EsrcSubKey *sub);
extern void esrc_lease_leave(const EsrcSubKey *sub, const char *member);

/* subcatalog.c: the subscriptions' GUCs */
extern void esrc_subscription_init(void);

/*
 * locktag_field4 of esrc's heavyweight locks on names (advisory lock tags
 * on a 64-bit hash of the name; user advisory locks use 1 and 2).  In
 * pg_locks they show as locktype 'advisory' with objsubid 17747 (stream)
 * and 17748 (category).
 */
#define ESRC_STREAM_LOCK_SPACE		0x4553
#define ESRC_CATEGORY_LOCK_SPACE	0x4554

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
#define Natts_events			9

/* append.c: refuse an esrc.events whose columns are not those above */
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

/* append.c: input checks shared with read.c */
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
 * read.c: index scans of esrc.events, for the read functions and for
 * the snapshot replays (snapbuild.c, snapread.c).  The first
 * ESRC_EVENT_NATTS columns of esrc.events are the columns of the row type
 * esrc.event.
 */
#define ESRC_EVENT_NATTS 8
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
 * sentence of its detail.
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
extern Oid	esrc_function_runs_as(Oid funcoid, Oid caller);

/* projection.c: the type esrc.event; a function by identity (InvalidOid if none) */
extern Oid	esrc_event_type_oid(void);
extern Oid	esrc_lookup_function(const char *identity);

/*
 * lifecycle.c: esrc.erase_stream() replaces the data of every event of the
 * stream with this JSON and its metadata with NULL (docs/lifecycle.md);
 * append.c's immutability trigger lets exactly that update pass while
 * erase_stream() is making it.
 */
#define ESRC_ERASED_DATA "{\"erased\": true}"
struct TriggerData;
extern bool esrc_erasure_permits(struct TriggerData *trigdata);
extern bool esrc_is_redacted(Datum data, bool datanull, bool metanull);
extern bool esrc_stream_erased(const char *stream, Snapshot snap,
							   TimestampTz *first_at);
extern void esrc_check_not_erased(const char *stream, Snapshot snap, bool appending);

/*
 * erasecost.c: the cost-based delay of erasure (esrc.erase_cost_delay,
 * esrc.erase_cost_limit).  A loop that redacts rows calls
 * esrc_erase_cost_begin() once and esrc_erase_cost_point() after each row
 * with the row's cost (esrc_erase_row_cost); it naps, interruptibly,
 * holding whatever locks its caller holds.
 */
#define ESRC_DEFAULT_ERASE_COST_DELAY	2		/* ms */
#define ESRC_DEFAULT_ERASE_COST_LIMIT	65536	/* bytes */
#define ESRC_ERASE_ROW_COST				BLCKSZ	/* bytes counted per row */
typedef struct EsrcEraseCost
{
	int			delay_ms;		/* esrc.erase_cost_delay at begin; 0 = off */
	int			limit;			/* esrc.erase_cost_limit at begin, bytes */
	int64		balance;		/* work since the last nap, bytes */
	int64		naps;			/* naps taken */
	int64		slept_us;		/* time spent in them */
} EsrcEraseCost;
extern int	esrc_erase_cost_delay_ms;
extern int	esrc_erase_cost_limit;
extern void esrc_erase_cost_init(void);
extern void esrc_erase_cost_begin(EsrcEraseCost *cost);
extern int64 esrc_erase_row_cost(Datum data, bool datanull, Datum metadata,
								 bool metanull);
extern void esrc_erase_cost_point(EsrcEraseCost *cost, int64 work);

/*
 * lifecycle.c: record a call in esrc.erasures; check the required reason
 * of a life-cycle call.
 */
extern void esrc_record_erasure(const char *what, const char *stream,
								int64 events, const char *reason,
								Jsonb *rules, Oid session_user,
								Oid current_user);
extern char *esrc_check_reason(text *reason, const char *what);

/*
 * lifecycle.c: the redaction in place of erase_stream(), shared with
 * scavenge.c: open esrc.events for it, collect the not yet redacted events
 * of a stream in a version range, redact them, close.  The caller holds
 * the stream lock (append.c) of every stream it redacts.
 */
struct EState;
typedef struct EsrcRedactor
{
	struct RelationData *rel;	/* esrc.events, RowExclusiveLock */
	struct EState *estate;
	struct ResultRelInfo *rri;
	struct RelationData *idx;	/* the unique index on (stream, version) */
	struct TupleTableSlot *scanslot;
	Datum		marker;			/* ESRC_ERASED_DATA as jsonb */
} EsrcRedactor;
extern void esrc_redactor_open(EsrcRedactor *r);
extern int64 esrc_redactor_collect(EsrcRedactor *r, Datum stream, int64 lo,
								   int64 hi, int64 limit, Snapshot snap,
								   ItemPointerData **todo, int64 *ntodo,
								   int64 *next_version);
extern void esrc_redactor_redact(EsrcRedactor *r, ItemPointerData *todo,
								 int64 ntodo, Snapshot snap, EsrcEraseCost *cost);
extern void esrc_redactor_close(EsrcRedactor *r);

/* rules.c: a stream's first visible version from esrc.stream_rules itself */
extern bool esrc_rules_first_visible_now(const char *stream, Snapshot snap,
										 TimestampTz now, int64 *first_visible);

/* scavenge.c: the scavenger's settings and the workers' slice */
extern int	esrc_scavenge_interval_s;
extern int	esrc_scavenge_max_events;
extern void esrc_scavenge_init(void);
extern void esrc_scavenge_worker_slice(void);

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

/* rulebound.c: append marks of the streams with rules */
extern Size esrc_mark_shmem_size(void);
extern void esrc_mark_shmem_init(void);
extern void esrc_mark_append(uint32 hash);
extern uint64 esrc_mark_clock(void);
extern bool esrc_mark_quiet(uint32 hash, uint64 clock, uint64 *mark);

/* rulebound.c: a stream's first visible version, kept between reads */
typedef struct EsrcBound
{
	uint64		serial;			/* the read that last used it; 0: none */
	bool		clean;			/* computed while its slot was quiet */
	uint64		mark;			/* the slot's started count then */
	int64		first_visible;
	TimestampTz cut_after;		/* holds while cut_after < the read's */
	TimestampTz cut_until;		/* max_age cutoff <= cut_until */
} EsrcBound;
extern uint64 esrc_bound_serial(void);
extern int64 esrc_bound_lookup(EsrcBound *e, uint32 hash, uint64 serial,
							   uint64 clock, TimestampTz cutoff,
							   uint64 *mark, bool *quiet);
extern void esrc_bound_store(EsrcBound *e, uint64 serial, uint64 mark,
							 bool quiet, int64 first_visible,
							 TimestampTz cut_after, TimestampTz cut_until);

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

/*
 * metrics.c: counters for esrc.metrics, per database in shared memory.
 * The append path's are counted at commit; the others at once.
 */
extern bool esrc_track_metrics;
extern void esrc_metrics_init(void);
extern Size esrc_metrics_shmem_size(void);
extern void esrc_metrics_shmem_init(void);
extern void esrc_metrics_append(int nevents, bool idempotent);
extern void esrc_metrics_conflict(void);
extern void esrc_metrics_forwarded(int records);
extern void esrc_metrics_forwarder_error(void);

/* ----------------------------------------------------------------
 * The owner context (ownerctx.c; common/common.h once src/ is split by
 * subsystem, issue 25): run code as an owner, security-restricted, with
 * search_path pinned.  Enter and leave in the same function; leave on
 * success only -- on ERROR the (sub)transaction abort restores the user
 * and unwinds the GUC level; a caller that must have its user back
 * before the error goes on up calls esrc_owner_restore_user() in its
 * PG_FINALLY (ownerctx.c's header says which callers do).
 * ----------------------------------------------------------------
 */
/* the search_path of every owner context (and of the workers' sessions) */
#define ESRC_OWNER_SEARCH_PATH	"pg_catalog, pg_temp"
/* flags of esrc_owner_enter */
#define ESRC_OWNER_PIN_PATH		0x01	/* GUC nest level, search_path pinned */
#define ESRC_OWNER_GUC_LEVEL	0x02	/* GUC nest level, search_path as it is
										 * (an outer context pinned it) */
#define ESRC_OWNER_NOT_LOCAL	0x04	/* no SECURITY_LOCAL_USERID_CHANGE
										 * (the forwarder's transactions) */
typedef struct EsrcOwnerContext
{
	Oid			save_userid;	/* the caller's user ... */
	int			save_sec_context;	/* ... and security context */
	bool		switched;		/* the user was switched (owner valid) */
	int			gucs;			/* GUC nest level opened; 0 = none */
} EsrcOwnerContext;
extern void esrc_owner_enter(EsrcOwnerContext *ctx, Oid owner, int flags);
extern void esrc_owner_leave(EsrcOwnerContext *ctx);
extern void esrc_owner_restore_user(const EsrcOwnerContext *ctx);
/* one SQL statement (SPI connected) in the full context (ESRC_OWNER_PIN_PATH) */
extern void esrc_run_as_owner(Oid owner, const char *sql, int nargs,
							  Oid *argtypes, Datum *values, const char *nulls,
							  int expected_rc);

/* catalog lookups (esrc.c) */
extern Oid	esrc_schema_oid(void);
extern Oid	esrc_relation_oid(const char *relname);
extern Oid	esrc_relation_owner(Oid relid);

/* append.c: the 40001 of an append (or erase) over an event its snapshot misses */
extern esrc_noreturn void esrc_concurrent_append_error(const char *stream);

/* esrc.c: the body of the append-only triggers of esrc's records */
extern esrc_noreturn void esrc_refuse_change(FunctionCallInfo fcinfo, const char *fname,
											 const char *table, const char *record,
											 const char *detail);

#endif							/* ESRC_H */
