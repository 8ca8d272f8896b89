-- What a snapshot table may carry besides its four columns, and that the
-- trigger keeps it right either way: for a table as create_snapshot makes
-- it the trigger writes rows directly (index lookup, executor's simple
-- insert/update: indexes, constraints and the table's own triggers are
-- maintained); with extra columns or forced row-level security it runs
-- SQL, so defaults and policies apply.  Also: a definition inserted by
-- hand (as a restore does) for a table made by hand, and several events of
-- one stream inserted by one statement.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;

SELECT esrc.create_snapshot('snaptab_plain', 'snaptab', 'esrc.merge(jsonb, esrc.event)');
SELECT esrc.create_snapshot('snaptab_extra', 'snaptab', 'esrc.merge(jsonb, esrc.event)');
SELECT esrc.create_snapshot('snaptab_rls', 'snaptab', 'esrc.merge(jsonb, esrc.event)');

-- an index on the state and a trigger on the plain table
CREATE INDEX snaptab_plain_owner ON snaptab_plain ((state->>'owner'));
CREATE TABLE snaptab_audit (op text, stream text, version bigint);
CREATE FUNCTION snaptab_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.snaptab_audit VALUES (TG_OP, NEW.stream, NEW.version);
    RETURN NEW;
END
$$;
CREATE TRIGGER snaptab_audit AFTER INSERT OR UPDATE ON snaptab_plain
    FOR EACH ROW EXECUTE FUNCTION snaptab_audit();
-- an extra column with a default
ALTER TABLE snaptab_extra ADD COLUMN note text NOT NULL DEFAULT 'from default';
-- forced row-level security with a policy that lets everything through,
-- and an owner it applies to (superusers bypass it)
CREATE ROLE snaptab_owner IN ROLE esrc_reader;
ALTER TABLE snaptab_rls OWNER TO snaptab_owner;
ALTER TABLE snaptab_rls ENABLE ROW LEVEL SECURITY;
ALTER TABLE snaptab_rls FORCE ROW LEVEL SECURITY;
CREATE POLICY snaptab_all ON snaptab_rls USING (true) WITH CHECK (true);

-- (DEBUG1 says which way the trigger writes each table)
SET client_min_messages = debug1;
SELECT esrc.append('snaptab-1', 'Opened', '{"owner": "ann"}');
RESET client_min_messages;
SELECT esrc.append('snaptab-1', 'Renamed', '{"owner": "anna"}');
SELECT esrc.append('snaptab-2', 'Opened', '{"owner": "bob"}');
UPDATE snaptab_extra SET note = 'kept' WHERE stream = 'snaptab-2';
SELECT esrc.append('snaptab-2', 'Renamed', '{"owner": "bobby"}');

SELECT stream, version, state FROM snaptab_plain ORDER BY stream;
SELECT stream, version, state, note FROM snaptab_extra ORDER BY stream;
SELECT stream, version, state FROM snaptab_rls ORDER BY stream;
SELECT * FROM snaptab_audit ORDER BY stream, version;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT stream FROM snaptab_plain WHERE state->>'owner' = 'anna';
SELECT stream FROM snaptab_plain WHERE state->>'owner' = 'anna';
SELECT stream FROM snaptab_plain WHERE state->>'owner' = 'ann';
RESET enable_seqscan;

-- A table made by hand (columns in another order) and a definition
-- inserted by hand: validated, dependencies recorded, filled by rebuild.
CREATE TABLE snaptab_hand (updated_at timestamptz NOT NULL, state jsonb NOT NULL,
                           version bigint NOT NULL, stream text PRIMARY KEY);
INSERT INTO esrc.snapshots (snapshot, category, reducer, initial_state)
VALUES ('snaptab_hand', 'snaptab', 'esrc.merge(jsonb, esrc.event)', '{"hand": true}');
SELECT snapshot, reducer FROM esrc.snapshots WHERE snapshot = 'snaptab_hand'::regclass;
SELECT pg_describe_object(refclassid, refobjid, 0) AS depends_on, deptype FROM pg_depend
WHERE classid = 'pg_class'::regclass AND objid = 'snaptab_hand'::regclass
  AND refclassid <> 'pg_namespace'::regclass ORDER BY 1;
