#!/bin/sh
# bench.sh [--peers|--tls] BENCH_BINARY [OUT_DIR] — run the benchmarks
# against a throwaway redis-server. `make bench`, `make bench-peers` and
# `make bench-tls` call this.
# bench.sh --plots OUT_DIR PLOT_DIR — only the plots, from the data files
# in OUT_DIR, into PLOT_DIR (`make bench-plots`: into bench/plots/).
#
#   (default)  every scenario of BENCH_BINARY (build/hilock-bench): JSON
#              lines in OUT_DIR/results.jsonl, the check of the targets on
#              stderr; then the waiters scenario at other sizes for the
#              memory plot (OUT_DIR/waiters-scale.jsonl, see
#              BENCH_SCALE_MAX), and the plots (below). The cluster
#              scenarios run on a throwaway Redis Cluster (3 masters + 3
#              replicas, scripts/redis-cluster-throwaway.sh) started beside
#              the server, in the same run; the Redlock scenarios on 5
#              throwaway independent masters (scripts/redis-many-throwaway.sh).
#   --peers    the handoff and herd scenarios with hilock, the polling
#              baseline and npm's redis-semaphore and redlock side by side,
#              on one server in one run: OUT_DIR/peers.jsonl, the handoff
#              latencies in OUT_DIR/peers/, and the plots again (below);
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
# BENCH_SCALE_MAX (default 100000; 10000 with BENCH_QUICK=1): the largest
# waiters run of the memory plot, of 1,000, 10,000, 100,000 and 1,000,000
# waiters (100 per name). 1000000 is opt-in: 1.5 to 2.5 minutes more and
# ~310 MB of RSS on 2 vCPUs.
#
# The plots (gnuplot, pngcairo; bench/*.gp), made at the end of the default
# and --peers modes into OUT_DIR from its data files, which the same step
# writes from the JSON lines:
#   handoff.png   handoff latency CDF (bench/plot.gp): the handoff-*.dat of
#                 the newer of the two runs, make bench-peers's (OUT_DIR/peers/:
#                 hilock, the floor, polling, redis-semaphore, redlock) or
#                 make bench's (OUT_DIR: hilock, the fair lock, the floor,
#                 polling), each with its own run's PING
#   herd.png      commands per handoff against P x W (bench/herd.gp;
#                 herd-CLIENT-pP.dat): hilock, the fair lock and polling
#                 from results.jsonl, the peers from peers.jsonl if present
#   waiters.png   bytes per waiter against waiters (bench/waiters.gp;
#                 waiters.dat, from results.jsonl and waiters-scale.jsonl)
#   fairness.png  each process's share of the grants and longest wait per
#                 primitive (bench/fairness.gp; fairness.dat)
# A missing gnuplot or data file is a warning, never a failure, except in
# --plots mode. OUT_DIR/results.env and peers.env say how each run was made
# (quick or not, redis-server, CPUs, date); --plots warns about a quick run.
# BENCH_FAIR_P, BENCH_FAIR_W, BENCH_FAIR_HOLD_MS, BENCH_FAIR_SECONDS: the
# fairness scenario's parameters, read by hilock-bench from the environment.
#
# OUT_DIR defaults to build/bench. The server listens on a free loopback port,
# keeps nothing (--save "" --appendonly no, data in a temporary directory) and
# is always stopped by its pid, as is every node of the cluster and every
# Redlock master. Missing tools
# (redis-server, redis-benchmark, gnuplot) are installed with apt-get, through
# sudo when not root; gnuplot only if it can be (without it, no plots).
set -u

MODE=bench
case ${1:-} in
--peers) MODE=peers; shift ;;
--tls) MODE=tls; shift ;;
--plots) MODE=plots; shift ;;
esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PEERS=$ROOT/bench/peers
have() { command -v "$1" >/dev/null 2>&1; }
warn() { echo "bench: warning: $*" >&2; }

