/*-------------------------------------------------------------------------
 *
 * snapshot.c
 *	  Snapshots maintained by triggers: the catalog esrc.snapshots, the
 *	  trigger on esrc.events that applies each new event to the snapshots of
 *	  its category, create/rebuild/drop_snapshot, load, snapshot_at and the
 *	  built-in reducer esrc.merge.
 *
 * A snapshot is a table (stream text PRIMARY KEY, version bigint, state
 * jsonb, updated_at timestamptz) plus a row in esrc.snapshots naming the
 * category it follows, its reducer (state jsonb, event esrc.event) RETURNS
 * jsonb and its initial state.  Invariants kept:
 *
 *	 S1 a snapshot row and the events it reflects are written by the same
 *		transaction: the trigger runs inside the append, so a rolled-back
 *		append leaves no trace in any snapshot;
 *	 S2 every committed snapshot row equals a replay of its stream's events
 *		through the reducer, and its version is the version of the last
 *		event applied.  The trigger checks version = previous + 1 before it
 *		applies an event (S2 would be broken otherwise).
 *
 * The trigger applies only events whose transaction holds append.c's
 * stream lock, i.e. events written by esrc.append/append_batch.  Rows
 * loaded into the log any other way (pg_restore in any order, COPY,
 * logical replication, a superuser's INSERT) are left to the snapshot
 * tables' own restore or to rebuild_snapshot: loading a log never runs
 * reducers.
 *
 * Writing.  For a table as create_snapshot makes it, the trigger looks the
 * row up in the primary key and writes it with the executor's simple
 * insert/update (what logical replication uses): no SPI, no planning.  For
 * anything else (extra columns, forced row-level security, missing
 * privileges) it runs the equivalent SQL through SPI.  Load and the writes
 * of rebuild always use SPI.  Rebuild and snapshot_at read the log with
 * read.c's index scans (the category's, the stream's), never a plan, so
 * their cost follows what they read, not the size of the log.
 *
 * Concurrency.  Row updates of one stream are serialized by the stream
 * lock of append.c.  Three more locks make S2 hold against the DDL:
 *
 *	 - the category lock (an advisory lock tag in key space
 *	   ESRC_CATEGORY_LOCK_SPACE): every append takes it in ShareLock mode, from
 *	   its first event of the category until the transaction ends;
 *	   create_snapshot and drop_snapshot take it in ExclusiveLock mode, so
 *	   they wait for the category's in-flight appends and block new ones
 *	   until they commit.  An append that waited for it processes the
 *	   pending invalidations and so sees the new definitions;
 *	 - the snapshot table lock: the trigger takes RowExclusiveLock on every
 *	   snapshot table of the category *before* it reads the current row;
 *	   rebuild_snapshot takes ExclusiveLock, which waits for in-flight
 *	   appends and blocks new ones (not readers) until it commits;
 *	 - the trigger reads and writes snapshot rows with a snapshot taken
 *	   after those locks (GetLatestSnapshot, as RI triggers do), whatever
 *	   the isolation level, so an append that waited behind a rebuild or a
 *	   create applies its event on top of the rows they committed.
 *
 * Security.  Appends run as the appending role (esrc.append is neither
 * SECURITY DEFINER nor has a SET clause).  The trigger applies each
 * snapshot -- the row lookup, the reducer and the write, with all the code
 * the write runs: the table's row triggers, CHECK constraints, defaults,
 * index expressions, row-level security -- as the owner of the snapshot
 * table under SECURITY_RESTRICTED_OPERATION, with search_path pinned to
 * "pg_catalog, pg_temp" and a GUC nest level per snapshot and per reducer
 * call that undoes any setting made in it (apply_to_all).  create/rebuild
 * write the table the same way; load/snapshot_at/rebuild run reducers the
 * same way.  Only writes to esrc.snapshots run as the catalog's owner.
 * All SQL built here quotes identifiers and qualifies operators.
 *
 * Caching.  Definitions are cached per backend, keyed by category, with
 * the reducer's FmgrInfo, the choice of write path and prepared SPI plans.  The cache is dropped on
 * relcache invalidation of esrc.snapshots (the catalog triggers send one for
 * every change) or of a snapshot table, and on any change of pg_proc,
 * pg_namespace, pg_authid or pg_auth_members (reducer replaced, renamed,
 * privileges), so every session sees a change at its next append.  While a
 * reducer runs ("busy"), none of the functions here may be entered again:
 * that keeps the cache from being freed under a caller.
 *
 * Talks to: append.c (whose INSERT fires the trigger; stream lock), read.c
 * (index scans of the log), esrc.c
 * (catalog lookups), src/sql/10_snapshot.sql (the SQL objects).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/event_trigger.h"
#include "commands/extension.h"
#include "commands/tablecmds.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/rls.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/tuplesort.h"
#include "utils/typcache.h"
#include "utils/varlena.h"

#include "esrc.h"

PG_FUNCTION_INFO_V1(esrc_apply_snapshots);
PG_FUNCTION_INFO_V1(esrc_snapshots_catalog);
PG_FUNCTION_INFO_V1(esrc_snapshots_sql_drop);
PG_FUNCTION_INFO_V1(esrc_merge);
PG_FUNCTION_INFO_V1(esrc_create_snapshot);
PG_FUNCTION_INFO_V1(esrc_rebuild_snapshot);
PG_FUNCTION_INFO_V1(esrc_drop_snapshot);
PG_FUNCTION_INFO_V1(esrc_load);
PG_FUNCTION_INFO_V1(esrc_snapshot_at);

/*
 * Category locks (ESRC_CATEGORY_LOCK_SPACE) and the stream lock of append.c
 * (ESRC_STREAM_LOCK_SPACE) share esrc_name_locktag(): the trigger applies
 * an event only when its transaction holds that stream lock, i.e. when
 * esrc.append or append_batch inserted it.
 */

/* what reducers (and snapshot SQL) run with */
#define SNAPSHOT_SEARCH_PATH "pg_catalog, pg_temp"

/* columns of esrc.snapshots, in the order of 10_snapshot.sql */
#define Anum_snapshots_snapshot		1
#define Anum_snapshots_category		2
#define Anum_snapshots_reducer		3
#define Anum_snapshots_initial_state 4
#define Natts_snapshots_min			4

/* the columns of esrc.event: the first ones of esrc.events (read.c) */
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

static SnapshotCache cache;

/* true while reducers run or snapshot tables are written */
static bool snapshot_busy = false;

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

static void ensure_cache(void);

/* ----------------------------------------------------------------
 * Small helpers
 * ----------------------------------------------------------------
 */

static void
check_not_busy(const char *what)
{
	if (snapshot_busy)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("%s cannot be used while a snapshot is being updated", what),
				 errdetail("Snapshot reducers, and triggers on snapshot tables, must not append events or call snapshot functions.")));
}

static LockAcquireResult
lock_category(const char *category, LOCKMODE mode)
{
	LOCKTAG		tag;

	esrc_name_locktag(&tag, category, ESRC_CATEGORY_LOCK_SPACE);
	return LockAcquire(&tag, mode, false, false);
}

/* Does this transaction hold append.c's lock on stream? */
static bool
holds_stream_lock(const char *stream)
{
	LOCKTAG		tag;

	esrc_name_locktag(&tag, stream, ESRC_STREAM_LOCK_SPACE);
	return esrc_lock_held_by_me(&tag, ExclusiveLock);
}

/* A category as given to create_snapshot: a valid name without "-". */
static char *
check_category(text *value)
{
	char	   *category = esrc_check_name(value, "category", ESRC_MAX_STREAM_NAME);

	if (strchr(category, '-') != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("category must not contain \"-\""),
				 errdetail("The category of a stream is the part of its name before the first \"-\".")));
	return category;
}

static RangeVar *
snapshot_rangevar(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("snapshot name must not be null")));
	return makeRangeVarFromNameList(textToQualifiedNameList(PG_GETARG_TEXT_PP(argno)));
}


/*
 * Why funcoid cannot be a reducer, or NULL if it can.  Never raises an
 * error, so that the cache can record a broken definition instead.
 */
