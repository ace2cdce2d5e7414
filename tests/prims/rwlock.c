/* The read-write lock against a real redis-server: readers together,
 * writers alone, writers not starved, leases of dead holders, cancels,
 * reentrancy and upgrades, idempotent scripts, connection kills, contention
 * from several processes (support/rwcheck.h), and Redlock refused. The
 * cluster's contention test is in tests/cluster/cluster.c's harness style below. */
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "prim/prim.h"
#include "support/clusterenv.h"
#include "support/rwcheck.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(rwlock, .init = setup, .fini = teardown, .timeout = 60);

/* ---- Helpers --------------------------------------------------------------- */

/* The key NAME + suffix of the read-write lock. */
static void rw_key(const char *name, const char *suffix, char *out, size_t n) {
    hilock_key("hilock:", name, out, n);
    strncat(out, suffix, n - strlen(out) - 1);
}

static long long rw_exists(const char *name, const char *suffix) {
    char key[256];
    rw_key(name, suffix, key, sizeof(key));
    return test_redis_int(&e.r, "EXISTS %s", key);
}

/* Nothing of NAME's read-write lock is held (the fence key may stay). */
static int rw_free(const char *name) {
    return rw_exists(name, ":rw") == 0 && rw_exists(name, ":rwr") == 0;
}

static int start(hilock_client *c, int write, const char *name, const hilock_acquire_opts *o,
                 got *g, hilock_wait **w) {
    memset(g, 0, sizeof(*g));
    return write ? hilock_write_acquire(c, name, o, got_cb, g, w)
                 : hilock_read_acquire(c, name, o, got_cb, g, w);
}

static got rw_now(hilock_client *c, int write, const char *name, const hilock_acquire_opts *o) {
    got g;
    cr_assert_eq(start(c, write, name, o, &g, NULL), 0);
    test_loop_until(e.base, &g.calls, 5000);
    cr_assert_eq(g.calls, 1, "%s of %s got no callback", write ? "write" : "read", name);
    return g;
}

static long long script_calls(void) { return script_calls_of(&e.r); }

/* ---- Basics ---------------------------------------------------------------- */

Test(rwlock, readers_together_writer_alone) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e), *c = lockenv_client(&e),
                  *d = lockenv_client(&e);
    got r1 = rw_now(a, 0, "rw", NULL), r2 = rw_now(b, 0, "rw", NULL);
    cr_assert_eq(r1.status, 0);
    cr_assert_eq(r2.status, 0, "a second reader is let in beside the first");
    cr_expect_eq(hilock_hold_fence(r1.hold), 0, "no write yet: fence 0");
    cr_expect_str_eq(hilock_hold_name(r1.hold), "rw");

    hilock_acquire_opts o = opts_wait(0);
    got g = rw_now(c, 1, "rw", &o);
    cr_expect_eq(g.status, HILOCK_EBUSY, "a writer is refused while readers hold");
    cr_expect_eq(rw_exists("rw", ":rww"), 0, "a try-once writer leaves no marker");

    got w;
    cr_assert_eq(start(c, 1, "rw", NULL, &w, NULL), 0);
    test_loop_for(e.base, 200);
    cr_expect_eq(w.calls, 0, "the writer waits for the readers");
    cr_expect_eq(rw_exists("rw", ":rww"), 1, "a waiting writer leaves its marker");
    o = opts_wait(300);
    g = rw_now(d, 0, "rw", &o);
    cr_expect_eq(g.status, HILOCK_ETIMEDOUT, "a new reader waits behind the waiting writer");

    cr_assert_eq(release_now(&e, r1.hold), 0);
    test_loop_for(e.base, 150);
    cr_expect_eq(w.calls, 0, "one reader still holds");
    cr_assert_eq(release_now(&e, r2.hold), 0);
    cr_assert(test_loop_until(e.base, &w.calls, 2000), "the last reader's release lets the writer in");
    cr_assert_eq(w.status, 0);
    uint64_t wf = hilock_hold_fence(w.hold);
    cr_expect_gt(wf, 0);
    cr_expect_eq(rw_exists("rw", ":rww"), 0, "the writer's marker goes with its grant");

    got r3;
    cr_assert_eq(start(d, 0, "rw", NULL, &r3, NULL), 0);
    test_loop_for(e.base, 200);
    cr_expect_eq(r3.calls, 0, "a reader waits while a writer holds");
    cr_assert_eq(release_now(&e, w.hold), 0);
    cr_assert(test_loop_until(e.base, &r3.calls, 2000));
    cr_assert_eq(r3.status, 0);
    cr_expect_eq(hilock_hold_fence(r3.hold), wf, "a reader gets the last write's fence");

    got w2;
    cr_assert_eq(start(a, 1, "rw", NULL, &w2, NULL), 0);
    cr_assert_eq(release_now(&e, r3.hold), 0);
    cr_assert(test_loop_until(e.base, &w2.calls, 2000));
    cr_expect_gt(hilock_hold_fence(w2.hold), wf, "write fences strictly increase");
    cr_expect_eq(release_now(&e, w2.hold), 0);
    cr_expect(rw_free("rw"));
    hilock_client_free(a);
    hilock_client_free(b);
    hilock_client_free(c);
    hilock_client_free(d);
}

