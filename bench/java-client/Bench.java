// bench/java-client/Bench.java URL: the Java client (clients/java) against the same work written
// by hand with JDBC, alternated turn by turn, as ratios (see run.sh).
//
// 1. handle(): ChangeUserName commands (one thread, sequential) on BENCH_STREAMS users, each one
//    transaction that reads the stream, folds it (Jackson into records), decides and appends with
//    the expected version and an id derived from the command id; against the hand-written
//    read_stream / fold / append / commit loop with the same decoding, ids and 40001 retry.
// 2. consumer: a subscription of BENCH_EVENTS pre-filled events consumed exactly once in batches
//    of 100, each batch's rows inserted (JDBC batch) in the transaction that acks it; Consumer
//    against the hand-written BEGIN / poll / insert / ack / COMMIT loop.
// Both variants use one connection each, taking turns of 20 commands (batches), so that the
// machine's load hits both alike. Prints per-round throughput, p50/p99 and the median ratio.
// Asserts nothing (the machine is shared).

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.esrc.Command;
import dev.esrc.CommandHandler;
import dev.esrc.Consumer;
import dev.esrc.ConsumerMetrics;
import dev.esrc.Decider;
import dev.esrc.EventIds;
import dev.esrc.EventStore;
import dev.esrc.EventTypes;
import dev.esrc.RecordedEvent;
import java.io.PrintWriter;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicReference;
import java.util.logging.Logger;
import javax.sql.DataSource;

public class Bench {
    static final int ROUNDS = Integer.parseInt(System.getenv().getOrDefault("BENCH_ROUNDS", "5"));
    static final int COMMANDS = Integer.parseInt(System.getenv().getOrDefault("BENCH_COMMANDS", "2000"));
    static final int STREAMS = Integer.parseInt(System.getenv().getOrDefault("BENCH_STREAMS", "100"));
    static final int EVENTS = Integer.parseInt(System.getenv().getOrDefault("BENCH_EVENTS", "20000"));
    static final int TURN = 20;

    record UserRegistered(String email, String name) {}
    record UserNameChanged(String name) {}
    record ChangeUserName(UUID commandId, String name) implements Command {}
    record User(String email, String name) {}

    static User evolve(User s, Object e) {
        if (e instanceof UserRegistered r) return new User(r.email(), r.name());
        return new User(s.email(), ((UserNameChanged) e).name());
    }

    static List<Object> decide(ChangeUserName c, User s) {
        if (s == null) throw new IllegalStateException("unknown user");
        return List.of(new UserNameChanged(c.name()));
    }

