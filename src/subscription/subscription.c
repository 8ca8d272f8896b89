/*-------------------------------------------------------------------------
 *
 * subscription.c
 *	  Subscriptions for SQL consumers: create/drop/reset/grant/revoke, the
 *	  catalog esrc.subscriptions and its checkpoints, esrc.poll() and
 *	  esrc.ack(), esrc.stream_partition() and the rows of
 *	  esrc.subscription_status.
 *
 * A subscription follows some categories (or all) with P partitions;
 * stream s is in partition esrc.stream_partition(s, P), Kafka's murmur2
 * partitioner, so partition p holds the streams the forwarder sends to
 * partition p of a topic of P partitions.  Every partition has a
 * checkpoint in esrc.subscription_checkpoints: the last position it has
 * processed.  Members of a consumer group hold partitions by lease
 * (sublease.c).
 *
 * esrc.poll() takes or renews the member's leases, reads their
 * checkpoints, and returns the events of its partitions after them, up
 * to the read horizon of the subscription's categories (order.c), in
 * position order, at most max_count; filters on types and metadata are
 * applied here.  With nothing to return it registers as waiting
 * (subwait.c) and sleeps on its latch until a commit that concerns it, or
 * a change of the group, or the end of the wait; after each sleep it checks
 * the caller's rights again with fresh catalogs (recheck_rights), since a
 * REVOKE may have committed meanwhile.  It writes the table
 * only when it returns nothing: then the checkpoints move past what it
 * scanned (events of its partitions that the filters dropped), so that an
 * idle or filtered partition does not fall behind.
 *
 * esrc.ack() moves the checkpoints of the member's partitions, in the
 * caller's transaction, to a position its last poll covered.  It refuses
 * (40001) when a checkpoint is no longer what the member's poll read:
 * another member (after the lease passed) or a reset has moved it, and
 * the caller's results for those events must not commit.  That check,
 * not the lease, is what makes effects written in the same transaction
 * exactly once.  A poll given ack does the same (ack_member) before it
 * fetches, and then does not wait: one autocommit statement per batch
 * for consumers with effects outside the database (at-least-once).
 *
 * The catalog is written and read through SPI as the owner of
 * esrc.subscriptions, security-restricted, with every operator
 * qualified (subcatalog.c); the functions pin search_path.  The events are read as the
 * caller, with the caller's privilege on esrc.events, by index scans
 * (logscan.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "base/base.h"
#include "log/log.h"
#include "subscription/subscription.h"

/* rows a poll may examine beyond those it returns, before it stops */
#define POLL_SCAN_BUDGET		10000

PG_FUNCTION_INFO_V1(esrc_poll);
PG_FUNCTION_INFO_V1(esrc_ack);
PG_FUNCTION_INFO_V1(esrc_subscription_status);

static int64 ack_position_arg(FunctionCallInfo fcinfo, int argno, const char *what,
							  bool *given);
static int	ack_member(SubDef *def, const char *member, bool given, int64 position,
					   bool in_poll, int32 *held, int64 *now_cps, int *nheld_out);

/*
 * The subscription the last poll of this transaction looked up, for an ack
 * in the same transaction by the same role, which then needs no query to
 * find it (the consumer pattern: poll, results, ack, commit).  Lives in a
 * child of TopTransactionContext, so it goes with the transaction.
 */
static struct
{
	LocalTransactionId lxid;
	Oid			userid;
	MemoryContext cxt;
	SubDef	   *def;
}			last_poll;

static MemoryContext
last_poll_context(void)
{
	if (last_poll.lxid != esrc_my_lxid() || last_poll.cxt == NULL)
	{
		last_poll.cxt = AllocSetContextCreate(TopTransactionContext, "esrc last poll",
											  ALLOCSET_SMALL_SIZES);
		last_poll.lxid = esrc_my_lxid();
	}
	else
		MemoryContextReset(last_poll.cxt);
	last_poll.def = NULL;
	return last_poll.cxt;
}

static SubDef *
last_poll_def(const char *name)
{
	if (last_poll.lxid == esrc_my_lxid() && last_poll.cxt != NULL &&
		last_poll.def != NULL && last_poll.userid == GetUserId() &&
		strcmp(last_poll.def->name, name) == 0)
		return last_poll.def;
	return NULL;
}

