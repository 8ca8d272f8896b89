/*-------------------------------------------------------------------------
 *
 * order.c
 *	  The in-flight registry and the safe read horizons: commit-safe global
 *	  order for read_all(), and per category for read_category() and the
 *	  long polls of subscriptions (subwait.c, woken from here at the end of
 *	  each transaction that appended); what the horizon publisher writes
 *	  for hot standbys (standby.c), and the proof that it is enough.
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
 * Per category (esrc_safe_position_for: read_category, subscriptions).  A
 * reader of a set S of categories must not wait for transactions that
 * append only to other categories, so a slot also lists the categories its
 * transaction appended to, by a 64-bit hash h(c) (esrc_category_hash; a
 * collision only holds a reader back more), each entry with a word that
 * plays min_position's part for the positions taken in that category: up
 * to ESRC_SLOT_CATEGORIES entries, then one more word, overflow_bound, for
 * every category without an entry (the slot then holds back readers of
 * every category).  ncategories counts the entries, with ESRC_SLOT_OVERFLOW
 * once overflow_bound is in use; generation grows by one each time a
 * transaction gives the slot up.  W1-W5 and R1-R4 are unchanged, and
 * esrc_safe_position() reads only min_position.
 *
 *	 writer, first position of the transaction in category c (together with
 *	 W1-W4 when it is the first position of the transaction):
 *	   C1  w = a new entry {h(c), PENDING}, or, all entries in use, w =
 *		   overflow_bound = PENDING (unless the slot has overflowed
 *		   already: then there is nothing to do for c); then ncategories =
 *		   entries in use (| ESRC_SLOT_OVERFLOW); full barrier
 *	   C2  L = last(seq); CAS w from PENDING to L + 1 (at the first
 *		   position, W2 and C2 share one read of last(seq))
 *	   C3  p = nextval(position_seq)
 *	   C4  w = p
 *	 later positions in c: nextval() only (the backend keeps a copy of its
 *	 entries' hashes: a few compares)
 *	 at commit or abort, W5 becomes:
 *	   W5  min_position = 0; ncategories = 0; generation += 1 (a full
 *		   barrier: the backend's next transaction writes after it)
 *
 *	 reader of S (esrc_safe_position_for):
 *	   R1' M = last(seq); full barrier
 *	   R2' for each slot: g = generation; n = ncategories; skip the slot
 *		   if n = 0 or its dbid is another database's; the value of each
 *		   entry whose hash is in S, and of overflow_bound if n has
 *		   ESRC_SLOT_OVERFLOW, each PENDING of this database replaced as
 *		   in R2; then skip the slot if generation != g
 *	   R3' H = min(M, min over the values kept - 1)
 *	   R4' as R4
 *
 * Bound, word by word as for min_position: a word's value is <= every
 * position its transaction takes in the categories it stands for (an
 * entry: its category; overflow_bound: every category without an entry,
 * all of whose positions come after overflow_bound's C1).  A reader's CAS
 * is right whichever transaction of the backend owns the word when it
 * lands: N was read before it, which came before the owner's C2 CAS and so
 * before its nextval().
 *
 * Consistent view: if R2' reads g before and after, all it read between
 * was written by the transaction that held the slot in generation g (or is
 * its W5's zeroes): the next transaction writes only after the W5 that
 * changes g.  A slot skipped for a changed generation is that of a
 * transaction that ended during R2' (outcome visible: W5 follows
 * ProcArrayEndTransaction), and its successor takes positions > M.
 *
 * Claim (safety, per S): every position p <= H of a category c in S
 * belongs to a transaction T whose outcome is visible to the snapshot of
 * R4'.  Let w be T's word for c.  Since p <= M, the nextval() that
 * returned p happened before R1', and so did w's C1.  So R2' either sees
 * T's slot after that C1 in a consistent view, and keeps w's value, <= p
 * (bound; then H < p), or sees W5 of T, which only comes after T's outcome
 * is visible.
 *
 * Claim (monotonic, per S): a call for S that starts after another call
 * for S returned H1 returns H2 >= H1.  M only grows, and a skipped slot
 * only raises H2.  Take a value v of T's word w that the second call keeps
 * (consistent view, T running).  If the first call kept a value of w, H1
 * <= that value - 1 <= v - 1 (values only grow).  If not, its R1' came
 * before C2's read of L in the order of last(seq) reads: otherwise T's
 * writes up to C1, and those of the backend's earlier transactions, would
 * all have been visible to its R2', which would have seen a consistent
 * view of T with w (T had not ended: the second call saw it running), and
 * kept it.  So L >= M1 >= H1, p > L, and a reader's N + 1 has N read after
 * that reader saw C1, so after the first call's R1' as well: N >= M1.
 * This is why a category that a running transaction adds gets a word of
 * its own: if T appended to A at 10, a reader of B returned 12, and T then
 * appends to B at 13, B's word is published at 13's C1 and bounds at 13 or
 * more, where T's min_position (10) would have dropped B's horizon to 9.
 *
 * Hot standbys (standby.c).  A standby has no registry of the primary's
 * appends, and its copy of position_seq runs up to 32 values ahead of the
 * primary's commits (sequences log ahead): it must learn the horizon from
 * the primary, through WAL.  The primary's horizon publisher (one
 * background worker per database that appends, woken from the end-of-append
 * hook) runs esrc_capture_registry() -- R1 once, R2-R3 (the global horizon
 * Hg) and R2' for every entry of every slot of the database, the values
 * merged per category hash (the lowest) and the lowest overflow_bound --
 * and, when that changed since its last row, overwrites the one row of
 * esrc.standby_horizon in place (heap_inplace_update: one WAL record, no
 * new row version, no transaction id) and flushes the WAL, so that
 * walsenders send it (it never waits for a standby).  The row always
 * takes Hg; it takes M and the categories (hash, lowest bound) only when
 * at most 16 distinct categories are in flight, and otherwise keeps those
 * of the last reading that fit.  At most one row per
 * esrc.standby_horizon_interval (default 5 ms).  A reader on the standby
 * copies the row under its buffer's share lock and returns Hg for the
 * global horizon, and for a set S max(Hg, Hc(S)), Hc(S) = min(M, (bound of
 * each hash of S) - 1, (overflow) - 1 when S is not empty) from the
 * reading whose categories the row holds: R3' computed from that
 * reading's values.  It then reads events under a snapshot taken later
 * (R4).
 *
 * Claim (safety on a standby): every position p <= H of S belongs to a
 * transaction T that either is visible to the reader's event snapshot or
 * never becomes visible on any server fed by this WAL.  Take the reading
 * C whose value gave H (Hg of one, or Hc(S) of one).  C is a reader of
 * every S at once (it replaces the PENDINGs a reader of S would, and
 * others, which any reader may do), so by the claims above T's outcome was
 * visible on the primary before C ended: T had run
 * ProcArrayEndTransaction, and, if it committed, had inserted its commit
 * record before that (RecordTransactionCommit), so before the publisher
 * inserted the record that wrote C's values.  The standby replays WAL in
 * order; replay overwrites the tuple under the buffer's exclusive lock, so
 * the values the reader copied come from replaying that record or a later
 * one, after T's commit record was replayed, and a transaction becomes
 * visible to standby snapshots when its commit record is replayed
 * (xact_redo_commit).  The event snapshot is taken after the copy.  If T
 * did not commit, no commit record of T ever follows, and a promotion ends
 * it as aborted.  (Insertion order is WAL order, with synchronous_commit =
 * off too.)
 *
 * Claim (monotonic on a standby): a call that starts after another
 * returned H1 returns H2 >= H1.  One publisher per database writes at a
 * time (standby.c: a publisher leaves before another starts, and writes
 * nothing once leaving), and each reading starts after the previous write,
 * so rows follow one another in WAL in the order of their readings, and
 * each reading starts after the previous one returned: by the monotonic
 * claims, Hg and Hc(S) of each S never drop from one reading to a later
 * one, and the row only ever replaces them with those of a later reading.
 * Replay is in WAL order and the second call copies the row after the
 * first did, so it copies the same row or a later one.  A reader that
 * moves to another standby may find it behind: it gets a lower H there,
 * and so reads nothing new, but misses nothing: every event at or below H1
 * is committed in the WAL both replay.
 *
 * Promotion: the promoted standby's own registry takes over.  Its
 * position_seq (logged ahead) is >= every position whose WAL it replayed,
 * so >= the M of every row it replayed; transactions of the old primary
 * with no commit record replayed end as aborted at the end of recovery.
 * So its first horizon is >= the last one it returned as a standby, and
 * the claims above hold from there on.
 *
 * Why a row overwritten in place: a custom WAL resource manager would
 * write about as little, but every server replaying that WAL would need
 * esrc loaded (a standby without it stops replay at the first record), and
 * pg_waldump and pg_rewind would not know the records.  A heap in-place
 * update (what VACUUM writes into pg_class) is replayed, dumped and
 * rewound like any other heap record, and logical decoding skips it; a
 * standby without esrc preloaded replays it and refuses only esrc's reads
 * (loading the library there raises "esrc must be loaded via
 * shared_preload_libraries").  An ordinary UPDATE of the row would cost a
 * transaction id and a commit record per row (200 a second at 5 ms: 17
 * million xids a day) and, worse, its dead versions pruned on the primary
 * would cancel (or stall the replay for up to max_standby_streaming_delay
 * behind) every standby query of the database that runs longer than a
 * prune cycle, a fraction of a second: in place there are no versions to
 * prune.  The price: one WAL record of about 330 bytes per row, rows only
 * while the registry changes (none when idle), at most 1000 /
 * esrc.standby_horizon_interval a second, and a WAL flush each.  While no
 * publisher writes (the setting at -1, a publisher failing, a database not
 * appended to since its upgrade) a standby's horizons stay at the last
 * row: safe, only stale.  The row names categories by esrc_category_hash
 * (hash_bytes_extended, seed 0) in the server's byte order: primary and
 * standby run the same PostgreSQL major on the same architecture, and a
 * change of the hash or of the row's shape would be an upgrade of esrc's
 * SQL, which replicates.
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
 * from their first append until they end; a category's horizon only from
 * their first append to that category (or from their overflow on).  PREPARE TRANSACTION is refused
 * for them: a prepared transaction would hold a position with no backend
 * left to clear the slot.
 *
 * Durability (the forwarder): before W5, a committing transaction raises
 * EsrcSharedState.commit_end to the end of its commit record
 * (publish_commit_end).  Every position at or below a horizon H belongs to
 * a transaction whose W5 the reader saw, so commit_end read after R3
 * covers the commit records of all of them: the WAL the forwarder flushes
 * before it sends what it read, and waits for its standbys to have
 * (esrc_appended_commit_end, fwdread.c, fwdstandby.c).  Before any
 * appender committed since the server started, the bound is the end of
 * the WAL that recovery left.
 *
 * Slots live in EsrcSharedState (esrc.c).  At COMMIT we also set the
 * forwarder's latch, so the Kafka worker wakes once per committing
 * transaction that appended; at ABORT of such a transaction too, since its
 * slot may have been what held back events that others committed.  A
 * transaction that appended nothing never wakes it.  The long polls of the
 * transaction's categories (esrc_wake_subscribers, subwait.c) are woken
 * at the same two points, after W5.
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

#include "base/base.h"
#include "log/log.h"
#include "logint.h"

/*
 * The slot value "about to take a position" (W1): the high bit, which no
 * position has, and the database, so that a reader only ever replaces the
 * PENDING of its own database.
 */
