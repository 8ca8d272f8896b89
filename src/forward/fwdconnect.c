/*-------------------------------------------------------------------------
 *
 * fwdconnect.c
 *	  The forwarder worker's link to Kafka: its settings (a copy of the
 *	  GUCs, reloaded on SIGHUP), the connect (its Kafka identity, where to
 *	  continue, Kafka's position record checked against the log before
 *	  anything is sent), the disconnect, a log created anew, and what
 *	  follows a failure: the back-off before the next attempt, a
 *	  configuration Kafka refused, the position of a record it refuses.
 *	  Also the wait for the latch, which serves librdkafka's callbacks
 *	  first, and the wait hook kafka.c calls during its long waits.
 *
 * Worker process only: the state here is the worker's, kept between the
 * turns of its main loop (forwarder.c) and the sending of batches
 * (fwdsend.c).  The position to continue after is the largest of Kafka's
 * position record, the table's mirror and the worker's own position:
 * none of them is ever ahead of what Kafka has (forwarder.c's header).
 *
 * Talks to: kafka.c (connect, disconnect, polling), fwdstatus.c (the
 * status), fwddiverge.c (Kafka's position record against the log),
 * fwdread.c (the forwarder's row, esrc.forwarder_skip), fwdconf.c (the
 * GUCs); forwardint.h has what the worker's files share.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "forwardint.h"
#include "kafka.h"

/* Back-off between failed attempts, doubling from the minimum. */
#define BACKOFF_MIN_MS	100
#define BACKOFF_MAX_MS	10000

/* forwardint.h */
FwdConfig	fwd_cfg;
EsrcKafka  *fwd_kafka = NULL;

/* failure handling (forwardint.h) */
int			fwd_backoff_ms = 0;
bool		fwd_config_refused = false;
int64		fwd_poison_position = 0;
static TimestampTz retry_at = 0;

/*
 * Kafka's position record, to check against the log before anything is
 * sent (fwddiverge.c): set at each connect, in both modes.
 */
static bool divergence_pending = false;
static int64 kafka_record_position = 0;
static char kafka_record_id[ESRC_KAFKA_ID_LEN];

/*
 * The GUCs the worker runs with, copied at start (forwarder.c) and at a
 * reload; its status slot shows the brokers and the mode.
 */
void
fwd_copy_config(void)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	if (fwd_cfg.brokers)
	{
		pfree(fwd_cfg.brokers);
		pfree(fwd_cfg.properties);
		pfree(fwd_cfg.offsets_topic);
		pfree(fwd_cfg.topic);
	}
	fwd_cfg.brokers = pstrdup(esrc_kafka_brokers ? esrc_kafka_brokers : "");
	fwd_cfg.properties = pstrdup(esrc_kafka_properties ? esrc_kafka_properties : "");
	fwd_cfg.offsets_topic = pstrdup(esrc_kafka_offsets_topic);
	fwd_cfg.topic = pstrdup(esrc_kafka_topic_template);
	fwd_cfg.exactly_once = (esrc_delivery == DELIVERY_EXACTLY_ONCE);
	fwd_cfg.position_record = esrc_kafka_position_record;
	MemoryContextSwitchTo(old);

	{
		EsrcForwarderShared *f = fwd_slot;

		fwd_status_write_begin(f);
		strlcpy(f->brokers, fwd_cfg.brokers, sizeof(f->brokers));
		f->exactly_once = fwd_cfg.exactly_once;
		fwd_status_write_end(f);
	}
}

/* Drop the Kafka handle: the next turn connects anew. */
void
fwd_disconnect(void)
{
	if (fwd_kafka != NULL)
	{
		esrc_kafka_destroy(fwd_kafka);
		fwd_kafka = NULL;
	}
}

/*
 * After a failure: no new attempt before the back-off is over
 * (fwd_wait_for_retry); it doubles from BACKOFF_MIN_MS to BACKOFF_MAX_MS.
 */
void
fwd_schedule_retry(void)
{
	fwd_backoff_ms = fwd_backoff_ms == 0 ? BACKOFF_MIN_MS : Min(fwd_backoff_ms * 2, BACKOFF_MAX_MS);
	retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), fwd_backoff_ms);
}

