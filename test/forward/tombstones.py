"""Checks of test/run-48-forward-tombstone.sh on records read from Kafka.

  tombstones.py order EVENTS RECORDS STREAM=TYPE...
      EVENTS: the committed events (fwd_dump_events), RECORDS: the
      read_committed records (test/kafka/consume.sh).  For each STREAM: its
      records, in offset order (one key, one partition), are its events in
      version order, each once, and the last is its tombstone: value null,
      ce_type TYPE, the stream's last version; nothing of it follows.  No
      record of any other stream has a null value, and every stream's
      records match its events one for one.
  tombstones.py order-first EVENTS RECORDS STREAM=TYPE...
      the same on the first delivery of each record (at_least_once).
  tombstones.py compacted RECORDS ERASED KEPT...
      after compaction: no record (data or tombstone) has the key ERASED,
      and each KEPT stream's last record is there.
Exit status 1 on the first failed check, with what was found.
"""
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def fail(msg):
    print(f"tombstones.py: {msg}", file=sys.stderr)
    sys.exit(1)


def by_stream(records):
    out = {}
    for r in sorted(records, key=lambda r: (r["topic"], r["partition"], r["offset"])):
        out.setdefault(r["key"], []).append(r)
    return out


def order(events_path, records_path, specs, first_only=False):
    events = load(events_path)
    recs = by_stream(load(records_path))
    if first_only:
        # at_least_once: a redelivery may repeat records; keep each first one
        for k, rs in recs.items():
            seen = set()
            recs[k] = [r for r in rs if not (r["headers"].get("ce_esrcversion") in seen
                                             or seen.add(r["headers"].get("ce_esrcversion")))]
    tomb = dict(s.split("=", 1) for s in specs)
    evs = {}
    for e in events:
        evs.setdefault(e["stream"], []).append(e)
    for stream, es in evs.items():
        es.sort(key=lambda e: e["version"])
        rs = recs.get(stream, [])
        got = [int(r["headers"].get("ce_esrcversion", -1)) for r in rs]
        want = [e["version"] for e in es]
        if got != want:
            fail(f"{stream}: versions in Kafka {got[-12:]} (of {len(got)}), in the log {want[-12:]} (of {len(want)})")
        for r, e in zip(rs, es):
            if r["headers"].get("ce_type") != e["type"] or r["headers"].get("ce_id") != e["id"]:
                fail(f"{stream} v{e['version']}: headers {r['headers']} for event {e}")
            if stream in tomb and e is es[-1]:
                continue
            if r["value"] is None:
                fail(f"{stream} v{e['version']}: a null value for an event that is no tombstone")
    for stream, t in tomb.items():
        rs = recs.get(stream, [])
        if not rs:
            fail(f"{stream}: no record at all")
        last = rs[-1]
        if last["value"] is not None or last["headers"].get("ce_type") != t:
            fail(f"{stream}: the last record is not a tombstone {t}: {last}")
        if sum(1 for r in rs if r["value"] is None) != 1:
            fail(f"{stream}: more than one null value")
        if int(last["headers"]["ce_esrcversion"]) != evs[stream][-1]["version"]:
            fail(f"{stream}: the tombstone is not at the stream's last version")
        if "content-type" in last["headers"]:
            fail(f"{stream}: the tombstone has a content-type")
    print(f"tombstones.py: {len(events)} events, {len(tomb)} tombstones in order")


def compacted(records_path, erased, kept):
    recs = by_stream(load(records_path))
    if erased in recs:
        fail(f"{erased}: {len(recs[erased])} records left, e.g. {recs[erased][-1]}")
    for k in kept:
        if k not in recs:
            fail(f"{k}: nothing left of a stream that was not erased")
    print(f"tombstones.py: nothing of {erased} left; {', '.join(kept)} kept "
          f"({sum(len(v) for v in recs.values())} records in all)")


if __name__ == "__main__":
    if sys.argv[1] == "order":
        order(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif sys.argv[1] == "order-first":
        order(sys.argv[2], sys.argv[3], sys.argv[4:], first_only=True)
    elif sys.argv[1] == "compacted":
        compacted(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        fail("usage: see the docstring")
