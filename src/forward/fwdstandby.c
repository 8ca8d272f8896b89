/*-------------------------------------------------------------------------
 *
 * fwdstandby.c
 *	  esrc.forwarder_standbys: the forwarder sends a batch only once every
 *	  listed standby has flushed the WAL of the batch's commits, and, with
 *	  synchronous_standby_names set, once the synchronous standbys have
 *	  confirmed it.  The setting (its check hook and parsed list), reading
 *	  the listed physical replication slots and the synchronous standbys'
 *	  confirmed position from shared memory, and the worker's wait.
 *
 * Why: with asynchronous replication a promoted standby may lack events
 * the old primary committed, flushed and forwarded; Kafka would then hold
 * events ("phantoms") that the new primary's log does not, and the new
 * primary would hand out their positions again.  The worker already
 * flushes the WAL of a batch's commit records before it sends
 * (fwdread.c, flush_to); with this setting it also waits until each
 * listed standby has that WAL, so a standby from the list, once promoted,
 * has every event that Kafka has.  Appends never wait: only the
 * forwarder does.
 *
 * The WAL a batch needs (esrc_appended_commit_end, read by fwdread.c):
 * the largest commit record end that appenders published since the
 * server started, or, before any appender committed (after a restart, a
 * crash, a promotion), the end of the WAL that recovery left, which holds
 * every commit the batch can contain.
 *
 * What the standby reports: a physical replication slot's restart_lsn,
 * which the walsender advances to the flush position the standby reports
 * (PhysicalConfirmReceivedLocation), read from ReplicationSlotCtl under
 * ReplicationSlotControlLock and the slot's spinlock, as PostgreSQL 17's
 * synchronized_standby_slots does (StandbySlotsHaveCaughtup); never by
 * querying a view.  Patroni creates one physical slot per member, named
 * after it.
 *
 * What is credited: restart_lsn alone is not enough.  A walreceiver's
 * first reply reports flush = its own replay end (WalReceiverMain starts
 * LogstreamResult.Flush at GetXLogReplayRecPtr), whatever this server's
 * history is, and the walsender moves the slot there unchecked.  After a
 * failover the old leader, whose WAL diverged past the new leader's
 * timeline switch point S, is started by Patroni as a standby of the new
 * leader before pg_rewind: it reports its replay end D > S, so restart_lsn
 * says D, yet it lacks everything the new leader wrote after S, and the
 * forwarder would send events it lacks (measured in test/run-69's drill:
 * 3 of 3 failovers, about 10 s until pg_rewind).  PostgreSQL 17's
 * synchronized_standby_slots trusts restart_lsn the same way.  So a slot
 * is credited with min(restart_lsn, sent): sent is the sentPtr of the
 * walsender that holds the slot now (slot->active_pid matched with
 * WalSndCtl->walsnds[i].pid, read under that walsender's spinlock).  Why
 * that is safe: a walsender starts at the point the standby asks for on
 * the timeline the standby asks for, and refuses a point that is not on
 * this server's history (StartReplication), so what the standby holds up
 * to its start point is this server's WAL; from there to sentPtr it was
 * sent this server's WAL on this connection.  A diverged node never adopts
 * the new timeline (its startup process refuses a timeline that forked
 * before its recovery point), so it asks for the old one at a point <= S
 * and is sent the old timeline only up to S: its walsender's sentPtr
 * never passes S, whatever it reports.  When no walsender holds the slot,
 * the credit is min(restart_lsn, what this process last credited the slot
 * with while a walsender held it), nothing when it never saw one.
 *
 * Synchronous replication: a commit that waits for the synchronous
 * standbys is invisible until they confirm it, but PostgreSQL lets a
 * waiting commit go without their confirmation when the wait is
 * cancelled (a cancel, statement_timeout), when the backend is terminated
 * (a fast shutdown, Patroni's demotion) and when the postmaster dies
 * (SyncRepWaitForLSN): the commit is then visible here, and the
 * forwarder read and sent it, while the synchronous standby that Patroni
 * promotes lacks it (measured in test/run-69's sync drill: the primary
 * killed with kill -9 while appends waited, Kafka then held position 677
 * that the promoted standby never had).  So with synchronous_standby_names
 * set the worker also waits until WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH],
 * the point up to which the walsenders released waiting commits
 * (SyncRepReleaseWaiters), has passed the batch's WAL: an event goes out
 * only once a commit acknowledged at its end would have been.  Commits
 * that waited normally are past it by the time they are visible, so this
 * costs nothing unless a wait was cut short or appends commit with
 * synchronous_commit = local or off.  The setting is this process's
 * (reloaded at SIGHUP); once synchronous_standby_names is emptied the
 * worker no longer waits, as the appends no longer do (Patroni empties
 * it only after it has taken the standby out of its synchronous set).
 *
 * What it costs: a standby that is down when the worker starts (or was
 * never seen streaming by this worker) no longer lets batches through on
 * its old restart_lsn: the worker waits until it connects and its
 * walsender has sent the batch's WAL.  A standby that reconnects is
 * credited only as far as its new walsender has sent (it starts at the
 * segment the standby asks for), a few milliseconds.  What it does not
 * cover: a slot dropped and created again under the same name while the
 * worker runs keeps the old credit (bounded by the new restart_lsn); a
 * walsender cannot tell that the standby wrote what it was sent
 * (restart_lsn, the standby's own report, bounds that).
 *
 * The wait: on 17 and later the walsenders broadcast
 * WalSndCtl->wal_confirm_rcv_cv when a physical slot advances that is
 * listed in synchronized_standby_slots, and the worker sleeps on that
 * condition variable; on 15 and 16 (and for slots not in
 * synchronized_standby_slots) it sleeps on its latch with a short
 * timeout, from STANDBY_WAIT_MIN_MS doubling to STANDBY_WAIT_MAX_MS, and
 * reads the slots again (compat.h has the difference).
 *
 * Validation: a list that is not a list of valid slot names is refused
 * by the check hook (any process, at reload too).  Where a slot can be
 * looked up at all (shared memory attached, in a transaction of a
 * backend: ALTER SYSTEM), a missing or logical slot is refused too, as
 * PostgreSQL 17's validate_sync_standby_slots does.  A reload of the
 * configuration file is not checked against the slots (the postmaster
 * cannot, and processes must agree on the value): there, and whenever a
 * slot disappears later, the worker waits with state "waiting for
 * standby" and a last_error that names the slot and why.
 *
 * Talks to: forwarder.c (fwd_wait_standbys before a batch goes out),
 * fwdsend.c (fwd_standbys_caught_up before the next batch is started
 * early),
 * fwdconf.c (registers the GUC), fwdstatus.c (the state and the wait's
 * start in the status), compat.h (the wait).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "replication/slot.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "base/base.h"
#include "forwardint.h"

/* the latch waits of 15/16 (and of slots without the condition variable) */
#define STANDBY_WAIT_MIN_MS 1
#define STANDBY_WAIT_MAX_MS 100
/* a wait this long shows as state "waiting for standby" */
#define STANDBY_STATE_AFTER_MS 1000

