-- esrc_snapshot_manager: a migration role granted it (and esrc_reader, to
-- read the log) creates, rebuilds and drops snapshots of tables it owns,
-- without a superuser.  Its reducers run as the table's owner in the
-- owner context.  The readers of a snapshot need esrc_reader and USAGE on
-- the snapshot's schema: create_snapshot grants USAGE when the caller may,
-- and otherwise says exactly what to grant.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;
\set SHOW_CONTEXT never

-- The role: NOLOGIN, no attributes, EXECUTE on the three functions.
SELECT rolname, rolsuper, rolcreatedb, rolcreaterole, rolcanlogin
FROM pg_roles WHERE rolname = 'esrc_snapshot_manager';
SELECT p.oid::regprocedure AS function,
       has_function_privilege('esrc_snapshot_manager', p.oid, 'EXECUTE') AS manager
FROM pg_proc p
WHERE p.pronamespace = 'esrc'::regnamespace
  AND p.proname IN ('create_snapshot', 'rebuild_snapshot', 'drop_snapshot', 'load')
ORDER BY 1;

CREATE ROLE mgr_migrator LOGIN IN ROLE esrc_snapshot_manager, esrc_reader;
CREATE ROLE mgr_other LOGIN IN ROLE esrc_snapshot_manager, esrc_reader;
CREATE ROLE mgr_noreader LOGIN IN ROLE esrc_snapshot_manager;
CREATE ROLE mgr_app LOGIN IN ROLE esrc_writer;
CREATE SCHEMA mgr_app AUTHORIZATION mgr_migrator;
-- a schema the migrator may create in but not grant on
CREATE SCHEMA mgr_shared;
GRANT USAGE, CREATE ON SCHEMA mgr_shared TO mgr_migrator;
-- a reducer anyone may execute
CREATE FUNCTION mgr_keep(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE sql RETURN state;

-- The migration role: a reducer, a snapshot in its own schema (USAGE
-- granted to esrc_reader, with a NOTICE), appends by the application role
-- run the reducer as the migrator.
SET ROLE mgr_migrator;
CREATE FUNCTION mgr_app.count(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE sql
    RETURN jsonb_build_object('n', coalesce((state->>'n')::int, 0) + 1, 'by', current_user);
SELECT esrc.create_snapshot('mgr_app.counts', 'mgrcount', 'mgr_app.count(jsonb, esrc.event)');
RESET ROLE;
SELECT has_schema_privilege('esrc_reader', 'mgr_app', 'USAGE') AS reader_usage,
       has_table_privilege('esrc_reader', 'mgr_app.counts', 'SELECT') AS reader_select,
       pg_get_userbyid(relowner) AS owner
FROM pg_class WHERE oid = 'mgr_app.counts'::regclass;
SET ROLE mgr_app;
SELECT esrc.append('mgrcount-1', 'Counted', '{}');
SELECT esrc.append('mgrcount-1', 'Counted', '{}');
SELECT * FROM esrc.load('mgr_app.counts', 'mgrcount-1');
SELECT stream, version, state FROM mgr_app.counts;
RESET ROLE;

-- Rebuild and drop: the owner (or a member of the owner role) only.
SET ROLE mgr_other;
SELECT esrc.rebuild_snapshot('mgr_app.counts');
SELECT esrc.drop_snapshot('mgr_app.counts');
RESET ROLE;
SET ROLE mgr_migrator;
SELECT esrc.rebuild_snapshot('mgr_app.counts');
SELECT stream, version, state FROM mgr_app.counts;
RESET ROLE;

-- The owner must be able to read the log: without esrc_reader, no create.
SET ROLE mgr_noreader;
SELECT esrc.create_snapshot('mgr_noreader_snap', 'mgrcount', 'public.mgr_keep(jsonb, esrc.event)');
RESET ROLE;
-- and when the owner loses it, its snapshot is not rebuilt (nor applied)
REVOKE esrc_reader FROM mgr_migrator;
SET ROLE mgr_migrator;
SELECT esrc.rebuild_snapshot('mgr_app.counts');
RESET ROLE;
GRANT esrc_reader TO mgr_migrator;

-- A schema the caller may not grant on: a NOTICE says what to grant, and
-- the reader cannot load until the schema's owner does.
SET ROLE mgr_migrator;
SELECT esrc.create_snapshot('mgr_shared.merged', 'mgrcount', 'esrc.merge(jsonb, esrc.event)');
RESET ROLE;
SET ROLE mgr_app;
SELECT * FROM esrc.load('mgr_shared.merged', 'mgrcount-1');
RESET ROLE;
GRANT USAGE ON SCHEMA mgr_shared TO esrc_reader;
SET ROLE mgr_app;
SELECT * FROM esrc.load('mgr_shared.merged', 'mgrcount-1');
RESET ROLE;

-- Without esrc_snapshot_manager: nothing.
SET ROLE mgr_app;
SELECT esrc.create_snapshot('mgr_app_snap', 'mgrcount', 'esrc.merge(jsonb, esrc.event)');
SELECT esrc.rebuild_snapshot('mgr_app.counts');
SELECT esrc.drop_snapshot('mgr_app.counts');
RESET ROLE;

SET ROLE mgr_migrator;
SELECT esrc.drop_snapshot('mgr_app.counts');
SELECT esrc.drop_snapshot('mgr_shared.merged');
RESET ROLE;
SELECT count(*) AS definitions FROM esrc.snapshots WHERE category = 'mgrcount';

DROP SCHEMA mgr_app CASCADE;
DROP SCHEMA mgr_shared CASCADE;
DROP FUNCTION mgr_keep(jsonb, esrc.event);
DROP ROLE mgr_migrator, mgr_other, mgr_noreader, mgr_app;
