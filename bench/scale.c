/* The scale scenarios, hilock only, each in a child process of its own:
 *
 * waiters: 100,000 waiters on 1,000 names in one process and one client.
 *   A second client (the "blocker") holds every name first, so all the
 *   waiters really wait: each name's first try fails, the name subscribes,
 *   the subscription's confirmation retries once, and then nothing moves.
 *   In that steady state we take the memory cost, as mallinfo2() bytes in
 *   use (the heap: every allocation of hilock and hiredis, including their
 *   buffers) and as the RSS, both as deltas from just before the acquires,
 *   divided by the number of waiters. The benchmark's own per-waiter state
 *   is allocated before that point. Then the blocker releases everything
 *   and each waiter, once granted, releases at once: all must be served,
 *   with fencing tokens increasing per name and no error.
 *
 * throughput: uncontended acquire + release cycles, each of IN_FLIGHT
 *   workers on a name of its own, back to back, for a few seconds; beside
 *   it, redis-benchmark -P 16 runs hilock's own acquire script (EVALSHA,
 *   each call on a fresh random key, like a free lock) against the same
 *   server. Alternated, several times; medians reported. The window itself
 *   (tp_measure) also runs against a cluster's masters (cluster.c). */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "hilock/hilock.h"
#include <hilock/adapters/libevent.h>
#include "prim/prim.h" /* hl_script_mutex_acquire: the script redis-benchmark runs */

/* ---- Memory ----------------------------------------------------------- */

static size_t heap_in_use(void) {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static size_t rss_bytes(void) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL) return 0;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    fclose(f);
    return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}

/* ---- waiters -------------------------------------------------------------- */

struct wv_waiter {
    struct wv_run *run;
    unsigned name;
    unsigned char granted, released;
};

struct wv_run {
    struct event_base *base;
    hilock_client *client, *blocker;
    int nwaiters, nnames;
    char (*names)[48];
    struct wv_waiter *waiters;
    hilock_hold **blocks;
    struct wv_run **bdata;
    uint64_t *last_fence;
    int blocked, blocker_released;
    int granted, released, errors, fence_errors;
    volatile int all_blocked, all_done, warm;
    uint64_t last_progress;
};

static void wv_err(struct wv_run *r, const char *what, int status) {
    if (r->errors++ < 5) fprintf(stderr, "waiters: %s: %s\n", what, hilock_strerror(status));
}

static void wv_block_acquired(hilock_hold *h, int status, void *data) {
    /* data is &run->bdata[i]: its index is the name's */
    struct wv_run *r = *(struct wv_run **)data;
    if (status != 0) { wv_err(r, "blocker acquire", status); return; }
    r->blocks[(struct wv_run **)data - r->bdata] = h;
    if (++r->blocked == r->nnames) r->all_blocked = 1;
}

static void wv_released(int status, void *data) {
    struct wv_waiter *w = data;
    struct wv_run *r = w->run;
    if (status != 0) wv_err(r, "release", status);
    w->released = 1;
    if (++r->released == r->nwaiters) r->all_done = 1;
}

static void wv_acquired(hilock_hold *h, int status, void *data) {
    struct wv_waiter *w = data;
    struct wv_run *r = w->run;
    if (status != 0) {
        wv_err(r, "acquire", status);
        if (++r->released == r->nwaiters) r->all_done = 1;
        return;
    }
    w->granted = 1;
    r->granted++;
    r->last_progress = now_ns();
    uint64_t fence = hilock_hold_fence(h);
    if (fence <= r->last_fence[w->name]) r->fence_errors++;
    r->last_fence[w->name] = fence;
    int rc = hilock_release(h, wv_released, w);
    if (rc != 0) {
        wv_err(r, "hilock_release", rc);
        if (++r->released == r->nwaiters) r->all_done = 1;
    }
}

static void wv_blocker_released(int status, void *data) {
    struct wv_run *r = data;
    if (status != 0) wv_err(r, "blocker release", status);
    r->blocker_released++;
}

