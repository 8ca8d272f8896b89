-- esrc 0.2.0 -> 0.3.0 upgrade script.
-- Everything 0.3.0 adds to or changes in the SQL surface, in the order the
-- install script's parts (src/sql/*.sql) define it; test/run-15-upgrade.sh
-- checks that an upgraded database describes exactly what a fresh install does.
\echo Use "ALTER EXTENSION esrc UPDATE TO '0.3.0'" to load this file. \quit

------------------------------------------------------------------------
-- ha-forward (issue 27, items 1 and 2): esrc.forwarder_standbys and the
-- divergence of Kafka from the log (src/forward/fwdstandby.c,
-- fwddiverge.c).  esrc.forwarder_worker_status() gains the column
-- standby_wait_since, so it is created anew with the two views on it;
-- esrc.metrics gains esrc_forwarder_standby_wait_seconds and
-- esrc_forwarder_diverged; esrc.forwarder_divergences and
-- esrc.forwarder_accept_divergence() are new.
------------------------------------------------------------------------
DROP VIEW esrc.metrics;
DROP VIEW esrc.forwarder_status;
DROP FUNCTION esrc.forwarder_worker_status();

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
REVOKE ALL ON FUNCTION esrc.forwarder_worker_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.forwarder_worker_status() TO esrc_reader;

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

-- esrc.metrics is created once, below (its 0.3.0 definition).
-- Reads on hot standbys (issue 27, item 3): the horizon the primary publishes.
-- The primary's read horizon for its hot standbys (src/log/standby.c):
-- one row, overwritten in place (no new row version, no transaction id)
-- by the horizon publisher, a background worker per database that
-- appends, when the in-flight registry changed; a standby computes
-- read_all's, read_category's and safe_position's horizons from what it
-- has replayed of it.  categories holds up to 16 (hash, bound) pairs of
-- appends in flight, ncategories of them in use.  Not for applications
-- to write.
CREATE TABLE esrc.standby_horizon (
    singleton      boolean     NOT NULL DEFAULT true CHECK (singleton),
    published_at   timestamptz NOT NULL,
    horizon        bigint      NOT NULL,
    last_position  bigint      NOT NULL,
    overflow_bound bigint      NOT NULL,
    ncategories    integer     NOT NULL,
    categories     bytea       NOT NULL,
    CONSTRAINT standby_horizon_pkey PRIMARY KEY (singleton)
);
-- a fixed length, never compressed: the publisher overwrites it in place
ALTER TABLE esrc.standby_horizon ALTER COLUMN categories SET STORAGE PLAIN;
-- A database upgraded with events in it starts from the primary's
-- commit-safe horizon, not from 0: else its standbys would return nothing
-- until the next append here starts a publisher.  horizon = last_position
-- and no categories claim nothing above it for any reader.
INSERT INTO esrc.standby_horizon
    SELECT true, pg_catalog.now(), h.h, h.h, 0, 0, pg_catalog.decode(pg_catalog.repeat('00', 256), 'hex')
      FROM (SELECT esrc.safe_position() AS h) h;
COMMENT ON TABLE esrc.standby_horizon IS
    'The horizon the primary publishes for reads on hot standbys: the global horizon, and last(position_seq), the lowest bound per category hash of appends in flight and the lowest overflow bound of one reading of the registry.  Written in place by the horizon publisher only.';
REVOKE ALL ON esrc.standby_horizon FROM PUBLIC;
GRANT SELECT ON esrc.standby_horizon TO esrc_reader;
------------------------------------------------------------------------
-- Dynamic consistency boundaries (issue 28, docs/dcb.md): tags on events,
-- reads by query, conditional appends.  ADD COLUMN without a default
-- rewrites nothing; the partial GIN index holds only tagged events, so it
-- is empty after the upgrade.
------------------------------------------------------------------------
ALTER TABLE esrc.events ADD COLUMN tags text[];
CREATE INDEX events_tags_idx ON esrc.events USING gin (tags) WITH (gin_pending_list_limit = 256)
    WHERE tags IS NOT NULL;
