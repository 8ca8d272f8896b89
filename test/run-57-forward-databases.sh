#!/usr/bin/env bash
# Forwarding several databases (esrc.databases, one worker each, started
# by the forwarders' launcher), against a real broker with 3 partitions:
# esrc.databases = 'app, billing, ops, ghost, bare' (ghost does not
# exist, bare has no esrc) and
# esrc.kafka_topic = 'esrc.{database}.{category}'.
#   1. billing and ops are created after the start (no reload): the
#      launcher notices them; esrc.forwarder_status shows every row from
#      any database, ghost as "no database", bare as "no extension";
#   2. load in all three; SIGTERM of billing's worker: the others keep
#      their pids and keep forwarding, billing's comes back;
#   3. SIGHUP: ops dropped from the list, its worker stops (the others
#      untouched), its events wait; put back, they are forwarded;
#   4. load again; kill -9 of ops's worker: PostgreSQL restarts the whole
#      cluster (crash recovery of the postmaster), every worker with it;
#   5. esrc.databases = '*': the three keep their workers, databases with
#      esrc join (one created later too), those without esrc and ghost
#      have no row; a copy of a database with esrc (same log_id) is
#      refused until it gets a log_id of its own;
#   then a read_committed consumer finds each database's events in its
#   own topics exactly once, encoded as specified (test/forward/check.py).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-dbs)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0
DBS="app billing ops"

KAFKA_NUM_PARTITIONS=3 fwd_start_kafka "$dir/kafka"
FWD_DB=app
# room for the launchers, up to 7 forwarders and the projections' probes
fwd_start_pg "$dir/pg" \
    "max_worker_processes = 24" \
    "esrc.databases = 'app, billing, ops, ghost, bare'" \
    "esrc.kafka_topic = 'esrc.{database}.{category}'"

