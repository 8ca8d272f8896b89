#!/usr/bin/env bash
# packaging/build.sh [MAJOR...]: build the Debian packages
# postgresql-MAJOR-esrc (default: 15 17 18) into dist/.
#
#   15: on this machine (Debian 12), with its postgresql-server-dev-all
#   17: inside the Debian 13 "trixie" root of test/matrix/root.sh
#   18: inside the Debian 14 "forky" root
#
# Each is built by packaging/deb.sh (pg_buildext updatecontrol, then
# dpkg-buildpackage with dh --with pgxs_loop), which installs the build
# dependencies where they are missing.  In the roots test/matrix/run.sh
# builds it and installs it there with apt-get, so a package that does not
# install fails here.  Needs root (apt-get, chroot).
set -euo pipefail
source "$(dirname "$0")/../test/lib.sh"

majors=${*:-15 17 18}
out=$ESRC_ROOT/dist
mkdir -p "$out"
for major in $majors; do
    rm -f "$out/postgresql-$major-esrc_"*.deb
    if [ "$major" = "$ESRC_PG" ] && [ -x "/usr/lib/postgresql/$major/bin/pg_config" ]; then
        bash "$ESRC_ROOT/packaging/deb.sh" "$out"
    else
        ESRC_MATRIX_OUT=$out bash "$ESRC_ROOT/test/matrix/run.sh" "$major" -- true
    fi
    ls "$out/postgresql-$major-esrc_"*.deb >/dev/null 2>&1 || die "no postgresql-$major-esrc package was built"
done
ls -l "$out"/*.deb
