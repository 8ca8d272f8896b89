-- W3C trace context: esrc.traceparent / esrc.tracestate are copied into
-- the metadata of events that have no traceparent; malformed values are
-- refused by the settings (22023).
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
SHOW esrc.traceparent;
SHOW esrc.tracestate;

-- malformed settings: refused, the old value stays
SET esrc.traceparent = 'nonsense';
\echo SQLSTATE :SQLSTATE
SET esrc.traceparent = '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01';
SET esrc.traceparent = '00-00000000000000000000000000000000-00f067aa0ba902b7-01';
SET esrc.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01';
SET esrc.traceparent = 'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
SET esrc.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra';
SET esrc.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0';
SET esrc.tracestate = E'a=b\nc=d';
SELECT set_config('esrc.tracestate', repeat('x', 513), false);
\echo SQLSTATE :SQLSTATE
SHOW esrc.traceparent;
-- a later version may carry more fields
SET esrc.traceparent = '01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future';
RESET esrc.traceparent;

-- nothing set: metadata as given
SELECT esrc.append('trace-1', 'Plain', '{}');
SELECT esrc.append('trace-1', 'Plain', '{}', '{"user": "ann"}');

BEGIN;
SET LOCAL esrc.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
SET LOCAL esrc.tracestate = 'congo=t61rcWkgMzE';
SELECT esrc.append('trace-1', 'NullMeta', '{}');
SELECT esrc.append('trace-1', 'ObjectMeta', '{}', '{"user": "ann"}');
SELECT esrc.append('trace-1', 'OwnTrace', '{}',
    '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}');
SELECT esrc.append('trace-1', 'ArrayMeta', '{}', '[1, 2]');
SELECT esrc.append_batch('trace-1', '[{"type": "B1", "data": {}},
    {"type": "B2", "data": {}, "metadata": {"k": 1}},
    {"type": "B3", "data": {}, "metadata": {"traceparent": "bad"}}]');
COMMIT;
-- SET LOCAL ended with the transaction
SELECT esrc.append('trace-1', 'After', '{}');

SELECT version, type, metadata FROM esrc.read_stream('trace-1') ORDER BY version;
