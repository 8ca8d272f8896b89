#!/usr/bin/env bash
# Read-your-writes (issue 31): esrc.wait_for_projection under load, its
# blocked and paused outcomes, and the narrowed retries of blocked
# partitions (src/projection/projwait.c, src/subscription/subprogress.c,
# src/projection/projretry.c).  esrc.projection_workers = 2,
# esrc.projection_max_attempts = 2, retry delays of 50-100 ms.
#   load: 8 pgbench writers append to categories "order" (the projection's)
#     and "noise" (not its) for 8 s, while 4 pgbench waiters each append to
#     an order stream, commit, wait for esrc.last_position() with a random
#     timeout of 0-300 ms, and check the read-model row: an 'applied' wait
#     must see it (none early); then the same for a random position of the
#     log (its event, if of category order, reflected in the row of its
#     stream).  No wait returns later than its timeout + 2 s of slack on a
#     shared machine; some waits are 'applied', and every result is
#     'applied' or 'timeout'.
#   blocked: a poison event blocks a partition of projections A and B; a
#     wait for it (timeout 30 s) ends with 55000 naming the partition and
#     the handler's error, woken by the worker's failure, not the timeout.
#   paused during a wait: the handler of projection "gate" waits on an
#     advisory lock this script holds; a wait in progress (30 s) ends with
#     55000 "is paused" when another session pauses the projection.
#   narrowed retries: CREATE OR REPLACE of an unrelated function and of A's
#     handler: A's blocked partition tries once more (attempts + 1), B's
#     stays as it was (before 0.3.0 every change of any function retried
#     both), checked after B applied an event appended later (so the round
#     that would have retried B has run).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