/* ----------------------------------------------------------------
 * esrc.poll
 * ----------------------------------------------------------------
 */

static int64
interval_ms(Interval *iv)
{
	int64		ms;

	ms = iv->time / 1000 + (int64) iv->day * 86400000 +
		(int64) iv->month * INT64CONST(30) * 86400000;
	return ms;
}

/* Does the event in slot carry every one of tags[0 .. ntags - 1]? */
static bool
has_tags(TupleTableSlot *slot, char **tags, int ntags)
{
	Datum	   *elems;
	int			n;
	int			i;

	if (slot->tts_tupleDescriptor->natts < Anum_events_tags ||
		slot->tts_isnull[Anum_events_tags - 1])
		return false;
	deconstruct_array(DatumGetArrayTypeP(slot->tts_values[Anum_events_tags - 1]),
					  TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
	for (i = 0; i < ntags; i++)
	{
		bool		found = false;
		int			j;

		for (j = 0; j < n && !found; j++)
		{
			text	   *t = DatumGetTextPP(elems[j]);

			found = VARSIZE_ANY_EXHDR(t) == strlen(tags[i]) &&
				memcmp(VARDATA_ANY(t), tags[i], VARSIZE_ANY_EXHDR(t)) == 0;
		}
		if (!found)
			return false;
	}
	return true;
}

/* Does an event of the scan pass the subscription's type and metadata filters? */
static bool
passes_filters(SubDef *def, TupleTableSlot *slot)
{
	if (def->ntypes > 0)
	{
		text	   *type = DatumGetTextPP(slot->tts_values[Anum_events_type - 1]);
		int			len = VARSIZE_ANY_EXHDR(type);
		bool		match = false;
		int			i;

		for (i = 0; i < def->ntypes && !match; i++)
			match = strlen(def->types[i]) == (size_t) len &&
				memcmp(def->types[i], VARDATA_ANY(type), len) == 0;
		if (!match)
			return false;
	}
	if (def->ntags > 0 && !has_tags(slot, def->tags, def->ntags))
		return false;
	if (def->metadata != NULL)
	{
		if (slot->tts_isnull[Anum_events_metadata - 1])
			return false;
		if (!DatumGetBool(DirectFunctionCall2(jsonb_contains,
											  slot->tts_values[Anum_events_metadata - 1],
											  JsonbPGetDatum(def->metadata))))
			return false;
	}
	return true;
}

/*
 * One pass of a poll: the events of the held partitions (held_map[p])
 * after from[p], up to horizon, into the tuplestore, at most max_count.
 * Returns how many; *covered is the last position the pass covered (every
 * event of the held partitions in (from[p], *covered] was returned or
 * filtered out).
 */
static int
scan_events(SubDef *def, const bool *held_map, const int64 *from, int64 lo,
			int64 horizon, int max_count, Tuplestorestate *ts, TupleDesc desc,
			int64 *covered)
{
	int			nscans = def->ncats == 0 ? 1 : def->ncats;
	EsrcLogScan **scans;
	TupleTableSlot **cur;
	Snapshot	snap;
	EsrcRuleFilter *rules;
	int			examined = 0;
	int			budget = Max(POLL_SCAN_BUDGET, 4 * max_count);
	int			n = 0;
	int			i;

	*covered = Max(lo, horizon);
	if (lo >= horizon)
		return 0;

	/* a snapshot taken after the horizon was (read.c) */
	snap = RegisterSnapshot(GetLatestSnapshot());
	rules = esrc_rules_begin(snap);
	scans = palloc(sizeof(EsrcLogScan *) * nscans);
	cur = palloc(sizeof(TupleTableSlot *) * nscans);
	for (i = 0; i < nscans; i++)
	{
		if (def->ncats == 0)
			scans[i] = esrc_log_begin(ESRC_LOG_BY_POSITION, (Datum) 0, lo + 1, horizon,
									  ForwardScanDirection, snap);
		else
			scans[i] = esrc_log_begin(ESRC_LOG_BY_CATEGORY,
									  CStringGetTextDatum(def->cats[i]), lo + 1, horizon,
									  ForwardScanDirection, snap);
		cur[i] = esrc_log_next(scans[i]);
	}

	for (;;)
	{
		TupleTableSlot *slot = NULL;
		int			which = -1;
		int64		pos;
		text	   *stream;
		int			p;

		/* the lowest position among the scans (merge of categories) */
		for (i = 0; i < nscans; i++)
			if (cur[i] != NULL &&
				(slot == NULL ||
				 DatumGetInt64(cur[i]->tts_values[Anum_events_position - 1]) <
				 DatumGetInt64(slot->tts_values[Anum_events_position - 1])))
			{
				slot = cur[i];
				which = i;
			}
		if (slot == NULL)
			break;				/* all done: covered up to the horizon */

		pos = DatumGetInt64(slot->tts_values[Anum_events_position - 1]);
		stream = DatumGetTextPP(slot->tts_values[Anum_events_stream - 1]);
		p = stream_partition(VARDATA_ANY(stream), VARSIZE_ANY_EXHDR(stream), def->npartitions);
		/* an event the stream rules hide is passed over like a filtered one */
		if (held_map[p] && pos > from[p] && passes_filters(def, slot) &&
			(rules == NULL || esrc_rules_visible(rules, slot)))
		{
			Datum		values[ESRC_EVENT_NATTS_MAX];
			bool		isnull[ESRC_EVENT_NATTS_MAX];

			esrc_event_values(slot, desc->natts, values, isnull);
			tuplestore_putvalues(ts, desc, values, isnull);
			if (++n >= max_count)
			{
				*covered = pos;
				break;
			}
		}
		if (++examined >= budget)
		{
			*covered = pos;
			break;
		}
		cur[which] = esrc_log_next(scans[which]);
	}

	for (i = 0; i < nscans; i++)
		esrc_log_end(scans[i]);
	if (rules != NULL)
		esrc_rules_end(rules);
	UnregisterSnapshot(snap);
	return n;
}

static void
check_event_rowtype(ReturnSetInfo *rsinfo)
{
	esrc_check_event_rowtype(rsinfo->setDesc);
}

/* The state of one esrc.poll() call */
typedef struct PollState
{
	SubDef	   *def;
	const char *member;
	int32		max_count;
	int64		wait_ms;
	TimestampTz deadline;
	ReturnSetInfo *rsinfo;
	MemoryContext loopcxt;
	int32	   *held;			/* partitions held, ascending */
	int			nheld;
	bool	   *held_map;		/* per partition */
	bool	   *taken;			/* per partition: taken by this pass */
	int64	   *cps;			/* checkpoints of held[], as read */
	int64	   *from;			/* per partition: scanned past, this call */
	int64	   *table_cp;		/* per partition: checkpoint last read */
	int			n;				/* events returned */
	int64		covered;		/* the last pass covered up to here */
	bool		waiting;		/* registered in subwait.c */
	bool		slept;			/* a sleep since the rights were checked */
	bool		first_pass;		/* def->checkpoints are fresh */
} PollState;

/*
 * After a sleep, before the poll hands on events that arrived meanwhile:
 * may the caller still read the log and consume the subscription?  Asked
 * of the catalogs as they are now (logaccess.c), since the poll's
 * transaction began before a REVOKE that committed during its sleep.
 */
static void
recheck_rights(PollState *st)
{
	esrc_recheck_log_readable(GetUserId(),
							  psprintf("The poll of subscription \"%s\" would return the events that arrived while it waited.",
									   st->def->name));
	check_consumer(st->def);
	st->slept = false;
}

/*
 * The passes of a poll: take the leases, read the checkpoints, scan; with
 * nothing found, register as waiting, and sleep until woken, then check
 * the caller's rights again and scan again.
 */
static void
poll_loop(PollState *st)
{
	SubDef	   *def = st->def;

	for (;;)
	{
		bool		others_over;
		bool		released;
		int64		lo = PG_INT64_MAX;
		int			i;
		int			p;

		if (st->waiting)
			ResetLatch(MyLatch);
		MemoryContextReset(st->loopcxt);
		MemoryContextSwitchTo(st->loopcxt);
		if (st->slept)
			recheck_rights(st);

		st->nheld = esrc_lease_poll(&def->key, def->npartitions, st->member,
									esrc_subscription_lease_ms, st->held, st->taken,
									&others_over, &released);
		if (released || others_over)
			esrc_wake_subscription(&def->key);
		if (st->nheld > 0)
		{
			int64		horizon;

			/*
			 * The checkpoints of partitions we kept: as read with the
			 * subscription (first pass) or by an earlier pass; nobody else
			 * moves them while we hold them (after our lease, another
			 * member can, and then our ack fails with 40001).  Of a
			 * partition we just took: from the table, now, since its last
			 * holder may have acknowledged it after we read the
			 * subscription.  So a pass woken by a commit runs no query.
			 */
			{
				bool		need_read = false;

				for (i = 0; i < st->nheld; i++)
				{
					p = st->held[i];
					if (st->taken[p])
						st->cps[i] = -1;
					else
						st->cps[i] = st->first_pass ? def->checkpoints[p] :
							st->held_map[p] ? st->table_cp[p] : -1;
					if (st->cps[i] < 0)
						need_read = true;
				}
				if (need_read)
					read_checkpoints(def, st->nheld, st->held, st->cps);
				st->first_pass = false;
			}
			memset(st->held_map, 0, sizeof(bool) * def->npartitions);
			for (i = 0; i < st->nheld; i++)
			{
				p = st->held[i];
				st->held_map[p] = true;
				/* a reset moved it back: scan again from there */
				if (st->cps[i] < st->table_cp[p])
					st->from[p] = -1;
				st->table_cp[p] = st->cps[i];
				st->from[p] = Max(st->from[p], st->cps[i]);
				lo = Min(lo, st->from[p]);
			}
			horizon = subscription_horizon(def);
			st->n = scan_events(def, st->held_map, st->from, lo, horizon, st->max_count,
								st->rsinfo->setResult, st->rsinfo->setDesc, &st->covered);
			esrc_lease_record(&def->key, st->member, st->nheld, st->held,
							  st->cps, st->covered);
			if (st->n > 0)
				return;
			for (i = 0; i < st->nheld; i++)
				st->from[st->held[i]] = Max(st->from[st->held[i]], st->covered);
		}
		if (st->wait_ms == 0 || GetCurrentTimestamp() >= st->deadline)
			return;
		if (!st->waiting)
		{
			/* register, then check once more before the first sleep */
			esrc_wait_register(&def->key, def->cathashes, def->ncats,
							   def->ncats == 0);
			st->waiting = true;
			ResetLatch(MyLatch);
			continue;
		}
		{
			long		left = (long) ((st->deadline - GetCurrentTimestamp()) / 1000);

			/* wake up to renew the leases well before they pass */
			(void) esrc_wait_sleep(Max(1, Min(left, esrc_subscription_lease_ms / 3)));
			st->slept = true;
		}
	}
}

/*
 * A poll that returns nothing moves the checkpoints past what it scanned,
 * so that filtered-out events and idle partitions do not stay behind;
 * only from the values it read, as an ack would.
 */
static void
advance_idle(PollState *st)
{
	SubDef	   *def = st->def;
	int64	   *expected = palloc(sizeof(int64) * Max(st->nheld, 1));
	bool		any = false;
	bool		moved_by_other;
	int32		other;
	int			i;

	for (i = 0; i < st->nheld; i++)
	{
		expected[i] = st->table_cp[st->held[i]];
		if (st->covered > expected[i])
			any = true;
	}
	if (!any)
		return;
	(void) write_checkpoints(def, st->nheld, st->held, expected, st->covered,
							 &moved_by_other, &other);
	if (moved_by_other)
		return;
	for (i = 0; i < st->nheld; i++)
		expected[i] = Max(expected[i], st->covered);
	esrc_lease_record(&def->key, st->member, st->nheld, st->held, expected, -1);
}

/*
 * The ack of a poll (its argument ack), before it fetches: exactly what
 * esrc.ack(subscription, member, ack) does, in the poll's transaction.
 * The checkpoints that lookup_subscription read before it are then stale
 * for the partitions that moved; they become what the ack left, so that
 * the first pass starts after the acknowledged events.
 */
static void
poll_ack(PollState *st, int64 position)
{
	SubDef	   *def = st->def;
	int32	   *held = palloc(sizeof(int32) * def->npartitions);
	int64	   *now_cps = palloc(sizeof(int64) * def->npartitions);
	int			nheld;
	int			i;

	(void) ack_member(def, st->member, true, position, true,
					  held, now_cps, &nheld);
	for (i = 0; i < nheld; i++)
		def->checkpoints[held[i]] = now_cps[i];
	pfree(held);
	pfree(now_cps);
}

/*
 * esrc.poll(subscription, member, max_count DEFAULT 100, wait DEFAULT '0',
 *			 ack DEFAULT NULL)
 *
 * With ack, the poll first acknowledges up to it (poll_ack) and then does
 * not wait: the ack's row locks and its transaction stay open until the
 * poll's statement ends, and a wait would hold them, and delay the ack's
 * commit, for as long as it lasts.
 */
Datum
esrc_poll(PG_FUNCTION_ARGS)
{
	char	   *subname = subscription_name_arg(fcinfo, 0);
	MemoryContext callcxt = CurrentMemoryContext;
	PollState  *st = palloc0(sizeof(PollState));
	bool		acking;
	int64		ack;
	int			np;

	st->member = member_name_arg(fcinfo, 1);
	st->rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	if (PG_ARGISNULL(2) || PG_GETARG_INT32(2) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_count must be positive"),
				 PG_ARGISNULL(2) ? 0 : errdetail("The value given was %d.", PG_GETARG_INT32(2))));
	st->max_count = PG_GETARG_INT32(2);
	if (!PG_ARGISNULL(3))
	{
		st->wait_ms = interval_ms(PG_GETARG_INTERVAL_P(3));
		if (st->wait_ms < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("wait must not be negative")));
		st->wait_ms = Min(st->wait_ms, (int64) esrc_poll_max_wait_ms);
	}
	ack = ack_position_arg(fcinfo, 4, "ack", &acking);
	if (acking)
		st->wait_ms = 0;
	st->deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), st->wait_ms);

	InitMaterializedSRF(fcinfo, 0);
	check_event_rowtype(st->rsinfo);

	SPI_connect();
	st->def = lookup_subscription(subname, last_poll_context(), true);
	check_consumer(st->def);
	check_not_projection(st->def);
	last_poll.def = st->def;
	last_poll.userid = GetUserId();
	if (acking)
		poll_ack(st, ack);

	np = st->def->npartitions;
	st->held = MemoryContextAlloc(callcxt, sizeof(int32) * np);
	st->held_map = MemoryContextAllocZero(callcxt, sizeof(bool) * np);
	st->taken = MemoryContextAllocZero(callcxt, sizeof(bool) * np);
	st->cps = MemoryContextAlloc(callcxt, sizeof(int64) * np);
	st->from = MemoryContextAlloc(callcxt, sizeof(int64) * np);
	st->table_cp = MemoryContextAlloc(callcxt, sizeof(int64) * np);
	memset(st->from, 0xff, sizeof(int64) * np);	/* all -1 */
	memset(st->table_cp, 0xff, sizeof(int64) * np);
	st->covered = -1;
	st->first_pass = true;
	st->loopcxt = AllocSetContextCreate(callcxt, "esrc poll", ALLOCSET_DEFAULT_SIZES);

	PG_TRY();
	{
		poll_loop(st);
	}
	PG_FINALLY();
	{
		esrc_wait_unregister();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(callcxt);

	/* (a read-only transaction leaves them to the next ack) */
	if (st->n == 0 && st->nheld > 0 && !XactReadOnly)
		advance_idle(st);
	SPI_finish();
	MemoryContextDelete(st->loopcxt);
	return (Datum) 0;
}

