"""A consumer for test_consumer.py, run as a process of its own:

    crash_consumer.py DSN SUBSCRIPTION MEMBER TABLE exactly|atleast KILL_AFTER [serve]

It writes one row per event into TABLE (one statement each) and, when
KILL_AFTER > 0, kills itself with SIGKILL after writing that many rows
(mid-batch).  Without "serve" it stops when a poll returns nothing; with
it, it runs until SIGTERM."""
from __future__ import annotations

import os
import signal
import sys
from typing import Any

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
import esrc  # noqa: E402


def main() -> int:
    dsn, sub, member, table, mode, kill_after = sys.argv[1:7]
    serve = len(sys.argv) > 7 and sys.argv[7] == "serve"
    written = 0

    def handler(events: list[esrc.RecordedEvent], conn: psycopg.Connection[Any]) -> None:
        nonlocal written
        for e in events:
            conn.execute("INSERT INTO %s (position, stream, version, member) VALUES (%%s, %%s, %%s, %%s)"
                         % table, (e.position, e.stream, e.version, member))
            written += 1
            if written == int(kill_after):
                os.kill(os.getpid(), signal.SIGKILL)

    c = esrc.Consumer(dsn, sub, member, handler, exactly_once=(mode == "exactly"),
                      max_count=10, wait=30.0 if serve else 0.0)
    if serve:
        print("serving", flush=True)
        stats = c.run()
        print("%s: stopped after %d batches" % (member, stats.batches), flush=True)
        return 0
    while c.poll_once():
        pass
    c.stop()
    c.run(install_signal_handlers=False)   # the final ack of the at-least-once mode
    return 0


if __name__ == "__main__":
    sys.exit(main())
