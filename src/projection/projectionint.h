/*-------------------------------------------------------------------------
 *
 * projectionint.h
 *	  Private to src/projection/: the settings, the launcher and
 *	  worker entry points (projlauncher.c, projworker.c), the wake-up of a
 *	  database's workers, and the handler context shared by the worker and
 *	  reset_projection (projection.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_PROJECTIONINT_H
#define ESRC_PROJECTIONINT_H

#include "fmgr.h"
#include "utils/array.h"

#include "projection/projection.h"

/* settings (projection.c) */
extern int	esrc_projection_workers;
extern int	esrc_projection_max_attempts;
extern int	esrc_projection_retry_delay_ms;
extern int	esrc_projection_retry_max_delay_ms;

/*
 * the search_path the workers pin for good: the owner context's (base/base.h),
 * so that entering it for a handler call changes nothing
 */
#define PROJECTION_SEARCH_PATH	ESRC_OWNER_SEARCH_PATH

/* projlauncher.c */
extern void esrc_projection_register_launcher(void);
extern void esrc_projection_wake(Oid dbid);
extern int	esrc_projection_db_workers(void);
extern PGDLLEXPORT void esrc_projection_launcher_main(Datum arg);
/* a worker: its slot, what it does at exit */
extern void esrc_projection_worker_attach(int slot, Oid *dbid, int *number);
extern uint64 esrc_projection_wake_seq(void);
extern void esrc_projection_worker_exit_idle(uint64 checked_seq);	/* does not return */

/* projpace.c: naps of the workers under a burst, the wait between rounds */
extern void esrc_projection_pace_init(void);
extern void esrc_projection_pace(int n);
extern void esrc_projection_round_begin(void);
extern int	esrc_projection_round_end(int64 applied);

/* projworker.c */
extern PGDLLEXPORT void esrc_projection_worker_main(Datum arg);

/* projection.c */
/* the projection whose handler this backend is calling (projworker.c), 0 = none */
extern int64 esrc_running_projection;
extern const char *esrc_handler_problem(Oid funcoid, bool reset);
extern void esrc_call_as_owner(Oid owner, FmgrInfo *flinfo, int nargs, Datum arg);
extern void esrc_projection_wake_at_commit(void);
/* esrc.drop_projection, whose code DROP OWNED runs (owners.c) */
extern Datum esrc_drop_projection(PG_FUNCTION_ARGS);
extern bool esrc_projection_owner_reads(int64 id, const char *name, Oid owner,
										Oid handler);

/* projdeclare.c: the if_not_exists form of create_projection */
extern int64 esrc_projection_declared(const char *name, const char *handler,
									  const char *reset, int32 batch_size,
									  ArrayType *cats, int32 partitions,
									  ArrayType *erase_from, const char *erase_column);

/* projerase.c: the rows of erased and deleted streams in a projection's tables */
typedef struct ProjErase ProjErase;
struct TupleTableSlot;
extern ArrayType *esrc_projection_erase_check(FunctionCallInfo fcinfo, int tables_arg,
											  int column_arg, Oid owner, char **column);
extern void esrc_projection_set_erase(int64 id, ArrayType *tables, const char *column);
extern ProjErase *esrc_projection_erase_load(Datum tables, bool isnull, Datum column,
											 bool column_isnull, MemoryContext cxt);
extern void esrc_projection_erase_clear(ProjErase *e);
extern void esrc_projection_erase_note(ProjErase *e, struct TupleTableSlot *slot);
extern void esrc_projection_erase_flush(ProjErase *e, Oid owner);

/* projnarrow.c: one event a batch after a batch failed outside its handler */
extern int64 esrc_projection_narrowed_until(int64 id);
extern void esrc_projection_set_narrowed(int64 id, int64 until);

/* projretry.c: the handlers a pg_proc change retries (projworker.c) */
extern void esrc_projretry_init(void);
extern bool esrc_projretry_pending(void);
extern bool esrc_projretry_changed(Oid handler);
extern void esrc_projretry_reset(void);

/* projhint.c: a failing handler's error, with the search_path hint */
extern char *esrc_handler_error_text(const ErrorData *edata);

#endif							/* ESRC_PROJECTIONINT_H */
