/* Lock-delay (hilock_config.lock_delay_ms): a mutex or fair lock whose
 * hold ends without a release cannot be taken for the delay after its
 * lease, so that a holder that is merely slow sees its loss first.
 *
 * lock_delay:         a lapsed hold keeps the name for lease + delay, and a
 *                     waiter is granted at the delay's end by its own
 *                     timer, after a try or two (no polling); a release
 *                     frees it at once; renewals extend lease + delay; the
 *                     fair lock the same; the config's bounds.
 * lock_delay_cluster: the same lapse on a 3+3 cluster, and through a
 *                     failover of the name's master during the delay. */
#include "support/lockenv.h"
#include "support/clusterenv.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

static hilock_client *client_delay(const char *url, hilock_loop *loop, uint32_t delay_ms) {
    hilock_config cfg;
    lockenv_config(&cfg, url);
    cfg.lock_delay_ms = delay_ms;
    hilock_client *c = NULL;
    cr_assert_eq(hilock_client_new(&c, &cfg, loop), 0);
    return c;
}

/* A holds `name` with a lease of 300 ms and no renewal, and lapses; B
 * waits for it. When was B granted, from A's grant (ms)? *tries: B's. */
static long long lapse(struct event_base *base, acquire_fn fn, hilock_client *a, hilock_client *b,
                       const char *name, lostrec *lost, unsigned long long *tries) {
    hilock_acquire_opts o = opts_wait_lease(0, 300);
    o.no_renew = 1;
    o.lost_cb = lost_cb;
    o.lost_data = lost;
    got ga = acquire_loop_with(base, fn, a, name, &o, 5000);
    cr_assert_eq(ga.status, 0);
    long long t0 = test_now_ms();
    hilock_acquire_opts w = opts_wait(10000);
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(fn(b, name, &w, got_cb, &gb, NULL), 0);
    test_loop_until(base, &gb.calls, 10000);
    cr_assert_eq(gb.calls, 1);
    cr_assert_eq(gb.status, 0, "%s", hilock_strerror(gb.status));
    *tries = stats_of(b).tries;
    release_loop(base, gb.hold, 5000);
    release_loop(base, ga.hold, 5000); /* ELOST: gone already */
    return gb.at_ms - t0;
}

TestSuite(lock_delay, .init = setup, .fini = teardown, .timeout = 60);

Test(lock_delay, a_lapsed_hold_keeps_the_name_for_the_delay_and_the_waiter_is_woken_then) {
    /* B never starves: a starving wait takes a place in the queue, whose
     * head tries every second to keep it (bounded waiting's refresh). */
    hilock_client *a = client_delay(e.r.url, &e.loop, 1500);
    hilock_client *b = lockenv_client_starving(&e, HILOCK_STARVE_NEVER);
    lostrec lost = {0, 0, 0};
    unsigned long long tries = 0;
    long long at = lapse(e.base, hilock_acquire, a, b, "lapse", &lost, &tries);
    cr_expect_eq(lost.calls, 1, "the holder was told of its loss");
    cr_expect_geq(at, 1700, "granted %lld ms after the lapsed grant (lease 300 + delay 1500)", at);
    cr_expect_lt(at, 2600, "granted %lld ms after: not woken at the delay's end", at);
    cr_expect_leq(tries, 3, "%llu tries: a waiter sleeps until the key's end", tries);
    /* Without a delay, the same lapse frees the name at the lease's end. */
    hilock_client *a0 = client_delay(e.r.url, &e.loop, 0);
    lostrec lost0 = {0, 0, 0};
    at = lapse(e.base, hilock_acquire, a0, b, "lapse0", &lost0, &tries);
    cr_expect_lt(at, 1000, "no delay: granted %lld ms after", at);
    hilock_client_free(a);
    hilock_client_free(a0);
    hilock_client_free(b);
}

