# Sourced by scripts/bench.sh after scripts/redis-throwaway.sh: a throwaway
# Redis Cluster of 3 masters and 3 replicas on loopback, kept in $TMP, and
# the trap that stops its servers (each by its pid) however the script ends.
#
#   cluster_setup          wraps the EXIT trap of throwaway_setup
#   start_cluster BASE     starts six nodes on free ports in BASE..BASE+9999
#                          (bus ports +10000), joins them with redis-cli
#                          --cluster create, waits until every node says
#                          cluster_state:ok and every replica has synced;
#                          sets CLUSTER_URL (three seeds) and CLUSTER_PIDS.
#                          Returns 1 and stops what it started on failure.
#
# Needs redis-server and redis-cli (redis-tools); uses T5, is_ours and TMP
# from redis-throwaway.sh.

# shellcheck disable=SC2317 # called by the EXIT trap
cluster_cleanup() {
    for p in $CLUSTER_PIDS $NODE_PID; do
        kill "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    CLUSTER_PIDS=
    NODE_PID=
}

cluster_setup() {
    CLUSTER_PIDS=   # the nodes that answer
    NODE_PID=       # the node being started, not yet known to answer
    CLUSTER_URL=
    # The cluster's nodes first: throwaway_cleanup removes $TMP, their dir.
    trap 'cluster_cleanup; throwaway_cleanup' EXIT
}

# cluster_node PORT: start one node (its bus on PORT + 10000, the default);
# 0 and its pid appended to CLUSTER_PIDS when it answers as ours, 1 when it
# died (its port or bus port was taken) or never answered.
cluster_node() {
    dir=$TMP/node-$1
    mkdir -p "$dir" || return 1
    # The default node timeout (15 s): the least background gossip, and no
    # failover is part of the benchmark. A replica's first sync at once,
    # not 5 s later in the middle of a measurement.
    "$SERVER_BIN" --port "$1" --bind 127.0.0.1 --save "" --appendonly no \
        --daemonize no --dir "$dir" --logfile "$dir/redis.log" \
        --cluster-enabled yes --cluster-config-file nodes.conf \
        --repl-diskless-sync-delay 0 &
    NODE_PID=$!
    waited=0
    while [ "$waited" -lt 100 ]; do
        if ! kill -0 "$NODE_PID" 2>/dev/null; then
            wait "$NODE_PID" 2>/dev/null
            NODE_PID=
            return 1
        fi
        if is_ours "$1" "$NODE_PID"; then
            CLUSTER_PIDS="$CLUSTER_PIDS $NODE_PID"
            NODE_PID=
            return 0
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    kill "$NODE_PID" 2>/dev/null
    wait "$NODE_PID" 2>/dev/null
    NODE_PID=
    return 1
}

# 0 when node PORT says cluster_state:ok and knows all six nodes, and is a
# replica whose first sync is done or a master with its replica (each node
# is asked itself: news of roles takes seconds to go round by gossip).
cluster_node_ready() {
    info=$($T5 "$CLI_BIN" -h 127.0.0.1 -p "$1" cluster info 2>/dev/null | tr -d '\r')
    case $info in *cluster_state:ok*) ;; *) return 1 ;; esac
    case $info in *cluster_known_nodes:6*) ;; *) return 1 ;; esac
    repl=$($T5 "$CLI_BIN" -h 127.0.0.1 -p "$1" info replication 2>/dev/null | tr -d '\r')
    case $repl in
    *master_link_status:up*) return 0 ;;
    *role:master*connected_slaves:1*) return 0 ;;
    esac
    return 1
}

start_cluster() {
    port=$(($1 + $$ % 10000))
    addrs=""
    ports=""
    started=0
    tries=0
    while [ "$started" -lt 6 ] && [ "$tries" -lt 60 ]; do
        tries=$((tries + 1))
        port=$((port + 1))
        [ "$port" -gt $(($1 + 9999)) ] && port=$1
        # Something answers there already: not ours to use.
        $T5 "$CLI_BIN" -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && continue
        cluster_node "$port" || continue
        started=$((started + 1))
        addrs="$addrs 127.0.0.1:$port"
        ports="$ports $port"
    done
    if [ "$started" -lt 6 ]; then
        echo "$0: could not start six cluster nodes" >&2
        cluster_cleanup
        return 1
    fi
    # shellcheck disable=SC2086 # one argument per address
    if ! $T60 "$CLI_BIN" --cluster create $addrs --cluster-replicas 1 --cluster-yes \
        </dev/null >"$TMP/cluster-create.log" 2>&1; then
        echo "$0: redis-cli --cluster create failed:" >&2
        tail -n 5 "$TMP/cluster-create.log" >&2
        cluster_cleanup
        return 1
    fi
    waited=0
    for p in $ports; do
        while ! cluster_node_ready "$p"; do
            waited=$((waited + 1))
            if [ "$waited" -gt 300 ]; then
                echo "$0: the cluster did not reach cluster_state:ok on every node" >&2
                cluster_cleanup
                return 1
            fi
            sleep 0.1
        done
    done
    # Three seeds: hilock takes the next when the first does not answer.
    # shellcheck disable=SC2086 # one argument per port
    set -- $ports
    # shellcheck disable=SC2034 # read by the caller
    CLUSTER_URL=redis://127.0.0.1:$1,127.0.0.1:$2,127.0.0.1:$3
    return 0
}

if command -v timeout >/dev/null 2>&1; then T60="timeout 60"; else T60=; fi
