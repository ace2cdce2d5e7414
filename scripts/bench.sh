#!/bin/sh
# bench.sh [--peers|--tls] BENCH_BINARY [OUT_DIR] — run the benchmarks
# against a throwaway redis-server. `make bench`, `make bench-peers` and
# `make bench-tls` call this.
#
#   (default)  every scenario of BENCH_BINARY (build/hilock-bench): JSON
#              lines in OUT_DIR/results.jsonl, the check of the targets on
#              stderr, and the plot OUT_DIR/handoff.png. The cluster
#              scenarios run on a throwaway Redis Cluster (3 masters + 3
#              replicas, scripts/redis-cluster-throwaway.sh) started beside
#              the server, in the same run; the Redlock scenarios on 5
#              throwaway independent masters (scripts/redis-many-throwaway.sh).
#   --peers    the handoff and herd scenarios with hilock, the polling
#              baseline and npm's redis-semaphore and redlock side by side,
#              on one server in one run: OUT_DIR/peers.jsonl and the plot;
#              and hilock's Redlock scenarios beside npm's redlock on the
#              same 5 masters (redlock_acquire, redlock_handoff).
#              Skipped (exit 0) when node and npm are not installed.
#   --tls      the tls scenario alone (`make bench-tls HIREDIS=/tmp/hiredis1`):
#              hilock's handoff, throughput and PING over the server's TLS
#              port beside its plain port, alternated, in one run:
#              OUT_DIR/tls.jsonl. Skipped (exit 0) when BENCH_BINARY has
#              no TLS (hilock-bench -T: built against hiredis 0.14).
#
# When BENCH_BINARY has TLS (a build against hiredis >= 1.0 with SSL), the
# server also listens with TLS on the next port, with a CA and certificate
# made by openssl in the temporary directory, and the default mode runs the
# tls scenario too.
#
# BENCH_QUICK=1 (make bench BENCH_QUICK=1): the smoke test, hilock-bench -q
# and small counts for the peers (a few seconds per scenario).
# BENCH_FAIR_P, BENCH_FAIR_W, BENCH_FAIR_HOLD_MS, BENCH_FAIR_SECONDS: the
# fairness scenario's parameters, read by hilock-bench from the environment.
#
# OUT_DIR defaults to build/bench. The server listens on a free loopback port,
# keeps nothing (--save "" --appendonly no, data in a temporary directory) and
# is always stopped by its pid, as is every node of the cluster and every
# Redlock master. Missing tools
# (redis-server, redis-benchmark, gnuplot) are installed with apt-get, through
# sudo when not root.
set -u

MODE=bench
case ${1:-} in
--peers) MODE=peers; shift ;;
--tls) MODE=tls; shift ;;
esac
BENCH=${1:-build/hilock-bench}
OUT=${2:-build/bench}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PEERS=$ROOT/bench/peers

if [ ! -x "$BENCH" ]; then
    echo "bench: $BENCH is not built (run: make bench)" >&2
    exit 1
fi
have() { command -v "$1" >/dev/null 2>&1; }

if [ "$MODE" = peers ] && { ! have node || ! have npm; }; then
    echo "bench-peers: node and npm are not installed; skipping the peers (optional)."
    exit 0
fi
# TLS: the TLS port beside the plain one, when the binary can use it.
TLS=0
if [ "$MODE" != peers ] && "$BENCH" -T >/dev/null 2>&1; then
    TLS=1
fi
if [ "$MODE" = tls ] && [ "$TLS" = 0 ]; then
    echo "bench-tls: $("$BENCH" -T); skipping (build with: make bench-tls HIREDIS=/tmp/hiredis1)."
    exit 0
fi

