# test/ha/cluster.sh: a Patroni cluster on loopback for the failover drill
# (test/run-69-failover.sh).  Source after test/lib.sh and
# test/forward/common.sh (for the Kafka broker).
#
#   ha_ensure_deps            apt-get install patroni etcd-server (Debian
#                             bookworm: patroni 3.0.2, etcd 3.4.23) if missing
#   ha_start_etcd DIR         one etcd member on free loopback ports; HA_ETCD
#   ha_cluster_start DIR SCOPE SYNC STANDBYS-SETTING
#                             two Patroni nodes (node1, node2), either the
#                             first leader (HA_LEADER); SYNC true|false is Patroni's
#                             synchronous_mode; STANDBYS-SETTING yes|no sets
#                             esrc.forwarder_standbys on each node to the
#                             other node's slot.  Database $HA_DB with esrc,
#                             a subscription and a projection (drill_*).
#                             Topics SCOPE.{category}, offsets SCOPE.offsets.
#   ha_sql NODE SQL           psql -qAt on node 1 or 2
#   ha_leader                 1 or 2: the node whose REST API answers
#                             /primary with 200 (empty if none)
#   ha_wait_leader NOT S      until a leader other than NOT runs read-write
#   ha_wait_streaming NODE S  until NODE is a replica streaming from the leader
#   ha_is_streaming NODE      whether it is, now
#   ha_wait_sync NODE S       until NODE is the leader's synchronous standby
#   ha_postmaster NODE        the postmaster's pid of NODE
#   ha_walreceiver NODE       the walreceiver's pid of NODE
#   ha_cluster_stop           stop every Patroni (and its PostgreSQL)
#   ha_stop_all               ha_cluster_stop, then etcd
#
# Everything listens on 127.0.0.1, on ports chosen free; everything is
# stopped by the pid it wrote, never by name.

HA_DB=esrc_ha
HA_HERE=$ESRC_ROOT/test/ha
HA_ETCD=
HA_ETCD_DIR=
HA_DIR=
HA_PORT=()
HA_REST=()
HA_PIDFILES=()

ha_ensure_deps() {
    command -v patroni >/dev/null && command -v etcd >/dev/null &&
        /usr/bin/python3 -c 'import psycopg2' 2>/dev/null && return 0
    [ "$(id -u)" = 0 ] || die "missing packages patroni etcd-server; install them or run as root"
    log "installing patroni etcd-server (apt-get)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q patroni etcd-server >/dev/null
}

ha_start_etcd() {
    HA_ETCD_DIR=$1
    mkdir -p "$HA_ETCD_DIR"
    local cport pport
    cport=$(free_port)
    pport=$(free_port)
    [ "$cport" != "$pport" ] || pport=$(free_port)
    etcd --name drill --data-dir "$HA_ETCD_DIR/data" \
        --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
        --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
        --initial-cluster "drill=http://127.0.0.1:$pport" --log-level warn \
        >"$HA_ETCD_DIR/etcd.log" 2>&1 &
    echo $! >"$HA_ETCD_DIR/etcd.pid"
    HA_ETCD=127.0.0.1:$cport
    local deadline=$((SECONDS + 30))
    until curl -sf "http://$HA_ETCD/health" 2>/dev/null | grep -q true; do
        [ $SECONDS -lt $deadline ] || { tail -20 "$HA_ETCD_DIR/etcd.log"; die "etcd did not start"; }
        sleep 0.2
    done
}

