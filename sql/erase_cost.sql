-- The cost-based delay of esrc.erase_stream (src/erasecost.c):
-- esrc.erase_cost_delay and esrc.erase_cost_limit exist with their
-- documented defaults and ranges, refuse bad values, may be set by an
-- erasing role that is not a superuser, change nothing in the result of
-- an erase, and make the erase nap: with a limit of 1 byte every row
-- naps, each nap at least 4 delays long (a row counts more than 4 limits),
-- so an erase of n rows takes at least n * 4 * delay.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;
\set SHOW_CONTEXT never

SELECT name, setting, unit, context, vartype, min_val, max_val, boot_val
  FROM pg_settings
 WHERE name IN ('esrc.erase_cost_delay', 'esrc.erase_cost_limit')
 ORDER BY name;
SHOW esrc.erase_cost_delay;
SHOW esrc.erase_cost_limit;

-- bad values are refused (22023) and leave the setting as it was (the
-- SQLSTATE only: the range in the message is written differently by 17)
\set VERBOSITY sqlstate
SET esrc.erase_cost_delay = -1;
SET esrc.erase_cost_delay = '2s';
SET esrc.erase_cost_delay = 'fast';
SET esrc.erase_cost_limit = 0;
SET esrc.erase_cost_limit = -1;
SET esrc.erase_cost_limit = '4GB';
SET esrc.erase_cost_limit = 'all';
\set VERBOSITY default
SHOW esrc.erase_cost_delay;
SHOW esrc.erase_cost_limit;
SET esrc.erase_cost_delay = '1s';
SET esrc.erase_cost_limit = '1GB';
RESET esrc.erase_cost_delay;
RESET esrc.erase_cost_limit;

-- three streams of the same events: small data, metadata, and one data
-- stored out of line in TOAST (incompressible, 8 kB)
CREATE TEMP TABLE cost_events AS
SELECT g AS n,
       CASE WHEN g = 5
            THEN jsonb_build_object('doc', (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 256) i))
            ELSE jsonb_build_object('name', 'customer ' || g, 'email', 'c' || g || '@example.com') END AS data,
       CASE WHEN g % 2 = 0 THEN jsonb_build_object('by', 'clerk ' || g) END AS metadata
FROM generate_series(1, 10) g;
SELECT count(esrc.append(s, 'Noted', data, metadata))
FROM (VALUES ('erasecost-off'), ('erasecost-on'), ('erasecost-cancel')) v(s), cost_events;
SELECT pg_column_size(data) > 8000 AS toasted, pg_column_compression(data) IS NULL AS uncompressed
FROM esrc.events WHERE stream = 'erasecost-on' AND version = 4;

-- the delay off: no nap (the DEBUG1 line of erase_stream counts them)
SET client_min_messages = debug1;
\set VERBOSITY terse
SET esrc.erase_cost_delay = 0;
SELECT esrc.erase_stream('erasecost-off', 'cost test, delay off');

-- the delay on, a limit of 1 byte: one nap per row, each at least 4 delays
SET esrc.erase_cost_delay = '25ms';
SET esrc.erase_cost_limit = 1;
SELECT clock_timestamp() AS t0 \gset
SELECT esrc.erase_stream('erasecost-on', 'cost test, delay on');
SELECT clock_timestamp() - :'t0'::timestamptz >= 10 * 4 * interval '25ms' AS took_10_naps_of_100ms;
RESET client_min_messages;
\set VERBOSITY default

-- the same result with the delay on as off: every column but the stream
SELECT count(*) AS events,
       count(*) FILTER (WHERE a.data = b.data AND a.metadata IS NOT DISTINCT FROM b.metadata
                          AND a.type = b.type AND a.category = b.category) AS identical,
       count(*) FILTER (WHERE a.data = '{"erased": true}' AND a.metadata IS NULL) AS redacted
FROM esrc.events a JOIN esrc.events b USING (version)
WHERE a.stream = 'erasecost-on' AND b.stream = 'erasecost-off';
SELECT stream, events, reason FROM esrc.erasures
WHERE stream LIKE 'erasecost-%' ORDER BY id;

-- the nap serves interrupts: a statement timeout cancels an erase in its
-- naps (57014) and the rollback takes all of it back
SET esrc.erase_cost_delay = '50ms';
SET statement_timeout = '300ms';
SELECT esrc.erase_stream('erasecost-cancel', 'cost test, cancelled');
RESET statement_timeout;
SELECT count(*) FILTER (WHERE data = '{"erased": true}') AS redacted, count(*) AS events
FROM esrc.events WHERE stream = 'erasecost-cancel';
SELECT count(*) AS recorded FROM esrc.erasures WHERE stream = 'erasecost-cancel';

-- a member of esrc_admin that is not a superuser may set both (USERSET)
RESET esrc.erase_cost_delay;
RESET esrc.erase_cost_limit;
CREATE ROLE erasecost_admin IN ROLE esrc_admin;
SET ROLE erasecost_admin;
SET esrc.erase_cost_delay = 0;
SET esrc.erase_cost_limit = '1MB';
SELECT esrc.erase_stream('erasecost-cancel', 'cost test, as an admin');
SHOW esrc.erase_cost_delay;
RESET ROLE;
RESET esrc.erase_cost_delay;
RESET esrc.erase_cost_limit;
DROP ROLE erasecost_admin;
