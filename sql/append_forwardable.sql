-- When this database is forwarded to Kafka (esrc.kafka_brokers set and
-- esrc.database naming it), an append refuses an event the forwarder
-- could never deliver, instead of letting it block every later event:
-- a category whose topic name (esrc.kafka_topic) is not a Kafka topic
-- name, and data plus metadata over what one Kafka record can carry.
-- Not forwarded (the other tests), neither is checked.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;

SELECT esrc.append('é-1', 'Odd', '{}') >= 0 AS not_forwarded_ok;

-- forward this database to a broker that is not there; paused, so the
-- worker does not even try to send
SELECT esrc.forwarder_pause();
ALTER SYSTEM SET esrc.kafka_brokers = '127.0.0.1:9';
ALTER SYSTEM SET esrc.database = 'esrc_regression';
SELECT pg_reload_conf();
-- a new session starts with the reloaded settings
\c
SELECT current_setting('esrc.kafka_brokers') AS brokers,
       current_setting('esrc.database') = current_database() AS forwarded_here;

-- topic names: esrc.{category}
SELECT esrc.append('é-1', 'Odd', '{}');
SELECT esrc.append('bad!cat-1', 'Odd', '{}');
SELECT esrc.append_batch('my cat-1', '[{"type": "Odd", "data": {}}]');
SELECT esrc.append('fine_Cat.2-1', 'Ok', '{}') >= 0 AS valid_ok;
-- "esrc." + 244 bytes = 249, Kafka's limit; one more is refused
SELECT esrc.append(repeat('a', 244) || '-1', 'Ok', '{}') >= 0 AS longest_ok;
SELECT esrc.append(repeat('a', 245) || '-1', 'Long', '{}');
-- 507 to 512 bytes: a name that does not even fit the expansion buffer
SELECT esrc.append(repeat('b', 507), 'Long', '{}');
SELECT esrc.append(repeat('b', 512), 'Long', '{}');
SELECT count(*) AS refused_written FROM esrc.events
 WHERE category IN ('bad!cat', 'my cat') OR category LIKE 'bbb%' OR length(category) = 245;

-- size: the producer's message.max.bytes (esrc.kafka_properties, here
-- 10000) less 4096 bytes for the key and headers, counted as JSON text
ALTER SYSTEM SET esrc.kafka_properties = 'linger.ms=1; message.max.bytes=10000';
SELECT pg_reload_conf();
\c
SELECT esrc.append('size-1', 'Fits', to_jsonb(repeat('x', 5904 - 2))) >= 0 AS at_limit_ok;
SELECT esrc.append('size-1', 'Over', to_jsonb(repeat('x', 5904 - 1)));
SELECT esrc.append('size-1', 'Over', '{}', jsonb_build_object('pad', repeat('m', 6000)));
SELECT esrc.append_batch('size-1', jsonb_build_array(
    jsonb_build_object('type', 'Fits', 'data', '{}'::jsonb),
    jsonb_build_object('type', 'Over', 'data', to_jsonb(repeat('x', 6000)))));
SELECT count(*) AS size_events FROM esrc.events WHERE stream = 'size-1';

-- back to no forwarding
ALTER SYSTEM RESET esrc.kafka_properties;
ALTER SYSTEM RESET esrc.kafka_brokers;
ALTER SYSTEM RESET esrc.database;
SELECT pg_reload_conf();
\c
SELECT esrc.forwarder_resume();
SELECT current_setting('esrc.kafka_brokers') = '' AS not_forwarded;
SELECT esrc.append('bad!cat-1', 'Odd', '{}') >= 0 AS not_forwarded_ok;

-- the check hook of esrc.kafka_topic: a template whose expansion does not
-- fit (as with a 512-byte category) is refused, never read past its end
ALTER SYSTEM SET esrc.kafka_topic = 'x{category}';
ALTER SYSTEM SET esrc.kafka_topic = 'x{category}{category}';
SELECT 'ALTER SYSTEM SET esrc.kafka_topic = ''' || repeat('t', 600) || '.{category}''' \gexec
ALTER SYSTEM RESET esrc.kafka_topic;
SELECT count(*) AS auto_conf_lines FROM pg_file_settings
 WHERE sourcefile LIKE '%postgresql.auto.conf' AND name LIKE 'esrc.%';
