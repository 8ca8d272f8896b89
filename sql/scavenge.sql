-- esrc.scavenge(max_events) redacts in place, as esrc.erase_stream does
-- (data {"erased": true}, metadata null), exactly the events the stream
-- rules hide, and nothing any read still shows: the reads return the same
-- rows before and after.  Resumable in slices (esrc.scavenge_progress),
-- recorded in esrc.erasures, esrc_admin only.  Runs in a database of its
-- own so that the rules other files leave behind do not count.
CREATE DATABASE scavenge_test;
\c scavenge_test
SET client_min_messages = warning;
CREATE EXTENSION esrc;
RESET client_min_messages;
\set SHOW_CONTEXT never
CREATE ROLE scav_writer LOGIN IN ROLE esrc_writer;
CREATE ROLE scav_reader LOGIN IN ROLE esrc_reader;
CREATE ROLE scav_nobody LOGIN;
CREATE ROLE scav_admin LOGIN IN ROLE esrc_admin;

-- only esrc_admin may scavenge or read its progress
SET ROLE scav_writer;
SELECT * FROM esrc.scavenge();
SELECT * FROM esrc.scavenge_progress;
RESET ROLE;
SET ROLE scav_reader;
SELECT * FROM esrc.scavenge(10);
SELECT * FROM esrc.scavenge_streams;
RESET ROLE;
SET ROLE scav_nobody;
SELECT * FROM esrc.scavenge();
RESET ROLE;

-- bad input
SET ROLE scav_admin;
SELECT * FROM esrc.scavenge(0);
SELECT * FROM esrc.scavenge(-5);
SELECT * FROM esrc.scavenge(NULL);
-- nothing to do yet: no rules
SELECT streams_visited, streams_redacted, events_redacted, done FROM esrc.scavenge();
RESET ROLE;

-- streams of category sc, each with ten events, and rules of every kind
SELECT count(*) FROM (SELECT esrc.append('sc-' || s, 'E', jsonb_build_object('s', s, 'i', g),
                                         jsonb_build_object('m', g))
                      FROM unnest(ARRAY['trunc', 'count', 'age', 'soft', 'hard', 'free', 'loose']) s,
                           generate_series(0, 9) g) a;
SELECT esrc.set_stream_rules('sc-trunc', truncate_before => 4, reason => 'keep from 4');
SELECT esrc.set_stream_rules('sc-count', max_count => 3, reason => 'keep the last 3');
SELECT esrc.delete_stream('sc-soft', 'soft delete');
SELECT esrc.append('sc-soft', 'E', '{"after": "delete"}');
SELECT esrc.delete_stream('sc-hard', 'hard delete', hard => true);
SELECT esrc.set_stream_rules('sc-loose', truncate_before => 5, reason => 'for now');
-- max_age: the scavenger's clock is the start of the oldest transaction of
-- the database less one second, so an event is redacted once it is hidden
-- for every statement that may run; age these events past that first
SELECT esrc.set_stream_rules('sc-age', max_age => '1 millisecond', reason => 'no history');
SELECT pg_sleep(1.2);

-- what the reads show before, and a copy of the log
CREATE TABLE log_before AS SELECT * FROM esrc.events;
CREATE TABLE reads_before AS
    SELECT 'category' AS r, e.* FROM esrc.read_category('sc', 0, 1000) e
    UNION ALL SELECT 'all', e.* FROM esrc.read_all(0, 1000) e
    UNION ALL SELECT 'stream', e.* FROM unnest(ARRAY['trunc', 'count', 'age', 'soft', 'hard', 'free', 'loose']) s,
                                        esrc.read_stream('sc-' || s) e
    UNION ALL SELECT 'backward', e.* FROM unnest(ARRAY['trunc', 'count', 'age', 'soft', 'hard', 'free', 'loose']) s,
                                          esrc.read_stream_backward('sc-' || s) e;
