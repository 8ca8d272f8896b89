#!/usr/bin/env bash
# bench/subscribe/run.sh: subscriptions (esrc.poll / esrc.ack) next to the
# ways of following the log without them, measured in the same run on the
# same throwaway cluster.
#
#   bash bench/subscribe/run.sh          (as root or a sudoer, like test/all.sh)
#   BENCH_EVENTS=1000000 BENCH_LAT_SECONDS=30 BENCH_APPEND_SECONDS=20 \
#   BENCH_ROUNDS=5 bash bench/subscribe/run.sh
#
# 1. consumption throughput: $BENCH_EVENTS (200,000) events in 1,000
#    streams, consumed from the beginning and acked in batches of 100 (one
#    transaction per batch: poll, ack, commit) by 1 member and by 4
#    members of a subscription with 16 partitions, from the first poll to
#    the last commit; as a ratio to a raw scan of the same events with
#    esrc.read_all(after, 100) by the same client.  Then 1 member again with
#    synchronous_commit = off in its session (the commit of each batch no
#    longer waits for the WAL flush, which is most of a batch's cost here).
#    Then $BENCH_ROUNDS (3) rounds of: the scan, 1 member plain (BEGIN,
#    poll, ack, COMMIT: four round trips a batch) and 1 member polling with
#    ack (one autocommit esrc.poll(..., ack => the last position of the
#    batch before) per batch: one round trip, at-least-once), and the
#    same with synchronous_commit = off in its session (safe for
#    at-least-once: a crash loses acknowledgements, whose batches come
#    again), each member as a ratio to the scan of its round; the best of
#    each, the median and the per-round ratios.
# 2. latency, commit -> the reader has the rows, at $BENCH_RATE (1,000)
#    appends/s (one event per transaction, Poisson arrivals) from 8 pgbench
#    writers for $BENCH_LAT_SECONDS (10) s per reader, one reader at a time:
#      poll     esrc.poll(sub, m, 1000, '1s') + esrc.ack
#      read_all esrc.read_all(after, 1000) every 100 ms (at once again
#               after a full batch) + UPDATE of a checkpoint row
#      notify   LISTEN; the writers NOTIFY in the appending statement
#               (pg_notify next to esrc.append); at each notification
#               read_all until drained + the same UPDATE
#    Each turn of each reader is one transaction that also stores its
#    position, so that the three do the same work per batch.  An event's
#    latency starts at its commit timestamp (track_commit_timestamp,
#    pg_xact_commit_timestamp(xmin)) and ends when the reader's fetch
#    returned (the client's clock: the same machine clock); the first 2 s
#    of each phase are warm-up.  p50/p90/p99/max, and the writers' mean
#    statement latency in each phase (NOTIFY serializes commits).
# 3. append throughput: pgbench, 8 clients, esrc.append of one event per
#    transaction, $BENCH_APPEND_SECONDS (8) s, with 4 subscribers (4
#    subscriptions, one member each, polling with a 5 s wait and acking)
#    or none:
#      none       no subscription
#      waiting    on a category nobody appends to: never woken
#      woken      on the load's category with a type filter that drops
#                 every event: woken by the commits, nothing to return
#                 (each such poll commits its checkpoint past the scan)
#      consuming  on the load's category: every event, as it comes
#    $BENCH_ROUNDS (3) rounds alternate the variants, the best round of
#    each counts; ratios to "none" of the bests, the median of the
#    per-round ratios and the per-round ratios.  Woken and consuming
#    subscribers share the machine's cores with the writers: their ratio
#    includes their own work, not only the cost of the wake-up on commit.
#
# Clients: pgbench writes (its -R gives an exact Poisson rate; the house's
# append benchmarks use it); the readers are Python/psycopg processes
# (bench/subscribe/client.py): what applications use, the time taken where
# the rows arrive, and a client overhead of some tens of microseconds per
# batch that is the same for every reader and every consumer compared.
# Nothing is asserted; prints "name value" lines.
set -euo pipefail
ESRC_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ESRC_ROOT/test/lib.sh"

EVENTS=${BENCH_EVENTS:-200000}
RATE=${BENCH_RATE:-1000}
LAT_SECS=${BENCH_LAT_SECONDS:-10}
APP_SECS=${BENCH_APPEND_SECONDS:-8}
ROUNDS=${BENCH_ROUNDS:-3}
CLIENT="$ESRC_ROOT/bench/subscribe/client.py"

