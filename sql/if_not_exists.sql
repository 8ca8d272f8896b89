-- if_not_exists on create_snapshot, create_subscription and
-- create_projection, for application start-up code: an existing object of
-- the same definition is a NOTICE and nothing changes; one of another
-- definition is the error of a plain create, with what differs in its
-- DETAIL.  Start is not part of a definition.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;
\set SHOW_CONTEXT never
CREATE ROLE ine_owner LOGIN IN ROLE esrc_snapshot_manager, esrc_subscriber, esrc_writer;
CREATE ROLE ine_stranger LOGIN IN ROLE esrc_subscriber, esrc_reader;
CREATE SCHEMA ine AUTHORIZATION ine_owner;
SET ROLE ine_owner;
CREATE FUNCTION ine.count(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE sql RETURN jsonb_build_object('n', coalesce((state->>'n')::int, 0) + 1);
CREATE FUNCTION ine.on_event(event esrc.event) RETURNS void
    LANGUAGE sql AS $$ SELECT $$;
CREATE FUNCTION ine.on_event_too(event esrc.event) RETURNS void
    LANGUAGE sql AS $$ SELECT $$;
CREATE FUNCTION ine.reset() RETURNS void
    LANGUAGE sql AS $$ SELECT $$;
CREATE TABLE ine.plain (x int);
SELECT esrc.append('ine-1', 'Counted', '{}');

-- Snapshots.
SELECT esrc.create_snapshot('ine.counts', 'ine', 'ine.count(jsonb, esrc.event)', if_not_exists => true);
SELECT esrc.append('ine-1', 'Counted', '{}');
SELECT stream, version, state FROM ine.counts;
-- the same again (the reducer written another way): a notice, 0, no change
SET search_path = ine;
SELECT esrc.create_snapshot('counts', 'ine', 'count(jsonb, esrc.event)', '{}', true);
RESET search_path;
SELECT stream, version, state FROM ine.counts;
-- another definition: an error that names what differs
SELECT esrc.create_snapshot('ine.counts', 'other', 'esrc.merge(jsonb, esrc.event)', '{"n": 0}', if_not_exists => true);
SELECT esrc.create_snapshot('ine.counts', 'ine', 'ine.count(jsonb, esrc.event)', '{"n": 0}', if_not_exists => true);
-- a table that is not a snapshot
SELECT esrc.create_snapshot('ine.plain', 'ine', 'ine.count(jsonb, esrc.event)', if_not_exists => true);
-- without if_not_exists, as before
SELECT esrc.create_snapshot('ine.counts', 'ine', 'ine.count(jsonb, esrc.event)');

-- Subscriptions.
SELECT esrc.create_subscription('ine_sub', ARRAY['ine', 'other'], 2, types => ARRAY['Counted'],
                                if_not_exists => true);
SELECT esrc.create_subscription('ine_sub', ARRAY['other', 'ine'], 2, start => 'end',
                                types => ARRAY['Counted'], if_not_exists => true);
SELECT name, categories, partitions, types, metadata FROM esrc.subscriptions WHERE name = 'ine_sub';
SELECT esrc.create_subscription('ine_sub', ARRAY['ine'], 4, metadata => '{"a": 1}', if_not_exists => true);
SELECT esrc.create_subscription('ine_sub', ARRAY['ine', 'other'], 2, if_not_exists => true);
SELECT esrc.create_subscription('ine_sub', ARRAY['ine', 'other'], 2, types => ARRAY['Counted']);
-- tags (dynamic consistency boundaries) are part of the definition too
SELECT esrc.create_subscription('ine_tagged', ARRAY['ine'], tags => ARRAY['vip', 'eu'], if_not_exists => true);
SELECT esrc.create_subscription('ine_tagged', ARRAY['ine'], tags => ARRAY['eu', 'vip'], if_not_exists => true);
SELECT esrc.create_subscription('ine_tagged', ARRAY['ine'], tags => ARRAY['vip'], if_not_exists => true);
SELECT esrc.create_subscription('ine_tagged', ARRAY['ine'], if_not_exists => true);
SELECT esrc.drop_subscription('ine_tagged');
RESET ROLE;
-- another role's subscription of the same definition is not the caller's
SET ROLE ine_stranger;
SELECT esrc.create_subscription('ine_sub', ARRAY['ine', 'other'], 2, types => ARRAY['Counted'],
                                if_not_exists => true);
RESET ROLE;

-- Projections: the same id back.
SET ROLE ine_owner;
SELECT esrc.create_projection('ine_proj', 'ine.on_event(esrc.event)', ARRAY['ine'], 2,
                              reset_function => 'ine.reset()', if_not_exists => true) AS id \gset
SELECT esrc.create_projection('ine_proj', 'ine.on_event(esrc.event)', ARRAY['ine'], 2, start => 'end',
                              reset_function => 'ine.reset()', if_not_exists => true) = :id AS same_id;
SELECT count(*) AS projections FROM esrc.projections WHERE name = 'ine_proj';
SELECT esrc.create_projection('ine_proj', 'ine.on_event_too(esrc.event)', ARRAY['ine', 'other'], 1, 10,
                              if_not_exists => true);
SELECT esrc.create_projection('ine_proj', 'ine.on_event(esrc.event)', ARRAY['ine'], 2);
SELECT esrc.drop_projection('ine_proj');
SELECT esrc.drop_subscription('ine_sub');
SELECT esrc.drop_snapshot('ine.counts');
RESET ROLE;
DROP SCHEMA ine CASCADE;
DROP ROLE ine_owner, ine_stranger;
