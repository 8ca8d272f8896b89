-- Idempotency: a retried append whose ids are all stored in that stream
-- writes nothing and returns the version of the last of them, even when
-- its expected version is stale by now.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never

SELECT esrc.append('acct-1', 'Opened', '{}', NULL, -1, 'a0000000-0000-0000-0000-000000000001');
SELECT esrc.append('acct-1', 'Deposited', '{"amount": 10}', NULL, 0, 'a0000000-0000-0000-0000-000000000002');
SELECT esrc.append('acct-1', 'Deposited', '{"amount": 5}', NULL, 1, 'a0000000-0000-0000-0000-000000000003');
-- the retry of the second append: stale expected version 0, same id
SELECT esrc.append('acct-1', 'Deposited', '{"amount": 10}', NULL, 0, 'a0000000-0000-0000-0000-000000000002');
SELECT count(*) AS events FROM esrc.read_stream('acct-1');

-- a retried batch returns the version of its last event
SELECT esrc.append_batch('acct-2', '[
  {"type": "Opened", "data": {}, "id": "b0000000-0000-0000-0000-000000000001"},
  {"type": "Deposited", "data": {"amount": 1}, "id": "b0000000-0000-0000-0000-000000000002"}]', -1);
SELECT esrc.append('acct-2', 'Deposited', '{"amount": 2}');
SELECT esrc.append_batch('acct-2', '[
  {"type": "Opened", "data": {}, "id": "b0000000-0000-0000-0000-000000000001"},
  {"type": "Deposited", "data": {"amount": 1}, "id": "b0000000-0000-0000-0000-000000000002"}]', -1);
SELECT esrc.stream_version('acct-2');

-- a mix of stored and new ids is an error, nothing is written
SELECT esrc.append_batch('acct-2', '[
  {"type": "Deposited", "data": {"amount": 1}, "id": "b0000000-0000-0000-0000-000000000002"},
  {"type": "Deposited", "data": {}, "id": "b0000000-0000-0000-0000-000000000009"}]');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_batch('acct-2', '[
  {"type": "Deposited", "data": {"amount": 1}, "id": "b0000000-0000-0000-0000-000000000002"},
  {"type": "Deposited", "data": {}}]');
-- an id stored in another stream is an error
SELECT esrc.append('acct-3', 'Opened', '{}', NULL, NULL, 'a0000000-0000-0000-0000-000000000001');
\echo SQLSTATE :SQLSTATE
SELECT stream, esrc.stream_version(stream) FROM (VALUES ('acct-1'), ('acct-2'), ('acct-3')) v(stream);

-- appends without ids are never deduplicated
SELECT esrc.append('acct-4', 'Ping', '{}');
SELECT esrc.append('acct-4', 'Ping', '{}');
SELECT count(DISTINCT id) AS distinct_ids FROM esrc.read_stream('acct-4');