/* The mutex NAME and the read-write lock NAME are separate locks. */
Test(rwlock, not_the_mutex) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got m = acquire_now(&e, a, "same", NULL);
    cr_assert_eq(m.status, 0);
    hilock_acquire_opts o = opts_wait(0);
    got w = rw_now(b, 1, "same", &o);
    cr_expect_eq(w.status, 0, "the mutex does not hold the write lock");
    got m2 = acquire_now(&e, b, "same", &o);
    cr_expect_eq(m2.status, HILOCK_EBUSY);
    got m3 = acquire_now(&e, a, "same2", NULL);
    got r = rw_now(b, 0, "same2", &o);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(lock_exists(&e.r, "same"), 1);
    cr_expect_eq(release_now(&e, w.hold), 0);
    cr_expect_eq(lock_exists(&e.r, "same"), 1, "the write release leaves the mutex");
    cr_expect_eq(release_now(&e, m.hold), 0);
    cr_expect_eq(release_now(&e, m3.hold), 0);
    cr_expect_eq(release_now(&e, r.hold), 0);
    cr_expect(rw_free("same") && rw_free("same2"));
    hilock_client_free(a);
    hilock_client_free(b);
}

/* Many readers at once, each in its own client: the lock is not a mutex. */
Test(rwlock, many_readers_at_once) {
    enum { N = 8 };
    hilock_client *c[N];
    got g[N];
    for (int i = 0; i < N; i++) {
        c[i] = lockenv_client(&e);
        g[i] = rw_now(c[i], 0, "many", NULL);
        cr_assert_eq(g[i].status, 0, "reader %d", i);
    }
    char key[256];
    rw_key("many", ":rwr", key, sizeof(key));
    cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", key), N, "one reader entry each");
    for (int i = 0; i < N; i++) cr_expect_eq(release_now(&e, g[i].hold), 0);
    cr_expect(rw_free("many"));
    for (int i = 0; i < N; i++) hilock_client_free(c[i]);
}

/* Readers queued together in one client go in together when the writer
 * leaves: each read grant lets the next one try at once, no release
 * message in between. */
Test(rwlock, queued_readers_granted_together) {
    enum { N = 20 };
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got w = rw_now(a, 1, "tog", NULL);
    cr_assert_eq(w.status, 0);
    got g[N];
    int granted = 0;
    for (int i = 0; i < N; i++) cr_assert_eq(start(b, 0, "tog", NULL, &g[i], NULL), 0);
    test_loop_for(e.base, 150);
    for (int i = 0; i < N; i++) cr_assert_eq(g[i].calls, 0);
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, w.hold), 0);
    while (granted < N && test_now_ms() - t0 < 3000) {
        test_loop_for(e.base, 5);
        granted = 0;
        for (int i = 0; i < N; i++) granted += g[i].calls == 1 && g[i].status == 0;
    }
    cr_expect_eq(granted, N, "all %d readers hold together (%d)", N, granted);
    cr_expect_lt(test_now_ms() - t0, 500, "back to back, without waiting for releases");
    for (int i = 0; i < N; i++) {
        cr_expect(g[i].hold != NULL && !hilock_hold_lost(g[i].hold));
        for (int k = 0; k < i; k++) cr_expect_neq(g[i].hold, g[k].hold, "a hold each");
    }
    for (int i = 0; i < N; i++) cr_expect_eq(release_now(&e, g[i].hold), 0);
    cr_expect(rw_free("tog"));
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Writers are not starved ---------------------------------------------- */

/* A reader that takes the read lock again as soon as it let it go, holding
 * it hold_ms each time: with four of them staggered, some reader holds at
 * every instant. */
typedef struct streamer {
    hilock_client *c;
    int hold_ms;
    int turns, errors;
    int stop;
    int stopped;
    hilock_hold *h;
} streamer;

static void stream_go(streamer *s);

static void stream_released(int status, void *data) {
    streamer *s = data;
    if (status != 0) s->errors++;
    if (s->stop) s->stopped = 1;
    else stream_go(s);
}

static void stream_release(evutil_socket_t fd, short what, void *data) {
    streamer *s = data;
    (void)fd; (void)what;
    if (hilock_release(s->h, stream_released, s) != 0) s->errors++;
}

