-- test/projstress/failures.sql: the projections of
-- test/run-38-projection-failures.sh, over category "acct" (40 streams).
--   fragile   4 partitions; its handler raises for acct-7 version 3: the
--             partition blocks there, moved on by esrc.projection_skip
--   fixable   4 partitions; raises for acct-9 version 2 until the handler
--             is replaced (CREATE OR REPLACE FUNCTION): moves on, no skip
--   stubborn  2 partitions; raises while (stream, version) is in
--             fail.poison: blocked there, moved on by projection_resume
--             once the row is gone
--   steady    1 partition, never fails: paused and resumed
--   selfdrop  2 partitions; its handler calls esrc.drop_projection of its
--             own projection at acct-5 version 2: refused (55006), a
--             handler failure; blocked there, moved on by projection_skip
--   selfreset 2 partitions; the same with esrc.reset_projection at acct-6
--             version 2
--   walled    2 partitions, never fails; but a trigger on
--             esrc.subscription_checkpoints refuses to move its checkpoint
--             past acct-21 version 2 while that event is in fail.walls:
--             the batch fails outside the handler; counted and blocked
--             there like a handler's failure, moved on by projection_skip
--             once the row is gone
-- Each handler records every event it applies in fail.seen (no key: an
-- event applied twice shows as two rows).
CREATE EXTENSION esrc;
CREATE SCHEMA fail;
CREATE TABLE fail.seen (
    projection text NOT NULL,
    "position" bigint NOT NULL,
    stream     text NOT NULL,
    version    bigint NOT NULL,
    note       text
);
CREATE TABLE fail.poison (stream text, version bigint);
INSERT INTO fail.poison VALUES ('acct-13', 4);

CREATE FUNCTION fail.fragile(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF e.stream = 'acct-7' AND e.version = 3 THEN
        RAISE EXCEPTION 'cannot apply % version %', e.stream, e.version USING ERRCODE = 'data_exception';
    END IF;
    INSERT INTO fail.seen VALUES ('fragile', e.position, e.stream, e.version);
END
$$;
CREATE FUNCTION fail.fixable(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF e.stream = 'acct-9' AND e.version = 2 THEN
        RAISE EXCEPTION 'bug in the handler at % version %', e.stream, e.version;
    END IF;
    INSERT INTO fail.seen VALUES ('fixable', e.position, e.stream, e.version, 'v1');
END
$$;
CREATE FUNCTION fail.stubborn(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM fail.poison p WHERE p.stream = e.stream AND p.version = e.version) THEN
        RAISE EXCEPTION 'poisoned: % version %', e.stream, e.version USING ERRCODE = 'check_violation';
    END IF;
    INSERT INTO fail.seen VALUES ('stubborn', e.position, e.stream, e.version);
END
$$;
CREATE FUNCTION fail.steady(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO fail.seen VALUES ('steady', e.position, e.stream, e.version);
END
$$;

CREATE FUNCTION fail.selfdrop(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF e.stream = 'acct-5' AND e.version = 2 THEN
        PERFORM esrc.drop_projection('selfdrop');
    END IF;
    INSERT INTO fail.seen VALUES ('selfdrop', e.position, e.stream, e.version);
END
$$;
CREATE FUNCTION fail.selfreset(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF e.stream = 'acct-6' AND e.version = 2 THEN
        PERFORM esrc.reset_projection('selfreset');
    END IF;
    INSERT INTO fail.seen VALUES ('selfreset', e.position, e.stream, e.version);
END
$$;
CREATE FUNCTION fail.walled(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO fail.seen VALUES ('walled', e.position, e.stream, e.version);
END
$$;
CREATE TABLE fail.walls (stream text, version bigint);
INSERT INTO fail.walls VALUES ('acct-21', 2);
CREATE FUNCTION fail.wall() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.subscription_id = (SELECT subscription_id FROM esrc.projections WHERE name = 'walled')
       AND EXISTS (SELECT FROM fail.walls w JOIN esrc.events e ON e.stream = w.stream AND e.version = w.version
                   WHERE esrc.stream_partition(e.stream, 2) = NEW.partition
                     AND e.position > OLD.checkpoint AND e.position <= NEW.checkpoint) THEN
        RAISE EXCEPTION 'checkpoint of walled partition % may not pass a wall', NEW.partition
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER wall BEFORE UPDATE ON esrc.subscription_checkpoints
    FOR EACH ROW EXECUTE FUNCTION fail.wall();

-- one round of appends: version v of acct-1 .. acct-40, one transaction
CREATE PROCEDURE fail.append_round() LANGUAGE plpgsql AS $$
BEGIN
    PERFORM esrc.append('acct-' || s, 'Deposited', jsonb_build_object('s', s)) FROM generate_series(1, 40) s;
    PERFORM esrc.append('other-' || s, 'Noise', '{}') FROM generate_series(1, 3) s;
END
$$;

CREATE VIEW fail.events AS
SELECT position, stream, version, id, type FROM esrc.events WHERE category = 'acct';

-- what projection p with P partitions should have applied when partition
-- bp_part is stopped at position bp (no partition stopped: bp null) and
-- the event at skipped was skipped
CREATE FUNCTION fail.expected(p text, parts int, bp_part int, bp bigint, skipped bigint)
RETURNS TABLE ("position" bigint, stream text, version bigint)
LANGUAGE sql AS $$
    SELECT position, stream, version FROM fail.events
    WHERE (bp IS NULL OR esrc.stream_partition(stream, parts) <> bp_part OR position < bp)
      AND position IS DISTINCT FROM skipped
$$;
-- fail.seen of p equals fail.expected(...), each event once
CREATE FUNCTION fail.seen_ok(p text, parts int, bp_part int, bp bigint, skipped bigint)
RETURNS boolean
LANGUAGE sql AS $$
    SELECT NOT EXISTS (SELECT position, stream, version FROM fail.seen WHERE projection = p
                       EXCEPT ALL SELECT * FROM fail.expected(p, parts, bp_part, bp, skipped))
       AND NOT EXISTS (SELECT * FROM fail.expected(p, parts, bp_part, bp, skipped)
                       EXCEPT ALL SELECT position, stream, version FROM fail.seen WHERE projection = p)
$$;

CREATE TABLE fail.samples (
    at         timestamptz NOT NULL,
    projection text NOT NULL,
    partition  int NOT NULL,
    state      text,
    attempts   int,
    blocked_position bigint
);
CREATE TABLE fail.sampler_stop (stop bool);
CREATE PROCEDURE fail.sample_status() LANGUAGE plpgsql AS $$
BEGIN
    LOOP
        INSERT INTO fail.samples
        SELECT clock_timestamp(), projection, partition, state, attempts, blocked_position
        FROM esrc.projection_status;
        COMMIT;
        EXIT WHEN EXISTS (SELECT FROM fail.sampler_stop);
        PERFORM pg_sleep(0.05);
    END LOOP;
END
$$;
