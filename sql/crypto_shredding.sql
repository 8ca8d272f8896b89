-- Crypto-shredding: esrc.encrypt(subject, field, value) encrypts a JSON
-- value with the subject's key (created on first use) and returns the JSON
-- string "esrc:v1:<key id>:<base64(nonce | ciphertext | tag)>";
-- esrc.decrypt(subject, field, value) gives the value back, checks the
-- tag (AES-256-GCM, bound to key id, subject and field), and returns NULL
-- once esrc.forget_subject(subject, reason) destroyed the key.  Writers
-- encrypt, readers decrypt, only esrc_admin reads the keys and forgets.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
\set VERBOSITY default

CREATE ROLE crypto_writer LOGIN IN ROLE esrc_writer;
CREATE ROLE crypto_reader LOGIN IN ROLE esrc_reader;
CREATE ROLE crypto_nobody LOGIN;
CREATE ROLE crypto_admin LOGIN IN ROLE esrc_admin;

-- a writer appends an event with one encrypted field; no key exists before
SELECT count(*) FROM esrc.subject_keys;
SET ROLE crypto_writer;
SELECT esrc.append('customer-1', 'Registered',
                   jsonb_build_object('plan', 'pro',
                                      'email', esrc.encrypt('customer-1', 'email', '"alex@example.com"')));
SELECT esrc.append('customer-1', 'Moved',
                   jsonb_build_object('address', esrc.encrypt('customer-1', 'address',
                                                              '{"city": "Oslo", "zip": 150}')));
SELECT esrc.append('customer-2', 'Registered',
                   jsonb_build_object('plan', 'free',
                                      'email', esrc.encrypt('customer-2', 'email', '"bo@example.com"')));
-- the writer may not read the key table
SELECT count(*) FROM esrc.subject_keys;
RESET ROLE;

-- one key per subject: 32 bytes, live
SELECT subject, length(key) AS key_bytes, forgotten_at IS NULL AS live
FROM esrc.subject_keys ORDER BY subject;

-- the stored field is an envelope that names the key id, not the subject
-- or the plaintext; the rest of the event is plain
SELECT version, data->>'plan' AS plan,
       (data->>'email') ~ '^esrc:v1:[0-9a-f-]{36}:[A-Za-z0-9+/]+=*$' AS email_is_envelope,
       (data->>'address') ~ '^esrc:v1:[0-9a-f-]{36}:[A-Za-z0-9+/]+=*$' AS address_is_envelope,
       split_part(coalesce(data->>'email', data->>'address'), ':', 3) =
           (SELECT key_id::text FROM esrc.subject_keys WHERE subject = e.stream) AS names_key_id,
       data::text LIKE '%alex%' OR data::text LIKE '%Oslo%' OR data::text LIKE '%customer%' AS leaks
FROM esrc.events e WHERE stream LIKE 'customer-%' ORDER BY position;

-- two encryptions of one value differ (a random nonce each)
SELECT esrc.encrypt('customer-1', 'email', '"x"') <> esrc.encrypt('customer-1', 'email', '"x"') AS nonces_differ;
SELECT count(*) FROM esrc.subject_keys WHERE subject = 'customer-1';

-- a reader decrypts at read time: the JSON value comes back as it was
SET ROLE crypto_reader;
SELECT version, data->>'plan' AS plan,
       esrc.decrypt(stream, 'email', data->'email') AS email,
       esrc.decrypt(stream, 'address', data->'address') AS address
FROM esrc.read_stream('customer-1');
SELECT esrc.decrypt('customer-2', 'email', data->'email') #>> '{}' AS email
FROM esrc.read_stream('customer-2');
RESET ROLE;
-- every JSON type round-trips, and so does an empty field name (a writer
-- is a reader too)
SET ROLE crypto_writer;
SELECT left(v::text, 30) AS v, esrc.decrypt('customer-2', '', esrc.encrypt('customer-2', '', v)) = v AS round_trip
FROM (VALUES ('null'::jsonb), ('true'), ('0'), ('-1.5e3'), ('""'), ('"ünïcødé ✓"'),
             ('[]'), ('{}'), ('{"a": [1, {"b": null}]}'), (('"' || repeat('y', 100000) || '"')::jsonb)) t(v);
