-- CREATE EXTENSION creates the roles esrc_reader and esrc_writer (NOLOGIN,
-- no attributes), or adopts them when they exist: roles are cluster-wide,
-- another database's CREATE EXTENSION made them.  It refuses a role with
-- rights esrc would not have given it -- SUPERUSER, CREATEDB, CREATEROLE,
-- REPLICATION, BYPASSRLS, LOGIN, membership in another role (esrc_writer
-- in esrc_reader is expected) -- since every role granted it would gain
-- them.  In a database of its own, since it creates the extension there.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;
\set regression_db :DBNAME
CREATE DATABASE esrc_roles;
\c esrc_roles
\set SHOW_CONTEXT never

ALTER ROLE esrc_writer SUPERUSER CREATEDB LOGIN;
CREATE EXTENSION esrc;
ALTER ROLE esrc_writer NOSUPERUSER NOCREATEDB NOLOGIN;
ALTER ROLE esrc_reader CREATEROLE REPLICATION BYPASSRLS;
CREATE EXTENSION esrc;
ALTER ROLE esrc_reader NOCREATEROLE NOREPLICATION NOBYPASSRLS;
GRANT pg_read_server_files TO esrc_reader;
CREATE EXTENSION esrc;
REVOKE pg_read_server_files FROM esrc_reader;
CREATE ROLE roles_someone;
GRANT roles_someone TO esrc_writer;
CREATE EXTENSION esrc;
REVOKE roles_someone FROM esrc_writer;
ALTER ROLE esrc_snapshot_manager LOGIN;
CREATE EXTENSION esrc;
ALTER ROLE esrc_snapshot_manager NOLOGIN;

-- as another database's CREATE EXTENSION left them: adopted
CREATE EXTENSION esrc;
SELECT rolname, rolsuper, rolcreatedb, rolcreaterole, rolreplication,
       rolbypassrls, rolcanlogin,
       ARRAY(SELECT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
             WHERE m.member = r.oid ORDER BY 1) AS member_of
FROM pg_roles r WHERE rolname IN ('esrc_reader', 'esrc_writer', 'esrc_snapshot_manager') ORDER BY 1;

\c :regression_db
DROP DATABASE esrc_roles;
DROP ROLE roles_someone;
