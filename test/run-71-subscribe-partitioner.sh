#!/usr/bin/env bash
# esrc.stream_partition() is Kafka's partitioner: for 2,000 random stream
# names (ASCII, multi-byte UTF-8, lengths 1 to 80, so every tail length of
# murmur2) and 1, 3, 16 and 1,000 partitions, it must give what
# librdkafka's own rd_kafka_msg_partitioner_murmur2() gives (called
# through ctypes from the library the forwarder links), which is the Java
# client's default placement of a keyed record.  And a subscription's
# members get exactly the streams of their partitions: with 4 partitions
# and 4 members, each member's events all have stream_partition() equal to
# a partition the status view says it holds.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ensure_python_psycopg

dir=$(test_tmpdir partitioner)
port=$(free_port)
trap 'pg_stop "$dir" immediate; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
pg_start "$dir" "$port"

python3 - "$port" <<'PY'
import ctypes, ctypes.util, random, sys
import psycopg

name = ctypes.util.find_library("rdkafka") or "librdkafka.so.1"
lib = ctypes.CDLL(name)
f = lib.rd_kafka_msg_partitioner_murmur2
f.restype = ctypes.c_int32
f.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32,
              ctypes.c_void_p, ctypes.c_void_p]

rng = random.Random(14)
alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@äöüßé漢字🙂"
names = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80))) for _ in range(2000)]
conn = psycopg.connect(f"host=127.0.0.1 port={sys.argv[1]} user=postgres dbname=postgres",
                       autocommit=True)
conn.execute("CREATE EXTENSION esrc")
bad = []
checked = 0
for n in (1, 3, 16, 1000):
    ours = [r[0] for r in conn.execute(
        "SELECT esrc.stream_partition(s, %s) FROM unnest(%s::text[]) WITH ORDINALITY AS u(s, i) ORDER BY i",
        (n, names)).fetchall()]
    for s, p in zip(names, ours):
        b = s.encode()
        theirs = f(None, b, len(b), n, None, None)
        checked += 1
        if p != theirs:
            bad.append((s, n, p, theirs))
if bad:
    print("stream_partition differs from librdkafka's murmur2 partitioner:", bad[:5], file=sys.stderr)
    sys.exit(1)
print(f"stream_partition equals librdkafka's murmur2 for {checked} (stream, partitions) pairs "
      f"({name})")

# members get the streams of their partitions
conn.execute("SELECT esrc.append('p' || (i % 7) || '-' || i, 'E', '{}') FROM generate_series(1, 400) i")
conn.execute("SELECT esrc.create_subscription('four', partitions => 4)")
members = ["m0", "m1", "m2", "m3"]
for _ in range(3):            # rounds of polls until the group has settled
    for m in members:
        conn.execute("SELECT count(*) FROM esrc.poll('four', %s, 1000)", (m,))
held = {}
for part, member in conn.execute(
        "SELECT partition, member FROM esrc.subscription_status WHERE subscription = 'four'"):
    held.setdefault(member, set()).add(part)
if sorted(len(v) for v in held.values()) != [1, 1, 1, 1] or None in held:
    print("4 members over 4 partitions did not settle at one each:", held, file=sys.stderr)
    sys.exit(1)
total = 0
for m in members:
    rows = conn.execute("SELECT esrc.stream_partition(stream, 4) FROM esrc.poll('four', %s, 1000)",
                        (m,)).fetchall()
    wrong = [r[0] for r in rows if r[0] not in held[m]]
    if wrong:
        print(f"member {m} holds {held[m]} but got events of partitions {set(wrong)}", file=sys.stderr)
        sys.exit(1)
    total += len(rows)
if total != 400:
    print(f"the members got {total} events together, not 400", file=sys.stderr)
    sys.exit(1)
print("4 members hold one partition each and got exactly their streams' 400 events")
PY
log "stream_partition is Kafka's partitioner; members get their partitions' streams"
