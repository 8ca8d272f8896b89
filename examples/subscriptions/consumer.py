"""A member of an esrc subscription with exactly-once effects (psycopg 3).

Each turn is one transaction: poll a batch (waiting for new events when
there are none), write the batch's results, ack, commit.  The results and
the checkpoint commit together, so after any crash every event's results
are in the table exactly once.  On 40001 (another member processed those
events first, after a rebalance) or 55000 (this member lost its
partitions) the transaction is rolled back and the loop polls again.

    python3 consumer.py DSN SUBSCRIPTION MEMBER [--max-count 100] [--wait 5]
                        [--table consumed_events]

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
    def __init__(self, dsn, subscription, member, max_count, wait, table):
        self.subscription, self.member, self.table = subscription, member, table
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
        with self.conn.transaction():
            # a transaction-level lock: concurrent members do not race
            self.conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.table,))
            self.conn.execute(sql.SQL(RESULTS_DDL).format(sql.Identifier(self.table)))

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

    def run(self):
        self.create_table()
        batches = total = retries = 0
        while not self.stopping:
            try:
                events = self.turn()
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
    a = p.parse_args()
    c = Consumer(a.dsn, a.subscription, a.member, a.max_count, a.wait, a.table)
    signal.signal(signal.SIGTERM, c.stop)
    signal.signal(signal.SIGINT, c.stop)
    c.run()


if __name__ == "__main__":
    sys.exit(main())
