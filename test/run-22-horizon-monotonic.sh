#!/usr/bin/env bash
# esrc.safe_position() never goes backwards: while ESRC_HORIZON_CLIENTS
# (default 8) pgbench clients append for ESRC_HORIZON_SECONDS (default 10)
# to streams of their own, each transaction an event to a random category
# of hz0..hz3 and then one to another random one of them, one reader
# session calls safe_position() in a loop and compares every value it sees
# with the highest one before it.  A second reader does the same with a
# new transaction per call (read_all cursors are kept across transactions
# and sessions).  Two more readers follow the per-category horizons of hz0
# and hz1 through read_category(): each call reads from its last event on,
# which must still be there (the category's horizon did not drop below
# it), and at the end every event of its category up to its last one must
# have come by (none hidden by a horizon that was not safe).  Fails on any
# value lower than an earlier one, a missed event, or when the readers saw
# too little to mean anything.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

secs=${ESRC_HORIZON_SECONDS:-10}
clients=${ESRC_HORIZON_CLIENTS:-8}
dir=$(test_tmpdir horizon)
port=$(free_port)
reader_pids=()
cleanup() {
    for p in "${reader_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "max_connections = 40"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
psql -qX -v ON_ERROR_STOP=1 <<'SQL'
CREATE EXTENSION esrc;
-- every value the readers saw that is lower than the highest one before it
CREATE TABLE horizon_drop (reader text, call bigint, value bigint, highest bigint);
CREATE TABLE horizon_run (reader text, calls bigint, highest bigint);
-- the readers: a call per loop, in one transaction (per_call false) or
-- committing after each call (COMMIT inside the procedure)
CREATE PROCEDURE horizon_follow(seconds int, per_call boolean) LANGUAGE plpgsql AS $$
DECLARE
    reader text := CASE WHEN per_call THEN 'transaction per call' ELSE 'one transaction' END;
    highest bigint := 0;
    v bigint;
    n bigint := 0;
    deadline timestamptz := clock_timestamp() + make_interval(secs => seconds);
BEGIN
    WHILE clock_timestamp() < deadline LOOP
        v := esrc.safe_position();
        n := n + 1;
        IF v < highest THEN
            INSERT INTO horizon_drop VALUES (reader, n, v, highest);
        END IF;
        highest := greatest(highest, v);
        IF per_call THEN
            COMMIT;
        END IF;
    END LOOP;
    INSERT INTO horizon_run VALUES (reader, n, highest);
END
$$;
-- the category readers: each call reads read_category(cat) from the last
-- event it returned on (so that event must come back first), a new
-- transaction per call; "seen" counts the events past the last one
CREATE TABLE horizon_seen (reader text, category text, seen bigint, last bigint);
CREATE PROCEDURE horizon_follow_category(seconds int, cat text) LANGUAGE plpgsql AS $$
DECLARE
    reader text := 'category ' || cat;
    last bigint := 0;
    newlast bigint;
    first bigint;
    seen bigint := 0;
    r record;
    n bigint := 0;
    deadline timestamptz := clock_timestamp() + make_interval(secs => seconds);
BEGIN
    WHILE clock_timestamp() < deadline LOOP
        first := NULL;
        newlast := last;
        FOR r IN SELECT position FROM esrc.read_category(cat, greatest(last - 1, 0), 100000) LOOP
            first := coalesce(first, r.position);
            IF r.position > last THEN
                seen := seen + 1;
                newlast := r.position;
            END IF;
        END LOOP;
        n := n + 1;
        IF last > 0 AND first IS DISTINCT FROM last THEN
            INSERT INTO horizon_drop VALUES (reader, n, coalesce(first, 0), last);
        END IF;
        last := newlast;
        COMMIT;
    END LOOP;
    INSERT INTO horizon_run VALUES (reader, n, last);
    INSERT INTO horizon_seen VALUES (reader, cat, seen, last);
END
$$;
SQL

cat >"$dir/append.pgbench" <<'EOF2'
\set a random(0, 3)
\set b random(0, 3)
BEGIN;
SELECT esrc.append('hz' || :a || '-' || :client_id, 'Tick', '{}');
SELECT esrc.append('hz' || :b || '-' || :client_id, 'Tock', '{}');
COMMIT;
EOF2

log "$clients writers, 2 readers of esrc.safe_position(), 2 of read_category(), ${secs}s"
psql -qX -v ON_ERROR_STOP=1 -c "CALL horizon_follow($secs, false)" >"$dir/reader1.log" 2>&1 &
reader_pids+=($!)
psql -qX -v ON_ERROR_STOP=1 -c "CALL horizon_follow($secs, true)" >"$dir/reader2.log" 2>&1 &
reader_pids+=($!)
for c in hz0 hz1; do
    psql -qX -v ON_ERROR_STOP=1 -c "CALL horizon_follow_category($secs, '$c')" >"$dir/reader-$c.log" 2>&1 &
    reader_pids+=($!)
done
"$PG_BINDIR/pgbench" -n -c "$clients" -j 2 -T "$secs" -f "$dir/append.pgbench" \
    >"$dir/pgbench.log" 2>&1 || { cat "$dir/pgbench.log"; die "pgbench failed"; }
grep -E "^number of transactions actually processed" "$dir/pgbench.log" | sed 's/^/  /' >&2
for p in "${reader_pids[@]}"; do
    wait "$p" || { cat "$dir"/reader*.log; die "a reader failed"; }
done
reader_pids=()

psql -qAtX -F ' ' -c "SELECT reader, calls, highest FROM horizon_run ORDER BY reader" \
    | sed 's/^/  calls and highest value: /' >&2
drops=$(psql -qAtX -c "SELECT count(*) FROM horizon_drop")
if [ "$drops" != 0 ]; then
    psql -qX -c "SELECT reader, count(*) AS drops, min(value) AS lowest,
                        (array_agg(format('call %s: %s after %s', call, value, highest) ORDER BY call))[1:3] AS first
                 FROM horizon_drop GROUP BY reader" >&2
    die "a horizon went backwards $drops times"
fi
missed=$(psql -qAtX -c "SELECT string_agg(format('%s saw %s of %s events up to %s', s.reader, s.seen, e.n, s.last), '; ')
                        FROM horizon_seen s,
                             LATERAL (SELECT count(*) AS n FROM esrc.events
                                      WHERE category = s.category AND position <= s.last) e
                        WHERE s.seen <> e.n")
[ -z "$missed" ] || die "a category reader missed events: $missed"
[ "$(psql -qAtX -c "SELECT count(*) FROM horizon_seen")" = 2 ] || die "a category reader did not report"
# the readers must have watched the horizon move while appends were in flight
weak=$(psql -qAtX -c "SELECT count(*) FROM horizon_run WHERE calls < 1000 OR highest < 1000")
[ "$(psql -qAtX -c "SELECT count(*) FROM horizon_run")" = 4 ] || die "a reader did not report"
[ "$weak" = 0 ] || die "the readers saw too little (fewer than 1000 calls or a horizon below 1000)"
log "safe_position() and the category horizons never went backwards; no category reader missed an event"
