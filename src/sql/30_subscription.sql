-- Part of the esrc install script (see Makefile): subscriptions for SQL
-- consumers (src/subscription/,
-- docs/subscriptions.md).

------------------------------------------------------------------------
-- The role that may create subscriptions, esrc_subscriber, is created (or
-- adopted) with the others in 00_core.sql.
------------------------------------------------------------------------

------------------------------------------------------------------------
-- The catalog.  Written only by the functions below (as the tables'
-- owner); readable by esrc_reader.
------------------------------------------------------------------------
CREATE SEQUENCE esrc.subscription_id_seq AS bigint MINVALUE 1 NO CYCLE;

CREATE TABLE esrc.subscriptions (
    id          bigint      NOT NULL DEFAULT pg_catalog.nextval('esrc.subscription_id_seq'::pg_catalog.regclass),
    name        text        NOT NULL,
    owner       regrole     NOT NULL,
    categories  text[],
    types       text[],
    metadata    jsonb,
    partitions  integer     NOT NULL CHECK (partitions BETWEEN 1 AND 1024),
    consumers   regrole[]   NOT NULL DEFAULT '{}',
    projection  boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    tags        text[],
    CONSTRAINT subscriptions_pkey PRIMARY KEY (id),
    CONSTRAINT subscriptions_name_key UNIQUE (name)
);
ALTER SEQUENCE esrc.subscription_id_seq OWNED BY esrc.subscriptions.id;
COMMENT ON TABLE esrc.subscriptions IS
    'Subscriptions of SQL consumers (esrc.create_subscription): what they follow, their partitions, who may consume them.';
COMMENT ON COLUMN esrc.subscriptions.categories IS 'Categories followed; null = all.';
COMMENT ON COLUMN esrc.subscriptions.types IS 'Event types delivered; null = all.  Other events still advance the checkpoints.';
COMMENT ON COLUMN esrc.subscriptions.metadata IS 'Only events whose metadata @> this are delivered; null = no filter.';
COMMENT ON COLUMN esrc.subscriptions.tags IS 'Only events that carry every one of these tags are delivered; null = no filter.';
COMMENT ON COLUMN esrc.subscriptions.consumers IS 'Roles besides the owner that may poll and ack (esrc.grant_subscription).';
COMMENT ON COLUMN esrc.subscriptions.projection IS 'The subscription of a projection (named projection:<name>), polled by its workers only.';

CREATE TABLE esrc.subscription_checkpoints (
    subscription_id bigint  NOT NULL REFERENCES esrc.subscriptions (id) ON DELETE CASCADE,
    partition   integer     NOT NULL CHECK (partition >= 0),
    checkpoint  bigint      NOT NULL CHECK (checkpoint >= 0),
    acked_at    timestamptz,
    CONSTRAINT subscription_checkpoints_pkey PRIMARY KEY (subscription_id, partition)
);
COMMENT ON TABLE esrc.subscription_checkpoints IS
    'Per subscription and partition, the last processed position: polls return the events after it.  Moved by esrc.ack in the consumer''s transaction.';

SELECT pg_catalog.pg_extension_config_dump('esrc.subscriptions', '');
SELECT pg_catalog.pg_extension_config_dump('esrc.subscription_checkpoints', '');
SELECT pg_catalog.pg_extension_config_dump('esrc.subscription_id_seq', '');

REVOKE ALL ON esrc.subscriptions, esrc.subscription_checkpoints FROM PUBLIC;
REVOKE ALL ON SEQUENCE esrc.subscription_id_seq FROM PUBLIC;
GRANT SELECT ON esrc.subscriptions, esrc.subscription_checkpoints TO esrc_reader;

------------------------------------------------------------------------
-- Functions.  Not SECURITY DEFINER: the C code checks the caller's rights
-- (esrc_subscriber to create; owner to drop, reset and grant; esrc_reader
-- and owner or grant to poll and ack) and writes the catalog as its
-- owner, security-restricted.
------------------------------------------------------------------------
CREATE FUNCTION esrc.create_subscription(
    name text,
    categories text[] DEFAULT NULL,
    partitions integer DEFAULT 1,
    start text DEFAULT 'beginning',
    types text[] DEFAULT NULL,
    metadata jsonb DEFAULT NULL,
    tags text[] DEFAULT NULL,
    if_not_exists boolean DEFAULT false)
RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_create_subscription';
COMMENT ON FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb, text[], boolean) IS
    'Create a subscription of some categories (null = all) with a number of partitions, starting at the beginning, the end or after a position; optional type, metadata and tag filters.  With if_not_exists, an existing subscription of the same definition (start aside) is a notice, one of another definition an error.';

CREATE FUNCTION esrc.drop_subscription(name text) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_drop_subscription';
COMMENT ON FUNCTION esrc.drop_subscription(text) IS
    'Drop a subscription and its checkpoints.';

