#!/bin/sh
# Build ngx_http_hilock_module.so, a dynamic module for the nginx installed
# here (Debian's nginx and nginx-dev), against hilock's static library.
#
#   sh scripts/nginx-module.sh BUILD     (what `make nginx-module` runs)
#
# BUILD/libhilock.a must exist (its objects are compiled with -fPIC). The
# configure tree of nginx-dev (/usr/share/nginx/src, or $NGINX_SRC) is
# copied to BUILD/nginx/src and configured once with the flags Debian's
# nginx was built with (conf_flags), so that the module is binary-compatible
# (--with-compat); it is configured again when nginx/config changes.
# HILOCK_EXTRA_INC and HILOCK_EXTRA_LIBS name another hiredis (its include
# dir; its -L and -rpath flags) when the library was built against one
# (make HIREDIS=...): the module must see the same hiredis headers.
# Output: BUILD/nginx/ngx_http_hilock_module.so, for
#   load_module /abs/path/ngx_http_hilock_module.so;
set -eu

BUILD=${1:-build}
NGINX_SRC=${NGINX_SRC:-/usr/share/nginx/src}
top=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$top/$BUILD ;; esac
lib=$BUILD/libhilock.a
out=$BUILD/nginx
src=$out/src

[ -f "$lib" ] || { echo "nginx-module: $lib is missing (make lib first)" >&2; exit 1; }
[ -f "$NGINX_SRC/conf_flags" ] || {
    echo "nginx-module: no $NGINX_SRC/conf_flags: install nginx-dev (sh scripts/deps.sh)" >&2
    exit 1
}

mkdir -p "$out"
stamp=$src/.hilock-configured
export HILOCK_EXTRA_INC="${HILOCK_EXTRA_INC:-}" HILOCK_EXTRA_LIBS="${HILOCK_EXTRA_LIBS:-}"
want="$(cat "$NGINX_SRC/conf_flags" "$top/nginx/config" | cksum) $lib $HILOCK_EXTRA_INC $HILOCK_EXTRA_LIBS"
if [ ! -f "$src/objs/Makefile" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    rm -rf "$src"
    cp -r "$NGINX_SRC" "$src"
    # conf_flags is a bash array; configure is a POSIX sh script.
    (cd "$src" && HILOCK_INC="$top/include" HILOCK_LIB="$lib" bash -c \
        '. ./conf_flags && ./configure "${NGX_CONF_FLAGS[@]}" --add-dynamic-module="$0"' \
        "$top/nginx" >"$out/configure.log" 2>&1) || {
        echo "nginx-module: configure failed, see $out/configure.log" >&2
        tail -n 20 "$out/configure.log" >&2
        exit 1
    }
    printf '%s\n' "$want" >"$stamp"
fi
# The module depends on the library, which objs/Makefile does not know.
if [ -f "$src/objs/ngx_http_hilock_module.so" ] && [ "$lib" -nt "$src/objs/ngx_http_hilock_module.so" ]; then
    rm -f "$src/objs/ngx_http_hilock_module.so"
fi
make -C "$src" -f objs/Makefile modules
# A new file renamed into place, never cp over the old one: cp writes into
# the inode that a running nginx has mapped (master and workers dlopen'd
# it), and its code changes under it: the master died at the next reload
# and the workers with SIGSEGV at exit. A rename leaves them the old inode.
cp "$src/objs/ngx_http_hilock_module.so" "$out/.ngx_http_hilock_module.so.new"
mv -f "$out/.ngx_http_hilock_module.so.new" "$out/ngx_http_hilock_module.so"
echo "nginx-module: $out/ngx_http_hilock_module.so"
