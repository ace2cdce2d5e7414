#!/bin/sh
# bench-ab.sh BASE [HEAD] — two commits' hilock-bench in one run, on one
# throwaway redis-server, alternated, so that the machine's drift hits both
# alike: "before and after" of a change, measured the same way.
#
#   sh scripts/bench-ab.sh 1a90c47          # 1a90c47 against the work tree
#   sh scripts/bench-ab.sh v1 v2            # two commits
#   AB_REPS=7 AB_SCENARIOS=handoff,throughput sh scripts/bench-ab.sh BASE
#
# Each side is built from `git worktree add --detach` in a temporary
# directory (HEAD "." means the work tree as it is, built in build/ab).
# Prints each repetition's figures (handoff p50; throughput and the
# client's CPU time per lock), then the
# medians of the two sides and their ratio (HEAD / BASE). The server and the
# worktrees are always removed.
set -u
BASE=${1:?usage: bench-ab.sh BASE [HEAD]}
HEAD=${2:-.}
REPS=${AB_REPS:-5}
SCEN=${AB_SCENARIOS:-handoff,throughput}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=scripts/redis-throwaway.sh
. "$HERE/redis-throwaway.sh"
throwaway_setup hilock-ab
WT=""
ab_cleanup() {
    for w in $WT; do git -C "$ROOT" worktree remove --force "$w" >/dev/null 2>&1; done
    throwaway_cleanup
}
trap ab_cleanup EXIT

# build SIDE REF: $TMP/SIDE.bench, the bench program of REF.
build() {
    if [ "$2" = . ]; then
        make -C "$ROOT" -s BUILD=build/ab build/ab/hilock-bench >/dev/null || return 1
        cp "$ROOT/build/ab/hilock-bench" "$TMP/$1.bench"
        return
    fi
    git -C "$ROOT" worktree add --detach "$TMP/src-$1" "$2" >/dev/null 2>&1 || return 1
    WT="$WT $TMP/src-$1"
    make -C "$TMP/src-$1" -s build/hilock-bench >/dev/null || return 1
    cp "$TMP/src-$1/build/hilock-bench" "$TMP/$1.bench"
}
echo "bench-ab: building $BASE and $HEAD"
build base "$BASE" || { echo "bench-ab: cannot build $BASE" >&2; exit 1; }
build head "$HEAD" || { echo "bench-ab: cannot build $HEAD" >&2; exit 1; }
start_redis 45000 || exit 1

# The figures of a run: handoff p50 (us); throughput (locks/s) and the
# client's CPU time per lock (us), where counting would show first.
figures() {
    out=$(cat)
    printf '%s\n' "$out" | sed -n 's/.*"scenario":"handoff","client":"hilock","p50_us":\([0-9.]*\).*/handoff_p50_us \1/p'
    printf '%s\n' "$out" | sed -n 's/.*"scenario":"throughput","client":"hilock","locks_per_s":\([0-9.]*\).*/throughput_locks_per_s \1/p'
    printf '%s\n' "$out" | sed -n 's/.*"scenario":"throughput","client":"hilock".*"client_cpu_us_per_lock":\([0-9.]*\).*/client_cpu_us_per_lock \1/p'
}
: > "$TMP/base.txt"
: > "$TMP/head.txt"
i=1
while [ "$i" -le "$REPS" ]; do
    for side in base head; do
        "$TMP/$side.bench" -u "redis://127.0.0.1:$PORT" -s "$SCEN" 2>/dev/null | figures > "$TMP/run.txt"
        sed "s/^/$side $i /" "$TMP/run.txt"
        cat "$TMP/run.txt" >> "$TMP/$side.txt"
    done
    i=$((i + 1))
done
awk -v base="$BASE" -v head="$HEAD" '
function median(arr, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && arr[j - 1] > arr[j]; j--) { t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t }
    return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
FILENAME ~ /base.txt$/ { b[$1, ++nb[$1]] = $2; names[$1] = 1 }
FILENAME ~ /head.txt$/ { h[$1, ++nh[$1]] = $2 }
END {
    for (s in names) {
        for (i = 1; i <= nb[s]; i++) x[i] = b[s, i]
        mb = median(x, nb[s])
        for (i = 1; i <= nh[s]; i++) y[i] = h[s, i]
        mh = median(y, nh[s])
        printf "%s: %s median %.2f, %s median %.2f: %.3fx (%d runs each)\n", s, base, mb, head, mh, mb ? mh / mb : 0, nb[s]
    }
}' "$TMP/base.txt" "$TMP/head.txt"
