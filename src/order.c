/*-------------------------------------------------------------------------
 *
 * order.c
 *	  The in-flight registry and the safe read horizon: commit-safe global
 *	  order for read_all() and read_category().
 *
 * Event positions come from the sequence esrc.position_seq (CACHE 1, a
 * positive increment and NO CYCLE, so nextval() hands out strictly
 * increasing numbers in the order of the calls; every transaction checks
 * that before its first position, see check_position_sequence()).
 * Transactions commit in a different order than they took their
 * positions, so a reader that returned everything it can see up to
 * position P could later find a newly committed event at a position below
 * P.  We prevent that without serializing writers.  "last(seq)" is the
 * last value the sequence handed out (0 if none), read under the
 * sequence's buffer lock, so all such reads and nextval() calls are
 * totally ordered; PENDING is a slot value that says "about to take a
 * position" (with the database in its low bits, never a position).
 *
 *	 writer, first position of a transaction:
 *	   W1  slot.dbid = MyDatabaseId; slot.min_position = PENDING; full
 *		   barrier
 *	   W2  L = last(seq); CAS slot.min_position from PENDING to L + 1 (a
 *		   reader may have replaced PENDING first: then keep its value)
 *	   W3  p = nextval(position_seq)
 *	   W4  slot.min_position = p
 *	 writer, at commit or abort (XACT_EVENT_COMMIT/ABORT, which run after
 *	 ProcArrayEndTransaction, i.e. once the outcome is visible to every new
 *	 snapshot):
 *	   W5  slot.min_position = 0
 *
 *	 reader (esrc_safe_position):
 *	   R1  M = last(seq); full barrier
 *	   R2  for each slot of this database showing PENDING: N = last(seq),
 *		   CAS it from PENDING to N + 1, and use what the slot then shows
 *	   R3  H = min(M, min over this database's slots (min_position) - 1)
 *	   R4  the caller takes a new snapshot and reads positions <= H
 *
 * Bound: a slot's value v is <= every position p its transaction takes.
 * For W2's v = L + 1, since L was read before W3.  For R2's v = N + 1, since
 * the CAS found PENDING, so W2's CAS (after which W3 runs) came later, and
 * N was read before it.  W4 only raises the value to p.
 *
 * Claim (safety): every position p <= H belongs to a transaction whose
 * outcome is visible to the snapshot of R4.  Since p <= M, the nextval()
 * that returned p (W3) happened before R1, hence W2 happened before R2/R3.
 * At R3 the slot therefore shows a value <= p of the same transaction
 * (bound above; then H < p), or 0, which W5 only writes after the outcome
 * is visible.  Positions of one stream are taken under the stream's lock
 * (append.c), so position order is consistent with each stream's version
 * order.
 *
 * Claim (monotonic): a call that starts after another returned H1 returns
 * H2 >= H1.  M only grows.  Take a slot value v that the second call uses.
 * If the first call saw the slot of that transaction with a value (after
 * its own R2), H1 <= that value - 1 <= v - 1 (values only grow).  If it
 * did not see W1, its R1 came before W2's read of L in the order of
 * last(seq) reads (otherwise W1 would have been visible at its R2), so
 * L >= M1 >= H1.  If a reader's R2 replaced PENDING with N + 1, N was read
 * after that reader saw W1, and so after the first call's R1 as well, when
 * the first call did not see W1: N >= M1 >= H1.  (With the former
 * placeholder 1, H dropped to 0 while any appender was between W1 and
 * W3.)
 *
 * What the proof takes from PostgreSQL, per major (re-read in the sources
 * of Debian's 15 and 18.6 packages; Debian's source of 17 could not be
 * fetched here, and 17 lies between two majors whose code is the same in
 * these three places; global_order.spec and the crash matrix pass on 15,
 * 17 and 18):
 *	 - CommitTransaction() and AbortTransaction() call
 *	   ProcArrayEndTransaction() before CallXactCallbacks(XACT_EVENT_COMMIT
 *	   / XACT_EVENT_ABORT), so W5 runs after the outcome is visible to
 *	   every new snapshot (15, 18).
 *	 - nextval_internal() reads and updates the sequence tuple under the
 *	   exclusive lock of its buffer (read_seq_tuple), and last(seq) here
 *	   takes the share lock of the same buffer, so those reads and the
 *	   nextval() calls are totally ordered (15, 18).
 *	 - GetLatestSnapshot() takes a new snapshot (GetSnapshotData) once the
 *	   transaction's first snapshot is set, and otherwise the transaction
 *	   snapshot, which is also new; either is taken after R3 (15, 18).
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

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_class.h"
#include "catalog/pg_sequence.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

#include "esrc.h"

/*
 * The slot value "about to take a position" (W1): the high bit, which no
 * position has, and the database, so that a reader only ever replaces the
 * PENDING of its own database.
 */
