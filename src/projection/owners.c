/*-------------------------------------------------------------------------
 *
 * owners.c
 *	  The roles that esrc's catalogs record: the owners of projections and
 *	  subscriptions (esrc.projections.owner, esrc.subscriptions.owner) and
 *	  the roles granted to consume a subscription
 *	  (esrc.subscriptions.consumers).  DROP ROLE, REASSIGN OWNED and DROP
 *	  OWNED treat them as PostgreSQL treats the owner and the privileges of
 *	  a table; and the code that acts as an owner stops when that role is
 *	  gone.
 *
 * PostgreSQL records shared dependencies (pg_shdepend) only for objects of
 * its own catalogs, so a regrole column alone would let DROP ROLE succeed
 * and leave a dangling OID behind, which a later role may get.  Two things
 * prevent it.  rolemarker.c grants every role that the catalogs refer to
 * USAGE on the marker type esrc.referenced_role, which PostgreSQL records:
 * DROP ROLE refuses from every database ("1 object in database app").  And
 * a ProcessUtility hook, in the database it runs in, where esrc is
 * installed (and not while an extension script runs), says which esrc
 * objects and does the bookkeeping:
 *
 *	DROP ROLE		before PostgreSQL's processing, for the roles PostgreSQL
 *					would let the caller drop (its refusals for the caller's
 *					rights come first, in its words), refuses with 2BP01 if
 *					an esrc object refers to one, listing them as PostgreSQL
 *					lists a role's objects (at most MAX_REPORTED_DEPS in the
 *					message, all in the log); PostgreSQL's own refusal, for
 *					the marker's grant, would only name the marker.  After
 *					PostgreSQL's processing, the same check again (a role
 *					recorded before 0.3.0 without the marker's grant).
 *	REASSIGN OWNED	after PostgreSQL's processing (which checks the
 *					caller's privileges on every role), moves the owner
 *					columns to the new role; consumers stay, as privileges
 *					do.
 *	DROP OWNED		before PostgreSQL's processing, because that drops the
 *					role's functions and esrc's event trigger refuses to
 *					drop a projection's handler: drops the role's
 *					projections and subscriptions through
 *					esrc.drop_projection's and esrc.drop_subscription's own
 *					code (leases, workers, checkpoints) and removes the role
 *					from every subscription's consumers.  It acts only when
 *					the caller has the privileges of every role named, the
 *					check PostgreSQL makes next, which raises the error
 *					otherwise; in a read-only transaction or on a standby
 *					it raises PostgreSQL's 25006 for DROP OWNED first.
 *
 * A role that esrc's catalogs still name may be gone all the same: one
 * dropped from another database before 0.3.0 (which had no marker).  The
 * projection workers of that database notice the missing owner at their
 * next round (esrc_pause_ownerless_projections, called by projworker.c)
 * and pause the projection, recording why in
 * esrc.projection_partitions.last_error; reset_projection refuses to run
 * its reset function as a role that is gone.  docs/subscriptions.md has
 * the query that finds such rows.
 *
 * Catalog statements run as the catalogs' owner, security-restricted, with
 * search_path pinned (ownerctx.c's esrc_run_as_owner, subcatalog.c's
 * catalog_run in the workers, whose search_path is pinned for good).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "base/base.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "subscription/subscription.h"
#include "projection/projection.h"
#include "owners.h"
#include "projectionint.h"

/* as PostgreSQL's checkSharedDependencies: more go to the server log only */
#define MAX_REPORTED_DEPS	100

/* the search_path of esrc's functions, which DROP OWNED calls the code of */
#define OWNERS_SEARCH_PATH	"pg_catalog, pg_temp"

/* What refers to a role, in the order DROP ROLE lists them */
typedef enum RoleRef
{
	REF_PROJECTION_OWNER,
	REF_SUBSCRIPTION_OWNER,		/* not a projection's: that one is listed */
	REF_SUBSCRIPTION_CONSUMER,
	NUM_ROLE_REFS
} RoleRef;

static const char *const ref_formats[NUM_ROLE_REFS] = {
	"owner of projection \"%s\"",
	"owner of subscription \"%s\"",
	"privileges for subscription \"%s\"",
};

