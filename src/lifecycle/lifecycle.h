/*-------------------------------------------------------------------------
 *
 * lifecycle.h
 *	  The face of src/lifecycle/: the log's life cycle (issue 16).
 *	  erase.c (esrc.erase_stream, the audit table esrc.erasures, the
 *	  redactor), retention.c (esrc.set_stream_rules, esrc.delete_stream),
 *	  scavenge.c (the scavenger), scrub.c (esrc.scrub), crypto.c
 *	  (crypto-shredding), erasecost.c (the erasure's pacing).  Other
 *	  subsystems reach it through SQL, except for the settings, the
 *	  scavenger's worker slice and its wake-up hook declared here.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_LIFECYCLE_LIFECYCLE_H
#define ESRC_LIFECYCLE_LIFECYCLE_H

#include "postgres.h"
#include "base/base.h"

/* erasecost.c: the GUCs of the erasure's pacing (esrc.erase_cost_delay, ...) */
extern void esrc_erase_cost_init(void);

/*
 * scavenge.c: the scavenger's settings and the workers' slice; the
 * scavenger is woken at commit (when esrc.scavenge_interval is set) after
 * a change of the stream rules, through the hook that the subsystem whose
 * workers run it (projection.c) sets.
 */
extern int	esrc_scavenge_interval_s;
extern int	esrc_scavenge_max_events;
extern void esrc_scavenge_init(void);
extern void esrc_scavenge_worker_slice(void);
extern void (*esrc_scavenger_wake_hook) (void);
extern void esrc_scavenger_wake_at_commit(void);

#endif							/* ESRC_LIFECYCLE_LIFECYCLE_H */
