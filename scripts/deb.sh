#!/bin/sh
# deb.sh: build hilock's Debian packages in a clean copy of the tree and,
# with `test`, install them on this machine, check them, and remove them.
#
#   sh scripts/deb.sh build [OUTDIR]   what `make deb` runs: the .deb files
#                                      in OUTDIR (default build/deb)
#   sh scripts/deb.sh test [OUTDIR]    what `make deb-test` (and CI) runs:
#                                      build, then install and check:
#     1. the files are where Debian wants them; hilock.pc names the
#        multiarch libdir; the module's snippet is enabled
#     2. the README's first C program, compiled with pkg-config against the
#        installed library (shared, then static), locks on a throwaway
#        redis-server (a free loopback port, stopped by pid)
#     3. the installed CLI: hilock --version, hilock -u URL NAME -- CMD
#     4. the man pages: man -w 1 hilock, man -w 3 hilock, and every page of
#        man/man3/ by its name
#     5. Debian's nginx with the module, loaded through the snippet the
#        package enabled: nginx -t, then a real nginx on a free port whose
#        locked location answers 200 with a fence
#     6. apt-get remove --purge leaves no file and no enabled snippet
#
# The copy: the files git knows in the working tree, committed or not, and
# the untracked ones it does not ignore (`git ls-files -co`), so a fresh
# clone and a tree being edited both work; outside git, the whole tree but
# build/. The copy is built with `dpkg-buildpackage -us -uc -b`, so the tree
# itself is never cleaned. If debian/changelog's version is not the one in
# include/hilock/hilock.h, the copy gets an entry for the header's version
# (a warning says so: add the entry to debian/changelog).
#
# Installing needs root (or `sudo -n`). The four packages are removed at the
# end, however the script ends (a trap), and the scratch directory with
# them. Packages apt-get pulls in as dependencies stay (a note lists them):
# with the build dependencies installed there are none.
#
# Needs: dpkg-dev, debhelper, fakeroot, nginx-dev and the build
# dependencies (sh scripts/deps.sh --lib --deb installs them), plus for
# `test` redis-server, redis-cli, curl, man-db, pkg-config and a C compiler.
# lintian, if installed, reports on the packages (never fatal; DEB_LINTIAN=0
# skips it). DEB_JOBS: parallel build jobs (default: the number of cores).
set -u

MODE=${1:-test}
case $MODE in
build | test) ;;
*)
    echo "deb: usage: sh scripts/deb.sh build|test [OUTDIR]" >&2
    exit 2
    ;;
