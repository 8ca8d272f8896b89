#!/usr/bin/env bash
# esrc.forwarder_standbys (issue 27, item 1): the forwarder sends a batch
# only once every listed standby's physical slot has flushed the WAL of
# the batch's commits; appends never wait.
#   1. a primary, a streaming standby on physical slot standby1, the
#      setting = standby1: events reach Kafka;
#   2. the standby stopped: appends go on, nothing more reaches Kafka,
#      state "waiting for standby" naming the slot, the wait metric moves;
#   3. the standby started again: everything arrives, exactly once;
#   4. a lying standby (test/forward/lying_standby.c) on slot liar reports
#      flushed far beyond what its walsender sent (as a diverged old
#      leader's first reply does after a failover), its walsender then
#      stopped (SIGSTOP: it sends nothing more, as a walsender at the end
#      of an old timeline): the worker does not trust the slot's
#      restart_lsn beyond the walsender's sent position and waits, saying
#      so; once the walsender goes on (SIGCONT) and has sent the batch's
#      WAL, the batch goes out;
#   5. the setting (reloaded from a file) names a slot that does not
#      exist, then a logical slot: the worker waits, last_error says which
#      and why;
#   6. the setting emptied: today's behaviour, everything arrives.
#   7. synchronous replication, without the setting: an append whose wait
#      for the synchronous standby is cancelled (pg_cancel_backend) has
#      committed locally and is visible, though no synchronous standby
#      has it (PostgreSQL's SyncRepWaitForLSN: a cancel, a termination,
#      the postmaster's death); the worker does not send it until the
#      synchronous standbys have confirmed its WAL (state "waiting for
#      standby", last_error naming synchronous_standby_names); once a
#      streaming standby is made synchronous and confirms, it goes out.
#      Without this, a failover to the synchronous standby (Patroni's
#      synchronous_mode) left Kafka with an event the new primary lacks
#      (test/run-69-failover.sh: the primary killed while appends waited).
#   8. the primary crashes (immediate shutdown) while the listed standby
#      is down and events wait for it: after the restart no append has
#      committed yet, and the worker still waits for the standby before
#      it sends them (it sent them at once before: the bound of the WAL
#      to wait for came only from appends committed since the start);
#      once the standby is back, they go out.
# Finally the whole log against Kafka: exactly once, in order.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-standbys)
sdir=$dir/standby
liar_pid=
liar_ws=
trap '[ -z "$liar_ws" ] || kill -CONT "$liar_ws" 2>/dev/null; [ -z "$liar_pid" ] || kill "$liar_pid" 2>/dev/null; pg_stop "$sdir" immediate; fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0

fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg" "wal_level = logical" "include_if_exists = 'standbys.conf'"
fwd_sql "SELECT esrc.append('warmup-1', 'Started', '{}')" >/dev/null
fwd_wait_forwarded 60 || die "the forwarder did not start: $(fwd_status)"

# the standby: a base backup streaming through physical slot standby1
fwd_sql "SELECT pg_create_physical_replication_slot('standby1')" >/dev/null
mkdir -p "$sdir"
chmod 755 "$sdir"
[ "$(id -u)" = 0 ] && chown "$ESRC_TEST_USER" "$sdir"
sport=$(free_port)
as_test_user "$PG_BINDIR/pg_basebackup" -h 127.0.0.1 -p "$FWD_PORT" -U postgres \
    -D "$sdir/data" -R -S standby1 -X stream -c fast >/dev/null
printf "port = %s\nunix_socket_directories = '%s'\n" "$sport" "$sdir" |
    as_test_user tee -a "$sdir/data/postgresql.conf" >/dev/null
server_start() { # DIR WHAT
    as_test_user "$PG_BINDIR/pg_ctl" -D "$1/data" -l "$1/server.log" -w -t 60 start >/dev/null \
        || { tail -30 "$1/server.log"; die "$2 did not start"; }
}
standby_start() { server_start "$sdir" "the standby"; }
standby_start

