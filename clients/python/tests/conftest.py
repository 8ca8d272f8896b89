from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import esrc  # noqa: E402
from users import types  # noqa: E402


@pytest.fixture
def dsn() -> str:
    d = os.environ.get("ESRC_TEST_DSN")
    if d is None:
        pytest.fail("ESRC_TEST_DSN is not set: run the tests with test/run-73-python-client.sh")
    return d


@pytest.fixture
def store(dsn: str) -> Iterator[esrc.EventStore]:
    s = esrc.EventStore.connect(dsn, types=types)
    yield s
    s.close()


@pytest.fixture
def admin(dsn: str) -> Iterator[esrc.EventStore]:
    """A store of a superuser (erase_stream needs esrc_admin)."""
    s = esrc.EventStore.connect(os.environ.get("ESRC_TEST_ADMIN_DSN", dsn), types=types)
    yield s
    s.close()


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:12]
