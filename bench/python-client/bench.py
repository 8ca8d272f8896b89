"""bench/python-client/bench.py DSN: the esrc client against the same work
written by hand with psycopg, alternated round by round, as ratios.

The two variants of each part run in the same process on connections
of their own, taking turns of 20 commands (or batches), so that a change
in the machine's load hits both alike; the client's CPU per operation is
printed too (process time), which the load moves less.

1. handle(): ChangeUserName commands (1 client, sequential), each one
   transaction that reads the stream, folds it, decides and appends with
   the expected version and an id derived from the command id; against
   the hand-written loop (the 37 lines of issue 30: read_stream, fold over
   dicts, append with Jsonb, uuid5 ids, retry on SerializationFailure).
2. consumer: a subscription of BENCH_EVENTS pre-filled events consumed in
   batches of 100, each batch's rows inserted (executemany) in the
   transaction that acks it; esrc.Consumer against the hand-written
   poll / insert / ack loop.

Prints per-round figures and the medians of the per-round ratios.
Asserts nothing (shared machines are noisy).
"""
from __future__ import annotations

import os
import random
import statistics
import sys
import time
import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "clients", "python", "src"))
import esrc  # noqa: E402
from dataclasses import dataclass  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
COMMANDS = int(os.environ.get("BENCH_COMMANDS", "2000"))
STREAMS = int(os.environ.get("BENCH_STREAMS", "100"))
EVENTS = int(os.environ.get("BENCH_EVENTS", "20000"))

types = esrc.EventTypes()


@types.register
@dataclass(frozen=True)
class UserRegistered:
    email: str
    name: str


@types.register
@dataclass(frozen=True)
class UserNameChanged:
    name: str


@dataclass(frozen=True)
class ChangeUserName:
    name: str
    command_id: uuid.UUID


def evolve(state: Any, e: Any) -> Any:
    if isinstance(e, UserRegistered):
        return {"email": e.email, "name": e.name}
    return {**state, "name": e.name}


def decide(c: ChangeUserName, state: Any) -> list[Any]:
    if state is None:
        raise LookupError("unknown user")
    return [UserNameChanged(c.name)]


decider: esrc.Decider[ChangeUserName, Any, Any] = esrc.Decider(lambda: None, evolve, decide)


def prepare_streams(conn: psycopg.Connection[Any], prefix: str) -> list[str]:
    streams = ["%s-%d" % (prefix, i) for i in range(STREAMS)]
    with conn.transaction():
        for s in streams:
            conn.execute("SELECT esrc.append(%s, 'UserRegistered', %s)",
                         (s, Jsonb({"email": s + "@example.com", "name": "n"})))
    return streams


def prefill(conn: psycopg.Connection[Any], category: str) -> None:
    conn.execute("""SELECT esrc.append_batch(%s || '-' || (g / 100),
                        (SELECT jsonb_agg(jsonb_build_object('type', 'Tick', 'data', jsonb_build_object('i', i)))
                         FROM generate_series(1, 100) i))
                    FROM generate_series(0, %s - 1, 100) g""", (category, EVENTS))


CHUNK = 20   # commands (or batches) of one variant before the other's turn


