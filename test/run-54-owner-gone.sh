#!/usr/bin/env bash
# The roles of esrc's catalogs and DROP ROLE from another database.
#   database app (esrc): roles own projections and subscriptions or
#     consume one; DROP ROLE of each from database postgres fails (2BP01,
#     "1 object in database app": the marker esrc.referenced_role,
#     src/projection/rolemarker.c); after revoke_subscription,
#     drop_subscription + drop_projection, DROP OWNED in app, it succeeds.
#     In app, DROP ROLE lists esrc's objects (src/projection/owners.c);
#     a caller without CREATEROLE gets PostgreSQL's 42501 first.
# Then the owner of a projection dropped from another database (issue 24,
# finding 3), as in a database upgraded from 0.2.0 where that happened
# before the upgrade: the marker's grant is revoked by hand, and the
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

# DROP ROLE from another database (src/projection/rolemarker.c): refused
# while an esrc object of app refers to the role, as owner or consumer.
drop_elsewhere() {   # drop_elsewhere ROLE: DROP ROLE from database postgres; prints the error
    psql -qAtX -v ON_ERROR_STOP=1 -d postgres -c "DROP ROLE $1" 2>&1 >/dev/null || true
}
refused_elsewhere() {   # refused_elsewhere ROLE WHAT
    local err
    err=$(drop_elsewhere "$1")
    case $err in
        *"role \"$1\" cannot be dropped because some objects depend on it"*"1 object in database app"*) ;;
        *) die "DROP ROLE $1 from database postgres ($2): not refused: $err" ;;
    esac
    [ "$(sqlstate_of "DROP ROLE $1" postgres)" = 2BP01 ] || die "DROP ROLE $1 from postgres: not 2BP01"
    log "ok: DROP ROLE $1 from database postgres refused, 2BP01 ($2)"
}
dropped_elsewhere() {   # dropped_elsewhere ROLE WHAT
    local err
    err=$(drop_elsewhere "$1")
    [ -z "$err" ] || die "DROP ROLE $1 from database postgres ($2): $err"
    log "ok: DROP ROLE $1 from database postgres succeeded ($2)"
}
psql -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE ROLE og_consumer IN ROLE esrc_reader;
CREATE ROLE og_temp IN ROLE esrc_subscriber, esrc_reader;
CREATE ROLE og_owned IN ROLE esrc_subscriber, esrc_reader;
CREATE ROLE og_nobody;
CREATE FUNCTION og.noop(e esrc.event) RETURNS void LANGUAGE sql AS 'SELECT';
SELECT esrc.grant_subscription('bobsub', 'og_consumer');
SET ROLE og_temp;
SELECT esrc.create_subscription('tempsub', ARRAY['acct']);
SELECT esrc.create_projection('tempproj', 'og.noop(esrc.event)', ARRAY['none']);
RESET ROLE;
SET ROLE og_owned;
SELECT esrc.create_subscription('ownedsub', ARRAY['acct']);
RESET ROLE;
SQL
refused_elsewhere owner_bob "owner of projection bobs and subscription bobsub"
refused_elsewhere owner_alice "owner of projection others"
refused_elsewhere og_consumer "consumer of subscription bobsub"
refused_elsewhere og_temp "owner of subscription tempsub and projection tempproj"
refused_elsewhere og_owned "owner of subscription ownedsub"
q -c "SELECT esrc.revoke_subscription('bobsub', 'og_consumer')" >/dev/null
dropped_elsewhere og_consumer "after revoke_subscription"
q -c "SELECT esrc.drop_subscription('tempsub')" >/dev/null
refused_elsewhere og_temp "still the owner of projection tempproj"
q -c "SELECT esrc.drop_projection('tempproj')" >/dev/null
dropped_elsewhere og_temp "after drop_subscription and drop_projection"
q -c "DROP OWNED BY og_owned" >/dev/null
dropped_elsewhere og_owned "after DROP OWNED in app"
check "no role holds the marker but the owners left" \
    "(SELECT array_agg(a.grantee::regrole::text ORDER BY a.grantee::regrole::text)
      FROM pg_type t, aclexplode(t.typacl) a
      WHERE t.oid = 'esrc.referenced_role'::regtype AND a.grantee NOT IN (0, t.typowner))
     = '{owner_alice,owner_bob}'"
# in app: esrc's own listing, before PostgreSQL's (which names the marker only)
err=$(q -c "DROP ROLE owner_bob" 2>&1 >/dev/null || true)
case $err in
    *"cannot be dropped because some objects depend on it"*'owner of projection "bobs"'*'owner of subscription "bobsub"'*) ;;
    *) die "DROP ROLE owner_bob in app: not esrc's listing: $err" ;;
esac
log "ok: DROP ROLE owner_bob in app lists esrc's objects"
# a caller PostgreSQL refuses gets PostgreSQL's refusal, not esrc's listing
[ "$(sqlstate_of "SET ROLE og_nobody; DROP ROLE owner_bob")" = 42501 ] \
    || die "DROP ROLE owner_bob by a role without CREATEROLE: not 42501"
log "ok: without CREATEROLE: PostgreSQL's 42501 first"

# What follows is a database upgraded from 0.2.0 where the role was dropped
# from another database before the upgrade (no marker then): the grant is
# taken away to get there.
q -c "REVOKE USAGE ON TYPE esrc.referenced_role FROM owner_bob"

q -c "SELECT count(esrc.append('acct-' || i, 'Opened', '{}')) FROM generate_series(1, 10) i" >/dev/null
wait_for "bobs applied the first 10 events" "$(applied bobs) = 10 AND $(applied others) = 10"
check "as owner_bob" "(SELECT bool_and(who = 'owner_bob') FROM og.seen WHERE projection = 'bobs')"

[ "$(sqlstate_of "DROP ROLE owner_bob")" = 2BP01 ] || die "DROP ROLE owner_bob in app: not 2BP01"
log "ok: DROP ROLE owner_bob in app (esrc) refused: 2BP01"
bob=$(q -c "SELECT oid FROM pg_roles WHERE rolname = 'owner_bob'")
psql -qX -v ON_ERROR_STOP=1 -d postgres -c "DROP ROLE owner_bob"
log "ok: without the marker's grant, DROP ROLE owner_bob from database postgres (no esrc) succeeded (role $bob)"

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
