#!/usr/bin/env bash
# bench/lifecycle/erase.sh: esrc.erase_stream of a 10,000-event stream
# (issue 16): the erase's events/s, and what it costs appends to other
# streams that run alongside it, with and without the cost-based delay
# (esrc.erase_cost_delay / esrc.erase_cost_limit, docs/lifecycle.md).
# Run it alone on the machine:
#   flock -o /tmp/esrc-bench.lock bash bench/lifecycle/erase.sh
#   BENCH_SECONDS=2 BENCH_ROUNDS=3 BENCH_CLIENTS=4 bash bench/lifecycle/erase.sh
#   BENCH_CONFIGS="off default 20ms/64kB 2ms/16kB" bash bench/lifecycle/erase.sh
#
# Each round, for each event size and each configuration, on one throwaway
# cluster:
#   1. append a fresh stream of BENCH_EVENTS (10,000) events, then CHECKPOINT;
#      sizes: small  ~300 bytes of JSON data (a customer record) and ~60
#                    bytes of metadata, stored inline
#             toast  4 kB of incompressible hex text, stored out of line
#                    in TOAST
#   2. start pgbench (BENCH_CLIENTS clients, -M prepared, one ~300-byte
#      append per transaction to 100 streams per client of another
#      category); after 1 s of warm-up, BENCH_SECONDS without an erase;
#   3. the erase, in its own transaction, with the configuration's
#      settings: off (esrc.erase_cost_delay = 0), default (the server's
#      defaults) or DELAY/LIMIT (both set, e.g. 20ms/64kB);
#   4. as long again as the erase took (at least BENCH_SECONDS) without an
#      erase, then pgbench is stopped.
# Appends are counted in the log by recorded_at (the clock at insert):
# those during the erase, and those in the windows before and after it
# (the baseline, measured in the same pgbench run).  Prints per run the
# erase's duration and events/s and the appends/s during it against the
# baseline; then per size and configuration the medians over the rounds.
# Sizes and configurations alternate within a round to spread noise.
set -euo pipefail
source "$(dirname "$0")/../../test/lib.sh"

secs=${BENCH_SECONDS:-3}
clients=${BENCH_CLIENTS:-4}
rounds=${BENCH_ROUNDS:-3}
events=${BENCH_EVENTS:-10000}
sizes=${BENCH_SIZES:-small toast}
configs=${BENCH_CONFIGS:-off default}

ensure_deps
[ -n "${BENCH_NO_BUILD:-}" ] || build_install
dir=$(test_tmpdir bench-erase)
port=$(free_port)
pgbench_pid=
cleanup() {
    [ -n "$pgbench_pid" ] && kill "$pgbench_pid" 2>/dev/null || true
    pg_stop "$dir" immediate
    rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "max_connections = 40" "shared_buffers = 512MB" \
    "max_wal_size = 4GB" "autovacuum = off" "checkpoint_timeout = 30min"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
q -c "CREATE EXTENSION esrc"
log "defaults: esrc.erase_cost_delay = $(q -c 'SHOW esrc.erase_cost_delay'), esrc.erase_cost_limit = $(q -c 'SHOW esrc.erase_cost_limit')"

# the appends of the load: ~300 bytes of data, like the small events
cat >"$dir/append.sql" <<'SQL'
\set s random(1, 100)
SELECT esrc.append('load-' || :client_id || '-' || :s, 'OrderPlaced', '{"order_id": "0f8fad5b-d9cb-469f-a165-70867728950e", "customer": "customer-4711", "items": [{"sku": "SKU-00017", "qty": 2, "price": 19.99}, {"sku": "SKU-00342", "qty": 1, "price": 5.49}], "shipping": {"street": "Hauptstrasse 17", "city": "Berlin", "zip": "10115", "country": "DE"}, "channel": "web", "note": "leave at the door"}', '{"correlation_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7"}');
SQL
chmod a+r "$dir/append.sql"

# make_stream NAME SIZE: BENCH_EVENTS events, in batches of 1,000
make_stream() {
    local data
    case $2 in
        small) data="jsonb_build_object('customer_id', 'customer-' || g, 'email', 'user-' || g || '@example.com',
                   'name', 'Name ' || md5(g::text), 'phone', '+49 30 ' || (1000000 + g),
                   'address', jsonb_build_object('street', md5('street' || g), 'city', 'Berlin', 'zip', '10115', 'country', 'DE'),
                   'birth_date', '1980-01-01', 'plan', 'pro', 'note', md5('note' || g))" ;;
        toast) data="jsonb_build_object('document', (SELECT string_agg(md5(random()::text || i), '') FROM generate_series(1, 128) i))" ;;
        *) die "unknown size $2" ;;
    esac
    q -c "SELECT count(esrc.append_batch('$1', (SELECT jsonb_agg(jsonb_build_object('type', 'CustomerUpdated',
               'data', $data, 'metadata', jsonb_build_object('correlation_id', gen_random_uuid())))
             FROM generate_series(b * 1000 + 1, least((b + 1) * 1000, $events)) g)))
          FROM generate_series(0, ($events - 1) / 1000) b" >/dev/null
}

