#!/usr/bin/env bash
# The whole esrc test suite, on a fresh machine or a used one:
#   bash test/all.sh            (as root, or as a user with sudo)
# Installs what is missing (apt-get, Kafka jars via mvn), builds and
# installs the extension, then runs every test/run-*.sh in order.  Each
# of those starts and stops its own servers.  Prints "N passed, N failed".
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ensure_deps
build_install

passed=0
failed=0
failures=()
start=$SECONDS
for t in "$ESRC_ROOT"/test/run-*.sh; do
    name=$(basename "$t" .sh)
    if [ -n "${ESRC_ONLY:-}" ] && [[ "$name" != *"$ESRC_ONLY"* ]]; then
        continue
    fi
    log "=== $name"
    t0=$SECONDS
    if bash "$t"; then
        passed=$((passed + 1))
        log "=== $name: ok ($((SECONDS - t0)) s)"
    else
        failed=$((failed + 1))
        failures+=("$name")
        log "=== $name: FAILED ($((SECONDS - t0)) s)"
    fi
done
log "suite took $((SECONDS - start)) s"
[ $failed -eq 0 ] || log "failed: ${failures[*]}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
