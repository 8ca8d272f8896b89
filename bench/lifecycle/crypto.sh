#!/usr/bin/env bash
# bench/lifecycle/crypto.sh: the append cost of one encrypted field
# (esrc.encrypt, docs/lifecycle.md "Crypto-shredding") against the same
# append with the field in plain text, measured in the same run on the
# same throwaway cluster.
#
#   bash bench/lifecycle/crypto.sh       # 8 clients, 10 s per measurement, 3 rounds
#   BENCH_SECONDS=20 BENCH_CLIENTS=8 BENCH_ROUNDS=5 bash bench/lifecycle/crypto.sh
#
# Variants (pgbench -M prepared, one append per transaction, a random
# stream of BENCH_STREAMS; the subject is the stream; rounds alternate the
# variants to spread machine noise):
#   plain          data {"n": 1, "email": "user-N@example.com"}
#   encrypted      the same with the email encrypted for the stream's subject,
#                  whose key exists (created before the runs)
#   encrypted_new  the same for a new subject every time (a key is created
#                  and inserted in the append's transaction)
#   read_plain / read_decrypted: read_stream of one stream (its events'
#                  email as text), with and without esrc.decrypt
# Prints transactions/s per round and the ratio to plain (read_plain for
# the reads): the ratio of the medians, and the range of per-round ratios.
set -euo pipefail
source "$(dirname "$0")/../../test/lib.sh"

secs=${BENCH_SECONDS:-10}
clients=${BENCH_CLIENTS:-8}
rounds=${BENCH_ROUNDS:-3}
streams=${BENCH_STREAMS:-10000}

ensure_deps
[ -n "${BENCH_NO_BUILD:-}" ] || build_install
dir=$(test_tmpdir bench-crypto)
port=$(free_port)
trap 'pg_stop "$dir" immediate; rm -rf "$dir"' EXIT
pg_start "$dir" "$port" "max_connections = 40" "shared_buffers = 512MB" "max_wal_size = 4GB"
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres

psql -qX -v ON_ERROR_STOP=1 <<SQL
CREATE EXTENSION esrc;
-- one key per stream, and a few events per stream for the reads
SELECT count(esrc.encrypt('user-' || s, 'email', '"x"')) FROM generate_series(1, $streams) s;
-- a transaction per stream: an append holds its stream's lock to the end
DO \$\$
BEGIN
    FOR s IN 1 .. $streams LOOP
        PERFORM esrc.append('user-' || s, 'Registered',
                            jsonb_build_object('n', 1, 'email', esrc.encrypt('user-' || s, 'email', to_jsonb('user-' || s || '@example.com'))))
        FROM generate_series(1, 5);
        COMMIT;
    END LOOP;
END
\$\$;
CREATE SEQUENCE new_subject_seq;
CHECKPOINT;
SQL

mkdir -p "$dir/scripts"
cat >"$dir/scripts/plain" <<SQL
\set s random(1, $streams)
SELECT esrc.append('user-' || :s, 'Touched', jsonb_build_object('n', 1, 'email', to_jsonb('user-' || :s || '@example.com')));
SQL
cat >"$dir/scripts/encrypted" <<SQL
\set s random(1, $streams)
SELECT esrc.append('user-' || :s, 'Touched', jsonb_build_object('n', 1, 'email', esrc.encrypt('user-' || :s, 'email', to_jsonb('user-' || :s || '@example.com'))));
SQL
cat >"$dir/scripts/encrypted_new" <<SQL
SELECT nextval('new_subject_seq') AS s \gset
SELECT esrc.append('new-' || :s, 'Touched', jsonb_build_object('n', 1, 'email', esrc.encrypt('new-' || :s, 'email', to_jsonb('new-' || :s || '@example.com'))));
SQL
cat >"$dir/scripts/read_plain" <<SQL
\set s random(1, $streams)
SELECT count(data->>'email') FROM esrc.read_stream('user-' || :s, 0, 5);
SQL
cat >"$dir/scripts/read_decrypted" <<SQL
\set s random(1, $streams)
SELECT count(esrc.decrypt(stream, 'email', data->'email') #>> '{}') FROM esrc.read_stream('user-' || :s, 0, 5);
SQL
chmod -R a+rX "$dir/scripts"

variants="plain encrypted encrypted_new read_plain read_decrypted"
declare -A tps
for r in $(seq 1 "$rounds"); do
    for v in $variants; do
        out=$(pgbench -n -M prepared -c "$clients" -j "$clients" -T "$secs" -f "$dir/scripts/$v" 2>&1) \
            || { echo "$out" >&2; die "pgbench $v failed"; }
        t=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
        tps[$v]="${tps[$v]:-} $t"
        log "round $r $v: $t tps"
    done
done

python3 - "$rounds" "$clients" "$secs" <<PY
import statistics, sys
rounds, clients, secs = sys.argv[1:]
tps = {$(for v in $variants; do printf '"%s": [%s], ' "$v" "$(echo ${tps[$v]} | tr ' ' ',')"; done)}
print(f"bench/lifecycle/crypto.sh: {rounds} rounds, {clients} clients, {secs} s each")
for v, base in [("plain", "plain"), ("encrypted", "plain"), ("encrypted_new", "plain"),
                ("read_plain", "read_plain"), ("read_decrypted", "read_plain")]:
    med = statistics.median(tps[v])
    ratios = [a / b for a, b in zip(tps[v], tps[base])]
    print(f"{v:15s} {med:9.0f} tps (rounds {min(tps[v]):.0f}-{max(tps[v]):.0f})"
          f"  ratio to {base}: {med / statistics.median(tps[base]):.2f}"
          f" (per round {min(ratios):.2f}-{max(ratios):.2f})")
PY
