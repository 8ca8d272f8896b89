#!/usr/bin/env bash
# bench/forward-standby/run.sh: what esrc.forwarder_standbys costs the
# forwarding latency (issue 27), on one machine, in one run.
#
# A primary forwarding to a local Kafka broker (exactly_once), and a
# streaming standby on physical slot standby1 on the same machine.  Two
# phases of $BENCH_RATE appends/s (default 1000, one event per
# transaction, 4 sessions) for $BENCH_SECONDS s each (default 15; the
# first 2 s are warm-up), the same load:
#   without: esrc.forwarder_standbys = ''
#   with:    esrc.forwarder_standbys = 'standby1'
# For each, the latency of every event from its PostgreSQL commit
# (track_commit_timestamp, pg_xact_commit_timestamp(xmin)) to the Kafka
# commit of the batch holding it (commit_transaction() returned; from the
# esrc.forwarder_log_batches lines, as bench/forward/run.sh measures
# commit_to_kafka_ack), p50/p90/p99; then with_vs_without, the ratio of
# the percentiles; and beside it the standby's replication lag as the
# primary sees it (pg_stat_replication.flush_lag and replay_lag, sampled
# every 100 ms during the load).
#
# Usage: flock -o /tmp/esrc-bench.lock bash bench/forward-standby/run.sh
# (as root or a sudoer, like test/all.sh).  Prints "name value" lines;
# nothing is asserted.
set -euo pipefail
ESRC_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ESRC_ROOT/test/lib.sh"
source "$ESRC_ROOT/test/forward/common.sh"
fwd_under_reaper "$@"

RATE=${BENCH_RATE:-1000}
SECS=${BENCH_SECONDS:-15}

dir=$(test_tmpdir fwd-standby-bench)
sdir=$dir/standby
trap 'pg_stop "$sdir" immediate; fwd_stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT

fwd_start_kafka "$dir/kafka"
fwd_start_pg "$dir/pg" "shared_buffers = 256MB" "max_wal_size = 4GB" "track_commit_timestamp = on" \
    "include_if_exists = 'standbys.conf'"
echo "postgres $("$PG_BINDIR/postgres" --version | cut -d' ' -f3), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

fwd_sql "SELECT pg_create_physical_replication_slot('standby1')" >/dev/null
mkdir -p "$sdir"
chmod 755 "$sdir"
[ "$(id -u)" = 0 ] && chown "$ESRC_TEST_USER" "$sdir"
as_test_user "$PG_BINDIR/pg_basebackup" -h 127.0.0.1 -p "$FWD_PORT" -U postgres \
    -D "$sdir/data" -R -S standby1 -X stream -c fast >/dev/null
printf "port = %s\nunix_socket_directories = '%s'\n" "$(free_port)" "$sdir" |
    as_test_user tee -a "$sdir/data/postgresql.conf" >/dev/null
as_test_user "$PG_BINDIR/pg_ctl" -D "$sdir/data" -l "$sdir/server.log" -w -t 60 start >/dev/null

fwd_sql "SELECT esrc.append('lat-0', 'Tick', '{}')" >/dev/null
fwd_wait_forwarded 60
fwd_sql "ALTER SYSTEM SET esrc.forwarder_log_batches = on" >/dev/null
fwd_sql "SELECT pg_reload_conf()" >/dev/null
echo "SELECT esrc.append('lat-' || (random() * 100)::int, 'Tick', '{\"x\": 1}');" >"$dir/lat.sql"

batch_re='.*esrc forwarder: batch first=\([0-9]*\) last=\([0-9]*\) events=\([0-9]*\) woke_us=\([0-9]*\) read_us=\([0-9]*\) started_us=\([0-9]*\) queued_us=\([0-9]*\) acked_us=\([0-9]*\) committed_us=\([0-9]*\).*'
pct() { # NAME EXPR FROM
    echo "SELECT format('%s n=%s p50=%sms p90=%sms p99=%sms max=%sms', '$1', count(*),
              round(percentile_disc(0.5) WITHIN GROUP (ORDER BY $2) / 1000.0, 2),
              round(percentile_disc(0.9) WITHIN GROUP (ORDER BY $2) / 1000.0, 2),
              round(percentile_disc(0.99) WITHIN GROUP (ORDER BY $2) / 1000.0, 2),
              round(max($2) / 1000.0, 2)) FROM $3;"
}

