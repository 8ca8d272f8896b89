#!/usr/bin/env bash
# The soak: everything on at once, bounded.
#
#   bash test/run-25-soak.sh [SECONDS]     (default 60; ESRC_SOAK_SECONDS too)
#
# pgbench clients append with expected versions to hot and cold streams
# (single events and 3-event batches, retrying 40001), two snapshots are
# maintained on their category (the C esrc.merge and a PL/pgSQL reducer),
# the Kafka forwarder runs in exactly_once mode against a real broker with
# 3 partitions, and a reader follows esrc.read_all().  At the end:
#   - the SQL invariants of test/stress/check.sql (no lost acknowledged
#     append, no duplicate or missing version, order, the reader saw every
#     event once and in order);
#   - every snapshot row equals a fresh replay (esrc.snapshot_at) and is at
#     the stream's last version;
#   - Kafka holds every committed event exactly once, in per-stream order
#     (test/forward/check.py).
# The counts are printed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
source "$ESRC_ROOT/test/stress/load.sh"
fwd_under_reaper "$@"

secs=${1:-${ESRC_SOAK_SECONDS:-60}}
clients=${ESRC_SOAK_CLIENTS:-8}
FWD_DB=soak
dir=$(test_tmpdir soak)
cleanup() {
    [ -n "$STRESS_READER_PID" ] && kill "$STRESS_READER_PID" 2>/dev/null || true
    fwd_stop_all
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT

KAFKA_NUM_PARTITIONS=3 fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg" "max_connections = 40"
export PGHOST=127.0.0.1 PGPORT=$FWD_PORT PGUSER=postgres PGDATABASE=$FWD_DB

psql -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE FUNCTION soak_count(state jsonb, event esrc.event) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN jsonb_build_object('events', coalesce((state->>'events')::int, 0) + 1,
                              'last_type', event.type, 'last_version', event.version);
END $$;
SELECT esrc.create_snapshot('soak_merge', 'stress', 'esrc.merge(jsonb, esrc.event)');
SELECT esrc.create_snapshot('soak_count', 'stress', 'soak_count(jsonb, esrc.event)');
SQL
log "soak: $clients clients for ${secs}s, 2 snapshots, forwarder exactly_once, a read_all follower"
stress_load "$dir" "$clients" "$secs"
singles=$STRESS_SINGLES
batches=$STRESS_BATCHES

status=0
stress_check "$dir"
psql -qAtX -F ' ' -v ON_ERROR_STOP=1 >>"$dir/check.out" <<'SQL'
SELECT 'snapshots_equal_replays',
       bool_and(s.state = esrc.snapshot_at('soak_merge', s.stream, s.version)
                AND s.version = esrc.stream_version(s.stream)),
       count(*) || ' soak_merge rows'
FROM soak_merge s;
SELECT 'counting_snapshot_consistent',
       bool_and((c.state->>'events')::bigint = c.version + 1
                AND (c.state->>'last_version')::bigint = c.version
                AND c.state = esrc.snapshot_at('soak_count', c.stream, c.version)),
       count(*) || ' soak_count rows'
FROM soak_count c;
SELECT 'every_stream_has_snapshot_rows',
       (SELECT count(DISTINCT stream) FROM esrc.events WHERE category = 'stress')
         = (SELECT count(*) FROM soak_merge)
       AND (SELECT count(*) FROM soak_merge) = (SELECT count(*) FROM soak_count), '';
SQL
sed 's/^/  /' "$dir/check.out" >&2
bad=$(awk '$2 != "t"' "$dir/check.out")
[ -z "$bad" ] || { log "FAIL - invariants violated: $bad"; status=1; }
[ "$(wc -l <"$dir/check.out")" -eq 11 ] || { log "FAIL - expected 11 checks"; status=1; }

fwd_wait_forwarded 180 || status=1
fwd_dump_events "$dir/events.jsonl"
fwd_consume "$dir/records.jsonl"
log "Kafka: $(wc -l <"$dir/records.jsonl") records for $(wc -l <"$dir/events.jsonl") committed events"
fwd_check "$dir/events.jsonl" "$dir/records.jsonl" --database "$FWD_DB" --partitions 3 \
    | sed 's/^/  /' >&2 || status=1

log "soak: $singles single appends and $batches batches acknowledged,
  $(wc -l <"$dir/events.jsonl") events stored and forwarded; status $status"
exit $status
