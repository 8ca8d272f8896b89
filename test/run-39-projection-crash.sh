#!/usr/bin/env bash
# Projections across crashes (issue 15).  The projections user_names and
# name_letters of test/run-37 (4 partitions each, esrc.projection_workers =
# 2), with slow handlers (every 20th event sleeps 50 ms: a batch of 100
# takes a quarter of a second or more, so that a crash catches one in flight), under
# pgbench writers (test/projstress/writers.pgbench).  Three rounds, each
# with a worker caught mid-batch (in pg_sleep inside the handler, the
# sleeps made 3 s long just before, its transaction holding an xid:
# effects written, not committed):
#   1. kill -9 of that worker (the postmaster restarts every backend)
#   2. kill -9 of the postmaster (its children exit, then a new start)
#   3. pg_ctl stop -m immediate, then start
# After each: the worker's transaction is aborted (pg_xact_status), the
# two workers come back by themselves, and appends go on with no failure
# while the slow projections run.  At the end, after a drain, the tables
# equal the replay of the log (test/projstress/check.sql: in plain SQL and
# by the handlers' code run once over read_all), renames counted once
# (renamed_count, proj.rename_tally), letters count every user once,
# applied = the events: exactly once across the crashes.
#
#   ESRC_PROJ_ROUND_SECONDS (default 6)  write load after each crash
#   ESRC_PROJ_BREAK=1  the user_names handler counts renames in
#                      proj.rename_tally through a separate connection,
#                      committed outside the batch: the check
#                      'rename_tally equals sql replay' must then fail
set -euo pipefail
source "$(dirname "$0")/lib.sh"

# the postmasters pg_ctl daemonizes must be reaped when killed: run under
# a child subreaper (see ESRC_REAPER_PY in lib.sh)
if [ -z "${ESRC_PROJ_REAPED:-}" ]; then
    ESRC_PROJ_REAPED=1 exec python3 -c "$ESRC_REAPER_PY" bash "$0" "$@"
fi

round_secs=${ESRC_PROJ_ROUND_SECONDS:-6}
brk=0
[ -z "${ESRC_PROJ_BREAK:-}" ] || brk=1
dir=$(test_tmpdir projcrash)
port=$(free_port)
writers=
stop_at_exit "$dir" writers
pg_start "$dir" "$port" "esrc.projection_workers = 2" "restart_after_crash = on" \
    "deadlock_timeout = '100ms'"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
psql -qX -v ON_ERROR_STOP=1 -v break=$brk -v psql="$PG_BINDIR/psql" \
    -f "$ESRC_ROOT/test/projstress/setup.sql" >/dev/null
psql -qX -v ON_ERROR_STOP=1 -f "$ESRC_ROOT/test/projstress/check.sql" >/dev/null
q -c "UPDATE proj.knobs SET sleep_every = 20, sleep_s = 0.05"
q -c "SELECT esrc.create_projection('user_names', 'security.user_names_v1(esrc.event)', ARRAY['user'],
                                    partitions => 4, reset_function => 'security.user_names_reset()')" >/dev/null
q -c "SELECT esrc.create_projection('name_letters', 'security.name_letters_h(esrc.event)', ARRAY['user'],
                                    partitions => 4)" >/dev/null

