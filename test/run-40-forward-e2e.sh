#!/usr/bin/env bash
# Kafka forwarding end to end (exactly_once, the default): a real broker
# with 3 partitions per topic; 4 pgbench sessions append to 60 streams in 2
# categories, 2 events per transaction, a tenth of the transactions rolled
# back; while they run, a setting is reloaded (SIGHUP).  Then a
# read_committed consumer must find every committed event once, in order,
# encoded as specified (test/forward/check.py), and the status view must
# agree.  librdkafka's main threads run at a lower priority than the
# worker.  Last, a smoke run of bench/forward's floor tool.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-e2e)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0

KAFKA_NUM_PARTITIONS=3 fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg"

# pause/resume and idle states before anything is sent
fwd_sql "SELECT esrc.append('warmup-1', 'Started', '{}')" >/dev/null
fwd_wait_forwarded 60 || status=1
expect "status is running with the broker list and the delivery mode" \
    test "$(fwd_sql "SELECT state || ' ' || brokers || ' ' || delivery FROM esrc.forwarder_status")" \
    = "running $FWD_BROKER exactly_once"
# librdkafka's main threads (one per producer; exactly_once has two) run
# 10 nice steps below the worker (src/forward/kafka.c, kafka_new_rk); the worker
# and the other threads it created itself keep the worker's value
main_threads_niced() {
    local w n t main=0 nice
    w=$(fwd_worker_pid)
    n=$(awk '{ print $19 }' "/proc/$w/stat")
    for t in /proc/"$w"/task/*; do
        [ "$(cat "$t/comm")" = rdk:main ] || continue
        main=$((main + 1))
        nice=$(sed 's/^.*) //' "$t/stat" | awk '{ print $17 }')
        [ "$nice" = "$(( n + 10 > 19 ? 19 : n + 10 ))" ] || { log "   rdk:main $t: nice $nice, worker $n"; return 1; }
    done
    log "   worker nice $n, $main rdk:main thread(s) at $(( n + 10 > 19 ? 19 : n + 10 ))"
    [ "$main" = 2 ] && [ "$(sed 's/^.*) //' "/proc/$w/task/$w/stat" | awk '{ print $17 }')" = "$n" ]
}
expect "librdkafka's main threads run below the worker's priority" main_threads_niced
fwd_sql "SELECT esrc.forwarder_pause()" >/dev/null
fwd_sql "SELECT esrc.append('warmup-1', 'Paused', '{}')" >/dev/null
sleep 1.5
expect "paused: state paused, the new event stays pending" \
    test "$(fwd_sql "SELECT state || ' ' || paused || ' ' || events_pending FROM esrc.forwarder_status")" = "paused true 1"
fwd_sql "SELECT esrc.forwarder_resume()" >/dev/null
fwd_wait_forwarded 30 || status=1
expect "resumed: nothing pending" \
    test "$(fwd_sql "SELECT state || ' ' || events_pending FROM esrc.forwarder_status")" = "running 0"

log "appending: 4 sessions x 1500 transactions"
PGOPTIONS= pgbench -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -f "$FWD_HERE/load.pgbench" -D streams=30 \
    -c 4 -j 2 -t 1500 "$FWD_DB" \
    >"$dir/pgbench.log" 2>&1 &
load=$!
sleep 2
# a reload in the middle (batch size): the worker must carry on
echo "esrc.kafka_batch_size = 7" | as_test_user tee -a "$dir/pg/data/postgresql.conf" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
wait $load || { cat "$dir/pgbench.log"; die "pgbench failed"; }
grep -E "^(number of transactions actually processed|tps)" "$dir/pgbench.log" | sed 's/^/  /' >&2

fwd_wait_forwarded 120 || status=1
committed=$(fwd_sql "SELECT count(*) FROM esrc.events")
rolled_back_gap=$(fwd_sql "SELECT (SELECT last_value FROM esrc.position_seq) - count(*) FROM esrc.events")
log "$committed events committed; $rolled_back_gap positions were taken by rolled-back appends"
expect "some transactions were rolled back" test "$rolled_back_gap" -gt 0

fwd_dump_events "$dir/events.jsonl"
fwd_consume "$dir/records.jsonl"
fwd_check "$dir/events.jsonl" "$dir/records.jsonl" --partitions 3 || status=1

# the checker itself must catch a duplicate, a loss, a wrong header
(cat "$dir/records.jsonl"; head -1 "$dir/records.jsonl") >"$dir/dup.jsonl"
sed '2d' "$dir/records.jsonl" >"$dir/lost.jsonl"
sed '3s/"ce_type":"[A-Za-z]*"/"ce_type":"Other"/' "$dir/records.jsonl" >"$dir/header.jsonl"
for bad in dup lost header; do
    expect "check.py fails on a $bad record" \
        eval "! fwd_check '$dir/events.jsonl' '$dir/$bad.jsonl' >'$dir/$bad.out'"
done

expect "delivered_total counts every record sent" \
    test "$(fwd_sql "SELECT delivered_total FROM esrc.forwarder_status")" = "$committed"
last_error=$(fwd_sql "SELECT coalesce(last_error || ' (at ' || last_error_at || ')', 'none') FROM esrc.forwarder_status")
expect "no error was reported (last_error: $last_error)" test "$last_error" = none
expect "the position mirror caught up" \
    test "$(fwd_sql "SELECT position FROM esrc.forwarder_state")" = \
    "$(fwd_sql "SELECT max(position) FROM esrc.events")"
# the committed position in the compacted offsets topic
"$FWD_KAFKA/consume.sh" "$FWD_BROKER" esrc.offsets >"$dir/offsets.jsonl"
expect "the offsets topic holds the last position under esrc-<log_id>" \
    test "$(jq -r --arg k "esrc-$(fwd_sql "SELECT log_id FROM esrc.forwarder_state")" \
            'select(.key == $k) | .value | fromjson | .position' "$dir/offsets.jsonl" | tail -1)" \
    = "$(fwd_sql "SELECT max(position) FROM esrc.events")"

# bench/forward's tools build cleanly and the floor measurement (fwdbench
# txnfloor, the baseline of the exactly_once latency) works against a real
# broker: a short run reports percentiles and Kafka holds all it sent
cc -O2 -Wall -Wextra -Werror -o "$dir/fwdbench" "$ESRC_ROOT/bench/forward/fwdbench.c" -lrdkafka -lm
"$dir/fwdbench" txnfloor "$FWD_BROKER" bench.floor bench.floor.offsets 200 4 >"$dir/floor.out"
expect "fwdbench txnfloor builds with -Werror and reports its percentiles" \
    grep -q "^floor_commit_to_kafka_ack n=[1-9][0-9]* p50=" "$dir/floor.out"
"$FWD_KAFKA/consume.sh" "$FWD_BROKER" bench.floor >"$dir/floor.jsonl"
expect "and Kafka has every record it committed" \
    test "$(jq -s 'map(.headers.ce_esrcposition) | unique | length' "$dir/floor.jsonl")" = 800

if [ $status -ne 0 ]; then
    grep -E "esrc forwarder|ERROR|FATAL" "$dir/pg/server.log" | tail -30 >&2
fi
exit $status
