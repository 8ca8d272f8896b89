-- test/substress/setup.sql: the tables of the subscription tests
-- (run-35-subscribe-group.sh, run-36-subscribe-crash.sh).  psql variable
-- partitions: the subscription's.
CREATE EXTENSION esrc;
SELECT esrc.create_subscription('g', ARRAY['acct'], :partitions);
SELECT esrc.create_subscription('out', ARRAY['acct'], :partitions);

-- what the consumers (test/substress/consumer.py) processed: id gives
-- the order of the inserts, which for committed rows of one stream is
-- their commit order (a member sees a stream's next events only once the
-- previous holder's transaction, its results with it, has committed)
CREATE TABLE results_in (
    id       bigserial PRIMARY KEY,
    position bigint NOT NULL,
    stream   text NOT NULL,
    version  bigint NOT NULL,
    member   text NOT NULL,
    at       timestamptz NOT NULL
);
CREATE TABLE results_out (LIKE results_in INCLUDING ALL);

-- esrc.subscription_status sampled every 100 ms by CALL sample_status()
-- until a row is put in sampler_stop
CREATE TABLE status_samples (
    sample    int NOT NULL,
    at        timestamptz NOT NULL,
    partition int NOT NULL,
    member    text,
    checkpoint bigint
);
CREATE TABLE sampler_stop (stop bool);
CREATE PROCEDURE sample_status() LANGUAGE plpgsql AS $$
DECLARE
    n int := 0;
BEGIN
    LOOP
        n := n + 1;
        INSERT INTO status_samples
        SELECT n, clock_timestamp(), partition, member, checkpoint
        FROM esrc.subscription_status WHERE subscription = 'g';
        COMMIT;
        EXIT WHEN EXISTS (SELECT FROM sampler_stop);
        PERFORM pg_sleep(0.1);
    END LOOP;
END
$$;

-- who holds how many partitions of a subscription now
CREATE VIEW shares AS
SELECT subscription, member, count(*) AS held
FROM esrc.subscription_status WHERE member IS NOT NULL
GROUP BY 1, 2;