ensure_deps
ensure_python_psycopg
[ -n "${BENCH_NO_BUILD:-}" ] || build_install
dir=$(test_tmpdir bench-subscribe)
port=$(free_port)
cleanup() {
    local p
    # the readers and subscribers still running (background jobs of this shell)
    for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "max_connections = 60" "shared_buffers = 256MB" "max_wal_size = 4GB" \
    "track_commit_timestamp = on"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
DSN="host=127.0.0.1 port=$port user=postgres dbname=postgres"
sql() { psql -qAtX -v ON_ERROR_STOP=1 -c "$1"; }
sql "CREATE EXTENSION esrc" >/dev/null
sql "CREATE TABLE bench_checkpoint (position bigint); INSERT INTO bench_checkpoint VALUES (0)" >/dev/null
ratio() { python3 -c "print('%.2f' % ($1 / $2))"; }
median() { python3 -c "import statistics, sys; print('%.2f' % statistics.median(map(float, sys.argv[1:])))" $1; }
echo "bench/subscribe: postgres $("$PG_BINDIR/postgres" --version | cut -d' ' -f3), $(nproc) cores," \
     "readers in python $(python3 -c 'import sys; print(sys.version.split()[0])') / psycopg $(python3 -c 'import psycopg; print(psycopg.__version__)')"

# --- 1. consumption throughput ----------------------------------------
log "filling the log with $EVENTS events in 1000 streams"
for ((r = 0; r < EVENTS / 10000; r++)); do
    # 1000 streams x 10 events per statement: streams interleave in the log
    sql "SELECT count(esrc.append_batch('thru-' || s,
             (SELECT jsonb_agg(jsonb_build_object('type', 'Tick',
                      'data', jsonb_build_object('i', $r * 10 + i, 'pad', repeat('x', 70))))
              FROM generate_series(1, 10) i)))
         FROM generate_series(1, 1000) s" >/dev/null
