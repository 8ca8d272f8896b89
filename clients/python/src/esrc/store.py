"""The event store: appends and reads over one psycopg connection, in
:class:`EventStore` (sync) and :class:`AsyncEventStore` (asyncio), which
mirror each other method for method.

A store runs its statements on the connection it was given: in the
caller's transaction when one is open (``with store.transaction():``),
otherwise each on its own (the connections :meth:`EventStore.connect`
opens are in autocommit).  One store per thread or task, as for psycopg
connections.  The first use checks the server's esrc version.
"""
from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ._version import SERVER_VERSION_SQL, __version__
from .dcb import ConditionLike, QueryLike, condition_json, query_json
from .errors import InvalidEventError, ServerVersionError, from_psycopg, translated
from .events import EventTypes, NewEvent, RecordedEvent

NO_STREAM = -1
"""expected_version: the stream must not exist yet."""
STREAM_EXISTS = -2
"""expected_version: the stream must exist."""
ANY = None
"""expected_version: any version."""

COLUMNS = "position, stream, version, type, data, metadata, id, recorded_at, tags"
APPEND_SQL = "SELECT esrc.append(%s, %s, %s, %s, %s, %s)"
APPEND_TAGGED_SQL = "SELECT esrc.append(%s, %s, %s, %s, %s, %s, %s::text[])"
APPEND_BATCH_SQL = "SELECT esrc.append_batch(%s, %s, %s)"
APPEND_IF_SQL = "SELECT esrc.append_if(%s, %s, %s, %s)"
READ_QUERY_SQL = "SELECT " + COLUMNS + " FROM esrc.read_query(%s, %s, %s::integer, %s::bigint)"
SAFE_POSITION_SQL = "SELECT esrc.safe_position()"
READ_STREAM_SQL = "SELECT " + COLUMNS + " FROM esrc.read_stream(%s, %s::bigint, %s::integer)"
# the whole stream: no NULL argument to type
READ_WHOLE_STREAM_SQL = "SELECT " + COLUMNS + " FROM esrc.read_stream(%s)"
# what a command handler's fold needs, and nothing more
FOLD_SQL = "SELECT version, type, data, metadata FROM esrc.read_stream(%s)"
READ_BACKWARD_SQL = "SELECT " + COLUMNS + " FROM esrc.read_stream_backward(%s, %s::bigint, %s::integer)"
READ_ALL_SQL = "SELECT " + COLUMNS + " FROM esrc.read_all(%s, %s)"
READ_CATEGORY_SQL = "SELECT " + COLUMNS + " FROM esrc.read_category(%s, %s, %s)"
STREAM_VERSION_SQL = "SELECT esrc.stream_version(%s)"
LOAD_SQL = "SELECT state, version FROM esrc.load(%s, %s)"
SNAPSHOT_OF_SQL = ("SELECT snapshot::text FROM esrc.snapshots WHERE category = %s "
                   "ORDER BY created_at LIMIT 1")


def check_server_version(server: str | None, client: str = __version__) -> None:
    """Raise :class:`ServerVersionError` unless the extension's version
    (``None``: not installed) has the client's major.minor."""
    if server is None:
        raise ServerVersionError(
            "the extension esrc is not installed in this database",
            hint="A superuser runs CREATE EXTENSION esrc (see the esrc README, Install).")
    if server.split(".")[:2] != client.split(".")[:2]:
        want = ".".join(client.split(".")[:2])
        raise ServerVersionError(
            "this esrc client %s works with the esrc extension %s.x; the database has %s"
            % (client, want, server),
            hint="Update the extension (ALTER EXTENSION esrc UPDATE) or install the client "
                 "of the extension's version (pip install 'esrc==%s.*')."
                 % ".".join(server.split(".")[:2]))


def _check_tags(events: Sequence[NewEvent]) -> None:
    # a str is a Sequence[str]: "course:1" would be stored as 8 tags
    if any(isinstance(e.tags, str) for e in events):
        raise InvalidEventError("an event's tags must be a sequence of strings, not a string",
                                hint="Write tags=[\"course:1\"], not tags=\"course:1\".")


def _append_sql(e: NewEvent) -> str:
    return APPEND_TAGGED_SQL if e.tags else APPEND_SQL


def _append_params(stream: str, e: NewEvent, expected_version: int | None) -> tuple[Any, ...]:
    params: tuple[Any, ...] = (stream, e.type, Jsonb(e.data),
                               Jsonb(dict(e.metadata)) if e.metadata is not None else None,
                               expected_version, e.id)
    return params + (list(e.tags),) if e.tags else params


def _append_if_params(stream: str, events: Sequence[NewEvent], condition: ConditionLike,
                      expected_version: int | None) -> tuple[Any, ...]:
    _check_tags(events)
    if not events:
        raise InvalidEventError("no events to append")
    return (stream, Jsonb([e.as_batch_item() for e in events]), Jsonb(condition_json(condition)),
            expected_version)


