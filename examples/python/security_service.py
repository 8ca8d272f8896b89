"""A command handler for the esrc security-service example, in Python.

It does what examples/security_service.sql does in PL/pgSQL, but from the
application side: load the snapshot and its version, decide, append with
that version as expected_version, and on SQLSTATE 40001 (someone else got
in between) roll back, load again and decide again.  The retry loop is the
ordinary one for serialization failures, so it works at every isolation
level.

    pip install "psycopg[binary]"
    python3 examples/python/security_service.py "host=... dbname=..."

Needs examples/security_service.sql loaded in the database (the snapshot
security.users), and a role in esrc_writer and esrc_reader (no superuser,
nothing else).  Run as a script it performs a small self-check: register
a user, rename it from three threads at once, and verify the result.
"""
import random
import sys
import threading
import time

import psycopg
from psycopg.types.json import Jsonb

SNAPSHOT = "security.users"


class UnknownUser(Exception):
    pass


class AlreadyRegistered(Exception):
    pass


def _stream(email):
    return "user-" + email


def _with_retries(conninfo, attempt_fn, max_attempts=20):
    """Run attempt_fn(cursor) in its own transaction until it does not fail
    with 40001; back off a little between attempts."""
    with psycopg.connect(conninfo) as conn:
        for attempt in range(1, max_attempts + 1):
            try:
                with conn.transaction():
                    with conn.cursor() as cur:
                        return attempt_fn(cur), attempt
            except psycopg.errors.SerializationFailure:
                if attempt == max_attempts:
                    raise
                time.sleep(random.uniform(0, 0.005 * attempt))


def register_user(conninfo, email, name):
    def attempt(cur):
        cur.execute("SELECT state, version FROM esrc.load(%s, %s)", (SNAPSHOT, _stream(email)))
        state, version = cur.fetchone()
        if version >= 0:
            raise AlreadyRegistered(email)
        cur.execute(
            "SELECT esrc.append(%s, 'UserRegistered', %s, expected_version => %s)",
            (_stream(email), Jsonb({"email": email, "name": name}), version),
        )
        return cur.fetchone()[0]

    return _with_retries(conninfo, attempt)


def change_user_name(conninfo, email, new_name):
    def attempt(cur):
        cur.execute("SELECT state, version FROM esrc.load(%s, %s)", (SNAPSHOT, _stream(email)))
        state, version = cur.fetchone()
        if version < 0:
            raise UnknownUser(email)
        cur.execute(
            "SELECT esrc.append(%s, 'UserNameChanged', %s, expected_version => %s)",
            (_stream(email), Jsonb({"email": email, "name": new_name}), version),
        )
        return cur.fetchone()[0]

    return _with_retries(conninfo, attempt)


def self_check(conninfo):
    email = "py-%d@example.com" % random.randrange(10**9)
    version, _ = register_user(conninfo, email, "Alex")
    assert version == 0, version

    results, errors = {}, []
    barrier = threading.Barrier(3)

    def rename(name):
        try:
            barrier.wait()
            results[name] = change_user_name(conninfo, email, name)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=rename, args=("Alex%d" % i,)) for i in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    versions = sorted(v for v, _ in results.values())
    assert versions == [1, 2, 3], versions
    retries = sum(a - 1 for _, a in results.values())

    with psycopg.connect(conninfo) as conn:
        rows = conn.execute(
            "SELECT version, type, data->>'name' FROM esrc.read_stream(%s)", (_stream(email),)
        ).fetchall()
        state, snap_version = conn.execute(
            "SELECT state, version FROM esrc.load(%s, %s)", (SNAPSHOT, _stream(email))
        ).fetchone()
    assert [r[0] for r in rows] == [0, 1, 2, 3], rows
    assert sorted(r[2] for r in rows[1:]) == ["Alex1", "Alex2", "Alex3"], rows
    assert snap_version == 3 and state["name"] == rows[-1][2], (state, snap_version)

    # a stale decision is refused with 40001 and nothing is written
    with psycopg.connect(conninfo) as conn:
        try:
            conn.execute(
                "SELECT esrc.append(%s, 'UserNameChanged', %s, expected_version => 1)",
                (_stream(email), Jsonb({"email": email, "name": "stale"})),
            )
            raise AssertionError("stale append was accepted")
        except psycopg.errors.SerializationFailure as e:
            assert e.sqlstate == "40001"
    # an unknown user is rejected
    try:
        change_user_name(conninfo, "nobody-" + email, "X")
        raise AssertionError("rename of an unknown user was accepted")
    except UnknownUser:
        pass

    print("python example: registered %s, 3 concurrent renames -> versions %s "
          "(%d retries on 40001), snapshot at version %d with name %s; "
          "stale append refused with 40001; unknown user refused"
          % (email, versions, retries, snap_version, state["name"]))


if __name__ == "__main__":
    self_check(sys.argv[1] if len(sys.argv) > 1 else "")
