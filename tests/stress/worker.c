/* hilock-stress workers: one client per process, per_proc waiters that
 * acquire a random name, hold it briefly, release it and start again, and
 * check the invariants in the shared mapping as they go:
 *   - the primitive's own, on each grant and when the hold ends (prims.c:
 *     for the mutex, no two holders of a name at once and fencing tokens
 *     strictly increasing per name, as a resource sees them),
 *   - every acquire request ends with exactly one callback.
 * A name's primitive is fixed (stress_cfg.kind); the worker knows it only
 * through its entry in stress_prims[]. */
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "hilock/hilock.h"
#include <hilock/adapters/libevent.h>
#include "support/harness.h"
#include "stress/stress.h"

stress_shared *sh;

typedef struct slot {
    struct worker *w;
    int id;            /* proc * 100000 + index + 1: never 0 */
    int kind;          /* its names' primitive: those of name index % names */
    int name;
    int ask;           /* what the acquire asked (stress_prim.pick) */
    int in;            /* counted by the name's invariant: from the grant until
                        * the hold ends or is lost, whichever comes first */
    int pending;
    hilock_hold *hold;
    struct event *hold_timer;
    struct event *retry_timer; /* after an error: a short pause, then again */
} slot;

typedef struct worker {
    const stress_cfg *cfg;
    int proc;
    hilock_client *client;
    struct event_base *base;
    slot *slots;
    unsigned rnd;
    int of_kind[NPRIMS][MAX_NAMES], nof_kind[NPRIMS]; /* the names of each primitive */
} worker;

static void issue(slot *s);

static void count_code(volatile long *table, int status) {
    int code = -status > 0 && -status < NCODES ? -status : 0;
    __atomic_add_fetch(&table[code], 1, __ATOMIC_SEQ_CST);
}

/* What the client said about the first error of each kind, for the report. */
static void sample_error(worker *w, int status) {
    int code = -status > 0 && -status < NCODES ? -status : 0;
    if (__atomic_exchange_n(&sh->sampled[code], 1, __ATOMIC_SEQ_CST)) return;
    snprintf(sh->err_sample[code], sizeof(sh->err_sample[code]), "%s", hilock_client_errstr(w->client));
}

/* A step of a name into its ring (racy between processes: a diagnosis). */
static void trace(int name, int id, char kind, int arg, unsigned long long fence) {
    unsigned i = __atomic_fetch_add(&sh->trace_n[name], 1, __ATOMIC_SEQ_CST) % TRACE_LEN;
    stress_trace *t = &sh->trace[name][i];
    t->at_ms = test_now_ms();
    t->id = id;
    t->kind = kind;
    t->arg = arg;
    t->fence = fence;
}

static void note_event(char kind, int name, int limit, int prev, int next, unsigned long long fence,
                       unsigned long long last, long count) {
    int i = __atomic_fetch_add(&sh->nevents, 1, __ATOMIC_SEQ_CST);
    if (i >= MAX_EVENTS) return;
    stress_event *e = &sh->events[i];
    e->kind = kind;
    e->name = name;
    e->limit = limit;
    e->prev = prev;
    e->next = next;
    e->at_ms = test_now_ms();
    e->fence = fence;
    e->last_fence = last;
    e->count = count;
    e->prev_since_ms = sh->inside_since[name];
    unsigned n = sh->trace_n[name], from = n > TRACE_LEN ? n - TRACE_LEN : 0;
    e->ntrace = 0;
    for (unsigned k = from; k < n; k++) e->trace[e->ntrace++] = sh->trace[name][k % TRACE_LEN];
    if (prev != 0 && (kind == 'o' || kind == 'w')) {
        sh->watch_ev[name] = i + 1;
        sh->watch_id[name] = prev;
    }
}

/* Inside the window after a kill -9 of the master of this name's slot? */
static int in_limit(int name) {
    long long now = test_now_ms();
    return sh->limit_from[name] != 0 && now >= sh->limit_from[name] && now <= sh->limit_until[name];
}

static volatile long *violation_counter(char kind, int limit) {
    switch (kind) {
    case 'o': return limit ? &sh->overlaps_limit : &sh->overlaps;
    case 'r': return limit ? &sh->regressions_limit : &sh->regressions;
    case 'p': return limit ? &sh->permit_overruns_limit : &sh->permit_overruns;
    default: return limit ? &sh->rw_conflicts_limit : &sh->rw_conflicts;
    }
}

void stress_violation(char kind, int name, int prev, int next, unsigned long long fence,
                      unsigned long long last, long count) {
    int limit = in_limit(name);
    __atomic_add_fetch(violation_counter(kind, limit), 1, __ATOMIC_SEQ_CST);
    note_event(kind, name, limit, prev, next, fence, last, count);
}

