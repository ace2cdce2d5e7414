/* Cooperative revocation: hilock_revoke asks a mutex's holder to release
 * it; the hold's callback (hilock_hold_on_revoke) decides.
 *
 * revoke:         the request reaches a listening holder at once (its name
 *                 stays subscribed while it listens, with no waiter), and
 *                 one that missed the message at its next renewal, alone
 *                 or batched; once per hold; a holder that declines keeps
 *                 the lock; a free lock is asked nothing; the bad cases.
 * revoke_cluster: the same on a 3+3 cluster (sharded pub/sub). */
#include "support/lockenv.h"
#include "support/clusterenv.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

typedef struct asked {
    int calls;
    long long at_ms;
    int release;       /* release the hold from the callback */
    rel released;
} asked;

static void on_asked(hilock_hold *h, void *data) {
    asked *a = data;
    a->calls++;
    a->at_ms = test_now_ms();
    if (a->release) cr_assert_eq(hilock_release(h, rel_cb, &a->released), 0);
}

static fencerec revoke_now(struct event_base *base, hilock_client *c, const char *name) {
    return fence_call(base, hilock_revoke, c, name);
}

TestSuite(revoke, .init = setup, .fini = teardown, .timeout = 60);

Test(revoke, a_listening_holder_is_asked_at_once_and_may_release) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got g = acquire_now(&e, a, "r", NULL);
    cr_assert_eq(g.status, 0);
    /* Read now: the hold is freed once the callback's release has answered,
     * which may be before revoke_now returns. */
    uint64_t fence = hilock_hold_fence(g.hold);
    asked k = {0, 0, 1, {0, 0}};
    cr_assert_eq(hilock_hold_on_revoke(g.hold, on_asked, &k), 0);
    test_loop_for(e.base, 100);
    cr_expect_eq(numsub(&e.r, "r"), 1, "a listening holder keeps its name subscribed");
    /* A waiter of b's is granted once the holder gives in. */
    got w = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "r", NULL, got_cb, &w, NULL), 0);
    long long t0 = test_now_ms();
    fencerec r = revoke_now(e.base, b, "r");
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.fence, fence);
    test_loop_until(e.base, &k.calls, 5000);
    cr_expect_eq(k.calls, 1);
    cr_expect_lt(k.at_ms - t0, 500, "asked %lld ms after the revoke (the message)", k.at_ms - t0);
    test_loop_until(e.base, &w.calls, 5000);
    cr_expect_eq(w.status, 0);
    cr_expect_eq(k.released.status, 0);
    release_now(&e, w.hold);
    test_loop_for(e.base, 300); /* linger 100 ms */
    cr_expect_eq(numsub(&e.r, "r"), 0, "released: the subscription goes");
    hilock_client_free(a);
    hilock_client_free(b);
}

/* Nobody listening when the revoke came: the mark on the lock is read by
 * the next renewal, and the callback, set later, runs then. */
Test(revoke, a_holder_that_missed_the_message_hears_it_at_its_next_renewal) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    hilock_acquire_opts o = opts_wait_lease(0, 600); /* renewed every 200 ms */
    got g = acquire_now(&e, a, "late", &o);
    fencerec r = revoke_now(e.base, b, "late");
    cr_expect_eq(r.fence, hilock_hold_fence(g.hold));
    test_loop_for(e.base, 500);
    asked k = {0, 0, 0, {0, 0}};
    cr_assert_eq(hilock_hold_on_revoke(g.hold, on_asked, &k), 0);
    cr_expect_eq(k.calls, 0, "never from inside the call");
    test_loop_for(e.base, 50);
    cr_expect_eq(k.calls, 1);
    /* Declined: the lock stays held and renewed; asked once only. */
    revoke_now(e.base, b, "late");
    test_loop_for(e.base, 800);
    cr_expect_eq(k.calls, 1, "asked %d times", k.calls);
    cr_expect_eq(hilock_hold_lost(g.hold), 0);
    cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* In a batch of renewals, only the hold asked hears it. */
