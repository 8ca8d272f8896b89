#!/usr/bin/env bash
# The forwarder in databases whose (non-superuser) owner is hostile, and in
# databases it cannot serve faithfully (issue 12, item 1 and two Low items):
#   1. the owner of the served database plants operators evil.=, <, <=, >
#      on (bigint, bigint) whose function records who runs it and tries
#      ALTER ROLE me SUPERUSER, then ALTER DATABASE ... SET search_path =
#      evil, pg_catalog; the worker restarts and forwards on: the role
#      must not become superuser, the worker must never run the function,
#      and Kafka must have every event exactly once; then ALTER DATABASE
#      ... SET default_transaction_read_only = on must not stop the
#      worker's own writes (its position mirror);
#   2. a database without the extension but with a schema esrc planted by
#      its owner (views named like the extension's tables over such a
#      function): the worker must not read it, and says so in the log;
#   3. a database whose name holds a quote and the text "position": the
#      position record is real JSON and the worker resumes at the right
#      position after a restart;
#   4. a LATIN1 database: the forwarder refuses it (esrc.forwarder_status
#      says why) instead of sending LATIN1 bytes labelled application/json;
#   5. an extension whose owner is no longer superuser: the worker's SQL
#      (and so a trigger the owner put on esrc.forwarder_state) runs as
#      that owner, not as the bootstrap superuser.
#   6. a wrong esrc.kafka_brokers says why, soon: while the worker is
#      connecting, esrc.forwarder_status.last_error names the broker's
#      address and the cause (a refused port: "Connection refused"; a name
#      that does not resolve: the name and the resolver's answer) within
#      the connect's first attempt, not after its 8 s budget with a
#      generic timeout; TLS (security.protocol=ssl) against the plaintext
#      broker: the handshake's failure; a reload with the fixed setting ends the connect
#      at once, events arrive and last_error is cleared.  Each wait is
#      bounded (10 s for an error); the seconds are printed, not asserted.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-hostile)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0

fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg"
# our own sessions must not run the planted operators either: a client
# setting overrides ALTER DATABASE ... SET
export PGOPTIONS="-c search_path=pg_catalog,public -c default_transaction_read_only=off"

psql_as() { # ROLE DB SQL
    psql -h 127.0.0.1 -p "$FWD_PORT" -U "$1" -d "$2" -qAt -v ON_ERROR_STOP=1 -c "$3"
}
superuser_me() { fwd_sql "SELECT rolsuper FROM pg_roles WHERE rolname = 'me'"; }
# wait until a worker other than $1 serves database $2 and has read once
wait_worker_in() {
    local old=$1 db=$2 deadline=$((SECONDS + 60)) pid
    while :; do
        pid=$(fwd_sql "SELECT pid FROM pg_stat_activity WHERE backend_type = 'esrc forwarder'
                       AND datname = '$(sed "s/'/''/g" <<<"$db")'")
        if [ -n "$pid" ] && [ "$pid" != "$old" ]; then
            sleep 2             # its first read comes at once
            return 0
        fi
        [ $SECONDS -lt $deadline ] || { log "no worker in $db"; return 1; }
        sleep 0.2
    done
}
serve() { # DB: point the worker at DB (it restarts)
    local old
    old=$(fwd_worker_pid)
    fwd_sql "ALTER SYSTEM SET esrc.database = '$(sed "s/'/''/g" <<<"$1")'" >/dev/null
    fwd_sql "SELECT pg_reload_conf()" >/dev/null
    wait_worker_in "$old" "$1"
}

fwd_sql "CREATE ROLE me LOGIN" >/dev/null
fwd_sql "ALTER DATABASE $FWD_DB OWNER TO me" >/dev/null
fwd_sql "SELECT esrc.append('acct-1', 'Opened', '{}')" >/dev/null
fwd_wait_forwarded 60 || status=1

