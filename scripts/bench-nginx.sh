#!/bin/sh
# bench-nginx.sh BUILD [OUT_DIR] — benchmarks of ngx_http_hilock_module
# (`make bench-nginx`, and the nginx part of `make bench`; see BENCHMARKS.md).
#
# A throwaway redis-server and a throwaway nginx (Debian's, with
# BUILD/nginx/ngx_http_hilock_module.so loaded), both on free loopback
# ports. One server, three locations serving the same 3-byte static file:
#
#   /plain/x  no lock: the baseline of every figure
#   /many/x   hilock k:$request_id   (a fresh key per request: uncontended)
#   /hot/x    hilock hot wait=30s    (one key for every request)
#
# with 1 and then 2 worker processes, each scenario REPS times, lock and
# baseline alternated back to back within each repetition:
#
#   latency    ab -k -c 1: per-request p50 and mean, /plain vs /many; beside
#              it, one Redis round trip (redis-benchmark -t ping_mbulk -c 1)
#   many keys  ab -k -c 50: requests/s, /plain vs /many
#   hot key    ab -k -c 50: requests/s, /plain vs /hot (one lock handoff
#              per request)
#
# then two nginx (1 worker each, the same redis-server, the same lock names)
# driven at once by one ab each with the same load (ab -k -c 20, the same
# count), on two hot keys (hot:a, hot:b: a connection's key by its number),
# to see whether one nginx starves the other:
#
#   two_mutex           hilock $key wait=60s        (starve= the default)
#   two_mutex_nostarve  the same, hilock_redis ... starve=off (the race)
#   two_fair            hilock $key wait=60s fair   (strict arrival order)
#
# each instance's lock wait ($hilock_wait_ms, from its access log) p50, p99
# and max side by side, with its requests/s and time taken; and once, on the
# same server, the library's own handoff (BUILD/hilock-bench -s handoff)
# when it is built. Medians of the repetitions go to
# OUT_DIR/nginx.jsonl (one JSON object per line, the runs beside them) and a
# table to stdout. Every request must answer 200 (ab's "Failed requests" and
# "Non-2xx responses"), and nginx's error log must hold no warning or worse:
# otherwise the exit status is 1. nginx and redis-server are always stopped
# by their pids (nginx with QUIT, then TERM after 10 s).
#
# BENCH_QUICK=1: one repetition of small counts, no library handoff (a few
# seconds). OUT_DIR defaults to BUILD/bench.
set -u

BUILD=${1:-build}
OUT=${2:-$BUILD/bench}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
MODULE=$BUILD/nginx/ngx_http_hilock_module.so
BENCH=$BUILD/hilock-bench

have() { command -v "$1" >/dev/null 2>&1; }
NGINX=$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)

if [ ! -f "$MODULE" ]; then
    echo "bench-nginx: $MODULE is not built (run: make nginx-module BUILD=$BUILD)" >&2
    exit 1
fi
for tool in "$NGINX" ab redis-server redis-cli redis-benchmark; do
    have "$tool" || {
        echo "bench-nginx: $tool not found (sh scripts/deps.sh --nginx; redis-tools)" >&2
        exit 1
    }
done
if have timeout; then T="timeout"; else T=; fi

if [ "${BENCH_QUICK:-0}" = 1 ]; then
    REPS=1 N_LAT=300 N_MANY=1000 N_HOT=500 N_PING=2000 N_TWO=1000
else
    REPS=5 N_LAT=5000 N_MANY=20000 N_HOT=10000 N_PING=10000 N_TWO=30000
fi
C_TWO=20
CONC=50
WORKERS="1 2"

mkdir -p "$OUT" || exit 1
. "$ROOT/scripts/redis-throwaway.sh"
throwaway_setup hilock-bench-nginx  # TMP, PID, CHILD, the traps

