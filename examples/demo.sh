#!/usr/bin/env bash
# examples/demo.sh: the stale-snapshot problem, solved end to end.
#
#   bash examples/demo.sh
#
# On a fresh machine it installs what is missing, builds esrc, fetches a
# Kafka broker (cached), starts a throwaway PostgreSQL cluster and a local
# single-node Kafka, runs the security-service example, prints what
# happened, checks it, and stops everything it started.  It shows the bug
# next to the fix: three concurrent renames decided against a snapshot
# table that a separate Kafka consumer keeps (as a Kafka Streams topology
# does) end as three events that all claim version 1; the same three with
# esrc end at versions 1, 2 and 3.  It exits non-zero
# if anything it shows is not as described, so the test suite runs it too.
set -euo pipefail
source "$(dirname "$0")/../test/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

FWD_DB=security_demo
EMAIL=alex@example.com
STREAM=   # user-<the id register_user makes>, below
TOPIC=esrc.user
step=0
t0=$SECONDS
if [ -t 1 ]; then B=$'\033[1m' N=$'\033[0m'; else B= N=; fi
say()  { step=$((step + 1)); printf '\n%s[%d] %s%s\n' "$B" "$step" "$*" "$N"; }
info() { printf '    %s\n' "$*"; }
fail() { printf '\nDEMO FAILED: %s\n' "$*" >&2; exit 1; }
show() { fwd_sql_table "$1" | sed 's/^/    /'; }
fwd_sql_table() { psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qX -v ON_ERROR_STOP=1 -c "$1"; }

say "Setting up: packages, build, Kafka broker jars (cached after the first run)"
# ensure_deps creates the user the servers run as ($ESRC_TEST_USER), and
# test_tmpdir hands its directory to that user: in this order
ensure_deps
dir=$(test_tmpdir demo)
ks_pid=
# (under set -e a failing command in the trap would end it early: "|| true")
trap 'if [ -n "$ks_pid" ]; then kill "$ks_pid" 2>/dev/null || true; fi; fwd_stop_all; rm -rf "$dir"' EXIT
build_install
"$FWD_KAFKA/fetch.sh" >/dev/null
info "esrc built and installed into $("$PG_CONFIG" --pkglibdir)"

say "Starting a local Kafka broker (KRaft, single node) and a throwaway PostgreSQL 15 with shared_preload_libraries = 'esrc'"
fwd_start_kafka "$dir/kafka" 2>/dev/null
fwd_start_pg "$dir/pg" 2>/dev/null
info "Kafka on $FWD_BROKER, PostgreSQL on 127.0.0.1:$FWD_PORT, database $FWD_DB"
psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qX -v ON_ERROR_STOP=1 \
    -f "$ESRC_ROOT/examples/security_service.sql" >/dev/null
info "loaded examples/security_service.sql: snapshot security.users, handlers register_user / change_user_name,"
info "streams user-<uuid> (the e-mail only encrypted in data; unique through security.user_emails)"

say "First the bug: the same commands decided against an asynchronously updated snapshot"
info "(what a Kafka Streams topology does: the command handler reads a snapshot table that a"
info " separate consumer keeps from the event topic, decides, and produces the next event with"
info " version = the snapshot's version + 1; Kafka has no expected-version check)"
KS_TOPIC=kstreams.users
KS_STREAM="user-$(cat /proc/sys/kernel/random/uuid)"
fwd_sql "CREATE SCHEMA kstreams;
         CREATE TABLE kstreams.users (stream text PRIMARY KEY, version bigint NOT NULL, name text NOT NULL);
         CREATE TABLE kstreams.consumed (last_offset bigint NOT NULL);
         INSERT INTO kstreams.consumed VALUES (-1)" >/dev/null
