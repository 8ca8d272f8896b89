-- Subscriptions: create, poll, ack, filters, replay, and every bad input.
-- A fresh log, so that positions are known.
DROP EXTENSION IF EXISTS esrc CASCADE;
CREATE EXTENSION esrc;
\set SHOW_CONTEXT never
\set VERBOSITY default

SELECT esrc.append('user-' || i, CASE WHEN i % 3 = 0 THEN 'Renamed' ELSE 'Registered' END,
                   jsonb_build_object('i', i),
                   CASE WHEN i % 2 = 0 THEN '{"tenant": "t1"}'::jsonb END)
FROM generate_series(1, 6) i;
SELECT esrc.append('order-' || i, 'Placed', '{}') FROM generate_series(1, 3) i;

-- one member, one partition, all categories
SELECT esrc.create_subscription('all');
SELECT name, owner, categories, types, metadata, partitions, consumers
FROM esrc.subscriptions;
SELECT partition, checkpoint FROM esrc.subscription_checkpoints;
SELECT position, stream, version, type FROM esrc.poll('all', 'm1', 4);
-- not acknowledged: delivered again
SELECT position FROM esrc.poll('all', 'm1', 2);
SELECT esrc.ack('all', 'm1', 1);
SELECT position FROM esrc.poll('all', 'm1', 2);
-- null: everything the last poll covered
SELECT esrc.ack('all', 'm1');
SELECT checkpoint FROM esrc.subscription_checkpoints;
SELECT position FROM esrc.poll('all', 'm1');
SELECT esrc.ack('all', 'm1');
SELECT position FROM esrc.poll('all', 'm1');
SELECT checkpoint FROM esrc.subscription_checkpoints;
-- an ack that does not move anything
SELECT esrc.ack('all', 'm1', 3);
-- an ack rolled back is not kept: the events come again
SELECT esrc.reset_subscription('all', 5);
BEGIN;
SELECT position FROM esrc.poll('all', 'm1', 2);
SELECT esrc.ack('all', 'm1');
ROLLBACK;
SELECT position FROM esrc.poll('all', 'm1', 2);
SELECT esrc.ack('all', 'm1');
-- events appended later
SELECT esrc.append('user-1', 'Renamed', '{}');
SELECT position, stream, version FROM esrc.poll('all', 'm1');

-- categories, start at the end or after a position
SELECT esrc.create_subscription('orders', ARRAY['order'], start => 'end');
SELECT position FROM esrc.poll('orders', 'm1');
SELECT esrc.append('order-9', 'Placed', '{}');
SELECT position, stream FROM esrc.poll('orders', 'm1');
SELECT esrc.create_subscription('two', ARRAY['order', 'user'], start => '8');
SELECT position, stream FROM esrc.poll('two', 'm1');

-- filters: types, metadata; filtered-out events still move the checkpoint
SELECT esrc.create_subscription('renames', types => ARRAY['Renamed']);
SELECT position, stream, type FROM esrc.poll('renames', 'm1');
SELECT esrc.ack('renames', 'm1');
SELECT c.checkpoint FROM esrc.subscription_checkpoints c
JOIN esrc.subscriptions s ON s.id = c.subscription_id WHERE s.name = 'renames';
SELECT esrc.create_subscription('tenant', metadata => '{"tenant": "t1"}');
SELECT position, stream, metadata FROM esrc.poll('tenant', 'm1');
SELECT esrc.create_subscription('none', types => ARRAY['NoSuchType']);
-- nothing to return: the poll itself moves the checkpoint past the scan
SELECT count(*) FROM esrc.poll('none', 'm1');
SELECT c.checkpoint = esrc.safe_position() AS caught_up FROM esrc.subscription_checkpoints c
JOIN esrc.subscriptions s ON s.id = c.subscription_id WHERE s.name = 'none';

-- partitions: each stream in one, by Kafka's murmur2 partitioner
SELECT esrc.stream_partition('user-1', 16), esrc.stream_partition('order-2', 16),
       esrc.stream_partition('a', 1);
SELECT esrc.create_subscription('group', partitions => 4);
-- a single member takes all four
SELECT count(*) FROM esrc.poll('group', 'a', 1000);
SELECT partition, member FROM esrc.subscription_status WHERE subscription = 'group' ORDER BY 1;
-- a second member: a takes its share back at its next poll, then b the rest
SELECT count(*) FROM esrc.poll('group', 'b', 1000);
SELECT count(*) > 0 AS got_some FROM esrc.poll('group', 'a', 1000);
SELECT count(*) > 0 AS got_some FROM esrc.poll('group', 'b', 1000);
SELECT partition, member FROM esrc.subscription_status WHERE subscription = 'group' ORDER BY 1;
-- what each member gets is exactly its partitions' events
SELECT bool_and(esrc.stream_partition(stream, 4) IN (0, 1)) FROM esrc.poll('group', 'a', 1000);
SELECT bool_and(esrc.stream_partition(stream, 4) IN (2, 3)) FROM esrc.poll('group', 'b', 1000);
SELECT esrc.ack('group', 'a'), esrc.ack('group', 'b');
SELECT partition, checkpoint, events_behind FROM esrc.subscription_status
WHERE subscription = 'group' ORDER BY 1;

-- the status view
SELECT subscription, partition, member, checkpoint, events_behind, seconds_behind >= 0 AS age
FROM esrc.subscription_status WHERE subscription IN ('all', 'renames') ORDER BY 1, 2;

