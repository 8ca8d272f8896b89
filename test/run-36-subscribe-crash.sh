#!/usr/bin/env bash
# Subscriptions across crashes (issue 14).  Two members (c1, c2) of
# subscription "g" (4 partitions) consume with the exactly-once pattern
# (poll, write results_in, ack, commit in one transaction); one member (o1)
# of subscription "out" (4 partitions) with outside effects (autocommit
# poll, results_out written in its own statement, then ack).  Both pause
# 0.3 s between writing and acking, so that a crash can catch them
# mid-batch.  pgbench writers append throughout (test/substress/
# writers.pgbench).  Three rounds, each with c1 caught mid-batch (its
# transaction open, results written, not acked):
#   1. kill -9 of c1's backend (the postmaster restarts every backend)
#   2. kill -9 of the postmaster (its children exit, then a new start)
#   3. pg_ctl stop -m immediate, then start
# After each, with the members held back from reconnecting: no partition
# has a holder (leases are in shared memory); then the members reconnect
# and take their partitions again (c1 2, c2 2, o1 4).  At the end, after a
# drain (test/substress/check.sql): results_in has every event exactly
# once, results_out every event at least once, nothing else in either, per
# stream the versions in order (for results_out: the first deliveries).
# Last, the results_out checks are shown to catch planted faults.
#
#   ESRC_SUB_ROUND_SECONDS (default 8)  write load after each crash
#   ESRC_SUB_BREAK=1  c1 and c2 commit their results before acking (not
#                     exactly once): shows that the checks catch it
set -euo pipefail
source "$(dirname "$0")/lib.sh"

# the postmasters pg_ctl daemonizes must be reaped when killed: run under
# a child subreaper (see ESRC_REAPER_PY in lib.sh)
if [ -z "${ESRC_SUB_REAPED:-}" ]; then
    ESRC_SUB_REAPED=1 exec python3 -c "$ESRC_REAPER_PY" bash "$0" "$@"
fi

ensure_python_psycopg
round_secs=${ESRC_SUB_ROUND_SECONDS:-8}
partitions=4
dir=$(test_tmpdir subcrash)
port=$(free_port)
declare -A pid_of=()
writers=
cleanup() {
    local m
    for m in "${!pid_of[@]}"; do kill -9 "${pid_of[$m]}" 2>/dev/null || true; done
    [ -n "$writers" ] && kill "$writers" 2>/dev/null || true
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "esrc.subscription_lease = '2s'" "track_commit_timestamp = on" \
    "restart_after_crash = on"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
export SUB_HOLD=$dir/hold
dsn="host=127.0.0.1 port=$port user=postgres dbname=postgres"
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
psql -qX -v ON_ERROR_STOP=1 -v partitions=$partitions -f "$ESRC_ROOT/test/substress/setup.sql" >/dev/null
psql -qX -v ON_ERROR_STOP=1 -v partitions=$partitions -f "$ESRC_ROOT/test/substress/check.sql" >/dev/null

start_member() {   # start_member SUBSCRIPTION MEMBER in|out
    python3 "$ESRC_ROOT/test/substress/consumer.py" "$dsn" "$1" "$2" "$3" 1s 0.3 2>>"$dir/$2.log" &
    pid_of[$2]=$!
}
in_mode=in
[ -z "${ESRC_SUB_BREAK:-}" ] || in_mode=in-broken
start_member g c1 $in_mode
start_member g c2 $in_mode
start_member out o1 out

wait_ready() {
    local i
    for i in $(seq 1 120); do
        q -c "SELECT 1" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    tail -20 "$dir/server.log"
    die "the server did not come back"
}
shares_now() {
    q -c "SELECT coalesce(string_agg(subscription || ':' || member || '=' || held, ' '
                                     ORDER BY subscription, member), '')
          FROM shares"
}
wait_shares() {
    local want="g:c1=2 g:c2=2 out:o1=4" got i
    for i in $(seq 1 120); do
        got=$(shares_now)
        [ "$got" = "$want" ] && { log "members took their partitions again: $got"; return 0; }
        sleep 0.5
    done
    die "the members did not take their partitions again: want '$want', have '$got'"
}
# the backend of c1 in the middle of a batch: results written, not acked
# (ESRC_SUB_BREAK: results committed, so the backend is idle)
mid_batch="state = 'idle in transaction' AND backend_xid IS NOT NULL"
[ -z "${ESRC_SUB_BREAK:-}" ] || mid_batch="state = 'idle'"
wait_mid_batch() {
    local i pid
    for i in $(seq 1 200); do
        pid=$(q -c "SELECT pid FROM pg_stat_activity
                    WHERE application_name = 'sub:c1' AND $mid_batch" 2>/dev/null || true)
        [ -n "$pid" ] && { echo "$pid"; return 0; }
        sleep 0.05
    done
    die "c1 was never caught in the middle of a batch"
}
postmaster_children() {
    ps -o pid= --ppid "$1" | tr -d ' '
}

crash() {   # crash 1|2|3
    local pm children c i
    case $1 in
        1)
            c=$(wait_mid_batch)
            log "round 1: kill -9 of c1's backend $c (mid-batch)"
            touch "$SUB_HOLD"
            kill -9 "$c"
            # the postmaster kills every backend and reinitializes
            for i in $(seq 1 100); do
                grep -q "all server processes terminated; reinitializing" "$dir/server.log" && break
                sleep 0.1
            done
            grep -q "all server processes terminated; reinitializing" "$dir/server.log" \
                || die "the postmaster did not reinitialize"
            ;;
        2)
            c=$(wait_mid_batch)
            pm=$(head -1 "$dir/data/postmaster.pid")
            children=$(postmaster_children "$pm")
            log "round 2: kill -9 of the postmaster $pm (c1's backend $c mid-batch)"
            touch "$SUB_HOLD"
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
            c=$(wait_mid_batch)
            log "round 3: pg_ctl stop -m immediate (c1's backend $c mid-batch)"
            touch "$SUB_HOLD"
            as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
            as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 120 start >/dev/null \
                || { tail -20 "$dir/server.log"; die "no restart after an immediate shutdown"; }
            ;;
    esac
    wait_ready
    # leases are in shared memory: nobody holds a partition until the
    # members poll again
    held=$(q -c "SELECT count(*) FROM esrc.subscription_status WHERE member IS NOT NULL")
    [ "$held" = 0 ] || die "after the restart $held partitions still have a holder: $(shares_now)"
    rm -f "$SUB_HOLD"
    wait_shares
}

