/*-------------------------------------------------------------------------
 *
 * projection.c
 *	  Projections as SQL sees them: create/drop_projection,
 *	  projection_pause/resume/skip, reset_projection, the event trigger that
 *	  keeps their functions from being dropped or renamed, the append-only
 *	  trigger of esrc.projection_skips, the settings, and the context a
 *	  handler runs in.
 *
 * A projection is a row of esrc.projections plus a subscription named
 * "projection:<name>" (subcatalog.c), which holds its partitions'
 * checkpoints and which only the workers poll.  Background workers
 * (projlauncher.c, projworker.c) call its handler for every event after
 * the checkpoints, each batch and the checkpoint advance in one
 * transaction.  Changes made here wake the database's workers when the
 * transaction commits (esrc_projection_wake), so that a new or resumed
 * projection starts at once.
 *
 * Handlers run as the projection's owner, security-restricted, with
 * search_path pinned to pg_catalog, pg_temp and every setting they make
 * undone after each call: the rules of snapshot reducers.  Handlers are
 * kept by identity (schema.name(argtypes)), as reducers are, so that
 * pg_dump and pg_upgrade keep them; the event trigger projections_guard
 * refuses to drop or rename one while a projection uses it.
 *
 * The owner must be allowed to read every event of the log whenever its
 * handler would get events (logaccess.c): create_projection,
 * projection_resume and reset_projection refuse (42501) when it may not,
 * and the workers check it at every batch (esrc_projection_owner_reads),
 * pausing the projection with the reason in its partitions' last_error.
 * A SECURITY DEFINER handler runs as its own owner, whose right is checked
 * the same way (handler_role).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/event_trigger.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

#include "base/base.h"
#include "log/log.h"
#include "lifecycle/lifecycle.h"
#include "subscription/subscription.h"
#include "projection/projection.h"
#include "owners.h"
#include "projectionint.h"

#define PROJECTION_NAME_MAX	(ESRC_MAX_MEMBER_NAME - (int) sizeof(ESRC_PROJECTION_SUB_PREFIX) + 1)

/* GUC variables */
int			esrc_projection_workers = 1;
int			esrc_projection_max_attempts = 5;
int			esrc_projection_retry_delay_ms = 1000;
int			esrc_projection_retry_max_delay_ms = 60000;

/*
 * The projection whose handler this backend (a projection worker) is
 * calling, 0 when none: set around the calls by projworker.c.  A handler
 * may not drop or reset its own projection (refuse_own_projection).
 */
int64		esrc_running_projection = 0;

PG_FUNCTION_INFO_V1(esrc_create_projection);
PG_FUNCTION_INFO_V1(esrc_drop_projection);
PG_FUNCTION_INFO_V1(esrc_projection_pause);
PG_FUNCTION_INFO_V1(esrc_projection_resume);
PG_FUNCTION_INFO_V1(esrc_projection_skip);
PG_FUNCTION_INFO_V1(esrc_reset_projection);
PG_FUNCTION_INFO_V1(esrc_projections_guard);
PG_FUNCTION_INFO_V1(esrc_projection_skips_immutable);

static bool wake_at_commit = false;
static bool xact_callback_set = false;
static object_access_hook_type prev_object_access_hook = NULL;

static void wake_workers_at_commit(void);

/* DROP EXTENSION esrc: the database's workers are to leave at commit. */
static void
projection_object_access(ObjectAccessType access, Oid classId, Oid objectId,
						 int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access == OAT_DROP && classId == ExtensionRelationId &&
		objectId == get_extension_oid("esrc", true))
		wake_workers_at_commit();
}