/* SIGHUP: reload, and start over with Kafka if its settings changed. */
void
fwd_reload_config(void)
{
	bool		kafka_changed;

	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);

	/* esrc.databases: the launcher stops us when we are no longer wanted */
	kafka_changed = strcmp(fwd_cfg.brokers, esrc_kafka_brokers) != 0 ||
		strcmp(fwd_cfg.properties, esrc_kafka_properties) != 0 ||
		strcmp(fwd_cfg.offsets_topic, esrc_kafka_offsets_topic) != 0 ||
		fwd_cfg.exactly_once != (esrc_delivery == DELIVERY_EXACTLY_ONCE) ||
		fwd_cfg.position_record != esrc_kafka_position_record;
	if (kafka_changed || strcmp(fwd_cfg.topic, esrc_kafka_topic_template) != 0)
	{
		fwd_copy_config();
		if (kafka_changed)
			fwd_disconnect();		/* fwd_connect_kafka() learns the position anew */
		fwd_config_refused = false;
		fwd_backoff_ms = 0;
		retry_at = 0;
		ereport(LOG,
				(errmsg("esrc forwarder: configuration reloaded")));
	}
}

/*
 * Wait for the latch (a commit that appended, pause/resume, SIGHUP) or
 * the timeout.  Serves librdkafka callbacks first.
 */
