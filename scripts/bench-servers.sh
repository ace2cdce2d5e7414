#!/bin/sh
# bench-servers.sh BENCH OUT_DIR — hilock's headline figures on Redis and on
# Valkey in one run: a throwaway redis-server and a throwaway valkey-server
# side by side, the same hilock-bench run on each in turn, SERVERS_REPS
# times, so that the machine's drift hits both alike.
#
#   sh scripts/bench-servers.sh build/hilock-bench build/bench
#   SERVERS_REPS=5 SERVERS_SCENARIOS=handoff,throughput sh scripts/bench-servers.sh ...
#   BENCH_QUICK=1 ...                   small counts (hilock-bench -q)
#
# Each server's figures are measured against its own baselines (its PING,
# its redis-benchmark or valkey-benchmark). Prints each repetition's
# figures, then each server's medians and Valkey / Redis; the JSON lines
# of every run, each with its server, go to OUT_DIR/servers.jsonl. Both
# servers are always stopped, by pid.
set -u
BENCH=${1:?usage: bench-servers.sh BENCH OUT_DIR}
OUT=${2:?usage: bench-servers.sh BENCH OUT_DIR}
REPS=${SERVERS_REPS:-3}
SCEN=${SERVERS_SCENARIOS:-handoff,throughput,redis_cost}
QUICK=
[ "${BENCH_QUICK:-0}" = 1 ] && QUICK=-q
HERE=$(cd "$(dirname "$0")" && pwd)
HILOCK_SERVER=redis
# shellcheck source=scripts/redis-throwaway.sh
. "$HERE/redis-throwaway.sh"
for tool in redis-server redis-cli redis-benchmark valkey-server valkey-cli valkey-benchmark; do
    command -v "$tool" >/dev/null 2>&1 && continue
    echo "bench-servers: $tool is missing: sh scripts/deps.sh --valkey installs both servers' programs" >&2
    exit 1
done
[ -x "$BENCH" ] || { echo "bench-servers: no $BENCH (make $BENCH)" >&2; exit 1; }
mkdir -p "$OUT" || exit 1
throwaway_setup hilock-servers
REDIS_PID=
servers_cleanup() {
    if [ -n "$REDIS_PID" ]; then
        kill "$REDIS_PID" 2>/dev/null
        wait "$REDIS_PID" 2>/dev/null
    fi
    throwaway_cleanup # the valkey-server ($PID) and the scratch directory
}
trap servers_cleanup EXIT

start_redis 45000 || exit 1
REDIS_PID=$PID REDIS_PORT=$PORT PID=
SERVER_BIN=valkey-server CLI_BIN=valkey-cli
start_redis 46000 || exit 1
VALKEY_PORT=$PORT
echo "== $(redis-server --version | cut -d' ' -f1-3) on :$REDIS_PORT, $(valkey-server --version | cut -d' ' -f1-3) on :$VALKEY_PORT; $SCEN, $REPS repetitions"

# The figures of a run: handoff p50 (us), over PING and over the blocking
# floor; throughput (locks/s) and over the server's benchmark running the
# acquire script; the mutex's Redis time per cycle (us) and over the
# classic protocol's.
figures() {
    sed -n \
        -e 's/.*"scenario":"handoff","client":"hilock","p50_us":\([0-9.]*\).*"p50_over_ping":\([0-9.]*\).*"p50_over_floor":\([0-9.]*\).*/handoff_p50_us \1\nhandoff_over_ping \2\nhandoff_over_floor \3/p' \
        -e 's/.*"scenario":"throughput","client":"hilock","locks_per_s":\([0-9.]*\).*"locks_over_redis_benchmark":\([0-9.]*\).*/throughput_locks_per_s \1\nthroughput_over_benchmark \2/p' \
        -e 's/.*"scenario":"redis_cost","client":"hilock","primitive":"mutex".*"redis_us_per_cycle":\([0-9.]*\),"over_floor":\([0-9.]*\).*/mutex_redis_us_per_cycle \1\nmutex_over_floor \2/p'
}
: > "$OUT/servers.jsonl"
: > "$TMP/redis.txt"
: > "$TMP/valkey.txt"
i=1
while [ "$i" -le "$REPS" ]; do
    for server in redis valkey; do
        if [ "$server" = redis ]; then port=$REDIS_PORT; else port=$VALKEY_PORT; fi
        REDIS_BENCHMARK=$server-benchmark "$BENCH" -u "redis://127.0.0.1:$port" -s "$SCEN" $QUICK 2>/dev/null \
            > "$TMP/run.jsonl" || echo "bench-servers: $server, repetition $i: hilock-bench failed" >&2
        sed "s/^{/{\"server\":\"$server\",\"rep\":$i,/" "$TMP/run.jsonl" >> "$OUT/servers.jsonl"
        figures < "$TMP/run.jsonl" > "$TMP/run.txt"
        sed "s/^/$server $i /" "$TMP/run.txt"
        cat "$TMP/run.txt" >> "$TMP/$server.txt"
    done
    i=$((i + 1))
done
awk '
function median(arr, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && arr[j - 1] > arr[j]; j--) { t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t }
    return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
FILENAME ~ /redis.txt$/ { r[$1, ++nr[$1]] = $2; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
FILENAME ~ /valkey.txt$/ { v[$1, ++nv[$1]] = $2 }
END {
    for (k = 1; k <= n; k++) {
        s = order[k]
        for (i = 1; i <= nr[s]; i++) x[i] = r[s, i]
        mr = median(x, nr[s])
        for (i = 1; i <= nv[s]; i++) y[i] = v[s, i]
        mv = nv[s] ? median(y, nv[s]) : 0
        printf "%s: Redis median %.2f, Valkey median %.2f: %.3fx (%d runs each)\n", s, mr, mv, mr ? mv / mr : 0, nr[s]
    }
}' "$TMP/redis.txt" "$TMP/valkey.txt"
