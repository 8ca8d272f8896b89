/*-------------------------------------------------------------------------
 *
 * rolemarker.c
 *	  The marker privilege that makes PostgreSQL itself record, in
 *	  pg_shdepend, every role that esrc's catalogs refer to (the owners in
 *	  esrc.projections and esrc.subscriptions, the consumers of
 *	  subscriptions), so that DROP ROLE refuses from every database of the
 *	  cluster, not only from the one whose catalogs owners.c's hook reads.
 *
 * The marker is esrc.referenced_role, an enum type without labels whose
 * USAGE PUBLIC holds anyway: granting it to a role gives that role nothing,
 * but PostgreSQL records the grant as a shared dependency, and
 * checkSharedDependencies refuses to drop a role that holds a privilege in
 * any database ("1 object in database app").  The rule kept: a role holds
 * USAGE on the marker (granted by the marker's owner) exactly when a row of
 * esrc.projections or esrc.subscriptions refers to it.
 *
 * esrc_sync_referenced_roles() keeps it: an AFTER statement trigger on both
 * catalogs (INSERT, DELETE, TRUNCATE, UPDATE of the role columns), so that
 * every writer is covered without knowing of it: create, grant, revoke and
 * drop of subscriptions and projections, REASSIGN OWNED and DROP OWNED
 * (owners.c), a superuser's UPDATE of an owner column, the COPY of
 * pg_restore, and the 0.2.0 to 0.3.0 upgrade script, which fires it once.
 * Each firing compares the whole set (the catalogs are small and written
 * only by administrative calls):
 *
 *	- under an ExclusiveLock on the marker, held to the end of the
 *	  transaction, so that two transactions never decide on stale views of
 *	  each other (and never update the marker's pg_type row at once);
 *	- reading the catalogs with the latest snapshot (as the RI triggers do),
 *	  so that in REPEATABLE READ a row another transaction committed after
 *	  ours started is not taken for gone;
 *	- as the marker's owner, security-restricted, search_path pinned
 *	  (ownerctx.c): the caller needs no privilege on the marker;
 *	- with creating_extension off for the GRANT and REVOKE (base/extacl.c),
 *	  so that grants made inside an extension script (the upgrade) are not
 *	  recorded as the marker's initial privileges in pg_init_privs: pg_dump
 *	  dumps the grants relative to those, and a restored database (a fresh
 *	  CREATE EXTENSION) must get them back.
 *
 * Roles that no longer exist (dropped before 0.3.0) are skipped: nothing
 * can be granted to them; docs/subscriptions.md has the query that finds
 * them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "base/base.h"
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "projectionint.h"

#define MARKER_NAME		"referenced_role"
#define MARKER_QUALIFIED	"esrc." MARKER_NAME

PG_FUNCTION_INFO_V1(esrc_sync_referenced_roles);

/*
 * The roles to grant the marker to ('g') and to revoke it from ('r'), by
 * name.  $1 is the marker.
 */
static const char *diff_sql =
"WITH refs AS ("
"  SELECT owner::pg_catalog.oid AS r FROM esrc.projections"
"  UNION SELECT owner::pg_catalog.oid FROM esrc.subscriptions"
"  UNION SELECT pg_catalog.unnest(consumers)::pg_catalog.oid FROM esrc.subscriptions"
"), marker AS ("
"  SELECT typowner, typacl FROM pg_catalog.pg_type WHERE oid OPERATOR(pg_catalog.=) $1"
"), held AS ("
"  SELECT a.grantee AS r FROM marker m, pg_catalog.aclexplode(m.typacl) a"
"  WHERE a.grantee OPERATOR(pg_catalog.<>) 0 AND a.grantee OPERATOR(pg_catalog.<>) m.typowner"
"    AND a.privilege_type OPERATOR(pg_catalog.=) 'USAGE'"
") "
"SELECT 'g', ro.rolname FROM pg_catalog.pg_roles ro, marker m"
" WHERE ro.oid OPERATOR(pg_catalog.=) ANY (SELECT r FROM refs)"
"   AND NOT ro.oid OPERATOR(pg_catalog.=) ANY (SELECT r FROM held)"
"   AND ro.oid OPERATOR(pg_catalog.<>) m.typowner "
"UNION ALL "
"SELECT 'r', ro.rolname FROM pg_catalog.pg_roles ro"
" WHERE ro.oid OPERATOR(pg_catalog.=) ANY (SELECT r FROM held)"
"   AND NOT ro.oid OPERATOR(pg_catalog.=) ANY (SELECT r FROM refs) "
"ORDER BY 1, 2";

/* the marker's OID, or InvalidOid (not yet created: inside the upgrade) */
static Oid
marker_oid(void)
{
	Oid			nsp = get_namespace_oid("esrc", true);

	if (!OidIsValid(nsp))
		return InvalidOid;
	return GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
						   CStringGetDatum(MARKER_NAME), ObjectIdGetDatum(nsp));
}

static Oid
marker_owner(Oid marker)
{
	HeapTuple	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(marker));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for type %u", marker);
	owner = ((Form_pg_type) GETSTRUCT(tup))->typowner;
	ReleaseSysCache(tup);
	return owner;
}

/* grant and revoke as the diff says; SPI connected, in the owner context */
static void
sync_marker(Oid marker)
{
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	SPIPlanPtr	plan;
	StringInfoData grant;
	StringInfoData revoke;
	uint64		r;
	int			rc;

	values[0] = ObjectIdGetDatum(marker);
	plan = SPI_prepare(diff_sql, 1, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	rc = SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(),
							  InvalidSnapshot, false, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "the roles of esrc's catalogs: %s", SPI_result_code_string(rc));
	initStringInfo(&grant);
	initStringInfo(&revoke);
	for (r = 0; r < SPI_processed; r++)
	{
		char	   *what = SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1);
		char	   *role = SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2);
		StringInfo	buf = what[0] == 'g' ? &grant : &revoke;

		appendStringInfo(buf, "%s%s", buf->len > 0 ? ", " : "", quote_identifier(role));
	}
	if (grant.len > 0)
		esrc_run_acl_outside_extension(psprintf("GRANT USAGE ON TYPE " MARKER_QUALIFIED " TO %s",
								   grant.data));
	if (revoke.len > 0)
		esrc_run_acl_outside_extension(psprintf("REVOKE USAGE ON TYPE " MARKER_QUALIFIED " FROM %s",
								   revoke.data));
}

/*
 * Trigger function (AFTER ... FOR EACH STATEMENT on esrc.projections and
 * esrc.subscriptions): the marker's grants follow the catalogs.
 */
Datum
esrc_sync_referenced_roles(PG_FUNCTION_ARGS)
{
	Oid			marker;
	Oid			owner;
	EsrcOwnerContext ctx;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("esrc.sync_referenced_roles() must be called as a trigger")));
	marker = marker_oid();
	if (!OidIsValid(marker))
		PG_RETURN_POINTER(NULL);
	LockDatabaseObject(TypeRelationId, marker, 0, ExclusiveLock);
	owner = marker_owner(marker);

	SPI_connect();
	esrc_owner_enter(&ctx, owner, ESRC_OWNER_PIN_PATH);
	PG_TRY();
	{
		sync_marker(marker);
	}
	PG_FINALLY();
	{
		esrc_owner_restore_user(&ctx);
	}
	PG_END_TRY();
	esrc_owner_leave(&ctx);
	SPI_finish();
	PG_RETURN_POINTER(NULL);
}
