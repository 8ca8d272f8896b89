/*-------------------------------------------------------------------------
 *
 * catalog.c
 *	  What every subsystem asks of the extension's own objects: is the
 *	  shared memory there, the schema esrc and its relations (looked up,
 *	  or opened and locked), their owner, the type esrc.event, a function
 *	  by its identity, and the body of the triggers that keep esrc's
 *	  records append-only.
 *
 * Everything here is a lookup through the syscache (cheap, never stale: a
 * dropped and re-created extension is found again) or a refusal; nothing
 * here calls into a subsystem.  esrc.c sets esrc_shmem_attached when the
 * shared memory is attached.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

#include "base/base.h"

/* set by esrc.c's shmem_startup_hook, in the postmaster (inherited) */
bool		esrc_shmem_attached = false;

/*
 * Raise a clear error when the shared state is missing.  That happens only
 * when the library was loaded by binary upgrade mode; _PG_init refuses the
 * other ways.
 */
void
esrc_require_shared(void)
{
	if (!esrc_shmem_attached)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("esrc shared memory is not initialized"),
				 errhint("Add esrc to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/*
 * Catalog lookups.  They go through the syscache, so they are cheap and
 * never stale: a dropped and re-created extension is found again.
 */
Oid
esrc_schema_oid(void)
{
	return get_namespace_oid("esrc", false);
}

Oid
esrc_relation_oid(const char *relname)
{
	Oid			relid = get_relname_relid(relname, esrc_schema_oid());

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("relation \"esrc.%s\" does not exist", relname),
				 errhint("Run CREATE EXTENSION esrc in this database.")));
	return relid;
}

/*
 * Open esrc.relname with lockmode.  The name is looked up before the lock
 * is taken, so a DROP EXTENSION that held the table may have dropped it by
 * the time the lock is granted: that is reported as the table missing, with
 * esrc's message, not as PostgreSQL's internal "could not open relation
 * with OID" (test/specs/append_drop_extension.spec).
 */
Relation
esrc_open_relation(const char *relname, LOCKMODE lockmode)
{
	Relation	rel = try_relation_open(esrc_relation_oid(relname), lockmode);

	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("relation \"esrc.%s\" does not exist", relname),
				 errdetail("The extension esrc was dropped while this statement waited for it."),
				 errhint("Run CREATE EXTENSION esrc in this database.")));
	return rel;
}

/* The owner of a relation (esrc's catalogs: the extension's creator). */
Oid
esrc_relation_owner(Oid relid)
{
	HeapTuple	tp = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tp))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tp))->relowner;
	ReleaseSysCache(tp);
	return owner;
}

/*
 * The body of the triggers that keep esrc's records append-only
 * (esrc.projection_skips, esrc.erasures): refuse the UPDATE, DELETE or
 * TRUNCATE that fired it, naming the table and what it records.  Never
 * returns.
 */
void
esrc_refuse_change(FunctionCallInfo fcinfo, const char *fname, const char *table,
				   const char *record, const char *detail)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	const char *op;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("%s() must be called as a trigger", fname)));
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		op = "update";
	else if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		op = "delete";
	else
		op = "truncate";
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("cannot %s rows of %s: the record of %s is append-only", op, table, record),
			 detail ? errdetail_internal("%s", detail) : 0));
}

/* The OID of the type esrc.event (an error if it is missing). */
Oid
esrc_event_type_oid(void)
{
	Oid			typid = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
										CStringGetDatum("event"),
										ObjectIdGetDatum(esrc_schema_oid()));

	if (!OidIsValid(typid))
		elog(ERROR, "type esrc.event does not exist");
	return typid;
}

/* The function of that identity (schema.name(argtypes)), or InvalidOid. */
Oid
esrc_lookup_function(const char *identity)
{
	LOCAL_FCINFO(fcinfo, 1);
	Datum		result;

	InitFunctionCallInfoData(*fcinfo, NULL, 1, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = CStringGetTextDatum(identity);
	fcinfo->args[0].isnull = false;
	result = to_regprocedure(fcinfo);
	if (fcinfo->isnull)
		return InvalidOid;
	return DatumGetObjectId(result);
}
