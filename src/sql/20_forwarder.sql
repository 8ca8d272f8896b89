-- Part of the esrc install script (see Makefile): forwarding events to
-- Kafka (src/forward/, docs/forwarder.md).

------------------------------------------------------------------------
-- The forwarder's state
------------------------------------------------------------------------

-- One row.  log_id names this event log: the forwarder's Kafka identity
-- (transactional.id and position record key "esrc-<log_id>") derives
-- from it, so a dropped and re-created extension, whose positions start
-- again at 1, is a new log to Kafka and is not mistaken for the old one.
CREATE TABLE esrc.forwarder_state (
    singleton   boolean     NOT NULL DEFAULT true,
    log_id      uuid        NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
    position    bigint      NOT NULL DEFAULT 0 CHECK (position >= 0),
    updated_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT forwarder_state_pkey PRIMARY KEY (singleton),
    CONSTRAINT forwarder_state_singleton CHECK (singleton)
);
INSERT INTO esrc.forwarder_state DEFAULT VALUES;
COMMENT ON TABLE esrc.forwarder_state IS
    'The Kafka forwarder''s one row: the identity of this log (log_id) and the last forwarded position (the authority in at_least_once mode, a mirror of the Kafka offsets topic in exactly_once mode).';
COMMENT ON COLUMN esrc.forwarder_state.log_id IS
    'Identity of this event log in Kafka: transactional.id and position record key are esrc-<log_id>.';
COMMENT ON COLUMN esrc.forwarder_state.position IS
    'Last forwarded position as of updated_at; never ahead of what Kafka has.';
REVOKE ALL ON esrc.forwarder_state FROM PUBLIC;
GRANT SELECT ON esrc.forwarder_state TO esrc_reader;

-- Events an operator gave up on (esrc.forwarder_skip): never sent.
CREATE TABLE esrc.forwarder_skips (
    position    bigint      NOT NULL,
    stream      text        NOT NULL,
    reason      text,
    skipped_by  name        NOT NULL DEFAULT current_user,
    skipped_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT forwarder_skips_pkey PRIMARY KEY (position)
);
COMMENT ON TABLE esrc.forwarder_skips IS
    'Events the Kafka forwarder does not send, recorded by esrc.forwarder_skip(); the events stay in esrc.events.';
REVOKE ALL ON esrc.forwarder_skips FROM PUBLIC;
GRANT SELECT ON esrc.forwarder_skips TO esrc_reader;

------------------------------------------------------------------------
-- Watching and steering the forwarder
------------------------------------------------------------------------

CREATE FUNCTION esrc.forwarder_worker_status(
    OUT state text,
    OUT detail text,
    OUT database text,
    OUT brokers text,
    OUT delivery text,
    OUT paused boolean,
    OUT last_position bigint,
    OUT delivered_total bigint,
    OUT last_delivery_at timestamptz,
    OUT last_error text,
    OUT last_error_at timestamptz,
    OUT blocked_position bigint,
    OUT blocked_stream text,
    OUT pid int,
    OUT state_since timestamptz,
    OUT standby_wait_since timestamptz)
RETURNS SETOF record
    LANGUAGE c STRICT VOLATILE PARALLEL RESTRICTED ROWS 4
    AS 'MODULE_PATHNAME', 'esrc_forwarder_worker_status';
COMMENT ON FUNCTION esrc.forwarder_worker_status() IS
    'What the Kafka forwarder workers publish in shared memory, one row per forwarded database; use the view esrc.forwarder_status.';

CREATE VIEW esrc.forwarder_status AS
    SELECT w.state,
           w.detail,
           w.database,
           w.brokers,
           w.delivery,
           w.paused,
           p.last_position,
           CASE WHEN h.here THEN (SELECT count(*)
              FROM esrc.events e
             WHERE e.position > p.last_position
               AND e.position <= h.safe_position
               AND NOT EXISTS (SELECT 1 FROM esrc.forwarder_skips s
                               WHERE s.position = e.position)) END AS events_pending,
           (SELECT greatest(0, extract(epoch FROM pg_catalog.clock_timestamp() - e.recorded_at))::double precision
              FROM esrc.events e
             WHERE h.here
               AND e.position > p.last_position
               AND e.position <= h.safe_position
             ORDER BY e.position
             LIMIT 1) AS lag_seconds,
           w.delivered_total,
           w.last_delivery_at,
           w.last_error,
           w.last_error_at,
           w.blocked_position,
           w.blocked_stream,
           w.pid,
           w.state_since,
           w.standby_wait_since
      FROM esrc.forwarder_worker_status() w,
           LATERAL (SELECT w.database = pg_catalog.current_database() AS here,
                           esrc.safe_position() AS safe_position) h,
           LATERAL (SELECT CASE WHEN h.here
                                THEN coalesce(w.last_position,
                                              (SELECT fs.position FROM esrc.forwarder_state fs))
                                ELSE w.last_position END AS last_position) p;
