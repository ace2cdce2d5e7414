/* The semaphore, the read-write lock and the fair lock on a Redis Cluster
 * while the topology moves under a held name with a waiter: a slot
 * migrated step by step (MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE). A
 * holder must keep its hold through the migration (its renewals are not
 * stalled by TRYAGAIN), the waiter must be served once the slot has moved,
 * and nothing but the fence keys may be left behind. */
#include <unistd.h>
#include "support/clusterenv.h"

static clusterenv e;

static void setup(void) { clusterenv_start(&e); }
static void teardown(void) { clusterenv_stop(&e); }

TestSuite(topo_attack, .init = setup, .fini = teardown, .timeout = 120);

enum kind { K_READ, K_WRITE, K_SEM, K_FAIR };

static const char *kind_name[] = {"read", "write", "semaphore", "fair"};

/* One acquire of `kind` (a semaphore of 1 permit: a second holder waits). */
static void start(enum kind k, hilock_client *c, const char *name, const hilock_acquire_opts *o, got *g) {
    int rc = -1;
    switch (k) {
    case K_READ: rc = hilock_read_acquire(c, name, o, got_cb, g, NULL); break;
    case K_WRITE: rc = hilock_write_acquire(c, name, o, got_cb, g, NULL); break;
    case K_SEM: rc = hilock_semaphore_acquire(c, name, 1, 1, o, got_cb, g, NULL); break;
    case K_FAIR: rc = hilock_fair_acquire(c, name, o, got_cb, g, NULL); break;
    }
    cr_assert_eq(rc, 0, "%s acquire of %s: %s", kind_name[k], name, hilock_strerror(rc));
}

/* MIGRATE every key that `src` holds in `slot` to dst, in one command
 * (so no script sees them split). Returns how many moved. */
static size_t migrate_slot_keys(test_redis *src, test_redis *dst, const char *slot) {
    redisContext *k = test_redis_connect(src);
    cr_assert_not_null(k);
    redisReply *keys = redisCommand(k, "CLUSTER GETKEYSINSLOT %s 100", slot);
    cr_assert(keys && keys->type == REDIS_REPLY_ARRAY);
    size_t n = keys->elements;
    if (n > 0) {
        char port[16];
        snprintf(port, sizeof(port), "%d", dst->port);
        const char *argv[120];
        size_t len[120];
        int argc = 0;
        const char *head[] = {"MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS"};
        for (int i = 0; i < 7; i++) { argv[argc] = head[i]; len[argc++] = strlen(head[i]); }
        for (size_t i = 0; i < n; i++) { argv[argc] = keys->element[i]->str; len[argc++] = keys->element[i]->len; }
        redisReply *rep = redisCommandArgv(k, argc, argv, len);
        cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "MIGRATE: %s", rep && rep->str ? rep->str : "?");
        freeReplyObject(rep);
    }
    freeReplyObject(keys);
    redisFree(k);
    return n;
}

/* Keys of `slot` on r that are neither fence keys (they outlive locks by
 * design) nor the fair lock's processes (a sorted set that lives 5 s past
 * its client's last word). */
static int leftovers(test_redis *r, const char *slot, char *first, size_t n) {
    redisReply *keys = test_redis_cmd(r, "CLUSTER GETKEYSINSLOT %s 100", slot);
    int left = 0;
    first[0] = 0;
    for (size_t i = 0; keys && keys->type == REDIS_REPLY_ARRAY && i < keys->elements; i++) {
        const char *key = keys->element[i]->str;
        size_t len = strlen(key);
        if ((len >= 5 && strcmp(key + len - 5, "fence") == 0) || (len >= 4 && strcmp(key + len - 4, ":rwf") == 0) ||
            (len >= 7 && strcmp(key + len - 7, ":fair:p") == 0))
            continue;
        if (left++ == 0) snprintf(first, n, "%s", key);
    }
    if (keys) freeReplyObject(keys);
    return left;
}

