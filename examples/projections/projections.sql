-- examples/projections/projections.sql: read models of the security service
-- (examples/security_service.sql) kept by esrc projections.
--
--   directory.user_names_v1   one typed row per user (stream, name, version)
--   directory.users_per_letter  how many users have a name starting with
--                             each letter: a cross-stream aggregate, kept
--                             over 4 partitions with commuting upserts
--   directory.user_names      the view readers use; switched from v1 to v2
--                             (one more column) in one transaction, the
--                             blue/green recipe of docs/projections.md
--
-- Needs esrc in shared_preload_libraries (the projection workers) and
-- esrc.projection_workers >= 1 (the default).  Run after
-- examples/security_service.sql, as a role in esrc_subscriber, esrc_reader
-- and esrc_writer with CREATE on the database (it creates the schema
-- directory; a superuser will do):
--     psql -v ON_ERROR_STOP=1 -f examples/security_service.sql
--     psql -v ON_ERROR_STOP=1 -f examples/projections/projections.sql
-- It registers and renames a few users, waits for the projections and
-- checks every read model against the security.users snapshot; it raises
-- an error when something differs.  The read models are keyed by the
-- stream (user-<uuid>) and hold no e-mail: what they do not copy, erasure
-- need not chase.  Every handler handles the tombstones: an erased user
-- (esrc.erase_stream, security.erase_user) or a deleted one
-- (esrc.delete_stream) leaves the read models when its tombstone
-- (esrc.erased, esrc.deleted) is applied, and the events of an erased
-- stream, redacted to {"erased": true}, are skipped when a projection
-- reads them from the beginning.  Running it twice fails (the schema
-- exists): DROP SCHEMA directory CASCADE after dropping its projections
-- (see the end of this file).

CREATE SCHEMA directory;
GRANT USAGE ON SCHEMA directory TO esrc_reader;

