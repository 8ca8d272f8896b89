#!/usr/bin/env bash
# bench/dcb/run.sh: the figures of issue 28 (docs/dcb.md, "Cost").
#   1. esrc.append of an event with 3 tags / without tags, BENCH_CLIENTS (8)
#      clients, random streams; target >= 0.85x.  In the same rounds a
#      plain INSERT of the same row into a table shaped like esrc.events
#      (its columns, constraints and indexes, sequences for position and
#      version, gen_random_uuid() for the id), the floor an append stands
#      on, and the same INSERT with the 3 tags: plain INSERT with tags /
#      without is what the GIN index and the array cost PostgreSQL
#      itself, the floor of the tagged/untagged ratio.  All four with
#      synchronous_commit off (CPU-bound: what esrc's own code costs) and
#      on (every commit waits for its WAL flush), the setting given per
#      session (PGOPTIONS).  BENCH_MODE (simple) is pgbench's
#      query mode; "prepared" leaves out the parsing and planning of the
#      statements, which the tagged one pays more of (its ARRAY[...]).
#      Then the backend's CPU per call (utime + stime from /proc), one
#      session calling a procedure that makes BENCH_CPU_CALLS (5,000) of
#      each, one transaction each, synchronous_commit off: steadier than
#      tx/s on a shared machine, and without pgbench's parsing.
#   2. esrc.append_if with disjoint conditions (a tag of its own per call,
#      "after" = esrc.safe_position() as a decision right after its read)
#      / esrc.append_batch of the same event without a condition; target
#      >= 0.8x.  Then every client on one hot tag (condition and event):
#      it must serialize; pgbench --max-tries retries the 40001s.
#   3. esrc.read_query of a rare tag in a log of BENCH_SMALL (100k) and of
#      BENCH_BIG (1M) events with 3 tags each: calls/s, ratio <= 1.5x.
#   4. Space: esrc.events with its indexes per 1M events with 3 tags and
#      without tags (BENCH_SPACE events each, scaled).
# BENCH_APPENDS_ONLY=1 stops after 1. and 2.
# Runs alternate within each round (BENCH_ROUNDS, 3) to spread machine
# noise; medians of the per-round ratios.  Asserts nothing.
#
#   flock -o /tmp/esrc-bench.lock bash bench/dcb/run.sh
set -euo pipefail
source "$(dirname "$0")/../../test/lib.sh"

secs=${BENCH_SECONDS:-5}
clients=${BENCH_CLIENTS:-8}
rounds=${BENCH_ROUNDS:-3}
small=${BENCH_SMALL:-100000}
big=${BENCH_BIG:-1000000}
space=${BENCH_SPACE:-200000}

ensure_deps
[ -n "${BENCH_NO_BUILD:-}" ] || build_install
dir=$(test_tmpdir bench-dcb)
port=$(free_port)
trap 'pg_stop "$dir" immediate; rm -rf "$dir"' EXIT
pg_start "$dir" "$port" "max_connections = 40" "shared_buffers = 512MB" "max_wal_size = 4GB" \
    "synchronous_commit = off"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
q -c "CREATE EXTENSION esrc"
median() { python3 -c "import statistics, sys; print('%.3f' % statistics.median(map(float, sys.argv[1:])))" $1; }
bench() {   # bench FILE [pgbench options]: tx/s
    local f=$1; shift
    "$PG_BINDIR/pgbench" -n -c "$clients" -j 2 -T "$secs" "$@" -f "$dir/$f" 2>"$dir/$f.err" \
        | tee "$dir/$f.out" | awk '/^tps = /{printf "%d", $3}'
}
ratio() { python3 -c "print('%.3f' % ($1 / $2))"; }
mode=${BENCH_MODE:-simple}
q <<'SQL'
CREATE SEQUENCE plain_seq;
CREATE SEQUENCE plain_version;
CREATE TABLE plain (LIKE esrc.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES);
ALTER TABLE plain ALTER position SET DEFAULT nextval('plain_seq'),
    ALTER id SET DEFAULT gen_random_uuid(), ALTER recorded_at SET DEFAULT now();
