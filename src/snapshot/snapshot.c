/*-------------------------------------------------------------------------
 *
 * snapshot.c
 *	  Snapshots maintained by triggers: the catalog esrc.snapshots and its
 *	  triggers, the per-backend cache of definitions, what the other
 *	  snapshot files share (locks, checks, reducer calls, the fold of a
 *	  stream, the busy flag) and the built-in reducer
 *	  esrc.merge.
 *
 * The snapshot code is five files sharing the private snapshotint.h:
 * snapshot.c (this one), snapapply.c (the trigger on esrc.events that
 * applies each new event to the snapshots of its category), snapbuild.c
 * (replay of the log into a table; create/drop_snapshot), snaprebuild.c
 * (rebuild_snapshot, online) and snapread.c (load, snapshot_at).  The
 * design below covers all five.
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
 *	   rebuild_snapshot replays into a new heap under ShareUpdateExclusiveLock
 *	   while appends go on, then takes AccessExclusiveLock for the last
 *	   events and the swap (snaprebuild.c), or, for a table it cannot
 *	   swap, ExclusiveLock for the whole rebuild, which waits for in-flight
 *	   appends and blocks new ones (not readers) until it commits;
 *	 - the trigger reads and writes snapshot rows with a snapshot taken
 *	   after those locks (GetLatestSnapshot, as RI triggers do), whatever
 *	   the isolation level, so an append that waited behind a rebuild or a
 *	   create applies its event on top of the rows they committed;
 *	 - esrc.erase_stream (erase.c) deletes the stream's rows under
 *	   ShareUpdateExclusiveLock on each table, so it and a rebuild wait for
 *	   each other.
 *
 * Erased streams (docs/lifecycle.md) have no row and no state: load and
 * snapshot_at raise 55000, the fold of create/rebuild skips them, and
 * the trigger refuses an event of one with 55000 rather than XX001.  They
 * are recognized by a record in esrc.erasures, probed only when there is
 * reason to (erase.c's esrc_stream_erased, esrc_is_redacted).
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
 * All of these are owner contexts (ownerctx.c).  The "reducer context" is
 * one with no user switch and ESRC_OWNER_PIN_PATH, entered around a whole
 * fold or trigger call: it pins search_path (once per event in the
 * trigger, and not at all inside an outer level of ours), so that the
 * contexts nested in it -- per snapshot in apply_to_all, per reducer call
 * in snap_call_reducer -- find it pinned and cost only a GUC nest level
 * and a user switch.  What one owner's code sets never reaches another
 * owner's code, nor the caller.  Leaving is done on success only; an
 * error unwinds the GUC levels with the (sub)transaction, and the PG_FINALLY
 * of the fold or trigger restores the user.
 * The owner must also be allowed to read every event of the log when a
 * reducer would get one (logaccess.c): snap_raise_if_broken, called before
 * every apply, fill, rebuild and snapshot_at, refuses with 42501 when it
 * may not; so must the reducer's own owner when the reducer is SECURITY
 * DEFINER, as it runs as that role.
 * All SQL built here quotes identifiers and qualifies operators.
 *
 * Caching.  Definitions are cached per backend, keyed by category, with
 * the reducer's FmgrInfo, the choice of write path and prepared SPI plans.  The cache is dropped on
 * relcache invalidation of esrc.snapshots (the catalog triggers send one for
 * every change) or of a snapshot table, and on any change of pg_proc,
 * pg_namespace, pg_authid or pg_auth_members (reducer replaced, renamed,
 * privileges), so every session sees a change at its next append.  The
 * reducers are found as the catalog's owner (lookup_reducer), whoever
 * builds the cache.  While a
 * reducer runs ("busy"), none of the functions here may be entered again:
 * that keeps the cache from being freed under a caller.
 *
 * Talks to: snapapply.c, snapbuild.c and snapread.c (through
 * snapshotint.h), append.c (stream and category lock tags), projection.c
 * (esrc_event_type_oid, esrc_lookup_function), esrc.c (catalog lookups),
 * src/sql/10_snapshot.sql (the SQL objects).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/event_trigger.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
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
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/typcache.h"
#include "utils/varlena.h"

#include "base/base.h"
#include "log/log.h"
#include "snapshotint.h"

PG_FUNCTION_INFO_V1(esrc_snapshots_catalog);
PG_FUNCTION_INFO_V1(esrc_snapshots_sql_drop);
PG_FUNCTION_INFO_V1(esrc_merge);

/*
 * Category locks (ESRC_CATEGORY_LOCK_SPACE) and the stream lock of append.c
 * (ESRC_STREAM_LOCK_SPACE) share esrc_name_locktag(): the trigger applies
 * an event only when its transaction holds that stream lock, i.e. when
 * esrc.append or append_batch inserted it.
 */

