/*-------------------------------------------------------------------------
 *
 * projhint.c
 *	  The search_path hint of a failing handler.  Handlers run with
 *	  search_path = pg_catalog, pg_temp (the owner context, ownerctx.c), so
 *	  a first handler that names its table without the schema fails with
 *	  'relation "counts" does not exist' although the table is there.  When
 *	  a handler (or reset function) fails with an undefined table or
 *	  function (42P01, 42883) whose name was not qualified, the error the
 *	  worker records in esrc.projection_partitions.last_error, and logs,
 *	  says why.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/elog.h"

#include "projectionint.h"

#define SEARCH_PATH_HINT \
	"handlers run with search_path = pg_catalog, pg_temp: qualify table and function names with their schema (app.counts), or give the function its own SET search_path"

/*
 * Does this error come from a name the pinned search_path did not find?
 * Not when the name in the message is qualified: 'relation "app.t" does
 * not exist', 'function app.f(integer) does not exist'.
 */
static bool
undefined_object(const ErrorData *edata)
{
	const char *m = edata->message;
	const char *start = NULL;
	const char *end = NULL;

	if (edata->sqlerrcode != ERRCODE_UNDEFINED_TABLE &&
		edata->sqlerrcode != ERRCODE_UNDEFINED_FUNCTION)
		return false;
	if (m == NULL)
		return true;
	if (strncmp(m, "relation \"", 10) == 0)
	{
		start = m + 10;
		end = strchr(start, '"');
	}
	else if (strncmp(m, "function ", 9) == 0)
	{
		start = m + 9;
		end = strchr(start, '(');
	}
	return start == NULL || end == NULL || memchr(start, '.', end - start) == NULL;
}

/*
 * The text of a handler's error as esrc.projection_status shows it: the
 * message, and for an undefined table or function the search_path hint.
 */
char *
esrc_handler_error_text(const ErrorData *edata)
{
	const char *message = edata->message ? edata->message : "(no message)";

	if (!undefined_object(edata))
		return pstrdup(message);
	return psprintf("%s (%s)", message, SEARCH_PATH_HINT);
}