log "1. hostile operators and search_path of the database owner"
# shellcheck disable=SC2016
psql_as me "$FWD_DB" '
CREATE SCHEMA evil;
CREATE TABLE evil.calls (who name, su boolean, backend text);
GRANT INSERT ON evil.calls TO PUBLIC;
GRANT USAGE ON SCHEMA evil TO PUBLIC;
CREATE FUNCTION evil.spy() RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
    INSERT INTO evil.calls
    SELECT current_user, r.rolsuper, a.backend_type
    FROM pg_catalog.pg_roles r, pg_catalog.pg_stat_activity a
    WHERE r.rolname OPERATOR(pg_catalog.=) current_user
      AND a.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid();
    BEGIN
        EXECUTE $$ALTER ROLE me SUPERUSER$$;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
END $f$;
CREATE FUNCTION evil.eq(a bigint, b bigint) RETURNS boolean LANGUAGE plpgsql AS
    $f$ BEGIN PERFORM evil.spy(); RETURN a OPERATOR(pg_catalog.=) b; END $f$;
CREATE FUNCTION evil.lt(a bigint, b bigint) RETURNS boolean LANGUAGE plpgsql AS
    $f$ BEGIN PERFORM evil.spy(); RETURN a OPERATOR(pg_catalog.<) b; END $f$;
CREATE FUNCTION evil.le(a bigint, b bigint) RETURNS boolean LANGUAGE plpgsql AS
    $f$ BEGIN PERFORM evil.spy(); RETURN a OPERATOR(pg_catalog.<=) b; END $f$;
CREATE FUNCTION evil.gt(a bigint, b bigint) RETURNS boolean LANGUAGE plpgsql AS
    $f$ BEGIN PERFORM evil.spy(); RETURN a OPERATOR(pg_catalog.>) b; END $f$;
CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.eq);
CREATE OPERATOR evil.< (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.lt);
CREATE OPERATOR evil.<= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.le);
CREATE OPERATOR evil.> (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.gt);
'
psql_as me "$FWD_DB" "ALTER DATABASE $FWD_DB SET search_path = evil, pg_catalog"
# the operators work: a session with that search_path runs them
PGOPTIONS= psql_as me "$FWD_DB" "SELECT 1::bigint > 0::bigint" >/dev/null
expect "a session of the owner with the planted search_path runs the planted operator" \
    test "$(fwd_sql "SELECT count(*) FROM evil.calls")" -ge 1
fwd_sql "DELETE FROM evil.calls" >/dev/null
# the setting applies to the worker's next connection
old=$(fwd_worker_pid)
fwd_sql "SELECT pg_terminate_backend($old)" >/dev/null
wait_worker_in "$old" "$FWD_DB" || status=1
for i in $(seq 1 20); do
    fwd_sql "SELECT esrc.append('acct-$((i % 3))', 'Deposited', '{\"i\": $i}')" >/dev/null
done
fwd_wait_forwarded 60 || status=1
# a restart while the position is in Kafka and in the table
old=$(fwd_worker_pid)
fwd_sql "SELECT pg_terminate_backend($old)" >/dev/null
wait_worker_in "$old" "$FWD_DB" || status=1
for i in $(seq 21 30); do
    fwd_sql "SELECT esrc.append('acct-$((i % 3))', 'Deposited', '{\"i\": $i}')" >/dev/null
done
fwd_wait_forwarded 60 || status=1
expect "the owner did not become superuser" test "$(superuser_me)" = f
expect "the worker never ran the planted operators" \
    test "$(fwd_sql "SELECT count(*) FROM evil.calls WHERE backend = 'esrc forwarder'")" = 0
fwd_dump_events "$dir/events.jsonl"
"$FWD_KAFKA/consume.sh" "$FWD_BROKER" esrc.acct >"$dir/records.jsonl"
fwd_check "$dir/events.jsonl" "$dir/records.jsonl" || status=1
fwd_sql "ALTER ROLE me NOSUPERUSER" >/dev/null 2>&1 || true

