/* Bounded waiting for the mutex on a real Redis Cluster (3 masters, 3
 * replicas): a starving wait holds a place in the queue beside the lock
 * (P{T}:q, P{T}:p, same slot), and the release hands it the lock by
 * message. What a cluster adds: the name's slot migrating step by step
 * while the handoff happens (the release's four keys may be split across
 * the two nodes, or some of them missing, so Redis may answer TRYAGAIN or
 * refuse a command on a key the script itself deleted), a failover of
 * the slot's master while processes starve (the queue must reach the new
 * master and be served there), and a starving process that dies. The
 * invariants: never two holders, fences growing in grant order, every
 * starving wait served, and nothing but the fence left behind. */
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/boundedenv.h"
#include "support/clusterenv.h"

static clusterenv e;

static void setup(void) { clusterenv_start(&e); }
static void teardown(void) { clusterenv_stop(&e); }

TestSuite(bounded_cluster, .init = setup, .fini = teardown, .timeout = 120);

/* Requests that outlive a failover's write pause (up to twice Redis's
 * manual failover timeout when the first CLUSTER FAILOVER does not
 * complete), as tests/cluster/failover.c's patient clients. */
#define PATIENT_MS 15000

/* A client seeded at `url` whose waits starve after starve_ms. */
static hilock_client *starving_client(const char *url, uint32_t starve_ms) {
    hilock_config cfg;
    cluster_config(&cfg, url);
    cfg.starve_ms = starve_ms;
    cfg.request_timeout_ms = PATIENT_MS;
    return cluster_client_cfg(&e, &cfg);
}

/* A wait for `name` with no end and a lease of lease_ms, told to *g. */
static void start(const bounded_kind *k, hilock_client *c, const char *name, uint32_t lease_ms, got *g) {
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, lease_ms);
    memset(g, 0, sizeof(*g));
    cr_assert_eq(k->acquire(c, name, &o, got_cb, g, NULL), 0);
}

/* `name` held by c with a lease of lease_ms. */
static got held(const bounded_kind *k, hilock_client *c, const char *name, uint32_t lease_ms) {
    got g;
    start(k, c, name, lease_ms, &g);
    cr_assert(test_loop_until(e.base, &g.calls, 10000), "%s: never granted", name);
    cr_assert_eq(g.status, 0, "%s: %s (%s)", name, hilock_strerror(g.status), hilock_client_errstr(c));
    return g;
}

/* A command on `key` run where the key is: on r, after ASKING (a node
 * whose slot is importing answers only then). Its integer reply, or -1. */
static long long asking_int(test_redis *r, const char *fmt, const char *key) {
    redisContext *k = test_redis_connect(r);
    cr_assert_not_null(k);
    freeReplyObject(redisCommand(k, "ASKING"));
    redisReply *rep = redisCommand(k, fmt, key);
    long long v = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
    if (rep) freeReplyObject(rep);
    redisFree(k);
    return v;
}

/* MIGRATE, in one command, those of keys[0..n) that src has in m's slot
 * (so that no script sees one half of them moved). Returns how many. */
static size_t migrate_keys(const cluster_migration *m, const char *const *keys, size_t n) {
    char port[16];
    snprintf(port, sizeof(port), "%d", m->dst->port);
    const char *argv[120];
    size_t len[120];
    int argc = 0;
    const char *head[] = {"MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS"};
    for (int i = 0; i < 7; i++) { argv[argc] = head[i]; len[argc++] = strlen(head[i]); }
    size_t moved = 0;
    for (size_t i = 0; i < n && argc < 120; i++) {
        if (!cluster_slot_has(m->src, m->slot, keys[i])) continue;
        argv[argc] = keys[i];
        len[argc++] = strlen(keys[i]);
        moved++;
    }
    if (moved == 0) return 0;
    redisContext *k = test_redis_connect(m->src);
    cr_assert_not_null(k);
    redisReply *rep = redisCommandArgv(k, argc, argv, len);
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "MIGRATE: %s", rep && rep->str ? rep->str : "?");
    freeReplyObject(rep);
    redisFree(k);
    return moved;
}