SQL

cat >"$dir/untagged" <<'SQL'
\set s random(1, 100000)
SELECT esrc.append('bench-' || :s, 'Tick', '{"n": 1}');
SQL
cat >"$dir/tagged" <<'SQL'
\set s random(1, 100000)
\set t random(1, 1000)
\set u random(1, 100)
SELECT esrc.append('bench-' || :s, 'Tick', '{"n": 1}', tags => ARRAY['entity:' || :s, 'group:' || :t, 'region:' || :u]);
SQL
cat >"$dir/plain" <<'SQL'
\set s random(1, 100000)
INSERT INTO plain (stream, version, type, data, category) VALUES ('bench-' || :s, nextval('plain_version'), 'Tick', '{"n": 1}', 'bench');
SQL
cat >"$dir/plaintags" <<'SQL'
\set s random(1, 100000)
\set t random(1, 1000)
\set u random(1, 100)
INSERT INTO plain (stream, version, type, data, category, tags) VALUES ('bench-' || :s, nextval('plain_version'), 'Tick', '{"n": 1}', 'bench',
    ARRAY['entity:' || :s, 'group:' || :t, 'region:' || :u]);
SQL
cat >"$dir/batch" <<'SQL'
\set s random(1, 1000000000)
SELECT esrc.append_batch('dec-' || :s, jsonb_build_array(jsonb_build_object('type', 'Decided', 'data', '{"n": 1}'::jsonb,
       'tags', jsonb_build_array('key:' || :s))));
SQL
cat >"$dir/cond" <<'SQL'
\set s random(1, 1000000000)
SELECT esrc.append_if('dec-' || :s, jsonb_build_array(jsonb_build_object('type', 'Decided', 'data', '{"n": 1}'::jsonb,
       'tags', jsonb_build_array('key:' || :s))),
       jsonb_build_object('fail_if_events_match', jsonb_build_object('items', jsonb_build_array(
           jsonb_build_object('types', '["Decided"]'::jsonb, 'tags', jsonb_build_array('key:' || :s)))), 'after', esrc.safe_position()));
SQL
cat >"$dir/hot" <<'SQL'
\set s random(1, 1000000000)
SELECT esrc.append_if('hot-' || :s, '[{"type": "Decided", "data": {"n": 1}, "tags": ["key:hot"]}]',
       jsonb_build_object('fail_if_events_match', '{"items": [{"types": ["Decided"], "tags": ["key:hot"]}]}'::jsonb,
                          'after', esrc.safe_position()));
SQL

echo "bench/dcb: $clients clients, ${secs}s per run, $rounds rounds, $(nproc) cores (shared machine), pgbench -M $mode"
declare -A this
declare -A res
for r in $(seq 1 "$rounds"); do
    for sc in off on; do
        if [ $((r % 2)) = 1 ]; then order="tagged untagged plain plaintags"; else order="plaintags plain untagged tagged"; fi
        for f in $order; do this[$f]=$(PGOPTIONS="-c synchronous_commit=$sc" bench $f -M "$mode"); done
        printf '  round %d, synchronous_commit %-3s: append 3 tags %s, no tags %s; plain INSERT %s, with 3 tags %s tx/s\n' \
            "$r" $sc "${this[tagged]}" "${this[untagged]}" "${this[plain]}" "${this[plaintags]}"
        res[tag$sc]="${res[tag$sc]:-} $(ratio "${this[tagged]}" "${this[untagged]}")"
        res[plain$sc]="${res[plain$sc]:-} $(ratio "${this[untagged]}" "${this[plain]}")"
        res[ptag$sc]="${res[ptag$sc]:-} $(ratio "${this[plaintags]}" "${this[plain]}")"
    done
    if [ $((r % 2)) = 1 ]; then order="cond batch"; else order="batch cond"; fi
    for f in $order; do this[$f]=$(bench $f); done
    printf '  round %d: append_if disjoint %s, append_batch %s tx/s\n' "$r" "${this[cond]}" "${this[batch]}"
    res[cond]="${res[cond]:-} $(ratio "${this[cond]}" "${this[batch]}")"
    q -c "CHECKPOINT"