NGX_PID=    # the nginx master
NGX_DIR=$TMP/nginx
CONF_KIND=one   # write_conf: one (the scenarios above) or two (two nginx)
TWO_PIDS=   # the two nginx masters of a two-instance case
TWO_AB=     # their two ab
NPORT=
QUIT_MS=0
stop_nginx() {
    [ -n "$NGX_PID" ] || return 0
    kill -QUIT "$NGX_PID" 2>/dev/null
    waited=0
    while kill -0 "$NGX_PID" 2>/dev/null; do
        if [ "$waited" -eq 100 ]; then
            echo "bench-nginx: nginx (pid $NGX_PID) still running 10 s after QUIT: TERM" >&2
            kill -TERM "$NGX_PID" 2>/dev/null
            FAILED=1
        elif [ "$waited" -eq 200 ]; then
            kill -KILL "$NGX_PID" 2>/dev/null
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    wait "$NGX_PID" 2>/dev/null
    NGX_PID=
    QUIT_MS=$((waited * 100))
}
# shellcheck disable=SC2317 # the EXIT trap
cleanup() {
    if [ -n "$CHILD" ]; then
        kill "$CHILD" 2>/dev/null
        wait "$CHILD" 2>/dev/null
        CHILD=
    fi
    stop_nginx
    for p in $TWO_AB; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    TWO_AB=
    for p in $TWO_PIDS; do NGX_PID=$p; stop_nginx; done
    TWO_PIDS=
    throwaway_cleanup
}
trap cleanup EXIT

FAILED=0
RESULTS=$OUT/nginx.jsonl
: >"$RESULTS" || exit 1

start_redis 40000 || exit 1
URL=redis://127.0.0.1:$PORT

# ---- nginx ------------------------------------------------------------------
mkdir -p "$NGX_DIR/www/plain" "$NGX_DIR/www/many" "$NGX_DIR/www/hot" "$NGX_DIR/tmp" || exit 1
for d in plain many hot; do printf 'ok\n' >"$NGX_DIR/www/$d/x"; done
TOKEN="hilock-bench-nginx-$$-$(date +%s)"
USER_LINE=
[ "$(id -u)" = 0 ] && USER_LINE="user root;"  # workers read $TMP (mode 700)

# write_conf WORKERS PORT
write_conf() {
    if [ "$CONF_KIND" = two ]; then
        write_two_conf "$@"
        return
    fi
    cat >"$NGX_DIR/nginx.conf" <<EOF
load_module $MODULE;
$USER_LINE
worker_processes $1;
pid $NGX_DIR/nginx.pid;
error_log $NGX_DIR/error.log notice;
events { worker_connections 1024; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $NGX_DIR/tmp/body;
    proxy_temp_path $NGX_DIR/tmp/proxy;
    fastcgi_temp_path $NGX_DIR/tmp/fastcgi;
    uwsgi_temp_path $NGX_DIR/tmp/uwsgi;
    scgi_temp_path $NGX_DIR/tmp/scgi;
    hilock_redis $URL;
    server {
        listen 127.0.0.1:$2;
        root $NGX_DIR/www;
        location = /id { return 200 "$TOKEN\n"; }
        location /plain/ { }
        location /many/ { hilock k:\$request_id; }
        location /hot/ { hilock hot wait=30s; }
    }
}
EOF
}

# write_two_conf WORKERS PORT: an nginx of a two-instance case, its
# hilock_redis with $TWO_REDIS_PARAMS. Each request's wait goes to
# waits.log ("$arg_run $hilock_status $hilock_wait_ms"; the warm-up's
# run=warm is left out of the figures). A keepalive connection keeps one of
# the two hot keys, by its number.
write_two_conf() {
    cat >"$NGX_DIR/nginx.conf" <<EOF
load_module $MODULE;
$USER_LINE
worker_processes $1;
pid $NGX_DIR/nginx.pid;
error_log $NGX_DIR/error.log notice;
events { worker_connections 1024; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $NGX_DIR/tmp/body;
    proxy_temp_path $NGX_DIR/tmp/proxy;
    fastcgi_temp_path $NGX_DIR/tmp/fastcgi;
    uwsgi_temp_path $NGX_DIR/tmp/uwsgi;
    scgi_temp_path $NGX_DIR/tmp/scgi;
    hilock_redis $URL$TWO_REDIS_PARAMS;
    log_format waits '\$arg_run \$hilock_status \$hilock_wait_ms';
    map \$connection \$hot_key { ~[02468]\$ hot:a; default hot:b; }
    server {
        listen 127.0.0.1:$2;
        root $NGX_DIR/www;
        location = /id { return 200 "$TOKEN\n"; }
        # start_nginx of the second instance probes the first one's port.
        location = / { return 404; }
        location /mutex/ { hilock \$hot_key wait=60s; access_log $NGX_DIR/waits.log waits; }
        location /fair/ { hilock \$hot_key wait=60s fair; access_log $NGX_DIR/waits.log waits; }
    }
}
EOF
}

# 0 if our nginx answers on port $1.
nginx_is_ours() {
    $T5 ab -v 4 -n 1 "http://127.0.0.1:$1/id" 2>/dev/null | grep -q "$TOKEN"
}

