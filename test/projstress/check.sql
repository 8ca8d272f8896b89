-- test/projstress/check.sql: what the projections' tables must equal,
-- computed two ways, and the checks as views (name, ok), over
-- test/projstress/setup.sql's tables.
--
-- 1. proj.expected_user_names, proj.expected_letters: plain SQL over
--    esrc.events (no handler code): per user stream, the e-mail of its
--    UserRegistered, the name of its last event, its count of
--    UserNameChanged; users per first letter of their current name.
-- 2. proj.replay(): the handlers' code (proj.apply_*) run once over the
--    log by a plain loop over esrc.read_all in position order, into the
--    fresh tables replay.*.
-- And a sanity check of 1: it equals the example's snapshot
-- security.users, which its trigger writes in each append's transaction.

CREATE VIEW proj.expected_user_names AS
SELECT r.stream, l.data->>'name' AS name,
       (SELECT count(*) FROM esrc.events c
        WHERE c.stream = r.stream AND c.type = 'UserNameChanged')::int AS renamed_count
FROM esrc.events r
CROSS JOIN LATERAL (SELECT data FROM esrc.events x WHERE x.stream = r.stream
                    ORDER BY version DESC LIMIT 1) l
WHERE r.category = 'user' AND r.type = 'UserRegistered';

CREATE VIEW proj.expected_letters AS
SELECT lower(left(name, 1)) AS letter, count(*)::int AS users
FROM proj.expected_user_names GROUP BY 1;

CREATE SCHEMA replay;
CREATE TABLE replay.user_names (LIKE security.user_names INCLUDING ALL);
CREATE TABLE replay.name_letters (LIKE security.name_letters INCLUDING ALL);
CREATE TABLE replay.letter_of (LIKE security.letter_of INCLUDING ALL);
CREATE TABLE replay.rename_tally (LIKE proj.rename_tally INCLUDING ALL);

-- the handlers' code over the whole log, once, in position order
CREATE FUNCTION proj.replay() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    e esrc.event;
    after bigint := 0;
    n bigint := 0;
    got boolean;
BEGIN
    TRUNCATE replay.user_names, replay.name_letters, replay.letter_of, replay.rename_tally;
    LOOP
        got := false;
        FOR e IN SELECT * FROM esrc.read_all(after, 1000) LOOP
            got := true;
            after := e.position;
            CONTINUE WHEN split_part(e.stream, '-', 1) <> 'user';
            n := n + 1;
            PERFORM proj.apply_user_name('replay.user_names', e);
            PERFORM proj.apply_letters('replay.name_letters', 'replay.letter_of', e);
            IF e.type = 'UserNameChanged' THEN
                INSERT INTO replay.rename_tally AS t VALUES (e.stream, 1)
                    ON CONFLICT (stream) DO UPDATE SET renames = t.renames + 1;
            END IF;
        END LOOP;
        EXIT WHEN NOT got;
    END LOOP;
    RETURN n;
END
$$;

-- a = b as multisets
CREATE FUNCTION proj.same(a text, b text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    diff boolean;
BEGIN
    EXECUTE format('SELECT NOT EXISTS ((SELECT * FROM %s EXCEPT ALL SELECT * FROM %s)
                                       UNION ALL (SELECT * FROM %s EXCEPT ALL SELECT * FROM %s))',
                   a, b, b, a) INTO diff;
    RETURN diff;
END
$$;

CREATE VIEW proj.nonzero_letters AS SELECT * FROM security.name_letters WHERE users <> 0;
CREATE VIEW proj.replay_nonzero_letters AS SELECT * FROM replay.name_letters WHERE users <> 0;
CREATE VIEW proj.expected_tally AS
SELECT stream, renamed_count AS renames FROM proj.expected_user_names WHERE renamed_count > 0;
CREATE VIEW proj.snapshot_user_names AS
SELECT stream, state->>'name' AS name FROM security.users;
CREATE VIEW proj.expected_names_only AS SELECT stream, name FROM proj.expected_user_names;
CREATE VIEW proj.user_events AS SELECT position FROM esrc.events WHERE category = 'user';

