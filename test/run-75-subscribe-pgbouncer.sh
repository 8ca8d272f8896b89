#!/usr/bin/env bash
# Subscriptions through PgBouncer in transaction pooling mode (Debian's
# pgbouncer, started by test/pgbouncer.sh on loopback, pool of 2 server
# connections, reused round-robin), against a real server with
# esrc.subscription_lease = 2s:
#   1. pooling is real: three clients share two server connections, and
#      one client's poll and ack run on different server connections;
#   2. a poll with wait, seen waiting in the server, is woken by a commit
#      from another connection: it returns that event, before its wait
#      would have ended; the ack through the pool moves the checkpoint;
#   3. two members rebalance 4 partitions (after the second member's
#      polls each holds 2, each gets only its partitions' streams); a
#      member that stops loses its partitions after its lease, not before,
#      and the other takes them from their checkpoints (what the stopped
#      member acked is not delivered again, what it did not ack is);
#   4. examples/subscriptions/consumer.py (two members, one stopped with
#      SIGTERM mid-load and a third started) against 8 pgbench writers:
#      the results table equals the log (every event exactly once), in
#      per-stream order, and every consumer exits 0 on SIGTERM;
#   5. the same consumer with --at-least-once (one autocommit poll with ack
#      per batch) under more load, killed with kill -9 and restarted, then
#      stopped with SIGTERM and restarted: every event of the log is in
#      its results at least once, and it exits 0 on SIGTERM.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/pgbouncer.sh"

