/*-------------------------------------------------------------------------
 *
 * esrc.c
 *	  Module entry point: _PG_init and the start-up of shared memory.
 *
 * esrc must be loaded through shared_preload_libraries: the in-flight
 * registry that makes read_all() commit-safe (order.c), the leases and
 * waits of subscriptions, the projection and forwarder workers live in
 * shared memory that only the postmaster can allocate.  This file sizes
 * it and has each subsystem attach its own part; it calls every
 * subsystem's init function, which defines its GUCs and hooks, and
 * nothing calls back into it: what all subsystems share is in catalog.c.
 * The one GUC defined here is the log's esrc.max_event_size.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "commands/trigger.h"
#include "catalog/pg_class.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "base/base.h"
#include "log/log.h"
#include "lifecycle/lifecycle.h"
#include "subscription/subscription.h"
#include "forward/forward.h"
#include "projection/projection.h"

PG_MODULE_MAGIC;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);
static void esrc_shmem_request(void);
static void esrc_shmem_startup(void);

void
_PG_init(void)
{
	/* pg_upgrade loads every library to check it; nothing to set up then */
	if (IsBinaryUpgrade)
		return;

	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("esrc must be loaded via shared_preload_libraries"),
				 errhint("Add esrc to shared_preload_libraries in postgresql.conf and restart the server.")));

	DefineCustomIntVariable("esrc.max_event_size",
							"Largest accepted size of one event's data plus metadata, both as stored jsonb and as JSON text.",
							"Appends of larger events fail with SQLSTATE 54000. The default, 960 kB, leaves room for the key and headers below librdkafka's default message.max.bytes of 1,000,000 bytes, so that every event can be forwarded to Kafka.",
							&esrc_max_event_size,
							ESRC_DEFAULT_MAX_EVENT_SIZE,
							1,
							MaxAllocSize / 2,
							PGC_SUSET,
							GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	/* the cost-based delay of erasure (erasecost.c) */
	esrc_erase_cost_init();

	/* the Kafka forwarder's GUCs and background worker */
	esrc_forwarder_init();

	/* subscriptions: leases and waits (sizes shared memory) */
	esrc_subscription_init();

	/* projections: settings, the launcher of their workers */
	esrc_projection_init();

	/* the scavenger's settings (scavenge.c) */
	esrc_scavenge_init();

	/* W3C trace context of appended events (esrc.traceparent, ...) */
	esrc_trace_init();

	/* the horizon published for reads on hot standbys (standby.c) */
	esrc_standby_init();

	/* counters of esrc.metrics (esrc.track_metrics) */
	esrc_metrics_init();

	/* DROP ROLE, REASSIGN OWNED, DROP OWNED for esrc's owners (owners.c) */
	esrc_owners_init();

	MarkGUCPrefixReserved("esrc");

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = esrc_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = esrc_shmem_startup;
}

/* what every subsystem's ShmemInitStruct/ShmemInitHash take */
static Size
esrc_shmem_size(void)
{
	return add_size(add_size(add_size(esrc_order_shmem_size(), add_size(esrc_wait_shmem_size(), esrc_progress_shmem_size())),
							 add_size(esrc_lease_shmem_size(), esrc_projection_shmem_size())),
					add_size(add_size(esrc_mark_shmem_size(), esrc_metrics_shmem_size()),
							 add_size(esrc_forwarder_shmem_size(), esrc_standby_shmem_size())));
}

static void
esrc_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(esrc_shmem_size());
	esrc_lease_shmem_request();
}

static void
esrc_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	esrc_order_shmem_init();
	esrc_forwarder_shmem_init();
	esrc_wait_shmem_init();
	esrc_progress_shmem_init();
	esrc_lease_shmem_init();
	esrc_projection_shmem_init();
	esrc_mark_shmem_init();
	esrc_metrics_shmem_init();
	esrc_standby_shmem_init();
	LWLockRelease(AddinShmemInitLock);
	esrc_shmem_attached = true;
}
