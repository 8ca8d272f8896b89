#!/usr/bin/env bash
# Commit-safe global reads on a hot standby (issue 27, item 3).  A primary
# and a streaming hot standby (pg_basebackup -R), both with esrc preloaded,
# on loopback.  On the primary, ESRC_STANDBY_CLIENTS (default 6) pgbench
# clients append for ESRC_STANDBY_SECONDS (default 6) s, each transaction
# an event to a random category of sb0..sb3, 2 ms of holding its
# position open, then another event: so transactions with low positions are
# still open while later ones commit.  On the standby meanwhile:
#   - a reader of esrc.safe_position() (a new transaction per call): never
#     lower than a value before it;
#   - a reader of esrc.read_all() and one of read_category('sb0') and of
#     read_category('sb1'): each call reads from its last event on, which
#     must come back first (the horizon did not drop below it); at the end
#     the events each one saw must be every event of the primary up to its
#     last one (a position below a returned horizon that became visible
#     later would be missing);
#   - a REPEATABLE READ transaction open throughout: with
#     max_standby_streaming_delay = 0 any replay conflict would cancel it.
# Then the standby must reach the primary's final horizons (global and per
# category), and esrc.subscription_status and esrc.poll (without ack) on
# it see every event of a subscription's category.  Then, restarted without esrc in shared_preload_libraries,
# the standby replays the primary's rows (no crash) and a read says
# clearly why it refuses; restarted with esrc and promoted (pg_ctl
# promote), reads go on from where they were and see new appends.
# With 20 categories in flight at once (more than the row holds), an event
# committed above them is not returned until they commit.
# A standby that used last(seq) as its horizon (checked by hand: the
# standby's sequence runs up to 32 values ahead of the primary's appends)
# fails the "missed events" check.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

