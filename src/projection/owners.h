/*-------------------------------------------------------------------------
 *
 * owners.h
 *	  The roles recorded in esrc's catalogs (owners.c): DROP ROLE,
 *	  REASSIGN OWNED and DROP OWNED for projections and subscriptions, and
 *	  what the code that acts as an owner does when that role is gone.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_OWNERS_H
#define ESRC_OWNERS_H

/*
 * Projection workers (projworker.c): pause the projections whose owner no
 * longer exists, recording why; in a transaction of its own, which the
 * caller must not be in.
 */
extern void esrc_pause_ownerless_projections(void);

#endif							/* ESRC_OWNERS_H */
