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

-- RegisterUser: version 0 of a new stream user-<uuid>; the e-mail is in
-- the event only as an esrc.encrypt envelope.
SELECT security.register_user('alex@example.com', 'Alex') AS user_id \gset
SELECT 'user-' || :'user_id' AS stream \gset
SELECT :'user_id' = security.user_id_of(' Alex@Example.com ')::text AS found_by_email;
SELECT state->>'name' AS name, state->>'email' LIKE 'esrc:v1:%' AS email_encrypted,
       esrc.decrypt(:'stream', 'email', state->'email') #>> '{}' AS email, version
FROM esrc.load('security.users', :'stream');
SELECT count(*) AS events_with_email_in_clear
FROM esrc.events WHERE data::text LIKE '%alex@example.com%';

-- Three renames back to back: versions 1, 2, 3, in that order.
SELECT security.change_user_name(:'user_id', 'Alex1');
SELECT security.change_user_name(:'user_id', 'Alex2');
SELECT security.change_user_name(:'user_id', 'Alex3');
SELECT version, type, data->>'name' AS name
FROM esrc.read_stream(:'stream');
SELECT stream = :'stream' AS is_alex, version, state->>'name' AS name FROM security.users;
-- the snapshot row is what a replay of the stream gives
SELECT state = esrc.snapshot_at('security.users', stream, version) AS matches_replay
FROM security.users;
SELECT esrc.snapshot_at('security.users', :'stream', 1)->>'name' AS name_at_1;

-- Renaming an unknown user fails clearly and writes nothing.
SELECT security.change_user_name('00000000-0000-4000-8000-000000000000', 'Nobody');
SELECT count(*) AS events FROM esrc.events
WHERE stream = 'user-00000000-0000-4000-8000-000000000000';
SELECT count(*) AS rows FROM security.users WHERE stream <> :'stream';

-- Registering the same e-mail twice (in another case) fails, and so does
-- nothing.
SELECT security.register_user('ALEX@example.com', 'Impostor');
SELECT count(*) AS users, count(*) FILTER (WHERE state->>'name' = 'Impostor') AS impostors
FROM security.users;
SELECT count(*) AS lookup_rows FROM security.user_emails;

-- A decision against a stale state cannot be written: the append with the
-- version loaded before another rename fails with 40001 (the handlers
-- retry on it); the rolled-back append leaves no trace in the snapshot.
BEGIN;
SELECT version AS loaded_version FROM esrc.load('security.users', :'stream') \gset
SELECT security.change_user_name(:'user_id', 'Alex4');
\set VERBOSITY sqlstate
SELECT esrc.append(:'stream', 'UserNameChanged',
                   '{"name": "stale"}', expected_version => :loaded_version);
\set VERBOSITY default
ROLLBACK;
SELECT version, state->>'name' AS name FROM security.users;
SELECT count(*) AS events FROM esrc.read_stream(:'stream');

-- At REPEATABLE READ the handler does not retry inside the transaction:
-- the client retries.  (Here nothing conflicts, so it succeeds.)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT security.change_user_name(:'user_id', 'Alex4');
COMMIT;
SELECT version, state->>'name' AS name FROM security.users;

-- Erasure: the events redacted, the key forgotten, the lookup row gone;
-- nothing of Alex is left in the snapshot, the lookup or the log.
SELECT security.erase_user(:'user_id', 'GDPR request') AS redacted;
SELECT count(*) AS lookup_rows FROM security.user_emails;
SELECT security.user_id_of('alex@example.com') IS NULL AS email_unknown;
SELECT count(*) AS rows_naming_alex FROM security.users WHERE state::text LIKE '%Alex%';
SELECT count(*) AS events_naming_alex FROM esrc.events
WHERE data::text LIKE '%Alex%' OR data::text LIKE '%alex@%';

\c :regression_db
DROP DATABASE esrc_security_service;
