/*-------------------------------------------------------------------------
 *
 * projdeclare.c
 *	  The if_not_exists form of esrc.create_projection, for application
 *	  start-up code that declares its projections: an existing projection
 *	  of the same definition is a NOTICE (create_projection returns its
 *	  id), one of another definition an error that says what differs.
 *
 * A projection's definition is its owner, handler, reset function and
 * batch size (esrc.projections) and the categories and partitions of its
 * subscription, compared by subdeclare.c.  Its start, pause, checkpoints
 * and errors are not: they are where it is, not what it is.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "base/base.h"
#include "subscription/subscription.h"
#include "projectionint.h"

static bool
same_text(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

/*
 * The projection called name as create_projection would make it (SPI
 * connected; the caller holds the lock of its subscription's name): its id
 * and a NOTICE when it exists with this definition, 0 when there is none,
 * an error when it exists with another.  handler and reset are identities
 * as esrc.projections stores them (reset NULL = none).
 */
int64
esrc_projection_declared(const char *name, const char *handler, const char *reset,
						 int32 batch_size, ArrayType *cats, int32 partitions)
{
	static const char *sql =
		"SELECT id, handler, reset_function, batch_size, subscription_id "
		"FROM esrc.projections WHERE name OPERATOR(pg_catalog.=) $1";
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	Datum		d;
	int64		id;
	char	   *old_handler;
	char	   *old_reset;
	int32		old_batch;
	SubDef	   *sub;
	StringInfoData diff;

	values[0] = CStringGetTextDatum(name);
	catalog_run(sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return 0;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	old_handler = TextDatumGetCString(SPI_getbinval(tup, desc, 2, &isnull));
	d = SPI_getbinval(tup, desc, 3, &isnull);
	old_reset = isnull ? NULL : TextDatumGetCString(d);
	old_batch = DatumGetInt32(SPI_getbinval(tup, desc, 4, &isnull));
	sub = esrc_sub_lookup_id(DatumGetInt64(SPI_getbinval(tup, desc, 5, &isnull)),
							 CurrentMemoryContext);
	if (sub == NULL)
		elog(ERROR, "projection \"%s\" has no subscription", name);

	initStringInfo(&diff);
	appendStringInfoString(&diff, esrc_subscription_differences(sub, GetUserId(), cats,
																partitions, NULL, NULL));
	if (!same_text(old_handler, handler))
		appendStringInfo(&diff, " Its handler is %s, not %s.", old_handler, handler);
	if (!same_text(old_reset, reset))
		appendStringInfo(&diff, " Its reset function is %s, not %s.",
						 old_reset ? old_reset : "null (none)", reset ? reset : "null (none)");
	if (old_batch != batch_size)
		appendStringInfo(&diff, " Its batch size is %d, not %d.", old_batch, batch_size);
	if (diff.len > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("projection \"%s\" already exists with another definition", name),
				 errdetail("%s", diff.data + 1),
				 errhint("To change a projection, drop it with esrc.drop_projection() and create it again; a new handler can also be put in place with CREATE OR REPLACE FUNCTION.")));
	ereport(NOTICE,
			(errcode(ERRCODE_DUPLICATE_OBJECT),
			 errmsg("projection \"%s\" already exists, skipping", name)));
	return id;
}
