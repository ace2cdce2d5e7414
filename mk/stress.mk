# `make stress`: several processes, thousands of waiters, random faults for a
# bounded time (STRESS_SECONDS, at most 120, for the whole run), then a
# report. Not in `make test`.
#   STRESS_MODE=standalone  one server: connection kills, stalls, restarts
#   STRESS_MODE=cluster     3 masters + 3 replicas: slot migrations step by
#                           step, redis-cli reshards, CLUSTER FAILOVER,
#                           kill -9 of a master (half of them after its
#                           replication was cut), connection kills
#   STRESS_MODE=both        the default: standalone (30% of the time), then
#                           cluster
STRESS := $(BUILD)/hilock-stress
STRESS_SRC := $(wildcard tests/stress/*.c)
EXTRA_TARGETS += $(STRESS)
STRESS_SECONDS ?= 110
STRESS_MODE ?= both

$(STRESS): $(STRESS_SRC) tests/stress/stress.h tests/support/harness.c tests/support/harness.h $(STATIC) $(HDRS)
	$(CC) $(ALL_CFLAGS) -Itests $(ALL_LDFLAGS) -o $@ $(STRESS_SRC) tests/support/harness.c $(STATIC) $(LDLIBS_LIB)

.PHONY: stress
stress: deps
	$(MAKE) $(STRESS)
	$(STRESS) -m $(STRESS_MODE) -s $(STRESS_SECONDS)
