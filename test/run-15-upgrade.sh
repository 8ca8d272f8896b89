#!/usr/bin/env bash
# The upgrade path: every released version's install script followed by
# ALTER EXTENSION esrc UPDATE must end where a fresh install of the current
# version does, and keep what the database held.
#
# For each released version V (an esrc--V.sql install script other than
# the current one), in database "up_V":
#   CREATE EXTENSION esrc VERSION 'V', append events (single, batch, with
#   metadata), create a snapshot, grant the roles to a user, record a
#   forwarding position; then ALTER EXTENSION esrc UPDATE.  Checks: the
#   log, the sequence, the snapshot rows and the forwarding state are
#   byte-identical to before; the version is the current one; appends go
#   on at the next version and position and the snapshot follows them; the
#   user keeps its rights; the horizon published for hot standbys starts at
#   the log's (not 0); and test/upgrade/catalog.sql describes the
#   extension's objects exactly as it does in a fresh "fresh" database.
#   Where the version has subscriptions, a role owns a subscription and a
#   projection, upgrade_app consumes it and a role dropped before the
#   upgrade did: after it, exactly the two existing roles hold USAGE on the
#   marker esrc.referenced_role (not as initial privileges: catalog.sql),
#   and DROP ROLE of the owner from another database fails.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

dir=$(test_tmpdir upgrade)
port=$(free_port)
trap 'pg_stop "$dir" immediate; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
pg_start "$dir" "$port"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres
q() { local db=$1; shift; psql -qAtX -v ON_ERROR_STOP=1 -d "$db" "$@"; }

current=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$ESRC_ROOT/esrc.control")
sharedir=$("$PG_BINDIR/pg_config" --sharedir)
versions=$(cd "$sharedir/extension" && ls esrc--*.sql | grep -v -- '--.*--' \
    | sed 's/^esrc--\(.*\)\.sql$/\1/' | grep -vx "$current" | sort -V)
[ -n "$versions" ] || die "no released install script (esrc--V.sql) besides $current is installed"

q postgres -c "CREATE DATABASE fresh"
q fresh -c "CREATE EXTENSION esrc"
q fresh -f "$ESRC_ROOT/test/upgrade/catalog.sql" >"$dir/fresh.catalog"
[ "$(wc -l <"$dir/fresh.catalog")" -gt 100 ] || die "catalog description of a fresh install is too short"
q postgres -c "DO \$\$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'upgrade_app') THEN CREATE ROLE upgrade_app LOGIN; END IF; END\$\$"
q postgres -c "GRANT esrc_writer TO upgrade_app"

# The state that must survive an upgrade, as text.
state() {
    q "$1" <<'SQL'
-- the columns of 0.1.0 (0.3.0 adds tags, null for the events before it)
SELECT 'events ' || md5(string_agg((e.position, e.stream, e.version, e.type, e.data, e.metadata,
                                    e.id, e.recorded_at, e.category)::text, E'\n' ORDER BY position))
FROM esrc.events e;
SELECT 'sequence ' || last_value || ' ' || is_called FROM esrc.position_seq;
SELECT 'snapshot ' || md5(string_agg(u::text, E'\n' ORDER BY stream)) FROM public.up_users u;
SELECT 'snapshot definition ' || snapshot::text || ' ' || category || ' ' || reducer || ' ' || initial_state::text
  FROM esrc.snapshots ORDER BY 1;
SELECT 'forwarder ' || log_id || ' ' || position FROM esrc.forwarder_state;
SELECT 'skips ' || count(*) FROM esrc.forwarder_skips;
SQL
}

for v in $versions; do
    db="up_${v//./_}"
    log "upgrade from $v to $current ($db)"
    q postgres -c "CREATE DATABASE $db"
    q "$db" -c "CREATE EXTENSION esrc VERSION '$v'"
    [ "$(q "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'esrc'")" = "$v" ] \
        || die "CREATE EXTENSION esrc VERSION '$v' did not install $v"
    q "$db" >/dev/null <<'SQL'
SET ROLE upgrade_app;
SELECT esrc.append('user-1', 'UserRegistered', '{"name": "ann"}', expected_version => -1);
SELECT esrc.append('user-1', 'UserNameChanged', '{"name": "anne"}', '{"by": "test"}', expected_version => 0);
SELECT esrc.append_batch('user-2', '[{"type": "UserRegistered", "data": {"name": "bob"}},
                                     {"type": "UserNameChanged", "data": {"name": "bobby"}}]', -1);
