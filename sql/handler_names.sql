-- Handlers and reducers run with search_path = pg_catalog, pg_temp: a
-- first handler that names its table without the schema is the mistake a
-- new user makes.  create_projection and create_snapshot warn about table
-- names without their schema where they can tell (SQL and PL/pgSQL bodies
-- as text, no SET search_path), and never about qualified names, CTEs,
-- functions or expressions that merely contain FROM; a handler that fails
-- with an undefined table or function gets the hint in last_error.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;
\set SHOW_CONTEXT never
CREATE SCHEMA hn;
CREATE TABLE hn.counts (stream text PRIMARY KEY, n int NOT NULL);
-- the new user's handler
CREATE FUNCTION hn.count_unqualified(event esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO counts VALUES (event.stream, 1)
        ON CONFLICT (stream) DO UPDATE SET n = counts.n + 1;
END
$$;
-- the same written right: no warning
CREATE FUNCTION hn.count_qualified(event esrc.event) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    total int;
BEGIN
    -- a comment naming FROM counts and a string 'UPDATE counts' are no code
    INSERT INTO hn.counts VALUES (event.stream, 1)
        ON CONFLICT (stream) DO UPDATE SET n = hn.counts.n + 1;
    SELECT count(*) INTO total FROM hn.counts c WHERE c.stream = event.stream;
    WITH recent AS (SELECT stream FROM hn.counts)
    SELECT count(*) INTO total FROM recent JOIN pg_class ON true;
    PERFORM extract(epoch FROM event.recorded_at), substring(event.stream FROM 1 FOR 3),
            jsonb_typeof(event.data) IS DISTINCT FROM 'object',
            (SELECT count(*) FROM jsonb_each(event.data) e WHERE e.key IS NOT NULL);
    PERFORM 1 FROM hn.counts FOR UPDATE;
END
$$;
-- with its own search_path: no warning
CREATE FUNCTION hn.count_with_path(event esrc.event) RETURNS void LANGUAGE sql
SET search_path = hn, pg_temp AS $$
    UPDATE counts SET n = n + 1 WHERE stream = event.stream;
$$;
-- SQL functions: a text body is checked, a SQL-standard body is not (its
-- names were resolved when it was created)
SET check_function_bodies = off;
CREATE FUNCTION hn.count_sql(event esrc.event) RETURNS void LANGUAGE sql AS $$
    DELETE FROM counts WHERE stream = event.stream;
    SELECT 1 FROM hn.counts JOIN totals ON true;
$$;
RESET check_function_bodies;
CREATE FUNCTION hn.count_atomic(event esrc.event) RETURNS void LANGUAGE sql
BEGIN ATOMIC
    UPDATE hn.counts SET n = n + 1 WHERE stream = event.stream;
END;
CREATE FUNCTION hn.reduce_unqualified(state jsonb, event esrc.event) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    RETURN state || jsonb_build_object('n', (SELECT n FROM counts WHERE stream = event.stream));
END
$$;

SELECT esrc.create_projection('hn_unqualified', 'hn.count_unqualified(esrc.event)', ARRAY['hn'],
                              start => 'end') > 0 AS created;
SELECT esrc.create_projection('hn_qualified', 'hn.count_qualified(esrc.event)', ARRAY['hnq'],
                              start => 'end') > 0 AS created;
SELECT esrc.create_projection('hn_path', 'hn.count_with_path(esrc.event)', ARRAY['hnq'],
                              start => 'end') > 0 AS created;
SELECT esrc.create_projection('hn_sql', 'hn.count_sql(esrc.event)', ARRAY['hnq'],
                              start => 'end') > 0 AS created;
SELECT esrc.create_projection('hn_atomic', 'hn.count_atomic(esrc.event)', ARRAY['hnq'],
                              start => 'end') > 0 AS created;
SELECT esrc.create_snapshot('hn.reduced', 'hnsnap', 'hn.reduce_unqualified(jsonb, esrc.event)');
SELECT esrc.drop_snapshot('hn.reduced');

-- The unqualified handler fails at its first event: the hint is in last_error.
SELECT esrc.append('hn-1', 'Counted', '{}');
DO $$
BEGIN
    FOR i IN 1..600 LOOP
        EXIT WHEN (SELECT bool_or(last_error IS NOT NULL) FROM esrc.projection_status
                   WHERE projection = 'hn_unqualified');
        PERFORM pg_sleep(0.1);
    END LOOP;
END
$$;
SELECT last_error_sqlstate, last_error FROM esrc.projection_status WHERE projection = 'hn_unqualified';
SELECT esrc.drop_projection(name) FROM (SELECT name FROM esrc.projections
                                        WHERE name LIKE 'hn\_%' ORDER BY name) p;
DROP SCHEMA hn CASCADE;
