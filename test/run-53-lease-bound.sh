#!/usr/bin/env bash
# esrc.max_partition_leases bounds the lease tables in shared memory (issue
# 24, finding 2).  With the setting at 64, a role that may only create and
# poll subscriptions (esrc_subscriber, esrc_reader):
#   1. takes leases, 16 partitions per subscription, until a poll fails:
#      the failure is 53400, it comes at the 5th subscription, and 64
#      leases are held then (not more: the tables do not grow past the
#      setting into the server's spare shared memory);
#   2. after those subscriptions are dropped, polls one subscription of one
#      partition under 70 member names: the 65th member's poll fails with
#      53400 (the member table has the same bound);
#   3. after that one is dropped too, one transaction takes $locks advisory
#      locks, more than the lock table's preallocated half
#      (max_locks_per_transaction 64), so it must grow into the spare
#      shared memory: it succeeds.
# The same transaction is first run on the fresh server (it must succeed
# there, or the test proves nothing), then the server is restarted so that
# the lease tables start from a fresh shared memory segment.  Unbounded
# tables (the bug) take leases until the spare shared memory is gone, and
# keep it on their freelists after the drop: then step 3 fails with "out
# of shared memory".  Every check is reported; the driver fails if any did.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

limit=64
locks=${ESRC_LEASE_LOCKS:-4000}
dir=$(test_tmpdir leasebound)
port=$(free_port)
cleanup() {
    pg_stop "$dir" immediate
    [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
pg_start "$dir" "$port" "esrc.max_partition_leases = $limit" \
    "max_locks_per_transaction = 64" "huge_pages = off"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
q() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
failures=0
check() {   # check NAME WANT GOT
    if [ "$2" = "$3" ]; then
        log "ok: $1 ($3)"
    else
        log "FAILED: $1: want '$2', got '$3'"
        failures=$((failures + 1))
    fi
}
# one transaction taking $locks advisory locks: "ok" or the error
lock_heavy() {
    local out
    out=$(psql -qAtX -v ON_ERROR_STOP=1 2>&1 \
        -c "SELECT count(pg_catalog.pg_advisory_xact_lock(i)) FROM generate_series(1, $locks) i") || true
    if [ "$out" = "$locks" ]; then echo ok; else echo "$out" | head -1; fi
}

check "$locks advisory locks in one transaction on a fresh server" ok "$(lock_heavy)"
pg_restart "$dir"

q >/dev/null <<'SQL'
CREATE EXTENSION esrc;
CREATE ROLE leaser LOGIN IN ROLE esrc_subscriber, esrc_reader;
-- create and poll subscriptions of parts partitions (one member each)
-- until a poll fails: how many subscriptions were polled, the SQLSTATE of
-- the failure, the leases held then, the error's detail
CREATE FUNCTION public.take_leases(parts int, maxsubs int, OUT subs int,
                                   OUT state text, OUT held bigint, OUT detail text)
LANGUAGE plpgsql AS $$
BEGIN
    subs := 0;
    FOR i IN 1 .. maxsubs LOOP
        PERFORM esrc.create_subscription('s' || i, partitions => parts);
        subs := i;
        BEGIN
            PERFORM count(*) FROM esrc.poll('s' || i, 'm', 1);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, detail = PG_EXCEPTION_DETAIL;
            EXIT;
        END;
    END LOOP;
    SELECT count(member) INTO held FROM esrc.subscription_status;
END $$;
-- poll one subscription under member names m1, m2, ... until a poll
-- fails: the number of that member and the SQLSTATE
CREATE FUNCTION public.add_members(maxmembers int, OUT member int, OUT state text)
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. maxmembers LOOP
        member := i;
        BEGIN
            PERFORM count(*) FROM esrc.poll('wide', 'm' || i, 1);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE;
            RETURN;
        END;
    END LOOP;
    member := NULL;
END $$;
SELECT esrc.append('order-1', 'Placed', '{}');
SQL

# 1. leases: 16 partitions a subscription, up to 2,000 subscriptions
res=$(q -U leaser -F ' ' -c "SELECT subs, state, held, detail FROM public.take_leases(16, 2000)")
read -r subs state held detail <<<"$res"
log "leases: polled $subs subscriptions of 16 partitions, the last poll: ${state:-no error}, $held leases held"
check "the poll that fails past the limit fails with" 53400 "$state"
check "subscriptions polled when it failed (4 x 16 = $limit leases fit)" 5 "$subs"
check "leases held at the failure" $limit "$held"
check "the error's detail" \
    "All $limit entries of the partition lease table (esrc.max_partition_leases) are held by live members." \
    "$detail"
q -U leaser -c "SELECT count(esrc.drop_subscription(name)) FROM esrc.subscriptions" >/dev/null
check "leases held after the drop" 0 "$(q -c "SELECT count(member) FROM esrc.subscription_status")"

# 2. members: one subscription of one partition, up to 70 member names
q -U leaser -c "SELECT esrc.create_subscription('wide')" >/dev/null
res=$(q -U leaser -F ' ' -c "SELECT member, state FROM public.add_members(70)")
read -r member state <<<"$res"
log "members: the first poll to fail was member ${member:-none} (${state:-no error})"
check "the member poll that fails past the limit fails with" 53400 "$state"
check "the first member refused" $((limit + 1)) "$member"
q -U leaser -c "SELECT esrc.drop_subscription('wide')" >/dev/null

# 3. lock-heavy work in the same server after the limit was hit
check "$locks advisory locks in one transaction after the limit was hit" ok "$(lock_heavy)"

if grep -q "out of shared memory" "$dir/server.log"; then
    log "server log: $(grep -c "out of shared memory" "$dir/server.log") 'out of shared memory' lines"
fi
[ $failures -eq 0 ] || die "$failures checks failed"
log "the lease tables stop at esrc.max_partition_leases = $limit; lock-heavy work still succeeds"