/* Every key src still has in m's slot. */
static size_t migrate_rest(const cluster_migration *m) {
    redisReply *keys = test_redis_cmd(m->src, "CLUSTER GETKEYSINSLOT %s 100", m->slot);
    cr_assert(keys && keys->type == REDIS_REPLY_ARRAY);
    const char *names[100];
    size_t n = 0;
    for (size_t i = 0; i < keys->elements && n < 100; i++) names[n++] = keys->element[i]->str;
    size_t moved = migrate_keys(m, names, n);
    freeReplyObject(keys);
    return moved;
}

/* The rest of the keys go to dst, and the slot is dst's. */
static void migration_end(const cluster_migration *m) {
    migrate_rest(m);
    cluster_slot_to(&e.cl, m->slot, m->dst_id);
}

/* ---- 1. The handoff while the slot migrates -------------------------------- */

/* Where the name's keys are when the holder releases: all on src, the
 * lock (and its fence) on dst with the queue on src, the queue (and its
 * clients) on dst with the lock on src, all on dst. */
enum part { KEYS_ON_SRC, LOCK_MOVED, QUEUE_MOVED, ALL_MOVED };

static const char *part_name[] = {"keys on src", "lock moved", "queue moved", "keys on dst"};

/* A release that can run in one script (all four keys on one side)
 * hands the lock over in the middle of the migration; one that is
 * answered TRYAGAIN (the keys split) frees the lock alone, and the
 * starving wait's tries, which declare the four keys, are answered
 * TRYAGAIN too until the slot has moved. The write lock's handover and
 * tries declare the readers' key as well, which is missing while a writer
 * holds: nothing of them runs mid-migration. */
static int runs_mid_migration(const bounded_kind *k, enum part p) {
    return k->marker == NULL && (p == KEYS_ON_SRC || p == ALL_MOVED);
}

/* a holds `name` (a lease of 3 s: its renewals cross the migration);
 * `waiters` clients (1 or 2) wait for it, each starving after 30 ms and
 * taking its place in turn. The slot migrates (MIGRATING/IMPORTING) and
 * the keys are put as `p` says; a releases. Then: a's release succeeds;
 * the first waiter is granted, while no one else holds, with a fence
 * above a's, within 3 s (the mutex mid-migration with the keys on src, where the
 * scripts and the grant's message run; else once the slot has moved, at
 * the latest); its grant is claimed; each later waiter is granted after
 * the one before released, as bound; no lock stays; and once the slot has
 * moved a new acquire is served. */
