/*-------------------------------------------------------------------------
 *
 * scavenge.c
 *	  The scavenger of the log's life cycle (issue 16): physically redacts
 *	  the events that stream rules hide (docs/lifecycle.md, "The
 *	  scavenger").
 *
 * This file owns:
 *	 - esrc.scavenge(max_events): one slice of a pass over the streams of
 *	   esrc.stream_rules, in the caller's transaction, resumable across
 *	   calls (pg_cron);
 *	 - the pass's position and totals in esrc.scavenge_progress (one row)
 *	   and, per stream, the version below which every event is redacted
 *	   in esrc.scavenge_streams, both written here only, as the tables'
 *	   owner (ownerctx.c's esrc_run_as_owner);
 *	 - the settings esrc.scavenge_interval and esrc.scavenge_max_events,
 *	   and the slice that projection worker 1 of each database runs every
 *	   interval (esrc_scavenge_worker_slice, called by projworker.c).
 *
 * A slice, per stream with rules (in the order of stream_rules_pkey,
 * after the last stream the pass finished):
 *	 1. without any lock, under a new snapshot: the first visible version
 *	    (fv) as rules.c computes it for reads, from esrc.stream_rules
 *	    itself; nothing to do if the stream's mark is at fv already.  So
 *	    a stream with nothing new to redact costs two index probes and
 *	    takes no lock;
 *	 2. the stream lock (append.c's; appends, erase_stream,
 *	    set_stream_rules and delete_stream take it), then fv again under a
 *	    snapshot taken after it: the decision is made on the rules as they
 *	    are, not on a cache.  A rules change commits (and sends its cache
 *	    invalidation) before it releases the lock, so every read whose
 *	    snapshot sees our redaction also sees those rules;
 *	 3. the events from the mark up to fv - 1 that are not redacted yet,
 *	    at most SCAVENGE_STREAM_BATCH (and what is left of max_events),
 *	    redacted by erase.c's redactor, the path erase_stream takes;
 *	    the mark moves up.
 *
 * Locks: the stream locks are held to the end of the transaction (the
 * caller's, for esrc.scavenge), so a slice is bounded: at most max_events
 * events redacted and max_events streams looked at, at most
 * SCAVENGE_MAX_LOCKED streams locked.  Only the first stream lock of a
 * slice is waited for; a later one that is taken ends the slice there (the
 * next one starts with it), so a slice never waits while it holds a stream
 * lock and cannot deadlock with an application's transaction that appends
 * to several streams.  Concurrent slices serialize on the row of
 * esrc.scavenge_progress (the worker skips its slice if the row is
 * locked).
 *
 * Never redacted: an event any read may still show.  truncate_before is
 * fixed and max_count only hides more as appends come; max_age depends on
 * the read's statement_timestamp(), so the slice uses as "now" the start
 * of the oldest transaction of the database (pg_stat_activity's
 * xact_start; the backend start for sessions with track_activities off)
 * less SCAVENGE_MARGIN_MS: every statement running or to come started
 * after that.  Loosening a stream's rules later shows its redacted events
 * (as {"erased": true}); it never brings data back.
 *
 * Talks to: erase.c (the redactor, the audit), rules.c (the first
 * visible version), append.c (the stream lock tag), projworker.c and
 * projlauncher.c (the worker that runs the slices).
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
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "log/log.h"
#include "lifecycle/lifecycle.h"
#include "lifecycleint.h"

PG_FUNCTION_INFO_V1(esrc_scavenge);

/* events redacted in one stream per visit: the rest waits for the next slice */
#define SCAVENGE_STREAM_BATCH	1000
/* streams one slice locks at most (the locks last to its commit) */
#define SCAVENGE_MAX_LOCKED		256
/* stream names read from esrc.stream_rules per index scan */
#define SCAVENGE_NAMES			64
/* max_age: how much older than the oldest transaction "now" is taken */
#define SCAVENGE_MARGIN_MS		1000

int			esrc_scavenge_interval_s = 0;
int			esrc_scavenge_max_events = 10000;

/* set by projection.c's init: wake, at commit, the worker that scavenges */
void		(*esrc_scavenger_wake_hook) (void) = NULL;