void
esrc_projection_init(void)
{
	/* the projection workers run the scavenger (scavenge.c) */
	esrc_scavenger_wake_hook = esrc_projection_wake_at_commit;

	DefineCustomIntVariable("esrc.projection_workers",
							"Background workers that run projections, per database that has projections.",
							"0 runs none. Partitions of every projection are spread over the workers of its database.",
							&esrc_projection_workers,
							1, 0, 64,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("esrc.projection_max_attempts",
							"Failed calls of a projection handler on one event before its partition is blocked at that event.",
							NULL,
							&esrc_projection_max_attempts,
							5, 1, 1000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("esrc.projection_retry_delay",
							"Wait before the first retry of an event whose projection handler failed; it doubles at each retry.",
							NULL,
							&esrc_projection_retry_delay_ms,
							1000, 0, INT_MAX / 2,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("esrc.projection_retry_max_delay",
							"Longest wait between two retries of a failing projection handler.",
							NULL,
							&esrc_projection_retry_max_delay_ms,
							60000, 0, INT_MAX / 2,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	esrc_projection_pace_init();
	esrc_projection_register_launcher();
	prev_object_access_hook = object_access_hook;
	object_access_hook = projection_object_access;
}

/* ----------------------------------------------------------------
 * Handlers
 * ----------------------------------------------------------------
 */

/*
 * Why funcoid cannot be a handler (or, with reset, a reset function), or
 * NULL if it can.
 */
const char *
esrc_handler_problem(Oid funcoid, bool reset)
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
	else if (reset && p->pronargs != 0)
		problem = "takes arguments";
	else if (!reset && (p->pronargs != 1 ||
						(p->proargtypes.values[0] != esrc_event_type_oid() &&
						 p->proargtypes.values[0] != get_array_type(esrc_event_type_oid()))))
		problem = "does not take one argument of type esrc.event or esrc.event[]";
	else if (p->prorettype != VOIDOID)
		problem = "does not return void";
	ReleaseSysCache(tp);
	return problem;
}

static char *
check_function(Oid funcoid, bool reset, Oid owner)
{
	const char *problem = esrc_handler_problem(funcoid, reset);

	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_FUNCTION_DEFINITION),
				 errmsg(reset ? "function %s cannot be a projection reset function" :
						"function %s cannot be a projection handler", format_procedure(funcoid)),
				 errdetail(reset ? "A reset function has the signature () RETURNS void; this function %s." :
						   "A handler has the signature (event esrc.event) RETURNS void, or (events esrc.event[]) RETURNS void for batches; this function %s.",
						   problem)));
	if (esrc_proc_aclcheck(funcoid, owner, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for function %s", format_procedure(funcoid)),
				 errdetail("The projection's owner runs it, and needs EXECUTE on it.")));
	return format_procedure_qualified(funcoid);
}

/*
 * Call flinfo's function with one argument (nargs 1) or none, as owner,
 * in the owner context (ownerctx.c: security-restricted, search_path
 * pinned); every setting the call makes is undone after it.  On error the
 * caller's (sub)transaction abort restores the user and the settings.
 * The workers pin search_path for good (projworker.c), so a call there
 * costs no search_path change.
 */
void
esrc_call_as_owner(Oid owner, FmgrInfo *flinfo, int nargs, Datum arg)
{
	LOCAL_FCINFO(fcinfo, 1);
	EsrcOwnerContext ctx;

	esrc_owner_enter(&ctx, owner, ESRC_OWNER_PIN_PATH);
	InitFunctionCallInfoData(*fcinfo, flinfo, nargs, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = arg;
	fcinfo->args[0].isnull = false;
	(void) FunctionCallInvoke(fcinfo);
	esrc_owner_leave(&ctx);
}

/* ----------------------------------------------------------------
 * The catalog
 * ----------------------------------------------------------------
 */

static void
projection_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT && wake_at_commit)
		esrc_projection_wake(MyDatabaseId);
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
		wake_at_commit = false;
}

/*
 * Wake the database's projection workers when this transaction commits;
 * rules.c asks it for the scavenger (worker 1 of a database whose workers
 * left, having had nothing to do there).
 */
void
esrc_projection_wake_at_commit(void)
{
	wake_workers_at_commit();
}

/* Wake the database's projection workers when this transaction commits. */
static void
wake_workers_at_commit(void)
{
	if (!xact_callback_set)
	{
		RegisterXactCallback(projection_xact_callback, NULL);
		xact_callback_set = true;
	}
	wake_at_commit = true;
}

typedef struct ProjDef
{
	int64		id;
	char	   *name;
	Oid			owner;
	int64		subscription_id;
	int64		start_position;
	char	   *reset_function;	/* NULL = none */
	Oid			handler;		/* InvalidOid: not found */
} ProjDef;

