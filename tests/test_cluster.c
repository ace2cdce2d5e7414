/* hilock on a real Redis Cluster (3 masters + 3 replicas on loopback): keys
 * land on the master of their slot, names spread over every master, any
 * node (a replica too) serves as the seed, mutual exclusion holds with
 * waiters woken by the release, and a held lock's slot migrates under its
 * holder and its waiters (ASK, then MOVED). */
#include <sys/wait.h>
#include <unistd.h>
#include "support/clusterenv.h"

static test_cluster cl;
static struct event_base *base;
static hilock_loop loop;

static void setup(void) {
    cr_assert_eq(test_cluster_start(&cl), 0, "the cluster did not start");
    base = event_base_new();
    hilock_libevent_init(&loop, base);
}

static void teardown(void) {
    test_cluster_stop(&cl);
    if (base) event_base_free(base);
    base = NULL;
}

TestSuite(cluster, .init = setup, .fini = teardown, .timeout = 120);

static hilock_client *cluster_client(const char *url) {
    hilock_config cfg;
    hilock_client *c = NULL;
    cluster_config(&cfg, url);
    cr_assert_eq(hilock_client_new(&c, &cfg, &loop), 0);
    return c;
}

static unsigned slot_of(const char *name) { return cluster_slot_of(name); }

static long long exists_on(test_redis *r, const char *name) {
    char key[256];
    hilock_key("hilock:", name, key, sizeof(key));
    return test_redis_int(r, "EXISTS %s", key);
}

static got take(hilock_client *c, const char *name) {
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(c, name, NULL, got_cb, &g, NULL), 0);
    test_loop_until(base, &g.calls, 10000);
    cr_assert_eq(g.calls, 1, "no callback for %s", name);
    return g;
}

static int give_back(hilock_hold *h) {
    rel r = {0, 0};
    cr_assert_eq(hilock_release(h, rel_cb, &r), 0);
    test_loop_until(base, &r.calls, 10000);
    cr_assert_eq(r.calls, 1);
    return r.status;
}

/* Every key on the master of its slot, and all three masters used. */
Test(cluster, keys_land_on_the_master_of_their_slot) {
    hilock_client *c = cluster_client(cl.url);
    test_redis *masters[3] = {NULL, NULL, NULL};
    int nmasters = 0;
    for (int i = 0; i < 48; i++) {
        char name[32];
        snprintf(name, sizeof(name), "spread-%d", i);
        got g = take(c, name);
        cr_assert_eq(g.status, 0, "%s: %s (%s)", name, hilock_strerror(g.status), hilock_client_errstr(c));
        test_redis *m = test_cluster_master_of(&cl, slot_of(name));
        cr_assert_not_null(m);
        cr_expect_eq(exists_on(m, name), 1, "%s is not on the master of slot %u", name, slot_of(name));
        int seen = 0;
        for (int k = 0; k < nmasters; k++) seen |= masters[k] == m;
        if (!seen && nmasters < 3) masters[nmasters++] = m;
        cr_assert_eq(give_back(g.hold), 0);
        cr_expect_eq(exists_on(m, name), 0);
    }
    cr_expect_eq(nmasters, 3, "names used %d masters of 3", nmasters);
    hilock_client_free(c);
}

/* Any node is a seed, a replica too: MOVED finds the master. */
Test(cluster, a_replica_as_the_seed) {
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) {
        hilock_client *c = cluster_client(cl.node[i].url);
        got g = take(c, "seeded");
        cr_expect_eq(g.status, 0, "seed %d: %s (%s)", i, hilock_strerror(g.status), hilock_client_errstr(c));
        if (g.status == 0) cr_expect_eq(give_back(g.hold), 0);
        hilock_client_free(c);
    }
}

/* Mutual exclusion across two clients on 8 names over the three masters,
 * with waiters woken by the release. */