static void wv_warm_released(int status, void *data) {
    struct wv_run *r = data;
    r->warm = status == 0 ? 2 : -1;
}

static void wv_warm_acquired(hilock_hold *h, int status, void *data) {
    struct wv_run *r = data;
    if (status != 0 || hilock_release(h, wv_warm_released, r) != 0) r->warm = -1;
}

static hilock_client *wv_client(struct event_base *base) {
    return bench_hilock_client(base, &g_standalone);
}

/* Channels of this run that Redis knows a subscriber of. */
static long long wv_channels(redisContext *rc) {
    char pat[96];
    snprintf(pat, sizeof pat, "hilock:{hb-w:%ld:*}:ch", (long)getpid());
    redisReply *rep = redisCommand(rc, "PUBSUB CHANNELS %s", pat);
    long long n = rep && rep->type == REDIS_REPLY_ARRAY ? (long long)rep->elements : -1;
    if (rep) freeReplyObject(rep);
    return n;
}

struct wv_shm {
    double bytes;
    int errors, subs, waiters;
};

static int wv_child(struct wv_shm *out) {
    struct wv_run r;
    memset(&r, 0, sizeof r);
    r.nwaiters = g_opts.waiters;
    r.nnames = g_opts.names;
    r.base = base_new();
    r.names = calloc((size_t)r.nnames, sizeof *r.names);
    r.waiters = calloc((size_t)r.nwaiters, sizeof *r.waiters);
    r.blocks = calloc((size_t)r.nnames, sizeof *r.blocks);
    r.last_fence = calloc((size_t)r.nnames, sizeof *r.last_fence);
    struct wv_run **bdata = r.bdata = calloc((size_t)r.nnames, sizeof *bdata);
    redisContext *rc = sync_connect();
    if (!r.base || !r.names || !r.waiters || !r.blocks || !r.last_fence || !bdata || !rc) return 1;
    r.client = wv_client(r.base);
    r.blocker = wv_client(r.base);
    if (r.client == NULL || r.blocker == NULL) return 1;
    for (int i = 0; i < r.nnames; i++)
        snprintf(r.names[i], sizeof r.names[i], "hb-w:%ld:%d", (long)getpid(), i);
    for (int i = 0; i < r.nwaiters; i++) {
        r.waiters[i].run = &r;
        r.waiters[i].name = (unsigned)(i % r.nnames);
    }

    /* The blocker takes every name. (The index of bdata[i] is the name.) */
    for (int i = 0; i < r.nnames; i++) {
        bdata[i] = &r;
        hilock_acquire(r.blocker, r.names[i], NULL, wv_block_acquired, &bdata[i], NULL);
    }
    loop_until(r.base, &r.all_blocked, 20000);
    /* And the waiters' client is connected and has its script loaded. */
    char warm[64];
    snprintf(warm, sizeof warm, "hb-warm:%ld", (long)getpid());
    hilock_acquire(r.client, warm, NULL, wv_warm_acquired, &r, NULL);
    volatile int *wflag = &r.warm;
    uint64_t dl = now_ns() + 10000000000ull;
    while (*wflag == 0 && now_ns() < dl) event_base_loop(r.base, EVLOOP_ONCE);
    if (!r.all_blocked || r.warm != 2) { fprintf(stderr, "waiters: setup failed\n"); return 1; }

    /* Baseline, then every acquire at once. */
    malloc_trim(0);
    size_t heap0 = heap_in_use(), rss0 = rss_bytes();
    uint64_t t0 = now_ns();
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    for (int i = 0; i < r.nwaiters; i++) {
        int e = hilock_acquire(r.client, r.names[r.waiters[i].name], &o, wv_acquired,
                               &r.waiters[i], NULL);
        if (e != 0) { wv_err(&r, "hilock_acquire", e); r.released++; }
    }
    uint64_t t_issued = now_ns();

    /* Steady state: every name subscribed and its tries answered. */
    int steady = 0;
    uint64_t until = now_ns() + 20000000000ull;
    while (now_ns() < until) {
        int never = 0;
        loop_until(r.base, &never, 50);
        if (wv_channels(rc) >= r.nnames) { steady = 1; break; }
    }
    int never = 0;
    loop_until(r.base, &never, 300);
    size_t heap1 = heap_in_use(), rss1 = rss_bytes();
    int subs = subscriber_connections(rc);
    long long channels = wv_channels(rc);

    /* Let them through. */
    uint64_t t1 = now_ns();
    r.last_progress = t1;
    for (int i = 0; i < r.nnames; i++)
        if (r.blocks[i] && hilock_release(r.blocks[i], wv_blocker_released, &r) != 0)
            wv_err(&r, "blocker release", -1);
    while (!r.all_done && now_ns() - r.last_progress < 20000000000ull) {
        loop_until(r.base, &r.all_done, 1000);
    }
    uint64_t t2 = now_ns();

    int unserved = 0;
    for (int i = 0; i < r.nwaiters; i++)
        if (!r.waiters[i].granted || !r.waiters[i].released) unserved++;
    int errors = r.errors + r.fence_errors + unserved + (steady ? 0 : 1);
    double per = (double)(heap1 > heap0 ? heap1 - heap0 : 0) / r.nwaiters;
    double rss_per = (double)(rss1 > rss0 ? rss1 - rss0 : 0) / r.nwaiters;
    const char *measure = "mallinfo2 uordblks+hblkhd delta / waiters, all waiting";
    if (heap1 <= heap0) { /* another allocator (a sanitizer?): glibc's counters saw nothing */
        per = rss_per;
        measure = "RSS delta / waiters, all waiting (mallinfo2 saw no allocation)";
    }
    double serve_s = (double)(t2 - t1) / 1e9;

    json_begin("waiters");
    json_str("client", "hilock");
    json_int("waiters", r.nwaiters);
    json_int("names", r.nnames);
    json_num("bytes_per_waiter", per, 1);
    json_str("bytes_measure", measure);
    json_num("rss_bytes_per_waiter", rss_per, 1);
    json_int("errors", errors);
    json_int("subscriber_connections", subs);
    json_int("channels", channels);
    json_int("served", r.granted);
    json_int("fence_errors", r.fence_errors);
    json_num("acquire_call_us", (double)(t_issued - t0) / 1e3 / r.nwaiters, 3);
    json_num("serve_seconds", serve_s, 2);
    json_num("handoffs_per_s", serve_s > 0 ? r.granted / serve_s : 0, 0);
    json_end();
    out->bytes = per;
    out->errors = errors;
    out->subs = subs;
    out->waiters = r.nwaiters;

    char pat[64];
    snprintf(pat, sizeof pat, "hilock:{hb-w:%ld:*", (long)getpid());
    delete_keys(rc, pat);
    hilock_client_free(r.client);
    hilock_client_free(r.blocker);
    redisFree(rc);
    event_base_free(r.base);
    return errors == 0 ? 0 : 1;
}