esac
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/.." && pwd)
OUT=${2:-$TOP/build/deb}
case $OUT in /*) ;; *) OUT=$(pwd)/$OUT ;; esac
PACKAGES="libhilock1 libhilock-dev hilock libnginx-mod-http-hilock"
started=$(date +%s)

say() { printf 'deb: %s\n' "$*"; }
fail_now() {
    printf 'deb: FAILED: %s\n' "$*" >&2
    exit 1
}
if command -v timeout >/dev/null 2>&1; then T30="timeout 30" T300="timeout 300"; else T30='' T300=''; fi

for tool in dpkg-buildpackage dpkg-parsechangelog dh; do
    command -v "$tool" >/dev/null 2>&1 ||
        fail_now "$tool not found: run sh scripts/deps.sh --lib --deb"
done
if [ "$MODE" = test ]; then
    for tool in redis-server redis-cli curl man pkg-config "${CC:-cc}"; do
        command -v "$tool" >/dev/null 2>&1 ||
            fail_now "$tool not found: run sh scripts/deps.sh --lib --deb"
    done
    [ -x /usr/sbin/nginx ] || fail_now "no /usr/sbin/nginx: run sh scripts/deps.sh --lib --deb"
fi

SUDO=
if [ "$MODE" = test ] && [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || fail_now "installing the packages needs root or sudo"
    SUDO="sudo -n"
    $SUDO true 2>/dev/null || fail_now "installing the packages needs root or password-less sudo"
fi

# The scratch directory, the redis-server (PID) and the traps come from
# redis-throwaway.sh; this script's trap stops nginx and removes the
# packages first, then calls its cleanup.
# shellcheck source=scripts/redis-throwaway.sh
. "$HERE/redis-throwaway.sh"
throwaway_setup hilock-deb
NGINX_PID=
INSTALLED=0
stop_nginx() {
    [ -n "$NGINX_PID" ] || return 0
    kill -QUIT "$NGINX_PID" 2>/dev/null # graceful: the module closes its clients
    n=0
    while kill -0 "$NGINX_PID" 2>/dev/null && [ "$n" -lt 100 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    if kill -0 "$NGINX_PID" 2>/dev/null; then
        say "nginx (pid $NGINX_PID) did not quit in 10 s: TERM"
        kill -TERM "$NGINX_PID" 2>/dev/null
    fi
    wait "$NGINX_PID" 2>/dev/null
    NGINX_PID=
}
apt() {
    # shellcheck disable=SC2086 # $SUDO is a command prefix
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=300 "$@" </dev/null
}
remove_packages() {
    [ "$INSTALLED" = 1 ] || return 0
    say "removing the packages: apt-get remove --purge $PACKAGES"
    # shellcheck disable=SC2086
    apt remove -y --purge $PACKAGES >"$TMP/remove.log" 2>&1 || {
        echo "deb: apt-get remove failed:" >&2
        tail -n 20 "$TMP/remove.log" >&2
        return 1
    }
    INSTALLED=0
}
# shellcheck disable=SC2317 # called by the EXIT trap
deb_cleanup() {
    rc=$?
    [ "$rc" -ge 128 ] && say "interrupted (exit $rc): cleaning up"
    stop_nginx
    remove_packages || rc=1
    throwaway_cleanup
    exit "$rc"
}
trap deb_cleanup EXIT

# ---------------------------------------------------------------------------
say "== copying the tree to $TMP/hilock"
SRC=$TMP/hilock
mkdir -p "$SRC" || exit 1
if git -C "$TOP" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Files deleted but not yet staged are skipped (--ignore-failed-read).
    (cd "$TOP" && git ls-files -z -co --exclude-standard |
        tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$SRC" ||
        fail_now "copying the tree"
else
    (cd "$TOP" && tar --exclude=./build --exclude=./.git -cf - .) | tar -xf - -C "$SRC" ||
        fail_now "copying the tree"
fi
[ -f "$SRC/debian/control" ] || fail_now "no debian/control in the tree"

hdr_num() { sed -n "s/^#define HILOCK_$1 *\\([0-9]*\\).*/\\1/p" "$SRC/include/hilock/hilock.h"; }
VERSION=$(hdr_num VERSION_MAJOR).$(hdr_num VERSION_MINOR).$(hdr_num VERSION_PATCH)
SOVER=$(hdr_num SOVERSION)
CHVER=$(cd "$SRC" && dpkg-parsechangelog -S Version)
if [ "$CHVER" != "$VERSION" ]; then
    say "WARNING: debian/changelog says $CHVER, include/hilock/hilock.h says $VERSION:"
    say "WARNING: building $VERSION; add a debian/changelog entry for it"
    {
        printf 'hilock (%s) UNRELEASED; urgency=medium\n\n' "$VERSION"
        printf '  * Version %s (include/hilock/hilock.h).\n\n' "$VERSION"
        printf ' -- %s  %s\n\n' "$(cd "$SRC" && dpkg-parsechangelog -S Maintainer)" "$(date -R)"
        cat "$SRC/debian/changelog"
    } >"$SRC/debian/changelog.new" && mv "$SRC/debian/changelog.new" "$SRC/debian/changelog"
fi
if ! grep -q "^libhilock\\.so\\.$SOVER libhilock$SOVER " "$SRC/debian/libhilock1.symbols" ||
    ! grep -q "^Package: libhilock$SOVER\$" "$SRC/debian/control"; then
    fail_now "HILOCK_SOVERSION is $SOVER: rename libhilock1 in debian/control, its .install and .symbols"
fi

# ---------------------------------------------------------------------------
JOBS=${DEB_JOBS:-$(nproc 2>/dev/null || echo 1)}
say "== dpkg-buildpackage -us -uc -b -j$JOBS (hilock $VERSION; log: build.log)"
if ! (cd "$SRC" && $T300 dpkg-buildpackage -us -uc -b -j"$JOBS") >"$TMP/build.log" 2>&1; then
    tail -n 40 "$TMP/build.log" >&2
    fail_now "dpkg-buildpackage (its last lines above)"
fi
if grep -q 'dpkg-gensymbols: warning' "$TMP/build.log"; then
    say "WARNING: the library's symbols differ from debian/libhilock1.symbols:"
    sed -n '/dpkg-gensymbols: warning/,/^ *dh_/p' "$TMP/build.log" | grep -v '^ *dh_' | head -n 40
fi
mkdir -p "$OUT" || exit 1
for p in $PACKAGES; do
    rm -f "$OUT/${p}_"*.deb
