#!/usr/bin/env bash
# bench/scavenge/run.sh: what the scavenger (src/lifecycle/scavenge.c) does and costs,
# on a throwaway cluster.
#
#   BENCH_SECONDS=5 BENCH_ROUNDS=3 bench/scavenge/run.sh
#
# 1. Scavenge rate: per round, BENCH_STREAMS (200) new streams of 500
#    events (200-byte data, small metadata), truncate_before 450 on each
#    (90% hidden); esrc.scavenge(10000) is called until its pass is done;
#    prints events redacted per second.
# 2. Appends while scavenging: pgbench, BENCH_CLIENTS (8) clients,
#    single-event transactions over 200 streams, half of them with
#    max_count = 10 (so appends keep hiding events), BENCH_SECONDS per run;
#    per round one run without the scavenger (the baseline), one with the
#    worker (esrc.scavenge_interval = 1s) and one with esrc.scavenge(1000)
#    called back to back (the worst case: a whole core of a 2-core machine
#    goes to the scavenger and its psql); prints appends/s of each, the
#    ratios to the baseline of the same round, the events redacted, and
#    the append latency p99/max.
# Prints figures only; asserts nothing.  Run it under
# "flock -o /tmp/esrc-bench.lock" on a shared machine.
set -euo pipefail
source "$(dirname "$0")/../../test/lib.sh"

secs=${BENCH_SECONDS:-5}
rounds=${BENCH_ROUNDS:-3}
clients=${BENCH_CLIENTS:-8}
streams=${BENCH_STREAMS:-200}

dir=$(test_tmpdir bench-scavenge)
port=$(free_port)
loop_pid=
trap '[ -n "$loop_pid" ] && kill "$loop_pid" 2>/dev/null; pg_stop "$dir" immediate; rm -rf "$dir"' EXIT
pg_start "$dir" "$port" "max_connections = 40" "shared_buffers = 256MB" "max_wal_size = 4GB"
chmod 777 "$dir"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
q -c "CREATE EXTENSION esrc"

echo "== scavenge rate ($streams streams x 500 events, 450 of each hidden)"
rates=()
for r in $(seq "$rounds"); do
    q -c "SELECT count(*) FROM (SELECT esrc.append('r$r-' || s, 'E',
              jsonb_build_object('s', s, 'i', g, 'pad', repeat('x', 200)), jsonb_build_object('i', g))
          FROM generate_series(0, 499) g, generate_series(1, $streams) s) a" >/dev/null
    q -c "SELECT esrc.set_stream_rules('r$r-' || s, truncate_before => 450, reason => 'bench')
          FROM generate_series(1, $streams) s" -c "CHECKPOINT" >/dev/null
    out=$(q -c "DO \$\$
        DECLARE t0 timestamptz := clock_timestamp(); n bigint := 0; d boolean := false; e bigint;
        BEGIN
            WHILE NOT d LOOP
                SELECT events_redacted, done INTO e, d FROM esrc.scavenge(10000);
                n := n + e;
            END LOOP;
            RAISE NOTICE '% %', n, extract(epoch FROM clock_timestamp() - t0);
        END \$\$" 2>&1 | sed -n 's/.*NOTICE:  //p')
    read -r n s <<<"$out"
    rate=$(python3 -c "print(f'{$n / $s:.0f}')")
    rates+=("$rate")
    echo "round $r: $n events redacted in ${s}s: $rate events/s"
done
echo "scavenge events/s: ${rates[*]}"

echo "== appends with and without the scavenger ($clients clients, $streams streams, half with max_count 10)"
q -c "SELECT esrc.append('a-' || s, 'E', '{}') FROM generate_series(1, $streams) s" \
  -c "SELECT esrc.set_stream_rules('a-' || s, max_count => 10, reason => 'bench')
      FROM generate_series(1, $streams / 2) s" >/dev/null
cat >"$dir/append.sql" <<SQL
\set s random(1, $streams)
SELECT esrc.append('a-' || :s, 'E', '{"pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}', '{"m": 1}');
SQL
run() {  # name: appends/s, and p99/max latency in ms
    rm -f "$dir"/lat.*
    as_test_user "$PG_BINDIR/pgbench" -n -M prepared -h 127.0.0.1 -p "$port" -U postgres \
        -c "$clients" -j "$clients" -T "$secs" -l --log-prefix="$dir/lat" -f "$dir/append.sql" postgres \
        2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
    cat "$dir"/lat.* | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {
        printf "p99 %.1f ms, max %.1f ms\n", a[int(NR*0.99)]/1000, a[NR]/1000}' >"$dir/lat-$1"
}
redacted() { q -c "SELECT coalesce(sum(events), 0) FROM esrc.erasures WHERE what = 'scavenge'"; }
wratios=()
lratios=()
for r in $(seq "$rounds"); do
    base=$(run base)
    # the worker, one slice a second (esrc.scavenge_max_events 10000)
    before=$(redacted)
    q -c "ALTER SYSTEM SET esrc.scavenge_interval = '1s'" -c "SELECT pg_reload_conf()" >/dev/null
    worker=$(run worker)
    q -c "ALTER SYSTEM SET esrc.scavenge_interval = 0" -c "SELECT pg_reload_conf()" >/dev/null
    by_worker=$(( $(redacted) - before ))
    # the worst case: esrc.scavenge(1000) called back to back
    before=$(redacted)
    ( while :; do psql -qAtX -c "SELECT events_redacted FROM esrc.scavenge(1000)" >/dev/null; done ) &
    loop_pid=$!
    loop=$(run loop)
    kill "$loop_pid"; wait "$loop_pid" 2>/dev/null || true; loop_pid=
    by_loop=$(( $(redacted) - before ))
    wratios+=("$(python3 -c "print(f'{$worker / $base:.3f}')")")
    lratios+=("$(python3 -c "print(f'{$loop / $base:.3f}')")")
    echo "round $r: without $base/s ($(cat "$dir/lat-base"))"
    echo "         worker every 1 s: $worker/s ($(cat "$dir/lat-worker")), ratio ${wratios[-1]}, $by_worker events redacted"
    echo "         scavenge(1000) back to back: $loop/s ($(cat "$dir/lat-loop")), ratio ${lratios[-1]}, $by_loop events redacted"
done
echo "appends with/without the scavenger: worker every 1 s ${wratios[*]}; back-to-back calls ${lratios[*]}"
