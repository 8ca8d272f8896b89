#!/usr/bin/env bash
# The owner of a projection dropped from another database (issue 24,
# finding 3).  DROP ROLE checks esrc's objects only in the database it runs
# in (src/projection/owners.c); from a database without esrc it succeeds, and the
# projection's owner column is then a role OID that no longer exists.
#   database app (esrc): role owner_bob owns projection "bobs" (a reset
#     function too) and subscription "bobsub"; the projection applies its
#     events as owner_bob.  DROP ROLE owner_bob there: 2BP01.
#   database postgres (no esrc): DROP ROLE owner_bob succeeds.
#   app: the worker pauses "bobs" at its next round, without running the
#     handler (nothing applied as a dropped role, no retries, no block):
#     state 'paused', last_error 'owner of projection "bobs" does not
#     exist ...', SQLSTATE 42704, a WARNING in the server log; other
#     projections go on.  esrc.projection_resume by a superuser: 42704, it
#     stays paused.  esrc.reset_projection (which runs the reset function as the
#     owner): 42704.  A superuser sets the owner column to owner_alice and
#     resumes: it catches up, as owner_alice.  The subscription with the
#     dropped owner: a superuser drops it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

dir=$(test_tmpdir ownergone)
port=$(free_port)
cleanup() {
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "esrc.projection_workers = 1" "esrc.projection_retry_delay = '100ms'" \
    "esrc.projection_max_attempts = 3"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=app
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
psql -qX -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE app" >/dev/null
psql -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION esrc;
CREATE ROLE owner_bob IN ROLE esrc_subscriber, esrc_reader;
CREATE ROLE owner_alice IN ROLE esrc_subscriber, esrc_reader;
CREATE SCHEMA og;
GRANT USAGE ON SCHEMA og TO PUBLIC;
CREATE TABLE og.seen (projection text, stream text, who name);
GRANT INSERT ON og.seen TO PUBLIC;
CREATE FUNCTION og.h(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO og.seen VALUES ('bobs', e.stream, current_user);
END
$$;
CREATE FUNCTION og.other(e esrc.event) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO og.seen VALUES ('others', e.stream, current_user);
END
$$;
CREATE FUNCTION og.r() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM og.seen WHERE projection = 'bobs';
END
$$;
SET ROLE owner_bob;
SELECT esrc.create_projection('bobs', 'og.h(esrc.event)', ARRAY['acct'], partitions => 2,
                              reset_function => 'og.r()');
SELECT esrc.create_subscription('bobsub', ARRAY['acct']);
RESET ROLE;
SET ROLE owner_alice;
SELECT esrc.create_projection('others', 'og.other(esrc.event)', ARRAY['acct']);
RESET ROLE;
SQL

check() {   # check DESCRIPTION SQL-returning-boolean
    local got
    got=$(q -c "SELECT ($2)")
    [ "$got" = t ] || die "$1: $(q -c "SELECT projection, partition, state, applied, attempts, blocked_position,
                                              last_error, last_error_sqlstate FROM esrc.projection_status ORDER BY 1, 2")"
    log "ok: $1"
}
wait_for() {   # up to 60 s until SQL is true
    local i
    for i in $(seq 1 120); do
        [ "$(q -c "SELECT ($2)")" = t ] && return 0
        sleep 0.5
    done
    check "$1" "$2"
}
sqlstate_of() {   # the SQLSTATE of a statement that must fail (as postgres, in $2 or app)
    q -d "${2:-app}" -c "DO \$\$ BEGIN $1; RAISE EXCEPTION 'no error'; EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'SQLSTATE %', SQLSTATE; END \$\$" 2>&1 \
        | sed -n 's/.*SQLSTATE \([0-9A-Z]*\).*/\1/p'
}
applied() { echo "(SELECT sum(applied) FROM esrc.projection_status WHERE projection = '$1')"; }

q -c "SELECT count(esrc.append('acct-' || i, 'Opened', '{}')) FROM generate_series(1, 10) i" >/dev/null
wait_for "bobs applied the first 10 events" "$(applied bobs) = 10 AND $(applied others) = 10"
check "as owner_bob" "(SELECT bool_and(who = 'owner_bob') FROM og.seen WHERE projection = 'bobs')"

[ "$(sqlstate_of "DROP ROLE owner_bob")" = 2BP01 ] || die "DROP ROLE owner_bob in app: not 2BP01"
log "ok: DROP ROLE owner_bob in app (esrc) refused: 2BP01"
bob=$(q -c "SELECT oid FROM pg_roles WHERE rolname = 'owner_bob'")
psql -qX -v ON_ERROR_STOP=1 -d postgres -c "DROP ROLE owner_bob"
log "ok: DROP ROLE owner_bob from database postgres (no esrc) succeeded (role $bob)"

q -c "SELECT count(esrc.append('acct-' || i, 'Changed', '{}')) FROM generate_series(1, 10) i" >/dev/null
wait_for "bobs paused by the worker" \
    "(SELECT bool_and(state = 'paused') FROM esrc.projection_status WHERE projection = 'bobs')"
check "its partitions say why: last_error and SQLSTATE 42704" \
    "(SELECT bool_and(last_error LIKE 'owner of projection \"bobs\" does not exist (role $bob was dropped)%'
                      AND last_error_sqlstate = '42704')
      FROM esrc.projection_status WHERE projection = 'bobs')"
check "its handler never ran as the dropped role: nothing applied, no attempts, not blocked" \
    "$(applied bobs) = 10 AND (SELECT count(*) FROM og.seen WHERE projection = 'bobs') = 10
     AND (SELECT bool_and(attempts = 0 AND blocked_position IS NULL) FROM esrc.projection_status
          WHERE projection = 'bobs')"
wait_for "the other projection went on" "$(applied others) = 20"
grep -q 'WARNING:  owner of projection "bobs" does not exist, projection paused' "$dir/server.log" \
    || die "no WARNING in the server log"
log "ok: the server log has the WARNING"

[ "$(sqlstate_of "PERFORM esrc.projection_resume('bobs')")" = 42704 ] \
    || die "projection_resume with the owner gone: not 42704"
log "ok: projection_resume with the owner gone: 42704"
check "still paused, nothing applied" \
    "(SELECT paused FROM esrc.projections WHERE name = 'bobs') AND $(applied bobs) = 10"
[ "$(sqlstate_of "PERFORM esrc.reset_projection('bobs')")" = 42704 ] \
    || die "reset_projection with the owner gone: not 42704"
log "ok: reset_projection (runs the reset function as the owner): 42704"

q -c "UPDATE esrc.projections SET owner = 'owner_alice' WHERE name = 'bobs'" >/dev/null
q -c "UPDATE esrc.subscriptions SET owner = 'owner_alice' WHERE name = 'projection:bobs'" >/dev/null
q -c "SELECT esrc.projection_resume('bobs')" >/dev/null
wait_for "given a new owner and resumed, bobs caught up" "$(applied bobs) = 20"
check "the new events as owner_alice" \
    "(SELECT count(*) FROM og.seen WHERE projection = 'bobs' AND who = 'owner_alice') = 10"
check "running again" \
    "(SELECT bool_and(state IN ('running', 'waiting')) FROM esrc.projection_status WHERE projection = 'bobs')"

q -c "SELECT esrc.drop_subscription('bobsub')" >/dev/null
check "a superuser dropped the subscription of the dropped role" \
    "NOT EXISTS (SELECT FROM esrc.subscriptions WHERE name = 'bobsub')"
log "owner gone: all checks passed"
