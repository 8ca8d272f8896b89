-- esrc 0.2.0 -> 0.3.0 upgrade script.
-- Everything 0.3.0 adds to or changes in the SQL surface, in the order the
-- install script's parts (src/sql/*.sql) define it; test/run-15-upgrade.sh
-- checks that an upgraded database describes exactly what a fresh install does.
\echo Use "ALTER EXTENSION esrc UPDATE TO '0.3.0'" to load this file. \quit

-- Reads on hot standbys (issue 27, item 3): the horizon the primary publishes.
-- The primary's read horizon for its hot standbys (src/log/standby.c):
-- one row, overwritten in place (no new row version, no transaction id)
-- by the horizon publisher, a background worker per database that
-- appends, when the in-flight registry changed; a standby computes
-- read_all's, read_category's and safe_position's horizons from what it
-- has replayed of it.  categories holds up to 16 (hash, bound) pairs of
-- appends in flight, ncategories of them in use.  Not for applications
-- to write.
CREATE TABLE esrc.standby_horizon (
    singleton      boolean     NOT NULL DEFAULT true CHECK (singleton),
    published_at   timestamptz NOT NULL,
    horizon        bigint      NOT NULL,
    last_position  bigint      NOT NULL,
    overflow_bound bigint      NOT NULL,
    ncategories    integer     NOT NULL,
    categories     bytea       NOT NULL,
    CONSTRAINT standby_horizon_pkey PRIMARY KEY (singleton)
);
-- a fixed length, never compressed: the publisher overwrites it in place
ALTER TABLE esrc.standby_horizon ALTER COLUMN categories SET STORAGE PLAIN;
INSERT INTO esrc.standby_horizon
    VALUES (true, pg_catalog.now(), 0, 0, 0, 0, pg_catalog.decode(pg_catalog.repeat('00', 256), 'hex'));
COMMENT ON TABLE esrc.standby_horizon IS
    'The horizon the primary publishes for reads on hot standbys: the global horizon, and last(position_seq), the lowest bound per category hash of appends in flight and the lowest overflow bound of one reading of the registry.  Written in place by the horizon publisher only.';
REVOKE ALL ON esrc.standby_horizon FROM PUBLIC;
GRANT SELECT ON esrc.standby_horizon TO esrc_reader;
------------------------------------------------------------------------
-- Dynamic consistency boundaries (issue 28, docs/dcb.md): tags on events,
-- reads by query, conditional appends.  ADD COLUMN without a default
-- rewrites nothing; the partial GIN index holds only tagged events, so it
-- is empty after the upgrade.
------------------------------------------------------------------------
ALTER TABLE esrc.events ADD COLUMN tags text[];
CREATE INDEX events_tags_idx ON esrc.events USING gin (tags) WITH (gin_pending_list_limit = 256)
    WHERE tags IS NOT NULL;
COMMENT ON COLUMN esrc.events.tags IS
    'The event''s tags (dynamic consistency boundaries, docs/dcb.md); null for an event without tags.';
-- read functions, subscriptions, snapshots' reducers and projections'
-- handlers see the tags (C code fills either shape of the type)
ALTER TYPE esrc.event ADD ATTRIBUTE tags text[];

DROP FUNCTION esrc.append(text, text, jsonb, jsonb, bigint, uuid);
CREATE FUNCTION esrc.append(
    stream text,
    type text,
    data jsonb,
    metadata jsonb DEFAULT NULL,
    expected_version bigint DEFAULT NULL,
    id uuid DEFAULT NULL,
    tags text[] DEFAULT NULL)
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_append';
COMMENT ON FUNCTION esrc.append(text, text, jsonb, jsonb, bigint, uuid, text[]) IS
    'Append one event (with optional tags) to a stream and return the stream''s new version; raises 40001 when expected_version does not match.';

CREATE FUNCTION esrc.append_if(
    stream text,
    events jsonb,
    condition jsonb,
    expected_version bigint DEFAULT NULL)
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_append_if';
COMMENT ON FUNCTION esrc.append_if(text, jsonb, jsonb, bigint) IS
    'append_batch with a condition {"fail_if_events_match": query, "after": position}: raises 40001 when an event matching the query exists after the position (docs/dcb.md).';

CREATE FUNCTION esrc.read_query(
    query jsonb,
    after bigint DEFAULT 0,
    max_count int DEFAULT NULL,
    up_to bigint DEFAULT NULL)
RETURNS SETOF esrc.event
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 100
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_read_query';
COMMENT ON FUNCTION esrc.read_query(jsonb, bigint, int, bigint) IS
    'Committed events matching a query (items OR''d; within an item types OR''d and every tag required) after a position and up to up_to (null = esrc.safe_position()), in position order (docs/dcb.md).';

CREATE FUNCTION esrc.explain_query(query jsonb)
RETURNS SETOF text
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 10
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_explain_query';
COMMENT ON FUNCTION esrc.explain_query(jsonb) IS
    'The plan (EXPLAIN, costs off) of the statement esrc.read_query and esrc.append_if run for a query.';

REVOKE ALL ON FUNCTION esrc.append(text, text, jsonb, jsonb, bigint, uuid, text[]),
                       esrc.append_if(text, jsonb, jsonb, bigint),
                       esrc.read_query(jsonb, bigint, int, bigint),
                       esrc.explain_query(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.append(text, text, jsonb, jsonb, bigint, uuid, text[]),
                          esrc.append_if(text, jsonb, jsonb, bigint)
    TO esrc_writer;
GRANT EXECUTE ON FUNCTION esrc.read_query(jsonb, bigint, int, bigint),
                          esrc.explain_query(jsonb)
    TO esrc_reader;

-- read_category's filters (issue 28): event types, and one member of a
-- consumer group (esrc.stream_partition)
DROP FUNCTION esrc.read_category(text, bigint, int);
CREATE FUNCTION esrc.read_category(
    category text,
    after_position bigint DEFAULT 0,
    max_count int DEFAULT 1000,
    types text[] DEFAULT NULL,
    "partition" int DEFAULT NULL,
    partitions int DEFAULT NULL)
RETURNS SETOF esrc.event
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 1000
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_read_category';
COMMENT ON FUNCTION esrc.read_category(text, bigint, int, text[], int, int) IS
    'Committed events of one category (stream name prefix before the first "-") after a global position, in commit-safe order; only of the given types, and only of the streams of one partition of partitions (esrc.stream_partition), when given.';
REVOKE ALL ON FUNCTION esrc.read_category(text, bigint, int, text[], int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.read_category(text, bigint, int, text[], int, int) TO esrc_reader;

-- subscriptions' filter by tags (issue 28)
ALTER TABLE esrc.subscriptions ADD COLUMN tags text[];
COMMENT ON COLUMN esrc.subscriptions.tags IS 'Only events that carry every one of these tags are delivered; null = no filter.';
DROP FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb);
CREATE FUNCTION esrc.create_subscription(
    name text,
    categories text[] DEFAULT NULL,
    partitions integer DEFAULT 1,
    start text DEFAULT 'beginning',
    types text[] DEFAULT NULL,
    metadata jsonb DEFAULT NULL,
    tags text[] DEFAULT NULL)
RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_create_subscription';
COMMENT ON FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb, text[]) IS
    'Create a subscription of some categories (null = all) with a number of partitions, starting at the beginning, the end or after a position; optional type, metadata and tag filters.';
REVOKE ALL ON FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb, text[]) TO esrc_subscriber;