# start_nginx WORKERS: on the first free port from a per-process start point
# in 20000..39999 (a port where something answers is skipped; a bind that
# loses a race makes nginx exit, and the next port is tried).
start_nginx() {
    port=$((20000 + $$ % 20000))
    tries=0
    while [ "$tries" -lt 30 ]; do
        tries=$((tries + 1))
        port=$((port + 1))
        [ "$port" -gt 39999 ] && port=20000
        $T5 ab -n 1 "http://127.0.0.1:$port/" >/dev/null 2>&1 && continue
        write_conf "$1" "$port"
        "$NGINX" -p "$NGX_DIR" -c "$NGX_DIR/nginx.conf" -e "$NGX_DIR/error.log" \
            -g 'daemon off;' </dev/null &
        NGX_PID=$!
        waited=0
        while [ "$waited" -lt 100 ]; do
            if ! kill -0 "$NGX_PID" 2>/dev/null; then
                wait "$NGX_PID" 2>/dev/null
                NGX_PID=
                break
            fi
            if nginx_is_ours "$port"; then
                NPORT=$port
                return 0
            fi
            sleep 0.1
            waited=$((waited + 1))
        done
        stop_nginx
    done
    echo "bench-nginx: could not start nginx; its log:" >&2
    tail -n 10 "$NGX_DIR/error.log" >&2 2>/dev/null
    return 1
}

# ---- Measuring --------------------------------------------------------------
VALS=$TMP/vals
mkdir -p "$VALS"
# put KEY VALUE: one more run of KEY.
put() { printf '%s\n' "$2" >>"$VALS/$1"; }
# median KEY (empty when KEY has no runs)
median() {
    [ -s "$VALS/$1" ] || return 0
    sort -n "$VALS/$1" | awk '{ v[NR] = $1 } END {
        if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.6g\n", m }'
}
# runs KEY: the runs as a JSON array
runs() { printf '[%s]' "$(paste -sd, "$VALS/$1" 2>/dev/null)"; }
# num X: X, or null
num() { if [ -n "$1" ]; then printf '%s' "$1"; else printf 'null'; fi; }

# EVALSHA and EVAL calls the server has counted so far.
scripts_count() {
    $T5 redis-cli -p "$PORT" info commandstats 2>/dev/null | tr -d '\r' |
        sed -n -e 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p' \
            -e 's/^cmdstat_eval:calls=\([0-9]*\),.*/\1/p' |
        awk '{ s += $1 } END { print s + 0 }'
}

LOCKS_LEFT=0
BAD=$TMP/bad_runs
: >"$BAD"
# ab_run KEY N C PATH: ab -k; the figures of the run in $VALS (KEY_rps,
# KEY_p50_ms, KEY_mean_ms, KEY_scripts_per_req). 1 if a request failed.
ab_run() {
    key=$1 n=$2 c=$3 path=$4
    out=$TMP/ab.out
    csv=$TMP/ab.csv
    before=$(scripts_count)
    ${T:+$T 300} ab -k -q -c "$c" -n "$n" -e "$csv" "http://127.0.0.1:$NPORT$path" \
        </dev/null >"$out" 2>&1 &
    CHILD=$!
    wait "$CHILD"
    rc=$?
    CHILD=
    sleep 0.05  # the last release
    after=$(scripts_count)
    complete=$(sed -n 's/^Complete requests: *\([0-9]*\).*/\1/p' "$out")
    failed=$(sed -n 's/^Failed requests: *\([0-9]*\).*/\1/p' "$out")
    non2xx=$(sed -n 's/^Non-2xx responses: *\([0-9]*\).*/\1/p' "$out")
    if [ "$rc" != 0 ] || [ "${complete:-0}" != "$n" ] || [ "${failed:-1}" != 0 ] || [ -n "$non2xx" ]; then
        echo "bench-nginx: $path, $n requests at -c $c: ab exit $rc, complete ${complete:-?}," \
            "failed ${failed:-?}, non-2xx ${non2xx:-0}" >&2
        tail -n 25 "$out" >&2
        echo "$key $path rc=$rc complete=${complete:-?} failed=${failed:-?} non2xx=${non2xx:-0}" >>"$BAD"
        FAILED=1
        return 1
    fi
    put "${key}_rps" "$(sed -n 's/^Requests per second: *\([0-9.]*\).*/\1/p' "$out")"
    put "${key}_mean_ms" "$(sed -n 's/^Time per request: *\([0-9.]*\) \[ms\] (mean)$/\1/p' "$out")"
    put "${key}_p50_ms" "$(sed -n 's/^50,//p' "$csv")"
    put "${key}_scripts_per_req" "$(awk -v a="$after" -v b="$before" -v n="$n" 'BEGIN { printf "%.3f", (a - b) / n }')"
    return 0
}

