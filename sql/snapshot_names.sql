-- Snapshot names cannot inject SQL: names are parsed as (possibly quoted,
-- possibly schema-qualified) identifiers and quoted wherever esrc builds
-- SQL; a reducer is parsed as a function signature, nothing more.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
CREATE TABLE snapnames_victim (x int);
INSERT INTO snapnames_victim VALUES (1);
SELECT esrc.append('snapnames-1', 'T', '{"a": 1}');

SELECT esrc.create_snapshot('"snapnames""; DROP TABLE snapnames_victim; --"', 'snapnames',
                            'esrc.merge(jsonb, esrc.event)');
SELECT esrc.create_snapshot('"Snap Names"', 'snapnames', 'esrc.merge(jsonb, esrc.event)');
-- unquoted junk is not an identifier
SELECT esrc.create_snapshot('snapnames; DROP TABLE snapnames_victim; --', 'snapnames',
                            'esrc.merge(jsonb, esrc.event)');
-- nor is a reducer with SQL after it
SELECT esrc.create_snapshot('snapnames_x', 'snapnames',
                            'esrc.merge(jsonb, esrc.event); DROP TABLE snapnames_victim');

-- the tables have exactly those names
SELECT relname FROM pg_class WHERE relname LIKE 'snapnames%' OR relname = 'Snap Names' ORDER BY 1;

-- and every function works with them
SELECT esrc.append('snapnames-1', 'T', '{"b": 2}');
SELECT * FROM esrc.load('"snapnames""; DROP TABLE snapnames_victim; --"', 'snapnames-1');
SELECT esrc.snapshot_at('"Snap Names"', 'snapnames-1', 0);
SELECT esrc.rebuild_snapshot('"snapnames""; DROP TABLE snapnames_victim; --"');
SELECT esrc.drop_snapshot('"snapnames""; DROP TABLE snapnames_victim; --"');
SELECT esrc.drop_snapshot('"Snap Names"');

-- the victim is still there
SELECT x FROM snapnames_victim;
DROP TABLE snapnames_victim;
