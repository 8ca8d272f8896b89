/*-------------------------------------------------------------------------
 *
 * lastpos.c
 *	  esrc.last_position(): the global position of the last event this
 *	  session appended, for a read-your-writes wait
 *	  (esrc.wait_for_projection, esrc.wait_for_subscription) right after
 *	  esrc.append, esrc.append_if or esrc.append_batch, which return the
 *	  stream's version.
 *
 * order.c notes every position it hands out (esrc_last_appended); in a
 * backend they only grow, so the last one is the highest one: that of the
 * last event of an append_batch.  It is per session, not per
 * transaction: it stays after the commit (the usual use: append, commit,
 * then wait) and after a rollback (the position then holds no event, and a
 * wait for it returns at once once the positions below it settled).
 * NULL before the session's first append.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"

#include "log/log.h"

PG_FUNCTION_INFO_V1(esrc_last_position);

Datum
esrc_last_position(PG_FUNCTION_ARGS)
{
	if (esrc_last_appended <= 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(esrc_last_appended);
}
