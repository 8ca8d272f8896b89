/*-------------------------------------------------------------------------
 *
 * read.c
 *	  The read path: read_stream(), read_stream_backward(), read_all(),
 *	  read_category(), stream_version() and safe_position(), over the index
 *	  scans of the event log in logscan.c.
 *
 * No SQL runs here.  Every read is an index scan of esrc.events on the
 * index that matches it, with the index's own operators, as append.c's
 * lookups are: (stream, version) for stream reads, the primary key for
 * read_all, (category, position) for read_category.  A cached SQL plan
 * would be chosen once for all parameter values, and a generic plan of
 * "category = $4 AND position > $1 ..." picked the primary key with a
 * filter, so that a read of a small category scanned the whole log; an
 * index scan chosen here costs what the rows it returns cost, whatever
 * the size of the log.  The caller needs SELECT on esrc.events, checked
 * here as the executor would (logaccess.c); row-level security on
 * esrc.events is refused rather than bypassed.
 *
 * Every read function returns SETOF esrc.event in materialize mode: rows
 * go from the scan into the function's tuplestore, which spills to disk
 * past work_mem, so a read of any size runs in bounded memory.
 *
 * Stream reads use the caller's snapshot rules (a new snapshot per call at
 * READ COMMITTED, the transaction's at REPEATABLE READ and above), as a
 * new SQL statement would: versions of one stream are gap-free at commit,
 * so no horizon is needed.
 *
 * Global reads (read_all, read_category) stop at the safe horizon of
 * order.c (read_category at the horizon of its category, which appends in
 * flight to other categories do not hold back) and then read with a snapshot taken after the horizon was
 * computed, whatever the isolation level: a reader that has seen position
 * P will never later find a newly committed event at a position <= P.
 * They therefore always show the latest settled events, not those of an
 * older transaction snapshot, and never the caller's own uncommitted
 * appends.
 *
 * The stream rules (rules.c) hide events: a stream read starts at the
 * stream's first visible version, a global read skips hidden events one by
 * one; neither counts them towards max_count.  Reads that take a new
 * snapshot (global reads, stream reads at READ COMMITTED) let rules.c
 * reuse the stream bounds of earlier reads (rulebound.c).
 *
 * Talks to: order.c (the horizon), names.c (name checks), rules.c (the
 * stream rules), logscan.c (the scans, which the snapshot code and the
 * rules use too).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relscan.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_am.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "base/base.h"
#include "log/log.h"

PG_FUNCTION_INFO_V1(esrc_read_stream);
PG_FUNCTION_INFO_V1(esrc_read_stream_backward);
PG_FUNCTION_INFO_V1(esrc_read_all);
PG_FUNCTION_INFO_V1(esrc_read_category);
PG_FUNCTION_INFO_V1(esrc_safe_position_sql);
PG_FUNCTION_INFO_V1(esrc_stream_version);

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
 * max_count argument: NULL means no limit (-1), otherwise it must be
 * positive.
 */
static int64
limit_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		return -1;
	if (PG_GETARG_INT32(argno) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_count must be positive"),
				 errdetail("The value given was %d.", PG_GETARG_INT32(argno)),
				 errhint("Use null for no limit.")));
	return (int64) PG_GETARG_INT32(argno);
}

/*
 * Run one read into the function's result tuplestore: at most limit rows
 * (-1: all) of the scan described as for esrc_log_begin, without the
 * events the stream rules hide (rules.c; hidden events do not count
 * towards the limit).  With latest, the scan runs under a snapshot taken
 * now (global reads); otherwise under the caller's snapshot rules.
 */
/*
 * read_category's filters: the event types (ntypes 0: every type) and the
 * member of a consumer group, partition of partitions (partitions 0:
 * every stream), by esrc.stream_partition (partition.c).
 */
typedef struct ReadFilter
{
	int			ntypes;
	text	  **types;
	int			partition;
	int			partitions;
} ReadFilter;

static bool
filter_passes(const ReadFilter *f, TupleTableSlot *slot)
{
	if (f->ntypes > 0)
	{
		text	   *type = DatumGetTextPP(slot->tts_values[Anum_events_type - 1]);
		bool		found = false;
		int			i;

		for (i = 0; i < f->ntypes && !found; i++)
			found = VARSIZE_ANY_EXHDR(type) == VARSIZE_ANY_EXHDR(f->types[i]) &&
				memcmp(VARDATA_ANY(type), VARDATA_ANY(f->types[i]),
					   VARSIZE_ANY_EXHDR(type)) == 0;
		if (!found)
			return false;
	}
	if (f->partitions > 0)
	{
		text	   *stream = DatumGetTextPP(slot->tts_values[Anum_events_stream - 1]);

		if (esrc_stream_partition_of(VARDATA_ANY(stream), VARSIZE_ANY_EXHDR(stream),
									 f->partitions) != f->partition)
			return false;
	}
	return true;
}

