-- A reader following esrc.read_all() while the writers run.  It keeps
-- everything it read, in read order, and stops when it has read the
-- 'stress-done' marker event.  (One long transaction is fine: read_all
-- always reads the latest settled events.)
CREATE TABLE stress_seen (seq bigserial PRIMARY KEY, position bigint, stream text, version bigint);
SET stress.start_position = :start_position;
DO $$
DECLARE
    after bigint := current_setting('stress.start_position')::bigint;
    got int;
    done boolean := false;
    deadline timestamptz := clock_timestamp() + interval '10 minutes';
BEGIN
    WHILE NOT done LOOP
        INSERT INTO stress_seen (position, stream, version)
            SELECT position, stream, version FROM esrc.read_all(after, 500);
        GET DIAGNOSTICS got = ROW_COUNT;
        IF got > 0 THEN
            SELECT max(position) INTO after FROM stress_seen;
            done := EXISTS (SELECT 1 FROM stress_seen WHERE stream = 'stress-done');
        ELSE
            PERFORM pg_sleep(0.01);
        END IF;
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'reader did not see the end marker in time';
        END IF;
    END LOOP;
END
$$;
