#!/usr/bin/env bash
# Prints every committed record of the given topics, from the beginning up to
# the current end (then exits), one JSON object per line:
#   {"topic":..,"partition":..,"offset":..,"key":..,"value":..,"headers":{name:value,..}}
# key/value are strings (null when absent, e.g. a tombstone value); headers
# with the same name: the last one wins. Topics are printed one after the
# other, each in partition-arrival order (sort with jq if order matters).
# isolation.level=read_committed: records of aborted or still open
# transactions are not shown (and an open transaction holds back the
# records after it until it ends).
# Usage: test/kafka/consume.sh BROKER TOPIC...
# Needs: kcat, jq. Env KCAT_OPTS: extra kcat args (e.g. "-X debug=fetch").
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 BROKER TOPIC..." >&2; exit 2; }
broker="$1"
shift
for topic in "$@"; do
	# kcat -J: headers come as a flat array [name1, value1, name2, value2, ...]
	# shellcheck disable=SC2086
	kcat -b "$broker" -C -t "$topic" -o beginning -e -q -J \
		-X isolation.level=read_committed \
		-m 30 ${KCAT_OPTS:-} |
		jq -c '{topic, partition, offset, key, value: .payload,
			headers: ([(.headers // []) as $h | range(0; $h | length; 2) | {($h[.]): $h[. + 1]}] | add // {})}'
done
