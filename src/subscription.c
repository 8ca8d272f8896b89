/*-------------------------------------------------------------------------
 *
 * subscription.c
 *	  Subscriptions for SQL consumers: create/drop/reset/grant/revoke, the
 *	  catalog esrc.subscriptions and its checkpoints, esrc.poll() and
 *	  esrc.ack(), esrc.stream_partition() and the rows of
 *	  esrc.subscription_status.
 *
 * A subscription follows some categories (or all) with P partitions;
 * stream s is in partition esrc.stream_partition(s, P), Kafka's murmur2
 * partitioner, so partition p holds the streams the forwarder sends to
 * partition p of a topic of P partitions.  Every partition has a
 * checkpoint in esrc.subscription_checkpoints: the last position it has
 * processed.  Members of a consumer group hold partitions by lease
 * (sublease.c).
 *
 * esrc.poll() takes or renews the member's leases, reads their
 * checkpoints, and returns the events of its partitions after them, up
 * to the read horizon of the subscription's categories (order.c), in
 * position order, at most max_count; filters on types and metadata are
 * applied here.  With nothing to return it registers as waiting
 * (subwait.c) and sleeps on its latch until a commit that concerns it, or
 * a change of the group, or the end of the wait.  It writes the table
 * only when it returns nothing: then the checkpoints move past what it
 * scanned (events of its partitions that the filters dropped), so that an
 * idle or filtered partition does not fall behind.
 *
 * esrc.ack() moves the checkpoints of the member's partitions, in the
 * caller's transaction, to a position its last poll covered.  It refuses
 * (40001) when a checkpoint is no longer what the member's poll read:
 * another member (after the lease passed) or a reset has moved it, and
 * the caller's results for those events must not commit.  That check,
 * not the lease, is what makes effects written in the same transaction
 * exactly once.
 *
 * The catalog is written and read here through SPI as the owner of
 * esrc.subscriptions, security-restricted, with every operator
 * qualified; the functions pin search_path.  The events are read as the
 * caller, with the caller's privilege on esrc.events, by index scans
 * (read.c).
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

#include "esrc.h"

#define ESRC_MAX_PARTITIONS		1024
#define ESRC_MAX_SUB_CATEGORIES	64
#define ESRC_MAX_SUB_TYPES		64

/* rows a poll may examine beyond those it returns, before it stops */
#define POLL_SCAN_BUDGET		10000

/* GUC variables */
static int	subscription_lease_ms = 30000;
static int	poll_max_wait_ms = 60000;

PG_FUNCTION_INFO_V1(esrc_create_subscription);
PG_FUNCTION_INFO_V1(esrc_drop_subscription);
PG_FUNCTION_INFO_V1(esrc_reset_subscription);
PG_FUNCTION_INFO_V1(esrc_grant_subscription);
PG_FUNCTION_INFO_V1(esrc_revoke_subscription);
PG_FUNCTION_INFO_V1(esrc_poll);
PG_FUNCTION_INFO_V1(esrc_ack);
PG_FUNCTION_INFO_V1(esrc_stream_partition);
PG_FUNCTION_INFO_V1(esrc_subscription_status);

/* A row of esrc.subscriptions, in the caller's memory */
typedef struct SubDef
{
	int64		id;
	EsrcSubKey	key;			/* for sublease.c and subwait.c */
	char	   *name;
	Oid			owner;
	int			npartitions;
	int			ncats;			/* 0 = all categories */
	char	  **cats;
	uint64	   *cathashes;
	int			ntypes;			/* 0 = all types */
	char	  **types;
	Jsonb	   *metadata;		/* NULL = no filter */
	int			nconsumers;
	Oid		   *consumers;
	int64	   *checkpoints;	/* per partition, as read with the row (-1 = none) */
} SubDef;

