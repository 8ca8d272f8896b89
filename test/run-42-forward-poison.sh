#!/usr/bin/env bash
# Poison records, exactly_once: nothing after a record Kafka refuses is
# forwarded, the status shows it, and each documented way out works.
#   1. an event larger than the broker accepts (message.max.bytes lowered
#      to 100000 on the test broker): blocked; the operator raises the
#      topic's max.message.bytes and forwarding resumes by itself;
#   2. an event larger than the producer's message.max.bytes (refused by
#      librdkafka before anything is sent), in one batch after another
#      event: that one goes out once, the big one blocks; the operator
#      skips it with esrc.forwarder_skip();
#   3. an event whose topic cannot exist (its category makes an invalid
#      topic name): blocked; skipped.
# Since 0.2.0 esrc.append refuses the events of 2 and 3 while the database
# is forwarded (checked here); a log written before may hold them, so
# they are planted (fwd_plant) for the forwarder's side.
# Afterwards the consumer sees everything but the skipped events, in order.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-poison)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0
cc -O2 -o "$dir/topic_config" "$ESRC_ROOT/test/forward/topic_config.c" -lrdkafka

KAFKA_EXTRA_PROPS="message.max.bytes=100000" fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg"


fwd_sql "SELECT esrc.append('big-1', 'Small', '{\"n\": 0}')" >/dev/null
fwd_wait_forwarded 60 || die "the forwarder did not start: $(fwd_status)"

log "1. an event larger than the broker's message.max.bytes"
fwd_sql "SELECT esrc.append('big-1', 'Large', jsonb_build_object('pad', repeat('x', 200000)))" >/dev/null
p1=$(fwd_sql "SELECT max(position) FROM esrc.events")
fwd_sql "SELECT esrc.append('big-1', 'Small', '{\"n\": 2}')" >/dev/null
fwd_sql "SELECT esrc.append('other-1', 'After', '{}')" >/dev/null
fwd_wait_state blocked 60 || status=1
expect "blocked on the large event of big-1, the error says why, the detail says what to do" \
    fwd_blocked_on "$p1" big-1 "too large"
sleep 3
expect "still blocked after retries; the later events are pending" \
    test "$(fwd_sql "SELECT state || ' ' || events_pending FROM esrc.forwarder_status")" = "blocked 3"
expect "nothing after it was forwarded (big-1 v2, other-1 v0)" \
    eval 'fwd_in_kafka big-1 0 && ! fwd_in_kafka big-1 2 && ! fwd_in_kafka other-1 0'
log "   raising max.message.bytes of topic esrc.big"
"$dir/topic_config" "$FWD_BROKER" esrc.big max.message.bytes=2000000
fwd_wait_state running 60 || status=1
fwd_wait_forwarded 60 || status=1
sleep 1   # the last transaction's markers
expect "after the operator raised the limit, the event and those after it went out" \
    eval 'fwd_in_kafka big-1 1 && fwd_in_kafka big-1 2 && fwd_in_kafka other-1 0'
expect "the status no longer shows a blocked position" \
    test "$(fwd_sql "SELECT coalesce(blocked_position::text, 'none') FROM esrc.forwarder_status")" = none

log "2. an event larger than the producer's message.max.bytes"
# committed together with an event before it, so that both are in one
# batch: pre-1 goes out (once), big-1 blocks
expect "esrc.append refuses it" \
    eval "! fwd_sql \"SELECT esrc.append('big-1', 'Huge', jsonb_build_object('pad', repeat('y', 1040000)))\" 2>/dev/null"
fwd_sql "SELECT esrc.forwarder_pause()" >/dev/null
fwd_wait_state paused 30 || status=1
fwd_sql "SELECT esrc.append('pre-1', 'Before', '{}')" >/dev/null
p2=$(fwd_plant big-1 Huge "jsonb_build_object('pad', repeat('y', 1040000))")
fwd_sql "SELECT esrc.forwarder_resume()" >/dev/null
fwd_sql "SELECT esrc.append('other-1', 'After', '{}')" >/dev/null
fwd_wait_state blocked 60 || status=1
expect "blocked on the huge event" fwd_blocked_on "$p2" big-1 "too large"
expect "the event before it in the same batch went out, once" fwd_in_kafka pre-1 0
expect "forwarder_skip refuses an event that was already forwarded" \
    eval "! fwd_sql 'SELECT esrc.forwarder_skip($p1)' 2>'$dir/skip.err'"
grep -q "already been forwarded" "$dir/skip.err" || { log "FAIL - wrong message: $(cat "$dir/skip.err")"; status=1; }
fwd_sql "SELECT esrc.forwarder_skip($p2, 'larger than the producer accepts')" >/dev/null
fwd_wait_forwarded 60 || status=1
sleep 1
expect "after the skip, the events after it went out" fwd_in_kafka other-1 1
expect "the skip is recorded" \
    test "$(fwd_sql "SELECT stream || ' ' || reason FROM esrc.forwarder_skips WHERE position = $p2")" \
    = "big-1 larger than the producer accepts"

log "3. an event whose topic cannot exist"
expect "esrc.append refuses it (22023)" \
    eval "! fwd_sql \"SELECT esrc.append('bad!cat-1', 'Odd', '{}')\" 2>'$dir/cat.err'"
grep -q 'cannot be forwarded to Kafka' "$dir/cat.err" || { log "FAIL - wrong message: $(cat "$dir/cat.err")"; status=1; }
fwd_sql "SELECT esrc.forwarder_pause()" >/dev/null
fwd_wait_state paused 30 || status=1
p3=$(fwd_plant 'bad!cat-1' Odd "'{}'::jsonb")
fwd_sql "SELECT esrc.forwarder_resume()" >/dev/null
fwd_sql "SELECT esrc.append('other-1', 'After', '{}')" >/dev/null
fwd_wait_state blocked 60 || status=1
expect "blocked on the event with the invalid topic" fwd_blocked_on "$p3" 'bad!cat-1' 'esrc\.bad!cat.*not valid'
expect "the event after it waits" eval '! fwd_in_kafka other-1 2'
fwd_sql "SELECT esrc.forwarder_skip($p3)" >/dev/null
fwd_wait_forwarded 60 || status=1

fwd_dump_events "$dir/events.jsonl"
fwd_consume "$dir/records.jsonl"
fwd_check "$dir/events.jsonl" "$dir/records.jsonl" --skipped "$p2,$p3" || status=1

if [ $status -ne 0 ]; then
    grep -E "esrc forwarder|ERROR|FATAL" "$dir/pg/server.log" | tail -30 >&2
fi
exit $status
