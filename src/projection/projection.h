/*-------------------------------------------------------------------------
 *
 * projection.h
 *	  The face of src/projection/: projections run by workers, and the
 *	  bookkeeping of the roles that own esrc objects (owners.c).  Other
 *	  subsystems only start it; the rest is projectionint.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_PROJECTION_PROJECTION_H
#define ESRC_PROJECTION_PROJECTION_H

#include "postgres.h"

/* projection.c: the settings, the launcher, the scavenger's wake-up hook */
extern void esrc_projection_init(void);

/* projlauncher.c: the workers' slots in shared memory */
extern Size esrc_projection_shmem_size(void);
extern void esrc_projection_shmem_init(void);

/* owners.c: DROP ROLE, REASSIGN OWNED, DROP OWNED (a ProcessUtility hook) */
extern void esrc_owners_init(void);

#endif							/* ESRC_PROJECTION_PROJECTION_H */
