"""A member of an esrc subscription with exactly-once effects (psycopg 3).

Each turn is one transaction: poll a batch (waiting for new events when
there are none), write the batch's results, ack, commit.  The results and
the checkpoint commit together, so after any crash every event's results
are in the table exactly once.  On 40001 (another member processed those
events first, after a rebalance) or 55000 (this member lost its
partitions) the transaction is rolled back and the loop polls again.

With --at-least-once, the loop for effects outside the database: each turn
is one autocommit statement, esrc.poll(..., ack => the last position of
the batch before), then the effects of the batch it returned (here its
rows written on their own, standing for a mail or an HTTP call).  A crash
delivers the unacknowledged batch again, so an effect may happen twice,
never not at all.  On 40001 or 55000 it polls again without ack.

    python3 consumer.py DSN SUBSCRIPTION MEMBER [--max-count 100] [--wait 5]
                        [--table consumed_events] [--at-least-once]

The DSN may point at PgBouncer in transaction pooling mode: nothing here
depends on the server session (no LISTEN, no session locks, no prepared
statements), so each transaction may run on another server connection.
Prints one line per batch; SIGTERM or SIGINT stop it after the current
batch (a waiting poll is cancelled and rolled back).
"""
import argparse
import datetime
import signal
import sys

import psycopg
from psycopg import sql

RESULTS_DDL = """CREATE TABLE IF NOT EXISTS {} (
    position bigint NOT NULL,
    stream text NOT NULL,
    version bigint NOT NULL,
    type text NOT NULL,
    member text NOT NULL,
    consumed_at timestamptz NOT NULL DEFAULT clock_timestamp())"""


def handle(cur, table, member, events):
    """The effects of one batch, in the batch's transaction: here one row
    per event in the results table.  Put your projection here."""
    cur.executemany(
        sql.SQL("INSERT INTO {} (position, stream, version, type, member) "
                "VALUES (%s, %s, %s, %s, %s)").format(sql.Identifier(table)),
        [(position, stream, version, type_, member)
         for position, stream, version, type_ in events])


class Consumer:
    def __init__(self, dsn, subscription, member, max_count, wait, table, at_least_once=False):
        self.subscription, self.member, self.table = subscription, member, table
        self.at_least_once = at_least_once
        self.ack = None     # --at-least-once: the last position not yet acknowledged
        self.max_count, self.wait = max_count, datetime.timedelta(seconds=wait)
        # prepare_threshold=None: PgBouncer 1.18 in transaction mode cannot
        # follow named prepared statements from one server to the next
        self.conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=None,
                                    application_name="esrc-consumer " + member)
        self.stopping = False
        self.in_poll = False

    def stop(self, signum, frame):
        self.stopping = True
        if self.in_poll:
            # only the waiting poll is cancelled (a cancel that arrives
            # later, between statements, is a no-op)
            self.conn.cancel_safe()

    def create_table(self):
        """Create the results table unless the search_path finds it.  An
        application role needs no CREATE on a schema when the table was
        created for it (PostgreSQL 15 and later let no one but the owner
        create in public): CREATE TABLE IF NOT EXISTS would still ask."""
        with self.conn.transaction():
            # a transaction-level lock: concurrent members do not race
            self.conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.table,))
            if self.conn.execute("SELECT to_regclass(quote_ident(%s)) IS NOT NULL",
                                 (self.table,)).fetchone()[0]:
                return
            try:
                self.conn.execute(sql.SQL(RESULTS_DDL).format(sql.Identifier(self.table)))
            except psycopg.errors.InsufficientPrivilege as e:
                raise SystemExit(
                    "%s: cannot create the results table %s: %s\n"
                    "Create it beforehand (see examples/subscriptions/README.md) and grant "
                    "INSERT on it, or give this role a schema of its own."
                    % (self.member, self.table, e.diag.message_primary))

    def turn(self):
        """One batch: poll, effects, ack, commit.  Returns the events."""
        with self.conn.transaction(), self.conn.cursor() as cur:
            self.in_poll = True
            try:
                cur.execute("SELECT position, stream, version, type "
                            "FROM esrc.poll(%s, %s, %s, %s)",
                            (self.subscription, self.member, self.max_count, self.wait))
                events = cur.fetchall()
            finally:
                self.in_poll = False
            if events:
                handle(cur, self.table, self.member, events)
                cur.execute("SELECT esrc.ack(%s, %s)", (self.subscription, self.member))
        return events

    def turn_at_least_once(self):
        """One batch in one statement: acknowledge the batch before (a
        poll with ack does not wait), fetch the next; then its effects,
        outside the poll's transaction.  Returns the events."""
        with self.conn.cursor() as cur:
            self.in_poll = self.ack is None     # only a poll without ack waits
            try:
                cur.execute("SELECT position, stream, version, type "
                            "FROM esrc.poll(%s, %s, %s, %s, %s)",
                            (self.subscription, self.member, self.max_count, self.wait,
                             self.ack))
                events = cur.fetchall()
            except (psycopg.errors.SerializationFailure,
                    psycopg.errors.ObjectNotInPrerequisiteState):
                self.ack = None     # not acknowledged: the batch comes again
                raise
            finally:
                self.in_poll = False
            if events:
                handle(cur, self.table, self.member, events)   # autocommit: on its own
            self.ack = events[-1][0] if events else None
        return events

    def run(self):
        self.create_table()
        batches = total = retries = 0
        while not self.stopping:
            try:
                events = self.turn_at_least_once() if self.at_least_once else self.turn()
            except psycopg.errors.QueryCanceled:
                if self.stopping:
                    break
                raise
            except (psycopg.errors.SerializationFailure,
                    psycopg.errors.ObjectNotInPrerequisiteState) as e:
                retries += 1
                print("%s: retry after %s: %s" % (self.member, e.sqlstate, e.diag.message_primary),
                      flush=True)
                continue
            if events:
                batches += 1
                total += len(events)
                print("%s: batch %d: %d events, positions %d..%d"
                      % (self.member, batches, len(events), events[0][0], events[-1][0]), flush=True)
        if self.ack is not None:
            # the last batch's effects are done: acknowledge it before leaving
            try:
                self.conn.execute("SELECT esrc.ack(%s, %s, %s)",
                                  (self.subscription, self.member, self.ack))
            except (psycopg.errors.SerializationFailure,
                    psycopg.errors.ObjectNotInPrerequisiteState) as e:
                print("%s: last batch not acknowledged (%s), it will come again"
                      % (self.member, e.sqlstate), flush=True)
        print("%s: stopped after %d batches, %d events, %d retries"
              % (self.member, batches, total, retries), flush=True)
        self.conn.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dsn")
    p.add_argument("subscription")
    p.add_argument("member")
    p.add_argument("--max-count", type=int, default=100)
    p.add_argument("--wait", type=float, default=5.0, help="seconds a poll waits for events")
    p.add_argument("--table", default="consumed_events", help="the results table")
    p.add_argument("--at-least-once", action="store_true",
                   help="one autocommit poll with ack per batch, effects outside its transaction")
    a = p.parse_args()
    c = Consumer(a.dsn, a.subscription, a.member, a.max_count, a.wait, a.table,
                 a.at_least_once)
    signal.signal(signal.SIGTERM, c.stop)
    signal.signal(signal.SIGINT, c.stop)
    c.run()


if __name__ == "__main__":
    sys.exit(main())
