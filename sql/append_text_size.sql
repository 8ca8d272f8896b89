-- The size of an event as JSON text is bounded at append time: a small
-- jsonb value can expand enormously as text (a number 1e131071 is ~10
-- bytes stored, 131,072 characters printed), and an event nobody can
-- print wedges every reader that prints it and the Kafka forwarder.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;

-- ~100 kB stored, ~1.2 GB as text: refused, naming the limit
SELECT pg_column_size(('[' || repeat('1e131071, ', 8999) || '1e131071]')::jsonb) < 200000 AS small_stored;
SELECT esrc.append('textsize-1', 'Wedge', ('[' || repeat('1e131071, ', 8999) || '1e131071]')::jsonb);
SELECT esrc.append('textsize-1', 'Wedge', '{}', jsonb_build_object('m', ('[' || repeat('1e131071, ', 10) || '1]')::jsonb));
SELECT esrc.append_batch('textsize-1', jsonb_build_array(
    jsonb_build_object('type', 'Ok', 'data', '{}'::jsonb),
    jsonb_build_object('type', 'Wedge', 'data', ('[' || repeat('1e131071, ', 10) || '1]')::jsonb)));
SELECT count(*) FROM esrc.events WHERE stream = 'textsize-1';

-- the computed text size is exact: with esrc.max_event_size at the
-- octet length of data::text plus metadata::text the text check passes,
-- one byte less and it refuses (the stored-size check may refuse too,
-- with its own detail)
CREATE FUNCTION pg_temp.refused(d jsonb, m jsonb, lim int) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    detail text;
BEGIN
    PERFORM set_config('esrc.max_event_size', lim::text, true);
    PERFORM esrc.append('textsize-2', 'T', d, m);
    RETURN 'ok';
EXCEPTION WHEN program_limit_exceeded THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RETURN CASE WHEN detail LIKE '%as JSON text%' THEN 'text' ELSE 'stored' END;
END
$$;
CREATE TEMP TABLE corpus (d jsonb, m jsonb);
INSERT INTO corpus (d) VALUES
    ('0'), ('-0'), ('0.0'), ('-0.000'), ('1'), ('-1'), ('9'), ('10'), ('99'),
    ('100'), ('999'), ('1000'), ('9999'), ('10000'), ('123456789'), ('1e-5'),
    ('0.00001'), ('-0.5'), ('1.5e300'), ('-1e300'), ('1e131071'), ('-1e131071'),
    ('1e-16383'), ('12345.6789012345'), ('-98765432109876543210.5'),
    ('true'), ('false'), ('null'), ('"x"'), ('""'),
    ('"tab\tnl\nret\rff\fbs\bq\"sl\\ctl\u0001\u001f é ☕ \u00e9"'),
    ('[]'), ('{}'), ('[[]]'), ('[{}]'), ('{"a": {}}'), ('{"a": []}'),
    ('[1, [2, [3, {"k": [4, {"l": null}]}]], "s", true]'),
    ('{"k\"ey": {"in\nner": [1.50, -2e-3, {"": ""}]}, "b": [[], [{}], 1e40]}'),
    ('{"items": [1, 2, 3], "nested": {"a": null}}');
-- random numbers of many weights and scales, in objects and arrays
INSERT INTO corpus (d)
SELECT jsonb_build_object('n', round((random()::numeric - 0.5) * 10::numeric ^ (i % 40), i % 17),
                          'a', jsonb_build_array(round(random()::numeric, i % 23), -i, i * 1e-3))
  FROM generate_series(1, 150) i;
-- with metadata
INSERT INTO corpus (d, m)
SELECT d, jsonb_build_object('meta', d) FROM corpus WHERE d::text LIKE '%e%' OR d::text LIKE '%"%';
SELECT count(*) > 150 AS values,
       count(*) FILTER (WHERE pg_temp.refused(d, m, len - 1) <> 'text') AS not_refused_one_below,
       count(*) FILTER (WHERE pg_temp.refused(d, m, len) = 'text') AS refused_at_length
  FROM (SELECT d, m, octet_length(d::text) + coalesce(octet_length(m::text), 0) AS len
          FROM corpus) c
 WHERE len > 1;
RESET esrc.max_event_size;

-- the default leaves room below librdkafka's message.max.bytes (1,000,000)
SHOW esrc.max_event_size;
SELECT setting::int + 4096 < 1000000 AS below_producer_limit
  FROM pg_settings WHERE name = 'esrc.max_event_size';
