-- Only esrc_admin may scrub: esrc.scrub is refused (42501) to esrc_writer,
-- esrc_reader and PUBLIC, and esrc.scrub_progress is readable by
-- esrc_admin alone.  Bad max_pages or restart: 22004 / 22023.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
CREATE ROLE scpriv_writer LOGIN IN ROLE esrc_writer;
CREATE ROLE scpriv_reader LOGIN IN ROLE esrc_reader;
CREATE ROLE scpriv_nobody LOGIN;
CREATE ROLE scpriv_admin LOGIN IN ROLE esrc_admin;

SET ROLE scpriv_writer;
SELECT * FROM esrc.scrub();
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.scrub_progress;
\echo SQLSTATE :SQLSTATE
RESET ROLE;
SET ROLE scpriv_reader;
SELECT * FROM esrc.scrub(1);
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.scrub_progress;
\echo SQLSTATE :SQLSTATE
RESET ROLE;
SET ROLE scpriv_nobody;
SELECT * FROM esrc.scrub(1, true);
\echo SQLSTATE :SQLSTATE
RESET ROLE;

-- bad input, as the admin
SET ROLE scpriv_admin;
SELECT * FROM esrc.scrub(NULL);
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.scrub(0);
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.scrub(-5);
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.scrub(10, NULL);
\echo SQLSTATE :SQLSTATE

-- a whole pass, then a new one; the admin may read the position but not write it
SELECT CASE WHEN relation = 'esrc.events'::regclass THEN 'events'
            WHEN relation = (SELECT reltoastrelid FROM pg_class
                             WHERE oid = 'esrc.events'::regclass) THEN 'toast' END AS rel,
       done
FROM esrc.scrub(1000000, true) ORDER BY 1;
SELECT relation, next_block = end_block AS at_end FROM esrc.scrub_progress ORDER BY 1;
-- the next call starts a new pass and scans one page
SELECT sum(pages_scanned) AS pages FROM esrc.scrub(1);
UPDATE esrc.scrub_progress SET next_block = 0;
\echo SQLSTATE :SQLSTATE
DELETE FROM esrc.scrub_progress;
\echo SQLSTATE :SQLSTATE
RESET ROLE;

-- read-only
BEGIN READ ONLY;
SELECT * FROM esrc.scrub(1);
\echo SQLSTATE :SQLSTATE
ROLLBACK;

-- the grants besides the owner's: EXECUTE on scrub and SELECT on
-- esrc.scrub_progress to esrc_admin alone
SELECT p.oid::regprocedure::text AS object, a.grantee::regrole, a.privilege_type
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
     aclexplode(p.proacl) a
WHERE n.nspname = 'esrc' AND p.proname = 'scrub' AND a.grantee <> p.proowner
UNION ALL
SELECT c.oid::regclass::text, a.grantee::regrole, a.privilege_type
FROM pg_class c, aclexplode(c.relacl) a
WHERE c.oid = 'esrc.scrub_progress'::regclass AND a.grantee <> c.relowner
ORDER BY 1, 2, 3;

DROP ROLE scpriv_writer, scpriv_reader, scpriv_nobody, scpriv_admin;
