# hilock — see README.md.
#
#   make                 the library, the CLI and the examples that need only
#                        libevent (hiredis, libuuid, libevent: scripts/deps.sh
#                        --lib lists them)
#   make full            also the tests (Criterion), the libev and libuv
#                        examples, the benchmark, stress and nemesis programs
#   make test, make demo install what is missing (scripts/deps.sh), then
#                        build what they run
#
#   make SANITIZE=1      ASan + UBSan build in build/san
#   make HIREDIS=/prefix build against a hiredis installed under /prefix
#                        (e.g. 1.x from scripts/hiredis1.sh), in build/h1
#   make TLS=0           no TLS even when hiredis has it (rediss:// fails)
#   make test SERVER=valkey  every suite against Valkey's programs
#                        (valkey-server, valkey-cli; scripts/deps.sh --valkey
#                        installs them) in place of Redis's

CC      ?= cc
PREFIX  ?= /usr/local
# The version lives in include/hilock/hilock.h alone.
hl_hdr_num = $(shell sed -n 's/^\#define HILOCK_$(1) *\([0-9]*\).*/\1/p' include/hilock/hilock.h)
VERSION := $(call hl_hdr_num,VERSION_MAJOR).$(call hl_hdr_num,VERSION_MINOR).$(call hl_hdr_num,VERSION_PATCH)
SOVER   := $(call hl_hdr_num,SOVERSION)

BUILD   ?= build
# The server the tests and the bench run against: redis (default) or valkey.
SERVER  ?= redis
ifneq ($(filter-out redis valkey,$(SERVER)),)
$(error SERVER=$(SERVER): redis or valkey)
endif
ifeq ($(SANITIZE),1)
override BUILD := build/san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
DEBUG ?= 1
endif
# DEBUG=1: the library checks its invariants as it runs and aborts on a
# violation (a stranded waiter); on in sanitizer builds.
ifeq ($(DEBUG),1)
DBGFLAGS := -DHILOCK_DEBUG
endif
ifneq ($(HIREDIS),)
override BUILD := $(BUILD)/h1
HR_CFLAGS := -I$(HIREDIS)/include
HR_LIBS   := -L$(HIREDIS)/lib -Wl,-rpath,$(abspath $(HIREDIS))/lib
endif

# TLS (rediss://) when the hiredis built against has hiredis_ssl (1.0 on,
# built with USE_SSL=1); Debian 12's 0.14.1 has none. Checked by compiling
# the include, so a distro's hiredis 1.x with SSL counts as well as HIREDIS=.
ifeq ($(TLS),)
TLS := $(shell printf '\043include <hiredis/hiredis_ssl.h>\n' | $(CC) $(HR_CFLAGS) -E -x c - >/dev/null 2>&1 && echo 1 || echo 0)
endif
ifeq ($(TLS),1)
TLS_CFLAGS := -DHILOCK_HAVE_TLS
TLS_LIBS   := -lhiredis_ssl -lssl -lcrypto
endif
# hilock.pc's version and TLS libraries, for the build tree's copy and the
# installed one (mk/ecosystem.mk) alike.
PC_SED = -e 's|@VERSION@|$(VERSION)|g' -e 's|@TLS_LIBS@ |$(TLS_LIBS)$(if $(TLS_LIBS), )|'

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes
CFLAGS  ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(SANFLAGS) $(DBGFLAGS) $(HR_CFLAGS) $(TLS_CFLAGS) -Iinclude -I. -I$(BUILD)/gen
# The library's own files: every function has a prototype in a header.
LIB_CFLAGS := $(ALL_CFLAGS) -Isrc -Wmissing-prototypes -fPIC -fvisibility=hidden
# The library needs hiredis and libuuid; programs add their event loop.
LDLIBS_SO  := $(HR_LIBS) $(TLS_LIBS) -lhiredis -luuid -lpthread
LDLIBS_LIB := $(LDLIBS_SO) -levent
LDFLAGS ?=
ALL_LDFLAGS := $(LDFLAGS) $(SANFLAGS)

# src/ is layered: loop <- net <- topo <- core <- prim, client.c on top
# (docs/ARCHITECTURE.md).
LIB_SRC := $(wildcard src/*.c src/*/*.c)
LIB_OBJ := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRC)) $(BUILD)/obj/scripts.o
LUA     := $(wildcard src/prim/lua/*.lua)
HDRS    := $(wildcard include/hilock/*.h adapters/*.h src/*.h src/*/*.h)

