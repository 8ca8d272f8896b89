"""The retry loop of the command handlers (esrc/_retry.py), without a
database: attempts and backoff, the give-up message of each of the four
handlers (sync and asyncio, one stream and DCB), a 40001 of the commit
(a psycopg error) retried, other errors not, max_attempts below 1 refused."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, cast

import psycopg
import pytest

import esrc
from esrc import _retry
from esrc.decider import Backoff
from esrc.errors import translated
from users import UserNameChanged, types

HINT = "the hint"


class Delays:
    """A backoff that waits nothing and records the attempts it was asked for."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def delay(self, attempt: int) -> float:
        self.asked.append(attempt)
        return 0.0


def conflict(n: int = 1) -> esrc.ConcurrencyError:
    return esrc.ConcurrencyError("conflict %d" % n, sqlstate="40001", detail="detail %d" % n, hint="retry")


def retry(flavour: str, max_attempts: int, backoff: Delays, body: Callable[[int], Any]) -> Any:
    """_retry.run, or _retry.run_async with an async body doing the same."""
    if flavour == "sync":
        return _retry.run(max_attempts, backoff, "command on stream s", HINT, body)

    async def abody(n: int) -> Any:
        await asyncio.sleep(0)
        return body(n)
    return asyncio.run(_retry.run_async(max_attempts, backoff, "command on stream s", HINT, abody))


