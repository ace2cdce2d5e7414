#!/bin/sh
# Run the test binary BUILD_DIR/hilock-tests (one Criterion runner holding
# every suite) and summarise it.
#
#   sh scripts/run-tests.sh BUILD_DIR [criterion args...]
#   e.g. sh scripts/run-tests.sh build --filter 'keys/*'
#
# Prints Criterion's own output, then its synthesis line again, then a last
# line "tests: N passed, M failed"; exits non-zero on any failure, a crash, a
# sanitizer report, or a runner that did not finish.
#
# Environment:
#   HILOCK_TEST_JOBS     parallel test processes (default: CPU count, max 4)
#   HILOCK_TEST_TIMEOUT  seconds for the whole run (default 900; CI runs the
#                        suite three times within its 90 minutes)
#   HILOCK_SERVER        redis (default) or valkey: whose server and CLI the
#                        suites start (`make test SERVER=valkey`)
#
# Criterion 2.4's --timeout only shortens tests that declare their own
# .timeout (and never applies to the others), so this script does not pass
# one: slow tests declare .timeout themselves, and the whole run is bounded.
set -u

if [ $# -lt 1 ]; then
    echo "usage: sh scripts/run-tests.sh BUILD_DIR [criterion args...]" >&2
    exit 2
fi
build=$1
shift
bin=$build/hilock-tests
if [ ! -x "$bin" ]; then
    echo "run-tests: $bin not found; build it first (make $bin)" >&2
    echo "tests: 0 passed, 1 failed"
    exit 2
fi

# Parallelism: tests use real redis-servers and real time. One job per core
# keeps them from starving each other's timers; capped so a big machine does
# not run dozens of servers at once.
jobs=${HILOCK_TEST_JOBS:-}
if [ -z "$jobs" ]; then
    jobs=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
    [ "$jobs" -gt 4 ] 2>/dev/null && jobs=4
    [ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
fi
# --quiet would hide the synthesis this script reads: drop it.
for a in "$@"; do
    shift
    case $a in
        -q|--quiet) echo "run-tests: ignoring $a (the summary is needed)" >&2 ;;
        *) set -- "$@" "$a" ;;
    esac
done
jobs_arg="--jobs $jobs"
verbose_arg="--verbose"
for a in "$@"; do
    case $a in
        -j*|--jobs|--jobs=*) jobs_arg="" ;;
        --verbose|--verbose=*) verbose_arg="" ;;
    esac
done
limit=${HILOCK_TEST_TIMEOUT:-900}

# Tag the servers of this run (the harness puts it into their temp dirs), so
# that leftovers can be found without touching anyone else's servers.
HILOCK_TEST_RUN_ID="rt$$x$(date +%s)"
export HILOCK_TEST_RUN_ID

# Sanitizer builds: a leak found at a test process's exit is only printed by
# LeakSanitizer, and Criterion still counts the test as passed; abort_on_error
# makes Criterion at least name the test ("crashed during its setup or
# teardown"), and the report is counted below either way.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hilock-run.XXXXXX") || exit 2
log=$tmp/log
rcfile=$tmp/rc

cleanup_servers() {
    for d in /proc/[0-9]*; do
        cwd=$(readlink "$d/cwd" 2>/dev/null) || continue
        case $cwd in
            */hilock-test-"$HILOCK_TEST_RUN_ID"-*) ;;
            *) continue ;;
        esac
        comm=$(cat "$d/comm" 2>/dev/null) || continue
        case $comm in
            redis-server*|redis-sentinel*|valkey-server*|valkey-sentinel*|nginx*)
                echo "run-tests: killing leftover server ${d#/proc/} ($cwd)"
                kill -9 "${d#/proc/}" 2>/dev/null ;;
        esac
    done
    for t in "${TMPDIR:-/tmp}" /tmp; do
        for dir in "$t"/hilock-test-"$HILOCK_TEST_RUN_ID"-*; do
            [ -d "$dir" ] && rm -rf "$dir"
        done
    done
}
on_exit() {
    cleanup_servers
    rm -rf "$tmp"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if command -v timeout >/dev/null 2>&1; then
    runner="timeout -k 15 $limit"
else
    runner=""
fi

# The server's programs, by name (the harness starts them from PATH).
case ${HILOCK_SERVER:-redis} in
redis|valkey) ;;
*) echo "run-tests: HILOCK_SERVER=$HILOCK_SERVER: redis or valkey" >&2; echo "tests: 0 passed, 1 failed"; exit 2 ;;
esac
. "$(dirname "$0")/server.sh"
server=${HILOCK_REDIS_SERVER:-$SERVER_BIN}
for p in "$server" "$CLI_BIN"; do
    if ! command -v "$p" >/dev/null 2>&1; then
        echo "run-tests: $p not found; install $SERVER_PKGS" >&2
        echo "tests: 0 passed, 1 failed"
        exit 2
    fi