# The separate consumer: reads the topic from where it stopped and applies
# each record to the snapshot table, every 0.2 s, until told to stop.
ks_consumer() {
    local next records
    while [ ! -f "$dir/ks.stop" ]; do
        next=$(( $(fwd_sql "SELECT last_offset FROM kstreams.consumed") + 1 ))
        records=$(kcat -b "$FWD_BROKER" -C -t "$KS_TOPIC" -o "$next" -e -q -f '%o\t%k\t%s\n' 2>/dev/null || true)
        while IFS=$'\t' read -r offset key value; do
            [ -n "$offset" ] || continue
            fwd_sql "INSERT INTO kstreams.users AS u VALUES ('$key', ('$value'::jsonb->>'version')::bigint, '$value'::jsonb->>'name')
                         ON CONFLICT (stream) DO UPDATE SET version = excluded.version, name = excluded.name;
                     UPDATE kstreams.consumed SET last_offset = $offset" >/dev/null
        done <<<"$records"
        sleep 0.2
    done
}
ks_produce() {   # ks_produce VERSION NAME: one event record, key = the stream
    printf '%s\t%s\n' "$KS_STREAM" "{\"type\": \"$3\", \"version\": $1, \"name\": \"$2\"}" |
        kcat -b "$FWD_BROKER" -P -t "$KS_TOPIC" -K $'\t' 2>/dev/null
}
ks_wait_consumed() {   # ks_wait_consumed N: until the consumer applied N records
    local deadline=$((SECONDS + 60))
    until [ "$(fwd_sql "SELECT last_offset + 1 FROM kstreams.consumed")" -ge "$1" ]; do
        [ $SECONDS -lt $deadline ] || fail "the snapshot consumer did not apply $1 records"; sleep 0.1
    done
}
ks_produce 0 Alex UserRegistered
ks_consumer & ks_pid=$!
ks_wait_consumed 1
info "RegisterUser: UserRegistered produced as version 0; the consumer has put it into kstreams.users"
# a rename: load the snapshot, wait until all three have loaded (the three
# commands arrive at once: none sees another's event before it decides),
# then produce the event it decided on
ks_rename() {
    local name=$1 loaded
    loaded=$(fwd_sql "SELECT version FROM kstreams.users WHERE stream = '$KS_STREAM'")
    touch "$dir/ks.loaded.$name"
    while [ "$(ls "$dir"/ks.loaded.* | wc -l)" -lt 3 ]; do sleep 0.05; done
    ks_produce $((loaded + 1)) "$name" UserNameChanged
    echo "$name: loaded version $loaded from the snapshot table, produced UserNameChanged as version $((loaded + 1))"
}
pids=()
for n in 1 2 3; do ks_rename "Alex$n" >"$dir/ks$n.out" 2>&1 & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "a rename against the asynchronous snapshot failed"; done
ks_wait_consumed 4
touch "$dir/ks.stop"; wait "$ks_pid" || true
for n in 1 2 3; do info "$(cat "$dir/ks$n.out")"; done
kcat -b "$FWD_BROKER" -C -t "$KS_TOPIC" -o beginning -e -q -f '%o\t%s\n' >"$dir/ks.records" 2>/dev/null
info "the topic $KS_TOPIC now holds:"
while IFS=$'\t' read -r offset value; do info "  offset $offset: $value"; done <"$dir/ks.records"
ks_versions=$(python3 -c 'import json, sys
print(",".join(str(json.loads(l.split("\t", 1)[1])["version"]) for l in open(sys.argv[1]) if l.strip()))' "$dir/ks.records")
[ "$ks_versions" = "0,1,1,1" ] || fail "against the asynchronous snapshot the three renames should all be version 1 (got $ks_versions)"
ks_state=$(fwd_sql "SELECT version || ' ' || name FROM kstreams.users WHERE stream = '$KS_STREAM'")
info "the snapshot table says version ${ks_state% *}, name ${ks_state#* }: three renames, three events"
info "all claiming version 1, two of the names lost. No timeout fixes this: the snapshot"
info "and the decision are not in one transaction."

say "Now with esrc. RegisterUser {name: Alex, email: $EMAIL}"
user_id=$(fwd_sql "SELECT security.register_user('$EMAIL', 'Alex')")
STREAM="user-$user_id"
v=$(fwd_sql "SELECT esrc.stream_version('$STREAM')")
info "a new id $user_id: UserRegistered appended to stream $STREAM at version $v"
info "(the e-mail is in its data encrypted with esrc.encrypt; security.user_emails maps its keyed hash to the id)"
[ "$v" = 0 ] || fail "registration should be version 0, got $v"
[ "$(fwd_sql "SELECT security.user_id_of('$EMAIL')")" = "$user_id" ] || fail "security.user_id_of does not find the user"
[ "$(fwd_sql "SELECT count(*) FROM esrc.events WHERE data::text LIKE '%$EMAIL%' OR stream LIKE '%$EMAIL%'")" = 0 ] \
    || fail "the e-mail is in the log in clear"

say "Three ChangeUserName commands arrive at once, from three sessions"
info "(each handler loads the snapshot and its version, decides, and appends with that"
info " version as expected_version.  Their first attempts wait for each other at a barrier"
info " between load and append, so all three decide on version 0 and only one append can"
info " win; a handler that lost the race gets SQLSTATE 40001, loads again and decides again)"
# One attempt of the handler: the steps of security.change_user_name, taken
# one statement at a time from the client so that the first attempt can wait
# at a barrier between load and append.  Prints "loaded N", then
# "appended N" or psql's "ERROR:  40001".
cat >"$dir/change_user_name.sql" <<'SQL'
-- load: the state and its version
SELECT version AS loaded FROM esrc.load('security.users', :'stream') \gset
\echo loaded :loaded
\if :barrier
-- the first attempt waits here until all three commands have loaded
SELECT pg_advisory_xact_lock_shared(17) \gset
\endif
-- decide: only a registered user (version >= 0) can be renamed
SELECT :loaded >= 0 AS registered \gset
\if :registered
-- append with the loaded version as expected_version
SELECT esrc.append(:'stream', 'UserNameChanged', jsonb_build_object('name', :'name'),
                   expected_version => :loaded) AS appended \gset
\echo appended :appended
\else
\echo rejected: not registered
\endif
SQL
# change_user_name NAME: the handler with its retry loop; one line per attempt.
change_user_name() {
    local name=$1 attempt out waited
    for attempt in 1 2 3 4 5 6 7 8 9 10; do
        out=$(psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qAtX -v ON_ERROR_STOP=1 \
                  -v VERBOSITY=sqlstate -v barrier=$((attempt == 1)) \
                  -v stream="$STREAM" -v name="$name" \
                  -f "$dir/change_user_name.sql" 2>&1) || true
        waited=
        [ "$attempt" = 1 ] && waited="waited at the barrier, "
        printf '%s attempt %d: loaded version %s, %sappend -> ' \
            "$name" "$attempt" "$(sed -n 's/^loaded //p' <<<"$out")" "$waited"
        case $out in
            *"appended "*) echo "version ${out##*appended }"; return 0 ;;
            *"ERROR:  40001"*) echo "SQLSTATE 40001 (lost the race)" ;;
            *) echo "unexpected: $out"; return 1 ;;
        esac
    done
    return 1
}
# The barrier: advisory lock 17, held by a session of the demo's own.  Each
# command's first attempt, once it has loaded, asks for it and waits; when
# pg_locks shows all three waiting, the demo lets go.
barrier_locks() {   # barrier_locks true|false: granted or waiting locks on 17
    fwd_sql "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 17 AND granted = $1"
}
exec {barrier}> >(exec psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qAtX >/dev/null)
echo "SELECT pg_advisory_lock(17);" >&$barrier
deadline=$((SECONDS + 30))
until [ "$(barrier_locks true)" = 1 ]; do
    [ $SECONDS -lt $deadline ] || fail "the demo's session did not get the barrier lock"; sleep 0.05