def _batch_params(stream: str, events: Sequence[NewEvent],
                  expected_version: int | None) -> tuple[Any, ...]:
    return (stream, Jsonb([e.as_batch_item() for e in events]), expected_version)


class EventStore:
    """Appends and reads on one psycopg connection (sync)."""

    def __init__(self, conn: psycopg.Connection[Any], *, types: EventTypes | None = None,
                 check_version: bool = True) -> None:
        self.conn = conn
        self.types = types if types is not None else EventTypes()
        self._checked = not check_version
        self._snapshots: dict[str, str | None] = {}

    @classmethod
    def connect(cls, conninfo: str = "", *, types: EventTypes | None = None,
                **kwargs: Any) -> EventStore:
        """A store on a new connection in autocommit (``kwargs`` go to
        ``psycopg.connect``)."""
        kwargs.setdefault("autocommit", True)
        with translated():
            conn = psycopg.connect(conninfo, **kwargs)
        return cls(conn, types=types)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        if not self._checked:
            self.check_version()
        try:
            return self.conn.execute(sql, params).fetchall()
        except psycopg.Error as e:
            raise from_psycopg(e) from e

    def _value(self, sql: str, params: Sequence[Any]) -> Any:
        rows = self._rows(sql, params)
        return rows[0][0] if rows else None

    def check_version(self) -> None:
        """Check once that the database has the extension of this client's
        major.minor (:class:`ServerVersionError` otherwise)."""
        if self._checked:
            return
        with translated():
            row = self.conn.execute(SERVER_VERSION_SQL).fetchone()
        check_server_version(row[0] if row else None)
        self._checked = True

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """A transaction (a savepoint inside one) around the block."""
        with translated(), self.conn.transaction():
            yield

    # appends

    def append(self, stream: str, event: object, *, expected_version: int | None = None,
               metadata: Mapping[str, Any] | None = None, id: uuid.UUID | None = None,
               tags: Sequence[str] = ()) -> int:
        """Append one event (a registered dataclass or a :class:`NewEvent`);
        the stream's new version.  ``expected_version``: ``None`` any,
        ``NO_STREAM`` (-1), ``STREAM_EXISTS`` (-2) or the last version;
        :class:`ConcurrencyError` (40001) when it does not match.  An ``id``
        already stored in the stream makes it a no-op returning that event's
        version.  ``tags``: the event's DCB tags (a :class:`NewEvent`'s own
        win)."""
        return self.append_encoded(stream, [self.types.encode(event, metadata=metadata, id=id, tags=tags)],
                                   expected_version=expected_version)

    def append_batch(self, stream: str, events: Iterable[object], *,
                     expected_version: int | None = None,
                     metadata: Mapping[str, Any] | None = None) -> int:
        """Append events atomically after one version check; the version
        of the last one."""
        return self.append_encoded(stream, [self.types.encode(e, metadata=metadata) for e in events],
                                   expected_version=expected_version)

    def append_encoded(self, stream: str, events: Sequence[NewEvent], *,
                       expected_version: int | None = None) -> int:
        """Append :class:`NewEvent` s: ``esrc.append`` for one,
        ``esrc.append_batch`` for more."""
        _check_tags(events)
        if len(events) == 1:
            return int(self._value(_append_sql(events[0]), _append_params(stream, events[0], expected_version)))
        if not events:
            raise InvalidEventError("no events to append")
        return int(self._value(APPEND_BATCH_SQL, _batch_params(stream, events, expected_version)))

    def append_if(self, stream: str, events: Iterable[object], condition: ConditionLike,
                  expected_version: int | None = None, *,
                  metadata: Mapping[str, Any] | None = None) -> int:
        """``esrc.append_if``: append the events (registered dataclasses or
        :class:`NewEvent` s, with their tags) atomically only if no event
        matching ``condition.fail_if_events_match`` is stored after
        ``condition.after``; the stream's new version.  Otherwise
        :class:`ConcurrencyError` (40001, nothing written: read again,
        decide again), as when ``expected_version`` does not match.
        ``after`` above :meth:`safe_position` is refused
        (:class:`InvalidEventError`)."""
        encoded = [self.types.encode(e, metadata=metadata) for e in events]
        return int(self._value(APPEND_IF_SQL, _append_if_params(stream, encoded, condition,
                                                                expected_version)))

    # reads

    def safe_position(self) -> int:
        """``esrc.safe_position()``: the commit-safe horizon.  A decision
        takes it first, reads up to it (``read_query(..., up_to=h)``) and
        passes it as its condition's ``after``."""
        return int(self._value(SAFE_POSITION_SQL, ()))

    def read_query(self, query: QueryLike, after: int = 0, max_count: int | None = None,
                   up_to: int | None = None) -> list[RecordedEvent]:
        """``esrc.read_query``: the committed events matching ``query``
        (a :class:`Query` or its JSON shape) with ``after < position <=
        up_to`` (``None``: the horizon), in position order, at most
        ``max_count`` (``None``: all)."""
        return [self.types.recorded(r)
                for r in self._rows(READ_QUERY_SQL, (Jsonb(query_json(query)), after, max_count, up_to))]

    def read_stream(self, stream: str, from_version: int = 0,
                    max_count: int | None = None) -> list[RecordedEvent]:
        """The stream's visible events from ``from_version`` on, oldest first."""
        rows = (self._rows(READ_WHOLE_STREAM_SQL, (stream,)) if from_version == 0 and max_count is None
                else self._rows(READ_STREAM_SQL, (stream, from_version, max_count)))
        return [self.types.recorded(r) for r in rows]

    def fold_rows(self, stream: str) -> list[tuple[Any, ...]]:
        """``(version, type, data, metadata)`` of the stream's visible
        events: what a command handler folds."""
        return self._rows(FOLD_SQL, (stream,))

    def read_stream_backward(self, stream: str, from_version: int | None = None,
                             max_count: int | None = None) -> list[RecordedEvent]:
        """Newest first from ``from_version`` (``None``: the end)."""
        return [self.types.recorded(r) for r in self._rows(READ_BACKWARD_SQL, (stream, from_version, max_count))]

    def read_all(self, after_position: int = 0, max_count: int = 1000) -> list[RecordedEvent]:
        """Committed events of every stream after a position (commit-safe order)."""
        return [self.types.recorded(r) for r in self._rows(READ_ALL_SQL, (after_position, max_count))]

    def read_category(self, category: str, after_position: int = 0,
                      max_count: int = 1000) -> list[RecordedEvent]:
        """Committed events of one category after a position."""
        return [self.types.recorded(r)
                for r in self._rows(READ_CATEGORY_SQL, (category, after_position, max_count))]

    def iter_all(self, after_position: int = 0, *, category: str | None = None,
                 page: int = 1000) -> Iterator[RecordedEvent]:
        """Every committed event after a position, page by page, up to the
        end of the log as it is when the last page is read."""
        while True:
            batch = (self.read_category(category, after_position, page) if category
                     else self.read_all(after_position, page))
            yield from batch
            if len(batch) < page:
                return
            after_position = batch[-1].position

    def stream_version(self, stream: str) -> int:
        """The version of the stream's last event (hidden ones count), -1 if none."""
        return int(self._value(STREAM_VERSION_SQL, (stream,)))

    def load(self, snapshot: str, stream: str) -> tuple[Any, int]:
        """``esrc.load``: a snapshot row's state and version."""
        row = self._rows(LOAD_SQL, (snapshot, stream))[0]
        return row[0], int(row[1])

    def snapshot_of(self, category: str) -> str | None:
        """The snapshot table following a category, if any (cached)."""
        if category not in self._snapshots:
            self._snapshots[category] = self._value(SNAPSHOT_OF_SQL, (category,))
        return self._snapshots[category]

    # crypto-shredding

    def encrypt(self, subject: str, field: str, value: Any) -> str:
        """``esrc.encrypt``: the envelope to store in an event's data."""
        return str(self._value("SELECT esrc.encrypt(%s, %s, %s)", (subject, field, Jsonb(value))))

    def decrypt(self, subject: str, field: str, value: Any) -> Any:
        """``esrc.decrypt``: the value, ``None`` once the subject was forgotten."""
        return self._value("SELECT esrc.decrypt(%s, %s, %s)", (subject, field, Jsonb(value)))


