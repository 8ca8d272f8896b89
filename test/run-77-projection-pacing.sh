#!/usr/bin/env bash
# Pacing of the projection workers under a burst (issue 31,
# src/projection/projpace.c): with esrc.projection_cost_delay = 100ms and
# esrc.projection_cost_limit = 50, a burst of appends (pgbench, 8 clients,
# ESRC_PACE_RATE appends/s, ESRC_PACE_BURST_SECONDS, 15 s; 30 s for the
# issue's figure) into 1,000 streams, with two projections of 2 partitions
# each on one worker:
#   pace_log     inserts a row per event (position, stream): a position
#                missing is an event lost, a position twice an event
#                applied twice
#   pace_counts  upserts a count and the last position per stream (and
#                sleeps 2 ms every fourth event, so that the catch-up
#                lasts a few seconds)
# Checked: a worker was seen napping ("esrc projection pacing" in
# pg_stat_activity) and the projections were behind when the burst ended;
# then, right away, kill -9 of the projection worker during the catch-up
# (the postmaster restarts every backend); the projections catch up by
# themselves; then the read models against the log: every event once in
# pace_log, none twice, none extra, every stream's count and last position
# as in the log, the applied counters equal to the events.
#
#   ESRC_PACE_BURST_SECONDS (15)  ESRC_PACE_RATE (800)
#   ESRC_PACE_BREAK=drop   moves the checkpoints of pace_log forward by
#                          100 when the burst ends (a batch dropped): the
#                          'lost' check must fail
#   ESRC_PACE_BREAK=twice  moves them back by 100 (a batch applied
#                          twice): the 'twice' check must fail
set -euo pipefail
source "$(dirname "$0")/lib.sh"

# the postmaster restarts after the kill -9: reap what pg_ctl daemonized
if [ -z "${ESRC_PACE_REAPED:-}" ]; then
    ESRC_PACE_REAPED=1 exec python3 -c "$ESRC_REAPER_PY" bash "$0" "$@"
fi

burst=${ESRC_PACE_BURST_SECONDS:-15}
rate=${ESRC_PACE_RATE:-800}
brk=${ESRC_PACE_BREAK:-}
dir=$(test_tmpdir projpace)
port=$(free_port)
writers=
stop_at_exit "$dir" writers
pg_start "$dir" "$port" "esrc.projection_workers = 1" "restart_after_crash = on" \
    "esrc.projection_cost_delay = 100ms" "esrc.projection_cost_limit = 50"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }

q >/dev/null <<'SQL'
CREATE EXTENSION esrc;
CREATE TABLE public.pace_log (position bigint NOT NULL, stream text NOT NULL);
CREATE TABLE public.pace_counts (stream text PRIMARY KEY, n bigint NOT NULL, last_position bigint NOT NULL);
CREATE FUNCTION public.pace_log_h(e esrc.event) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.pace_log VALUES (e.position, e.stream) $$;
-- a few milliseconds every fourth event: the catch-up lasts long enough
-- for the kill to land in it
CREATE FUNCTION public.pace_counts_h(e esrc.event) RETURNS void LANGUAGE sql AS $$
    SELECT pg_sleep(0.002) WHERE e.position % 4 = 0;
    INSERT INTO public.pace_counts VALUES (e.stream, 1, e.position)
    ON CONFLICT (stream) DO UPDATE SET n = pace_counts.n + 1, last_position = excluded.last_position $$;
SELECT esrc.create_projection('pace_log', 'public.pace_log_h(esrc.event)', ARRAY['pace'], partitions => 2);
SELECT esrc.create_projection('pace_counts', 'public.pace_counts_h(esrc.event)', ARRAY['pace'], partitions => 2);
SQL
q -c "SHOW esrc.projection_cost_delay" | grep -qx 100ms || die "esrc.projection_cost_delay is not set"

worker_pid() {
    q -c "SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'esrc projection worker%'
          AND datname = current_database() LIMIT 1" 2>/dev/null || true
}
wait_worker() {
    local i p
    for i in $(seq 1 120); do
        p=$(worker_pid)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.5
    done
    die "$1: no projection worker running"
}
events() { q -c "SELECT count(*) FROM esrc.events WHERE category = 'pace'"; }
# events not applied yet, summed over both projections
behind() {
    q -c "SELECT 2 * (SELECT count(*) FROM esrc.events WHERE category = 'pace')
                 - (SELECT coalesce(sum(pp.applied), 0) FROM esrc.projection_partitions pp
                    JOIN esrc.projections p ON p.id = pp.projection_id
                    WHERE p.name IN ('pace_log', 'pace_counts'))"
}
wait_worker start >/dev/null

echo "\\set s random(1, 1000)
SELECT esrc.append('pace-' || :s, 'Tick', '{\"n\": 1}');" >"$dir/burst.pgbench"
log "burst: ${burst}s, $rate appends/s from 8 clients, pacing 100ms per 50 events"
"$PG_BINDIR/pgbench" -n -c 8 -j 2 -T "$burst" -R "$rate" -M prepared -f "$dir/burst.pgbench" \
    >"$dir/pgbench.log" 2>&1 &