int scenario_waiters(void) {
    struct wv_shm *s = shm_alloc(sizeof *s);
    if (s == NULL) return 1;
    s->errors = -1;
    pid_t pid = fork_child();
    if (pid < 0) return 1;
    if (pid == 0) _exit(wv_child(s));
    /* 2 min, and 1 ms more per 5 waiters: a million take ~2 min to serve
     * on 2 vCPUs (BENCH_SCALE_MAX=1000000 in scripts/bench.sh). */
    int rc = wait_child(pid, 120000 + g_opts.waiters / 5) == 0 ? 0 : 1;
    g_res.waiters_run = 1;
    g_res.wv_bytes = s->bytes;
    g_res.wv_errors = s->errors < 0 ? 1 : s->errors;
    g_res.wv_subs = s->subs;
    g_res.wv_waiters = s->waiters;
    shm_free(s, sizeof *s);
    return rc;
}

/* ---- throughput ------------------------------------------------------------- */

struct tp_shm {
    volatile long long cycles;   /* in the measured window */
    volatile long long scripts;  /* EVALSHA + EVAL calls in the window (all nodes) */
    volatile long long node_scripts[TARGET_NODES_MAX]; /* the same per node */
    volatile double seconds;
    volatile int errors;
    volatile double cpu_seconds; /* this process's user + system time in the window */
    tp_redis redis;              /* node 0's commandstats and CPU (tp_measure_cost) */
};

