-- An idempotent retry must repeat the stored event: an id whose stored
-- event has another type, data or metadata is refused (23505).  (After
-- crypto_shredding, which lists every subject key: this file makes some.)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS esrc;
RESET client_min_messages;
-- A retry with the id of a stored event but another type, data or
-- metadata names another event: refused (23505), nothing written.  Exact
-- retries, and retries that differ only where a faithful retry cannot be
-- byte-identical, return the stored version.
SELECT esrc.append('acct-5', 'Opened', '{"owner": "ann", "n": 1.0}', '{"by": "app"}', NULL,
                   'c0000000-0000-0000-0000-000000000001');
SELECT esrc.append('acct-5', 'Opened', '{"owner": "ann", "n": 1.0}', '{"by": "app"}', NULL,
                   'c0000000-0000-0000-0000-000000000001') AS exact_retry;
SELECT esrc.append('acct-5', 'Closed', '{"owner": "ann", "n": 1.0}', '{"by": "app"}', NULL,
                   'c0000000-0000-0000-0000-000000000001');
\echo SQLSTATE :SQLSTATE
SELECT esrc.append('acct-5', 'Opened', '{"owner": "bob", "n": 1.0}', '{"by": "app"}', NULL,
                   'c0000000-0000-0000-0000-000000000001');
SELECT esrc.append('acct-5', 'Opened', '{"owner": "ann", "n": 1.0}', '{"by": "other"}', NULL,
                   'c0000000-0000-0000-0000-000000000001');
SELECT esrc.append('acct-5', 'Opened', '{"owner": "ann", "n": 1.0}', NULL, NULL,
                   'c0000000-0000-0000-0000-000000000001');
SELECT esrc.append_batch('acct-5', '[{"type": "Opened", "data": {"owner": "ann", "n": 1.0, "x": 1},
  "metadata": {"by": "app"}, "id": "c0000000-0000-0000-0000-000000000001"}]');
-- the same document written otherwise (key order, spaces, 1 for 1.0) is the same
SELECT esrc.append('acct-5', 'Opened', '{ "n": 1, "owner" : "ann" }', '{"by":"app"}', NULL,
                   'c0000000-0000-0000-0000-000000000001') AS same_document;
-- the trace context is the request's, not the event's
BEGIN;
SET LOCAL esrc.traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
SELECT esrc.append('acct-5', 'Opened', '{"owner": "ann", "n": 1.0}', '{"by": "app"}', NULL,
                   'c0000000-0000-0000-0000-000000000001') AS retry_other_trace;
COMMIT;
SELECT esrc.append('acct-5b', 'Opened', '{}', NULL, NULL, 'c0000000-0000-0000-0000-000000000005');
BEGIN;
SET LOCAL esrc.traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
SELECT esrc.append('acct-5b', 'Opened', '{}', NULL, NULL,
                   'c0000000-0000-0000-0000-000000000005') AS retry_with_trace;
COMMIT;
-- esrc.encrypt draws a new nonce at every call: envelopes of one subject
-- are the same value for a retry, another subject's are not
SELECT esrc.append('acct-6', 'Opened',
                   jsonb_build_object('email', esrc.encrypt('subject-1', 'email', '"ann@example.com"')),
                   NULL, NULL, 'c0000000-0000-0000-0000-000000000002');
SELECT esrc.append('acct-6', 'Opened',
                   jsonb_build_object('email', esrc.encrypt('subject-1', 'email', '"ann@example.com"')),
                   NULL, NULL, 'c0000000-0000-0000-0000-000000000002') AS retry_reencrypted;
SELECT esrc.append('acct-6', 'Opened',
                   jsonb_build_object('email', esrc.encrypt('subject-2', 'email', '"ann@example.com"')),
                   NULL, NULL, 'c0000000-0000-0000-0000-000000000002');
-- an erased stream's events have lost their data: only the type is compared
SELECT esrc.append('acct-7', 'Opened', '{"owner": "cy"}', NULL, NULL, 'c0000000-0000-0000-0000-000000000003');
SELECT esrc.erase_stream('acct-7', 'test') AS redacted;
SELECT esrc.append('acct-7', 'Opened', '{"owner": "cy"}', NULL, NULL,
                   'c0000000-0000-0000-0000-000000000003') AS retry_of_erased;
SELECT esrc.append('acct-7', 'Closed', '{"owner": "cy"}', NULL, NULL,
                   'c0000000-0000-0000-0000-000000000003');
SELECT stream, esrc.stream_version(stream) FROM (VALUES ('acct-5'), ('acct-6'), ('acct-7')) v(stream);
