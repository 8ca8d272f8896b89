/*-------------------------------------------------------------------------
 *
 * fwddiverge.c
 *	  Divergence: Kafka's position record against the log, at connect.
 *	  Detecting it (state "diverged"), recording it in
 *	  esrc.forwarder_divergences, and applying the operator's decision
 *	  (esrc.forwarder_accept_divergence, src/sql/20_forwarder.sql).
 *
 * The worker continues after the position N of Kafka's last position
 * record (kafkapos.c) or later.  That is only right if the
 * log holds, at N, the event Kafka has there.  A server promoted from a
 * standby that lagged (asynchronous replication) may have lost events
 * that Kafka already has, and handed out their positions again: its log
 * then has no event at N, another event at N, or ends below N.  Continuing
 * after N would skip the new primary's own events for good, and
 * continuing below N would send a second event for a position Kafka has.
 * So at connect the worker checks, and on a mismatch it sends nothing:
 * state "diverged", a last_error naming both sides, a WARNING, the metric
 * esrc_forwarder_diverged, and a row in esrc.forwarder_divergences.  It
 * never skips and never re-sends on its own.  The way out is the
 * operator's: esrc.forwarder_accept_divergence(after_position, reason)
 * records the decision in that row and sets esrc.forwarder_state.position;
 * the worker, which looks for it every second while diverged, then sends
 * after after_position, and its next Kafka transaction writes a position
 * record that matches the log again.
 *
 * The check (fwd_check_divergence), with H the log's horizon (order.c):
 *  - N = 0 (no record yet): nothing to check;
 *  - H < N: if the position sequence has handed out N or more, an append
 *    in flight may still commit at N: wait (DIV_WAIT) and check again;
 *    else the log ends below N: diverged;
 *  - a record with an "id" (0.3.0 on): the log's event at N must have
 *    that id; no event at N, or another id: diverged;
 *  - a record without "id" (written by 0.2.0): the log reaches N, that is
 *    all that can be checked.
 * A decision applies to the divergence it was made for: the row's Kafka
 * position and id must be the record's.
 *
 * At least once (0.3.0 on): the position lives in esrc.forwarder_state,
 * which a standby replicates, so a promoted standby would resume from
 * its own (older) copy and hand positions Kafka already has to other
 * events, which consumers that deduplicate by position then drop.  So
 * kafka.c writes the same position record in that mode too, outside any
 * transaction, after the delivery reports of the batch are in, and the
 * same check runs at connect.  Chosen over reading the tail of the data
 * topics: that needs every topic of every category (the template may
 * put a category in a topic of its own, topics may be shared with other
 * producers, and a partition's last record is not the highest position
 * across partitions), a consumer per connect over an unbounded set of
 * partitions, and still only sees what is not yet compacted or deleted;
 * the record is one small write per batch on a producer that is already
 * there (bench/forward: at_least_once with and without it).  What it
 * costs the check: the record is never ahead of Kafka but may be behind
 * it, by the batch whose delivery came in just before the worker or its
 * server stopped (or whose record was not queued).  The check then looks
 * at a position N that Kafka has, and is right about it; a lost stretch
 * of the log that lies wholly above N (Kafka has M > N, the new log
 * lacks or replaced only positions in (N, M]) is not seen, and those
 * positions are sent again with the new log's events, as at_least_once
 * re-sends after any crash.  Asynchronous replication loses the tail of
 * the log written during the standby's lag, which reaches back below N
 * unless the lag was shorter than one batch's delivery.
 * esrc.forwarder_standbys is the setting that rules it out.
 *
 * Talks to: fwdconnect.c (after connect), fwdread.c (fwd_xact_begin: the
 * transaction as the extension's owner), fwdstatus.c (the status),
 * order.c (the horizon), src/sql/20_forwarder.sql (the table and the
 * function).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

#include "base/base.h"
#include "log/log.h"
#include "forwardint.h"

/* the last divergence reported, so that a repeated check does not repeat it */
static char reported[ESRC_FWD_ERROR_LEN];

/* What the log has at Kafka's position: the id there ("" = none), its end. */
typedef struct LogSide
{
	char		id[40];
	int64		end;			/* last event at or below the horizon, 0 = none */
} LogSide;

static void
read_log_side(int64 position, int64 horizon, LogSide *side)
{
	Datum		args[2];
	Oid			types[2] = {INT8OID, INT8OID};
	bool		isnull;
	int			rc;

	args[0] = Int64GetDatum(position);
	args[1] = Int64GetDatum(horizon);
	/* a snapshot taken after the horizon, as the batch read does */
	PushActiveSnapshot(GetLatestSnapshot());
	rc = SPI_execute_with_args("SELECT (SELECT e.id::pg_catalog.text FROM esrc.events e"
							   "         WHERE e.position OPERATOR(pg_catalog.=) $1),"
							   " (SELECT pg_catalog.max(e.position) FROM esrc.events e"
							   "   WHERE e.position OPERATOR(pg_catalog.<=) $2)",
							   2, types, args, NULL, true, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "read of esrc.events failed: %s", SPI_result_code_string(rc));
	side->id[0] = '\0';
	{
		char	   *id = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);

		if (id != NULL)
			strlcpy(side->id, id, sizeof(side->id));
	}
	side->end = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
											2, &isnull));
	if (isnull)
		side->end = 0;
	PopActiveSnapshot();
}

/*
 * The operator's decision for this divergence, if any: true with *after.
 * Else records the divergence (once per Kafka position and id) when the
 * table exists.
 */
