-- The right to read the log is checked when events are delivered, not only
-- when what receives them was made (issue 24): a role that may no longer
-- read every event of esrc.events -- esrc_reader revoked, SELECT on some
-- columns only, row-level security applying to it -- is given none
-- through the reducer of a snapshot it owns (appends of the category,
-- rebuild_snapshot, snapshot_at), a projection it owns (reset_projection,
-- projection_resume, create_projection), a subscription's poll or
-- esrc.decrypt: 42501, and it goes on once the right is back.  The
-- projection workers' side is test/run-52-revoked-reader.sh.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;
\set SHOW_CONTEXT never
CREATE ROLE rr_owner LOGIN IN ROLE esrc_reader, esrc_subscriber;
CREATE ROLE rr_writer LOGIN IN ROLE esrc_writer;
CREATE ROLE rr_decrypter LOGIN;
CREATE SCHEMA rr AUTHORIZATION rr_owner;
GRANT USAGE ON SCHEMA rr TO esrc_writer;
GRANT EXECUTE ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean),
                          esrc.rebuild_snapshot(text), esrc.drop_snapshot(text)
    TO rr_owner;

------------------------------------------------------------------------
-- Snapshots: the reducer runs as the table's owner with every event of
-- the category appended.
------------------------------------------------------------------------
SET ROLE rr_owner;
CREATE FUNCTION rr.keep(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE sql RETURN jsonb_build_object('n', coalesce((state->>'n')::int, 0) + 1,
                                           'last', event.data);
SELECT esrc.create_snapshot('rr.kept', 'rrsnap', 'rr.keep(jsonb, esrc.event)');
RESET ROLE;
SET ROLE rr_writer;
SELECT esrc.append('rrsnap-1', 'Opened', '{"secret": 1}') IS NOT NULL AS appended;
RESET ROLE;
SELECT stream, version, state FROM rr.kept;

-- esrc_reader revoked: the next event of the category is not given to the
-- reducer, so the append fails; the table keeps what it had
REVOKE esrc_reader FROM rr_owner;
SET ROLE rr_writer;
SELECT esrc.append('rrsnap-1', 'Changed', '{"secret": 2}');
RESET ROLE;
SELECT esrc.append('rrsnap-1', 'Changed', '{"secret": 2}');
SELECT stream, version, state FROM rr.kept;
-- nor do rebuild and snapshot_at run it (a superuser calls them)
SELECT esrc.rebuild_snapshot('rr.kept');
SELECT esrc.snapshot_at('rr.kept', 'rrsnap-1', 0);
-- other categories are not held up
SELECT esrc.append('rrother-1', 'Any', '{}') IS NOT NULL AS appended;

-- SELECT on some columns of esrc.events is not enough ...
GRANT SELECT (position, stream, version, type) ON esrc.events TO rr_owner;
SELECT esrc.append('rrsnap-1', 'Changed', '{"secret": 2}');
-- ... on every column it is
SELECT format('GRANT SELECT (%s) ON esrc.events TO rr_owner',
              string_agg(quote_ident(attname), ', ' ORDER BY attnum))
FROM pg_attribute WHERE attrelid = 'esrc.events'::regclass AND attnum > 0 AND NOT attisdropped
\gexec
SELECT esrc.append('rrsnap-1', 'Changed', '{"secret": 2}') IS NOT NULL AS appended;
SELECT format('REVOKE SELECT (%s) ON esrc.events FROM rr_owner',
              string_agg(quote_ident(attname), ', ' ORDER BY attnum))
FROM pg_attribute WHERE attrelid = 'esrc.events'::regclass AND attnum > 0 AND NOT attisdropped
\gexec
SELECT esrc.append('rrsnap-1', 'Changed', '{"secret": 3}');

-- esrc_reader given back: the appends go on, and the snapshot is whole
GRANT esrc_reader TO rr_owner;
SET ROLE rr_writer;
SELECT esrc.append('rrsnap-1', 'Changed', '{"secret": 3}') IS NOT NULL AS appended;
RESET ROLE;
SELECT stream, version, state FROM rr.kept;
SELECT esrc.rebuild_snapshot('rr.kept');
SELECT esrc.snapshot_at('rr.kept', 'rrsnap-1', 0);
SELECT stream, version, state FROM rr.kept;

-- a revoke inside the appending transaction is seen by its next append
BEGIN;
SELECT esrc.append('rrsnap-1', 'Changed', '{"secret": 4}') IS NOT NULL AS appended;
REVOKE esrc_reader FROM rr_owner;
SELECT esrc.append('rrsnap-1', 'Changed', '{"secret": 5}');
ROLLBACK;
SELECT version FROM rr.kept;

-- row-level security on esrc.events would filter the owner's events
ALTER TABLE esrc.events ENABLE ROW LEVEL SECURITY;
SELECT esrc.append('rrsnap-1', 'Changed', '{"secret": 4}');
ALTER TABLE esrc.events DISABLE ROW LEVEL SECURITY;
SELECT esrc.append('rrsnap-1', 'Changed', '{"secret": 4}') IS NOT NULL AS appended;
SELECT version FROM rr.kept;

------------------------------------------------------------------------
-- Projections: a paused one (the workers' side is run-52).
------------------------------------------------------------------------
SET ROLE rr_owner;
CREATE TABLE rr.seen ("position" bigint, data jsonb);
CREATE FUNCTION rr.on_event(event esrc.event) RETURNS void
    LANGUAGE sql BEGIN ATOMIC INSERT INTO rr.seen VALUES (event.position, event.data); END;
SELECT esrc.create_projection('rr_proj', 'rr.on_event(esrc.event)', ARRAY['rrproj']) > 0 AS created;
SELECT esrc.projection_pause('rr_proj');
RESET ROLE;
REVOKE esrc_reader FROM rr_owner;
GRANT USAGE ON SCHEMA esrc TO rr_owner;
SET ROLE rr_owner;
-- reset would replay the log to the handler; resume would let the workers
-- give it new events
SELECT esrc.reset_projection('rr_proj');
SELECT esrc.projection_resume('rr_proj');
-- pausing and dropping give nothing to anyone
SELECT esrc.projection_pause('rr_proj');
RESET ROLE;
SELECT paused FROM esrc.projections WHERE name = 'rr_proj';
-- with esrc_reader back, both work
GRANT esrc_reader TO rr_owner;
SET ROLE rr_owner;
SELECT esrc.reset_projection('rr_proj');
SELECT esrc.projection_resume('rr_proj');
SELECT esrc.projection_pause('rr_proj');
-- create_projection checks the same right, row-level security included
RESET ROLE;
ALTER TABLE esrc.events ENABLE ROW LEVEL SECURITY;
SET ROLE rr_owner;
SELECT esrc.create_projection('rr_proj2', 'rr.on_event(esrc.event)', ARRAY['rrproj']);
SELECT esrc.projection_resume('rr_proj');
RESET ROLE;
ALTER TABLE esrc.events DISABLE ROW LEVEL SECURITY;
SELECT count(*) FROM esrc.projections WHERE name = 'rr_proj2';
SET ROLE rr_owner;
SELECT esrc.drop_projection('rr_proj');
RESET ROLE;

------------------------------------------------------------------------
-- Subscriptions: poll reads as the consumer, at every call.
------------------------------------------------------------------------
SET ROLE rr_owner;
SELECT esrc.create_subscription('rr_sub', ARRAY['rrsnap']);
SELECT count(*) FROM esrc.poll('rr_sub', 'm1', max_count => 1);
RESET ROLE;
REVOKE esrc_reader FROM rr_owner;
SET ROLE rr_owner;
SELECT count(*) FROM esrc.poll('rr_sub', 'm1', max_count => 1);
RESET ROLE;
GRANT esrc_reader TO rr_owner;
ALTER TABLE esrc.events ENABLE ROW LEVEL SECURITY;
SET ROLE rr_owner;
SELECT count(*) FROM esrc.poll('rr_sub', 'm1', max_count => 1);
RESET ROLE;
ALTER TABLE esrc.events DISABLE ROW LEVEL SECURITY;
SET ROLE rr_owner;
SELECT count(*) FROM esrc.poll('rr_sub', 'm1', max_count => 1);
SELECT esrc.drop_subscription('rr_sub');
RESET ROLE;

------------------------------------------------------------------------
-- esrc.streams reads the log with the caller's rights (security_invoker):
-- row-level security on esrc.events applies to it as to any query.
------------------------------------------------------------------------
SET ROLE rr_owner;
SELECT count(*) > 0 AS some_streams FROM esrc.streams;
RESET ROLE;
ALTER TABLE esrc.events ENABLE ROW LEVEL SECURITY;
SET ROLE rr_owner;
SELECT count(*) AS streams_under_rls FROM esrc.streams;
RESET ROLE;
ALTER TABLE esrc.events DISABLE ROW LEVEL SECURITY;

------------------------------------------------------------------------
-- decrypt: EXECUTE alone does not open an envelope.
------------------------------------------------------------------------
SELECT esrc.encrypt('rr-subject', 'email', '"rr@example.com"') AS envelope \gset
GRANT USAGE ON SCHEMA esrc TO rr_decrypter;
GRANT EXECUTE ON FUNCTION esrc.decrypt(text, text, jsonb) TO rr_decrypter;
SET ROLE rr_decrypter;
SELECT esrc.decrypt('rr-subject', 'email', :'envelope');
-- a value that is no envelope is returned as it is
SELECT esrc.decrypt('rr-subject', 'email', '"plain"');
RESET ROLE;
GRANT esrc_reader TO rr_decrypter;
SET ROLE rr_decrypter;
SELECT esrc.decrypt('rr-subject', 'email', :'envelope');
RESET ROLE;

------------------------------------------------------------------------
-- SECURITY DEFINER: a reducer or handler that runs as its own owner gives
-- that role the events, so that role's right is checked too, at every
-- delivery (ALTER FUNCTION ... SECURITY DEFINER later is seen).
------------------------------------------------------------------------
CREATE ROLE rr_definer LOGIN IN ROLE esrc_reader;
CREATE SCHEMA rrd AUTHORIZATION rr_definer;
GRANT USAGE ON SCHEMA rrd TO rr_owner;
SET ROLE rr_definer;
CREATE TABLE rrd.loot ("position" bigint, data jsonb);
CREATE FUNCTION rrd.keep(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$ BEGIN INSERT INTO rrd.loot VALUES (event.position, event.data); RETURN state; END $$;
CREATE FUNCTION rrd.on_event(event esrc.event) RETURNS void
    LANGUAGE sql BEGIN ATOMIC SELECT; END;
RESET ROLE;
SET ROLE rr_owner;
SELECT esrc.create_snapshot('rr.defined', 'rrdef', 'rrd.keep(jsonb, esrc.event)');
SELECT esrc.create_projection('rr_defproj', 'rrd.on_event(esrc.event)', ARRAY['rrdef']) > 0 AS created;
SELECT esrc.projection_pause('rr_defproj');
RESET ROLE;
SELECT esrc.append('rrdef-1', 'Opened', '{"secret": 1}') IS NOT NULL AS appended;
REVOKE esrc_reader FROM rr_definer;
-- the reducer would give the next event to rr_definer: the append fails,
-- and nothing reaches rr_definer's table
SELECT esrc.append('rrdef-1', 'Changed', '{"secret": 2}');
SELECT esrc.rebuild_snapshot('rr.defined');
SELECT data FROM rrd.loot ORDER BY "position";
-- a handler made SECURITY DEFINER after the projection was created
ALTER FUNCTION rrd.on_event(esrc.event) SECURITY DEFINER;
SET ROLE rr_owner;
SELECT esrc.projection_resume('rr_defproj');
SELECT esrc.reset_projection('rr_defproj');
SELECT esrc.create_projection('rr_defproj2', 'rrd.on_event(esrc.event)', ARRAY['rrdef']);
RESET ROLE;
-- with the right back, all of it works
GRANT esrc_reader TO rr_definer;
SELECT esrc.append('rrdef-1', 'Changed', '{"secret": 2}') IS NOT NULL AS appended;
SELECT data FROM rrd.loot ORDER BY "position";
SET ROLE rr_owner;
SELECT esrc.reset_projection('rr_defproj');
SELECT esrc.projection_resume('rr_defproj');
SELECT esrc.drop_projection('rr_defproj');
SELECT esrc.drop_snapshot('rr.defined');
RESET ROLE;

-- clean up
SELECT esrc.drop_snapshot('rr.kept');
DROP SCHEMA rr CASCADE;
DROP SCHEMA rrd CASCADE;
REVOKE ALL ON SCHEMA esrc FROM rr_owner, rr_decrypter;
REVOKE ALL ON FUNCTION esrc.decrypt(text, text, jsonb) FROM rr_decrypter;
REVOKE ALL ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean),
                       esrc.rebuild_snapshot(text), esrc.drop_snapshot(text)
    FROM rr_owner;
DROP ROLE rr_owner, rr_writer, rr_decrypter, rr_definer;
