#!/usr/bin/env bash
# The application examples run against real servers, so they cannot rot:
#   examples/python/security_service.py  psycopg command handlers with a
#                                        40001 retry loop (self-check)
#   examples/projections/projections.sql read models of the same users kept by
#                                        projections, a blue/green swap and a
#                                        reset (self-check against the snapshot)
#   examples/java                        a plain Kafka consumer of the topic
#                                        the Python commands were forwarded to
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

ensure_python_psycopg
FWD_DB=examples
dir=$(test_tmpdir examples)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg"
psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qX -v ON_ERROR_STOP=1 \
    -f "$ESRC_ROOT/examples/security_service.sql" >/dev/null

log "python: examples/python/security_service.py"
python3 "$ESRC_ROOT/examples/python/security_service.py" \
    "host=127.0.0.1 port=$FWD_PORT user=postgres dbname=$FWD_DB"

log "sql: examples/projections/projections.sql"
psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qX -v ON_ERROR_STOP=1 \
    -f "$ESRC_ROOT/examples/projections/projections.sql" >"$dir/projections.out" \
    || { cat "$dir/projections.out"; die "examples/projections/projections.sql failed"; }
grep -c '^ *ok: ' "$dir/projections.out" | grep -qx 3 || { cat "$dir/projections.out"; die "projections: expected 3 checks"; }

fwd_wait_forwarded 60
n=$(fwd_sql "SELECT count(*) FROM esrc.events WHERE category = 'user'")
log "java: examples/java reads the $n forwarded events of topic esrc.user"
bash "$ESRC_ROOT/examples/java/run.sh" "$FWD_BROKER" esrc.user "$n" 60 | tail -3
