# Sourced by the scripts in test/kafka/: where the Kafka broker jars live.
#   KAFKA_VERSION   broker version resolved from Maven Central (default below)
#   ESRC_CACHE      cache root (default ~/.cache/esrc)
#   KAFKA_HOME      derived: $ESRC_CACHE/kafka-$KAFKA_VERSION (jars in libs/)
KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
ESRC_CACHE="${ESRC_CACHE:-${HOME:-/root}/.cache/esrc}"
KAFKA_HOME="$ESRC_CACHE/kafka-$KAFKA_VERSION"
KAFKA_LIBS="$KAFKA_HOME/libs"
KAFKA_TEST_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export KAFKA_VERSION ESRC_CACHE KAFKA_HOME KAFKA_LIBS
