/* The fairness scenario: who gets a contended lock, and how long the others
 * wait for it.
 *
 * P processes (BENCH_FAIR_P, default 3), each with its own event loop and
 * hilock client, run W loops each (BENCH_FAIR_W, default 20) on ONE lock
 * name: acquire, hold H ms (BENCH_FAIR_HOLD_MS, default 5; a timer of the
 * loop, which never sleeps), release, and once the release is answered,
 * acquire again; for D seconds (BENCH_FAIR_SECONDS, default 6, 1.5 with -q).
 * Loop j of each process starts j ms into the window.
 * One run per primitive, one after the other, each on a fresh name:
 *   mutex         hilock_acquire with the default config (bounded waiting:
 *                 a wait that has waited starve_ms stops racing and queues)
 *   mutex_racing  hilock_acquire with starve_ms = HILOCK_STARVE_NEVER: every
 *                 wait races, as the mutex did before bounded waiting; the
 *                 "before" beside the mutex
 *   write         hilock_write_acquire (no readers: the write lock alone)
 *   semaphore     hilock_semaphore_acquire, 1 of 2 permits
 *   fair          hilock_fair_acquire: first come, first served over all
 *                 clients; the reference for the targets
 *
 * Every grant is recorded in shared memory, in the order of an atomic
 * counter taken in the acquire callback: the process and its wait (from the
 * acquire call to the callback, CLOCK_MONOTONIC). A run that races lets a
 * process whose release wakes its own next waiter at once keep the lock;
 * what shows it: the processes' shares of the grants, the longest run of
 * consecutive grants to one process, and the waits per process. A wait
 * still pending when the window closes counts in the process's maximum up
 * to that moment (a process that never gets the lock has no granted wait to
 * show): its waits are censored, not dropped.
 *
 * The invariant is checked too: a shared counter of holders goes up in the
 * acquire callback and down before the release, and must never exceed 1
 * (2 for the semaphore); a violation counts as an error, as does any
 * non-zero status.
 *
 * Targets (for mutex and write; the semaphore's are printed, not counted):
 * each process's share within 25 % of 1/P, the longest wait at most twice
 * the fair lock's, and the throughput at least 0.9x the fair lock's: bounded
 * waiting must give the fair lock's worst case at the racing mutex's speed. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "hilock/hilock.h"
#include <hilock/adapters/libevent.h>

#define FA_PROCS_MAX 64
#define FA_GRANTS_MAX (1u << 20) /* per run: ~200/s for the mutex at 5 ms holds */

enum { FA_MUTEX, FA_RACING, FA_WRITE, FA_SEMAPHORE, FA_FAIR, FA_PRIMS };

static const char *const fa_label[FA_PRIMS] = {"mutex", "mutex_racing", "write", "semaphore", "fair"};

/* Holders at once that the primitive allows. */
static int fa_limit(int prim) { return prim == FA_SEMAPHORE ? 2 : 1; }

struct fa_shm {
    volatile int stop;                /* set by the parent when the window closes */
    volatile uint64_t t_stop;         /* when (ns) */
    volatile unsigned count;          /* grants recorded (the next index) */
    volatile int holders;             /* holders now, over all processes */
    volatile int max_holders;
    volatile int violations;          /* grants that made holders exceed the limit */
    volatile int errors;
    uint64_t pending_max_us[FA_PROCS_MAX]; /* censored waits: each process writes its own */
    uint8_t proc[FA_GRANTS_MAX];      /* grant k: its process */
    uint32_t wait_us[FA_GRANTS_MAX];  /* grant k: its wait */
};

enum { FL_IDLE, FL_WAITING, FL_HOLDING, FL_RELEASING };

struct fa_loop {
    struct fa_proc *p;
    int state;
    uint64_t t_ask;                   /* when acquire was called (ns) */
    hilock_wait *wait;                /* while FL_WAITING, when known */
    hilock_hold *hold;
    struct event *hold_ev;
};

