-- The bound cache of the stream rules (src/rulebound.c): a read keeps the
-- first visible version of each stream with a max_count or max_age rule,
-- and a later read reuses it unless the stream got an append or the rules
-- changed.  Counted here by the scans of the (stream, version) index in
-- each transaction: a read of the category is one scan of another index,
-- and each bound it computes is one scan of this one (a transaction's
-- counts are kept until it ends, so each measure is one transaction).
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
SELECT count(*) FROM (SELECT esrc.append('bound-' || s, 'E', jsonb_build_object('i', g))
                      FROM generate_series(0, 4) g, generate_series(1, 6) s ORDER BY g, s) a;
SELECT count(*) FROM (SELECT esrc.set_stream_rules('bound-' || s, max_count => 2, reason => 'keep 2')
                      FROM generate_series(1, 3) s) a;
SELECT esrc.set_stream_rules('bound-4', max_age => '1 hour', reason => 'recent');
SELECT esrc.set_stream_rules('bound-5', truncate_before => 3, reason => 'old');
CREATE FUNCTION stream_probes() RETURNS bigint LANGUAGE sql AS
    $$SELECT pg_stat_get_xact_numscans('esrc.events_stream_version_key'::regclass)$$;
CREATE FUNCTION stream_probes(before bigint) RETURNS bigint LANGUAGE sql AS
    $$SELECT stream_probes() - before$$;
CREATE FUNCTION bound_category() RETURNS text LANGUAGE sql AS
    $$SELECT string_agg(substr(stream, 7) || ':' || version, ',' ORDER BY position)
      FROM esrc.read_category('bound')$$;

-- the first read computes the bounds of bound-1..4 (bound-5 needs none)
BEGIN;
SELECT stream_probes() AS p0 \gset
SELECT bound_category(), stream_probes(:p0);
COMMIT;
-- the next reads reuse them, stream reads too
BEGIN;
SELECT stream_probes() AS p0 \gset
SELECT bound_category(), stream_probes(:p0);
SELECT string_agg(version::text, ',') FROM esrc.read_stream('bound-2');
SELECT string_agg(version::text, ',') FROM esrc.read_stream_backward('bound-4');
SELECT stream_probes(:p0) AS probes_of_two_stream_reads;
COMMIT;
-- an append to bound-2: the next read computes its bound again, once
SELECT esrc.append('bound-2', 'E', '{}');
BEGIN;
SELECT stream_probes() AS p0 \gset
SELECT bound_category(), stream_probes(:p0);
SELECT bound_category(), stream_probes(:p0) AS probes_after_a_second_read;
COMMIT;
-- an append in this transaction: bound-3's bound is computed by every read
-- until the transaction ends (its slot is busy), then once more
BEGIN;
SELECT esrc.append('bound-3', 'E', '{}');
SELECT stream_probes() AS p0 \gset
SELECT string_agg(version::text, ',') FROM esrc.read_stream('bound-3');
SELECT string_agg(version::text, ',') FROM esrc.read_stream('bound-3');
SELECT stream_probes(:p0) AS probes_of_two_reads_in_flight;
COMMIT;
BEGIN;
SELECT stream_probes() AS p0 \gset
SELECT bound_category(), stream_probes(:p0);
COMMIT;
-- a change of the rules: every bound is computed again
SELECT esrc.set_stream_rules('bound-1', max_count => 3, reason => 'keep 3');
BEGIN;
SELECT stream_probes() AS p0 \gset
SELECT bound_category(), stream_probes(:p0);
COMMIT;
-- REPEATABLE READ: a stream read uses the transaction's snapshot, older
-- than the marks it would check, so it computes its bound every time;
-- read_category takes a new snapshot and still reuses them
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT stream_probes() AS p0 \gset
SELECT string_agg(version::text, ',') FROM esrc.read_stream('bound-1');
SELECT string_agg(version::text, ',') FROM esrc.read_stream('bound-1');
SELECT stream_probes(:p0) AS probes_of_two_repeatable_reads;
SELECT bound_category(), stream_probes(:p0);
COMMIT;
-- esrc's own events move the window too: erase_stream appends the
-- stream's tombstone (esrc.erased) at the next version, not by esrc.append
SELECT string_agg(version::text, ',') FROM esrc.read_stream('bound-3');
SELECT esrc.erase_stream('bound-3', 'test') AS erased;
SELECT string_agg(version || ':' || type, ',') FROM esrc.read_stream('bound-3');
DROP FUNCTION stream_probes(bigint);
DROP FUNCTION stream_probes();
DROP FUNCTION bound_category();
