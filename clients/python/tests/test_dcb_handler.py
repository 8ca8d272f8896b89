"""DCB deciders run by DcbCommandHandler (docs/dcb.md): the course capacity
and unique user name invariants under concurrent commands, checked by
replaying the log; two decisions forced to read before either appends (the
loser decides again); a command retried after a lost commit; bounded
retries; asyncio."""
from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Optional, Union

import pytest

import esrc
from esrc import DcbCommandHandler, DcbDecider, Query, QueryItem
from esrc.decider import Backoff

courses = esrc.EventTypes()


@courses.register
@dataclass(frozen=True)
class CourseDefined:
    course: str
    capacity: int


@courses.register
@dataclass(frozen=True)
class StudentSubscribed:
    student: str
    course: str


@dataclass(frozen=True)
class DefineCourse:
    course: str
    capacity: int
    command_id: uuid.UUID = field(default_factory=uuid.uuid4)


@dataclass(frozen=True)
class Subscribe:
    student: str
    course: str
    command_id: uuid.UUID = field(default_factory=uuid.uuid4)


@dataclass(frozen=True)
class Course:
    capacity: Optional[int] = None
    students: frozenset[str] = frozenset()


class CourseFull(Exception):
    pass


class NoSuchCourse(Exception):
    pass


Event = Union[CourseDefined, StudentSubscribed]
Cmd = Union[DefineCourse, Subscribe]


def evolve(s: Course, e: Event) -> Course:
    if isinstance(e, CourseDefined):
        return Course(e.capacity, s.students)
    return Course(s.capacity, s.students | {e.student})


def decide(c: Cmd, s: Course) -> list[Event]:
    if isinstance(c, DefineCourse):
        return [] if s.capacity is not None else [CourseDefined(c.course, c.capacity)]
    if s.capacity is None:
        raise NoSuchCourse(c.course)
    if c.student in s.students:
        return []
    if len(s.students) >= s.capacity:
        raise CourseFull(c.course)
    return [StudentSubscribed(c.student, c.course)]


def stream_of(c: Cmd) -> str:
    return "course-" + c.course if isinstance(c, DefineCourse) else "student-" + c.student


def tags_of(e: Event) -> list[str]:
    return ["course:" + e.course] + (["student:" + e.student] if isinstance(e, StudentSubscribed) else [])


course_decider: DcbDecider[Cmd, Event, Course] = DcbDecider(Course, evolve, decide, stream_of, tags_of)


def course_query(c: Cmd) -> Query:
    return Query.of(QueryItem(["CourseDefined", "StudentSubscribed"], ["course:" + c.course]))


def test_course_capacity_under_concurrent_commands(dsn: str, uid: str) -> None:
    """8 threads subscribe 40 students to 3 courses of 4 seats: every
    course is full, no course holds more than its capacity at any event of
    the log, every accepted command is in the log once, the refused ones
    not at all."""
    names = ["c%d%s" % (i, uid) for i in range(3)]
    with esrc.EventStore.connect(dsn, types=courses) as store:
        for n in names:
            assert DcbCommandHandler(store, course_decider).handle(course_query, DefineCourse(n, 4)).version == 0
    commands = [Subscribe("s%d" % i + uid, names[i % 3]) for i in range(40)]
    accepted: dict[uuid.UUID, str] = {}
    full: list[Subscribe] = []
    retried = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    round_ = threading.Barrier(8, timeout=60)   # 5 rounds of 8 commands started together

    def worker(k: int) -> None:
        try:
            with esrc.EventStore.connect(dsn, types=courses) as s:
                h = DcbCommandHandler(s, course_decider, max_attempts=50)
                for c in commands[k::8]:
                    round_.wait()
                    try:
                        out = h.handle(course_query, c)
                    except CourseFull:
                        with lock:
                            full.append(c)
                        continue
                    with lock:
                        accepted[c.command_id] = c.course
                        if out.attempts > 1:
                            retried.append(c)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    # replay the log: never more than the capacity, each accepted command once
    with esrc.EventStore.connect(dsn, types=courses) as store:
        log = store.read_query(Query.of(*(QueryItem(tags=["course:" + n]) for n in names)))
        state = {n: Course() for n in names}
        seen = set()
        for e in log:
            c = e.event.course
            state[c] = evolve(state[c], e.event)
            cap = state[c].capacity
            assert cap is not None, "a subscription before its course"
            assert len(state[c].students) <= cap, "%s over capacity at %d" % (c, e.position)
            if isinstance(e.event, StudentSubscribed):
                assert e.id not in seen
                seen.add(e.id)
                assert e.stream == "student-" + e.event.student
                assert set(e.tags) == {"course:" + c, "student:" + e.event.student}
        assert all(len(s.students) == 4 for s in state.values())
        assert len(accepted) == 12 and len(full) == 28
        assert seen == {esrc.event_id(cid, 0) for cid in accepted}
        for c in full:
            assert store.stream_version("student-" + c.student) == -1