RESET ROLE;

-- values that are not envelopes are returned as they are (fields written
-- in plain text before encryption was adopted); SQL NULL gives NULL
SELECT esrc.decrypt('customer-1', 'email', '"alex@example.com"') AS plain_string,
       esrc.decrypt('customer-1', 'email', '{"a": 1}') AS plain_object,
       esrc.decrypt('customer-1', 'email', '42') AS plain_number,
       esrc.decrypt('customer-1', 'email', NULL) IS NULL AS null_in_null_out,
       esrc.encrypt('customer-1', 'email', NULL) IS NULL AS encrypt_null;

-- wrong subject: the key belongs to another subject (terse: the detail
-- names the random key id)
\set VERBOSITY terse
SELECT esrc.decrypt('customer-2', 'email', data->'email')
FROM esrc.read_stream('customer-1') WHERE version = 0;
\echo SQLSTATE :SQLSTATE
\set VERBOSITY default
-- wrong field: the tag does not match
SELECT esrc.decrypt('customer-1', 'phone', data->'email')
FROM esrc.read_stream('customer-1') WHERE version = 0;
\echo SQLSTATE :SQLSTATE

-- tampering: one changed character of the ciphertext, a cut tag, a
-- foreign key id all fail; none returns data
CREATE TEMP TABLE env AS
    SELECT data->>'email' AS e FROM esrc.read_stream('customer-1') WHERE version = 0;
SELECT esrc.decrypt('customer-1', 'email',
                    to_jsonb(overlay(e placing CASE WHEN substr(e, 70, 1) = 'A' THEN 'B' ELSE 'A' END
                                     from 70 for 1)))
FROM env;
\echo SQLSTATE :SQLSTATE
SELECT esrc.decrypt('customer-1', 'email', to_jsonb(left(e, length(e) - 4))) FROM env;
\echo SQLSTATE :SQLSTATE
SELECT esrc.decrypt('customer-1', 'email',
                    to_jsonb(overlay(e placing '00000000-0000-4000-8000-000000000000' from 9 for 36)))
FROM env;
\echo SQLSTATE :SQLSTATE
-- the key id of customer-2 on customer-1's ciphertext: another subject's key
\set VERBOSITY terse
SELECT esrc.decrypt('customer-1', 'email',
                    to_jsonb(overlay(e placing (SELECT key_id::text FROM esrc.subject_keys
                                                WHERE subject = 'customer-2') from 9 for 36)))
FROM env;
\echo SQLSTATE :SQLSTATE
\set VERBOSITY default

-- malformed envelopes (starting with "esrc:"): 22P02
SELECT esrc.decrypt('customer-1', 'email', '"esrc:v1:"');
\echo SQLSTATE :SQLSTATE
SELECT esrc.decrypt('customer-1', 'email', '"esrc:v2:00000000-0000-4000-8000-000000000000:AAAA"');
\echo SQLSTATE :SQLSTATE
SELECT esrc.decrypt('customer-1', 'email', to_jsonb(e || ' ')) FROM env;
\echo SQLSTATE :SQLSTATE
SELECT esrc.decrypt('customer-1', 'email', to_jsonb(overlay(e placing ';' from 45 for 1))) FROM env;
\echo SQLSTATE :SQLSTATE
SELECT esrc.decrypt('customer-1', 'email', to_jsonb('esrc:v1:' || upper(substr(e, 9, 36)) || substr(e, 45))) FROM env;
\echo SQLSTATE :SQLSTATE
SELECT esrc.decrypt('customer-1', 'email',
                    '"esrc:v1:00000000-0000-4000-8000-000000000000:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"');