SELECT esrc.rebuild_snapshot('snaptab_hand');
-- tables that cannot hold a snapshot are refused
\set SHOW_CONTEXT never
CREATE TABLE snaptab_bad (stream text PRIMARY KEY, version int, state jsonb, updated_at timestamptz);
INSERT INTO esrc.snapshots (snapshot, category, reducer, initial_state)
VALUES ('snaptab_bad', 'snaptab', 'esrc.merge(jsonb, esrc.event)', '{}');
CREATE TABLE snaptab_ok (stream text PRIMARY KEY, version bigint, state jsonb, updated_at timestamptz);
INSERT INTO esrc.snapshots (snapshot, category, reducer, initial_state)
VALUES ('snaptab_ok', 'snap-tab', 'esrc.merge(jsonb, esrc.event)', '{}');
INSERT INTO esrc.snapshots (snapshot, category, reducer, initial_state)
VALUES ('snaptab_ok', 'snaptab', 'pg_catalog.jsonb_concat(jsonb, jsonb)', '{}');
INSERT INTO esrc.snapshots (snapshot, category, reducer, initial_state)
VALUES ('snaptab_ok', 'snaptab', 'no_such_function(jsonb, esrc.event)', '{}');
UPDATE esrc.snapshots SET initial_state = '{}' WHERE snapshot = 'snaptab_hand'::regclass;
\set SHOW_CONTEXT errors
DROP TABLE snaptab_bad, snaptab_ok;

-- Only what esrc.append and esrc.append_batch write is applied.  Rows put
-- into the log otherwise (here a superuser's INSERT; pg_restore and COPY
-- alike) are not: the next append finds the snapshots behind, and
-- rebuild_snapshot catches up.
INSERT INTO esrc.events (position, stream, version, type, data, id, recorded_at, category)
SELECT nextval('esrc.position_seq'), 'snaptab-3', g, 'Counted', jsonb_build_object('n', g),
       gen_random_uuid(), now(), 'snaptab'
FROM generate_series(0, 2) g;
SELECT count(*) AS rows_for_inserted_stream FROM snaptab_plain WHERE stream = 'snaptab-3';
\set SHOW_CONTEXT never
SELECT esrc.append('snaptab-3', 'Counted', '{"last": true}');
\set SHOW_CONTEXT errors
SELECT esrc.rebuild_snapshot(snapshot::text) FROM esrc.snapshots WHERE category = 'snaptab' ORDER BY 1;
SELECT esrc.append('snaptab-3', 'Counted', '{"last": true}');

-- Every table equals a replay, whichever path wrote it.
SELECT s.snapshot,
       (SELECT count(*) FROM esrc.streams WHERE category = 'snaptab') AS streams,
       t.rows, t.equal_to_replay
FROM esrc.snapshots s,
     LATERAL (SELECT * FROM (VALUES
        ((SELECT count(*) FROM snaptab_plain), (SELECT count(*) FROM snaptab_plain x WHERE x.version = esrc.stream_version(x.stream) AND x.state = esrc.snapshot_at('snaptab_plain', x.stream, x.version)), 'snaptab_plain'),
        ((SELECT count(*) FROM snaptab_extra), (SELECT count(*) FROM snaptab_extra x WHERE x.version = esrc.stream_version(x.stream) AND x.state = esrc.snapshot_at('snaptab_extra', x.stream, x.version)), 'snaptab_extra'),
        ((SELECT count(*) FROM snaptab_rls), (SELECT count(*) FROM snaptab_rls x WHERE x.version = esrc.stream_version(x.stream) AND x.state = esrc.snapshot_at('snaptab_rls', x.stream, x.version)), 'snaptab_rls'),
        ((SELECT count(*) FROM snaptab_hand), (SELECT count(*) FROM snaptab_hand x WHERE x.version = esrc.stream_version(x.stream) AND x.state = esrc.snapshot_at('snaptab_hand', x.stream, x.version)), 'snaptab_hand')
     ) v(rows, equal_to_replay, name) WHERE v.name = s.snapshot::text) t
WHERE s.category = 'snaptab'
ORDER BY s.snapshot::text;
SELECT stream, version, state FROM snaptab_hand ORDER BY stream;
SELECT stream, version, state, note FROM snaptab_extra ORDER BY stream;
SELECT op, count(*) FROM snaptab_audit GROUP BY op ORDER BY op;

SELECT esrc.drop_snapshot(snapshot::text) FROM esrc.snapshots WHERE category = 'snaptab';
DROP TABLE snaptab_audit;
DROP FUNCTION snaptab_audit();
DROP ROLE snaptab_owner;
