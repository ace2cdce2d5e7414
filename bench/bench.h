/* hilock-bench: shared declarations of the benchmark program's files.
 *
 *   hilock-bench.c  main: options, the order of scenarios, child processes
 *   common.c        clocks, statistics, JSON lines, shared memory, pipes,
 *                   a synchronous Redis connection (PING, INFO), lock clients
 *   polling.c       the polling baseline client: SET NX PX, retry every 10 ms
 *   contend.c       the handoff and herd scenarios (hilock's mutex, its
 *                   fair lock, and polling: the lock_impl is the parameter)
 *   scale.c         the waiters and throughput scenarios (hilock)
 *   cost.c          the redis_cost scenario: Redis's time and CPU per
 *                   uncontended cycle of each primitive, beside the
 *                   classic protocol's (SET NX PX + compare-and-delete);
 *                   Redis's memory per name; the fleet table
 *   renew.c         the renewals scenario: many holds renewed alone and
 *                   batched
 *   prims.c         the primitives beside each other on one name
 *   cluster.c       the cluster scenarios: handoff, throughput and
 *                   cluster-bus messages on a Redis Cluster, each beside
 *                   the standalone server of the same run
 *   redlock.c       the Redlock scenarios: acquire latency and handoff on
 *                   N independent masters, each beside one master of the
 *                   same run
 *   tls.c           the TLS scenario: handoff, throughput and PING over
 *                   the server's TLS port, each beside its plain port in
 *                   the same run
 *   guard.c         the guarded_write scenario: hilock_hold_eval beside a
 *                   plain EVALSHA of the same script, alternated
 *   multi.c         the multi_lock scenario: a multi-lock of 2 and 8 names
 *                   beside that many single locks
 *   election.c      the election scenario: a leader killed or resigned,
 *                   to the new leader observed
 *   fairness.c      the fairness scenario: P processes x W loops on one
 *                   name, the shares of the grants and the waits per
 *                   process, for the mutex (bounded waiting, and always
 *                   racing), the write lock, the semaphore, the fair lock
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
    int herd_repeat_ms;        /* herd: 0, each waiter holds once; else each
                                  acquires again after its release, for this
                                  long from the start (a steady state) */
    const char *cluster_url;   /* -c: a Redis Cluster's seeds (NULL: no cluster) */
    int cluster_handoffs;      /* per cluster handoff run */
    int cluster_reps;          /* cluster scenarios: alternations */
    int bus_releases;          /* cluster bus scenario: releases per mode */
    const char *redlock_url;   /* -r redlock://...: N masters (NULL: no Redlock) */
    int redlock_reps;          /* Redlock scenarios: alternations */
    int redlock_cycles;        /* redlock_acquire: cycles per run */
    int redlock_handoffs;      /* redlock_handoff: handoffs per run */
    const char *tls_url;       /* -S rediss://...: the -u server's TLS port (NULL: none) */
    const char *tls_ca;        /* -C: the CA its certificate chains to */
    int tls_reps;              /* tls: alternations of TCP and TLS */
    int tls_handoffs;          /* tls: handoffs per run */
    int fair_procs;            /* fairness: processes (BENCH_FAIR_P) */
    int fair_loops;            /* fairness: loops per process (BENCH_FAIR_W) */
    int fair_hold_ms;          /* fairness: hold time (BENCH_FAIR_HOLD_MS) */
    double fair_seconds;       /* fairness: window per primitive (BENCH_FAIR_SECONDS) */
} bench_opts;

extern bench_opts g_opts;

/* ---- Where a scenario's clients go ------------------------------------- */

#define TARGET_NODES_MAX 8
typedef struct target_node {
    char host[256];            /* as bench_opts.host */
    int port;
} target_node;

/* One server (-u, or -S over TLS), or a Redis Cluster (-c) in one pub/sub
 * mode. */
