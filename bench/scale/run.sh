#!/usr/bin/env bash
# bench/scale/run.sh: how the latency of appends, reads and snapshot
# functions grows with the size of the event log, on a throwaway cluster.
#
#   bench/scale/run.sh                     # sizes 0, 100k, 1M events
#   BENCH_MAX=10000000 bench/scale/run.sh  # ... and 10M (a few GB, long fill)
#
# The log: category "rare" (one stream, 100 events, positions 1-100), then
# 10 categories c0..c9 of 100 streams each, filled with esrc.append_batch
# (100 events per call, the stream of each call in turn), so every stream
# has size/1000 events.  A snapshot with esrc.merge follows c0 (kept by the
# trigger during the fill) and one follows rare.  plain_events, a plain
# table with the same columns and indexes, is filled with the same rows.
# After each fill: VACUUM ANALYZE and CHECKPOINT.
#
# At each size, one pgbench client (-M prepared) runs each query for
# BENCH_SECONDS (default 3) with per-transaction latencies logged; prints
# p50/p99 in ms and, for every read, the ratio of its p50 to its p50 at
# 100k events measured in the same run (the target: within 1.5x at the
# largest size).  Appends are compared with a plain INSERT into
# plain_events at the same size instead.  Also prints the shared buffers
# each call touched (pg_stat_statements): the work done, which the noise of
# a shared machine does not change, and how many of them missed
# shared_buffers: reads at random positions of a log larger than
# shared_buffers miss it more often as the log grows, whatever the plan.  The queries:
#   append          esrc.append of one event to a random c* stream
#   insert          INSERT of the same row into plain_events  (baseline)
#   read_stream     read_stream(random c* stream, random version, 100)
#   read_all        read_all(random position, 1000)
#   read_cat_big    read_category('cN', random position, 1000)
#   read_cat_tiny   read_category('rare', 0, 1000)
#   load            esrc.load of a random c0 stream
#   snapshot_at     snapshot_at(random c0 stream, version 99)
#   create_tiny     BEGIN; create_snapshot(.., 'rare', esrc.merge); ROLLBACK
#   rebuild_tiny    rebuild_snapshot of the snapshot of rare
# Asserts nothing about times.  Knobs: BENCH_MAX (default 1000000; sizes are
# 0, 100k, 1M, 10M up to it), BENCH_SECONDS, BENCH_NO_BUILD=1.
set -euo pipefail
source "$(dirname "$0")/../../test/lib.sh"

max=${BENCH_MAX:-1000000}
secs=${BENCH_SECONDS:-3}
[[ "$max" =~ ^[0-9]+$ ]] || die "BENCH_MAX must be a number"
[[ "$secs" =~ ^[0-9]+$ ]] || die "BENCH_SECONDS must be a number"
sizes=(0)
for s in 100000 1000000 10000000; do [ "$s" -le "$max" ] && sizes+=("$s"); done

ensure_deps
[ -n "${BENCH_NO_BUILD:-}" ] || build_install
dir=$(test_tmpdir bench-scale)
port=$(free_port)
trap 'pg_stop "$dir" immediate; rm -rf "$dir"' EXIT
pg_start "$dir" "$port" "shared_buffers = 1GB" "max_wal_size = 8GB" "synchronous_commit = off" \
    "checkpoint_timeout = 30min" "shared_preload_libraries = 'esrc, pg_stat_statements'" \
    "pg_stat_statements.track = top"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres

pad=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx
psql -qX -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE EXTENSION esrc;
CREATE EXTENSION pg_stat_statements;
CREATE TABLE plain_events (
    position bigint NOT NULL PRIMARY KEY, stream text NOT NULL, version bigint NOT NULL,
    type text NOT NULL, data jsonb NOT NULL, metadata jsonb, id uuid NOT NULL UNIQUE,
    recorded_at timestamptz NOT NULL, category text NOT NULL, UNIQUE (stream, version));
CREATE INDEX ON plain_events (category, position);
CREATE SEQUENCE plain_seq START 100000000000;
CREATE TABLE batch AS
    SELECT jsonb_agg(jsonb_build_object('type', 'Tick', 'data', jsonb_build_object('n', i, 'pad', '$pad'))) AS events
    FROM generate_series(1, 100) i;
