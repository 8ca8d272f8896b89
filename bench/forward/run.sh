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
#      read_committed consumer, for exactly_once and at_least_once.  Every
#      event's latency starts at its PostgreSQL commit
#      (track_commit_timestamp = on, pg_xact_commit_timestamp(xmin));
#      the first 2 s of each phase are warm-up, as in the floor's figures;
#      percentiles over the events of
#        (a) commit_to_kafka_ack: until the worker had Kafka's answer for
#            the batch holding the event: commit_transaction() returned
#            (exactly_once) or every delivery report was in
#            (at_least_once); from the esrc.forwarder_log_batches lines;
#        (b) commit_to_broker_append: until the broker appended the record
#            (the topic's LogAppendTime, 1 ms resolution);
#        (c) commit_to_consumer: until the read_committed consumer had it
#            (exactly_once: after the transaction markers, plus the fetch);
#      and per batch where the time went: wake-up to the end of the
#      PostgreSQL read, read to records queued, queued to every delivery
#      report, delivery reports to commit acknowledged.  The older figures,
#      measured from ce_time (taken inside esrc.append, before its
#      commit), are printed as ce_time_*;
#   3. the baseline for (a) in exactly_once, in the same run: with the
#      forwarder paused and the same append load on PostgreSQL, a
#      sequential exactly-once forwarder with no database behind it
#      (fwdbench txnfloor: events due at the same rate, one Kafka
#      transaction per turn over what is due, two producers in turn,
#      records of the same shape, a position record) measured from an
#      event's due time to commit_transaction() returning, started by a
#      backend so that it is scheduled like the worker (see txn_floor), with
#      the same read_committed consumer on its topic; then
#      exactly_once_vs_floor, the ratios of (a)'s percentiles to it, and
#      exactly_once_from_visible_vs_floor, from each commit's visibility
#      (logged by the appending sessions with esrc.forwarder_log_batches:
#      commit_to_visible is the appender's own WAL flush, which the floor
#      has no counterpart of);
#   4. in both latency phases, the CPU time of librdkafka's main threads
#      ("rdk:main", one per producer) per Kafka transaction and as a share
#      of one core: librdkafka 2.0.2's transactional producer spins there
#      (docs/forwarder.md, "librdkafka's registration timer").
#
# The librdkafka used is the one the dynamic linker finds, for the server
# and for fwdbench alike; LD_LIBRARY_PATH=DIR runs both on another build
# (bench/forward/librdkafka-timer.sh makes one).  The bench prints which
# file each of them loaded.
#
# Usage: bash bench/forward/run.sh        (as root or a sudoer, like test/all.sh)
#        BENCH_BATCH=N: esrc.kafka_batch_size for the run (default: the
#        setting's default).
#        BENCH_THROUGHPUT=0: the latency part only; BENCH_LATENCY=0: the
#        throughput part only.  BENCH_ALO=1: also at_least_once throughput
#        with and without esrc.kafka_position_record (three rounds of each,
#        alternated, $BENCH_EVENTS events each).  Run it under flock -o /tmp/esrc-bench.lock
#        (-o: the servers it starts must not inherit the lock).
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
THROUGHPUT=${BENCH_THROUGHPUT:-1}
LATENCY=${BENCH_LATENCY:-1}

dir=$(test_tmpdir fwd-bench)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
cc -O2 -o "$dir/fwdbench" "$ESRC_ROOT/bench/forward/fwdbench.c" -lrdkafka -lm

