"""The one retry loop of the command handlers (:class:`~esrc.CommandHandler`,
:class:`~esrc.DcbCommandHandler` and their asyncio mirrors): an attempt, and
again after a jittered backoff while it meets 40001 (a wrong expected
version or a failed append condition, the commit's too), up to
``max_attempts``; then :class:`~esrc.RetriesExhausted`.  :func:`run` for
the sync handlers, :func:`run_async` for the asyncio ones: the same loop.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import psycopg

from .errors import ConcurrencyError, RetriesExhausted, from_psycopg

R = TypeVar("R")


class _Delay(Protocol):
    def delay(self, attempt: int) -> float: ...


def run(max_attempts: int, backoff: _Delay, what: str, hint: str, body: Callable[[int], R]) -> R:
    """``body(attempt)`` (``attempt`` counts from 1) until it does not meet
    40001.  ``what`` names the target in the message of
    :class:`~esrc.RetriesExhausted` (``"command on stream s"``), ``hint`` is
    its hint.  Other exceptions reach the caller; a psycopg error (of the
    commit) comes as its :class:`~esrc.EsrcError`."""
    for attempt in range(1, max_attempts + 1):
        try:
            try:
                return body(attempt)
            except psycopg.Error as pe:   # a 40001 of the commit too
                raise from_psycopg(pe) from pe
        except ConcurrencyError as e:
            if attempt >= max_attempts:
                raise _exhausted(what, hint, attempt, e) from e
            time.sleep(backoff.delay(attempt))
    raise AssertionError("unreachable")


async def run_async(max_attempts: int, backoff: _Delay, what: str, hint: str,
                    body: Callable[[int], Awaitable[R]]) -> R:
    """The asyncio mirror of :func:`run`: ``await body(attempt)``, the
    backoff with ``asyncio.sleep``."""
    for attempt in range(1, max_attempts + 1):
        try:
            try:
                return await body(attempt)
            except psycopg.Error as pe:
                raise from_psycopg(pe) from pe
        except ConcurrencyError as e:
            if attempt >= max_attempts:
                raise _exhausted(what, hint, attempt, e) from e
            await asyncio.sleep(backoff.delay(attempt))
    raise AssertionError("unreachable")


def _exhausted(what: str, hint: str, attempts: int, e: ConcurrencyError) -> RetriesExhausted:
    return RetriesExhausted("%s gave up after %d attempts, each met 40001: %s" % (what, attempts, e.message),
                            sqlstate=e.sqlstate, detail=e.detail, hint=hint)