Test(lock_delay, a_release_frees_the_name_at_once) {
    hilock_client *a = client_delay(e.r.url, &e.loop, 5000), *b = lockenv_client(&e);
    got ga = acquire_now(&e, a, "rel", NULL);
    cr_assert_eq(ga.status, 0);
    long long pttl = test_redis_int(&e.r, "PTTL %s", prim_key("rel", ""));
    cr_expect(pttl > 30000 && pttl <= 35000, "the key's TTL %lld: lease 30000 + delay 5000", pttl);
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "rel", NULL, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 100);
    cr_assert_eq(gb.calls, 0);
    long long t = test_now_ms();
    cr_assert_eq(release_now(&e, ga.hold), 0);
    test_loop_until(e.base, &gb.calls, 5000);
    cr_assert_eq(gb.status, 0);
    cr_expect_lt(gb.at_ms - t, 500, "granted %lld ms after the release", gb.at_ms - t);
    release_now(&e, gb.hold);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(lock_delay, renewals_extend_the_lease_and_the_delay) {
    hilock_client *a = client_delay(e.r.url, &e.loop, 2000);
    hilock_acquire_opts o = opts_wait_lease(0, 600);
    got g = acquire_now(&e, a, "renew", &o);
    cr_assert_eq(g.status, 0);
    test_loop_for(e.base, 1500); /* renewed every 200 ms */
    cr_expect_eq(hilock_hold_lost(g.hold), 0);
    long long pttl = test_redis_int(&e.r, "PTTL %s", prim_key("renew", ""));
    cr_expect(pttl > 2000 && pttl <= 2600, "the key's TTL %lld: lease 600 + delay 2000", pttl);
    /* By hand too. */
    rel r = {0, 0};
    cr_assert_eq(hilock_hold_extend(g.hold, 5000, rel_cb, &r), 0);
    test_loop_until(e.base, &r.calls, 5000);
    cr_expect_eq(r.status, 0);
    pttl = test_redis_int(&e.r, "PTTL %s", prim_key("renew", ""));
    cr_expect(pttl > 6500 && pttl <= 7000, "after extend: %lld", pttl);
    cr_assert_eq(release_now(&e, g.hold), 0);
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", prim_key("renew", "")), 0);
    hilock_client_free(a);
}

/* Many holds renewed in one batch keep their delay too. */
Test(lock_delay, batched_renewals_keep_the_delay) {
    hilock_client *a = client_delay(e.r.url, &e.loop, 3000);
    hilock_acquire_opts o = opts_wait_lease(0, 900);
    got g[20];
    char name[32];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof(name), "batch-%d", i);
        g[i] = acquire_now(&e, a, name, &o);
        cr_assert_eq(g[i].status, 0);
    }
    long long renewals = stats_of(a).renewals;
    test_loop_for(e.base, 1300);
    cr_expect_gt(stats_of(a).renewals, renewals);
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof(name), "batch-%d", i);
        long long pttl = test_redis_int(&e.r, "PTTL %s", prim_key(name, ""));
        cr_expect(pttl > 3000 && pttl <= 3900, "%s: TTL %lld, lease 900 + delay 3000", name, pttl);
        release_now(&e, g[i].hold);
    }
    hilock_client_free(a);
}

