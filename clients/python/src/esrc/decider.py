"""Deciders and the command handlers that run them against the store.

A :class:`Decider` is three pure functions: ``initial_state()``,
``evolve(state, event) -> state`` and ``decide(command, state) -> events``
(raise an exception of your own to reject a command).  A
:class:`CommandHandler` (sync) or :class:`AsyncCommandHandler` (asyncio)
runs one command in one transaction: load the stream's state (fold its
events in Python, or read the row of the category's snapshot table when the
decider has ``from_snapshot``), decide, append with the loaded version as
``expected_version``.  On 40001 it rolls back, waits a jittered backoff and
does it all again, up to ``max_attempts``.  The ids of the events are
derived from the command id (uuid5), so a command retried after a lost
connection is not written twice.
"""
from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from . import _retry
from .errors import DecodeError
from .events import _ERASED_DATA, DELETED, ERASED, EventTypes, NewEvent
from .store import AsyncEventStore, EventStore

C = TypeVar("C")
E = TypeVar("E")
S = TypeVar("S")


@dataclass(frozen=True)
class Decider(Generic[C, E, S]):
    """The domain logic of one kind of stream, in three pure functions."""
    initial_state: Callable[[], S]
    evolve: Callable[[S, E], S]
    decide: Callable[[C, S], Sequence[E]]
    from_snapshot: Callable[[Any], S] | None = None
    """The state from a snapshot row's ``state`` (jsonb); when set and the
    stream's category has a snapshot table, the handler loads from it
    instead of folding the events."""

    def fold(self, events: Iterable[E], state: S | None = None) -> S:
        """The state after the events (from ``initial_state()`` unless given)."""
        s = self.initial_state() if state is None else state
        for e in events:
            s = self.evolve(s, e)
        return s


@dataclass(frozen=True)
class Backoff:
    """Full-jitter exponential backoff: attempt n waits a uniform time in
    ``[0, min(maximum, first * factor ** (n - 1))]`` seconds."""
    first: float = 0.002
    factor: float = 2.0
    maximum: float = 0.25

    def delay(self, attempt: int) -> float:
        return random.uniform(0.0, min(self.maximum, self.first * self.factor ** max(0, attempt - 1)))


@dataclass(frozen=True)
class Outcome(Generic[E, S]):
    """What :meth:`CommandHandler.handle` did."""
    stream: str
    version: int
    """The stream's version after the command (the loaded one if it decided nothing)."""
    events: tuple[E, ...]
    state: S
    """The state after the new events."""
    attempts: int
    command_id: uuid.UUID


def event_id(command_id: uuid.UUID, index: int) -> uuid.UUID:
    """The id of the command's ``index``-th event: the same on every attempt."""
    return uuid.uuid5(command_id, str(index))


def command_id_of(command: object, given: uuid.UUID | None) -> uuid.UUID:
    """The given id, else the command's ``command_id`` attribute if it is a
    UUID, else a new one (then only retries inside one call are covered)."""
    if given is not None:
        return given
    cid = getattr(command, "command_id", None)
    return cid if isinstance(cid, uuid.UUID) else uuid.uuid4()


def _category(stream: str) -> str:
    return stream.split("-", 1)[0]


def _folded(decider: Decider[Any, E, S], types: EventTypes, stream: str,
            rows: Sequence[tuple[Any, ...]]) -> tuple[S, int | None]:
    """The state from ``(version, type, data, metadata)`` rows, and the
    last row's version."""
    state = decider.initial_state()
    for version, type_name, data, metadata in rows:
        if type_name in (ERASED, DELETED) or (metadata is None and data == _ERASED_DATA):
            continue  # a soft-deleted stream starts again from the initial state
        event = types.decode(type_name, data, metadata)
        if event is None:
            raise DecodeError("event type %s (stream %s, version %d) is not registered"
                              % (type_name, stream, version),
                              hint="Register the classes of the decider's events with EventTypes.register.")
        state = decider.evolve(state, event)
    return state, (rows[-1][0] if rows else None)


