-- esrc 0.2.0 -> 0.3.0 upgrade script.
-- Everything 0.3.0 adds to or changes in the SQL surface, in the order the
-- install script's parts (src/sql/*.sql) define it; test/run-15-upgrade.sh
-- checks that an upgraded database describes exactly what a fresh install does.
\echo Use "ALTER EXTENSION esrc UPDATE TO '0.3.0'" to load this file. \quit

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
    if_not_exists boolean DEFAULT false)
RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_create_subscription';
COMMENT ON FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb, boolean) IS
    'Create a subscription of some categories (null = all) with a number of partitions, starting at the beginning, the end or after a position; optional type and metadata filters.  With if_not_exists, an existing subscription of the same definition (start aside) is a notice, one of another definition an error.';

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
                       esrc.create_subscription(text, text[], integer, text, text[], jsonb, boolean),
                       esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure, boolean, regclass[], text)
    FROM PUBLIC;
DO $acl$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT v.new_fn, a.grantee, a.is_grantable
        FROM (VALUES ('esrc.create_snapshot_0_2_0(text, text, regprocedure, jsonb)',
                      'esrc.create_snapshot(text, text, regprocedure, jsonb, boolean)'),
                     ('esrc.create_subscription_0_2_0(text, text[], integer, text, text[], jsonb)',
                      'esrc.create_subscription(text, text[], integer, text, text[], jsonb, boolean)'),
                     ('esrc.create_projection_0_2_0(text, regprocedure, text[], integer, integer, text, regprocedure)',
                      'esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure, boolean, regclass[], text)'))
             AS v(old_fn, new_fn)
        JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) v.old_fn::pg_catalog.regprocedure
        CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
        WHERE a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
          AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', r.new_fn,
                                  CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                       ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(r.grantee)) END,
                                  CASE WHEN r.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$acl$;
DROP FUNCTION esrc.create_snapshot_0_2_0(text, text, regprocedure, jsonb),
              esrc.create_subscription_0_2_0(text, text[], integer, text, text[], jsonb),
              esrc.create_projection_0_2_0(text, regprocedure, text[], integer, integer, text, regprocedure);

GRANT USAGE ON SCHEMA esrc TO esrc_snapshot_manager;
GRANT EXECUTE ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean),
                          esrc.rebuild_snapshot(text),
                          esrc.drop_snapshot(text)
    TO esrc_snapshot_manager;
GRANT EXECUTE ON FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb, boolean)
    TO esrc_subscriber;
GRANT EXECUTE ON FUNCTION esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure, boolean, regclass[], text)
    TO esrc_subscriber;

------------------------------------------------------------------------
-- esrc.metrics (issue 26): the lag of each projection and subscription and
-- the projections' blocked partitions (60_metrics.sql).
------------------------------------------------------------------------
CREATE OR REPLACE VIEW esrc.metrics AS
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
