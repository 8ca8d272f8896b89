"""Subscription consumers and projections written in Python.

A :class:`Consumer` is one member of an esrc subscription (its consumer
group): it polls batches (``esrc.poll``, waiting for commits), hands each
to your handler and acknowledges it (``esrc.ack``).

- ``exactly_once=True`` (the default): poll, handler, ack in one
  transaction; the handler gets the connection of that transaction, so
  what it writes there commits with the checkpoint or not at all.
- ``exactly_once=False``: at-least-once, for effects outside the database:
  one autocommit ``esrc.poll(..., ack => last position of the batch
  before)`` per batch, then the handler; a crash delivers the
  unacknowledged batch again.

On 40001 (another member acknowledged first) and 55000 (this member lost
its partitions) the batch is dropped and polled again after a short
jittered backoff; a lost connection is opened again with backoff.  SIGTERM
and SIGINT (when ``run`` is called in the main thread) stop it after the
current batch; a waiting poll is cancelled.  :class:`AsyncConsumer` is the
asyncio mirror.

A :class:`Projection` is a consumer's handler with ``apply`` per event and
``forget`` for the tombstones (``esrc.erased``, ``esrc.deleted``): there it
removes what it derived from the stream.
"""
from __future__ import annotations

import asyncio
import datetime
import signal
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import psycopg

from .decider import Backoff
from .errors import (CancelledError, ConcurrencyError, ConnectionLostError, DuplicateIdError,
                     ObjectStateError, EsrcError, translated)
from .events import EventTypes, RecordedEvent
from .store import COLUMNS, AsyncEventStore, EventStore

POLL_SQL = "SELECT " + COLUMNS + " FROM esrc.poll(%s, %s, %s, %s, %s)"
ACK_SQL = "SELECT esrc.ack(%s, %s, %s)"

Handler = Callable[[list[RecordedEvent], psycopg.Connection[Any]], None]
AsyncHandler = Callable[[list[RecordedEvent], psycopg.AsyncConnection[Any]], Awaitable[None]]


@dataclass
class ConsumerStats:
    batches: int = 0
    events: int = 0
    retries: int = 0
    reconnects: int = 0


def subscription_exists_sql() -> str:
    return "SELECT 1 FROM esrc.subscriptions WHERE name = %s"


CREATE_SUBSCRIPTION_SQL = "SELECT esrc.create_subscription(%s, %s, %s)"


def ensure_subscription(store: EventStore, name: str, categories: Sequence[str] | None = None,
                        partitions: int = 1) -> bool:
    """Create the subscription unless it exists; True if this call created it."""
    if store._rows(subscription_exists_sql(), (name,)):
        return False
    try:
        with store.transaction():
            store._rows(CREATE_SUBSCRIPTION_SQL, (name, list(categories) if categories else None, partitions))
    except DuplicateIdError:
        return False  # another member created it first
    return True


class Projection:
    """A read model kept by a :class:`Consumer` (exactly once).  Subclass it:
    ``setup`` creates its tables, ``apply`` derives from one event,
    ``forget`` removes what was derived from ``event.stream`` when its
    tombstone comes (the stream was erased or deleted).  Redacted events
    (of a stream erased before the projection reached them) are skipped:
    their tombstone follows."""
    name: str = ""
    categories: Sequence[str] | None = None
    partitions: int = 1

    def setup(self, conn: psycopg.Connection[Any]) -> None:
        """Create the tables (runs once per consumer start, in a transaction)."""

    def apply(self, event: RecordedEvent, conn: psycopg.Connection[Any]) -> None:
        raise NotImplementedError

    def forget(self, event: RecordedEvent, conn: psycopg.Connection[Any]) -> None:
        raise NotImplementedError(
            "%s receives a tombstone (%s of %s) and has no forget(): remove what it derived "
            "from that stream there" % (type(self).__name__, event.type, event.stream))

    def handle(self, events: list[RecordedEvent], conn: psycopg.Connection[Any]) -> None:
        for e in events:
            if e.is_tombstone:
                self.forget(e, conn)
            elif not e.redacted:
                self.apply(e, conn)


