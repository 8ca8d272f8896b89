#!/usr/bin/env bash
# Kafka tombstones of erased and deleted streams (docs/forwarder.md, GDPR),
# on a real broker:
# 1. exactly_once: 2 sessions append to 6 streams of category gdpr while
#    one stream is erased and another deleted (hard); a read_committed
#    consumer must find every event once, in order, and for each of the two
#    streams its tombstone (key = stream, null value, ce_type esrc.erased /
#    esrc.deleted) as the stream's last record, nothing after it
#    (test/forward/tombstones.py).  The checker must fail on the records
#    without the tombstones.
# 2. at_least_once (a reload): a soft delete and an erase send theirs too.
# 3. compaction: topic esrc.comp set to cleanup.policy=compact, small
#    segment.ms, min.cleanable.dirty.ratio and delete.retention.ms (the
#    broker's log cleaner backs off 200 ms); after a stream is erased and the
#    cleaner has run, the topic holds nothing of that stream (neither its
#    records nor, past delete.retention.ms, its tombstone) while the other
#    streams' latest records remain.  Waits by polling, bounded.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

dir=$(test_tmpdir fwd-tomb)
trap 'fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
status=0
check() { python3 "$FWD_HERE/tombstones.py" "$@"; }
cc -O2 -o "$dir/topic_config" "$ESRC_ROOT/test/forward/topic_config.c" -lrdkafka

KAFKA_NUM_PARTITIONS=3 KAFKA_EXTRA_PROPS="log.cleaner.backoff.ms=200
log.cleaner.threads=1" fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg"

# an append that an erased or deleted stream refuses (55000) is no error here
fwd_sql "CREATE FUNCTION t_append(s text) RETURNS bigint LANGUAGE plpgsql AS \$\$
BEGIN
    RETURN esrc.append(s, 'Ticked', jsonb_build_object('at', clock_timestamp()));
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RETURN -1;
END \$\$" >/dev/null
fwd_sql "SELECT t_append('gdpr-' || g) FROM generate_series(1, 6) g" >/dev/null
fwd_wait_forwarded 60 || die "the forwarder did not start: $(fwd_status)"

log "1. erase gdpr-2 and delete gdpr-3 (hard) while 2 sessions append (exactly_once)"
cat >"$dir/load.sql" <<'EOF'
\set s random(1, 6)
SELECT t_append('gdpr-' || :s);
EOF
PGOPTIONS= pgbench -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -f "$dir/load.sql" -c 2 -j 1 \
    -T 5 -R 200 "$FWD_DB" >"$dir/pgbench.log" 2>&1 &
load=$!
sleep 1.5
fwd_sql "SELECT esrc.erase_stream('gdpr-2', 'data subject request')" >/dev/null
sleep 0.5
fwd_sql "SELECT esrc.delete_stream('gdpr-3', 'account closed', hard => true)" >/dev/null
wait $load || { cat "$dir/pgbench.log"; die "pgbench failed"; }
expect "appends went on after the erase and the delete" \
    test "$(fwd_sql "SELECT count(*) FROM esrc.events
                     WHERE position > (SELECT position FROM esrc.events WHERE type = 'esrc.deleted')")" -gt 20
fwd_wait_forwarded 60 || status=1
fwd_dump_events "$dir/events.jsonl"
fwd_consume "$dir/records.jsonl"
expect "read_committed: each stream's records in order, the tombstones last, nothing after them" \
    check order "$dir/events.jsonl" "$dir/records.jsonl" gdpr-2=esrc.erased gdpr-3=esrc.deleted
# the checker must catch a missing tombstone, and a record after one
jq -c 'select(.value != null)' "$dir/records.jsonl" >"$dir/no-tomb.jsonl"
expect "the check fails without the tombstones" \
    eval "! check order '$dir/events.jsonl' '$dir/no-tomb.jsonl' gdpr-2=esrc.erased >'$dir/no-tomb.out' 2>&1"
jq -c 'if .value == null then .value = "{}" else . end' "$dir/records.jsonl" >"$dir/valued.jsonl"
expect "the check fails when the tombstone has a value" \
    eval "! check order '$dir/events.jsonl' '$dir/valued.jsonl' gdpr-2=esrc.erased >'$dir/valued.out' 2>&1"
expect "delivered_total counts the tombstones like every record" \
    test "$(fwd_sql "SELECT delivered_total FROM esrc.forwarder_status")" = \
    "$(fwd_sql "SELECT count(*) FROM esrc.events")"