# One Redis round trip: redis-benchmark, one client, PING (bulk reply).
ping_run() {
    line=$(${T:+$T 120} redis-benchmark -h 127.0.0.1 -p "$PORT" -t ping_mbulk -c 1 \
        -n "$N_PING" --csv </dev/null 2>/dev/null | tr -d '"' | grep '^PING_MBULK,')
    [ -n "$line" ] || { echo "bench-nginx: redis-benchmark failed" >&2; FAILED=1; return 1; }
    put "ping_$1_p50_us" "$(echo "$line" | awk -F, '{ printf "%.1f", $5 * 1000 }')"
    put "ping_$1_avg_us" "$(echo "$line" | awk -F, '{ printf "%.1f", $3 * 1000 }')"
}

# per-rep derived figures: diff KEY A B (A - B, ms -> us), ratio KEY A B
diff_us() {
    a=$(tail -n 1 "$VALS/$2" 2>/dev/null) b=$(tail -n 1 "$VALS/$3" 2>/dev/null)
    [ -n "$a" ] && [ -n "$b" ] && put "$1" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1f", (a - b) * 1000 }')"
}
ratio() {
    a=$(tail -n 1 "$VALS/$2" 2>/dev/null) b=$(tail -n 1 "$VALS/$3" 2>/dev/null)
    [ -n "$a" ] && [ -n "$b" ] && put "$1" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f", a / b }')"
}

NGINX_VERSION=$("$NGINX" -v 2>&1 | sed -n 's|.*nginx/\([^ ]*\).*|\1|p')
REDIS_VERSION=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
CPUS=$(nproc 2>/dev/null || echo 0)
echo "== nginx $NGINX_VERSION + $MODULE"
echo "== redis-server $REDIS_VERSION on $URL (pid $PID), $CPUS CPUs, $(uname -r);" \
    "$REPS repetition(s): c=1 $N_LAT, c=$CONC $N_MANY (many keys), $N_HOT (hot key) requests"
printf '{"scenario":"nginx_env","nginx":"%s","redis":"%s","cpus":%s,"kernel":"%s","reps":%s,"quick":%s}\n' \
    "$NGINX_VERSION" "$REDIS_VERSION" "$CPUS" "$(uname -r)" "$REPS" "${BENCH_QUICK:-0}" >>"$RESULTS"