/* columns of esrc.snapshots, in the order of 10_snapshot.sql */
#define Anum_snapshots_snapshot		1
#define Anum_snapshots_category		2
#define Anum_snapshots_reducer		3
#define Anum_snapshots_initial_state 4
#define Natts_snapshots_min			4

/* The backend's cache of definitions. */
SnapshotCache snap_cache;

/* true while reducers run or snapshot tables are written */
bool		snapshot_busy = false;

/* ----------------------------------------------------------------
 * Small helpers
 * ----------------------------------------------------------------
 */

void
snap_check_not_busy(const char *what)
{
	if (snapshot_busy)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("%s cannot be used while a snapshot is being updated", what),
				 errdetail("Snapshot reducers, and triggers on snapshot tables, must not append events or call snapshot functions.")));
}

LockAcquireResult
snap_lock_category(const char *category, LOCKMODE mode)
{
	LOCKTAG		tag;

	esrc_name_locktag(&tag, category, ESRC_CATEGORY_LOCK_SPACE);
	return LockAcquire(&tag, mode, false, false);
}

/* A category as given to create_snapshot: a valid name without "-". */
char *
snap_check_category(text *value)
{
	char	   *category = esrc_check_name(value, "category", ESRC_MAX_STREAM_NAME);

	if (strchr(category, '-') != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("category must not contain \"-\""),
				 errdetail("The category of a stream is the part of its name before the first \"-\".")));
	return category;
}

RangeVar *
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

void
snap_check_reducer(Oid funcoid)
{
	const char *problem = reducer_problem(funcoid, esrc_event_type_oid());

	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("function %s cannot be a snapshot reducer", format_procedure(funcoid)),
				 errdetail("A reducer has the signature (state jsonb, event esrc.event) RETURNS jsonb; this function %s.",
						   problem)));
}

/*
 * Run one statement on esrc.snapshots as its owner (inside an SPI
 * connection), security-restricted; search_path is not pinned here (the
 * statements qualify everything).  The user is restored before an error
 * goes on up.  Callers have checked the caller's right to do it.
 */
void
snap_catalog_write(const char *sql, int nargs, Oid *argtypes, Datum *values,
				   int expected_rc)
{
	esrc_run_sql_as(esrc_relation_owner(esrc_relation_oid("snapshots")), 0,
					sql, nargs, argtypes, values, NULL, expected_rc);
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

void
snap_record_dependencies(Oid relid, Oid reducer)
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

/* ----------------------------------------------------------------
 * The cache of definitions
 * ----------------------------------------------------------------
 */

static void
snapshot_relcache_callback(Datum arg, Oid relid)
{
	int			i;

	if (!snap_cache.valid)
		return;
	if (!OidIsValid(relid) || relid == snap_cache.catalog_relid)
	{
		snap_cache.valid = false;
		return;
	}
	for (i = 0; i < snap_cache.ndefs; i++)
		if (snap_cache.defs[i].relid == relid)
		{
			snap_cache.valid = false;
			return;
		}
}

static void
snapshot_syscache_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	snap_cache.valid = false;
}

