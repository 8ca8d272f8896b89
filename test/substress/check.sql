-- test/substress/check.sql: the checks of the subscription tests as views
-- (name, ok), over test/substress/setup.sql's tables.  psql variable
-- partitions: the subscription's.
--
-- check_in: results_in, written in the poll's transaction: exactly once.
-- check_out: results_out, written outside it: at least once.
-- check_samples: the sampled esrc.subscription_status.

CREATE VIEW expected_events AS
SELECT position, stream, version FROM esrc.events WHERE category = 'acct';

-- the committed batches of results_in: one per transaction (xmin), from
-- the first insert to the commit (track_commit_timestamp)
CREATE VIEW batches AS
SELECT esrc.stream_partition(stream, :partitions) AS partition, member,
       xmin::text AS xid, min(at) AS started, pg_xact_commit_timestamp(xmin) AS committed,
       count(*) AS events
FROM results_in
GROUP BY 1, 2, 3, 5;

CREATE VIEW check_in AS
SELECT 'in: as many results as events' AS name,
       (SELECT count(*) FROM results_in) = (SELECT count(*) FROM expected_events) AS ok
UNION ALL
SELECT 'in: no event twice',
       NOT EXISTS (SELECT FROM results_in GROUP BY position HAVING count(*) > 1)
UNION ALL
SELECT 'in: no event missing',
       NOT EXISTS (SELECT FROM expected_events e
                   WHERE NOT EXISTS (SELECT FROM results_in r WHERE r.position = e.position))
UNION ALL
SELECT 'in: nothing else (rolled back, other category, wrong stream or version)',
       NOT EXISTS (SELECT FROM results_in r LEFT JOIN expected_events e USING (position)
                   WHERE e.position IS NULL OR e.stream <> r.stream OR e.version <> r.version)
UNION ALL
SELECT 'in: per stream, versions in commit order',
       NOT EXISTS (SELECT FROM (SELECT version, lag(version) OVER (PARTITION BY stream ORDER BY id) AS prev
                                FROM results_in) x
                   WHERE prev IS NOT NULL AND version <> prev + 1)
UNION ALL
SELECT 'in: no partition processed by two members at once',
       -- per partition, in the order they began, no batch begins before
       -- every earlier one has committed
       NOT EXISTS (SELECT FROM (SELECT started,
                                       max(committed) OVER (PARTITION BY partition ORDER BY started, xid
                                                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
                                FROM batches) x
                   WHERE before >= started)
       AND NOT EXISTS (SELECT FROM batches WHERE committed IS NULL);

CREATE VIEW check_out AS
SELECT 'out: no event missing' AS name,
       NOT EXISTS (SELECT FROM expected_events e
                   WHERE NOT EXISTS (SELECT FROM results_out r WHERE r.position = e.position)) AS ok
UNION ALL
SELECT 'out: nothing else (rolled back, other category, wrong stream or version)',
       NOT EXISTS (SELECT FROM results_out r LEFT JOIN expected_events e USING (position)
                   WHERE e.position IS NULL OR e.stream <> r.stream OR e.version <> r.version)
UNION ALL
SELECT 'out: per stream, first deliveries in version order',
       NOT EXISTS (SELECT FROM (SELECT version, lag(version) OVER (PARTITION BY stream ORDER BY first) AS prev
                                FROM (SELECT stream, version, min(id) AS first
                                      FROM results_out GROUP BY 1, 2) f) x
                   WHERE prev IS NOT NULL AND version <> prev + 1);

CREATE VIEW check_samples AS
SELECT 'status: one row per partition in every sample' AS name,
       NOT EXISTS (SELECT FROM status_samples GROUP BY sample, partition HAVING count(*) <> 1)
       AND (SELECT count(DISTINCT partition) FROM status_samples) = :partitions AS ok
UNION ALL
SELECT 'status: partitions changed hands during the run',
       EXISTS (SELECT FROM status_samples WHERE member IS NOT NULL
               GROUP BY partition HAVING count(DISTINCT member) > 1);