log "1b. the owner makes the database's transactions read-only"
psql_as me "$FWD_DB" "ALTER DATABASE $FWD_DB SET default_transaction_read_only = on"
old=$(fwd_worker_pid)
fwd_sql "SELECT pg_terminate_backend($old)" >/dev/null
wait_worker_in "$old" "$FWD_DB" || status=1
ro_pid=$(fwd_worker_pid)
for i in $(seq 31 35); do
    fwd_sql "SELECT esrc.append('acct-$((i % 3))', 'Deposited', '{\"i\": $i}')" >/dev/null
done
fwd_wait_forwarded 60 || status=1
for _ in $(seq 1 50); do
    [ "$(fwd_sql "SELECT position FROM esrc.forwarder_state")" = "$(fwd_sql "SELECT max(position) FROM esrc.events")" ] && break
    sleep 0.2
done
expect "the worker's position mirror caught up (its transactions are not read-only)" \
    test "$(fwd_sql "SELECT position FROM esrc.forwarder_state")" = "$(fwd_sql "SELECT max(position) FROM esrc.events")"
expect "the same worker ran throughout (no ERROR ended it)" test "$(fwd_worker_pid)" = "$ro_pid"

log "2. a planted schema esrc in a database without the extension"
fwd_sql "CREATE DATABASE planted OWNER me" >/dev/null
# shellcheck disable=SC2016
psql_as me planted '
CREATE SCHEMA esrc;
CREATE TABLE esrc.calls (who name, su boolean, backend text);
GRANT INSERT ON esrc.calls TO PUBLIC;
GRANT USAGE ON SCHEMA esrc TO PUBLIC;
CREATE FUNCTION esrc.spy() RETURNS uuid LANGUAGE plpgsql AS $f$
BEGIN
    INSERT INTO esrc.calls
    SELECT current_user, r.rolsuper, a.backend_type
    FROM pg_catalog.pg_roles r, pg_catalog.pg_stat_activity a
    WHERE r.rolname OPERATOR(pg_catalog.=) current_user
      AND a.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid();
    BEGIN
        EXECUTE $$ALTER ROLE me SUPERUSER$$;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
    RETURN pg_catalog.gen_random_uuid();
END $f$;
CREATE VIEW esrc.forwarder_state AS SELECT esrc.spy() AS log_id, 0::bigint AS position;
CREATE TABLE esrc.forwarder_skips (position bigint);
CREATE SEQUENCE esrc.position_seq;
CREATE VIEW esrc.events AS
    SELECT 1::bigint AS position, $$s-1$$::text AS stream, 1::bigint AS version,
           $$T$$::text AS type, $${}$$::jsonb AS data, NULL::jsonb AS metadata,
           pg_catalog.gen_random_uuid() AS id, pg_catalog.now() AS recorded_at,
           $$s$$::text AS category, esrc.spy() AS spied;
'
log_from=$(($(wc -l <"$dir/pg/server.log") + 1))
serve planted || status=1
expect "the planted schema did not make the owner superuser" test "$(superuser_me)" = f
expect "the worker did not read the planted schema" \
    test "$(psql_as postgres planted "SELECT count(*) FROM esrc.calls WHERE backend = 'esrc forwarder'")" = 0
expect "the log says the schema esrc is not the extension's" \
    eval "tail -n +$log_from '$dir/pg/server.log' | grep -q 'schema \"esrc\" .*does not belong to extension esrc'"
fwd_sql "ALTER ROLE me NOSUPERUSER" >/dev/null 2>&1 || true

