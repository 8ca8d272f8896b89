#!/usr/bin/env bash
# Builds for the wrong major fail clearly:
#   1. src/base/compat.h with PG_VERSION_NUM of an unsupported major (14, 19)
#      stops with its one #error naming the supported majors, and the
#      compilation ends there (no cascade of errors on changed APIs);
#   2. inside a Debian root of another major (test/matrix/run.sh puts the
#      host's PostgreSQL 15 build at /build/esrc15.so), that build is
#      refused at LOAD, and the server goes on.  PostgreSQL loads with
#      RTLD_NOW, so a library that uses a function the other major no
#      longer has (15's palloc0 calls MemoryContextAllocZeroAligned, gone
#      in 17) is refused by the dynamic linker, before the magic block is
#      read; one that links is refused by the magic block ("incompatible
#      library").  The test accepts either refusal and says which it was.
#      (The other way round cannot be tried: a build in a newer Debian
#      needs a newer libc than the host has, and fails on that first.)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

status=0
dir=$(test_tmpdir other-majors)
port=$(free_port)
trap 'pg_stop "$dir" immediate; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT

inc=$("$PG_CONFIG" --includedir-server)
for v in 140000 190000; do
    printf '#include "postgres.h"\n#undef PG_VERSION_NUM\n#define PG_VERSION_NUM %s\n#include "compat.h"\nint esrc_after_compat = 1;\n' "$v" >"$dir/t$v.c"
    if gcc -fsyntax-only -I"$ESRC_ROOT/src/base" -I"$inc" "$dir/t$v.c" 2>"$dir/t$v.err"; then
        log "FAIL - PG_VERSION_NUM $v compiled"; status=1
    elif grep -q 'error: #error "esrc supports PostgreSQL 15, 16, 17 and 18' "$dir/t$v.err" &&
         [ "$(grep -c 'error:' "$dir/t$v.err")" = 2 ] &&
         grep -q 'fatal error: esrc: stopped, unsupported PostgreSQL major' "$dir/t$v.err"; then
        log "ok - PG_VERSION_NUM $v: the #error naming the supported majors, then the compilation stops"
    else
        log "FAIL - PG_VERSION_NUM $v: not just the #error"; cat "$dir/t$v.err" >&2; status=1
    fi
done

if [ "$ESRC_PG" != 15 ]; then
    [ -f /build/esrc15.so ] || die "no PostgreSQL 15 build at /build/esrc15.so (test/matrix/run.sh puts it there)"
    cp /build/esrc15.so "$dir/esrc15.so"
    chmod 755 "$dir/esrc15.so"
    pg_start "$dir" "$port"
    out=$(psql -qAtX -h 127.0.0.1 -p "$port" -U postgres -c "LOAD '$dir/esrc15.so'" 2>&1 || true)
    if [[ "$out" == *"incompatible library"* && "$out" == *"Server is version $ESRC_PG, library is version 15"* ]]; then
        log "ok - the PostgreSQL 15 build is refused by $ESRC_PG's magic-block check: $(echo "$out" | tr '\n' ' ')"
    elif [[ "$out" == *"could not load library"* && "$out" == *"undefined symbol"* ]]; then
        log "ok - the PostgreSQL 15 build is refused by $ESRC_PG's dynamic linker: $(echo "$out" | tr '\n' ' ')"
    else
        log "FAIL - loading the PostgreSQL 15 build into $ESRC_PG gave: $out"; status=1
    fi
    expect_up=$(psql -qAtX -h 127.0.0.1 -p "$port" -U postgres -c "SELECT 1" 2>&1 || true)
    [ "$expect_up" = 1 ] && log "ok - the server goes on" || { log "FAIL - the server is gone: $expect_up"; status=1; }
fi
exit $status