void
esrc_subscription_init(void)
{
	DefineCustomIntVariable("esrc.subscription_lease",
							"How long a subscription member keeps its partitions without polling or acknowledging.",
							"A member that neither polls nor acks for this long loses its partitions; another member takes them from their last checkpoint.",
							&subscription_lease_ms,
							30000, 100, INT_MAX / 2,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("esrc.poll_max_wait",
							"Longest wait of one esrc.poll() call; longer waits are shortened to it.",
							"A waiting poll holds its snapshot, and so the xmin horizon, for as long as it waits.",
							&poll_max_wait_ms,
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

/*
 * MurmurHash2 as Kafka's Java client computes it for record keys
 * (org.apache.kafka.common.utils.Utils.murmur2: seed 0x9747b28c, 4-byte
 * little-endian blocks), which librdkafka's "murmur2" partitioners use
 * too.
 */
static uint32
murmur2(const unsigned char *data, int len)
{
	const uint32 m = 0x5bd1e995;
	const int	r = 24;
	uint32		h = 0x9747b28c ^ (uint32) len;
	int			i = 0;

	for (; i + 4 <= len; i += 4)
	{
		uint32		k = (uint32) data[i] | ((uint32) data[i + 1] << 8) |
			((uint32) data[i + 2] << 16) | ((uint32) data[i + 3] << 24);

		k *= m;
		k ^= k >> r;
		k *= m;
		h *= m;
		h ^= k;
	}
	switch (len - i)
	{
		case 3:
			h ^= (uint32) data[i + 2] << 16;
			/* FALLTHROUGH */
		case 2:
			h ^= (uint32) data[i + 1] << 8;
			/* FALLTHROUGH */
		case 1:
			h ^= (uint32) data[i];
			h *= m;
	}
	h ^= h >> 13;
	h *= m;
	h ^= h >> 15;
	return h;
}

static int
stream_partition(const char *stream, int len, int npartitions)
{
	return (int) ((murmur2((const unsigned char *) stream, len) & 0x7fffffff) %
				  (uint32) npartitions);
}

static void
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

static Oid
catalog_owner(void)
{
	Oid			relid = esrc_relation_oid("subscriptions");
	HeapTuple	tp = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tp))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tp))->relowner;
	ReleaseSysCache(tp);
	return owner;
}

/*
 * Run one statement on the catalog as its owner, inside the caller's SPI
 * connection; the result is in SPI_tuptable.  Plans are kept per
 * statement text (the callers pass string constants), so that a poll
 * plans its queries once per session.
 */
#define MAX_PLANS 16
static struct
{
	const char *sql;
	SPIPlanPtr	plan;
}			plans[MAX_PLANS];

