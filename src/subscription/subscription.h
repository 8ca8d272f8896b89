/*-------------------------------------------------------------------------
 *
 * subscription.h
 *	  The face of src/subscription/: the definition of a subscription as
 *	  its functions see it, the catalog access of subcatalog.c, the batch
 *	  interface of subscription.c that the projection workers are built
 *	  on, the partition leases (sublease.c) and the long polls' waits
 *	  (subwait.c), in shared memory.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_SUBSCRIPTION_H
#define ESRC_SUBSCRIPTION_H

#include "utils/jsonb.h"
#include "utils/tuplestore.h"

#include "base/base.h"
#include "log/log.h"

/*
 * subwait.c: the long polls of esrc.poll() (subscription.c) wait on their
 * latch; a commit or abort that appended wakes those it concerns (order.c).
 * A poll tracks up to ESRC_WAIT_CATEGORIES categories, beyond that all.
 */
#define ESRC_WAIT_CATEGORIES	8

/*
 * A subscription as shared memory knows it: its database, the esrc.subscriptions
 * table it is a row of (so that a subscription of a dropped and re-created
 * extension, whose ids start again at 1, is another one), and its id.
 */
typedef struct EsrcSubKey
{
	Oid			dbid;
	Oid			catalog;
	int64		id;
} EsrcSubKey;
extern Size esrc_wait_shmem_size(void);
extern void esrc_wait_shmem_init(void);
extern void esrc_wait_register(const EsrcSubKey *sub, const uint64 *hashes,
							   int nhashes, bool all);
extern void esrc_wait_unregister(void);
extern bool esrc_wait_suspend(void);
extern void esrc_wait_resume(void);
extern bool esrc_wait_sleep(long timeout_ms);
extern void esrc_wake_subscribers(Oid dbid, const uint64 *hashes, int nhashes,
								  bool any);
extern void esrc_wake_subscription(const EsrcSubKey *sub);

/*
 * subnotify.c: the registry of sessions waiting for a subscription's
 * progress, and their wake-up by the commits that note the subscription
 * with esrc_sub_progress_at_commit.
 */
extern Size esrc_progress_shmem_size(void);
extern void esrc_progress_shmem_init(void);
extern void esrc_sub_progress_at_commit(int64 subid);
extern void esrc_progress_register(const EsrcSubKey *key);
extern void esrc_progress_unregister(void);

/*
 * subprogress.c: read-your-writes waits on a subscription's checkpoints
 * (esrc.wait_for_subscription, and esrc.wait_for_projection on a
 * projection's subscription).
 */
struct SubDef;
extern long esrc_progress_wait_args(FunctionCallInfo fcinfo, const char *fname,
									int64 *position);
extern bool esrc_sub_applied_upto(struct SubDef *def, int64 position,
								  bool *horizon_short);
extern bool esrc_progress_wait(struct SubDef *def, long timeout_ms,
							   bool (*check) (void *arg, bool *horizon_short),
							   void *arg);

/* sublease.c: partition leases of subscriptions, in shared memory */
extern int	esrc_max_partition_leases;
extern Size esrc_lease_shmem_size(void);
extern void esrc_lease_shmem_request(void);
extern void esrc_lease_shmem_init(void);
extern int	esrc_lease_poll(const EsrcSubKey *sub, int npartitions,
							const char *member, int lease_ms, int32 *held,
							bool *taken, bool *others_over, bool *released);
extern int	esrc_lease_ack(const EsrcSubKey *sub, int npartitions,
						   const char *member, int lease_ms, int32 *held,
						   int64 *polled, int64 *covered_to);
extern void esrc_lease_record(const EsrcSubKey *sub, const char *member,
							  int nheld, const int32 *held,
							  const int64 *checkpoints, int64 covered_to);
extern void esrc_lease_holders(const EsrcSubKey *sub, int npartitions,
							   char **members, TimestampTz *expires);
extern void esrc_lease_forget(const EsrcSubKey *sub);
extern void esrc_lease_leave(const EsrcSubKey *sub, const char *member);

/* subcatalog.c: the subscriptions' GUCs */
extern void esrc_subscription_init(void);

#define ESRC_MAX_PARTITIONS		1024
#define ESRC_MAX_SUB_TAGS		32		/* the tag filter: at most 32 tags */
#define ESRC_MAX_SUB_TAG_LEN	256		/* of 1 to 256 bytes (log/tags.c) */
#define ESRC_MAX_SUB_CATEGORIES	64
#define ESRC_MAX_SUB_TYPES		64

/* the names of projections' subscriptions begin with this */
#define ESRC_PROJECTION_SUB_PREFIX	"projection:"

