package dev.esrc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.stream.Collectors;
import javax.sql.DataSource;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

class StoreTest {
    static DataSource ds;
    static EventStore store;

    record OrderPlaced(String sku, int quantity, String currency) {}

    @BeforeEach
    void setUp() {
        ds = Db.dataSource();
        EventTypes types = Users.types()
            .register(OrderPlaced.class, "OrderPlaced", 3)
            .upcaster("OrderPlaced", 1, o -> o.put("quantity", 1))
            .upcaster("OrderPlaced", 2, o -> o.put("currency", "EUR"))
            .alias("OrderCreated", "OrderPlaced");
        store = new EventStore(ds, types);
    }

    @Test
    void appendsAndReadsTypedEvents() {
        String s = Db.unique("user");
        assertEquals(0, store.append(s, new Users.UserRegistered("a@x", "A"), EventStore.NO_STREAM));
        assertEquals(2, store.appendBatch(s, List.of(new Users.UserNameChanged("B"), new Users.UserNameChanged("C")), 0L));
        assertEquals(2, store.streamVersion(s));
        List<RecordedEvent> got = store.readStream(s, 0, null);
        assertEquals(List.of(new Users.UserRegistered("a@x", "A"), new Users.UserNameChanged("B"),
            new Users.UserNameChanged("C")), got.stream().map(RecordedEvent::event).collect(Collectors.toList()));
        assertEquals("user", got.get(0).category());
        assertEquals(List.of(2L, 1L), store.readStreamBackward(s, null, 2).stream().map(RecordedEvent::version).toList());
        assertEquals(-1, store.streamVersion(Db.unique("user")));
    }

    @Test
    void wrongExpectedVersionKeepsTheSqlstate() {
        String s = Db.unique("user");
        store.append(s, new Users.UserRegistered("a@x", "A"));
        WrongExpectedVersionException e = assertThrows(WrongExpectedVersionException.class,
            () -> store.append(s, new Users.UserNameChanged("B"), EventStore.NO_STREAM));
        assertEquals("40001", e.sqlState());
        assertTrue(e.serverMessage().startsWith("wrong expected version"), e.getMessage());
        assertThrows(WrongExpectedVersionException.class,
            () -> store.append(Db.unique("user"), new Users.UserNameChanged("B"), EventStore.STREAM_EXISTS));
        assertEquals(1, store.appendBatch(s, List.of(new Users.UserNameChanged("B")), 0L));
    }

    @Test
    void idsMetadataAndTags() {
        String s = Db.unique("order");
        UUID id = UUID.randomUUID();
        NewEvent e = new NewEvent("Tagged", "{\"n\": 1}", "{\"by\": \"ann\"}", id, List.of("course:c1", "student:s1"));
        assertEquals(0, store.appendEvents(s, List.of(e), EventStore.NO_STREAM));
        // the same id again: nothing written, the stored version, even with a stale expected version
        assertEquals(0, store.appendEvents(s, List.of(e), EventStore.NO_STREAM));
        assertEquals(0, store.streamVersion(s));
        RecordedEvent r = store.readStream(s, 0, null).get(0);
        assertEquals(id, r.id());
        assertEquals(List.of("course:c1", "student:s1"), r.tags());
        assertTrue(r.metadata().contains("ann"));
        assertNull(r.event());
        // the same id with other data names another event: 23505
        DuplicateEventIdException d = assertThrows(DuplicateEventIdException.class, () -> store.appendEvents(s,
            List.of(new NewEvent("Tagged", "{\"n\": 2}", "{\"by\": \"ann\"}", id, null)), null));
        assertEquals("23505", d.sqlState());
        // batch with tags and metadata
        assertEquals(2, store.appendEvents(s, List.of(new NewEvent("A", "{}", null, null, List.of("t:1")),
            new NewEvent("B", "{\"x\": \"q\\\"uote\"}", "{\"m\": 1}", UUID.randomUUID(), null)), 0L));
        List<RecordedEvent> two = store.readStream(s, 1, 5);
        assertEquals(List.of("t:1"), two.get(0).tags());
        assertTrue(two.get(1).data().contains("q\\\"uote"));
        store.append(s, new Users.UserNameChanged("Z"), null, Map.of("by", "bob"), null);
        assertTrue(store.readStream(s, 3, 1).get(0).metadata().contains("bob"));
    }

