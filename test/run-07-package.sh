#!/usr/bin/env bash
# What an adopter installs from: the versions agree everywhere
# (test/package/versions.py, also shown to fail on a tampered copy); the
# PGXN archive of "make dist" unpacks to esrc-VERSION/ with META.json and
# LICENSE, and builds with PGXS in a temporary directory into the Debian
# package of this machine's major (packaging/deb.sh: pg_buildext, dpkg-buildpackage), which
# has the right name, dependencies and files (the library, the control file,
# every install and upgrade script, the licence; no headers), its library's
# shared objects all resolve, and apt-get accepts it (a simulated install:
# the host's PostgreSQL is shared, so it is not really installed here; the
# 17 and 18 roots install theirs and run their tests on it, see
# test/matrix/run.sh).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/esrc-package.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # check WHAT CMD...: run it, say ok or FAILED
    local what=$1; shift
    if "$@"; then log "ok: $what"; else log "FAILED: $what"; fails=$((fails + 1)); fi
}

# 1. versions
check "the versions agree: $(python3 "$ESRC_ROOT/test/package/versions.py" 2>&1 | tr '\n' ' ')" \
    python3 "$ESRC_ROOT/test/package/versions.py"
version=$(sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" "$ESRC_ROOT/esrc.control")
for f in esrc.control META.json CHANGELOG.md README.md LICENSE debian/changelog debian/pgversions; do
    mkdir -p "$tmp/tampered/$(dirname "$f")"; cp "$ESRC_ROOT/$f" "$tmp/tampered/$f"
done
sed -i 's/"version": "[^"]*"/"version": "9.9.9"/' "$tmp/tampered/META.json"
check "versions.py refuses a META.json of another version" \
    bash -c '! python3 "$1" "$2" >/dev/null' run "$ESRC_ROOT/test/package/versions.py" "$tmp/tampered"
check "LICENSE is the PostgreSQL licence" grep -q 'Permission to use, copy, modify, and distribute this software' "$ESRC_ROOT/LICENSE"

# 2. make dist: the committed tree (HEAD) as esrc-VERSION.zip, built with PGXS
make -C "$ESRC_ROOT" -s PG_CONFIG="$PG_CONFIG" dist >/dev/null
mv "$ESRC_ROOT/esrc-$version.zip" "$tmp/"
python3 - "$tmp/esrc-$version.zip" "$tmp/dist" "esrc-$version" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
top = sys.argv[3]
names = z.namelist()
assert all(n.startswith(top + "/") for n in names), "not all under %s/" % top
for f in ("META.json", "LICENSE", "Makefile", "esrc.control", "README.md"):
    assert top + "/" + f in names, "no %s in the archive" % f
assert not any(n.startswith(top + "/.ci/") for n in names), ".ci/ is in the archive"
meta = json.loads(z.read(top + "/META.json"))
assert meta["version"] == top.split("-", 1)[1], "META.json says %s" % meta["version"]
z.extractall(sys.argv[2])
PY
check "make dist: esrc-$version.zip with META.json and LICENSE under esrc-$version/" test -f "$tmp/dist/esrc-$version/META.json"

# 3. the Debian package of this machine's major, built from the unpacked
# archive: one build (pg_buildext runs PGXS's make) shows both that the
# archive builds with PGXS and what the package holds.  COPT=-O0 (PGXS
# appends it to CFLAGS) only shortens the compilation: what is checked
# below does not depend on it
if [ ! -x "/usr/lib/postgresql/$ESRC_PG/bin/pg_config" ]; then
    log "FAILED: no /usr/lib/postgresql/$ESRC_PG to build the package against"
    exit 1
fi
log "building the unpacked archive with PGXS, as the Debian package (packaging/deb.sh)"
check "the archive builds with PGXS into a Debian package" \
    env ESRC_ROOT="$tmp/dist/esrc-$version" COPT=-O0 bash "$tmp/dist/esrc-$version/packaging/deb.sh" "$tmp/deb"
pkg=postgresql-$ESRC_PG-esrc
deb=$(ls "$tmp/deb/${pkg}_${version}"-*_*.deb)
depends=$(dpkg-deb -f "$deb" Depends)
log "$(basename "$deb"): Depends: $depends"
check "it is $pkg" test "$(dpkg-deb -f "$deb" Package)" = "$pkg"
for d in "postgresql-$ESRC_PG" librdkafka1 libssl3; do
    check "it depends on $d" grep -Eq "(^|, )$d[a-z0-9]*( |,|$)" <<<"$depends"
done
dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's|^\./|/|' >"$tmp/files"
lib=/usr/lib/postgresql/$ESRC_PG/lib
ext=/usr/share/postgresql/$ESRC_PG/extension
check "it holds $lib/esrc.so" grep -qx "$lib/esrc.so" "$tmp/files"
(cd "$ESRC_ROOT" && ls esrc.control esrc--*.sql; echo "esrc--$version.sql") | sort -u | sed "s|^|$ext/|" >"$tmp/want"
grep "^$ext/." "$tmp/files" | sort >"$tmp/have"
check "its extension files are exactly esrc.control and every install and upgrade script" diff "$tmp/want" "$tmp/have"
check "it installs no headers" bash -c '! grep -q "^/usr/include/" "$1"' run "$tmp/files"
check "it carries the licence" grep -qx "/usr/share/doc/$pkg/copyright" "$tmp/files"
dpkg-deb -x "$deb" "$tmp/root"
check "esrc.control as in the tree" cmp "$ESRC_ROOT/esrc.control" "$tmp/root$ext/esrc.control"
check "every shared object of the packaged esrc.so resolves" \
    bash -c '! ldd "$1" | grep -q "not found"' run "$tmp/root$lib/esrc.so"
if apt-get install -s "$deb" >"$tmp/apt.out" 2>&1 && grep -q "^Inst $pkg " "$tmp/apt.out"; then
    log "ok: apt-get accepts it (simulated: $(grep -c '^Inst' "$tmp/apt.out") package(s) to install)"
else
    cat "$tmp/apt.out" >&2; log "FAILED: apt-get install -s $(basename "$deb")"; fails=$((fails + 1))
fi
[ $fails -eq 0 ] || die "$fails check(s) failed"
log "package checks passed"
