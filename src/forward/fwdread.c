/*-------------------------------------------------------------------------
 *
 * fwdread.c
 *	  The forwarder's reads from PostgreSQL: the next batch of events
 *	  (BATCH_SQL and the DestReceiver that copies it), the forwarder's row
 *	  of esrc.forwarder_state and the position mirror kept there, the
 *	  check for skipped poison records, and the owner context and pinned
 *	  settings that all of the worker's SQL runs under.
 *
 * Each read is one short transaction (fwd_read_log): it reads events in
 * position order up to the safe horizon of order.c (so only committed
 * events, and never one that a later commit could still precede), and it
 * never waits for Kafka, so it may run while librdkafka sends the batch
 * before.  It does not return a batch before the WAL of its commits is
 * flushed.  An ERROR ends the worker; the postmaster starts it again.
 *
 * A record whose event is a tombstone of the life cycle (esrc.erased,
 * esrc.deleted; log/log.h) is marked so (EsrcKafkaRecord.tombstone), and
 * kafka.c sends it with a null value.
 *
 * Position mirror: in at_least_once mode esrc.forwarder_state.position is
 * the authority, written after delivery; in exactly_once mode the
 * authority is the Kafka offsets topic (kafkapos.c) and the table mirrors it
 * at most every MIRROR_INTERVAL_MS, and when the worker goes idle.  The
 * update never moves the position back.
 *
 * Privileges: the worker connects as the bootstrap superuser (it cannot
 * know the extension's owner before it is connected, and the extension
 * may be dropped and created again by another role while it runs), but
 * it runs no SQL as that role.  Right after connecting it pins
 * search_path to "pg_catalog, pg_temp" at PGC_S_OVERRIDE
 * (fwd_pin_settings), so ALTER DATABASE/ROLE ... SET cannot change it
 * (nor the read-only, isolation and timeout defaults of its
 * transactions), and every operator, function and type in its SQL is
 * schema-qualified.  Each of its transactions first checks that the
 * schema esrc is the extension's (its pg_extension.extnamespace, or a
 * member: getExtensionOfObject); a schema of that name planted in a
 * database without the extension is never read, and is treated like "not
 * installed".  Then it runs its SQL as the extension's owner in a
 * security-restricted operation (ownerctx.c's owner context, as
 * index_build and REFRESH MATERIALIZED VIEW do): whatever code the
 * tables could run (triggers, defaults, policies) runs with the rights of
 * the role that owns them, never more, and the transaction's abort
 * restores the role after an ERROR.  Reconnecting as the owner would need a new process
 * whenever the owner changes and would apply the owner's ALTER ROLE ...
 * SET settings; the switch does neither.  The batch read (BATCH_SQL) runs
 * under the same rules.
 *
 * Talks to: forwarder.c (the worker calls fwd_read_log each turn, and
 * fwdsend.c to read ahead),
 * order.c (the safe horizon), jsonsize.c (esrc_jsonb_text_size),
 * src/sql/20_forwarder.sql (the tables read and written).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "base/base.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/array.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/uuid.h"

#include "log/log.h"
#include "forwardint.h"
#include "kafka.h"

/* In exactly_once mode the table mirror is written at most this often. */
#define MIRROR_INTERVAL_MS 200

static SPIPlanPtr batch_plan = NULL;
static SPIPlanPtr state_plan = NULL;
static SPIPlanPtr mirror_plan = NULL;
static TimestampTz mirror_at = 0;	/* the mirror was last written */
static Batch *fill = NULL;		/* the batch fwd_read_log() fills */

/* forwardint.h */
char		fwd_log_id[40];
int64		fwd_table_position = 0;
bool		fwd_mirror_dirty = false;
bool		fwd_mirror_now = false;
double		fwd_wal_flush_ms = 0;

/*
 * Skipped events are read without their data and metadata, so that no
 * skipped event is ever converted; data and metadata come as jsonb and
 * are converted here (batch_receive), one event at a time, so that an
 * event that cannot be converted blocks forwarding as a poison record
 * instead of failing the read of the whole batch.  Operators and
 * functions are schema-qualified: the worker runs as a superuser.
 */
