package dev.esrc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * DCB deciders run by DcbCommandHandler (docs/dcb.md): the course capacity invariant under
 * concurrent commands, checked by replaying the log; two decisions that both read before either
 * appends (the loser decides again); a retry after a lost commit; bounded retries.
 */
class DcbHandlerTest {
    sealed interface CourseEvent permits CourseDefined, StudentSubscribed {
        String course();
    }

    record CourseDefined(String course, int capacity) implements CourseEvent {}

    record StudentSubscribed(String student, String course) implements CourseEvent {}

    sealed interface CourseCommand extends Command permits DefineCourse, Subscribe {
        String course();
    }

    record DefineCourse(UUID commandId, String course, int capacity) implements CourseCommand {
        DefineCourse(String course, int capacity) { this(UUID.randomUUID(), course, capacity); }
    }

    record Subscribe(UUID commandId, String student, String course) implements CourseCommand {
        Subscribe(String student, String course) { this(UUID.randomUUID(), student, course); }
    }

    record Course(Integer capacity, Set<String> students) {
        static Course none() { return new Course(null, Set.of()); }
    }

    static final class CourseFull extends RuntimeException {
        private static final long serialVersionUID = 1L;
    }

    static Course evolve(Course s, CourseEvent e) {
        if (e instanceof CourseDefined d) return new Course(d.capacity(), s.students());
        Set<String> students = new HashSet<>(s.students());
        students.add(((StudentSubscribed) e).student());
        return new Course(s.capacity(), Set.copyOf(students));
    }

    static List<CourseEvent> decide(CourseCommand c, Course s) {
        if (c instanceof DefineCourse d) {
            return s.capacity() != null ? List.of() : List.of(new CourseDefined(d.course(), d.capacity()));
        }
        Subscribe sub = (Subscribe) c;
        if (s.capacity() == null) throw new IllegalStateException("no course " + c.course());
        if (s.students().contains(sub.student())) return List.of();
        if (s.students().size() >= s.capacity()) throw new CourseFull();
        return List.of(new StudentSubscribed(sub.student(), sub.course()));
    }

    static String streamOf(CourseCommand c) {
        return c instanceof Subscribe s ? "student-" + s.student() : "course-" + c.course();
    }

    static List<String> tagsOf(CourseEvent e) {
        return e instanceof StudentSubscribed s ? List.of("course:" + s.course(), "student:" + s.student())
            : List.of("course:" + e.course());
    }

    static Query courseQuery(CourseCommand c) {
        return Query.of(Query.Item.of(List.of("CourseDefined", "StudentSubscribed"), "course:" + c.course()));
    }

    static DcbDecider<CourseCommand, Course, CourseEvent> decider(
            java.util.function.BiFunction<CourseCommand, Course, List<CourseEvent>> decide) {
        return DcbDecider.of(Course::none, DcbHandlerTest::evolve, decide, DcbHandlerTest::streamOf,
            DcbHandlerTest::tagsOf);
    }

    static final DcbDecider<CourseCommand, Course, CourseEvent> COURSES = decider(DcbHandlerTest::decide);

    static EventTypes types() {
        return new EventTypes().register(CourseDefined.class).register(StudentSubscribed.class);
    }

    DataSource ds;
    EventStore store;
    String u;

    @BeforeEach
    void setUp() {
        ds = Db.dataSource();
        store = new EventStore(ds, types());
        u = UUID.randomUUID().toString().substring(0, 8);
    }