wait_ready() {
    local i
    for i in $(seq 1 120); do
        q -c "SELECT 1" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    tail -20 "$dir/server.log"
    die "the server did not come back"
}
workers_now() {
    q -c "SELECT count(*) FROM pg_stat_activity
          WHERE backend_type LIKE 'esrc projection worker%' AND datname = current_database()" 2>/dev/null || echo 0
}
wait_workers() {
    local i
    for i in $(seq 1 120); do
        [ "$(workers_now)" = 2 ] && { log "$1: 2 projection workers running"; return 0; }
        sleep 0.5
    done
    die "$1: the projection workers did not come back (have $(workers_now))"
}
# a worker in the middle of a batch: in the handler's pg_sleep, with an
# xid (the batch has written); prints "pid xid"
wait_mid_batch() {
    local i row
    for i in $(seq 1 400); do
        row=$(q -F ' ' -c "SELECT pid, backend_xid FROM pg_stat_activity
                           WHERE backend_type LIKE 'esrc projection worker%'
                             AND backend_xid IS NOT NULL AND wait_event = 'PgSleep'
                           LIMIT 1" 2>/dev/null || true)
        [ -n "$row" ] && { echo "$row"; return 0; }
        sleep 0.05
    done
    die "no worker was caught in the middle of a batch"
}
postmaster_children() {
    ps -o pid= --ppid "$1" | tr -d ' '
}
aborted=()

crash() {   # crash 1|2|3
    local pm children c i pid xid
    # the sleeps become 3 s long, so that the crash lands inside the batch
    # caught (an orphaned backend goes on after kill -9 of the postmaster
    # until it next waits, and could otherwise commit its batch first)
    q -c "UPDATE proj.knobs SET sleep_s = 3"
    sleep 0.5
    read -r pid xid < <(wait_mid_batch) || true
    [ -n "${xid:-}" ] || die "round $1: no worker was caught in the middle of a batch"
    # The worker commits with synchronous_commit off and this batch has not
    # committed, so its WAL may still be only in wal_buffers: a crash would
    # then lose every trace of the xid, recovery would hand it out again,
    # and pg_xact_status below would ask about another transaction ("in
    # progress" on 17 in CI, or "transaction ID ... is in the future").
    # Wait until the WAL inserted so far, the batch's writes included, is
    # flushed.  (A commit with synchronous_commit = on is not enough: a
    # transaction that wrote no WAL of its own, such as one that only took
    # an xid, commits asynchronously whatever the setting.)
    local lsn
    lsn=$(q -c "SELECT pg_current_wal_insert_lsn()")
    for i in $(seq 1 200); do
        [ "$(q -c "SELECT pg_current_wal_flush_lsn() >= '$lsn'::pg_lsn")" = t ] && break
        sleep 0.05
    done
    [ "$(q -c "SELECT pg_current_wal_flush_lsn() >= '$lsn'::pg_lsn")" = t ] \
        || die "round $1: the WAL up to $lsn was not flushed in 10 s"
    case $1 in
        1)
            log "round 1: kill -9 of projection worker $pid (transaction $xid mid-batch)"
            kill -9 "$pid"
            for i in $(seq 1 100); do
                grep -q "all server processes terminated; reinitializing" "$dir/server.log" && break
                sleep 0.1
            done
            grep -q "all server processes terminated; reinitializing" "$dir/server.log" \
                || die "the postmaster did not reinitialize"
            ;;
        2)
            pm=$(head -1 "$dir/data/postmaster.pid")
            children=$(postmaster_children "$pm")
            log "round 2: kill -9 of the postmaster $pm (worker $pid, transaction $xid mid-batch)"
            kill -9 "$pm"
            for i in $(seq 1 240); do
                local alive=
                for c in $pm $children; do
                    [ -e "/proc/$c" ] && [ "$(awk '{print $3}' "/proc/$c/stat" 2>/dev/null)" != Z ] && alive=1
                done
                [ -z "$alive" ] && break
                sleep 0.25
            done
            [ -z "$alive" ] || die "children of the killed postmaster are still running"
            as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 120 start >/dev/null \
                || { tail -20 "$dir/server.log"; die "no restart after kill -9 of the postmaster"; }
            ;;
        3)
            log "round 3: pg_ctl stop -m immediate (worker $pid, transaction $xid mid-batch)"
            as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
            as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 120 start >/dev/null \
                || { tail -20 "$dir/server.log"; die "no restart after an immediate shutdown"; }
            ;;
    esac
    wait_ready
    q -c "UPDATE proj.knobs SET sleep_s = 0.05"
    # the batch in flight was rolled back
    st=$(q -c "SELECT pg_xact_status('$xid'::text::xid8)")
    if [ "$st" != aborted ]; then
        q -c "SELECT pg_current_xact_id(), pid, backend_type, backend_xid, left(query, 60)
              FROM pg_stat_activity WHERE backend_xid IS NOT NULL" >&2 || true
        die "round $1: the batch in flight (transaction $xid) is $st, not aborted"
    fi
    aborted+=("$xid")
    wait_workers "round $1"
}

wait_workers "start"
for round in 1 2 3; do
    "$PG_BINDIR/pgbench" -n -c 8 -j 2 -T "$round_secs" -R 150 --max-tries=100 \
        -f "$ESRC_ROOT/test/projstress/writers.pgbench" >"$dir/pgbench-$round.log" 2>&1 &
    writers=$!
    sleep 2
    crash $round
    # pgbench's clients end with the server; the log is the truth
    wait "$writers" || true
    # more load with the workers back: appends go on while the slow
    # projections run
    "$PG_BINDIR/pgbench" -n -c 8 -j 2 -T "$round_secs" -R 150 --max-tries=100 \
        -f "$ESRC_ROOT/test/projstress/writers.pgbench" >"$dir/pgbench-$round-after.log" 2>&1 &
    writers=$!
    wait "$writers" || { cat "$dir/pgbench-$round-after.log"; die "pgbench failed after round $round"; }
    writers=
    grep -q "^number of failed transactions: 0 " "$dir/pgbench-$round-after.log" \
        || die "appends failed while the projections ran (round $round)"
    grep -E "^(number of transactions actually processed|tps)" "$dir/pgbench-$round-after.log" | sed 's/^/  /' >&2
done

# drain, faster
q -c "UPDATE proj.knobs SET sleep_every = 0"
total=$(q -c "SELECT count(*) FROM proj.user_events")
log "$total events of category user; waiting for the projections to drain"
for i in $(seq 1 600); do
    [ "$(q -c "SELECT proj.caught_up('{user_names,name_letters}')")" = t ] && break
    sleep 0.5
done
n=$(q -c "SELECT proj.replay()")
q -c "SELECT '  ' || projection || ': ' || sum(applied) || ' applied, attempts ' || sum(attempts)
             || ', states ' || string_agg(DISTINCT state, '/')
      FROM esrc.projection_status GROUP BY projection ORDER BY projection" >&2
q -F ' ' -c "SELECT name, ok FROM proj.check_v1" >"$dir/check.out"
sed 's/^/  /' "$dir/check.out" >&2
[ "$(wc -l <"$dir/check.out")" -eq 12 ] || die "expected 12 checks"
! grep -q ' f$' "$dir/check.out" || die "a projection's effects are not exactly once across the crashes (above)"
[ "$n" -gt 500 ] || die "too little happened: $n events"
log "exactly once across three crashes ($n events; batches rolled back: ${aborted[*]})"
