#!/usr/bin/env bash
# The forwarder's librdkafka clients and the worker's signals and exits
# (issue 12, Low):
#   1. every librdkafka thread of the worker blocks the signals PostgreSQL
#      handles, so none of its handlers runs on a librdkafka thread;
#   2. SIGTERM (pg_terminate_backend) while the worker connects to a Kafka
#      that does not answer: it exits, closing the clients of that
#      connect, and a new worker starts;
#   3. a fast shutdown while the broker hangs (SIGSTOP, with batches in
#      flight) completes (pg_ctl's own timeout, 60 s, is the bound).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-shutdown)
kpid=
trap '[ -n "$kpid" ] && kill -CONT "$kpid" 2>/dev/null; fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0

fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg"
fwd_sql "SELECT esrc.append('s-1', 'Started', '{}')" >/dev/null
fwd_wait_forwarded 60 || die "the forwarder did not start: $(fwd_status)"

log "1. signal masks of the worker's threads"
wpid=$(fwd_worker_pid)
# SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGTERM, SIGCHLD, SIGURG
need=0
for sig in 1 2 3 10 12 14 15 17 23; do need=$((need | (1 << (sig - 1)))); done
threads=0
unblocked=0
for t in /proc/"$wpid"/task/*; do
    tid=${t##*/}
    [ "$tid" = "$wpid" ] && continue
    threads=$((threads + 1))
    blk=$((16#$(sed -n 's/^SigBlk:[[:space:]]*//p' "$t/status")))
    if [ $((blk & need)) -ne $need ]; then
        unblocked=$((unblocked + 1))
        log "   thread $tid ($(cat "$t/comm")) SigBlk $(sed -n 's/^SigBlk:[[:space:]]*//p' "$t/status")"
    fi
done
log "   $threads librdkafka threads"
expect "the worker has librdkafka threads" test "$threads" -gt 0
expect "each of them blocks PostgreSQL's signals" test "$unblocked" = 0

log "2. SIGTERM while connecting to a Kafka that does not answer"
dead=$(free_port)
log_from=$(($(wc -l <"$dir/pg/server.log") + 1))
fwd_sql "ALTER SYSTEM SET esrc.kafka_brokers = '127.0.0.1:$dead'" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
deadline=$((SECONDS + 60))
while :; do
    st=$(fwd_sql "SELECT state FROM esrc.forwarder_status")
    # connecting, and the producers exist (threads beside the main one)
    if [ "$st" = connecting ] && [ "$(ls /proc/"$wpid"/task | wc -l)" -gt 3 ]; then break; fi
    [ $SECONDS -lt $deadline ] || die "the worker never connected: $(fwd_status)"
    sleep 0.1
done
fwd_sql "SELECT pg_terminate_backend($wpid)" >/dev/null
deadline=$((SECONDS + 30))
while kill -0 "$wpid" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || break
    sleep 0.1
done
expect "the worker exited on SIGTERM during connect" eval "! kill -0 $wpid 2>/dev/null"
expect "it closed the Kafka clients of the interrupted connect" \
    eval "tail -n +$log_from '$dir/pg/server.log' | grep -q 'closing the Kafka clients of an interrupted connect'"
expect "it exited normally (no crash of the cluster)" \
    eval "! tail -n +$log_from '$dir/pg/server.log' | grep -q 'terminated by signal'"
deadline=$((SECONDS + 30))
until [ -n "$(fwd_worker_pid)" ] && [ "$(fwd_worker_pid)" != "$wpid" ]; do
    [ $SECONDS -lt $deadline ] || break
    sleep 0.2
done
expect "a new worker started" test -n "$(fwd_worker_pid)"

log "3. fast shutdown while the broker hangs, with batches in flight"
fwd_sql "ALTER SYSTEM SET esrc.kafka_brokers = '$FWD_BROKER'" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
fwd_wait_forwarded 60 || status=1
kpid=$(cat "$dir/kafka/kafka.pid")
kill -STOP "$kpid"
for i in $(seq 1 50); do
    fwd_sql "SELECT esrc.append('s-$((i % 5))', 'E', '{}')" >/dev/null
done
sleep 3
hung=$(fwd_sql "SELECT events_pending > 0 AND last_position < (SELECT max(position) FROM esrc.events) FROM esrc.forwarder_status")
expect "the worker waits for the hanging broker, events pending" test "$hung" = t
t0=$SECONDS
log_from=$(($(wc -l <"$dir/pg/server.log") + 1))
if as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/pg/data" -m fast -w -t 60 stop >/dev/null 2>&1; then
    log "ok - fast shutdown with the broker stopped completed ($((SECONDS - t0)) s)"
else
    log "FAIL - fast shutdown with the broker stopped did not complete within 60 s"
    status=1
fi
expect "the worker exited without a crash" \
    eval "! tail -n +$log_from '$dir/pg/server.log' | grep -q 'terminated by signal'"
kill -CONT "$kpid"
kpid=

if [ $status -ne 0 ]; then
    grep -E "esrc forwarder|ERROR|FATAL" "$dir/pg/server.log" | tail -30 >&2
fi
exit $status