# ---- Tools ------------------------------------------------------------------
missing=""
have redis-server || missing="$missing redis-server"
{ have redis-benchmark && have redis-cli; } || missing="$missing redis-tools"
[ "$MODE" = tls ] || have gnuplot || missing="$missing gnuplot-nox"
[ "$TLS" = 0 ] || have openssl || missing="$missing openssl"
if [ -n "$missing" ]; then
    echo "bench: installing:$missing"
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
        if ! have sudo; then
            echo "bench: not root and no sudo; as root, run: apt-get install -y$missing" >&2
            exit 1
        fi
        if [ -t 0 ]; then SUDO="sudo"; else SUDO="sudo -n"; fi
    fi
    if ! have apt-get; then
        echo "bench: no apt-get here; install the equivalents of these Debian packages:$missing" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086 # word splitting of $SUDO and $missing is intended
    if ! $SUDO apt-get install -y --no-install-recommends $missing </dev/null; then
        # No package lists yet (fresh container), or stale ones: update once.
        if ! $SUDO apt-get update </dev/null ||
            ! $SUDO apt-get install -y --no-install-recommends $missing </dev/null; then
            echo "bench: apt-get install failed" >&2
            exit 1
        fi
    fi
fi
for tool in redis-server redis-cli redis-benchmark; do
    have "$tool" || { echo "bench: $tool not found" >&2; exit 1; }
done

if command -v timeout >/dev/null 2>&1; then
    T600="timeout 600"
else
    T600=
fi

mkdir -p "$OUT" || exit 1
. "$ROOT/scripts/redis-throwaway.sh"
. "$ROOT/scripts/redis-cluster-throwaway.sh"
. "$ROOT/scripts/redis-many-throwaway.sh"
throwaway_setup hilock-bench  # TMP, PID, CHILD, and the traps that stop them
cluster_setup                 # CLUSTER_PIDS, stopped by the same EXIT trap
many_setup                    # MANY_PIDS, the same

QUICK=
[ "${BENCH_QUICK:-0}" = 1 ] && QUICK=-q

# run CMD... with stdout appended to $RESULTS; in the background, so that
# INT/TERM reach our traps at once.
run() {
    $T600 "$@" </dev/null >>"$RESULTS" &
    CHILD=$!
    wait "$CHILD"
    rc=$?
    CHILD=
    return $rc
}

if [ "$MODE" = peers ]; then
    # The pinned versions of package-lock.json, installed once.
    stamp=$PEERS/node_modules/.package-lock.json
    if [ ! -f "$stamp" ] || [ -n "$(find "$PEERS/package-lock.json" -newer "$stamp")" ]; then
        echo "bench-peers: npm ci in bench/peers"
        (cd "$PEERS" && npm ci --no-audit --no-fund --loglevel=error) || {
            echo "bench-peers: npm ci failed" >&2
            exit 1
        }
    fi
fi

TLS_DIR=
if [ "$TLS" = 1 ]; then
    TLS_DIR=$TMP/tls
    make_tls_certs "$TLS_DIR" || exit 1
fi
start_redis 40000 ${TLS_DIR:+"$TLS_DIR"} || exit 1
URL=redis://127.0.0.1:$PORT
echo "== redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on $URL (pid $PID)," \
    "$(nproc 2>/dev/null || echo '?') CPUs, $(uname -r)"
# The bench's options go in the positional parameters (BENCH and OUT are
# read): first the tls scenario's, the same server's TLS port and the CA.
set --
if [ "$TLS" = 1 ]; then
    echo "== TLS on rediss://127.0.0.1:$TLS_PORT (the same server; CA $TLS_DIR/ca.crt)"
    set -- -S "rediss://127.0.0.1:$TLS_PORT" -C "$TLS_DIR/ca.crt"
fi
rm -f "$OUT"/handoff-*.dat

FAILED=0
if [ "$MODE" = tls ]; then
    RESULTS=$OUT/tls.jsonl
    : >"$RESULTS"
    run "$BENCH" -u "$URL" "$@" -s tls $QUICK || FAILED=1
    echo
    echo "== $RESULTS"
    cat "$RESULTS"
    exit $FAILED