/* A row of esrc.subscriptions, in the caller's memory */
typedef struct SubDef
{
	int64		id;
	EsrcSubKey	key;			/* for sublease.c and subwait.c */
	char	   *name;
	Oid			owner;
	bool		projection;		/* run by a projection's workers */
	int			npartitions;
	int			ncats;			/* 0 = all categories */
	char	  **cats;
	uint64	   *cathashes;
	int			ntypes;			/* 0 = all types */
	char	  **types;
	Jsonb	   *metadata;		/* NULL = no filter */
	int			ntags;			/* 0 = no tag filter */
	char	  **tags;			/* every one required */
	int			nconsumers;
	Oid		   *consumers;
	int64	   *checkpoints;	/* per partition, as read with the row (-1 = none) */
} SubDef;

/* subcatalog.c */
extern int	esrc_subscription_lease_ms;
extern int	esrc_poll_max_wait_ms;

extern int	stream_partition(const char *stream, int len, int npartitions);
extern void check_partitions(int32 partitions);
extern Oid	catalog_owner(void);
extern void catalog_run(const char *sql, int nargs, Oid *argtypes, Datum *values,
						const char *nulls, int expected_rc);
extern char **text_array_to_cstrings(ArrayType *arr, int *n);
extern SubDef *lookup_subscription(const char *name, MemoryContext cxt,
								   bool with_checkpoints);
extern Oid	role_oid(const char *name);
extern void check_owner(SubDef *def);
extern void check_consumer(SubDef *def);
extern void check_not_projection(SubDef *def);
/* esrc.drop_subscription, whose code DROP OWNED runs (owners.c) */
extern Datum esrc_drop_subscription(PG_FUNCTION_ARGS);
extern char *subscription_name_arg(FunctionCallInfo fcinfo, int argno);
extern char *member_name_arg(FunctionCallInfo fcinfo, int argno);
extern ArrayType *check_name_array(FunctionCallInfo fcinfo, int argno, const char *what,
								   int maxlen, int maxcount, bool is_category);
extern int64 subscription_horizon(SubDef *def);
extern void check_position_in_log(int64 position, int64 horizon, int ncats,
								  const char *hint);
extern int64 subscription_start_position(const char *start, ArrayType *cats);
extern int64 subscription_insert(const char *name, Oid owner, ArrayType *cats,
								 int32 partitions, int64 checkpoint, bool projection);
extern ArrayType *int4_array(const int32 *v, int n);
extern ArrayType *int8_array(const int64 *v, int n);
extern void read_checkpoints(SubDef *def, int nheld, const int32 *held, int64 *cps);
extern int	write_checkpoints(SubDef *def, int nheld, const int32 *held,
							  const int64 *expected, int64 position,
							  bool *moved_by_other, int32 *other_partition);

/*
 * subscription.c: batches for a member that runs in the server (a
 * projection worker).  esrc_sub_fetch takes or renews the member's leases,
 * reads the checkpoints of its partitions and puts into ts the events
 * after them, up to the horizon, of the held partitions that skip[] (per
 * partition, may be NULL) does not exclude, in position order, at most
 * max_count: one pass, no wait.  esrc_sub_advance then moves the
 * checkpoints of the partitions in include[] (per partition) from what the
 * fetch read to position, in the caller's transaction, and raises 40001
 * if another member or a reset moved one meanwhile.
 */
typedef struct EsrcSubBatch
{
	int			nheld;
	int32	   *held;			/* partitions held, ascending */
	int64	   *cps;			/* their checkpoints, as read */
	bool	   *fetched;		/* per partition: held and not skipped */
	int64		lo;				/* lowest checkpoint of the fetched ones */
	int64		covered;		/* every event up to here of the fetched ones is in ts */
	int			n;				/* events put into ts */
	bool		to_horizon;		/* covered reaches the horizon of the fetch */
} EsrcSubBatch;

extern SubDef *esrc_sub_lookup_id(int64 id, MemoryContext cxt);

/* subdeclare.c: the if_not_exists form of create_subscription/projection */
extern void esrc_lock_subscription_name(const char *name);
extern SubDef *esrc_sub_lookup_name(const char *name, MemoryContext cxt);
extern char *esrc_subscription_differences(SubDef *def, Oid user, ArrayType *cats,
										   int32 partitions, ArrayType *types,
										   Jsonb *metadata, ArrayType *tags);
extern void esrc_sub_fetch(SubDef *def, const char *member, const bool *skip,
						   int max_count, Tuplestorestate *ts, TupleDesc desc,
						   EsrcSubBatch *batch);
extern void esrc_sub_advance(SubDef *def, const char *member, EsrcSubBatch *batch,
							 const bool *include, int64 position);
extern void esrc_sub_release(SubDef *def, const char *member);

#endif							/* ESRC_SUBSCRIPTION_H */
