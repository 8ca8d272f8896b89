#!/usr/bin/env bash
# Erased data leaves the data files: after esrc.erase_stream, VACUUM
# esrc.events, esrc.scrub and CHECKPOINT, the bytes of the erased events
# are in neither the heap file nor the TOAST file of esrc.events (every
# segment), checked with grep on the files, not through SQL.
#
# Markers (random per run, so they occur nowhere else): in the erased
# stream a small data value (inline in the heap), a metadata value, and a
# 6.4 kB data value of random hex (TOASTed uncompressed); the same kinds in
# other streams, appended before and after, which must survive
# byte-identical.  The grep is shown to work: all markers are found before
# the erase, and the erased ones are still FOUND after VACUUM (the control:
# the state without the scrub); after the scrub they must be gone while
# the other streams' markers are still found.
#
# Then the scrub runs against an append load (pgbench, ESRC_SCRUB_SECONDS,
# default 5): every acknowledged append is stored, versions contiguous,
# data as written, and the other streams unchanged.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ESRC_ROOT/test/lifecycle/common.sh"

secs=${ESRC_SCRUB_SECONDS:-5}
dir=$(test_tmpdir erasebytes)
port=$(free_port)
scrub_pid=
cleanup() {
    [ -n "$scrub_pid" ] && kill "$scrub_pid" 2>/dev/null || true
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "autovacuum = off"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
q -c "CREATE EXTENSION esrc" -c "CREATE ROLE scrubber LOGIN IN ROLE esrc_admin"

rnd() { python3 -c 'import secrets,sys; print(secrets.token_hex(int(sys.argv[1])))' "$1"; }
run=$(rnd 4)
# name -> marker; E* are erased, K* are kept
declare -A M=(
    [Esmall]="ERASESMALL$run" [Emeta]="ERASEMETA$run" [Ebig]="ERASEBIG$run"
    [Ksmall]="KEEPSMALL$run" [Kmeta]="KEEPMETA$run" [Kbig]="KEEPBIG$run"
)
big() { echo "$1$(rnd 3200)$1"; }  # 6.4 kB of hex between two copies of the marker

append() {  # stream data-json metadata-json
    q -v s="$1" -v d="$2" -v m="$3" <<<"SELECT esrc.append(:'s', 'Noted', :'d'::jsonb, :'m'::jsonb);" >/dev/null
}
# The victim's small events follow fillers of its own: VACUUM's pruning
# compacts a page by moving its live tuples (and the redacted versions
# erase_stream added) to the page's end, over the first bytes below the
# live ones; the marker, behind 3 kB of fillers, is left in the hole then.
filler() { append victim "{\"pad\": \"$(rnd 450)\"}" 'null'; }
for i in 1 2 3; do
    append "keep-$i" "{\"note\": \"${M[Ksmall]} $i\"}" "{\"ip\": \"${M[Kmeta]}\"}"
    append "keep-$i" "{\"blob\": \"$(big "${M[Kbig]}")\"}" 'null'
    if [ "$i" = 1 ]; then
        filler; filler; filler
        append victim "{\"note\": \"${M[Esmall]}\"}" "{\"ip\": \"${M[Emeta]}\"}"
        filler; filler; filler; filler
        append victim "{\"blob\": \"$(big "${M[Ebig]}")\"}" "{\"ip\": \"${M[Emeta]}\"}"
    fi
done
q -c "SELECT pg_relation_size('esrc.events'), pg_relation_size(reltoastrelid)
      FROM pg_class WHERE oid = 'esrc.events'::regclass" | sed 's/^/  heap|toast bytes: /' >&2
# the external storage of the big values: TOASTed, not compressed
toast=$(q -c "SELECT count(*) FROM esrc.events
              WHERE data ? 'blob' AND pg_column_size(data) > 6400")
[ "$toast" = 4 ] || die "expected 4 uncompressed big values, found $toast"

keep_sum() {
    q -c "SELECT md5(string_agg(e::text, '|' ORDER BY position)) FROM esrc.events e
          WHERE stream LIKE 'keep-%'"
}
datadir=$dir/data
found() { erase_found q "$datadir" "$1"; }  # marker -> occurrences in the files
report() {  # step: print every marker's count, one line
    local k line="$1:"
    for k in Esmall Emeta Ebig Ksmall Kmeta Kbig; do line="$line $k=$(found "${M[$k]}")"; done
    log "  $line"
}
expect() {  # step names...: E markers must be (absent|present), K present
    local want=$1 k n
    for k in Esmall Emeta Ebig; do
        n=$(found "${M[$k]}")
        if [ "$want" = absent ]; then
            [ "$n" = 0 ] || die "$k marker ${M[$k]} still in the files ($n times)"
        else
            [ "$n" -gt 0 ] || die "$k marker ${M[$k]} not found: the grep cannot see it"
        fi
    done
    for k in Ksmall Kmeta Kbig; do
        n=$(found "${M[$k]}")
        [ "$n" -gt 0 ] || die "$k marker ${M[$k]} of a kept stream not found"
    done
}

before=$(keep_sum)
q -c "CHECKPOINT"
report "appended, checkpoint"
expect present

q -c "SET ROLE scrubber" -c "SELECT esrc.erase_stream('victim', 'test $run')" >/dev/null
q -c "VACUUM (VERBOSE) esrc.events" 2>&1 | grep -E 'removable|removed' | sed 's/^/  /' >&2 || true
q -c "CHECKPOINT"
report "control: erased, VACUUM, CHECKPOINT, no scrub"
expect present
log "  control ok: the erased markers are still FOUND in the files without the scrub"

# small slices, to go through the resumption
calls=0
while :; do
    calls=$((calls + 1))
    out=$(q -F ' ' -c "SET ROLE scrubber" \
        -c "SELECT relation, pages_scanned, pages_scrubbed, bytes_zeroed, done FROM esrc.scrub(2)")
    echo "$out" | sed "s/^/  scrub call $calls: /" >&2
    [ "$(echo "$out" | awk '$5 != "t"' | wc -l)" = 0 ] && break
    [ "$calls" -lt 1000 ] || die "the scrub did not finish"
done
q -c "CHECKPOINT"
report "erased, VACUUM, scrub, CHECKPOINT"
expect absent
log "  the erased markers are gone from the heap and TOAST files; the kept ones are there"

[ "$(keep_sum)" = "$before" ] || die "the kept streams changed"
q -c "SELECT string_agg(version || ':' || data::text || ':' || coalesce(metadata::text, 'null'), ' '
      ORDER BY version) FROM esrc.read_stream('victim')" | sed 's/^/  victim: /' >&2
log "  the kept streams are byte-identical (md5 of their rows)"

# ---- the scrub against an append load ----
# dirt to scrub: a stream of 3000 events with 1 kB of data, erased and vacuumed
q -c "SELECT esrc.append('dirt', 'Noted', jsonb_build_object('pad', repeat(md5(g::text), 32)))
      FROM generate_series(1, 3000) g" >/dev/null
q -c "SELECT esrc.erase_stream('dirt', 'load test')" -c "VACUUM esrc.events" >/dev/null
before=$(keep_sum)
first=$(q -c "SELECT esrc.append('probe', 'Noted', '{}')")  # the first version of a stream
cat >"$dir/append.sql" <<'EOF'
SELECT esrc.append('load-' || :client_id, 'Noted', jsonb_build_object('c', :client_id, 'pad', repeat('x', 300)));
EOF
(
    n=0
    while :; do
        q -c "SET ROLE scrubber" -c "SELECT sum(pages_scrubbed) FROM esrc.scrub(50, $([ $n = 0 ] && echo true || echo false))" >>"$dir/scrub.pages"
        n=$((n + 1))
        echo "$n" >"$dir/scrub.calls"
    done
) &
scrub_pid=$!
"$PG_BINDIR/pgbench" -n -c 4 -j 4 -T "$secs" -f "$dir/append.sql" >"$dir/pgbench.out" 2>&1 \
    || { cat "$dir/pgbench.out"; die "pgbench failed"; }
kill "$scrub_pid"; wait "$scrub_pid" 2>/dev/null || true; scrub_pid=
acked=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$dir/pgbench.out")
failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$dir/pgbench.out")
zeroed=$(awk '{s += $1} END {print s + 0}' "$dir/scrub.pages")
log "  under load: $acked appends acknowledged (${failed:-0} failed), $(cat "$dir/scrub.calls") scrub calls, $zeroed pages zeroed"
[ "$zeroed" -gt 0 ] || die "the scrub zeroed no page under load: the dirt was not there"
[ "${failed:-0}" = 0 ] || die "appends failed during the scrub"
check=$(q -c "SELECT coalesce(sum(n), 0) = $acked, bool_and(ok)
              FROM (SELECT count(*) AS n,
                           count(*) = max(version) - min(version) + 1
                           AND min(version) = $first
                           AND bool_and(data = jsonb_build_object('c', substr(stream, 6)::int,
                                                                  'pad', repeat('x', 300))
                                        AND metadata IS NULL) AS ok
                    FROM esrc.events WHERE stream LIKE 'load-%' GROUP BY stream) s")
log "  load check (all stored | versions contiguous, data as written): $check"
[ "$check" = "t|t" ] || die "appends lost or changed during the scrub"
[ "$(keep_sum)" = "$before" ] || die "the kept streams changed during the scrub under load"
log "erase + VACUUM + scrub removes the bytes; nothing lost under load"
