/* The mutex against a real redis-server: waiting, cancelling, reentrancy,
 * leases and the watchdog, subscriptions, bad input, close. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include "prim/prim.h"
#include "support/lockenv.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

/* ---- Waiting -------------------------------------------------------------- */

TestSuite(wait, .init = setup, .fini = teardown, .timeout = 30);

Test(wait, timeout_try_once_and_forever) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    hilock_acquire_opts o = opts_wait(HILOCK_WAIT_FOREVER);
    got ga = acquire_now(&e, a, "w", &o);
    cr_assert_eq(ga.status, 0);
    uint64_t fa = hilock_hold_fence(ga.hold);
    cr_assert_gt(fa, 0);
    cr_assert_str_eq(hilock_hold_name(ga.hold), "w");

    /* try once: busy at once */
    o = opts_wait(0);
    long long t0 = test_now_ms();
    got g = acquire_now(&e, b, "w", &o);
    cr_expect_eq(g.status, HILOCK_EBUSY);
    cr_expect_lt(g.at_ms - t0, 500);

    /* bounded wait: times out after about 300 ms */
    o = opts_wait(300);
    t0 = test_now_ms();
    g = acquire_now(&e, b, "w", &o);
    cr_expect_eq(g.status, HILOCK_ETIMEDOUT);
    cr_expect_geq(g.at_ms - t0, 290);
    cr_expect_lt(g.at_ms - t0, 1500);

    /* forever: granted when the holder releases, with the next fence */
    got gb = {0, 0, NULL, 0};
    o = opts_wait(HILOCK_WAIT_FOREVER);
    cr_assert_eq(hilock_acquire(b, "w", &o, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 200);
    cr_expect_eq(gb.calls, 0, "must wait while the lock is held");
    cr_assert_eq(release_now(&e, ga.hold), 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 3000));
    cr_expect_eq(gb.status, 0);
    cr_expect_gt(hilock_hold_fence(gb.hold), fa);
    cr_expect_eq(release_now(&e, gb.hold), 0);
    cr_expect_eq(lock_exists(&e.r, "w"), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(wait, cancel_while_queued) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = acquire_now(&e, a, "c", NULL);
    got gb = {0, 0, NULL, 0};
    hilock_wait *w = NULL;
    cr_assert_eq(hilock_acquire(b, "c", NULL, got_cb, &gb, &w), 0);
    cr_assert_not_null(w);
    test_loop_for(e.base, 100);
    cr_assert_eq(hilock_wait_cancel(w), 0);
    cr_expect_eq(gb.calls, 0, "the callback is deferred, not run inside cancel");
    test_loop_for(e.base, 50);
    cr_expect_eq(gb.calls, 1);
    cr_expect_eq(gb.status, HILOCK_ECANCELED);
    cr_expect_eq(release_now(&e, ga.hold), 0);
    test_loop_for(e.base, 300);
    cr_expect_eq(gb.calls, 1, "exactly one callback");
    cr_expect_eq(lock_exists(&e.r, "c"), 0, "a cancelled waiter must not take the lock");
    hilock_client_free(a);
    hilock_client_free(b);
}

/* The first try is sent inside hilock_acquire; cancelling at once races it.
 * The try wins in Redis, so the client must give that lock back. */
Test(wait, cancel_racing_successful_try) {
    hilock_client *c = lockenv_client(&e);
    got g[50];
    for (int i = 0; i < 50; i++) {
        char name[16];
        hilock_wait *w;
        snprintf(name, sizeof(name), "race-%d", i);
        memset(&g[i], 0, sizeof(g[i]));
        cr_assert_eq(hilock_acquire(c, name, NULL, got_cb, &g[i], &w), 0);
        cr_assert_eq(hilock_wait_cancel(w), 0);
    }
    test_loop_for(e.base, 500);
    for (int i = 0; i < 50; i++) {
        char name[16];
        snprintf(name, sizeof(name), "race-%d", i);
        cr_expect_eq(g[i].calls, 1);
        cr_expect_eq(g[i].status, HILOCK_ECANCELED);
        cr_expect_eq(lock_exists(&e.r, name), 0, "%s left behind", name);
    }
    hilock_client_free(c);
}

