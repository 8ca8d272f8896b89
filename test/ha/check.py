#!/usr/bin/env python3
# test/ha/check.py: compares, after a failover drill, what the clients
# were told, what Kafka holds and what the consumers wrote with the new
# leader's log (test/run-69-failover.sh).
#
#   check.py EVENTS KAFKA CONSUMED PROJECTED ACKED...
#
# EVENTS: "position stream version id" per line, the new leader's log.
# KAFKA: test/kafka/consume.sh output (read_committed) of the drill's topics.
# CONSUMED, PROJECTED: "position id" per line (drill_consumed, drill_projected).
# ACKED: the writers' "stream version id" lines (test/ha/load.py).
#
# Prints one line of key=value counts:
#   events     events in the log
#   acked      acknowledged appends
#   lost       acknowledged appends the log lacks
#   kafka      records in Kafka
#   phantoms   records naming an event the log lacks, or another event at
#              that position (the log holds a different id there)
#   skipped    events of the log that Kafka lacks, at or below the highest
#              position Kafka holds of this log (a hole, not the tail)
#   missing    events of the log that Kafka lacks (holes and tail)
#   duplicates records beyond the first of one event id
#   disorder   records of a stream whose version is not above the one before
#   sub_missing, sub_dup, sub_extra    the subscription consumer's rows
#   proj_missing, proj_dup, proj_extra the projection's rows
import collections
import json
import sys

events_f, kafka_f, consumed_f, projected_f = sys.argv[1:5]
acked_fs = sys.argv[5:]

log = {}   # position -> id
ids = {}   # id -> position
for line in open(events_f):
    pos, stream, version, eid = line.split()
    log[int(pos)] = eid
    ids[eid] = int(pos)

acked = set()
for f in acked_fs:
    for line in open(f):
        parts = line.split()
        if len(parts) == 3:
            acked.add(parts[2])

records = [json.loads(line) for line in open(kafka_f) if line.strip()]
phantoms = 0
seen = collections.Counter()
last_version = {}
disorder = 0
kafka_max_good = 0
for r in records:
    h = r["headers"]
    eid, pos, ver = h.get("ce_id"), int(h.get("ce_esrcposition", "0")), int(h.get("ce_esrcversion", "-1"))
    seen[eid] += 1
    if log.get(pos) != eid:
        phantoms += 1
    else:
        kafka_max_good = max(kafka_max_good, pos)
    k = (r["topic"], r["key"])
    if k in last_version and ver <= last_version[k]:
        disorder += 1
    last_version[k] = ver
in_kafka = {eid for eid in seen}
missing = [p for p, eid in log.items() if eid not in in_kafka]
skipped = [p for p in missing if p <= kafka_max_good]


def rows(f):
    c = collections.Counter()
    for line in open(f):
        parts = line.split()
        if len(parts) == 2:
            c[parts[1]] += 1
    return c


def compare(c):
    return (sum(1 for eid in ids if eid not in c),
            sum(n - 1 for n in c.values() if n > 1),
            sum(1 for eid in c if eid not in ids))


sub = compare(rows(consumed_f))
proj = compare(rows(projected_f))
out = collections.OrderedDict([
    ("events", len(log)), ("acked", len(acked)), ("lost", len(acked - set(ids))),
    ("kafka", len(records)), ("phantoms", phantoms), ("skipped", len(skipped)),
    ("missing", len(missing)), ("duplicates", sum(n - 1 for n in seen.values())),
    ("disorder", disorder),
    ("sub_missing", sub[0]), ("sub_dup", sub[1]), ("sub_extra", sub[2]),
    ("proj_missing", proj[0]), ("proj_dup", proj[1]), ("proj_extra", proj[2]),
])
print(" ".join("%s=%d" % kv for kv in out.items()))
