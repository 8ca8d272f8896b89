-- Invariants after the stress run.  Each query returns one row; the driver
-- fails the test unless every "ok" column is true.
\pset format unaligned
\pset tuples_only on
\pset fieldsep ' '
-- no duplicate (stream, version), every stream starts at 0 with no holes
SELECT 'versions_gap_free', bool_and(first = 0 AND last + 1 = n AND n = nd), count(*) || ' streams'
FROM (SELECT stream, min(version) first, max(version) last, count(*) n,
             count(DISTINCT version) nd
      FROM esrc.events WHERE category = 'stress' GROUP BY stream) s;
-- position order agrees with version order inside every stream
SELECT 'position_order_matches_versions', coalesce(bool_and(ok), true), ''
FROM (SELECT version = row_number() OVER (PARTITION BY stream ORDER BY position) - 1 AS ok
      FROM esrc.events WHERE category = 'stress') s;
-- every acknowledged append is stored, and nothing else
SELECT 'acknowledged_singles_stored', count(*) FILTER (WHERE type = 'Tick') = :singles,
       count(*) FILTER (WHERE type = 'Tick') || ' Tick events, ' || :singles || ' acknowledged'
FROM esrc.events WHERE category = 'stress';
SELECT 'acknowledged_batches_stored', count(*) FILTER (WHERE type = 'Batch') = 3 * :batches,
       count(*) FILTER (WHERE type = 'Batch') || ' Batch events, ' || :batches || ' acknowledged batches'
FROM esrc.events WHERE category = 'stress';
-- batches are contiguous: versions i=1,2,3 in a row
SELECT 'batches_contiguous', coalesce(bool_and(ok), true), ''
FROM (SELECT (data->>'i')::int = 1 AND lead(data->>'i', 1) OVER w = '2' AND lead(data->>'i', 2) OVER w = '3' AS ok,
             type, data
      FROM esrc.events WHERE category = 'stress' WINDOW w AS (PARTITION BY stream ORDER BY version)) s
WHERE type = 'Batch' AND (data->>'i')::int = 1;
-- the reader saw every event after its start exactly once, in position order
SELECT 'reader_saw_each_event_once', (SELECT count(*) FROM stress_seen) = count(*)
       AND (SELECT count(DISTINCT position) FROM stress_seen) = count(*),
       (SELECT count(*) FROM stress_seen) || ' read, ' || count(*) || ' stored'
FROM esrc.events WHERE position > :start_position;
SELECT 'reader_in_position_order', coalesce(bool_and(ok), true), ''
FROM (SELECT position > lag(position, 1, 0::bigint) OVER (ORDER BY seq) AS ok FROM stress_seen) s;
SELECT 'reader_set_equals_log', NOT EXISTS (
         SELECT position FROM esrc.events WHERE position > :start_position
         EXCEPT SELECT position FROM stress_seen), '';