/* Cancel while the wake-up retry after a release is in flight. */
typedef struct race2 {
    hilock_wait *w;
    rel r;
} race2;

static void cancel_on_release(int status, void *data) {
    race2 *x = data;
    rel_cb(status, &x->r);
    hilock_wait_cancel(x->w); /* may already be decided: then EINVAL, fine */
}

Test(wait, cancel_racing_wakeup) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    for (int i = 0; i < 30; i++) {
        got ga = acquire_now(&e, a, "wake", NULL);
        got gb = {0, 0, NULL, 0};
        race2 x;
        memset(&x, 0, sizeof(x));
        cr_assert_eq(hilock_acquire(b, "wake", NULL, got_cb, &gb, &x.w), 0);
        test_loop_for(e.base, 20);
        cr_assert_eq(hilock_release(ga.hold, cancel_on_release, &x), 0);
        cr_assert(test_loop_until(e.base, &gb.calls, 3000));
        test_loop_for(e.base, 30);
        cr_expect_eq(gb.calls, 1);
        if (gb.status == 0) {
            cr_expect_eq(release_now(&e, gb.hold), 0);
        } else {
            cr_expect_eq(gb.status, HILOCK_ECANCELED);
            test_loop_for(e.base, 50);
        }
        cr_expect_eq(lock_exists(&e.r, "wake"), 0, "round %d left a lock", i);
    }
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(wait, client_free_cancels_every_waiter) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = acquire_now(&e, a, "f", NULL);
    static got gb[100];
    memset(gb, 0, sizeof(gb));
    for (int i = 0; i < 100; i++)
        cr_assert_eq(hilock_acquire(b, "f", NULL, got_cb, &gb[i], NULL), 0);
    got fresh = {0, 0, NULL, 0}; /* its try is still in flight */
    cr_assert_eq(hilock_acquire(b, "f-fresh", NULL, got_cb, &fresh, NULL), 0);
    test_loop_for(e.base, 100);
    hilock_client_free(b);
    for (int i = 0; i < 100; i++) {
        cr_expect_eq(gb[i].calls, 1);
        cr_expect_eq(gb[i].status, HILOCK_ECANCELED);
    }
    cr_expect_eq(fresh.calls, 1);
    test_loop_for(e.base, 100);
    for (int i = 0; i < 100; i++) cr_expect_eq(gb[i].calls, 1, "no second callback");
    cr_expect_eq(release_now(&e, ga.hold), 0);
    hilock_client_free(a);
}

/* A callback that frees the client from inside a callback. */
static hilock_client *freer_client;
static int freer_calls;
static void free_in_callback(hilock_hold *h, int status, void *data) {
    (void)h; (void)status; (void)data;
    freer_calls++;
    hilock_client_free(freer_client);
}

Test(wait, free_from_inside_callback) {
    freer_client = lockenv_client(&e);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(hilock_acquire(freer_client, "inside", NULL, free_in_callback, NULL, NULL), 0);
    test_loop_for(e.base, 300);
    cr_expect_eq(freer_calls, 5, "the first frees, the other four get ECANCELED");
}

/* ---- Reentrancy and ownership ------------------------------------------ */

TestSuite(owner, .init = setup, .fini = teardown, .timeout = 30);