Test(cluster, exclusion_over_three_masters) {
    hilock_client *a = cluster_client(cl.url), *b = cluster_client(cl.node[3].url);
    static turn turns[400];
    shared s;
    memset(&s, 0, sizeof(s));
    s.base = base;
    for (int i = 0; i < 400; i++) {
        char name[32];
        turns[i].s = &s;
        turns[i].idx = i % 8;
        snprintf(name, sizeof(name), "ex-%d", i % 8);
        cr_assert_eq(hilock_acquire(i % 2 ? a : b, name, NULL, turn_granted, &turns[i], NULL), 0);
    }
    long long t0 = test_now_ms();
    while (s.done < 400 && test_now_ms() - t0 < 60000) test_loop_for(base, 20);
    cr_expect_eq(s.done, 400, "%d of 400 ended", s.done);
    cr_expect_eq(s.errors, 0);
    cr_expect_eq(s.granted, 400);
    cr_expect_eq(s.overlaps, 0);
    cr_expect_eq(s.regressions, 0, "fences out of order");
    cr_log_info("cluster exclusion: 400 grants in %lld ms", test_now_ms() - t0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Migration of a held lock's slot -------------------------------------- */

Test(cluster, held_lock_migrates_under_its_holder_and_waiter) {
    const char *name = "migrant";
    char slot[8], lock[64], fence[80], src_id[64], dst_id[64], dst_port[16];
    snprintf(slot, sizeof(slot), "%u", slot_of(name));
    hilock_key("hilock:", name, lock, sizeof(lock));
    snprintf(fence, sizeof(fence), "%s:fence", lock);
    test_redis *src = test_cluster_master_of(&cl, slot_of(name)), *dst = cluster_other_master(&cl, src);
    cr_assert(src && dst);
    cluster_node_id(src, src_id, sizeof(src_id));
    cluster_node_id(dst, dst_id, sizeof(dst_id));
    snprintf(dst_port, sizeof(dst_port), "%d", dst->port);

    hilock_client *a = cluster_client(cl.url), *b = cluster_client(cl.url);
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 1500; /* renewed every 500 ms: renewals cross the migration */
    lostrec lost = {0, 0, 0};
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = {0, 0, NULL, 0}, gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(a, name, &o, got_cb, &ga, NULL), 0);
    cr_assert(test_loop_until(base, &ga.calls, 10000));
    cr_assert_eq(ga.status, 0, "%s", hilock_strerror(ga.status));
    cr_assert_eq(hilock_acquire(b, name, NULL, got_cb, &gb, NULL), 0);
    test_loop_for(base, 200);
    cr_assert_eq(gb.calls, 0, "granted while held");

    /* Step by step: IMPORTING, MIGRATING, then the keys move. */
    cr_assert(cluster_run_on(dst, "CLUSTER SETSLOT %s IMPORTING %s", slot, src_id));
    cr_assert(cluster_run_on(src, "CLUSTER SETSLOT %s MIGRATING %s", slot, dst_id));
    test_loop_for(base, 300);
    redisContext *k = test_redis_connect(src);
    redisReply *rep = redisCommand(k, "MIGRATE 127.0.0.1 %s %s 0 5000 KEYS %s %s", dst_port, "", lock, fence);
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "MIGRATE: %s", rep && rep->str ? rep->str : "?");
    freeReplyObject(rep);
    redisFree(k);
    k = test_redis_connect(dst); /* ASKING: the slot is still importing there */
    freeReplyObject(redisCommand(k, "ASKING"));
    rep = redisCommand(k, "EXISTS %s", lock);
    cr_expect(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1, "the lock did not move");
    freeReplyObject(rep);
    redisFree(k);
    /* Renewals now go through ASK (and NOSCRIPT -> EVAL on dst). */
    test_loop_for(base, 1700);
    cr_expect_eq(lost.calls, 0, "the holder lost the lock during the migration");
    cr_expect_eq(gb.calls, 0, "granted while held");

    /* The release finds the lock through ASK. The waiter's try meets the
     * migration (TRYAGAIN: its fence key must not be written on the
     * importing side while the slot moves) and goes through the moment the
     * slot is dst's for good. */
    cr_expect_eq(give_back(ga.hold), 0);
    test_loop_for(base, 300);
    cr_expect_eq(gb.calls, 0, "granted in the middle of the migration");
    long long t0 = test_now_ms();
    cluster_slot_to(&cl, slot, dst_id);
    cr_assert(test_loop_until(base, &gb.calls, 5000), "the waiter was not served");
    cr_expect_eq(gb.status, 0, "%s (%s)", hilock_strerror(gb.status), hilock_client_errstr(b));
    cr_expect_lt(gb.at_ms - t0, 1000, "served %lld ms after the slot moved", gb.at_ms - t0);
    test_loop_for(base, 300);
    if (gb.status == 0) cr_expect_eq(give_back(gb.hold), 0);
    got g3 = take(a, name);
    cr_expect_eq(g3.status, 0, "%s (%s)", hilock_strerror(g3.status), hilock_client_errstr(a));
    cr_expect_eq(exists_on(dst, name), 1);
    if (g3.status == 0) cr_expect_eq(give_back(g3.hold), 0);
    cr_expect_eq(exists_on(dst, name), 0, "a lock left behind");
    /* The renewals followed ASK; a's next try met its stale map (MOVED). */
    hilock_stats sa;
    hilock_stats_init(&sa);
    cr_assert_eq(hilock_client_stats(a, &sa), 0);
    cr_expect_geq(sa.redirects_ask, 1);
    cr_expect_geq(sa.redirects_moved, 1);
    cr_expect_geq(sa.nnodes, 2, "the slot's two masters");
    cr_expect_eq(sa.holds_lost, 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* The CLI against any node of the cluster. */
Test(cluster, cli) {
    char cli[600];
    cr_assert_not_null(test_build_path("HILOCK_CLI", "hilock", cli, sizeof(cli)));
    char *argv[] = {cli, "-u", cl.node[4].url, "cli-lock", "--", "sh", "-c",
                    "test -n \"$HILOCK_FENCE\"", NULL};
    char out[256];
    snprintf(out, sizeof(out), "%s/cli.out", cl.node[0].dir);
    int rc = test_wait(test_spawn(argv, NULL, out, NULL), 20000);
    char log[2048];
    cr_expect_eq(rc, 0, "hilock exited %d: %s", rc, test_slurp(out, log, sizeof(log)));
}

/* ---- Failover ---------------------------------------------------------------- */

/* Holders and waiters on names of every master while one master is failed
 * over: the exclusion holds, every waiter ends, and the lock is served by
 * the promoted replica (MOVED from the old master, NOSCRIPT on the new). */
static void failover_under_contention(int hard) {
    hilock_client *a = cluster_client(cl.url), *b = cluster_client(cl.url);
    /* Both know the slot map before the fault: with one seed, a client whose
     * seed dies before it heard the map knows no other node. */
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof(name), "ex-%d", i);
        got ga = take(a, name);
        if (ga.status == 0) give_back(ga.hold);
        got gb = take(b, name);
        if (gb.status == 0) give_back(gb.hold);
    }
    static turn turns[600];
    shared s;
    memset(&s, 0, sizeof(s));
    s.base = base;
    s.hold_ms = 3; /* 600 grants on 8 names: about 250 ms of contention per name */
    s.ca = a;
    /* A master that serves some of the names: not the first seed (where
     * the clients' subscriptions live), or (hard == 2) the first seed. */
    test_redis *m = NULL, *r = NULL;
    for (int i = 0; i < 8 && m == NULL; i++) {
        char name[32];
        snprintf(name, sizeof(name), "ex-%d", i);
        test_redis *x = test_cluster_master_of(&cl, slot_of(name));
        if ((hard == 2) == (x == &cl.node[0])) m = x; /* 2: the first seed itself */
    }
    if (m) r = cluster_replica_of(&cl, m);
    cr_assert(m && r, "no master/replica pair");
    for (int i = 0; i < 600; i++) {
        char name[32];
        turns[i].s = &s;
        turns[i].idx = i % 8;
        snprintf(name, sizeof(name), "ex-%d", i % 8);
        cr_assert_eq(hilock_acquire(i % 2 ? a : b, name, NULL, turn_granted, &turns[i], NULL), 0);
        if (i == 300) { /* halfway: fail the master over */
            test_loop_for(base, 5);
            if (hard) {
                kill(m->pid, SIGKILL);
            } else {
                redisContext *k = test_redis_connect(r);
                freeReplyObject(redisCommand(k, "CLUSTER FAILOVER"));
                redisFree(k);
            }
        }
    }
    long long t0 = test_now_ms();
    while (s.done < 600 && test_now_ms() - t0 < 60000) test_loop_for(base, 20);
    cr_log_info("failover (%s): %d granted, %d errors (first: %s, %s), %d overlaps in %lld ms",
                hard == 2 ? "kill -9 of the first seed" : hard ? "kill -9" : "CLUSTER FAILOVER", s.granted, s.errors,
                hilock_strerror(s.first_error), s.first_errstr, s.overlaps, test_now_ms() - t0);
    cr_expect_eq(s.done, 600, "%d of 600 ended", s.done);
    cr_expect_eq(s.overlaps, 0);
    cr_expect_eq(s.regressions, 0, "fences out of order");
    /* Afterwards every name works, on the promoted replica too. */
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof(name), "ex-%d", i);
        got g = take(a, name);
        cr_expect_eq(g.status, 0, "%s after the failover: %s (%s)", name, hilock_strerror(g.status),
                     hilock_client_errstr(a));
        if (g.status == 0) cr_expect_eq(give_back(g.hold), 0);
    }
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(cluster, graceful_failover_under_contention) { failover_under_contention(0); }