static const char *
reducer_problem(Oid funcoid, Oid event_typid)
{
	HeapTuple	tp = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcoid));
	Form_pg_proc p;
	const char *problem = NULL;

	if (!HeapTupleIsValid(tp))
		return "does not exist";
	p = (Form_pg_proc) GETSTRUCT(tp);
	if (p->prokind != PROKIND_FUNCTION)
		problem = "is not a plain function";
	else if (p->proretset)
		problem = "returns a set";
	else if (p->pronargs != 2 ||
			 p->proargtypes.values[0] != JSONBOID ||
			 p->proargtypes.values[1] != event_typid)
		problem = "does not take the arguments (jsonb, esrc.event)";
	else if (p->prorettype != JSONBOID)
		problem = "does not return jsonb";
	ReleaseSysCache(tp);
	return problem;
}

static void
check_reducer(Oid funcoid)
{
	const char *problem = reducer_problem(funcoid, esrc_event_type_oid());

	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("function %s cannot be a snapshot reducer", format_procedure(funcoid)),
				 errdetail("A reducer has the signature (state jsonb, event esrc.event) RETURNS jsonb; this function %s.",
						   problem)));
}

/* The role that owns esrc.snapshots (the extension's creator). */
static Oid
catalog_owner(Oid catalog_relid)
{
	HeapTuple	tp = SearchSysCache1(RELOID, ObjectIdGetDatum(catalog_relid));
	Oid			owner;

	if (!HeapTupleIsValid(tp))
		elog(ERROR, "cache lookup failed for relation %u", catalog_relid);
	owner = ((Form_pg_class) GETSTRUCT(tp))->relowner;
	ReleaseSysCache(tp);
	return owner;
}

/*
 * Run one statement on esrc.snapshots as its owner (inside an SPI
 * connection).  Callers have checked the caller's right to do it.
 */
