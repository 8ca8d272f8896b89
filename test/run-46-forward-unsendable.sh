#!/usr/bin/env bash
# Events that the forwarder cannot even put into a record, in a log that
# 0.1.0 wrote (0.2.0's appends refuse them; here the superuser plants them
# with fwd_plant):
#   1. a wedge event: data of ~100 kB as jsonb that is >1 GB as JSON text
#      (9,000 numbers 1e131071), which jsonb_out cannot build;
#   2. an event whose recorded_at is infinity (no RFC 3339 form);
#   3. an event whose category is 510 bytes, so that its topic name does
#      not fit the worker's 512-byte buffer, in the same batch after an
#      event of a short category.
# Each must block forwarding as a poison record (state blocked, the worker
# keeps running, nothing after it goes out), esrc.forwarder_skip must get
# past it, and the skipped event is never converted.  Readers: read_all
# and read_category work for every other event; a reader that prints the
# wedge event's data gets an error (54000).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-unsendable)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0

fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg"

plant_paused() {
    fwd_sql "SELECT esrc.forwarder_pause()" >/dev/null
    fwd_wait_state paused 30 >/dev/null || true
    fwd_plant "$@"
}
resume() { fwd_sql "SELECT esrc.forwarder_resume()" >/dev/null; }

fwd_sql "SELECT esrc.append('ok-1', 'First', '{}')" >/dev/null
fwd_wait_forwarded 60 || die "the forwarder did not start: $(fwd_status)"
pid=$(fwd_worker_pid)
wedge="('[' || repeat('1e131071, ', 8999) || '1e131071]')::jsonb"

log "0. esrc.append refuses the wedge event"
expect "append of the wedge event fails with 54000" \
    eval "! fwd_sql \"SELECT esrc.append('wedge-1', 'Wedge', $wedge)\" 2>'$dir/append.err'"
grep -q "as JSON text" "$dir/append.err" || { log "FAIL - wrong message: $(cat "$dir/append.err")"; status=1; }

log "1. a wedge event in the log"
p1=$(plant_paused wedge-1 Wedge "$wedge")
fwd_sql "SELECT esrc.append('ok-1', 'After', '{}')" >/dev/null
resume
fwd_wait_state blocked 60 || status=1
expect "blocked on the wedge event, the error says why" fwd_blocked_on "$p1" wedge-1 "as JSON text"
expect "the worker did not restart" test "$(fwd_worker_pid)" = "$pid"
expect "the event after it waits" eval '! fwd_in_kafka ok-1 1'
# readers: the other events read fine; the wedge event reads as long as
# its data is not printed
expect "read_all over the wedge event returns every event" \
    test "$(fwd_sql "SELECT count(*) FROM esrc.read_all(0, 100)")" = 3
expect "read_all's other events print" \
    test "$(fwd_sql "SELECT string_agg(data::text, ',') FROM esrc.read_all(0, 100) WHERE stream <> 'wedge-1'")" = "{},{}"
expect "read_category of another category prints" \
    test "$(fwd_sql "SELECT count(data::text) FROM esrc.read_category('ok', 0, 100)")" = 2
expect "a reader that prints the wedge event's data gets an error" \
    eval "! fwd_sql \"SELECT data FROM esrc.read_all($p1 - 1, 1)\" 2>'$dir/read.err'"
log "   the reader gets: $(head -1 "$dir/read.err")"
fwd_sql "SELECT esrc.forwarder_skip($p1, 'wedge')" >/dev/null
fwd_wait_forwarded 60 || status=1
expect "after the skip, the event after it went out" fwd_in_kafka ok-1 1
expect "the worker never restarted" test "$(fwd_worker_pid)" = "$pid"

log "2. an event whose recorded_at is infinity"
p2=$(plant_paused inf-1 Infinite "'{}'::jsonb" "'infinity'::timestamptz")
fwd_sql "SELECT esrc.append('ok-1', 'After', '{}')" >/dev/null
resume
# (esrc.forwarder_status itself cannot compute the lag of such an event:
# ask the worker's function)
worker_row() {
    fwd_sql "SELECT state || '|' || coalesce(blocked_position::text, '') || '|' || coalesce(last_error, '')
             FROM esrc.forwarder_worker_status()"
}
deadline=$((SECONDS + 60))
until [[ "$(worker_row)" == blocked\|* ]] || [ $SECONDS -ge $deadline ]; do sleep 0.2; done
log "   worker: $(worker_row)"
expect "blocked on it, the error names recorded_at" \
    eval '[[ "$(worker_row)" =~ ^blocked\|$p2\|.*recorded_at ]]'
fwd_sql "SELECT esrc.forwarder_skip($p2)" >/dev/null
fwd_wait_forwarded 60 || status=1
expect "after the skip, the event after it went out" fwd_in_kafka ok-1 2

log "3. a 510-byte category after a short one, in one batch"
long=$(printf 'b%.0s' $(seq 510))
fwd_sql "SELECT esrc.forwarder_pause()" >/dev/null
fwd_wait_state paused 30 || true
fwd_sql "SELECT esrc.append('short-1', 'Short', '{}')" >/dev/null
p3=$(fwd_plant "$long" Long "'{}'::jsonb")
fwd_sql "SELECT esrc.append('ok-1', 'After', '{}')" >/dev/null
resume
fwd_wait_state blocked 60 || status=1
expect "blocked on the long category, the error says the topic name is too long" \
    fwd_blocked_on "$p3" "$long" "topic name would be longer"
expect "the short category's event before it went out, once" fwd_in_kafka short-1 0
expect "no topic was made of the long category" \
    eval "! fwd_topics | grep -qv -e '^esrc\.ok\$' -e '^esrc\.short\$'"
fwd_sql "SELECT esrc.forwarder_skip($p3)" >/dev/null
fwd_wait_forwarded 60 || status=1
expect "the worker never restarted" test "$(fwd_worker_pid)" = "$pid"

# every event but the three skipped ones, exactly once, in its topic
fwd_sql "SELECT json_build_object(
            'position', position, 'stream', stream, 'version', version,
            'type', type, 'data', data::text, 'metadata', metadata::text,
            'id', id::text, 'category', category,
            'time', to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'))
           FROM esrc.events WHERE position NOT IN ($p1, $p2, $p3) ORDER BY position" >"$dir/events.jsonl"
fwd_consume "$dir/records.jsonl"
fwd_check "$dir/events.jsonl" "$dir/records.jsonl" || status=1

if [ $status -ne 0 ]; then
    grep -E "esrc forwarder|ERROR|FATAL|PANIC" "$dir/pg/server.log" | cut -c1-300 | tail -30 >&2
fi
exit $status