struct fa_proc {
    int idx, prim, nloops, hold_ms;
    struct event_base *base;
    hilock_client *client;
    struct fa_shm *shm;
    int in_fd, parent_fd;
    struct event *pipe_ev;
    struct fa_loop *loops;
    int busy;                         /* loops not idle */
    int stopping;
    volatile int done;
    int warm;                         /* warm-up: 1 acquiring, 2 releasing, 3 done, -1 failed */
    int closed;
    char name[96];
};

/* status: a hilock error code, or (> 0) a count that says what went wrong. */
static void fa_error(struct fa_proc *p, const char *what, int status) {
    fprintf(stderr, "fairness[%s/%d]: %s (%d%s%s)\n", fa_label[p->prim], p->idx, what, status,
            status < 0 ? ": " : "", status < 0 ? hilock_strerror(status) : "");
    __atomic_add_fetch(&p->shm->errors, 1, __ATOMIC_SEQ_CST);
}

static hilock_client *fa_client(struct event_base *base, int prim) {
    hilock_config cfg;
    hilock_config_init(&cfg);
    cfg.url = g_standalone.url;
    cfg.pubsub = g_standalone.pubsub;
    if (prim == FA_RACING) cfg.starve_ms = HILOCK_STARVE_NEVER;
    return bench_hilock_client_cfg(base, &cfg);
}

static int fa_call(struct fa_proc *p, const char *name, hilock_acquire_cb cb, void *data,
                   hilock_wait **w) {
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.wait_ms = HILOCK_WAIT_FOREVER;
    switch (p->prim) {
    case FA_WRITE: return hilock_write_acquire(p->client, name, &o, cb, data, w);
    case FA_SEMAPHORE: return hilock_semaphore_acquire(p->client, name, 2, 1, &o, cb, data, w);
    case FA_FAIR: return hilock_fair_acquire(p->client, name, &o, cb, data, w);
    default: return hilock_acquire(p->client, name, &o, cb, data, w);
    }
}

static void fa_idle(struct fa_loop *l) {
    struct fa_proc *p = l->p;
    l->state = FL_IDLE;
    l->wait = NULL;
    l->hold = NULL;
    if (--p->busy == 0 && p->stopping) p->done = 1;
}

/* A wait cut by the end of the window: its length so far, up to the stop. */
static void fa_censor(struct fa_proc *p, uint64_t t_ask) {
    uint64_t stop = p->shm->t_stop;
    if (stop > t_ask && (stop - t_ask) / 1000u > p->shm->pending_max_us[p->idx])
        p->shm->pending_max_us[p->idx] = (stop - t_ask) / 1000u;
}

static void fa_acquired(hilock_hold *hold, int status, void *data);

static void fa_ask(struct fa_loop *l) {
    struct fa_proc *p = l->p;
    hilock_wait *w = NULL;
    l->state = FL_WAITING;
    l->wait = NULL;
    l->t_ask = now_ns();
    p->busy++;
    int rc = fa_call(p, p->name, fa_acquired, l, &w);
    if (rc != 0) {
        fa_error(p, "acquire refused", rc);
        fa_idle(l);
        return;
    }
    if (l->state == FL_WAITING) l->wait = w; /* its callback may not have run yet */
}