static ProcessUtility_hook_type prev_process_utility = NULL;

static void owners_process_utility(PlannedStmt *pstmt, const char *queryString,
								   bool readOnlyTree, ProcessUtilityContext context,
								   ParamListInfo params, QueryEnvironment *queryEnv,
								   DestReceiver *dest, QueryCompletion *qc);

void
esrc_owners_init(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = owners_process_utility;
}

bool
esrc_role_exists(Oid roleid)
{
	return SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(roleid));
}

/*
 * Raise 42704 when the owner of a projection (kind) is gone: dropped from
 * another database, where DROP ROLE does not see esrc's catalogs.
 */
void
esrc_check_owner_exists(Oid owner, const char *kind, const char *name)
{
	if (!esrc_role_exists(owner))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("owner of %s \"%s\" does not exist", kind, name),
				 errdetail("Its owner, role %u, was dropped while connected to another database, before esrc 0.3.0 recorded the roles of its objects for DROP ROLE.",
						   owner),
				 errhint("A superuser can set its owner in esrc.%ss to an existing role, or drop the %s.",
						 kind, kind)));
}

/*
 * Is esrc installed here, with both catalogs?  Not while an extension
 * script runs (CREATE or ALTER EXTENSION esrc, which may adopt roles).
 */
static bool
catalogs_here(void)
{
	Oid			nsp;

	if (creating_extension || !OidIsValid(get_extension_oid("esrc", true)))
		return false;
	nsp = get_namespace_oid("esrc", true);
	return OidIsValid(nsp) &&
		OidIsValid(get_relname_relid("projections", nsp)) &&
		OidIsValid(get_relname_relid("subscriptions", nsp));
}

/*
 * The names of the esrc objects that refer to roleid, per RoleRef,
 * appended to refs[] (lists of strings in cxt).  SPI connected.  Returns
 * how many.
 */
static int
role_refs(Oid roleid, MemoryContext cxt, List **refs)
{
	static const char *sql =
		"SELECT kind, name FROM ("
		"SELECT 0 AS kind, name FROM esrc.projections WHERE owner OPERATOR(pg_catalog.=) $1 "
		"UNION ALL SELECT 1, name FROM esrc.subscriptions "
		"WHERE owner OPERATOR(pg_catalog.=) $1 AND NOT projection "
		"UNION ALL SELECT 2, name FROM esrc.subscriptions "
		"WHERE $1 OPERATOR(pg_catalog.=) ANY (consumers)) r "
		"ORDER BY kind, name COLLATE pg_catalog.\"C\"";
	Oid			argtypes[1] = {REGROLEOID};
	Datum		values[1];
	uint64		r;
	MemoryContext old;

	values[0] = ObjectIdGetDatum(roleid);
	esrc_run_as_owner(catalog_owner(), sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	old = MemoryContextSwitchTo(cxt);
	for (r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		int			kind = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r],
													   SPI_tuptable->tupdesc, 1, &isnull));

		refs[kind] = lappend(refs[kind], SPI_getvalue(SPI_tuptable->vals[r],
													  SPI_tuptable->tupdesc, 2));
	}
	MemoryContextSwitchTo(old);
	return (int) SPI_processed;
}

/*
 * DROP ROLE, before PostgreSQL's processing (the roles it would let the
 * caller drop) and after it (all of them, dropped in this transaction):
 * refuse if an esrc object of this database refers to one of them.
 */
