/*-------------------------------------------------------------------------
 *
 * query.c
 *	  Reads by query and conditional appends (dynamic consistency
 *	  boundaries, docs/dcb.md): esrc.read_query(), esrc.explain_query(), and
 *	  the condition of esrc.append_if() (whose entry point is append.c's).
 *
 * A query is {"items": [{"types": [...], "tags": [...]}, ...]}: an event
 * matches when it matches one item; it matches an item when its type is
 * one of the item's types (no types: any type) and it carries every tag of
 * the item.  The query becomes one SQL statement over esrc.events, the
 * items OR'd, a tagged item as "tags @> '{...}'", which the partial GIN
 * index events_tags_idx answers (esrc.explain_query shows the plan; the
 * regress test dcb_query checks it), bounded by position.  An item with
 * types only scans the positions after "after" (no index on type).
 *
 * read_query reads up to the horizon (order.c's esrc_safe_position, or an
 * up_to at or below it) with a snapshot taken after the horizon was
 * computed, like read_all: every event at or below the horizon has
 * settled, so the answer is complete up to it, and the caller passes that
 * position on as the "after" of a condition.  The stream rules hide
 * events as in read_all.
 *
 * append_if is append_batch with a condition {"fail_if_events_match":
 * query, "after": position}.  An "after" above the horizon is refused
 * (22023): an event below it could still commit.  Under the stream lock
 * and the key locks of tags.c, and after the idempotency and version
 * checks of append.c, it looks for a matching event after "after" with a
 * snapshot taken then (at every isolation level) -- by a scan of the
 * primary key from "after" on, each row matched here, when at most
 * ESRC_CONDITION_SCAN_SPAN positions were handed out since "after" (the
 * usual decision, whose append follows its read; no planning), else by
 * the query's statement: every append that could
 * write a matching event has either committed before the key locks were
 * granted (and is seen) or waits for this transaction to end.  A match
 * raises 40001 naming the stream, the query and the first matching
 * positions.  The check counts every stored event, including those the
 * stream rules hide from reads.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/tuptable.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "base/base.h"
#include "log/log.h"
#include "logint.h"

PG_FUNCTION_INFO_V1(esrc_read_query);
PG_FUNCTION_INFO_V1(esrc_explain_query);

#define QUERY_HINT "A query is {\"items\": [{\"types\": [\"T\", ...], \"tags\": [\"t\", ...]}, ...]}; each item needs types or tags or both."

static void
query_error(const char *msg, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid query: %s", msg),
			 detail ? errdetail("%s", detail) : 0,
			 errhint(QUERY_HINT)));
}

static int
cstring_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/*
 * The names of a "types" or "tags" array of item index (1-based): checked,
 * sorted, duplicates dropped.
 */
static char **
parse_names(JsonbValue *val, int index, bool tags, int *n_out)
{
	const char *key = tags ? "tags" : "types";
	JsonbContainer *arr;
	char	  **names;
	int			n;
	int			i;
	int			k = 0;

	if (val->type != jbvBinary || !JsonContainerIsArray(val->val.binary.data) ||
		JsonContainerIsScalar(val->val.binary.data))
		query_error(psprintf("\"%s\" of item %d is not an array", key, index), NULL);
	arr = val->val.binary.data;
	n = JsonContainerSize(arr);
	if (n > ESRC_MAX_QUERY_NAMES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("invalid query: item %d has too many %s", index, key),
				 errdetail("The limit is %d; %d were given.", ESRC_MAX_QUERY_NAMES, n)));
	names = palloc(sizeof(char *) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		JsonbValue *e = getIthJsonbValueFromContainer(arr, i);
		char	   *what = psprintf("item %d of the query", index);

		if (e->type != jbvString)
			query_error(psprintf("element %d of \"%s\" of item %d is not a string",
								 i + 1, key, index), NULL);
		if (tags)
			names[i] = esrc_check_tag(e->val.string.val, e->val.string.len, what);
		else
			names[i] = esrc_check_name(cstring_to_text_with_len(e->val.string.val,
																e->val.string.len),
									   what, ESRC_MAX_TYPE_NAME);
	}
	qsort(names, n, sizeof(char *), cstring_cmp);
	for (i = 0; i < n; i++)
		if (k == 0 || strcmp(names[i], names[k - 1]) != 0)
			names[k++] = names[i];
	*n_out = k;
	return names;
}

