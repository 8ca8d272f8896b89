-- Bad input gets a clear error and writes nothing.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
SELECT count(*) AS events_before FROM esrc.events \gset

SELECT esrc.append(NULL, 'T', '{}');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append('', 'T', '{}');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append('-nocategory', 'T', '{}');
SELECT esrc.append(E'tab\there', 'T', '{}');
SELECT esrc.append(repeat('s', 513), 'T', '{}');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append('s-1', NULL, '{}');
SELECT esrc.append('s-1', '', '{}');
SELECT esrc.append('s-1', repeat('t', 257), '{}');
SELECT esrc.append('s-1', E'new\nline', '{}');
SELECT esrc.append('s-1', 'T', NULL);
\echo SQLSTATE :SQLSTATE
SELECT esrc.append('s-1', 'T', '{}', expected_version => -3);
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_batch('s-1', '[{"type": "T", "data": {}}]', -5);

-- oversize payloads: esrc.max_event_size (default 1MB) covers data + metadata
SHOW esrc.max_event_size;
SELECT esrc.append('s-1', 'Big', jsonb_build_object('blob', repeat('x', 1100000)));
\echo SQLSTATE :SQLSTATE
SET esrc.max_event_size = '100B';
SELECT esrc.append('s-1', 'Small', '{"a": 1}', '{"m": "metadata that pushes it over the limit of one hundred bytes, really"}');
SELECT esrc.append_batch('s-1', '[{"type": "T", "data": {}}, {"type": "T", "data": {"k": "this one is far too large for a limit of one hundred bytes, as it goes on and on and on"}}]');
RESET esrc.max_event_size;

-- names at the limits are fine, and unicode is fine
SELECT esrc.append(repeat('s', 512), 'T', '{}');
SELECT esrc.append('user-jürgen@例え.jp', repeat('t', 256), '{"name": "Jürgen ✓"}');
SELECT stream, data FROM esrc.read_stream('user-jürgen@例え.jp');

-- reads check their arguments too
SELECT * FROM esrc.read_stream(NULL);
SELECT * FROM esrc.read_stream('s-1', -1);
SELECT * FROM esrc.read_stream('s-1', 0, 0);
SELECT * FROM esrc.read_stream_backward('s-1', -2);
SELECT * FROM esrc.read_all(-1);
SELECT * FROM esrc.read_all(0, -10);
SELECT * FROM esrc.read_category(NULL);
SELECT * FROM esrc.read_category('user-x');
SELECT * FROM esrc.read_category('');

-- nothing but the two valid appends was written
SELECT count(*) - :events_before AS events_written FROM esrc.events;