# ha_node_config NODE SCOPE SYNC STANDBYS: node's patroni.yml on stdout.
# This is the configuration docs/operations.md ("High availability")
# shows; keep them alike.
ha_node_config() {
    local n=$1 scope=$2 sync=$3 standbys=$4 other=$(( 3 - $1 ))
    cat <<EOF
scope: $scope
namespace: /esrc-drill/
name: node$n
log:
  level: INFO
restapi:
  listen: 127.0.0.1:${HA_REST[$n]}
  connect_address: 127.0.0.1:${HA_REST[$n]}
etcd3:
  hosts: $HA_ETCD
bootstrap:
  dcs:
    # failover within seconds: the leader key lives ttl seconds, Patroni
    # runs its loop every loop_wait seconds
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    # a crashed primary is not restarted as primary: the standby takes over
    # at once (the default, 300 s, waits for the old primary to come back)
    primary_start_timeout: 0
    # a lagging standby may still be promoted (asynchronous mode): what the
    # forwarder sent beyond it is what esrc.forwarder_standbys guards
    maximum_lag_on_failover: 1099511627776
    synchronous_mode: $sync
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_log_hints: 'on'
        max_connections: 60
        max_worker_processes: 16
        max_wal_senders: 10
        max_replication_slots: 10
        # pg_rewind copies the source's WAL files: keep pg_wal small
        min_wal_size: 32MB
  initdb:
    - encoding: UTF8
    - locale: C
postgresql:
  listen: 127.0.0.1:${HA_PORT[$n]}
  connect_address: 127.0.0.1:${HA_PORT[$n]}
  data_dir: $HA_DIR/node$n/data
  bin_dir: $PG_BINDIR
  pgpass: $HA_DIR/node$n/pgpass
  # a new replica's base backup starts with an immediate checkpoint
  basebackup:
    - checkpoint: fast
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
  parameters:
    unix_socket_directories: '$HA_DIR/node$n'
    # esrc on every node: the forwarder starts when a node is promoted
    shared_preload_libraries: esrc
    esrc.database: $HA_DB
    esrc.kafka_brokers: '$FWD_BROKER'
    esrc.kafka_topic: '$scope.{category}'
    esrc.kafka_offsets_topic: '$scope.offsets'
    log_min_messages: log
    log_line_prefix: '%m [%p] %a '
EOF
    if [ "$standbys" = yes ]; then
        cat <<EOF
    # send only what the other node (its physical slot: Patroni names slots
    # after members) has flushed
    esrc.forwarder_standbys: node$other
EOF
    fi
}

ha_start_node() {
    local n=$1
    mkdir -p "$HA_DIR/node$n"
    chmod 700 "$HA_DIR/node$n"
    [ "$(id -u)" = 0 ] && chown "$ESRC_TEST_USER" "$HA_DIR/node$n"
    HA_PIDFILES+=("$HA_DIR/node$n/patroni.pid")
    # shellcheck disable=SC2016
    as_test_user sh -c 'echo $$ >"$1"; exec patroni "$2" >"$3" 2>&1' sh \
        "$HA_DIR/node$n/patroni.pid" "$HA_DIR/node$n.yml" "$HA_DIR/node$n/patroni.log" &
}

ha_cluster_start() {
    HA_DIR=$1
    local scope=$2 sync=$3 standbys=$4 n
    mkdir -p "$HA_DIR"
    chmod 755 "$HA_DIR"
    for n in 1 2; do
        HA_PORT[$n]=$(free_port)
        HA_REST[$n]=$(free_port)
    done
    for n in 1 2; do
        ha_node_config $n "$scope" "$sync" "$standbys" >"$HA_DIR/node$n.yml"
    done
    chmod 644 "$HA_DIR"/node?.yml
    # both at once: one wins the initialize key in etcd and bootstraps, the
    # other waits for it and clones it with pg_basebackup
    ha_start_node 1
    ha_start_node 2
    ha_wait_leader 0 60 || { tail -30 "$HA_DIR"/node?/patroni.log; die "the cluster did not bootstrap"; }
    psql -h 127.0.0.1 -p "${HA_PORT[$HA_LEADER]}" -U postgres -d postgres -qAt -c "CREATE DATABASE $HA_DB" >/dev/null
    ha_sql "$HA_LEADER" "CREATE EXTENSION esrc" >/dev/null
    ha_sql "$HA_LEADER" "CREATE TABLE drill_consumed (position bigint, id uuid);
              CREATE TABLE drill_projected (position bigint, id uuid);
              CREATE FUNCTION drill_project(e esrc.event) RETURNS void LANGUAGE sql AS
                'INSERT INTO public.drill_projected VALUES (e.position, e.id)';
              SELECT esrc.create_subscription('drill');
              SELECT esrc.create_projection('drill', 'public.drill_project(esrc.event)')" >/dev/null
    ha_wait_streaming $(( 3 - HA_LEADER )) 90 || { tail -30 "$HA_DIR"/node?/patroni.log; die "the replica did not join"; }
}

ha_sql() {
    psql -h 127.0.0.1 -p "${HA_PORT[$1]}" -U postgres -d "$HA_DB" -qAt -v ON_ERROR_STOP=1 -c "$2"
}

ha_is_leader() {
    [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:${HA_REST[$1]}/primary" 2>/dev/null)" = 200 ]
}

