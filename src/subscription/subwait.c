/*-------------------------------------------------------------------------
 *
 * subwait.c
 *	  Long-poll waits of esrc.poll(): the registry of waiting polls in
 *	  shared memory, and their wake-up at the commit or abort of a
 *	  transaction that appended, or when the partitions of their
 *	  subscription must be spread again.
 *
 * A waiting poll registers what it waits for (its database, its
 * subscription, and the hashes of the categories it reads, or "all") in
 * its backend's entry, then checks for events, then sleeps on its latch.
 * A projection worker, which serves several subscriptions, registers
 * subscription id 0 (every subscription of its database) and the union of
 * their categories.
 * A transaction that appended calls esrc_wake_subscribers() from order.c's
 * commit and abort callback, after it has cleared its in-flight slot, and
 * sets the latch of every registered poll of its database that reads one
 * of its categories.  Both sides put a full barrier between their write
 * (registration / cleared slot) and their read (the horizon / the
 * registry), so either the committer sees the registration and wakes the
 * poll, or the poll's check, which comes after its registration, sees the
 * cleared slot and the commit: no wake-up is lost, and there is no timed
 * retry.
 *
 * Cost for an appender: one atomic read when no poll is waiting (the
 * usual case); otherwise a pass over the registry, which has one entry per
 * backend, and a SetLatch per poll concerned.
 *
 * An entry is written only by its backend; a change counter, odd while
 * the entry is being rewritten, lets a committer that reads it
 * concurrently notice and wake it anyway (a spurious wake-up costs one
 * check; a lost one would cost a whole wait).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/wait_event.h"

#include "base/base.h"
#include "subscription/subscription.h"

typedef struct Waiter
{
	pg_atomic_uint32 changecount;	/* odd while the fields are rewritten */
	pg_atomic_uint32 active;	/* 1 while a poll of this backend waits */
	EsrcSubKey	sub;
	bool		all;			/* every category */
	int			ncats;
	uint64		cats[ESRC_WAIT_CATEGORIES];
} Waiter;

typedef struct WaitRegistry
{
	pg_atomic_uint32 nwaiting;	/* entries with active = 1 */
	int			nentries;
	Waiter		entries[FLEXIBLE_ARRAY_MEMBER];
} WaitRegistry;

static WaitRegistry *registry = NULL;
static bool exit_callback_set = false;
static bool registered = false;

Size
esrc_wait_shmem_size(void)
{
	return add_size(offsetof(WaitRegistry, entries),
					mul_size(MaxBackends, sizeof(Waiter)));
}

/* Attach to (or create) the registry; called with AddinShmemInitLock held. */
void
esrc_wait_shmem_init(void)
{
	bool		found;
	int			i;

	registry = ShmemInitStruct("esrc waiting polls", esrc_wait_shmem_size(), &found);
	if (found)
		return;
	pg_atomic_init_u32(&registry->nwaiting, 0);
	registry->nentries = MaxBackends;
	for (i = 0; i < MaxBackends; i++)
	{
		pg_atomic_init_u32(&registry->entries[i].changecount, 0);
		pg_atomic_init_u32(&registry->entries[i].active, 0);
	}
}

static void
unregister_at_exit(int code, Datum arg)
{
	esrc_wait_unregister();
}

/*
 * Register this backend's poll as waiting for commits of sub's database
 * that touch the categories hashes[0 .. nhashes - 1] (all: every category)
 * or that concern subscription sub.  The caller checks for events after
 * this and before each sleep.
 */
void
esrc_wait_register(const EsrcSubKey *sub, const uint64 *hashes, int nhashes,
				   bool all)
{
	Waiter	   *w;

	esrc_require_shared();
	if (registry == NULL || MyProc == NULL || esrc_my_procno() >= registry->nentries)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this process cannot wait for events")));
	if (!exit_callback_set)
	{
		on_shmem_exit(unregister_at_exit, (Datum) 0);
		exit_callback_set = true;
	}
	if (registered)
		esrc_wait_unregister();
	w = &registry->entries[esrc_my_procno()];

	pg_atomic_fetch_add_u32(&w->changecount, 1);
	pg_write_barrier();
	w->sub = *sub;
	w->all = all || nhashes > ESRC_WAIT_CATEGORIES;
	w->ncats = w->all ? 0 : nhashes;
	if (!w->all)
		memcpy(w->cats, hashes, sizeof(uint64) * nhashes);
	pg_write_barrier();
	pg_atomic_fetch_add_u32(&w->changecount, 1);
	pg_atomic_write_u32(&w->active, 1);
	registered = true;
	/* full barrier: the caller's check reads the registry of appends */
	pg_atomic_fetch_add_u32(&registry->nwaiting, 1);
}

