/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  The differences between the PostgreSQL majors esrc builds against,
 *	  in one place: each is a macro or a static inline wrapper named esrc_*
 *	  with the oldest major's meaning, keyed on PG_VERSION_NUM, with a
 *	  comment naming the major that changed the API.  The rest of src/
 *	  calls only these wrappers, never the changed API directly.
 *
 * Supported: 15, 17 and 18 (built and tested by test/all.sh, the latter
 * two in Debian roots, test/matrix/).  16 takes the paths of 17 where 16
 * changed an API and builds, but is not tested here.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_COMPAT_H
#define ESRC_COMPAT_H

#include "postgres.h"

/*
 * Any other major: one clear error, then stop the compilation (an #error
 * alone lets the compiler go on into a cascade of errors on changed APIs;
 * a missing include is fatal).
 */
#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 190000
#error "esrc supports PostgreSQL 15, 16, 17 and 18 (tested: 15, 17, 18)"
#include "esrc: stopped, unsupported PostgreSQL major"
#endif

#include "access/genam.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "parser/parse_relation.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/relcache.h"

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"

#if PG_VERSION_NUM >= 160000
#include "catalog/pg_proc.h"
#include "catalog/pg_namespace.h"
#endif
#if PG_VERSION_NUM >= 170000
#include "storage/procnumber.h"
#endif

/*
 * A function that never returns, marked before its declaration.  18
 * replaced the trailing pg_attribute_noreturn() by the leading pg_noreturn.
 */
#if PG_VERSION_NUM >= 180000
#define esrc_noreturn pg_noreturn
#else
#define esrc_noreturn pg_attribute_noreturn()
#endif

/*
 * This backend's index into ProcGlobal->allProcs.  17 replaced
 * PGPROC.pgprocno by MyProcNumber.
 */
#if PG_VERSION_NUM >= 170000
#define esrc_my_procno()	((int) MyProcNumber)
#else
#define esrc_my_procno()	(MyProc->pgprocno)
#endif

/*
 * This backend's local transaction id (subscription.c keeps what a poll
 * looked up for an ack of the same transaction): 17 moved PGPROC.lxid into
 * PGPROC.vxid.
 */
#if PG_VERSION_NUM >= 170000
#define esrc_my_lxid()		(MyProc->vxid.lxid)
#else
#define esrc_my_lxid()		(MyProc->lxid)
#endif

/*
 * The executor state of a single-relation write (append.c): one range
 * table entry.  16 moved permission checks into RTEPermissionInfo, which
 * ExecInitRangeTable now takes (ExecGetUpdatedCols and friends look it up,
 * so the entry needs one); 18 added the set of unpruned relations, which
 * must hold the entry for it to be opened.
 */
static inline void
esrc_init_range_table(EState *estate, RangeTblEntry *rte)
{
#if PG_VERSION_NUM >= 160000
	List	   *perminfos = NIL;

	(void) addRTEPermissionInfo(&perminfos, rte);
#if PG_VERSION_NUM >= 180000
	ExecInitRangeTable(estate, list_make1(rte), perminfos, bms_make_singleton(1));
#else
	ExecInitRangeTable(estate, list_make1(rte), perminfos);
#endif
#else
	ExecInitRangeTable(estate, list_make1(rte));
#endif
}

/* 16 added the list of result relations of the EPQ plan. */
static inline void
esrc_epq_init(EPQState *epq, EState *estate)
{
#if PG_VERSION_NUM >= 160000
	EvalPlanQualInit(epq, estate, NULL, NIL, -1, NIL);
#else
	EvalPlanQualInit(epq, estate, NULL, NIL, -1);
#endif
}

/* 18 added instrumentation to index_beginscan. */
static inline IndexScanDesc
esrc_index_beginscan(Relation heap, Relation index, Snapshot snapshot,
					 int nkeys, int norderbys)
{
#if PG_VERSION_NUM >= 180000
	return index_beginscan(heap, index, snapshot, NULL, nkeys, norderbys);
#else
	return index_beginscan(heap, index, snapshot, nkeys, norderbys);
#endif
}

/* 18 added deferrable_ok; false is the behaviour of the older majors. */
static inline Oid
esrc_primary_key_index(Relation rel)
{
#if PG_VERSION_NUM >= 180000
	return RelationGetPrimaryKeyIndex(rel, false);
#else
	return RelationGetPrimaryKeyIndex(rel);
#endif
}

/* 17 added orstronger; false is the behaviour of the older majors. */
static inline bool
esrc_lock_held_by_me(const LOCKTAG *tag, LOCKMODE mode)
{
#if PG_VERSION_NUM >= 170000
	return LockHeldByMe(tag, mode, false);
#else
	return LockHeldByMe(tag, mode);
#endif
}

/* 16 replaced pg_proc_aclcheck by object_aclcheck. */
static inline AclResult
esrc_proc_aclcheck(Oid proc, Oid roleid, AclMode mode)
{
#if PG_VERSION_NUM >= 160000
	return object_aclcheck(ProcedureRelationId, proc, roleid, mode);
#else
	return pg_proc_aclcheck(proc, roleid, mode);
#endif
}

