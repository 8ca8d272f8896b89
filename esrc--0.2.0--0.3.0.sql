-- esrc 0.2.0 -> 0.3.0 upgrade script.
-- Everything 0.3.0 adds to or changes in the SQL surface, in the order the
-- install script's parts (src/sql/*.sql) define it; test/run-15-upgrade.sh
-- checks that an upgraded database describes exactly what a fresh install does.
\echo Use "ALTER EXTENSION esrc UPDATE TO '0.3.0'" to load this file. \quit
