-- What create_snapshot creates goes away with what it depends on: DROP
-- EXTENSION drops the snapshot tables (no CASCADE needed), DROP FUNCTION of
-- a reducer is refused unless it cascades to the table, DROP SCHEMA
-- CASCADE and DROP TABLE take the definition with them.  In a database of
-- its own, since it drops the extension.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;
\set regression_db :DBNAME
CREATE DATABASE esrc_snapshot_drop;
\c esrc_snapshot_drop
CREATE EXTENSION esrc;
CREATE SCHEMA app;
SELECT esrc.append('snapd-1', 'A', '{"a": 1}');
SELECT esrc.create_snapshot('app.merged', 'snapd', 'esrc.merge(jsonb, esrc.event)');
SELECT esrc.create_snapshot('plain', 'snapd', 'esrc.merge(jsonb, esrc.event)');

-- A snapshot table depends on the extension (auto) and on its reducer.
SELECT d.objid::regclass AS snapshot_table,
       pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid) AS depends_on,
       d.deptype
FROM pg_depend d
WHERE d.classid = 'pg_class'::regclass
  AND d.objid IN ('app.merged'::regclass, 'plain'::regclass)
  AND d.refclassid <> 'pg_namespace'::regclass
ORDER BY d.objid::regclass::text, 2;

DROP EXTENSION esrc;
SELECT to_regclass('app.merged') AS merged, to_regclass('plain') AS plain,
       (SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'esrc%') AS event_triggers;

-- A user reducer depends on the type esrc.event, so dropping the extension
-- then needs CASCADE; the reducer cannot be dropped alone.
CREATE EXTENSION esrc;
SELECT esrc.append('snapd-1', 'A', '{"a": 1}');
CREATE FUNCTION app.r(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE sql RETURN state || event.data;
SELECT esrc.create_snapshot('app.reduced', 'snapd', 'app.r(jsonb, esrc.event)');
\set SHOW_CONTEXT never
DROP EXTENSION esrc;
DROP FUNCTION app.r(jsonb, esrc.event);
\set SHOW_CONTEXT errors
DROP FUNCTION app.r(jsonb, esrc.event) CASCADE;
SELECT to_regclass('app.reduced') AS reduced, (SELECT count(*) FROM esrc.snapshots) AS definitions;
SELECT esrc.append('snapd-1', 'A', '{"a": 2}');

-- DROP SCHEMA ... CASCADE takes table, reducer and definition.
CREATE FUNCTION app.r(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE sql RETURN state || event.data;
SELECT esrc.create_snapshot('app.reduced', 'snapd', 'app.r(jsonb, esrc.event)');
SELECT esrc.create_snapshot('kept', 'snapd', 'esrc.merge(jsonb, esrc.event)');
SET client_min_messages = warning;
DROP SCHEMA app CASCADE;
RESET client_min_messages;
SELECT snapshot FROM esrc.snapshots;
SELECT esrc.append('snapd-1', 'A', '{"a": 3}');
SELECT stream, version, state FROM kept;

SET client_min_messages = warning;
DROP EXTENSION esrc CASCADE;
RESET client_min_messages;
SELECT to_regclass('kept') AS kept;

\c :regression_db
DROP DATABASE esrc_snapshot_drop;