phase() { # NAME STANDBYS
    local lo hi wall0 sampler
    echo "esrc.forwarder_standbys = '$2'" | as_test_user tee "$dir/pg/data/standbys.conf" >/dev/null
    fwd_sql "SELECT pg_reload_conf()" >/dev/null
    until [ "$(fwd_sql "SHOW esrc.forwarder_standbys")" = "$2" ]; do sleep 0.1; done
    fwd_wait_forwarded 60
    lo=$(fwd_sql "SELECT coalesce(max(position), 0) FROM esrc.events")
    wall0=$(date +%s%3N)
    # the standby's lag, as the primary sees it, every 100 ms
    (while :; do
        fwd_sql "SELECT coalesce(extract(epoch FROM flush_lag) * 1000000, 0)::bigint || ',' ||
                        coalesce(extract(epoch FROM replay_lag) * 1000000, 0)::bigint
                 FROM pg_stat_replication WHERE application_name = 'walreceiver'" || true
        sleep 0.1
    done) >"$dir/lag.$1" 2>/dev/null &
    sampler=$!
    pgbench -h 127.0.0.1 -p "$FWD_PORT" -U postgres -n -f "$dir/lat.sql" -R "$RATE" -T "$SECS" \
        -c 4 -j 2 "$FWD_DB" >"$dir/pgbench.$1.log" 2>&1
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    fwd_wait_forwarded 60
    hi=$(fwd_sql "SELECT max(position) FROM esrc.events")
    echo "$1 appends: $(grep -E '^tps' "$dir/pgbench.$1.log" | cut -d' ' -f1-3)"
    sed -n "s/$batch_re/\1,\2,\3,\4,\5,\6,\7,\8,\9/p" "$FWD_PGDIR/server.log" >"$dir/batches.$1"
    grep -E '^[0-9]+,[0-9]+$' "$dir/lag.$1" >"$dir/lag.$1.csv" || true
    psql -h 127.0.0.1 -p "$FWD_PORT" -U postgres -d "$FWD_DB" -qAt -v ON_ERROR_STOP=1 <<SQL | sed "s/^/$1 /"
CREATE TEMP TABLE b (first bigint, last bigint, events int, woke bigint, read bigint,
                     started bigint, queued bigint, acked bigint, committed bigint);
\copy b FROM '$dir/batches.$1' WITH (FORMAT csv)
DELETE FROM b WHERE first <= $lo OR last > $hi;
CREATE TEMP TABLE ev AS
  SELECT position, (extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::bigint AS commit_us
  FROM esrc.events WHERE position > $lo AND position <= $hi;
DELETE FROM ev WHERE commit_us < $(( (wall0 + 2000) * 1000 ));
CREATE TEMP TABLE lag (flush bigint, replay bigint);
\copy lag FROM '$dir/lag.$1.csv' WITH (FORMAT csv)
$(pct commit_to_kafka_ack "b.committed - ev.commit_us" "ev JOIN b ON ev.position BETWEEN b.first AND b.last")
$(pct standby_flush_lag "flush" lag)
$(pct standby_replay_lag "replay" lag)
SELECT format('batches n=%s events_per_batch=%s', count(*), round(avg(events), 1)) FROM b;
SQL
}

phase without "" | tee "$dir/without.out"
phase with standby1 | tee "$dir/with.out"
pget() { sed -n "s/.* commit_to_kafka_ack .* $2=\([0-9.]*\)ms.*/\1/p" "$1" | head -1; }
for q in p50 p90 p99; do
    echo "with_vs_without_$q $(awk -v a="$(pget "$dir/with.out" $q)" -v b="$(pget "$dir/without.out" $q)" \
        'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')"
done
echo "(machine shared with other jobs: load average $(cut -d' ' -f1-3 /proc/loadavg))"
