-- Part of the esrc install script (see Makefile): the life cycle of the
-- log -- erasing a stream's data, with an audit (src/lifecycle/erase.c,
-- docs/lifecycle.md).

------------------------------------------------------------------------
-- The role that may run the life-cycle functions, esrc_admin, is created
-- (or adopted) with the others in 00_core.sql.  Not granted to esrc_writer
-- or anyone else: grant it to the few who may erase.
------------------------------------------------------------------------

GRANT USAGE ON SCHEMA esrc TO esrc_admin;

------------------------------------------------------------------------
-- The audit of erasures.  Written only by esrc.erase_stream and
-- esrc.forget_subject (52_crypto.sql) (as the
-- table's owner); append-only for everyone, superusers included, by
-- ENABLE ALWAYS triggers; readable by esrc_admin.
------------------------------------------------------------------------
CREATE SEQUENCE esrc.erasure_id_seq AS bigint MINVALUE 1 NO CYCLE;

CREATE TABLE esrc.erasures (
    id                bigint      NOT NULL DEFAULT pg_catalog.nextval('esrc.erasure_id_seq'::pg_catalog.regclass),
    what              text        NOT NULL,
    stream            text,
    events            bigint      NOT NULL CHECK (events >= 0),
    session_user_name name        NOT NULL,
    current_user_name name        NOT NULL,
    erased_at         timestamptz NOT NULL DEFAULT pg_catalog.now(),
    reason            text        NOT NULL CHECK (reason <> ''),
    rules             jsonb,
    CONSTRAINT erasures_pkey PRIMARY KEY (id),
    CONSTRAINT erasures_what_check CHECK (what IN ('erase_stream', 'set_stream_rules', 'delete_stream', 'forget_subject', 'scavenge')),
    CONSTRAINT erasures_stream_check CHECK (stream IS NOT NULL OR what = 'scavenge')
);
ALTER SEQUENCE esrc.erasure_id_seq OWNED BY esrc.erasures.id;
-- Is this stream erased?  (a lookup by stream, docs/lifecycle.md)
CREATE INDEX erasures_stream_idx ON esrc.erasures (stream);
COMMENT ON TABLE esrc.erasures IS
    'Every use of the life-cycle functions (esrc.erase_stream, esrc.set_stream_rules, esrc.delete_stream, esrc.forget_subject, esrc.scavenge and its worker), recorded in its transaction, with who and why.  Append-only.';
COMMENT ON COLUMN esrc.erasures.what IS 'The function: erase_stream, set_stream_rules, delete_stream, forget_subject or scavenge.';
COMMENT ON COLUMN esrc.erasures.stream IS 'The stream erased, deleted or given rules, or the subject forgotten; null for a scavenge, which spans streams.';
COMMENT ON COLUMN esrc.erasures.events IS 'erase_stream: events redacted by this call (0: the stream was erased already); delete_stream: events the stream had, all hidden now (0: deleted permanently already); set_stream_rules: 0; forget_subject: keys destroyed (1, or 0: forgotten already); scavenge: events redacted by the slice.';
COMMENT ON COLUMN esrc.erasures.rules IS 'set_stream_rules and delete_stream: the stream''s rules after the call (null: none); scavenge: streams_visited, streams_redacted and pass_done of the slice; erase_stream and forget_subject: null.';
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
-- Stream rules (src/lifecycle/retention.c writes them, src/log/rules.c
-- applies them; docs/lifecycle.md): per stream, which events the read
-- functions hide -- versions below truncate_before, all but the
-- last max_count, those older than max_age -- and whether the stream is
-- deleted permanently (appends refused).  Written only by
-- esrc.set_stream_rules and esrc.delete_stream (as the table's owner);
-- readable by esrc_reader, so that readers can see why events are
-- hidden.  Every change of the table, however made, invalidates the
-- backends' caches of it (the statement trigger below).
------------------------------------------------------------------------
CREATE TABLE esrc.stream_rules (
    stream          text        NOT NULL,
    truncate_before bigint      CHECK (truncate_before >= 0),
    max_count       bigint      CHECK (max_count > 0),
    max_age         interval    CHECK (max_age > '0'::interval),
    hard_deleted    boolean     NOT NULL DEFAULT false,
    set_at          timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT stream_rules_pkey PRIMARY KEY (stream),
    CONSTRAINT stream_rules_hard_check CHECK (NOT hard_deleted OR truncate_before IS NOT NULL)
);
COMMENT ON TABLE esrc.stream_rules IS
    'Per stream, the events the read functions hide (docs/lifecycle.md).  The hidden events stay stored until esrc.scavenge redacts them.  Written by esrc.set_stream_rules and esrc.delete_stream.';
COMMENT ON COLUMN esrc.stream_rules.truncate_before IS 'Versions below it are hidden (null: no such rule).';
COMMENT ON COLUMN esrc.stream_rules.max_count IS 'All but the last max_count versions of the stream at read time are hidden (null: no such rule).';
COMMENT ON COLUMN esrc.stream_rules.max_age IS 'Every version up to the last one recorded before statement_timestamp() - max_age is hidden (null: no such rule).';
COMMENT ON COLUMN esrc.stream_rules.hard_deleted IS 'Deleted permanently by esrc.delete_stream(..., hard => true): every later append is refused (55000).';
COMMENT ON COLUMN esrc.stream_rules.set_at IS 'Start of the transaction that last changed the row.';

CREATE FUNCTION esrc.stream_rules_changed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'esrc_stream_rules_changed';
COMMENT ON FUNCTION esrc.stream_rules_changed() IS
    'Trigger function of esrc.stream_rules: makes every backend reload its cache of the rules when the change commits.';
CREATE TRIGGER stream_rules_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON esrc.stream_rules
    FOR EACH STATEMENT EXECUTE FUNCTION esrc.stream_rules_changed();
ALTER TABLE esrc.stream_rules ENABLE ALWAYS TRIGGER stream_rules_changed;

SELECT pg_catalog.pg_extension_config_dump('esrc.stream_rules', '');

REVOKE ALL ON esrc.stream_rules FROM PUBLIC;
GRANT SELECT ON esrc.stream_rules TO esrc_reader, esrc_admin;

CREATE FUNCTION esrc.set_stream_rules(
    stream text,
    truncate_before bigint DEFAULT NULL,
    max_count bigint DEFAULT NULL,
    max_age interval DEFAULT NULL,
    reason text DEFAULT NULL)
RETURNS void
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_set_stream_rules';
COMMENT ON FUNCTION esrc.set_stream_rules(text, bigint, bigint, interval, text) IS
    'Replace the rules of a stream (a null argument: no such rule; all null: no rules) and record the change in esrc.erasures; reason is required.';

CREATE FUNCTION esrc.delete_stream(stream text, reason text, hard boolean DEFAULT false)
RETURNS bigint
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_delete_stream';
COMMENT ON FUNCTION esrc.delete_stream(text, text, boolean) IS
    'Hide every event of a stream (truncate_before = version + 1); hard: also refuse every later append, for good.  Records the call in esrc.erasures; returns the number of events hidden.';

REVOKE ALL ON FUNCTION esrc.stream_rules_changed(),
                       esrc.set_stream_rules(text, bigint, bigint, interval, text),
                       esrc.delete_stream(text, text, boolean)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.set_stream_rules(text, bigint, bigint, interval, text),
                          esrc.delete_stream(text, text, boolean)
    TO esrc_admin;

-- Scrubbing the bytes of erased events: esrc.scrub zeroes the free space
-- of the pages of esrc.events and of its TOAST table, where VACUUM leaves
-- the bytes of the row versions it removed (src/lifecycle/scrub.c,
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

------------------------------------------------------------------------
-- The scavenger (src/lifecycle/scavenge.c, docs/lifecycle.md): esrc.scavenge
-- redacts in place, as esrc.erase_stream does, the events that stream
-- rules hide, a bounded slice per call (pg_cron), or every
-- esrc.scavenge_interval in a background worker.  Its position and totals
-- are in esrc.scavenge_progress (one row), and per stream the version
-- below which every event is redacted in esrc.scavenge_streams; both are
-- written by the scavenger alone (as the tables' owner) and not dumped (a
-- restored database starts a new pass).  EXECUTE (esrc_admin) is the check.
------------------------------------------------------------------------
CREATE TABLE esrc.scavenge_progress (
    id                     integer     NOT NULL DEFAULT 1,
    resume_after           text,
    pass_started_at        timestamptz,
    passes_completed       bigint      NOT NULL DEFAULT 0,
    streams_visited        bigint      NOT NULL DEFAULT 0,
    events_redacted        bigint      NOT NULL DEFAULT 0,
    last_run_at            timestamptz,
    last_run_events        bigint,
    last_pass_completed_at timestamptz,
    CONSTRAINT scavenge_progress_pkey PRIMARY KEY (id),
    CONSTRAINT scavenge_progress_id_check CHECK (id = 1)
);
COMMENT ON TABLE esrc.scavenge_progress IS
    'The position and totals of esrc.scavenge: one row.  Written by the scavenger only.';
COMMENT ON COLUMN esrc.scavenge_progress.resume_after IS 'The last stream of esrc.stream_rules the current pass finished (null: the pass starts at the first).';
COMMENT ON COLUMN esrc.scavenge_progress.pass_started_at IS 'Start of the transaction of the current pass''s first slice (null: no pass in progress).';
COMMENT ON COLUMN esrc.scavenge_progress.passes_completed IS 'Passes that reached the end of esrc.stream_rules.';
COMMENT ON COLUMN esrc.scavenge_progress.streams_visited IS 'Streams with rules looked at, in all slices.';
COMMENT ON COLUMN esrc.scavenge_progress.events_redacted IS 'Events redacted, in all slices.';
COMMENT ON COLUMN esrc.scavenge_progress.last_run_at IS 'Start of the transaction of the last slice.';
COMMENT ON COLUMN esrc.scavenge_progress.last_run_events IS 'Events the last slice redacted.';
COMMENT ON COLUMN esrc.scavenge_progress.last_pass_completed_at IS 'Start of the transaction of the slice that completed the last pass.';

CREATE TABLE esrc.scavenge_streams (
    stream         text        NOT NULL,
    redacted_below bigint      NOT NULL CHECK (redacted_below >= 0),
    scavenged_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT scavenge_streams_pkey PRIMARY KEY (stream)
);
COMMENT ON TABLE esrc.scavenge_streams IS
    'Per stream the scavenger has redacted events of: every version below redacted_below is redacted, so the next pass starts there.  Written by the scavenger only.';
COMMENT ON COLUMN esrc.scavenge_streams.redacted_below IS 'Every version of the stream below it is redacted.';
COMMENT ON COLUMN esrc.scavenge_streams.scavenged_at IS 'Start of the transaction that last moved redacted_below.';

REVOKE ALL ON esrc.scavenge_progress, esrc.scavenge_streams FROM PUBLIC;
GRANT SELECT ON esrc.scavenge_progress, esrc.scavenge_streams TO esrc_admin;

CREATE FUNCTION esrc.scavenge(max_events integer DEFAULT 10000)
    RETURNS TABLE (streams_visited bigint, streams_redacted bigint, events_redacted bigint,
                   done boolean, pass_started_at timestamptz, resume_after text)
    LANGUAGE c CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'esrc_scavenge';
COMMENT ON FUNCTION esrc.scavenge(integer) IS
    'Redact in place (as esrc.erase_stream) at most max_events events that stream rules hide, looking at at most max_events streams; resumes the current pass over esrc.stream_rules; records the call in esrc.erasures if it redacted anything.  One row: what it did, done when the pass reached its end.';
REVOKE ALL ON FUNCTION esrc.scavenge(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION esrc.scavenge(integer) TO esrc_admin;