-- directory.wait_caught_up(projection): returns when every partition of the
-- projection has applied every event committed before the call, or raises
-- after 60 s or when a partition is blocked.  A PL/pgSQL function at READ
-- COMMITTED reads with a new snapshot at every statement, so the loop sees
-- the workers' commits.
CREATE FUNCTION directory.wait_caught_up(projection text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '60 seconds';
    target bigint := (SELECT coalesce(max(position), 0) FROM esrc.events);
    problem text;
BEGIN
    LOOP
        SELECT format('partition %s is %s at %s: %s', s.partition, s.state, s.blocked_position,
                      s.last_error)
          INTO problem
          FROM esrc.projection_status s
         WHERE s.projection = wait_caught_up.projection AND s.state = 'blocked'
         LIMIT 1;
        IF problem IS NOT NULL THEN
            RAISE EXCEPTION 'projection "%": %', projection, problem;
        END IF;
        -- caught up, and past every event that was committed at the call
        EXIT WHEN (SELECT bool_and(s.caught_up) FROM esrc.projection_status s
                    WHERE s.projection = wait_caught_up.projection)
              AND esrc.safe_position() >= target;
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'projection "%" did not catch up within 60 s', projection
                USING HINT = 'Is esrc in shared_preload_libraries and esrc.projection_workers > 0?';
        END IF;
        PERFORM pg_sleep(0.05);
    END LOOP;
END
$$;

------------------------------------------------------------------------
-- 1. A typed table: one row per user.
------------------------------------------------------------------------
CREATE TABLE directory.user_names_v1 (
    stream  text PRIMARY KEY,    -- user-<uuid>
    name    text NOT NULL,
    version bigint NOT NULL      -- the stream version last applied
);

-- The handler: a delete for a tombstone, else one upsert.  Handlers run
-- with search_path = pg_catalog, pg_temp, so every name is qualified.
-- Events of a stream come in version order, so UserRegistered always comes
-- before the renames, and a tombstone after the events it ends.
CREATE FUNCTION directory.user_names_v1_apply(event esrc.event) RETURNS void
LANGUAGE sql AS $$
    -- esrc.erased, esrc.deleted: the user is gone, and so is its row
    DELETE FROM directory.user_names_v1
     WHERE event.type IN ('esrc.erased', 'esrc.deleted') AND stream = event.stream;
    -- an erased stream's events, read again, have no name left: skipped
    INSERT INTO directory.user_names_v1 (stream, name, version)
    SELECT event.stream, event.data->>'name', event.version
     WHERE event.type IN ('UserRegistered', 'UserNameChanged') AND event.data ? 'name'
    ON CONFLICT (stream) DO UPDATE SET name = excluded.name, version = excluded.version
$$;

SELECT esrc.create_projection('user_names_v1', 'directory.user_names_v1_apply(esrc.event)',
                              categories => ARRAY['user']);

-- Readers use the view, so that the table behind it can be replaced.
CREATE VIEW directory.user_names AS SELECT stream, name FROM directory.user_names_v1;
GRANT SELECT ON directory.user_names TO esrc_reader;

------------------------------------------------------------------------
-- 2. A cross-stream aggregate: users per first letter of their name.
------------------------------------------------------------------------
-- A rename moves a user from one letter to another, so the projection keeps
-- the letter it counted each user under (its own per-stream state).  The
-- projection has 4 partitions: streams of different partitions are applied
-- in no particular order, possibly by different workers at the same time,
-- so the shared rows change only by commuting increments (n = n + 1,
-- n = n - 1), never by "read, compute, write".
CREATE TABLE directory.users_per_letter (
    letter text PRIMARY KEY,
    users  bigint NOT NULL
);
CREATE TABLE directory.letter_of_user (
    stream text PRIMARY KEY,
    letter text NOT NULL
);

CREATE FUNCTION directory.users_per_letter_apply(event esrc.event) RETURNS void
LANGUAGE plpgsql
SET search_path = directory, pg_catalog, pg_temp   -- its own path: names need no schema
AS $$
DECLARE
    user_stream text := event.stream;
    new_letter text := upper(left(event.data->>'name', 1));
    old_letter text;
BEGIN
    IF event.type IN ('esrc.erased', 'esrc.deleted') THEN
        new_letter := NULL;         -- the user is gone: counted under none
    ELSIF event.type NOT IN ('UserRegistered', 'UserNameChanged') OR new_letter IS NULL THEN
        RETURN;                     -- (NULL: an erased stream's event, redacted)
    END IF;
    SELECT letter INTO old_letter FROM letter_of_user WHERE stream = user_stream;
    IF old_letter IS NOT DISTINCT FROM new_letter THEN
        RETURN;
    END IF;
    IF old_letter IS NOT NULL THEN
        UPDATE users_per_letter SET users = users - 1 WHERE letter = old_letter;
    END IF;
    IF new_letter IS NULL THEN
        DELETE FROM letter_of_user WHERE stream = user_stream;
        RETURN;
    END IF;
    INSERT INTO users_per_letter VALUES (new_letter, 1)
    ON CONFLICT (letter) DO UPDATE SET users = users_per_letter.users + 1;
    INSERT INTO letter_of_user VALUES (user_stream, new_letter)
    ON CONFLICT (stream) DO UPDATE SET letter = excluded.letter;
END
$$;

-- reset_projection calls it in the same transaction as the reset of the
-- checkpoints: the tables are never empty with old checkpoints, or full
-- with new ones.
CREATE FUNCTION directory.users_per_letter_reset() RETURNS void
LANGUAGE sql AS $$
    TRUNCATE directory.users_per_letter, directory.letter_of_user
$$;

SELECT esrc.create_projection('users_per_letter', 'directory.users_per_letter_apply(esrc.event)',
                              categories => ARRAY['user'], partitions => 4,
                              reset_function => 'directory.users_per_letter_reset()');

------------------------------------------------------------------------
-- 3. Some commands, then the read models are checked against the snapshot.
------------------------------------------------------------------------
SELECT count(security.register_user(u.email, u.name)) AS registered
FROM (VALUES ('ada@example.com', 'Ada'), ('alan@example.com', 'Alan'),
             ('grace@example.com', 'Grace'), ('barbara@example.com', 'Barbara'),
             ('edsger@example.com', 'Edsger'), ('ken@example.com', 'Ken')) u(email, name);
SELECT security.change_user_name(security.user_id_of('alan@example.com'), 'Turing');
SELECT security.change_user_name(security.user_id_of('ken@example.com'), 'Kenneth');
SELECT security.change_user_name(security.user_id_of('ada@example.com'), 'Lovelace');

SELECT directory.wait_caught_up('user_names_v1');
SELECT directory.wait_caught_up('users_per_letter');

-- directory.current_users: the users of the snapshot security.users
-- (every user registered so far, by anyone) that are not deleted.  An
-- erased user has no row there; a deleted one keeps its row, with the
-- version moved on to its tombstone's (a later event brings it back).
CREATE VIEW directory.current_users AS
SELECT s.stream, s.state
  FROM security.users s
 WHERE NOT EXISTS (SELECT FROM esrc.events e
                    WHERE e.stream = s.stream AND e.version = s.version
                      AND e.type IN ('esrc.erased', 'esrc.deleted'));

-- directory.check(): raises unless the read models equal what the
-- snapshot says of the current users.
CREATE FUNCTION directory.check() RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    bad bigint;
BEGIN
    SELECT count(*) INTO bad
      FROM directory.current_users s FULL JOIN directory.user_names n ON n.stream = s.stream
     WHERE n.name IS DISTINCT FROM s.state->>'name';
    IF bad > 0 THEN
        RAISE EXCEPTION '% users differ between directory.user_names and security.users', bad;
    END IF;
    SELECT count(*) INTO bad
      FROM (SELECT upper(left(state->>'name', 1)) AS letter, count(*) AS users
              FROM directory.current_users GROUP BY 1) s
      FULL JOIN (SELECT * FROM directory.users_per_letter WHERE users <> 0) p USING (letter)
     WHERE p.users IS DISTINCT FROM s.users;
    IF bad > 0 THEN
        RAISE EXCEPTION '% letters differ between directory.users_per_letter and security.users', bad;
    END IF;
    RETURN format('ok: %s users, %s letters', (SELECT count(*) FROM directory.user_names),
                  (SELECT count(*) FROM directory.users_per_letter WHERE users <> 0));
END
$$;
SELECT directory.check();

SELECT * FROM directory.user_names ORDER BY name;
SELECT * FROM directory.users_per_letter WHERE users <> 0 ORDER BY letter;

------------------------------------------------------------------------
-- 4. Blue/green: v2 of the user table counts renames.  It is filled from
--    the beginning next to v1, the view switches in one transaction, and v1
--    goes.
------------------------------------------------------------------------
CREATE TABLE directory.user_names_v2 (
    stream  text PRIMARY KEY,
    name    text NOT NULL,
    renames int NOT NULL,
    version bigint NOT NULL
);
CREATE FUNCTION directory.user_names_v2_apply(event esrc.event) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM directory.user_names_v2
     WHERE event.type IN ('esrc.erased', 'esrc.deleted') AND stream = event.stream;
    INSERT INTO directory.user_names_v2 (stream, name, renames, version)
    SELECT event.stream, event.data->>'name', 0, event.version
     WHERE event.type IN ('UserRegistered', 'UserNameChanged') AND event.data ? 'name'
    ON CONFLICT (stream) DO UPDATE
        SET name = excluded.name, renames = user_names_v2.renames + 1, version = excluded.version
$$;
SELECT esrc.create_projection('user_names_v2', 'directory.user_names_v2_apply(esrc.event)',
                              categories => ARRAY['user']);
SELECT directory.wait_caught_up('user_names_v2');

-- The swap: readers see v1 up to the commit and v2 after it.  CREATE OR
-- REPLACE VIEW may add columns at the end; for other changes of the column
-- list, DROP VIEW and CREATE VIEW (and GRANT again) in this transaction.
BEGIN;
CREATE OR REPLACE VIEW directory.user_names AS
    SELECT stream, name, renames FROM directory.user_names_v2;
COMMIT;

-- v1 goes: the projection first (DROP FUNCTION of a handler in use is
-- refused with 2BP01), then its function and table.
SELECT esrc.drop_projection('user_names_v1');
DROP FUNCTION directory.user_names_v1_apply(esrc.event);
DROP TABLE directory.user_names_v1;

SELECT security.change_user_name(security.user_id_of('grace@example.com'), 'Hopper');
SELECT directory.wait_caught_up('user_names_v2');
SELECT directory.wait_caught_up('users_per_letter');
SELECT directory.check();
SELECT * FROM directory.user_names ORDER BY name;

------------------------------------------------------------------------
-- 5. Rebuild in place: reset_projection truncates (the reset function)
--    and puts the checkpoints back to the beginning in one transaction;
--    the workers apply everything again.
------------------------------------------------------------------------
SELECT esrc.reset_projection('users_per_letter');
SELECT directory.wait_caught_up('users_per_letter');
SELECT directory.check();

SELECT projection, partition, state, checkpoint, applied, caught_up
FROM esrc.projection_status WHERE projection IN ('user_names_v2', 'users_per_letter')
ORDER BY 1, 2;

-- To remove the example:
--   SELECT esrc.drop_projection('user_names_v2');
--   SELECT esrc.drop_projection('users_per_letter');
--   DROP SCHEMA directory CASCADE;
