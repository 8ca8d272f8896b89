"""DCB deciders (docs/dcb.md): a decision whose state is folded from the
events a :class:`~esrc.Query` selects, across streams, rather than from one
stream.

A :class:`DcbDecider` is the three pure functions of a :class:`Decider`
(``initial_state``, ``evolve``, ``decide``) and two more that say where the
decided events go: ``stream(command)``, the one stream they are appended
to, and ``tags(event)``, the tags each carries.  A
:class:`DcbCommandHandler` (sync) or :class:`AsyncDcbCommandHandler`
(asyncio) runs one command per attempt, in one transaction: take the
horizon (``safe_position``), read the query's events up to it
(``read_query``), fold, decide, append with ``append_if`` on the same query
after that horizon.  When the condition fails (an event matching the query
was stored since: :class:`AppendConditionError`, 40001) it rolls back,
waits the same jittered :class:`Backoff` as :class:`CommandHandler` and
decides again, up to ``max_attempts``.  The events' ids derive from the
command id (:func:`event_id`), and an attempt that finds the command's
first event among the events it read returns what was stored instead of
deciding again: a command retried after a lost commit writes nothing
twice.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, Union

from . import _retry
from .dcb import AppendCondition, Query, QueryLike
from .decider import Backoff, command_id_of, event_id
from .errors import DecodeError
from .events import NewEvent, RecordedEvent
from .store import AsyncEventStore, EventStore

C = TypeVar("C")
E = TypeVar("E")
S = TypeVar("S")


@dataclass(frozen=True)
class DcbDecider(Generic[C, E, S]):
    """A decision across streams: the state is folded from the events a
    query selects; the decided events go to ``stream(command)``, each with
    ``tags(event)``."""
    initial_state: Callable[[], S]
    evolve: Callable[[S, E], S]
    decide: Callable[[C, S], Sequence[E]]
    stream: Callable[[C], str]
    """The stream the command's events are appended to (the entity they
    are mainly about: ``student-<id>``)."""
    tags: Callable[[E], Sequence[str]]
    """The tags of a decided event (``["student:s1", "course:c1"]``): what
    the queries of later decisions select it by."""

    def fold(self, events: Iterable[E], state: S | None = None) -> S:
        """The state after the events (from ``initial_state()`` unless given)."""
        s = self.initial_state() if state is None else state
        for e in events:
            s = self.evolve(s, e)
        return s


@dataclass(frozen=True)
class DcbOutcome(Generic[E, S]):
    """What :meth:`DcbCommandHandler.handle` did."""
    stream: str
    version: int | None
    """The stream's version after the command's events (``None``: it
    decided nothing)."""
    events: tuple[E, ...]
    state: S
    """The state after the new events."""
    after: int
    """The horizon the decision read up to (its condition's ``after``)."""
    attempts: int
    command_id: uuid.UUID
    already_applied: bool = False
    """The command's events were stored already (by an earlier call with
    the same command id whose commit was lost to the caller): nothing was
    decided or written; ``events`` are the stored ones."""


QueryOf = Union[QueryLike, Callable[[Any], QueryLike]]
"""A query, or a function of the command that returns one."""


def _query(query: QueryOf, command: object) -> QueryLike:
    if isinstance(query, (Query, Mapping)):
        return query
    return query(command)


def _decoded(events: Sequence[RecordedEvent]) -> list[Any]:
    out = []
    for e in events:
        if e.is_tombstone or e.redacted:
            continue   # an erased stream's events keep their tags, not their data
        if e.event is None:
            raise DecodeError("event type %s (stream %s, version %d) is not registered"
                              % (e.type, e.stream, e.version),
                              hint="Register the classes of the events the query selects with "
                                   "EventTypes.register, or narrow the query's types.")
        out.append(e.event)
    return out


def _applied(events: Sequence[RecordedEvent], cid: uuid.UUID) -> list[RecordedEvent] | None:
    """The command's stored events if its first one is among the read ones."""
    first = event_id(cid, 0)
    start = next((i for i, e in enumerate(events) if e.id == first), None)
    if start is None:
        return None
    mine = {e.id: e for e in events[start:]}
    out: list[RecordedEvent] = []
    while event_id(cid, len(out)) in mine:
        out.append(mine[event_id(cid, len(out))])
    return out


def _encode(store: EventStore | AsyncEventStore, decider: DcbDecider[Any, Any, Any], events: Sequence[object],
            cid: uuid.UUID, metadata: Mapping[str, Any] | None) -> list[NewEvent]:
    return [store.types.encode(e, metadata=metadata, id=event_id(cid, i), tags=tuple(decider.tags(e)))
            for i, e in enumerate(events)]


def _what(query: QueryLike) -> str:
    """The target of a decision in the message of :class:`~esrc.RetriesExhausted`."""
    return "decision on query %s" % (query.as_json() if isinstance(query, Query) else dict(query))


_HINT = "The events of the query are written very often; raise max_attempts or narrow the query."


class DcbCommandHandler(Generic[C, E, S]):
    """Runs commands of a :class:`DcbDecider` against an :class:`EventStore`."""

    def __init__(self, store: EventStore, decider: DcbDecider[C, E, S], *, max_attempts: int = 10,
                 backoff: Backoff = Backoff()) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.store = store
        self.decider = decider
        self.max_attempts = max_attempts
        self.backoff = backoff

    def read(self, query: QueryLike) -> tuple[S, int, list[RecordedEvent]]:
        """The state folded from the query's events up to the horizon, the
        horizon, and the events (in the caller's transaction)."""
        after = self.store.safe_position()
        events = self.store.read_query(query, up_to=after)
        return self.decider.fold(_decoded(events)), after, events

    def handle(self, query: QueryOf, command: C, *, command_id: uuid.UUID | None = None,
               metadata: Mapping[str, Any] | None = None) -> DcbOutcome[E, S]:
        """Read the query's events up to the horizon, fold, decide, append
        with ``append_if`` on the query after that horizon; decided again
        when the condition fails (40001).  ``query``: a :class:`Query` (or
        its JSON shape), or a function of the command returning one.
        Exceptions of ``decide`` reach the caller (nothing is written)."""
        cid = command_id_of(command, command_id)
        q = _query(query, command)
        stream = self.decider.stream(command)

        def attempt(n: int) -> DcbOutcome[E, S]:
            with self.store.transaction():   # a 40001 of the commit comes as an EsrcError too
                state, after, read = self.read(q)
                done = _applied(read, cid)
                if done is not None:
                    return DcbOutcome(done[-1].stream, done[-1].version,
                                      tuple(e.event for e in done), state, after, n, cid, True)
                events = tuple(self.decider.decide(command, state))
                version = None
                if events:
                    version = self.store.append_if(
                        stream, _encode(self.store, self.decider, events, cid, metadata),
                        _condition(q, after))
            return DcbOutcome(stream, version, events, self.decider.fold(events, state), after, n, cid)
        return _retry.run(self.max_attempts, self.backoff, _what(q), _HINT, attempt)


def _condition(query: QueryLike, after: int) -> Any:
    if isinstance(query, Query):
        return AppendCondition(query, after)
    return {"fail_if_events_match": dict(query), "after": after}


class AsyncDcbCommandHandler(Generic[C, E, S]):
    """The asyncio mirror of :class:`DcbCommandHandler`."""

    def __init__(self, store: AsyncEventStore, decider: DcbDecider[C, E, S], *, max_attempts: int = 10,
                 backoff: Backoff = Backoff()) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.store = store
        self.decider = decider
        self.max_attempts = max_attempts
        self.backoff = backoff

    async def read(self, query: QueryLike) -> tuple[S, int, list[RecordedEvent]]:
        after = await self.store.safe_position()
        events = await self.store.read_query(query, up_to=after)
        return self.decider.fold(_decoded(events)), after, events

    async def handle(self, query: QueryOf, command: C, *, command_id: uuid.UUID | None = None,
                     metadata: Mapping[str, Any] | None = None) -> DcbOutcome[E, S]:
        cid = command_id_of(command, command_id)
        q = _query(query, command)
        stream = self.decider.stream(command)

        async def attempt(n: int) -> DcbOutcome[E, S]:
            async with self.store.transaction():
                state, after, read = await self.read(q)
                done = _applied(read, cid)
                if done is not None:
                    return DcbOutcome(done[-1].stream, done[-1].version,
                                      tuple(e.event for e in done), state, after, n, cid, True)
                events = tuple(self.decider.decide(command, state))
                version = None
                if events:
                    version = await self.store.append_if(
                        stream, _encode(self.store, self.decider, events, cid, metadata),
                        _condition(q, after))
            return DcbOutcome(stream, version, events, self.decider.fold(events, state), after, n, cid)
        return await _retry.run_async(self.max_attempts, self.backoff, _what(q), _HINT, attempt)
