-- Projections: create, the catalog, the handler's context, pause and
-- resume, reset, drop (also while a worker runs it), and every bad input.
-- The server runs projection workers, so what they produce is timing-
-- dependent: results of the handlers are only looked at after
-- pj.wait_caught_up (a bounded wait until every partition caught up and
-- applied the given number of events), or while the projection is paused.
-- A fresh log, so that positions are known.
DROP EXTENSION IF EXISTS esrc CASCADE;
CREATE EXTENSION esrc;
\set SHOW_CONTEXT never
\set VERBOSITY default

CREATE SCHEMA pj;
CREATE TABLE pj.applied (
    projection text, "position" bigint, stream text, version bigint,
    who name, path text
);
CREATE TABLE pj.resets (projection text, who name);
-- the handlers: record the event, the role they run as and their search_path
CREATE FUNCTION pj.h(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pj.applied VALUES ('p1', e.position, e.stream, e.version,
                                   current_user, current_setting('search_path'));
END
$$;
CREATE FUNCTION pj.h2(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pj.applied VALUES ('p2', e.position, e.stream, e.version, current_user, NULL);
END
$$;
CREATE FUNCTION pj.r2() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pj.resets VALUES ('p2', current_user);
    DELETE FROM pj.applied WHERE projection = 'p2';
END
$$;
-- wait (up to 60 s) until every partition of projection p caught up and
-- they applied want events in all
CREATE FUNCTION pj.wait_caught_up(p text, want bigint) RETURNS text
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
    RETURN 'timed out: ' || (SELECT string_agg(format('%s/%s %s behind %s applied %s error %s', s.projection,
                                                      s.partition, s.state, s.events_behind, s.applied,
                                                      s.last_error), '; ')
                             FROM esrc.projection_status s WHERE s.projection = p);
END
$$;

SELECT esrc.append('reg-' || i, 'Registered', jsonb_build_object('i', i)) FROM generate_series(1, 3) i;
SELECT esrc.append('other-1', 'Other', '{}');

-- a projection of category reg: the catalog, its subscription, the status
SELECT esrc.create_projection('p1', 'pj.h(esrc.event)', ARRAY['reg']) > 0 AS created;
SELECT name, owner, handler, reset_function, batch_size, paused FROM esrc.projections;
SELECT name, owner, categories, partitions, projection FROM esrc.subscriptions;
SELECT pj.wait_caught_up('p1', 3);
-- every event once, as the owner, with search_path = pg_catalog, pg_temp
SELECT position, stream, version, who, path FROM pj.applied ORDER BY position;
SELECT projection, partition, state IN ('running', 'waiting') AS ok_state, checkpoint >= 3 AS past_3,
       events_behind, seconds_behind, caught_up, applied, attempts, last_error, last_error_at,
       blocked_position
FROM esrc.projection_status;
SELECT partition, applied, attempts, last_error FROM esrc.projection_partitions;

-- pause: no batch is taken; resume: it catches up
SELECT esrc.projection_pause('p1');
SELECT paused FROM esrc.projections WHERE name = 'p1';
SELECT esrc.append('reg-4', 'Registered', '{}');
SELECT projection, partition, state, events_behind, caught_up FROM esrc.projection_status;
SELECT count(*) FROM pj.applied;
SELECT esrc.projection_resume('p1');
SELECT paused FROM esrc.projections WHERE name = 'p1';
SELECT pj.wait_caught_up('p1', 4);
SELECT position, stream FROM pj.applied ORDER BY position;

-- 4 partitions, batches of 2, a reset function
SELECT esrc.append('rst-' || i, 'Made', '{}') FROM generate_series(1, 6) i;
SELECT esrc.create_projection('p2', 'pj.h2(esrc.event)', ARRAY['rst'], partitions => 4,
                              batch_size => 2, reset_function => 'pj.r2()') > 0 AS created;
SELECT name, handler, reset_function, batch_size FROM esrc.projections WHERE name = 'p2';
SELECT pj.wait_caught_up('p2', 6);
SELECT partition, applied FROM esrc.projection_status WHERE projection = 'p2' ORDER BY 1;
SELECT bool_and(esrc.stream_partition(stream, 4) IS NOT NULL), count(*), count(DISTINCT position)
FROM pj.applied WHERE projection = 'p2';
-- reset in the caller's transaction: rolled back, nothing happened
BEGIN;
SELECT esrc.reset_projection('p2');
SELECT count(*) AS resets FROM pj.resets;
ROLLBACK;
SELECT count(*) AS resets FROM pj.resets;
SELECT count(*) FROM pj.applied WHERE projection = 'p2';
-- paused, reset: the reset function ran once, as the owner; checkpoints
-- back to the start, counters cleared
SELECT esrc.projection_pause('p2');
SELECT esrc.reset_projection('p2');
SELECT * FROM pj.resets;
SELECT count(*) FROM pj.applied WHERE projection = 'p2';
SELECT sum(events_behind), sum(applied), max(checkpoint), bool_or(caught_up)
FROM esrc.projection_status WHERE projection = 'p2';
SELECT esrc.projection_resume('p2');
SELECT pj.wait_caught_up('p2', 6);
SELECT count(*), count(DISTINCT position) FROM pj.applied WHERE projection = 'p2';

-- start 'end' and start after a position (rst: positions 6 to 11)
CREATE FUNCTION pj.noop(e esrc.event) RETURNS void LANGUAGE sql AS '';
SELECT esrc.create_projection('p_end', 'pj.noop(esrc.event)', ARRAY['rst'], start => 'end') > 0 AS created;
SELECT esrc.create_projection('p_at', 'pj.noop(esrc.event)', ARRAY['rst'], start => '8') > 0 AS created;
SELECT projection, checkpoint >= 11 AS at_end, events_behind, coalesce(applied, 0) AS applied
FROM esrc.projection_status WHERE projection = 'p_end';
SELECT pj.wait_caught_up('p_at', 3);
SELECT projection, checkpoint >= 11 AS at_end, events_behind, applied
FROM esrc.projection_status WHERE projection = 'p_at';
SELECT esrc.drop_projection('p_at');
SELECT esrc.drop_projection('p_end');

-- names up to 52 bytes (its subscription's name, "projection:" and the
-- name, is then at most 63)
SELECT esrc.create_projection(repeat('n', 52), 'pj.h2(esrc.event)', ARRAY['none']) > 0 AS created;
SELECT length(name) FROM esrc.projections WHERE name LIKE 'nnn%';
SELECT length(name) FROM esrc.subscriptions WHERE name LIKE 'projection:nnn%';
SELECT esrc.drop_projection(repeat('n', 52));
SELECT esrc.create_projection(repeat('n', 53), 'pj.h2(esrc.event)', ARRAY['none']);
\echo SQLSTATE :SQLSTATE

-- handlers with the wrong signature
CREATE FUNCTION pj.bad_arg(e integer) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION pj.bad_two(e esrc.event, n integer) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION pj.bad_none() RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION pj.bad_ret(e esrc.event) RETURNS integer LANGUAGE sql AS 'SELECT 1';
CREATE FUNCTION pj.bad_set(e esrc.event) RETURNS SETOF void LANGUAGE sql AS 'SELECT';
CREATE FUNCTION pj.bad_out(e esrc.event, OUT n integer) LANGUAGE sql AS 'SELECT 1';
CREATE FUNCTION pj.bad_jsonb(e jsonb) RETURNS void LANGUAGE sql AS '';
CREATE PROCEDURE pj.bad_proc(e esrc.event) LANGUAGE sql AS '';
CREATE FUNCTION pj.agg_step(s integer, e esrc.event) RETURNS integer LANGUAGE sql AS 'SELECT 1';
CREATE AGGREGATE pj.bad_agg(esrc.event) (sfunc = pj.agg_step, stype = integer);
CREATE FUNCTION pj.r_bad(n integer) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION pj.r_ret() RETURNS integer LANGUAGE sql AS 'SELECT 1';
SELECT esrc.create_projection('x', 'pj.bad_arg(integer)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.bad_two(esrc.event, integer)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.bad_none()');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.bad_ret(esrc.event)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.bad_set(esrc.event)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.bad_out(esrc.event)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.bad_jsonb(jsonb)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.bad_proc(esrc.event)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.bad_agg(esrc.event)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.nosuch(esrc.event)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', NULL);
\echo SQLSTATE :SQLSTATE
-- reset functions with the wrong signature
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', reset_function => 'pj.r_bad(integer)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', reset_function => 'pj.r_ret()');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', reset_function => 'pj.h2(esrc.event)');
\echo SQLSTATE :SQLSTATE

-- names, categories, partitions, batch sizes, starts
SELECT esrc.create_projection('p1', 'pj.h2(esrc.event)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection(NULL, 'pj.h2(esrc.event)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('', 'pj.h2(esrc.event)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection(repeat('x', 64), 'pj.h2(esrc.event)');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', ARRAY['reg', NULL]);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', ARRAY['']);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', ARRAY['reg', 'reg']);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', ARRAY['reg-1']);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', ARRAY[]::text[]);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', partitions => 0);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', partitions => 1025);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', partitions => NULL);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', batch_size => 0);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', batch_size => 10001);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', batch_size => NULL);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', start => 'middle');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', start => '-1');
\echo SQLSTATE :SQLSTATE
-- a start past the end of the log (as for create_subscription)
SELECT esrc.create_projection('x', 'pj.h2(esrc.event)', ARRAY['rst'],
                              start => (esrc.safe_position() + 1)::text);
