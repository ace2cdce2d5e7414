/* The primitives beside each other (scenario "primitives"): K acquire +
 * release loops in flight in one client, every loop on ONE name, for
 *   mutex_names   the mutex, each loop its own name (the uncontended rate)
 *   mutex         the mutex (one holder at a time: the handoff rate)
 *   semaphore     a semaphore of K permits (K holders at once)
 *   read          the read lock (any number of readers)
 *   write         the write lock of a read-write lock (one at a time)
 * Reported: grants per second (median over the repetitions) and scripts per
 * grant (EVALSHA + EVAL from INFO commandstats, over the window), against
 * the same server in the same run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <event2/event.h>

#include "bench.h"
#include "hilock/hilock.h"

enum { PR_MUTEX_NAMES, PR_MUTEX, PR_SEM, PR_READ, PR_WRITE, PR_KINDS };
static const char *const pr_label[PR_KINDS] = {"mutex_names", "mutex", "semaphore", "read", "write"};

struct pr_shm {
    volatile long long cycles, scripts;
    volatile double seconds;
    volatile int errors;
};

struct pr_run;
struct pr_loop {
    struct pr_run *run;
    char name[48];
};
struct pr_run {
    hilock_client *client;
    int kind, k, measuring, errors, outstanding;
    volatile int stop;
    long long cycles;
};

static void pr_acquired(hilock_hold *h, int status, void *data);

static void pr_go(struct pr_loop *l) {
    struct pr_run *r = l->run;
    int e;
    if (r->stop) { r->outstanding--; return; }
    switch (r->kind) {
    case PR_SEM:
        e = hilock_semaphore_acquire(r->client, l->name, (unsigned)r->k, 1, NULL, pr_acquired, l, NULL);
        break;
    case PR_READ: e = hilock_read_acquire(r->client, l->name, NULL, pr_acquired, l, NULL); break;
    case PR_WRITE: e = hilock_write_acquire(r->client, l->name, NULL, pr_acquired, l, NULL); break;
    default: e = hilock_acquire(r->client, l->name, NULL, pr_acquired, l, NULL); break;
    }
    if (e != 0) { r->errors++; r->outstanding--; }
}

static void pr_released(int status, void *data) {
    struct pr_loop *l = data;
    if (status != 0) l->run->errors++;
    if (l->run->measuring) l->run->cycles++;
    pr_go(l);
}

static void pr_acquired(hilock_hold *h, int status, void *data) {
    struct pr_loop *l = data;
    if (status != 0) { l->run->errors++; l->run->outstanding--; return; }
    if (hilock_release(h, pr_released, l) != 0) { l->run->errors++; l->run->outstanding--; }
}

static long long pr_scripts(redisContext *rc) {
    cmdstats c;
    if (cmdstats_get(rc, &c) != 0) return -1;
    return cmdstats_calls(&c, "evalsha") + cmdstats_calls(&c, "eval");
}

static int pr_child(int kind, int k, struct pr_shm *s) {
    struct event_base *base = base_new();
    redisContext *rc = sync_connect();
    struct pr_run r;
    memset(&r, 0, sizeof r);
    struct pr_loop *loops = calloc((size_t)k, sizeof *loops);
    r.client = base ? bench_hilock_client(base, &g_standalone) : NULL;
    if (!base || !rc || !loops || !r.client) return 1;
    r.kind = kind;
    r.k = k;
    r.outstanding = k;
    for (int i = 0; i < k; i++) {
        loops[i].run = &r;
        if (kind == PR_MUTEX_NAMES)
            snprintf(loops[i].name, sizeof loops[i].name, "hb-pr:%ld:%d", (long)getpid(), i);
        else
            snprintf(loops[i].name, sizeof loops[i].name, "hb-pr:%ld", (long)getpid());
        pr_go(&loops[i]);
    }
    int never = 0;
    loop_until(base, &never, 300); /* warm up */
    long long a = pr_scripts(rc), c0 = r.cycles;
    r.measuring = 1;
    uint64_t t0 = now_ns();
    loop_until(base, &never, (int)(g_opts.tp_seconds * 1000));
    r.measuring = 0;
    uint64_t t1 = now_ns();
    long long b = pr_scripts(rc);
    s->cycles = r.cycles - c0;
    s->seconds = (double)(t1 - t0) / 1e9;
    s->scripts = a >= 0 && b >= 0 ? b - a : -1;
    r.stop = 1;
    uint64_t dl = now_ns() + 5000000000ull;
    while (r.outstanding > 0 && now_ns() < dl) event_base_loop(base, EVLOOP_ONCE);
    s->errors = r.errors + (r.outstanding > 0) + (s->scripts < 0);
    char pat[64];
    snprintf(pat, sizeof pat, "hilock:{hb-pr:%ld*", (long)getpid());
    delete_keys(rc, pat);
    redisFree(rc);
    hilock_client_free(r.client);
    event_base_free(base);
    free(loops);
    return s->errors == 0 ? 0 : 1;
}

/* One window of `kind`: grants/s and scripts per grant; 0, or 1 on errors. */
static int pr_measure(int kind, int k, double *rate, double *spg) {
    struct pr_shm *s = shm_alloc(sizeof *s);
    if (s == NULL) return 1;
    pid_t pid = fork_child();
    if (pid < 0) { shm_free(s, sizeof *s); return 1; }
    if (pid == 0) _exit(pr_child(kind, k, s));
    int st = wait_child(pid, 30000 + (int)(g_opts.tp_seconds * 1000));
    int bad = st != 0 || s->errors != 0 || s->seconds <= 0 || s->cycles <= 0;
    if (!bad) {
        *rate = (double)s->cycles / s->seconds;
        *spg = (double)s->scripts / (double)s->cycles;
    }
    shm_free(s, sizeof *s);
    return bad;
}

int scenario_primitives(void) {
    int k = g_opts.inflight < 64 ? g_opts.inflight : 64;
    int reps = g_opts.reps < 1 ? 1 : g_opts.reps > 8 ? 8 : g_opts.reps;
    double rate[PR_KINDS][8], spg[PR_KINDS][8];
    int n[PR_KINDS] = {0}, errors = 0;
    for (int rep = 0; rep < reps; rep++)
        for (int kind = 0; kind < PR_KINDS; kind++) {
            if (pr_measure(kind, k, &rate[kind][n[kind]], &spg[kind][n[kind]]) != 0) errors++;
            else n[kind]++;
        }
    double base = n[PR_MUTEX_NAMES] ? median_d(rate[PR_MUTEX_NAMES], (size_t)n[PR_MUTEX_NAMES]) : 0;
    for (int kind = 0; kind < PR_KINDS; kind++) {
        double r = n[kind] ? median_d(rate[kind], (size_t)n[kind]) : 0;
        json_begin("primitives");
        json_str("primitive", pr_label[kind]);
        json_int("in_flight", k);
        json_str("names", kind == PR_MUTEX_NAMES ? "one per loop" : "one");
        json_num("grants_per_s", r, 0);
        json_num("over_mutex_names", base > 0 ? r / base : 0, 3);
        json_num("scripts_per_grant", n[kind] ? median_d(spg[kind], (size_t)n[kind]) : 0, 2);
        json_int("reps", n[kind]);
        json_end();
        fprintf(stderr, "  %-12s %9.0f grants/s  %.3f x mutex_names\n", pr_label[kind], r,
                base > 0 ? r / base : 0);
    }
    return errors == 0 ? 0 : 1;
}
