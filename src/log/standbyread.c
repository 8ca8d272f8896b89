/*-------------------------------------------------------------------------
 *
 * standbyread.c
 *	  On a hot standby: the horizons of read_all, read_category and
 *	  safe_position (order.c asks when RecoveryInProgress()), computed from
 *	  the newest row of esrc.standby_horizon that replay has written.  The
 *	  primary's side, the publisher that writes the row, is standby.c; why
 *	  reading it is safe is order.c's header, "Hot standbys".
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "storage/bufmgr.h"
#include "utils/snapmgr.h"

#include "base/base.h"
#include "log/log.h"
#include "logint.h"

/*
 * The horizon of this database on a hot standby for a reader of the
 * categories hashes[0 .. nhashes - 1] (nhashes < 0: the global horizon),
 * from what replay has written into the row of esrc.standby_horizon
 * (order.c, "Hot standbys"): the global horizon H of the newest reading of
 * the primary's registry, and for a set of categories the larger of H and
 * R3' computed from the newest reading whose categories the row holds.
 * The tuple is copied under the buffer's share lock (replay overwrites it
 * under the exclusive lock), before the caller's read takes its snapshot.
 * 0 if there is no row.
 */
int64
esrc_standby_horizon(const uint64 *hashes, int nhashes)
{
	Relation	rel = esrc_open_relation("standby_horizon", AccessShareLock);
	Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
	TableScanDesc scan = table_beginscan(rel, snap, 0, NULL);
	HeapTuple	tup = heap_getnext(scan, ForwardScanDirection);
	int64		horizon = 0;

	if (tup != NULL)
	{
		Buffer		buf = ((HeapScanDesc) scan)->rs_cbuf;
		Datum		values[Natts_sh];
		bool		nulls[Natts_sh];
		int64		cat;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		tup = heap_copytuple(tup);
		LockBuffer(buf, BUFFER_LOCK_UNLOCK);
		heap_deform_tuple(tup, RelationGetDescr(rel), values, nulls);
		horizon = DatumGetInt64(values[Anum_sh_horizon - 1]);
		cat = DatumGetInt64(values[Anum_sh_last_position - 1]);
		if (nhashes > 0)
		{
			bytea	   *b = DatumGetByteaPP(values[Anum_sh_categories - 1]);
			int			n = DatumGetInt32(values[Anum_sh_ncategories - 1]);
			int64		overflow = DatumGetInt64(values[Anum_sh_overflow_bound - 1]);
			int			i;

			if (n < 0 || n > SH_CATEGORIES ||
				VARSIZE_ANY_EXHDR(b) != SH_CATEGORIES * sizeof(ShEntry))
				elog(ERROR, "esrc.standby_horizon holds %d categories in %zu bytes",
					 n, (size_t) VARSIZE_ANY_EXHDR(b));
			for (i = 0; i < n; i++)
			{
				ShEntry		e;
				int			k;

				memcpy(&e, VARDATA_ANY(b) + i * sizeof(ShEntry), sizeof(ShEntry));
				for (k = 0; k < nhashes; k++)
					if (e.hash == hashes[k] && (int64) e.bound - 1 < cat)
						cat = (int64) e.bound - 1;
			}
			if (overflow != 0 && overflow - 1 < cat)
				cat = overflow - 1;
		}
		if (nhashes >= 0)
			horizon = Max(horizon, cat);
	}
	table_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, AccessShareLock);
	return horizon;
}
