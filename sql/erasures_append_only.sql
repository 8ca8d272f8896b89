-- esrc.erasures, the record of erasures, is append-only: UPDATE, DELETE
-- and TRUNCATE are refused for everyone, superusers included, also with
-- session_replication_role = replica.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
SELECT esrc.append('erasureao-1', 'Opened', '{"name": "Dan"}');
SELECT esrc.erase_stream('erasureao-1', 'append-only test');

UPDATE esrc.erasures SET reason = 'forged' WHERE stream = 'erasureao-1';
\echo SQLSTATE :SQLSTATE
DELETE FROM esrc.erasures WHERE stream = 'erasureao-1';
TRUNCATE esrc.erasures;
SET session_replication_role = replica;
UPDATE esrc.erasures SET reason = 'forged' WHERE stream = 'erasureao-1';
DELETE FROM esrc.erasures WHERE stream = 'erasureao-1';
TRUNCATE esrc.erasures;
RESET session_replication_role;
SELECT what, stream, events, reason FROM esrc.erasures WHERE stream = 'erasureao-1';

-- the triggers are ENABLE ALWAYS
SELECT tgname, tgenabled FROM pg_trigger
WHERE tgrelid = 'esrc.erasures'::regclass AND NOT tgisinternal ORDER BY 1;