COMMENT ON COLUMN esrc.events.tags IS
    'The event''s tags (dynamic consistency boundaries, docs/dcb.md); null for an event without tags.';
-- read functions, subscriptions, snapshots' reducers and projections'
-- handlers see the tags (C code fills either shape of the type)
ALTER TYPE esrc.event ADD ATTRIBUTE tags text[];

DROP FUNCTION esrc.append(text, text, jsonb, jsonb, bigint, uuid);
CREATE FUNCTION esrc.append(
    stream text,
    type text,
    data jsonb,
    metadata jsonb DEFAULT NULL,
    expected_version bigint DEFAULT NULL,
    id uuid DEFAULT NULL,
    tags text[] DEFAULT NULL)
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_append';
COMMENT ON FUNCTION esrc.append(text, text, jsonb, jsonb, bigint, uuid, text[]) IS
    'Append one event (with optional tags) to a stream and return the stream''s new version; raises 40001 when expected_version does not match.';

CREATE FUNCTION esrc.append_if(
    stream text,
    events jsonb,
    condition jsonb,
    expected_version bigint DEFAULT NULL)
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_append_if';
COMMENT ON FUNCTION esrc.append_if(text, jsonb, jsonb, bigint) IS
    'append_batch with a condition {"fail_if_events_match": query, "after": position}: raises 40001 when an event matching the query exists after the position (docs/dcb.md).';

CREATE FUNCTION esrc.read_query(
    query jsonb,
    after bigint DEFAULT 0,
    max_count int DEFAULT NULL,
    up_to bigint DEFAULT NULL)
RETURNS SETOF esrc.event
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 100
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_read_query';
COMMENT ON FUNCTION esrc.read_query(jsonb, bigint, int, bigint) IS
    'Committed events matching a query (items OR''d; within an item types OR''d and every tag required) after a position and up to up_to (null = esrc.safe_position()), in position order (docs/dcb.md).';

CREATE FUNCTION esrc.explain_query(query jsonb)
RETURNS SETOF text
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 10
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_explain_query';
COMMENT ON FUNCTION esrc.explain_query(jsonb) IS
    'The plan (EXPLAIN, costs off) of the statement esrc.read_query and esrc.append_if run for a query.';

