/*-------------------------------------------------------------------------
 *
 * ownerctx.c
 *	  The owner context: running code "as the owner, security-restricted,
 *	  with search_path pinned", in one enter/leave pair that every part of
 *	  esrc uses (issue 25), and esrc_run_as_owner(), one SQL statement in
 *	  that context.
 *
 * This file owns:
 *	 - esrc_owner_enter(): switch the current user to an owner as a
 *	   security-restricted operation (SetUserIdAndSecContext, as
 *	   index_build, REFRESH MATERIALIZED VIEW and ExecuteTruncateGuts do),
 *	   and, on request, open a GUC nest level of its own with search_path
 *	   pinned to ESRC_OWNER_SEARCH_PATH;
 *	 - esrc_owner_leave(): undo both on success, every setting made in the
 *	   level included (even a plain SET, as REFRESH MATERIALIZED VIEW does);
 *	 - esrc_owner_restore_user(): only the user and security context, for
 *	   the PG_FINALLY of callers that must have them back before the error
 *	   goes on up;
 *	 - esrc_run_as_owner(): one statement through SPI in the full context;
 *	 - esrc_role_exists() and esrc_check_owner_exists(): is the owner still
 *	   there, before the context is entered.
 *
 * Its users: the snapshot code (snapshot.c, snapapply.c, snapbuild.c,
 * snaprebuild.c, snapread.c: reducers, the writes of snapshot tables and
 * of esrc.snapshots), projections (projection.c: handlers and reset
 * functions), the life cycle and the catalogs (erase.c, retention.c,
 * crypto.c, scrub.c, scavenge.c, owners.c, subcatalog.c through
 * esrc_run_as_owner or the pair) and the forwarder's transactions
 * (fwdread.c).
 *
 * Not owner contexts, and kept where they are: the session-wide pins of
 * the workers at PGC_S_OVERRIDE (projworker.c, fwdread.c's
 * fwd_pin_settings), the search_path that owners.c gives DROP OWNED's
 * calls of esrc's SQL functions (their SET clause, no user switch), and
 * snaprebuild.c's lock_timeout level.
 *
 * Invariants kept:
 *	 - the security context entered is the caller's plus
 *	   SECURITY_RESTRICTED_OPERATION and (unless ESRC_OWNER_NOT_LOCAL)
 *	   SECURITY_LOCAL_USERID_CHANGE, so a context entered inside another
 *	   stays at least as restricted;
 *	 - the search_path shortcut of the hot paths: search_path is set only
 *	   when it differs from ESRC_OWNER_SEARCH_PATH.  Inside an outer level
 *	   of ours (the snapshot trigger pins it once per event, then enters a
 *	   level per snapshot and per reducer call), and in the projection
 *	   workers (which pin it for good at PGC_S_OVERRIDE), a nested context
 *	   costs a GUC nest level and no catalog work.  The value seen is the
 *	   same either way;
 *	 - the order of PostgreSQL's own owner contexts (RefreshMatViewByOid):
 *	   user first, then the GUC level; on leave the GUC level first, then
 *	   the user.
 *
 * On ERROR: the (sub)transaction abort restores the user and security
 * context (AbortTransaction/AbortSubTransaction) and unwinds the GUC nest
 * levels (AtEOXact_GUC with isCommit false), so esrc_owner_leave() is
 * called on success only, never in PG_FINALLY.  A caller that runs code
 * while the error propagates (a PG_FINALLY that resets its own state, an
 * error context callback, a PG_CATCH) and must not run it as the owner
 * calls esrc_owner_restore_user() in its PG_FINALLY, as esrc_run_as_owner
 * does; the GUC level is left to the abort in every case.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/syscache.h"

#include "base/base.h"

/*
 * Enter the owner context: remember the caller's user and security
 * context in *ctx; with ESRC_OWNER_PIN_PATH or ESRC_OWNER_GUC_LEVEL open a
 * GUC nest level (PIN_PATH also pins search_path, unless it already has
 * that value); if owner is valid, make it the current user in a
 * security-restricted operation.  owner InvalidOid keeps the current
 * user (the GUC level alone; esrc_owner_restore_user() then returns to
 * the user remembered here).  May ereport (out of memory); the abort then
 * restores all of it.
 */