class AsyncProjection:
    """The asyncio mirror of :class:`Projection` (async ``setup``,
    ``apply``, ``forget``), run by :meth:`AsyncConsumer.for_projection`."""
    name: str = ""
    categories: Sequence[str] | None = None
    partitions: int = 1

    async def setup(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Create the tables (runs once per consumer start, in a transaction)."""

    async def apply(self, event: RecordedEvent, conn: psycopg.AsyncConnection[Any]) -> None:
        raise NotImplementedError

    async def forget(self, event: RecordedEvent, conn: psycopg.AsyncConnection[Any]) -> None:
        raise NotImplementedError(
            "%s receives a tombstone (%s of %s) and has no forget(): remove what it derived "
            "from that stream there" % (type(self).__name__, event.type, event.stream))

    async def handle(self, events: list[RecordedEvent], conn: psycopg.AsyncConnection[Any]) -> None:
        for e in events:
            if e.is_tombstone:
                await self.forget(e, conn)
            elif not e.redacted:
                await self.apply(e, conn)


async def ensure_subscription_async(store: AsyncEventStore, name: str,
                                    categories: Sequence[str] | None = None,
                                    partitions: int = 1) -> bool:
    """The asyncio mirror of :func:`ensure_subscription`."""
    if await store._rows(subscription_exists_sql(), (name,)):
        return False
    try:
        async with store.transaction():
            await store._rows(CREATE_SUBSCRIPTION_SQL,
                              (name, list(categories) if categories else None, partitions))
    except DuplicateIdError:
        return False
    return True


class Consumer:
    """One member of a subscription (sync)."""

    def __init__(self, conninfo: str, subscription: str, member: str, handler: Handler, *,
                 exactly_once: bool = True, max_count: int = 100, wait: float = 5.0,
                 types: EventTypes | None = None, backoff: Backoff = Backoff(0.01, 2.0, 5.0),
                 on_batch: Callable[[list[RecordedEvent]], None] | None = None,
                 on_retry: Callable[[EsrcError], None] | None = None,
                 **connect_kwargs: Any) -> None:
        self.conninfo = conninfo
        self.subscription = subscription
        self.member = member
        self.handler = handler
        self.exactly_once = exactly_once
        self.max_count = max_count
        self.wait = datetime.timedelta(seconds=wait)
        self.types = types if types is not None else EventTypes()
        self.backoff = backoff
        self.on_batch = on_batch
        self.on_retry = on_retry
        self.connect_kwargs = {"application_name": "esrc-consumer " + member, **connect_kwargs,
                               "autocommit": True}
        self.stats = ConsumerStats()
        self.stopping = False
        self._woken = threading.Event()
        self._in_poll = False
        self._pending_ack: int | None = None
        self._store: EventStore | None = None

    @classmethod
    def for_projection(cls, conninfo: str, projection: Projection, member: str,
                       **kwargs: Any) -> Consumer:
        """A consumer of the projection's subscription (created if missing,
        named after the projection), exactly once, with ``setup`` run."""
        c = cls(conninfo, projection.name, member, projection.handle, exactly_once=True, **kwargs)
        store = c.store
        ensure_subscription(store, projection.name, projection.categories, projection.partitions)
        with store.transaction():
            projection.setup(store.conn)
        return c

    @property
    def store(self) -> EventStore:
        """The consumer's store (its connection), opened on first use."""
        if self._store is None or self._store.conn.closed:
            self._store = EventStore.connect(self.conninfo, types=self.types, **self.connect_kwargs)
            self._store.check_version()
        return self._store

    @property
    def conn(self) -> psycopg.Connection[Any]:
        return self.store.conn

    def stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        """Stop after the current batch (a waiting poll is cancelled)."""
        self.stopping = True
        self._woken.set()
        if self._in_poll and self._store is not None:
            self._store.conn.cancel_safe()

    def poll_once(self) -> list[RecordedEvent]:
        """One batch: poll, handler, ack (see the module's doc)."""
        store = self.store
        conn = store.conn
        if self.exactly_once:
            with store.transaction():
                rows = self._poll(conn, None)
                events = [self.types.recorded(r) for r in rows]
                if events:
                    self.handler(events, conn)
                    with translated():
                        conn.execute(ACK_SQL, (self.subscription, self.member, None))
            return events
        try:
            rows = self._poll(conn, self._pending_ack)
        except (ConcurrencyError, ObjectStateError):
            self._pending_ack = None  # not acknowledged: the batch comes again
            raise
        self._pending_ack = None
        events = [self.types.recorded(r) for r in rows]
        if events:
            self.handler(events, conn)
            self._pending_ack = events[-1].position
        return events

    def _poll(self, conn: psycopg.Connection[Any], ack: int | None) -> list[tuple[Any, ...]]:
        self._in_poll = ack is None  # a poll with ack does not wait
        try:
            with translated():
                return conn.execute(POLL_SQL, (self.subscription, self.member, self.max_count,
                                               self.wait, ack)).fetchall()
        finally:
            self._in_poll = False

    def _sleep(self, attempt: int) -> None:
        self._woken.wait(self.backoff.delay(attempt))

    def run(self, *, install_signal_handlers: bool = True) -> ConsumerStats:
        """Poll batches until :meth:`stop` (or SIGTERM/SIGINT)."""
        previous: dict[int, Any] = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self.stop)
        failures = 0
        try:
            while not self.stopping:
                try:
                    events = self.poll_once()
                except CancelledError:
                    if self.stopping:
                        break
                    raise
                except (ConcurrencyError, ObjectStateError) as e:
                    self.stats.retries += 1
                    failures += 1
                    if self.on_retry:
                        self.on_retry(e)
                    self._sleep(failures)
                    continue
                except ConnectionLostError as e:
                    if self.stopping:
                        break
                    self.stats.reconnects += 1
                    failures += 1
                    if self.on_retry:
                        self.on_retry(e)
                    self._close()
                    self._sleep(failures)
                    continue
                failures = 0
                if events:
                    self.stats.batches += 1
                    self.stats.events += len(events)
                    if self.on_batch:
                        self.on_batch(events)
            self._final_ack()
        finally:
            for signum, h in previous.items():
                signal.signal(signum, h)
            self._close()
        return self.stats

    def _final_ack(self) -> None:
        if self._pending_ack is None or self._store is None:
            return
        try:
            with translated():
                self._store.conn.execute(ACK_SQL, (self.subscription, self.member, self._pending_ack))
        except (ConcurrencyError, ObjectStateError) as e:
            if self.on_retry:
                self.on_retry(e)  # not acknowledged: it comes again
        self._pending_ack = None

    def _close(self) -> None:
        if self._store is not None:
            self._store.conn.close()
            self._store = None