static char *
projection_name_arg(FunctionCallInfo fcinfo, int argno)
{
	return esrc_check_name(PG_ARGISNULL(argno) ? NULL : PG_GETARG_TEXT_PP(argno),
						   "projection name", PROJECTION_NAME_MAX);
}

/* The projection called name (SPI connected); checks ownership. */
static ProjDef *
lookup_projection(const char *name)
{
	static const char *sql =
		"SELECT id, owner, subscription_id, start_position, reset_function, "
		"pg_catalog.to_regprocedure(handler) "
		"FROM esrc.projections WHERE name OPERATOR(pg_catalog.=) $1";
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	ProjDef    *def;
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	Datum		d;

	values[0] = CStringGetTextDatum(name);
	catalog_run(sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("projection \"%s\" does not exist", name)));
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	def = palloc0(sizeof(ProjDef));
	def->name = pstrdup(name);
	def->id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	def->owner = DatumGetObjectId(SPI_getbinval(tup, desc, 2, &isnull));
	def->subscription_id = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
	def->start_position = DatumGetInt64(SPI_getbinval(tup, desc, 4, &isnull));
	d = SPI_getbinval(tup, desc, 5, &isnull);
	def->reset_function = isnull ? NULL : TextDatumGetCString(d);
	d = SPI_getbinval(tup, desc, 6, &isnull);
	def->handler = isnull ? InvalidOid : DatumGetObjectId(d);
	SPI_freetuptable(SPI_tuptable);

	if (!has_privs_of_role(GetUserId(), def->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of projection \"%s\"", name),
				 errdetail("Only members of the projection's owner role can drop, pause, resume, skip or reset it.")));
	return def;
}

/* The first sentence of a 42501 about the owner's right to read the log. */
static char *
owner_reads_why(const char *name)
{
	return psprintf("The handler of projection \"%s\" runs as its owner and is given the events of its categories.",
					name);
}

/*
 * The role the handler runs as, when it is not the owner: a SECURITY
 * DEFINER handler's own owner (logaccess.c); InvalidOid otherwise.
 */
static Oid
handler_role(Oid handler, Oid owner)
{
	Oid			role = esrc_function_runs_as(handler, owner);

	return role != owner ? role : InvalidOid;
}

/* The first sentence of a 42501 about a SECURITY DEFINER handler's owner. */
static char *
definer_reads_why(const char *name)
{
	return psprintf("The handler of projection \"%s\" is SECURITY DEFINER: it runs as its own owner and is given the events of its categories.",
					name);
}

/*
 * Refuse (42501) unless the owner of projection name, and the owner of its
 * handler if that is SECURITY DEFINER, may read the log now.  why: the
 * owner's sentence.
 */
static void
check_projection_reads(Oid owner, Oid handler, const char *name, const char *why)
{
	Oid			definer = handler_role(handler, owner);

	esrc_check_log_readable(owner, why);
	if (OidIsValid(definer))
		esrc_check_log_readable(definer, definer_reads_why(name));
}

/*
 * At the start of every batch (projworker.c, in the batch's transaction,
 * SPI connected): may the owner of projection id, and the role its
 * handler runs as (handler_role), read the log now?  If not, the
 * projection is paused and every partition records why (42501 in
 * last_error_sqlstate), once, with a LOG line; the worker then takes no
 * batch of it, so its handler gets no event.  esrc.projection_resume,
 * after the right is given back, lets it go on from its checkpoints.
 */
