"""Events: what is appended (:class:`NewEvent`), what is read
(:class:`RecordedEvent`), and the mapping between event type names and
Python dataclasses with upcasters for older shapes (:class:`EventTypes`).

A registered dataclass is stored as its fields in ``data`` (UUID, datetime,
date and Decimal as strings) under its type name.  A class whose shape
changed gets ``schema_version=N``: events written with it carry
``{"esrc_schema": N}`` in their metadata (nothing when N is 1), and an
upcaster registered for ``(name, n)`` turns the data of shape n into shape
n + 1 when an older event is read.  Old type names map to the class with
``aliases``.
"""
from __future__ import annotations

import dataclasses
import datetime
import decimal
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from .errors import DecodeError, InvalidEventError

ERASED = "esrc.erased"
"""The type of the tombstone ``esrc.erase_stream`` appends."""
DELETED = "esrc.deleted"
"""The type of the tombstone ``esrc.delete_stream`` appends."""
SCHEMA_KEY = "esrc_schema"
"""The metadata key holding the shape version of a registered class (> 1)."""

T = TypeVar("T")
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class NewEvent:
    """An event to append, in the shape of ``esrc.append``'s arguments."""
    type: str
    data: Any
    metadata: Mapping[str, Any] | None = None
    id: uuid.UUID | None = None
    tags: Sequence[str] = ()
    """DCB tags (``course:c1``, ``student:s1``): what a query of
    :meth:`EventStore.read_query` and the condition of
    :meth:`EventStore.append_if` match, across streams (docs/dcb.md)."""

    def as_batch_item(self) -> dict[str, Any]:
        """The object ``esrc.append_batch`` takes for this event."""
        item: dict[str, Any] = {"type": self.type, "data": self.data}
        if self.metadata is not None:
            item["metadata"] = dict(self.metadata)
        if self.id is not None:
            item["id"] = str(self.id)
        if self.tags:
            item["tags"] = list(self.tags)
        return item


@dataclass(slots=True)
class RecordedEvent:
    """A stored event (``esrc.event``), with ``event`` the instance of its
    registered class (``None`` for unregistered types, tombstones and
    redacted events).  Not frozen: a frozen dataclass costs a consumer
    several microseconds per event to build; treat it as read-only."""
    position: int
    stream: str
    version: int
    type: str
    data: Any
    metadata: Any
    id: uuid.UUID
    recorded_at: datetime.datetime
    event: Any = field(default=None, compare=False)
    tags: tuple[str, ...] = ()
    """The event's DCB tags, sorted (``()`` for an event without tags)."""

    @property
    def category(self) -> str:
        """The part of the stream name before the first ``-``."""
        return self.stream.split("-", 1)[0]

    @property
    def is_tombstone(self) -> bool:
        """``esrc.erased`` or ``esrc.deleted``: drop what you derived from
        this stream."""
        return self.type in (ERASED, DELETED)

    @property
    def redacted(self) -> bool:
        """An event of an erased stream: its data is ``{"erased": true}``."""
        return not self.is_tombstone and self.data == {"erased": True} and self.metadata is None


@dataclass
class _Entry:
    cls: type[Any]
    name: str
    schema_version: int
    names: tuple[str, ...] | None = None
    """The field names when every field is of a type JSON gives as it is
    (str, int, float, bool, Any) and the shape is the first: then an event
    is built straight from its data (resolved at first use)."""
    resolved: bool = False


_SCALARS = (str, int, float, bool, type(None))
_ERASED_DATA = {"erased": True}


def _to_json(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_to_json(v) for v in value]
    raise InvalidEventError("cannot store a value of type %s in an event" % type(value).__name__)