done
for sc in off on; do
    echo "  synchronous_commit $sc: append 3 tags / no tags: median $(median "${res[tag$sc]}")x (${res[tag$sc]} ) (target >= 0.85x)"
    echo "  synchronous_commit $sc: plain INSERT with 3 tags / without: median $(median "${res[ptag$sc]}")x (${res[ptag$sc]} )"
    echo "  synchronous_commit $sc: append no tags / plain INSERT: median $(median "${res[plain$sc]}")x (${res[plain$sc]} )"
done
echo "  append_if disjoint / append_batch: median $(median "${res[cond]}")x (${res[cond]} ) (target >= 0.8x)"

# the backend's CPU per call, one session (1.)
q <<'SQL'
CREATE PROCEDURE cpu_calls(n int, kind text) LANGUAGE plpgsql AS $$
DECLARE s int;
BEGIN
    FOR i IN 1..n LOOP
        s := (random() * 100000)::int;
        IF kind = 'tagged' THEN
            PERFORM esrc.append('cpu-' || s, 'Tick', '{"n": 1}',
                tags => ARRAY['entity:' || s, 'group:' || (s % 1000), 'region:' || (s % 100)]);
        ELSIF kind = 'untagged' THEN
            PERFORM esrc.append('cpu-' || s, 'Tick', '{"n": 1}');
        ELSIF kind = 'plaintags' THEN
            INSERT INTO plain (stream, version, type, data, category, tags) VALUES ('cpu-' || s,
                nextval('plain_version'), 'Tick', '{"n": 1}', 'cpu',
                ARRAY['entity:' || s, 'group:' || (s % 1000), 'region:' || (s % 100)]);
        ELSE
            INSERT INTO plain (stream, version, type, data, category) VALUES ('cpu-' || s,
                nextval('plain_version'), 'Tick', '{"n": 1}', 'cpu');
        END IF;
        COMMIT;
    END LOOP;