COMMENT ON VIEW esrc.forwarder_status IS
    'One row per forwarded database (esrc.databases), from any database, plus one for this database when it is not forwarded: the Kafka forwarder''s state, configuration (never esrc.kafka_properties), progress, events pending and lag in seconds of the oldest pending event (this database''s row only), and its last error.';
COMMENT ON COLUMN esrc.forwarder_status.state IS
    'stopped, starting, idle (no brokers), connecting, running, paused, disconnected (Kafka unreachable, retrying), error (refused configuration or fatal producer error, retrying), blocked (a poison record, see blocked_position), waiting for standby (a standby of esrc.forwarder_standbys has not flushed the next batch''s WAL, see last_error), diverged (Kafka''s position record does not match the log, see last_error and esrc.forwarder_accept_divergence()), no extension (esrc is not installed in that database), no database (a listed database that does not exist), or inactive (this database is not forwarded).';
COMMENT ON COLUMN esrc.forwarder_status.last_position IS
    'Last forwarded position: the worker''s own when one runs, else (this database''s row) esrc.forwarder_state.position.';
COMMENT ON COLUMN esrc.forwarder_status.events_pending IS
    'Committed events after last_position up to esrc.safe_position(), not counting skipped ones; null in the rows of other databases.';
COMMENT ON COLUMN esrc.forwarder_status.lag_seconds IS
    'Seconds since the oldest pending event was recorded; null when nothing is pending, and in the rows of other databases.';
COMMENT ON COLUMN esrc.forwarder_status.delivered_total IS
    'Records Kafka acknowledged since the server started.';
COMMENT ON COLUMN esrc.forwarder_status.blocked_position IS
    'Position of the event Kafka refuses (state blocked); see esrc.forwarder_skip().';
COMMENT ON COLUMN esrc.forwarder_status.standby_wait_since IS
    'Since when the worker waits for a standby of esrc.forwarder_standbys to flush the WAL of the next batch; null when it does not wait.';
GRANT SELECT ON esrc.forwarder_status TO esrc_reader;

CREATE FUNCTION esrc.forwarder_pause() RETURNS void
    LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_forwarder_pause';
COMMENT ON FUNCTION esrc.forwarder_pause() IS
    'Stop forwarding (every database''s forwarder) after the batch in hand, until esrc.forwarder_resume() or a server restart; appends are not affected.';

CREATE FUNCTION esrc.forwarder_resume() RETURNS void
    LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_forwarder_resume';
COMMENT ON FUNCTION esrc.forwarder_resume() IS
    'Undo esrc.forwarder_pause(): the forwarder continues where it stopped.';

CREATE FUNCTION esrc.forwarder_skip(event_position bigint, reason text DEFAULT NULL)
RETURNS void
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
AS $skip$
DECLARE
    v_stream text;
BEGIN
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute esrc.forwarder_skip() in a read-only transaction'
            USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    IF forwarder_skip.event_position IS NULL THEN
        RAISE EXCEPTION 'event_position must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT e.stream INTO v_stream
      FROM esrc.events e WHERE e.position = forwarder_skip.event_position;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'there is no event at position %', forwarder_skip.event_position
            USING ERRCODE = 'no_data_found';
    END IF;
    IF forwarder_skip.event_position <= (SELECT fs.position FROM esrc.forwarder_state fs) THEN
        RAISE EXCEPTION 'the event at position % has already been forwarded', forwarder_skip.event_position
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    INSERT INTO esrc.forwarder_skips (position, stream, reason)
    VALUES (forwarder_skip.event_position, v_stream, forwarder_skip.reason)
    ON CONFLICT ON CONSTRAINT forwarder_skips_pkey DO NOTHING;
END
$skip$;
COMMENT ON FUNCTION esrc.forwarder_skip(bigint, text) IS
    'Give up on forwarding one event (a poison record the forwarder is blocked on): it is recorded in esrc.forwarder_skips and never sent; later events follow.';

