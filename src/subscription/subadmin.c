/*-------------------------------------------------------------------------
 *
 * subadmin.c
 *	  The functions that manage subscriptions: esrc.create_subscription
 *	  (and its if_not_exists form, subdeclare.c), esrc.drop_subscription,
 *	  esrc.reset_subscription, esrc.grant_subscription and
 *	  esrc.revoke_subscription.  They read and write the catalog through
 *	  subcatalog.c (catalog_run, as the catalog's owner).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "base/base.h"
#include "log/log.h"
#include "subscription/subscription.h"

PG_FUNCTION_INFO_V1(esrc_create_subscription);
PG_FUNCTION_INFO_V1(esrc_drop_subscription);
PG_FUNCTION_INFO_V1(esrc_reset_subscription);
PG_FUNCTION_INFO_V1(esrc_grant_subscription);
PG_FUNCTION_INFO_V1(esrc_revoke_subscription);

/*
 * The if_not_exists form (subdeclare.c): true, with a NOTICE, when the
 * subscription called name exists with this definition; an error when it
 * exists with another; false when there is none.
 */
static bool
declared_already(const char *name, ArrayType *cats, int32 partitions,
				 ArrayType *types, Jsonb *metadata, ArrayType *tags)
{
	SubDef	   *def = esrc_sub_lookup_name(name, CurrentMemoryContext);
	char	   *diff;

	if (def == NULL)
		return false;
	diff = esrc_subscription_differences(def, GetUserId(), cats, partitions, types, metadata,
										 tags);
	if (diff[0] != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("subscription \"%s\" already exists with another definition", name),
				 errdetail("%s", diff + 1),
				 errhint("To change a subscription, drop it with esrc.drop_subscription() and create it again.")));
	ereport(NOTICE,
			(errcode(ERRCODE_DUPLICATE_OBJECT),
			 errmsg("subscription \"%s\" already exists, skipping", name)));
	return true;
}

/*
 * esrc.create_subscription(name, categories, partitions, start, types,
 * metadata, tags, if_not_exists)
 */
Datum
esrc_create_subscription(PG_FUNCTION_ARGS)
{
	static const char *filters_sql =
		"UPDATE esrc.subscriptions SET types = $2, metadata = $3 "
		"WHERE id OPERATOR(pg_catalog.=) $1";
	static const char *tags_sql =
		"UPDATE esrc.subscriptions SET tags = $2 WHERE id OPERATOR(pg_catalog.=) $1";
	ArrayType  *tags;
	char	   *name;
	ArrayType  *cats;
	int32		partitions;
	char	   *start;
	ArrayType  *types;
	Jsonb	   *metadata = PG_ARGISNULL(5) ? NULL : PG_GETARG_JSONB_P(5);
	int64		checkpoint;
	int64		id;

	/* PG_NARGS: the 0.2.0 SQL function, before ALTER EXTENSION UPDATE, has 6 */
	bool		if_not_exists = PG_NARGS() > 7 && !PG_ARGISNULL(7) && PG_GETARG_BOOL(7);

	PreventCommandIfReadOnly("esrc.create_subscription()");
	name = subscription_name_arg(fcinfo, 0);
	cats = check_name_array(fcinfo, 1, "categories", ESRC_MAX_STREAM_NAME,
							ESRC_MAX_SUB_CATEGORIES, true);
	types = check_name_array(fcinfo, 4, "types", ESRC_MAX_TYPE_NAME,
							 ESRC_MAX_SUB_TYPES, false);
	/* the 0.2.0 function has no tags argument */
	tags = PG_NARGS() < 7 ? NULL :
		check_name_array(fcinfo, 6, "tags", ESRC_MAX_SUB_TAG_LEN, ESRC_MAX_SUB_TAGS, false);
	if (strncmp(name, ESRC_PROJECTION_SUB_PREFIX, strlen(ESRC_PROJECTION_SUB_PREFIX)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("subscription names beginning with \"%s\" are reserved",
						ESRC_PROJECTION_SUB_PREFIX),
				 errdetail("They name the subscriptions of projections.")));
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("partitions must not be null")));
	partitions = PG_GETARG_INT32(2);
	check_partitions(partitions);
	if (metadata != NULL && !JB_ROOT_IS_OBJECT(metadata))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("metadata filter must be a JSON object"),
				 errdetail("Events are selected by metadata @> filter.")));
	if (!has_privs_of_role(GetUserId(), role_oid("esrc_subscriber")))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to create subscription \"%s\"", name),
				 errdetail("Creating subscriptions needs the privileges of esrc_subscriber.")));

	start = PG_ARGISNULL(3) ? "beginning" : text_to_cstring(PG_GETARG_TEXT_PP(3));

	SPI_connect();
	esrc_lock_subscription_name(name);
	if (if_not_exists && declared_already(name, cats, partitions, types, metadata, tags))
	{
		SPI_finish();
		PG_RETURN_VOID();
	}
	checkpoint = subscription_start_position(start, cats);
	id = subscription_insert(name, GetUserId(), cats, partitions, checkpoint, false);
	if (types != NULL || metadata != NULL)
	{
		Oid			argtypes[3] = {INT8OID, TEXTARRAYOID, JSONBOID};
		Datum		values[3];
		char		nulls[3] = {' ', ' ', ' '};

		values[0] = Int64GetDatum(id);
		values[1] = PointerGetDatum(types);
		nulls[1] = types == NULL ? 'n' : ' ';
		values[2] = PointerGetDatum(metadata);
		nulls[2] = metadata == NULL ? 'n' : ' ';
		catalog_run(filters_sql, 3, argtypes, values, nulls, SPI_OK_UPDATE);
	}
	if (tags != NULL)
	{
		Oid			argtypes[2] = {INT8OID, TEXTARRAYOID};
		Datum		values[2];

		values[0] = Int64GetDatum(id);
		values[1] = PointerGetDatum(tags);
		catalog_run(tags_sql, 2, argtypes, values, NULL, SPI_OK_UPDATE);
	}
	SPI_finish();
	PG_RETURN_VOID();
}

