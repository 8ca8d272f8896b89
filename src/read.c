/*-------------------------------------------------------------------------
 *
 * read.c
 *	  The read path: read_stream(), read_stream_backward(), read_all(),
 *	  read_category() and safe_position().
 *
 * Every read function returns SETOF esrc.event in materialize mode: the
 * query's rows go straight from the executor into the function's
 * tuplestore through a tuplestore DestReceiver, and a tuplestore spills to
 * disk past work_mem, so a read of any size runs in bounded memory.
 *
 * Stream reads use the caller's snapshot rules (a new snapshot per call at
 * READ COMMITTED, the transaction's at REPEATABLE READ and above): versions
 * of one stream are gap-free at commit, so no horizon is needed.
 *
 * Global reads (read_all, read_category) stop at the safe horizon of
 * order.c and then read with a snapshot taken after the horizon was
 * computed, whatever the isolation level: a reader that has seen position
 * P will never later find a newly committed event at a position <= P.
 * They therefore always show the latest settled events, not those of an
 * older transaction snapshot, and never the caller's own uncommitted
 * appends.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tstoreReceiver.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"

#include "esrc.h"

PG_FUNCTION_INFO_V1(esrc_read_stream);
PG_FUNCTION_INFO_V1(esrc_read_stream_backward);
PG_FUNCTION_INFO_V1(esrc_read_all);
PG_FUNCTION_INFO_V1(esrc_read_category);
PG_FUNCTION_INFO_V1(esrc_safe_position_sql);
PG_FUNCTION_INFO_V1(esrc_stream_version);

#define EVENT_COLUMNS \
	"SELECT position, stream, version, type, data, metadata, id, recorded_at" \
	" FROM esrc.events "

typedef enum ReadKind
{
	READ_STREAM,
	READ_STREAM_BACKWARD,
	READ_ALL,
	READ_CATEGORY
} ReadKind;

static SPIPlanPtr read_plans[4];

static const char *const read_sql[4] = {
	EVENT_COLUMNS "WHERE stream = $1 AND version >= $2 ORDER BY version LIMIT $3",
	EVENT_COLUMNS "WHERE stream = $1 AND version <= $2 ORDER BY version DESC LIMIT $3",
	EVENT_COLUMNS "WHERE position > $1 AND position <= $2 ORDER BY position LIMIT $3",
	EVENT_COLUMNS "WHERE category = $4 AND position > $1 AND position <= $2"
	" ORDER BY position LIMIT $3",
};

/* parameter types of the four queries above */
static Oid	read_argtypes[4][4] = {
	{TEXTOID, INT8OID, INT8OID},
	{TEXTOID, INT8OID, INT8OID},
	{INT8OID, INT8OID, INT8OID},
	{INT8OID, INT8OID, INT8OID, TEXTOID},
};
static const int read_nargs[4] = {3, 3, 3, 4};

static void
check_non_negative(const char *what, int64 value)
{
	if (value < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", what),
				 errdetail("The value given was " INT64_FORMAT ".", value)));
}

/*
 * max_count argument: NULL means no limit, otherwise it must be positive.
 */
static void
limit_arg(FunctionCallInfo fcinfo, int argno, Datum *value, char *null)
{
	if (PG_ARGISNULL(argno))
	{
		*value = (Datum) 0;
		*null = 'n';
		return;
	}
	if (PG_GETARG_INT32(argno) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_count must be positive"),
				 errdetail("The value given was %d.", PG_GETARG_INT32(argno)),
				 errhint("Use null for no limit.")));
	*value = Int64GetDatum((int64) PG_GETARG_INT32(argno));
	*null = ' ';
}

/*
 * Run read query "kind" with the given parameters into the function's
 * result tuplestore.  With latest, the query runs under a snapshot taken
 * now (global reads); otherwise SPI picks the snapshot.
 */
static void
run_read(FunctionCallInfo fcinfo, ReadKind kind, Datum *values, char *nulls,
		 bool latest)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DestReceiver *dest;
	SPIExecuteOptions options;
	ParamListInfo params;
	int			nargs = read_nargs[kind];
	int			i;
	int			rc;

	InitMaterializedSRF(fcinfo, 0);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	if (read_plans[kind] == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare_cursor(read_sql[kind], nargs, read_argtypes[kind],
											  CURSOR_OPT_GENERIC_PLAN);

		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		read_plans[kind] = plan;
	}

	params = makeParamList(nargs);
	for (i = 0; i < nargs; i++)
	{
		params->params[i].value = values[i];
		params->params[i].isnull = (nulls[i] == 'n');
		params->params[i].pflags = PARAM_FLAG_CONST;
		params->params[i].ptype = read_argtypes[kind][i];
	}

	dest = CreateDestReceiver(DestTuplestore);
	SetTuplestoreDestReceiverParams(dest, rsinfo->setResult,
									rsinfo->econtext->ecxt_per_query_memory,
									false, NULL, NULL);

	memset(&options, 0, sizeof(options));
	options.params = params;
	options.dest = dest;
	if (latest)
	{
		/* read_only makes SPI use the active snapshot we push */
		options.read_only = true;
		PushActiveSnapshot(GetLatestSnapshot());
	}

	rc = SPI_execute_plan_extended(read_plans[kind], &options);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "event read failed: %s", SPI_result_code_string(rc));

	if (latest)
		PopActiveSnapshot();
	dest->rDestroy(dest);
	SPI_finish();
}

