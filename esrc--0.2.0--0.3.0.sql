-- esrc 0.2.0 -> 0.3.0 upgrade script.
-- Everything 0.3.0 adds to or changes in the SQL surface, in the order the
-- install script's parts (src/sql/*.sql) define it; test/run-15-upgrade.sh
-- checks that an upgraded database describes exactly what a fresh install does.
\echo Use "ALTER EXTENSION esrc UPDATE TO '0.3.0'" to load this file. \quit

------------------------------------------------------------------------
-- Adoption (issue 26): the role esrc_snapshot_manager (00_core.sql,
-- 10_snapshot.sql) and the if_not_exists argument of create_snapshot
-- (10_snapshot.sql), create_subscription (30_subscription.sql) and
-- create_projection (40_projection.sql).
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

-- The three functions get a new argument, so a new signature: the old
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
    if_not_exists boolean DEFAULT false)
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_create_projection';
COMMENT ON FUNCTION esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure, boolean) IS
    'Create a projection: background workers call handler (event esrc.event) for every committed event of the categories (null = all) after start, per-stream in order, each batch and its checkpoint in one transaction; returns its id.  With if_not_exists, an existing projection of the same definition (start aside) is a notice and its id is returned, one of another definition an error.';

REVOKE ALL ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean),
                       esrc.create_subscription(text, text[], integer, text, text[], jsonb, boolean),
                       esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure, boolean)
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
                      'esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure, boolean)'))
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
GRANT EXECUTE ON FUNCTION esrc.create_projection(text, regprocedure, text[], integer, integer, text, regprocedure, boolean)
    TO esrc_subscriber;