void
esrc_wait_unregister(void)
{
	if (!registered || registry == NULL)
		return;
	pg_atomic_write_u32(&registry->entries[esrc_my_procno()].active, 0);
	pg_atomic_fetch_sub_u32(&registry->nwaiting, 1);
	registered = false;
}

/*
 * Stop, and start again, the wake-ups of this backend's registration
 * without forgetting what it waits for: a projection worker that naps
 * under load (projpace.c) is not woken by every commit meanwhile.  After
 * esrc_wait_resume the caller must check for events before it sleeps
 * (a commit during the pause woke nobody).
 */
bool
esrc_wait_suspend(void)
{
	if (!registered || registry == NULL)
		return false;
	pg_atomic_write_u32(&registry->entries[esrc_my_procno()].active, 0);
	pg_atomic_fetch_sub_u32(&registry->nwaiting, 1);
	registered = false;
	return true;
}

void
esrc_wait_resume(void)
{
	if (registered || registry == NULL)
		return;
	pg_atomic_write_u32(&registry->entries[esrc_my_procno()].active, 1);
	registered = true;
	/* full barrier: the caller's check reads the registry of appends */
	pg_atomic_fetch_add_u32(&registry->nwaiting, 1);
}

/*
 * Sleep until the latch is set or timeout_ms pass; false on timeout.  The
 * caller resets the latch before each check (ResetLatch, then check, then
 * sleep), so that a wake-up between its check and its sleep is kept.
 */
bool
esrc_wait_sleep(long timeout_ms)
{
	int			rc;

	rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
				   timeout_ms, PG_WAIT_EXTENSION);
	CHECK_FOR_INTERRUPTS();
	return (rc & WL_LATCH_SET) != 0;
}

/* Does entry w want a wake-up for these categories (or subscription)? */
static bool
concerns(Waiter *w, Oid dbid, const EsrcSubKey *sub, const uint64 *hashes,
		 int nhashes, bool any)
{
	uint32		before = pg_atomic_read_u32(&w->changecount);
	bool		result = false;
	int			i;
	int			j;

	pg_read_barrier();
	if (w->sub.dbid == dbid)
	{
		if (sub != NULL)
			result = (w->sub.id == sub->id || w->sub.id == 0) &&
				w->sub.catalog == sub->catalog;
		else if (any || w->all)
			result = true;
		else
			for (i = 0; i < w->ncats && !result; i++)
				for (j = 0; j < nhashes; j++)
					if (w->cats[i] == hashes[j])
					{
						result = true;
						break;
					}
	}
	pg_read_barrier();
	/* being rewritten: wake it, to be safe */
	if ((before & 1) != 0 || pg_atomic_read_u32(&w->changecount) != before)
		return true;
	return result;
}

static void
wake(Oid dbid, const EsrcSubKey *sub, const uint64 *hashes, int nhashes, bool any)
{
	int			i;

	if (registry == NULL)
		return;
	/* after the caller's write (cleared slot, released leases) */
	pg_memory_barrier();
	if (pg_atomic_read_u32(&registry->nwaiting) == 0)
		return;
	for (i = 0; i < registry->nentries; i++)
	{
		Waiter	   *w = &registry->entries[i];

		if (pg_atomic_read_u32(&w->active) == 0 || i == esrc_my_procno())
			continue;
		if (concerns(w, dbid, sub, hashes, nhashes, any))
			SetLatch(&ProcGlobal->allProcs[i].procLatch);
	}
}

/*
 * Called by order.c at the commit or abort of a transaction of database
 * dbid that appended events to the categories whose hashes
 * (esrc_category_hash) are hashes[0 .. nhashes - 1]; "any" when it appended
 * to more categories than it tracks, so that every waiter of the database
 * must be woken.  Runs in a transaction callback: does not ereport.
 */
void
esrc_wake_subscribers(Oid dbid, const uint64 *hashes, int nhashes, bool any)
{
	wake(dbid, NULL, hashes, nhashes, any);
}

/*
 * Wake the waiting polls of subscription sub (not this backend's): its
 * partitions are to be spread again.
 */
void
esrc_wake_subscription(const EsrcSubKey *sub)
{
	wake(sub->dbid, sub, NULL, 0, false);
}
