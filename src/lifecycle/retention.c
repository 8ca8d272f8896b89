/*-------------------------------------------------------------------------
 *
 * retention.c
 *	  What a stream keeps (issue 16): esrc.set_stream_rules(stream,
 *	  truncate_before, max_count, max_age, reason) and
 *	  esrc.delete_stream(stream, reason, hard).
 *
 * Both take the stream lock (as an append does), write the stream's row
 * of esrc.stream_rules as the table's owner (through SPI,
 * security-restricted, search_path pinned), record the call in
 * esrc.erasures (erase.c) and wake the scavenger (scavenge.c), which
 * redacts what the rules hide.  delete_stream first appends the stream's
 * tombstone (esrc.deleted, append.c's esrc_append_system_event), the first
 * version it leaves visible.  What the rules mean for reads and appends
 * is the log's: rules.c keeps the cache that the read paths filter with,
 * and gives this file a stream's current rules (esrc_rules_current).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgrprotos.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "log/log.h"
#include "lifecycle/lifecycle.h"
#include "lifecycleint.h"

PG_FUNCTION_INFO_V1(esrc_set_stream_rules);
PG_FUNCTION_INFO_V1(esrc_delete_stream);

/*
 * Take the stream lock (as an append does) and return the stream's last
 * version under a new snapshot, which sees what committed before the lock
 * and this transaction's own appends.  A stream without events is an
 * error: a rule on a name nobody appended to is more likely a typo than a
 * plan, and esrc.erase_stream refuses it the same way.
 */
static int64
lock_stream_head(const char *stream)
{
	LOCKTAG		tag;
	Snapshot	snap;
	EsrcLogScan *scan;
	TupleTableSlot *slot;
	int64		head = -1;

	esrc_name_locktag(&tag, stream, ESRC_STREAM_LOCK_SPACE);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	CommandCounterIncrement();
	snap = RegisterSnapshot(GetLatestSnapshot());
	scan = esrc_log_begin_unchecked(ESRC_LOG_BY_STREAM, CStringGetTextDatum(stream),
									0, PG_INT64_MAX, BackwardScanDirection, snap);
	if ((slot = esrc_log_next(scan)) != NULL)
		head = DatumGetInt64(slot->tts_values[Anum_events_version - 1]);
	esrc_log_end(scan);
	UnregisterSnapshot(snap);
	if (head < 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream \"%s\" does not exist", stream),
				 errdetail("The stream has no events; rules are set on streams that have some.")));
	return head;
}

/* The stream's rules as esrc.erasures.rules records them. */
static Jsonb *
rules_json(const EsrcStreamRules *rv)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"truncate_before\": ");
	if (rv->truncate_before >= 0)
		appendStringInfo(&buf, INT64_FORMAT, rv->truncate_before);
	else
		appendStringInfoString(&buf, "null");
	appendStringInfoString(&buf, ", \"max_count\": ");
	if (rv->max_count >= 0)
		appendStringInfo(&buf, INT64_FORMAT, rv->max_count);
	else
		appendStringInfoString(&buf, "null");
	appendStringInfoString(&buf, ", \"max_age\": ");
	if (rv->has_max_age)
	{
		/* ISO 8601, whatever the session's IntervalStyle */
		struct pg_itm itm;
		char		iso[MAXDATELEN + 1];

		interval2itm(rv->max_age, &itm);
		EncodeInterval(&itm, INTSTYLE_ISO_8601, iso);
		escape_json(&buf, iso);
	}
	else
		appendStringInfoString(&buf, "null");
	appendStringInfo(&buf, ", \"hard_deleted\": %s}", rv->hard_deleted ? "true" : "false");
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