class AsyncEventStore:
    """Appends and reads on one psycopg async connection: the asyncio
    mirror of :class:`EventStore`."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], *, types: EventTypes | None = None,
                 check_version: bool = True) -> None:
        self.conn = conn
        self.types = types if types is not None else EventTypes()
        self._checked = not check_version
        self._snapshots: dict[str, str | None] = {}

    @classmethod
    async def connect(cls, conninfo: str = "", *, types: EventTypes | None = None,
                      **kwargs: Any) -> AsyncEventStore:
        """A store on a new connection in autocommit."""
        kwargs.setdefault("autocommit", True)
        with translated():
            conn = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
        return cls(conn, types=types)

    async def close(self) -> None:
        await self.conn.close()

    async def __aenter__(self) -> AsyncEventStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        if not self._checked:
            await self.check_version()
        try:
            cur = await self.conn.execute(sql, params)
            return await cur.fetchall()
        except psycopg.Error as e:
            raise from_psycopg(e) from e

    async def _value(self, sql: str, params: Sequence[Any]) -> Any:
        rows = await self._rows(sql, params)
        return rows[0][0] if rows else None

    async def check_version(self) -> None:
        if self._checked:
            return
        with translated():
            cur = await self.conn.execute(SERVER_VERSION_SQL)
            row = await cur.fetchone()
        check_server_version(row[0] if row else None)
        self._checked = True

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        with translated():
            async with self.conn.transaction():
                yield

    async def append(self, stream: str, event: object, *, expected_version: int | None = None,
                     metadata: Mapping[str, Any] | None = None, id: uuid.UUID | None = None,
                     tags: Sequence[str] = ()) -> int:
        return await self.append_encoded(stream, [self.types.encode(event, metadata=metadata, id=id,
                                                                    tags=tags)],
                                         expected_version=expected_version)

    async def append_batch(self, stream: str, events: Iterable[object], *,
                           expected_version: int | None = None,
                           metadata: Mapping[str, Any] | None = None) -> int:
        return await self.append_encoded(stream, [self.types.encode(e, metadata=metadata) for e in events],
                                         expected_version=expected_version)

    async def append_encoded(self, stream: str, events: Sequence[NewEvent], *,
                             expected_version: int | None = None) -> int:
        _check_tags(events)
        if len(events) == 1:
            return int(await self._value(_append_sql(events[0]),
                                         _append_params(stream, events[0], expected_version)))
        if not events:
            raise InvalidEventError("no events to append")
        return int(await self._value(APPEND_BATCH_SQL, _batch_params(stream, events, expected_version)))

    async def append_if(self, stream: str, events: Iterable[object], condition: ConditionLike,
                        expected_version: int | None = None, *,
                        metadata: Mapping[str, Any] | None = None) -> int:
        encoded = [self.types.encode(e, metadata=metadata) for e in events]
        return int(await self._value(APPEND_IF_SQL, _append_if_params(stream, encoded, condition,
                                                                      expected_version)))

    async def safe_position(self) -> int:
        return int(await self._value(SAFE_POSITION_SQL, ()))

    async def read_query(self, query: QueryLike, after: int = 0, max_count: int | None = None,
                         up_to: int | None = None) -> list[RecordedEvent]:
        return [self.types.recorded(r)
                for r in await self._rows(READ_QUERY_SQL, (Jsonb(query_json(query)), after, max_count,
                                                           up_to))]

    async def read_stream(self, stream: str, from_version: int = 0,
                          max_count: int | None = None) -> list[RecordedEvent]:
        rows = (await self._rows(READ_WHOLE_STREAM_SQL, (stream,)) if from_version == 0 and max_count is None
                else await self._rows(READ_STREAM_SQL, (stream, from_version, max_count)))
        return [self.types.recorded(r) for r in rows]

    async def fold_rows(self, stream: str) -> list[tuple[Any, ...]]:
        return await self._rows(FOLD_SQL, (stream,))

    async def read_stream_backward(self, stream: str, from_version: int | None = None,
                                   max_count: int | None = None) -> list[RecordedEvent]:
        return [self.types.recorded(r)
                for r in await self._rows(READ_BACKWARD_SQL, (stream, from_version, max_count))]

    async def read_all(self, after_position: int = 0, max_count: int = 1000) -> list[RecordedEvent]:
        return [self.types.recorded(r) for r in await self._rows(READ_ALL_SQL, (after_position, max_count))]

    async def read_category(self, category: str, after_position: int = 0,
                            max_count: int = 1000) -> list[RecordedEvent]:
        return [self.types.recorded(r)
                for r in await self._rows(READ_CATEGORY_SQL, (category, after_position, max_count))]

    async def iter_all(self, after_position: int = 0, *, category: str | None = None,
                       page: int = 1000) -> AsyncIterator[RecordedEvent]:
        while True:
            batch = (await self.read_category(category, after_position, page) if category
                     else await self.read_all(after_position, page))
            for e in batch:
                yield e
            if len(batch) < page:
                return
            after_position = batch[-1].position

    async def stream_version(self, stream: str) -> int:
        return int(await self._value(STREAM_VERSION_SQL, (stream,)))

    async def load(self, snapshot: str, stream: str) -> tuple[Any, int]:
        row = (await self._rows(LOAD_SQL, (snapshot, stream)))[0]
        return row[0], int(row[1])

    async def snapshot_of(self, category: str) -> str | None:
        if category not in self._snapshots:
            self._snapshots[category] = await self._value(SNAPSHOT_OF_SQL, (category,))
        return self._snapshots[category]

    async def encrypt(self, subject: str, field: str, value: Any) -> str:
        return str(await self._value("SELECT esrc.encrypt(%s, %s, %s)", (subject, field, Jsonb(value))))

    async def decrypt(self, subject: str, field: str, value: Any) -> Any:
        return await self._value("SELECT esrc.decrypt(%s, %s, %s)", (subject, field, Jsonb(value)))
