#!/usr/bin/env bash
# examples/java/run.sh BROKERS TOPIC EXPECTED_COUNT [TIMEOUT_SECONDS]
# Builds the example once (mvn, cached) and runs it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${ESRC_CACHE:-$HOME/.cache/esrc}/java-example
mkdir -p "$out"
if [ ! -f "$out/classpath.txt" ] || [ "$here/pom.xml" -nt "$out/classpath.txt" ] \
   || [ -n "$(find "$here/src" -newer "$out/classpath.txt" -name '*.java')" ]; then
    mvn -q -B -Dstyle.color=never -f "$here/pom.xml" \
        dependency:build-classpath -Dmdep.outputFile="$out/classpath.txt" >/dev/null 2>&1 \
        || { echo "mvn failed to resolve the example's dependencies" >&2; exit 1; }
    mkdir -p "$out/classes"
    javac -d "$out/classes" -cp "$(cat "$out/classpath.txt")" \
        "$here"/src/main/java/esrc/example/*.java
fi
exec java -cp "$out/classes:$(cat "$out/classpath.txt")" esrc.example.UserEventsConsumer "$@"