ha_leader() {
    local n
    for n in 1 2; do
        ha_is_leader $n && { echo $n; return 0; }
    done
}

# ha_wait_leader NOT S: until a node other than NOT (0: any) is the leader
# and accepts writes; prints nothing, sets HA_LEADER.
ha_wait_leader() {
    local not=$1 deadline=$((SECONDS + $2)) n
    while :; do
        for n in 1 2; do
            [ "$n" = "$not" ] && continue
            if ha_is_leader $n &&
               [ "$(psql -h 127.0.0.1 -p "${HA_PORT[$n]}" -U postgres -d postgres -qAt \
                     -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = f ]; then
                HA_LEADER=$n
                return 0
            fi
        done
        [ $SECONDS -lt $deadline ] || { log "no leader (other than $not) within $2 s"; return 1; }
        sleep 0.1
    done
}

# ha_wait_streaming NODE S: NODE runs as a replica and streams from the
# leader on the leader's timeline (a crashed old primary that is ahead
# streams the old timeline for a moment before Patroni rewinds it), and
# the leader sees it streaming.
ha_wait_streaming() {
    local n=$1 deadline=$((SECONDS + $2))
    until ha_is_streaming "$n"; do
        [ $SECONDS -lt $deadline ] || { log "node$n is not streaming within $2 s"; return 1; }
        sleep 0.2
    done
}

# ha_is_streaming NODE: the condition ha_wait_streaming waits for, once.
ha_is_streaming() {
    local n=$1 tli
    tli=$(ha_sql "$HA_LEADER" "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int
                                WHERE EXISTS (SELECT 1 FROM pg_stat_replication
                                              WHERE application_name = 'node$n' AND state = 'streaming')" 2>/dev/null || true)
    [ -n "$tli" ] &&
    [ "$(psql -h 127.0.0.1 -p "${HA_PORT[$n]}" -U postgres -d postgres -qAt \
             -c "SELECT pg_is_in_recovery() AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver
                                                        WHERE status = 'streaming' AND received_tli = $tli)" 2>/dev/null)" = t ]
}

# ha_wait_sync NODE S: the leader lists NODE as its synchronous standby
# (Patroni sets synchronous_standby_names a loop after NODE streams; until
# then Patroni would not promote NODE).
ha_wait_sync() {
    local n=$1 deadline=$((SECONDS + $2))
    until [ "$(ha_sql "$HA_LEADER" "SELECT sync_state FROM pg_stat_replication
                                    WHERE application_name = 'node$n'" 2>/dev/null)" = sync ] &&
          curl -s -m 2 "http://127.0.0.1:${HA_REST[$HA_LEADER]}/cluster" 2>/dev/null |
              jq -e --arg m "node$n" '.members[] | select(.name == $m) | .role == "sync_standby"' >/dev/null; do
        [ $SECONDS -lt $deadline ] || { log "node$n is not the synchronous standby within $2 s"; return 1; }
        sleep 0.2
    done
}

ha_postmaster() {
    head -1 "$HA_DIR/node$1/data/postmaster.pid" 2>/dev/null
}

ha_walreceiver() {
    psql -h 127.0.0.1 -p "${HA_PORT[$1]}" -U postgres -d postgres -qAt \
        -c "SELECT pid FROM pg_stat_wal_receiver"
}

# Stop every Patroni (SIGTERM: it stops its PostgreSQL), then whatever
# is left by pid.  Bounded: 30 s, then SIGKILL.
ha_cluster_stop() {
    local f pid deadline
    for f in "${HA_PIDFILES[@]}"; do
        pid=$(cat "$f" 2>/dev/null) && [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
    done
    deadline=$((SECONDS + 30))
    for f in "${HA_PIDFILES[@]}"; do
        pid=$(cat "$f" 2>/dev/null) || continue
        while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    for f in "${HA_PIDFILES[@]}"; do
        pid=$(head -1 "$(dirname "$f")/data/postmaster.pid" 2>/dev/null) || continue
        [ -n "$pid" ] && grep -q postgres "/proc/$pid/cmdline" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    done
    HA_PIDFILES=()
    return 0
}

# ha_cluster_stop, then etcd.
ha_stop_all() {
    local pid n
    ha_cluster_stop
    if [ -n "$HA_ETCD_DIR" ] && pid=$(cat "$HA_ETCD_DIR/etcd.pid" 2>/dev/null); then
        kill -TERM "$pid" 2>/dev/null || true
        for n in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    return 0
}