char	   *esrc_forwarder_standbys = NULL;

/* The parsed list: the GUC's "extra", allocated by the check hook. */
typedef struct StandbyList
{
	int			n;
	NameData	names[FLEXIBLE_ARRAY_MEMBER];
} StandbyList;

static StandbyList *standbys = NULL;

/* a name PostgreSQL accepts for a replication slot (ReplicationSlotValidateName) */
static bool
valid_slot_name(const char *name)
{
	const char *c;

	if (name[0] == '\0' || strlen(name) >= NAMEDATALEN)
		return false;
	for (c = name; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
			return false;
	return true;
}

/*
 * Where a slot can be looked up: a backend in a transaction (ALTER
 * SYSTEM) with shared memory attached.  Not the postmaster, and not a
 * reload of the configuration file (see the header).
 */
static bool
can_look_up_slots(void)
{
	return IsUnderPostmaster && MyProc != NULL && IsTransactionState() &&
		ReplicationSlotCtl != NULL && max_replication_slots > 0;
}

static bool
check_standbys(char **newval, void **extra, GucSource source)
{
	char	   *raw = pstrdup(*newval);
	List	   *names;
	ListCell   *lc;
	StandbyList *list;
	int			i = 0;

	if (!SplitIdentifierString(raw, ',', &names))
	{
		GUC_check_errdetail("List syntax is invalid.");
		return false;
	}
	foreach(lc, names)
	{
		const char *name = (const char *) lfirst(lc);

		if (!valid_slot_name(name))
		{
			GUC_check_errdetail("\"%s\" is not a valid replication slot name: it must be 1 to %d lower case letters, digits and underscores.",
								name, NAMEDATALEN - 1);
			return false;
		}
	}
	if (can_look_up_slots())
	{
		foreach(lc, names)
		{
			const char *name = (const char *) lfirst(lc);
			ReplicationSlot *s;
			bool		logical = false;

			LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
			s = SearchNamedReplicationSlot(name, false);
			if (s != NULL)
				logical = SlotIsLogical(s);
			LWLockRelease(ReplicationSlotControlLock);
			if (s == NULL)
			{
				GUC_check_errdetail("Replication slot \"%s\" does not exist.", name);
				GUC_check_errhint("List the physical replication slots of the standbys (pg_replication_slots, slot_type physical); Patroni names them after its members.");
				return false;
			}
			if (logical)
			{
				GUC_check_errdetail("\"%s\" is a logical replication slot: only physical slots say what a standby has flushed.", name);
				return false;
			}
		}
	}

	list = esrc_guc_malloc(offsetof(StandbyList, names) + sizeof(NameData) * Max(list_length(names), 1));
	if (list == NULL)
		return false;
	list->n = list_length(names);
	foreach(lc, names)
		namestrcpy(&list->names[i++], (const char *) lfirst(lc));
	*extra = list;
	list_free(names);
	pfree(raw);
	return true;
}

static void
assign_standbys(const char *newval, void *extra)
{
	standbys = (StandbyList *) extra;
}

/* fwdconf.c, from fwd_define_settings */
void
fwd_define_standbys_guc(void)
{
	DefineCustomStringVariable("esrc.forwarder_standbys",
							   "Physical replication slots of the standbys that must have flushed a batch's WAL before the forwarder sends it (names separated by commas).",
							   "Empty: the forwarder does not wait for standbys. A listed standby that is down stops forwarding, never appends.",
							   &esrc_forwarder_standbys,
							   "",
							   PGC_SIGHUP, GUC_LIST_INPUT | GUC_SUPERUSER_ONLY,
							   check_standbys, assign_standbys, NULL);
}

bool
fwd_standbys_configured(void)
{
	return standbys != NULL && standbys->n > 0;
}

/*
 * What this process last credited each slot with (see the header: "What
 * is credited"), by slot name; kept across reloads of the list.  Only the
 * forwarder reads the slots, so this is process-local, in
 * TopMemoryContext, and starts empty with each worker.
 */
typedef struct SlotCredit
{
	NameData	name;
	XLogRecPtr	credited;
	pid_t		logged_pid;		/* the walsender last logged about */
} SlotCredit;

static SlotCredit *credits = NULL;
static int	n_credits = 0;
static int	max_credits = 0;

static SlotCredit *
slot_credit(const char *name)
{
	int			i;

	for (i = 0; i < n_credits; i++)
		if (strcmp(NameStr(credits[i].name), name) == 0)
			return &credits[i];
	if (n_credits == max_credits)
	{
		max_credits = Max(8, max_credits * 2);
		credits = credits == NULL ?
			MemoryContextAlloc(TopMemoryContext, sizeof(SlotCredit) * max_credits) :
			repalloc(credits, sizeof(SlotCredit) * max_credits);
	}
	namestrcpy(&credits[n_credits].name, name);
	credits[n_credits].credited = InvalidXLogRecPtr;
	credits[n_credits].logged_pid = 0;
	return &credits[n_credits++];
}

/*
 * How far the walsender with this pid (the slot's active_pid) has sent
 * WAL; false when no walsender has that pid (it is exiting).  Read under
 * the walsender's spinlock, as pg_stat_get_wal_senders does.
 */
static bool
walsender_sent(pid_t pid, XLogRecPtr *sent)
{
	int			i;

	if (WalSndCtl == NULL)
		return false;
	for (i = 0; i < max_wal_senders; i++)
	{
		WalSnd	   *w = &WalSndCtl->walsnds[i];
		bool		found;

		SpinLockAcquire(&w->mutex);
		found = w->pid == pid;
		if (found)
			*sent = w->sentPtr;
		SpinLockRelease(&w->mutex);
		if (found)
			return true;
	}
	return false;
}

/*
 * One listed slot: true when it is credited with lsn; else why into why.
 * The caller holds ReplicationSlotControlLock.
 */
static bool
slot_flushed(const char *name, XLogRecPtr lsn, char *why, bool *broken)
{
	ReplicationSlot *s = SearchNamedReplicationSlot(name, false);
	SlotCredit *credit;
	XLogRecPtr	restart_lsn;
	XLogRecPtr	sent = InvalidXLogRecPtr;
	XLogRecPtr	credited;
	pid_t		active_pid;
	bool		streaming;

	if (s == NULL)
	{
		snprintf(why, ESRC_FWD_ERROR_LEN,
				 "standby slot \"%s\" of esrc.forwarder_standbys does not exist", name);
		*broken = true;
		return false;
	}
	if (SlotIsLogical(s))
	{
		snprintf(why, ESRC_FWD_ERROR_LEN,
				 "standby slot \"%s\" of esrc.forwarder_standbys is a logical slot, not a standby's physical slot",
				 name);
		*broken = true;
		return false;
	}
	SpinLockAcquire(&s->mutex);
	restart_lsn = s->data.restart_lsn;
	active_pid = s->active_pid;
	SpinLockRelease(&s->mutex);
	if (XLogRecPtrIsInvalid(restart_lsn))
	{
		snprintf(why, ESRC_FWD_ERROR_LEN,
				 "standby slot \"%s\" of esrc.forwarder_standbys has no flushed position (never used by a standby, or invalidated)%s",
				 name, active_pid == 0 ? "; it is inactive" : "");
		*broken = true;
		return false;
	}

	/* the credit: see the header */
	credit = slot_credit(name);
	streaming = active_pid != 0 && walsender_sent(active_pid, &sent);
	if (streaming)
	{
		credited = Min(restart_lsn, sent);
		credit->credited = credited;
	}
	else
		credited = Min(restart_lsn, credit->credited);
	if (credited >= lsn)
		return true;

	if (streaming && restart_lsn >= lsn && credit->logged_pid != active_pid)
	{
		/* restart_lsn alone would have let this batch go: once per walsender */
		credit->logged_pid = active_pid;
		ereport(LOG,
				(errmsg("esrc forwarder: standby slot \"%s\" reports flushed to %X/%X but its walsender (pid %d) sent only to %X/%X: crediting %X/%X",
						name, LSN_FORMAT_ARGS(restart_lsn), (int) active_pid,
						LSN_FORMAT_ARGS(sent), LSN_FORMAT_ARGS(credited)),
				 errdetail("A walreceiver's first reply reports its own replay end; a standby whose WAL diverged from this server's (an old primary before pg_rewind) reports WAL this server never sent it.")));
	}
	if (streaming && restart_lsn >= lsn)
		snprintf(why, ESRC_FWD_ERROR_LEN,
				 "standby slot \"%s\" of esrc.forwarder_standbys reports flushed to %X/%X but its walsender (pid %d) sent only to %X/%X, below the WAL of the next batch (needed %X/%X)",
				 name, LSN_FORMAT_ARGS(restart_lsn), (int) active_pid,
				 LSN_FORMAT_ARGS(sent), LSN_FORMAT_ARGS(lsn));
	else if (!streaming && XLogRecPtrIsInvalid(credit->credited))
		snprintf(why, ESRC_FWD_ERROR_LEN,
				 "standby slot \"%s\" of esrc.forwarder_standbys is inactive (no standby connected) and no walsender was seen sending on it since the forwarder started: its flushed position %X/%X alone is not trusted (needed %X/%X)",
				 name, LSN_FORMAT_ARGS(restart_lsn), LSN_FORMAT_ARGS(lsn));
	else
		snprintf(why, ESRC_FWD_ERROR_LEN,
				 "standby slot \"%s\" of esrc.forwarder_standbys is %s and " UINT64_FORMAT " bytes behind the WAL of the next batch (flushed %X/%X, sent %X/%X, needed %X/%X)",
				 name, streaming ? "active" : "inactive (no standby connected)",
				 (uint64) (lsn - credited), LSN_FORMAT_ARGS(restart_lsn),
				 LSN_FORMAT_ARGS(streaming ? sent : credit->credited),
				 LSN_FORMAT_ARGS(lsn));
	return false;
}

/*
 * Synchronous replication: is synchronous_standby_names set (this
 * process's value; the worker reloads it with the rest)?
 */
static bool
sync_standbys_named(void)
{
	return SyncRepStandbyNames != NULL && SyncRepStandbyNames[0] != '\0';
}

/*
 * With synchronous_standby_names set: have the synchronous standbys
 * confirmed flushing up to lsn?  WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH] is
 * the point up to which the walsenders released the commits waiting for
 * them (SyncRepReleaseWaiters), so an event is sent only once a commit
 * acknowledged at its end would have been.  Visibility alone does not
 * say it: a commit whose wait is cancelled, terminated or cut short by
 * the postmaster's death (SyncRepWaitForLSN) is visible on this server
 * though no synchronous standby has it, and so is one made with
 * synchronous_commit = local or off.  When not, why into why.
 */
static bool
sync_flushed(XLogRecPtr lsn, char *why)
{
	XLogRecPtr	confirmed;

	if (!sync_standbys_named() || WalSndCtl == NULL)
		return true;
	LWLockAcquire(SyncRepLock, LW_SHARED);
	confirmed = WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH];
	LWLockRelease(SyncRepLock);
	if (confirmed >= lsn)
		return true;
	snprintf(why, ESRC_FWD_ERROR_LEN,
			 "the synchronous standbys (synchronous_standby_names) have confirmed WAL up to %X/%X; the batch needs %X/%X",
			 LSN_FORMAT_ARGS(confirmed), LSN_FORMAT_ARGS(lsn));
	return false;
}

