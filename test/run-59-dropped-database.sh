#!/usr/bin/env bash
# Launchers forget a dropped database (issue 24, finding 5).  One server,
# esrc.projection_workers = 1, esrc.kafka_brokers set to a port where no
# broker listens (a forwarder then runs and waits for the broker: no Kafka
# is needed to see its launcher at work), and two databases with esrc and a
# projection: keep (stays) and gone.
#   1. esrc.databases = 'keep, gone' (gone named explicitly): both have a
#      projection worker and a forwarder; DROP DATABASE gone WITH (FORCE)
#      (as docs/projections.md recommends); then for WINDOW seconds (longer
#      than the launchers' first restart back-offs, 1 + 2 + 4 s, and than
#      the forwarders' launcher's catalog scan, 10 s) no worker connects to
#      gone again: no "FATAL: database ... does not exist" in the server
#      log, and each launcher says once that it forgot gone; keep's
#      workers keep their pids; gone's forwarder row says "no database".
#   2. gone created again with esrc and a projection: the launchers start
#      its workers again (a name that comes back is not forgotten).
#   3. esrc.databases = '*', reload: gone dropped again, same checks.
# Before the fix the projection launcher started a worker for the dropped
# database after 1, 3, 7, 15, 31 ... s for the life of the server, each
# dying with that FATAL (and the forwarders' launcher until its next scan):
# step 1 failed with 6 such lines in 12 s.
#
#   ESRC_DROP_WINDOW (default 12)  seconds watched after each drop
set -euo pipefail
source "$(dirname "$0")/lib.sh"

window=${ESRC_DROP_WINDOW:-12}
dir=$(test_tmpdir dropdb)
port=$(free_port)
cleanup() {
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
# port 1 on localhost: nothing listens, the forwarders stay "disconnected"
pg_start "$dir" "$port" "esrc.projection_workers = 1" "max_worker_processes = 16" \
    "esrc.kafka_brokers = '127.0.0.1:1'" "esrc.databases = 'keep, gone'"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
setup_db() {   # a database with esrc, a projection over "acct" and an event
    q -c "CREATE DATABASE $1" >/dev/null
    q -d "$1" -c "CREATE EXTENSION esrc" \
        -c "CREATE TABLE seen (position bigint)" \
        -c "CREATE FUNCTION public.h(e esrc.event) RETURNS void LANGUAGE sql
            AS 'INSERT INTO public.seen VALUES (e.position)'" \
        -c "SELECT esrc.create_projection('p', 'public.h(esrc.event)', ARRAY['acct'])" \
        -c "SELECT esrc.append('acct-1', 'Opened', '{}')" >/dev/null
}
# pid of the worker of type $1 in database $2 (empty: none)
worker_pid() {
    q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = '$1' AND datname = '$2'"
}
wait_workers() {   # until database $1 has both workers and its event applied
    local deadline=$((SECONDS + 30))
    until [ -n "$(worker_pid 'esrc projection worker' "$1")" ] &&
        [ -n "$(worker_pid 'esrc forwarder' "$1")" ] &&
        [ "$(q -d "$1" -c "SELECT count(*) FROM seen")" = 1 ]; do
        [ $SECONDS -lt $deadline ] || die "database $1: no projection worker or forwarder after 30 s"
        sleep 0.2
    done
}
fatals_since() {   # "does not exist" FATALs in the log after byte $1
    tail -c +"$(($1 + 1))" "$dir/server.log" | grep -c 'FATAL: .*database .* does not exist' || true
}
# drop gone and watch: no worker for it again, keep's untouched
drop_and_watch() {
    local pp pf from oid n
    pp=$(worker_pid 'esrc projection worker' keep)
    pf=$(worker_pid 'esrc forwarder' keep)
    oid=$(q -c "SELECT oid FROM pg_database WHERE datname = 'gone'")
    from=$(stat -c %s "$dir/server.log")
    q -c "DROP DATABASE gone WITH (FORCE)"
    log "dropped gone (oid $oid); watching for $window s"
    sleep "$window"
    n=$(fatals_since "$from")
    if [ "$n" != 0 ]; then
        tail -c +"$((from + 1))" "$dir/server.log" | grep 'does not exist' | sed 's/^/  /' >&2
        die "$1: $n workers started for the dropped database in $window s"
    fi
    log "ok: $1: no worker started for the dropped database in $window s"
    tail -c +"$((from + 1))" "$dir/server.log" | grep -q "projection launcher: database $oid no longer exists" ||
        die "$1: the projection launcher did not log that it forgot database $oid"
    tail -c +"$((from + 1))" "$dir/server.log" | grep -q 'forwarder launcher: database "gone" no longer exists' ||
        die "$1: the forwarder launcher did not log that it forgot gone"
    [ "$(tail -c +"$((from + 1))" "$dir/server.log" | grep -c 'no longer exists')" = 2 ] ||
        die "$1: the launchers said it more than once each"
    log "ok: $1: each launcher logged once that it forgot gone"
    [ "$(worker_pid 'esrc projection worker' keep) $(worker_pid 'esrc forwarder' keep)" = "$pp $pf" ] ||
        die "$1: keep's workers changed"
    log "ok: $1: keep's workers untouched"
}

setup_db keep
setup_db gone
wait_workers keep
wait_workers gone
log "1. gone listed in esrc.databases, dropped"
drop_and_watch "listed"
[ "$(q -d keep -c "SELECT state FROM esrc.forwarder_status WHERE database = 'gone'")" = "no database" ] ||
    die "gone's forwarder row does not say 'no database'"
log "ok: gone's forwarder row says 'no database'"

log "2. gone created again: its workers come back"
setup_db gone
wait_workers gone
log "ok: a projection worker and a forwarder for the new gone"

log "3. esrc.databases = '*', gone dropped again"
q -c "ALTER SYSTEM SET esrc.databases = '*'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 1
wait_workers gone
drop_and_watch "under '*'"
log "launchers forget a dropped database"