bool
esrc_projection_owner_reads(int64 id, const char *name, Oid owner, Oid handler)
{
	static const char *pause_sql =
		"UPDATE esrc.projections SET paused = true "
		"WHERE id OPERATOR(pg_catalog.=) $1 AND NOT paused";
	static const char *error_sql =
		"UPDATE esrc.projection_partitions SET last_error = $2, "
		"last_error_sqlstate = '42501', last_error_at = pg_catalog.now() "
		"WHERE projection_id OPERATOR(pg_catalog.=) $1";
	EsrcLogAccess access = esrc_log_access(owner);
	Oid			role = owner;
	Oid			argtypes[2] = {INT8OID, TEXTOID};
	Datum		values[2];
	char	   *error;
	const char *oname;

	if (access == ESRC_LOG_READABLE)
	{
		role = handler_role(handler, owner);
		if (!OidIsValid(role))
			return true;
		access = esrc_log_access(role);
		if (access == ESRC_LOG_READABLE)
			return true;
	}
	oname = GetUserNameFromId(role, true);
	if (oname == NULL)
		oname = psprintf("%u", role);	/* a dropped role */
	values[0] = Int64GetDatum(id);
	catalog_run(pause_sql, 1, argtypes, values, NULL, SPI_OK_UPDATE);
	if (SPI_processed == 0)
		return false;			/* paused already (by another worker) */
	error = psprintf("projection paused: role \"%s\", %s, may not read esrc.events. %s %s Then call esrc.projection_resume(%s).",
					 oname,
					 role == owner ? "its owner" : "which its SECURITY DEFINER handler runs as",
					 esrc_log_access_problem(role, access),
					 esrc_log_access_fix(role, access), quote_literal_cstr(name));
	values[1] = CStringGetTextDatum(error);
	catalog_run(error_sql, 2, argtypes, values, NULL, SPI_OK_UPDATE);
	ereport(LOG,
			(errmsg("projection \"%s\": %s", name, error)));
	return false;
}

/*
 * A handler that drops or resets its own projection would delete or move
 * the checkpoints that the worker's batch moves at its end: the batch
 * would fail there, outside the handler, and run again for ever.  Refused,
 * so that it is a failure of the handler at that event (counted, blocked,
 * skippable).  Another projection's handler may.
 */
static void
refuse_own_projection(ProjDef *def, const char *what)
{
	if (esrc_running_projection != def->id)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_IN_USE),
			 errmsg("cannot %s projection \"%s\" from its own handler", what, def->name),
			 errdetail("The projection's worker is applying a batch of it, and moves its checkpoints when the handler returns."),
			 errhint("Call esrc.%s_projection from a session; the handler may call esrc.projection_pause.",
					 what)));
}

/*
 * esrc.create_projection(name, handler, categories, partitions,
 * batch_size, start, reset_function, if_not_exists, erase_from,
 * erase_column)
 */