static void handoff_mid_migration(const bounded_kind *k, const char *name, enum part p, int waiters) {
    hilock_client *a = starving_client(e.cl.url, 30);
    hilock_client *w[2] = {starving_client(e.cl.node[3].url, 30), starving_client(e.cl.url, 30)};
    cluster_migration m;
    cluster_migration_of(&e, name, &m);
    const char *what = part_name[p];
    char lock[300], q[300], pk[300], fence[300], marker[300];
    snprintf(lock, sizeof(lock), "%s", prim_key(name, k->lock));
    snprintf(q, sizeof(q), "%s", prim_key(name, k->queue));
    snprintf(pk, sizeof(pk), "%s", prim_key(name, k->procs));
    snprintf(fence, sizeof(fence), "%s", prim_key(name, k->fence));
    snprintf(marker, sizeof(marker), "%s", k->marker ? prim_key(name, k->marker) : "");

    got ga = held(k, a, name, 3000), gw[2];
    for (int i = 0; i < waiters; i++) {
        start(k, w[i], name, 10000, &gw[i]);
        long long until = test_now_ms() + 3000;
        while (test_redis_int(m.src, "ZCARD %s", q) < i + 1 && test_now_ms() < until) test_loop_for(e.base, 10);
        cr_assert_eq(test_redis_int(m.src, "ZCARD %s", q), i + 1, "%s: waiter %d took no place", what, i);
    }
    test_loop_for(e.base, 100);
    for (int i = 0; i < waiters; i++) cr_assert_eq(gw[i].calls, 0, "%s: waiter %d granted while held", what, i);
    cr_expect(bounded_marked(m.src, k, name), "%s: the lock is not marked", what);

    cluster_migration_begin(&m);
    const char *lock_keys[] = {lock, fence}, *queue_keys[] = {q, pk, marker};
    size_t nqueue = k->marker ? 3 : 2;
    if (p == LOCK_MOVED) cr_assert_eq(migrate_keys(&m, lock_keys, 2), 2);
    if (p == QUEUE_MOVED) cr_assert_eq(migrate_keys(&m, queue_keys, nqueue), nqueue);
    if (p == ALL_MOVED) cr_assert_geq(migrate_rest(&m), 4);
    test_loop_for(e.base, 1200); /* a renewal (every 1 s) and the waiters' refreshes meet the half-moved slot */
    for (int i = 0; i < waiters; i++)
        cr_assert_eq(gw[i].calls, 0, "%s: waiter %d granted while held (%s)", what, i, hilock_strerror(gw[i].status));
    cr_expect_eq(hilock_hold_lost(ga.hold), 0, "%s: the holder lost the lock", what);

    rel ra = {0, 0};
    long long t0 = test_now_ms();
    uint64_t last = hilock_hold_fence(ga.hold); /* (a hold is freed by its release) */
    cr_assert_eq(hilock_release(ga.hold, rel_cb, &ra), 0);
    cr_assert(test_loop_until(e.base, &ra.calls, 3000), "%s: the release did not end", what);
    cr_expect_eq(ra.status, 0, "%s: the release: %s (%s)", what, hilock_strerror(ra.status), hilock_client_errstr(a));
    int moved = 0;
    if (!runs_mid_migration(k, p)) { /* served once the slot has moved: let it stay half moved a while */
        test_loop_for(e.base, 700);
        cr_expect_eq(gw[0].calls, 0, "%s: granted on a half-moved slot", what);
        t0 = test_now_ms();
        migration_end(&m);
        moved = 1;
    }
    for (int i = 0; i < waiters; i++) {
        /* Keys on dst: the release (or the last holder's) granted there by
         * message, where the waiter does not listen (sharded pub/sub: it
         * listens on src), and its tries follow ASK, which finds its grant
         * while the queue has someone left, but is answered TRYAGAIN once
         * the grant emptied it (the queue and the clients' key are missing
         * beside the lock): the grant lapses, and the waiter is served when
         * the slot has moved (docs/cluster.md, "Resharding"). */
        if (!moved && p == ALL_MOVED && !test_loop_until(e.base, &gw[i].calls, 1500)) {
            cr_log_info("bounded_cluster (%s): waiter %d not served on the half-moved slot", what, i);
            t0 = test_now_ms();
            migration_end(&m);
            moved = 1;
        }
        cr_assert(test_loop_until(e.base, &gw[i].calls, 3000), "%s: waiter %d not served within 3 s (%s)", what, i,
                  hilock_client_errstr(w[i]));
        cr_assert_eq(gw[i].status, 0, "%s: waiter %d: %s (%s)", what, i, hilock_strerror(gw[i].status),
                     hilock_client_errstr(w[i]));
        cr_log_info("bounded_cluster (%s): waiter %d served %lld ms after the %s", what, i, gw[i].at_ms - t0,
                    moved ? "slot moved" : "release");
        for (int j = i + 1; j < waiters; j++) cr_expect_eq(gw[j].calls, 0, "%s: waiters %d and %d both hold", what, i, j);
        cr_expect_gt(hilock_hold_fence(gw[i].hold), last, "%s: waiter %d's fence is not above the last", what, i);
        last = hilock_hold_fence(gw[i].hold);
        /* The claim: the grant's 1 s window becomes its 10 s lease (the
         * watchdog renews a third of the window in; a loaded machine may
         * take longer, but not the whole window). */
        long long ttl = -1;
        while (ttl <= 5000 && test_now_ms() - gw[i].at_ms < 900) {
            test_loop_for(e.base, 50);
            test_redis *at = cluster_slot_has(m.src, m.slot, lock) ? m.src : m.dst;
            ttl = asking_int(at, "PTTL %s", lock);
        }
        cr_expect_gt(ttl, 5000, "%s: waiter %d's grant was not claimed (%lld ms left)", what, i, ttl);
        cr_expect_eq(hilock_hold_lost(gw[i].hold), 0, "%s: waiter %d lost the lock", what, i);
        rel rw = {0, 0};
        t0 = test_now_ms();
        cr_assert_eq(hilock_release(gw[i].hold, rel_cb, &rw), 0);
        cr_assert(test_loop_until(e.base, &rw.calls, 3000), "%s: waiter %d's release did not end", what, i);
        cr_expect_eq(rw.status, 0, "%s: waiter %d's release: %s (%s)", what, i, hilock_strerror(rw.status),
                     hilock_client_errstr(w[i]));
    }
    test_loop_for(e.base, 100);
    cr_expect(!cluster_slot_has(m.src, m.slot, lock) && !cluster_slot_has(m.dst, m.slot, lock), "%s: a lock left behind", what);
    cr_expect(!cluster_slot_has(m.src, m.slot, q) && !cluster_slot_has(m.dst, m.slot, q), "%s: a place left behind", what);

    if (!moved) migration_end(&m);
    test_loop_for(e.base, 200);
    got g = acquire_loop_with(e.base, k->acquire, a, name, NULL, 10000);
    cr_expect_eq(g.status, 0, "%s: an acquire after the migration: %s (%s)", what, hilock_strerror(g.status),
                 hilock_client_errstr(a));
    if (g.status == 0) {
        cr_expect_gt(hilock_hold_fence(g.hold), last, "%s: the fence went back after the migration", what);
        cr_expect_eq(cluster_give_back(&e, g.hold), 0);
    }
    test_loop_for(e.base, 100);
    char left[256];
    cr_expect_eq(cluster_leftovers(m.dst, m.slot, left, sizeof(left)), 0, "%s: %s left behind", what, left);
    cr_expect_eq(cluster_leftovers(m.src, m.slot, left, sizeof(left)), 0, "%s: %s left on the old master", what, left);
    hilock_client_free(a);
    hilock_client_free(w[0]);
    hilock_client_free(w[1]);
}