def _from_json(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        return _from_json(members[0], value) if len(members) == 1 else value
    if hint is uuid.UUID:
        return uuid.UUID(value)
    if hint is datetime.datetime:
        return datetime.datetime.fromisoformat(value)
    if hint is datetime.date:
        return datetime.date.fromisoformat(value)
    if hint is decimal.Decimal:
        return decimal.Decimal(value)
    if origin in (tuple, Sequence) and isinstance(value, list):
        args = typing.get_args(hint)
        item = args[0] if args else Any
        return tuple(_from_json(item, v) for v in value)
    if origin is list and isinstance(value, list):
        args = typing.get_args(hint)
        return [_from_json(args[0] if args else Any, v) for v in value]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return _construct(hint, value)
    return value


_PLAIN = (str, int, float, bool, Any)
# per class: its fields with their resolved types (None for the types JSON
# gives as they are), and whether all are such (cached: resolving them
# costs more than decoding an event)
_FIELDS: dict[type[Any], tuple[list[tuple[str, Any]], bool]] = {}


def _fields(cls: type[Any]) -> tuple[list[tuple[str, Any]], bool]:
    cached = _FIELDS.get(cls)
    if cached is None:
        hints = typing.get_type_hints(cls)
        fields = []
        for f in dataclasses.fields(cls):
            hint = hints.get(f.name, Any)
            fields.append((f.name, None if any(hint is p for p in _PLAIN) else hint))
        cached = (fields, all(h is None for _, h in fields))
        _FIELDS[cls] = cached
    return cached


def _construct(cls: type[T], data: Mapping[str, Any]) -> T:
    fields, plain = _fields(cls)
    if plain:
        if len(data) == len(fields):
            try:
                return cls(**data)   # the usual case: exactly the fields
            except TypeError:
                pass
        return cls(**{name: data[name] for name, _ in fields if name in data})
    return cls(**{name: (data[name] if hint is None else _from_json(hint, data[name]))
                  for name, hint in fields if name in data})


class EventTypes:
    """The registry of event classes: type name <-> dataclass, upcasters.

    >>> types = EventTypes()
    >>> @types.register
    ... @dataclass(frozen=True)
    ... class UserRegistered:
    ...     email: str
    """

    def __init__(self) -> None:
        self._by_name: dict[str, _Entry] = {}
        self._by_class: dict[type[Any], _Entry] = {}
        self._upcasters: dict[tuple[str, int], Upcaster] = {}

    @overload
    def register(self, cls: type[T]) -> type[T]: ...

    @overload
    def register(self, *, name: str | None = None, schema_version: int = 1,
                 aliases: Iterable[str] = ()) -> Callable[[type[T]], type[T]]: ...

    def register(self, cls: Any = None, *, name: str | None = None,
                 schema_version: int = 1, aliases: Iterable[str] = ()) -> Any:
        """Register a dataclass under ``name`` (default: the class name);
        ``aliases`` are older type names read as this class."""
        def deco(c: type[T]) -> type[T]:
            if not dataclasses.is_dataclass(c):
                raise TypeError("%s is not a dataclass" % c.__name__)
            n = name or c.__name__
            if n.startswith("esrc."):
                raise InvalidEventError('event types beginning with "esrc." are reserved', sqlstate=None)
            entry = _Entry(c, n, schema_version)
            self._by_class[c] = entry
            for key in (n, *aliases):
                self._by_name[key] = entry
            return c
        return deco(cls) if cls is not None else deco

    def upcaster(self, name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
        """Register ``fn(data) -> data`` turning the data of shape
        ``from_version`` of type ``name`` into shape ``from_version + 1``."""
        def deco(fn: Upcaster) -> Upcaster:
            self._upcasters[(name, from_version)] = fn
            return fn
        return deco

    def name_of(self, cls: type[Any]) -> str:
        """The type name a registered class is stored under."""
        try:
            return self._by_class[cls].name
        except KeyError:
            raise InvalidEventError("%s is not a registered event class" % cls.__name__) from None

    def encode(self, event: object, *, metadata: Mapping[str, Any] | None = None,
               id: uuid.UUID | None = None, tags: Sequence[str] = ()) -> NewEvent:
        """The :class:`NewEvent` for a registered dataclass instance (or a
        :class:`NewEvent`, given ``metadata``, ``id`` and ``tags`` if it has
        none)."""
        if isinstance(event, NewEvent):
            if (metadata is not None and event.metadata is None) or (id is not None and event.id is None) \
                    or (tags and not event.tags):
                return dataclasses.replace(event, metadata=event.metadata if event.metadata is not None else metadata,
                                           id=event.id or id, tags=event.tags or tuple(tags))
            return event
        entry = self._by_class.get(type(event))
        if entry is None:
            raise InvalidEventError(
                "%s is not a registered event class" % type(event).__name__,
                hint="Register it with EventTypes.register, or append a NewEvent.")
        names = self._plain_names(entry)
        if names is not None:
            data = {n: v if type(v) in _SCALARS else _to_json(v)
                    for n, v in ((n, getattr(event, n)) for n in names)}
        else:
            data = _to_json(event)
        if entry.schema_version > 1:
            metadata = {**(metadata or {}), SCHEMA_KEY: entry.schema_version}
        return NewEvent(entry.name, data, metadata, id, tuple(tags))

    def decode(self, type_name: str, data: Any, metadata: Any) -> Any:
        """The registered class's instance for a stored event, upcast to
        the class's current shape; ``None`` for an unregistered type."""
        entry = self._by_name.get(type_name)
        if entry is None:
            return None
        if self._plain_names(entry) is not None and type(data) is dict and \
                (metadata is None or not isinstance(metadata, dict) or SCHEMA_KEY not in metadata):
            try:
                return entry.cls(**data)   # the usual case: exactly the fields
            except TypeError:
                pass                       # extra or missing keys: the general path
        if type(data) is not dict:
            raise DecodeError("event of type %s has data that is not a JSON object" % type_name)
        shape = 1
        if metadata is not None and entry.schema_version > 1:
            got = metadata.get(SCHEMA_KEY) if isinstance(metadata, dict) else None
            shape = got if isinstance(got, int) else 1
        for n in range(shape, entry.schema_version):
            up = self._upcasters.get((type_name, n)) or self._upcasters.get((entry.name, n))
            if up is None:
                raise DecodeError(
                    "no upcaster from shape %d of event type %s" % (n, type_name),
                    hint="Register one with EventTypes.upcaster(%r, %d)." % (entry.name, n))
            data = up(dict(data))
        try:
            return _construct(entry.cls, data)
        except (TypeError, ValueError) as e:
            raise DecodeError("cannot read an event of type %s as %s: %s"
                              % (type_name, entry.cls.__name__, e)) from e

    @staticmethod
    def _plain_names(entry: _Entry) -> tuple[str, ...] | None:
        if not entry.resolved:
            fields, plain = _fields(entry.cls)
            entry.names = tuple(n for n, _ in fields) if plain and entry.schema_version == 1 else None
            entry.resolved = True
        return entry.names

    def recorded(self, row: Sequence[Any]) -> RecordedEvent:
        """A :class:`RecordedEvent` from a row of ``esrc.event``'s columns,
        decoded unless it is a tombstone or redacted."""
        position, stream, version, type_name, data, metadata, id_, recorded_at, tags = row
        decoded = None
        if type_name not in (ERASED, DELETED) and not (metadata is None and data == _ERASED_DATA):
            decoded = self.decode(type_name, data, metadata)
        return RecordedEvent(position, stream, version, type_name, data, metadata, id_, recorded_at,
                             decoded, tuple(tags) if tags else ())
