"""Tags and dynamic consistency boundaries (docs/dcb.md): tags round trip
through every append and read, read_query, and append_if deciding across
streams, where two concurrent decisions on the same condition let exactly
one through."""
from __future__ import annotations

import asyncio
import threading

import pytest

import esrc
from esrc import AppendCondition, NewEvent, Query, QueryItem
from users import UserNameChanged, UserRegistered, types


def test_tags_round_trip(store: esrc.EventStore, uid: str) -> None:
    s, t = "user-" + uid, "user:" + uid
    assert store.append(s, UserRegistered("a@x", "A"), tags=[t, "a:" + uid]) == 0
    assert store.append(s, NewEvent("Untagged", {})) == 1
    assert store.append(s, NewEvent("Noted", {"n": 1}, tags=(t,))) == 2
    assert store.append_batch(s, [NewEvent("Noted", {"n": 2}, tags=[t, "b:" + uid]),
                                  UserNameChanged("B")]) == 4
    evs = store.read_stream(s)
    assert [e.tags for e in evs] == [tuple(sorted([t, "a:" + uid])), (), (t,),
                                     tuple(sorted([t, "b:" + uid])), ()]
    assert evs[0].event == UserRegistered("a@x", "A")
    assert [e.tags for e in store.read_stream_backward(s, None, 3)] == [(), tuple(sorted([t, "b:" + uid])), (t,)]
    assert [e.tags for e in store.read_all(evs[2].position - 1, 1) if e.stream == s] == [(t,)]
    # read_query: every event carrying the tags, across streams, position order
    store.append("other-" + uid, NewEvent("Noted", {"n": 3}, tags=[t]))
    got = store.read_query(Query.tagged(t))
    assert [(e.stream, e.version) for e in got] == [(s, 0), (s, 2), (s, 3), ("other-" + uid, 0)]
    assert [e.version for e in store.read_query(Query.tagged(t, "b:" + uid))] == [3]
    both = Query.of(QueryItem(types=["UserRegistered"], tags=[t]), QueryItem(tags=["b:" + uid]))
    assert [e.version for e in store.read_query(both)] == [0, 3]
    # the server's JSON shape is taken as it is; after, max_count and up_to
    assert [e.version for e in store.read_query({"items": [{"tags": [t], "types": ["Noted"]}]})] == [2, 3, 0]
    assert [e.version for e in store.read_query(Query.tagged(t), after=got[0].position, max_count=2)] == [2, 3]
    assert [e.version for e in store.read_query(Query.tagged(t), up_to=got[2].position)] == [0, 2, 3]
    with pytest.raises(esrc.InvalidEventError) as e:
        store.read_query(Query(()))
    assert e.value.sqlstate == "22023"
    with pytest.raises(esrc.InvalidEventError):
        QueryItem(tags=t)


def test_async_tags_and_read_query(dsn: str, uid: str) -> None:
    async def main() -> None:
        async with await esrc.AsyncEventStore.connect(dsn, types=types) as store:
            s, t = "user-" + uid, "user:" + uid
            assert await store.append(s, UserRegistered("a@x", "A"), tags=[t]) == 0
            assert await store.append_batch(s, [NewEvent("Noted", {}, tags=[t]), UserNameChanged("B")]) == 2
            assert [e.tags for e in await store.read_stream(s)] == [(t,), (t,), ()]
            h = await store.safe_position()
            got = await store.read_query(Query.tagged(t), up_to=h)
            assert [e.version for e in got] == [0, 1]
            cond = AppendCondition(Query.tagged(t), h)
            assert await store.append_if(s, [NewEvent("Noted", {}, tags=[t])], cond) == 3
            with pytest.raises(esrc.AppendConditionError) as e:
                await store.append_if(s, [NewEvent("Noted", {}, tags=[t])], cond)
            assert e.value.sqlstate == "40001" and "condition" in e.value.message
            assert isinstance(e.value, esrc.ConcurrencyError)
            assert await store.stream_version(s) == 3
    asyncio.run(main())


def register(store: esrc.EventStore, uid: str, user: str, name: str,
             before_append: threading.Barrier | None = None) -> bool:
    """Register ``user`` under ``name`` unless a user holds the name
    already, whatever stream it is in: one DCB decision, without retry."""
    q = Query.tagged("username:" + name)
    h = store.safe_position()
    taken = bool(store.read_query(q, up_to=h))
    if before_append is not None:
        before_append.wait()
    if taken:
        return False
    store.append_if("user-" + user, [NewEvent("UserRegistered", {"email": user + "@x", "name": name},
                                              tags=["username:" + name, "user:" + user])],
                    AppendCondition(q, h), esrc.NO_STREAM)
    return True