struct tp_worker {
    struct tp_run *run;
    char name[48];
};

struct tp_run {
    hilock_client *client;
    struct tp_worker *workers;
    int kind, nworkers;        /* TP_*; the loops in flight */
    int measuring;
    long long cycles;
    int errors;
    volatile int stop;
    int outstanding;
};

static void tp_acquired(hilock_hold *h, int status, void *data);

static void tp_go(struct tp_worker *w) {
    struct tp_run *r = w->run;
    if (r->stop) { r->outstanding--; return; }
    int e;
    switch (r->kind & ~TP_OWN_NAMES) {
    case TP_SEMAPHORE:
        e = hilock_semaphore_acquire(r->client, w->name, (unsigned)r->nworkers, 1, NULL, tp_acquired,
                                     w, NULL);
        break;
    case TP_READ: e = hilock_read_acquire(r->client, w->name, NULL, tp_acquired, w, NULL); break;
    case TP_WRITE: e = hilock_write_acquire(r->client, w->name, NULL, tp_acquired, w, NULL); break;
    case TP_FAIR: e = hilock_fair_acquire(r->client, w->name, NULL, tp_acquired, w, NULL); break;
    default: e = hilock_acquire(r->client, w->name, NULL, tp_acquired, w, NULL); break;
    }
    if (e != 0) { r->errors++; r->outstanding--; }
}

static void tp_released(int status, void *data) {
    struct tp_worker *w = data;
    if (status != 0) w->run->errors++;
    if (w->run->measuring) w->run->cycles++;
    tp_go(w);
}

static void tp_acquired(hilock_hold *h, int status, void *data) {
    struct tp_worker *w = data;
    if (status != 0) { w->run->errors++; w->run->outstanding--; return; }
    if (hilock_release(h, tp_released, w) != 0) { w->run->errors++; w->run->outstanding--; }
}

/* The scripts each node ran so far: EVALSHA + EVAL from INFO commandstats. */
static int tp_node_scripts(redisContext *const *rc, int n, long long *out) {
    for (int i = 0; i < n; i++) {
        cmdstats c;
        if (cmdstats_get(rc[i], &c) != 0) return -1;
        out[i] = cmdstats_calls(&c, "evalsha") + cmdstats_calls(&c, "eval");
    }
    return 0;
}

static double cpu_seconds_since(const struct rusage *ru0) {
    struct rusage ru1;
    getrusage(RUSAGE_SELF, &ru1);
    return (double)(ru1.ru_utime.tv_sec - ru0->ru_utime.tv_sec + ru1.ru_stime.tv_sec -
                    ru0->ru_stime.tv_sec) +
           (double)(ru1.ru_utime.tv_usec - ru0->ru_utime.tv_usec + ru1.ru_stime.tv_usec -
                    ru0->ru_stime.tv_usec) / 1e6;
}

/* One window on `t`: IN_FLIGHT workers, each on a name of its own (on a
 * cluster the names fall on every master), and the scripts every node of
 * `t` ran meanwhile. */
