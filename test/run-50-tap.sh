#!/usr/bin/env bash
# TAP tests (test/t/*.pl) with PostgreSQL::Test::Cluster from the PGXS
# installation, run by prove as the unprivileged test user: the crash
# matrix, pg_dump/restore and privileges.  Each test creates its own
# clusters under a temporary directory; on failure the test logs and the
# server logs are printed.  ESRC_TAP=pattern runs only matching tests.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

PGXS_DIR=$(dirname "$("$PG_CONFIG" --pgxs)")/..
dir=$(test_tmpdir tap)
cleanup() {
    # prove's nodes stop themselves; stop any a killed test left behind
    local pidfile
    for pidfile in "$dir"/tmp_check/t_*_data/pgdata/postmaster.pid; do
        [ -f "$pidfile" ] || continue
        as_test_user "$PG_BINDIR/pg_ctl" -D "$(dirname "$pidfile")" -m immediate -w stop \
            >/dev/null 2>&1 || kill -9 "$(head -1 "$pidfile")" 2>/dev/null || true
    done
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT

# prove runs under a child subreaper ($ESRC_REAPER_PY in lib.sh; a shell
# function cannot cross runuser, so the script is passed to python3).
tests=$(ls "$ESRC_ROOT"/test/t/[0-9]*.pl | grep -- "${ESRC_TAP:-}" || true)
[ -n "$tests" ] || die "no TAP test matches '${ESRC_TAP:-}'"
log "prove: $(echo $tests | wc -w) TAP tests"
status=0
(cd "$dir" && as_test_user env \
    PATH="$PG_BINDIR:/usr/bin:/bin" \
    TESTDIR="$dir" \
    PG_REGRESS="$PGXS_DIR/test/regress/pg_regress" \
    PG_TEST_TIMEOUT_DEFAULT="${PG_TEST_TIMEOUT_DEFAULT:-180}" \
    python3 -c "$ESRC_REAPER_PY" prove -I "$PGXS_DIR/test/perl" -I "$ESRC_ROOT/test/t" ${PROVE_FLAGS:-} $tests) || status=1
if [ $status -ne 0 ]; then
    for f in "$dir"/tmp_check/log/*; do
        [ -f "$f" ] || continue
        echo "=== $(basename "$f") (tail)"
        tail -60 "$f"
    done
fi
exit $status
