#!/usr/bin/env bash
# bench/forward/rss.sh: the forwarder's memory over a long run.  A real
# broker; $BENCH_RATE appends/s (default 1000, one event per transaction,
# 4 pgbench sessions at a fixed rate) for $BENCH_MINUTES minutes (default
# 10) in exactly_once mode, then the same in at_least_once mode for a
# fifth of that time.  Every 10 s it samples the worker's VmRSS, RssAnon
# (its own heap: PostgreSQL memory contexts and librdkafka's buffers) and
# RssShmem (shared buffers it touched, which grows with what it reads and
# is not a leak) from /proc/PID/status, and the worker's memory contexts
# at the end (pg_log_backend_memory_contexts, into the server log).
# Prints the samples and, as the baseline of the same run, the figures at
# 1 minute next to those at the end, with their ratio: a worker that
# leaks grows its RssAnon with the events it forwards.
# Usage: bash bench/forward/rss.sh     (as root or a sudoer, like test/all.sh)
# Prints "name value" lines; nothing is asserted.
set -euo pipefail
ESRC_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ESRC_ROOT/test/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

RATE=${BENCH_RATE:-1000}
MINUTES=${BENCH_MINUTES:-10}
[[ "$RATE" =~ ^[1-9][0-9]*$ && "$MINUTES" =~ ^[1-9][0-9]*$ ]] \
    || die "BENCH_RATE and BENCH_MINUTES must be positive whole numbers"

dir=$(test_tmpdir fwd-rss)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
ensure_deps
build_install
fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg" "shared_buffers = 256MB"
fwd_sql "SELECT esrc.append('warmup-1', 'Started', '{}')" >/dev/null
fwd_wait_forwarded 60 || die "the forwarder did not start: $(fwd_status)"

cat >"$dir/load.sql" <<'SQL'
\set s random(1, 1000)
SELECT esrc.append('acct-' || :s, 'Deposited', jsonb_build_object('amount', :s, 'note', repeat('x', 80)), '{"by": "bench"}');
SQL

# sample PHASE SECONDS: the worker's memory every 10 s while the load runs
sample() {
    local phase=$1 secs=$2 t0=$SECONDS pid
    PGOPTIONS= "$PG_BINDIR/pgbench" -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -f "$dir/load.sql" \
        -c 4 -j 2 -R "$RATE" -T "$secs" "$FWD_DB" >"$dir/pgbench.$phase.log" 2>&1 &
    local load=$!
    while kill -0 $load 2>/dev/null; do
        sleep 10
        pid=$(fwd_worker_pid)
        [ -n "$pid" ] || { echo "sample $phase t=$((SECONDS - t0)) no worker"; continue; }
        awk -v p="$phase" -v t=$((SECONDS - t0)) -v pid="$pid" \
            '/^(VmRSS|RssAnon|RssShmem):/ { v[$1] = $2 }
             END { printf "sample %s t=%d pid=%s VmRSS_kB=%d RssAnon_kB=%d RssShmem_kB=%d\n",
                   p, t, pid, v["VmRSS:"], v["RssAnon:"], v["RssShmem:"] }' "/proc/$pid/status"
    done
    wait $load || { cat "$dir/pgbench.$phase.log"; die "pgbench failed"; }
    fwd_wait_forwarded 120 || die "not forwarded: $(fwd_status)"
}

fwd_sql "ALTER SYSTEM SET esrc.delivery = 'exactly_once'" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
sample exactly_once $((MINUTES * 60)) | tee "$dir/eo.samples"
fwd_sql "ALTER SYSTEM SET esrc.delivery = 'at_least_once'" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
sample at_least_once $((MINUTES * 12)) | tee "$dir/alo.samples"

echo "events_forwarded $(fwd_sql "SELECT delivered_total FROM esrc.forwarder_status")"
echo "worker_restarts $(cat "$dir"/*.samples | awk '{ print $4 }' | sort -u | wc -l | awk '{ print $1 - 1 }')"
awk '
    $3 ~ /^t=/ { split($3, a, "="); t = a[2] + 0
                 for (i = 5; i <= 7; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                 if (first == "" && t >= 60) { first = t; for (k in v) base[k] = v[k] }
                 last = t; for (k in v) end[k] = v[k] }
    END { for (k in base)
              printf "%s at %d s: %d, at %d s: %d, ratio %.3f\n", k, first, base[k], last, end[k],
                     base[k] ? end[k] / base[k] : 0 }' "$dir/eo.samples" | sort
pid=$(fwd_worker_pid)
fwd_sql "SELECT pg_log_backend_memory_contexts($pid)" >/dev/null
sleep 1
echo "worker memory contexts (grand total, from the server log):"
grep -E "Grand total" "$FWD_PGDIR/server.log" | tail -1 | sed 's/^.*LOG: */  /'