END $$;
SQL
cpu_us() {   # cpu_us KIND: backend CPU µs per call
    python3 - "$1" "${BENCH_CPU_CALLS:-5000}" <<'PY'
import os, subprocess, sys
kind, n = sys.argv[1], int(sys.argv[2])
p = subprocess.Popen(['psql', '-qAtX', '-v', 'ON_ERROR_STOP=1', '-c', 'SET synchronous_commit = off', '-f', '-'],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
def q(sql):
    p.stdin.write(sql + "\n"); p.stdin.flush(); return p.stdout.readline().strip()
pid = q("SELECT pg_backend_pid();")
def cpu():
    f = open('/proc/%s/stat' % pid).read().rsplit(')', 1)[1].split()
    return int(f[11]) + int(f[12])
t0 = cpu(); q("CALL cpu_calls(%d, '%s'); SELECT 1;" % (n, kind)); t1 = cpu()
p.stdin.close(); p.wait()
print('%.1f' % ((t1 - t0) * 1e6 / os.sysconf('SC_CLK_TCK') / n))
PY
}
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then order="tagged untagged plain plaintags"; else order="plaintags plain untagged tagged"; fi
    for f in $order; do this[$f]=$(cpu_us $f); done
    printf '  round %d, backend CPU per call: append 3 tags %s, no tags %s; plain INSERT %s, with 3 tags %s µs\n' \
        "$r" "${this[tagged]}" "${this[untagged]}" "${this[plain]}" "${this[plaintags]}"
    res[cputag]="${res[cputag]:-} $(ratio "${this[untagged]}" "${this[tagged]}")"
    res[cpuplain]="${res[cpuplain]:-} $(ratio "${this[plain]}" "${this[plaintags]}")"
done
echo "  backend CPU, append no tags / 3 tags: median $(median "${res[cputag]}")x (${res[cputag]} ) (target >= 0.85x)"
echo "  backend CPU, plain INSERT no tags / 3 tags: median $(median "${res[cpuplain]}")x (${res[cpuplain]} )"
hot=$(bench hot --max-tries=1000)
retries=$(awk '/number of transactions retried/{print $5 $6}' "$dir/hot.out")
echo "  append_if on one hot tag: $hot tx/s, retried: ${retries:-0} (serialized)"
[ -z "${BENCH_APPENDS_ONLY:-}" ] || exit 0

# 3. read_query of a rare tag at two sizes (a database each)
fill() {   # fill DB N: N events with 3 tags (1,000 per batch), one rare tag in the middle
    local db=$1 n=$2
    q -c "CREATE DATABASE $db"
    q -d "$db" -c "CREATE EXTENSION esrc"
    q -d "$db" -c "SELECT count(*) FROM (SELECT esrc.append_batch('fill-' || b, (SELECT jsonb_agg(jsonb_build_object(
        'type', 'Tick', 'data', '{}'::jsonb, 'tags', jsonb_build_array('entity:' || (b * 1000 + i), 'group:' || (i % 1000), 'region:' || (b % 100))))
        FROM generate_series(1, 1000) i)) FROM generate_series(1, $n / 2000) b) s" >/dev/null
    q -d "$db" -c "SELECT esrc.append('rare-1', 'Rare', '{}', tags => ARRAY['rare:1'])" >/dev/null
    q -d "$db" -c "SELECT count(*) FROM (SELECT esrc.append_batch('fill-' || b, (SELECT jsonb_agg(jsonb_build_object(
        'type', 'Tick', 'data', '{}'::jsonb, 'tags', jsonb_build_array('entity:' || (b * 1000 + i), 'group:' || (i % 1000), 'region:' || (b % 100))))
        FROM generate_series(1, 1000) i)) FROM generate_series($n / 2000 + 1, $n / 1000) b) s" >/dev/null
    q -d "$db" -c "VACUUM ANALYZE esrc.events"
}
cat >"$dir/rare" <<'SQL'
SELECT count(*) FROM esrc.read_query('{"items": [{"tags": ["rare:1"]}]}');
SQL
t0=$(date +%s); fill small "$small"; fill big "$big"; t1=$(date +%s)
echo "  filled $small and $big events with 3 tags in $((t1 - t0)) s"
r3=
for r in $(seq 1 "$rounds"); do
    s=$(PGDATABASE=small bench rare -M prepared); b=$(PGDATABASE=big bench rare -M prepared)
    printf '  round %d: read_query of a rare tag: %s calls/s at %s events, %s at %s\n' "$r" "$s" "$small" "$b" "$big"
    r3="$r3 $(python3 -c "print('%.3f' % ($s / $b))")"
done
echo "  read_query time at $big / at $small events: median $(median "$r3")x ($r3 ) (target <= 1.5x)"
q -d big -At -c "SELECT line FROM esrc.explain_query('{\"items\": [{\"tags\": [\"rare:1\"]}]}') line" | sed 's/^/    /'

# 4. space per 1M events
for kind in notags tags; do
    q -c "CREATE DATABASE sp_$kind"
    q -d "sp_$kind" -c "CREATE EXTENSION esrc"
    if [ $kind = tags ]; then
        tags="'tags', jsonb_build_array('entity:' || (b * 1000 + i), 'group:' || (i % 1000), 'region:' || (b % 100)),"
    else tags=""; fi
    q -d "sp_$kind" -c "SELECT count(*) FROM (SELECT esrc.append_batch('fill-' || b, (SELECT jsonb_agg(jsonb_build_object(
        $tags 'type', 'Tick', 'data', '{\"n\": 1}'::jsonb)) FROM generate_series(1, 1000) i))
        FROM generate_series(1, $space / 1000) b) s" >/dev/null
    q -d "sp_$kind" -c "VACUUM esrc.events"
    size=$(q -d "sp_$kind" -c "SELECT pg_total_relation_size('esrc.events')")
    idx=$(q -d "sp_$kind" -c "SELECT coalesce(pg_relation_size(to_regclass('esrc.events_tags_idx')), 0)")
    printf '  space per 1M events, %-6s: %d MB (tag index %d MB)\n' $kind \
        $((size * 1000000 / space / 1048576)) $((idx * 1000000 / space / 1048576))
done