for w in $WORKERS; do
    start_nginx "$w" || { FAILED=1; break; }
    echo "== nginx, $w worker(s), http://127.0.0.1:$NPORT (pid $NGX_PID)"
    # Warm up: connections to Redis, the subscription, the file cache.
    for p in plain many hot; do
        ab_run "w${w}_warm_$p" 200 10 "/$p/x" >/dev/null
    done
    rep=0
    while [ "$rep" -lt "$REPS" ]; do
        rep=$((rep + 1))
        k=w$w
        ping_run "$k"
        ab_run "${k}_lat_plain" "$N_LAT" 1 /plain/x
        ab_run "${k}_lat_lock" "$N_LAT" 1 /many/x
        diff_us "${k}_lat_p50_diff_us" "${k}_lat_lock_p50_ms" "${k}_lat_plain_p50_ms"
        diff_us "${k}_lat_mean_diff_us" "${k}_lat_lock_mean_ms" "${k}_lat_plain_mean_ms"
        ab_run "${k}_many_plain" "$N_MANY" "$CONC" /plain/x
        ab_run "${k}_many_lock" "$N_MANY" "$CONC" /many/x
        ratio "${k}_many_ratio" "${k}_many_lock_rps" "${k}_many_plain_rps"
        ab_run "${k}_hot_plain" "$N_HOT" "$CONC" /plain/x
        ab_run "${k}_hot_lock" "$N_HOT" "$CONC" /hot/x
        ratio "${k}_hot_ratio" "${k}_hot_lock_rps" "${k}_hot_plain_rps"
        printf '   rep %s: c=1 p50 %s vs %s ms; c=%s req/s many %s vs %s, hot %s vs %s\n' "$rep" \
            "$(tail -n 1 "$VALS/${k}_lat_lock_p50_ms" 2>/dev/null)" \
            "$(tail -n 1 "$VALS/${k}_lat_plain_p50_ms" 2>/dev/null)" "$CONC" \
            "$(tail -n 1 "$VALS/${k}_many_lock_rps" 2>/dev/null)" \
            "$(tail -n 1 "$VALS/${k}_many_plain_rps" 2>/dev/null)" \
            "$(tail -n 1 "$VALS/${k}_hot_lock_rps" 2>/dev/null)" \
            "$(tail -n 1 "$VALS/${k}_hot_plain_rps" 2>/dev/null)"
    done
    stop_nginx
    echo "   nginx stopped (QUIT) in ${QUIT_MS} ms"
    [ "$QUIT_MS" -gt 5000 ] && echo "bench-nginx: nginx took ${QUIT_MS} ms to quit" >&2
    # Every request has ended: the hot lock must be free.
    if [ "$($T5 redis-cli -p "$PORT" exists 'hilock:{hot}' 2>/dev/null)" != 0 ]; then
        echo "bench-nginx: the lock \"hot\" is still held after nginx quit" >&2
        LOCKS_LEFT=$((LOCKS_LEFT + 1))
        FAILED=1
    fi

    # The JSON lines of this worker count.
    k=w$w
    lat_ov_p50=$(median "${k}_lat_p50_diff_us")
    ping_p50=$(median "ping_${k}_p50_us")
    # shellcheck disable=SC2016 # $request_id is the text of the directive
    printf '{"scenario":"nginx_latency","workers":%s,"concurrency":1,"keepalive":true,"requests":%s,"reps":%s,"plain_p50_ms":%s,"plain_mean_ms":%s,"lock_p50_ms":%s,"lock_mean_ms":%s,"overhead_p50_us":%s,"overhead_mean_us":%s,"redis_ping_p50_us":%s,"redis_ping_avg_us":%s,"overhead_p50_over_ping_p50":%s,"lock_scripts_per_request":%s,"lock":"k:$request_id","overhead_p50_us_runs":%s,"plain_p50_ms_runs":%s,"lock_p50_ms_runs":%s,"redis_ping_p50_us_runs":%s}\n' \
        "$w" "$N_LAT" "$REPS" \
        "$(num "$(median "${k}_lat_plain_p50_ms")")" "$(num "$(median "${k}_lat_plain_mean_ms")")" \
        "$(num "$(median "${k}_lat_lock_p50_ms")")" "$(num "$(median "${k}_lat_lock_mean_ms")")" \
        "$(num "$lat_ov_p50")" "$(num "$(median "${k}_lat_mean_diff_us")")" \
        "$(num "$ping_p50")" "$(num "$(median "ping_${k}_avg_us")")" \
        "$(num "$( [ -n "$lat_ov_p50" ] && [ -n "$ping_p50" ] && awk -v a="$lat_ov_p50" -v b="$ping_p50" 'BEGIN { printf "%.2f", a / b }')")" \
        "$(num "$(median "${k}_lat_lock_scripts_per_req")")" \
        "$(runs "${k}_lat_p50_diff_us")" "$(runs "${k}_lat_plain_p50_ms")" \
        "$(runs "${k}_lat_lock_p50_ms")" "$(runs "ping_${k}_p50_us")" >>"$RESULTS"
    for s in many hot; do
        # shellcheck disable=SC2016 # the same
        if [ $s = many ]; then n=$N_MANY lock='k:$request_id'; else n=$N_HOT lock=hot; fi
        hot_us=
        [ $s = hot ] && hot_us=$(median "${k}_hot_lock_rps" | awk '{ if ($1 > 0) printf "%.1f", 1e6 / $1 }')
        printf '{"scenario":"nginx_%s","workers":%s,"concurrency":%s,"keepalive":true,"requests":%s,"reps":%s,"plain_rps":%s,"lock_rps":%s,"lock_over_plain":%s,%s"lock_scripts_per_request":%s,"lock":"%s","plain_rps_runs":%s,"lock_rps_runs":%s,"lock_over_plain_runs":%s}\n' \
            "$( [ $s = many ] && echo many_keys || echo hot_key)" "$w" "$CONC" "$n" "$REPS" \
            "$(num "$(median "${k}_${s}_plain_rps")")" "$(num "$(median "${k}_${s}_lock_rps")")" \
            "$(num "$(median "${k}_${s}_ratio")")" \
            "$( [ -n "$hot_us" ] && printf '"us_per_request":%s,' "$hot_us")" \
            "$(num "$(median "${k}_${s}_lock_scripts_per_req")")" "$lock" \
            "$(runs "${k}_${s}_plain_rps")" "$(runs "${k}_${s}_lock_rps")" \
            "$(runs "${k}_${s}_ratio")" >>"$RESULTS"
    done
