"""Property test of the stream rules against a model (test/run-62-stream-rules-model.sh).

Random appends, random rules (truncate_before, max_count, max_age), soft and
hard deletes (each appends its esrc.deleted tombstone, the first version it
leaves visible) and clears on random streams of two categories, interleaved with
random reads of every read function (read_stream, read_stream_backward with
and without bounds and limits, read_category, read_all, esrc.poll with ack,
snapshot_at).  Each read's result is compared with what a Python model of the
rules says, computed from the stored events (esrc.events, read directly) and
the rules this driver set (not read back from esrc.stream_rules).  The clock
of max_age is the statement's: every read also returns statement_timestamp(),
which the model uses, so the comparison is exact whatever the timing.

Usage: model.py PORT [SEED] [STEPS]
"""
import datetime
import random
import sys
import time

import psycopg

port = int(sys.argv[1])
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 62
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 600
rng = random.Random(seed)
conn = psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True)
conn.execute("CREATE EXTENSION esrc")
conn.execute("SELECT esrc.create_subscription('model_sub', categories => ARRAY['ma'])")
conn.execute("SELECT esrc.create_snapshot('public.model_state', 'ma', 'esrc.merge(jsonb, esrc.event)')")

streams = [f"{c}-{i}" for c in ("ma", "mb") for i in range(6)]
rules = {}          # stream -> dict(tb, mc, age (timedelta), hard)
heads = {s: -1 for s in streams}
tombs = {}          # stream -> (version, hard) of its delete_stream tombstone
failures = []
checks = 0


def fail(what, got, want):
    failures.append(what)
    print(f"MISMATCH {what}\n  got:  {got}\n  want: {want}", file=sys.stderr)


def stored():
    """stream -> {version: (position, recorded_at)}, every stored event."""
    out = {s: {} for s in streams}
    for pos, s, v, at in conn.execute("SELECT position, stream, version, recorded_at FROM esrc.events"):
        out[s][v] = (pos, at)
    return out


def first_visible(s, evs, ts):
    r = rules.get(s)
    if r is None:
        return 0
    lo = r["tb"] if r["tb"] is not None else 0
    if not evs:
        return lo
    head = max(evs)
    if r["mc"] is not None:
        lo = max(lo, head - r["mc"] + 1)
    if r["age"] is not None:
        cutoff = ts - r["age"]
        for v in range(head, -1, -1):
            if v < lo:
                break
            if evs[v][1] < cutoff:
                lo = v + 1
                break
    return lo


def visible_global(ev, ts, cat=None):
    """[(position, stream, version)] of the visible events, by position."""
    out = []
    for s in streams:
        if cat is not None and not s.startswith(cat + "-"):
            continue
        lo = first_visible(s, ev[s], ts)
        out += [(p, s, v) for v, (p, _) in ev[s].items() if v >= lo]
    return sorted(out)


def run_read(sql, args):
    row = conn.execute(
        f"SELECT statement_timestamp(), array(SELECT ARRAY[r.position::text, r.stream, r.version::text] "
        f"FROM {sql} WITH ORDINALITY AS r ORDER BY r.ordinality)", args).fetchone()
    return row[0], [(int(p), s, int(v)) for p, s, v in row[1]]


def append(s):
    n = rng.choice((1, 1, 2, 3))
    batch = "[" + ",".join('{"type": "E", "data": {"n": %d}}' % rng.randint(0, 9) for _ in range(n)) + "]"
    try:
        v = conn.execute("SELECT esrc.append_batch(%s, %s::jsonb)", (s, batch)).fetchone()[0]
        if rules.get(s, {}).get("hard"):
            fail(f"append to hard-deleted {s} succeeded", v, "55000")
        if v != heads[s] + n:
            fail(f"append version {s}", v, heads[s] + n)
        heads[s] = v
    except psycopg.Error as e:
        if not (rules.get(s, {}).get("hard") and e.sqlstate == "55000"):
            fail(f"append {s} failed", e.sqlstate, "success")


def set_rules(s):
    if heads[s] < 0:
        return
    tb = rng.choice((None, rng.randint(0, heads[s] + 2)))
    mc = rng.choice((None, None, rng.randint(1, heads[s] + 2)))
    age = rng.choice((None, None, datetime.timedelta(microseconds=rng.randint(1, 1500000)),
                      datetime.timedelta(hours=1)))
    try:
        conn.execute("SELECT esrc.set_stream_rules(%s, %s, %s, %s, 'model')", (s, tb, mc, age))
        if rules.get(s, {}).get("hard"):
            fail(f"set rules on hard-deleted {s} succeeded", None, "55000")
        if tb is None and mc is None and age is None:
            rules.pop(s, None)
        else:
            rules[s] = dict(tb=tb, mc=mc, age=age, hard=False)
    except psycopg.Error as e:
        if not (rules.get(s, {}).get("hard") and e.sqlstate == "55000"):
            fail(f"set_stream_rules {s} failed", e, "success")


def delete(s, hard):
    if heads[s] < 0:
        return
    n = conn.execute("SELECT esrc.delete_stream(%s, 'model', %s)", (s, hard)).fetchone()[0]
    r = rules.get(s)
    if r and r["hard"]:
        if n != 0:
            fail(f"delete of hard-deleted {s}", n, 0)
        return
    # the tombstone (an esrc.deleted event, data {"hard": ...}) at the next
    # version, unless the head is that same tombstone already (deleted
    # again with nothing appended); it is the first visible version
    if tombs.get(s) == (heads[s], hard):
        tomb = heads[s]
    else:
        tomb = heads[s] + 1
    if n != tomb:
        fail(f"delete_stream {s} count", n, tomb)
    row = conn.execute("SELECT type, data FROM esrc.events WHERE stream = %s AND version = %s",
                       (s, tomb)).fetchone()
    if row != ("esrc.deleted", {"hard": hard}):
        fail(f"delete_stream {s} tombstone at {tomb}", row, ("esrc.deleted", {"hard": hard}))
    heads[s] = tomb
    tombs[s] = (tomb, hard)
    r = r or dict(tb=None, mc=None, age=None, hard=False)
    r["tb"] = max(r["tb"] if r["tb"] is not None else 0, tomb)
    r["hard"] = hard
    rules[s] = r


