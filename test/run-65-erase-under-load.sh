#!/usr/bin/env bash
# esrc.erase_stream under load (issue 16's first proof).  A category
# "acct" with a snapshot table (esrc.create_snapshot, esrc.merge) and the
# Kafka forwarder on, against a real broker; a 10,000-event stream
# acct-victim whose data is mostly large (3.2 kB of random hex: TOASTed,
# not compressed); 8 pgbench writers appending to 40 streams of the same
# category (each client to streams of its own, with the expected version,
# data derived from stream and version); two readers that page through
# read_all and read_category('acct') with their own positions from start
# to end.  The victim is erased
# in the middle of the load.  Then:
#   - the erased data is in neither the heap nor the TOAST files of
#     esrc.events after VACUUM, esrc.scrub and CHECKPOINT (grep on the
#     files; before the erase the same grep finds it);
#   - the victim keeps its positions, versions, types, ids, timestamps;
#     every one of its 10,000 events is redacted;
#   - every other event stored before the load is byte-identical to a copy
#     taken then, and every event appended during the load is what the
#     writers wrote, one for each acknowledged transaction;
#   - each reader saw every event of the log (of the category) once, in
#     position order;
#   - the forwarder delivered every event exactly once (read_committed
#     consumer; records of other streams checked in full by
#     test/forward/check.py); a null-valued record (an erasure tombstone)
#     is not counted as an event;
#   - the snapshot table equals a fresh replay of the log (a second
#     create_snapshot), and has no row for the victim;
#   - esrc.erasures has the audit row;
#   - events erased before the forwarder sent them (it is paused meanwhile)
#     reach Kafka redacted, their marker nowhere in the topic.
# Each check is also run on tampered input and must fail there.
# ESRC_ERASE_LOAD_SECONDS (default 12): length of the pgbench load.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
source "$ESRC_ROOT/test/lifecycle/common.sh"
fwd_under_reaper "$@"

secs=${ESRC_ERASE_LOAD_SECONDS:-12}
victim=acct-victim
dir=$(test_tmpdir erase-load)
reader_pid=
creader_pid=
load_pid=
cleanup() {
    [ -n "$reader_pid" ] && kill "$reader_pid" 2>/dev/null || true
    [ -n "$creader_pid" ] && kill "$creader_pid" 2>/dev/null || true
    [ -n "$load_pid" ] && kill "$load_pid" 2>/dev/null || true
    fwd_stop_all
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
status=0

fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg" "autovacuum = off"
datadir=$dir/pg/data
q() { psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qAtX -v ON_ERROR_STOP=1 "$@"; }
q -c "CREATE ROLE eraser LOGIN IN ROLE esrc_admin"

run=$(python3 -c 'import secrets; print(secrets.token_hex(4))')
EB=ERASEBIG$run; ES=ERASESMALL$run; EM=ERASEMETA$run; KB=KEEPBIG$run; KS=KEEPSMALL$run

# ---- the log before the load ----
# 40 streams acct-k<client>x<j> (client 1..8, j 0..4), 3 events each, one
# of them large; then the victim: 10,000 events, 9 in 10 large, every one
# with a metadata marker
q -c "SELECT esrc.append('acct-k' || c || 'x' || j, 'Seeded',
          CASE WHEN k = 1 THEN jsonb_build_object('blob', '$KB' || (SELECT string_agg(md5('$run' || c || j || i), '') FROM generate_series(1, 100) i) || '$KB')
               ELSE jsonb_build_object('note', '$KS ' || k) END,
          jsonb_build_object('k', k))
      FROM generate_series(1, 8) c, generate_series(0, 4) j, generate_series(0, 2) k
      ORDER BY c, j, k" >/dev/null
q -c "SELECT esrc.append('$victim', 'Noted',
          CASE WHEN g % 10 = 0 THEN jsonb_build_object('note', '$ES', 'g', g)
               ELSE jsonb_build_object('g', g, 'blob', '$EB' || (SELECT string_agg(md5('$run.' || g || '.' || i), '') FROM generate_series(1, 100) i) || '$EB') END,
          jsonb_build_object('ip', '$EM', 'g', g))
      FROM generate_series(0, 9999) g ORDER BY g" >/dev/null
q -c "SELECT esrc.append('other-1', 'Noted', '{\"x\": 1}')" >/dev/null
q -c "SELECT esrc.create_snapshot('public.snap', 'acct', 'esrc.merge(jsonb, esrc.event)')" >/dev/null
toasted=$(q -c "SELECT count(*) FROM esrc.events WHERE stream = '$victim' AND pg_column_size(data) > 3200")
log "victim: 10,000 events, $toasted of them with uncompressed data above 3.2 kB (TOASTed)"
[ "$toasted" = 9000 ] || die "expected 9000 large uncompressed values, found $toasted"

