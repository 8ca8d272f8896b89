"""The esrc security service in Python, on the esrc client (clients/python).

It does what examples/security_service.sql does in PL/pgSQL, from the
application side, as a decider: initial_state / evolve / decide are plain
Python, and esrc.CommandHandler loads the user (from the snapshot table
security.users, which follows the category "user"), decides, appends with
the loaded version and, on SQLSTATE 40001 (someone else got in between),
loads and decides again.

Personal data, as docs/lifecycle.md advises: RegisterUser makes a new id
and the user's stream is user-<uuid> (no e-mail in stream names, which
are never erased); the e-mail is stored encrypted for that subject
(esrc.encrypt), so esrc.forget_subject makes it unreadable everywhere it
was copied.  The e-mail stays unique through security.user_emails (a
keyed hash of it -> the user id), claimed in the same transaction as the
UserRegistered event (security.claim_email): a second registration of
the address fails, even a concurrent one.  Commands address a user by
id; security.user_id_of finds the id of an e-mail.  security.erase_user
erases the stream, forgets the key and deletes the lookup row; the
consumers (examples/subscriptions/consumer.py) receive the tombstone.

    pip install ./clients/python        # or: pip install "psycopg[binary]"
    python3 examples/python/security_service.py "host=... dbname=..."

Needs examples/security_service.sql loaded in the database, and a role in
esrc_writer and esrc_reader (no superuser, nothing else).  Run as a script
it performs a small self-check: register a user, rename it from three
threads at once, and verify the result.
"""
from __future__ import annotations

import os
import sys
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional, Union

try:
    import esrc
except ImportError:  # not installed: the client of this tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "clients", "python", "src"))
    import esrc

types = esrc.EventTypes()


@types.register
@dataclass(frozen=True)
class UserRegistered:
    email: str          # an esrc.encrypt envelope, never the address itself
    name: str


@types.register
@dataclass(frozen=True)
class UserNameChanged:
    name: str           # the stream names the user: no e-mail again


@dataclass(frozen=True)
class RegisterUser:
    email: str          # encrypted by the handler before it is decided on
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
    if state is None:
        raise ValueError("UserNameChanged before UserRegistered")
    return User(state.email, event.name)


def decide(command: Command, state: State) -> list[Event]:
    if isinstance(command, RegisterUser):
        if state is not None:
            raise AlreadyRegistered()
        return [UserRegistered(command.email, command.name)]
    if state is None:
        raise UnknownUser()
    return [UserNameChanged(command.name)]


def from_snapshot(state: Any) -> State:
    """A row of security.users (its reducer keeps email and name)."""
    return User(state["email"], state["name"])


users: esrc.Decider[Command, Event, State] = esrc.Decider(lambda: None, evolve, decide, from_snapshot)


def stream_of(user_id: uuid.UUID) -> str:
    return "user-%s" % user_id


def register_user(store: esrc.EventStore, email: str, name: str) -> uuid.UUID:
    """RegisterUser: the new user's id.  The e-mail is claimed and the
    event appended in one transaction (AlreadyRegistered: nothing is
    written)."""
    user_id = uuid.uuid4()
    try:
        with store.transaction():
            store.conn.execute("SELECT security.claim_email(%s, %s)", (email, user_id))
            sealed = store.encrypt(stream_of(user_id), "email", email)
            esrc.CommandHandler(store, users).handle(stream_of(user_id), RegisterUser(sealed, name))
    except esrc.EsrcError as e:
        if e.sqlstate == "23505":
            raise AlreadyRegistered(email) from e
        raise
    return user_id


def user_id_of(store: esrc.EventStore, email: str) -> Optional[uuid.UUID]:
    """The id of the user with this e-mail (security.user_emails), or None."""
    row = store.conn.execute("SELECT security.user_id_of(%s)", (email,)).fetchone()
    return row[0] if row else None


def change_user_name(store: esrc.EventStore, user_id: uuid.UUID, name: str) -> esrc.Outcome[Event, State]:
    return esrc.CommandHandler(store, users).handle(stream_of(user_id), ChangeUserName(name))


def email_of(store: esrc.EventStore, user_id: uuid.UUID) -> Optional[str]:
    """The e-mail, or None once the subject was forgotten."""
    state, _ = esrc.CommandHandler(store, users).load(stream_of(user_id))
    if state is None:
        raise UnknownUser()
    value = store.decrypt(stream_of(user_id), "email", state.email)
    return None if value is None else str(value)


def self_check(conninfo: str) -> None:
    email = "py-%s@example.com" % uuid.uuid4().hex[:8]
    with esrc.EventStore.connect(conninfo, types=types) as store:
        user_id = register_user(store, email, "Alex")
        assert user_id_of(store, email) == user_id
        assert store.stream_version(stream_of(user_id)) == 0
        try:
            register_user(store, email.upper(), "Again")
            raise AssertionError("a second registration of the e-mail was accepted")
        except AlreadyRegistered:
            pass

    results: list[esrc.Outcome[Event, State]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def rename(name: str) -> None:
        try:
            with esrc.EventStore.connect(conninfo, types=types) as s:
                barrier.wait()
                results.append(change_user_name(s, user_id, name))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=rename, args=("Alex%d" % i,)) for i in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    versions = sorted(r.version for r in results)
    assert versions == [1, 2, 3], versions
    retries = sum(r.attempts - 1 for r in results)

    with esrc.EventStore.connect(conninfo, types=types) as store:
        events = store.read_stream(stream_of(user_id))
        assert [e.version for e in events] == [0, 1, 2, 3], events
        names = sorted(e.event.name for e in events[1:])
        assert names == ["Alex1", "Alex2", "Alex3"], names
        snap, snap_version = store.load("security.users", stream_of(user_id))
        assert snap_version == 3 and snap["name"] == events[-1].event.name, (snap, snap_version)
        assert email not in str(events[0].data) and email_of(store, user_id) == email
        # a stale decision is refused with 40001 and nothing is written
        try:
            store.append(stream_of(user_id), UserNameChanged("stale"), expected_version=1)
            raise AssertionError("stale append was accepted")
        except esrc.ConcurrencyError as e:
            assert e.sqlstate == "40001"
        # an unknown user is rejected
        try:
            change_user_name(store, uuid.uuid4(), "X")
            raise AssertionError("rename of an unknown user was accepted")
        except UnknownUser:
            pass

    print("python example: registered %s, 3 concurrent renames -> versions %s "
          "(%d retries on 40001), snapshot at version %d with name %s; e-mail stored encrypted, "
          "unique and found by its keyed hash; stale append refused with 40001; unknown user refused"
          % (stream_of(user_id), versions, retries, snap_version, snap["name"]))


if __name__ == "__main__":
    self_check(sys.argv[1] if len(sys.argv) > 1 else "")
