#!/usr/bin/env bash
# The Python client (clients/python, issue 30) against a real server:
#   - the package builds as a wheel from the tree (pip wheel) and installs
#     with pip; the wheel holds py.typed; pytest runs against the
#     installed copy;
#   - pytest (clients/python/tests): the store API (appends, reads, ids,
#     SQLSTATEs, erased streams, encryption), tags, read_query and
#     append_if (two concurrent decisions on one condition: exactly one
#     is stored), DcbCommandHandler (course capacity under 8 threads and
#     unique user names under 6, the log replayed; the last seat decided again; a retry after a lost
#     commit; bounded retries; asyncio), the seed scenario with three
#     threads and three asyncio tasks (versions 1, 2, 3), from the events
#     and from a snapshot table, idempotent command ids, bounded retries,
#     the retry loop of the four command handlers without a database
#     (test_retry.py: attempts, backoff, each handler's give-up message),
#     16 workers whose invariant (no negative balance, every accepted
#     command once) is checked by replaying the log, consumers killed
#     mid-batch (exactly once holds; at-least-once delivers again), a clean
#     stop on SIGTERM mid-poll, a projection that removes what it derived
#     when an erasure's tombstone comes, the asyncio consumer, the CLI,
#     given/when/then, the version agreeing with esrc.control;
#   - mypy --strict on the package and on the examples written on it.
# psycopg, pytest and mypy come from PyPI into a venv cached under
# $ESRC_CACHE (pinned; psycopg as ensure_python_psycopg pins it).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

PY_REQS=("psycopg[binary]==3.3.9" "pytest==9.2.0" "mypy==2.4.1" "setuptools==84.2.1" "wheel==0.48.0")
venv="$ESRC_CACHE/python-client-venv-$(printf '%s ' "${PY_REQS[@]}" "$(python3 -V 2>&1)" | md5sum | cut -c1-10)"
if [ ! -f "$venv/.complete" ]; then
    log "creating $venv (pip: ${PY_REQS[*]})"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${PY_REQS[@]}" >/dev/null
    touch "$venv/.complete"
fi

dir=$(test_tmpdir pyclient)
port=$(free_port)
pip_pid=
cleanup() {
    [ -z "$pip_pid" ] || kill "$pip_pid" 2>/dev/null || true
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
log "building the wheel from the tree and installing it with pip (while the server starts)"
cp -r "$ESRC_ROOT/clients/python" "$dir/client"
rm -rf "$dir/client/build" "$dir/client/src/"*.egg-info
# one pip run: it builds the wheel (setuptools, pyproject.toml) and installs it
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation \
    --target "$dir/site" "$dir/client" >"$dir/pip.log" 2>&1 &
pip_pid=$!
pg_start "$dir" "$port"
dsn="host=127.0.0.1 port=$port user=postgres dbname=postgres"
psql "$dsn" -qAtX -v ON_ERROR_STOP=1 -c "CREATE EXTENSION esrc" >/dev/null
rc=0; wait "$pip_pid" || rc=$?
pip_pid=
[ $rc = 0 ] || { cat "$dir/pip.log"; die "pip install failed"; }
[ -f "$dir/site/esrc/py.typed" ] || die "the installed package has no esrc/py.typed"
wheel=$(ls -d "$dir"/site/esrc-*.dist-info)
grep -qx 'Tag: py3-none-any' "$wheel/WHEEL" || die "pip did not install a py3-none-any wheel: $(cat "$wheel/WHEEL")"
log "installed $(basename "$wheel")"

log "pytest"
( cd "$dir/client" &&
  PYTHONPATH="$dir/site" ESRC_TEST_DSN="$dsn" ESRC_ROOT="$ESRC_ROOT" \
      "$venv/bin/python" -m pytest -q -p no:cacheprovider tests ) || die "pytest failed"
# (from $dir: in the repository's root, "import esrc" would find esrc.so)
( cd "$dir" && PYTHONPATH="$dir/site" "$venv/bin/python" -c \
      'import esrc, sys; sys.exit(0 if esrc.__file__.startswith(sys.argv[1]) else 1)' "$dir/site" ) \
    || die "the installed wheel is not the esrc that imports"

log "mypy --strict"
( cd "$ESRC_ROOT" && MYPYPATH="$ESRC_ROOT/clients/python/src" "$venv/bin/mypy" --strict \
      --cache-dir "$ESRC_CACHE/python-client-mypy" --python-version 3.10 \
      clients/python/src/esrc clients/python/tests examples/python/security_service.py \
      examples/subscriptions/consumer.py ) \
    || die "mypy --strict found errors"
log "ok - the Python client"