def check_stream_reads(s):
    global checks
    frm = rng.choice((None, 0, rng.randint(0, max(heads[s] + 2, 0))))
    lim = rng.choice((None, None, rng.randint(1, 5)))
    ts, got = run_read("esrc.read_stream(%s, %s, %s)", (s, frm if frm is not None else 0, lim))
    ev = stored()[s]
    lo = max(first_visible(s, ev, ts), frm or 0)
    want = sorted(v for v in ev if v >= lo)[:lim]
    checks += 1
    if [v for _, _, v in got] != want:
        fail(f"read_stream({s}, {frm}, {lim}) rules={rules.get(s)}", [v for _, _, v in got], want)
    ts, got = run_read("esrc.read_stream_backward(%s, %s, %s)", (s, frm, lim))
    ev = stored()[s]
    lo = first_visible(s, ev, ts)
    top = frm if frm is not None else 1 << 62
    want = sorted((v for v in ev if lo <= v <= top), reverse=True)[:lim]
    checks += 1
    if [v for _, _, v in got] != want:
        fail(f"read_stream_backward({s}, {frm}, {lim}) rules={rules.get(s)}", [v for _, _, v in got], want)


def check_global_reads():
    global checks
    maxpos = conn.execute("SELECT coalesce(max(position), 0) FROM esrc.events").fetchone()[0]
    after = rng.choice((0, rng.randint(0, maxpos)))
    lim = rng.choice((1000, rng.randint(1, 20)))
    cat = rng.choice(("ma", "mb"))
    ts, got = run_read("esrc.read_category(%s, %s, %s)", (cat, after, lim))
    want = [e for e in visible_global(stored(), ts, cat) if e[0] > after][:lim]
    checks += 1
    if got != want:
        fail(f"read_category({cat}, {after}, {lim})", got, want)
    ts, got = run_read("esrc.read_all(%s, %s)", (after, lim))
    want = [e for e in visible_global(stored(), ts) if e[0] > after][:lim]
    checks += 1
    if got != want:
        fail(f"read_all({after}, {lim})", got, want)


def check_poll():
    """The events of (old checkpoint, new checkpoint] the model shows are what poll returned."""
    global checks
    cp = conn.execute("SELECT min(checkpoint) FROM esrc.subscription_checkpoints").fetchone()[0]
    lim = rng.randint(1, 30)
    ts, got = run_read("esrc.poll('model_sub', 'm', %s)", (lim,))
    conn.execute("SELECT esrc.ack('model_sub', 'm')")
    new = conn.execute("SELECT min(checkpoint) FROM esrc.subscription_checkpoints").fetchone()[0]
    want = [e for e in visible_global(stored(), ts, "ma") if cp < e[0] <= new]
    checks += 1
    if got != want:
        fail(f"poll after {cp} to {new}", got, want)


def check_snapshot_at(s):
    global checks
    if not s.startswith("ma-") or heads[s] < 0 or (rules.get(s) or {}).get("age") is not None:
        return
    v = rng.randint(-1, heads[s])
    lo = first_visible(s, stored()[s], datetime.datetime.now(datetime.timezone.utc))
    try:
        conn.execute("SELECT esrc.snapshot_at('public.model_state', %s, %s)", (s, v))
        hidden = False
    except psycopg.Error as e:
        if e.sqlstate != "22023" or "hidden" not in str(e):
            fail(f"snapshot_at({s}, {v})", e, "hidden or a state")
        hidden = True
    checks += 1
    if hidden != (0 <= v < lo):
        fail(f"snapshot_at({s}, {v}) hidden", hidden, 0 <= v < lo)


for s in streams:
    for _ in range(rng.randint(1, 4)):
        append(s)
for step in range(steps):
    s = rng.choice(streams)
    op = rng.random()
    if op < 0.30:
        append(s)
    elif op < 0.45:
        set_rules(s)
    elif op < 0.50:
        delete(s, rng.random() < 0.25)
    elif op < 0.53 and not rules.get(s, {}).get("hard"):
        if heads[s] >= 0:
            conn.execute("SELECT esrc.set_stream_rules(%s, reason => 'clear')", (s,))
            rules.pop(s, None)
    elif op < 0.75:
        check_stream_reads(s)
    elif op < 0.88:
        check_global_reads()
    elif op < 0.95:
        check_poll()
    else:
        check_snapshot_at(s)
    if step % 50 == 0:
        time.sleep(rng.choice((0, 0.05, 0.3)))   # spread recorded_at for max_age

# the rules table says what the driver set
for s in streams:
    row = conn.execute("SELECT truncate_before, max_count, max_age, hard_deleted FROM esrc.stream_rules "
                       "WHERE stream = %s", (s,)).fetchone()
    r = rules.get(s)
    want = None if r is None else (r["tb"], r["mc"], r["age"], r["hard"])
    if row != want:
        fail(f"esrc.stream_rules row of {s}", row, want)
nrules = sum(1 for r in rules.values())
print(f"seed {seed}: {steps} steps, {checks} reads compared, {nrules} streams with rules at the end, "
      f"{len(failures)} mismatches")
sys.exit(1 if failures else 0)
