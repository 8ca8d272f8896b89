# test/forward/common.sh: helpers for the Kafka forwarding tests
# (test/run-4*-forward-*.sh) and bench/forward.  Source after test/lib.sh.
#
#   fwd_under_reaper "$@"     first line of a driver: install jq if missing,
#                             re-run it under a child subreaper (see
#                             run-50-tap.sh), so that a SIGKILLed
#                             postmaster is reaped, not a zombie
#   fwd_start_kafka DIR       broker in DIR on free ports; sets FWD_BROKER
#   fwd_start_pg DIR CONF...  server with the forwarder pointed at the
#                             broker, database $FWD_DB with the extension;
#                             sets FWD_PORT, FWD_PGDIR
#   fwd_sql SQL               psql -qAt in $FWD_DB
#   fwd_wait_forwarded [S]    until every committed event is forwarded
#   fwd_status                one line of esrc.forwarder_status
#   fwd_dump_events FILE      committed events as JSON lines (check.py)
#   fwd_consume FILE          read_committed records of all data topics
#   fwd_check ARGS...         test/forward/check.py
#   fwd_wait_state STATE [S]  until esrc.forwarder_status.state is STATE
#   fwd_in_kafka STREAM VER   is that event in Kafka once (read_committed)?
#   fwd_blocked_on POS STREAM ERROR-REGEX
#                             the status names that poison record
#   fwd_stop_all              stop what fwd_start_* started
#
# Every server runs on ports chosen free at start; everything is stopped
# by pid (broker.sh, pg_ctl), never by name.

FWD_DB=${FWD_DB:-esrc_fwd}
FWD_KAFKA=$ESRC_ROOT/test/kafka
FWD_HERE=$ESRC_ROOT/test/forward
FWD_BROKER=
FWD_PORT=
FWD_PGDIR=
FWD_KDIR=

# expect NAME COMMAND...: run a check, log "ok - NAME" or "FAIL - NAME",
# and set status=1 on a failure (each driver exits with $status).
expect() {
    if "${@:2}"; then log "ok - $1"; else log "FAIL - $1"; status=1; fi
}

fwd_under_reaper() {
    [ -n "${FWD_REAPED:-}" ] && return 0
    ensure_forward_deps
    export FWD_REAPED=1
    exec python3 -c "$ESRC_REAPER_PY" bash "$0" "$@"
}

fwd_start_kafka() {
    FWD_KDIR=$1
    local kport
    kport=$("$FWD_KAFKA/broker.sh" freeport)
    "$FWD_KAFKA/broker.sh" start "$FWD_KDIR" "$kport" 2>&1 | sed 's/^/  /' >&2
    [ "${PIPESTATUS[0]}" -eq 0 ] || die "broker did not start"
    FWD_BROKER=127.0.0.1:$kport
}

fwd_start_pg() {
    FWD_PGDIR=$1
    shift
    mkdir -p "$FWD_PGDIR"
    chmod 755 "$FWD_PGDIR"
    [ "$(id -u)" = 0 ] && chown "$ESRC_TEST_USER" "$FWD_PGDIR"
    FWD_PORT=$(free_port)
    # no brokers yet: the worker idles until the database exists, then a
    # reload (SIGHUP) points it at Kafka
    pg_start "$FWD_PGDIR" "$FWD_PORT" \
        "esrc.database = '$FWD_DB'" \
        "log_min_messages = log" \
        "$@"
    psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -qAt -c "CREATE DATABASE $FWD_DB" >/dev/null
    fwd_sql "CREATE EXTENSION esrc" >/dev/null
    fwd_sql "ALTER SYSTEM SET esrc.kafka_brokers = '$FWD_BROKER'" >/dev/null
    fwd_sql "SELECT pg_reload_conf()" >/dev/null
}

fwd_sql() {
    psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qAt -v ON_ERROR_STOP=1 -c "$1"
}

# The pid of the forwarder worker (empty while none runs).
fwd_worker_pid() {
    fwd_sql "SELECT pid FROM pg_stat_activity WHERE backend_type = 'esrc forwarder'"
}

fwd_status() {
    fwd_sql "SELECT format('state=%s last=%s pending=%s delivered=%s error=%s blocked=%s',
                           state, last_position, events_pending, delivered_total,
                           coalesce(last_error, '-'), coalesce(blocked_position::text, '-'))
             FROM esrc.forwarder_status"
}

