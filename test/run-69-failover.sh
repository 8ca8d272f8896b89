#!/usr/bin/env bash
# Failover drills with the real tools (issue 27, item 4): Patroni 3 and
# etcd 3.4 from Debian on loopback, two nodes with esrc preloaded, a real
# Kafka broker, the forwarder on both nodes.  One cluster for all modes,
# switched by patronictl; 3 failovers per mode, chained (the leader
# alternates); in each drill 4 writers
# (test/ha/load.py: libpq multi-host target_session_attrs=read-write,
# retrying the same event id after a disconnect), a subscription consumer
# and a projection run while the leader's postmaster is killed with
# kill -9; Patroni promotes the other node; the old leader rejoins (with
# pg_rewind when it is ahead).  Then test/ha/check.py compares the new
# leader's log with what the writers were told, Kafka (read_committed), the
# consumer's and the projection's rows.
#
#   sync      synchronous_mode: true.  Before the kill the leader's
#             walsender is stopped (SIGSTOP) until appends wait for the
#             synchronous standby: the postmaster's death releases them on
#             the dying leader (visible there, never acknowledged, never
#             replicated).  Every acknowledged append is in the
#             new leader's log; Kafka holds exactly that log, in order, once
#             (nothing released that way); consumer and projection exactly
#             once; the rejoined old leader runs no forwarder.
#   standbys  asynchronous, esrc.forwarder_standbys = the other node's slot,
#             the standby made to lag before the kill (the primary's walsender
#             stopped with SIGSTOP while the writers go on; stopping the
#             standby's walreceiver would leave the lag in the socket
#             buffers, delivered after SIGCONT): acknowledged appends may be
#             lost (counted) but Kafka holds no event the new leader lacks,
#             and nothing is skipped; and the new leader forwards no event
#             appended after the promotion before the old leader streams on
#             the new timeline (the old leader's walreceiver first reports
#             its own replay end, past the switch point: fwdstandby.c
#             credits only what the walsender sent; ESRC_HA_STRICT=0 only
#             reports it, for diagnosis).
#   lag       asynchronous without that setting, the same lag: the new
#             leader's forwarder reports diverged (state, last_error, metric)
#             and sends nothing; then the drill accepts the divergence
#             (esrc.forwarder_accept_divergence after the log's end when it
#             was found) and checks that what it sends then is its own log
#             (test/ha/sent_after.py), so the next drill starts from a
#             forwarding leader.
#
# The rejoined old leader is checked while it runs as a standby (no
# forwarder process); that it wrote nothing to Kafka is also covered by the
# next drill's comparison of Kafka with the log.
#
# Runs on PostgreSQL 15 only (not in test/matrix).  ESRC_HA_MODES picks
# modes (default "sync standbys lag"), ESRC_HA_DRILLS the failovers per
# mode (default 3); ESRC_HA_UNGUARDED=1 runs the standbys drill without
# the setting (its assertions must then fail).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"
source "$ESRC_ROOT/test/ha/cluster.sh"
ha_ensure_deps

