"""bench/python-client/bench.py DSN: the esrc client against the same work
written by hand with psycopg, alternated round by round, as ratios.

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

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
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
CPU: dict[str, float] = {}   # the client process's CPU seconds per command, by variant


def prepare_streams(conn: psycopg.Connection[Any], prefix: str) -> list[str]:
    streams = ["%s-%d" % (prefix, i) for i in range(STREAMS)]
    with conn.transaction():
        for s in streams:
            conn.execute("SELECT esrc.append(%s, 'UserRegistered', %s)",
                         (s, Jsonb({"email": s + "@example.com", "name": "n"})))
    return streams


def run_client(dsn: str, streams: list[str]) -> float:
    with esrc.EventStore.connect(dsn, types=types) as store:
        h = esrc.CommandHandler(store, decider)
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(COMMANDS):
            h.handle(streams[i % len(streams)], ChangeUserName("n%d" % i, uuid.uuid4()))
        CPU["client"] = (time.process_time() - c0) / COMMANDS
        return COMMANDS / (time.perf_counter() - t0)


def run_by_hand(dsn: str, streams: list[str]) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(COMMANDS):
            stream, command_id, new_name = streams[i % len(streams)], uuid.uuid4(), "n%d" % i
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
                    break
                except psycopg.errors.SerializationFailure:
                    if attempt == 10:
                        raise
                    time.sleep(random.uniform(0, 0.002 * 2 ** attempt))
        CPU["hand"] = (time.process_time() - c0) / COMMANDS
        return COMMANDS / (time.perf_counter() - t0)


def prefill(conn: psycopg.Connection[Any], category: str) -> None:
    conn.execute("""SELECT esrc.append_batch(%s || '-' || (g / 100),
                        (SELECT jsonb_agg(jsonb_build_object('type', 'Tick', 'data', jsonb_build_object('i', i)))
                         FROM generate_series(1, 100) i))
                    FROM generate_series(0, %s - 1, 100) g""", (category, EVENTS))


def consume_client(dsn: str, sub: str, table: str) -> float:
    insert = "INSERT INTO %s (position, stream) VALUES (%%s, %%s)" % table
    done = 0

    def handler(events: list[esrc.RecordedEvent], conn: psycopg.Connection[Any]) -> None:
        with conn.cursor() as cur:
            cur.executemany(insert, [(e.position, e.stream) for e in events])

    def on_batch(events: list[esrc.RecordedEvent]) -> None:
        nonlocal done
        done += len(events)
        if done >= EVENTS:
            c.stop()

    c = esrc.Consumer(dsn, sub, "m", handler, max_count=100, wait=1.0, on_batch=on_batch)
    c.store  # connect outside the timing
    t0 = time.perf_counter()
    c.run(install_signal_handlers=False)
    return EVENTS / (time.perf_counter() - t0)


def consume_by_hand(dsn: str, sub: str, table: str) -> float:
    insert = "INSERT INTO %s (position, stream) VALUES (%%s, %%s)" % table
    done = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0 = time.perf_counter()
        while done < EVENTS:
            try:
                with conn.transaction(), conn.cursor() as cur:
                    cur.execute("SELECT position, stream, version, type, data, metadata, id, recorded_at "
                                "FROM esrc.poll(%s, %s, %s, %s)", (sub, "m", 100, "1 second"))
                    rows = cur.fetchall()
                    if rows:
                        cur.executemany(insert, [(r[0], r[1]) for r in rows])
                        cur.execute("SELECT esrc.ack(%s, %s)", (sub, "m"))
                done += len(rows)
            except (psycopg.errors.SerializationFailure, psycopg.errors.ObjectNotInPrerequisiteState):
                continue
        return EVENTS / (time.perf_counter() - t0)


def main() -> None:
    dsn = sys.argv[1]
    ratios_h: list[float] = []
    ratios_c: list[float] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for r in range(ROUNDS):
            order = [("client", run_client), ("hand", run_by_hand)]
            if r % 2:
                order.reverse()
            rates: dict[str, float] = {}
            for name, fn in order:
                rates[name] = fn(dsn, prepare_streams(conn, "bu%d%s%d" % (r, name, os.getpid())))
            ratios_h.append(rates["client"] / rates["hand"])
            print("round %d handle(): client %.0f commands/s, by hand %.0f commands/s, ratio %.2fx; "
                  "client CPU per command %.0f us, by hand %.0f us"
                  % (r + 1, rates["client"], rates["hand"], ratios_h[-1], CPU["client"] * 1e6,
                     CPU["hand"] * 1e6), flush=True)
            crates: dict[str, float] = {}
            corder = [("client", consume_client), ("hand", consume_by_hand)]
            if r % 2:
                corder.reverse()
            for name, cfn in corder:
                cat = "bc%d%s%d" % (r, name, os.getpid())
                prefill(conn, cat)
                conn.execute("CREATE TABLE %s_out (position bigint, stream text)" % cat)
                conn.execute("SELECT esrc.create_subscription(%s, ARRAY[%s], 1)", (cat, cat))
                crates[name] = cfn(dsn, cat, cat + "_out")
                n = conn.execute("SELECT count(*) FROM %s_out" % cat).fetchone()
                assert n is not None and n[0] == EVENTS, (name, n)
            ratios_c.append(crates["client"] / crates["hand"])
            print("round %d consumer: client %.0f events/s, by hand %.0f events/s, ratio %.2fx"
                  % (r + 1, crates["client"], crates["hand"], ratios_c[-1]), flush=True)
    print("handle() / hand-written loop: median %.2fx (rounds %s)"
          % (statistics.median(ratios_h), ", ".join("%.2f" % x for x in ratios_h)))
    print("Consumer / hand-written poll-ack loop: median %.2fx (rounds %s)"
          % (statistics.median(ratios_c), ", ".join("%.2f" % x for x in ratios_c)))


if __name__ == "__main__":
    main()
