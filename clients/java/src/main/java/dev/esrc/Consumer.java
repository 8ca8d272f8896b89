package dev.esrc;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.time.Duration;
import java.util.List;
import java.util.Objects;

/**
 * One member of a subscription ({@code esrc.create_subscription}; members share its partitions,
 * each stream's events in order in one member), polling batches with {@code esrc.poll} and
 * handing them to a {@link BatchHandler}.
 *
 * <p><b>Exactly once</b> (the default): poll, handle and {@code esrc.ack} in one transaction, the
 * handler getting its connection. <b>At least once</b>: one autocommit {@code esrc.poll(...,
 * ack => the last position of the batch before)} per batch, then the handler; a crash delivers the
 * unacknowledged batch again, and {@link #stop} acknowledges the last one.
 *
 * <p>40001 and 55000 (a rebalance) drop the batch and poll again after a jittered backoff; a lost
 * connection is opened again with backoff; {@link ConsumerMetrics} is told of each. An exception
 * of the handler rolls the batch back and ends {@link #run} with it. {@link #stop} (from another
 * thread) ends {@code run} after the current batch and cancels a waiting poll; interrupting the
 * consumer's thread ends it after the current batch too.
 */
public final class Consumer implements Runnable, AutoCloseable {
    private static final String POLL_SQL = "SELECT " + EventStore.COLUMNS
        + " FROM esrc.poll(?, ?, ?::int, make_interval(secs => ?::float8), ?::bigint)";
    private static final String ACK_SQL = "SELECT esrc.ack(?, ?, ?::bigint)";

    private final EventStore store;
    private final String subscription;
    private final String member;
    private final BatchHandler handler;
    private final boolean exactlyOnce;
    private final int maxCount;
    private final Duration wait;
    private final Backoff backoff;
    private final ConsumerMetrics metrics;
    private volatile boolean stopped;
    private volatile Statement current;
    private Connection conn;
    private Long pendingAck;

    private Consumer(Builder b) {
        this.store = b.store;
        this.subscription = b.subscription;
        this.member = b.member;
        this.handler = b.handler;
        this.exactlyOnce = b.exactlyOnce;
        this.maxCount = b.maxCount;
        this.wait = b.wait;
        this.backoff = b.backoff;
        this.metrics = b.metrics;
    }

    public static Builder builder(EventStore store, String subscription, String member, BatchHandler handler) {
        return new Builder(store, subscription, member, handler);
    }

    /** A consumer running a projection; creates its subscription unless it exists, and runs setup. */
    public static Builder forProjection(EventStore store, Projection p, String member) {
        try (Connection c = store.connection();
             PreparedStatement ps = c.prepareStatement(
                 "SELECT esrc.create_subscription(?, ?::text[], if_not_exists => true)")) {
            ps.setString(1, p.name());
            if (p.categories() == null) ps.setNull(2, Types.ARRAY);
            else ps.setArray(2, c.createArrayOf("text", p.categories().toArray()));
            ps.execute();
            p.setup(c);
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
        return builder(store, p.name(), member, (batch, c) -> {
            for (RecordedEvent e : batch) {
                if (e.isTombstone()) p.forget(e, c);
                else if (!e.isRedacted()) p.apply(e, c);
            }
        });
    }

    /** Options of a consumer. */
    public static final class Builder {
        private final EventStore store;
        private final String subscription;
        private final String member;
        private final BatchHandler handler;
        private boolean exactlyOnce = true;
        private int maxCount = 100;
        private Duration wait = Duration.ofSeconds(5);
        private Backoff backoff = new Backoff(Duration.ofMillis(50), 2.0, Duration.ofSeconds(5));
        private ConsumerMetrics metrics = ConsumerMetrics.NONE;

        private Builder(EventStore store, String subscription, String member, BatchHandler handler) {
            this.store = Objects.requireNonNull(store);
            this.subscription = Objects.requireNonNull(subscription);
            this.member = Objects.requireNonNull(member);
            this.handler = Objects.requireNonNull(handler);
        }

        /** true (the default): the handler's writes commit with the checkpoint; false: at least once. */
        public Builder exactlyOnce(boolean v) { exactlyOnce = v; return this; }

        /** Events per batch (100). */
        public Builder maxCount(int v) { maxCount = v; return this; }

        /** How long a poll waits for a commit (5 s). */
        public Builder pollWait(Duration v) { wait = v; return this; }

        /** The wait after a recoverable error (50 ms doubling up to 5 s, jittered). */
        public Builder backoff(Backoff v) { backoff = v; return this; }

        public Builder metrics(ConsumerMetrics v) { metrics = v; return this; }

        public Consumer build() { return new Consumer(this); }
    }

    /** Poll and handle until {@link #stop}; rethrows the handler's exception. */
    @Override
    public void run() {
        int failures = 0;
        try {
            while (!stopped) {
                if (Thread.currentThread().isInterrupted()) {
                    stopped = true;   // an interrupt is a stop: after the batch it came in
                    break;
                }
                try {
                    if (conn == null) {
                        conn = store.connection();
                        conn.setAutoCommit(!exactlyOnce);
                    }
                    if (exactlyOnce) exactlyOnceBatch(); else atLeastOnceBatch();
                    failures = 0;
                } catch (HandlerFailure h) {
                    rollback();
                    throw h.error;
                } catch (SQLException | EsrcException e) {
                    EsrcException ee = e instanceof SQLException se ? EsrcException.of(se) : (EsrcException) e;
                    rollback();
                    if (stopped && ee instanceof CancelledException) break;
                    if (ee instanceof ConnectionLostException) {
                        closeQuietly();
                    } else if (!(ee instanceof WrongExpectedVersionException || ee instanceof ObjectStateException
                                 && !(ee instanceof StreamErasedException))) {
                        throw ee;
                    }
                    pendingAck = null;   // the checkpoints moved: that batch is acknowledged by no one
                    failures++;
                    long delay = backoff.delayNanos(failures);
                    metrics.retrying(ee, failures, delay);
                    sleepNanos(delay);
                }
            }
            if (!exactlyOnce && pendingAck != null && conn != null) {
                try (PreparedStatement ps = conn.prepareStatement(ACK_SQL)) {
                    ack(ps, pendingAck);
                    pendingAck = null;
                } catch (SQLException e) {
                    throw EsrcException.of(e);
                }
            }
        } finally {
            closeQuietly();
        }
    }

    private static final class HandlerFailure extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final RuntimeException error;

        HandlerFailure(RuntimeException error) {
            super(error);
            this.error = error;
        }
    }

