/*-------------------------------------------------------------------------
 *
 * lifecycleint.h
 *	  Private to src/lifecycle/: the erasure's pacing (erasecost.c), the
 *	  audit record and reason check of life-cycle calls (erase.c, for
 *	  retention.c, crypto.c and scrub.c), and the redactor (erase.c, for
 *	  scavenge.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_LIFECYCLE_LIFECYCLEINT_H
#define ESRC_LIFECYCLE_LIFECYCLEINT_H

#include "lifecycle/lifecycle.h"
#include "log/log.h"

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
extern void esrc_erase_cost_begin(EsrcEraseCost *cost);
extern int64 esrc_erase_row_cost(Datum data, bool datanull, Datum metadata,
								 bool metanull);
extern void esrc_erase_cost_point(EsrcEraseCost *cost, int64 work);

/* erase.c: record a life-cycle call in esrc.erasures; check its reason */
extern void esrc_record_erasure(const char *what, const char *stream,
								int64 events, const char *reason,
								Jsonb *rules, Oid session_user,
								Oid current_user);
extern char *esrc_check_reason(text *reason, const char *what);

/*
 * erase.c: the redaction in place of erase_stream(), shared with
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

#endif							/* ESRC_LIFECYCLE_LIFECYCLEINT_H */
