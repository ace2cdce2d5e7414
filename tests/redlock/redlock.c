/* Redlock mode (redlock://h1:p1,...,hN:pN): N independent masters, a grant
 * needs a quorum (N/2+1) within the validity time. Real redis-servers on
 * loopback: keys on every master, fences from the majority (and raised on
 * every node), one master down, a minority and a majority down, a master
 * restarted empty under a holder, stalled masters (DEBUG SLEEP) against the
 * validity time and the request deadline, the undo of a lost vote, waiters
 * woken by pub/sub rather than polling (also with a master down), split
 * votes and a holder's lapsing majority, a hold lost by quorum, extend and
 * break on every node, mutual exclusion across clients and processes, the
 * CLI, and URL errors. */
#include <limits.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/clusterenv.h"
#include "support/exclusion.h"

#define NODES 5       /* started for every test; each uses the first few */
#define MAX_KIDS 4

static test_redis srv[NODES];
static lockenv e;     /* the loop (e.base, e.loop); e.r is unused */
static pid_t kids[MAX_KIDS];

static void setup(void) {
    memset(&e, 0, sizeof(e));
    memset(kids, 0, sizeof(kids));
    for (int i = 0; i < NODES; i++)
        cr_assert_eq(test_redis_start_debuggable(&srv[i], 0), 0, "redis-server %d did not start", i);
    lockenv_loop(&e);
}

static void teardown(void) {
    for (int i = 0; i < MAX_KIDS; i++)
        if (kids[i] > 0) {
            kill(kids[i], SIGKILL);
            waitpid(kids[i], NULL, 0);
            kids[i] = 0;
        }
    for (int i = 0; i < NODES; i++) test_redis_stop(&srv[i]);
    if (e.base) event_base_free(e.base);
    e.base = NULL;
}

TestSuite(redlock, .init = setup, .fini = teardown, .timeout = 60);

/* ---- Helpers ---------------------------------------------------------------- */

/* "redlock://127.0.0.1:P1,...": the ports given. */
static const char *url_of_ports(char *buf, size_t n, const int *ports, int count) {
    size_t w = (size_t)snprintf(buf, n, "redlock://");
    for (int i = 0; i < count && w < n; i++)
        w += (size_t)snprintf(buf + w, n - w, "%s127.0.0.1:%d", i ? "," : "", ports[i]);
    return buf;
}

/* The URL of the first `count` servers. */
static const char *url_of(char *buf, size_t n, int count) {
    int ports[NODES];
    for (int i = 0; i < count; i++) ports[i] = srv[i].port;
    return url_of_ports(buf, n, ports, count);
}

/* A client with lockenv's short timings (request_timeout_ms 1000). */
static hilock_client *rl_client_url(const char *url) {
    hilock_config cfg;
    hilock_client *c = NULL;
    lockenv_config(&cfg, url);
    int rc = hilock_client_new(&c, &cfg, &e.loop);
    cr_assert_eq(rc, 0, "hilock_client_new(%s): %s", url, hilock_strerror(rc));
    return c;
}

static hilock_client *rl_client(int count) {
    char url[512];
    return rl_client_url(url_of(url, sizeof(url), count));
}

/* A string reply as an unsigned number (HGET, GET), 0 if none. */
static unsigned long long node_num(const test_redis *r, const char *fmt, const char *key) {
    redisContext *k = test_redis_connect(r);
    redisReply *rep = k ? redisCommand(k, fmt, key) : NULL;
    unsigned long long v = rep && rep->type == REDIS_REPLY_STRING ? strtoull(rep->str, NULL, 10) : 0;
    if (rep) freeReplyObject(rep);
    if (k) redisFree(k);
    return v;
}

static const char *lock_key(const char *name, char *buf, size_t n) {
    hilock_key("hilock:", name, buf, n);
    return buf;
}

/* The fence counter (P{T}:fence) of `name` on `r`. */
static unsigned long long node_fence_counter(const test_redis *r, const char *name) {
    char key[256];
    lock_key(name, key, sizeof(key));
    strcat(key, ":fence");
    return node_num(r, "GET %s", key);
}

/* The fence `r` gave the hold of `name` (0: no lock there): its counter,
 * which gave none since. */
static unsigned long long node_fence(const test_redis *r, const char *name) {
    return lock_exists(r, name) ? node_fence_counter(r, name) : 0;
}

static int run_on(const test_redis *r, const char *fmt, const char *arg) {
    redisContext *k = test_redis_connect(r);
    redisReply *rep = k ? redisCommand(k, fmt, arg) : NULL;
    int ok = rep && rep->type != REDIS_REPLY_ERROR;
    if (rep) freeReplyObject(rep);
    if (k) redisFree(k);
    return ok;
}

/* Nodes 0..count-1 on which the lock key of `name` exists. */
static int nodes_holding(int count, const char *name) {
    int n = 0;
    for (int i = 0; i < count; i++) n += lock_exists(&srv[i], name) == 1;
    return n;
}

/* nodes_holding once it is `want`, or after ms: a quorum answers a
 * request, the other nodes' answers may come a little later. */
static int holding_settled(int count, const char *name, int want, int ms) {
    long long until = test_now_ms() + ms;
    int n;
    while ((n = nodes_holding(count, name)) != want && test_now_ms() < until) test_loop_for(e.base, 10);
    return n;
}

static hilock_acquire_opts opts_lease(int64_t wait_ms, uint32_t lease_ms) {
    hilock_acquire_opts o = opts_wait(wait_ms);
    o.lease_ms = lease_ms;
    return o;
}

/* Acquire, waiting up to ms for the callback; the time it took in *took_ms. */
static got acquire_timed(hilock_client *c, const char *name, const hilock_acquire_opts *o, int ms,
                         long long *took_ms) {
    got g = {0, 0, NULL, 0};
    long long t0 = test_now_ms();
    cr_assert_eq(hilock_acquire(c, name, o, got_cb, &g, NULL), 0);
    test_loop_until(e.base, &g.calls, ms);
    if (took_ms) *took_ms = (g.calls ? g.at_ms : test_now_ms()) - t0;
    cr_assert_eq(g.calls, 1, "acquire of %s: no callback within %d ms", name, ms);
    return g;
}

/* Stall `r` with DEBUG SLEEP for `secs`, and return once it has begun:
 * a PING then gets no answer within 20 ms. The child's pid (test_wait it). */
static pid_t stall(const test_redis *r, const char *secs) {
    pid_t pid = test_redis_debug_sleep(r, secs);
    cr_assert_gt(pid, 0);
    long long until = test_now_ms() + 3000;
    while (test_now_ms() < until) {
        redisContext *k = test_redis_connect(r);
        struct timeval tv = {0, 20000};
        if (k) redisSetTimeout(k, tv);
        redisReply *rep = k ? redisCommand(k, "PING") : NULL;
        int answered = rep != NULL;
        if (rep) freeReplyObject(rep);
        if (k) redisFree(k);
        if (!answered) return pid;
        test_msleep(5);
    }
    cr_assert_fail("DEBUG SLEEP %s on port %d did not begin", secs, r->port);
    return pid;
}

/* The path of the CLI next to the test binary (or $HILOCK_CLI). */
static const char *cli_path(void) {
    static char cli[PATH_MAX];
    cr_assert_not_null(test_build_path("HILOCK_CLI", "hilock", cli, sizeof(cli)));
    cr_assert_eq(access(cli, X_OK), 0, "no CLI at %s (set HILOCK_CLI)", cli);
    return cli;
}

/* ---- a. Three masters ------------------------------------------------------ */

/* The lock is on every master while held, gone after the release; the
 * fence is the largest of the nodes' fences, every node's fence counter is
 * raised to it by the release (ahead of it), and the next grant's is
 * larger. */
