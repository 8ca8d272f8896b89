"""Tests that need no database: the version, typed events and upcasters,
given/when/then for deciders."""
from __future__ import annotations

import datetime
import os
import re
import uuid
from dataclasses import dataclass

import pytest

import esrc
from esrc.testing import DeciderSpec
from users import (AlreadyRegistered, ChangeUserName, RegisterUser, UnknownUser, User,
                   UserNameChanged, UserRegistered, decider)

CLIENT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
ROOT = os.environ.get("ESRC_ROOT") or os.path.join(CLIENT, "..", "..")


def test_version_is_the_extensions() -> None:
    control = open(os.path.join(ROOT, "esrc.control")).read()
    m = re.search(r"default_version\s*=\s*'([^']+)'", control)
    assert m, "no default_version in esrc.control"
    assert esrc.__version__ == m.group(1)
    pyproject = open(os.path.join(CLIENT, "pyproject.toml")).read()
    assert 'version = "%s"' % m.group(1) in pyproject


def test_server_version_check() -> None:
    esrc.check_server_version("0.3.0", "0.3.0")
    esrc.check_server_version("0.3.2", "0.3.0")
    with pytest.raises(esrc.ServerVersionError, match="works with the esrc extension 0.3.x; the database has 0.2.0") as e:
        esrc.check_server_version("0.2.0", "0.3.0")
    assert e.value.hint and "ALTER EXTENSION esrc UPDATE" in e.value.hint
    with pytest.raises(esrc.ServerVersionError, match="not installed"):
        esrc.check_server_version(None)


def test_given_when_then() -> None:
    spec = DeciderSpec(decider)
    spec.given().when(RegisterUser("a@x", "Alex")).then(UserRegistered("a@x", "Alex"))
    spec.given(UserRegistered("a@x", "Alex")).when(RegisterUser("a@x", "B")).then_raises(AlreadyRegistered)
    spec.given().when(ChangeUserName("B")).then_raises(UnknownUser)
    state = spec.given(UserRegistered("a@x", "Alex")).when(ChangeUserName("B")).then(UserNameChanged("B"))
    assert state == User("a@x", "B", 1)
    spec.given(UserRegistered("a@x", "Alex")).when(ChangeUserName("Alex")).then()
    with pytest.raises(AssertionError, match="expected events"):
        spec.given(UserRegistered("a@x", "Alex")).when(ChangeUserName("C")).then(UserNameChanged("D"))
    with pytest.raises(AssertionError, match="expected AlreadyRegistered"):
        spec.given().when(RegisterUser("a@x", "Alex")).then_raises(AlreadyRegistered)


def test_typed_events_and_upcasters() -> None:
    types = esrc.EventTypes()

    @types.register(name="OrderPlaced", schema_version=3, aliases=["OrderCreated"])
    @dataclass(frozen=True)
    class OrderPlaced:
        order: uuid.UUID
        at: datetime.datetime
        total_cents: int
        currency: str

    @types.upcaster("OrderPlaced", 1)
    def v1(d: dict[str, object]) -> dict[str, object]:   # v1: total as a float in euros
        return {**d, "total_cents": round(float(str(d.pop("total"))) * 100)}

    @types.upcaster("OrderPlaced", 2)
    def v2(d: dict[str, object]) -> dict[str, object]:   # v2: no currency
        return {**d, "currency": "EUR"}

    oid = uuid.uuid4()
    at = datetime.datetime(2026, 12, 5, 12, 0, tzinfo=datetime.timezone.utc)
    new = types.encode(OrderPlaced(oid, at, 4200, "USD"))
    assert new.type == "OrderPlaced" and new.metadata == {"esrc_schema": 3}
    assert new.data == {"order": str(oid), "at": at.isoformat(), "total_cents": 4200, "currency": "USD"}
    assert types.decode(new.type, new.data, new.metadata) == OrderPlaced(oid, at, 4200, "USD")
    # an event of shape 1, stored under the old name, without metadata
    old = {"order": str(oid), "at": at.isoformat(), "total": 12.5}
    assert types.decode("OrderCreated", old, None) == OrderPlaced(oid, at, 1250, "EUR")
    assert types.decode("Unknown", {}, None) is None
    with pytest.raises(esrc.DecodeError, match="cannot read an event of type OrderPlaced"):
        types.decode("OrderPlaced", {"order": str(oid)}, {"esrc_schema": 3})
    with pytest.raises(esrc.InvalidEventError, match="not a registered event class"):
        types.encode(object())
