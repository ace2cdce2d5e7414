#!/bin/sh
# Build hiredis 1.2.0 into PREFIX (default /tmp/hiredis1), so that hilock can
# be built and tested against the 1.x API as well as the distro's 0.14:
#
#   sh scripts/hiredis1.sh /tmp/hiredis1
#   make test HIREDIS=/tmp/hiredis1        (builds in build/h1)
#
# The sources come from the npm package redis-fast-driver@2.2.6, whose
# deps/hiredis/ holds hiredis 1.2.0. They are unpacked into a temporary dir
# and never copied into this repository. Built without TLS (USE_SSL unset).
#
# Exit status: 0 built (or already there), 1 the build failed, 2 no npm.
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
   ls "$prefix"/lib/libhiredis.so* >/dev/null 2>&1; then
    echo "hiredis1: hiredis $v already in $prefix"
    exit 0
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
# USE_SSL unset: no TLS library needed. Clear what could leak in from the
# caller: hilock's CFLAGS (-Werror, sanitizers), a parent make's MAKEFLAGS,
# and LIBRARY_PATH, which hiredis's Makefile reads as its install subdir
# (LIBRARY_PATH?=lib) while the environment uses it for the linker.
hmake() {
    env -u USE_SSL -u CFLAGS -u LDFLAGS -u MAKEFLAGS -u MFLAGS -u LIBRARY_PATH \
        make -C "$dir" PREFIX="$prefix" LIBRARY_PATH=lib INCLUDE_PATH=include/hiredis \
        PKGCONF_PATH=pkgconfig "$@"
}
echo "hiredis1: building hiredis $got into $prefix"
if ! { hmake -j"$jobs" >"$tmp/build.log" 2>&1 && hmake install >>"$tmp/build.log" 2>&1; }; then
    echo "hiredis1: build failed:" >&2
    tail -n 40 "$tmp/build.log" >&2
    exit 1
fi

v=$(installed_version) || { echo "hiredis1: nothing installed in $prefix" >&2; exit 1; }
echo "hiredis1: installed hiredis $v in $prefix (include/hiredis, lib)"