typedef struct ScavengeResult
{
	int64		streams_visited;
	int64		streams_redacted;
	int64		events_redacted;
	bool		done;			/* the pass reached the end of esrc.stream_rules */
	bool		busy;			/* another slice held esrc.scavenge_progress */
	TimestampTz pass_started_at;
	char	   *resume_after;	/* the last stream the pass finished, NULL = none */
} ScavengeResult;

void
esrc_scavenge_init(void)
{
	DefineCustomIntVariable("esrc.scavenge_interval",
							"Interval at which a background worker runs a slice of esrc.scavenge() in every database with esrc.",
							"0 turns the worker's scavenging off; esrc.scavenge() can still be called, e.g. from pg_cron.",
							&esrc_scavenge_interval_s,
							0, 0, INT_MAX / 1000,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("esrc.scavenge_max_events",
							"Events redacted (and streams looked at) at most by one slice of the scavenging worker.",
							"The stream locks a slice takes are held until it commits, so a smaller slice keeps appends to those streams waiting less.",
							&esrc_scavenge_max_events,
							10000, 1, 1000000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
}

/*
 * "now" for max_age: no statement running or to come in this database
 * started before it (see the header comment).
 */
static TimestampTz
scavenge_now(void)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	int			n = pgstat_fetch_stat_numbackends();
	int			i;

	for (i = 1; i <= n; i++)
	{
		LocalPgBackendStatus *l = esrc_local_beentry(i);
		PgBackendStatus *b;
		TimestampTz since;

		if (l == NULL)
			continue;
		b = &l->backendStatus;
		if (b->st_databaseid != MyDatabaseId || b->st_backendType == B_AUTOVAC_WORKER)
			continue;
		/* without track_activities there is no xact_start: the backend's start */
		since = b->st_state == STATE_DISABLED ? b->st_proc_start_timestamp :
			b->st_xact_start_timestamp;
		if (since != 0 && since < now)
			now = since;
	}
	return now - (TimestampTz) SCAVENGE_MARGIN_MS * 1000;
}

/*
 * Up to max names of esrc.stream_rules after "after" (NULL: from the
 * first), in the order of its primary key, under a new snapshot.  Returns
 * how many; the names in CurrentMemoryContext.
 */
static int
next_streams(const char *after, char **names, int max)
{
	Relation	rel = esrc_open_relation("stream_rules", AccessShareLock);
	Relation	idx;
	TupleTableSlot *slot;
	ScanKeyData key;
	IndexScanDesc scan;
	Snapshot	snap;
	int			n = 0;

	idx = index_open(esrc_relation_oid("stream_rules_pkey"), AccessShareLock);
	snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);
	if (after != NULL)
		ScanKeyEntryInitialize(&key, 0, 1, BTGreaterStrategyNumber, InvalidOid,
							   idx->rd_indcollation[0], F_TEXT_GT,
							   CStringGetTextDatum(after));
	scan = esrc_index_beginscan(rel, idx, snap, after != NULL ? 1 : 0, 0);
	index_rescan(scan, after != NULL ? &key : NULL, after != NULL ? 1 : 0, NULL, 0);
	while (n < max && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		d = slot_getattr(slot, 1, &isnull);

		names[n++] = TextDatumGetCString(d);
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	return n;
}

/* The stream's mark: every version below it is redacted (0: none known). */
static int64
stream_mark(Oid owner, const char *stream)
{
	static const char *sql =
		"SELECT redacted_below FROM esrc.scavenge_streams "
		"WHERE stream OPERATOR(pg_catalog.=) $1";
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	int64		mark = 0;

	values[0] = CStringGetTextDatum(stream);
	esrc_run_as_owner(owner, sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
	{
		bool		isnull;

		mark = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1, &isnull));
	}
	SPI_freetuptable(SPI_tuptable);
	return mark;
}

static void
set_mark(Oid owner, const char *stream, int64 mark)
{
	static const char *sql =
		"INSERT INTO esrc.scavenge_streams AS s (stream, redacted_below) VALUES ($1, $2) "
		"ON CONFLICT (stream) DO UPDATE SET "
		"redacted_below = pg_catalog.int8larger(s.redacted_below, excluded.redacted_below), "
		"scavenged_at = pg_catalog.now()";
	Oid			argtypes[2] = {TEXTOID, INT8OID};
	Datum		values[2];

	values[0] = CStringGetTextDatum(stream);
	values[1] = Int64GetDatum(mark);
	esrc_run_as_owner(owner, sql, 2, argtypes, values, NULL, SPI_OK_INSERT);
}