modes=${ESRC_HA_MODES:-sync standbys lag}
drills=${ESRC_HA_DRILLS:-3}
PY=/usr/bin/python3     # Debian's, with python3-psycopg2 (patroni depends on it)
dir=$(test_tmpdir failover)
load_pid=
cleanup() {
    [ -n "$load_pid" ] && kill -KILL "$load_pid" 2>/dev/null || true
    ha_stop_all
    fwd_stop_all
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
status=0
t_start=$SECONDS

# what the build under test provides (the HA forwarding of issue 27, item
# 1 and 2); without it the asynchronous drills only report what they see
has_standbys=no
grep -q forwarder_standbys "$ESRC_ROOT"/src/forward/*.c 2>/dev/null && has_standbys=yes
# ESRC_HA_UNGUARDED=1: the standbys drill without the setting but with
# its assertions (to see them fail: phantoms and skipped events)
standbys_set=$has_standbys
[ -z "${ESRC_HA_UNGUARDED:-}" ] || standbys_set=no
has_diverged=no
grep -q forwarder_accept_divergence "$ESRC_ROOT"/src/sql/*.sql 2>/dev/null && has_diverged=yes

# the broker starts (15 s and more) while the cluster bootstraps; the
# forwarder retries until it answers
FWD_KDIR=$dir/kafka
kport=$("$FWD_KAFKA/broker.sh" freeport)
FWD_BROKER=127.0.0.1:$kport
KAFKA_START_TIMEOUT=${KAFKA_START_TIMEOUT:-120} KAFKA_NUM_PARTITIONS=2 "$FWD_KAFKA/broker.sh" start "$FWD_KDIR" "$kport" >"$dir/broker.out" 2>&1 &
kafka_starter=$!
ha_start_etcd "$dir/etcd"
log "etcd on $HA_ETCD, Kafka on $FWD_BROKER; esrc.forwarder_standbys: $has_standbys, divergence check: $has_diverged"
first_sync=false
[ "${modes%% *}" = sync ] && first_sync=true
ha_cluster_start "$dir/cluster" drill "$first_sync" no
wait "$kafka_starter" || { cat "$dir/broker.out"; die "broker did not start"; }
log "cluster and broker up ($((SECONDS - t_start)) s)"

acked_count() { cat "$dir/$mode"/acked.* 2>/dev/null | wc -l; }

# wait_acked N S: until N more appends were acknowledged (bounded)
wait_acked() {
    local target=$(( $(acked_count) + $1 )) deadline=$((SECONDS + $2))
    until [ "$(acked_count)" -ge "$target" ]; do
        [ $SECONDS -lt $deadline ] || { log "only $(acked_count) of $target appends acknowledged in $2 s"; return 1; }
        kill -0 "$load_pid" 2>/dev/null || { log "the load stopped"; return 1; }
        sleep 0.1
    done
}

# on the leader: the forwarder's state, Kafka's view of it
leader_sql() { ha_sql "$HA_LEADER" "$1"; }
fwd_state() { leader_sql "SELECT state FROM esrc.forwarder_status WHERE database = current_database()" 2>/dev/null; }

wait_state() { # STATE S
    local deadline=$((SECONDS + $2))
    until [ "$(fwd_state)" = "$1" ]; do
        [ $SECONDS -lt $deadline ] || { log "forwarder state is not $1 within $2 s: $(fwd_state)"; return 1; }
        sleep 0.1
    done
}

# until the leader's forwarder sent every committed event, and the
# projection applied them (bounded)
wait_caught_up() {
    FWD_PORT=${HA_PORT[$HA_LEADER]} FWD_DB=$HA_DB fwd_wait_forwarded "$1" || return 1
    local deadline=$((SECONDS + $1))
    until [ "$(leader_sql "SELECT bool_and(caught_up) FROM esrc.projection_status")" = t ]; do
        [ $SECONDS -lt $deadline ] || { log "projection not caught up in $1 s"; return 1; }
        sleep 0.1
    done
}

# stop_walsender NODE: the leader's walsender to NODE stopped (SIGSTOP);
# its pid in $ws, for the kill after the postmaster's
stop_walsender() {
    ws=$(leader_sql "SELECT pid FROM pg_stat_replication WHERE application_name = 'node$1'")
    [ -n "$ws" ] || { log "no walsender for node$1"; return 1; }
    kill -STOP "$ws"
}

drill() { # MODE I
    local i=$2 old=$HA_LEADER other=$(( 3 - HA_LEADER )) ws t0 t1 pm counts
    rm -f "$dir/$mode/stop"
    # the old leader's rewind starts at its last checkpoint before the
    # timelines fork (pg_rewind copies what changed since): a checkpoint
    # per drill, as checkpoint_timeout would make on a longer run
    leader_sql "CHECKPOINT"
    [ "$mode" = sync ] && { ha_wait_sync "$other" 30 || return 1; }
    "$PY" "$HA_HERE/load.py" \
        "host=127.0.0.1,127.0.0.1 port=${HA_PORT[1]},${HA_PORT[2]} dbname=$HA_DB user=postgres target_session_attrs=read-write" \
        "$dir/$mode" 4 6 2>"$dir/$mode/load.$i.log" &
    load_pid=$!
    wait_acked 200 30 || return 1
    if [ "$mode" != sync ]; then
        # the standby lags: the leader's walsender stops sending (what it
        # already wrote to the socket arrives), the writers go on
        stop_walsender "$other" || return 1
        local stopped_at
        stopped_at=$(leader_sql "SELECT max(position) FROM esrc.events")
        wait_acked 300 30 || return 1
        if [ "$mode" = standbys ] && [ "$standbys_set" = yes ]; then
            wait_state "waiting for standby" 20 || return 1
            log "   forwarder: $(leader_sql "SELECT state || ', last position ' || last_position FROM esrc.forwarder_status WHERE database = current_database()")"
        else
            # Kafka gets ahead of the standby
            local deadline=$((SECONDS + 20))
            until [ "$(leader_sql "SELECT last_position > $stopped_at + 200 FROM esrc.forwarder_status WHERE database = current_database()")" = t ]; do
                [ $SECONDS -lt $deadline ] || { log "forwarder did not get ahead of the standby"; return 1; }
                sleep 0.1
            done
        fi
    fi
    if [ "$mode" = sync ]; then
        # appends waiting for the synchronous standby when the postmaster
        # dies: its walsender stopped, so the commits pile up in their wait
        # (SyncRepWaitForLSN), which the postmaster's death cuts short:
        # visible on the dying leader, never on the standby, never
        # acknowledged.  Kafka must not get them (fwdstandby.c).
        stop_walsender "$other" || return 1
        local deadline=$((SECONDS + 10)) waiting=0
        until [ "${waiting:-0}" -ge 2 ]; do
            [ $SECONDS -lt $deadline ] || { log "appends did not wait for the synchronous standby"; return 1; }
            sleep 0.1
            waiting=$(leader_sql "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
        done
        log "   $waiting appends waiting for the stopped synchronous standby"
    fi
    pm=$(ha_postmaster "$old")
    t0=$(date +%s%N)
    kill -KILL "$pm"
    # the stopped walsender would never notice its postmaster's death
    [ -z "${ws:-}" ] || kill -KILL "$ws" 2>/dev/null || true
    ha_wait_leader "$old" 60 || return 1
    t1=$(date +%s%N)
    promote_ms=$(( (t1 - t0) / 1000000 ))
    log "   node$old killed, node$HA_LEADER promoted in $promote_ms ms"
    local log_from
    log_from=$(wc -l <"$HA_DIR/node$HA_LEADER/patroni.log")
    # the old leader rejoins while the checks run; the time it streams
    # on the new timeline is taken in the background
    rm -f "$dir/rejoined" "$dir/early" "$dir/trace"
    (ha_wait_streaming "$old" 90 && date +%s%N >"$dir/rejoined") &
    local rejoin_pid=$! early_pid=
    if [ "$mode" = standbys ]; then
        # nothing appended after the promotion may reach Kafka before the
        # old leader (the listed standby) streams on the new timeline:
        # the forwarder's position is read first, the old leader's state
        # after, so a hit is never a race.  Traced on the way: the first
        # moment the old leader's slot on the new leader says flushed past
        # the timeline switch point S (its walreceiver's first reply is its
        # own replay end), with its walsender's sent position and the
        # forwarder's state: what fwdstandby.c credits the slot with
        local p0 sw
        p0=$(leader_sql "SELECT coalesce(max(position), 0) FROM esrc.events")
        sw=$(leader_sql "SELECT split_part(a[array_length(a, 1)], E'\t', 2)
                         FROM (SELECT array_remove(string_to_array(pg_read_file('pg_wal/' ||
                                   left(pg_walfile_name(pg_current_wal_lsn()), 8) || '.history'), E'\n'), '') a) h" 2>/dev/null || true)
        [ -n "$sw" ] || sw=FFFFFFFF/FFFFFFFF
        (
            deadline=$((SECONDS + 90))
            traced=
            while [ $SECONDS -lt $deadline ]; do
                lp=$(leader_sql "SELECT last_position FROM esrc.forwarder_status WHERE database = current_database()" 2>/dev/null || echo 0)
                if [ -z "$traced" ]; then
                    tr=$(leader_sql "SELECT format('S=%s restart_lsn=%s active_pid=%s sent_lsn=%s forwarder=%s last_error=%s',
                                                   '$sw', s.restart_lsn, s.active_pid, r.sent_lsn, f.state, coalesce(f.last_error, '-'))
                                     FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid,
                                          esrc.forwarder_status f
                                     WHERE s.slot_name = 'node$old' AND f.database = current_database()
                                       AND s.restart_lsn > '$sw'::pg_lsn" 2>/dev/null || true)
                    [ -z "$tr" ] || { echo "$tr" >"$dir/trace"; traced=1; }
                fi
                ha_is_streaming "$old" && break
                [ "${lp:-0}" -gt "$p0" ] && { echo "$lp $p0 $(date +%s%N)" >"$dir/early"; break; }
                sleep 0.1
            done
        ) &
        early_pid=$!
    fi
    wait_acked 200 60 || return 1
    touch "$dir/$mode/stop"
    local deadline=$((SECONDS + 30))
    while kill -0 "$load_pid" 2>/dev/null; do
        [ $SECONDS -lt $deadline ] || { log "the load did not stop"; kill -KILL "$load_pid"; break; }
        sleep 0.1
    done
    wait "$load_pid" || { cat "$dir/$mode/load.$i.log" >&2; load_pid=; return 1; }
    load_pid=

    if [ "$mode" = lag ] && [ "$has_diverged" = yes ]; then
        wait_state diverged 30 || return 1
        local row
        row=$(leader_sql "SELECT last_error FROM esrc.forwarder_status WHERE database = current_database()")
        log "   last_error: $row"
        expect "drill $mode $i: the new leader's forwarder is diverged and names both sides" \
            eval '[[ "$row" == *Kafka* ]]'
        expect "drill $mode $i: metric esrc_forwarder_diverged is 1" \
            test "$(leader_sql "SELECT value FROM esrc.metrics WHERE name = 'esrc_forwarder_diverged'")" = 1
        expect "drill $mode $i: the new leader sent nothing" \
            test "$(leader_sql "SELECT delivered_total FROM esrc.forwarder_status WHERE database = current_database()")" = 0
    elif [ "$mode" = lag ]; then
        sleep 2 # not an assertion: lets the unguarded forwarder do what it does
        log "   forwarder (no divergence check in this build): $(leader_sql "SELECT format('state=%s last=%s pending=%s error=%s', state, last_position, events_pending, coalesce(last_error, '-')) FROM esrc.forwarder_status WHERE database = current_database()")"
    else
        wait_caught_up 60 || return 1
    fi

    # compare
    leader_sql "SELECT position, stream, version, id FROM esrc.events ORDER BY position" | tr '|' ' ' >"$dir/$mode/events"
    leader_sql "SELECT position, id FROM drill_consumed" | tr '|' ' ' >"$dir/$mode/consumed"
    leader_sql "SELECT position, id FROM drill_projected" | tr '|' ' ' >"$dir/$mode/projected"
    local topics
    topics=$(fwd_topics | grep "^drill\." | grep -v "\.offsets\$")
    # shellcheck disable=SC2086
    FWD_BROKER=$FWD_BROKER "$FWD_KAFKA/consume.sh" "$FWD_BROKER" $topics >"$dir/$mode/kafka.jsonl"
    counts=$(python3 "$HA_HERE/check.py" "$dir/$mode/events" "$dir/$mode/kafka.jsonl" \
        "$dir/$mode/consumed" "$dir/$mode/projected" "$dir/$mode"/acked.*)
    log "   drill $mode $i: $counts"
    eval "$(echo "$counts" | sed 's/\([a-z_]*\)=\([0-9]*\)/c_\1=\2;/g')"
    # shellcheck disable=SC2154
    {
        sum_promote=$((sum_promote + promote_ms)); max_promote=$(( promote_ms > max_promote ? promote_ms : max_promote ))
        last_acked=$c_acked; last_lost=$c_lost; last_phantoms=$c_phantoms; last_skipped=$c_skipped
        last_dups=$c_duplicates
    }
    wait "$rejoin_pid" || return 1
    [ -z "$early_pid" ] || wait "$early_pid" || true
    rejoin_ms=$(( ($(cat "$dir/rejoined") - t0) / 1000000 ))
    sum_rejoin=$((sum_rejoin + rejoin_ms))
    if [ "$mode" = standbys ]; then
        [ ! -s "$dir/trace" ] || log "   node$old's slot flushed past S: $(cat "$dir/trace")"
        # what the forwarder logged when the slot's restart_lsn alone would
        # have let a batch go (fwdstandby.c): the old leader's walsender's
        # sent position against the switch point S
        tail -n +"$((log_from + 1))" "$HA_DIR/node$HA_LEADER/patroni.log" |
            grep -o "esrc forwarder: standby slot \"node$old\" reports flushed.*" | head -3 |
            while read -r l; do log "   S=$sw, $l"; done
        local window_ms=0
        if [ -s "$dir/early" ]; then
            read -r early_lp early_p0 early_t <"$dir/early"
            window_ms=$(( ($(cat "$dir/rejoined") - early_t) / 1000000 ))
            log "   the new leader forwarded up to position $early_lp (its log ended at $early_p0 when promoted) before node$old streamed on the new timeline"
            early_hits=$((early_hits + 1))
        fi
        log "   window (post-promotion events in Kafka before node$old streamed on the new timeline): $window_ms ms"
        windows="$windows $window_ms"
    fi
    rewinds=$(cat "$HA_DIR"/node?/patroni.log | grep -c "pg_rewind exit code=0" || true)
    log "   node$old rejoined $rejoin_ms ms after the kill ($rewinds pg_rewind runs in this cluster so far)"
    local fwd_on_old
    fwd_on_old=$(ha_sql "$old" "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'esrc forwarder'")
    expect "drill $mode $i: the rejoined node$old is a standby running no forwarder" \
        test "$(ha_sql "$old" "SELECT pg_is_in_recovery()")/$fwd_on_old" = "t/0"
    case $mode in
    sync)
        expect "drill $mode $i: every acknowledged append is in the new leader's log (lost=$c_lost)" test "$c_lost" = 0
        expect "drill $mode $i: Kafka holds exactly the new leader's log, in order, once" \
            test "$c_kafka/$c_phantoms/$c_missing/$c_duplicates/$c_disorder" = "$c_events/0/0/0/0"
        expect "drill $mode $i: subscription and projection exactly once" \
            test "$c_sub_missing$c_sub_dup$c_sub_extra$c_proj_missing$c_proj_dup$c_proj_extra" = 000000
        ;;
    standbys)
        if [ "$has_standbys" = yes ]; then
            expect "drill $mode $i: Kafka holds no event the new leader lacks, nothing skipped, once, in order (lost=$c_lost)" \
                test "$c_phantoms/$c_missing/$c_duplicates/$c_disorder" = "0/0/0/0"
        fi
        expect "drill $mode $i: subscription and projection exactly once" \
            test "$c_sub_missing$c_sub_dup$c_sub_extra$c_proj_missing$c_proj_dup$c_proj_extra" = 000000
        ;;
    lag)
        if [ "$has_diverged" = yes ]; then
            # go on: the operator accepts the divergence, sending the new
            # leader's events after the log's end when it was found
            leader_sql "SELECT esrc.forwarder_accept_divergence(log_end, 'failover drill $i')
                        FROM esrc.forwarder_divergences WHERE accepted_position IS NULL
                        ORDER BY divergence_id DESC LIMIT 1" >/dev/null
            wait_state running 30 || return 1
            # what the new leader sends after the operator's decision
            # matches its log
            wait_caught_up 60 || return 1
            leader_sql "SELECT position, stream, version, id FROM esrc.events ORDER BY position" | tr '|' ' ' >"$dir/$mode/events"
            # shellcheck disable=SC2086
            "$FWD_KAFKA/consume.sh" "$FWD_BROKER" $topics >"$dir/$mode/kafka.after.jsonl"
            local sent
            sent=$(python3 "$HA_HERE/sent_after.py" "$dir/$mode/events" "$dir/$mode/kafka.jsonl" "$dir/$mode/kafka.after.jsonl")
            log "   after accept_divergence: $sent"
            expect "drill $mode $i: after the accepted divergence the new leader sends its own log ($sent)" \
                eval '[[ "$sent" =~ ^sent=[1-9][0-9]*\ wrong=0$ ]]'
        fi
        ;;
    esac
    return 0
}

# set_mode MODE: Patroni's synchronous_mode (dynamic, in etcd) and
# esrc.forwarder_standbys (each node's patroni.yml, patronictl reload)
set_mode() {
    local sync=false standbys=no n want deadline=$((SECONDS + 30))
    [ "$1" = sync ] && sync=true
    [ "$1" = standbys ] && [ "$standbys_set" = yes ] && standbys=yes
    patronictl -c "$HA_DIR/node1.yml" edit-config drill -s "synchronous_mode=$sync" --force >/dev/null
    for n in 1 2; do
        ha_node_config $n drill "$first_sync" "$standbys" >"$HA_DIR/node$n.yml"
    done
    patronictl -c "$HA_DIR/node1.yml" reload drill --force >/dev/null
    for n in 1 2; do
        want=
        [ "$standbys" = yes ] && want=node$(( 3 - n ))
        until [ "$(ha_sql $n "SELECT current_setting('esrc.forwarder_standbys', true)" 2>/dev/null)" = "$want" ]; do
            [ $SECONDS -lt $deadline ] || { log "node$n: esrc.forwarder_standbys is not '$want'"; return 1; }
            sleep 0.2
        done
    done
    if [ "$sync" = true ]; then
        ha_wait_sync $(( 3 - HA_LEADER )) 30
    else
        until [ "$(ha_sql "$HA_LEADER" "SHOW synchronous_standby_names")" = "" ]; do
            [ $SECONDS -lt $deadline ] || { log "synchronous_standby_names is still set"; return 1; }
            sleep 0.2
        done
    fi
}

declare -A summary
for mode in $modes; do
    t_mode=$SECONDS
    mkdir -p "$dir/$mode"
    set_mode "$mode" || { status=1; break; }
    FWD_PORT=${HA_PORT[$HA_LEADER]} FWD_DB=$HA_DB fwd_wait_state running 60 || status=1
    sum_promote=0 max_promote=0 sum_rejoin=0 done_drills=0 early_hits=0 windows=
    for i in $(seq "$drills"); do
        if drill "$mode" "$i"; then
            done_drills=$((done_drills + 1))
        else
            log "FAIL - drill $mode $i did not complete"
            status=1
            break
        fi
    done
    expect "$mode: $drills failovers completed" test "$done_drills" = "$drills"
    if [ "$mode" = standbys ] && [ "$has_standbys" = yes ]; then
        # asserted unless ESRC_HA_STRICT=0 (for diagnosis): fwdstandby.c
        # credits the old leader's slot only with what its walsender sent,
        # not with the replay end its walreceiver reports on a first reply
        log "   standbys: $early_hits of $done_drills failovers forwarded post-promotion events before the old leader streamed on the new timeline (window ms per failover:${windows:- none})"
        [ "${ESRC_HA_STRICT:-1}" = 0 ] ||
            expect "standbys: nothing appended after a promotion reached Kafka before the listed standby had it" test "$early_hits" = 0
    fi
    summary[$mode]=$(printf '%-9s %9s %11s %11s %10s %6s %6s %8s %7s %10s %5s' "$mode" "$done_drills" \
        "$(( done_drills ? sum_promote / done_drills : 0 ))" "$max_promote" \
        "$(( done_drills ? sum_rejoin / done_drills : 0 ))" "${last_acked:-?}" "${last_lost:-?}" \
        "${last_phantoms:-?}" "${last_skipped:-?}" "${last_dups:-?}" "$((SECONDS - t_mode))")
done

log "summary (promote/rejoin in ms from the kill; lost = acknowledged appends of the mode the last leader lacks; phantoms, skipped, duplicates: Kafka against the last leader's log, cumulative over the cluster; lag's skipped are what the drill's accept_divergence passed over)"
printf '%-9s %9s %11s %11s %10s %6s %6s %8s %7s %10s %5s\n' mode failovers promote_avg promote_max rejoin_avg acked lost phantoms skipped duplicates secs >&2
for mode in $modes; do echo "${summary[$mode]}" >&2; done
log "took $((SECONDS - t_start)) s"
exit $status
