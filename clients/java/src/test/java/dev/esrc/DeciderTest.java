package dev.esrc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import javax.sql.DataSource;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

class DeciderTest {
    static DataSource ds;
    static EventStore store;

    @BeforeEach
    void setUp() {
        ds = Db.dataSource();
        store = new EventStore(ds, Users.types());
    }

    /** Three threads run a command each at once; their outcomes. */
    static <T> List<T> atOnce(int n, Supplier<T> task) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(n);
        try {
            CountDownLatch go = new CountDownLatch(1);
            List<Future<T>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++) fs.add(pool.submit(() -> { go.await(); return task.get(); }));
            go.countDown();
            List<T> out = new ArrayList<>();
            for (Future<T> f : fs) out.add(f.get(60, TimeUnit.SECONDS));
            return out;
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void seedScenarioThreeConcurrentRenamesEndAtVersionsOneTwoThree() throws Exception {
        CommandHandler<Users.UserCommand, Users.User, Users.UserEvent> h = new CommandHandler<>(store, Users.DECIDER);
        String s = Db.unique("user");
        Outcome<Users.User, Users.UserEvent> reg = h.handle(s, new Users.RegisterUser("alex@example.com", "Alex"));
        assertEquals(0, reg.version());
        AtomicInteger n = new AtomicInteger();
        List<Outcome<Users.User, Users.UserEvent>> outs =
            atOnce(3, () -> h.handle(s, new Users.ChangeUserName("Alex" + n.incrementAndGet())));
        Set<Long> versions = new HashSet<>();
        for (var o : outs) versions.add(o.version());
        assertEquals(Set.of(1L, 2L, 3L), versions);
        assertEquals(3, store.streamVersion(s));
        // each outcome's state is the state after its own event
        for (var o : outs) assertEquals(((Users.UserNameChanged) o.events().get(0)).name(), o.state().name());
        // rejected commands write nothing
        assertThrows(Users.AlreadyRegistered.class, () -> h.handle(s, new Users.RegisterUser("a@x", "A")));
        assertThrows(Users.UnknownUser.class, () -> h.handle(Db.unique("user"), new Users.ChangeUserName("B")));
        assertEquals(3, store.streamVersion(s));
    }

    @Test
    void seedScenarioFromTheSnapshotTable() throws Exception {
        String cat = "usnap" + UUID.randomUUID().toString().substring(0, 8);
        Db.exec(ds, "SELECT esrc.create_snapshot('" + cat + "_s', '" + cat + "', 'esrc.merge(jsonb, esrc.event)')");
        AtomicInteger fromSnapshot = new AtomicInteger();
        var json = new JacksonSerializer();
        Decider<Users.UserCommand, Users.User, Users.UserEvent> d = Decider.of(() -> null, Users::evolve, Users::decide,
            text -> {
                fromSnapshot.incrementAndGet();
                JsonNode n = json.readTree(text);
                return new Users.User(n.get("email").asText(), n.get("name").asText());
            });
        EventStore snapStore = new EventStore(ds, Users.types());
        var h = new CommandHandler<>(snapStore, d);
        String s = cat + "-" + UUID.randomUUID();
        assertEquals(0, h.handle(s, new Users.RegisterUser("a@x", "A")).version());
        assertEquals(0, fromSnapshot.get()); // version -1: the initial state
        AtomicInteger k = new AtomicInteger();
        Set<Long> versions = new HashSet<>();
        for (var o : atOnce(3, () -> h.handle(s, new Users.ChangeUserName("N" + k.incrementAndGet())))) {
            versions.add(o.version());
        }
        assertEquals(Set.of(1L, 2L, 3L), versions);
        assertTrue(fromSnapshot.get() >= 3, "the handler loaded the snapshot row " + fromSnapshot.get() + " times");
        // the fold gives the same state as the snapshot
        var folding = new CommandHandler<>(snapStore, d, 10, Backoff.DEFAULT, false);
        int before = fromSnapshot.get();
        var out = folding.handle(s, new Users.ChangeUserName("Last"));
        assertEquals(4, out.version());
        assertEquals(before, fromSnapshot.get());
    }

    @Test
    void aCommandRetriedAfterALostCommitWritesNothingTwice() {
        LostCommit lossy = new LostCommit(ds);
        EventStore lossyStore = new EventStore(lossy, Users.types());
        var h = new CommandHandler<>(lossyStore, Users.DECIDER);
        String s = Db.unique("user");
        h.handle(s, new Users.RegisterUser("a@x", "A"));
        Users.ChangeUserName cmd = new Users.ChangeUserName("B");
        lossy.failures.set(1);
        ConnectionLostException lost = assertThrows(ConnectionLostException.class, () -> h.handle(s, cmd));
        assertEquals("08006", lost.sqlState());
        assertEquals(1, store.streamVersion(s)); // the commit went through
        // the caller retries the same command: the same event id, nothing written again
        Outcome<Users.User, Users.UserEvent> again = h.handle(s, cmd);
        assertEquals(1, again.version());
        assertEquals(1, store.streamVersion(s));
        assertEquals(EventIds.of(cmd.commandId(), 0), store.readStream(s, 1, 1).get(0).id());
        // a new command (a new id) is written
        assertEquals(2, h.handle(s, new Users.ChangeUserName("B")).version());
    }

