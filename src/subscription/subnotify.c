/*-------------------------------------------------------------------------
 *
 * subnotify.c
 *	  The registry of sessions waiting for a subscription's progress
 *	  (subprogress.c's waits, projection/projwait.c's) in shared memory,
 *	  and their wake-up at the commit of a transaction that moved a
 *	  subscription's checkpoints (write_checkpoints, an esrc.ack, a
 *	  projection worker's batch) or changed what a wait looks at (a
 *	  projection's failure, pause or skip): esrc_sub_progress_at_commit
 *	  notes the subscription, the commit callback sets the waiters'
 *	  latches.  subprogress.c's header explains the protocol (register,
 *	  check, sleep; the barriers on both sides).  No catalog access here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#include "base/base.h"
#include "subscription/subscription.h"

/* subscriptions a transaction notes before it wakes every waiter of its database */
#define MAX_NOTED			8

typedef struct ProgressWaiter
{
	pg_atomic_uint32 active;
	EsrcSubKey	key;
} ProgressWaiter;

typedef struct ProgressRegistry
{
	pg_atomic_uint32 nwaiting;
	int			nentries;
	ProgressWaiter entries[FLEXIBLE_ARRAY_MEMBER];
} ProgressRegistry;

static ProgressRegistry *registry = NULL;
static bool callbacks_set = false;
static bool registered = false;
static int	nnoted = 0;
static bool noted_all = false;
static EsrcSubKey noted[MAX_NOTED];

Size
esrc_progress_shmem_size(void)
{
	return add_size(offsetof(ProgressRegistry, entries),
					mul_size(MaxBackends, sizeof(ProgressWaiter)));
}

/* Attach to (or create) the registry; called with AddinShmemInitLock held. */
void
esrc_progress_shmem_init(void)
{
	bool		found;
	int			i;

	registry = ShmemInitStruct("esrc progress waiters", esrc_progress_shmem_size(), &found);
	if (found)
		return;
	pg_atomic_init_u32(&registry->nwaiting, 0);
	registry->nentries = MaxBackends;
	for (i = 0; i < MaxBackends; i++)
		pg_atomic_init_u32(&registry->entries[i].active, 0);
}

void
esrc_progress_unregister(void)
{
	if (!registered)
		return;
	pg_atomic_write_u32(&registry->entries[esrc_my_procno()].active, 0);
	pg_atomic_fetch_sub_u32(&registry->nwaiting, 1);
	registered = false;
}

static void
unregister_at_exit(int code, Datum arg)
{
	esrc_progress_unregister();
}

/* Wake the waiters of the noted subscriptions; runs after the commit. */
static void
wake_noted(void)
{
	int			i;
	int			j;

	/* after the commit became visible */
	pg_memory_barrier();
	if (pg_atomic_read_u32(&registry->nwaiting) == 0)
		return;
	for (i = 0; i < registry->nentries; i++)
	{
		ProgressWaiter *w = &registry->entries[i];
		bool		hit = false;

		if (pg_atomic_read_u32(&w->active) == 0)
			continue;
		pg_read_barrier();
		if (w->key.dbid != MyDatabaseId)
			continue;
		hit = noted_all;
		for (j = 0; j < nnoted && !hit; j++)
			hit = (w->key.id == noted[j].id && w->key.catalog == noted[j].catalog);
		if (hit)
			SetLatch(&ProcGlobal->allProcs[i].procLatch);
	}
}

static void
progress_xact_callback(XactEvent event, void *arg)
{
	if (nnoted == 0 && !noted_all)
		return;
	if (event == XACT_EVENT_COMMIT && registry != NULL)
		wake_noted();
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
	{
		nnoted = 0;
		noted_all = false;
	}
}

/*
 * The current transaction moved the checkpoints of subscription subid of
 * this database, or changed what a wait on it looks at: wake its waiters
 * when it commits.  Cheap; does not ereport once set up.
 */
void
esrc_sub_progress_at_commit(int64 subid)
{
	Oid			catalog;
	int			i;

	if (!callbacks_set)
	{
		RegisterXactCallback(progress_xact_callback, NULL);
		callbacks_set = true;
	}
	if (noted_all)
		return;
	catalog = esrc_relation_oid("subscriptions");
	for (i = 0; i < nnoted; i++)
		if (noted[i].id == subid && noted[i].catalog == catalog)
			return;
	if (nnoted == MAX_NOTED)
	{
		noted_all = true;
		return;
	}
	noted[nnoted].dbid = MyDatabaseId;
	noted[nnoted].catalog = catalog;
	noted[nnoted++].id = subid;
}

/* Register this backend as waiting on key; before its first check. */
void
esrc_progress_register(const EsrcSubKey *key)
{
	ProgressWaiter *w;

	esrc_require_shared();
	if (registry == NULL || MyProc == NULL || esrc_my_procno() >= registry->nentries)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this process cannot wait for a subscription's progress")));
	if (!callbacks_set)
	{
		RegisterXactCallback(progress_xact_callback, NULL);
		callbacks_set = true;
	}
	{
		static bool exit_set = false;

		if (!exit_set)
		{
			on_shmem_exit(unregister_at_exit, (Datum) 0);
			exit_set = true;
		}
	}
	esrc_progress_unregister();
	w = &registry->entries[esrc_my_procno()];
	w->key = *key;
	pg_write_barrier();
	pg_atomic_write_u32(&w->active, 1);
	registered = true;
	/* full barrier: the check that follows reads the checkpoints */
	pg_atomic_fetch_add_u32(&registry->nwaiting, 1);
}