-- the checks of the read models of projections user_names (v1, into
-- security.user_names) and name_letters, after the replay
CREATE VIEW proj.check_v1 AS
SELECT 'sql replay equals the snapshot security.users' AS name,
       proj.same('proj.expected_names_only', 'proj.snapshot_user_names') AS ok
UNION ALL
SELECT 'handler replay equals sql replay', proj.same('replay.user_names', 'proj.expected_user_names')
UNION ALL
SELECT 'user_names equals sql replay', proj.same('security.user_names', 'proj.expected_user_names')
UNION ALL
SELECT 'user_names equals handler replay', proj.same('security.user_names', 'replay.user_names')
UNION ALL
SELECT 'rename_tally equals sql replay', proj.same('proj.rename_tally', 'proj.expected_tally')
UNION ALL
SELECT 'name_letters equals sql replay', proj.same('proj.nonzero_letters', 'proj.expected_letters')
UNION ALL
SELECT 'name_letters equals handler replay', proj.same('proj.nonzero_letters', 'proj.replay_nonzero_letters')
UNION ALL
SELECT 'letters count every user once',
       (SELECT sum(users) FROM security.name_letters) = (SELECT count(*) FROM proj.expected_user_names)
UNION ALL
SELECT 'applied counts every event once (' || p.name || ')',
       coalesce((SELECT sum(pp.applied) FROM esrc.projection_partitions pp WHERE pp.projection_id = p.id), -1)
       = (SELECT count(*) FROM proj.user_events)
FROM esrc.projections p WHERE p.name IN ('user_names', 'name_letters')
UNION ALL
SELECT 'every partition caught up, none failed (' || s.projection || ')',
       bool_and(s.caught_up AND s.state IN ('running', 'waiting') AND s.blocked_position IS NULL)
FROM esrc.projection_status s WHERE s.projection IN ('user_names', 'name_letters')
GROUP BY s.projection;

CREATE VIEW proj.check_v2 AS
SELECT 'user_names_v2 equals sql replay' AS name,
       proj.same('security.user_names_v2', 'proj.expected_user_names') AS ok
UNION ALL
SELECT 'user_names_v2 equals handler replay', proj.same('security.user_names_v2', 'replay.user_names')
UNION ALL
SELECT 'app.user_names equals sql replay', proj.same('app.user_names', 'proj.expected_user_names')
UNION ALL
SELECT 'applied counts every event once (user_names_v2)',
       coalesce((SELECT sum(pp.applied) FROM esrc.projection_partitions pp
                 JOIN esrc.projections p ON p.id = pp.projection_id WHERE p.name = 'user_names_v2'), -1)
       = (SELECT count(*) FROM proj.user_events)
UNION ALL
SELECT 'every partition caught up, none failed (user_names_v2)',
       coalesce(bool_and(s.caught_up AND s.state IN ('running', 'waiting') AND s.blocked_position IS NULL), false)
FROM esrc.projection_status s WHERE s.projection = 'user_names_v2';

-- every partition of the given projections caught up
CREATE FUNCTION proj.caught_up(names text[]) RETURNS boolean
LANGUAGE sql AS $$
    SELECT count(*) > 0 AND bool_and(caught_up) FROM esrc.projection_status WHERE projection = ANY (names)
$$;

-- esrc.projection_status sampled every 100 ms by CALL proj.sample_status()
-- until a row is put in proj.sampler_stop
CREATE TABLE proj.status_samples (
    sample     int NOT NULL,
    at         timestamptz NOT NULL,
    projection text NOT NULL,
    partition  int NOT NULL,
    state      text,
    worker     text,
    attempts   int,
    blocked_position bigint,
    last_error_sqlstate text
);
CREATE TABLE proj.sampler_stop (stop bool);
CREATE PROCEDURE proj.sample_status() LANGUAGE plpgsql AS $$
DECLARE
    n int := 0;
BEGIN
    LOOP
        n := n + 1;
        INSERT INTO proj.status_samples
        SELECT n, clock_timestamp(), projection, partition, state, worker, attempts, blocked_position,
               last_error_sqlstate
        FROM esrc.projection_status;
        COMMIT;
        EXIT WHEN EXISTS (SELECT FROM proj.sampler_stop);
        PERFORM pg_sleep(0.1);
    END LOOP;
END
$$;
