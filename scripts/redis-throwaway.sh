# Sourced by scripts/demo.sh and scripts/bench.sh: a scratch directory,
# a throwaway redis-server on a free loopback port, and the traps that stop
# it (by pid) and whatever the caller runs in $CHILD, however the script ends.
#
#   throwaway_setup NAME   makes $TMP, sets PID= CHILD=, installs the traps
#   start_redis BASE       starts the server: sets PID and PORT

# shellcheck disable=SC2317 # called by the EXIT trap
throwaway_cleanup() {
    if [ -n "$CHILD" ]; then
        kill "$CHILD" 2>/dev/null
        wait "$CHILD" 2>/dev/null
        CHILD=
    fi
    if [ -n "$PID" ]; then
        kill "$PID" 2>/dev/null
        wait "$PID" 2>/dev/null
        PID=
    fi
    rm -rf "$TMP"
}

throwaway_setup() {
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || exit 1
    PID=      # the redis-server
    CHILD=    # the part running now
    trap throwaway_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    trap 'exit 141' PIPE
}

# Bound redis-cli calls, so a hang cannot stall `make`.
if command -v timeout >/dev/null 2>&1; then T5="timeout 5"; else T5=; fi

# 0 if the redis-server on port $1 is the one with pid $2.
is_ours() {
    $T5 redis-cli -h 127.0.0.1 -p "$1" info server 2>/dev/null |
        tr -d '\r' | grep -qx "process_id:$2"
}

# start_redis BASE: the first port that works, from a per-process start
# point in BASE..BASE+19999. A port where something already answers is
# skipped; if another process wins the port between check and bind, our
# server exits and the next port is tried.
start_redis() {
    base=$1
    port=$((base + $$ % 20000))
    tries=0
    while [ "$tries" -lt 50 ]; do
        tries=$((tries + 1))
        port=$((port + 1))
        [ "$port" -gt $((base + 19999)) ] && port=$base
        if $T5 redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1; then
            continue
        fi
        redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
            --daemonize no --dir "$TMP" --logfile "$TMP/redis.log" &
        PID=$!
        waited=0
        while [ "$waited" -lt 100 ]; do
            if ! kill -0 "$PID" 2>/dev/null; then
                wait "$PID" 2>/dev/null
                PID=
                break
            fi
            if is_ours "$port" "$PID"; then
                PORT=$port
                return 0
            fi
            sleep 0.1
            waited=$((waited + 1))
        done
        if [ -n "$PID" ]; then # alive but never answered: give up on it
            kill "$PID" 2>/dev/null
            wait "$PID" 2>/dev/null
            PID=
        fi
    done
    echo "$0: could not start redis-server; its last log lines:" >&2
    tail -n 5 "$TMP/redis.log" >&2 2>/dev/null
    return 1
}