FLAVOURS = ["sync", "async"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_retried_until_an_attempt_succeeds(flavour: str) -> None:
    seen: list[int] = []
    backoff = Delays()

    def body(n: int) -> str:
        seen.append(n)
        if n < 3:
            raise conflict(n)
        return "done %d" % n
    assert retry(flavour, 5, backoff, body) == "done 3"
    assert seen == [1, 2, 3] and backoff.asked == [1, 2]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_gives_up_after_max_attempts(flavour: str) -> None:
    seen: list[int] = []
    backoff = Delays()

    def body(n: int) -> None:
        seen.append(n)
        raise conflict(n)
    with pytest.raises(esrc.RetriesExhausted) as e:
        retry(flavour, 3, backoff, body)
    assert seen == [1, 2, 3] and backoff.asked == [1, 2]   # no wait after the last attempt
    assert e.value.message == "command on stream s gave up after 3 attempts, each met 40001: conflict 3"
    assert (e.value.sqlstate, e.value.detail, e.value.hint) == ("40001", "detail 3", HINT)
    assert isinstance(e.value, esrc.ConcurrencyError)
    assert isinstance(e.value.__cause__, esrc.ConcurrencyError) and e.value.__cause__.message == "conflict 3"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_psycopg_40001_is_retried(flavour: str) -> None:
    """A 40001 raised by psycopg (the commit's) counts like the store's."""
    seen: list[int] = []

    def body(n: int) -> int:
        seen.append(n)
        if n == 1:
            raise psycopg.errors.SerializationFailure("commit conflict")
        return n
    assert retry(flavour, 2, Delays(), body) == 2 and seen == [1, 2]
    with pytest.raises(esrc.RetriesExhausted) as e:
        retry(flavour, 1, Delays(), lambda n: body(1))
    assert e.value.message.endswith("each met 40001: commit conflict")
    assert isinstance(e.value.__cause__, esrc.ConcurrencyError)
    assert isinstance(e.value.__cause__.__cause__, psycopg.errors.SerializationFailure)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_other_errors_are_not_retried(flavour: str) -> None:
    seen: list[int] = []

    def unique(n: int) -> None:
        seen.append(n)
        raise psycopg.errors.UniqueViolation("duplicate")
    with pytest.raises(esrc.DuplicateIdError) as e:
        retry(flavour, 5, Delays(), unique)
    assert seen == [1] and e.value.message == "duplicate"

    def rejected(n: int) -> None:
        seen.append(n)
        raise ValueError("rejected by decide")
    with pytest.raises(ValueError, match="rejected by decide"):
        retry(flavour, 5, Delays(), rejected)
    assert seen == [1, 1]


# The four handlers on stores that meet 40001 on every append: the message,
# hint and attempts of their RetriesExhausted, and an outcome's attempts.

class _Conn:
    def __init__(self, store: FakeStore) -> None:
        self.store = store

    @contextmanager
    def transaction(self) -> Iterator[None]:
        yield
        if self.store.commit_fails:
            self.store.commit_fails -= 1
            raise psycopg.errors.SerializationFailure("could not serialize at commit")


class FakeStore:
    """What the handlers call of an EventStore; the first ``conflicts``
    appends meet 40001, so do the first ``commit_fails`` commits."""

    def __init__(self, conflicts: int, commit_fails: int = 0) -> None:
        self.types = types
        self.conn = _Conn(self)
        self.conflicts = conflicts
        self.commit_fails = commit_fails
        self.appends = 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with translated(), self.conn.transaction():
            yield

    def fold_rows(self, stream: str) -> list[tuple[Any, ...]]:
        return []

    def stream_version(self, stream: str) -> int:
        return -1

    def safe_position(self) -> int:
        return 7

    def read_query(self, query: Any, after: int = 0, up_to: int | None = None) -> list[Any]:
        return []

    def _append(self) -> int:
        self.appends += 1
        if self.appends <= self.conflicts:
            raise conflict(self.appends)
        return 0

    def append_encoded(self, stream: str, events: Any, *, expected_version: int | None = None) -> int:
        return self._append()

    def append_if(self, stream: str, events: Any, condition: Any) -> int:
        return self._append()


class AsyncFakeStore(FakeStore):
    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:   # type: ignore[override]
        with translated(), self.conn.transaction():
            yield

    async def fold_rows(self, stream: str) -> list[tuple[Any, ...]]:   # type: ignore[override]
        return []

    async def stream_version(self, stream: str) -> int:   # type: ignore[override]
        return -1

    async def safe_position(self) -> int:   # type: ignore[override]
        return 7

    async def read_query(self, query: Any, after: int = 0,   # type: ignore[override]
                         up_to: int | None = None) -> list[Any]:
        return []

    async def append_encoded(self, stream: str, events: Any, *,   # type: ignore[override]
                             expected_version: int | None = None) -> int:
        return self._append()

    async def append_if(self, stream: str, events: Any, condition: Any) -> int:   # type: ignore[override]
        return self._append()


QUERY = esrc.Query([esrc.QueryItem(types=["UserNameChanged"], tags=["user:u1"])])
ONE_STREAM = ("command on stream user-u1 gave up after 3 attempts, each met 40001: conflict 3",
              "The stream is written very often; raise max_attempts or make its commands rarer.")
DCB = ("decision on query %s gave up after 3 attempts, each met 40001: conflict 3" % QUERY.as_json(),
       "The events of the query are written very often; raise max_attempts or narrow the query.")


def decide(cmd: object, state: object) -> list[object]:
    return [UserNameChanged("x")]


def handle(kind: str, store: FakeStore, max_attempts: int) -> Any:
    """One command through the handler of ``kind`` on ``store``."""
    backoff = Backoff(0.0001)
    s = cast(Any, store)
    if kind.endswith("dcb"):
        d: Any = esrc.DcbDecider(lambda: None, lambda st, e: st, decide, lambda c: "user-u1",
                                 lambda e: ["user:u1"])
        if kind == "dcb":
            return esrc.DcbCommandHandler(s, d, max_attempts=max_attempts, backoff=backoff).handle(QUERY, object())
        return asyncio.run(esrc.AsyncDcbCommandHandler(s, d, max_attempts=max_attempts, backoff=backoff)
                           .handle(QUERY, object()))
    d = esrc.Decider(lambda: None, lambda st, e: st, decide)
    if kind == "stream":
        return esrc.CommandHandler(s, d, max_attempts=max_attempts, backoff=backoff).handle("user-u1", object())
    return asyncio.run(esrc.AsyncCommandHandler(s, d, max_attempts=max_attempts, backoff=backoff)
                       .handle("user-u1", object()))


HANDLERS = [("stream", FakeStore, ONE_STREAM), ("async stream", AsyncFakeStore, ONE_STREAM),
            ("dcb", FakeStore, DCB), ("async dcb", AsyncFakeStore, DCB)]


@pytest.mark.parametrize("kind,fake,expected", HANDLERS)
def test_handlers_give_up_with_their_message(kind: str, fake: type[FakeStore], expected: tuple[str, str]) -> None:
    store = fake(conflicts=100)
    with pytest.raises(esrc.RetriesExhausted) as e:
        handle(kind, store, 3)
    assert store.appends == 3
    assert (e.value.message, e.value.hint) == expected
    assert (e.value.sqlstate, e.value.detail) == ("40001", "detail 3")


@pytest.mark.parametrize("kind,fake,expected", HANDLERS)
def test_handlers_retry_until_an_attempt_succeeds(kind: str, fake: type[FakeStore],
                                                  expected: tuple[str, str]) -> None:
    store = fake(conflicts=2)
    out = handle(kind, store, 3)
    assert out.attempts == 3 and store.appends == 3
    store = fake(conflicts=0, commit_fails=1)   # a 40001 of the commit: decided again
    out = handle(kind, store, 3)
    assert out.attempts == 2 and store.appends == 2


@pytest.mark.parametrize("kind,fake,expected", HANDLERS)
def test_handlers_refuse_max_attempts_below_one(kind: str, fake: type[FakeStore],
                                                expected: tuple[str, str]) -> None:
    with pytest.raises(ValueError, match="max_attempts must be at least 1"):
        handle(kind, fake(conflicts=0), 0)
