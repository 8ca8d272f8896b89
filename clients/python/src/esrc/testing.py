"""Given/when/then for deciders, without a database.

    spec = DeciderSpec(user_decider)
    spec.given(UserRegistered(...)).when(ChangeUserName(...)).then(UserNameChanged(...))
    spec.given().when(ChangeUserName(...)).then_raises(UnknownUser)
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .decider import C, Decider, E, S

X = TypeVar("X", bound=BaseException)

_UNSET: Any = object()


@dataclass(frozen=True)
class DeciderSpec(Generic[C, E, S]):
    """A scenario for a :class:`Decider`: past events, one command, then the
    expected events, exception or state."""
    decider: Decider[C, E, S]
    past: tuple[E, ...] = ()
    command: Any = field(default=_UNSET)

    def given(self, *events: E) -> DeciderSpec[C, E, S]:
        return DeciderSpec(self.decider, self.past + tuple(events), self.command)

    def when(self, command: C) -> DeciderSpec[C, E, S]:
        return DeciderSpec(self.decider, self.past, command)

    def _decide(self) -> tuple[S, Sequence[E]]:
        if self.command is _UNSET:
            raise AssertionError("DeciderSpec: when(command) is missing")
        state = self.decider.fold(self.past)
        return state, self.decider.decide(self.command, state)

    def then(self, *expected: E) -> S:
        """Assert that the command decides exactly these events; the state after them."""
        state, events = self._decide()
        if list(events) != list(expected):
            raise AssertionError("expected events %r, decided %r" % (list(expected), list(events)))
        return self.decider.fold(events, state)

    def then_raises(self, exc: type[X]) -> X:
        """Assert that the command is rejected with ``exc``; the exception."""
        try:
            _, events = self._decide()
        except exc as e:
            return e
        raise AssertionError("expected %s, decided %r" % (exc.__name__, list(events)))

    def then_state(self, expected: S) -> None:
        """Assert the state after the command's events."""
        state, events = self._decide()
        got = self.decider.fold(events, state)
        if got != expected:
            raise AssertionError("expected state %r, got %r" % (expected, got))