static void
catalog_write(const char *sql, int nargs, Oid *argtypes, Datum *values,
			  int expected_rc)
{
	Oid			save_userid;
	int			save_sec_context;
	int			rc;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(catalog_owner(esrc_relation_oid("snapshots")),
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	PG_TRY();
	{
		rc = SPI_execute_with_args(sql, nargs, argtypes, values, NULL, false, 0);
		if (rc != expected_rc)
			elog(ERROR, "\"%s\" failed: %s", sql, SPI_result_code_string(rc));
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	PG_END_TRY();
}

/*
 * Dependencies of a snapshot table: AUTO on the extension (DROP EXTENSION
 * drops it) and NORMAL on the reducer (DROP FUNCTION refuses, or cascades
 * to the table).  Idempotent: earlier records are replaced.
 */
static void
forget_dependencies(Oid relid)
{
	deleteDependencyRecordsForClass(RelationRelationId, relid,
									ExtensionRelationId, DEPENDENCY_AUTO);
	deleteDependencyRecordsForClass(RelationRelationId, relid,
									ProcedureRelationId, DEPENDENCY_NORMAL);
}

static void
record_dependencies(Oid relid, Oid reducer)
{
	ObjectAddress table;
	ObjectAddress ext;
	ObjectAddress func;

	forget_dependencies(relid);
	ObjectAddressSet(table, RelationRelationId, relid);
	ObjectAddressSet(ext, ExtensionRelationId, get_extension_oid("esrc", false));
	ObjectAddressSet(func, ProcedureRelationId, reducer);
	recordDependencyOn(&table, &ext, DEPENDENCY_AUTO);
	recordDependencyOn(&table, &func, DEPENDENCY_NORMAL);
}

/* Resolve a stored reducer signature; InvalidOid if it does not exist. */

/*
 * Enter the context reducers and the code of snapshot tables run in: a GUC
 * nest level with search_path pinned.  Returns the nest level for
 * leave_reducer_gucs(), which is only called on success (an error unwinds
 * the level with the transaction) and undoes every setting made since,
 * even a plain SET, as REFRESH MATERIALIZED VIEW does for the functions it
 * runs.  search_path is set only when it differs (it does not inside an
 * outer level of ours), so a nested level costs no catalog work.
 * call_reducer() adds a level of its own around each call, and
 * apply_to_all() one around each snapshot, so that what one owner's code
 * sets never reaches another owner's code, nor the caller.
 */
static int
enter_reducer_gucs(void)
{
	int			level = NewGUCNestLevel();

	if (strcmp(namespace_search_path, SNAPSHOT_SEARCH_PATH) != 0)
		(void) set_config_option("search_path", SNAPSHOT_SEARCH_PATH,
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	return level;
}

static void
leave_reducer_gucs(int level)
{
	AtEOXact_GUC(false, level);
}

/* ----------------------------------------------------------------
 * The cache of definitions
 * ----------------------------------------------------------------
 */

static void
snapshot_relcache_callback(Datum arg, Oid relid)
{
	int			i;

	if (!cache.valid)
		return;
	if (!OidIsValid(relid) || relid == cache.catalog_relid)
	{
		cache.valid = false;
		return;
	}
	for (i = 0; i < cache.ndefs; i++)
		if (cache.defs[i].relid == relid)
		{
			cache.valid = false;
			return;
		}
}

static void
snapshot_syscache_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	cache.valid = false;
}

static void
free_cache(void)
{
	int			i,
				j;

	for (i = 0; i < cache.ndefs; i++)
		for (j = 0; j < NUM_PLANS; j++)
			if (cache.defs[i].plans[j] != NULL)
				SPI_freeplan(cache.defs[i].plans[j]);
	if (cache.cxt != NULL)
		MemoryContextDelete(cache.cxt);
	cache.cxt = NULL;
	cache.ndefs = 0;
	cache.defs = NULL;
	cache.by_category = NULL;
	cache.event_desc = NULL;
}

static void
set_broken(SnapshotDef *def, int code, char *msg, char *detail)
{
	def->broken_code = code;
	def->broken_msg = msg;
	def->broken_detail = detail;
}

/* Fill *def from a row of esrc.snapshots (CurrentMemoryContext = cache). */
static void
load_def(SnapshotDef *def, Datum *values)
{
	HeapTuple	tp;
	Form_pg_class relform;
	const char *problem;

	memset(def, 0, sizeof(*def));
	def->direct = -1;
	def->relid = DatumGetObjectId(values[Anum_snapshots_snapshot - 1]);
	def->category = TextDatumGetCString(values[Anum_snapshots_category - 1]);
	def->reducer_name = TextDatumGetCString(values[Anum_snapshots_reducer - 1]);
	def->initial_state = DatumGetJsonbPCopy(values[Anum_snapshots_initial_state - 1]);

	tp = SearchSysCache1(RELOID, ObjectIdGetDatum(def->relid));
	if (!HeapTupleIsValid(tp))
	{
		def->relname = psprintf("%u", def->relid);
		def->qualname = def->relname;
		set_broken(def, ERRCODE_UNDEFINED_TABLE,
				   psprintf("the table of snapshot %u does not exist", def->relid),
				   pstrdup("The table was dropped while its definition stayed in esrc.snapshots."));
		return;
	}
	relform = (Form_pg_class) GETSTRUCT(tp);
	def->relname = pstrdup(NameStr(relform->relname));
	def->qualname = quote_qualified_identifier(get_namespace_name(relform->relnamespace),
											   def->relname);
	def->owner = relform->relowner;
	ReleaseSysCache(tp);

	def->reducer = esrc_lookup_function(def->reducer_name);
	if (!OidIsValid(def->reducer))
	{
		set_broken(def, ERRCODE_UNDEFINED_FUNCTION,
				   psprintf("reducer %s of snapshot \"%s\" does not exist",
							def->reducer_name, def->relname),
				   pstrdup("The function was renamed, moved to another schema or replaced with a different signature."));
		return;
	}
	problem = reducer_problem(def->reducer, cache.event_typid);
	if (problem != NULL)
	{
		set_broken(def, ERRCODE_DATATYPE_MISMATCH,
				   psprintf("function %s cannot be the reducer of snapshot \"%s\"",
							def->reducer_name, def->relname),
				   psprintf("A reducer has the signature (state jsonb, event esrc.event) RETURNS jsonb; this function %s.",
							problem));
		return;
	}
	if (esrc_proc_aclcheck(def->reducer, def->owner, ACL_EXECUTE) != ACLCHECK_OK)
	{
		set_broken(def, ERRCODE_INSUFFICIENT_PRIVILEGE,
				   psprintf("permission denied for function %s", def->reducer_name),
				   psprintf("The reducer of snapshot \"%s\" runs as the owner of its table, role \"%s\", which may not execute it.",
							def->relname, GetUserNameFromId(def->owner, false)));
		return;
	}
	fmgr_info_cxt(def->reducer, &def->flinfo, cache.cxt);
}

static int
def_cmp(const void *a, const void *b)
{
	const SnapshotDef *x = a;
	const SnapshotDef *y = b;
	int			c = strcmp(x->category, y->category);

	if (c != 0)
		return c;
	return (x->relid < y->relid) ? -1 : (x->relid > y->relid) ? 1 : 0;
}

/*
 * Read esrc.snapshots with the latest snapshot (definitions committed by
 * other sessions take effect at once, at any isolation level, and the
 * caller's own uncommitted changes are seen) and build the cache.
 */
static void
build_cache(void)
{
	Oid			nsp = get_namespace_oid("esrc", true);
	MemoryContext oldcxt;
	Relation	rel;
	Snapshot	snap;
	TableScanDesc scan;
	HeapTuple	tup;
	int			alloc = 8;
	HASHCTL		hctl;
	int			i;

	cache.catalog_relid = OidIsValid(nsp) ? get_relname_relid("snapshots", nsp) : InvalidOid;
	if (!OidIsValid(cache.catalog_relid))
	{
		/* extension half-installed or being dropped: nothing to apply */
		cache.valid = false;
		return;
	}

	cache.cxt = AllocSetContextCreate(CacheMemoryContext, "esrc snapshot cache",
									  ALLOCSET_SMALL_SIZES);
	oldcxt = MemoryContextSwitchTo(cache.cxt);

	cache.event_typid = esrc_event_type_oid();
	cache.event_desc = lookup_rowtype_tupdesc_copy(cache.event_typid, -1);
	if (cache.event_desc->natts != EVENT_NATTS)
		elog(ERROR, "type esrc.event has %d attributes, expected %d",
			 cache.event_desc->natts, EVENT_NATTS);

	cache.defs = palloc(sizeof(SnapshotDef) * alloc);
	rel = table_open(cache.catalog_relid, AccessShareLock);
	if (RelationGetDescr(rel)->natts < Natts_snapshots_min)
		elog(ERROR, "esrc.snapshots has an unexpected row type");
	snap = RegisterSnapshot(GetLatestSnapshot());
	scan = table_beginscan(rel, snap, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Datum	   *values = palloc(sizeof(Datum) * RelationGetDescr(rel)->natts);
		bool	   *nulls = palloc(sizeof(bool) * RelationGetDescr(rel)->natts);

		heap_deform_tuple(tup, RelationGetDescr(rel), values, nulls);
		if (cache.ndefs == alloc)
		{
			alloc *= 2;
			cache.defs = repalloc(cache.defs, sizeof(SnapshotDef) * alloc);
		}
		load_def(&cache.defs[cache.ndefs++], values);
		pfree(values);
		pfree(nulls);
	}
	table_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, AccessShareLock);

	qsort(cache.defs, cache.ndefs, sizeof(SnapshotDef), def_cmp);

	memset(&hctl, 0, sizeof(hctl));
	hctl.keysize = ESRC_MAX_STREAM_NAME + 1;
	hctl.entrysize = sizeof(CategoryEntry);
	hctl.hcxt = cache.cxt;
	cache.by_category = hash_create("esrc snapshot categories", 16, &hctl,
									HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	for (i = 0; i < cache.ndefs; i++)
	{
		bool		found;
		CategoryEntry *e = hash_search(cache.by_category, cache.defs[i].category,
									   HASH_ENTER, &found);

		if (!found)
		{
			e->first = i;
			e->count = 0;
		}
		e->count++;
	}
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Make the cache current.  Must not be called while snapshot_busy (the
 * callers check), since it frees the definitions a caller may be using.
 */
static void
ensure_cache(void)
{
	if (cache.valid)
		return;
	Assert(!snapshot_busy);

	if (!cache.callbacks_registered)
	{
		CacheRegisterRelcacheCallback(snapshot_relcache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(PROCOID, snapshot_syscache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, snapshot_syscache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(AUTHOID, snapshot_syscache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, snapshot_syscache_callback, (Datum) 0);
		cache.callbacks_registered = true;
	}

	free_cache();
	/* an invalidation arriving while we build makes the next call rebuild */
	cache.valid = true;
	PG_TRY();
	{
		build_cache();
	}
	PG_CATCH();
	{
		cache.valid = false;
		PG_RE_THROW();
	}
	PG_END_TRY();
}

static SnapshotDef *
find_def(Oid relid)
{
	int			i;

	for (i = 0; i < cache.ndefs; i++)
		if (cache.defs[i].relid == relid)
			return &cache.defs[i];
	return NULL;
}

/* The definition of the snapshot table relid, or a clear error. */
static SnapshotDef *
get_def(Oid relid)
{
	SnapshotDef *def;

	ensure_cache();
	def = find_def(relid);
	if (def == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("table \"%s\" is not a snapshot", get_rel_name(relid)),
				 errhint("Create snapshots with esrc.create_snapshot().")));
	return def;
}

static void
raise_if_broken(SnapshotDef *def)
{
	if (def->broken_msg != NULL)
		ereport(ERROR,
				(errcode(def->broken_code),
				 errmsg("%s", def->broken_msg),
				 def->broken_detail ? errdetail("%s", def->broken_detail) : 0,
				 def->broken_code == ERRCODE_UNDEFINED_TABLE ?
				 errhint("Delete the row of snapshot %u from esrc.snapshots.", def->relid) :
				 errhint("Fix the cause, or drop the snapshot with esrc.drop_snapshot() and create it again.")));
}

static void
check_stream_category(SnapshotDef *def, const char *stream)
{
	char	   *category = esrc_stream_category(stream);

	if (strcmp(category, def->category) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("stream \"%s\" is not in category \"%s\" of snapshot \"%s\"",
						stream, def->category, def->relname),
				 errdetail("The category of a stream is the part of its name before the first \"-\"; here it is \"%s\".",
						   category)));
}

/* Prepare the SQL of a snapshot table (inside an SPI connection). */
static SPIPlanPtr
def_plan(SnapshotDef *def, SnapshotPlan which)
{
	static Oid	argtypes[4] = {TEXTOID, INT8OID, JSONBOID, TIMESTAMPTZOID};
	char	   *sql = NULL;
	int			nargs = 4;
	SPIPlanPtr	plan;

	if (def->plans[which] != NULL)
		return def->plans[which];
	switch (which)
	{
		case PLAN_SELECT:
			sql = psprintf("SELECT version, state FROM %s WHERE stream OPERATOR(pg_catalog.=) $1",
						   def->qualname);
			nargs = 1;
			break;
		case PLAN_UPDATE:
			sql = psprintf("UPDATE %s SET version = $2, state = $3, updated_at = $4"
						   " WHERE stream OPERATOR(pg_catalog.=) $1",
						   def->qualname);
			break;
		case PLAN_INSERT:
			sql = psprintf("INSERT INTO %s (stream, version, state, updated_at)"
						   " VALUES ($1, $2, $3, $4)", def->qualname);
			break;
		case PLAN_DELETE_ALL:
			sql = psprintf("DELETE FROM %s", def->qualname);
			nargs = 0;
			break;
		case NUM_PLANS:
			elog(ERROR, "invalid snapshot plan");
	}
	plan = SPI_prepare(sql, nargs, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql, SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	def->plans[which] = plan;
	return plan;
}

/* ----------------------------------------------------------------
 * Calling reducers
 * ----------------------------------------------------------------
 */

static void
apply_error_callback(void *arg)
{
	ApplyErrorArg *a = (ApplyErrorArg *) arg;

	if (a->stream != NULL)
		errcontext("applying event version " INT64_FORMAT " of stream \"%s\" to snapshot \"%s\"",
				   a->version, a->stream, a->snapshot);
}

/*
 * state := reducer(state, event), as the snapshot's owner.  The caller
 * has entered the reducer GUC context and set snapshot_busy.
 */
static Datum
call_reducer(SnapshotDef *def, Datum state, Datum event)
{
	LOCAL_FCINFO(fcinfo, 2);
	Datum		result;
	Oid			save_userid;
	int			save_sec_context;
	int			gucs;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(def->owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	gucs = NewGUCNestLevel();

	InitFunctionCallInfoData(*fcinfo, &def->flinfo, 2, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = state;
	fcinfo->args[0].isnull = false;
	fcinfo->args[1].value = event;
	fcinfo->args[1].isnull = false;
	result = FunctionCallInvoke(fcinfo);

	/*
	 * On error, the caller's PG_FINALLY restores the user and the
	 * (sub)transaction abort the settings.
	 */
	AtEOXact_GUC(false, gucs);
	SetUserIdAndSecContext(save_userid, save_sec_context);

	if (fcinfo->isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("reducer %s of snapshot \"%s\" returned null",
						def->reducer_name, def->relname),
				 errhint("A reducer returns the new state; to ignore an event, return the state unchanged.")));
	return result;
}

/* Build an esrc.event datum (CurrentMemoryContext) from its 8 columns. */
static Datum
make_event(Datum *values, bool *nulls)
{
	return HeapTupleGetDatum(heap_form_tuple(cache.event_desc, values, nulls));
}

static void
fold_init(Fold *f, SnapshotDef *def)
{
	memset(f, 0, sizeof(*f));
	f->def = def;
	f->evcxt = AllocSetContextCreate(CurrentMemoryContext, "esrc fold event",
									 ALLOCSET_DEFAULT_SIZES);
	f->streamcxt = AllocSetContextCreate(CurrentMemoryContext, "esrc fold stream",
										 ALLOCSET_SMALL_SIZES);
	f->statecxt[0] = AllocSetContextCreate(CurrentMemoryContext, "esrc fold state",
										   ALLOCSET_DEFAULT_SIZES);
	f->statecxt[1] = AllocSetContextCreate(CurrentMemoryContext, "esrc fold state",
										   ALLOCSET_DEFAULT_SIZES);
	f->errarg.snapshot = def->relname;
}

/* Start the fold of a new stream from the initial state. */
static void
fold_start(Fold *f, const char *stream)
{
	Size		size = VARSIZE(f->def->initial_state);

	MemoryContextReset(f->streamcxt);
	MemoryContextReset(f->statecxt[0]);
	MemoryContextReset(f->statecxt[1]);
	f->cur = 0;
	f->state = PointerGetDatum(memcpy(MemoryContextAlloc(f->statecxt[0], size),
									  f->def->initial_state, size));
	f->stream = MemoryContextStrdup(f->streamcxt, stream);
	f->next_version = 0;
	f->errarg.stream = f->stream;
}

/*
 * Apply one event, given as the columns of an esrc.event (values/nulls), to the
 * fold.  Memory: the new state is copied into the other state context and
 * everything else is freed, so a fold of any length runs in bounded memory.
 */
static void
fold_apply(Fold *f, Datum *values, bool *nulls)
{
	int64		version = DatumGetInt64(values[2]);
	MemoryContext oldcxt;
	Datum		newstate;
	int			next = 1 - f->cur;
	ErrorContextCallback errcb;

	if (version != f->next_version)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("stream \"%s\" has no event with version " INT64_FORMAT,
						f->stream, f->next_version),
				 errdetail("The next stored event has version " INT64_FORMAT ".", version)));

	f->errarg.version = version;
	errcb.callback = apply_error_callback;
	errcb.arg = &f->errarg;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	oldcxt = MemoryContextSwitchTo(f->evcxt);
	newstate = call_reducer(f->def, f->state, make_event(values, nulls));
	MemoryContextSwitchTo(f->statecxt[next]);
	newstate = PointerGetDatum(PG_DETOAST_DATUM_COPY(newstate));
	MemoryContextSwitchTo(oldcxt);

	error_context_stack = errcb.previous;

	MemoryContextReset(f->statecxt[f->cur]);
	MemoryContextReset(f->evcxt);
	f->cur = next;
	f->state = newstate;
	f->next_version = version + 1;
	f->applied++;
}

static void
fold_end(Fold *f)
{
	MemoryContextDelete(f->evcxt);
	MemoryContextDelete(f->streamcxt);
	MemoryContextDelete(f->statecxt[0]);
	MemoryContextDelete(f->statecxt[1]);
}

/* ----------------------------------------------------------------
 * The trigger on esrc.events
 * ----------------------------------------------------------------
 */

static int
attno(TupleDesc desc, const char *name)
{
	int			n = SPI_fnumber(desc, name);

	if (n <= 0)
		elog(ERROR, "esrc.events has no column \"%s\"", name);
	return n;
}

static void
check_in_step(SnapshotDef *def, const char *stream_str, bool exists,
			  int64 prev, int64 version)
{
	if (prev + 1 != version)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("snapshot \"%s\" is out of step with stream \"%s\"",
						def->relname, stream_str),
				 exists ?
				 errdetail("The snapshot row has version " INT64_FORMAT " and the new event has version " INT64_FORMAT ".",
						   prev, version) :
				 errdetail("The snapshot has no row for the stream and the new event has version " INT64_FORMAT ".",
						   version),
				 errhint("Recompute the snapshot with esrc.rebuild_snapshot().")));
}

/*
 * Can the trigger write def's table directly?  It can when the table is
 * exactly what create_snapshot makes -- the four columns (no defaults or
 * generated columns to compute), a btree primary key on stream -- its owner
 * holds SELECT, INSERT and UPDATE on it, and no row-level security applies
 * to the owner.  Otherwise the trigger uses SPI, which handles all of
 * that (and raises the errors).  rel is locked.
 */
static void
prepare_direct(SnapshotDef *def, Relation rel)
{
	static const char *const names[4] = {"stream", "version", "state", "updated_at"};
	TupleDesc	desc = RelationGetDescr(rel);
	int			live = 0;
	int			i;
	Oid			pk;
	Relation	idx;
	Oid			eqop;
	bool		ok;

	def->direct = 0;
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped)
			continue;
		if (att->attgenerated)
			return;
		live++;
	}
	for (i = 0; i < 4; i++)
		if ((def->att[i] = SPI_fnumber(desc, names[i])) <= 0)
			return;
	if (live != 4)
		return;
	if (check_enable_rls(def->relid, def->owner, true) == RLS_ENABLED)
		return;
	if (pg_class_aclcheck(def->relid, def->owner, ACL_SELECT) != ACLCHECK_OK ||
		pg_class_aclcheck(def->relid, def->owner, ACL_INSERT) != ACLCHECK_OK ||
		pg_class_aclcheck(def->relid, def->owner, ACL_UPDATE) != ACLCHECK_OK)
		return;
	pk = esrc_primary_key_index(rel);
	if (!OidIsValid(pk))
		return;
	idx = index_open(pk, RowExclusiveLock);
	ok = (idx->rd_rel->relam == BTREE_AM_OID &&
		  idx->rd_index->indnatts == 1 &&
		  idx->rd_index->indkey.values[0] == def->att[0] &&
		  idx->rd_opcintype[0] == TEXTOID);
	if (ok)
	{
		eqop = get_opfamily_member(idx->rd_opfamily[0], TEXTOID, TEXTOID,
								   BTEqualStrategyNumber);
		ok = OidIsValid(eqop);
		if (ok)
		{
			def->eqproc = get_opcode(eqop);
			def->eqcollation = idx->rd_indcollation[0];
			def->pkindex = pk;
		}
	}
	index_close(idx, NoLock);
	if (ok)
		def->direct = 1;
}