static void
catalog_run(const char *sql, int nargs, Oid *argtypes, Datum *values,
			const char *nulls, int expected_rc)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			save_userid;
	int			save_sec_context;
	SPIPlanPtr volatile plan = NULL;
	volatile int i;
	int			rc;

	for (i = 0; i < MAX_PLANS && plans[i].sql != NULL; i++)
		if (plans[i].sql == sql)
		{
			plan = plans[i].plan;
			break;
		}
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(catalog_owner(),
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	PG_TRY();
	{
		if (plan == NULL)
		{
			plan = SPI_prepare(sql, nargs, argtypes);
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
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	PG_END_TRY();
	/* SPI leaves us in its procedure context */
	MemoryContextSwitchTo(cxt);
}

static char **
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

/*
 * The subscription called name, copied into the current memory context
 * (the caller's, not SPI's: call with SPI connected); an error if there is
 * none.
 */
static SubDef *
lookup_subscription(const char *name, MemoryContext cxt, bool with_checkpoints)
{
	static const char *plain_sql =
		"SELECT id, owner, categories, types, metadata, partitions, consumers, NULL, NULL "
		"FROM esrc.subscriptions WHERE name OPERATOR(pg_catalog.=) $1";
	static const char *cp_sql =
		"SELECT s.id, s.owner, s.categories, s.types, s.metadata, s.partitions, s.consumers, "
		"x.parts, x.cps FROM esrc.subscriptions s, LATERAL ("
		"SELECT pg_catalog.array_agg(c.partition) AS parts, pg_catalog.array_agg(c.checkpoint) AS cps "
		"FROM esrc.subscription_checkpoints c WHERE c.subscription_id OPERATOR(pg_catalog.=) s.id) x "
		"WHERE s.name OPERATOR(pg_catalog.=) $1";
	const char *sql = with_checkpoints ? cp_sql : plain_sql;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	HeapTuple	tup;
	TupleDesc	desc;
	SubDef	   *def;
	MemoryContext old;
	Datum		d;
	bool		isnull;
	int			i;

	values[0] = CStringGetTextDatum(name);
	catalog_run(sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("subscription \"%s\" does not exist", name)));
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;

	old = MemoryContextSwitchTo(cxt);
	def = palloc0(sizeof(SubDef));
	def->name = pstrdup(name);
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

static Oid
role_oid(const char *name)
{
	return get_role_oid(name, false);
}

/* The caller may manage (drop, reset, grant) the subscription. */
static void
check_owner(SubDef *def)
{
	if (!has_privs_of_role(GetUserId(), def->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of subscription \"%s\"", def->name),
				 errdetail("Only members of the subscription's owner role can drop, reset or grant it.")));
}

/* The caller may poll and ack the subscription. */
static void
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

static char *
subscription_name_arg(FunctionCallInfo fcinfo, int argno)
{
	return esrc_check_name(PG_ARGISNULL(argno) ? NULL : PG_GETARG_TEXT_PP(argno),
						   "subscription name", ESRC_MAX_MEMBER_NAME);
}

static char *
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
static ArrayType *
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
static int64
subscription_horizon(SubDef *def)
{
	Oid			seqoid = esrc_relation_oid("position_seq");

	if (def->ncats == 0)
		return esrc_safe_position(seqoid);
	return esrc_safe_position_for(seqoid, def->cathashes, def->ncats);
}

/*
 * esrc.create_subscription(name, categories, partitions, start, types,
 * metadata)
 */
Datum
esrc_create_subscription(PG_FUNCTION_ARGS)
{
	static const char *exists_sql =
		"SELECT 1 FROM esrc.subscriptions WHERE name OPERATOR(pg_catalog.=) $1";
	static const char *insert_sql =
		"INSERT INTO esrc.subscriptions (name, owner, categories, types, metadata, partitions) "
		"VALUES ($1, $2, $3, $4, $5, $6) RETURNING id";
	static const char *checkpoints_sql =
		"INSERT INTO esrc.subscription_checkpoints (subscription_id, partition, checkpoint) "
		"SELECT $1, p, $3 FROM pg_catalog.generate_series(0, $2 OPERATOR(pg_catalog.-) 1) AS p";
	char	   *name = subscription_name_arg(fcinfo, 0);
	ArrayType  *cats = check_name_array(fcinfo, 1, "categories", ESRC_MAX_STREAM_NAME,
										ESRC_MAX_SUB_CATEGORIES, true);
	int32		partitions;
	char	   *start;
	ArrayType  *types = check_name_array(fcinfo, 4, "types", ESRC_MAX_TYPE_NAME,
										 ESRC_MAX_SUB_TYPES, false);
	Jsonb	   *metadata = PG_ARGISNULL(5) ? NULL : PG_GETARG_JSONB_P(5);
	int64		checkpoint;
	Oid			argtypes[6] = {TEXTOID, OIDOID, TEXTARRAYOID, TEXTARRAYOID, JSONBOID, INT4OID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	Oid			cpargtypes[3] = {INT8OID, INT4OID, INT8OID};
	Datum		cpvalues[3];
	int64		id;
	bool		isnull;

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
	values[0] = CStringGetTextDatum(name);
	catalog_run(exists_sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("subscription \"%s\" already exists", name)));

	if (strcmp(start, "beginning") == 0)
		checkpoint = 0;
	else if (strcmp(start, "end") == 0)
	{
		SubDef		tmp;
		char	  **cn = NULL;
		int			i;

		memset(&tmp, 0, sizeof(tmp));
		if (cats != NULL)
		{
			cn = text_array_to_cstrings(cats, &tmp.ncats);
			tmp.cathashes = palloc(sizeof(uint64) * tmp.ncats);
			for (i = 0; i < tmp.ncats; i++)
				tmp.cathashes[i] = esrc_category_hash(cn[i], strlen(cn[i]));
		}
		checkpoint = subscription_horizon(&tmp);
	}
	else
	{
		char	   *end;

		errno = 0;
		checkpoint = strtoi64(start, &end, 10);
		if (errno != 0 || end == start || *end != '\0' || checkpoint < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid start \"%s\"", start),
					 errhint("Use 'beginning', 'end' or a position (a non-negative integer): the subscription then returns the events after it.")));
	}

	values[1] = ObjectIdGetDatum(GetUserId());
	values[2] = PointerGetDatum(cats);
	nulls[2] = cats == NULL ? 'n' : ' ';
	values[3] = PointerGetDatum(types);
	nulls[3] = types == NULL ? 'n' : ' ';
	values[4] = PointerGetDatum(metadata);
	nulls[4] = metadata == NULL ? 'n' : ' ';
	values[5] = Int32GetDatum(partitions);
	catalog_run(insert_sql, 6, argtypes, values, nulls, SPI_OK_INSERT_RETURNING);
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));

	cpvalues[0] = Int64GetDatum(id);
	cpvalues[1] = Int32GetDatum(partitions);
	cpvalues[2] = Int64GetDatum(checkpoint);
	catalog_run(checkpoints_sql, 3, cpargtypes, cpvalues, NULL, SPI_OK_INSERT);
	SPI_finish();
	PG_RETURN_VOID();
}

/* esrc.drop_subscription(name) */
Datum
esrc_drop_subscription(PG_FUNCTION_ARGS)
{
	static const char *sql =
		"DELETE FROM esrc.subscriptions WHERE id OPERATOR(pg_catalog.=) $1";
	char	   *name = subscription_name_arg(fcinfo, 0);
	SubDef	   *def;
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1];

	SPI_connect();
	def = lookup_subscription(name, CurrentMemoryContext, false);
	check_owner(def);
	values[0] = Int64GetDatum(def->id);
	catalog_run(sql, 1, argtypes, values, NULL, SPI_OK_DELETE);
	SPI_finish();
	/* ids are never reused: leases of a dropped subscription are inert */
	esrc_lease_forget(&def->key);
	PG_RETURN_VOID();
}

