/*-------------------------------------------------------------------------
 *
 * subwait.c
 *	  Long-poll waits of esrc.poll(): the registry of waiting subscribers
 *	  in shared memory, and the wake-up at the commit or abort of a
 *	  transaction that appended.
 *
 * (Interface only for now; the registry comes with the subscriptions.)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "esrc.h"

/*
 * Called by order.c at the commit or abort of a transaction of database
 * dbid that appended events to the categories whose hashes
 * (esrc_category_hash) are hashes[0 .. nhashes - 1]; "any" when it appended
 * to more categories than it tracks, so that every waiter of the database
 * must be woken.  Runs in a transaction callback: must not ereport.
 */
void
esrc_wake_subscribers(Oid dbid, const uint64 *hashes, int nhashes, bool any)
{
}
