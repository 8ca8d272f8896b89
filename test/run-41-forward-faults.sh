#!/usr/bin/env bash
# Kafka forwarding under faults, exactly_once: while sessions append, in
# turn
#   1. kill -9 the postmaster, start it again (crash recovery);
#   2. terminate the worker (SIGTERM), then kill -9 it (the postmaster then
#      restarts every backend);
#   3. kill -9 the broker and start it again on the same data;
#   4. stop the broker for 30 s: appends go on (their throughput with the
#      broker up and down is printed, not asserted), the status shows the
#      error, and the worker catches up when the broker is back;
#   5. terminate the worker four times under load, each time soon after it
#      came back and while it catches up with batches of 20
#      (esrc.kafka_batch_size): with such a backlog it keeps two Kafka
#      transactions in flight, sending a batch while the one before is
#      committed (see src/forward/kafka.c).
# Afterwards a read_committed consumer must see every committed event
# exactly once, in order (test/forward/check.py).  The worker logs every
# batch (esrc.forwarder_log_batches): the test also checks that batches
# did overlap, so that the pipelined path was the one under test.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-faults)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0

KAFKA_NUM_PARTITIONS=2 fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg"
fwd_sql "ALTER SYSTEM SET esrc.forwarder_log_batches = on" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
fwd_sql "SELECT esrc.append('warmup-1', 'Started', '{}')" >/dev/null
fwd_wait_forwarded 60 || die "the forwarder did not start: $(fwd_status)"

cat >"$dir/load.sql" <<'EOF'
\set s random(1, 40)
\set r random(1, 10)
BEGIN;
SELECT esrc.append('acct-' || :s, 'Deposited', jsonb_build_object('amount', :r, 'client', :client_id));
SELECT esrc.append('cart-' || :s, 'Changed', jsonb_build_object('r', :r), '{"m": 1}');
\if :r = 1
ROLLBACK;
\else
COMMIT;
\endif
EOF

# load SECONDS [RATE]: pgbench in the background; its pid in $load.  It may
# lose its connections to a crash: we only count what committed.
load() {
    pgbench -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -f "$dir/load.sql" -c 3 -j 1 \
        -T "$1" ${2:+-R "$2"} "$FWD_DB" >>"$dir/pgbench.log" 2>&1 &
    load=$!
}
finish_load() { wait "$load" 2>/dev/null || true; }
wait_worker() { # until the worker runs (again) and has connected
    local deadline=$((SECONDS + 60))
    until [ "$(fwd_sql "SELECT state FROM esrc.forwarder_status" 2>/dev/null)" = running ]; do
        [ $SECONDS -lt $deadline ] || { log "worker not back: $(fwd_status)"; return 1; }
        sleep 0.2
    done
}
pm_pid() { head -1 "$dir/pg/data/postmaster.pid"; }

log "1. kill -9 the postmaster under load"
load 6 300
sleep 2.5
pm=$(pm_pid)
children=$(pgrep -P "$pm" || true)
kill -9 "$pm"
# its children notice the postmaster's death and exit; wait for them
for c in $children; do
    while kill -0 "$c" 2>/dev/null; do sleep 0.1; done
done
finish_load
as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/server.log" -w -t 60 start >/dev/null
wait_worker || status=1
fwd_wait_forwarded 60 || status=1
log "   $(fwd_status)"

log "2a. terminate the worker (SIGTERM) under load"
load 5 300
sleep 2
old=$(fwd_worker_pid)
fwd_sql "SELECT pg_terminate_backend($old)" >/dev/null
finish_load
wait_worker || status=1
expect "the worker was restarted" test "$(fwd_worker_pid)" != "$old"
fwd_wait_forwarded 60 || status=1

log "2b. kill -9 the worker under load (the postmaster resets every backend)"
load 5 300
sleep 2
kill -9 "$(fwd_worker_pid)"
finish_load
wait_worker || status=1
fwd_wait_forwarded 60 || status=1
log "   $(fwd_status)"