/* prepare_direct(), and say which way it chose (for tests: DEBUG1). */
static void
choose_path(SnapshotDef *def)
{
	Relation	rel = table_open(def->relid, NoLock);	/* locked by the caller */

	prepare_direct(def, rel);
	table_close(rel, NoLock);
	elog(DEBUG1, "esrc: the trigger writes snapshot \"%s\" %s", def->relname,
		 def->direct == 1 ? "directly" : "through SQL");
}

/*
 * apply_event() without SPI or the executor's planning: look the row up in
 * the primary key with snap, and write it with the executor's simple
 * insert/update (ExecSimpleRelationInsert/Update, as logical replication
 * applies rows): constraints, indexes and the table's own row triggers are
 * handled as by an INSERT or UPDATE.  prepare_direct() checked that this
 * gives the same result as the SQL of apply_event_spi().  Runs as the
 * owner, security-restricted (apply_to_all()).
 */
static void
apply_event_direct(SnapshotDef *def, Datum stream, const char *stream_str,
				   int64 version, Datum event, Snapshot snap, TimestampTz now)
{
	Relation	rel = table_open(def->relid, NoLock);	/* locked by the trigger */
	Relation	idx = index_open(def->pkindex, RowExclusiveLock);
	TupleTableSlot *oldslot = table_slot_create(rel, NULL);
	TupleTableSlot *newslot;
	ScanKeyData key;
	IndexScanDesc scan;
	bool		exists;
	bool		isnull;
	int64		prev = -1;
	Datum		state;
	Datum		newstate;
	EState	   *estate;
	ResultRelInfo *rri;
	int			i;

	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   def->eqcollation, def->eqproc, stream);
	scan = esrc_index_beginscan(rel, idx, snap, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	exists = index_getnext_slot(scan, ForwardScanDirection, oldslot);
	index_endscan(scan);
	if (exists)
	{
		prev = DatumGetInt64(slot_getattr(oldslot, def->att[1], &isnull));
		state = PointerGetDatum(PG_DETOAST_DATUM_COPY(slot_getattr(oldslot, def->att[2], &isnull)));
	}
	else
		state = JsonbPGetDatum(def->initial_state);

	check_in_step(def, stream_str, exists, prev, version);
	newstate = call_reducer(def, state, event);

	/* an executor state just for the write, as the replication apply has */
	estate = esrc_make_write_estate(rel, &rri);
	estate->es_output_cid = GetCurrentCommandId(true);
	estate->es_snapshot = snap;
	AfterTriggerBeginQuery();

	newslot = ExecInitExtraTupleSlot(estate, RelationGetDescr(rel), &TTSOpsVirtual);
	ExecClearTuple(newslot);
	for (i = 0; i < newslot->tts_tupleDescriptor->natts; i++)
		newslot->tts_isnull[i] = true;
	newslot->tts_values[def->att[0] - 1] = stream;
	newslot->tts_values[def->att[1] - 1] = Int64GetDatum(version);
	newslot->tts_values[def->att[2] - 1] = newstate;
	newslot->tts_values[def->att[3] - 1] = TimestampTzGetDatum(now);
	for (i = 0; i < 4; i++)
		newslot->tts_isnull[def->att[i] - 1] = false;
	ExecStoreVirtualTuple(newslot);

	if (exists)
	{
		EPQState	epq;

		esrc_epq_init(&epq, estate);
		ExecSimpleRelationUpdate(rri, estate, &epq, oldslot, newslot);
		EvalPlanQualEnd(&epq);
	}
	else
		ExecSimpleRelationInsert(rri, estate, newslot);

	AfterTriggerEndQuery(estate);
	esrc_free_write_estate(estate, rri);
	ExecDropSingleTupleTableSlot(oldslot);
	index_close(idx, NoLock);
	table_close(rel, NoLock);
}