REVOKE ALL ON FUNCTION esrc.append(text, text, jsonb, jsonb, bigint, uuid, text[]),
                       esrc.append_if(text, jsonb, jsonb, bigint),
                       esrc.read_query(jsonb, bigint, int, bigint),
                       esrc.explain_query(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.append(text, text, jsonb, jsonb, bigint, uuid, text[]),
                          esrc.append_if(text, jsonb, jsonb, bigint)
    TO esrc_writer;
GRANT EXECUTE ON FUNCTION esrc.read_query(jsonb, bigint, int, bigint),
                          esrc.explain_query(jsonb)
    TO esrc_reader;

-- read_category's filters (issue 28): event types, and one member of a
-- consumer group (esrc.stream_partition)
DROP FUNCTION esrc.read_category(text, bigint, int);
CREATE FUNCTION esrc.read_category(
    category text,
    after_position bigint DEFAULT 0,
    max_count int DEFAULT 1000,
    types text[] DEFAULT NULL,
    "partition" int DEFAULT NULL,
    partitions int DEFAULT NULL)
RETURNS SETOF esrc.event
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 1000
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_read_category';
COMMENT ON FUNCTION esrc.read_category(text, bigint, int, text[], int, int) IS
    'Committed events of one category (stream name prefix before the first "-") after a global position, in commit-safe order; only of the given types, and only of the streams of one partition of partitions (esrc.stream_partition), when given.';
REVOKE ALL ON FUNCTION esrc.read_category(text, bigint, int, text[], int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.read_category(text, bigint, int, text[], int, int) TO esrc_reader;

-- subscriptions' filter by tags (issue 28)
ALTER TABLE esrc.subscriptions ADD COLUMN tags text[];
COMMENT ON COLUMN esrc.subscriptions.tags IS 'Only events that carry every one of these tags are delivered; null = no filter.';
-- (create_subscription gains its tags argument with if_not_exists, in the
-- adoption section below)


------------------------------------------------------------------------
-- Adoption (issue 26): the role esrc_snapshot_manager (00_core.sql,
-- 10_snapshot.sql), the if_not_exists argument of create_snapshot
-- (10_snapshot.sql), create_subscription (30_subscription.sql) and
-- create_projection (40_projection.sql), and the erase_from/erase_column
-- of projections (40_projection.sql).
------------------------------------------------------------------------
-- The role, created or adopted as 00_core.sql does for every esrc role.
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
                     ORDER BY g.rolname) AS extra
        FROM pg_catalog.pg_roles a
        WHERE a.rolname OPERATOR(pg_catalog.=) 'esrc_snapshot_manager'
    LOOP
        IF pg_catalog.cardinality(r.extra) OPERATOR(pg_catalog.>) 0 THEN
            RAISE EXCEPTION 'role "%" already exists with rights esrc does not give it', r.rolname
                USING ERRCODE = 'duplicate_object',
                      DETAIL = pg_catalog.format('It has %s; every role granted %s would gain them.',
                                                 pg_catalog.array_to_string(r.extra, ', '), r.rolname),
                      HINT = pg_catalog.format('Remove them (ALTER ROLE %1$s NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS NOLOGIN, REVOKE ... FROM %1$s) or drop the role, then update the extension again.',
                                               r.rolname);
        END IF;
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles
                   WHERE rolname OPERATOR(pg_catalog.=) 'esrc_snapshot_manager') THEN
        CREATE ROLE esrc_snapshot_manager NOLOGIN;
    END IF;
END
$roles$;

-- Projections that erase what they derived from erased or deleted streams
-- (40_projection.sql).
ALTER TABLE esrc.projections ADD COLUMN erase_from text[], ADD COLUMN erase_column text;
COMMENT ON COLUMN esrc.projections.erase_from IS 'Qualified names of the tables whose rows of a stream the workers delete when they deliver its esrc.erased or esrc.deleted tombstone; null = none.';
COMMENT ON COLUMN esrc.projections.erase_column IS 'The column of the erase_from tables that holds the stream name.';

-- The three functions get new arguments, so a new signature: the old
-- ones are renamed, the new ones created, the EXECUTE grants of the old
-- ones carried over (a role granted create_snapshot under 0.2.0 keeps
-- it), and the old ones dropped.
ALTER FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb)
    RENAME TO create_snapshot_0_2_0;
ALTER FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb)
    RENAME TO create_subscription_0_2_0;
ALTER FUNCTION esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure)
    RENAME TO create_projection_0_2_0;

CREATE FUNCTION esrc.create_snapshot(
    snapshot text,
    category text,
    reducer regprocedure,
    initial_state jsonb DEFAULT '{}',
    if_not_exists boolean DEFAULT false)
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_create_snapshot';
COMMENT ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean) IS
    'Create a snapshot table kept current by a reducer over the events of one category, fill it from the stored events and return the number of events applied.  With if_not_exists, an existing snapshot of the same definition is a notice (0 returned), one of another definition an error.';

CREATE FUNCTION esrc.create_subscription(
    name text,
    categories text[] DEFAULT NULL,
    partitions integer DEFAULT 1,
    start text DEFAULT 'beginning',
    types text[] DEFAULT NULL,
    metadata jsonb DEFAULT NULL,
    tags text[] DEFAULT NULL,
    if_not_exists boolean DEFAULT false)
RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_create_subscription';
COMMENT ON FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb, text[], boolean) IS
    'Create a subscription of some categories (null = all) with a number of partitions, starting at the beginning, the end or after a position; optional type, metadata and tag filters.  With if_not_exists, an existing subscription of the same definition (start aside) is a notice, one of another definition an error.';