#define ESRC_PENDING_FLAG		(UINT64CONST(1) << 63)
#define ESRC_PENDING(dbid)		(ESRC_PENDING_FLAG | (uint64) (dbid))

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

/*
 * last(seq) of the header comment: the last value position_seq handed out,
 * 0 if none, read from its buffer under the buffer lock.  Unlike
 * esrc_sequence_last_value() it checks no privilege (appenders need none
 * on the sequence); the caller holds a lock on the sequence.
 */
static int64
read_last_value(Oid seqoid)
{
	Relation	rel = relation_open(seqoid, AccessShareLock);
	Buffer		buf;
	Page		page;
	ItemId		lp;
	HeapTupleHeader tup;
	Form_pg_sequence_data seq;
	int64		result;

	if (rel->rd_rel->relkind != RELKIND_SEQUENCE)
		elog(ERROR, "\"%s\" is not a sequence", RelationGetRelationName(rel));
	buf = ReadBuffer(rel, 0);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	lp = PageGetItemId(page, FirstOffsetNumber);
	if (!ItemIdIsNormal(lp))
		elog(ERROR, "sequence \"%s\" has no tuple", RelationGetRelationName(rel));
	tup = (HeapTupleHeader) PageGetItem(page, lp);
	seq = (Form_pg_sequence_data) ((char *) tup + tup->t_hoff);
	result = seq->is_called ? seq->last_value : 0;
	UnlockReleaseBuffer(buf);
	relation_close(rel, NoLock);
	return result;
}

/* The hash by which the registry and the waiting polls know a category. */
uint64
esrc_category_hash(const char *category, int len)
{
	return hash_bytes_extended((const unsigned char *) category, len, 0);
}

static EsrcInflightSlot *
my_slot(void)
{
	esrc_require_shared();
	if (MyProc == NULL || esrc_my_procno() >= esrc_shared->nslots)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this process cannot append events")));
	return &esrc_shared->inflight[esrc_my_procno()];
}

/*
 * Refuse to hand out positions unless the sequence gives increasing values
 * in the order of the nextval() calls, which the proof above assumes: with
 * CACHE n > 1 each session takes a range of its own, with INCREMENT < 0 or
 * CYCLE values go down.  ALTER SEQUENCE (ShareRowExclusiveLock) conflicts
 * with the RowExclusiveLock that nextval() takes until the end of the
 * transaction, so we take that lock first -- which also processes pending
 * invalidations -- and then one check per transaction suffices: no other
 * session can change the sequence until we end, and an ALTER SEQUENCE in
 * this transaction drops this backend's cached values.  Costs a local lock
 * table hit (nextval takes the same lock) and a syscache lookup.
 */
static void
check_position_sequence(Oid seqoid)
{
	HeapTuple	tp;
	Form_pg_sequence seq;

	LockRelationOid(seqoid, RowExclusiveLock);
	tp = SearchSysCache1(SEQRELID, ObjectIdGetDatum(seqoid));
	if (!HeapTupleIsValid(tp))
		elog(ERROR, "cache lookup failed for sequence %u", seqoid);
	seq = (Form_pg_sequence) GETSTRUCT(tp);
	if (seq->seqcache != 1 || seq->seqincrement <= 0 || seq->seqcycle)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("esrc.position_seq must be an increasing sequence with CACHE 1 and NO CYCLE"),
				 errdetail("It has INCREMENT " INT64_FORMAT ", CACHE " INT64_FORMAT " and %s; so it would not hand out positions in the order of the appends, and readers of esrc.read_all() could miss events.",
						   seq->seqincrement, seq->seqcache,
						   seq->seqcycle ? "CYCLE" : "NO CYCLE"),
				 errhint("Run ALTER SEQUENCE esrc.position_seq INCREMENT 1 CACHE 1 NO CYCLE.")));
	ReleaseSysCache(tp);
}

