-- Snapshots: filled from the stored events at creation, then kept current
-- by the trigger in the appending transaction; several snapshots on one
-- category, snapshots on other categories, categories without snapshots;
-- load, snapshot_at, rebuild, rename, drop.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;

-- Events stored before the snapshot exists.
SELECT esrc.append('snapacct-1', 'Opened', '{"owner": "ann", "balance": 0}');
SELECT esrc.append('snapacct-1', 'Deposited', '{"balance": 10}');
SELECT esrc.append('snapacct-2', 'Opened', '{"owner": "bob"}');
SELECT esrc.append('snapother-1', 'Noise', '{"x": 1}');

-- create_snapshot returns the number of events it applied.
SELECT esrc.create_snapshot('snap_accounts', 'snapacct', 'esrc.merge(jsonb, esrc.event)');
\d snap_accounts
SELECT obj_description('snap_accounts'::regclass, 'pg_class');
SELECT stream, version, state FROM snap_accounts ORDER BY stream;
SELECT snapshot, category, reducer, initial_state FROM esrc.snapshots ORDER BY 1;

-- New events are applied by the append itself.
SELECT esrc.append('snapacct-1', 'Deposited', '{"balance": 25}');
SELECT esrc.append('snapacct-3', 'Opened', '{"owner": "cy"}');
SELECT esrc.append_batch('snapacct-2', '[{"type": "Deposited", "data": {"balance": 5}},
                                         {"type": "Renamed", "data": {"owner": "bobby"}}]');
SELECT stream, version, state FROM snap_accounts ORDER BY stream;
-- updated_at is the time of the last write
SELECT updated_at AS t0 FROM snap_accounts WHERE stream = 'snapacct-3' \gset
SELECT esrc.append('snapacct-3', 'Touched', '{}');
SELECT updated_at > :'t0' AS moved, updated_at <= clock_timestamp() AS not_future
FROM snap_accounts WHERE stream = 'snapacct-3';

-- Visible in the appending transaction; a rollback leaves no trace.
BEGIN;
SELECT esrc.append('snapacct-1', 'Deposited', '{"balance": 99}');
SELECT version, state FROM snap_accounts WHERE stream = 'snapacct-1';
SELECT * FROM esrc.load('snap_accounts', 'snapacct-1');
ROLLBACK;
SELECT version, state FROM snap_accounts WHERE stream = 'snapacct-1';
BEGIN;
SAVEPOINT a;
SELECT esrc.append('snapacct-4', 'Opened', '{"owner": "dee"}');
ROLLBACK TO a;
SELECT esrc.append('snapacct-5', 'Opened', '{"owner": "eve"}');
COMMIT;
SELECT stream, version FROM snap_accounts WHERE stream IN ('snapacct-4', 'snapacct-5');

-- A snapshot created in the appending transaction applies at once; a
-- rolled-back create leaves nothing.
BEGIN;
SELECT esrc.create_snapshot('snap_txn', 'snapacct', 'esrc.merge(jsonb, esrc.event)', '{"txn": true}');
SELECT esrc.append('snapacct-1', 'Deposited', '{"balance": 77}');
SELECT version, state FROM snap_txn WHERE stream = 'snapacct-1';
ROLLBACK;
SELECT to_regclass('snap_txn') AS table_left,
       (SELECT count(*) FROM esrc.snapshots WHERE category = 'snapacct') AS definitions;
SELECT version, state FROM snap_accounts WHERE stream = 'snapacct-1';

-- load: state and version; the initial state and -1 for a new stream.
SELECT * FROM esrc.load('snap_accounts', 'snapacct-2');
SELECT * FROM esrc.load('snap_accounts', 'snapacct-new');
SELECT * FROM esrc.load('public.snap_accounts', 'snapacct-1');

-- snapshot_at: the state as of a version, by replay.
SELECT v, esrc.snapshot_at('snap_accounts', 'snapacct-1', v) FROM generate_series(-1, 2) v;
SELECT esrc.snapshot_at('snap_accounts', 'snapacct-new', -1);
SELECT esrc.snapshot_at('snap_accounts', 'snapacct-1', 3);
SELECT esrc.snapshot_at('snap_accounts', 'snapacct-new', 0);
SELECT esrc.snapshot_at('snap_accounts', 'snapacct-1', -2);

