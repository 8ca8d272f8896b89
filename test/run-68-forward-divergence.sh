#!/usr/bin/env bash
# Divergence of Kafka from the log (issue 27, item 2), made without
# Patroni: what asynchronous replication does to a standby that lags.
#   1. primary P forwards A; standby S (streaming, then cut off from P
#      while it runs) has A; the forwarder paused on S;
#   2. P appends and forwards B (more than the 32 positions a sequence
#      logs ahead), then P is gone (immediate stop);
#   3. S is promoted while its forwarder is paused: it stays paused; S
#      appends C, whose positions overlap B's;
#   4. resumed, S's worker reads Kafka's position record (the last of B,
#      with its id) and finds another event there: state diverged, the
#      error names both ids, a WARNING, the metric, a row in
#      esrc.forwarder_divergences, and nothing sent;
#   5. esrc.forwarder_accept_divergence(last of A): every event of S after
#      A arrives exactly once, nothing is sent twice, nothing else;
#   6. a position record as 0.2.0 wrote it (no "id") is still read: at
#      the log's end the worker goes on; beyond it, it reports the
#      divergence;
#   7. steps 1-5 in at_least_once mode, where the position lives in the
#      replicated table: the worker writes the position record after
#      delivery, and S's worker finds the divergence the same way (before
#      0.3.0 it went on silently, re-using B's positions for C's events);
#   8. with esrc.kafka_position_record = off it writes none (as 0.2.0).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-diverge)
sdir=$dir/standby
trap 'pg_stop "$dir/standby" immediate; pg_stop "$dir/standby2" immediate; pg_stop "$dir/pg" immediate
      fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0

fwd_start_kafka "$dir/kafka"
# WARNINGs in the server log (fwd_start_pg sets log, which leaves them out)
fwd_start_pg "$dir/pg" "log_min_messages = warning"
fwd_sql "SELECT esrc.append('warmup-1', 'Started', '{}')" >/dev/null
fwd_wait_forwarded 60 || die "the forwarder did not start: $(fwd_status)"

append() { # STREAM N
    fwd_sql "SELECT esrc.append('$1', 'Noted', jsonb_build_object('n', g)) FROM generate_series(1, $2) g" >/dev/null
}
kafka_records() { # FILE: one read_committed read of the data topics
    # shellcheck disable=SC2046
    "$FWD_KAFKA/consume.sh" "$FWD_BROKER" $(fwd_topics) >"$1"
}