fi
# The Redlock's 5 independent masters, beside the server (both modes).
# Without them, the rest runs.
if start_many 5 11000; then
    echo "== Redlock: 5 masters, $MANY_URL (pids$MANY_PIDS)"
else
    echo "bench: no Redlock masters; the Redlock scenarios are skipped" >&2
    FAILED=1
fi
if [ "$MODE" = bench ]; then
    # The cluster beside the server, so that each cluster figure has the
    # standalone one of the same run beside it. Without it, the rest runs.
    if start_cluster 21000; then
        echo "== Redis Cluster, 3 masters + 3 replicas, seeds $CLUSTER_URL (pids$CLUSTER_PIDS)"
        set -- "$@" -c "$CLUSTER_URL"
    else
        echo "bench: no cluster; the cluster scenarios are skipped" >&2
        FAILED=1
    fi
    [ -n "$MANY_URL" ] && set -- "$@" -r "$MANY_URL"
    RESULTS=$OUT/results.jsonl
    : >"$RESULTS"
    run "$BENCH" -u "$URL" "$@" $QUICK -o "$OUT" || FAILED=1
else
    RESULTS=$OUT/peers.jsonl
    : >"$RESULTS"
    if [ -n "$QUICK" ]; then
        HANDOFFS=60 HERD=2:16,4:16 ACQUIRES=200 RL_HANDOFFS=50 RL_REPS=2
    else
        HANDOFFS=300 HERD=2:16,2:128,4:16,4:128 ACQUIRES=1000 RL_HANDOFFS=300 RL_REPS=3
    fi
    # hilock and the polling baseline first, then the peers: one server, one run.
    run "$BENCH" -u "$URL" -o "$OUT" -s handoff,herd,polling -n $((HANDOFFS * 2)) $QUICK || FAILED=1
    for client in redis-semaphore redlock; do
        echo "== peers: $client (handoff, herd)" >&2
        run node "$PEERS/peers.js" --url "$URL" --client "$client" --handoffs "$HANDOFFS" \
            --herd "$HERD" --hold-us 1000 --lat-dir "$OUT" || FAILED=1
    done
    # Redlock: hilock, then npm's redlock, on the same 5 masters, each
    # beside the first master alone.
    if [ -n "$MANY_URL" ]; then
        run "$BENCH" -u "$URL" -r "$MANY_URL" -s redlock $QUICK || FAILED=1
        echo "== peers: redlock on 5 masters (acquire, handoff; retryDelay 10 ms, no jitter)" >&2
        run node "$PEERS/peers.js" --client redlock --urls "$MANY_URL" --acquire "$ACQUIRES" \
            --handoffs "$RL_HANDOFFS" --reps "$RL_REPS" || FAILED=1
    fi
fi
echo
echo "== $RESULTS"
cat "$RESULTS"

# ---- The plot ------------------------------------------------------------------
files=""
titles=""
for c in hilock hilock-fair floor polling redis-semaphore redlock; do
    f=$OUT/handoff-$c.dat
    [ -s "$f" ] || continue
    case $c in
    floor) t="floor(blocking-hiredis)" ;;
    polling) t="polling(SET-NX+10ms)" ;;
    *) t=$c ;;
    esac
    files="$files $f"
    titles="$titles $t"
done
ping=$(sed -n 's/.*"scenario":"handoff","client":"hilock".*"ping_rtt_p50_us":\([0-9.]*\).*/\1/p' "$RESULTS" | head -n 1)
if have gnuplot && [ -n "$files" ]; then
    if gnuplot -e "outfile='$OUT/handoff.png'; files='$files'; titles='$titles'${ping:+; ping=$ping}" \
        "$ROOT/bench/plot.gp"; then
        echo "== plot: $OUT/handoff.png"
    else
        echo "bench: gnuplot failed" >&2
        FAILED=1
    fi
fi
exit $FAILED
