/*-------------------------------------------------------------------------
 *
 * scrub.c
 *	  esrc.scrub(): zero the free space of the pages of esrc.events and of
 *	  its TOAST table, so that the bytes of row versions VACUUM removed --
 *	  the events esrc.erase_stream() redacted -- leave the data files
 *	  (issue 16; docs/lifecycle.md, "Scrubbing the bytes").
 *
 * This file owns:
 *	 - esrc.scrub(max_pages, restart): one slice of a pass over both
 *	   relations, resumable across calls and transactions;
 *	 - the pass's position, kept in esrc.scrub_progress (one row per
 *	   relation, written here only, as the table's owner through
 *	   ownerctx.c's esrc_run_as_owner).
 *
 * Why it is needed: pruning (VACUUM, or on-access HOT pruning) compacts a
 * page and marks the removed tuples' line pointers unused, but leaves
 * their bytes in the hole between pd_lower and pd_upper.  SQL never sees
 * them again, but anyone who reads the data files or a file-level copy of
 * them does (measured: docs/lifecycle.md).
 *
 * Per page, one at a time: pin, exclusive content lock, zero
 * [pd_lower, pd_upper) if it holds a non-zero byte, MarkBufferDirty, WAL
 * the page with log_newpage_buffer(buf, true), unlock and unpin.
 *	 - The exclusive content lock is enough; no cleanup lock.  Everything a
 *	   backend that only pins the page may still look at (line pointers, and
 *	   tuples it found visible under a lock) lies below pd_lower or at or
 *	   above pd_upper: tuples are moved (and the hole made) only by
 *	   pruning, which itself waits for a cleanup lock, and pd_lower and
 *	   pd_upper change only under the exclusive lock we hold.  A cleanup
 *	   lock would wait for every pin, e.g. a long scan, and make appends to
 *	   the page wait behind us.
 *	 - page_std = true: the full-page image leaves the hole out, so the
 *	   WAL record carries none of the old bytes, and crash recovery and
 *	   standbys restore the zeroed page (redo zero-fills the hole).
 *	 - No lock is held across pages; CHECK_FOR_INTERRUPTS between pages.
 *	 - New (all-zero) pages are skipped.  Empty pages are not: a page
 *	   that pruning emptied is all hole, and that is where the bytes are.
 *	 - A pass scans each relation up to its size when the pass started:
 *	   later pages hold only rows written after that, and every row
 *	   version removed before the pass is on an older page.  A relation
 *	   that shrank (VACUUM truncation) between calls is scanned to its
 *	   current end; within a call, the AccessShareLock held on it keeps
 *	   VACUUM from truncating it.
 *
 * It scrubs nothing VACUUM has not pruned yet: it must run after a VACUUM
 * of esrc.events that removed the dead versions (VACUUM cannot run inside
 * a function), and only a pass that started after that VACUUM counts.
 * Only esrc.events and its TOAST table are touched: the indexes of
 * esrc.events hold no data or metadata, the TOAST index only chunk ids.
 * EXECUTE on esrc.scrub (esrc_admin) is the privilege check.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xloginsert.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "lifecycle/lifecycle.h"

PG_FUNCTION_INFO_V1(esrc_scrub);

#define SCRUB_RELS 2			/* esrc.events and its TOAST table */

/* One relation's part of a pass, and what this call did to it. */
typedef struct ScrubRel
{
	const char *key;			/* 'events' or 'toast' in esrc.scrub_progress */
	Oid			relid;
	int64		next_block;		/* first block not scanned yet */
	int64		end_block;		/* its size when the pass started */
	TimestampTz started;		/* when the pass started */
	int64		pages_scanned;	/* by this call */
	int64		pages_scrubbed;
	int64		bytes_zeroed;
} ScrubRel;

/*
 * Zero the hole of one block, under its exclusive content lock only.
 * Returns the bytes zeroed (0: the hole was zero already, or the page is
 * new).  May ereport (a corrupt page header) with nothing held but the
 * buffer, which the error cleanup releases.
 */