done
pids=()
for n in 1 2 3; do
    change_user_name "Alex$n" >"$dir/cmd$n.out" 2>&1 &
    pids+=($!)
done
until [ "$(barrier_locks false)" = 3 ]; do
    [ $SECONDS -lt $deadline ] || fail "the three commands did not all reach the barrier: $(cat "$dir"/cmd*.out)"
    sleep 0.05
done
echo "SELECT pg_advisory_unlock(17);" >&$barrier
exec {barrier}>&-
for p in "${pids[@]}"; do wait "$p" || fail "a rename failed: $(cat "$dir"/cmd*.out)"; done
for n in 1 2 3; do while read -r line; do info "$line"; done <"$dir/cmd$n.out"; done
lost=$(cat "$dir"/cmd*.out | grep -c 'SQLSTATE 40001' || true)
[ "$(grep -h 'attempt 1:' "$dir"/cmd*.out | grep -c -- '-> version 1$')" = 1 ] && [ "$lost" -ge 2 ] \
    || fail "all three first attempts loaded version 0: exactly one should win, two should get 40001"
[ "$(grep -ho -- '-> version [0-9]*$' "$dir"/cmd*.out | sort | tr -d '\n')" = "-> version 1-> version 2-> version 3" ] \
    || fail "the three renames should end at versions 1, 2 and 3"
info "$lost append attempt(s) lost the race with SQLSTATE 40001 and were retried; the three ended at versions 1, 2, 3"

say "Side by side: the same three renames"
printf '    %-8s | %-44s | %s\n' rename "asynchronous snapshot (Kafka Streams style)" "esrc (snapshot in the appending transaction)"
for n in 1 2 3; do
    ks=$(sed -n 's/.*loaded version \([0-9]*\) .* as version \([0-9]*\)$/decided on version \1 -> event version \2/p' "$dir/ks$n.out")
    es=$(grep -c 'attempt' "$dir/cmd$n.out")
    printf '    %-8s | %-44s | %s\n' "Alex$n" "$ks" \
        "$es attempt(s) -> event version $(grep -o -- '-> version [0-9]*$' "$dir/cmd$n.out" | grep -o '[0-9]*$')"
