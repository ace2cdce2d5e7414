/* hilock on a real Redis Cluster (3 masters + 3 replicas on loopback): keys
 * land on the master of their slot, names spread over every master, any
 * node (a replica too) serves as the seed, mutual exclusion holds with
 * waiters woken by the release, and a held lock's slot migrates under its
 * holder and its waiters (ASK, then MOVED). */
#include <sys/wait.h>
#include <unistd.h>
#include "support/clusterenv.h"

static clusterenv e;

static void setup(void) { clusterenv_start(&e); }
static void teardown(void) { clusterenv_stop(&e); }

TestSuite(cluster, .init = setup, .fini = teardown, .timeout = 120);

static hilock_client *cluster_client(const char *url) {
    hilock_config cfg;
    hilock_client *c = NULL;
    cluster_config(&cfg, url);
    cr_assert_eq(hilock_client_new(&c, &cfg, &e.loop), 0);
    return c;
}

static unsigned slot_of(const char *name) { return cluster_slot_of(name); }

static got take(hilock_client *c, const char *name) { return cluster_take(&e, c, name); }
static int give_back(hilock_hold *h) { return cluster_give_back(&e, h); }

/* Every key on the master of its slot, and all three masters used. */
Test(cluster, keys_land_on_the_master_of_their_slot) {
    hilock_client *c = cluster_client(e.cl.url);
    test_redis *masters[3] = {NULL, NULL, NULL};
    int nmasters = 0;
    for (int i = 0; i < 48; i++) {
        char name[32];
        snprintf(name, sizeof(name), "spread-%d", i);
        got g = take(c, name);
        cr_assert_eq(g.status, 0, "%s: %s (%s)", name, hilock_strerror(g.status), hilock_client_errstr(c));
        test_redis *m = test_cluster_master_of(&e.cl, slot_of(name));
        cr_assert_not_null(m);
        cr_expect_eq(lock_exists(m, name), 1, "%s is not on the master of slot %u", name, slot_of(name));
        int seen = 0;
        for (int k = 0; k < nmasters; k++) seen |= masters[k] == m;
        if (!seen && nmasters < 3) masters[nmasters++] = m;
        cr_assert_eq(give_back(g.hold), 0);
        cr_expect_eq(lock_exists(m, name), 0);
    }
    cr_expect_eq(nmasters, 3, "names used %d masters of 3", nmasters);
    hilock_client_free(c);
}

/* Any node is a seed, a replica too: MOVED finds the master. */
Test(cluster, a_replica_as_the_seed) {
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) {
        hilock_client *c = cluster_client(e.cl.node[i].url);
        got g = take(c, "seeded");
        cr_expect_eq(g.status, 0, "seed %d: %s (%s)", i, hilock_strerror(g.status), hilock_client_errstr(c));
        if (g.status == 0) cr_expect_eq(give_back(g.hold), 0);
        hilock_client_free(c);
    }
}

/* Mutual exclusion across two clients on 8 names over the three masters,
 * with waiters woken by the release. */