/*
 * Take the row of esrc.scavenge_progress (created on first use) for this
 * slice: the pass's position and start.  false if the worker would have
 * to wait for another slice (skip_locked).
 */
static bool
lock_progress(Oid owner, bool skip_locked, char **after, TimestampTz *pass_started_at)
{
	static const char *insert_sql =
		"INSERT INTO esrc.scavenge_progress (id) VALUES (1) ON CONFLICT (id) DO NOTHING";
	const char *select_sql = skip_locked ?
		"SELECT resume_after, pass_started_at FROM esrc.scavenge_progress "
		"WHERE id OPERATOR(pg_catalog.=) 1 FOR UPDATE SKIP LOCKED" :
		"SELECT resume_after, pass_started_at FROM esrc.scavenge_progress "
		"WHERE id OPERATOR(pg_catalog.=) 1 FOR UPDATE";
	bool		isnull;
	Datum		d;

	esrc_run_as_owner(owner, insert_sql, 0, NULL, NULL, NULL, SPI_OK_INSERT);
	esrc_run_as_owner(owner, select_sql, 0, NULL, NULL, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	*after = isnull ? NULL : TextDatumGetCString(d);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	*pass_started_at = isnull ? GetCurrentTransactionStartTimestamp() : DatumGetTimestampTz(d);
	SPI_freetuptable(SPI_tuptable);
	return true;
}

static void
save_progress(Oid owner, const ScavengeResult *res)
{
	static const char *sql =
		"UPDATE esrc.scavenge_progress SET "
		"resume_after = $1, pass_started_at = $2, "
		"passes_completed = passes_completed OPERATOR(pg_catalog.+) $3, "
		"streams_visited = streams_visited OPERATOR(pg_catalog.+) $4, "
		"events_redacted = events_redacted OPERATOR(pg_catalog.+) $5, "
		"last_run_at = pg_catalog.now(), last_run_events = $5, "
		"last_pass_completed_at = CASE WHEN $3 OPERATOR(pg_catalog.>) 0 "
		"THEN pg_catalog.now() ELSE last_pass_completed_at END "
		"WHERE id OPERATOR(pg_catalog.=) 1";
	Oid			argtypes[5] = {TEXTOID, TIMESTAMPTZOID, INT8OID, INT8OID, INT8OID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

	values[0] = res->resume_after ? CStringGetTextDatum(res->resume_after) : (Datum) 0;
	nulls[0] = res->resume_after && !res->done ? ' ' : 'n';
	values[1] = TimestampTzGetDatum(res->pass_started_at);
	nulls[1] = res->done ? 'n' : ' ';
	values[2] = Int64GetDatum(res->done ? 1 : 0);
	values[3] = Int64GetDatum(res->streams_visited);
	values[4] = Int64GetDatum(res->events_redacted);
	esrc_run_as_owner(owner, sql, 5, argtypes, values, nulls, SPI_OK_UPDATE);
}

/*
 * Visit one stream (see the header comment).  Returns false when the
 * slice must end before it (a lock it would wait for, too many locks) or
 * inside it (the batch ended before the stream's hidden events did); true
 * when the stream is done.
 */
static bool
visit_stream(EsrcRedactor *red, Oid owner, const char *stream, TimestampTz now,
			 int64 budget, int *nlocked, ScavengeResult *res)
{
	Datum		stream_datum = CStringGetTextDatum(stream);
	int64		mark = stream_mark(owner, stream);
	int64		fv;
	Snapshot	snap;
	LOCKTAG		tag;
	ItemPointerData *todo;
	int64		ntodo;
	int64		next;
	int64		limit;
	bool		has_rules;

	/* 1: anything to do?  No lock yet. */
	snap = RegisterSnapshot(GetLatestSnapshot());
	has_rules = esrc_rules_first_visible_now(stream, snap, now, &fv);
	UnregisterSnapshot(snap);
	if (!has_rules || fv <= mark)
		return true;

	/* 2: the stream lock; only the slice's first is waited for */
	if (*nlocked >= SCAVENGE_MAX_LOCKED)
		return false;
	esrc_name_locktag(&tag, stream, ESRC_STREAM_LOCK_SPACE);
	if (LockAcquire(&tag, ExclusiveLock, false, *nlocked > 0) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	(*nlocked)++;
	CommandCounterIncrement();
	snap = RegisterSnapshot(GetLatestSnapshot());
	if (!esrc_rules_first_visible_now(stream, snap, now, &fv) || fv <= mark)
	{
		UnregisterSnapshot(snap);
		return true;
	}

	/* 3: redact what is hidden and not redacted yet, a bounded batch */
	limit = Min(budget, SCAVENGE_STREAM_BATCH);
	(void) esrc_redactor_collect(red, stream_datum, mark, fv, limit, snap,
								 &todo, &ntodo, &next);
	esrc_redactor_redact(red, todo, ntodo, snap, NULL);
	UnregisterSnapshot(snap);
	pfree(todo);
	res->events_redacted += ntodo;
	if (ntodo > 0)
		res->streams_redacted++;
	/*
	 * next is the version after the last one examined: where the batch
	 * stopped, or, the versions being contiguous, min(fv, head + 1) -- never
	 * beyond the stream's end, so that events appended later below a
	 * truncate_before past the end are still redacted.
	 */
	if (next > mark)
		set_mark(owner, stream, next);
	/* stopped inside the stream: the next slice resumes there */
	return !(ntodo == limit && next < fv);
}

/*
 * One slice in the current transaction: at most max_events events
 * redacted and max_events streams looked at.  skip_locked: give up
 * (res->busy) rather than wait for another slice.
 */
static void
scavenge_slice(int64 max_events, bool skip_locked, const char *reason,
			   ScavengeResult *res)
{
	Oid			owner = esrc_relation_owner(esrc_relation_oid("scavenge_progress"));
	Oid			session_user = GetSessionUserId();
	Oid			current_user = GetUserId();
	MemoryContext cxt;
	MemoryContext old;
	EsrcRedactor red;
	TimestampTz now;
	char	   *after = NULL;
	int			nlocked = 0;
	bool		stop = false;
	MemoryContext outer = CurrentMemoryContext;

	memset(res, 0, sizeof(ScavengeResult));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (!lock_progress(owner, skip_locked, &after, &res->pass_started_at))
	{
		res->busy = true;
		SPI_finish();
		return;
	}
	res->resume_after = after;
	now = scavenge_now();
	esrc_redactor_open(&red);

	cxt = AllocSetContextCreate(CurrentMemoryContext, "esrc scavenge stream",
								ALLOCSET_DEFAULT_SIZES);
	while (!stop)
	{
		char	   *names[SCAVENGE_NAMES];
		int			n = next_streams(res->resume_after, names, SCAVENGE_NAMES);
		int			i;

		if (n == 0)
		{
			res->done = true;
			break;
		}
		for (i = 0; i < n; i++)
		{
			bool		finished;

			if (res->streams_visited >= max_events ||
				res->events_redacted >= max_events)
			{
				stop = true;
				break;
			}
			CHECK_FOR_INTERRUPTS();
			res->streams_visited++;
			old = MemoryContextSwitchTo(cxt);
			finished = visit_stream(&red, owner, names[i], now,
									max_events - res->events_redacted, &nlocked, res);
			MemoryContextSwitchTo(old);
			MemoryContextReset(cxt);
			if (!finished)
			{
				stop = true;
				break;
			}
			res->resume_after = names[i];
		}
	}
	MemoryContextDelete(cxt);
	esrc_redactor_close(&red);

	save_progress(owner, res);
	if (res->events_redacted > 0)
	{
		char	   *details = psprintf("{\"streams_visited\": " INT64_FORMAT
									   ", \"streams_redacted\": " INT64_FORMAT
									   ", \"pass_done\": %s}",
									   res->streams_visited, res->streams_redacted,
									   res->done ? "true" : "false");

		esrc_record_erasure("scavenge", NULL, res->events_redacted, reason,
							DatumGetJsonbP(DirectFunctionCall1(jsonb_in,
															   CStringGetDatum(details))),
							session_user, current_user);
	}
	/* the names were read in SPI's memory, which SPI_finish frees */
	if (res->resume_after != NULL)
		res->resume_after = MemoryContextStrdup(outer, res->resume_after);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
}

/*
 * esrc.scavenge(max_events DEFAULT 10000) -> (streams_visited,
 * streams_redacted, events_redacted, done, pass_started_at, resume_after):
 * one slice in the caller's transaction.  docs/lifecycle.md is the reference.
 */
Datum
esrc_scavenge(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};
	ScavengeResult res;
	int32		max_events;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("max_events must not be null"),
				 errhint("Pass the most events one call may redact, e.g. 10000.")));
	max_events = PG_GETARG_INT32(0);
	if (max_events <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_events must be positive"),
				 errdetail("The value given was %d.", max_events),
				 errhint("Pass the most events one call may redact, e.g. 10000.")));
	/* the log is written without the executor's read-only check */
	PreventCommandIfReadOnly("esrc.scavenge()");
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "esrc.scavenge() must return a row");

	scavenge_slice(max_events, false, "events hidden by stream rules (esrc.scavenge)", &res);

	values[0] = Int64GetDatum(res.streams_visited);
	values[1] = Int64GetDatum(res.streams_redacted);
	values[2] = Int64GetDatum(res.events_redacted);
	values[3] = BoolGetDatum(res.done);
	values[4] = TimestampTzGetDatum(res.pass_started_at);
	values[5] = res.resume_after && !res.done ? CStringGetTextDatum(res.resume_after) : (Datum) 0;
	nulls[5] = !(res.resume_after && !res.done);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/* ----------------------------------------------------------------
 * The worker's slice (projworker.c calls it every esrc.scavenge_interval)
 * ----------------------------------------------------------------
 */

