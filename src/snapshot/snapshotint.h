/*-------------------------------------------------------------------------
 *
 * snapshotint.h
 *	  What the pieces of the snapshot code share; private to them.
 *
 * The snapshot code is six files: snapshot.c (the catalog and its
 * triggers, the per-backend cache of definitions, locks, checks, reducer
 * calls and the fold, esrc.merge), snapapply.c (the trigger on
 * esrc.events), snapbuild.c (replay into a table; create/drop_snapshot),
 * snaprebuild.c (rebuild_snapshot, online), snapread.c (load,
 * snapshot_at) and snapmanage.c (create_snapshot's if_not_exists, the
 * grants of a new snapshot's readers).  The design --
 * invariants, locks, security, caching -- is described at the top of
 * snapshot.c.  The rest of esrc sees none of this.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_SNAPSHOTINT_H
#define ESRC_SNAPSHOTINT_H

#include "executor/spi.h"
#include "fmgr.h"
#include "nodes/primnodes.h"
#include "storage/lock.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/snapshot.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "log/log.h"

/* the columns of esrc.event: the first ones of esrc.events (logscan.c) */
#define EVENT_NATTS ESRC_EVENT_NATTS

typedef enum SnapshotPlan
{
	PLAN_SELECT,				/* $1 stream -> version, state */
	PLAN_UPDATE,				/* $1 stream, $2 version, $3 state, $4 now */
	PLAN_INSERT,				/* same parameters */
	PLAN_DELETE_ALL,
	NUM_PLANS
} SnapshotPlan;

/* One cached snapshot definition (memory: the cache context). */
typedef struct SnapshotDef
{
	Oid			relid;
	char	   *relname;		/* for messages */
	char	   *qualname;		/* quoted schema.table, for SQL */
	Oid			owner;			/* owner of the table: runs the reducer */
	char	   *category;
	char	   *reducer_name;	/* as stored in esrc.snapshots */
	Oid			reducer;
	FmgrInfo	flinfo;
	Jsonb	   *initial_state;

	/* why the snapshot cannot be applied; broken_msg NULL = it can */
	int			broken_code;
	char	   *broken_msg;
	char	   *broken_detail;

	SPIPlanPtr	plans[NUM_PLANS];	/* prepared on first use */

	/*
	 * The direct path of the trigger (see apply_event_direct), set up on
	 * first use: direct is -1 before, then 1 if the table qualifies, else 0
	 * (the trigger then goes through SPI).
	 */
	int			direct;
	Oid			pkindex;		/* unique btree index on (stream) */
	RegProcedure eqproc;		/* its equality function */
	Oid			eqcollation;	/* and collation */
	AttrNumber	att[4];			/* stream, version, state, updated_at */
} SnapshotDef;

/* Hash entry: the defs of one category are defs[first .. first+count-1]. */
typedef struct CategoryEntry
{
	char		category[ESRC_MAX_STREAM_NAME + 1];
	int			first;
	int			count;
} CategoryEntry;

/* The backend's cache of definitions. */
typedef struct SnapshotCache
{
	bool		valid;
	bool		callbacks_registered;
	MemoryContext cxt;
	Oid			catalog_relid;	/* esrc.snapshots */
	Oid			event_typid;	/* esrc.event */
	TupleDesc	event_desc;
	int			ndefs;
	SnapshotDef *defs;			/* sorted by (category, relid) */
	HTAB	   *by_category;
} SnapshotCache;

/* The backend's cache of definitions (snapshot.c). */
extern SnapshotCache snap_cache;

/* true while reducers run or snapshot tables are written */
extern bool snapshot_busy;

/* error context of reducer calls */
typedef struct ApplyErrorArg
{
	const char *snapshot;
	const char *stream;
	int64		version;
} ApplyErrorArg;

/* The state of one fold of a stream's events through a reducer. */
typedef struct Fold
{
	SnapshotDef *def;
	MemoryContext evcxt;		/* reset after every event */
	MemoryContext streamcxt;	/* reset at every new stream */
	MemoryContext statecxt[2];	/* the state lives in statecxt[cur] */
	int			cur;
	Datum		state;
	int64		next_version;	/* version the next event must have */
	int64		applied;		/* events applied in this fold */
	char	   *stream;			/* in streamcxt */
	ApplyErrorArg errarg;
} Fold;


/* snapshot.c: small helpers */
extern void snap_check_not_busy(const char *what);
extern LockAcquireResult snap_lock_category(const char *category, LOCKMODE mode);
extern char *snap_check_category(text *value);
extern RangeVar *snapshot_rangevar(FunctionCallInfo fcinfo, int argno);
extern void snap_check_reducer(Oid funcoid);
extern void snap_catalog_write(const char *sql, int nargs, Oid *argtypes,
							   Datum *values, int expected_rc);
extern void snap_record_dependencies(Oid relid, Oid reducer);

/* snapshot.c: the cache of definitions */
extern void snap_ensure_cache(void);
extern SnapshotDef *snap_get_def(Oid relid);
extern void snap_raise_if_broken(SnapshotDef *def);
extern SPIPlanPtr snap_def_plan(SnapshotDef *def, SnapshotPlan which);

/* snapshot.c: calling reducers, the fold of a stream */
extern void snap_apply_error_callback(void *arg);
extern Datum snap_call_reducer(SnapshotDef *def, Datum state, Datum event);
extern Datum snap_make_event(Datum *values, bool *nulls);
extern void snap_fold_init(Fold *f, SnapshotDef *def);
extern void snap_fold_start(Fold *f, const char *stream);
extern void snap_fold_resume(Fold *f, const char *stream, Datum state, int64 version);
extern void snap_fold_apply(Fold *f, Datum *values, bool *nulls);
extern void snap_fold_end(Fold *f);

/* snapapply.c: can the trigger write def's table directly (def->direct) */
extern void snap_choose_path(SnapshotDef *def);

/* snapbuild.c: folding a category into a table */
typedef void (*SnapRowWriter) (Fold *f, TimestampTz now, void *arg);
extern void snap_fold_sorted(Fold *f, Snapshot snap, int64 hi, SnapRowWriter write,
							 void *arg);
extern int64 snap_with_fold(SnapshotDef *def, void (*body) (Fold *f, void *arg), void *arg);
extern int64 snap_replay_in_place(SnapshotDef *def);

/* snapmanage.c: create_snapshot's if_not_exists, the readers' grants */
extern bool snap_exists_same(Oid nsp, const char *relname, const char *category,
							 Oid reducer, Jsonb *initial_state);
extern void snap_grant_readers(Oid nsp, const char *qualname);

#endif							/* ESRC_SNAPSHOTINT_H */
