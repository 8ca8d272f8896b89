#!/usr/bin/env bash
# A projection whose owner loses the right to read the log (issue 24): the
# workers check it at every batch, before the handler sees an event.
#   - alice (esrc_reader, esrc_subscriber) owns projection "spy" over
#     category "acct" (2 partitions), whose handler copies every event's
#     data into her table; 20 events are applied;
#   - REVOKE esrc_reader FROM alice, then 10 more events: none reaches
#     her table; the projection goes 'paused' on every partition with
#     last_error_sqlstate 42501 and a last_error that says what she lacks
#     and how to go on; projection_resume and reset_projection refuse
#     (42501);
#   - SELECT on some columns of esrc.events only: resume still refused;
#     the pause undone behind the functions' back (UPDATE as superuser):
#     the workers pause it again at the next batch, nothing delivered;
#   - esrc_reader granted back: projection_resume; every event applied
#     once, in order per stream, the 42501 gone from the status.
# Appends go on meanwhile on another category, which a second projection
# (owned by a role that keeps its rights) follows undisturbed.
# A SECURITY DEFINER handler runs as its own owner: bob's projection
# "definer" over category "dfn" calls carol's SECURITY DEFINER function,
# which copies each event into carol's table; REVOKE esrc_reader FROM
# carol pauses it (42501, last_error naming carol) and nothing more
# reaches her table, though bob keeps his rights.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

dir=$(test_tmpdir revoked)
port=$(free_port)
trap 'pg_stop "$dir" immediate; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
pg_start "$dir" "$port" "esrc.projection_workers = 2" "log_min_messages = log"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
check() {   # check DESCRIPTION SQL-returning-boolean
    local got
    got=$(q -c "SELECT ($2)")
    [ "$got" = t ] || die "$1: $(q -c "SELECT projection, partition, state, checkpoint, events_behind, applied,
                                              last_error_sqlstate, last_error FROM esrc.projection_status ORDER BY 1, 2")
seen: $(q -c "SELECT count(*) FROM alice.seen")"
    log "ok: $1"
}
wait_for() {   # wait_for DESCRIPTION SQL: up to 60 s until SQL is true
    local i
    for i in $(seq 1 120); do
        [ "$(q -c "SELECT ($2)")" = t ] && return 0
        sleep 0.5
    done
    check "$1" "$2"
}
sqlstate_as() {   # sqlstate_as ROLE STATEMENT: the SQLSTATE of a statement that must fail
    q -c "SET ROLE $1; DO \$\$ BEGIN $2; RAISE EXCEPTION 'no error'; EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'SQLSTATE %', SQLSTATE; END \$\$" 2>&1 \
        | sed -n 's/.*SQLSTATE \([0-9A-Z]*\).*/\1/p'
}
append_acct() {   # append_acct FROM TO: one event per stream acct-(n % 5), data {"n": n}
    q -c "SELECT esrc.append('acct-' || (n % 5), 'Deposited', jsonb_build_object('n', n))
          FROM generate_series($1, $2) n" >/dev/null
}

q >/dev/null <<'SQL'
CREATE EXTENSION esrc;
CREATE ROLE alice LOGIN IN ROLE esrc_reader, esrc_subscriber;
CREATE ROLE bob LOGIN IN ROLE esrc_reader, esrc_subscriber;
CREATE SCHEMA alice AUTHORIZATION alice;
CREATE SCHEMA bob AUTHORIZATION bob;
SET ROLE alice;
CREATE TABLE alice.seen (stream text, version bigint, data jsonb, seq bigint GENERATED ALWAYS AS IDENTITY,
                         PRIMARY KEY (stream, version));
CREATE FUNCTION alice.copy(event esrc.event) RETURNS void LANGUAGE sql
    BEGIN ATOMIC INSERT INTO alice.seen (stream, version, data) VALUES (event.stream, event.version, event.data); END;
SELECT esrc.create_projection('spy', 'alice.copy(esrc.event)', ARRAY['acct'], partitions => 2, batch_size => 4);
RESET ROLE;
SET ROLE bob;
CREATE TABLE bob.n (k int PRIMARY KEY, n bigint);
INSERT INTO bob.n VALUES (1, 0);
CREATE FUNCTION bob.count(event esrc.event) RETURNS void LANGUAGE sql
    BEGIN ATOMIC UPDATE bob.n SET n = n + 1 WHERE k = 1; END;
SELECT esrc.create_projection('counter', 'bob.count(esrc.event)', ARRAY['side']);
RESET ROLE;
SQL
side() { q -c "SELECT esrc.append('side-1', 'Tick', '{}')" >/dev/null; }

append_acct 1 20
side
wait_for "spy applied the first 20 events" "(SELECT count(*) FROM alice.seen) = 20"

# the right goes; new events are not delivered
q -c "REVOKE esrc_reader FROM alice"
append_acct 21 30
side
wait_for "spy paused on every partition, 42501" \
    "(SELECT bool_and(state = 'paused' AND last_error_sqlstate = '42501') AND count(*) = 2
      FROM esrc.projection_status WHERE projection = 'spy')"
check "last_error says what alice lacks and how to go on" \
    "(SELECT bool_and(last_error LIKE 'projection paused: role \"alice\", its owner, may not read esrc.events.%'
                      AND last_error LIKE '%Grant esrc_reader (or SELECT on esrc.events) to role \"alice\".%'
                      AND last_error LIKE '%esrc.projection_resume(''spy'')%')
      FROM esrc.projection_status WHERE projection = 'spy')"
sleep 2
side
check "none of the new events reached alice's table" \
    "(SELECT count(*) FROM alice.seen) = 20 AND NOT EXISTS (SELECT FROM alice.seen WHERE (data->>'n')::int > 20)"