Test(bounded_cluster, a_starving_wait_is_handed_the_lock_mid_migration) {
    handoff_mid_migration(&bounded_mutex, "bm-src", KEYS_ON_SRC, 1);
}

/* The keys all on dst: the release follows ASK and grants there, where
 * the waiter does not listen (sharded pub/sub: it listens on src); it is
 * served once the slot has moved, or sooner by its own try (see
 * handoff_mid_migration). */
Test(bounded_cluster, a_starving_wait_is_handed_the_lock_with_its_keys_moved) {
    handoff_mid_migration(&bounded_mutex, "bm-dst", ALL_MOVED, 1);
}

Test(bounded_cluster, a_starving_wait_is_handed_the_lock_on_a_half_moved_slot) {
    handoff_mid_migration(&bounded_mutex, "bh-lock", LOCK_MOVED, 1);
    handoff_mid_migration(&bounded_mutex, "bh-queue", QUEUE_MOVED, 1);
}

/* Two starving waiters: the first handoff leaves one in the queue, the
 * second empties it, each in the middle of the migration. */
Test(bounded_cluster, two_starving_waits_are_handed_the_lock_mid_migration) {
    handoff_mid_migration(&bounded_mutex, "b2-dst", ALL_MOVED, 2);
    handoff_mid_migration(&bounded_mutex, "b2-src", KEYS_ON_SRC, 2);
}

/* The write lock's starving writers, on the same migrations: two handoffs
 * with the keys on src, one on a half-moved slot (its queue and marker
 * moved, the writer not). */
