#!/usr/bin/env bash
# bench/projection-wait/run.sh: read-your-writes latency, the commit of a
# projection worker's batch -> the session waiting for it returns, for
# esrc.wait_for_projection (woken by the commit) and, in the same run, for
# a polling loop that checks the read model every 1 ms (pg_sleep(0.001)).
#
#   bash bench/projection-wait/run.sh      (as root or a sudoer, like test/all.sh)
#   BENCH_SECONDS=10 BENCH_RATE=1000 BENCH_WAITERS=4 bash bench/projection-wait/run.sh
#
# A background load of $BENCH_RATE (1,000) appends/s (pgbench -R, 8
# clients) to the projection's category keeps the worker busy, as in an
# application.  $BENCH_WAITERS (4) pgbench clients each loop: append one
# event to a new stream, commit, wait for its position (one mode per
# phase: "wait" = esrc.wait_for_projection, "poll" = a PL/pgSQL loop over
# the read model with pg_sleep(0.001)), then record
#   clock_timestamp() when the wait returned
#     - pg_xact_commit_timestamp(xmin of the projected row)
# (track_commit_timestamp = on): the stream is new, so its row has one
# version, written by the worker's batch that applied the event.  Each
# phase runs $BENCH_SECONDS (10) s; the first second is dropped.  Prints
# p50/p90/p99/max per mode and the waiters' rate.  Nothing is asserted.
# Targets (issue 31): wait p50 <= 1 ms, p99 <= 5 ms.
set -euo pipefail
ESRC_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ESRC_ROOT/test/lib.sh"

SECS=${BENCH_SECONDS:-10}
RATE=${BENCH_RATE:-1000}
WAITERS=${BENCH_WAITERS:-4}

ensure_deps
[ -n "${BENCH_NO_BUILD:-}" ] || build_install
dir=$(test_tmpdir bench-projwait)
port=$(free_port)
loadpid=
cleanup() {
    [ -n "$loadpid" ] && kill "$loadpid" 2>/dev/null || true
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "max_connections = 40" "shared_buffers = 128MB" \
    "track_commit_timestamp = on" "esrc.projection_workers = 1"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
echo "bench/projection-wait: postgres $("$PG_BINDIR/postgres" --version | cut -d' ' -f3), $(nproc) cores," \
     "esrc $(git -C "$ESRC_ROOT" log -1 --format=%h 2>/dev/null || echo '?'), $(date -u +%Y-%m-%d)"

psql -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION esrc;
CREATE TABLE public.rm (stream text PRIMARY KEY, pos bigint NOT NULL);
CREATE FUNCTION public.apply(e esrc.event) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.rm VALUES (e.stream, e.position)
    ON CONFLICT (stream) DO UPDATE SET pos = excluded.pos
$$;
SELECT esrc.create_projection('rm', 'public.apply(esrc.event)', ARRAY['order']);
CREATE TABLE public.lat (mode text, started timestamptz, ms float8);
CREATE PROCEDURE public.waiter(mode text) LANGUAGE plpgsql AS $$
DECLARE
    s text := 'order-w' || pg_catalog.gen_random_uuid();
    p bigint;
    r text;
    t0 timestamptz := clock_timestamp();
    woke timestamptz;
BEGIN
    PERFORM esrc.append(s, 'Placed', '{}');
    COMMIT;
    p := esrc.last_position();
    IF mode = 'wait' THEN
        r := esrc.wait_for_projection('rm', p, '10s');
    ELSE
        LOOP
            EXIT WHEN EXISTS (SELECT 1 FROM public.rm WHERE stream = s);
            PERFORM pg_sleep(0.001);
        END LOOP;
        r := 'applied';
    END IF;
    woke := clock_timestamp();
    IF r = 'applied' THEN
        INSERT INTO public.lat
        SELECT mode, t0, extract(epoch FROM woke - pg_xact_commit_timestamp(xmin)) * 1000
          FROM public.rm WHERE stream = s;
    END IF;
    COMMIT;
END
$$;
SQL

cat >"$dir/load.sql" <<'EOF'
\set s random(1, 10000)
SELECT esrc.append('order-' || :s, 'Appended', '{}');
EOF
"$PG_BINDIR/pgbench" -n -c 8 -j 2 -R "$RATE" -T $((2 * SECS + 4)) -f "$dir/load.sql" >"$dir/load.log" 2>&1 &
loadpid=$!
sleep 1
for mode in wait poll; do
    echo "CALL public.waiter('$mode');" >"$dir/$mode.sql"
    "$PG_BINDIR/pgbench" -n -c "$WAITERS" -j 2 -T "$SECS" -f "$dir/$mode.sql" >"$dir/$mode.log" 2>&1 \
        || { cat "$dir/$mode.log"; die "pgbench $mode failed"; }
done
wait "$loadpid" || true
loadpid=
echo "load: $(grep -o 'tps = [0-9.]*' "$dir/load.log" | head -1) appends/s in the background"
psql -qX -v ON_ERROR_STOP=1 <<'SQL'
WITH t AS (SELECT mode, ms, started - min(started) OVER (PARTITION BY mode) AS since FROM public.lat)
SELECT mode, count(*) AS waits,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3) AS p50_ms,
       round(percentile_cont(0.9) WITHIN GROUP (ORDER BY ms)::numeric, 3) AS p90_ms,
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 3) AS p99_ms,
       round(max(ms)::numeric, 3) AS max_ms
  FROM t WHERE since >= interval '1 second' GROUP BY mode ORDER BY mode DESC;
SQL
