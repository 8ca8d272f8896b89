-- esrc.standby_horizon: the one row which the primary's horizon publisher
-- (src/log/standby.c) overwrites in place with the in-flight registry for
-- its hot standbys, and esrc.standby_horizon_interval.  The reads on a standby
-- are test/run-66-standby-reads.sh's.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
\set VERBOSITY terse
SELECT count(*) AS rows, bool_and(singleton) AS singleton FROM esrc.standby_horizon;
SHOW esrc.standby_horizon_interval;

-- an append wakes the publisher, which writes the new horizon (at rest:
-- last(seq), nothing in flight)
SELECT esrc.append('sbh-1', 'Added', '{}') AS version;
DO $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '60 seconds';
BEGIN
    WHILE NOT EXISTS (SELECT FROM esrc.standby_horizon
                      WHERE horizon = esrc.safe_position()
                        AND last_position = esrc.safe_position()) LOOP
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'the horizon publisher did not publish %', esrc.safe_position();
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
END
$$;
SELECT horizon = (SELECT max(position) FROM esrc.events) AS at_last_event,
       ncategories = 0 AND overflow_bound = 0 AS nothing_in_flight,
       length(categories) AS category_bytes,
       published_at <= clock_timestamp() AS published
FROM esrc.standby_horizon;

-- in place: still the first version of the row (no transaction wrote it)
SELECT ctid = '(0,1)' AS in_place FROM esrc.standby_horizon;
-- one row, never a second
INSERT INTO esrc.standby_horizon VALUES (true, now(), 0, 0, 0, 0, '\x');
INSERT INTO esrc.standby_horizon VALUES (false, now(), 0, 0, 0, 0, '\x');

-- readers may look at it; writers and the public may not write it
SET ROLE esrc_reader;
SELECT count(*) AS rows FROM esrc.standby_horizon;
RESET ROLE;
SET ROLE esrc_writer;
UPDATE esrc.standby_horizon SET horizon = 0;
RESET ROLE;
CREATE ROLE sbh_nobody;
SET ROLE sbh_nobody;
SELECT count(*) FROM esrc.standby_horizon;
RESET ROLE;
DROP ROLE sbh_nobody;

-- the setting: -1 (off) .. 60 s, in the configuration file
SELECT min_val, max_val, unit, context FROM pg_settings WHERE name = 'esrc.standby_horizon_interval';