# ---- The plots ------------------------------------------------------------------
# plots DATA_DIR PLOT_DIR: the data files from DATA_DIR's JSON lines (into
# DATA_DIR), then the PNGs into PLOT_DIR. Returns 1 if a plot could not be
# made (no gnuplot, no data, gnuplot failed), with a warning saying which;
# the caller decides whether that fails (only --plots does).

# jsonl_awk: an awk prelude, jv(line, key): the value of "key" in a JSON line
# of ours (a number, a string without its quotes, an array's inside).
JV='function jv(s, k,   i, r) {
    i = index(s, "\"" k "\":"); if (i == 0) return ""
    r = substr(s, i + length(k) + 3)
    if (substr(r, 1, 1) == "\"") { r = substr(r, 2); return substr(r, 1, index(r, "\"") - 1) }
    if (substr(r, 1, 1) == "[") return substr(r, 2, index(r, "]") - 2)
    match(r, /^[^,}]*/); return substr(r, 1, RLENGTH)
}'

# env_get FILE KEY: a key=value of a run's .env file.
env_get() { [ -f "$1" ] && sed -n "s/^$2=//p" "$1" | head -n 1; }

# run_label FILE.env TARGET: "make bench, Redis 7.0.15, 2 CPUs".
run_label() {
    l=$2
    [ "$(env_get "$1" quick)" = 1 ] && l="$l BENCH_QUICK=1"
    v=$(env_get "$1" server) # "Redis 7.0.15", "Valkey 8.0.1"
    [ -z "$v" ] && v=$(env_get "$1" redis) && [ -n "$v" ] && v="Redis $v" # written before the server was named
    [ -n "$v" ] && l="$l, $v"
    v=$(env_get "$1" cpus)
    [ -n "$v" ] && l="$l, $v CPUs"
    v=$(env_get "$1" date)
    [ -n "$v" ] && l="$l, $v"
    printf '%s' "$l"
}

