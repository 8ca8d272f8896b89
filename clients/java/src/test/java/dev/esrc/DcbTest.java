package dev.esrc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Dynamic consistency boundaries (docs/dcb.md): readQuery and appendIf, and two decisions on one
 * condition at once, both having read before either appends: exactly one is stored.
 */
class DcbTest {
    EventStore store;

    @BeforeEach
    void setUp() {
        store = new EventStore(Db.dataSource(), Users.types());
    }

    static NewEvent tagged(String type, String data, String... tags) {
        return new NewEvent(type, data, null, null, List.of(tags));
    }

    @Test
    void readQueryAcrossStreams() {
        String u = UUID.randomUUID().toString().substring(0, 8);
        String s = "user-" + u, t = "user:" + u;
        store.append(s, store.types().encode(new Users.UserRegistered("a@x", "A"), null, null).withTags(List.of(t)));
        store.appendEvents(s, List.of(tagged("Noted", "{}", t, "b:" + u), new NewEvent("Untagged", "{}")), null);
        store.appendEvents("other-" + u, List.of(tagged("Noted", "{}", t)), null);
        List<RecordedEvent> got = store.readQuery(Query.tagged(t));
        assertEquals(List.of(s + "/0", s + "/1", "other-" + u + "/0"),
            got.stream().map(e -> e.stream() + "/" + e.version()).toList());
        assertEquals(new Users.UserRegistered("a@x", "A"), got.get(0).event());
        assertEquals(List.of(t), got.get(0).tags());
        assertEquals(List.of(1L), store.readQuery(Query.tagged(t, "b:" + u)).stream().map(RecordedEvent::version).toList());
        Query two = Query.of(Query.Item.of(List.of("UserRegistered"), t), Query.Item.tags("b:" + u));
        assertEquals(List.of(0L, 1L), store.readQuery(two).stream().map(RecordedEvent::version).toList());
        assertEquals(List.of(1L), store.readQuery(Query.tagged(t), got.get(0).position(), 1, null)
            .stream().map(RecordedEvent::version).toList());
        assertEquals(2, store.readQuery(Query.tagged(t), 0, null, got.get(1).position()).size());
        InvalidEventException bad = assertThrows(InvalidEventException.class, () -> store.readQuery(Query.of()));
        assertEquals("22023", bad.sqlState());
    }

    @Test
    void appendIfChecks() {
        String u = UUID.randomUUID().toString().substring(0, 8);
        String s = "user-" + u, t = "user:" + u;
        long h = store.safePosition();
        AppendCondition cond = new AppendCondition(Query.tagged(t), h);
        assertEquals(0, store.appendIf(s, List.of(tagged("Noted", "{}", t)), cond, EventStore.NO_STREAM));
        AppendConditionFailedException f = assertThrows(AppendConditionFailedException.class,
            () -> store.appendIf(s, List.of(tagged("Noted", "{}", t)), cond, null));
        assertEquals("40001", f.sqlState());
        assertTrue(f.detail().contains("First conflicting positions"), f.getMessage());
        // a wrong expected version is not a failed condition
        WrongExpectedVersionException w = assertThrows(WrongExpectedVersionException.class, () -> store.appendIf(s,
            List.of(tagged("Noted", "{}", t)), new AppendCondition(Query.tagged(t), store.safePosition()), 5L));
        assertFalse(w instanceof AppendConditionFailedException);
        InvalidEventException above = assertThrows(InvalidEventException.class, () -> store.appendIf(s,
            List.of(tagged("Noted", "{}", t)), new AppendCondition(Query.tagged(t), store.safePosition() + 1000), null));
        assertEquals("22023", above.sqlState());
        assertEquals(0, store.streamVersion(s));
    }

    /** Register the user under the name unless someone holds it, in any stream: one decision. */
    static boolean register(EventStore store, String user, String name, CyclicBarrier bothRead) throws Exception {
        Query q = Query.tagged("username:" + name);
        long h = store.safePosition();
        boolean taken = !store.readQuery(q, 0, null, h).isEmpty();
        if (bothRead != null) bothRead.await(30, TimeUnit.SECONDS);
        if (taken) return false;
        NewEvent e = store.types().encode(new Users.UserRegistered(user + "@x", name), null, null)
            .withTags(List.of("username:" + name, "user:" + user));
        store.appendIf("user-" + user, List.of(e), new AppendCondition(q, h), EventStore.NO_STREAM);
        return true;
    }

    @Test
    void twoConcurrentDecisionsOnOneConditionOneWins() throws Exception {
        String u = UUID.randomUUID().toString().substring(0, 8);
        String name = "bob" + u;
        List<String> users = List.of("u1" + u, "u2" + u);
        CyclicBarrier bothRead = new CyclicBarrier(2);
        ExecutorService pool = Executors.newFixedThreadPool(2);
        List<Future<Boolean>> futures = new ArrayList<>();
        try {
            for (String user : users) futures.add(pool.submit(() -> register(store, user, name, bothRead)));
            List<Object> results = new ArrayList<>();
            for (Future<Boolean> f : futures) {
                try {
                    results.add(f.get(60, TimeUnit.SECONDS));
                } catch (java.util.concurrent.ExecutionException e) {
                    results.add(e.getCause());
                }
            }
            assertEquals(1, results.stream().filter(Boolean.TRUE::equals).count(), results.toString());
            Object lost = results.stream().filter(r -> !Boolean.TRUE.equals(r)).findFirst().orElseThrow();
            AppendConditionFailedException f = assertInstanceOf(AppendConditionFailedException.class, lost);
            assertEquals("40001", f.sqlState());
            String winner = users.get(results.indexOf(Boolean.TRUE));
            String loser = users.get(1 - results.indexOf(Boolean.TRUE));
            assertEquals(List.of("user-" + winner),
                store.readQuery(Query.tagged("username:" + name)).stream().map(RecordedEvent::stream).toList());
            assertEquals(-1, store.streamVersion("user-" + loser));
            // decided again, the loser finds the name taken
            assertFalse(register(store, loser, name, null));
        } finally {
            pool.shutdownNow();
        }
    }
}