Test(owner, reentrant_acquire_sends_nothing) {
    hilock_client *c = lockenv_client(&e);
    hilock_owner *o = hilock_owner_new(c);
    hilock_acquire_opts op;
    hilock_acquire_opts_init(&op);
    op.owner = o;
    got g1 = acquire_now(&e, c, "re", &op);
    cr_assert_eq(g1.status, 0);
    long long before = script_calls_of(&e.r);
    got g2 = acquire_now(&e, c, "re", &op);
    got g3 = acquire_now(&e, c, "re", &op);
    cr_expect_eq(script_calls_of(&e.r), before,
                 "a reentrant acquire costs no round trip");
    cr_expect_eq(g2.hold, g1.hold);
    cr_expect_eq(g3.hold, g1.hold);
    cr_expect_eq(hilock_hold_count(g1.hold), 3);
    cr_expect_eq(release_now(&e, g1.hold), 0);
    cr_expect_eq(release_now(&e, g1.hold), 0);
    cr_expect_eq(lock_exists(&e.r, "re"), 1, "still held after 2 of 3 releases");
    /* another owner must wait */
    hilock_acquire_opts other = opts_wait(0);
    got gx = acquire_now(&e, c, "re", &other);
    cr_expect_eq(gx.status, HILOCK_EBUSY);
    cr_expect_eq(release_now(&e, g1.hold), 0);
    cr_expect_eq(lock_exists(&e.r, "re"), 0);
    hilock_owner_free(o);
    hilock_client_free(c);
}

Test(owner, queued_twice_granted_together) {
    hilock_client *a = lockenv_client(&e), *c = lockenv_client(&e);
    got ga = acquire_now(&e, a, "q2", NULL);
    hilock_owner *o = hilock_owner_new(c);
    hilock_acquire_opts op;
    hilock_acquire_opts_init(&op);
    op.owner = o;
    got g1 = {0, 0, NULL, 0}, g2 = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(c, "q2", &op, got_cb, &g1, NULL), 0);
    cr_assert_eq(hilock_acquire(c, "q2", &op, got_cb, &g2, NULL), 0);
    test_loop_for(e.base, 100);
    cr_expect_eq(release_now(&e, ga.hold), 0);
    cr_assert(test_loop_until(e.base, &g2.calls, 3000));
    cr_expect_eq(g1.status, 0);
    cr_expect_eq(g2.status, 0);
    cr_expect_eq(g1.hold, g2.hold);
    cr_expect_eq(hilock_hold_count(g1.hold), 2);
    release_now(&e, g1.hold);
    cr_expect_eq(release_now(&e, g1.hold), 0);
    cr_expect_eq(lock_exists(&e.r, "q2"), 0);
    hilock_owner_free(o);
    hilock_client_free(a);
    hilock_client_free(c);
}

Test(owner, release_by_non_owner_is_refused) {
    hilock_client *c = lockenv_client(&e);
    got g = acquire_now(&e, c, "mine", NULL);
    /* Another client's token cannot delete it. */
    redisContext *k = test_redis_connect(&e.r);
    redisReply *rep = redisCommand(k, "EVAL %s 1 %s %s %s h PUBLISH", hl_script_mutex_release.body,
                                   "hilock:{mine}", "not-the-token", "hilock:{mine}:ch");
    cr_assert_not_null(rep);
    cr_expect_eq(rep->type, REDIS_REPLY_INTEGER);
    cr_expect_eq(rep->integer, 0);
    freeReplyObject(rep);
    redisFree(k);
    cr_expect_eq(lock_exists(&e.r, "mine"), 1);

    /* A stale holder (lease ran out, someone else took it) cannot either. */
    hilock_acquire_opts shortlease;
    hilock_acquire_opts_init(&shortlease);
    shortlease.lease_ms = 150;
    shortlease.no_renew = 1;
    got s = acquire_now(&e, c, "stale", &shortlease);
    cr_assert_eq(s.status, 0);
    test_loop_for(e.base, 300);
    got n = acquire_now(&e, c, "stale", NULL);
    cr_assert_eq(n.status, 0);
    cr_expect_eq(release_now(&e, s.hold), HILOCK_ELOST);
    cr_expect_eq(lock_exists(&e.r, "stale"), 1, "the new holder keeps its lock");
    cr_expect_eq(release_now(&e, n.hold), 0);
    cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
}

