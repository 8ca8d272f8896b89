/*-------------------------------------------------------------------------
 *
 * sublease.c
 *	  Partition leases of subscriptions (consumer groups): who holds which
 *	  partition of which subscription, in shared memory, and how the
 *	  partitions are spread over the members that poll.
 *
 * A subscription has P partitions; the events of stream s belong to
 * partition esrc.stream_partition(s, P).  A partition is held by at most
 * one member at a time, by a lease that the member's polls and acks
 * renew; a member that neither polls nor acks for esrc.subscription_lease
 * loses its partitions and its place in the group.  Checkpoints are not
 * kept here but in esrc.subscription_checkpoints (transactional, written
 * by esrc.ack in the consumer's transaction); what a lease records of
 * them is only what the holder's last poll read, so that an ack can tell
 * that another member has moved a checkpoint meanwhile (subscription.c).
 *
 * Leases are not durable: after a restart every partition is free and the
 * members take them again at their next poll.  Nothing is lost by that,
 * since every session that held one ended with the server.
 *
 * Spreading (esrc_lease_poll, run at every poll): the live members of the
 * subscription are ranked by name (byte order); of n members, member i
 * (from 0) is due P / n partitions, plus one if i < P % n, so the shares
 * add up to P and differ by at most one.  A member over its share releases
 * its highest-numbered partitions; a member under it takes free ones,
 * lowest first.  A partition held by a live member is never taken from
 * it: the holder releases it at its next poll, and a waiting poll is
 * woken for that (subwait.c), so the group converges within one round of
 * polls of its members.
 *
 * Both tables are shared hash tables of a fixed size, which
 * esrc.max_partition_leases sets (each table has that many entries), under
 * one LWLock taken exclusively for a few microseconds per poll or ack.
 * Their entries are all allocated at start-up (HASH_FIXED_SIZE) within
 * what esrc_lease_shmem_size() requests, and enter() never inserts past
 * the setting: a table that could grow would take the server's spare
 * shared memory, which the lock table needs, and keep it on its freelist
 * until a restart.  Expired entries are removed when a poll meets them or
 * when a table is full; a table full of live entries is 53400.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "log/log.h"
#include "subscription/subscription.h"

/* Partition leases, key (subscription, partition) */
typedef struct LeaseKey
{
	EsrcSubKey	sub;
	int32		partition;
} LeaseKey;

typedef struct Lease
{
	LeaseKey	key;
	char		member[ESRC_MAX_MEMBER_NAME + 1];
	TimestampTz expires;
	int64		polled_checkpoint;	/* read by the holder's last poll, -1 none */
} Lease;

/* Members, key (subscription, name) */
typedef struct MemberKey
{
	EsrcSubKey	sub;
	char		member[ESRC_MAX_MEMBER_NAME + 1];
} MemberKey;

typedef struct Member
{
	MemberKey	key;
	TimestampTz expires;
	int64		covered_to;		/* the last poll covered positions up to this */
} Member;

int			esrc_max_partition_leases = 1024;

static HTAB *lease_table = NULL;
static HTAB *member_table = NULL;
static LWLock *lease_lock = NULL;

#define LEASE_TRANCHE "esrc_subscriptions"

/*
 * What the two tables take: hash_estimate_size() counts the header, the
 * directory, the buckets and every entry; ShmemAlloc rounds each of a
 * table's allocations (header, segments, entries) up to a cache line,
 * which the margin covers.
 */
Size
esrc_lease_shmem_size(void)
{
	Size		margin = mul_size(8, PG_CACHE_LINE_SIZE);

	return add_size(add_size(hash_estimate_size(esrc_max_partition_leases, sizeof(Lease)),
							 hash_estimate_size(esrc_max_partition_leases, sizeof(Member))),
					margin);
}

void
esrc_lease_shmem_request(void)
{
	RequestNamedLWLockTranche(LEASE_TRANCHE, 1);
}

/*
 * Attach to (or create) the tables, every entry allocated now and none
 * later (HASH_FIXED_SIZE); called with AddinShmemInitLock held.
 */