KAFKA_EXTRA_PROPS="log.message.timestamp.type=LogAppendTime" fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg" "shared_buffers = 512MB" "max_wal_size = 4GB" "track_commit_timestamp = on"
echo "postgres $("$PG_BINDIR/postgres" --version | cut -d' ' -f3) from $PG_BINDIR, esrc.so from $("$PG_BINDIR/pg_config" --pkglibdir)"
fwd_sql "SELECT esrc.append('warmup-1', 'Started', '{}')" >/dev/null
fwd_wait_forwarded 60 || die "the forwarder did not start: $(fwd_status)"
wpid=$(fwd_worker_pid)
echo "librdkafka $(sed -n 's/.*esrc forwarder started .*(librdkafka \(.*\)).*/\1/p' "$FWD_PGDIR/server.log" | tail -1):" \
    "the worker loaded $(awk '/librdkafka/ { print $6 }' "/proc/$wpid/maps" | sort -u | paste -sd' ')," \
    "fwdbench loads $(ldd "$dir/fwdbench" | awk '/librdkafka/ { print $3 }')"
if [ -n "${BENCH_BATCH:-}" ]; then
    fwd_sql "ALTER SYSTEM SET esrc.kafka_batch_size = $BENCH_BATCH" >/dev/null
    fwd_sql "SELECT pg_reload_conf()" >/dev/null
    sleep 1
fi
batch=$(fwd_sql "SHOW esrc.kafka_batch_size")
echo "machine $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GB; kafka $KAFKA_VERSION on the same machine; kernel.sched_autogroup_enabled $(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo -)"
echo "esrc.kafka_batch_size $batch"

# --- 1. throughput -------------------------------------------------------
if [ "$THROUGHPUT" = 1 ]; then
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
# a fresh broker's JVM is several times slower for its first minute (JIT);
# warm it before anything is measured (the fill above did not touch it)
log "warming the broker (raw producer, 300,000 records)"
"$dir/fwdbench" raw "$FWD_BROKER" raw.warmup 300000 100 >/dev/null
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
fi

# --- 1b. at_least_once throughput, with and without its position record ----
# (esrc.kafka_position_record on/off), same run, same broker, alternated:
# fill $BENCH_EVENTS events with the forwarder paused, resume, time it.
fill() { # N
    local r
    for ((r = 0; r < $1 / 10000; r++)); do
        fwd_sql "SELECT count(esrc.append_batch('bench-' || s,
                     (SELECT jsonb_agg(jsonb_build_object('type', 'Tick',
                              'data', jsonb_build_object('i', $r * 10 + i, 'pad', repeat('x', 70))))
                      FROM generate_series(1, 10) i)))
                 FROM generate_series(1, 1000) s" >/dev/null
    done
}
alo_throughput() { # on|off
    local last start t0 t1
    fwd_sql "ALTER SYSTEM SET esrc.kafka_position_record = $1" >/dev/null
    fwd_sql "SELECT pg_reload_conf()" >/dev/null
    # the reload reconnects: connected again (one event through) before
    # the clock starts, so that only steady forwarding is timed
    fwd_sql "SELECT esrc.append('warmup-1', 'Started', '{}')" >/dev/null
    fwd_wait_forwarded 60 || die "not forwarding: $(fwd_status)"
    fwd_sql "SELECT esrc.forwarder_pause()" >/dev/null
    fill "$EVENTS"
    fwd_sql "CHECKPOINT" >/dev/null
    last=$(fwd_sql "SELECT max(position) FROM esrc.events")
    start=$(fwd_sql "SELECT last_position FROM esrc.forwarder_worker_status()")
    t0=$(date +%s%N)
    fwd_sql "SELECT esrc.forwarder_resume()" >/dev/null
    while [ "$(fwd_sql "SELECT last_position >= $last FROM esrc.forwarder_worker_status()")" != t ]; do
        sleep 0.05
    done
    t1=$(date +%s%N)
    echo "at_least_once_position_record_$1_events_per_s $(( (last - start) * 1000000000 / (t1 - t0) ))   ($((last - start)) events, $(( (t1 - t0) / 1000000 )) ms)"
}
if [ "${BENCH_ALO:-0}" = 1 ]; then
    fwd_sql "ALTER SYSTEM SET esrc.delivery = at_least_once" >/dev/null
    fwd_sql "SELECT pg_reload_conf()" >/dev/null
    "$dir/fwdbench" raw "$FWD_BROKER" raw.warmup 300000 100 >/dev/null
    for round in 1 2 3; do
        if [ $((round % 2)) = 1 ]; then
            alo_throughput on
            alo_throughput off
        else
            alo_throughput off
            alo_throughput on
        fi
    done
    fwd_sql "ALTER SYSTEM RESET esrc.kafka_position_record" >/dev/null
    fwd_sql "ALTER SYSTEM RESET esrc.delivery" >/dev/null
    fwd_sql "SELECT pg_reload_conf()" >/dev/null
