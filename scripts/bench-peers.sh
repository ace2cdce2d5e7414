#!/bin/sh
# bench-peers.sh BENCH_BINARY [OUT_DIR] — hilock, the polling baseline and
# npm's redis-semaphore and redlock side by side (see scripts/bench.sh).
exec sh "$(dirname "$0")/bench.sh" --peers "$@"
