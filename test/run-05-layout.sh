#!/usr/bin/env bash
# The layout of src/ (issue 25; src/README.md): one folder per subsystem,
# other folders included only through their face (X/X.h), esrc.c called by
# no other file, no cycle in the folders' include graph, no C file over
# 1,200 lines and no function over 120 (test/layout.py).  Then the same
# check on a copy of src/ with each kind of fault put in, each of which it
# must refuse: a private header of another folder, a cycle (the log
# including the projections' face), a call back into esrc.c.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

python3 "$ESRC_ROOT/test/layout.py" "$ESRC_ROOT/src" || die "src/ is not in the shape src/README.md describes"

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
refuses() {   # refuses WHAT FAIL-LINE-PATTERN EDIT-COMMAND...
    local what=$1 pattern=$2
    shift 2
    rm -rf "$dir/src"
    cp -r "$ESRC_ROOT/src" "$dir/src"
    (cd "$dir/src" && "$@")
    if python3 "$ESRC_ROOT/test/layout.py" "$dir/src" >"$dir/out" 2>&1; then
        cat "$dir/out" >&2
        die "layout.py passed $what"
    fi
    grep -q "^FAIL $pattern" "$dir/out" || { cat "$dir/out" >&2; die "layout.py failed $what, but not with 'FAIL $pattern'"; }
    log "ok: layout.py refuses $what"
}
refuses "a private header of another folder" "no file includes another folder's private header" \
    sed -i '0,/#include "log\/log.h"/s//#include "log\/log.h"\n#include "subscription\/subscription.h"\n#include "projection\/owners.h"/' snapshot/snapread.c
refuses "a cycle between folders" "the folders' include graph has no cycle" \
    sed -i '0,/#include "log\/log.h"/s//#include "log\/log.h"\n#include "projection\/projection.h"/' log/read.c
refuses "a function of esrc.c called from elsewhere" "esrc.c exports only _PG_init" \
    sed -i 's/^_PG_init(void)$/_PG_init(void)\n{\n}\n\nvoid\nesrc_called_back(void)/' esrc.c
refuses "a C file over 1,200 lines" "no C file over 1200 lines" \
    sh -c 'yes "/* filler */" | head -1300 >> log/jsonsize.c'
log "layout: all checks passed"