    @Test
    void retriesAreBoundedAndKeepThe40001() {
        // a decider whose decide appends behind the handler's back: every attempt meets 40001
        String s = Db.unique("user");
        store.append(s, new Users.UserRegistered("a@x", "A"));
        AtomicInteger attempts = new AtomicInteger();
        Decider<Users.UserCommand, Users.User, Users.UserEvent> racing = Decider.of(() -> null, Users::evolve,
            (c, st) -> {
                attempts.incrementAndGet();
                store.append(s, new Users.UserNameChanged("other"));
                return Users.decide(c, st);
            });
        var h = new CommandHandler<>(store, racing, 3, Backoff.DEFAULT, true);
        RetriesExhaustedException e = assertThrows(RetriesExhaustedException.class,
            () -> h.handle(s, new Users.ChangeUserName("B")));
        assertEquals("40001", e.sqlState());
        assertEquals(3, attempts.get());
        assertEquals(3, store.streamVersion(s)); // only the racing appends
    }

    // 16 threads, random commands on a few accounts; invariants checked by replaying the log

    record Opened(String owner) {}
    record Deposited(long amount) {}
    record Withdrawn(long amount) {}
    record Account(boolean open, long balance) {}
    record AccountCommand(UUID commandId, String kind, long amount) implements Command {}

    static final class Rejected extends RuntimeException {
        private static final long serialVersionUID = 1L;
    }

    static Account evolveAccount(Account a, Object e) {
        if (e instanceof Opened) return new Account(true, 0);
        if (e instanceof Deposited d) return new Account(true, a.balance() + d.amount());
        return new Account(true, a.balance() - ((Withdrawn) e).amount());
    }

    static List<Object> decideAccount(AccountCommand c, Account a) {
        switch (c.kind()) {
            case "open":
                return a.open() ? List.of() : List.of(new Opened("o"));
            case "deposit":
                if (!a.open()) throw new Rejected();
                return List.of(new Deposited(c.amount()));
            default:
                if (!a.open() || a.balance() < c.amount()) throw new Rejected();
                // two events in one command: a batch append
                return List.of(new Withdrawn(c.amount() - 1), new Withdrawn(1));
        }
    }

    @Test
    void sixteenThreadsOfRandomCommandsKeepTheInvariants() throws Exception {
        EventTypes types = new EventTypes().register(Opened.class).register(Deposited.class).register(Withdrawn.class);
        EventStore st = new EventStore(ds, types);
        Decider<AccountCommand, Account, Object> d = Decider.of(() -> new Account(false, 0),
            DeciderTest::evolveAccount, DeciderTest::decideAccount);
        var h = new CommandHandler<>(st, d, 50, Backoff.DEFAULT, true);
        String prefix = "acct-" + UUID.randomUUID().toString().substring(0, 8) + "-";
        List<String> streams = List.of(prefix + 0, prefix + 1, prefix + 2, prefix + 3);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        Map<UUID, Integer> accepted = Collections.synchronizedMap(new HashMap<>());
        AtomicInteger retried = new AtomicInteger();
        List<Integer> done = atOnce(16, () -> {
            ThreadLocalRandom r = ThreadLocalRandom.current();
            int i = 0;
            for (; i < 25 && System.nanoTime() < deadline; i++) {
                String s = streams.get(r.nextInt(streams.size()));
                String kind = i == 0 ? "open" : r.nextInt(3) == 0 ? "withdraw" : r.nextBoolean() ? "deposit" : "open";
                AccountCommand c = new AccountCommand(UUID.randomUUID(), kind, 2 + r.nextInt(20));
                try {
                    Outcome<Account, Object> o = h.handle(s, c);
                    if (o.attempts() > 1) retried.incrementAndGet();
                    if (!o.events().isEmpty()) accepted.put(c.commandId(), o.events().size());
                } catch (Rejected ignored) {
                    // rejected by the decider: nothing written
                }
            }
            return i;
        });
        assertTrue(done.stream().mapToInt(Integer::intValue).sum() > 16);
        System.out.printf("16 threads: %d commands, %d accepted, %d of them after a 40001%n",
            done.stream().mapToInt(Integer::intValue).sum(), accepted.size(), retried.get());
        // replay: the balance never goes negative, versions have no holes, each accepted
        // command's events are in the log exactly once (ids from the command id)
        Set<UUID> ids = new HashSet<>();
        int events = 0;
        for (String s : streams) {
            Account a = new Account(false, 0);
            long expect = 0;
            for (RecordedEvent e : st.streamForward(s, 0, 100).toList()) {
                assertEquals(expect++, e.version());
                assertTrue(ids.add(e.id()), "an event id twice: " + e.id());
                assertTrue(a.open() || e.event() instanceof Opened, "an event before Opened in " + s);
                a = evolveAccount(a, e.event());
                assertTrue(a.balance() >= 0, "negative balance in " + s + " at version " + e.version());
                events++;
            }
        }
        int want = 0;
        for (Map.Entry<UUID, Integer> e : accepted.entrySet()) {
            for (int i = 0; i < e.getValue(); i++) assertTrue(ids.contains(EventIds.of(e.getKey(), i)));
            want += e.getValue();
        }
        assertEquals(want, events);
    }
}