static void fa_acquired(hilock_hold *hold, int status, void *data) {
    struct fa_loop *l = data;
    struct fa_proc *p = l->p;
    struct fa_shm *s = p->shm;
    uint64_t t = now_ns();
    l->wait = NULL;
    if (status != 0) {
        /* The cancels of the window's end are expected; anything else is
         * an error, and the loop stops (no retry storm on a dead server). */
        if (!(status == HILOCK_ECANCELED && p->stopping)) fa_error(p, "acquire failed", status);
        fa_idle(l);
        return;
    }
    int h = __atomic_add_fetch(&s->holders, 1, __ATOMIC_SEQ_CST);
    int m = __atomic_load_n(&s->max_holders, __ATOMIC_SEQ_CST);
    while (h > m && !__atomic_compare_exchange_n(&s->max_holders, &m, h, 0, __ATOMIC_SEQ_CST,
                                                 __ATOMIC_SEQ_CST)) {}
    if (h > fa_limit(p->prim)) {
        __atomic_add_fetch(&s->violations, 1, __ATOMIC_SEQ_CST);
        fa_error(p, "more holders than the lock allows", h);
    }
    if (!__atomic_load_n(&s->stop, __ATOMIC_SEQ_CST)) {
        unsigned k = __atomic_fetch_add(&s->count, 1, __ATOMIC_SEQ_CST);
        if (k < FA_GRANTS_MAX) {
            s->proc[k] = (uint8_t)p->idx;
            s->wait_us[k] = (uint32_t)((t - l->t_ask) / 1000u);
        }
    } else {
        fa_censor(p, l->t_ask); /* granted after the window: a wait cut by it */
    }
    l->hold = hold;
    l->state = FL_HOLDING;
    struct timeval tv = {p->hold_ms / 1000, (suseconds_t)(p->hold_ms % 1000) * 1000};
    evtimer_add(l->hold_ev, &tv);
}

static void fa_released(int status, void *data) {
    struct fa_loop *l = data;
    struct fa_proc *p = l->p;
    if (status != 0) fa_error(p, "release failed", status);
    fa_idle(l);
    if (!p->stopping && status == 0) fa_ask(l);
}

static void fa_hold_done(evutil_socket_t fd, short what, void *arg) {
    struct fa_loop *l = arg;
    struct fa_proc *p = l->p;
    (void)fd; (void)what;
    if (l->state == FL_IDLE) { /* the loop's staggered start */
        if (!p->stopping) fa_ask(l);
        return;
    }
    /* Before the release: the next holder may be told as soon as it is sent. */
    __atomic_sub_fetch(&p->shm->holders, 1, __ATOMIC_SEQ_CST);
    l->state = FL_RELEASING;
    int rc = hilock_release(l->hold, fa_released, l);
    if (rc != 0) {
        fa_error(p, "release refused", rc);
        fa_idle(l);
    }
}

static void fa_stop(struct fa_proc *p) {
    if (p->stopping) return;
    p->stopping = 1;
    for (int i = 0; i < p->nloops; i++) {
        struct fa_loop *l = &p->loops[i];
        if (l->state != FL_WAITING) continue;
        fa_censor(p, l->t_ask);
        /* EINVAL: its callback is queued already (a grant or an error). */
        if (l->wait != NULL) hilock_wait_cancel(l->wait);
    }
    if (p->busy == 0) p->done = 1;
}

static void fa_pipe(evutil_socket_t fd, short what, void *arg) {
    struct fa_proc *p = arg;
    char buf[16];
    (void)what;
    ssize_t n = read(fd, buf, sizeof buf);
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == 'q') {
            fa_stop(p);
        } else if (buf[i] == 'g' && !p->stopping) {
            /* Loop j starts j ms in, in every process: the waits reach
             * Redis interleaved by process, not a process's all at once,
             * which would give a first-come lock's first W grants to one
             * process (a long run that only the start made). */
            for (int j = 0; j < p->nloops; j++) {
                struct timeval tv = {j / 1000, (suseconds_t)(j % 1000) * 1000};
                evtimer_add(p->loops[j].hold_ev, &tv);
            }
        }
    }
}

static void fa_warm_released(int status, void *data) {
    struct fa_proc *p = data;
    p->warm = status == 0 ? 3 : -1;
}

static void fa_warm_acquired(hilock_hold *hold, int status, void *data) {
    struct fa_proc *p = data;
    if (status != 0 || hilock_release(hold, fa_warm_released, p) != 0) {
        p->warm = -1;
        return;
    }
    p->warm = 2;
}

static void fa_closed(void *data) {
    struct fa_proc *p = data;
    p->closed = 1;
}