check "spy's checkpoints stayed before them" \
    "(SELECT sum(events_behind) FROM esrc.projection_status WHERE projection = 'spy') = 10"
st=$(sqlstate_as alice "PERFORM esrc.projection_resume('spy')")
[ "$st" = 42501 ] || die "projection_resume without the right: $st, not 42501"
st=$(sqlstate_as alice "PERFORM esrc.reset_projection('spy')")
[ "$st" = 42501 ] || die "reset_projection without the right: $st, not 42501"
log "ok: projection_resume and reset_projection refused (42501)"

# SELECT on some columns only is not the right to read the log
q -c "GRANT USAGE ON SCHEMA esrc TO alice; GRANT SELECT (position, stream, version, type) ON esrc.events TO alice"
st=$(sqlstate_as alice "PERFORM esrc.projection_resume('spy')")
[ "$st" = 42501 ] || die "projection_resume with some columns: $st, not 42501"
log "ok: projection_resume with SELECT on some columns refused (42501)"
q -c "UPDATE esrc.projections SET paused = false WHERE name = 'spy'"
q -c "UPDATE esrc.projection_partitions SET last_error = NULL, last_error_sqlstate = NULL
      WHERE projection_id = (SELECT id FROM esrc.projections WHERE name = 'spy')"
append_acct 31 32
wait_for "unpaused behind the functions' back, the workers pause spy again" \
    "(SELECT bool_and(state = 'paused' AND last_error_sqlstate = '42501')
      FROM esrc.projection_status WHERE projection = 'spy')"
sleep 1
check "still nothing delivered" "(SELECT count(*) FROM alice.seen) = 20"

# the right comes back: resume, every event once
q -c "GRANT esrc_reader TO alice"
q -c "SET ROLE alice; SELECT esrc.projection_resume('spy')" >/dev/null
append_acct 33 40
wait_for "spy caught up after the resume" \
    "(SELECT bool_and(caught_up) FROM esrc.projection_status WHERE projection = 'spy')"
check "every event applied once, in order per stream" \
    "(SELECT count(*) FROM alice.seen) = 40
     AND (SELECT count(DISTINCT (data->>'n')::int) FROM alice.seen) = 40
     AND NOT EXISTS (SELECT FROM alice.seen s JOIN esrc.events e USING (stream, version) WHERE e.data <> s.data)
     AND NOT EXISTS (SELECT FROM alice.seen a JOIN alice.seen b USING (stream)
                     WHERE a.version < b.version AND a.seq > b.seq)"
check "the status no longer shows the 42501" \
    "(SELECT bool_and(state IN ('running', 'waiting') AND last_error IS NULL)
      FROM esrc.projection_status WHERE projection = 'spy')"
wait_for "counter, owned by bob, followed its category throughout" \
    "(SELECT n FROM bob.n) = (SELECT count(*) FROM esrc.events WHERE category = 'side')
     AND (SELECT bool_and(state IN ('running', 'waiting')) FROM esrc.projection_status WHERE projection = 'counter')"
grep -q 'projection "spy": projection paused: role "alice"' "$dir/server.log" \
    || die "no LOG line for the pause in the server log"
log "ok: the pause is in the server log"

# a SECURITY DEFINER handler: the events reach its owner, carol
q >/dev/null <<'SQL'
CREATE ROLE carol LOGIN IN ROLE esrc_reader;
CREATE SCHEMA carol AUTHORIZATION carol;
GRANT USAGE ON SCHEMA carol TO bob;
SET ROLE carol;
CREATE TABLE carol.loot (stream text, version bigint, data jsonb);
CREATE FUNCTION carol.copy(event esrc.event) RETURNS void LANGUAGE sql SECURITY DEFINER
    BEGIN ATOMIC INSERT INTO carol.loot VALUES (event.stream, event.version, event.data); END;
RESET ROLE;
SET ROLE bob;
SELECT esrc.create_projection('definer', 'carol.copy(esrc.event)', ARRAY['dfn']);
RESET ROLE;
SQL
q -c "SELECT esrc.append('dfn-1', 'Noted', jsonb_build_object('n', n)) FROM generate_series(1, 5) n" >/dev/null
wait_for "carol's handler applied the first 5 events" "(SELECT count(*) FROM carol.loot) = 5"
q -c "REVOKE esrc_reader FROM carol"
q -c "SELECT esrc.append('dfn-1', 'Noted', jsonb_build_object('n', n)) FROM generate_series(6, 10) n" >/dev/null
wait_for "definer paused, 42501, naming carol" \
    "(SELECT bool_and(state = 'paused' AND last_error_sqlstate = '42501'
                      AND last_error LIKE 'projection paused: role \"carol\", which its SECURITY DEFINER handler runs as, may not read esrc.events.%')
      FROM esrc.projection_status WHERE projection = 'definer')"
sleep 1
check "none of the new events reached carol's table" "(SELECT count(*) FROM carol.loot) = 5"
st=$(sqlstate_as bob "PERFORM esrc.projection_resume('definer')")
[ "$st" = 42501 ] || die "projection_resume with carol's right gone: $st, not 42501"
log "ok: projection_resume refused while carol may not read (42501)"
q -c "GRANT esrc_reader TO carol"
q -c "SET ROLE bob; SELECT esrc.projection_resume('definer')" >/dev/null
wait_for "definer caught up after the resume, every event once" \
    "(SELECT count(*) FROM carol.loot) = 10 AND (SELECT count(DISTINCT version) FROM carol.loot) = 10"
log "run-52-revoked-reader: ok"