#define ESRC_PENDING_FLAG		(UINT64CONST(1) << 63)
#define ESRC_PENDING(dbid)		(ESRC_PENDING_FLAG | (uint64) (dbid))

/* Does the current transaction hold a slot?  Backend-local. */
static bool esrc_xact_has_slot = false;

/* The last position this backend took (0: none yet); esrc.last_position() */
int64		esrc_last_appended = 0;

static int64 allocate_position(Oid seqoid, const char *category);

/*
 * Backend-local copy of what the slot says about the categories of the
 * current transaction, so that a repeat append to one of them costs a few
 * compares: the hashes of categories[0 .. esrc_xact_ncats - 1], and
 * whether the slot overflowed (then every other category is covered by
 * overflow_bound too).
 */
static uint64 esrc_xact_hashes[ESRC_SLOT_CATEGORIES];
static int	esrc_xact_ncats = 0;
static bool esrc_xact_overflow = false;
static bool esrc_callback_registered = false;

static void esrc_xact_callback(XactEvent event, void *arg);

/* who learns of the end of a transaction that appended (esrc_listen_appended) */
#define MAX_APPENDED_HOOKS	4
static EsrcAppendedHook appended_hooks[MAX_APPENDED_HOOKS];
static int	nappended_hooks = 0;

/* esrc.forwarder_log_batches (defined by fwdconf.c): log commit times */
bool		esrc_forwarder_log_batches = false;

