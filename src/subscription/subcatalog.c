/*-------------------------------------------------------------------------
 *
 * subcatalog.c
 *	  The catalog of subscriptions: esrc.subscriptions and
 *	  esrc.subscription_checkpoints, read and written through SPI as their
 *	  owner: the lookups and privilege checks that poll, ack, the
 *	  administrative functions (subadmin.c) and the projection workers
 *	  share, a new subscription's row and start, its checkpoints read and
 *	  written;
 *	  Kafka's partitioner (esrc.stream_partition) and the subscriptions'
 *	  settings.
 *
 * Every statement on the catalog runs as the catalog's owner in a
 * security-restricted context, with every operator qualified; plans are
 * kept per statement text (catalog_run).  subscription.c (poll, ack,
 * status) and projection*.c use what subscription.h declares.
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


/* GUC variables */
int			esrc_subscription_lease_ms = 30000;
int			esrc_poll_max_wait_ms = 60000;

PG_FUNCTION_INFO_V1(esrc_stream_partition);

void
esrc_subscription_init(void)
{
	/* a commit or abort that appended wakes the long polls it concerns */
	esrc_listen_appended(esrc_wake_subscribers);

	DefineCustomIntVariable("esrc.subscription_lease",
							"How long a subscription member keeps its partitions without polling or acknowledging.",
							"A member that neither polls nor acks for this long loses its partitions; another member takes them from their last checkpoint.",
							&esrc_subscription_lease_ms,
							30000, 100, INT_MAX / 2,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("esrc.poll_max_wait",
							"Longest wait of one esrc.poll() call; longer waits are shortened to it.",
							"A waiting poll holds its snapshot, and so the xmin horizon, for as long as it waits.",
							&esrc_poll_max_wait_ms,
							60000, 0, INT_MAX / 2,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("esrc.max_partition_leases",
							"Subscription partitions that can be held at once in the cluster, and members that can poll at once.",
							"Sizes two tables in shared memory.",
							&esrc_max_partition_leases,
							1024, 16, 1024 * 1024,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
}

/* ----------------------------------------------------------------
 * Kafka's partitioner
 * ----------------------------------------------------------------
 */

/* the partition of a stream: log/partition.c */
int
stream_partition(const char *stream, int len, int npartitions)
{
	return esrc_stream_partition_of(stream, len, npartitions);
}

void
check_partitions(int32 partitions)
{
	if (partitions < 1 || partitions > ESRC_MAX_PARTITIONS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("partitions must be between 1 and %d", ESRC_MAX_PARTITIONS),
				 errdetail("The value given was %d.", partitions)));
}

/*
 * esrc.stream_partition(stream, partitions): the partition of a stream in
 * a subscription (or a Kafka topic) with that many partitions.
 */
Datum
esrc_stream_partition(PG_FUNCTION_ARGS)
{
	text	   *stream = PG_GETARG_TEXT_PP(0);
	int32		partitions = PG_GETARG_INT32(1);

	check_partitions(partitions);
	PG_RETURN_INT32(stream_partition(VARDATA_ANY(stream), VARSIZE_ANY_EXHDR(stream),
									 partitions));
}

/* ----------------------------------------------------------------
 * The catalog, through SPI as its owner
 * ----------------------------------------------------------------
 */

Oid
catalog_owner(void)
{
	return esrc_relation_owner(esrc_relation_oid("subscriptions"));
}

/*
 * Run one statement on the catalog as its owner, inside the caller's SPI
 * connection; the result is in SPI_tuptable.  Plans are kept per
 * statement text (the callers pass string constants), so that a poll
 * plans its queries once per session.
 */
#define MAX_PLANS 64
static struct
{
	const char *sql;
	SPIPlanPtr	plan;
}			plans[MAX_PLANS];

static void
catalog_run_opts(const char *sql, int nargs, Oid *argtypes, Datum *values,
				 const char *nulls, int expected_rc, int cursor_options);

void
catalog_run(const char *sql, int nargs, Oid *argtypes, Datum *values,
			const char *nulls, int expected_rc)
{
	catalog_run_opts(sql, nargs, argtypes, values, nulls, expected_rc, 0);
}

/*
 * catalog_run with the plan's cursor options: CURSOR_OPT_GENERIC_PLAN for
 * a statement the plan cache would otherwise plan again on every call
 * (read_checkpoints).
 */
static void
catalog_run_opts(const char *sql, int nargs, Oid *argtypes, Datum *values,
				 const char *nulls, int expected_rc, int cursor_options)
{
	MemoryContext cxt = CurrentMemoryContext;
	EsrcOwnerContext ctx;
	SPIPlanPtr volatile plan = NULL;
	volatile int i;
	int			rc;

	for (i = 0; i < MAX_PLANS && plans[i].sql != NULL; i++)
		if (plans[i].sql == sql)
		{
			plan = plans[i].plan;
			break;
		}
	/* every name in the statements is qualified: search_path left as is */
	esrc_owner_enter(&ctx, catalog_owner(), 0);
	PG_TRY();
	{
		if (plan == NULL)
		{
			plan = SPI_prepare_cursor(sql, nargs, argtypes, cursor_options);
			if (plan == NULL)
				elog(ERROR, "could not prepare \"%s\": %s", sql,
					 SPI_result_code_string(SPI_result));
			if (i < MAX_PLANS && SPI_keepplan(plan) == 0)
			{
				plans[i].sql = sql;
				plans[i].plan = plan;
			}
		}
		rc = SPI_execute_plan(plan, values, nulls, false, 0);
		if (rc != expected_rc)
			elog(ERROR, "\"%s\" failed: %s", sql, SPI_result_code_string(rc));
	}
	PG_FINALLY();
	{
		esrc_owner_restore_user(&ctx);
	}
	PG_END_TRY();
	esrc_owner_leave(&ctx);
	/* SPI leaves us in its procedure context */
	MemoryContextSwitchTo(cxt);
}

char **
text_array_to_cstrings(ArrayType *arr, int *n)
{
	Datum	   *elems;
	bool	   *nulls;
	char	  **result;
	int			i;

	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, n);
	result = palloc(sizeof(char *) * Max(*n, 1));
	for (i = 0; i < *n; i++)
		result[i] = nulls[i] ? NULL : TextDatumGetCString(elems[i]);
	return result;
}

/* The strings of a jsonb array of strings (the catalog's tag filter). */
static char **
jsonb_strings(Jsonb *jb, int *n)
{
	char	  **result;
	int			i;

	*n = JB_ROOT_IS_ARRAY(jb) && !JB_ROOT_IS_SCALAR(jb) ? JB_ROOT_COUNT(jb) : 0;
	result = palloc(sizeof(char *) * Max(*n, 1));
	for (i = 0; i < *n; i++)
	{
		JsonbValue *v = getIthJsonbValueFromContainer(&jb->root, i);

		if (v == NULL || v->type != jbvString)
			elog(ERROR, "esrc.subscriptions.tags holds a non-string");
		result[i] = pnstrdup(v->val.string.val, v->val.string.len);
	}
	return result;
}

/*
 * The subscription called name, copied into the current memory context
 * (the caller's, not SPI's: call with SPI connected); an error if there is
 * none.
 */
/*
 * The tag filter (0.3.0) as a jsonb array or null, also from a catalog
 * that ALTER EXTENSION esrc UPDATE has not given the column yet.
 */
#define TAGS_COLUMN(row) "pg_catalog.to_jsonb(" row ") OPERATOR(pg_catalog.->) 'tags'"

static SubDef *lookup_common(const char *sql, Oid keytype, Datum key,
							 const char *name, MemoryContext cxt);

SubDef *
lookup_subscription(const char *name, MemoryContext cxt, bool with_checkpoints)
{
	static const char *plain_sql =
		"SELECT id, owner, categories, types, metadata, partitions, consumers, NULL, NULL, "
		"projection, name, " TAGS_COLUMN("subscriptions") " FROM esrc.subscriptions WHERE name OPERATOR(pg_catalog.=) $1";
	static const char *cp_sql =
		"SELECT s.id, s.owner, s.categories, s.types, s.metadata, s.partitions, s.consumers, "
		"x.parts, x.cps, s.projection, s.name, " TAGS_COLUMN("s") " FROM esrc.subscriptions s, LATERAL ("
		"SELECT pg_catalog.array_agg(c.partition) AS parts, pg_catalog.array_agg(c.checkpoint) AS cps "
		"FROM esrc.subscription_checkpoints c WHERE c.subscription_id OPERATOR(pg_catalog.=) s.id) x "
		"WHERE s.name OPERATOR(pg_catalog.=) $1";

	return lookup_common(with_checkpoints ? cp_sql : plain_sql, TEXTOID,
						 CStringGetTextDatum(name), name, cxt);
}

/* The subscription of that id, without checkpoints; NULL if there is none. */
SubDef *
esrc_sub_lookup_id(int64 id, MemoryContext cxt)
{
	static const char *sql =
		"SELECT id, owner, categories, types, metadata, partitions, consumers, NULL, NULL, "
		"projection, name, " TAGS_COLUMN("subscriptions") " FROM esrc.subscriptions WHERE id OPERATOR(pg_catalog.=) $1";

	return lookup_common(sql, INT8OID, Int64GetDatum(id), NULL, cxt);
}

/*
 * Run a lookup query (columns as above) for one key; an error if there is
 * no row and name is given, NULL if there is none and name is NULL.
 */
static SubDef *
lookup_common(const char *sql, Oid keytype, Datum key, const char *name,
			  MemoryContext cxt)
{
	Oid			argtypes[1];
	Datum		values[1];
	HeapTuple	tup;
	TupleDesc	desc;
	SubDef	   *def;
	MemoryContext old;
	Datum		d;
	bool		isnull;
	int			i;

	argtypes[0] = keytype;
	values[0] = key;
	catalog_run(sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
	{
		if (name == NULL)
			return NULL;
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("subscription \"%s\" does not exist", name)));
	}
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;

	old = MemoryContextSwitchTo(cxt);
	def = palloc0(sizeof(SubDef));
	def->name = TextDatumGetCString(SPI_getbinval(tup, desc, 11, &isnull));
	def->projection = DatumGetBool(SPI_getbinval(tup, desc, 10, &isnull));
	def->id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	def->key.dbid = MyDatabaseId;
	def->key.catalog = esrc_relation_oid("subscriptions");
	def->key.id = def->id;
	def->owner = DatumGetObjectId(SPI_getbinval(tup, desc, 2, &isnull));
	d = SPI_getbinval(tup, desc, 3, &isnull);
	if (!isnull)
	{
		def->cats = text_array_to_cstrings(DatumGetArrayTypeP(d), &def->ncats);
		def->cathashes = palloc(sizeof(uint64) * Max(def->ncats, 1));
		for (i = 0; i < def->ncats; i++)
			def->cathashes[i] = esrc_category_hash(def->cats[i], strlen(def->cats[i]));
	}
	d = SPI_getbinval(tup, desc, 4, &isnull);
	if (!isnull)
		def->types = text_array_to_cstrings(DatumGetArrayTypeP(d), &def->ntypes);
	d = SPI_getbinval(tup, desc, 5, &isnull);
	if (!isnull)
		def->metadata = DatumGetJsonbPCopy(d);
	d = SPI_getbinval(tup, desc, 12, &isnull);
	if (!isnull)
		def->tags = jsonb_strings(DatumGetJsonbP(d), &def->ntags);
	def->npartitions = DatumGetInt32(SPI_getbinval(tup, desc, 6, &isnull));
	d = SPI_getbinval(tup, desc, 7, &isnull);
	if (!isnull)
	{
		Datum	   *elems;
		bool	   *nulls;

		deconstruct_array(DatumGetArrayTypeP(d), REGROLEOID, sizeof(Oid), true,
						  TYPALIGN_INT, &elems, &nulls, &def->nconsumers);
		def->consumers = palloc(sizeof(Oid) * Max(def->nconsumers, 1));
		for (i = 0; i < def->nconsumers; i++)
			def->consumers[i] = nulls[i] ? InvalidOid : DatumGetObjectId(elems[i]);
	}
	/* the checkpoints, read with the row: a poll's first pass needs no query */
	def->checkpoints = palloc(sizeof(int64) * def->npartitions);
	for (i = 0; i < def->npartitions; i++)
		def->checkpoints[i] = -1;
	d = SPI_getbinval(tup, desc, 8, &isnull);
	if (!isnull)
	{
		Datum		cpd = SPI_getbinval(tup, desc, 9, &isnull);
		Datum	   *parts;
		Datum	   *cps;
		bool	   *nulls;
		int			nparts;
		int			ncps;

		deconstruct_array(DatumGetArrayTypeP(d), INT4OID, sizeof(int32), true,
						  TYPALIGN_INT, &parts, &nulls, &nparts);
		deconstruct_array(DatumGetArrayTypeP(cpd), INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
						  TYPALIGN_DOUBLE, &cps, &nulls, &ncps);
		for (i = 0; i < nparts && i < ncps; i++)
		{
			int32		p = DatumGetInt32(parts[i]);

			if (p >= 0 && p < def->npartitions)
				def->checkpoints[p] = DatumGetInt64(cps[i]);
		}
	}
	MemoryContextSwitchTo(old);
	SPI_freetuptable(SPI_tuptable);
	return def;
}

