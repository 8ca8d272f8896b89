#!/usr/bin/env bash
# A consumer group under load (issue 14).  8 pgbench writers append to 400
# streams (some transactions roll back, later positions often commit first,
# test/substress/writers.pgbench) while a group of 4 members
# (test/substress/consumer.py, the exactly-once pattern: poll, write
# results, ack, commit in one transaction) consumes a subscription of 16
# partitions with esrc.subscription_lease = 2s.  Members are killed with
# kill -9 and new ones started during the run (between 4 and 5 live), and
# esrc.subscription_status is sampled every 100 ms.  After the writers stop
# and the group has drained (test/substress/check.sql):
#   every committed event of the subscription's category is in the results
#   exactly once, nothing else is; per stream the results are in version
#   order; no partition was processed by two members at once (from the
#   results: per partition, the committed batches of different members,
#   first insert to commit, do not overlap; from the samples: one holder);
#   partitions changed hands.
# Then the spreading: with 4 live members each holds 4; a 5th joins: the
# first by name holds 4, the others 3; two leave: 6, 5, 5.
# Last, every check is shown to fail on results with a planted fault.
#
#   ESRC_SUB_SECONDS (default 30)  length of the write load
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ensure_python_psycopg
secs=${ESRC_SUB_SECONDS:-30}
partitions=16
dir=$(test_tmpdir subgroup)
port=$(free_port)
declare -A pid_of=()
live=()
sampler=
writers=
cleanup() {
    local m
    for m in "${!pid_of[@]}"; do kill -9 "${pid_of[$m]}" 2>/dev/null || true; done
    [ -n "$writers" ] && kill "$writers" 2>/dev/null || true
    [ -n "$sampler" ] && kill "$sampler" 2>/dev/null || true
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "esrc.subscription_lease = '2s'" "track_commit_timestamp = on"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
dsn="host=127.0.0.1 port=$port user=postgres dbname=postgres"
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
psql -qX -v ON_ERROR_STOP=1 -v partitions=$partitions -f "$ESRC_ROOT/test/substress/setup.sql" >/dev/null
psql -qX -v ON_ERROR_STOP=1 -v partitions=$partitions -f "$ESRC_ROOT/test/substress/check.sql" >/dev/null

next_member=1
start_member() {
    local m
    m=$(printf 'm%02d' $next_member)
    next_member=$((next_member + 1))
    python3 "$ESRC_ROOT/test/substress/consumer.py" "$dsn" g "$m" in 1s 2>>"$dir/$m.log" &
    pid_of[$m]=$!
    live+=("$m")
}
kill_member() {
    local i=$((RANDOM % ${#live[@]})) m
    m=${live[$i]}
    kill -9 "${pid_of[$m]}"
    wait "${pid_of[$m]}" 2>/dev/null || true
    unset "pid_of[$m]"
    live=("${live[@]:0:$i}" "${live[@]:$((i + 1))}")
    kills=$((kills + 1))
}
# the shares the rules give the live members (sorted by name), as
# "m01=4 m02=4 ..."
expected_shares() {
    local n=${#live[@]} i=0 m out=()
    for m in $(printf '%s\n' "${live[@]}" | sort); do
        out+=("$m=$((partitions / n + (i < partitions % n ? 1 : 0)))")
        i=$((i + 1))
    done
    echo "${out[*]}"
}
shares_now() {
    q -c "SELECT string_agg(member || '=' || held, ' ' ORDER BY member) FROM shares WHERE subscription = 'g'"
}
# wait (up to 60 s) for the group to settle on the expected shares
wait_shares() {
    local want got i
    want=$(expected_shares)
    for i in $(seq 1 120); do
        got=$(shares_now)
        [ "$got" = "$want" ] && { log "shares: $got"; return 0; }
        sleep 0.5
    done
    die "the partitions were not spread as the rules say: want '$want', have '$got'"
}

q -c "CALL sample_status()" &
sampler=$!
for i in 1 2 3 4; do start_member; done

log "pgbench: 8 writers for ${secs}s; 4 members over $partitions partitions, killed and replaced during the run"
"$PG_BINDIR/pgbench" -n -c 8 -j 2 -T "$secs" --max-tries=100 \
    -f "$ESRC_ROOT/test/substress/writers.pgbench" >"$dir/pgbench.log" 2>&1 &
writers=$!
kills=0
round=0
while kill -0 "$writers" 2>/dev/null; do
    sleep 3
    kill -0 "$writers" 2>/dev/null || break
    round=$((round + 1))
    case $((round % 3)) in
        1) kill_member; start_member ;;   # replace one
        2) start_member ;;                # 5 members
        0) kill_member ;;                 # back to 4
    esac
done
wait "$writers" || { cat "$dir/pgbench.log"; die "pgbench failed"; }
writers=
grep -E "^(number of transactions actually processed|number of failed|tps)" "$dir/pgbench.log" | sed 's/^/  /' >&2
while [ ${#live[@]} -gt 4 ]; do kill_member; done
while [ ${#live[@]} -lt 4 ]; do start_member; done

total=$(q -c "SELECT count(*) FROM expected_events")
log "$total events to consume; $kills members killed; waiting for the group to drain"
for i in $(seq 1 240); do
    done_=$(q -c "SELECT count(DISTINCT position) FROM results_in")
    [ "$done_" -ge "$total" ] && break
    sleep 0.5
done
log "consumed $done_ of $total"

# spreading, with no load: 4 members, then 5, then 3
wait_shares
start_member
wait_shares
kill_member
kill_member
wait_shares

q -c "INSERT INTO sampler_stop VALUES (true)"
wait "$sampler" || die "the status sampler failed"
sampler=
for m in "${!pid_of[@]}"; do
    kill -0 "${pid_of[$m]}" 2>/dev/null || die "member $m ended by itself: $(tail -5 "$dir/$m.log")"
    kill -9 "${pid_of[$m]}"; wait "${pid_of[$m]}" 2>/dev/null || true
done
pid_of=()
! grep -l Traceback "$dir"/m*.log >/dev/null 2>&1 || die "a member failed: $(grep -h -A3 Traceback "$dir"/m*.log | head -20)"

q -c "SELECT count(*) || ' batches committed by ' || count(DISTINCT member) || ' members, '
             || (SELECT max(sample) FROM status_samples) || ' status samples' FROM batches" | sed 's/^/  /' >&2
q -F ' ' -c "SELECT name, ok FROM check_in UNION ALL SELECT name, ok FROM check_samples" >"$dir/check.out"
sed 's/^/  /' "$dir/check.out" >&2
[ "$(wc -l <"$dir/check.out")" -eq 8 ] || die "expected 8 checks"
! grep -q ' f$' "$dir/check.out" || die "a subscription guarantee failed (above)"
[ "$total" -gt 1000 ] && [ "$kills" -ge 3 ] || die "too little happened: $total events, $kills kills"

# every check catches a planted fault (in a transaction rolled back, or
# committed and removed for the commit-timestamp check)
planted() {   # planted NAME-PATTERN SQL...
    local pattern=$1 out
    shift
    out=$(q -F ' ' -c "BEGIN" "$@" -c "SELECT name, ok FROM check_in UNION ALL SELECT name, ok FROM check_samples" -c "ROLLBACK" | grep -F -- "$pattern")
    [[ "$out" == *" f" ]] || die "the check '$pattern' missed a planted fault: $out"
}
planted 'in: no event twice' -c "INSERT INTO results_in (position, stream, version, member, at)
    SELECT position, stream, version, member, at FROM results_in ORDER BY id DESC LIMIT 1"
planted 'in: as many results' -c "DELETE FROM results_in WHERE id = (SELECT max(id) FROM results_in)"
planted 'in: no event missing' -c "DELETE FROM results_in WHERE id = (SELECT max(id) FROM results_in)"
planted 'in: nothing else' -c "UPDATE results_in SET version = version + 1000 WHERE id = (SELECT max(id) FROM results_in)"
planted 'in: per stream' -c "UPDATE results_in SET id = (SELECT max(id) + 1 FROM results_in)
    WHERE id = (SELECT min(id) FROM results_in WHERE stream = (SELECT stream FROM results_in GROUP BY 1 HAVING count(*) > 1 LIMIT 1))"
planted 'status: one row' -c "INSERT INTO status_samples SELECT * FROM status_samples WHERE sample = 1 AND partition = 0"
planted 'status: partitions changed' -c "UPDATE status_samples SET member = 'x' WHERE member IS NOT NULL"
# an intruder that inserted for a partition when another member's batch on it began, committed now
q -c "INSERT INTO results_in (position, stream, version, member, at)
      SELECT position, stream, version, 'intruder', at FROM results_in ORDER BY id LIMIT 1"
out=$(q -F ' ' -c "SELECT name, ok FROM check_in" | grep -F 'in: no partition')
q -c "DELETE FROM results_in WHERE member = 'intruder'"
[[ "$out" == *" f" ]] || die "the overlap check missed a planted intruder: $out"
log "every check caught its planted fault"
log "the group kept every guarantee ($total events, $kills kills)"
