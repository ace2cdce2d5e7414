# Sourced by scripts/demo.sh and scripts/bench.sh: a scratch directory,
# a throwaway redis-server on a free loopback port, and the traps that stop
# it (by pid) and whatever the caller runs in $CHILD, however the script ends.
#
#   throwaway_setup NAME   makes $TMP, sets PID= CHILD=, installs the traps
#   start_redis BASE [TLS_DIR]  starts the server: sets PID and PORT; with
#                          TLS_DIR (ca.crt, server.crt, server.key, as
#                          make_tls_certs makes them) it also listens with
#                          TLS on TLS_PORT (PORT + 1), clients unauthenticated
#   make_tls_certs DIR     a CA and a server certificate it signs (EC P-256,
#                          SAN IP:127.0.0.1), made with openssl in DIR
#                          (its output in DIR/openssl.log)

# SERVER_BIN, CLI_BIN, BENCHMARK_BIN: Redis's, or Valkey's (HILOCK_SERVER).
. "$(dirname "$0")/server.sh"

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
    $T5 "$CLI_BIN" -h 127.0.0.1 -p "$1" info server 2>/dev/null |
        tr -d '\r' | grep -qx "process_id:$2"
}

# make_tls_certs DIR: as the tests make theirs (tests/support/tlsenv.c),
# valid for 2 days.
make_tls_certs() {
    mkdir -p "$1" || return 1
    # One && chain: `set -e` would be ignored in a subshell tested by ||.
    (
        cd "$1" &&
            key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; } &&
            key ca.key &&
            openssl req -x509 -new -key ca.key -days 2 -subj "/CN=hilock bench CA" -out ca.crt &&
            key server.key &&
            openssl req -new -key server.key -subj "/CN=localhost" -out server.csr &&
            printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' \
                >server.ext &&
            openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
                -extfile server.ext -out server.crt
    ) >"$1/openssl.log" 2>&1 || {
        echo "$0: openssl failed to make the TLS certificates:" >&2
        tail -n 5 "$1/openssl.log" >&2
        return 1
    }
}

# start_redis BASE [TLS_DIR]: the first port that works, from a per-process
# start point in BASE..BASE+19999. A port where something already answers is
# skipped; if another process wins the port (or, with TLS, the next one)
# between check and bind, our server exits and the next port is tried.
start_redis() {
    base=$1
    tls_dir=${2:-}
    port=$((base + $$ % 20000))
    tries=0
    while [ "$tries" -lt 50 ]; do
        tries=$((tries + 1))
        port=$((port + 1))
        [ "$port" -gt $((base + 19999)) ] && port=$base
        if $T5 "$CLI_BIN" -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1; then
            continue
        fi
        set --
        if [ -n "$tls_dir" ]; then
            set -- --tls-port $((port + 1)) --tls-cert-file "$tls_dir/server.crt" \
                --tls-key-file "$tls_dir/server.key" --tls-ca-cert-file "$tls_dir/ca.crt" \
                --tls-auth-clients no
        fi
        "$SERVER_BIN" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
            --daemonize no --dir "$TMP" --logfile "$TMP/redis.log" "$@" &
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
                TLS_PORT=$((port + 1))
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