writers=$!
napped=0 peak=0
while kill -0 "$writers" 2>/dev/null; do
    n=$(q -c "SELECT count(*) FROM pg_stat_activity
              WHERE backend_type LIKE 'esrc projection worker%' AND query = 'esrc projection pacing'")
    napped=$((napped + n))
    b=$(behind)
    [ "$b" -le "$peak" ] || peak=$b
    [ -z "${ESRC_PACE_TRACE:-}" ] || log "  behind $b, napping $n"
    sleep 0.3
done
wait "$writers" || { cat "$dir/pgbench.log"; die "pgbench failed"; }
writers=
grep -E "^(number of transactions actually processed|tps)" "$dir/pgbench.log" | sed 's/^/  /' >&2
grep -q "^number of failed transactions: 0 " "$dir/pgbench.log" || die "appends failed during the burst"
at_end=$(behind)
log "burst over: $(events) events, behind at the end $at_end (peak sampled $peak), naps seen $napped"
[ "$napped" -gt 0 ] || die "no projection worker was seen napping during the burst"
[ "$at_end" -gt 0 ] || die "the projections were not behind when the burst ended (no pacing?)"

case $brk in
    drop|twice)
        d=100
        [ "$brk" = drop ] || d=-100
        log "ESRC_PACE_BREAK=$brk: the checkpoints of pace_log move by $d"
        q -c "UPDATE esrc.subscription_checkpoints c SET checkpoint = greatest(c.checkpoint + $d, 0)
              FROM esrc.subscriptions s WHERE s.id = c.subscription_id AND s.name = 'projection:pace_log'"
        ;;
    '') ;;
    *) die "ESRC_PACE_BREAK: drop or twice" ;;
esac

# kill -9 of the worker while it catches up
pid=$(wait_worker "catch-up")
b=$(behind)
log "kill -9 of projection worker $pid with $b events still to apply"
[ "$b" -gt 0 ] || die "the projections caught up before the kill: nothing to test"
kill -9 "$pid"
for i in $(seq 1 100); do
    grep -q "all server processes terminated; reinitializing" "$dir/server.log" && break
    sleep 0.1
done
grep -q "all server processes terminated; reinitializing" "$dir/server.log" \
    || die "the postmaster did not reinitialize"
for i in $(seq 1 120); do
    q -c "SELECT 1" >/dev/null 2>&1 && break
    sleep 0.5
done
wait_worker "after the kill" >/dev/null

total=$(events)
# caught up: no event after the checkpoints (the applied counters would
# not tell with ESRC_PACE_BREAK)
caught_up() {
    q -c "SELECT count(*) = 4 AND bool_and(caught_up) FROM esrc.projection_status
          WHERE projection IN ('pace_log', 'pace_counts')"
}
for i in $(seq 1 600); do
    [ "$(caught_up)" = t ] && break
    sleep 0.2
done
[ "$(caught_up)" = t ] || die "the projections did not catch up: $(behind) events behind"
log "caught up after the kill: $total events"

q -F ' ' >"$dir/check.out" <<'SQL'
WITH l AS (SELECT position, stream FROM esrc.events WHERE category = 'pace')
SELECT 'lost', count(*) = 0 FROM l WHERE NOT EXISTS (SELECT 1 FROM public.pace_log p WHERE p.position = l.position)
UNION ALL
SELECT 'twice', count(*) = 0 FROM (SELECT position FROM public.pace_log GROUP BY 1 HAVING count(*) > 1) d
UNION ALL
SELECT 'extra', count(*) = 0 FROM public.pace_log p WHERE NOT EXISTS (SELECT 1 FROM l WHERE l.position = p.position)
UNION ALL
SELECT 'counts', count(*) = 0
FROM (SELECT stream, count(*) AS n, max(position) AS p FROM l GROUP BY 1) s
FULL JOIN public.pace_counts c USING (stream)
WHERE c.n IS DISTINCT FROM s.n OR c.last_position IS DISTINCT FROM s.p
UNION ALL
SELECT 'applied', bool_and(a = (SELECT count(*) FROM l))
FROM (SELECT sum(pp.applied) AS a FROM esrc.projection_partitions pp
      JOIN esrc.projections p ON p.id = pp.projection_id GROUP BY p.id) x;
SQL
sed 's/^/  /' "$dir/check.out" >&2
[ "$(wc -l <"$dir/check.out")" -eq 5 ] || die "expected 5 checks"
! grep -q ' f$' "$dir/check.out" || die "the read models differ from the log across the lag, the kill and the catch-up (above)"
[ "$total" -gt 1000 ] || die "too little happened: $total events"
log "exactly once across a paced burst, its catch-up and a kill -9 ($total events)"
