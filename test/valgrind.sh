#!/usr/bin/env bash
# The regression and isolation suites (sql/*.sql, test/specs/*.spec) against
# a server that runs under valgrind memcheck, then a scan of valgrind's
# reports: the suites must pass, and no error may have an esrc frame in its
# stack.  Errors without one (PostgreSQL's own, e.g. uninitialised padding
# it writes to WAL) are listed but do not fail the run.
#   bash test/valgrind.sh            (not part of test/all.sh: ~10 minutes)
# The server start, the suppressions and the scan are in test/valgrind/lib.sh;
# PostgreSQL's own src/tools/valgrind.supp is used when it is in
# $ESRC_CACHE/valgrind.supp or can be fetched from GitHub (REL_15_STABLE).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/valgrind/lib.sh"

ensure_deps
vg_ensure
build_install

PGXS_DIR=$(dirname "$("$PG_CONFIG" --pgxs)")/..
dir=$(test_tmpdir valgrind)
port=$(free_port)
trap 'vg_cleanup "$dir"; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT

pgsupp="$ESRC_CACHE/valgrind.supp"
if [ ! -s "$pgsupp" ]; then
    mkdir -p "$ESRC_CACHE"
    curl -fsS -m 20 -o "$pgsupp.tmp" \
        https://raw.githubusercontent.com/postgres/postgres/REL_15_STABLE/src/tools/valgrind.supp \
        2>/dev/null && mv "$pgsupp.tmp" "$pgsupp" || rm -f "$pgsupp.tmp"
fi
[ -s "$pgsupp" ] || log "PostgreSQL's src/tools/valgrind.supp is not available; using ours only"
vg_start "$dir" "$port"

status=0
t0=$SECONDS
tests=$(cd "$ESRC_ROOT/sql" && ls *.sql | sed 's/\.sql$//' | sort)
log "pg_regress under valgrind: $(echo $tests | wc -w) files"
as_test_user "$PGXS_DIR/test/regress/pg_regress" \
    --inputdir="$ESRC_ROOT" --outputdir="$dir/regress" \
    --bindir="$PG_BINDIR" --host=127.0.0.1 --port="$port" --user=postgres \
    --dbname=esrc_regression $tests || { status=1; head -200 "$dir/regress/regression.diffs" 2>/dev/null; }
specs=$(cd "$ESRC_ROOT/test/specs" && ls *.spec 2>/dev/null | sed 's/\.spec$//' | sort)
if [ -n "$specs" ]; then
    log "pg_isolation_regress under valgrind: $(echo $specs | wc -w) specs"
    as_test_user "$PGXS_DIR/test/isolation/pg_isolation_regress" \
        --inputdir="$ESRC_ROOT/test" --outputdir="$dir/isolation" \
        --bindir="$PG_BINDIR" --host=127.0.0.1 --port="$port" --user=postgres \
        --dbname=esrc_isolation $specs || { status=1; head -200 "$dir/isolation/regression.diffs" 2>/dev/null; }
fi
log "suites took $((SECONDS - t0)) s under valgrind"

# then the fuzz driver (test/fuzz/fuzz.py), bounded, against the same server
fuzz_seconds=${ESRC_VALGRIND_FUZZ_SECONDS:-60}
if [ "$fuzz_seconds" != 0 ]; then
    source "$ESRC_ROOT/test/fuzz/psycopg.sh"
    seed=${ESRC_FUZZ_SEED:-$RANDOM}
    psql -qX -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 <<'SQL'
CREATE DATABASE esrc_fuzz;
\c esrc_fuzz
CREATE EXTENSION esrc;
CREATE ROLE fuzz_writer LOGIN IN ROLE esrc_writer;
ALTER ROLE fuzz_writer SET esrc.max_event_size = '32kB';
SQL
    log "fuzz driver under valgrind: ${fuzz_seconds}s, seed $seed"
    python3 "$ESRC_ROOT/test/fuzz/fuzz.py" \
        --dsn "host=127.0.0.1 port=$port user=fuzz_writer dbname=esrc_fuzz" \
        --admin-dsn "host=127.0.0.1 port=$port user=postgres dbname=esrc_fuzz" \
        --seconds "$fuzz_seconds" --seed "$seed" \
        --pidfile "$dir/data/postmaster.pid" --log "$dir/server.log" >"$dir/fuzz.json" || status=1
    python3 - "$dir/fuzz.json" <<'PY' >&2 || true
import json, sys
s = json.load(open(sys.argv[1]))
print(f"fuzz under valgrind: {s['cases']} cases, {s['events_stored']} events stored and read back")
PY
fi

vg_stop "$dir" || status=1
vg_scan "$dir" || status=1
exit $status
