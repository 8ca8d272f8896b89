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

/* idcheck.c: an idempotent retry must give the stored event again */
extern void esrc_check_retry_matches(struct TupleTableSlot *slot, pg_uuid_t *id,
									 const char *type, Jsonb *data, Jsonb *metadata);

#endif							/* ESRC_LOG_LOGINT_H */