static int fa_child(struct fa_proc *p) {
    p->base = base_new();
    p->client = p->base ? fa_client(p->base, p->prim) : NULL;
    p->loops = calloc((size_t)p->nloops, sizeof *p->loops);
    if (p->client == NULL || p->loops == NULL) return 1;
    for (int i = 0; i < p->nloops; i++) {
        p->loops[i].p = p;
        p->loops[i].hold_ev = evtimer_new(p->base, fa_hold_done, &p->loops[i]);
    }
    set_nonblock(p->in_fd);
    p->pipe_ev = event_new(p->base, p->in_fd, EV_READ | EV_PERSIST, fa_pipe, p);
    event_add(p->pipe_ev, NULL);

    /* Warm up on a name of our own, with the same primitive: connect,
     * subscribe, load the scripts, before the window opens. */
    char warm[96];
    snprintf(warm, sizeof warm, "hb-fness-warm:%ld:%s", (long)getpid(), fa_label[p->prim]);
    p->warm = 1;
    if (fa_call(p, warm, fa_warm_acquired, p, NULL) != 0) p->warm = -1;
    uint64_t deadline = now_ns() + 10000000000ull;
    while (p->warm > 0 && p->warm != 3 && now_ns() < deadline) event_base_loop(p->base, EVLOOP_ONCE);
    if (p->warm != 3) {
        fprintf(stderr, "fairness[%s/%d]: warm-up failed\n", fa_label[p->prim], p->idx);
        return 1;
    }
    write_byte(p->parent_fd, 'r');

    /* The window, then the holds that were running finish and cancelled
     * waits report; a close gives the fair lock's queue places back. */
    loop_until(p->base, &p->done, 120000);
    int ok = p->done;
    hilock_client_close(p->client, fa_closed, p);
    loop_until(p->base, &p->closed, 5000);
    for (int i = 0; i < p->nloops; i++) event_free(p->loops[i].hold_ev);
    event_free(p->pipe_ev);
    event_base_free(p->base);
    free(p->loops);
    return ok && p->closed ? 0 : 1;
}

/* ---- One run ---------------------------------------------------------------- */

struct fa_result {
    int prim, procs, loops, hold_ms;
    double seconds, throughput;
    unsigned grants;
    unsigned long long per_proc[FA_PROCS_MAX];
    double share[FA_PROCS_MAX];
    double p50[FA_PROCS_MAX], p99[FA_PROCS_MAX], max[FA_PROCS_MAX]; /* ms */
    double pending_max[FA_PROCS_MAX];                             /* ms, censored waits */
    double wait_max;                                              /* ms, over all */
    int longest_run, longest_run_proc;
    int max_holders, violations, errors;
};