\echo SQLSTATE :SQLSTATE

-- bad input
SELECT esrc.encrypt(NULL, 'email', '1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.encrypt('', 'email', '1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.encrypt(repeat('x', 513), 'email', '1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.encrypt(E'customer\n1', 'email', '1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.encrypt('customer-1', NULL, '1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.decrypt(NULL, 'email', '1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.decrypt('customer-1', NULL, '1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.forget_subject(NULL, 'x');
\echo SQLSTATE :SQLSTATE
SELECT esrc.forget_subject('customer-1', NULL);
\echo SQLSTATE :SQLSTATE
SELECT esrc.forget_subject('customer-1', '');
\echo SQLSTATE :SQLSTATE
SELECT esrc.forget_subject('customer-9', 'erasure request #1');
\echo SQLSTATE :SQLSTATE
SELECT count(*) FROM esrc.erasures WHERE what = 'forget_subject';

-- privileges: 42501 for whoever lacks the role
SET ROLE crypto_nobody;
SELECT esrc.encrypt('customer-1', 'email', '1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.decrypt('customer-1', 'email', '1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.forget_subject('customer-1', 'nobody');
\echo SQLSTATE :SQLSTATE
SELECT count(*) FROM esrc.subject_keys;
\echo SQLSTATE :SQLSTATE
RESET ROLE;
SET ROLE crypto_reader;
SELECT esrc.encrypt('customer-1', 'email', '1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.forget_subject('customer-1', 'reader');
\echo SQLSTATE :SQLSTATE
SELECT count(*) FROM esrc.subject_keys;
\echo SQLSTATE :SQLSTATE
RESET ROLE;
SET ROLE crypto_writer;
SELECT esrc.forget_subject('customer-1', 'writer');
\echo SQLSTATE :SQLSTATE
UPDATE esrc.subject_keys SET key = NULL;
\echo SQLSTATE :SQLSTATE
INSERT INTO esrc.subject_keys (subject, key) VALUES ('customer-3', '\x00');
\echo SQLSTATE :SQLSTATE
RESET ROLE;
-- esrc_admin reads the keys but may not write them, encrypt or decrypt
SET ROLE crypto_admin;
SELECT subject, length(key) FROM esrc.subject_keys ORDER BY subject;
UPDATE esrc.subject_keys SET key = NULL;
\echo SQLSTATE :SQLSTATE
DELETE FROM esrc.subject_keys;
\echo SQLSTATE :SQLSTATE
SELECT esrc.encrypt('customer-1', 'email', '1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.decrypt('customer-1', 'email', '1');
\echo SQLSTATE :SQLSTATE
RESET ROLE;

-- a rolled-back forget takes nothing with it
BEGIN;
SELECT esrc.forget_subject('customer-1', 'rolled back');
ROLLBACK;
SELECT esrc.decrypt(stream, 'email', data->'email') AS email
FROM esrc.read_stream('customer-1') WHERE version = 0;

-- forget: the key is gone, every value of the subject decrypts to NULL,
-- other subjects are untouched, and the call is recorded
SET ROLE crypto_admin;
SELECT esrc.forget_subject('customer-1', 'erasure request #4711') AS destroyed;
SELECT subject, key IS NULL AS key_gone, forgotten_at IS NOT NULL AS forgotten
FROM esrc.subject_keys ORDER BY subject;
SELECT what, stream, events, session_user_name = session_user AS session_user_recorded,
       current_user_name, reason
FROM esrc.erasures WHERE what = 'forget_subject' ORDER BY id;
RESET ROLE;
SET ROLE crypto_reader;
SELECT version, data->>'plan' AS plan,
       esrc.decrypt(stream, 'email', data->'email') IS NULL AS email_null,
       esrc.decrypt(stream, 'address', data->'address') IS NULL AS address_null
FROM esrc.read_stream('customer-1');
SELECT esrc.decrypt('customer-2', 'email', data->'email') AS email FROM esrc.read_stream('customer-2');
-- the tag is not even checked any more: no key, no answer but NULL
SELECT esrc.decrypt('customer-1', 'phone', data->'email') IS NULL AS wrong_field_null
FROM esrc.read_stream('customer-1') WHERE version = 0;
RESET ROLE;

-- forgetting again: a recorded no-op that returns false
SET ROLE crypto_admin;
SELECT esrc.forget_subject('customer-1', 'second request') AS destroyed;
SELECT stream, events, reason FROM esrc.erasures WHERE what = 'forget_subject' AND stream = 'customer-1' ORDER BY id;
RESET ROLE;

-- forgetting a subject does not erase the stream of the same name: its
-- audit row is not an erase_stream row, so the stream keeps its snapshot
-- state and takes new (plain) events
SELECT esrc.create_snapshot('crypto_customers', 'customer', 'esrc.merge(jsonb, esrc.event)');
SELECT stream, version, state->>'plan' AS plan FROM crypto_customers ORDER BY stream;
SET ROLE crypto_writer;
SELECT esrc.append('customer-1', 'Downgraded', '{"plan": "free"}');
RESET ROLE;
SELECT version, state->>'plan' AS plan FROM esrc.load('crypto_customers', 'customer-1');
-- a forgotten subject whose stream has no events yet: load gives the
-- initial state (an erased stream would raise 55000) and appends go on
SELECT esrc.encrypt('customer-5', 'email', '"eve@example.com"') IS NOT NULL AS encrypted;
SELECT esrc.forget_subject('customer-5', 'erasure request #4713');
SELECT * FROM esrc.load('crypto_customers', 'customer-5');
SELECT esrc.append('customer-5', 'Registered', '{"plan": "free"}', expected_version => -1);
SELECT version, state FROM esrc.load('crypto_customers', 'customer-5');
SELECT esrc.drop_snapshot('crypto_customers');

-- nothing more is encrypted for a forgotten subject
SET ROLE crypto_writer;
SELECT esrc.encrypt('customer-1', 'email', '"new@example.com"');
\echo SQLSTATE :SQLSTATE
RESET ROLE;

-- a key cannot be put back into a forgotten row without clearing
-- forgotten_at (a CHECK), and the audit stays append-only, also for a
-- superuser
\set VERBOSITY terse
UPDATE esrc.subject_keys SET key = '\x00' WHERE subject = 'customer-1';
\echo SQLSTATE :SQLSTATE
\set VERBOSITY default
DELETE FROM esrc.erasures WHERE what = 'forget_subject';
\echo SQLSTATE :SQLSTATE

-- in a read-only transaction
BEGIN READ ONLY;
SELECT esrc.forget_subject('customer-2', 'read only');
\echo SQLSTATE :SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT esrc.encrypt('customer-4', 'email', '1');
\echo SQLSTATE :SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT esrc.decrypt('customer-2', 'email', data->'email') AS email FROM esrc.read_stream('customer-2');
ROLLBACK;

-- the grants besides the owner's (grantee 0, shown as -, would be PUBLIC)
SELECT p.oid::regprocedure::text AS object, a.grantee::regrole, a.privilege_type
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
     aclexplode(p.proacl) a
WHERE n.nspname = 'esrc' AND p.proname IN ('encrypt', 'decrypt', 'forget_subject')
  AND a.grantee <> p.proowner
UNION ALL
SELECT c.oid::regclass::text, a.grantee::regrole, a.privilege_type
FROM pg_class c, aclexplode(c.relacl) a
WHERE c.oid = 'esrc.subject_keys'::regclass AND a.grantee <> c.relowner
ORDER BY 1, 2, 3;

DROP ROLE crypto_writer, crypto_reader, crypto_nobody, crypto_admin;