-- Steering is for the extension owner only (REVOKE above ran before
-- these functions existed); the status is for readers.
REVOKE ALL ON FUNCTION esrc.forwarder_worker_status(),
                       esrc.forwarder_pause(),
                       esrc.forwarder_resume(),
                       esrc.forwarder_skip(bigint, text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.forwarder_worker_status() TO esrc_reader;

------------------------------------------------------------------------
-- Divergence of Kafka from the log (src/forward/fwddiverge.c,
-- docs/forwarder.md "Divergence")
------------------------------------------------------------------------

-- What the worker found at connect when Kafka's last position record did
-- not match the log (a standby promoted after asynchronous replication
-- lost events Kafka has), and the operator's decision.
CREATE TABLE esrc.forwarder_divergences (
    divergence_id     bigint      GENERATED ALWAYS AS IDENTITY,
    detected_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    kafka_position    bigint      NOT NULL,
    kafka_event_id    uuid,
    log_event_id      uuid,
    log_end           bigint      NOT NULL,
    accepted_position bigint,
    reason            text,
    accepted_by       name,
    accepted_at       timestamptz,
    CONSTRAINT forwarder_divergences_pkey PRIMARY KEY (divergence_id)
);
COMMENT ON TABLE esrc.forwarder_divergences IS
    'Divergences of the Kafka forwarder''s position record from the log, written by the worker when it stops (state diverged), and the operator''s decision, written by esrc.forwarder_accept_divergence().';
COMMENT ON COLUMN esrc.forwarder_divergences.kafka_position IS
    'Position of Kafka''s last position record.';
COMMENT ON COLUMN esrc.forwarder_divergences.kafka_event_id IS
    'Id of the event at that position as Kafka''s position record names it; null for a record written by esrc 0.2.0, which has no id.';
COMMENT ON COLUMN esrc.forwarder_divergences.log_event_id IS
    'Id of the log''s event at kafka_position when the divergence was found; null when the log had none there.';
COMMENT ON COLUMN esrc.forwarder_divergences.log_end IS
    'Position of the log''s last committed event (up to its horizon) when the divergence was found.';
COMMENT ON COLUMN esrc.forwarder_divergences.accepted_position IS
    'The operator''s decision: the worker sends the events after this position; null until esrc.forwarder_accept_divergence().';
REVOKE ALL ON esrc.forwarder_divergences FROM PUBLIC;
GRANT SELECT ON esrc.forwarder_divergences TO esrc_reader;

CREATE FUNCTION esrc.forwarder_accept_divergence(after_position bigint, reason text,
                                                 database name DEFAULT pg_catalog.current_database())
RETURNS void
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
AS $accept$
DECLARE
    v_horizon bigint;
    v_id bigint;
BEGIN
    IF NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r
                      WHERE r.rolname OPERATOR(pg_catalog.=) current_user), false) THEN
        RAISE EXCEPTION 'permission denied for function esrc.forwarder_accept_divergence()'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Only a superuser may decide what the Kafka forwarder sends after a divergence.';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute esrc.forwarder_accept_divergence() in a read-only transaction'
            USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    IF forwarder_accept_divergence.after_position IS NULL
       OR forwarder_accept_divergence.after_position OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION 'after_position must be a position, 0 or more'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF forwarder_accept_divergence.database IS DISTINCT FROM pg_catalog.current_database() THEN
        RAISE EXCEPTION 'esrc.forwarder_accept_divergence() decides for the database it runs in, not for database "%"',
                        forwarder_accept_divergence.database
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = pg_catalog.format('Connect to database %I and run it there.', forwarder_accept_divergence.database);
    END IF;
    v_horizon := esrc.safe_position();
    IF forwarder_accept_divergence.after_position OPERATOR(pg_catalog.>) v_horizon THEN
        RAISE EXCEPTION 'position % is above the log''s horizon %', forwarder_accept_divergence.after_position, v_horizon
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The forwarder can only continue after a position the log has committed.';
    END IF;
    SELECT d.divergence_id INTO v_id
      FROM esrc.forwarder_divergences d
     WHERE d.accepted_position IS NULL
     ORDER BY d.divergence_id DESC
     LIMIT 1
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the Kafka forwarder has not reported a divergence in this database'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'esrc.forwarder_status shows state diverged when it has; esrc.forwarder_divergences lists what it found.';
    END IF;
    UPDATE esrc.forwarder_divergences d
       SET accepted_position = forwarder_accept_divergence.after_position,
           reason = forwarder_accept_divergence.reason,
           accepted_by = current_user,
           accepted_at = pg_catalog.now()
     WHERE d.divergence_id OPERATOR(pg_catalog.=) v_id;
    UPDATE esrc.forwarder_state
       SET position = forwarder_accept_divergence.after_position,
           updated_at = pg_catalog.now();
END
$accept$;
COMMENT ON FUNCTION esrc.forwarder_accept_divergence(bigint, text, name) IS
    'The operator''s way out of state diverged (superuser): records the decision in esrc.forwarder_divergences and lets the Kafka forwarder of this database send the events after after_position (at most the log''s horizon); see docs/forwarder.md "Divergence".';
REVOKE ALL ON FUNCTION esrc.forwarder_accept_divergence(bigint, text, name) FROM PUBLIC;
