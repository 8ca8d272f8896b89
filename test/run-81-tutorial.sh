#!/usr/bin/env bash
# The README's tutorial, exactly as shown (test/tutorial/extract.py takes
# every fenced block after a "<!-- tutorial: WHO -->" line), on a fresh
# server in a database "shop": the administrator's block as postgres, the
# migration as accounts_owner (twice: it must be repeatable), the
# application's blocks as accounts_app, which is no superuser; a block
# marked "fails with SQLSTATE" must fail with exactly that.  Then what the
# tutorial says is checked: the versions it shows, the decrypted state, no
# e-mail in clear in the log, a retried command stored once; and the
# Python handler of "Using esrc from an application", run as accounts_app
# from three threads at once with their own command ids, ends at three
# consecutive versions, each rename once.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ensure_python_psycopg
dir=$(test_tmpdir tutorial)
port=$(free_port)
trap 'pg_stop "$dir" immediate; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
pg_start "$dir" "$port"
psql -h 127.0.0.1 -p "$port" -U postgres -qAtX -c "CREATE DATABASE shop" >/dev/null
as() { local who=$1; shift; psql -h 127.0.0.1 -p "$port" -U "$who" -d shop -qAtX -v ON_ERROR_STOP=1 "$@"; }

python3 "$ESRC_ROOT/test/tutorial/extract.py" "${ESRC_TUTORIAL_README:-$ESRC_ROOT/README.md}" "$dir" >&2
user=user-a81bc81b-dead-4e5d-abff-90865d1e13b1
fails=0
expect() { # expect WHAT GOT WANT
    if [ "$2" = "$3" ]; then log "ok: $1"; else log "FAILED: $1: got '$2', want '$3'"; fails=$((fails + 1)); fi
}
runs=0
while read -r file who sqlstate; do
    case $file in
    *.py) continue ;;   # below, after the SQL blocks
    esac
    times=1
    [ "$who" = accounts_owner ] && times=2   # "every statement can run again"
    for ((k = 1; k <= times; k++)); do
        log "block $file as $who$([ "$sqlstate" = - ] || echo ", must fail with $sqlstate")"
        if [ "$sqlstate" = - ]; then
            as "$who" -f "$dir/$file" >"$dir/$file.out$k" 2>&1 || { cat "$dir/$file.out$k"; die "tutorial block $file failed as $who"; }
        else
            if as "$who" -v VERBOSITY=sqlstate -f "$dir/$file" >"$dir/$file.out$k" 2>&1; then
                die "tutorial block $file should fail with $sqlstate"
            fi
            grep -q "ERROR:  $sqlstate" "$dir/$file.out$k" || { cat "$dir/$file.out$k"; die "tutorial block $file: not $sqlstate"; }
        fi
        runs=$((runs + 1))
    done
    if [ "$who" = accounts_app ] && [ "$sqlstate" = - ] && [ ! -f "$dir/app.out" ]; then cp "$dir/$file.out1" "$dir/app.out"; fi
done <"$dir/blocks"

expect "accounts_app is an ordinary role" \
    "$(as postgres -c "SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls FROM pg_roles WHERE rolname = 'accounts_app'")" f
prefix=$(as postgres -c "SELECT left(data->>'email', 12) FROM esrc.events WHERE stream = '$user' AND version = 0")
expect "the stored e-mail is an esrc envelope" "${prefix:0:8}" "esrc:v1:"
expect "the application's block printed what the README shows (0, 1, 1, the state, the stream)" \
    "$(tr '\n' ' ' <"$dir/app.out")" \
    "0 1 1 1|Alexandra|alex@example.com 0|UserRegistered|Alex|$prefix 1|UserRenamed|Alexandra| "
expect "the stream holds two events (the retried rename once)" \
    "$(as postgres -c "SELECT string_agg(version || ':' || type, ',' ORDER BY version) FROM esrc.events WHERE stream = '$user'")" \
    "0:UserRegistered,1:UserRenamed"
