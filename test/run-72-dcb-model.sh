#!/usr/bin/env bash
# Dynamic consistency boundaries (docs/dcb.md) under concurrency: the model
# test of test/dcb/model.py -- 16 clients enrol random students into random
# courses and change capacities with esrc.read_query + esrc.append_if,
# retrying on 40001, for ESRC_DCB_SECONDS (15); then no course is over its
# capacity, no student over the limit or twice in a course, every
# acknowledged enrolment is in the log and nothing else, checked on the
# final state and by replaying the log (esrc.read_all) at every event.
# Then the example of examples/dcb/ (run.sql).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ensure_python_psycopg

dir=$(test_tmpdir dcb-model)
port=$(free_port)
trap 'pg_stop "$dir" immediate; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
pg_start "$dir" "$port"

q() { PGOPTIONS="-c client_min_messages=warning" psql -qAtX -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres "$@"; }
q -d postgres -c "CREATE EXTENSION esrc" >/dev/null

status=0
python3 "$ESRC_ROOT/test/dcb/model.py" "$port" "${ESRC_DCB_SECONDS:-15}" "${ESRC_DCB_CLIENTS:-16}" \
    "${ESRC_DCB_SEED:-72}" || status=1

# the example, in a database of its own
q -d postgres -c "CREATE DATABASE dcb_example" >/dev/null
if q -d dcb_example <"$ESRC_ROOT/examples/dcb/run.sql" >"$dir/example.out" 2>&1 \
        && diff -u "$ESRC_ROOT/examples/dcb/expected.out" "$dir/example.out"; then
    echo "examples/dcb: output as expected"
else
    echo "examples/dcb: FAILED"; cat "$dir/example.out" | tail -20
    status=1
fi
exit $status