    static final ObjectMapper JSON = new ObjectMapper().configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);

    /** One connection as a DataSource (close() is a no-op): the client and the hand loop get one each. */
    static DataSource single(Connection c) {
        Connection keep = (Connection) Proxy.newProxyInstance(Connection.class.getClassLoader(),
            new Class<?>[] {Connection.class}, (p, m, a) -> {
                if (m.getName().equals("close")) return null;
                try {
                    return m.invoke(c, a);
                } catch (java.lang.reflect.InvocationTargetException e) {
                    throw e.getCause();
                }
            });
        return new DataSource() {
            public Connection getConnection() { return keep; }
            public Connection getConnection(String u, String p) { return keep; }
            public PrintWriter getLogWriter() { return null; }
            public void setLogWriter(PrintWriter out) {}
            public void setLoginTimeout(int s) {}
            public int getLoginTimeout() { return 0; }
            public Logger getParentLogger() { return null; }
            public <T> T unwrap(Class<T> i) { return null; }
            public boolean isWrapperFor(Class<?> i) { return false; }
        };
    }

    /** The hand-written load-decide-append, with the same decoding, ids and retry. */
    static long handByHand(Connection c, String stream, ChangeUserName cmd) throws Exception {
        for (int attempt = 1; ; attempt++) {
            c.setAutoCommit(false);
            try {
                User state = null;
                long version = -1;
                try (PreparedStatement ps = c.prepareStatement(
                        "SELECT version, type, data::text FROM esrc.read_stream(?)")) {
                    ps.setString(1, stream);
                    try (ResultSet rs = ps.executeQuery()) {
                        while (rs.next()) {
                            version = rs.getLong(1);
                            String type = rs.getString(2);
                            Object e = type.equals("UserRegistered") ? JSON.readValue(rs.getString(3), UserRegistered.class)
                                : JSON.readValue(rs.getString(3), UserNameChanged.class);
                            state = evolve(state, e);
                        }
                    }
                }
                List<Object> events = decide(cmd, state);
                try (PreparedStatement ps = c.prepareStatement(
                        "SELECT esrc.append(?, ?, ?::text::jsonb, NULL, ?::bigint, ?::uuid)")) {
                    ps.setString(1, stream);
                    ps.setString(2, "UserNameChanged");
                    ps.setString(3, JSON.writeValueAsString(events.get(0)));
                    ps.setLong(4, version);
                    ps.setObject(5, EventIds.of(cmd.commandId(), 0));
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        version = rs.getLong(1);
                    }
                }
                c.commit();
                return version;
            } catch (SQLException e) {
                c.rollback();
                if (!"40001".equals(e.getSQLState()) || attempt >= 10) throw e;
            } finally {
                c.setAutoCommit(true);
            }
        }
    }

    static double pct(long[] sorted, double p) {
        return sorted[Math.min(sorted.length - 1, (int) Math.floor(p * sorted.length))] / 1e6;
    }

    static double median(List<Double> xs) {
        List<Double> s = new ArrayList<>(xs);
        s.sort(null);
        return s.size() % 2 == 1 ? s.get(s.size() / 2) : (s.get(s.size() / 2 - 1) + s.get(s.size() / 2)) / 2;
    }

    public static void main(String[] args) throws Exception {
        String url = args[0];
        Connection clientConn = DriverManager.getConnection(url);
        Connection handConn = DriverManager.getConnection(url);
        EventTypes types = new EventTypes().register(UserRegistered.class).register(UserNameChanged.class);
        EventStore store = new EventStore(single(clientConn), types);
        Decider<ChangeUserName, User, Object> d = Decider.of(() -> null, Bench::evolve, Bench::decide);
        CommandHandler<ChangeUserName, User, Object> handler = new CommandHandler<>(store, d);
        Random rnd = new Random(42);
        List<Double> handleRatios = new ArrayList<>();
        System.out.printf("handle(): %d rounds of %d commands on %d users per variant, turns of %d%n",
            ROUNDS, COMMANDS, STREAMS, TURN);
        for (int round = 1; round <= ROUNDS; round++) {
            String[] mine = new String[STREAMS];
            String[] hand = new String[STREAMS];
            for (int i = 0; i < STREAMS; i++) {
                mine[i] = "user-" + UUID.randomUUID();
                hand[i] = "user-" + UUID.randomUUID();
                store.append(mine[i], new UserRegistered("u" + i + "@x", "U" + i));
                store.append(hand[i], new UserRegistered("u" + i + "@x", "U" + i));
            }
            long[] lc = new long[COMMANDS];
            long[] lh = new long[COMMANDS];
            long tc = 0;
            long th = 0;
            for (int done = 0; done < COMMANDS; done += TURN) {
                for (int k = done; k < Math.min(COMMANDS, done + TURN); k++) {
                    ChangeUserName cmd = new ChangeUserName(UUID.randomUUID(), "N" + k);
                    String s = mine[rnd.nextInt(STREAMS)];
                    long t0 = System.nanoTime();
                    handler.handle(s, cmd);
                    lc[k] = System.nanoTime() - t0;
                    tc += lc[k];
                }
                for (int k = done; k < Math.min(COMMANDS, done + TURN); k++) {
                    ChangeUserName cmd = new ChangeUserName(UUID.randomUUID(), "N" + k);
                    String s = hand[rnd.nextInt(STREAMS)];
                    long t0 = System.nanoTime();
                    handByHand(handConn, s, cmd);
                    lh[k] = System.nanoTime() - t0;
                    th += lh[k];
                }
            }
            Arrays.sort(lc);
            Arrays.sort(lh);
            double rc = COMMANDS / (tc / 1e9);
            double rh = COMMANDS / (th / 1e9);
            handleRatios.add(rc / rh);
            System.out.printf("  round %d: handle() %.0f/s p50 %.2f ms p99 %.2f ms | hand JDBC %.0f/s p50 %.2f ms p99 %.2f ms | ratio %.3f%n",
                round, rc, pct(lc, 0.5), pct(lc, 0.99), rh, pct(lh, 0.5), pct(lh, 0.99), rc / rh);
        }
        System.out.printf("handle() / hand-written JDBC, median of rounds: %.3fx%n", median(handleRatios));

        // consumers
        List<Double> consumerRatios = new ArrayList<>();
        System.out.printf("consumer: %d rounds of %d events per variant, batches of 100, turns of %d batches%n",
            ROUNDS, EVENTS, TURN);
        try (Statement s = handConn.createStatement()) {
            s.execute("CREATE TABLE IF NOT EXISTS bench_lines (position bigint, stream text)");
        }
        for (int round = 1; round <= ROUNDS; round++) {
            String cat = "bench" + round + "x" + UUID.randomUUID().toString().substring(0, 6);
            List<dev.esrc.NewEvent> fill = new ArrayList<>();
            for (int i = 0; i < EVENTS; i++) {
                fill.add(new dev.esrc.NewEvent("Paid", "{\"i\": " + i + ", \"total\": 42}"));
                if (fill.size() == 500) {
                    store.appendEvents(cat + "-" + (i / 500), fill, null);
                    fill.clear();
                }
            }
            if (!fill.isEmpty()) store.appendEvents(cat + "-last", fill, null);
            try (Statement s = handConn.createStatement()) {
                s.execute("SELECT esrc.create_subscription('" + cat + "c', ARRAY['" + cat + "'])");
                s.execute("SELECT esrc.create_subscription('" + cat + "h', ARRAY['" + cat + "'])");
            }
            long[] tcons = {0};
            long th = 0;
            int[] gotC = {0};
            int gotH = 0;
            AtomicReference<Consumer> self = new AtomicReference<>();
            int[] turnBatches = {0};
            long[] turnStart = {0};
            boolean handDone = false;
            while (gotC[0] < EVENTS || !handDone) {
                if (gotC[0] < EVENTS) {
                    // a turn of the client: TURN batches (a new Consumer per turn costs one
                    // version-checked connection from the single-connection source: nothing)
                    turnBatches[0] = 0;
                    Consumer c = Consumer.builder(store, cat + "c", "m", (batch, conn) -> {
                        try (PreparedStatement ps = conn.prepareStatement("INSERT INTO bench_lines VALUES (?, ?)")) {
                            for (RecordedEvent e : batch) {
                                ps.setLong(1, e.position());
                                ps.setString(2, e.stream());
                                ps.addBatch();
                            }
                            ps.executeBatch();
                        }
                    }).maxCount(100).pollWait(Duration.ZERO).metrics(new ConsumerMetrics() {
                        @Override public void batchCommitted(int n, long last, long nanos) {
                            gotC[0] += n;
                            if (++turnBatches[0] == TURN || gotC[0] >= EVENTS) self.get().stop();
                        }
                        @Override public void idle() { self.get().stop(); }
                    }).build();
                    self.set(c);
                    turnStart[0] = System.nanoTime();
                    c.run();
                    tcons[0] += System.nanoTime() - turnStart[0];
                }
                if (!handDone) {
                    long t0 = System.nanoTime();
                    for (int b = 0; b < TURN && !handDone; b++) {
                        int n = handBatch(handConn, cat + "h");
                        gotH += n;
                        if (n == 0 || gotH >= EVENTS) handDone = true;
                    }
                    th += System.nanoTime() - t0;
                }
            }
            double rc = gotC[0] / (tcons[0] / 1e9);
            double rh = gotH / (th / 1e9);
            consumerRatios.add(rc / rh);
            System.out.printf("  round %d: Consumer %.0f events/s | hand poll/ack %.0f events/s | ratio %.3f%n",
                round, rc, rh, rc / rh);
        }
        System.out.printf("Consumer / hand-written poll/ack loop, median of rounds: %.3fx%n", median(consumerRatios));
        clientConn.close();
        handConn.close();
    }

    /** One batch by hand: BEGIN; poll; insert; ack; COMMIT. The events it handled. */
    static int handBatch(Connection c, String sub) throws SQLException {
        c.setAutoCommit(false);
        try {
            List<long[]> rows = new ArrayList<>();
            List<String> streams = new ArrayList<>();
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT position, stream, version, type, data::text, metadata::text, id, recorded_at, tags"
                        + " FROM esrc.poll(?, 'm', 100)")) {
                ps.setString(1, sub);
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next()) {
                        rows.add(new long[] {rs.getLong(1), rs.getLong(3)});
                        streams.add(rs.getString(2));
                        rs.getString(4);
                        rs.getString(5);
                        rs.getString(6);
                        rs.getObject(7, UUID.class);
                        rs.getObject(8, java.time.OffsetDateTime.class);
                        rs.getArray(9);
                    }
                }
            }
            if (rows.isEmpty()) {
                c.commit();
                return 0;
            }
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO bench_lines VALUES (?, ?)")) {
                for (int i = 0; i < rows.size(); i++) {
                    ps.setLong(1, rows.get(i)[0]);
                    ps.setString(2, streams.get(i));
                    ps.addBatch();
                }
                ps.executeBatch();
            }
            try (PreparedStatement ps = c.prepareStatement("SELECT esrc.ack(?, 'm', ?)")) {
                ps.setString(1, sub);
                ps.setLong(2, rows.get(rows.size() - 1)[0]);
                ps.execute();
            }
            c.commit();
            return rows.size();
        } finally {
            c.setAutoCommit(true);
        }
    }
}