static int fa_run(int prim, int procs, int loops, int hold_ms, double seconds, struct fa_result *r) {
    memset(r, 0, sizeof *r);
    r->prim = prim;
    r->procs = procs;
    r->loops = loops;
    r->hold_ms = hold_ms;
    struct fa_shm *s = shm_alloc(sizeof *s);
    if (s == NULL) { perror("mmap"); return 1; }
    char name[96];
    snprintf(name, sizeof name, "hb-fness:%ld:%s", (long)getpid(), fa_label[prim]);
    int ready[2], in[FA_PROCS_MAX][2];
    pid_t pids[FA_PROCS_MAX];
    int nforked = 0, have_ready = pipe(ready) == 0, ok = have_ready;
    for (int i = 0; i < procs && ok; i++) {
        if (pipe(in[i]) != 0) { ok = 0; break; }
        pids[i] = fork_child();
        if (pids[i] < 0) { close(in[i][0]); close(in[i][1]); ok = 0; break; }
        if (pids[i] == 0) {
            struct fa_proc p;
            memset(&p, 0, sizeof p);
            p.idx = i;
            p.prim = prim;
            p.nloops = loops;
            p.hold_ms = hold_ms;
            p.shm = s;
            p.in_fd = in[i][0];
            p.parent_fd = ready[1];
            snprintf(p.name, sizeof p.name, "%s", name);
            _exit(fa_child(&p));
        }
        nforked++;
    }
    if (!ok) perror("fairness: pipe/fork");
    for (int i = 0; i < nforked && ok; i++) ok = read_byte(ready[0], 15000) == 'r';
    uint64_t t0 = now_ns(), t1 = t0;
    if (ok) {
        for (int i = 0; i < nforked; i++) write_byte(in[i][1], 'g');
        uint64_t end = t0 + (uint64_t)(seconds * 1e9);
        for (uint64_t now = now_ns(); now < end; now = now_ns()) {
            uint64_t left_us = (end - now) / 1000u;
            usleep(left_us > 100000 ? 100000 : (useconds_t)left_us);
        }
        t1 = now_ns();
        s->t_stop = t1;
        __atomic_store_n(&s->stop, 1, __ATOMIC_SEQ_CST);
    }
    for (int i = 0; i < nforked; i++) write_byte(in[i][1], 'q');
    int bad = 0;
    for (int i = 0; i < nforked; i++) {
        if (wait_child(pids[i], 30000 + hold_ms * loops * procs) != 0) bad++;
        close(in[i][0]);
        close(in[i][1]);
    }
    if (have_ready) { close(ready[0]); close(ready[1]); }
    redisContext *rc = sync_connect();
    if (rc != NULL) {
        delete_keys(rc, "hilock:{hb-fness*");
        redisFree(rc);
    }

    /* The figures, from the grants in their order. */
    unsigned n = s->count < FA_GRANTS_MAX ? s->count : FA_GRANTS_MAX;
    r->grants = n;
    r->seconds = (double)(t1 - t0) / 1e9;
    r->throughput = r->seconds > 0 ? n / r->seconds : 0;
    uint64_t *w = malloc(sizeof(uint64_t) * (n ? n : 1));
    int run = 0, last = -1;
    for (unsigned k = 0; k < n; k++) {
        int pr = s->proc[k];
        run = pr == last ? run + 1 : 1;
        last = pr;
        if (run > r->longest_run) { r->longest_run = run; r->longest_run_proc = pr; }
        if (pr < procs) r->per_proc[pr]++;
    }
    for (int i = 0; i < procs; i++) {
        size_t m = 0;
        for (unsigned k = 0; k < n && w != NULL; k++)
            if (s->proc[k] == i) w[m++] = s->wait_us[k];
        if (w != NULL) sort_u64(w, m);
        r->share[i] = n ? (double)r->per_proc[i] / n : 0;
        r->p50[i] = w && m ? (double)pct_u64(w, m, 50) / 1000.0 : NAN; /* no grant: no figure */
        r->p99[i] = w && m ? (double)pct_u64(w, m, 99) / 1000.0 : NAN;
        r->pending_max[i] = (double)s->pending_max_us[i] / 1000.0;
        double granted = w && m ? (double)w[m - 1] / 1000.0 : 0;
        r->max[i] = granted > r->pending_max[i] ? granted : r->pending_max[i];
        if (r->max[i] > r->wait_max) r->wait_max = r->max[i];
    }
    free(w);
    r->max_holders = s->max_holders;
    r->violations = s->violations;
    r->errors = s->errors + (!ok || bad || s->count > FA_GRANTS_MAX ? 1 : 0);
    if (s->errors == 0 && r->errors)
        fprintf(stderr, "fairness[%s]: %s\n", fa_label[prim],
                !ok ? "the processes did not start" : bad ? "a process failed" : "too many grants to record");
    shm_free(s, sizeof *s);
    return r->errors ? 1 : 0;
}

/* ---- Report ------------------------------------------------------------------ */

/* A JSON line with arrays: common.c's helpers have scalars only, so this
 * line is built here, in the same compact form. */
static char fj_buf[8192];
static size_t fj_len;

