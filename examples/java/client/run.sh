#!/usr/bin/env bash
# examples/java/client/run.sh JDBC_URL
# The seed scenario on the Java client (SeedScenario.java): builds the example once (javac,
# the classpath from mvn, cached under $ESRC_CACHE/java-client-example) and runs it.
# dev.esrc:esrc-client comes from the local Maven repository ($ESRC_M2, default
# $ESRC_CACHE/m2, where test/run-74-java-client.sh installs it); when it is not there, the
# client of this tree is installed into it first (mvn install, without its tests).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cache=${ESRC_CACHE:-$HOME/.cache/esrc}
m2=${ESRC_M2:-$cache/m2}
out=$cache/java-client-example
mkdir -p "$out"
version=$(sed -n 's|^  <version>\(.*\)</version>$|\1|p' "$root/clients/java/pom.xml" | head -1)
jar="$m2/dev/esrc/esrc-client/$version/esrc-client-$version.jar"
if [ ! -f "$jar" ]; then
    echo "installing dev.esrc:esrc-client:$version from $root/clients/java into $m2" >&2
    mvn -q -B -Dstyle.color=never -Dmaven.repo.local="$m2" -Desrc.build.dir="$out/client-target" \
        -DskipTests -f "$root/clients/java/pom.xml" install >"$out/install.log" 2>&1 \
        || { tail -30 "$out/install.log" >&2; echo "mvn install of the client failed" >&2; exit 1; }
fi
# the classpath depends on the pom and the repository; the classes on the sources and the
# client's jar (run-74 installs a new one each run: only javac runs again then)
key=$(printf '%s\n' "$m2" | cat - "$here/pom.xml" | md5sum | cut -c1-10)
if [ ! -f "$out/classpath-$key.txt" ]; then
    mvn -q -B -Dstyle.color=never -Dmaven.repo.local="$m2" -f "$here/pom.xml" \
        dependency:build-classpath -Dmdep.outputFile="$out/classpath.tmp" >"$out/mvn.log" 2>&1 \
        || { tail -30 "$out/mvn.log" >&2; echo "mvn failed to resolve the example's dependencies" >&2; exit 1; }
    mv "$out/classpath.tmp" "$out/classpath-$key.txt"
    rm -f "$out/classes.stamp"
fi
cp="$(cat "$out/classpath-$key.txt")"
if [ ! -f "$out/classes.stamp" ] || [ "$jar" -nt "$out/classes.stamp" ] \
   || [ -n "$(find "$here/src" -newer "$out/classes.stamp" -name '*.java')" ]; then
    rm -rf "$out/classes"
    mkdir -p "$out/classes"
    javac -Xlint:all -Werror -d "$out/classes" -cp "$cp" "$here"/src/main/java/esrc/example/client/*.java
    touch "$out/classes.stamp"
fi
exec java -cp "$out/classes:$cp" esrc.example.client.SeedScenario "$@"
