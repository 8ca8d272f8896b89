-- Erasure reaches read models: a projection created with erase_from has the
-- rows of an erased (erase_stream) or deleted (delete_stream) stream
-- deleted from those tables by its worker, in the transaction that
-- delivers the stream's tombstone, right after the handler's call, as the
-- projection's owner.  Per-event and batch handlers; the checks at create;
-- if_not_exists compares erase_from.  Waits are bounded (pe.wait).  In a
-- database of its own: the erasures and deletes leave records (stream
-- rules, esrc.erasures) that later tests list.
\set regression_db :DBNAME
CREATE DATABASE esrc_projection_erase;
\c esrc_projection_erase
SET client_min_messages = warning;
CREATE EXTENSION esrc;
RESET client_min_messages;
\set SHOW_CONTEXT never
CREATE ROLE pe_owner LOGIN IN ROLE esrc_subscriber, esrc_writer;
CREATE ROLE pe_dpo LOGIN IN ROLE esrc_admin;
CREATE SCHEMA pe AUTHORIZATION pe_owner;
SET ROLE pe_owner;
-- a read model keyed by an opaque user id, with personal data
CREATE TABLE pe.directory (stream text PRIMARY KEY, email text, name text);
CREATE TABLE pe.logins (user_stream varchar NOT NULL, at int);
CREATE TABLE pe.other (id int);
CREATE FUNCTION pe.on_user(event esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF event.type = 'Registered' THEN
        INSERT INTO pe.directory VALUES (event.stream, event.data->>'email', event.data->>'name');
    END IF;
    -- tombstones (esrc.erased, esrc.deleted) need no code here: erase_from
END
$$;
CREATE FUNCTION pe.on_logins(events esrc.event[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    e esrc.event;
BEGIN
    FOREACH e IN ARRAY events LOOP
        IF e.type IN ('Registered', 'LoggedIn') THEN
            INSERT INTO pe.logins VALUES (e.stream, e.version);
        END IF;
    END LOOP;
END
$$;
CREATE FUNCTION pe.wait(p text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..600 LOOP
        IF (SELECT bool_and(caught_up AND last_error IS NULL) FROM esrc.projection_status
            WHERE projection = p) THEN
            RETURN 'caught up';
        END IF;
        PERFORM pg_sleep(0.1);
    END LOOP;
    RETURN 'timed out: ' || (SELECT string_agg(format('%s %s %s', state, events_behind, last_error), '; ')
                             FROM esrc.projection_status WHERE projection = p);
END
$$;

-- The checks at create.
SELECT esrc.create_projection('pe_bad', 'pe.on_user(esrc.event)', ARRAY['peuser'],
                              erase_from => ARRAY['pe.other']::regclass[]);
SELECT esrc.create_projection('pe_bad', 'pe.on_user(esrc.event)', ARRAY['peuser'],
                              erase_from => ARRAY['pe.logins']::regclass[], erase_column => 'at');
SELECT esrc.create_projection('pe_bad', 'pe.on_user(esrc.event)', ARRAY['peuser'],
                              erase_from => ARRAY['pe.directory', 'pe.directory']::regclass[]);
SELECT esrc.create_projection('pe_bad', 'pe.on_user(esrc.event)', ARRAY['peuser'],
                              erase_from => ARRAY['pe.directory']::regclass[], erase_column => NULL);
RESET ROLE;
CREATE TABLE pe_not_mine (stream text);
SET ROLE pe_owner;
SELECT esrc.create_projection('pe_bad', 'pe.on_user(esrc.event)', ARRAY['peuser'],
                              erase_from => ARRAY['public.pe_not_mine']::regclass[]);
RESET ROLE;
DROP TABLE pe_not_mine;
SET ROLE pe_owner;

-- A per-event handler erasing from pe.directory (column "stream", the
-- default); if_not_exists compares erase_from.
SELECT esrc.create_projection('pe_dir', 'pe.on_user(esrc.event)', ARRAY['peuser'],
                              erase_from => ARRAY['pe.directory']::regclass[]) > 0 AS created;
SELECT esrc.create_projection('pe_dir', 'pe.on_user(esrc.event)', ARRAY['peuser'],
                              erase_from => ARRAY['pe.directory']::regclass[], if_not_exists => true) > 0 AS same;
SELECT esrc.create_projection('pe_dir', 'pe.on_user(esrc.event)', ARRAY['peuser'],
                              if_not_exists => true);
SELECT erase_from, erase_column FROM esrc.projections WHERE name = 'pe_dir';

SELECT esrc.append('peuser-a1', 'Registered', '{"email": "ann@example.com", "name": "Ann"}');
SELECT esrc.append('peuser-b2', 'Registered', '{"email": "bob@example.com", "name": "Bob"}');
SELECT esrc.append('peuser-c3', 'Registered', '{"email": "cy@example.com", "name": "Cy"}');
SELECT pe.wait('pe_dir');
SELECT stream, email FROM pe.directory ORDER BY 1;
RESET ROLE;

-- erase one, delete another: their rows go, the third stays
SET ROLE pe_dpo;
SELECT esrc.erase_stream('peuser-a1', 'data subject request') AS redacted;
SELECT esrc.delete_stream('peuser-b2', 'account closed') AS hidden;
RESET ROLE;
SET ROLE pe_owner;
SELECT pe.wait('pe_dir');
SELECT stream, email FROM pe.directory ORDER BY 1;
-- nothing of the erased stream remains in the read model
SELECT count(*) AS rows_of_erased FROM pe.directory WHERE stream = 'peuser-a1' OR email = 'ann@example.com';
SELECT esrc.append('peuser-c3', 'LoggedIn', '{}');

-- A batch handler, erasing from the varchar column of logins; it starts
-- at the beginning: the erased stream's redacted event, then its
-- tombstone, reach it in one batch; the deleted stream's events are hidden
-- but its tombstone is delivered.
SELECT esrc.create_projection('pe_logins', 'pe.on_logins(esrc.event[])', ARRAY['peuser'], batch_size => 50,
                              erase_from => ARRAY['pe.logins']::regclass[], erase_column => 'user_stream') > 0 AS created;
SELECT pe.wait('pe_logins');
SELECT user_stream, count(*) FROM pe.logins GROUP BY 1 ORDER BY 1;
RESET ROLE;
SET ROLE pe_dpo;
SELECT esrc.erase_stream('peuser-c3', 'second request') AS redacted;
RESET ROLE;
SET ROLE pe_owner;
SELECT pe.wait('pe_dir'), pe.wait('pe_logins');
SELECT count(*) AS directory_rows FROM pe.directory;
SELECT user_stream, count(*) FROM pe.logins GROUP BY 1 ORDER BY 1;

-- A table of erase_from dropped later: the tombstone's delete fails, the
-- projection retries with the error in its status (not silently skipped).
SELECT esrc.drop_projection('pe_logins');
CREATE TABLE pe.gone (stream text);
SELECT esrc.create_projection('pe_gone', 'pe.on_user(esrc.event)', ARRAY['pegone'], start => 'end',
                              erase_from => ARRAY['pe.gone']::regclass[]) > 0 AS created;
DROP TABLE pe.gone;
SELECT esrc.append('pegone-1', 'Registered', '{}');
RESET ROLE;
SET ROLE pe_dpo;
SELECT esrc.delete_stream('pegone-1', 'test') AS hidden;
RESET ROLE;
SET ROLE pe_owner;
DO $$
BEGIN
    FOR i IN 1..600 LOOP
        EXIT WHEN (SELECT bool_or(last_error IS NOT NULL) FROM esrc.projection_status WHERE projection = 'pe_gone');
        PERFORM pg_sleep(0.1);
    END LOOP;
END
$$;
SELECT state IN ('retrying', 'blocked') AS failing, last_error_sqlstate, last_error
FROM esrc.projection_status WHERE projection = 'pe_gone';
SELECT esrc.drop_projection('pe_gone');
SELECT esrc.drop_projection('pe_dir');
RESET ROLE;
DROP SCHEMA pe CASCADE;
DROP EXTENSION esrc;
\c :regression_db
DROP DATABASE esrc_projection_erase WITH (FORCE);
DROP ROLE pe_owner, pe_dpo;