expect "no e-mail in clear anywhere in the log or the snapshot" \
    "$(as postgres -c "SELECT (SELECT count(*) FROM esrc.events WHERE data::text LIKE '%@example.com%')
                           + (SELECT count(*) FROM accounts.users WHERE state::text LIKE '%@example.com%')")" 0
expect "the event ids are the commands' ids" \
    "$(as postgres -c "SELECT string_agg(id::text, ',' ORDER BY version) FROM esrc.events WHERE stream = '$user'")" \
    "0b5d6c2e-4c47-4a55-9b1e-000000000001,0b5d6c2e-4c47-4a55-9b1e-000000000002"
expect "the snapshot table is owned by the migration role" \
    "$(as postgres -c "SELECT tableowner FROM pg_tables WHERE schemaname = 'accounts' AND tablename = 'users'")" accounts_owner

# the reference: every column of every view of schema esrc in the README's
# Views section (and shown to fail on a view that is not documented)
as postgres -c "SELECT c.relname || '|' || a.attname FROM pg_class c
                JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'esrc'
                JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                WHERE c.relkind = 'v'" >"$dir/views"
if out=$(python3 "$ESRC_ROOT/test/tutorial/views.py" "$ESRC_ROOT/README.md" "$dir/views" 2>&1); then
    log "ok: the README's Views section: $out"
else
    log "FAILED: the README's Views section:"; echo "$out" >&2; fails=$((fails + 1))
fi
{ cat "$dir/views"; echo "undocumented_view|a_column"; } >"$dir/views.tampered"
expect "views.py refuses a view the README does not document" \
    "$(python3 "$ESRC_ROOT/test/tutorial/views.py" "$ESRC_ROOT/README.md" "$dir/views.tampered" >/dev/null 2>&1 && echo accepted || echo refused)" refused

# the Python handler, as accounts_app, three renames at once
py=$(awk '$2 == "python" { print $1 }' "$dir/blocks")
[ -n "$py" ] || die "no Python block in the tutorial"
cat >"$dir/run.py" <<PY
import random, sys, threading, time, uuid
import psycopg
from psycopg.types.json import Jsonb
class UnknownUser(Exception):
    pass
exec(open("$dir/$py").read())
dsn = "host=127.0.0.1 port=$port dbname=shop user=accounts_app"
user_id = "a81bc81b-dead-4e5d-abff-90865d1e13b1"
results, barrier = {}, threading.Barrier(3)
def worker(n):
    with psycopg.connect(dsn) as conn:
        barrier.wait()
        results[n] = rename_user(conn, str(uuid.uuid4()), user_id, "Alex%d" % n)
threads = [threading.Thread(target=worker, args=(n,)) for n in (1, 2, 3)]
for t in threads: t.start()
for t in threads: t.join()
print(",".join(str(v) for v in sorted(results.values())))
try:
    with psycopg.connect(dsn) as conn:
        rename_user(conn, str(uuid.uuid4()), "00000000-0000-4000-8000-000000000000", "Nobody")
    print("no error")
except UnknownUser:
    print("UnknownUser")
PY
python3 "$dir/run.py" >"$dir/py.out" 2>&1 || { cat "$dir/py.out"; die "the Python handler failed"; }
expect "the README's Python handler: three concurrent renames end at versions 2, 3, 4" "$(sed -n 1p "$dir/py.out")" "2,3,4"
expect "the README's Python handler refuses an unknown user" "$(sed -n 2p "$dir/py.out")" UnknownUser
expect "each of the three renames is in the log once" \
    "$(as postgres -c "SELECT string_agg(data->>'name', ',' ORDER BY data->>'name') FROM esrc.read_stream('$user', 2)")" "Alex1,Alex2,Alex3"
[ $fails -eq 0 ] || die "$fails check(s) failed"
log "the README's tutorial ran as shown ($runs block runs) and did what it says"
