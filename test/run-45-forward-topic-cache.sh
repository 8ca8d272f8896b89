#!/usr/bin/env bash
# The forwarder's topic cache evicts only between batches.  With a build
# whose cache holds 8 topics (make ESRC_TOPIC_CACHE_SIZE=8), one batch
# spans 20 categories, interleaved, several times over: every record must
# be in its own category's topic, exactly once (test/forward/check.py).
# Before 0.2.0 the cache was flushed on its 9th topic (1,025th in a normal
# build) while records resolved earlier in the same batch still pointed
# at the flushed entries: they went to the topics that took the entries
# over, or through destroyed handles.
# The test build is installed for this test only; the normal build is
# installed again on exit.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-topic-cache)
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
restore() {
    fwd_stop_all
    log "installing the normal build again"
    make -C "$ESRC_ROOT" -s PG_CONFIG="$PG_CONFIG" >/dev/null && as_root make -C "$ESRC_ROOT" -s PG_CONFIG="$PG_CONFIG" install >/dev/null
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap restore EXIT
status=0

log "building with ESRC_TOPIC_CACHE_SIZE=8"
mkdir -p "$dir/build"
cp -r "$ESRC_ROOT/Makefile" "$ESRC_ROOT/esrc.control" "$ESRC_ROOT/src" "$dir/build/"
cp "$ESRC_ROOT"/esrc--*--*.sql "$dir/build/" 2>/dev/null || true
make -C "$dir/build" -s PG_CONFIG="$PG_CONFIG" ESRC_TOPIC_CACHE_SIZE=8 >/dev/null
as_root make -C "$dir/build" -s PG_CONFIG="$PG_CONFIG" ESRC_TOPIC_CACHE_SIZE=8 install >/dev/null

fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg"
fwd_sql "SELECT esrc.append('warmup-1', 'Started', '{}')" >/dev/null
fwd_wait_forwarded 60 || die "the forwarder did not start: $(fwd_status)"

# all of it committed while paused, so that it is read as one batch
fwd_sql "SELECT esrc.forwarder_pause()" >/dev/null
fwd_sql "SELECT esrc.append('cat' || c || '-' || s, 'E', jsonb_build_object('c', c, 'r', r))
           FROM generate_series(1, 3) r, generate_series(1, 2) s, generate_series(1, 20) c
          ORDER BY r, s, c" >/dev/null
fwd_sql "SELECT esrc.forwarder_resume()" >/dev/null
fwd_wait_forwarded 120 || status=1
expect "all 121 events were delivered" \
    test "$(fwd_sql "SELECT delivered_total FROM esrc.forwarder_status")" = 121

fwd_dump_events "$dir/events.jsonl"
fwd_consume "$dir/records.jsonl"
fwd_check "$dir/events.jsonl" "$dir/records.jsonl" || status=1
expect "21 data topics (20 categories and the warm-up)" \
    test "$(fwd_topics | wc -l)" = 21
expect "each topic holds its category's 6 records and nothing else" \
    test "$(jq -s '[.[] | select(.topic != "esrc.warmup")] | group_by(.topic)
                   | map(select(length == 6 and
                                (map(.value | fromjson | "esrc.cat\(.c)") | unique) == [.[0].topic]))
                   | length' "$dir/records.jsonl")" = 20
expect "the worker never restarted" \
    test "$(grep -c 'esrc forwarder started' "$dir/pg/server.log")" = 1

if [ $status -ne 0 ]; then
    grep -E "esrc forwarder|ERROR|FATAL|PANIC|terminated" "$dir/pg/server.log" | tail -30 >&2
fi
exit $status
