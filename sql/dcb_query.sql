-- Dynamic consistency boundaries (docs/dcb.md): tags on events, their
-- checks, reads by query (index lookups, proven with EXPLAIN), the
-- horizon, and conditional appends.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
\set VERBOSITY default
SELECT esrc.safe_position() AS p0 \gset
-- errors whose text names positions, with the numbers masked
CREATE FUNCTION pg_temp.try(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    m text;
    d text;
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN others THEN
    GET STACKED DIAGNOSTICS m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ': ' || regexp_replace(m || ' / ' || d, '[0-9]+', 'N', 'g');
END
$$;

-- tags: esrc.append's argument and append_batch's "tags", stored sorted
SELECT esrc.append('dcbcourse-c1', 'CourseDefined', '{"capacity": 2}',
                   tags => ARRAY['course:c1']);
SELECT esrc.append_batch('dcbstudent-s1', '[
  {"type": "StudentSubscribed", "data": {"course": "c1"}, "tags": ["student:s1", "course:c1"]},
  {"type": "Untagged", "data": {}},
  {"type": "Untagged", "data": {}, "tags": []},
  {"type": "Untagged", "data": {}, "tags": null}]');
SELECT stream, version, type, tags FROM esrc.events
WHERE position > :p0 ORDER BY position;
-- esrc.append stores an array that is already sorted (byte order), from
-- subscript 1, without duplicates as given, and sorts any other: what is
-- stored is the same either way
SELECT esrc.append('dcbsort-1', 'T', '{}', tags => ARRAY['B', 'a', 'ab']);
SELECT esrc.append('dcbsort-1', 'T', '{}', tags => ARRAY['ab', 'a', 'B']);
SELECT esrc.append('dcbsort-1', 'T', '{}', tags => '[0:2]={B,a,ab}'::text[]);
SELECT esrc.append('dcbsort-1', 'T', '{}', tags => '[2:3]={z,y}'::text[]);
SELECT esrc.append('dcbsort-1', 'T', '{}', tags => ARRAY[]::text[]);
SELECT version, tags, array_lower(tags, 1) AS lower FROM esrc.events
WHERE stream = 'dcbsort-1' ORDER BY version;
SELECT pg_temp.try($$SELECT esrc.append('dcbsort-1', 'T', '{}', tags => ARRAY['b', 'a', 'b'])$$);
SELECT pg_temp.try($$SELECT esrc.append('dcbsort-1', 'T', '{}', tags => ARRAY['a', 'b', 'b'])$$);

-- bad tags: a clear error each, nothing written
SELECT esrc.append('dcbbad-1', 'T', '{}', tags => ARRAY['']);
\echo SQLSTATE :SQLSTATE
SELECT esrc.append('dcbbad-1', 'T', '{}', tags => ARRAY['a', NULL]);
\echo SQLSTATE :SQLSTATE
SELECT esrc.append('dcbbad-1', 'T', '{}', tags => ARRAY['a', 'a']);
\echo SQLSTATE :SQLSTATE
SELECT esrc.append('dcbbad-1', 'T', '{}', tags => ARRAY[E'a\tb']);
\echo SQLSTATE :SQLSTATE
SELECT esrc.append('dcbbad-1', 'T', '{}', tags => ARRAY[repeat('x', 257)]);
\echo SQLSTATE :SQLSTATE
SELECT esrc.append('dcbbad-1', 'T', '{}',
                   tags => (SELECT array_agg(i::text) FROM generate_series(1, 33) i));
\echo SQLSTATE :SQLSTATE
SELECT esrc.append('dcbbad-1', 'T', '{}', tags => ARRAY[['a'], ['b']]);
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_batch('dcbbad-1', '[{"type": "T", "data": {}, "tags": "a"}]');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_batch('dcbbad-1', '[{"type": "T", "data": {}, "tags": ["a", 1]}]');
\echo SQLSTATE :SQLSTATE
-- tags count towards esrc.max_event_size as JSON text (what the forwarder
-- sends in the header ce_esrctags): {} is 2 bytes, ["ab","c"] 10
SET esrc.max_event_size = 11;
SELECT esrc.append('dcbbad-1', 'T', '{}', tags => ARRAY['ab', 'c']);
\echo SQLSTATE :SQLSTATE
SET esrc.max_event_size = 12;
SELECT esrc.append('dcbsize-1', 'T', '{}', tags => ARRAY['ab', 'c']);
RESET esrc.max_event_size;
SELECT esrc.stream_version('dcbbad-1') AS nothing_written;

-- reads by query: items OR'd, types OR'd within an item, every tag required
SELECT stream, type, tags FROM esrc.read_query('{"items": [{"tags": ["course:c1"]}]}', :p0);
SELECT stream, type, tags FROM esrc.read_query(
  '{"items": [{"types": ["StudentSubscribed"], "tags": ["course:c1", "student:s1"]}]}', :p0);
SELECT stream, type, tags FROM esrc.read_query(
  '{"items": [{"types": ["CourseDefined"], "tags": ["student:s1"]}]}', :p0);
SELECT count(*) FROM esrc.read_query(
  '{"items": [{"types": ["CourseDefined"]}, {"types": ["Untagged"]}]}', :p0);
SELECT count(*) FROM esrc.read_query(
  '{"items": [{"types": ["CourseDefined"]}, {"types": ["Untagged"]}]}', :p0, 2);
-- never above up_to; up_to above the horizon is refused
SELECT count(*) FROM esrc.read_query('{"items": [{"tags": ["course:c1"]}]}', :p0, NULL, :p0 + 1);
SELECT pg_temp.try($$SELECT count(*) FROM esrc.read_query('{"items": [{"tags": ["course:c1"]}]}', 0, NULL,
                                     esrc.safe_position() + 1)$$);

-- bad queries
SELECT * FROM esrc.read_query(NULL);
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_query('[]');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_query('{"itemz": []}');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_query('{"items": []}');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_query('{"items": [{}]}');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_query('{"items": [{"types": [], "tags": []}]}');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_query('{"items": [{"types": "A"}]}');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_query('{"items": [{"tags": [1]}]}');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_query('{"items": [{"tags": ["a"], "x": 1}]}');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_query('{"items": [{"tags": [""]}]}');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_query(jsonb_build_object('items',
  (SELECT jsonb_agg(jsonb_build_object('tags', jsonb_build_array(i::text))) FROM generate_series(1, 65) i)));
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_query('{"items": [{"tags": ["a"]}]}', -1);
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_query('{"items": [{"tags": ["a"]}]}', 0, -1);
\echo SQLSTATE :SQLSTATE
-- quotes and backslashes in tags reach the statement as data
SELECT esrc.append('dcbquote-1', 'Q', '{}', tags => ARRAY[E'a"b\\c''d']);
SELECT stream, tags FROM esrc.read_query(jsonb_build_object('items',
  jsonb_build_array(jsonb_build_object('tags', jsonb_build_array(E'a"b\\c''d')))), :p0);

-- reads by tag are index lookups: 3000 tagged events, one rare tag
SELECT count(*) FROM (
  SELECT esrc.append_batch('dcbbulk-' || b, (
    SELECT jsonb_agg(jsonb_build_object('type', 'Bulk', 'data', '{}'::jsonb,
                     'tags', jsonb_build_array('bulk', 'bucket:' || (i % 10))))
    FROM generate_series(1, 100) i))
  FROM generate_series(1, 30) b) s;
SELECT esrc.append('dcbrare-1', 'Rare', '{}', tags => ARRAY['rare:1', 'bulk']);
ANALYZE esrc.events;
-- as (auto)vacuum leaves it: GIN's pending list of recent entries merged
-- into the index (on a log this small the planner would otherwise weigh a
-- scan of its few pages against the list)
SELECT gin_clean_pending_list('esrc.events_tags_idx') >= 0 AS merged;
SELECT line FROM esrc.explain_query('{"items": [{"tags": ["rare:1"]}]}') line
WHERE line ~ 'Index Scan|Seq Scan';
SELECT line FROM esrc.explain_query(
  '{"items": [{"types": ["Rare"], "tags": ["rare:1"]}, {"tags": ["course:c1", "student:s1"]}]}') line
WHERE line ~ 'Index Scan|Seq Scan|BitmapOr';
-- a query with types only reads the positions after "after" (no index on type)
SELECT line FROM esrc.explain_query('{"items": [{"types": ["Rare"]}]}') line
WHERE line ~ 'Index Scan|Seq Scan';
SELECT stream, type FROM esrc.read_query('{"items": [{"tags": ["rare:1"]}]}');

-- conditional appends: the decision's after is the horizon of its read
SELECT esrc.safe_position() AS h \gset
SELECT esrc.append_if('dcbstudent-s2',
  '[{"type": "StudentSubscribed", "data": {"course": "c1"}, "tags": ["student:s2", "course:c1"]}]',
  jsonb_build_object('fail_if_events_match',
    '{"items": [{"types": ["StudentSubscribed"], "tags": ["course:c1"]}]}'::jsonb, 'after', :h));
-- the same decision again, from the same read: 40001 naming the positions
SELECT pg_temp.try(format($$SELECT esrc.append_if('dcbstudent-s3',
  '[{"type": "StudentSubscribed", "data": {"course": "c1"}, "tags": ["student:s3", "course:c1"]}]',
  jsonb_build_object('fail_if_events_match',
    '{"items": [{"types": ["StudentSubscribed"], "tags": ["course:c1"]}]}'::jsonb, 'after', %s))$$, :h));
SELECT position = :h + 1 AS conflict_is_the_first_event_after
FROM esrc.read_query('{"items": [{"types": ["StudentSubscribed"], "tags": ["course:c1"]}]}', :h);
SELECT esrc.stream_version('dcbstudent-s3') AS nothing_written;
-- an "after" with more than 1,000 positions since (the 3,000 bulk events):
-- the check runs the query's statement instead of scanning the positions
SELECT pg_temp.try(format($$SELECT esrc.append_if('dcbstudent-s5',
  '[{"type": "StudentSubscribed", "data": {"course": "c1"}, "tags": ["student:s5", "course:c1"]}]',
  jsonb_build_object('fail_if_events_match',
    '{"items": [{"types": ["StudentSubscribed"], "tags": ["course:c1"]}]}'::jsonb, 'after', %s))$$, :p0));
SELECT pg_temp.try(format($$SELECT esrc.append_if('dcbstudent-s5',
  '[{"type": "StudentSubscribed", "data": {"course": "c5"}, "tags": ["student:s5", "course:c5"]}]',
  jsonb_build_object('fail_if_events_match',
    '{"items": [{"types": ["StudentSubscribed"], "tags": ["course:c5"]}, {"types": ["Rare"]}]}'::jsonb, 'after', %s))$$, :p0));
SELECT pg_temp.try(format($$SELECT esrc.append_if('dcbstudent-s5',
  '[{"type": "StudentSubscribed", "data": {"course": "c5"}, "tags": ["student:s5", "course:c5"]}]',
  jsonb_build_object('fail_if_events_match',
    '{"items": [{"types": ["StudentSubscribed"], "tags": ["course:c5"]}]}'::jsonb, 'after', %s))$$, :p0));
-- a condition that the new event does not touch
SELECT esrc.append_if('dcbstudent-s3',
  '[{"type": "StudentSubscribed", "data": {"course": "c2"}, "tags": ["student:s3", "course:c2"]}]',
  jsonb_build_object('fail_if_events_match',
    '{"items": [{"types": ["StudentSubscribed"], "tags": ["course:c2"]}]}'::jsonb, 'after', :h));
-- idempotent by event ids: the retry of a written append answers its version
SELECT esrc.safe_position() AS h2 \gset
SELECT esrc.append_if('dcbstudent-s4',
  '[{"type": "StudentSubscribed", "data": {}, "tags": ["student:s4", "course:c4"], "id": "2b7f3c1e-0000-4000-8000-000000000028"}]',
  jsonb_build_object('fail_if_events_match', '{"items": [{"tags": ["course:c4"]}]}'::jsonb, 'after', :h2));
SELECT esrc.append_if('dcbstudent-s4',
  '[{"type": "StudentSubscribed", "data": {}, "tags": ["student:s4", "course:c4"], "id": "2b7f3c1e-0000-4000-8000-000000000028"}]',
  jsonb_build_object('fail_if_events_match', '{"items": [{"tags": ["course:c4"]}]}'::jsonb, 'after', :h2));
SELECT count(*) FROM esrc.read_stream('dcbstudent-s4');
-- expected_version is checked as by append_batch
SELECT esrc.append_if('dcbstudent-s4', '[{"type": "X", "data": {}}]',
  '{"fail_if_events_match": {"items": [{"tags": ["none"]}]}, "after": 0}', 5);
\echo SQLSTATE :SQLSTATE

-- bad conditions: a clear error each, nothing written
SELECT esrc.append_if('dcbbad-2', '[{"type": "T", "data": {}}]', NULL);
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_if('dcbbad-2', '[{"type": "T", "data": {}}]', '[]');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_if('dcbbad-2', '[{"type": "T", "data": {}}]', '{"after": 0}');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_if('dcbbad-2', '[{"type": "T", "data": {}}]',
                      '{"fail_if_events_match": {"items": [{"tags": ["a"]}]}}');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_if('dcbbad-2', '[{"type": "T", "data": {}}]',
                      '{"fail_if_events_match": {"items": [{"tags": ["a"]}]}, "after": "0"}');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_if('dcbbad-2', '[{"type": "T", "data": {}}]',
                      '{"fail_if_events_match": {"items": [{"tags": ["a"]}]}, "after": 1.5}');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_if('dcbbad-2', '[{"type": "T", "data": {}}]',
                      '{"fail_if_events_match": {"items": [{"tags": ["a"]}]}, "after": 0, "before": 1}');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_if('dcbbad-2', '[{"type": "T", "data": {}}]',
                      '{"fail_if_events_match": {"items": [{"tags": ["a"]}]}, "after": -1}');
\echo SQLSTATE :SQLSTATE
SELECT pg_temp.try($$SELECT esrc.append_if('dcbbad-2', '[{"type": "T", "data": {}}]',
  jsonb_build_object('fail_if_events_match', '{"items": [{"tags": ["a"]}]}'::jsonb,
                     'after', esrc.safe_position() + 1))$$);
SELECT esrc.append_if('dcbbad-2', '[{"type": "T", "data": {}}]',
                      '{"fail_if_events_match": {"items": []}, "after": 0}');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_if('dcbbad-2', '[{"type": "esrc.deleted", "data": {}}]',
                      '{"fail_if_events_match": {"items": [{"tags": ["a"]}]}, "after": 0}');
\echo SQLSTATE :SQLSTATE
-- erased and permanently deleted streams take no conditional appends
-- either (as append_batch: 55000); the events of an erased stream keep
-- their tags (stream names and tags are not personal data) and still count
-- for conditions; a deleted stream's hidden events count too
SELECT esrc.append('dcbgone-1', 'T', '{"secret": 1}', tags => ARRAY['gone:1']);
SELECT esrc.append('dcberased-1', 'T', '{"secret": 1}', tags => ARRAY['gone:2']);
SELECT esrc.delete_stream('dcbgone-1', 'test', hard => true) AS hidden;
SELECT esrc.erase_stream('dcberased-1', 'test') AS erased;
SELECT pg_temp.try($$SELECT esrc.append_if('dcbgone-1', '[{"type": "T", "data": {}}]',
                      '{"fail_if_events_match": {"items": [{"tags": ["none"]}]}, "after": 0}')$$);
SELECT pg_temp.try($$SELECT esrc.append_if('dcberased-1', '[{"type": "T", "data": {}}]',
                      '{"fail_if_events_match": {"items": [{"tags": ["none"]}]}, "after": 0}')$$);
SELECT version, type, data, tags FROM esrc.events WHERE stream = 'dcberased-1' ORDER BY version;
SELECT pg_temp.try($$SELECT esrc.append_if('dcbother-1', '[{"type": "T", "data": {}}]',
                      '{"fail_if_events_match": {"items": [{"tags": ["gone:1"]}, {"tags": ["gone:2"]}]}, "after": 0}')$$);
SELECT esrc.stream_version('dcbbad-2') AS nothing_written;

-- esrc.event carries the tags: every read, esrc.poll, and the reducers of
-- snapshots (applied at append, replayed by snapshot_at, rebuilt)
SELECT version, type, tags FROM esrc.read_stream('dcbstudent-s1', 0, 1);
SELECT version, tags FROM esrc.read_stream_backward('dcbstudent-s1', 0);
SELECT stream, tags FROM esrc.read_category('dcbcourse', :p0);
SELECT stream, tags FROM esrc.read_all(:p0, 2);
SELECT esrc.create_subscription('dcbtags', ARRAY['dcbcourse']);
SELECT stream, tags FROM esrc.poll('dcbtags', 'm1');
SELECT esrc.drop_subscription('dcbtags');
-- a subscription's tag filter: only events that carry every one of its tags
SELECT esrc.create_subscription('dcbtagged', ARRAY['dcbstudent', 'dcbcourse'], start => :'p0',
                                tags => ARRAY['course:c1', 'student:s1']);
SELECT stream, tags FROM esrc.poll('dcbtagged', 'm1');
SELECT tags FROM esrc.subscriptions WHERE name = 'dcbtagged';
SELECT esrc.drop_subscription('dcbtagged');
SELECT esrc.create_subscription('dcbbad', tags => ARRAY['']);
\echo SQLSTATE :SQLSTATE
SELECT esrc.create_subscription('dcbbad', tags => ARRAY[]::text[]);
\echo SQLSTATE :SQLSTATE
CREATE FUNCTION public.dcb_tag_reducer(state jsonb, e esrc.event) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT state || jsonb_build_object(e.version::text, to_jsonb(e.tags))
$$;
SELECT esrc.create_snapshot('public.dcb_tag_snap', 'dcbtagsnap',
                            'public.dcb_tag_reducer(jsonb, esrc.event)') AS applied;
SELECT esrc.append('dcbtagsnap-1', 'T', '{}', tags => ARRAY['t:1', 'a:0']);
SELECT esrc.append('dcbtagsnap-1', 'T', '{}');
SELECT state FROM esrc.load('public.dcb_tag_snap', 'dcbtagsnap-1');
SELECT esrc.snapshot_at('public.dcb_tag_snap', 'dcbtagsnap-1', 1);
SELECT esrc.rebuild_snapshot('public.dcb_tag_snap') AS applied;
SELECT state FROM esrc.load('public.dcb_tag_snap', 'dcbtagsnap-1');
SELECT esrc.drop_snapshot('public.dcb_tag_snap');
DROP FUNCTION public.dcb_tag_reducer(jsonb, esrc.event);

-- read_category's filters: event types, and one member of a consumer
-- group (the streams of partition p of n, as esrc.stream_partition says)
SELECT count(*) FROM (SELECT esrc.append('dcbrc-' || i, CASE WHEN i % 3 = 0 THEN 'A' ELSE 'B' END, '{}')
                      FROM generate_series(1, 30) i) s;
SELECT count(*), string_agg(DISTINCT type, ',') FROM esrc.read_category('dcbrc', 0, 100, ARRAY['A']);
SELECT count(*) FROM esrc.read_category('dcbrc', 0, 2, ARRAY['A']);
SELECT sum(n) AS all_events, bool_and(only_p) AS each_member_its_streams
FROM (SELECT p, count(*) AS n, bool_and(esrc.stream_partition(stream, 3) = p) AS only_p
      FROM generate_series(0, 2) p, esrc.read_category('dcbrc', 0, 100, NULL, p, 3) e GROUP BY p) s;
SELECT count(*) = (SELECT count(*) FROM esrc.read_category('dcbrc', 0, 100) e
                   WHERE type = 'A' AND esrc.stream_partition(stream, 3) = 1) AS both_filters
FROM esrc.read_category('dcbrc', 0, 100, ARRAY['A'], 1, 3);
SELECT * FROM esrc.read_category('dcbrc', 0, 100, ARRAY[]::text[]);
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_category('dcbrc', 0, 100, ARRAY[NULL]);
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_category('dcbrc', 0, 100, NULL, 1);
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_category('dcbrc', 0, 100, NULL, 3, 3);
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.read_category('dcbrc', 0, 100, NULL, 0, 0);
\echo SQLSTATE :SQLSTATE

-- a reader may read by query; a writer may append_if; PUBLIC neither
SELECT has_function_privilege('esrc_reader', 'esrc.read_query(jsonb, bigint, int, bigint)', 'EXECUTE') AS reader_reads,
       has_function_privilege('esrc_writer', 'esrc.append_if(text, jsonb, jsonb, bigint)', 'EXECUTE') AS writer_appends,
       has_function_privilege('esrc_reader', 'esrc.append_if(text, jsonb, jsonb, bigint)', 'EXECUTE') AS reader_appends;
