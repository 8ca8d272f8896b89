#!/usr/bin/env bash
# packaging/deb.sh OUTDIR: build the Debian package postgresql-N-esrc of
# every major this system supports (debian/pgversions: 15, 17, 18,
# intersected with postgresql-common's supported versions: on Debian 12
# that is 15, in the trixie root 17, in the forky root 18) from this tree,
# with PostgreSQL's extension tooling (pg_buildext updatecontrol, then
# dpkg-buildpackage with dh --with pgxs_loop), and put the .deb files into
# OUTDIR.  Installs the build dependencies when they are missing (root).
# packaging/build.sh calls it on the host and inside the 17 and 18 roots;
# test/matrix/run.sh calls it inside a root before it installs the package.
set -euo pipefail
ESRC_ROOT=${ESRC_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
out=${1:?usage: packaging/deb.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# the build dependencies of debian/control.in; pg_buildext is in
# postgresql-common (Debian 12) or postgresql-common-dev (13 and later),
# which postgresql-server-dev-all pulls in
if ! command -v pg_buildext >/dev/null || ! command -v dh >/dev/null ||
        ! dpkg -s postgresql-server-dev-all >/dev/null 2>&1 ||
        [ ! -f /usr/include/librdkafka/rdkafka.h ] || [ ! -f /usr/include/openssl/evp.h ]; then
    [ "$(id -u)" = 0 ] || { log "deb.sh: missing build dependencies; install debhelper postgresql-server-dev-all librdkafka-dev libssl-dev"; exit 1; }
    log "installing the build dependencies (apt-get)"
    pkgs=(debhelper postgresql-server-dev-all librdkafka-dev libssl-dev dpkg-dev)
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1 || {
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null
    }
fi

# a clean copy of the tree: dpkg-buildpackage writes next to it
work=$(mktemp -d "${TMPDIR:-/tmp}/esrc-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
version=$(dpkg-parsechangelog -l "$ESRC_ROOT/debian/changelog" -S Version)
src=$work/esrc-${version%-*}
mkdir -p "$src"
if git -C "$ESRC_ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$ESRC_ROOT" && git ls-files -co --exclude-standard -z | tar -c --null -T - -f -) | tar -x -C "$src"
else # a copy without .git (test/matrix/run.sh's): everything but build products
    (cd "$ESRC_ROOT" && tar -c --exclude='*.o' --exclude='*.so' --exclude='*.bc' --exclude=./dist -f - .) | tar -x -C "$src"
fi
cd "$src"
versions=$(pg_buildext supported-versions)
[ -n "$versions" ] || { log "deb.sh: no major of debian/pgversions ($(tr '\n' ' ' <debian/pgversions)) is supported here"; exit 1; }
pg_buildext updatecontrol
log "building $(for v in $versions; do printf 'postgresql-%s-esrc ' "$v"; done)${version}"
if ! DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" dpkg-buildpackage -b -uc -us >"$work/build.log" 2>&1; then
    tail -40 "$work/build.log" >&2
    log "deb.sh: dpkg-buildpackage failed (log above)"
    exit 1
fi
for v in $versions; do
    deb=$(ls "$work"/postgresql-"$v"-esrc_"$version"_*.deb)
    cp "$deb" "$out/"
    log "built $out/$(basename "$deb")"
done
