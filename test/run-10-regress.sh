#!/usr/bin/env bash
# pg_regress (sql/*.sql against expected/*.out) and pg_isolation_regress
# (test/specs/*.spec against test/expected/*.out), both against one
# throwaway cluster started with shared_preload_libraries = 'esrc'.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

PGXS_DIR=$(dirname "$("$PG_CONFIG" --pgxs)")/..
dir=$(test_tmpdir regress)
port=$(free_port)
trap 'pg_stop "$dir" immediate; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
pg_start "$dir" "$port"

status=0
tests=$(cd "$ESRC_ROOT/sql" && ls *.sql | sed 's/\.sql$//' | sort)
log "pg_regress: $(echo $tests | wc -w) files"
as_test_user "$PGXS_DIR/test/regress/pg_regress" \
    --inputdir="$ESRC_ROOT" --outputdir="$dir/regress" \
    --bindir="$PG_BINDIR" --host=127.0.0.1 --port="$port" --user=postgres \
    --dbname=esrc_regression $tests || status=1
[ $status -eq 0 ] || cat "$dir/regress/regression.diffs" 2>/dev/null | head -200

specs=$(cd "$ESRC_ROOT/test/specs" && ls *.spec 2>/dev/null | sed 's/\.spec$//' | sort)
if [ -n "$specs" ]; then
    log "pg_isolation_regress: $(echo $specs | wc -w) specs"
    as_test_user "$PGXS_DIR/test/isolation/pg_isolation_regress" \
        --inputdir="$ESRC_ROOT/test" --outputdir="$dir/isolation" \
        --bindir="$PG_BINDIR" --host=127.0.0.1 --port="$port" --user=postgres \
        --dbname=esrc_isolation $specs || { status=1; cat "$dir/isolation/regression.diffs" 2>/dev/null | head -200; }
fi
exit $status