# Wait until nothing committed is pending (default 120 s).
fwd_wait_forwarded() {
    local deadline=$((SECONDS + ${1:-120})) s
    while :; do
        s=$(fwd_sql "SELECT events_pending = 0 AND state = 'running'
                     AND last_position >= (SELECT coalesce(max(position), 0) FROM esrc.events
                                           WHERE position <= esrc.safe_position())
                     FROM esrc.forwarder_status" 2>/dev/null || echo f)
        [ "$s" = t ] && return 0
        if [ $SECONDS -ge $deadline ]; then
            log "not forwarded in time: $(fwd_status)"
            return 1
        fi
        sleep 0.2
    done
}

fwd_dump_events() {
    fwd_sql "SELECT json_build_object(
                'position', position, 'stream', stream, 'version', version,
                'type', type, 'data', data::text, 'metadata', metadata::text,
                'id', id::text, 'category', category,
                'tags', pg_catalog.to_jsonb(e) -> 'tags',
                'time', to_char(recorded_at AT TIME ZONE 'UTC',
                                'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'))
             FROM esrc.events e ORDER BY position" >"$1"
}

# The data topics: every topic but the offsets topic and Kafka's own.
fwd_topics() {
    kcat -b "$FWD_BROKER" -L -m 10 2>/dev/null |
        sed -n 's/^  topic "\([^"]*\)".*/\1/p' |
        grep -v -e '^__' -e "^${FWD_OFFSETS_TOPIC:-esrc.offsets}\$" | sort
}

# Consume all data topics.  The last transaction's markers may still be
# on their way when fwd_wait_forwarded returns; read again until the
# count of records is stable.
fwd_consume() {
    local out=$1 n prev=-1 i topics
    for i in 1 2 3 4 5; do
        topics=$(fwd_topics)
        if [ -n "$topics" ]; then
            # shellcheck disable=SC2086
            "$FWD_KAFKA/consume.sh" "$FWD_BROKER" $topics >"$out"
        else
            : >"$out"
        fi
        n=$(wc -l <"$out")
        [ "$n" = "$prev" ] && return 0
        prev=$n
        sleep 1
    done
}

fwd_check() {
    python3 "$FWD_HERE/check.py" "$@"
}

fwd_stop_all() {
    [ -n "$FWD_PGDIR" ] && pg_stop "$FWD_PGDIR" immediate
    [ -n "$FWD_KDIR" ] && [ -f "$FWD_KDIR/port" ] && "$FWD_KAFKA/broker.sh" stop "$FWD_KDIR" >/dev/null 2>&1
    return 0
}

# fwd_plant STREAM TYPE DATA-SQL [RECORDED-AT-SQL]: write an event into
# esrc.events directly, as the superuser, bypassing esrc.append's checks:
# what a log written by 0.1.0 may hold (an event too large as text, a
# category without a valid topic name).  Pause the forwarder around it:
# without esrc.append the in-flight registry does not cover the row.
fwd_plant() {
    fwd_sql "INSERT INTO esrc.events (position, stream, version, type, data, id, recorded_at, category)
             SELECT nextval('esrc.position_seq'), '$1',
                    coalesce((SELECT max(version) + 1 FROM esrc.events WHERE stream = '$1'), 0),
                    '$2', $3, gen_random_uuid(), ${4:-now()}, split_part('$1', '-', 1)
             RETURNING position"
}

# fwd_wait_state STATE [S]: until esrc.forwarder_status.state is STATE
# (default 60 s).
fwd_wait_state() {
    local deadline=$((SECONDS + ${2:-60}))
    until [ "$(fwd_sql "SELECT state FROM esrc.forwarder_status" 2>/dev/null)" = "$1" ]; do
        [ $SECONDS -lt $deadline ] || { log "state is not $1: $(fwd_status 2>&1)"; return 1; }
        sleep 0.2
    done
}

# fwd_in_kafka STREAM VERSION: is that event in Kafka, once
# (read_committed)?  Call after the status says it is forwarded (or
# blocked before it).
fwd_in_kafka() {
    local now
    now=$(mktemp)
    # shellcheck disable=SC2046
    "$FWD_KAFKA/consume.sh" "$FWD_BROKER" $(fwd_topics) >"$now"
    local rc=0
    jq -e -s --arg s "$1" --arg v "$2" \
        'map(select(.key == $s and .headers.ce_esrcversion == $v)) | length == 1' "$now" >/dev/null || rc=1
    rm -f "$now"
    return $rc
}

# fwd_blocked_on POSITION STREAM ERROR-REGEX: the status names the poison
# record, the error matches, and the detail names the way out.
fwd_blocked_on() {
    local row
    row=$(fwd_sql "SELECT blocked_position || '|' || blocked_stream || '|' || last_error || '|' || detail
                   FROM esrc.forwarder_status")
    log "   status: $row"
    [[ "$row" =~ ^$1\|$2\|.*$3.*\|.*esrc\.forwarder_skip\($1\) ]]
}