#define BATCH_SQL \
	"SELECT e.position, e.stream, e.version, e.type," \
	" CASE WHEN s.position IS NULL THEN e.data END," \
	" CASE WHEN s.position IS NULL THEN e.metadata END," \
	" e.id, e.recorded_at, e.category," \
	" s.position IS NOT NULL, %s" \
	" FROM esrc.events e LEFT JOIN esrc.forwarder_skips s" \
	" ON s.position OPERATOR(pg_catalog.=) e.position" \
	" WHERE e.position OPERATOR(pg_catalog.>) $1" \
	" AND e.position OPERATOR(pg_catalog.<=) $2" \
	" ORDER BY e.position LIMIT $3"

/*
 * The largest data plus metadata, as JSON text, that the worker converts:
 * the largest esrc.max_event_size, which appends check against the text
 * size.  Events stored before that check (0.1.0) may expand to more, up
 * to what jsonb_out() cannot build at all (1 GB); they are poison records.
 */
#define MAX_RECORD_TEXT	(MaxAllocSize / 2)

/* A DestReceiver that copies rows into the batch and stops at BATCH_BYTES. */
typedef struct BatchReceiver
{
	DestReceiver pub;
	MemoryContext row_cxt;
} BatchReceiver;

static char *
copy_text(Datum d, int *len)
{
	text	   *t = DatumGetTextPP(d);
	int			n = VARSIZE_ANY_EXHDR(t);
	char	   *s = MemoryContextAlloc(fill->cxt, n + 1);

	memcpy(s, VARDATA_ANY(t), n);
	s[n] = '\0';
	if (len)
		*len = n;
	fill->bytes += n;
	return s;
}

/*
 * jb as JSON text, built in the batch's memory with room for exactly its
 * text (esrc_jsonb_text_size), so that it is written once.  *room is what
 * is left of MAX_RECORD_TEXT for this event; NULL when jb's text would
 * not fit in it.
 */
static char *
json_text(Datum d, int *len, Size *room)
{
	Jsonb	   *jb = DatumGetJsonbP(d);
	Size		size = esrc_jsonb_text_size(jb, *room);
	StringInfoData buf;

	if (size > *room)
		return NULL;
	*room -= size;
	buf.data = MemoryContextAlloc(fill->cxt, size + 1);
	buf.maxlen = size + 1;
	buf.len = 0;
	buf.data[0] = '\0';
	buf.cursor = 0;
	(void) JsonbToCString(&buf, &jb->root, size);
	if (len)
		*len = buf.len;
	fill->bytes += buf.len;
	return buf.data;
}

/* RFC 3339 in UTC with microseconds: 2024-05-01T12:34:56.789012Z; NULL
 * for a time that has no such form (infinity, out of range) */
static char *
format_time(TimestampTz ts)
{
	struct pg_tm tm;
	fsec_t		fsec;
	char	   *s;

	if (TIMESTAMP_NOT_FINITE(ts) ||
		timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) != 0 ||
		tm.tm_year < 1 || tm.tm_year > 9999)
		return NULL;
	s = MemoryContextAlloc(fill->cxt, 40);
	snprintf(s, 40, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ",
			 tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min,
			 tm.tm_sec, (int) fsec);
	return s;
}

/*
 * The headers ce_traceparent and ce_tracestate of rec, from its metadata
 * (trace.c: a malformed traceparent is not forwarded).  Both are short.
 */
static void
trace_context(EsrcKafkaRecord *rec, Datum metadata)
{
	char	   *tp;
	char	   *ts;

	esrc_trace_of_event(DatumGetJsonbP(metadata), &tp, &ts);
	if (tp != NULL)
	{
		rec->traceparent = MemoryContextStrdup(fill->cxt, tp);
		fill->bytes += strlen(tp);
	}
	if (ts != NULL)
	{
		rec->tracestate = MemoryContextStrdup(fill->cxt, ts);
		fill->bytes += strlen(ts);
	}
}

