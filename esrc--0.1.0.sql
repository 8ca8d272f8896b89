-- esrc 0.1.0 install script, as released (kept for CREATE EXTENSION esrc VERSION '0.1.0' and the upgrade test).
\echo Use "CREATE EXTENSION esrc" to load this file. \quit

-- from src/sql/00_core.sql
-- Part of the esrc install script (see Makefile): the event log, appends, reads.

------------------------------------------------------------------------
-- Roles
--
-- Roles are cluster-wide, so another database may have created them
-- already; DROP EXTENSION leaves them in place.
------------------------------------------------------------------------
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'esrc_reader') THEN
        CREATE ROLE esrc_reader NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'esrc_writer') THEN
        CREATE ROLE esrc_writer NOLOGIN;
    END IF;
END
$roles$;
GRANT esrc_reader TO esrc_writer;

REVOKE ALL ON SCHEMA esrc FROM PUBLIC;
GRANT USAGE ON SCHEMA esrc TO esrc_reader;

------------------------------------------------------------------------
-- The event log
------------------------------------------------------------------------

-- Global positions.  CACHE 1 is required: order.c relies on nextval()
-- returning increasing values in call order across sessions.
CREATE SEQUENCE esrc.position_seq AS bigint MINVALUE 1 CACHE 1 NO CYCLE;
COMMENT ON SEQUENCE esrc.position_seq IS
    'Global event positions; handed out by esrc.append under the stream lock.';

CREATE TABLE esrc.events (
    position    bigint      NOT NULL,
    stream      text        NOT NULL,
    version     bigint      NOT NULL CHECK (version >= 0),
    type        text        NOT NULL,
    data        jsonb       NOT NULL,
    metadata    jsonb,
    id          uuid        NOT NULL,
    recorded_at timestamptz NOT NULL,
    category    text        NOT NULL,
    CONSTRAINT events_pkey PRIMARY KEY (position),
    CONSTRAINT events_stream_version_key UNIQUE (stream, version),
    CONSTRAINT events_id_key UNIQUE (id)
);
CREATE INDEX events_category_position_idx ON esrc.events (category, position);
ALTER SEQUENCE esrc.position_seq OWNED BY esrc.events.position;
COMMENT ON TABLE esrc.events IS
    'The append-only event log.  Write with esrc.append/esrc.append_batch; UPDATE, DELETE and TRUNCATE are refused.';

-- pg_dump dumps the log and the sequence with the database.
SELECT pg_catalog.pg_extension_config_dump('esrc.events', '');
SELECT pg_catalog.pg_extension_config_dump('esrc.position_seq', '');

CREATE TYPE esrc.event AS (
    position    bigint,
    stream      text,
    version     bigint,
    type        text,
    data        jsonb,
    metadata    jsonb,
    id          uuid,
    recorded_at timestamptz
);
COMMENT ON TYPE esrc.event IS 'One event as returned by the read functions.';

-- Immutability: refuse UPDATE, DELETE and TRUNCATE for everyone.  The
-- triggers are ENABLE ALWAYS, so session_replication_role does not
-- bypass them.
CREATE FUNCTION esrc.events_immutable() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_events_immutable';
COMMENT ON FUNCTION esrc.events_immutable() IS
    'Trigger function that refuses every change to stored events.';

CREATE TRIGGER events_immutable BEFORE UPDATE OR DELETE ON esrc.events
    FOR EACH ROW EXECUTE FUNCTION esrc.events_immutable();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON esrc.events
    FOR EACH STATEMENT EXECUTE FUNCTION esrc.events_immutable();
ALTER TABLE esrc.events ENABLE ALWAYS TRIGGER events_immutable;
ALTER TABLE esrc.events ENABLE ALWAYS TRIGGER events_no_truncate;

REVOKE ALL ON esrc.events FROM PUBLIC;
REVOKE ALL ON SEQUENCE esrc.position_seq FROM PUBLIC;
GRANT SELECT ON esrc.events TO esrc_reader;
GRANT SELECT ON SEQUENCE esrc.position_seq TO esrc_reader;

