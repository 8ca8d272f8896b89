/*-------------------------------------------------------------------------
 *
 * read.c
 *	  The read path: read_stream(), read_stream_backward(), read_all(),
 *	  read_category(), stream_version() and safe_position(), and the index
 *	  scans of the event log that the snapshot code replays from.
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
 * Talks to: order.c (the horizon), append.c (name checks), rules.c (the
 * stream rules), snapbuild.c and snapread.c (which replay through
 * esrc_log_begin/next/end).
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

/*
 * One index scan of the log (see esrc_log_begin).  The slot holds the
 * current row; its first ESRC_EVENT_NATTS columns are an esrc.event.
 */
struct EsrcLogScan
{
	Relation	rel;
	Relation	idx;
	IndexScanDesc scan;
	ScanDirection dir;
	TupleTableSlot *slot;
	Snapshot	snap;
	bool		empty;			/* the bounds admit no row: no scan */
	EsrcLogOrder order;
	int			nkeys;
	ScanKeyData keys[3];		/* as begun; esrc_log_rescan_stream
								 * changes their arguments only */
};

/*
 * The caller must be allowed to read every column of esrc.events, as a
 * SELECT of the whole row would require: table privilege, or column
 * privilege on all columns (logaccess.c, the check every path that
 * delivers events makes).
 */
static void
check_read_privilege(Relation rel)
{
	EsrcLogAccess access = esrc_log_access(GetUserId());

	if (access == ESRC_LOG_NO_SELECT)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, RelationGetRelationName(rel));
	if (access == ESRC_LOG_RLS)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("esrc.events must not have row-level security"),
				 errdetail("The esrc read functions read the log by index scans, which would bypass its policies."),
				 errhint("Disable row-level security on esrc.events; grant esrc_reader only to roles that may read every event.")));
}

/*
 * The valid btree index of rel on exactly the key columns (att1[, att2]),
 * opened with AccessShareLock; an error if it is missing.
 */
static Relation
open_log_index(Relation rel, AttrNumber att1, AttrNumber att2, const char *what)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	int			natts = att2 == InvalidAttrNumber ? 1 : 2;

	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = idx->rd_index;

		if (form->indisvalid && form->indisready && form->indislive &&
			idx->rd_rel->relam == BTREE_AM_OID &&
			form->indnkeyatts == natts &&
			form->indkey.values[0] == att1 &&
			(natts == 1 || form->indkey.values[1] == att2) &&
			(idx->rd_indoption[0] & INDOPTION_DESC) == 0 &&
			(natts == 1 || (idx->rd_indoption[1] & INDOPTION_DESC) == 0) &&
			RelationGetIndexPredicate(idx) == NIL &&
			RelationGetIndexExpressions(idx) == NIL)
		{
			list_free(indexes);
			return idx;
		}
		index_close(idx, AccessShareLock);
	}
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("esrc.events has no index on %s", what),
			 errhint("Reinstall the extension; the event log's indexes must not be dropped.")));
	return NULL;				/* not reached */
}

/* A scan key on key column "col" of idx: column <op strategy> value. */
static void
init_key(ScanKey key, Relation idx, int col, StrategyNumber strategy, Datum value)
{
	Oid			op = get_opfamily_member(idx->rd_opfamily[col - 1],
										 idx->rd_opcintype[col - 1],
										 idx->rd_opcintype[col - 1], strategy);

	if (!OidIsValid(op))
		elog(ERROR, "no operator of strategy %d for index \"%s\"",
			 strategy, RelationGetRelationName(idx));
	ScanKeyEntryInitialize(key, 0, col, strategy, InvalidOid,
						   idx->rd_indcollation[col - 1], get_opcode(op), value);
}

static EsrcLogScan *log_begin(EsrcLogOrder order, Datum key, int64 lo,
							  int64 hi, ScanDirection dir, Snapshot snap,
							  bool check);

/*
 * Start an index scan of esrc.events under snap (which the caller keeps
 * registered until esrc_log_end):
 *
 *	 ESRC_LOG_BY_POSITION  lo <= position <= hi                (key unused)
 *	 ESRC_LOG_BY_STREAM    stream = key AND lo <= version <= hi
 *	 ESRC_LOG_BY_CATEGORY  category = key AND lo <= position <= hi
 *
 * in index order (position or version), backward if asked.  Checks the
 * caller's privileges on esrc.events first.  Allocates in the current
 * memory context; may ereport.
 */
EsrcLogScan *
esrc_log_begin(EsrcLogOrder order, Datum key, int64 lo, int64 hi,
			   ScanDirection dir, Snapshot snap)
{
	return log_begin(order, key, lo, hi, dir, snap, true);
}

/*
 * esrc_log_begin without the check of the caller's privileges: for the
 * life-cycle functions (rules.c), whose callers (esrc_admin) may not read
 * the log but must know a stream's last version.
 */
EsrcLogScan *
esrc_log_begin_unchecked(EsrcLogOrder order, Datum key, int64 lo, int64 hi,
						 ScanDirection dir, Snapshot snap)
{
	return log_begin(order, key, lo, hi, dir, snap, false);
}

