#!/bin/sh
# demo.sh BUILD_DIR — run the hilock demos against a throwaway redis-server.
#
# `make demo` calls this after building. It starts a private redis-server on a
# free loopback port (no persistence, data in a temporary directory), runs
#   1. examples/libevent_basic   acquire, work 100 ms, release, close
#   2. scripts/demo-cli.sh       the command-line tool (if that script exists)
#   3. examples/many_waiters     5000 waiters on 4 names, checked invariants
#   4. examples/metrics          20 waiters, then the client's statistics as
#                                Prometheus text (a few lines of it shown)
#   5. examples/transfers        300 transfers between 5 accounts, each
#                                holding both accounts' locks (a multi-lock)
#   6. examples/leader           an election among 3 candidates, 6 terms,
#                                and an observer that sees every change
# and always stops the server and removes its directory, however it ends.
# Exits non-zero if the server cannot be started or any part fails.
#
# DEMO_WRAP runs the examples under a wrapper, e.g. valgrind (`make valgrind`);
# DEMO_WAITERS sets the many_waiters count (default 5000).
set -u

BUILD=${1:-build}
WRAP=${DEMO_WRAP:-}
WAITERS=${DEMO_WAITERS:-5000}
HERE=$(cd "$(dirname "$0")" && pwd)
BASIC=$BUILD/examples/libevent_basic
MANY=$BUILD/examples/many_waiters
METRICS=$BUILD/examples/metrics
TRANSFERS=$BUILD/examples/transfers
LEADER=$BUILD/examples/leader

for bin in "$BASIC" "$MANY" "$METRICS" "$TRANSFERS" "$LEADER"; do
    if [ ! -x "$bin" ]; then
        echo "demo: $bin is not built (run: make demo)" >&2
        exit 1
    fi
done
for tool in redis-server redis-cli; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "demo: $tool not found (run: sh scripts/deps.sh)" >&2
        exit 1
    fi
done

# Bound every step that talks to a program, so a hang cannot stall `make`.
# (A command prefix, not a function: a backgrounded function would be a
# subshell, and killing it would not reach the program.)
if command -v timeout >/dev/null 2>&1; then
    T300="timeout 300"
else
    T300=
fi

. "$HERE/redis-throwaway.sh"
throwaway_setup hilock-demo  # TMP, PID, CHILD, and the traps that stop them

start_redis 20000 || exit 1
URL=redis://127.0.0.1:$PORT
echo "== redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on $URL (pid $PID)"

FAILED=
# part LABEL CMD...: run one part, remember a failure. The part runs in the
# background and we `wait` for it, so that INT/TERM reach our traps at once.
part() {
    label=$1
    shift
    $T300 "$@" </dev/null &
    CHILD=$!
    wait "$CHILD"
    rc=$?
    CHILD=
    if [ "$rc" -eq 0 ]; then
        echo "-- $label: ok"
    else
        echo "-- $label: FAILED (exit $rc)" >&2
        FAILED="$FAILED $label"
    fi
}

echo
echo "== 1/6 libevent_basic: acquire with a 5 s wait, work 100 ms, release, close"
part libevent_basic $WRAP "$BASIC" "$URL" demo

echo
echo "== 2/6 hilock command-line tool"
if [ -f "$HERE/demo-cli.sh" ]; then
    part cli sh "$HERE/demo-cli.sh" "$URL" "$BUILD"
else
    echo "-- cli: skipped (scripts/demo-cli.sh not present)"
fi

echo
echo "== 3/6 many_waiters: $WAITERS waiters on 4 names in one event loop"
part many_waiters $WRAP "$MANY" "$URL" "$WAITERS" 4 0

echo
echo "== 4/6 metrics: 20 waiters on one name, then the statistics (Prometheus text)"
part metrics sh -c '$0 "$@" > "'"$TMP"'/metrics.txt"' $WRAP "$METRICS" "$URL" demo-metrics 20
grep -E '^hilock_(acquires_total|wait_seconds_(count|sum)|handoff_seconds_count|hold_seconds_count|tries_total|node_up)' \
    "$TMP/metrics.txt" 2>/dev/null | sed 's/^/   /'

echo
echo "== 5/6 transfers: 300 transfers between 5 accounts from 3 clients, both accounts locked at once"
part transfers $WRAP "$TRANSFERS" "$URL" 5 300 3

echo
echo "== 6/6 leader: an election among 3 candidates, 6 terms of 50 ms, and an observer"
part leader $WRAP "$LEADER" "$URL" 3 6

echo
if [ -n "$FAILED" ]; then
    echo "demo: FAILED:$FAILED" >&2
    exit 1
fi
echo "demo: all parts passed"
