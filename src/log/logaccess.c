/*-------------------------------------------------------------------------
 *
 * logaccess.c
 *	  May this role read every event of esrc.events now?  The one check
 *	  made wherever events reach a role: the read functions (read.c, for
 *	  the caller), a projection's batches, reset_projection,
 *	  projection_resume and create_projection (projworker.c, projection.c,
 *	  for the projection's owner), snapshot reducers and fills
 *	  (snapshot.c, for the snapshot table's owner) and esrc.decrypt
 *	  (crypto.c, for the caller).
 *
 * A role may read the log when it holds SELECT on esrc.events or on every
 * column of it (what a SELECT of the whole row needs), and row-level
 * security does not apply to it there (check_enable_rls: a role with
 * BYPASSRLS, or the table's owner without FORCE, is not filtered).  esrc
 * reads the log by index scans and hands whole rows on, so a role whose
 * policies would filter rows may not be given them; such a role is
 * refused, never served a filtered log.
 *
 * The rule is checked when events are delivered, not only when the object
 * that receives them was made: REVOKE esrc_reader FROM a projection's
 * owner stops its handler at the next batch.  It applies to the role the
 * code runs as: a SECURITY DEFINER handler or reducer runs as its own
 * owner (esrc_function_runs_as), whose right is checked too.
 *
 * Cache: the answer per role is kept for the rest of the transaction (the
 * snapshot trigger asks for every event of every append), and dropped
 * sooner on any invalidation of a relation (GRANT/REVOKE on esrc.events,
 * its columns, row-level security), of a role (BYPASSRLS, superuser) or
 * of a membership, so a change made earlier in the same transaction is
 * seen.  A new transaction always asks the catalogs again.
 *
 * A statement that waits inside its transaction (esrc.poll with a wait,
 * which sleeps on its latch) asks again with esrc_recheck_log_readable
 * each time it wakes: it takes the invalidations committed meanwhile and
 * a fresh catalog snapshot, so that a REVOKE, a lost membership or a
 * BYPASSRLS taken away that committed during its sleep is seen before it
 * hands on events that arrived after it.  The invalidation callbacks
 * would drop the cache then anyway; the recheck does not count on any
 * other code having taken the invalidations.
 *
 * Talks to: esrc.c (esrc_relation_oid), compat.h (the local transaction
 * id across majors).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/proc.h"
#include "catalog/pg_proc.h"
#include "utils/acl.h"
#include "utils/inval.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "base/base.h"
#include "log/log.h"

#define LOG_ACCESS_CACHE_SIZE 8

static struct
{
	LocalTransactionId lxid;	/* the transaction the answers are for */
	int			n;
	Oid			role[LOG_ACCESS_CACHE_SIZE];
	EsrcLogAccess access[LOG_ACCESS_CACHE_SIZE];
}			log_access_cache;

static bool callbacks_registered = false;

static void
forget_relcache(Datum arg, Oid relid)
{
	log_access_cache.n = 0;
}

static void
forget_syscache(Datum arg, int cacheid, uint32 hashvalue)
{
	log_access_cache.n = 0;
}

/* Ask the catalogs (may ereport: the extension is missing). */
static EsrcLogAccess
compute_access(Oid role)
{
	Oid			relid = esrc_relation_oid("events");

	if (pg_class_aclcheck(relid, role, ACL_SELECT) != ACLCHECK_OK &&
		pg_attribute_aclcheck_all(relid, role, ACL_SELECT, ACLMASK_ALL) != ACLCHECK_OK)
		return ESRC_LOG_NO_SELECT;
	if (check_enable_rls(relid, role, true) == RLS_ENABLED)
		return ESRC_LOG_RLS;
	return ESRC_LOG_READABLE;
}

/*
 * May role read every event of esrc.events now?  Cached for the rest of
 * the transaction (see the top of the file).  Inside a transaction; may
 * ereport if the extension is missing.
 */
