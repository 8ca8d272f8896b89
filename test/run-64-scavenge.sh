#!/usr/bin/env bash
# The scavenger under load (docs/lifecycle.md, "The scavenger"): 8 pgbench
# clients append to 40 streams of category ld (every append also copies its
# stored row into a shadow table in the same transaction), readers follow
# read_category and read_all, while the streams' rules hide events
# (max_count, truncate_before, soft deletes with appends after them,
# max_age, and streams without rules).  First phase: esrc.scavenge(200)
# called in a loop (as pg_cron would); second phase: the background worker
# (esrc.scavenge_interval = 1s, esrc.scavenge_max_events = 300,
# esrc.projection_workers = 0), which also scavenges a second database with
# esrc and leaves a third without it alone.  Then, once appends stopped and
# the max_age events are old enough, a last pass.  Last, a slice that fails
# (a BEFORE UPDATE trigger on esrc.events refuses the redaction) is logged
# and retried by the same worker, which redacts once the trigger is gone.
# Checks:
#   - no read ever returned a redacted event (the rules are never loosened);
#   - every visible event is exactly as written (the shadow copy, and a
#     copy of the pre-filled log), every hidden event is redacted, nothing
#     else changed; every acknowledged append stored, versions contiguous;
#   - esrc.erasures: rows of both kinds (SQL calls and the worker), and
#     their events add up to the redacted events;
#   - the append latency (p50, p99, max) with the scavenger running is
#     printed, next to the phase without it; no time is asserted.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

secs=${ESRC_SCAVENGE_SECONDS:-8}
dir=$(test_tmpdir scavenge)
port=$(free_port)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "esrc.scavenge_max_events = 300"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
chmod 777 "$dir"

q -c "CREATE EXTENSION esrc" -c "CREATE ROLE scav LOGIN IN ROLE esrc_admin" \
  -c "CREATE TABLE shadow (position bigint PRIMARY KEY, stream text, version bigint, data jsonb, metadata jsonb)"
# 40 streams of 60 events each
q -c "SELECT count(*) FROM (SELECT esrc.append('ld-' || s, 'E',
          jsonb_build_object('s', s, 'i', g, 'pad', repeat(md5(g::text), 4)), jsonb_build_object('i', g))
      FROM generate_series(0, 59) g, generate_series(1, 40) s) a" >/dev/null
# the rules: 1-10 max_count 5, 11-20 truncate_before 30, 21-25 soft deletes,
# 26-30 max_age 1 second, 31-40 none
q -c "SELECT esrc.set_stream_rules('ld-' || s, max_count => 5, reason => 'keep 5') FROM generate_series(1, 10) s" \
  -c "SELECT esrc.set_stream_rules('ld-' || s, truncate_before => 30, reason => 'from 30') FROM generate_series(11, 20) s" \
  -c "SELECT esrc.delete_stream('ld-' || s, 'soft') FROM generate_series(21, 25) s" \
  -c "SELECT esrc.set_stream_rules('ld-' || s, max_age => '1 second', reason => 'a second') FROM generate_series(26, 30) s" >/dev/null
# the copy of the log before the load (with the tombstones the deletes appended)
q -c "CREATE TABLE prefill AS SELECT * FROM esrc.events"
hidden0=$(q -c "SELECT count(*) FROM esrc.events WHERE position NOT IN (SELECT position FROM esrc.read_category('ld', 0, 1000000))")
log "pre-filled 2400 events in 40 streams, $hidden0 hidden by rules"

cat >"$dir/append.sql" <<'EOF'
\set s random(1, 40)
\set r random(1, 1000000000)
BEGIN;
SELECT esrc.append('ld-' || :s, 'E', jsonb_build_object('c', :client_id, 'r', :r, 'pad', repeat('x', 200)), jsonb_build_object('r', :r)) AS v \gset
INSERT INTO shadow SELECT position, stream, version, data, metadata FROM esrc.events WHERE stream = 'ld-' || :s AND version = :v;
COMMIT;
EOF