CREATE FUNCTION esrc.create_projection(
    name text,
    handler regprocedure,
    categories text[] DEFAULT NULL,
    partitions integer DEFAULT 1,
    batch_size integer DEFAULT 100,
    start text DEFAULT 'beginning',
    reset_function regprocedure DEFAULT NULL,
    if_not_exists boolean DEFAULT false,
    erase_from regclass[] DEFAULT NULL,
    erase_column text DEFAULT 'stream')
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_create_projection';
COMMENT ON FUNCTION esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure, boolean, regclass[], text) IS
    'Create a projection: background workers call handler (event esrc.event) for every committed event of the categories (null = all) after start, per-stream in order, each batch and its checkpoint in one transaction; returns its id.  With if_not_exists, an existing projection of the same definition (start aside) is a notice and its id is returned, one of another definition an error.  With erase_from, the rows of those tables whose erase_column is a stream are deleted when its esrc.erased or esrc.deleted tombstone is delivered.';

REVOKE ALL ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean),
                       esrc.create_subscription(text, text[], integer, text, text[], jsonb, text[], boolean),
                       esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure, boolean, regclass[], text)
    FROM PUBLIC;
-- (The EXECUTE grants of the old ones are carried over at the end of this
-- script, after every GRANT of esrc's own on the new ones.)

GRANT USAGE ON SCHEMA esrc TO esrc_snapshot_manager;
GRANT EXECUTE ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean),
                          esrc.rebuild_snapshot(text),
                          esrc.drop_snapshot(text)
    TO esrc_snapshot_manager;
GRANT EXECUTE ON FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb, text[], boolean)
    TO esrc_subscriber;
GRANT EXECUTE ON FUNCTION esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure, boolean, regclass[], text)
    TO esrc_subscriber;

------------------------------------------------------------------------
-- esrc.metrics (issue 26): the lag of each projection and subscription and
-- the projections' blocked partitions (60_metrics.sql).
------------------------------------------------------------------------
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
        SELECT s.events_pending, s.lag_seconds, s.state, s.standby_wait_since
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
         'Seconds since the oldest pending event was recorded; 0 when nothing is pending.'),
        ('esrc_forwarder_standby_wait_seconds',
         coalesce(greatest(0, extract(epoch FROM pg_catalog.clock_timestamp() - f.standby_wait_since)), 0)::double precision,
         'Seconds the forwarder has been waiting for a standby of esrc.forwarder_standbys to flush the next batch''s WAL; 0 when it does not wait.'),
        ('esrc_forwarder_diverged', CASE WHEN f.state = 'diverged' THEN 1 ELSE 0 END::double precision,
         '1 while the forwarder sends nothing because Kafka''s position record does not match the log (state diverged), else 0.')
      ) v(name, value, help)
    -- per projection: lag and blocked partitions (esrc.projection_status,
    -- which scans the events not yet applied)
    UNION ALL
    SELECT v.name, pg_catalog.jsonb_build_object('database', pg_catalog.current_database(),
                                                 'projection', p.projection),
           v.value, v.help
      FROM (SELECT s.projection, sum(s.events_behind) AS events, max(s.seconds_behind) AS seconds,
                   count(*) FILTER (WHERE s.state OPERATOR(pg_catalog.=) 'blocked') AS blocked
              FROM esrc.projection_status s GROUP BY s.projection) p,
           LATERAL (VALUES
        ('esrc_projection_lag_events', p.events::double precision,
         'Events of the projection''s categories committed and not yet applied, over its partitions.'),
        ('esrc_projection_lag_seconds', coalesce(p.seconds, 0)::double precision,
         'Age of the oldest event not yet applied, over its partitions; 0 when caught up.'),
        ('esrc_projection_blocked_partitions', p.blocked::double precision,
         'Partitions stopped at an event that failed esrc.projection_max_attempts times.')
      ) v(name, value, help)
    -- per subscription of SQL consumers (those of projections are above)
    UNION ALL
    SELECT v.name, pg_catalog.jsonb_build_object('database', pg_catalog.current_database(),
                                                 'subscription', u.subscription),
           v.value, v.help
      FROM (SELECT s.subscription, sum(s.events_behind) AS events, max(s.seconds_behind) AS seconds
              FROM esrc.subscription_status s
             WHERE NOT s.subscription OPERATOR(pg_catalog.^@) 'projection:'
             GROUP BY s.subscription) u,
           LATERAL (VALUES
        ('esrc_subscription_lag_events', u.events::double precision,
         'Events the subscription''s filters pass, committed and not yet acknowledged, over its partitions.'),
        ('esrc_subscription_lag_seconds', coalesce(u.seconds, 0)::double precision,
         'Age of the oldest event not yet acknowledged, over its partitions; 0 when caught up.')
      ) v(name, value, help);
