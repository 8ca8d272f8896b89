-- Read-your-writes (issue 31): esrc.last_position(), esrc.wait_for_projection()
-- and esrc.wait_for_subscription(): their outcomes and every bad input.
-- The server runs projection workers; an 'applied' result must come with
-- the projected row visible to the next statement, whatever the timing,
-- so every wait here has a long timeout and its result is deterministic.
DROP EXTENSION IF EXISTS esrc CASCADE;
CREATE EXTENSION esrc;
\set SHOW_CONTEXT never
\set VERBOSITY default

CREATE SCHEMA pw;
CREATE TABLE pw.orders (stream text PRIMARY KEY, version bigint, at_position bigint);
CREATE FUNCTION pw.apply(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF e.data ? 'fail' THEN
        RAISE EXCEPTION 'cannot apply %', e.position;
    END IF;
    INSERT INTO pw.orders VALUES (e.stream, e.version, e.position)
    ON CONFLICT (stream) DO UPDATE SET version = excluded.version, at_position = excluded.at_position;
END
$$;

-- before any append of the session: null
SELECT esrc.last_position();
SELECT esrc.create_projection('orders', 'pw.apply(esrc.event)', ARRAY['order'], partitions => 4) > 0 AS created;

-- append, wait, query: the row is there when the wait says 'applied'
SELECT esrc.append('order-1', 'Placed', '{}');
SELECT esrc.last_position();
SELECT esrc.wait_for_projection('orders', esrc.last_position(), '60s');
SELECT stream, version, at_position = esrc.last_position() AS at_it FROM pw.orders;

-- append_batch: the position of its last event
SELECT esrc.append_batch('order-2', '[{"type": "Placed", "data": {}}, {"type": "Paid", "data": {}}]');
SELECT esrc.last_position();
SELECT esrc.wait_for_projection('orders', esrc.last_position(), '60s');
SELECT stream, version, at_position FROM pw.orders ORDER BY stream;

-- append_if too
SELECT esrc.append_if('order-3', '[{"type": "Placed", "data": {}, "tags": ["x"]}]',
  jsonb_build_object('fail_if_events_match', '{"items": [{"types": ["Placed"], "tags": ["x"]}]}'::jsonb,
                     'after', esrc.safe_position()));
SELECT esrc.last_position();
SELECT esrc.wait_for_projection('orders', esrc.last_position()) AS default_timeout;
SELECT count(*) FROM pw.orders;

-- events of other categories do not hold the wait, nor does position 0
SELECT esrc.append('invoice-1', 'Sent', '{}');
SELECT esrc.wait_for_projection('orders', esrc.last_position(), '0s') AS other_category;
SELECT esrc.wait_for_projection('orders', 0, '0s') AS position_zero;

-- a rolled-back append: its position holds no event, the wait returns
BEGIN;
SELECT esrc.append('order-4', 'Placed', '{}');
ROLLBACK;
SELECT esrc.last_position();
SELECT esrc.wait_for_projection('orders', esrc.last_position(), '60s') AS rolled_back;

-- a failing event: the partition retries (esrc.projection_retry_delay is
-- 1 s, 5 attempts): a short wait times out
SELECT esrc.append('order-5', 'Placed', '{"fail": true}');
SELECT esrc.wait_for_projection('orders', esrc.last_position(), '10ms') AS failing;

-- paused: an error, once the projection has not applied the position;
-- a position it has applied is still 'applied'
SELECT esrc.projection_pause('orders');
SELECT esrc.append('order-6', 'Placed', '{}');
SELECT esrc.wait_for_projection('orders', esrc.last_position(), '60s');
SELECT esrc.wait_for_projection('orders', 1, '0s') AS applied_before_pause;
SELECT esrc.drop_projection('orders');

-- bad input
SELECT esrc.wait_for_projection('nope', 1);
SELECT esrc.wait_for_projection(NULL, 1);
SELECT esrc.wait_for_projection('orders', NULL);
SELECT esrc.wait_for_projection('orders', 1, NULL);
SELECT esrc.wait_for_projection('orders', -1);
SELECT esrc.wait_for_projection('orders', 1, '-1s');
SELECT esrc.wait_for_projection('orders', 1000000);
SELECT esrc.wait_for_subscription('orders', 1000000);
-- in a transaction that appended (its own append holds the horizon)
BEGIN;
SELECT esrc.append('order-7', 'Placed', '{}');
SELECT esrc.wait_for_subscription('nope', 1);
ROLLBACK;
-- REPEATABLE READ: its snapshot would never show the progress
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT esrc.wait_for_subscription('nope', 1);
ROLLBACK;

-- a subscription: 'applied' once the group acknowledged the position
SELECT esrc.create_subscription('mail', ARRAY['order']);
SELECT esrc.append('order-8', 'Placed', '{}');
SELECT esrc.wait_for_subscription('mail', esrc.last_position(), '0s') AS before_ack;
SELECT count(*) > 0 AS polled FROM esrc.poll('mail', 'm1', 1000);
SELECT esrc.ack('mail', 'm1') > 0 AS acked;
SELECT esrc.wait_for_subscription('mail', esrc.last_position(), '0s') AS after_ack;
-- an event of another category after it does not hold it
SELECT esrc.append('invoice-2', 'Sent', '{}');
SELECT esrc.wait_for_subscription('mail', esrc.last_position(), '0s') AS other_category;
SELECT esrc.wait_for_subscription('nope', 1);

-- who may wait: esrc_reader (EXECUTE), and for a subscription its consumers
CREATE ROLE pw_nobody;
CREATE ROLE pw_reader IN ROLE esrc_reader;
SET ROLE pw_nobody;
SELECT esrc.wait_for_projection('x', 1);
SELECT esrc.last_position();
SET ROLE pw_reader;
SELECT esrc.wait_for_subscription('mail', 1, '0s');
RESET ROLE;
DROP ROLE pw_nobody;
DROP ROLE pw_reader;

SELECT esrc.drop_subscription('mail');
DROP SCHEMA pw CASCADE;
