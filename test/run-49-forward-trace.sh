#!/usr/bin/env bash
# W3C trace context end to end (docs/forwarder.md, "Trace context"): a real
# broker; events whose metadata carries a traceparent (and tracestate),
# events that get it from SET LOCAL esrc.traceparent / esrc.tracestate,
# events with a malformed traceparent in their metadata, and events with
# none.  The forwarder must go on (no poison record), the Java consumer
# example (examples/java) must read every record, and the headers
# ce_traceparent / ce_tracestate of each must be what the test wanted for
# that event (carried in the event's data as "want_tp" / "want_ts", "-" =
# no header); test/forward/check.py checks every record's full header set
# against its own reading of the W3C rules.  An event with tags gets the
# header ce_esrctags (docs/dcb.md), checked the same way.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-trace)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0

fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg"

TP1=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
TP2=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00
TP3=01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future
TS1='congo=t61rcWkgMzE,rojo=00f067aa0ba902b7'
TS2='vendor=opaque'

# want(TP, TS): the data of an event, saying which headers it must get
fwd_sql "CREATE FUNCTION want(tp text, ts text) RETURNS jsonb
         LANGUAGE sql AS \$\$ SELECT jsonb_build_object('want_tp', tp, 'want_ts', ts) \$\$" >/dev/null

psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qX -v ON_ERROR_STOP=1 >/dev/null <<SQL
-- in the metadata
SELECT esrc.append('trace-meta', 'Both', want('$TP1', '$TS1'),
                   jsonb_build_object('traceparent', '$TP1', 'tracestate', '$TS1', 'user', 'ann'));
SELECT esrc.append('trace-meta', 'ParentOnly', want('$TP2', '-'),
                   jsonb_build_object('traceparent', '$TP2'));
SELECT esrc.append('trace-meta', 'FutureVersion', want('$TP3', '-'),
                   jsonb_build_object('traceparent', '$TP3'));
-- from the settings, for one transaction
BEGIN;
SET LOCAL esrc.traceparent = '$TP1';
SET LOCAL esrc.tracestate = '$TS2';
SELECT esrc.append('trace-set', 'NullMetadata', want('$TP1', '$TS2'));
SELECT esrc.append('trace-set', 'ObjectMetadata', want('$TP1', '$TS2'), '{"user": "bob"}');
SELECT esrc.append('trace-set', 'OwnWins', want('$TP2', '-'),
                   jsonb_build_object('traceparent', '$TP2'));
SELECT esrc.append_batch('trace-set', jsonb_build_array(
    jsonb_build_object('type', 'Batch1', 'data', want('$TP1', '$TS2')),
    jsonb_build_object('type', 'Batch2', 'data', want('$TP1', '$TS2'), 'metadata', '{"k": 1}'::jsonb)));
COMMIT;
BEGIN;
SET LOCAL esrc.traceparent = '$TP2';
SELECT esrc.append('trace-set', 'NoState', want('$TP2', '-'));
COMMIT;
-- malformed in the metadata: stored, forwarded without trace headers
SELECT esrc.append('trace-bad', 'Garbage', want('-', '-'),
                   '{"traceparent": "not-a-trace", "tracestate": "a=b"}');
SELECT esrc.append('trace-bad', 'Uppercase', want('-', '-'),
                   jsonb_build_object('traceparent', upper('$TP1')));
SELECT esrc.append('trace-bad', 'ZeroTraceId', want('-', '-'),
                   '{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}');
SELECT esrc.append('trace-bad', 'VersionFF', want('-', '-'),
                   '{"traceparent": "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}');
SELECT esrc.append('trace-bad', 'V00Extra', want('-', '-'),
                   jsonb_build_object('traceparent', '$TP1-more'));
SELECT esrc.append('trace-bad', 'NotAString', want('-', '-'), '{"traceparent": 42}');
SELECT esrc.append('trace-bad', 'LongState', want('$TP1', '-'),
                   jsonb_build_object('traceparent', '$TP1', 'tracestate', repeat('x', 513)));
