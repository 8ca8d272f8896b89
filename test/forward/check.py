#!/usr/bin/env python3
"""Check what the esrc forwarder put in Kafka against the event log.

Usage: check.py EVENTS.jsonl RECORDS.jsonl [--mode exactly_once|at_least_once]
                [--skipped P,P,...] [--database NAME] [--topic-prefix esrc.]
                [--partitions N] [--upto POSITION]

EVENTS.jsonl: one committed event per line, as test/forward/common.sh
fwd_dump_events writes them (position, stream, version, type, data and
metadata as esrc's jsonb text, id, time as RFC 3339 UTC, category).
RECORDS.jsonl: test/kafka/consume.sh output (read_committed) for the data
topics.

Checks, each printed as "ok - ..." or "FAIL - ...":
  * every record is the CloudEvents 1.0 binary-mode encoding of its event:
    key = stream, value = data, headers ce_specversion, ce_id, ce_type,
    ce_source, ce_subject, ce_time, content-type, ce_esrcstream,
    ce_esrcversion, ce_esrcposition, ce_esrcmetadata (absent when null),
    ce_esrctags (a JSON array, when the event has tags),
    ce_traceparent / ce_tracestate when the metadata has a valid W3C
    traceparent (and a tracestate of at most 512 bytes), else absent,
    topic = prefix + category;
  * the set of forwarded positions equals the committed events (minus the
    skipped ones); exactly_once: each exactly once; at_least_once: at
    least once;
  * every stream lives in one partition, the one Java's default
    partitioner (murmur2) picks for its key, when --partitions is given;
  * within a partition, versions of each stream and positions come in
    increasing order (at_least_once: the first time each record appears).
Exit status 0 when all checks pass.
"""
import argparse
import json
import sys
from collections import defaultdict

failures = 0
HEX = set("0123456789abcdef")


def valid_traceparent(tp):
    """W3C trace context, as docs/forwarder.md states it (an oracle
    written apart from src/log/trace.c)."""
    if not isinstance(tp, str) or not 55 <= len(tp.encode()) <= 512:
        return False
    parts = tp.split("-")
    if len(parts) < 4:
        return False
    ver, trace, parent, flags = parts[:4]
    lens = [len(ver), len(trace), len(parent), len(flags)]
    if lens != [2, 32, 16, 2] or not all(set(x) <= HEX for x in parts[:4]):
        return False
    if ver == "ff" or set(trace) == {"0"} or set(parent) == {"0"}:
        return False
    return len(tp) == 55 or ver != "00"


def trace_headers(metadata):
    """The ce_traceparent / ce_tracestate a record must carry."""
    md = json.loads(metadata) if metadata is not None else None
    if not isinstance(md, dict) or not valid_traceparent(md.get("traceparent")):
        return {}
    h = {"ce_traceparent": md["traceparent"]}
    ts = md.get("tracestate")
    if isinstance(ts, str) and len(ts.encode()) <= 512:
        h["ce_tracestate"] = ts
    return h


def check(ok, what, detail=""):
    global failures
    if ok:
        print(f"ok - {what}")
    else:
        failures += 1
        print(f"FAIL - {what}" + (f": {detail}" if detail else ""))