static void
free_cache(void)
{
	int			i,
				j;

	for (i = 0; i < snap_cache.ndefs; i++)
		for (j = 0; j < NUM_PLANS; j++)
			if (snap_cache.defs[i].plans[j] != NULL)
				SPI_freeplan(snap_cache.defs[i].plans[j]);
	if (snap_cache.cxt != NULL)
		MemoryContextDelete(snap_cache.cxt);
	snap_cache.cxt = NULL;
	snap_cache.ndefs = 0;
	snap_cache.defs = NULL;
	snap_cache.by_category = NULL;
	snap_cache.event_desc = NULL;
}

static void
set_broken(SnapshotDef *def, int code, char *msg, char *detail)
{
	def->broken_code = code;
	def->broken_msg = msg;
	def->broken_detail = detail;
}

/*
 * The reducer of a definition, by its qualified identity, looked up as the
 * owner of esrc.snapshots.  A session caches every definition at once,
 * the first time it needs one, as whatever role it runs as: a writer that
 * may not use the schema of some snapshot's reducer got "permission denied
 * for schema" from the lookup, on appends to every category.  Finding the
 * function is no privilege: the reducer runs as the table's owner, who
 * needs EXECUTE on it (load_def).  On error, the caller's (sub)transaction
 * abort restores the user.
 */