# readers: a redacted event must never be returned (no rule is loosened)
reader() {
    local n=0 bad
    while :; do
        bad=$(q -c "SELECT (SELECT count(*) FROM esrc.read_category('ld', 0, 1000000) WHERE data = '{\"erased\": true}')
                         + (SELECT count(*) FROM esrc.read_all(0, 1000000) WHERE data = '{\"erased\": true}')
                         + (SELECT count(*) FROM esrc.read_stream('ld-' || (1 + $n % 40)) WHERE data = '{\"erased\": true}')")
        n=$((n + 1))
        echo "$bad" >>"$dir/reads.$1"
    done
}
reader a & pids+=($!)
reader b & pids+=($!)

pgbench_phase() {
    as_test_user "$PG_BINDIR/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n -c 8 -j 8 -T "$secs" \
        -l --log-prefix="$dir/lat-$1" -f "$dir/append.sql" postgres >"$dir/pgbench-$1.out" 2>&1 \
        || { cat "$dir/pgbench-$1.out"; die "pgbench failed"; }
}
latency() {  # p50 p99 max of the phase's transactions, in ms
    cat "$dir"/lat-$1.* | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {
        printf "p50 %.1f ms, p99 %.1f ms, max %.1f ms (%d appends)", a[int(NR*0.5)]/1000, a[int(NR*0.99)]/1000, a[NR]/1000, NR}'
}

# phase 0: no scavenger (the baseline of the latencies)
pgbench_phase none
log "no scavenger: $(latency none)"

# phase 1: esrc.scavenge(200) in a loop, as pg_cron would call it
(
    while :; do
        psql -qAtX -U scav -c "SELECT events_redacted, done FROM esrc.scavenge(200)" >>"$dir/calls" 2>>"$dir/calls.err"
    done
) & sql_pid=$!; pids+=($sql_pid)
pgbench_phase sql
kill "$sql_pid"; wait "$sql_pid" 2>/dev/null || true
calls=$(wc -l <"$dir/calls")
by_sql=$(q -c "SELECT coalesce(sum(events), 0) FROM esrc.erasures WHERE what = 'scavenge'")
log "esrc.scavenge(200) loop: $(latency sql); $calls calls redacted $by_sql events"
[ "$by_sql" -gt 0 ] || die "the scavenge calls redacted nothing"
[ ! -s "$dir/calls.err" ] || { cat "$dir/calls.err"; die "a scavenge call failed"; }

# phase 2: the worker, every second, with esrc.projection_workers = 0 (the
# launcher still starts worker 1 of each database with esrc for it); a
# second database with esrc and a deleted stream is scavenged too, a third
# without esrc is left alone
q -c "CREATE DATABASE other" -c "CREATE DATABASE plain" >/dev/null
q -d other -c "CREATE EXTENSION esrc" \
  -c "SELECT count(*) FROM (SELECT esrc.append('o-1', 'E', jsonb_build_object('i', g)) FROM generate_series(1, 50) g) a" \
  -c "SELECT esrc.delete_stream('o-1', 'other database')" >/dev/null
q -c "ALTER SYSTEM SET esrc.projection_workers = 0" -c "ALTER SYSTEM SET esrc.scavenge_interval = '1s'" \
  -c "SELECT pg_reload_conf()" >/dev/null
pgbench_phase worker
by_worker=$(q -c "SELECT count(*) || ' slices, ' || coalesce(sum(events), 0) || ' events'
                  FROM esrc.erasures WHERE what = 'scavenge' AND reason LIKE '%scavenge_interval%'")
log "worker (1 s): $(latency worker); $by_worker"
[ "$(q -c "SELECT count(*) FROM esrc.erasures WHERE what = 'scavenge' AND reason LIKE '%scavenge_interval%'")" -gt 0 ] \
    || { tail -20 "$dir/server.log"; die "the worker ran no slice"; }

for i in $(seq 1 100); do
    [ "$(q -d other -c "SELECT count(*) FROM esrc.events WHERE data = '{\"erased\": true}'")" = 50 ] && break
    [ "$i" -lt 100 ] || die "the worker did not scavenge the second database"
    sleep 0.2
done
log "second database: its deleted stream's 50 events redacted by its worker"
[ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE datname = 'plain'")" = 0 ] \
    || die "a worker stays in the database without esrc"

# the worker stops scavenging on a reload; appends stopped; the max_age
# events must be older than max_age plus the scavenger's margin (1 s) for
# the last pass: wait for that moment, then finish a pass
q -c "ALTER SYSTEM SET esrc.scavenge_interval = 0" -c "SELECT pg_reload_conf()" >/dev/null
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
q -c "DO \$\$ BEGIN
          WHILE clock_timestamp() < (SELECT max(recorded_at) FROM esrc.events) + interval '2.5 seconds' LOOP
              PERFORM pg_sleep(0.1);
          END LOOP;
      END \$\$"
for i in $(seq 1 100); do
    [ "$(psql -qAtX -U scav -c "SELECT done FROM esrc.scavenge(10000)")" = t ] && break
done
psql -qAtX -U scav -c "SELECT done FROM esrc.scavenge(10000)" >/dev/null   # a whole pass, started after the wait

# the checks
bad_reads=$(cat "$dir"/reads.* | awk '{s += $1} END {print s + 0}')
nreads=$(cat "$dir"/reads.* | wc -l)
log "readers: $nreads reads, $bad_reads redacted events returned"
[ "$nreads" -gt 0 ] || die "the readers read nothing"
[ "$bad_reads" = 0 ] || die "a read returned a redacted event"

acked=0
for ph in none sql worker; do
    a=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$dir/pgbench-$ph.out")
    f=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$dir/pgbench-$ph.out")
    [ "${f:-0}" = 0 ] || die "appends failed in phase $ph"
    acked=$((acked + a))
done
check=$(q -c "
    WITH visible AS (SELECT position FROM esrc.read_category('ld', 0, 1000000)),
         copy AS (SELECT position, data, metadata FROM shadow
                  UNION ALL SELECT position, data, metadata FROM prefill),
         e AS (SELECT e.*, v.position IS NOT NULL AS visible, c.data AS cdata, c.metadata AS cmeta,
                      c.position IS NOT NULL AS copied
               FROM esrc.events e LEFT JOIN visible v USING (position) LEFT JOIN copy c USING (position))
    SELECT count(*) FILTER (WHERE NOT copied),
           count(*) FILTER (WHERE visible AND (data, metadata) IS DISTINCT FROM (cdata, cmeta)),
           count(*) FILTER (WHERE NOT visible),
           count(*) FILTER (WHERE NOT visible AND NOT (data = '{\"erased\": true}' AND metadata IS NULL)),
           count(*) FILTER (WHERE data = '{\"erased\": true}' AND metadata IS NULL),
           (SELECT count(*) FROM shadow) = $acked,
           (SELECT bool_and(n = m + 1) FROM (SELECT count(*) AS n, max(version) AS m FROM esrc.events GROUP BY stream) s),
           (SELECT coalesce(sum(events), 0) FROM esrc.erasures WHERE what = 'scavenge'),
           (SELECT count(*) FROM esrc.events e2 JOIN prefill p USING (position)
             WHERE (e2.stream, e2.version, e2.type, e2.id, e2.recorded_at) IS DISTINCT FROM
                   (p.stream, p.version, p.type, p.id, p.recorded_at))
    FROM e")
IFS='|' read -r uncopied changed hidden unredacted redacted shadow_ok contiguous audited moved <<<"$check"
log "log: $hidden hidden, $redacted redacted ($unredacted hidden but not redacted), $changed visible events changed, $uncopied without a copy; audit says $audited"
log "appends: $acked acknowledged, all stored: $shadow_ok, versions contiguous: $contiguous"
[ "$uncopied" = 0 ] || die "events without a copy: an append not acknowledged was stored"
[ "$changed" = 0 ] || die "a visible event changed"
[ "$unredacted" = 0 ] || die "hidden events were left unredacted"
[ "$redacted" = "$hidden" ] || die "redacted events that are not hidden"
[ "$audited" = "$redacted" ] || die "esrc.erasures does not add up to the redacted events"
[ "$shadow_ok" = t ] || die "acknowledged appends missing"
[ "$contiguous" = t ] || die "versions not contiguous"
[ "$moved" = 0 ] || die "columns other than data and metadata changed"
[ "$hidden" -gt "$hidden0" ] || die "the load hid no new events: the test tested nothing"
log "scavenger under load: every hidden event redacted, every visible one as written, audit complete"

# an error in a slice: logged, rolled back, retried at the next interval
# by the same worker (no crash loop).  A BEFORE UPDATE trigger on
# esrc.events makes the redaction refuse (55000).
q -c "ALTER SYSTEM SET esrc.scavenge_interval = '1s'" -c "SELECT pg_reload_conf()" >/dev/null
q -c "CREATE FUNCTION public.noop() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'" \
  -c "CREATE TRIGGER in_the_way BEFORE UPDATE ON esrc.events FOR EACH ROW EXECUTE FUNCTION public.noop()"
q -c "SELECT esrc.append('ld-1', 'E', '{}') FROM generate_series(1, 5)" >/dev/null   # hides 5 more
pid_of_worker() { q -c "SELECT pid FROM pg_stat_activity WHERE datname = 'postgres' AND backend_type = 'esrc projection worker'"; }
for i in $(seq 1 100); do
    grep -q 'esrc scavenger: slice rolled back: cannot erase events while esrc.events has the BEFORE UPDATE trigger "in_the_way"' \
        "$dir/server.log" && break
    [ "$i" -lt 100 ] || { tail -20 "$dir/server.log"; die "no failed slice was logged"; }
    sleep 0.2
done
wpid=$(pid_of_worker)
q -c "DROP TRIGGER in_the_way ON esrc.events"
for i in $(seq 1 100); do
    [ "$(q -c "SELECT count(*) FROM esrc.events WHERE stream = 'ld-1' AND position NOT IN
                   (SELECT position FROM esrc.read_stream('ld-1')) AND data <> '{\"erased\": true}'")" = 0 ] && break
    [ "$i" -lt 100 ] || die "the worker did not scavenge again after a failed slice"
    sleep 0.2
done
[ -n "$wpid" ] && [ "$(pid_of_worker)" = "$wpid" ] || die "the worker was restarted (pid $wpid, now $(pid_of_worker))"
log "a failing slice was logged and retried by the same worker (pid $wpid), which then redacted"
