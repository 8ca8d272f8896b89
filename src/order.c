/*-------------------------------------------------------------------------
 *
 * order.c
 *	  The in-flight registry and the safe read horizon: commit-safe global
 *	  order for read_all() and read_category().
 *
 * Event positions come from the sequence esrc.position_seq (CACHE 1, so
 * nextval() hands out strictly increasing numbers in the order of the
 * calls).  Transactions commit in a different order than they took their
 * positions, so a reader that returned everything it can see up to
 * position P could later find a newly committed event at a position below
 * P.  We prevent that without serializing writers:
 *
 *	 writer, first position of a transaction:
 *	   W1  slot.dbid = MyDatabaseId; slot.min_position = 1 (a lower bound
 *		   of any position); full barrier
 *	   W2  p = nextval(position_seq)
 *	   W3  slot.min_position = p
 *	 writer, at commit or abort (XACT_EVENT_COMMIT/ABORT, which run after
 *	 ProcArrayEndTransaction, i.e. once the outcome is visible to every new
 *	 snapshot):
 *	   W4  slot.min_position = 0
 *
 *	 reader (esrc_safe_position):
 *	   R1  M = last value of position_seq (0 if none yet); full barrier
 *	   R2  H = min(M, min over this database's slots (min_position) - 1)
 *	   R3  the caller takes a new snapshot and reads positions <= H
 *
 * Claim: every position p <= H belongs to a transaction whose outcome is
 * visible to the snapshot of R3.  Since p <= M, the nextval() that returned
 * p (W2) happened before R1, hence W1 happened before R2.  At R2 the slot
 * therefore shows 1, p or a lower position of the same transaction (and
 * then H < p), or 0, which W4 only writes after the outcome is visible.
 * Positions of one stream are taken under the stream's lock (append.c), so
 * position order is consistent with each stream's version order.
 *
 * Only transactions that appended events hold the horizon back, and only
 * from their first append until they end.  PREPARE TRANSACTION is refused
 * for them: a prepared transaction would hold a position with no backend
 * left to clear the slot.
 *
 * Slots live in EsrcSharedState (esrc.c).  At COMMIT we also set the
 * forwarder's latch, so the Kafka worker wakes once per committing
 * transaction that appended; at ABORT of such a transaction too, since its
 * slot may have been what held back events that others committed.  A
 * transaction that appended nothing never wakes it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/sequence.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/tuplestore.h"

#include "esrc.h"

/* Does the current transaction hold a slot?  Backend-local. */
static bool esrc_xact_has_slot = false;
static bool esrc_callback_registered = false;

static void esrc_xact_callback(XactEvent event, void *arg);

Size
esrc_order_shmem_size(void)
{
	return mul_size(MaxBackends, sizeof(EsrcInflightSlot));
}

void
esrc_order_shmem_init(bool found)
{
	int			i;

	if (found)
		return;
	esrc_shared->nslots = MaxBackends;
	for (i = 0; i < MaxBackends; i++)
	{
		pg_atomic_init_u32(&esrc_shared->inflight[i].dbid, InvalidOid);
		pg_atomic_init_u64(&esrc_shared->inflight[i].min_position, 0);
	}
}

static EsrcInflightSlot *
my_slot(void)
{
	esrc_require_shared();
	if (MyProc == NULL || MyProc->pgprocno >= esrc_shared->nslots)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this process cannot append events")));
	return &esrc_shared->inflight[MyProc->pgprocno];
}

/*
 * Take the next global position for an event of the current transaction,
 * registering the transaction as in flight first (steps W1-W3).  Call it
 * with the stream's lock held.  May ereport (nextval can fail).
 */
int64
esrc_allocate_position(Oid seqoid)
{
	EsrcInflightSlot *slot = my_slot();
	int64		pos;

	if (!esrc_callback_registered)
	{
		RegisterXactCallback(esrc_xact_callback, NULL);
		esrc_callback_registered = true;
	}

	if (esrc_xact_has_slot)
		return nextval_internal(seqoid, false);

	pg_atomic_write_u32(&slot->dbid, MyDatabaseId);
	pg_atomic_write_u64(&slot->min_position, 1);
	esrc_xact_has_slot = true;
	pg_memory_barrier();

	pos = nextval_internal(seqoid, false);

	pg_atomic_write_u64(&slot->min_position, pos);
	return pos;
}