/*
 * esrc.read_stream(stream, from_version DEFAULT 0, max_count DEFAULT NULL)
 */
Datum
esrc_read_stream(PG_FUNCTION_ARGS)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	char	   *stream = esrc_check_name(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
										 "stream name", ESRC_MAX_STREAM_NAME);
	int64		from = PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1);

	check_non_negative("from_version", from);
	values[0] = CStringGetTextDatum(stream);
	values[1] = Int64GetDatum(from);
	limit_arg(fcinfo, 2, &values[2], &nulls[2]);
	run_read(fcinfo, READ_STREAM, values, nulls, false);
	return (Datum) 0;
}

/*
 * esrc.read_stream_backward(stream, from_version DEFAULT NULL, max_count
 * DEFAULT NULL): newest first, starting at from_version (NULL = the end).
 */
Datum
esrc_read_stream_backward(PG_FUNCTION_ARGS)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	char	   *stream = esrc_check_name(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
										 "stream name", ESRC_MAX_STREAM_NAME);
	int64		from = PG_ARGISNULL(1) ? PG_INT64_MAX : PG_GETARG_INT64(1);

	check_non_negative("from_version", from);
	values[0] = CStringGetTextDatum(stream);
	values[1] = Int64GetDatum(from);
	limit_arg(fcinfo, 2, &values[2], &nulls[2]);
	run_read(fcinfo, READ_STREAM_BACKWARD, values, nulls, false);
	return (Datum) 0;
}

static void
global_read(FunctionCallInfo fcinfo, ReadKind kind, text *category)
{
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	int64		after = PG_ARGISNULL(kind == READ_ALL ? 0 : 1) ? 0 :
		PG_GETARG_INT64(kind == READ_ALL ? 0 : 1);

	check_non_negative("after_position", after);
	values[0] = Int64GetDatum(after);
	values[1] = Int64GetDatum(esrc_safe_position(esrc_relation_oid("position_seq")));
	limit_arg(fcinfo, kind == READ_ALL ? 1 : 2, &values[2], &nulls[2]);
	if (kind == READ_CATEGORY)
	{
		char	   *cat = esrc_check_name(category, "category", ESRC_MAX_STREAM_NAME);

		if (strchr(cat, '-') != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("category must not contain \"-\""),
					 errdetail("The category of a stream is the part of its name before the first \"-\".")));
		values[3] = CStringGetTextDatum(cat);
	}
	run_read(fcinfo, kind, values, nulls, true);
}

/*
 * esrc.read_all(after_position DEFAULT 0, max_count DEFAULT 1000)
 */
Datum
esrc_read_all(PG_FUNCTION_ARGS)
{
	global_read(fcinfo, READ_ALL, NULL);
	return (Datum) 0;
}

/*
 * esrc.read_category(category, after_position DEFAULT 0, max_count DEFAULT
 * 1000)
 */
Datum
esrc_read_category(PG_FUNCTION_ARGS)
{
	global_read(fcinfo, READ_CATEGORY, PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	return (Datum) 0;
}

/*
 * esrc.safe_position(): the read horizon; read_all() returns no event
 * beyond it.
 */
Datum
esrc_safe_position_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(esrc_safe_position(esrc_relation_oid("position_seq")));
}

/*
 * esrc.stream_version(stream): the version of the stream's last event, -1
 * for a stream with no events.  In C with a cached generic plan: command
 * handlers call it on every command.  Uses the caller's snapshot rules,
 * like read_stream.
 */
Datum
esrc_stream_version(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	int64		version = -1;
	bool		isnull;
	int			rc;

	values[0] = PointerGetDatum(PG_GETARG_TEXT_PP(0));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (plan == NULL)
	{
		plan = SPI_prepare_cursor("SELECT version FROM esrc.events WHERE stream = $1"
								  " ORDER BY version DESC LIMIT 1",
								  1, argtypes, CURSOR_OPT_GENERIC_PLAN);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
	}
	rc = SPI_execute_plan(plan, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "stream version lookup failed: %s", SPI_result_code_string(rc));
	if (SPI_processed > 0)
		version = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	PG_RETURN_INT64(version);
}
