/*-------------------------------------------------------------------------
 *
 * logscan.c
 *	  The index scans of the event log that every reader uses: the read
 *	  functions (read.c), the stream rules (rules.c), reads by query
 *	  (query.c) and the snapshot code (snapbuild.c, snapread.c,
 *	  snaprebuild.c): esrc_log_begin/next/end on the index that matches
 *	  the read, the caller's right to read checked first (logaccess.c);
 *	  the snapshot of a read with the caller's snapshot rules; and the
 *	  checks of the row types the readers and appends rely on (esrc.events
 *	  by column number, esrc.event), with the copy of an event's columns
 *	  out of a row of the log.  read.c's header says why every read is an
 *	  index scan chosen here rather than SQL.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relscan.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_am.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "base/base.h"
#include "log/log.h"
#include "logint.h"

/*
 * One index scan of the log (see esrc_log_begin).  The slot holds the
 * current row; its first ESRC_EVENT_NATTS columns are an esrc.event.
 */
struct EsrcLogScan
{
	Relation	rel;
	Relation	idx;
	IndexScanDesc scan;
	ScanDirection dir;
	TupleTableSlot *slot;
	Snapshot	snap;
	bool		empty;			/* the bounds admit no row: no scan */
	EsrcLogOrder order;
	int			nkeys;
	ScanKeyData keys[3];		/* as begun; esrc_log_rescan_stream
								 * changes their arguments only */
};

/*
 * The caller must be allowed to read every column of esrc.events, as a
 * SELECT of the whole row would require: table privilege, or column
 * privilege on all columns (logaccess.c, the check every path that
 * delivers events makes).
 */
static void
check_read_privilege(Relation rel)
{
	EsrcLogAccess access = esrc_log_access(GetUserId());

	if (access == ESRC_LOG_NO_SELECT)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, RelationGetRelationName(rel));
	if (access == ESRC_LOG_RLS)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("esrc.events must not have row-level security"),
				 errdetail("The esrc read functions read the log by index scans, which would bypass its policies."),
				 errhint("Disable row-level security on esrc.events; grant esrc_reader only to roles that may read every event.")));
}

/*
 * The valid btree index of rel on exactly the key columns (att1[, att2]),
 * opened with AccessShareLock; an error if it is missing.
 */
static Relation
open_log_index(Relation rel, AttrNumber att1, AttrNumber att2, const char *what)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	int			natts = att2 == InvalidAttrNumber ? 1 : 2;

	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = idx->rd_index;

		if (form->indisvalid && form->indisready && form->indislive &&
			idx->rd_rel->relam == BTREE_AM_OID &&
			form->indnkeyatts == natts &&
			form->indkey.values[0] == att1 &&
			(natts == 1 || form->indkey.values[1] == att2) &&
			(idx->rd_indoption[0] & INDOPTION_DESC) == 0 &&
			(natts == 1 || (idx->rd_indoption[1] & INDOPTION_DESC) == 0) &&
			RelationGetIndexPredicate(idx) == NIL &&
			RelationGetIndexExpressions(idx) == NIL)
		{
			list_free(indexes);
			return idx;
		}
		index_close(idx, AccessShareLock);
	}
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("esrc.events has no index on %s", what),
			 errhint("Reinstall the extension; the event log's indexes must not be dropped.")));
	return NULL;				/* not reached */
}

/* A scan key on key column "col" of idx: column <op strategy> value. */
static void
init_key(ScanKey key, Relation idx, int col, StrategyNumber strategy, Datum value)
{
	Oid			op = get_opfamily_member(idx->rd_opfamily[col - 1],
										 idx->rd_opcintype[col - 1],
										 idx->rd_opcintype[col - 1], strategy);

	if (!OidIsValid(op))
		elog(ERROR, "no operator of strategy %d for index \"%s\"",
			 strategy, RelationGetRelationName(idx));
	ScanKeyEntryInitialize(key, 0, col, strategy, InvalidOid,
						   idx->rd_indcollation[col - 1], get_opcode(op), value);
}

static EsrcLogScan *log_begin(EsrcLogOrder order, Datum key, int64 lo,
							  int64 hi, ScanDirection dir, Snapshot snap,
							  bool check);

