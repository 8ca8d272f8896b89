-- Snapshot privileges.  create/rebuild/drop_snapshot are not granted by
-- default.  A role granted create_snapshot owns the snapshots it creates,
-- and their reducers run as that owner -- not as the superuser that owns
-- esrc.append -- so a reducer can do no more than its owner.  esrc_reader
-- may load and snapshot_at; only the owner (or a superuser) rebuilds or
-- drops a snapshot.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;
\set SHOW_CONTEXT never
CREATE ROLE snap_owner LOGIN IN ROLE esrc_reader;
CREATE ROLE snap_writer LOGIN IN ROLE esrc_writer;
CREATE ROLE snap_reader LOGIN IN ROLE esrc_reader;
CREATE ROLE snap_nobody LOGIN;
CREATE SCHEMA snap_app AUTHORIZATION snap_owner;
GRANT USAGE ON SCHEMA snap_app TO esrc_reader;
CREATE TABLE snap_secret (x int);

-- Nothing for esrc_reader or esrc_writer by default.
SELECT p.oid::regprocedure AS function,
       has_function_privilege('esrc_reader', p.oid, 'EXECUTE') AS reader,
       has_function_privilege('esrc_writer', p.oid, 'EXECUTE') AS writer
FROM pg_proc p
WHERE p.oid IN ('esrc.create_snapshot(text, text, regprocedure, jsonb, boolean)'::regprocedure,
                'esrc.rebuild_snapshot(text)'::regprocedure,
                'esrc.drop_snapshot(text)'::regprocedure,
                'esrc.load(text, text)'::regprocedure,
                'esrc.snapshot_at(text, text, bigint)'::regprocedure,
                'esrc.merge(jsonb, esrc.event)'::regprocedure)
ORDER BY p.oid::regprocedure::text;
SET ROLE snap_owner;
SELECT esrc.create_snapshot('snap_app.who', 'snapwho', 'esrc.merge(jsonb, esrc.event)');
RESET ROLE;
GRANT EXECUTE ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean),
                          esrc.rebuild_snapshot(text), esrc.drop_snapshot(text)
    TO snap_owner;