plots() {
    D=$1
    P=$2
    prc=0
    if ! have gnuplot; then
        warn "gnuplot is not installed: no plots (apt-get install gnuplot-nox)"
        return 1
    fi
    mkdir -p "$P" || return 1

    # handoff.png: the newer complete set of latencies, each from one run.
    hd=$D
    hjson=$D/results.jsonl
    henv=$D/results.env
    hrun="make bench"
    if [ -s "$D/peers/handoff-hilock.dat" ] &&
        { [ ! -s "$D/handoff-hilock.dat" ] ||
            [ -n "$(find "$D/peers/handoff-hilock.dat" -newer "$D/handoff-hilock.dat")" ]; }; then
        hd=$D/peers
        hjson=$D/peers.jsonl
        henv=$D/peers.env
        hrun="make bench-peers"
    fi
    files=""
    titles=""
    lts=""
    lt=0
    for c in hilock hilock-fair floor polling redis-semaphore redlock; do
        lt=$((lt + 1))
        f=$hd/handoff-$c.dat
        [ -s "$f" ] || continue
        case $c in
        hilock) t='"hilock (mutex)"' ;;
        hilock-fair) t='"hilock fair lock"' ;;
        floor) t='"floor (blocking hiredis)"' ;;
        polling) t='"polling, 10 ms (C)"' ;;
        *) t=$c ;;
        esac
        files="$files $f"
        titles="$titles $t"
        lts="$lts $lt"
    done
    ping=""
    [ -f "$hjson" ] && ping=$(sed -n 's/.*"scenario":"handoff","client":"hilock".*"ping_rtt_p50_us":\([0-9.]*\).*/\1/p' "$hjson" | head -n 1)
    if [ -n "$files" ]; then
        if gnuplot -e "outfile='$P/handoff.png'; files='$files'; titles='$titles'; lts='$lts'; run='$(run_label "$henv" "$hrun")'${ping:+; ping=$ping}" \
            "$ROOT/bench/plot.gp"; then
            echo "== plot: $P/handoff.png ($hrun's latencies)"
        else
            warn "gnuplot failed on $P/handoff.png"; prc=1
        fi
    else
        warn "no handoff-*.dat in $D: no handoff.png"; prc=1
    fi

    # herd.png: a file per client and P.
    rm -f "$D"/herd-*.dat
    herd_in=""
    for f in "$D/results.jsonl" "$D/peers.jsonl"; do [ -s "$f" ] && herd_in="$herd_in $f"; done
    if [ -n "$herd_in" ]; then
        # shellcheck disable=SC2086 # the file list
        awk -v dir="$D" "$JV"'
            FNR == 1 { nfile++ }
            /"scenario":"herd"|"of":"herd"/ {
                c = jv($0, "client"); p = jv($0, "processes"); w = jv($0, "waiters")
                k = c "-p" p
                if (k in from && from[k] != nfile) next   # the first file that has it
                from[k] = nfile
                f = dir "/herd-" k ".dat"
                if (!(f in started)) {
                    started[f] = 1
                    print "# processes waiters_per_process waiters commands_per_handoff redis_calls_per_handoff, " c > f
                }
                print p, w, p * w, jv($0, "commands_per_handoff"), jv($0, "redis_calls_per_handoff") > f
            }' $herd_in
    fi
    files=""
    titles=""
    lts=""
    dts=""
    lt=0
    for c in hilock hilock-fair floor polling redis-semaphore redlock; do
        lt=$((lt + 1))
        for p in 2 4; do
            f=$D/herd-$c-p$p.dat
            [ -s "$f" ] || continue
            case $c in
            hilock) t="hilock (mutex)" ;;
            hilock-fair) t="hilock fair lock" ;;
            polling) t="polling (C)" ;;
            *) t=$c ;;
            esac
            files="$files $f"
            titles="$titles \"$t, P=$p\""
            lts="$lts $lt"
            dts="$dts $((p / 2))"
        done
    done
    if [ -n "$files" ]; then
        hr="make bench"
        [ -s "$D/herd-redis-semaphore-p2.dat" ] && hr="make bench and bench-peers"
        if gnuplot -e "outfile='$P/herd.png'; files='$files'; titles='$titles'; lts='$lts'; dts='$dts'; run='$(run_label "$D/results.env" "$hr")'" \
            "$ROOT/bench/herd.gp"; then
            echo "== plot: $P/herd.png"
        else
            warn "gnuplot failed on $P/herd.png"; prc=1
        fi
    else
        warn "no herd lines in $D/results.jsonl or peers.jsonl: no herd.png"; prc=1
    fi

    # waiters.png: every waiters line, one per size (the series' first).
    w_in=""
    for f in "$D/waiters-scale.jsonl" "$D/results.jsonl"; do [ -s "$f" ] && w_in="$w_in $f"; done
    rm -f "$D/waiters.dat"
    if [ -n "$w_in" ]; then
        # shellcheck disable=SC2086 # the file list
        awk "$JV"'
            /"scenario":"waiters"/ {
                print jv($0, "waiters"), jv($0, "names"), jv($0, "bytes_per_waiter"),
                    jv($0, "rss_bytes_per_waiter"), jv($0, "serve_seconds"), jv($0, "errors")
            }' $w_in | sort -n -k1,1 -u >"$D/waiters.dat.tmp"
        if [ -s "$D/waiters.dat.tmp" ]; then
            { echo "# waiters names heap_bytes_per_waiter rss_bytes_per_waiter serve_seconds errors"
              cat "$D/waiters.dat.tmp"; } >"$D/waiters.dat"
        fi
        rm -f "$D/waiters.dat.tmp"
    fi
    if [ -s "$D/waiters.dat" ]; then
        if gnuplot -e "outfile='$P/waiters.png'; datafile='$D/waiters.dat'; run='$(run_label "$D/results.env" "make bench")'" \
            "$ROOT/bench/waiters.gp"; then
            echo "== plot: $P/waiters.png"
        else
            warn "gnuplot failed on $P/waiters.png"; prc=1
        fi
    else
        warn "no waiters lines in $D: no waiters.png"; prc=1
    fi

    # fairness.png: a line per primitive.
    rm -f "$D/fairness.dat"
    procs=""
    if [ -s "$D/results.jsonl" ]; then
        procs=$(sed -n 's/.*"scenario":"fairness".*"procs":\([0-9]*\).*/\1/p' "$D/results.jsonl" | head -n 1)
        awk "$JV"'
            BEGIN { print "# prim share_1..share_P max_wait_ms_1..max_wait_ms_P grants_per_s" }
            /"scenario":"fairness"/ {
                s = jv($0, "share"); w = jv($0, "wait_max_ms")
                gsub(/,/, " ", s); gsub(/,/, " ", w); gsub(/null/, "NaN", w)
                print jv($0, "prim"), s, w, jv($0, "throughput")
            }' "$D/results.jsonl" >"$D/fairness.dat"
    fi
    if [ -n "$procs" ]; then
        if gnuplot -e "outfile='$P/fairness.png'; datafile='$D/fairness.dat'; procs=$procs; run='$(run_label "$D/results.env" "make bench")'" \
            "$ROOT/bench/fairness.gp"; then
            echo "== plot: $P/fairness.png"
        else
            warn "gnuplot failed on $P/fairness.png"; prc=1
        fi
    else
        rm -f "$D/fairness.dat"
        warn "no fairness lines in $D/results.jsonl: no fairness.png"; prc=1
    fi
    return $prc
}