SELECT esrc.append_batch('rare-1', events) FROM batch;
SELECT esrc.create_snapshot('snap_rare', 'rare', 'esrc.merge(jsonb, esrc.event)');
SELECT esrc.create_snapshot('snap_c0', 'c0', 'esrc.merge(jsonb, esrc.event)');
SQL

calls=0   # append_batch calls made so far (call k goes to stream c(k%10)-(k/10%100+1))
fill_to() {   # fill_to EVENTS: grow the log to about 100 + EVENTS events
    local target=$(( $1 / 100 )) chunk
    while [ "$calls" -lt "$target" ]; do
        chunk=$(( target - calls )); [ "$chunk" -gt 1000 ] && chunk=1000
        psql -qX -v ON_ERROR_STOP=1 >/dev/null -c "
            SELECT count(esrc.append_batch('c' || (k % 10) || '-' || (k / 10 % 100 + 1), b.events))
            FROM batch b, generate_series($calls, $(( calls + chunk - 1 ))) k"
        calls=$(( calls + chunk ))
    done
    psql -qX -v ON_ERROR_STOP=1 >/dev/null \
        -c "INSERT INTO plain_events SELECT * FROM esrc.events e
            WHERE e.position > (SELECT coalesce(max(position), 0) FROM plain_events WHERE position < 100000000000)" \
        -c "VACUUM ANALYZE esrc.events" -c "VACUUM ANALYZE plain_events" -c "CHECKPOINT"
}

mkdir -p "$dir/scripts" "$dir/logs"
write_scripts() {   # write_scripts EVENTS_PER_STREAM LOG_SIZE
    local per=$1 size=$2 vmax
    vmax=$(( per > 100 ? per - 100 : 0 ))
    cat >"$dir/scripts/append" <<SQL
\set c random(0, 9)
\set s random(1, 100)
SELECT esrc.append('c' || :c || '-' || :s, 'Tick', '{"n": 1, "pad": "$pad"}');
SQL
    cat >"$dir/scripts/insert" <<SQL
\set c random(0, 9)
\set s random(1, 100)
INSERT INTO plain_events VALUES (nextval('plain_seq'), 'c' || :c || '-' || :s, currval('plain_seq'), 'Tick', '{"n": 1, "pad": "$pad"}', NULL, gen_random_uuid(), clock_timestamp(), 'c' || :c);
SQL
    cat >"$dir/scripts/read_stream" <<SQL
\set c random(0, 9)
\set s random(1, 100)
\set v random(0, $vmax)
SELECT count(*) FROM esrc.read_stream('c' || :c || '-' || :s, :v, 100);
SQL
    cat >"$dir/scripts/read_all" <<SQL
\set p random(0, $size)
SELECT count(*) FROM esrc.read_all(:p, 1000);
SQL
    cat >"$dir/scripts/read_cat_big" <<SQL
\set c random(0, 9)
\set p random(0, $size)
SELECT count(*) FROM esrc.read_category('c' || :c, :p, 1000);
SQL
    cat >"$dir/scripts/read_cat_tiny" <<SQL
SELECT count(*) FROM esrc.read_category('rare', 0, 1000);
SQL
    cat >"$dir/scripts/load" <<SQL
\set s random(1, 100)
SELECT version FROM esrc.load('snap_c0', 'c0-' || :s);
SQL
    cat >"$dir/scripts/snapshot_at" <<SQL
\set s random(1, 100)
SELECT esrc.snapshot_at('snap_c0', 'c0-' || :s, 99) IS NOT NULL;
SQL
    cat >"$dir/scripts/create_tiny" <<SQL
BEGIN;
SELECT esrc.create_snapshot('snap_tmp', 'rare', 'esrc.merge(jsonb, esrc.event)');
ROLLBACK;
SQL
    cat >"$dir/scripts/rebuild_tiny" <<SQL
SELECT esrc.rebuild_snapshot('snap_rare');
SQL
}