/* Write the stream's row of esrc.stream_rules (none if no rules), as its owner. */
static void
write_rules(const char *stream, const EsrcStreamRules *rv)
{
	static const char *delete_sql =
		"DELETE FROM esrc.stream_rules WHERE stream OPERATOR(pg_catalog.=) $1";
	static const char *upsert_sql =
		"INSERT INTO esrc.stream_rules AS r (stream, truncate_before, max_count, max_age, hard_deleted) "
		"VALUES ($1, $2, $3, $4, $5) ON CONFLICT (stream) DO UPDATE SET "
		"truncate_before = excluded.truncate_before, max_count = excluded.max_count, "
		"max_age = excluded.max_age, hard_deleted = excluded.hard_deleted, "
		"set_at = pg_catalog.now()";
	Oid			owner = esrc_relation_owner(esrc_relation_oid("stream_rules"));
	Oid			argtypes[5] = {TEXTOID, INT8OID, INT8OID, INTERVALOID, BOOLOID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

	values[0] = CStringGetTextDatum(stream);
	if (rv->truncate_before < 0 && rv->max_count < 0 && !rv->has_max_age &&
		!rv->hard_deleted)
	{
		esrc_run_as_owner(owner, delete_sql, 1, argtypes, values, NULL, SPI_OK_DELETE);
		return;
	}
	values[1] = Int64GetDatum(rv->truncate_before);
	nulls[1] = rv->truncate_before < 0 ? 'n' : ' ';
	values[2] = Int64GetDatum(rv->max_count);
	nulls[2] = rv->max_count < 0 ? 'n' : ' ';
	values[3] = IntervalPGetDatum(&rv->max_age);
	nulls[3] = rv->has_max_age ? ' ' : 'n';
	values[4] = BoolGetDatum(rv->hard_deleted);
	esrc_run_as_owner(owner, upsert_sql, 5, argtypes, values, nulls, SPI_OK_INSERT);
}

static void
refuse_negative(const char *what, int64 value, bool zero_too, const char *hint)
{
	if (value < 0 || (zero_too && value == 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must %s", what, zero_too ? "be positive" : "not be negative"),
				 errdetail("The value given was " INT64_FORMAT ".", value),
				 errhint("%s", hint)));
}

/*
 * esrc.set_stream_rules(stream, truncate_before, max_count, max_age,
 * reason): replaces the stream's rules; a null argument means no such
 * rule, so a call with all three null clears them.  Refused for a stream
 * deleted permanently.
 */
Datum
esrc_set_stream_rules(PG_FUNCTION_ARGS)
{
	char	   *stream;
	char	   *reason;
	EsrcStreamRules	rv;
	EsrcStreamRules	old;

	PreventCommandIfReadOnly("esrc.set_stream_rules()");
	stream = esrc_check_name(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
							 "stream name", ESRC_MAX_STREAM_NAME);
	memset(&rv, 0, sizeof(rv));
	rv.truncate_before = PG_ARGISNULL(1) ? -1 : PG_GETARG_INT64(1);
	if (!PG_ARGISNULL(1))
		refuse_negative("truncate_before", rv.truncate_before, false,
						"Use null for no such rule.");
	rv.max_count = PG_ARGISNULL(2) ? -1 : PG_GETARG_INT64(2);
	if (!PG_ARGISNULL(2))
		refuse_negative("max_count", rv.max_count, true,
						"Use null for no limit; esrc.delete_stream() hides every event.");
	rv.has_max_age = !PG_ARGISNULL(3);
	if (rv.has_max_age)
	{
		Interval	zero;

		rv.max_age = *PG_GETARG_INTERVAL_P(3);
		memset(&zero, 0, sizeof(zero));
		if (DatumGetInt32(DirectFunctionCall2(interval_cmp, IntervalPGetDatum(&rv.max_age),
											  IntervalPGetDatum(&zero))) <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("max_age must be positive"),
					 errdetail("The value given was %s.",
							   DatumGetCString(DirectFunctionCall1(interval_out,
																   IntervalPGetDatum(&rv.max_age)))),
					 errhint("Use null for no such rule.")));
	}
	reason = esrc_check_reason(PG_ARGISNULL(4) ? NULL : PG_GETARG_TEXT_PP(4), "rules change");

	(void) lock_stream_head(stream);
	esrc_rules_current(stream, &old);
	if (old.hard_deleted)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream \"%s\" is deleted permanently", stream),
				 errdetail("The rules of a stream deleted with hard => true cannot change.")));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	write_rules(stream, &rv);
	/* events may be hidden now: the scavenging worker, if off in this database, starts */
	esrc_scavenger_wake_at_commit();
	esrc_record_erasure("set_stream_rules", stream, 0, reason,
						(rv.truncate_before < 0 && rv.max_count < 0 && !rv.has_max_age) ?
						NULL : rules_json(&rv),
						GetSessionUserId(), GetUserId());
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	PG_RETURN_VOID();
}

/*
 * esrc.delete_stream(stream, reason, hard DEFAULT false) -> bigint:
 * appends the stream's tombstone (an esrc.deleted event, data {"hard":
 * true|false}) at the next version, and truncate_before becomes that
 * version (or stays, if higher), so the tombstone is the stream's only
 * visible event; its other rules stay; hard also refuses every later
 * append.  Returns the number of events hidden (the versions before the
 * tombstone); 0 for a stream deleted permanently already (nothing
 * changes, no second tombstone, the call is still recorded).
 */
Datum
esrc_delete_stream(PG_FUNCTION_ARGS)
{
	char	   *stream;
	char	   *reason;
	bool		hard;
	bool		already_hard;
	int64		events;
	EsrcStreamRules	rv;

	PreventCommandIfReadOnly("esrc.delete_stream()");
	stream = esrc_check_name(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
							 "stream name", ESRC_MAX_STREAM_NAME);
	reason = esrc_check_reason(PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1), "stream is deleted");
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("hard must not be null"),
				 errhint("Use false for a soft delete, true to refuse every later append.")));
	hard = PG_GETARG_BOOL(2);

	(void) lock_stream_head(stream);
	esrc_rules_current(stream, &rv);
	already_hard = rv.hard_deleted;
	events = 0;
	if (!already_hard)
	{
		/*
		 * The tombstone (log.h) at the next version, under the stream lock
		 * taken above; it is the stream's first visible event.  None is
		 * added when the head is the same tombstone already (deleted twice
		 * with nothing appended in between) or the stream is erased.
		 */
		int64		tomb;

		tomb = esrc_append_system_event(stream, ESRC_TYPE_DELETED,
										DatumGetJsonbP(DirectFunctionCall1(jsonb_in,
																		   CStringGetDatum(hard ? "{\"hard\": true}" : "{\"hard\": false}"))));
		events = tomb;			/* the versions before it, all hidden */
		rv.truncate_before = Max(rv.truncate_before, tomb);
		rv.hard_deleted = hard;
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (!already_hard)
		write_rules(stream, &rv);
	esrc_scavenger_wake_at_commit();
	esrc_record_erasure("delete_stream", stream, events, reason, rules_json(&rv),
						GetSessionUserId(), GetUserId());
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	PG_RETURN_INT64(events);
}