/* ---- Leases, watchdog, loss ------------------------------------------- */

TestSuite(lease, .init = setup, .fini = teardown, .timeout = 30);


Test(lease, expiry_wakes_waiter_without_release) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 300;
    o.no_renew = 1;
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    long long t0 = test_now_ms();
    got ga = acquire_now(&e, a, "exp", &o);
    cr_assert_eq(ga.status, 0);
    long long pub_before = stat_calls(&e.r, "publish");
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "exp", NULL, got_cb, &gb, NULL), 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 3000));
    cr_expect_eq(gb.status, 0);
    cr_expect_geq(gb.at_ms - t0, 250, "not before the lease ran out");
    cr_expect_lt(gb.at_ms - t0, 1000, "soon after the lease ran out");
    cr_expect_eq(stat_calls(&e.r, "publish"), pub_before, "woken without any release message");
    cr_expect_eq(lost.calls, 1, "the holder is told its lease ran out");
    cr_expect_eq(lost.why, HILOCK_ELOST);
    cr_expect(hilock_hold_lost(ga.hold));
    cr_expect_eq(release_now(&e, ga.hold), HILOCK_ELOST);
    cr_expect_eq(lock_exists(&e.r, "exp"), 1, "the stale release left the new holder alone");
    cr_expect_eq(release_now(&e, gb.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(lease, watchdog_keeps_hold_for_several_leases) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 300;
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = acquire_now(&e, a, "dog", &o);
    cr_assert_eq(ga.status, 0);
    test_loop_for(e.base, 1500); /* five leases */
    cr_expect_eq(lock_exists(&e.r, "dog"), 1);
    cr_expect_gt(test_redis_int(&e.r, "PTTL %s", "hilock:{dog}"), 0);
    hilock_acquire_opts once = opts_wait(0);
    got gb = acquire_now(&e, b, "dog", &once);
    cr_expect_eq(gb.status, HILOCK_EBUSY);
    cr_expect_eq(lost.calls, 0);
    cr_expect_eq(release_now(&e, ga.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(lease, external_delete_fires_lost) {
    hilock_client *a = lockenv_client(&e);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 600;
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = acquire_now(&e, a, "del", &o);
    cr_assert_eq(ga.status, 0);
    long long t0 = test_now_ms();
    cr_assert_eq(test_redis_int(&e.r, "DEL %s", "hilock:{del}"), 1);
    cr_assert(test_loop_until(e.base, &lost.calls, 3000));
    cr_expect_eq(lost.why, HILOCK_ELOST);
    cr_expect_leq(lost.at_ms - t0, 600, "found at the next renewal, within one lease");
    test_loop_for(e.base, 500);
    cr_expect_eq(lost.calls, 1, "lost is reported once");
    cr_expect_eq(release_now(&e, ga.hold), HILOCK_ELOST);
    hilock_client_free(a);
}

/* ---- Subscriptions -------------------------------------------------------- */

TestSuite(subscribe, .init = setup, .fini = teardown, .timeout = 30);

static int served;
static void serve_and_release(hilock_hold *h, int status, void *data) {
    (void)data;
    if (status == 0) { served++; hilock_release(h, NULL, NULL); }
}

Test(subscribe, one_subscription_per_name_then_linger) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = acquire_now(&e, a, "sub", NULL);
    long long subs_before = stat_calls(&e.r, "subscribe");
    served = 0;
    for (int i = 0; i < 200; i++)
        cr_assert_eq(hilock_acquire(b, "sub", NULL, serve_and_release, NULL, NULL), 0);
    test_loop_for(e.base, 200);
    cr_expect_eq(numsub(&e.r, "sub"), 1, "200 waiters, one subscription");
    cr_expect_eq(stat_calls(&e.r, "subscribe") - subs_before, 1);
    long long evals = script_calls_of(&e.r);
    /* a's acquire; b's head: its try, the one after the subscription's
     * ack, and its join once it starved (100 ms): nothing per waiter. */
    cr_expect_leq(evals, 5, "queued waiters send nothing while the lock is held");
    cr_expect_eq(release_now(&e, ga.hold), 0);
    for (int i = 0; i < 100 && served < 200; i++) test_loop_for(e.base, 20);
    cr_expect_eq(served, 200);
    test_loop_for(e.base, 30);
    cr_expect_eq(numsub(&e.r, "sub"), 1, "the subscription lingers");
    test_loop_for(e.base, 300); /* linger is 100 ms in tests */
    cr_expect_eq(numsub(&e.r, "sub"), 0, "and goes away after the linger");
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Bad input -------------------------------------------------------------- */

TestSuite(input, .init = setup, .fini = teardown, .timeout = 30);

static void never(hilock_hold *h, int status, void *data) {
    (void)h; (void)status; (void)data;
    cr_assert_fail("callback of a refused request ran");
}

Test(input, refused_at_once_nothing_sent) {
    hilock_client *c = lockenv_client(&e);
    test_loop_for(e.base, 50);
    long long before = script_calls_of(&e.r);
    char big[HILOCK_NAME_MAX + 2];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    hilock_wait *w = (hilock_wait *)1;
    cr_expect_eq(hilock_acquire(c, NULL, NULL, never, NULL, &w), HILOCK_EINVAL);
    cr_expect_null(w);
    cr_expect_eq(hilock_acquire(c, "", NULL, never, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_acquire(c, big, NULL, never, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_acquire(c, "ok", NULL, NULL, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_acquire(NULL, "ok", NULL, never, NULL, NULL), HILOCK_EINVAL);
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 0;
    cr_expect_eq(hilock_acquire(c, "ok", &o, never, NULL, NULL), HILOCK_EINVAL);
    o.lease_ms = 5;
    cr_expect_eq(hilock_acquire(c, "ok", &o, never, NULL, NULL), HILOCK_EINVAL);
    hilock_acquire_opts_init(&o);
    o.wait_ms = -7;
    cr_expect_eq(hilock_acquire(c, "ok", &o, never, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_wait_cancel(NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_release(NULL, NULL, NULL), HILOCK_EINVAL);
    test_loop_for(e.base, 100);
    cr_expect_eq(script_calls_of(&e.r), before, "nothing sent");

    /* The longest name works, braces and all. */
    big[HILOCK_NAME_MAX] = '\0';
    big[0] = '{';
    big[5] = '}';
    got g = acquire_now(&e, c, big, NULL);
    cr_expect_eq(g.status, 0);
    cr_expect_eq(lock_exists(&e.r, big), 1);
    cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
}

Test(input, bad_config) {
    hilock_client *c = (hilock_client *)1;
    hilock_config cfg;
    const char *bad[] = {"", "http://x", "redis://", "redis://:6379", "redis://h:0",
                         "redis://h:99999", "redis://h:x", "unix://", "redis://h/db"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        hilock_config_init(&cfg);
        cfg.url = bad[i];
        cr_expect_eq(hilock_client_new(&c, &cfg, &e.loop), HILOCK_EURL, "url %s", bad[i]);
        cr_expect_eq(hilock_config_check(&cfg), HILOCK_EURL, "check url %s", bad[i]);
        cr_expect_null(c);
    }
    hilock_config_init(&cfg);
    cfg.prefix = "bad{prefix}";
    cr_expect_eq(hilock_client_new(&c, &cfg, &e.loop), HILOCK_EINVAL);
    cr_expect_eq(hilock_config_check(&cfg), HILOCK_EINVAL);
    hilock_config_init(&cfg);
    cfg.default_lease_ms = 3;
    cr_expect_eq(hilock_client_new(&c, &cfg, &e.loop), HILOCK_EINVAL);
    cr_expect_eq(hilock_config_check(&cfg), HILOCK_EINVAL);
    /* Good ones pass without a loop or a server. */
    const char *good[] = {"redis://127.0.0.1:1", "unix:///nonexistent.sock",
                          "redis-sentinel://127.0.0.1:1#m", "redlock://127.0.0.1:1,127.0.0.1:2"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        hilock_config_init(&cfg);
        cfg.url = good[i];
        cr_expect_eq(hilock_config_check(&cfg), 0, "check url %s", good[i]);
    }
    cr_expect_eq(hilock_config_check(NULL), 0, "NULL: the defaults");
    cr_expect_eq(hilock_client_new(&c, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_client_new(NULL, NULL, &e.loop), HILOCK_EINVAL);
    cr_expect_str_eq(hilock_strerror(HILOCK_EURL), "malformed Redis URL");
    cr_expect_str_eq(hilock_strerror(12345), "unknown error");
    for (int err = 0; err >= HILOCK_ETLS; err--)
        cr_expect_str_neq(hilock_strerror(err), "unknown error", "code %d", err);
}

static got acquire_with_url(const char *url) {
    hilock_client *c = lockenv_client_url(&e, url, 0);
    got g = acquire_now(&e, c, "x", NULL);
    hilock_client_free(c);
    return g;
}

Test(input, unreachable_server) {
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", test_refused_port());
    long long t0 = test_now_ms();
    got g = acquire_with_url(url);
    cr_expect_eq(g.status, HILOCK_ECONN, "got %s", hilock_strerror(g.status));
    cr_expect_lt(g.at_ms - t0, 3000);
}


Test(input, silent_port_times_out) {
    int port, fd = test_listen_silent(&port); /* the kernel accepts; nobody answers */
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    got g = acquire_with_url(url);
    cr_expect_eq(g.status, HILOCK_EDEADLINE, "got %s", hilock_strerror(g.status));
    close(fd);
}

static void answer_http(evutil_socket_t fd, short what, void *arg) {
    (void)what; (void)arg;
    int s = accept(fd, NULL, NULL);
    if (s >= 0) {
        const char msg[] = "HTTP/1.0 400 Bad Request\r\n\r\n";
        if (write(s, msg, sizeof(msg) - 1) < 0) { /* nothing to do */ }
        close(s);
    }
}

Test(input, port_that_is_not_redis) {
    int port, fd = test_listen_silent(&port);
    struct event *ev = event_new(e.base, fd, EV_READ | EV_PERSIST, answer_http, NULL);
    event_add(ev, NULL);
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    got g = acquire_with_url(url);
    cr_expect(g.status == HILOCK_EPROTO || g.status == HILOCK_ECONN, "got %s",
              hilock_strerror(g.status));
    event_free(ev);
    close(fd);
}

Test(input, wrong_password) {
    test_redis r2;
    cr_assert_eq(test_redis_start(&r2, 0, "--requirepass", "sesame", NULL), 0);
    char url[96];
    snprintf(url, sizeof(url), "redis://:wrong@127.0.0.1:%d", r2.port);
    got g = acquire_with_url(url);
    cr_expect_eq(g.status, HILOCK_EAUTH, "got %s", hilock_strerror(g.status));
    snprintf(url, sizeof(url), "redis://:sesame@127.0.0.1:%d/3", r2.port);
    hilock_client *c = lockenv_client_url(&e, url, 0);
    g = acquire_now(&e, c, "authed", NULL);
    cr_expect_eq(g.status, 0);
    redisContext *k = test_redis_connect(&r2);
    redisReply *rep = redisCommand(k, "AUTH sesame");
    freeReplyObject(rep);
    rep = redisCommand(k, "SELECT 3");
    freeReplyObject(rep);
    rep = redisCommand(k, "EXISTS hilock:{authed}");
    cr_expect_eq(rep->integer, 1, "the lock lives in db 3");
    freeReplyObject(rep);
    redisFree(k);
    cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
    test_redis_stop(&r2);
}

/* ---- Graceful close ------------------------------------------------------- */

TestSuite(close, .init = setup, .fini = teardown, .timeout = 30);

static int closed;
static void on_closed(void *data) { (void)data; closed++; }

Test(close, releases_holds_and_cancels_waits) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got g1 = acquire_now(&e, a, "k1", NULL);
    got g2 = acquire_now(&e, a, "k2", NULL);
    cr_assert_eq(g1.status + g2.status, 0);
    got gb = acquire_now(&e, b, "k3", NULL);
    got wa = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(a, "k3", NULL, got_cb, &wa, NULL), 0);
    test_loop_for(e.base, 50);
    closed = 0;
    hilock_client_close(a, on_closed, NULL);
    cr_expect_eq(hilock_acquire(a, "k4", NULL, never, NULL, NULL), HILOCK_ECLOSED);
    cr_assert(test_loop_until(e.base, &closed, 3000));
    cr_expect_eq(wa.calls, 1);
    cr_expect_eq(wa.status, HILOCK_ECANCELED);
    cr_expect_eq(lock_exists(&e.r, "k1"), 0);
    cr_expect_eq(lock_exists(&e.r, "k2"), 0);
    cr_expect_eq(lock_exists(&e.r, "k3"), 1);
    cr_expect_eq(release_now(&e, gb.hold), 0);
    hilock_client_free(b);
}

/* ---- Tokens ---------------------------------------------------------------- */

static int cmp_tok(const void *a, const void *b) { return memcmp(a, b, HL_TOKEN_LEN); }

Test(input, tokens_are_unique) {
    enum { N = 200000 };
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    char (*t)[HL_TOKEN_LEN + 1] = malloc(sizeof(*t) * (N + 1));
    for (int i = 0; i < N; i++) hl_token_text(a, hl_token_new(a), t[i]);
    hl_token_text(b, hl_token_new(b), t[N]);
    for (int i = 0; i <= N; i++) {
        cr_assert_eq(strlen(t[i]), HL_TOKEN_LEN);
        cr_assert_eq(strspn(t[i], "0123456789abcdef"), HL_TOKEN_LEN);
    }
    qsort(t, N + 1, sizeof(*t), cmp_tok);
    for (int i = 0; i < N; i++)
        cr_assert_neq(memcmp(t[i], t[i + 1], HL_TOKEN_LEN), 0, "duplicate token %s", t[i]);
    free(t);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* A wait keeps the second half of its token as a number (hl_token_of reads
 * a grant message's token back): the text is read back to the same
 * number by its own client alone, and in no other spelling. */
Test(input, tokens_read_back) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    char t[HL_TOKEN_LEN + 1], u[HL_TOKEN_LEN + 1];
    uint64_t v;
    for (int i = 0; i < 1000; i++) {
        uint64_t k = hl_token_new(a);
        hl_token_text(a, k, t);
        cr_assert_eq(hl_token_of(a, t, &v), 1);
        cr_assert_eq(v, k);
        cr_assert_eq(hl_token_of(b, t, &v), 0);
    }
    hl_token_text(a, 0xabcdef0123456789ull, t);
    cr_assert_eq(hl_token_of(a, t, &v), 1);
    cr_assert_eq(v, 0xabcdef0123456789ull);
    memcpy(u, t, sizeof(u));
    u[HL_TOKEN_LEN - 1] = 'F'; /* 9 -> F: not a digit of ours */
    cr_assert_eq(hl_token_of(a, u, &v), 0);
    memcpy(u, t, sizeof(u));
    u[HL_CLIENT_ID_LEN] = 'g';
    cr_assert_eq(hl_token_of(a, u, &v), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}
