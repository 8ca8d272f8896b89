#!/usr/bin/env bash
# The wait of a projection worker between rounds follows its load (issue
# 31, src/projection/projpace.c): esrc.projection_batch_delay is where it
# starts; while a round's CPU time is more than a quarter of the time since
# the previous round, the wait doubles up to esrc.projection_batch_delay_max;
# below an eighth it halves back.  Larger batches then cost less CPU per
# event under a heavy load, and a light load keeps the short wait.
#
# One worker, one projection whose handler keeps the CPU busy for 1 ms of
# elapsed time per event (a spin on clock_timestamp()) and records the
# transaction that applied each event, so the batches can be counted.
# pgbench appends ESRC_GATHER_RATE (400) events/s for ESRC_GATHER_SECONDS
# (5) s: the worker is busy about 40% of the time, below 100% (it keeps
# up).  Two phases, the same load:
#   control   esrc.projection_batch_delay_max = 2ms (the wait never grows):
#             a round every few milliseconds, batches
#             of a few events
#   adaptive  esrc.projection_batch_delay_max = 200ms: the wait grows, the
#             batches are at least 4 times as large on average
# Then 30 single appends 100 ms apart (the worker busy about 1% of the
# time): the wait comes back down, and each of the last 10 events is
# applied in a batch of its own.  Every phase also checks that each event
# was applied once.  No time is asserted: only batch sizes, which the same
# machine produces in both phases.
#
#   ESRC_GATHER_RATE (400)  ESRC_GATHER_SECONDS (5)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

rate=${ESRC_GATHER_RATE:-400}
secs=${ESRC_GATHER_SECONDS:-5}
dir=$(test_tmpdir projgather)
port=$(free_port)
writers=
stop_at_exit "$dir" writers
pg_start "$dir" "$port" "esrc.projection_workers = 1" \
    "esrc.projection_batch_delay = 2ms" "esrc.projection_batch_delay_max = 2ms"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }

q >/dev/null <<'SQL'
CREATE EXTENSION esrc;
CREATE TABLE public.gather_log (position bigint NOT NULL, xid xid8 NOT NULL);
CREATE FUNCTION public.gather_h(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t timestamptz := pg_catalog.clock_timestamp();
BEGIN
    WHILE pg_catalog.clock_timestamp() OPERATOR(pg_catalog.<) (t OPERATOR(pg_catalog.+) interval '1 ms') LOOP
    END LOOP;
    INSERT INTO public.gather_log VALUES (e.position, pg_catalog.pg_current_xact_id());
END $$;
SELECT esrc.create_projection('gather', 'public.gather_h(esrc.event)', ARRAY['gather']);
SQL

# set NAME VALUE: ALTER SYSTEM and reload; waits until a session sees it
set_conf() {
    local i
    q -c "ALTER SYSTEM SET $1 = '$2'" -c "SELECT pg_reload_conf()" >/dev/null
    for i in $(seq 1 50); do
        [ "$(q -c "SHOW $1")" = "$2" ] && return 0
        sleep 0.1
    done
    die "$1 is not $2 after the reload"
}
last_position() { q -c "SELECT coalesce(max(position), 0) FROM esrc.events"; }
# wait_applied POS: until the projection applied every event up to POS
wait_applied() {
    local r
    r=$(q -c "SELECT esrc.wait_for_projection('gather', $1, interval '60 s')")
    [ "$r" = applied ] || die "the projection did not apply up to $1: $r"
}
# events LO HI: applied events of positions in (LO, HI], checked once each;
# prints "events batches"
events_and_batches() {
    local lo=$1 hi=$2 res
    res=$(q -c "SELECT (SELECT count(*) FROM esrc.events WHERE category = 'gather' AND position > $lo AND position <= $hi),
                       count(*), count(DISTINCT position), count(DISTINCT xid)
                FROM public.gather_log WHERE position > $lo AND position <= $hi")
    IFS='|' read -r logged applied distinct batches <<<"$res"
    [ "$applied" = "$logged" ] && [ "$distinct" = "$logged" ] \
        || die "positions ($lo, $hi]: $logged events in the log, $applied applied, $distinct distinct"
    echo "$applied $batches"
}
echo "\\set s random(1, 1000)
SELECT esrc.append('gather-' || :s, 'Tick', '{\"n\": 1}');" >"$dir/load.pgbench"
# phase NAME: the load; prints "events batches" of the phase
phase() {
    local lo hi
    lo=$(last_position)
    "$PG_BINDIR/pgbench" -n -c 8 -j 2 -T "$secs" -R "$rate" -M prepared -f "$dir/load.pgbench" \
        >"$dir/pgbench-$1.log" 2>&1 &
    writers=$!
    wait "$writers" || { cat "$dir/pgbench-$1.log"; die "pgbench failed ($1)"; }
    writers=
    grep -q "^number of failed transactions: 0 " "$dir/pgbench-$1.log" || die "appends failed ($1)"
    hi=$(last_position)
    wait_applied "$hi"
    events_and_batches "$lo" "$hi"
}

log "control: esrc.projection_batch_delay_max = 2ms, ${secs}s at $rate appends/s"
phase control >"$dir/control.out"
read -r c_events c_batches <"$dir/control.out"
log "  $c_events events in $c_batches batches"
set_conf esrc.projection_batch_delay_max 200ms
log "adaptive: esrc.projection_batch_delay_max = 200ms, the same load"
phase adaptive >"$dir/adaptive.out"
read -r a_events a_batches <"$dir/adaptive.out"
log "  $a_events events in $a_batches batches"
[ "$c_events" -gt 0 ] && [ "$a_events" -gt 0 ] || die "no events applied"
# mean batch of the adaptive phase >= 4x the control's, in integers:
# a_events / a_batches >= 4 * c_events / c_batches
[ $((a_events * c_batches)) -ge $((4 * c_events * a_batches)) ] \
    || die "under load the batches did not grow: $a_events/$a_batches events per batch against $c_events/$c_batches with the wait fixed"

log "light load: 30 appends 100 ms apart"
lo=$(last_position)
for i in $(seq 1 30); do
    q -c "SELECT esrc.append('gather-light', 'Tick', '{}')" >/dev/null
    sleep 0.1
done
hi=$(last_position)
wait_applied "$hi"
events_and_batches "$lo" "$hi" >"$dir/light.out"
read -r l_events l_batches <"$dir/light.out"
log "  $l_events events in $l_batches batches"
# the last 10: one transaction each
tail_batches=$(q -c "SELECT count(DISTINCT xid) FROM public.gather_log
                     WHERE position IN (SELECT position FROM esrc.events WHERE position > $lo
                                        ORDER BY position DESC LIMIT 10)")
[ "$tail_batches" = 10 ] \
    || die "the wait did not come back down: the last 10 events of the light load were applied in $tail_batches batches"
log "ok: batches of $((a_events / a_batches)) events under load (against $((c_events / c_batches)) with the wait fixed), 1 under a light load"
