#!/usr/bin/env bash
# Projections under load (issue 15).  Two projections of the security
# service's users (examples/security_service.sql), 4 partitions each, run
# by esrc.projection_workers = 2:
#   user_names    into the typed table security.user_names(stream, name,
#                 renamed_count), with a reset function
#   name_letters  users per first letter of their current name
#                 (security.name_letters), a count across streams
# while 8 pgbench writers register and rename 300 users
# (test/projstress/writers.pgbench: rollbacks, out-of-order commits, an
# unfollowed category).  A third of the way in, user_names_v2 (blue/green,
# into security.user_names_v2) is created from the beginning.
# esrc.projection_status is sampled every 100 ms.  After the writers stop
# and every partition has caught up (test/projstress/check.sql):
#   the tables equal the log replayed in plain SQL from esrc.events and
#   the handlers' code run once over esrc.read_all in position order into
#   fresh tables; renames counted once; letters count every user once;
#   each projection's applied = the events of its category; nothing failed;
#   both workers held partitions of every projection.
# Every check is then shown to fail on a planted fault (in a transaction
# rolled back).  Last, the documented blue/green switch under a second
# load: CREATE OR REPLACE VIEW app.user_names over v2 and drop_projection
# of v1 in one transaction; v2 and the view equal the replay.
#
#   ESRC_PROJ_SECONDS (default 30)  length of the write load
set -euo pipefail
source "$(dirname "$0")/lib.sh"

secs=${ESRC_PROJ_SECONDS:-30}
dir=$(test_tmpdir projload)
port=$(free_port)
writers=
sampler=
stop_at_exit "$dir" writers sampler
pg_start "$dir" "$port" "esrc.projection_workers = 2" "deadlock_timeout = '100ms'"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
psql -qX -v ON_ERROR_STOP=1 -v break=0 -v psql="$PG_BINDIR/psql" \
    -f "$ESRC_ROOT/test/projstress/setup.sql" >/dev/null
psql -qX -v ON_ERROR_STOP=1 -f "$ESRC_ROOT/test/projstress/check.sql" >/dev/null

q -c "SELECT esrc.create_projection('user_names', 'security.user_names_v1(esrc.event)', ARRAY['user'],
                                    partitions => 4, reset_function => 'security.user_names_reset()')" >/dev/null
q -c "SELECT esrc.create_projection('name_letters', 'security.name_letters_h(esrc.event)', ARRAY['user'],
                                    partitions => 4)" >/dev/null

# the launcher starts the workers of this database, named in pg_stat_activity
workers_now() {
    q -c "SELECT count(*) FROM pg_stat_activity
          WHERE backend_type LIKE 'esrc projection worker%' AND datname = current_database()"
}
for i in $(seq 1 60); do
    [ "$(workers_now)" = 2 ] && break
    sleep 0.5
done
[ "$(workers_now)" = 2 ] || die "expected 2 projection workers, have $(workers_now)"
log "2 projection workers: $(q -c "SELECT string_agg(backend_type || ' (' || application_name || ')', ', ' ORDER BY backend_type)
                                  FROM pg_stat_activity WHERE backend_type LIKE 'esrc projection worker%'")"

q -c "CALL proj.sample_status()" &
sampler=$!

# wait (up to $1 seconds) until every partition of the projections $2 caught up
wait_caught_up() {
    local limit=$1 names=$2 i
    for i in $(seq 1 $((limit * 2))); do
        [ "$(q -c "SELECT proj.caught_up('$names')")" = t ] && return 0
        sleep 0.5
    done
    q -c "SELECT projection, partition, state, worker, events_behind, attempts, last_error
          FROM esrc.projection_status ORDER BY 1, 2" >&2
    die "projections $names did not catch up in $limit s"
}

log "pgbench: 8 writers for ${secs}s; user_names_v2 created at $((secs / 3))s"
"$PG_BINDIR/pgbench" -n -c 8 -j 2 -T "$secs" -R 400 --max-tries=100 \
    -f "$ESRC_ROOT/test/projstress/writers.pgbench" >"$dir/pgbench.log" 2>&1 &
writers=$!
sleep $((secs / 3))
behind=$(q -c "SELECT count(*) FROM proj.user_events")
q -c "SELECT esrc.create_projection('user_names_v2', 'security.user_names_v2(esrc.event)', ARRAY['user'],
                                    partitions => 4)" >/dev/null