    @Test
    void errorsByClass() {
        InvalidEventException reserved = assertThrows(InvalidEventException.class,
            () -> store.appendEvents(Db.unique("x"), List.of(new NewEvent("esrc.erased", "{}")), null));
        assertEquals("22023", reserved.sqlState());
        String s = Db.unique("user");
        store.append(s, new Users.UserRegistered("a@x", "A"));
        Db.exec(ds, "SELECT esrc.erase_stream('" + s + "', 'test')");
        StreamErasedException erased = assertThrows(StreamErasedException.class,
            () -> store.append(s, new Users.UserNameChanged("B")));
        assertEquals("55000", erased.sqlState());
        List<RecordedEvent> read = store.readStream(s, 0, null);
        assertTrue(read.get(0).isRedacted());
        assertNull(read.get(0).event());
        assertTrue(read.get(read.size() - 1).isTombstone());
        assertInstanceOf(NotFoundException.class,
            assertThrows(EsrcException.class, () -> Db.exec(ds, "SELECT esrc.ack('no-such-subscription', 'm')")));
        assertThrows(ServerVersionException.class, () -> EsrcVersion.check("0.2.0"));
        assertThrows(ServerVersionException.class, () -> EsrcVersion.check(null));
        EsrcVersion.check("0.3.7");
    }

    @Test
    void encryptDecryptAndForget() {
        String subject = Db.unique("user");
        String env = store.encrypt(subject, "email", "\"a@example.com\"");
        assertTrue(env.startsWith("\"esrc:"), env);
        assertEquals("\"a@example.com\"", store.decrypt(subject, "email", env));
        Db.exec(ds, "SELECT esrc.forget_subject('" + subject + "', 'test')");
        assertNull(store.decrypt(subject, "email", env));
    }

    @Test
    void upcastersApplyOnEveryRead() {
        String s = Db.unique("order");
        // shape 1 (no esrc_schema), shape 2 and an old type name, written as older clients did
        store.appendEvents(s, List.of(new NewEvent("OrderPlaced", "{\"sku\": \"a\"}"),
            new NewEvent("OrderPlaced", "{\"sku\": \"b\", \"quantity\": 5}", "{\"esrc_schema\": 2}", null, null),
            new NewEvent("OrderCreated", "{\"sku\": \"c\"}")), null);
        store.append(s, new OrderPlaced("d", 2, "USD"));
        List<Object> got = store.readStream(s, 0, null).stream().map(RecordedEvent::event).toList();
        assertEquals(List.of(new OrderPlaced("a", 1, "EUR"), new OrderPlaced("b", 5, "EUR"),
            new OrderPlaced("c", 1, "EUR"), new OrderPlaced("d", 2, "USD")), got);
        assertTrue(store.readStream(s, 3, 1).get(0).metadata().contains("\"esrc_schema\": 3"));
        EventTypes noUp = new EventTypes().register(OrderPlaced.class, "OrderPlaced", 3);
        assertThrows(DecodeException.class, () -> new EventStore(ds, noUp).readStream(s, 0, null));
    }

    @Test
    void pagedReadsNeverHoldTheWholeLog() {
        String cat = "page" + UUID.randomUUID().toString().substring(0, 8);
        String s = cat + "-1";
        for (int i = 0; i < 7; i++) store.appendEvents(s, List.of(new NewEvent("N", "{\"i\": " + i + "}")), null);
        assertEquals(List.of(0L, 1L, 2L, 3L, 4L, 5L, 6L), store.streamForward(s, 0, 3).map(RecordedEvent::version).toList());
        assertEquals(List.of(6L, 5L, 4L, 3L, 2L, 1L, 0L), store.streamBackward(s, null, 3).map(RecordedEvent::version).toList());
        assertEquals(List.of(4L, 3L, 2L, 1L, 0L), store.streamBackward(s, 4L, 2).map(RecordedEvent::version).toList());
        List<RecordedEvent> cat7 = store.streamCategory(cat, 0, 2).toList();
        assertEquals(7, cat7.size());
        long first = cat7.get(0).position();
        assertEquals(6, store.streamAll(first, 4).filter(e -> e.stream().equals(s)).count());
        // a stream of pages is lazy: taking 2 of a page size of 2 reads one page
        assertEquals(2, store.streamCategory(cat, 0, 2).limit(2).count());
        assertEquals(3, store.readCategory(cat, first, 3).size());
        assertTrue(store.readAll(0, 5).size() <= 5);
    }
}