# the copies: every other event in full; the victim without its data
q -c "CREATE TABLE public.before_copy AS SELECT * FROM esrc.events WHERE stream <> '$victim'" \
  -c "CREATE TABLE public.victim_before AS
      SELECT position, stream, version, type, id, recorded_at, category
      FROM esrc.events WHERE stream = '$victim'"

q -c "CHECKPOINT"
found() { erase_found q "$datadir" "$1"; }
for m in "$EB" "$ES" "$EM" "$KB" "$KS"; do
    n=$(found "$m")
    log "  before the erase: $m found $n times in the heap and TOAST files"
    [ "$n" -gt 0 ] || die "marker $m not found before the erase: the grep cannot see it"
done

# ---- the readers: read_all and read_category from 0, each with its own
# position, throughout ----
reader() {  # output-file read-function-sql-with-AFTER
    local after=0 out last
    while :; do
        out=$(q -F ' ' -c "SELECT position, stream, version FROM ${2//AFTER/$after}")
        if [ -z "$out" ]; then
            [ -f "$dir/reader.stop" ] && break
            sleep 0.05
            continue
        fi
        echo "$out" >>"$1"
        last=$(echo "$out" | tail -1)
        after=${last%% *}
    done
}
: >"$dir/reader.out"
: >"$dir/creader.out"
reader "$dir/reader.out" "esrc.read_all(AFTER, 700)" &
reader_pid=$!
reader "$dir/creader.out" "esrc.read_category('acct', AFTER, 500)" &
creader_pid=$!

# ---- the load ----
cat >"$dir/writer.pgbench" <<'EOF'
\set j random(0, 4)
SELECT esrc.stream_version('acct-k' || :client_id + 1 || 'x' || :j) AS v \gset
SELECT esrc.append('acct-k' || :client_id + 1 || 'x' || :j, 'Tick', jsonb_build_object('s', 'acct-k' || :client_id + 1 || 'x' || :j, 'v', :v + 1, 'pad', repeat(md5('acct-k' || :client_id + 1 || 'x' || :j || ':' || (:v + 1)), 8)), jsonb_build_object('c', :client_id + 1), :v);
EOF
writes() { q -c "SELECT count(*) FROM esrc.events WHERE type = 'Tick'"; }
PGOPTIONS= "$PG_BINDIR/pgbench" -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -c 8 -j 2 -T "$secs" \
    -f "$dir/writer.pgbench" "$FWD_DB" >"$dir/pgbench.out" 2>&1 &
load_pid=$!
deadline=$((SECONDS + 60))
until [ "$(writes)" -ge 200 ]; do
    [ $SECONDS -lt $deadline ] || die "the load did not start"
    sleep 0.1
done
w0=$(writes)
t0=$(date +%s.%N)
erased=$(q -c "SET ROLE eraser" -c "SELECT esrc.erase_stream('$victim', 'run-65 $run')")
t1=$(date +%s.%N)
w1=$(writes)
kill -0 "$load_pid" 2>/dev/null || die "the load ended before the erase did: raise ESRC_ERASE_LOAD_SECONDS"
log "erase_stream redacted $erased events in $(python3 -c "print(round($t1 - $t0, 2))") s;" \
    "the writers appended $w0 events before it, $((w1 - w0)) while it ran"
[ "$erased" = 10000 ] || { log "FAIL - erase_stream returned $erased, not 10000"; status=1; }
wait "$load_pid" || { cat "$dir/pgbench.out"; die "pgbench failed"; }
load_pid=
w2=$(writes)
acked=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$dir/pgbench.out")
failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$dir/pgbench.out")
log "load: $acked appends acknowledged (${failed:-0} failed), $((w2 - w1)) after the erase"
expect "the load ran before and after the erase" test "$w0" -gt 0 -a "$w2" -gt "$w1"
expect "no append failed" test "${failed:-0}" = 0

touch "$dir/reader.stop"
wait "$reader_pid" || true
wait "$creader_pid" || true
reader_pid= creader_pid=