/*
 * Apply one new event to one snapshot: read the stream's row (or the
 * initial state), check the version invariant, call the reducer, write the
 * row.  This is the SQL version, for any table; apply_event_direct() does
 * the same for tables made by create_snapshot.  Runs as the owner,
 * security-restricted (apply_to_all()), so the SELECT sees the rows the
 * owner's row-level security lets it see, not the appender's; snap was
 * taken after the table lock.  Needs an SPI connection.
 */
static void
apply_event_spi(SnapshotDef *def, Datum stream, const char *stream_str,
				int64 version, Datum event, Snapshot snap, TimestampTz now)
{
	Datum		values[4];
	Datum		state;
	int64		prev = -1;
	bool		exists;
	bool		isnull;
	int			rc;

	values[0] = stream;
	rc = SPI_execute_snapshot(def_plan(def, PLAN_SELECT), values, NULL, snap,
							  InvalidSnapshot, true, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "snapshot row lookup failed: %s", SPI_result_code_string(rc));
	exists = (SPI_processed > 0);
	if (exists)
	{
		prev = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		state = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	}
	else
		state = JsonbPGetDatum(def->initial_state);

	check_in_step(def, stream_str, exists, prev, version);

	values[1] = Int64GetDatum(version);
	values[2] = call_reducer(def, state, event);
	values[3] = TimestampTzGetDatum(now);

	rc = SPI_execute_snapshot(def_plan(def, exists ? PLAN_UPDATE : PLAN_INSERT),
							  values, NULL, snap, InvalidSnapshot, false, true, 0);
	if (rc != (exists ? SPI_OK_UPDATE : SPI_OK_INSERT) || SPI_processed != 1)
		elog(ERROR, "snapshot row write failed: %s", SPI_result_code_string(rc));
}

/*
 * Apply the event to each snapshot of its category, with snapshot_busy set
 * (reset, and the user restored, on error too).
 *
 * Each snapshot is applied as the owner of its table, as a
 * security-restricted operation, in a GUC nest level of its own with
 * search_path pinned: not only the reducer but everything the write runs
 * -- the table's row triggers (AFTER ones included: they fire before the
 * switch back), CHECK constraints, defaults, index expressions, row-level
 * security -- runs with the owner's rights, as REFRESH MATERIALIZED VIEW
 * runs a view's code.  The appender, possibly a superuser, never runs the
 * table owner's code, and the owner cannot queue code for the appender's
 * commit (core refuses deferred triggers queued in a security-restricted
 * operation).  One switch per snapshot and event; an error unwinds the
 * GUC level with the (sub)transaction.
 */
