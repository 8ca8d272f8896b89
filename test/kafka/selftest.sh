#!/usr/bin/env bash
# Self-test of the Kafka test kit: fetch the broker, start it on a free port,
# run a librdkafka transaction (txn_check), read it back with consume.sh and
# check the 3 records and their headers, SIGKILL + restart on the same data,
# check again, stop. Prints the time of each step.
# Usage: test/kafka/selftest.sh        (exit status 0 = all checks passed)
# Needs (Debian 12): openjdk-17-jre-headless, maven, gcc, librdkafka-dev, kcat,
# jq, iproute2 (ss). Env: KAFKA_VERSION, ESRC_CACHE (see env.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/env.sh"

now_ms() { echo $(($(date +%s%N) / 1000000)); }
timings=()
passed=0
failed=0
step_t0=0
step() { step_t0=$(now_ms); echo "selftest: == $*" >&2; }
done_step() { # NAME
	local ms=$(($(now_ms) - step_t0))
	timings+=("$(printf '%-34s %6d ms' "$1" "$ms")")
}
check() { # NAME CONDITION-COMMAND...
	local name="$1"
	shift
	if "$@"; then
		echo "selftest: ok   - $name" >&2
		passed=$((passed + 1))
	else
		echo "selftest: FAIL - $name" >&2
		failed=$((failed + 1))
	fi
}

tmp="$(mktemp -d "${TMPDIR:-/tmp}/esrc-kafka-selftest.XXXXXX")"
bdir="$tmp/broker"
cleanup() {
	local rc=$?
	if [[ -f "$bdir/kafka.pid" ]]; then
		"$here/broker.sh" stop "$bdir" || true
	fi
	if ((rc != 0)) && [[ -f "$bdir/kafka.log" ]]; then
		echo "selftest: broker log tail:" >&2
		tail -n 30 "$bdir/kafka.log" >&2 || true
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -f "$KAFKA_LIBS/.complete" ]]; then fetch_kind=warm; else fetch_kind=cold; fi
step "fetch kafka $KAFKA_VERSION ($fetch_kind)"
"$here/fetch.sh" >/dev/null
done_step "fetch ($fetch_kind)"

step "fetch again (warm)"
"$here/fetch.sh" >/dev/null
done_step "fetch (warm)"

step "build txn_check"
cc -O2 -Wall -Wextra -o "$tmp/txn_check" "$here/txn_check.c" -lrdkafka
done_step "build txn_check"

port="$("$here/broker.sh" freeport)"
broker="127.0.0.1:$port"
step "start broker on $broker"
"$here/broker.sh" start "$bdir" "$port"
done_step "broker start (format+boot)"

topic="selftest-$$"
step "txn_check $broker $topic"
"$tmp/txn_check" "$broker" "$topic" >"$tmp/txn_check.out"
cat "$tmp/txn_check.out" >&2
done_step "txn_check (txn, abort, commit)"

verify() { # LABEL: consume.sh and check the records
	local label="$1" out="$tmp/consume.$1.jsonl"
	"$here/consume.sh" "$broker" "$topic" "$topic.pos" >"$out"
	cat "$out" >&2
	check "$label: 3 committed records in $topic, none aborted" \
		test "$(jq -s "[.[] | select(.topic == \"$topic\")] | length" "$out")" = 3
	check "$label: keys, values and headers of the 3 records" \
		jq -e -s --arg t "$topic" '
			[.[] | select(.topic == $t)] | sort_by(.offset) as $r
			| ($r | length) == 3
			and ([range(0; 3) as $i | $r[$i]
				| .key == "k\($i + 1)" and .value == "{\"n\":\($i + 1)}"
				  and .headers == {"esrc-seq": "\($i + 1)", "content-type": "application/json"}
				  and .partition == 0]
			     | all)' "$out" >/dev/null
	check "$label: position record in compacted $topic.pos" \
		jq -e -s --arg t "$topic.pos" '
			[.[] | select(.topic == $t)] | length == 1 and
			(.[0] | .key == "forwarder-1" and .value == "{\"position\":3}")' "$out" >/dev/null
}

step "consume.sh (read_committed)"
verify first
done_step "consume.sh + checks"

step "kill -9 + restart on the same data"
"$here/broker.sh" kill "$bdir"
"$here/broker.sh" restart "$bdir"
done_step "kill + restart (unclean)"

step "consume.sh after restart"
verify restarted
done_step "consume.sh after restart"

compacted() { grep "Created log for partition $topic.pos-0 " "$bdir/kafka.log" | grep -q "cleanup.policy=compact"; }
check "$topic.pos was created with cleanup.policy=compact (broker log)" compacted

step "stop broker"
"$here/broker.sh" stop "$bdir"
done_step "broker stop (SIGTERM)"
check "broker process is gone" test ! -f "$bdir/kafka.pid"

echo "selftest: kafka $KAFKA_VERSION, librdkafka $(pkg-config --modversion rdkafka 2>/dev/null || echo '?'), $(kcat -V 2>&1 | sed -n 's/^kcat - .*//;s/.*Version \([^ ]*\).*/kcat \1/p' | head -1)" >&2
echo "selftest: timings:" >&2
for t in "${timings[@]}"; do echo "  $t" >&2; done
echo "selftest: $passed passed, $failed failed"
((failed == 0))