/*
 * The tags column of BATCH_SQL: e.tags, or null before ALTER EXTENSION
 * esrc UPDATE to 0.3.0 added it (the worker keeps its plan: tags are
 * forwarded from its next start on).
 */
static const char *
tags_column(void)
{
	if (get_attnum(esrc_relation_oid("events"), "tags") == InvalidAttrNumber)
		return "NULL::pg_catalog.text[]";
	return "e.tags";
}

/*
 * The header ce_esrctags of rec (kafka.c): its tags (text[]) as a JSON
 * array of strings.  At most 32 tags of 256 bytes, counted towards the
 * event's size at append (append.c).
 */
static void
tags_header(EsrcKafkaRecord *rec, Datum tags)
{
	Datum	   *elems;
	int			n;
	StringInfoData buf;
	MemoryContext old = MemoryContextSwitchTo(fill->cxt);

	deconstruct_array(DatumGetArrayTypeP(tags), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, NULL, &n);
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '[');
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		escape_json(&buf, TextDatumGetCString(elems[i]));
	}
	appendStringInfoChar(&buf, ']');
	MemoryContextSwitchTo(old);
	rec->tags = buf.data;
	fill->bytes += buf.len;
}

static bool
batch_receive(TupleTableSlot *slot, DestReceiver *self)
{
	BatchReceiver *r = (BatchReceiver *) self;
	EsrcKafkaRecord *rec;
	MemoryContext old;
	const char *unsendable = NULL;

	if (fill->len > 0 && fill->bytes >= BATCH_BYTES)
		return false;

	old = MemoryContextSwitchTo(r->row_cxt);
	slot_getallattrs(slot);
	rec = &fill->recs[fill->len];
	memset(rec, 0, sizeof(*rec));
	rec->position = DatumGetInt64(slot->tts_values[0]);
	rec->stream = copy_text(slot->tts_values[1], &rec->stream_len);
	rec->version = DatumGetInt64(slot->tts_values[2]);
	rec->type = copy_text(slot->tts_values[3], NULL);
	rec->tombstone = esrc_is_tombstone_type(rec->type, strlen(rec->type));
	rec->skip = DatumGetBool(slot->tts_values[9]);
	rec->data = "";
	if (!rec->skip)
	{
		Size		room = MAX_RECORD_TEXT;

		/* null only for skipped events (BATCH_SQL); data is NOT NULL */
		if (!slot->tts_isnull[4])
			rec->data = json_text(slot->tts_values[4], &rec->data_len, &room);
		if (rec->data != NULL && !slot->tts_isnull[5])
		{
			/* detoasted once for its text and its trace context */
			Datum		metadata = PointerGetDatum(DatumGetJsonbP(slot->tts_values[5]));

			rec->metadata = json_text(metadata, NULL, &room);
			if (rec->metadata == NULL)
				rec->data = NULL;
			else
				trace_context(rec, metadata);
		}
		if (rec->data == NULL)
		{
			rec->data = "";
			rec->data_len = 0;
			rec->metadata = NULL;
			rec->traceparent = rec->tracestate = NULL;
			unsendable = psprintf("its data and metadata take more than %zu bytes as JSON text",
								  (Size) MAX_RECORD_TEXT);
		}
		if (!slot->tts_isnull[10])
			tags_header(rec, slot->tts_values[10]);
		rec->time = format_time(DatumGetTimestampTz(slot->tts_values[7]));
		if (rec->time == NULL && unsendable == NULL)
			unsendable = "its recorded_at has no RFC 3339 form";
	}
	if (rec->time == NULL)
		rec->time = "";
	rec->id = MemoryContextStrdup(fill->cxt,
								  DatumGetCString(DirectFunctionCall1(uuid_out,
																	  slot->tts_values[6])));
	fill->categories[fill->len] = copy_text(slot->tts_values[8], NULL);
	fill->unsendable[fill->len] = unsendable ?
		MemoryContextStrdup(fill->cxt, unsendable) : NULL;
	fill->len++;
	MemoryContextSwitchTo(old);
	MemoryContextReset(r->row_cxt);
	return true;
}