class CommandHandler(Generic[C, E, S]):
    """Runs commands of a :class:`Decider` against an :class:`EventStore`."""

    def __init__(self, store: EventStore, decider: Decider[C, E, S], *, max_attempts: int = 10,
                 backoff: Backoff = Backoff(), use_snapshots: bool = True) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.store = store
        self.decider = decider
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.use_snapshots = use_snapshots

    def load(self, stream: str) -> tuple[S, int]:
        """The stream's state and version (-1: no events), in the caller's
        transaction."""
        if self.use_snapshots and self.decider.from_snapshot is not None:
            snapshot = self.store.snapshot_of(_category(stream))
            if snapshot is not None:
                raw, version = self.store.load(snapshot, stream)
                return (self.decider.from_snapshot(raw) if version >= 0
                        else self.decider.initial_state()), version
        state, last = _folded(self.decider, self.store.types, stream, self.store.fold_rows(stream))
        # the last visible event's version is the one read with the events
        # (one statement, one snapshot); only a stream with none visible
        # needs its version on its own
        return state, last if last is not None else self.store.stream_version(stream)

    def handle(self, stream: str, command: C, *, command_id: uuid.UUID | None = None,
               metadata: Mapping[str, Any] | None = None) -> Outcome[E, S]:
        """Load, decide, append with the loaded version; retried on 40001.
        Exceptions of ``decide`` reach the caller (nothing is written)."""
        cid = command_id_of(command, command_id)

        def attempt(n: int) -> Outcome[E, S]:
            with self.store.conn.transaction():
                state, version = self.load(stream)
                events = tuple(self.decider.decide(command, state))
                if events:
                    version = self.store.append_encoded(
                        stream, _encode(self.store, events, cid, metadata), expected_version=version)
            return Outcome(stream, version, events, self.decider.fold(events, state), n, cid)
        return _retry.run(self.max_attempts, self.backoff, "command on stream " + stream, _HINT, attempt)


class AsyncCommandHandler(Generic[C, E, S]):
    """The asyncio mirror of :class:`CommandHandler`."""

    def __init__(self, store: AsyncEventStore, decider: Decider[C, E, S], *, max_attempts: int = 10,
                 backoff: Backoff = Backoff(), use_snapshots: bool = True) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.store = store
        self.decider = decider
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.use_snapshots = use_snapshots

    async def load(self, stream: str) -> tuple[S, int]:
        if self.use_snapshots and self.decider.from_snapshot is not None:
            snapshot = await self.store.snapshot_of(_category(stream))
            if snapshot is not None:
                raw, version = await self.store.load(snapshot, stream)
                return (self.decider.from_snapshot(raw) if version >= 0
                        else self.decider.initial_state()), version
        state, last = _folded(self.decider, self.store.types, stream, await self.store.fold_rows(stream))
        return state, last if last is not None else await self.store.stream_version(stream)

    async def handle(self, stream: str, command: C, *, command_id: uuid.UUID | None = None,
                     metadata: Mapping[str, Any] | None = None) -> Outcome[E, S]:
        cid = command_id_of(command, command_id)

        async def attempt(n: int) -> Outcome[E, S]:
            async with self.store.transaction():
                state, version = await self.load(stream)
                events = tuple(self.decider.decide(command, state))
                if events:
                    version = await self.store.append_encoded(
                        stream, _encode(self.store, events, cid, metadata), expected_version=version)
            return Outcome(stream, version, events, self.decider.fold(events, state), n, cid)
        return await _retry.run_async(self.max_attempts, self.backoff, "command on stream " + stream, _HINT,
                                      attempt)


def _encode(store: EventStore | AsyncEventStore, events: Sequence[object], cid: uuid.UUID,
            metadata: Mapping[str, Any] | None) -> list[NewEvent]:
    return [store.types.encode(e, metadata=metadata, id=event_id(cid, i)) for i, e in enumerate(events)]


_HINT = "The stream is written very often; raise max_attempts or make its commands rarer."