    private void exactlyOnceBatch() throws SQLException {
        List<RecordedEvent> batch = poll(null);
        if (batch.isEmpty()) {
            conn.commit();
            metrics.idle();
            return;
        }
        long t0 = System.nanoTime();
        callHandler(batch);
        long took = System.nanoTime() - t0;
        long last = batch.get(batch.size() - 1).position();
        try (PreparedStatement ps = conn.prepareStatement(ACK_SQL)) {
            ack(ps, last);
        }
        conn.commit();
        metrics.batchCommitted(batch.size(), last, took);
    }

    private void atLeastOnceBatch() throws SQLException {
        List<RecordedEvent> batch = poll(pendingAck);
        pendingAck = null;
        if (batch.isEmpty()) {
            metrics.idle();
            return;
        }
        long t0 = System.nanoTime();
        callHandler(batch);
        long last = batch.get(batch.size() - 1).position();
        pendingAck = last;
        metrics.batchCommitted(batch.size(), last, System.nanoTime() - t0);
    }

    private void callHandler(List<RecordedEvent> batch) {
        try {
            handler.handle(batch, conn);
        } catch (RuntimeException e) {
            throw new HandlerFailure(e);
        } catch (Exception e) {
            throw new HandlerFailure(new EsrcException("the handler of subscription " + subscription + " failed: " + e,
                e instanceof SQLException se ? se.getSQLState() : null, null, null, e));
        }
    }

    private List<RecordedEvent> poll(Long ack) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(POLL_SQL)) {
            ps.setString(1, subscription);
            ps.setString(2, member);
            ps.setInt(3, maxCount);
            ps.setDouble(4, wait.toNanos() / 1e9);
            EventStore.setLong(ps, 5, ack);
            current = ps;
            if (stopped) return List.of();
            try {
                return store.rows(ps);
            } finally {
                current = null;
            }
        }
    }

    private void ack(PreparedStatement ps, long position) throws SQLException {
        ps.setString(1, subscription);
        ps.setString(2, member);
        ps.setLong(3, position);
        ps.execute();
    }

    /** End {@link #run} after the current batch; a waiting poll is cancelled. Any thread. */
    public void stop() {
        stopped = true;
        Statement s = current;
        if (s != null) {
            try {
                s.cancel();
            } catch (SQLException ignored) {
                // the statement ended meanwhile
            }
        }
    }

    public boolean isStopped() {
        return stopped;
    }

    @Override
    public void close() {
        stop();
    }

    private void rollback() {
        if (conn == null) return;
        try {
            if (!conn.getAutoCommit()) conn.rollback();
        } catch (SQLException e) {
            closeQuietly();
        }
    }

    private void closeQuietly() {
        if (conn == null) return;
        try {
            if (!conn.getAutoCommit()) {
                conn.rollback();
                conn.setAutoCommit(true);   // as the data source gave it
            }
        } catch (SQLException ignored) {
            // broken: close it
        }
        try {
            conn.close();
        } catch (SQLException ignored) {
            // already broken
        }
        conn = null;
    }

    private void sleepNanos(long n) {
        try {
            Thread.sleep(n / 1_000_000, (int) (n % 1_000_000));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            stopped = true;
        }
    }
}
