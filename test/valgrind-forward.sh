#!/usr/bin/env bash
# The Kafka forwarder under valgrind memcheck, against a real broker: the
# worker process (librdkafka's threads, the long-lived batch and topic
# memory) and the appending backends run under memcheck while
#   - 2 pgbench sessions append to 40 streams in 2 categories, 2 events per
#     transaction, a tenth rolled back, with a reload (batch size) and a
#     pause/resume in the middle and a SIGTERM of the worker (it restarts,
#     still under valgrind, and continues from the offsets topic);
#   - then the same load in at_least_once mode (a reload switches it);
#   - then one transaction over 20 categories (20 topics in one batch);
#   - then a planted event (as 0.1.0 could store it) whose category is 510
#     bytes, so that its topic name does not fit the worker's buffer: the
#     worker blocks on it (memcheck sees every byte of the name it
#     builds), and esrc.forwarder_skip gets past it.
# Then a read_committed consumer must find every committed event once, in
# per-stream order (test/forward/check.py), and no valgrind error may have
# an esrc frame (test/valgrind/scan.py).
#   bash test/valgrind-forward.sh        (not part of test/all.sh: ~6 minutes)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
source "$ESRC_ROOT/test/valgrind/lib.sh"
fwd_under_reaper "$@"

ensure_deps
vg_ensure
build_install

dir=$(test_tmpdir vg-forward)
mkdir -p "$dir/pg"
chmod 755 "$dir/pg"
[ "$(id -u)" = 0 ] && chown "$ESRC_TEST_USER" "$dir/pg"
trap 'vg_cleanup "$dir/pg"; fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0

KAFKA_NUM_PARTITIONS=3 fwd_start_kafka "$dir/kafka"
FWD_PORT=$(free_port)
vg_start "$dir/pg" "$FWD_PORT" "esrc.database = '$FWD_DB'" "log_min_messages = log" \
    "esrc.kafka_brokers = '$FWD_BROKER'"
psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -qAt -c "CREATE DATABASE $FWD_DB" >/dev/null
fwd_sql "CREATE EXTENSION esrc" >/dev/null

load() { # transactions per session
    PGOPTIONS= "$PG_BINDIR/pgbench" -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -f "$FWD_HERE/load.pgbench" \
        -D streams=20 -c 2 -j 2 -t "$1" "$FWD_DB" >"$dir/pgbench.log" 2>&1 || { cat "$dir/pgbench.log"; die "pgbench failed"; }
}
reload() { # name = value ...
    for line in "$@"; do echo "$line"; done | as_test_user tee -a "$dir/pg/data/postgresql.conf" >/dev/null
    fwd_sql "SELECT pg_reload_conf()" >/dev/null
}

log "exactly_once under valgrind: load, reload, pause/resume, SIGTERM of the worker"
load 150 &
loader=$!
sleep 5
reload "esrc.kafka_batch_size = 7"
fwd_sql "SELECT esrc.forwarder_pause()" >/dev/null
sleep 2
fwd_sql "SELECT esrc.forwarder_resume()" >/dev/null
sleep 3
old=$(fwd_worker_pid)
[ -n "$old" ] && fwd_sql "SELECT pg_terminate_backend($old)" >/dev/null
wait $loader
fwd_wait_forwarded 300 || status=1
new=$(fwd_worker_pid)
expect "the worker was terminated and a new one forwarded the rest" \
    test -n "$old" -a -n "$new" -a "$old" != "$new"

log "at_least_once under valgrind"
reload "esrc.delivery = 'at_least_once'"
load 100
fwd_wait_forwarded 300 || status=1
expect "status shows at_least_once" \
    test "$(fwd_sql "SELECT delivery FROM esrc.forwarder_status")" = at_least_once

log "exactly_once again: one transaction over 20 categories (20 topics)"
reload "esrc.delivery = 'exactly_once'" "esrc.kafka_batch_size = 10000"
fwd_sql "SELECT count(esrc.append('many' || g || '-1', 'Created', jsonb_build_object('g', g)))
         FROM generate_series(1, 20) g" >/dev/null
fwd_wait_forwarded 300 || status=1

log "a planted event with a 510-byte category"
fwd_sql "SELECT esrc.forwarder_pause()" >/dev/null
long=$(printf 'b%.0s' $(seq 510))
planted=$(fwd_plant "$long" Long "'{}'::jsonb")
fwd_sql "SELECT esrc.append('after-1', 'After', '{}')" >/dev/null
fwd_sql "SELECT esrc.forwarder_resume()" >/dev/null
fwd_wait_state blocked 240 || status=1
expect "the worker blocks on the planted event: its topic name is too long" \
    test "$(fwd_sql "SELECT state || ' ' || blocked_position || ' ' || (last_error LIKE '%topic name would be longer%')
                     FROM esrc.forwarder_status")" = "blocked $planted true"
fwd_sql "SELECT esrc.forwarder_skip($planted)" >/dev/null
fwd_wait_forwarded 300 || status=1

fwd_dump_events "$dir/events.all.jsonl"
jq -c --argjson p "$planted" 'select(.position != $p)' "$dir/events.all.jsonl" >"$dir/events.jsonl"
fwd_consume "$dir/records.jsonl"
log "$(wc -l <"$dir/events.jsonl") events committed, $(wc -l <"$dir/records.jsonl") records in Kafka"
expect "every committed event in Kafka once, in per-stream order" \
    fwd_check "$dir/events.jsonl" "$dir/records.jsonl" --partitions 3

vg_stop "$dir/pg" || status=1
expect "no valgrind error with an esrc frame, no crash" vg_scan "$dir/pg"
expect "both workers ran under valgrind (their logs: vg.$old.log, vg.$new.log)" \
    test -f "$dir/pg/vg.$old.log" -a -f "$dir/pg/vg.$new.log"
if [ $status -ne 0 ]; then
    grep -E "esrc forwarder|ERROR|FATAL" "$dir/pg/server.log" | tail -30 >&2
fi
exit $status
