# test/fuzz/psycopg.sh: sourced (after test/lib.sh) by the drivers that run
# test/fuzz/fuzz.py.  Makes psycopg importable: the pinned version is
# installed with pip into $ESRC_CACHE (never into the system's Python),
# installing python3-pip first when python3 has no pip.
PSYCOPG_VERSION=3.1.18
pylib="$ESRC_CACHE/python/psycopg-$PSYCOPG_VERSION"
export PYTHONPATH="$pylib${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c 'import psycopg' 2>/dev/null; then
    if ! python3 -m pip --version >/dev/null 2>&1; then
        [ "$(id -u)" = 0 ] || die "python3 has no pip; install python3-pip"
        log "installing python3-pip (apt-get)"
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-pip >/dev/null
    fi
    log "installing psycopg $PSYCOPG_VERSION into $pylib"
    python3 -m pip install -q --disable-pip-version-check --target "$pylib" \
        "psycopg==$PSYCOPG_VERSION" >/dev/null
    python3 -c 'import psycopg' || die "psycopg is not importable after pip install"
fi