static void
check_dropped_roles(List *roleids, List *rolenames)
{
	ListCell   *lc1;
	ListCell   *lc2;

	forboth(lc1, roleids, lc2, rolenames)
	{
		List	   *refs[NUM_ROLE_REFS] = {NIL};
		StringInfoData detail;
		StringInfoData detail_log;
		int			n;
		int			k;
		int			i = 0;
		MemoryContext cxt = CurrentMemoryContext;

		SPI_connect();
		n = role_refs(lfirst_oid(lc1), cxt, refs);
		if (n == 0)
		{
			SPI_finish();
			continue;
		}
		initStringInfo(&detail);
		initStringInfo(&detail_log);
		for (k = 0; k < NUM_ROLE_REFS; k++)
		{
			ListCell   *lc;

			foreach(lc, refs[k])
			{
				char	   *what = psprintf(ref_formats[k], (char *) lfirst(lc));

				if (i < MAX_REPORTED_DEPS)
					appendStringInfo(&detail, "%s%s", i > 0 ? "\n" : "", what);
				appendStringInfo(&detail_log, "%s%s", i > 0 ? "\n" : "", what);
				i++;
			}
		}
		if (n > MAX_REPORTED_DEPS)
			appendStringInfo(&detail, "\nand %d other %s (see server log for list)",
							 n - MAX_REPORTED_DEPS,
							 n - MAX_REPORTED_DEPS == 1 ? "object" : "objects");
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("role \"%s\" cannot be dropped because some objects depend on it",
						(char *) lfirst(lc2)),
				 errdetail_internal("%s", detail.data),
				 errdetail_log("%s", detail_log.data),
				 errhint("REASSIGN OWNED or DROP OWNED in this database moves or drops esrc's objects too.")));
	}
}

/* REASSIGN OWNED, after PostgreSQL's: the owner columns too. */
static void
reassign_owned(ReassignOwnedStmt *stmt)
{
	static const char *projections_sql =
		"UPDATE esrc.projections SET owner = $2 WHERE owner OPERATOR(pg_catalog.=) $1";
	static const char *subscriptions_sql =
		"UPDATE esrc.subscriptions SET owner = $2 WHERE owner OPERATOR(pg_catalog.=) $1";
	Oid			argtypes[2] = {REGROLEOID, REGROLEOID};
	Datum		values[2];
	bool		moved = false;
	ListCell   *lc;

	values[1] = ObjectIdGetDatum(get_rolespec_oid(stmt->newrole, false));
	SPI_connect();
	foreach(lc, stmt->roles)
	{
		values[0] = ObjectIdGetDatum(get_rolespec_oid(lfirst(lc), false));
		esrc_run_as_owner(catalog_owner(), projections_sql, 2, argtypes, values, NULL,
						  SPI_OK_UPDATE);
		moved = moved || SPI_processed > 0;
		esrc_run_as_owner(catalog_owner(), subscriptions_sql, 2, argtypes, values, NULL,
						  SPI_OK_UPDATE);
	}
	SPI_finish();
	/* the workers read the owner at their next round */
	if (moved)
		esrc_projection_wake_at_commit();
}

/*
 * DROP OWNED, before PostgreSQL's: the roles' projections and
 * subscriptions through the code of esrc.drop_projection and
 * esrc.drop_subscription (whose ownership checks pass: the caller has the
 * privileges of every role), and the roles' grants to consume.
 */