# the setting, from a file the primary includes (a reload of the file is
# not checked against the slots: the worker reports what is wrong)
set_standbys() {
    echo "esrc.forwarder_standbys = '$1'" | as_test_user tee "$dir/pg/data/standbys.conf" >/dev/null
    fwd_sql "SELECT pg_reload_conf()" >/dev/null
    wait_reloaded esrc.forwarder_standbys "$1"
}
# synchronous_standby_names, by ALTER SYSTEM
set_sync() { # NAMES
    fwd_sql "ALTER SYSTEM SET synchronous_standby_names = '$1'" >/dev/null
    fwd_sql "SELECT pg_reload_conf()" >/dev/null
    wait_reloaded synchronous_standby_names "$1"
}
wait_reloaded() { # SETTING VALUE
    local deadline=$((SECONDS + 10))
    until [ "$(fwd_sql "SHOW $1")" = "$2" ]; do
        [ $SECONDS -lt $deadline ] || die "$1 was not reloaded"
        sleep 0.1
    done
}
append() { # STREAM N
    fwd_sql "SELECT esrc.append('$1', 'Noted', jsonb_build_object('n', g)) FROM generate_series(1, $2) g" >/dev/null
}
last_forwarded() { fwd_sql "SELECT last_position FROM esrc.forwarder_status"; }
kafka_count() { # one read_committed read of the data topics
    # shellcheck disable=SC2046
    "$FWD_KAFKA/consume.sh" "$FWD_BROKER" $(fwd_topics) | wc -l
}
metric() { fwd_sql "SELECT value FROM esrc.metrics WHERE name = '$1'"; }
# what was sent so far; expect_nothing_sent: nothing since
mark_sent() { before=$(last_forwarded); in_kafka=$(kafka_count); }
expect_nothing_sent() {
    expect "the forwarded position did not move" test "$(last_forwarded)" = "$before"
    expect "nothing more reached Kafka" test "$(kafka_count)" = "$in_kafka"
}
# until the worker waits for a standby; its last_error into $err, logged
wait_standby_error() {
    fwd_wait_state "waiting for standby" 30 || status=1
    err=$(fwd_sql "SELECT last_error FROM esrc.forwarder_status")
    log "   last_error: $err"
}

log "1. setting = standby1, the standby streaming: events reach Kafka"
set_standbys standby1
append ok-1 20
fwd_wait_forwarded 60 || status=1
expect "the standby's slot is active" \
    test "$(fwd_sql "SELECT active FROM pg_replication_slots WHERE slot_name = 'standby1'")" = t
expect "state running while the standby keeps up" test "$(fwd_sql "SELECT state FROM esrc.forwarder_status")" = running
expect "no wait shown while the standby keeps up" test "$(metric esrc_forwarder_standby_wait_seconds)" = 0

log "2. the standby stopped: appends go on, nothing more reaches Kafka"
pg_stop "$sdir" fast
mark_sent
append down-1 10
expect "the appends went on" test "$(fwd_sql "SELECT count(*) FROM esrc.events WHERE stream = 'down-1'")" = 10
wait_standby_error
expect "last_error names the slot, inactive, and how far behind" \
    grep -q 'standby slot "standby1".*inactive.*bytes behind' <<<"$err"
deadline=$((SECONDS + 20))
until awk "BEGIN { exit !($(metric esrc_forwarder_standby_wait_seconds) > 0) }"; do
    [ $SECONDS -lt $deadline ] || break
    sleep 0.2
done
expect "esrc_forwarder_standby_wait_seconds moves" \
    awk "BEGIN { exit !($(metric esrc_forwarder_standby_wait_seconds) > 0) }"
expect "standby_wait_since is shown" \
    test "$(fwd_sql "SELECT standby_wait_since IS NOT NULL FROM esrc.forwarder_status")" = t
expect_nothing_sent