done

# ---- Two nginx on shared hot keys: does one starve? ----------------------------
fmt_int() { awk -v v="$1" 'BEGIN { if (v == "") print "-"; else printf "%.0f", v }'; }

# wait_figures LOG: "count p50 p99 max" (ms, nearest rank) of the granted
# measured requests' waits in LOG; "0 - - -" when there is none.
wait_figures() {
    awk '$1 == "m" && $2 == "acquired" { print $3 }' "$1" 2>/dev/null | sort -n |
        awk '{ v[NR] = $1 } END {
            if (NR == 0) { print "0 - - -"; exit }
            i50 = int(NR * 0.50); if (i50 < NR * 0.50) i50++
            i99 = int(NR * 0.99); if (i99 < NR * 0.99) i99++
            printf "%d %s %s %s\n", NR, v[i50], v[i99], v[NR] }'
}

# two_case NAME PATH REDIS_PARAMS: start two nginx, warm them up, drive
# both at once with the same ab, stop them, and write the case's JSON line.
two_case() {
    name=$1 path=$2
    TWO_REDIS_PARAMS=$3
    CONF_KIND=two
    ports=
    for inst in a b; do
        NGX_DIR=$TMP/two_$inst
        rm -rf "$NGX_DIR"
        mkdir -p "$NGX_DIR/www/mutex" "$NGX_DIR/www/fair" "$NGX_DIR/tmp" || return 1
        printf 'ok\n' >"$NGX_DIR/www/mutex/x"
        printf 'ok\n' >"$NGX_DIR/www/fair/x"
        if ! start_nginx 1; then
            FAILED=1
            CONF_KIND=one NGX_DIR=$TMP/nginx
            for p in $TWO_PIDS; do NGX_PID=$p; stop_nginx; done
            TWO_PIDS=
            return 1
        fi
        TWO_PIDS="$TWO_PIDS $NGX_PID"
        NGX_PID=
        ports="$ports $NPORT"
    done
    CONF_KIND=one NGX_DIR=$TMP/nginx
    # shellcheck disable=SC2086 # two ports
    set -- $ports
    pa=$1 pb=$2
    # Warm up: connections to Redis, the subscriptions, both keys.
    for p in $pa $pb; do
        ${T:+$T 60} ab -k -q -c 4 -n 200 "http://127.0.0.1:$p/$path/x?run=warm" </dev/null >/dev/null 2>&1
    done
    for p in $pa $pb; do
        if [ "$p" = "$pa" ]; then inst=a; else inst=b; fi
        ${T:+$T 120} ab -k -q -c "$C_TWO" -n "$N_TWO" "http://127.0.0.1:$p/$path/x?run=m" \
            </dev/null >"$TMP/two_$inst.ab" 2>&1 &
        TWO_AB="$TWO_AB $!"
    done
    rcs=
    for p in $TWO_AB; do
        wait "$p"
        rcs="$rcs $?"
    done
    TWO_AB=
    for p in $TWO_PIDS; do NGX_PID=$p; stop_nginx; done   # their logs written
    TWO_PIDS=
    json=
    shown=
    i=0
    for inst in a b; do
        i=$((i + 1))
        # shellcheck disable=SC2086 # the exit statuses
        rc=$(echo $rcs | cut -d' ' -f$i)
        out=$TMP/two_$inst.ab
        complete=$(sed -n 's/^Complete requests: *\([0-9]*\).*/\1/p' "$out")
        failed=$(sed -n 's/^Failed requests: *\([0-9]*\).*/\1/p' "$out")
        non2xx=$(sed -n 's/^Non-2xx responses: *\([0-9]*\).*/\1/p' "$out")
        if [ "$rc" != 0 ] || [ "${complete:-0}" != "$N_TWO" ] || [ "${failed:-1}" != 0 ] || [ -n "$non2xx" ]; then
            echo "bench-nginx: $name, nginx $inst: ab exit $rc, complete ${complete:-?}," \
                "failed ${failed:-?}, non-2xx ${non2xx:-0}" >&2
            tail -n 25 "$out" >&2
            echo "$name $inst rc=$rc complete=${complete:-?} failed=${failed:-?} non2xx=${non2xx:-0}" >>"$BAD"
            FAILED=1
        fi
        rps=$(sed -n 's/^Requests per second: *\([0-9.]*\).*/\1/p' "$out")
        secs=$(sed -n 's/^Time taken for tests: *\([0-9.]*\) seconds.*/\1/p' "$out")
        # shellcheck disable=SC2046 # four fields
        set -- $(wait_figures "$TMP/two_$inst/waits.log")
        n=$1 p50=$2 p99=$3 max=$4
        if [ "$n" != "$N_TWO" ]; then
            echo "bench-nginx: $name, nginx $inst: $n granted waits logged, of $N_TWO" >&2
            FAILED=1
        fi
        if [ "$p50" = - ]; then p50='' p99='' max=''; fi
        json="$json\"${inst}_rps\":$(num "$rps"),\"${inst}_seconds\":$(num "$secs"),\"${inst}_granted\":$n,\"${inst}_wait_p50_ms\":$(num "$p50"),\"${inst}_wait_p99_ms\":$(num "$p99"),\"${inst}_wait_max_ms\":$(num "$max"),"
        shown="$shown$(printf '%s: p99 %5s ms max %5s ms (p50 %s ms, %s req/s, %s s)' "$inst" \
            "${p99:--}" "${max:--}" "${p50:--}" "$(fmt_int "$rps")" "${secs:--}")  "
        if [ $inst = a ]; then a_p99=$p99; else b_p99=$p99; fi
    done
    # The larger p99 over the smaller: 1 when neither instance is favoured.
    p99_ratio=$(awk -v a="$a_p99" -v b="$b_p99" 'BEGIN { if (a != "" && b != "") {
        hi = a > b ? a : b; lo = a > b ? b : a; printf "%.2f", hi / (lo > 0 ? lo : 1) } }')
    for k in hot:a hot:b; do
        if [ "$path" = fair ]; then kk="hilock:{$k}:fair"; else kk="hilock:{$k}"; fi
        if [ "$($T5 redis-cli -p "$PORT" exists "$kk" 2>/dev/null)" != 0 ]; then
            echo "bench-nginx: the lock $kk is still held after both nginx quit" >&2
            LOCKS_LEFT=$((LOCKS_LEFT + 1))
            FAILED=1
        fi
    done
    nlog=$(cat "$TMP/two_a/error.log" "$TMP/two_b/error.log" 2>/dev/null | grep -cE '\[(warn|error|crit|alert|emerg)\]')
    if [ "${nlog:-0}" != 0 ]; then
        echo "bench-nginx: $name: the two nginx logged $nlog warning(s) or worse:" >&2
        cat "$TMP/two_a/error.log" "$TMP/two_b/error.log" | grep -E '\[(warn|error|crit|alert|emerg)\]' | head -n 10 >&2
        TWO_LOG=$((TWO_LOG + nlog))
        FAILED=1
    fi
    printf '   %-19s %sp99 hi/lo %s\n' "$name" "$shown" "${p99_ratio:--}"
    printf '{"scenario":"nginx_two_instances","case":"%s","lock":"%s","hilock_redis_params":"%s","instances":2,"workers_per_instance":1,"keys":2,"keepalive":true,"concurrency_per_instance":%s,"requests_per_instance":%s,%s"wait_p99_hi_over_lo":%s}\n' \
        "$name" "$( [ "$path" = fair ] && echo fair || echo mutex)" "${TWO_REDIS_PARAMS# }" "$C_TWO" "$N_TWO" \
        "$json" "$(num "$p99_ratio")" >>"$RESULTS"
}

