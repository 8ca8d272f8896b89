"""Consumers and projections: exactly once across a kill mid-batch
(at-least-once delivers again), clean stop on SIGTERM, a projection that
removes what it derived when an erasure's tombstone comes, the asyncio
consumer."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest

import esrc
from users import UserNameChanged, UserRegistered, types

HERE = os.path.dirname(__file__)


def _crash_run(dsn: str, sub: str, table: str, mode: str, kill_after: int) -> int:
    p = subprocess.run([sys.executable, os.path.join(HERE, "crash_consumer.py"), dsn, sub, "m1",
                        table, mode, str(kill_after)], capture_output=True, text=True, timeout=60)
    if p.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(p.stderr)
    return p.returncode


def _setup(store: esrc.EventStore, uid: str, n: int) -> tuple[str, str, list[int]]:
    cat = "crash" + uid
    for i in range(n):
        store.append("%s-%d" % (cat, i % 3), esrc.NewEvent("Tick", {"i": i}))
    table = "consumed_" + uid
    store.conn.execute("CREATE TABLE %s (position bigint, stream text, version bigint, member text)" % table)
    store.conn.execute("SELECT esrc.create_subscription(%s, %s, 1)", (cat, [cat]))
    positions = [e.position for e in store.read_category(cat, 0, 10000)]
    assert len(positions) == n
    return cat, table, positions


@pytest.mark.parametrize("mode", ["exactly", "atleast"])
def test_consumer_killed_mid_batch(dsn: str, store: esrc.EventStore, uid: str, mode: str) -> None:
    sub, table, positions = _setup(store, uid + mode[0], 50)
    # batches of 10: killed after the 15th row, in the middle of the second batch
    assert _crash_run(dsn, sub, table, mode, 15) == -signal.SIGKILL
    assert _crash_run(dsn, sub, table, mode, 0) == 0
    rows = [r[0] for r in store.conn.execute("SELECT position FROM %s ORDER BY position" % table)]
    if mode == "exactly":
        # the rows of the killed batch rolled back with its ack: each event once
        assert rows == positions
    else:
        # every event at least once; the killed batch's first rows twice
        assert sorted(set(rows)) == positions
        assert len(rows) == len(positions) + 5


def test_consumer_stops_on_sigterm(dsn: str, store: esrc.EventStore, uid: str) -> None:
    sub, table, positions = _setup(store, uid, 5)
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "crash_consumer.py"), dsn, sub, "m1",
                          table, "exactly", "0", "serve"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        # wait until it waits in esrc.poll (the wait is 30 s), then SIGTERM
        for _ in range(300):
            row = store.conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'esrc-consumer m1' "
                "AND state = 'active' AND query LIKE %s", ("%esrc.poll%",)).fetchone()
            if row and row[0] == 1:
                break
            assert p.poll() is None, p.communicate()
            time.sleep(0.05)
        else:
            raise AssertionError("the consumer never waited in esrc.poll")
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=20)   # less than the poll's wait
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert "m1: stopped after 1 batches" in out, (out, err)
    assert [r[0] for r in store.conn.execute("SELECT position FROM %s ORDER BY 1" % table)] == positions


class UserNames(esrc.Projection):
    """Read model: user stream -> current name."""

    def __init__(self, name: str, category: str) -> None:
        self.name = name
        self.categories = [category]
        self.table = name + "_names"

    def setup(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS %s (stream text PRIMARY KEY, name text)" % self.table)

    def apply(self, event: esrc.RecordedEvent, conn: psycopg.Connection[Any]) -> None:
        if isinstance(event.event, (UserRegistered, UserNameChanged)):
            conn.execute("INSERT INTO %s VALUES (%%s, %%s) ON CONFLICT (stream) DO UPDATE "
                         "SET name = excluded.name" % self.table, (event.stream, event.event.name))

    def forget(self, event: esrc.RecordedEvent, conn: psycopg.Connection[Any]) -> None:
        conn.execute("DELETE FROM %s WHERE stream = %%s" % self.table, (event.stream,))


def _drain(c: esrc.Consumer) -> None:
    while c.poll_once():
        pass


def test_projection_removes_what_it_derived_on_erasure(dsn: str, store: esrc.EventStore,
                                                       admin: esrc.EventStore, uid: str) -> None:
    cat = "puser" + uid
    proj = UserNames("names" + uid, cat)
    for who in ("ann", "bob", "cid"):
        store.append("%s-%s" % (cat, who), UserRegistered(who + "@x", who.title()))
    store.append(cat + "-bob", UserNameChanged("Robert"))
    c = esrc.Consumer.for_projection(dsn, proj, "p1", types=types, wait=0.0)
    _drain(c)
    names = dict(store.conn.execute("SELECT stream, name FROM %s" % proj.table).fetchall())
    assert names == {cat + "-ann": "Ann", cat + "-bob": "Robert", cat + "-cid": "Cid"}
    admin.conn.execute("SELECT esrc.erase_stream(%s, 'subject request')", (cat + "-bob",))
    admin.conn.execute("SELECT esrc.delete_stream(%s, 'closed')", (cat + "-cid",))
    _drain(c)
    names = dict(store.conn.execute("SELECT stream, name FROM %s" % proj.table).fetchall())
    assert names == {cat + "-ann": "Ann"}
    # a projection started after the erasure sees the redacted events, then
    # the tombstone, and derives nothing from bob
    late = UserNames("late" + uid, cat)
    c2 = esrc.Consumer.for_projection(dsn, late, "p1", types=types, wait=0.0)
    _drain(c2)
    assert dict(store.conn.execute("SELECT stream, name FROM %s" % late.table).fetchall()) == \
        {cat + "-ann": "Ann"}
    c.stop()
    c2.stop()
    c.run(install_signal_handlers=False)
    c2.run(install_signal_handlers=False)


def test_async_consumer_exactly_once(dsn: str, store: esrc.EventStore, uid: str) -> None:
    sub, table, positions = _setup(store, uid, 25)

    async def main() -> esrc.ConsumerStats:
        seen: list[int] = []

        async def handler(events: list[esrc.RecordedEvent], conn: psycopg.AsyncConnection[Any]) -> None:
            for e in events:
                await conn.execute("INSERT INTO %s (position) VALUES (%%s)" % table, (e.position,))

        def on_batch(events: list[esrc.RecordedEvent]) -> None:
            seen.extend(e.position for e in events)
            if len(seen) >= len(positions):
                c.stop()

        c = esrc.AsyncConsumer(dsn, sub, "a1", handler, max_count=10, wait=5.0, on_batch=on_batch)
        return await c.run(install_signal_handlers=False)

    stats = asyncio.run(main())
    assert stats.events == 25 and stats.batches == 3
    rows = [r[0] for r in store.conn.execute("SELECT position FROM %s ORDER BY 1" % table)]
    assert rows == positions


class AsyncUserNames(esrc.AsyncProjection):
    def __init__(self, name: str, category: str) -> None:
        self.name = name
        self.categories = [category]
        self.table = name + "_names"

    async def setup(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute("CREATE TABLE IF NOT EXISTS %s (stream text PRIMARY KEY, name text)" % self.table)

    async def apply(self, event: esrc.RecordedEvent, conn: psycopg.AsyncConnection[Any]) -> None:
        if isinstance(event.event, (UserRegistered, UserNameChanged)):
            await conn.execute("INSERT INTO %s VALUES (%%s, %%s) ON CONFLICT (stream) DO UPDATE "
                               "SET name = excluded.name" % self.table, (event.stream, event.event.name))

    async def forget(self, event: esrc.RecordedEvent, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute("DELETE FROM %s WHERE stream = %%s" % self.table, (event.stream,))


def test_async_projection_erasure(dsn: str, store: esrc.EventStore, admin: esrc.EventStore, uid: str) -> None:
    cat = "apuser" + uid
    for who in ("ann", "bob"):
        store.append("%s-%s" % (cat, who), UserRegistered(who + "@x", who.title()))

    async def main() -> None:
        c = await esrc.AsyncConsumer.for_projection(dsn, AsyncUserNames("anames" + uid, cat), "p1",
                                                    types=types, wait=0.0)
        while await c.poll_once():
            pass
        admin.conn.execute("SELECT esrc.erase_stream(%s, 'subject request')", (cat + "-bob",))
        while await c.poll_once():
            pass
        c.stop()
        await c.run(install_signal_handlers=False)

    asyncio.run(main())
    assert store.conn.execute("SELECT stream, name FROM anames%s_names" % uid).fetchall() == [(cat + "-ann", "Ann")]


def test_consumer_reconnects_after_losing_its_connection(dsn: str, store: esrc.EventStore, uid: str) -> None:
    """The consumer's backend is terminated while it waits in esrc.poll:
    run() opens a new connection (with backoff) and goes on; every event
    is processed once."""
    import threading
    sub, table, positions = _setup(store, uid, 10)
    insert = "INSERT INTO %s (position) VALUES (%%s)" % table

    def handler(events: list[esrc.RecordedEvent], conn: psycopg.Connection[Any]) -> None:
        for e in events:
            conn.execute(insert, (e.position,))

    c = esrc.Consumer(dsn, sub, "r1", handler, max_count=100, wait=30.0,
                      backoff=esrc.Backoff(0.01, 2.0, 0.1))
    t = threading.Thread(target=c.run, kwargs={"install_signal_handlers": False})
    t.start()
    try:
        def wait_for(cond: Any) -> None:
            for _ in range(600):
                if cond():
                    return
                time.sleep(0.05)
            raise AssertionError("condition not reached")

        def consumed() -> int:
            row = store.conn.execute("SELECT count(*) FROM %s" % table).fetchone()
            return int(row[0]) if row else 0

        def waiting_pid() -> int | None:
            row = store.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'esrc-consumer r1' "
                "AND state = 'active' AND query LIKE %s", ("%esrc.poll%",)).fetchone()
            return int(row[0]) if row else None

        wait_for(lambda: consumed() == 10 and waiting_pid() is not None)
        store.conn.execute("SELECT pg_terminate_backend(%s)", (waiting_pid(),))
        wait_for(lambda: c.stats.reconnects >= 1)
        for i in range(5):
            store.append("%s-%d" % (sub, i), esrc.NewEvent("Tick", {"i": 100 + i}))
        wait_for(lambda: consumed() == 15)
    finally:
        c.stop()
        t.join(60)
    assert not t.is_alive()
    rows = [r[0] for r in store.conn.execute("SELECT position FROM %s ORDER BY 1" % table)]
    assert rows == [e.position for e in store.read_category(sub, 0, 1000)]
    assert c.stats.reconnects >= 1
