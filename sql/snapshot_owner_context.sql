-- The trigger writes each snapshot table as the table's owner, in
-- security-restricted mode, with search_path pinned to "pg_catalog,
-- pg_temp", whoever appends: the table's own code -- row triggers, CHECK
-- constraints, expression indexes, defaults, row-level security -- runs
-- with the owner's rights, never with the appender's.  An owner cannot
-- make a superuser's append run code for it, nor queue code for the
-- appender's commit (deferred triggers are refused), and the appender's
-- row-level security does not hide rows from the trigger.  Both write
-- paths: "snapown.direct" as create_snapshot makes it, "snapown.viasql"
-- with an extra column and forced row-level security (SQL through SPI).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;
\set SHOW_CONTEXT never
CREATE ROLE snapown_app LOGIN IN ROLE esrc_reader;
CREATE ROLE snapown_writer LOGIN IN ROLE esrc_writer;
CREATE SCHEMA snapown AUTHORIZATION snapown_app;
GRANT USAGE ON SCHEMA snapown TO esrc_reader;
GRANT EXECUTE ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean)
    TO snapown_app;

SET ROLE snapown_app;
SELECT esrc.create_snapshot('snapown.direct', 'snapown', 'esrc.merge(jsonb, esrc.event)');
SELECT esrc.create_snapshot('snapown.viasql', 'snapown', 'esrc.merge(jsonb, esrc.event)');
ALTER TABLE snapown.viasql ADD COLUMN note text NOT NULL DEFAULT 'default';
-- rows are visible to the owner only, and the policy applies to the owner
ALTER TABLE snapown.viasql ENABLE ROW LEVEL SECURITY;
ALTER TABLE snapown.viasql FORCE ROW LEVEL SECURITY;
CREATE POLICY owner_only ON snapown.viasql
    USING (current_user = 'snapown_app') WITH CHECK (current_user = 'snapown_app');

-- What the table's code sees: who runs it, whether the operation is
-- security-restricted (no temporary tables then), and search_path.
CREATE TABLE snapown.seen (tab text, what text, who name, restricted text, path text);
GRANT INSERT ON snapown.seen TO PUBLIC;
CREATE FUNCTION snapown.restricted() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    CREATE TEMPORARY TABLE snapown_probe (x int);
    DROP TABLE snapown_probe;
    RETURN 'no';
EXCEPTION WHEN insufficient_privilege THEN
    RETURN 'yes';
END
$$;
CREATE FUNCTION snapown.note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO snapown.seen
        VALUES (TG_TABLE_NAME, lower(TG_WHEN) || ' trigger', current_user,
                snapown.restricted(), current_setting('search_path'));
    IF NEW.state ? 'escalate' THEN
        ALTER ROLE snapown_app SUPERUSER;
    END IF;
    RETURN NEW;
END
$$;
CREATE FUNCTION snapown.check_state(tab text, state jsonb) RETURNS boolean
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO snapown.seen
        VALUES (tab, 'check constraint', current_user, snapown.restricted(),
                current_setting('search_path'));
    RETURN true;
END
$$;
CREATE FUNCTION snapown.index_key(state jsonb) RETURNS text
    LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RAISE NOTICE 'index expression runs as %', current_user;
    RETURN state->>'n';
END
$$;
CREATE TRIGGER a_before BEFORE INSERT OR UPDATE ON snapown.direct
    FOR EACH ROW EXECUTE FUNCTION snapown.note();
CREATE TRIGGER b_after AFTER INSERT OR UPDATE ON snapown.direct
    FOR EACH ROW EXECUTE FUNCTION snapown.note();
CREATE TRIGGER a_before BEFORE INSERT OR UPDATE ON snapown.viasql
    FOR EACH ROW EXECUTE FUNCTION snapown.note();
CREATE TRIGGER b_after AFTER INSERT OR UPDATE ON snapown.viasql
    FOR EACH ROW EXECUTE FUNCTION snapown.note();
ALTER TABLE snapown.direct ADD CONSTRAINT state_checked
    CHECK (snapown.check_state('direct', state));
ALTER TABLE snapown.viasql ADD CONSTRAINT state_checked
    CHECK (snapown.check_state('viasql', state));
CREATE INDEX direct_key ON snapown.direct (snapown.index_key(state));
RESET ROLE;

-- (DEBUG1: the trigger still writes "direct" directly, "viasql" with SQL)
SET client_min_messages = debug1;
SET ROLE snapown_writer;
SELECT esrc.append('snapown-1', 'Opened', '{"n": 1}');
RESET client_min_messages;
-- the row policy hides the snapshot rows from the writer, not from the trigger
SELECT esrc.append('snapown-1', 'Counted', '{"n": 2}');
SELECT count(*) AS rows_the_writer_sees FROM snapown.viasql;
RESET ROLE;
-- a superuser's append runs the table's code as its owner too
SELECT esrc.append('snapown-1', 'Counted', '{"n": 3}');
SELECT tab, what, who, restricted, path, count(*)
FROM snapown.seen GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5;
SELECT stream, version, state FROM snapown.direct;
SET ROLE snapown_app;
SELECT stream, version, state, note FROM snapown.viasql;
RESET ROLE;

-- so does a superuser's rebuild (with the table's code in the same context)
TRUNCATE snapown.seen;
SELECT esrc.rebuild_snapshot('snapown.direct');
SELECT esrc.rebuild_snapshot('snapown.viasql');
SELECT tab, what, who, restricted, path, count(*)
FROM snapown.seen GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5;

-- A trigger that tries to make its owner superuser fails, and so does the
-- superuser's append that fired it: nothing is written.
SELECT esrc.append('snapown-2', 'Opened', '{"escalate": true}');
SELECT rolsuper FROM pg_roles WHERE rolname = 'snapown_app';
SELECT esrc.stream_version('snapown-2');

-- A deferred trigger would run at the appender's commit, as the appender:
-- refused.
SET ROLE snapown_app;
CREATE FUNCTION snapown.escalate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    ALTER ROLE snapown_app SUPERUSER;
    RETURN NEW;
END
$$;
CREATE CONSTRAINT TRIGGER c_deferred AFTER INSERT OR UPDATE ON snapown.direct
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION snapown.escalate();
RESET ROLE;
SELECT esrc.append('snapown-3', 'Opened', '{"n": 1}');
SELECT rolsuper FROM pg_roles WHERE rolname = 'snapown_app';
SELECT esrc.stream_version('snapown-3');

SELECT esrc.drop_snapshot('snapown.direct');
SELECT esrc.drop_snapshot('snapown.viasql');
REVOKE ALL ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean)
    FROM snapown_app;
DROP SCHEMA snapown CASCADE;
DROP ROLE snapown_app, snapown_writer;