static int tp_child(const bench_target *t, int kind, int k, struct tp_shm *s) {
    struct event_base *base = base_new();
    redisContext *rc[TARGET_NODES_MAX] = {NULL};
    int nodes_ok = 1;
    for (int i = 0; i < t->nnodes; i++)
        nodes_ok &= (rc[i] = target_connect(t, i)) != NULL;
    struct tp_run r;
    memset(&r, 0, sizeof r);
    r.workers = calloc((size_t)k, sizeof *r.workers);
    r.client = base ? bench_hilock_client(base, t) : NULL;
    if (!base || !nodes_ok || !r.workers || !r.client) return 1;
    r.outstanding = k;
    r.kind = kind;
    r.nworkers = k;
    for (int i = 0; i < k; i++) {
        r.workers[i].run = &r;
        snprintf(r.workers[i].name, sizeof r.workers[i].name, "hb-tp:%ld:%d", (long)getpid(),
                 kind == TP_MUTEX_NAMES || (kind & TP_OWN_NAMES) ? i : 0);
        tp_go(&r.workers[i]);
    }
    int never = 0;
    loop_until(base, &never, 500); /* warm up */
    long long a[TARGET_NODES_MAX], b[TARGET_NODES_MAX];
    int stats_ok = tp_node_scripts(rc, t->nnodes, a) == 0;
    stats_ok &= cmdstats_get(rc[0], &s->redis.before) == 0;
    s->redis.cpu_seconds = redis_cpu_seconds(rc[0]);
    struct rusage ru0;
    getrusage(RUSAGE_SELF, &ru0);
    long long c0 = r.cycles;
    r.measuring = 1;
    uint64_t t0 = now_ns();
    loop_until(base, &never, (int)(g_opts.tp_seconds * 1000));
    r.measuring = 0;
    uint64_t t1 = now_ns();
    s->cpu_seconds = cpu_seconds_since(&ru0);
    stats_ok &= tp_node_scripts(rc, t->nnodes, b) == 0;
    stats_ok &= cmdstats_get(rc[0], &s->redis.after) == 0;
    s->redis.cpu_seconds = redis_cpu_seconds(rc[0]) - s->redis.cpu_seconds;
    s->cycles = r.cycles - c0;
    s->seconds = (double)(t1 - t0) / 1e9;
    s->scripts = 0;
    for (int i = 0; i < t->nnodes && stats_ok; i++) {
        s->node_scripts[i] = b[i] - a[i];
        s->scripts += b[i] - a[i];
    }
    r.stop = 1;
    uint64_t dl = now_ns() + 5000000000ull;
    while (r.outstanding > 0 && now_ns() < dl) event_base_loop(base, EVLOOP_ONCE);
    s->errors = r.errors + (r.outstanding > 0) + !stats_ok;
    char pat[64];
    snprintf(pat, sizeof pat, "hilock:{hb-tp:%ld:*", (long)getpid());
    for (int i = 0; i < t->nnodes; i++) {
        delete_keys(rc[i], pat);
        redisFree(rc[i]);
    }
    hilock_client_free(r.client);
    event_base_free(base);
    free(r.workers);
    return s->errors == 0 ? 0 : 1;
}

int tp_measure(const bench_target *t, tp_sample *out) {
    return tp_measure_kind(t, TP_MUTEX_NAMES, g_opts.inflight, out);
}

int tp_measure_kind(const bench_target *t, int kind, int inflight, tp_sample *out) {
    return tp_measure_cost(t, kind, inflight, out, NULL);
}

int tp_measure_cost(const bench_target *t, int kind, int inflight, tp_sample *out, tp_redis *redis) {
    memset(out, 0, sizeof *out);
    out->errors = 1;
    struct tp_shm *s = shm_alloc(sizeof *s);
    if (s == NULL) return 1;
    pid_t pid = fork_child();
    if (pid < 0) { shm_free(s, sizeof *s); return 1; }
    if (pid == 0) _exit(tp_child(t, kind, inflight, s));
    int st = wait_child(pid, 60000 + (int)(g_opts.tp_seconds * 1000));
    out->errors = s->errors + (st != 0);
    if (st == 0 && s->seconds > 0) {
        if (redis != NULL) {
            *redis = s->redis;
            redis->cycles = s->cycles;
        }
        out->locks_per_s = (double)s->cycles / s->seconds;
        out->scripts_per_s = (double)s->scripts / s->seconds;
        out->cpu_us_per_lock = s->cycles > 0 ? s->cpu_seconds * 1e6 / (double)s->cycles : 0;
        out->node_share_min = s->scripts > 0 ? 1 : 0;
        out->node_share_max = 0;
        for (int i = 0; i < t->nnodes && s->scripts > 0; i++) {
            double share = (double)s->node_scripts[i] / (double)s->scripts;
            if (share < out->node_share_min) out->node_share_min = share;
            if (share > out->node_share_max) out->node_share_max = share;
        }
    }
    shm_free(s, sizeof *s);
    return out->errors == 0 && out->locks_per_s > 0 ? 0 : 1;
}