/* esrc.reset_subscription(name, position): replay from after position */
Datum
esrc_reset_subscription(PG_FUNCTION_ARGS)
{
	static const char *sql =
		"UPDATE esrc.subscription_checkpoints SET checkpoint = $2, acked_at = NULL "
		"WHERE subscription_id OPERATOR(pg_catalog.=) $1";
	char	   *name = subscription_name_arg(fcinfo, 0);
	SubDef	   *def;
	Oid			argtypes[2] = {INT8OID, INT8OID};
	Datum		values[2];
	int64		position;

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
	char	   *name = subscription_name_arg(fcinfo, 0);
	SubDef	   *def;
	Oid			argtypes[2] = {INT8OID, REGROLEOID};
	Datum		values[2];

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("role must not be null")));
	SPI_connect();
	def = lookup_subscription(name, CurrentMemoryContext, false);
	check_owner(def);
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

/*
 * The subscription the last poll of this transaction looked up, for an ack
 * in the same transaction by the same role, which then needs no query to
 * find it (the consumer pattern: poll, results, ack, commit).  Lives in a
 * child of TopTransactionContext, so it goes with the transaction.
 */
static struct
{
	LocalTransactionId lxid;
	Oid			userid;
	MemoryContext cxt;
	SubDef	   *def;
}			last_poll;

static MemoryContext
last_poll_context(void)
{
	if (last_poll.lxid != esrc_my_lxid() || last_poll.cxt == NULL)
	{
		last_poll.cxt = AllocSetContextCreate(TopTransactionContext, "esrc last poll",
											  ALLOCSET_SMALL_SIZES);
		last_poll.lxid = esrc_my_lxid();
	}
	else
		MemoryContextReset(last_poll.cxt);
	last_poll.def = NULL;
	return last_poll.cxt;
}

static SubDef *
last_poll_def(const char *name)
{
	if (last_poll.lxid == esrc_my_lxid() && last_poll.cxt != NULL &&
		last_poll.def != NULL && last_poll.userid == GetUserId() &&
		strcmp(last_poll.def->name, name) == 0)
		return last_poll.def;
	return NULL;
}

/* ----------------------------------------------------------------
 * Checkpoints
 * ----------------------------------------------------------------
 */

static ArrayType *
int4_array(const int32 *v, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		d[i] = Int32GetDatum(v[i]);
	return construct_array(d, n, INT4OID, sizeof(int32), true, TYPALIGN_INT);
}

static ArrayType *
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
static void
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
	catalog_run(sql, 2, argtypes, values, NULL, SPI_OK_SELECT);
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
static int
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

/* ----------------------------------------------------------------
 * esrc.poll
 * ----------------------------------------------------------------
 */

static int64
interval_ms(Interval *iv)
{
	int64		ms;

	ms = iv->time / 1000 + (int64) iv->day * 86400000 +
		(int64) iv->month * INT64CONST(30) * 86400000;
	return ms;
}

/* Does an event of the scan pass the subscription's type and metadata filters? */
static bool
passes_filters(SubDef *def, TupleTableSlot *slot)
{
	if (def->ntypes > 0)
	{
		text	   *type = DatumGetTextPP(slot->tts_values[Anum_events_type - 1]);
		int			len = VARSIZE_ANY_EXHDR(type);
		bool		match = false;
		int			i;

		for (i = 0; i < def->ntypes && !match; i++)
			match = strlen(def->types[i]) == (size_t) len &&
				memcmp(def->types[i], VARDATA_ANY(type), len) == 0;
		if (!match)
			return false;
	}
	if (def->metadata != NULL)
	{
		if (slot->tts_isnull[Anum_events_metadata - 1])
			return false;
		if (!DatumGetBool(DirectFunctionCall2(jsonb_contains,
											  slot->tts_values[Anum_events_metadata - 1],
											  JsonbPGetDatum(def->metadata))))
			return false;
	}
	return true;
}

/*
 * One pass of a poll: the events of the held partitions (held_map[p])
 * after from[p], up to horizon, into the tuplestore, at most max_count.
 * Returns how many; *covered is the last position the pass covered (every
 * event of the held partitions in (from[p], *covered] was returned or
 * filtered out).
 */