void
esrc_owner_enter(EsrcOwnerContext *ctx, Oid owner, int flags)
{
	GetUserIdAndSecContext(&ctx->save_userid, &ctx->save_sec_context);
	ctx->switched = OidIsValid(owner);
	ctx->gucs = 0;
	if (ctx->switched)
		SetUserIdAndSecContext(owner, ctx->save_sec_context |
							   SECURITY_RESTRICTED_OPERATION |
							   ((flags & ESRC_OWNER_NOT_LOCAL) ? 0 :
								SECURITY_LOCAL_USERID_CHANGE));
	if (flags & (ESRC_OWNER_PIN_PATH | ESRC_OWNER_GUC_LEVEL))
	{
		ctx->gucs = NewGUCNestLevel();
		if ((flags & ESRC_OWNER_PIN_PATH) &&
			strcmp(namespace_search_path, ESRC_OWNER_SEARCH_PATH) != 0)
			(void) set_config_option("search_path", ESRC_OWNER_SEARCH_PATH,
									 PGC_USERSET, PGC_S_SESSION,
									 GUC_ACTION_SAVE, true, 0, false);
	}
}

/*
 * Leave the context on success: undo every setting made since the GUC
 * level was opened, then return to the caller's user and security context
 * (if esrc_owner_enter switched it).  Not for PG_FINALLY: see the header.
 */
void
esrc_owner_leave(EsrcOwnerContext *ctx)
{
	if (ctx->gucs > 0)
		AtEOXact_GUC(false, ctx->gucs);
	ctx->gucs = 0;
	if (ctx->switched)
		SetUserIdAndSecContext(ctx->save_userid, ctx->save_sec_context);
	ctx->switched = false;
}

/*
 * Return to the user and security context remembered by
 * esrc_owner_enter(), leaving the GUC level alone: safe in PG_FINALLY (it
 * cannot fail), where the abort that follows unwinds the level.  On
 * success esrc_owner_leave() is still called after it.
 */
void
esrc_owner_restore_user(const EsrcOwnerContext *ctx)
{
	SetUserIdAndSecContext(ctx->save_userid, ctx->save_sec_context);
}

/*
 * Run one statement (inside an SPI connection) as owner, in the full owner
 * context (nulls as for SPI_execute_with_args); every setting it makes is
 * undone after it.  On error the user is restored here, before the error
 * goes on up, and the settings by the (sub)transaction abort.
 */
void
esrc_run_as_owner(Oid owner, const char *sql, int nargs, Oid *argtypes,
				  Datum *values, const char *nulls, int expected_rc)
{
	esrc_run_sql_as(owner, ESRC_OWNER_PIN_PATH, sql, nargs, argtypes, values,
					nulls, expected_rc);
}

/*
 * esrc_run_as_owner with the flags of esrc_owner_enter: 0 switches the user
 * only, for statements that qualify everything (the snapshot catalog's).
 */
void
esrc_run_sql_as(Oid owner, int flags, const char *sql, int nargs, Oid *argtypes,
				Datum *values, const char *nulls, int expected_rc)
{
	EsrcOwnerContext ctx;
	int			rc;

	esrc_owner_enter(&ctx, owner, flags);
	PG_TRY();
	{
		rc = SPI_execute_with_args(sql, nargs, argtypes, values, nulls, false, 0);
		if (rc != expected_rc)
			elog(ERROR, "\"%s\" failed: %s", sql, SPI_result_code_string(rc));
	}
	PG_FINALLY();
	{
		esrc_owner_restore_user(&ctx);
	}
	PG_END_TRY();
	esrc_owner_leave(&ctx);
}

/*
 * Before an owner context is entered: does the owner still exist
 * (esrc_role_exists: the syscache, no error), and a clear 42704 when it
 * does not (esrc_check_owner_exists).
 */
bool
esrc_role_exists(Oid roleid)
{
	return SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(roleid));
}

/*
 * Raise 42704 when the owner of an object (kind, e.g. "projection") is gone: dropped from
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