Test(lock_delay, the_fair_lock_too) {
    hilock_client *a = client_delay(e.r.url, &e.loop, 1500), *b = lockenv_client(&e);
    lostrec lost = {0, 0, 0};
    unsigned long long tries = 0;
    long long at = lapse(e.base, hilock_fair_acquire, a, b, "fair", &lost, &tries);
    cr_expect_eq(lost.calls, 1);
    cr_expect_geq(at, 1700, "granted %lld ms after the lapsed grant (lease 300 + delay 1500)", at);
    cr_expect_lt(at, 3000, "granted %lld ms after", at);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(lock_delay, the_config_bounds) {
    hilock_config cfg;
    hilock_config_init(&cfg);
    cr_expect_eq(cfg.lock_delay_ms, 0);
    cfg.lock_delay_ms = HILOCK_LOCK_DELAY_MAX;
    cr_expect_eq(hilock_config_check(&cfg), 0);
    cfg.lock_delay_ms = HILOCK_LOCK_DELAY_MAX + 1;
    cr_expect_eq(hilock_config_check(&cfg), HILOCK_EINVAL);
}

/* ---- lock_delay_cluster -------------------------------------------------- */

static clusterenv ce;
static void csetup(void) { clusterenv_start(&ce); }
static void cteardown(void) { clusterenv_stop(&ce); }

TestSuite(lock_delay_cluster, .init = csetup, .fini = cteardown, .timeout = 120);

Test(lock_delay_cluster, a_lapsed_hold_keeps_the_name_for_the_delay) {
    hilock_config cfg;
    cluster_config(&cfg, ce.cl.url);
    cfg.lock_delay_ms = 1500;
    hilock_client *a = cluster_client_cfg(&ce, &cfg);
    cluster_config(&cfg, ce.cl.node[3].url);
    hilock_client *b = cluster_client_cfg(&ce, &cfg);
    lostrec lost = {0, 0, 0};
    unsigned long long tries = 0;
    long long at = lapse(ce.base, hilock_acquire, a, b, "cl-lapse", &lost, &tries);
    cr_expect_eq(lost.calls, 1);
    cr_expect_geq(at, 1700, "granted %lld ms after the lapsed grant (lease 300 + delay 1500)", at);
    cr_expect_lt(at, 3000, "granted %lld ms after", at);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* A lapsed hold's delay lives in its key's TTL, which the replica has: a
 * graceful failover of the slot during the delay keeps the name taken
 * until lease + delay, and the waiter is granted then. */
Test(lock_delay_cluster, the_delay_outlives_a_failover) {
    hilock_config cfg;
    cluster_config(&cfg, ce.cl.url);
    cfg.lock_delay_ms = 8000;
    cfg.request_timeout_ms = 15000;
    hilock_client *a = cluster_client_cfg(&ce, &cfg);
    cluster_config(&cfg, ce.cl.node[3].url);
    cfg.request_timeout_ms = 15000;
    hilock_client *b = cluster_client_cfg(&ce, &cfg);
    const char *name = "cl-delay-failover";
    unsigned slot = cluster_slot_of(name);
    test_redis *m = NULL, *r = NULL;
    cr_assert(cluster_settled_pair(&ce.cl, slot, 20000, &m, &r));
    hilock_acquire_opts o = opts_wait_lease(0, 300);
    o.no_renew = 1;
    got ga = acquire_loop(ce.base, a, name, &o, 5000);
    cr_assert_eq(ga.status, 0);
    long long t0 = test_now_ms();
    got gb = {0, 0, NULL, 0};
    hilock_acquire_opts w = opts_wait(30000);
    cr_assert_eq(hilock_acquire(b, name, &w, got_cb, &gb, NULL), 0);
    test_loop_for(ce.base, 500); /* lapsed: the delay runs */
    cr_assert(cluster_fail_over_to(&ce, slot, m, r, 30000), "slot %u did not fail over to its replica", slot);
    long long failed_over = test_now_ms() - t0;
    test_loop_until(ce.base, &gb.calls, 20000);
    cr_assert_eq(gb.status, 0, "%s", hilock_strerror(gb.status));
    long long at = gb.at_ms - t0;
    cr_log_info("lock-delay through a failover (%lld ms after the grant): granted at %lld ms", failed_over, at);
    if (failed_over < 7500) /* the failover ended inside the delay */
        cr_expect_geq(at, 8200, "granted %lld ms after the lapsed grant (lease 300 + delay 8000)", at);
    cr_expect_lt(at, 12000, "granted %lld ms after: not woken at the delay's end", at);
    release_loop(ce.base, gb.hold, 10000);
    release_loop(ce.base, ga.hold, 10000);
    hilock_client_free(a);
    hilock_client_free(b);
}