static void
drop_owned(DropOwnedStmt *stmt)
{
	static const char *revoke_sql =
		"UPDATE esrc.subscriptions SET consumers = pg_catalog.array_remove(consumers, $1) "
		"WHERE $1 OPERATOR(pg_catalog.=) ANY (consumers)";
	List	   *refs[NUM_ROLE_REFS] = {NIL};
	List	   *roleids = NIL;
	Oid			argtypes[1] = {REGROLEOID};
	Datum		values[1];
	ListCell   *lc;
	int			gucs;
	MemoryContext cxt = CurrentMemoryContext;

	foreach(lc, stmt->roles)
	{
		Oid			roleid = get_rolespec_oid(lfirst(lc), false);

		/* PostgreSQL's own check, next, refuses the statement */
		if (!has_privs_of_role(GetUserId(), roleid))
			return;
		/* DROP OWNED BY a, a: each object once */
		roleids = list_append_unique_oid(roleids, roleid);
	}
	SPI_connect();
	foreach(lc, roleids)
	{
		(void) role_refs(lfirst_oid(lc), cxt, refs);
		values[0] = ObjectIdGetDatum(lfirst_oid(lc));
		esrc_run_as_owner(catalog_owner(), revoke_sql, 1, argtypes, values, NULL,
						  SPI_OK_UPDATE);
	}
	SPI_finish();

	/* as the SQL functions run, with their SET search_path */
	gucs = NewGUCNestLevel();
	(void) set_config_option("search_path", OWNERS_SEARCH_PATH,
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	foreach(lc, refs[REF_PROJECTION_OWNER])
		(void) DirectFunctionCall1(esrc_drop_projection, CStringGetTextDatum(lfirst(lc)));
	foreach(lc, refs[REF_SUBSCRIPTION_OWNER])
		(void) DirectFunctionCall1(esrc_drop_subscription, CStringGetTextDatum(lfirst(lc)));
	AtEOXact_GUC(false, gucs);
}

/*
 * The roles of DROP ROLE that exist, in its order, appended to roleids and
 * rolenames.  Returns how many of the first ones PostgreSQL would let the
 * caller drop: it stops at the first one it refuses for the caller's
 * rights or as a special role, with its own message.
 */
static int
drop_role_targets(DropRoleStmt *stmt, List **roleids, List **rolenames)
{
	ListCell   *lc;
	int			droppable = 0;
	bool		refused = false;

	foreach(lc, stmt->roles)
	{
		RoleSpec   *spec = lfirst(lc);
		Oid			roleid;

		if (spec->roletype != ROLESPEC_CSTRING)
		{
			refused = true;		/* PostgreSQL refuses CURRENT_USER and the like */
			continue;
		}
		roleid = get_role_oid(spec->rolename, true);
		if (!OidIsValid(roleid))
			continue;
		*roleids = lappend_oid(*roleids, roleid);
		*rolenames = lappend(*rolenames, pstrdup(spec->rolename));
		if (roleid == GetUserId() || roleid == GetOuterUserId() ||
			roleid == GetSessionUserId() || roleid == BOOTSTRAP_SUPERUSERID ||
			!esrc_may_drop_role(roleid, superuser_arg(roleid)))
			refused = true;
		if (!refused)
			droppable++;
	}
	return droppable;
}

/*
 * The hook.  The role OIDs of DROP ROLE are looked up before PostgreSQL
 * drops them; roles that do not exist (IF EXISTS) are PostgreSQL's
 * business.
 */
static void
owners_process_utility(PlannedStmt *pstmt, const char *queryString,
					   bool readOnlyTree, ProcessUtilityContext context,
					   ParamListInfo params, QueryEnvironment *queryEnv,
					   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	bool		here = false;
	List	   *roleids = NIL;
	List	   *rolenames = NIL;

	if (IsA(parsetree, DropRoleStmt) || IsA(parsetree, ReassignOwnedStmt) ||
		IsA(parsetree, DropOwnedStmt))
		here = catalogs_here();
	if (here && IsA(parsetree, DropRoleStmt))
	{
		int			droppable;

		/*
		 * esrc's listing first, for the roles PostgreSQL would let the
		 * caller drop: its own check would refuse them for the marker's
		 * grant ("privileges for type esrc.referenced_role"), which says
		 * less.  PostgreSQL's refusals of the statement come before.
		 */
		PreventCommandIfReadOnly("DROP ROLE");
		PreventCommandIfParallelMode("DROP ROLE");
		PreventCommandDuringRecovery("DROP ROLE");
		droppable = drop_role_targets((DropRoleStmt *) parsetree, &roleids, &rolenames);
		check_dropped_roles(list_truncate(list_copy(roleids), droppable),
							list_truncate(list_copy(rolenames), droppable));
	}
	else if (here && IsA(parsetree, DropOwnedStmt))
	{
		/*
		 * PostgreSQL's refusals of the statement come first, under its name,
		 * not that of the first statement drop_owned would run.
		 */
		PreventCommandIfReadOnly("DROP OWNED");
		PreventCommandIfParallelMode("DROP OWNED");
		PreventCommandDuringRecovery("DROP OWNED");
		drop_owned((DropOwnedStmt *) parsetree);
	}

	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params,
							 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);

	if (here && IsA(parsetree, DropRoleStmt))
		check_dropped_roles(roleids, rolenames);
	else if (here && IsA(parsetree, ReassignOwnedStmt))
		reassign_owned((ReassignOwnedStmt *) parsetree);
}