Test(bounded_cluster, starving_writers_are_handed_the_lock_mid_migration) {
    handoff_mid_migration(&bounded_write, "bw-src", KEYS_ON_SRC, 2);
    handoff_mid_migration(&bounded_write, "bw-queue", QUEUE_MOVED, 1);
}

/* ---- 2. Starving processes through a failover ------------------------------ */

#define WCLIENTS 4
#define WPER 2
#define WAITS (WCLIENTS * WPER)

/* The books of one name's holders: one at a time, fences growing in the
 * order of the grants, the order of service. A hold whose grant lapsed
 * (its claim held back past the 1 s window by a failover's write pause:
 * docs/primitives.md, "A short claim window") is reported lost and its release says
 * HILOCK_ELOST: counted apart, and a grant that comes while the last
 * holder's hold is lost by the library's own clock is no overlap. */
typedef struct link link_t;

typedef struct chain {
    struct event_base *base;
    int inside, overlaps, regressions, served, errors, first_error, released, lapsed;
    int order[WAITS];
    unsigned long long last_fence;
    int hold_ms;
    link_t *cur; /* the last holder, until it releases */
} chain;

struct link {
    chain *ch;
    int client;
    hilock_hold *h;
    int calls;
};

static void link_released(int status, void *data) {
    link_t *l = data;
    l->ch->released++;
    if (status == HILOCK_ELOST) l->ch->lapsed++;
    else if (status != 0 && l->ch->errors++ == 0) l->ch->first_error = status;
}

static void link_release(evutil_socket_t fd, short what, void *data) {
    link_t *l = data;
    (void)fd;
    (void)what;
    l->ch->inside--;
    if (l->ch->cur == l) l->ch->cur = NULL;
    if (hilock_release(l->h, link_released, l) != 0) {
        l->ch->errors++;
        l->ch->released++;
    }
}

static void link_granted(hilock_hold *h, int status, void *data) {
    link_t *l = data;
    chain *ch = l->ch;
    l->calls++;
    if (status != 0) {
        if (ch->errors++ == 0) ch->first_error = status;
        ch->released++;
        return;
    }
    if (ch->inside++ && ch->cur && !hilock_hold_lost(ch->cur->h)) ch->overlaps++;
    if (hilock_hold_fence(h) <= ch->last_fence) ch->regressions++;
    ch->last_fence = hilock_hold_fence(h);
    if (ch->served < WAITS) ch->order[ch->served] = l->client;
    ch->served++;
    l->h = h;
    ch->cur = l;
    struct timeval tv = {0, ch->hold_ms * 1000};
    event_base_once(ch->base, -1, EV_TIMEOUT, link_release, l, &tv);
}

/* CLUSTER FAILOVER on a replica of the master of `slot` (once its link is
 * up: a graceful failover needs it), again every 5 s (a manual failover
 * that timed out does nothing), until that replica is the slot's master.
 * Or (kill) SIGKILL of that master, and the cluster's own failover (node
 * timeout 2 s). Returns the new master. */
static test_redis *fail_over(unsigned slot, int kill) {
    test_redis *m, *r;
    cr_assert(cluster_settled_pair(&e.cl, slot, 20000, &m, &r), "no settled master and replica of slot %u", slot);
    if (kill) test_redis_kill(m);
    long long t0 = test_now_ms(), sent = 0;
    while (test_now_ms() - t0 < 30000) {
        if (test_cluster_master_of(&e.cl, slot) == r) return r;
        if (!kill && (sent == 0 || test_now_ms() - sent > 5000) &&
            test_redis_says(r, "INFO", "master_link_status:up", NULL)) {
            cluster_run_on(r, "CLUSTER FAILOVER", NULL, NULL);
            sent = test_now_ms();
        }
        test_loop_for(e.base, 20);
    }
    cr_assert_fail("slot %u did not fail over to its replica", slot);
    return NULL;
}