/* esrc.drop_subscription(name) */
Datum
esrc_drop_subscription(PG_FUNCTION_ARGS)
{
	static const char *sql =
		"DELETE FROM esrc.subscriptions WHERE id OPERATOR(pg_catalog.=) $1";
	char	   *name;
	SubDef	   *def;
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1];

	PreventCommandIfReadOnly("esrc.drop_subscription()");
	name = subscription_name_arg(fcinfo, 0);
	SPI_connect();
	def = lookup_subscription(name, CurrentMemoryContext, false);
	check_owner(def);
	check_not_projection(def);
	values[0] = Int64GetDatum(def->id);
	catalog_run(sql, 1, argtypes, values, NULL, SPI_OK_DELETE);
	SPI_finish();
	/* ids are never reused: leases of a dropped subscription are inert */
	esrc_lease_forget(&def->key);
	PG_RETURN_VOID();
}

/*
 * esrc.reset_subscription(name, position): replay from after position, at
 * most the end of the log
 */
Datum
esrc_reset_subscription(PG_FUNCTION_ARGS)
{
	static const char *sql =
		"UPDATE esrc.subscription_checkpoints SET checkpoint = $2, acked_at = NULL "
		"WHERE subscription_id OPERATOR(pg_catalog.=) $1";
	char	   *name;
	SubDef	   *def;
	Oid			argtypes[2] = {INT8OID, INT8OID};
	Datum		values[2];
	int64		position;

	PreventCommandIfReadOnly("esrc.reset_subscription()");
	name = subscription_name_arg(fcinfo, 0);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("position must not be null"),
				 errhint("Use 0 to replay from the beginning.")));
	position = PG_GETARG_INT64(1);
	if (position < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("position must not be negative"),
				 errdetail("The value given was " INT64_FORMAT ".", position)));
	SPI_connect();
	def = lookup_subscription(name, CurrentMemoryContext, false);
	check_owner(def);
	check_not_projection(def);
	check_position_in_log(position, subscription_horizon(def), def->ncats,
						  "Reset to a position at or below the end of the log: the events after it are delivered again.");
	values[0] = Int64GetDatum(def->id);
	values[1] = Int64GetDatum(position);
	catalog_run(sql, 2, argtypes, values, NULL, SPI_OK_UPDATE);
	SPI_finish();
	PG_RETURN_VOID();
}

static void
set_consumer(FunctionCallInfo fcinfo, bool grant)
{
	static const char *grant_sql =
		"UPDATE esrc.subscriptions SET consumers = consumers OPERATOR(pg_catalog.||) $2 "
		"WHERE id OPERATOR(pg_catalog.=) $1 AND NOT ($2 OPERATOR(pg_catalog.=) ANY (consumers))";
	static const char *revoke_sql =
		"UPDATE esrc.subscriptions SET consumers = pg_catalog.array_remove(consumers, $2) "
		"WHERE id OPERATOR(pg_catalog.=) $1";
	char	   *name;
	SubDef	   *def;
	Oid			argtypes[2] = {INT8OID, REGROLEOID};
	Datum		values[2];

	PreventCommandIfReadOnly(grant ? "esrc.grant_subscription()" : "esrc.revoke_subscription()");
	name = subscription_name_arg(fcinfo, 0);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("role must not be null")));
	SPI_connect();
	def = lookup_subscription(name, CurrentMemoryContext, false);
	check_owner(def);
	check_not_projection(def);
	values[0] = Int64GetDatum(def->id);
	values[1] = PG_GETARG_DATUM(1);
	catalog_run(grant ? grant_sql : revoke_sql, 2, argtypes, values, NULL, SPI_OK_UPDATE);
	SPI_finish();
}

/* esrc.grant_subscription(name, role) */
Datum
esrc_grant_subscription(PG_FUNCTION_ARGS)
{
	set_consumer(fcinfo, true);
	PG_RETURN_VOID();
}

/* esrc.revoke_subscription(name, role) */
Datum
esrc_revoke_subscription(PG_FUNCTION_ARGS)
{
	set_consumer(fcinfo, false);
	PG_RETURN_VOID();
}
