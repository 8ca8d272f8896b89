#!/usr/bin/env bash
# bench/python-client/run.sh: the Python client (clients/python) against
# the same work written by hand with psycopg: handle() against the
# hand-written load/decide/append/retry loop, esrc.Consumer against the
# hand-written poll/insert/ack loop; medians of per-round ratios (see
# bench.py).  BENCH_ROUNDS (5), BENCH_COMMANDS (2000), BENCH_STREAMS (100),
# BENCH_EVENTS (20000) size it.  Uses the venv of
# test/run-73-python-client.sh when it exists, else python3 with psycopg.
set -euo pipefail
source "$(dirname "$0")/../../test/lib.sh"
ensure_python_psycopg
py=python3
for v in "$ESRC_CACHE"/python-client-venv-*/bin/python; do [ -x "$v" ] && py=$v; done
dir=$(test_tmpdir pyclientbench)
port=$(free_port)
trap 'pg_stop "$dir" immediate; rm -rf "$dir"' EXIT
pg_start "$dir" "$port" "synchronous_commit = off"
dsn="host=127.0.0.1 port=$port user=postgres dbname=postgres"
psql "$dsn" -qAtX -v ON_ERROR_STOP=1 -c "CREATE EXTENSION esrc" >/dev/null
log "python-client bench ($($py -V), synchronous_commit = off: the client's own cost shows more)"
(cd "$dir" && "$py" "$ESRC_ROOT/bench/python-client/bench.py" "$dsn")