expect "the position mirror caught up" \
    test "$(fwd_sql "SELECT position FROM esrc.forwarder_state")" = \
    "$(fwd_sql "SELECT max(position) FROM esrc.events")"

log "2. at_least_once: a soft delete and an erase"
fwd_sql "ALTER SYSTEM SET esrc.delivery = at_least_once" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
deadline=$((SECONDS + 60))
until [ "$(fwd_sql "SELECT delivery FROM esrc.forwarder_status")" = at_least_once ]; do
    [ $SECONDS -lt $deadline ] || { status=1; log "FAIL - the reload to at_least_once was not seen"; break; }
    sleep 0.2
done
fwd_sql "SELECT t_append('gdpr-4'), t_append('gdpr-5')" >/dev/null
fwd_sql "SELECT esrc.delete_stream('gdpr-4', 'closed')" >/dev/null
fwd_sql "SELECT esrc.erase_stream('gdpr-5', 'data subject request')" >/dev/null
fwd_wait_forwarded 60 || status=1
fwd_dump_events "$dir/events2.jsonl"
fwd_consume "$dir/records2.jsonl"
expect "at_least_once: the soft delete's and the erase's tombstones, last of their streams" \
    check order-first "$dir/events2.jsonl" "$dir/records2.jsonl" gdpr-2=esrc.erased gdpr-3=esrc.deleted \
    gdpr-4=esrc.deleted gdpr-5=esrc.erased
expect "the position (the authority in this mode) caught up" \
    test "$(fwd_sql "SELECT position FROM esrc.forwarder_state")" = \
    "$(fwd_sql "SELECT max(position) FROM esrc.events")"

log "3. compaction of topic esrc.comp on the broker"
# the topic is made by the worker with the broker's defaults (no compaction,
# no retention); everything is in it before the operator turns compaction on
fwd_sql "SELECT t_append('comp-' || g) FROM generate_series(1, 3) g, generate_series(1, 6)" >/dev/null
fwd_sql "SELECT esrc.erase_stream('comp-2', 'data subject request')" >/dev/null
fwd_wait_forwarded 60 || status=1
fwd_consume "$dir/comp-before.jsonl"
expect "before compaction: comp-2's 6 records and its tombstone are in the topic" \
    test "$(jq -s 'map(select(.topic == "esrc.comp" and .key == "comp-2")) | length' "$dir/comp-before.jsonl")" = 7
"$dir/topic_config" "$FWD_BROKER" esrc.comp cleanup.policy=compact segment.ms=100 \
    min.cleanable.dirty.ratio=0.01 delete.retention.ms=100 min.compaction.lag.ms=0
# segments roll only when a record comes after segment.ms, and the cleaner
# cleans only rolled segments: keep appending to comp-1 and to filler
# streams comp-f1..f9 (whose keys cover the topic's 3 partitions, comp-2's
# too, which gets no record of its own any more) while polling
deadline=$((SECONDS + 150))
compacted=no
while [ $SECONDS -lt $deadline ]; do
    fwd_sql "SELECT t_append('comp-1'), t_append('comp-f' || g) FROM generate_series(1, 9) g" >/dev/null
    sleep 0.5
    "$FWD_KAFKA/consume.sh" "$FWD_BROKER" esrc.comp >"$dir/comp.jsonl"
    if check compacted "$dir/comp.jsonl" comp-2 comp-1 comp-3 >"$dir/comp.out" 2>&1 &&
        [ "$(jq -s '[.[] | select(.key == "comp-3")] | length' "$dir/comp.jsonl")" -lt 6 ]; then
        compacted=yes
        break
    fi
done
cat "$dir/comp.out" >&2
expect "after compaction: nothing of comp-2, neither records nor tombstone (waited $((SECONDS + 150 - deadline)) s)" \
    test $compacted = yes
expect "and the other streams' latest records remain" \
    test "$(jq -s '[.[] | select(.key == "comp-3")] | last | .headers.ce_esrcversion' "$dir/comp.jsonl")" = \
    "\"$(fwd_sql "SELECT max(version) FROM esrc.events WHERE stream = 'comp-3'")\""
expect "compaction did remove older records (comp-3 has fewer records than events)" \
    test "$(jq -s '[.[] | select(.key == "comp-3")] | length' "$dir/comp.jsonl")" -lt \
    "$(fwd_sql "SELECT count(*) FROM esrc.events WHERE stream = 'comp-3'")"

if [ $status -ne 0 ]; then
    grep -E "esrc forwarder|ERROR|FATAL" "$dir/pg/server.log" | tail -30 >&2
fi
exit $status