Test(revoke, batched_renewals_tell_the_hold_asked_alone) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    hilock_acquire_opts o = opts_wait_lease(0, 900);
    got g[8];
    asked k[8];
    char name[32];
    memset(k, 0, sizeof(k));
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof(name), "batch-%d", i);
        g[i] = acquire_now(&e, a, name, &o);
    }
    revoke_now(e.base, b, "batch-3");
    test_loop_for(e.base, 600);
    for (int i = 0; i < 8; i++) cr_assert_eq(hilock_hold_on_revoke(g[i].hold, on_asked, &k[i]), 0);
    test_loop_for(e.base, 50);
    for (int i = 0; i < 8; i++) {
        cr_expect_eq(k[i].calls, i == 3, "hold %d asked %d times", i, k[i].calls);
        release_now(&e, g[i].hold);
    }
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(revoke, a_free_lock_is_asked_nothing_and_the_bad_cases_are_refused) {
    hilock_client *b = lockenv_client(&e);
    fencerec r = revoke_now(e.base, b, "free");
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.fence, 0);
    cr_expect_eq(lock_exists(&e.r, "free"), 0, "a revoke wrote a lock");
    cr_expect_eq(hilock_revoke(NULL, "x", fence_cb, &r), HILOCK_EINVAL);
    cr_expect_eq(hilock_revoke(b, "", fence_cb, &r), HILOCK_EINVAL);
    cr_expect_eq(hilock_revoke(b, "x", NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_hold_on_revoke(NULL, NULL, NULL), HILOCK_EINVAL);
    got f = acquire_loop_with(e.base, hilock_fair_acquire, b, "fair", NULL, 5000);
    cr_assert_eq(f.status, 0);
    asked k = {0, 0, 0, {0, 0}};
    cr_expect_eq(hilock_hold_on_revoke(f.hold, on_asked, &k), HILOCK_EINVAL);
    cr_expect(strstr(hilock_client_errstr(b), "mutex"), "%s", hilock_client_errstr(b));
    release_now(&e, f.hold);
    /* A hold being released: refused; its callback never runs after. */
    got g = acquire_now(&e, b, "going", NULL);
    cr_assert_eq(hilock_hold_on_revoke(g.hold, on_asked, &k), 0);
    rel rl = {0, 0};
    cr_assert_eq(hilock_release(g.hold, rel_cb, &rl), 0);
    cr_expect_eq(hilock_hold_on_revoke(g.hold, on_asked, &k), HILOCK_EINVAL);
    test_loop_until(e.base, &rl.calls, 5000);
    revoke_now(e.base, b, "going");
    test_loop_for(e.base, 100);
    cr_expect_eq(k.calls, 0);
    /* Over Redlock: refused. */
    char url[96];
    snprintf(url, sizeof(url), "redlock://127.0.0.1:%d", e.r.port);
    hilock_client *rl_c = lockenv_client_url(&e, url, 0);
    cr_expect_eq(hilock_revoke(rl_c, "x", fence_cb, &r), HILOCK_EINVAL);
    got h = acquire_now(&e, rl_c, "rl", NULL);
    cr_expect_eq(hilock_hold_on_revoke(h.hold, on_asked, &k), HILOCK_EINVAL);
    release_now(&e, h.hold);
    hilock_client_free(rl_c);
    hilock_client_free(b);
}

/* Stopping to listen (cb NULL) unsubscribes, and the hold's release or
 * loss ends it; a client freed with a listening hold frees cleanly. */
Test(revoke, listening_stops_with_null_release_and_free) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got g = acquire_now(&e, a, "stop", NULL);
    asked k = {0, 0, 0, {0, 0}};
    cr_assert_eq(hilock_hold_on_revoke(g.hold, on_asked, &k), 0);
    cr_assert_eq(hilock_hold_on_revoke(g.hold, on_asked, &k), 0); /* again: one listener */
    test_loop_for(e.base, 100);
    cr_expect_eq(numsub(&e.r, "stop"), 1);
    cr_assert_eq(hilock_hold_on_revoke(g.hold, NULL, NULL), 0);
    test_loop_for(e.base, 300);
    cr_expect_eq(numsub(&e.r, "stop"), 0);
    revoke_now(e.base, b, "stop");
    test_loop_for(e.base, 100);
    cr_expect_eq(k.calls, 0, "not listening");
    got g2 = acquire_now(&e, a, "stop2", NULL);
    cr_assert_eq(hilock_hold_on_revoke(g2.hold, on_asked, &k), 0);
    hilock_client_free(a); /* with both holds */
    hilock_client_free(b);
}

