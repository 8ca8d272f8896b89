#!/usr/bin/env bash
# test/upgrade/restore-into.sh HOST PORT DB BROKER XFER LOG_ID POSITION:
# the target side of test/run-55-cross-major-restore.sh, run inside a
# Debian root (test/matrix/run.sh MAJOR -- ...), with that major's tools:
# pg_dump of DB from the source server at HOST:PORT (the newer pg_dump,
# as PostgreSQL recommends), a fresh cluster with esrc preloaded and
# forwarding off, pg_restore, test/upgrade/state.sql of the restored
# database into XFER/restored.txt; then the documented way to continue the
# old log in Kafka (docs/forwarder.md, "Restoring a dump": the old log_id
# and last forwarded position into esrc.forwarder_state, then the
# brokers), appends that continue the restored streams (the snapshot
# follows them), and the committed events as JSON lines for
# test/forward/check.py into XFER/events.jsonl.  XFER/after.txt gets what
# the appends returned.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"

host=$1 port=$2 db=$3 broker=$4 xfer=$5 log_id=$6 position=$7
FWD_DB=$db
dir=$(test_tmpdir restore-into)
trap 'pg_stop "$dir" immediate; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT

log "pg_dump $("$PG_BINDIR/pg_dump" --version | cut -d' ' -f3) of $db from $host:$port"
"$PG_BINDIR/pg_dump" -h "$host" -p "$port" -U postgres -Fc -f "$xfer/dump" "$db"
FWD_PORT=$(free_port)
pg_start "$dir" "$FWD_PORT" "esrc.database = '$db'" "log_min_messages = log"
psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -qAt -c "CREATE DATABASE \"$db\"" >/dev/null
# Debian's 15.20 and 17.12 servers here set an attribute option
# "pg_attver" on every column, which pg_dump carries over and 18.6 refuses
# ("unrecognized parameter"): restore through the plain script, without
# the statements that set only that option (docs/operations.md).
"$PG_BINDIR/pg_restore" -f - "$xfer/dump" |
    sed -E '/^ALTER (FOREIGN )?TABLE ONLY .* ALTER COLUMN .* SET \(pg_attver=[0-9]+\);$/d' >"$xfer/restore.sql"
log "restoring ($(grep -c . "$xfer/restore.sql") lines of SQL)"
psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$db" -qX -v ON_ERROR_STOP=1 --single-transaction \
    -f "$xfer/restore.sql" >/dev/null
psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$db" -qAtX -v ON_ERROR_STOP=1 \
    -f "$ESRC_ROOT/test/upgrade/state.sql" >"$xfer/restored.txt"
echo "sequence $(fwd_sql "SELECT last_value FROM esrc.position_seq")" >>"$xfer/restored.txt"
echo "extension $(fwd_sql "SELECT extversion FROM pg_extension WHERE extname = 'esrc'")" >>"$xfer/restored.txt"

# continue the old log in Kafka, then forward
fwd_sql "UPDATE esrc.forwarder_state SET log_id = '$log_id', position = $position" >/dev/null
fwd_sql "ALTER SYSTEM SET esrc.kafka_brokers = '$broker'" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
{
    fwd_sql "SELECT esrc.append('user-1', 'UserNameChanged', '{\"name\": \"after restore\"}',
                                expected_version => esrc.stream_version('user-1'))"
    fwd_sql "SELECT esrc.append_batch('order-2', '[{\"type\": \"Paid\", \"data\": {}}, {\"type\": \"Shipped\", \"data\": {}}]',
                                      esrc.stream_version('order-2'))"
    fwd_sql "SELECT esrc.append('user-new', 'UserRegistered', '{\"name\": \"new\"}', expected_version => -1)"
    fwd_sql "SELECT version || ' ' || (state->>'name') FROM esrc.load('public.users', 'user-1')"
    fwd_sql "SELECT position > $(sed -n 's/^max position //p' "$xfer/restored.txt")
             FROM esrc.events WHERE stream = 'user-new'"
} >"$xfer/after.txt"
fwd_wait_forwarded 120 || die "the restored database did not forward: $(fwd_status)"
fwd_dump_events "$xfer/events.jsonl"
echo "forwarder $(fwd_sql "SELECT state || ' ' || last_position || ' ' || coalesce(last_error, 'none') FROM esrc.forwarder_status")" >>"$xfer/after.txt"