    @Test
    void courseCapacityHoldsUnderConcurrentCommands() throws Exception {
        var h = new DcbCommandHandler<>(store, COURSES, 50, Backoff.DEFAULT);
        List<String> courses = List.of("a" + u, "b" + u, "c" + u);
        for (String c : courses) assertEquals(0, h.handle(DcbHandlerTest::courseQuery, new DefineCourse(c, 4)).version());
        List<Subscribe> commands = new ArrayList<>();
        for (int i = 0; i < 40; i++) commands.add(new Subscribe("s" + i + u, courses.get(i % 3)));
        Map<UUID, String> accepted = Collections.synchronizedMap(new HashMap<>());
        List<Subscribe> full = Collections.synchronizedList(new ArrayList<>());
        AtomicInteger retried = new AtomicInteger();
        // 8 threads, 5 rounds: each round's 8 commands start together (a barrier)
        CyclicBarrier round = new CyclicBarrier(8);
        ExecutorService pool = Executors.newFixedThreadPool(8);
        try {
            List<Future<?>> fs = new ArrayList<>();
            for (int k = 0; k < 8; k++) {
                int first = k;
                fs.add(pool.submit(() -> {
                    for (int i = first; i < commands.size(); i += 8) {
                        Subscribe c = commands.get(i);
                        round.await(60, TimeUnit.SECONDS);
                        try {
                            DcbOutcome<Course, CourseEvent> o = h.handle(DcbHandlerTest::courseQuery, c);
                            accepted.put(c.commandId(), c.course());
                            if (o.attempts() > 1) retried.incrementAndGet();
                        } catch (CourseFull e) {
                            full.add(c);
                        }
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) f.get(120, TimeUnit.SECONDS);
        } finally {
            pool.shutdownNow();
        }
        System.out.printf("DCB, 8 threads: 40 subscriptions, %d accepted, %d after a failed condition%n",
            accepted.size(), retried.get());
        // replay the log: never more than the capacity, each accepted command once
        List<Query.Item> items = new ArrayList<>();
        for (String c : courses) items.add(Query.Item.tags("course:" + c));
        Map<String, Course> state = new HashMap<>();
        Set<UUID> seen = new HashSet<>();
        for (RecordedEvent e : store.readQuery(new Query(items))) {
            CourseEvent ev = (CourseEvent) e.event();
            Course s = evolve(state.getOrDefault(ev.course(), Course.none()), ev);
            state.put(ev.course(), s);
            assertNotNull(s.capacity(), "a subscription before its course");
            assertTrue(s.students().size() <= s.capacity(), ev.course() + " over capacity at " + e.position());
            if (ev instanceof StudentSubscribed ss) {
                assertTrue(seen.add(e.id()), "an event id twice: " + e.id());
                assertEquals("student-" + ss.student(), e.stream());
                assertEquals(Set.of("course:" + ss.course(), "student:" + ss.student()), Set.copyOf(e.tags()));
            }
        }
        for (String c : courses) assertEquals(4, state.get(c).students().size());
        assertEquals(12, accepted.size());
        assertEquals(28, full.size());
        Set<UUID> want = new HashSet<>();
        for (UUID cid : accepted.keySet()) want.add(EventIds.of(cid, 0));
        assertEquals(want, seen);
        for (Subscribe c : full) assertEquals(-1, store.streamVersion("student-" + c.student()));
    }

    @Test
    void theLoserOfTheLastSeatDecidesAgain() throws Exception {
        String course = "c" + u;
        new DcbCommandHandler<>(store, COURSES).handle(DcbHandlerTest::courseQuery, new DefineCourse(course, 1));
        CyclicBarrier bothRead = new CyclicBarrier(2);
        AtomicInteger decisions = new AtomicInteger();
        var held = decider((c, s) -> {
            if (decisions.incrementAndGet() <= 2) {
                try {
                    bothRead.await(30, TimeUnit.SECONDS);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            }
            return decide(c, s);
        });
        var h = new DcbCommandHandler<>(store, held);
        ExecutorService pool = Executors.newFixedThreadPool(2);
        List<Object> results = new ArrayList<>();
        try {
            List<Future<Object>> fs = new ArrayList<>();
            for (String st : List.of("ann", "bob")) {
                fs.add(pool.submit(() -> {
                    try {
                        return h.handle(DcbHandlerTest::courseQuery, new Subscribe(st + u, course));
                    } catch (CourseFull e) {
                        return e;
                    }
                }));
            }
            for (Future<Object> f : fs) results.add(f.get(60, TimeUnit.SECONDS));
        } finally {
            pool.shutdownNow();
        }
        List<DcbOutcome<?, ?>> won = new ArrayList<>();
        for (Object r : results) if (r instanceof DcbOutcome<?, ?> o) won.add(o);
        assertEquals(1, won.size(), results.toString());
        assertEquals(1, results.stream().filter(r -> r instanceof CourseFull).count(), results.toString());
        assertEquals(1, won.get(0).attempts());
        assertEquals(0, won.get(0).version());
        assertEquals(3, decisions.get()); // the loser decided twice
        assertEquals(1, store.readQuery(Query.tagged("course:" + course), won.get(0).after(), null, null).size());
    }

    @Test
    void aRetryAfterALostCommitWritesNothingTwice() {
        LostCommit lossy = new LostCommit(ds);
        var h = new DcbCommandHandler<>(new EventStore(lossy, types()), COURSES);
        String course = "c" + u;
        h.handle(DcbHandlerTest::courseQuery, new DefineCourse(course, 1));
        Subscribe cmd = new Subscribe("ann" + u, course);
        lossy.failures.set(1);
        ConnectionLostException lost = assertThrows(ConnectionLostException.class,
            () -> h.handle(DcbHandlerTest::courseQuery, cmd));
        assertEquals("08006", lost.sqlState());
        assertEquals(0, store.streamVersion("student-ann" + u)); // the commit went through
        // the same command again: its event is among the read ones, returned as it was stored
        // (deciding again would find the course full)
        DcbOutcome<Course, CourseEvent> again = h.handle(DcbHandlerTest::courseQuery, cmd);
        assertTrue(again.alreadyApplied());
        assertEquals("student-ann" + u, again.stream());
        assertEquals(0, again.version());
        assertEquals(List.of(new StudentSubscribed("ann" + u, course)), again.events());
        assertEquals(0, store.streamVersion("student-ann" + u));
        assertEquals(EventIds.of(cmd.commandId(), 0), store.readStream("student-ann" + u, 0, null).get(0).id());
        // a new command is decided: the course is full
        assertThrows(CourseFull.class, () -> h.handle(DcbHandlerTest::courseQuery, new Subscribe("bob" + u, course)));
        // the same command on a query that does not select its events (a free seat as far as it
        // sees): the stored ids make the append a no-op returning the stored version
        DcbOutcome<Course, CourseEvent> other =
            h.handle(Query.of(Query.Item.of(List.of("CourseDefined"), "course:" + course)), cmd);
        assertFalse(other.alreadyApplied());
        assertEquals(0, other.version());
        assertEquals(0, store.streamVersion("student-ann" + u));
    }

    @Test
    void retriesAreBoundedAndKeepTheFailedCondition() {
        String course = "c" + u;
        new DcbCommandHandler<>(store, COURSES).handle(DcbHandlerTest::courseQuery, new DefineCourse(course, 100));
        AtomicInteger attempts = new AtomicInteger();
        // a decide that appends an event matching the query behind the handler's back
        var racing = decider((c, s) -> {
            int n = attempts.incrementAndGet();
            store.append("student-m" + n + u, store.types().encode(new StudentSubscribed("m" + n + u, course), null, null)
                .withTags(List.of("course:" + course)));
            return decide(c, s);
        });
        var h = new DcbCommandHandler<>(store, racing, 3, Backoff.DEFAULT);
        RetriesExhaustedException e = assertThrows(RetriesExhaustedException.class,
            () -> h.handle(DcbHandlerTest::courseQuery, new Subscribe("me" + u, course)));
        assertEquals("40001", e.sqlState());
        assertInstanceOf(AppendConditionFailedException.class, e.getCause());
        assertEquals(3, attempts.get());
        assertEquals(-1, store.streamVersion("student-me" + u));
    }

    // unique user names across streams: a user registers in user-<id> under a name no other
    // user holds; the decision reads the name's events

    record NameClaimed(String user, String name) {}

    record ClaimName(UUID commandId, String user, String name) implements Command {}

    static final class NameTaken extends RuntimeException {
        private static final long serialVersionUID = 1L;
    }

    @Test
    void uniqueUserNamesHoldUnderConcurrentCommands() throws Exception {
        EventStore st = new EventStore(ds, new EventTypes().register(NameClaimed.class));
        DcbDecider<ClaimName, String, NameClaimed> names = DcbDecider.of(() -> null, (holder, e) -> e.user(),
            (c, holder) -> {
                if (holder != null) throw new NameTaken();
                return List.of(new NameClaimed(c.user(), c.name()));
            },
            c -> "user-" + c.user(), e -> List.of("username:" + e.name()));
        var h = new DcbCommandHandler<>(st, names, 50, Backoff.DEFAULT);
        List<String> wanted = List.of("n0" + u, "n1" + u, "n2" + u);
        List<ClaimName> commands = new ArrayList<>();
        for (int i = 0; i < 30; i++) commands.add(new ClaimName(UUID.randomUUID(), "u" + i + u, wanted.get(i % 3)));
        List<String> won = Collections.synchronizedList(new ArrayList<>());
        CyclicBarrier round = new CyclicBarrier(6);   // 6 threads, 5 rounds started together
        ExecutorService pool = Executors.newFixedThreadPool(6);
        try {
            List<Future<?>> fs = new ArrayList<>();
            for (int k = 0; k < 6; k++) {
                int first = k;
                fs.add(pool.submit(() -> {
                    for (int i = first; i < commands.size(); i += 6) {
                        ClaimName c = commands.get(i);
                        round.await(60, TimeUnit.SECONDS);
                        try {
                            h.handle(x -> Query.tagged("username:" + x.name()), c);
                            won.add(c.user());
                        } catch (NameTaken e) {
                            // someone holds the name
                        }
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) f.get(120, TimeUnit.SECONDS);
        } finally {
            pool.shutdownNow();
        }
        List<Query.Item> items = new ArrayList<>();
        for (String n : wanted) items.add(Query.Item.tags("username:" + n));
        Map<String, String> holders = new HashMap<>();
        for (RecordedEvent e : st.readQuery(new Query(items))) {
            NameClaimed claim = e.as(NameClaimed.class);
            assertTrue(holders.put(claim.name(), claim.user()) == null, claim.name() + " claimed twice at " + e.position());
        }
        assertEquals(Set.copyOf(wanted), holders.keySet());
        assertEquals(Set.copyOf(holders.values()), Set.copyOf(won));
        assertEquals(3, won.size());
    }
}
