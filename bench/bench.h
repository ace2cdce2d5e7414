/* hilock-bench: shared declarations of the benchmark program's files.
 *
 *   hilock-bench.c  main: options, the order of scenarios, child processes
 *   common.c        clocks, statistics, JSON lines, shared memory, pipes,
 *                   a synchronous Redis connection (PING, INFO), lock clients
 *   polling.c       the polling baseline client: SET NX PX, retry every 10 ms
 *   contend.c       the handoff and herd scenarios (hilock and polling)
 *   scale.c         the waiters and throughput scenarios (hilock)
 */
#ifndef HILOCK_BENCH_H
#define HILOCK_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

/* ---- Options ------------------------------------------------------------ */

typedef struct bench_opts {
    char host[256];
    int port;
    char url[300];
    const char *lat_dir;       /* raw handoff latencies go here (NULL: nowhere) */
    const char *redis_benchmark; /* the redis-benchmark program */
    int quick;                 /* smaller counts, for a smoke test */
    int handoffs;              /* per handoff run (hilock) */
    int poll_handoffs;         /* per handoff run (polling baseline) */
    int reps;                  /* blocks / repetitions */
    int waiters, names;        /* waiters scenario */
    int inflight;              /* throughput scenario */
    double tp_seconds;         /* throughput: measured seconds per repetition */
    int herd_hold_us;          /* herd: hold time */
} bench_opts;

extern bench_opts g_opts;

/* ---- Time and statistics ----------------------------------------------- */

uint64_t now_ns(void);
static inline uint64_t now_us(void) { return now_ns() / 1000u; }
void sort_u64(uint64_t *v, size_t n);
/* Nearest-rank percentile of sorted values. */
uint64_t pct_u64(const uint64_t *v, size_t n, double p);
double median_d(double *v, size_t n);
/* A random number in [0, n) (xorshift, seeded per process). */
uint64_t rnd(uint64_t n);
void rnd_seed(uint64_t s);

/* ---- JSON lines on stdout ---------------------------------------------- */

void json_begin(const char *scenario);
void json_str(const char *k, const char *v);
void json_int(const char *k, long long v);
void json_num(const char *k, double v, int decimals);
void json_bool(const char *k, int v);
void json_end(void);

/* ---- Processes, shared memory, pipes ------------------------------------ */

/* Zeroed memory shared with the children forked afterwards. */
void *shm_alloc(size_t n);
void shm_free(void *p, size_t n);
/* fork(); the child dies with us (PR_SET_PDEATHSIG) and gets its own random
 * seed. Returns the pid in the parent, 0 in the child, -1 on error. */
pid_t fork_child(void);
/* Wait for a child, at most `timeout_ms`; kill it after that. Returns its
 * exit status (0 = success), or -1 if it was killed or failed. */
int wait_child(pid_t pid, int timeout_ms);
/* Read one byte, at most `timeout_ms` (blocking fd). -1 on timeout/EOF. */
int read_byte(int fd, int timeout_ms);
int write_byte(int fd, char b);
void set_nonblock(int fd);

/* Sorted latencies (ns) to DIR/handoff-TAG.dat for the plot (with -o DIR). */
void write_latencies(const char *tag, const uint64_t *sorted, size_t n);

/* ---- Event loops -------------------------------------------------------- */

/* An event base with precise timers (libevent's default clock is coarse). */
struct event_base *base_new(void);
/* Run `base` until *flag is set or `timeout_ms` passes. Returns *flag. */
int loop_until(struct event_base *base, volatile int *flag, int timeout_ms);

/* ---- A synchronous side connection to Redis ---------------------------- */

redisContext *sync_connect(void);
/* `n` PING round trips, each timed (ns) into out[0..n). 0 or -1. */
int ping_rtts(redisContext *rc, uint64_t *out, int n);

#define CMDSTAT_MAX 96
typedef struct cmdstats {
    int n;
    char name[CMDSTAT_MAX][48];
    long long calls[CMDSTAT_MAX];
} cmdstats;
int cmdstats_get(redisContext *rc, cmdstats *out);
long long cmdstats_calls(const cmdstats *s, const char *name);
/* Calls of the commands in the NULL-terminated list `names`, after - before. */
long long cmdstats_delta(const cmdstats *before, const cmdstats *after, const char *const *names);
/* Calls of every command but INFO (script-internal calls included). */
long long cmdstats_delta_all(const cmdstats *before, const cmdstats *after);
/* Connections that are subscribed to at least one channel. */
int subscriber_connections(redisContext *rc);
/* Delete the keys that match `pattern` (SCAN + UNLINK). */
void delete_keys(redisContext *rc, const char *pattern);
long long redis_int(redisContext *rc, const char *fmt, ...);

/* ---- Lock clients behind one interface (handoff and herd) -------------- */

/* Every acquire/release carries a bench_waiter; the client calls back
 * through it. The first member of a scenario's waiter struct. */
typedef struct bench_waiter bench_waiter;
struct bench_waiter {
    void (*acquired)(bench_waiter *w, void *hold, int status);
    void (*released)(bench_waiter *w, int status);
};

typedef struct lock_impl {
    const char *name;     /* "hilock", "polling" */
    /* Commands this client sends itself (the rest of commandstats' calls
     * are made from inside its scripts). NULL-terminated. */
    const char *const *commands;
    void *(*client_new)(struct event_base *base);
    /* Close and free; pending waits end without callbacks mattering. */
    void (*client_free)(void *client);
    int (*acquire)(void *client, const char *name, bench_waiter *w);
    int (*release)(void *client, void *hold, bench_waiter *w);
} lock_impl;

extern const lock_impl hilock_impl;
extern const lock_impl polling_impl;

/* ---- What the targets are checked against ------------------------------- */

typedef struct bench_results {
    int handoff_run;          /* hilock handoff */
    double ho_p50, ho_p99, ho_ping, ho_ratio;
    double poll_p50, poll_p99;
    double floor_p50, floor_nosub_p50; /* 0: not measured */
    int herd_runs;            /* hilock herd runs */
    double herd_worst_excess; /* max over runs of commands_per_handoff - (P + 2) */
    double herd_worst_cmds;
    int herd_worst_p, herd_worst_w;
    double poll_herd_worst_cmds;
    int waiters_run;
    double wv_bytes;
    int wv_errors, wv_subs, wv_waiters;
    int throughput_run;
    double tp_scripts, tp_rb, tp_ratio, tp_locks;
} bench_results;

extern bench_results g_res;

/* ---- Scenarios ------------------------------------------------------------ */

/* Each returns 0 on success; it prints its JSON line(s) itself. */
int scenario_handoff(const lock_impl *impl, int handoffs, const char *scenario_name);
int scenario_herd(const lock_impl *impl, int procs, int waiters, const char *scenario_name);
int scenario_waiters(void);
/* The blocking-hiredis floor of a handoff (see floor.c); its p50 in *p50. */
int scenario_floor(int handoffs, int self_sub, double *p50);
int scenario_throughput(void);

#endif