static int
scan_events(SubDef *def, const bool *held_map, const int64 *from, int64 lo,
			int64 horizon, int max_count, ReturnSetInfo *rsinfo, int64 *covered)
{
	int			nscans = def->ncats == 0 ? 1 : def->ncats;
	EsrcLogScan **scans;
	TupleTableSlot **cur;
	Snapshot	snap;
	int			examined = 0;
	int			budget = Max(POLL_SCAN_BUDGET, 4 * max_count);
	int			n = 0;
	int			i;

	*covered = Max(lo, horizon);
	if (lo >= horizon)
		return 0;

	/* a snapshot taken after the horizon was (read.c) */
	snap = RegisterSnapshot(GetLatestSnapshot());
	scans = palloc(sizeof(EsrcLogScan *) * nscans);
	cur = palloc(sizeof(TupleTableSlot *) * nscans);
	for (i = 0; i < nscans; i++)
	{
		if (def->ncats == 0)
			scans[i] = esrc_log_begin(ESRC_LOG_BY_POSITION, (Datum) 0, lo + 1, horizon,
									  ForwardScanDirection, snap);
		else
			scans[i] = esrc_log_begin(ESRC_LOG_BY_CATEGORY,
									  CStringGetTextDatum(def->cats[i]), lo + 1, horizon,
									  ForwardScanDirection, snap);
		cur[i] = esrc_log_next(scans[i]);
	}

	for (;;)
	{
		TupleTableSlot *slot = NULL;
		int			which = -1;
		int64		pos;
		text	   *stream;
		int			p;

		/* the lowest position among the scans (merge of categories) */
		for (i = 0; i < nscans; i++)
			if (cur[i] != NULL &&
				(slot == NULL ||
				 DatumGetInt64(cur[i]->tts_values[Anum_events_position - 1]) <
				 DatumGetInt64(slot->tts_values[Anum_events_position - 1])))
			{
				slot = cur[i];
				which = i;
			}
		if (slot == NULL)
			break;				/* all done: covered up to the horizon */

		pos = DatumGetInt64(slot->tts_values[Anum_events_position - 1]);
		stream = DatumGetTextPP(slot->tts_values[Anum_events_stream - 1]);
		p = stream_partition(VARDATA_ANY(stream), VARSIZE_ANY_EXHDR(stream), def->npartitions);
		if (held_map[p] && pos > from[p] && passes_filters(def, slot))
		{
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
								 slot->tts_values, slot->tts_isnull);
			if (++n >= max_count)
			{
				*covered = pos;
				break;
			}
		}
		if (++examined >= budget)
		{
			*covered = pos;
			break;
		}
		cur[which] = esrc_log_next(scans[which]);
	}

	for (i = 0; i < nscans; i++)
		esrc_log_end(scans[i]);
	UnregisterSnapshot(snap);
	return n;
}

static void
check_event_rowtype(ReturnSetInfo *rsinfo)
{
	if (rsinfo->setDesc->natts != ESRC_EVENT_NATTS)
		elog(ERROR, "esrc.event has an unexpected row type");
}

/* The state of one esrc.poll() call */
typedef struct PollState
{
	SubDef	   *def;
	const char *member;
	int32		max_count;
	int64		wait_ms;
	TimestampTz deadline;
	ReturnSetInfo *rsinfo;
	MemoryContext loopcxt;
	int32	   *held;			/* partitions held, ascending */
	int			nheld;
	bool	   *held_map;		/* per partition */
	bool	   *taken;			/* per partition: taken by this pass */
	int64	   *cps;			/* checkpoints of held[], as read */
	int64	   *from;			/* per partition: scanned past, this call */
	int64	   *table_cp;		/* per partition: checkpoint last read */
	int			n;				/* events returned */
	int64		covered;		/* the last pass covered up to here */
	bool		waiting;		/* registered in subwait.c */
	bool		first_pass;		/* def->checkpoints are fresh */
} PollState;

/*
 * The passes of a poll: take the leases, read the checkpoints, scan; with
 * nothing found, register as waiting, and sleep until woken, then again.
 */