-- the hidden events, per stream
SELECT stream, count(*) AS hidden, min(version), max(version)
FROM esrc.events e WHERE NOT EXISTS (SELECT 1 FROM reads_before r WHERE r.position = e.position)
GROUP BY stream ORDER BY stream;

SET ROLE scav_admin;
SELECT streams_visited, streams_redacted, events_redacted, done, resume_after FROM esrc.scavenge();
RESET ROLE;

-- the reads are unchanged
CREATE TABLE reads_after AS
    SELECT 'category' AS r, e.* FROM esrc.read_category('sc', 0, 1000) e
    UNION ALL SELECT 'all', e.* FROM esrc.read_all(0, 1000) e
    UNION ALL SELECT 'stream', e.* FROM unnest(ARRAY['trunc', 'count', 'age', 'soft', 'hard', 'free', 'loose']) s,
                                        esrc.read_stream('sc-' || s) e
    UNION ALL SELECT 'backward', e.* FROM unnest(ARRAY['trunc', 'count', 'age', 'soft', 'hard', 'free', 'loose']) s,
                                          esrc.read_stream_backward('sc-' || s) e;
SELECT (SELECT count(*) FROM reads_before) AS rows_read,
       (SELECT count(*) FROM (SELECT * FROM reads_before EXCEPT ALL SELECT * FROM reads_after) d) AS lost,
       (SELECT count(*) FROM (SELECT * FROM reads_after EXCEPT ALL SELECT * FROM reads_before) d) AS gained;
-- exactly the hidden events are redacted; nothing else changed, in any column
SELECT b.stream,
       count(*) FILTER (WHERE r.position IS NULL) AS hidden,
       count(*) FILTER (WHERE r.position IS NULL AND e.data = '{"erased": true}' AND e.metadata IS NULL) AS redacted,
       count(*) FILTER (WHERE r.position IS NOT NULL AND (e.data, e.metadata) IS NOT DISTINCT FROM (b.data, b.metadata)) AS visible_unchanged,
       count(*) FILTER (WHERE (e.position, e.version, e.type, e.id, e.recorded_at, e.category)
                              IS DISTINCT FROM (b.position, b.version, b.type, b.id, b.recorded_at, b.category)) AS other_columns_changed
FROM log_before b JOIN esrc.events e USING (position)
LEFT JOIN (SELECT DISTINCT position FROM reads_before) r ON r.position = b.position
GROUP BY b.stream ORDER BY b.stream;

-- recorded: one row per call that redacted anything, without a stream
SELECT what, stream, events, reason, rules, current_user_name = 'scav_admin' AS by_admin
FROM esrc.erasures WHERE what = 'scavenge' ORDER BY id;

-- a second call redacts nothing and records nothing
SET ROLE scav_admin;
SELECT streams_visited, streams_redacted, events_redacted, done FROM esrc.scavenge();
RESET ROLE;
SELECT count(*) AS scavenge_rows FROM esrc.erasures WHERE what = 'scavenge';

-- max_count hides more as the stream grows: the next call redacts those
SELECT esrc.append('sc-count', 'E', '{}') FROM generate_series(1, 2);
SET ROLE scav_admin;
SELECT streams_visited, streams_redacted, events_redacted, done FROM esrc.scavenge();
RESET ROLE;
SELECT string_agg(version::text, ',' ORDER BY version) AS redacted_versions
FROM esrc.events WHERE stream = 'sc-count' AND data = '{"erased": true}';

-- loosening the rules later shows the redacted events, as redacted
SELECT esrc.set_stream_rules('sc-loose', reason => 'all of it again');
SELECT version, data, metadata FROM esrc.read_stream('sc-loose', 3, 4);

-- an erased stream (erase_stream) with rules: nothing left to redact
SELECT esrc.erase_stream('sc-free', 'erasure request');
SELECT esrc.set_stream_rules('sc-free', truncate_before => 3, reason => 'after the erasure');
SET ROLE scav_admin;
SELECT streams_visited, streams_redacted, events_redacted, done FROM esrc.scavenge();
RESET ROLE;

