/* The event-loop adapters (<hilock/adapters/libevent.h>, libev.h, libuv.h)
 * against a real redis-server: the same checks run on each loop, through
 * one test environment (support/tloop.h).
 *
 *   basic        acquire, fencing tokens, release; a graceful close leaves
 *                nothing on the loop (it ends by itself, every handle closed)
 *   wakeup       a waiter is woken by the release, not by a timer
 *   timeout      a wait ends on time (the adapter's timer)
 *   refused      a refused connection reaches hiredis as such, not as a
 *                timeout
 *   reconnect    after a Redis restart, the connections are attached again
 *   free_pending hilock_client_free() with waits pending: all called back,
 *                nothing leaks
 *   exclusion    the mutual-exclusion check of tests/mutex/exclusion.c: thousands
 *                of waiters here and in forked processes, each on this loop
 *   example      examples/libevent_basic, libev_basic and libuv_basic run
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "support/harness.h"
#include "support/exclusion.h"
#include "hilock/hilock.h"
#include "support/tloop.h"

/* ---- Redis and clients --------------------------------------------------- */

static hilock_client *new_client(tloop *l, const char *url) {
    hilock_config cfg;
    hilock_client *c = NULL;
    hilock_config_init(&cfg);
    cfg.url = url;
    cfg.connect_timeout_ms = 1000;
    cfg.request_timeout_ms = 1000;
    cfg.linger_ms = 100;
    cr_assert_eq(hilock_client_new(&c, &cfg, &l->hl), 0);
    return c;
}

static long long key_exists(const test_redis *r, const char *name) {
    char key[256];
    hilock_key("hilock:", name, key, sizeof(key));
    return test_redis_int(r, "EXISTS %s", key);
}

typedef struct got {
    volatile int calls;
    int status;
    hilock_hold *hold;
    long long at;
} got;

static void got_cb(hilock_hold *h, int status, void *data) {
    got *g = data;
    g->calls++;
    g->status = status;
    g->hold = h;
    g->at = test_now_ms();
}

typedef struct rel {
    volatile int calls;
    int status;
} rel;

static void rel_cb(int status, void *data) {
    rel *r = data;
    r->calls++;
    r->status = status;
}

static void closed_cb(void *data) { (*(volatile int *)data)++; }

static got acquire_wait(tloop *l, hilock_client *c, const char *name, int64_t wait_ms) {
    got g;
    hilock_acquire_opts o;
    memset(&g, 0, sizeof(g));
    hilock_acquire_opts_init(&o);
    o.wait_ms = wait_ms;
    cr_assert_eq(hilock_acquire(c, name, &o, got_cb, &g, NULL), 0);
    cr_assert_eq(g.calls, 0, "callback run from inside hilock_acquire");
    cr_assert(tloop_until(l, &g.calls, 5000), "no acquire callback for %s", name);
    return g;
}

static int release_wait(tloop *l, hilock_hold *h) {
    rel r = {0, 0};
    cr_assert_eq(hilock_release(h, rel_cb, &r), 0);
    cr_assert(tloop_until(l, &r.calls, 5000), "no release callback");
    cr_assert_eq(r.calls, 1);
    return r.status;
}

/* Close gracefully; then the loop must end by itself with nothing open. */
static void close_and_drain(tloop *l, hilock_client *c) {
    volatile int closed = 0;
    hilock_client_close(c, closed_cb, (void *)&closed);
    cr_assert(tloop_drains(l, 5000), "the loop did not end after hilock_client_close");
    cr_assert_eq(closed, 1);
}

/* ---- The checks ------------------------------------------------------------ */

static void check_basic(int kind) {
    test_redis r;
    tloop l;
    cr_assert_eq(test_redis_start(&r, 0, NULL), 0);
    tloop_init(&l, kind);
    hilock_client *c = new_client(&l, r.url);

    got g = acquire_wait(&l, c, "basic", HILOCK_WAIT_FOREVER);
    cr_assert_eq(g.status, 0, "%s", hilock_strerror(g.status));
    uint64_t f1 = hilock_hold_fence(g.hold);
    cr_expect_gt(f1, 0);
    cr_expect_str_eq(hilock_hold_name(g.hold), "basic");
    cr_expect_eq(key_exists(&r, "basic"), 1);
    cr_expect_eq(release_wait(&l, g.hold), 0);
    cr_expect_eq(key_exists(&r, "basic"), 0);

    g = acquire_wait(&l, c, "basic", 0);
    cr_assert_eq(g.status, 0);
    cr_expect_gt(hilock_hold_fence(g.hold), f1);
    /* Closing releases the hold, closes both connections and the timer. */
    close_and_drain(&l, c);
    cr_expect_eq(key_exists(&r, "basic"), 0, "close releases holds");
    cr_expect_eq(tloop_destroy(&l), 0, "handles left open on the loop");
    test_redis_stop(&r);
}

