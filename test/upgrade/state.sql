-- test/upgrade/state.sql: what a dump and restore must carry over, as
-- text that does not depend on the major or the OIDs (run-55-cross-major).
SET TimeZone = 'UTC';
SELECT 'events ' || count(*) || ' ' || md5(string_agg(e::text, E'\n' ORDER BY position)) FROM esrc.events e;
SELECT 'max position ' || max(position) FROM esrc.events;
SELECT 'stream ' || stream || ' ' || max(version) FROM esrc.events GROUP BY stream ORDER BY stream;
SELECT 'snapshot definition ' || snapshot::text || ' ' || category || ' ' || reducer || ' ' || initial_state::text
  FROM esrc.snapshots ORDER BY 1;
SELECT 'snapshot rows ' || count(*) || ' ' || md5(string_agg(concat_ws('|', stream, version, state::text, updated_at), E'\n' ORDER BY stream))
  FROM public.users;
SELECT 'skips ' || count(*) FROM esrc.forwarder_skips;
