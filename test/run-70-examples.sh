#!/usr/bin/env bash
# The application examples run against a real server, so they cannot rot:
#   examples/python/security_service.py  psycopg command handlers with a
#                                        40001 retry loop (self-check)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ensure_python_psycopg

dir=$(test_tmpdir examples)
port=$(free_port)
trap 'pg_stop "$dir" immediate; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
pg_start "$dir" "$port"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
psql -qX -v ON_ERROR_STOP=1 -c "CREATE EXTENSION esrc" -f "$ESRC_ROOT/examples/security_service.sql" >/dev/null

log "python: examples/python/security_service.py"
python3 "$ESRC_ROOT/examples/python/security_service.py" "host=127.0.0.1 port=$port user=postgres dbname=postgres"
