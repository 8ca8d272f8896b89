"""The reading side of bench/subscribe/run.sh (psycopg 3, one process per
reader or member, each on its own direct connection).

Latency readers: each turn is one transaction that reads a batch, notes
the wall-clock time the rows arrived, and stores its position (esrc.ack,
or an UPDATE of a checkpoint row for the baselines), so that the three
do the same work per batch.  They write "position received_us" lines to
OUT and run for SECONDS.

  poll   DSN OUT SECONDS SUB MEMBER   esrc.poll(SUB, MEMBER, 1000, '1s') + ack
  readall DSN OUT SECONDS INTERVAL_MS read_all(after, 1000); when it returned
                                      less than a full batch, sleep INTERVAL_MS
  notify DSN OUT SECONDS CHANNEL      LISTEN CHANNEL; at each notification
                                      read_all until less than a full batch

Throughput (prints "events N seconds S events_per_s R"):

  scan   DSN EVENTS                   read_all(after, 100) until EVENTS rows
  consume DSN EVENTS SUB MEMBERS [STYLE]
                                      MEMBERS processes poll(SUB, m, 100)
                                      + ack per transaction until EVENTS
                                      are acked between them; from the
                                      first poll to the last commit.
                                      STYLE plain (BEGIN, poll, ack,
                                      COMMIT), pipelined (the same in two
                                      round trips), or poll_ack (one
                                      autocommit poll(..., ack => the last
                                      position of the batch before) per
                                      batch: at-least-once)

Load for the append benchmark:

  follow DSN SUB MEMBER               poll(SUB, MEMBER, 1000, '5s') + ack
                                      in a loop, until killed
"""
import datetime
import multiprocessing
import sys
import time

import psycopg


def connect(dsn, **kw):
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=None, **kw)


def now_us():
    return time.time_ns() // 1000


def latency_poll(dsn, out, seconds, sub, member):
    conn = connect(dsn)
    wait = datetime.timedelta(seconds=1)
    end = time.monotonic() + seconds
    with open(out, "w") as f:
        while time.monotonic() < end:
            with conn.transaction():
                rows = conn.execute("SELECT position FROM esrc.poll(%s, %s, 1000, %s)",
                                    (sub, member, wait)).fetchall()
                t = now_us()
                if rows:
                    conn.execute("SELECT esrc.ack(%s, %s)", (sub, member))
            f.writelines("%d %d\n" % (r[0], t) for r in rows)


def _read_all_batch(conn, after, f):
    """One batch of the baselines: read, note the time, store the position."""
    with conn.transaction():
        rows = conn.execute("SELECT position FROM esrc.read_all(%s, 1000)", (after,)).fetchall()
        t = now_us()
        if rows:
            after = rows[-1][0]
            conn.execute("UPDATE bench_checkpoint SET position = %s", (after,))
    f.writelines("%d %d\n" % (r[0], t) for r in rows)
    return after, len(rows)


def _start_position(conn):
    return conn.execute("SELECT coalesce(max(position), 0) FROM esrc.events").fetchone()[0]


def latency_readall(dsn, out, seconds, interval_ms):
    conn = connect(dsn)
    after = _start_position(conn)
    end = time.monotonic() + seconds
    with open(out, "w") as f:
        while time.monotonic() < end:
            after, n = _read_all_batch(conn, after, f)
            if n < 1000:
                time.sleep(interval_ms / 1000.0)


def latency_notify(dsn, out, seconds, channel):
    conn = connect(dsn)
    after = _start_position(conn)
    conn.execute("LISTEN " + channel)
    end = time.monotonic() + seconds
    with open(out, "w") as f:
        while time.monotonic() < end:
            # returns at the first notification, or at once with those
            # that came in during the last reads (psycopg keeps them)
            woke = False
            for _ in conn.notifies(timeout=max(0.0, end - time.monotonic()), stop_after=1):
                woke = True
            n = 1000 if woke else 0
            while n == 1000:
                after, n = _read_all_batch(conn, after, f)