log "user_names_v2 created with $behind events of category user in the log"
wait "$writers" || { cat "$dir/pgbench.log"; die "pgbench failed"; }
writers=
grep -E "^(number of transactions actually processed|number of failed|tps)" "$dir/pgbench.log" | sed 's/^/  /' >&2
grep -q "^number of failed transactions: 0 " "$dir/pgbench.log" || die "appends failed while the projections ran"

wait_caught_up 300 '{user_names,name_letters,user_names_v2}'
q -c "INSERT INTO proj.sampler_stop VALUES (true)"
wait "$sampler" || die "the status sampler failed"
sampler=
n=$(q -c "SELECT proj.replay()")
log "caught up; replayed $n events of category user"
q -c "SELECT '  ' || projection || ': ' || sum(applied) || ' applied, attempts ' || sum(attempts)
             || ', states ' || string_agg(DISTINCT state, '/')
      FROM esrc.projection_status GROUP BY projection ORDER BY projection" >&2
q -c "SELECT '  ' || count(DISTINCT sample) || ' status samples; states seen: '
             || string_agg(DISTINCT state, ', ') FROM proj.status_samples" >&2
q -c "SELECT '  retrying seen: ' || coalesce(string_agg(x, ', '), 'never') FROM
      (SELECT projection || ' ' || count(*) || ' samples (SQLSTATE ' || string_agg(DISTINCT last_error_sqlstate, '/')
              || ', attempts up to ' || max(attempts) || ')' AS x
       FROM proj.status_samples WHERE state = 'retrying' GROUP BY projection) r" >&2