/* ----------------------------------------------------------------
 * esrc.ack
 * ----------------------------------------------------------------
 */

/*
 * A position to acknowledge, from argument argno (called what in the
 * error): NULL stays *given = false; a negative one is refused.
 */
static int64
ack_position_arg(FunctionCallInfo fcinfo, int argno, const char *what, bool *given)
{
	int64		position;

	*given = !PG_ARGISNULL(argno);
	if (!*given)
		return -1;
	position = PG_GETARG_INT64(argno);
	if (position < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", what),
				 errdetail("The value given was " INT64_FORMAT ".", position)));
	return position;
}

/*
 * The acknowledgement of esrc.ack and of esrc.poll(..., ack): move the
 * checkpoints of the partitions member holds from what its last poll read
 * to position (given = false: to all that poll covered), in the caller's
 * transaction, and record the new values in the leases.  Returns how many
 * moved.  On return held[0 .. *nheld_out - 1] (def->npartitions entries)
 * are the partitions the member holds and now_cps[] their checkpoints as
 * they now are in the table, as seen by this transaction.  in_poll says
 * who asks, for the messages.  Needs SPI connected; raises 25006 in a
 * read-only transaction (before anything else), then 55000, 22023 and
 * 40001 as docs/subscriptions.md lists them.
 */