static void
parse_item(JsonbValue *elem, int index, DcbItem *item)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;

	memset(item, 0, sizeof(*item));
	if (elem->type != jbvBinary || !JsonContainerIsObject(elem->val.binary.data))
		query_error(psprintf("item %d is not an object", index), NULL);
	it = JsonbIteratorInit(elem->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		JsonbValue	val;
		char	   *key;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		tok = JsonbIteratorNext(&it, &val, true);
		if (strcmp(key, "types") == 0)
			item->types = parse_names(&val, index, false, &item->ntypes);
		else if (strcmp(key, "tags") == 0)
			item->tags = parse_names(&val, index, true, &item->ntags);
		else
			query_error(psprintf("unknown key \"%s\" in item %d", key, index), NULL);
	}
	if (item->ntypes == 0 && item->ntags == 0)
		query_error(psprintf("item %d names no type and no tag", index),
					"An item without types and tags would match every event.");
}

/* Parse and check a query (what: "query" or "condition", for messages). */
static DcbQuery *
parse_query(Jsonb *jb)
{
	DcbQuery   *q = palloc0(sizeof(DcbQuery));
	JsonbValue *items;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	int			i;

	if (!JB_ROOT_IS_OBJECT(jb))
		query_error("not a JSON object", NULL);
	it = JsonbIteratorInit(&jb->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		if (tok == WJB_KEY &&
			!(v.val.string.len == 5 && memcmp(v.val.string.val, "items", 5) == 0))
			query_error(psprintf("unknown key \"%s\"",
								 pnstrdup(v.val.string.val, v.val.string.len)), NULL);
	items = getKeyJsonValueFromContainer(&jb->root, "items", 5, NULL);
	if (items == NULL)
		query_error("\"items\" is missing", NULL);
	if (items->type != jbvBinary || !JsonContainerIsArray(items->val.binary.data) ||
		JsonContainerIsScalar(items->val.binary.data))
		query_error("\"items\" is not an array", NULL);
	q->nitems = JsonContainerSize(items->val.binary.data);
	if (q->nitems == 0)
		query_error("\"items\" is empty", "A query without items would match no event.");
	if (q->nitems > ESRC_MAX_QUERY_ITEMS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("invalid query: too many items"),
				 errdetail("The limit is %d items; %d were given.",
						   ESRC_MAX_QUERY_ITEMS, q->nitems)));
	q->items = palloc(sizeof(DcbItem) * q->nitems);
	for (i = 0; i < q->nitems; i++)
		parse_item(getIthJsonbValueFromContainer(items->val.binary.data, i),
				   i + 1, &q->items[i]);
	q->source = jb;
	return q;
}

/* A text[] literal of names[0 .. n-1], quoted for SQL. */
static char *
array_literal(char **names, int n)
{
	StringInfoData buf;
	int			i;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (i = 0; i < n; i++)
	{
		const char *c;

		appendStringInfoString(&buf, i > 0 ? ",\"" : "\"");
		for (c = names[i]; *c; c++)
		{
			if (*c == '"' || *c == '\\')
				appendStringInfoChar(&buf, '\\');
			appendStringInfoChar(&buf, *c);
		}
		appendStringInfoChar(&buf, '"');
	}
	appendStringInfoChar(&buf, '}');
	return quote_literal_cstr(buf.data);
}

/*
 * The statement for a query: the whole rows of esrc.events matching it
 * with $1 < position <= $2, in position order, at most $3 (null: all).
 * Schema-qualified throughout (the caller's search_path does not matter).
 */