/* A holder h, and WCLIENTS clients with WPER waits each on `name`, each
 * client's head starving (20 ms) and taking its place in turn. Then
 * either (mid 0) the replica has every place (WAIT), the slot's master
 * fails over (graceful, or kill -9) and h releases on the new master; or
 * (mid 1) h releases, and the master fails over (graceful) once two
 * waits have been served, the others waiting or holding (900 ms each: a
 * CLUSTER FAILOVER that does not complete is sent again after 5 s).
 * Every wait must be served (the requests outwait the failover) and,
 * unless a failover's write pause held its claim back past the 1 s window
 * (mid 1 only), its release succeed; one holder at a time, fences growing
 * in the order of the grants, each starving client served once before
 * any is served twice (one grant each in turn, when no grant lapsed), and
 * nothing but the fence left. */
static void starving_through_failover(const bounded_kind *bk, const char *name, int kill, int mid) {
    const char *how = kill ? "kill -9" : mid ? "CLUSTER FAILOVER while served" : "CLUSTER FAILOVER";
    unsigned slot = cluster_slot_of(name);
    hilock_client *h = starving_client(e.cl.url, 20), *w[WCLIENTS];
    for (int i = 0; i < WCLIENTS; i++) w[i] = starving_client(i % 2 ? e.cl.node[3].url : e.cl.url, 20);
    /* Every client knows the map and the scripts before the fault (a
     * client whose one seed dies before it heard the map knows no other
     * node). */
    for (int i = 0; i <= WCLIENTS; i++) {
        got g = acquire_loop_with(e.base, bk->acquire, i == WCLIENTS ? h : w[i], name, NULL, 10000);
        cr_assert_eq(g.status, 0);
        cr_assert_eq(cluster_give_back(&e, g.hold), 0);
    }
    test_redis *m = test_cluster_master_of(&e.cl, slot);
    cr_assert_not_null(m);
    const char *q = prim_key(name, bk->queue);
    got gh = held(bk, h, name, PATIENT_MS);
    static chain ch;
    static link_t links[WAITS];
    memset(&ch, 0, sizeof(ch));
    ch.base = e.base;
    ch.hold_ms = mid ? 900 : 30;
    for (int i = 0; i < WCLIENTS; i++) {
        hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 10000);
        for (int k = 0; k < WPER; k++) {
            links[i * WPER + k] = (link_t){&ch, i, NULL, 0};
            cr_assert_eq(bk->acquire(w[i], name, &o, link_granted, &links[i * WPER + k], NULL), 0);
        }
        long long until = test_now_ms() + 3000;
        while (test_redis_int(m, "ZCARD %s", q) < i + 1 && test_now_ms() < until) test_loop_for(e.base, 10);
        cr_assert_eq(test_redis_int(m, "ZCARD %s", q), i + 1, "%s: client %d took no place", how, i);
    }
    long long t0 = test_now_ms();
    if (!mid) {
        /* The replica has every place before the fault: WAIT counts the
         * replicas that have this connection's last write, which follows
         * every place (a write of its own, in the name's slot). */
        redisContext *k = test_redis_connect(m);
        cr_assert_not_null(k);
        redisReply *rep = redisCommand(k, "SET %s 1 PX 200", prim_key(name, ":probe"));
        cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "%s: the probe was refused", how);
        freeReplyObject(rep);
        rep = redisCommand(k, "WAIT 1 2000");
        cr_assert(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer >= 1,
                  "%s: the replica did not confirm the places", how);
        freeReplyObject(rep);
        redisFree(k);
        test_redis *nm = fail_over(slot, kill);
        cr_log_info("bounded_cluster (%s): the slot's master changed in %lld ms", how, test_now_ms() - t0);
        /* Every client's refresh (at least once a second) reaches the new
         * master and keeps its place alive there. */
        test_loop_for(e.base, 1500);
        cr_expect_eq(ch.served, 0, "%s: %d served while held (first status %s)", how, ch.served,
                     hilock_strerror(ch.first_error));
        cr_expect_eq(hilock_hold_lost(gh.hold), 0, "%s: the holder lost the lock", how);
        cr_expect_eq(test_redis_int(nm, "ZCARD %s", q), WCLIENTS, "%s: places lost with the failover", how);
    }
    rel rh = {0, 0};
    t0 = test_now_ms();
    cr_assert_eq(hilock_release(gh.hold, rel_cb, &rh), 0);
    if (mid) {
        while (ch.served < 2 && test_now_ms() - t0 < 5000) test_loop_for(e.base, 5);
        cr_assert_geq(ch.served, 2, "%s: the waits were not being served", how);
        long long t1 = test_now_ms();
        fail_over(slot, 0);
        cr_log_info("bounded_cluster (%s): the slot's master changed in %lld ms, %d served before", how,
                    test_now_ms() - t1, ch.served);
        cr_expect_lt(ch.served, WAITS, "%s: every wait was served before the failover", how);
    }
    while ((ch.released < WAITS || rh.calls == 0) && test_now_ms() - t0 < 20000) test_loop_for(e.base, 10);
    cr_log_info("bounded_cluster (%s): %d of %d waits served in %lld ms, order %d %d %d %d %d %d %d %d", how,
                ch.served, WAITS, test_now_ms() - t0, ch.order[0], ch.order[1], ch.order[2], ch.order[3],
                ch.order[4], ch.order[5], ch.order[6], ch.order[7]);
    cr_expect_eq(rh.calls, 1, "%s: the holder's release never ended", how);
    cr_expect_eq(rh.status, 0, "%s: the holder's release: %s (%s)", how, hilock_strerror(rh.status),
                 hilock_client_errstr(h));
    cr_expect_eq(ch.served, WAITS, "%s: %d of %d waits served", how, ch.served, WAITS);
    cr_expect_eq(ch.errors, 0, "%s: %d errors, the first %s", how, ch.errors, hilock_strerror(ch.first_error));
    cr_expect_eq(ch.overlaps, 0, "%s: two holders at once", how);
    cr_expect_eq(ch.regressions, 0, "%s: fences out of the order of the grants", how);
    if (ch.lapsed) cr_log_info("bounded_cluster (%s): %d grants lapsed (HILOCK_ELOST)", how, ch.lapsed);
    if (!mid) cr_expect_eq(ch.lapsed, 0, "%s: %d releases said HILOCK_ELOST", how, ch.lapsed);
    int seen[WCLIENTS] = {0}, twice_early = 0;
    for (int i = 0; i < WCLIENTS && i < ch.served; i++)
        if (seen[ch.order[i]]++) twice_early = 1;
    if (ch.lapsed == 0) cr_expect_eq(twice_early, 0, "%s: a client served twice before every starving client was served once", how);
    test_loop_for(e.base, 200);
    char s[8], left[256];
    snprintf(s, sizeof(s), "%u", slot);
    cr_expect_eq(cluster_leftovers(test_cluster_master_of(&e.cl, slot), s, left, sizeof(left)), 0,
                 "%s: %s left behind", how, left);
    got g = acquire_loop_with(e.base, bk->acquire, h, name, NULL, 10000);
    cr_expect_eq(g.status, 0, "%s: an acquire after it all: %s", how, hilock_strerror(g.status));
    if (g.status == 0) {
        cr_expect_gt(hilock_hold_fence(g.hold), ch.last_fence);
        cr_expect_eq(cluster_give_back(&e, g.hold), 0);
    }
    hilock_client_free(h);
    for (int i = 0; i < WCLIENTS; i++) hilock_client_free(w[i]);
}

