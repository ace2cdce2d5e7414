# Benchmarks (see BENCHMARKS.md).
#   make bench        build/hilock-bench against a throwaway redis-server
#                     (valkey-server with SERVER=valkey; bench-nginx stays on
#                     Redis),
#                     a throwaway Redis Cluster (3 masters + 3 replicas) and
#                     5 throwaway Redlock masters, results in $(BUILD)/bench/
#                     (results.jsonl, the plots' data files and the plots
#                     handoff.png, herd.png, waiters.png, fairness.png)
#   make bench-peers  the same handoff and herd beside npm's redis-semaphore
#                     and redlock, and the Redlock scenarios beside npm's
#                     redlock on 5 masters (needs node and npm)
#   make bench-nginx  ngx_http_hilock_module in a throwaway nginx on a
#                     throwaway redis-server: each location with `hilock`
#                     beside the same one without, same run; then two nginx
#                     on shared hot keys driven at once, each one's lock
#                     wait p99 and max (mutex, starve=off, fair)
#                     ($(BUILD)/bench/nginx.jsonl); `make bench` runs it too
#   make bench-tls HIREDIS=/tmp/hiredis1
#                     the tls scenario alone: hilock's handoff, throughput
#                     and PING over a throwaway server's TLS port beside its
#                     plain port, alternated ($(BUILD)/bench/tls.jsonl); a
#                     build without TLS (hiredis 0.14) skips it. In such a
#                     build `make bench` runs it too
#   make bench-servers
#                     the headline figures (handoff, throughput, the mutex's
#                     Redis cost) on a throwaway redis-server and a throwaway
#                     valkey-server in one run, alternated (SERVERS_REPS,
#                     default 3), each beside its own baselines; medians and
#                     Valkey / Redis ($(BUILD)/bench/servers.jsonl); installs
#                     Valkey's packages (deps.sh --valkey)
#   make bench-plots  the plots again, from the data files in $(BENCH_OUT),
#                     into bench/plots/ (the ones BENCHMARKS.md shows): run
#                     it after a full `make bench` (and `make bench-peers`,
#                     whose latencies handoff.png then shows); needs gnuplot
#   BENCH_QUICK=1     any of them as a smoke test: small counts (hilock-bench -q)
#   BENCH_SCALE_MAX=1000000
#                     the memory plot's largest run (default 100000; 10000
#                     with BENCH_QUICK=1): 1,000, 10,000, 100,000, 1,000,000
#                     waiters, 100 per name; a million take 1.5 to 2.5 min
#                     and ~310 MB, hence opt-in
#   BENCH_FAIR_P=3 BENCH_FAIR_W=20 BENCH_FAIR_HOLD_MS=5 BENCH_FAIR_SECONDS=6
#                     the fairness scenario's processes, loops per process,
#                     hold time and window per primitive (hilock-bench reads
#                     them from the environment)
# Included by the Makefile before its own rules: keep `all` the default goal.
.DEFAULT_GOAL := all

BENCH     := $(BUILD)/hilock-bench
BENCH_SRC := $(wildcard bench/*.c)
BENCH_OUT ?= $(BUILD)/bench
BENCH_QUICK ?= 0
BENCH_SCALE_MAX ?=
BENCH_PLOTS ?= bench/plots
EXTRA_TARGETS += $(BENCH)

# -Isrc: the benchmark reads the embedded acquire script (prim/prim.h) to
# run it under redis-benchmark.
$(BENCH): $(BENCH_SRC) $(wildcard bench/*.h) $(STATIC) $(HDRS)
	$(CC) $(ALL_CFLAGS) -Isrc $(ALL_LDFLAGS) -o $@ $(BENCH_SRC) $(STATIC) $(LDLIBS_LIB)

.PHONY: bench bench-peers bench-nginx bench-tls bench-servers bench-plots
# The nginx part runs even when the library's fails; either fails the target.
bench: deps
	$(MAKE) $(BENCH)
	$(MAKE) nginx-module
	HILOCK_SERVER=$(SERVER) BENCH_QUICK=$(BENCH_QUICK) BENCH_SCALE_MAX=$(BENCH_SCALE_MAX) \
	    sh scripts/bench.sh $(BENCH) $(BENCH_OUT); rc=$$?; \
	BENCH_QUICK=$(BENCH_QUICK) sh scripts/bench-nginx.sh $(BUILD) $(BENCH_OUT) || rc=1; \
	exit $$rc

# hilock-bench too: its handoff scenario is run beside the module's figures.
bench-nginx: deps
	$(MAKE) $(BENCH)
	$(MAKE) nginx-module
	BENCH_QUICK=$(BENCH_QUICK) sh scripts/bench-nginx.sh $(BUILD) $(BENCH_OUT)

bench-peers: deps
	$(MAKE) $(BENCH)
	BENCH_QUICK=$(BENCH_QUICK) sh scripts/bench-peers.sh $(BENCH) $(BENCH_OUT)

# deps: with HIREDIS=, the TLS packages too (openssl makes the certificates).
bench-tls: deps
	$(MAKE) $(BENCH)
	BENCH_QUICK=$(BENCH_QUICK) sh scripts/bench.sh --tls $(BENCH) $(BENCH_OUT)

bench-servers:
	$(MAKE) deps SERVER=valkey
	$(MAKE) $(BENCH)
	BENCH_QUICK=$(BENCH_QUICK) sh scripts/bench-servers.sh $(BENCH) $(BENCH_OUT)

# No build, no server: gnuplot on the data files of the last runs.
bench-plots:
	sh scripts/bench.sh --plots $(BENCH_OUT) $(BENCH_PLOTS)