/* esrc's tables a slice writes or reads, locked up front without waiting */
static const struct
{
	const char *name;
	LOCKMODE	mode;
}			slice_tables[] = {
	{"events", RowExclusiveLock},
	{"stream_rules", AccessShareLock},
	{"scavenge_progress", RowExclusiveLock},
	{"scavenge_streams", RowExclusiveLock},
	{"erasures", RowExclusiveLock},
};

/*
 * May the slice run: esrc installed and updated, and no DDL holding one of
 * its tables?  Like projworker.c's begin_xact, it takes every table lock
 * without waiting, so that it never queues behind a DROP EXTENSION while
 * holding another of them (a deadlock); on a conflict the slice is skipped.
 */
static bool
slice_tables_locked(void)
{
	Oid			nsp;
	int			i;

	if (!OidIsValid(get_extension_oid("esrc", true)))
		return false;
	nsp = get_namespace_oid("esrc", true);
	if (!OidIsValid(nsp))
		return false;
	for (i = 0; i < (int) lengthof(slice_tables); i++)
	{
		Oid			relid = get_relname_relid(slice_tables[i].name, nsp);

		if (!OidIsValid(relid) ||
			!ConditionalLockRelationOid(relid, slice_tables[i].mode))
			return false;
	}
	return true;
}