# measure NAME: p50 and p99 of one pgbench run, in ms, the number of
# transactions and the shared buffers they touched (hit or read, from
# pg_stat_statements) per transaction, as "p50 p99 n buffers"
measure() {
    local name=$1 stats
    rm -f "$dir/logs/$name".*
    psql -qAtX -c "SELECT pg_stat_statements_reset()" >/dev/null
    "$PG_BINDIR/pgbench" -n -c 1 -T "$secs" -M prepared -f "$dir/scripts/$name" \
        -l --log-prefix="$dir/logs/$name" >"$dir/pgbench.out" 2>&1 \
        || { cat "$dir/pgbench.out"; die "pgbench failed for $name"; }
    cat "$dir/logs/$name".* | python3 -c '
import sys, statistics
lat = sorted(int(l.split()[2]) / 1000.0 for l in sys.stdin if l.strip())
q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))]
print("%.3f %.3f %d" % (statistics.median(lat), q(0.99), len(lat)))' >"$dir/stats"
    read -r a b c <"$dir/stats"
    stats=$(psql -qAtX -F ' ' -c "SELECT coalesce(sum(shared_blks_hit + shared_blks_read), 0),
                                  coalesce(sum(shared_blks_read), 0)
                           FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'")
    echo "$a $b $c $(python3 -c "t, r = map(int, '$stats'.split()); print('%.1f(%.1f)' % (t / $c, r / $c))")"
}

reads=(read_stream read_all read_cat_big read_cat_tiny load snapshot_at create_tiny rebuild_tiny)
big_only=" read_stream read_all read_cat_big load snapshot_at "
declare -A p50 p99 n bufs
echo "bench/scale: sizes ${sizes[*]}, ${secs}s per query, 1 client, $(nproc) cores," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
for size in "${sizes[@]}"; do
    t0=$(date +%s)
    fill_to "$size"
    events=$(psql -qAtX -c "SELECT count(*) FROM esrc.events")
    log "size $size: $events events (fill $(( $(date +%s) - t0 )) s)"
    per=$(( size / 1000 ))
    write_scripts "$per" "$size"
    names=(append insert "${reads[@]}")
    for name in "${names[@]}"; do
        if [ "$size" = 0 ] && [[ "$big_only" == *" $name "* || $name == append || $name == insert ]]; then
            continue
        fi
        read -r a b c d < <(measure "$name")
        p50[$size,$name]=$a; p99[$size,$name]=$b; n[$size,$name]=$c; bufs[$size,$name]=$d
    done
done

ratio() { python3 -c "print('%.2f' % ($1 / $2))"; }
echo
echo "latency in ms, p50 / p99 (samples); ratio = p50 / p50 at 100k events (reads),"
echo "or esrc.append p50 / plain INSERT p50 at the same size (append):"
printf '%-14s' "query"; for size in "${sizes[@]}"; do printf ' %30s' "$size events"; done; echo
for name in append "${reads[@]}"; do
    printf '%-14s' "$name"
    for size in "${sizes[@]}"; do
        if [ -z "${p50[$size,$name]:-}" ]; then printf ' %30s' "-"; continue; fi
        if [ "$name" = append ]; then
            r="$(ratio "${p50[$size,append]}" "${p50[$size,insert]}")x ins"
        elif [ -n "${p50[100000,$name]:-}" ]; then
            r="$(ratio "${p50[$size,$name]}" "${p50[100000,$name]}")x"
        else
            r=""
        fi
        printf ' %30s' "$(printf '%s/%s (%s) %s' "${p50[$size,$name]}" "${p99[$size,$name]}" "${n[$size,$name]}" "$r")"
    done
    echo
done
printf '%-14s' "insert"
for size in "${sizes[@]}"; do
    [ -n "${p50[$size,insert]:-}" ] && printf ' %30s' "${p50[$size,insert]}/${p99[$size,insert]} (${n[$size,insert]})" || printf ' %30s' "-"
done
echo
echo
echo "shared buffers touched per call (hit or read; pg_stat_statements), a measure of"
echo "work that machine noise does not change, and in parentheses those of them that"
echo "were not in shared_buffers (read from the OS):"
printf '%-14s' "query"; for size in "${sizes[@]}"; do printf ' %18s' "$size events"; done; echo
for name in append insert "${reads[@]}"; do
    printf '%-14s' "$name"
    for size in "${sizes[@]}"; do printf ' %18s' "${bufs[$size,$name]:--}"; done
    echo
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