for round in 1 2 3; do
    "$PG_BINDIR/pgbench" -n -c 8 -j 2 -T "$round_secs" -R 200 \
        -f "$ESRC_ROOT/test/substress/writers.pgbench" >"$dir/pgbench-$round.log" 2>&1 &
    writers=$!
    sleep 2
    crash $round
    # pgbench's clients end with the server; the log is the truth
    wait "$writers" || true
    # more load with the members back
    "$PG_BINDIR/pgbench" -n -c 8 -j 2 -T "$round_secs" -R 200 \
        -f "$ESRC_ROOT/test/substress/writers.pgbench" >>"$dir/pgbench-$round.log" 2>&1 &
    writers=$!
    wait "$writers" || { cat "$dir/pgbench-$round.log"; die "pgbench failed after round $round"; }
    writers=
done

total=$(q -c "SELECT count(*) FROM expected_events")
log "$total events; waiting for both subscriptions to drain"
for i in $(seq 1 240); do
    a=$(q -c "SELECT count(DISTINCT position) FROM results_in")
    b=$(q -c "SELECT count(DISTINCT position) FROM results_out")
    [ "$a" -ge "$total" ] && [ "$b" -ge "$total" ] && break
    sleep 0.5
done
for m in "${!pid_of[@]}"; do
    kill -0 "${pid_of[$m]}" 2>/dev/null || die "member $m ended by itself: $(tail -5 "$dir/$m.log")"
    kill -9 "${pid_of[$m]}"; wait "${pid_of[$m]}" 2>/dev/null || true
done
pid_of=()
! grep -l Traceback "$dir"/[co][0-9].log >/dev/null 2>&1 || die "a member failed: $(grep -h -A3 Traceback "$dir"/[co][0-9].log | head -20)"
log "reconnections: $(cat "$dir"/[co][0-9].log | grep -c reconnecting)"

q -c "SELECT 'results_out: ' || count(*) || ' rows, ' || count(*) - count(DISTINCT position)
             || ' redeliveries' FROM results_out" | sed 's/^/  /' >&2
q -F ' ' -c "SELECT name, ok FROM check_in UNION ALL SELECT name, ok FROM check_out" >"$dir/check.out"
sed 's/^/  /' "$dir/check.out" >&2
[ "$(wc -l <"$dir/check.out")" -eq 9 ] || die "expected 9 checks"
! grep -q ' f$' "$dir/check.out" || die "a subscription guarantee failed across the crashes (above)"
[ "$total" -gt 500 ] || die "too little happened: $total events"

# the at-least-once checks catch planted faults (check_in's: run-35)
planted() {   # planted NAME-PATTERN SQL...
    local pattern=$1 out
    shift
    out=$(q -F ' ' -c "BEGIN" "$@" -c "SELECT name, ok FROM check_out" -c "ROLLBACK" | grep -F -- "$pattern")
    [[ "$out" == *" f" ]] || die "the check '$pattern' missed a planted fault: $out"
}
planted 'out: no event missing' -c "DELETE FROM results_out WHERE position = (SELECT max(position) FROM results_out)"
planted 'out: nothing else' -c "UPDATE results_out SET stream = stream || 'x' WHERE id = (SELECT max(id) FROM results_out)"
planted 'out: per stream' -c "UPDATE results_out SET id = id + 100000000
    WHERE (stream, version) = (SELECT stream, min(version) FROM results_out
                               WHERE stream = (SELECT stream FROM results_out GROUP BY 1 HAVING count(DISTINCT version) > 1 LIMIT 1)
                               GROUP BY 1)"
log "every at-least-once check caught its planted fault"
log "exactly once in the transaction, at least once outside, order kept, across three crashes"
