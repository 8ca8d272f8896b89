#!/usr/bin/env bash
# Property-based fuzzing of the SQL API (test/fuzz/fuzz.py) against a
# throwaway server: random stream names, JSON, expected versions and batch
# shapes; the server must survive every call, every refusal must carry a
# documented SQLSTATE, every accepted append must read back exactly.
#   bash test/run-60-fuzz.sh [SECONDS]     (default 60, or ESRC_FUZZ_SECONDS)
# ESRC_FUZZ_SEED=N replays a run (the seed is printed at the start).
# psycopg (pinned) is installed with pip into ~/.cache/esrc if missing.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

seconds=${1:-${ESRC_FUZZ_SECONDS:-60}}
seed=${ESRC_FUZZ_SEED:-$(python3 -c 'import random; print(random.SystemRandom().randint(1, 2**31))')}
source "$ESRC_ROOT/test/fuzz/psycopg.sh"

dir=$(test_tmpdir fuzz)
port=$(free_port)
trap 'pg_stop "$dir" immediate; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
pg_start "$dir" "$port"

psql -qX -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 <<'SQL'
CREATE EXTENSION esrc;
CREATE ROLE fuzz_writer LOGIN IN ROLE esrc_writer;
-- a small limit keeps the "too large" cases cheap
ALTER ROLE fuzz_writer SET esrc.max_event_size = '32kB';
ALTER ROLE fuzz_writer SET statement_timeout = '60s';
SQL

log "fuzzing for ${seconds}s, seed $seed (replay: ESRC_FUZZ_SEED=$seed bash test/run-60-fuzz.sh $seconds)"
status=0
python3 "$ESRC_ROOT/test/fuzz/fuzz.py" \
    --dsn "host=127.0.0.1 port=$port user=fuzz_writer dbname=postgres" \
    --admin-dsn "host=127.0.0.1 port=$port user=postgres dbname=postgres" \
    --seconds "$seconds" --seed "$seed" \
    --pidfile "$dir/data/postmaster.pid" --log "$dir/server.log" >"$dir/summary.json" || status=1
cat "$dir/summary.json" >&2
if [ $status -ne 0 ]; then
    log "server log (tail):"
    tail -30 "$dir/server.log" >&2
    exit 1
fi
python3 - "$dir/summary.json" <<'PY' >&2
import json, sys
s = json.load(open(sys.argv[1]))
acc = sum(v for k, v in s['outcomes'].items() if k.endswith(':accept'))
rej = sum(v for k, v in s['outcomes'].items() if k.split(':')[1][:1].isdigit())
print(f"fuzz: {s['cases']} cases in {s['seconds']} s (seed {s['seed']}): {acc} accepted calls, "
      f"{rej} refusals with the expected SQLSTATE, {s['events_stored']} events in {s['streams']} "
      "streams read back exactly; server alive, no crash in its log")
PY
