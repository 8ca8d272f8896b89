-- esrc.delete_stream(stream, reason, hard DEFAULT false) appends the
-- stream's tombstone (an esrc.deleted event, data {"hard": ...}) at its next
-- version and hides every event before it (truncate_before becomes the
-- tombstone's version), so the stream reads as just the tombstone.  A soft
-- delete lets later appends continue after the tombstone, visible; a hard
-- delete refuses every later append, for good (55000).  Both are recorded
-- in esrc.erasures.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
SELECT count(*) FROM (SELECT esrc.append('del-' || s, 'E', jsonb_build_object('i', g))
                      FROM generate_series(1, 2) s, generate_series(0, 4) g) a;
CREATE OR REPLACE FUNCTION versions(s text) RETURNS text LANGUAGE sql AS
    $$SELECT coalesce(string_agg(version::text, ','), '') FROM esrc.read_stream(s)$$;

-- soft delete: returns the number of events hidden
SELECT esrc.delete_stream('del-1', 'customer left');
SELECT versions('del-1'), esrc.stream_version('del-1');
SELECT version, type, data, metadata FROM esrc.read_stream('del-1');
-- deleting again with nothing appended adds no second tombstone
SELECT esrc.delete_stream('del-1', 'customer left, retried');
SELECT versions('del-1');
SELECT count(*) FROM esrc.read_category('del') WHERE stream = 'del-1';
SELECT count(*) FROM esrc.read_all() WHERE stream = 'del-1';
SELECT count(*) FROM esrc.read_stream_backward('del-1');
-- the events are still stored
SELECT count(*) FROM esrc.events WHERE stream = 'del-1';
-- a later append continues at the next version and is visible
SELECT esrc.append('del-1', 'E', '{"back": true}');
SELECT esrc.append('del-1', 'E', '{}', expected_version => 6);
SELECT versions('del-1');
-- deleting again hides them too
SELECT esrc.delete_stream('del-1', 'left again');
SELECT versions('del-1');
-- clearing the rules brings every event back
SELECT esrc.set_stream_rules('del-1', reason => 'restored');
SELECT versions('del-1');

-- hard delete: everything hidden, every later append refused
SELECT esrc.delete_stream('del-2', 'fraud', hard => true);
SELECT versions('del-2');
SELECT version, type, data FROM esrc.read_stream('del-2');
SELECT esrc.append('del-2', 'E', '{}');
SELECT esrc.append_batch('del-2', '[{"type": "E", "data": {}}]');
SELECT esrc.append('del-2', 'E', '{}', expected_version => 4);
SELECT esrc.stream_version('del-2');
-- its rules cannot change; deleting it again changes nothing (returns 0)
SELECT esrc.set_stream_rules('del-2', reason => 'undo');
SELECT esrc.delete_stream('del-2', 'retry', hard => true);
SELECT esrc.delete_stream('del-2', 'retry soft');
SELECT stream, truncate_before, max_count, max_age, hard_deleted
FROM esrc.stream_rules WHERE stream LIKE 'del-%' ORDER BY stream;

-- a hard delete in an open transaction: the append waits for it (see
-- test/specs/stream_rules_concurrency.spec); after a rollback appends go on
SELECT esrc.append('del-3', 'E', '{}');
BEGIN;
SELECT esrc.delete_stream('del-3', 'oops', hard => true);
SELECT esrc.append('del-3', 'E', '{}');
ROLLBACK;
SELECT esrc.append('del-3', 'E', '{}');
SELECT versions('del-3');

-- a soft delete keeps the stream's other rules
SELECT esrc.set_stream_rules('del-3', max_count => 5, reason => 'keep 5');
SELECT esrc.delete_stream('del-3', 'gone');
SELECT truncate_before, max_count, hard_deleted FROM esrc.stream_rules WHERE stream = 'del-3';

SELECT what, stream, events, reason, rules FROM esrc.erasures
WHERE stream LIKE 'del-%' ORDER BY id;

-- bad input
SELECT esrc.delete_stream('del-nobody', 'x');
SELECT esrc.delete_stream('del-1', NULL);
SELECT esrc.delete_stream('del-1', '');
SELECT esrc.delete_stream('del-1', 'x', NULL);
SELECT esrc.delete_stream(NULL, 'x');
SELECT count(*) FROM esrc.erasures WHERE reason = 'x';
-- read-only transactions
BEGIN READ ONLY;
SELECT esrc.delete_stream('del-1', 'x');
ROLLBACK;
-- only esrc_admin
CREATE ROLE del_writer IN ROLE esrc_writer;
SET ROLE del_writer;
SELECT esrc.delete_stream('del-1', 'x');
RESET ROLE;
DROP ROLE del_writer;
DROP FUNCTION versions(text);