Datum
esrc_create_projection(PG_FUNCTION_ARGS)
{
	static const char *exists_sql =
		"SELECT 1 FROM esrc.projections WHERE name OPERATOR(pg_catalog.=) $1";
	static const char *insert_sql =
		"INSERT INTO esrc.projections (name, owner, handler, reset_function, subscription_id, "
		"batch_size, start_position) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id";
	static const char *parts_sql =
		"INSERT INTO esrc.projection_partitions (projection_id, partition) "
		"SELECT $1, p FROM pg_catalog.generate_series(0, $2 OPERATOR(pg_catalog.-) 1) AS p";
	char	   *name;
	ArrayType  *cats;
	Oid			owner = GetUserId();
	char	   *handler;
	char	   *reset = NULL;
	int32		partitions;
	int32		batch_size;
	char	   *start;
	int64		checkpoint;
	int64		subid;
	int64		id;
	Oid			argtypes[7] = {TEXTOID, OIDOID, TEXTOID, TEXTOID, INT8OID, INT4OID, INT8OID};
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	Oid			pargtypes[2] = {INT8OID, INT4OID};
	Datum		pvalues[2];
	bool		isnull;

	/* PG_NARGS: the 0.2.0 SQL function, before ALTER EXTENSION UPDATE, has 7 */
	bool		if_not_exists = PG_NARGS() > 7 && !PG_ARGISNULL(7) && PG_GETARG_BOOL(7);
	char	   *erase_column;
	ArrayType  *erase_from;

	PreventCommandIfReadOnly("esrc.create_projection()");
	name = projection_name_arg(fcinfo, 0);
	cats = check_name_array(fcinfo, 2, "categories", ESRC_MAX_STREAM_NAME,
							ESRC_MAX_SUB_CATEGORIES, true);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("handler must not be null")));
	if (PG_ARGISNULL(3) || PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", PG_ARGISNULL(3) ? "partitions" : "batch_size")));
	partitions = PG_GETARG_INT32(3);
	check_partitions(partitions);
	batch_size = PG_GETARG_INT32(4);
	if (batch_size < 1 || batch_size > 10000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch_size must be between 1 and 10000"),
				 errdetail("The value given was %d.", batch_size)));
	if (!has_privs_of_role(owner, role_oid("esrc_subscriber")) ||
		!has_privs_of_role(owner, role_oid("esrc_reader")))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to create projection \"%s\"", name),
				 errdetail("Creating projections needs the privileges of esrc_subscriber and esrc_reader.")));
	esrc_check_log_readable(owner, owner_reads_why(name));
	handler = check_function(PG_GETARG_OID(1), false, owner);
	/* a SECURITY DEFINER handler's own owner (the owner's check is above) */
	check_projection_reads(owner, PG_GETARG_OID(1), name, owner_reads_why(name));
	if (!PG_ARGISNULL(6))
		reset = check_function(PG_GETARG_OID(6), true, owner);
	start = PG_ARGISNULL(5) ? "beginning" : text_to_cstring(PG_GETARG_TEXT_PP(5));
	erase_from = esrc_projection_erase_check(fcinfo, 8, 9, owner, &erase_column);

	SPI_connect();
	esrc_lock_subscription_name(psprintf("%s%s", ESRC_PROJECTION_SUB_PREFIX, name));
	if (if_not_exists &&
		(id = esrc_projection_declared(name, handler, reset, batch_size, cats, partitions,
									   erase_from, erase_column)) > 0)
	{
		SPI_finish();
		PG_RETURN_INT64(id);
	}
	values[0] = CStringGetTextDatum(name);
	catalog_run(exists_sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("projection \"%s\" already exists", name)));
	checkpoint = subscription_start_position(start, cats);
	subid = subscription_insert(psprintf("%s%s", ESRC_PROJECTION_SUB_PREFIX, name),
								owner, cats, partitions, checkpoint, true);

	values[1] = ObjectIdGetDatum(owner);
	values[2] = CStringGetTextDatum(handler);
	values[3] = reset ? CStringGetTextDatum(reset) : (Datum) 0;
	nulls[3] = reset ? ' ' : 'n';
	values[4] = Int64GetDatum(subid);
	values[5] = Int32GetDatum(batch_size);
	values[6] = Int64GetDatum(checkpoint);
	catalog_run(insert_sql, 7, argtypes, values, nulls, SPI_OK_INSERT_RETURNING);
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	pvalues[0] = Int64GetDatum(id);
	pvalues[1] = Int32GetDatum(partitions);
	catalog_run(parts_sql, 2, pargtypes, pvalues, NULL, SPI_OK_INSERT);
	if (erase_from != NULL)
		esrc_projection_set_erase(id, erase_from, erase_column);
	SPI_finish();
	esrc_warn_unqualified_names(PG_GETARG_OID(1), psprintf("The handler of projection \"%s\"", name));
	wake_workers_at_commit();
	PG_RETURN_INT64(id);
}

/* esrc.drop_projection(name) */
Datum
esrc_drop_projection(PG_FUNCTION_ARGS)
{
	/*
	 * The checkpoints first: a worker's batch updates its checkpoints, then
	 * the applied counters of esrc.projection_partitions.  Deleting the
	 * projection first (its partitions by cascade) and then the
	 * subscription (its checkpoints by cascade) took the two in the
	 * opposite order, and a batch committing at that moment deadlocked
	 * with the drop (seen once in run-37 on PostgreSQL 17).
	 */
	static const char *drop_checkpoints_sql =
		"DELETE FROM esrc.subscription_checkpoints WHERE subscription_id OPERATOR(pg_catalog.=) $1";
	static const char *drop_sql =
		"DELETE FROM esrc.projections WHERE id OPERATOR(pg_catalog.=) $1";
	static const char *drop_sub_sql =
		"DELETE FROM esrc.subscriptions WHERE id OPERATOR(pg_catalog.=) $1";
	char	   *name;
	ProjDef    *def;
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1];
	EsrcSubKey	key;

	PreventCommandIfReadOnly("esrc.drop_projection()");
	name = projection_name_arg(fcinfo, 0);
	SPI_connect();
	def = lookup_projection(name);
	refuse_own_projection(def, "drop");
	values[0] = Int64GetDatum(def->subscription_id);
	catalog_run(drop_checkpoints_sql, 1, argtypes, values, NULL, SPI_OK_DELETE);
	values[0] = Int64GetDatum(def->id);
	catalog_run(drop_sql, 1, argtypes, values, NULL, SPI_OK_DELETE);
	values[0] = Int64GetDatum(def->subscription_id);
	catalog_run(drop_sub_sql, 1, argtypes, values, NULL, SPI_OK_DELETE);
	key.dbid = MyDatabaseId;
	key.catalog = esrc_relation_oid("subscriptions");
	key.id = def->subscription_id;
	SPI_finish();
	/* ids are never reused: leases of a dropped subscription are inert */
	esrc_lease_forget(&key);
	wake_workers_at_commit();
	PG_RETURN_VOID();
}