void stress_note_max(volatile long *max, long v) {
    long m = *max;
    while (v > m && !__atomic_compare_exchange_n(max, &m, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
}

static const stress_prim *prim_of(const slot *s) {
    return &stress_prims[s->kind];
}

static stress_grant grant_of(const slot *s, unsigned long long fence) {
    return (stress_grant){s->name, s->id, s->ask, fence};
}

/* The holder leaves (end of its hold, or its lock was lost): the name's
 * invariant counts it out once, at the first of the two. */
static void leave(slot *s, char how, int lost) {
    trace(s->name, s->id, how, lost, 0);
    if (sh->watch_id[s->name] == s->id) { /* an overlap met us: say when we left */
        int ev = sh->watch_ev[s->name] - 1;
        sh->watch_id[s->name] = 0;
        if (ev >= 0 && ev < MAX_EVENTS) {
            sh->events[ev].prev_left_ms = test_now_ms();
            sh->events[ev].prev_left_lost = how == 'l' || lost;
            sh->events[ev].prev_left_how = how;
        }
    }
    if (!s->in) return;
    s->in = 0;
    stress_grant g = grant_of(s, 0);
    prim_of(s)->leave(&g);
}

static void lost_cb(hilock_hold *h, int why, void *data) {
    slot *s = data;
    (void)h;
    __atomic_add_fetch(&sh->lost, 1, __ATOMIC_SEQ_CST);
    leave(s, 'l', why); /* no longer ours: say so before another takes it */
}

static void released(int status, void *data) {
    slot *s = data;
    trace(s->name, s->id, 'r', status, 0);
    if (status != 0) count_code(sh->release_errors, status);
    if (!sh->stop) issue(s);
}

static void end_hold(evutil_socket_t fd, short what, void *arg) {
    slot *s = arg;
    (void)fd; (void)what;
    leave(s, 'e', hilock_hold_lost(s->hold));
    if (hilock_release(s->hold, released, s) != 0) {
        count_code(sh->release_errors, 0);
        if (!sh->stop) issue(s);
    }
}

static void enter(slot *s, hilock_hold *h) {
    stress_grant g = grant_of(s, hilock_hold_fence(h));
    trace(s->name, s->id, 'g', s->ask, g.fence);
    __atomic_add_fetch(&sh->grants[s->kind][s->ask], 1, __ATOMIC_SEQ_CST);
    s->in = 1;
    prim_of(s)->enter(&g);
}

/* Most holds are short (0-2 ms): contention and hand-offs. A few are long,
 * so that some holds are renewed across a migration or a failover; after
 * the stop every hold is short so the queues drain quickly. */
static struct timeval hold_time(worker *w) {
    const stress_cfg *c = w->cfg;
    if (!sh->stop && c->long_hold_permille > 0 &&
        (int)(rand_r(&w->rnd) % 1000) < c->long_hold_permille) {
        __atomic_add_fetch(&sh->long_holds, 1, __ATOMIC_SEQ_CST);
        long ms = 300 + (long)(rand_r(&w->rnd) % (unsigned)(c->long_hold_max_ms - 300 + 1));
        return (struct timeval){ms / 1000, (ms % 1000) * 1000};
    }
    return (struct timeval){0, (long)(rand_r(&w->rnd) % 2000)};
}

static void acquired(hilock_hold *h, int status, void *data) {
    slot *s = data;
    worker *w = s->w;
    if (!s->pending) __atomic_add_fetch(&sh->double_callbacks, 1, __ATOMIC_SEQ_CST);
    s->pending = 0;
    __atomic_add_fetch(&sh->ended[w->proc], 1, __ATOMIC_SEQ_CST);
    if (status != 0) {
        count_code(sh->errors, status);
        sample_error(w, status);
        /* Not at once: while a quorum or the master is out of reach, a
         * request fails at once, and a thousand waiters coming straight
         * back would only spin (and starve the holders' timers). */
        struct timeval tv = {0, 1000 + (long)(rand_r(&w->rnd) % 19000)};
        if (!sh->stop) evtimer_add(s->retry_timer, &tv);
        return;
    }
    __atomic_add_fetch(&sh->acquisitions, 1, __ATOMIC_SEQ_CST);
    enter(s, h);
    s->hold = h;
    struct timeval tv = hold_time(w);
    evtimer_add(s->hold_timer, &tv);
}

static void issue(slot *s) {
    worker *w = s->w;
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = w->cfg->lease_ms;
    o.lost_cb = lost_cb;
    o.lost_data = s;
    s->name = w->of_kind[s->kind][rand_r(&w->rnd) % (unsigned)w->nof_kind[s->kind]];
    const stress_prim *p = prim_of(s);
    const char *name = w->cfg->name[s->name];
    s->ask = p->pick ? p->pick(&w->rnd) : 0;
    s->pending = 1;
    __atomic_add_fetch(&sh->issued[w->proc], 1, __ATOMIC_SEQ_CST);
    int rc = p->acquire ? p->acquire(w->client, name, &o, acquired, s, NULL)
                        : p->acquire_ask(w->client, name, s->ask, &o, acquired, s);
    if (rc != 0) {
        s->pending = 0;
        __atomic_add_fetch(&sh->ended[w->proc], 1, __ATOMIC_SEQ_CST);
        count_code(sh->errors, 0);
    }
}

static void retry(evutil_socket_t fd, short what, void *arg) {
    slot *s = arg;
    (void)fd; (void)what;
    if (!sh->stop) issue(s);
}

static void stop_check(evutil_socket_t fd, short what, void *arg) {
    worker *w = arg;
    (void)fd; (void)what;
    if (sh->stop && sh->ended[w->proc] == sh->issued[w->proc]) event_base_loopbreak(w->base);
}

/* A worker that crashes says so, with its stack (addresses: resolve them
 * with `addr2line -f -e hilock-stress +0x...`), then dies of the same
 * signal (a core file where the system keeps them). */
static int my_proc = -1;

static void on_crash(int sig) {
    char head[96];
    void *frames[48];
    __atomic_add_fetch(&sh->crashed, 1, __ATOMIC_SEQ_CST); /* the fault loop stops */
    for (int k = 0; k < MAX_NAMES; k++) { /* a dead process holds nothing (its permits
                                           * and reads are not known here) */
        int id = sh->inside[k], wid = sh->writer[k];
        if (id / 100000 == my_proc)
            __atomic_compare_exchange_n(&sh->inside[k], &id, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        if (wid / 100000 == my_proc)
            __atomic_compare_exchange_n(&sh->writer[k], &wid, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    int n = snprintf(head, sizeof(head), "hilock-stress: worker pid %d: signal %d; its stack:\n", (int)getpid(), sig);
    if (write(2, head, (size_t)n) < 0) { /* nothing to do */ }
    backtrace_symbols_fd(frames, backtrace(frames, 48), 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void catch_crashes(void) {
    void *warm[1];
    backtrace(warm, 1); /* loads libgcc now, not in the handler */
    int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) signal(sigs[i], on_crash);
}

/* Each waiter asks for names of one primitive only: as many waiters per
 * name for each, however fast its names turn (waiters that picked any name
 * would pile up on the slowest primitive's, the mutex's). With mutexes
 * alone, any name. */
static void init_slots(worker *w) {
    const stress_cfg *cfg = w->cfg;
    for (int i = 0; i < cfg->names; i++) w->of_kind[cfg->kind[i]][w->nof_kind[cfg->kind[i]]++] = i;
    for (int i = 0; i < cfg->per_proc; i++) {
        slot *s = &w->slots[i];
        s->w = w;
        s->id = w->proc * 100000 + i + 1;
        s->kind = cfg->kind[i % cfg->names];
        s->hold_timer = evtimer_new(w->base, end_hold, s);
        s->retry_timer = evtimer_new(w->base, retry, s);
    }
}

static int run_worker(const stress_cfg *cfg, int proc) {
    worker w;
    memset(&w, 0, sizeof(w));
    w.cfg = cfg;
    w.proc = proc;
    w.rnd = (unsigned)(proc * 7919 + 1) ^ (unsigned)getpid();
    w.base = event_base_new_with_config(NULL);
    hilock_loop loop;
    hilock_libevent_init(&loop, w.base);
    hilock_config hc;
    hilock_config_init(&hc);
    hc.url = cfg->url;
    hc.request_timeout_ms = cfg->request_timeout_ms;
    hc.reconnect_max_ms = 200;
    if (hilock_client_new(&w.client, &hc, &loop) != 0) return 2;
    w.slots = calloc((size_t)cfg->per_proc, sizeof(slot));
    init_slots(&w);
    for (int i = 0; i < cfg->per_proc; i++) issue(&w.slots[i]);
    struct event *tick = event_new(w.base, -1, EV_PERSIST, stop_check, &w);
    struct timeval tv = {0, 20000};
    evtimer_add(tick, &tv);
    event_base_dispatch(w.base);
    /* Let the last releases reach Redis before the client goes. */
    hilock_client_close(w.client, NULL, NULL);
    event_base_dispatch(w.base);
    event_free(tick);
    for (int i = 0; i < cfg->per_proc; i++) {
        event_free(w.slots[i].hold_timer);
        event_free(w.slots[i].retry_timer);
    }
    free(w.slots);
    event_base_free(w.base);
    return sh->ended[proc] == sh->issued[proc] ? 0 : 3;
}

void stress_reset(void) {
    memset((void *)sh, 0, sizeof(*sh));
}

pid_t *stress_workers_start(const stress_cfg *cfg) {
    pid_t *kids = calloc((size_t)cfg->procs, sizeof(pid_t));
    pid_t parent = getpid();
    if (kids == NULL) return NULL;
    fflush(NULL);
    for (int p = 0; p < cfg->procs; p++) {
        kids[p] = fork();
        if (kids[p] == 0) {
            /* A worker outlives no parent: nothing would stop it. */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(127);
            my_proc = p;
            catch_crashes();
            signal(SIGPIPE, SIG_IGN); /* as docs/getting-started.md asks of programs (hiredis writes) */
            _exit(run_worker(cfg, p));
        }
    }
    return kids;
}

int stress_workers_finish(pid_t *kids, int procs, int drain_ms, long *stranded) {
    int bad = 0;
    long long until = test_now_ms() + drain_ms;
    sh->stop = 1;
    *stranded = 0;
    for (int p = 0; p < procs; p++) {
        if (kids[p] <= 0) { bad++; continue; }
        long left = (long)(until - test_now_ms());
        int st = test_wait(kids[p], left > 0 ? (int)left : 0);
        if (st < 0) { /* still draining after the deadline: a waiter was stranded */
            kill(kids[p], SIGKILL);
            while (waitpid(kids[p], NULL, 0) < 0 && errno == EINTR) {}
            *stranded += sh->issued[p] - sh->ended[p];
            fprintf(stderr, "hilock-stress: worker %d killed after %d ms of drain: %ld waiters without a callback\n",
                    p, drain_ms, sh->issued[p] - sh->ended[p]);
        }
        if (st != 0) bad++;
        if (st > 0) {
            fprintf(stderr, "hilock-stress: worker %d (pid %d) %s %d\n", p, (int)kids[p],
                    st > 128 ? "was killed by signal" : "exited with status", st > 128 ? st - 128 : st);
        }
    }
    free(kids);
    return bad;
}

void stress_fault(stress_faults *f, const char *kind) {
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->kind[i], kind) == 0) { f->n[i]++; return; }
    if (f->count == MAX_FAULT_KINDS) return;
    f->kind[f->count] = kind;
    f->n[f->count++] = 1;
}

long stress_faults_total(const stress_faults *f) {
    long t = 0;
    for (int i = 0; i < f->count; i++) t += f->n[i];
    return t;
}

/* ---- Shared by the sentinel and redlock phases --------------------------- */

static long long log_t0;
static FILE *log_file;

void stress_log_open(long long t0, const char *path) {
    log_t0 = t0;
    log_file = path ? fopen(path, "w") : NULL;
}

void stress_log_close(void) {
    if (log_file) fclose(log_file);
    log_file = NULL;
}

void stress_say(const char *fmt, ...) {
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    double at = (double)(test_now_ms() - log_t0) / 1000.0;
    printf("hilock-stress: [%6.1f s] %s\n", at, line);
    fflush(stdout);
    if (log_file) {
        fprintf(log_file, "[%6.1f s] %s\n", at, line);
        fflush(log_file);
    }
}

void stress_say_errors(void) {
    static long seen;
    long n = 0;
    for (int i = 0; i < NCODES; i++) n += sh->errors[i];
    if (n < seen) seen = 0; /* a new phase */
    if (n > seen) stress_say("  (%ld requests ended in error since the last line of this kind)", n - seen);
    seen = n;
}

long stress_pending(int procs) {
    long pending = 0;
    for (int p = 0; p < procs; p++) pending += sh->issued[p] - sh->ended[p];
    return pending;
}

long long stress_drain_estimate(const stress_cfg *cfg, long long since, double slowdown, long long reserve_ms) {
    long long elapsed = test_now_ms() - since;
    if (elapsed < 3000 || sh->acquisitions == 0) return reserve_ms; /* the first grants come slower */
    double per_ms = (double)sh->acquisitions / (double)elapsed;
    long long est = (long long)((double)stress_pending(cfg->procs) / per_ms * slowdown) + 2000;
    return est < 3000 ? 3000 : est > 30000 ? 30000 : est;
}

void stress_copy_file(const char *from, const char *to, int append) {
    char buf[65536];
    FILE *in = fopen(from, "r"), *out = in ? fopen(to, append ? "a" : "w") : NULL;
    size_t n;
    while (out && (n = fread(buf, 1, sizeof(buf), in)) > 0)
        if (fwrite(buf, 1, n, out) != n) break;
    if (out) fclose(out);
    if (in) fclose(in);
}

void stress_rm_rf(const char *dir) {
    char cmd[256];
    if (dir == NULL || strncmp(dir, "/tmp/hilock-stress-", 19) != 0 || strchr(dir, '\'') != NULL) return;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) { /* a leftover temp dir is harmless */ }
}