static void
apply_to_all(CategoryEntry *entry, ApplyErrorArg *errarg, Datum stream,
			 const char *stream_str, int64 version, Datum event,
			 Snapshot snap, TimestampTz now)
{
	Oid			save_userid;
	int			save_sec_context;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	snapshot_busy = true;
	PG_TRY();
	{
		int			i;

		for (i = 0; i < entry->count; i++)
		{
			SnapshotDef *def = &cache.defs[entry->first + i];

			int			gucs;

			errarg->snapshot = def->relname;
			raise_if_broken(def);
			SetUserIdAndSecContext(def->owner, save_sec_context |
								   SECURITY_LOCAL_USERID_CHANGE |
								   SECURITY_RESTRICTED_OPERATION);
			gucs = enter_reducer_gucs();
			if (def->direct == 1)
				apply_event_direct(def, stream, stream_str, version, event, snap, now);
			else
				apply_event_spi(def, stream, stream_str, version, event, snap, now);
			leave_reducer_gucs(gucs);
			SetUserIdAndSecContext(save_userid, save_sec_context);
		}
	}
	PG_FINALLY();
	{
		snapshot_busy = false;
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	PG_END_TRY();
}

/*
 * esrc.apply_snapshots(): AFTER INSERT FOR EACH ROW on esrc.events.
 */
Datum
esrc_apply_snapshots(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;
	TupleDesc	desc;
	bool		isnull;
	char	   *category;
	CategoryEntry *entry = NULL;
	Datum		stream;
	char	   *stream_str;
	int64		version;
	Datum		evvalues[EVENT_NATTS];
	bool		evnulls[EVENT_NATTS];
	Datum		event;
	Snapshot	snap;
	TimestampTz now;
	int			attempt;
	int			i;
	int			gucs;
	ErrorContextCallback errcb;
	ApplyErrorArg errarg;
	bool		use_spi = false;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("esrc.apply_snapshots() must be called as an AFTER INSERT row trigger")));
	check_not_busy("esrc.append");

	tuple = trigdata->tg_trigtuple;
	desc = RelationGetDescr(trigdata->tg_relation);
	stream = heap_getattr(tuple, attno(desc, "stream"), desc, &isnull);
	stream_str = TextDatumGetCString(stream);

	/*
	 * Only events appended by esrc.append/append_batch, which hold the
	 * stream lock, are applied.  Rows loaded into the log otherwise --
	 * pg_restore (in any order and with any -j: the snapshot tables are
	 * restored as dumped), COPY, logical replication, a superuser's INSERT
	 * -- are not: the snapshot tables are loaded along with them, or
	 * rebuilt afterwards.
	 */
	if (!holds_stream_lock(stream_str))
		return PointerGetDatum(NULL);

	category = TextDatumGetCString(heap_getattr(tuple, attno(desc, "category"), desc, &isnull));

	/*
	 * The category lock first: if we had to wait for a create or drop, the
	 * invalidations it sent at commit are processed before we look.
	 */
	if (lock_category(category, ShareLock) != LOCKACQUIRE_ALREADY_HELD)
		AcceptInvalidationMessages();

	/* lock the tables; start over if the definitions changed meanwhile */
	for (attempt = 0;; attempt++)
	{
		ensure_cache();
		if (cache.by_category == NULL)
			return PointerGetDatum(NULL);
		entry = hash_search(cache.by_category, category, HASH_FIND, NULL);
		if (entry == NULL)
			return PointerGetDatum(NULL);
		for (i = 0; i < entry->count; i++)
			LockRelationOid(cache.defs[entry->first + i].relid, RowExclusiveLock);
		if (cache.valid)
			break;
		if (attempt >= 100)
			elog(ERROR, "snapshot definitions of category \"%s\" keep changing", category);
	}

	version = DatumGetInt64(heap_getattr(tuple, attno(desc, "version"), desc, &isnull));
	for (i = 0; i < EVENT_NATTS; i++)
		evvalues[i] = heap_getattr(tuple,
								   attno(desc, NameStr(TupleDescAttr(cache.event_desc, i)->attname)),
								   desc, &evnulls[i]);
	event = make_event(evvalues, evnulls);
	now = GetCurrentTimestamp();

	for (i = 0; i < entry->count; i++)
	{
		SnapshotDef *def = &cache.defs[entry->first + i];

		if (def->direct < 0 && def->broken_msg == NULL)
			choose_path(def);
		if (def->direct != 1)
			use_spi = true;
	}
	if (use_spi && SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/*
	 * Make earlier writes of this command visible (several events of one
	 * stream inserted by one statement), then take the snapshot: after the
	 * table locks, so that it sees what a rebuild or create we waited for
	 * committed, at any isolation level.
	 */
	CommandCounterIncrement();
	snap = RegisterSnapshot(GetLatestSnapshot());
	gucs = enter_reducer_gucs();

	errarg.stream = stream_str;
	errarg.version = version;
	errcb.callback = apply_error_callback;
	errcb.arg = &errarg;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	apply_to_all(entry, &errarg, stream, stream_str, version, event, snap, now);

	error_context_stack = errcb.previous;
	leave_reducer_gucs(gucs);
	UnregisterSnapshot(snap);
	if (use_spi && SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	return PointerGetDatum(NULL);
}

/* ----------------------------------------------------------------
 * Replaying the event log into a snapshot table
 * ----------------------------------------------------------------
 */

static void
write_row(SnapshotDef *def, Fold *f, TimestampTz now)
{
	Datum		values[4];
	int			rc;
	Oid			save_userid;
	int			save_sec_context;

	values[0] = CStringGetTextDatum(f->stream);
	values[1] = Int64GetDatum(f->next_version - 1);
	values[2] = f->state;
	values[3] = TimestampTzGetDatum(now);
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(def->owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	rc = SPI_execute_plan(def_plan(def, PLAN_INSERT), values, NULL, false, 0);
	SetUserIdAndSecContext(save_userid, save_sec_context);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "snapshot row insert failed: %s", SPI_result_code_string(rc));
}

/*
 * The body of replay_snapshot(), inside its PG_TRY: empty the table, then
 * fold the category's events stream by stream, writing one row per stream.
 *
 * The events are read, as the caller, by an index scan of the category in
 * esrc.events (read.c), so the cost follows the size of the category, not
 * of the log, and sorted by stream (in the "C" order, the cheapest) and
 * version in a tuplesort, which spills to disk past work_mem: bounded
 * memory for a category of any size.
 */
static void
replay_events(SnapshotDef *def, Snapshot snap, Fold *f,
			  Oid save_userid, int save_sec_context)
{
	TimestampTz now = GetCurrentTimestamp();
	AttrNumber	sortcols[2] = {2, 3};	/* stream, version */
	Oid			sortops[2] = {TextLessOperator, Int8LessOperator};
	Oid			collations[2] = {C_COLLATION_OID, InvalidOid};
	bool		nullsfirst[2] = {false, false};
	Tuplesortstate *sort;
	TupleTableSlot *inslot;
	TupleTableSlot *outslot;
	TupleTableSlot *slot;
	EsrcLogScan *scan;
	bool		have_stream = false;
	int			rc;

	/* empty the table, as its owner */
	SetUserIdAndSecContext(def->owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	rc = SPI_execute_snapshot(def_plan(def, PLAN_DELETE_ALL), NULL, NULL, snap,
							  InvalidSnapshot, false, true, 0);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "snapshot delete failed: %s", SPI_result_code_string(rc));
	SetUserIdAndSecContext(save_userid, save_sec_context);

	/* read the category's events as the caller, with our snapshot */
	sort = tuplesort_begin_heap(cache.event_desc, 2, sortcols, sortops, collations,
								nullsfirst, work_mem, NULL, TUPLESORT_NONE);
	inslot = MakeSingleTupleTableSlot(cache.event_desc, &TTSOpsVirtual);
	outslot = MakeSingleTupleTableSlot(cache.event_desc, &TTSOpsMinimalTuple);
	scan = esrc_log_begin(ESRC_LOG_BY_CATEGORY, CStringGetTextDatum(def->category),
						  PG_INT64_MIN, PG_INT64_MAX, ForwardScanDirection, snap);
	while ((slot = esrc_log_next(scan)) != NULL)
	{
		ExecClearTuple(inslot);
		memcpy(inslot->tts_values, slot->tts_values, sizeof(Datum) * EVENT_NATTS);
		memcpy(inslot->tts_isnull, slot->tts_isnull, sizeof(bool) * EVENT_NATTS);
		ExecStoreVirtualTuple(inslot);
		tuplesort_puttupleslot(sort, inslot);
	}
	esrc_log_end(scan);
	ExecDropSingleTupleTableSlot(inslot);
	tuplesort_performsort(sort);

	while (tuplesort_gettupleslot(sort, true, false, outslot, NULL))
	{
		char	   *stream;

		CHECK_FOR_INTERRUPTS();
		slot_getallattrs(outslot);
		stream = TextDatumGetCString(outslot->tts_values[1]);
		if (!have_stream || strcmp(stream, f->stream) != 0)
		{
			if (have_stream)
				write_row(def, f, now);
			fold_start(f, stream);
			have_stream = true;
		}
		pfree(stream);
		fold_apply(f, outslot->tts_values, outslot->tts_isnull);
	}
	if (have_stream)
		write_row(def, f, now);
	ExecDropSingleTupleTableSlot(outslot);
	tuplesort_end(sort);
}

/*
 * Recompute the table of def from the stored events of its category.  The
 * caller holds the category lock (create) or ExclusiveLock on the table
 * (rebuild), so no append of the category can write the table until we
 * commit, and has an SPI connection.  We read with a snapshot taken now,
 * after those locks, whatever the isolation level: it sees every append
 * that wrote the table before us.  Returns the number of events applied.
 */
static int64
replay_snapshot(SnapshotDef *def)
{
	Snapshot	snap;
	Fold		f;
	int64		applied;
	int			gucs;
	Oid			save_userid;
	int			save_sec_context;

	raise_if_broken(def);
	snap = RegisterSnapshot(GetLatestSnapshot());

	gucs = enter_reducer_gucs();
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	fold_init(&f, def);
	snapshot_busy = true;
	PG_TRY();
	{
		replay_events(def, snap, &f, save_userid, save_sec_context);
	}
	PG_FINALLY();
	{
		snapshot_busy = false;
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	PG_END_TRY();
	leave_reducer_gucs(gucs);
	UnregisterSnapshot(snap);
	applied = f.applied;
	fold_end(&f);
	return applied;
}

/* ----------------------------------------------------------------
 * Creating, rebuilding and dropping snapshots
 * ----------------------------------------------------------------
 */

static void
run_sql(const char *sql, int expected_rc)
{
	int			rc = SPI_execute(sql, false, 0);

	if (rc != expected_rc)
		elog(ERROR, "\"%s\" failed: %s", sql, SPI_result_code_string(rc));
}

/*
 * esrc.create_snapshot(snapshot, category, reducer, initial_state)
 *
 * The table is created by the caller (who owns it, and whose reducer and
 * table rights are checked); only the catalog row is written as the owner
 * of esrc.snapshots.  Holds the category lock in ExclusiveLock mode until
 * the transaction ends: appends to the category wait, then see the new
 * snapshot and its filled rows.
 */
Datum
esrc_create_snapshot(PG_FUNCTION_ARGS)
{
	RangeVar   *rv;
	char	   *category;
	Oid			reducer;
	Jsonb	   *initial_state;
	Oid			nsp;
	char	   *qualname;
	Oid			relid;
	int64		applied;
	Oid			argtypes[4] = {REGCLASSOID, TEXTOID, TEXTOID, JSONBOID};
	Datum		values[4];

	check_not_busy("esrc.create_snapshot()");
	rv = snapshot_rangevar(fcinfo, 0);
	category = check_category(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1));
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("reducer must not be null"),
				 errhint("Pass a function such as 'esrc.merge(jsonb, esrc.event)'.")));
	reducer = PG_GETARG_OID(2);
	if (PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("initial_state must not be null"),
				 errhint("Use '{}' for an empty state.")));
	initial_state = PG_GETARG_JSONB_P(3);

	check_reducer(reducer);
	if (esrc_proc_aclcheck(reducer, GetUserId(), ACL_EXECUTE) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_FUNCTION, get_func_name(reducer));
	if (pg_class_aclcheck(esrc_relation_oid("events"), GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for table esrc.events"),
				 errdetail("A new snapshot is filled from the stored events of its category."),
				 errhint("Grant esrc_reader to the role.")));

	nsp = RangeVarGetCreationNamespace(rv);
	if (isAnyTempNamespace(nsp))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("snapshot tables cannot be temporary"),
				 errdetail("Appends in every session write the snapshot table.")));
	qualname = quote_qualified_identifier(get_namespace_name(nsp), rv->relname);

	(void) lock_category(category, ExclusiveLock);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	run_sql(psprintf("CREATE TABLE %s (stream pg_catalog.text PRIMARY KEY,"
					 " version pg_catalog.int8 NOT NULL,"
					 " state pg_catalog.jsonb NOT NULL,"
					 " updated_at pg_catalog.timestamptz NOT NULL)", qualname),
			SPI_OK_UTILITY);
	CommandCounterIncrement();
	relid = get_relname_relid(rv->relname, nsp);
	if (!OidIsValid(relid))
		elog(ERROR, "snapshot table %s was not created", qualname);
	run_sql(psprintf("COMMENT ON TABLE %s IS %s", qualname,
					 quote_literal_cstr(psprintf("esrc snapshot of category \"%s\", reduced by %s; written by esrc only.",
												 category, format_procedure_qualified(reducer)))),
			SPI_OK_UTILITY);
	run_sql(psprintf("GRANT SELECT ON TABLE %s TO esrc_reader", qualname), SPI_OK_UTILITY);

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(category);
	values[2] = CStringGetTextDatum(format_procedure_qualified(reducer));
	values[3] = JsonbPGetDatum(initial_state);
	catalog_write("INSERT INTO esrc.snapshots (snapshot, category, reducer, initial_state)"
				  " VALUES ($1, $2, $3, $4)", 4, argtypes, values, SPI_OK_INSERT);
	CommandCounterIncrement();

	applied = replay_snapshot(get_def(relid));

	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	PG_RETURN_INT64(applied);
}

