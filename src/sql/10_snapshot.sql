-- Part of the esrc install script (see Makefile): snapshots maintained by
-- triggers (src/snapshot/).  docs/snapshots.md is the reference.

------------------------------------------------------------------------
-- The catalog of snapshots
--
-- One row per snapshot.  The snapshot is its table; the reducer is kept
-- as the text of its qualified signature (not regprocedure) so that
-- pg_upgrade, which does not preserve function OIDs, accepts the table.
-- Rows are written by esrc.create_snapshot and esrc.drop_snapshot; the
-- triggers below validate them, record the dependencies of the snapshot
-- table and tell every session to reload its cached definitions.
------------------------------------------------------------------------
CREATE TABLE esrc.snapshots (
    snapshot      regclass    NOT NULL,
    category      text        NOT NULL,
    reducer       text        NOT NULL,
    initial_state jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT snapshots_pkey PRIMARY KEY (snapshot)
);
COMMENT ON TABLE esrc.snapshots IS
    'Snapshot definitions: the table, the category it follows, the reducer and the initial state.  Written by esrc.create_snapshot and esrc.drop_snapshot only.';
COMMENT ON COLUMN esrc.snapshots.snapshot IS 'The snapshot table (stream, version, state, updated_at).';
COMMENT ON COLUMN esrc.snapshots.category IS 'The category whose events the snapshot applies.';
COMMENT ON COLUMN esrc.snapshots.reducer IS 'Qualified signature of the reducer (state jsonb, event esrc.event) RETURNS jsonb.';
COMMENT ON COLUMN esrc.snapshots.initial_state IS 'The state before the first event of a stream.';
COMMENT ON COLUMN esrc.snapshots.created_at IS 'When the snapshot was created.';

-- pg_dump dumps the definitions with the database (see docs/snapshots.md,
-- "Backup and restore").
SELECT pg_catalog.pg_extension_config_dump('esrc.snapshots', '');

CREATE FUNCTION esrc.snapshots_catalog() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_snapshots_catalog';
COMMENT ON FUNCTION esrc.snapshots_catalog() IS
    'Trigger function of esrc.snapshots: validates new rows, records or removes the dependencies of snapshot tables, refuses UPDATE and TRUNCATE, and invalidates the cached definitions of every session.';

-- ENABLE ALWAYS: the dependencies and cache invalidation must follow every
-- change of the catalog, on a logical replica too.
CREATE TRIGGER snapshots_check BEFORE INSERT OR UPDATE ON esrc.snapshots
    FOR EACH ROW EXECUTE FUNCTION esrc.snapshots_catalog();
CREATE TRIGGER snapshots_track AFTER INSERT OR DELETE ON esrc.snapshots
    FOR EACH ROW EXECUTE FUNCTION esrc.snapshots_catalog();
CREATE TRIGGER snapshots_no_truncate BEFORE TRUNCATE ON esrc.snapshots
    FOR EACH STATEMENT EXECUTE FUNCTION esrc.snapshots_catalog();
ALTER TABLE esrc.snapshots ENABLE ALWAYS TRIGGER snapshots_check;
ALTER TABLE esrc.snapshots ENABLE ALWAYS TRIGGER snapshots_track;
ALTER TABLE esrc.snapshots ENABLE ALWAYS TRIGGER snapshots_no_truncate;

REVOKE ALL ON esrc.snapshots FROM PUBLIC;
GRANT SELECT ON esrc.snapshots TO esrc_reader;

------------------------------------------------------------------------
-- Applying events: one row trigger on the event log
--
-- It applies only events written by esrc.append/append_batch (it checks
-- that the transaction holds the stream lock), so loading the log any
-- other way -- pg_restore in any order or with -j, COPY, logical
-- replication -- never runs reducers: the snapshot tables are restored or
-- replicated as they are, or rebuilt.  And it is not "ENABLE ALWAYS":
-- with session_replication_role = replica it does not fire at all (see
-- docs/snapshots.md, "Backup, restore and replication").
------------------------------------------------------------------------
CREATE FUNCTION esrc.apply_snapshots() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_apply_snapshots';
COMMENT ON FUNCTION esrc.apply_snapshots() IS
    'Trigger function of esrc.events: applies a new event to every snapshot of its category, in the appending transaction.';

CREATE TRIGGER events_apply_snapshots AFTER INSERT ON esrc.events
    FOR EACH ROW EXECUTE FUNCTION esrc.apply_snapshots();
COMMENT ON TRIGGER events_apply_snapshots ON esrc.events IS
    'Keeps the snapshots of the event''s category current, in the same transaction as the append.';

