#!/usr/bin/env bash
# bench/projection/run.sh: projections (esrc.create_projection, applied by
# the background workers) next to the same handler applied inline, measured
# in the same run on the same throwaway cluster.
#
#   bash bench/projection/run.sh          (as root or a sudoer, like test/all.sh)
#   BENCH_EVENTS=200000 BENCH_LAT_SECONDS=10 BENCH_APPEND_SECONDS=5 \
#   BENCH_ROUNDS=2 bash bench/projection/run.sh
#
# The handler everywhere is one statement, INSERT ... ON CONFLICT DO UPDATE
# (an SQL function): per stream, a count, the last position, the time.
#
# 1. latency, commit of an append -> its projected row committed, at
#    $BENCH_RATE (1,000) appends/s (one event per transaction, Poisson
#    arrivals: pgbench -R) from 8 writers for $BENCH_LAT_SECONDS (15) s,
#    1 projection, 1 partition, 1 worker.  The latency handler keys its
#    upsert by (stream, version), so every event leaves a row version of
#    its own; with track_commit_timestamp = on,
#      pg_xact_commit_timestamp(projected row's xmin)
#        - pg_xact_commit_timestamp(event row's xmin)
#    is exactly commit -> visible, on the server's clock, no polling.  Also
#    commit -> handler ran (clock_timestamp() in the row).  The first 2 s are
#    warm-up.  p50/p90/p99/max.  The issue's targets: p50 <= 5 ms, p99 <= 25 ms.
# 2. catch-up: $BENCH_EVENTS (1,000,000) events stored in 1,000 streams (one
#    category), projected from the beginning by a new projection, for
#    (projection_workers, partitions) in $BENCH_CATCHUP (1x1 1x4 2x4); from
#    create_projection's commit to the commit of its last batch (commit
#    timestamps again).  The workers are running already (a projection of an
#    idle category keeps them up), so their start is not counted.
#    Baseline: the same handler called by an AFTER INSERT ... FOR EACH ROW
#    trigger on a copy of esrc.events, fed by INSERT INTO copy SELECT * FROM
#    esrc.events, 100 events per transaction (the projection's default
#    batch_size; one transaction over a million upserts of 1,000 rows would
#    measure HOT chains that never get pruned, not the handler).  Also, for
#    reference, the handler called from a plain SELECT over the same events,
#    100 per transaction (no trigger, no copy).  Every result table is
#    checked against the log (count and last position per stream).
# 3. append throughput: pgbench, 8 clients, esrc.append of one event per
#    transaction, $BENCH_APPEND_SECONDS (8) s, with:
#      none    no projection (besides the idle keep-alive)
#      proj3   3 projections of the load's category (start 'end'), each
#              into its own table
#      batch3  the same 3 projections with batch handlers (events
#              esrc.event[]): one INSERT ... SELECT ... GROUP BY ... ON
#              CONFLICT per batch instead of one upsert per event
#      slow3   3 projections whose handler also does pg_sleep(0.001): the
#              workers fall behind; appends must not slow down
#    $BENCH_ROUNDS (3) rounds alternate the variants; the best round of
#    each counts; ratios to "none" of the bests, the median of the
#    per-round ratios.  Also how many of the run's events the projections
#    had applied when pgbench ended.  The workers share the 2 cores with the
#    writers: proj3's ratio includes their work.
#    And the hand-written floor (floor): the same appends with the same 3
#    upserts inline, in the appending transaction (one statement: esrc.append
#    and three INSERT ... ON CONFLICT in data-modifying CTEs; last_position
#    is the version, esrc.append's result).  Every round of proj3/batch3
#    ends with nothing behind: the round waits until the projections have
#    applied every event of the run (how many were behind when pgbench
#    ended and how long they took is printed; a round behind by more than
#    a second of appends is named).  Ratios to none and to floor are of
#    the same round.
# 5. pacing: a $BENCH_PACE_SECONDS (30) s burst from 8 clients with no
#    projection, with the 3 per-event projections unpaced, and with them
#    paced (esrc.projection_cost_delay and _cost_limit = $BENCH_PACE,
#    "100ms 200"); the peak lag of the slowest projection (events, sampled
#    every second, and seconds at the end of the burst), the time to catch
#    up after the burst and the catch-up rate.
# 6. cpu: at a fixed $BENCH_CPU_RATE (2000) appends/s for $BENCH_CPU_SECONDS
#    (10) s, the projection worker's CPU time per 1,000 applied events
#    (/proc/PID/stat), 3 per-event and 3 batch projections
#    ($BENCH_CPU_VARIANTS; also proj3b1: batch_size 1): how levers are
#    compared on a shared machine.
# 4. batch_size 1, 100, 1000 ($BENCH_BATCH_SIZES) on the catch-up of the
#    first $BENCH_BATCH_EVENTS (50,000) events' worth of a category of its
#    own (1 worker, 1 partition).
# 7. ratio (runs after 3): the ratios of 3 and 5 again, each against no
#    projection in 10 s windows interleaved in the same run, with the
#    machine's own spread (an A/A set) and appends per CPU-second; see the
#    section's comment.
#
# Other knobs: BENCH_NO_BUILD=1 (skip make install), BENCH_SKIP="latency
# catchup append pace cpu batch ratio" (sections to leave out), BENCH_CONF="name = value;
# ..." (more server settings, e.g. "esrc.projection_batch_delay = 20ms"),
# KEEP=1.
# Nothing is asserted beyond the result checks; prints "name value" lines.
set -euo pipefail
ESRC_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ESRC_ROOT/test/lib.sh"

EVENTS=${BENCH_EVENTS:-1000000}
RATE=${BENCH_RATE:-1000}
LAT_SECS=${BENCH_LAT_SECONDS:-15}
APP_SECS=${BENCH_APPEND_SECONDS:-8}
ROUNDS=${BENCH_ROUNDS:-3}
CATCHUP=${BENCH_CATCHUP:-1x1 1x4 2x4}
BATCH_EVENTS=${BENCH_BATCH_EVENTS:-50000}
BATCH_SIZES=${BENCH_BATCH_SIZES:-1 100 1000}
SKIP=" ${BENCH_SKIP:-} "
PACE_SECS=${BENCH_PACE_SECONDS:-30}
PACE_CONF=${BENCH_PACE:-100ms 200}

