#!/usr/bin/env bash
# bench/forward/librdkafka-timer.sh: what librdkafka's partition
# registration timer costs the exactly_once latency.
#
# librdkafka's transactional producer sends a transaction's
# AddPartitionsToTxn request from a timer on its main thread.  The
# "immediate" schedule is a 1 ms timer: once when the first record for a
# partition not yet in the transaction is produced, and again after each
# AddPartitionsToTxn response.  While a timer is due in less than 1 ms the
# main thread does not sleep (it waits in whole milliseconds), so it spins
# for that millisecond (docs/forwarder.md, "librdkafka's registration
# timer").
#
# This script builds librdkafka from Debian's source of the installed
# version twice: as packaged, and with those two schedules at 0 (the
# timer's shortest, 1 microsecond), then runs the latency part of
# bench/forward/run.sh with each, alternating, $BENCH_ROUNDS times
# (default 2, $BENCH_SECONDS s each, default 15), and prints esrc's and the
# floor's percentiles per run and the medians of each build.  The same
# esrc.so runs in every round; only the library differs (LD_LIBRARY_PATH,
# for the server and for fwdbench).
#
# Nothing of librdkafka is kept in this repository: the source comes from
# Debian's archive (apt-get source; a deb-src entry for the configured
# Debian mirror is added to /etc/apt/sources.list.d if apt has none), and
# both builds go to $ESRC_LIBRDKAFKA_CACHE (default
# /var/tmp/esrc-librdkafka-<version>), reused by later runs.
#
# Usage: flock -o /tmp/esrc-bench.lock bash bench/forward/librdkafka-timer.sh
#        (as root; about 5 minutes to build
#        the first time, then about 2 minutes per bench run)
# Prints "name value" lines; nothing is asserted.
set -euo pipefail
ESRC_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ESRC_ROOT/test/lib.sh"

ROUNDS=${BENCH_ROUNDS:-2}
SECS=${BENCH_SECONDS:-15}
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS must be a positive integer"
[[ "$SECS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_SECONDS must be a positive integer"
[ "$(id -u)" = 0 ] || die "run as root: it installs packages and adds an apt source"
ensure_deps
if ! command -v dpkg-source >/dev/null; then
    log "installing dpkg-dev (apt-get source needs it)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q dpkg-dev >/dev/null
fi
version=$(dpkg-query -W -f '${Version}' librdkafka1 2>/dev/null) ||
    die "librdkafka1 is not installed"
cache=${ESRC_LIBRDKAFKA_CACHE:-/var/tmp/esrc-librdkafka-$version}
mkdir -p "$cache"

# --- the source, as Debian packages it -------------------------------------
# fetch: Debian's source of the installed version, unpacked under $cache/dl
fetch() {
    rm -rf "$cache/dl" && mkdir -p "$cache/dl" &&
        (cd "$cache/dl" && apt-get source -qq "librdkafka=$version" >/dev/null 2>&1)
}
if [ ! -d "$cache/src" ]; then
    if ! fetch; then
        log "adding a deb-src entry for the configured Debian mirror"
        src=/etc/apt/sources.list.d/esrc-deb-src.sources
        if [ -f /etc/apt/sources.list.d/debian.sources ]; then
            sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$src"
        else
            grep -h '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' \
                >/etc/apt/sources.list.d/esrc-deb-src.list
        fi
        apt-get update -qq
        fetch || die "apt-get source librdkafka=$version failed"
    fi
    mv "$cache/dl"/librdkafka-*/ "$cache/src"
    rm -rf "$cache/dl"
fi

# patch_timer DIR: the two "immediate" registration schedules to 0
patch_timer() {
    sed -i 's|rd_kafka_txn_schedule_register_partitions(rk, 1 /\*immediate\*/);|rd_kafka_txn_schedule_register_partitions(rk, 0 /*immediate*/);|' \
        "$1/src/rdkafka_txnmgr.h"
    sed -i 's|^\( *\): 1 /\*immediate\*/);|\1: 0 /*immediate*/);|' "$1/src/rdkafka_txnmgr.c"
    [ "$(grep -c 'register_partitions(rk, 0 /\*immediate\*/)' "$1/src/rdkafka_txnmgr.h")" = 1 ] &&
        [ "$(grep -c '^ *: 0 /\*immediate\*/);' "$1/src/rdkafka_txnmgr.c")" = 1 ] ||
        die "librdkafka $version: the registration timer is not where this script expects it"
}

# build NAME: build the source (patched for NAME=patched) into $cache/NAME
build() {
    local b="$cache/build-$1"
    [ -f "$cache/$1/lib/librdkafka.so.1" ] && return 0
    log "building librdkafka $version ($1)"
    rm -rf "$b" && cp -a "$cache/src" "$b"
    [ "$1" = patched ] && patch_timer "$b"
    (cd "$b" && ./configure --prefix="$cache/$1" --disable-ssl --disable-gssapi --disable-zstd \
        --disable-curl >"$cache/$1.build.log" 2>&1 &&
        make -C src -j"$(nproc)" >>"$cache/$1.build.log" 2>&1 &&
        make -C src install >>"$cache/$1.build.log" 2>&1) ||
        die "building librdkafka ($1) failed: see $cache/$1.build.log"
    rm -rf "$b"
}
build packaged
build patched
echo "librdkafka $version from Debian's source: packaged in $cache/packaged, timer at 0 in $cache/patched"

# --- alternate the two builds through the latency bench --------------------
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for round in $(seq "$ROUNDS"); do
    for lib in packaged patched; do
        log "round $round: $lib"
        out=$(LD_LIBRARY_PATH="$cache/$lib/lib" BENCH_THROUGHPUT=0 BENCH_SECONDS="$SECS" \
            bash "$ESRC_ROOT/bench/forward/run.sh" 2>/dev/null) || die "bench/forward/run.sh failed"
        grep -q "worker loaded $cache/$lib/lib/librdkafka.so.1" <<<"$out" ||
            die "the worker did not load the $lib build: $(grep '^librdkafka' <<<"$out")"
        for name in "exactly_once commit_to_kafka_ack" "exactly_once floor_commit_to_kafka_ack" \
            "at_least_once commit_to_kafka_ack"; do
            line=$(grep "^$name " <<<"$out" | head -1)
            echo "$lib round=$round ${name// /_} $(sed 's/.* \(p50=.*\) max=.*/\1/' <<<"$line")" | tee -a "$results"
        done
        grep -E "^exactly_once (floor )?librdkafka_main_threads" <<<"$out" | sed "s/^/$lib round=$round /"
    done
done

# medians over the rounds, and patched / packaged
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for name in exactly_once_commit_to_kafka_ack exactly_once_floor_commit_to_kafka_ack at_least_once_commit_to_kafka_ack; do
    for q in p50 p99; do
        a=$(grep "^packaged .* $name " "$results" | sed "s/.* $q=\([0-9.]*\)ms.*/\1/" | median)
        b=$(grep "^patched .* $name " "$results" | sed "s/.* $q=\([0-9.]*\)ms.*/\1/" | median)
        echo "$name $q median: packaged ${a} ms, patched ${b} ms, patched/packaged $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b / a }')"
    done
done
