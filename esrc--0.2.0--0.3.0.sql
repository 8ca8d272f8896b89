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
