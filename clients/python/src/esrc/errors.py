"""Exceptions of the esrc client.

Every error the server raises reaches the caller as an :class:`EsrcError`
(or a subclass chosen by its SQLSTATE) that keeps ``sqlstate``, ``detail``
and ``hint``; the psycopg exception is its ``__cause__``.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


class EsrcError(Exception):
    """An error of esrc or of PostgreSQL; ``sqlstate`` is the server's code
    (``None`` for errors raised by the client itself)."""

    def __init__(self, message: str, *, sqlstate: str | None = None,
                 detail: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint

    def __str__(self) -> str:
        s = self.message
        if self.sqlstate:
            s = "%s (SQLSTATE %s)" % (s, self.sqlstate)
        if self.detail:
            s += "\nDETAIL: " + self.detail
        if self.hint:
            s += "\nHINT: " + self.hint
        return s


class ConcurrencyError(EsrcError):
    """40001: the stream is not at the expected version, or another member
    of a subscription acknowledged first.  Load again and decide again."""


class AppendConditionError(ConcurrencyError):
    """40001 from :meth:`EventStore.append_if`: an event matching the
    condition's query is stored after its ``after`` (nothing written; the
    detail names the first conflicting positions).  Read again, decide
    again."""


class RetriesExhausted(ConcurrencyError):
    """A command handler met 40001 on every one of its attempts."""


class ObjectStateError(EsrcError):
    """55000: the stream was erased or deleted for good, or a subscription
    member lost its partitions."""


class InvalidEventError(EsrcError):
    """22023: an invalid argument (a reserved ``esrc.`` type, a bad batch)."""


class DuplicateIdError(EsrcError):
    """23505: an event id stored in another stream, a batch that mixes
    stored and new ids, or a retry whose id names a stored event with
    another type, data or metadata."""


class NotFoundError(EsrcError):
    """42704: no such subscription, snapshot, projection or stream."""


class PermissionDeniedError(EsrcError):
    """42501: the role lacks an esrc role (esrc_reader, esrc_writer, ...)."""


class CancelledError(EsrcError):
    """57014: the statement was cancelled (a consumer stopping mid-poll)."""


class ConnectionLostError(EsrcError):
    """The connection failed or broke (class 08, a server shutting down
    (57P), or a connection error without SQLSTATE)."""


class ServerVersionError(EsrcError):
    """The database has no esrc extension, or one of another version."""


class DecodeError(EsrcError):
    """A stored event could not be turned into its registered class."""


_BY_SQLSTATE: dict[str, type[EsrcError]] = {
    "40001": ConcurrencyError,
    "40P01": ConcurrencyError,
    "55000": ObjectStateError,
    "22023": InvalidEventError,
    "23505": DuplicateIdError,
    "42704": NotFoundError,
    "42501": PermissionDeniedError,
    "57014": CancelledError,
}


def from_psycopg(e: psycopg.Error) -> EsrcError:
    """The :class:`EsrcError` for a psycopg error, by its SQLSTATE."""
    sqlstate = e.sqlstate
    if (sqlstate is None and isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError))) \
            or (sqlstate or "").startswith(("08", "57P")):
        cls: type[EsrcError] = ConnectionLostError
    else:
        cls = _BY_SQLSTATE.get(sqlstate or "", EsrcError)
    diag = e.diag
    message = diag.message_primary or str(e).strip() or type(e).__name__
    # the server raises 40001 for a failed append condition as for a wrong
    # expected version (retry loops on 40001 cover both) and sets no field
    # that tells them apart: its primary message does, as README's error
    # table gives it ("condition of append to stream ... failed")
    if sqlstate == "40001" and message.startswith("condition of append"):
        cls = AppendConditionError
    return cls(message, sqlstate=sqlstate, detail=diag.message_detail,
               hint=diag.message_hint)


@contextmanager
def translated() -> Iterator[None]:
    """Re-raise psycopg errors as :class:`EsrcError` (the cause kept)."""
    try:
        yield
    except psycopg.Error as e:
        raise from_psycopg(e) from e
