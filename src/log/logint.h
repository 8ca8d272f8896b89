/*-------------------------------------------------------------------------
 *
 * logint.h
 *	  Private to src/log/: the in-flight registry in shared memory
 *	  (order.c) and the append marks and bounds of streams with rules
 *	  (rulebound.c, for rules.c, read.c and append.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_LOG_LOGINT_H
#define ESRC_LOG_LOGINT_H

#include "port/atomics.h"
#include "utils/array.h"
#include "utils/jsonb.h"
#include "utils/uuid.h"
#include "log/log.h"

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
 * The in-flight registry in shared memory (order.c's).  (Every subsystem
 * that keeps state in shared memory has a struct of its own.)
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

/*
 * order.c, for the horizon publisher (standby.c): one reading of the
 * registry of this database, R1 then R2-R3 and R2' of every entry (see
 * order.c, "Hot standbys").  horizon is the global horizon; hashes and
 * bounds (nentries, sorted by hash) the lowest bound per category hash;
 * overflow_bound the lowest overflow_bound, 0 if none.
 */
typedef struct EsrcRegistryCapture
{
	int64		last_position;	/* M: last(seq) at R1 */
	int64		horizon;		/* R3 */
	int			nentries;
	uint64	   *hashes;
	uint64	   *bounds;
	uint64		overflow_bound;
} EsrcRegistryCapture;

extern void esrc_capture_registry(Oid seqoid, EsrcRegistryCapture *cap);

/*
 * The one row of esrc.standby_horizon, which the publisher (standby.c)
 * writes in place on the primary and standbyread.c reads on a standby.
 */
/* its columns (src/sql/00_core.sql) */
#define Anum_sh_published_at	2
#define Anum_sh_horizon			3
#define Anum_sh_last_position	4
#define Anum_sh_overflow_bound	5
#define Anum_sh_ncategories		6
#define Anum_sh_categories		7
#define Natts_sh				7

/*
 * The (hash, bound) pairs the row holds (the length of categories, which
 * never changes: the row is overwritten in place).  A reading of the
 * registry with more categories in flight leaves them as they were
 * (standby.c's publish()).
 */
#define SH_CATEGORIES			16

typedef struct ShEntry
{
	uint64		hash;
	uint64		bound;
} ShEntry;

/* standby.c: the entry points of the horizon launcher and publishers */
extern PGDLLEXPORT void esrc_horizon_launcher_main(Datum arg);
extern PGDLLEXPORT void esrc_horizon_publisher_main(Datum arg);

/* rulebound.c: append marks of the streams with rules */
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
 * append.c: one event of an append, as checked from its input.  tags is a
 * text[] datum (sorted, no duplicates) or 0 for an event without tags.
 */
typedef struct EventInput
{
	char	   *type;
	Jsonb	   *data;
	Jsonb	   *metadata;		/* NULL = none */
	pg_uuid_t  *id;				/* NULL = generate */
	Datum		tags;			/* text[]; 0 = none */
} EventInput;

/*
 * query.c: a query of dynamic consistency boundaries (docs/dcb.md): items
 * OR'd; within an item, the types OR'd (none: any type) and every tag
 * required.  Names are C strings, sorted, without duplicates.
 */
typedef struct DcbItem
{
	int			ntypes;
	char	  **types;
	int			ntags;
	char	  **tags;
} DcbItem;

typedef struct DcbQuery
{
	int			nitems;
	DcbItem    *items;
	Jsonb	   *source;			/* as given, for messages */
} DcbQuery;

/* the condition of esrc.append_if */
typedef struct DcbCondition
{
	DcbQuery   *query;
	int64		after;
} DcbCondition;

#define ESRC_MAX_TAGS			32		/* per event */
#define ESRC_MAX_TAG_LEN		256		/* bytes */
#define ESRC_MAX_QUERY_ITEMS	64
#define ESRC_MAX_QUERY_NAMES	64		/* types or tags of one item */
/* a condition scans the positions after its "after" when at most this many */
#define ESRC_CONDITION_SCAN_SPAN	1000

/*
 * locktag_field4 of the (type, tag) key locks of tags.c, and the number of
 * lock buckets the keys hash into: a transaction holds at most this many
 * key locks, whatever it appends.
 */
#define ESRC_KEY_LOCK_SPACE		0x4555
#define ESRC_KEY_LOCK_BUCKETS	1024

/* append.c */
extern EventInput *esrc_parse_batch(Jsonb *batch, int *nevents);
extern int64 esrc_append_checked(char *stream, int nevents, EventInput *events,
								 bool expected_isnull, int64 expected,
								 const DcbCondition *cond);
extern char *esrc_check_stream_name(text *value);
extern void esrc_check_expected(bool isnull, int64 expected);

/* tags.c */
extern Datum esrc_tags_from_array(ArrayType *arr, const char *what);
extern Datum esrc_tags_from_jsonb(JsonbValue *val, const char *what);
extern char *esrc_check_tag(const char *s, int len, const char *what);
extern Size esrc_tags_json_size(Datum tags);
extern void esrc_lock_event_keys(int nevents, const EventInput *events,
								 const DcbCondition *cond);

/* query.c */
extern void esrc_check_condition(const DcbCondition *cond, const char *stream);
extern DcbCondition *esrc_condition_arg(FunctionCallInfo fcinfo, int n);
extern void esrc_check_condition_after(const DcbCondition *cond);
/* idcheck.c: an idempotent retry must give the stored event again */
extern void esrc_check_retry_matches(struct TupleTableSlot *slot, pg_uuid_t *id,
									 const char *type, Jsonb *data, Jsonb *metadata);

#endif							/* ESRC_LOG_LOGINT_H */