static void check_wakeup(int kind) {
    test_redis r;
    tloop l;
    cr_assert_eq(test_redis_start(&r, 0, NULL), 0);
    tloop_init(&l, kind);
    hilock_client *a = new_client(&l, r.url);
    hilock_client *b = new_client(&l, r.url);

    got ga = acquire_wait(&l, a, "wake", 0);
    cr_assert_eq(ga.status, 0);
    uint64_t fa = hilock_hold_fence(ga.hold);
    got gb;
    memset(&gb, 0, sizeof(gb));
    cr_assert_eq(hilock_acquire(b, "wake", NULL, got_cb, &gb, NULL), 0);
    tloop_for(&l, 300);
    cr_assert_eq(gb.calls, 0, "granted while held");
    long long released_at = test_now_ms();
    cr_expect_eq(release_wait(&l, ga.hold), 0);
    cr_assert(tloop_until(&l, &gb.calls, 5000));
    cr_assert_eq(gb.status, 0);
    /* The lease is 30 s: only the release message can wake it this soon. */
    cr_expect_lt(gb.at - released_at, 1000, "woken %lld ms after the release",
                 gb.at - released_at);
    cr_expect_gt(hilock_hold_fence(gb.hold), fa);
    cr_expect_eq(release_wait(&l, gb.hold), 0);
    hilock_client_close(b, NULL, NULL);
    close_and_drain(&l, a);
    cr_expect_eq(tloop_destroy(&l), 0);
    test_redis_stop(&r);
}

