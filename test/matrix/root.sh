#!/usr/bin/env bash
# test/matrix/root.sh MAJOR: print the path of a Debian root filesystem
# with PostgreSQL MAJOR, its server headers, librdkafka and what the test
# suite needs inside it, building it with debootstrap on first use.
#
#   17: Debian 13 "trixie"          18: Debian 14 "forky" (testing)
#
# Roots are cached under $ESRC_CACHE/roots/SUITE-HASH, where HASH covers the
# suite, the package list and this script's layout version, so a changed
# package list builds a new root (older ones are removed).  The mirror is
# the one apt on this machine already uses.  Debian 12's debootstrap has no
# script for forky; its sid script serves.  Exit status 2 (and a message
# that says why) when roots cannot be built here: not root, no debootstrap
# and no apt to install it, or chroot refused.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

major=${1:?usage: test/matrix/root.sh MAJOR}
case $major in
    17) suite=trixie script=trixie ;;
    18) suite=forky script=sid ;;
    *) echo "root.sh: no Debian root is defined for PostgreSQL $major (17 and 18 are)" >&2; exit 2 ;;
esac
layout=1
packages="postgresql-$major,postgresql-server-dev-$major,librdkafka-dev,build-essential,pkg-config,libipc-run-perl,python3,python3-psycopg,jq,kcat,default-jre-headless,procps,iproute2,ca-certificates,locales-all"
hash=$(printf '%s\n' "$suite" "$packages" "$layout" | sha256sum | cut -c1-12)
roots=$ESRC_CACHE/roots
root=$roots/$suite-$hash

if [ -f "$root/.complete" ]; then
    echo "$root"
    exit 0
fi
[ "$(id -u)" = 0 ] || { echo "root.sh: building a Debian root needs root (debootstrap, chroot)" >&2; exit 2; }
if ! command -v debootstrap >/dev/null; then
    log "installing debootstrap (apt-get)"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap; } >/dev/null 2>&1 ||
        { echo "root.sh: debootstrap is missing and apt-get could not install it" >&2; exit 2; }
fi
mirror=$(sed -n 's/^URIs: *\(http[^ ]*\/debian\)\/* *$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 ~ /^http/ && $2 ~ /\/debian\/?$/ { print $2; exit }' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
[ -n "$mirror" ] || { echo "root.sh: no Debian mirror found in /etc/apt/sources.list*" >&2; exit 2; }

mkdir -p "$roots"
# older package lists, and any half-built root; never into a mount that a
# test/matrix/run.sh broken off left behind (/dev, /proc, /sys)
for old in "$roots/$suite-"*; do
    [ -e "$old" ] || continue
    awk -v p="$old/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r | xargs -r -n1 umount -l
    rm -rf --one-file-system "$old"
done
tmp=$roots/$suite-$hash
log "building a Debian $suite root for PostgreSQL $major from $mirror (a few minutes)"
if ! debootstrap --variant=minbase --include="$packages" "$suite" "$tmp" "$mirror" \
        "/usr/share/debootstrap/scripts/$script" >"$roots/$suite.log" 2>&1; then
    tail -20 "$roots/$suite.log" >&2
    rm -rf "$tmp"
    echo "root.sh: debootstrap of $suite failed (log above)" >&2
    exit 1
fi
chroot "$tmp" true 2>/dev/null || { rm -rf "$tmp"; echo "root.sh: chroot is refused on this machine" >&2; exit 2; }
[ -x "$tmp/usr/lib/postgresql/$major/bin/postgres" ] || { echo "root.sh: no PostgreSQL $major in the $suite root" >&2; exit 1; }
# the test user, as test/lib.sh creates it on the host
chroot "$tmp" useradd --system --create-home --home-dir "/var/lib/$ESRC_TEST_USER" --shell /bin/bash "$ESRC_TEST_USER"
chroot "$tmp" apt-get clean
touch "$tmp/.complete"
log "Debian $suite root ready: $tmp ($(du -sh "$tmp" | cut -f1))"
echo "$tmp"