# ---- the log ----
# rows of the table $1 (a copy of the log, or the log) outside the victim
# that differ from before_copy, or are new and not what a writer wrote
copy_diff() {
    q -c "SELECT count(*) FROM public.before_copy b LEFT JOIN $1 e ON e.position = b.position
          WHERE e.position IS NULL OR b::text <> e::text
             OR jsonb_send(b.data) <> jsonb_send(e.data)
             OR jsonb_send(b.metadata) IS DISTINCT FROM jsonb_send(e.metadata)"
}
new_bad() {
    q -c "SELECT count(*) FILTER (WHERE NOT (type = 'Tick'
                 AND data = jsonb_build_object('s', stream, 'v', version,
                                               'pad', repeat(md5(stream || ':' || version), 8))
                 AND metadata = jsonb_build_object('c', substr(split_part(stream, 'x', 1), 7)::int)))
                 || ' ' || count(*)
          FROM $1 e WHERE stream <> '$victim'
                      AND NOT EXISTS (SELECT FROM public.before_copy b WHERE b.position = e.position)"
}
# (events esrc itself appends to the victim after the erase, such as an
# erasure marker for Kafka, are not the victim's 10,000: victim_extra)
victim_bad() {
    q -c "SELECT count(*) FROM public.victim_before b FULL JOIN $1 e
              ON e.position = b.position AND e.stream = '$victim'
          WHERE ((e.stream = '$victim' AND e.version < 10000) OR b.position IS NOT NULL)
            AND (e.position IS NULL OR b.position IS NULL
                 OR (b.stream, b.version, b.type, b.id, b.recorded_at, b.category)
                    IS DISTINCT FROM (e.stream, e.version, e.type, e.id, e.recorded_at, e.category)
                 OR e.data <> '{\"erased\": true}' OR e.metadata IS NOT NULL)"
}
victim_extra=$(q -c "SELECT count(*) FROM esrc.events WHERE stream = '$victim' AND version >= 10000")
log "  events of the victim after its 10,000: $victim_extra"
expect "every event stored before the load is byte-identical ($(q -c "SELECT count(*) FROM public.before_copy") events)" \
    test "$(copy_diff esrc.events)" = 0
expect "every event appended during the load is what its writer wrote, one per acknowledged append" \
    test "$(new_bad esrc.events)" = "0 $acked"
expect "the victim's 10,000 events are redacted, positions, versions, ids and times unchanged" \
    test "$(victim_bad esrc.events)" = 0
expect "no stream has a version hole, positions and versions agree" \
    test "$(q -c "SELECT count(*) FROM (SELECT stream, min(version) AS lo, max(version) AS hi, count(*) AS n,
                         bool_and(ok) AS ok
                  FROM (SELECT stream, version, version = row_number() OVER (PARTITION BY stream ORDER BY position) - 1 AS ok
                        FROM esrc.events) x GROUP BY stream) s
                  WHERE lo <> 0 OR hi + 1 <> n OR NOT ok")" = 0
# the same checks on tampered copies of the log must fail
q -c "CREATE TABLE public.log_bad AS SELECT * FROM esrc.events" \
  -c "ALTER TABLE public.log_bad ADD PRIMARY KEY (position)" \
  -c "UPDATE public.log_bad SET data = data || '{\"x\": 1}'
      WHERE position = (SELECT min(position) FROM public.before_copy WHERE type = 'Seeded')" \
  -c "UPDATE public.log_bad SET data = data || '{\"x\": 1}'
      WHERE position = (SELECT max(position) FROM esrc.events WHERE type = 'Tick')" \
  -c "UPDATE public.log_bad SET version = version + 1
      WHERE position = (SELECT max(position) FROM esrc.events WHERE stream = '$victim' AND version < 10000)"
expect "control: the copy check fails on a changed event" test "$(copy_diff public.log_bad)" = 1
expect "control: the writers' check fails on a changed event" test "$(new_bad public.log_bad)" = "1 $acked"
expect "control: the victim check fails on a changed version" test "$(victim_bad public.log_bad)" = 1

# ---- the reader ----
q -F ' ' -c "SELECT position, stream, version FROM esrc.events ORDER BY position" >"$dir/log.out"
reader_check() {  # reader-file log-file
    python3 - "$1" "$2" <<'EOF'
import sys
seen = [l.split() for l in open(sys.argv[1]) if l.strip()]
log = [l.split() for l in open(sys.argv[2]) if l.strip()]
pos = [int(r[0]) for r in seen]
order = all(a < b for a, b in zip(pos, pos[1:]))
print(f"  reader: {len(seen)} rows read, {len(log)} in the log, strictly increasing: {order}", file=sys.stderr)
sys.exit(0 if order and seen == log else 1)
EOF
}
q -F ' ' -c "SELECT position, stream, version FROM esrc.events WHERE category = 'acct' ORDER BY position" \
    >"$dir/clog.out"
expect "the read_all reader saw every event once, in position order, with its stream and version" \
    reader_check "$dir/reader.out" "$dir/log.out"
