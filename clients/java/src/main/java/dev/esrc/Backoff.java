package dev.esrc;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Full-jitter exponential backoff: attempt n waits a uniform time in
 * [0, min(maximum, first * factor^(n - 1))].
 */
public record Backoff(Duration first, double factor, Duration maximum) {
    /** 2 ms, doubling, at most 250 ms: the command handler's default. */
    public static final Backoff DEFAULT = new Backoff(Duration.ofMillis(2), 2.0, Duration.ofMillis(250));

    /** The wait before attempt n + 1, in nanoseconds. */
    public long delayNanos(int attempt) {
        double bound = Math.min(maximum.toNanos(), first.toNanos() * Math.pow(factor, Math.max(0, attempt - 1)));
        return (long) (ThreadLocalRandom.current().nextDouble() * bound);
    }

    /** Sleep the delay of an attempt. */
    public void sleep(int attempt) throws InterruptedException {
        long n = delayNanos(attempt);
        if (n > 0) Thread.sleep(n / 1_000_000, (int) (n % 1_000_000));
    }
}