static int
ack_member(SubDef *def, const char *member, bool given, int64 position,
		   bool in_poll, int32 *held, int64 *now_cps, int *nheld_out)
{
	int64		covered;
	int			nheld;
	int			moved;
	bool		moved_by_other;
	int32		other = 0;
	int			i;

	PreventCommandIfReadOnly(in_poll ? "esrc.poll() with ack" : "esrc.ack()");
	nheld = esrc_lease_ack(&def->key, def->npartitions, member,
						   esrc_subscription_lease_ms, held, now_cps, &covered);
	if (nheld <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("member \"%s\" holds no partition of subscription \"%s\"",
						member, def->name),
				 errdetail(nheld < 0 ? "It has not polled within esrc.subscription_lease, or never." :
						   "Its share of the partitions is empty: the group has more members than partitions."),
				 errhint("Poll, then acknowledge what the poll returned.")));
	for (i = 0; i < nheld; i++)
		if (now_cps[i] < 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("member \"%s\" has not polled partition %d of subscription \"%s\"",
							member, held[i], def->name),
					 errhint("Poll, then acknowledge what the poll returned.")));
	if (!given)
		position = covered;
	if (position > covered)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("position " INT64_FORMAT " is beyond what the last poll of member \"%s\" covered",
						position, member),
				 errdetail("That poll covered positions up to " INT64_FORMAT ".", covered),
				 in_poll ? errhint("Acknowledge a position the member received.") :
				 errhint("Acknowledge a position the member received, or null for everything its last poll covered.")));

	moved = write_checkpoints(def, nheld, held, now_cps, position, &moved_by_other, &other);
	if (moved_by_other)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("the checkpoint of partition %d of subscription \"%s\" moved since member \"%s\" polled",
						other, def->name, member),
				 errdetail("Another member took the partition after the lease passed, or the subscription was reset; the events may have been processed elsewhere."),
				 errhint("Roll back and poll again.")));
	/* what write_checkpoints verified: each is where it was read, or position */
	for (i = 0; i < nheld; i++)
		now_cps[i] = Max(now_cps[i], position);
	esrc_lease_record(&def->key, member, nheld, held, now_cps, -1);
	*nheld_out = nheld;
	return moved;
}