checks() { q -F ' ' -c "SELECT name, ok FROM proj.check_v1 UNION ALL SELECT name, ok FROM proj.check_v2" "$@"; }
checks >"$dir/check.out"
sed 's/^/  /' "$dir/check.out" >&2
[ "$(wc -l <"$dir/check.out")" -eq 17 ] || die "expected 17 checks"
! grep -q ' f$' "$dir/check.out" || die "a projection's table is not the replay of the log (above)"
[ "$n" -gt 2000 ] || die "too little happened: $n events"
# both workers did part of every projection
spread=$(q -c "SELECT string_agg(projection || '=' || w, ' ' ORDER BY projection)
               FROM (SELECT projection, count(DISTINCT worker) AS w FROM proj.status_samples
                     WHERE worker IS NOT NULL GROUP BY 1) x")
log "workers seen holding partitions: $spread"
[ "$spread" = "name_letters=2 user_names=2 user_names_v2=2" ] \
    || die "the partitions were not spread over both workers: $spread"

# every check catches a planted fault (in a transaction rolled back)
planted() {   # planted NAME-PATTERN SQL...
    local pattern=$1 out
    shift
    out=$(q -F ' ' -c "BEGIN" "$@" -c "SELECT name, ok FROM proj.check_v1 UNION ALL SELECT name, ok FROM proj.check_v2" \
          -c "ROLLBACK" | grep -F -- "$pattern")
    [ -n "$out" ] || die "no check '$pattern'"
    ! echo "$out" | grep -q ' t$' || die "the check '$pattern' missed a planted fault: $out"
}
one_user="(SELECT min(stream) FROM proj.expected_user_names WHERE renamed_count > 0)"
planted 'sql replay equals the snapshot' -c "UPDATE security.users SET state = state || '{\"name\": \"x\"}'
    WHERE stream = (SELECT min(stream) FROM security.users)"
planted 'handler replay equals sql replay' -c "UPDATE replay.user_names SET renamed_count = renamed_count + 1
    WHERE stream = $one_user"
planted 'user_names equals sql replay' -c "UPDATE security.user_names SET renamed_count = renamed_count + 1
    WHERE stream = $one_user"
planted 'user_names equals handler replay' -c "UPDATE security.user_names SET name = 'x' WHERE stream = $one_user"
planted 'rename_tally equals' -c "UPDATE proj.rename_tally SET renames = renames + 1 WHERE stream = $one_user"
planted 'name_letters equals' -c "UPDATE security.name_letters SET users = users + 1
    WHERE letter = (SELECT min(letter) FROM security.name_letters)"
planted 'letters count every user once' -c "UPDATE security.name_letters SET users = users + 1
    WHERE letter = (SELECT max(letter) FROM security.name_letters)"
planted 'applied counts every event once (user_names)' -c "UPDATE esrc.projection_partitions SET applied = applied + 1
    WHERE projection_id = (SELECT id FROM esrc.projections WHERE name = 'user_names') AND partition = 0"
planted 'applied counts every event once (name_letters)' -c "UPDATE esrc.projection_partitions SET applied = applied - 1
    WHERE projection_id = (SELECT id FROM esrc.projections WHERE name = 'name_letters') AND partition = 1"
planted 'applied counts every event once (user_names_v2)' -c "UPDATE esrc.projection_partitions SET applied = applied + 1
    WHERE projection_id = (SELECT id FROM esrc.projections WHERE name = 'user_names_v2') AND partition = 2"
planted 'every partition caught up, none failed (user_names)' -c "SELECT esrc.projection_pause('user_names')"
planted 'every partition caught up, none failed (name_letters)' -c "SELECT esrc.projection_pause('name_letters')"
planted 'every partition caught up, none failed (user_names_v2)' -c "SELECT esrc.projection_pause('user_names_v2')"
planted 'user_names_v2 equals sql replay' -c "DELETE FROM security.user_names_v2 WHERE stream = $one_user"
planted 'user_names_v2 equals handler replay' -c "UPDATE security.user_names_v2 SET renamed_count = 0 WHERE stream = $one_user"
planted 'app.user_names equals sql replay' -c "CREATE OR REPLACE VIEW app.user_names AS
    SELECT stream, name, renamed_count + 1 AS renamed_count FROM security.user_names"
# a replay that is deliberately wrong (a rename dropped from the log's
# replay) makes the table checks fail
out=$(q -F ' ' -c "BEGIN" \
      -c "CREATE OR REPLACE VIEW proj.expected_user_names AS
          SELECT r.stream AS stream, l.data->>'name' AS name,
                 (SELECT count(*) FROM esrc.events c
                  WHERE c.stream = r.stream AND c.type = 'UserNameChanged' AND c.version > 1)::int AS renamed_count
          FROM esrc.events r
          CROSS JOIN LATERAL (SELECT data FROM esrc.events x WHERE x.stream = r.stream
                              ORDER BY version DESC LIMIT 1) l
          WHERE r.category = 'user' AND r.type = 'UserRegistered'" \
      -c "SELECT name, ok FROM proj.check_v1" -c "ROLLBACK" | grep -F 'user_names equals sql replay')
[[ "$out" == *" f" ]] || die "a wrong replay was not caught: $out"
log "every check caught its planted fault"

# blue/green: switch the application's view to v2 and drop v1 in one
# transaction, under load
"$PG_BINDIR/pgbench" -n -c 8 -j 2 -T 6 -R 400 --max-tries=100 \
    -f "$ESRC_ROOT/test/projstress/writers.pgbench" >"$dir/pgbench-2.log" 2>&1 &
writers=$!
sleep 2
q -c "BEGIN" -c "CREATE OR REPLACE VIEW app.user_names AS SELECT * FROM security.user_names_v2" \
  -c "SELECT esrc.drop_projection('user_names')" -c "COMMIT" >/dev/null
log "app.user_names switched to user_names_v2, user_names dropped, under load"
wait "$writers" || { cat "$dir/pgbench-2.log"; die "pgbench failed"; }
writers=
grep -q "^number of failed transactions: 0 " "$dir/pgbench-2.log" || die "appends failed during the switch"
left=$(q -c "SELECT (SELECT count(*) FROM esrc.projections WHERE name = 'user_names')
                  + (SELECT count(*) FROM esrc.subscriptions WHERE name = 'projection:user_names')
                  + (SELECT count(*) FROM esrc.projection_status WHERE projection = 'user_names')")
[ "$left" = 0 ] || die "user_names was not dropped entirely ($left rows left)"
[ "$(q -c "SELECT pg_get_viewdef('app.user_names') LIKE '%user_names_v2%'")" = t ] || die "the view was not switched"
wait_caught_up 120 '{user_names_v2,name_letters}'
n=$(q -c "SELECT proj.replay()")
q -F ' ' -c "SELECT name, ok FROM proj.check_v2" >"$dir/check2.out"
sed 's/^/  /' "$dir/check2.out" >&2
[ "$(wc -l <"$dir/check2.out")" -eq 5 ] || die "expected 5 checks"
! grep -q ' f$' "$dir/check2.out" || die "after the switch, v2 is not the replay of the log (above)"
log "projections equal the replay of the log ($n events), blue/green switch done"
