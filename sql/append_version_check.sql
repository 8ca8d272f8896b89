-- append with version checks: versions start at 0, expected_version
-- semantics (NULL, -1, -2, N), and a stale decision raises 40001 and
-- writes nothing.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never

-- first event of a stream has version 0
SELECT esrc.append('user-alex@example.com', 'UserRegistered',
                   '{"email": "alex@example.com", "name": "Alex"}', expected_version => -1);
SELECT esrc.stream_version('user-alex@example.com');
SELECT esrc.stream_version('user-nobody@example.com');

-- N >= 0: must be exactly the last version
SELECT esrc.append('user-alex@example.com', 'UserNameChanged', '{"name": "Alex1"}', expected_version => 0);
SELECT esrc.append('user-alex@example.com', 'UserNameChanged', '{"name": "Alex2"}', expected_version => 1);
-- stale: decided at version 1, stream is at 2
SELECT esrc.append('user-alex@example.com', 'UserNameChanged', '{"name": "stale"}', expected_version => 1);
\echo SQLSTATE :SQLSTATE
-- ahead of the stream
SELECT esrc.append('user-alex@example.com', 'UserNameChanged', '{"name": "ahead"}', expected_version => 7);
\echo SQLSTATE :SQLSTATE

-- -1: the stream must not exist yet
SELECT esrc.append('user-alex@example.com', 'UserRegistered', '{}', expected_version => -1);
\echo SQLSTATE :SQLSTATE

-- -2: the stream must exist
SELECT esrc.append('user-ghost@example.com', 'UserNameChanged', '{}', expected_version => -2);
\echo SQLSTATE :SQLSTATE
SELECT esrc.append('user-alex@example.com', 'UserNameChanged', '{"name": "Alex3"}', expected_version => -2);

-- NULL: any version
SELECT esrc.append('user-alex@example.com', 'UserNameChanged', '{"name": "Alex4"}');
SELECT esrc.append('user-new@example.com', 'UserRegistered', '{"name": "New"}', expected_version => NULL);

-- nothing of the failed appends was written; versions have no holes
SELECT version, type, data->>'name' AS name
FROM esrc.read_stream('user-alex@example.com');
SELECT count(*) AS ghost_events FROM esrc.read_stream('user-ghost@example.com');

-- a failed append inside a transaction leaves nothing behind after rollback,
-- and a successful one in a rolled-back transaction is gone too
BEGIN;
SELECT esrc.append('user-alex@example.com', 'UserNameChanged', '{"name": "rolled back"}', expected_version => 4);
ROLLBACK;
SELECT esrc.stream_version('user-alex@example.com');

-- several appends to one stream in one transaction get consecutive versions
BEGIN;
SELECT esrc.append('order-1', 'Created', '{}', expected_version => -1);
SELECT esrc.append('order-1', 'ItemAdded', '{"sku": "a"}', expected_version => 0);
SELECT esrc.append('order-1', 'ItemAdded', '{"sku": "b"}', expected_version => 1);
COMMIT;
SELECT version, type FROM esrc.read_stream('order-1');

-- the catalogue of expected-version errors
SELECT esrc.append('order-1', 'X', '{}', expected_version => -1);
SELECT esrc.append('order-2', 'X', '{}', expected_version => -2);
SELECT esrc.append('order-1', 'X', '{}', expected_version => 0);

-- invariant over the whole log: every stream starts at 0 and has no holes
-- (the unique index rules out duplicates)
SELECT bool_and(first = 0 AND last + 1 = events) AS all_gap_free
FROM (SELECT min(version) AS first, max(version) AS last, count(*) AS events
      FROM esrc.events GROUP BY stream) s;

-- Several appends in one statement, and in one transaction, see each
-- other: versions follow on without a gap or a conflict.
SELECT g, esrc.append('samestmt-1', 'Tick', jsonb_build_object('g', g)) AS version
FROM generate_series(1, 4) g ORDER BY g;
SELECT esrc.append('samestmt-1', 'Tick', '{}', expected_version => 3) AS version;
BEGIN;
SELECT esrc.append('samestmt-2', 'Tick', '{}', expected_version => -1) AS version;
SELECT esrc.append_batch('samestmt-2', '[{"type": "Tick", "data": {}}, {"type": "Tick", "data": {}}]',
                         expected_version => 0) AS version;
SELECT esrc.append('samestmt-2', 'Tick', '{}', expected_version => 2) AS version;
COMMIT;
SELECT version, data FROM esrc.read_stream('samestmt-1');
SELECT esrc.stream_version('samestmt-2') AS version;

-- At REPEATABLE READ, an append on top of a version the transaction
-- cannot see is a serialization failure (40001), even without an
-- expected version; one that sees the head appends.
SELECT esrc.append('rr-1', 'Created', '{}') AS version;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT esrc.stream_version('rr-1') AS version_seen;
\! psql -X -q -o /dev/null -d esrc_regression -c "SELECT esrc.append('rr-1', 'Changed', '{}')"
SELECT esrc.append('rr-1', 'Changed', '{}');
\echo SQLSTATE :SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT esrc.append('rr-1', 'Changed', '{}') AS version;
COMMIT;