done
ARCH=$(dpkg --print-architecture)
for p in $PACKAGES; do
    f=$TMP/${p}_${VERSION}_$ARCH.deb
    [ -f "$f" ] || fail_now "dpkg-buildpackage made no $f"
    cp "$f" "$OUT/" || exit 1
    printf '    %-42s %s\n' "${f##*/}" "$(dpkg-deb -f "$f" Depends)"
done
say "packages in $OUT"

if [ "${DEB_LINTIAN:-1}" != 0 ] && command -v lintian >/dev/null 2>&1; then
    say "== lintian (reported, never fatal)"
    $T300 lintian --pedantic "$TMP/hilock_${VERSION}_$ARCH.changes" 2>&1 |
        grep -v '^running with root privileges' >"$TMP/lintian.log"
    if [ -s "$TMP/lintian.log" ]; then sed 's/^/    /' "$TMP/lintian.log"; else say "lintian: nothing to report"; fi
fi

if [ "$MODE" = build ]; then
    say "built in $(($(date +%s) - started))s"
    exit 0
fi

# ---------------------------------------------------------------------------
FAILED=
# check LABEL CMD...: run one check with its output in $TMP/check.log, shown
# when it fails; remember the failure and go on.
check() {
    label=$1
    shift
    if "$@" >"$TMP/check.log" 2>&1; then
        say "ok      $label"
    else
        say "FAILED  $label"
        sed 's/^/    | /' "$TMP/check.log" | tail -n 30
        FAILED="$FAILED
    $label"
    fi
}

for p in $PACKAGES; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
        say "note: $p was installed before this test; it is replaced, and removed at the end"
    fi
done
dpkg-query -W -f='${Package}\n' 2>/dev/null | sort >"$TMP/before.txt"
say "== apt-get install the four packages"
INSTALLED=1
debs=
for p in $PACKAGES; do debs="$debs $OUT/${p}_${VERSION}_$ARCH.deb"; done
# shellcheck disable=SC2086
if ! apt install -y --no-install-recommends $debs >"$TMP/install.log" 2>&1; then
    tail -n 30 "$TMP/install.log" >&2
    fail_now "apt-get install (its last lines above)"
fi
dpkg-query -W -f='${Package}\n' 2>/dev/null | sort >"$TMP/after.txt"
extra=$(comm -13 "$TMP/before.txt" "$TMP/after.txt" |
    grep -vx -e libhilock1 -e libhilock-dev -e hilock -e libnginx-mod-http-hilock | tr '\n' ' ')
[ -n "$extra" ] && say "note: apt-get also installed (left installed): $extra"

MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
LIBDIR=/usr/lib/$MA
files_in_place() {
    rc=0
    for f in "$LIBDIR/libhilock.so.$SOVER" "$LIBDIR/libhilock.so.$VERSION" "$LIBDIR/libhilock.so" \
        "$LIBDIR/libhilock.a" "$LIBDIR/pkgconfig/hilock.pc" /usr/include/hilock/hilock.h \
        /usr/include/hilock/adapters/libevent.h /usr/include/hilock/adapters/nginx.h \
        /usr/bin/hilock /usr/lib/nginx/modules/ngx_http_hilock_module.so \
        /usr/share/nginx/modules-available/mod-http-hilock.conf; do
        if [ -e "$f" ]; then echo "present: $f"; else echo "MISSING: $f"; rc=1; fi
    done
    for h in "$SRC"/adapters/*.h; do
        [ -f "/usr/include/hilock/adapters/${h##*/}" ] || { echo "MISSING: adapters/${h##*/}"; rc=1; }
    done
    return $rc
}
check "files in place ($LIBDIR, /usr/include/hilock, /usr/bin, /usr/lib/nginx/modules)" files_in_place
snippet_enabled() {
    link=/etc/nginx/modules-enabled/50-mod-http-hilock.conf
    ls -l "$link" && [ -L "$link" ] &&
        grep -qx 'load_module modules/ngx_http_hilock_module.so;' "$link"
}
check "snippet enabled: /etc/nginx/modules-enabled/50-mod-http-hilock.conf" snippet_enabled
pc_right() {
    v=$(pkg-config --modversion hilock) && echo "modversion $v" && [ "$v" = "$VERSION" ] &&
        l=$(pkg-config --variable=libdir hilock) && echo "libdir $l" && [ "$l" = "$LIBDIR" ]
}
check "pkg-config: hilock $VERSION, libdir $LIBDIR" pc_right

start_redis 40000 || fail_now "could not start redis-server"
# shellcheck disable=SC2153 # PORT: set by start_redis
URL=redis://127.0.0.1:$PORT
say "== redis-server on $URL (pid $PID)"