/*
 * The last value handed out by the position sequence, 0 if none yet.
 * Requires SELECT or USAGE on the sequence.  The forwarder uses it too.
 */
int64
esrc_sequence_last_value(Oid seqoid)
{
	LOCAL_FCINFO(fcinfo, 1);
	Datum		result;

	InitFunctionCallInfoData(*fcinfo, NULL, 1, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = ObjectIdGetDatum(seqoid);
	fcinfo->args[0].isnull = false;
	result = pg_sequence_last_value(fcinfo);
	if (fcinfo->isnull)
		return 0;
	return DatumGetInt64(result);
}

/*
 * The safe read horizon H of this database (steps R1-R2): every event at a
 * position <= H is committed or rolled back, and visible as such to any
 * snapshot taken after this call returns.  Takes no lock beyond the
 * sequence's buffer lock; O(max_connections).
 */
int64
esrc_safe_position(Oid seqoid)
{
	int64		horizon;
	int			i;

	esrc_require_shared();

	/*
	 * A standby has no in-flight registry of the primary's appends, and its
	 * copy of the sequence runs ahead of the primary's commits: a horizon
	 * computed here would not be commit-safe.
	 */
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the esrc read horizon is not available during recovery"),
				 errdetail("esrc.read_all(), esrc.read_category() and esrc.safe_position() are commit-safe only on the primary, which tracks appends in flight."),
				 errhint("Read global order on the primary, or use esrc.read_stream() on a standby.")));

	horizon = esrc_sequence_last_value(seqoid);
	pg_memory_barrier();

	for (i = 0; i < esrc_shared->nslots; i++)
	{
		EsrcInflightSlot *slot = &esrc_shared->inflight[i];
		uint64		minpos = pg_atomic_read_u64(&slot->min_position);

		if (minpos == 0)
			continue;
		/* dbid is written before min_position becomes non-zero */
		pg_read_barrier();
		if (pg_atomic_read_u32(&slot->dbid) != MyDatabaseId)
			continue;
		if ((int64) minpos - 1 < horizon)
			horizon = (int64) minpos - 1;
	}
	return horizon;
}

static void
wake_forwarder(void)
{
	uint32		procno = pg_atomic_read_u32(&esrc_shared->forwarder_procno);

	if (procno != 0 && esrc_shared->forwarder_dbid == MyDatabaseId)
		SetLatch(&ProcGlobal->allProcs[procno - 1].procLatch);
}

static void
esrc_xact_callback(XactEvent event, void *arg)
{
	if (!esrc_xact_has_slot)
		return;

	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot prepare a transaction that appended events"),
					 errdetail("A prepared transaction would hold back the read horizon of esrc.read_all() with no session left to release it.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			{
				EsrcInflightSlot *slot = &esrc_shared->inflight[MyProc->pgprocno];

				pg_atomic_write_u64(&slot->min_position, 0);
				esrc_xact_has_slot = false;
				/*
				 * A commit has events to forward; an abort may have released
				 * the horizon that held back events other transactions
				 * committed meanwhile.
				 */
				if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT)
					wake_forwarder();
				break;
			}
		default:
			break;
	}
}

/*
 * esrc.inflight_appends_internal(): one row (pid, min_position) per
 * backend of this database whose open transaction holds event positions,
 * i.e. per transaction that holds back the read horizon.  A racy but
 * harmless snapshot of the registry, for monitoring.
 */
PG_FUNCTION_INFO_V1(esrc_inflight_appends);

Datum
esrc_inflight_appends(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	esrc_require_shared();
	InitMaterializedSRF(fcinfo, 0);

	for (i = 0; i < esrc_shared->nslots; i++)
	{
		EsrcInflightSlot *slot = &esrc_shared->inflight[i];
		uint64		minpos = pg_atomic_read_u64(&slot->min_position);
		Datum		values[2];
		bool		nulls[2] = {false, false};

		if (minpos == 0)
			continue;
		pg_read_barrier();
		if (pg_atomic_read_u32(&slot->dbid) != MyDatabaseId)
			continue;
		values[0] = Int32GetDatum(ProcGlobal->allProcs[i].pid);
		values[1] = Int64GetDatum((int64) minpos);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
