-- esrc.erase_stream(stream, reason) redacts every event of a stream in
-- place: data becomes {"erased": true} and metadata null, while position,
-- stream, version, type, id, recorded_at and category stay.  It appends
-- the stream's tombstone (type esrc.erased, data {"erased": true}, metadata
-- null) at the next version, removes the stream's rows from the snapshot
-- tables of its category and records the call in esrc.erasures, all in the
-- caller's transaction.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
SELECT esrc.append('erasure-1', 'Opened', '{"name": "Alice"}', '{"ip": "192.0.2.1"}',
                   id => 'e0000000-0000-4000-8000-000000000001');
SELECT esrc.append('erasure-1', 'Renamed', '{"name": "Alicia"}');
SELECT esrc.append('erasure-1', 'Noted', '{"note": "x"}', '{"by": "clerk"}');
SELECT esrc.append('erasure-2', 'Opened', '{"name": "Bob"}', '{"ip": "192.0.2.2"}');
SELECT esrc.create_snapshot('erasure_state', 'erasure', 'esrc.merge(jsonb, esrc.event)');
SELECT stream, version, state FROM erasure_state ORDER BY stream;
CREATE TEMP TABLE before_erase AS
    SELECT position, stream, version, type, id, recorded_at, category
    FROM esrc.events WHERE stream LIKE 'erasure-%';

-- returns the number of events redacted, and records the call in its
-- transaction
BEGIN;
SELECT esrc.erase_stream('erasure-1', 'data subject request 17');
SELECT what, stream, events, session_user_name, current_user_name, reason,
       erased_at = now() AS at_transaction_start
FROM esrc.erasures WHERE stream = 'erasure-1' ORDER BY id;
COMMIT;

-- every event is still there, changed only in data and metadata
SELECT version, type, data, metadata FROM esrc.read_stream('erasure-1');
SELECT count(*) AS unchanged_columns
FROM esrc.events e JOIN before_erase b USING (position, stream, version, type, id, recorded_at, category);
-- the other stream is untouched
SELECT version, data, metadata FROM esrc.read_stream('erasure-2');
SELECT esrc.stream_version('erasure-1');
-- the stream's snapshot row is gone, the other stream's stays
SELECT stream, version, state FROM erasure_state ORDER BY stream;
-- an idempotent retry of an erased append still finds its id
SELECT esrc.append('erasure-1', 'Opened', '{"name": "Alice"}', '{"ip": "192.0.2.1"}',
                   expected_version => -1, id => 'e0000000-0000-4000-8000-000000000001');

-- an erased stream has no snapshot state: load and snapshot_at raise 55000
-- (the detail names the time of the erasure, checked below)
\set VERBOSITY terse
SELECT * FROM esrc.load('erasure_state', 'erasure-1');
SELECT esrc.snapshot_at('erasure_state', 'erasure-1', 2);
SELECT esrc.snapshot_at('erasure_state', 'erasure-1', -1);
-- and takes no new events, in a category with snapshots too (55000, not
-- XX001), whatever expected_version says; nothing is written
SELECT esrc.append('erasure-1', 'Reopened', '{"name": "A."}');
SELECT esrc.append('erasure-1', 'Reopened', '{"name": "A."}', expected_version => 2);
SELECT esrc.append_batch('erasure-1', '[{"type": "Reopened", "data": {}}]');
\set VERBOSITY default
SET datestyle = 'ISO, MDY';  -- the detail's timestamp is in ISO
DO $$
DECLARE
    msg text; detail text; hint text; state text;
    at timestamptz := (SELECT min(erased_at) FROM esrc.erasures WHERE stream = 'erasure-1');
BEGIN
    BEGIN
        PERFORM esrc.load('erasure_state', 'erasure-1');
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    END;
    RAISE NOTICE '% % / detail names the erasure: % / %', state, msg,
        detail = format('esrc.erase_stream() erased it at %s; its events are redacted and it has no snapshot state.', at),
        hint;
    BEGIN
        PERFORM esrc.append('erasure-1', 'Reopened', '{}');
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS hint = PG_EXCEPTION_HINT;
    END;
    RAISE NOTICE 'append: %', hint;
END
$$;
RESET datestyle;
SELECT esrc.stream_version('erasure-1');
-- a stream that was never erased still loads as new, and the other stream
-- loads as before
SELECT * FROM esrc.load('erasure_state', 'erasure-9');
SELECT * FROM esrc.load('erasure_state', 'erasure-2');

-- create_snapshot and rebuild_snapshot, online and in place, write no row
-- for an erased stream
SELECT esrc.create_snapshot('erasure_state2', 'erasure', 'esrc.merge(jsonb, esrc.event)');
SELECT stream, version, state FROM erasure_state2 ORDER BY stream;
SELECT esrc.rebuild_snapshot('erasure_state');
SELECT stream, version, state FROM erasure_state ORDER BY stream;
CREATE FUNCTION erasure_noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
CREATE TRIGGER noop AFTER INSERT ON erasure_state2 FOR EACH ROW EXECUTE FUNCTION erasure_noop();
SET client_min_messages = debug1;
SELECT esrc.rebuild_snapshot('erasure_state2');
RESET client_min_messages;
SELECT stream, version, state FROM erasure_state2 ORDER BY stream;
SELECT esrc.drop_snapshot('erasure_state2');
DROP FUNCTION erasure_noop();

