#!/bin/sh
# Check what building and testing hilock needs, and install what is missing
# with apt-get (Debian/Ubuntu). A quick no-op when everything is present.
#
#   sh scripts/deps.sh          check, install what is missing
#   sh scripts/deps.sh --check  check only: exit 1 and list what is missing
#   sh scripts/deps.sh --lib    only what plain `make` needs (the library,
#                               the CLI, the libevent examples)
#   sh scripts/deps.sh --tls    also what the TLS build needs (make HIREDIS=):
#                               OpenSSL's headers to build hiredis 1.x with
#                               SSL (scripts/hiredis1.sh) and the openssl
#                               tool that makes the tests' certificates
#   sh scripts/deps.sh --nemesis  also iptables, for `make nemesis`'s
#                               network faults (scripts/nemesis.sh)
#   sh scripts/deps.sh --deb    also what the Debian packages need (`make deb`,
#                               `make deb-test`, scripts/deb.sh): dpkg-dev,
#                               debhelper, fakeroot, nginx and nginx-dev to
#                               build them; redis-server, curl and man-db to
#                               test them. With --lib: only those and what
#                               plain `make` needs
#   sh scripts/deps.sh --valkey also Valkey (valkey-server, valkey-tools), for
#                               `make test SERVER=valkey`: on Debian 12 from
#                               bookworm-backports (that suite is added to
#                               apt's sources, and it says so), on Debian 13
#                               and newer from the main archive; elsewhere it
#                               prints what to install
#
# Needs: cc, make, pkg-config, redis-server, redis-cli, and the headers and
# libraries of hiredis, libevent, libuuid and Criterion. The libev and libuv
# adapters need libev and libuv; their tests and the install test also use
# ab (apache2-utils, HTTP load), man (man-db, groff) and readelf/nm. The
# nginx module (`make nginx-module`, its tests) needs Debian's nginx and
# nginx-dev (the configure tree in /usr/share/nginx/src), and bash. The
# tests check the Prometheus text with promtool (Debian's prometheus).
set -u

check_only=0
tls=0
nemesis=0
deb=0
lib_only=0
valkey=0
for arg in "$@"; do
    case $arg in
    --check) check_only=1 ;;
    --lib) lib_only=1 ;;
    --tls) tls=1 ;;
    --nemesis) nemesis=1 ;;
    --deb) deb=1 ;;
    --valkey) valkey=1 ;;
    *) echo "deps: unknown option $arg" >&2; exit 2 ;;
    esac
done

CC_BIN=${CC:-cc}

have() { command -v "$1" >/dev/null 2>&1; }

