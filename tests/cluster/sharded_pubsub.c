/* Pub/sub and replication on a real Redis Cluster (3 masters + 3
 * replicas): sharded subscriptions live on the master of their slot and
 * follow it when it moves (step by step, and by `redis-cli --cluster
 * reshard` under contention); classic mode still works; WAIT after acquire
 * and renew (wait_replicas). */
#include <unistd.h>
#include "support/clusterenv.h"

static clusterenv e;

static void setup(void) { clusterenv_start(&e); }
static void teardown(void) { clusterenv_stop(&e); }

TestSuite(sharded, .init = setup, .fini = teardown, .timeout = 120);

static hilock_client *client(int pubsub) {
    hilock_config cfg;
    cluster_config(&cfg, e.cl.url);
    cfg.pubsub = pubsub;
    return cluster_client_cfg(&e, &cfg);
}

static got take(hilock_client *c, const char *name, const hilock_acquire_opts *o) {
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(c, name, o, got_cb, &g, NULL), 0);
    test_loop_until(e.base, &g.calls, 10000);
    cr_assert_eq(g.calls, 1, "no callback for %s", name);
    return g;
}

static int give_back(hilock_hold *h) {
    rel r = {0, 0};
    cr_assert_eq(hilock_release(h, rel_cb, &r), 0);
    test_loop_until(e.base, &r.calls, 10000);
    cr_assert_eq(r.calls, 1);
    return r.status;
}

/* Wait (running the loop) until `name`'s channel is subscribed on `r`. */
static int until_subscribed(const test_redis *r, const char *name, int classic, int ms) {
    long long t0 = test_now_ms();
    while (!cluster_subscribed_on(r, name, classic)) {
        if (test_now_ms() - t0 > ms) return 0;
        test_loop_for(e.base, 20);
    }
    return 1;
}

/* How many nodes carry a subscription to `name`'s channel. */
static int subscribed_nodes(const char *name, int classic) {
    int n = 0;
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) n += cluster_subscribed_on(&e.cl.node[i], name, classic);
    return n;
}

/* Holder a, waiter b on `name`; b is woken by the release, within 1 s
 * where the lease is 30 s. */
static void release_wakes(hilock_client *a, hilock_hold *h, got *gb) {
    long long t0 = test_now_ms();
    cr_expect_eq(give_back(h), 0);
    cr_assert(test_loop_until(e.base, &gb->calls, 5000), "the waiter was not woken");
    cr_expect_eq(gb->status, 0, "%s (%s)", hilock_strerror(gb->status), hilock_client_errstr(a));
    cr_expect_lt(gb->at_ms - t0, 1000, "woken %lld ms after the release", gb->at_ms - t0);
    if (gb->status == 0) cr_expect_eq(give_back(gb->hold), 0);
}

/* Observer record: calls, the last epoch, when. */
typedef struct heard {
    int calls;
    uint64_t epoch;
    long long at_ms;
} heard;

static void heard_cb(int status, uint64_t epoch, const char *value, size_t len, void *data) {
    heard *h = data;
    (void)status; (void)value; (void)len;
    h->calls++;
    h->epoch = epoch;
    h->at_ms = test_now_ms();
}

/* A fresh client whose first seed is the master of an election's slot
 * observes it at once, before any server told it the pub/sub mode: its
 * subscription is sharded all the same (its subscriber connection asks
 * INFO first), so the election's message reaches it. Once, a classic
 * SUBSCRIBE sent before that answer stayed on that node, deaf to the
 * SPUBLISH, and the observer learned of the leader only at its lease's
 * end. */
