-- Only esrc_admin may erase: esrc.erase_stream is refused (42501) to
-- esrc_writer, esrc_reader and PUBLIC, and esrc.erasures is readable by
-- esrc_admin alone.  esrc_admin is not granted to esrc_writer.  Nobody,
-- superusers included, may UPDATE, DELETE or TRUNCATE esrc.events or
-- esrc.erasures.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
SELECT esrc.append('lcpriv-1', 'Opened', '{"name": "Eve"}', '{"ip": "192.0.2.5"}');

-- the role: NOLOGIN, no attributes, member of nothing, granted to no esrc role
SELECT rolname, rolsuper, rolcreatedb, rolcreaterole, rolreplication,
       rolbypassrls, rolcanlogin,
       ARRAY(SELECT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
             WHERE m.member = r.oid ORDER BY 1) AS member_of,
       ARRAY(SELECT u.rolname FROM pg_auth_members m JOIN pg_roles u ON u.oid = m.member
             WHERE m.roleid = r.oid AND u.rolname LIKE 'esrc\_%' ORDER BY 1) AS esrc_members
FROM pg_roles r WHERE rolname = 'esrc_admin';
SELECT pg_has_role('esrc_writer', 'esrc_admin', 'MEMBER') AS writer_is_admin;

CREATE ROLE lcpriv_writer LOGIN IN ROLE esrc_writer;
CREATE ROLE lcpriv_reader LOGIN IN ROLE esrc_reader;
CREATE ROLE lcpriv_nobody LOGIN;
CREATE ROLE lcpriv_admin LOGIN IN ROLE esrc_admin;

SET ROLE lcpriv_writer;
SELECT esrc.erase_stream('lcpriv-1', 'writer');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.erasures;
RESET ROLE;
SET ROLE lcpriv_reader;
SELECT esrc.erase_stream('lcpriv-1', 'reader');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.erasures;
RESET ROLE;
SET ROLE lcpriv_nobody;
SELECT esrc.erase_stream('lcpriv-1', 'nobody');
\echo SQLSTATE :SQLSTATE
RESET ROLE;
SELECT data FROM esrc.read_stream('lcpriv-1');

-- an admin erases, reads the record, and can do nothing else to either table
SET ROLE lcpriv_admin;
SELECT esrc.erase_stream('lcpriv-1', 'admin');
SELECT what, stream, events, session_user_name = session_user AS session_user_recorded,
       current_user_name, reason
FROM esrc.erasures WHERE stream = 'lcpriv-1';
UPDATE esrc.events SET data = '{"erased": true}' WHERE stream = 'lcpriv-1';
\echo SQLSTATE :SQLSTATE
INSERT INTO esrc.erasures (what, stream, events, session_user_name, current_user_name, reason)
    VALUES ('erase_stream', 'lcpriv-1', 0, 'x', 'x', 'forged');
\echo SQLSTATE :SQLSTATE
DELETE FROM esrc.erasures;
SELECT count(*) FROM esrc.events;
RESET ROLE;

-- superusers: refused too, also as a replica
UPDATE esrc.events SET data = '{"erased": true}', metadata = NULL WHERE stream = 'lcpriv-1';
\echo SQLSTATE :SQLSTATE
DELETE FROM esrc.events WHERE stream = 'lcpriv-1';
TRUNCATE esrc.events;
UPDATE esrc.erasures SET reason = 'x';
DELETE FROM esrc.erasures;
TRUNCATE esrc.erasures;
SET session_replication_role = replica;
UPDATE esrc.events SET type = 'x' WHERE stream = 'lcpriv-1';
DELETE FROM esrc.events WHERE stream = 'lcpriv-1';
TRUNCATE esrc.events;
DELETE FROM esrc.erasures;
TRUNCATE esrc.erasures;
RESET session_replication_role;
SELECT version, type, data FROM esrc.read_stream('lcpriv-1');

-- the grants besides the owner's (grantee 0, shown as -, would be PUBLIC):
-- EXECUTE on erase_stream and SELECT on esrc.erasures to esrc_admin alone
SELECT p.oid::regprocedure::text AS object, a.grantee::regrole, a.privilege_type
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
     aclexplode(p.proacl) a
WHERE n.nspname = 'esrc' AND p.proname IN ('erase_stream', 'erasures_immutable')
  AND a.grantee <> p.proowner
UNION ALL
SELECT c.oid::regclass::text, a.grantee::regrole, a.privilege_type
FROM pg_class c, aclexplode(c.relacl) a
WHERE c.oid IN ('esrc.erasures'::regclass, 'esrc.erasure_id_seq'::regclass)
  AND a.grantee <> c.relowner
ORDER BY 1, 2, 3;

-- CREATE EXTENSION adopts an existing esrc_admin only without extra
-- rights, as it does esrc_reader and esrc_writer (in a database of its own)
\set regression_db :DBNAME
CREATE DATABASE esrc_lcpriv;
\c esrc_lcpriv
\set SHOW_CONTEXT never
ALTER ROLE esrc_admin LOGIN CREATEROLE;
CREATE EXTENSION esrc;
ALTER ROLE esrc_admin NOLOGIN NOCREATEROLE;
GRANT esrc_writer TO esrc_admin;
CREATE EXTENSION esrc;
REVOKE esrc_writer FROM esrc_admin;
CREATE EXTENSION esrc;
SELECT count(*) FROM esrc.erasures;
\c :regression_db
DROP DATABASE esrc_lcpriv;

DROP ROLE lcpriv_writer, lcpriv_reader, lcpriv_nobody, lcpriv_admin;
