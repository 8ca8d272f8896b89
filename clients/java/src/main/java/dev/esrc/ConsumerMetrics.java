package dev.esrc;

/**
 * Hooks a {@link Consumer} calls, for counters and timers of your metrics library. Every method
 * has an empty default; they run on the consumer's thread and must not block.
 */
public interface ConsumerMetrics {
    /** A batch was handled and its acknowledgement committed (exactly once) or sent (at least once). */
    default void batchCommitted(int events, long lastPosition, long handlerNanos) {}

    /** A poll returned no event within its wait. */
    default void idle() {}

    /** A recoverable error (40001, 55000, a lost connection): the consumer waits delayNanos and goes on. */
    default void retrying(EsrcException error, int attempt, long delayNanos) {}

    ConsumerMetrics NONE = new ConsumerMetrics() {};
}