static void
set_paused(FunctionCallInfo fcinfo, bool paused)
{
	static const char *pause_sql =
		"UPDATE esrc.projections SET paused = $2 WHERE id OPERATOR(pg_catalog.=) $1";
	static const char *unblock_sql =
		"UPDATE esrc.projection_partitions SET blocked = false, retry_at = pg_catalog.now() "
		"WHERE projection_id OPERATOR(pg_catalog.=) $1 AND failed_position IS NOT NULL";
	/* the reason of a pause by esrc_projection_owner_reads is over */
	static const char *clear_sql =
		"UPDATE esrc.projection_partitions SET last_error = NULL, last_error_sqlstate = NULL, "
		"last_error_at = NULL WHERE projection_id OPERATOR(pg_catalog.=) $1 "
		"AND failed_position IS NULL AND last_error_sqlstate OPERATOR(pg_catalog.=) '42501' "
		"AND last_error OPERATOR(pg_catalog.^@) 'projection paused: '";
	char	   *name;
	ProjDef    *def;
	Oid			argtypes[2] = {INT8OID, BOOLOID};
	Datum		values[2];

	PreventCommandIfReadOnly(paused ? "esrc.projection_pause()" : "esrc.projection_resume()");
	name = projection_name_arg(fcinfo, 0);
	SPI_connect();
	def = lookup_projection(name);
	if (!paused)
	{
		esrc_check_owner_exists(def->owner, "projection", name);
		check_projection_reads(def->owner, def->handler, name, owner_reads_why(name));
	}
	values[0] = Int64GetDatum(def->id);
	values[1] = BoolGetDatum(paused);
	catalog_run(pause_sql, 2, argtypes, values, NULL, SPI_OK_UPDATE);
	if (!paused)
	{
		catalog_run(unblock_sql, 1, argtypes, values, NULL, SPI_OK_UPDATE);
		catalog_run(clear_sql, 1, argtypes, values, NULL, SPI_OK_UPDATE);
	}
	SPI_finish();
	wake_workers_at_commit();
	/* a wait for it learns of the pause at commit (projwait.c) */
	esrc_sub_progress_at_commit(def->subscription_id);
}

/* esrc.projection_pause(name) */
Datum
esrc_projection_pause(PG_FUNCTION_ARGS)
{
	set_paused(fcinfo, true);
	PG_RETURN_VOID();
}

/* esrc.projection_resume(name): also retries blocked partitions at once */
Datum
esrc_projection_resume(PG_FUNCTION_ARGS)
{
	set_paused(fcinfo, false);
	PG_RETURN_VOID();
}

