/*-------------------------------------------------------------------------
 *
 * esrc.c
 *	  Module entry point: _PG_init, the GUCs and the shared-memory struct.
 *
 * esrc must be loaded through shared_preload_libraries: the in-flight
 * registry that makes read_all() commit-safe (order.c) and the Kafka
 * forwarder live in shared memory that only the postmaster can allocate.
 * This file owns EsrcSharedState and hands the inflight[] part of it to
 * order.c; the forwarders' status slots are fwdstatus.c's own struct.
 * GUCs are declared here, except the forwarder's, which fwdconf.c
 * defines (with its launcher) from esrc_forwarder_init().
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

#include "esrc.h"
#include "owners.h"
#include "projection.h"

PG_MODULE_MAGIC;

/* GUC variables */
int			esrc_max_event_size = ESRC_DEFAULT_MAX_EVENT_SIZE;

EsrcSharedState *esrc_shared = NULL;

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

static Size
esrc_shmem_size(void)
{
	return add_size(offsetof(EsrcSharedState, inflight),
					esrc_order_shmem_size());
}

/* what ShmemInitStruct/ShmemInitHash take besides the struct above */
static Size
esrc_shmem_extra_size(void)
{
	return add_size(add_size(add_size(esrc_wait_shmem_size(), esrc_lease_shmem_size()),
							 esrc_projection_shmem_size()),
					add_size(add_size(esrc_mark_shmem_size(), esrc_metrics_shmem_size()),
							 esrc_forwarder_shmem_size()));
}

static void
esrc_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(add_size(esrc_shmem_size(), esrc_shmem_extra_size()));
	esrc_lease_shmem_request();
}

static void
esrc_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	esrc_shared = ShmemInitStruct("esrc", esrc_shmem_size(), &found);
	esrc_order_shmem_init(found);
	esrc_forwarder_shmem_init();
	esrc_wait_shmem_init();
	esrc_lease_shmem_init();
	esrc_projection_shmem_init();
	esrc_mark_shmem_init();
	esrc_metrics_shmem_init();
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Raise a clear error when the shared state is missing.  That happens only
 * when the library was loaded by binary upgrade mode; _PG_init refuses the
 * other ways.
 */
void
esrc_require_shared(void)
{
	if (esrc_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("esrc shared memory is not initialized"),
				 errhint("Add esrc to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/*
 * Catalog lookups.  They go through the syscache, so they are cheap and
 * never stale: a dropped and re-created extension is found again.
 */
Oid
esrc_schema_oid(void)
{
	return get_namespace_oid("esrc", false);
}

Oid
esrc_relation_oid(const char *relname)
{
	Oid			relid = get_relname_relid(relname, esrc_schema_oid());

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("relation \"esrc.%s\" does not exist", relname),
				 errhint("Run CREATE EXTENSION esrc in this database.")));
	return relid;
}

/* The owner of a relation (esrc's catalogs: the extension's creator). */
Oid
esrc_relation_owner(Oid relid)
{
	HeapTuple	tp = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tp))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tp))->relowner;
	ReleaseSysCache(tp);
	return owner;
}

/*
 * The body of the triggers that keep esrc's records append-only
 * (esrc.projection_skips, esrc.erasures): refuse the UPDATE, DELETE or
 * TRUNCATE that fired it, naming the table and what it records.  Never
 * returns.
 */
void
esrc_refuse_change(FunctionCallInfo fcinfo, const char *fname, const char *table,
				   const char *record, const char *detail)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	const char *op;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("%s() must be called as a trigger", fname)));
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		op = "update";
	else if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		op = "delete";
	else
		op = "truncate";
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("cannot %s rows of %s: the record of %s is append-only", op, table, record),
			 detail ? errdetail_internal("%s", detail) : 0));
}