secs=${ESRC_STANDBY_SECONDS:-6}
clients=${ESRC_STANDBY_CLIENTS:-6}
dir=$(test_tmpdir standby)
pport=$(free_port)
sport=$(free_port)
reader_pids=()
cleanup() {
    for p in "${reader_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    pg_stop "$dir/s" immediate
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
# autovacuum off: its visibility-map records could cancel the long reader
# below; nothing else in this test removes row versions
pg_start "$dir" "$pport" "max_connections = 40" "wal_level = replica" "max_wal_senders = 4" \
    "autovacuum = off"

export PGHOST=127.0.0.1 PGUSER=postgres PGDATABASE=postgres
p() { psql -qAtX -v ON_ERROR_STOP=1 -p "$pport" "$@"; }
s() { psql -qAtX -v ON_ERROR_STOP=1 -p "$sport" "$@"; }

p <<'SQL'
CREATE EXTENSION esrc;
-- The readers run on the standby, which cannot write: each checks as it
-- goes and reports one NOTICE line at the end.
-- safe_position(), a new transaction per call
CREATE PROCEDURE sb_follow_horizon(seconds int) LANGUAGE plpgsql AS $$
DECLARE
    highest bigint := 0;
    v bigint;
    n bigint := 0;
    drops bigint := 0;
    deadline timestamptz := clock_timestamp() + make_interval(secs => seconds);
BEGIN
    WHILE clock_timestamp() < deadline LOOP
        v := esrc.safe_position();
        n := n + 1;
        IF v < highest THEN
            drops := drops + 1;
            RAISE NOTICE 'drop: call % returned % after %', n, v, highest;
        END IF;
        highest := greatest(highest, v);
        COMMIT;
    END LOOP;
    RAISE NOTICE 'result horizon calls=% drops=% last=%', n, drops, highest;
END
$$;
-- read_all (cat NULL) or read_category(cat), from the last event returned
CREATE PROCEDURE sb_follow_reads(seconds int, cat text) LANGUAGE plpgsql AS $$
DECLARE
    last bigint := 0;
    newlast bigint;
    first bigint;
    seen bigint := 0;
    drops bigint := 0;
    r record;
    n bigint := 0;
    deadline timestamptz := clock_timestamp() + make_interval(secs => seconds);
BEGIN
    WHILE clock_timestamp() < deadline LOOP
        first := NULL;
        newlast := last;
        FOR r IN SELECT position FROM esrc.read_all(greatest(last - 1, 0), 100000)
                 WHERE cat IS NULL
                 UNION ALL
                 SELECT position FROM esrc.read_category(cat, greatest(last - 1, 0), 100000)
                 WHERE cat IS NOT NULL
                 ORDER BY 1 LOOP
            first := coalesce(first, r.position);
            IF r.position > last THEN
                seen := seen + 1;
                newlast := r.position;
            END IF;
        END LOOP;
        n := n + 1;
        IF last > 0 AND first IS DISTINCT FROM last THEN
            drops := drops + 1;
            RAISE NOTICE 'drop: call % began at % after %', n, first, last;
        END IF;
        last := newlast;
        COMMIT;
    END LOOP;
    RAISE NOTICE 'result % calls=% drops=% seen=% last=%', coalesce(cat, 'all'), n, drops, seen, last;
END
$$;
SQL

log "standby: pg_basebackup -R"
mkdir -p "$dir/s"
chmod 755 "$dir/s"
[ "$(id -u)" = 0 ] && chown "$ESRC_TEST_USER" "$dir/s"
as_test_user "$PG_BINDIR/pg_basebackup" -h 127.0.0.1 -p "$pport" -U postgres -D "$dir/s/data" -R -X stream -c fast \
    >"$dir/basebackup.log" 2>&1 || { cat "$dir/basebackup.log"; die "pg_basebackup failed"; }
standby_conf() {
    {
        echo "port = $sport"
        echo "unix_socket_directories = '$dir/s'"
        echo "shared_preload_libraries = '$1'"
        echo "max_standby_streaming_delay = 0"
    } | as_test_user tee -a "$dir/s/data/postgresql.conf" >/dev/null
}
standby_start() {
    as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/s/data" -l "$dir/s/server.log" -w -t 60 start >/dev/null \
        || { tail -30 "$dir/s/server.log"; die "standby did not start"; }
}
standby_conf esrc
standby_start
[ "$(s -c "SELECT pg_is_in_recovery()")" = t ] || die "the standby is not in recovery"

cat >"$dir/append.pgbench" <<'EOF2'
\set a random(0, 3)
\set b random(0, 3)
BEGIN;
SELECT esrc.append('sb' || :a || '-' || :client_id, 'Tick', '{}');
SELECT pg_sleep(0.002);
SELECT esrc.append('sb' || :b || '-' || :client_id, 'Tock', '{}');
COMMIT;
EOF2

log "$clients writers on the primary, 4 readers on the standby, ${secs}s"
s -c "CALL sb_follow_horizon($secs)" >"$dir/r-horizon.log" 2>&1 &
reader_pids+=($!)
# a long transaction on the standby: with max_standby_streaming_delay = 0
# any replay conflict would cancel it (the publisher leaves no row
# versions for the primary to prune)
s -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM esrc.events" \
  -c "SELECT pg_sleep($secs)" -c "SELECT count(*) FROM esrc.events" -c "COMMIT" >"$dir/r-long.log" 2>&1 &
reader_pids+=($!)
s -c "CALL sb_follow_reads($secs, NULL)" >"$dir/r-all.log" 2>&1 &
reader_pids+=($!)
for c in sb0 sb1; do
    s -c "CALL sb_follow_reads($secs, '$c')" >"$dir/r-$c.log" 2>&1 &
    reader_pids+=($!)
done
"$PG_BINDIR/pgbench" -h 127.0.0.1 -p "$pport" -U postgres -n -c "$clients" -j 2 -T "$secs" \
    -f "$dir/append.pgbench" postgres >"$dir/pgbench.log" 2>&1 \
    || { cat "$dir/pgbench.log"; die "pgbench failed"; }
grep -E "^number of transactions actually processed" "$dir/pgbench.log" | sed 's/^/  /' >&2
for pid in "${reader_pids[@]}"; do
    wait "$pid" || { cat "$dir"/r-*.log; die "a reader failed"; }
done
reader_pids=()
grep -h "result" "$dir"/r-*.log | sed 's/^.*result /  /' >&2

# the readers' verdicts
field() { sed -n "s/.*result $1 .*$2=\([0-9]*\).*/\1/p" "$dir/r-$3.log"; }
[ "$(field horizon drops horizon)" = 0 ] || { grep drop "$dir/r-horizon.log" | head -3; die "safe_position() went backwards on the standby"; }
for r in all sb0 sb1; do
    [ "$(field "$r" drops "$r")" = 0 ] || { grep drop "$dir/r-$r.log" | head -3; die "a $r reader's horizon dropped below an event it had returned"; }
    last=$(field "$r" last "$r")
    seen=$(field "$r" seen "$r")
    calls=$(field "$r" calls "$r")
    if [ "$r" = all ]; then
        want=$(p -c "SELECT count(*) FROM esrc.events WHERE position <= $last")
    else
        want=$(p -c "SELECT count(*) FROM esrc.events WHERE category = '$r' AND position <= $last")
    fi
    [ "$seen" = "$want" ] || die "the $r reader on the standby saw $seen events up to $last, the primary has $want: a position below a returned horizon became visible later"
    [ "$calls" -ge 50 ] && [ "$last" -ge 500 ] || die "the $r reader saw too little ($calls calls, last $last)"
done
[ "$(field horizon calls horizon)" -ge 100 ] || die "the safe_position() reader made too few calls"

# the standby reaches the primary's final horizons
final=$(p -c "SELECT esrc.safe_position()")
[ "$final" = "$(p -c "SELECT max(position) FROM esrc.events")" ] || die "the primary's horizon is not its last event at rest"
caught=""
for _ in $(seq 1 300); do
    if [ "$(s -c "SELECT esrc.safe_position() = $final
                      AND (SELECT max(position) FROM esrc.read_all($final - 1, 10)) = $final
                      AND (SELECT max(position) FROM esrc.read_category('sb0', 0, 1000000))
                          = (SELECT max(position) FROM esrc.events WHERE category = 'sb0')")" = t ]; then
        caught=yes
        break
    fi
    s -c "SELECT pg_sleep(0.1)" >/dev/null
done
[ -n "$caught" ] || die "the standby never reached the primary's final horizon $final (it shows $(s -c "SELECT esrc.safe_position()"))"
log "standby reached the primary's horizon $final; no reader missed an event or saw a horizon drop"

# what a consumer reads on its own: subscription_status and a poll without
# ack on the standby, up to the published horizon of the category
p -c "SELECT esrc.create_subscription('sb_sub', ARRAY['sb1'])" >/dev/null
want=$(p -c "SELECT count(*) FROM esrc.events WHERE category = 'sb1'")
got=""
for _ in $(seq 1 300); do
    got=$(s -c "SELECT coalesce(sum(events_behind), -1) FROM esrc.subscription_status WHERE subscription = 'sb_sub'")
    [ "$got" = "$want" ] && break
    s -c "SELECT pg_sleep(0.1)" >/dev/null
done
[ "$got" = "$want" ] || die "subscription_status on the standby shows $got events behind, the primary has $want in sb1"
polled=$(s -c "SELECT count(*) FROM esrc.poll('sb_sub', 'standby-member', 1000000)" 2>&1) \
    || die "poll without ack on the standby failed: $polled"
[ "$polled" = "$want" ] || die "poll on the standby returned $polled events of sb1, the primary has $want"
log "subscription_status and poll (no ack) on the standby: $want events of sb1"

# more categories in flight than the row holds (5 transactions x 4
# categories = 20 > 16): the row keeps the categories of an earlier
# reading, and read_category on the standby must still wait for them.
# Holders append to mc<i>a..d and then wait behind a gate (a table locked
# by a session terminated at the end); meanwhile mc0a-late commits above
# their positions, and the standby must not return it.
p -c "CREATE TABLE mc_gate ()"
psql -qAtX -p "$pport" -c "SET application_name = 'mc_gate'" -c "BEGIN" \
    -c "LOCK mc_gate IN ACCESS EXCLUSIVE MODE" -c "SELECT pg_sleep(300)" >/dev/null 2>&1 &
gate_pid=$!
reader_pids+=($gate_pid)
for _ in $(seq 1 300); do
    [ "$(p -c "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                WHERE a.application_name = 'mc_gate' AND l.relation = 'mc_gate'::regclass AND l.granted")" = 1 ] && break
    sleep 0.1
done
holders=()
for i in 0 1 2 3 4; do
    psql -qAtX -v ON_ERROR_STOP=1 -p "$pport" >"$dir/holder-$i.log" 2>&1 <<SQL &
BEGIN;
SELECT esrc.append('mc${i}a-1', 'Held', '{}'), esrc.append('mc${i}b-1', 'Held', '{}'),
       esrc.append('mc${i}c-1', 'Held', '{}'), esrc.append('mc${i}d-1', 'Held', '{}');
SELECT count(*) FROM mc_gate;
COMMIT;
SQL
    holders+=($!)
done
for _ in $(seq 1 300); do
    [ "$(p -c "SELECT count(*) FROM esrc.inflight_appends")" = 5 ] && break
    sleep 0.1
done
[ "$(p -c "SELECT count(*) FROM esrc.inflight_appends")" = 5 ] || die "the 5 holders did not start"
late=$(p -c "SELECT esrc.append('mc0a-late', 'Late', '{}')" >/dev/null && p -c "SELECT position FROM esrc.events WHERE stream = 'mc0a-late'")
late_at=$(p -c "SELECT recorded_at FROM esrc.events WHERE stream = 'mc0a-late'")
# wait until the standby has a row published after the late append
for _ in $(seq 1 300); do
    [ "$(s -c "SELECT published_at > '$late_at' FROM esrc.standby_horizon")" = t ] && break
    s -c "SELECT pg_sleep(0.1)" >/dev/null
done
[ "$(s -c "SELECT published_at > '$late_at' FROM esrc.standby_horizon")" = t ] || die "no row published after the late append"
[ "$(s -c "SELECT count(*) FROM esrc.events WHERE position = $late")" = 1 ] || die "the standby has not replayed the late append"
[ "$(s -c "SELECT count(*) FROM esrc.read_category('mc0a', 0, 1000)")" = 0 ] \
    || die "read_category('mc0a') on the standby returned the late event at $late while a lower position of mc0a was in flight"
[ "$(s -c "SELECT count(*) FROM esrc.read_all($late - 1, 10)")" = 0 ] || die "read_all on the standby returned the late event"
p -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'mc_gate'" >/dev/null
for pid in "${holders[@]}"; do wait "$pid" || { cat "$dir"/holder-*.log; die "a holder failed"; }; done
final=$(p -c "SELECT esrc.safe_position()")
caught=""
for _ in $(seq 1 300); do
    if [ "$(s -c "SELECT esrc.safe_position() = $final
                      AND (SELECT count(*) FROM esrc.read_category('mc0a', 0, 1000)) = 2")" = t ]; then
        caught=yes
        break
    fi
    s -c "SELECT pg_sleep(0.1)" >/dev/null
done
[ -n "$caught" ] || die "after the holders committed the standby did not reach $final with both mc0a events"
log "20 categories in flight: the standby held read_category and read_all below them, then caught up"

# a standby without esrc preloaded: replays the rows, refuses reads clearly
as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/s/data" -m fast -w -t 60 stop >/dev/null
standby_conf ''
standby_start
p -c "SELECT esrc.append('sb9-x', 'Later', '{}')" >/dev/null
target=$(p -c "SELECT esrc.safe_position()")
replayed=""
for _ in $(seq 1 300); do
    if [ "$(s -c "SELECT last_position >= $target FROM esrc.standby_horizon")" = t ]; then
        replayed=yes
        break
    fi
    s -c "SELECT pg_sleep(0.1)" >/dev/null
done
[ -n "$replayed" ] || die "the standby without esrc did not replay the primary's horizon row"
err=$(s -c "SELECT count(*) FROM esrc.read_all(0, 10)" 2>&1 || true)
case "$err" in
    *"esrc must be loaded via shared_preload_libraries"*) ;;
    *) die "a read on a standby without esrc preloaded said: $err" ;;