static bool
decision(Oid nsp, int64 position, const char *kafka_id, const LogSide *side,
		 int64 *after)
{
	Datum		args[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	Oid			types[4] = {INT8OID, TEXTOID, TEXTOID, INT8OID};
	bool		isnull;
	int			rc;

	if (!OidIsValid(get_relname_relid("forwarder_divergences", nsp)))
		return false;			/* the extension is not updated to 0.3.0 */
	args[0] = Int64GetDatum(position);
	args[1] = CStringGetTextDatum(kafka_id);
	nulls[1] = kafka_id[0] ? ' ' : 'n';
	args[2] = CStringGetTextDatum(side->id);
	nulls[2] = side->id[0] ? ' ' : 'n';
	args[3] = Int64GetDatum(side->end);
	rc = SPI_execute_with_args("SELECT d.accepted_position FROM esrc.forwarder_divergences d"
							   " WHERE d.kafka_position OPERATOR(pg_catalog.=) $1"
							   " AND d.kafka_event_id IS NOT DISTINCT FROM $2::pg_catalog.uuid"
							   " AND d.accepted_position IS NOT NULL"
							   " ORDER BY d.accepted_at DESC, d.divergence_id DESC LIMIT 1",
							   2, types, args, nulls, true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "read of esrc.forwarder_divergences failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 1)
	{
		*after = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
											 1, &isnull));
		return true;
	}
	rc = SPI_execute_with_args("INSERT INTO esrc.forwarder_divergences"
							   " (kafka_position, kafka_event_id, log_event_id, log_end)"
							   " SELECT $1, $2::pg_catalog.uuid, $3::pg_catalog.uuid, $4"
							   " WHERE NOT EXISTS (SELECT 1 FROM esrc.forwarder_divergences d"
							   "  WHERE d.kafka_position OPERATOR(pg_catalog.=) $1"
							   "  AND d.kafka_event_id IS NOT DISTINCT FROM $2::pg_catalog.uuid"
							   "  AND d.accepted_position IS NULL)",
							   4, types, args, nulls, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "insert into esrc.forwarder_divergences failed: %s", SPI_result_code_string(rc));
	return false;
}

/* state "diverged": the error names both sides; logged once per divergence */
static void
report(int64 position, const char *kafka_id, const LogSide *side, int64 horizon)
{
	char		error[ESRC_FWD_ERROR_LEN];
	char		kafka_side[128];

	if (kafka_id[0])
		snprintf(kafka_side, sizeof(kafka_side), "Kafka's position record says position " INT64_FORMAT " is event %s",
				 position, kafka_id);
	else
		snprintf(kafka_side, sizeof(kafka_side), "Kafka's position record (without event id) says position " INT64_FORMAT,
				 position);
	if (horizon < position)
		snprintf(error, sizeof(error), "forwarding diverged from the log: %s, but the log ends at position " INT64_FORMAT,
				 kafka_side, side->end);
	else if (side->id[0] == '\0')
		snprintf(error, sizeof(error), "forwarding diverged from the log: %s, but the log has no event at position " INT64_FORMAT " (it ends at " INT64_FORMAT ")",
				 kafka_side, position, side->end);
	else
		snprintf(error, sizeof(error), "forwarding diverged from the log: %s, but the log has event %s there (it ends at " INT64_FORMAT ")",
				 kafka_side, side->id, side->end);
	if (strcmp(error, reported) == 0 && fwd_get_state() == FWD_DIVERGED)
		return;
	strlcpy(reported, error, sizeof(reported));
	fwd_report_failure(FWD_DIVERGED, error,
					   "Kafka has events this log does not (a standby promoted after asynchronous replication lost them); nothing is sent. See \"Divergence\" in docs/forwarder.md, then run SELECT esrc.forwarder_accept_divergence(after_position, reason) in this database.");
}

/*
 * Check Kafka's last position record (position, kafka_id: "" for a
 * record without id) against the log; see the header.  DIV_ACCEPTED with
 * *after when the operator decided where to continue.  A transaction of
 * its own.
 */
DivergenceCheck
fwd_check_divergence(int64 position, const char *kafka_id, int64 *after)
{
	Oid			nsp;
	Oid			seqoid;
	int64		horizon;
	LogSide		side;
	DivergenceCheck result = DIV_OK;

	if (position <= 0)
		return DIV_OK;
	nsp = fwd_xact_begin("esrc forwarder: checking Kafka's position against the log");
	if (!OidIsValid(nsp))
	{
		fwd_xact_end(nsp);
		return DIV_OK;			/* the main loop notices the missing extension */
	}
	seqoid = get_relname_relid("position_seq", nsp);
	horizon = esrc_safe_position(seqoid);
	if (horizon < position && esrc_sequence_last_value(seqoid) >= position)
		result = DIV_WAIT;
	else
	{
		read_log_side(position, horizon, &side);
		if (horizon < position ||
			(kafka_id[0] != '\0' && strcmp(side.id, kafka_id) != 0))
		{
			result = decision(nsp, position, kafka_id, &side, after) ?
				DIV_ACCEPTED : DIV_DIVERGED;
			if (result == DIV_DIVERGED)
				report(position, kafka_id, &side, horizon);
		}
	}
	fwd_xact_end(nsp);
	if (result == DIV_ACCEPTED)
	{
		reported[0] = '\0';
		ereport(LOG,
				(errmsg("esrc forwarder: divergence at Kafka's position " INT64_FORMAT " accepted (esrc.forwarder_divergences), continuing after position " INT64_FORMAT,
						position, *after)));
	}
	else if (result == DIV_OK)
		reported[0] = '\0';
	return result;
}