SELECT esrc.append('order-1', 'OrderPlaced', '{"total": 10}');
RESET ROLE;
SELECT esrc.create_snapshot('public.up_users', 'user', 'esrc.merge(jsonb, esrc.event)');
UPDATE esrc.forwarder_state SET position = 3;
INSERT INTO esrc.forwarder_skips (position, stream, reason) VALUES (2, 'user-1', 'upgrade test');
SQL
    state "$db" >"$dir/$db.before"
    # roles the catalogs refer to get the marker esrc.referenced_role
    # (docs/subscriptions.md), but not one dropped before the upgrade
    has_subs=$(q "$db" -c "SELECT to_regprocedure('esrc.grant_subscription(text, regrole)') IS NOT NULL")
    if [ "$has_subs" = t ]; then
        q "$db" >/dev/null <<SQL
CREATE ROLE ${db}_owner IN ROLE esrc_subscriber, esrc_reader;
CREATE ROLE ${db}_gone;
CREATE FUNCTION public.up_h(e esrc.event) RETURNS void LANGUAGE sql AS 'SELECT';
SET ROLE ${db}_owner;
SELECT esrc.create_subscription('up_sub', ARRAY['user']);
SELECT esrc.create_projection('up_proj', 'public.up_h(esrc.event)', ARRAY['order']);
RESET ROLE;
SELECT esrc.grant_subscription('up_sub', 'upgrade_app');
SELECT esrc.grant_subscription('up_sub', '${db}_gone');
SQL
        q postgres -c "DROP ROLE ${db}_gone"
    fi
    # a grant on a function whose signature 0.3.0 changes is carried over
    q "$db" -c "GRANT EXECUTE ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb) TO upgrade_app"
    q "$db" -c "ALTER EXTENSION esrc UPDATE"
    [ "$(q "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'esrc'")" = "$current" ] \
        || die "ALTER EXTENSION esrc UPDATE from $v did not reach $current"
    [ "$(q "$db" -c "SELECT has_function_privilege('upgrade_app', 'esrc.create_snapshot(text, text, regprocedure, jsonb, boolean)', 'EXECUTE')")" = t ] \
        || die "the upgrade from $v lost upgrade_app's EXECUTE on esrc.create_snapshot"
    q "$db" -c "REVOKE EXECUTE ON FUNCTION esrc.create_snapshot(text, text, regprocedure, jsonb, boolean) FROM upgrade_app"
    state "$db" >"$dir/$db.after"
    if [ "$has_subs" = t ]; then
        got=$(q "$db" -c "SELECT pg_catalog.array_agg(a.grantee::regrole::text ORDER BY a.grantee::regrole::text)
                          FROM pg_type t, aclexplode(t.typacl) a
                          WHERE t.oid = 'esrc.referenced_role'::regtype
                            AND a.grantee NOT IN (0, t.typowner) AND a.privilege_type = 'USAGE'")
        [ "$got" = "{${db}_owner,upgrade_app}" ] \
            || die "after the upgrade from $v the marker's grants are $got, not {${db}_owner,upgrade_app}"
        q postgres -c "DROP ROLE ${db}_owner" 2>"$dir/drop.err" \
            && die "after the upgrade from $v DROP ROLE ${db}_owner from another database succeeded"
        grep -q "1 object in database $db" "$dir/drop.err" || die "DROP ROLE ${db}_owner: $(cat "$dir/drop.err")"
        log "upgrade from $v: the recorded roles got the marker, DROP ROLE from another database refused"
    fi
    diff -u "$dir/$db.before" "$dir/$db.after" >&2 || die "the upgrade from $v changed the stored state"

    # the horizon a standby reads starts at the events already there, not 0
    [ "$(q "$db" -c "SELECT horizon = (SELECT max(position) FROM esrc.events) AND last_position = horizon
                     FROM esrc.standby_horizon")" = t ] \
        || die "after the upgrade from $v esrc.standby_horizon does not start at the log's horizon: $(q "$db" -c "SELECT horizon, last_position FROM esrc.standby_horizon")"

    q "$db" -f "$ESRC_ROOT/test/upgrade/catalog.sql" >"$dir/$db.catalog"
    diff -u "$dir/fresh.catalog" "$dir/$db.catalog" >&2 \
        || die "after the upgrade from $v the extension's objects differ from a fresh $current install (- fresh, + upgraded)"

    # appends, reads and the snapshot go on after the upgrade
    got=$(q "$db" <<'SQL'
SET ROLE upgrade_app;
SELECT esrc.append('user-1', 'UserNameChanged', '{"name": "annie"}', expected_version => 1);
SELECT count(*) FROM esrc.read_all(0, 100);
SELECT version || ' ' || (state->>'name') FROM esrc.load('public.up_users', 'user-1');
RESET ROLE;
SELECT (SELECT max(position) FROM esrc.events) = (SELECT last_value FROM esrc.position_seq);
SQL
)
    expected=$'2\n6\n2 annie\nt'
    [ "$got" = "$expected" ] || die "after the upgrade from $v: got $(printf %q "$got"), expected $(printf %q "$expected")"
    log "upgrade from $v: state kept, catalog equal to a fresh install ($(wc -l <"$dir/fresh.catalog") facts), appends go on"
done