/*
 * Start an index scan of esrc.events under snap (which the caller keeps
 * registered until esrc_log_end):
 *
 *	 ESRC_LOG_BY_POSITION  lo <= position <= hi                (key unused)
 *	 ESRC_LOG_BY_STREAM    stream = key AND lo <= version <= hi
 *	 ESRC_LOG_BY_CATEGORY  category = key AND lo <= position <= hi
 *
 * in index order (position or version), backward if asked.  Checks the
 * caller's privileges on esrc.events first.  Allocates in the current
 * memory context; may ereport.
 */
EsrcLogScan *
esrc_log_begin(EsrcLogOrder order, Datum key, int64 lo, int64 hi,
			   ScanDirection dir, Snapshot snap)
{
	return log_begin(order, key, lo, hi, dir, snap, true);
}

/*
 * esrc_log_begin without the check of the caller's privileges: for the
 * life-cycle functions (rules.c), whose callers (esrc_admin) may not read
 * the log but must know a stream's last version.
 */
EsrcLogScan *
esrc_log_begin_unchecked(EsrcLogOrder order, Datum key, int64 lo, int64 hi,
						 ScanDirection dir, Snapshot snap)
{
	return log_begin(order, key, lo, hi, dir, snap, false);
}

static EsrcLogScan *
log_begin(EsrcLogOrder order, Datum key, int64 lo, int64 hi,
		  ScanDirection dir, Snapshot snap, bool check)
{
	EsrcLogScan *s = palloc0(sizeof(EsrcLogScan));
	ScanKeyData keys[3];
	int			nkeys = 0;
	int			boundcol = order == ESRC_LOG_BY_POSITION ? 1 : 2;

	s->rel = esrc_open_relation("events", AccessShareLock);
	if (check)
		check_read_privilege(s->rel);
	esrc_check_log_rowtype(s->rel);

	switch (order)
	{
		case ESRC_LOG_BY_POSITION:
			s->idx = open_log_index(s->rel, Anum_events_position, InvalidAttrNumber,
									"(position)");
			break;
		case ESRC_LOG_BY_STREAM:
			s->idx = open_log_index(s->rel, Anum_events_stream, Anum_events_version,
									"(stream, version)");
			break;
		case ESRC_LOG_BY_CATEGORY:
			s->idx = open_log_index(s->rel, Anum_events_category, Anum_events_position,
									"(category, position)");
			break;
	}
	if (order != ESRC_LOG_BY_POSITION)
		init_key(&keys[nkeys++], s->idx, 1, BTEqualStrategyNumber, key);
	init_key(&keys[nkeys++], s->idx, boundcol, BTGreaterEqualStrategyNumber, Int64GetDatum(lo));
	init_key(&keys[nkeys++], s->idx, boundcol, BTLessEqualStrategyNumber, Int64GetDatum(hi));

	memcpy(s->keys, keys, sizeof(ScanKeyData) * nkeys);
	s->nkeys = nkeys;
	s->order = order;
	s->dir = dir;
	s->snap = snap;
	s->slot = table_slot_create(s->rel, NULL);
	s->empty = lo > hi;
	if (!s->empty)
	{
		s->scan = esrc_index_beginscan(s->rel, s->idx, snap, nkeys, 0);
		index_rescan(s->scan, keys, nkeys, NULL, 0);
	}
	return s;
}

/*
 * Restart a scan begun with ESRC_LOG_BY_STREAM on another stream and
 * bounds, keeping the relation, index and snapshot: what rules.c does for
 * each stream whose first visible version a read must find.
 */
void
esrc_log_rescan_stream(EsrcLogScan *s, Datum key, int64 lo, int64 hi)
{
	if (s->order != ESRC_LOG_BY_STREAM)
		elog(ERROR, "esrc_log_rescan_stream() of a scan not by stream");
	s->keys[0].sk_argument = key;
	s->keys[1].sk_argument = Int64GetDatum(lo);
	s->keys[2].sk_argument = Int64GetDatum(hi);
	s->empty = lo > hi;
	if (s->empty)
		return;
	if (s->scan == NULL)
		s->scan = esrc_index_beginscan(s->rel, s->idx, s->snap, 3, 0);
	index_rescan(s->scan, s->keys, 3, NULL, 0);
}

