#!/usr/bin/env bash
# Snapshots under concurrent load, then through pg_dump and pg_restore.
#
# pgbench clients mix, on one category with three snapshots (SQL, C and
# PL/pgSQL reducers) and another with one: single appends decided against
# esrc.load's version, at READ COMMITTED and REPEATABLE READ (pgbench
# retries 40001 and deadlocks); batches; transactions that append to both
# categories; appends that roll back; events a reducer rejects (caught, so
# the append fails and nothing may land); appends to a category without
# snapshot; and rebuild_snapshot calls in the middle of it all.  Afterwards
# every row of every snapshot must equal snapshot_at(snapshot, stream,
# last version), every stream of the category must have its row, and no
# rolled-back or rejected event may be in the log.
#
# Then the database is dumped and restored into a new one with pg_restore
# -j 4 (so the log, the catalog and the snapshot tables load in no
# particular order): the snapshot tables come back as they were, their
# dependencies are recorded again, and appends keep them current.  Last, a check that the copy of
# examples/security_service.sql embedded in test/specs/security_service.spec
# is the file itself.
#
# ESRC_SNAPSHOT_STRESS_SECONDS (default 20) and ESRC_SNAPSHOT_STRESS_CLIENTS
# (default 8) size the load.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

secs=${ESRC_SNAPSHOT_STRESS_SECONDS:-20}
clients=${ESRC_SNAPSHOT_STRESS_CLIENTS:-8}

# --- the spec's copy of the example is the example --------------------------
spec="$ESRC_ROOT/test/specs/security_service.spec"
sed -n '/^-- BEGIN examples\/security_service.sql$/,/^-- END examples\/security_service.sql$/p' "$spec" \
    | sed '1d;$d' >"${TMPDIR:-/tmp}/esrc-embedded.$$"
if ! diff -u "$ESRC_ROOT/examples/security_service.sql" "${TMPDIR:-/tmp}/esrc-embedded.$$" >&2; then
    rm -f "${TMPDIR:-/tmp}/esrc-embedded.$$"
    die "test/specs/security_service.spec does not embed examples/security_service.sql verbatim"
fi
rm -f "${TMPDIR:-/tmp}/esrc-embedded.$$"
log "security_service.spec embeds examples/security_service.sql verbatim"

dir=$(test_tmpdir snapshot-stress)
port=$(free_port)
trap 'pg_stop "$dir" immediate; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
pg_start "$dir" "$port" "max_connections = 40"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres

