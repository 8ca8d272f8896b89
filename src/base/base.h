/*-------------------------------------------------------------------------
 *
 * base.h
 *	  The face of src/base/: what every subsystem may use.  catalog.c
 *	  (the extension's own objects, the shared-memory check, the
 *	  append-only triggers' refusal), launch.c (what both launchers share),
 *	  metrics.c (the counters of esrc.metrics), ownerctx.c (the owner
 *	  context: run code as an owner, security-restricted, search_path
 *	  pinned), and the version differences
 *	  of PostgreSQL (compat.h, included here).  Nothing in base/ calls a
 *	  subsystem.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_BASE_BASE_H
#define ESRC_BASE_BASE_H

#include "postgres.h"
#include "fmgr.h"
#include "compat.h"
#include "datatype/timestamp.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"

/* A TimestampTz as microseconds since the Unix epoch (0 stays 0), for logs. */
static inline int64
esrc_unix_us(TimestampTz t)
{
	if (t == 0)
		return 0;
	return (int64) t +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC;
}

/*
 * catalog.c: the shared memory is there (esrc.c sets the flag); the
 * extension's schema, relations and their owner; the type esrc.event; a
 * function by identity (InvalidOid if none); the body of the append-only
 * triggers of esrc's records.
 */
extern bool esrc_shmem_attached;
extern void esrc_require_shared(void);
extern Oid	esrc_schema_oid(void);
extern Oid	esrc_relation_oid(const char *relname);
extern Relation esrc_open_relation(const char *relname, LOCKMODE lockmode);
extern Oid	esrc_relation_owner(Oid relid);
extern Oid	esrc_event_type_oid(void);
extern Oid	esrc_lookup_function(const char *identity);
extern esrc_noreturn void esrc_refuse_change(FunctionCallInfo fcinfo, const char *fname,
											 const char *table, const char *record,
											 const char *detail);

/* launch.c, for both launchers: every database that accepts connections */
extern void esrc_scan_databases(void (*fn) (Oid dbid, const char *name, void *arg),
								void *arg);
/* launch.c, for both launchers: a stopped worker and its restart */
#define ESRC_RESTART_DELAY_MS		1000
#define ESRC_RESTART_DELAY_MAX_MS	60000
struct BackgroundWorkerHandle;
extern bool esrc_launched_worker_stopped(struct BackgroundWorkerHandle *handle,
										 pid_t slot_pid);
extern int	esrc_restart_delay(int *failures);
/* launch.c, for both launchers: may a worker start in a database now? */
typedef enum EsrcDbAvailability
{
	ESRC_DB_AVAILABLE,			/* it exists and accepts connections */
	ESRC_DB_BUSY,				/* DROP/ALTER DATABASE holds it: ask again later */
	ESRC_DB_GONE				/* dropped, or no longer accepts connections */
} EsrcDbAvailability;
extern EsrcDbAvailability esrc_database_availability(Oid dbid);
/* launch.c: register a launcher (its entry point, its name) from _PG_init */
extern void esrc_register_launcher(const char *function, const char *name);
struct BackgroundWorkerHandle;
extern bool esrc_start_database_worker(const char *function, const char *name,
									   const char *type, int slot,
									   struct BackgroundWorkerHandle **handle);

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
extern uint64 esrc_metrics_events_now(void);

/*
 * ownerctx.c: the owner context -- run code as an owner,
 * security-restricted, with search_path pinned.  Enter and leave in the
 * same function; leave on success only -- on ERROR the (sub)transaction
 * abort restores the user and unwinds the GUC level; a caller that must
 * have its user back before the error goes on up calls
 * esrc_owner_restore_user() in its PG_FINALLY (ownerctx.c's header says
 * which callers do).
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

/* extacl.c: a GRANT or REVOKE (SPI connected) not recorded in pg_init_privs */
extern void esrc_run_acl_outside_extension(const char *sql);

/* does the role exist (syscache; no error) */
extern bool esrc_role_exists(Oid roleid);
/* 42704 when the owner of an object (kind "projection", ...) is gone */
extern void esrc_check_owner_exists(Oid owner, const char *kind, const char *name);

extern void esrc_owner_enter(EsrcOwnerContext *ctx, Oid owner, int flags);
extern void esrc_owner_leave(EsrcOwnerContext *ctx);
extern void esrc_owner_restore_user(const EsrcOwnerContext *ctx);
/* one SQL statement (SPI connected) in the full context (ESRC_OWNER_PIN_PATH) */
extern void esrc_run_as_owner(Oid owner, const char *sql, int nargs,
							  Oid *argtypes, Datum *values, const char *nulls,
							  int expected_rc);
/* the same with esrc_owner_enter's flags */
extern void esrc_run_sql_as(Oid owner, int flags, const char *sql, int nargs,
							Oid *argtypes, Datum *values, const char *nulls,
							int expected_rc);

/* namecheck.c: a handler's or reducer's table names without their schema */
extern void esrc_warn_unqualified_names(Oid funcoid, const char *what);

#endif							/* ESRC_BASE_BASE_H */
