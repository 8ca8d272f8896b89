-- Reads cost what they return, not the size of the log (issue 12, item
-- 7): a read of a 5-event category in a log with 20,000 events of another
-- category touches about 5 rows of esrc.events, whatever plan the server
-- would pick for a query (plan_cache_mode = force_generic_plan: a cached
-- generic plan once scanned the whole log by the primary key).  Rows
-- touched = rows read by sequential scans + rows fetched by index scans
-- of esrc.events in this transaction (the counters are per transaction
-- until it ends).
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
SELECT coalesce(max(position), 0) AS p0 FROM esrc.events \gset
SELECT esrc.append_batch('scaletiny-1',
    (SELECT jsonb_agg(jsonb_build_object('type', 'T', 'data', jsonb_build_object('n', i)))
     FROM generate_series(1, 5) i));
SELECT count(esrc.append_batch('scalebulk-' || k,
    (SELECT jsonb_agg(jsonb_build_object('type', 'B', 'data', '{}'::jsonb)) FROM generate_series(1, 100))))
FROM generate_series(1, 200) k;
ANALYZE esrc.events;
SELECT esrc.create_snapshot('scale_tiny', 'scaletiny', 'esrc.merge(jsonb, esrc.event)');
SET plan_cache_mode = force_generic_plan;

CREATE FUNCTION pg_temp.touched() RETURNS bigint LANGUAGE sql AS $$
    SELECT pg_stat_get_xact_tuples_returned('esrc.events'::regclass)
         + pg_stat_get_xact_tuples_fetched('esrc.events'::regclass)
         + (SELECT sum(pg_stat_get_xact_tuples_fetched(indexrelid))
            FROM pg_index WHERE indrelid = 'esrc.events'::regclass) $$;

BEGIN;
SELECT pg_temp.touched() AS t0 \gset
SELECT count(*) AS read_category FROM esrc.read_category('scaletiny', :p0);
SELECT pg_temp.touched() - :t0 AS rows_touched;
SELECT pg_temp.touched() AS t0 \gset
-- twice more: a plan cached by the first call must not change this
SELECT count(*) AS read_category FROM esrc.read_category('scaletiny', :p0, 1000);
SELECT count(*) AS read_category FROM esrc.read_category('scaletiny', :p0 + 2, 1000);
SELECT pg_temp.touched() - :t0 AS rows_touched;
SELECT pg_temp.touched() AS t0 \gset
SELECT count(*) AS read_category_big FROM esrc.read_category('scalebulk', :p0, 10);
SELECT pg_temp.touched() - :t0 AS rows_touched;
SELECT pg_temp.touched() AS t0 \gset
SELECT count(*) AS read_all FROM esrc.read_all(:p0, 10);
SELECT pg_temp.touched() - :t0 AS rows_touched;
SELECT pg_temp.touched() AS t0 \gset
SELECT count(*) AS read_stream FROM esrc.read_stream('scalebulk-7', 10, 5);
SELECT count(*) AS read_stream_backward FROM esrc.read_stream_backward('scalebulk-7', NULL, 5);
SELECT esrc.stream_version('scalebulk-7');
SELECT pg_temp.touched() - :t0 AS rows_touched;
SELECT pg_temp.touched() AS t0 \gset
SELECT esrc.snapshot_at('scale_tiny', 'scaletiny-1', 4);
SELECT version FROM esrc.load('scale_tiny', 'scaletiny-1');
SELECT pg_temp.touched() - :t0 AS rows_touched;
COMMIT;

-- rebuilding and creating a snapshot of the tiny category read the
-- category, not the log
BEGIN;
SELECT pg_temp.touched() AS t0 \gset
SELECT esrc.rebuild_snapshot('scale_tiny');
SELECT pg_temp.touched() - :t0 AS rows_touched;
COMMIT;
BEGIN;
SELECT pg_temp.touched() AS t0 \gset
SELECT esrc.create_snapshot('scale_tiny2', 'scaletiny', 'esrc.merge(jsonb, esrc.event)');
SELECT pg_temp.touched() - :t0 AS rows_touched;
ROLLBACK;

-- the results are those of the events
SELECT stream, version, state FROM scale_tiny;
SELECT version, data FROM esrc.read_category('scaletiny', :p0 + 3);

RESET plan_cache_mode;
SELECT esrc.drop_snapshot('scale_tiny');

-- the index scans would bypass row-level security on esrc.events: refused
CREATE ROLE esrc_rls_reader IN ROLE esrc_reader;
ALTER TABLE esrc.events ENABLE ROW LEVEL SECURITY;
SET ROLE esrc_rls_reader;
SELECT count(*) FROM esrc.read_stream('scaletiny-1');
SELECT count(*) FROM esrc.read_category('scaletiny');
RESET ROLE;
ALTER TABLE esrc.events DISABLE ROW LEVEL SECURITY;
DROP ROLE esrc_rls_reader;
