# N throwaway, independent redis-servers on loopback (the masters of a
# Redlock), kept in $TMP, and the trap that stops each by its pid however
# the script ends.
#
# Sourced by scripts/bench.sh after scripts/redis-throwaway.sh (and
# scripts/redis-cluster-throwaway.sh, whose cleanup it keeps in the trap):
#
#   many_setup             wraps the EXIT trap of throwaway_setup (and of
#                          cluster_setup, when that ran)
#   start_many N BASE      starts N servers on free ports in BASE..BASE+9999,
#                          each as the -u server (--save "" --appendonly no,
#                          its own directory); sets MANY_URL
#                          (redlock://127.0.0.1:P1,...) and MANY_PIDS.
#                          Returns 1 and stops what it started on failure.
#
# Run on its own, it starts N servers, prints their redlock:// URL and waits;
# Ctrl-C (or any end) stops each server by its pid:
#
#   sh scripts/redis-many-throwaway.sh 5
#
# Needs redis-server and redis-cli (redis-tools); uses T5, is_ours and TMP
# from redis-throwaway.sh.

# shellcheck disable=SC2317 # called by the EXIT trap
many_cleanup() {
    for p in $MANY_PIDS $MANY_NODE_PID; do
        kill "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    MANY_PIDS=
    MANY_NODE_PID=
}

many_setup() {
    MANY_PIDS=       # the servers that answer
    MANY_NODE_PID=   # the server being started, not yet known to answer
    MANY_URL=
    # These servers first: throwaway_cleanup removes $TMP, their dirs.
    if command -v cluster_cleanup >/dev/null 2>&1; then
        trap 'many_cleanup; cluster_cleanup; throwaway_cleanup' EXIT
    else
        trap 'many_cleanup; throwaway_cleanup' EXIT
    fi
}

# many_node PORT: 0 and its pid appended to MANY_PIDS when the server
# answers as ours; 1 when it died (its port was taken) or never answered.
many_node() {
    dir=$TMP/many-$1
    mkdir -p "$dir" || return 1
    "$SERVER_BIN" --port "$1" --bind 127.0.0.1 --save "" --appendonly no \
        --daemonize no --dir "$dir" --logfile "$dir/redis.log" &
    MANY_NODE_PID=$!
    waited=0
    while [ "$waited" -lt 100 ]; do
        if ! kill -0 "$MANY_NODE_PID" 2>/dev/null; then
            wait "$MANY_NODE_PID" 2>/dev/null
            MANY_NODE_PID=
            return 1
        fi
        if is_ours "$1" "$MANY_NODE_PID"; then
            MANY_PIDS="$MANY_PIDS $MANY_NODE_PID"
            MANY_NODE_PID=
            return 0
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    kill "$MANY_NODE_PID" 2>/dev/null
    wait "$MANY_NODE_PID" 2>/dev/null
    MANY_NODE_PID=
    return 1
}

start_many() {
    want=$1
    port=$(($2 + $$ % 10000))
    hosts=""
    started=0
    tries=0
    while [ "$started" -lt "$want" ] && [ "$tries" -lt $((want * 10)) ]; do
        tries=$((tries + 1))
        port=$((port + 1))
        [ "$port" -gt $(($2 + 9999)) ] && port=$2
        # Something answers there already: not ours to use.
        $T5 "$CLI_BIN" -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && continue
        many_node "$port" || continue
        started=$((started + 1))
        hosts="$hosts${hosts:+,}127.0.0.1:$port"
    done
    if [ "$started" -lt "$want" ]; then
        echo "$0: could not start $want redis-servers" >&2
        many_cleanup
        return 1
    fi
    # shellcheck disable=SC2034 # read by the caller
    MANY_URL=redlock://$hosts
    return 0
}

# On its own (not sourced): start N, print the URL, wait for the end.
case $0 in
*redis-many-throwaway.sh)
    n=${1:-5}
    case $n in '' | *[!0-9]*) echo "usage: $0 [N]" >&2; exit 2 ;; esac
    . "$(dirname "$0")/redis-throwaway.sh"
    throwaway_setup redis-many
    many_setup
    start_many "$n" 11000 || exit 1
    echo "$MANY_URL"
    echo "(pids$MANY_PIDS; Ctrl-C stops them)" >&2
    # Sleep in the background, so that a signal reaches the traps at once.
    while :; do
        sleep 3600 &
        CHILD=$!
        wait "$CHILD"
        CHILD=
    done
    ;;
esac