static void stream_granted(hilock_hold *h, int status, void *data) {
    streamer *s = data;
    if (status != 0) { s->errors++; s->stopped = 1; return; }
    s->turns++;
    s->h = h;
    struct timeval tv = {0, s->hold_ms * 1000};
    event_base_once(e.base, -1, EV_TIMEOUT, stream_release, s, &tv);
}

static void stream_go(streamer *s) {
    if (hilock_read_acquire(s->c, "stream", NULL, stream_granted, s, NULL) != 0) {
        s->errors++;
        s->stopped = 1;
    }
}

Test(rwlock, writer_not_starved_by_readers) {
    enum { N = 4 };
    streamer s[N];
    memset(s, 0, sizeof(s));
    for (int i = 0; i < N; i++) {
        s[i].c = lockenv_client(&e);
        s[i].hold_ms = 200;
        stream_go(&s[i]);
        test_loop_for(e.base, 50); /* staggered: the holds overlap */
    }
    test_loop_for(e.base, 300);
    hilock_client *wc = lockenv_client(&e);
    hilock_acquire_opts o = opts_wait(3000);
    long long t0 = test_now_ms();
    got w = rw_now(wc, 1, "stream", &o);
    long long waited = test_now_ms() - t0;
    cr_assert_eq(w.status, 0, "the writer got in (%s)", hilock_strerror(w.status));
    cr_expect_lt(waited, 800, "a writer waits for the readers in, not for the stream: %lld ms", waited);
    int before = 0;
    for (int i = 0; i < N; i++) before += s[i].turns;
    test_loop_for(e.base, 100);
    cr_expect_eq(release_now(&e, w.hold), 0);
    test_loop_for(e.base, 500);
    int after = 0;
    for (int i = 0; i < N; i++) after += s[i].turns;
    cr_expect_gt(after, before, "the readers go on after the writer");
    for (int i = 0; i < N; i++) s[i].stop = 1;
    for (int i = 0; i < N; i++) test_loop_until(e.base, &s[i].stopped, 3000);
    for (int i = 0; i < N; i++) {
        cr_expect_eq(s[i].errors, 0);
        hilock_client_free(s[i].c);
    }
    hilock_client_free(wc);
}

/* A writer that gave up (timed out, cancelled) stops blocking readers at
 * once, and readers held off by it are told. */
Test(rwlock, marker_of_a_writer_that_gave_up) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e), *c = lockenv_client(&e);
    got r = rw_now(a, 0, "gaveup", NULL);
    hilock_acquire_opts o = opts_wait(300);
    got w = rw_now(b, 1, "gaveup", &o);
    cr_expect_eq(w.status, HILOCK_ETIMEDOUT);
    test_loop_for(e.base, 20);
    cr_expect_eq(rw_exists("gaveup", ":rww"), 0, "the marker went with the writer's wait");
    o = opts_wait(0);
    got r2 = rw_now(c, 0, "gaveup", &o);
    cr_expect_eq(r2.status, 0, "a reader gets in");

    hilock_wait *ww;
    cr_assert_eq(start(b, 1, "gaveup", NULL, &w, &ww), 0);
    test_loop_for(e.base, 100);
    cr_expect_eq(rw_exists("gaveup", ":rww"), 1);
    got r3;
    cr_assert_eq(start(c, 0, "gaveup", NULL, &r3, NULL), 0);
    test_loop_for(e.base, 100);
    cr_expect_eq(r3.calls, 0, "held off by the writer's marker");
    long long t0 = test_now_ms();
    cr_assert_eq(hilock_wait_cancel(ww), 0);
    cr_assert(test_loop_until(e.base, &r3.calls, 2500));
    cr_expect_eq(r3.status, 0);
    cr_expect_lt(test_now_ms() - t0, 300, "the cancelled writer's marker went at once");
    cr_expect_eq(release_now(&e, r.hold), 0);
    cr_expect_eq(release_now(&e, r2.hold), 0);
    cr_expect_eq(release_now(&e, r3.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
    hilock_client_free(c);
}

/* ---- Dead holders ------------------------------------------------------------ */

/* A child takes the lock (read or write) with a short lease, says so on a
 * pipe and hangs; the parent kills it with SIGKILL. */
static pid_t holder_child(int wr, uint32_t lease_ms) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        struct event_base *b = event_base_new();
        lockenv ce = e;
        ce.base = b;
        hilock_libevent_init(&ce.loop, b);
        hilock_client *c = lockenv_client(&ce);
        hilock_acquire_opts o = opts_wait(5000);
        o.lease_ms = lease_ms;
        got g = {0, 0, NULL, 0};
        if (wr) hilock_write_acquire(c, "dead", &o, got_cb, &g, NULL);
        else hilock_read_acquire(c, "dead", &o, got_cb, &g, NULL);
        test_loop_until(b, &g.calls, 5000);
        char ok = g.status == 0 ? 'y' : 'n';
        if (write(fds[1], &ok, 1) != 1) _exit(1);
        for (;;) test_loop_for(b, 1000); /* renewing, until killed */
    }
    close(fds[1]);
    char ok = 0;
    cr_assert_eq(read(fds[0], &ok, 1), 1);
    close(fds[0]);
    cr_assert_eq(ok, 'y', "the child did not get the lock");
    return pid;
}