static void
poll_loop(PollState *st)
{
	SubDef	   *def = st->def;

	for (;;)
	{
		bool		others_over;
		bool		released;
		int64		lo = PG_INT64_MAX;
		int			i;
		int			p;

		if (st->waiting)
			ResetLatch(MyLatch);
		MemoryContextReset(st->loopcxt);
		MemoryContextSwitchTo(st->loopcxt);

		st->nheld = esrc_lease_poll(&def->key, def->npartitions, st->member,
									subscription_lease_ms, st->held, st->taken,
									&others_over, &released);
		if (released || others_over)
			esrc_wake_subscription(&def->key);
		if (st->nheld > 0)
		{
			int64		horizon;

			/*
			 * The checkpoints of partitions we kept: as read with the
			 * subscription (first pass) or by an earlier pass; nobody else
			 * moves them while we hold them (after our lease, another
			 * member can, and then our ack fails with 40001).  Of a
			 * partition we just took: from the table, now, since its last
			 * holder may have acknowledged it after we read the
			 * subscription.  So a pass woken by a commit runs no query.
			 */
			{
				bool		need_read = false;

				for (i = 0; i < st->nheld; i++)
				{
					p = st->held[i];
					if (st->taken[p])
						st->cps[i] = -1;
					else
						st->cps[i] = st->first_pass ? def->checkpoints[p] :
							st->held_map[p] ? st->table_cp[p] : -1;
					if (st->cps[i] < 0)
						need_read = true;
				}
				if (need_read)
					read_checkpoints(def, st->nheld, st->held, st->cps);
				st->first_pass = false;
			}
			memset(st->held_map, 0, sizeof(bool) * def->npartitions);
			for (i = 0; i < st->nheld; i++)
			{
				p = st->held[i];
				st->held_map[p] = true;
				/* a reset moved it back: scan again from there */
				if (st->cps[i] < st->table_cp[p])
					st->from[p] = -1;
				st->table_cp[p] = st->cps[i];
				st->from[p] = Max(st->from[p], st->cps[i]);
				lo = Min(lo, st->from[p]);
			}
			horizon = subscription_horizon(def);
			st->n = scan_events(def, st->held_map, st->from, lo, horizon, st->max_count,
								st->rsinfo, &st->covered);
			esrc_lease_record(&def->key, st->member, st->nheld, st->held,
							  st->cps, st->covered);
			if (st->n > 0)
				return;
			for (i = 0; i < st->nheld; i++)
				st->from[st->held[i]] = Max(st->from[st->held[i]], st->covered);
		}
		if (st->wait_ms == 0 || GetCurrentTimestamp() >= st->deadline)
			return;
		if (!st->waiting)
		{
			/* register, then check once more before the first sleep */
			esrc_wait_register(&def->key, def->cathashes, def->ncats,
							   def->ncats == 0);
			st->waiting = true;
			ResetLatch(MyLatch);
			continue;
		}
		{
			long		left = (long) ((st->deadline - GetCurrentTimestamp()) / 1000);

			/* wake up to renew the leases well before they pass */
			(void) esrc_wait_sleep(Max(1, Min(left, subscription_lease_ms / 3)));
		}
	}
}

/*
 * A poll that returns nothing moves the checkpoints past what it scanned,
 * so that filtered-out events and idle partitions do not stay behind;
 * only from the values it read, as an ack would.
 */
static void
advance_idle(PollState *st)
{
	SubDef	   *def = st->def;
	int64	   *expected = palloc(sizeof(int64) * Max(st->nheld, 1));
	bool		any = false;
	bool		moved_by_other;
	int32		other;
	int			i;

	for (i = 0; i < st->nheld; i++)
	{
		expected[i] = st->table_cp[st->held[i]];
		if (st->covered > expected[i])
			any = true;
	}
	if (!any)
		return;
	(void) write_checkpoints(def, st->nheld, st->held, expected, st->covered,
							 &moved_by_other, &other);
	if (moved_by_other)
		return;
	for (i = 0; i < st->nheld; i++)
		expected[i] = Max(expected[i], st->covered);
	esrc_lease_record(&def->key, st->member, st->nheld, st->held, expected, -1);
}

/*
 * esrc.poll(subscription, member, max_count DEFAULT 100, wait DEFAULT '0')
 */
