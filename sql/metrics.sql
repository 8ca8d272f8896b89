-- esrc.metrics: the append path's counters count what committed (deltas,
-- since the counters are the server's since it started).
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
\set VERBOSITY terse
SELECT name, labels = jsonb_build_object('database', current_database()) AS labelled,
       value >= 0 AS non_negative, help <> '' AS has_help
  FROM esrc.metrics ORDER BY name;
CREATE TEMP TABLE before AS SELECT name, value FROM esrc.metrics;
CREATE FUNCTION pg_temp.delta() RETURNS TABLE (name text, delta double precision)
    LANGUAGE sql AS $$
    SELECT m.name, m.value - b.value FROM esrc.metrics m JOIN before b USING (name)
     WHERE m.name IN ('esrc_appends_total', 'esrc_events_total',
                      'esrc_conflicts_total', 'esrc_idempotent_hits_total')
     ORDER BY m.name $$;

SELECT esrc.append('metrics-1', 'A', '{}');
SELECT esrc.append_batch('metrics-2', '[{"type": "A", "data": {}}, {"type": "B", "data": {}}]');
-- a conflict
SELECT esrc.append('metrics-1', 'A', '{}', NULL, 7);
-- an idempotent retry: the first counts as an append, the second as a hit
SELECT esrc.append('metrics-3', 'A', '{}', NULL, NULL, 'a0a0a0a0-0000-4000-8000-000000000001');
SELECT esrc.append('metrics-3', 'A', '{}', NULL, NULL, 'a0a0a0a0-0000-4000-8000-000000000001');
-- rolled back: nothing; savepoints: what was released
BEGIN;
SELECT esrc.append('metrics-4', 'A', '{}');
ROLLBACK;
BEGIN;
SELECT esrc.append('metrics-4', 'A', '{}');
SAVEPOINT a;
SELECT esrc.append_batch('metrics-4', '[{"type": "A", "data": {}}, {"type": "B", "data": {}}]');
SAVEPOINT b;
SELECT esrc.append('metrics-4', 'A', '{}');
ROLLBACK TO a;
SAVEPOINT c;
SELECT esrc.append('metrics-4', 'B', '{}');
SAVEPOINT d;
SELECT esrc.append('metrics-4', 'C', '{}');
RELEASE c;
COMMIT;
-- a conflict inside a savepoint still counts
BEGIN;
SAVEPOINT e;
SELECT esrc.append('metrics-4', 'X', '{}', NULL, -1);
ROLLBACK TO e;
COMMIT;
-- switched off: not counted
SET esrc.track_metrics = off;
SELECT esrc.append('metrics-5', 'A', '{}');
RESET esrc.track_metrics;
-- expected: appends 1+1+1+3 = 6, events 1+2+1+3 = 7, conflicts 2, hits 1
SELECT * FROM pg_temp.delta();
-- esrc_reader reads the view; others do not
SET ROLE esrc_reader;
SELECT count(*) > 0 AS readable FROM esrc.metrics;
RESET ROLE;
CREATE ROLE metrics_nobody;
SET ROLE metrics_nobody;
SELECT * FROM esrc.metrics_counters();
RESET ROLE;
DROP ROLE metrics_nobody;
