#!/usr/bin/env bash
# bench/java-client/run.sh: the Java client (clients/java) against the same
# work written by hand with JDBC, in one run: handle() against a hand-written
# load/decide/append/retry loop (throughput, p50/p99, ratio; target >= 0.9x)
# and Consumer against a hand-written BEGIN/poll/insert/ack/COMMIT loop
# (>= 0.9x); medians of per-round ratios (see Bench.java).  BENCH_ROUNDS (5),
# BENCH_COMMANDS (2000), BENCH_STREAMS (100), BENCH_EVENTS (20000) size it.
# Maven's repository and the build are those of test/run-74-java-client.sh
# (under $ESRC_CACHE).
set -euo pipefail
source "$(dirname "$0")/../../test/lib.sh"
cache="$ESRC_CACHE/java-client"
mkdir -p "$cache/bench"
mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$ESRC_CACHE/m2" -Desrc.build.dir="$cache/target" \
    -f "$ESRC_ROOT/clients/java/pom.xml" compile dependency:build-classpath \
    -Dmdep.outputFile="$cache/bench/classpath.txt" >"$cache/bench/mvn.log" 2>&1 \
    || { tail -30 "$cache/bench/mvn.log"; die "mvn failed"; }
cp="$cache/target/classes:$(cat "$cache/bench/classpath.txt")"
javac -d "$cache/bench" -cp "$cp" "$ESRC_ROOT/bench/java-client/Bench.java"
dir=$(test_tmpdir javaclientbench)
port=$(free_port)
trap 'pg_stop "$dir" immediate; rm -rf "$dir"' EXIT
pg_start "$dir" "$port" "synchronous_commit = off"
psql "host=127.0.0.1 port=$port user=postgres dbname=postgres" -qAtX -v ON_ERROR_STOP=1 \
    -c "CREATE EXTENSION esrc" >/dev/null
log "java-client bench ($(java -version 2>&1 | head -1), synchronous_commit = off: the client's own cost shows more)"
java -cp "$cache/bench:$cp" Bench "jdbc:postgresql://127.0.0.1:$port/postgres?user=postgres"
