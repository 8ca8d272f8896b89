#!/usr/bin/env bash
# bench/standby/run.sh: reads on a hot standby (issue 27, item 3).  A
# primary and a streaming hot standby (pg_basebackup -R) on loopback, both
# with esrc preloaded.  Prints:
#   1. horizon lag at BENCH_RATE (default 1,000) single-event appends/s
#      (pgbench -R, BENCH_SECONDS): a sampler on each server records every
#      ~1 ms (clock_timestamp(), esrc.safe_position(), max(position)); for
#      each position h, the standby's horizon lag is the first time the
#      standby's safe_position() reached h minus the first time the
#      primary's did, and its replay lag the first time the standby saw an
#      event at or above h minus the first time the primary did; p50/p99
#      of both, and p99(horizon lag) - p99(replay lag) (target <= 10 ms);
#   2. what the publishing adds: WAL bytes and transactions per second, idle
#      (BENCH_IDLE seconds, no appends) and at BENCH_RATE appends/s, each
#      with esrc.standby_horizon_interval at its default and at -1 (off),
#      and the rows written (xids of the publisher);
#   3. esrc.read_all(after, 1000) throughput (pgbench, BENCH_CLIENTS,
#      BENCH_READ_SECONDS per run, random after over BENCH_EVENTS events) on
#      the standby and on the primary, alternated over BENCH_ROUNDS rounds:
#      the ratio standby/primary per round and of the medians (target >= 0.9).
# Asserts nothing.  Run it under flock -o /tmp/esrc-bench.lock on a shared
# machine.
#
#   bash bench/standby/run.sh
set -euo pipefail
source "$(dirname "$0")/../../test/lib.sh"

secs=${BENCH_SECONDS:-10}
rate=${BENCH_RATE:-1000}
idle=${BENCH_IDLE:-5}
clients=${BENCH_CLIENTS:-2}
rsecs=${BENCH_READ_SECONDS:-5}
rounds=${BENCH_ROUNDS:-3}
events=${BENCH_EVENTS:-100000}
parts=${BENCH_PARTS:-123}
interval=${BENCH_INTERVAL:-}

