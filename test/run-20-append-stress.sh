#!/usr/bin/env bash
# Multi-client stress of the write path: pgbench clients read a stream's
# version and append with it as expected version (hot and cold streams,
# single events and 3-event batches), retrying 40001 (--max-tries), while a
# reader follows esrc.read_all().  Afterwards every invariant is checked in
# SQL (test/stress/check.sql).  ESRC_STRESS_SECONDS (default 20) and
# ESRC_STRESS_CLIENTS (default 8) size it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

secs=${ESRC_STRESS_SECONDS:-20}
clients=${ESRC_STRESS_CLIENTS:-8}
dir=$(test_tmpdir stress)
port=$(free_port)
reader_pid=
cleanup() {
    [ -n "$reader_pid" ] && kill "$reader_pid" 2>/dev/null || true
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "max_connections = 40"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
psql -qX -v ON_ERROR_STOP=1 -c "CREATE EXTENSION esrc"
start=$(psql -qAtX -c "SELECT esrc.safe_position()")

psql -qX -v ON_ERROR_STOP=1 -v start_position="$start" -f "$ESRC_ROOT/test/stress/reader.sql" \
    >"$dir/reader.log" 2>&1 &
reader_pid=$!

log "pgbench: $clients clients, ${secs}s, single appends and batches with expected versions"
"$PG_BINDIR/pgbench" -n -c "$clients" -j 2 -T "$secs" --max-tries=1000 \
    --log --log-prefix="$dir/txlog" \
    -f "$ESRC_ROOT/test/stress/append_single.pgbench@8" \
    -f "$ESRC_ROOT/test/stress/append_batch.pgbench@2" >"$dir/pgbench.log" 2>&1 \
    || { cat "$dir/pgbench.log"; die "pgbench failed"; }
grep -E "processed|failed|retried|tps" "$dir/pgbench.log" | sed 's/^/  /' >&2

# acknowledged transactions per script, from the per-transaction log
# (client_id transaction_no time script_no ...; time is "failed" for a
# transaction that failed after all its tries)
singles=$(cat "$dir"/txlog.* | awk '$3 != "failed" && $4 == 0' | wc -l)
batches=$(cat "$dir"/txlog.* | awk '$3 != "failed" && $4 == 1' | wc -l)
failed=$(awk '/^number of failed transactions:/{print $5; exit}' "$dir/pgbench.log")
[ -n "$singles" ] && [ -n "$batches" ] || { cat "$dir/pgbench.log"; die "cannot parse pgbench output"; }
[ "${failed:-0}" = 0 ] || die "$failed transactions failed even after retries"

psql -qX -v ON_ERROR_STOP=1 -c "SELECT esrc.append('stress-done', 'Done', '{}')" >/dev/null
wait "$reader_pid" || { cat "$dir/reader.log"; die "reader failed"; }
reader_pid=

psql -qX -v ON_ERROR_STOP=1 -v singles="$singles" -v batches="$batches" -v start_position="$start" \
    -f "$ESRC_ROOT/test/stress/check.sql" >"$dir/check.out"
sed 's/^/  /' "$dir/check.out" >&2
bad=$(awk '$2 != "t"' "$dir/check.out")
[ -z "$bad" ] || die "invariants violated: $bad"
[ "$(wc -l <"$dir/check.out")" -eq 8 ] || die "expected 8 checks, got $(wc -l <"$dir/check.out")"
log "all invariants hold ($singles single appends, $batches batches)"