STATIC  := $(BUILD)/libhilock.a
SHARED  := $(BUILD)/libhilock.so.$(VERSION)
CLI     := $(BUILD)/hilock
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
# Tests live in a folder per subject (tests/mutex, tests/cluster, ...);
# tests/stress and tests/nemesis are programs of their own (mk/).
TEST_DIRS := $(filter-out tests/support/ tests/stress/ tests/nemesis/,$(sort $(dir $(wildcard tests/*/*.c))))
TEST_SRC := $(wildcard $(addsuffix *.c,$(TEST_DIRS)) tests/support/*.c)
TESTS   := $(BUILD)/hilock-tests
# Extension points for mk/*.mk fragments (benchmarks, install, adapters):
#   EXTRA_TARGETS  built by `make`;  TEST_LIBS  more libraries for the tests;
#   EXAMPLE_LIBS_<name>  more libraries for examples/<name>.c
EXTRA_TARGETS :=
TEST_LIBS :=
#   OTHER_LOOP_EXAMPLES  examples of loops other than libevent (make full)
OTHER_LOOP_EXAMPLES :=
#   TEST_TARGETS  built by `make test` too (the nginx module)
TEST_TARGETS :=
.DEFAULT_GOAL := all
-include $(sort $(wildcard mk/*.mk))

.PHONY: all full lib clean deps test demo valgrind
all: lib $(CLI) $(filter-out $(OTHER_LOOP_EXAMPLES),$(EXAMPLES))
full: all $(OTHER_LOOP_EXAMPLES) $(TESTS) $(EXTRA_TARGETS)
lib: $(STATIC) $(SHARED) $(BUILD)/libhilock.so $(BUILD)/hilock.pc

$(BUILD)/gen/scripts.c: $(LUA) scripts/embed-lua.sh
	@mkdir -p $(@D)
	sh scripts/embed-lua.sh $(LUA) > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/%.o: src/%.c $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(LIB_CFLAGS) -c $< -o $@

$(BUILD)/obj/scripts.o: $(BUILD)/gen/scripts.c $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(LIB_CFLAGS) -c $< -o $@

$(STATIC): $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

$(SHARED): $(LIB_OBJ) src/hilock.map
	$(CC) -shared -Wl,-soname,libhilock.so.$(SOVER) -Wl,--version-script=src/hilock.map \
	    $(ALL_LDFLAGS) -o $@ $(LIB_OBJ) $(LDLIBS_SO)

$(BUILD)/libhilock.so: $(SHARED)
	ln -sf libhilock.so.$(VERSION) $(BUILD)/libhilock.so.$(SOVER)
	ln -sf libhilock.so.$(VERSION) $@

$(BUILD)/hilock.pc: hilock.pc.in Makefile
	sed -e 's|@PREFIX@|$(PREFIX)|g' $(PC_SED) $< > $@

# Programs link the static library so they run from the build tree.
# inspect.c alone reaches into src/ (-Isrc): for the library's URL parser.
$(BUILD)/obj/tools/inspect.o: tools/inspect.c tools/inspect.h tools/tlsopt.h tools/urlshow.h $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Isrc -c $< -o $@

$(CLI): tools/hilock.c tools/inspect.h tools/tlsopt.h tools/urlshow.h $(BUILD)/obj/tools/inspect.o $(STATIC) $(HDRS)
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/obj/tools/inspect.o $(STATIC) $(LDLIBS_LIB)

$(BUILD)/examples/%: examples/%.c $(STATIC) $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(STATIC) $(LDLIBS_LIB) $(EXAMPLE_LIBS_$*)

# Unit tests reach private functions, so they link the objects directly.
$(TESTS): $(TEST_SRC) $(wildcard tests/*/*.h) $(LIB_OBJ) $(HDRS) | $(CLI)
	$(CC) $(ALL_CFLAGS) -Isrc -Itests $(ALL_LDFLAGS) -o $@ $(TEST_SRC) $(LIB_OBJ) $(LDLIBS_LIB) $(TEST_LIBS) -lcriterion

# A HIREDIS= build may have TLS: its tests need openssl, hiredis1.sh libssl-dev.
deps:
	sh scripts/deps.sh $(if $(HIREDIS),--tls) $(if $(filter valkey,$(SERVER)),--valkey)

test: deps
	$(MAKE) full $(TEST_TARGETS)
	HILOCK_SERVER=$(SERVER) sh scripts/run-tests.sh $(BUILD)

demo: deps
	$(MAKE) all
	sh scripts/demo.sh $(BUILD)

# The examples under valgrind: any error or leak fails (run by CI).
VALGRIND := valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=9
valgrind: deps
	$(MAKE) all
	DEMO_WRAP="$(VALGRIND)" DEMO_WAITERS=500 sh scripts/demo.sh $(BUILD)

clean:
	rm -rf build