-- erasing it again redacts nothing and is recorded with 0 events
SELECT esrc.erase_stream('erasure-1', 'second request');
SELECT events, reason FROM esrc.erasures WHERE stream = 'erasure-1' ORDER BY id;

-- events loaded into the log after an erasure, other than by esrc.append
-- (here a superuser's INSERT, after the tombstone at version 3), are
-- redacted by the next erase, which appends no second tombstone (the
-- stream is erased already); meanwhile an append is refused by the
-- snapshot trigger (55000, not XX001), and the rebuild skips the stream
INSERT INTO esrc.events (position, stream, version, type, data, id, recorded_at, category)
VALUES (nextval('esrc.position_seq'), 'erasure-1', 4, 'Reopened', '{"name": "A."}',
        gen_random_uuid(), now(), 'erasure');
\set VERBOSITY terse
SELECT esrc.append('erasure-1', 'Reopened', '{"name": "A."}');
\set VERBOSITY default
SELECT esrc.rebuild_snapshot('erasure_state');
SELECT stream, version FROM erasure_state ORDER BY stream;
SELECT esrc.erase_stream('erasure-1', 'third request');
SELECT version, type, data, metadata FROM esrc.read_stream('erasure-1');
DROP TABLE erasure_state;

-- without snapshots, appends to an erased stream are refused all the same
\set VERBOSITY terse
SELECT esrc.append('erasure-1', 'Reopened', '{"name": "A."}');
\set VERBOSITY default

-- rolled back with its transaction, audit row included
BEGIN;
SELECT esrc.erase_stream('erasure-2', 'rolled back');
SELECT data FROM esrc.read_stream('erasure-2');
ROLLBACK;
SELECT data, metadata FROM esrc.read_stream('erasure-2');
SELECT count(*) FROM esrc.erasures WHERE stream = 'erasure-2';

-- the log stays immutable for everyone else, even in the transaction of
-- an erase, even for an UPDATE that writes exactly the redaction
BEGIN;
SELECT esrc.erase_stream('erasure-2', 'in a transaction');
UPDATE esrc.events SET data = '{"erased": true}', metadata = NULL WHERE stream = 'erasure-2';
\echo SQLSTATE :SQLSTATE
ROLLBACK;
BEGIN;
SELECT esrc.erase_stream('erasure-2', 'in a transaction');
UPDATE esrc.events SET type = 'Forged' WHERE stream = 'erasure-2';
ROLLBACK;
UPDATE esrc.events SET data = '{"erased": true}', metadata = NULL WHERE stream = 'erasure-2';
DELETE FROM esrc.events WHERE stream = 'erasure-1';
SELECT data FROM esrc.read_stream('erasure-2');

-- with session_replication_role = replica too
SET session_replication_role = replica;
SELECT esrc.erase_stream('erasure-2', 'as a replica');
UPDATE esrc.events SET data = '{}' WHERE stream = 'erasure-2';
RESET session_replication_role;
SELECT version, data, metadata FROM esrc.read_stream('erasure-2');

-- another BEFORE UPDATE trigger on the log could change what passes: refused
SELECT esrc.append('erasure-3', 'Opened', '{"name": "Carol"}');
CREATE FUNCTION erasure_sneak() RETURNS trigger LANGUAGE plpgsql AS
    $$BEGIN NEW.data := '{"name": "Carol"}'; RETURN NEW; END$$;
CREATE TRIGGER zz_sneak BEFORE UPDATE ON esrc.events
    FOR EACH ROW EXECUTE FUNCTION erasure_sneak();
SELECT esrc.erase_stream('erasure-3', 'with a trigger');
\echo SQLSTATE :SQLSTATE
ALTER TABLE esrc.events DISABLE TRIGGER zz_sneak;
SELECT esrc.erase_stream('erasure-3', 'trigger disabled');
DROP TRIGGER zz_sneak ON esrc.events;
DROP FUNCTION erasure_sneak();
SELECT data FROM esrc.read_stream('erasure-3');

-- bad input: nothing is erased or recorded
SELECT esrc.erase_stream('erasure-404', 'no such stream');
\echo SQLSTATE :SQLSTATE
SELECT esrc.erase_stream(NULL, 'r');
\echo SQLSTATE :SQLSTATE
SELECT esrc.erase_stream('', 'r');
\echo SQLSTATE :SQLSTATE
SELECT esrc.erase_stream('erasure-2', NULL);
\echo SQLSTATE :SQLSTATE
SELECT esrc.erase_stream('erasure-2', '');
\echo SQLSTATE :SQLSTATE
BEGIN READ ONLY;
SELECT esrc.erase_stream('erasure-2', 'read only');
\echo SQLSTATE :SQLSTATE
ROLLBACK;
SELECT count(*) FROM esrc.erasures WHERE stream IN ('erasure-404', '');
