/*-------------------------------------------------------------------------
 *
 * subdeclare.c
 *	  The if_not_exists form of esrc.create_subscription and
 *	  esrc.create_projection, for application start-up code that declares
 *	  them: the lock on a subscription's name that serializes the creates
 *	  of one name, the existing definition by name, and what differs
 *	  between it and the one declared.
 *
 * Start is not part of a definition (a subscription that has run has
 * moved past it; 'end' is another position at each start-up), nor are
 * the consumers granted, a projection's pause and its checkpoints.  The
 * rest is: the owner (the caller must have its privileges), the
 * categories and types (as sets), the metadata filter, the partitions.
 * projection.c compares a projection's own columns and uses these for
 * its subscription.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"

#include "base/base.h"
#include "log/log.h"
#include "subscription/subscription.h"

/*
 * Take the lock of a subscription's name (a projection's is
 * "projection:<name>") until the transaction ends, so that two creates of
 * one name run one after the other: the second then finds the first's row
 * (read committed) rather than failing on the catalog's unique index.
 */
void
esrc_lock_subscription_name(const char *name)
{
	LOCKTAG		tag;

	esrc_name_locktag(&tag, name, ESRC_SUBSCRIPTION_LOCK_SPACE);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/* The subscription called name (SPI connected), or NULL if there is none. */
SubDef *
esrc_sub_lookup_name(const char *name, MemoryContext cxt)
{
	static const char *sql =
		"SELECT id FROM esrc.subscriptions WHERE name OPERATOR(pg_catalog.=) $1";
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	int64		id;

	values[0] = CStringGetTextDatum(name);
	catalog_run(sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return NULL;
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	return esrc_sub_lookup_id(id, cxt);
}

/* A list of names as SQL shows an array, {a,b}; "null" for none. */
static char *
names_text(char **names, int n)
{
	StringInfoData s;
	int			i;

	if (n == 0)
		return "null (all)";
	initStringInfo(&s);
	appendStringInfoChar(&s, '{');
	for (i = 0; i < n; i++)
		appendStringInfo(&s, "%s%s", i > 0 ? "," : "", names[i]);
	appendStringInfoChar(&s, '}');
	return s.data;
}

/* Do names[n] (no duplicates) and arr (NULL: none) hold the same names? */
static bool
same_names(char **names, int n, ArrayType *arr, char ***given, int *ngiven)
{
	char	  **other = NULL;
	int			m = 0;
	int			i;
	int			j;

	if (arr != NULL)
		other = text_array_to_cstrings(arr, &m);
	*given = other;
	*ngiven = m;
	if (n != m)
		return false;
	for (i = 0; i < n; i++)
	{
		for (j = 0; j < m; j++)
			if (strcmp(names[i], other[j]) == 0)
				break;
		if (j == m)
			return false;
	}
	return true;
}

static char *
jsonb_or_null(Jsonb *j)
{
	return j == NULL ? "null" : JsonbToCString(NULL, &j->root, VARSIZE(j));
}

/*
 * What differs between the subscription def and a declared one with
 * these categories (NULL = all), partitions, types (NULL = all) and
 * metadata filter (NULL = none), for a caller that is user: sentences for
 * an errdetail ("" when nothing differs), each with a leading space.
 */
char *
esrc_subscription_differences(SubDef *def, Oid user, ArrayType *cats, int32 partitions,
							  ArrayType *types, Jsonb *metadata)
{
	StringInfoData diff;
	char	  **given;
	int			ngiven;

	initStringInfo(&diff);
	if (!has_privs_of_role(user, def->owner))
	{
		const char *owner = GetUserNameFromId(def->owner, true);

		appendStringInfo(&diff, " It is owned by role \"%s\", whose privileges role \"%s\" does not have.",
						 owner ? owner : "(dropped)", GetUserNameFromId(user, false));
	}
	if (!same_names(def->cats, def->ncats, cats, &given, &ngiven))
		appendStringInfo(&diff, " Its categories are %s, not %s.",
						 names_text(def->cats, def->ncats), names_text(given, ngiven));
	if (def->npartitions != partitions)
		appendStringInfo(&diff, " It has %d partitions, not %d.", def->npartitions, partitions);
	if (!same_names(def->types, def->ntypes, types, &given, &ngiven))
		appendStringInfo(&diff, " Its types are %s, not %s.",
						 names_text(def->types, def->ntypes), names_text(given, ngiven));
	if ((def->metadata == NULL) != (metadata == NULL) ||
		(metadata != NULL &&
		 !DatumGetBool(DirectFunctionCall2(jsonb_eq, JsonbPGetDatum(def->metadata),
										   JsonbPGetDatum(metadata)))))
		appendStringInfo(&diff, " Its metadata filter is %s, not %s.",
						 jsonb_or_null(def->metadata), jsonb_or_null(metadata));
	return diff.data;
}