-- DROP TABLE of a snapshot table (or a DROP ... CASCADE reaching it)
-- removes its definition too.
CREATE FUNCTION esrc.snapshots_sql_drop() RETURNS event_trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_snapshots_sql_drop';
COMMENT ON FUNCTION esrc.snapshots_sql_drop() IS
    'Event trigger function: deletes the definitions of dropped snapshot tables from esrc.snapshots.';

CREATE EVENT TRIGGER esrc_snapshots_sql_drop ON sql_drop
    EXECUTE FUNCTION esrc.snapshots_sql_drop();
COMMENT ON EVENT TRIGGER esrc_snapshots_sql_drop IS
    'Removes the definition of a snapshot whose table was dropped.';

------------------------------------------------------------------------
-- Reducers
------------------------------------------------------------------------
CREATE FUNCTION esrc.merge(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'esrc_merge';
COMMENT ON FUNCTION esrc.merge(jsonb, esrc.event) IS
    'Built-in reducer: state || event.data.';

------------------------------------------------------------------------
-- Managing snapshots
--
-- Not SECURITY DEFINER and no pinned search_path: snapshot names are
-- resolved like table names, in the caller's search_path.  The C code
-- qualifies everything it runs and raises privileges only to write
-- esrc.snapshots.
------------------------------------------------------------------------
CREATE FUNCTION esrc.create_snapshot(
    snapshot text,
    category text,
    reducer regprocedure,
    initial_state jsonb DEFAULT '{}',
    if_not_exists boolean DEFAULT false)
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_create_snapshot';
COMMENT ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean) IS
    'Create a snapshot table kept current by a reducer over the events of one category, fill it from the stored events and return the number of events applied.  With if_not_exists, an existing snapshot of the same definition is a notice (0 returned), one of another definition an error.';

CREATE FUNCTION esrc.rebuild_snapshot(snapshot text) RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_rebuild_snapshot';
COMMENT ON FUNCTION esrc.rebuild_snapshot(text) IS
    'Recompute a snapshot table from the event log and return the number of events applied; blocks the snapshot''s writers (not its readers) until the transaction ends.';

CREATE FUNCTION esrc.drop_snapshot(snapshot text) RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_drop_snapshot';
COMMENT ON FUNCTION esrc.drop_snapshot(text) IS
    'Drop a snapshot: its definition and its table.';

------------------------------------------------------------------------
-- Reading snapshots
------------------------------------------------------------------------
CREATE FUNCTION esrc.load(
    snapshot text,
    stream text,
    OUT state jsonb,
    OUT version bigint)
RETURNS record
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_load';
COMMENT ON FUNCTION esrc.load(text, text) IS
    'The current state and version of a stream in a snapshot; the initial state and version -1 for a stream with no events.  Call it before deciding a command, then append with expected_version = version.';

CREATE FUNCTION esrc.snapshot_at(
    snapshot text,
    stream text,
    version bigint)
RETURNS jsonb
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_snapshot_at';
COMMENT ON FUNCTION esrc.snapshot_at(text, text, bigint) IS
    'The state of a stream as of a version, computed by replaying its events through the snapshot''s reducer; an error for a version beyond the stream''s end.';

------------------------------------------------------------------------
-- Privileges on functions
--
-- create/rebuild/drop are granted to esrc_snapshot_manager only (created
-- in 00_core.sql), a role to grant to the role that runs migrations: a
-- snapshot's reducer runs inside every append to its category, so whoever
-- creates one can make those appends fail.  The C code checks the rest:
-- create makes the table as the caller (its owner), who must execute the
-- reducer and read the log (esrc_reader); rebuild and drop require
-- ownership of the table (membership in its owner role); reducers run as
-- the table's owner in the owner context (src/base/ownerctx.c).
------------------------------------------------------------------------
REVOKE ALL ON FUNCTION esrc.snapshots_catalog(),
                       esrc.apply_snapshots(),
                       esrc.snapshots_sql_drop(),
                       esrc.merge(jsonb, esrc.event),
                       esrc.create_snapshot(text, text, regprocedure, jsonb, boolean),
                       esrc.rebuild_snapshot(text),
                       esrc.drop_snapshot(text),
                       esrc.load(text, text),
                       esrc.snapshot_at(text, text, bigint)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.merge(jsonb, esrc.event),
                          esrc.load(text, text),
                          esrc.snapshot_at(text, text, bigint)
    TO esrc_reader;
GRANT USAGE ON SCHEMA esrc TO esrc_snapshot_manager;
GRANT EXECUTE ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean),
                          esrc.rebuild_snapshot(text),
                          esrc.drop_snapshot(text)
    TO esrc_snapshot_manager;