/* 16 replaced pg_namespace_aclcheck by object_aclcheck. */
static inline AclResult
esrc_namespace_aclcheck(Oid nsp, Oid roleid, AclMode mode)
{
#if PG_VERSION_NUM >= 160000
	return object_aclcheck(NamespaceRelationId, nsp, roleid, mode);
#else
	return pg_namespace_aclcheck(nsp, roleid, mode);
#endif
}

/*
 * JSON semantic actions (common/jsonapi.h): 16 made them return a
 * JsonParseErrorType.  Declare an action as
 *	  static ESRC_JSON_ACTION name(void *state, ...) { ...; ESRC_JSON_DONE; }
 */
#if PG_VERSION_NUM >= 160000
#define ESRC_JSON_ACTION	JsonParseErrorType
#define ESRC_JSON_DONE		return JSON_SUCCESS
#else
#define ESRC_JSON_ACTION	void
#define ESRC_JSON_DONE		return
#endif

/*
 * A lexer over a UTF-8 string of len bytes, with de-escaped strings, and
 * its release.  17 lets the caller provide the context (NULL: allocated)
 * and added freeJsonLexContext.
 */
static inline JsonLexContext *
esrc_json_lexer(char *json, int len)
{
#if PG_VERSION_NUM >= 170000
	return makeJsonLexContextCstringLen(NULL, json, len, PG_UTF8, true);
#else
	return makeJsonLexContextCstringLen(json, len, PG_UTF8, true);
#endif
}

static inline void
esrc_json_lexer_free(JsonLexContext *lex)
{
#if PG_VERSION_NUM >= 170000
	freeJsonLexContext(lex);
#else
	if (lex->strval != NULL)
	{
		pfree(lex->strval->data);
		pfree(lex->strval);
	}
	pfree(lex);
#endif
}

/*
 * The idx-th (1-based) entry of this backend's copy of the backends'
 * status (pgstat_fetch_stat_numbackends() entries).  17 renamed
 * pgstat_fetch_stat_local_beentry() to pgstat_get_local_beentry_by_index().
 */
#include "utils/backend_status.h"
#if PG_VERSION_NUM >= 170000
#define esrc_local_beentry(idx)	pgstat_get_local_beentry_by_index(idx)
#else
#define esrc_local_beentry(idx)	pgstat_fetch_stat_local_beentry(idx)
#endif

/*
 * Memory for a GUC check hook's "extra", which the GUC machinery frees:
 * malloc on 15; 16 moved GUC memory into a memory context (guc_malloc,
 * freed with pfree).
 */
#include "utils/guc.h"
#if PG_VERSION_NUM >= 160000
#define esrc_guc_malloc(size)	guc_malloc(LOG, (size))
#else
#define esrc_guc_malloc(size)	malloc(size)
#endif

/*
 * The forwarder's wait for the standbys of esrc.forwarder_standbys
 * (fwdstandby.c): prepare, read the slots, sleep, and done at the end.
 * 17 added WalSndCtl->wal_confirm_rcv_cv, which the walsenders broadcast
 * when a physical slot listed in synchronized_standby_slots advances
 * (PhysicalWakeupLogicalWalSnd): there the worker sleeps on it, with the
 * timeout for slots not listed there.  15 and 16: a latch wait with the
 * timeout, then the slots are read again.
 */
#include "storage/latch.h"
#include "utils/wait_event.h"
#if PG_VERSION_NUM >= 170000
#include "replication/walsender_private.h"
#include "storage/condition_variable.h"

static inline void
esrc_standby_wait_prepare(void)
{
	if (WalSndCtl != NULL)
		ConditionVariablePrepareToSleep(&WalSndCtl->wal_confirm_rcv_cv);
}

static inline void
esrc_standby_wait_sleep(long timeout_ms, uint32 wait_event)
{
	if (WalSndCtl != NULL)
		(void) ConditionVariableTimedSleep(&WalSndCtl->wal_confirm_rcv_cv,
										   timeout_ms, wait_event);
	else
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout_ms, wait_event);
		ResetLatch(MyLatch);
	}
}

static inline void
esrc_standby_wait_done(void)
{
	(void) ConditionVariableCancelSleep();
}
#else
static inline void
esrc_standby_wait_prepare(void)
{
}

static inline void
esrc_standby_wait_sleep(long timeout_ms, uint32 wait_event)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 timeout_ms, wait_event);
	ResetLatch(MyLatch);
}

static inline void
esrc_standby_wait_done(void)
{
}
#endif

/*
 * Would PostgreSQL's DROP ROLE let the current user drop roleid (a
 * superuser if rolsuper)?  Its checks of the caller's rights, without the
 * special roles (current, session, bootstrap user), which the caller
 * leaves to PostgreSQL.  15: CREATEROLE, and superuser for a superuser;
 * 16 also requires the ADMIN option on the role (is_admin_of_role, true for
 * a superuser).
 */
static inline bool
esrc_may_drop_role(Oid roleid, bool rolsuper)
{
	if (!has_createrole_privilege(GetUserId()))
		return false;
	if (rolsuper && !superuser())
		return false;
#if PG_VERSION_NUM >= 160000
	if (!is_admin_of_role(GetUserId(), roleid))
		return false;
#endif
	return true;
}

#endif							/* ESRC_COMPAT_H */