static int
scrub_block(Relation rel, BlockNumber blkno, BufferAccessStrategy strategy)
{
	Buffer		buf = ReadBufferExtended(rel, MAIN_FORKNUM, blkno, RBM_NORMAL, strategy);
	Page		page;
	PageHeader	ph;
	int			zeroed = 0;

	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	page = BufferGetPage(buf);
	ph = (PageHeader) page;
	if (!PageIsNew(page))
	{
		char	   *p;
		char	   *end;

		if (ph->pd_lower < SizeOfPageHeaderData || ph->pd_lower > ph->pd_upper ||
			ph->pd_upper > ph->pd_special || ph->pd_special > BLCKSZ)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("page %u of relation \"%s\" has a corrupt header",
							blkno, RelationGetRelationName(rel)),
					 errdetail("pd_lower %u, pd_upper %u, pd_special %u.",
							   ph->pd_lower, ph->pd_upper, ph->pd_special)));
		p = (char *) page + ph->pd_lower;
		end = (char *) page + ph->pd_upper;
		for (; p < end && *p == 0; p++)
			;
		if (p < end)
		{
			zeroed = ph->pd_upper - ph->pd_lower;
			START_CRIT_SECTION();
			memset((char *) page + ph->pd_lower, 0, zeroed);
			MarkBufferDirty(buf);
			if (RelationNeedsWAL(rel))
				(void) log_newpage_buffer(buf, true);
			END_CRIT_SECTION();
		}
	}
	UnlockReleaseBuffer(buf);
	return zeroed;
}

/*
 * Scan sr's relation from next_block on, at most *budget pages, up to
 * end_block (clamped to the relation's current size).  Holds an
 * AccessShareLock on the relation (appends and VACUUM go on; VACUUM's
 * truncation waits) and one page at a time.
 */
static void
scrub_relation(ScrubRel *sr, int64 *budget)
{
	Relation	rel = table_open(sr->relid, AccessShareLock);
	BufferAccessStrategy strategy = GetAccessStrategy(BAS_VACUUM);
	int64		nblocks = RelationGetNumberOfBlocks(rel);

	if (sr->end_block > nblocks)
		sr->end_block = nblocks;
	while (sr->next_block < sr->end_block && *budget > 0)
	{
		int			zeroed;

		CHECK_FOR_INTERRUPTS();
		zeroed = scrub_block(rel, (BlockNumber) sr->next_block, strategy);
		sr->pages_scanned++;
		if (zeroed > 0)
		{
			sr->pages_scrubbed++;
			sr->bytes_zeroed += zeroed;
		}
		sr->next_block++;
		(*budget)--;
	}
	FreeAccessStrategy(strategy);
	table_close(rel, AccessShareLock);
}

/* The size of a relation now, in blocks. */
static int64
relation_blocks(Oid relid)
{
	Relation	rel = table_open(relid, AccessShareLock);
	int64		n = RelationGetNumberOfBlocks(rel);

	table_close(rel, AccessShareLock);
	return n;
}

/*
 * Read the pass's position from esrc.scrub_progress into rels.  Returns
 * false when no pass is in progress (no rows, or every relation scanned
 * to its end).
 */
static bool
load_progress(ScrubRel *rels, Oid owner)
{
	static const char *sql =
		"SELECT relation, next_block, end_block, pass_started_at "
		"FROM esrc.scrub_progress";
	bool		unfinished = false;
	int			found = 0;
	uint64		i;
	int			r;

	esrc_run_as_owner(owner, sql, 0, NULL, NULL, NULL, SPI_OK_SELECT);
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *key = SPI_getvalue(tup, desc, 1);
		bool		isnull;

		for (r = 0; r < SCRUB_RELS; r++)
		{
			if (strcmp(key, rels[r].key) != 0)
				continue;
			rels[r].next_block = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
			rels[r].end_block = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
			rels[r].started = DatumGetTimestampTz(SPI_getbinval(tup, desc, 4, &isnull));
			found++;
			if (rels[r].next_block < rels[r].end_block)
				unfinished = true;
		}
	}
	return found == SCRUB_RELS && unfinished;
}

