/*-------------------------------------------------------------------------
 *
 * projretry.c
 *	  Which blocked projections a change of a function retries: a worker
 *	  notes the pg_proc invalidations it receives (the hash of each changed
 *	  function's OID), and gives one more try only to the blocked
 *	  partitions of the projections whose handler is among them.
 *
 * Before 0.3.0 any change of any function of the database (every
 * CREATE OR REPLACE FUNCTION, every ALTER FUNCTION, a temporary function
 * of a session) made every blocked partition of every projection retry
 * once.  Now only the handler's own change does.  The limit: a handler
 * that calls another function that was fixed is not retried by that fix
 * (the worker cannot tell which functions a PL/pgSQL or SQL body calls);
 * esrc.projection_resume(name) retries it at once, as it always did.  A
 * cache reset (hash 0, after a flood of invalidations) and more changes
 * than MAX_CHANGED between two rounds retry every blocked partition, as
 * before: a spurious retry costs one attempt, a missed one would leave a
 * fixed handler blocked.  Two OIDs with the same hash retry both
 * projections (harmless, for the same reason).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/inval.h"
#include "utils/syscache.h"

#include "projectionint.h"

#define MAX_CHANGED		64

static bool all_changed = false;
static int	nchanged = 0;
static uint32 changed[MAX_CHANGED];

static void
proc_changed(Datum arg, int cacheid, uint32 hashvalue)
{
	int			i;

	if (all_changed)
		return;
	if (hashvalue == 0 || nchanged == MAX_CHANGED)
	{
		all_changed = true;
		return;
	}
	for (i = 0; i < nchanged; i++)
		if (changed[i] == hashvalue)
			return;
	changed[nchanged++] = hashvalue;
}

/* In a worker, before its first transaction. */
void
esrc_projretry_init(void)
{
	CacheRegisterSyscacheCallback(PROCOID, proc_changed, (Datum) 0);
}

/* Did any function change since esrc_projretry_reset()? */
bool
esrc_projretry_pending(void)
{
	return all_changed || nchanged > 0;
}

/* Is handler among the functions that changed (or may have)? */
bool
esrc_projretry_changed(Oid handler)
{
	uint32		h;
	int			i;

	if (all_changed)
		return true;
	if (!OidIsValid(handler))
		return false;
	h = GetSysCacheHashValue1(PROCOID, ObjectIdGetDatum(handler));
	for (i = 0; i < nchanged; i++)
		if (changed[i] == h)
			return true;
	return false;
}

void
esrc_projretry_reset(void)
{
	all_changed = false;
	nchanged = 0;
}
