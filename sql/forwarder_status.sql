-- esrc.forwarder_status and the functions that steer the forwarder, with
-- no broker: this database is not esrc.database, so the forwarder is
-- "inactive" here and every committed event counts as pending.  The row
-- of esrc.database (postgres, idle: no brokers) is there too, without
-- the counts only its own database can make.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;

SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute
 WHERE attrelid = 'esrc.forwarder_status'::regclass AND attnum > 0
 ORDER BY attnum;

SELECT state, detail, database = current_database() AS here,
       database = 'postgres' AS postgres, delivery, paused, last_position,
       events_pending IS NOT NULL AS counted, delivered_total, last_error,
       blocked_position, pid
  FROM esrc.forwarder_status
 ORDER BY here;

-- one row of state with the identity of this log
SELECT count(*), bool_and(log_id IS NOT NULL) FROM esrc.forwarder_state;
INSERT INTO esrc.forwarder_state DEFAULT VALUES;

-- pending: committed events after the position; lag: the oldest of them
CREATE TEMP TABLE fwd_before AS
    SELECT events_pending AS n FROM esrc.forwarder_status
     WHERE database = current_database();
SELECT esrc.append('fwdstatus-1', 'Opened', '{"n": 1}');
SELECT esrc.append('fwdstatus-1', 'Changed', '{"n": 2}');
BEGIN;
SELECT esrc.append('fwdstatus-1', 'RolledBack', '{"n": 3}');
ROLLBACK;
SELECT esrc.append('fwdstatus-2', 'Opened', '{}');
SELECT s.events_pending - b.n AS new_pending, s.lag_seconds >= 0 AS lag_known
  FROM esrc.forwarder_status s, fwd_before b
 WHERE s.database = current_database();

-- skipping an event: recorded, no longer pending; idempotent
SELECT esrc.forwarder_skip(NULL);
SELECT esrc.forwarder_skip(-1);
SELECT esrc.forwarder_skip(e.position, 'regression test')
  FROM esrc.events e WHERE e.stream = 'fwdstatus-1' AND e.version = 1;
SELECT esrc.forwarder_skip(e.position)
  FROM esrc.events e WHERE e.stream = 'fwdstatus-1' AND e.version = 1;
SELECT stream, reason, skipped_by = current_user AS by_me FROM esrc.forwarder_skips
 WHERE stream LIKE 'fwdstatus-%';
SELECT s.events_pending - b.n AS new_pending
  FROM esrc.forwarder_status s, fwd_before b
 WHERE s.database = current_database();

-- pause and resume: a flag in shared memory, shown in the status
SELECT esrc.forwarder_pause();
SELECT database = current_database() AS here, paused FROM esrc.forwarder_status ORDER BY 1;
SELECT esrc.forwarder_resume();
SELECT database = current_database() AS here, paused FROM esrc.forwarder_status ORDER BY 1;

-- readers see the status; only the extension's owner steers the forwarder
CREATE ROLE fwd_status_reader IN ROLE esrc_reader;
SET ROLE fwd_status_reader;
SELECT state, paused FROM esrc.forwarder_status ORDER BY state;
SELECT count(*) FROM esrc.forwarder_state;
SELECT esrc.forwarder_pause();
SELECT esrc.forwarder_resume();
SELECT esrc.forwarder_skip(1);
RESET ROLE;
DROP ROLE fwd_status_reader;

DELETE FROM esrc.forwarder_skips WHERE stream LIKE 'fwdstatus-%';
DROP TABLE fwd_before;