ensure_deps
[ -n "${BENCH_NO_BUILD:-}" ] || build_install
dir=$(test_tmpdir bench-projection)
port=$(free_port)
cleanup() {
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
conf=()
[ -z "${BENCH_CONF:-}" ] || IFS=';' read -ra conf <<<"$BENCH_CONF"
pg_start "$dir" "$port" "max_connections = 60" "shared_buffers = 256MB" "max_wal_size = 4GB" \
    "track_commit_timestamp = on" "esrc.projection_workers = 1" ${conf[@]+"${conf[@]}"}
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
sql() { psql -qAtX -v ON_ERROR_STOP=1 -c "$1"; }
ratio() { python3 -c "print('%.2f' % ($1 / $2))"; }
median() { python3 -c "import statistics, sys; print('%.2f' % statistics.median(map(float, sys.argv[1:])))" $1; }
now_us() { echo $(( $(date +%s%N) / 1000 )); }
echo "bench/projection: postgres $("$PG_BINDIR/postgres" --version | cut -d' ' -f3), $(nproc) cores," \
     "esrc $(git -C "$ESRC_ROOT" log -1 --format=%h 2>/dev/null || echo '?'), $(date -u +%Y-%m-%d)"

psql -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION esrc;
-- The handler of the throughput measurements: one upsert per event, keyed
-- by stream.  Handlers run with search_path = pg_catalog, pg_temp, so the
-- table is qualified.
CREATE TABLE public.bench_counts (stream text PRIMARY KEY, n bigint NOT NULL,
                                  last_position bigint NOT NULL, updated_at timestamptz NOT NULL);
CREATE FUNCTION public.bench_handler(e esrc.event) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.bench_counts VALUES (e.stream, 1, e.position, clock_timestamp())
    ON CONFLICT (stream) DO UPDATE
        SET n = bench_counts.n + 1, last_position = excluded.last_position,
            updated_at = excluded.updated_at
$$;
-- The latency handler: the same statement keyed by (stream, version), so
-- that each event leaves its own row version (and its commit timestamp).
CREATE TABLE public.lat_rows (stream text, version bigint, position bigint NOT NULL,
                              applied_at timestamptz NOT NULL, PRIMARY KEY (stream, version));
CREATE FUNCTION public.lat_handler(e esrc.event) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.lat_rows VALUES (e.stream, e.version, e.position, clock_timestamp())
    ON CONFLICT (stream, version) DO UPDATE
        SET position = excluded.position, applied_at = excluded.applied_at
$$;
-- The baseline: the same handler inline, in an AFTER INSERT row trigger.
CREATE TABLE public.copy_events (LIKE esrc.events);
CREATE FUNCTION public.copy_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM public.bench_handler(ROW(NEW.position, NEW.stream, NEW.version, NEW.type, NEW.data,
                                     NEW.metadata, NEW.id, NEW.recorded_at)::esrc.event);
    RETURN NULL;
END $$;
CREATE TRIGGER copy_apply AFTER INSERT ON public.copy_events
    FOR EACH ROW EXECUTE FUNCTION public.copy_trigger();
-- Keeps the workers of this database running between measurements.
CREATE FUNCTION public.idle_handler(e esrc.event) RETURNS void LANGUAGE sql AS 'SELECT';
SELECT esrc.create_projection('keepalive', 'public.idle_handler(esrc.event)', ARRAY['idle']);
SQL

# projection_workers N: set it (reload) and wait for the launcher to run N.
workers() {
    local n=$1 i have=
    sql "ALTER SYSTEM SET esrc.projection_workers = $n" >/dev/null
    sql "SELECT pg_reload_conf()" >/dev/null
    for i in $(seq 1 100); do
        have=$(sql "SELECT count(*) FROM pg_stat_activity
                    WHERE backend_type LIKE 'esrc projection worker%'
                       OR application_name LIKE 'esrc projection worker%'")
        [ "$have" = "$n" ] && return 0
        sleep 0.1
    done
    echo "  (note: $have projection workers running 10 s after esrc.projection_workers = $n)"
}
# applied NAME: events the projection NAME has applied (sum over partitions)
applied() {
    sql "SELECT coalesce(sum(pp.applied), 0) FROM esrc.projection_partitions pp
         JOIN esrc.projections p ON p.id = pp.projection_id WHERE p.name = '$1'"
}
# wait_applied NAME N: until NAME applied N events; dies if a partition is
# retrying or blocked (with its error)
wait_applied() {
    local name=$1 n=$2 a bad
    while :; do
        a=$(applied "$name")
        [ "$a" -ge "$n" ] && return 0
        bad=$(sql "SELECT format('%s partition %s %s at %s: %s', projection, partition, state,
                                 blocked_position, last_error)
                   FROM esrc.projection_status
                   WHERE projection = '$name' AND state IN ('retrying', 'blocked') LIMIT 1")
        [ -z "$bad" ] || die "$bad"
        sleep 0.05
    done
}
# the commit time (µs since the epoch) of the newest row version of TABLE
last_commit_us() {
    sql "SELECT (extract(epoch FROM max(pg_xact_commit_timestamp(xmin))) * 1000000)::bigint FROM $1"
}
workers 1

# --- 1. latency ---------------------------------------------------------
if [[ $SKIP != *" latency "* ]]; then
    log "latency: $RATE appends/s from 8 writers for ${LAT_SECS}s, 1 projection"
    echo "SELECT esrc.append('lat-' || (random() * 100)::int, 'Tick', '{\"x\": 1}');" >"$dir/lat.sql"
    sql "SELECT esrc.create_projection('lat', 'public.lat_handler(esrc.event)', ARRAY['lat'], start => 'end')" >/dev/null
    sleep 1
    wall0=$(now_us)
    lo=$(sql "SELECT coalesce(max(position), 0) FROM esrc.events")
    "$PG_BINDIR/pgbench" -n -c 8 -j 2 -R "$RATE" -T "$LAT_SECS" -f "$dir/lat.sql" >"$dir/pgbench.lat" 2>&1 \
        || { cat "$dir/pgbench.lat"; die "pgbench failed"; }
    n=$(sql "SELECT count(*) FROM esrc.events WHERE category = 'lat'")
    wait_applied lat "$n"
    psql -qAtX -v ON_ERROR_STOP=1 <<EOF
CREATE TEMP TABLE ev AS
  SELECT (extract(epoch FROM pg_xact_commit_timestamp(e.xmin)) * 1000000)::bigint AS commit_us,
         (extract(epoch FROM pg_xact_commit_timestamp(r.xmin)) * 1000000)::bigint AS visible_us,
         (extract(epoch FROM r.applied_at) * 1000000)::bigint AS ran_us
  FROM esrc.events e LEFT JOIN public.lat_rows r USING (stream, version)
  WHERE e.category = 'lat' AND e.position > $lo;
DELETE FROM ev WHERE commit_us < $wall0 + 2000000;
SELECT format('latency_commit_to_visible n=%s missed=%s p50=%sms p90=%sms p99=%sms max=%sms',
              count(visible_us), count(*) - count(visible_us),
              round(percentile_disc(0.5) WITHIN GROUP (ORDER BY visible_us - commit_us) / 1000.0, 2),
              round(percentile_disc(0.9) WITHIN GROUP (ORDER BY visible_us - commit_us) / 1000.0, 2),
              round(percentile_disc(0.99) WITHIN GROUP (ORDER BY visible_us - commit_us) / 1000.0, 2),
              round(max(visible_us - commit_us) / 1000.0, 2))
FROM ev;
SELECT format('latency_commit_to_handler p50=%sms p90=%sms p99=%sms',
              round(percentile_disc(0.5) WITHIN GROUP (ORDER BY ran_us - commit_us) / 1000.0, 2),
              round(percentile_disc(0.9) WITHIN GROUP (ORDER BY ran_us - commit_us) / 1000.0, 2),
              round(percentile_disc(0.99) WITHIN GROUP (ORDER BY ran_us - commit_us) / 1000.0, 2))
FROM ev;
SELECT format('latency_projected_batches %s batches of %s events on average',
              count(DISTINCT xmin::text), round(count(*)::numeric / greatest(count(DISTINCT xmin::text), 1), 1))
FROM public.lat_rows;
EOF
    echo "latency_writers $(awk '/^tps = /{printf "%.0f appends/s", $3}' "$dir/pgbench.lat"), mean statement latency $(awk '/^latency average/{print $4}' "$dir/pgbench.lat") ms  (targets: p50 <= 5 ms, p99 <= 25 ms)"
    sql "SELECT esrc.drop_projection('lat')" >/dev/null
fi

# --- 2. catch-up -------------------------------------------------------
if [[ $SKIP != *" catchup "* ]]; then
    log "filling the log with $EVENTS events in 1000 streams"
    for ((r = 0; r < EVENTS / 10000; r++)); do
        # 1000 streams x 10 events per statement: streams interleave in the log
        sql "SELECT count(esrc.append_batch('thru-' || s,
                 (SELECT jsonb_agg(jsonb_build_object('type', 'Tick',
                          'data', jsonb_build_object('i', $r * 10 + i, 'pad', repeat('x', 70))))
                  FROM generate_series(1, 10) i)))
             FROM generate_series(1, 1000) s" >/dev/null
    done
    N=$(sql "SELECT count(*) FROM esrc.events WHERE category = 'thru'")
    read -r plo phi <<<"$(sql "SELECT min(position), max(position) FROM esrc.events WHERE category = 'thru'" | tr '|' ' ')"
    sql "VACUUM (ANALYZE) esrc.events" >/dev/null
    sql "CHECKPOINT" >/dev/null
    # check TABLE: every stream's count and last position as in the log
    check() {
        local bad
        bad=$(sql "SELECT count(*) FROM (SELECT stream, count(*) AS n, max(position) AS p
                                          FROM esrc.events WHERE category = 'thru' GROUP BY 1) l
                   FULL JOIN public.bench_counts c USING (stream)
                   WHERE c.n IS DISTINCT FROM l.n OR c.last_position IS DISTINCT FROM l.p")
        [ "$bad" = 0 ] || die "$1: $bad streams of bench_counts differ from the log"
    }
    eps() { python3 -c "print('%.0f' % ($1 / (($3 - $2) / 1e6)))"; }

    # baseline: the trigger on a copy, 100 events per transaction
    sql "TRUNCATE public.bench_counts" >/dev/null
    t0=$(now_us)
    sql "DO \$\$ DECLARE lo bigint := $plo - 1; BEGIN
           WHILE lo < $phi LOOP
             INSERT INTO public.copy_events SELECT * FROM esrc.events
               WHERE category = 'thru' AND position > lo AND position <= lo + 100;
             lo := lo + 100; COMMIT;
           END LOOP; END \$\$" >/dev/null
    t1=$(now_us)
    check trigger
    trig=$(eps "$N" "$t0" "$t1")
    echo "catchup_baseline_row_trigger_batch100 events $N events_per_s $trig"
    sql "TRUNCATE public.bench_counts, public.copy_events" >/dev/null
    sql "VACUUM public.bench_counts" >/dev/null
    t0=$(now_us)
    sql "DO \$\$ DECLARE lo bigint := $plo - 1; BEGIN
           WHILE lo < $phi LOOP
             PERFORM public.bench_handler(ROW(position, stream, version, type, data, metadata,
                                              id, recorded_at)::esrc.event)
               FROM esrc.events WHERE category = 'thru' AND position > lo AND position <= lo + 100
               ORDER BY position;
             lo := lo + 100; COMMIT;
           END LOOP; END \$\$" >/dev/null
    t1=$(now_us)
    check plain
    plain=$(eps "$N" "$t0" "$t1")
    echo "catchup_reference_plain_select_batch100 events $N events_per_s $plain  $(ratio "$plain" "$trig")x of the trigger"

    catchup() { # NAME WORKERS PARTITIONS BATCH_SIZE CATEGORY EVENTS BASELINE_EPS LABEL
        local name=$1 w=$2 p=$3 b=$4 cat=$5 n=$6 base=$7 t0 t1 e
        workers "$w"
        sql "TRUNCATE public.bench_counts" >/dev/null
        sql "VACUUM public.bench_counts" >/dev/null
        sql "CHECKPOINT" >/dev/null
        sql "SELECT esrc.create_projection('$name', 'public.bench_handler(esrc.event)', ARRAY['$cat'],
                                           partitions => $p, batch_size => $b)" >/dev/null
        t0=$(sql "SELECT (extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::bigint
                  FROM esrc.projections WHERE name = '$name'")
        wait_applied "$name" "$n"
        t1=$(last_commit_us public.bench_counts)
        e=$(eps "$n" "$t0" "$t1")
        echo "$8 events $n seconds $(python3 -c "print('%.2f' % (($t1 - $t0) / 1e6))") events_per_s $e  $(ratio "$e" "$base")x of the trigger"
        sql "SELECT esrc.drop_projection('$name')" >/dev/null
    }
    log "catch-up of $N events: $CATCHUP (workers x partitions)"
    for wp in $CATCHUP; do
        w=${wp%x*} p=${wp#*x}
        catchup "c$w$p" "$w" "$p" 100 thru "$N" "$trig" "catchup_projection_workers${w}_partitions${p}_batch100"
        check "projection $wp"
    done
    workers 1
fi

# --- 3. append throughput with projections -----------------------------
if [[ $SKIP != *" append "* || $SKIP != *" pace "* || $SKIP != *" cpu "* || $SKIP != *" ratio "* ]]; then
    psql -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE TABLE public.load_counts1 (LIKE public.bench_counts INCLUDING ALL);
CREATE TABLE public.load_counts2 (LIKE public.bench_counts INCLUDING ALL);
CREATE TABLE public.load_counts3 (LIKE public.bench_counts INCLUDING ALL);
CREATE FUNCTION public.load_handler1(e esrc.event) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.load_counts1 VALUES (e.stream, 1, e.position, clock_timestamp())
    ON CONFLICT (stream) DO UPDATE SET n = load_counts1.n + 1, last_position = excluded.last_position,
                                       updated_at = excluded.updated_at $$;
CREATE FUNCTION public.load_handler2(e esrc.event) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.load_counts2 VALUES (e.stream, 1, e.position, clock_timestamp())
    ON CONFLICT (stream) DO UPDATE SET n = load_counts2.n + 1, last_position = excluded.last_position,
                                       updated_at = excluded.updated_at $$;
CREATE FUNCTION public.load_handler3(e esrc.event) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.load_counts3 VALUES (e.stream, 1, e.position, clock_timestamp())
    ON CONFLICT (stream) DO UPDATE SET n = load_counts3.n + 1, last_position = excluded.last_position,
                                       updated_at = excluded.updated_at $$;
CREATE FUNCTION public.load_batch1(es esrc.event[]) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.load_counts1
    SELECT e.stream, count(*), max(e.position), clock_timestamp() FROM unnest(es) e GROUP BY e.stream
    ON CONFLICT (stream) DO UPDATE SET n = load_counts1.n + excluded.n, last_position = excluded.last_position,
                                       updated_at = excluded.updated_at $$;
CREATE FUNCTION public.load_batch2(es esrc.event[]) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.load_counts2
    SELECT e.stream, count(*), max(e.position), clock_timestamp() FROM unnest(es) e GROUP BY e.stream
    ON CONFLICT (stream) DO UPDATE SET n = load_counts2.n + excluded.n, last_position = excluded.last_position,
                                       updated_at = excluded.updated_at $$;
CREATE FUNCTION public.load_batch3(es esrc.event[]) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.load_counts3
    SELECT e.stream, count(*), max(e.position), clock_timestamp() FROM unnest(es) e GROUP BY e.stream
    ON CONFLICT (stream) DO UPDATE SET n = load_counts3.n + excluded.n, last_position = excluded.last_position,
                                       updated_at = excluded.updated_at $$;
CREATE FUNCTION public.slow_handler(e esrc.event) RETURNS void LANGUAGE sql AS $$
    SELECT pg_sleep(0.001);
    INSERT INTO public.load_counts1 VALUES (e.stream, 1, e.position, clock_timestamp())
    ON CONFLICT (stream) DO UPDATE SET n = load_counts1.n + 1, last_position = excluded.last_position,
                                       updated_at = excluded.updated_at $$;
SQL
    echo "\\set s random(1, 10000)
SELECT esrc.append('load-' || :s, 'Tick', '{\"n\": 1, \"pad\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}');" >"$dir/load.sql"
    # the hand-written floor: the same append and the same 3 upserts inline,
    # in the appending transaction, one statement (one round trip)
    cat >"$dir/floor.sql" <<'EOF2'
\set s random(1, 10000)
WITH a AS (SELECT 'load-' || :s AS stream,
                  esrc.append('load-' || :s, 'Tick', '{"n": 1, "pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}') AS v),
     u1 AS (INSERT INTO public.load_counts1 SELECT stream, 1, v, clock_timestamp() FROM a
            ON CONFLICT (stream) DO UPDATE SET n = load_counts1.n + 1, last_position = excluded.last_position,
                                               updated_at = excluded.updated_at),
     u2 AS (INSERT INTO public.load_counts2 SELECT stream, 1, v, clock_timestamp() FROM a
            ON CONFLICT (stream) DO UPDATE SET n = load_counts2.n + 1, last_position = excluded.last_position,
                                               updated_at = excluded.updated_at),
     u3 AS (INSERT INTO public.load_counts3 SELECT stream, 1, v, clock_timestamp() FROM a
            ON CONFLICT (stream) DO UPDATE SET n = load_counts3.n + 1, last_position = excluded.last_position,
                                               updated_at = excluded.updated_at)
SELECT v FROM a;
EOF2
fi
if [[ $SKIP != *" append "* ]]; then
    declare -A best this ratios kept fratios
    append_run() { # VARIANT
        local v=$1 i projs=() tps lo hi done_=
        case $v in
        proj3) for i in 1 2 3; do
                   sql "SELECT esrc.create_projection('load$i', 'public.load_handler$i(esrc.event)', ARRAY['load'], start => 'end')" >/dev/null
                   projs+=("load$i"); done ;;
        batch3) for i in 1 2 3; do
                   sql "SELECT esrc.create_projection('batch$i', 'public.load_batch$i(esrc.event[])', ARRAY['load'], start => 'end')" >/dev/null
                   projs+=("batch$i"); done ;;
        slow3) for i in 1 2 3; do
                   sql "SELECT esrc.create_projection('slow$i', 'public.slow_handler(esrc.event)', ARRAY['load'], start => 'end')" >/dev/null
                   projs+=("slow$i"); done ;;
        esac
        [ ${#projs[@]} -eq 0 ] || sleep 1
        lo=$(sql "SELECT coalesce(max(position), 0) FROM esrc.events")
        script=load.sql
        [ "$v" != floor ] || script=floor.sql
        tps=$("$PG_BINDIR/pgbench" -n -c 8 -j 2 -T "$APP_SECS" -M prepared -f "$dir/$script" 2>&1 |
            awk '/^tps = /{printf "%.0f", $3}')
        [ -n "$tps" ] || die "pgbench failed ($v)"
        if [ ${#projs[@]} -gt 0 ]; then
            local t0 behind=0 a
            t0=$(now_us)
            hi=$(sql "SELECT count(*) FROM esrc.events WHERE category = 'load' AND position > $lo")
            for s in "${projs[@]}"; do
                a=$(applied "$s"); done_="$done_ $a"; behind=$((behind + hi - a))
            done
            done_="  applied when pgbench ended:$done_ of $hi"
            # keeping up: every round ends with nothing behind (slow3 is
            # allowed to be behind; its backlog is dropped with it)
            if [ "$v" != slow3 ]; then
                for s in "${projs[@]}"; do wait_applied "$s" "$hi"; done
                done_="$done_, $behind behind in all, caught up $(python3 -c "print('%.2f' % (($(now_us) - $t0) / 1e6))") s later"
                # behind by more than a second of appends (per projection)
                [ "$((behind / ${#projs[@]}))" -le "$tps" ] || kept[$v]="${kept[$v]:-} r$r"
            fi
        fi
        for s in "${projs[@]}"; do sql "SELECT esrc.drop_projection('$s')" >/dev/null; done
        printf '  round %d  %-6s %8s appends/s%s\n' "$r" "$v" "$tps" "$done_"
        if [ -z "${best[$v]:-}" ] || [ "$tps" -gt "${best[$v]}" ]; then best[$v]=$tps; fi
        this[$v]=$tps
        sql "TRUNCATE public.load_counts1, public.load_counts2, public.load_counts3" >/dev/null
        sql "CHECKPOINT" >/dev/null
    }
    log "append throughput: 8 clients, ${APP_SECS}s per run, $ROUNDS rounds"
    for r in $(seq 1 "$ROUNDS"); do
        append_run none
        append_run proj3
        append_run batch3
        append_run floor
        append_run slow3
        for v in proj3 batch3 floor slow3; do
            ratios[$v]="${ratios[$v]:-} $(ratio "${this[$v]}" "${this[none]}")"
        done
        for v in proj3 batch3; do
            fratios[$v]="${fratios[$v]:-} $(ratio "${this[$v]}" "${this[floor]}")"
        done
    done
    echo "append_tps_no_projection ${best[none]}"
    echo "append_tps_3_projections ${best[proj3]}  $(ratio "${best[proj3]}" "${best[none]}")x  median $(median "${ratios[proj3]}")x  (${ratios[proj3]} )  (target >= 0.75x, keeping up)"
    echo "append_tps_3_batch_projections ${best[batch3]}  $(ratio "${best[batch3]}" "${best[none]}")x  median $(median "${ratios[batch3]}")x  (${ratios[batch3]} )"
    echo "append_tps_hand_written_floor ${best[floor]}  $(ratio "${best[floor]}" "${best[none]}")x of none  median $(median "${ratios[floor]}")x  (${ratios[floor]} )"
    echo "append_3_projections_vs_floor $(ratio "${best[proj3]}" "${best[floor]}")x  median $(median "${fratios[proj3]}")x  (${fratios[proj3]} )  (same rounds)"
    echo "append_3_batch_projections_vs_floor $(ratio "${best[batch3]}" "${best[floor]}")x  median $(median "${fratios[batch3]}")x  (${fratios[batch3]} )"
    echo "append_rounds_behind_more_than_1s_of_appends_at_end proj3:${kept[proj3]:- none} batch3:${kept[batch3]:- none}"
    echo "append_tps_3_slow_projections ${best[slow3]}  $(ratio "${best[slow3]}" "${best[none]}")x  median $(median "${ratios[slow3]}")x  (${ratios[slow3]} )"
fi

# --- 7 (runs here). interleaved ratios: keeping up, paced burst ----------
# The ratios of sections 3 and 5 compare windows minutes apart, and on a
# shared machine the rate of "none" alone moves 2x between them.  Here each
# ratio is of two windows side by side: a round is $BENCH_RATIO_SECONDS
# (10) s of appends with no projection ("none") and the same with the
# measured configuration, in alternating order (AB, then BA, ...), for
# $BENCH_RATIO_PAIRS (6) rounds; printed: the median of the per-round
# ratios, their min-max, and the machine's 1-minute load average before
# each round (the run's own writers and workers count in it during the
# windows; before a round they are idle).  The projections are created
# once per set and stay; each configuration appends to a category of its
# own (named after it, its streams as many and named alike), so "none"'s
# appends wake no worker and leave nothing to apply.  Before every window
# the projections have applied everything and a CHECKPOINT ran (both
# windows pay the same full-page writes).  Sets ($BENCH_RATIO_SETS):
#   keepup  none / proj3 (the 3 per-event projections, unpaced) / floor
#           (the same upserts inline, section 3), so "against the floor"
#           is of the same round.  "Keeping up" in a window: the lag of
#           the slowest projection (events of its category appended
#           since the window began minus those it applied), sampled every
#           second and at pgbench's end, never exceeded one second of the
#           window's appends (lag_max_s below); the events behind at the
#           end are then applied before the next window, and that time
#           (catchup_s) is printed and also charged: "charged" is the
#           ratio of appends / (window + catch-up) against none's rate, a
#           lower bound that counts the last events' work as if the
#           writers had waited for it.
#   paced   none / paced3 (the same 3 projections with
#           esrc.projection_cost_delay/_limit = $BENCH_PACE): they lag
#           during the window by design; printed are the peak lag, the
#           catch-up time after the window and its rate (the next window
#           starts once they caught up).  The issue's burst is 30 s;
#           the pacing's steady state is reached within a second (a nap
#           per cost_limit events), so 10 s windows measure the same rate.
#   wait    none / fixed3 (the 3 per-event projections with the wait
#           between a worker's rounds fixed at esrc.projection_batch_delay:
#           esrc.projection_batch_delay_max = 0 during its windows) / proj3
#           (the wait following the worker's load, the default); also
#           proj3 against fixed3, of the same round.  Not in the default
#           sets: BENCH_RATIO_SETS="wait".
#   aa      none / none2 (the same appends to another category): the
#           spread the machine alone gives a ratio of 1.00x; a ratio of
#           the sets above is told from 1.00x only outside that spread.
# Besides appends/s, each window's CPU time of the whole cluster (the
# postmaster's reaped children, i.e. the writers' backends, and the live
# processes, workers included; /proc/PID/stat), from before pgbench to
# the end of the catch-up: "cpu" is the ratio of appends per CPU-second
# against none's, the cost of the projections per append, which other
# sessions' load on a shared machine moves much less than appends/s (it
# leaves out waits: the WAL flushes of synchronous_commit are not CPU).
# "cpu_window" counts the window only, without the catch-up after it:
# for the paced set, what the writers pay during the burst.
# The same lag query runs every second in every window, "none" included.
if [[ $SKIP != *" ratio "* ]]; then
    RW=${BENCH_RATIO_SECONDS:-10} RP=${BENCH_RATIO_PAIRS:-6}
    # window CONFIG: sets win_tps, win_lag (max events behind, slowest),
    # win_end (behind at the end), win_catch (s to apply it)
    ratio_script() { # CONFIG -> the pgbench script of CONFIG
        local c=$1 f="$dir/ratio-$1.sql"
        if [ "$c" = floor ]; then
            sed "s/'load-'/'floor-'/g" "$dir/floor.sql" >"$f"
        else
            sed "s/'load-'/'$c-'/g" "$dir/load.sql" >"$f"
        fi
        echo "$f"
    }
    cluster_cpu() { # CPU ticks of the cluster: the postmaster, its reaped children, the live ones
        local pm p t
        pm=$(head -1 "$dir/data/postmaster.pid")
        t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
        for p in $(pgrep -P "$pm"); do
            t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
        done
        echo "$t"
    }
    ratio_projs() { # CONFIG -> the names of its projections
        case $1 in proj3|paced3|fixed3) echo "r${1}1 r${1}2 r${1}3" ;; *) echo "" ;; esac
    }
    lag_of() { # CONFIG LO A0... -> events behind of the slowest projection, events
        # (one statement: the events and the applied counters of one snapshot)
        local c=$1 lo=$2 names a0s; shift 2
        names=$(ratio_projs "$c" | sed "s/\([^ ]*\)/'\1'/g; s/ /,/g")
        a0s=$(IFS=,; echo "$*")
        sql "WITH n AS (SELECT count(*) AS n FROM esrc.events WHERE category = '$c' AND position > $lo),
                  a AS (SELECT p.name, sum(pp.applied) AS a FROM esrc.projection_partitions pp
                        JOIN esrc.projections p ON p.id = pp.projection_id
                        WHERE p.name IN (${names:-NULL}) GROUP BY p.name),
                  z AS (SELECT * FROM unnest(ARRAY[${names:-NULL}]::text[], ARRAY[${a0s:-NULL}]::bigint[]) z(name, a0))
             SELECT coalesce(max(n.n - (a.a - z.a0)), 0) || ' ' || min(n.n)
             FROM n LEFT JOIN z ON true LEFT JOIN a USING (name)"
    }
    # fixed3's windows run with the wait between rounds fixed at
    # esrc.projection_batch_delay (set before the window, reset after it)
    fixed_wait() { # on|off
        if [ "$1" = on ]; then
            sql "ALTER SYSTEM SET esrc.projection_batch_delay_max = 0" >/dev/null
        else
            sql "ALTER SYSTEM RESET esrc.projection_batch_delay_max" >/dev/null
        fi
        sql "SELECT pg_reload_conf()" >/dev/null
        sleep 0.2
    }
    window() { # CONFIG
        local c=$1 lo a0=() s pid t0 lag n x c0 c1
        [ "$c" != fixed3 ] || fixed_wait on
        sql "CHECKPOINT" >/dev/null
        c0=$(cluster_cpu)
        lo=$(sql "SELECT coalesce(max(position), 0) FROM esrc.events")
        for s in $(ratio_projs "$c"); do a0+=("$(applied "$s")"); done
        "$PG_BINDIR/pgbench" -n -c 8 -j 2 -T "$RW" -M prepared -f "$(ratio_script "$c")" >"$dir/pgbench.ratio" 2>&1 &
        pid=$!
        win_lag=0
        while kill -0 "$pid" 2>/dev/null; do
            sleep 1
            read -r lag n <<<"$(lag_of "$c" "$lo" ${a0[@]+"${a0[@]}"})"
            [ "$lag" -le "$win_lag" ] || win_lag=$lag
        done
        wait "$pid" || { cat "$dir/pgbench.ratio"; die "pgbench failed (ratio $c)"; }
        c1=$(cluster_cpu)
        t0=$(now_us)
        read -r win_end n <<<"$(lag_of "$c" "$lo" ${a0[@]+"${a0[@]}"})"
        [ "$win_end" -le "$win_lag" ] || win_lag=$win_end
        win_tps=$(awk '/^tps = /{printf "%.0f", $3}' "$dir/pgbench.ratio")
        x=0
        for s in $(ratio_projs "$c"); do
            x=$((x + 1)); wait_applied "$s" $((n + a0[x - 1]))
        done
        win_catch=$(python3 -c "print('%.2f' % (($(now_us) - $t0) / 1e6))")
        # appends per CPU-second of the cluster, catch-up included
        win_eff=$(python3 -c "print('%.1f' % ($n / max(($(cluster_cpu) - $c0) / $(getconf CLK_TCK), 0.01)))")
        win_effw=$(python3 -c "print('%.1f' % ($n / max(($c1 - $c0) / $(getconf CLK_TCK), 0.01)))")
        [ "$c" != fixed3 ] || fixed_wait off
    }
    pyfmt() { python3 -c "import statistics as s, sys; v = [float(x) for x in sys.argv[1:]]; print('median %.2fx  min %.2fx  max %.2fx  (%s)' % (s.median(v), min(v), max(v), ' '.join('%.2f' % x for x in v)))" $1; }
    ratio_set() { # SET CONFIG... (the first is the baseline)
        local set=$1 c i r order base kept
        shift
        declare -A rs=() ch=() notkept=() cpu=() cpuw=()
        local loads=""
        for c in "$@"; do
            i=0
            for s in $(ratio_projs "$c"); do
                i=$((i + 1))
                sql "SELECT esrc.create_projection('$s', 'public.load_handler$i(esrc.event)', ARRAY['$c'], start => 'end')" >/dev/null
            done
        done
        sleep 1
        for r in $(seq 1 "$RP"); do
            order="$*"
            [ $((r % 2)) = 1 ] || order=$(tr ' ' '\n' <<<"$*" | tac | tr '\n' ' ')
            loads="$loads $(cut -d' ' -f1 /proc/loadavg)"
            declare -A t=() e=() w=()
            for c in $order; do
                window "$c"
                t[$c]=$win_tps
                e[$c]=$win_eff
                w[$c]=$win_effw
                kept=""
                if [ -n "$(ratio_projs "$c")" ]; then
                    kept=$(python3 -c "print('%.2f' % ($win_lag / max($win_tps, 1)))")
                    printf '  %s round %d  %-6s %6s appends/s  %7s appends/cpu-s (%s in the window)  lag_max %s events (%ss of appends)  behind_at_end %s  catchup_s %s\n' \
                        "$set" "$r" "$c" "$win_tps" "$win_eff" "$win_effw" "$win_lag" "$kept" "$win_end" "$win_catch"
                    ch[$c]="${ch[$c]:-} $(python3 -c "print($win_tps * $RW / ($RW + $win_catch))")"
                    if [ "$c" != paced3 ] && python3 -c "import sys; sys.exit(0 if $kept > 1 else 1)"; then
                        notkept[$c]="${notkept[$c]:-} r$r"
                    fi
                else
                    printf '  %s round %d  %-6s %6s appends/s  %7s appends/cpu-s\n' "$set" "$r" "$c" "$win_tps" "$win_eff"
                fi
            done
            base=${t[$1]}
            for c in "${@:2}"; do
                rs[$c]="${rs[$c]:-} $(python3 -c "print(${t[$c]} / max($base, 1))")"
                cpu[$c]="${cpu[$c]:-} $(python3 -c "print(${e[$c]} / max(${e[$1]}, 0.1))")"
                cpuw[$c]="${cpuw[$c]:-} $(python3 -c "print(${w[$c]} / max(${w[$1]}, 0.1))")"
                if [ -n "${ch[$c]:-}" ]; then
                    ch[$c.r]="${ch[$c.r]:-} $(python3 -c "print(${ch[$c]##* } / max($base, 1))")"
                fi
            done
            if [ -n "${t[floor]:-}" ] && [ -n "${t[proj3]:-}" ]; then
                rs[proj3.floor]="${rs[proj3.floor]:-} $(python3 -c "print(${t[proj3]} / max(${t[floor]}, 1))")"
            fi
            if [ -n "${t[fixed3]:-}" ] && [ -n "${t[proj3]:-}" ]; then
                rs[proj3.fixed3]="${rs[proj3.fixed3]:-} $(python3 -c "print(${t[proj3]} / max(${t[fixed3]}, 1))")"
                rs[proj3.fixed3.cpu]="${rs[proj3.fixed3.cpu]:-} $(python3 -c "print(${e[proj3]} / max(${e[fixed3]}, 0.1))")"
            fi
            unset t e w
        done
        for c in "$@"; do
            for s in $(ratio_projs "$c"); do sql "SELECT esrc.drop_projection('$s')" >/dev/null; done
        done
        echo "ratio_${set}_machine load average (1 min) before each round:$loads; $(nproc) cores, shared"
        for c in "${@:2}"; do
            echo "ratio_${set}_${c}_vs_none $(pyfmt "${rs[$c]}")  ($RP rounds of ${RW}s windows)"
            echo "ratio_${set}_${c}_vs_none_appends_per_cpu_second $(pyfmt "${cpu[$c]}")"
            [ -z "$(ratio_projs "$c")" ] || echo "ratio_${set}_${c}_vs_none_appends_per_cpu_second_window_only $(pyfmt "${cpuw[$c]}")"
            [ -z "${ch[$c.r]:-}" ] || echo "ratio_${set}_${c}_vs_none_charged_with_catchup $(pyfmt "${ch[$c.r]}")"
            [ "$c" = paced3 ] || [ -z "$(ratio_projs "$c")" ] || echo "ratio_${set}_${c}_rounds_not_kept_up:${notkept[$c]:- none}  (lag above 1 s of appends)"
        done
        [ -z "${rs[proj3.floor]:-}" ] || echo "ratio_${set}_proj3_vs_floor $(pyfmt "${rs[proj3.floor]}")"
        [ -z "${rs[proj3.fixed3]:-}" ] || echo "ratio_${set}_proj3_vs_fixed3 $(pyfmt "${rs[proj3.fixed3]}")"
        [ -z "${rs[proj3.fixed3.cpu]:-}" ] || echo "ratio_${set}_proj3_vs_fixed3_appends_per_cpu_second $(pyfmt "${rs[proj3.fixed3.cpu]}")"
    }
    for set in ${BENCH_RATIO_SETS:-aa keepup paced}; do
        case $set in
        aa)
            log "interleaved: none / none2 (the machine's own spread), $RP rounds of ${RW}s windows"
            ratio_set aa none none2 ;;
        keepup)
            log "interleaved: none / 3 projections / floor, $RP rounds of ${RW}s windows"
            ratio_set keepup none proj3 floor ;;
        wait)
            log "interleaved: none / 3 projections with the wait between rounds fixed / with it following the load, $RP rounds of ${RW}s windows"
            ratio_set wait none fixed3 proj3 ;;
        paced)
            log "interleaved: none / 3 paced projections ($PACE_CONF), $RP rounds of ${RW}s windows"
            sql "ALTER SYSTEM SET esrc.projection_cost_delay = '${PACE_CONF% *}'" >/dev/null
            sql "ALTER SYSTEM SET esrc.projection_cost_limit = ${PACE_CONF#* }" >/dev/null
            sql "SELECT pg_reload_conf()" >/dev/null
            ratio_set paced none paced3
            sql "ALTER SYSTEM RESET esrc.projection_cost_delay" >/dev/null
            sql "ALTER SYSTEM RESET esrc.projection_cost_limit" >/dev/null
            sql "SELECT pg_reload_conf()" >/dev/null ;;
        *) die "BENCH_RATIO_SETS: unknown set $set" ;;
        esac
    done
