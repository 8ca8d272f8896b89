"""The seed scenario's domain, shared by the tests: users registered once
and renamed."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Optional, Union

from esrc import Decider, EventTypes

types = EventTypes()


@types.register
@dataclass(frozen=True)
class UserRegistered:
    email: str
    name: str


@types.register
@dataclass(frozen=True)
class UserNameChanged:
    name: str


@dataclass(frozen=True)
class RegisterUser:
    email: str
    name: str
    command_id: uuid.UUID = field(default_factory=uuid.uuid4)


@dataclass(frozen=True)
class ChangeUserName:
    name: str
    command_id: uuid.UUID = field(default_factory=uuid.uuid4)


@dataclass(frozen=True)
class User:
    email: str
    name: str
    renames: int = 0


class AlreadyRegistered(Exception):
    pass


class UnknownUser(Exception):
    pass


Event = Union[UserRegistered, UserNameChanged]
Command = Union[RegisterUser, ChangeUserName]
State = Optional[User]


def evolve(state: State, event: Event) -> State:
    if isinstance(event, UserRegistered):
        return User(event.email, event.name)
    assert state is not None
    return User(state.email, event.name, state.renames + 1)


def decide(command: Command, state: State) -> list[Event]:
    if isinstance(command, RegisterUser):
        if state is not None:
            raise AlreadyRegistered(command.email)
        return [UserRegistered(command.email, command.name)]
    if state is None:
        raise UnknownUser()
    if state.name == command.name:
        return []
    return [UserNameChanged(command.name)]


def from_snapshot(state: dict[str, object]) -> State:
    return User(str(state["email"]), str(state["name"]), int(str(state.get("renames", 0))))


decider: Decider[Command, Event, State] = Decider(lambda: None, evolve, decide)
snapshot_decider: Decider[Command, Event, State] = Decider(lambda: None, evolve, decide, from_snapshot)