Datum
esrc_poll(PG_FUNCTION_ARGS)
{
	char	   *subname = subscription_name_arg(fcinfo, 0);
	MemoryContext callcxt = CurrentMemoryContext;
	PollState  *st = palloc0(sizeof(PollState));
	int			np;

	st->member = member_name_arg(fcinfo, 1);
	st->rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	if (PG_ARGISNULL(2) || PG_GETARG_INT32(2) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_count must be positive"),
				 PG_ARGISNULL(2) ? 0 : errdetail("The value given was %d.", PG_GETARG_INT32(2))));
	st->max_count = PG_GETARG_INT32(2);
	if (!PG_ARGISNULL(3))
	{
		st->wait_ms = interval_ms(PG_GETARG_INTERVAL_P(3));
		if (st->wait_ms < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("wait must not be negative")));
		st->wait_ms = Min(st->wait_ms, (int64) poll_max_wait_ms);
	}
	st->deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), st->wait_ms);

	InitMaterializedSRF(fcinfo, 0);
	check_event_rowtype(st->rsinfo);

	SPI_connect();
	st->def = lookup_subscription(subname, last_poll_context(), true);
	check_consumer(st->def);
	last_poll.def = st->def;
	last_poll.userid = GetUserId();

	np = st->def->npartitions;
	st->held = MemoryContextAlloc(callcxt, sizeof(int32) * np);
	st->held_map = MemoryContextAllocZero(callcxt, sizeof(bool) * np);
	st->taken = MemoryContextAllocZero(callcxt, sizeof(bool) * np);
	st->cps = MemoryContextAlloc(callcxt, sizeof(int64) * np);
	st->from = MemoryContextAlloc(callcxt, sizeof(int64) * np);
	st->table_cp = MemoryContextAlloc(callcxt, sizeof(int64) * np);
	memset(st->from, 0xff, sizeof(int64) * np);	/* all -1 */
	memset(st->table_cp, 0xff, sizeof(int64) * np);
	st->covered = -1;
	st->first_pass = true;
	st->loopcxt = AllocSetContextCreate(callcxt, "esrc poll", ALLOCSET_DEFAULT_SIZES);

	PG_TRY();
	{
		poll_loop(st);
	}
	PG_FINALLY();
	{
		esrc_wait_unregister();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(callcxt);

	/* (a read-only transaction leaves them to the next ack) */
	if (st->n == 0 && st->nheld > 0 && !XactReadOnly)
		advance_idle(st);
	SPI_finish();
	MemoryContextDelete(st->loopcxt);
	return (Datum) 0;
}

/* ----------------------------------------------------------------
 * esrc.ack
 * ----------------------------------------------------------------
 */

/*
 * esrc.ack(subscription, member, position DEFAULT NULL): returns how many
 * of the member's partitions moved.
 */
Datum
esrc_ack(PG_FUNCTION_ARGS)
{
	char	   *subname = subscription_name_arg(fcinfo, 0);
	char	   *member = member_name_arg(fcinfo, 1);
	SubDef	   *def;
	int32	   *held;
	int64	   *polled;
	int64		covered;
	int64		position;
	int			nheld;
	int			moved;
	bool		moved_by_other;
	int32		other = 0;
	int			i;

	if (!PG_ARGISNULL(2) && PG_GETARG_INT64(2) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("position must not be negative"),
				 errdetail("The value given was " INT64_FORMAT ".", PG_GETARG_INT64(2))));

	SPI_connect();
	/* polled in this transaction: looked up and checked then */
	def = last_poll_def(subname);
	if (def == NULL)
	{
		def = lookup_subscription(subname, CurrentMemoryContext, false);
		check_consumer(def);
	}
	held = palloc(sizeof(int32) * def->npartitions);
	polled = palloc(sizeof(int64) * def->npartitions);
	nheld = esrc_lease_ack(&def->key, def->npartitions, member,
						   subscription_lease_ms, held, polled, &covered);
	if (nheld <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("member \"%s\" holds no partition of subscription \"%s\"",
						member, def->name),
				 errdetail(nheld < 0 ? "It has not polled within esrc.subscription_lease, or never." :
						   "Its share of the partitions is empty: the group has more members than partitions."),
				 errhint("Poll, then acknowledge what the poll returned.")));
	for (i = 0; i < nheld; i++)
		if (polled[i] < 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("member \"%s\" has not polled partition %d of subscription \"%s\"",
							member, held[i], def->name),
					 errhint("Poll, then acknowledge what the poll returned.")));
	position = PG_ARGISNULL(2) ? covered : PG_GETARG_INT64(2);
	if (position > covered)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("position " INT64_FORMAT " is beyond what the last poll of member \"%s\" covered",
						position, member),
				 errdetail("That poll covered positions up to " INT64_FORMAT ".", covered),
				 errhint("Acknowledge a position the member received, or null for everything its last poll covered.")));

	moved = write_checkpoints(def, nheld, held, polled, position, &moved_by_other, &other);
	if (moved_by_other)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("the checkpoint of partition %d of subscription \"%s\" moved since member \"%s\" polled",
						other, def->name, member),
				 errdetail("Another member took the partition after the lease passed, or the subscription was reset; the events may have been processed elsewhere."),
				 errhint("Roll back and poll again.")));
	for (i = 0; i < nheld; i++)
		polled[i] = Max(polled[i], position);
	esrc_lease_record(&def->key, member, nheld, held, polled, -1);
	SPI_finish();
	PG_RETURN_INT32(moved);
}

/* ----------------------------------------------------------------
 * esrc.subscription_status
 * ----------------------------------------------------------------
 */

/*
 * esrc.subscription_status_internal(): per subscription and partition,
 * the holder, its lease, the checkpoint, and how far behind the
 * partition is: events after the checkpoint up to the horizon that the
 * filters pass, and the age of the oldest.  Scans the events not yet
 * acknowledged.
 */