/* ----------------------------------------------------------------
 * Projection workers: owners that are gone
 * ----------------------------------------------------------------
 */

/*
 * Pause, in this transaction, every projection not paused whose owner is
 * gone; record why on its partitions and in the server log.  SPI
 * connected, the tables locked.
 */
static void
pause_ownerless(void)
{
	static const char *list_sql =
		"SELECT id, name, owner::pg_catalog.oid FROM esrc.projections WHERE NOT paused";
	static const char *pause_sql =
		"UPDATE esrc.projections SET paused = true WHERE id OPERATOR(pg_catalog.=) $1 "
		"AND owner OPERATOR(pg_catalog.=) $2 AND NOT paused";
	static const char *note_sql =
		"UPDATE esrc.projection_partitions SET last_error = $2, last_error_sqlstate = $3, "
		"last_error_at = pg_catalog.now() WHERE projection_id OPERATOR(pg_catalog.=) $1";
	Oid			argtypes[3] = {INT8OID, OIDOID, TEXTOID};
	Oid			noteargtypes[3] = {INT8OID, TEXTOID, TEXTOID};
	Datum		values[3];
	int64	   *ids;
	char	  **names;
	Oid		   *owners;
	int			n = 0;
	int			i;
	uint64		r;

	catalog_run(list_sql, 0, NULL, NULL, NULL, SPI_OK_SELECT);
	ids = palloc(sizeof(int64) * (SPI_processed + 1));
	names = palloc(sizeof(char *) * (SPI_processed + 1));
	owners = palloc(sizeof(Oid) * (SPI_processed + 1));
	for (r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Oid			owner = DatumGetObjectId(SPI_getbinval(tup, desc, 3, &isnull));

		if (esrc_role_exists(owner))
			continue;
		ids[n] = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		names[n] = SPI_getvalue(tup, desc, 2);
		owners[n++] = owner;
	}
	for (i = 0; i < n; i++)
	{
		char	   *why;

		values[0] = Int64GetDatum(ids[i]);
		values[1] = ObjectIdGetDatum(owners[i]);
		catalog_run(pause_sql, 2, argtypes, values, NULL, SPI_OK_UPDATE);
		if (SPI_processed == 0)
			continue;			/* resumed, reassigned or paused meanwhile */
		why = psprintf("owner of projection \"%s\" does not exist (role %u was dropped): projection paused",
					   names[i], owners[i]);
		values[1] = CStringGetTextDatum(why);
		values[2] = CStringGetTextDatum(unpack_sql_state(ERRCODE_UNDEFINED_OBJECT));
		catalog_run(note_sql, 3, noteargtypes, values, NULL, SPI_OK_UPDATE);
		ereport(WARNING,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("owner of projection \"%s\" does not exist, projection paused", names[i]),
				 errdetail("Its owner, role %u, was dropped while connected to another database, before esrc 0.3.0 recorded the roles of its objects for DROP ROLE.",
						   owners[i]),
				 errhint("A superuser can set esrc.projections.owner to an existing role and call esrc.projection_resume(), or call esrc.drop_projection().")));
	}
}

void
esrc_pause_ownerless_projections(void)
{
	Oid			nsp;
	Oid			projections = InvalidOid;
	Oid			partitions = InvalidOid;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	nsp = get_namespace_oid("esrc", true);
	if (OidIsValid(nsp))
	{
		projections = get_relname_relid("projections", nsp);
		partitions = get_relname_relid("projection_partitions", nsp);
	}

	/*
	 * Never wait for a lock here (DDL on esrc, see projworker.c's
	 * begin_xact): the caller skips these projections anyway, and the next
	 * round tries again.
	 */
	if (OidIsValid(projections) && OidIsValid(partitions) &&
		ConditionalLockRelationOid(projections, RowExclusiveLock) &&
		ConditionalLockRelationOid(partitions, RowExclusiveLock))
	{
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		pause_ownerless();
		PopActiveSnapshot();
		SPI_finish();
	}
	CommitTransactionCommand();
}
