# Installing, the libev and libuv adapters, and what their tests need.
#
#   make install   [PREFIX=/usr/local] [DESTDIR=] [BINDIR= LIBDIR= INCLUDEDIR= MANDIR=]
#   make uninstall (the same variables)
#
# installs the static and shared library (soname libhilock.so.MAJOR, with the
# libhilock.so.MAJOR and libhilock.so links), the headers under include/hilock/
# (adapters/*.h as include/hilock/adapters/), hilock.pc, the CLI and the
# man pages: hilock(1), hilock(3) and every page of man/man3/ (a page per
# function or group, and the ".so man3/PAGE.3" links of the other names,
# installed as the files they are). DESTDIR is prepended to every path and
# never written into a file. Without DESTDIR, as root, ldconfig runs so that
# the new shared library is found at once.

BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR     ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
INSTALL    ?= install

ADAPTERS := $(wildcard adapters/*.h)
PUBLIC_HEADERS := $(wildcard include/hilock/*.h)
MANPAGES := man/hilock.1 man/hilock.3
MAN3PAGES := $(sort $(wildcard man/man3/*.3))

# Examples and tests of the other event loops.
EXAMPLE_LIBS_libev_basic := -lev
EXAMPLE_LIBS_libuv_basic := -luv
OTHER_LOOP_EXAMPLES += $(BUILD)/examples/libev_basic $(BUILD)/examples/libuv_basic
TEST_LIBS += -lev -luv
$(TESTS): adapters/libev.h adapters/libuv.h
$(BUILD)/examples/libev_basic: adapters/libev.h
$(BUILD)/examples/libuv_basic: adapters/libuv.h

# The adapter, install and single-flight suites run programs of this build:
# build them with the test runner (order-only: they do not relink it).
ECO_TEST_PROGRAMS := $(BUILD)/examples/libev_basic $(BUILD)/examples/libuv_basic \
                     $(BUILD)/examples/http_singleflight $(BUILD)/make-args
$(TESTS): | $(ECO_TEST_PROGRAMS)

# The variables that chose this build, one per line, so that the install
# suite can run `make install` against the very same build directory.
# (BUILD as given: the Makefile appends /h1 itself when HIREDIS is set.)
define ECO_MAKE_ARGS_TEXT
BUILD=$(patsubst %/h1,%,$(BUILD))
SANITIZE=$(SANITIZE)
HIREDIS=$(HIREDIS)
CC=$(CC)
CFLAGS=$(CFLAGS)
LDFLAGS=$(LDFLAGS)
endef
export ECO_MAKE_ARGS_TEXT

$(BUILD)/make-args: eco-force
	@mkdir -p $(@D)
	@printf '%s\n' "$$ECO_MAKE_ARGS_TEXT" > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

.PHONY: install uninstall eco-force
eco-force:

# The installed hilock.pc names the install paths; the build tree's copy
# ($(BUILD)/hilock.pc) is left as it is.
ECO_PC_SED = -e 's|@PREFIX@|$(PREFIX)|g' $(PC_SED)
ifneq ($(LIBDIR),$(PREFIX)/lib)
ECO_PC_SED += -e 's|^libdir=.*|libdir=$(LIBDIR)|'
endif
ifneq ($(INCLUDEDIR),$(PREFIX)/include)
ECO_PC_SED += -e 's|^includedir=.*|includedir=$(INCLUDEDIR)|'
endif

install: $(STATIC) $(SHARED) $(BUILD)/libhilock.so $(CLI) hilock.pc.in $(MANPAGES) $(MAN3PAGES)
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) \
		$(DESTDIR)$(INCLUDEDIR)/hilock/adapters \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3
	$(INSTALL) -m 755 $(CLI) $(DESTDIR)$(BINDIR)/hilock
	$(INSTALL) -m 644 $(STATIC) $(DESTDIR)$(LIBDIR)/libhilock.a
	$(INSTALL) -m 644 $(SHARED) $(DESTDIR)$(LIBDIR)/libhilock.so.$(VERSION)
	ln -sf libhilock.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libhilock.so.$(SOVER)
	ln -sf libhilock.so.$(SOVER) $(DESTDIR)$(LIBDIR)/libhilock.so
	sed $(ECO_PC_SED) hilock.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/hilock.pc.tmp
	mv $(DESTDIR)$(PKGCONFIGDIR)/hilock.pc.tmp $(DESTDIR)$(PKGCONFIGDIR)/hilock.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/hilock.pc
	$(INSTALL) -m 644 $(PUBLIC_HEADERS) $(DESTDIR)$(INCLUDEDIR)/hilock/
	$(INSTALL) -m 644 $(ADAPTERS) $(DESTDIR)$(INCLUDEDIR)/hilock/adapters/
	$(INSTALL) -m 644 man/hilock.1 $(DESTDIR)$(MANDIR)/man1/hilock.1
	$(INSTALL) -m 644 man/hilock.3 $(DESTDIR)$(MANDIR)/man3/hilock.3
	$(if $(MAN3PAGES),$(INSTALL) -m 644 $(MAN3PAGES) $(DESTDIR)$(MANDIR)/man3/)
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null 2>&1; then \
		echo ldconfig; ldconfig; fi

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/hilock
	rm -f $(DESTDIR)$(LIBDIR)/libhilock.a $(DESTDIR)$(LIBDIR)/libhilock.so \
		$(DESTDIR)$(LIBDIR)/libhilock.so.$(SOVER) $(DESTDIR)$(LIBDIR)/libhilock.so.$(VERSION)
	rm -f $(DESTDIR)$(PKGCONFIGDIR)/hilock.pc
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/hilock/,$(notdir $(PUBLIC_HEADERS)))
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/hilock/adapters/,$(notdir $(ADAPTERS)))
	rmdir $(DESTDIR)$(INCLUDEDIR)/hilock/adapters $(DESTDIR)$(INCLUDEDIR)/hilock 2>/dev/null || true
	rm -f $(DESTDIR)$(MANDIR)/man1/hilock.1 $(DESTDIR)$(MANDIR)/man3/hilock.3
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man3/,$(notdir $(MAN3PAGES)))
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null 2>&1; then \
		echo ldconfig; ldconfig; fi