# The README's first program: the first ```c block after "## Using the
# library" (or "## A first program"), else the first in README.md.
extract_readme() {
    for heading in '## Using the library' '## A first program' ''; do
        awk -v h="$heading" '
            BEGIN { s = (h == "") }
            s == 0 && $0 == h { s = 1; next }
            s == 1 && /^```c[ \t]*$/ { s = 2; next }
            s == 2 && /^```[ \t]*$/ { exit }
            s == 2 { print }' "$SRC/README.md" >"$1"
        [ -s "$1" ] && return 0
    done
    return 1
}
mkdir -p "$TMP/prog"
if extract_readme "$TMP/prog/prog.c"; then
    say "README program: $(head -n 1 "$TMP/prog/prog.c")"
    EVLIBS=
    pkg-config --libs hilock | grep -q -- '-levent' || EVLIBS=-levent
    # shellcheck disable=SC2046,SC2086 # pkg-config's flags are words
    build_shared() {
        ${CC:-cc} -Wall -o "$TMP/prog/prog" "$TMP/prog/prog.c" $(pkg-config --cflags --libs hilock) $EVLIBS &&
            readelf -d "$TMP/prog/prog" | grep "NEEDED.*libhilock\\.so\\.$SOVER"
    }
    check "cc prog.c \$(pkg-config --cflags --libs hilock) $EVLIBS" build_shared
    run_prog() { # BINARY: it must exit 0 and print its fence
        $T30 "$1" "$URL" >"$TMP/prog/out" 2>&1
        rc=$?
        cat "$TMP/prog/out"
        echo "exit $rc"
        [ "$rc" = 0 ] && grep -q '^locked, fence [0-9]' "$TMP/prog/out"
    }
    run_shared() { ldd "$TMP/prog/prog" | grep libhilock && run_prog "$TMP/prog/prog"; }
    check "the program locks on $URL (libhilock.so.$SOVER)" run_shared
    # shellcheck disable=SC2046,SC2086
    build_static() {
        ${CC:-cc} -Wall -o "$TMP/prog/prog-static" "$TMP/prog/prog.c" $(pkg-config --cflags hilock) \
            -Wl,-Bstatic -lhilock -Wl,-Bdynamic $(pkg-config --libs-only-l --static hilock | sed 's/-lhilock//') -levent
    }
    check "the same, linked with libhilock.a" build_static
    check "the static one locks too" run_prog "$TMP/prog/prog-static"
else
    say "FAILED  no \`\`\`c block in README.md"
    FAILED="$FAILED
    the README program"
fi

cli_version() { hilock --version && hilock --version | grep -F "$VERSION"; }
check "hilock --version names $VERSION" cli_version
# shellcheck disable=SC2086 # $T30 is a command prefix
check "hilock -u $URL deb:cli -- true" $T30 hilock -u "$URL" deb:cli -- true
# shellcheck disable=SC2086,SC2016 # the same; $HILOCK_FENCE is the child's
check "hilock -u $URL deb:cli -- sh -c '[ -n \"\$HILOCK_FENCE\" ]'" \
    $T30 hilock -u "$URL" deb:cli -- sh -c '[ -n "$HILOCK_FENCE" ]'

man_pages() {
    rc=0
    man -w 1 hilock || rc=1
    man -w 3 hilock || rc=1
    for page in "$SRC"/man/man3/*.3; do
        [ -f "$page" ] || continue
        name=${page##*/}
        man -w 3 "${name%.3}" || rc=1
    done
    return $rc
}
n3=$(find "$SRC/man/man3" -name '*.3' 2>/dev/null | wc -l)
[ "$n3" -gt 0 ] && n3=" and the $n3 pages of man/man3" || n3=
check "man -w 1 hilock, man -w 3 hilock$n3" man_pages