Datum
esrc_subscription_status(PG_FUNCTION_ARGS)
{
	static const char *subs_sql =
		"SELECT name FROM esrc.subscriptions ORDER BY name";
	static const char *cps_sql =
		"SELECT partition, checkpoint FROM esrc.subscription_checkpoints "
		"WHERE subscription_id OPERATOR(pg_catalog.=) $1 ORDER BY partition";
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext callcxt = CurrentMemoryContext;
	char	  **names;
	int			nsubs;
	int			s;
	TimestampTz now = GetCurrentTimestamp();

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	catalog_run(subs_sql, 0, NULL, NULL, NULL, SPI_OK_SELECT);
	nsubs = (int) SPI_processed;
	names = MemoryContextAlloc(callcxt, sizeof(char *) * Max(nsubs, 1));
	for (s = 0; s < nsubs; s++)
		names[s] = MemoryContextStrdup(callcxt, SPI_getvalue(SPI_tuptable->vals[s], SPI_tuptable->tupdesc, 1));
	SPI_freetuptable(SPI_tuptable);

	for (s = 0; s < nsubs; s++)
	{
		SubDef	   *def = lookup_subscription(names[s], callcxt, false);
		int			np = def->npartitions;
		int64	   *cp = palloc(sizeof(int64) * np);
		int64	   *behind = palloc0(sizeof(int64) * np);
		TimestampTz *oldest = palloc0(sizeof(TimestampTz) * np);
		char	  **holders = palloc(sizeof(char *) * np);
		TimestampTz *expires = palloc(sizeof(TimestampTz) * np);
		Oid			argtypes[1] = {INT8OID};
		Datum		values[1];
		int64		lo = PG_INT64_MAX;
		int64		horizon;
		int			p;
		uint64		r;

		values[0] = Int64GetDatum(def->id);
		catalog_run(cps_sql, 1, argtypes, values, NULL, SPI_OK_SELECT);
		for (p = 0; p < np; p++)
			cp[p] = -1;
		for (r = 0; r < SPI_processed; r++)
		{
			bool		isnull;
			int32		part = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));

			if (part >= 0 && part < np)
				cp[part] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull));
		}
		SPI_freetuptable(SPI_tuptable);
		for (p = 0; p < np; p++)
			if (cp[p] >= 0)
				lo = Min(lo, cp[p]);
		esrc_lease_holders(&def->key, np, holders, expires);

		horizon = subscription_horizon(def);
		if (lo < horizon)
		{
			Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
			int			nscans = def->ncats == 0 ? 1 : def->ncats;
			int			i;

			for (i = 0; i < nscans; i++)
			{
				EsrcLogScan *scan;
				TupleTableSlot *slot;

				if (def->ncats == 0)
					scan = esrc_log_begin(ESRC_LOG_BY_POSITION, (Datum) 0, lo + 1, horizon,
										  ForwardScanDirection, snap);
				else
					scan = esrc_log_begin(ESRC_LOG_BY_CATEGORY,
										  CStringGetTextDatum(def->cats[i]), lo + 1, horizon,
										  ForwardScanDirection, snap);
				while ((slot = esrc_log_next(scan)) != NULL)
				{
					int64		pos = DatumGetInt64(slot->tts_values[Anum_events_position - 1]);
					text	   *stream = DatumGetTextPP(slot->tts_values[Anum_events_stream - 1]);
					TimestampTz at = DatumGetTimestampTz(slot->tts_values[Anum_events_recorded_at - 1]);

					p = stream_partition(VARDATA_ANY(stream), VARSIZE_ANY_EXHDR(stream), np);
					if (cp[p] < 0 || pos <= cp[p] || !passes_filters(def, slot))
						continue;
					behind[p]++;
					if (oldest[p] == 0 || at < oldest[p])
						oldest[p] = at;
				}
				esrc_log_end(scan);
			}
			UnregisterSnapshot(snap);
		}

		for (p = 0; p < np; p++)
		{
			Datum		row[7];
			bool		nulls[7] = {false, false, false, false, false, false, false};

			row[0] = CStringGetTextDatum(def->name);
			row[1] = Int32GetDatum(p);
			if (holders[p] != NULL)
			{
				row[2] = CStringGetTextDatum(holders[p]);
				row[3] = TimestampTzGetDatum(expires[p]);
			}
			else
				nulls[2] = nulls[3] = true;
			row[4] = Int64GetDatum(cp[p]);
			nulls[4] = cp[p] < 0;
			row[5] = Int64GetDatum(behind[p]);
			row[6] = Float8GetDatum(oldest[p] == 0 ? 0.0 :
									(double) (now - oldest[p]) / 1000000.0);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, row, nulls);
		}
	}
	SPI_finish();
	return (Datum) 0;
}