# settings CONFIG: the SET statements of a configuration
settings() {
    case $1 in
        off) echo "SET esrc.erase_cost_delay = 0;" ;;
        default) echo "" ;;
        */*) echo "SET esrc.erase_cost_delay = '${1%/*}'; SET esrc.erase_cost_limit = '${1#*/}';" ;;
        *) die "unknown configuration $1" ;;
    esac
}

now() { q -c "SELECT extract(epoch FROM clock_timestamp())"; }
appends_between() {  # FROM TO (epoch seconds): appends of the load recorded then
    q -c "SELECT count(*) FROM esrc.events WHERE category = 'load'
            AND recorded_at >= to_timestamp($1) AND recorded_at < to_timestamp($2)"
}

: >"$dir/results"
run() {  # round size config
    local stream="user-$2-$3-$1" t_b0 t_e0 t_e1 t_a1 n out
    stream=${stream//\//_}
    make_stream "$stream" "$2"
    q -c "CHECKPOINT"
    "$PG_BINDIR/pgbench" -n -M prepared -c "$clients" -j "$clients" -T 600 \
        -f "$dir/append.sql" >"$dir/pgbench.out" 2>&1 &
    pgbench_pid=$!
    sleep 1
    t_b0=$(now)
    sleep "$secs"
    out=$(q -c "$(settings "$3")" -c "SELECT extract(epoch FROM clock_timestamp())" \
            -c "SELECT esrc.erase_stream('$stream', 'bench')" \
            -c "SELECT extract(epoch FROM clock_timestamp())")
    read -r t_e0 n t_e1 <<<"$(echo $out)"
    sleep "$(python3 -c "print(max($secs, $t_e1 - $t_e0))")"
    t_a1=$(now)
    kill -TERM "$pgbench_pid" 2>/dev/null || true
    wait "$pgbench_pid" 2>/dev/null || true
    pgbench_pid=
    [ "$n" = "$events" ] || die "erase_stream returned $n, expected $events"
    python3 - "$1" "$2" "$3" "$n" "$t_b0" "$t_e0" "$t_e1" "$t_a1" \
        "$(appends_between "$t_b0" "$t_e0")" "$(appends_between "$t_e0" "$t_e1")" \
        "$(appends_between "$t_e1" "$t_a1")" <<'PY' | tee -a "$dir/results"
import sys
r, size, config = sys.argv[1:4]
n, b0, e0, e1, a1, before, during, after = map(float, sys.argv[4:])
base = (before + after) / ((e0 - b0) + (a1 - e1))
rate = during / (e1 - e0)
print(f"round {r} {size:5s} {config:12s} erase {e1 - e0:6.2f} s {n / (e1 - e0):9.0f} events/s"
      f"   appends/s during {rate:7.0f} baseline {base:7.0f} ratio {rate / base:.2f}")
PY
}

for r in $(seq 1 "$rounds"); do
    # alternate the order of configurations from round to round
    order=$configs
    [ $((r % 2)) = 0 ] && order=$(echo $configs | tr ' ' '\n' | tac | tr '\n' ' ')
    for s in $sizes; do
        for c in $order; do
            run "$r" "$s" "$c"
        done
    done
done

python3 - "$dir/results" "$clients" "$secs" "$events" <<'PY'
import collections, statistics, sys
path, clients, secs, events = sys.argv[1:]
rows = collections.defaultdict(list)
for line in open(path):
    f = line.split()
    rows[(f[2], f[3])].append((float(f[7]), float(f[13]), float(f[15]), float(f[5])))
print(f"bench/lifecycle/erase.sh: erase of {events} events, {clients} pgbench clients appending,"
      f" baseline {secs} s before and max({secs} s, the erase) after each erase,"
      f" {len(next(iter(rows.values())))} rounds (medians)")
for (size, config), v in rows.items():
    eps = statistics.median(x[0] for x in v)
    ratio = statistics.median(x[2] for x in v)
    dur = statistics.median(x[3] for x in v)
    print(f"{size:5s} {config:12s} erase {dur:6.2f} s {eps:9.0f} events/s"
          f"   appends during/baseline {ratio:.2f} (rounds {min(x[2] for x in v):.2f}-{max(x[2] for x in v):.2f})")
PY