static void dead_holder(int write) {
    pid_t kid = holder_child(write, 600);
    hilock_client *c = lockenv_client(&e);
    got g;
    hilock_acquire_opts o = opts_wait(5000);
    cr_assert_eq(start(c, !write, "dead", &o, &g, NULL), 0);
    test_loop_for(e.base, 800);
    cr_expect_eq(g.calls, 0, "the live holder's watchdog keeps its lease");
    long long calls0 = script_calls();
    long long t0 = test_now_ms();
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    cr_assert(test_loop_until(e.base, &g.calls, 4000));
    long long waited = test_now_ms() - t0, calls = script_calls() - calls0;
    cr_assert_eq(g.status, 0);
    cr_expect_lt(waited, 1600, "in after the dead holder's lease, %lld ms", waited);
    cr_expect_leq(calls, 6, "no polling: %lld scripts while waiting out the lease", calls);
    cr_expect_eq(release_now(&e, g.hold), 0);
    cr_expect(rw_free("dead"));
    hilock_client_free(c);
}

Test(rwlock, dead_reader_lease_runs_out) { dead_holder(0); }

/* A dead reader among live ones: its entry, past its lease, is pruned by
 * the scripts, so the live reader's release lets the writer in at once
 * (the readers' key itself lives as long as the longest lease). */
Test(rwlock, dead_reader_among_live_ones) {
    pid_t kid = holder_child(0, 600);
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got r = rw_now(a, 0, "dead", NULL);
    cr_assert_eq(r.status, 0);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    got w;
    cr_assert_eq(start(b, 1, "dead", NULL, &w, NULL), 0);
    test_loop_for(e.base, 1200); /* the dead reader's lease runs out */
    cr_expect_eq(w.calls, 0, "the live reader still holds");
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, r.hold), 0);
    cr_assert(test_loop_until(e.base, &w.calls, 5000));
    cr_expect_eq(w.status, 0);
    cr_expect_lt(test_now_ms() - t0, 400, "the dead reader's entry was pruned");
    cr_expect_eq(release_now(&e, w.hold), 0);
    cr_expect(rw_free("dead"));
    hilock_client_free(a);
    hilock_client_free(b);
}
Test(rwlock, dead_writer_lease_runs_out) { dead_holder(1); }

/* ---- Leases, renewals, loss ---------------------------------------------------- */

Test(rwlock, renewed_then_lost) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    lostrec lr = {0, 0, 0}, lw = {0, 0, 0};
    hilock_acquire_opts o = opts_wait(HILOCK_WAIT_FOREVER);
    o.lease_ms = 300;
    o.lost_cb = lost_cb;
    o.lost_data = &lr;
    got r = rw_now(a, 0, "lease", &o);
    cr_assert_eq(r.status, 0);
    got w;
    cr_assert_eq(start(b, 1, "lease", NULL, &w, NULL), 0);
    test_loop_for(e.base, 1000);
    cr_expect_eq(lr.calls, 0, "the watchdog renews the reader");
    cr_expect_eq(hilock_hold_lost(r.hold), 0);
    cr_expect_eq(w.calls, 0, "the writer waits for the renewed reader");
    char key[256];
    rw_key("lease", ":rwr", key, sizeof(key));
    test_redis_int(&e.r, "DEL %s", key);
    test_loop_until(e.base, &lr.calls, 2000);
    cr_expect_eq(lr.calls, 1);
    cr_expect_eq(lr.why, HILOCK_ELOST);
    cr_assert(test_loop_until(e.base, &w.calls, 3000), "the writer gets in after the reader is gone");
    cr_expect_eq(release_now(&e, r.hold), HILOCK_ELOST);

    o.lost_data = &lw;
    cr_expect_eq(release_now(&e, w.hold), 0);
    got w2 = rw_now(a, 1, "lease", &o);
    cr_assert_eq(w2.status, 0);
    test_loop_for(e.base, 700);
    cr_expect_eq(lw.calls, 0, "the watchdog renews the writer");
    rw_key("lease", ":rw", key, sizeof(key));
    test_redis_int(&e.r, "DEL %s", key);
    test_loop_until(e.base, &lw.calls, 2000);
    cr_expect_eq(lw.calls, 1);
    cr_expect_eq(release_now(&e, w2.hold), HILOCK_ELOST);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Cancels --------------------------------------------------------------------- */

/* The first try leaves inside the acquire call; a cancel at once races its
 * grant, which must be given back. */