Test(sharded, a_fresh_client_seeded_at_the_master_subscribes_sharded_at_once) {
    const char *name = NULL;
    char buf[32];
    test_redis *m = NULL;
    for (int i = 0; i < 200 && m == NULL; i++) {
        snprintf(buf, sizeof(buf), "fresh-%d", i);
        if (test_cluster_master_of(&e.cl, cluster_slot_of(buf)) == &e.cl.node[0]) m = &e.cl.node[0], name = buf;
    }
    cr_assert_not_null(m, "no name on the first seed");
    hilock_client *a = client(HILOCK_PUBSUB_AUTO), *b = client(HILOCK_PUBSUB_AUTO);
    heard h = {0, 0, 0};
    hilock_observer *ob = NULL;
    cr_assert_eq(hilock_observe(b, name, heard_cb, &h, &ob), 0); /* b's first request */
    test_loop_until(e.base, &h.calls, 5000);
    cr_assert_eq(h.calls, 1);
    test_loop_for(e.base, 200);
    cr_expect_eq(subscribed_nodes(name, 1), 0, "a classic subscription");
    got g = {0, 0, NULL, 0};
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 20000;
    long long t0 = test_now_ms();
    cr_assert_eq(hilock_campaign(a, name, "a", &o, got_cb, &g, NULL), 0);
    test_loop_until(e.base, &g.calls, 5000);
    cr_assert_eq(g.status, 0);
    while (h.calls < 2 && test_now_ms() - t0 < 3000) test_loop_for(e.base, 10);
    cr_expect_eq(h.calls, 2, "the election not heard");
    cr_expect_eq(h.epoch, hilock_hold_fence(g.hold));
    cr_expect_lt(h.at_ms - t0, 1000, "heard %lld ms after", h.at_ms - t0);
    cr_assert_eq(hilock_observe_stop(ob), 0);
    give_back(g.hold);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* Auto picks sharded on a Redis 7 cluster: each waiter's channel is
 * subscribed on the master of its slot only, none classically. */
Test(sharded, channels_live_on_the_master_of_their_slot) {
    hilock_client *a = client(HILOCK_PUBSUB_AUTO), *b = client(HILOCK_PUBSUB_AUTO);
    const char *names[] = {"sh-0", "sh-1", "sh-2", "sh-3", "sh-4", "sh-5"};
    got held[6], waits[6];
    test_redis *masters[3] = {NULL, NULL, NULL};
    int nmasters = 0;
    for (int i = 0; i < 6; i++) {
        held[i] = take(a, names[i], NULL);
        cr_assert_eq(held[i].status, 0, "%s", hilock_strerror(held[i].status));
        waits[i] = (got){0, 0, NULL, 0};
        cr_assert_eq(hilock_acquire(b, names[i], NULL, got_cb, &waits[i], NULL), 0);
    }
    for (int i = 0; i < 6; i++) {
        test_redis *m = test_cluster_master_of(&e.cl, cluster_slot_of(names[i]));
        cr_assert(until_subscribed(m, names[i], 0, 3000), "%s: not subscribed on its master", names[i]);
        cr_expect_eq(subscribed_nodes(names[i], 0), 1, "%s: on more than its master", names[i]);
        cr_expect_eq(subscribed_nodes(names[i], 1), 0, "%s: subscribed classically", names[i]);
        int seen = 0;
        for (int j = 0; j < nmasters; j++) seen |= masters[j] == m;
        if (!seen) masters[nmasters++] = m;
    }
    cr_expect_eq(nmasters, 3, "the names did not spread over the three masters");
    for (int i = 0; i < 6; i++) release_wakes(b, held[i].hold, &waits[i]);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* Classic mode on a cluster: one node carries every channel, and a PUBLISH
 * from any master reaches it. */
Test(sharded, classic_mode_on_a_cluster) {
    hilock_client *a = client(HILOCK_PUBSUB_CLASSIC), *b = client(HILOCK_PUBSUB_CLASSIC);
    got ga = take(a, "classic", NULL), gb = {0, 0, NULL, 0};
    cr_assert_eq(ga.status, 0);
    cr_assert_eq(hilock_acquire(b, "classic", NULL, got_cb, &gb, NULL), 0);
    long long t0 = test_now_ms();
    while (subscribed_nodes("classic", 1) == 0 && test_now_ms() - t0 < 3000) test_loop_for(e.base, 20);
    cr_expect_eq(subscribed_nodes("classic", 1), 1);
    cr_expect_eq(subscribed_nodes("classic", 0), 0, "sharded in classic mode");
    release_wakes(b, ga.hold, &gb);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* A waiter's sharded subscription follows its slot: when the slot is given
 * to another master, the old one ends the subscription (sunsubscribe), the
 * client subscribes on the new owner (after a MOVED if its map is stale),
 * and the release still wakes the waiter at once. */
Test(sharded, subscription_follows_its_migrated_slot) {
    const char *name = "mover";
    char slot[8], lock[64], fence[80], src_id[64], dst_id[64], dst_port[16];
    snprintf(slot, sizeof(slot), "%u", cluster_slot_of(name));
    hilock_key("hilock:", name, lock, sizeof(lock));
    snprintf(fence, sizeof(fence), "%s:fence", lock);
    test_redis *src = test_cluster_master_of(&e.cl, cluster_slot_of(name));
    test_redis *dst = cluster_other_master(&e.cl, src);
    cr_assert(src && dst);
    cluster_node_id(src, src_id, sizeof(src_id));
    cluster_node_id(dst, dst_id, sizeof(dst_id));
    snprintf(dst_port, sizeof(dst_port), "%d", dst->port);

    hilock_client *a = client(HILOCK_PUBSUB_AUTO), *b = client(HILOCK_PUBSUB_AUTO);
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 3000;
    got ga = take(a, name, &o), gb = {0, 0, NULL, 0};
    cr_assert_eq(ga.status, 0);
    cr_assert_eq(hilock_acquire(b, name, NULL, got_cb, &gb, NULL), 0);
    cr_assert(until_subscribed(src, name, 0, 3000), "not subscribed on the slot's master");

    cr_assert(cluster_run_on(dst, "CLUSTER SETSLOT %s IMPORTING %s", slot, src_id));
    cr_assert(cluster_run_on(src, "CLUSTER SETSLOT %s MIGRATING %s", slot, dst_id));
    redisContext *k = test_redis_connect(src);
    redisReply *rep = redisCommand(k, "MIGRATE 127.0.0.1 %s %s 0 5000 KEYS %s %s", dst_port, "", lock, fence);
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "MIGRATE: %s", rep && rep->str ? rep->str : "?");
    freeReplyObject(rep);
    redisFree(k);
    cluster_slot_to(&e.cl, slot, dst_id);
    cr_expect(until_subscribed(dst, name, 0, 3000), "the subscription did not follow the slot");
    cr_expect(!cluster_subscribed_on(src, name, 0), "still subscribed on the old master");
    cr_expect_eq(gb.calls, 0, "granted while held");
    release_wakes(b, ga.hold, &gb);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* `redis-cli --cluster reshard` moves the first 48 slots of a master to
 * another while two clients contend for 4 names in those slots: exclusion
 * holds, fences grow, every wait ends, the subscriptions end up on the new
 * master. */
Test(sharded, reshard_by_redis_cli_under_contention) {
    test_redis *src = test_cluster_master_of(&e.cl, 0), *dst = cluster_other_master(&e.cl, src);
    char names[4][32];
    hilock_client *a = client(HILOCK_PUBSUB_AUTO), *b = client(HILOCK_PUBSUB_AUTO);
    shared s;
    cluster_reshard_contended(&e, src, dst, a, b, "rs", names, &s);
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(test_cluster_master_of(&e.cl, cluster_slot_of(names[i])), dst, "%s did not move", names[i]);
        got g = take(a, names[i], NULL), w = {0, 0, NULL, 0};
        cr_assert_eq(g.status, 0);
        cr_assert_eq(hilock_acquire(b, names[i], NULL, got_cb, &w, NULL), 0);
        cr_expect(until_subscribed(dst, names[i], 0, 3000), "%s not subscribed on the new master", names[i]);
        release_wakes(b, g.hold, &w);
    }
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Credentials ------------------------------------------------------------ */

/* An ACL user on every node: commands, the map, and the sharded
 * subscriptions all authenticate; a wrong password is HILOCK_EAUTH; a
 * database other than 0 is refused (SELECT fails in cluster mode). */
Test(sharded, acl_user_on_every_node) {
    /* The default user (what a connection is before AUTH) may subscribe to
     * nothing: a subscriber that skipped AUTH would be refused. */
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) {
        cr_assert(cluster_run_on(&e.cl.node[i], "ACL SETUSER locker on >s3cret ~hilock:* &hilock:* +@all",
                                 NULL, NULL));
        cr_assert(cluster_run_on(&e.cl.node[i], "ACL SETUSER default resetchannels", NULL, NULL));
    }
    char url[128], bad[128], db[128];
    snprintf(url, sizeof(url), "redis://locker:s3cret@127.0.0.1:%d", e.cl.node[0].port);
    snprintf(bad, sizeof(bad), "redis://locker:wrong@127.0.0.1:%d", e.cl.node[0].port);
    snprintf(db, sizeof(db), "redis://127.0.0.1:%d/2", e.cl.node[0].port);
    hilock_config cfg;
    cluster_config(&cfg, url);
    hilock_client *a = cluster_client_cfg(&e, &cfg), *b = cluster_client_cfg(&e, &cfg);
    for (int i = 0; i < 3; i++) { /* names on every master */
        char name[16];
        snprintf(name, sizeof(name), "acl-%d", i);
        got ga = take(a, name, NULL), gb = {0, 0, NULL, 0};
        cr_assert_eq(ga.status, 0, "%s (%s)", hilock_strerror(ga.status), hilock_client_errstr(a));
        cr_assert_eq(hilock_acquire(b, name, NULL, got_cb, &gb, NULL), 0);
        test_redis *m = test_cluster_master_of(&e.cl, cluster_slot_of(name));
        cr_expect(until_subscribed(m, name, 0, 3000), "%s: the subscriber did not authenticate", name);
        release_wakes(b, ga.hold, &gb);
    }
    cluster_config(&cfg, bad);
    hilock_client *c = cluster_client_cfg(&e, &cfg);
    got g = take(c, "acl-0", NULL);
    cr_expect_eq(g.status, HILOCK_EAUTH, "%s", hilock_strerror(g.status));
    hilock_client_free(c);
    cluster_config(&cfg, db);
    c = cluster_client_cfg(&e, &cfg);
    g = take(c, "acl-0", NULL);
    cr_expect_eq(g.status, HILOCK_EREPLY, "%s", hilock_strerror(g.status));
    cr_expect(strstr(hilock_client_errstr(c), "SELECT") != NULL, "%s", hilock_client_errstr(c));
    hilock_client_free(c);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- WAIT ---------------------------------------------------------------- */

/* WAIT's timeout is generous: a busy 2-core machine delays the replica's
 * acknowledgement, and a refusal is only a refusal after it. */
static hilock_client *waiting_client(uint32_t replicas, uint32_t timeout_ms) {
    hilock_config cfg;
    cluster_config(&cfg, e.cl.url);
    cfg.wait_replicas = replicas;
    cfg.wait_timeout_ms = timeout_ms;
    return cluster_client_cfg(&e, &cfg);
}

/* Each master has one replica: WAIT 1 confirms the lock; WAIT 2 cannot,
 * and the acquire ends with HILOCK_EREPLICAS and leaves no lock behind. */
Test(sharded, wait_for_replicas_after_acquire) {
    hilock_client *one = waiting_client(1, 1000), *two = waiting_client(2, 300);
    got g = take(one, "waited", NULL);
    cr_expect_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(one));
    test_redis *m = test_cluster_master_of(&e.cl, cluster_slot_of("waited"));
    test_redis *r = cluster_replica_of(&e.cl, m);
    cr_assert(r);
    char key[64];
    hilock_key("hilock:", "waited", key, sizeof(key));
    redisContext *k = test_redis_connect(r); /* the replica has it already */
    freeReplyObject(redisCommand(k, "READONLY"));
    redisReply *rep = redisCommand(k, "EXISTS %s", key);
    cr_expect(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1, "not on the replica");
    freeReplyObject(rep);
    redisFree(k);
    if (g.status == 0) cr_expect_eq(give_back(g.hold), 0);

    got g2 = take(two, "waited", NULL);
    cr_expect_eq(g2.status, HILOCK_EREPLICAS, "%s", hilock_strerror(g2.status));
    cr_expect(strstr(hilock_client_errstr(two), "WAIT") != NULL, "%s", hilock_client_errstr(two));
    test_loop_for(e.base, 200);
    cr_expect_eq(test_redis_int(m, "EXISTS %s", key), 0, "the refused lock was left behind");
    /* Others are not blocked by it. */
    got g3 = take(one, "waited", NULL);
    cr_expect_eq(g3.status, 0);
    if (g3.status == 0) cr_expect_eq(give_back(g3.hold), 0);
    hilock_client_free(one);
    hilock_client_free(two);
}

/* A renewal that the replica does not confirm is not a renewal: with the
 * replica stalled, the hold is reported lost when its lease runs out. */
Test(sharded, unconfirmed_renewals_lose_the_hold) {
    hilock_client *c = waiting_client(1, 1000);
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 3000; /* renewed every second, each waiting up to a second */
    lostrec lost = {0, 0, 0};
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got g = take(c, "renewed", &o);
    cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    test_redis *r = cluster_replica_of(&e.cl, test_cluster_master_of(&e.cl, cluster_slot_of("renewed")));
    cr_assert(r);
    test_loop_for(e.base, 2500); /* renewals confirmed while the replica answers */
    cr_expect_eq(lost.calls, 0, "lost while the replica kept up");
    long long t0 = test_now_ms();
    pid_t sleeper = test_redis_debug_sleep(r, "6");
    cr_assert(test_loop_until(e.base, &lost.calls, 6000), "never reported lost");
    cr_expect_eq(lost.why, HILOCK_ELOST, "%s", hilock_strerror(lost.why));
    cr_expect_lt(test_now_ms() - t0, 4500, "lost %lld ms after the stall", test_now_ms() - t0);
    test_wait(sleeper, 8000);
    hilock_release(g.hold, NULL, NULL);
    hilock_client_free(c);
}

/* ---- On one server ------------------------------------------------------- */

static lockenv one;
static void one_setup(void) { lockenv_start(&one); }
static void one_teardown(void) { lockenv_stop(&one); }
TestSuite(pubsub, .init = one_setup, .fini = one_teardown, .timeout = 60);

static hilock_client *one_client(int pubsub, uint32_t replicas) {
    hilock_config cfg;
    lockenv_config(&cfg, one.r.url);
    cfg.pubsub = pubsub;
    cfg.wait_replicas = replicas;
    return lockenv_client_cfg(&one, &cfg);
}

/* A cancel while the try's WAIT is still out (no replica: WAIT runs its
 * whole timeout): one ECANCELED callback, and the lock the script took is
 * not left behind. So does a client freed at that moment. */
Test(pubsub, cancel_and_free_while_wait_is_out) {
    hilock_config cfg;
    lockenv_config(&cfg, one.r.url);
    cfg.wait_replicas = 1;
    cfg.wait_timeout_ms = 300;
    hilock_client *c = lockenv_client_cfg(&one, &cfg);
    got g = {0, 0, NULL, 0};
    hilock_wait *w = NULL;
    cr_assert_eq(hilock_acquire(c, "wait-cancel", NULL, got_cb, &g, &w), 0);
    test_loop_for(one.base, 100); /* the script ran; WAIT is waiting */
    cr_expect_eq(lock_exists(&one.r, "wait-cancel"), 1, "the try has not run yet");
    cr_assert_eq(hilock_wait_cancel(w), 0);
    test_loop_for(one.base, 600);
    cr_expect_eq(g.calls, 1, "%d callbacks", g.calls);
    cr_expect_eq(g.status, HILOCK_ECANCELED, "%s", hilock_strerror(g.status));
    cr_expect_eq(lock_exists(&one.r, "wait-cancel"), 0, "the cancelled try's lock was left behind");

    got g2 = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(c, "wait-free", NULL, got_cb, &g2, NULL), 0);
    test_loop_for(one.base, 100);
    hilock_client_free(c); /* WAIT still out */
    cr_expect_eq(g2.calls, 1, "%d callbacks", g2.calls);
    cr_expect_eq(g2.status, HILOCK_ECANCELED, "%s", hilock_strerror(g2.status));
    test_loop_for(one.base, 400);
}

/* Sharded pub/sub asked for on a single Redis 7: SSUBSCRIBE/SPUBLISH. */
Test(pubsub, sharded_on_one_server) {
    hilock_client *a = one_client(HILOCK_PUBSUB_SHARDED, 0), *b = one_client(HILOCK_PUBSUB_SHARDED, 0);
    got ga = acquire_now(&one, a, "one", NULL), gb = {0, 0, NULL, 0};
    cr_assert_eq(ga.status, 0);
    cr_assert_eq(hilock_acquire(b, "one", NULL, got_cb, &gb, NULL), 0);
    long long t0 = test_now_ms();
    while (!cluster_subscribed_on(&one.r, "one", 0) && test_now_ms() - t0 < 3000) test_loop_for(one.base, 10);
    cr_expect(cluster_subscribed_on(&one.r, "one", 0), "no sharded subscription");
    cr_expect(!cluster_subscribed_on(&one.r, "one", 1), "a classic subscription");
    t0 = test_now_ms();
    cr_expect_eq(release_now(&one, ga.hold), 0);
    cr_assert(test_loop_until(one.base, &gb.calls, 5000));
    cr_expect_eq(gb.status, 0);
    cr_expect_lt(gb.at_ms - t0, 1000, "woken %lld ms after the release", gb.at_ms - t0);
    if (gb.status == 0) release_now(&one, gb.hold);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* No replica at all: WAIT 1 cannot be met; the lock is not left behind. */
Test(pubsub, wait_without_replicas) {
    hilock_client *c = one_client(HILOCK_PUBSUB_AUTO, 1);
    got g = acquire_now(&one, c, "lonely", NULL);
    cr_expect_eq(g.status, HILOCK_EREPLICAS, "%s", hilock_strerror(g.status));
    test_loop_for(one.base, 100);
    cr_expect_eq(lock_exists(&one.r, "lonely"), 0, "the refused lock was left behind");
    hilock_client_free(c);
}

/* Bad settings are refused before anything connects. */
Test(pubsub, settings_are_checked) {
    hilock_config cfg;
    hilock_client *c = NULL;
    lockenv_config(&cfg, one.r.url);
    cfg.pubsub = 3;
    cr_expect_eq(hilock_client_new(&c, &cfg, &one.loop), HILOCK_EINVAL);
    lockenv_config(&cfg, one.r.url);
    cfg.wait_replicas = 65;
    cr_expect_eq(hilock_client_new(&c, &cfg, &one.loop), HILOCK_EINVAL);
    /* A loop filled by hand without the socket watch. */
    hilock_loop partial = one.loop;
    partial.io_new = NULL;
    lockenv_config(&cfg, one.r.url);
    cr_expect_eq(hilock_client_new(&c, &cfg, &partial), HILOCK_EINVAL);
    cr_expect_null(c);
}
