# test/stress/load.sh: the writer load and the read_all follower shared by
# test/run-20-append-stress.sh and test/run-25-soak.sh.  Source it after
# test/lib.sh, with PGHOST/PGPORT/PGUSER/PGDATABASE set.
#
#   stress_load DIR CLIENTS SECONDS
#       starts the reader (test/stress/reader.sql), runs pgbench with the
#       two scripts (single appends and 3-event batches, both with expected
#       versions, retrying 40001), appends the end marker and waits for the
#       reader.  Sets STRESS_START (the horizon before the load),
#       STRESS_SINGLES and STRESS_BATCHES (acknowledged transactions per
#       script).  STRESS_READER_PID is set while the reader runs, for the
#       caller's cleanup trap.
#   stress_check DIR
#       runs test/stress/check.sql into DIR/check.out and prints it.

STRESS_READER_PID=

stress_load() {
    local dir=$1 clients=$2 secs=$3 failed
    STRESS_START=$(psql -qAtX -c "SELECT esrc.safe_position()")
    psql -qX -v ON_ERROR_STOP=1 -v start_position="$STRESS_START" \
        -f "$ESRC_ROOT/test/stress/reader.sql" >"$dir/reader.log" 2>&1 &
    STRESS_READER_PID=$!

    "$PG_BINDIR/pgbench" -n -c "$clients" -j 2 -T "$secs" --max-tries=1000 \
        --log --log-prefix="$dir/txlog" \
        -f "$ESRC_ROOT/test/stress/append_single.pgbench@8" \
        -f "$ESRC_ROOT/test/stress/append_batch.pgbench@2" >"$dir/pgbench.log" 2>&1 \
        || { cat "$dir/pgbench.log"; die "pgbench failed"; }
    grep -E "^(number of transactions actually processed|number of transactions retried|tps)" \
        "$dir/pgbench.log" | sed 's/^/  /' >&2

    # acknowledged transactions per script, from the per-transaction log
    # (client_id transaction_no time script_no ...; time is "failed" for a
    # transaction that failed after all its tries)
    STRESS_SINGLES=$(cat "$dir"/txlog.* | awk '$3 != "failed" && $4 == 0' | wc -l)
    STRESS_BATCHES=$(cat "$dir"/txlog.* | awk '$3 != "failed" && $4 == 1' | wc -l)
    failed=$(cat "$dir"/txlog.* | awk '$3 == "failed"' | wc -l)
    [ "$failed" = 0 ] || die "$failed transactions failed even after retries"

    psql -qX -v ON_ERROR_STOP=1 -c "SELECT esrc.append('stress-done', 'Done', '{}')" >/dev/null
    wait "$STRESS_READER_PID" || { cat "$dir/reader.log"; die "reader failed"; }
    STRESS_READER_PID=
}

stress_check() {
    local dir=$1
    psql -qX -v ON_ERROR_STOP=1 -v singles="$STRESS_SINGLES" -v batches="$STRESS_BATCHES" \
        -v start_position="$STRESS_START" \
        -f "$ESRC_ROOT/test/stress/check.sql" >"$dir/check.out"
}