fi

# --- 5 (runs here). pacing under a burst ---------------------------------
if [[ $SKIP != *" pace "* ]]; then
    sql "TRUNCATE public.load_counts1, public.load_counts2, public.load_counts3" >/dev/null
    log "pacing: a ${PACE_SECS}s burst (8 clients), none / 3 projections unpaced / paced ($PACE_CONF)"
    pace_burst() { # LABEL: a burst with the 3 per-event projections (or none)
        local label=$1 lo tps pid peak=0 peak_s=0 n a lag t_end t_done behind=0 secs
        if [ "$label" != none ]; then
            for i in 1 2 3; do
                sql "SELECT esrc.create_projection('pace$i', 'public.load_handler$i(esrc.event)', ARRAY['load'], start => 'end')" >/dev/null
            done
            sleep 1
        fi
        lo=$(sql "SELECT coalesce(max(position), 0) FROM esrc.events")
        "$PG_BINDIR/pgbench" -n -c 8 -j 2 -T "$PACE_SECS" -M prepared -f "$dir/load.sql" >"$dir/pgbench.pace" 2>&1 &
        pid=$!
        if [ "$label" != none ]; then
            while kill -0 "$pid" 2>/dev/null; do
                sleep 1
                n=$(sql "SELECT count(*) FROM esrc.events WHERE category = 'load' AND position > $lo")
                a=$(sql "SELECT coalesce(min(s), 0) FROM (SELECT sum(pp.applied) s FROM esrc.projection_partitions pp
                           JOIN esrc.projections p ON p.id = pp.projection_id WHERE p.name LIKE 'pace_' GROUP BY p.id) x")
                lag=$((n - a))
                [ "$lag" -le "$peak" ] || peak=$lag
            done
        fi
        wait "$pid" || { cat "$dir/pgbench.pace"; die "pgbench failed (pace $label)"; }
        tps=$(awk '/^tps = /{printf "%.0f", $3}' "$dir/pgbench.pace")
        if [ "$label" != none ]; then
            t_end=$(now_us)
            n=$(sql "SELECT count(*) FROM esrc.events WHERE category = 'load' AND position > $lo")
            peak_s=$(sql "SELECT round(coalesce(max(seconds_behind), 0)::numeric, 1) FROM esrc.projection_status
                          WHERE projection LIKE 'pace_'")
            for i in 1 2 3; do behind=$((behind + n - $(applied "pace$i"))); done
            [ $((behind / 3)) -le "$peak" ] || peak=$((behind / 3))
            for i in 1 2 3; do wait_applied "pace$i" "$n"; done
            t_done=$(now_us)
            secs=$(python3 -c "print('%.2f' % (($t_done - $t_end) / 1e6))")
            for i in 1 2 3; do sql "SELECT esrc.drop_projection('pace$i')" >/dev/null; done
            echo "pace_${label} appends_per_s $tps  $(ratio "$tps" "$pace_none")x of none  peak_lag_events $peak (slowest projection)  lag_at_burst_end ${peak_s}s, $behind events in all  caught_up_in ${secs}s  catch_up_rate $(python3 -c "print('%.0f' % ($behind / max(($t_done - $t_end) / 1e6, 0.001)))") events/s"
        else
            pace_none=$tps
            echo "pace_none appends_per_s $tps"
        fi
        sql "TRUNCATE public.load_counts1, public.load_counts2, public.load_counts3" >/dev/null
        sql "CHECKPOINT" >/dev/null
    }
    pace_set() { # "DELAY LIMIT"
        sql "ALTER SYSTEM SET esrc.projection_cost_delay = '${1% *}'" >/dev/null
        sql "ALTER SYSTEM SET esrc.projection_cost_limit = ${1#* }" >/dev/null
        sql "SELECT pg_reload_conf()" >/dev/null
        sleep 0.5
    }
    pace_burst none
    pace_burst unpaced
    pace_set "$PACE_CONF"
    pace_burst paced
    pace_set "0 1000"
fi

# --- 6 (runs here). the workers' CPU per event ----------------------------
# Less noisy than append rates on a shared machine: at a fixed append rate
# ($BENCH_CPU_RATE, 2000/s, for $BENCH_CPU_SECONDS, 10 s), the CPU time the
# projection worker used (utime + stime of /proc/PID/stat) per 1,000
# events it applied, for the 3 per-event projections (proj3) and the 3
# batch ones (batch3).  Levers are compared by this figure.  How many
# events a batch takes depends on how the worker is scheduled, and the
# bookkeeping is per batch: proj3b1 (the per-event projections with
# batch_size 1, not in the default list) fixes the batches at one event,
# so its figure is the cost of a batch of one event (bookkeeping + one
# handler call); use a lower BENCH_CPU_RATE with it (it falls behind).
if [[ $SKIP != *" cpu "* ]]; then
    CPU_RATE=${BENCH_CPU_RATE:-2000} CPU_SECS=${BENCH_CPU_SECONDS:-10}
    log "worker CPU per event: ${CPU_RATE} appends/s for ${CPU_SECS}s"
    cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
    for v in ${BENCH_CPU_VARIANTS:-proj3 batch3}; do
        for i in 1 2 3; do
            case $v in
            proj3) h="public.load_handler$i(esrc.event)" bs=100 ;;
            proj3b1) h="public.load_handler$i(esrc.event)" bs=1 ;;
            *) h="public.load_batch$i(esrc.event[])" bs=100 ;;
            esac
            sql "SELECT esrc.create_projection('cpu$i', '$h', ARRAY['load'], start => 'end', batch_size => $bs)" >/dev/null
        done
        sleep 1
        wpid=$(sql "SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'esrc projection worker%' LIMIT 1")
        lo=$(sql "SELECT coalesce(max(position), 0) FROM esrc.events")
        c0=$(cpu_ticks "$wpid")
        "$PG_BINDIR/pgbench" -n -c 8 -j 2 -R "$CPU_RATE" -T "$CPU_SECS" -M prepared -f "$dir/load.sql" >/dev/null 2>&1 \
            || die "pgbench failed (cpu)"
        hi=$(sql "SELECT count(*) FROM esrc.events WHERE category = 'load' AND position > $lo")
        for i in 1 2 3; do wait_applied "cpu$i" "$hi"; done
        c1=$(cpu_ticks "$wpid")
        echo "cpu_${v}_worker_ms_per_1000_events $(python3 -c "print('%.1f' % (($c1 - $c0) * 1000.0 / $(getconf CLK_TCK) / (3 * $hi) * 1000))")  ($hi events x 3 projections, $((c1 - c0)) ticks)"
        for i in 1 2 3; do sql "SELECT esrc.drop_projection('cpu$i')" >/dev/null; done
        sql "TRUNCATE public.load_counts1, public.load_counts2, public.load_counts3" >/dev/null
    done