/*
 * esrc.ack(subscription, member, position DEFAULT NULL): returns how many
 * of the member's partitions moved.
 */
Datum
esrc_ack(PG_FUNCTION_ARGS)
{
	char	   *subname = subscription_name_arg(fcinfo, 0);
	char	   *member = member_name_arg(fcinfo, 1);
	SubDef	   *def;
	bool		given;
	int64		position = ack_position_arg(fcinfo, 2, "position", &given);
	int			nheld;
	int			moved;

	SPI_connect();
	/* polled in this transaction: looked up and checked then */
	def = last_poll_def(subname);
	if (def == NULL)
	{
		def = lookup_subscription(subname, CurrentMemoryContext, false);
		check_consumer(def);
		check_not_projection(def);
	}
	moved = ack_member(def, member, given, position, false,
					   palloc(sizeof(int32) * def->npartitions),
					   palloc(sizeof(int64) * def->npartitions), &nheld);
	SPI_finish();
	PG_RETURN_INT32(moved);
}

/* ----------------------------------------------------------------
 * Batches for members in the server (subscription.h)
 * ----------------------------------------------------------------
 */

void
esrc_sub_fetch(SubDef *def, const char *member, const bool *skip, int max_count,
			   Tuplestorestate *ts, TupleDesc desc, EsrcSubBatch *b)
{
	int			np = def->npartitions;
	bool		others_over;
	bool		released;
	bool	   *taken = palloc0(sizeof(bool) * np);
	int64	   *from = palloc(sizeof(int64) * np);
	int64		horizon;
	int			i;

	b->held = palloc(sizeof(int32) * np);
	b->cps = palloc(sizeof(int64) * np);
	b->fetched = palloc0(sizeof(bool) * np);
	b->n = 0;
	b->to_horizon = false;
	b->lo = PG_INT64_MAX;
	b->covered = -1;
	b->nheld = esrc_lease_poll(&def->key, np, member, esrc_subscription_lease_ms,
							   b->held, taken, &others_over, &released);
	if (released || others_over)
		esrc_wake_subscription(&def->key);
	if (b->nheld <= 0)
	{
		b->nheld = 0;
		return;
	}
	read_checkpoints(def, b->nheld, b->held, b->cps);
	for (i = 0; i < b->nheld; i++)
	{
		int			p = b->held[i];

		from[p] = b->cps[i];
		if (skip != NULL && skip[p])
			continue;
		b->fetched[p] = true;
		b->lo = Min(b->lo, b->cps[i]);
	}
	if (b->lo == PG_INT64_MAX)
	{
		/* every partition held is skipped: only the leases were renewed */
		esrc_lease_record(&def->key, member, b->nheld, b->held, b->cps, -1);
		return;
	}
	horizon = subscription_horizon(def);
	b->n = scan_events(def, b->fetched, from, b->lo, horizon, max_count, ts, desc,
					   &b->covered);
	b->to_horizon = b->covered >= horizon;
	esrc_lease_record(&def->key, member, b->nheld, b->held, b->cps, b->covered);
}