fi

# --- 2. latency -----------------------------------------------------------
[ "$LATENCY" = 1 ] || exit 0
echo "SELECT esrc.append('lat-' || (random() * 100)::int, 'Tick', '{\"x\": 1}');" >"$dir/lat.sql"
fwd_sql "SELECT esrc.append('lat-0', 'Tick', '{}')" >/dev/null
fwd_wait_forwarded 60
fwd_sql "ALTER SYSTEM SET esrc.forwarder_log_batches = on" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null

# pct NAME EXPR FROM: a query printing "NAME n= p50= p90= p99= max=" of
# EXPR (microseconds) over the rows of FROM
pct() {
    echo "SELECT format('%s n=%s p50=%sms p90=%sms p99=%sms max=%sms', '$1', count(*),
              round(percentile_disc(0.5) WITHIN GROUP (ORDER BY $2) / 1000.0, 2),
              round(percentile_disc(0.9) WITHIN GROUP (ORDER BY $2) / 1000.0, 2),
              round(percentile_disc(0.99) WITHIN GROUP (ORDER BY $2) / 1000.0, 2),
              round(max($2) / 1000.0, 2)) FROM $3;"
}

vis_re='.*esrc: commit visible first_position=\([0-9]*\) commit_us=\([0-9]*\) visible_us=\([0-9]*\).*'
batch_re='.*esrc forwarder: batch first=\([0-9]*\) last=\([0-9]*\) events=\([0-9]*\) woke_us=\([0-9]*\) read_us=\([0-9]*\) started_us=\([0-9]*\) queued_us=\([0-9]*\) acked_us=\([0-9]*\) committed_us=\([0-9]*\).*'

# start_consumer TOPIC OUT: the measuring read_committed consumer (fwdbench
# latency) of TOPIC in the background, its output in OUT (stderr in
# OUT.err), its pid in $cons; returns once it is ready.  With
# FWDBENCH_RECORDS=FILE it writes each record's times there.
start_consumer() {
    "$dir/fwdbench" latency "$FWD_BROKER" $((RATE * SECS)) $((SECS + 15)) "$1" >"$2" 2>"$2.err" &
    cons=$!
    until grep -q ready "$2" 2>/dev/null; do
        kill -0 $cons 2>/dev/null || die "the consumer of $1 failed: $(cat "$2" "$2.err")"
        sleep 0.2
    done
}

