#!/usr/bin/env bash
# test/matrix/run.sh MAJOR TEST...: run the named test drivers
# (test/run-*.sh, by name without .sh) against PostgreSQL MAJOR inside the
# Debian root that test/matrix/root.sh builds (17: trixie, 18: forky), on a
# copy of this source tree, and print the inner "N passed, N failed" line
# last.
# test/matrix/run.sh MAJOR -- COMMAND...: build and install there, then
# run the command in the tree's copy instead (a benchmark, for example:
# "test/matrix/run.sh 17 -- bash bench/append").
# Inside the root the tests run against the Debian package built from the
# tree's copy (packaging/deb.sh) and installed with apt-get install
# ./postgresql-MAJOR-esrc_*.deb; ESRC_MATRIX_INSTALL=source installs with
# "make install" instead.  ESRC_MATRIX_OUT=DIR keeps the .deb there
# (packaging/build.sh).
# The root shares the host's network namespace, so every server and broker
# it starts listens on the host's loopback; the Kafka jars come from the
# host's cache (bind-mounted read-only).  Exit status 0 when all passed, 1
# when any failed, 3 when the root cannot be had here (the message says
# why; test/all.sh counts that as a failure, never as a pass).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
source "$ESRC_ROOT/test/kafka/env.sh"

major=${1:?usage: test/matrix/run.sh MAJOR TEST...}
shift
[ $# -gt 0 ] || die "usage: test/matrix/run.sh MAJOR TEST..."

rc=0
root=$(bash "$ESRC_ROOT/test/matrix/root.sh" "$major") || rc=$?
if [ $rc -ne 0 ]; then
    log "PostgreSQL $major: no Debian root (root.sh exit $rc): not tested"
    exit 3
fi
kafka_libs=$(bash "$ESRC_ROOT/test/kafka/fetch.sh")

# one run at a time in a root (the mounts and the tree's copy are the
# root's); the lock is not passed on to what runs inside, so a server left
# running there cannot hold it
exec 9>"$root/.matrix.lock"
flock -w 3600 9 || die "the PostgreSQL $major root is busy (another test/matrix/run.sh for an hour)"

mounts=()
cleanup() {
    local i
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
        umount -R -l "${mounts[$i]}" 2>/dev/null || true
    done
}
trap cleanup EXIT
bind() { # SRC DST [ro]
    mkdir -p "$2"
    mount --rbind "$1" "$2"
    mount --make-rslave "$2"
    [ "${3:-}" = ro ] && mount -o remount,bind,ro "$2"
    mounts+=("$2")
}
mount -t proc proc "$root/proc" && mounts+=("$root/proc")
bind /dev "$root/dev"
bind /sys "$root/sys"
bind "$kafka_libs" "$root/root/.cache/esrc/kafka-$KAFKA_VERSION/libs" ro
# where the package is built to: the caller's directory, or one of the root's
rm -rf "$root/build/out"
if [ -n "${ESRC_MATRIX_OUT:-}" ]; then
    mkdir -p "$ESRC_MATRIX_OUT"
    bind "$ESRC_MATRIX_OUT" "$root/build/out"
else
    mkdir -p "$root/build/out"
fi
# name resolution of localhost inside the root, as on the host
cp /etc/hosts "$root/etc/hosts"

# a fresh copy of the tree: the tracked files and the untracked ones git
# does not ignore (no build products of the host's major)
rm -rf "$root/build/esrc"
mkdir -p "$root/build/esrc"
(cd "$ESRC_ROOT" && git ls-files -co --exclude-standard -z | tar -c --null -T - -f -) | tar -x -C "$root/build/esrc"
# the host's build, for run-16-other-majors (a library of another major)
[ -f "$ESRC_ROOT/esrc.so" ] && cp "$ESRC_ROOT/esrc.so" "$root/build/esrc15.so"
chmod -R a+rX "$root/build"

log "PostgreSQL $major in $(basename "$root"): $*"
case ${ESRC_MATRIX_INSTALL:-package} in
    package) install='package_install /build/out' ;;
    source) install=build_install ;;
    *) die "ESRC_MATRIX_INSTALL is package or source" ;;
esac
if [ "$1" = -- ]; then
    shift
    cmd=(bash -c "cd /build/esrc && source test/lib.sh && ensure_deps && $install"' && exec "$@"' run "$@")
else
    cmd=(bash -c "cd /build/esrc && source test/lib.sh && ensure_deps && $install && exec bash test/all.sh")
fi
set +e
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    ESRC_PG="$major" ESRC_TESTS="$*" ESRC_MATRIX=none ESRC_WERROR=1 \
    ESRC_FUZZ_SECONDS="${ESRC_MATRIX_FUZZ_SECONDS:-20}" ${CI:+CI=$CI} \
    "${cmd[@]}" 9>&-
rc=$?
set -e
exit $rc
