#!/usr/bin/env bash
# esrc.metrics end to end (docs/operations.md, "Metrics"): a real broker and
# a server forwarding database $FWD_DB.  The test appends (single events,
# batches, a rolled-back transaction, a rolled-back savepoint), provokes
# version conflicts (40001) and idempotent retries, counts what it did,
# lets the forwarder deliver, pauses it to leave events pending, and makes
# it fail on a refused librdkafka property.  At each step every query of
# examples/postgres_exporter/queries.yaml runs (test/metrics/check.py) and
# each figure must equal what happened: appends, events, conflicts,
# idempotent hits, forwarded events and pending events exactly, batches as
# many as the forwarder's batch log lines; errors only grow, by at least
# one for the refused property (a loaded machine may also make the
# forwarder report a slow broker, which counts too).  Where Debian has the real
# exporter (prometheus-postgres-exporter, installed if missing), it scrapes
# the database with that file and its /metrics must say the same.  Appends
# in a second database must not show in the first's figures.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

# PyYAML for the python3 the tests run (pinned, from PyPI, as psycopg in
# lib.sh; Debian's python3-yaml serves only Debian's own python3)
python3 -c 'import yaml' 2>/dev/null || {
    log "installing PyYAML (pip)"
    python3 -m pip install -q --disable-pip-version-check "PyYAML==6.0.3" >/dev/null 2>&1 ||
        python3 -m pip install -q --disable-pip-version-check --break-system-packages "PyYAML==6.0.3" >/dev/null
}
EXPORTER=$(command -v prometheus-postgres-exporter || true)
if [ -z "$EXPORTER" ] && [ "$(id -u)" = 0 ]; then
    log "installing prometheus-postgres-exporter (apt-get)"
    apt-get update -q >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus-postgres-exporter >/dev/null 2>&1 || true
    EXPORTER=$(command -v prometheus-postgres-exporter || true)
fi

dir=$(test_tmpdir metrics)
exporter_pid=
trap '[ -z "$exporter_pid" ] || kill "$exporter_pid" 2>/dev/null; fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0
QUERIES=$ESRC_ROOT/examples/postgres_exporter/queries.yaml

fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg" "esrc.forwarder_log_batches = on"
PSQL=(-h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB")
q() { psql "${PSQL[@]}" -qAtX -v ON_ERROR_STOP=1 "$@"; }

if [ -n "$EXPORTER" ]; then
    eport=$(free_port)
    DATA_SOURCE_NAME="postgresql://postgres@127.0.0.1:$FWD_PORT/$FWD_DB?sslmode=disable" \
        "$EXPORTER" --web.listen-address="127.0.0.1:$eport" --extend.query-path="$QUERIES" \
        --disable-default-metrics --disable-settings-metrics --log.level=warn \
        >"$dir/exporter.log" 2>&1 &
    exporter_pid=$!
    SCRAPE=(--scrape "http://127.0.0.1:$eport/metrics")
    log "exporter: $EXPORTER ($("$EXPORTER" --version 2>&1 | head -1)), pid $exporter_pid"
else
    # the real exporter is part of the promise: no silent psql-only run
    die "prometheus-postgres-exporter is missing and apt-get could not install it"
fi

# A: appends that count.  appends/events/conflicts/hits are what the test did.
appends=0 events=0 conflicts=0 hits=0
q -c "SELECT esrc.append('acct-' || g, 'Opened', '{}') FROM generate_series(1, 20) g" >/dev/null
appends=$((appends + 20)) events=$((events + 20))
q -c "SELECT esrc.append_batch('batch-' || g, '[{\"type\": \"A\", \"data\": {}}, {\"type\": \"B\", \"data\": {}},
                                               {\"type\": \"C\", \"data\": {}}]')
      FROM generate_series(1, 5) g" >/dev/null
appends=$((appends + 5)) events=$((events + 15))
# idempotent retries: the first call writes, the 4 retries are hits
for i in 1 2 3 4 5; do
    q -c "SELECT esrc.append('idem-1', 'Paid', '{}', NULL, NULL, 'f3b0c1de-0000-4000-8000-000000000001')" >/dev/null
done
appends=$((appends + 1)) events=$((events + 1)) hits=$((hits + 4))
for i in 1 2; do
    q -c "SELECT esrc.append_batch('idem-2', '[{\"type\": \"A\", \"data\": {}, \"id\": \"f3b0c1de-0000-4000-8000-000000000002\"},
                                              {\"type\": \"B\", \"data\": {}, \"id\": \"f3b0c1de-0000-4000-8000-000000000003\"}]')" >/dev/null
done
appends=$((appends + 1)) events=$((events + 2)) hits=$((hits + 1))
# version conflicts: 40001, nothing written
for v in 5 6 7 -1 9 10; do
    out=$(q -c "SELECT esrc.append('acct-1', 'Late', '{}', NULL, $v)" 2>&1 || true)
    case $out in *"wrong expected version"*) conflicts=$((conflicts + 1)) ;; *) log "no conflict: $out"; status=1 ;; esac
done
# one at REPEATABLE READ: another session appended after our snapshot
out=$(q 2>&1 <<SQL || true
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT esrc.stream_version('acct-2');
\! psql -h 127.0.0.1 -p $FWD_PORT -U postgres -d $FWD_DB -qAtX -c "SELECT esrc.append('acct-2', 'Other', '{}')" >/dev/null
SELECT esrc.append('acct-2', 'Mine', '{}');
COMMIT;
SQL
)
case $out in *"concurrent append"*) conflicts=$((conflicts + 1)) appends=$((appends + 1)) events=$((events + 1)) ;;
             *) log "no concurrent-append conflict: $out"; status=1 ;; esac
# rolled back: nothing counts; a released savepoint counts, a rolled-back one not
q >/dev/null <<'SQL'
BEGIN;
SELECT esrc.append('gone-1', 'X', '{}');
SELECT esrc.append_batch('gone-2', '[{"type": "X", "data": {}}]');
ROLLBACK;
BEGIN;
SELECT esrc.append('sp-1', 'Kept', '{}');
SAVEPOINT a;
SELECT esrc.append('sp-1', 'Undone', '{}');
SELECT esrc.append('sp-2', 'Undone', '{}');
ROLLBACK TO a;
SAVEPOINT b;
SELECT esrc.append('sp-1', 'Kept', '{}');
RELEASE b;
COMMIT;
SQL
appends=$((appends + 2)) events=$((events + 2))
# another database: counted there, not here
psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -qAtX -c "CREATE DATABASE other" >/dev/null
psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d other -qAtX -v ON_ERROR_STOP=1 \
    -c "CREATE EXTENSION esrc" -c "SELECT esrc.append('x-' || g, 'X', '{}') FROM generate_series(1, 7) g" >/dev/null
expect "the log holds the events the test counted" test "$(q -c "SELECT count(*) FROM esrc.events")" = "$events"

batches() { grep -c 'esrc forwarder: batch first=' "$dir/pg/server.log" || true; }
# check LABEL EXTRA-JSON: every figure of $FWD_DB as counted
check() {
    local label=$1 extra=$2
    cat >"$dir/expected.json" <<JSON
{"database": "$FWD_DB", "metrics": {
  "esrc_appends_total": $appends, "esrc_events_total": $events,
  "esrc_conflicts_total": $conflicts, "esrc_idempotent_hits_total": $hits,
  "esrc_forwarded_total": $forwarded, "esrc_forwarder_batches_total": $(batches),
  "esrc_forwarder_errors_total": ">=$errors" $extra}}
JSON
    log "$label: appends=$appends events=$events conflicts=$conflicts hits=$hits forwarded=$forwarded errors=$errors"
    python3 "$ESRC_ROOT/test/metrics/check.py" "$QUERIES" "$dir/expected.json" "${PSQL[@]}" "${SCRAPE[@]}" \
        || status=1
}