static void check_timeout(int kind) {
    test_redis r;
    tloop l;
    cr_assert_eq(test_redis_start(&r, 0, NULL), 0);
    tloop_init(&l, kind);
    hilock_client *a = new_client(&l, r.url);
    hilock_client *b = new_client(&l, r.url);

    got ga = acquire_wait(&l, a, "slow", 0);
    cr_assert_eq(ga.status, 0);
    long long t0 = test_now_ms();
    got gb = acquire_wait(&l, b, "slow", 300);
    long long took = test_now_ms() - t0;
    cr_expect_eq(gb.status, HILOCK_ETIMEDOUT, "%s", hilock_strerror(gb.status));
    cr_expect_geq(took, 280, "timed out after %lld ms", took);
    cr_expect_lt(took, 1500, "timed out after %lld ms", took);
    cr_expect_eq(release_wait(&l, ga.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
    cr_expect(tloop_drains(&l, 5000));
    cr_expect_eq(tloop_destroy(&l), 0);
    test_redis_stop(&r);
}

static void check_refused(int kind) {
    tloop l;
    char url[64];
    int port = test_refused_port(); /* nobody listens there */
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    tloop_init(&l, kind);
    hilock_config cfg;
    hilock_client *c = NULL;
    hilock_config_init(&cfg);
    cfg.url = url;
    cfg.connect_timeout_ms = 1000;
    cfg.request_timeout_ms = 1000;
    cr_assert_eq(hilock_client_new(&c, &cfg, &l.hl), 0);
    long long t0 = test_now_ms();
    got g = acquire_wait(&l, c, "nobody", HILOCK_WAIT_FOREVER);
    long long took = test_now_ms() - t0;
    cr_expect_eq(g.status, HILOCK_ECONN, "%s", hilock_strerror(g.status));
    /* hilock keeps trying until the request's deadline; what the adapter
     * decides is whether hiredis saw the refusal, or only a timeout. */
    cr_expect_not_null(strstr(hilock_client_errstr(c), strerror(ECONNREFUSED)),
                       "the refusal did not reach hiredis: \"%s\"", hilock_client_errstr(c));
    cr_expect_lt(took, 2500, "reported after %lld ms", took);
    hilock_client_free(c);
    cr_expect(tloop_drains(&l, 5000));
    cr_expect_eq(tloop_destroy(&l), 0);
}

static void check_reconnect(int kind) {
    test_redis r;
    tloop l;
    cr_assert_eq(test_redis_start(&r, 0, NULL), 0);
    int port = r.port;
    tloop_init(&l, kind);
    hilock_client *c = new_client(&l, r.url);

    got g = acquire_wait(&l, c, "again", 0);
    cr_assert_eq(g.status, 0);
    uint64_t before = hilock_hold_fence(g.hold);
    cr_expect_eq(release_wait(&l, g.hold), 0);

    test_redis_stop(&r);
    tloop_for(&l, 200); /* the client sees both connections drop */
    cr_assert_eq(test_redis_start(&r, port, NULL), 0, "restart on port %d", port);

    /* The client reconnects (new contexts, attached again) and serves. */
    int ok = 0;
    for (int i = 0; i < 20 && !ok; i++) {
        g = acquire_wait(&l, c, "again", 0);
        if (g.status == 0) ok = 1;
        else tloop_for(&l, 100);
    }
    cr_assert(ok, "no acquire after the restart: %s", hilock_strerror(g.status));
    cr_expect_gt(hilock_hold_fence(g.hold), before, "a fresh server must not reuse a fence");
    cr_expect_eq(release_wait(&l, g.hold), 0);
    close_and_drain(&l, c);
    cr_expect_eq(tloop_destroy(&l), 0);
    test_redis_stop(&r);
}

static void check_free_pending(int kind) {
    test_redis r;
    tloop l;
    cr_assert_eq(test_redis_start(&r, 0, NULL), 0);
    tloop_init(&l, kind);
    hilock_client *a = new_client(&l, r.url);
    hilock_client *b = new_client(&l, r.url);
    got ga = acquire_wait(&l, a, "pending", 0);
    cr_assert_eq(ga.status, 0);
    static got waits[100];
    memset(waits, 0, sizeof(waits));
    for (int i = 0; i < 100; i++)
        cr_assert_eq(hilock_acquire(b, "pending", NULL, got_cb, &waits[i], NULL), 0);
    tloop_for(&l, 200);
    hilock_client_free(b);
    for (int i = 0; i < 100; i++) {
        cr_expect_eq(waits[i].calls, 1);
        cr_expect_eq(waits[i].status, HILOCK_ECANCELED);
    }
    hilock_client_free(a); /* abandons the hold: the key stays for its lease */
    cr_expect(tloop_drains(&l, 5000), "the loop did not end after hilock_client_free");
    cr_expect_eq(tloop_destroy(&l), 0, "handles left open after hilock_client_free");
    cr_expect_eq(key_exists(&r, "pending"), 1);
    test_redis_stop(&r);
}

/* ---- Mutual exclusion (as in tests/mutex/exclusion.c) --------------------------- */

#define LOCAL_WAITERS 10000
#define PROCS 4
#define PROC_WAITERS 500

/* One worker: `waiters` acquires of "exclusion" on a fresh loop of `kind`.
 * Returns 1 when every waiter got exactly one callback and the loop was
 * left clean. */
static int run_worker(int kind, const char *url, resource *res, int waiters) {
    tloop l;
    tloop_init(&l, kind);
    worker w = {res, waiters, 0, 0, 0};
    hilock_client *c = new_client(&l, url);
    for (int i = 0; i < waiters; i++)
        if (hilock_acquire(c, "exclusion", NULL, exclusion_acquired, &w, NULL) != 0) return 0;
    tloop_until(&l, &w.done, 100000);
    int ok = w.done && w.callbacks == waiters;
    volatile int closed = 0;
    hilock_client_close(c, closed_cb, (void *)&closed);
    ok = tloop_drains(&l, 5000) && closed && ok;
    return tloop_destroy(&l) == 0 && ok;
}

static void check_exclusion(int kind) {
    test_redis r;
    cr_assert_eq(test_redis_start(&r, 0, NULL), 0);
    resource *res = mmap(NULL, sizeof(*res), PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(res, MAP_FAILED);
    memset((void *)res, 0, sizeof(*res));

    /* Fork before any loop exists here: each process builds its own. */
    pid_t kids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        fflush(NULL);
        kids[p] = fork();
        cr_assert_geq(kids[p], 0);
        if (kids[p] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            _exit(run_worker(kind, r.url, res, PROC_WAITERS) ? 0 : 1);
        }
    }
    int local_ok = run_worker(kind, r.url, res, LOCAL_WAITERS);
    for (int p = 0; p < PROCS; p++) {
        int st = 0;
        cr_assert_eq(waitpid(kids[p], &st, 0), kids[p]);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker process %d failed", p);
    }
    long total = LOCAL_WAITERS + PROCS * PROC_WAITERS;
    cr_expect(local_ok, "the local worker failed");
    cr_expect_eq(res->errors, 0);
    cr_expect_eq(res->overlaps, 0, "two holders at once");
    cr_expect_eq(res->fence_regressions, 0, "fencing tokens must strictly increase");
    cr_expect_eq(res->counter, total, "counter %ld, expected %ld", res->counter, total);
    cr_expect_gt(res->last_fence, 0);
    cr_expect_eq(key_exists(&r, "exclusion"), 0, "no lock left behind");
    munmap((void *)res, sizeof(*res));
    test_redis_stop(&r);
}

/* ---- The example programs ------------------------------------------------ */

static void check_example(const char *name) {
    char where[128], prog[PATH_MAX], out[64], buf[4096];
    snprintf(where, sizeof(where), "examples/%s", name);
    cr_assert_not_null(test_build_path(NULL, where, prog, sizeof(prog)));
    cr_assert_eq(access(prog, X_OK), 0, "%s is not built (make all builds it)", prog);

    test_redis r;
    cr_assert_eq(test_redis_start(&r, 0, NULL), 0);
    snprintf(out, sizeof(out), "/tmp/hilock-example-XXXXXX");
    int fd = mkstemp(out);
    cr_assert_geq(fd, 0);
    unsigned long long last_fence = 0;
    for (int round = 1; round <= 2; round++) {
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (ftruncate(fd, 0) != 0) _exit(126);
            lseek(fd, 0, SEEK_SET);
            dup2(fd, 1);
            dup2(fd, 2);
            execl(prog, prog, r.url, "example-lock", (char *)NULL);
            _exit(127);
        }
        int st = 0;
        long long until = test_now_ms() + 20000;
        pid_t w;
        while ((w = waitpid(pid, &st, WNOHANG)) == 0 && test_now_ms() < until) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (w == 0) { kill(pid, SIGKILL); waitpid(pid, &st, 0); }
        ssize_t got_n = pread(fd, buf, sizeof(buf) - 1, 0);
        buf[got_n > 0 ? got_n : 0] = '\0';
        cr_expect(w == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "%s failed (round %d):\n%s", name, round, buf);
        const char *tok = strstr(buf, "fencing token ");
        unsigned long long fence = 0;
        cr_expect(tok && sscanf(tok, "fencing token %llu", &fence) == 1 && fence > last_fence,
                  "round %d: no fencing token above %llu in:\n%s", round, last_fence, buf);
        last_fence = fence;
        cr_expect_not_null(strstr(buf, "released \"example-lock\""), "output:\n%s", buf);
        cr_expect_not_null(strstr(buf, "client closed"), "output:\n%s", buf);
    }
    close(fd);
    unlink(out);
    cr_expect_eq(key_exists(&r, "example-lock"), 0);
    test_redis_stop(&r);
}

/* ---- Suites ---------------------------------------------------------------- */

/* The same suite on each loop. */
Test(libevent, basic, .timeout = 30) { check_basic(K_LIBEVENT); }
Test(libevent, wakeup, .timeout = 30) { check_wakeup(K_LIBEVENT); }
Test(libevent, timeout, .timeout = 30) { check_timeout(K_LIBEVENT); }
Test(libevent, refused, .timeout = 30) { check_refused(K_LIBEVENT); }
Test(libevent, reconnect, .timeout = 60) { check_reconnect(K_LIBEVENT); }
Test(libevent, free_pending, .timeout = 30) { check_free_pending(K_LIBEVENT); }
Test(libevent, exclusion, .timeout = 180) { check_exclusion(K_LIBEVENT); }
Test(libevent, example, .timeout = 60) { check_example("libevent_basic"); }

Test(libev, basic, .timeout = 30) { check_basic(K_LIBEV); }
Test(libev, wakeup, .timeout = 30) { check_wakeup(K_LIBEV); }
Test(libev, timeout, .timeout = 30) { check_timeout(K_LIBEV); }
Test(libev, refused, .timeout = 30) { check_refused(K_LIBEV); }
Test(libev, reconnect, .timeout = 60) { check_reconnect(K_LIBEV); }
Test(libev, free_pending, .timeout = 30) { check_free_pending(K_LIBEV); }
Test(libev, exclusion, .timeout = 180) { check_exclusion(K_LIBEV); }
Test(libev, example, .timeout = 60) { check_example("libev_basic"); }

Test(libuv, basic, .timeout = 30) { check_basic(K_LIBUV); }
Test(libuv, wakeup, .timeout = 30) { check_wakeup(K_LIBUV); }
Test(libuv, timeout, .timeout = 30) { check_timeout(K_LIBUV); }
Test(libuv, refused, .timeout = 30) { check_refused(K_LIBUV); }
Test(libuv, reconnect, .timeout = 60) { check_reconnect(K_LIBUV); }
Test(libuv, free_pending, .timeout = 30) { check_free_pending(K_LIBUV); }
Test(libuv, exclusion, .timeout = 180) { check_exclusion(K_LIBUV); }
Test(libuv, example, .timeout = 60) { check_example("libuv_basic"); }