done
EVENTS=$(sql "SELECT count(*) FROM esrc.events")
sql "VACUUM (ANALYZE) esrc.events" >/dev/null
sql "CHECKPOINT" >/dev/null
python3 "$CLIENT" scan "$DSN" "$EVENTS" >/dev/null   # warm the cache
scan=$(python3 "$CLIENT" scan "$DSN" "$EVENTS")
echo "scan_read_all_batch100 $scan"
scan_eps=${scan##* }
for m in 1 4; do
    sql "SELECT esrc.create_subscription('thru$m', partitions => 16)" >/dev/null
    out=$(python3 "$CLIENT" consume "$DSN" "$EVENTS" "thru$m" "$m")
    echo "consume_${m}_member$([ "$m" = 1 ] || echo s)_16_partitions $out  $(ratio "${out##* }" "$scan_eps")x of the scan"
    behind=$(sql "SELECT sum(events_behind) FROM esrc.subscription_status WHERE subscription = 'thru$m'")
    [ "$behind" = 0 ] || echo "  (subscription thru$m still $behind events behind)"
    sql "CHECKPOINT" >/dev/null
done
# The same member with synchronous_commit = off in its session: each batch's
# commit (results and ack together) no longer waits for the WAL flush.  A
# crash can then lose the last batches, results and checkpoints together,
# so they are processed again: effects stay exactly once
# (docs/subscriptions.md, "Throughput").
# Without the client: the same work in the server, one batch of 100 per
# turn of a PL/pgSQL loop (read_all from the last position; poll + ack +
# COMMIT, with synchronous_commit off in that session), so no round trips
# and no WAL flush waits: what the engine itself costs per event.
sql "SELECT esrc.create_subscription('thru1server', partitions => 16)" >/dev/null
t0=$(date +%s%N)
sql "DO \$\$ DECLARE a bigint := 0; n int; BEGIN LOOP
       SELECT max(position), count(*) INTO a, n FROM esrc.read_all(a, 100) WHERE true;
       EXIT WHEN n = 0; END LOOP; END \$\$" >/dev/null
t1=$(date +%s%N)
psql -qAtX -v ON_ERROR_STOP=1 -c "SET synchronous_commit = off" -c "DO \$\$ DECLARE n int; BEGIN LOOP
       SELECT count(*) INTO n FROM esrc.poll('thru1server', 'm', 100);
       EXIT WHEN n = 0; PERFORM esrc.ack('thru1server', 'm'); COMMIT; END LOOP; END \$\$" >/dev/null
t2=$(date +%s%N)
server_scan=$(python3 -c "print('%.0f' % ($EVENTS / (($t1 - $t0) / 1e9)))")
server_sub=$(python3 -c "print('%.0f' % ($EVENTS / (($t2 - $t1) / 1e9)))")
echo "server_side_read_all_batch100 events_per_s $server_scan"
echo "server_side_poll_ack_commit_batch100 events_per_s $server_sub  $(ratio "$server_sub" "$server_scan")x of the server-side scan"
# The same member sending BEGIN with its poll and its ack with COMMIT
# (libpq pipeline mode): two round trips per batch instead of four.
sql "SELECT esrc.create_subscription('thru1pipe', partitions => 16)" >/dev/null
out=$(python3 "$CLIENT" consume "$DSN" "$EVENTS" thru1pipe 1 pipelined)
echo "consume_1_member_16_partitions_pipelined $out  $(ratio "${out##* }" "$scan_eps")x of the scan"
sql "CHECKPOINT" >/dev/null
sql "SELECT esrc.create_subscription('thru1async', partitions => 16)" >/dev/null
out=$(python3 "$CLIENT" consume "$DSN options=-csynchronous_commit=off" "$EVENTS" thru1async 1)
echo "consume_1_member_16_partitions_async_commit $out  $(ratio "${out##* }" "$scan_eps")x of the scan"
sql "CHECKPOINT" >/dev/null

# One member, one round trip a batch (poll with ack) against the plain loop
# and the scan, round by round: on a shared machine the three are measured
# close together in time, and the ranges show the noise.
declare -A rbest rlist
for r in $(seq 1 "$ROUNDS"); do
    s=$(python3 "$CLIENT" scan "$DSN" "$EVENTS"); s=${s##* }
    line="  round $r  scan $s events/s"
    for style in plain poll_ack poll_ack_async; do
        sql "SELECT esrc.create_subscription('thru1$style$r', partitions => 16)" >/dev/null
        if [ "$style" = poll_ack_async ]; then
            out=$(python3 "$CLIENT" consume "$DSN options=-csynchronous_commit=off" "$EVENTS" "thru1$style$r" 1 poll_ack)
        else
            out=$(python3 "$CLIENT" consume "$DSN" "$EVENTS" "thru1$style$r" 1 "$style")
        fi
        behind=$(sql "SELECT sum(events_behind) FROM esrc.subscription_status WHERE subscription = 'thru1$style$r'")
        [ "$behind" = 0 ] || echo "  (subscription thru1$style$r still $behind events behind)"
        x=$(ratio "${out##* }" "$s")
        line="$line, $style ${out##* } ($x x)"
        rlist[$style]="${rlist[$style]:-} $x"
        if [ -z "${rbest[$style]:-}" ] || python3 -c "import sys; sys.exit(not $x > ${rbest[$style]})"; then rbest[$style]=$x; fi
        sql "SELECT esrc.drop_subscription('thru1$style$r')" >/dev/null
        sql "CHECKPOINT" >/dev/null
    done
    echo "$line"
done
for style in plain poll_ack poll_ack_async; do
    echo "consume_1_member_16_partitions_rounds_$style best ${rbest[$style]}x  median $(median "${rlist[$style]}")x of the scan of the same round  (${rlist[$style]} )"
done

# --- 2. latency --------------------------------------------------------
echo "SELECT esrc.append('lat-' || (random() * 100)::int, 'Tick', '{\"x\": 1}');" >"$dir/plain.sql"
echo "SELECT esrc.append('lat-' || (random() * 100)::int, 'Tick', '{\"x\": 1}'), pg_notify('esrc_bench', '');" >"$dir/notify.sql"
sql "SELECT esrc.create_subscription('lat', ARRAY['lat'], 1, 'end')" >/dev/null
latency() { # NAME WRITER-SCRIPT CLIENT-ARGS...
    local name=$1 script=$2 lo hi wall0 c
    shift 2
    lo=$(sql "SELECT coalesce(max(position), 0) FROM esrc.events")
    python3 "$CLIENT" "$1" "$DSN" "$dir/lat.$name" $((LAT_SECS + 3)) "${@:2}" &
    c=$!
    sleep 1
    wall0=$(date +%s%6N)
    "$PG_BINDIR/pgbench" -n -c 8 -j 2 -R "$RATE" -T "$LAT_SECS" -f "$dir/$script" >"$dir/pgbench.$name" 2>&1
    wait "$c"
    hi=$(sql "SELECT max(position) FROM esrc.events")
    psql -qAtX -v ON_ERROR_STOP=1 <<EOF
CREATE TEMP TABLE r (position bigint, received bigint);
\copy r FROM '$dir/lat.$name' WITH (DELIMITER ' ')
CREATE TEMP TABLE ev AS
  SELECT e.position, (extract(epoch FROM pg_xact_commit_timestamp(e.xmin)) * 1000000)::bigint AS commit_us,
         r.received
  FROM esrc.events e
  LEFT JOIN (SELECT position, min(received) AS received FROM r GROUP BY 1) r USING (position)
  WHERE e.position > $lo AND e.position <= $hi;
DELETE FROM ev WHERE commit_us < $wall0 + 2000000;
SELECT format('latency_%s n=%s missed=%s p50=%sms p90=%sms p99=%sms max=%sms  writers: %s, mean latency %s ms',
              '$name', count(received), count(*) - count(received),
              round(percentile_disc(0.5) WITHIN GROUP (ORDER BY received - commit_us) / 1000.0, 2),
              round(percentile_disc(0.9) WITHIN GROUP (ORDER BY received - commit_us) / 1000.0, 2),
              round(percentile_disc(0.99) WITHIN GROUP (ORDER BY received - commit_us) / 1000.0, 2),
              round(max(received - commit_us) / 1000.0, 2),
              '$(awk '/^tps = /{printf "%.0f tps", $3}' "$dir/pgbench.$name")',
              '$(awk '/^latency average/{print $4}' "$dir/pgbench.$name")')
FROM ev;
EOF
}
log "latency: $RATE appends/s from 8 writers, ${LAT_SECS}s per reader"
latency poll plain.sql poll lat bench
latency read_all_100ms plain.sql readall 100
latency notify notify.sql notify esrc_bench

# --- 3. append throughput with subscribers -----------------------------
echo "\\set s random(1, 10000)
SELECT esrc.append('load-' || :s, 'Tick', '{\"n\": 1, \"pad\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}');" >"$dir/load.sql"
declare -A best this ratios
append_run() { # VARIANT
    local v=$1 i subs=() tps
    case $v in
    waiting)   for i in 1 2 3 4; do sql "SELECT esrc.create_subscription('idle$i', ARRAY['idle'], 1, 'end')" >/dev/null; subs+=("idle$i"); done ;;
    woken)     for i in 1 2 3 4; do sql "SELECT esrc.create_subscription('drop$i', ARRAY['load'], 1, 'end', ARRAY['Never'])" >/dev/null; subs+=("drop$i"); done ;;
    consuming) for i in 1 2 3 4; do sql "SELECT esrc.create_subscription('load$i', ARRAY['load'], 1, 'end')" >/dev/null; subs+=("load$i"); done ;;
    esac
    local pids=()
    for s in "${subs[@]}"; do
        python3 "$CLIENT" follow "$DSN" "$s" m &
        pids+=($!)
    done
    [ ${#pids[@]} -eq 0 ] || sleep 1
    tps=$("$PG_BINDIR/pgbench" -n -c 8 -j 2 -T "$APP_SECS" -M prepared -f "$dir/load.sql" 2>&1 |
        awk '/^tps = /{printf "%.0f", $3}')
    for i in "${pids[@]}"; do kill "$i" 2>/dev/null || true; wait "$i" 2>/dev/null || true; done
    for s in "${subs[@]}"; do sql "SELECT esrc.drop_subscription('$s')" >/dev/null; done
    printf '  round %d  %-10s %8s appends/s\n' "$r" "$v" "$tps"
    if [ -z "${best[$v]:-}" ] || [ "$tps" -gt "${best[$v]}" ]; then best[$v]=$tps; fi
    this[$v]=$tps
    sql "CHECKPOINT" >/dev/null
}
log "append throughput: 8 clients, ${APP_SECS}s per run, $ROUNDS rounds"
for r in $(seq 1 "$ROUNDS"); do
    append_run none
    append_run waiting
    append_run woken
    append_run consuming
    for v in waiting woken consuming; do
        ratios[$v]="${ratios[$v]:-} $(ratio "${this[$v]}" "${this[none]}")"
    done
done
echo "append_tps_no_subscribers ${best[none]}"
for v in waiting woken consuming; do
    echo "append_tps_4_subscribers_$v ${best[$v]}  $(ratio "${best[$v]}" "${best[none]}")x  median $(median "${ratios[$v]}")x  (${ratios[$v]} )"
done