static void acquire_release_on(int count) {
    const char *name = "rl-basic";
    hilock_client *c = rl_client(count);
    /* Scripts loaded on every node first: a request that meets NOSCRIPT is
     * sent again as EVAL behind the next one, so a release could run after
     * the next round's try there (which that node then refuses). */
    got w = acquire_timed(c, "rl-basic-warm", NULL, 5000, NULL);
    cr_assert_eq(w.status, 0, "%d masters: %s (%s)", count, hilock_strerror(w.status), hilock_client_errstr(c));
    cr_expect_eq(release_now(&e, w.hold), 0);
    cr_expect_eq(holding_settled(count, "rl-basic-warm", 0, 1000), 0);
    unsigned long long prev = 0;
    for (int round = 0; round < 2; round++) {
        long long took;
        got g = acquire_timed(c, name, NULL, 5000, &took);
        cr_assert_eq(g.status, 0, "%d masters: %s (%s)", count, hilock_strerror(g.status),
                     hilock_client_errstr(c));
        cr_log_info("redlock %d masters: acquired in %lld ms", count, took);
        unsigned long long f = hilock_hold_fence(g.hold), max = 0;
        int at_or_below = 0, equal = 0;
        holding_settled(count, name, count, 1000); /* the late replies */
        for (int i = 0; i < count; i++) {
            cr_expect_eq(lock_exists(&srv[i], name), 1, "%d masters: no lock on node %d while held", count, i);
            char key[256];
            long long pttl = test_redis_int(&srv[i], "PTTL %s", lock_key(name, key, sizeof(key)));
            cr_expect(pttl > 0 && pttl <= 30000, "node %d: PTTL %lld", i, pttl);
            unsigned long long nf = node_fence(&srv[i], name);
            if (nf > max) max = nf;
            at_or_below += nf <= f;
            equal += nf == f;
        }
        for (int i = count; i < NODES; i++)
            cr_expect_eq(lock_exists(&srv[i], name), 0, "a lock on node %d, not in the URL", i);
        /* The largest fence of the majority that granted: one node's, and
         * at or above a quorum of them. A node whose grant came after the
         * decision may have a larger one (logged). */
        cr_expect_geq(equal, 1, "%d masters: fence %llu is no node's", count, f);
        cr_expect_geq(at_or_below, count / 2 + 1, "%d masters: fence %llu is above only %d nodes' fences", count,
                      f, at_or_below);
        if (f != max)
            cr_log_info("%d masters: fence %llu, %d node(s) above it (largest %llu, +%llu us)", count, f,
                        count - at_or_below, max, max - f);
        cr_expect_gt(f, prev, "fences must grow: %llu after %llu", f, prev);
        prev = f;
        cr_expect_eq(release_now(&e, g.hold), 0);
        holding_settled(count, name, 0, 1000);
        for (int i = 0; i < count; i++) {
            cr_expect_eq(lock_exists(&srv[i], name), 0, "%d masters: lock left on node %d", count, i);
            cr_expect_geq(node_fence_counter(&srv[i], name), f,
                          "%d masters: node %d's fence counter %llu was not raised to the hold's %llu",
                          count, i, node_fence_counter(&srv[i], name), f);
        }
    }
    hilock_client_free(c);
}

Test(redlock, three_masters_acquire_release) { acquire_release_on(3); }

Test(redlock, one_master) { acquire_release_on(1); }

/* A node whose fence counter is far ahead: a grant it takes part in has a
 * fence above it, and every node is raised to that fence, so the next
 * grant is larger even on a majority without that node. (Node 2 is down
 * for the first grant, so that node 1 is in its majority for sure.) */
Test(redlock, fence_follows_the_largest_node) {
    const char *name = "rl-fence";
    char key[256];
    lock_key(name, key, sizeof(key));
    strcat(key, ":fence");
    /* 1000 s ahead of the server clock in microseconds. */
    redisContext *k = test_redis_connect(&srv[1]);
    redisReply *t = redisCommand(k, "TIME");
    cr_assert(t && t->type == REDIS_REPLY_ARRAY);
    unsigned long long ahead = strtoull(t->element[0]->str, NULL, 10) * 1000000ull + 1000000000ull;
    freeReplyObject(t);
    freeReplyObject(redisCommand(k, "SET %s %llu", key, ahead));
    redisFree(k);

    int port2 = srv[2].port;
    test_redis_stop(&srv[2]);
    hilock_client *c = rl_client(3);
    got g = acquire_timed(c, name, NULL, 5000, NULL);
    cr_assert_eq(g.status, 0, "%s", hilock_strerror(g.status));
    unsigned long long f1 = hilock_hold_fence(g.hold);
    cr_expect_gt(f1, ahead, "fence %llu; node 1 granted it with its counter at %llu", f1, ahead);
    cr_expect_eq(release_now(&e, g.hold), 0);
    test_loop_for(e.base, 50); /* the raise */
    cr_expect_geq(node_fence_counter(&srv[0], name), f1, "node 0 was not raised to %llu", f1);

    /* Now a majority without node 1: node 0 (raised) and node 2 (empty). */
    test_redis_stop(&srv[1]);
    cr_assert_eq(test_redis_start_debuggable(&srv[2], port2), 0);
    test_loop_for(e.base, 1500); /* the client reconnects to node 2 */
    got g2 = acquire_timed(c, name, NULL, 5000, NULL);
    cr_assert_eq(g2.status, 0, "%s (%s)", hilock_strerror(g2.status), hilock_client_errstr(c));
    cr_expect_gt(hilock_hold_fence(g2.hold), f1, "fence %llu after %llu without the node ahead",
                 hilock_hold_fence(g2.hold), f1);
    cr_expect_eq(release_now(&e, g2.hold), 0);
    hilock_client_free(c);
}

/* ---- b. Five masters, and exclusion across clients and processes ---------- */

Test(redlock, five_masters_acquire_release) { acquire_release_on(5); }

#define EX_NAMES 3
#define EX_PER 10     /* acquires per client and name */
#define EX_HOLD_US 3000

typedef struct ex_shm {
    resource res[EX_NAMES];
    volatile int first_err, first_release_err;
} ex_shm;

/* One acquire: its name's resource (and its client's count in w). */
typedef struct ex_turn {
    worker *w;
    struct event_base *base;
    hilock_hold *h;
    long v;
    int calls;
} ex_turn;

static ex_shm *shm;

static void ex_released(int status, void *data) {
    if (status != 0) __sync_bool_compare_and_swap(&shm->first_release_err, 0, status);
    exclusion_released(status, data);
}

static void ex_release(evutil_socket_t fd, short what, void *data) {
    ex_turn *t = data;
    resource *res = t->w->res;
    (void)fd; (void)what;
    res->counter = t->v + 1;
    res->inside--;
    if (hilock_release(t->h, ex_released, t->w) != 0) {
        __atomic_add_fetch(&res->errors, 1, __ATOMIC_SEQ_CST);
        if (++t->w->released == t->w->expected) t->w->done = 1;
    }
}

/* The critical section spans EX_HOLD_US: another holder meanwhile shows up
 * in `inside`, a lost increment of the counter, or a fence out of order. */
static void ex_granted(hilock_hold *h, int status, void *data) {
    ex_turn *t = data;
    worker *w = t->w;
    resource *res = w->res;
    t->calls++;
    w->callbacks++;
    if (status != 0) {
        __atomic_add_fetch(&res->errors, 1, __ATOMIC_SEQ_CST);
        __sync_bool_compare_and_swap(&shm->first_err, 0, status);
        if (++w->released == w->expected) w->done = 1;
        return;
    }
    if (res->inside++ > 0) res->overlaps++;
    unsigned long long f = hilock_hold_fence(h);
    if (f <= res->last_fence) res->fence_regressions++;
    res->last_fence = f;
    t->v = res->counter;
    t->h = h;
    struct timeval tv = {0, EX_HOLD_US};
    event_base_once(t->base, -1, EV_TIMEOUT, ex_release, t, &tv);
}

/* One client's acquires: EX_PER on each name. Returns 1 when all ended. */
typedef struct ex_client {
    hilock_client *c;
    worker w[EX_NAMES];
    ex_turn t[EX_NAMES * EX_PER];
} ex_client;

static int ex_start(ex_client *x, hilock_client *c, struct event_base *base) {
    x->c = c;
    for (int n = 0; n < EX_NAMES; n++) {
        worker w0 = {&shm->res[n], EX_PER, 0, 0, 0};
        x->w[n] = w0;
    }
    for (int i = 0; i < EX_NAMES * EX_PER; i++) {
        char name[32];
        int n = i % EX_NAMES;
        x->t[i].w = &x->w[n];
        x->t[i].base = base;
        x->t[i].calls = 0;
        snprintf(name, sizeof(name), "rl-ex-%d", n);
        if (hilock_acquire(c, name, NULL, ex_granted, &x->t[i], NULL) != 0) return -1;
    }
    return 0;
}

static int ex_done(const ex_client *x) {
    for (int n = 0; n < EX_NAMES; n++)
        if (!x->w[n].done) return 0;
    return 1;
}

