"""Dynamic consistency boundaries (docs/dcb.md): the typed shape of the
query that :meth:`EventStore.read_query` reads and of the condition that
:meth:`EventStore.append_if` checks.

A :class:`Query` is a list of :class:`QueryItem`; an event matches the
query when it matches one of its items, and an item when the event's type
is one of the item's ``types`` (none: any type) and the event carries
every one of the item's ``tags``.  An :class:`AppendCondition` is "fail if
an event matching the query is stored after position ``after``"; ``after``
is the horizon the decision read up to (:meth:`EventStore.safe_position`,
taken before the read).  The server checks the rest (non-empty items, an
item with a type or a tag, at most 64 of each: ``InvalidEventError``).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from .errors import InvalidEventError


def _strings(what: str, values: Iterable[str]) -> tuple[str, ...]:
    if isinstance(values, str):
        raise InvalidEventError("%s must be a sequence of strings, not a string" % what,
                                hint="Write %s=[%r]." % (what, values))
    return tuple(values)


@dataclass(frozen=True)
class QueryItem:
    """Events of one of ``types`` (empty: any type) carrying every one of
    ``tags``."""
    types: Sequence[str] = ()
    tags: Sequence[str] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "types", _strings("types", self.types))
        object.__setattr__(self, "tags", _strings("tags", self.tags))

    def as_json(self) -> dict[str, Any]:
        item: dict[str, Any] = {}
        if self.types:
            item["types"] = list(self.types)
        if self.tags:
            item["tags"] = list(self.tags)
        return item


@dataclass(frozen=True)
class Query:
    """Events matching one of ``items`` (``{"items": [...]}`` on the
    server)."""
    items: Sequence[QueryItem]

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))

    @classmethod
    def of(cls, *items: QueryItem) -> Query:
        """``Query.of(QueryItem(...), QueryItem(...))``."""
        return cls(items)

    @classmethod
    def tagged(cls, *tags: str, types: Sequence[str] = ()) -> Query:
        """One item: events carrying every one of ``tags`` (of ``types``)."""
        return cls((QueryItem(types, tags),))

    def as_json(self) -> dict[str, Any]:
        return {"items": [i.as_json() for i in self.items]}


@dataclass(frozen=True)
class AppendCondition:
    """``{"fail_if_events_match": query, "after": position}``: the append
    fails (``ConcurrencyError``, 40001) if an event matching ``query`` is
    stored at a position after ``after``."""
    fail_if_events_match: Query
    after: int

    def as_json(self) -> dict[str, Any]:
        return {"fail_if_events_match": query_json(self.fail_if_events_match), "after": self.after}


QueryLike = Union[Query, Mapping[str, Any]]
"""A :class:`Query`, or the server's JSON shape as a mapping."""
ConditionLike = Union[AppendCondition, Mapping[str, Any]]
"""An :class:`AppendCondition`, or the server's JSON shape as a mapping."""


def query_json(query: QueryLike) -> Any:
    return query.as_json() if isinstance(query, Query) else dict(query)


def condition_json(condition: ConditionLike) -> Any:
    if isinstance(condition, AppendCondition):
        return condition.as_json()
    c = dict(condition)
    if isinstance(c.get("fail_if_events_match"), Query):
        c["fail_if_events_match"] = c["fail_if_events_match"].as_json()
    return c