/* `name` of `kind`, held by a (a lease of 1500 ms, renewed every 500 ms)
 * and awaited by b, has its slot migrated step by step: 1.7 s with the
 * slot MIGRATING/IMPORTING and the keys still on src, then 1.7 s with the
 * keys on dst (ASK), then the slot is dst's. The hold must live through it
 * all, the waiter must not be served while a holds, and must be served once
 * a releases; no key but the fences is left at the end. */
static void migrate_held(enum kind k, const char *name) {
    hilock_client *a, *b;
    cluster_client_pair(&e.cl, &e.loop, &a, &b);
    char slot[8], src_id[64], dst_id[64], left[256];
    unsigned s = cluster_slot_of(name);
    snprintf(slot, sizeof(slot), "%u", s);
    test_redis *src = test_cluster_master_of(&e.cl, s), *dst = cluster_other_master(&e.cl, src);
    cr_assert(src && dst);
    cluster_node_id(src, src_id, sizeof(src_id));
    cluster_node_id(dst, dst_id, sizeof(dst_id));

    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 1500;
    lostrec lost = {0, 0, 0};
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = {0, 0, NULL, 0}, gb = {0, 0, NULL, 0};
    start(k, a, name, &o, &ga);
    cr_assert(test_loop_until(e.base, &ga.calls, 10000));
    cr_assert_eq(ga.status, 0, "%s: %s (%s)", kind_name[k], hilock_strerror(ga.status), hilock_client_errstr(a));
    start(k == K_READ ? K_WRITE : k, b, name, NULL, &gb);
    test_loop_for(e.base, 300);
    cr_assert_eq(gb.calls, 0, "%s: granted while held", kind_name[k]);

    cr_assert(cluster_run_on(dst, "CLUSTER SETSLOT %s IMPORTING %s", slot, src_id));
    cr_assert(cluster_run_on(src, "CLUSTER SETSLOT %s MIGRATING %s", slot, dst_id));
    test_loop_for(e.base, 1700);
    cr_expect_eq(lost.calls, 0, "%s: the hold was lost while its slot was migrating (keys on src)", kind_name[k]);
    cr_expect_eq(gb.calls, 0, "%s: granted while held", kind_name[k]);

    cr_assert_gt(migrate_slot_keys(src, dst, slot), 0);
    test_loop_for(e.base, 1700);
    cr_expect_eq(lost.calls, 0, "%s: the hold was lost while its slot was migrating (keys on dst)", kind_name[k]);
    cr_expect_eq(gb.calls, 0, "%s: granted while held", kind_name[k]);

    cluster_slot_to(&e.cl, slot, dst_id);
    test_loop_for(e.base, 200);
    cr_expect_eq(lost.calls, 0, "%s: the hold was lost after its slot moved", kind_name[k]);
    cr_expect_eq(gb.calls, 0, "%s: granted while held", kind_name[k]);
    if (lost.calls == 0) cr_expect_eq(cluster_give_back(&e, ga.hold), 0, "%s: release", kind_name[k]);
    cr_assert(test_loop_until(e.base, &gb.calls, 5000), "%s: the waiter was not served", kind_name[k]);
    cr_expect_eq(gb.status, 0, "%s: %s (%s)", kind_name[k], hilock_strerror(gb.status), hilock_client_errstr(b));
    if (gb.status == 0) cr_expect_eq(cluster_give_back(&e, gb.hold), 0);
    cr_expect_eq(leftovers(dst, slot, left, sizeof(left)), 0, "%s: %s left behind", kind_name[k], left);
    cr_expect_eq(leftovers(src, slot, left, sizeof(left)), 0, "%s: %s left on the old master", kind_name[k], left);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(topo_attack, a_read_hold_lives_through_a_migration) { migrate_held(K_READ, "tm-read"); }
Test(topo_attack, a_write_hold_lives_through_a_migration) { migrate_held(K_WRITE, "tm-write"); }
Test(topo_attack, a_semaphore_hold_lives_through_a_migration) { migrate_held(K_SEM, "tm-sem"); }
Test(topo_attack, a_fair_hold_lives_through_a_migration) { migrate_held(K_FAIR, "tm-fair"); }