/* Write the pass's position back (one statement, as the table's owner). */
static void
save_progress(ScrubRel *rels, Oid owner)
{
	static const char *sql =
		"INSERT INTO esrc.scrub_progress AS p "
		"(relation, next_block, end_block, pass_started_at) "
		"VALUES ($1, $2, $3, $4) ON CONFLICT (relation) DO UPDATE "
		"SET next_block = excluded.next_block, end_block = excluded.end_block, "
		"pass_started_at = excluded.pass_started_at";
	Oid			argtypes[4] = {TEXTOID, INT8OID, INT8OID, TIMESTAMPTZOID};
	int			r;

	for (r = 0; r < SCRUB_RELS; r++)
	{
		Datum		values[4];

		values[0] = CStringGetTextDatum(rels[r].key);
		values[1] = Int64GetDatum(rels[r].next_block);
		values[2] = Int64GetDatum(rels[r].end_block);
		values[3] = TimestampTzGetDatum(rels[r].started);
		esrc_run_as_owner(owner, sql, 4, argtypes, values, NULL, SPI_OK_INSERT);
	}
}

/* max_pages: not null, at least 1 */
static int64
scrub_budget(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("max_pages must not be null"),
				 errhint("Pass the number of pages one call may scan, e.g. 10000.")));
	if (PG_GETARG_INT32(0) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_pages must be at least 1"),
				 errdetail("It was %d.", PG_GETARG_INT32(0)),
				 errhint("Pass the number of pages one call may scan, e.g. 10000.")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("restart must not be null")));
	return PG_GETARG_INT32(0);
}

/*
 * esrc.scrub(max_pages, restart) -> setof (relation, pages_scanned,
 * pages_scrubbed, bytes_zeroed, pass_started_at, done): one slice of the
 * current pass (or of a new one when none is in progress or restart is
 * true), then the position is saved.  Calls serialize on an
 * ExclusiveLock on esrc.scrub_progress, held to the end of the
 * transaction (readers of the table are not blocked).
 */
Datum
esrc_scrub(PG_FUNCTION_ARGS)
{
	int64		budget = scrub_budget(fcinfo);
	bool		restart = PG_GETARG_BOOL(1);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			progress = esrc_relation_oid("scrub_progress");
	Oid			owner = esrc_relation_owner(progress);
	Relation	events;
	ScrubRel	rels[SCRUB_RELS];
	int			r;

	PreventCommandIfReadOnly("esrc.scrub()");
	InitMaterializedSRF(fcinfo, 0);
	memset(rels, 0, sizeof(rels));
	events = esrc_open_relation("events", AccessShareLock);
	rels[0].key = "events";
	rels[0].relid = RelationGetRelid(events);
	rels[1].key = "toast";
	rels[1].relid = events->rd_rel->reltoastrelid;
	table_close(events, NoLock);
	if (!OidIsValid(rels[1].relid))
		elog(ERROR, "esrc.events has no TOAST table");

	LockRelationOid(progress, ExclusiveLock);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (!load_progress(rels, owner) || restart)
	{
		for (r = 0; r < SCRUB_RELS; r++)
		{
			rels[r].next_block = 0;
			rels[r].end_block = relation_blocks(rels[r].relid);
			rels[r].started = GetCurrentTransactionStartTimestamp();
		}
	}
	for (r = 0; r < SCRUB_RELS; r++)
		scrub_relation(&rels[r], &budget);
	save_progress(rels, owner);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");

	for (r = 0; r < SCRUB_RELS; r++)
	{
		Datum		values[6];
		bool		nulls[6] = {false, false, false, false, false, false};

		values[0] = ObjectIdGetDatum(rels[r].relid);
		values[1] = Int64GetDatum(rels[r].pages_scanned);
		values[2] = Int64GetDatum(rels[r].pages_scrubbed);
		values[3] = Int64GetDatum(rels[r].bytes_zeroed);
		values[4] = TimestampTzGetDatum(rels[r].started);
		values[5] = BoolGetDatum(rels[r].next_block >= rels[r].end_block);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_NULL();
}