\echo SQLSTATE :SQLSTATE
-- a null start is the default, 'beginning' (as for create_subscription)
SELECT esrc.create_projection('x', 'pj.noop(esrc.event)', ARRAY['none'], start => NULL) > 0 AS created;
SELECT name FROM esrc.projections ORDER BY name;
SELECT name FROM esrc.subscriptions ORDER BY name;
SELECT esrc.drop_projection('x');

-- unknown projections, for every function
SELECT esrc.drop_projection('nosuch');
\echo SQLSTATE :SQLSTATE
SELECT esrc.projection_pause('nosuch');
\echo SQLSTATE :SQLSTATE
SELECT esrc.projection_resume('nosuch');
\echo SQLSTATE :SQLSTATE
SELECT esrc.projection_skip('nosuch', 1, 'x');
\echo SQLSTATE :SQLSTATE
SELECT esrc.reset_projection('nosuch');
\echo SQLSTATE :SQLSTATE
SELECT esrc.drop_projection(NULL);
\echo SQLSTATE :SQLSTATE

-- skip: no partition is blocked; bad reasons
SELECT esrc.projection_skip('p1', 1, 'not blocked');
\echo SQLSTATE :SQLSTATE
SELECT esrc.projection_skip('p1', 1, '');
\echo SQLSTATE :SQLSTATE
SELECT esrc.projection_skip('p1', 1, NULL);
\echo SQLSTATE :SQLSTATE
SELECT esrc.projection_skip('p1', NULL, 'x');
\echo SQLSTATE :SQLSTATE
SELECT esrc.projection_skip('p1', -1, 'x');
\echo SQLSTATE :SQLSTATE
SELECT count(*) FROM esrc.projection_skips;