/* esrc.projection_skip(name, position, reason) */
Datum
esrc_projection_skip(PG_FUNCTION_ARGS)
{
	static const char *find_sql =
		"SELECT partition, last_error FROM esrc.projection_partitions "
		"WHERE projection_id OPERATOR(pg_catalog.=) $1 "
		"AND failed_position OPERATOR(pg_catalog.=) $2 FOR UPDATE";
	static const char *where_sql =
		"SELECT pg_catalog.string_agg(pg_catalog.format('partition %s at %s', partition, failed_position), ', ' "
		"ORDER BY partition) FROM esrc.projection_partitions "
		"WHERE projection_id OPERATOR(pg_catalog.=) $1 AND failed_position IS NOT NULL";
	static const char *record_sql =
		"INSERT INTO esrc.projection_skips (projection, partition, \"position\", stream, version, "
		"type, event_id, reason, last_error, skipped_by) "
		"SELECT $3, $4, e.position, e.stream, e.version, e.type, e.id, $5, $6, $7 "
		"FROM esrc.events e WHERE e.position OPERATOR(pg_catalog.=) $2";
	static const char *move_sql =
		"UPDATE esrc.subscription_checkpoints SET checkpoint = $3, acked_at = pg_catalog.now() "
		"WHERE subscription_id OPERATOR(pg_catalog.=) $1 AND partition OPERATOR(pg_catalog.=) $2 "
		"AND checkpoint OPERATOR(pg_catalog.<) $3";
	static const char *clear_sql =
		"UPDATE esrc.projection_partitions SET failed_position = NULL, blocked = false, "
		"attempts = 0, retry_at = NULL "
		"WHERE projection_id OPERATOR(pg_catalog.=) $1 AND partition OPERATOR(pg_catalog.=) $2";
	char	   *name;
	ProjDef    *def;
	int64		position;
	char	   *reason;
	int32		partition;
	Datum		last_error;
	bool		error_null;
	Oid			argtypes[7] = {INT8OID, INT8OID, TEXTOID, INT4OID, TEXTOID, TEXTOID, NAMEOID};
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	bool		isnull;

	PreventCommandIfReadOnly("esrc.projection_skip()");
	name = projection_name_arg(fcinfo, 0);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("position must not be null")));
	position = PG_GETARG_INT64(1);
	if (PG_ARGISNULL(2) || VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(2)) == 0)
		ereport(ERROR,
				(errcode(PG_ARGISNULL(2) ? ERRCODE_NULL_VALUE_NOT_ALLOWED : ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("reason must not be %s", PG_ARGISNULL(2) ? "null" : "empty"),
				 errhint("Say why the event is skipped; it is recorded in esrc.projection_skips.")));
	reason = text_to_cstring(PG_GETARG_TEXT_PP(2));

	SPI_connect();
	def = lookup_projection(name);
	values[0] = Int64GetDatum(def->id);
	values[1] = Int64GetDatum(position);
	catalog_run(find_sql, 2, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
	{
		char	   *where;

		catalog_run(where_sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
		where = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("no partition of projection \"%s\" is stopped at position " INT64_FORMAT,
						name, position),
				 where ? errdetail("Failing events: %s.", where) :
				 errdetail("No event of the projection is failing."),
				 errhint("Skip the position that esrc.projection_status shows as blocked_position.")));
	}
	partition = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	last_error = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &error_null);
	if (!error_null)
		last_error = PointerGetDatum(DatumGetTextPCopy(last_error));

	values[2] = CStringGetTextDatum(name);
	values[3] = Int32GetDatum(partition);
	values[4] = CStringGetTextDatum(reason);
	values[5] = last_error;
	nulls[5] = error_null ? 'n' : ' ';
	values[6] = DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(GetUserId(), false)));
	catalog_run(record_sql, 7, argtypes, values, nulls, SPI_OK_INSERT);
	{
		Oid			margtypes[3] = {INT8OID, INT4OID, INT8OID};
		Datum		mvalues[3];

		mvalues[0] = Int64GetDatum(def->subscription_id);
		mvalues[1] = Int32GetDatum(partition);
		mvalues[2] = Int64GetDatum(position);
		catalog_run(move_sql, 3, margtypes, mvalues, NULL, SPI_OK_UPDATE);
		esrc_sub_progress_at_commit(def->subscription_id);
		mvalues[0] = Int64GetDatum(def->id);
		catalog_run(clear_sql, 2, margtypes, mvalues, NULL, SPI_OK_UPDATE);
	}
	SPI_finish();
	wake_workers_at_commit();
	PG_RETURN_VOID();
}