/* must the worker wait for a standby before it sends? */
static bool
standbys_to_wait_for(void)
{
	return fwd_standbys_configured() || sync_standbys_named();
}

/*
 * Has every listed slot flushed up to lsn, and have the synchronous
 * standbys confirmed it?  When not, why (the first slot that has not)
 * into why, which has ESRC_FWD_ERROR_LEN bytes; *broken tells a slot that
 * cannot catch up as it is (missing, logical, never reported) from one
 * that is behind.
 */
static bool
standbys_flushed(XLogRecPtr lsn, char *why, bool *broken)
{
	int			i;

	*broken = false;
	if (!sync_flushed(lsn, why))
		return false;
	if (!fwd_standbys_configured())
		return true;
	if (ReplicationSlotCtl == NULL || max_replication_slots == 0)
	{
		snprintf(why, ESRC_FWD_ERROR_LEN,
				 "esrc.forwarder_standbys lists replication slots but max_replication_slots is 0");
		*broken = true;
		return false;
	}
	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	for (i = 0; i < standbys->n; i++)
		if (!slot_flushed(NameStr(standbys->names[i]), lsn, why, broken))
			break;
	LWLockRelease(ReplicationSlotControlLock);
	return i == standbys->n;
}

/* Before starting a batch early (fwdsend.c, start_next): no waiting. */
bool
fwd_standbys_caught_up(XLogRecPtr lsn)
{
	char		why[ESRC_FWD_ERROR_LEN];
	bool		broken;

	return standbys_flushed(lsn, why, &broken);
}