/*
 * esrc.rebuild_snapshot(snapshot): owner or superuser.  ExclusiveLock on
 * the table until the transaction ends: readers go on (and see the old
 * rows until we commit); appends to the category wait in the trigger and
 * then apply their event on top of the rebuilt rows.
 */
Datum
esrc_rebuild_snapshot(PG_FUNCTION_ARGS)
{
	RangeVar   *rv;
	Oid			relid;
	SnapshotDef *def;
	int64		applied;

	check_not_busy("esrc.rebuild_snapshot()");
	rv = snapshot_rangevar(fcinfo, 0);
	relid = RangeVarGetRelidExtended(rv, ExclusiveLock, 0, RangeVarCallbackOwnsRelation, NULL);
	def = get_def(relid);
	raise_if_broken(def);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* after a restore or pg_upgrade without triggers, they may be missing */
	record_dependencies(relid, def->reducer);
	applied = replay_snapshot(def);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	PG_RETURN_INT64(applied);
}

/*
 * esrc.drop_snapshot(snapshot): owner or superuser.  Takes the category
 * lock like create_snapshot, then AccessExclusiveLock on the table (in
 * that order, the order appends take them).
 */
Datum
esrc_drop_snapshot(PG_FUNCTION_ARGS)
{
	RangeVar   *rv;
	Oid			relid;
	SnapshotDef *def;
	char	   *qualname;
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];

	check_not_busy("esrc.drop_snapshot()");
	rv = snapshot_rangevar(fcinfo, 0);
	relid = RangeVarGetRelidExtended(rv, NoLock, 0, RangeVarCallbackOwnsRelation, NULL);
	def = get_def(relid);

	if (lock_category(def->category, ExclusiveLock) != LOCKACQUIRE_ALREADY_HELD)
		AcceptInvalidationMessages();
	if (RangeVarGetRelidExtended(rv, AccessExclusiveLock, 0,
								 RangeVarCallbackOwnsRelation, NULL) != relid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("snapshot \"%s\" was changed by another session", rv->relname),
				 errhint("Retry the command.")));
	def = get_def(relid);
	qualname = pstrdup(def->qualname);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	values[0] = ObjectIdGetDatum(relid);
	catalog_write("DELETE FROM esrc.snapshots WHERE snapshot::pg_catalog.oid OPERATOR(pg_catalog.=) $1",
				  1, argtypes, values, SPI_OK_DELETE);
	run_sql(psprintf("DROP TABLE %s", qualname), SPI_OK_UTILITY);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 * Reading snapshots
 * ----------------------------------------------------------------
 */

/*
 * RangeVarGetRelidExtended() callback of load and snapshot_at: the caller
 * must be allowed to read the table (SELECT on it or on one of its
 * columns) before it is locked, as LOCK TABLE checks before it locks, so
 * that a role cannot queue behind DDL on a table it cannot read, nor hold
 * up the DDL that queues behind it.
 */
static void
snapshot_read_callback(const RangeVar *relation, Oid relId, Oid oldRelId,
					   void *arg)
{
	Oid			userid = GetUserId();
	char		relkind;

	if (!OidIsValid(relId))
		return;
	relkind = get_rel_relkind(relId);
	if (relkind == '\0')
		return;					/* dropped meanwhile; the lookup retries */
	if (pg_class_aclcheck(relId, userid, ACL_SELECT) != ACLCHECK_OK &&
		pg_attribute_aclcheck_all(relId, userid, ACL_SELECT, ACLMASK_ANY) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, get_relkind_objtype(relkind), relation->relname);
}

/*
 * esrc.load(snapshot, stream) -> (state, version).  Reads the table as the
 * caller, with the caller's snapshot rules (a new snapshot at READ
 * COMMITTED).
 */
Datum
esrc_load(PG_FUNCTION_ARGS)
{
	RangeVar   *rv;
	char	   *stream;
	TupleDesc	tupdesc;
	Oid			relid;
	SnapshotDef *def;
	MemoryContext outer = CurrentMemoryContext;
	Datum		result[2];
	bool		nulls[2] = {false, false};
	Datum		values[1];
	SPIPlanPtr	plan;
	Jsonb	   *initial_state;
	int			gucs;
	int			rc;

	check_not_busy("esrc.load()");
	rv = snapshot_rangevar(fcinfo, 0);
	stream = esrc_check_name(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1),
							 "stream name", ESRC_MAX_STREAM_NAME);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	relid = RangeVarGetRelidExtended(rv, AccessShareLock, 0,
									 snapshot_read_callback, NULL);
	def = get_def(relid);
	check_stream_category(def, stream);
	initial_state = DatumGetJsonbPCopy(JsonbPGetDatum(def->initial_state));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = def_plan(def, PLAN_SELECT);
	gucs = enter_reducer_gucs();
	values[0] = CStringGetTextDatum(stream);
	snapshot_busy = true;
	PG_TRY();
	{
		rc = SPI_execute_plan(plan, values, NULL, false, 1);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "snapshot row lookup failed: %s", SPI_result_code_string(rc));
	}
	PG_FINALLY();
	{
		snapshot_busy = false;
	}
	PG_END_TRY();
	if (SPI_processed > 0)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		bool		isnull;
		MemoryContext spicxt = MemoryContextSwitchTo(outer);

		result[1] = Int64GetDatum(DatumGetInt64(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull)));
		result[0] = PointerGetDatum(PG_DETOAST_DATUM_COPY(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull)));
		MemoryContextSwitchTo(spicxt);
	}
	else
	{
		result[0] = JsonbPGetDatum(initial_state);
		result[1] = Int64GetDatum(-1);
	}
	leave_reducer_gucs(gucs);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), result, nulls)));
}

/*
 * esrc.snapshot_at(snapshot, stream, version): replay the stream's events
 * up to version through the reducer.  Reads the events as the caller, by
 * an index scan of (stream, version) with the caller's snapshot rules
 * (read.c); runs the reducer as the snapshot's owner.
 */
