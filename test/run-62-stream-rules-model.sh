#!/usr/bin/env bash
# A property test of the stream rules (docs/lifecycle.md) against a model in
# Python (test/rules/model.py): random appends, rules, soft and hard deletes
# on random streams, and random reads of every read function (read_stream,
# read_stream_backward, read_category, read_all, esrc.poll, snapshot_at),
# each compared with what the model of the rules says.  Three seeds
# (ESRC_RULES_SEEDS to change them).
#
# Then the bounds that readers keep between reads (src/log/rulebound.c) under
# concurrency: 4 pgbench clients append to 20 streams with max_count = 2
# while 3 others read them (read_stream, read_category) for
# ESRC_RULES_STRESS_SECONDS (10) and check each read: a stream shows
# exactly 2 contiguous versions, a category read at most 2 per stream.  A
# bound kept past an append would show more; a failed check aborts the
# reader, and the phase fails unless every reader ran to the end.
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

q() { PGOPTIONS="-c client_min_messages=warning" psql -qAtX -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres "$@"; }
q -c "DROP EXTENSION IF EXISTS esrc CASCADE" -c "CREATE EXTENSION esrc" >/dev/null
q -c "SELECT count(*) FROM (SELECT esrc.append('kept-' || s, 'E', '{}')
      FROM generate_series(1, 3) g, generate_series(1, 20) s) a" >/dev/null
q -c "SELECT count(*) FROM (SELECT esrc.set_stream_rules('kept-' || s, max_count => 2, reason => 'test')
      FROM generate_series(1, 20) s) a" >/dev/null
q -c "CREATE OR REPLACE FUNCTION public.check_read(ok boolean, what text) RETURNS boolean LANGUAGE plpgsql AS
      \$\$BEGIN IF NOT ok THEN RAISE EXCEPTION 'wrong read: %', what; END IF; RETURN true; END\$\$"
cat >"$dir/append.sql" <<'SQL'
\set s random(1, 20)
SELECT esrc.append('kept-' || :s, 'E', '{}');
SQL
cat >"$dir/read.sql" <<'SQL'
\set s random(1, 20)
SELECT public.check_read(count(*) = 2 AND max(version) - min(version) = 1,
                         'read_stream ' || string_agg(version::text, ','))
FROM esrc.read_stream('kept-' || :s);
SELECT public.check_read(coalesce(max(n), 0) <= 2, 'read_category')
FROM (SELECT count(*) AS n FROM esrc.read_category('kept', 0, 10000) GROUP BY stream) c;
SQL
secs=${ESRC_RULES_STRESS_SECONDS:-10}
as_test_user "$PG_BINDIR/pgbench" -n -h 127.0.0.1 -U postgres -p "$port" -c 4 -j 2 -T "$secs" \
    -f "$dir/append.sql" postgres >"$dir/append.out" 2>&1 &
appenders=$!
as_test_user "$PG_BINDIR/pgbench" -n -h 127.0.0.1 -U postgres -p "$port" -c 3 -j 1 -T "$secs" \
    -f "$dir/read.sql" postgres >"$dir/read.out" 2>&1 || true
wait "$appenders" || true
appends=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$dir/append.out")
reads=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$dir/read.out")
if grep -q "aborted\|wrong read" "$dir/read.out" "$dir/append.out" || [ -z "$reads" ] || [ -z "$appends" ] \
        || [ "$reads" -eq 0 ] || [ "$appends" -eq 0 ]; then
    echo "kept bounds under concurrent appends: FAILED"
    grep -h "error\|ERROR\|processed" "$dir/read.out" "$dir/append.out" | head -10
    status=1
else
    echo "kept bounds under concurrent appends: $reads checked reads, $appends appends, 0 wrong"
fi
exit $status