static void
batch_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
batch_shutdown(DestReceiver *self)
{
}

static void
batch_destroy(DestReceiver *self)
{
}

static SPIPlanPtr
prepare(const char *sql, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, argtypes);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	return plan;
}

/*
 * Right after connecting: what the names in our SQL mean is ours to say,
 * not the database's or a role's (ALTER DATABASE/ROLE ... SET): see the
 * header comment.
 */
void
fwd_pin_settings(void)
{
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	/* nor may they make our transactions fail or change what they see */
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * Running as the extension's owner (see the header comment): the owner
 * context (ownerctx.c) entered by enter_extension().
 */
static EsrcOwnerContext owner_ctx;
static bool said_foreign_schema = false;

/* The owner and schema of extension ext; InvalidOid when it is gone. */
static Oid
extension_owner(Oid ext, Oid *schema)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	Oid			owner = InvalidOid;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ext));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	*schema = InvalidOid;
	if (HeapTupleIsValid(tup))
	{
		owner = ((Form_pg_extension) GETSTRUCT(tup))->extowner;
		*schema = ((Form_pg_extension) GETSTRUCT(tup))->extnamespace;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return owner;
}

/*
 * In a transaction of the worker, before any SQL: the schema esrc, if it
 * is the extension's, with the current user switched to the extension's
 * owner in a security-restricted operation until leave_extension().
 * InvalidOid, with nothing switched, when the extension is not installed
 * or a schema esrc exists that is not the extension's (logged once: it
 * is never read, whatever it holds).
 */
static Oid
enter_extension(void)
{
	Oid			nsp = get_namespace_oid("esrc", true);
	Oid			ext;
	Oid			owner = InvalidOid;
	Oid			extnsp = InvalidOid;

	if (!OidIsValid(nsp))
		return InvalidOid;
	ext = get_extension_oid("esrc", true);
	if (OidIsValid(ext))
		owner = extension_owner(ext, &extnsp);

	/*
	 * The extension's schema: CREATE EXTENSION made it (control file) or
	 * its script did (then it is a member).
	 */
	if (!OidIsValid(owner) ||
		(nsp != extnsp && getExtensionOfObject(NamespaceRelationId, nsp) != ext))
	{
		if (!said_foreign_schema)
			ereport(LOG,
					(errmsg("esrc forwarder: schema \"esrc\" of database \"%s\" does not belong to extension esrc, not reading it",
							fwd_served_database)));
		said_foreign_schema = true;
		return InvalidOid;
	}
	said_foreign_schema = false;
	/*
	 * search_path is pinned for the whole session (fwd_pin_settings), and
	 * the switch has never been a "local" one
	 */
	esrc_owner_enter(&owner_ctx, owner, ESRC_OWNER_NOT_LOCAL);
	return nsp;
}

/* Back from enter_extension(); an ERROR restores the same by aborting. */
static void
leave_extension(void)
{
	esrc_owner_leave(&owner_ctx);
}

/* The position mirror, if due: the authority in at_least_once mode. */
static void
write_mirror(void)
{
	Datum		args[2];
	Oid			types[2] = {INT8OID, TEXTOID};
	int			rc;

	if (!fwd_mirror_dirty || fwd_log_id[0] == '\0' ||
		(fwd_cfg.exactly_once && !fwd_mirror_now &&
		 !TimestampDifferenceExceeds(mirror_at, GetCurrentTimestamp(), MIRROR_INTERVAL_MS)))
		return;
	if (mirror_plan == NULL)
		mirror_plan = prepare("UPDATE esrc.forwarder_state"
							  " SET position = $1, updated_at = pg_catalog.now()"
							  " WHERE log_id OPERATOR(pg_catalog.=) $2::pg_catalog.uuid"
							  " AND position OPERATOR(pg_catalog.<) $1", 2, types);
	args[0] = Int64GetDatum(fwd_position);
	args[1] = CStringGetTextDatum(fwd_log_id);
	rc = SPI_execute_plan(mirror_plan, args, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "update of esrc.forwarder_state failed: %s", SPI_result_code_string(rc));
	fwd_mirror_dirty = false;
	fwd_mirror_now = false;
	mirror_at = GetCurrentTimestamp();
}