/* esrc.reset_projection(name) */
Datum
esrc_reset_projection(PG_FUNCTION_ARGS)
{
	static const char *cps_sql =
		"UPDATE esrc.subscription_checkpoints SET checkpoint = $2, acked_at = NULL "
		"WHERE subscription_id OPERATOR(pg_catalog.=) $1";
	static const char *parts_sql =
		"UPDATE esrc.projection_partitions SET applied = 0, attempts = 0, failed_position = NULL, "
		"blocked = false, last_error = NULL, last_error_sqlstate = NULL, last_error_at = NULL, "
		"retry_at = NULL WHERE projection_id OPERATOR(pg_catalog.=) $1";
	char	   *name;
	ProjDef    *def;
	Oid			argtypes[2] = {INT8OID, INT8OID};
	Datum		values[2];

	PreventCommandIfReadOnly("esrc.reset_projection()");
	name = projection_name_arg(fcinfo, 0);
	SPI_connect();
	def = lookup_projection(name);
	refuse_own_projection(def, "reset");
	esrc_check_owner_exists(def->owner, "projection", name);
	check_projection_reads(def->owner, def->handler, name,
						   psprintf("esrc.reset_projection replays the log to the handler of projection \"%s\", which runs as its owner.",
									name));
	if (def->reset_function != NULL)
	{
		Oid			funcoid = esrc_lookup_function(def->reset_function);
		FmgrInfo	flinfo;

		if (!OidIsValid(funcoid))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_FUNCTION),
					 errmsg("reset function %s of projection \"%s\" does not exist",
							def->reset_function, name)));
		(void) check_function(funcoid, true, def->owner);
		fmgr_info(funcoid, &flinfo);
		esrc_call_as_owner(def->owner, &flinfo, 0, (Datum) 0);
		CommandCounterIncrement();
	}
	values[0] = Int64GetDatum(def->subscription_id);
	values[1] = Int64GetDatum(def->start_position);
	catalog_run(cps_sql, 2, argtypes, values, NULL, SPI_OK_UPDATE);
	values[0] = Int64GetDatum(def->id);
	catalog_run(parts_sql, 1, argtypes, values, NULL, SPI_OK_UPDATE);
	SPI_finish();
	wake_workers_at_commit();
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 * Triggers
 * ----------------------------------------------------------------
 */

/*
 * Event trigger on sql_drop and on ALTER FUNCTION/ROUTINE/SCHEMA: a
 * function that a projection calls must still be found under its
 * identity, or the command fails.
 */
Datum
esrc_projections_guard(PG_FUNCTION_ARGS)
{
	static const char *sql =
		"SELECT name, handler, reset_function FROM esrc.projections "
		"WHERE pg_catalog.to_regprocedure(handler) IS NULL "
		"OR (reset_function IS NOT NULL AND pg_catalog.to_regprocedure(reset_function) IS NULL) "
		"ORDER BY name LIMIT 1";
	EventTriggerData *trigdata = (EventTriggerData *) fcinfo->context;
	Oid			nsp;
	bool		drop;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("esrc.projections_guard() must be called as an event trigger")));
	drop = strcmp(trigdata->event, "sql_drop") == 0;
	if (!drop && strcmp(GetCommandTagName(trigdata->tag), "CREATE FUNCTION") == 0)
	{
		/* maybe a fixed handler: blocked partitions retry (projworker.c) */
		wake_workers_at_commit();
		PG_RETURN_NULL();
	}
	/* DROP EXTENSION esrc (or of its schema): nothing left to guard */
	nsp = get_namespace_oid("esrc", true);
	if (!OidIsValid(nsp) || !OidIsValid(get_relname_relid("projections", nsp)))
		PG_RETURN_NULL();

	SPI_connect();
	catalog_run(sql, 0, NULL, NULL, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *pname = SPI_getvalue(tup, desc, 1);
		char	   *handler = SPI_getvalue(tup, desc, 2);
		char	   *reset = SPI_getvalue(tup, desc, 3);
		char	   *func = (OidIsValid(esrc_lookup_function(handler)) && reset) ? reset : handler;

		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg(drop ? "cannot drop function %s because projection \"%s\" uses it" :
						"cannot rename function %s because projection \"%s\" uses it",
						func, pname),
				 errdetail("Projections keep their handler and reset function by name."),
				 errhint("Drop the projection first (esrc.drop_projection), or create it again with another function.")));
	}
	SPI_finish();
	PG_RETURN_NULL();
}

/* Trigger of esrc.projection_skips: the record of skips is append-only. */
Datum
esrc_projection_skips_immutable(PG_FUNCTION_ARGS)
{
	esrc_refuse_change(fcinfo, "esrc.projection_skips_immutable", "esrc.projection_skips",
					   "skipped events", NULL);
}