def scan(dsn, events):
    conn = connect(dsn)
    after = got = 0
    t0 = time.monotonic()
    while got < events:
        rows = conn.execute("SELECT * FROM esrc.read_all(%s, 100)", (after,)).fetchall()
        if not rows:
            break
        got += len(rows)
        after = rows[-1][0]
    secs = time.monotonic() - t0
    print("events %d seconds %.3f events_per_s %.0f" % (got, secs, got / secs))


def _batch_plain(conn, sub, member, wait):
    with conn.transaction():
        rows = conn.execute("SELECT * FROM esrc.poll(%s, %s, 100, %s)",
                            (sub, member, wait)).fetchall()
        if rows:
            conn.execute("SELECT esrc.ack(%s, %s)", (sub, member))
    return rows


def _batch_pipelined(conn, sub, member, wait):
    # the same statements in two round trips instead of four: BEGIN with the
    # poll, the ack with COMMIT (libpq pipeline mode)
    try:
        with conn.pipeline():
            conn.execute("BEGIN")
            rows = conn.execute("SELECT * FROM esrc.poll(%s, %s, 100, %s)",
                                (sub, member, wait)).fetchall()
            if rows:
                conn.execute("SELECT esrc.ack(%s, %s)", (sub, member))
            conn.execute("COMMIT")
    except psycopg.Error:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.execute("ROLLBACK")
        raise
    return rows


def _batch_poll_ack(conn, sub, member, wait, ack):
    # one statement per batch, in autocommit: acknowledge the batch before
    # (None: nothing to acknowledge) and fetch the next
    return conn.execute("SELECT * FROM esrc.poll(%s, %s, 100, %s, %s)",
                        (sub, member, wait, ack)).fetchall()


def _member(dsn, events, sub, member, barrier, total, starts, ends, i, style):
    conn = connect(dsn)
    wait = datetime.timedelta(milliseconds=100)
    batch = _batch_pipelined if style == "pipelined" else _batch_plain
    ack = None
    barrier.wait()
    starts[i] = time.monotonic()
    ends[i] = starts[i]
    while True:
        try:
            if style == "poll_ack":
                rows = _batch_poll_ack(conn, sub, member, wait, ack)
                if not rows and ack is not None:
                    ends[i] = time.monotonic()   # the last batch's ack committed
                ack = rows[-1][0] if rows else None
            else:
                rows = batch(conn, sub, member, wait)
        except psycopg.errors.SerializationFailure:
            # another member acknowledged first (a lease passed): the batch
            # rolled back, poll again, as every consumer does
            ack = None
            continue
        if rows:
            ends[i] = time.monotonic()
            with total.get_lock():
                total.value += len(rows)
        elif total.value >= events:
            break


def consume(dsn, events, sub, members, style="plain"):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(members)
    total = ctx.Value("q", 0)
    starts = ctx.Array("d", members)
    ends = ctx.Array("d", members)
    procs = [ctx.Process(target=_member,
                         args=(dsn, events, sub, "m%d" % i, barrier, total, starts, ends, i, style))
             for i in range(members)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            sys.exit("member failed with exit code %s" % p.exitcode)
    secs = max(ends) - min(starts)
    print("events %d seconds %.3f events_per_s %.0f" % (total.value, secs, total.value / secs))


def follow(dsn, sub, member):
    conn = connect(dsn)
    wait = datetime.timedelta(seconds=5)
    while True:
        with conn.transaction():
            rows = conn.execute("SELECT position FROM esrc.poll(%s, %s, 1000, %s)",
                                (sub, member, wait)).fetchall()
            if rows:
                conn.execute("SELECT esrc.ack(%s, %s)", (sub, member))


def main(argv):
    mode, dsn, args = argv[1], argv[2], argv[3:]
    if mode == "poll":
        latency_poll(dsn, args[0], float(args[1]), args[2], args[3])
    elif mode == "readall":
        latency_readall(dsn, args[0], float(args[1]), float(args[2]))
    elif mode == "notify":
        latency_notify(dsn, args[0], float(args[1]), args[2])
    elif mode == "scan":
        scan(dsn, int(args[0]))
    elif mode == "consume":
        consume(dsn, int(args[0]), args[1], int(args[2]), *args[3:4])
    elif mode == "follow":
        follow(dsn, args[0], args[1])
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main(sys.argv)
