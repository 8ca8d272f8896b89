-- Reads: streams forward and backward, categories and everything in
-- global position order, the streams view.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
SELECT last_value AS p0 FROM esrc.position_seq \gset

SELECT esrc.append('book-1', 'Added', '{"title": "A"}');
SELECT esrc.append('shelf-1', 'Built', '{}');
SELECT esrc.append('book-1', 'Lent', '{"to": "ann"}');
SELECT esrc.append('book-2', 'Added', '{"title": "B"}');
SELECT esrc.append('bookish-1', 'Other', '{}');
SELECT esrc.append('book-1', 'Returned', '{}');
SELECT esrc.append('book', 'NoDash', '{}');

-- forward, from a version, with a limit
SELECT version, type FROM esrc.read_stream('book-1');
SELECT version, type FROM esrc.read_stream('book-1', 1);
SELECT version, type FROM esrc.read_stream('book-1', 0, 2);
SELECT version, type FROM esrc.read_stream('book-1', 10);
SELECT count(*) FROM esrc.read_stream('no-such-stream');
-- backward: newest first
SELECT version, type FROM esrc.read_stream_backward('book-1');
SELECT version, type FROM esrc.read_stream_backward('book-1', 1);
SELECT version, type FROM esrc.read_stream_backward('book-1', NULL, 1);

-- everything after a position, in position order
SELECT position - :p0 AS pos, stream, version, type FROM esrc.read_all(:p0);
SELECT position - :p0 AS pos, stream FROM esrc.read_all(:p0 + 2, 3);
-- a category is the stream name before the first '-': book-1, book-2 and
-- the stream "book", not bookish-1
SELECT position - :p0 AS pos, stream, version FROM esrc.read_category('book', :p0);
SELECT position - :p0 AS pos, stream FROM esrc.read_category('book', :p0 + 3, 1);
SELECT count(*) FROM esrc.read_category('nothing');

-- the horizon: nothing is in flight here, so it is the last position
SELECT esrc.safe_position() = (SELECT last_value FROM esrc.position_seq) AS horizon_at_end;

-- who holds the horizon back: nobody now, this session inside a transaction
-- that appended
SELECT count(*) AS holders FROM esrc.inflight_appends;
BEGIN;
SELECT esrc.append('book-3', 'Added', '{}');
SELECT pid = pg_backend_pid() AS me, min_position = (SELECT last_value FROM esrc.position_seq) AS my_position,
       state, xact_age >= interval '0' AS has_age
FROM esrc.inflight_appends;
SELECT esrc.safe_position() < (SELECT last_value FROM esrc.position_seq) AS held_back;
COMMIT;
SELECT count(*) AS holders FROM esrc.inflight_appends;

-- the composite type is what the functions return
SELECT (e).stream, (e).version FROM (SELECT esrc.read_stream('shelf-1') e) s;

-- streams view
SELECT stream, category, version, event_count, first_recorded_at <= last_recorded_at AS ordered
FROM esrc.streams WHERE stream IN ('book-1', 'book-2', 'book', 'bookish-1', 'shelf-1') ORDER BY stream;

-- recorded_at is a timestamp of the append
SELECT bool_and(recorded_at BETWEEN now() - interval '1 hour' AND clock_timestamp()) AS recent
FROM esrc.read_stream('book-1');

-- reads that do not fit in work_mem spill to disk, results unchanged
SELECT esrc.append_batch('big-1',
    (SELECT jsonb_agg(jsonb_build_object('type', 'Pad', 'data', jsonb_build_object('pad', repeat('p', 1000), 'n', g)))
     FROM generate_series(1, 3000) g));
SET work_mem = '64kB';
SELECT count(*), sum((data->>'n')::int) FROM esrc.read_stream('big-1');
SELECT count(*) FROM esrc.read_category('big', 0, NULL);
RESET work_mem;