/* Every acquire had exactly one callback. */
static int ex_once(const ex_client *x) {
    for (int i = 0; i < EX_NAMES * EX_PER; i++)
        if (x->t[i].calls != 1) return 0;
    return 1;
}

static hilock_client *ex_client_new(const char *url, const hilock_loop *loop) {
    hilock_config cfg;
    hilock_client *c = NULL;
    lockenv_config(&cfg, url);
    return hilock_client_new(&c, &cfg, loop) == 0 ? c : NULL;
}

Test(redlock, five_masters_exclusion_across_processes, .timeout = 90) {
    char url[512];
    url_of(url, sizeof(url), 5);
    shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(shm, MAP_FAILED);
    memset((void *)shm, 0, sizeof(*shm));

    /* The children first: nothing of ours exists yet to be inherited. */
    int nkids = 2;
    for (int p = 0; p < nkids; p++) {
        fflush(NULL);
        kids[p] = fork();
        cr_assert_geq(kids[p], 0);
        if (kids[p] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            struct event_base *b = event_base_new();
            hilock_loop l;
            hilock_libevent_init(&l, b);
            hilock_client *c = ex_client_new(url, &l);
            static ex_client x;
            if (c == NULL || ex_start(&x, c, b) != 0) _exit(2);
            long long t0 = test_now_ms();
            while (!ex_done(&x) && test_now_ms() - t0 < 60000) test_loop_for(b, 20);
            test_loop_for(b, 100); /* a second callback would come now */
            int ok = ex_done(&x) && ex_once(&x);
            hilock_client_free(c);
            event_base_free(b);
            _exit(ok ? 0 : 1);
        }
    }
    static ex_client xa, xb;
    hilock_client *a = ex_client_new(url, &e.loop), *b = ex_client_new(url, &e.loop);
    cr_assert(a && b);
    long long t0 = test_now_ms();
    cr_assert_eq(ex_start(&xa, a, e.base), 0);
    cr_assert_eq(ex_start(&xb, b, e.base), 0);
    while (!(ex_done(&xa) && ex_done(&xb)) && test_now_ms() - t0 < 60000) test_loop_for(e.base, 20);
    long long took = test_now_ms() - t0;
    test_loop_for(e.base, 100);
    cr_expect(ex_done(&xa) && ex_done(&xb), "the parent's acquires did not all end");
    cr_expect(ex_once(&xa) && ex_once(&xb), "an acquire's callback ran other than once");
    for (int p = 0; p < nkids; p++) {
        int st = test_wait(kids[p], 70000);
        cr_expect_eq(st, 0, "worker process %d: status %d", p, st);
        if (st >= 0) kids[p] = 0;
    }
    long total = 0, errors = 0;
    for (int n = 0; n < EX_NAMES; n++) {
        resource *r = &shm->res[n];
        cr_expect_eq(r->overlaps, 0, "rl-ex-%d: two holders at once (%ld)", n, r->overlaps);
        cr_expect_eq(r->fence_regressions, 0, "rl-ex-%d: fences out of order (%ld)", n, r->fence_regressions);
        cr_expect_eq(r->counter + r->errors, 4 * EX_PER, "rl-ex-%d: counter %ld + errors %ld, want %d", n,
                     r->counter, r->errors, 4 * EX_PER);
        total += r->counter;
        errors += r->errors;
    }
    cr_expect_eq(errors, 0, "%ld errors, first of an acquire: %s, of a release: %s (%s)", errors,
                 hilock_strerror(shm->first_err), hilock_strerror(shm->first_release_err), hilock_client_errstr(a));
    cr_log_info("redlock exclusion: %ld grants on %d names by 4 clients (2 processes more) in %lld ms",
                total, EX_NAMES, took);
    for (int n = 0; n < EX_NAMES; n++) {
        char name[32];
        snprintf(name, sizeof(name), "rl-ex-%d", n);
        cr_expect_eq(nodes_holding(5, name), 0, "a lock of %s left behind", name);
    }
    hilock_client_free(a);
    hilock_client_free(b);
    munmap((void *)shm, sizeof(*shm));
}

/* ---- c. One master down ----------------------------------------------------- */

/* A port where nothing listens, from the start. */
Test(redlock, one_master_never_up) {
    char url[256];
    int ports[3] = {srv[0].port, srv[1].port, test_refused_port()};
    hilock_client *c = rl_client_url(url_of_ports(url, sizeof(url), ports, 3));
    for (int round = 0; round < 2; round++) {
        long long took;
        got g = acquire_timed(c, "rl-down", NULL, 5000, &took);
        cr_log_info("redlock, 1 of 3 never up: acquire %d in %lld ms", round, took);
        cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
        cr_expect_lt(took, 1000, "acquire %d took %lld ms with one master down", round, took);
        cr_expect_eq(nodes_holding(2, "rl-down"), 2);
        cr_expect_eq(release_now(&e, g.hold), 0);
        cr_expect_eq(nodes_holding(2, "rl-down"), 0);
    }
    hilock_client_free(c);
}

/* A server killed after the client had connected to it. */
Test(redlock, one_master_killed) {
    hilock_client *c = rl_client(3);
    got g = acquire_timed(c, "rl-killed", NULL, 5000, NULL);
    cr_assert_eq(g.status, 0, "%s", hilock_strerror(g.status));
    cr_expect_eq(release_now(&e, g.hold), 0);
    test_redis_stop(&srv[2]); /* kill -9 */
    for (int round = 0; round < 3; round++) {
        long long took;
        g = acquire_timed(c, "rl-killed", NULL, 5000, &took);
        cr_log_info("redlock, 1 of 3 killed: acquire %d in %lld ms", round, took);
        cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
        cr_expect_lt(took, 1000, "acquire %d took %lld ms with one master down", round, took);
        cr_expect_eq(nodes_holding(2, "rl-killed"), 2);
        cr_expect_eq(release_now(&e, g.hold), 0);
        cr_expect_eq(nodes_holding(2, "rl-killed"), 0);
    }
    hilock_client_free(c);
}

/* ---- d. A minority down, a majority down ----------------------------------- */

Test(redlock, minority_down_of_five) {
    hilock_client *c = rl_client(5);
    test_redis_stop(&srv[3]);
    test_redis_stop(&srv[4]);
    long long took;
    got g = acquire_timed(c, "rl-minority", NULL, 5000, &took);
    cr_log_info("redlock, 2 of 5 down: acquired in %lld ms", took);
    cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    cr_expect_lt(took, 1000);
    cr_expect_eq(nodes_holding(3, "rl-minority"), 3);
    cr_expect_eq(release_now(&e, g.hold), 0);
    cr_expect_eq(nodes_holding(3, "rl-minority"), 0);
    hilock_client_free(c);
}

/* The error of an acquire that no quorum could answer: the connection's,
 * never a busy lock (request_timeout_ms is 1000 here). */
static void expect_no_quorum(hilock_client *c, const char *name, const hilock_acquire_opts *o,
                             const char *what) {
    long long took;
    got g = acquire_timed(c, name, o, 6000, &took);
    cr_log_info("redlock, 2 of 3 down, %s: %s in %lld ms (%s)", what, hilock_strerror(g.status), took,
                hilock_client_errstr(c));
    cr_expect_neq(g.status, 0, "%s: granted without a quorum", what);
    if (g.status == 0) release_now(&e, g.hold);
    cr_expect(g.status == HILOCK_ECONN || g.status == HILOCK_EDEADLINE,
              "%s: %s, want ECONN or EDEADLINE (a dead majority is not a busy lock)", what,
              hilock_strerror(g.status));
    cr_expect_leq(took, 1000 + 1000, "%s: the error took %lld ms (request_timeout_ms 1000)", what, took);
}

Test(redlock, majority_down_of_three) {
    hilock_client *c = rl_client(3);
    test_redis_stop(&srv[1]);
    test_redis_stop(&srv[2]);
    expect_no_quorum(c, "rl-majority", NULL, "wait forever");
    hilock_acquire_opts o = opts_wait(0);
    expect_no_quorum(c, "rl-majority", &o, "try once");
    o = opts_wait(5000);
    expect_no_quorum(c, "rl-majority", &o, "wait 5000 ms");
    cr_expect_eq(lock_exists(&srv[0], "rl-majority"), 0, "the lone node's grant was not released");
    hilock_client_free(c);

    /* Never up at all, from the client's start. */
    char url[256];
    int ports[3] = {srv[0].port, test_refused_port(), test_refused_port()};
    c = rl_client_url(url_of_ports(url, sizeof(url), ports, 3));
    expect_no_quorum(c, "rl-majority", NULL, "never up, wait forever");
    o = opts_wait(0);
    expect_no_quorum(c, "rl-majority", &o, "never up, try once");
    hilock_client_free(c);
}