/* ---- revoke_cluster ------------------------------------------------------ */

static clusterenv ce;
static void csetup(void) { clusterenv_start(&ce); }
static void cteardown(void) { clusterenv_stop(&ce); }

TestSuite(revoke_cluster, .init = csetup, .fini = cteardown, .timeout = 120);

Test(revoke_cluster, a_listening_holder_is_asked_at_once) {
    hilock_client *a = NULL, *b = NULL;
    cluster_client_pair(&ce.cl, &ce.loop, &a, &b);
    const char *names[] = {"alpha", "beta", "gamma"};
    for (int i = 0; i < 3; i++) {
        got g = acquire_loop(ce.base, a, names[i], NULL, 10000);
        cr_assert_eq(g.status, 0);
        uint64_t fence = hilock_hold_fence(g.hold); /* freed once released */
        asked k = {0, 0, 1, {0, 0}};
        cr_assert_eq(hilock_hold_on_revoke(g.hold, on_asked, &k), 0);
        test_loop_for(ce.base, 200);
        long long t0 = test_now_ms();
        fencerec r = revoke_now(ce.base, b, names[i]);
        cr_expect_eq(r.fence, fence, "%s", names[i]);
        test_loop_until(ce.base, &k.released.calls, 5000);
        cr_expect_eq(k.calls, 1, "%s", names[i]);
        cr_expect_lt(k.at_ms - t0, 1000, "%s: asked %lld ms after", names[i], k.at_ms - t0);
    }
    hilock_client_free(a);
    hilock_client_free(b);
}

/* The master of the lock's slot fails over (graceful) under a listening
 * holder: its subscription follows the slot to the promoted replica, so a
 * revoke after it is heard at once, and the waiter gets the lock. */
Test(revoke_cluster, a_listening_holder_is_asked_after_its_masters_failover) {
    hilock_client *a = NULL, *b = NULL;
    cluster_client_pair(&ce.cl, &ce.loop, &a, &b);
    const char *name = "rv-failover";
    unsigned slot = cluster_slot_of(name);
    test_redis *m = NULL, *r = NULL;
    cr_assert(cluster_settled_pair(&ce.cl, slot, 20000, &m, &r));
    hilock_acquire_opts o = opts_wait_lease(-1, 20000);
    got g = acquire_loop(ce.base, a, name, &o, 10000);
    cr_assert_eq(g.status, 0);
    uint64_t fence = hilock_hold_fence(g.hold); /* freed once released */
    asked k = {0, 0, 1, {0, 0}};
    cr_assert_eq(hilock_hold_on_revoke(g.hold, on_asked, &k), 0);
    got w = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, name, NULL, got_cb, &w, NULL), 0);
    test_loop_for(ce.base, 200);
    cr_assert(cluster_fail_over_to(&ce, slot, m, r, 30000), "slot %u did not fail over to its replica", slot);
    test_loop_for(ce.base, 1500); /* the subscriptions move to the new master */
    cr_expect_eq(k.calls, 0, "asked by the failover");
    cr_expect_eq(w.calls, 0, "the waiter took the lock in the failover");
    long long t0 = test_now_ms();
    fencerec f = revoke_now(ce.base, b, name);
    cr_expect_eq(f.status, 0, "%s", hilock_strerror(f.status));
    cr_expect_eq(f.fence, fence);
    test_loop_until(ce.base, &k.released.calls, 5000);
    cr_expect_eq(k.calls, 1);
    cr_expect_lt(k.at_ms - t0, 1000, "asked %lld ms after", k.at_ms - t0);
    test_loop_until(ce.base, &w.calls, 5000);
    cr_expect_eq(w.status, 0, "%s", hilock_strerror(w.status));
    if (w.status == 0) release_loop(ce.base, w.hold, 10000);
    hilock_client_free(a);
    hilock_client_free(b);
}
