"""Deciders run by the command handlers: the seed scenario (threads and
asyncio tasks), idempotent commands, the snapshot path, and 16 concurrent
workers whose invariants are checked by replaying the log."""
from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Optional, Union

import pytest

import esrc
from esrc.decider import Backoff
from users import (ChangeUserName, RegisterUser, UnknownUser, User, UserNameChanged,
                   UserRegistered, decider, snapshot_decider, types)


def _seed_threads(dsn: str, stream: str, d: esrc.Decider) -> list[esrc.Outcome]:  # type: ignore[type-arg]
    with esrc.EventStore.connect(dsn, types=types) as store:
        out = esrc.CommandHandler(store, d).handle(stream, RegisterUser("a@example.com", "Alex"))
        assert out.version == 0
    barrier = threading.Barrier(3)
    results: list[esrc.Outcome] = []  # type: ignore[type-arg]
    errors: list[BaseException] = []

    def rename(name: str) -> None:
        try:
            with esrc.EventStore.connect(dsn, types=types) as s:
                h = esrc.CommandHandler(s, d)
                barrier.wait()
                results.append(h.handle(stream, ChangeUserName(name)))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=rename, args=("Alex%d" % i,)) for i in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def test_seed_scenario_threads(dsn: str, store: esrc.EventStore, uid: str) -> None:
    stream = "user-" + uid
    results = _seed_threads(dsn, stream, decider)
    assert sorted(r.version for r in results) == [1, 2, 3]
    evs = store.read_stream(stream)
    assert [e.version for e in evs] == [0, 1, 2, 3]
    assert sorted(e.event.name for e in evs[1:]) == ["Alex1", "Alex2", "Alex3"]
    final = esrc.CommandHandler(store, decider).load(stream)
    assert final == (User("a@example.com", evs[-1].event.name, 3), 3)
    with pytest.raises(UnknownUser):
        esrc.CommandHandler(store, decider).handle("user-nobody" + uid, ChangeUserName("X"))


def test_seed_scenario_asyncio_tasks(dsn: str, store: esrc.EventStore, uid: str) -> None:
    stream = "user-" + uid

    async def main() -> list[int]:
        async with await esrc.AsyncEventStore.connect(dsn, types=types) as s:
            await esrc.AsyncCommandHandler(s, decider).handle(stream, RegisterUser("a@x", "Alex"))
        stores = [await esrc.AsyncEventStore.connect(dsn, types=types) for _ in range(3)]
        try:
            outs = await asyncio.gather(*[
                esrc.AsyncCommandHandler(s, decider).handle(stream, ChangeUserName("Alex%d" % i))
                for i, s in enumerate(stores, 1)])
        finally:
            for s in stores:
                await s.close()
        return sorted(o.version for o in outs)

    assert asyncio.run(main()) == [1, 2, 3]
    evs = store.read_stream(stream)
    assert sorted(e.event.name for e in evs[1:]) == ["Alex1", "Alex2", "Alex3"]


def test_seed_scenario_from_the_snapshot(dsn: str, admin: esrc.EventStore, store: esrc.EventStore,
                                         uid: str) -> None:
    """A category with a snapshot table: the handler loads its row instead
    of folding (the snapshot's reducer counts renames its own way, which is
    how the test sees where the state came from)."""
    cat = "snapuser" + uid
    admin.conn.execute("""CREATE FUNCTION public.%s_reducer(state jsonb, e esrc.event) RETURNS jsonb
                   LANGUAGE sql IMMUTABLE AS $$ SELECT CASE e.type
                     WHEN 'UserRegistered' THEN e.data || '{"renames": 100}'
                     ELSE state || jsonb_build_object('name', e.data->'name',
                                     'renames', (state->>'renames')::int + 1) END $$""" % cat)
    admin._rows("SELECT esrc.create_snapshot(%s, %s, %s)",
                ("public.%s_snap" % cat, cat, "public.%s_reducer(jsonb, esrc.event)" % cat))
    stream = cat + "-1"
    results = _seed_threads(dsn, stream, snapshot_decider)
    assert sorted(r.version for r in results) == [1, 2, 3]
    h = esrc.CommandHandler(store, snapshot_decider)
    state, version = h.load(stream)
    assert version == 3 and state is not None and state.renames == 103   # from the row
    folded, _ = esrc.CommandHandler(store, decider).load(stream)
    assert folded is not None and folded.renames == 3  # folded