static char *
query_sql(const DcbQuery *q)
{
	StringInfoData sql;
	int			i;

	initStringInfo(&sql);
	appendStringInfoString(&sql,
						   "SELECT e.* FROM esrc.events e"
						   " WHERE e.position OPERATOR(pg_catalog.>) $1"
						   " AND e.position OPERATOR(pg_catalog.<=) $2 AND (");
	for (i = 0; i < q->nitems; i++)
	{
		const DcbItem *item = &q->items[i];
		bool		and = false;

		appendStringInfoString(&sql, i > 0 ? " OR (" : "(");
		if (item->ntags > 0)
		{
			appendStringInfo(&sql, "e.tags IS NOT NULL AND e.tags OPERATOR(pg_catalog.@>) %s::pg_catalog.text[]",
							 array_literal(item->tags, item->ntags));
			and = true;
		}
		if (item->ntypes > 0)
			appendStringInfo(&sql, "%se.type OPERATOR(pg_catalog.=) ANY (%s::pg_catalog.text[])",
							 and ? " AND " : "",
							 array_literal(item->types, item->ntypes));
		appendStringInfoChar(&sql, ')');
	}
	appendStringInfoString(&sql, ") ORDER BY e.position LIMIT $3");
	return sql.data;
}

/* Run the query's statement with snap; the rows stay in SPI_tuptable. */
static void
run_query_sql(const DcbQuery *q, int64 lo, int64 hi, int64 limit, Snapshot snap)
{
	Oid			argtypes[3] = {INT8OID, INT8OID, INT8OID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	SPIPlanPtr	plan;
	int			rc;

	values[0] = Int64GetDatum(lo);
	values[1] = Int64GetDatum(hi);
	values[2] = Int64GetDatum(limit);
	if (limit < 0)
		nulls[2] = 'n';
	plan = SPI_prepare(query_sql(q), 3, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	rc = SPI_execute_snapshot(plan, values, nulls, snap, InvalidSnapshot,
							  true, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_snapshot failed: %s", SPI_result_code_string(rc));
}

static Jsonb *
jsonb_arg(FunctionCallInfo fcinfo, int n, const char *what)
{
	if (PG_ARGISNULL(n))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	return PG_GETARG_JSONB_P(n);
}

static void
check_position_arg(const char *what, int64 value, int64 horizon)
{
	if (value < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", what),
				 errdetail("The value given was " INT64_FORMAT ".", value)));
	if (value > horizon)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s " INT64_FORMAT " is above the safe horizon " INT64_FORMAT,
						what, value, horizon),
				 errdetail("Events at positions up to it may still commit; a decision can only rely on positions up to esrc.safe_position()."),
				 errhint("Pass the position up to which the events were read (esrc.safe_position() before the read).")));
}

/*
 * esrc.read_query(query, after DEFAULT 0, max_count DEFAULT NULL, up_to
 * DEFAULT NULL)
 */
