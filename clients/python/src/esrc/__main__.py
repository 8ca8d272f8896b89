"""python -m esrc: what operators do by hand.

    python -m esrc [--dsn DSN] version
    python -m esrc [--dsn DSN] status                 subscriptions and projections
    python -m esrc [--dsn DSN] tail STREAM [--from-version N] [--follow]
    python -m esrc [--dsn DSN] tail --category CAT [--after-position P] [--follow]
    python -m esrc [--dsn DSN] append STREAM TYPE JSON [--metadata JSON]
                                  [--expected-version N] [--id UUID]

The DSN defaults to $ESRC_DSN, then to libpq's environment (PGHOST, ...).
tail prints one JSON object per event; with --follow it goes on, and says
on stderr every --progress seconds how far it got.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from ._version import __version__
from .errors import EsrcError
from .events import NewEvent, RecordedEvent
from .store import EventStore

SUBSCRIPTION_STATUS_SQL = """
SELECT subscription, partition, coalesce(member, '-'), checkpoint, events_behind,
       round(coalesce(seconds_behind, 0)::numeric, 1)
FROM esrc.subscription_status
WHERE NOT starts_with(subscription, 'projection:')
ORDER BY subscription, partition"""

PROJECTION_STATUS_SQL = """
SELECT projection, partition, state, coalesce(worker, '-'), checkpoint, events_behind,
       caught_up, applied, coalesce(last_error, '')
FROM esrc.projection_status
ORDER BY projection, partition"""


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _event_json(e: RecordedEvent) -> str:
    return json.dumps({"position": e.position, "stream": e.stream, "version": e.version,
                       "type": e.type, "data": e.data, "metadata": e.metadata, "id": str(e.id),
                       "recorded_at": e.recorded_at.isoformat()}, sort_keys=False)


def cmd_status(store: EventStore, args: argparse.Namespace) -> int:
    subs = store._rows(SUBSCRIPTION_STATUS_SQL, ())
    projs = store._rows(PROJECTION_STATUS_SQL, ())
    print("subscriptions (%d partitions)" % len(subs))
    if subs:
        print(_table(["subscription", "partition", "member", "checkpoint", "behind", "seconds"], subs))
    print()
    print("projections (%d partitions)" % len(projs))
    if projs:
        print(_table(["projection", "partition", "state", "worker", "checkpoint", "behind",
                      "caught_up", "applied", "last_error"], projs))
    return 0


def cmd_tail(store: EventStore, args: argparse.Namespace) -> int:
    count = 0
    last_report = time.monotonic()
    version = args.from_version
    position = args.after_position
    while True:
        if args.category:
            batch = store.read_category(args.category, position, args.page)
        else:
            batch = store.read_stream(args.stream, version, args.page)
        for e in batch:
            print(_event_json(e), flush=args.follow)
            count += 1
            version, position = e.version + 1, e.position
        if len(batch) == args.page:
            continue
        if not args.follow:
            return 0
        now = time.monotonic()
        if args.progress > 0 and now - last_report >= args.progress:
            where = ("position %d" % position) if args.category else ("version %d" % (version - 1))
            print("esrc tail: %d events so far, at %s, waiting for more" % (count, where),
                  file=sys.stderr, flush=True)
            last_report = now
        time.sleep(args.interval)


def cmd_append(store: EventStore, args: argparse.Namespace) -> int:
    data = json.loads(args.data)
    metadata = json.loads(args.metadata) if args.metadata else None
    ev = NewEvent(args.type, data, metadata, uuid.UUID(args.id) if args.id else None)
    print(store.append(args.stream, ev, expected_version=args.expected_version))
    return 0


def cmd_version(store: EventStore, args: argparse.Namespace) -> int:
    row = store.conn.execute("SELECT extversion FROM pg_catalog.pg_extension "
                             "WHERE extname = 'esrc'").fetchone()
    print("client %s, server %s" % (__version__, row[0] if row else "(no extension esrc)"))
    store.check_version()
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m esrc", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--dsn", default=os.environ.get("ESRC_DSN", ""),
                   help="libpq connection string (default $ESRC_DSN, then PG* variables)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="client and server versions").set_defaults(fn=cmd_version)
    sub.add_parser("status", help="subscriptions and projections").set_defaults(fn=cmd_status)
    t = sub.add_parser("tail", help="print a stream's (or a category's) events as JSON lines")
    t.add_argument("stream", nargs="?")
    t.add_argument("--category")
    t.add_argument("--from-version", type=int, default=0)
    t.add_argument("--after-position", type=int, default=0)
    t.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    t.add_argument("--interval", type=float, default=1.0, help="seconds between reads with --follow")
    t.add_argument("--progress", type=float, default=10.0,
                   help="seconds between progress lines on stderr with --follow (0: none)")
    t.add_argument("--page", type=int, default=1000)
    t.set_defaults(fn=cmd_tail)
    a = sub.add_parser("append", help="append one event given as JSON")
    a.add_argument("stream")
    a.add_argument("type")
    a.add_argument("data", help="the event's data, JSON")
    a.add_argument("--metadata", help="JSON")
    a.add_argument("--expected-version", type=int)
    a.add_argument("--id", help="the event id (uuid): a retried append is written once")
    a.set_defaults(fn=cmd_append)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "tail" and bool(args.stream) == bool(args.category):
        parser().error("tail takes a STREAM or --category, one of them")
    try:
        with EventStore.connect(args.dsn, application_name="esrc-cli") as store:
            if args.command != "version":
                store.check_version()
            rc: int = args.fn(store, args)
            return rc
    except EsrcError as e:
        print("esrc: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except json.JSONDecodeError as e:
        print("esrc: invalid JSON: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
