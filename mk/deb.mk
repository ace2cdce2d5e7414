# Debian packages (debian/): libhilock1, libhilock-dev, hilock and
# libnginx-mod-http-hilock, for the Debian or Ubuntu release this runs on.
#
#   make deb        build them with `dpkg-buildpackage -us -uc -b` in a copy
#                   of the tree (so this tree is never cleaned), into
#                   build/deb/
#   make deb-test   the same, then install them (root, or sudo -n), check
#                   them (a README program through pkg-config, the CLI, the
#                   man pages, Debian's nginx with the module, all against a
#                   throwaway redis-server) and remove them again (run by CI)
#
# Both install what they need first (scripts/deps.sh --lib --deb).
# scripts/deb.sh says what it checks.
.DEFAULT_GOAL := all

DEB_OUT := build/deb

.PHONY: deb deb-test deb-deps
deb-deps:
	sh scripts/deps.sh --lib --deb

deb: deb-deps
	sh scripts/deb.sh build $(DEB_OUT)

deb-test: deb-deps
	sh scripts/deb.sh test $(DEB_OUT)
