#!/usr/bin/env python3
"""A subscription member for the subscription tests (test/run-35-*.sh, run-36-*.sh).

    consumer.py DSN SUBSCRIPTION MEMBER in|in-broken|out [WAIT [PAUSE]]

in:  the exactly-once pattern.  Per batch, in one transaction: poll, write
     the events into results_in, ack, commit; on 40001 (or 55000, the
     member lost its partitions) roll back and poll again.
in-broken: like in, but commits the results before the ack (in a
     transaction of its own), which is not exactly once: for showing that
     the tests' checks catch that.
out: the at-least-once pattern with outside effects.  Autocommit poll,
     write the events into results_out in a separate autocommit statement,
     then ack the last position; a failed ack is ignored (the events are
     delivered again).

PAUSE (seconds, default 0) is slept after the results are written and
before the ack, to widen the window in which a test can crash a batch.
While the file named by $SUB_HOLD exists, a member that lost its
connection does not connect again (a test can look at the server before
the members come back).

The result rows carry the member, the time of the insert (clock_timestamp)
and, for the in pattern, the transaction's commit timestamp through xmin
(the driver enables track_commit_timestamp).  A lost connection (the
server crashed or restarted) is retried until the process is killed;
every other error ends the process with status 1.  The backend's
application_name is "sub:MEMBER", so that a test can find it.
"""
import os
import sys
import time

import psycopg
from psycopg import errors

dsn, sub, member, mode = sys.argv[1:5]
wait = sys.argv[5] if len(sys.argv) > 5 else '1s'
pause = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
hold = os.environ.get('SUB_HOLD')

POLL_IN = """
INSERT INTO results_in (position, stream, version, member, at)
SELECT position, stream, version, %(member)s, clock_timestamp()
FROM esrc.poll(%(sub)s, %(member)s, 100, %(wait)s)
ORDER BY position
RETURNING position
"""
POLL_OUT = """
SELECT position, stream, version FROM esrc.poll(%(sub)s, %(member)s, 100, %(wait)s)
"""
WRITE_OUT = """
INSERT INTO results_out (position, stream, version, member, at)
SELECT p, s, v, %(member)s, clock_timestamp()
FROM unnest(%(p)s::bigint[], %(s)s::text[], %(v)s::bigint[]) WITH ORDINALITY AS x(p, s, v, o)
ORDER BY o
"""
ARGS = {'sub': sub, 'member': member, 'wait': wait}

# errors after which the batch is simply retried
RETRY = (errors.SerializationFailure, errors.ObjectNotInPrerequisiteState,
         errors.DeadlockDetected)


def batch_in(conn):
    with conn.cursor() as cur:
        cur.execute(POLL_IN, ARGS)
        n = cur.rowcount
        if n > 0:
            if mode == 'in-broken':
                conn.commit()
            if pause:
                time.sleep(pause)
            cur.execute("SELECT esrc.ack(%(sub)s, %(member)s)", ARGS)
    conn.commit()


def batch_out(conn):
    with conn.cursor() as cur:
        cur.execute(POLL_OUT, ARGS)
        rows = cur.fetchall()
        if not rows:
            return
        cur.execute(WRITE_OUT, dict(ARGS, p=[r[0] for r in rows], s=[r[1] for r in rows],
                                    v=[r[2] for r in rows]))
        if pause:
            time.sleep(pause)
        try:
            cur.execute("SELECT esrc.ack(%(sub)s, %(member)s, %(pos)s)",
                        dict(ARGS, pos=rows[-1][0]))
        except RETRY:
            pass


def main():
    conn = None
    while True:
        try:
            if conn is None or conn.closed:
                while hold and os.path.exists(hold):
                    time.sleep(0.1)
                conn = psycopg.connect(dsn, application_name='sub:' + member,
                                       autocommit=(mode == 'out'), connect_timeout=5)
            if mode != 'out':
                batch_in(conn)
            else:
                batch_out(conn)
        except RETRY:
            if not conn.autocommit:
                conn.rollback()
        except psycopg.OperationalError as e:
            # the server went away (crash, restart) or is recovering
            print(f"{member}: reconnecting: {str(e).strip().splitlines()[0]}", file=sys.stderr,
                  flush=True)
            try:
                conn.close()
            except Exception:
                pass
            conn = None
            time.sleep(0.2)


main()
