-- examples/security_service.sql: the scenario esrc was written for.
--
-- A security service keeps users keyed by e-mail.  Each user is a stream
-- "user-<email>" with the events
--     UserRegistered  (data: email, name)   always version 0
--     UserNameChanged (data: email, name)
-- and the snapshot security.users holds every user's current state.  The
-- snapshot is written by a trigger in the same transaction as each append,
-- so it is never behind the event log.
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
-- Run after CREATE EXTENSION esrc:  psql -f examples/security_service.sql
-- Then, as a role in esrc_writer and esrc_reader (esrc.load reads the
-- snapshot table, which esrc_reader may read):
--     SELECT security.register_user('alex@example.com', 'Alex');
--     SELECT security.change_user_name('alex@example.com', 'Alex1');
--     SELECT * FROM esrc.load('security.users', 'user-alex@example.com');
--
-- (test/specs/security_service.spec embeds this file verbatim, and an
-- isolation spec block ends at the first closing curly brace: keep them
-- out of this file.)

CREATE SCHEMA security;
COMMENT ON SCHEMA security IS 'esrc example: users keyed by e-mail.';
GRANT USAGE ON SCHEMA security TO esrc_reader;

-- The reducer: state of a user after one more event.
CREATE FUNCTION security.users_reducer(state jsonb, event esrc.event)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    CASE event.type
        WHEN 'UserRegistered' THEN
            RETURN jsonb_build_object('email', event.data->>'email',
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

-- RegisterUser(name, email) -> UserRegistered(email, name), version 0.
CREATE FUNCTION security.register_user(email text, name text)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    stream text := 'user-' || email;
    loaded record;
    attempt int := 0;
BEGIN
    LOOP
        attempt := attempt + 1;
        BEGIN
            SELECT * INTO loaded FROM esrc.load('security.users', stream);
            IF loaded.version >= 0 THEN
                RAISE EXCEPTION 'user "%" is already registered', email
                    USING ERRCODE = 'unique_violation',
                          HINT = 'Rename an existing user with security.change_user_name().';
            END IF;
            RETURN esrc.append(stream, 'UserRegistered',
                               jsonb_build_object('email', email, 'name', name),
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
COMMENT ON FUNCTION security.register_user(text, text) IS
    'Command handler: register a user; fails if the e-mail is already registered.  Returns the stream version.';

-- ChangeUserName(email, newName) -> UserNameChanged(email, name);
-- rejected for an unknown user.
CREATE FUNCTION security.change_user_name(email text, new_name text)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    stream text := 'user-' || email;
    loaded record;
    attempt int := 0;
BEGIN
    LOOP
        attempt := attempt + 1;
        BEGIN
            SELECT * INTO loaded FROM esrc.load('security.users', stream);
            IF loaded.version < 0 THEN
                RAISE EXCEPTION 'user "%" is not registered', email
                    USING ERRCODE = 'no_data_found',
                          HINT = 'Register the user with security.register_user() first.';
            END IF;
            RETURN esrc.append(stream, 'UserNameChanged',
                               jsonb_build_object('email', email, 'name', new_name),
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
COMMENT ON FUNCTION security.change_user_name(text, text) IS
    'Command handler: rename a registered user; fails for an unknown user.  Returns the stream version.';
