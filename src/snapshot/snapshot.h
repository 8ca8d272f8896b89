/*-------------------------------------------------------------------------
 *
 * snapshot.h
 *	  The face of src/snapshot/: snapshot tables kept by triggers in the
 *	  appending transaction.  Other subsystems reach snapshots only through
 *	  SQL (esrc.snapshots, the snapshot tables), so this face declares
 *	  nothing; snapshotint.h is for the folder's own files.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_SNAPSHOT_SNAPSHOT_H
#define ESRC_SNAPSHOT_SNAPSHOT_H

#include "postgres.h"

/* nothing: see the comment above */

#endif							/* ESRC_SNAPSHOT_SNAPSHOT_H */