esac
grep -E "PANIC|server process .* was terminated" "$dir/s/server.log" && die "the standby without esrc crashed"
log "without esrc preloaded the standby replays and refuses reads: ${err#ERROR:  }"

# promotion: reads go on
as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/s/data" -m fast -w -t 60 stop >/dev/null
standby_conf esrc
standby_start
before=""
for _ in $(seq 1 300); do
    before=$(s -c "SELECT esrc.safe_position()")
    [ "$before" = "$target" ] && break
    s -c "SELECT pg_sleep(0.1)" >/dev/null
done
[ "$before" = "$target" ] || die "the restarted standby shows horizon $before, not $target"
pg_stop "$dir" fast
as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/s/data" -w -t 60 promote >/dev/null || die "pg_ctl promote failed"
[ "$(s -c "SELECT pg_is_in_recovery()")" = f ] || die "the standby did not leave recovery"
after=$(s -c "SELECT esrc.safe_position()")
[ "$after" -ge "$before" ] || die "the horizon went from $before to $after at promotion"
s -c "SELECT esrc.append('sb0-promoted', 'Promoted', '{}')" >/dev/null
newest=$(s -c "SELECT position FROM esrc.read_category('sb0', $before, 10) WHERE stream = 'sb0-promoted'")
[ -n "$newest" ] && [ "$newest" -gt "$after" ] || die "after promotion read_category did not return the new event"
n=$(s -c "SELECT count(*) FROM esrc.read_all(0, 1000000)")
[ "$n" = "$(s -c "SELECT count(*) FROM esrc.events")" ] || die "after promotion read_all does not return every event"
log "promoted: horizon $before -> $after, new append at $newest read back"