-- bad input; nothing moves
SELECT esrc.create_subscription('all');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_subscription('p0', partitions => 0);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_subscription('p2000', partitions => 2000);
SELECT esrc.create_subscription('pnull', partitions => NULL);
SELECT esrc.create_subscription('', ARRAY['user']);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_subscription(repeat('x', 64));
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_subscription(NULL);
SELECT esrc.create_subscription('dash', ARRAY['user-1']);
SELECT esrc.create_subscription('emptycats', ARRAY[]::text[]);
SELECT esrc.create_subscription('nullcat', ARRAY['user', NULL]);
SELECT esrc.create_subscription('twice', ARRAY['user', 'user']);
SELECT esrc.create_subscription('badstart', start => 'middle');
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_subscription('negstart', start => '-1');
SELECT esrc.create_subscription('badmeta', metadata => '[1]');
SELECT count(*) AS subscriptions FROM esrc.subscriptions;
SELECT * FROM esrc.poll('nosuch', 'm1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.drop_subscription('nosuch');
SELECT esrc.reset_subscription('nosuch', 0);
SELECT esrc.ack('nosuch', 'm1');
SELECT * FROM esrc.poll('all', '');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.poll('all', repeat('m', 64));
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.poll('all', NULL);
SELECT * FROM esrc.poll('all', 'm1', 0);
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.poll('all', 'm1', -5);
SELECT * FROM esrc.poll('all', 'm1', NULL);
SELECT * FROM esrc.poll('all', 'm1', 10, '-1 second');
\echo SQLSTATE :SQLSTATE
SELECT esrc.ack('all', 'stranger');
\echo SQLSTATE :SQLSTATE
SELECT esrc.ack('all', 'm1', 1000000);
\echo SQLSTATE :SQLSTATE
SELECT esrc.ack('all', 'm1', -1);
SELECT esrc.reset_subscription('all', -1);
SELECT esrc.reset_subscription('all', NULL);
SELECT esrc.stream_partition('x', 0);
SELECT checkpoint FROM esrc.subscription_checkpoints c
JOIN esrc.subscriptions s ON s.id = c.subscription_id WHERE s.name = 'all';

-- a checkpoint moved under a member (here by a reset): its ack fails
SELECT count(*) FROM esrc.poll('all', 'm1');
SELECT esrc.reset_subscription('all', 0);
SELECT esrc.ack('all', 'm1');
\echo SQLSTATE :SQLSTATE
SELECT count(*) FROM esrc.poll('all', 'm1');
SELECT esrc.ack('all', 'm1');

SELECT esrc.drop_subscription('all');
SELECT count(*) FROM esrc.subscription_checkpoints c
JOIN esrc.subscriptions s ON s.id = c.subscription_id WHERE s.name = 'all';
SELECT name FROM esrc.subscriptions ORDER BY name;

-- a poll that returns nothing in a read-only transaction writes nothing;
-- the next one does
SELECT esrc.append('order-10', 'Placed', '{}');
BEGIN READ ONLY;
SELECT count(*) FROM esrc.poll('none', 'm1');
COMMIT;
SELECT c.checkpoint = esrc.safe_position() AS caught_up FROM esrc.subscription_checkpoints c
JOIN esrc.subscriptions s ON s.id = c.subscription_id WHERE s.name = 'none';
SELECT count(*) FROM esrc.poll('none', 'm1');
SELECT c.checkpoint = esrc.safe_position() AS caught_up FROM esrc.subscription_checkpoints c
JOIN esrc.subscriptions s ON s.id = c.subscription_id WHERE s.name = 'none';

-- a checkpoint past the end of the log is refused (22023, nothing
-- changes): the events appended later, below it, would never be
-- delivered; the end of the log and below are taken
SELECT esrc.safe_position() AS end_of_log;
SELECT esrc.create_subscription('past', start => (esrc.safe_position() + 1)::text);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_subscription('past', ARRAY['order'], start => '1000001');
\echo SQLSTATE :SQLSTATE
SELECT count(*) FROM esrc.subscriptions WHERE name = 'past';
SELECT esrc.create_subscription('past', ARRAY['order'], start => esrc.safe_position()::text);
SELECT esrc.create_subscription('past_below', start => '3');
SELECT s.name, c.checkpoint FROM esrc.subscription_checkpoints c
JOIN esrc.subscriptions s ON s.id = c.subscription_id WHERE s.name LIKE 'past%' ORDER BY 1;
SELECT esrc.reset_subscription('past', 1000001);
\echo SQLSTATE :SQLSTATE
SELECT esrc.reset_subscription('past_below', esrc.safe_position() + 1);
\echo SQLSTATE :SQLSTATE
SELECT esrc.reset_subscription('past', esrc.safe_position());
SELECT esrc.reset_subscription('past_below', 2);
SELECT s.name, c.checkpoint FROM esrc.subscription_checkpoints c
JOIN esrc.subscriptions s ON s.id = c.subscription_id WHERE s.name LIKE 'past%' ORDER BY 1;
-- the next event is delivered
SELECT esrc.append('order-11', 'Placed', '{}');
SELECT position, stream FROM esrc.poll('past', 'm1');
SELECT esrc.drop_subscription('past'), esrc.drop_subscription('past_below');