Datum
esrc_read_query(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DcbQuery   *q = parse_query(jsonb_arg(fcinfo, 0, "query"));
	int64		after = PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1);
	int64		limit = PG_ARGISNULL(2) ? -1 : PG_GETARG_INT32(2);
	int64		horizon = esrc_safe_position(esrc_relation_oid("position_seq"));
	int64		hi = PG_ARGISNULL(3) ? horizon : PG_GETARG_INT64(3);
	EsrcRulesToken tok;
	EsrcRuleFilter *rules;
	Snapshot	snap;
	TupleTableSlot *slot;
	uint64		i;

	check_position_arg("after", after, PG_INT64_MAX);
	if (!PG_ARGISNULL(3))
		check_position_arg("up_to", hi, horizon);
	if (!PG_ARGISNULL(2) && limit < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_count must not be negative")));
	InitMaterializedSRF(fcinfo, 0);
	esrc_check_event_rowtype(rsinfo->setDesc);

	/* a snapshot taken after the horizon: every event up to it settled */
	esrc_rules_prepare(&tok);
	snap = RegisterSnapshot(GetLatestSnapshot());
	rules = esrc_rules_begin_fresh(snap, &tok);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* with rules, hidden rows do not count towards max_count: read all */
	run_query_sql(q, after, hi, rules != NULL ? -1 : limit, snap);
	slot = MakeSingleTupleTableSlot(SPI_tuptable->tupdesc, &TTSOpsHeapTuple);
	for (i = 0; i < SPI_processed && (limit < 0 || limit > 0); i++)
	{
		Datum		values[ESRC_EVENT_NATTS_MAX];
		bool		nulls[ESRC_EVENT_NATTS_MAX];

		ExecStoreHeapTuple(SPI_tuptable->vals[i], slot, false);
		slot_getallattrs(slot);
		if (slot->tts_nvalid < Natts_events)
			elog(ERROR, "esrc.events has an unexpected row type");
		if (rules != NULL && !esrc_rules_visible(rules, slot))
			continue;
		esrc_event_values(slot, rsinfo->setDesc->natts, values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		if (limit > 0)
			limit--;
	}
	ExecDropSingleTupleTableSlot(slot);
	SPI_finish();
	if (rules != NULL)
		esrc_rules_end(rules);
	UnregisterSnapshot(snap);
	return (Datum) 0;
}

/* esrc.explain_query(query): the plan of the query's statement. */
Datum
esrc_explain_query(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DcbQuery   *q = parse_query(jsonb_arg(fcinfo, 0, "query"));
	Oid			argtypes[3] = {INT8OID, INT8OID, INT8OID};
	Datum		values[3] = {Int64GetDatum(0), Int64GetDatum(PG_INT64_MAX), 0};
	char		nulls[3] = {' ', ' ', 'n'};
	uint64		i;

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(psprintf("EXPLAIN (COSTS OFF) %s", query_sql(q)),
							  3, argtypes, values, nulls, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "EXPLAIN failed");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		line = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
										 1, &isnull);

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &line, &isnull);
	}
	SPI_finish();
	return (Datum) 0;
}

/*
 * Does the row in slot (deformed) match item?  Types: one of them; tags:
 * every one of them among the row's.
 */
static bool
row_matches_item(TupleTableSlot *slot, const DcbItem *item)
{
	int			i;

	if (item->ntypes > 0)
	{
		char	   *type = TextDatumGetCString(slot->tts_values[Anum_events_type - 1]);
		bool		found = false;

		for (i = 0; i < item->ntypes && !found; i++)
			found = strcmp(type, item->types[i]) == 0;
		if (!found)
			return false;
	}
	if (item->ntags > 0)
	{
		Datum	   *elems;
		int			n;

		if (slot->tts_isnull[Anum_events_tags - 1])
			return false;
		deconstruct_array(DatumGetArrayTypeP(slot->tts_values[Anum_events_tags - 1]),
						  TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
		for (i = 0; i < item->ntags; i++)
		{
			bool		found = false;
			int			j;

			for (j = 0; j < n && !found; j++)
				found = strcmp(TextDatumGetCString(elems[j]), item->tags[i]) == 0;
			if (!found)
				return false;
		}
	}
	return true;
}

/*
 * The first (up to 4) positions after "after" of events matching the
 * query, by a scan of the primary key from after + 1 on, each row checked
 * here: what a condition checks when few positions were handed out after
 * its "after" (a decision appends right after its read), without the cost
 * of planning a statement.
 */
static int
recent_matches(const DcbCondition *cond, Snapshot snap, int64 *found)
{
	EsrcLogScan *scan = esrc_log_begin(ESRC_LOG_BY_POSITION, (Datum) 0,
									   cond->after + 1, PG_INT64_MAX,
									   ForwardScanDirection, snap);
	TupleTableSlot *slot;
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "esrc condition",
											  ALLOCSET_SMALL_SIZES);
	int			n = 0;

	while (n < 4 && (slot = esrc_log_next(scan)) != NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(cxt);
		int			i;

		if (slot->tts_tupleDescriptor->natts < Anum_events_tags)
			elog(ERROR, "esrc.events has an unexpected row type");
		for (i = 0; i < cond->query->nitems; i++)
			if (row_matches_item(slot, &cond->query->items[i]))
			{
				found[n++] = DatumGetInt64(slot->tts_values[Anum_events_position - 1]);
				break;
			}
		MemoryContextSwitchTo(old);
		MemoryContextReset(cxt);
	}
	esrc_log_end(scan);
	MemoryContextDelete(cxt);
	return n;
}

