/*-------------------------------------------------------------------------
 *
 * projerase.c
 *	  Erasure reaches read models: a projection created with erase_from
 *	  (tables) and erase_column (the column that holds the stream) has the
 *	  rows of an erased or deleted stream deleted from those tables by its
 *	  worker, in the transaction that delivers the stream's esrc.erased or
 *	  esrc.deleted tombstone to the handler, right after the handler's call
 *	  (so that nothing it wrote for the stream stays either).
 *
 * This file owns the checks at create_projection (tables, column, the
 * owner's DELETE and SELECT), the catalog columns erase_from/erase_column
 * of esrc.projections, and the deletes of the workers: projworker.c notes
 * each event it hands to the handler (esrc_projection_erase_note) and,
 * after the handler's call returned, has the tombstones' rows deleted
 * (esrc_projection_erase_flush) -- as the projection's owner in the owner
 * context (security-restricted, search_path pinned), inside the batch's
 * subtransaction, so a failing delete is a failure of that event like
 * the handler's own (retried, then blocked, with the error in
 * esrc.projection_status).  Tables are kept by qualified name: a table
 * dropped or renamed later makes the delete fail visibly rather than
 * reach another table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "base/base.h"
#include "log/log.h"
#include "subscription/subscription.h"
#include "projectionint.h"

/* What a worker keeps of a projection's erase_from (memory: cxt). */
struct ProjErase
{
	MemoryContext cxt;			/* the deletes' statements */
	MemoryContext pending_cxt;	/* the streams noted, reset at each flush */
	int			ntables;
	char	  **sql;			/* DELETE ... WHERE column = $1, per table */
	int			npending;
	int			maxpending;
	char	  **pending;		/* streams of the tombstones noted */
};

/* One erase_from table: a permanent table with the column, writable by owner. */
static char *
check_table(Oid relid, const char *column, Oid owner)
{
	char		relkind = get_rel_relkind(relid);
	char	   *relname = get_rel_name(relid);
	AttrNumber	att;
	Oid			type;

	if (relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	if ((relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE) ||
		get_rel_persistence(relid) == RELPERSISTENCE_TEMP)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" cannot be erased from by a projection", relname),
				 errdetail("erase_from names permanent tables; the workers delete rows from them in their own sessions.")));
	att = get_attnum(relid, column);
	type = att == InvalidAttrNumber ? InvalidOid : get_atttype(relid, att);
	if (att == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of table \"%s\" does not exist", column, relname),
				 errhint("Pass erase_column => the column that holds the stream's name (default \"stream\").")));
	if (type != TEXTOID && type != VARCHAROID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("column \"%s\" of table \"%s\" cannot hold a stream name", column, relname),
				 errdetail("It is of type %s; erase_column must be of type text or varchar.",
						   format_type_be(type))));
	if (pg_class_aclcheck(relid, owner, ACL_DELETE) != ACLCHECK_OK ||
		(pg_class_aclcheck(relid, owner, ACL_SELECT) != ACLCHECK_OK &&
		 pg_attribute_aclcheck(relid, att, owner, ACL_SELECT) != ACLCHECK_OK))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for table %s", relname),
				 errdetail("The projection's owner deletes the rows of erased and deleted streams from it, and needs DELETE on it and SELECT on column \"%s\".",
						   column)));
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)), relname);
}

/*
 * create_projection's erase_from (argument tables_arg, regclass[]) and
 * erase_column (column_arg): the tables' qualified names as a text[], NULL
 * when erase_from is NULL (or the SQL function predates it); *column is
 * set to the column.  Errors for a table that cannot be erased from.
 */
ArrayType *
esrc_projection_erase_check(FunctionCallInfo fcinfo, int tables_arg, int column_arg,
							Oid owner, char **column)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	Datum	   *names;
	int			n;
	int			i;
	int			j;

	*column = NULL;
	if (PG_NARGS() <= tables_arg || PG_ARGISNULL(tables_arg))
		return NULL;
	if (PG_NARGS() <= column_arg || PG_ARGISNULL(column_arg))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("erase_column must not be null"),
				 errhint("Name the column of the erase_from tables that holds the stream's name (default \"stream\").")));
	*column = text_to_cstring(PG_GETARG_TEXT_PP(column_arg));
	arr = PG_GETARG_ARRAYTYPE_P(tables_arg);
	deconstruct_array(arr, REGCLASSOID, sizeof(Oid), true, TYPALIGN_INT, &elems, &nulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("erase_from must not be empty"),
				 errhint("Use null for none.")));
	names = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("erase_from must not contain nulls")));
		for (j = 0; j < i; j++)
			if (DatumGetObjectId(elems[j]) == DatumGetObjectId(elems[i]))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("erase_from contains table \"%s\" twice",
								get_rel_name(DatumGetObjectId(elems[i])))));
		names[i] = CStringGetTextDatum(check_table(DatumGetObjectId(elems[i]), *column, owner));
	}
	return construct_array(names, n, TEXTOID, -1, false, TYPALIGN_INT);
}