typedef struct bench_target {
    const char *label;         /* "standalone", "classic", "sharded", "tls" */
    char url[300];             /* hilock's URL: one server, or the cluster's seeds */
    int pubsub;                /* hilock_config.pubsub */
    const char *tls_ca;        /* non-NULL: the URL is rediss:// and the side
                                  connections to node[] speak TLS too */
    int cluster;               /* 1: node[] are the cluster's masters */
    int nnodes;                /* node[0] takes the side connection (PING) */
    target_node node[TARGET_NODES_MAX];
} bench_target;

/* The -u server, filled by main. */
extern bench_target g_standalone;
/* The -S server (the same one's TLS port), filled by main; nnodes 0 without -S. */
extern bench_target g_tls;

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

redisContext *node_connect(const char *host, int port);
/* To the -u server. */
redisContext *sync_connect(void);
/* To t->node[i], over TLS when t->tls_ca is set (and TLS is built in). */
redisContext *target_connect(const bench_target *t, int i);
/* A hilock client of `t` on `base` (URL and pub/sub mode), or NULL. */
struct hilock_client *bench_hilock_client(struct event_base *base, const bench_target *t);
struct hilock_config;
/* A client of `cfg` on base's loop, or NULL (the error printed). */
struct hilock_client *bench_hilock_client_cfg(struct event_base *base, const struct hilock_config *cfg);
/* `n` PING round trips, each timed (ns) into out[0..n). 0 or -1. */
int ping_rtts(redisContext *rc, uint64_t *out, int n);

#define CMDSTAT_MAX 96
typedef struct cmdstats {
    int n;
    char name[CMDSTAT_MAX][48];
    long long calls[CMDSTAT_MAX];
    long long usec[CMDSTAT_MAX]; /* Redis's time in them (a script's: its calls included) */
} cmdstats;
int cmdstats_get(redisContext *rc, cmdstats *out);
/* The server's CPU time so far (INFO cpu: used_cpu_sys + used_cpu_user), or -1. */
double redis_cpu_seconds(redisContext *rc);
/* Run redis-benchmark (-c 50, -P pipeline, -n n, -r 100000000) on the
 * command `cmd` (NULL-terminated); its requests per second, or -1. */
double redis_benchmark_run(const char *const *cmd, long n, int pipeline);
long long cmdstats_calls(const cmdstats *s, const char *name);
/* Calls of the commands in the NULL-terminated list `names`, after - before. */
long long cmdstats_delta(const cmdstats *before, const cmdstats *after, const char *const *names);
/* Their time in Redis (us), after - before. */
long long cmdstats_usec_delta(const cmdstats *before, const cmdstats *after, const char *const *names);
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
    void *(*client_new)(struct event_base *base, const bench_target *t);
    /* Close and free; pending waits end without callbacks mattering. */
    void (*client_free)(void *client);
    int (*acquire)(void *client, const char *name, bench_waiter *w);
    int (*release)(void *client, void *hold, bench_waiter *w);
    /* NULL, or the messages the client has received on its locks'
     * channels (each one a process woken): hilock's stats.wakeups. */
    unsigned long long (*messages)(void *client);
} lock_impl;

extern const lock_impl hilock_impl;      /* the mutex: hilock_acquire */
extern const lock_impl hilock_fair_impl; /* the fair lock: hilock_fair_acquire */
extern const lock_impl polling_impl;

/* ---- What the targets are checked against ------------------------------- */