void
esrc_sub_advance(SubDef *def, const char *member, EsrcSubBatch *b,
				 const bool *include, int64 position)
{
	int32	   *parts = palloc(sizeof(int32) * Max(b->nheld, 1));
	int64	   *expected = palloc(sizeof(int64) * Max(b->nheld, 1));
	int64	   *now_cps = palloc(sizeof(int64) * Max(b->nheld, 1));
	bool		moved_by_other;
	int32		other = 0;
	int			n = 0;
	int			i;

	for (i = 0; i < b->nheld; i++)
		if (include[b->held[i]] && b->cps[i] < position)
		{
			parts[n] = b->held[i];
			expected[n++] = b->cps[i];
		}
	if (n == 0)
		return;
	(void) write_checkpoints(def, n, parts, expected, position, &moved_by_other, &other);
	if (moved_by_other)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("the checkpoint of partition %d of subscription \"%s\" moved since member \"%s\" polled",
						other, def->name, member),
				 errdetail("Another member took the partition after the lease passed, or the subscription was reset.")));
	for (i = 0; i < b->nheld; i++)
	{
		now_cps[i] = b->cps[i];
		if (include[b->held[i]])
			now_cps[i] = Max(b->cps[i], position);
	}
	esrc_lease_record(&def->key, member, b->nheld, b->held, now_cps, -1);
	memcpy(b->cps, now_cps, sizeof(int64) * b->nheld);
}