EsrcLogAccess
esrc_log_access(Oid role)
{
	LocalTransactionId lxid = esrc_my_lxid();
	EsrcLogAccess access;
	int			i;

	if (!callbacks_registered)
	{
		CacheRegisterRelcacheCallback(forget_relcache, (Datum) 0);
		CacheRegisterSyscacheCallback(AUTHOID, forget_syscache, (Datum) 0);
		CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, forget_syscache, (Datum) 0);
		callbacks_registered = true;
	}
	if (log_access_cache.lxid != lxid)
	{
		log_access_cache.lxid = lxid;
		log_access_cache.n = 0;
	}
	for (i = 0; i < log_access_cache.n; i++)
		if (log_access_cache.role[i] == role)
			return log_access_cache.access[i];
	access = compute_access(role);
	if (log_access_cache.n < LOG_ACCESS_CACHE_SIZE)
	{
		log_access_cache.role[log_access_cache.n] = role;
		log_access_cache.access[log_access_cache.n++] = access;
	}
	return access;
}

/*
 * The role that funcoid runs as when caller calls it: its owner if it is
 * SECURITY DEFINER, caller otherwise (also for a function that is gone).
 * The events a handler or reducer is given reach that role.  Read from
 * the catalogs at each call, so that ALTER FUNCTION ... SECURITY DEFINER
 * or OWNER TO is seen at the next delivery.
 */
Oid
esrc_function_runs_as(Oid funcoid, Oid caller)
{
	HeapTuple	tp;
	Oid			role = caller;

	if (!OidIsValid(funcoid))
		return caller;
	tp = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcoid));
	if (!HeapTupleIsValid(tp))
		return caller;
	if (((Form_pg_proc) GETSTRUCT(tp))->prosecdef)
		role = ((Form_pg_proc) GETSTRUCT(tp))->proowner;
	ReleaseSysCache(tp);
	return role;
}

/* The role's name, or its OID when it is gone (a dropped owner). */
static const char *
role_name(Oid role)
{
	const char *name = GetUserNameFromId(role, true);

	return name != NULL ? name : psprintf("%u", role);
}

/* What keeps role from reading the log: a sentence (access not READABLE). */
char *
esrc_log_access_problem(Oid role, EsrcLogAccess access)
{
	const char *name = role_name(role);

	if (access == ESRC_LOG_RLS)
		return psprintf("Row-level security on esrc.events applies to role \"%s\".", name);
	return psprintf("Role \"%s\" has no SELECT privilege on esrc.events, neither on the table nor on all of its columns.",
					name);
}

/* How to let role read the log again: a sentence (access not READABLE). */
char *
esrc_log_access_fix(Oid role, EsrcLogAccess access)
{
	const char *name = role_name(role);

	if (access == ESRC_LOG_RLS)
		return psprintf("Disable row-level security on esrc.events, or give role \"%s\" BYPASSRLS.", name);
	return psprintf("Grant esrc_reader (or SELECT on esrc.events) to role \"%s\".", name);
}

static void
refuse(Oid role, EsrcLogAccess access, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("role \"%s\" may not read esrc.events", role_name(role)),
			 errdetail("%s %s", why, esrc_log_access_problem(role, access)),
			 errhint("%s", esrc_log_access_fix(role, access))));
}

/*
 * Refuse (42501) unless role may read every event of esrc.events now.
 * why is the first sentence of the detail: who would get the events.
 */
void
esrc_check_log_readable(Oid role, const char *why)
{
	EsrcLogAccess access = esrc_log_access(role);

	if (access != ESRC_LOG_READABLE)
		refuse(role, access, why);
}

/*
 * The same, asked of the catalogs as they are now, not as the transaction
 * last saw them: for a statement that slept inside its transaction and is
 * about to hand on events that arrived meanwhile (see the top of the
 * file).  The answer is cached again for what follows.
 */
void
esrc_recheck_log_readable(Oid role, const char *why)
{
	AcceptInvalidationMessages();
	InvalidateCatalogSnapshot();
	log_access_cache.n = 0;
	esrc_check_log_readable(role, why);
}
