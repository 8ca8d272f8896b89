-- esrc 0.2.0 install script, built from src/sql/*.sql by make.
\echo Use "CREATE EXTENSION esrc" to load this file. \quit

-- from src/sql/00_core.sql
-- Part of the esrc install script (see Makefile): the event log, appends, reads.

------------------------------------------------------------------------
-- Roles
--
-- Roles are cluster-wide, so another database may have created them
-- already; DROP EXTENSION leaves them in place.  esrc_reader, esrc_writer,
-- esrc_subscriber (subscriptions, 30_subscription.sql) and esrc_admin (the
-- log's life cycle, 50_lifecycle.sql) are created here, all four: an
-- existing one is adopted only if it has no rights esrc would not have
-- given it: no SUPERUSER, CREATEDB, CREATEROLE, REPLICATION, BYPASSRLS or
-- LOGIN, and no membership in another role (esrc_writer may be a member of
-- esrc_reader).  Whoever is granted an esrc role would gain those rights
-- too, so CREATE EXTENSION refuses such a role (42710).  Privileges on
-- objects (in this or other databases) are not checked.
------------------------------------------------------------------------
DO $roles$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT a.rolname,
               pg_catalog.array_remove(ARRAY[
                   CASE WHEN a.rolsuper THEN 'SUPERUSER' END,
                   CASE WHEN a.rolcreatedb THEN 'CREATEDB' END,
                   CASE WHEN a.rolcreaterole THEN 'CREATEROLE' END,
                   CASE WHEN a.rolreplication THEN 'REPLICATION' END,
                   CASE WHEN a.rolbypassrls THEN 'BYPASSRLS' END,
                   CASE WHEN a.rolcanlogin THEN 'LOGIN' END], NULL)
               OPERATOR(pg_catalog.||)
               ARRAY(SELECT 'membership in role ' OPERATOR(pg_catalog.||)
                            pg_catalog.quote_ident(g.rolname)
                     FROM pg_catalog.pg_auth_members m
                     JOIN pg_catalog.pg_roles g ON g.oid OPERATOR(pg_catalog.=) m.roleid
                     WHERE m.member OPERATOR(pg_catalog.=) a.oid
                       AND NOT (a.rolname OPERATOR(pg_catalog.=) 'esrc_writer'
                                AND g.rolname OPERATOR(pg_catalog.=) 'esrc_reader')
                     ORDER BY g.rolname) AS extra
        FROM pg_catalog.pg_roles a
        WHERE a.rolname IN ('esrc_reader', 'esrc_writer', 'esrc_subscriber', 'esrc_admin')
        ORDER BY a.rolname
    LOOP
        IF pg_catalog.cardinality(r.extra) OPERATOR(pg_catalog.>) 0 THEN
            RAISE EXCEPTION 'role "%" already exists with rights esrc does not give it', r.rolname
                USING ERRCODE = 'duplicate_object',
                      DETAIL = pg_catalog.format('It has %s; every role granted %s would gain them.',
                                                 pg_catalog.array_to_string(r.extra, ', '), r.rolname),
                      HINT = pg_catalog.format('Remove them (ALTER ROLE %1$s NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS NOLOGIN, REVOKE ... FROM %1$s) or drop the role, then create the extension again.',
                                               r.rolname);
        END IF;
    END LOOP;
    FOR r IN SELECT n FROM pg_catalog.unnest(ARRAY['esrc_reader', 'esrc_writer', 'esrc_subscriber', 'esrc_admin']) n
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) r.n) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r.n);
        END IF;
    END LOOP;
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

-- security_invoker: the view reads esrc.events with the caller's rights,
-- row-level security included, not with its owner's.
CREATE VIEW esrc.streams WITH (security_invoker = true) AS
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
-- triggers (src/snapshot/).  docs/snapshots.md is the reference.

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
    OUT state_since timestamptz)
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
           w.state_since
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
    'stopped, starting, idle (no brokers), connecting, running, paused, disconnected (Kafka unreachable, retrying), error (refused configuration or fatal producer error, retrying), blocked (a poison record, see blocked_position), no extension (esrc is not installed in that database), no database (a listed database that does not exist), or inactive (this database is not forwarded).';
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

-- from src/sql/30_subscription.sql
-- Part of the esrc install script (see Makefile): subscriptions for SQL
-- consumers (src/subscription/,
-- docs/subscriptions.md).

------------------------------------------------------------------------
-- The role that may create subscriptions, esrc_subscriber, is created (or
-- adopted) with the others in 00_core.sql.
------------------------------------------------------------------------

------------------------------------------------------------------------
-- The catalog.  Written only by the functions below (as the tables'
-- owner); readable by esrc_reader.
------------------------------------------------------------------------
CREATE SEQUENCE esrc.subscription_id_seq AS bigint MINVALUE 1 NO CYCLE;

CREATE TABLE esrc.subscriptions (
    id          bigint      NOT NULL DEFAULT pg_catalog.nextval('esrc.subscription_id_seq'::pg_catalog.regclass),
    name        text        NOT NULL,
    owner       regrole     NOT NULL,
    categories  text[],
    types       text[],
    metadata    jsonb,
    partitions  integer     NOT NULL CHECK (partitions BETWEEN 1 AND 1024),
    consumers   regrole[]   NOT NULL DEFAULT '{}',
    projection  boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT subscriptions_pkey PRIMARY KEY (id),
    CONSTRAINT subscriptions_name_key UNIQUE (name)
);
ALTER SEQUENCE esrc.subscription_id_seq OWNED BY esrc.subscriptions.id;
COMMENT ON TABLE esrc.subscriptions IS
    'Subscriptions of SQL consumers (esrc.create_subscription): what they follow, their partitions, who may consume them.';
COMMENT ON COLUMN esrc.subscriptions.categories IS 'Categories followed; null = all.';
COMMENT ON COLUMN esrc.subscriptions.types IS 'Event types delivered; null = all.  Other events still advance the checkpoints.';
COMMENT ON COLUMN esrc.subscriptions.metadata IS 'Only events whose metadata @> this are delivered; null = no filter.';
COMMENT ON COLUMN esrc.subscriptions.consumers IS 'Roles besides the owner that may poll and ack (esrc.grant_subscription).';
COMMENT ON COLUMN esrc.subscriptions.projection IS 'The subscription of a projection (named projection:<name>), polled by its workers only.';

CREATE TABLE esrc.subscription_checkpoints (
    subscription_id bigint  NOT NULL REFERENCES esrc.subscriptions (id) ON DELETE CASCADE,
    partition   integer     NOT NULL CHECK (partition >= 0),
    checkpoint  bigint      NOT NULL CHECK (checkpoint >= 0),
    acked_at    timestamptz,
    CONSTRAINT subscription_checkpoints_pkey PRIMARY KEY (subscription_id, partition)
);
COMMENT ON TABLE esrc.subscription_checkpoints IS
    'Per subscription and partition, the last processed position: polls return the events after it.  Moved by esrc.ack in the consumer''s transaction.';

SELECT pg_catalog.pg_extension_config_dump('esrc.subscriptions', '');
SELECT pg_catalog.pg_extension_config_dump('esrc.subscription_checkpoints', '');
SELECT pg_catalog.pg_extension_config_dump('esrc.subscription_id_seq', '');

REVOKE ALL ON esrc.subscriptions, esrc.subscription_checkpoints FROM PUBLIC;
REVOKE ALL ON SEQUENCE esrc.subscription_id_seq FROM PUBLIC;
GRANT SELECT ON esrc.subscriptions, esrc.subscription_checkpoints TO esrc_reader;

------------------------------------------------------------------------
-- Functions.  Not SECURITY DEFINER: the C code checks the caller's rights
-- (esrc_subscriber to create; owner to drop, reset and grant; esrc_reader
-- and owner or grant to poll and ack) and writes the catalog as its
-- owner, security-restricted.
------------------------------------------------------------------------
CREATE FUNCTION esrc.create_subscription(
    name text,
    categories text[] DEFAULT NULL,
    partitions integer DEFAULT 1,
    start text DEFAULT 'beginning',
    types text[] DEFAULT NULL,
    metadata jsonb DEFAULT NULL)
RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_create_subscription';
COMMENT ON FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb) IS
    'Create a subscription of some categories (null = all) with a number of partitions, starting at the beginning, the end or after a position; optional type and metadata filters.';

CREATE FUNCTION esrc.drop_subscription(name text) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_drop_subscription';
COMMENT ON FUNCTION esrc.drop_subscription(text) IS
    'Drop a subscription and its checkpoints.';

CREATE FUNCTION esrc.reset_subscription(name text, "position" bigint) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_reset_subscription';
COMMENT ON FUNCTION esrc.reset_subscription(text, bigint) IS
    'Set every checkpoint of a subscription to a position: the events after it are delivered (again).';

CREATE FUNCTION esrc.grant_subscription(name text, role regrole) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_grant_subscription';
COMMENT ON FUNCTION esrc.grant_subscription(text, regrole) IS
    'Let a role (and its members) poll and ack a subscription.';

CREATE FUNCTION esrc.revoke_subscription(name text, role regrole) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_revoke_subscription';
COMMENT ON FUNCTION esrc.revoke_subscription(text, regrole) IS
    'Undo esrc.grant_subscription.';

CREATE FUNCTION esrc.poll(
    subscription text,
    member text,
    max_count integer DEFAULT 100,
    wait interval DEFAULT '0',
    ack bigint DEFAULT NULL)
RETURNS SETOF esrc.event
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 100
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_poll';
COMMENT ON FUNCTION esrc.poll(text, text, integer, interval, bigint) IS
    'Events after the checkpoints of the partitions this member holds (taking and renewing their leases), up to the commit-safe horizon, oldest first; with none, waits up to wait for a commit that brings some.  With ack (not null), first acknowledges up to that position as esrc.ack would, in the same transaction, and then does not wait.';

CREATE FUNCTION esrc.ack(
    subscription text,
    member text,
    "position" bigint DEFAULT NULL)
RETURNS integer
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_ack';
COMMENT ON FUNCTION esrc.ack(text, text, bigint) IS
    'Move the checkpoints of this member''s partitions to position (null = all its last poll covered) in the caller''s transaction; returns how many moved.';

CREATE FUNCTION esrc.stream_partition(stream text, partitions integer) RETURNS integer
    LANGUAGE c STRICT IMMUTABLE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'esrc_stream_partition';
COMMENT ON FUNCTION esrc.stream_partition(text, integer) IS
    'The partition of a stream among that many: (murmur2(stream) & 0x7fffffff) % partitions, as Kafka''s default partitioner and the forwarder place the stream''s records.';

CREATE FUNCTION esrc.subscription_status_internal(
    OUT subscription text,
    OUT partition integer,
    OUT member text,
    OUT lease_expires_at timestamptz,
    OUT checkpoint bigint,
    OUT events_behind bigint,
    OUT seconds_behind double precision)
RETURNS SETOF record
    LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_subscription_status';
COMMENT ON FUNCTION esrc.subscription_status_internal() IS
    'Rows of esrc.subscription_status.';

CREATE VIEW esrc.subscription_status AS
    SELECT subscription, partition, member, lease_expires_at, checkpoint,
           events_behind, seconds_behind
    FROM esrc.subscription_status_internal();
COMMENT ON VIEW esrc.subscription_status IS
    'Per subscription and partition: the member holding it and until when, its checkpoint, and the events (and seconds, the age of the oldest) not yet acknowledged.  Scans those events.';

REVOKE ALL ON FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb),
                       esrc.drop_subscription(text),
                       esrc.reset_subscription(text, bigint),
                       esrc.grant_subscription(text, regrole),
                       esrc.revoke_subscription(text, regrole),
                       esrc.poll(text, text, integer, interval, bigint),
                       esrc.ack(text, text, bigint),
                       esrc.stream_partition(text, integer),
                       esrc.subscription_status_internal()
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb),
                          esrc.drop_subscription(text),
                          esrc.reset_subscription(text, bigint),
                          esrc.grant_subscription(text, regrole),
                          esrc.revoke_subscription(text, regrole)
    TO esrc_subscriber;
GRANT EXECUTE ON FUNCTION esrc.poll(text, text, integer, interval, bigint),
                          esrc.ack(text, text, bigint),
                          esrc.stream_partition(text, integer),
                          esrc.subscription_status_internal()
    TO esrc_reader;
GRANT SELECT ON esrc.subscription_status TO esrc_reader;
GRANT USAGE ON SCHEMA esrc TO esrc_subscriber;

-- from src/sql/40_projection.sql
-- Part of the esrc install script (see Makefile): projections, handlers
-- that background workers run over the log exactly once
-- (src/projection/,
-- docs/projections.md).

------------------------------------------------------------------------
-- The catalog.  Written only by the functions below and by the workers
-- (as the tables' owner); readable by esrc_reader.
------------------------------------------------------------------------
CREATE SEQUENCE esrc.projection_id_seq AS bigint MINVALUE 1 NO CYCLE;

CREATE TABLE esrc.projections (
    id              bigint      NOT NULL DEFAULT pg_catalog.nextval('esrc.projection_id_seq'::pg_catalog.regclass),
    name            text        NOT NULL,
    owner           regrole     NOT NULL,
    handler         text        NOT NULL,
    reset_function  text,
    subscription_id bigint      NOT NULL REFERENCES esrc.subscriptions (id),
    batch_size      integer     NOT NULL CHECK (batch_size BETWEEN 1 AND 10000),
    start_position  bigint      NOT NULL CHECK (start_position >= 0),
    paused          boolean     NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT projections_pkey PRIMARY KEY (id),
    CONSTRAINT projections_name_key UNIQUE (name)
);
ALTER SEQUENCE esrc.projection_id_seq OWNED BY esrc.projections.id;
COMMENT ON TABLE esrc.projections IS
    'Projections (esrc.create_projection): a handler that background workers run over the events of some categories, exactly once, through the subscription named projection:<name>.';
COMMENT ON COLUMN esrc.projections.handler IS 'Identity of the handler (event esrc.event) RETURNS void, e.g. app.on_event(esrc.event).';
COMMENT ON COLUMN esrc.projections.reset_function IS 'Identity of the function () RETURNS void that esrc.reset_projection calls first; null = none.';
COMMENT ON COLUMN esrc.projections.subscription_id IS 'The projection''s subscription (esrc.subscriptions), which holds its checkpoints.';
COMMENT ON COLUMN esrc.projections.batch_size IS 'Most events a worker applies in one transaction.';
COMMENT ON COLUMN esrc.projections.start_position IS 'The checkpoint it started from, and goes back to on esrc.reset_projection (0 = the beginning).';
COMMENT ON COLUMN esrc.projections.paused IS 'Set by esrc.projection_pause: workers take no batch of it.';

CREATE TABLE esrc.projection_partitions (
    projection_id   bigint      NOT NULL REFERENCES esrc.projections (id) ON DELETE CASCADE,
    partition       integer     NOT NULL CHECK (partition >= 0),
    applied         bigint      NOT NULL DEFAULT 0,
    attempts        integer     NOT NULL DEFAULT 0,
    failed_position bigint,
    blocked         boolean     NOT NULL DEFAULT false,
    last_error      text,
    last_error_sqlstate text,
    last_error_at   timestamptz,
    retry_at        timestamptz,
    CONSTRAINT projection_partitions_pkey PRIMARY KEY (projection_id, partition)
);
COMMENT ON TABLE esrc.projection_partitions IS
    'Per projection and partition: events applied, and the event that failed (attempts, last error, next retry, blocked).  Written by the workers in the transaction of each batch.';
COMMENT ON COLUMN esrc.projection_partitions.failed_position IS 'Position of the event whose handler call failed; null when none fails.';
COMMENT ON COLUMN esrc.projection_partitions.blocked IS 'The event failed esrc.projection_max_attempts times: no retry until esrc.projection_skip, esrc.projection_resume or a change of the handler.';

CREATE TABLE esrc.projection_skips (
    projection      text        NOT NULL,
    partition       integer     NOT NULL,
    "position"      bigint      NOT NULL,
    stream          text        NOT NULL,
    version         bigint      NOT NULL,
    type            text        NOT NULL,
    event_id        uuid        NOT NULL,
    reason          text        NOT NULL,
    last_error      text,
    skipped_by      name        NOT NULL DEFAULT CURRENT_USER,
    skipped_at      timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE esrc.projection_skips IS
    'Events that esrc.projection_skip moved a projection past without running its handler, with the reason.  Append-only.';

CREATE FUNCTION esrc.projection_skips_immutable() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_projection_skips_immutable';
COMMENT ON FUNCTION esrc.projection_skips_immutable() IS
    'Trigger function of esrc.projection_skips: refuses UPDATE, DELETE and TRUNCATE.';
CREATE TRIGGER projection_skips_immutable BEFORE UPDATE OR DELETE ON esrc.projection_skips
    FOR EACH ROW EXECUTE FUNCTION esrc.projection_skips_immutable();
CREATE TRIGGER projection_skips_no_truncate BEFORE TRUNCATE ON esrc.projection_skips
    FOR EACH STATEMENT EXECUTE FUNCTION esrc.projection_skips_immutable();
ALTER TABLE esrc.projection_skips ENABLE ALWAYS TRIGGER projection_skips_immutable;
ALTER TABLE esrc.projection_skips ENABLE ALWAYS TRIGGER projection_skips_no_truncate;

SELECT pg_catalog.pg_extension_config_dump('esrc.projections', '');
SELECT pg_catalog.pg_extension_config_dump('esrc.projection_partitions', '');
SELECT pg_catalog.pg_extension_config_dump('esrc.projection_skips', '');
SELECT pg_catalog.pg_extension_config_dump('esrc.projection_id_seq', '');

REVOKE ALL ON esrc.projections, esrc.projection_partitions, esrc.projection_skips FROM PUBLIC;
REVOKE ALL ON SEQUENCE esrc.projection_id_seq FROM PUBLIC;
GRANT SELECT ON esrc.projections, esrc.projection_partitions, esrc.projection_skips TO esrc_reader;

------------------------------------------------------------------------
-- Functions.  Not SECURITY DEFINER: the C code checks the caller's rights
-- (esrc_subscriber and esrc_reader to create; owner to drop, pause,
-- resume, skip and reset) and writes the catalog as its owner,
-- security-restricted.
------------------------------------------------------------------------
CREATE FUNCTION esrc.create_projection(
    name text,
    handler regprocedure,
    categories text[] DEFAULT NULL,
    partitions integer DEFAULT 1,
    batch_size integer DEFAULT 100,
    start text DEFAULT 'beginning',
    reset_function regprocedure DEFAULT NULL)
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_create_projection';
COMMENT ON FUNCTION esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure) IS
    'Create a projection: background workers call handler (event esrc.event) for every committed event of the categories (null = all) after start, per-stream in order, each batch and its checkpoint in one transaction; returns its id.';

CREATE FUNCTION esrc.drop_projection(name text) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_drop_projection';
COMMENT ON FUNCTION esrc.drop_projection(text) IS
    'Drop a projection, its subscription and its checkpoints (not what its handler wrote).';

CREATE FUNCTION esrc.projection_pause(name text) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_projection_pause';
COMMENT ON FUNCTION esrc.projection_pause(text) IS
    'Stop the workers from taking batches of a projection (a batch in flight finishes).';

CREATE FUNCTION esrc.projection_resume(name text) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_projection_resume';
COMMENT ON FUNCTION esrc.projection_resume(text) IS
    'Undo esrc.projection_pause, and retry at once every partition blocked at a failing event.';

CREATE FUNCTION esrc.projection_skip(name text, "position" bigint, reason text) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_projection_skip';
COMMENT ON FUNCTION esrc.projection_skip(text, bigint, text) IS
    'Move a partition that is stopped at the failing event at position past it without running the handler; recorded with the reason in esrc.projection_skips.';

CREATE FUNCTION esrc.reset_projection(name text) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_reset_projection';
COMMENT ON FUNCTION esrc.reset_projection(text) IS
    'Rebuild a projection in place, in the caller''s transaction: call its reset function, put its checkpoints back to its start and clear its errors and counters.';

CREATE FUNCTION esrc.projections_guard() RETURNS event_trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_projections_guard';
COMMENT ON FUNCTION esrc.projections_guard() IS
    'Event trigger function: refuses to drop or rename a function that a projection calls.';

CREATE EVENT TRIGGER esrc_projections_guard_drop ON sql_drop
    EXECUTE FUNCTION esrc.projections_guard();
COMMENT ON EVENT TRIGGER esrc_projections_guard_drop IS
    'Refuses DROP of a function (or of its schema) that a projection calls.';
CREATE EVENT TRIGGER esrc_projections_guard_alter ON ddl_command_end
    WHEN TAG IN ('ALTER FUNCTION', 'ALTER PROCEDURE', 'ALTER ROUTINE', 'ALTER SCHEMA', 'CREATE FUNCTION')
    EXECUTE FUNCTION esrc.projections_guard();
COMMENT ON EVENT TRIGGER esrc_projections_guard_alter IS
    'Refuses renaming a function (or its schema) that a projection calls; after CREATE OR REPLACE FUNCTION, wakes the workers so that blocked partitions try the (maybe fixed) handler again.';

CREATE VIEW esrc.projection_status AS
    SELECT s.projection, s.partition,
           CASE WHEN p.paused THEN 'paused'
                WHEN pp.blocked THEN 'blocked'
                WHEN pp.failed_position IS NOT NULL THEN 'retrying'
                WHEN s.worker IS NULL THEN 'waiting'
                ELSE 'running' END AS state,
           s.worker, s.checkpoint, s.events_behind, s.seconds_behind,
           s.events_behind OPERATOR(pg_catalog.=) 0 AS caught_up,
           pp.applied, pp.attempts, pp.last_error, pp.last_error_sqlstate,
           pp.last_error_at, pp.failed_position AS blocked_position, pp.retry_at
    FROM (SELECT pg_catalog.substr(subscription, 12) AS projection, partition,
                 member AS worker, checkpoint, events_behind, seconds_behind
          FROM esrc.subscription_status_internal()
          WHERE subscription OPERATOR(pg_catalog.^@) 'projection:') s
    JOIN esrc.projections p ON p.name OPERATOR(pg_catalog.=) s.projection
    LEFT JOIN esrc.projection_partitions pp
           ON pp.projection_id OPERATOR(pg_catalog.=) p.id
          AND pp.partition OPERATOR(pg_catalog.=) s.partition
    ORDER BY s.projection, s.partition;
COMMENT ON VIEW esrc.projection_status IS
    'Per projection and partition: state (running, waiting, paused, retrying, blocked), the worker holding it, checkpoint, events and seconds behind, caught_up, events applied, the failing event and its last error.  Scans the events not yet applied.';

REVOKE ALL ON FUNCTION esrc.projection_skips_immutable(),
                       esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure),
                       esrc.drop_projection(text),
                       esrc.projection_pause(text),
                       esrc.projection_resume(text),
                       esrc.projection_skip(text, bigint, text),
                       esrc.reset_projection(text),
                       esrc.projections_guard()
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure),
                          esrc.drop_projection(text),
                          esrc.projection_pause(text),
                          esrc.projection_resume(text),
                          esrc.projection_skip(text, bigint, text),
                          esrc.reset_projection(text)
    TO esrc_subscriber;
GRANT SELECT ON esrc.projection_status TO esrc_reader;

-- from src/sql/50_lifecycle.sql
-- Part of the esrc install script (see Makefile): the life cycle of the
-- log -- erasing a stream's data, with an audit (src/lifecycle/erase.c,
-- docs/lifecycle.md).

------------------------------------------------------------------------
-- The role that may run the life-cycle functions, esrc_admin, is created
-- (or adopted) with the others in 00_core.sql.  Not granted to esrc_writer
-- or anyone else: grant it to the few who may erase.
------------------------------------------------------------------------

GRANT USAGE ON SCHEMA esrc TO esrc_admin;

------------------------------------------------------------------------
-- The audit of erasures.  Written only by esrc.erase_stream and
-- esrc.forget_subject (52_crypto.sql) (as the
-- table's owner); append-only for everyone, superusers included, by
-- ENABLE ALWAYS triggers; readable by esrc_admin.
------------------------------------------------------------------------
CREATE SEQUENCE esrc.erasure_id_seq AS bigint MINVALUE 1 NO CYCLE;

CREATE TABLE esrc.erasures (
    id                bigint      NOT NULL DEFAULT pg_catalog.nextval('esrc.erasure_id_seq'::pg_catalog.regclass),
    what              text        NOT NULL,
    stream            text,
    events            bigint      NOT NULL CHECK (events >= 0),
    session_user_name name        NOT NULL,
    current_user_name name        NOT NULL,
    erased_at         timestamptz NOT NULL DEFAULT pg_catalog.now(),
    reason            text        NOT NULL CHECK (reason <> ''),
    rules             jsonb,
    CONSTRAINT erasures_pkey PRIMARY KEY (id),
    CONSTRAINT erasures_what_check CHECK (what IN ('erase_stream', 'set_stream_rules', 'delete_stream', 'forget_subject', 'scavenge')),
    CONSTRAINT erasures_stream_check CHECK (stream IS NOT NULL OR what = 'scavenge')
);
ALTER SEQUENCE esrc.erasure_id_seq OWNED BY esrc.erasures.id;
-- Is this stream erased?  (a lookup by stream, docs/lifecycle.md)
CREATE INDEX erasures_stream_idx ON esrc.erasures (stream);
COMMENT ON TABLE esrc.erasures IS
    'Every use of the life-cycle functions (esrc.erase_stream, esrc.set_stream_rules, esrc.delete_stream, esrc.forget_subject, esrc.scavenge and its worker), recorded in its transaction, with who and why.  Append-only.';
COMMENT ON COLUMN esrc.erasures.what IS 'The function: erase_stream, set_stream_rules, delete_stream, forget_subject or scavenge.';
COMMENT ON COLUMN esrc.erasures.stream IS 'The stream erased, deleted or given rules, or the subject forgotten; null for a scavenge, which spans streams.';
COMMENT ON COLUMN esrc.erasures.events IS 'erase_stream: events redacted by this call (0: the stream was erased already); delete_stream: events the stream had, all hidden now (0: deleted permanently already); set_stream_rules: 0; forget_subject: keys destroyed (1, or 0: forgotten already); scavenge: events redacted by the slice.';
COMMENT ON COLUMN esrc.erasures.rules IS 'set_stream_rules and delete_stream: the stream''s rules after the call (null: none); scavenge: streams_visited, streams_redacted and pass_done of the slice; erase_stream and forget_subject: null.';
COMMENT ON COLUMN esrc.erasures.session_user_name IS 'session_user of the call.';
COMMENT ON COLUMN esrc.erasures.current_user_name IS 'current_user of the call.';
COMMENT ON COLUMN esrc.erasures.erased_at IS 'Start of the erasing transaction.';

CREATE FUNCTION esrc.erasures_immutable() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_erasures_immutable';
COMMENT ON FUNCTION esrc.erasures_immutable() IS
    'Trigger function of esrc.erasures: refuses UPDATE, DELETE and TRUNCATE.';
CREATE TRIGGER erasures_immutable BEFORE UPDATE OR DELETE ON esrc.erasures
    FOR EACH ROW EXECUTE FUNCTION esrc.erasures_immutable();
CREATE TRIGGER erasures_no_truncate BEFORE TRUNCATE ON esrc.erasures
    FOR EACH STATEMENT EXECUTE FUNCTION esrc.erasures_immutable();
ALTER TABLE esrc.erasures ENABLE ALWAYS TRIGGER erasures_immutable;
ALTER TABLE esrc.erasures ENABLE ALWAYS TRIGGER erasures_no_truncate;

SELECT pg_catalog.pg_extension_config_dump('esrc.erasures', '');
SELECT pg_catalog.pg_extension_config_dump('esrc.erasure_id_seq', '');

REVOKE ALL ON esrc.erasures FROM PUBLIC;
REVOKE ALL ON SEQUENCE esrc.erasure_id_seq FROM PUBLIC;
GRANT SELECT ON esrc.erasures TO esrc_admin;

------------------------------------------------------------------------
-- Erasing.  Not SECURITY DEFINER: the C code redacts the log itself (index
-- scans and the executor's row update, no SQL), and writes the snapshot
-- tables and esrc.erasures as their owners, security-restricted, with
-- search_path pinned; EXECUTE (esrc_admin) is the check.
------------------------------------------------------------------------
CREATE FUNCTION esrc.erase_stream(stream text, reason text) RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_erase_stream';
COMMENT ON FUNCTION esrc.erase_stream(text, text) IS
    'Redact every event of a stream in place (data becomes {"erased": true}, metadata null; position, version, type, id and recorded_at stay), delete its snapshot rows, record it in esrc.erasures; returns the number of events redacted.';

REVOKE ALL ON FUNCTION esrc.erasures_immutable(),
                       esrc.erase_stream(text, text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.erase_stream(text, text) TO esrc_admin;

------------------------------------------------------------------------
-- Stream rules (src/lifecycle/retention.c writes them, src/log/rules.c
-- applies them; docs/lifecycle.md): per stream, which events the read
-- functions hide -- versions below truncate_before, all but the
-- last max_count, those older than max_age -- and whether the stream is
-- deleted permanently (appends refused).  Written only by
-- esrc.set_stream_rules and esrc.delete_stream (as the table's owner);
-- readable by esrc_reader, so that readers can see why events are
-- hidden.  Every change of the table, however made, invalidates the
-- backends' caches of it (the statement trigger below).
------------------------------------------------------------------------
CREATE TABLE esrc.stream_rules (
    stream          text        NOT NULL,
    truncate_before bigint      CHECK (truncate_before >= 0),
    max_count       bigint      CHECK (max_count > 0),
    max_age         interval    CHECK (max_age > '0'::interval),
    hard_deleted    boolean     NOT NULL DEFAULT false,
    set_at          timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT stream_rules_pkey PRIMARY KEY (stream),
    CONSTRAINT stream_rules_hard_check CHECK (NOT hard_deleted OR truncate_before IS NOT NULL)
);
COMMENT ON TABLE esrc.stream_rules IS
    'Per stream, the events the read functions hide (docs/lifecycle.md).  The hidden events stay stored until esrc.scavenge redacts them.  Written by esrc.set_stream_rules and esrc.delete_stream.';
COMMENT ON COLUMN esrc.stream_rules.truncate_before IS 'Versions below it are hidden (null: no such rule).';
COMMENT ON COLUMN esrc.stream_rules.max_count IS 'All but the last max_count versions of the stream at read time are hidden (null: no such rule).';
COMMENT ON COLUMN esrc.stream_rules.max_age IS 'Every version up to the last one recorded before statement_timestamp() - max_age is hidden (null: no such rule).';
COMMENT ON COLUMN esrc.stream_rules.hard_deleted IS 'Deleted permanently by esrc.delete_stream(..., hard => true): every later append is refused (55000).';
COMMENT ON COLUMN esrc.stream_rules.set_at IS 'Start of the transaction that last changed the row.';

CREATE FUNCTION esrc.stream_rules_changed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_stream_rules_changed';
COMMENT ON FUNCTION esrc.stream_rules_changed() IS
    'Trigger function of esrc.stream_rules: makes every backend reload its cache of the rules when the change commits.';
CREATE TRIGGER stream_rules_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON esrc.stream_rules
    FOR EACH STATEMENT EXECUTE FUNCTION esrc.stream_rules_changed();
ALTER TABLE esrc.stream_rules ENABLE ALWAYS TRIGGER stream_rules_changed;

SELECT pg_catalog.pg_extension_config_dump('esrc.stream_rules', '');

REVOKE ALL ON esrc.stream_rules FROM PUBLIC;
GRANT SELECT ON esrc.stream_rules TO esrc_reader, esrc_admin;

CREATE FUNCTION esrc.set_stream_rules(
    stream text,
    truncate_before bigint DEFAULT NULL,
    max_count bigint DEFAULT NULL,
    max_age interval DEFAULT NULL,
    reason text DEFAULT NULL)
RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_set_stream_rules';
COMMENT ON FUNCTION esrc.set_stream_rules(text, bigint, bigint, interval, text) IS
    'Replace the rules of a stream (a null argument: no such rule; all null: no rules) and record the change in esrc.erasures; reason is required.';

CREATE FUNCTION esrc.delete_stream(stream text, reason text, hard boolean DEFAULT false)
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_delete_stream';
COMMENT ON FUNCTION esrc.delete_stream(text, text, boolean) IS
    'Hide every event of a stream (truncate_before = version + 1); hard: also refuse every later append, for good.  Records the call in esrc.erasures; returns the number of events hidden.';

REVOKE ALL ON FUNCTION esrc.stream_rules_changed(),
                       esrc.set_stream_rules(text, bigint, bigint, interval, text),
                       esrc.delete_stream(text, text, boolean)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.set_stream_rules(text, bigint, bigint, interval, text),
                          esrc.delete_stream(text, text, boolean)
    TO esrc_admin;

-- Scrubbing the bytes of erased events: esrc.scrub zeroes the free space
-- of the pages of esrc.events and of its TOAST table, where VACUUM leaves
-- the bytes of the row versions it removed (src/lifecycle/scrub.c,
-- docs/lifecycle.md).  Resumable: the position of the current pass is
-- kept in esrc.scrub_progress, written by esrc.scrub alone (as the
-- table's owner); EXECUTE (esrc_admin) is the check.
------------------------------------------------------------------------
CREATE TABLE esrc.scrub_progress (
    relation        text        NOT NULL,
    next_block      bigint      NOT NULL CHECK (next_block >= 0),
    end_block       bigint      NOT NULL CHECK (end_block >= 0),
    pass_started_at timestamptz NOT NULL,
    CONSTRAINT scrub_progress_pkey PRIMARY KEY (relation),
    CONSTRAINT scrub_progress_relation_check CHECK (relation IN ('events', 'toast'))
);
COMMENT ON TABLE esrc.scrub_progress IS
    'The position of esrc.scrub''s current pass: one row for esrc.events, one for its TOAST table.  Written by esrc.scrub only.';
COMMENT ON COLUMN esrc.scrub_progress.next_block IS 'The first block the pass has not scanned yet.';
COMMENT ON COLUMN esrc.scrub_progress.end_block IS 'The relation''s size in blocks when the pass started; the pass ends there.';
COMMENT ON COLUMN esrc.scrub_progress.pass_started_at IS 'Start of the transaction that started the pass; only a pass started after the VACUUM that removed the erased row versions scrubs them.';
REVOKE ALL ON esrc.scrub_progress FROM PUBLIC;
GRANT SELECT ON esrc.scrub_progress TO esrc_admin;

CREATE FUNCTION esrc.scrub(max_pages integer DEFAULT 10000, restart boolean DEFAULT false)
    RETURNS TABLE (relation regclass, pages_scanned bigint, pages_scrubbed bigint,
                   bytes_zeroed bigint, pass_started_at timestamptz, done boolean)
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_scrub';
COMMENT ON FUNCTION esrc.scrub(integer, boolean) IS
    'Zero the free space of at most max_pages pages of esrc.events and its TOAST table (the bytes of row versions VACUUM removed), WAL-logged, one page at a time; resumes the current pass (or starts one: restart, or none in progress); one row per relation, done when the pass reached its end.';
REVOKE ALL ON FUNCTION esrc.scrub(integer, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.scrub(integer, boolean) TO esrc_admin;

------------------------------------------------------------------------
-- The scavenger (src/lifecycle/scavenge.c, docs/lifecycle.md): esrc.scavenge
-- redacts in place, as esrc.erase_stream does, the events that stream
-- rules hide, a bounded slice per call (pg_cron), or every
-- esrc.scavenge_interval in a background worker.  Its position and totals
-- are in esrc.scavenge_progress (one row), and per stream the version
-- below which every event is redacted in esrc.scavenge_streams; both are
-- written by the scavenger alone (as the tables' owner) and not dumped (a
-- restored database starts a new pass).  EXECUTE (esrc_admin) is the check.
------------------------------------------------------------------------
CREATE TABLE esrc.scavenge_progress (
    id                     integer     NOT NULL DEFAULT 1,
    resume_after           text,
    pass_started_at        timestamptz,
    passes_completed       bigint      NOT NULL DEFAULT 0,
    streams_visited        bigint      NOT NULL DEFAULT 0,
    events_redacted        bigint      NOT NULL DEFAULT 0,
    last_run_at            timestamptz,
    last_run_events        bigint,
    last_pass_completed_at timestamptz,
    CONSTRAINT scavenge_progress_pkey PRIMARY KEY (id),
    CONSTRAINT scavenge_progress_id_check CHECK (id = 1)
);
COMMENT ON TABLE esrc.scavenge_progress IS
    'The position and totals of esrc.scavenge: one row.  Written by the scavenger only.';
COMMENT ON COLUMN esrc.scavenge_progress.resume_after IS 'The last stream of esrc.stream_rules the current pass finished (null: the pass starts at the first).';
COMMENT ON COLUMN esrc.scavenge_progress.pass_started_at IS 'Start of the transaction of the current pass''s first slice (null: no pass in progress).';
COMMENT ON COLUMN esrc.scavenge_progress.passes_completed IS 'Passes that reached the end of esrc.stream_rules.';
COMMENT ON COLUMN esrc.scavenge_progress.streams_visited IS 'Streams with rules looked at, in all slices.';
COMMENT ON COLUMN esrc.scavenge_progress.events_redacted IS 'Events redacted, in all slices.';
COMMENT ON COLUMN esrc.scavenge_progress.last_run_at IS 'Start of the transaction of the last slice.';
COMMENT ON COLUMN esrc.scavenge_progress.last_run_events IS 'Events the last slice redacted.';
COMMENT ON COLUMN esrc.scavenge_progress.last_pass_completed_at IS 'Start of the transaction of the slice that completed the last pass.';

CREATE TABLE esrc.scavenge_streams (
    stream         text        NOT NULL,
    redacted_below bigint      NOT NULL CHECK (redacted_below >= 0),
    scavenged_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT scavenge_streams_pkey PRIMARY KEY (stream)
);
COMMENT ON TABLE esrc.scavenge_streams IS
    'Per stream the scavenger has redacted events of: every version below redacted_below is redacted, so the next pass starts there.  Written by the scavenger only.';
COMMENT ON COLUMN esrc.scavenge_streams.redacted_below IS 'Every version of the stream below it is redacted.';
COMMENT ON COLUMN esrc.scavenge_streams.scavenged_at IS 'Start of the transaction that last moved redacted_below.';

REVOKE ALL ON esrc.scavenge_progress, esrc.scavenge_streams FROM PUBLIC;
GRANT SELECT ON esrc.scavenge_progress, esrc.scavenge_streams TO esrc_admin;

CREATE FUNCTION esrc.scavenge(max_events integer DEFAULT 10000)
    RETURNS TABLE (streams_visited bigint, streams_redacted bigint, events_redacted bigint,
                   done boolean, pass_started_at timestamptz, resume_after text)
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_scavenge';
COMMENT ON FUNCTION esrc.scavenge(integer) IS
    'Redact in place (as esrc.erase_stream) at most max_events events that stream rules hide, looking at at most max_events streams; resumes the current pass over esrc.stream_rules; records the call in esrc.erasures if it redacted anything.  One row: what it did, done when the pass reached its end.';
REVOKE ALL ON FUNCTION esrc.scavenge(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.scavenge(integer) TO esrc_admin;

-- from src/sql/52_crypto.sql
-- Part of the esrc install script (see Makefile): crypto-shredding --
-- per-subject keys, encryption of event fields at append time, decryption
-- at read time, and forgetting a subject by destroying its key
-- (src/lifecycle/crypto.c, docs/lifecycle.md "Crypto-shredding").

------------------------------------------------------------------------
-- The key table.  One row per subject; written only by esrc.encrypt (a
-- new key on a subject's first use) and esrc.forget_subject (key set to
-- NULL), as the table's owner; readable by esrc_admin alone.  subject is
-- COLLATE "C": the C code looks it up by index with that collation.
------------------------------------------------------------------------
CREATE TABLE esrc.subject_keys (
    key_id       uuid        NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
    subject      text        COLLATE "C" NOT NULL,
    key          bytea,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    forgotten_at timestamptz,
    CONSTRAINT subject_keys_pkey PRIMARY KEY (key_id),
    CONSTRAINT subject_keys_subject_key UNIQUE (subject),
    CONSTRAINT subject_keys_key_check CHECK (key IS NULL OR pg_catalog.length(key) = 32),
    CONSTRAINT subject_keys_forgotten_check CHECK ((key IS NULL) = (forgotten_at IS NOT NULL))
);
COMMENT ON TABLE esrc.subject_keys IS
    'The AES-256 key of every subject esrc.encrypt encrypted for; key is NULL once esrc.forget_subject destroyed it.  Readable by esrc_admin only.';
COMMENT ON COLUMN esrc.subject_keys.key_id IS 'Random; named in every encrypted value (the subject is not).';
COMMENT ON COLUMN esrc.subject_keys.key IS '32 random bytes; NULL after esrc.forget_subject.';
COMMENT ON COLUMN esrc.subject_keys.forgotten_at IS 'Start of the transaction that forgot the subject.';

-- pg_dump dumps the keys with the database: a restore without them could
-- decrypt nothing (docs/lifecycle.md, "Backups").
SELECT pg_catalog.pg_extension_config_dump('esrc.subject_keys', '');

REVOKE ALL ON esrc.subject_keys FROM PUBLIC;
GRANT SELECT ON esrc.subject_keys TO esrc_admin;

------------------------------------------------------------------------
-- The functions.  Not SECURITY DEFINER: the C code reads the key table by
-- index scans and writes it as its owner, security-restricted, with
-- search_path pinned; EXECUTE is the check: encrypt for esrc_writer,
-- decrypt for esrc_reader, forget_subject for esrc_admin.
------------------------------------------------------------------------
CREATE FUNCTION esrc.encrypt(subject text, field text, value jsonb) RETURNS jsonb
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_encrypt';
COMMENT ON FUNCTION esrc.encrypt(text, text, jsonb) IS
    'Encrypt a JSON value for a subject (AES-256-GCM with the subject''s key, created on first use), bound to the subject and the field name; returns the JSON string "esrc:v1:<key id>:<base64>".  NULL value: NULL.';

CREATE FUNCTION esrc.decrypt(subject text, field text, value jsonb) RETURNS jsonb
    LANGUAGE c CALLED ON NULL INPUT STABLE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'esrc_decrypt';
COMMENT ON FUNCTION esrc.decrypt(text, text, jsonb) IS
    'The JSON value esrc.encrypt(subject, field, ...) encrypted; NULL if the subject was forgotten; a value that is not an encrypted value (no JSON string starting with "esrc:") unchanged.';

CREATE FUNCTION esrc.forget_subject(subject text, reason text) RETURNS boolean
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_forget_subject';
COMMENT ON FUNCTION esrc.forget_subject(text, text) IS
    'Destroy the key of a subject (every value encrypted for it becomes unreadable; esrc.decrypt returns NULL), record it in esrc.erasures; true if a key was destroyed, false if it was gone already.';

REVOKE ALL ON FUNCTION esrc.encrypt(text, text, jsonb),
                       esrc.decrypt(text, text, jsonb),
                       esrc.forget_subject(text, text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.encrypt(text, text, jsonb) TO esrc_writer;
GRANT EXECUTE ON FUNCTION esrc.decrypt(text, text, jsonb) TO esrc_reader;
GRANT EXECUTE ON FUNCTION esrc.forget_subject(text, text) TO esrc_admin;

-- from src/sql/60_metrics.sql
-- Part of the esrc install script (see Makefile): metrics for monitoring
-- (src/base/metrics.c, docs/operations.md "Metrics").

------------------------------------------------------------------------
-- Counters kept in shared memory per database since the server started
-- (they start at 0 again after a restart), and the view esrc.metrics that
-- shows them, with the forwarder's gauges, one row per figure, for
-- Prometheus (examples/postgres_exporter/queries.yaml).
------------------------------------------------------------------------
CREATE FUNCTION esrc.metrics_counters()
    RETURNS TABLE (database name, appends bigint, events bigint, conflicts bigint,
                   idempotent_hits bigint, forwarded bigint, forwarder_batches bigint,
                   forwarder_errors bigint)
    LANGUAGE c STRICT VOLATILE PARALLEL RESTRICTED
    AS 'MODULE_PATHNAME', 'esrc_metrics_counters';
COMMENT ON FUNCTION esrc.metrics_counters() IS
    'The counters of esrc.metrics for every database that counted something since the server started (databases past the 63rd share the row "(other)"); use the view esrc.metrics.';
REVOKE ALL ON FUNCTION esrc.metrics_counters() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.metrics_counters() TO esrc_reader;

CREATE VIEW esrc.metrics AS
    WITH c AS (
        SELECT coalesce(m.appends, 0) AS appends,
               coalesce(m.events, 0) AS events,
               coalesce(m.conflicts, 0) AS conflicts,
               coalesce(m.idempotent_hits, 0) AS idempotent_hits,
               coalesce(m.forwarded, 0) AS forwarded,
               coalesce(m.forwarder_batches, 0) AS forwarder_batches,
               coalesce(m.forwarder_errors, 0) AS forwarder_errors
          FROM (SELECT pg_catalog.current_database() AS database) d
          LEFT JOIN esrc.metrics_counters() m ON m.database = d.database),
    -- the one place that reads esrc.forwarder_status: this database's row,
    -- when the forwarder serves it
    f AS (
        SELECT s.events_pending, s.lag_seconds
          FROM esrc.forwarder_status s
         WHERE s.database = pg_catalog.current_database()
           AND s.state <> 'inactive')
    SELECT v.name, pg_catalog.jsonb_build_object('database', pg_catalog.current_database()) AS labels,
           v.value, v.help
      FROM c, LATERAL (VALUES
        ('esrc_appends_total', c.appends::double precision,
         'Calls of esrc.append and esrc.append_batch that wrote events, counted at commit.'),
        ('esrc_events_total', c.events::double precision,
         'Events those calls wrote, counted at commit.'),
        ('esrc_conflicts_total', c.conflicts::double precision,
         'Appends refused with SQLSTATE 40001 by their version check (expected_version, or a concurrent append at REPEATABLE READ).'),
        ('esrc_idempotent_hits_total', c.idempotent_hits::double precision,
         'Appends answered from event ids already stored (retries), counted at commit.'),
        ('esrc_forwarded_total', c.forwarded::double precision,
         'Events the forwarder delivered to Kafka.'),
        ('esrc_forwarder_batches_total', c.forwarder_batches::double precision,
         'Batches the forwarder delivered to Kafka (Kafka transactions in exactly_once mode).'),
        ('esrc_forwarder_errors_total', c.forwarder_errors::double precision,
         'Failures the forwarder reported (Kafka unreachable, refused configuration, poison record), each retry that fails included.')
      ) v(name, value, help)
    UNION ALL
    SELECT v.name, pg_catalog.jsonb_build_object('database', pg_catalog.current_database()),
           v.value, v.help
      FROM f, LATERAL (VALUES
        ('esrc_forwarder_pending_events', f.events_pending::double precision,
         'Committed events the forwarder has not delivered yet.'),
        ('esrc_forwarder_lag_seconds', coalesce(f.lag_seconds, 0)::double precision,
         'Seconds since the oldest pending event was recorded; 0 when nothing is pending.')
      ) v(name, value, help);
COMMENT ON VIEW esrc.metrics IS
    'This database''s figures for monitoring, one row per metric (Prometheus names): counters since the server started and the forwarder''s gauges (only where the forwarder serves this database).';
COMMENT ON COLUMN esrc.metrics.name IS 'Prometheus metric name; _total marks a counter.';
COMMENT ON COLUMN esrc.metrics.labels IS 'Prometheus labels: {"database": ...}.';
COMMENT ON COLUMN esrc.metrics.help IS 'What the figure counts or measures.';
GRANT SELECT ON esrc.metrics TO esrc_reader;