-- The snapshot is created in the caller's schema and owned by the caller.
SET ROLE snap_owner;
CREATE FUNCTION snap_app.who(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE plpgsql AS $$
BEGIN
    IF event.type = 'Peek' THEN
        PERFORM count(*) FROM public.snap_secret;
    END IF;
    RETURN jsonb_build_object('ran_as', current_user, 'n', coalesce((state->>'n')::int, 0) + 1);
END
$$;
SET search_path = snap_app;
SELECT esrc.create_snapshot('who', 'snapwho', 'snap_app.who(jsonb, esrc.event)');
RESET search_path;
RESET ROLE;
SELECT s.snapshot, pg_get_userbyid(c.relowner) AS owner,
       has_table_privilege('esrc_reader', c.oid, 'SELECT') AS readable
FROM esrc.snapshots s JOIN pg_class c ON c.oid = s.snapshot
WHERE s.category = 'snapwho';

-- A writer appends; the reducer runs as snap_owner.  So it does when a
-- superuser appends.
SET ROLE snap_writer;
SELECT esrc.append('snapwho-1', 'Any', '{}');
SELECT * FROM esrc.load('snap_app.who', 'snapwho-1');
RESET ROLE;
SELECT esrc.append('snapwho-1', 'Any', '{}');
SELECT version, state FROM snap_app.who;
-- and it cannot read what its owner cannot
SELECT esrc.append('snapwho-1', 'Peek', '{}');
SET ROLE snap_writer;
SELECT esrc.append('snapwho-1', 'Peek', '{}');
RESET ROLE;

-- A reader loads and replays, and writes nothing.
SET ROLE snap_reader;
SELECT * FROM esrc.load('snap_app.who', 'snapwho-1');
SELECT esrc.snapshot_at('snap_app.who', 'snapwho-1', 0);
UPDATE snap_app.who SET state = '{}';
SELECT esrc.rebuild_snapshot('snap_app.who');
SELECT esrc.drop_snapshot('snap_app.who');
RESET ROLE;

-- Without esrc_reader, nothing.
SET ROLE snap_nobody;
SELECT * FROM esrc.load('snap_app.who', 'snapwho-1');
SELECT * FROM snap_app.who;
RESET ROLE;

-- Rebuild and drop need ownership, even when granted.
GRANT EXECUTE ON FUNCTION esrc.rebuild_snapshot(text), esrc.drop_snapshot(text) TO snap_writer;
SET ROLE snap_writer;
SELECT esrc.rebuild_snapshot('snap_app.who');
SELECT esrc.drop_snapshot('snap_app.who');
RESET ROLE;
SET ROLE snap_owner;
SELECT esrc.rebuild_snapshot('snap_app.who');
SELECT version, state FROM snap_app.who;
RESET ROLE;

-- The owner must keep the right to execute the reducer; the appends of the
-- category fail while it lacks it.
REVOKE EXECUTE ON FUNCTION snap_app.who(jsonb, esrc.event) FROM PUBLIC, snap_owner;
SELECT esrc.append('snapwho-1', 'Any', '{}');
GRANT EXECUTE ON FUNCTION snap_app.who(jsonb, esrc.event) TO snap_owner;
SELECT esrc.append('snapwho-1', 'Any', '{}');

-- create_snapshot checks the caller's right to execute the reducer and to
-- read the events it fills the snapshot from.
CREATE FUNCTION snap_private(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE sql RETURN state;
REVOKE EXECUTE ON FUNCTION snap_private(jsonb, esrc.event) FROM PUBLIC;
SET ROLE snap_owner;
SELECT esrc.create_snapshot('snap_app.private', 'snapwho', 'public.snap_private(jsonb, esrc.event)');
RESET ROLE;
CREATE FUNCTION snap_open(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE sql RETURN state;
GRANT USAGE ON SCHEMA esrc TO snap_nobody;
GRANT EXECUTE ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean) TO snap_nobody;
SET ROLE snap_nobody;
SELECT esrc.create_snapshot('snap_nobody_sees', 'snapwho', 'public.snap_open(jsonb, esrc.event)');
RESET ROLE;

-- The owner drops the table with DROP TABLE: the definition goes with it.
SET ROLE snap_owner;
DROP TABLE snap_app.who;
RESET ROLE;
SELECT count(*) AS definitions FROM esrc.snapshots WHERE category = 'snapwho';

-- Every session caches all the definitions at once, the first time it
-- needs one: a writer without USAGE on the schema of some snapshot's
-- reducer still appends, to that snapshot's category and to any other
-- (the reducer runs as the table's owner, who may use it).
CREATE ROLE snap_hider LOGIN IN ROLE esrc_reader;
CREATE SCHEMA snap_hidden AUTHORIZATION snap_hider;
GRANT EXECUTE ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean),
                          esrc.drop_snapshot(text) TO snap_hider;
SET ROLE snap_hider;
CREATE FUNCTION snap_hidden.count(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE sql RETURN jsonb_build_object('n', coalesce((state->>'n')::int, 0) + 1);
SELECT esrc.create_snapshot('snap_hidden.counted', 'snaphidden', 'snap_hidden.count(jsonb, esrc.event)');
-- create_snapshot granted esrc_reader USAGE on the schema, for the
-- snapshot's readers: taken back, so that the writer has none
REVOKE USAGE ON SCHEMA snap_hidden FROM esrc_reader;
RESET ROLE;
SELECT has_schema_privilege('snap_writer', 'snap_hidden', 'USAGE') AS writer_usage;
SET ROLE snap_writer;
SELECT esrc.append('snapelse-1', 'Any', '{}') IS NOT NULL AS other_category;
SELECT esrc.append('snaphidden-1', 'Any', '{}') IS NOT NULL AS its_category;
RESET ROLE;
SELECT stream, version, state FROM snap_hidden.counted;
SET ROLE snap_hider;
SELECT esrc.drop_snapshot('snap_hidden.counted');
RESET ROLE;
DROP SCHEMA snap_hidden CASCADE;
REVOKE ALL ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean),
                       esrc.drop_snapshot(text) FROM snap_hider;
DROP ROLE snap_hider;

REVOKE ALL ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean),
                       esrc.rebuild_snapshot(text), esrc.drop_snapshot(text)
    FROM snap_owner, snap_writer, snap_nobody;
REVOKE USAGE ON SCHEMA esrc FROM snap_nobody;
DROP SCHEMA snap_app CASCADE;
DROP FUNCTION snap_private(jsonb, esrc.event), snap_open(jsonb, esrc.event);
DROP TABLE snap_secret;
DROP ROLE snap_owner, snap_writer, snap_reader, snap_nobody;