class Timer:
    """Wall and CPU seconds of one variant, summed over its turns."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def __enter__(self) -> Timer:
        self.w0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall += time.perf_counter() - self.w0
        self.cpu += time.process_time() - self.c0


def by_hand(conn: psycopg.Connection[Any], stream: str, new_name: str) -> None:
    """The hand-written command: load, fold, decide, append, retry."""
    command_id = uuid.uuid4()
    for attempt in range(1, 11):
        try:
            with conn.transaction():
                rows = conn.execute("SELECT version, type, data FROM esrc.read_stream(%s)",
                                    (stream,)).fetchall()
                state: Any = None
                for _, type_, data in rows:
                    if type_ == "UserRegistered":
                        state = {"email": data["email"], "name": data["name"]}
                    elif type_ == "UserNameChanged":
                        state = {**state, "name": data["name"]}
                if state is None:
                    raise LookupError("unknown user")
                version = rows[-1][0]
                conn.execute("SELECT esrc.append(%s, %s, %s, %s, %s, %s)",
                             (stream, "UserNameChanged", Jsonb({"name": new_name}), None,
                              version, uuid.uuid5(command_id, "0")))
            return
        except psycopg.errors.SerializationFailure:
            if attempt == 10:
                raise
            time.sleep(random.uniform(0, 0.002 * 2 ** attempt))


def bench_handle(dsn: str, conn: psycopg.Connection[Any], tag: str) -> tuple[Timer, Timer]:
    """COMMANDS commands each, the two variants taking turns of CHUNK."""
    s_client = prepare_streams(conn, "bu%sc" % tag)
    s_hand = prepare_streams(conn, "bu%sh" % tag)
    tc, th = Timer(), Timer()
    with esrc.EventStore.connect(dsn, types=types) as store, \
            psycopg.connect(dsn, autocommit=True) as hconn:
        h = esrc.CommandHandler(store, decider)
        for start in range(0, COMMANDS, CHUNK):
            def client_turn() -> None:
                with tc:
                    for i in range(start, start + CHUNK):
                        h.handle(s_client[i % STREAMS], ChangeUserName("n%d" % i, uuid.uuid4()))

            def hand_turn() -> None:
                with th:
                    for i in range(start, start + CHUNK):
                        by_hand(hconn, s_hand[i % STREAMS], "n%d" % i)
            # which goes first alternates from turn to turn
            for turn in ((client_turn, hand_turn) if start // CHUNK % 2 else (hand_turn, client_turn)):
                turn()
    return tc, th


def bench_consume(dsn: str, conn: psycopg.Connection[Any], tag: str) -> tuple[Timer, Timer]:
    """EVENTS events each, batches of 100 inserted in the acking
    transaction, the two variants taking turns of CHUNK batches."""
    subs = {}
    for v in ("c", "h"):
        cat = "bc%s%s" % (tag, v)
        prefill(conn, cat)
        conn.execute("CREATE TABLE %s_out (position bigint, stream text)" % cat)
        conn.execute("SELECT esrc.create_subscription(%s, ARRAY[%s], 1)", (cat, cat))
        subs[v] = cat
    insert_c = "INSERT INTO %s_out (position, stream) VALUES (%%s, %%s)" % subs["c"]
    insert_h = "INSERT INTO %s_out (position, stream) VALUES (%%s, %%s)" % subs["h"]

    def handler(events: list[esrc.RecordedEvent], hc: psycopg.Connection[Any]) -> None:
        with hc.cursor() as cur:
            cur.executemany(insert_c, [(e.position, e.stream) for e in events])

    c = esrc.Consumer(dsn, subs["c"], "m", handler, max_count=100, wait=1.0)
    c.store  # connected outside the timing
    tc, th = Timer(), Timer()
    done_c = done_h = 0
    with psycopg.connect(dsn, autocommit=True) as hconn:
        def client_turn() -> None:
            nonlocal done_c
            with tc:
                for _ in range(CHUNK):
                    if done_c < EVENTS:
                        done_c += len(c.poll_once())

        def hand_turn() -> None:
            nonlocal done_h
            with th:
                for _ in range(CHUNK):
                    if done_h >= EVENTS:
                        break
                    with hconn.transaction(), hconn.cursor() as cur:
                        cur.execute("SELECT position, stream, version, type, data, metadata, id, "
                                    "recorded_at, tags FROM esrc.poll(%s, %s, %s, %s)",
                                    (subs["h"], "m", 100, "1 second"))
                        rows = cur.fetchall()
                        if rows:
                            cur.executemany(insert_h, [(r[0], r[1]) for r in rows])
                            cur.execute("SELECT esrc.ack(%s, %s)", (subs["h"], "m"))
                    done_h += len(rows)
        turns = 0
        while done_c < EVENTS or done_h < EVENTS:
            for turn in ((client_turn, hand_turn) if turns % 2 else (hand_turn, client_turn)):
                turn()
            turns += 1
    c.stop()
    c.run(install_signal_handlers=False)
    for v in ("c", "h"):
        n = conn.execute("SELECT count(*) FROM %s_out" % subs[v]).fetchone()
        assert n is not None and n[0] == EVENTS, (v, n)
    return tc, th


def main() -> None:
    dsn = sys.argv[1]
    ratios_h: list[float] = []
    ratios_c: list[float] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for r in range(ROUNDS):
            tag = "%d_%d" % (os.getpid(), r)
            tc, th = bench_handle(dsn, conn, tag)
            ratios_h.append(th.wall / tc.wall)
            print("round %d handle(): client %.0f commands/s, by hand %.0f commands/s, ratio %.2fx; "
                  "client CPU per command %.0f us, by hand %.0f us"
                  % (r + 1, COMMANDS / tc.wall, COMMANDS / th.wall, ratios_h[-1],
                     tc.cpu / COMMANDS * 1e6, th.cpu / COMMANDS * 1e6), flush=True)
            tc, th = bench_consume(dsn, conn, tag)
            ratios_c.append(th.wall / tc.wall)
            print("round %d consumer: client %.0f events/s, by hand %.0f events/s, ratio %.2fx; "
                  "client CPU per event %.1f us, by hand %.1f us"
                  % (r + 1, EVENTS / tc.wall, EVENTS / th.wall, ratios_c[-1],
                     tc.cpu / EVENTS * 1e6, th.cpu / EVENTS * 1e6), flush=True)
    print("handle() / hand-written loop: median %.2fx (rounds %s)"
          % (statistics.median(ratios_h), ", ".join("%.2f" % x for x in ratios_h)))
    print("Consumer / hand-written poll-ack loop: median %.2fx (rounds %s)"
          % (statistics.median(ratios_c), ", ".join("%.2f" % x for x in ratios_c)))


if __name__ == "__main__":
    main()
