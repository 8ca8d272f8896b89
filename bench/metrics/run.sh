#!/usr/bin/env bash
# bench/metrics/run.sh: what the counters of esrc.metrics cost the append
# path.  Single-event esrc.append transactions (pgbench -M prepared,
# BENCH_CLIENTS clients, BENCH_SECONDS per run) with esrc.track_metrics on
# (the default) and off (PGOPTIONS), on the same server, alternated within
# each round (on/off, then off/on) to spread machine noise.  Prints
# appends/s of every run, the ratio on/off per round, their median and the
# ratio of the best runs; the target is >= 0.98x.  Also 100-event
# esrc.append_batch the same way.  Throughput on a shared, loaded machine
# moves by more than the counters cost, so a second figure is measured
# that other processes disturb far less: the CPU time (utime + stime of
# /proc/self/stat, read by the backend itself) that one backend spends on
# BENCH_CPU_APPENDS single-event appends, each its own transaction (a DO
# loop with COMMIT, so that every commit adds its counts to shared
# memory), on and off alternated: microseconds per append and the ratio
# of appends per CPU second.  Last, where valgrind is installed, the figure
# that machine noise cannot move: the server stopped, one single-user
# backend runs BENCH_CG_APPENDS appends (each its own transaction) under
# callgrind, and the instructions spent in src/base/metrics.c (inclusive: the
# per-backend counts, the commit callback and its atomic additions) are
# printed per append and as a share of esrc.append's own instructions.
# Asserts nothing.
#
#   bash bench/metrics/run.sh
#   BENCH_SECONDS=10 BENCH_ROUNDS=5 BENCH_CLIENTS=8 bash bench/metrics/run.sh
set -euo pipefail
source "$(dirname "$0")/../../test/lib.sh"

secs=${BENCH_SECONDS:-5}
clients=${BENCH_CLIENTS:-4}
rounds=${BENCH_ROUNDS:-3}
streams=${BENCH_STREAMS:-10000}

ensure_deps
[ -n "${BENCH_NO_BUILD:-}" ] || build_install
dir=$(test_tmpdir bench-metrics)
port=$(free_port)
trap 'pg_stop "$dir" immediate; rm -rf "$dir"' EXIT
pg_start "$dir" "$port" "max_connections = 40" "shared_buffers = 512MB" "max_wal_size = 4GB"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
psql -qX -v ON_ERROR_STOP=1 -c "CREATE EXTENSION esrc"

batch_json=$(python3 -c 'import json; print(json.dumps([{"type":"Tick","data":{"n":i,"pad":"x"*40}} for i in range(100)]))')
cat >"$dir/single" <<SQL
\set s random(1, $streams)
SELECT esrc.append('bench-' || :s, 'Tick', '{"n": 1, "pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}');
SQL
cat >"$dir/batch" <<SQL
\set s random(1, $streams)
SELECT esrc.append_batch('batch-' || :s, '$batch_json');
SQL

declare -A best this ratios
run() {   # run SHAPE on|off
    local shape=$1 mode=$2 tps
    tps=$(PGOPTIONS="-c esrc.track_metrics=$mode" "$PG_BINDIR/pgbench" -n -c "$clients" -j 2 -T "$secs" \
          -M prepared -f "$dir/$shape" 2>&1 | awk '/^tps = /{printf "%d", $3}')
    printf '  round %d  %-6s counters %-3s %8s tx/s\n' "$r" "$shape" "$mode" "$tps"
    this[$shape/$mode]=$tps
    if [ -z "${best[$shape/$mode]:-}" ] || [ "$tps" -gt "${best[$shape/$mode]}" ]; then
        best[$shape/$mode]=$tps
    fi
}
median() { python3 -c "import statistics, sys; print('%.3f' % statistics.median(map(float, sys.argv[1:])))" $1; }
echo "bench/metrics: $clients clients, ${secs}s per run, $rounds rounds, $(nproc) cores"
psql -qX -c "CHECKPOINT"
for r in $(seq 1 "$rounds"); do
    for shape in single batch; do
        if [ $((r % 2)) = 1 ]; then run $shape on; run $shape off; else run $shape off; run $shape on; fi
        ratios[$shape]="${ratios[$shape]:-} $(python3 -c "print('%.3f' % (${this[$shape/on]} / ${this[$shape/off]}))")"
    done
    psql -qX -c "CHECKPOINT"
