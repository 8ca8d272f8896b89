-- Read-only transactions (BEGIN READ ONLY, default_transaction_read_only,
-- a hot standby): every esrc function that writes refuses at once with
-- 25006 "cannot execute esrc.<function>() in a read-only transaction",
-- before it looks at its arguments or takes a lock, and writes nothing;
-- the read functions, and a poll without ack, still work.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
\set VERBOSITY default

SELECT esrc.append('ro-1', 'Added', '{"n": 1}') AS v0, esrc.append('ro-2', 'Added', '{"n": 2}') AS v0;
CREATE FUNCTION ro_sum(state jsonb, event esrc.event) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('n', coalesce((state->>'n')::int, 0) + (event.data->>'n')::int)
$$;
SELECT esrc.create_snapshot('ro_total', 'ro', 'ro_sum(jsonb, esrc.event)');
SELECT esrc.create_subscription('ro_sub', ARRAY['ro']);
CREATE FUNCTION ro_handler(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$ BEGIN END $$;
SELECT esrc.create_projection('ro_proj', 'ro_handler(esrc.event)', ARRAY['ro']) > 0 AS created;
SELECT esrc.projection_pause('ro_proj');
CREATE ROLE ro_consumer;
SELECT esrc.encrypt('ro-subject', 'f', '"v"') IS NOT NULL AS key_made;

-- the statement's SQLSTATE and message, or ok
CREATE FUNCTION ro_try(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || SQLERRM;
END
$$;
CREATE TABLE ro_writers (stmt text);
INSERT INTO ro_writers VALUES
    ($$SELECT esrc.append('ro-1', 'Added', '{"n": 1}')$$),
    ($$SELECT esrc.append(NULL, NULL, NULL)$$),
    ($$SELECT esrc.append_batch('ro-1', '[{"type": "Added", "data": {"n": 1}}]')$$),
    ($$SELECT esrc.erase_stream('ro-2', 'gone')$$),
    ($$SELECT esrc.delete_stream('ro-1', 'closed')$$),
    ($$SELECT esrc.set_stream_rules('ro-1', max_count => 5, reason => 'keep 5')$$),
    ($$SELECT esrc.scavenge()$$),
    ($$SELECT esrc.scrub()$$),
    ($$SELECT esrc.create_snapshot('ro_total2', 'ro', 'ro_sum(jsonb, esrc.event)')$$),
    ($$SELECT esrc.rebuild_snapshot('ro_total')$$),
    ($$SELECT esrc.drop_snapshot('ro_total')$$),
    ($$SELECT esrc.create_subscription('ro_sub2', ARRAY['ro'])$$),
    ($$SELECT esrc.reset_subscription('ro_sub', 0)$$),
    ($$SELECT esrc.grant_subscription('ro_sub', 'ro_consumer')$$),
    ($$SELECT esrc.revoke_subscription('ro_sub', 'ro_consumer')$$),
    ($$SELECT esrc.drop_subscription('ro_sub')$$),
    ($$SELECT esrc.ack('ro_sub', 'm1')$$),
    ($$SELECT count(*) FROM esrc.poll('ro_sub', 'm1', ack => 0)$$),
    ($$SELECT esrc.create_projection('ro_proj2', 'ro_handler(esrc.event)')$$),
    ($$SELECT esrc.projection_pause('ro_proj')$$),
    ($$SELECT esrc.projection_resume('ro_proj')$$),
    ($$SELECT esrc.projection_skip('ro_proj', 1, 'poison')$$),
    ($$SELECT esrc.reset_projection('ro_proj')$$),
    ($$SELECT esrc.drop_projection('ro_proj')$$),
    ($$SELECT esrc.forwarder_skip(1, 'poison')$$),
    ($$SELECT esrc.encrypt('ro-new-subject', 'f', '"v"')$$),
    ($$SELECT esrc.forget_subject('ro-subject', 'request')$$);
CREATE TABLE ro_readers (stmt text);
INSERT INTO ro_readers VALUES
    ($$SELECT esrc.stream_version('ro-1')$$),
    ($$SELECT count(*) FROM esrc.read_stream('ro-1')$$),
    ($$SELECT count(*) FROM esrc.read_stream_backward('ro-1')$$),
    ($$SELECT count(*) FROM esrc.read_all()$$),
    ($$SELECT count(*) FROM esrc.read_category('ro')$$),
    ($$SELECT esrc.safe_position()$$),
    ($$SELECT esrc.load('ro_total', 'ro-1')$$),
    ($$SELECT esrc.snapshot_at('ro_total', 'ro-1', 0)$$),
    ($$SELECT count(*) FROM esrc.poll('ro_sub', 'm1')$$),
    ($$SELECT esrc.encrypt('ro-subject', 'f', '"v"')$$),
    ($$SELECT esrc.decrypt('ro-subject', 'f', '"v"')$$),
    ($$SELECT count(*) FROM esrc.subscription_status$$),
    ($$SELECT count(*) FROM esrc.projection_status$$),
    ($$SELECT count(*) FROM esrc.forwarder_status$$),
    ($$SELECT count(*) FROM esrc.metrics$$);

-- what is there before
CREATE TABLE ro_before AS
SELECT (SELECT count(*) FROM esrc.events) AS events,
       (SELECT count(*) FROM esrc.erasures) AS erasures,
       (SELECT count(*) FROM esrc.subscriptions) AS subscriptions,
       (SELECT count(*) FROM esrc.projections) AS projections,
       (SELECT count(*) FROM esrc.subject_keys) AS keys;

-- BEGIN READ ONLY: each writer names itself
BEGIN READ ONLY;
SELECT stmt, ro_try(stmt) AS result FROM ro_writers;
SELECT stmt, ro_try(stmt) AS result FROM ro_readers;
COMMIT;

-- default_transaction_read_only: the same
SET default_transaction_read_only = on;
SELECT stmt, ro_try(stmt) AS result FROM ro_writers
WHERE ro_try(stmt) NOT LIKE '25006 cannot execute esrc.%() % read-only transaction';
SELECT stmt, ro_try(stmt) AS result FROM ro_readers WHERE ro_try(stmt) <> 'ok';
-- as the statement itself, not caught
SELECT esrc.append('ro-1', 'Added', '{"n": 1}');
SELECT esrc.append_batch('ro-1', '[{"type": "Added", "data": {"n": 1}}]');
RESET default_transaction_read_only;

-- nothing was written
SELECT (SELECT count(*) FROM esrc.events) = events AS same_events,
       (SELECT count(*) FROM esrc.erasures) = erasures AS same_erasures,
       (SELECT count(*) FROM esrc.subscriptions) = subscriptions AS same_subscriptions,
       (SELECT count(*) FROM esrc.projections) = projections AS same_projections,
       (SELECT count(*) FROM esrc.subject_keys) = keys AS same_keys
FROM ro_before;
-- and a read-write transaction still writes
SELECT esrc.append('ro-1', 'Added', '{"n": 1}', expected_version => 0);

-- DROP OWNED, which takes the role out of esrc's subscriptions before
-- PostgreSQL drops its objects, is refused under its own name, as
-- PostgreSQL refuses it, and changes nothing
SELECT esrc.grant_subscription('ro_sub', 'ro_consumer');
BEGIN READ ONLY;
DROP OWNED BY ro_consumer;
ROLLBACK;
SET default_transaction_read_only = on;
DROP OWNED BY ro_consumer;
-- DROP ROLE too: PostgreSQL's refusal before esrc's listing of the grant
DROP ROLE ro_consumer;
RESET default_transaction_read_only;
SELECT consumers::regrole[] FROM esrc.subscriptions WHERE name = 'ro_sub';
DROP OWNED BY ro_consumer;
SELECT consumers::regrole[] FROM esrc.subscriptions WHERE name = 'ro_sub';

SELECT esrc.drop_projection('ro_proj');
SELECT esrc.drop_subscription('ro_sub');
SELECT esrc.drop_snapshot('ro_total');
DROP TABLE ro_writers, ro_readers, ro_before;
DROP FUNCTION ro_try(text), ro_handler(esrc.event), ro_sum(jsonb, esrc.event);
DROP ROLE ro_consumer;