def test_unique_username_two_concurrent_decisions(dsn: str, uid: str) -> None:
    """Two users take the same name at the same time: both read that the
    name is free (the barrier holds them until both read), both append
    under the same condition; exactly one append is stored, the other gets
    40001 (ConcurrencyError) and stores nothing."""
    name = "bob" + uid
    barrier = threading.Barrier(2, timeout=30)
    results: dict[str, object] = {}

    def run(user: str) -> None:
        with esrc.EventStore.connect(dsn, types=types) as store:
            try:
                results[user] = register(store, uid, user, name, barrier)
            except esrc.EsrcError as e:
                results[user] = e

    threads = [threading.Thread(target=run, args=(u + uid,)) for u in ("u1", "u2")]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    won = [u for u, r in results.items() if r is True]
    lost = [r for r in results.values() if isinstance(r, esrc.EsrcError)]
    assert len(won) == 1 and len(lost) == 1, results
    assert isinstance(lost[0], esrc.AppendConditionError) and lost[0].sqlstate == "40001"
    assert "condition of append" in lost[0].message and lost[0].hint
    with esrc.EventStore.connect(dsn, types=types) as store:
        holders = store.read_query(Query.tagged("username:" + name))
        assert [e.stream for e in holders] == ["user-" + won[0]]
        loser = next(u for u in results if u not in won)
        assert store.stream_version("user-" + loser) == -1
        # decided again, the loser sees the name taken
        assert register(store, uid, loser, name) is False


COURSE = ["CourseDefined", "StudentSubscribed"]


async def subscribe(store: esrc.AsyncEventStore, course: str, student: str,
                    read: asyncio.Event, go: asyncio.Event, attempts: int = 3) -> str:
    """Subscribe the student while the course has a free seat (the
    capacity in CourseDefined): read, decide, append_if; on 40001 decide
    again."""
    q = Query.of(QueryItem(COURSE, ["course:" + course]))
    for attempt in range(attempts):
        h = await store.safe_position()
        evs = await store.read_query(q, up_to=h)
        capacity = sum(e.data["capacity"] for e in evs if e.type == "CourseDefined")
        taken = sum(1 for e in evs if e.type == "StudentSubscribed")
        if attempt == 0:
            read.set()
            await go.wait()
        if taken >= capacity:
            return "full"
        try:
            await store.append_if("student-" + student,
                                  [NewEvent("StudentSubscribed", {"course": course},
                                            tags=["course:" + course, "student:" + student])],
                                  AppendCondition(q, h))
            return "subscribed"
        except esrc.AppendConditionError:
            continue
    return "gave up"


def test_last_seat_two_concurrent_asyncio(dsn: str, uid: str) -> None:
    """A course with one seat, two students subscribing at once on two
    connections: one gets the seat, the other's append_if fails (40001),
    it decides again and finds the course full."""
    course = "c" + uid

    async def main() -> None:
        s1 = await esrc.AsyncEventStore.connect(dsn, types=types)
        s2 = await esrc.AsyncEventStore.connect(dsn, types=types)
        try:
            await s1.append("course-" + course, NewEvent("CourseDefined", {"capacity": 1},
                                                         tags=["course:" + course]))
            r1, r2, go = asyncio.Event(), asyncio.Event(), asyncio.Event()

            async def both_read() -> None:
                await r1.wait()
                await r2.wait()
                go.set()
            out = await asyncio.gather(subscribe(s1, course, "a" + uid, r1, go),
                                       subscribe(s2, course, "b" + uid, r2, go), both_read())
            assert sorted(str(o) for o in out[:2]) == ["full", "subscribed"], out
            subs = await s1.read_query(Query.of(QueryItem(["StudentSubscribed"], ["course:" + course])))
            assert len(subs) == 1
        finally:
            await s1.close()
            await s2.close()
    asyncio.run(main())


def test_append_if_checks(store: esrc.EventStore, uid: str) -> None:
    s, t = "user-" + uid, "user:" + uid
    h = store.safe_position()
    ev = NewEvent("Noted", {}, tags=[t])
    # the condition as the server's JSON, expected_version checked too (40001)
    cond = {"fail_if_events_match": {"items": [{"tags": [t]}]}, "after": h}
    assert store.append_if(s, [ev], cond, esrc.NO_STREAM) == 0
    with pytest.raises(esrc.ConcurrencyError) as e1:
        store.append_if(s, [NewEvent("Noted", {}, tags=["x:" + uid])], {**cond, "after": store.safe_position()}, 5)
    assert not isinstance(e1.value, esrc.AppendConditionError)
    # a condition above the horizon is refused (22023)
    with pytest.raises(esrc.InvalidEventError) as e:
        store.append_if(s, [ev], AppendCondition(Query.tagged(t), store.safe_position() + 1000))
    assert e.value.sqlstate == "22023" and "horizon" in e.value.message
    with pytest.raises(esrc.InvalidEventError):
        store.append_if(s, [], AppendCondition(Query.tagged(t), h))
    assert store.stream_version(s) == 0
