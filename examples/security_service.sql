-- examples/security_service.sql: the scenario esrc was written for.
--
-- A security service keeps users.  Each user is a stream "user-<uuid>":
-- an opaque id made at registration, never the e-mail, because a stream
-- name outlives erasure (in the log, the audit esrc.erasures, Kafka keys,
-- error messages).  The events:
--     UserRegistered  (data: email, name)   always version 0
--     UserNameChanged (data: name)
-- The e-mail is personal data and is stored only encrypted for the user
-- (esrc.encrypt, subject = the stream): esrc.forget_subject makes every
-- copy unreadable, in the log, in backups and in Kafka.  The snapshot
-- security.users holds every user's current state (the e-mail as the
-- envelope).  It is written by a trigger in the same transaction as each
-- append, so it is never behind the event log.
--
-- The e-mail stays unique, and a user can be found by it, through the
-- lookup table security.user_emails (keyed hash of the e-mail -> user id),
-- written in the same transaction as the UserRegistered event: two
-- concurrent registrations of one address meet on its primary key, the
-- second waits for the first and fails with 23505 if it committed.  Why a
-- table and not a DCB condition (docs/dcb.md) on a tag of the hash: an
-- erased stream keeps its tags, so the hash would stay in the log for
-- good; a row of this table goes with the user (security.erase_user).
-- The hash is an HMAC-SHA256 with a random key of this database, so the
-- table alone (a copy, a log line) does not tell which addresses it holds:
-- whoever wants to test a guess needs the key, which only the owner of
-- this file's objects can read.
--
-- A command handler loads the state, decides, and appends with the loaded
-- version as expected_version.  If another command got in between, the
-- append fails with SQLSTATE 40001; the handler then loads again and
-- decides again.  So no command is ever decided against a stale state, and
-- no rename is lost.
--
-- Retries: a PL/pgSQL handler can only retry inside one statement with a
-- BEGIN ... EXCEPTION block per attempt (the block's subtransaction undoes
-- the failed attempt).  That works at READ COMMITTED, where every attempt
-- loads with a new snapshot.  At REPEATABLE READ and SERIALIZABLE the
-- transaction's snapshot never changes, so the handler re-raises 40001 and
-- the client must retry the whole transaction.
--
-- Erasure: security.erase_user(user_id, reason), as a role in esrc_admin,
-- erases the stream (esrc.erase_stream: the events are redacted, the
-- snapshot row goes, the tombstone esrc.erased is appended), forgets the
-- user's key (esrc.forget_subject: the encrypted e-mail copied to Kafka or
-- anywhere becomes unreadable) and deletes the lookup row, all in one
-- transaction.  Read models learn of it from the tombstone
-- (examples/projections/projections.sql).
--
-- Run after CREATE EXTENSION esrc:  psql -f examples/security_service.sql
-- Then, as a role in esrc_writer and esrc_reader (esrc.load reads the
-- snapshot table, which esrc_reader may read):
--     SELECT security.register_user('alex@example.com', 'Alex');  -- the id
--     SELECT security.change_user_name(security.user_id_of('alex@example.com'), 'Alex1');
--     SELECT * FROM esrc.load('security.users',
--                             'user-' || security.user_id_of('alex@example.com'));
--
-- (test/specs/security_service.spec embeds this file verbatim, and an
-- isolation spec block ends at the first closing curly brace: keep them
-- out of this file.)

CREATE SCHEMA security;
COMMENT ON SCHEMA security IS 'esrc example: users keyed by an opaque id, e-mail encrypted.';
GRANT USAGE ON SCHEMA security TO esrc_reader;

-- The reducer: state of a user after one more event.
CREATE FUNCTION security.users_reducer(state jsonb, event esrc.event)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    CASE event.type
        WHEN 'UserRegistered' THEN
            RETURN jsonb_build_object('email', event.data->'email',
                                      'name', event.data->>'name');
        WHEN 'UserNameChanged' THEN
            RETURN state || jsonb_build_object('name', event.data->>'name');
        ELSE
            RETURN state;
    END CASE;
END
$$;
COMMENT ON FUNCTION security.users_reducer(jsonb, esrc.event) IS
    'Reducer of security.users: applies UserRegistered and UserNameChanged.';

-- The snapshot: table security.users (stream, version, state, updated_at).
SELECT esrc.create_snapshot('security.users', 'user',
                            'security.users_reducer(jsonb, esrc.event)');

