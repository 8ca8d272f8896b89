#!/usr/bin/env bash
# The whole esrc test suite, on a fresh machine or a used one:
#   bash test/all.sh            (as root, or as a user with sudo)
# Installs what is missing (apt-get, Kafka jars via mvn), builds and
# installs the extension, then runs every test/run-*.sh in order against
# this machine's PostgreSQL ($ESRC_PG, default 15).  Each of those starts
# and stops its own servers.  Then, for each major of $ESRC_MATRIX
# (default "17 18"), the drivers of $ESRC_MATRIX_TESTS inside a Debian root
# with that major (test/matrix/run.sh).  Prints one "N passed, N failed"
# line for all of it.
#
#   ESRC_ONLY=pattern    only the drivers whose name contains it (and no
#                        other major unless ESRC_MATRIX is set too)
#   ESRC_TESTS="a b"     exactly these drivers (names without .sh)
#   ESRC_MATRIX="17"     the other majors to run; "none" for none
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ensure_deps
build_install

# The suite's time budget (45 minutes on CI's 2 cores): the long-running
# drivers get shorter runs here than their own defaults, which stay for
# runs by hand (bash test/run-25-soak.sh 600).
export ESRC_SOAK_SECONDS=${ESRC_SOAK_SECONDS:-40}
export ESRC_FUZZ_SECONDS=${ESRC_FUZZ_SECONDS:-40}
export ESRC_SUB_SECONDS=${ESRC_SUB_SECONDS:-20}
export ESRC_PROJ_SECONDS=${ESRC_PROJ_SECONDS:-20}

matrix_default="17 18"
[ -z "${ESRC_ONLY:-}" ] && [ -z "${ESRC_TESTS:-}" ] || matrix_default=none
matrix=${ESRC_MATRIX:-$matrix_default}
[ "$matrix" = none ] && matrix=
matrix_tests=${ESRC_MATRIX_TESTS:-run-10-regress run-15-upgrade run-16-other-majors run-66-standby-reads run-30-snapshot-stress run-37-projection-load run-38-projection-failures run-39-projection-crash run-40-forward-e2e run-44-forward-hostile run-50-tap run-52-revoked-reader run-53-lease-bound run-54-owner-gone run-60-fuzz run-63-erase-bytes}

passed=0
failed=0
failures=()
start=$SECONDS
# each driver's output is kept too, so that the end of the run can show
# the end of every failed one again: a CI log shows only its last lines
logs=$(mktemp -d)
digest=()
for t in "$ESRC_ROOT"/test/run-*.sh; do
    name=$(basename "$t" .sh)
    if [ -n "${ESRC_ONLY:-}" ] && [[ "$name" != *"$ESRC_ONLY"* ]]; then
        continue
    fi
    if [ -n "${ESRC_TESTS:-}" ] && [[ " $ESRC_TESTS " != *" $name "* ]]; then
        continue
    fi
    log "=== pg$ESRC_PG $name"
    t0=$SECONDS
    if bash "$t" > >(tee "$logs/$name" >&2) 2>&1; then
        passed=$((passed + 1))
        log "=== pg$ESRC_PG $name: ok ($((SECONDS - t0)) s)"
    else
        failed=$((failed + 1))
        failures+=("pg$ESRC_PG/$name")
        digest+=("$logs/$name")
        log "=== pg$ESRC_PG $name: FAILED ($((SECONDS - t0)) s)"
    fi
done

for major in $matrix; do
    t0=$SECONDS
    # the output goes on to stderr as it comes (tee to a file and fd 2: a
    # tee of /dev/stderr would reopen, and truncate, a log file there)
    res=$(mktemp)
    bash "$ESRC_ROOT/test/matrix/run.sh" "$major" $matrix_tests | tee "$res" >&2 || true
    out=$(tail -1 "$res")
    if [[ "$out" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
        passed=$((passed + BASH_REMATCH[1]))
        failed=$((failed + BASH_REMATCH[2]))
        if [ "${BASH_REMATCH[2]}" != 0 ]; then
            # the inner run's digest names its failed drivers; it is shown
            # again at the end of this run
            sed -n '/^--- failed: /,/^--- end of failures/p' "$res" | grep -v '^--- end of failures' > "$logs/pg$major" || true
            names=$(sed -n 's/^--- failed: \([^,]*\),.*/\1/p' "$logs/pg$major" | tr '\n' ' ')
            failures+=("${names:-pg$major (see above)}")
            digest+=("$logs/pg$major")
        fi
    else
        # no result line: the root could not be had or the run broke off
        failed=$((failed + 1))
        failures+=("pg$major: no result")
    fi
    rm -f "$res"
    log "=== pg$major: $((SECONDS - t0)) s"
done

log "suite took $((SECONDS - start)) s"
for f in "${digest[@]}"; do
    if [[ "$(basename "$f")" == run-* ]]; then
        echo "--- failed: pg$ESRC_PG/$(basename "$f"), its last 60 lines:"
        tail -n 60 "$f"
    else
        cat "$f" # already a digest, from another major's run
    fi
done
[ ${#digest[@]} -eq 0 ] || echo "--- end of failures"
rm -rf "$logs"
[ $failed -eq 0 ] || log "failed: ${failures[*]}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
