-- Part of the esrc install script (see Makefile): the event log, appends, reads.

------------------------------------------------------------------------
-- Roles
--
-- Roles are cluster-wide, so another database may have created them
-- already; DROP EXTENSION leaves them in place.  esrc_reader, esrc_writer,
-- esrc_subscriber (subscriptions, 30_subscription.sql), esrc_admin (the
-- log's life cycle, 50_lifecycle.sql) and esrc_snapshot_manager (creating,
-- rebuilding and dropping snapshots of tables one owns, 10_snapshot.sql)
-- are created here, all five: an
-- existing one is adopted only if it has no rights esrc would not have
-- given it: no SUPERUSER, CREATEDB, CREATEROLE, REPLICATION, BYPASSRLS or
-- LOGIN, and no membership in another role (esrc_writer may be a member of
-- esrc_reader).  Whoever is granted an esrc role would gain those rights
-- too, so CREATE EXTENSION refuses such a role (42710).  Privileges on
-- objects (in this or other databases) are not checked.
------------------------------------------------------------------------
DO $roles$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT a.rolname,
               pg_catalog.array_remove(ARRAY[
                   CASE WHEN a.rolsuper THEN 'SUPERUSER' END,
                   CASE WHEN a.rolcreatedb THEN 'CREATEDB' END,
                   CASE WHEN a.rolcreaterole THEN 'CREATEROLE' END,
                   CASE WHEN a.rolreplication THEN 'REPLICATION' END,
                   CASE WHEN a.rolbypassrls THEN 'BYPASSRLS' END,
                   CASE WHEN a.rolcanlogin THEN 'LOGIN' END], NULL)
               OPERATOR(pg_catalog.||)
               ARRAY(SELECT 'membership in role ' OPERATOR(pg_catalog.||)
                            pg_catalog.quote_ident(g.rolname)
                     FROM pg_catalog.pg_auth_members m
                     JOIN pg_catalog.pg_roles g ON g.oid OPERATOR(pg_catalog.=) m.roleid
                     WHERE m.member OPERATOR(pg_catalog.=) a.oid
                       AND NOT (a.rolname OPERATOR(pg_catalog.=) 'esrc_writer'
                                AND g.rolname OPERATOR(pg_catalog.=) 'esrc_reader')
                     ORDER BY g.rolname) AS extra
        FROM pg_catalog.pg_roles a
        WHERE a.rolname IN ('esrc_reader', 'esrc_writer', 'esrc_subscriber', 'esrc_admin',
                            'esrc_snapshot_manager')
        ORDER BY a.rolname
    LOOP
        IF pg_catalog.cardinality(r.extra) OPERATOR(pg_catalog.>) 0 THEN
            RAISE EXCEPTION 'role "%" already exists with rights esrc does not give it', r.rolname
                USING ERRCODE = 'duplicate_object',
                      DETAIL = pg_catalog.format('It has %s; every role granted %s would gain them.',
                                                 pg_catalog.array_to_string(r.extra, ', '), r.rolname),
                      HINT = pg_catalog.format('Remove them (ALTER ROLE %1$s NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS NOLOGIN, REVOKE ... FROM %1$s) or drop the role, then create the extension again.',
                                               r.rolname);
        END IF;
    END LOOP;
    FOR r IN SELECT n FROM pg_catalog.unnest(ARRAY['esrc_reader', 'esrc_writer', 'esrc_subscriber', 'esrc_admin',
                                                   'esrc_snapshot_manager']) n
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) r.n) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r.n);
        END IF;
    END LOOP;
END
$roles$;
GRANT esrc_reader TO esrc_writer;

REVOKE ALL ON SCHEMA esrc FROM PUBLIC;
GRANT USAGE ON SCHEMA esrc TO esrc_reader;

------------------------------------------------------------------------
-- The event log
------------------------------------------------------------------------

-- Global positions.  CACHE 1 is required: order.c relies on nextval()
-- returning increasing values in call order across sessions.
CREATE SEQUENCE esrc.position_seq AS bigint MINVALUE 1 CACHE 1 NO CYCLE;
COMMENT ON SEQUENCE esrc.position_seq IS
    'Global event positions; handed out by esrc.append under the stream lock.';