sql_in() { psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$1" -qAt -v ON_ERROR_STOP=1 -c "$2"; }
# a column of esrc.forwarder_status for database $2, asked from database $3 (app)
col() { sql_in "${3:-app}" "SELECT $1 FROM esrc.forwarder_status WHERE database = '$2'" 2>/dev/null || true; }
worker_pid() { sql_in postgres "SELECT pid FROM pg_stat_activity WHERE backend_type = 'esrc forwarder' AND datname = '$1'" 2>/dev/null || true; }
# until every database in $@ has a running worker (default 60 s)
wait_running() {
    local deadline=$((SECONDS + 60)) db ok
    while :; do
        ok=1
        for db in "$@"; do
            [ "$(col state "$db")" = running ] && [ -n "$(worker_pid "$db")" ] || ok=0
        done
        [ $ok = 1 ] && return 0
        if [ $SECONDS -ge $deadline ]; then
            log "not running: $(sql_in app "SELECT string_agg(database || '=' || state, ' ') FROM esrc.forwarder_status")"
            return 1
        fi
        sleep 0.2
    done
}
# until every committed event of database $1 is forwarded
wait_forwarded_in() {
    local deadline=$((SECONDS + 120)) s
    while :; do
        s=$(sql_in "$1" "SELECT events_pending = 0 AND state = 'running'
                         AND last_position >= (SELECT coalesce(max(position), 0) FROM esrc.events
                                               WHERE position <= esrc.safe_position())
                         FROM esrc.forwarder_status WHERE database = current_database()" 2>/dev/null || echo f)
        [ "$s" = t ] && return 0
        [ $SECONDS -lt $deadline ] || { log "$1 not forwarded in time"; return 1; }
        sleep 0.2
    done
}
load_all() { # SECONDS: 2 sessions per database, in the background
    local db
    loads=""
    for db in $DBS; do
        PGOPTIONS= pgbench -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -f "$FWD_HERE/load.pgbench" \
            -D streams=20 -c 2 -j 1 -T "$1" "$db" >"$dir/pgbench-$db.log" 2>&1 &
        loads="$loads $!"
    done
}
finish_load() { local p; for p in $loads; do wait "$p" || true; done; }
delivered() { col delivered_total "$1"; }

log "1. billing and ops created after the start, no reload"
sql_in postgres "CREATE DATABASE bare" >/dev/null
for db in billing ops; do
    sql_in postgres "CREATE DATABASE $db" >/dev/null
    sql_in "$db" "CREATE EXTENSION esrc" >/dev/null
done
wait_running app billing ops || status=1
expect "ghost: state 'no database' with the error, seen from ops" \
    test "$(col "state || '|' || last_error" ghost ops)" = 'no database|database "ghost" does not exist'
deadline=$((SECONDS + 30))
until [ "$(col state bare)" = "no extension" ] || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
expect "bare: state 'no extension' with the error, seen from app" \
    test "$(col "state || '|' || last_error" bare app)" = 'no extension|extension esrc is not installed in database "bare"'
expect "every configured database has its row, seen from billing" \
    test "$(sql_in billing "SELECT string_agg(database, ',' ORDER BY database) FROM esrc.forwarder_status")" = "app,bare,billing,ghost,ops"
expect "other databases' rows have no pending count" \
    test "$(sql_in app "SELECT count(*) FROM esrc.forwarder_status WHERE events_pending IS NULL")" = 4

log "2. load in all three; SIGTERM of billing's worker"
load_all 8
sleep 2
p_app=$(worker_pid app); p_billing=$(worker_pid billing); p_ops=$(worker_pid ops)
d_app=$(delivered app); d_ops=$(delivered ops)
sql_in postgres "SELECT pg_terminate_backend($p_billing)" >/dev/null
deadline=$((SECONDS + 30))
# one reading per test: two readings of worker_pid could see the old
# worker, then none once it has exited, and take "none" for a new pid
new_billing=
until [ $SECONDS -ge $deadline ]; do
    new_billing=$(worker_pid billing)
    [ -n "$new_billing" ] && [ "$new_billing" != "$p_billing" ] && break
    sleep 0.2
done
expect "billing's worker came back with a new pid ($p_billing -> ${new_billing:-none})" \
    test -n "$new_billing" -a "$new_billing" != "$p_billing"
sleep 1
expect "app and ops kept their workers (same pids)" \
    test "$(worker_pid app) $(worker_pid ops)" = "$p_app $p_ops"
expect "app and ops kept forwarding meanwhile" \
    test "$(delivered app)" -gt "$d_app" -a "$(delivered ops)" -gt "$d_ops"
finish_load
for db in $DBS; do wait_forwarded_in "$db" || status=1; done
expect "app and ops still have the same workers after the load" \
    test "$(worker_pid app) $(worker_pid ops)" = "$p_app $p_ops"

log "3. SIGHUP: ops leaves the list, then comes back"
p_billing=$(worker_pid billing)
sql_in app "ALTER SYSTEM SET esrc.databases = 'app, billing, ghost, bare'" >/dev/null
sql_in app "SELECT pg_reload_conf()" >/dev/null
deadline=$((SECONDS + 30))
until [ -z "$(worker_pid ops)" ] || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
expect "ops's worker stopped" test -z "$(worker_pid ops)"
expect "app and billing untouched" test "$(worker_pid app) $(worker_pid billing)" = "$p_app $p_billing"
expect "ops's own row says inactive, app's list has no ops" \
    test "$(col state ops ops)|$(col state ops app)" = "inactive|"
sql_in ops "SELECT esrc.append('acct-waiting', 'Opened', '{}')" >/dev/null
sleep 1
expect "ops's new event waits" test "$(col events_pending ops ops)" = 1
sql_in app "ALTER SYSTEM SET esrc.databases = 'app, billing, ops, ghost, bare'" >/dev/null
sql_in app "SELECT pg_reload_conf()" >/dev/null
wait_running app billing ops || status=1
wait_forwarded_in ops || status=1
expect "ops forwarded again by a new worker" test "$(worker_pid ops)" != "$p_ops"

log "4. load again; kill -9 of ops's worker (the postmaster restarts the cluster)"
load_all 6
sleep 2
p_all="$(worker_pid app) $(worker_pid billing) $(worker_pid ops)"
kill -9 "$(worker_pid ops)"
deadline=$((SECONDS + 60))
until grep -q "all server processes terminated; reinitializing" "$dir/pg/server.log" ||
    [ $SECONDS -ge $deadline ]; do sleep 0.2; done
expect "the postmaster restarted the cluster (crash recovery)" \
    grep -q "all server processes terminated; reinitializing" "$dir/pg/server.log"
finish_load
until sql_in app "SELECT 1" >/dev/null 2>&1 || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
wait_running app billing ops || status=1
all_new() {
    local p now
    now=" $(worker_pid app) $(worker_pid billing) $(worker_pid ops) "
    for p in $p_all; do [[ "$now" != *" $p "* ]] || return 1; done
}
expect "every worker is new after the crash restart" all_new
for db in $DBS; do wait_forwarded_in "$db" || status=1; done

log "5. esrc.databases = '*'; a copied database (same log_id)"
sql_in postgres "CREATE DATABASE tmpl" >/dev/null
sql_in tmpl "CREATE EXTENSION esrc" >/dev/null
sql_in postgres "CREATE DATABASE twin TEMPLATE tmpl" >/dev/null
sql_in postgres "CREATE DATABASE plain" >/dev/null
p_three="$(worker_pid app) $(worker_pid billing) $(worker_pid ops)"
sql_in app "ALTER SYSTEM SET esrc.databases = '*'" >/dev/null
sql_in app "SELECT pg_reload_conf()" >/dev/null
deadline=$((SECONDS + 60))
until [ "$(sql_in app "SELECT count(*) FROM esrc.forwarder_status WHERE database IN ('tmpl', 'twin') AND pid IS NOT NULL")" = 2 ] ||
    [ $SECONDS -ge $deadline ]; do sleep 0.2; done
sleep 3
rows=$(sql_in app "SELECT string_agg(database || '=' || state || ':' || coalesce(last_error, ''), ' ' ORDER BY database) FROM esrc.forwarder_status")
log "   $rows"
expect "the three kept their workers across the switch to '*'" \
    test "$(worker_pid app) $(worker_pid billing) $(worker_pid ops)" = "$p_three"
expect "rows: the databases with esrc only (no ghost, bare, plain, postgres)" \
    test "$(sql_in app "SELECT string_agg(database, ',' ORDER BY database) FROM esrc.forwarder_status")" = "app,billing,ops,tmpl,twin"
expect "the copy with the same log_id does not forward (state error, named)" \
    test "$(sql_in app "SELECT count(*) FROM esrc.forwarder_status WHERE database IN ('tmpl', 'twin')
                        AND state = 'error' AND last_error LIKE '%has the same log_id as database%'")" -ge 1
sql_in twin "UPDATE esrc.forwarder_state SET log_id = gen_random_uuid(), position = 0" >/dev/null
sql_in twin "SELECT esrc.append('acct-twin', 'Opened', '{}')" >/dev/null
sql_in tmpl "SELECT esrc.append('acct-tmpl', 'Opened', '{}')" >/dev/null
wait_running tmpl twin || status=1
wait_forwarded_in twin || status=1
wait_forwarded_in tmpl || status=1
sql_in postgres "CREATE DATABASE late" >/dev/null
sql_in late "CREATE EXTENSION esrc" >/dev/null
wait_running late || status=1
expect "a database created later with esrc is forwarded (within the launcher's scan)" \
    test "$(col state late)" = running

log "exactly once per database, each in its own topics"
for db in $DBS; do
    FWD_DB=$db fwd_dump_events "$dir/events-$db.jsonl"
    prev=-1
    for _ in 1 2 3 4 5; do
        # shellcheck disable=SC2046
        "$FWD_KAFKA/consume.sh" "$FWD_BROKER" $(fwd_topics | grep -F "esrc.$db.") >"$dir/records-$db.jsonl"
        n=$(wc -l <"$dir/records-$db.jsonl")
        [ "$n" = "$prev" ] && break
        prev=$n
        sleep 1
    done
    log "   $db: $(wc -l <"$dir/events-$db.jsonl") events, $n records"
    if ! fwd_check "$dir/events-$db.jsonl" "$dir/records-$db.jsonl" --partitions 3 \
        --database "$db" --topic-prefix "esrc.$db." | sed "s/^/  $db: /" >&2; then
        status=1
    fi
done
expect "no topic of another shape (every topic is esrc.<app|billing|ops>.<category>)" \
    eval '! fwd_topics | grep -vqE "^esrc\.(app|billing|ops|tmpl|twin)\.(acct|order)$"'

if [ $status -ne 0 ]; then
    grep -E "esrc forwarder|ERROR|FATAL|PANIC" "$dir/pg/server.log" | tail -40 >&2
fi
exit $status