CREATE FUNCTION esrc.reset_subscription(name text, "position" bigint) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_reset_subscription';
COMMENT ON FUNCTION esrc.reset_subscription(text, bigint) IS
    'Set every checkpoint of a subscription to a position: the events after it are delivered (again).';

CREATE FUNCTION esrc.grant_subscription(name text, role regrole) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_grant_subscription';
COMMENT ON FUNCTION esrc.grant_subscription(text, regrole) IS
    'Let a role (and its members) poll and ack a subscription.';

CREATE FUNCTION esrc.revoke_subscription(name text, role regrole) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_revoke_subscription';
COMMENT ON FUNCTION esrc.revoke_subscription(text, regrole) IS
    'Undo esrc.grant_subscription.';

CREATE FUNCTION esrc.poll(
    subscription text,
    member text,
    max_count integer DEFAULT 100,
    wait interval DEFAULT '0',
    ack bigint DEFAULT NULL)
RETURNS SETOF esrc.event
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 100
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_poll';
COMMENT ON FUNCTION esrc.poll(text, text, integer, interval, bigint) IS
    'Events after the checkpoints of the partitions this member holds (taking and renewing their leases), up to the commit-safe horizon, oldest first; with none, waits up to wait for a commit that brings some.  With ack (not null), first acknowledges up to that position as esrc.ack would, in the same transaction, and then does not wait.';

CREATE FUNCTION esrc.ack(
    subscription text,
    member text,
    "position" bigint DEFAULT NULL)
RETURNS integer
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_ack';
COMMENT ON FUNCTION esrc.ack(text, text, bigint) IS
    'Move the checkpoints of this member''s partitions to position (null = all its last poll covered) in the caller''s transaction; returns how many moved.';

CREATE FUNCTION esrc.wait_for_subscription(
    name text,
    "position" bigint,
    timeout interval DEFAULT '5s')
RETURNS text
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_wait_for_subscription';
COMMENT ON FUNCTION esrc.wait_for_subscription(text, bigint, interval) IS
    'Wait until the subscription''s consumer group has acknowledged every event of its categories up to position: ''applied'', or ''timeout''; woken by the acknowledging commit (READ COMMITTED only).';

CREATE FUNCTION esrc.stream_partition(stream text, partitions integer) RETURNS integer
    LANGUAGE c STRICT IMMUTABLE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'esrc_stream_partition';
COMMENT ON FUNCTION esrc.stream_partition(text, integer) IS
    'The partition of a stream among that many: (murmur2(stream) & 0x7fffffff) % partitions, as Kafka''s default partitioner and the forwarder place the stream''s records.';

CREATE FUNCTION esrc.subscription_status_internal(
    OUT subscription text,
    OUT partition integer,
    OUT member text,
    OUT lease_expires_at timestamptz,
    OUT checkpoint bigint,
    OUT events_behind bigint,
    OUT seconds_behind double precision)
RETURNS SETOF record
    LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_subscription_status';
COMMENT ON FUNCTION esrc.subscription_status_internal() IS
    'Rows of esrc.subscription_status.';

CREATE VIEW esrc.subscription_status AS
    SELECT subscription, partition, member, lease_expires_at, checkpoint,
           events_behind, seconds_behind
    FROM esrc.subscription_status_internal();
COMMENT ON VIEW esrc.subscription_status IS
    'Per subscription and partition: the member holding it and until when, its checkpoint, and the events (and seconds, the age of the oldest) not yet acknowledged.  Scans those events.';

REVOKE ALL ON FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb, text[], boolean),
                       esrc.drop_subscription(text),
                       esrc.reset_subscription(text, bigint),
                       esrc.grant_subscription(text, regrole),
                       esrc.revoke_subscription(text, regrole),
                       esrc.poll(text, text, integer, interval, bigint),
                       esrc.ack(text, text, bigint),
                       esrc.wait_for_subscription(text, bigint, interval),
                       esrc.stream_partition(text, integer),
                       esrc.subscription_status_internal()
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.create_subscription(text, text[], integer, text, text[], jsonb, text[], boolean),
                          esrc.drop_subscription(text),
                          esrc.reset_subscription(text, bigint),
                          esrc.grant_subscription(text, regrole),
                          esrc.revoke_subscription(text, regrole)
    TO esrc_subscriber;
GRANT EXECUTE ON FUNCTION esrc.poll(text, text, integer, interval, bigint),
                          esrc.ack(text, text, bigint),
                          esrc.wait_for_subscription(text, bigint, interval),
                          esrc.stream_partition(text, integer),
                          esrc.subscription_status_internal()
    TO esrc_reader;
GRANT SELECT ON esrc.subscription_status TO esrc_reader;
GRANT USAGE ON SCHEMA esrc TO esrc_subscriber;