Oid
role_oid(const char *name)
{
	return get_role_oid(name, false);
}

/* The caller may manage (drop, reset, grant) the subscription. */
void
check_owner(SubDef *def)
{
	if (!has_privs_of_role(GetUserId(), def->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of subscription \"%s\"", def->name),
				 errdetail("Only members of the subscription's owner role can drop, reset or grant it.")));
}

/* The caller may poll and ack the subscription. */
void
check_consumer(SubDef *def)
{
	Oid			user = GetUserId();
	int			i;

	if (!has_privs_of_role(user, role_oid("esrc_reader")))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for subscription \"%s\"", def->name),
				 errdetail("Polling and acknowledging need the privileges of esrc_reader.")));
	if (has_privs_of_role(user, def->owner))
		return;
	for (i = 0; i < def->nconsumers; i++)
		if (OidIsValid(def->consumers[i]) && has_privs_of_role(user, def->consumers[i]))
			return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for subscription \"%s\"", def->name),
			 errhint("The subscription's owner can allow a role with esrc.grant_subscription().")));
}

/* Users do not poll, ack, reset or drop the subscription of a projection. */
void
check_not_projection(SubDef *def)
{
	if (def->projection)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("subscription \"%s\" is run by projection \"%s\"",
						def->name, def->name + strlen(ESRC_PROJECTION_SUB_PREFIX)),
				 errdetail("The projection's workers poll and acknowledge it."),
				 errhint("Use esrc.reset_projection(), esrc.projection_pause() or esrc.drop_projection().")));
}