/* Renewals over Redlock are never batched (each carries its hold's fence,
 * for a master that lost the key): 20 holds of a default client, each
 * renewed every 300 ms, cost every master a script call per renewal, and
 * none is lost. */
Test(redlock, many_holds_renew_alone_on_every_master) {
    enum { N = 20 };
    hilock_client *a = rl_client(3);
    hilock_acquire_opts o = opts_lease(HILOCK_WAIT_FOREVER, 900);
    got g[N];
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "rl-many-%d", i);
        g[i] = acquire_timed(a, name, &o, 5000, NULL);
        cr_assert_eq(g[i].status, 0, "%s: %s", name, hilock_strerror(g[i].status));
    }
    long long calls0[3];
    for (int m = 0; m < 3; m++) calls0[m] = script_calls_of(&srv[m]);
    test_loop_for(e.base, 1500); /* four renewals of each hold at least */
    for (int m = 0; m < 3; m++) {
        long long calls = script_calls_of(&srv[m]) - calls0[m];
        cr_expect_geq(calls, N * 4, "master %d: %lld script calls for %d holds renewed every 300 ms", m, calls, N);
    }
    for (int i = 0; i < N; i++) {
        cr_expect_eq(hilock_hold_lost(g[i].hold), 0, "hold %d lost", i);
        cr_expect_eq(release_now(&e, g[i].hold), 0);
    }
    hilock_client_free(a);
}

/* ---- e. A master restarted empty under a holder ---------------------------- */

Test(redlock, master_restarted_empty_under_holder) {
    const char *name = "rl-restart";
    hilock_client *a = rl_client(3), *b = rl_client(3);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o = opts_lease(HILOCK_WAIT_FOREVER, 1500); /* renewed every 500 ms */
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = acquire_timed(a, name, &o, 5000, NULL);
    cr_assert_eq(ga.status, 0, "%s", hilock_strerror(ga.status));
    /* b knows every node before the fault. */
    got gw = acquire_timed(b, "rl-warm", NULL, 5000, NULL);
    cr_assert_eq(gw.status, 0);
    cr_expect_eq(release_now(&e, gw.hold), 0);

    int port = srv[2].port;
    test_redis_kill(&srv[2]);
    test_redis_stop(&srv[2]); /* its dir goes: the restart is empty */
    cr_assert_eq(test_redis_start_debuggable(&srv[2], port), 0, "no restart on port %d", port);
    cr_expect_eq(lock_exists(&srv[2], name), 0);

    /* A sync subscriber on the restarted node's channel: b's grant there
     * must be released quietly. */
    char ch[256];
    lock_key(name, ch, sizeof(ch));
    strcat(ch, ":ch");
    redisContext *sub = test_redis_connect(&srv[2]);
    cr_assert_not_null(sub);
    redisReply *rep = redisCommand(sub, "SUBSCRIBE %s", ch);
    cr_assert_not_null(rep);
    freeReplyObject(rep);

    for (int step = 0; step < 4; step++) {
        test_loop_for(e.base, 500);
        cr_expect_eq(hilock_hold_lost(ga.hold), 0, "lost after %d ms with 2 of 3 masters", 500 * (step + 1));
        if (step == 2) { /* b has reconnected to the restarted node by now */
            hilock_acquire_opts once = opts_wait(0);
            long long calls = script_calls_of(&srv[2]);
            got gb = acquire_timed(b, name, &once, 3000, NULL);
            cr_log_info("redlock, try once while held on 2 of 3: %s; script calls on the restarted node: %lld",
                        hilock_strerror(gb.status), script_calls_of(&srv[2]) - calls);
            cr_expect_eq(gb.status, HILOCK_EBUSY, "try once while held on 2 of 3: %s", hilock_strerror(gb.status));
            if (gb.status == 0) release_now(&e, gb.hold);
        }
    }
    cr_expect_eq(lost.calls, 0, "the lost callback ran (%s)", hilock_strerror(lost.why));
    cr_expect_eq(nodes_holding(2, name), 2);
    /* The holder's renewals took the restarted master back (b's grant
     * there, if it got one first, was undone quietly). */
    cr_expect_eq(lock_exists(&srv[2], name), 1, "the holder's renewal did not take the restarted master back");
    struct timeval tv = {0, 200000};
    redisSetTimeout(sub, tv);
    void *msg = NULL;
    int got_msg = redisGetReply(sub, &msg) == REDIS_OK && msg != NULL;
    if (msg) freeReplyObject(msg);
    redisFree(sub);
    cr_expect_eq(got_msg, 0, "the release of a grant that lost the vote published a message");

    /* Then another master restarts empty (more than a lease after the
     * first: Redlock's delayed restart): the hold still has a quorum, the
     * first restarted master among it. */
    port = srv[1].port;
    test_redis_kill(&srv[1]);
    test_redis_stop(&srv[1]);
    cr_assert_eq(test_redis_start_debuggable(&srv[1], port), 0, "no restart on port %d", port);
    test_loop_for(e.base, 2000);
    cr_expect_eq(hilock_hold_lost(ga.hold), 0, "lost after the second empty restart");
    cr_expect_eq(lost.calls, 0, "the lost callback ran (%s)", hilock_strerror(lost.why));
    cr_expect_eq(nodes_holding(3, name), 3, "the renewals did not take every master back");

    unsigned long long fa = hilock_hold_fence(ga.hold);
    cr_expect_eq(release_now(&e, ga.hold), 0);
    cr_expect_eq(nodes_holding(3, name), 0);
    hilock_acquire_opts w = opts_wait(3000);
    got gb = acquire_timed(b, name, &w, 5000, NULL);
    cr_expect_eq(gb.status, 0, "after the release: %s", hilock_strerror(gb.status));
    if (gb.status == 0) {
        cr_expect_gt(hilock_hold_fence(gb.hold), fa);
        cr_expect_eq(release_now(&e, gb.hold), 0);
    }
    hilock_client_free(a);
    hilock_client_free(b);
}

/* The subscriber connections dropped one after the other (CLIENT KILL
 * TYPE pubsub), the leader's among them: the waiter is still subscribed
 * on every node once they are back, is woken by the release, and when the
 * name goes idle it is unsubscribed everywhere (nothing left behind on the
 * nodes that kept their subscription through a leader's loss). */
Test(redlock, subscriber_connections_dropped_one_by_one) {
    const char *name = "rl-subkill";
    hilock_client *a = rl_client(3), *b = rl_client(3);
    hilock_acquire_opts o = opts_lease(HILOCK_WAIT_FOREVER, 30000);
    got ga = acquire_timed(a, name, &o, 5000, NULL);
    cr_assert_eq(ga.status, 0, "%s", hilock_strerror(ga.status));
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, name, NULL, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 200);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(run_on(&srv[i], "CLIENT KILL TYPE %s", "pubsub"), 1);
        test_loop_for(e.base, 300); /* back, and subscribed again */
    }
    for (int i = 0; i < 3; i++)
        cr_expect_geq(numsub(&srv[i], name), 1, "the waiter is not subscribed on node %d", i);
    cr_expect_eq(gb.calls, 0, "granted while held");
    long long t0 = test_now_ms();
    cr_expect_eq(release_now(&e, ga.hold), 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 3000), "the waiter was not woken");
    cr_expect_eq(gb.status, 0, "%s", hilock_strerror(gb.status));
    cr_expect_lt(gb.at_ms - t0, 300, "granted %lld ms after the release", gb.at_ms - t0);
    if (gb.status == 0) cr_expect_eq(release_now(&e, gb.hold), 0);
    test_loop_for(e.base, 600); /* linger (lockenv: 100 ms), then unsubscribe */
    for (int i = 0; i < 3; i++)
        cr_expect_eq(numsub(&srv[i], name), 0, "a subscription left on node %d", i);
    hilock_client_free(a);
    hilock_client_free(b);

    /* A lingering name (no waiter, still subscribed) while one node's
     * subscriber connection drops, each node in turn (one of them leads):
     * when the linger ends it is unsubscribed on every node. */
    char url[512];
    hilock_client *c = lockenv_client_url(&e, url_of(url, sizeof(url), 3), 1500);
    for (int k = 0; k < 3; k++) {
        char idle[32];
        snprintf(idle, sizeof(idle), "rl-linger-%d", k);
        hilock_client *h = rl_client(3);
        got gh = acquire_timed(h, idle, NULL, 5000, NULL);
        cr_assert_eq(gh.status, 0);
        got gc = {0, 0, NULL, 0};
        cr_assert_eq(hilock_acquire(c, idle, NULL, got_cb, &gc, NULL), 0);
        test_loop_for(e.base, 200); /* c waits, subscribed on every node */
        cr_expect_eq(release_now(&e, gh.hold), 0);
        cr_assert(test_loop_until(e.base, &gc.calls, 3000));
        cr_assert_eq(gc.status, 0);
        cr_expect_eq(release_now(&e, gc.hold), 0); /* c's name lingers */
        cr_assert_eq(run_on(&srv[k], "CLIENT KILL TYPE %s", "pubsub"), 1);
        test_loop_for(e.base, 2500); /* the linger ends */
        for (int i = 0; i < 3; i++)
            cr_expect_eq(numsub(&srv[i], idle), 0, "node %d dropped: a subscription left on node %d", k, i);
        hilock_client_free(h);
    }
    hilock_client_free(c);
}

