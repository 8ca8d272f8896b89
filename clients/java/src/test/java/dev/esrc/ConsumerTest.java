package dev.esrc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import javax.sql.DataSource;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

class ConsumerTest {
    static DataSource ds;
    static EventStore store;

    @BeforeEach
    void setUp() {
        ds = Db.dataSource();
        store = new EventStore(ds, Users.types());
    }

    /** A category with n events over three streams, a subscription of it and a ledger table; the category. */
    static String fixture(int n) {
        String cat = "pay" + UUID.randomUUID().toString().substring(0, 8);
        for (int i = 0; i < n; i++) {
            store.appendEvents(cat + "-" + (i % 3), List.of(new NewEvent("Paid", "{\"i\": " + i + "}")), null);
        }
        Db.exec(ds, "SELECT esrc.create_subscription('" + cat + "', ARRAY['" + cat + "'])");
        Db.exec(ds, "CREATE TABLE " + cat + "_ledger (position bigint, stream text)");
        return cat;
    }

    static void insert(Connection c, String cat, List<RecordedEvent> batch) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("INSERT INTO " + cat + "_ledger VALUES (?, ?)")) {
            for (RecordedEvent e : batch) {
                ps.setLong(1, e.position());
                ps.setString(2, e.stream());
                ps.addBatch();
            }
            ps.executeBatch();
        }
    }

    static long[] counts(String cat) {
        try (Connection c = ds.getConnection(); Statement s = c.createStatement();
             ResultSet rs = s.executeQuery("SELECT count(*), count(DISTINCT position) FROM " + cat + "_ledger l"
                 + " WHERE position IN (SELECT position FROM esrc.read_category('" + cat + "', 0, 1000))")) {
            rs.next();
            return new long[] {rs.getLong(1), rs.getLong(2)};
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
    }

    /** Stops the consumer once `total` events were committed. */
    static ConsumerMetrics stopAt(AtomicReference<Consumer> self, int total, AtomicInteger retries) {
        AtomicInteger seen = new AtomicInteger();
        return new ConsumerMetrics() {
            @Override
            public void batchCommitted(int events, long lastPosition, long nanos) {
                if (seen.addAndGet(events) >= total) self.get().stop();
            }

            @Override
            public void retrying(EsrcException error, int attempt, long delayNanos) {
                retries.incrementAndGet();
            }
        };
    }

    @Test
    void exactlyOnceHoldsWhenAConsumerDiesMidBatch() {
        String cat = fixture(30);
        // 1: the handler writes its rows and then throws in the second batch
        AtomicInteger batches = new AtomicInteger();
        IllegalStateException boom = new IllegalStateException("killed mid-batch");
        Consumer first = Consumer.builder(store, cat, "m1", (batch, c) -> {
            insert(c, cat, batch);
            if (batches.incrementAndGet() == 2) throw boom;
        }).maxCount(10).pollWait(Duration.ZERO).build();
        assertSame(boom, assertThrows(IllegalStateException.class, first::run));
        assertEquals(10, counts(cat)[0]); // the second batch's rows rolled back with it
        // 2: the connection is killed by the server after the handler wrote, before the ack
        AtomicReference<Consumer> self = new AtomicReference<>();
        AtomicInteger retries = new AtomicInteger();
        AtomicInteger kills = new AtomicInteger();
        Consumer second = Consumer.builder(store, cat, "m1", (batch, c) -> {
            insert(c, cat, batch);
            if (kills.getAndIncrement() == 0) terminate(c);
        }).maxCount(10).pollWait(Duration.ZERO).metrics(stopAt(self, 20, retries)).build();
        self.set(second);
        second.run();
        assertTrue(retries.get() >= 1, "the consumer met the lost connection and went on");
        long[] n = counts(cat);
        assertEquals(30, n[0], "every event's row once");
        assertEquals(30, n[1]);
    }

    @Test
    void twoMembersOfAGroupShareTheWorkExactlyOnce() throws Exception {
        String cat = "grp" + UUID.randomUUID().toString().substring(0, 8);
        for (int i = 0; i < 40; i++) {
            store.appendEvents(cat + "-" + (i % 8), List.of(new NewEvent("Paid", "{\"i\": " + i + "}")), null);
        }
        Db.exec(ds, "SELECT esrc.create_subscription('" + cat + "', ARRAY['" + cat + "'], 2)");
        Db.exec(ds, "CREATE TABLE " + cat + "_ledger (position bigint, stream text)");
        AtomicInteger total = new AtomicInteger();
        List<Consumer> members = new ArrayList<>();
        ConsumerMetrics stopAll = new ConsumerMetrics() {
            @Override
            public void batchCommitted(int events, long lastPosition, long nanos) {
                if (total.addAndGet(events) >= 40) members.forEach(Consumer::stop);
            }
        };
        for (String m : List.of("a", "b")) {
            members.add(Consumer.builder(store, cat, m, (batch, c) -> insert(c, cat, batch))
                .maxCount(5).pollWait(Duration.ofMillis(200)).metrics(stopAll).build());
        }
        List<Thread> threads = new ArrayList<>();
        AtomicReference<Throwable> failed = new AtomicReference<>();
        for (Consumer c : members) {
            Thread t = new Thread(() -> {
                try {
                    c.run();
                } catch (Throwable e) {
                    failed.set(e);
                    members.forEach(Consumer::stop);
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) t.join(120_000);
        assertEquals(null, failed.get());
        long[] n = counts(cat);
        assertEquals(40, n[0]);
        assertEquals(40, n[1]);
    }

    @Test
    @Timeout(120)   // without the interrupt check, run() polls on forever
    void anInterruptEndsRunAfterTheBatchAndExactlyOnceHolds() {
        String cat = fixture(30);
        AtomicInteger batches = new AtomicInteger();
        Consumer first = Consumer.builder(store, cat, "m1", (batch, c) -> {
            insert(c, cat, batch);
            if (batches.incrementAndGet() == 2) Thread.currentThread().interrupt();
        }).maxCount(10).pollWait(Duration.ZERO).build();
        first.run();
        assertTrue(Thread.interrupted(), "the interrupt is left set for the caller");
        assertEquals(20, counts(cat)[0]); // the batch the interrupt came in was committed with its ack
        AtomicReference<Consumer> self = new AtomicReference<>();
        Consumer second = Consumer.builder(store, cat, "m1", (batch, c) -> insert(c, cat, batch))
            .maxCount(10).pollWait(Duration.ZERO).metrics(new ConsumerMetrics() {
                @Override public void idle() { self.get().stop(); }
            }).build();
        self.set(second);
        second.run();
        long[] n = counts(cat);
        assertEquals(30, n[0]);
        assertEquals(30, n[1]);
    }

    static void terminate(Connection victim) throws SQLException {
        long pid;
        try (Statement s = victim.createStatement(); ResultSet rs = s.executeQuery("SELECT pg_backend_pid()")) {
            rs.next();
            pid = rs.getLong(1);
        }
        Db.exec(ds, "SELECT pg_terminate_backend(" + pid + ")");
    }

    @Test
    void atLeastOnceDeliversTheUnacknowledgedBatchAgain() {
        String cat = fixture(30);
        AtomicInteger batches = new AtomicInteger();
        Consumer first = Consumer.builder(store, cat, "m1", (batch, c) -> {
            assertTrue(c.getAutoCommit());
            insert(c, cat, batch);
            if (batches.incrementAndGet() == 2) throw new IllegalStateException("crash after the effect");
        }).exactlyOnce(false).maxCount(10).pollWait(Duration.ZERO).build();
        assertThrows(IllegalStateException.class, first::run);
        AtomicReference<Consumer> self = new AtomicReference<>();
        Consumer second = Consumer.builder(store, cat, "m1", (batch, c) -> insert(c, cat, batch))
            .exactlyOnce(false).maxCount(10).pollWait(Duration.ZERO)
            .metrics(stopAt(self, 20, new AtomicInteger())).build();
        self.set(second);
        second.run();
        long[] n = counts(cat);
        assertEquals(30, n[1], "every event at least once");
        assertEquals(40, n[0], "the second batch twice: its effects were outside the acknowledgement");
        // the stop acknowledged the last batch: nothing comes again
        List<RecordedEvent> again = new ArrayList<>();
        Consumer third = Consumer.builder(store, cat, "m1", (batch, c) -> again.addAll(batch))
            .pollWait(Duration.ZERO).metrics(new ConsumerMetrics() {
                @Override public void idle() { self.get().stop(); }
            }).build();
        self.set(third);
        third.run();
        assertEquals(List.of(), again);
    }

    @Test
    void stopCancelsAWaitingPoll() throws Exception {
        String cat = fixture(0);
        Consumer c = Consumer.builder(store, cat, "waiter", (batch, conn) -> {}).pollWait(Duration.ofSeconds(600)).build();
        AtomicReference<Throwable> failed = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                c.run();
            } catch (Throwable e) {
                failed.set(e);
            }
        });
        t.start();
        // wait until the poll is in the server (bounded)
        for (int i = 0; i < 600 && !polling(cat); i++) Thread.sleep(50);
        assertTrue(polling(cat), "the consumer's poll never showed in pg_stat_activity");
        c.stop();
        t.join(60_000);   // without the cancel, the poll would wait its 600 s
        assertFalse(t.isAlive(), "stop() did not end run()");
        assertEquals(null, failed.get());
    }

    static boolean polling(String cat) {
        try (Connection c = ds.getConnection(); Statement s = c.createStatement();
             ResultSet rs = s.executeQuery("SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
                 + " AND query LIKE '%esrc.poll%' AND pid <> pg_backend_pid()")) {
            rs.next();
            return rs.getLong(1) > 0;
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
    }

    /** User names by stream; forgets an erased stream. */
    static final class UserNames implements Projection {
        final String name;
        final boolean forgets;

        UserNames(String name, boolean forgets) {
            this.name = name;
            this.forgets = forgets;
        }

        @Override public String name() { return name; }

        @Override public List<String> categories() { return List.of(name); }

        @Override
        public void setup(Connection c) throws SQLException {
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE IF NOT EXISTS " + name + "_names (stream text PRIMARY KEY, name text)");
            }
        }

        @Override
        public void apply(RecordedEvent e, Connection c) throws SQLException {
            String newName = e.event() instanceof Users.UserRegistered r ? r.name()
                : e.event() instanceof Users.UserNameChanged n ? n.name() : null;
            if (newName == null) return;
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO " + name + "_names VALUES (?, ?)"
                     + " ON CONFLICT (stream) DO UPDATE SET name = excluded.name")) {
                ps.setString(1, e.stream());
                ps.setString(2, newName);
                ps.execute();
            }
        }

        @Override
        public void forget(RecordedEvent t, Connection c) throws SQLException {
            if (!forgets) Projection.super.forget(t, c);
            try (PreparedStatement ps = c.prepareStatement("DELETE FROM " + name + "_names WHERE stream = ?")) {
                ps.setString(1, t.stream());
                ps.execute();
            }
        }
    }

    static List<String> names(String p) {
        List<String> out = new ArrayList<>();
        try (Connection c = ds.getConnection(); Statement s = c.createStatement();
             ResultSet rs = s.executeQuery("SELECT name FROM " + p + "_names ORDER BY name")) {
            while (rs.next()) out.add(rs.getString(1));
        } catch (SQLException e) {
            throw EsrcException.of(e);
        }
        return out;
    }

    static void runToTheEnd(Consumer.Builder b) {
        AtomicReference<Consumer> self = new AtomicReference<>();
        Consumer c = b.pollWait(Duration.ZERO).metrics(new ConsumerMetrics() {
            @Override public void idle() { self.get().stop(); }
        }).build();
        self.set(c);
        c.run();
    }

    @Test
    void aProjectionForgetsAnErasedStream() {
        String p = "uproj" + UUID.randomUUID().toString().substring(0, 8);
        var h = new CommandHandler<>(store, Users.DECIDER);
        String ann = p + "-" + UUID.randomUUID();
        String bob = p + "-" + UUID.randomUUID();
        h.handle(ann, new Users.RegisterUser("ann@x", "Ann"));
        h.handle(bob, new Users.RegisterUser("bob@x", "Bob"));
        h.handle(bob, new Users.ChangeUserName("Robert"));
        runToTheEnd(Consumer.forProjection(store, new UserNames(p, true), "w1"));
        assertEquals(List.of("Ann", "Robert"), names(p));
        Db.exec(ds, "SELECT esrc.erase_stream('" + ann + "', 'GDPR request')");
        runToTheEnd(Consumer.forProjection(store, new UserNames(p, true), "w1"));
        assertEquals(List.of("Robert"), names(p));
        // a projection that reaches the stream after its erasure: redacted events skipped, the tombstone forgets
        String late = p + "late";
        String carl = late + "-" + UUID.randomUUID();
        h.handle(carl, new Users.RegisterUser("carl@x", "Carl"));
        Db.exec(ds, "SELECT esrc.erase_stream('" + carl + "', 'GDPR request')");
        h.handle(late + "-" + UUID.randomUUID(), new Users.RegisterUser("dora@x", "Dora"));
        runToTheEnd(Consumer.forProjection(store, new UserNames(late, true), "w1"));
        assertEquals(List.of("Dora"), names(late));
        // one without forget fails on the tombstone, and its batch is rolled back
        String strict = p + "strict";
        String eve = strict + "-" + UUID.randomUUID();
        h.handle(eve, new Users.RegisterUser("eve@x", "Eve"));
        Db.exec(ds, "SELECT esrc.erase_stream('" + eve + "', 'GDPR request')");
        assertThrows(UnsupportedOperationException.class,
            () -> runToTheEnd(Consumer.forProjection(store, new UserNames(strict, false), "w1")));
        assertEquals(List.of(), names(strict));
    }
}