log "3. a database name with a quote and the text \"position\":"
qdb='q"x","position":999999,"y'
fwd_sql "CREATE DATABASE \"${qdb//\"/\"\"}\"" >/dev/null
psql_as postgres "$qdb" "CREATE EXTENSION esrc" >/dev/null
serve "$qdb" || status=1
qsql() { psql_as postgres "$qdb" "$1"; }
qforwarded() {
    local deadline=$((SECONDS + 60))
    until [ "$(qsql "SELECT state = 'running' AND events_pending = 0 AND
                     last_position = (SELECT max(position) FROM esrc.events)
                     FROM esrc.forwarder_status" 2>/dev/null)" = t ]; do
        [ $SECONDS -lt $deadline ] || { log "not forwarded: $(qsql "SELECT state, last_position, last_error FROM esrc.forwarder_status")"; return 1; }
        sleep 0.2
    done
}
for i in 1 2 3; do qsql "SELECT esrc.append('quoted-1', 'E', '{\"i\": $i}')" >/dev/null; done
qforwarded || status=1
old=$(fwd_worker_pid)
fwd_sql "SELECT pg_terminate_backend($old)" >/dev/null
wait_worker_in "$old" "$qdb" || status=1
for i in 4 5 6; do qsql "SELECT esrc.append('quoted-1', 'E', '{\"i\": $i}')" >/dev/null; done
qforwarded || status=1
"$FWD_KAFKA/consume.sh" "$FWD_BROKER" esrc.quoted >"$dir/quoted.jsonl"
expect "after the restart every event of that database is in Kafka once" \
    test "$(jq -s 'map(.headers.ce_esrcposition) | unique | length' "$dir/quoted.jsonl") $(wc -l <"$dir/quoted.jsonl")" = "6 6"
"$FWD_KAFKA/consume.sh" "$FWD_BROKER" esrc.offsets >"$dir/offsets.jsonl"
key="esrc-$(qsql "SELECT log_id FROM esrc.forwarder_state")"
expect "the position record is JSON naming the database and the last position" \
    test "$(jq -r --arg k "$key" 'select(.key == $k) | .value | fromjson | "\(.database) \(.position)"' \
            "$dir/offsets.jsonl" 2>/dev/null | tail -1)" = "$qdb $(qsql "SELECT max(position) FROM esrc.events")"

log "4. a LATIN1 database"
fwd_sql "CREATE DATABASE latin ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0" >/dev/null
psql_as postgres latin "CREATE EXTENSION esrc" >/dev/null
psql_as postgres latin "SELECT esrc.append('latin-1', 'Named', '{\"name\": \"café\"}')" >/dev/null
serve latin || status=1
sleep 2
st=$(psql_as postgres latin "SELECT state || '|' || coalesce(last_error, '') FROM esrc.forwarder_status")
log "   status: $st"
expect "the forwarder refuses a LATIN1 database, and the status says why" \
    eval '[[ "$st" == error\|*UTF8* ]]'
expect "nothing of it went to Kafka" \
    test "$(kcat -b "$FWD_BROKER" -L 2>/dev/null | grep -cF 'topic "esrc.latin"')" = 0

log "5. the worker's SQL runs as the extension's owner, not as the bootstrap superuser"
fwd_sql "CREATE ROLE boss SUPERUSER LOGIN" >/dev/null
psql_as boss postgres "CREATE DATABASE owned" >/dev/null
psql_as boss owned "CREATE EXTENSION esrc" >/dev/null
fwd_sql "ALTER ROLE boss NOSUPERUSER" >/dev/null
# shellcheck disable=SC2016
psql_as boss owned '
CREATE SCHEMA watch;
CREATE TABLE watch.calls (who name, su boolean);
CREATE FUNCTION watch.record() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    INSERT INTO watch.calls
    SELECT current_user, rolsuper FROM pg_catalog.pg_roles
    WHERE rolname OPERATOR(pg_catalog.=) current_user;
    RETURN NEW;
END $f$;
CREATE TRIGGER watch BEFORE UPDATE ON esrc.forwarder_state
    FOR EACH ROW EXECUTE FUNCTION watch.record();