expect "the read_category reader saw every event of the category once, in position order" \
    reader_check "$dir/creader.out" "$dir/clog.out"
sed '500p' "$dir/reader.out" >"$dir/reader.dup"
sed '500d' "$dir/reader.out" >"$dir/reader.lost"
expect "control: the reader check fails on a repeated event" eval "! reader_check '$dir/reader.dup' '$dir/log.out'"
expect "control: the reader check fails on a skipped event" eval "! reader_check '$dir/reader.lost' '$dir/log.out'"

# ---- the forwarder ----
fwd_wait_forwarded 180 || status=1
fwd_dump_events "$dir/events.jsonl"
fwd_consume "$dir/records.jsonl"
fwd_once() {  # events records: every event's position delivered once, nothing else
    python3 - "$1" "$2" <<'EOF'
import json, sys, collections
events = [json.loads(l) for l in open(sys.argv[1])]
records = [json.loads(l) for l in open(sys.argv[2])]
# per position: one record with a value; an event whose record has a null
# value (an erasure tombstone that is an event) once; null-valued records at
# other positions are tombstones, not events
nonnull = collections.Counter(int(r["headers"]["ce_esrcposition"]) for r in records
                              if r["value"] is not None and "ce_esrcposition" in r["headers"])
nulls = collections.Counter(int(r["headers"].get("ce_esrcposition", -1)) for r in records
                            if r["value"] is None)
want = {e["position"] for e in events}
dups = [p for p in want if nonnull[p] > 1 or (nonnull[p] == 0 and nulls[p] > 1)]
lost = sorted(p for p in want if nonnull[p] == 0 and nulls[p] == 0)
extra = sorted(set(nonnull) - want)
tomb = sum(n for p, n in nulls.items() if p not in want or nonnull[p] > 0)
print(f"  forwarded: {len(records)} records for {len(want)} events ({sum(nulls.values())} null-valued,"
      f" {tomb} of them tombstones); repeated {dups[:5]}, lost {lost[:5]}, unknown {extra[:5]}",
      file=sys.stderr)
sys.exit(0 if not dups and not lost and not extra else 1)
EOF
}
expect "the forwarder delivered every event exactly once (read_committed)" \
    fwd_once "$dir/events.jsonl" "$dir/records.jsonl"
jq -c --arg v "$victim" 'select(.stream != $v)' "$dir/events.jsonl" >"$dir/events.others"
jq -c --arg v "$victim" 'select(.key != $v)' "$dir/records.jsonl" >"$dir/records.others"
fwd_check "$dir/events.others" "$dir/records.others" >"$dir/check.out" || status=1
sed 's/^/  /' "$dir/check.out" >&2
vrec=$(jq -c -n --arg v "$victim" 'first(inputs | select(.key == $v and .value != null))' "$dir/records.jsonl")
(cat "$dir/records.jsonl"; echo "$vrec") >"$dir/records.dup"
jq -c --arg v "$victim" 'select(.key != $v or .value == null or .headers.ce_esrcversion != "5000")' \
    "$dir/records.jsonl" >"$dir/records.lost"
expect "control: the delivery check fails on a repeated record of the victim" \
    eval "! fwd_once '$dir/events.jsonl' '$dir/records.dup' 2>/dev/null"
expect "control: the delivery check fails on a lost record of the victim" \
    eval "! fwd_once '$dir/events.jsonl' '$dir/records.lost' 2>/dev/null"

# ---- the snapshot ----
q -c "SELECT esrc.create_snapshot('public.snap_replay', 'acct', 'esrc.merge(jsonb, esrc.event)')" >/dev/null
snap_diff() {
    q -c "SELECT (SELECT count(*) FROM (SELECT stream, version, state FROM $1
                                        EXCEPT ALL SELECT stream, version, state FROM public.snap_replay) x)
               + (SELECT count(*) FROM (SELECT stream, version, state FROM public.snap_replay
                                        EXCEPT ALL SELECT stream, version, state FROM $1) x)"
}
expect "the snapshot table equals a replay of the log ($(q -c "SELECT count(*) FROM public.snap") rows)" \
    test "$(snap_diff public.snap)" = 0
expect "the snapshot has no row for the erased stream, the replay neither" \
    test "$(q -c "SELECT (SELECT count(*) FROM public.snap WHERE stream = '$victim')
                       + (SELECT count(*) FROM public.snap_replay WHERE stream = '$victim')")" = 0
q -c "CREATE TABLE public.snap_bad AS SELECT * FROM public.snap" \
  -c "UPDATE public.snap_bad SET state = state || '{\"x\": 1}' WHERE stream = 'acct-k1x0'"