Datum
esrc_snapshot_at(PG_FUNCTION_ARGS)
{
	RangeVar   *rv;
	char	   *stream;
	int64		version;
	Oid			relid;
	SnapshotDef *def;
	MemoryContext outer = CurrentMemoryContext;
	Snapshot	snap;
	EsrcLogScan *scan;
	Datum		result;
	Fold		f;
	int64		last;
	int			gucs;
	Oid			save_userid;
	int			save_sec_context;

	check_not_busy("esrc.snapshot_at()");
	rv = snapshot_rangevar(fcinfo, 0);
	stream = esrc_check_name(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1),
							 "stream name", ESRC_MAX_STREAM_NAME);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("version must not be null")));
	version = PG_GETARG_INT64(2);
	if (version < -1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("version must be -1 or greater"),
				 errdetail("The value given was " INT64_FORMAT "; -1 is the state before the first event.",
						   version)));

	relid = RangeVarGetRelidExtended(rv, AccessShareLock, 0,
									 snapshot_read_callback, NULL);
	def = get_def(relid);
	raise_if_broken(def);
	check_stream_category(def, stream);

	snap = esrc_caller_snapshot();
	scan = esrc_log_begin(ESRC_LOG_BY_STREAM, CStringGetTextDatum(stream),
						  0, version, ForwardScanDirection, snap);

	gucs = enter_reducer_gucs();
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	fold_init(&f, def);
	fold_start(&f, stream);
	snapshot_busy = true;
	PG_TRY();
	{
		TupleTableSlot *slot;

		while ((slot = esrc_log_next(scan)) != NULL)
			fold_apply(&f, slot->tts_values, slot->tts_isnull);
	}
	PG_FINALLY();
	{
		snapshot_busy = false;
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	PG_END_TRY();
	leave_reducer_gucs(gucs);
	esrc_log_end(scan);
	UnregisterSnapshot(snap);

	last = f.next_version - 1;
	if (last != version)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("stream \"%s\" has no version " INT64_FORMAT, stream, version),
				 last < 0 ? errdetail("The stream has no events.") :
				 errdetail("The stream ends at version " INT64_FORMAT ".", last)));

	{
		MemoryContext oldcxt = MemoryContextSwitchTo(outer);

		result = PointerGetDatum(PG_DETOAST_DATUM_COPY(f.state));
		MemoryContextSwitchTo(oldcxt);
	}
	fold_end(&f);
	PG_RETURN_DATUM(result);
}

/* ----------------------------------------------------------------
 * The catalog's own triggers
 * ----------------------------------------------------------------
 */

/* Is relid a table that can hold a snapshot?  An error if not. */
static void
check_snapshot_table(Oid relid)
{
	static const struct
	{
		const char *name;
		Oid			type;
	}			columns[] = {
		{"stream", TEXTOID},
		{"version", INT8OID},
		{"state", JSONBOID},
		{"updated_at", TIMESTAMPTZOID},
	};
	HeapTuple	tp = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Form_pg_class relform;
	char	   *relname;
	int			i;

	if (!HeapTupleIsValid(tp))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	relform = (Form_pg_class) GETSTRUCT(tp);
	relname = pstrdup(NameStr(relform->relname));
	if (relform->relkind != RELKIND_RELATION || relform->relpersistence == RELPERSISTENCE_TEMP)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" cannot be a snapshot table", relname),
				 errdetail("A snapshot table is a permanent, non-partitioned table.")));
	ReleaseSysCache(tp);

	for (i = 0; i < (int) lengthof(columns); i++)
	{
		AttrNumber	n = get_attnum(relid, columns[i].name);

		if (n == InvalidAttrNumber || get_atttype(relid, n) != columns[i].type)
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("\"%s\" cannot be a snapshot table", relname),
					 errdetail("A snapshot table has the columns stream text, version bigint, state jsonb and updated_at timestamptz.")));
	}
}

/*
 * BEFORE INSERT: check a new definition and store the reducer's canonical
 * qualified signature.  Rows come from create_snapshot or from a restore.
 */
static HeapTuple
validate_catalog_row(Relation rel, HeapTuple tuple)
{
	TupleDesc	desc = RelationGetDescr(rel);
	bool		isnull[Natts_snapshots_min];
	Datum		values[Natts_snapshots_min];
	char	   *given;
	char	   *canonical;
	Oid			reducer;
	int			i;

	for (i = 0; i < Natts_snapshots_min; i++)
	{
		values[i] = heap_getattr(tuple, i + 1, desc, &isnull[i]);
		if (isnull[i])
			return tuple;		/* the NOT NULL constraint reports it */
	}
	check_snapshot_table(DatumGetObjectId(values[Anum_snapshots_snapshot - 1]));
	(void) check_category(DatumGetTextPP(values[Anum_snapshots_category - 1]));
	given = TextDatumGetCString(values[Anum_snapshots_reducer - 1]);
	reducer = DatumGetObjectId(DirectFunctionCall1(regprocedurein, CStringGetDatum(given)));
	check_reducer(reducer);

	canonical = format_procedure_qualified(reducer);
	if (strcmp(canonical, given) != 0)
	{
		int			col = Anum_snapshots_reducer;
		Datum		v = CStringGetTextDatum(canonical);
		bool		n = false;

		tuple = heap_modify_tuple_by_cols(tuple, desc, 1, &col, &v, &n);
	}
	return tuple;
}

/*
 * esrc.snapshots_catalog(): the triggers of esrc.snapshots.
 */
Datum
esrc_snapshots_catalog(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;
	bool		isnull;
	Oid			relid;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("esrc.snapshots_catalog() must be called as a trigger")));
	if (TRIGGER_FIRED_BY_TRUNCATE(td->tg_event) || TRIGGER_FIRED_BY_UPDATE(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("snapshot definitions cannot be changed in place"),
				 errdetail("A changed definition would no longer match the rows of its snapshot table."),
				 errhint("Use esrc.drop_snapshot() and esrc.create_snapshot().")));
	if (!TRIGGER_FIRED_FOR_ROW(td->tg_event))
		elog(ERROR, "esrc.snapshots_catalog() fired for an unexpected event");

	if (TRIGGER_FIRED_BEFORE(td->tg_event))
		return PointerGetDatum(validate_catalog_row(td->tg_relation, td->tg_trigtuple));

	tuple = td->tg_trigtuple;
	relid = DatumGetObjectId(heap_getattr(tuple, Anum_snapshots_snapshot,
										  RelationGetDescr(td->tg_relation), &isnull));
	if (TRIGGER_FIRED_BY_INSERT(td->tg_event))
	{
		char	   *reducer = TextDatumGetCString(heap_getattr(tuple, Anum_snapshots_reducer,
															   RelationGetDescr(td->tg_relation),
															   &isnull));

		record_dependencies(relid, DatumGetObjectId(DirectFunctionCall1(regprocedurein,
																		CStringGetDatum(reducer))));
	}
	else
		forget_dependencies(relid);

	/* every session reloads its definitions at its next use */
	CacheInvalidateRelcacheByRelid(RelationGetRelid(td->tg_relation));
	return PointerGetDatum(NULL);
}

/*
 * esrc.snapshots_sql_drop(): sql_drop event trigger.  A dropped snapshot
 * table takes its definition with it.
 */
Datum
esrc_snapshots_sql_drop(PG_FUNCTION_ARGS)
{
	Oid			nsp;
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_EVENT_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("esrc.snapshots_sql_drop() must be called as an event trigger")));

	/* DROP EXTENSION esrc (or DROP SCHEMA esrc) removed the catalog */
	nsp = get_namespace_oid("esrc", true);
	if (!OidIsValid(nsp) || !OidIsValid(get_relname_relid("snapshots", nsp)))
		PG_RETURN_VOID();

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	values[0] = ObjectIdGetDatum(RelationRelationId);
	catalog_write("DELETE FROM esrc.snapshots s"
				  " USING pg_catalog.pg_event_trigger_dropped_objects() d"
				  " WHERE d.classid OPERATOR(pg_catalog.=) $1"
				  " AND d.objsubid OPERATOR(pg_catalog.=) 0"
				  " AND d.objid OPERATOR(pg_catalog.=) s.snapshot::pg_catalog.oid",
				  1, argtypes, values, SPI_OK_DELETE);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 * The built-in reducer
 * ----------------------------------------------------------------
 */

/*
 * esrc.merge(state, event) = state || event.data
 */
Datum
esrc_merge(PG_FUNCTION_ARGS)
{
	HeapTupleHeader event = PG_GETARG_HEAPTUPLEHEADER(1);
	bool		isnull;
	Datum		data = GetAttributeByName(event, "data", &isnull);

	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(DirectFunctionCall2(jsonb_concat, PG_GETARG_DATUM(0), data));
}
