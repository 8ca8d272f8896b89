-- Part of the esrc install script (see Makefile): crypto-shredding --
-- per-subject keys, encryption of event fields at append time, decryption
-- at read time, and forgetting a subject by destroying its key
-- (src/lifecycle/crypto.c, docs/lifecycle.md "Crypto-shredding").

------------------------------------------------------------------------
-- The key table.  One row per subject; written only by esrc.encrypt (a
-- new key on a subject's first use) and esrc.forget_subject (key set to
-- NULL), as the table's owner; readable by esrc_admin alone.  subject is
-- COLLATE "C": the C code looks it up by index with that collation.
------------------------------------------------------------------------
CREATE TABLE esrc.subject_keys (
    key_id       uuid        NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
    subject      text        COLLATE "C" NOT NULL,
    key          bytea,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    forgotten_at timestamptz,
    CONSTRAINT subject_keys_pkey PRIMARY KEY (key_id),
    CONSTRAINT subject_keys_subject_key UNIQUE (subject),
    CONSTRAINT subject_keys_key_check CHECK (key IS NULL OR pg_catalog.length(key) = 32),
    CONSTRAINT subject_keys_forgotten_check CHECK ((key IS NULL) = (forgotten_at IS NOT NULL))
);
COMMENT ON TABLE esrc.subject_keys IS
    'The AES-256 key of every subject esrc.encrypt encrypted for; key is NULL once esrc.forget_subject destroyed it.  Readable by esrc_admin only.';
COMMENT ON COLUMN esrc.subject_keys.key_id IS 'Random; named in every encrypted value (the subject is not).';
COMMENT ON COLUMN esrc.subject_keys.key IS '32 random bytes; NULL after esrc.forget_subject.';
COMMENT ON COLUMN esrc.subject_keys.forgotten_at IS 'Start of the transaction that forgot the subject.';

-- pg_dump dumps the keys with the database: a restore without them could
-- decrypt nothing (docs/lifecycle.md, "Backups").
SELECT pg_catalog.pg_extension_config_dump('esrc.subject_keys', '');

REVOKE ALL ON esrc.subject_keys FROM PUBLIC;
GRANT SELECT ON esrc.subject_keys TO esrc_admin;

------------------------------------------------------------------------
-- The functions.  Not SECURITY DEFINER: the C code reads the key table by
-- index scans and writes it as its owner, security-restricted, with
-- search_path pinned; EXECUTE is the check: encrypt for esrc_writer,
-- decrypt for esrc_reader, forget_subject for esrc_admin.
------------------------------------------------------------------------
CREATE FUNCTION esrc.encrypt(subject text, field text, value jsonb) RETURNS jsonb
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_encrypt';
COMMENT ON FUNCTION esrc.encrypt(text, text, jsonb) IS
    'Encrypt a JSON value for a subject (AES-256-GCM with the subject''s key, created on first use), bound to the subject and the field name; returns the JSON string "esrc:v1:<key id>:<base64>".  NULL value: NULL.';

CREATE FUNCTION esrc.decrypt(subject text, field text, value jsonb) RETURNS jsonb
    LANGUAGE c CALLED ON NULL INPUT STABLE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'esrc_decrypt';
COMMENT ON FUNCTION esrc.decrypt(text, text, jsonb) IS
    'The JSON value esrc.encrypt(subject, field, ...) encrypted; NULL if the subject was forgotten; a value that is not an encrypted value (no JSON string starting with "esrc:") unchanged.';

CREATE FUNCTION esrc.forget_subject(subject text, reason text) RETURNS boolean
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_forget_subject';
COMMENT ON FUNCTION esrc.forget_subject(text, text) IS
    'Destroy the key of a subject (every value encrypted for it becomes unreadable; esrc.decrypt returns NULL), record it in esrc.erasures; true if a key was destroyed, false if it was gone already.';

REVOKE ALL ON FUNCTION esrc.encrypt(text, text, jsonb),
                       esrc.decrypt(text, text, jsonb),
                       esrc.forget_subject(text, text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.encrypt(text, text, jsonb) TO esrc_writer;
GRANT EXECUTE ON FUNCTION esrc.decrypt(text, text, jsonb) TO esrc_reader;
GRANT EXECUTE ON FUNCTION esrc.forget_subject(text, text) TO esrc_admin;