Test(rwlock, cancel_racing_grant) {
    hilock_client *c = lockenv_client(&e);
    got g[40];
    for (int i = 0; i < 40; i++) {
        char name[16];
        hilock_wait *w;
        snprintf(name, sizeof(name), "race-%d", i);
        cr_assert_eq(start(c, i % 2, name, NULL, &g[i], &w), 0);
        cr_assert_eq(hilock_wait_cancel(w), 0);
    }
    test_loop_for(e.base, 500);
    for (int i = 0; i < 40; i++) {
        char name[16];
        snprintf(name, sizeof(name), "race-%d", i);
        cr_expect_eq(g[i].calls, 1);
        cr_expect_eq(g[i].status, HILOCK_ECANCELED);
        cr_expect(rw_free(name), "%s left behind", name);
    }
    hilock_client_free(c);
}

typedef struct race2 {
    hilock_wait *w;
    rel r;
} race2;

static void cancel_on_release(int status, void *data) {
    race2 *x = data;
    rel_cb(status, &x->r);
    hilock_wait_cancel(x->w); /* may be decided already: EINVAL then */
}

/* Cancel while the try woken by the release is in flight. */
Test(rwlock, cancel_racing_wakeup) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    for (int i = 0; i < 30; i++) {
        got ga = rw_now(a, i % 2, "wake", NULL);
        got gb;
        race2 x;
        memset(&x, 0, sizeof(x));
        cr_assert_eq(start(b, !(i % 2) || i % 3 == 0, "wake", NULL, &gb, &x.w), 0);
        test_loop_for(e.base, 20);
        cr_assert_eq(hilock_release(ga.hold, cancel_on_release, &x), 0);
        cr_assert(test_loop_until(e.base, &gb.calls, 3000));
        test_loop_for(e.base, 30);
        cr_expect_eq(gb.calls, 1);
        if (gb.status == 0) cr_expect_eq(release_now(&e, gb.hold), 0);
        else cr_expect_eq(gb.status, HILOCK_ECANCELED);
        test_loop_for(e.base, 30);
        cr_expect(rw_free("wake"), "round %d left a lock", i);
    }
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Reentrancy and upgrades ------------------------------------------------------- */

Test(rwlock, reentrant_write_then_read) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    hilock_owner *o = hilock_owner_new(a);
    hilock_acquire_opts opt = opts_wait(HILOCK_WAIT_FOREVER);
    opt.owner = o;
    got w = rw_now(a, 1, "re", &opt);
    cr_assert_eq(w.status, 0);
    long long calls0 = script_calls();
    got r = rw_now(a, 0, "re", &opt);
    cr_assert_eq(r.status, 0, "a writer takes the read lock at once");
    cr_expect_eq(r.hold, w.hold, "as a level of its write hold");
    got w2 = rw_now(a, 1, "re", &opt);
    cr_expect_eq(w2.hold, w.hold);
    cr_expect_eq(hilock_hold_count(w.hold), 3);
    cr_expect_eq(script_calls(), calls0, "nothing sent for reentrant levels");
    got other;
    cr_assert_eq(start(b, 0, "re", NULL, &other, NULL), 0);
    cr_expect_eq(release_now(&e, w.hold), 0);
    cr_expect_eq(release_now(&e, w.hold), 0);
    test_loop_for(e.base, 150);
    cr_expect_eq(other.calls, 0, "still written while a level is left");
    cr_expect_eq(release_now(&e, w.hold), 0);
    cr_assert(test_loop_until(e.base, &other.calls, 2000));
    cr_expect_eq(other.status, 0);

    /* read then read: one hold; a writer waits until both levels go */
    got r1 = rw_now(a, 0, "re", &opt), r2 = rw_now(a, 0, "re", &opt);
    cr_expect_eq(r1.hold, r2.hold);
    cr_expect_eq(hilock_hold_count(r1.hold), 2);
    cr_expect_eq(release_now(&e, other.hold), 0);
    got wb;
    cr_assert_eq(start(b, 1, "re", NULL, &wb, NULL), 0);
    cr_expect_eq(release_now(&e, r1.hold), 0);
    test_loop_for(e.base, 150);
    cr_expect_eq(wb.calls, 0);
    cr_expect_eq(release_now(&e, r1.hold), 0);
    cr_assert(test_loop_until(e.base, &wb.calls, 2000));
    cr_expect_eq(release_now(&e, wb.hold), 0);
    cr_expect(rw_free("re"));
    hilock_owner_free(o);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* A reader asking for the write lock would wait for its own read: refused
 * at once, never a deadlock. */