done
echo "run-tests: against $("$server" --version 2>/dev/null | head -n 1)"
echo "run-tests: $bin $jobs_arg $verbose_arg $* (time limit ${limit}s)"
# shellcheck disable=SC2086 # $runner, $jobs_arg and $verbose_arg split on purpose
{ $runner "$bin" $jobs_arg $verbose_arg "$@" </dev/null 2>&1; echo $? >"$rcfile"; } | tee "$log"
rc=$(cat "$rcfile" 2>/dev/null || echo 1)

cleanup_servers

esc=$(printf '\033')
plain() { sed "s/$esc\[[0-9;]*m//g" "$log"; }
synth=$(plain | grep 'Synthesis: Tested:' | tail -n 1)
num() { echo "$synth" | sed -n "s/.*$1: *\([0-9][0-9]*\).*/\1/p"; }

echo
if [ -n "$synth" ]; then
    tested=$(num Tested)
    passed=$(num Passing)
    failed=$(num Failing)
    crashed=$(num Crashing)
    echo "run-tests: ${synth#*\] }"
    : "${tested:=0}" "${passed:=0}" "${failed:=0}" "${crashed:=0}"
else
    # No synthesis: the runner crashed, hung or was killed. Count what the
    # verbose log shows, and the run itself as a failure.
    passed=$(plain | grep -c '^\[PASS\]')
    failed=$(plain | grep -c '^\[FAIL\]')
    failed=$((failed + 1))
    case $rc in
        124|137) why="was killed after ${limit}s (HILOCK_TEST_TIMEOUT)" ;;
        *) why="exited with status $rc" ;;
    esac
    echo "run-tests: no Criterion synthesis: the runner $why" >&2
    echo "run-tests: unfinished tests:" >&2
    plain | sed -n 's/^\[RUN \] //p' | sort >"$tmp/run"
    plain | sed -n 's/^\[[A-Z][A-Z]*\] \([^ :]*::[^ :]*\):.*/\1/p' | sort -u >"$tmp/done"
    comm -23 "$tmp/run" "$tmp/done" | sed 's/^/    /' >&2
fi

# Tests that crashed after reporting success (a LeakSanitizer report at the
# test process's exit, a crash in .fini): Criterion warns "crashed during its
# setup or teardown" yet counts them as passed. (A crash in .init is already
# counted as failed, and has no [PASS] line.)
plain | sed -n 's/^\[PASS\] \([^ :]*::[^ :]*\):.*/\1/p' | sort -u >"$tmp/passed"
plain | sed -n 's/.*The test `\([^`]*\)` crashed during its setup or teardown.*/\1/p' |
    sort -u >"$tmp/warned"
late=$(comm -12 "$tmp/passed" "$tmp/warned")
nlate=0
if [ -n "$late" ]; then
    nlate=$(echo "$late" | wc -l)
    echo "run-tests: passed, then crashed at exit or in teardown (counted as failed):" >&2
    echo "$late" | sed 's/^/    /' >&2
fi
# Any sanitizer report fails the run, even one nobody could attribute.
nsan=$(plain | grep -c -E '==[0-9]+==ERROR: (Address|Leak|Memory|Thread|UndefinedBehavior)Sanitizer|: runtime error: ')
if [ "$nsan" -gt 0 ]; then
    echo "run-tests: $nsan sanitizer report(s) in the output" >&2
    [ "$nlate" -eq 0 ] && [ "$failed" -eq 0 ] && nlate=1
fi
if [ "$nlate" -gt 0 ]; then
    passed=$((passed - nlate))
    [ "$passed" -lt 0 ] && passed=0
    failed=$((failed + nlate))
fi

# Name the failures last, with their assertion lines, so that the tail of a
# long log (all a CI report may keep) says what failed.
plain | sed -n 's/^\[FAIL\] \([^ :]*::[^ :]*\):.*/\1/p' | sort -u >"$tmp/failed"
if [ -s "$tmp/failed" ]; then
    echo "run-tests: failed:" >&2
    sed 's/^/    /' "$tmp/failed" >&2
    echo "run-tests: assertions that failed:" >&2
    plain | grep -A 2 -F 'Assertion Failed' | head -n 40 | sed 's/^/    /' >&2
fi

status=0
if [ "$failed" -gt 0 ]; then
    status=1
elif [ "$rc" -ne 0 ]; then
    echo "run-tests: the runner exited with status $rc" >&2
    failed=1
    status=1
elif [ -n "$synth" ] && [ "${tested:-0}" -eq 0 ]; then
    echo "run-tests: no test ran" >&2
    [ $# -eq 0 ] && status=1
fi
echo "tests: $passed passed, $failed failed"
exit $status