CREATE TABLE esrc.events (
    position    bigint      NOT NULL,
    stream      text        NOT NULL,
    version     bigint      NOT NULL CHECK (version >= 0),
    type        text        NOT NULL,
    data        jsonb       NOT NULL,
    metadata    jsonb,
    id          uuid        NOT NULL,
    recorded_at timestamptz NOT NULL,
    category    text        NOT NULL,
    tags        text[],
    CONSTRAINT events_pkey PRIMARY KEY (position),
    CONSTRAINT events_stream_version_key UNIQUE (stream, version),
    CONSTRAINT events_id_key UNIQUE (id)
);
CREATE INDEX events_category_position_idx ON esrc.events (category, position);
-- Reads by tag (esrc.read_query, esrc.append_if's condition): untagged
-- events (tags null) are not in the index and cost it nothing.  New
-- entries go to GIN's pending list (cheap appends), kept at 256 kB at most
-- (gin_pending_list_limit; the default is 4 MB), so that what a read by
-- tag scans besides the index stays small and bounded.
CREATE INDEX events_tags_idx ON esrc.events USING gin (tags) WITH (gin_pending_list_limit = 256)
    WHERE tags IS NOT NULL;
COMMENT ON COLUMN esrc.events.tags IS
    'The event''s tags (dynamic consistency boundaries, docs/dcb.md); null for an event without tags.';
ALTER SEQUENCE esrc.position_seq OWNED BY esrc.events.position;
COMMENT ON TABLE esrc.events IS
    'The append-only event log.  Write with esrc.append/esrc.append_batch; UPDATE, DELETE and TRUNCATE are refused.';

-- pg_dump dumps the log and the sequence with the database.
SELECT pg_catalog.pg_extension_config_dump('esrc.events', '');
SELECT pg_catalog.pg_extension_config_dump('esrc.position_seq', '');

CREATE TYPE esrc.event AS (
    position    bigint,
    stream      text,
    version     bigint,
    type        text,
    data        jsonb,
    metadata    jsonb,
    id          uuid,
    recorded_at timestamptz,
    tags        text[]
);
COMMENT ON TYPE esrc.event IS 'One event as returned by the read functions.';

-- Immutability: refuse UPDATE, DELETE and TRUNCATE for everyone.  The
-- triggers are ENABLE ALWAYS, so session_replication_role does not
-- bypass them.
CREATE FUNCTION esrc.events_immutable() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_events_immutable';
COMMENT ON FUNCTION esrc.events_immutable() IS
    'Trigger function that refuses every change to stored events.';

CREATE TRIGGER events_immutable BEFORE UPDATE OR DELETE ON esrc.events
    FOR EACH ROW EXECUTE FUNCTION esrc.events_immutable();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON esrc.events
    FOR EACH STATEMENT EXECUTE FUNCTION esrc.events_immutable();
ALTER TABLE esrc.events ENABLE ALWAYS TRIGGER events_immutable;
ALTER TABLE esrc.events ENABLE ALWAYS TRIGGER events_no_truncate;

REVOKE ALL ON esrc.events FROM PUBLIC;
REVOKE ALL ON SEQUENCE esrc.position_seq FROM PUBLIC;
GRANT SELECT ON esrc.events TO esrc_reader;
GRANT SELECT ON SEQUENCE esrc.position_seq TO esrc_reader;

------------------------------------------------------------------------
-- Appending
--
-- Not SECURITY DEFINER: the C code writes esrc.events itself (index scans
-- and the executor's simple insert, no SQL and no name lookup that
-- search_path could redirect), so EXECUTE on these two functions is all a
-- writer needs.  Triggers on esrc.events run as the caller.
------------------------------------------------------------------------
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

CREATE FUNCTION esrc.append_batch(
    stream text,
    events jsonb,
    expected_version bigint DEFAULT NULL)
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_append_batch';
COMMENT ON FUNCTION esrc.append_batch(text, jsonb, bigint) IS
    'Append a JSON array of events to a stream atomically with consecutive versions; returns the stream''s new version.';

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

------------------------------------------------------------------------
-- Reading
------------------------------------------------------------------------
CREATE FUNCTION esrc.stream_version(stream text) RETURNS bigint
    LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_stream_version';
COMMENT ON FUNCTION esrc.stream_version(text) IS
    'The version of the last event of a stream, -1 for a stream with no events.';

CREATE FUNCTION esrc.read_stream(
    stream text,
    from_version bigint DEFAULT 0,
    max_count int DEFAULT NULL)
RETURNS SETOF esrc.event
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 100
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_read_stream';
COMMENT ON FUNCTION esrc.read_stream(text, bigint, int) IS
    'The events of a stream from from_version on, oldest first; at most max_count (null = all).';

CREATE FUNCTION esrc.read_stream_backward(
    stream text,
    from_version bigint DEFAULT NULL,
    max_count int DEFAULT NULL)
RETURNS SETOF esrc.event
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 100
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_read_stream_backward';
COMMENT ON FUNCTION esrc.read_stream_backward(text, bigint, int) IS
    'The events of a stream from from_version (null = the end) back, newest first; at most max_count (null = all).';

CREATE FUNCTION esrc.read_all(
    after_position bigint DEFAULT 0,
    max_count int DEFAULT 1000)
RETURNS SETOF esrc.event
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE ROWS 1000
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_read_all';
COMMENT ON FUNCTION esrc.read_all(bigint, int) IS
    'Committed events of all streams after a global position, in commit-safe position order, up to esrc.safe_position().';

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

CREATE FUNCTION esrc.safe_position() RETURNS bigint
    LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_safe_position_sql';
COMMENT ON FUNCTION esrc.safe_position() IS
    'The read horizon: every event at or below this position has committed or rolled back; read_all never returns events beyond it.';

CREATE FUNCTION esrc.last_position() RETURNS bigint
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'esrc_last_position';
COMMENT ON FUNCTION esrc.last_position() IS
    'The global position of the last event this session appended (append, append_if, append_batch: the last of the batch), null before its first append; kept after the commit and after a rollback.';

CREATE FUNCTION esrc.inflight_appends_internal(OUT pid integer, OUT min_position bigint)
RETURNS SETOF record
    LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_inflight_appends';
COMMENT ON FUNCTION esrc.inflight_appends_internal() IS
    'Backends of this database whose open transaction holds event positions (used by esrc.inflight_appends).';

CREATE VIEW esrc.inflight_appends AS
    SELECT i.pid, i.min_position, a.usename, a.application_name, a.state,
           a.xact_start, now() - a.xact_start AS xact_age
    FROM esrc.inflight_appends_internal() i
    LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = i.pid;
COMMENT ON VIEW esrc.inflight_appends IS
    'Open transactions that appended events and so hold back esrc.safe_position() until they end.';

-- security_invoker: the view reads esrc.events with the caller's rights,
-- row-level security included, not with its owner's.
CREATE VIEW esrc.streams WITH (security_invoker = true) AS
    SELECT stream,
           min(category)    AS category,
           max(version)     AS version,
           count(*)         AS event_count,
           min(recorded_at) AS first_recorded_at,
           max(recorded_at) AS last_recorded_at
    FROM esrc.events
    GROUP BY stream;
COMMENT ON VIEW esrc.streams IS
    'One row per stream: its category, current version, number of events and first/last recorded_at.  Scans the whole log.';
GRANT SELECT ON esrc.streams TO esrc_reader;
GRANT SELECT ON esrc.inflight_appends TO esrc_reader;

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
-- Privileges on functions: nothing for PUBLIC.
------------------------------------------------------------------------
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA esrc FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.append(text, text, jsonb, jsonb, bigint, uuid, text[]),
                          esrc.append_batch(text, jsonb, bigint),
                          esrc.append_if(text, jsonb, jsonb, bigint),
                          esrc.last_position()
    TO esrc_writer;
GRANT EXECUTE ON FUNCTION esrc.stream_version(text),
                          esrc.read_stream(text, bigint, int),
                          esrc.read_stream_backward(text, bigint, int),
                          esrc.read_all(bigint, int),
                          esrc.read_category(text, bigint, int, text[], int, int),
                          esrc.read_query(jsonb, bigint, int, bigint),
                          esrc.explain_query(jsonb),
                          esrc.safe_position(),
                          esrc.last_position(),
                          esrc.inflight_appends_internal()
    TO esrc_reader;
