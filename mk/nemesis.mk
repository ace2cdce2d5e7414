# `make nemesis`: real network faults (partitions, one-way drops, a
# blackholed connection, packet loss, delay and jitter through a userspace
# proxy, SIGSTOP, kill -9, clock rate and steps) against real redis-servers and client processes in network
# namespaces, their histories checked against what hilock promises; a
# results matrix in build/nemesis/results.json (docs/RELIABILITY.md).
# Needs root; scripts/nemesis.sh says "skipped" otherwise. Not in `make test`.
#   NEMESIS=short       the most telling cases, a few minutes
#   NEMESIS=full        every case (the default)
#   NEMESIS_CASES=ID    only the cases whose id contains ID
#   NEMESIS_REPEAT=N    run each cell N times (-r N): a cell fails when any
#                       run breaks a promise; the worst figures are shown
#   NEMESIS_ARGS=...    more options for build/hilock-nemesis (-k: keep
#                       every log;
#                       -r N: as NEMESIS_REPEAT; -M: record the master's
#                       commands (MONITOR) into each case's monitor.log;
#                       -d docs/RELIABILITY.md: write the table there)
NEMESIS_BIN := $(BUILD)/hilock-nemesis
NEMESIS_SKEW := $(BUILD)/nemesis/libskewclock.so
NEMESIS_SRC := $(filter-out tests/nemesis/skewclock.c,$(wildcard tests/nemesis/*.c))
EXTRA_TARGETS += $(NEMESIS_BIN) $(NEMESIS_SKEW)
NEMESIS ?= full

$(NEMESIS_BIN): $(NEMESIS_SRC) tests/nemesis/nemesis.h tests/support/harness.c tests/support/harness.h $(STATIC) $(HDRS)
	$(CC) $(ALL_CFLAGS) -Itests $(ALL_LDFLAGS) -o $@ $(NEMESIS_SRC) tests/support/harness.c $(STATIC) $(LDLIBS_LIB)

# The clock of a redis-server, skewed by LD_PRELOAD (tests/nemesis/skewclock.c).
$(NEMESIS_SKEW): tests/nemesis/skewclock.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -fPIC -shared -o $@ $< -ldl -lpthread

.PHONY: nemesis
nemesis: $(NEMESIS_BIN) $(NEMESIS_SKEW)
	sh scripts/nemesis.sh $(BUILD) $(NEMESIS)