/* ----------------------------------------------------------------
 * esrc.subscription_status
 * ----------------------------------------------------------------
 */

/*
 * esrc.subscription_status_internal(): per subscription and partition,
 * the holder, its lease, the checkpoint, and how far behind the
 * partition is: events after the checkpoint up to the horizon that the
 * filters pass, and the age of the oldest.  Scans the events not yet
 * acknowledged.
 */
Datum
esrc_subscription_status(PG_FUNCTION_ARGS)
{
	static const char *subs_sql =
		"SELECT name FROM esrc.subscriptions ORDER BY name";
	static const char *cps_sql =
		"SELECT partition, checkpoint FROM esrc.subscription_checkpoints "
		"WHERE subscription_id OPERATOR(pg_catalog.=) $1 ORDER BY partition";
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext callcxt = CurrentMemoryContext;
	char	  **names;
	int			nsubs;
	int			s;
	TimestampTz now = GetCurrentTimestamp();

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	catalog_run(subs_sql, 0, NULL, NULL, NULL, SPI_OK_SELECT);
	nsubs = (int) SPI_processed;
	names = MemoryContextAlloc(callcxt, sizeof(char *) * Max(nsubs, 1));
	for (s = 0; s < nsubs; s++)
		names[s] = MemoryContextStrdup(callcxt, SPI_getvalue(SPI_tuptable->vals[s], SPI_tuptable->tupdesc, 1));
	SPI_freetuptable(SPI_tuptable);

	for (s = 0; s < nsubs; s++)
	{
		SubDef	   *def = lookup_subscription(names[s], callcxt, false);
		int			np = def->npartitions;
		int64	   *cp = palloc(sizeof(int64) * np);
		int64	   *behind = palloc0(sizeof(int64) * np);
		TimestampTz *oldest = palloc0(sizeof(TimestampTz) * np);
		char	  **holders = palloc(sizeof(char *) * np);
		TimestampTz *expires = palloc(sizeof(TimestampTz) * np);
		Oid			argtypes[1] = {INT8OID};
		Datum		values[1];
		int64		lo = PG_INT64_MAX;
		int64		horizon;
		int			p;
		uint64		r;

		values[0] = Int64GetDatum(def->id);
		catalog_run(cps_sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
		for (p = 0; p < np; p++)
			cp[p] = -1;
		for (r = 0; r < SPI_processed; r++)
		{
			bool		isnull;
			int32		part = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));

			if (part >= 0 && part < np)
				cp[part] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull));
		}
		SPI_freetuptable(SPI_tuptable);
		for (p = 0; p < np; p++)
			if (cp[p] >= 0)
				lo = Min(lo, cp[p]);
		esrc_lease_holders(&def->key, np, holders, expires);

		horizon = subscription_horizon(def);
		if (lo < horizon)
		{
			Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
			int			nscans = def->ncats == 0 ? 1 : def->ncats;
			int			i;

			for (i = 0; i < nscans; i++)
			{
				EsrcLogScan *scan;
				TupleTableSlot *slot;

				if (def->ncats == 0)
					scan = esrc_log_begin(ESRC_LOG_BY_POSITION, (Datum) 0, lo + 1, horizon,
										  ForwardScanDirection, snap);
				else
					scan = esrc_log_begin(ESRC_LOG_BY_CATEGORY,
										  CStringGetTextDatum(def->cats[i]), lo + 1, horizon,
										  ForwardScanDirection, snap);
				while ((slot = esrc_log_next(scan)) != NULL)
				{
					int64		pos = DatumGetInt64(slot->tts_values[Anum_events_position - 1]);
					text	   *stream = DatumGetTextPP(slot->tts_values[Anum_events_stream - 1]);
					TimestampTz at = DatumGetTimestampTz(slot->tts_values[Anum_events_recorded_at - 1]);

					p = stream_partition(VARDATA_ANY(stream), VARSIZE_ANY_EXHDR(stream), np);
					if (cp[p] < 0 || pos <= cp[p] || !passes_filters(def, slot))
						continue;
					behind[p]++;
					if (oldest[p] == 0 || at < oldest[p])
						oldest[p] = at;
				}
				esrc_log_end(scan);
			}
			UnregisterSnapshot(snap);
		}

		for (p = 0; p < np; p++)
		{
			Datum		row[7];
			bool		nulls[7] = {false, false, false, false, false, false, false};

			row[0] = CStringGetTextDatum(def->name);
			row[1] = Int32GetDatum(p);
			if (holders[p] != NULL)
			{
				row[2] = CStringGetTextDatum(holders[p]);
				row[3] = TimestampTzGetDatum(expires[p]);
			}
			else
				nulls[2] = nulls[3] = true;
			row[4] = Int64GetDatum(cp[p]);
			nulls[4] = cp[p] < 0;
			row[5] = Int64GetDatum(behind[p]);
			row[6] = Float8GetDatum(oldest[p] == 0 ? 0.0 :
									(double) (now - oldest[p]) / 1000000.0);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, row, nulls);
		}
	}
	SPI_finish();
	return (Datum) 0;
}

