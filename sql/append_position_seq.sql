-- The ordering proof of order.c (and so esrc.read_all, read_category and
-- safe_position) needs esrc.position_seq to hand out increasing values in
-- the order of the nextval() calls: CACHE 1, a positive increment, NO
-- CYCLE.  With a cache each session hands out a range of its own, so a
-- reader could pass a position that another session fills in later: an
-- append refuses such a sequence, and writes nothing.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;

SELECT esrc.append('seqcheck-1', 'Opened', '{}');
ALTER SEQUENCE esrc.position_seq CACHE 20;
SELECT esrc.append('seqcheck-1', 'Changed', '{}');
SELECT esrc.append_batch('seqcheck-2', '[{"type": "Opened", "data": {}}]');
ALTER SEQUENCE esrc.position_seq CACHE 1 CYCLE;
SELECT esrc.append('seqcheck-1', 'Changed', '{}');
ALTER SEQUENCE esrc.position_seq NO CYCLE INCREMENT -1 MAXVALUE 9223372036854775807;
SELECT esrc.append('seqcheck-1', 'Changed', '{}');
ALTER SEQUENCE esrc.position_seq INCREMENT 1;
-- nothing was written, and appends work again
SELECT stream, version FROM esrc.events WHERE category = 'seqcheck' ORDER BY position;
SELECT esrc.append('seqcheck-1', 'Changed', '{}');
SELECT seqcache, seqincrement, seqcycle FROM pg_sequence
WHERE seqrelid = 'esrc.position_seq'::regclass;