COMMENT ON VIEW esrc.metrics IS
    'This database''s figures for monitoring, one row per metric (Prometheus names): counters since the server started, the forwarder''s gauges (only where the forwarder serves this database), and the lag of each projection and subscription (labelled with its name) with the projections'' blocked partitions.';
COMMENT ON COLUMN esrc.metrics.name IS 'Prometheus metric name; _total marks a counter.';
COMMENT ON COLUMN esrc.metrics.labels IS 'Prometheus labels: {"database": ...}, and "projection" or "subscription" for their figures.';
COMMENT ON COLUMN esrc.metrics.help IS 'What the figure counts or measures.';
GRANT SELECT ON esrc.metrics TO esrc_reader;

------------------------------------------------------------------------
-- proj-wait (issue 31, read-your-writes): esrc.last_position(),
-- esrc.wait_for_subscription() and esrc.wait_for_projection()
-- (src/log/lastpos.c, src/subscription/subprogress.c,
-- src/projection/projwait.c).
------------------------------------------------------------------------
CREATE FUNCTION esrc.last_position() RETURNS bigint
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_last_position';
COMMENT ON FUNCTION esrc.last_position() IS
    'The global position of the last event this session appended (append, append_if, append_batch: the last of the batch), null before its first append; kept after the commit and after a rollback.';
REVOKE ALL ON FUNCTION esrc.last_position() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.last_position() TO esrc_writer, esrc_reader;

CREATE FUNCTION esrc.wait_for_subscription(
    name text,
    "position" bigint,
    timeout interval DEFAULT '5s')
RETURNS text
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_wait_for_subscription';
COMMENT ON FUNCTION esrc.wait_for_subscription(text, bigint, interval) IS
    'Wait until the subscription''s consumer group has acknowledged every event of its categories up to position: ''applied'', or ''timeout''; woken by the acknowledging commit (READ COMMITTED only).';