done
printf '    %-8s | %-44s | %s\n' "ends at" "versions 1, 1, 1 (two renames lost)" "versions 1, 2, 3 (none lost)"

say "(a) The event log: versions 0, 1, 2, 3 — no rename lost, none decided against a stale state"
show "SELECT position, version, type, data FROM esrc.read_stream('$STREAM')"
[ "$(fwd_sql "SELECT string_agg(version::text, ',' ORDER BY version) FROM esrc.read_stream('$STREAM')")" = "0,1,2,3" ] \
    || fail "the stream should have versions 0,1,2,3"
[ "$(fwd_sql "SELECT string_agg(data->>'name', ',' ORDER BY data->>'name') FROM esrc.read_stream('$STREAM', 1)")" = "Alex1,Alex2,Alex3" ] \
    || fail "each of the three renames should be in the log once"

say "(b) The snapshot row, written in the same transaction as each append"
show "SELECT stream, version, state->>'name' AS name, left(state->>'email', 20) || '…' AS email_encrypted FROM security.users WHERE stream = '$STREAM'"
last_name=$(fwd_sql "SELECT data->>'name' FROM esrc.read_stream_backward('$STREAM', NULL, 1)")
[ "$(fwd_sql "SELECT version || ' ' || (state->>'name') FROM security.users WHERE stream = '$STREAM'")" = "3 $last_name" ] \
    || fail "the snapshot should be at version 3 with the last name ($last_name)"

say "(c) The same four events as a Kafka consumer receives them (topic $TOPIC, read_committed)"
fwd_wait_forwarded 60 || fail "events were not forwarded to Kafka in time"
fwd_consume "$dir/records.jsonl"
python3 - "$dir/records.jsonl" "$STREAM" 4 <<'PY' || fail "Kafka does not show the four events as described"
import json, sys
path, stream, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
recs = [json.loads(l) for l in open(path) if l.strip()]
recs = [r for r in recs if r.get("key") == stream and r.get("topic") == "esrc.user"]
for r in recs:
    h = r["headers"]
    print("    partition %s offset %s key=%s" % (r["partition"], r["offset"], r["key"]))
    print("      headers: " + ", ".join("%s=%s" % (k, h[k]) for k in sorted(h)))
    print("      value:   " + r["value"])
versions = [int(r["headers"]["ce_esrcversion"]) for r in recs]
ok = (versions == list(range(want))
      and all(r["headers"].get("ce_specversion") == "1.0" for r in recs)
      and all(r["headers"].get("ce_type") in ("UserRegistered", "UserNameChanged") for r in recs)
      and len({r["headers"]["ce_id"] for r in recs}) == want)
sys.exit(0 if ok else 1)
PY

say "(d) A stale command: decided at version 1, but the stream is at version 3"
if fwd_sql_table "SELECT esrc.append('$STREAM', 'UserNameChanged',
                    '{\"name\": \"Stale\"}', expected_version => 1)" \
        >"$dir/stale.out" 2>&1; then
    fail "the stale append was accepted"
fi
sed 's/^/    /' "$dir/stale.out"
psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qAtX -c "\\set VERBOSITY sqlstate" \
    -c "SELECT esrc.append('$STREAM', 'UserNameChanged', '{}', expected_version => 1)" 2>"$dir/sqlstate.out" >/dev/null || true
grep -q 40001 "$dir/sqlstate.out" || fail "the stale append should fail with SQLSTATE 40001"
info "SQLSTATE $(grep -o '[0-9][0-9A-Z]\{4\}' "$dir/sqlstate.out" | head -1): rejected, nothing written. The retry reloads and decides again:"
show "SELECT version AS loaded_version, state->>'name' AS loaded_name FROM esrc.load('security.users', '$STREAM')"
v=$(fwd_sql "SELECT esrc.append('$STREAM', 'UserNameChanged', '{\"name\": \"Alex4\"}',
                                  expected_version => (SELECT version FROM esrc.load('security.users', '$STREAM')))")
info "retried append succeeded at version $v"
[ "$v" = 4 ] || fail "the retried append should be version 4"
fwd_wait_forwarded 60 || fail "the retried event was not forwarded"
fwd_consume "$dir/records2.jsonl"
n=$(grep "\"topic\":\"$TOPIC\"" "$dir/records2.jsonl" | grep -c "\"key\":\"$STREAM\"" || true)
[ "$n" = 5 ] || fail "Kafka should hold 5 events of the stream, once each (has $n)"
info "Kafka now holds the 5 events of $STREAM, each once; the stale attempt never reached it"

printf '\n%sDemo passed%s in %d s: versions 0-4, snapshot current, Kafka in order, stale command rejected with 40001 and retried.\n' "$B" "$N" $((SECONDS - t0))