char *
subscription_name_arg(FunctionCallInfo fcinfo, int argno)
{
	return esrc_check_name(PG_ARGISNULL(argno) ? NULL : PG_GETARG_TEXT_PP(argno),
						   "subscription name", ESRC_MAX_MEMBER_NAME);
}

char *
member_name_arg(FunctionCallInfo fcinfo, int argno)
{
	return esrc_check_name(PG_ARGISNULL(argno) ? NULL : PG_GETARG_TEXT_PP(argno),
						   "member name", ESRC_MAX_MEMBER_NAME);
}

/* ----------------------------------------------------------------
 * create, drop, reset, grant, revoke
 * ----------------------------------------------------------------
 */

/* Check a text[] argument of names; NULL stays NULL, an empty array is an error. */
ArrayType *
check_name_array(FunctionCallInfo fcinfo, int argno, const char *what, int maxlen,
				 int maxcount, bool is_category)
{
	ArrayType  *arr;
	char	  **names;
	int			n;
	int			i;
	int			j;

	if (PG_ARGISNULL(argno))
		return NULL;
	arr = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", what)));
	names = text_array_to_cstrings(arr, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what),
				 errhint("Use null for all.")));
	if (n > maxcount)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s has more than %d elements", what, maxcount)));
	for (i = 0; i < n; i++)
	{
		if (names[i] == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain nulls", what)));
		(void) esrc_check_name(cstring_to_text(names[i]), what, maxlen);
		if (is_category && strchr(names[i], '-') != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("category must not contain \"-\""),
					 errdetail("The category of a stream is the part of its name before the first \"-\"; \"%s\" is not one.",
							   names[i])));
		for (j = 0; j < i; j++)
			if (strcmp(names[i], names[j]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("%s contains \"%s\" twice", what, names[i])));
	}
	return arr;
}

