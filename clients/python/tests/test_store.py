"""The event store API against a real server."""
from __future__ import annotations

import asyncio
import uuid

import pytest

import esrc
from esrc import NewEvent
from users import UserNameChanged, UserRegistered, types


def test_append_and_read(store: esrc.EventStore, uid: str) -> None:
    s = "user-" + uid
    assert store.stream_version(s) == -1
    assert store.append(s, UserRegistered("a@x", "Alex"), expected_version=esrc.NO_STREAM,
                        metadata={"by": "test"}) == 0
    assert store.append_batch(s, [UserNameChanged("B"), UserNameChanged("C")], expected_version=0) == 2
    assert store.append(s, NewEvent("Untyped", {"k": 1}), expected_version=esrc.STREAM_EXISTS) == 3
    evs = store.read_stream(s)
    assert [e.version for e in evs] == [0, 1, 2, 3]
    assert evs[0].event == UserRegistered("a@x", "Alex") and evs[0].metadata == {"by": "test"}
    assert evs[2].event == UserNameChanged("C") and evs[3].event is None and evs[3].data == {"k": 1}
    assert evs[0].category == "user"
    assert [e.version for e in store.read_stream(s, 2)] == [2, 3]
    assert [e.version for e in store.read_stream_backward(s, None, 2)] == [3, 2]
    cat = store.read_category("user", evs[0].position - 1, 10)
    assert [e.id for e in cat if e.stream == s] == [e.id for e in evs]
    after = store.read_all(evs[1].position, 1000)
    assert [e.version for e in after if e.stream == s] == [2, 3]
    assert [e.version for e in store.iter_all(evs[0].position - 1, category="user", page=2)
            if e.stream == s] == [0, 1, 2, 3]


def test_errors_keep_the_sqlstate(store: esrc.EventStore, uid: str) -> None:
    s = "user-" + uid
    store.append(s, UserRegistered("a@x", "A"))
    with pytest.raises(esrc.ConcurrencyError) as e:
        store.append(s, UserNameChanged("B"), expected_version=esrc.NO_STREAM)
    assert e.value.sqlstate == "40001" and s in e.value.message
    with pytest.raises(esrc.InvalidEventError) as e2:
        store.append(s, NewEvent("esrc.erased", {}))
    assert e2.value.sqlstate == "22023"
    with pytest.raises(esrc.InvalidEventError, match="tags"):
        store.append(s, NewEvent("Tagged", {}, tags="course:1"))
    with pytest.raises(esrc.InvalidEventError) as e3:
        store.append(s, NewEvent("Tagged", {}, tags=("",)))
    assert e3.value.sqlstate == "22023"
    assert store.stream_version(s) == 0


def test_idempotent_ids(store: esrc.EventStore, uid: str) -> None:
    s = "user-" + uid
    i = uuid.uuid4()
    assert store.append(s, UserRegistered("a@x", "A"), id=i) == 0
    store.append(s, UserNameChanged("B"))
    # the same id again, with a stale expected version: no second event
    assert store.append(s, UserRegistered("a@x", "A"), id=i, expected_version=esrc.NO_STREAM) == 0
    assert store.stream_version(s) == 1
    with pytest.raises(esrc.DuplicateIdError) as e:
        store.append("user-other" + uid, UserRegistered("a@x", "A"), id=i)
    assert e.value.sqlstate == "23505"


def test_transaction_groups_appends(store: esrc.EventStore, uid: str) -> None:
    s = "user-" + uid
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.append(s, UserRegistered("a@x", "A"))
            raise RuntimeError("rolled back")
    assert store.stream_version(s) == -1


def test_erased_stream(store: esrc.EventStore, admin: esrc.EventStore, uid: str) -> None:
    s = "user-" + uid
    store.append(s, UserRegistered("a@x", "A"))
    admin._rows("SELECT esrc.erase_stream(%s, 'test')", (s,))
    evs = store.read_stream(s)
    assert evs[0].redacted and evs[0].event is None
    assert evs[1].type == esrc.ERASED and evs[1].is_tombstone
    with pytest.raises(esrc.ObjectStateError) as e:
        store.append(s, UserNameChanged("B"))
    assert e.value.sqlstate == "55000"


def test_encrypt_decrypt(store: esrc.EventStore, uid: str) -> None:
    env = store.encrypt("user-" + uid, "email", "a@example.com")
    assert env.startswith("esrc:v1:")
    assert store.decrypt("user-" + uid, "email", env) == "a@example.com"


def test_async_store_mirrors(dsn: str, uid: str) -> None:
    async def main() -> None:
        async with await esrc.AsyncEventStore.connect(dsn, types=types) as store:
            s = "user-" + uid
            assert await store.append(s, UserRegistered("a@x", "A"), expected_version=-1) == 0
            assert await store.append_batch(s, [UserNameChanged("B"), UserNameChanged("C")]) == 2
            evs = await store.read_stream(s)
            assert [e.event for e in evs] == [UserRegistered("a@x", "A"), UserNameChanged("B"),
                                              UserNameChanged("C")]
            assert (await store.read_stream_backward(s, None, 1))[0].version == 2
            assert await store.stream_version(s) == 2
            with pytest.raises(esrc.ConcurrencyError):
                await store.append(s, UserNameChanged("D"), expected_version=0)
    asyncio.run(main())


def test_version_checked_at_first_use(dsn: str) -> None:
    store = esrc.EventStore.connect(dsn)
    store.conn.execute("CREATE TEMP VIEW pg_extension AS SELECT 'esrc'::name AS extname, '0.1.0'::text AS extversion")
    # the check reads pg_catalog.pg_extension, not a look-alike on the search_path
    store.check_version()
    store.close()
