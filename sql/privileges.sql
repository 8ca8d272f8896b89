-- Roles: esrc_writer appends and reads, esrc_reader reads, anyone else can
-- do nothing.  Writers have no privilege on the table itself.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
CREATE ROLE esrc_test_writer LOGIN IN ROLE esrc_writer;
CREATE ROLE esrc_test_reader LOGIN IN ROLE esrc_reader;
CREATE ROLE esrc_test_nobody LOGIN;
SELECT esrc.append('priv-1', 'Created', '{}');

SET ROLE esrc_test_writer;
SELECT esrc.append('priv-1', 'Changed', '{}', expected_version => 0);
SELECT esrc.append_batch('priv-1', '[{"type": "Changed", "data": {}}]');
SELECT version FROM esrc.read_stream('priv-1');
SELECT count(*) > 0 AS reads_all FROM esrc.read_all();
-- but cannot write around the version checks
INSERT INTO esrc.events VALUES (999999, 'priv-1', 9, 'Forged', '{}', NULL, gen_random_uuid(), now(), 'priv');
\echo SQLSTATE :SQLSTATE
UPDATE esrc.events SET type = 'x';
SELECT nextval('esrc.position_seq');
RESET ROLE;

SET ROLE esrc_test_reader;
SELECT version FROM esrc.read_stream('priv-1');
SELECT esrc.stream_version('priv-1');
SELECT count(*) > 0 AS reads_category FROM esrc.read_category('priv');
SELECT esrc.safe_position() > 0 AS horizon;
SELECT count(*) FROM esrc.streams WHERE stream = 'priv-1';
SELECT esrc.append('priv-1', 'Changed', '{}');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_batch('priv-1', '[{"type": "Changed", "data": {}}]');
RESET ROLE;

SET ROLE esrc_test_nobody;
SELECT esrc.append('priv-1', 'Changed', '{}');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_stream('priv-1');
SELECT * FROM esrc.read_all();
SELECT esrc.stream_version('priv-1');
SELECT * FROM esrc.events;
SELECT * FROM esrc.streams;
RESET ROLE;

-- SECURITY DEFINER functions pin search_path
SELECT p.proname, p.prosecdef, p.proconfig
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'esrc' AND p.prosecdef ORDER BY 1;
-- and no function of the schema is executable by PUBLIC
SELECT count(*) AS public_functions
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'esrc' AND has_function_privilege('public', p.oid, 'EXECUTE');

-- a hostile search_path does not change what append does: an operator
-- "=" on text that matches everything would make the head lookup of a new
-- stream find other streams' events
CREATE SCHEMA hostile;
CREATE FUNCTION hostile.always(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR hostile.= (LEFTARG = text, RIGHTARG = text, FUNCTION = hostile.always);
SET search_path = hostile, pg_catalog;
SELECT 'a'::text = 'b'::text AS hijacked;
SELECT esrc.append('priv-2', 'Created', '{}', expected_version => -1) AS version;
SELECT esrc.stream_version('priv-2') AS version;
SELECT count(*) AS events FROM esrc.read_stream('priv-2');
RESET search_path;
DROP SCHEMA hostile CASCADE;

DROP ROLE esrc_test_writer, esrc_test_reader, esrc_test_nobody;