/* The horizon for a reader of def's categories. */
int64
subscription_horizon(SubDef *def)
{
	Oid			seqoid = esrc_relation_oid("position_seq");

	if (def->ncats == 0)
		return esrc_safe_position(seqoid);
	return esrc_safe_position_for(seqoid, def->cathashes, def->ncats);
}

/*
 * Refuse a checkpoint above the horizon (the end of the log as the
 * subscription reads it): events appended later would take positions
 * below it, and the subscription would never deliver them.  22023, as
 * ack's refusal of a position beyond what was delivered.
 */
void
check_position_in_log(int64 position, int64 horizon, int ncats, const char *hint)
{
	if (position <= horizon)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("position " INT64_FORMAT " is beyond the end of the log", position),
			 ncats > 0 ?
			 errdetail("The log of the subscription's categories ends at position " INT64_FORMAT " (its commit-safe horizon); the events appended later, below the position, would never be delivered.", horizon) :
			 errdetail("The log ends at position " INT64_FORMAT " (its commit-safe horizon); the events appended later, below the position, would never be delivered.", horizon),
			 errhint("%s", hint)));
}

/*
 * The checkpoint a new subscription of those categories starts from:
 * 'beginning', 'end' (the horizon now) or a position, which must not be
 * above the horizon (check_position_in_log).
 */