-- A second snapshot on the same category, with its own reducer and initial
-- state, and one on another category.
CREATE FUNCTION snap_count(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    RETURN jsonb_build_object('events', (state->>'events')::int + 1, 'last', event.type);
SELECT esrc.create_snapshot('snap_counts', 'snapacct', 'snap_count(jsonb, esrc.event)', '{"events": 0}');
SELECT esrc.create_snapshot('snap_other', 'snapother', 'esrc.merge(jsonb, esrc.event)');
SELECT esrc.append('snapacct-1', 'Withdrawn', '{"balance": 20}');
SELECT esrc.append('snapother-1', 'Noise', '{"y": 2}');
SELECT esrc.append('snapnone-1', 'Ignored', '{"z": 3}');
SELECT stream, version, state FROM snap_accounts ORDER BY stream;
SELECT stream, version, state FROM snap_counts ORDER BY stream;
SELECT stream, version, state FROM snap_other ORDER BY stream;

-- A snapshot sees only its category: "snapacctx-1" is not "snapacct", the
-- bare stream "snapacct" is.
SELECT esrc.append('snapacctx-1', 'Opened', '{"owner": "someone else"}');
SELECT esrc.append('snapacct', 'Opened', '{"owner": "bare"}');
SELECT stream, version FROM snap_accounts WHERE stream LIKE 'snapacct%' AND stream NOT LIKE 'snapacct-%';

-- Every row equals a fresh replay of its stream.
SELECT count(*) AS rows,
       count(*) FILTER (WHERE state = esrc.snapshot_at('snap_accounts', stream, version)) AS equal_to_replay
FROM snap_accounts;
SELECT count(*) AS rows,
       count(*) FILTER (WHERE state = esrc.snapshot_at('snap_counts', stream, version)) AS equal_to_replay
FROM snap_counts;

-- rebuild_snapshot recomputes the table from the log.
CREATE TEMP TABLE snap_before AS SELECT stream, version, state FROM snap_accounts;
UPDATE snap_accounts SET state = '{"tampered": true}' WHERE stream = 'snapacct-1';
DELETE FROM snap_accounts WHERE stream = 'snapacct-2';
SELECT esrc.rebuild_snapshot('snap_accounts');
SELECT (SELECT count(*) FROM snap_before) AS rows,
       (SELECT count(*) FROM (SELECT * FROM snap_before
                              EXCEPT SELECT stream, version, state FROM snap_accounts) d) AS differences;

-- A row out of step with its stream is caught at the next append (and
-- nothing is written); rebuild repairs it.
\set SHOW_CONTEXT never
UPDATE snap_accounts SET version = 7 WHERE stream = 'snapacct-3';
SELECT esrc.append('snapacct-3', 'Deposited', '{"balance": 1}');
DELETE FROM snap_accounts WHERE stream = 'snapacct-3';
SELECT esrc.append('snapacct-3', 'Deposited', '{"balance": 1}');
SELECT esrc.stream_version('snapacct-3');
SELECT esrc.rebuild_snapshot('snap_accounts');
SELECT esrc.append('snapacct-3', 'Deposited', '{"balance": 1}');
SELECT version, state FROM snap_accounts WHERE stream = 'snapacct-3';
\set SHOW_CONTEXT errors

-- Renaming a snapshot table keeps the snapshot (it is the table).
ALTER TABLE snap_other RENAME TO snap_other2;
SELECT esrc.append('snapother-1', 'Noise', '{"w": 4}');
SELECT stream, version, state FROM snap_other2;
SELECT snapshot FROM esrc.snapshots WHERE category = 'snapother';

-- Replacing a reducer takes effect at the next append.
CREATE OR REPLACE FUNCTION snap_count(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    RETURN jsonb_build_object('events', (state->>'events')::int + 1, 'last', lower(event.type));
SELECT esrc.append('snapacct-5', 'Deposited', '{"balance": 3}');
SELECT stream, version, state FROM snap_counts WHERE stream = 'snapacct-5';

-- drop_snapshot drops the table and the definition; the other snapshot on
-- the category goes on.
SELECT esrc.drop_snapshot('snap_counts');
SELECT to_regclass('snap_counts') AS table_left;
SELECT esrc.append('snapacct-5', 'Deposited', '{"balance": 4}');
SELECT version, state FROM snap_accounts WHERE stream = 'snapacct-5';

-- DROP TABLE of a snapshot table drops its definition too.
DROP TABLE snap_other2;
SELECT count(*) AS definitions FROM esrc.snapshots WHERE category = 'snapother';
SELECT esrc.append('snapother-1', 'Noise', '{}');

SELECT esrc.drop_snapshot('snap_accounts');
SELECT count(*) AS definitions_left FROM esrc.snapshots WHERE category LIKE 'snap%';
DROP FUNCTION snap_count(jsonb, esrc.event);
