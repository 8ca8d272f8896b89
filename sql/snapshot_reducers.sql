-- Reducers: a reducer error fails the append with the reducer's message and
-- a context line naming the snapshot, stream and version, and nothing is
-- written; a NULL result is an error too.  Reducers run with search_path
-- pinned, in a security-restricted context whose settings do not leak, and
-- must not append or call snapshot functions.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;

-- try(sql): the SQLSTATE, message and context of the error sql raises,
-- without the context lines of the SQL statements around it (those belong
-- to esrc.append and to this function).
CREATE FUNCTION pg_temp.try(sql text, OUT code text, OUT message text, OUT context text)
    LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    code := 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            context = PG_EXCEPTION_CONTEXT;
    context := (SELECT string_agg(l, ' / ') FROM regexp_split_to_table(context, E'\n') l
                WHERE (l LIKE 'PL/pgSQL function%' OR l LIKE 'applying event%')
                  AND l NOT LIKE '%pg_temp%');
END
$$;

CREATE FUNCTION snapr_picky(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE plpgsql AS $$
BEGIN
    IF event.type = 'Boom' THEN
        RAISE EXCEPTION 'cannot apply % to %', event.type, event.stream
            USING ERRCODE = 'check_violation';
    ELSIF event.type = 'Nothing' THEN
        RETURN NULL;
    ELSIF event.type = 'JsonNull' THEN
        RETURN 'null'::jsonb;
    END IF;
    RETURN state || jsonb_build_object('n', coalesce((state->>'n')::int, 0) + 1);
END
$$;
SELECT esrc.append('snapr-1', 'Created', '{}');
SELECT esrc.create_snapshot('snapr_picky', 'snapr', 'snapr_picky(jsonb, esrc.event)');
SELECT esrc.create_snapshot('snapr_merged', 'snapr', 'esrc.merge(jsonb, esrc.event)');

-- A failing reducer fails the append; neither snapshot of the category nor
-- the log is written.
SELECT * FROM pg_temp.try($$SELECT esrc.append('snapr-1', 'Boom', '{"x": 1}')$$);
SELECT * FROM pg_temp.try($$SELECT esrc.append('snapr-2', 'Boom', '{}')$$);
SELECT * FROM pg_temp.try($$SELECT esrc.append('snapr-1', 'Nothing', '{}')$$);
SELECT esrc.stream_version('snapr-1') AS v1, esrc.stream_version('snapr-2') AS v2;
SELECT stream, version, state FROM snapr_picky ORDER BY stream;
SELECT stream, version, state FROM snapr_merged ORDER BY stream;
-- the same, as psql shows it
\set SHOW_CONTEXT never
SELECT esrc.append('snapr-1', 'Nothing', '{}');
\set SHOW_CONTEXT errors

-- A batch is all or nothing.
SELECT * FROM pg_temp.try($$SELECT esrc.append_batch('snapr-1',
    '[{"type": "Fine", "data": {"a": 1}}, {"type": "Boom", "data": {}}]')$$);
SELECT esrc.stream_version('snapr-1') AS v1;
SELECT stream, version, state FROM snapr_merged ORDER BY stream;

-- The session goes on normally after such an error.
SELECT esrc.append('snapr-1', 'Fine', '{"a": 2}');
SELECT stream, version, state FROM snapr_picky ORDER BY stream;

-- JSON null is a state like any other (SQL NULL is not).
SELECT esrc.append('snapr-3', 'JsonNull', '{}');
SELECT stream, version, state FROM snapr_picky WHERE stream = 'snapr-3';

-- A reducer error in create_snapshot, rebuild_snapshot or snapshot_at fails
-- the call with the same context, and leaves nothing behind.
SELECT esrc.append('snaprx-1', 'Boom', '{}');
SELECT * FROM pg_temp.try($$SELECT esrc.create_snapshot('snapr_never', 'snaprx', 'snapr_picky(jsonb, esrc.event)', '{"n": 0}')$$);
SELECT to_regclass('snapr_never') AS table_left,
       (SELECT count(*) FROM esrc.snapshots WHERE snapshot::text = 'snapr_never') AS definitions;
CREATE OR REPLACE FUNCTION snapr_picky(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE plpgsql AS $$
BEGIN
    IF event.data->>'a' = '2' THEN
        RAISE EXCEPTION 'replaced reducer rejects a = 2';
    END IF;
    RETURN state || jsonb_build_object('n', coalesce((state->>'n')::int, 0) + 1);
END
$$;
SELECT * FROM pg_temp.try($$SELECT esrc.rebuild_snapshot('snapr_picky')$$);
SELECT stream, version, state FROM snapr_picky ORDER BY stream;
SELECT * FROM pg_temp.try($$SELECT esrc.snapshot_at('snapr_picky', 'snapr-1', 1)$$);
SELECT esrc.snapshot_at('snapr_picky', 'snapr-1', 0);
SELECT esrc.drop_snapshot('snapr_picky');

-- Reducers run with search_path = pg_catalog, pg_temp, whatever the
-- session's; what they set is undone after the call.
CREATE FUNCTION snapr_env(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE plpgsql AS $$
DECLARE
    seen text := current_setting('search_path');
BEGIN
    PERFORM set_config('snaptest.leak', 'leaked', false);
    PERFORM set_config('search_path', 'public', false);
    RETURN jsonb_build_object('search_path', seen);
END
$$;
SELECT esrc.create_snapshot('snapr_env', 'snapenv', 'snapr_env(jsonb, esrc.event)');
SET search_path = public, pg_catalog;
SELECT esrc.append('snapenv-1', 'Any', '{}');
SELECT state FROM snapr_env;
SELECT current_setting('search_path') AS search_path,
       current_setting('snaptest.leak', true) AS leaked;
SELECT esrc.snapshot_at('snapr_env', 'snapenv-1', 0);
SELECT esrc.rebuild_snapshot('snapr_env');
SELECT current_setting('search_path') AS search_path,
       current_setting('snaptest.leak', true) AS leaked;
RESET search_path;
SELECT esrc.drop_snapshot('snapr_env');

-- Reducers run as a security-restricted operation.
CREATE FUNCTION snapr_temp(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE plpgsql AS $$
BEGIN
    CREATE TEMP TABLE snapr_scratch (x int);
    RETURN state;
END
$$;
SELECT esrc.create_snapshot('snapr_temp', 'snaptemp', 'snapr_temp(jsonb, esrc.event)');
SELECT * FROM pg_temp.try($$SELECT esrc.append('snaptemp-1', 'Any', '{}')$$);
SELECT esrc.drop_snapshot('snapr_temp');

-- Reducers must not append or use snapshot functions.
CREATE FUNCTION snapr_nested(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE plpgsql AS $$
BEGIN
    IF event.type = 'Append' THEN
        PERFORM esrc.append('snaprnone-1', 'FromReducer', '{}');
    ELSIF event.type = 'Load' THEN
        PERFORM esrc.load('snapr_nested', event.stream);
    END IF;
    RETURN state;
END
$$;
SELECT esrc.create_snapshot('snapr_nested', 'snapnest', 'snapr_nested(jsonb, esrc.event)');
SELECT * FROM pg_temp.try($$SELECT esrc.append('snapnest-1', 'Append', '{}')$$);
SELECT * FROM pg_temp.try($$SELECT esrc.append('snapnest-1', 'Load', '{}')$$);
SELECT esrc.stream_version('snaprnone-1') AS appended_by_reducer, esrc.stream_version('snapnest-1') AS v;
SELECT esrc.append('snapnest-1', 'Other', '{}');
SELECT esrc.drop_snapshot('snapr_nested');

-- A reducer that cannot be found fails the appends of its category only,
-- with a clear error; the DROP FUNCTION that would cause it is refused.
CREATE FUNCTION snapr_last(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE sql IMMUTABLE RETURN jsonb_build_object('last', event.type);
SELECT esrc.create_snapshot('snapr_last', 'snapr', 'snapr_last(jsonb, esrc.event)');
SELECT * FROM pg_temp.try($$DROP FUNCTION snapr_last(jsonb, esrc.event)$$);
ALTER FUNCTION snapr_last(jsonb, esrc.event) RENAME TO snapr_renamed;
SELECT * FROM pg_temp.try($$SELECT esrc.append('snapr-1', 'Fine', '{}')$$);
SELECT esrc.append('snaprnone-1', 'Unaffected', '{}');
SELECT * FROM pg_temp.try($$SELECT * FROM esrc.snapshot_at('snapr_last', 'snapr-1', 0)$$);
ALTER FUNCTION snapr_renamed(jsonb, esrc.event) RENAME TO snapr_last;
SELECT esrc.append('snapr-1', 'Fine', '{}');
SELECT stream, version, state FROM snapr_last ORDER BY stream;

SELECT esrc.drop_snapshot('snapr_last');
SELECT esrc.drop_snapshot('snapr_merged');
SELECT count(*) AS definitions_left FROM esrc.snapshots WHERE category LIKE 'snap%';
DROP FUNCTION snapr_picky(jsonb, esrc.event), snapr_env(jsonb, esrc.event),
              snapr_temp(jsonb, esrc.event), snapr_nested(jsonb, esrc.event),
              snapr_last(jsonb, esrc.event);