REVOKE ALL ON FUNCTION esrc.wait_for_subscription(text, bigint, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.wait_for_subscription(text, bigint, interval) TO esrc_reader;

CREATE FUNCTION esrc.wait_for_projection(
    name text,
    "position" bigint,
    timeout interval DEFAULT '5s')
RETURNS text
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_wait_for_projection';
COMMENT ON FUNCTION esrc.wait_for_projection(text, bigint, interval) IS
    'Wait until the projection has applied every event of its categories up to position (its rows are then visible to the next statement): ''applied'', or ''timeout''; 55000 for a partition blocked at or below position or a paused projection; woken by the workers'' commit (READ COMMITTED only).';
REVOKE ALL ON FUNCTION esrc.wait_for_projection(text, bigint, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.wait_for_projection(text, bigint, interval) TO esrc_reader;

-- ========================================================================
-- sec-roles: DROP ROLE sees the roles of esrc's catalogs from every database
-- (src/projection/rolemarker.c; from src/sql/40_projection.sql)
-- ========================================================================
------------------------------------------------------------------------
-- The roles that esrc.projections and esrc.subscriptions refer to, as
-- PostgreSQL sees them: every such role holds USAGE on the marker type
-- esrc.referenced_role (which PUBLIC holds anyway: it grants nothing), so
-- pg_shdepend records it and DROP ROLE refuses from every database
-- (src/projection/rolemarker.c).  The triggers keep the grants.
------------------------------------------------------------------------
CREATE TYPE esrc.referenced_role AS ENUM ();
COMMENT ON TYPE esrc.referenced_role IS
    'Marker, without values: esrc grants USAGE on it (which PUBLIC holds anyway) to every role that esrc.projections or esrc.subscriptions refers to, so that PostgreSQL records the reference and DROP ROLE refuses from every database.';

CREATE FUNCTION esrc.sync_referenced_roles() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_sync_referenced_roles';
COMMENT ON FUNCTION esrc.sync_referenced_roles() IS
    'Trigger function: grants USAGE on esrc.referenced_role to every role that esrc.projections or esrc.subscriptions refers to, and revokes it from the others.';
REVOKE ALL ON FUNCTION esrc.sync_referenced_roles() FROM PUBLIC;

CREATE TRIGGER subscriptions_referenced_roles
    AFTER INSERT OR DELETE OR TRUNCATE OR UPDATE OF owner, consumers ON esrc.subscriptions
    FOR EACH STATEMENT EXECUTE FUNCTION esrc.sync_referenced_roles();
CREATE TRIGGER projections_referenced_roles
    AFTER INSERT OR DELETE OR TRUNCATE OR UPDATE OF owner ON esrc.projections
    FOR EACH STATEMENT EXECUTE FUNCTION esrc.sync_referenced_roles();
ALTER TABLE esrc.subscriptions ENABLE ALWAYS TRIGGER subscriptions_referenced_roles;
ALTER TABLE esrc.projections ENABLE ALWAYS TRIGGER projections_referenced_roles;
-- The roles already recorded get the marker now: one statement that fires
-- the trigger (a statement trigger fires for no row too).  Roles dropped
-- before this upgrade cannot get it; docs/subscriptions.md finds them.
UPDATE esrc.subscriptions SET owner = owner WHERE false;

------------------------------------------------------------------------
-- Last: the EXECUTE grants of the three functions whose signature changed
-- (create_snapshot, create_subscription, create_projection) carried over
-- from the old ones, which are then dropped.  They are the user's, not
-- the extension's: made outside its initial privileges
-- (src/base/extacl.c), so that pg_dump dumps them like any grant; and
-- after every GRANT of esrc's own on the new functions, each of which
-- records the function's whole ACL as its initial privileges.
------------------------------------------------------------------------
CREATE FUNCTION esrc.carry_over_execute_0_3_0(regprocedure, regprocedure) RETURNS integer
    LANGUAGE c STRICT AS 'MODULE_PATHNAME', 'esrc_carry_over_execute';
SELECT esrc.carry_over_execute_0_3_0(v.old_fn::pg_catalog.regprocedure, v.new_fn::pg_catalog.regprocedure)
FROM (VALUES ('esrc.create_snapshot_0_2_0(text, text, regprocedure, jsonb)',
              'esrc.create_snapshot(text, text, regprocedure, jsonb, boolean)'),
             ('esrc.create_subscription_0_2_0(text, text[], integer, text, text[], jsonb)',
              'esrc.create_subscription(text, text[], integer, text, text[], jsonb, text[], boolean)'),
             ('esrc.create_projection_0_2_0(text, regprocedure, text[], integer, integer, text, regprocedure)',
              'esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure, boolean, regclass[], text)'))
     AS v(old_fn, new_fn);
DROP FUNCTION esrc.carry_over_execute_0_3_0(regprocedure, regprocedure);
DROP FUNCTION esrc.create_snapshot_0_2_0(text, text, regprocedure, jsonb),
              esrc.create_subscription_0_2_0(text, text[], integer, text, text[], jsonb),
              esrc.create_projection_0_2_0(text, regprocedure, text[], integer, integer, text, regprocedure);