ensure_python_psycopg
pgb_ensure
dir=$(test_tmpdir subscribe-pgbouncer)
port=$(free_port)
consumers=()
cleanup() {
    local p
    for p in "${consumers[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${consumers[@]}"; do wait "$p" 2>/dev/null || true; done
    pgb_stop
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "esrc.subscription_lease = '2s'" "max_connections = 40"
# direct: straight to the server; pooled: through pgbouncer
direct() { psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"; }
pooled() { psql -h 127.0.0.1 -p "$PGB_PORT" -U postgres -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"; }
direct -c "CREATE EXTENSION esrc"
pgb_start "$dir/pgb" "$port" 2
POOLED_DSN="host=127.0.0.1 port=$PGB_PORT user=postgres dbname=postgres"
status=0
check() { # NAME CONDITION-SQL: log ok/FAIL by the server's verdict
    if [ "$(direct -c "SELECT ($2)")" = t ]; then log "ok - $1"; else log "FAIL - $1"; status=1; fi
}
poll_count() { pooled -c "SELECT count(*) FROM esrc.poll('$1', '$2', 1000)"; }

# --- 1. pooling -----------------------------------------------------------
pids=()
for i in 1 2 3; do pooled -c "SELECT pg_backend_pid() FROM pg_sleep(0.5)" >"$dir/pid.$i" & pids+=($!); done
wait "${pids[@]}"
n=$(sort -u "$dir"/pid.? | wc -l)
[ "$n" -le 2 ] || die "3 clients got $n server connections through a pool of 2: not pooled"
log "ok - 3 concurrent clients ran on $n server connections"

direct -c "SELECT esrc.create_subscription('w', ARRAY['w'], 1, 'end')" >/dev/null
direct -c "SELECT esrc.append('w-0', 'First', '{}')" >/dev/null
pooled >"$dir/pids" <<'SQL'
SELECT pg_backend_pid(), (SELECT count(*) FROM esrc.poll('w', 'a'));
SELECT pg_backend_pid(), esrc.ack('w', 'a');
SQL
IFS='|' read -r p_poll polled <"$dir/pids"
IFS='|' read -r p_ack acked < <(tail -1 "$dir/pids")
[ "$p_poll" != "$p_ack" ] || die "poll and ack ran on the same server connection ($p_poll): the test proves nothing"
if [ "$polled" = 1 ] && [ "$acked" = 1 ]; then
    log "ok - poll on server pid $p_poll, ack on $p_ack: the member's state is not in the session"
else
    log "FAIL - poll on one server connection returned $polled events, the ack on another moved $acked partitions"
    status=1
fi

# --- 2. poll with wait, woken by a commit -----------------------------------
wait_s=30
t0=$(date +%s%N)
pooled -c "SELECT position, stream FROM esrc.poll('w', 'a', 10, '$wait_s s')" >"$dir/woken" &
poller=$!
for ((i = 0; i < 200; i++)); do
    [ "$(direct -c "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query LIKE '%esrc.poll(''w''%'
                    AND state = 'active' AND wait_event_type = 'Extension'")" = 1 ] && break
    sleep 0.05
done
[ $i -lt 200 ] || die "the poll through pgbouncer was never seen waiting"
sleep 0.3
direct -c "SELECT esrc.append('w-1', 'Woke', '{}')" >/dev/null
pos=$(direct -c "SELECT max(position) FROM esrc.events")
wait "$poller"
elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
if [ "$(cat "$dir/woken")" = "$pos|w-1" ]; then log "ok - the waiting poll returned the event committed by another connection"
else log "FAIL - the waiting poll returned '$(cat "$dir/woken")', not '$pos|w-1'"; status=1; fi
if [ "$elapsed_ms" -lt $((wait_s * 1000)) ]; then log "ok - it returned in $elapsed_ms ms, before its wait of ${wait_s}s"
else log "FAIL - it returned after $elapsed_ms ms: the wait of ${wait_s}s ran out"; status=1; fi
[ "$(pooled -c "SELECT esrc.ack('w', 'a')")" = 1 ] || { log "FAIL - ack through the pool"; status=1; }
check "the ack through the pool moved the checkpoint to $pos" \
    "(SELECT checkpoint FROM esrc.subscription_checkpoints c JOIN esrc.subscriptions s ON s.id = c.subscription_id
      WHERE s.name = 'w') = $pos"

# --- 3. rebalancing ----------------------------------------------------------
direct -c "SELECT esrc.create_subscription('g', ARRAY['g'], 4)" >/dev/null
direct -c "SELECT count(esrc.append('g-' || i, 'E', '{}')) FROM generate_series(1, 40) i" >/dev/null
held() { direct -c "SELECT coalesce(string_agg(partition::text, ',' ORDER BY partition), '')
                    FROM esrc.subscription_status WHERE subscription = 'g' AND member = '$1'"; }
n=$(poll_count g a)
[ "$(held a)" = "0,1,2,3" ] || die "the only member a holds '$(held a)', not all 4 partitions"
pooled -c "SELECT esrc.ack('g', 'a')" >/dev/null
log "a alone: got $n events, holds $(held a)"
# b comes: a releases its highest at its next poll, b takes them at its next
poll_count g b >/dev/null
poll_count g a >/dev/null
poll_count g b >/dev/null
log "after b's polls: a holds $(held a), b holds $(held b)"
if [ "$(held a)" = "0,1" ] && [ "$(held b)" = "2,3" ]; then log "ok - two members hold two partitions each"
else log "FAIL - partitions not spread: a '$(held a)', b '$(held b)'"; status=1; fi

# new events in every partition; each member gets only its partitions' streams
direct -c "SELECT count(esrc.append('g-' || i, 'E', '{}')) FROM generate_series(1, 40) i" >/dev/null
pooled -c "SELECT stream FROM esrc.poll('g', 'a', 1000)" >"$dir/a.streams"
pooled -c "SELECT esrc.ack('g', 'a')" >/dev/null
pooled -c "SELECT stream FROM esrc.poll('g', 'b', 1000)" >"$dir/b.acked"
pooled -c "SELECT esrc.ack('g', 'b')" >/dev/null
check "a got the events of partitions 0 and 1, b of 2 and 3, 40 in all" \
    "(SELECT bool_and(esrc.stream_partition(s, 4) IN (0, 1)) FROM unnest(string_to_array(trim('$(paste -sd' ' "$dir/a.streams")'), ' ')) s)
     AND (SELECT bool_and(esrc.stream_partition(s, 4) IN (2, 3)) FROM unnest(string_to_array(trim('$(paste -sd' ' "$dir/b.acked")'), ' ')) s)
     AND $(wc -l <"$dir/a.streams") + $(wc -l <"$dir/b.acked") = 40"
# b polls once more without acking, then stops
lo3=$(direct -c "SELECT max(position) FROM esrc.events")
direct -c "SELECT count(esrc.append('g-' || i, 'E', '{}')) FROM generate_series(1, 40) i" >/dev/null
pooled -c "SELECT position FROM esrc.poll('g', 'b', 1000)" >"$dir/b.unacked"
b_expiry=$(direct -c "SELECT max(lease_expires_at) FROM esrc.subscription_status WHERE subscription = 'g' AND member = 'b'")
log "b stops holding $(held b) after polling $(wc -l <"$dir/b.unacked") events it does not ack (lease until $b_expiry)"
# a keeps polling and acking until it holds b's partitions; the status is
# read between the poll and the ack (an ack renews the leases too)
: >"$dir/a.after"
took=
for ((i = 0; i < 100; i++)); do
    pooled -c "SELECT position FROM esrc.poll('g', 'a', 1000, '200 ms')" >>"$dir/a.after"
    if [ "$(held a)" = "0,1,2,3" ]; then
        # the lease a's taking poll started, minus the lease time: when it took them
        took=$(direct -c "SELECT min(lease_expires_at) - current_setting('esrc.subscription_lease')::interval
                          FROM esrc.subscription_status WHERE subscription = 'g' AND partition IN (2, 3)")
    fi
    pooled -c "SELECT esrc.ack('g', 'a')" >/dev/null
    [ -z "$took" ] || break
done
[ -n "$took" ] || die "a never took b's partitions: a '$(held a)', b '$(held b)'"
check "a took b's partitions after b's lease ran out ($took >= $b_expiry), not before" \
    "'$took'::timestamptz >= '$b_expiry'::timestamptz"
# and got what b polled but did not ack, from b's checkpoints
pooled -c "SELECT position FROM esrc.poll('g', 'a', 1000)" >>"$dir/a.after"
pooled -c "SELECT esrc.ack('g', 'a')" >/dev/null
missing=$(sort "$dir/b.unacked" | comm -23 - <(sort -u "$dir/a.after") | wc -l)
if [ "$missing" = 0 ] && [ -s "$dir/b.unacked" ]; then log "ok - a got the $(wc -l <"$dir/b.unacked") events b polled and did not ack"
else log "FAIL - $missing of the events b did not ack never came to a"; status=1; fi
check "after the takeover a got the last 40 events once each, nothing b acked, nothing is left behind" \
    "ARRAY(SELECT position FROM esrc.events WHERE category = 'g' AND position > $lo3 ORDER BY 1)
     = '{$(sort -n "$dir/a.after" | paste -sd,)}'::bigint[]
     AND (SELECT sum(events_behind) FROM esrc.subscription_status WHERE subscription = 'g') = 0"

# --- 4. the example consumer under load -------------------------------------
direct -c "SELECT esrc.create_subscription('ex', ARRAY['load'], 4)" >/dev/null
cat >"$dir/load.sql" <<'SQL'
\set s random(1, 60)
\set k random(0, 2)
\if :k = 0
SELECT esrc.append_batch('load-' || :s, '[{"type": "A", "data": {}}, {"type": "B", "data": {}}, {"type": "C", "data": {}}]');
\else
SELECT esrc.append('load-' || :s, 'E', '{}');
\endif
SQL
start_consumer() { # MEMBER
    python3 "$ESRC_ROOT/examples/subscriptions/consumer.py" "$POOLED_DSN" ex "$1" --wait 1 \
        >"$dir/consumer.$1.out" 2>&1 &
    consumers+=($!)
    eval "pid_$1=$!"
}
# MEMBER N: wait (30 s at most) until the consumer has printed its Nth
# "started" line (its signal handlers are in place): a SIGTERM before that
# would test the Python start-up, not the consumer
wait_started() {
    local i
    for ((i = 0; i < 300; i++)); do
        [ "$(grep -c "^$1: started" "$dir/consumer.$1.out" 2>/dev/null)" -ge "${2:-1}" ] && return 0
        sleep 0.1
    done
    die "consumer $1 did not start: $(tail -3 "$dir/consumer.$1.out")"
}
start_consumer c1
start_consumer c2
wait_started c1; wait_started c2
"$PG_BINDIR/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n -c 8 -j 2 -R 400 -T 4 -f "$dir/load.sql" postgres \
    >"$dir/pgbench.1" 2>&1 &
load=$!
sleep 1.5
wait_started c2
kill -TERM "$pid_c2"
rc=0; wait "$pid_c2" || rc=$?
if [ $rc = 0 ] && grep -q "c2: stopped" "$dir/consumer.c2.out"; then log "ok - c2 stopped cleanly on SIGTERM mid-load"
else log "FAIL - c2 on SIGTERM: exit $rc, $(tail -3 "$dir/consumer.c2.out")"; status=1; fi
start_consumer c3
wait "$load" || die "pgbench failed: $(tail -5 "$dir/pgbench.1")"
"$PG_BINDIR/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n -c 8 -j 2 -R 400 -T 2 -f "$dir/load.sql" postgres \
    >"$dir/pgbench.2" 2>&1 || die "pgbench failed: $(tail -5 "$dir/pgbench.2")"
total=$(direct -c "SELECT count(*) FROM esrc.events WHERE category = 'load'")
log "appended $total events of category load; waiting for the consumers"
for ((i = 0; i < 600; i++)); do
    [ "$(direct -c "SELECT count(*) FROM consumed_events")" -ge "$total" ] &&
        [ "$(direct -c "SELECT sum(events_behind) FROM esrc.subscription_status WHERE subscription = 'ex'")" = 0 ] && break
    sleep 0.1
done
for m in c1 c3; do
    p=pid_$m
    kill -TERM "${!p}"
    rc=0; wait "${!p}" || rc=$?
    [ $rc = 0 ] || { log "FAIL - $m exited $rc on SIGTERM: $(tail -3 "$dir/consumer.$m.out")"; status=1; }
done
consumers=()
for m in c1 c2 c3; do
    log "  $m: $(grep -c ': batch ' "$dir/consumer.$m.out") batches, $(grep -c ': retry ' "$dir/consumer.$m.out") retries; $(tail -1 "$dir/consumer.$m.out")"
done
check "the results table holds every event of the log exactly once ($total)" \
    "(SELECT count(*) FROM consumed_events) = $total
     AND (SELECT count(DISTINCT position) FROM consumed_events) = $total
     AND NOT EXISTS (SELECT position, stream, version, type FROM esrc.events WHERE category = 'load'
                     EXCEPT SELECT position, stream, version, type FROM consumed_events)"
check "each stream's events were processed in version order" \
    "NOT EXISTS (SELECT 1 FROM (SELECT version, lag(version) OVER (PARTITION BY stream ORDER BY consumed_at, position) AS prev
                               FROM consumed_events) x WHERE version <> prev + 1)"
check "more than one member processed events" "(SELECT count(DISTINCT member) FROM consumed_events) > 1"

# --- 5. the example consumer, at-least-once ----------------------------------
direct -c "SELECT esrc.create_subscription('exal', ARRAY['load'], 4)" >/dev/null
start_al() {
    python3 "$ESRC_ROOT/examples/subscriptions/consumer.py" "$POOLED_DSN" exal al --wait 1 \
        --max-count 20 --table consumed_al --at-least-once >>"$dir/consumer.al.out" 2>&1 &
    consumers+=($!)
    pid_al=$!
}
start_al
wait_started al 1
"$PG_BINDIR/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n -c 8 -j 2 -R 400 -T 3 -f "$dir/load.sql" postgres \
    >"$dir/pgbench.3" 2>&1 &
load=$!
sleep 1
kill -9 "$pid_al"; wait "$pid_al" 2>/dev/null || true
start_al
wait_started al 2
sleep 1
kill -TERM "$pid_al"
rc=0; wait "$pid_al" || rc=$?
if [ $rc = 0 ] && grep -q "al: stopped" "$dir/consumer.al.out"; then log "ok - the at-least-once consumer stopped cleanly on SIGTERM mid-load"
else log "FAIL - at-least-once consumer on SIGTERM: exit $rc, $(tail -3 "$dir/consumer.al.out")"; status=1; fi
start_al
wait "$load" || die "pgbench failed: $(tail -5 "$dir/pgbench.3")"
total=$(direct -c "SELECT count(*) FROM esrc.events WHERE category = 'load'")
for ((i = 0; i < 600; i++)); do
    [ "$(direct -c "SELECT count(DISTINCT position) FROM consumed_al")" -ge "$total" ] &&
        [ "$(direct -c "SELECT sum(events_behind) FROM esrc.subscription_status WHERE subscription = 'exal'")" = 0 ] && break
    sleep 0.1
done
wait_started al 3
kill -TERM "$pid_al"
rc=0; wait "$pid_al" || rc=$?
[ $rc = 0 ] || { log "FAIL - the at-least-once consumer exited $rc on SIGTERM: $(tail -3 "$dir/consumer.al.out")"; status=1; }
consumers=()
log "  al: $(grep -c ': batch ' "$dir/consumer.al.out") batches over 3 runs, $(direct -c "SELECT count(*) - count(DISTINCT position) FROM consumed_al") events delivered again after the kill -9"
check "the at-least-once consumer processed every event of the log ($total), none it was not given" \
    "(SELECT count(DISTINCT position) FROM consumed_al) = $total
     AND NOT EXISTS (SELECT position, stream, version, type FROM esrc.events WHERE category = 'load'
                     EXCEPT SELECT position, stream, version, type FROM consumed_al)
     AND NOT EXISTS (SELECT position, stream, version, type FROM consumed_al
                     EXCEPT SELECT position, stream, version, type FROM esrc.events WHERE category = 'load')"
exit $status
