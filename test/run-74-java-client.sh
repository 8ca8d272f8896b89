#!/usr/bin/env bash
# The Java client (clients/java, issue 29) against a real server:
#   - mvn builds the module (Java 17) and runs its JUnit 5 tests with
#     Surefire, ESRC_TEST_URL pointing at a server started here: the store
#     API (appends, ids, metadata, tags, reads forward/backward/paged,
#     SQLSTATEs, erased streams, upcasters), readQuery and appendIf (two
#     concurrent decisions on one condition: exactly one is stored), the
#     seed scenario with three
#     threads (versions 1, 2, 3) from the events and from a snapshot table,
#     a command retried after a lost commit (written once), bounded
#     retries, 16 threads of random commands whose invariants are checked by
#     replaying the log (bounded to 10 s), consumers killed mid-batch
#     (a handler that throws, a connection terminated before the ack, an
#     interrupt: exactly once holds; at least once delivers again), two
#     members of a group, a stop cancelling a waiting poll, projections
#     with tombstones, given/when/then, the version against esrc.control;
#     DCB deciders (DcbHandlerTest: course capacity under 8 threads and
#     unique user names under 6, checked by replaying the log, the loser of the last seat deciding again, a
#     retry after a lost commit, bounded retries);
#   - mvn install puts dev.esrc:esrc-client into the suite's local Maven
#     repository, and examples/java/client (the seed scenario on the
#     client: RegisterUser with the e-mail encrypted, three concurrent
#     renames at versions 1, 2, 3) builds against it and runs;
#   - every test must have run: a skipped test fails the driver (the tests
#     skip themselves only when run by hand without ESRC_TEST_URL; the
#     driver sets ESRC_TEST_REQUIRE, which makes a missing URL an error).
# Maven's local repository and the build output live under $ESRC_CACHE, so
# the second run is offline (mvn -o) and downloads nothing.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

# mvn and a JDK (ensure_deps installs a JRE only, and mvn only without cached Kafka jars)
need=()
command -v mvn >/dev/null || need+=(maven)
command -v javac >/dev/null || need+=(openjdk-17-jdk-headless)
if [ ${#need[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "missing ${need[*]}; install them"
    log "installing ${need[*]} (apt-get)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
cache="$ESRC_CACHE/java-client"
mkdir -p "$cache"
mvn_args=(-B -Dstyle.color=never -Dmaven.repo.local="$ESRC_CACHE/m2" -Desrc.build.dir="$cache/target"
          -f "$ESRC_ROOT/clients/java/pom.xml")
# offline once a run has fetched everything for this pom
# (the example's pom and the install step count: they need plugins of their own)
stamp="$cache/m2-$(cat "$ESRC_ROOT/clients/java/pom.xml" "$ESRC_ROOT/examples/java/client/pom.xml" \
    | md5sum | cut -c1-10)-install.complete"
[ -f "$stamp" ] && mvn_args+=(-o)

dir=$(test_tmpdir javaclient)
port=$(free_port)
cleanup() {
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port"
psql "host=127.0.0.1 port=$port user=postgres dbname=postgres" -qAtX -v ON_ERROR_STOP=1 \
    -c "CREATE EXTENSION esrc" >/dev/null

url="jdbc:postgresql://127.0.0.1:$port/postgres?user=postgres"
log "mvn install (clients/java: its tests, then the jar into the suite's local repository)"
rc=0
ESRC_TEST_REQUIRE=1 ESRC_TEST_URL="$url" mvn "${mvn_args[@]}" install >"$dir/mvn.log" 2>&1 || rc=$?
grep -E '^\[(INFO|WARNING|ERROR)\] Tests run:|FAIL|BUILD' "$dir/mvn.log" >&2 || true
if [ $rc != 0 ]; then
    grep -vE '^\s+at (org\.apache|org\.junit|java\.base|jdk\.internal|org\.codehaus)' "$dir/mvn.log" | tail -80 >&2
    die "mvn test failed (clients/java)"
fi
summary=$(grep -E '^\[(INFO|WARNING|ERROR)\] Tests run: [0-9]+, Failures: [0-9]+, Errors: [0-9]+, Skipped: [0-9]+$' "$dir/mvn.log" | tail -1)
[ -n "$summary" ] || die "no Surefire summary in the mvn output"
total=$(sed -E 's/.*Tests run: ([0-9]+),.*/\1/' <<<"$summary")
skipped=$(sed -E 's/.*Skipped: ([0-9]+)$/\1/' <<<"$summary")
[ "$total" -gt 0 ] || die "Surefire ran no test"
[ "$skipped" = 0 ] || die "$skipped of the Java client's tests were skipped: every one must run against the server"
pom_version=$(sed -n 's|^  <version>\(.*\)</version>$|\1|p' "$ESRC_ROOT/clients/java/pom.xml" | head -1)
control_version=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" "$ESRC_ROOT/esrc.control")
[ "$pom_version" = "$control_version" ] || die "clients/java/pom.xml has version $pom_version, esrc.control $control_version"

log "examples/java/client: the seed scenario on the installed client"
ESRC_M2="$ESRC_CACHE/m2" bash "$ESRC_ROOT/examples/java/client/run.sh" "$url" >"$dir/example.out" 2>&1 \
    || { cat "$dir/example.out" >&2; die "examples/java/client failed"; }
cat "$dir/example.out" >&2
grep -q '^three concurrent renames: versions \[1, 2, 3\]' "$dir/example.out" \
    || die "examples/java/client: the three renames did not end at versions 1, 2, 3"
tail -1 "$dir/example.out" | grep -qx ok || die "examples/java/client did not print ok"
stream=$(sed -n 's/^registered \(user-[0-9a-f-]\{36\}\)$/\1/p' "$dir/example.out")
[ -n "$stream" ] || die "examples/java/client did not print the stream it registered"
[ "$(psql "host=127.0.0.1 port=$port user=postgres dbname=postgres" -qAtX -v ON_ERROR_STOP=1 -c "
    SELECT string_agg(type || ' ' || CASE WHEN data->>'email' LIKE 'esrc:v1:%' THEN 'sealed'
                                         ELSE coalesce(data->>'email', '-') END, ',' ORDER BY version)
      FROM esrc.events WHERE stream = '$stream'")" = \
  "UserRegistered sealed,UserNameChanged -,UserNameChanged -,UserNameChanged -" ] \
    || die "examples/java/client: $stream does not hold the registration with a sealed e-mail and three renames"
touch "$stamp"
log "ok - the Java client ($total JUnit tests) and examples/java/client"
