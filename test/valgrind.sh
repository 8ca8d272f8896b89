#!/usr/bin/env bash
# The regression and isolation suites (sql/*.sql, test/specs/*.spec) against
# a server that runs under valgrind memcheck, then a scan of valgrind's
# reports: the suites must pass, and no error may have an esrc frame in its
# stack.  Errors without one (PostgreSQL's own, e.g. uninitialised padding
# it writes to WAL) are listed but do not fail the run.
#   bash test/valgrind.sh            (not part of test/all.sh: ~10 minutes)
# Suppressions: test/valgrind/pg15-debian.supp (ours, derived from runs of
# this script on Debian's postgresql-15), plus PostgreSQL's own
# src/tools/valgrind.supp when it is in $ESRC_CACHE/valgrind.supp or can be
# fetched from GitHub (REL_15_STABLE).
#
# The Debian server is not built with USE_VALGRIND, so memcheck sees palloc
# chunks only as parts of malloc'd blocks: it catches reads of
# uninitialised memory, invalid frees and accesses outside malloc'd blocks,
# but not an overrun into the next chunk of the same memory context.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ensure_deps
command -v valgrind >/dev/null || {
    [ "$(id -u)" = 0 ] || die "valgrind is missing; install it"
    log "installing valgrind (apt-get)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q valgrind >/dev/null
}
build_install

PGXS_DIR=$(dirname "$(pg_config --pgxs)")/..
dir=$(test_tmpdir valgrind)
port=$(free_port)
vgpid=
pmpid=
cleanup() {
    # stop the postmaster; if that fails, kill it by its pid (only while
    # that pid is still our postmaster: its command line names our data dir)
    if [ -z "$pmpid" ] && [ -n "$vgpid" ] && [ -f "$dir/data/postmaster.pid" ]; then
        pmpid=$(head -1 "$dir/data/postmaster.pid")
    fi
    if [ -n "$pmpid" ] && ! as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -m immediate -w -t 120 \
            stop >/dev/null 2>&1; then
        tr '\0' ' ' <"/proc/$pmpid/cmdline" 2>/dev/null | grep -qF -- "$dir/data" &&
            kill -9 "$pmpid" 2>/dev/null || true
    fi
    [ -n "$vgpid" ] && kill -9 "$vgpid" 2>/dev/null || true
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT

supps=(--suppressions="$ESRC_ROOT/test/valgrind/pg15-debian.supp")
pgsupp="$ESRC_CACHE/valgrind.supp"
if [ ! -s "$pgsupp" ]; then
    mkdir -p "$ESRC_CACHE"
    curl -fsS -m 20 -o "$pgsupp.tmp" \
        https://raw.githubusercontent.com/postgres/postgres/REL_15_STABLE/src/tools/valgrind.supp \
        2>/dev/null && mv "$pgsupp.tmp" "$pgsupp" || rm -f "$pgsupp.tmp"
fi
if [ -s "$pgsupp" ]; then
    supps+=(--suppressions="$pgsupp")
    log "using PostgreSQL's suppressions from $pgsupp"
else
    log "PostgreSQL's src/tools/valgrind.supp is not available; using ours only"
fi

as_test_user "$PG_BINDIR/initdb" -D "$dir/data" -A trust -U postgres --no-sync -E UTF8 \
    --locale=C >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log"; die "initdb failed"; }
cat <<CONF | as_test_user tee -a "$dir/data/postgresql.conf" >/dev/null
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
shared_preload_libraries = 'esrc'
max_connections = 30
max_prepared_transactions = 2
max_worker_processes = 8
max_parallel_workers_per_gather = 0
autovacuum = off
log_min_messages = warning
log_line_prefix = '%m [%p] %a '
CONF

log "starting the server under valgrind"
as_test_user valgrind --tool=memcheck --quiet --trace-children=no --track-origins=yes \
    --read-var-info=no --fullpath-after= --num-callers=40 --error-limit=no --gen-suppressions=all \
    "${supps[@]}" --log-file="$dir/vg.%p.log" \
    "$PG_BINDIR/postgres" -D "$dir/data" >"$dir/server.log" 2>&1 &
vgpid=$!
for _ in $(seq 1 240); do
    "$PG_BINDIR/pg_isready" -q -h 127.0.0.1 -p "$port" && break
    sleep 0.5
done
"$PG_BINDIR/pg_isready" -q -h 127.0.0.1 -p "$port" || { tail -30 "$dir/server.log"; die "server did not start"; }
pmpid=$(head -1 "$dir/data/postmaster.pid")

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

as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -m fast -w -t 300 stop >/dev/null || status=1
wait "$vgpid" || true
vgpid=
pmpid=

# the scanner must flag an error with an esrc frame (self-check), then scan
printf '%s\n' '==1== Invalid read of size 4' '==1==    at 0x4A: esrc_append (append.c:10)' \
    '==1==    by 0x4B: ExecInterpExpr (in /usr/lib/postgresql/15/bin/postgres)' '==1== ' \
    >"$dir/selfcheck.log"
if python3 "$ESRC_ROOT/test/valgrind/scan.py" "$dir/selfcheck.log" >/dev/null; then
    die "test/valgrind/scan.py does not flag an error in esrc"
fi
python3 "$ESRC_ROOT/test/valgrind/scan.py" "$dir"/vg.*.log || status=1
grep -E "terminated by signal|PANIC" "$dir/server.log" && status=1
exit $status
