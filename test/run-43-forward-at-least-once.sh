#!/usr/bin/env bash
# Kafka forwarding in at_least_once mode, and switching modes with a
# reload: under load, kill -9 the postmaster and kill -9 the broker; then
# nothing committed may be missing and the first delivery of every event
# comes in order (duplicates are allowed, and counted).  Then a reload to
# exactly_once: from there on, every event exactly once.  A property that
# librdkafka refuses, and a change of esrc.database.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-alo)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0

KAFKA_NUM_PARTITIONS=2 fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg" "esrc.delivery = at_least_once"
fwd_sql "SELECT esrc.append('warmup-1', 'Started', '{}')" >/dev/null
fwd_wait_forwarded 60 || die "the forwarder did not start: $(fwd_status)"
expect "the status shows at_least_once" \
    test "$(fwd_sql "SELECT delivery FROM esrc.forwarder_status")" = at_least_once

cat >"$dir/load.sql" <<'EOF'
\set s random(1, 40)
\set r random(1, 10)
BEGIN;
SELECT esrc.append('acct-' || :s, 'Deposited', jsonb_build_object('amount', :r));
SELECT esrc.append('cart-' || :s, 'Changed', jsonb_build_object('r', :r));
\if :r = 1
ROLLBACK;
\else
COMMIT;
\endif
EOF
load() {
    pgbench -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -f "$dir/load.sql" -c 3 -j 1 \
        -T "$1" -R 300 "$FWD_DB" >>"$dir/pgbench.log" 2>&1 &
    load=$!
}

log "kill -9 the postmaster under load"
load 6
sleep 2.5
pm=$(head -1 "$dir/pg/data/postmaster.pid")
children=$(pgrep -P "$pm" || true)
kill -9 "$pm"
for c in $children; do while kill -0 "$c" 2>/dev/null; do sleep 0.1; done; done
wait "$load" || true
as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/server.log" -w -t 60 start >/dev/null
fwd_wait_forwarded 90 || status=1

log "kill -9 the broker under load, start it again"
load 8
sleep 2
"$FWD_KAFKA/broker.sh" kill "$dir/kafka" 2>/dev/null
"$FWD_KAFKA/broker.sh" restart "$dir/kafka" 2>&1 | tail -1 | sed 's/^/   /' >&2
wait "$load" || true
fwd_wait_forwarded 90 || status=1

fwd_dump_events "$dir/events.jsonl"
fwd_consume "$dir/records.jsonl"
fwd_check "$dir/events.jsonl" "$dir/records.jsonl" --mode at_least_once --partitions 2 || status=1
expect "the position mirror (the authority in this mode) caught up" \
    test "$(fwd_sql "SELECT position FROM esrc.forwarder_state")" = \
    "$(fwd_sql "SELECT max(position) FROM esrc.events")"

log "reload with esrc.delivery = exactly_once"
last=$(fwd_sql "SELECT max(position) FROM esrc.events")
fwd_sql "ALTER SYSTEM SET esrc.delivery = exactly_once" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
load 4
wait "$load" || true
fwd_wait_forwarded 90 || status=1
expect "the status shows exactly_once" \
    test "$(fwd_sql "SELECT delivery FROM esrc.forwarder_status")" = exactly_once
fwd_dump_events "$dir/events2.jsonl"
fwd_consume "$dir/records2.jsonl"
# the events after the switch, exactly once (the old ones are checked above)
python3 - "$dir/events2.jsonl" "$last" >"$dir/events_after.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    if json.loads(line)["position"] > int(sys.argv[2]):
        print(line, end="")
EOF
jq -c --argjson last "$last" 'select((.headers.ce_esrcposition | tonumber) > $last)' \
    "$dir/records2.jsonl" >"$dir/after.jsonl"
expect "events were appended after the switch" test -s "$dir/events_after.jsonl"
fwd_check "$dir/events_after.jsonl" "$dir/after.jsonl" || status=1

log "a property librdkafka does not know, then a fix"
fwd_sql "ALTER SYSTEM SET esrc.kafka_properties = 'linger.ms=2;no.such.property=s3cret-value'" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
deadline=$((SECONDS + 30))
until [ "$(fwd_sql "SELECT state FROM esrc.forwarder_status")" = error ] || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
err=$(fwd_sql "SELECT state || '|' || last_error || '|' || detail FROM esrc.forwarder_status")
log "   status: $err"
expect "the status names the refused property and never shows its value" \
    eval '[[ "$err" == error\|*no.such.property* && "$err" != *s3cret* ]]'
# (PostgreSQL itself logs "parameter ... changed to ..." at a reload, for
# those who can read the server log; the forwarder's own lines never do)
expect "the forwarder's log lines do not show the value either" \
    eval '! grep "esrc forwarder" "$dir/pg/server.log" | grep -q s3cret-value'
fwd_sql "SELECT esrc.append('warmup-1', 'WhileMisconfigured', '{}')" >/dev/null
fwd_sql "ALTER SYSTEM SET esrc.kafka_properties = 'linger.ms=2'" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
fwd_wait_forwarded 60 || status=1
expect "after the fix, forwarding resumed" \
    test "$(fwd_sql "SELECT state FROM esrc.forwarder_status")" = running

log "esrc.database changed: the worker restarts for the other database"
fwd_sql "ALTER SYSTEM SET esrc.database = 'postgres'" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
deadline=$((SECONDS + 30))
until [ "$(fwd_sql "SELECT datname FROM pg_stat_activity WHERE backend_type = 'esrc forwarder'")" = postgres ] ||
    [ $SECONDS -ge $deadline ]; do sleep 0.2; done
expect "the worker now serves database postgres" \
    test "$(fwd_sql "SELECT datname FROM pg_stat_activity WHERE backend_type = 'esrc forwarder'")" = postgres
expect "here the status says inactive" \
    test "$(fwd_sql "SELECT state FROM esrc.forwarder_status WHERE database = current_database()")" = inactive
grep -q 'stopping the forwarder of database "esrc_fwd", which is no longer forwarded' "$dir/pg/server.log" ||
    { log "FAIL - no log line for the stop"; status=1; }

if [ $status -ne 0 ]; then
    grep -E "esrc forwarder|ERROR|FATAL" "$dir/pg/server.log" | tail -30 >&2
fi
exit $status
