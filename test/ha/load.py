#!/usr/bin/python3
# test/ha/load.py: the load of the failover drill (test/run-69-failover.sh).
#
#   load.py DSN DIR WRITERS STREAMS_PER_WRITER
#
# Runs until DIR/stop exists, then stops the writers, lets the consumer
# drain and exits.  Uses Debian's python3-psycopg2 (a dependency of the
# patroni package), whose libpq does the multi-host failover:
# DSN is "host=127.0.0.1,127.0.0.1 port=P1,P2 target_session_attrs=read-write".
#
# Writers (one thread and one connection each): append to their own
# streams (w<N>-<k>, categories acct and order) with expected versions and
# a client-chosen event id.  After a disconnect they reconnect and retry the
# SAME id with the SAME expected version (esrc.append is idempotent by id).
# An append is acknowledged when its autocommit statement returned: its
# id is then written to DIR/acked.<N> (stream version id).  A version
# conflict (40001) means the log lost acknowledged events of the stream
# (asynchronous replication): the writer re-reads the stream's version and
# retries the same id; each such resync is counted in DIR/resyncs.<N>.
#
# The consumer: subscription "drill", member "c1"; each batch is polled,
# written to drill_consumed and acknowledged in one transaction (exactly
# once); after a disconnect it reconnects and goes on.
import os
import sys
import threading
import time
import uuid

import psycopg2

dsn, out, nwriters, nstreams = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
stop = threading.Event()
writers_done = threading.Event()
errors = []


def connect():
    """Connect to whichever node is read-write now; bounded (30 s)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            c = psycopg2.connect(dsn, connect_timeout=2)
            c.autocommit = True
            return c
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def writer(n):
    streams = ["%s-w%d_%d" % ("acct" if k % 2 else "order", n, k) for k in range(nstreams)]
    acked = open(os.path.join(out, "acked.%d" % n), "a", buffering=1)
    resyncs = 0
    conn = connect()
    cur = conn.cursor()
    version = {}
    for s in streams:
        cur.execute("SELECT esrc.stream_version(%s)", (s,))
        v = cur.fetchone()[0]
        version[s] = -1 if v is None else v
    seq = 0
    while not stop.is_set():
        s = streams[seq % nstreams]
        seq += 1
        eid = str(uuid.uuid4())
        while True:  # until this id is acknowledged
            try:
                cur.execute("SELECT esrc.append(%s, 'Ticked', %s, NULL, %s, %s)",
                            (s, '{"w": %d, "seq": %d}' % (n, seq), version[s], eid))
                v = cur.fetchone()[0]
                break
            except psycopg2.errors.SerializationFailure:
                # the log has fewer events in s than we were acknowledged
                resyncs += 1
                cur.execute("SELECT esrc.stream_version(%s)", (s,))
                v = cur.fetchone()[0]
                version[s] = -1 if v is None else v
            except (psycopg2.OperationalError, psycopg2.InterfaceError,
                    psycopg2.errors.ReadOnlySqlTransaction, psycopg2.errors.AdminShutdown):
                try:
                    conn.close()
                except Exception:
                    pass
                conn = connect()
                cur = conn.cursor()
        version[s] = v
        acked.write("%s %d %s\n" % (s, v, eid))
        time.sleep(0.02)  # a steady load (<= 50 appends/s per writer), not a flood
    with open(os.path.join(out, "resyncs.%d" % n), "a") as f:
        f.write("%d\n" % resyncs)


def consumer():
    conn = None
    idle = 0
    while True:
        try:
            if conn is None:
                conn = connect()
                conn.autocommit = False
            cur = conn.cursor()
            cur.execute("INSERT INTO drill_consumed (position, id) "
                        "SELECT position, id FROM esrc.poll('drill', 'c1', 200, '200 ms')")
            got = cur.rowcount
            cur.execute("SELECT esrc.ack('drill', 'c1')")
            conn.commit()
            idle = idle + 1 if got == 0 else 0
            # drained: writers gone, and two empty polls after that
            if writers_done.is_set() and idle >= 2:
                return
        except (psycopg2.OperationalError, psycopg2.InterfaceError,
                psycopg2.errors.ReadOnlySqlTransaction, psycopg2.errors.AdminShutdown):
            try:
                conn.close()
            except Exception:
                pass
            conn = None
        except psycopg2.errors.SerializationFailure:
            conn.rollback()


def guard(f, *a):
    try:
        f(*a)
    except Exception as e:  # reported, makes the run fail
        errors.append("%s%r: %r" % (f.__name__, a, e))


ws = [threading.Thread(target=guard, args=(writer, n)) for n in range(nwriters)]
c = threading.Thread(target=guard, args=(consumer,))
for t in ws + [c]:
    t.start()
while not os.path.exists(os.path.join(out, "stop")) and not errors:
    time.sleep(0.05)
stop.set()
for t in ws:
    t.join()
writers_done.set()
c.join()
for e in errors:
    print("load.py:", e, file=sys.stderr)
sys.exit(1 if errors else 0)
