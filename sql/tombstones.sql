-- The tombstones of the log's life cycle: esrc.erase_stream appends an
-- esrc.erased event and esrc.delete_stream an esrc.deleted one, at the
-- stream's next version, in the caller's transaction.  They are events
-- like any other for readers (read_stream, read_all, read_category, the
-- subscriptions), are not applied to snapshots, and are what the Kafka
-- forwarder sends as a record with a null value (test/run-48).  Event
-- types that begin with "esrc." are reserved: appends refuse them (22023).
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never

-- reserved types, in append and append_batch; nothing is written
SELECT esrc.append('tomb-1', 'esrc.erased', '{}');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append('tomb-1', 'esrc.anything', '{}');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_batch('tomb-1', '[{"type": "E", "data": {}}, {"type": "esrc.deleted", "data": {}}]');
\echo SQLSTATE :SQLSTATE
SELECT count(*) FROM esrc.events WHERE stream = 'tomb-1';
-- a type that only looks alike is a user's
SELECT esrc.append('tomb-1', 'Esrc.erased', '{}'), esrc.append('tomb-1', 'esrc', '{}');

SELECT count(*) FROM (SELECT esrc.append('tomb-' || s, 'Added', jsonb_build_object('n', g))
                      FROM generate_series(2, 4) s, generate_series(1, 3) g) a;
-- a reducer that sums "n" and lists every type it was given
CREATE FUNCTION tomb_sum(state jsonb, event esrc.event) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('n', coalesce((state->>'n')::int, 0) + coalesce((event.data->>'n')::int, 0),
                              'types', coalesce(state->'types', '[]') || to_jsonb(event.type))
$$;
SELECT esrc.create_snapshot('tomb_total', 'tomb', 'tomb_sum(jsonb, esrc.event)');
SELECT stream, version, state FROM tomb_total ORDER BY stream;

-- erase: the tombstone at the next version; the snapshot row goes and stays gone
SELECT esrc.erase_stream('tomb-2', 'subject request');
SELECT version, type, data, metadata FROM esrc.read_stream('tomb-2');
SELECT esrc.stream_version('tomb-2');
SELECT stream, version FROM tomb_total ORDER BY stream;
-- erasing again: no second tombstone
SELECT esrc.erase_stream('tomb-2', 'again');
SELECT count(*) FROM esrc.events WHERE stream = 'tomb-2' AND type = 'esrc.erased';

-- soft delete: the tombstone is the stream's only visible event; the
-- snapshot row moves to its version with the state unchanged (not reduced)
SELECT esrc.delete_stream('tomb-3', 'closed');
SELECT version, type, data, metadata FROM esrc.read_stream('tomb-3');
SELECT stream, version, state FROM tomb_total WHERE stream = 'tomb-3';
-- a later append continues after it, and the snapshot stays in step
SELECT esrc.append('tomb-3', 'Added', '{"n": 10}', expected_version => 3);
SELECT stream, version, state FROM tomb_total WHERE stream = 'tomb-3';
-- a rebuild folds the same (the tombstone skipped)
SELECT esrc.rebuild_snapshot('tomb_total');
SELECT stream, version, state FROM tomb_total ORDER BY stream;
SELECT esrc.snapshot_at('tomb_total', 'tomb-3', 3) AS at_tombstone;

-- hard delete then erase: both tombstones, in order
SELECT esrc.delete_stream('tomb-4', 'fraud', hard => true);
SELECT esrc.erase_stream('tomb-4', 'and erased');
SELECT version, type, data FROM esrc.events WHERE stream = 'tomb-4' ORDER BY version;
SELECT stream FROM tomb_total WHERE stream = 'tomb-4';
-- deleting an erased stream adds no tombstone after its esrc.erased
SELECT esrc.delete_stream('tomb-2', 'deleted after erasure');
SELECT version, type FROM esrc.events WHERE stream = 'tomb-2' ORDER BY version;

-- readers see the tombstones, in position order after the stream's events
SELECT stream, version, type FROM esrc.read_category('tomb')
WHERE type LIKE 'esrc.%' ORDER BY position;
SELECT stream, version, type FROM esrc.read_all()
WHERE stream LIKE 'tomb-%' AND type LIKE 'esrc.%' ORDER BY position;
SELECT bool_and(t.position > e.position) AS tombstone_last
FROM esrc.events t JOIN esrc.events e ON e.stream = t.stream AND e.version < t.version
WHERE t.stream IN ('tomb-2', 'tomb-3') AND t.type LIKE 'esrc.%' AND e.type NOT LIKE 'esrc.%'
  AND t.version < 4;

-- a subscription delivers them like any event (a consumer learns of the
-- deletion); one that filters by type can leave them out
SELECT esrc.create_subscription('tomb_sub', categories => ARRAY['tomb'], start => 'beginning');
SELECT stream, version, type FROM esrc.poll('tomb_sub', 'm', 1000)
WHERE type LIKE 'esrc.%' ORDER BY position;
SELECT esrc.drop_subscription('tomb_sub');

-- rolled back: no tombstone
BEGIN;
SELECT esrc.delete_stream('tomb-1', 'rolled back');
ROLLBACK;
SELECT type FROM esrc.read_stream('tomb-1') ORDER BY version;

SELECT esrc.drop_snapshot('tomb_total');
DROP FUNCTION tomb_sum(jsonb, esrc.event);