int64
subscription_start_position(const char *start, ArrayType *cats)
{
	int64		checkpoint;
	SubDef		tmp;
	char	  **cn;
	int			i;
	char	   *end;

	if (strcmp(start, "beginning") == 0)
		return 0;

	/* the horizon of those categories, as subscription_horizon() of it */
	memset(&tmp, 0, sizeof(tmp));
	if (cats != NULL)
	{
		cn = text_array_to_cstrings(cats, &tmp.ncats);
		tmp.cathashes = palloc(sizeof(uint64) * tmp.ncats);
		for (i = 0; i < tmp.ncats; i++)
			tmp.cathashes[i] = esrc_category_hash(cn[i], strlen(cn[i]));
	}
	if (strcmp(start, "end") == 0)
		return subscription_horizon(&tmp);

	errno = 0;
	checkpoint = strtoi64(start, &end, 10);
	if (errno != 0 || end == start || *end != '\0' || checkpoint < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid start \"%s\"", start),
				 errhint("Use 'beginning', 'end' or a position (a non-negative integer): the subscription then returns the events after it.")));
	check_position_in_log(checkpoint, subscription_horizon(&tmp), tmp.ncats,
						  "Start at a position at or below the end of the log, or at 'end'.");
	return checkpoint;
}

/*
 * Insert a subscription and its checkpoints (SPI connected); an error if
 * the name is taken.  Returns its id.
 */
int64
subscription_insert(const char *name, Oid owner, ArrayType *cats, int32 partitions,
					int64 checkpoint, bool projection)
{
	static const char *exists_sql =
		"SELECT 1 FROM esrc.subscriptions WHERE name OPERATOR(pg_catalog.=) $1";
	static const char *insert_sql =
		"INSERT INTO esrc.subscriptions (name, owner, categories, partitions, projection) "
		"VALUES ($1, $2, $3, $4, $5) RETURNING id";
	static const char *checkpoints_sql =
		"INSERT INTO esrc.subscription_checkpoints (subscription_id, partition, checkpoint) "
		"SELECT $1, p, $3 FROM pg_catalog.generate_series(0, $2 OPERATOR(pg_catalog.-) 1) AS p";
	Oid			argtypes[5] = {TEXTOID, OIDOID, TEXTARRAYOID, INT4OID, BOOLOID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	Oid			cpargtypes[3] = {INT8OID, INT4OID, INT8OID};
	Datum		cpvalues[3];
	int64		id;
	bool		isnull;

	values[0] = CStringGetTextDatum(name);
	catalog_run(exists_sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("subscription \"%s\" already exists", name)));
	values[1] = ObjectIdGetDatum(owner);
	values[2] = PointerGetDatum(cats);
	nulls[2] = cats == NULL ? 'n' : ' ';
	values[3] = Int32GetDatum(partitions);
	values[4] = BoolGetDatum(projection);
	catalog_run(insert_sql, 5, argtypes, values, nulls, SPI_OK_INSERT_RETURNING);
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));

	cpvalues[0] = Int64GetDatum(id);
	cpvalues[1] = Int32GetDatum(partitions);
	cpvalues[2] = Int64GetDatum(checkpoint);
	catalog_run(checkpoints_sql, 3, cpargtypes, cpvalues, NULL, SPI_OK_INSERT);
	return id;
}

/* ----------------------------------------------------------------
 * Checkpoints
 * ----------------------------------------------------------------
 */

ArrayType *
int4_array(const int32 *v, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		d[i] = Int32GetDatum(v[i]);
	return construct_array(d, n, INT4OID, sizeof(int32), true, TYPALIGN_INT);
}