log "3. kill -9 the broker under load, start it again"
load 8 300
sleep 2
"$FWD_KAFKA/broker.sh" kill "$dir/kafka" 2>/dev/null
"$FWD_KAFKA/broker.sh" restart "$dir/kafka" 2>&1 | tail -1 | sed 's/^/   /' >&2
finish_load
fwd_wait_forwarded 90 || status=1
log "   $(fwd_status)"

log "4. stop the broker for 30 s under load"
tps() { sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$1" | tail -1; }
pgbench -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -f "$dir/load.sql" -c 3 -j 1 -T 4 "$FWD_DB" >"$dir/up.log" 2>&1
"$FWD_KAFKA/broker.sh" stop "$dir/kafka" 2>/dev/null
t_stop=$SECONDS
pgbench -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -f "$dir/load.sql" -c 3 -j 1 -T 4 "$FWD_DB" >"$dir/down.log" 2>&1
log "   append throughput (transactions of 2 events/s): broker up $(tps "$dir/up.log"), broker stopped $(tps "$dir/down.log")"
load $((30 - (SECONDS - t_stop))) 200
sleep 3
outage=$(fwd_sql "SELECT state || '|' || coalesce(last_error, '') || '|' || (events_pending > 0) FROM esrc.forwarder_status")
log "   during the outage: $outage"
expect "during the outage the status says disconnected (or error), with the error, events pending" \
    eval '[[ "$outage" =~ ^(disconnected|error)\|.+\|true$ ]]'
finish_load
# a fast shutdown while Kafka is away: the worker honours SIGTERM
t_restart=$SECONDS
as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/server.log" -m fast -w -t 60 restart >/dev/null \
    || { log "FAIL - restart with Kafka down"; status=1; }
log "   PostgreSQL restarted in $((SECONDS - t_restart)) s with the broker down"
while [ $((SECONDS - t_stop)) -lt 30 ]; do sleep 0.5; done
pending=$(fwd_sql "SELECT events_pending FROM esrc.forwarder_status")
"$FWD_KAFKA/broker.sh" restart "$dir/kafka" 2>&1 | tail -1 | sed 's/^/   /' >&2
t_back=$SECONDS
fwd_wait_forwarded 120 || status=1
log "   caught up with $pending pending events $((SECONDS - t_back)) s after the broker was back"

log "5. terminate the worker four times under load (two transactions in flight)"
fwd_sql "ALTER SYSTEM SET esrc.kafka_batch_size = 20" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
log_from=$(($(wc -l <"$dir/pg/server.log") + 1))
load 30 600
for i in 1 2 3 4; do
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.2 + r / 32768 }')"
    wait_worker || status=1
    old=$(fwd_worker_pid)
    fwd_sql "SELECT pg_terminate_backend($old)" >/dev/null
done
finish_load
wait_worker || status=1
fwd_wait_forwarded 60 || status=1
log "   $(fwd_status)"

# consecutive batches of one worker process overlapped: the later one was
# started before the earlier one's commit returned
overlaps=$(tail -n +"$log_from" "$dir/pg/server.log" | sed -n 's/.*\[\([0-9]*\)\].*esrc forwarder: batch .* started_us=\([0-9]*\) .* committed_us=\([0-9]*\)$/\1 \2 \3/p' \
    | awk '$1 == pid && $2 < committed { n++ } { pid = $1; committed = $3 } END { print n + 0 }')
log "   $overlaps batches were sent while the batch before them was committed"
expect "batches were pipelined (sent while the one before was committed)" test "$overlaps" -gt 0

fwd_dump_events "$dir/events.jsonl"
fwd_consume "$dir/records.jsonl"
fwd_check "$dir/events.jsonl" "$dir/records.jsonl" --partitions 2 || status=1
expect "the status shows no error any more" \
    test "$(fwd_sql "SELECT state FROM esrc.forwarder_status")" = running

if [ $status -ne 0 ]; then
    grep -E "esrc forwarder|ERROR|FATAL|PANIC" "$dir/pg/server.log" | tail -40 >&2
fi
exit $status
