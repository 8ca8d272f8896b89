#!/usr/bin/env python3
"""A concurrent model test of dynamic consistency boundaries (docs/dcb.md).

N clients (16) enrol random students into random courses, and now and then
change a course's capacity, for a bounded time.  Each decision reads the
events of its query up to the horizon (esrc.read_query with up_to =
esrc.safe_position() taken first) and appends with esrc.append_if on that
query after that horizon, retrying on 40001.  The invariants: no course
over its capacity, no student in more than LIMIT courses, no student twice
in a course, and every enrolment a client saw succeed is in the log (and
nothing else is); checked on the final state, and again by replaying the
whole log in position order (esrc.read_all) -- at every event.

usage: model.py PORT SECONDS [CLIENTS] [SEED]
"""
import json
import random
import sys
import threading
import time
import uuid

import psycopg

PORT = int(sys.argv[1])
SECONDS = float(sys.argv[2])
CLIENTS = int(sys.argv[3]) if len(sys.argv) > 3 else 16
SEED = int(sys.argv[4]) if len(sys.argv) > 4 else 72
COURSES = 10
STUDENTS = 60
LIMIT = 3   # courses per student

DSN = f"host=127.0.0.1 port={PORT} user=postgres dbname=postgres"


def connect():
    return psycopg.connect(DSN, autocommit=True)


def course_query(course, student=None):
    items = [{"types": ["CourseDefined", "CourseCapacityChanged", "StudentSubscribed"],
              "tags": [f"course:{course}"]}]
    if student is not None:
        items.append({"types": ["StudentSubscribed"], "tags": [f"student:{student}"]})
    return {"items": items}


def decide(cur, query):
    """Read the events of query up to the horizon; return (events, after)."""
    cur.execute("SELECT esrc.safe_position()")
    after = cur.fetchone()[0]
    cur.execute("SELECT type, data, tags FROM esrc.read_query(%s::jsonb, 0, NULL, %s)",
                (json.dumps(query), after))
    return cur.fetchall(), after


def course_state(events, course):
    capacity, enrolled = 0, set()
    for typ, data, tags in events:
        if f"course:{course}" not in (tags or []):
            continue
        if typ in ("CourseDefined", "CourseCapacityChanged"):
            capacity = data["capacity"]
        elif typ == "StudentSubscribed":
            enrolled.add(data["student"])
    return capacity, enrolled


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.enrolled = {}       # event id -> (student, course)
        self.refused = 0
        self.conflicts = 0
        self.capacity_changes = 0
        self.errors = []


def client(n, deadline, stats):
    rnd = random.Random(SEED * 1000 + n)
    conn = connect()
    cur = conn.cursor()
    while time.monotonic() < deadline:
        course = rnd.randrange(COURSES)
        try:
            if rnd.random() < 0.1:
                change_capacity(cur, rnd, course, stats)
            else:
                enrol(cur, rnd, rnd.randrange(STUDENTS), course, stats)
        except Exception as e:  # anything but 40001 is a failure
            with stats.lock:
                stats.errors.append(repr(e))
            return
    conn.close()


def append_if(cur, stream, event, query, after):
    cur.execute("SELECT esrc.append_if(%s, %s::jsonb, %s::jsonb)",
                (stream, json.dumps([event]),
                 json.dumps({"fail_if_events_match": query, "after": after})))


def enrol(cur, rnd, student, course, stats):
    query = course_query(course, student)
    for _ in range(50):
        events, after = decide(cur, query)
        capacity, enrolled = course_state(events, course)
        mine = sum(1 for t, d, tags in events
                   if t == "StudentSubscribed" and d["student"] == student)
        if student in enrolled or len(enrolled) >= capacity or mine >= LIMIT:
            with stats.lock:
                stats.refused += 1
            return
        eid = str(uuid.UUID(int=rnd.getrandbits(128), version=4))
        event = {"type": "StudentSubscribed", "id": eid,
                 "data": {"student": student, "course": course},
                 "tags": [f"student:{student}", f"course:{course}"]}
        try:
            append_if(cur, f"student-{student}", event, query, after)
        except psycopg.errors.SerializationFailure:
            with stats.lock:
                stats.conflicts += 1
            continue
        with stats.lock:
            stats.enrolled[eid] = (student, course)
        return
    raise RuntimeError("50 conflicts in a row")