/*
 * Who we are: the forwarder's row of esrc.forwarder_state, into
 * fwd_table_position and fwd_log_id.  true when the log_id is new (the
 * extension was created anew) and we knew an old one.
 */
static bool
read_state_row(void)
{
	char	   *id;
	bool		isnull;
	bool		new_log = false;
	int			rc;

	if (state_plan == NULL)
		state_plan = prepare("SELECT log_id::pg_catalog.text, position FROM esrc.forwarder_state",
							 0, NULL);
	rc = SPI_execute_plan(state_plan, NULL, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "read of esrc.forwarder_state failed: %s", SPI_result_code_string(rc));
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("esrc.forwarder_state must hold exactly one row, it has " UINT64_FORMAT,
						SPI_processed)));
	id = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	fwd_table_position = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
													 SPI_tuptable->tupdesc, 2, &isnull));
	if (strcmp(id, fwd_log_id) != 0)
	{
		if (fwd_log_id[0] != '\0')
			new_log = true;
		strlcpy(fwd_log_id, id, sizeof(fwd_log_id));
	}
	return new_log;
}

/*
 * The events after position "after" up to the safe horizon (of the
 * sequence seqoid) into *b, through batch_receive.  Returns the end of
 * the WAL that the batch's commits are in: the largest commit record end
 * that appenders published before they left the in-flight registry
 * (order.c; before any committed since the server started, the end of
 * the WAL that recovery left), not the end of all WAL inserted, which has
 * the records of transactions still running; flushing those made the
 * read wait for WAL that no event it returns is in.
 */
static XLogRecPtr
read_batch(Batch *b, Oid seqoid, int64 after)
{
	int64		horizon = esrc_safe_position(seqoid);
	/* after the horizon: covers the commit of every event up to it */
	XLogRecPtr	flush_to = esrc_appended_commit_end();
	int64		last = esrc_sequence_last_value(seqoid);
	BatchReceiver recv;
	SPIExecuteOptions options;
	ParamListInfo params;
	Oid			types[3] = {INT8OID, INT8OID, INT8OID};
	int			rc;

	b->held = horizon < last;
	if (batch_plan == NULL)
		batch_plan = prepare(psprintf(BATCH_SQL, tags_column()), 3, types);

	params = makeParamList(3);
	params->params[0].value = Int64GetDatum(after);
	params->params[1].value = Int64GetDatum(horizon);
	params->params[2].value = Int64GetDatum((int64) esrc_kafka_batch_size);
	for (int i = 0; i < 3; i++)
	{
		params->params[i].isnull = false;
		params->params[i].pflags = PARAM_FLAG_CONST;
		params->params[i].ptype = INT8OID;
	}

	b->recs = MemoryContextAlloc(b->cxt, sizeof(EsrcKafkaRecord) * esrc_kafka_batch_size);
	b->categories = MemoryContextAlloc(b->cxt, sizeof(char *) * esrc_kafka_batch_size);
	b->unsendable = MemoryContextAlloc(b->cxt, sizeof(char *) * esrc_kafka_batch_size);
	memset(&recv, 0, sizeof(recv));
	recv.pub.receiveSlot = batch_receive;
	recv.pub.rStartup = batch_startup;
	recv.pub.rShutdown = batch_shutdown;
	recv.pub.rDestroy = batch_destroy;
	recv.pub.mydest = DestTuplestore;	/* anything but DestNone: SPI_OK_SELECT */
	recv.row_cxt = AllocSetContextCreate(CurrentMemoryContext, "esrc batch row",
										 ALLOCSET_DEFAULT_SIZES);

	/* a snapshot taken after the horizon, as read_all does (read.c) */
	memset(&options, 0, sizeof(options));
	options.params = params;
	options.read_only = true;
	options.dest = (DestReceiver *) &recv;
	PushActiveSnapshot(GetLatestSnapshot());
	rc = SPI_execute_plan_extended(batch_plan, &options);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "read of esrc.events failed: %s", SPI_result_code_string(rc));
	PopActiveSnapshot();
	return flush_to;
}