static void
run_read(FunctionCallInfo fcinfo, EsrcLogOrder order, Datum key, int64 lo,
		 int64 hi, ScanDirection dir, int64 limit, bool latest,
		 const ReadFilter *filter)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	desc;
	EsrcLogScan *scan;
	TupleTableSlot *slot;
	Snapshot	snap;
	EsrcRuleFilter *rules;
	EsrcRulesToken tok;
	bool		fresh;
	int64		count = 0;

	InitMaterializedSRF(fcinfo, 0);
	desc = rsinfo->setDesc;

	/*
	 * The stream rules (rules.c) may reuse the bounds of earlier reads when
	 * the snapshot is taken now, after esrc_rules_prepare: not the
	 * transaction's snapshot of REPEATABLE READ and above.
	 */
	fresh = latest || !IsolationUsesXactSnapshot();
	if (fresh)
		esrc_rules_prepare(&tok);
	snap = latest ? RegisterSnapshot(GetLatestSnapshot()) : esrc_caller_snapshot();
	/* a stream read starts at the first visible version */
	rules = fresh ? esrc_rules_begin_fresh(snap, &tok) : esrc_rules_begin(snap);
	if (rules != NULL && order == ESRC_LOG_BY_STREAM)
	{
		lo = Max(lo, esrc_rules_first_visible(rules, DatumGetTextPP(key)));
		esrc_rules_end(rules);
		rules = NULL;
	}
	scan = esrc_log_begin(order, key, lo, hi, dir, snap);
	esrc_check_event_rowtype(desc);

	while ((limit < 0 || count < limit) && (slot = esrc_log_next(scan)) != NULL)
	{
		Datum		values[ESRC_EVENT_NATTS_MAX];
		bool		isnull[ESRC_EVENT_NATTS_MAX];

		if (rules != NULL && !esrc_rules_visible(rules, slot))
			continue;
		if (filter != NULL && !filter_passes(filter, slot))
			continue;
		esrc_event_values(slot, desc->natts, values, isnull);
		tuplestore_putvalues(rsinfo->setResult, desc, values, isnull);
		count++;
	}
	esrc_log_end(scan);
	if (rules != NULL)
		esrc_rules_end(rules);
	UnregisterSnapshot(snap);
}

/*
 * esrc.read_stream(stream, from_version DEFAULT 0, max_count DEFAULT NULL)
 */
Datum
esrc_read_stream(PG_FUNCTION_ARGS)
{
	char	   *stream = esrc_check_name(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
										 "stream name", ESRC_MAX_STREAM_NAME);
	int64		from = PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1);
	int64		limit;

	check_non_negative("from_version", from);
	limit = limit_arg(fcinfo, 2);
	run_read(fcinfo, ESRC_LOG_BY_STREAM, CStringGetTextDatum(stream), from,
			 PG_INT64_MAX, ForwardScanDirection, limit, false, NULL);
	return (Datum) 0;
}

/*
 * esrc.read_stream_backward(stream, from_version DEFAULT NULL, max_count
 * DEFAULT NULL): newest first, starting at from_version (NULL = the end).
 */
Datum
esrc_read_stream_backward(PG_FUNCTION_ARGS)
{
	char	   *stream = esrc_check_name(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
										 "stream name", ESRC_MAX_STREAM_NAME);
	int64		from = PG_ARGISNULL(1) ? PG_INT64_MAX : PG_GETARG_INT64(1);
	int64		limit;

	check_non_negative("from_version", from);
	limit = limit_arg(fcinfo, 2);
	run_read(fcinfo, ESRC_LOG_BY_STREAM, CStringGetTextDatum(stream), 0,
			 from, BackwardScanDirection, limit, false, NULL);
	return (Datum) 0;
}

/*
 * read_all and read_category: the events after "after" up to the horizon,
 * oldest first.
 */
