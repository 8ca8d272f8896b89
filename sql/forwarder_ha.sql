-- High availability of the Kafka forwarder (issue 27): the setting
-- esrc.forwarder_standbys and its validation, the table
-- esrc.forwarder_divergences and the refusals of
-- esrc.forwarder_accept_divergence().  The worker's behaviour is
-- test/run-67-forward-standbys.sh and test/run-68-forward-divergence.sh.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;

SELECT name, setting, context, vartype
  FROM pg_settings WHERE name = 'esrc.forwarder_standbys';

-- reload only
SET esrc.forwarder_standbys = 'standby1';

-- check hooks: syntax, names, and (in ALTER SYSTEM) the slots themselves
ALTER SYSTEM SET esrc.forwarder_standbys = '"standby1';
ALTER SYSTEM SET esrc.forwarder_standbys = 'standby1,,standby2';
ALTER SYSTEM SET esrc.forwarder_standbys = 'stand-by';
ALTER SYSTEM SET esrc.forwarder_standbys = 'regress_no_such_slot';
SELECT slot_name FROM pg_create_physical_replication_slot('regress_fwd_standby');
ALTER SYSTEM SET esrc.forwarder_standbys = 'regress_fwd_standby, regress_no_such_slot';
ALTER SYSTEM SET esrc.forwarder_standbys = 'regress_fwd_standby';
SELECT count(*) AS auto_conf_lines FROM pg_file_settings
 WHERE name = 'esrc.forwarder_standbys' AND sourcefile LIKE '%postgresql.auto.conf';
ALTER SYSTEM RESET esrc.forwarder_standbys;
SELECT pg_drop_replication_slot('regress_fwd_standby');

-- the record of divergences: readers may look, nobody but the worker and
-- the function writes
SELECT attname, format_type(atttypid, atttypmod), attnotnull
  FROM pg_attribute
 WHERE attrelid = 'esrc.forwarder_divergences'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT has_table_privilege('esrc_reader', 'esrc.forwarder_divergences', 'SELECT') AS reader_reads,
       has_table_privilege('esrc_writer', 'esrc.forwarder_divergences', 'INSERT') AS writer_inserts,
       has_function_privilege('esrc_writer',
                              'esrc.forwarder_accept_divergence(bigint, text, name)',
                              'EXECUTE') AS writer_accepts;

-- accept_divergence: refusals
\set VERBOSITY default
SELECT esrc.forwarder_accept_divergence(NULL, 'no position');
SELECT esrc.forwarder_accept_divergence(0, 'elsewhere', 'some_other_db');
DO $$
BEGIN
    PERFORM esrc.forwarder_accept_divergence(esrc.safe_position() + 1000, 'above the horizon');
EXCEPTION WHEN invalid_parameter_value THEN
    RAISE NOTICE 'refused (22023): %', regexp_replace(SQLERRM, '[0-9]+', 'N', 'g');
END
$$;
SELECT esrc.forwarder_accept_divergence(0, 'nothing diverged');
BEGIN READ ONLY;
SELECT esrc.forwarder_accept_divergence(0, 'read only');
ROLLBACK;
-- a superuser's decision only, even for a role that was granted the function
CREATE ROLE regress_fwd_operator;
GRANT USAGE ON SCHEMA esrc TO regress_fwd_operator;
GRANT EXECUTE ON FUNCTION esrc.forwarder_accept_divergence(bigint, text, name) TO regress_fwd_operator;
SET ROLE regress_fwd_operator;
SELECT esrc.forwarder_accept_divergence(0, 'not a superuser');
RESET ROLE;
REVOKE ALL ON FUNCTION esrc.forwarder_accept_divergence(bigint, text, name) FROM regress_fwd_operator;
REVOKE USAGE ON SCHEMA esrc FROM regress_fwd_operator;
DROP ROLE regress_fwd_operator;

-- a divergence as the worker records it, accepted: the decision is kept
-- and the forwarding position set (the worker continues after it)
INSERT INTO esrc.forwarder_divergences (kafka_position, kafka_event_id, log_event_id, log_end)
VALUES (0, '00000000-0000-4000-8000-000000000001', NULL, 0);
CREATE TEMP TABLE before AS SELECT position FROM esrc.forwarder_state;
SELECT esrc.forwarder_accept_divergence((SELECT position FROM before), 'regress: nothing was forwarded');
SELECT kafka_position, accepted_position = (SELECT position FROM before) AS accepted_there,
       reason, accepted_by = current_user AS by_me, accepted_at IS NOT NULL AS decided
  FROM esrc.forwarder_divergences;
SELECT position = (SELECT position FROM before) AS position_set FROM esrc.forwarder_state;
DELETE FROM esrc.forwarder_divergences;
