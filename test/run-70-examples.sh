#!/usr/bin/env bash
# The application examples run against real servers, so they cannot rot.
# They run as their READMEs say: set up by an administrator (the extension,
# examples/security_service.sql), then used by an application role "app"
# that is no superuser and has only the esrc roles it needs (esrc_reader,
# esrc_writer, esrc_subscriber), CREATE on the database (projections.sql
# creates its schema) and INSERT on the consumer's results table, which the
# administrator created in public (PostgreSQL 15 and later let app create
# nothing there), against a log that holds tombstones of every kind (erase_stream, delete_stream,
# delete_stream hard) before, among and after the examples' events:
#   examples/python/security_service.py  psycopg command handlers with a
#                                        40001 retry loop (self-check)
#   examples/projections/projections.sql read models of the same users kept by
#                                        projections, a blue/green swap and a
#                                        reset (self-check against the
#                                        snapshot), checked again after
#                                        users of its own are erased
#                                        (security.erase_user) and deleted
#                                        while its projections run; then
#                                        nothing of the erased user (names,
#                                        e-mail, its hash, its rows) is
#                                        left in any table of the examples,
#                                        the snapshot and the lookup table
#                                        included, nor in the log
#   examples/subscriptions/consumer.py   a subscription member: its results
#                                        table must equal the category as
#                                        read_category returns it, tombstones
#                                        included
#   examples/java                        a plain Kafka consumer of the topic
#                                        the users were forwarded to, the
#                                        tombstones (null values) included
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

ensure_python_psycopg
FWD_DB=examples
dir=$(test_tmpdir examples)
consumer_pid=
trap '[ -z "$consumer_pid" ] || kill "$consumer_pid" 2>/dev/null || true; fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg"

APP_DSN="host=127.0.0.1 port=$FWD_PORT user=app dbname=$FWD_DB"
as_admin() { psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qAtX -v ON_ERROR_STOP=1 "$@"; }
as_app() { psql -h 127.0.0.1 -p "$FWD_PORT" -U app -d "$FWD_DB" -qAtX -v ON_ERROR_STOP=1 "$@"; }

# the administrator: the application role, the consumer's results table
# (consumer.py's own DDL), the security service
as_admin -c "CREATE ROLE app LOGIN IN ROLE esrc_reader, esrc_writer, esrc_subscriber" \
         -c "GRANT CREATE ON DATABASE $FWD_DB TO app"
as_admin -c "$(cd "$ESRC_ROOT/examples/subscriptions" &&
               python3 -B -c 'import consumer; print(consumer.RESULTS_DDL.format("public.consumed_events"))')" \
         -c "GRANT SELECT, INSERT ON public.consumed_events TO app"
as_admin -f "$ESRC_ROOT/examples/security_service.sql" >/dev/null
[ "$(as_app -c "SELECT rolsuper OR rolcreaterole OR rolbypassrls FROM pg_roles WHERE rolname = current_user")" = f ] \
    || die "the role app must be an ordinary role"

# tombstones before the examples' events: users erased, deleted, deleted
# for good (erase_stream and delete_stream need esrc_admin: the admin's)
as_app -c "SELECT security.register_user(e || '@example.com', initcap(e))
           FROM unnest(ARRAY['erased', 'deleted', 'gone', 'renamed']) e" >/dev/null
as_app -c "SELECT security.change_user_name(security.user_id_of('renamed@example.com'), 'Renamed')" >/dev/null
stream_of() { as_app -c "SELECT 'user-' || security.user_id_of('$1@example.com')"; }
as_admin -c "SELECT security.erase_user(security.user_id_of('erased@example.com'), 'subject request')" \
         -c "SELECT esrc.delete_stream('$(stream_of deleted)', 'closed')" \
         -c "SELECT esrc.delete_stream('$(stream_of gone)', 'fraud', hard => true)" \
         -c "SELECT esrc.delete_stream('$(stream_of renamed)', 'closed')" >/dev/null
# a soft-deleted stream goes on after its tombstone
as_app -c "SELECT security.change_user_name(security.user_id_of('renamed@example.com'), 'Back')" >/dev/null
# an e-mail is registered once, whatever its case
if as_app -c "SELECT security.register_user('Renamed@Example.com', 'Twice')" >"$dir/twice.out" 2>&1; then
    die "security.register_user: a second registration of an e-mail was accepted"
fi
grep -q 'already registered' "$dir/twice.out" || { cat "$dir/twice.out"; die "security.register_user: not the duplicate's error"; }

log "python: examples/python/security_service.py (as app)"
python3 "$ESRC_ROOT/examples/python/security_service.py" "$APP_DSN"

log "sql: examples/projections/projections.sql (as app)"
as_app -f "$ESRC_ROOT/examples/projections/projections.sql" >"$dir/projections.out" 2>&1 \
    || { cat "$dir/projections.out"; die "examples/projections/projections.sql failed"; }
grep -c '^ok: ' "$dir/projections.out" | grep -qx 3 || { cat "$dir/projections.out"; die "projections: expected 3 checks"; }

# tombstones among them: users of projections.sql erased and deleted while
# its projections run; the read models follow, and check() says so
ken=$(stream_of ken)
barbara=$(stream_of barbara)
ken_hash=$(as_admin -c "SELECT encode(security.email_hash('ken@example.com'), 'hex')")
as_admin -c "SELECT security.erase_user(security.user_id_of('ken@example.com'), 'subject request')" \
         -c "SELECT esrc.delete_stream('$barbara', 'closed')" >/dev/null
