"""esrc: the Python client of esrc, event sourcing inside PostgreSQL.

Event store (:class:`EventStore`, :class:`AsyncEventStore`), typed events
with upcasters (:class:`EventTypes`), DCB queries and conditions
(:class:`Query`, :class:`AppendCondition`), deciders run with retries on 40001
(:class:`Decider`, :class:`CommandHandler`, :class:`AsyncCommandHandler`),
deciders across streams on a DCB query (:class:`DcbDecider`,
:class:`DcbCommandHandler`, :class:`AsyncDcbCommandHandler`),
subscription consumers and projections (:class:`Consumer`,
:class:`AsyncConsumer`, :class:`Projection`).  See clients/python/README.md.
"""
from ._version import __version__
from .consumer import (AsyncConsumer, AsyncProjection, Consumer, ConsumerStats, Projection,
                       ensure_subscription, ensure_subscription_async)
from .dcb import AppendCondition, Query, QueryItem
from .dcb_handler import AsyncDcbCommandHandler, DcbCommandHandler, DcbDecider, DcbOutcome
from .decider import (AsyncCommandHandler, Backoff, CommandHandler, Decider, Outcome,
                      event_id)
from .errors import (AppendConditionError, CancelledError, ConcurrencyError, ConnectionLostError,
                     DecodeError,
                     DuplicateIdError, EsrcError, InvalidEventError, NotFoundError,
                     ObjectStateError, PermissionDeniedError, RetriesExhausted,
                     ServerVersionError)
from .events import DELETED, ERASED, EventTypes, NewEvent, RecordedEvent
from .store import (ANY, NO_STREAM, STREAM_EXISTS, AsyncEventStore, EventStore,
                    check_server_version)

__all__ = [
    "__version__",
    "ANY", "NO_STREAM", "STREAM_EXISTS", "ERASED", "DELETED",
    "EventStore", "AsyncEventStore", "check_server_version",
    "EventTypes", "NewEvent", "RecordedEvent",
    "Query", "QueryItem", "AppendCondition",
    "Decider", "CommandHandler", "AsyncCommandHandler", "Backoff", "Outcome", "event_id",
    "DcbDecider", "DcbCommandHandler", "AsyncDcbCommandHandler", "DcbOutcome",
    "Consumer", "AsyncConsumer", "ConsumerStats", "Projection", "AsyncProjection",
    "ensure_subscription", "ensure_subscription_async",
    "EsrcError", "ConcurrencyError", "AppendConditionError", "RetriesExhausted",
    "ObjectStateError",
    "InvalidEventError", "DuplicateIdError", "NotFoundError", "PermissionDeniedError",
    "CancelledError", "ConnectionLostError", "ServerVersionError", "DecodeError",
]
