-- The motivating scenario (examples/security_service.sql) as a regression
-- test: commands are decided against the latest committed state, and the
-- snapshot moves with the log in the same transaction.
--
-- It runs in a database of its own: other tests use user-alex@example.com.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;
\set regression_db :DBNAME
CREATE DATABASE esrc_security_service;
\c esrc_security_service
CREATE EXTENSION esrc;
-- Load the example quietly (any error in it still shows).
\getenv esrc_root ESRC_ROOT
\set ECHO none
\o /dev/null
\i :esrc_root/examples/security_service.sql
\o
\set ECHO all
SELECT snapshot, category, reducer, initial_state FROM esrc.snapshots;

-- RegisterUser: version 0.
SELECT security.register_user('alex@example.com', 'Alex');
SELECT * FROM esrc.load('security.users', 'user-alex@example.com');

-- Three renames back to back: versions 1, 2, 3, in that order.
SELECT security.change_user_name('alex@example.com', 'Alex1');
SELECT security.change_user_name('alex@example.com', 'Alex2');
SELECT security.change_user_name('alex@example.com', 'Alex3');
SELECT version, type, data->>'name' AS name
FROM esrc.read_stream('user-alex@example.com');
SELECT stream, version, state FROM security.users;
-- the snapshot row is what a replay of the stream gives
SELECT state = esrc.snapshot_at('security.users', stream, version) AS matches_replay
FROM security.users;
SELECT esrc.snapshot_at('security.users', 'user-alex@example.com', 1)->>'name' AS name_at_1;

-- Renaming an unknown user fails clearly and writes nothing.
SELECT security.change_user_name('nobody@example.com', 'Nobody');
SELECT count(*) AS events FROM esrc.events WHERE stream = 'user-nobody@example.com';
SELECT count(*) AS rows FROM security.users WHERE stream = 'user-nobody@example.com';
SELECT * FROM esrc.load('security.users', 'user-nobody@example.com');

-- Registering twice fails, and so does nothing.
SELECT security.register_user('alex@example.com', 'Impostor');
SELECT version, state->>'name' AS name FROM security.users;

-- A decision against a stale state cannot be written: the append with the
-- version loaded before another rename fails with 40001 (the handlers
-- retry on it); the rolled-back append leaves no trace in the snapshot.
BEGIN;
SELECT version AS loaded_version FROM esrc.load('security.users', 'user-alex@example.com') \gset
SELECT security.change_user_name('alex@example.com', 'Alex4');
SELECT esrc.append('user-alex@example.com', 'UserNameChanged',
                   '{"email": "alex@example.com", "name": "stale"}', expected_version => :loaded_version);
ROLLBACK;
SELECT version, state->>'name' AS name FROM security.users;
SELECT count(*) AS events FROM esrc.read_stream('user-alex@example.com');

-- At REPEATABLE READ the handler does not retry inside the transaction:
-- the client retries.  (Here nothing conflicts, so it succeeds.)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT security.change_user_name('alex@example.com', 'Alex4');
COMMIT;
SELECT version, state->>'name' AS name FROM security.users;

\c :regression_db
DROP DATABASE esrc_security_service;