# has_lib HEADER LIBNAME: the header preprocesses and the library is found.
has_lib() {
    have "$CC_BIN" || return 1
    printf '#include <%s>\n' "$1" | "$CC_BIN" -E -x c - >/dev/null 2>&1 || return 1
    for ext in so a; do
        f=$("$CC_BIN" -print-file-name="lib$2.$ext" 2>/dev/null)
        case $f in /*) [ -e "$f" ] && return 0 ;; esac
    done
    return 1
}

missing=""
add() {
    case " $missing " in *" $1 "*) ;; *) missing="${missing:+$missing }$1" ;; esac
}

check() {
    missing=""
    have "$CC_BIN" || add build-essential
    have make || add make
    have pkg-config || add pkg-config
    has_lib hiredis/hiredis.h hiredis || add libhiredis-dev
    has_lib event2/event.h event || add libevent-dev
    has_lib uuid/uuid.h uuid || add uuid-dev
    if [ "$deb" = 1 ]; then
        # dpkg-buildpackage -us -uc -b, the Build-Depends of debian/control
        # (the module is built against nginx-dev's tree), then the test of
        # the installed packages (scripts/deb.sh).
        have dpkg-buildpackage || add dpkg-dev
        have dh || add debhelper
        have fakeroot || add fakeroot
        have nginx || [ -x /usr/sbin/nginx ] || add nginx
        [ -f /usr/share/nginx/src/conf_flags ] || add nginx-dev
        have redis-server || add redis-server
        have redis-cli || add redis-tools
        have curl || add curl
        have man || add man-db
        have readelf || add binutils
    fi
    if [ "$lib_only" = 1 ]; then
        have "$CC_BIN" || { add libhiredis-dev; add libevent-dev; add uuid-dev; }
        return
    fi
    have redis-server || add redis-server
    have redis-cli || add redis-tools
    has_lib criterion/criterion.h criterion || add libcriterion-dev
    has_lib ev.h ev || add libev-dev
    has_lib uv.h uv || add libuv1-dev
    have ab || add apache2-utils
    have man || add man-db
    have nroff || add groff-base
    have readelf || add binutils
    have valgrind || add valgrind
    # make nginx-module: Debian's nginx and its module-building tree.
    have nginx || [ -x /usr/sbin/nginx ] || add nginx
    [ -f /usr/share/nginx/src/conf_flags ] || add nginx-dev
    have bash || add bash
    # The statistics' Prometheus text is checked by promtool in the tests.
    have promtool || add prometheus
    if [ "$tls" = 1 ]; then
        has_lib openssl/ssl.h ssl || add libssl-dev
        have openssl || add openssl
    fi
    if [ "$valkey" = 1 ]; then
        have valkey-server || add valkey-server
        { have valkey-cli && have valkey-benchmark; } || add valkey-tools
    fi
    if [ "$nemesis" = 1 ]; then
        have iptables || [ -x /usr/sbin/iptables ] || add iptables
        have ip || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || add iproute2
    fi
    # Without a compiler no header can be checked: ask for all of them.
    if ! have "$CC_BIN"; then
        for p in libhiredis-dev libevent-dev uuid-dev libcriterion-dev libev-dev libuv1-dev; do
            add "$p"
        done
    fi
}

check
[ -z "$missing" ] && exit 0

echo "deps: missing packages: $missing"
if [ "$check_only" = 1 ]; then
    exit 1
fi

if ! have apt-get; then
    echo "deps: no apt-get here; install the equivalents of these Debian packages:" >&2
    echo "    $missing" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
    if ! have sudo; then
        echo "deps: not root and no sudo; as root, run:" >&2
        echo "    apt-get update && apt-get install -y --no-install-recommends $missing" >&2
        exit 1
    fi
    # No terminal (CI): never wait for a password prompt.
    if [ -t 0 ]; then SUDO="sudo"; else SUDO="sudo -n"; fi
fi

export DEBIAN_FRONTEND=noninteractive
# Valkey 8 on Debian 12 is in bookworm-backports only: add that suite (once,
# saying so) and take the valkey packages from it.
apt_target=""
case " $missing " in
*" valkey-"*)
    codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
    if [ "$codename" = bookworm ]; then
        apt_target="-t bookworm-backports"
        if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
            echo "deps: adding the suite bookworm-backports to apt's sources (Valkey 8 is there):"
            echo "    /etc/apt/sources.list.d/hilock-bookworm-backports.sources"
            printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' |
                $SUDO tee /etc/apt/sources.list.d/hilock-bookworm-backports.sources >/dev/null || exit 1
            stale_lists=1
        fi
    fi
    ;;
esac
# (Valkey's packages go in a call of their own: -t would prefer the
# backports' version of every package named with them.)
apt_install() {
    others="" valkeys=""
    for p in $missing; do
        case $p in valkey-*) valkeys="$valkeys $p" ;; *) others="$others $p" ;; esac
    done
    # shellcheck disable=SC2086 # word splitting of $SUDO, $apt_target and the lists is intended
    { [ -z "$others" ] || $SUDO apt-get install -y --no-install-recommends $others </dev/null; } &&
        { [ -z "$valkeys" ] || $SUDO apt-get install -y --no-install-recommends $apt_target $valkeys </dev/null; }
}
apt_update() {
    echo "deps: apt-get update"
    $SUDO apt-get update </dev/null
}

# Fresh machines (containers) often have no package lists: update first then.
updated=0
if [ "${stale_lists:-0}" = 1 ] || ! ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1; then
    apt_update || exit 1
    updated=1
fi
echo "deps: apt-get install $missing"
if ! apt_install; then
    if [ "$updated" = 1 ]; then
        echo "deps: apt-get install failed" >&2
        exit 1
    fi
    # Stale lists (a package moved, or the list lacks it): update once, retry.
    apt_update || exit 1
    apt_install || { echo "deps: apt-get install failed" >&2; exit 1; }
fi

wanted=$missing
check
if [ -n "$missing" ]; then
    echo "deps: still missing after installing $wanted: $missing" >&2
    exit 1
fi
echo "deps: ok"