out=$(as_app -c "SELECT directory.wait_caught_up('user_names_v2')" \
             -c "SELECT directory.wait_caught_up('users_per_letter')" \
             -c "SELECT directory.check()" 2>&1) || { echo "$out"; die "projections: check after the tombstones failed"; }
echo "$out" | grep -q '^ok: ' || { echo "$out"; die "projections: no check after the tombstones"; }
log "projections after erasing ken and deleting barbara: $(echo "$out" | grep '^ok: ')"
as_app -c "SELECT count(*) FROM directory.user_names WHERE stream IN ('$ken', '$barbara')" \
    | grep -qx 0 || die "projections: an erased or deleted user is still in directory.user_names"
# nothing of the erased user is left in any table of the examples (read
# models, the snapshot, the lookup table), nor in the log: not its names
# (Ken, Kenneth), its e-mail or its hash, nor a row of its stream outside
# the log (its name, an opaque id, stays in the log by design)
left=$(as_admin -c "SELECT string_agg(format('%s (%s rows)', t, n), ', ')
                    FROM (SELECT c.oid::regclass AS t,
                                 (xpath('/row/n/text()', query_to_xml(format(
                                     'SELECT count(*) AS n FROM %s r WHERE r::text ~ %L OR (%L AND r::text LIKE %L)',
                                     c.oid::regclass, 'ken@example|Kenneth|\"Ken\"|$ken_hash',
                                     n.nspname <> 'esrc', '%$ken%'), false, true, '')))[1]::text::int AS n
                          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                          WHERE c.relkind IN ('r', 'p') AND (n.nspname IN ('security', 'directory', 'public')
                                                             OR c.oid = 'esrc.events'::regclass)) x
                    WHERE n > 0")
[ -z "$left" ] || die "erasure: the erased user is still in $left"
[ "$(as_admin -c "SELECT count(*) FROM security.users WHERE stream = '$ken'")$(as_app -c "SELECT security.user_id_of('ken@example.com') IS NULL")" = 0t ] \
    || die "erasure: the erased user's snapshot row or lookup row is left"
log "erasure: nothing of the erased user in the read models, the snapshot, the lookup table or the log"

log "python: examples/subscriptions/consumer.py (as app)"
as_app -c "SELECT esrc.create_subscription('users-feed', ARRAY['user'], partitions => 2)" >/dev/null
python3 "$ESRC_ROOT/examples/subscriptions/consumer.py" "$APP_DSN" users-feed member-1 \
    --wait 1 --max-count 7 >"$dir/consumer.out" 2>&1 &
consumer_pid=$!
# every event of the category as readers see it (hidden events skipped,
# tombstones delivered): what the results table must hold, once each
expected=$(as_app -c "SELECT count(*) FROM esrc.read_category('user', 0, 1000000)")
deadline=$((SECONDS + 60))
while :; do
    got=$(as_app -c "SELECT count(*) FROM consumed_events" 2>/dev/null || echo -1)
    [ "$got" = "$expected" ] && break
    kill -0 "$consumer_pid" 2>/dev/null || { cat "$dir/consumer.out"; die "consumer.py exited"; }
    [ $SECONDS -lt $deadline ] || { cat "$dir/consumer.out"; die "consumer.py: $got of $expected events in 60 s"; }
    sleep 0.2
done
kill -TERM "$consumer_pid"
wait "$consumer_pid" || { cat "$dir/consumer.out"; die "consumer.py failed"; }
consumer_pid=
grep -q '^member-1: stopped after' "$dir/consumer.out" || { cat "$dir/consumer.out"; die "consumer.py did not stop"; }
diff=$(as_app -c "SELECT count(*) FROM (
                    (SELECT position, stream, version, type FROM consumed_events
                     EXCEPT ALL SELECT position, stream, version, type FROM esrc.read_category('user', 0, 1000000))
                    UNION ALL
                    (SELECT position, stream, version, type FROM esrc.read_category('user', 0, 1000000)
                     EXCEPT ALL SELECT position, stream, version, type FROM consumed_events)) d")
[ "$diff" = 0 ] || die "consumer.py: its results differ from the category in $diff rows"
tombs=$(as_app -c "SELECT count(*) FROM consumed_events WHERE type LIKE 'esrc.%'")
[ "$tombs" -ge 6 ] || die "consumer.py: $tombs tombstones in its results, expected 6 or more"
log "consumer.py: $expected events once each, $tombs of them tombstones; $(tail -1 "$dir/consumer.out")"

fwd_wait_forwarded 60
n=$(fwd_sql "SELECT count(*) FROM esrc.events WHERE category = 'user'")
t=$(fwd_sql "SELECT count(*) FROM esrc.events WHERE category = 'user' AND type LIKE 'esrc.%'")
log "java: examples/java reads the $n forwarded events of topic esrc.user ($t tombstones)"
bash "$ESRC_ROOT/examples/java/run.sh" "$FWD_BROKER" esrc.user "$n" 60 >"$dir/java.out" \
    || { tail -20 "$dir/java.out"; die "examples/java failed"; }
tail -3 "$dir/java.out"
[ "$(grep -c ' value=null$' "$dir/java.out")" = "$t" ] \
    || die "java: expected $t tombstones (value=null) in its output"