Test(cluster, exclusion_over_three_masters) {
    hilock_client *a = cluster_client(e.cl.url), *b = cluster_client(e.cl.node[3].url);
    static turn turns[400];
    shared s;
    memset(&s, 0, sizeof(s));
    s.base = e.base;
    for (int i = 0; i < 400; i++) {
        char name[32];
        turns[i].s = &s;
        turns[i].idx = i % 8;
        snprintf(name, sizeof(name), "ex-%d", i % 8);
        cr_assert_eq(hilock_acquire(i % 2 ? a : b, name, NULL, turn_granted, &turns[i], NULL), 0);
    }
    long long t0 = test_now_ms();
    while (s.done < 400 && test_now_ms() - t0 < 60000) test_loop_for(e.base, 20);
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
    hilock_client *a = cluster_client(e.cl.url), *b = cluster_client(e.cl.url);
    cluster_migrate_held(&e, a, b, "migrant", 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* The CLI against any node of the cluster. */
Test(cluster, cli) {
    char cli[600];
    cr_assert_not_null(test_build_path("HILOCK_CLI", "hilock", cli, sizeof(cli)));
    char *argv[] = {cli, "-u", e.cl.node[4].url, "cli-lock", "--", "sh", "-c",
                    "test -n \"$HILOCK_FENCE\"", NULL};
    char out[256];
    snprintf(out, sizeof(out), "%s/cli.out", e.cl.node[0].dir);
    int rc = test_wait(test_spawn(argv, NULL, out, NULL), 20000);
    char log[2048];
    cr_expect_eq(rc, 0, "hilock exited %d: %s", rc, test_slurp(out, log, sizeof(log)));
}

/* ---- Failover ---------------------------------------------------------------- */

static void failover_under_contention(int hard) {
    hilock_client *a = cluster_client(e.cl.url), *b = cluster_client(e.cl.url);
    cluster_failover_contended(&e, a, b, hard);
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
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d,127.0.0.1:%d", test_refused_port(), e.cl.node[2].port);
    hilock_client *a = cluster_client(url), *b = cluster_client(url);
    got ga = take(a, "next-seed");
    cr_assert_eq(ga.status, 0, "%s (%s)", hilock_strerror(ga.status), hilock_client_errstr(a));
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "next-seed", NULL, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 300);
    cr_assert_eq(gb.calls, 0);
    long long t0 = test_now_ms();
    cr_expect_eq(give_back(ga.hold), 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 5000));
    cr_expect_eq(gb.status, 0);
    cr_expect_lt(gb.at_ms - t0, 1000, "woken %lld ms after the release", gb.at_ms - t0);
    if (gb.status == 0) cr_expect_eq(give_back(gb.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Waits ride through a failover ---------------------------------------- */

typedef struct rider {
    struct event_base *base;
    int granted, errors, first_error, inside, overlaps;
    volatile int done;
} rider;

typedef struct rider_turn {
    rider *r;
    hilock_hold *h;
} rider_turn;

static void rider_release(evutil_socket_t fd, short what, void *arg) {
    rider_turn *t = arg;
    (void)fd, (void)what;
    t->r->inside = 0;
    hilock_release(t->h, NULL, NULL);
    t->r->done++;
}

static void rider_granted(hilock_hold *h, int status, void *data) {
    rider_turn *t = data;
    rider *r = t->r;
    if (status != 0) {
        if (r->errors++ == 0) r->first_error = status;
        r->done++;
        return;
    }
    r->granted++;
    if (r->inside) r->overlaps++;
    r->inside = 1;
    t->h = h;
    struct timeval tv = {0, 20 * 1000};
    event_base_once(r->base, -1, EV_TIMEOUT, rider_release, t, &tv);
}

/* Ten clients with the default request timeout (2 s, shorter than a
 * failover) wait up to 30 s for a lock whose master is killed (kill -9):
 * their tries fail while the replica takes over, and they keep trying
 * until it has; every one of them gets the lock in turn. */
Test(cluster, waits_ride_through_a_master_killed, .timeout = 120) {
    enum { N = 10 };
    hilock_config cfg;
    hilock_client *c[N + 1];
    for (int i = 0; i <= N; i++) {
        hilock_config_init(&cfg);
        cfg.url = e.cl.url;
        cr_assert_eq(hilock_client_new(&c[i], &cfg, &e.loop), 0);
    }
    const char *name = "rides";
    got h = take(c[N], name); /* held while the master dies */
    cr_assert_eq(h.status, 0);
    test_redis *m, *rep;
    cr_assert(cluster_settled_pair(&e.cl, slot_of(name), 20000, &m, &rep));
    rider r;
    memset(&r, 0, sizeof(r));
    r.base = e.base;
    static rider_turn turns[N];
    hilock_acquire_opts o = opts_wait(30000);
    for (int i = 0; i < N; i++) {
        turns[i] = (rider_turn){&r, NULL};
        cr_assert_eq(hilock_acquire(c[i], name, &o, rider_granted, &turns[i], NULL), 0);
    }
    test_loop_for(e.base, 300);
    test_redis_kill(m);
    long long t0 = test_now_ms();
    while (test_cluster_master_of(&e.cl, slot_of(name)) != rep && test_now_ms() - t0 < 20000)
        test_loop_for(e.base, 50);
    hilock_release(h.hold, NULL, NULL); /* or its key is lost with the master */
    while (r.done < N && test_now_ms() - t0 < 40000) test_loop_for(e.base, 50);
    cr_log_info("master killed under %d waits: %d granted, %d errors (first %s) in %lld ms", N, r.granted,
                r.errors, hilock_strerror(r.first_error), test_now_ms() - t0);
    cr_expect_eq(r.granted, N, "%d of %d granted; %d errors, the first %s", r.granted, N, r.errors,
                 hilock_strerror(r.first_error));
    cr_expect_eq(r.overlaps, 0);
    for (int i = 0; i <= N; i++) hilock_client_free(c[i]);
}