Test(cluster, master_killed_under_contention, .timeout = 120) { failover_under_contention(1); }

/* The first seed is the node that carries the clients' subscriptions and
 * answers CLUSTER SLOTS: they move to a node that answers. */
Test(cluster, first_seed_killed_under_contention, .timeout = 120) { failover_under_contention(2); }

/* A first host that does not answer: the next one of the URL serves as the
 * seed (the map, the subscriptions), and waiters are woken as usual. */
Test(cluster, next_seed_when_the_first_is_down) {
    char url[160];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d,127.0.0.1:%d", test_refused_port(), cl.node[2].port);
    hilock_client *a = cluster_client(url), *b = cluster_client(url);
    got ga = take(a, "next-seed");
    cr_assert_eq(ga.status, 0, "%s (%s)", hilock_strerror(ga.status), hilock_client_errstr(a));
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "next-seed", NULL, got_cb, &gb, NULL), 0);
    test_loop_for(base, 300);
    cr_assert_eq(gb.calls, 0);
    long long t0 = test_now_ms();
    cr_expect_eq(give_back(ga.hold), 0);
    cr_assert(test_loop_until(base, &gb.calls, 5000));
    cr_expect_eq(gb.status, 0);
    cr_expect_lt(gb.at_ms - t0, 1000, "woken %lld ms after the release", gb.at_ms - t0);
    if (gb.status == 0) cr_expect_eq(give_back(gb.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}