typedef struct bench_results {
    int handoff_run;          /* hilock handoff */
    double ho_p50, ho_p99, ho_ping, ho_ratio;
    int fair_ho_run;          /* fair_handoff: the fair lock and the mutex alternated */
    double fair_ho_p50, fair_ho_p99, fair_ho_mutex_p50, fair_ho_mutex_p99;
    double fair_ho_ratio;     /* median over the repetitions of fair p50 / mutex p50 */
    double fair_ho_cmds;
    double fair_floor_p50, fair_mutex_floor_p50, fair_mutex_floor_msg_p50; /* alternated too */
    double poll_p50, poll_p99;
    double floor_p50, floor_nosub_p50; /* 0: not measured */
    int herd_runs;            /* hilock herd runs */
    double herd_worst_excess; /* max over runs of commands_per_handoff - (P + 2) */
    double herd_worst_cmds;
    int herd_worst_p, herd_worst_w;
    double poll_herd_worst_cmds;
    int fair_herd_runs;       /* the fair lock's herd runs (fair_herd) */
    double fair_herd_worst_cmds;
    int fair_herd_worst_p, fair_herd_worst_w;
    int waiters_run;
    double wv_bytes;
    int wv_errors, wv_subs, wv_waiters;
    int throughput_run;
    double tp_scripts, tp_rb, tp_ratio, tp_locks;
    double herd_cpu_us;       /* the last herd's Redis CPU per handoff (INFO cpu), or -1 */
    int cost_run;             /* redis_cost: the mutex's Redis time per cycle */
    double cost_over_floor;   /* over the classic protocol's (SET NX PX + CAD) */
    double cost_over_cycles;  /* over its whole cycles, pipelined */
    double cost_over_fenced;  /* over the fenced lock's whole cycles */
    double cost_fenced_over_floor; /* the least fenced lock over the classic protocol (medians) */
    double cost_scripts_over_fenced; /* its scripts, driven as the floors are, over the fenced lock's */
    int renew_run;            /* renewals: Redis time per renewal over one alone */
    double renew_batched, renew_least; /* batched by the library; one PEXPIRE per key, batched */
    int rl_masters;
    int rl_acq_run;           /* redlock_acquire */
    double rl_acq_p50, rl_acq_one_p50, rl_acq_ratio;
    int rl_ho_run;            /* redlock_handoff */
    double rl_ho_p50, rl_ho_one_p50, rl_ho_ratio;
    int fa_run;               /* fairness, against its fair lock's run */
    int fa_procs;
    double fa_fair_tp, fa_fair_wait;
    /* [0] the mutex, [1] the write lock, [2] the mutex always racing (the before) */
    int fa_share_ok[3], fa_wait_ok[3], fa_tp_ok[3], fa_run_len[3];
    double fa_share_min[3], fa_share_max[3], fa_wait[3], fa_tp[3];
} bench_results;

extern bench_results g_res;

/* ---- Scenarios ------------------------------------------------------------ */

/* One handoff run's figures (us), for scenarios that print their own. */
typedef struct handoff_result {
    double p50, p90, p99, max;   /* p50: median of the blocks' p50 */
    double ping50, ping99;       /* PING round trips of the same processes */
    double over_ping;            /* median of the blocks' p50 / PING p50 */
    int handoffs, blocks, errors;
} handoff_result;

/* Two processes hand the lock `name` of `t` back and forth `handoffs`
 * times; PINGs go to t->node[0] (over TLS on a TLS target). 0 on success. */
int handoff_measure(const lock_impl *impl, const bench_target *t, const char *name,
                    int handoffs, handoff_result *out);

/* One uncontended throughput window (see scale.c), summed over t's nodes. */
typedef struct tp_sample {
    double locks_per_s, scripts_per_s, cpu_us_per_lock;
    double node_share_min, node_share_max; /* of the scripts, over t's nodes */
    int errors;
} tp_sample;
int tp_measure(const bench_target *t, tp_sample *out);
/* The same window with `inflight` loops (tp_measure: -k) of another
 * primitive, every loop on ONE name (but TP_MUTEX_NAMES, tp_measure's own:
 * a name per loop); a semaphore has as many permits as loops. */
enum { TP_MUTEX_NAMES, TP_MUTEX, TP_SEMAPHORE, TP_READ, TP_WRITE, TP_FAIR, TP_KINDS };
int tp_measure_kind(const bench_target *t, int kind, int inflight, tp_sample *out);
/* A kind | TP_OWN_NAMES: every loop on a name of its own (uncontended). */
#define TP_OWN_NAMES 0x100
/* What the window cost t->node[0]: its INFO commandstats before and after
 * and its CPU time (INFO cpu, user + system) over the window. */
