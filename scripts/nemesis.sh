#!/bin/sh
# Run hilock-nemesis (make nemesis): network faults in network namespaces,
# so root only. Without root, or where namespaces cannot be made (a
# container without CAP_SYS_ADMIN), it says so and exits 0.
#
#   sh scripts/nemesis.sh [BUILD_DIR] [short|full]
#
# Environment: NEMESIS_CASES (only the cases whose id contains it; several
# separated by spaces), NEMESIS_REPEAT (run each cell that many times: it
# fails if any run breaks a promise; the worst figures are reported),
# NEMESIS_ARGS (more options for the program, see tests/nemesis/main.c).
set -u
build=${1:-build}
matrix=${2:-full}
bin=$build/hilock-nemesis

skip() {
    echo "nemesis: skipped: needs root and network namespaces ($1)"
    exit 0
}

[ "$(id -u)" = 0 ] || skip "not root"
sh scripts/deps.sh --nemesis >/dev/null || sh scripts/deps.sh --nemesis || exit 1
PATH=$PATH:/usr/sbin:/sbin
command -v ip >/dev/null 2>&1 || skip "no ip (iproute2)"
probe="hlnprobe$$"
ip netns add "$probe" 2>/dev/null || skip "ip netns add failed"
ip netns del "$probe" 2>/dev/null
[ -x "$bin" ] || { echo "nemesis: $bin is not built (make nemesis)" >&2; exit 2; }

set -- -m "$matrix" -o "$build/nemesis/results.json"
for c in ${NEMESIS_CASES:-}; do set -- "$@" -c "$c"; done
[ -n "${NEMESIS_REPEAT:-}" ] && set -- "$@" -r "$NEMESIS_REPEAT"
mkdir -p "$build/nemesis"
# shellcheck disable=SC2086 # NEMESIS_ARGS is split into options on purpose
exec "$bin" "$@" ${NEMESIS_ARGS:-}
