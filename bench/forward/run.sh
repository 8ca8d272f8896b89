#!/usr/bin/env bash
# bench/forward/run.sh: Kafka forwarding benchmark, on one machine.
#
#   1. throughput: with the forwarder paused, fill the log with
#      $BENCH_EVENTS events (default 1,000,000; 1000 streams, ~100-byte
#      JSON values), resume it and time until the last one is forwarded;
#      next to it, in the same run and against the same broker, librdkafka's
#      raw producer sending as many records of the same shape (idempotent),
#      and the same in transactions of esrc.kafka_batch_size records;
#   2. latency: $BENCH_RATE appends/s (default 1000, one event per
#      transaction, 4 sessions) for $BENCH_SECONDS s, read by a
#      read_committed consumer; percentiles of commit-to-consumer (ce_time,
#      taken in esrc.append, to the moment the consumer has the record:
#      includes the append's commit and the consumer's fetch) and
#      commit-to-broker-append (the topic's LogAppendTime, 1 ms resolution),
#      for exactly_once and at_least_once.
#
# Usage: bash bench/forward/run.sh        (as root or a sudoer, like test/all.sh)
# Prints "name value" lines; nothing is asserted.
set -euo pipefail
ESRC_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ESRC_ROOT/test/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
source "$ESRC_ROOT/test/kafka/env.sh"
fwd_under_reaper "$@"

EVENTS=${BENCH_EVENTS:-1000000}
RATE=${BENCH_RATE:-1000}
SECS=${BENCH_SECONDS:-20}

dir=$(test_tmpdir fwd-bench)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
cc -O2 -o "$dir/fwdbench" "$ESRC_ROOT/bench/forward/fwdbench.c" -lrdkafka

KAFKA_EXTRA_PROPS="log.message.timestamp.type=LogAppendTime" fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg" "shared_buffers = 512MB" "max_wal_size = 4GB"
fwd_sql "SELECT esrc.append('warmup-1', 'Started', '{}')" >/dev/null
fwd_wait_forwarded 60 || die "the forwarder did not start: $(fwd_status)"
batch=$(fwd_sql "SHOW esrc.kafka_batch_size")
echo "machine $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GB; kafka $KAFKA_VERSION on the same machine"
echo "esrc.kafka_batch_size $batch"

# --- 1. throughput -------------------------------------------------------
log "filling the log with $EVENTS events (forwarder paused)"
fwd_sql "SELECT esrc.forwarder_pause()" >/dev/null
rounds=$((EVENTS / 10000))
t0=$SECONDS
for ((r = 0; r < rounds; r++)); do
    # 1000 streams x 10 events per statement: streams interleave in the log
    fwd_sql "SELECT count(esrc.append_batch('bench-' || s,
                 (SELECT jsonb_agg(jsonb_build_object('type', 'Tick',
                          'data', jsonb_build_object('i', $r * 10 + i, 'pad', repeat('x', 70))))
                  FROM generate_series(1, 10) i)))
             FROM generate_series(1, 1000) s" >/dev/null
done
log "filled in $((SECONDS - t0)) s"
# as a log in steady state would be: vacuumed (no autovacuum during the
# measurements), checkpointed
fwd_sql "VACUUM (ANALYZE) esrc.events" >/dev/null
fwd_sql "CHECKPOINT" >/dev/null
last=$(fwd_sql "SELECT max(position) FROM esrc.events")
start=$(fwd_sql "SELECT last_position FROM esrc.forwarder_worker_status()")
log "forwarding $((last - start)) events"
t0=$(date +%s%N)
fwd_sql "SELECT esrc.forwarder_resume()" >/dev/null
while [ "$(fwd_sql "SELECT last_position >= $last FROM esrc.forwarder_worker_status()")" != t ]; do
    sleep 0.05
done
t1=$(date +%s%N)
fwd_rate=$(( (last - start) * 1000000000 / (t1 - t0) ))
echo "forwarder_events_per_s $fwd_rate   (exactly_once, $((last - start)) events, $(( (t1 - t0) / 1000000 )) ms)"

log "raw librdkafka producer, same broker, same record shape"
raw=$("$dir/fwdbench" raw "$FWD_BROKER" raw.idempotent "$((last - start))" 100 | sed -n 's/^raw_events_per_s //p')
echo "raw_idempotent_events_per_s $raw"
rawtx=$("$dir/fwdbench" raw "$FWD_BROKER" raw.transactional "$((last - start))" 100 transactional "$batch" |
    sed -n 's/^raw_events_per_s //p')
echo "raw_transactional_events_per_s $rawtx   (transactions of $batch records)"
echo "forwarder_vs_raw $(awk -v f="$fwd_rate" -v r="$raw" 'BEGIN { printf "%.2f", f / r }')"

# --- 2. latency -----------------------------------------------------------
echo "SELECT esrc.append('lat-' || (random() * 100)::int, 'Tick', '{\"x\": 1}');" >"$dir/lat.sql"
fwd_sql "SELECT esrc.append('lat-0', 'Tick', '{}')" >/dev/null
fwd_wait_forwarded 60
latency() { # MODE
    local n=$((RATE * SECS)) out="$dir/lat.$1.out"
    "$dir/fwdbench" latency "$FWD_BROKER" "$n" $((SECS + 15)) esrc.lat >"$out" 2>"$dir/lat.$1.err" &
    local c=$!
    until grep -q ready "$out" 2>/dev/null; do sleep 0.2; done
    pgbench -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -f "$dir/lat.sql" -R "$RATE" -T "$SECS" \
        -c 4 -j 2 "$FWD_DB" >"$dir/pgbench.$1.log" 2>&1
    wait $c || true
    echo "$1 appends: $(grep -E '^tps' "$dir/pgbench.$1.log" | cut -d' ' -f1-3), $(grep -E '^latency average' "$dir/pgbench.$1.log")"
    sed -n "s/^latency_/$1 latency_/p" "$out"
}
latency exactly_once
fwd_sql "ALTER SYSTEM SET esrc.delivery = at_least_once" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
sleep 3
fwd_wait_forwarded 60
latency at_least_once
