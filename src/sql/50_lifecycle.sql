-- Part of the esrc install script (see Makefile): the life cycle of the
-- log -- erasing a stream's data, with an audit (src/lifecycle.c,
-- docs/lifecycle.md).

------------------------------------------------------------------------
-- The role that may run the life-cycle functions.  Adopted if it exists,
-- on the terms of esrc_reader and esrc_writer (00_core.sql).  Not granted
-- to esrc_writer or anyone else: grant it to the few who may erase.
------------------------------------------------------------------------
DO $roles$
DECLARE
    extra text[];
BEGIN
    SELECT pg_catalog.array_remove(ARRAY[
               CASE WHEN a.rolsuper THEN 'SUPERUSER' END,
               CASE WHEN a.rolcreatedb THEN 'CREATEDB' END,
               CASE WHEN a.rolcreaterole THEN 'CREATEROLE' END,
               CASE WHEN a.rolreplication THEN 'REPLICATION' END,
               CASE WHEN a.rolbypassrls THEN 'BYPASSRLS' END,
               CASE WHEN a.rolcanlogin THEN 'LOGIN' END], NULL)
           OPERATOR(pg_catalog.||)
           ARRAY(SELECT 'membership in role ' OPERATOR(pg_catalog.||)
                        pg_catalog.quote_ident(g.rolname)
                 FROM pg_catalog.pg_auth_members m
                 JOIN pg_catalog.pg_roles g ON g.oid OPERATOR(pg_catalog.=) m.roleid
                 WHERE m.member OPERATOR(pg_catalog.=) a.oid
                 ORDER BY g.rolname)
      INTO extra
      FROM pg_catalog.pg_roles a
     WHERE a.rolname OPERATOR(pg_catalog.=) 'esrc_admin';
    IF NOT FOUND THEN
        CREATE ROLE esrc_admin NOLOGIN;
    ELSIF pg_catalog.cardinality(extra) OPERATOR(pg_catalog.>) 0 THEN
        RAISE EXCEPTION 'role "%" already exists with rights esrc does not give it', 'esrc_admin'
            USING ERRCODE = 'duplicate_object',
                  DETAIL = pg_catalog.format('It has %s; every role granted %s would gain them.',
                                             pg_catalog.array_to_string(extra, ', '), 'esrc_admin'),
                  HINT = 'Remove them (ALTER ROLE esrc_admin NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS NOLOGIN, REVOKE ... FROM esrc_admin) or drop the role, then create the extension again.';
    END IF;
END
$roles$;

GRANT USAGE ON SCHEMA esrc TO esrc_admin;