ArrayType *
int8_array(const int64 *v, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		d[i] = Int64GetDatum(v[i]);
	return construct_array(d, n, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
}

/*
 * The checkpoints of partitions held[0 .. nheld - 1] into cps[] (same
 * order), read with a new snapshot (SPI, not read-only).
 */
void
read_checkpoints(SubDef *def, int nheld, const int32 *held, int64 *cps)
{
	static const char *sql =
		"SELECT partition, checkpoint FROM esrc.subscription_checkpoints "
		"WHERE subscription_id OPERATOR(pg_catalog.=) $1 "
		"AND partition OPERATOR(pg_catalog.=) ANY ($2)";
	Oid			argtypes[2] = {INT8OID, INT4ARRAYOID};
	Datum		values[2];
	uint64		r;
	int			i;

	values[0] = Int64GetDatum(def->id);
	values[1] = PointerGetDatum(int4_array(held, nheld));

	/*
	 * A generic plan: with "= ANY ($2)" the plan cache finds a custom plan
	 * cheaper than the generic one, so it planned this statement again on
	 * every batch, 5% of a projection worker's CPU (docs/projections.md).
	 */
	catalog_run_opts(sql, 2, argtypes, values, NULL, SPI_OK_SELECT,
					 CURSOR_OPT_GENERIC_PLAN);
	for (i = 0; i < nheld; i++)
		cps[i] = -1;
	for (r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		int32		p = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));
		int64		cp = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull));

		for (i = 0; i < nheld; i++)
			if (held[i] == p)
				cps[i] = cp;
	}
	SPI_freetuptable(SPI_tuptable);
	for (i = 0; i < nheld; i++)
		if (cps[i] < 0)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("subscription \"%s\" has no checkpoint for partition %d",
							def->name, held[i])));
}

/*
 * Move the checkpoint of each partition held[i] from expected[i] to
 * position, where it is lower; in the caller's transaction.  Returns how
 * many moved; *moved_by_other is set when a checkpoint was found neither
 * at expected[i] nor moved by us (someone else moved it).
 */
int
write_checkpoints(SubDef *def, int nheld, const int32 *held, const int64 *expected,
				  int64 position, bool *moved_by_other, int32 *other_partition)
{
	static const char *update_sql =
		"UPDATE esrc.subscription_checkpoints AS c "
		"SET checkpoint = $3, acked_at = pg_catalog.now() "
		"FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($4)) AS x(p, expected) "
		"WHERE c.subscription_id OPERATOR(pg_catalog.=) $1 "
		"AND c.partition OPERATOR(pg_catalog.=) x.p "
		"AND c.checkpoint OPERATOR(pg_catalog.=) x.expected "
		"AND c.checkpoint OPERATOR(pg_catalog.<) $3 "
		"RETURNING c.partition";
	Oid			argtypes[4] = {INT8OID, INT4ARRAYOID, INT8OID, INT8ARRAYOID};
	Datum		values[4];
	int64	   *now_cps = palloc(sizeof(int64) * Max(nheld, 1));
	bool	   *updated = palloc0(sizeof(bool) * Max(nheld, 1));
	int			moved;
	uint64		r;
	int			i;

	values[0] = Int64GetDatum(def->id);
	values[1] = PointerGetDatum(int4_array(held, nheld));
	values[2] = Int64GetDatum(position);
	values[3] = PointerGetDatum(int8_array(expected, nheld));
	catalog_run(update_sql, 4, argtypes, values, NULL, SPI_OK_UPDATE_RETURNING);
	moved = (int) SPI_processed;
	if (moved > 0)
		esrc_sub_progress_at_commit(def->id);	/* wake its waits (subprogress.c) */
	for (r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		int32		p = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));

		for (i = 0; i < nheld; i++)
			if (held[i] == p)
				updated[i] = true;
	}
	SPI_freetuptable(SPI_tuptable);

	/*
	 * A partition that had to move is ours only if this update moved it:
	 * finding it at position is not enough, since another member that
	 * polled the same events may have acknowledged the same position.  One
	 * that had not to move must still be where the poll read it.
	 */
	*moved_by_other = false;
	/* every partition had to move and did: nothing more to check */
	for (i = 0; i < nheld; i++)
		if (expected[i] >= position || !updated[i])
			break;
	if (i == nheld)
	{
		pfree(now_cps);
		pfree(updated);
		return moved;
	}
	read_checkpoints(def, nheld, held, now_cps);
	for (i = 0; i < nheld; i++)
	{
		bool		ours = expected[i] < position ? updated[i]
			: now_cps[i] == expected[i];

		if (!ours)
		{
			*moved_by_other = true;
			*other_partition = held[i];
			break;
		}
	}
	pfree(now_cps);
	pfree(updated);
	return moved;
}