Test(rwlock, upgrade_refused) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    hilock_owner *o = hilock_owner_new(a);
    hilock_acquire_opts opt = opts_wait(HILOCK_WAIT_FOREVER);
    opt.owner = o;
    got r = rw_now(a, 0, "up", &opt);
    cr_assert_eq(r.status, 0);
    got w;
    cr_expect_eq(start(a, 1, "up", &opt, &w, NULL), HILOCK_EINVAL, "upgrade refused");
    test_loop_for(e.base, 50);
    cr_expect_eq(w.calls, 0, "and no callback");
    cr_expect_eq(release_now(&e, r.hold), 0);
    got w1 = rw_now(a, 1, "up", &opt);
    cr_expect_eq(w1.status, 0, "after its release the owner may write");

    /* a read of the owner queued (behind b's writer... here a's own
     * write is released first, then b writes) */
    cr_expect_eq(release_now(&e, w1.hold), 0);
    got wb = rw_now(b, 1, "up", NULL);
    cr_assert_eq(wb.status, 0);
    got rq;
    cr_assert_eq(start(a, 0, "up", &opt, &rq, NULL), 0);
    cr_expect_eq(start(a, 1, "up", &opt, &w, NULL), HILOCK_EINVAL,
                 "a write behind the owner's own queued read is refused too");
    cr_expect_eq(release_now(&e, wb.hold), 0);
    cr_assert(test_loop_until(e.base, &rq.calls, 2000));
    cr_expect_eq(release_now(&e, rq.hold), 0);

    /* but write, read, write queued by one owner is no upgrade: the first
     * write's grant serves all three */
    wb = rw_now(b, 1, "up", NULL);
    got q1, q2, q3;
    cr_assert_eq(start(a, 1, "up", &opt, &q1, NULL), 0);
    cr_assert_eq(start(a, 0, "up", &opt, &q2, NULL), 0);
    cr_assert_eq(start(a, 1, "up", &opt, &q3, NULL), 0, "a write behind the owner's write");
    cr_expect_eq(release_now(&e, wb.hold), 0);
    cr_assert(test_loop_until(e.base, &q3.calls, 2000));
    cr_expect(q1.status == 0 && q2.status == 0 && q3.status == 0);
    cr_expect(q1.hold == q2.hold && q2.hold == q3.hold);
    cr_expect_eq(hilock_hold_count(q1.hold), 3);
    for (int i = 0; i < 3; i++) cr_expect_eq(release_now(&e, q1.hold), 0);
    cr_expect(rw_free("up"));
    hilock_owner_free(o);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- The scripts themselves ------------------------------------------------------- */

static long long rep_int(redisReply *r, size_t i) {
    if (r == NULL) return -99;
    if (r->type == REDIS_REPLY_INTEGER && i == 0) return r->integer;
    if (r->type != REDIS_REPLY_ARRAY || r->elements <= i) return -98;
    return r->element[i]->integer;
}

/* EVAL an acquire: 4 keys of "idem". */
static redisReply *try_raw(redisContext *k, const char *token, const char *mode, const char *mark) {
    char k1[128], k2[128], k3[128], k4[128];
    rw_key("idem", ":rw", k1, sizeof(k1));
    rw_key("idem", ":rwr", k2, sizeof(k2));
    rw_key("idem", ":rwf", k3, sizeof(k3));
    rw_key("idem", ":rww", k4, sizeof(k4));
    char m[16];
    snprintf(m, sizeof(m), "%s%s", mode, mode[0] == 'w' ? mark : "");
    return redisCommand(k, "EVAL %s 4 %s %s %s %s %s 5000 60 %s", hl_script_rw_acquire.body,
                        k1, k2, k3, k4, token, m);
}

/* EVAL a release of `token` as mode 'w' (the writer), 'r' (a reader) or
 * 'm' (a waiting writer's marker): one key, the mode's. */
static long long release_raw(redisContext *k, const char *token, char mode) {
    char key[128], m[2] = {mode, 0};
    rw_key("idem", mode == 'w' ? ":rw" : mode == 'r' ? ":rwr" : ":rww", key, sizeof(key));
    redisReply *r = redisCommand(k, "EVAL %s 1 %s %s ch %s PUBLISH", hl_script_rw_release.body, key, token, m);
    long long v = rep_int(r, 0);
    if (r) freeReplyObject(r);
    return v;
}

/* A retried try whose reply was lost is granted again, not twice; a
 * repeated release does not free someone else's. */
