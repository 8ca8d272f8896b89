#!/usr/bin/env bash
# A property test of the stream rules (docs/lifecycle.md) against a model in
# Python (test/rules/model.py): random appends, rules, soft and hard deletes
# on random streams, and random reads of every read function (read_stream,
# read_stream_backward, read_category, read_all, esrc.poll, snapshot_at),
# each compared with what the model of the rules says.  Three seeds
# (ESRC_RULES_SEEDS to change them).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ensure_python_psycopg

dir=$(test_tmpdir rules-model)
port=$(free_port)
trap 'pg_stop "$dir" immediate; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
pg_start "$dir" "$port"

status=0
for seed in ${ESRC_RULES_SEEDS:-62 1601 7}; do
    PGOPTIONS="-c client_min_messages=warning" psql -qAtX -h 127.0.0.1 -p "$port" -U postgres -d postgres \
        -c "DROP EXTENSION IF EXISTS esrc CASCADE" -c "DROP TABLE IF EXISTS public.model_state" >/dev/null
    python3 "$ESRC_ROOT/test/rules/model.py" "$port" "$seed" "${ESRC_RULES_STEPS:-600}" || status=1
done
exit $status