/* the registry, in shared memory (esrc_order_shmem_init) */
EsrcSharedState *esrc_shared = NULL;

/*
 * Call hook at the end of every transaction that appended (see log.h);
 * from _PG_init, so every backend has the same hooks.
 */
void
esrc_listen_appended(EsrcAppendedHook hook)
{
	if (nappended_hooks >= MAX_APPENDED_HOOKS)
		elog(ERROR, "too many listeners of appends");
	appended_hooks[nappended_hooks++] = hook;
}

Size
esrc_order_shmem_size(void)
{
	return add_size(offsetof(EsrcSharedState, inflight),
					mul_size(MaxBackends, sizeof(EsrcInflightSlot)));
}

/* Attach to (or create) the registry; called with AddinShmemInitLock held. */
void
esrc_order_shmem_init(void)
{
	bool		found;
	int			i;

	esrc_shared = ShmemInitStruct("esrc", esrc_order_shmem_size(), &found);
	if (found)
		return;
	pg_atomic_init_u64(&esrc_shared->commit_end, 0);
	esrc_shared->nslots = MaxBackends;
	for (i = 0; i < MaxBackends; i++)
	{
		EsrcInflightSlot *slot = &esrc_shared->inflight[i];
		int			j;

		pg_atomic_init_u32(&slot->dbid, InvalidOid);
		pg_atomic_init_u32(&slot->ncategories, 0);
		pg_atomic_init_u64(&slot->min_position, 0);
		pg_atomic_init_u64(&slot->generation, 0);
		pg_atomic_init_u64(&slot->overflow_bound, 0);
		for (j = 0; j < ESRC_SLOT_CATEGORIES; j++)
		{
			pg_atomic_init_u64(&slot->categories[j].hash, 0);
			pg_atomic_init_u64(&slot->categories[j].bound, 0);
		}
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
 * The 64-bit hash by which the registry knows a category (internal: it is
 * not stored and may change between releases).  Readers pass these hashes
 * to esrc_safe_position_for(); esrc_wake_subscribers() gets them at commit.
 */
uint64
esrc_category_hash(const char *category, int len)
{
	return hash_bytes_extended((const unsigned char *) category, len, 0);
}

/*
 * Steps C2-C4 (and W2-W4 for the first position) of the header comment:
 * the caller has published "word" as PENDING (C1) and issued a full
 * barrier.  Returns the position taken.
 */
static int64
take_position(Oid seqoid, pg_atomic_uint64 *word)
{
	uint64		pending = ESRC_PENDING(MyDatabaseId);
	int64		pos;

	/* C2; the CAS is a full barrier */
	(void) pg_atomic_compare_exchange_u64(word, &pending,
										  (uint64) read_last_value(seqoid) + 1);
	/* C3 */
	pos = nextval_internal(seqoid, false);
	/* C4: every later position of the transaction is higher */
	pg_atomic_write_u64(word, (uint64) pos);
	return pos;
}

/*
 * Take the next global position for an event of category "category" in
 * the current transaction, registering the transaction as in flight first
 * (steps W1-W4), and the category with it (C1-C4) unless the transaction
 * already appended to it.  Call it with the stream's lock held.  May
 * ereport (nextval can fail, and the first call of a transaction checks
 * the sequence).  A repeat append to a category of the transaction costs a
 * hash of the name and a few compares beyond nextval().
 */
int64
esrc_allocate_position(Oid seqoid, const char *category)
{
	int64		pos = allocate_position(seqoid, category);

	/* esrc.last_position() (lastpos.c): positions only grow in a backend */
	esrc_last_appended = pos;
	return pos;
}

/* Has the current transaction taken a position (appended)?  Backend-local. */
bool
esrc_xact_appended(void)
{
	return esrc_xact_has_slot;
}

static int64
allocate_position(Oid seqoid, const char *category)
{
	EsrcInflightSlot *slot = my_slot();
	uint64		hash = esrc_category_hash(category, strlen(category));
	uint64		pending = ESRC_PENDING(MyDatabaseId);
	EsrcInflightCategory *entry;
	int64		pos;
	int			i;

	if (!esrc_callback_registered)
	{
		RegisterXactCallback(esrc_xact_callback, NULL);
		esrc_callback_registered = true;
	}

	if (esrc_xact_has_slot)
	{
		int			n = esrc_xact_ncats;

		for (i = 0; i < n; i++)
			if (esrc_xact_hashes[i] == hash)
				return nextval_internal(seqoid, false);
		if (esrc_xact_overflow)
			return nextval_internal(seqoid, false);

		/* C1: a new category; then C2-C4 */
		if (n < ESRC_SLOT_CATEGORIES)
		{
			entry = &slot->categories[n];
			pg_atomic_write_u64(&entry->hash, hash);
			pg_atomic_write_u64(&entry->bound, pending);
			esrc_xact_hashes[n] = hash;
			esrc_xact_ncats = n + 1;
			pg_write_barrier();
			pg_atomic_write_u32(&slot->ncategories, (uint32) (n + 1));
			pg_memory_barrier();
			return take_position(seqoid, &entry->bound);
		}
		pg_atomic_write_u64(&slot->overflow_bound, pending);
		esrc_xact_overflow = true;
		pg_write_barrier();
		pg_atomic_write_u32(&slot->ncategories, (uint32) n | ESRC_SLOT_OVERFLOW);
		pg_memory_barrier();
		return take_position(seqoid, &slot->overflow_bound);
	}

	check_position_sequence(seqoid);

	/*
	 * W1 with C1 of the first category (dbid and the entry first: readers
	 * read them after seeing ncategories or min_position non-zero)
	 */
	entry = &slot->categories[0];
	pg_atomic_write_u32(&slot->dbid, MyDatabaseId);
	pg_atomic_write_u64(&entry->hash, hash);
	pg_atomic_write_u64(&entry->bound, pending);
	pg_write_barrier();
	pg_atomic_write_u32(&slot->ncategories, 1);
	pg_atomic_write_u64(&slot->min_position, pending);
	esrc_xact_has_slot = true;
	esrc_xact_hashes[0] = hash;
	esrc_xact_ncats = 1;
	esrc_xact_overflow = false;
	pg_memory_barrier();

	/* W2 and C2 with one read of last(seq); each CAS is a full barrier */
	{
		uint64		bound = (uint64) read_last_value(seqoid) + 1;

		(void) pg_atomic_compare_exchange_u64(&slot->min_position, &pending, bound);
		pending = ESRC_PENDING(MyDatabaseId);
		(void) pg_atomic_compare_exchange_u64(&entry->bound, &pending, bound);
	}

	pos = nextval_internal(seqoid, false);

	/* W4, C4 */
	pg_atomic_write_u64(&slot->min_position, (uint64) pos);
	pg_atomic_write_u64(&entry->bound, (uint64) pos);
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
 * Steps R2 and R3 of the header comment, after R1 gave horizon = M: the
 * horizon lowered below the lowest min_position of this database's slots.
 */
static int64
scan_global(Oid seqoid, int64 horizon)
{
	int			i;

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
 * The safe read horizon H of this database (steps R1-R3): every event at a
 * position <= H is committed or rolled back, and visible as such to any
 * snapshot taken after this call returns, and H is never lower than what
 * an earlier call returned.  Takes no lock beyond the sequence's buffer
 * lock; O(max_connections), plus one read of the sequence per appender
 * caught between W1 and W2 (rare: that is one buffer read).  On a hot
 * standby, the horizon the primary published (standby.c).
 */
int64
esrc_safe_position(Oid seqoid)
{
	int64		horizon;

	esrc_require_shared();
	if (RecoveryInProgress())
		return esrc_standby_horizon(NULL, -1);
	horizon = esrc_sequence_last_value(seqoid);
	pg_memory_barrier();
	return scan_global(seqoid, horizon);
}

/*
 * A category bound (entry bound or overflow_bound) for step R2': the value
 * the word shows, after replacing this database's PENDING by last(seq) + 1
 * as in R2.  0 when the word shows something no reader may use (another
 * database's PENDING, or a value of no transaction): the slot was reused
 * while we looked, which the generation check of the caller detects.
 */
static uint64
category_bound(Oid seqoid, pg_atomic_uint64 *word)
{
	uint64		v = pg_atomic_read_u64(word);
	uint64		pending = ESRC_PENDING(MyDatabaseId);

	if (v == pending)
	{
		/* the buffer lock orders the read after seeing PENDING */
		uint64		bound = (uint64) read_last_value(seqoid) + 1;

		if (pg_atomic_compare_exchange_u64(word, &pending, bound))
			return bound;
		v = pending;			/* what the word shows now */
	}
	if (v & ESRC_PENDING_FLAG)
		return 0;
	return v;
}

/*
 * Step R2' for one slot: false if the slot holds nothing back (free,
 * another database's, or its transaction ended while we looked: a changed
 * generation).  Otherwise the values of its entries whose hash is one of
 * hashes[0 .. nhashes - 1] (every entry when nhashes < 0) go to
 * ehash/ebound (*nentries of them), and that of overflow_bound, when the
 * slot overflowed and nhashes != 0, to *overflow (0: none).
 */
static bool
read_slot_categories(Oid seqoid, EsrcInflightSlot *slot,
					 const uint64 *hashes, int nhashes,
					 uint64 *ehash, uint64 *ebound, int *nentries,
					 uint64 *overflow)
{
	uint64		gen = pg_atomic_read_u64(&slot->generation);
	uint32		ncat;
	int			n;
	int			j;

	*nentries = 0;
	*overflow = 0;
	pg_read_barrier();
	ncat = pg_atomic_read_u32(&slot->ncategories);
	if (ncat == 0)
		return false;
	/* dbid and the entries are written before ncategories */
	pg_read_barrier();
	if (pg_atomic_read_u32(&slot->dbid) != MyDatabaseId)
		return false;
	n = Min((int) (ncat & ~ESRC_SLOT_OVERFLOW), ESRC_SLOT_CATEGORIES);

	for (j = 0; j < n; j++)
	{
		EsrcInflightCategory *entry = &slot->categories[j];
		uint64		hash = pg_atomic_read_u64(&entry->hash);
		bool		wanted = nhashes < 0;
		int			k;

		for (k = 0; k < nhashes && !wanted; k++)
			wanted = hashes[k] == hash;
		if (wanted)
		{
			uint64		b = category_bound(seqoid, &entry->bound);

			if (b != 0)
			{
				ehash[*nentries] = hash;
				ebound[*nentries] = b;
				(*nentries)++;
			}
		}
	}
	if ((ncat & ESRC_SLOT_OVERFLOW) && nhashes != 0)
		*overflow = category_bound(seqoid, &slot->overflow_bound);

	/* a transaction that ended while we looked holds nothing back */
	pg_read_barrier();
	return pg_atomic_read_u64(&slot->generation) == gen;
}

/*
 * The safe read horizon of this database for a reader of the categories
 * hashes[0 .. nhashes - 1] (esrc_category_hash; duplicates are harmless):
 * like esrc_safe_position(), but only transactions that may append to one
 * of those categories hold it back (steps R1' - R3' of the header
 * comment).  The two claims hold per set of categories: every event of
 * those categories at a position <= H is settled and visible to a
 * snapshot taken after the call, and a later call for the same set never
 * returns less.  nhashes 0 gives last(seq).  Same costs as
 * esrc_safe_position(), times the compares of nhashes with each busy
 * slot's categories.  On a hot standby, from what the primary published.
 */
int64
esrc_safe_position_for(Oid seqoid, const uint64 *hashes, int nhashes)
{
	int64		horizon;
	int			i;

	esrc_require_shared();
	if (RecoveryInProgress())
		return esrc_standby_horizon(hashes, nhashes);

	/* R1' */
	horizon = esrc_sequence_last_value(seqoid);
	pg_memory_barrier();

	for (i = 0; i < esrc_shared->nslots; i++)
	{
		uint64		ehash[ESRC_SLOT_CATEGORIES];
		uint64		ebound[ESRC_SLOT_CATEGORIES];
		uint64		overflow;
		int			n;
		int			j;

		/* R2' */
		if (!read_slot_categories(seqoid, &esrc_shared->inflight[i],
								  hashes, nhashes, ehash, ebound, &n, &overflow))
			continue;
		/* R3' */
		if (overflow != 0 && (int64) overflow - 1 < horizon)
			horizon = (int64) overflow - 1;
		for (j = 0; j < n; j++)
			if ((int64) ebound[j] - 1 < horizon)
				horizon = (int64) ebound[j] - 1;
	}
	return horizon;
}

/*
 * What the horizon publisher (standby.c) writes for the standbys: R1 once,
 * then R2-R3 (cap->horizon, the global horizon) and R2' for every entry of
 * every slot of this database, the values merged per hash (the lowest)
 * into cap->hashes/bounds, sorted by hash, and the lowest overflow_bound
 * (0: none).  A reader of S on a standby then computes R3' from these
 * exactly as a reader of S here would have from the same reads (see the
 * header, "Hot standbys").  The arrays are palloc'd here.
 */
void
esrc_capture_registry(Oid seqoid, EsrcRegistryCapture *cap)
{
	int			max = esrc_shared->nslots * ESRC_SLOT_CATEGORIES;
	int			i;

	esrc_require_shared();
	cap->hashes = palloc(sizeof(uint64) * max);
	cap->bounds = palloc(sizeof(uint64) * max);
	cap->nentries = 0;
	cap->overflow_bound = 0;

	/* R1 (= R1') */
	cap->last_position = esrc_sequence_last_value(seqoid);
	pg_memory_barrier();
	cap->horizon = scan_global(seqoid, cap->last_position);

	for (i = 0; i < esrc_shared->nslots; i++)
	{
		uint64		ehash[ESRC_SLOT_CATEGORIES];
		uint64		ebound[ESRC_SLOT_CATEGORIES];
		uint64		overflow;
		int			n;
		int			j;

		if (!read_slot_categories(seqoid, &esrc_shared->inflight[i],
								  NULL, -1, ehash, ebound, &n, &overflow))
			continue;
		if (overflow != 0 &&
			(cap->overflow_bound == 0 || overflow < cap->overflow_bound))
			cap->overflow_bound = overflow;
		for (j = 0; j < n; j++)
		{
			int			k;

			for (k = 0; k < cap->nentries && cap->hashes[k] != ehash[j]; k++)
				;
			if (k == cap->nentries)
			{
				cap->hashes[k] = ehash[j];
				cap->bounds[k] = ebound[j];
				cap->nentries++;
			}
			else if (ebound[j] < cap->bounds[k])
				cap->bounds[k] = ebound[j];
		}
	}
	/* sorted by hash, so that two captures compare entry by entry */
	for (i = 1; i < cap->nentries; i++)
	{
		uint64		h = cap->hashes[i];
		uint64		b = cap->bounds[i];
		int			k = i - 1;

		for (; k >= 0 && cap->hashes[k] > h; k--)
		{
			cap->hashes[k + 1] = cap->hashes[k];
			cap->bounds[k + 1] = cap->bounds[k];
		}
		cap->hashes[k + 1] = h;
		cap->bounds[k + 1] = b;
	}
}

/*
 * At the commit of a transaction that appended, before W5: raise
 * commit_end to the end of our commit record.  The fetch-and-compare loop
 * is a full barrier, so a reader that sees our W5 (or any later write to
 * the slot) and then reads commit_end after a read barrier sees at least
 * our commit record's end.  Every position at or below a safe horizon
 * belongs to a transaction whose W5 the reader saw (the claim of the
 * header), so flushing the WAL up to commit_end read after
 * esrc_safe_position() makes every event up to that horizon durable, and
 * only that: not the WAL of transactions still running, whose flush the
 * forwarder used to wait for.  With synchronous commits it is flushed
 * already and XLogFlush() returns at once.
 *
 * With esrc.forwarder_log_batches on, also log when the commit became
 * visible (we run after ProcArrayEndTransaction()), against its commit
 * timestamp, for bench/forward: the part of an event's latency that is
 * the appender's own commit (WAL flush, synchronous replication).
 */
static void
publish_commit_end(EsrcInflightSlot *slot)
{
	XLogRecPtr	end = XactLastCommitEnd;
	uint64		cur = pg_atomic_read_u64(&esrc_shared->commit_end);

	while (cur < (uint64) end &&
		   !pg_atomic_compare_exchange_u64(&esrc_shared->commit_end, &cur, (uint64) end))
		;
	pg_memory_barrier();		/* also when there was nothing to raise */

	if (esrc_forwarder_log_batches)
	{
		TimestampTz stop = GetCurrentTransactionStopTimestamp();

		ereport(LOG,
				(errmsg("esrc: commit visible first_position=" UINT64_FORMAT " commit_us=" INT64_FORMAT " visible_us=" INT64_FORMAT,
						pg_atomic_read_u64(&slot->min_position),
						esrc_unix_us(stop), esrc_unix_us(GetCurrentTimestamp())),
				 errhidestmt(true)));
	}
}

/*
 * The WAL to flush before events read up to a safe horizon may leave the
 * server, and that a standby must have before they do: read after
 * esrc_safe_position() (see publish_commit_end).  Until an appender
 * commits after this server started (a restart, a crash, a promotion),
 * commit_end is 0 and every event up to the horizon was committed before
 * the start: in the WAL that recovery left, all of it flushed, whose end
 * bounds them.
 */
XLogRecPtr
esrc_appended_commit_end(void)
{
	XLogRecPtr	end;

	pg_read_barrier();
	end = (XLogRecPtr) pg_atomic_read_u64(&esrc_shared->commit_end);
	if (XLogRecPtrIsInvalid(end))
		end = GetFlushRecPtr(NULL);
	return end;
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

				uint64		hashes[ESRC_SLOT_CATEGORIES];
				int			n = esrc_xact_ncats;
				bool		overflow = esrc_xact_overflow;

				if (event == XACT_EVENT_COMMIT)
					publish_commit_end(slot);

				/* W5 */
				pg_atomic_write_u64(&slot->min_position, 0);
				pg_atomic_write_u32(&slot->ncategories, 0);
				/* a full barrier: the next transaction writes after it */
				pg_atomic_fetch_add_u64(&slot->generation, 1);
				memcpy(hashes, esrc_xact_hashes, sizeof(uint64) * n);
				esrc_xact_has_slot = false;
				esrc_xact_ncats = 0;
				esrc_xact_overflow = false;

				/*
				 * A commit has events to forward; an abort may have released
				 * the horizon that held back events other transactions
				 * committed meanwhile.  Both concern the long polls of those
				 * categories.
				 */
				if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT)
				{
					int			h;

					for (h = 0; h < nappended_hooks; h++)
						appended_hooks[h] (MyDatabaseId, hashes, n, overflow);
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