# B: forwarded, nothing pending
fwd_wait_forwarded 60 || status=1
forwarded=$events errors=0
check "all forwarded" ', "esrc_forwarder_pending_events": 0, "esrc_forwarder_lag_seconds": 0,
  "esrc_forwarder_standby_wait_seconds": 0, "esrc_forwarder_diverged": 0'

# C: paused, 3 events pending with a lag
q -c "SELECT esrc.forwarder_pause()" >/dev/null
fwd_wait_state paused 30 || status=1
q -c "SELECT esrc.append('late-' || g, 'Queued', '{}') FROM generate_series(1, 3) g" >/dev/null
appends=$((appends + 3)) events=$((events + 3))
sleep 0.2   # a lag that cannot round to 0
check "paused" ', "esrc_forwarder_pending_events": 3, "esrc_forwarder_lag_seconds": ">0"'
q -c "SELECT esrc.forwarder_resume()" >/dev/null
fwd_wait_forwarded 60 || status=1
forwarded=$events

# D: one failure: a librdkafka property the worker's client refuses
errors=$(q -c "SELECT forwarder_errors FROM esrc.metrics_counters() WHERE database = current_database()")
q -c "ALTER SYSTEM SET esrc.kafka_properties = 'no.such.property=1'" -c "SELECT pg_reload_conf()" >/dev/null
fwd_wait_state error 60 || status=1
expect "the status names the refused property" \
    bash -c "psql ${PSQL[*]} -qAtX -c 'SELECT last_error FROM esrc.forwarder_status' | grep -q no.such.property"
q -c "ALTER SYSTEM RESET esrc.kafka_properties" -c "SELECT pg_reload_conf()" >/dev/null
q -c "SELECT esrc.append('after-1', 'Again', '{}')" >/dev/null
appends=$((appends + 1)) events=$((events + 1))
fwd_wait_forwarded 60 || status=1
forwarded=$events errors=$((errors + 1))
check "after one refused configuration" ', "esrc_forwarder_pending_events": 0, "esrc_forwarder_lag_seconds": 0'

expect "esrc.metrics_counters() shows the other database apart (7 appends, 7 events)" \
    test "$(q -c "SELECT appends || ' ' || events FROM esrc.metrics_counters() WHERE database = 'other'")" = "7 7"
expect "in the other database, the view shows its own figures and no forwarder gauges" \
    test "$(psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d other -qAtX -c \
        "SELECT string_agg(name || '=' || value, ' ' ORDER BY name) FROM esrc.metrics
          WHERE name IN ('esrc_appends_total', 'esrc_events_total', 'esrc_forwarder_pending_events')")" \
    = "esrc_appends_total=7 esrc_events_total=7"
expect "esrc.track_metrics = off counts nothing" test "$(q <<'SQL'
SET esrc.track_metrics = off;
SELECT esrc.append('off-1', 'Uncounted', '{}');
RESET esrc.track_metrics;
SELECT value FROM esrc.metrics WHERE name = 'esrc_appends_total';
SQL
)" = "$(printf '0\n%s' "$appends")"
expect "a role without esrc_reader cannot read the counters" bash -c \
    "psql -h 127.0.0.1 -p $FWD_PORT -U postgres -d $FWD_DB -qAtX -c 'CREATE ROLE nobody_m LOGIN' >/dev/null;
     ! psql -h 127.0.0.1 -p $FWD_PORT -U nobody_m -d $FWD_DB -qAtX -c 'SELECT * FROM esrc.metrics_counters()' 2>/dev/null"

# E: counters start again at 0 after a restart
pg_restart "$dir/pg"
expect "after a restart the counters start at 0" \
    test "$(q -c "SELECT sum(value) FROM esrc.metrics WHERE name LIKE '%\_total'")" = "0"
exit $status