Test(bounded_cluster, starving_waits_through_a_failover) { starving_through_failover(&bounded_mutex, "bf-graceful", 0, 0); }

Test(bounded_cluster, starving_waits_through_a_master_killed) { starving_through_failover(&bounded_mutex, "bf-killed", 1, 0); }

Test(bounded_cluster, starving_waits_served_through_a_failover) { starving_through_failover(&bounded_mutex, "bf-served", 0, 1); }

Test(bounded_cluster, starving_writers_through_a_master_killed) {
    starving_through_failover(&bounded_write, "bfw-killed", 1, 0);
}

Test(bounded_cluster, starving_writers_served_through_a_failover) {
    starving_through_failover(&bounded_write, "bfw-served", 0, 1);
}

/* ---- 3. A starving process killed ------------------------------------------- */

/* A child whose wait on `name` starves (20 ms) and takes its place, then
 * stays until killed. */
static pid_t starving_child(const bounded_kind *k, atomic_int *placed, const char *name) {
    fflush(NULL);
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid != 0) return kid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct event_base *base = event_base_new(); /* libevent's state is not shared across fork */
    hilock_loop loop;
    hilock_libevent_init(&loop, base);
    hilock_config cfg;
    cluster_config(&cfg, e.cl.url);
    cfg.starve_ms = 20;
    hilock_client *c = NULL;
    if (hilock_client_new(&c, &cfg, &loop) != 0) _exit(3);
    got g;
    memset(&g, 0, sizeof(g));
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 10000);
    if (k->acquire(c, name, &o, got_cb, &g, NULL) != 0) _exit(4);
    test_loop_for(base, 300);
    atomic_store(placed, 1);
    test_loop_for(base, 30000);
    _exit(2);
}

