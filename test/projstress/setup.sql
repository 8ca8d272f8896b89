-- test/projstress/setup.sql: the schema of the projection tests
-- (test/run-37-projection-load.sh, run-38-projection-failures.sh,
-- run-39-projection-crash.sh).  Run from the repository root with psql:
--     psql -v break=0 -v psql=$PG_BINDIR/psql -f test/projstress/setup.sql
-- break=1: the v1 handler counts renames in proj.rename_tally through a
-- separate connection (COPY ... TO PROGRAM psql), which commits at once,
-- outside the worker's batch: not exactly once.  For showing that the
-- crash test's checks catch effects outside the batch.
CREATE EXTENSION esrc;
\ir ../../examples/security_service.sql

-- The write load's command: register a user, or rename one already
-- registered (test/projstress/writers.pgbench).  The example's command
-- handlers retry 40001 themselves (READ COMMITTED); a registration that
-- loses a race to another (23505 on security.user_emails) registers
-- nothing and renames instead.
CREATE SCHEMA load;
CREATE FUNCTION load.command(email text, name text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    id uuid;
BEGIN
    LOOP
        id := security.user_id_of(email);
        IF id IS NOT NULL THEN
            RETURN security.change_user_name(id, name);
        END IF;
        BEGIN
            PERFORM security.register_user(email, name);
            RETURN 0;
        EXCEPTION WHEN unique_violation THEN
            NULL;   -- registered by another since the lookup: rename it
        END;
    END LOOP;
END
$$;
-- a name whose first letter varies with n
CREATE FUNCTION load.name(n bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT chr(65 + (n % 26)::int) || 'name' || n $$;

-- The read models.  user_names: one row per user, its current name and
-- how many renames it had (a redelivered rename counts twice).
-- name_letters: users per first letter of their current name, a
-- cross-stream count (a redelivered registration counts twice); its
-- handler keeps each user's letter in letter_of.
CREATE TABLE security.user_names (
    stream        text PRIMARY KEY,
    name          text NOT NULL,
    renamed_count integer NOT NULL
);
CREATE TABLE security.user_names_v2 (LIKE security.user_names INCLUDING ALL);
CREATE TABLE security.name_letters (
    letter text PRIMARY KEY,
    users  integer NOT NULL
);
CREATE TABLE security.letter_of (
    stream text PRIMARY KEY,
    letter text NOT NULL
);
CREATE SCHEMA proj;
-- renames per user counted by the v1 handler (in its batch, or with
-- break=1 through a separate connection)
CREATE TABLE proj.rename_tally (
    stream  text PRIMARY KEY,
    renames integer NOT NULL
);
-- knobs of the handlers, read at every event: every sleep_every-th event
-- (by position) sleeps sleep_s seconds (run-39: a batch in flight)
CREATE TABLE proj.knobs (
    sleep_every integer NOT NULL,
    sleep_s     double precision NOT NULL,
    break       boolean NOT NULL,
    psql        text NOT NULL,
    conninfo    text NOT NULL
);
INSERT INTO proj.knobs VALUES (0, 0, :'break'::int = 1, :'psql',
    format('host=%s port=%s user=%s dbname=%s', current_setting('unix_socket_directories'),
           current_setting('port'), current_user, current_database()));
GRANT USAGE ON SCHEMA security, proj TO PUBLIC;

-- What the handlers do, as functions of the target tables, so that the
-- same code can replay the log into fresh tables (proj.replay).  The
-- handlers run with search_path = pg_catalog, pg_temp: everything is
-- qualified.
CREATE FUNCTION proj.apply_user_name(tbl regclass, e esrc.event) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    CASE e.type
        WHEN 'UserRegistered' THEN
            EXECUTE format('INSERT INTO %s (stream, name, renamed_count) VALUES ($1, $2, 0)
                            ON CONFLICT (stream) DO UPDATE SET name = excluded.name', tbl)
                USING e.stream, e.data->>'name';
        WHEN 'UserNameChanged' THEN
            EXECUTE format('UPDATE %s SET name = $2, renamed_count = renamed_count + 1
                            WHERE stream = $1', tbl)
                USING e.stream, e.data->>'name';
            GET DIAGNOSTICS n = ROW_COUNT;   -- EXECUTE does not set FOUND
            IF n <> 1 THEN
                RAISE EXCEPTION 'rename of unregistered user (stream %, version %)',
                    e.stream, e.version;
            END IF;
        ELSE
            NULL;
    END CASE;
END
$$;

CREATE FUNCTION proj.apply_letters(letters regclass, letter_of regclass, e esrc.event) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    user_stream text := e.stream;
    new_letter text := lower(left(e.data->>'name', 1));
    old_letter text;
BEGIN
    CASE e.type
        WHEN 'UserRegistered' THEN
            EXECUTE format('INSERT INTO %s VALUES ($1, $2)
                            ON CONFLICT (stream) DO UPDATE SET letter = excluded.letter', letter_of)
                USING user_stream, new_letter;
            EXECUTE format('INSERT INTO %1$s AS l VALUES ($1, 1)
                            ON CONFLICT (letter) DO UPDATE SET users = l.users + 1', letters)
                USING new_letter;
        WHEN 'UserNameChanged' THEN
            EXECUTE format('SELECT letter FROM %s WHERE stream = $1 FOR UPDATE', letter_of)
                INTO old_letter USING user_stream;
            IF old_letter IS NULL THEN
                RAISE EXCEPTION 'rename of unregistered user (stream %, version %)',
                    e.stream, e.version;
            END IF;
            IF old_letter <> new_letter THEN
                EXECUTE format('UPDATE %s SET users = users - 1 WHERE letter = $1', letters)
                    USING old_letter;
                EXECUTE format('INSERT INTO %1$s AS l VALUES ($1, 1)
                                ON CONFLICT (letter) DO UPDATE SET users = l.users + 1', letters)
                    USING new_letter;
                EXECUTE format('UPDATE %s SET letter = $2 WHERE stream = $1', letter_of)
                    USING user_stream, new_letter;
            END IF;
        ELSE
            NULL;
    END CASE;
END
$$;

CREATE FUNCTION proj.knob_sleep(e esrc.event) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    k proj.knobs;
BEGIN
    SELECT * INTO k FROM proj.knobs;
    IF k.sleep_every > 0 AND e.position % k.sleep_every = 0 THEN
        PERFORM pg_catalog.pg_sleep(k.sleep_s);
    END IF;
END
$$;

-- The handlers of the projections.
CREATE FUNCTION security.user_names_v1(e esrc.event) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    k proj.knobs;
BEGIN
    PERFORM proj.knob_sleep(e);
    PERFORM proj.apply_user_name('security.user_names', e);
    IF e.type = 'UserNameChanged' THEN
        SELECT * INTO k FROM proj.knobs;
        IF k.break THEN
            -- planted fault: an effect committed by another connection
            EXECUTE format('COPY (SELECT 1) TO PROGRAM %L',
                format('%s -qAtX %s -c %s >/dev/null', k.psql, quote_ident(k.conninfo),
                       quote_ident(format('INSERT INTO proj.rename_tally AS t VALUES (%L, 1)
                                           ON CONFLICT (stream) DO UPDATE SET renames = t.renames + 1',
                                          e.stream))));
        ELSE
            INSERT INTO proj.rename_tally AS t VALUES (e.stream, 1)
                ON CONFLICT (stream) DO UPDATE SET renames = t.renames + 1;
        END IF;
    END IF;
END
$$;
CREATE FUNCTION security.user_names_v2(e esrc.event) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM proj.knob_sleep(e);
    PERFORM proj.apply_user_name('security.user_names_v2', e);
END
$$;
CREATE FUNCTION security.name_letters_h(e esrc.event) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM proj.knob_sleep(e);
    PERFORM proj.apply_letters('security.name_letters', 'security.letter_of', e);
END
$$;
CREATE FUNCTION security.user_names_reset() RETURNS void
LANGUAGE sql AS $$ TRUNCATE security.user_names $$;

-- The view the application reads (blue/green: swapped from v1 to v2).
CREATE SCHEMA app;
CREATE VIEW app.user_names AS SELECT * FROM security.user_names;