void
esrc_lease_shmem_init(void)
{
	HASHCTL		info;

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(LeaseKey);
	info.entrysize = sizeof(Lease);
	lease_table = ShmemInitHash("esrc partition leases",
								esrc_max_partition_leases, esrc_max_partition_leases,
								&info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(MemberKey);
	info.entrysize = sizeof(Member);
	member_table = ShmemInitHash("esrc subscription members",
								 esrc_max_partition_leases, esrc_max_partition_leases,
								 &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	lease_lock = &(GetNamedLWLockTranche(LEASE_TRANCHE))->lock;
}

static void
require_tables(void)
{
	esrc_require_shared();
	if (lease_table == NULL || member_table == NULL || lease_lock == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("esrc subscription leases are not initialized"),
				 errhint("Add esrc to shared_preload_libraries in postgresql.conf and restart the server.")));
}

static void
lease_key(LeaseKey *key, const EsrcSubKey *sub, int32 partition)
{
	memset(key, 0, sizeof(*key));
	key->sub = *sub;
	key->partition = partition;
}

static void
member_key(MemberKey *key, const EsrcSubKey *sub, const char *member)
{
	memset(key, 0, sizeof(*key));
	key->sub = *sub;
	strlcpy(key->member, member, sizeof(key->member));
}

static bool
same_sub(const EsrcSubKey *a, const EsrcSubKey *b)
{
	return a->id == b->id && a->dbid == b->dbid && a->catalog == b->catalog;
}

/* Remove every expired entry of both tables; lock held exclusively. */
static void
sweep_expired(TimestampTz now)
{
	HASH_SEQ_STATUS status;
	Lease	   *l;
	Member	   *m;

	hash_seq_init(&status, lease_table);
	while ((l = hash_seq_search(&status)) != NULL)
		if (l->expires <= now)
			(void) hash_search(lease_table, &l->key, HASH_REMOVE, NULL);
	hash_seq_init(&status, member_table);
	while ((m = hash_seq_search(&status)) != NULL)
		if (m->expires <= now)
			(void) hash_search(member_table, &m->key, HASH_REMOVE, NULL);
}

/* A table is full of live entries: release the lock and raise 53400. */
static void
table_full(HTAB *table)
{
	LWLockRelease(lease_lock);
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("too many subscription leases"),
			 errdetail("All %d entries of the %s table (esrc.max_partition_leases) are held by live members.",
					   esrc_max_partition_leases,
					   table == lease_table ? "partition lease" : "member"),
			 errhint("Raise esrc.max_partition_leases (needs a restart), or use fewer partitions or members.")));
}

/*
 * Enter a key, sweeping expired entries once if the table is full; 53400
 * (table_full) if it stays full.  A new key is refused at the setting's
 * count before hash_search() sees it: an insert into a full table would
 * first try to split a bucket, which can allocate a segment of buckets
 * outside the tables' share of shared memory.
 */
static void *
enter(HTAB *table, const void *key, TimestampTz now, bool *found)
{
	void	   *entry = hash_search(table, key, HASH_FIND, found);

	if (entry != NULL)
		return entry;
	if (hash_get_num_entries(table) >= esrc_max_partition_leases)
	{
		sweep_expired(now);
		if (hash_get_num_entries(table) >= esrc_max_partition_leases)
			table_full(table);
	}
	entry = hash_search(table, key, HASH_ENTER_NULL, found);
	if (entry == NULL)
		table_full(table);		/* not reached: every entry was preallocated */
	return entry;
}

