# test/valgrind/lib.sh: a PostgreSQL server under valgrind memcheck, for
# test/valgrind.sh and test/valgrind-forward.sh.  Source after test/lib.sh.
#
#   vg_ensure                 install valgrind if missing
#   vg_start DIR PORT CONF... initdb DIR/data, append CONF lines, start the
#                             postmaster under memcheck (one log per
#                             process: DIR/vg.PID.log); sets VG_PID, VG_PMPID
#   vg_stop DIR               fast shutdown, then wait for valgrind
#   vg_cleanup DIR            for an EXIT trap: stop whatever is left, by pid
#   vg_scan DIR               self-check of scan.py, then scan DIR/vg.*.log:
#                             non-zero when an error has an esrc frame, or
#                             the server log shows a crash or a PANIC
#
# Suppressions: test/valgrind/pg15-debian.supp (ours, derived from runs on
# Debian's postgresql-15), plus PostgreSQL's own src/tools/valgrind.supp
# when it is in $ESRC_CACHE/valgrind.supp.
#
# The Debian server is not built with USE_VALGRIND, so memcheck sees palloc
# chunks only as parts of malloc'd blocks: it catches reads of
# uninitialised memory, invalid frees and accesses outside malloc'd blocks,
# but not an overrun into the next chunk of the same memory context.

VG_PID=
VG_PMPID=

vg_ensure() {
    command -v valgrind >/dev/null && return 0
    [ "$(id -u)" = 0 ] || die "valgrind is missing; install it"
    log "installing valgrind (apt-get)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q valgrind >/dev/null
}

vg_start() {
    local dir=$1 port=$2 line
    shift 2
    local supps=(--suppressions="$ESRC_ROOT/test/valgrind/pg15-debian.supp")
    if [ -s "$ESRC_CACHE/valgrind.supp" ]; then
        supps+=(--suppressions="$ESRC_CACHE/valgrind.supp")
        log "using PostgreSQL's suppressions from $ESRC_CACHE/valgrind.supp"
    fi
    as_test_user "$PG_BINDIR/initdb" -D "$dir/data" -A trust -U postgres --no-sync -E UTF8 \
        --locale=C >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log"; die "initdb failed"; }
    {
        cat <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
shared_preload_libraries = 'esrc'
max_connections = 30
max_prepared_transactions = 2
max_worker_processes = 8
max_parallel_workers_per_gather = 0
autovacuum = off
log_min_messages = warning
log_line_prefix = '%m [%p] %a '
CONF
        for line in "$@"; do echo "$line"; done
    } | as_test_user tee -a "$dir/data/postgresql.conf" >/dev/null

    log "starting the server under valgrind"
    as_test_user valgrind --tool=memcheck --quiet --trace-children=no --track-origins=yes \
        --read-var-info=no --fullpath-after= --num-callers=40 --error-limit=no --gen-suppressions=all \
        "${supps[@]}" --log-file="$dir/vg.%p.log" \
        "$PG_BINDIR/postgres" -D "$dir/data" >"$dir/server.log" 2>&1 &
    VG_PID=$!
    for _ in $(seq 1 240); do
        "$PG_BINDIR/pg_isready" -q -h 127.0.0.1 -p "$port" && break
        sleep 0.5
    done
    "$PG_BINDIR/pg_isready" -q -h 127.0.0.1 -p "$port" || { tail -30 "$dir/server.log"; die "server did not start"; }
    VG_PMPID=$(head -1 "$dir/data/postmaster.pid")
}

vg_stop() {
    local dir=$1 rc=0
    as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -m fast -w -t 300 stop >/dev/null || rc=1
    wait "$VG_PID" || true
    VG_PID=
    VG_PMPID=
    return $rc
}

vg_cleanup() {
    local dir=$1
    # stop the postmaster; if that fails, kill it by its pid (only while
    # that pid is still our postmaster: its command line names our data dir)
    if [ -z "$VG_PMPID" ] && [ -n "$VG_PID" ] && [ -f "$dir/data/postmaster.pid" ]; then
        VG_PMPID=$(head -1 "$dir/data/postmaster.pid")
    fi
    if [ -n "$VG_PMPID" ] && ! as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -m immediate -w -t 120 \
            stop >/dev/null 2>&1; then
        tr '\0' ' ' <"/proc/$VG_PMPID/cmdline" 2>/dev/null | grep -qF -- "$dir/data" &&
            kill -9 "$VG_PMPID" 2>/dev/null || true
    fi
    [ -n "$VG_PID" ] && kill -9 "$VG_PID" 2>/dev/null || true
    return 0
}

vg_scan() {
    local dir=$1 rc=0
    # the scanner must flag an error with an esrc frame (self-check), then scan
    printf '%s\n' '==1== Invalid read of size 4' '==1==    at 0x4A: esrc_append (append.c:10)' \
        '==1==    by 0x4B: ExecInterpExpr (in /usr/lib/postgresql/15/bin/postgres)' '==1== ' \
        >"$dir/selfcheck.log"
    if python3 "$ESRC_ROOT/test/valgrind/scan.py" "$dir/selfcheck.log" >/dev/null; then
        die "test/valgrind/scan.py does not flag an error in esrc"
    fi
    python3 "$ESRC_ROOT/test/valgrind/scan.py" "$dir"/vg.*.log || rc=1
    grep -E "terminated by signal|PANIC" "$dir/server.log" && rc=1
    return $rc
}
