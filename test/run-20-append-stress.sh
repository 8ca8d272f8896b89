#!/usr/bin/env bash
# Multi-client stress of the write path: pgbench clients read a stream's
# version and append with it as expected version (hot and cold streams,
# single events and 3-event batches), retrying 40001 (--max-tries), while a
# reader follows esrc.read_all().  Afterwards every invariant is checked in
# SQL (test/stress/check.sql).  ESRC_STRESS_SECONDS (default 20) and
# ESRC_STRESS_CLIENTS (default 8) size it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/stress/load.sh"

secs=${ESRC_STRESS_SECONDS:-20}
clients=${ESRC_STRESS_CLIENTS:-8}
dir=$(test_tmpdir stress)
port=$(free_port)
cleanup() {
    [ -n "$STRESS_READER_PID" ] && kill "$STRESS_READER_PID" 2>/dev/null || true
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "max_connections = 40"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
psql -qX -v ON_ERROR_STOP=1 -c "CREATE EXTENSION esrc"
log "pgbench: $clients clients, ${secs}s, single appends and batches with expected versions"
stress_load "$dir" "$clients" "$secs"
stress_check "$dir"
sed 's/^/  /' "$dir/check.out" >&2
bad=$(awk '$2 != "t"' "$dir/check.out")
[ -z "$bad" ] || die "invariants violated: $bad"
[ "$(wc -l <"$dir/check.out")" -eq 8 ] || die "expected 8 checks, got $(wc -l <"$dir/check.out")"
log "all invariants hold ($STRESS_SINGLES single appends, $STRESS_BATCHES batches)"
