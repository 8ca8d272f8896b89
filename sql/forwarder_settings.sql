-- The Kafka forwarder's settings: defaults, reload-only, validation, and
-- esrc.kafka_properties hidden from everyone but superusers.  No broker
-- is needed: in this cluster esrc.kafka_brokers is empty.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;

SELECT name, setting, context, vartype, enumvals
  FROM pg_settings
 WHERE name IN ('esrc.kafka_brokers', 'esrc.database', 'esrc.kafka_topic',
                'esrc.kafka_offsets_topic', 'esrc.kafka_properties',
                'esrc.kafka_batch_size', 'esrc.delivery', 'esrc.databases',
                'esrc.max_forwarders')
 ORDER BY name;

-- changed only in the configuration files, then a reload
SET esrc.delivery = at_least_once;
SET esrc.kafka_brokers = 'localhost:9092';

-- check hooks (ALTER SYSTEM runs them and writes nothing when they refuse)
ALTER SYSTEM SET esrc.kafka_topic = 'events.{stream}';
ALTER SYSTEM SET esrc.kafka_topic = 'my events';
ALTER SYSTEM SET esrc.kafka_topic = 'events.{database';
ALTER SYSTEM SET esrc.kafka_topic = 'events.{db}.{category}';
ALTER SYSTEM SET esrc.databases = 'app, app';
ALTER SYSTEM SET esrc.databases = 'app,,billing';
ALTER SYSTEM SET esrc.databases = '"app';
ALTER SYSTEM SET esrc.databases = '*, app';
SET esrc.databases = '*';
SET esrc.max_forwarders = 2;
ALTER SYSTEM SET esrc.kafka_offsets_topic = '..';
ALTER SYSTEM SET esrc.kafka_brokers = 'a:9092,,b:9092';
ALTER SYSTEM SET esrc.kafka_brokers = E'a:9092\n';
ALTER SYSTEM SET esrc.database = '';
ALTER SYSTEM SET esrc.delivery = twice;
ALTER SYSTEM SET esrc.kafka_batch_size = 0;
-- the forwarder's guarantees depend on these: not for esrc.kafka_properties
ALTER SYSTEM SET esrc.kafka_properties = 'acks=0';
ALTER SYSTEM SET esrc.kafka_properties = 'linger.ms=5;enable.idempotence=false';
ALTER SYSTEM SET esrc.kafka_properties = 'partitioner=random';
-- syntax; the message never shows the value (it may hold a password)
ALTER SYSTEM SET esrc.kafka_properties = 'sasl.password=s3cret;linger.ms';
ALTER SYSTEM SET esrc.kafka_properties = 'sasl.password=s3cret;bad name=1';
-- accepted: a list, '*', {database} in the topic; then reset
ALTER SYSTEM SET esrc.databases = 'app, "Billing", ops';
ALTER SYSTEM SET esrc.databases = ' * ';
ALTER SYSTEM SET esrc.kafka_topic = 'esrc.{database}.{category}';
ALTER SYSTEM RESET esrc.databases;
ALTER SYSTEM RESET esrc.kafka_topic;
SELECT count(*) AS auto_conf_lines FROM pg_file_settings
 WHERE sourcefile LIKE '%postgresql.auto.conf' AND name LIKE 'esrc.%';

-- esrc.kafka_properties is invisible to a role that is not superuser
CREATE ROLE fwd_settings_user;
SET ROLE fwd_settings_user;
SHOW esrc.kafka_properties;
SELECT current_setting('esrc.kafka_properties');
SELECT count(*) FROM pg_settings WHERE name = 'esrc.kafka_properties';
SHOW esrc.kafka_topic;
RESET ROLE;
DROP ROLE fwd_settings_user;
