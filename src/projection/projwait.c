/*-------------------------------------------------------------------------
 *
 * projwait.c
 *	  esrc.wait_for_projection(name, position, timeout): read-your-writes
 *	  for a projection's read model.
 *
 * Waits (subscription/subprogress.c) until the projection's hidden
 * subscription has applied every event of its categories up to position:
 * its workers' batch commits move the checkpoints and wake the wait.  The
 * check runs with a new snapshot, after the commit that satisfied it is
 * visible, so the caller's next statement (READ COMMITTED) sees the
 * projected rows.  Returns 'applied' or 'timeout'; it does not wait in
 * vain: a partition blocked at an event at or below position raises 55000
 * naming the partition, the event and its last error, and so does a paused
 * projection that has not applied position yet (both checked at every
 * wake-up: the worker's failure and esrc.projection_pause note the
 * subscription, so they end a wait in progress at once).  A partition that
 * is retrying is waited for.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "base/base.h"
#include "subscription/subscription.h"

#include "projectionint.h"

PG_FUNCTION_INFO_V1(esrc_wait_for_projection);

typedef struct ProjWaitArg
{
	const char *name;
	int64		id;
	SubDef	   *def;
	int64		position;
} ProjWaitArg;

/* Raise 55000 if a partition is blocked at or below the position, or the projection is paused. */
static void
check_stuck(ProjWaitArg *a)
{
	static const char *sql =
		"SELECT p.paused, x.partition, x.failed_position, x.last_error, x.last_error_sqlstate, x.attempts "
		"FROM esrc.projections p LEFT JOIN esrc.projection_partitions x "
		"ON x.projection_id OPERATOR(pg_catalog.=) p.id AND x.blocked "
		"AND x.failed_position OPERATOR(pg_catalog.<=) $2 "
		"WHERE p.id OPERATOR(pg_catalog.=) $1 ORDER BY x.failed_position LIMIT 1";
	Oid			argtypes[2] = {INT8OID, INT8OID};
	Datum		values[2];
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	bool		paused;

	values[0] = Int64GetDatum(a->id);
	values[1] = Int64GetDatum(a->position);
	catalog_run(sql, 2, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("projection \"%s\" does not exist", a->name),
				 errdetail("It was dropped while the wait was in progress.")));
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	paused = DatumGetBool(SPI_getbinval(tup, desc, 1, &isnull));
	(void) SPI_getbinval(tup, desc, 2, &isnull);
	if (!isnull)
	{
		int32		part = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
		int64		at = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
		char	   *err = SPI_getvalue(tup, desc, 4);
		char	   *state = SPI_getvalue(tup, desc, 5);
		char	   *attempts = SPI_getvalue(tup, desc, 6);

		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("projection \"%s\" is blocked at position " INT64_FORMAT " in partition %d",
						a->name, at, part),
				 errdetail("The partition failed %s times at that event; its last error (SQLSTATE %s): %s",
						   attempts ? attempts : "?", state ? state : "none", err ? err : "none"),
				 errhint("Fix the handler or the data, then call esrc.projection_resume('%s'), or skip the event with esrc.projection_skip('%s', " INT64_FORMAT ", reason).",
						 a->name, a->name, at)));
	}
	if (paused)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("projection \"%s\" is paused", a->name),
				 errdetail("It has not applied every event up to position " INT64_FORMAT ", and takes no batch while paused.",
						   a->position),
				 errhint("Call esrc.projection_resume('%s').", a->name)));
	SPI_freetuptable(SPI_tuptable);
}

static bool
proj_check(void *arg, bool *horizon_short)
{
	ProjWaitArg *a = (ProjWaitArg *) arg;

	if (esrc_sub_applied_upto(a->def, a->position, horizon_short))
		return true;
	check_stuck(a);
	return false;
}

/* The projection called name (SPI connected): its id and subscription. */
static void
lookup(ProjWaitArg *a)
{
	static const char *sql =
		"SELECT id, subscription_id FROM esrc.projections WHERE name OPERATOR(pg_catalog.=) $1";
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	int64		subid;

	values[0] = CStringGetTextDatum(a->name);
	catalog_run(sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("projection \"%s\" does not exist", a->name)));
	a->id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	subid = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	SPI_freetuptable(SPI_tuptable);
	a->def = esrc_sub_lookup_id(subid, CurrentMemoryContext);
	if (a->def == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("projection \"%s\" does not exist", a->name)));
}

/*
 * esrc.wait_for_projection(name, position, timeout DEFAULT '5s'): 'applied'
 * once projection name has applied every event of its categories up to
 * position, 'timeout' when timeout passed first; 55000 for a partition
 * blocked at or below position, or a paused projection behind position.
 * Needs esrc_reader (EXECUTE), as projection_status does.
 */
Datum
esrc_wait_for_projection(PG_FUNCTION_ARGS)
{
	ProjWaitArg a;
	long		timeout_ms;
	bool		done;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("esrc.wait_for_projection(): name must not be null")));
	a.name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	timeout_ms = esrc_progress_wait_args(fcinfo, "esrc.wait_for_projection()", &a.position);
	SPI_connect();
	lookup(&a);
	done = esrc_progress_wait(a.def, timeout_ms, proj_check, &a);
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(done ? "applied" : "timeout"));
}