------------------------------------------------------------------------
-- Appending
--
-- Not SECURITY DEFINER: the C code writes esrc.events itself (index scans
-- and the executor's simple insert, no SQL and no name lookup that
-- search_path could redirect), so EXECUTE on these two functions is all a
-- writer needs.  Triggers on esrc.events run as the caller.
------------------------------------------------------------------------
CREATE FUNCTION esrc.append(
    stream text,
    type text,
    data jsonb,
    metadata jsonb DEFAULT NULL,
    expected_version bigint DEFAULT NULL,
    id uuid DEFAULT NULL)
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_append';
COMMENT ON FUNCTION esrc.append(text, text, jsonb, jsonb, bigint, uuid) IS
    'Append one event to a stream and return the stream''s new version; raises 40001 when expected_version does not match.';

CREATE FUNCTION esrc.append_batch(
    stream text,
    events jsonb,
    expected_version bigint DEFAULT NULL)
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_append_batch';
COMMENT ON FUNCTION esrc.append_batch(text, jsonb, bigint) IS
    'Append a JSON array of events to a stream atomically with consecutive versions; returns the stream''s new version.';

------------------------------------------------------------------------
-- Reading
------------------------------------------------------------------------
CREATE FUNCTION esrc.stream_version(stream text) RETURNS bigint
    LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_stream_version';
COMMENT ON FUNCTION esrc.stream_version(text) IS
    'The version of the last event of a stream, -1 for a stream with no events.';

CREATE FUNCTION esrc.read_stream(
    stream text,
    from_version bigint DEFAULT 0,
    max_count int DEFAULT NULL)
RETURNS SETOF esrc.event
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 100
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_read_stream';
COMMENT ON FUNCTION esrc.read_stream(text, bigint, int) IS
    'The events of a stream from from_version on, oldest first; at most max_count (null = all).';

CREATE FUNCTION esrc.read_stream_backward(
    stream text,
    from_version bigint DEFAULT NULL,
    max_count int DEFAULT NULL)
RETURNS SETOF esrc.event
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 100
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_read_stream_backward';
COMMENT ON FUNCTION esrc.read_stream_backward(text, bigint, int) IS
    'The events of a stream from from_version (null = the end) back, newest first; at most max_count (null = all).';

CREATE FUNCTION esrc.read_all(
    after_position bigint DEFAULT 0,
    max_count int DEFAULT 1000)
RETURNS SETOF esrc.event
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 1000
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_read_all';
COMMENT ON FUNCTION esrc.read_all(bigint, int) IS
    'Committed events of all streams after a global position, in commit-safe position order, up to esrc.safe_position().';

CREATE FUNCTION esrc.read_category(
    category text,
    after_position bigint DEFAULT 0,
    max_count int DEFAULT 1000)
RETURNS SETOF esrc.event
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 1000
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_read_category';
COMMENT ON FUNCTION esrc.read_category(text, bigint, int) IS
    'Committed events of one category (stream name prefix before the first "-") after a global position, in commit-safe order.';

CREATE FUNCTION esrc.safe_position() RETURNS bigint
    LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_safe_position_sql';
COMMENT ON FUNCTION esrc.safe_position() IS
    'The read horizon: every event at or below this position has committed or rolled back; read_all never returns events beyond it.';

CREATE FUNCTION esrc.inflight_appends_internal(OUT pid integer, OUT min_position bigint)
RETURNS SETOF record
    LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_inflight_appends';
COMMENT ON FUNCTION esrc.inflight_appends_internal() IS
    'Backends of this database whose open transaction holds event positions (used by esrc.inflight_appends).';

CREATE VIEW esrc.inflight_appends AS
    SELECT i.pid, i.min_position, a.usename, a.application_name, a.state,
           a.xact_start, now() - a.xact_start AS xact_age
    FROM esrc.inflight_appends_internal() i
    LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = i.pid;
COMMENT ON VIEW esrc.inflight_appends IS
    'Open transactions that appended events and so hold back esrc.safe_position() until they end.';

CREATE VIEW esrc.streams AS
    SELECT stream,
           min(category)    AS category,
           max(version)     AS version,
           count(*)         AS event_count,
           min(recorded_at) AS first_recorded_at,
           max(recorded_at) AS last_recorded_at
    FROM esrc.events
    GROUP BY stream;
COMMENT ON VIEW esrc.streams IS
    'One row per stream: its category, current version, number of events and first/last recorded_at.  Scans the whole log.';
