-- append_batch: several events atomically, consecutive versions, one
-- expected-version check for the whole batch.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never

SELECT esrc.append_batch('cart-1', '[
  {"type": "CartCreated", "data": {"owner": "ann"}},
  {"type": "ItemAdded", "data": {"sku": "x1"}, "metadata": {"by": "ann"}},
  {"type": "ItemAdded", "data": {"sku": "x2"}, "id": "8f0c6a38-2b8a-4a3c-9d4e-0a1b2c3d4e5f"}
]', expected_version => -1);
SELECT version, type, data, metadata,
       id = '8f0c6a38-2b8a-4a3c-9d4e-0a1b2c3d4e5f' AS given_id
FROM esrc.read_stream('cart-1');

-- positions are increasing in version order within the batch
SELECT bool_and(p_next > p) AS positions_increase
FROM (SELECT position AS p, lead(position) OVER (ORDER BY version) AS p_next
      FROM esrc.read_stream('cart-1')) s WHERE p_next IS NOT NULL;

-- the batch is checked as a whole: stale expected version writes none of it
SELECT esrc.append_batch('cart-1', '[{"type": "A", "data": {}}, {"type": "B", "data": {}}]', 1);
\echo SQLSTATE :SQLSTATE
SELECT esrc.append_batch('cart-1', '[{"type": "ItemRemoved", "data": {"sku": "x1"}},
                                     {"type": "CheckedOut", "data": null}]', 2);
SELECT version, type, data FROM esrc.read_stream('cart-1', 3);

-- a bad element anywhere means nothing is written; the context line
-- names the element
\set SHOW_CONTEXT errors
SELECT esrc.append_batch('cart-1', '[{"type": "Fine", "data": {}}, {"type": "", "data": {}}]');
SELECT esrc.append_batch('cart-1', '[{"type": "Fine", "data": {}}, 42]');
SELECT esrc.append_batch('cart-1', '[{"type": "Fine", "data": {}}, {"type": "NoData"}]');
SELECT esrc.append_batch('cart-1', '[{"type": "Fine", "data": {}, "dta": 1}]');
SELECT esrc.append_batch('cart-1', '[{"type": 7, "data": {}}]');
SELECT esrc.append_batch('cart-1', '[{"type": "T", "data": {}, "id": "not-a-uuid"}]');
SELECT esrc.append_batch('cart-1', '[{"type": "T", "data": {}, "id": 12}]');
SELECT esrc.append_batch('cart-1', '[{"type": "T", "data": {}, "id": "11111111-2222-3333-4444-555555555555"},
                                     {"type": "T", "data": {}, "id": "11111111-2222-3333-4444-555555555555"}]');
SELECT esrc.append_batch('cart-1', '{"type": "T", "data": {}}');
SELECT esrc.append_batch('cart-1', '"scalar"');
SELECT esrc.append_batch('cart-1', '[]');
SELECT esrc.append_batch('cart-1', NULL);
\set SHOW_CONTEXT never
SELECT esrc.stream_version('cart-1');

-- metadata: null or absent means none
SELECT esrc.append_batch('cart-2', '[{"type": "T", "data": 1, "metadata": null}, {"type": "T", "data": [1, 2]}]');
SELECT version, data, metadata IS NULL AS no_metadata FROM esrc.read_stream('cart-2');

-- a large batch
SELECT esrc.append_batch('bulk-1',
    (SELECT jsonb_agg(jsonb_build_object('type', 'Tick', 'data', jsonb_build_object('n', g)))
     FROM generate_series(1, 1000) g));
SELECT count(*), min(version), max(version), bool_and((data->>'n')::int = version + 1) AS in_order
FROM esrc.read_stream('bulk-1');