void
fwd_wait_latch(long timeout_ms)
{
	esrc_kafka_poll(fwd_kafka);
	if (timeout_ms <= 0)
		return;
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 timeout_ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/* ce_source: "/esrc/" and the database name, percent-encoded as a URI path. */
static char *
make_source(const char *dbname)
{
	StringInfoData s;
	const unsigned char *p;

	initStringInfo(&s);
	appendStringInfoString(&s, "/esrc/");
	for (p = (const unsigned char *) dbname; *p; p++)
	{
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			(*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' || *p == '~')
			appendStringInfoChar(&s, *p);
		else
			appendStringInfo(&s, "%%%02X", *p);
	}
	return s.data;
}

/* Connect to Kafka and learn where to continue. false on failure. */
bool
fwd_connect_kafka(void)
{
	EsrcKafkaSettings s;
	EsrcKafkaStatus status;
	char		err[ESRC_FWD_ERROR_LEN];
	char		client_id[64];
	int64		kafka_position = 0;

	kafka_record_id[0] = '\0';

	/*
	 * Our Kafka identity is esrc-<log_id>: a database copied from another
	 * that has esrc (CREATE DATABASE ... TEMPLATE) has the same log_id,
	 * and two workers with one identity would fence each other and share
	 * one position record.  Publish ours, then look for another.
	 */
	fwd_publish_log_id(fwd_log_id);
	{
		const char *owner = fwd_log_id_owner(fwd_log_id);

		if (owner != NULL)
		{
			snprintf(err, sizeof(err),
					 "database \"%s\" has the same log_id as database \"%s\" (a copy of it)",
					 fwd_served_database, owner);
			fwd_report_failure(FWD_ERROR, err,
							   "Two forwarders with one Kafka identity would fence each other; this one does not start. Give the copy an identity of its own: UPDATE esrc.forwarder_state SET log_id = gen_random_uuid(), position = 0 (it is then forwarded from the start).");
			fwd_schedule_retry();
			return false;
		}
	}
	snprintf(client_id, sizeof(client_id), "esrc-%s", fwd_log_id);
	memset(&s, 0, sizeof(s));
	s.brokers = fwd_cfg.brokers;
	s.properties = fwd_cfg.properties;
	s.exactly_once = fwd_cfg.exactly_once;
	s.position_record = fwd_cfg.position_record;
	s.client_id = client_id;
	s.offsets_topic = fwd_cfg.offsets_topic;
	s.database = fwd_served_database;
	s.log_id = fwd_log_id;
	s.source = make_source(fwd_served_database);

	fwd_set_state(FWD_CONNECTING, NULL);
	fwd_kafka = esrc_kafka_connect(&s, &kafka_position, kafka_record_id, &status,
							   err, sizeof(err));
	pfree((char *) s.source);
	if (fwd_kafka == NULL)
	{
		if (status == ESRC_KAFKA_CONFIG)
		{
			fwd_report_failure(FWD_ERROR, err,
						   "Fix esrc.kafka_brokers or esrc.kafka_properties and reload the configuration.");
			fwd_config_refused = true;
		}
		else
		{
			fwd_report_failure(FWD_DISCONNECTED, err, NULL);
			fwd_schedule_retry();
		}
		return false;
	}
	fwd_clear_last_error();		/* connected: what failed before is over */

	/*
	 * None of the three is ever ahead of what Kafka has: the offsets topic
	 * (a transaction's or, at_least_once, written after delivery), the table (written after a commit or a delivery) and
	 * our own position (advanced after one).  After a failed commit Kafka
	 * may have more than we know; after a switch of mode the table or our
	 * position may be ahead of an old position record.
	 */
	fwd_position = Max(Max(kafka_position, fwd_table_position), fwd_position);
	if (fwd_position > fwd_table_position)
		fwd_mirror_dirty = true;
	/* before anything is sent: does the log have what Kafka says it has? */
	kafka_record_position = kafka_position;
	divergence_pending = kafka_position > 0;	/* both modes */
	fwd_publish_progress(fwd_position, 0);
	fwd_backoff_ms = 0;
	ereport(LOG,
			(errmsg("esrc forwarder: connected to Kafka at %s (%s), continuing after position " INT64_FORMAT,
					fwd_cfg.brokers, fwd_cfg.exactly_once ? "exactly_once" : "at_least_once",
					fwd_position)));
	fwd_set_state(FWD_RUNNING, NULL);
	fwd_forget_logged_failure();
	return true;
}

/*
 * librdkafka is waiting (kafka.c): show why.  While connecting, its
 * latest error (the broker's address and the cause) goes to last_error at
 * once, in state "connecting", and a pending reload ends the connect (the
 * new settings are tried at once, not after the connect's budget); while
 * running, a wait of a second or more.
 */
bool
fwd_kafka_wait_hook(int64 waited_ms, const char *last_error)
{
	if (fwd_get_state() == FWD_CONNECTING && ConfigReloadPending)
		return true;
	if (fwd_get_state() == FWD_CONNECTING && last_error[0])
	{
		EsrcForwarderShared *f = fwd_slot;
		char		msg[ESRC_FWD_ERROR_LEN];

		snprintf(msg, sizeof(msg), "cannot connect to Kafka at %s: %s",
				 fwd_cfg.brokers, last_error);
		if (strcmp(f->last_error, msg) != 0)
		{
			TimestampTz now = GetCurrentTimestamp();

			fwd_status_write_begin(f);
			strlcpy(f->last_error, msg, sizeof(f->last_error));
			f->last_error_at = now;
			fwd_status_write_end(f);
		}
		return false;
	}
	if (waited_ms < 1000)
		return false;
	if (fwd_get_state() == FWD_RUNNING)
	{
		char		msg[ESRC_FWD_ERROR_LEN];

		snprintf(msg, sizeof(msg), "no answer from Kafka for %d s%s%s",
				 (int) (waited_ms / 1000), last_error[0] ? ": " : "", last_error);
		fwd_report_failure(FWD_DISCONNECTED, msg, NULL);
	}
	return false;
}

/* The extension was created anew: a new log, with a new Kafka identity. */
void
fwd_new_log(void)
{
	ereport(LOG,
			(errmsg("esrc forwarder: the log of database \"%s\" is new (log_id %s), starting after its position " INT64_FORMAT,
					fwd_served_database, fwd_log_id, fwd_table_position)));
	fwd_disconnect();
	fwd_position = -1;
	fwd_poison_position = 0;
	divergence_pending = false;
	fwd_set_blocked(0, NULL);
	fwd_mirror_dirty = false;
}

/*
 * Before the next attempt after a failure: wait (up to the retry time)
 * and return true, the turn is over.
 */
bool
fwd_wait_for_retry(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		ms;

	if (retry_at <= now)
		return false;
	ms = (long) ((retry_at - now) / 1000) + 1;

	/* while blocked, notice esrc.forwarder_skip() within a second */
	if (fwd_poison_position > 0 && fwd_kafka != NULL && fwd_poison_skipped(fwd_poison_position))
		retry_at = 0;
	else
		fwd_wait_latch(fwd_poison_position > 0 ? Min(ms, 1000) : ms);
	return true;
}

/*
 * Connected, before anything is sent: check Kafka's position record
 * against the log (fwddiverge.c).  Returns true, the turn is over, while
 * an append in flight holds that position or while the divergence waits
 * for the operator (esrc.forwarder_accept_divergence, looked for every
 * second).
 */
bool
fwd_wait_if_diverged(long *held_wait)
{
	int64		after = 0;

	if (!divergence_pending || fwd_kafka == NULL)
		return false;
	switch (fwd_check_divergence(kafka_record_position, kafka_record_id, &after))
	{
		case DIV_OK:
			break;
		case DIV_WAIT:
			fwd_wait_latch(*held_wait);
			*held_wait = Min(*held_wait * 2, HELD_WAIT_MAX_MS);
			return true;
		case DIV_DIVERGED:
			fwd_wait_latch(1000);
			return true;
		case DIV_ACCEPTED:
			fwd_position = after;
			fwd_mirror_dirty = false;	/* the function set the table */
			fwd_publish_progress(fwd_position, 0);
			fwd_set_state(FWD_RUNNING, NULL);
			fwd_forget_logged_failure();
			break;
	}
	divergence_pending = false;
	*held_wait = HELD_WAIT_MIN_MS;
	return false;
}