static EsrcLogScan *
log_begin(EsrcLogOrder order, Datum key, int64 lo, int64 hi,
		  ScanDirection dir, Snapshot snap, bool check)
{
	EsrcLogScan *s = palloc0(sizeof(EsrcLogScan));
	ScanKeyData keys[3];
	int			nkeys = 0;
	int			boundcol = order == ESRC_LOG_BY_POSITION ? 1 : 2;

	s->rel = esrc_open_relation("events", AccessShareLock);
	if (check)
		check_read_privilege(s->rel);
	esrc_check_log_rowtype(s->rel);

	switch (order)
	{
		case ESRC_LOG_BY_POSITION:
			s->idx = open_log_index(s->rel, Anum_events_position, InvalidAttrNumber,
									"(position)");
			break;
		case ESRC_LOG_BY_STREAM:
			s->idx = open_log_index(s->rel, Anum_events_stream, Anum_events_version,
									"(stream, version)");
			break;
		case ESRC_LOG_BY_CATEGORY:
			s->idx = open_log_index(s->rel, Anum_events_category, Anum_events_position,
									"(category, position)");
			break;
	}
	if (order != ESRC_LOG_BY_POSITION)
		init_key(&keys[nkeys++], s->idx, 1, BTEqualStrategyNumber, key);
	init_key(&keys[nkeys++], s->idx, boundcol, BTGreaterEqualStrategyNumber, Int64GetDatum(lo));
	init_key(&keys[nkeys++], s->idx, boundcol, BTLessEqualStrategyNumber, Int64GetDatum(hi));

	memcpy(s->keys, keys, sizeof(ScanKeyData) * nkeys);
	s->nkeys = nkeys;
	s->order = order;
	s->dir = dir;
	s->snap = snap;
	s->slot = table_slot_create(s->rel, NULL);
	s->empty = lo > hi;
	if (!s->empty)
	{
		s->scan = esrc_index_beginscan(s->rel, s->idx, snap, nkeys, 0);
		index_rescan(s->scan, keys, nkeys, NULL, 0);
	}
	return s;
}

/*
 * Restart a scan begun with ESRC_LOG_BY_STREAM on another stream and
 * bounds, keeping the relation, index and snapshot: what rules.c does for
 * each stream whose first visible version a read must find.
 */
void
esrc_log_rescan_stream(EsrcLogScan *s, Datum key, int64 lo, int64 hi)
{
	if (s->order != ESRC_LOG_BY_STREAM)
		elog(ERROR, "esrc_log_rescan_stream() of a scan not by stream");
	s->keys[0].sk_argument = key;
	s->keys[1].sk_argument = Int64GetDatum(lo);
	s->keys[2].sk_argument = Int64GetDatum(hi);
	s->empty = lo > hi;
	if (s->empty)
		return;
	if (s->scan == NULL)
		s->scan = esrc_index_beginscan(s->rel, s->idx, s->snap, 3, 0);
	index_rescan(s->scan, s->keys, 3, NULL, 0);
}

/*
 * The next row of the scan, all columns deformed into the slot's
 * tts_values/tts_isnull (valid until the next call), or NULL at the end.
 */
TupleTableSlot *
esrc_log_next(EsrcLogScan *s)
{
	CHECK_FOR_INTERRUPTS();
	if (s->empty || !index_getnext_slot(s->scan, s->dir, s->slot))
		return NULL;
	slot_getallattrs(s->slot);
	return s->slot;
}

void
esrc_log_end(EsrcLogScan *s)
{
	if (s->scan)
		index_endscan(s->scan);
	ExecDropSingleTupleTableSlot(s->slot);
	index_close(s->idx, NoLock);
	table_close(s->rel, NoLock);
	pfree(s);
}

/*
 * A snapshot for a read with the caller's snapshot rules, as SPI gives a
 * new statement: a new one at READ COMMITTED, the transaction's at the
 * higher levels, seeing what this transaction wrote so far.  Registered:
 * the caller unregisters it.
 */
Snapshot
esrc_caller_snapshot(void)
{
	Snapshot	snap;

	CommandCounterIncrement();
	PushCopiedSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	snap = RegisterSnapshot(GetActiveSnapshot());
	PopActiveSnapshot();
	return snap;
}

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
 * The columns of an esrc.event of natts columns (ESRC_EVENT_NATTS, or
 * ESRC_EVENT_NATTS_MAX with tags) from a row of esrc.events in slot (all
 * columns deformed): its first ESRC_EVENT_NATTS columns, then its tags
 * (null when esrc.events has no tags column yet, before the update).
 */
void
esrc_event_values(TupleTableSlot *slot, int natts, Datum *values, bool *isnull)
{
	memcpy(values, slot->tts_values, sizeof(Datum) * ESRC_EVENT_NATTS);
	memcpy(isnull, slot->tts_isnull, sizeof(bool) * ESRC_EVENT_NATTS);
	if (natts > ESRC_EVENT_NATTS)
	{
		bool		has = slot->tts_tupleDescriptor->natts >= Anum_events_tags;

		values[ESRC_EVENT_NATTS] = has ? slot->tts_values[Anum_events_tags - 1] : (Datum) 0;
		isnull[ESRC_EVENT_NATTS] = has ? slot->tts_isnull[Anum_events_tags - 1] : true;
	}
}

/*
 * desc is esrc.event: the first ESRC_EVENT_NATTS columns of esrc.events
 * (by type), and tags (text[]) or not (before the update).
 */
void
esrc_check_event_rowtype(TupleDesc desc)
{
	static const Oid types[ESRC_EVENT_NATTS_MAX] = {INT8OID, TEXTOID, INT8OID, TEXTOID,
	JSONBOID, JSONBOID, UUIDOID, TIMESTAMPTZOID, TEXTARRAYOID};
	int			i;

	if (desc->natts != ESRC_EVENT_NATTS && desc->natts != ESRC_EVENT_NATTS_MAX)
		elog(ERROR, "esrc.event has an unexpected row type");
	for (i = 0; i < desc->natts; i++)
		if (TupleDescAttr(desc, i)->atttypid != types[i])
			elog(ERROR, "esrc.event has an unexpected row type");
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