last_position_record() { # "position id" of the last record under our key
    "$FWD_KAFKA/consume.sh" "$FWD_BROKER" "${FWD_OFFSETS_TOPIC:-esrc.offsets}" |
        jq -rs --arg k "esrc-$log_id" 'map(select(.key == $k) | .value | fromjson)
            | last | "\(.position) \(.id)"'
}
# Steps 1-3 with the primary running on FWD_PORT and the standby in
# $sdir: sets a_last, b_last, b_id, c_id, log_id, n_before; FWD_PORT is
# then the promoted standby's.
lagging_standby() {
    pport=$FWD_PORT
    log "1. P forwards A; S streams it, is cut off from P, its forwarder paused"
    fwd_sql "SELECT pg_create_physical_replication_slot('s1')" >/dev/null
    mkdir -p "$sdir"
    chmod 755 "$sdir"
    [ "$(id -u)" = 0 ] && chown "$ESRC_TEST_USER" "$sdir"
    sport=$(free_port)
    as_test_user "$PG_BINDIR/pg_basebackup" -h 127.0.0.1 -p "$pport" -U postgres \
        -D "$sdir/data" -R -S s1 -X stream -c fast >/dev/null
    printf "port = %s\nunix_socket_directories = '%s'\n" "$sport" "$sdir" |
        as_test_user tee -a "$sdir/data/postgresql.conf" >/dev/null
    as_test_user "$PG_BINDIR/pg_ctl" -D "$sdir/data" -l "$sdir/server.log" -w -t 60 start >/dev/null \
        || { tail -20 "$sdir/server.log"; die "the standby did not start"; }
    ssql() { psql -h 127.0.0.1 -p "$sport" -U postgres -d "$FWD_DB" -qAt -v ON_ERROR_STOP=1 -c "$1"; }

    append a 10
    fwd_wait_forwarded 60 || status=1
    a_last=$(fwd_sql "SELECT max(position) FROM esrc.events")
    lsn=$(fwd_sql "SELECT pg_current_wal_lsn()")
    deadline=$((SECONDS + 30))
    until [ "$(ssql "SELECT pg_last_wal_replay_lsn() >= '$lsn'")" = t ]; do
        [ $SECONDS -lt $deadline ] || die "the standby did not replay A"
        sleep 0.1
    done
    # the pause is in shared memory: it takes on the standby, and lasts
    # through the promotion (no restart)
    ssql "SELECT esrc.forwarder_pause()" >/dev/null
    # cut off from P while it runs: no primary_conninfo, reloaded
    echo "primary_conninfo = ''" | as_test_user tee -a "$sdir/data/postgresql.auto.conf" >/dev/null
    ssql "SELECT pg_reload_conf()" >/dev/null
    deadline=$((SECONDS + 30))
    until [ "$(ssql "SELECT count(*) FROM pg_stat_wal_receiver")" = 0 ]; do
        [ $SECONDS -lt $deadline ] || die "the standby still receives WAL"
        sleep 0.1
    done

    log "2. P appends and forwards B, then P is gone"
    append b 40
    fwd_wait_forwarded 60 || status=1
    b_last=$(fwd_sql "SELECT max(position) FROM esrc.events")
    b_id=$(fwd_sql "SELECT id FROM esrc.events WHERE position = $b_last")
    log_id=$(fwd_sql "SELECT log_id FROM esrc.forwarder_state")
    # at_least_once: Kafka's last position record follows the delivery,
    # B's last (before 0.3.0 there was none); exactly_once commits it with B
    deadline=$((SECONDS + 20))
    until [ -z "${ALO:-}" ] || [ "$(last_position_record)" = "$b_last $b_id" ]; do
        [ $SECONDS -lt $deadline ] || {
            log "not ok - Kafka's last position record is $b_last $b_id: $(last_position_record)"
            status=1
            break
        }
        sleep 0.1
    done
    pg_stop "$FWD_PGDIR" immediate
    kafka_records "$dir/k-before.json"
    n_before=$(wc -l <"$dir/k-before.json")
    log "   Kafka has $n_before records, its position record says $b_last ($b_id)"

    log "3. S promoted while paused; it appends C over B's positions"
    as_test_user "$PG_BINDIR/pg_ctl" -D "$sdir/data" -w -t 60 promote >/dev/null
    FWD_PORT=$sport
    deadline=$((SECONDS + 30))
    until [ "$(fwd_sql "SELECT pg_is_in_recovery()")" = f ]; do
        [ $SECONDS -lt $deadline ] || die "the standby was not promoted"
        sleep 0.1
    done
    fwd_wait_state paused 30 || status=1
    i=0
    until [ "$(fwd_sql "SELECT coalesce(max(position), 0) > $b_last FROM esrc.events")" = t ]; do
        append "c$i" 10
        i=$((i + 1))
    done
    c_id=$(fwd_sql "SELECT id FROM esrc.events WHERE position = $b_last")
    expect "S has another event at Kafka's position" test -n "$c_id" -a "$c_id" != "$b_id"
    expect "still paused after the promotion" test "$(fwd_sql "SELECT state FROM esrc.forwarder_status")" = paused
}

lagging_standby

