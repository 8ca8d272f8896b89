-- The roles that esrc's catalogs record -- the owners of projections and
-- subscriptions, the roles granted to consume a subscription -- are
-- known to DROP ROLE, REASSIGN OWNED and DROP OWNED, as the owner and the
-- privileges of a table are: DROP ROLE refuses (2BP01) and lists them,
-- REASSIGN OWNED moves the owners, DROP OWNED drops the objects and the
-- grants, and then DROP ROLE succeeds.  Projection workers run, so the
-- handler's work is only looked at after od.wait_applied.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
\set VERBOSITY default

CREATE ROLE od_bob LOGIN IN ROLE esrc_subscriber, esrc_reader;
CREATE ROLE od_alice LOGIN IN ROLE esrc_subscriber, esrc_reader;
CREATE ROLE od_carol LOGIN IN ROLE esrc_reader;
CREATE ROLE od_idle;
CREATE SCHEMA od;
-- (to PUBLIC: a privilege granted to bob himself would make PostgreSQL's
-- own check of DROP ROLE answer first)
GRANT USAGE ON SCHEMA od TO PUBLIC;
CREATE TABLE od.seen (projection text, stream text, who name);
GRANT INSERT ON od.seen TO PUBLIC;
-- the handler records the role it runs as (the projection's owner)
CREATE FUNCTION od.h(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO od.seen VALUES ('od_proj', e.stream, current_user);
END
$$;
-- wait (up to 60 s) until projection p applied want events in all
CREATE FUNCTION od.wait_applied(p text, want bigint) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..600 LOOP
        IF (SELECT sum(applied) FROM esrc.projection_status s WHERE s.projection = p) = want THEN
            RETURN 'applied';
        END IF;
        PERFORM pg_sleep(0.1);
    END LOOP;
    RETURN 'timed out: ' || (SELECT string_agg(format('%s/%s %s applied %s error %s', s.projection,
                                                      s.partition, s.state, s.applied, s.last_error), '; ')
                             FROM esrc.projection_status s WHERE s.projection = p);
END
$$;

-- bob owns a projection and a subscription; alice lets bob consume hers
SET ROLE od_bob;
SELECT esrc.create_projection('od_proj', 'od.h(esrc.event)', ARRAY['odcat']) > 0 AS created;
SELECT esrc.create_subscription('od_sub', ARRAY['odcat']);
RESET ROLE;
SET ROLE od_alice;
SELECT esrc.create_subscription('od_alices', ARRAY['odcat']);
SELECT esrc.grant_subscription('od_alices', 'od_bob');
RESET ROLE;
SELECT esrc.append('odcat-1', 'Happened', '{}');
SELECT od.wait_applied('od_proj', 1);
SELECT projection, stream, who FROM od.seen ORDER BY stream;

-- DROP ROLE refuses, naming each object, and bob stays
DROP ROLE od_bob;
\echo SQLSTATE :SQLSTATE
SELECT rolname FROM pg_roles WHERE rolname = 'od_bob';
-- in a list of roles too: none of them is dropped
DROP ROLE od_idle, od_bob;
SELECT rolname FROM pg_roles WHERE rolname = 'od_idle';
-- a role that owns nothing is dropped as before; IF EXISTS as before
DROP ROLE od_idle;
DROP ROLE IF EXISTS od_nobody;
-- and nested in a function too
DO $$ BEGIN EXECUTE 'DROP ROLE od_bob'; END $$;
\echo SQLSTATE :SQLSTATE

-- without the privileges of the roles, PostgreSQL's own checks answer
-- first (their wording differs between majors: SQLSTATE only)
SET ROLE od_carol;
\set VERBOSITY sqlstate
DROP ROLE od_bob;
REASSIGN OWNED BY od_bob TO od_carol;
DROP OWNED BY od_bob;
\set VERBOSITY default
RESET ROLE;
SELECT name, owner FROM esrc.projections WHERE name = 'od_proj';

-- REASSIGN OWNED moves the owners (the projection's subscription with
-- it); grants to consume stay, as privileges do
REASSIGN OWNED BY od_bob TO od_alice;
SELECT name, owner FROM esrc.projections ORDER BY name;
SELECT name, owner, consumers FROM esrc.subscriptions WHERE name ~ 'od_' ORDER BY name;
-- the projection goes on, now as alice; the new owner manages it
SELECT esrc.append('odcat-2', 'Happened', '{}');
SELECT od.wait_applied('od_proj', 2);
SELECT projection, stream, who FROM od.seen ORDER BY stream;
SET ROLE od_alice;
SELECT esrc.projection_pause('od_proj');
SELECT esrc.projection_resume('od_proj');
SELECT esrc.reset_subscription('od_sub', 0);
RESET ROLE;
-- bob still may consume alice's subscription: DROP ROLE says so
DROP ROLE od_bob;

-- bob's own handler, projection and subscription; DROP OWNED drops them
-- all (the projection before its handler), bob's grant to consume and his
-- privilege on the schema
GRANT CREATE ON SCHEMA od TO od_bob;
SET ROLE od_bob;
CREATE FUNCTION od.bob_h(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO od.seen VALUES ('od_bobs', e.stream, current_user);
END
$$;
SELECT esrc.create_projection('od_bobs', 'od.bob_h(esrc.event)', ARRAY['odcat'], partitions => 2) > 0 AS created;
SELECT esrc.create_subscription('od_sub2');
RESET ROLE;
SELECT od.wait_applied('od_bobs', 2);
DROP OWNED BY od_bob;
SELECT name, owner FROM esrc.projections ORDER BY name;
SELECT name, owner, consumers FROM esrc.subscriptions WHERE name ~ 'od_' ORDER BY name;
SELECT count(*) AS bobs_status FROM esrc.projection_status WHERE projection = 'od_bobs';
SELECT to_regprocedure('od.bob_h(esrc.event)') AS bob_h;
DROP ROLE od_bob;
SELECT count(*) AS bobs FROM pg_roles WHERE rolname = 'od_bob';

-- the list is capped as PostgreSQL caps it: 100 lines, then a count (all
-- of them in the server log)
CREATE ROLE od_many IN ROLE esrc_subscriber;
SET ROLE od_many;
SELECT count(esrc.create_subscription('many_' || lpad(i::text, 3, '0'))) FROM generate_series(1, 101) i;
RESET ROLE;
DO $$
DECLARE
    d text;
BEGIN
    DROP ROLE od_many;
EXCEPTION WHEN dependent_objects_still_exist THEN
    GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
    RAISE NOTICE 'lines %, first "%", last two "%" / "%"', array_length(string_to_array(d, E'\n'), 1),
        split_part(d, E'\n', 1), split_part(d, E'\n', 100), split_part(d, E'\n', 101);
END
$$;
-- a role named twice: each object dropped once
DROP OWNED BY od_many, od_many;
SELECT count(*) AS many_left FROM esrc.subscriptions WHERE owner = 'od_many'::regrole;
DROP ROLE od_many;

-- the owner of a projection and a subscription that it does not own
-- through membership only: alice's objects keep her, DROP OWNED BY a
-- member role leaves them
CREATE ROLE od_team;
GRANT od_team TO od_alice;
DROP OWNED BY od_team;
SELECT name, owner FROM esrc.subscriptions WHERE name ~ 'od_' ORDER BY name;
DROP ROLE od_team;

-- clean up: DROP OWNED, then DROP ROLE, as for any role
DROP OWNED BY od_alice;
SELECT count(*) AS left_over FROM esrc.subscriptions WHERE name ~ 'od_';
DROP ROLE od_alice, od_carol;
DROP SCHEMA od CASCADE;