'
psql_as boss owned "SELECT esrc.append('owned-1', 'E', '{}')" >/dev/null
serve owned || status=1
deadline=$((SECONDS + 60))
until [ "$(psql_as boss owned "SELECT position FROM esrc.forwarder_state")" = 1 ]; do
    [ $SECONDS -lt $deadline ] || { log "mirror not written: $(psql_as boss owned "SELECT state, last_error FROM esrc.forwarder_status")"; break; }
    sleep 0.2
done
expect "the worker forwarded as the non-superuser owner and wrote its mirror" \
    test "$(psql_as boss owned "SELECT position FROM esrc.forwarder_state")" = 1
expect "the table's trigger ran as the extension's owner, without superuser" \
    test "$(psql_as boss owned "SELECT string_agg(DISTINCT who || ' ' || su, ',') FROM watch.calls")" = "boss false"

log "6. a wrong esrc.kafka_brokers: last_error says why while connecting"
osql() { psql_as postgres owned "$1"; }
brokers() { # ADDRESS: set esrc.kafka_brokers and reload
    fwd_sql "ALTER SYSTEM SET esrc.kafka_brokers = '$1'" >/dev/null
    fwd_sql "SELECT pg_reload_conf()" >/dev/null
}
wait_error() { # NAME REGEX: until last_error matches REGEX (10 s at most)
    local t0=$SECONDS deadline=$((SECONDS + 10)) row
    while :; do
        row=$(osql "SELECT state || '|' || coalesce(last_error, '') FROM esrc.forwarder_status")
        if [[ ${row#*|} =~ $2 ]]; then
            log "ok - $1 (after about $((SECONDS - t0)) s, state ${row%%|*}): ${row#*|}"
            return 0
        fi
        [ $SECONDS -lt $deadline ] || { log "FAIL - $1: after 10 s: $row"; status=1; return 0; }
        sleep 0.1
    done
}
refused=127.0.0.1:$(free_port)
brokers "$refused"
wait_error "a refused port: the address and the cause" \
    "^cannot connect to Kafka at $refused: .*$refused.*Connection refused"
brokers esrc-no-such-host.invalid:9092
wait_error "a name that does not resolve: the name and the resolver's answer" \
    "^cannot connect to Kafka at esrc-no-such-host.invalid:9092: .*esrc-no-such-host.invalid.*(resolve|not known)"
# TLS asked of a plaintext broker (the suite has no TLS broker): the
# handshake's failure, not a timeout
fwd_sql "ALTER SYSTEM SET esrc.kafka_properties = 'security.protocol=ssl'" >/dev/null
brokers "$FWD_BROKER"
wait_error "TLS against a plaintext listener: the address and the handshake's failure" \
    "^cannot connect to Kafka at $FWD_BROKER: .*(SSL|ssl|TLS|handshake)"
fwd_sql "ALTER SYSTEM RESET esrc.kafka_properties" >/dev/null
brokers "$FWD_BROKER"
osql "SELECT esrc.append('owned-1', 'E', '{}')" >/dev/null
deadline=$((SECONDS + 60))
t0=$SECONDS
until [ "$(osql "SELECT state = 'running' AND last_error IS NULL AND last_error_at IS NULL
                        AND last_position = (SELECT max(position) FROM esrc.events) FROM esrc.forwarder_status")" = t ]; do
    [ $SECONDS -lt $deadline ] || { log "not forwarded after the fix: $(osql "SELECT state, last_position, last_error FROM esrc.forwarder_status")"; break; }
    sleep 0.1
done
expect "the setting fixed and reloaded: running, the new event forwarded, last_error cleared (about $((SECONDS - t0)) s)" \
    test "$(osql "SELECT state || ' ' || last_position || ' ' || coalesce(last_error, 'none')
                  FROM esrc.forwarder_status")" = "running 2 none"

if [ $status -ne 0 ]; then
    grep -E "esrc forwarder|ERROR|FATAL" "$dir/pg/server.log" | tail -30 >&2
fi
exit $status
