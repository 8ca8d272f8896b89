"""A member of an esrc subscription with exactly-once effects, on the esrc
client (clients/python: esrc.Consumer, psycopg 3).

Each turn is one transaction: poll a batch (waiting for new events when
there are none), write the batch's results with the connection of that
transaction, ack, commit.  The results and the checkpoint commit together,
so after any crash every event's results are in the table exactly once.
On 40001 (another member processed those events first, after a rebalance)
or 55000 (this member lost its partitions) the transaction is rolled back
and the consumer polls again.

With --at-least-once, the loop for effects outside the database: each turn
is one autocommit statement, esrc.poll(..., ack => the last position of
the batch before), then the effects of the batch it returned (here its
rows written on their own, standing for a mail or an HTTP call).  A crash
delivers the unacknowledged batch again, so an effect may happen twice,
never not at all.

    pip install ./clients/python        # or: pip install "psycopg[binary]"
    python3 consumer.py DSN SUBSCRIPTION MEMBER [--max-count 100] [--wait 5]
                        [--table consumed_events] [--at-least-once]

The DSN may point at PgBouncer in transaction pooling mode: nothing here
depends on the server session (no LISTEN, no session locks, no prepared
statements), so each transaction may run on another server connection.
Prints one line per batch; SIGTERM or SIGINT stop it after the current
batch (a waiting poll is cancelled and rolled back).

Tombstones (esrc.erased, esrc.deleted) come like any event; this consumer
records them like the others.  A read model derived from the events drops
what it derived from the stream there: see esrc.Projection.
"""
from __future__ import annotations

import signal
from types import FrameType
from typing import Optional

# SIGTERM or SIGINT during the start (importing psycopg takes a while on a
# busy machine) is remembered and honoured once the consumer exists
_stop_at_start: list[int] = []


def _remember(signum: int, frame: Optional[FrameType]) -> None:
    _stop_at_start.append(signum)


signal.signal(signal.SIGTERM, _remember)
signal.signal(signal.SIGINT, _remember)

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

try:
    import esrc
except ImportError:  # not installed: the client of this tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "clients", "python", "src"))
    import esrc

RESULTS_DDL = """CREATE TABLE IF NOT EXISTS {} (
    position bigint NOT NULL,
    stream text NOT NULL,
    version bigint NOT NULL,
    type text NOT NULL,
    member text NOT NULL,
    consumed_at timestamptz NOT NULL DEFAULT clock_timestamp())"""


def make_handler(table: str, member: str) -> esrc.consumer.Handler:
    insert = sql.SQL("INSERT INTO {} (position, stream, version, type, member) "
                     "VALUES (%s, %s, %s, %s, %s)").format(sql.Identifier(table))

    def handle(events: list[esrc.RecordedEvent], conn: psycopg.Connection[Any]) -> None:
        """The effects of one batch, with the connection of the batch's
        transaction (exactly once) or in autocommit (--at-least-once): here
        one row per event in the results table.  Put your projection here."""
        with conn.cursor() as cur:
            cur.executemany(insert, [(e.position, e.stream, e.version, e.type, member)
                                     for e in events])
    return handle


def create_table(conn: psycopg.Connection[Any], table: str, member: str) -> None:
    """Create the results table unless the search_path finds it.  An
    application role needs no CREATE on a schema when the table was
    created for it (PostgreSQL 15 and later let no one but the owner
    create in public): CREATE TABLE IF NOT EXISTS would still ask."""
    with conn.transaction():
        # a transaction-level lock: concurrent members do not race
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (table,))
        row = conn.execute("SELECT to_regclass(quote_ident(%s)) IS NOT NULL", (table,)).fetchone()
        if row and row[0]:
            return
        try:
            conn.execute(sql.SQL(RESULTS_DDL).format(sql.Identifier(table)))
        except psycopg.errors.InsufficientPrivilege as e:
            raise SystemExit(
                "%s: cannot create the results table %s: %s\n"
                "Create it beforehand (see examples/subscriptions/README.md) and grant "
                "INSERT on it, or give this role a schema of its own."
                % (member, table, e.diag.message_primary))


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("dsn")
    p.add_argument("subscription")
    p.add_argument("member")
    p.add_argument("--max-count", type=int, default=100)
    p.add_argument("--wait", type=float, default=5.0, help="seconds a poll waits for events")
    p.add_argument("--table", default="consumed_events", help="the results table")
    p.add_argument("--at-least-once", action="store_true",
                   help="one autocommit poll with ack per batch, effects outside its transaction")
    a = p.parse_args()
    member = a.member
    batches = 0

    def on_batch(events: list[esrc.RecordedEvent]) -> None:
        nonlocal batches
        batches += 1
        print("%s: batch %d: %d events, positions %d..%d"
              % (member, batches, len(events), events[0].position, events[-1].position), flush=True)

    def on_retry(e: esrc.EsrcError) -> None:
        print("%s: retry after %s: %s" % (member, e.sqlstate, e.message), flush=True)

    # prepare_threshold=None: PgBouncer 1.18 in transaction mode cannot
    # follow named prepared statements from one server to the next
    c = esrc.Consumer(a.dsn, a.subscription, member, make_handler(a.table, member),
                      exactly_once=not a.at_least_once, max_count=a.max_count, wait=a.wait,
                      on_batch=on_batch, on_retry=on_retry, prepare_threshold=None)
    # SIGTERM and SIGINT stop it after the current batch (run() installs the
    # same handlers; these cover the start, before the first poll)
    signal.signal(signal.SIGTERM, c.stop)
    signal.signal(signal.SIGINT, c.stop)
    if _stop_at_start:
        c.stop()
    create_table(c.conn, a.table, member)
    print("%s: started" % member, flush=True)
    stats = c.run()
    print("%s: stopped after %d batches, %d events, %d retries"
          % (member, stats.batches, stats.events, stats.retries + stats.reconnects), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
