#!/usr/bin/env bash
# Kafka forwarding of asynchronous commits: nothing that a crash takes back
# is ever in Kafka.  With synchronous_commit = off an append's commit is
# visible before its WAL is written; the worker flushes the WAL up to the
# commit records of what it read (order.c publishes them, fwdread.c
# flushes) before it sends.  Here the WAL writer waits 10 s
# (wal_writer_delay), and every postgres process is killed with SIGKILL at
# once, so no WAL is written that nobody flushed:
#   0. control: with the forwarder paused, an asynchronous append that is
#      visible is lost by the crash.  Otherwise the crash could not show a
#      missing flush, and the test fails.
#   1. rounds: an asynchronous append, waited for until the worker has
#      forwarded it, then the crash: after restart the event is still in the log, with the id
#      that Kafka has at its position, and Kafka has it once.
# Finally every event of the log is in Kafka exactly once, in order.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-async)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0
ROUNDS=${ROUNDS:-4}

fwd_start_kafka "$dir/kafka"
# esrc.standby_horizon_interval = -1: the horizon publisher (for hot
# standbys) flushes the WAL after each row it writes, which would make the
# control's asynchronous commit durable within milliseconds
fwd_start_pg "$dir/pg" "wal_writer_delay = 10000" "autovacuum = off" "checkpoint_timeout = 3600" \
    "esrc.standby_horizon_interval = -1"
fwd_sql "SELECT esrc.append('warmup-1', 'Started', '{}')" >/dev/null
fwd_wait_forwarded 60 || die "the forwarder did not start: $(fwd_status)"

pm_pid() { head -1 "$dir/pg/data/postmaster.pid"; }

# SIGKILL to the postmaster and all its children in one call: no process is
# left to write WAL buffers out after the others died
crash() {
    local pm procs p
    pm=$(pm_pid)
    procs="$pm $(pgrep -P "$pm" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    kill -9 $procs
    for p in $procs; do
        while kill -0 "$p" 2>/dev/null; do sleep 0.05; done
    done
    as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/server.log" -w -t 60 start >/dev/null
}

# async_append STREAM: append one event with synchronous_commit = off in a
# transaction of its own; prints its position
async_append() {
    fwd_sql "SET synchronous_commit = off; SELECT esrc.append('$1', 'Noted', '{\"n\": 1}');
             SELECT max(position) FROM esrc.events WHERE stream = '$1'" | tail -1
}

# the position of an event as Kafka has it: the ids of the records there
kafka_ids_at() {
    "$FWD_KAFKA/consume.sh" "$FWD_BROKER" $(fwd_topics) |
        jq -r --arg p "$1" 'select(.headers.ce_esrcposition == $p) | .headers.ce_id'
}

log "0. control: a visible asynchronous commit that nobody flushed is lost"
fwd_sql "SELECT esrc.forwarder_pause()" >/dev/null
p=$(async_append control-1)
expect "the control event is visible before the crash" \
    test "$(fwd_sql "SELECT count(*) FROM esrc.events WHERE position = $p")" = 1
crash
n=$(fwd_sql "SELECT count(*) FROM esrc.events WHERE stream = 'control-1'")
if [ "$n" != 0 ]; then
    log "FAIL: the crash kept an unflushed asynchronous commit: this setup cannot show a missing flush"
    status=1
else
    log "   lost, as it should be"
fi
fwd_sql "SELECT esrc.forwarder_resume()" >/dev/null
fwd_wait_forwarded 60 || status=1

for ((r = 1; r <= ROUNDS; r++)); do
    log "1.$r an asynchronous append, forwarded, then the crash"
    p=$(async_append "dur-$r")
    deadline=$((SECONDS + 30))
    until [ "$(fwd_sql "SELECT last_position >= $p FROM esrc.forwarder_worker_status()")" = t ]; do
        [ $SECONDS -lt $deadline ] || { log "not forwarded: $(fwd_status)"; status=1; break; }
        sleep 0.02
    done
    crash
    id=$(fwd_sql "SELECT id FROM esrc.events WHERE position = $p AND stream = 'dur-$r'")
    expect "round $r: the forwarded event survived the crash" test -n "$id"
    fwd_wait_forwarded 60 || status=1
    ids=$(kafka_ids_at "$p")
    expect "round $r: Kafka has the event once, with the id of the log's" test "$ids" = "$id"
done

log "2. the whole log against Kafka"
fwd_wait_forwarded 60 || status=1
fwd_dump_events "$dir/events.json"
fwd_consume "$dir/kafka.json"
fwd_check "$dir/events.json" "$dir/kafka.json" || status=1

[ "$status" = 0 ] && log "PASS" || log "FAIL"
exit "$status"
