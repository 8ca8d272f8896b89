-- esrc 0.2.0 -> 0.3.0 upgrade script.
-- Everything 0.3.0 adds to or changes in the SQL surface, in the order the
-- install script's parts (src/sql/*.sql) define it; test/run-15-upgrade.sh
-- checks that an upgraded database describes exactly what a fresh install does.
\echo Use "ALTER EXTENSION esrc UPDATE TO '0.3.0'" to load this file. \quit

-- Reads on hot standbys (issue 27, item 3): the horizon the primary publishes.
-- The primary's read horizon for its hot standbys (src/log/standby.c):
-- one row, rewritten by the horizon publisher (a background worker per
-- database that appends) when the in-flight registry changed; a standby
-- computes read_all's, read_category's and safe_position's horizons from
-- the newest row it has replayed.  Not for applications to write.
CREATE TABLE esrc.standby_horizon (
    singleton       boolean     NOT NULL DEFAULT true CHECK (singleton),
    published_at    timestamptz NOT NULL,
    last_position   bigint      NOT NULL,
    horizon         bigint      NOT NULL,
    category_hashes bigint[]    NOT NULL,
    category_bounds bigint[]    NOT NULL,
    overflow_bound  bigint,
    CONSTRAINT standby_horizon_pkey PRIMARY KEY (singleton)
);
INSERT INTO esrc.standby_horizon
    VALUES (true, pg_catalog.now(), 0, 0, '{}', '{}', NULL);
COMMENT ON TABLE esrc.standby_horizon IS
    'The horizon the primary publishes for reads on hot standbys: last(position_seq), the global horizon, the lowest bound per category hash of appends in flight, and the lowest overflow bound.  Written by the horizon publisher only.';
REVOKE ALL ON esrc.standby_horizon FROM PUBLIC;
GRANT SELECT ON esrc.standby_horizon TO esrc_reader;