def test_two_decisions_read_before_either_appends(dsn: str, uid: str) -> None:
    """The last seat: two commands both read a free seat (a barrier in
    decide holds them until both read), both append under the condition;
    one is stored, the other's condition fails (40001), it decides again,
    on the new state, and is refused."""
    course = "c" + uid
    with esrc.EventStore.connect(dsn, types=courses) as store:
        DcbCommandHandler(store, course_decider).handle(course_query, DefineCourse(course, 1))
    barrier = threading.Barrier(2, timeout=30)
    calls: list[str] = []

    def held(c: Cmd, s: Course) -> list[Event]:
        first = isinstance(c, Subscribe) and c.student not in calls
        calls.append(c.student if isinstance(c, Subscribe) else "")
        if first:
            barrier.wait()
        return decide(c, s)

    d = DcbDecider(Course, evolve, held, stream_of, tags_of)
    results: dict[str, object] = {}

    def run(student: str) -> None:
        with esrc.EventStore.connect(dsn, types=courses) as s:
            try:
                results[student] = DcbCommandHandler(s, d).handle(course_query, Subscribe(student, course))
            except (CourseFull, esrc.EsrcError) as e:
                results[student] = e

    threads = [threading.Thread(target=run, args=(st + uid,)) for st in ("ann", "bob")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    won = [r for r in results.values() if isinstance(r, esrc.DcbOutcome)]
    lost = [r for r in results.values() if isinstance(r, CourseFull)]
    assert len(won) == 1 and len(lost) == 1, results
    assert won[0].attempts == 1 and won[0].version == 0
    assert len(calls) == 3   # the loser decided twice
    with esrc.EventStore.connect(dsn, types=courses) as store:
        assert len(store.read_query(Query.tagged("course:" + course), after=won[0].after)) == 1


class LostCommitStore(esrc.EventStore):
    """A store whose next commit succeeds on the server and is then
    reported lost (08006), as when the connection breaks before the commit's
    answer arrives."""
    lose = 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with super().transaction():
            yield
        if self.lose > 0:
            self.lose -= 1
            raise esrc.ConnectionLostError("server closed the connection unexpectedly", sqlstate="08006")


def test_retry_after_a_lost_commit_writes_nothing_twice(dsn: str, uid: str) -> None:
    """The commit of a subscription to the last seat is lost to the
    caller, who sends the same command again: the handler finds the
    command's event among the events it reads and returns it (it would
    otherwise decide that the course is full); nothing is written twice."""
    course = "c" + uid
    store = LostCommitStore(esrc.EventStore.connect(dsn).conn, types=courses)
    try:
        h = DcbCommandHandler(store, course_decider)
        h.handle(course_query, DefineCourse(course, 1))
        cmd = Subscribe("ann" + uid, course)
        store.lose = 1
        with pytest.raises(esrc.ConnectionLostError):
            h.handle(course_query, cmd)
        assert store.stream_version("student-ann" + uid) == 0   # the commit went through
        again = h.handle(course_query, cmd)
        assert again.already_applied and again.version == 0 and again.stream == "student-ann" + uid
        assert again.events == (StudentSubscribed("ann" + uid, course),)
        assert store.stream_version("student-ann" + uid) == 0
        assert store.read_stream("student-ann" + uid)[0].id == esrc.event_id(cmd.command_id, 0)
        # a new command (a new id) is decided: the course is full
        with pytest.raises(CourseFull):
            h.handle(course_query, Subscribe("bob" + uid, course))
        # the same command id with a query that does not select its events
        # (the course has a free seat as far as it sees):
        # the stored ids make the append a no-op returning the stored version
        other = h.handle(Query.of(QueryItem(["CourseDefined"], ["course:" + course])), cmd)
        assert not other.already_applied and other.version == 0
        assert store.stream_version("student-ann" + uid) == 0
    finally:
        store.close()


def test_retries_are_bounded(store: esrc.EventStore, uid: str) -> None:
    """A decide that always sees a stale state (an event matching the
    query is appended in between) gives up after max_attempts with
    RetriesExhausted; the handler's events are never stored."""
    course = "c" + uid
    other = esrc.EventStore.connect(store.conn.info.dsn, types=courses)
    store.types = courses
    h0 = DcbCommandHandler(store, course_decider)
    h0.handle(course_query, DefineCourse(course, 100))
    calls = []

    def meddling(c: Cmd, s: Course) -> list[Event]:
        calls.append(1)
        other.append("student-m%d" % len(calls) + uid, StudentSubscribed("m%d" % len(calls), course),
                     tags=["course:" + course])
        return decide(c, s)

    h = DcbCommandHandler(store, DcbDecider(Course, evolve, meddling, stream_of, tags_of), max_attempts=3,
                          backoff=Backoff(0.001))
    with pytest.raises(esrc.RetriesExhausted) as e:
        h.handle(course_query, Subscribe("me" + uid, course))
    other.close()
    assert len(calls) == 3 and e.value.sqlstate == "40001"
    assert isinstance(e.value.__cause__, esrc.AppendConditionError)
    assert store.stream_version("student-me" + uid) == -1


def test_asyncio_handler(dsn: str, uid: str) -> None:
    """Three tasks take the two seats of a course at once: two are
    stored, one is refused, whatever the interleaving."""
    course = "c" + uid

    async def main() -> list[object]:
        stores = [await esrc.AsyncEventStore.connect(dsn, types=courses) for _ in range(3)]
        try:
            await esrc.AsyncDcbCommandHandler(stores[0], course_decider).handle(
                course_query(DefineCourse(course, 2)), DefineCourse(course, 2))

            async def sub(s: esrc.AsyncEventStore, st: str) -> object:
                try:
                    return await esrc.AsyncDcbCommandHandler(s, course_decider).handle(
                        course_query, Subscribe(st, course))
                except CourseFull as e:
                    return e
            return list(await asyncio.gather(*[sub(s, "s%d" % i + uid) for i, s in enumerate(stores)]))
        finally:
            for s in stores:
                await s.close()

    out = asyncio.run(main())
    assert sum(isinstance(o, esrc.DcbOutcome) for o in out) == 2
    assert sum(isinstance(o, CourseFull) for o in out) == 1
    with esrc.EventStore.connect(dsn, types=courses) as store:
        assert len(store.read_query(Query.of(QueryItem(["StudentSubscribed"], ["course:" + course])))) == 2


# unique user names across streams: a user registers in user-<id> under a
# name that no other user holds; the decision reads the name's events

@courses.register
@dataclass(frozen=True)
class NameClaimed:
    user: str
    name: str


@dataclass(frozen=True)
class ClaimName:
    user: str
    name: str
    command_id: uuid.UUID = field(default_factory=uuid.uuid4)


class NameTaken(Exception):
    pass


def decide_name(c: ClaimName, holder: Optional[str]) -> list[NameClaimed]:
    if holder is not None:
        raise NameTaken(c.name)
    return [NameClaimed(c.user, c.name)]


names: DcbDecider[ClaimName, NameClaimed, Optional[str]] = DcbDecider(
    lambda: None, lambda s, e: e.user, decide_name,
    lambda c: "user-" + c.user, lambda e: ["username:" + e.name])


def test_unique_user_names_under_concurrent_commands(dsn: str, uid: str) -> None:
    """6 threads, 5 rounds started together, 30 users claiming one of 3
    names: every name is held by exactly one user, in the log replayed."""
    wanted = ["n%d%s" % (i, uid) for i in range(3)]
    commands = [ClaimName("u%d%s" % (i, uid), wanted[i % 3]) for i in range(30)]
    won: list[ClaimName] = []
    errors: list[BaseException] = []
    round_ = threading.Barrier(6, timeout=60)

    def worker(k: int) -> None:
        try:
            with esrc.EventStore.connect(dsn, types=courses) as s:
                h = DcbCommandHandler(s, names, max_attempts=50)
                for c in commands[k::6]:
                    round_.wait()
                    try:
                        h.handle(lambda c: Query.tagged("username:" + c.name), c)
                        won.append(c)
                    except NameTaken:
                        pass
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    with esrc.EventStore.connect(dsn, types=courses) as store:
        log = store.read_query(Query.of(*(QueryItem(tags=["username:" + n]) for n in wanted)))
        holders: dict[str, str] = {}
        for e in log:
            assert e.event.name not in holders, "%s claimed twice (position %d)" % (e.event.name, e.position)
            holders[e.event.name] = e.event.user
        assert sorted(holders) == sorted(wanted)
        assert sorted(c.user for c in won) == sorted(holders.values())