/*
 * Take the next global position for an event of the current transaction,
 * registering the transaction as in flight first (steps W1-W4).  Call it
 * with the stream's lock held.  May ereport (nextval can fail, and the
 * first call of a transaction checks the sequence).
 */
int64
esrc_allocate_position(Oid seqoid)
{
	EsrcInflightSlot *slot = my_slot();
	int64		pos;
	uint64		pending;

	if (!esrc_callback_registered)
	{
		RegisterXactCallback(esrc_xact_callback, NULL);
		esrc_callback_registered = true;
	}

	if (esrc_xact_has_slot)
		return nextval_internal(seqoid, false);

	check_position_sequence(seqoid);

	/* W1 (dbid first: readers read it after seeing a non-zero value) */
	pg_atomic_write_u32(&slot->dbid, MyDatabaseId);
	pg_write_barrier();
	pg_atomic_write_u64(&slot->min_position, ESRC_PENDING(MyDatabaseId));
	esrc_xact_has_slot = true;
	pg_memory_barrier();

	/* W2; the CAS is a full barrier */
	pending = ESRC_PENDING(MyDatabaseId);
	(void) pg_atomic_compare_exchange_u64(&slot->min_position, &pending,
										  (uint64) read_last_value(seqoid) + 1);

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
 * The safe read horizon H of this database (steps R1-R3): every event at a
 * position <= H is committed or rolled back, and visible as such to any
 * snapshot taken after this call returns, and H is never lower than what
 * an earlier call returned.  Takes no lock beyond the sequence's buffer
 * lock; O(max_connections), plus one read of the sequence per appender
 * caught between W1 and W2 (rare: that is one buffer read).
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
		if (minpos & ESRC_PENDING_FLAG)
		{
			uint64		pending = ESRC_PENDING(MyDatabaseId);
			uint64		bound;

			if (minpos != pending)
				continue;		/* another database's */
			/* R2; the buffer lock orders the read after seeing PENDING */
			bound = (uint64) read_last_value(seqoid) + 1;
			if (pg_atomic_compare_exchange_u64(&slot->min_position, &pending, bound))
				minpos = bound;
			else
				minpos = pending;	/* what the slot shows now */
			if (minpos == 0 || (minpos & ESRC_PENDING_FLAG))
				continue;		/* ended, or now another database's */
		}
		/* dbid is written before min_position becomes non-zero */
		pg_read_barrier();
		if (pg_atomic_read_u32(&slot->dbid) != MyDatabaseId)
			continue;
		if ((int64) minpos - 1 < horizon)
			horizon = (int64) minpos - 1;
	}
	return horizon;
}

/*
 * The horizon for a reader of some categories.  (Until the per-category
 * registry lands: the global horizon, which is safe for every category.)
 */
int64
esrc_safe_position_for(Oid seqoid, const uint64 *hashes, int nhashes)
{
	return esrc_safe_position(seqoid);
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
				EsrcInflightSlot *slot = &esrc_shared->inflight[esrc_my_procno()];

				pg_atomic_write_u64(&slot->min_position, 0);
				esrc_xact_has_slot = false;
				/*
				 * A commit has events to forward; an abort may have released
				 * the horizon that held back events other transactions
				 * committed meanwhile.
				 */
				if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT)
				{
					wake_forwarder();
					esrc_wake_subscribers(MyDatabaseId, NULL, 0, true);
				}
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
		/* about to take its first position: no bound yet */
		if (minpos & ESRC_PENDING_FLAG)
			nulls[1] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