Test(rwlock, idempotent_scripts) {
    redisContext *k = test_redis_connect(&e.r);
    cr_assert_not_null(k);
    redisReply *r = try_raw(k, "t1", "r", "0");
    cr_expect_eq(rep_int(r, 0), 1);
    freeReplyObject(r);
    r = try_raw(k, "t1", "r", "0");
    cr_expect_eq(rep_int(r, 0), 1, "a repeated read try is granted again");
    freeReplyObject(r);
    char key[128];
    rw_key("idem", ":rwr", key, sizeof(key));
    cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", key), 1, "one entry, not two");
    r = try_raw(k, "w1", "w", "3000");
    cr_expect_eq(rep_int(r, 0), 0, "a writer is refused beside a reader");
    cr_expect_gt(rep_int(r, 1), 0);
    freeReplyObject(r);
    r = try_raw(k, "t2", "r", "0");
    cr_expect_eq(rep_int(r, 0), 0, "a new reader is refused while the writer waits");
    freeReplyObject(r);
    r = try_raw(k, "t1", "r", "0");
    cr_expect_eq(rep_int(r, 0), 1, "a reader already in is not");
    freeReplyObject(r);
    cr_expect_eq(release_raw(k, "w9", 'm'), 0, "another writer's marker stays");
    cr_expect_eq(rw_exists("idem", ":rww"), 1);
    cr_expect_eq(release_raw(k, "t1", 'r'), 1);
    cr_expect_eq(release_raw(k, "t1", 'r'), 0, "a repeated release");
    cr_expect_eq(release_raw(k, "w1", 'm'), 0, "a marker is no lock");
    cr_expect_eq(rw_exists("idem", ":rww"), 0, "the waiting writer's marker went");
    r = try_raw(k, "w1", "w", "3000");
    cr_expect_eq(rep_int(r, 0), 1);
    long long f = rep_int(r, 1);
    freeReplyObject(r);
    r = try_raw(k, "w1", "w", "3000");
    cr_expect_eq(rep_int(r, 0), 1, "a repeated write try is granted again");
    cr_expect_eq(rep_int(r, 1), f, "with the same fence");
    freeReplyObject(r);
    r = try_raw(k, "w2", "w", "3000");
    cr_expect_eq(rep_int(r, 0), 0, "one writer");
    freeReplyObject(r);
    cr_expect_eq(release_raw(k, "t1", 'r'), 0, "an old reader's release frees nothing");
    cr_expect_eq(release_raw(k, "w2", 'w'), 0);
    cr_expect_eq(rw_exists("idem", ":rw"), 1);
    cr_expect_eq(release_raw(k, "w1", 'w'), 1);
    cr_expect_eq(release_raw(k, "w1", 'w'), 0);
    r = try_raw(k, "t3", "r", "0");
    cr_expect_eq(rep_int(r, 0), 1);
    cr_expect_eq(rep_int(r, 1), f, "a reader gets the last write's fence");
    freeReplyObject(r);
    cr_expect_eq(release_raw(k, "t3", 'r'), 1);
    cr_expect(rw_free("idem"));
    redisFree(k);
}

/* ---- Redlock ----------------------------------------------------------------------- */

Test(rwlock, redlock_refused) {
    char url[128];
    snprintf(url, sizeof(url), "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             test_refused_port(), test_refused_port(), test_refused_port());
    hilock_client *c = lockenv_client_url(&e, url, 0);
    got g;
    cr_expect_eq(start(c, 0, "x", NULL, &g, NULL), HILOCK_EINVAL);
    cr_expect_eq(start(c, 1, "x", NULL, &g, NULL), HILOCK_EINVAL);
    cr_expect_eq(g.calls, 0);
    hilock_client_free(c);
}

/* ---- Contention -------------------------------------------------------------------- */

#define PROCS 4
#define TURNS 150

/* TURNS turns of one client on "cont": one write in five. */
static void run_turns(lockenv *le, rwshared *s, int seed) {
    rwproc p = {s, le->base, 0, 0};
    static rwturn t[TURNS];
    hilock_client *c = lockenv_client(le);
    for (int i = 0; i < TURNS; i++) {
        t[i].p = &p;
        t[i].write = (i + seed) % 5 == 0;
        t[i].hold_ms = t[i].write ? 1 : 3;
        cr_assert_eq(rwturn_start(c, "cont", &t[i]), 0);
    }
    test_loop_until(le->base, &p.done, 100000);
    if (!p.done) RW_ADD(s->errors, 1000);
    hilock_client_free(c);
}

Test(rwlock, contention_from_processes, .timeout = 120) {
    rwshared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(s, MAP_FAILED);
    memset((void *)s, 0, sizeof(*s));
    pid_t kids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0) {
            struct event_base *b = event_base_new();
            lockenv ce = e;
            ce.base = b;
            hilock_libevent_init(&ce.loop, b);
            run_turns(&ce, s, i + 1);
            event_base_free(b);
            _exit(0);
        }
    }
    run_turns(&e, s, 0);
    for (int i = 0; i < PROCS; i++) {
        int st = 0;
        cr_assert_eq(waitpid(kids[i], &st, 0), kids[i]);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d failed", i);
    }
    cr_expect_eq(s->errors, 0, "errors: %ld (first %d)", s->errors, s->first_error);
    cr_expect_eq(s->violations, 0, "a writer beside another holder");
    cr_expect_eq(s->fence_regressions, 0, "write fences must strictly increase");
    cr_expect_eq(s->stale_reads, 0, "a reader with an older fence than the last write");
    cr_expect_eq(s->reads + s->writes, (PROCS + 1) * TURNS);
    cr_expect_eq(s->writes, (PROCS + 1) * TURNS / 5);
    cr_expect_geq(s->max_readers, 3, "readers overlap: at most %ld at once", s->max_readers);
    cr_expect(rw_free("cont"), "nothing left behind");
    munmap((void *)s, sizeof(*s));
}

