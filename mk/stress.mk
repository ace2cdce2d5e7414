# `make stress`: several processes, thousands of waiters, random faults for a
# bounded time (STRESS_SECONDS, at most 120), then a report. Not in `make test`.
STRESS := $(BUILD)/hilock-stress
EXTRA_TARGETS += $(STRESS)
STRESS_SECONDS ?= 110

$(STRESS): tests/stress/stress.c tests/support/harness.c tests/support/harness.h $(STATIC) $(HDRS)
	$(CC) $(ALL_CFLAGS) -Itests $(ALL_LDFLAGS) -o $@ tests/stress/stress.c tests/support/harness.c $(STATIC) $(LDLIBS_LIB)

.PHONY: stress
stress: deps
	$(MAKE) $(STRESS)
	$(STRESS) -s $(STRESS_SECONDS)