/*
 * Wait until every listed standby has flushed up to lsn, and the
 * synchronous standbys have confirmed it: true then.
 * false when the worker should not send now (paused, or serve() asked
 * for a new turn: a reload); the batch is read again later.  serve() is
 * called between waits: it serves Kafka's callbacks and reloads.
 */
bool
fwd_wait_standbys(XLogRecPtr lsn, bool (*serve) (void))
{
	TimestampTz start = 0;
	long		sleep_ms = STANDBY_WAIT_MIN_MS;
	bool		shown = false;
	bool		ok = true;
	char		why[ESRC_FWD_ERROR_LEN];
	char		shown_why[ESRC_FWD_ERROR_LEN];
	EsrcForwarderState before = fwd_get_state();

	if (!standbys_to_wait_for() || XLogRecPtrIsInvalid(lsn))
		return true;
	shown_why[0] = '\0';
	for (;;)
	{
		bool		broken;
		bool		done;

		esrc_standby_wait_prepare();
		done = standbys_flushed(lsn, why, &broken);
		if (done)
			break;
		if (start == 0)
			start = GetCurrentTimestamp();
		if ((broken || TimestampDifferenceExceeds(start, GetCurrentTimestamp(),
												  STANDBY_STATE_AFTER_MS)) &&
			strcmp(why, shown_why) != 0)
		{
			/* the first time, or the reason changed: show it */
			fwd_report_standby_wait(why, start, !shown);
			strlcpy(shown_why, why, sizeof(shown_why));
			shown = true;
		}
		esrc_standby_wait_sleep(sleep_ms, PG_WAIT_EXTENSION);
		sleep_ms = Min(sleep_ms * 2, STANDBY_WAIT_MAX_MS);
		CHECK_FOR_INTERRUPTS();
		if (!serve() || fwd_paused())
		{
			ok = false;
			break;
		}
		if (!standbys_to_wait_for())
			break;
	}
	esrc_standby_wait_done();
	if (shown)
	{
		fwd_report_standby_wait(NULL, 0, false);
		if (ok)
		{
			ereport(LOG,
					(errmsg("esrc forwarder: the standbys have caught up, forwarding continues")));
			fwd_set_state(before == FWD_WAITING_STANDBY ? FWD_RUNNING : before, NULL);
		}
	}
	return ok;
}
