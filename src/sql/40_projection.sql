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
    erase_from      text[],
    erase_column    text,
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
COMMENT ON COLUMN esrc.projections.erase_from IS 'Qualified names of the tables whose rows of a stream the workers delete when they deliver its esrc.erased or esrc.deleted tombstone; null = none.';
COMMENT ON COLUMN esrc.projections.erase_column IS 'The column of the erase_from tables that holds the stream name.';

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
                       esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure, boolean, regclass[], text),
                       esrc.drop_projection(text),
                       esrc.projection_pause(text),
                       esrc.projection_resume(text),
                       esrc.projection_skip(text, bigint, text),
                       esrc.reset_projection(text),
                       esrc.wait_for_projection(text, bigint, interval),
                       esrc.projections_guard()
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure, boolean, regclass[], text),
                          esrc.drop_projection(text),
                          esrc.projection_pause(text),
                          esrc.projection_resume(text),
                          esrc.projection_skip(text, bigint, text),
                          esrc.reset_projection(text)
    TO esrc_subscriber;
GRANT EXECUTE ON FUNCTION esrc.wait_for_projection(text, bigint, interval) TO esrc_reader;

GRANT SELECT ON esrc.projection_status TO esrc_reader;