-- resumption: 30 hidden events in three streams, slices of 4 events; the
-- pass goes on where the last slice stopped, inside a stream too
SELECT count(*) FROM (SELECT esrc.append('res-' || s, 'E', jsonb_build_object('i', g))
                      FROM generate_series(1, 3) s, generate_series(0, 11) g) a;
SELECT esrc.set_stream_rules('res-' || s, truncate_before => 10, reason => 'resume') FROM generate_series(1, 3) s;
SET ROLE scav_admin;
CREATE TEMP TABLE slices AS SELECT 0 AS n, * FROM esrc.scavenge(4);
DO $$
BEGIN
    FOR i IN 1 .. 20 LOOP
        EXIT WHEN (SELECT done FROM slices ORDER BY n DESC LIMIT 1);
        INSERT INTO slices SELECT i, * FROM esrc.scavenge(4);
    END LOOP;
END $$;
SELECT n, streams_visited, streams_redacted, events_redacted, done, resume_after FROM slices ORDER BY n;
SELECT resume_after, pass_started_at IS NULL AS no_pass_in_progress, passes_completed,
       events_redacted, last_run_events
FROM esrc.scavenge_progress;
SELECT stream, redacted_below FROM esrc.scavenge_streams WHERE stream LIKE 'res-%' ORDER BY stream;
RESET ROLE;
SELECT stream, count(*) FILTER (WHERE data = '{"erased": true}') AS redacted,
       count(*) FILTER (WHERE data <> '{"erased": true}') AS kept,
       min(version) FILTER (WHERE data <> '{"erased": true}') AS first_kept
FROM esrc.events WHERE stream LIKE 'res-%' GROUP BY stream ORDER BY stream;

-- truncate_before beyond the stream's end: what is appended below it later
-- is hidden, and redacted by a later call
SELECT esrc.append('sc-ahead', 'E', '{}') FROM generate_series(1, 3);
SELECT esrc.set_stream_rules('sc-ahead', truncate_before => 6, reason => 'ahead');
SET ROLE scav_admin;
SELECT events_redacted FROM esrc.scavenge();
RESET ROLE;
SELECT esrc.append('sc-ahead', 'E', '{"later": true}') FROM generate_series(1, 4);
SET ROLE scav_admin;
SELECT events_redacted FROM esrc.scavenge();
SELECT redacted_below FROM esrc.scavenge_streams WHERE stream = 'sc-ahead';
RESET ROLE;
SELECT version, data FROM esrc.events WHERE stream = 'sc-ahead' ORDER BY version;

-- snapshots: load reads the snapshot table, which keeps the state the
-- hidden events gave; snapshot_at replays the log, so after the scavenge
-- it folds the redacted data in place of the hidden events'
SELECT esrc.append('snp-1', 'E', d) FROM unnest(ARRAY['{"a": 1}', '{"b": 2}', '{"c": 3}']::jsonb[]) d;
SELECT esrc.create_snapshot('scav_snap', 'snp', 'esrc.merge(jsonb, esrc.event)');
SELECT esrc.set_stream_rules('snp-1', truncate_before => 2, reason => 'snapshot');
SELECT state, version FROM esrc.load('scav_snap', 'snp-1');
SELECT esrc.snapshot_at('scav_snap', 'snp-1', 2);
SET ROLE scav_admin;
SELECT events_redacted FROM esrc.scavenge();
RESET ROLE;
SELECT state, version FROM esrc.load('scav_snap', 'snp-1');
SELECT esrc.snapshot_at('scav_snap', 'snp-1', 2);

-- the log stays append-only for everyone else
UPDATE esrc.events SET data = '{"erased": true}', metadata = NULL WHERE stream = 'sc-trunc' AND version = 5;

\c esrc_regression
DROP DATABASE scavenge_test;
DROP ROLE scav_writer, scav_reader, scav_nobody, scav_admin;
