#!/usr/bin/env bash
# A logical upgrade across majors: a PostgreSQL 15 database with events,
# a snapshot, a forwarding position in Kafka and an append in flight is
# dumped with pg_dump of 17 (then of 18) and restored into a fresh cluster
# of that major (in its Debian root, test/matrix/), following
# docs/operations.md.  Checks, per major: the log (every row, as text),
# the stream versions, the snapshot definition and rows are identical to
# the source's committed state, the in-flight append is not there, the
# sequence is past every restored position; appends continue at the next
# versions and the snapshot follows them; and forwarding continues the old
# log in the same Kafka offsets topic: every committed event of the source
# and of the target is in Kafka exactly once, in per-stream order
# (test/forward/check.py).  Each major gets a broker and a source of its
# own, so that the two continuations do not meet in one offsets topic.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

[ "$ESRC_PG" = 15 ] || { log "the source is the host's PostgreSQL 15; nothing to do on $ESRC_PG"; exit 0; }
status=0
dir=$(test_tmpdir cross-major)
inflight=
cleanup() {
    [ -n "$inflight" ] && kill "$inflight" 2>/dev/null || true
    fwd_stop_all
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT

for major in ${ESRC_RESTORE_MAJORS:-17 18}; do
    rc=0
    root=$(bash "$ESRC_ROOT/test/matrix/root.sh" "$major") || rc=$?
    [ $rc -eq 0 ] || { log "FAIL - no Debian root with PostgreSQL $major (root.sh exit $rc)"; status=1; continue; }
    log "15 -> $major"
    fwd_start_kafka "$dir/kafka-$major"
    fwd_start_pg "$dir/pg-$major"
    fwd_sql "SELECT esrc.append('user-' || (i % 7), CASE WHEN i <= 7 THEN 'UserRegistered' ELSE 'UserNameChanged' END,
                                jsonb_build_object('name', 'n' || i, 'note', 'café ☕'),
                                CASE WHEN i % 3 = 0 THEN jsonb_build_object('by', 'test') END)
             FROM generate_series(1, 60) i" >/dev/null
    fwd_sql "SELECT esrc.create_snapshot('public.users', 'user', 'esrc.merge(jsonb, esrc.event)')" >/dev/null
    fwd_sql "SELECT esrc.append_batch('order-' || i, '[{\"type\": \"Placed\", \"data\": {\"total\": 1.5}}, {\"type\": \"Paid\", \"data\": {}}]')
             FROM generate_series(1, 5) i" >/dev/null
    fwd_sql "SELECT esrc.append('user-1', 'UserNameChanged', '{\"name\": \"last\"}', expected_version => esrc.stream_version('user-1'))" >/dev/null
    fwd_wait_forwarded 120 || { log "FAIL - the source did not forward: $(fwd_status)"; status=1; }

    # an append in flight while pg_dump runs (rolled back afterwards)
    psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qAt -v ON_ERROR_STOP=1 \
        -c "BEGIN" -c "SELECT esrc.append('user-2', 'InFlight', '{}')" -c "SELECT pg_sleep(600)" \
        >/dev/null 2>&1 &
    inflight=$!
    for _ in $(seq 1 100); do
        [ "$(fwd_sql "SELECT count(*) FROM esrc.inflight_appends")" = 1 ] && break
        sleep 0.1
    done
    expect "an append is in flight on the source" test "$(fwd_sql "SELECT count(*) FROM esrc.inflight_appends")" = 1

    # the source stops forwarding before the target continues its log
    read -r log_id position <<<"$(fwd_sql "SELECT log_id, position FROM esrc.forwarder_state" | tr '|' ' ')"
    fwd_sql "ALTER SYSTEM SET esrc.kafka_brokers = ''" >/dev/null
    fwd_sql "SELECT pg_reload_conf()" >/dev/null
    psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qAtX -v ON_ERROR_STOP=1 \
        -f "$ESRC_ROOT/test/upgrade/state.sql" >"$dir/source-$major.txt"

    xfer=$root/build/xfer-$major
    rm -rf "$xfer"
    mkdir -p "$xfer"
    chmod 777 "$xfer"
    bash "$ESRC_ROOT/test/matrix/run.sh" "$major" -- bash test/upgrade/restore-into.sh \
        127.0.0.1 "$FWD_PORT" "$FWD_DB" "$FWD_BROKER" "/build/xfer-$major" "$log_id" "$position" \
        || { log "FAIL - the restore into $major broke off"; status=1; }
    kill "$inflight" 2>/dev/null || true
    wait "$inflight" 2>/dev/null || true
    inflight=

    expect "$major: log, versions, snapshot definition and rows as on 15 (committed state, no in-flight event)" \
        diff -u "$dir/source-$major.txt" <(grep -v -e '^sequence ' -e '^extension ' "$xfer/restored.txt")
    seq_value=$(sed -n 's/^sequence //p' "$xfer/restored.txt")
    max_pos=$(sed -n 's/^max position //p' "$xfer/restored.txt")
    expect "$major: the sequence ($seq_value) is past every restored position ($max_pos) and the in-flight one" \
        test "$seq_value" -gt "$max_pos"
    expect "$major: the extension is restored at the current version" \
        test "$(sed -n 's/^extension //p' "$xfer/restored.txt")" = \
        "$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$ESRC_ROOT/esrc.control")"
    users1=$(sed -n 's/^stream user-1 //p' "$dir/source-$major.txt")
    expected=$(printf '%s\n' "$((users1 + 1))" "$(sed -n 's/^stream order-2 //p' "$dir/source-$major.txt" | awk '{ print $1 + 2 }')" \
        0 "$((users1 + 1)) after restore" t)
    expect "$major: appends continue at the next versions and positions, the snapshot follows" \
        test "$(head -5 "$xfer/after.txt")" = "$expected"
    expect "$major: the target forwarded without an error" \
        grep -q "^forwarder running [0-9]* none$" "$xfer/after.txt"
    fwd_consume "$dir/records-$major.jsonl"
    log "$major: $(wc -l <"$xfer/events.jsonl") events committed (source and target), $(wc -l <"$dir/records-$major.jsonl") records in Kafka"
    expect "$major: every committed event in Kafka exactly once, in per-stream order, across the restore" \
        fwd_check "$xfer/events.jsonl" "$dir/records-$major.jsonl"
    fwd_stop_all
    FWD_PGDIR= FWD_KDIR=
done
exit $status