log "3. the standby back: everything arrives"
standby_start
fwd_wait_forwarded 60 || status=1
expect "state running again" test "$(fwd_sql "SELECT state FROM esrc.forwarder_status")" = running
expect "the wait is over" test "$(metric esrc_forwarder_standby_wait_seconds)" = 0

log "4. a lying standby: flushed reported far beyond what its walsender sent"
cc -O2 -Wall -Wextra -o "$dir/lying_standby" "$ESRC_ROOT/test/forward/lying_standby.c" \
    -I"$("$PG_BINDIR/pg_config" --includedir)" -L"$("$PG_BINDIR/pg_config" --libdir)" -lpq
fwd_sql "SELECT pg_create_physical_replication_slot('liar')" >/dev/null
"$dir/lying_standby" "host=127.0.0.1 port=$FWD_PORT user=postgres" liar 1000000000 >"$dir/liar.out" &
liar_pid=$!
deadline=$((SECONDS + 20))
until [ -s "$dir/liar.out" ]; do
    [ $SECONDS -lt $deadline ] || die "the lying standby did not start"
    sleep 0.1
done
read -r _ lie liar_ws <<<"$(tr '=' ' ' <"$dir/liar.out" | awk '{print $2, $4, $6}')"
log "   $(cat "$dir/liar.out")"
# the walsender took the report: the slot says flushed to the lie
deadline=$((SECONDS + 20))
until [ "$(fwd_sql "SELECT restart_lsn = '$lie' FROM pg_replication_slots WHERE slot_name = 'liar'")" = t ]; do
    [ $SECONDS -lt $deadline ] || die "the slot did not take the lying report"
    sleep 0.1
done
kill -STOP "$liar_ws"
set_standbys liar
mark_sent
append liar-1 5
wait_standby_error
expect "last_error: the slot reports flushed beyond what its walsender sent" \
    grep -q "standby slot \"liar\".*reports flushed to $lie but its walsender (pid $liar_ws) sent only to" <<<"$err"
expect_nothing_sent
kill -CONT "$liar_ws"
liar_ws=
fwd_wait_forwarded 60 || status=1
expect "once its walsender sent the batch's WAL, the batch went out" \
    test "$(fwd_sql "SELECT state FROM esrc.forwarder_status")" = running
kill "$liar_pid"
wait "$liar_pid" 2>/dev/null || true
liar_pid=
deadline=$((SECONDS + 20))
until [ "$(fwd_sql "SELECT active FROM pg_replication_slots WHERE slot_name = 'liar'")" = f ]; do
    [ $SECONDS -lt $deadline ] || die "the lying standby's walsender did not exit"
    sleep 0.1
done
fwd_sql "SELECT pg_drop_replication_slot('liar')" >/dev/null

log "5. a slot that does not exist, then a logical slot: the worker waits and says why"
set_standbys "standby1, nosuchslot"
append missing-1 1
wait_standby_error
expect "last_error: the slot does not exist" grep -q 'slot "nosuchslot".*does not exist' <<<"$err"
fwd_sql "SELECT pg_create_logical_replication_slot('logical1', 'test_decoding')" >/dev/null
set_standbys "logical1"
deadline=$((SECONDS + 20))
until grep -q 'slot "logical1".*logical' <<<"$(fwd_sql "SELECT last_error FROM esrc.forwarder_status")"; do
    [ $SECONDS -lt $deadline ] || break
    sleep 0.2
done
err=$(fwd_sql "SELECT last_error FROM esrc.forwarder_status")
log "   last_error: $err"
expect "last_error: a logical slot" grep -q 'slot "logical1".*logical slot' <<<"$err"
expect "still waiting" test "$(fwd_sql "SELECT state FROM esrc.forwarder_status")" = "waiting for standby"
fwd_sql "SELECT pg_drop_replication_slot('logical1')" >/dev/null

