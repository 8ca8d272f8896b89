#!/usr/bin/env bash
# Resolves the Apache Kafka broker jars (KRaft, no ZooKeeper) from Maven
# Central with mvn into $ESRC_CACHE/kafka-$KAFKA_VERSION/libs.
# Idempotent: once libs/.complete exists, it returns at once without mvn or
# network. The Maven repository stays the default ~/.m2 (cached too).
# Usage: test/kafka/fetch.sh            (prints the libs dir on the last line)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"

if [[ -f "$KAFKA_LIBS/.complete" ]]; then
	echo "fetch: kafka $KAFKA_VERSION: cached in $KAFKA_LIBS" >&2
	echo "$KAFKA_LIBS"
	exit 0
fi

command -v mvn >/dev/null || { echo "fetch: mvn not found (apt-get install maven)" >&2; exit 1; }
command -v java >/dev/null || { echo "fetch: java not found (apt-get install openjdk-17-jre-headless)" >&2; exit 1; }

mkdir -p "$KAFKA_HOME"
tmp="$(mktemp -d "$KAFKA_HOME/libs.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "fetch: kafka $KAFKA_VERSION: resolving org.apache.kafka:kafka_2.13 and its runtime jars with mvn" >&2
# mvn prints ANSI resets even with -q -B (Maven 3.8 + jansi): keep its output
# in a file and show it only on failure.
if ! mvn -q -B -f "$KAFKA_TEST_DIR/pom.xml" -Dkafka.version="$KAFKA_VERSION" \
	dependency:copy-dependencies -DoutputDirectory="$tmp/libs" >"$tmp/mvn.log" 2>&1; then
	echo "fetch: mvn failed:" >&2
	sed 's/\x1b\[[0-9;]*m//g' "$tmp/mvn.log" | tail -40 >&2
	exit 1
fi
[[ -f "$tmp/libs/kafka_2.13-$KAFKA_VERSION.jar" ]] || { echo "fetch: kafka_2.13-$KAFKA_VERSION.jar missing after mvn" >&2; exit 1; }

echo "fetch: kafka $KAFKA_VERSION: checking the jars load (kafka.tools.StorageTool random-uuid)" >&2
java -cp "$tmp/libs/*" kafka.tools.StorageTool random-uuid >"$tmp/check.log" 2>&1 || {
	echo "fetch: the resolved jars do not run:" >&2; tail -20 "$tmp/check.log" >&2; exit 1; }

touch "$tmp/libs/.complete"
rm -rf "$KAFKA_LIBS"
mv "$tmp/libs" "$KAFKA_LIBS"
echo "fetch: kafka $KAFKA_VERSION: $(ls "$KAFKA_LIBS" | wc -l) jars, $(du -sh "$KAFKA_LIBS" | cut -f1) in $KAFKA_LIBS" >&2
echo "$KAFKA_LIBS"
