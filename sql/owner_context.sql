-- The owner context (src/ownerctx.c): code that esrc runs for a role runs
-- as that role, as a security-restricted operation, with search_path =
-- pg_catalog, pg_temp whatever the caller's, and every setting it makes is
-- undone when it returns.  Here: the code of a snapshot table when
-- erase_stream deletes the stream's row (esrc_run_as_owner; erase_stream
-- has no SET clause of its own), a projection's handler in the workers and
-- its reset function in the caller's backend.  The caller's search_path
-- puts an attacker's lower(text) before pg_catalog's: the owner's code
-- never calls it.  (The snapshot trigger, rebuilds and reducers:
-- snapshot_owner_context and snapshot_reducers.)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;
\set SHOW_CONTEXT never
CREATE ROLE ownctx_app LOGIN IN ROLE esrc_reader, esrc_subscriber;
CREATE SCHEMA ownctx AUTHORIZATION ownctx_app;
GRANT EXECUTE ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean)
    TO ownctx_app;
CREATE SCHEMA ownctx_evil;
GRANT USAGE ON SCHEMA ownctx_evil TO PUBLIC;
CREATE FUNCTION ownctx_evil.lower(text) RETURNS text LANGUAGE sql
    AS $$ SELECT 'hijacked' $$;

CREATE FUNCTION pg_temp.wait_applied(p text, want bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    ok boolean;
BEGIN
    FOR i IN 1..600 LOOP
        SELECT bool_and(s.caught_up) AND sum(s.applied) = want INTO ok
        FROM esrc.projection_status s WHERE s.projection = p;
        IF ok THEN
            RETURN 'caught up';
        END IF;
        PERFORM pg_sleep(0.1);
    END LOOP;
    RETURN 'timed out: ' || (SELECT string_agg(format('%s %s applied %s error %s', s.partition,
                                                      s.state, s.applied, s.last_error), '; ')
                             FROM esrc.projection_status s WHERE s.projection = p);
END
$$;

-- What the owner's code sees: who runs it, whether the operation is
-- security-restricted (no temporary tables then), search_path, which
-- lower() an unqualified call finds, and what an earlier call left set.
-- Then it changes settings, which must not outlive the call.
SET ROLE ownctx_app;
CREATE TABLE ownctx.seen (what text, who name, restricted text, path text,
                          lowered text, leak text);
CREATE FUNCTION ownctx.restricted() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    CREATE TEMPORARY TABLE ownctx_probe (x int);
    DROP TABLE ownctx_probe;
    RETURN 'no';
EXCEPTION WHEN insufficient_privilege THEN
    RETURN 'yes';
END
$$;
CREATE FUNCTION ownctx.note(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ownctx.seen
        VALUES (what, current_user, ownctx.restricted(), current_setting('search_path'),
                lower('X'::text), nullif(current_setting('ownctx.leak', true), ''));
    PERFORM set_config('ownctx.leak', 'left by ' || what, false);
    PERFORM set_config('search_path', 'ownctx', false);
END
$$;

-- 1. erase_stream deletes the stream's snapshot row as the table's owner
SELECT esrc.create_snapshot('ownctx.state', 'ownctx', 'esrc.merge(jsonb, esrc.event)');
CREATE FUNCTION ownctx.on_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ownctx.note('erase deletes ' || OLD.stream);
    RETURN OLD;
END
$$;
CREATE TRIGGER on_delete BEFORE DELETE ON ownctx.state
    FOR EACH ROW EXECUTE FUNCTION ownctx.on_delete();
RESET ROLE;
SELECT esrc.append('ownctx-1', 'Opened', '{"n": 1}');
SELECT esrc.append('ownctx-2', 'Opened', '{"n": 2}');
SET search_path = ownctx_evil, pg_catalog;
SELECT lower('X'::text) AS callers_lower;
SELECT esrc.erase_stream('ownctx-1', 'owner context test');
SELECT esrc.erase_stream('ownctx-2', 'owner context test');
-- the caller's settings are its own again
SELECT current_user, current_setting('search_path') AS search_path,
       nullif(current_setting('ownctx.leak', true), '') AS leak;
RESET search_path;
SELECT what, who, restricted, path, lowered, leak FROM ownctx.seen ORDER BY what;
TRUNCATE ownctx.seen;

-- 2. a projection's handler, in a worker: three events, one after the other
SET ROLE ownctx_app;
CREATE FUNCTION ownctx.h(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ownctx.note('handler');
END
$$;
CREATE FUNCTION ownctx.r() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ownctx.note('reset');
END
$$;
SELECT esrc.create_projection('ownctx_p', 'ownctx.h(esrc.event)', ARRAY['ownctxp'],
                              partitions => 1, reset_function => 'ownctx.r()') > 0 AS created;
RESET ROLE;
SELECT count(*) FROM (SELECT esrc.append('ownctxp-' || i, 'Made', '{}')
                      FROM generate_series(1, 3) i) a;
SELECT pg_temp.wait_applied('ownctx_p', 3);
SELECT what, who, restricted, path, lowered, leak, count(*)
FROM ownctx.seen GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6;
TRUNCATE ownctx.seen;

-- 3. its reset function, in the caller's backend
SELECT esrc.projection_pause('ownctx_p');
SET search_path = ownctx_evil, pg_catalog;
SELECT esrc.reset_projection('ownctx_p');
SELECT current_user, current_setting('search_path') AS search_path,
       nullif(current_setting('ownctx.leak', true), '') AS leak;
RESET search_path;
SELECT what, who, restricted, path, lowered, leak FROM ownctx.seen;

SELECT esrc.drop_projection('ownctx_p');
SELECT esrc.drop_snapshot('ownctx.state');
REVOKE ALL ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean)
    FROM ownctx_app;
SET client_min_messages = warning;
DROP SCHEMA ownctx CASCADE;
DROP SCHEMA ownctx_evil CASCADE;
DROP ROLE ownctx_app;
RESET client_min_messages;