static int
cmp_int32(const void *a, const void *b)
{
	int32		x = *(const int32 *) a;
	int32		y = *(const int32 *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

static int
cmp_names(const void *a, const void *b)
{
	return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/*
 * A poll of member: join or renew membership, then take and release
 * partitions of the subscription (P = npartitions) as the rules in the
 * header comment say, and renew the leases kept.  On return held[0 ..
 * result - 1] are the partitions the member holds, ascending, and
 * taken[p] (npartitions entries) says which of them it took just now;
 * *others_over is set when the member is under its share because other
 * live members hold more than theirs (they should be woken to release),
 * *released when it gave partitions up (waiting members may take them).
 */
int
esrc_lease_poll(const EsrcSubKey *sub, int npartitions, const char *member,
				int lease_ms, int32 *held, bool *taken, bool *others_over,
				bool *released)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz expires = TimestampTzPlusMilliseconds(now, lease_ms);
	MemberKey	mkey;
	LeaseKey	lkey;
	Member	   *me;
	HASH_SEQ_STATUS status;
	Member	   *m;
	const char **names;
	int			maxnames = 16;
	int			nlive = 0;
	int			rank = 0;
	int			share;
	int			nheld = 0;
	int			nfree = 0;
	int32	   *freeparts;
	bool		found;
	int			p;
	int			i;

	require_tables();
	*others_over = false;
	*released = false;
	memset(taken, 0, sizeof(bool) * npartitions);
	names = palloc(sizeof(char *) * maxnames);
	freeparts = palloc(sizeof(int32) * npartitions);

	LWLockAcquire(lease_lock, LW_EXCLUSIVE);

	member_key(&mkey, sub, member);
	me = enter(member_table, &mkey, now, &found);
	if (!found)
		me->covered_to = -1;
	me->expires = expires;

	/* the live members of this subscription, and our rank among them */
	hash_seq_init(&status, member_table);
	while ((m = hash_seq_search(&status)) != NULL)
	{
		if (!same_sub(&m->key.sub, sub))
			continue;
		if (m->expires <= now)
		{
			(void) hash_search(member_table, &m->key, HASH_REMOVE, NULL);
			continue;
		}
		if (nlive == maxnames)
		{
			maxnames *= 2;
			names = repalloc(names, sizeof(char *) * maxnames);
		}
		names[nlive++] = m->key.member;
	}
	qsort(names, nlive, sizeof(char *), cmp_names);
	for (i = 0; i < nlive; i++)
		if (strcmp(names[i], member) == 0)
			rank = i;
	share = npartitions / nlive + (rank < npartitions % nlive ? 1 : 0);

	/* what we hold, and what is free */
	for (p = 0; p < npartitions; p++)
	{
		Lease	   *l;

		lease_key(&lkey, sub, p);
		l = hash_search(lease_table, &lkey, HASH_FIND, NULL);
		if (l != NULL && l->expires <= now)
		{
			(void) hash_search(lease_table, &lkey, HASH_REMOVE, NULL);
			l = NULL;
		}
		if (l == NULL)
			freeparts[nfree++] = p;
		else if (strcmp(l->member, member) == 0)
			held[nheld++] = p;
	}

	/* over our share: give up the highest */
	while (nheld > share)
	{
		lease_key(&lkey, sub, held[--nheld]);
		(void) hash_search(lease_table, &lkey, HASH_REMOVE, NULL);
		*released = true;
	}

	/* under it: take free ones, lowest first */
	for (i = 0; i < nfree && nheld < share; i++)
	{
		Lease	   *l;

		lease_key(&lkey, sub, freeparts[i]);
		l = enter(lease_table, &lkey, now, &found);
		strlcpy(l->member, member, sizeof(l->member));
		l->polled_checkpoint = -1;
		l->expires = expires;
		taken[freeparts[i]] = true;
		held[nheld++] = freeparts[i];
	}
	if (nheld < share)
		*others_over = true;

	/* renew, and keep held[] ascending */
	for (i = 0; i < nheld; i++)
	{
		Lease	   *l;

		lease_key(&lkey, sub, held[i]);
		l = hash_search(lease_table, &lkey, HASH_FIND, NULL);
		Assert(l != NULL);
		l->expires = expires;
	}
	LWLockRelease(lease_lock);

	qsort(held, nheld, sizeof(int32), cmp_int32);
	pfree(names);
	pfree(freeparts);
	return nheld;
}

/*
 * An ack of member: renew its membership and leases and return the
 * partitions it holds (held[], ascending), the checkpoints its last poll
 * read of them (polled[], -1 = unknown) and what that poll covered
 * (*covered_to).  Returns -1 if the member is not a live member of the
 * subscription.
 */
int
esrc_lease_ack(const EsrcSubKey *sub, int npartitions, const char *member,
			   int lease_ms, int32 *held, int64 *polled, int64 *covered_to)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz expires = TimestampTzPlusMilliseconds(now, lease_ms);
	MemberKey	mkey;
	LeaseKey	lkey;
	Member	   *me;
	int			nheld = 0;
	int			p;

	require_tables();
	LWLockAcquire(lease_lock, LW_EXCLUSIVE);
	member_key(&mkey, sub, member);
	me = hash_search(member_table, &mkey, HASH_FIND, NULL);
	if (me == NULL || me->expires <= now)
	{
		LWLockRelease(lease_lock);
		return -1;
	}
	me->expires = expires;
	*covered_to = me->covered_to;
	for (p = 0; p < npartitions; p++)
	{
		Lease	   *l;

		lease_key(&lkey, sub, p);
		l = hash_search(lease_table, &lkey, HASH_FIND, NULL);
		if (l == NULL || l->expires <= now || strcmp(l->member, member) != 0)
			continue;
		l->expires = expires;
		held[nheld] = p;
		polled[nheld] = l->polled_checkpoint;
		nheld++;
	}
	LWLockRelease(lease_lock);
	return nheld;
}

/*
 * Record what a poll of member read and covered: the checkpoints of the
 * partitions held[0 .. nheld - 1] (those it still holds) and the last
 * position it covered (covered_to < 0: leave as is).
 */
void
esrc_lease_record(const EsrcSubKey *sub, const char *member, int nheld,
				  const int32 *held, const int64 *checkpoints, int64 covered_to)
{
	MemberKey	mkey;
	LeaseKey	lkey;
	Member	   *me;
	int			i;

	require_tables();
	LWLockAcquire(lease_lock, LW_EXCLUSIVE);
	member_key(&mkey, sub, member);
	me = hash_search(member_table, &mkey, HASH_FIND, NULL);
	if (me != NULL && covered_to >= 0)
		me->covered_to = covered_to;
	for (i = 0; i < nheld; i++)
	{
		Lease	   *l;

		lease_key(&lkey, sub, held[i]);
		l = hash_search(lease_table, &lkey, HASH_FIND, NULL);
		if (l != NULL && strcmp(l->member, member) == 0)
			l->polled_checkpoint = checkpoints[i];
	}
	LWLockRelease(lease_lock);
}

/*
 * The holder of each partition of a subscription, for the status view:
 * members[p] (palloc'd copies, NULL = free) and expires[p].
 */
void
esrc_lease_holders(const EsrcSubKey *sub, int npartitions, char **members,
				   TimestampTz *expires)
{
	TimestampTz now = GetCurrentTimestamp();
	LeaseKey	lkey;
	int			p;
	char	  (*copy)[ESRC_MAX_MEMBER_NAME + 1];

	require_tables();
	copy = palloc0(sizeof(*copy) * npartitions);
	LWLockAcquire(lease_lock, LW_SHARED);
	for (p = 0; p < npartitions; p++)
	{
		Lease	   *l;

		lease_key(&lkey, sub, p);
		l = hash_search(lease_table, &lkey, HASH_FIND, NULL);
		expires[p] = 0;
		if (l != NULL && l->expires > now)
		{
			memcpy(copy[p], l->member, sizeof(copy[p]));
			expires[p] = l->expires;
		}
	}
	LWLockRelease(lease_lock);
	for (p = 0; p < npartitions; p++)
		members[p] = expires[p] != 0 ? copy[p] : NULL;
}

/* Forget every lease and member of a subscription (it was dropped). */
void
esrc_lease_forget(const EsrcSubKey *sub)
{
	HASH_SEQ_STATUS status;
	Lease	   *l;
	Member	   *m;

	require_tables();
	LWLockAcquire(lease_lock, LW_EXCLUSIVE);
	hash_seq_init(&status, lease_table);
	while ((l = hash_seq_search(&status)) != NULL)
		if (same_sub(&l->key.sub, sub))
			(void) hash_search(lease_table, &l->key, HASH_REMOVE, NULL);
	hash_seq_init(&status, member_table);
	while ((m = hash_seq_search(&status)) != NULL)
		if (same_sub(&m->key.sub, sub))
			(void) hash_search(member_table, &m->key, HASH_REMOVE, NULL);
	LWLockRelease(lease_lock);
}

/*
 * A member leaves the group at once (a projection worker that stops):
 * its entry and its leases go, and the other members may take the
 * partitions at their next poll instead of after the lease.
 */
void
esrc_lease_leave(const EsrcSubKey *sub, const char *member)
{
	HASH_SEQ_STATUS status;
	MemberKey	mkey;
	Lease	   *l;

	require_tables();
	LWLockAcquire(lease_lock, LW_EXCLUSIVE);
	member_key(&mkey, sub, member);
	(void) hash_search(member_table, &mkey, HASH_REMOVE, NULL);
	hash_seq_init(&status, lease_table);
	while ((l = hash_seq_search(&status)) != NULL)
		if (same_sub(&l->key.sub, sub) && strcmp(l->member, member) == 0)
			(void) hash_search(lease_table, &l->key, HASH_REMOVE, NULL);
	LWLockRelease(lease_lock);
}