/*
 * One slice of esrc.scavenge_max_events in a transaction of its own.  An
 * error is logged (WARNING) and the transaction rolled back: the next
 * interval tries again, the worker goes on.  Called outside a transaction.
 */
void
esrc_scavenge_worker_slice(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	ScavengeResult res;

	memset(&res, 0, sizeof(res));
	PG_TRY();
	{
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, "esrc scavenge slice");
		if (slice_tables_locked())
			scavenge_slice(esrc_scavenge_max_events, true,
						   "events hidden by stream rules (esrc.scavenge_interval)", &res);
		PopActiveSnapshot();
		CommitTransactionCommand();
		pgstat_report_activity(STATE_IDLE, "");
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		MemoryContextSwitchTo(cxt);
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("esrc scavenger: slice rolled back: %s", edata->message),
				 errhint("The next slice, after esrc.scavenge_interval, tries again.")));
		FreeErrorData(edata);
		pgstat_report_activity(STATE_IDLE, "");
		return;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	if (res.events_redacted > 0)
		ereport(LOG,
				(errmsg("esrc scavenger: redacted " INT64_FORMAT " events in " INT64_FORMAT " streams",
						res.events_redacted, res.streams_redacted)));
}

/*
 * After a change of the stream rules: events may be hidden now, so the
 * worker that scavenges this database (if it is not running) starts at
 * commit.  Nothing when scavenging is off.
 */
void
esrc_scavenger_wake_at_commit(void)
{
	if (esrc_scavenge_interval_s > 0 && esrc_scavenger_wake_hook != NULL)
		esrc_scavenger_wake_hook();
}
