/*-------------------------------------------------------------------------
 *
 * owners.h
 *	  The roles recorded in esrc's catalogs (owners.c): DROP ROLE,
 *	  REASSIGN OWNED and DROP OWNED for projections and subscriptions.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_OWNERS_H
#define ESRC_OWNERS_H

/* the ProcessUtility hook, from _PG_init (esrc.c) */
extern void esrc_owners_init(void);

#endif							/* ESRC_OWNERS_H */