static void
global_read(FunctionCallInfo fcinfo, EsrcLogOrder order, text *category,
			const ReadFilter *filter)
{
	int			afterarg = order == ESRC_LOG_BY_POSITION ? 0 : 1;
	int64		after = PG_ARGISNULL(afterarg) ? 0 : PG_GETARG_INT64(afterarg);
	int64		horizon;
	int64		limit;
	Datum		key = (Datum) 0;

	check_non_negative("after_position", after);
	limit = limit_arg(fcinfo, afterarg + 1);
	if (order == ESRC_LOG_BY_CATEGORY)
	{
		char	   *cat = esrc_check_name(category, "category", ESRC_MAX_STREAM_NAME);
		uint64		hash;

		if (strchr(cat, '-') != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("category must not contain \"-\""),
					 errdetail("The category of a stream is the part of its name before the first \"-\".")));
		key = CStringGetTextDatum(cat);
		/* only appends that may touch this category hold it back */
		hash = esrc_category_hash(cat, strlen(cat));
		horizon = esrc_safe_position_for(esrc_relation_oid("position_seq"),
										 &hash, 1);
	}
	else
		horizon = esrc_safe_position(esrc_relation_oid("position_seq"));
	/* position > after; after + 1 cannot overflow past the horizon */
	run_read(fcinfo, order, key, after == PG_INT64_MAX ? PG_INT64_MAX : after + 1,
			 after == PG_INT64_MAX ? 0 : horizon, ForwardScanDirection, limit, true,
			 filter);
}

/*
 * esrc.read_all(after_position DEFAULT 0, max_count DEFAULT 1000)
 */
Datum
esrc_read_all(PG_FUNCTION_ARGS)
{
	global_read(fcinfo, ESRC_LOG_BY_POSITION, NULL, NULL);
	return (Datum) 0;
}

/*
 * read_category's filter arguments: types (argument 3), partition and
 * partitions (4, 5).  The 0.2.0 function has three arguments.
 */
static ReadFilter *
category_filter(FunctionCallInfo fcinfo)
{
	ReadFilter *f = palloc0(sizeof(ReadFilter));

	if (PG_NARGS() < 6)
		return f;
	if (!PG_ARGISNULL(3))
	{
		Datum	   *elems;
		bool	   *nulls;
		int			i;

		deconstruct_array(PG_GETARG_ARRAYTYPE_P(3), TEXTOID, -1, false, TYPALIGN_INT,
						  &elems, &nulls, &f->ntypes);
		if (f->ntypes == 0 || f->ntypes > ESRC_MAX_FILTER_TYPES)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("types must have 1 to %d elements", ESRC_MAX_FILTER_TYPES),
					 errhint("Use null for every type.")));
		f->types = palloc(sizeof(text *) * f->ntypes);
		for (i = 0; i < f->ntypes; i++)
		{
			f->types[i] = nulls[i] ? NULL : DatumGetTextPP(elems[i]);
			(void) esrc_check_name(f->types[i], "event type of types", ESRC_MAX_TYPE_NAME);
		}
	}
	if (PG_ARGISNULL(4) != PG_ARGISNULL(5))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("partition and partitions must both be given, or both be null")));
	if (!PG_ARGISNULL(5))
	{
		f->partitions = PG_GETARG_INT32(5);
		f->partition = PG_GETARG_INT32(4);
		if (f->partitions < 1 || f->partitions > ESRC_MAX_FILTER_PARTITIONS)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("partitions must be between 1 and %d", ESRC_MAX_FILTER_PARTITIONS),
					 errdetail("The value given was %d.", f->partitions)));
		if (f->partition < 0 || f->partition >= f->partitions)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("partition must be between 0 and partitions - 1"),
					 errdetail("The value given was %d, with %d partitions.",
							   f->partition, f->partitions)));
	}
	return f;
}

/*
 * esrc.read_category(category, after_position DEFAULT 0, max_count DEFAULT
 * 1000, types DEFAULT NULL, partition DEFAULT NULL, partitions DEFAULT NULL)
 */
Datum
esrc_read_category(PG_FUNCTION_ARGS)
{
	text	   *category = PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0);
	ReadFilter *filter = category_filter(fcinfo);

	global_read(fcinfo, ESRC_LOG_BY_CATEGORY, category, filter);
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
 * for a stream with no events: the last entry of the stream in the
 * (stream, version) index.  Command handlers call it on every command.
 * Uses the caller's snapshot rules, like read_stream.
 */
Datum
esrc_stream_version(PG_FUNCTION_ARGS)
{
	Snapshot	snap = esrc_caller_snapshot();
	EsrcLogScan *scan;
	TupleTableSlot *slot;
	int64		version = -1;

	scan = esrc_log_begin(ESRC_LOG_BY_STREAM, PointerGetDatum(PG_GETARG_TEXT_PP(0)),
						  0, PG_INT64_MAX, BackwardScanDirection, snap);
	if ((slot = esrc_log_next(scan)) != NULL)
		version = DatumGetInt64(slot->tts_values[Anum_events_version - 1]);
	esrc_log_end(scan);
	UnregisterSnapshot(snap);
	PG_RETURN_INT64(version);
}