/* Run redis-benchmark -P 16 on the acquire script; its requests per second,
 * or -1. */
static double run_redis_benchmark(const char *sha, long n) {
    const char *cmd[] = {"EVALSHA", sha, "2", "hilock:{hb-rb:__rand_int__}", "hilock:{hb-rb:__rand_int__}:fence",
                         "0123456789abcdef0123456789abcdef", "30000", "604800", NULL};
    return redis_benchmark_run(cmd, n, 16);
}

int scenario_throughput(void) {
    redisContext *rc = sync_connect();
    if (rc == NULL) return 1;
    redisReply *rep = redisCommand(rc, "SCRIPT LOAD %s", hl_script_mutex_acquire.body);
    if (rep == NULL || rep->type != REDIS_REPLY_STRING || strcmp(rep->str, hl_script_mutex_acquire.sha) != 0) {
        fprintf(stderr, "throughput: SCRIPT LOAD of the acquire script failed\n");
        if (rep) freeReplyObject(rep);
        redisFree(rc);
        return 1;
    }
    freeReplyObject(rep);
    int reps = g_opts.reps < 1 ? 1 : g_opts.reps > 8 ? 8 : g_opts.reps;
    double locks[8], scripts[8], rb[8], ratio[8], lratio[8], cpu[8];
    int n = 0, errors = 0;
    long rb_n = 100000;
    for (int i = 0; i < reps; i++) {
        tp_sample tp;
        int st = tp_measure(&g_standalone, &tp);
        errors += tp.errors;
        double rate = run_redis_benchmark(hl_script_mutex_acquire.sha, rb_n);
        delete_keys(rc, "hilock:{hb-rb:*");
        if (st == 0 && rate > 0) {
            locks[n] = tp.locks_per_s;
            scripts[n] = tp.scripts_per_s;
            rb[n] = rate;
            ratio[n] = scripts[n] / rate;
            lratio[n] = locks[n] / rate;
            cpu[n] = tp.cpu_us_per_lock;
            n++;
            /* Next time, about as long as the hilock window. */
            rb_n = (long)(rate * g_opts.tp_seconds);
            if (rb_n < 20000) rb_n = 20000;
        } else {
            errors++;
        }
    }
    redisFree(rc);
    json_begin("throughput");
    json_str("client", "hilock");
    json_num("locks_per_s", median_d(locks, (size_t)n), 0);
    json_num("scripts_per_s", median_d(scripts, (size_t)n), 0);
    json_num("redis_benchmark_evalsha_per_s", median_d(rb, (size_t)n), 0);
    json_num("scripts_over_redis_benchmark", median_d(ratio, (size_t)n), 3);
    json_num("locks_over_redis_benchmark", median_d(lratio, (size_t)n), 3);
    json_int("in_flight", g_opts.inflight);
    json_num("client_cpu_us_per_lock", median_d(cpu, (size_t)n), 2);
    json_str("redis_benchmark_args", "-P 16 -c 50 -r 100000000 EVALSHA <acquire> (fresh keys)");
    json_int("reps", n);
    json_int("errors", errors);
    json_end();
    g_res.throughput_run = n > 0;
    g_res.tp_locks = median_d(locks, (size_t)n);
    g_res.tp_scripts = median_d(scripts, (size_t)n);
    g_res.tp_rb = median_d(rb, (size_t)n);
    g_res.tp_ratio = median_d(ratio, (size_t)n);
    return errors == 0 && n > 0 ? 0 : 1;
}
