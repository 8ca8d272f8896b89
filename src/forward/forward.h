/*-------------------------------------------------------------------------
 *
 * forward.h
 *	  The face of src/forward/: the Kafka forwarder (one worker per
 *	  forwarded database, their launcher, the librdkafka glue).  Other
 *	  subsystems only start it: it reads the log through log/log.h and
 *	  takes part in appends through the log's hooks, which
 *	  esrc_forwarder_init sets.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ESRC_FORWARD_FORWARD_H
#define ESRC_FORWARD_FORWARD_H

#include "postgres.h"

/*
 * fwdconf.c: the forwarders' GUCs and launcher, and what the forwarder
 * takes part in of an append (esrc_append_guard, esrc_listen_appended);
 * fwdstatus.c: their status slots in shared memory
 */
extern void esrc_forwarder_init(void);
extern Size esrc_forwarder_shmem_size(void);
extern void esrc_forwarder_shmem_init(void);

#endif							/* ESRC_FORWARD_FORWARD_H */