GRANT SELECT ON esrc.streams TO esrc_reader;
GRANT SELECT ON esrc.inflight_appends TO esrc_reader;

------------------------------------------------------------------------
-- Privileges on functions: nothing for PUBLIC.
------------------------------------------------------------------------
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA esrc FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.append(text, text, jsonb, jsonb, bigint, uuid),
                          esrc.append_batch(text, jsonb, bigint)
    TO esrc_writer;
GRANT EXECUTE ON FUNCTION esrc.stream_version(text),
                          esrc.read_stream(text, bigint, int),
                          esrc.read_stream_backward(text, bigint, int),
                          esrc.read_all(bigint, int),
                          esrc.read_category(text, bigint, int),
                          esrc.safe_position(),
                          esrc.inflight_appends_internal()
    TO esrc_reader;

-- from src/sql/10_snapshot.sql
-- Part of the esrc install script (see Makefile): snapshots maintained by
-- triggers (src/snapshot.c).  docs/snapshots.md is the reference.

------------------------------------------------------------------------
-- The catalog of snapshots
--
-- One row per snapshot.  The snapshot is its table; the reducer is kept
-- as the text of its qualified signature (not regprocedure) so that
-- pg_upgrade, which does not preserve function OIDs, accepts the table.
-- Rows are written by esrc.create_snapshot and esrc.drop_snapshot; the
-- triggers below validate them, record the dependencies of the snapshot
-- table and tell every session to reload its cached definitions.
------------------------------------------------------------------------
CREATE TABLE esrc.snapshots (
    snapshot      regclass    NOT NULL,
    category      text        NOT NULL,
    reducer       text        NOT NULL,
    initial_state jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT snapshots_pkey PRIMARY KEY (snapshot)
);
COMMENT ON TABLE esrc.snapshots IS
    'Snapshot definitions: the table, the category it follows, the reducer and the initial state.  Written by esrc.create_snapshot and esrc.drop_snapshot only.';
COMMENT ON COLUMN esrc.snapshots.snapshot IS 'The snapshot table (stream, version, state, updated_at).';
COMMENT ON COLUMN esrc.snapshots.category IS 'The category whose events the snapshot applies.';
COMMENT ON COLUMN esrc.snapshots.reducer IS 'Qualified signature of the reducer (state jsonb, event esrc.event) RETURNS jsonb.';
COMMENT ON COLUMN esrc.snapshots.initial_state IS 'The state before the first event of a stream.';
COMMENT ON COLUMN esrc.snapshots.created_at IS 'When the snapshot was created.';

-- pg_dump dumps the definitions with the database (see docs/snapshots.md,
-- "Backup and restore").
SELECT pg_catalog.pg_extension_config_dump('esrc.snapshots', '');

CREATE FUNCTION esrc.snapshots_catalog() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_snapshots_catalog';
COMMENT ON FUNCTION esrc.snapshots_catalog() IS
    'Trigger function of esrc.snapshots: validates new rows, records or removes the dependencies of snapshot tables, refuses UPDATE and TRUNCATE, and invalidates the cached definitions of every session.';

-- ENABLE ALWAYS: the dependencies and cache invalidation must follow every
-- change of the catalog, on a logical replica too.
CREATE TRIGGER snapshots_check BEFORE INSERT OR UPDATE ON esrc.snapshots
    FOR EACH ROW EXECUTE FUNCTION esrc.snapshots_catalog();
CREATE TRIGGER snapshots_track AFTER INSERT OR DELETE ON esrc.snapshots
    FOR EACH ROW EXECUTE FUNCTION esrc.snapshots_catalog();
CREATE TRIGGER snapshots_no_truncate BEFORE TRUNCATE ON esrc.snapshots
    FOR EACH STATEMENT EXECUTE FUNCTION esrc.snapshots_catalog();
ALTER TABLE esrc.snapshots ENABLE ALWAYS TRIGGER snapshots_check;
ALTER TABLE esrc.snapshots ENABLE ALWAYS TRIGGER snapshots_track;
ALTER TABLE esrc.snapshots ENABLE ALWAYS TRIGGER snapshots_no_truncate;