TWO_LOG=0
echo "== two nginx (1 worker each) on hot keys hot:a and hot:b, ab -k -c $C_TWO -n $N_TWO on each at once;" \
    "each one's lock wait (\$hilock_wait_ms)"
two_case two_mutex mutex ""
two_case two_mutex_nostarve mutex " starve=off"
two_case two_fair fair ""

# ---- The library's own handoff, same server ----------------------------------
HANDOFF_P50=
HANDOFF_PING=
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    echo "== library handoff: skipped (BENCH_QUICK=1)"
elif [ -x "$BENCH" ]; then
    echo "== library handoff: $BENCH -s handoff -n 600"
    ${T:+$T 300} "$BENCH" -u "$URL" -s handoff -n 600 </dev/null >"$TMP/handoff.jsonl" 2>"$TMP/handoff.err" &
    CHILD=$!
    wait "$CHILD" || { echo "bench-nginx: hilock-bench failed" >&2; cat "$TMP/handoff.err" >&2; FAILED=1; }
    CHILD=
    grep '"scenario":"handoff' "$TMP/handoff.jsonl" >>"$RESULTS"
    HANDOFF_P50=$(sed -n 's/.*"scenario":"handoff","client":"hilock","p50_us":\([0-9.]*\).*/\1/p' "$TMP/handoff.jsonl")
    HANDOFF_PING=$(sed -n 's/.*"scenario":"handoff","client":"hilock".*"ping_rtt_p50_us":\([0-9.]*\).*/\1/p' "$TMP/handoff.jsonl")