static void fj_put(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fj_put(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(fj_buf + fj_len, sizeof fj_buf - fj_len, fmt, ap);
    va_end(ap);
    if (n > 0) fj_len += (size_t)n < sizeof fj_buf - fj_len ? (size_t)n : sizeof fj_buf - fj_len - 1;
}

static void fj_key(const char *k) { fj_put("%s\"%s\":", fj_len > 1 ? "," : "", k); }
static void fj_str(const char *k, const char *v) { fj_key(k); fj_put("\"%s\"", v); } /* plain text only */
static void fj_int(const char *k, long long v) { fj_key(k); fj_put("%lld", v); }
static void fj_num(const char *k, double v, int d) { fj_key(k); fj_put("%.*f", d, v); }
static void fj_bool(const char *k, int v) { fj_key(k); fj_put(v ? "true" : "false"); }

static void fj_arr(const char *k, const double *v, int n, int d) {
    fj_key(k);
    fj_put("[");
    for (int i = 0; i < n; i++) {
        if (v[i] != v[i]) fj_put("%snull", i ? "," : ""); /* NaN: no grant to take it from */
        else fj_put("%s%.*f", i ? "," : "", d, v[i]);
    }
    fj_put("]");
}

/* The targets of one primitive against the fair lock of the same run. */
struct fa_check { int share, wait, tp; double share_min, share_max; };

static struct fa_check fa_checks(const struct fa_result *r, const struct fa_result *fair) {
    struct fa_check c;
    double fairshare = 1.0 / r->procs;
    c.share_min = c.share_max = r->share[0];
    for (int i = 1; i < r->procs; i++) {
        if (r->share[i] < c.share_min) c.share_min = r->share[i];
        if (r->share[i] > c.share_max) c.share_max = r->share[i];
    }
    c.share = r->grants > 0 && c.share_min >= 0.75 * fairshare && c.share_max <= 1.25 * fairshare;
    c.wait = fair->grants > 0 && r->wait_max <= 2 * fair->wait_max;
    c.tp = fair->grants > 0 && r->throughput >= 0.9 * fair->throughput;
    return c;
}

static void fa_json(const struct fa_result *r, const struct fa_result *fair, int checked) {
    double ppg[FA_PROCS_MAX];
    for (int i = 0; i < r->procs; i++) ppg[i] = (double)r->per_proc[i];
    fj_len = 0;
    fj_put("{");
    fj_str("scenario", "fairness");
    fj_str("prim", fa_label[r->prim]);
    if (r->prim == FA_MUTEX) fj_str("starve_ms", "default");
    if (r->prim == FA_RACING) fj_str("starve_ms", "never");
    fj_int("procs", r->procs);
    fj_int("loops", r->loops);
    fj_int("hold_ms", r->hold_ms);
    fj_num("seconds", r->seconds, 2);
    fj_int("grants", r->grants);
    fj_num("throughput", r->throughput, 1);
    fj_arr("grants_per_proc", ppg, r->procs, 0);
    fj_arr("share", r->share, r->procs, 3);
    fj_arr("wait_p50_ms", r->p50, r->procs, 1);
    fj_arr("wait_p99_ms", r->p99, r->procs, 1);
    fj_arr("wait_max_ms", r->max, r->procs, 1);
    fj_arr("pending_max_ms", r->pending_max, r->procs, 1);
    fj_num("max_wait_ms", r->wait_max, 1);
    fj_int("longest_run", r->longest_run);
    fj_int("longest_run_proc", r->longest_run_proc);
    fj_int("max_holders", r->max_holders);
    fj_int("violations", r->violations);
    fj_int("errors", r->errors);
    if (checked && r->prim != FA_FAIR) {
        struct fa_check c = fa_checks(r, fair);
        fj_num("fair_throughput", fair->throughput, 1);
        fj_num("fair_max_wait_ms", fair->wait_max, 1);
        fj_bool("share_within_25pct", c.share);
        fj_bool("max_wait_le_2x_fair", c.wait);
        fj_bool("throughput_ge_0_9x_fair", c.tp);
    }
    fj_put("}");
    printf("%s\n", fj_buf);
    fflush(stdout);
}

static void fa_print(const struct fa_result *r) {
    fprintf(stderr, "  %-12s %8.1f grants/s  %6u grants  longest run %4d (proc %d)  max wait %8.1f ms%s\n",
            fa_label[r->prim], r->throughput, r->grants, r->longest_run, r->longest_run_proc,
            r->wait_max, r->errors ? "  ERRORS" : "");
    for (int i = 0; i < r->procs; i++) {
        char p50[32] = "       -", p99[32] = "       -";
        if (r->p50[i] == r->p50[i]) snprintf(p50, sizeof p50, "%8.1f", r->p50[i]);
        if (r->p99[i] == r->p99[i]) snprintf(p99, sizeof p99, "%8.1f", r->p99[i]);
        fprintf(stderr, "      proc %d: share %.3f  wait p50 %s  p99 %s  max %8.1f ms%s\n", i,
                r->share[i], p50, p99, r->max[i],
                r->pending_max[i] > 0 && r->pending_max[i] >= r->max[i] ? " (still waiting at the end)" : "");
    }
    if (r->errors || r->violations)
        fprintf(stderr, "      errors %d, of which mutual exclusion violations %d (max holders %d)\n",
                r->errors, r->violations, r->max_holders);
}

static const char *fa_verdict(int met) { return met ? "met" : "MISSED"; }

int scenario_fairness(void) {
    int procs = g_opts.fair_procs, loops = g_opts.fair_loops, hold = g_opts.fair_hold_ms;
    double secs = g_opts.fair_seconds;
    if (procs < 1 || procs > FA_PROCS_MAX || loops < 1 || hold < 0 || secs <= 0) {
        fprintf(stderr, "fairness: bad parameters (P %d, W %d, H %d ms, D %.1f s)\n", procs, loops, hold, secs);
        return 1;
    }
    static struct fa_result res[FA_PRIMS];
    int failed = 0;
    for (int prim = 0; prim < FA_PRIMS; prim++) {
        failed |= fa_run(prim, procs, loops, hold, secs, &res[prim]);
        fa_print(&res[prim]);
    }
    const struct fa_result *fair = &res[FA_FAIR];
    for (int prim = 0; prim < FA_PRIMS; prim++) fa_json(&res[prim], fair, 1);

    fprintf(stderr, "  targets against the fair lock (%.1f grants/s, max wait %.1f ms); share 1/P = %.3f +-25%%:\n",
            fair->throughput, fair->wait_max, 1.0 / procs);
    for (int prim = 0; prim < FA_FAIR; prim++) {
        struct fa_check c = fa_checks(&res[prim], fair);
        fprintf(stderr, "    %-12s shares %.3f..%.3f: %s; max wait %.1f ms <= 2x: %s (%.2fx); "
                "throughput >= 0.9x: %s (%.2fx)%s\n", fa_label[prim], c.share_min, c.share_max,
                fa_verdict(c.share), res[prim].wait_max, fa_verdict(c.wait),
                fair->wait_max > 0 ? res[prim].wait_max / fair->wait_max : 0, fa_verdict(c.tp),
                fair->throughput > 0 ? res[prim].throughput / fair->throughput : 0,
                prim == FA_RACING ? "  (before: always racing)" : "");
    }
    g_res.fa_run = fair->grants > 0;
    g_res.fa_procs = procs;
    g_res.fa_fair_tp = fair->throughput;
    g_res.fa_fair_wait = fair->wait_max;
    static const int checked[] = {FA_MUTEX, FA_WRITE, FA_RACING};
    for (int i = 0; i < 3; i++) {
        const struct fa_result *r = &res[checked[i]];
        struct fa_check c = fa_checks(r, fair);
        g_res.fa_share_ok[i] = c.share;
        g_res.fa_wait_ok[i] = c.wait;
        g_res.fa_tp_ok[i] = c.tp;
        g_res.fa_share_min[i] = c.share_min;
        g_res.fa_share_max[i] = c.share_max;
        g_res.fa_wait[i] = r->wait_max;
        g_res.fa_tp[i] = r->throughput;
        g_res.fa_run_len[i] = r->longest_run;
    }
    return failed;
}