REVOKE ALL ON esrc.snapshots FROM PUBLIC;
GRANT SELECT ON esrc.snapshots TO esrc_reader;

------------------------------------------------------------------------
-- Applying events: one row trigger on the event log
--
-- It applies only events written by esrc.append/append_batch (it checks
-- that the transaction holds the stream lock), so loading the log any
-- other way -- pg_restore in any order or with -j, COPY, logical
-- replication -- never runs reducers: the snapshot tables are restored or
-- replicated as they are, or rebuilt.  And it is not "ENABLE ALWAYS":
-- with session_replication_role = replica it does not fire at all (see
-- docs/snapshots.md, "Backup, restore and replication").
------------------------------------------------------------------------
CREATE FUNCTION esrc.apply_snapshots() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_apply_snapshots';
COMMENT ON FUNCTION esrc.apply_snapshots() IS
    'Trigger function of esrc.events: applies a new event to every snapshot of its category, in the appending transaction.';

CREATE TRIGGER events_apply_snapshots AFTER INSERT ON esrc.events
    FOR EACH ROW EXECUTE FUNCTION esrc.apply_snapshots();
COMMENT ON TRIGGER events_apply_snapshots ON esrc.events IS
    'Keeps the snapshots of the event''s category current, in the same transaction as the append.';

-- DROP TABLE of a snapshot table (or a DROP ... CASCADE reaching it)
-- removes its definition too.
CREATE FUNCTION esrc.snapshots_sql_drop() RETURNS event_trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_snapshots_sql_drop';
COMMENT ON FUNCTION esrc.snapshots_sql_drop() IS
    'Event trigger function: deletes the definitions of dropped snapshot tables from esrc.snapshots.';

CREATE EVENT TRIGGER esrc_snapshots_sql_drop ON sql_drop
    EXECUTE FUNCTION esrc.snapshots_sql_drop();
COMMENT ON EVENT TRIGGER esrc_snapshots_sql_drop IS
    'Removes the definition of a snapshot whose table was dropped.';

------------------------------------------------------------------------
-- Reducers
------------------------------------------------------------------------
CREATE FUNCTION esrc.merge(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'esrc_merge';
COMMENT ON FUNCTION esrc.merge(jsonb, esrc.event) IS
    'Built-in reducer: state || event.data.';

------------------------------------------------------------------------
-- Managing snapshots
--
-- Not SECURITY DEFINER and no pinned search_path: snapshot names are
-- resolved like table names, in the caller's search_path.  The C code
-- qualifies everything it runs and raises privileges only to write
-- esrc.snapshots.
------------------------------------------------------------------------
CREATE FUNCTION esrc.create_snapshot(
    snapshot text,
    category text,
    reducer regprocedure,
    initial_state jsonb DEFAULT '{}')
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_create_snapshot';
COMMENT ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb) IS
    'Create a snapshot table kept current by a reducer over the events of one category, fill it from the stored events and return the number of events applied.';

CREATE FUNCTION esrc.rebuild_snapshot(snapshot text) RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_rebuild_snapshot';
COMMENT ON FUNCTION esrc.rebuild_snapshot(text) IS
    'Recompute a snapshot table from the event log and return the number of events applied; blocks the snapshot''s writers (not its readers) until the transaction ends.';

CREATE FUNCTION esrc.drop_snapshot(snapshot text) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_drop_snapshot';
COMMENT ON FUNCTION esrc.drop_snapshot(text) IS
    'Drop a snapshot: its definition and its table.';

------------------------------------------------------------------------
-- Reading snapshots
------------------------------------------------------------------------
CREATE FUNCTION esrc.load(
    snapshot text,
    stream text,
    OUT state jsonb,
    OUT version bigint)
RETURNS record
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_load';
COMMENT ON FUNCTION esrc.load(text, text) IS
    'The current state and version of a stream in a snapshot; the initial state and version -1 for a stream with no events.  Call it before deciding a command, then append with expected_version = version.';

CREATE FUNCTION esrc.snapshot_at(
    snapshot text,
    stream text,
    version bigint)
RETURNS jsonb
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_snapshot_at';
COMMENT ON FUNCTION esrc.snapshot_at(text, text, bigint) IS
    'The state of a stream as of a version, computed by replaying its events through the snapshot''s reducer; an error for a version beyond the stream''s end.';