else
    echo "== library handoff: skipped ($BENCH is not built)"
fi

# ---- nginx's error log ----------------------------------------------------------
NLOG=$(grep -cE '\[(warn|error|crit|alert|emerg)\]' "$NGX_DIR/error.log" 2>/dev/null)
NLOG=$((${NLOG:-0} + TWO_LOG))
if [ "$NLOG" != 0 ]; then
    echo "bench-nginx: nginx's error log has $NLOG warning(s) or worse:" >&2
    grep -E '\[(warn|error|crit|alert|emerg)\]' "$NGX_DIR/error.log" | head -n 20 >&2
    FAILED=1
fi
NBAD=$(wc -l <"$BAD" | tr -d ' ')
# What the run leaves in Redis: a fence key per name (k:$request_id: one per
# request), with the client's fence TTL (7 days by default).
KEYS_LEFT=$($T5 redis-cli -p "$PORT" dbsize 2>/dev/null | tr -d '\r')
printf '{"scenario":"nginx_checks","failed_runs":%s,"error_log_warnings":%s,"locks_left_after_quit":%s,"redis_keys_left":%s,"ok":%s}\n' \
    "$NBAD" "$NLOG" "$LOCKS_LEFT" "$(num "$KEYS_LEFT")" "$( [ "$FAILED" = 0 ] && echo true || echo false)" >>"$RESULTS"

# ---- The table -------------------------------------------------------------------
fmt() { awk -v v="$1" -v f="$2" 'BEGIN { if (v == "") print "-"; else printf f, v }'; }
echo
echo "== ngx_http_hilock_module, medians of $REPS run(s); \"plain\" = the same location without hilock"
printf '%-3s %-30s %16s %16s %s\n' W scenario plain hilock "hilock vs plain"
for w in $WORKERS; do
    k=w$w
    [ -s "$VALS/${k}_lat_plain_p50_ms" ] || continue
    printf '%-3s %-30s %16s %16s %s\n' "$w" "c=1 ms/request p50 (mean)" \
        "$(fmt "$(median "${k}_lat_plain_p50_ms")" %.3f) ($(fmt "$(median "${k}_lat_plain_mean_ms")" %.3f))" \
        "$(fmt "$(median "${k}_lat_lock_p50_ms")" %.3f) ($(fmt "$(median "${k}_lat_lock_mean_ms")" %.3f))" \
        "+$(fmt "$(median "${k}_lat_p50_diff_us")" %.0f) us p50 (+$(fmt "$(median "${k}_lat_mean_diff_us")" %.0f) mean) = $(awk -v a="$(median "${k}_lat_p50_diff_us")" -v b="$(median "ping_${k}_p50_us")" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "-" }') x PING p50 $(fmt "$(median "ping_${k}_p50_us")" %.0f) us"
    printf '%-3s %-30s %16s %16s %s\n' "$w" "c=$CONC req/s, key per request" \
        "$(fmt_int "$(median "${k}_many_plain_rps")")" "$(fmt_int "$(median "${k}_many_lock_rps")")" \
        "$(fmt "$(median "${k}_many_ratio")" %.2f)x"
    printf '%-3s %-30s %16s %16s %s\n' "$w" "c=$CONC req/s, one hot key" \
        "$(fmt_int "$(median "${k}_hot_plain_rps")")" "$(fmt_int "$(median "${k}_hot_lock_rps")")" \
        "$(fmt "$(median "${k}_hot_ratio")" %.3f)x; $(median "${k}_hot_lock_rps" | awk '{ if ($1 > 0) printf "%.0f", 1e6 / $1 }') us per handoff; $(fmt "$(median "${k}_hot_lock_scripts_per_req")" %.2f) scripts/request"
done
if [ -n "$HANDOFF_P50" ]; then
    echo "library handoff p50 (hilock-bench, two processes, holds 1..11 ms): $HANDOFF_P50 us" \
        "(its blocking PING p50 $HANDOFF_PING us)"
fi
echo "== $RESULTS"
if [ "$FAILED" != 0 ]; then
    echo "bench-nginx: FAILED (see above)" >&2
fi
exit $FAILED
