#!/bin/sh
# demo-cli.sh URL BUILD_DIR — the `hilock` command line, a distributed flock(1).
#
# 1. Four workers start at once and each runs a "critical section" that
#    writes "start N", sleeps, and writes "end N" (N = its fencing token).
#    Under the lock the sections cannot overlap.
# 2. While one worker holds the lock, `hilock -w 0` (try once) gives up at
#    once with exit status 75.
set -eu

if [ $# -ne 2 ]; then
    echo "usage: $0 REDIS_URL BUILD_DIR" >&2
    exit 64
fi
url=$1
hilock=$2/hilock
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export LOG="$work/log"

echo "== 4 workers run the same critical section under the lock 'demo' =="
pids=
for i in 1 2 3 4; do
    "$hilock" -u "$url" demo -- sh -c '
        echo "start $HILOCK_FENCE" >> "$LOG"
        sleep 0.2
        echo "end   $HILOCK_FENCE" >> "$LOG"' &
    pids="$pids $!"
done
for pid in $pids; do
    wait "$pid" || { echo "FAIL: a worker exited with $?"; exit 1; }
done
sed 's/^/    /' "$LOG"

# Each "start N" must be followed by its own "end N" before the next start,
# and N must grow: that is mutual exclusion plus increasing fencing tokens.
if awk '
    $1 == "start" { if (open || $2 <= last) bad = 1; open = 1; last = $2 }
    $1 == "end"   { if (!open || $2 != last) bad = 1; open = 0; n++ }
    END           { exit bad || n != 4 || open }' "$LOG"; then
    echo "OK: the sections never overlapped, and each holder got a larger fencing token."
else
    echo "FAIL: the sections overlapped"
    exit 1
fi

echo
echo "== try once (-w 0) while another process holds 'demo' =="
"$hilock" -u "$url" demo -- sh -c 'touch "$0"; sleep 1' "$work/held" &
holder=$!
while [ ! -e "$work/held" ] && kill -0 "$holder" 2>/dev/null; do sleep 0.05; done
status=0
"$hilock" -u "$url" -w 0 demo -- echo "this never runs" || status=$?
wait "$holder"
if [ "$status" -eq 75 ]; then
    echo "OK: hilock -w 0 exited with 75 (lock busy) without running its command."
else
    echo "FAIL: hilock -w 0 exited with $status, want 75"
    exit 1
fi
