-- esrc.poll(..., ack): a poll that first acknowledges what the member
-- processed before, as esrc.ack would, in the same transaction; then the
-- next batch.  A fresh log, so that positions are known.
DROP EXTENSION IF EXISTS esrc CASCADE;
CREATE EXTENSION esrc;
\set SHOW_CONTEXT never
\set VERBOSITY default

SELECT count(esrc.append('user-' || i, 'Registered', jsonb_build_object('i', i)))
FROM generate_series(1, 10) i;
SELECT esrc.create_subscription('pa');

-- an ack before the member ever polled: it holds no partition
SELECT position FROM esrc.poll('pa', 'm1', 3, ack => 0);
\echo SQLSTATE :SQLSTATE

-- the loop: each poll acknowledges the last position of the batch before
SELECT position FROM esrc.poll('pa', 'm1', 3);
SELECT position FROM esrc.poll('pa', 'm1', 3, ack => 3);
SELECT checkpoint FROM esrc.subscription_checkpoints;
SELECT position FROM esrc.poll('pa', 'm1', 3, '0', 6);
SELECT checkpoint FROM esrc.subscription_checkpoints;
-- null: no ack, today's poll (the same batch again)
SELECT position FROM esrc.poll('pa', 'm1', 3, '0', NULL);
SELECT checkpoint FROM esrc.subscription_checkpoints;
-- part of a batch: the rest comes again
SELECT position FROM esrc.poll('pa', 'm1', 3, ack => 7);
SELECT checkpoint FROM esrc.subscription_checkpoints;
-- a position at or below the checkpoint moves nothing
SELECT position FROM esrc.poll('pa', 'm1', 3, ack => 5);
SELECT checkpoint FROM esrc.subscription_checkpoints;

-- bad acks; nothing moves and the batch comes again
SELECT position FROM esrc.poll('pa', 'm1', 3, ack => -1);
\echo SQLSTATE :SQLSTATE
-- beyond what the last poll covered (8, 9, 10: up to 10)
SELECT position FROM esrc.poll('pa', 'm1', 3, ack => 11);
\echo SQLSTATE :SQLSTATE
-- beyond the horizon: a poll never covers more than the horizon
SELECT position FROM esrc.poll('pa', 'm1', 100);
SELECT position FROM esrc.poll('pa', 'm1', 3, ack => esrc.safe_position() + 1);
\echo SQLSTATE :SQLSTATE
-- another member's ack: it holds no partition
SELECT position FROM esrc.poll('pa', 'stranger', 3, ack => 8);
\echo SQLSTATE :SQLSTATE
SELECT checkpoint FROM esrc.subscription_checkpoints;

-- in a read-only transaction: refused, where a poll without ack is not
BEGIN READ ONLY;
SELECT position FROM esrc.poll('pa', 'm1', 3, ack => 8);
\echo SQLSTATE :SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT esrc.ack('pa', 'm1', 8);
\echo SQLSTATE :SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT position FROM esrc.poll('pa', 'm1', 3);
COMMIT;
SELECT checkpoint FROM esrc.subscription_checkpoints;

-- with an ack the poll does not wait: nothing to return, back at once
-- (a wait would end in the statement timeout)
SELECT position FROM esrc.poll('pa', 'm1', 3);
SET statement_timeout = '3s';
SELECT position FROM esrc.poll('pa', 'm1', 3, '10 seconds', ack => 10);
RESET statement_timeout;
SELECT checkpoint FROM esrc.subscription_checkpoints;

-- at-least-once: a crash (here a rollback) between the poll that acked
-- and the next one acks nothing, and what was not acknowledged comes again
SELECT count(esrc.append('user-' || i, 'Registered', jsonb_build_object('i', i)))
FROM generate_series(11, 16) i;
SELECT position FROM esrc.poll('pa', 'm1', 3);
BEGIN;
SELECT position FROM esrc.poll('pa', 'm1', 3, ack => 13);
ROLLBACK;
SELECT checkpoint FROM esrc.subscription_checkpoints;
SELECT position FROM esrc.poll('pa', 'm1', 3);
-- the batch delivered by a poll that acked and committed, then lost by
-- its client, comes again too
SELECT position FROM esrc.poll('pa', 'm1', 3, ack => 13);
SELECT checkpoint FROM esrc.subscription_checkpoints;
SELECT position FROM esrc.poll('pa', 'm1', 3);

-- a checkpoint moved under the member (here by a reset): 40001, the poll
-- returns nothing and moves nothing; a poll without ack goes on from there
SELECT esrc.reset_subscription('pa', 2);
SELECT position FROM esrc.poll('pa', 'm1', 3, ack => 16);
\echo SQLSTATE :SQLSTATE
SELECT checkpoint FROM esrc.subscription_checkpoints;
SELECT position FROM esrc.poll('pa', 'm1', 3);

-- several partitions: the ack moves every one the member holds
SELECT esrc.create_subscription('pa4', partitions => 4);
SELECT count(*) FROM esrc.poll('pa4', 'a', 10);
SELECT count(*) FROM esrc.poll('pa4', 'a', 10, ack => 10);
SELECT partition, checkpoint FROM esrc.subscription_checkpoints c
JOIN esrc.subscriptions s ON s.id = c.subscription_id WHERE s.name = 'pa4' ORDER BY 1;
SELECT sum(events_behind) FROM esrc.subscription_status WHERE subscription = 'pa4';
SELECT count(*) FROM esrc.poll('pa4', 'a', 10, ack => 16);
SELECT partition, checkpoint FROM esrc.subscription_checkpoints c
JOIN esrc.subscriptions s ON s.id = c.subscription_id WHERE s.name = 'pa4' ORDER BY 1;