/* ---- f. Validity against a stalled master ----------------------------------- */

Test(redlock, stalled_master_and_validity) {
    const char *name = "rl-stall";
    hilock_client *c = rl_client(3);
    got g = acquire_timed(c, name, NULL, 5000, NULL); /* connected, scripts loaded */
    cr_assert_eq(g.status, 0);
    cr_expect_eq(release_now(&e, g.hold), 0);

    /* One of three stalls for longer than the lease. */
    pid_t s1 = stall(&srv[2], "1.5");
    hilock_acquire_opts o = opts_lease(2000, 200);
    lostrec lost = {0, 0, 0};
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    long long took;
    g = acquire_timed(c, name, &o, 3000, &took);
    cr_log_info("redlock, 1 of 3 stalled, lease 200 ms: %s in %lld ms", hilock_strerror(g.status), took);
    cr_expect_eq(g.status, 0, "one stalled master of 3: %s (%s)", hilock_strerror(g.status),
                 hilock_client_errstr(c));
    cr_expect_lt(took, 1000);
    if (g.status == 0) {
        /* Renewals (every ~67 ms) confirmed by the 2 others keep it. */
        test_loop_for(e.base, 600);
        cr_expect_eq(hilock_hold_lost(g.hold), 0, "lost while 2 of 3 renew");
        cr_expect_eq(lost.calls, 0);
        long long t0 = test_now_ms();
        int st = release_now(&e, g.hold);
        cr_log_info("release with one master stalled: %s in %lld ms", hilock_strerror(st), test_now_ms() - t0);
        cr_expect_eq(st, 0, "release with 2 of 3 answering: %s", hilock_strerror(st));
    }
    cr_expect_eq(test_wait(s1, 5000), 0, "DEBUG SLEEP on node 2 failed");
    test_loop_for(e.base, 300); /* the stalled node's late replies */
    cr_expect_eq(nodes_holding(3, name), 0, "a lock left behind after the stall");

    /* Two of three stall: no grant within the wait. */
    pid_t s2 = stall(&srv[1], "2"), s3 = stall(&srv[2], "2");
    o = opts_lease(1000, 200);
    g = acquire_timed(c, name, &o, 4000, &took);
    cr_log_info("redlock, 2 of 3 stalled, wait 1000 ms: %s in %lld ms (%s)", hilock_strerror(g.status), took,
                hilock_client_errstr(c));
    cr_expect_neq(g.status, 0, "granted with 2 of 3 masters stalled");
    if (g.status == 0) release_now(&e, g.hold);
    cr_expect_leq(took, 1000 + 1000 + 500, "the wait of 1000 ms ended after %lld ms", took);
    cr_expect_eq(test_wait(s2, 5000), 0);
    cr_expect_eq(test_wait(s3, 5000), 0);
    /* The stall is over: once the connections that the deadline dropped are
     * back (and the late grants' 200 ms have run out), grants again.
     * (Right after the stall, see majority_back_within_the_request_timeout
     * and stalled_majority_leaves_no_lock_behind.) */
    test_loop_for(e.base, 1500);
    o = opts_wait(3000);
    g = acquire_timed(c, name, &o, 5000, &took);
    cr_expect_eq(g.status, 0, "after the stall: %s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    cr_log_info("redlock, after the stall: acquired in %lld ms", took);
    if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
    cr_expect_eq(holding_settled(3, name, 0, 1000), 0);
    hilock_client_free(c);
}

/* A try that a stalled majority answered only after its deadline ran there
 * once the stall ended: the client, which gave up on it, must undo those
 * late grants (as a standalone client does, when its connection is back),
 * or the name stays taken by nobody for a whole lease. */
Test(redlock, stalled_majority_leaves_no_lock_behind) {
    const char *name = "rl-late";
    hilock_client *c = rl_client(3);
    got g = acquire_timed(c, name, NULL, 5000, NULL);
    cr_assert_eq(g.status, 0);
    cr_expect_eq(release_now(&e, g.hold), 0);
    pid_t s2 = stall(&srv[1], "2"), s3 = stall(&srv[2], "2");
    hilock_acquire_opts o = opts_wait(1000); /* the default lease, 30 s */
    long long took;
    g = acquire_timed(c, name, &o, 4000, &took);
    cr_log_info("redlock, 2 of 3 stalled, lease 30 s: %s in %lld ms", hilock_strerror(g.status), took);
    cr_expect_neq(g.status, 0);
    if (g.status == 0) release_now(&e, g.hold);
    cr_expect_eq(test_wait(s2, 5000), 0);
    cr_expect_eq(test_wait(s3, 5000), 0);
    test_loop_for(e.base, 1500); /* reconnects; the undo of the late grants */
    char key[256];
    lock_key(name, key, sizeof(key));
    for (int i = 0; i < 3; i++) {
        long long pttl = test_redis_int(&srv[i], "PTTL %s", key);
        cr_expect_eq(pttl, -2, "node %d: a late grant of the timed-out try is left, PTTL %lld ms", i, pttl);
    }
    o = opts_wait(2000);
    g = acquire_timed(c, name, &o, 4000, &took);
    cr_expect_eq(g.status, 0, "1.5 s after the stall: %s in %lld ms (%s)", hilock_strerror(g.status), took,
                 hilock_client_errstr(c));
    if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
}

/* A majority that is away for less than the request timeout: like a
 * standalone client whose server comes up within it (faults'
 * server_comes_up_later), a wait with time left is served once the nodes
 * are back, instead of ending at once. */
Test(redlock, majority_back_within_the_request_timeout) {
    hilock_client *c = rl_client(3);
    got g = acquire_timed(c, "rl-back", NULL, 5000, NULL);
    cr_assert_eq(g.status, 0);
    cr_expect_eq(release_now(&e, g.hold), 0);
    int p1 = srv[1].port, p2 = srv[2].port;
    test_redis_stop(&srv[1]);
    test_redis_stop(&srv[2]);
    test_loop_for(e.base, 50); /* the client sees them go */
    hilock_acquire_opts o = opts_wait(5000);
    got gw = {0, 0, NULL, 0};
    long long t0 = test_now_ms();
    cr_assert_eq(hilock_acquire(c, "rl-back", &o, got_cb, &gw, NULL), 0);
    test_loop_for(e.base, 250);
    int early = gw.calls;
    if (early)
        cr_log_info("redlock, majority away: the wait of 5000 ms ended after %lld ms: %s (%s)", gw.at_ms - t0,
                    hilock_strerror(gw.status), hilock_client_errstr(c));
    cr_assert_eq(test_redis_start_debuggable(&srv[1], p1), 0);
    cr_assert_eq(test_redis_start_debuggable(&srv[2], p2), 0);
    test_loop_until(e.base, &gw.calls, 5000);
    cr_assert_eq(gw.calls, 1);
    cr_log_info("redlock, majority back after 250 ms: %s at %lld ms", hilock_strerror(gw.status), gw.at_ms - t0);
    cr_expect_eq(gw.status, 0, "a wait of 5000 ms with a majority away for 250 ms: %s after %lld ms (%s)",
                 hilock_strerror(gw.status), gw.at_ms - t0, hilock_client_errstr(c));
    if (gw.status == 0) cr_expect_eq(release_now(&e, gw.hold), 0);
    hilock_client_free(c);
}

/* The quiet undo of a try that lost its vote must not undo the waiter's
 * next try, which carries the same token. Here the undo meets NOSCRIPT
 * (script caches flushed, as after a restart) and is sent again as EVAL,
 * behind the next try that a wakeup sent at once: on every node the
 * server runs try 2 (a grant), then the undo of try 1 (a delete). The
 * waiter is told it holds the lock, and another client takes it. The
 * first try loses by validity: 2 of 3 nodes stalled past its lease. */
Test(redlock, undo_of_a_lost_vote_keeps_the_next_grant) {
    const char *name = "rl-undo";
    char key[256], ch[260];
    lock_key(name, key, sizeof(key));
    snprintf(ch, sizeof(ch), "%s:ch", key);
    hilock_client *b = rl_client(3), *c = rl_client(3);
    for (int i = 0; i < 2; i++) { /* connected, scripts loaded */
        got g = acquire_timed(i ? c : b, "rl-undo-warm", NULL, 5000, NULL);
        cr_assert_eq(g.status, 0);
        cr_expect_eq(release_now(&e, g.hold), 0);
    }
    /* Someone else holds it on every node: b waits, subscribed. */
    for (int i = 0; i < 3; i++) {
        redisContext *k = test_redis_connect(&srv[i]);
        freeReplyObject(redisCommand(k, "HSET %s token someone-else fence 1", key));
        freeReplyObject(redisCommand(k, "PEXPIRE %s 60000", key));
        redisFree(k);
    }
    hilock_acquire_opts o = opts_lease(5000, 300);
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, name, &o, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 100);
    cr_assert_eq(gb.calls, 0);
    /* It goes; the script caches go too; 2 of 3 nodes stall past b's lease. */
    for (int i = 0; i < 3; i++) {
        cr_assert(run_on(&srv[i], "SCRIPT FLUSH", NULL));
        cr_assert(run_on(&srv[i], "DEL %s", key));
    }
    pid_t s1 = stall(&srv[1], "0.6"), s2 = stall(&srv[2], "0.6");
    /* Two messages at once: the first sends try 1, the second comes while
     * it is in flight (so try 2 goes the moment try 1 has lost). */
    redisContext *k = test_redis_connect(&srv[0]);
    cr_assert_not_null(k);
    redisAppendCommand(k, "PUBLISH %s r", ch);
    redisAppendCommand(k, "PUBLISH %s r", ch);
    for (int i = 0; i < 2; i++) {
        void *rep = NULL;
        if (redisGetReply(k, &rep) == REDIS_OK && rep) freeReplyObject(rep);
    }
    test_loop_for(e.base, 100); /* and one more while try 1 waits for the stalled nodes */
    freeReplyObject(redisCommand(k, "PUBLISH %s r", ch));
    redisFree(k);
    test_loop_until(e.base, &gb.calls, 3000);
    cr_expect_eq(test_wait(s1, 3000), 0);
    cr_expect_eq(test_wait(s2, 3000), 0);
    cr_assert_eq(gb.calls, 1);
    cr_log_info("redlock, undo race: b %s", hilock_strerror(gb.status));
    if (gb.status == 0) {
        test_loop_for(e.base, 30);
        int held = nodes_holding(3, name), lost = hilock_hold_lost(gb.hold);
        cr_expect(lost || held >= 2, "b holds the lock (not lost) on %d of 3 nodes", held);
        hilock_acquire_opts once = opts_wait(0);
        got gc = acquire_timed(c, name, &once, 3000, NULL);
        lost = hilock_hold_lost(gb.hold);
        cr_expect(gc.status != 0 || lost, "two holders: c was granted while b's hold is not lost (b was on %d nodes)",
                  held);
        if (gc.status == 0) release_now(&e, gc.hold);
        release_now(&e, gb.hold);
    }
    hilock_client_free(b);
    hilock_client_free(c);
}