done
echo
echo "counters on / off (target >= 0.98x):"
for shape in single batch; do
    printf '  %-6s median of per-round ratios %sx (%s ), best runs %s / %s tx/s = %sx\n' "$shape" \
        "$(median "${ratios[$shape]}")" "${ratios[$shape]}" "${best[$shape/on]}" "${best[$shape/off]}" \
        "$(python3 -c "print('%.3f' % (${best[$shape/on]} / ${best[$shape/off]}))")"
done
cpu_appends=${BENCH_CPU_APPENDS:-100000}
declare -A cpu
cpu_run() {   # cpu_run on|off: backend CPU microseconds per append
    local mode=$1 ticks
    ticks=$(psql -qAtX -v ON_ERROR_STOP=1 <<SQL
SET synchronous_commit = off;
SET esrc.track_metrics = $mode;
SELECT split_part(s, ' ', 14)::bigint + split_part(s, ' ', 15)::bigint AS t0
  FROM pg_read_file('/proc/self/stat') s \\gset
DO \$\$ BEGIN FOR i IN 1..$cpu_appends LOOP
    PERFORM esrc.append('cpu-' || (i % 1000), 'Tick', '{"n": 1}'); COMMIT;
END LOOP; END \$\$;
SELECT split_part(s, ' ', 14)::bigint + split_part(s, ' ', 15)::bigint - :t0
  FROM pg_read_file('/proc/self/stat') s;
SQL
)
    python3 -c "import os; print('%.2f' % ($ticks * 1e6 / os.sysconf('SC_CLK_TCK') / $cpu_appends))"
}
echo
echo "backend CPU per single-event append ($cpu_appends appends a run, each its own transaction):"
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then order="on off"; else order="off on"; fi
    for mode in $order; do
        cpu[$mode]=$(cpu_run $mode)
        printf '  round %d  counters %-3s %8s us/append\n' "$r" "$mode" "${cpu[$mode]}"
    done
    ratios[cpu]="${ratios[cpu]:-} $(python3 -c "print('%.3f' % (${cpu[off]} / ${cpu[on]}))")"
done
printf '  appends per CPU second, on / off: median %sx (%s )\n' "$(median "${ratios[cpu]}")" "${ratios[cpu]}"
echo "counted while on (esrc.metrics):"
psql -qAtX -c "SELECT '  ' || name || ' = ' || value FROM esrc.metrics WHERE name IN ('esrc_appends_total', 'esrc_events_total')"

command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null || {
    echo "(no valgrind: instruction counts skipped)"; exit 0; }
cg_appends=${BENCH_CG_APPENDS:-4000}
pg_stop "$dir"
printf 'DO $$ BEGIN FOR i IN 1..%d LOOP PERFORM esrc.append(%s, %s, %s); COMMIT; END LOOP; END $$\n' \
    "$cg_appends" "'cg-' || (i % 100)" "'Tick'" "'{\"n\": 1}'" >"$dir/cg.sql"
chmod 644 "$dir/cg.sql"
as_test_user valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
    "$PG_BINDIR/postgres" --single -D "$dir/data" -c synchronous_commit=off postgres \
    <"$dir/cg.sql" >"$dir/cg.log" 2>&1 || { tail -5 "$dir/cg.log"; exit 0; }
callgrind_annotate --inclusive=yes --threshold=100 "$dir/cg.out" 2>/dev/null >"$dir/cg.txt"
python3 - "$dir/cg.txt" "$cg_appends" <<'PY'
import re, sys
incl = {}
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(?:\S*/)?src/(?:[a-z]+/)?(\w+\.c):(\w+) \[", line)
    if m and (m.group(2), m.group(3)) not in incl:
        incl[(m.group(2), m.group(3))] = int(m.group(1).replace(",", ""))
n = int(sys.argv[2])
# metrics.c on the append path: the per-backend counts and the commit
# callback (count_now is inside it); not the one-time init
metrics = sum(v for (f, fn), v in incl.items()
              if f == "metrics.c" and fn in ("esrc_metrics_append", "metrics_xact_callback",
                                             "metrics_subxact_callback"))
append = incl.get(("append.c", "esrc_append"), 0) - incl.get(("metrics.c", "esrc_metrics_append"), 0)
print(f"instructions (callgrind, {n} single-event appends, one backend, each its own transaction):")
print(f"  esrc.append without counting {append / n:,.0f} per append; counting (src/base/metrics.c) {metrics / n:,.0f}"
      f" per append = {100.0 * metrics / append:.3f}%: on / off {append / (append + metrics):.4f}x")
PY