# Steps 4-5 after lagging_standby (SUFFIX: for file names and messages)
diverged_then_accepted() {
    log "4. resumed: the worker finds the divergence and sends nothing"
    fwd_sql "SELECT esrc.forwarder_resume()" >/dev/null
    fwd_wait_state diverged 60 || status=1
    err=$(fwd_sql "SELECT last_error FROM esrc.forwarder_status")
    log "   last_error: $err"
    expect "last_error names Kafka's side (position and id)" grep -q "position $b_last is event $b_id" <<<"$err"
    expect "last_error names the log's side (its id there)" grep -q "log has event $c_id there" <<<"$err"
    expect "esrc_forwarder_diverged is 1" \
        test "$(fwd_sql "SELECT value FROM esrc.metrics WHERE name = 'esrc_forwarder_diverged'")" = 1
    expect "a WARNING in the server log" grep -q "WARNING:  esrc forwarder: forwarding diverged from the log" "$sdir/server.log"
    expect "recorded in esrc.forwarder_divergences" \
        test "$(fwd_sql "SELECT count(*) FROM esrc.forwarder_divergences
                         WHERE kafka_position = $b_last AND kafka_event_id = '$b_id'
                           AND log_event_id = '$c_id' AND accepted_position IS NULL")" = 1
    expect "nothing delivered by S" \
        test "$(fwd_sql "SELECT delivered_total FROM esrc.forwarder_status")" = 0
    kafka_records "$dir/k-diverged$1.json"
    expect "Kafka has nothing new" test "$(wc -l <"$dir/k-diverged$1.json")" = "$n_before"

    log "5. accepted after A's last position ($a_last): S's events after it, exactly once"
    fwd_sql "SELECT esrc.forwarder_accept_divergence($a_last, 'test: B was lost with P')" >/dev/null
    fwd_wait_forwarded 60 || status=1
    expect "esrc_forwarder_diverged is 0" \
        test "$(fwd_sql "SELECT value FROM esrc.metrics WHERE name = 'esrc_forwarder_diverged'")" = 0
    fwd_dump_events "$dir/s-events$1.json"
    kafka_records "$dir/k-after$1.json"
    n_new=$(jq -s --argjson a "$a_last" 'map(select(.position > $a)) | length' "$dir/s-events$1.json")
    expect "Kafka has exactly the records before plus S's events after $a_last" \
        test "$(wc -l <"$dir/k-after$1.json")" = $((n_before + n_new))
    missing=$(jq -n --slurpfile ev "$dir/s-events$1.json" --slurpfile k "$dir/k-after$1.json" --argjson a "$a_last" '
        ($k | map(.headers.ce_id) | group_by(.) | map({(.[0]): length}) | add) as $count
        | $ev | map(select(.position > $a and ($count[.id] // 0) != 1)) | length')
    expect "each of S's events after $a_last is in Kafka exactly once$1" test "$missing" = 0
    expect "the decision is recorded" \
        test "$(fwd_sql "SELECT accepted_position || ' ' || reason FROM esrc.forwarder_divergences")" = "$a_last test: B was lost with P"
}

diverged_then_accepted ""

log "6. a position record without id (as 0.2.0 wrote them) is still read"
produce_position() { # POSITION: a record as 0.2.0 wrote it, then a new worker
    printf 'esrc-%s\t{"log_id":"%s","database":"%s","position":%s}\n' "$log_id" "$log_id" "$FWD_DB" "$1" |
        kcat -P -b "$FWD_BROKER" -t esrc.offsets -K $'\t'
    fwd_sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'esrc forwarder'" >/dev/null
    local deadline=$((SECONDS + 30))
    until [ "$(fwd_sql "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'esrc forwarder'")" = 1 ]; do
        [ $SECONDS -lt $deadline ] || break
        sleep 0.2
    done
}
s_last=$(fwd_sql "SELECT max(position) FROM esrc.events")
produce_position "$s_last"
append d 1
fwd_wait_forwarded 60 || status=1
d_id=$(fwd_sql "SELECT id FROM esrc.events WHERE stream = 'd'")
kafka_records "$dir/k-d.json"
expect "at the log's end: the worker went on, the next event is in Kafka once" \
    test "$(jq -s --arg id "$d_id" 'map(select(.headers.ce_id == $id)) | length' "$dir/k-d.json")" = 1
produce_position $((s_last + 1000))
fwd_wait_state diverged 60 || status=1
err=$(fwd_sql "SELECT last_error FROM esrc.forwarder_status")
log "   last_error: $err"
expect "beyond the log's end: diverged, the record has no id" \
    grep -q "(without event id) says position $((s_last + 1000)), but the log ends at position" <<<"$err"

log "7. the same in at_least_once mode (the position record follows delivery)"
pg_stop "$sdir" immediate
sdir=$dir/standby2
fwd_start_pg "$dir/pg2" "log_min_messages = warning" "esrc.delivery = 'at_least_once'"
ALO=1
lagging_standby
diverged_then_accepted " (at_least_once)"

log "8. esrc.kafka_position_record = off: at_least_once writes no position record"
s_last=$(fwd_sql "SELECT max(position) || ' ' || (array_agg(id ORDER BY position DESC))[1] FROM esrc.events")
deadline=$((SECONDS + 20))
until [ "$(last_position_record)" = "$s_last" ]; do
    [ $SECONDS -lt $deadline ] || { log "FAIL - on: the position record follows the delivery"; status=1; break; }
    sleep 0.1
done
fwd_sql "ALTER SYSTEM SET esrc.kafka_position_record = off" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
append e 3
fwd_wait_forwarded 60 || status=1
expect "off: the events are forwarded, Kafka's last position record stays at $s_last" \
    test "$(last_position_record)" = "$s_last"

[ "$status" = 0 ] && log "PASS" || log "FAIL"
exit "$status"
