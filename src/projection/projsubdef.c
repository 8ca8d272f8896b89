/*-------------------------------------------------------------------------
 *
 * projsubdef.c
 *	  A projection worker's copy of its projections' subscription
 *	  definitions (categories, filters, partitions, owner), kept across
 *	  batches instead of read from esrc.subscriptions by every batch.
 *
 * The definition of a projection's subscription changes only through
 * esrc's functions, and each of them wakes the workers at its commit
 * (esrc_projection_wake: create, drop, reset, pause, resume, skip of a
 * projection, REASSIGN OWNED, DROP EXTENSION; projection.c, owners.c),
 * which moves the wake-up sequence number of shared memory.  A copy is
 * valid while that number is the one read before the statement that read
 * the copy: a change committed after the read of the number moves it,
 * and a change committed before is in the statement's snapshot (read
 * committed: a snapshot per statement).  So a batch never uses a
 * definition older than the last change committed before it read the
 * number, as when it read esrc.subscriptions itself; and what a change
 * committed during the batch does (a drop, a reset) is what it did
 * before: the checkpoint write finds the checkpoint moved or gone and the
 * batch is rolled back and runs again (write_checkpoints, subcatalog.c).
 * Any error of a batch forgets every copy (projworker.c), as does a
 * change of the number.  A subscription that no longer exists is not
 * kept: every batch looks for it again, as before.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "subscription/subscription.h"
#include "projectionint.h"

#define MAX_KEPT	64

typedef struct KeptDef
{
	int64		subid;
	SubDef	   *def;
} KeptDef;

static MemoryContext keptcxt = NULL;
static KeptDef kept[MAX_KEPT];
static int	nkept = 0;
static uint64 kept_seq = 0;

/* Forget every copy. */
void
esrc_projection_subdef_forget(void)
{
	if (keptcxt != NULL)
		MemoryContextReset(keptcxt);
	nkept = 0;
}

/*
 * The definition of subscription subid, as of seq (esrc_projection_wake_seq,
 * read before the transaction of the caller began); NULL if it does not
 * exist.  Valid until the caller's transaction ends; in a memory context
 * of its own, which the caller must not free.
 */
struct SubDef *
esrc_projection_subdef(int64 subid, uint64 seq)
{
	SubDef	   *def;
	int			i;

	if (keptcxt == NULL)
		keptcxt = AllocSetContextCreate(TopMemoryContext, "esrc projection definitions",
										ALLOCSET_SMALL_SIZES);
	if (seq != kept_seq)
	{
		esrc_projection_subdef_forget();
		kept_seq = seq;
	}
	for (i = 0; i < nkept; i++)
		if (kept[i].subid == subid)
			return kept[i].def;
	if (nkept == MAX_KEPT)
		return esrc_sub_lookup_id(subid, CurrentMemoryContext);	/* full */
	def = esrc_sub_lookup_id(subid, keptcxt);
	if (def != NULL)
	{
		kept[nkept].subid = subid;
		kept[nkept++].def = def;
	}
	return def;
}