# nginx: its own prefix in $TMP/nginx; the workers (nobody, as root) must
# read the page, so the scratch directory is opened to them.
NG=$TMP/nginx
mkdir -p "$NG/html" "$NG/logs" && chmod 755 "$TMP" "$NG" "$NG/html" || exit 1
# The snippet's `load_module modules/...` is relative to the prefix (-p), as
# /usr/share/nginx/modules is a link to /usr/lib/nginx/modules.
ln -s /usr/lib/nginx/modules "$NG/modules" || exit 1
printf 'locked page\n' >"$NG/html/locked"
write_nginx_conf() { # PORT
    cat >"$NG/nginx.conf" <<EOF
include /etc/nginx/modules-enabled/50-mod-http-hilock.conf;
worker_processes 2;
daemon off;
pid $NG/nginx.pid;
error_log $NG/logs/error.log info;
events { worker_connections 64; }
http {
    access_log $NG/logs/access.log;
    client_body_temp_path $NG/body;
    proxy_temp_path $NG/proxy;
    fastcgi_temp_path $NG/fastcgi;
    uwsgi_temp_path $NG/uwsgi;
    scgi_temp_path $NG/scgi;
    hilock_redis $URL timeout=2s;
    server {
        listen 127.0.0.1:$1;
        root $NG/html;
        location = /locked {
            hilock deb:nginx wait=5s;
            add_header X-Hilock-Status \$hilock_status;
            add_header X-Hilock-Fence \$hilock_fence;
        }
    }
}
EOF
}
write_nginx_conf 1
# shellcheck disable=SC2086 # $T30 is a command prefix
check "nginx -t with the enabled snippet and a hilock location" \
    $T30 /usr/sbin/nginx -t -p "$NG/" -c "$NG/nginx.conf"

# A free port: the first where nginx starts and stays up.
NPORT=$((30000 + $$ % 9000))
tries=0
while [ "$tries" -lt 20 ] && [ -z "$NGINX_PID" ]; do
    tries=$((tries + 1))
    NPORT=$((NPORT + 1))
    curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$NPORT/" && continue
    write_nginx_conf "$NPORT"
    : >"$NG/logs/error.log"
    /usr/sbin/nginx -p "$NG/" -c "$NG/nginx.conf" >"$NG/logs/stderr.log" 2>&1 &
    NGINX_PID=$!
    n=0
    while [ "$n" -lt 50 ]; do
        if ! kill -0 "$NGINX_PID" 2>/dev/null; then
            wait "$NGINX_PID" 2>/dev/null
            NGINX_PID=
            break
        fi
        curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$NPORT/" && break
        sleep 0.1
        n=$((n + 1))
    done
done
if [ -n "$NGINX_PID" ]; then
    say "== nginx on 127.0.0.1:$NPORT (pid $NGINX_PID)"
    locked_200() {
        for i in 1 2 3; do
            curl -s -D "$NG/headers" -o "$NG/body.out" --max-time 10 \
                -w '%{http_code}\n' "http://127.0.0.1:$NPORT/locked?i=$i" >"$NG/code" || return 1
            echo "request $i: $(cat "$NG/code") $(tr -d '\r' <"$NG/headers" | grep -i '^x-hilock' | tr '\n' ' ')"
            [ "$(cat "$NG/code")" = 200 ] || return 1
            tr -d '\r' <"$NG/headers" | grep -qix 'x-hilock-status: acquired' || return 1
            tr -d '\r' <"$NG/headers" | grep -qi '^x-hilock-fence: [0-9][0-9]*$' || return 1
            grep -qx 'locked page' "$NG/body.out" || return 1
        done
    }
    check "GET /locked: 200, \$hilock_status acquired, a fence (3 requests)" locked_200
    stop_nginx
    check "nginx quit cleanly (no alert in its error log)" \
        sh -c "! grep -E '\\[(alert|emerg|crit)\\]' '$NG/logs/error.log'"
else
    say "FAILED  nginx did not start; its logs:"
    tail -n 20 "$NG/logs/stderr.log" "$NG/logs/error.log" 2>/dev/null | sed 's/^/    | /'
    FAILED="$FAILED
    nginx with the module"
fi

remove_packages || FAILED="$FAILED
    apt-get remove --purge"
all_gone() {
    rc=0
    for f in "$LIBDIR/libhilock.so.$SOVER" "$LIBDIR/pkgconfig/hilock.pc" /usr/include/hilock \
        /usr/bin/hilock /usr/lib/nginx/modules/ngx_http_hilock_module.so \
        /usr/share/nginx/modules-available/mod-http-hilock.conf \
        /etc/nginx/modules-enabled/50-mod-http-hilock.conf \
        /etc/nginx/modules-enabled/50-mod-http-hilock.conf.removed; do
        if [ -e "$f" ] || [ -L "$f" ]; then echo "left behind: $f"; rc=1; fi
    done
    return $rc
}
check "purged: no file and no enabled snippet left" all_gone

took=$(($(date +%s) - started))
if [ -n "$FAILED" ]; then
    printf 'deb: FAILED after %ss:%s\n' "$took" "$FAILED" >&2
    exit 1
fi
say "all checks passed in ${took}s (hilock $VERSION: $PACKAGES)"