/* ---- g. Waiters woken by pub/sub, not by polling ---------------------------- */

Test(redlock, waiter_woken_by_release_not_polling) {
    const char *name = "rl-wake";
    hilock_client *a = rl_client(3), *b = rl_client(3);
    hilock_acquire_opts o = opts_lease(HILOCK_WAIT_FOREVER, 30000);
    got ga = acquire_timed(a, name, &o, 5000, NULL);
    cr_assert_eq(ga.status, 0, "%s", hilock_strerror(ga.status));
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, name, NULL, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 300);
    cr_assert_eq(gb.calls, 0, "granted while held");
    for (int i = 0; i < 3; i++)
        cr_expect_geq(numsub(&srv[i], name), 1, "the waiter is not subscribed on node %d", i);

    long long before[3], after[3];
    for (int i = 0; i < 3; i++) before[i] = script_calls_of(&srv[i]);
    test_loop_for(e.base, 1000);
    for (int i = 0; i < 3; i++) {
        after[i] = script_calls_of(&srv[i]);
        cr_log_info("redlock waiter: %lld script calls on node %d in 1 s", after[i] - before[i], i);
        cr_expect_leq(after[i] - before[i], 3, "node %d: %lld script calls in 1 s of waiting", i,
                      after[i] - before[i]);
    }
    cr_expect_eq(gb.calls, 0, "granted while held");

    unsigned long long fa = hilock_hold_fence(ga.hold);
    long long t0 = test_now_ms();
    rel r = {0, 0};
    cr_assert_eq(hilock_release(ga.hold, rel_cb, &r), 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 5000), "the waiter was not woken");
    long long woke = gb.at_ms - t0;
    cr_log_info("redlock waiter: granted %lld ms after the release", woke);
    cr_expect_eq(gb.status, 0, "%s", hilock_strerror(gb.status));
    cr_expect_lt(woke, 300, "granted %lld ms after the release", woke);
    test_loop_until(e.base, &r.calls, 2000);
    cr_expect_eq(r.calls, 1);
    cr_expect_eq(r.status, 0);
    if (gb.status == 0) {
        cr_expect_gt(hilock_hold_fence(gb.hold), fa);
        cr_expect_eq(release_now(&e, gb.hold), 0);
    }
    hilock_client_free(a);
    hilock_client_free(b);
}

/* Waiters hear the release from any node: with each of the three masters
 * killed in turn (one of them carried the subscription the engine counts
 * on), a waiter is still woken by the release, not by its fallback at the
 * holder's PTTL. */
Test(redlock, waiter_woken_with_a_master_down) {
    const char *name = "rl-wake-down";
    for (int i = 0; i < 3; i++) {
        hilock_client *a = rl_client(3), *b = rl_client(3);
        hilock_acquire_opts o = opts_lease(HILOCK_WAIT_FOREVER, 30000);
        got ga = acquire_timed(a, name, &o, 5000, NULL);
        cr_assert_eq(ga.status, 0, "%s", hilock_strerror(ga.status));
        /* a's grant on the last node may still be on its way: b's try must
         * not overtake it there (a would then hold 2 of 3, and 1 of 3
         * after the kill). */
        test_loop_for(e.base, 50);
        cr_assert_eq(nodes_holding(3, name), 3);
        got gb = {0, 0, NULL, 0};
        cr_assert_eq(hilock_acquire(b, name, NULL, got_cb, &gb, NULL), 0);
        test_loop_for(e.base, 200);
        cr_assert_eq(gb.calls, 0);
        int port = srv[i].port;
        test_redis_stop(&srv[i]);
        test_loop_for(e.base, 300);
        cr_assert_eq(gb.calls, 0, "node %d down: the waiter ended (%s)", i, hilock_strerror(gb.status));
        long long t0 = test_now_ms();
        rel r = {0, 0};
        cr_assert_eq(hilock_release(ga.hold, rel_cb, &r), 0);
        test_loop_until(e.base, &gb.calls, 3000);
        cr_log_info("redlock, node %d down: waiter %s %lld ms after the release", i,
                    gb.calls ? "granted" : "not granted", (gb.calls ? gb.at_ms : test_now_ms()) - t0);
        cr_expect_eq(gb.calls, 1, "node %d down: the waiter was not woken by the release", i);
        if (gb.calls) {
            cr_expect_eq(gb.status, 0, "%s", hilock_strerror(gb.status));
            cr_expect_lt(gb.at_ms - t0, 500, "node %d down: granted %lld ms after the release", i, gb.at_ms - t0);
        }
        test_loop_until(e.base, &r.calls, 2000);
        cr_expect_eq(r.calls, 1);
        cr_expect_eq(r.status, 0, "node %d down: the release: %s (%s)", i, hilock_strerror(r.status),
                     hilock_client_errstr(a));
        if (gb.calls && gb.status == 0) {
            /* (When node 0 or 1 restarted with an empty script cache, this
             * has shown undo_of_a_lost_vote_keeps_the_next_grant's bug.) */
            test_loop_for(e.base, 30);
            int held = nodes_holding(3, name);
            cr_expect_eq(held, 2, "node %d down: b's grant is on %d node(s) of the 2 up (b's hold lost: %d)", i, held,
                         hilock_hold_lost(gb.hold));
            int st = release_now(&e, gb.hold);
            cr_expect_eq(st, 0, "node %d down: b's release: %s (%s)", i, hilock_strerror(st), hilock_client_errstr(b));
        }
        hilock_client_free(a);
        hilock_client_free(b);
        cr_assert_eq(test_redis_start_debuggable(&srv[i], port), 0, "no restart on port %d", port);
    }
}