/* The same by the query's statement (the tag index), for older "after"s. */
static int
planned_matches(const DcbCondition *cond, Snapshot snap, int64 *found)
{
	int			n;
	int			i;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	run_query_sql(cond->query, cond->after, PG_INT64_MAX, 4, snap);
	n = (int) SPI_processed;
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		found[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
											   SPI_tuptable->tupdesc,
											   Anum_events_position, &isnull));
	}
	SPI_finish();
	return n;
}

/*
 * The condition check of esrc.append_if (called by append.c under the
 * stream and key locks): 40001 when an event matching the query is
 * stored after cond->after.  With a snapshot taken now, at every isolation
 * level.
 */
void
esrc_check_condition(const DcbCondition *cond, const char *stream)
{
	Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
	int64		last = esrc_sequence_last_value(esrc_relation_oid("position_seq"));
	int64		found[4];
	StringInfoData list;
	int			n;
	int			i;

	if (last - cond->after <= ESRC_CONDITION_SCAN_SPAN)
		n = recent_matches(cond, snap, found);
	else
		n = planned_matches(cond, snap, found);
	UnregisterSnapshot(snap);
	if (n == 0)
		return;
	initStringInfo(&list);
	for (i = 0; i < n && i < 3; i++)
		appendStringInfo(&list, "%s" INT64_FORMAT, i > 0 ? ", " : "", found[i]);
	esrc_metrics_conflict();
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("condition of append to stream \"%s\" failed: events match the query after position " INT64_FORMAT,
					stream, cond->after),
			 errdetail("Query: %s. First conflicting positions: %s%s.",
					   JsonbToCString(NULL, &cond->query->source->root,
									  VARSIZE(cond->query->source)),
					   list.data, n > 3 ? ", ..." : ""),
			 errhint("Read the events matching the query again and retry the decision.")));
}

/* The condition argument: {"fail_if_events_match": query, "after": n}. */
static DcbCondition *
parse_condition(Jsonb *jb)
{
	DcbCondition *c = palloc0(sizeof(DcbCondition));
	JsonbValue *q;
	JsonbValue *after;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	const char *hint = "A condition is {\"fail_if_events_match\": query, \"after\": position}.";

	if (!JB_ROOT_IS_OBJECT(jb))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid condition: not a JSON object"), errhint("%s", hint)));
	it = JsonbIteratorInit(&jb->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *key;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		if (strcmp(key, "fail_if_events_match") != 0 && strcmp(key, "after") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid condition: unknown key \"%s\"", key),
					 errhint("%s", hint)));
	}
	q = getKeyJsonValueFromContainer(&jb->root, "fail_if_events_match", 20, NULL);
	after = getKeyJsonValueFromContainer(&jb->root, "after", 5, NULL);
	if (q == NULL || after == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid condition: \"%s\" is missing",
						q == NULL ? "fail_if_events_match" : "after"),
				 errhint("%s", hint)));
	if (after->type != jbvNumeric)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid condition: \"after\" is not a number"),
				 errhint("%s", hint)));
	c->after = DatumGetInt64(DirectFunctionCall1(numeric_int8,
												 NumericGetDatum(after->val.numeric)));
	if (!DatumGetBool(DirectFunctionCall2(numeric_eq, NumericGetDatum(after->val.numeric),
										  DirectFunctionCall1(int8_numeric,
															  Int64GetDatum(c->after)))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid condition: \"after\" is not an integer"),
				 errhint("%s", hint)));
	c->query = parse_query(JsonbValueToJsonb(q));
	return c;
}

/*
 * The condition argument n of esrc.append_if (append.c):
 * {"fail_if_events_match": query, "after": position}; then
 * esrc_check_condition_after, once the other arguments are checked.
 */
DcbCondition *
esrc_condition_arg(FunctionCallInfo fcinfo, int n)
{
	return parse_condition(jsonb_arg(fcinfo, n, "condition"));
}

/* "after" of a condition must be at most the safe horizon */
void
esrc_check_condition_after(const DcbCondition *cond)
{
	check_position_arg("after", cond->after,
					   esrc_safe_position(esrc_relation_oid("position_seq")));
}
