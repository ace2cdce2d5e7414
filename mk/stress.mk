# `make stress`: several processes, thousands of waiters, random faults for a
# bounded time (STRESS_SECONDS, at most 120, for the whole run), then a
# report. Not in `make test`.
#   STRESS_MODE=standalone  one server: connection kills, stalls, restarts
#   STRESS_MODE=prims       the same on semaphores (3 permits, 1 or 2 per
#                           acquire), read-write locks (1 writer in 10), fair
#                           locks and mutexes: permits in use, writers alone,
#                           one holder, fences checked (tests/stress/prims.c)
#   STRESS_MODE=cluster     3 masters + 3 replicas: slot migrations step by
#                           step, redis-cli reshards, CLUSTER FAILOVER,
#                           kill -9 of a master (half of them after its
#                           replication was cut), connection kills
#   STRESS_MODE=sentinel    a master, its replica, 3 sentinels: SENTINEL
#                           FAILOVER (writes paused, and plain), kill -9 of
#                           the master or of a sentinel, connection kills
#   STRESS_MODE=redlock     5 independent masters, 4x the names: kill -9 of
#                           one or two, restarted empty after more than a
#                           lease, DEBUG SLEEP stalls, SCRIPT FLUSH,
#                           connection kills
#   STRESS_MODE=nginx       3 nginx (2 workers each) with the module before a
#                           backend that records overlaps and fences:
#                           reloads, kill -9 of a worker, connection kills,
#                           clients that go away
#   STRESS_MODE=all         the default: every mode in turn (standalone 10%
#                           of the time, prims 15%, cluster 25%, sentinel
#                           20%, redlock 20%, nginx 10%)
#   STRESS_MODE=both        standalone (30%), then cluster (70%)
STRESS := $(BUILD)/hilock-stress
STRESS_SRC := $(wildcard tests/stress/*.c)
EXTRA_TARGETS += $(STRESS)
STRESS_SECONDS ?= 110
STRESS_MODE ?= all

STRESS_SUPPORT := tests/support/harness.c tests/support/sentinel.c tests/support/nginx.c

$(STRESS): $(STRESS_SRC) $(STRESS_SUPPORT) tests/stress/stress.h tests/support/harness.h tests/support/sentinelenv.h tests/support/nginx.h $(STATIC) $(HDRS)
	$(CC) $(ALL_CFLAGS) -Itests $(ALL_LDFLAGS) -o $@ $(STRESS_SRC) $(STRESS_SUPPORT) $(STATIC) $(LDLIBS_LIB)

.PHONY: stress
stress: deps
	$(MAKE) $(STRESS) nginx-module
	$(STRESS) -m $(STRESS_MODE) -s $(STRESS_SECONDS)
