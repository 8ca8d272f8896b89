/*-------------------------------------------------------------------------
 *
 * redaction.c
 *	  The log's one exception to its immutability, and what it knows of
 *	  erased streams (issue 16): esrc.erase_stream() and the scavenger
 *	  (erase.c's redactor) redact events in place, and this file is
 *	  what lets exactly those updates pass and what tells the readers and
 *	  appenders that a stream is erased.
 *
 * This file owns:
 *	 - the redaction's shape: data becomes ESRC_ERASED_DATA, metadata NULL,
 *	   every other column stays (esrc_erased_marker, esrc_is_redacted);
 *	 - the erase window: esrc_redact_row() updates one row with the window
 *	   open for that row only, and esrc_erasure_permits(), which append.c's
 *	   trigger esrc.events_immutable() asks before it refuses an UPDATE,
 *	   lets it pass only inside that window and only if the new row is the
 *	   redaction of the old one; so a user's UPDATE is refused even in a
 *	   transaction that erased a stream;
 *	 - "is this stream erased?" (esrc_stream_erased, one probe of
 *	   esrc.erasures' index on stream; esrc_check_not_erased): append.c
 *	   refuses new events for an erased stream, and the snapshot code gives
 *	   it no state.  esrc.erasures is erase.c's audit table; it is read
 *	   here as a catalog is, by its index, with no privilege needed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "storage/itemptr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "log/log.h"

/*
 * The row erase_stream() is updating right now, if any.  Set only around
 * one ExecSimpleRelationUpdate() call and reset in PG_FINALLY.
 */
typedef struct EraseWindow
{
	bool		open;
	Oid			relid;			/* esrc.events */
	ItemPointerData tid;		/* the row being redacted */
	Datum		marker;			/* ESRC_ERASED_DATA as jsonb */
} EraseWindow;

static EraseWindow erase_window;

/* The redacted data, as a jsonb datum in CurrentMemoryContext. */
Datum
esrc_erased_marker(void)
{
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(ESRC_ERASED_DATA));
}

static bool
is_marker(Datum data, Datum marker)
{
	return DatumGetBool(DirectFunctionCall2(jsonb_eq, data, marker));
}

/*
 * Asked by append.c's trigger esrc.events_immutable() for every row
 * UPDATE: may this update pass?  Only if erase_stream() is updating this
 * very row of this relation right now (so a user's UPDATE never passes,
 * not even inside erase_stream's transaction), and only if the new row is
 * the old one with data = ESRC_ERASED_DATA and metadata NULL.
 */
bool
esrc_erasure_permits(TriggerData *trigdata)
{
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	HeapTuple	oldtup = trigdata->tg_trigtuple;
	HeapTuple	newtup = trigdata->tg_newtuple;
	int			i;

	if (!erase_window.open ||
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		RelationGetRelid(trigdata->tg_relation) != erase_window.relid ||
		oldtup == NULL || newtup == NULL ||
		!ItemPointerEquals(&oldtup->t_self, &erase_window.tid) ||
		desc->natts < Natts_events_min)
		return false;

	for (i = 1; i <= desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i - 1);
		bool		oldnull;
		bool		newnull;
		Datum		oldval = heap_getattr(oldtup, i, desc, &oldnull);
		Datum		newval = heap_getattr(newtup, i, desc, &newnull);

		if (i == Anum_events_data)
		{
			if (newnull || !is_marker(newval, erase_window.marker))
				return false;
		}
		else if (i == Anum_events_metadata)
		{
			if (!newnull)
				return false;
		}
		else if (oldnull != newnull ||
				 (!oldnull && !datum_image_eq(oldval, newval, att->attbyval,
											  att->attlen)))
			return false;
	}
	return true;
}

/*
 * Redact one row of esrc.events (tid, read into oldslot; newslot is it
 * with data = marker and metadata NULL) with the executor's simple update,
 * the row triggers of esrc.events firing as for an UPDATE: the one write
 * that esrc.events_immutable() lets pass, only for this row and while it
 * runs (the window is closed again in PG_FINALLY).  For erase.c's
 * redactor, which holds the stream lock and set up estate and epq.
 */