def murmur2(data: bytes) -> int:
    """org.apache.kafka.common.utils.Utils.murmur2"""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = (data[i4] & 0xFF) | ((data[i4 + 1] & 0xFF) << 8) | \
            ((data[i4 + 2] & 0xFF) << 16) | ((data[i4 + 3] & 0xFF) << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    base = length & ~3
    if rest == 3:
        h ^= (data[base + 2] & 0xFF) << 16
    if rest >= 2:
        h ^= (data[base + 1] & 0xFF) << 8
    if rest >= 1:
        h ^= data[base] & 0xFF
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def java_partition(key: str, n: int) -> int:
    # Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions
    return (murmur2(key.encode()) & 0x7FFFFFFF) % n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("events")
    ap.add_argument("records")
    ap.add_argument("--mode", default="exactly_once",
                    choices=["exactly_once", "at_least_once"])
    ap.add_argument("--skipped", default="")
    ap.add_argument("--database", default="esrc_fwd")
    ap.add_argument("--topic-prefix", default="esrc.")
    ap.add_argument("--partitions", type=int, default=0)
    ap.add_argument("--upto", type=int, default=0,
                    help="only events up to this position are expected")
    a = ap.parse_args()

    events = {}
    with open(a.events) as f:
        for line in f:
            if line.strip():
                e = json.loads(line)
                events[e["position"]] = e
    skipped = {int(p) for p in a.skipped.split(",") if p}
    expected = {p for p in events if p not in skipped and (a.upto == 0 or p <= a.upto)}

    records = []
    with open(a.records) as f:
        for line in f:
            if line.strip():
                records.append(json.loads(line))
    print(f"# {len(events)} committed events ({len(expected)} expected in Kafka), "
          f"{len(records)} records, mode {a.mode}")

    # 1. the encoding of every record
    bad = []
    for r in records:
        h = r["headers"]
        try:
            pos = int(h["ce_esrcposition"])
        except (KeyError, ValueError):
            bad.append(f"record {r['topic']}/{r['partition']}@{r['offset']} has no ce_esrcposition")
            continue
        e = events.get(pos)
        if e is None:
            bad.append(f"position {pos} is not a committed event (rolled back?)")
            continue
        want = {
            "ce_specversion": "1.0",
            "ce_id": e["id"],
            "ce_type": e["type"],
            "ce_source": "/esrc/" + a.database,
            "ce_subject": e["stream"],
            "ce_time": e["time"],
            "content-type": "application/json",
            "ce_esrcstream": e["stream"],
            "ce_esrcversion": str(e["version"]),
            "ce_esrcposition": str(e["position"]),
        }
        if e["metadata"] is not None:
            want["ce_esrcmetadata"] = e["metadata"]
        want.update(trace_headers(e["metadata"]))
        if e.get("tags"):
            want["ce_esrctags"] = json.dumps(e["tags"], ensure_ascii=False, separators=(",", ":"))
        if h != want:
            diff = {k: (h.get(k), want.get(k)) for k in set(h) | set(want) if h.get(k) != want.get(k)}
            bad.append(f"position {pos}: headers differ (got, want): {diff}")
        if r["key"] != e["stream"]:
            bad.append(f"position {pos}: key {r['key']!r} != stream {e['stream']!r}")
        if r["value"] != e["data"]:
            bad.append(f"position {pos}: value {r['value']!r} != data {e['data']!r}")
        elif json.loads(r["value"]) != json.loads(e["data"]):
            bad.append(f"position {pos}: value is not the data as JSON")
        if r["topic"] != a.topic_prefix + e["category"]:
            bad.append(f"position {pos}: topic {r['topic']} != {a.topic_prefix + e['category']}")
    check(not bad, "every record is its event in CloudEvents binary mode (key, value, headers, topic)",
          "; ".join(bad[:5]) + (f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""))

    # 2. the set, duplicates
    count = defaultdict(int)
    for r in records:
        if "ce_esrcposition" in r["headers"]:
            count[int(r["headers"]["ce_esrcposition"])] += 1
    got = set(count)
    missing = sorted(expected - got)
    extra = sorted(got - expected)
    check(not missing, "every committed event is in Kafka",
          f"{len(missing)} missing, first {missing[:10]}")
    check(not extra, "nothing else is in Kafka (no rolled-back or skipped event)",
          f"{len(extra)} unexpected, first {extra[:10]}")
    dups = sorted(p for p, c in count.items() if c > 1)
    if a.mode == "exactly_once":
        check(not dups, "no event is in Kafka twice",
              f"{len(dups)} duplicated, first {dups[:10]}")
    else:
        print(f"# at_least_once: {len(dups)} events delivered more than once")

    # 3. one partition per stream, the Java client's
    where = defaultdict(set)
    for r in records:
        where[r["key"]].add((r["topic"], r["partition"]))
    split = [s for s, w in where.items() if len(w) > 1]
    check(not split, "each stream's records are in one topic partition",
          f"{len(split)} streams split, e.g. {split[:3]}")
    if a.partitions:
        wrong = [(s, w) for s, w in where.items()
                 if any(p != java_partition(s, a.partitions) for _, p in w)]
        check(not wrong, f"partition = Java murmur2(key) % {a.partitions} for every stream",
              f"{len(wrong)} streams elsewhere, e.g. {wrong[:3]}")

    # 4. order within each partition
    parts = defaultdict(list)
    for r in records:
        parts[(r["topic"], r["partition"])].append(r)
    disorder = []
    for tp, rs in parts.items():
        rs.sort(key=lambda r: r["offset"])
        seen = set()
        last_pos = 0
        last_ver = {}
        for r in rs:
            pos = int(r["headers"]["ce_esrcposition"])
            ver = int(r["headers"]["ce_esrcversion"])
            if pos in seen:
                if a.mode == "exactly_once":
                    disorder.append(f"{tp}: position {pos} again at offset {r['offset']}")
                continue  # a replay after a crash (at_least_once)
            seen.add(pos)
            if pos < last_pos:
                disorder.append(f"{tp}: position {pos} after {last_pos} at offset {r['offset']}")
            if ver <= last_ver.get(r["key"], -1):
                disorder.append(f"{tp}: {r['key']} version {ver} after {last_ver[r['key']]}")
            last_pos = max(last_pos, pos)
            last_ver[r["key"]] = ver
    check(not disorder, "within each partition, positions and each stream's versions increase",
          "; ".join(disorder[:5]))

    # every stream's versions are consecutive from 0 (nothing lost in between)
    by_stream = defaultdict(set)
    for p in got:
        if p in events:
            by_stream[events[p]["stream"]].add(events[p]["version"])
    want_stream = defaultdict(set)
    for p in expected:
        want_stream[events[p]["stream"]].add(events[p]["version"])
    gaps = [s for s in want_stream if by_stream[s] != want_stream[s]]
    check(not gaps, "every stream's versions are all there", f"{gaps[:5]}")

    print(f"# {failures} checks failed" if failures else "# all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