if [ "$MODE" = plots ]; then
    OUT=${1:-build/bench}
    PLOTS=${2:-$ROOT/bench/plots}
    [ "$(env_get "$OUT/results.env" quick)" = 1 ] &&
        warn "$OUT/results.jsonl is of a BENCH_QUICK=1 run (a smoke test): run make bench without it before committing its plots"
    [ "$(env_get "$OUT/peers.env" quick)" = 1 ] &&
        warn "$OUT/peers.jsonl is of a BENCH_QUICK=1 run (a smoke test)"
    plots "$OUT" "$PLOTS"
    exit $?
fi

BENCH=${1:-build/hilock-bench}
OUT=${2:-build/bench}
if [ ! -x "$BENCH" ]; then
    echo "bench: $BENCH is not built (run: make bench)" >&2
    exit 1
fi

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
# SERVER_BIN, CLI_BIN, BENCHMARK_BIN: Redis's, or Valkey's (HILOCK_SERVER;
# scripts/deps.sh --valkey installs them, `make bench SERVER=valkey` first).
. "$ROOT/scripts/redis-throwaway.sh"
export REDIS_BENCHMARK="$BENCHMARK_BIN"
missing=""
have redis-server || missing="$missing redis-server"
{ have redis-benchmark && have redis-cli; } || missing="$missing redis-tools"
[ "$TLS" = 0 ] || have openssl || missing="$missing openssl"
# gnuplot: wanted, not needed (no plots, a warning, when it cannot be had).
if [ "$MODE" != tls ] && ! have gnuplot; then
    if [ -n "$missing" ]; then
        missing="$missing gnuplot-nox"
    elif have apt-get && { [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }; then
        missing=" gnuplot-nox"
    else
        warn "gnuplot is not installed and cannot be here: the run makes no plots"
    fi
fi
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
            # Without gnuplot, then: the plots are optional.
            needed=$(echo "$missing" | sed 's/ gnuplot-nox//')
            if [ "$needed" != "$missing" ] && { [ -z "$needed" ] ||
                $SUDO apt-get install -y --no-install-recommends $needed </dev/null; }; then
                warn "gnuplot-nox could not be installed: the run makes no plots"
            else
                echo "bench: apt-get install failed" >&2
                exit 1
            fi
        fi
    fi
fi
for tool in "$SERVER_BIN" "$CLI_BIN" "$BENCHMARK_BIN"; do
    have "$tool" || { echo "bench: $tool not found; install $SERVER_PKGS" >&2; exit 1; }
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
echo "== $SERVER_BIN $("$SERVER_BIN" --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on $URL (pid $PID)," \
    "$(nproc 2>/dev/null || echo '?') CPUs, $(uname -r)"
# The bench's options go in the positional parameters (BENCH and OUT are
# read): first the tls scenario's, the same server's TLS port and the CA.
set --
if [ "$TLS" = 1 ]; then
    echo "== TLS on rediss://127.0.0.1:$TLS_PORT (the same server; CA $TLS_DIR/ca.crt)"
    set -- -S "rediss://127.0.0.1:$TLS_PORT" -C "$TLS_DIR/ca.crt"
fi
# How this run was made, for the plots' subtitles (results.env, peers.env).
write_env() {
    {
        echo "quick=${BENCH_QUICK:-0}"
        echo "server=$("$SERVER_BIN" --version | sed -n 's/^\([A-Za-z]*\).*v=\([^ ]*\).*/\1 \2/p')"
        echo "cpus=$(nproc 2>/dev/null || echo '?')"
        echo "date=$(date -u +%Y-%m-%d)"
    } >"$1"
}

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
    rm -f "$OUT"/handoff-*.dat "$OUT"/waiters-scale.jsonl
    write_env "$OUT/results.env"
    RESULTS=$OUT/results.jsonl
    : >"$RESULTS"
    run "$BENCH" -u "$URL" "$@" $QUICK -o "$OUT" || FAILED=1
    # The memory plot's other sizes (100 waiters per name, as the waiters
    # scenario's 100,000 on 1,000; 10,000 on 100 with -q, which it ran).
    if [ -n "$QUICK" ]; then main_w=10000; else main_w=100000; fi
    scale_max=${BENCH_SCALE_MAX:-$main_w}
    for w in 1000 10000 100000 1000000; do
        [ "$w" -le "$scale_max" ] || break
        [ "$w" = "$main_w" ] && continue
        echo "== waiters for the memory plot: $w waiters on $((w / 100)) names" >&2
        RESULTS=$OUT/waiters-scale.jsonl
        run "$BENCH" -u "$URL" -s waiters -w "$w" -N $((w / 100)) || FAILED=1
    done
    RESULTS=$OUT/results.jsonl
else
    PEER_OUT=$OUT/peers
    mkdir -p "$PEER_OUT" || exit 1
    rm -f "$PEER_OUT"/handoff-*.dat
    write_env "$OUT/peers.env"
    RESULTS=$OUT/peers.jsonl
    : >"$RESULTS"
    if [ -n "$QUICK" ]; then
        HANDOFFS=60 HERD=2:16,4:16 ACQUIRES=200 RL_HANDOFFS=50 RL_REPS=2
    else
        HANDOFFS=300 HERD=2:16,2:128,4:16,4:128 ACQUIRES=1000 RL_HANDOFFS=300 RL_REPS=3
    fi
    # hilock and the polling baseline first, then the peers: one server, one run.
    run "$BENCH" -u "$URL" -o "$PEER_OUT" -s handoff,herd,polling -n $((HANDOFFS * 2)) $QUICK || FAILED=1
    for client in redis-semaphore redlock; do
        echo "== peers: $client (handoff, herd)" >&2
        run node "$PEERS/peers.js" --url "$URL" --client "$client" --handoffs "$HANDOFFS" \
            --herd "$HERD" --hold-us 1000 --lat-dir "$PEER_OUT" || FAILED=1
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

# ---- The plots: a warning, never a failure, when they cannot be made ----------------
plots "$OUT" "$OUT" || warn "some plots were not made (see above)"
exit $FAILED
