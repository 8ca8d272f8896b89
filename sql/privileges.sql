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

-- no function runs with elevated rights: every SECURITY DEFINER function
-- would have to pin search_path, and esrc has none (append writes the log
-- from C, checked by its EXECUTE privilege alone)
SELECT p.proname, p.prosecdef, p.proconfig
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'esrc' AND (p.prosecdef OR p.proname LIKE 'append%') ORDER BY 1;
-- triggers on the log run as the appending role, as for any INSERT: no
-- privilege is lent to them
CREATE TABLE trigger_seen (who name, stream text);
GRANT INSERT ON trigger_seen TO esrc_test_writer;
CREATE FUNCTION record_appender() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.trigger_seen VALUES (current_user, NEW.stream);
    RETURN NULL;
END $$;
CREATE TRIGGER zz_record_appender AFTER INSERT ON esrc.events
    FOR EACH ROW EXECUTE FUNCTION record_appender();
SET ROLE esrc_test_writer;
SELECT esrc.append('priv-trigger', 'Created', '{}') AS version;
RESET ROLE;
SELECT * FROM trigger_seen;
DROP TRIGGER zz_record_appender ON esrc.events;
DROP FUNCTION record_appender();
DROP TABLE trigger_seen;
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