psql -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION esrc;
CREATE FUNCTION sum_reducer(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    RETURN jsonb_build_object(
        'sum', coalesce((state->>'sum')::bigint, 0)
               + CASE event.type WHEN 'Withdrawn' THEN -1 ELSE 1 END * (event.data->>'n')::bigint,
        'events', coalesce((state->>'events')::bigint, 0) + 1);
CREATE FUNCTION pl_reducer(state jsonb, event esrc.event) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF event.type = 'Poison' THEN
        RAISE EXCEPTION 'poisoned event for %', event.stream;
    END IF;
    RETURN state || jsonb_build_object('last_type', event.type,
                                       'versions', coalesce(state->'versions', '[]') || to_jsonb(event.version));
END
$$;
SELECT esrc.append('acct-' || g, 'Opened', jsonb_build_object('n', g)) FROM generate_series(1, 100) g;
SELECT esrc.create_snapshot('sums', 'acct', 'sum_reducer(jsonb, esrc.event)');
SELECT esrc.create_snapshot('merged', 'acct', 'esrc.merge(jsonb, esrc.event)', '{"merged": true}');
SELECT esrc.create_snapshot('pl', 'acct', 'pl_reducer(jsonb, esrc.event)');
SELECT esrc.create_snapshot('ord_state', 'ord', 'esrc.merge(jsonb, esrc.event)');
SQL

# --- the load ----------------------------------------------------------------
s="$dir/scripts"
mkdir -p "$s"
cat >"$s/decide_rc" <<'PGB'
\set r random(1, 100)
\if :r <= 40
\set n random(1, 20)
\else
\set n random(21, 2000)
\endif
BEGIN;
SELECT version AS v FROM esrc.load('sums', 'acct-' || :n) \gset
SELECT esrc.append('acct-' || :n, 'Deposited', jsonb_build_object('n', :r), NULL, :v);
COMMIT;
PGB
cat >"$s/decide_rr" <<'PGB'
\set n random(1, 20)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT version AS v FROM esrc.load('pl', 'acct-' || :n) \gset
SELECT esrc.append('acct-' || :n, 'Withdrawn', jsonb_build_object('n', 1), NULL, :v);
COMMIT;
PGB
cat >"$s/batch" <<'PGB'
\set n random(1, 2000)
SELECT esrc.append_batch('acct-' || :n, '[{"type": "Deposited", "data": {"n": 5}}, {"type": "Withdrawn", "data": {"n": 2}}, {"type": "Noted", "data": {"n": 0}}]');
PGB
cat >"$s/two_categories" <<'PGB'
\set a random(1, 20)
\set o random(1, 200)
BEGIN;
SELECT esrc.append('acct-' || :a, 'Deposited', jsonb_build_object('n', 3));
SELECT esrc.append('ord-' || :o, 'Placed', jsonb_build_object('by', :a));
COMMIT;
PGB
cat >"$s/rollback" <<'PGB'
\set n random(1, 20)
BEGIN;
SELECT esrc.append('acct-' || :n, 'RolledBack', jsonb_build_object('n', 1000000));
SELECT esrc.append('ord-' || :n, 'RolledBack', jsonb_build_object('n', 1000000));
ROLLBACK;
PGB
cat >"$s/poison" <<'PGB'
DO $$
BEGIN
    PERFORM esrc.append('acct-' || (1 + (random() * 19)::int), 'Poison', '{"n": 1000000}');
    RAISE EXCEPTION 'a poisoned event was appended';
EXCEPTION WHEN raise_exception THEN
    IF SQLERRM NOT LIKE 'poisoned event for %' THEN RAISE; END IF;
END
$$;
PGB
cat >"$s/free" <<'PGB'
\set n random(1, 500)
SELECT esrc.append('free-' || :n, 'Noted', '{}');
PGB
cat >"$s/rebuild" <<'PGB'
\set r random(1, 4)
SELECT esrc.rebuild_snapshot(CASE :r WHEN 1 THEN 'sums' WHEN 2 THEN 'merged' WHEN 3 THEN 'pl' ELSE 'ord_state' END);
PGB

log "pgbench: $clients clients, ${secs}s, appends of every kind with snapshots and rebuilds"
"$PG_BINDIR/pgbench" -n -c "$clients" -j 2 -T "$secs" --max-tries=1000 \
    -f "$s/decide_rc@30" -f "$s/decide_rr@10" -f "$s/batch@15" -f "$s/two_categories@15" \
    -f "$s/rollback@10" -f "$s/poison@5" -f "$s/free@14" -f "$s/rebuild@1" \
    >"$dir/pgbench.log" 2>&1 || { cat "$dir/pgbench.log"; die "pgbench failed"; }
grep -E "processed|failed|retried|tps|^SQL script|^ - number of transactions" "$dir/pgbench.log" | sed 's/^/  /' >&2
failed=$(awk '/^number of failed transactions:/{print $5; exit}' "$dir/pgbench.log")
[ "${failed:-x}" = 0 ] || die "${failed:-unknown number of} transactions failed even after retries"

# --- the checks ----------------------------------------------------------------
# check_snapshots DB: one line per snapshot, "name streams rows equal_to_replay"
check_snapshots() {
    psql -qAtX -F' ' -v ON_ERROR_STOP=1 -d "$1" <<'SQL'
CREATE FUNCTION pg_temp.snapcheck(snap regclass, cat text, OUT streams bigint, OUT rows bigint, OUT good bigint)
    LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SELECT (SELECT count(*) FROM esrc.streams WHERE category = %L),
                           (SELECT count(*) FROM %s),
                           (SELECT count(*) FROM %s t JOIN esrc.streams s ON s.stream = t.stream
                            WHERE s.category = %L AND t.version = s.version
                              AND t.state = esrc.snapshot_at(%L, t.stream, t.version))',
                   cat, snap, snap, cat, snap::text)
        INTO streams, rows, good;
END
$$;
SELECT s.snapshot::text, c.streams, c.rows, c.good
FROM esrc.snapshots s, pg_temp.snapcheck(s.snapshot, s.category) c
ORDER BY 1;
SQL
}
check_snapshots postgres >"$dir/check.out"
sed 's/^/  /' "$dir/check.out" >&2
[ "$(wc -l <"$dir/check.out")" -eq 4 ] || die "expected 4 snapshots, got $(wc -l <"$dir/check.out")"
bad=$(awk '!($2 == $3 && $3 == $4 && $2 > 100)' "$dir/check.out")
[ -z "$bad" ] || die "snapshot rows differ from a replay of their streams: $bad"
leaked=$(psql -qAtX -c "SELECT count(*) FROM esrc.events WHERE type IN ('RolledBack', 'Poison')")
[ "$leaked" = 0 ] || die "$leaked rolled-back or rejected events are in the log"
log "every snapshot row equals a replay of its stream; no rolled-back or rejected event landed"