def test_command_ids_make_retries_idempotent(store: esrc.EventStore, uid: str) -> None:
    stream = "user-" + uid
    h = esrc.CommandHandler(store, decider)
    h.handle(stream, RegisterUser("a@x", "A"))
    cmd = ChangeUserName("B")
    first = h.handle(stream, cmd)
    assert first.version == 1
    assert store.read_stream(stream)[1].id == esrc.event_id(cmd.command_id, 0)
    # the same command again, as after a lost connection: state says "B" so
    # nothing is decided and nothing is written
    again = h.handle(stream, ChangeUserName("B", command_id=cmd.command_id))
    assert again.version == 1 and store.stream_version(stream) == 1
    # a command that reuses the id for other content decides again, and its
    # event id names a stored event with other data: the server refuses it
    # (23505) rather than returning the stored version, which hid such bugs
    with pytest.raises(esrc.DuplicateIdError) as e:
        h.handle(stream, ChangeUserName("C", command_id=cmd.command_id))
    assert e.value.sqlstate == "23505"
    assert store.stream_version(stream) == 1


def test_retries_are_bounded(store: esrc.EventStore, uid: str) -> None:
    """A decide that always sees a stale state (someone appends in between)
    gives up after max_attempts with RetriesExhausted (a ConcurrencyError)."""
    stream = "user-" + uid
    store.append(stream, UserRegistered("a@x", "A"))
    other = esrc.EventStore.connect(store.conn.info.dsn, types=types)
    calls = []

    def meddling_decide(cmd: object, state: object) -> list[object]:
        calls.append(1)
        other.append(stream, UserNameChanged("meddler%d" % len(calls)))
        return [UserNameChanged("mine")]

    d: esrc.Decider[Any, Any, Any] = esrc.Decider(lambda: None, decider.evolve, meddling_decide)
    with pytest.raises(esrc.RetriesExhausted) as e:
        esrc.CommandHandler(store, d, max_attempts=4, backoff=Backoff(0.001)).handle(stream, object())
    other.close()
    assert len(calls) == 4 and e.value.sqlstate == "40001"
    assert all(ev.event.name != "mine" for ev in store.read_stream(stream)[1:])


# 16 workers, bank accounts: a withdrawal is refused when the balance is
# short, so the invariant "a balance is never negative" holds only if no
# decision is taken on a stale state.

bank = esrc.EventTypes()


@bank.register
@dataclass(frozen=True)
class Deposited:
    amount: int


@bank.register
@dataclass(frozen=True)
class Withdrawn:
    amount: int


@dataclass(frozen=True)
class Deposit:
    amount: int
    command_id: uuid.UUID


@dataclass(frozen=True)
class Withdraw:
    amount: int
    command_id: uuid.UUID


class Insufficient(Exception):
    pass


def bank_decide(c: Union[Deposit, Withdraw], balance: int) -> list[Union[Deposited, Withdrawn]]:
    if isinstance(c, Deposit):
        return [Deposited(c.amount)]
    if balance < c.amount:
        raise Insufficient()
    return [Withdrawn(c.amount)]


def bank_evolve(balance: int, e: Union[Deposited, Withdrawn]) -> int:
    return balance + e.amount if isinstance(e, Deposited) else balance - e.amount


account: esrc.Decider[Union[Deposit, Withdraw], Union[Deposited, Withdrawn], int] = \
    esrc.Decider(lambda: 0, bank_evolve, bank_decide)


def test_sixteen_workers_replay_invariants(dsn: str, uid: str) -> None:
    streams = ["account-%s%d" % (uid, i) for i in range(4)]
    accepted: dict[uuid.UUID, str] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []
    deadline = time.monotonic() + 3.0   # the load's length; nothing is asserted about time

    def worker(n: int) -> None:
        rnd = random.Random(n)
        try:
            with esrc.EventStore.connect(dsn, types=bank) as store:
                h = esrc.CommandHandler(store, account, max_attempts=50)
                done = 0
                while time.monotonic() < deadline or done < 5:
                    s = rnd.choice(streams)
                    cid = uuid.uuid4()
                    cmd: Union[Deposit, Withdraw] = (Deposit(rnd.randint(1, 5), cid) if rnd.random() < 0.5
                                                     else Withdraw(rnd.randint(1, 8), cid))
                    try:
                        h.handle(s, cmd)
                    except Insufficient:
                        continue
                    finally:
                        done += 1
                    with lock:
                        accepted[cid] = s
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    with esrc.EventStore.connect(dsn, types=bank) as store:
        seen: set[uuid.UUID] = set()
        total = 0
        for s in streams:
            evs = store.read_stream(s)
            assert [e.version for e in evs] == list(range(len(evs))), "versions with a hole"
            balance = 0
            for e in evs:
                balance = bank_evolve(balance, e.event)
                assert balance >= 0, "%s went negative at version %d" % (s, e.version)
                seen.add(e.id)
            total += len(evs)
    # every accepted command is in the log exactly once, under its derived id
    assert total == len(accepted) == len(seen)
    assert seen == {esrc.event_id(c, 0) for c in accepted}