ensure_deps
[ -n "${BENCH_NO_BUILD:-}" ] || build_install
dir=$(test_tmpdir bench-standby)
pport=$(free_port)
sport=$(free_port)
cleanup() {
    pg_stop "$dir/s" immediate
    pg_stop "$dir" immediate
    [ -n "${BENCH_KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$pport" "max_connections = 40" "shared_buffers = 256MB" "max_wal_size = 4GB" \
    ${interval:+"esrc.standby_horizon_interval = '$interval'"}
export PGHOST=127.0.0.1 PGUSER=postgres PGDATABASE=postgres
p() { psql -qAtX -v ON_ERROR_STOP=1 -p "$pport" "$@"; }
s() { psql -qAtX -v ON_ERROR_STOP=1 -p "$sport" "$@"; }
p <<'SQL'
CREATE EXTENSION esrc;
-- every ~1 ms: when, the horizon, the highest position visible
CREATE FUNCTION bench_sample(seconds float8)
RETURNS TABLE (t float8, horizon bigint, maxpos bigint) LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + make_interval(secs => seconds);
BEGIN
    WHILE clock_timestamp() < deadline LOOP
        t := extract(epoch FROM clock_timestamp());
        horizon := esrc.safe_position();
        maxpos := (SELECT max(position) FROM esrc.events);
        RETURN NEXT;
        PERFORM pg_sleep(0.001);
    END LOOP;
END
$$;
SQL
mkdir -p "$dir/s" && chmod 755 "$dir/s"
[ "$(id -u)" = 0 ] && chown "$ESRC_TEST_USER" "$dir/s"
as_test_user "$PG_BINDIR/pg_basebackup" -h 127.0.0.1 -p "$pport" -U postgres -D "$dir/s/data" -R -X stream -c fast \
    >"$dir/basebackup.log" 2>&1 || { cat "$dir/basebackup.log"; die "pg_basebackup failed"; }
printf "port = %s\nunix_socket_directories = '%s'\n" "$sport" "$dir/s" \
    | as_test_user tee -a "$dir/s/data/postgresql.conf" >/dev/null
as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/s/data" -l "$dir/s/server.log" -w -t 60 start >/dev/null \
    || { tail -30 "$dir/s/server.log"; die "standby did not start"; }

cat >"$dir/append.pgbench" <<'SQL'
\set s random(1, 10000)
SELECT esrc.append('bench' || (:s % 8) || '-' || :s, 'Tick', '{"n": 1}');
SQL
echo "machine: $(nproc) cores$( [ -n "${BENCH_SHARED:-}" ] && echo ", shared with other jobs")"

if [[ $parts == *1* ]]; then
echo "1. horizon lag at $rate appends/s, ${secs}s, esrc.standby_horizon_interval $(p -c "SHOW esrc.standby_horizon_interval")"
p -c "SELECT esrc.append('warm-1', 'Tick', '{}')" >/dev/null
p -c "COPY (SELECT * FROM bench_sample($secs + 1)) TO STDOUT" >"$dir/primary.tsv" &
sp=$!
s -c "COPY (SELECT * FROM bench_sample($secs + 2)) TO STDOUT" >"$dir/standby.tsv" &
ss=$!
"$PG_BINDIR/pgbench" -h 127.0.0.1 -p "$pport" -U postgres -n -c 4 -j 2 -R "$rate" -T "$secs" -M prepared \
    -f "$dir/append.pgbench" postgres >"$dir/pgbench-lag.log" 2>&1
wait $sp $ss
python3 - "$dir/primary.tsv" "$dir/standby.tsv" <<'PY'
import sys
def load(f):
    return [tuple(0.0 if x.strip() == "\\N" else float(x) for x in l.split("\t")) for l in open(f) if l.strip()]
P, S = load(sys.argv[1]), load(sys.argv[2])
def first_times(rows, col):
    out, best = {}, 0
    for r in rows:
        v = int(r[col])
        if v > best:
            for h in range(best + 1, v + 1):
                out[h] = r[0]
            best = v
    return out
ph, pm = first_times(P, 1), first_times(P, 2)
sh, sm = first_times(S, 1), first_times(S, 2)
lo = max(min(ph), min(sh)) + 1
hz = sorted((sh[h] - ph[h]) * 1000 for h in ph if h in sh and h >= lo)
rp = sorted((sm[h] - pm[h]) * 1000 for h in pm if h in sm and h >= lo)
def pct(a, q): return a[min(len(a) - 1, int(q * len(a)))]
print("  samples: primary %d, standby %d; positions compared: %d" % (len(P), len(S), len(hz)))
print("  standby horizon lag behind the primary's horizon: p50 %.1f ms  p99 %.1f ms" % (pct(hz, .5), pct(hz, .99)))
print("  standby replay lag (first event seen):            p50 %.1f ms  p99 %.1f ms" % (pct(rp, .5), pct(rp, .99)))
print("  p99 horizon lag - p99 replay lag: %.1f ms (target <= 10 ms)" % (pct(hz, .99) - pct(rp, .99)))
PY
grep -E "^tps" "$dir/pgbench-lag.log" | sed 's/^/  pgbench: /'
fi

if [[ $parts == *2* ]]; then
echo "2. what the publishing adds (WAL bytes/s, transactions/s)"
measure() {   # LABEL SECONDS RATE(0 = idle)
    local label=$1 t=$2 r=$3 lsn0 x0 lsn1 x1 n=0
    lsn0=$(p -c "SELECT pg_current_wal_insert_lsn()")
    x0=$(p -c "SELECT txid_current()")
    if [ "$r" = 0 ]; then
        sleep "$t"
    else
        "$PG_BINDIR/pgbench" -h 127.0.0.1 -p "$pport" -U postgres -n -c 4 -j 2 -R "$r" -T "$t" -M prepared \
            -f "$dir/append.pgbench" postgres >"$dir/pgbench-wal.log" 2>&1
        n=$(awk '/^number of transactions actually processed/{print $NF}' "$dir/pgbench-wal.log" | cut -d/ -f1)
    fi
    lsn1=$(p -c "SELECT pg_current_wal_insert_lsn()")
    x1=$(p -c "SELECT txid_current()")
    p -c "SELECT format('  %-34s WAL %9s B/s  xids %6s/s  (appends %s/s, other xids %s/s)', '$label',
                        round(pg_wal_lsn_diff('$lsn1', '$lsn0') / $t), round(($x1 - $x0 - 1)::numeric / $t),
                        round($n::numeric / $t), round(($x1 - $x0 - 1 - $n)::numeric / $t, 1))"
}
setint() { p -c "ALTER SYSTEM SET esrc.standby_horizon_interval = '$1'" -c "SELECT pg_reload_conf()" >/dev/null; sleep 1; }
deflt=$(p -c "SHOW esrc.standby_horizon_interval")
measure "idle, interval $deflt" "$idle" 0
setint -1
measure "idle, publishing off" "$idle" 0
measure "$rate appends/s, publishing off" "$secs" "$rate"
setint "$deflt"
measure "$rate appends/s, interval $deflt" "$secs" "$rate"
p -c "SELECT '  row: ' || pg_column_size(h.*) || ' bytes' FROM esrc.standby_horizon h"
fi

[[ $parts == *3* ]] || exit 0
echo "3. read_all(after, 1000) on the standby vs the primary, $clients clients, ${rsecs}s runs"
p -c "SELECT count(*) FROM (SELECT esrc.append_batch('bulk-' || g, (SELECT jsonb_agg(jsonb_build_object('type', 'Tick', 'data', jsonb_build_object('n', i))) FROM generate_series(1, 100) i)) FROM generate_series(1, $events / 100) g) x" >/dev/null
top=$(p -c "SELECT esrc.safe_position()")
for _ in $(seq 1 600); do
    [ "$(s -c "SELECT esrc.safe_position() >= $top")" = t ] && break
    sleep 0.1
done
# warm both caches
p -c "SELECT count(*) FROM esrc.read_all(0, 1000000)" >/dev/null
s -c "SELECT count(*) FROM esrc.read_all(0, 1000000)" >/dev/null
cat >"$dir/read.pgbench" <<SQL
\set a random(0, $top - 1000)
SELECT count(*) FROM esrc.read_all(:a, 1000);
SQL
declare -a rs rp
for r in $(seq 1 "$rounds"); do
    for port in $pport $sport $sport $pport; do
        tps=$("$PG_BINDIR/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n -c "$clients" -j 2 -T "$rsecs" -M prepared \
              -f "$dir/read.pgbench" postgres 2>&1 | awk '/^tps = /{printf "%d", $3}')
        if [ "$port" = "$sport" ]; then rs+=("$tps"); else rp+=("$tps"); fi
    done
    printf '  round %d: primary %s %s, standby %s %s calls/s\n' "$r" "${rp[-2]}" "${rp[-1]}" "${rs[-2]}" "${rs[-1]}"
done
python3 - "${rp[*]}" "${rs[*]}" <<'PY'
import sys, statistics
p = [int(x) for x in sys.argv[1].split()]
s = [int(x) for x in sys.argv[2].split()]
print("  median: primary %d, standby %d calls/s (x1000 events); standby/primary %.2f (target >= 0.9)"
      % (statistics.median(p), statistics.median(s), statistics.median(s) / statistics.median(p)))
PY
