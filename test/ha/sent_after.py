#!/usr/bin/env python3
# test/ha/sent_after.py: what a leader sent to Kafka after a point, against
# its log (test/run-69-failover.sh, after esrc.forwarder_accept_divergence).
#
#   sent_after.py EVENTS BEFORE AFTER
#
# EVENTS: "position stream version id" per line, the leader's log.
# BEFORE, AFTER: test/kafka/consume.sh output before and after; the records
# of AFTER that BEFORE lacks (by topic, partition, offset) are the ones sent
# in between.  Prints "sent=N wrong=M": M of them name another event than
# the log holds at their position, or one it lacks.
import json
import sys

log = {}
for line in open(sys.argv[1]):
    pos, _stream, _version, eid = line.split()
    log[int(pos)] = eid


def records(f):
    return [json.loads(line) for line in open(f) if line.strip()]


before = {(r["topic"], r["partition"], r["offset"]) for r in records(sys.argv[2])}
sent = [r for r in records(sys.argv[3]) if (r["topic"], r["partition"], r["offset"]) not in before]
wrong = sum(1 for r in sent
            if log.get(int(r["headers"].get("ce_esrcposition", "0"))) != r["headers"].get("ce_id"))
print("sent=%d wrong=%d" % (len(sent), wrong))