/* Record a new projection's erase_from and erase_column (SPI connected). */
void
esrc_projection_set_erase(int64 id, ArrayType *tables, const char *column)
{
	static const char *sql =
		"UPDATE esrc.projections SET erase_from = $2, erase_column = $3 "
		"WHERE id OPERATOR(pg_catalog.=) $1";
	Oid			argtypes[3] = {INT8OID, TEXTARRAYOID, TEXTOID};
	Datum		values[3];

	values[0] = Int64GetDatum(id);
	values[1] = PointerGetDatum(tables);
	values[2] = CStringGetTextDatum(column);
	catalog_run(sql, 3, argtypes, values, NULL, SPI_OK_UPDATE);
}

/*
 * A worker's ProjErase for a projection whose row has these erase_from and
 * erase_column values; NULL when erase_from is NULL.
 */
ProjErase *
esrc_projection_erase_load(Datum tables, bool isnull, Datum column, bool column_isnull,
						   MemoryContext cxt)
{
	ProjErase  *e;
	char	  **names;
	char	   *col;
	int			i;
	MemoryContext old;

	if (isnull || column_isnull)
		return NULL;
	old = MemoryContextSwitchTo(cxt);
	e = palloc0(sizeof(ProjErase));
	e->cxt = cxt;
	e->pending_cxt = AllocSetContextCreate(cxt, "esrc projection erase", ALLOCSET_SMALL_SIZES);
	names = text_array_to_cstrings(DatumGetArrayTypeP(tables), &e->ntables);
	col = TextDatumGetCString(column);
	e->sql = palloc(sizeof(char *) * Max(e->ntables, 1));
	for (i = 0; i < e->ntables; i++)
		e->sql[i] = psprintf("DELETE FROM %s WHERE %s OPERATOR(pg_catalog.=) $1",
							 names[i], quote_identifier(col));
	MemoryContextSwitchTo(old);
	return e;
}

/* Forget the streams noted (a batch starts, or failed). */
void
esrc_projection_erase_clear(ProjErase *e)
{
	if (e == NULL)
		return;
	MemoryContextReset(e->pending_cxt);
	e->npending = 0;
	e->maxpending = 0;
	e->pending = NULL;
}

/* The event in slot goes to the handler: note its stream if it is a tombstone. */
void
esrc_projection_erase_note(ProjErase *e, TupleTableSlot *slot)
{
	bool		isnull;
	text	   *type;
	MemoryContext old;

	if (e == NULL)
		return;
	type = DatumGetTextPP(slot_getattr(slot, Anum_events_type, &isnull));
	if (isnull || !esrc_is_tombstone_type(VARDATA_ANY(type), VARSIZE_ANY_EXHDR(type)))
		return;
	old = MemoryContextSwitchTo(e->pending_cxt);
	if (e->npending == e->maxpending)
	{
		e->maxpending = Max(8, e->maxpending * 2);
		e->pending = e->pending == NULL ? palloc(sizeof(char *) * e->maxpending) :
			repalloc(e->pending, sizeof(char *) * e->maxpending);
	}
	e->pending[e->npending++] =
		TextDatumGetCString(slot_getattr(slot, Anum_events_stream, &isnull));
	MemoryContextSwitchTo(old);
}

/*
 * The handler's call for the events noted returned: delete the rows of
 * their tombstones' streams from every erase_from table, as owner in the
 * owner context (SPI connected, in the batch's subtransaction).
 */
void
esrc_projection_erase_flush(ProjErase *e, Oid owner)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	int			i;
	int			t;

	if (e == NULL || e->npending == 0)
		return;
	for (i = 0; i < e->npending; i++)
	{
		values[0] = CStringGetTextDatum(e->pending[i]);
		for (t = 0; t < e->ntables; t++)
			esrc_run_as_owner(owner, e->sql[t], 1, argtypes, values, NULL, SPI_OK_DELETE);
	}
	esrc_projection_erase_clear(e);
}