def change_capacity(cur, rnd, course, stats):
    query = course_query(course)
    for _ in range(50):
        events, after = decide(cur, query)
        capacity, enrolled = course_state(events, course)
        new = max(len(enrolled), rnd.randrange(2, 13))
        event = {"type": "CourseCapacityChanged", "data": {"capacity": new},
                 "tags": [f"course:{course}"]}
        try:
            append_if(cur, f"course-{course}", event, query, after)
        except psycopg.errors.SerializationFailure:
            with stats.lock:
                stats.conflicts += 1
            continue
        with stats.lock:
            stats.capacity_changes += 1
        return
    raise RuntimeError("50 conflicts in a row")


def main():
    conn = connect()
    cur = conn.cursor()
    for c in range(COURSES):
        cur.execute("SELECT esrc.append(%s, 'CourseDefined', %s::jsonb, tags => ARRAY[%s])",
                    (f"course-{c}", json.dumps({"course": c, "capacity": 4}), f"course:{c}"))
    stats = Stats()
    deadline = time.monotonic() + SECONDS
    threads = [threading.Thread(target=client, args=(n, deadline, stats)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    problems = list(stats.errors)

    # the final state, as a reader sees it now
    for c in range(COURSES):
        events, _ = decide(cur, course_query(c))
        capacity, enrolled = course_state(events, c)
        if len(enrolled) > capacity:
            problems.append(f"course {c}: {len(enrolled)} students, capacity {capacity}")
    cur.execute("""SELECT data->>'student', count(*), count(DISTINCT data->>'course')
                   FROM esrc.events WHERE type = 'StudentSubscribed' GROUP BY 1""")
    for s, n, distinct in cur.fetchall():
        if n > LIMIT or n != distinct:
            problems.append(f"student {s}: {n} enrolments in {distinct} courses")

    # the replay, with capacity changes folded in position order
    problems += replay_with_capacity(cur)
    cur.execute("SELECT id::text FROM esrc.events WHERE type = 'StudentSubscribed'")
    logged = {r[0] for r in cur.fetchall()}
    if logged != set(stats.enrolled):
        problems.append(f"enrolments: {len(stats.enrolled)} acknowledged, {len(logged)} in the log, "
                        f"{len(logged ^ set(stats.enrolled))} differ")
    print(f"dcb model: {CLIENTS} clients, {SECONDS:.0f} s: {len(stats.enrolled)} enrolments, "
          f"{stats.refused} refused by the invariants, {stats.capacity_changes} capacity changes, "
          f"{stats.conflicts} conflicts (40001) retried; {len(problems)} problems")
    for p in problems[:20]:
        print("  " + p)
    if len(stats.enrolled) == 0 or stats.conflicts == 0:
        print("  the run did not exercise concurrent decisions")
        return 1
    return 1 if problems else 0


def replay_with_capacity(cur):
    capacity, enrolled, per_student = {}, {}, {}
    problems, after = [], 0
    while True:
        cur.execute("SELECT position, stream, type, data FROM esrc.read_all(%s, 10000)", (after,))
        rows = cur.fetchall()
        if not rows:
            return problems
        for position, stream, typ, data in rows:
            after = position
            if typ == "CourseDefined":
                capacity[data["course"]] = data["capacity"]
                enrolled[data["course"]] = set()
            elif typ == "CourseCapacityChanged":
                c = int(stream.split("-", 1)[1])
                capacity[c] = data["capacity"]
                if len(enrolled[c]) > capacity[c]:
                    problems.append(f"position {position}: course {c} capacity {capacity[c]} "
                                    f"below its {len(enrolled[c])} students")
            elif typ == "StudentSubscribed":
                s, c = data["student"], data["course"]
                if s in enrolled[c]:
                    problems.append(f"position {position}: student {s} twice in course {c}")
                enrolled[c].add(s)
                per_student[s] = per_student.get(s, 0) + 1
                if len(enrolled[c]) > capacity[c]:
                    problems.append(f"position {position}: course {c} over capacity {capacity[c]}")
                if per_student[s] > LIMIT:
                    problems.append(f"position {position}: student {s} in {per_student[s]} courses")


if __name__ == "__main__":
    sys.exit(main())
