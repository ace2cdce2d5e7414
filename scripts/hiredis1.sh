#!/bin/sh
# Build hiredis 1.2.0 into PREFIX (default /tmp/hiredis1), so that hilock can
# be built and tested against the 1.x API as well as the distro's 0.14:
#
#   sh scripts/hiredis1.sh /tmp/hiredis1
#   make test HIREDIS=/tmp/hiredis1        (builds in build/h1)
#
# The sources come from the npm package redis-fast-driver@2.2.6, whose
# deps/hiredis/ holds hiredis 1.2.0. They are unpacked into a temporary dir
# and never copied into this repository. Built WITH TLS (USE_SSL=1, giving
# libhiredis_ssl and hiredis/hiredis_ssl.h), so that a hilock built against
# the prefix supports rediss:// URLs; this needs OpenSSL's headers
# (libssl-dev). A prefix holding an older build without libhiredis_ssl is
# rebuilt.
#
# Exit status: 0 built (or already there), 1 the build failed, 2 no npm,
# 3 no OpenSSL headers (libssl-dev).
set -eu

PKG=redis-fast-driver@2.2.6
WANT=1.2.0
prefix=${1:-/tmp/hiredis1}
case $prefix in
    /*) ;;
    *) prefix=$(pwd)/$prefix ;;
esac
hdr=$prefix/include/hiredis/hiredis.h

installed_version() {
    [ -f "$hdr" ] || return 1
    maj=$(sed -n 's/^#define HIREDIS_MAJOR \([0-9]*\).*/\1/p' "$hdr")
    min=$(sed -n 's/^#define HIREDIS_MINOR \([0-9]*\).*/\1/p' "$hdr")
    pat=$(sed -n 's/^#define HIREDIS_PATCH \([0-9]*\).*/\1/p' "$hdr")
    echo "$maj.$min.$pat"
}

if v=$(installed_version) && [ "${v%%.*}" = 1 ] &&
   ls "$prefix"/lib/libhiredis.so* >/dev/null 2>&1 &&
   ls "$prefix"/lib/libhiredis_ssl.so* >/dev/null 2>&1 &&
   [ -f "$prefix/include/hiredis/hiredis_ssl.h" ]; then
    echo "hiredis1: hiredis $v with SSL already in $prefix"
    exit 0
fi

# hiredis's ssl.c includes <openssl/ssl.h>; say what to install up front
# rather than failing half-way through the build.
if ! printf '#include <openssl/ssl.h>\n' | ${CC:-cc} -E -x c - >/dev/null 2>&1; then
    echo "hiredis1: OpenSSL headers are missing: install libssl-dev (apt-get install libssl-dev)." >&2
    exit 3
fi

if ! command -v npm >/dev/null 2>&1; then
    echo "hiredis1: npm is missing: cannot fetch $PKG (hiredis $WANT sources)." >&2
    echo "hiredis1: install npm (apt-get install npm) or skip the hiredis 1.x build." >&2
    exit 2
fi
for tool in make tar; do
    command -v "$tool" >/dev/null 2>&1 || { echo "hiredis1: $tool is missing" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hiredis1.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "hiredis1: npm pack $PKG"
# A private npm cache in the temp dir: no writes to ~/.npm, works as any user.
(cd "$tmp" && npm pack "$PKG" --silent --cache "$tmp/npm-cache" </dev/null >"$tmp/pack.out") || {
    echo "hiredis1: npm pack $PKG failed" >&2
    exit 1
}
tgz=$(ls "$tmp"/*.tgz 2>/dev/null | head -n 1)
[ -n "$tgz" ] || { echo "hiredis1: npm pack gave no tarball" >&2; exit 1; }
mkdir "$tmp/src"
tar -xzf "$tgz" -C "$tmp/src"
dir=$tmp/src/package/deps/hiredis
if [ ! -f "$dir/hiredis.h" ] || [ ! -f "$dir/Makefile" ]; then
    echo "hiredis1: $PKG has no deps/hiredis sources" >&2
    exit 1
fi
got=$(sed -n 's/^#define HIREDIS_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$dir/hiredis.h" | paste -sd. -)
if [ "$got" != "$WANT" ]; then
    echo "hiredis1: expected hiredis $WANT in $PKG, found $got" >&2
    exit 1
fi

jobs=$(nproc 2>/dev/null || echo 1)
# USE_SSL=1: libhiredis_ssl beside libhiredis. Clear what could leak in from the
# caller: hilock's CFLAGS (-Werror, sanitizers), a parent make's MAKEFLAGS,
# and LIBRARY_PATH, which hiredis's Makefile reads as its install subdir
# (LIBRARY_PATH?=lib) while the environment uses it for the linker.
hmake() {
    env -u CFLAGS -u LDFLAGS -u MAKEFLAGS -u MFLAGS -u LIBRARY_PATH \
        make -C "$dir" USE_SSL=1 PREFIX="$prefix" LIBRARY_PATH=lib INCLUDE_PATH=include/hiredis \
        PKGCONF_PATH=pkgconfig "$@"
}
echo "hiredis1: building hiredis $got into $prefix"
if ! { hmake -j"$jobs" >"$tmp/build.log" 2>&1 && hmake install >>"$tmp/build.log" 2>&1; }; then
    echo "hiredis1: build failed:" >&2
    tail -n 40 "$tmp/build.log" >&2
    exit 1
fi

v=$(installed_version) || { echo "hiredis1: nothing installed in $prefix" >&2; exit 1; }
[ -f "$prefix/include/hiredis/hiredis_ssl.h" ] ||
    { echo "hiredis1: hiredis_ssl.h was not installed in $prefix" >&2; exit 1; }
echo "hiredis1: installed hiredis $v with SSL in $prefix (include/hiredis, lib)"
