-- Part of the esrc install script (see Makefile): metrics for monitoring
-- (src/base/metrics.c, docs/operations.md "Metrics").

------------------------------------------------------------------------
-- Counters kept in shared memory per database since the server started
-- (they start at 0 again after a restart), and the view esrc.metrics that
-- shows them, with the forwarder's gauges, one row per figure, for
-- Prometheus (examples/postgres_exporter/queries.yaml).
------------------------------------------------------------------------
CREATE FUNCTION esrc.metrics_counters()
    RETURNS TABLE (database name, appends bigint, events bigint, conflicts bigint,
                   idempotent_hits bigint, forwarded bigint, forwarder_batches bigint,
                   forwarder_errors bigint)
    LANGUAGE c STRICT VOLATILE PARALLEL RESTRICTED
    AS 'MODULE_PATHNAME', 'esrc_metrics_counters';
COMMENT ON FUNCTION esrc.metrics_counters() IS
    'The counters of esrc.metrics for every database that counted something since the server started (databases past the 63rd share the row "(other)"); use the view esrc.metrics.';
REVOKE ALL ON FUNCTION esrc.metrics_counters() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.metrics_counters() TO esrc_reader;

CREATE VIEW esrc.metrics AS
    WITH c AS (
        SELECT coalesce(m.appends, 0) AS appends,
               coalesce(m.events, 0) AS events,
               coalesce(m.conflicts, 0) AS conflicts,
               coalesce(m.idempotent_hits, 0) AS idempotent_hits,
               coalesce(m.forwarded, 0) AS forwarded,
               coalesce(m.forwarder_batches, 0) AS forwarder_batches,
               coalesce(m.forwarder_errors, 0) AS forwarder_errors
          FROM (SELECT pg_catalog.current_database() AS database) d
          LEFT JOIN esrc.metrics_counters() m ON m.database = d.database),
    -- the one place that reads esrc.forwarder_status: this database's row,
    -- when the forwarder serves it
    f AS (
        SELECT s.events_pending, s.lag_seconds, s.state, s.standby_wait_since
          FROM esrc.forwarder_status s
         WHERE s.database = pg_catalog.current_database()
           AND s.state <> 'inactive')
    SELECT v.name, pg_catalog.jsonb_build_object('database', pg_catalog.current_database()) AS labels,
           v.value, v.help
      FROM c, LATERAL (VALUES
        ('esrc_appends_total', c.appends::double precision,
         'Calls of esrc.append and esrc.append_batch that wrote events, counted at commit.'),
        ('esrc_events_total', c.events::double precision,
         'Events those calls wrote, counted at commit.'),
        ('esrc_conflicts_total', c.conflicts::double precision,
         'Appends refused with SQLSTATE 40001 by their version check (expected_version, or a concurrent append at REPEATABLE READ).'),
        ('esrc_idempotent_hits_total', c.idempotent_hits::double precision,
         'Appends answered from event ids already stored (retries), counted at commit.'),
        ('esrc_forwarded_total', c.forwarded::double precision,
         'Events the forwarder delivered to Kafka.'),
        ('esrc_forwarder_batches_total', c.forwarder_batches::double precision,
         'Batches the forwarder delivered to Kafka (Kafka transactions in exactly_once mode).'),
        ('esrc_forwarder_errors_total', c.forwarder_errors::double precision,
         'Failures the forwarder reported (Kafka unreachable, refused configuration, poison record), each retry that fails included.')
      ) v(name, value, help)
    UNION ALL
    SELECT v.name, pg_catalog.jsonb_build_object('database', pg_catalog.current_database()),
           v.value, v.help
      FROM f, LATERAL (VALUES
        ('esrc_forwarder_pending_events', f.events_pending::double precision,
         'Committed events the forwarder has not delivered yet.'),
        ('esrc_forwarder_lag_seconds', coalesce(f.lag_seconds, 0)::double precision,
         'Seconds since the oldest pending event was recorded; 0 when nothing is pending.'),
        ('esrc_forwarder_standby_wait_seconds',
         coalesce(greatest(0, extract(epoch FROM pg_catalog.clock_timestamp() - f.standby_wait_since)), 0)::double precision,
         'Seconds the forwarder has been waiting for a standby of esrc.forwarder_standbys to flush the next batch''s WAL; 0 when it does not wait.'),
        ('esrc_forwarder_diverged', CASE WHEN f.state = 'diverged' THEN 1 ELSE 0 END::double precision,
         '1 while the forwarder sends nothing because Kafka''s position record does not match the log (state diverged), else 0.')
      ) v(name, value, help);
COMMENT ON VIEW esrc.metrics IS
    'This database''s figures for monitoring, one row per metric (Prometheus names): counters since the server started and the forwarder''s gauges (only where the forwarder serves this database).';
COMMENT ON COLUMN esrc.metrics.name IS 'Prometheus metric name; _total marks a counter.';
COMMENT ON COLUMN esrc.metrics.labels IS 'Prometheus labels: {"database": ...}.';
COMMENT ON COLUMN esrc.metrics.help IS 'What the figure counts or measures.';
GRANT SELECT ON esrc.metrics TO esrc_reader;