SELECT esrc.append('trace-bad', 'NotObject', want('-', '-'), '["$TP1"]');
-- none
SELECT esrc.append('trace-none', 'Plain', want('-', '-'));
SELECT esrc.append('trace-none', 'OtherMetadata', want('-', '-'), '{"user": "cy"}');
-- tags (docs/dcb.md): the header ce_esrctags, a JSON array
SELECT esrc.append('trace-none', 'Tagged', want('-', '-'), tags => ARRAY['course:c1', 'quote"back\\slash', 'é']);
SQL

expect "a malformed traceparent setting is refused with 22023" \
    bash -c "psql -h 127.0.0.1 -p $FWD_PORT -U postgres -d $FWD_DB -qAtX \
        -c \"SET esrc.traceparent = 'nonsense'\" 2>&1 | grep -q 'invalid value for parameter \"esrc.traceparent\"'"

n=$(fwd_sql "SELECT count(*) FROM esrc.events")
fwd_wait_forwarded 60 || status=1
expect "no poison record: the forwarder is running, nothing blocked" \
    test "$(fwd_sql "SELECT state || ' ' || coalesce(blocked_position::text, '-') FROM esrc.forwarder_status")" = "running -"

# the Java consumer example reads every record with its headers
: >"$dir/java.out"
for topic in $(fwd_topics); do
    bash "$ESRC_ROOT/examples/java/run.sh" "$FWD_BROKER" "$topic" \
        "$(fwd_sql "SELECT count(*) FROM esrc.events WHERE 'esrc.' || category = '$topic'")" 60 \
        >>"$dir/java.out" || { status=1; log "FAIL - java consumer of $topic"; }
done
log "java consumer: $(grep -c '^partition=' "$dir/java.out") records read"
python3 - "$dir/java.out" "$n" <<'PY' || status=1
import json, re, sys
line_re = re.compile(r"^partition=\d+ offset=\d+ key=(\S+) version=(\d+) type=(\S+) id=\S+ time=\S+"
                     r" traceparent=(\S+) tracestate=(.*?) value=(.*)$")
seen, bad = 0, []
for line in open(sys.argv[1]):
    m = line_re.match(line.rstrip("\n"))
    if not m:
        continue
    seen += 1
    stream, version, typ, tp, ts, value = m.groups()
    want = json.loads(value)
    got = (tp, ts)
    exp = (want["want_tp"], want["want_ts"])
    if got != exp:
        bad.append(f"{stream}@{version} {typ}: headers (traceparent, tracestate) {got}, want {exp}")
for b in bad:
    print("  " + b, file=sys.stderr)
ok = not bad and seen == int(sys.argv[2])
print(("ok" if ok else "FAIL") + f" - java consumer: {seen} of {sys.argv[2]} records, "
      f"trace headers as wanted for each", file=sys.stderr)
sys.exit(0 if ok else 1)
PY
expect "the trace headers reached Kafka for 10 events, none for the 10 others" \
    test "$(grep -c 'traceparent=0' "$dir/java.out") $(grep -c 'traceparent=- ' "$dir/java.out")" = "10 10"

# every record, every header (the checker's own W3C reading)
fwd_dump_events "$dir/events.jsonl"
fwd_consume "$dir/records.jsonl"
fwd_check "$dir/events.jsonl" "$dir/records.jsonl" || status=1
# the checker must catch a missing trace header
jq -c 'if .headers.ce_traceparent then del(.headers.ce_traceparent) else . end' \
    "$dir/records.jsonl" >"$dir/notrace.jsonl"
expect "the checker catches records without their trace headers" \
    bash -c "! python3 '$FWD_HERE/check.py' '$dir/events.jsonl' '$dir/notrace.jsonl' >/dev/null"
expect "the tags reached Kafka as the header ce_esrctags" \
    test "$(jq -r 'select(.headers.ce_esrctags) | .headers.ce_esrctags' "$dir/records.jsonl")" = '["course:c1","quote\"back\\slash","é"]'
jq -c 'del(.headers.ce_esrctags)' "$dir/records.jsonl" >"$dir/notags.jsonl"
expect "the checker catches a record without its tags header" \
    bash -c "! python3 '$FWD_HERE/check.py' '$dir/events.jsonl' '$dir/notags.jsonl' >/dev/null"
exit $status