log "6. the setting emptied: forwarding as without it"
set_standbys ""
append empty-1 5
fwd_wait_forwarded 60 || status=1

log "7. synchronous replication: an append released from its wait is not sent before a synchronous standby has it"
set_sync ghost
mark_sent
fwd_sql "SET synchronous_commit = on; SELECT esrc.append('sync-1', 'Noted', '{}')" >"$dir/sync-1.out" 2>&1 &
sync_pid=$!
deadline=$((SECONDS + 20))
until w=$(fwd_sql "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE '%sync-1%'") && [ -n "$w" ]; do
    [ $SECONDS -lt $deadline ] || die "the append did not wait for the synchronous standby"
    sleep 0.1
done
expect "while it waits, the append is not visible" \
    test "$(fwd_sql "SELECT count(*) FROM esrc.events WHERE stream = 'sync-1'")" = 0
fwd_sql "SELECT pg_cancel_backend($w)" >/dev/null
wait "$sync_pid" || true
log "   the append: $(tr '\n' ' ' <"$dir/sync-1.out")"
expect "the cancelled wait left the append committed locally" \
    grep -q "canceling wait for synchronous replication" "$dir/sync-1.out"
expect "and visible" test "$(fwd_sql "SELECT count(*) FROM esrc.events WHERE stream = 'sync-1'")" = 1
wait_standby_error
expect "last_error names synchronous_standby_names and both positions" \
    grep -q 'synchronous standbys (synchronous_standby_names) have confirmed WAL up to .* the batch needs' <<<"$err"
sleep 1 # not an assertion: time for a worker that would send it
expect_nothing_sent
# the streaming standby made synchronous: a synchronous append returns
# once it confirmed, and what it confirmed covers the released one
app=$(fwd_sql "SELECT r.application_name FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = 'standby1'")
[ -n "$app" ] || die "standby1 is not streaming"
set_sync "\"$app\""
deadline=$((SECONDS + 20))
until [ "$(fwd_sql "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$app'")" = sync ]; do
    [ $SECONDS -lt $deadline ] || die "standby1 did not become synchronous"
    sleep 0.1
done
fwd_sql "SET synchronous_commit = on; SELECT esrc.append('sync-2', 'Noted', '{}')" >/dev/null
fwd_wait_forwarded 60 || status=1
expect "state running once the synchronous standby confirmed" \
    test "$(fwd_sql "SELECT state FROM esrc.forwarder_status")" = running
expect "both reached Kafka" test "$(kafka_count)" = "$((in_kafka + 2))"
set_sync ""

log "8. a crash while the listed standby is down: after the restart the worker still waits for it"
set_standbys standby1
fwd_wait_forwarded 60 || status=1
pg_stop "$sdir" fast
mark_sent
append crash-1 10
fwd_wait_state "waiting for standby" 30 || status=1
pg_stop "$dir/pg" immediate
server_start "$dir/pg" "the primary"
deadline=$((SECONDS + 30))
until [ -n "$(fwd_worker_pid 2>/dev/null)" ]; do
    [ $SECONDS -lt $deadline ] || die "no forwarder after the restart"
    sleep 0.2
done
expect "the crashed appends are in the log" \
    test "$(fwd_sql "SELECT count(*) FROM esrc.events WHERE stream = 'crash-1'")" = 10
wait_standby_error
expect "after the restart, last_error names the slot" grep -q 'standby slot "standby1"' <<<"$err"
sleep 1 # not an assertion: time for a worker that would send them
expect_nothing_sent
standby_start
fwd_wait_forwarded 60 || status=1
expect "once the standby is back, they went out" test "$(kafka_count)" = "$((in_kafka + 10))"

log "9. the whole log against Kafka"
fwd_dump_events "$dir/events.json"
fwd_consume "$dir/kafka.json"
fwd_check "$dir/events.json" "$dir/kafka.json" || status=1

[ "$status" = 0 ] && log "PASS" || log "FAIL"
exit "$status"