-- the subscription of a projection is run by its workers only
SELECT * FROM esrc.poll('projection:p1', 'm1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.ack('projection:p1', 'm1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.reset_subscription('projection:p1', 0);
\echo SQLSTATE :SQLSTATE
SELECT esrc.drop_subscription('projection:p1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_subscription('projection:mine');
\echo SQLSTATE :SQLSTATE
SELECT name FROM esrc.subscriptions ORDER BY name;

-- the functions a projection calls cannot be dropped nor renamed (each in
-- a transaction rolled back, in case they could)
BEGIN;
DROP FUNCTION pj.h(esrc.event);
\echo SQLSTATE :SQLSTATE
ROLLBACK;
BEGIN;
DROP FUNCTION pj.h(esrc.event) CASCADE;
\echo SQLSTATE :SQLSTATE
ROLLBACK;
BEGIN;
DROP FUNCTION pj.r2();
\echo SQLSTATE :SQLSTATE
ROLLBACK;
BEGIN;
DROP SCHEMA pj CASCADE;
\echo SQLSTATE :SQLSTATE
ROLLBACK;
BEGIN;
ALTER FUNCTION pj.h(esrc.event) RENAME TO h_renamed;
\echo SQLSTATE :SQLSTATE
ROLLBACK;
BEGIN;
ALTER SCHEMA pj RENAME TO pj_renamed;
\echo SQLSTATE :SQLSTATE
ROLLBACK;
-- CREATE OR REPLACE is allowed (a fix of the handler)
CREATE OR REPLACE FUNCTION pj.h(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pj.applied VALUES ('p1', e.position, e.stream, e.version,
                                   current_user, current_setting('search_path'));
END
$$;
SELECT handler FROM esrc.projections WHERE name = 'p1';
-- other functions drop as usual
DROP FUNCTION pj.bad_two(esrc.event, integer);

-- esrc.projection_skips is append-only (a row forged by the superuser to
-- show it)
INSERT INTO esrc.projection_skips (projection, partition, position, stream, version, type, event_id, reason)
VALUES ('forged', 0, 1, 'reg-1', 0, 'Registered', gen_random_uuid(), 'forged');
UPDATE esrc.projection_skips SET reason = 'x';
\echo SQLSTATE :SQLSTATE
DELETE FROM esrc.projection_skips;
\echo SQLSTATE :SQLSTATE
TRUNCATE esrc.projection_skips;
\echo SQLSTATE :SQLSTATE
SELECT projection, reason FROM esrc.projection_skips;

-- dropping a projection while its worker runs it: its batch in flight
-- commits or rolls back whole, then the worker forgets it
CREATE FUNCTION pj.slow(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(0.05);
    INSERT INTO pj.applied VALUES ('busy', e.position, e.stream, e.version, current_user, NULL);
END
$$;
SELECT esrc.append('busy-' || i, 'Busy', '{}') FROM generate_series(1, 200) i \g /dev/null
SELECT esrc.create_projection('busy', 'pj.slow(esrc.event)', ARRAY['busy'], batch_size => 10) > 0 AS created;
DO $$
BEGIN
    FOR i IN 1..600 LOOP
        EXIT WHEN EXISTS (SELECT FROM pj.applied WHERE projection = 'busy');
        PERFORM pg_sleep(0.1);
    END LOOP;
END
$$;
SELECT esrc.drop_projection('busy');
SELECT count(*) % 10 AS whole_batches, count(*) < 200 AS not_all, count(*) = count(DISTINCT position) AS once
FROM pj.applied WHERE projection = 'busy';
SELECT count(*) AS applied_at_drop FROM pj.applied WHERE projection = 'busy' \gset
SELECT pg_sleep(1);
SELECT count(*) = :applied_at_drop AS worker_forgot FROM pj.applied WHERE projection = 'busy';
SELECT (SELECT count(*) FROM esrc.projections WHERE name = 'busy') AS projections,
       (SELECT count(*) FROM esrc.subscriptions WHERE name = 'projection:busy') AS subscriptions,
       (SELECT count(*) FROM esrc.projection_status WHERE projection = 'busy') AS status;
-- the handler can be dropped now
DROP FUNCTION pj.slow(esrc.event);

-- privileges
CREATE ROLE pj_alice LOGIN IN ROLE esrc_subscriber, esrc_reader;
CREATE ROLE pj_bob LOGIN IN ROLE esrc_subscriber, esrc_reader;
CREATE ROLE pj_carol LOGIN IN ROLE esrc_subscriber;
CREATE ROLE pj_dave LOGIN IN ROLE esrc_reader;
CREATE ROLE pj_nobody LOGIN;
GRANT USAGE ON SCHEMA pj TO pj_alice, pj_bob, pj_carol, pj_dave;
GRANT INSERT ON pj.applied TO pj_alice;
CREATE FUNCTION pj.h_alice(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pj.applied VALUES ('alice', e.position, e.stream, e.version,
                                   current_user, current_setting('search_path'));
END
$$;
CREATE FUNCTION pj.r_alice() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pj.resets VALUES ('alice', current_user);
END
$$;
GRANT INSERT ON pj.resets TO pj_alice;
CREATE FUNCTION pj.h_private(e esrc.event) RETURNS void LANGUAGE sql AS '';
REVOKE EXECUTE ON FUNCTION pj.h_private(esrc.event) FROM PUBLIC;
-- without esrc_subscriber, or esrc_reader, or EXECUTE on the handler: no
SET ROLE pj_dave;
SELECT esrc.create_projection('dave', 'pj.h2(esrc.event)');
\echo SQLSTATE :SQLSTATE
RESET ROLE;
SET ROLE pj_nobody;
SELECT esrc.create_projection('nobody', 'pj.h2(esrc.event)');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.projection_status;
\echo SQLSTATE :SQLSTATE
RESET ROLE;
SET ROLE pj_carol;
SELECT esrc.create_projection('carol', 'pj.h2(esrc.event)');
\echo SQLSTATE :SQLSTATE
RESET ROLE;
SET ROLE pj_bob;
SELECT esrc.create_projection('bob', 'pj.h_private(esrc.event)');
\echo SQLSTATE :SQLSTATE
RESET ROLE;
SELECT name FROM esrc.projections ORDER BY name;
-- alice's projection: the handler runs as alice
SET ROLE pj_alice;
SELECT esrc.create_projection('alice', 'pj.h_alice(esrc.event)', ARRAY['ali'],
                              reset_function => 'pj.r_alice()') > 0 AS created;
SELECT name, owner, handler, reset_function FROM esrc.projections WHERE name = 'alice';
RESET ROLE;
SELECT esrc.append('ali-1', 'Hi', '{}');
SELECT pj.wait_caught_up('alice', 1);
SELECT projection, stream, who, path FROM pj.applied WHERE projection = 'alice';
-- bob may look, not manage alice's projection, nor write the catalog
SET ROLE pj_bob;
SELECT projection, partition, caught_up FROM esrc.projection_status WHERE projection = 'alice';
SELECT esrc.projection_pause('alice');
\echo SQLSTATE :SQLSTATE
SELECT esrc.projection_resume('alice');
\echo SQLSTATE :SQLSTATE
SELECT esrc.projection_skip('alice', 1, 'x');
\echo SQLSTATE :SQLSTATE
SELECT esrc.reset_projection('alice');
\echo SQLSTATE :SQLSTATE
SELECT esrc.drop_projection('alice');
\echo SQLSTATE :SQLSTATE
UPDATE esrc.projections SET paused = true;
\echo SQLSTATE :SQLSTATE
UPDATE esrc.projection_partitions SET applied = 0;
\echo SQLSTATE :SQLSTATE
INSERT INTO esrc.projection_skips (projection, partition, position, stream, version, type, event_id, reason)
VALUES ('alice', 0, 1, 's', 0, 't', gen_random_uuid(), 'forged');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.poll('projection:alice', 'b1');
\echo SQLSTATE :SQLSTATE
RESET ROLE;
SELECT paused FROM esrc.projections WHERE name = 'alice';
-- alice manages her own; a superuser manages every projection
SET ROLE pj_alice;
SELECT esrc.projection_pause('alice');
SELECT esrc.projection_resume('alice');
RESET ROLE;
SELECT esrc.projection_pause('alice');
-- the reset function runs as the owner, whoever calls reset_projection
SELECT esrc.reset_projection('alice');
SELECT * FROM pj.resets WHERE projection = 'alice';
SELECT esrc.drop_projection('alice');

-- dropping the extension drops the projections with it (and their
-- handlers, which depend on esrc.event); the workers of this database
-- stop
SELECT esrc.drop_projection('p2');
SELECT name FROM esrc.projections ORDER BY name;
SELECT count(*) > 0 AS workers FROM pg_stat_activity
WHERE backend_type LIKE 'esrc projection worker%' AND datname = current_database();
DROP EXTENSION esrc CASCADE;
SELECT count(*) FROM pg_proc WHERE proname = 'h' AND pronamespace = 'pj'::regnamespace;
DO $$
BEGIN
    FOR i IN 1..300 LOOP
        EXIT WHEN NOT EXISTS (SELECT FROM pg_stat_activity
                              WHERE backend_type LIKE 'esrc projection worker%'
                                AND datname = current_database());
        PERFORM pg_sleep(0.1);
    END LOOP;
END
$$;
SELECT count(*) AS workers FROM pg_stat_activity
WHERE backend_type LIKE 'esrc projection worker%' AND datname = current_database();
DROP SCHEMA pj CASCADE;
DROP ROLE pj_alice, pj_bob, pj_carol, pj_dave, pj_nobody;
-- leave the extension as the other files expect it: installed, its
-- position sequence used once
CREATE EXTENSION esrc;
SELECT esrc.append('projection_api-1', 'Done', '{}');