class AsyncConsumer:
    """One member of a subscription (asyncio): the mirror of :class:`Consumer`."""

    def __init__(self, conninfo: str, subscription: str, member: str, handler: AsyncHandler, *,
                 exactly_once: bool = True, max_count: int = 100, wait: float = 5.0,
                 types: EventTypes | None = None, backoff: Backoff = Backoff(0.01, 2.0, 5.0),
                 on_batch: Callable[[list[RecordedEvent]], None] | None = None,
                 on_retry: Callable[[EsrcError], None] | None = None,
                 **connect_kwargs: Any) -> None:
        self.conninfo = conninfo
        self.subscription = subscription
        self.member = member
        self.handler = handler
        self.exactly_once = exactly_once
        self.max_count = max_count
        self.wait = datetime.timedelta(seconds=wait)
        self.types = types if types is not None else EventTypes()
        self.backoff = backoff
        self.on_batch = on_batch
        self.on_retry = on_retry
        self.connect_kwargs = {"application_name": "esrc-consumer " + member, **connect_kwargs,
                               "autocommit": True}
        self.stats = ConsumerStats()
        self.stopping = False
        self._woken = asyncio.Event()
        self._in_poll = False
        self._pending_ack: int | None = None
        self._store: AsyncEventStore | None = None
        self._cancels: set[asyncio.Task[None]] = set()

    @classmethod
    async def for_projection(cls, conninfo: str, projection: AsyncProjection, member: str,
                             **kwargs: Any) -> AsyncConsumer:
        """The asyncio mirror of :meth:`Consumer.for_projection`."""
        c = cls(conninfo, projection.name, member, projection.handle, exactly_once=True, **kwargs)
        store = await c.store()
        await ensure_subscription_async(store, projection.name, projection.categories,
                                        projection.partitions)
        async with store.transaction():
            await projection.setup(store.conn)
        return c

    async def store(self) -> AsyncEventStore:
        if self._store is None or self._store.conn.closed:
            self._store = await AsyncEventStore.connect(self.conninfo, types=self.types,
                                                        **self.connect_kwargs)
            await self._store.check_version()
        return self._store

    def stop(self) -> None:
        self.stopping = True
        self._woken.set()
        if self._in_poll and self._store is not None:
            t = asyncio.get_running_loop().create_task(self._store.conn.cancel_safe())
            self._cancels.add(t)
            t.add_done_callback(self._cancels.discard)

    async def poll_once(self) -> list[RecordedEvent]:
        store = await self.store()
        conn = store.conn
        if self.exactly_once:
            async with store.transaction():
                rows = await self._poll(conn, None)
                events = [self.types.recorded(r) for r in rows]
                if events:
                    await self.handler(events, conn)
                    with translated():
                        await conn.execute(ACK_SQL, (self.subscription, self.member, None))
            return events
        try:
            rows = await self._poll(conn, self._pending_ack)
        except (ConcurrencyError, ObjectStateError):
            self._pending_ack = None
            raise
        self._pending_ack = None
        events = [self.types.recorded(r) for r in rows]
        if events:
            await self.handler(events, conn)
            self._pending_ack = events[-1].position
        return events

    async def _poll(self, conn: psycopg.AsyncConnection[Any], ack: int | None) -> list[tuple[Any, ...]]:
        self._in_poll = ack is None
        try:
            with translated():
                cur = await conn.execute(POLL_SQL, (self.subscription, self.member, self.max_count,
                                                    self.wait, ack))
                return await cur.fetchall()
        finally:
            self._in_poll = False

    async def _sleep(self, attempt: int) -> None:
        try:
            await asyncio.wait_for(self._woken.wait(), self.backoff.delay(attempt))
        except asyncio.TimeoutError:
            pass

    async def run(self, *, install_signal_handlers: bool = True) -> ConsumerStats:
        loop = asyncio.get_running_loop()
        installed: list[int] = []
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
                installed.append(sig)
        failures = 0
        try:
            while not self.stopping:
                try:
                    events = await self.poll_once()
                except CancelledError:
                    if self.stopping:
                        break
                    raise
                except (ConcurrencyError, ObjectStateError, ConnectionLostError) as e:
                    if self.stopping and isinstance(e, ConnectionLostError):
                        break
                    if isinstance(e, ConnectionLostError):
                        self.stats.reconnects += 1
                        await self._close()
                    else:
                        self.stats.retries += 1
                    failures += 1
                    if self.on_retry:
                        self.on_retry(e)
                    await self._sleep(failures)
                    continue
                failures = 0
                if events:
                    self.stats.batches += 1
                    self.stats.events += len(events)
                    if self.on_batch:
                        self.on_batch(events)
            if self._pending_ack is not None and self._store is not None:
                try:
                    with translated():
                        await self._store.conn.execute(ACK_SQL, (self.subscription, self.member,
                                                                 self._pending_ack))
                except (ConcurrencyError, ObjectStateError) as e:
                    if self.on_retry:
                        self.on_retry(e)
                self._pending_ack = None
        finally:
            for signum in installed:
                loop.remove_signal_handler(signum)
            await self._close()
        return self.stats

    async def _close(self) -> None:
        if self._store is not None:
            await self._store.conn.close()
            self._store = None