typedef struct tp_redis {
    cmdstats before, after;
    double cpu_seconds;
    long long cycles;
} tp_redis;
/* tp_measure_kind, and (redis not NULL) what it cost node 0. */
int tp_measure_cost(const bench_target *t, int kind, int inflight, tp_sample *out, tp_redis *redis);

/* ---- Repetitions of one side of a comparison (alternated with another) ---- */

#define SERIES_MAX 16
/* ratio: each run's p50 over the p50 of the other side's run beside it;
 * ping_ratio: the same of their PING round trips. */
typedef struct ho_series {
    double p50[SERIES_MAX], p90[SERIES_MAX], p99[SERIES_MAX], ping[SERIES_MAX];
    double ratio[SERIES_MAX], ping_ratio[SERIES_MAX];
    int n, handoffs, errors;
} ho_series;
/* Add a run (none when it made no handoff); `base` is the other side's run
 * (its errors make the ratios 0). */
void ho_series_add(ho_series *s, const handoff_result *r, const handoff_result *base);

/* ratio: each window's locks/s over the other side's beside it. */
typedef struct tp_series {
    double locks[SERIES_MAX], ratio[SERIES_MAX], cpu[SERIES_MAX];
    double scripts[SERIES_MAX], share_min[SERIES_MAX], share_max[SERIES_MAX];
    int n, errors;
} tp_series;
void tp_series_add(tp_series *s, const tp_sample *x, double base_locks);
/* The median of a series' field (sorts a copy: the series is unchanged). */
double series_median(const double *v, int n);

/* Each returns 0 on success; it prints its JSON line(s) itself. */
int scenario_handoff(const lock_impl *impl, int handoffs, const char *scenario_name);
/* The fair lock's handoff beside the mutex's, `reps` runs of each alternated
 * (handoffs / reps handoffs per run): their p50 ratio and commands. */
int scenario_fair_handoff(int handoffs);
int scenario_herd(const lock_impl *impl, int procs, int waiters, const char *scenario_name);
int scenario_waiters(void);
/* The blocking-hiredis floor of a handoff (see floor.c); its p50 in *p50. */
int scenario_floor(int handoffs, int self_sub, double *p50);
/* A floor measured only (self_sub 1), of the mutex or (fair 1) of the fair
 * lock, for scenarios that alternate it with others. */
typedef struct floor_result {
    double p50, msg50;           /* us: the handoff, the release message alone */
    int handoffs, errors;
} floor_result;
int floor_measure(int handoffs, int fair, floor_result *out);
int scenario_throughput(void);
/* The mutex, the semaphore, the read-write lock and the fair lock on one
 * name (prims.c). */
int scenario_primitives(void);
/* Redis's own time and CPU per uncontended cycle of each primitive, beside
 * the classic protocol's floor; Redis's memory per name; cycles a second
 * of 1, 3 and 30 masters, hilock beside polling (cost.c). */
int scenario_redis_cost(void);
/* The renewals scenario: Redis's time and CPU per renewal of 100,000
 * holds, alone and batched (renew.c). */
int scenario_renewals(void);
/* cluster.c: on the -c cluster, beside the -u server (see there). */
int scenario_cluster_handoff(void);
int scenario_cluster_throughput(void);
int scenario_cluster_bus(void);
/* redlock.c: on the -r masters, beside the first of them alone (see there). */
int scenario_redlock_acquire(void);
int scenario_redlock_handoff(void);
/* tls.c: on the -S TLS port, beside the -u plain port (see there). Without
 * TLS built in: a line that says so, and 0. */
int scenario_tls(void);
/* fairness.c: P processes x W loops on one name, per primitive (see there). */
int scenario_fairness(void);
/* guard.c: hilock_hold_eval beside a plain EVALSHA of the same script. */
int scenario_guarded_write(void);
/* election.c: a leader's end (killed, resigned) to its successor observed. */
int scenario_election(void);
/* multi.c: a multi-lock of 2 and 8 names beside that many single locks. */
int scenario_multi_lock(void);

#endif
