"""python -m esrc: append a JSON event, tail a stream, status."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import esrc

SRC = os.path.join(os.path.dirname(__file__), "..", "src")


def cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "ESRC_DSN": dsn}
    return subprocess.run([sys.executable, "-m", "esrc", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_cli(dsn: str, store: esrc.EventStore, uid: str) -> None:
    s = "cli-" + uid
    i = str(uuid.uuid4())
    r = cli(dsn, "append", s, "Noted", '{"text": "hello"}', "--metadata", '{"by": "ops"}',
            "--expected-version", "-1", "--id", i)
    assert (r.returncode, r.stdout.strip()) == (0, "0"), r.stderr
    r = cli(dsn, "append", s, "Noted", '{"text": "again"}', "--expected-version", "-1")
    assert r.returncode == 1 and "SQLSTATE 40001" in r.stderr
    r = cli(dsn, "append", s, "Noted", "{not json")
    assert r.returncode == 2 and "invalid JSON" in r.stderr
    r = cli(dsn, "tail", s)
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(x["version"], x["data"], x["metadata"], x["id"]) for x in lines] == \
        [(0, {"text": "hello"}, {"by": "ops"}, i)]
    r = cli(dsn, "tail", "--category", "cli", "--after-position", str(lines[0]["position"] - 1))
    assert [json.loads(x)["stream"] for x in r.stdout.splitlines()] == [s]
    store.conn.execute("SELECT esrc.create_subscription(%s, ARRAY['cli'], 2)", ("cli" + uid,))
    r = cli(dsn, "status")
    assert r.returncode == 0 and "cli" + uid in r.stdout and "projections" in r.stdout, r.stderr
    r = cli(dsn, "version")
    assert r.returncode == 0 and r.stdout.strip() == "client %s, server %s" % (esrc.__version__, esrc.__version__)