/*
 * The next row of the scan, all columns deformed into the slot's
 * tts_values/tts_isnull (valid until the next call), or NULL at the end.
 */
TupleTableSlot *
esrc_log_next(EsrcLogScan *s)
{
	CHECK_FOR_INTERRUPTS();
	if (s->empty || !index_getnext_slot(s->scan, s->dir, s->slot))
		return NULL;
	slot_getallattrs(s->slot);
	return s->slot;
}

void
esrc_log_end(EsrcLogScan *s)
{
	if (s->scan)
		index_endscan(s->scan);
	ExecDropSingleTupleTableSlot(s->slot);
	index_close(s->idx, NoLock);
	table_close(s->rel, NoLock);
	pfree(s);
}

/*
 * A snapshot for a read with the caller's snapshot rules, as SPI gives a
 * new statement: a new one at READ COMMITTED, the transaction's at the
 * higher levels, seeing what this transaction wrote so far.  Registered:
 * the caller unregisters it.
 */
Snapshot
esrc_caller_snapshot(void)
{
	Snapshot	snap;

	CommandCounterIncrement();
	PushCopiedSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	snap = RegisterSnapshot(GetActiveSnapshot());
	PopActiveSnapshot();
	return snap;
}

/*
 * The row type of esrc.events is the one the Anum_events_* numbers (log.h)
 * describe, in the columns that appends and reads use by number; both
 * check it after opening the log.
 */
void
esrc_check_log_rowtype(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);

	if (desc->natts < Natts_events_min || desc->natts > Natts_events ||
		TupleDescAttr(desc, Anum_events_position - 1)->atttypid != INT8OID ||
		TupleDescAttr(desc, Anum_events_stream - 1)->atttypid != TEXTOID ||
		TupleDescAttr(desc, Anum_events_version - 1)->atttypid != INT8OID ||
		TupleDescAttr(desc, Anum_events_id - 1)->atttypid != UUIDOID ||
		TupleDescAttr(desc, Anum_events_category - 1)->atttypid != TEXTOID ||
		(desc->natts >= Anum_events_tags &&
		 TupleDescAttr(desc, Anum_events_tags - 1)->atttypid != TEXTARRAYOID))
		elog(ERROR, "esrc.events has an unexpected row type");
}

/*
 * The columns of an esrc.event of natts columns (ESRC_EVENT_NATTS, or
 * ESRC_EVENT_NATTS_MAX with tags) from a row of esrc.events in slot (all
 * columns deformed): its first ESRC_EVENT_NATTS columns, then its tags
 * (null when esrc.events has no tags column yet, before the update).
 */
void
esrc_event_values(TupleTableSlot *slot, int natts, Datum *values, bool *isnull)
{
	memcpy(values, slot->tts_values, sizeof(Datum) * ESRC_EVENT_NATTS);
	memcpy(isnull, slot->tts_isnull, sizeof(bool) * ESRC_EVENT_NATTS);
	if (natts > ESRC_EVENT_NATTS)
	{
		bool		has = slot->tts_tupleDescriptor->natts >= Anum_events_tags;

		values[ESRC_EVENT_NATTS] = has ? slot->tts_values[Anum_events_tags - 1] : (Datum) 0;
		isnull[ESRC_EVENT_NATTS] = has ? slot->tts_isnull[Anum_events_tags - 1] : true;
	}
}

/*
 * desc is esrc.event: the first ESRC_EVENT_NATTS columns of esrc.events
 * (by type), and tags (text[]) or not (before the update).
 */
void
esrc_check_event_rowtype(TupleDesc desc)
{
	static const Oid types[ESRC_EVENT_NATTS_MAX] = {INT8OID, TEXTOID, INT8OID, TEXTOID,
	JSONBOID, JSONBOID, UUIDOID, TIMESTAMPTZOID, TEXTARRAYOID};
	int			i;

	if (desc->natts != ESRC_EVENT_NATTS && desc->natts != ESRC_EVENT_NATTS_MAX)
		elog(ERROR, "esrc.event has an unexpected row type");
	for (i = 0; i < desc->natts; i++)
		if (TupleDescAttr(desc, i)->atttypid != types[i])
			elog(ERROR, "esrc.event has an unexpected row type");
}