expect "control: the snapshot check fails on a changed row" test "$(snap_diff public.snap_bad)" = 2
load_err=$(q -v VERBOSITY=verbose -c "SELECT esrc.load('public.snap', '$victim')" 2>&1 || true)
expect "load of the erased stream fails with 55000" \
    grep -q "ERROR:  55000: stream \"$victim\" was erased" <<<"$load_err"

# ---- the audit row ----
expect "esrc.erasures has the audit row" \
    test "$(q -c "SELECT count(*) FROM esrc.erasures WHERE what = 'erase_stream' AND stream = '$victim'
                  AND events = 10000 AND reason = 'run-65 $run' AND current_user_name = 'eraser'")" = 1

# ---- events not forwarded before the erase go out redacted ----
# the forwarder paused: 200 events with a marker, erased, then resumed
LM=LATEMARK$run
fwd_sql "SELECT esrc.forwarder_pause()" >/dev/null
fwd_wait_state paused 60 || status=1
q -c "SELECT esrc.append('acct-late', 'Noted', jsonb_build_object('note', '$LM', 'g', g),
                         jsonb_build_object('ip', '$LM'))
      FROM generate_series(1, 200) g ORDER BY g" >/dev/null
q -c "SET ROLE eraser" -c "SELECT esrc.erase_stream('acct-late', 'run-65 late $run')" >/dev/null
fwd_sql "SELECT esrc.forwarder_resume()" >/dev/null
fwd_wait_forwarded 120 || status=1
fwd_consume "$dir/records2.jsonl"
late_records() {  # records-file: "<records with a value> <of them redacted, without metadata> <marker hits>"
    echo "$(jq -s 'map(select(.key == "acct-late" and .value != null)) | length' "$1")" \
         "$(jq -s 'map(select(.key == "acct-late" and .value != null
                              and (.value | fromjson) == {"erased": true}
                              and (.headers | has("ce_esrcmetadata") | not))) | length' "$1")" \
         "$(grep -c -F -- "$LM" "$1" || true)"
}
expect "events forwarded after their erase go out redacted: 200 records, 200 redacted, the marker nowhere in Kafka" \
    test "$(late_records "$dir/records2.jsonl")" = "200 200 0"
sed "0,/\"key\":\"acct-late\"/s//\"key\":\"acct-late\",\"leak\":\"$LM\"/" "$dir/records2.jsonl" >"$dir/records2.bad"
expect "control: the check fails when the marker is in a record" \
    test "$(late_records "$dir/records2.bad")" != "200 200 0"

# ---- the bytes ----
# the copies of the victim (its snapshot row, the tampered log) are not
# part of esrc.events; drop them anyway
q -c "DROP TABLE public.log_bad, public.snap_bad"
deadline=$((SECONDS + 60))
until [ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()
                 AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)")" = 0 ]; do
    [ $SECONDS -lt $deadline ] || die "a session keeps a snapshot open"
    sleep 0.2
done
vac=$(q -c "VACUUM (VERBOSE) esrc.events" 2>&1 | grep -E 'not yet removable' || true)
echo "$vac" | sed 's/^/  /' >&2
expect "VACUUM removed every dead row version" \
    test "$(echo "$vac" | grep -c -v ' 0 are dead but not yet removable')" = 0
calls=0
restart=true
while :; do
    calls=$((calls + 1))
    out=$(q -F ' ' -c "SET ROLE eraser" \
        -c "SELECT relation, pages_scanned, pages_scrubbed, bytes_zeroed, done FROM esrc.scrub(500, $restart)")
    restart=false
    echo "$out" | sed "s/^/  scrub call $calls: /" >&2
    [ "$(echo "$out" | awk '$5 != "t"' | wc -l)" = 0 ] && break
    [ "$calls" -lt 1000 ] || die "the scrub did not finish"
done
q -c "CHECKPOINT"
for m in "$EB" "$ES" "$EM" "$LM"; do
    n=$(found "$m")
    expect "erased marker $m is in neither the heap nor the TOAST files ($n)" test "$n" = 0
done
for m in "$KB" "$KS"; do
    n=$(found "$m")
    expect "kept marker $m is still in the files ($n)" test "$n" -gt 0
done
expect "after the scrub the other streams are still byte-identical" test "$(copy_diff esrc.events)" = 0

if [ $status -ne 0 ]; then
    grep -E "ERROR|FATAL|esrc forwarder" "$dir/pg/server.log" | tail -30 >&2
    exit 1
fi
log "erase under load: all checks passed"