------------------------------------------------------------------------
-- Privileges on functions
--
-- create/rebuild/drop stay superuser-only unless granted: a snapshot's
-- reducer runs inside every append to its category, so whoever creates
-- one can make those appends fail.  rebuild and drop also require
-- ownership of the snapshot table.
------------------------------------------------------------------------
REVOKE ALL ON FUNCTION esrc.snapshots_catalog(),
                       esrc.apply_snapshots(),
                       esrc.snapshots_sql_drop(),
                       esrc.merge(jsonb, esrc.event),
                       esrc.create_snapshot(text, text, regprocedure, jsonb),
                       esrc.rebuild_snapshot(text),
                       esrc.drop_snapshot(text),
                       esrc.load(text, text),
                       esrc.snapshot_at(text, text, bigint)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.merge(jsonb, esrc.event),
                          esrc.load(text, text),
                          esrc.snapshot_at(text, text, bigint)
    TO esrc_reader;

-- from src/sql/20_forwarder.sql
-- Part of the esrc install script (see Makefile): forwarding events to
-- Kafka (src/forwarder.c, src/kafka.c, docs/forwarder.md).

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
    OUT state_since timestamptz)
RETURNS record
    LANGUAGE c STRICT VOLATILE PARALLEL RESTRICTED
    AS 'MODULE_PATHNAME', 'esrc_forwarder_worker_status';
COMMENT ON FUNCTION esrc.forwarder_worker_status() IS
    'What the Kafka forwarder worker publishes in shared memory; use the view esrc.forwarder_status.';

CREATE VIEW esrc.forwarder_status AS
    SELECT w.state,
           w.detail,
           w.database,
           w.brokers,
           w.delivery,
           w.paused,
           p.last_position,
           (SELECT count(*)
              FROM esrc.events e
             WHERE e.position > p.last_position
               AND e.position <= h.safe_position
               AND NOT EXISTS (SELECT 1 FROM esrc.forwarder_skips s
                               WHERE s.position = e.position)) AS events_pending,
           (SELECT greatest(0, extract(epoch FROM pg_catalog.clock_timestamp() - e.recorded_at))::double precision
              FROM esrc.events e
             WHERE e.position > p.last_position
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
           w.state_since
      FROM esrc.forwarder_worker_status() w,
           LATERAL (SELECT coalesce(w.last_position,
                                    (SELECT fs.position FROM esrc.forwarder_state fs))
                           AS last_position) p,
           LATERAL (SELECT esrc.safe_position() AS safe_position) h;
COMMENT ON VIEW esrc.forwarder_status IS
    'One row: the Kafka forwarder''s state, configuration (never esrc.kafka_properties), progress, events pending, lag in seconds of the oldest pending event, and its last error.';
COMMENT ON COLUMN esrc.forwarder_status.state IS
    'stopped, starting, idle (no brokers or no extension), connecting, running, paused, disconnected (Kafka unreachable, retrying), error (refused configuration or fatal producer error, retrying), blocked (a poison record, see blocked_position), or inactive (this database is not esrc.database).';
COMMENT ON COLUMN esrc.forwarder_status.last_position IS
    'Last forwarded position: the worker''s own when it serves this database, else esrc.forwarder_state.position.';
COMMENT ON COLUMN esrc.forwarder_status.events_pending IS
    'Committed events after last_position up to esrc.safe_position(), not counting skipped ones.';
COMMENT ON COLUMN esrc.forwarder_status.lag_seconds IS
    'Seconds since the oldest pending event was recorded; null when nothing is pending.';
COMMENT ON COLUMN esrc.forwarder_status.delivered_total IS
    'Records Kafka acknowledged since the server started.';
COMMENT ON COLUMN esrc.forwarder_status.blocked_position IS
    'Position of the event Kafka refuses (state blocked); see esrc.forwarder_skip().';
GRANT SELECT ON esrc.forwarder_status TO esrc_reader;

CREATE FUNCTION esrc.forwarder_pause() RETURNS void
    LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_forwarder_pause';
COMMENT ON FUNCTION esrc.forwarder_pause() IS
    'Stop forwarding after the batch in hand, until esrc.forwarder_resume() or a server restart; appends are not affected.';

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