# --- pg_dump and pg_restore ------------------------------------------------------
fingerprint() {   # DB: one line per snapshot table, its rows hashed
    psql -qAtX -v ON_ERROR_STOP=1 -d "$1" -c "
        SELECT string_agg(x, ' ' ORDER BY x) FROM (
            SELECT 'sums:' || md5(string_agg(stream || version || state::text, ',' ORDER BY stream)) FROM sums
            UNION ALL SELECT 'merged:' || md5(string_agg(stream || version || state::text, ',' ORDER BY stream)) FROM merged
            UNION ALL SELECT 'pl:' || md5(string_agg(stream || version || state::text, ',' ORDER BY stream)) FROM pl
            UNION ALL SELECT 'ord_state:' || md5(string_agg(stream || version || state::text, ',' ORDER BY stream)) FROM ord_state) f(x)"
}
"$PG_BINDIR/pg_dump" -Fc -f "$dir/dump" postgres
psql -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE restored"
"$PG_BINDIR/pg_restore" --exit-on-error -j 4 -d restored "$dir/dump" 2>"$dir/restore.log" \
    || { cat "$dir/restore.log"; die "pg_restore failed"; }
[ "$(fingerprint postgres)" = "$(fingerprint restored)" ] || die "the restored snapshot tables differ"
deps=$(psql -qAtX -d restored -c "
    SELECT count(*) FROM esrc.snapshots s JOIN pg_depend d
      ON d.classid = 'pg_class'::regclass AND d.objid = s.snapshot
     AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'a'")
[ "$deps" = 4 ] || die "restored snapshot tables depend on the extension: $deps of 4"
psql -qX -v ON_ERROR_STOP=1 -d restored >/dev/null <<'SQL'
SELECT esrc.append('acct-1', 'Deposited', '{"n": 7}');
SELECT esrc.append('ord-new', 'Placed', '{"by": 0}');
SQL
check_snapshots restored >"$dir/check-restored.out"
bad=$(awk '!($2 == $3 && $3 == $4)' "$dir/check-restored.out")
[ -z "$bad" ] || die "after restore and appends, snapshot rows differ from a replay: $bad"
psql -qX -v ON_ERROR_STOP=1 -d restored -c "DROP EXTENSION esrc CASCADE" >/dev/null 2>&1
left=$(psql -qAtX -d restored -c "SELECT count(*) FROM pg_class WHERE relname IN ('sums', 'merged', 'pl', 'ord_state')")
[ "$left" = 0 ] || die "DROP EXTENSION in the restored database left $left snapshot tables"
log "dump and restore: snapshot tables equal, dependencies recorded again, appends keep them current"