latency() { # MODE
    local out="$dir/lat.$1.out" lo hi c cons wpid cpu0 wall0 cpu wall
    lo=$(fwd_sql "SELECT coalesce(max(position), 0) FROM esrc.events")
    FWDBENCH_RECORDS="$dir/rec.$1" start_consumer esrc.lat "$out"
    c=$cons
    wpid=$(fwd_worker_pid)
    cpu0=$(threads_cpu_ms "$wpid" rdk:main)
    mcpu0=$(task_cpu_ms "$wpid" "$wpid")
    wall0=$(date +%s%3N)
    pgbench -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -f "$dir/lat.sql" -R "$RATE" -T "$SECS" \
        -c 4 -j 2 "$FWD_DB" >"$dir/pgbench.$1.log" 2>&1
    cpu=$(( $(threads_cpu_ms "$wpid" rdk:main) - cpu0 ))
    mcpu=$(( $(task_cpu_ms "$wpid" "$wpid") - mcpu0 ))
    wall=$(( $(date +%s%3N) - wall0 ))
    wait $c || true
    fwd_wait_forwarded 60
    hi=$(fwd_sql "SELECT max(position) FROM esrc.events")
    echo "$1 appends: $(grep -E '^tps' "$dir/pgbench.$1.log" | cut -d' ' -f1-3), $(grep -E '^latency average' "$dir/pgbench.$1.log")"
    sed -n "s/$batch_re/\1,\2,\3,\4,\5,\6,\7,\8,\9/p" "$FWD_PGDIR/server.log" >"$dir/batches.$1"
    sed -n "s/$vis_re/\1,\2,\3/p" "$FWD_PGDIR/server.log" >"$dir/visible.$1"
    psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qAt -v ON_ERROR_STOP=1 <<EOF | sed "s/^/$1 /" >"$dir/lat.$1.sql.out"
CREATE TEMP TABLE b (first bigint, last bigint, events int, woke bigint, read bigint,
                     started bigint, queued bigint, acked bigint, committed bigint);
\copy b FROM '$dir/batches.$1' WITH (FORMAT csv)
DELETE FROM b WHERE first <= $lo OR last > $hi;
CREATE TEMP TABLE r (position bigint, received bigint, appended bigint);
\copy r FROM '$dir/rec.$1' WITH (DELIMITER ' ')
CREATE TEMP TABLE ev AS
  SELECT position, (extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::bigint AS commit_us
  FROM esrc.events WHERE position > $lo AND position <= $hi;
CREATE TEMP TABLE v (position bigint, commit_us bigint, visible_us bigint);
\copy v FROM '$dir/visible.$1' WITH (FORMAT csv)
SELECT format('batches_during_load n=%s', count(*)) FROM b WHERE woke >= $(( wall0 * 1000 ));
-- the first 2 s of the load are warm-up, as in the floor's figures
DELETE FROM ev WHERE commit_us < $(( (wall0 + 2000) * 1000 ));
DELETE FROM b WHERE woke < $(( (wall0 + 2000) * 1000 ));
$(pct commit_to_kafka_ack "b.committed - ev.commit_us" "ev JOIN b ON ev.position BETWEEN b.first AND b.last")
$(pct commit_to_broker_append "r.appended * 1000 - ev.commit_us" "ev JOIN r USING (position) WHERE r.appended >= 0")
$(pct commit_to_consumer "r.received - ev.commit_us" "ev JOIN r USING (position)")
$(pct commit_to_worker_wake "b.woke - ev.commit_us" "ev JOIN b ON ev.position BETWEEN b.first AND b.last")
$(pct commit_to_visible "v.visible_us - v.commit_us" "ev JOIN v USING (position)")
$(pct visible_to_kafka_ack "b.committed - v.visible_us" "ev JOIN v USING (position) JOIN b ON ev.position BETWEEN b.first AND b.last")
SELECT format('batches n=%s events_per_batch=%s', count(*), round(avg(events), 1)) FROM b;
$(pct batch_wake_to_read_done "read - woke" b)
$(pct batch_read_to_queued "queued - read" b)
$(pct batch_read_to_started "started - read" b)
$(pct batch_started_to_queued "queued - started" b)
$(pct batch_queued_to_acked "acked - queued" b)
$(pct batch_acked_to_committed "committed - acked" b)
$(pct batch_committed_to_next_woke "next_woke - committed" "(SELECT committed, lead(woke) OVER (ORDER BY first) AS next_woke FROM b) n WHERE next_woke > committed")
EOF
    grep -v " batches_during_load " "$dir/lat.$1.sql.out"
    sed -n "s/^latency_\(.*\)/$1 ce_time_\1/p" "$out"
    # CPU over the whole load, divided by the batches of the whole load
    nb=$(sed -n "s/^$1 batches_during_load n=\([0-9]*\).*/\1/p" "$dir/lat.$1.sql.out")
    rdk_main "$1" "$cpu" "$wall" "$nb"
    main_thread "$1" "$mcpu" "$wall" "$nb"
}
# floor: the Kafka transaction protocol alone, under the same append load
# The floor runs as a child of a PostgreSQL backend (COPY FROM PROGRAM), so
# that the kernel schedules it as it schedules the worker.  With autogroup
# (on by default in Debian's kernels) CPU is shared between sessions first,
# then between the threads of a session.  Every backend and background
# worker is a session of its own (InitPostmasterChild() calls setsid()), so
# the worker, with its librdkafka threads, is one group; a floor started by
# this script would share the script's group with pgbench's client, and
# was measured faster there than esrc for reasons of scheduling alone
# (queueing a transaction's first record took 0.03 ms against the worker's
# 0.26-0.38 ms; 0.04 ms for both with autogroup off).  The child of the
# COPY's backend, which only waits for it, is a group of its own like the
# worker.  The bench prints both groups.
txn_floor() {
    local out="$dir/floor.out" f='' copy cons
    fwd_sql "SELECT esrc.forwarder_pause()" >/dev/null
    # the same read_committed consumer as in esrc's phase, on the floor's
    # topic: the same load on the broker (its figures are not used)
    start_consumer esrc.floor "$dir/floor-consumer.out"
    fwd_sql "CREATE TEMP TABLE floor_out (line text);
             COPY floor_out FROM PROGRAM 'exec $dir/fwdbench txnfloor $FWD_BROKER esrc.floor esrc.floor.offsets $RATE $SECS >$out 2>$dir/floor.err'" \
        >/dev/null &
    copy=$!
    until [ -n "$f" ] || ! kill -0 $copy 2>/dev/null; do
        f=$(pgrep -n -f "^$dir/fwdbench txnfloor $FWD_BROKER esrc.floor " || true)
        [ -n "$f" ] || sleep 0.05
    done
    [ -n "$f" ] || die "the floor did not start: $(cat "$dir/floor.err" 2>/dev/null)"
    echo "exactly_once floor scheduled in $(cut -d' ' -f1 /proc/$f/autogroup 2>/dev/null)," \
        "the worker in $(cut -d' ' -f1 "/proc/$(fwd_worker_pid)/autogroup" 2>/dev/null)," \
        "this script in $(cut -d' ' -f1 /proc/$$/autogroup 2>/dev/null)"
    local cpu0 wall0 cpu wall mcpu mcpu0 c m
    pgbench -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -f "$dir/lat.sql" -R "$RATE" -T "$SECS" \
        -c 4 -j 2 "$FWD_DB" >"$dir/pgbench.floor.log" 2>&1 &
    local load=$!
    # its first 2 s are warm-up (not counted in its figures)
    sleep 2.1
    cpu0=$(threads_cpu_ms $f rdk:main)
    mcpu0=$(task_cpu_ms $f $f)
    wall0=$(date +%s%3N)
    cpu=$cpu0 mcpu=$mcpu0 wall=$wall0
    # until its loop ends: the process then prints and destroys its producers
    until grep -q floor_commit_to_kafka_ack "$out" 2>/dev/null || ! kill -0 $f 2>/dev/null; do
        # the last readings while the process is there (0 once it is gone)
        kill -0 $f 2>/dev/null || break
        c=$(threads_cpu_ms $f rdk:main)
        m=$(task_cpu_ms $f $f)
        kill -0 $f 2>/dev/null || break
        cpu=$c mcpu=$m wall=$(date +%s%3N)
        sleep 0.2
    done
    wait $copy || die "the floor failed: $(cat "$dir/floor.err")"
    wait $load
    kill $cons 2>/dev/null || true
    wait $cons 2>/dev/null || true
    fwd_sql "SELECT esrc.forwarder_resume()" >/dev/null
    fwd_wait_forwarded 120
    sed 's/^/exactly_once /' "$out"
    nb=$(sed -n 's/^floor_batches n=\([0-9]*\).*/\1/p' "$out")
    rdk_main "exactly_once floor" $((cpu - cpu0)) $((wall - wall0)) "$nb"
    main_thread "exactly_once floor" $((mcpu - mcpu0)) $((wall - wall0)) "$nb"
}
# stat_ticks FILE: user + system CPU ticks in a /proc/.../stat file (0 once
# the thread is gone); the fields after "(comm) ": state is 1, utime 12,
# stime 13
stat_ticks() {
    local f
    f=($(sed 's/^.*) //' "$1" 2>/dev/null)) || { echo 0; return; }
    echo $((f[11] + f[12]))
}
# threads_cpu_ms PID COMM: CPU time (user + system, ms) of PID's threads named COMM
threads_cpu_ms() {
    local t total=0
    for t in /proc/"$1"/task/*; do
        [ "$(cat "$t/comm" 2>/dev/null)" = "$2" ] || continue
        total=$((total + $(stat_ticks "$t/stat")))
    done
    echo $((total * 1000 / CLK_TCK))
}
# task_cpu_ms PID TID: CPU time (ms) of thread TID of PID: with TID = PID
# the main thread, the worker's own (its reads, queueing, delivery reports)
task_cpu_ms() {
    echo $(( $(stat_ticks "/proc/$1/task/$2/stat") * 1000 / CLK_TCK ))
}
CLK_TCK=$(getconf CLK_TCK)
# cpu_line PHASE NAME DECIMALS CPU_MS WALL_MS BATCHES: a CPU figure, as a share
# of one core and per batch
cpu_line() {
    awk -v p="$1" -v n="$2" -v d="$3" -v c="$4" -v w="$5" -v b="$6" 'BEGIN {
        printf "%s %s cpu=%dms in %dms (%.0f%% of one core), %." d "f ms per batch\n",
               p, n, c, w, (w > 0 ? 100 * c / w : 0), (b > 0 ? c / b : 0) }'
}
# rdk_main PHASE CPU_MS WALL_MS BATCHES: librdkafka's main threads' CPU
rdk_main() { cpu_line "$1" librdkafka_main_threads 2 "$2" "$3" "$4"; }
# main_thread PHASE CPU_MS WALL_MS BATCHES: the forwarding thread's CPU
# (the worker's process, or the floor's main thread)
main_thread() { cpu_line "$1" forwarding_thread 3 "$2" "$3" "$4"; }
# pget FILE NAME PCT: percentile PCT (p50, p90, p99) of line NAME in FILE, in ms
pget() { sed -n "s/.* $2 .* $3=\([0-9.]*\)ms.*/\1/p" "$1" | head -1; }

# a fresh broker's JVM is several times slower for its first minute (JIT):
# warm it with the same kind of traffic first, so that neither the
# forwarder nor the floor after it is measured on a cold broker
log "warming the broker (transactions at $RATE events/s for 20 s)"
"$dir/fwdbench" txnfloor "$FWD_BROKER" esrc.floor esrc.floor.offsets "$RATE" 20 >/dev/null
latency exactly_once | tee "$dir/eo.out"
txn_floor | tee "$dir/floor.txt"
for q in p50 p90 p99; do
    a=$(pget "$dir/eo.out" commit_to_kafka_ack $q)
    f=$(pget "$dir/floor.txt" floor_commit_to_kafka_ack $q)
    echo "exactly_once_vs_floor $q $(awk -v a="$a" -v f="$f" 'BEGIN { printf "%.2f", a / f }')   (esrc ${a} ms, floor ${f} ms)"
done
for q in p50 p90 p99; do
    a=$(pget "$dir/eo.out" visible_to_kafka_ack $q)
    f=$(pget "$dir/floor.txt" floor_commit_to_kafka_ack $q)
    echo "exactly_once_from_visible_vs_floor $q $(awk -v a="$a" -v f="$f" 'BEGIN { printf "%.2f", a / f }')   (esrc ${a} ms, floor ${f} ms)"
done
fwd_sql "ALTER SYSTEM SET esrc.delivery = at_least_once" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
sleep 3
fwd_wait_forwarded 60
latency at_least_once