/* The starving process at the head of the queue is SIGKILLed: the
 * release hands it the lock, the grant lapses after its 1 s claim window,
 * and the live starving wait behind it has the lock then, not at a lease
 * or at the dead process's 5 s of silence. */
static void starving_process_killed(const bounded_kind *k, const char *name) {
    unsigned slot = cluster_slot_of(name);
    atomic_int *placed = mmap(NULL, sizeof(*placed), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(placed, MAP_FAILED);
    atomic_store(placed, 0);
    hilock_client *h = starving_client(e.cl.url, 20), *c = starving_client(e.cl.node[3].url, 20);
    test_redis *m = test_cluster_master_of(&e.cl, slot);
    cr_assert_not_null(m);
    const char *q = prim_key(name, k->queue);
    got gh = held(k, h, name, 10000), g;
    pid_t kid = starving_child(k, placed, name);
    long long until = test_now_ms() + 5000;
    while ((!atomic_load(placed) || test_redis_int(m, "ZCARD %s", q) < 1) && test_now_ms() < until) test_msleep(5);
    cr_assert_eq(test_redis_int(m, "ZCARD %s", q), 1, "the child took no place");
    start(k, c, name, 10000, &g);
    until = test_now_ms() + 3000;
    while (test_redis_int(m, "ZCARD %s", q) < 2 && test_now_ms() < until) test_loop_for(e.base, 10);
    cr_assert_eq(test_redis_int(m, "ZCARD %s", q), 2, "the live wait took no place");
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    long long t0 = test_now_ms();
    uint64_t fh = hilock_hold_fence(gh.hold); /* (a hold is freed by its release) */
    cr_assert_eq(cluster_give_back(&e, gh.hold), 0);
    cr_assert(test_loop_until(e.base, &g.calls, 5000), "never granted");
    cr_expect_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    long long took = g.at_ms - t0;
    cr_log_info("bounded_cluster: the wait behind a dead starving process granted %lld ms after the release", took);
    cr_expect(took >= 900 && took < 2600, "granted %lld ms after the release", took);
    if (g.status == 0) {
        cr_expect_gt(hilock_hold_fence(g.hold), fh);
        cr_expect_eq(cluster_give_back(&e, g.hold), 0);
    }
    test_loop_for(e.base, 100);
    char s[8], left[256];
    snprintf(s, sizeof(s), "%u", slot);
    cr_expect_eq(cluster_leftovers(m, s, left, sizeof(left)), 0, "%s left behind", left);
    hilock_client_free(h);
    hilock_client_free(c);
    munmap(placed, sizeof(*placed));
}

Test(bounded_cluster, a_starving_process_killed_mid_queue_on_a_cluster) { starving_process_killed(&bounded_mutex, "bk-dead"); }

Test(bounded_cluster, a_starving_writer_killed_mid_queue_on_a_cluster) { starving_process_killed(&bounded_write, "bkw-dead"); }