dir=$(test_tmpdir projwait)
port=$(free_port)
holder=
waiter=
cleanup() {
    [ -n "$holder" ] && kill "$holder" 2>/dev/null || true
    [ -n "$waiter" ] && kill "$waiter" 2>/dev/null || true
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "esrc.projection_workers = 2" "esrc.projection_max_attempts = 2" \
    "esrc.projection_retry_delay = '50ms'" "esrc.projection_retry_max_delay = '100ms'" \
    "max_connections = 40"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
fails=0
check() {   # check DESCRIPTION SQL-returning-boolean
    local got
    got=$(q -c "SELECT ($2)")
    if [ "$got" = t ]; then log "ok: $1"; else log "FAIL: $1 (got '$got')"; fails=$((fails + 1)); fi
}
# poll SQL until it returns t, at most 20 s; false if it never did
until_true() {
    local i
    for i in $(seq 1 200); do
        [ "$(q -c "SELECT ($1)")" = t ] && return 0
        sleep 0.1
    done
    return 1
}

q >/dev/null <<'SQL'
CREATE EXTENSION esrc;
CREATE SCHEMA pw;
CREATE TABLE pw.rm (stream text PRIMARY KEY, version bigint NOT NULL, pos bigint NOT NULL);
CREATE FUNCTION pw.apply(e esrc.event) RETURNS void LANGUAGE sql AS $$
    INSERT INTO pw.rm VALUES (e.stream, e.version, e.position)
    ON CONFLICT (stream) DO UPDATE SET version = excluded.version, pos = excluded.pos
$$;
SELECT esrc.create_projection('orders', 'pw.apply(esrc.event)', ARRAY['order'], partitions => 4) IS NOT NULL AS created;
CREATE TABLE pw.results (kind text, pos bigint, timeout_ms int, result text, visible boolean, waited_ms float8);
CREATE PROCEDURE pw.waiter(s int, timeout_ms int) LANGUAGE plpgsql AS $$
DECLARE
    p bigint; r text; t0 timestamptz; ok boolean;
    tmo interval := make_interval(secs => timeout_ms / 1000.0);
BEGIN
    PERFORM esrc.append('order-' || s, 'Waited', '{}');
    COMMIT;
    p := esrc.last_position();
    t0 := clock_timestamp();
    r := esrc.wait_for_projection('orders', p, tmo);
    SELECT coalesce(bool_or(m.pos >= p), false) INTO ok FROM pw.rm m WHERE m.stream = 'order-' || s;
    INSERT INTO pw.results VALUES ('own', p, timeout_ms, r, ok,
                                   extract(epoch FROM clock_timestamp() - t0) * 1000);
    COMMIT;
    -- a random position of the log (maybe of category noise, maybe rolled back)
    p := 1 + floor(random() * p)::bigint;
    t0 := clock_timestamp();
    r := esrc.wait_for_projection('orders', p, tmo);
    SELECT CASE WHEN e.category <> 'order' THEN true
                ELSE coalesce((SELECT m.pos >= p FROM pw.rm m WHERE m.stream = e.stream), false) END
      INTO ok FROM esrc.events e WHERE e.position = p;
    INSERT INTO pw.results VALUES ('random', p, timeout_ms, r, coalesce(ok, true),
                                   extract(epoch FROM clock_timestamp() - t0) * 1000);
    COMMIT;
END
$$;
SQL

# --- load: 8 writers, 4 waiters ---------------------------------------
cat >"$dir/writer.sql" <<'EOF'
\set s random(1, 400)
\set c random(0, 1)
SELECT esrc.append(CASE WHEN :c = 0 THEN 'order-' ELSE 'noise-' END || :s, 'Appended', '{}');
EOF
cat >"$dir/waiter.sql" <<'EOF'
\set s random(1, 400)
\set t random(0, 300)
CALL pw.waiter(:s, :t);
EOF
log "load: 8 writers and 4 waiters for 8 s"
"$PG_BINDIR/pgbench" -n -c 8 -j 2 -T 8 -f "$dir/writer.sql" >"$dir/writers.log" 2>&1 &
wpid=$!
"$PG_BINDIR/pgbench" -n -c 4 -j 2 -T 8 -f "$dir/waiter.sql" >"$dir/waiters.log" 2>&1 \
    || { cat "$dir/waiters.log"; die "waiters failed"; }
wait $wpid || { cat "$dir/writers.log"; die "writers failed"; }
q -c "SELECT kind, result, count(*), round(percentile_cont(0.5) WITHIN GROUP (ORDER BY waited_ms)::numeric, 2) AS p50_ms,
             round(max(waited_ms)::numeric, 1) AS max_ms
      FROM pw.results GROUP BY 1, 2 ORDER BY 1, 2" | sed 's/^/    /' >&2
check "waits ran (more than 100)" "(SELECT count(*) > 100 FROM pw.results)"
check "some own waits applied" "(SELECT count(*) > 0 FROM pw.results WHERE kind = 'own' AND result = 'applied')"
check "every result is applied or timeout" "(SELECT bool_and(result IN ('applied', 'timeout')) FROM pw.results)"
check "no wait applied early: its row is visible when it returns" \
    "(SELECT count(*) = 0 FROM pw.results WHERE result = 'applied' AND NOT visible)"
check "no wait returned later than its timeout + 2 s" \
    "(SELECT count(*) = 0 FROM pw.results WHERE waited_ms > timeout_ms + 2000)"

# --- blocked ----------------------------------------------------------
q >/dev/null <<'SQL'
CREATE FUNCTION pw.ha(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF e.data ? 'poison' THEN RAISE EXCEPTION 'poisoned event %', e.position; END IF;
END $$;
CREATE FUNCTION pw.hb(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF e.data ? 'poison' THEN RAISE EXCEPTION 'poisoned event %', e.position; END IF;
END $$;
CREATE FUNCTION pw.unrelated() RETURNS int LANGUAGE sql AS 'SELECT 1';
SELECT esrc.create_projection('a', 'pw.ha(esrc.event)', ARRAY['acct'], partitions => 2) IS NOT NULL AS created;
SELECT esrc.create_projection('b', 'pw.hb(esrc.event)', ARRAY['acct'], partitions => 2) IS NOT NULL AS created;
SQL
poison=$(q -c "SELECT esrc.append('acct-p', 'Bad', '{\"poison\": true}')" -c "SELECT esrc.last_position()" | tail -1)
ppart=$(q -c "SELECT esrc.stream_partition('acct-p', 2)")
out=$(q -c "SELECT esrc.wait_for_projection('a', $poison, '30s')" 2>&1 || true)
log "wait for the poison event: $out"
case "$out" in
    *"projection \"a\" is blocked at position $poison in partition $ppart"*"poisoned event $poison"*) log "ok: blocked wait ends with the partition and its error" ;;
    *) log "FAIL: blocked wait: $out"; fails=$((fails + 1)) ;;
esac
until_true "(SELECT count(*) = 2 FROM esrc.projection_partitions WHERE blocked)" \
    || { log "FAIL: a and b did not both block"; fails=$((fails + 1)); }

# --- narrowed retries -------------------------------------------------
b_before=$(q -c "SELECT attempts FROM esrc.projection_partitions p JOIN esrc.projections x ON x.id = p.projection_id WHERE x.name = 'b' AND p.blocked")
q -c "CREATE OR REPLACE FUNCTION pw.unrelated() RETURNS int LANGUAGE sql AS 'SELECT 2'"
q -c "CREATE OR REPLACE FUNCTION pw.ha(e esrc.event) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    IF e.data ? 'poison' THEN RAISE EXCEPTION 'still poisoned event %', e.position; END IF;
END \$\$"
until_true "(SELECT p.last_error LIKE 'still poisoned%' FROM esrc.projection_partitions p JOIN esrc.projections x ON x.id = p.projection_id WHERE x.name = 'a' AND p.failed_position IS NOT NULL)" \
    && log "ok: changing a's handler retried a's blocked partition" \
    || { log "FAIL: a's blocked partition was not retried after its handler changed"; fails=$((fails + 1)); }
# an event of b's other partition, applied by b after that retry round
other=$(q -c "SELECT s FROM (SELECT 'acct-o' || i AS s FROM generate_series(1, 50) i) x WHERE esrc.stream_partition(s, 2) <> $ppart LIMIT 1")
opos=$(q -c "SELECT esrc.append('$other', 'Fine', '{}')" -c "SELECT esrc.last_position()" | tail -1)
until_true "(SELECT c.checkpoint >= $opos FROM esrc.subscription_checkpoints c JOIN esrc.projections x ON x.subscription_id = c.subscription_id WHERE x.name = 'b' AND c.partition <> $ppart)" \
    || { log "FAIL: b did not apply $other"; fails=$((fails + 1)); }
check "b's blocked partition was not retried (attempts $b_before), neither by the unrelated function nor by a's handler" \
    "(SELECT p.attempts = $b_before AND p.blocked AND p.last_error NOT LIKE 'still%' FROM esrc.projection_partitions p JOIN esrc.projections x ON x.id = p.projection_id WHERE x.name = 'b' AND p.failed_position IS NOT NULL)"

# --- paused while a wait is in progress ---------------------------------
q >/dev/null <<'SQL'
CREATE FUNCTION pw.gated(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(4242);
END $$;
SELECT esrc.create_projection('gate', 'pw.gated(esrc.event)', ARRAY['gate']) IS NOT NULL AS created;
SQL
PGAPPNAME=pw_holder psql -qAtX -c "SELECT pg_advisory_lock(4242)" -c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
holder=$!
until_true "(SELECT count(*) = 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND granted)" \
    || die "the advisory lock was not taken"
gpos=$(q -c "SELECT esrc.append('gate-1', 'G', '{}')" -c "SELECT esrc.last_position()" | tail -1)
(q -c "SELECT esrc.wait_for_projection('gate', $gpos, '30s')" >"$dir/gate.out" 2>&1; echo "rc=$?" >>"$dir/gate.out") &
waiter=$!
until_true "(SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%wait_for_projection(''gate''%' AND wait_event = 'Extension')" \
    || { log "FAIL: the waiter never waited"; fails=$((fails + 1)); }
check "the gate projection has not applied its event" \
    "(SELECT esrc.wait_for_projection('gate', $gpos, '0s') = 'timeout')"
q -c "SELECT esrc.projection_pause('gate')" >/dev/null
for i in $(seq 1 100); do kill -0 "$waiter" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$waiter" 2>/dev/null; then
    log "FAIL: the pause did not end the wait in progress"; fails=$((fails + 1))
else
    out=$(cat "$dir/gate.out")
    log "wait during the pause: $out"
    case "$out" in
        *'projection "gate" is paused'*) log "ok: a pause ends a wait in progress with 55000" ;;
        *) log "FAIL: paused wait: $out"; fails=$((fails + 1)) ;;
    esac
fi
waiter=
# end the lock holder's session (its backend would sleep on without its client)
q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pw_holder'" >/dev/null
wait "$holder" 2>/dev/null || true
holder=
q -c "SELECT esrc.projection_resume('gate')" >/dev/null
check "resumed, the gate projection applies the event" \
    "(SELECT esrc.wait_for_projection('gate', $gpos, '30s') = 'applied')"

[ $fails -eq 0 ] || die "$fails check(s) failed"
log "run-76-projection-wait: all checks passed"