/* Someone else's lock, set by hand on `r` with `pttl_ms`. */
static void hold_by_hand(const test_redis *r, const char *name, const char *token, int pttl_ms) {
    char key[256], ms[16];
    lock_key(name, key, sizeof(key));
    snprintf(ms, sizeof(ms), "%d", pttl_ms);
    redisContext *k = test_redis_connect(r);
    cr_assert_not_null(k);
    freeReplyObject(redisCommand(k, "HSET %s token %s fence 1", key, token));
    freeReplyObject(redisCommand(k, "PEXPIRE %s %s", key, ms));
    redisFree(k);
}

/* One holder with a majority: the waiter looks again when that majority
 * lapses (the earlier of its keys' expiries here; an expiry sends no
 * message), not before and not by polling. */
Test(redlock, waiter_retries_when_the_holders_majority_lapses) {
    const char *name = "rl-lapse";
    hilock_client *b = rl_client(3);
    got w = acquire_timed(b, "rl-lapse-warm", NULL, 5000, NULL);
    cr_assert_eq(w.status, 0);
    cr_expect_eq(release_now(&e, w.hold), 0);
    long long t0 = test_now_ms();
    hold_by_hand(&srv[0], name, "someone-else", 400);
    hold_by_hand(&srv[1], name, "someone-else", 5000);
    long long calls0 = script_calls_of(&srv[2]);
    hilock_acquire_opts o = opts_wait(3000);
    long long took;
    got g = acquire_timed(b, name, &o, 4000, &took);
    long long at = g.at_ms - t0, tries = script_calls_of(&srv[2]) - calls0;
    cr_log_info("redlock, a holder's majority lapsing at 400 ms: %s at %lld ms, %lld script calls on a free node",
                hilock_strerror(g.status), at, tries);
    cr_expect_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(b));
    cr_expect(at >= 390 && at < 1000, "granted at %lld ms; the holder's majority lapsed at 400 ms", at);
    cr_expect_leq(tries, 12, "%lld script calls on node 2 while waiting for the lapse (polling?)", tries);
    if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(b);
}

/* A split vote (no holder has a majority): tried again after 10-60 ms,
 * each grant short of a quorum undone; the wait ends ETIMEDOUT (the lock
 * was seen held), leaving the others' keys alone and the free node free. */
Test(redlock, split_vote_retried_after_a_short_delay) {
    const char *name = "rl-split";
    hilock_client *b = rl_client(3);
    got w = acquire_timed(b, "rl-split-warm", NULL, 5000, NULL);
    cr_assert_eq(w.status, 0);
    cr_expect_eq(release_now(&e, w.hold), 0);
    hold_by_hand(&srv[1], name, "holder-x", 10000);
    hold_by_hand(&srv[2], name, "holder-y", 10000);
    long long calls0 = script_calls_of(&srv[1]);
    hilock_acquire_opts o = opts_wait(1000);
    long long took;
    got g = acquire_timed(b, name, &o, 4000, &took);
    long long calls = script_calls_of(&srv[1]) - calls0;
    cr_log_info("redlock, split vote for 1000 ms: %s in %lld ms, %lld script calls on a held node", hilock_strerror(g.status),
                took, calls);
    cr_expect_eq(g.status, HILOCK_ETIMEDOUT, "%s", hilock_strerror(g.status));
    if (g.status == 0) release_now(&e, g.hold);
    /* A try and an undo per round, a round every 10-60 ms. */
    cr_expect(calls >= 2 * 12 && calls <= 2 * 110, "%lld script calls in 1 s of split votes", calls);
    test_loop_for(e.base, 50);
    cr_expect_eq(lock_exists(&srv[0], name), 0, "a grant short of a quorum left on node 0");
    cr_expect_eq(lock_exists(&srv[1], name), 1);
    cr_expect_eq(lock_exists(&srv[2], name), 1);
    hilock_client_free(b);
}

/* ---- h. A hold lost by quorum ------------------------------------------------ */

Test(redlock, hold_lost_when_a_majority_loses_the_key) {
    const char *name = "rl-lost";
    char key[256];
    lock_key(name, key, sizeof(key));
    hilock_client *c = rl_client(3);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o = opts_lease(HILOCK_WAIT_FOREVER, 1000);
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got g = acquire_timed(c, name, &o, 5000, NULL);
    cr_assert_eq(g.status, 0, "%s", hilock_strerror(g.status));
    test_loop_for(e.base, 700); /* a renewal or two go through */
    cr_expect_eq(hilock_hold_lost(g.hold), 0);
    /* One node gone is not the loss of the lock. */
    cr_assert(run_on(&srv[0], "DEL %s", key));
    test_loop_for(e.base, 700);
    cr_expect_eq(lost.calls, 0, "lost with 2 of 3 keys left");
    cr_expect_eq(hilock_hold_lost(g.hold), 0);
    /* The quorum held: the renewal put the key back there. */
    cr_expect_eq(lock_exists(&srv[0], name), 1, "the renewal did not put the key back on node 0");

    /* Two keys gone between renewals: the quorum lapsed (another client
     * could have held the lock meanwhile), so the hold is lost, although
     * the renewal puts the keys back where they are missing. */
    long long t0 = test_now_ms();
    cr_assert(run_on(&srv[0], "DEL %s", key));
    cr_assert(run_on(&srv[1], "DEL %s", key));
    cr_assert(test_loop_until(e.base, &lost.calls, 3000), "no lost callback with 1 of 3 keys left");
    cr_log_info("redlock: lost %lld ms after the second DEL (lease 1000 ms)", lost.at_ms - t0);
    cr_expect_leq(lost.at_ms - t0, 1000 + 200);
    test_loop_for(e.base, 1000);
    cr_expect_eq(lost.calls, 1, "the lost callback ran %d times", lost.calls);
    cr_expect_eq(lost.why, HILOCK_ELOST, "%s", hilock_strerror(lost.why));
    cr_expect_eq(hilock_hold_lost(g.hold), 1);
    int st = release_now(&e, g.hold);
    cr_log_info("release of the lost hold: %s; key on node 2: %lld", hilock_strerror(st),
                lock_exists(&srv[2], name));
    cr_expect_eq(st, HILOCK_ELOST, "release of a lost hold: %s", hilock_strerror(st));
    hilock_client_free(c);
}

/* hilock_hold_extend goes to every node; it fails, and the hold is lost,
 * once a majority no longer has the key. */
