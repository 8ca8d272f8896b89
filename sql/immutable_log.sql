-- The event log is append-only: UPDATE, DELETE and TRUNCATE are refused,
-- even for the superuser, and session_replication_role does not bypass it.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
SELECT esrc.append('ledger-1', 'Booked', '{"amount": 100}');

UPDATE esrc.events SET data = '{"amount": 1}' WHERE stream = 'ledger-1';
\echo SQLSTATE :SQLSTATE
DELETE FROM esrc.events WHERE stream = 'ledger-1';
TRUNCATE esrc.events;
SET session_replication_role = replica;
DELETE FROM esrc.events WHERE stream = 'ledger-1';
RESET session_replication_role;
SELECT data FROM esrc.read_stream('ledger-1');

-- PREPARE TRANSACTION is refused for a transaction that appended (it would
-- hold back the read horizon with no session left to release it)
BEGIN;
SELECT esrc.append('ledger-1', 'Booked', '{"amount": 5}');
PREPARE TRANSACTION 'esrc_test';
SELECT esrc.stream_version('ledger-1');
-- and after that failure the horizon is free again
SELECT esrc.safe_position() = (SELECT last_value FROM esrc.position_seq) AS horizon_at_end;
