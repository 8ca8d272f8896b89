# test/lib.sh: helpers sourced by the test and demo drivers.
#
# PostgreSQL refuses to run as root, and CI runs as root, so servers run as
# the unprivileged user $ESRC_TEST_USER (created on first use).  Every
# server gets its own temporary directory and a free port; pg_stop stops it
# by the pid in its postmaster.pid, never by name.

ESRC_ROOT=${ESRC_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
ESRC_TEST_USER=${ESRC_TEST_USER:-esrc}
ESRC_CACHE=${ESRC_CACHE:-$HOME/.cache/esrc}
# ESRC_PG: the PostgreSQL major to build and test against (Debian's
# layout); test/matrix/run.sh sets it inside the roots of the other majors.
ESRC_PG=${ESRC_PG:-15}
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/$ESRC_PG/bin}
PG_CONFIG=${PG_CONFIG:-$PG_BINDIR/pg_config}
export ESRC_ROOT ESRC_CACHE ESRC_PG PG_BINDIR PG_CONFIG

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

# Run a command as the test user (or as ourselves when we are not root).
as_test_user() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u "$ESRC_TEST_USER" -- "$@"
    else
        "$@"
    fi
}

# Install what the build and the tests need, once per machine.
ensure_deps() {
    local need=()
    [ -x "$PG_BINDIR/postgres" ]                        || need+=("postgresql-$ESRC_PG")
    [ -f "$("$PG_CONFIG" --includedir-server 2>/dev/null)/postgres.h" ] || need+=("postgresql-server-dev-$ESRC_PG")
    [ -f /usr/include/librdkafka/rdkafka.h ]            || need+=(librdkafka-dev)
    # libcrypto (OpenSSL) for src/lifecycle/crypto.c; librdkafka-dev pulls it in on Debian
    [ -f /usr/include/openssl/evp.h ]                   || need+=(libssl-dev)
    [ -f /usr/share/perl5/IPC/Run.pm ]                  || need+=(libipc-run-perl)
    command -v kcat >/dev/null                          || need+=(kcat)
    command -v jq >/dev/null                            || need+=(jq)
    command -v make >/dev/null                          || need+=(make)
    command -v gcc >/dev/null                           || need+=(gcc)
    command -v java >/dev/null                          || need+=(openjdk-17-jre-headless)
    # mvn only fetches the Kafka jars (test/kafka/fetch.sh), once per cache
    [ -f "$ESRC_CACHE/kafka-${KAFKA_VERSION:-4.4.0}/libs/.complete" ] ||
        command -v mvn >/dev/null                       || need+=(maven)
    command -v python3 >/dev/null                       || need+=(python3)
    if [ ${#need[@]} -gt 0 ]; then
        [ "$(id -u)" = 0 ] || die "missing packages ${need[*]}; install them or run as root"
        log "installing ${need[*]} (apt-get)"
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
    fi
    if [ "$(id -u)" = 0 ] && ! id "$ESRC_TEST_USER" >/dev/null 2>&1; then
        log "creating user $ESRC_TEST_USER to run test servers"
        useradd --system --create-home --home-dir "/var/lib/$ESRC_TEST_USER" \
            --shell /bin/bash "$ESRC_TEST_USER"
    fi
}

# Build and install the extension into the server's directories; where
# package_install installed the Debian package (the 17 and 18 roots),
# the tests run against that package and nothing is built or installed.
build_install() {
    if [ -n "${ESRC_INSTALLED_PACKAGE:-}" ]; then
        log "testing the installed package $ESRC_INSTALLED_PACKAGE ($(dpkg-query -W -f '${Version}' "$ESRC_INSTALLED_PACKAGE"))"
        return 0
    fi
    log "building esrc"
    make -C "$ESRC_ROOT" -s PG_CONFIG="$PG_CONFIG" >/dev/null
    if [ "$(id -u)" = 0 ]; then
        make -C "$ESRC_ROOT" -s PG_CONFIG="$PG_CONFIG" install >/dev/null
    else
        sudo make -C "$ESRC_ROOT" -s PG_CONFIG="$PG_CONFIG" install >/dev/null
    fi
}

# package_install OUTDIR: build the Debian package postgresql-$ESRC_PG-esrc
# of this tree (packaging/deb.sh) into OUTDIR and install it with
# "apt-get install ./postgresql-N-esrc_*.deb", after removing the esrc
# files an earlier "make install" left there, so that what the tests find
# is exactly what the package holds; exports ESRC_INSTALLED_PACKAGE, which
# build_install then honours.  For the Debian roots (test/matrix/run.sh).
package_install() {
    local out=$1 pkg=postgresql-$ESRC_PG-esrc deb sharedir
    bash "$ESRC_ROOT/packaging/deb.sh" "$out"
    deb=$(ls "$out/${pkg}"_*.deb)
    sharedir=$("$PG_CONFIG" --sharedir)
    DEBIAN_FRONTEND=noninteractive dpkg --purge "$pkg" >/dev/null 2>&1 || true
    rm -rf "$("$PG_CONFIG" --pkglibdir)/esrc.so" "$sharedir"/extension/esrc.control \
        "$sharedir"/extension/esrc--*.sql "$("$PG_CONFIG" --includedir-server)/extension/esrc"
    log "installing $(basename "$deb") (apt-get install ./$(basename "$deb"))"
    (cd "$out" && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "./$(basename "$deb")" >/dev/null) \
        || die "apt-get install ./$(basename "$deb") failed"
    dpkg-query -W -f '${Status}' "$pkg" | grep -q 'install ok installed' || die "$pkg is not installed"
    export ESRC_INSTALLED_PACKAGE=$pkg
}

# A free TCP port on 127.0.0.1, reserved for two hours: a file per port in
# /tmp/esrc-ports, created exclusively, so that two calls (of this driver,
# or of another suite on the same machine) never get the same port between
# the call and the server's bind.
free_port() {
    python3 -c '
import os, socket, time
d = "/tmp/esrc-ports"
try:
    os.mkdir(d)
    os.chmod(d, 0o1777)
except FileExistsError:
    pass
for _ in range(200):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    f = os.path.join(d, str(port))
    try:
        if time.time() - os.stat(f).st_mtime < 7200:
            continue
        os.unlink(f)
    except FileNotFoundError:
        pass
    except OSError:
        continue
    try:
        os.close(os.open(f, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    except FileExistsError:
        continue
    print(port)
    break
else:
    raise SystemExit("free_port: no free port after 200 tries")
'
}

# A fresh directory owned by the test user (call ensure_deps first: it
# creates that user).
test_tmpdir() {
    local d
    [ "$(id -u)" != 0 ] || id "$ESRC_TEST_USER" >/dev/null 2>&1 \
        || die "test_tmpdir: user $ESRC_TEST_USER does not exist yet (ensure_deps creates it)"
    d=$(mktemp -d "${TMPDIR:-/tmp}/esrc-${1:-test}.XXXXXX")
    chmod 755 "$d"
    [ "$(id -u)" = 0 ] && chown "$ESRC_TEST_USER" "$d"
    echo "$d"
}

# pg_start DIR PORT [extra conf lines...]: initdb into DIR/data and start.
pg_start() {
    local dir=$1 port=$2
    shift 2
    as_test_user "$PG_BINDIR/initdb" -D "$dir/data" -A trust -U postgres \
        --no-sync -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log"; die "initdb failed"; }
    {
        echo "port = $port"
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$dir'"
        echo "shared_preload_libraries = 'esrc'"
        echo "max_connections = 60"
        echo "max_prepared_transactions = 2"
        echo "log_min_messages = warning"
        echo "log_line_prefix = '%m [%p] %a '"
        for line in "$@"; do echo "$line"; done
    } | as_test_user tee -a "$dir/data/postgresql.conf" >/dev/null
    as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null \
        || { tail -30 "$dir/server.log"; die "server did not start"; }
}

pg_stop() {
    local dir=$1 mode=${2:-fast}
    [ -f "$dir/data/postmaster.pid" ] || return 0
    as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop >/dev/null 2>&1 || {
        local pid
        pid=$(head -1 "$dir/data/postmaster.pid" 2>/dev/null || true)
        [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
    }
}

# stop_at_exit DIR [NAME...]: at exit, kill the background processes whose
# pids the variables NAME... hold by then (those set), stop the server of
# DIR (immediate) and remove DIR unless KEEP is set.  The drivers with a
# server and background writers call it right after making DIR.
stop_at_exit() {
    ESRC_EXIT_DIR=$1
    shift
    ESRC_EXIT_PIDS="$*"
    trap stop_at_exit_now EXIT
}
stop_at_exit_now() {
    local v
    for v in $ESRC_EXIT_PIDS; do
        [ -z "${!v:-}" ] || kill "${!v}" 2>/dev/null || true
    done
    pg_stop "$ESRC_EXIT_DIR" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$ESRC_EXIT_DIR"
}

pg_restart() {
    local dir=$1
    as_test_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 restart >/dev/null \
        || { tail -30 "$dir/server.log"; die "server did not restart"; }
}

# psycopg 3 for the Python example (PyPI; pinned).
ensure_python_psycopg() {
    python3 -c 'import psycopg' 2>/dev/null && return 0
    log "installing psycopg (pip)"
    python3 -m pip install -q --disable-pip-version-check "psycopg[binary]==3.3.9" >/dev/null 2>&1 \
        || python3 -m pip install -q --disable-pip-version-check --break-system-packages "psycopg[binary]==3.3.9" >/dev/null
}

# What the Kafka forwarding tests need beyond ensure_deps (jq for
# test/kafka/consume.sh and the checks), once per machine.
ensure_forward_deps() {
    command -v jq >/dev/null && return 0
    [ "$(id -u)" = 0 ] || die "missing package jq; install it or run as root"
    log "installing jq (apt-get)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q jq >/dev/null
}

# ESRC_REAPER_PY: a python3 script that runs its arguments as a command
# under a child subreaper that reaps every orphan
# (python3 -c "$ESRC_REAPER_PY" CMD...).  Servers are daemonized by pg_ctl,
# so their parent is PID 1, and not every PID 1 (some container inits)
# reaps: a SIGKILLed postmaster or broker would stay a zombie, and a new
# postmaster refuses to start while the PID in postmaster.pid exists.
ESRC_REAPER_PY='import ctypes, os, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER
child = os.fork()
if child == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
while True:
    pid, status = os.wait()
    if pid == child:
        sys.exit(os.waitstatus_to_exitcode(status))'