void
esrc_redact_row(ResultRelInfo *rri, EState *estate, EPQState *epq,
				TupleTableSlot *oldslot, TupleTableSlot *newslot,
				ItemPointer tid, Datum marker)
{
	erase_window.relid = RelationGetRelid(rri->ri_RelationDesc);
	erase_window.tid = *tid;
	erase_window.marker = marker;
	erase_window.open = true;
	PG_TRY();
	{
		ExecSimpleRelationUpdate(rri, estate, epq, oldslot, newslot);
	}
	PG_FINALLY();
	{
		erase_window.open = false;
	}
	PG_END_TRY();
}

/* columns of esrc.erasures, in the order of 50_lifecycle.sql */
#define Anum_erasures_what		2
#define Anum_erasures_stream		3
#define Anum_erasures_erased_at		7

/*
 * Is (data, metadata) the redaction erase_stream() writes?  Cheap: the
 * raw sizes are compared first, so a large or TOASTed data is never
 * fetched.  The marker is a constant, built once per backend.
 */
bool
esrc_is_redacted(Datum data, bool datanull, bool metanull)
{
	static Datum marker = (Datum) 0;

	if (datanull || !metanull)
		return false;
	if (marker == (Datum) 0)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		marker = esrc_erased_marker();
		MemoryContextSwitchTo(old);
	}
	return datum_image_eq(data, marker, false, -1);
}

/*
 * Has esrc.erase_stream() erased stream, as snap sees esrc.erasures (rows
 * of esrc.forget_subject, whose stream column is a subject, do not count)?  If
 * so and first_at is not NULL, *first_at is the time of its first erasure.
 * One probe of the index erasures_stream_idx, read directly, as a catalog
 * is read: no privilege on esrc.erasures is needed (load and append
 * callers have none).  Callers look only when they have reason to (no
 * snapshot row, a redacted event), so the cost stays off the common path.
 */
bool
esrc_stream_erased(const char *stream, Snapshot snap, TimestampTz *first_at)
{
	Relation	rel = esrc_open_relation("erasures", AccessShareLock);
	Oid			idxoid = get_relname_relid("erasures_stream_idx", esrc_schema_oid());
	Relation	idx;
	TupleTableSlot *slot;
	ScanKeyData key;
	IndexScanDesc scan;
	bool		found = false;

	if (!OidIsValid(idxoid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("esrc.erasures has no index erasures_stream_idx"),
				 errhint("Reinstall the extension; its indexes must not be dropped.")));
	idx = index_open(idxoid, AccessShareLock);
	if (idx->rd_rel->relam != BTREE_AM_OID ||
		idx->rd_index->indkey.values[0] != Anum_erasures_stream ||
		idx->rd_opcintype[0] != TEXTOID ||
		TupleDescAttr(RelationGetDescr(rel), Anum_erasures_what - 1)->atttypid != TEXTOID ||
		TupleDescAttr(RelationGetDescr(rel), Anum_erasures_erased_at - 1)->atttypid != TIMESTAMPTZOID)
		elog(ERROR, "esrc.erasures or its index erasures_stream_idx has an unexpected shape");
	slot = table_slot_create(rel, NULL);
	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   idx->rd_indcollation[0], F_TEXTEQ,
						   CStringGetTextDatum(stream));
	scan = esrc_index_beginscan(rel, idx, snap, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		TimestampTz at;
		text	   *what = DatumGetTextPP(slot_getattr(slot, Anum_erasures_what, &isnull));

		/* the table records rule changes and deletes too; only erasures count */
		if (VARSIZE_ANY_EXHDR(what) != strlen("erase_stream") ||
			memcmp(VARDATA_ANY(what), "erase_stream", strlen("erase_stream")) != 0)
			continue;
		at = DatumGetTimestampTz(slot_getattr(slot, Anum_erasures_erased_at, &isnull));
		if (first_at != NULL && (!found || at < *first_at))
			*first_at = at;
		found = true;
		if (first_at == NULL)
			break;
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * Raise 55000 if stream is erased (as snap sees esrc.erasures): for load
 * and snapshot_at (appending false), and for an append (true), which an
 * erased stream refuses.
 */
void
esrc_check_not_erased(const char *stream, Snapshot snap, bool appending)
{
	TimestampTz at;

	if (!esrc_stream_erased(stream, snap, &at))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("stream \"%s\" was erased", stream),
			 errdetail("esrc.erase_stream() erased it at %s; its events are redacted and it has no snapshot state.",
					   timestamptz_to_str(at)),
			 appending ?
			 errhint("An erased stream takes no new events; append to a stream with another name.") :
			 errhint("Treat the stream as deleted; esrc.erasures records when and why it was erased.")));
}