-- The key of the e-mail hash: 64 random bytes (four gen_random_uuid(),
-- 488 random bits), stored as HMAC's inner and outer padded keys.
-- Readable by its owner only (no grant).
CREATE TABLE security.email_hash_key (
    ipad bytea NOT NULL CHECK (length(ipad) = 64),
    opad bytea NOT NULL CHECK (length(opad) = 64)
);
INSERT INTO security.email_hash_key
SELECT (SELECT decode(string_agg(lpad(to_hex(get_byte(k, i) # 54), 2, '0'), '' ORDER BY i), 'hex')
          FROM generate_series(0, 63) i),
       (SELECT decode(string_agg(lpad(to_hex(get_byte(k, i) # 92), 2, '0'), '' ORDER BY i), 'hex')
          FROM generate_series(0, 63) i)
  FROM (SELECT decode(replace(gen_random_uuid()::text || gen_random_uuid()::text
                              || gen_random_uuid()::text || gen_random_uuid()::text, '-', ''),
                      'hex') AS k) r;

-- HMAC-SHA256(key, the e-mail as written, lower-cased, without surrounding
-- blanks).  SECURITY DEFINER so that callers need no right on the key.
CREATE FUNCTION security.email_hash(email text)
RETURNS bytea
LANGUAGE sql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT sha256(k.opad || sha256(k.ipad || convert_to(lower(btrim(email)), 'UTF8')))
      FROM security.email_hash_key k
$$;
REVOKE EXECUTE ON FUNCTION security.email_hash(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION security.email_hash(text) TO esrc_writer, esrc_reader, esrc_admin;
COMMENT ON FUNCTION security.email_hash(text) IS
    'The keyed hash (HMAC-SHA256) of an e-mail address, the key of security.user_emails.';

-- The lookup: one row per registered user, deleted on erasure.
CREATE TABLE security.user_emails (
    email_hash bytea PRIMARY KEY,
    user_id uuid NOT NULL UNIQUE
);
GRANT SELECT ON security.user_emails TO esrc_reader;
GRANT SELECT, INSERT ON security.user_emails TO esrc_writer;
GRANT SELECT, DELETE ON security.user_emails TO esrc_admin;
COMMENT ON TABLE security.user_emails IS
    'Uniqueness and lookup of e-mails: keyed hash -> user id; the row goes when the user is erased.';

-- Claim an e-mail for a user, in the caller's transaction: 23505 if
-- another user has it (a concurrent claim waits for the other's end).
CREATE FUNCTION security.claim_email(email text, user_id uuid)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO security.user_emails (email_hash, user_id)
    VALUES (security.email_hash(email), user_id);
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'e-mail address "%" is already registered', email
        USING ERRCODE = 'unique_violation',
              HINT = 'Look the user up with security.user_id_of() and rename it with security.change_user_name().';
END
$$;
COMMENT ON FUNCTION security.claim_email(text, uuid) IS
    'Record that a user has an e-mail address; fails with 23505 if another user has it.';

-- The user with an e-mail address; NULL for none.
CREATE FUNCTION security.user_id_of(email text)
RETURNS uuid
LANGUAGE sql STABLE STRICT
AS $$
    SELECT u.user_id FROM security.user_emails u WHERE u.email_hash = security.email_hash(email)
$$;
COMMENT ON FUNCTION security.user_id_of(text) IS
    'The id of the user registered with an e-mail address, NULL for none.';

-- RegisterUser(email, name) -> UserRegistered(email encrypted, name) at
-- version 0 of a new stream user-<new uuid>; returns the new user's id.
-- The stream is new, so no other command can get in between: the append
-- expects version -1 ("must not exist yet") and needs no retry loop.
CREATE FUNCTION security.register_user(email text, name text)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    user_id uuid := gen_random_uuid();
    stream text := 'user-' || user_id;
BEGIN
    PERFORM security.claim_email(email, user_id);
    PERFORM esrc.append(stream, 'UserRegistered',
                        jsonb_build_object('email', esrc.encrypt(stream, 'email', to_jsonb(email)),
                                           'name', name),
                        expected_version => -1);
    RETURN user_id;
END
$$;
COMMENT ON FUNCTION security.register_user(text, text) IS
    'Command handler: register a user under a new id; fails with 23505 if the e-mail is registered.  Returns the id.';

-- ChangeUserName(userId, newName) -> UserNameChanged(name); rejected for
-- an unknown user.
CREATE FUNCTION security.change_user_name(user_id uuid, new_name text)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    stream text := 'user-' || user_id;
    loaded record;
    attempt int := 0;
BEGIN
    LOOP
        attempt := attempt + 1;
        BEGIN
            SELECT * INTO loaded FROM esrc.load('security.users', stream);
            IF user_id IS NULL OR loaded.version < 0 THEN
                RAISE EXCEPTION 'user % is not registered', coalesce(user_id::text, 'NULL')
                    USING ERRCODE = 'no_data_found',
                          HINT = 'Register the user with security.register_user() first.';
            END IF;
            RETURN esrc.append(stream, 'UserNameChanged',
                               jsonb_build_object('name', new_name),
                               expected_version => loaded.version);
        EXCEPTION WHEN serialization_failure THEN
            IF attempt >= 10
               OR current_setting('transaction_isolation') <> 'read committed' THEN
                RAISE;
            END IF;
        END;
    END LOOP;
END
$$;
COMMENT ON FUNCTION security.change_user_name(uuid, text) IS
    'Command handler: rename a registered user; fails for an unknown user.  Returns the stream version.';

-- Erase a user (a role in esrc_admin): the stream erased, the key
-- forgotten, the lookup row deleted, in the caller's transaction.
CREATE FUNCTION security.erase_user(user_id uuid, reason text)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    stream text := 'user-' || user_id;   -- erase_stream: 22004 for NULL
    redacted bigint;
BEGIN
    redacted := esrc.erase_stream(stream, reason);
    IF EXISTS (SELECT FROM esrc.subject_keys k WHERE k.subject = stream AND k.key IS NOT NULL) THEN
        PERFORM esrc.forget_subject(stream, reason);
    END IF;
    DELETE FROM security.user_emails u WHERE u.user_id = erase_user.user_id;
    RETURN redacted;
END
$$;
REVOKE EXECUTE ON FUNCTION security.erase_user(uuid, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION security.erase_user(uuid, text) TO esrc_admin;
COMMENT ON FUNCTION security.erase_user(uuid, text) IS
    'Erase a user (esrc_admin): erase_stream, forget_subject and the lookup row, in one transaction.  Returns the events redacted.';