static Oid
lookup_reducer(const char *identity)
{
	EsrcOwnerContext ctx;
	Oid			reducer;

	esrc_owner_enter(&ctx, esrc_relation_owner(esrc_relation_oid("snapshots")), 0);
	reducer = esrc_lookup_function(identity);
	esrc_owner_leave(&ctx);
	return reducer;
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

	def->reducer = lookup_reducer(def->reducer_name);
	if (!OidIsValid(def->reducer))
	{
		set_broken(def, ERRCODE_UNDEFINED_FUNCTION,
				   psprintf("reducer %s of snapshot \"%s\" does not exist",
							def->reducer_name, def->relname),
				   pstrdup("The function was renamed, moved to another schema or replaced with a different signature."));
		return;
	}
	problem = reducer_problem(def->reducer, snap_cache.event_typid);
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
	fmgr_info_cxt(def->reducer, &def->flinfo, snap_cache.cxt);
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

	snap_cache.catalog_relid = OidIsValid(nsp) ? get_relname_relid("snapshots", nsp) : InvalidOid;
	if (!OidIsValid(snap_cache.catalog_relid))
	{
		/* extension half-installed or being dropped: nothing to apply */
		snap_cache.valid = false;
		return;
	}

	snap_cache.cxt = AllocSetContextCreate(CacheMemoryContext, "esrc snapshot cache",
										   ALLOCSET_SMALL_SIZES);
	oldcxt = MemoryContextSwitchTo(snap_cache.cxt);

	snap_cache.event_typid = esrc_event_type_oid();
	snap_cache.event_desc = lookup_rowtype_tupdesc_copy(snap_cache.event_typid, -1);
	esrc_check_event_rowtype(snap_cache.event_desc);

	snap_cache.defs = palloc(sizeof(SnapshotDef) * alloc);
	rel = table_open(snap_cache.catalog_relid, AccessShareLock);
	if (RelationGetDescr(rel)->natts < Natts_snapshots_min)
		elog(ERROR, "esrc.snapshots has an unexpected row type");
	snap = RegisterSnapshot(GetLatestSnapshot());
	scan = table_beginscan(rel, snap, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Datum	   *values = palloc(sizeof(Datum) * RelationGetDescr(rel)->natts);
		bool	   *nulls = palloc(sizeof(bool) * RelationGetDescr(rel)->natts);

		heap_deform_tuple(tup, RelationGetDescr(rel), values, nulls);
		if (snap_cache.ndefs == alloc)
		{
			alloc *= 2;
			snap_cache.defs = repalloc(snap_cache.defs, sizeof(SnapshotDef) * alloc);
		}
		load_def(&snap_cache.defs[snap_cache.ndefs++], values);
		pfree(values);
		pfree(nulls);
	}
	table_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, AccessShareLock);

	qsort(snap_cache.defs, snap_cache.ndefs, sizeof(SnapshotDef), def_cmp);

	memset(&hctl, 0, sizeof(hctl));
	hctl.keysize = ESRC_MAX_STREAM_NAME + 1;
	hctl.entrysize = sizeof(CategoryEntry);
	hctl.hcxt = snap_cache.cxt;
	snap_cache.by_category = hash_create("esrc snapshot categories", 16, &hctl,
										 HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	for (i = 0; i < snap_cache.ndefs; i++)
	{
		bool		found;
		CategoryEntry *e = hash_search(snap_cache.by_category, snap_cache.defs[i].category,
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
void
snap_ensure_cache(void)
{
	if (snap_cache.valid)
		return;
	Assert(!snapshot_busy);

	if (!snap_cache.callbacks_registered)
	{
		CacheRegisterRelcacheCallback(snapshot_relcache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(PROCOID, snapshot_syscache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, snapshot_syscache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(AUTHOID, snapshot_syscache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, snapshot_syscache_callback, (Datum) 0);
		snap_cache.callbacks_registered = true;
	}

	free_cache();
	/* an invalidation arriving while we build makes the next call rebuild */
	snap_cache.valid = true;
	PG_TRY();
	{
		build_cache();
	}
	PG_CATCH();
	{
		snap_cache.valid = false;
		PG_RE_THROW();
	}
	PG_END_TRY();
}

static SnapshotDef *
find_def(Oid relid)
{
	int			i;

	for (i = 0; i < snap_cache.ndefs; i++)
		if (snap_cache.defs[i].relid == relid)
			return &snap_cache.defs[i];
	return NULL;
}

/* The definition of the snapshot table relid, or a clear error. */
SnapshotDef *
snap_get_def(Oid relid)
{
	SnapshotDef *def;

	snap_ensure_cache();
	def = find_def(relid);
	if (def == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("table \"%s\" is not a snapshot", get_rel_name(relid)),
				 errhint("Create snapshots with esrc.create_snapshot().")));
	return def;
}

/*
 * Refuse to apply, fill, rebuild or read a snapshot that is broken, or
 * whose owner may not read the log now (logaccess.c, 42501): its reducer
 * and its table would get events the owner may not see.  The definition
 * cache is kept across transactions, so the owner's right is asked here,
 * at each use (answered from logaccess.c's per-transaction cache), not
 * when the cache is built.  A SECURITY DEFINER reducer runs as its own
 * owner, whose right is asked too.
 */
void
snap_raise_if_broken(SnapshotDef *def)
{
	Oid			definer;

	if (def->broken_msg != NULL)
		ereport(ERROR,
				(errcode(def->broken_code),
				 errmsg("%s", def->broken_msg),
				 def->broken_detail ? errdetail("%s", def->broken_detail) : 0,
				 def->broken_code == ERRCODE_UNDEFINED_TABLE ?
				 errhint("Delete the row of snapshot %u from esrc.snapshots.", def->relid) :
				 errhint("Fix the cause, or drop the snapshot with esrc.drop_snapshot() and create it again.")));
	if (esrc_log_access(def->owner) != ESRC_LOG_READABLE)
		esrc_check_log_readable(def->owner,
								psprintf("The reducer of snapshot \"%s\" runs as the owner of its table and is given events of category \"%s\"; its table holds what it computes from them.",
										 def->relname, def->category));
	definer = esrc_function_runs_as(def->reducer, def->owner);
	if (definer != def->owner && esrc_log_access(definer) != ESRC_LOG_READABLE)
		esrc_check_log_readable(definer,
								psprintf("The reducer of snapshot \"%s\" is SECURITY DEFINER: it runs as its own owner and is given events of category \"%s\".",
										 def->relname, def->category));
}

/* Prepare the SQL of a snapshot table (inside an SPI connection). */
SPIPlanPtr
snap_def_plan(SnapshotDef *def, SnapshotPlan which)
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

void
snap_apply_error_callback(void *arg)
{
	ApplyErrorArg *a = (ApplyErrorArg *) arg;

	if (a->stream != NULL)
		errcontext("applying event version " INT64_FORMAT " of stream \"%s\" to snapshot \"%s\"",
				   a->version, a->stream, a->snapshot);
}

/*
 * state := reducer(state, event), as the snapshot's owner, in a GUC nest
 * level of its own.  The caller has entered the reducer context (an owner
 * context with ESRC_OWNER_PIN_PATH, see the header comment) and set
 * snapshot_busy, so search_path is not pinned again here.
 */
Datum
snap_call_reducer(SnapshotDef *def, Datum state, Datum event)
{
	LOCAL_FCINFO(fcinfo, 2);
	Datum		result;
	EsrcOwnerContext ctx;

	esrc_owner_enter(&ctx, def->owner, ESRC_OWNER_GUC_LEVEL);

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
	esrc_owner_leave(&ctx);

	if (fcinfo->isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("reducer %s of snapshot \"%s\" returned null",
						def->reducer_name, def->relname),
				 errhint("A reducer returns the new state; to ignore an event, return the state unchanged.")));
	return result;
}

/* Build an esrc.event datum (CurrentMemoryContext) from its columns. */
Datum
snap_make_event(Datum *values, bool *nulls)
{
	return HeapTupleGetDatum(heap_form_tuple(snap_cache.event_desc, values, nulls));
}

void
snap_fold_init(Fold *f, SnapshotDef *def)
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
void
snap_fold_start(Fold *f, const char *stream)
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
 * Go on with the fold of a stream from a stored state: the row of a
 * snapshot table whose last event had this version (snaprebuild.c's
 * catch-up).
 */
void
snap_fold_resume(Fold *f, const char *stream, Datum state, int64 version)
{
	MemoryContext old;

	snap_fold_start(f, stream);
	MemoryContextReset(f->statecxt[0]);
	old = MemoryContextSwitchTo(f->statecxt[0]);
	f->state = PointerGetDatum(PG_DETOAST_DATUM_COPY(state));
	MemoryContextSwitchTo(old);
	f->next_version = version + 1;
}

/*
 * Apply one event, given as the columns of an esrc.event (values/nulls), to the
 * fold.  Memory: the new state is copied into the other state context and
 * everything else is freed, so a fold of any length runs in bounded memory.
 */
void
snap_fold_apply(Fold *f, Datum *values, bool *nulls)
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

	/*
	 * A tombstone of the life cycle (log/log.h) is not folded: the version
	 * moves on, the state stays (snapapply.c does the same).
	 */
	if (!nulls[Anum_events_type - 1])
	{
		text	   *type = DatumGetTextPP(values[Anum_events_type - 1]);

		if (esrc_is_system_type(VARDATA_ANY(type), VARSIZE_ANY_EXHDR(type)))
		{
			f->next_version = version + 1;
			return;
		}
	}

	f->errarg.version = version;
	errcb.callback = snap_apply_error_callback;
	errcb.arg = &f->errarg;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	oldcxt = MemoryContextSwitchTo(f->evcxt);
	newstate = snap_call_reducer(f->def, f->state, snap_make_event(values, nulls));
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

void
snap_fold_end(Fold *f)
{
	MemoryContextDelete(f->evcxt);
	MemoryContextDelete(f->streamcxt);
	MemoryContextDelete(f->statecxt[0]);
	MemoryContextDelete(f->statecxt[1]);
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
	(void) snap_check_category(DatumGetTextPP(values[Anum_snapshots_category - 1]));
	given = TextDatumGetCString(values[Anum_snapshots_reducer - 1]);
	reducer = DatumGetObjectId(DirectFunctionCall1(regprocedurein, CStringGetDatum(given)));
	snap_check_reducer(reducer);

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

		snap_record_dependencies(relid, DatumGetObjectId(DirectFunctionCall1(regprocedurein,
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
	snap_catalog_write("DELETE FROM esrc.snapshots s"
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