------------------------------------------------------------------------
-- The audit of erasures.  Written only by esrc.erase_stream (as the
-- table's owner); append-only for everyone, superusers included, by
-- ENABLE ALWAYS triggers; readable by esrc_admin.
------------------------------------------------------------------------
CREATE SEQUENCE esrc.erasure_id_seq AS bigint MINVALUE 1 NO CYCLE;

CREATE TABLE esrc.erasures (
    id                bigint      NOT NULL DEFAULT pg_catalog.nextval('esrc.erasure_id_seq'::pg_catalog.regclass),
    what              text        NOT NULL,
    stream            text        NOT NULL,
    events            bigint      NOT NULL CHECK (events >= 0),
    session_user_name name        NOT NULL,
    current_user_name name        NOT NULL,
    erased_at         timestamptz NOT NULL DEFAULT pg_catalog.now(),
    reason            text        NOT NULL CHECK (reason <> ''),
    CONSTRAINT erasures_pkey PRIMARY KEY (id),
    CONSTRAINT erasures_what_check CHECK (what IN ('erase_stream'))
);
ALTER SEQUENCE esrc.erasure_id_seq OWNED BY esrc.erasures.id;
-- Is this stream erased?  (a lookup by stream, docs/lifecycle.md)
CREATE INDEX erasures_stream_idx ON esrc.erasures (stream);
COMMENT ON TABLE esrc.erasures IS
    'Every use of the life-cycle functions (esrc.erase_stream), recorded in its transaction, with who and why.  Append-only.';
COMMENT ON COLUMN esrc.erasures.what IS 'The function: erase_stream.';
COMMENT ON COLUMN esrc.erasures.events IS 'Events redacted by this call (0: the stream was erased already).';
COMMENT ON COLUMN esrc.erasures.session_user_name IS 'session_user of the call.';
COMMENT ON COLUMN esrc.erasures.current_user_name IS 'current_user of the call.';
COMMENT ON COLUMN esrc.erasures.erased_at IS 'Start of the erasing transaction.';

CREATE FUNCTION esrc.erasures_immutable() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_erasures_immutable';
COMMENT ON FUNCTION esrc.erasures_immutable() IS
    'Trigger function of esrc.erasures: refuses UPDATE, DELETE and TRUNCATE.';
CREATE TRIGGER erasures_immutable BEFORE UPDATE OR DELETE ON esrc.erasures
    FOR EACH ROW EXECUTE FUNCTION esrc.erasures_immutable();
CREATE TRIGGER erasures_no_truncate BEFORE TRUNCATE ON esrc.erasures
    FOR EACH STATEMENT EXECUTE FUNCTION esrc.erasures_immutable();
ALTER TABLE esrc.erasures ENABLE ALWAYS TRIGGER erasures_immutable;
ALTER TABLE esrc.erasures ENABLE ALWAYS TRIGGER erasures_no_truncate;

SELECT pg_catalog.pg_extension_config_dump('esrc.erasures', '');
SELECT pg_catalog.pg_extension_config_dump('esrc.erasure_id_seq', '');

REVOKE ALL ON esrc.erasures FROM PUBLIC;
REVOKE ALL ON SEQUENCE esrc.erasure_id_seq FROM PUBLIC;
GRANT SELECT ON esrc.erasures TO esrc_admin;

------------------------------------------------------------------------
-- Erasing.  Not SECURITY DEFINER: the C code redacts the log itself (index
-- scans and the executor's row update, no SQL), and writes the snapshot
-- tables and esrc.erasures as their owners, security-restricted, with
-- search_path pinned; EXECUTE (esrc_admin) is the check.
------------------------------------------------------------------------
CREATE FUNCTION esrc.erase_stream(stream text, reason text) RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_erase_stream';
COMMENT ON FUNCTION esrc.erase_stream(text, text) IS
    'Redact every event of a stream in place (data becomes {"erased": true}, metadata null; position, version, type, id and recorded_at stay), delete its snapshot rows, record it in esrc.erasures; returns the number of events redacted.';

REVOKE ALL ON FUNCTION esrc.erasures_immutable(),
                       esrc.erase_stream(text, text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.erase_stream(text, text) TO esrc_admin;

------------------------------------------------------------------------
-- Scrubbing the bytes of erased events: esrc.scrub zeroes the free space
-- of the pages of esrc.events and of its TOAST table, where VACUUM leaves
-- the bytes of the row versions it removed (src/scrub.c,
-- docs/lifecycle.md).  Resumable: the position of the current pass is
-- kept in esrc.scrub_progress, written by esrc.scrub alone (as the
-- table's owner); EXECUTE (esrc_admin) is the check.
------------------------------------------------------------------------
CREATE TABLE esrc.scrub_progress (
    relation        text        NOT NULL,
    next_block      bigint      NOT NULL CHECK (next_block >= 0),
    end_block       bigint      NOT NULL CHECK (end_block >= 0),
    pass_started_at timestamptz NOT NULL,
    CONSTRAINT scrub_progress_pkey PRIMARY KEY (relation),
    CONSTRAINT scrub_progress_relation_check CHECK (relation IN ('events', 'toast'))
);
COMMENT ON TABLE esrc.scrub_progress IS
    'The position of esrc.scrub''s current pass: one row for esrc.events, one for its TOAST table.  Written by esrc.scrub only.';
COMMENT ON COLUMN esrc.scrub_progress.next_block IS 'The first block the pass has not scanned yet.';
COMMENT ON COLUMN esrc.scrub_progress.end_block IS 'The relation''s size in blocks when the pass started; the pass ends there.';
COMMENT ON COLUMN esrc.scrub_progress.pass_started_at IS 'Start of the transaction that started the pass; only a pass started after the VACUUM that removed the erased row versions scrubs them.';
REVOKE ALL ON esrc.scrub_progress FROM PUBLIC;
GRANT SELECT ON esrc.scrub_progress TO esrc_admin;

CREATE FUNCTION esrc.scrub(max_pages integer DEFAULT 10000, restart boolean DEFAULT false)
    RETURNS TABLE (relation regclass, pages_scanned bigint, pages_scrubbed bigint,
                   bytes_zeroed bigint, pass_started_at timestamptz, done boolean)
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_scrub';
COMMENT ON FUNCTION esrc.scrub(integer, boolean) IS
    'Zero the free space of at most max_pages pages of esrc.events and its TOAST table (the bytes of row versions VACUUM removed), WAL-logged, one page at a time; resumes the current pass (or starts one: restart, or none in progress); one row per relation, done when the pass reached its end.';
REVOKE ALL ON FUNCTION esrc.scrub(integer, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.scrub(integer, boolean) TO esrc_admin;