fi

# --- 4. batch_size on catch-up ------------------------------------------
if [[ $SKIP != *" batch "* ]]; then
    log "batch_size $BATCH_SIZES on the catch-up of $BATCH_EVENTS events"
    for ((r = 0; r < (BATCH_EVENTS + 9999) / 10000; r++)); do
        sql "SELECT count(esrc.append_batch('bs-' || s,
                 (SELECT jsonb_agg(jsonb_build_object('type', 'Tick',
                          'data', jsonb_build_object('i', $r * 10 + i, 'pad', repeat('x', 70))))
                  FROM generate_series(1, 10) i)))
             FROM generate_series(1, 1000) s" >/dev/null
    done
    NB=$(sql "SELECT count(*) FROM esrc.events WHERE category = 'bs'")
    sql "VACUUM (ANALYZE) esrc.events" >/dev/null
    base=
    for b in $BATCH_SIZES; do
        out=$(catchup "bs$b" 1 1 "$b" bs "$NB" "${base:-1}" "catchup_batch_size_$b")
        e=$(sed 's/.*events_per_s \([0-9]*\).*/\1/' <<<"$out")
        [ -n "$base" ] || base=$e
        # ratios here are to the first batch size
        echo "${out%%  *}  $(ratio "$e" "$base")x of batch_size $(set -- $BATCH_SIZES; echo "$1")"
    done
fi