Test(redlock, extend_on_every_node) {
    const char *name = "rl-extend";
    char key[256];
    lock_key(name, key, sizeof(key));
    hilock_client *c = rl_client(3);
    hilock_acquire_opts o = opts_lease(HILOCK_WAIT_FOREVER, 2000);
    o.no_renew = 1;
    got g = acquire_timed(c, name, &o, 5000, NULL);
    cr_assert_eq(g.status, 0, "%s", hilock_strerror(g.status));
    rel r = {0, 0};
    cr_assert_eq(hilock_hold_extend(g.hold, 20000, rel_cb, &r), 0);
    cr_assert(test_loop_until(e.base, &r.calls, 3000));
    cr_expect_eq(r.status, 0, "extend: %s", hilock_strerror(r.status));
    test_loop_for(e.base, 50); /* a quorum answered: the last node's answer may come later */
    for (int i = 0; i < 3; i++) {
        long long pttl = test_redis_int(&srv[i], "PTTL %s", key);
        cr_expect(pttl > 10000 && pttl <= 20000, "node %d: PTTL %lld after extend to 20 s", i, pttl);
    }
    /* One node without the key: still a quorum. */
    cr_assert(run_on(&srv[2], "DEL %s", key));
    rel r2 = {0, 0};
    cr_assert_eq(hilock_hold_extend(g.hold, 20000, rel_cb, &r2), 0);
    cr_assert(test_loop_until(e.base, &r2.calls, 3000));
    cr_expect_eq(r2.status, 0, "extend with 2 of 3: %s", hilock_strerror(r2.status));
    cr_expect_eq(hilock_hold_lost(g.hold), 0);
    test_loop_for(e.base, 50); /* the last node's answer */
    cr_expect_eq(lock_exists(&srv[2], name), 1, "the extend did not put the key back on node 2");
    /* Two without at once: lost. */
    cr_assert(run_on(&srv[1], "DEL %s", key));
    cr_assert(run_on(&srv[2], "DEL %s", key));
    rel r3 = {0, 0};
    cr_assert_eq(hilock_hold_extend(g.hold, 20000, rel_cb, &r3), 0);
    cr_assert(test_loop_until(e.base, &r3.calls, 3000));
    cr_expect_eq(r3.status, HILOCK_ELOST, "extend with 1 of 3: %s", hilock_strerror(r3.status));
    cr_expect_eq(hilock_hold_lost(g.hold), 1);
    cr_expect_eq(release_now(&e, g.hold), HILOCK_ELOST);
    hilock_client_free(c);
}

typedef struct brkrec {
    int calls, status;
    uint64_t fence;
} brkrec;

static void brk_cb(int status, uint64_t fence, void *data) {
    brkrec *b = data;
    b->calls++;
    b->status = status;
    b->fence = fence;
}

/* hilock_break removes the lock on every node and reports its fence. */
Test(redlock, break_on_every_node) {
    const char *name = "rl-break";
    hilock_client *a = rl_client(3), *b = rl_client(3);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o = opts_lease(HILOCK_WAIT_FOREVER, 1500);
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = acquire_timed(a, name, &o, 5000, NULL);
    cr_assert_eq(ga.status, 0, "%s", hilock_strerror(ga.status));
    /* A quorum granted: the last node's grant may still be on its way, and
     * a break that overtakes it there would leave that one behind. */
    test_loop_for(e.base, 50);
    cr_assert_eq(nodes_holding(3, name), 3);
    brkrec k = {0, 0, 0};
    cr_assert_eq(hilock_break(b, name, brk_cb, &k), 0);
    cr_assert(test_loop_until(e.base, &k.calls, 3000));
    cr_expect_eq(k.status, 0, "break: %s", hilock_strerror(k.status));
    /* The largest fence of the quorum that answered first: one node's own,
     * near the hold's (the largest of the quorum that granted it). */
    cr_expect_gt(k.fence, 0, "break reported no fence");
    for (int i = 0; i < 3; i++)
        cr_expect_eq(lock_exists(&srv[i], name), 0, "the lock is left on node %d after the break (%llu script calls there)",
                     i, (unsigned long long)script_calls_of(&srv[i]));
    cr_expect(test_loop_until(e.base, &lost.calls, 2000), "the holder was not told at its renewal");
    got gb = acquire_timed(b, name, NULL, 3000, NULL);
    cr_expect_eq(gb.status, 0, "%s", hilock_strerror(gb.status));
    if (gb.status == 0) cr_expect_eq(release_now(&e, gb.hold), 0);
    /* A free lock: fence 0. */
    brkrec k2 = {0, 0, 0};
    cr_assert_eq(hilock_break(b, name, brk_cb, &k2), 0);
    cr_assert(test_loop_until(e.base, &k2.calls, 3000));
    cr_expect_eq(k2.status, 0);
    cr_expect_eq(k2.fence, 0);
    release_now(&e, ga.hold);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- i. The CLI --------------------------------------------------------------- */

Test(redlock, cli) {
    char url[256], out[PATH_MAX], log[2048];
    const char *cli = cli_path();
    url_of(url, sizeof(url), 3);
    snprintf(out, sizeof(out), "%s/cli.out", srv[0].dir);
    char *argv[] = {(char *)cli, "-u", url, "rl-cli", "--", "sh", "-c", "test -n \"$HILOCK_FENCE\"", NULL};
    int rc = test_wait(test_spawn(argv, NULL, out, NULL), 20000);
    cr_expect_eq(rc, 0, "hilock -u %s exited %d: %s", url, rc, test_slurp(out, log, sizeof(log)));
    cr_expect_eq(holding_settled(3, "rl-cli", 0, 1000), 0, "the CLI left a lock behind");
    char *plain[] = {(char *)cli, "-u", url, "rl-cli", "--", "true", NULL};
    rc = test_wait(test_spawn(plain, NULL, out, NULL), 20000);
    cr_expect_eq(rc, 0, "hilock ... -- true exited %d: %s", rc, test_slurp(out, log, sizeof(log)));

    /* Held by us: try once is busy (75). */
    hilock_client *c = rl_client(3);
    got g = acquire_timed(c, "rl-cli", NULL, 5000, NULL);
    cr_assert_eq(g.status, 0);
    char *busy[] = {(char *)cli, "-u", url, "-w", "0", "rl-cli", "--", "true", NULL};
    rc = test_wait(test_spawn(busy, NULL, out, NULL), 20000);
    cr_expect_eq(rc, 75, "hilock -w 0 on a held lock exited %d: %s", rc, test_slurp(out, log, sizeof(log)));

    /* unlock: removes it on every node and names a fence: the largest of
     * the quorum of nodes that answered first (each node drew its own; the
     * hold's is the largest of the quorum that granted it). */
    char *unlock[] = {(char *)cli, "-u", url, "unlock", "rl-cli", NULL};
    rc = test_wait(test_spawn(unlock, NULL, out, NULL), 20000);
    test_slurp(out, log, sizeof(log));
    cr_expect_eq(rc, 0, "hilock unlock exited %d: %s", rc, log);
    const char *fp = strstr(log, "(fence ");
    unsigned long long said = fp ? strtoull(fp + 7, NULL, 10) : 0;
    cr_expect_gt(said, 0, "hilock unlock said '%s'", log);
    cr_expect_eq(holding_settled(3, "rl-cli", 0, 1000), 0, "hilock unlock left the lock on a node");
    release_now(&e, g.hold); /* ELOST by now, or soon */
    hilock_client_free(c);
}

/* ---- j. URL errors -------------------------------------------------------------- */

static int client_new_rc(const char *url) {
    hilock_config cfg;
    hilock_client *c = NULL;
    lockenv_config(&cfg, url);
    int rc = hilock_client_new(&c, &cfg, &e.loop);
    if (rc == 0) hilock_client_free(c);
    return rc;
}

Test(redlock, url_errors) {
    const char *bad[] = {
        "redlock://",
        "redlock:///0",
        "redlock://127.0.0.1:99999",
        "redlock://127.0.0.1:0",
        "redlock://127.0.0.1:abc",
        "redlock://127.0.0.1:-1",
        "redlock://127.0.0.1:6379,",
        "redlock://,127.0.0.1:6379",
        "redlock://127.0.0.1:6379,,127.0.0.1:6380",
        "redlock://127.0.0.1:6379,127.0.0.1:70000",
        "redlock://127.0.0.1:6379/x",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = client_new_rc(bad[i]);
        cr_expect_eq(rc, HILOCK_EURL, "'%s': %s, want HILOCK_EURL", bad[i], hilock_strerror(rc));
    }
    /* 16 masters are the most; 17 are refused. */
    char url[1024];
    int ports[17];
    for (int i = 0; i < 17; i++) ports[i] = 1000 + i;
    int rc = client_new_rc(url_of_ports(url, sizeof(url), ports, 16));
    cr_expect_eq(rc, 0, "16 masters: %s", hilock_strerror(rc));
    rc = client_new_rc(url_of_ports(url, sizeof(url), ports, 17));
    cr_expect_eq(rc, HILOCK_EURL, "17 masters: %s, want HILOCK_EURL", hilock_strerror(rc));
    /* Good ones, with auth and a db. */
    snprintf(url, sizeof(url), "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/0", srv[0].port, srv[1].port,
             srv[2].port);
    rc = client_new_rc(url);
    cr_expect_eq(rc, 0, "'%s': %s", url, hilock_strerror(rc));
    snprintf(url, sizeof(url), "redlock://user:pw@127.0.0.1:%d,127.0.0.1:%d", srv[0].port, srv[1].port);
    rc = client_new_rc(url);
    cr_expect_eq(rc, 0, "'%s': %s", url, hilock_strerror(rc));
}
