"""python -m esrc: append a JSON event, tail a stream, status (in process,
with one real `python -m esrc` run)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

import esrc
from esrc.__main__ import main

SRC = os.path.join(os.path.dirname(__file__), "..", "src")


def cli(capsys: pytest.CaptureFixture[str], dsn: str, *args: str) -> tuple[int, str, str]:
    rc = main(["--dsn", dsn, *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli(dsn: str, store: esrc.EventStore, uid: str, capsys: pytest.CaptureFixture[str]) -> None:
    s = "cli-" + uid
    i = str(uuid.uuid4())
    rc, out, err = cli(capsys, dsn, "append", s, "Noted", '{"text": "hello"}', "--metadata", '{"by": "ops"}',
                       "--expected-version", "-1", "--id", i)
    assert (rc, out.strip()) == (0, "0"), err
    rc, out, err = cli(capsys, dsn, "append", s, "Noted", '{"text": "again"}', "--expected-version", "-1")
    assert rc == 1 and "SQLSTATE 40001" in err
    rc, out, err = cli(capsys, dsn, "append", s, "Noted", "{not json")
    assert rc == 2 and "invalid JSON" in err
    rc, out, err = cli(capsys, dsn, "tail", s)
    lines = [json.loads(x) for x in out.splitlines()]
    assert [(x["version"], x["data"], x["metadata"], x["id"]) for x in lines] == \
        [(0, {"text": "hello"}, {"by": "ops"}, i)]
    rc, out, err = cli(capsys, dsn, "tail", "--category", "cli", "--after-position", str(lines[0]["position"] - 1))
    assert [json.loads(x)["stream"] for x in out.splitlines()] == [s]
    store.conn.execute("SELECT esrc.create_subscription(%s, ARRAY['cli'], 2)", ("cli" + uid,))
    rc, out, err = cli(capsys, dsn, "status")
    assert rc == 0 and "cli" + uid in out and "projections" in out, err


def test_python_m_esrc(dsn: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [os.environ.get("PYTHONPATH"), SRC] if p),
           "ESRC_DSN": dsn}
    r = subprocess.run([sys.executable, "-m", "esrc", "version"], capture_output=True, text=True,
                       env=env, timeout=60, cwd=os.path.dirname(__file__))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "client %s, server %s" % (esrc.__version__, esrc.__version__)