static void kill_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    int *n = arg;
    test_redis_int(&e.r, (*n)++ % 2 ? "CLIENT KILL TYPE normal" : "CLIENT KILL TYPE pubsub");
}

/* Connections killed (commands and subscribers, in turn) during contention:
 * a turn may fail with a connection error, but the invariant holds, every
 * turn ends, and nothing is left behind. */
Test(rwlock, connection_kills_during_contention, .timeout = 90) {
    rwshared s;
    memset(&s, 0, sizeof(s));
    rwproc p = {&s, e.base, 0, 0};
    enum { N = 3, T = 80 };
    static rwturn t[N * T];
    hilock_client *c[N];
    for (int i = 0; i < N; i++) c[i] = lockenv_client(&e);
    for (int i = 0; i < N * T; i++) {
        t[i].p = &p;
        t[i].write = i % 4 == 0;
        t[i].hold_ms = 3;
        cr_assert_eq(rwturn_start(c[i % N], "kills", &t[i]), 0);
    }
    int kills = 0;
    struct event *ev = event_new(e.base, -1, EV_PERSIST, kill_tick, &kills);
    struct timeval tv = {0, 60 * 1000};
    event_add(ev, &tv);
    test_loop_until(e.base, &p.done, 60000);
    event_free(ev);
    cr_assert(p.done, "%d turns never ended", p.left);
    cr_expect_gt(kills, 3);
    cr_expect_eq(s.violations, 0);
    cr_expect_eq(s.fence_regressions, 0);
    cr_expect_eq(s.stale_reads, 0);
    cr_expect_gt(s.reads + s.writes, N * T / 2, "most turns got the lock: %ld", s.reads + s.writes);
    test_loop_for(e.base, 300);
    cr_expect(rw_free("kills"), "nothing left behind");
    for (int i = 0; i < N; i++) hilock_client_free(c[i]);
}

/* ---- Redis Cluster ------------------------------------------------------------------ */

/* Contention on three names over the cluster's masters, from two clients
 * seeded at different nodes: the invariant per name, and every key of a
 * name on the master of its slot (one hash tag). */
Test(rwlock, cluster_contention, .timeout = 120) {
    clusterenv ce;
    clusterenv_start(&ce);
    hilock_client *a, *b;
    cluster_client_pair(&ce.cl, &ce.loop, &a, &b);
    enum { NAMES = 3, T = 240 };
    static rwshared s[NAMES];
    static rwproc p[NAMES];
    static rwturn t[T];
    memset(s, 0, sizeof(s));
    const char *names[NAMES] = {"crw-a", "crw-b", "crw-c"};
    for (int k = 0; k < NAMES; k++) p[k] = (rwproc){&s[k], ce.base, 0, 0};
    for (int i = 0; i < T; i++) {
        t[i].p = &p[i % NAMES];
        t[i].write = i % 4 == 1;
        t[i].hold_ms = 2;
        cr_assert_eq(rwturn_start(i % 2 ? a : b, names[i % NAMES], &t[i]), 0);
    }
    for (int k = 0; k < NAMES; k++) test_loop_until(ce.base, &p[k].done, 60000);
    for (int k = 0; k < NAMES; k++) {
        cr_expect(p[k].done, "%s: %d turns left", names[k], p[k].left);
        cr_expect_eq(s[k].errors, 0, "%s: errors (first %d: %s)", names[k], s[k].first_error,
                     hilock_client_errstr(a));
        cr_expect_eq(s[k].violations, 0, "%s", names[k]);
        cr_expect_eq(s[k].fence_regressions, 0, "%s", names[k]);
        cr_expect_eq(s[k].stale_reads, 0, "%s", names[k]);
        cr_expect_eq(s[k].reads + s[k].writes, T / NAMES);
        char key[128];
        rw_key(names[k], ":rwf", key, sizeof(key));
        test_redis *m = test_cluster_master_of(&ce.cl, hilock_key_slot(key, strlen(key)));
        cr_assert_not_null(m);
        cr_expect_eq(test_redis_int(m, "EXISTS %s", key), 1, "%s's fence on its slot's master", names[k]);
        rw_key(names[k], ":rwr", key, sizeof(key));
        cr_expect_eq(test_redis_int(m, "EXISTS %s", key), 0, "%s: no reader left", names[k]);
    }
    hilock_client_free(a);
    hilock_client_free(b);
    clusterenv_stop(&ce);
}