/*
 * Never publish an event that a crash could still take back: with
 * synchronous_commit = off an appender's commit is visible before it is
 * durable.  With synchronous commits this returns at once.
 */
static void
flush_wal(XLogRecPtr flush_to)
{
	instr_time	t0,
				t1;

	INSTR_TIME_SET_CURRENT(t0);
	XLogFlush(flush_to);
	INSTR_TIME_SET_CURRENT(t1);
	INSTR_TIME_SUBTRACT(t1, t0);
	fwd_wal_flush_ms += INSTR_TIME_GET_MILLISEC(t1);
}

/*
 * One short transaction: write the position mirror if due, read the
 * forwarder's row of esrc.forwarder_state (into fwd_table_position; with
 * READ_NEW_LOG the new log_id is in fwd_log_id), and, with want_batch, the
 * events after position "after" up to the safe horizon into *b.  It may
 * run while librdkafka sends another batch, but it never waits for
 * Kafka.  May ereport(ERROR), which ends the worker.
 */
ReadResult
fwd_read_log(Batch *b, bool want_batch, int64 after)
{
	Oid			nsp;
	XLogRecPtr	flush_to = InvalidXLogRecPtr;
	ReadResult	result = READ_OK;
	bool		as_owner = false;
	Oid			seqoid;

	b->len = 0;
	b->bytes = 0;
	b->held = false;
	b->flush_to = InvalidXLogRecPtr;
	MemoryContextReset(b->cxt);
	fill = b;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "esrc forwarder: reading events");

	nsp = enter_extension();
	if (!OidIsValid(nsp))
	{
		result = READ_NO_EXTENSION;
		goto done;
	}
	as_owner = true;
	if (!OidIsValid(get_relname_relid("forwarder_state", nsp)) ||
		!OidIsValid(get_relname_relid("forwarder_skips", nsp)))
	{
		result = READ_NO_EXTENSION;
		goto done;
	}

	seqoid = get_relname_relid("position_seq", nsp);

	write_mirror();
	if (read_state_row())
		result = READ_NEW_LOG;
	else if (want_batch)
		flush_to = read_batch(b, seqoid, after);

done:
	if (as_owner)
		leave_extension();
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(fwd_loop_cxt);

	if (b->len > 0)
	{
		flush_wal(flush_to);
		b->flush_to = flush_to; /* for esrc.forwarder_standbys */
	}
	return result;
}

/*
 * A short transaction of the worker outside the batch reads (fwddiverge.c):
 * begun, with SPI connected and a snapshot, running as the extension's
 * owner; returns the schema esrc, or InvalidOid when the extension is not
 * there (then nothing is switched).  fwd_xact_end(nsp) ends it.
 */
Oid
fwd_xact_begin(const char *activity)
{
	Oid			nsp;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
	nsp = enter_extension();
	return nsp;
}

void
fwd_xact_end(Oid nsp)
{
	if (OidIsValid(nsp))
		leave_extension();
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(fwd_loop_cxt);
}

/* While blocked: has the operator skipped the poison record? */
bool
fwd_poison_skipped(int64 poison_position)
{
	bool		skipped = false;
	Datum		arg = Int64GetDatum(poison_position);
	Oid			type = INT8OID;
	int			rc;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	if (OidIsValid(enter_extension()))
	{
		rc = SPI_execute_with_args("SELECT 1 FROM esrc.forwarder_skips"
								   " WHERE position OPERATOR(pg_catalog.=) $1",
								   1, &type, &arg, NULL, true, 1);
		skipped = (rc == SPI_OK_SELECT && SPI_processed > 0);
		leave_extension();
	}
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(fwd_loop_cxt);
	return skipped;
}
