/* Shared set-up for the Redis Cluster suites: a real 3+3 cluster, a
 * libevent loop, cluster clients, and the operator's moves (a slot
 * migrated step by step, a node's id, its replica). */
#ifndef HILOCK_TEST_CLUSTERENV_H
#define HILOCK_TEST_CLUSTERENV_H

#include <signal.h>
#include <unistd.h>
#include "support/lockenv.h"

typedef struct clusterenv {
    test_cluster cl;
    struct event_base *base;
    hilock_loop loop;
} clusterenv;

static inline void clusterenv_start(clusterenv *e) {
    cr_assert_eq(test_cluster_start(&e->cl), 0, "the cluster did not start");
    e->base = event_base_new();
    hilock_libevent_init(&e->loop, e->base);
}

static inline void clusterenv_stop(clusterenv *e) {
    test_cluster_stop(&e->cl);
    if (e->base) event_base_free(e->base);
    e->base = NULL;
}

/* The config a cluster deployment should use: the request timeout is
 * longer than a failover (about 3 s at node timeout 2000), so requests
 * wait for the new master. */
static inline void cluster_config(hilock_config *cfg, const char *url) {
    hilock_config_init(cfg);
    cfg->url = url;
    cfg->request_timeout_ms = 6000;
    cfg->linger_ms = 100;
}

static inline hilock_client *cluster_client_cfg(clusterenv *e, const hilock_config *cfg) {
    hilock_client *c = NULL;
    cr_assert_eq(hilock_client_new(&c, cfg, &e->loop), 0);
    return c;
}

/* A client seeded at `url` whose requests wait request_timeout_ms (0:
 * cluster_config's), longer than a failover's write pause when a test
 * fails a master over under it. */
static inline hilock_client *cluster_client_within(clusterenv *e, const char *url, uint32_t request_timeout_ms) {
    hilock_config cfg;
    cluster_config(&cfg, url);
    if (request_timeout_ms) cfg.request_timeout_ms = request_timeout_ms;
    return cluster_client_cfg(e, &cfg);
}

/* Two clients of `cl` on `loop`, seeded at different nodes (the first
 * master, and node 3, a replica): what the primitives' cluster tests use. */
static inline void cluster_client_pair(const test_cluster *cl, hilock_loop *loop, hilock_client **a,
                                       hilock_client **b) {
    hilock_config cfg;
    cluster_config(&cfg, cl->url);
    cr_assert_eq(hilock_client_new(a, &cfg, loop), 0);
    cluster_config(&cfg, cl->node[3].url);
    cr_assert_eq(hilock_client_new(b, &cfg, loop), 0);
}

static inline unsigned cluster_slot_of(const char *name) {
    char key[256];
    hilock_key("hilock:", name, key, sizeof(key));
    return hilock_key_slot(key, strlen(key));
}

/* A reply to one command on a fresh connection (caller frees), or NULL. */
static inline redisReply *cluster_cmd(const test_redis *r, const char *fmt, const char *a,
                                      const char *b) {
    redisContext *k = test_redis_connect(r);
    redisReply *rep = k ? redisCommand(k, fmt, a, b) : NULL;
    if (k) redisFree(k);
    return rep;
}

/* Run one command; 1 unless it failed (the error is printed). */
static inline int cluster_run_on(const test_redis *r, const char *fmt, const char *a, const char *b) {
    redisReply *rep = cluster_cmd(r, fmt, a, b);
    int ok = rep && rep->type != REDIS_REPLY_ERROR;
    if (rep && !ok) fprintf(stderr, "%s: %s\n", fmt, rep->str);
    if (rep) freeReplyObject(rep);
    return ok;
}

static inline char *cluster_node_id(const test_redis *r, char *out, size_t n) {
    redisReply *rep = cluster_cmd(r, "CLUSTER MYID", NULL, NULL);
    snprintf(out, n, "%s", rep && rep->type == REDIS_REPLY_STRING ? rep->str : "");
    if (rep) freeReplyObject(rep);
    return out;
}

/* A master other than `not`. */
static inline test_redis *cluster_other_master(test_cluster *cl, const test_redis *not) {
    for (unsigned slot = 0; slot < 16384; slot += 1000) {
        test_redis *m = test_cluster_master_of(cl, slot);
        if (m && m != not) return m;
    }
    return NULL;
}

/* A live replica of `m`: a node whose own line of CLUSTER NODES ("myself")
 * names m's id as its master (by id: a TLS cluster's replicas know their
 * master by its TLS port, the harness by its plain one). NULL if none. */
static inline test_redis *cluster_replica_of(test_cluster *cl, const test_redis *m) {
    char id[64];
    cluster_node_id(m, id, sizeof(id));
    for (int i = 0; i < TEST_CLUSTER_NODES && id[0]; i++) {
        if (&cl->node[i] == m || cl->node[i].pid <= 0) continue;
        redisReply *rep = cluster_cmd(&cl->node[i], "CLUSTER NODES", NULL, NULL);
        const char *me = rep && rep->type == REDIS_REPLY_STRING ? strstr(rep->str, "myself,slave ") : NULL;
        int mine = me && strncmp(me + strlen("myself,slave "), id, strlen(id)) == 0;
        if (rep) freeReplyObject(rep);
        if (mine) return &cl->node[i];
    }
    return NULL;
}

/* The master of `slot` every live node agrees on. */
static inline test_redis *cluster_agreed_master_of(test_cluster *cl, unsigned slot) {
    int agreed = -1;
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) {
        if (cl->node[i].pid <= 0) continue;
        test_cluster one = *cl; /* ask node i alone */
        for (int j = 0; j < TEST_CLUSTER_NODES; j++)
            if (j != i) one.node[j].pid = 0;
        test_redis *m = test_cluster_master_of(&one, slot);
        int at = m ? (int)(m - &one.node[0]) : -1;
        if (at < 0 || (agreed >= 0 && at != agreed)) return NULL;
        agreed = at;
    }
    return agreed >= 0 ? &cl->node[agreed] : NULL;
}

/* The master of `slot` and a replica of it, once the nodes' views have
 * settled: after a failover (a graceful one is often re-sent when it timed
 * out) the nodes disagree for a while, and the old master is first a
 * replica of nobody. Polls for up to `ms`; 0 when they did not settle. */
static inline int cluster_settled_pair(test_cluster *cl, unsigned slot, int ms, test_redis **m,
                                       test_redis **r) {
    long long t0 = test_now_ms();
    do {
        *m = cluster_agreed_master_of(cl, slot);
        *r = *m ? cluster_replica_of(cl, *m) : NULL;
        if (*r) return 1;
        usleep(50 * 1000);
    } while (test_now_ms() - t0 < ms);
    return 0;
}

/* Give `slot` to `dst_id` on every node that takes it (masters). */
static inline void cluster_slot_to(test_cluster *cl, const char *slot, const char *dst_id) {
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) {
        redisReply *rep = cluster_cmd(&cl->node[i], "CLUSTER SETSLOT %s NODE %s", slot, dst_id);
        if (rep) freeReplyObject(rep);
    }
}

/* Does `r` carry a sharded (or, classic = 1, classic) subscription to the
 * channel of lock `name`? */
static inline int cluster_subscribed_on(const test_redis *r, const char *name, int classic) {
    char ch[300];
    hilock_key("hilock:", name, ch, sizeof(ch) - 4);
    strcat(ch, ":ch");
    redisReply *rep = cluster_cmd(r, classic ? "PUBSUB NUMSUB %s" : "PUBSUB SHARDNUMSUB %s", ch, NULL);
    long long n = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 ? rep->element[1]->integer : -1;
    if (rep) freeReplyObject(rep);
    return n > 0;
}

/* One acquire (default options), one release, each run to its callback
 * (10 s: a failover may come between). */
static inline got cluster_take(clusterenv *e, hilock_client *c, const char *name) {
    return acquire_loop(e->base, c, name, NULL, 10000);
}

static inline int cluster_give_back(clusterenv *e, hilock_hold *h) {
    return release_loop(e->base, h, 10000);
}

/* Keys of `slot` on r that are neither fence keys (they outlive locks by
 * design: the mutex's, semaphore's and fair lock's `fence`, the read-write
 * lock's `:rwf`) nor a queue's clients (`:fair:p`, the mutex's `:p`, the
 * write lock's `:rwp`: a
 * sorted set that lives 5 s past its client's last word); the first into
 * `first`. CLUSTER GETKEYSINSLOT: no ASK, whatever the slot's state. */
static inline int cluster_leftovers(test_redis *r, const char *slot, char *first, size_t n) {
    redisReply *keys = test_redis_cmd(r, "CLUSTER GETKEYSINSLOT %s 100", slot);
    int left = 0;
    first[0] = 0;
    for (size_t i = 0; keys && keys->type == REDIS_REPLY_ARRAY && i < keys->elements; i++) {
        const char *key = keys->element[i]->str;
        size_t len = strlen(key);
        if ((len >= 5 && strcmp(key + len - 5, "fence") == 0) || (len >= 4 && strcmp(key + len - 4, ":rwf") == 0) ||
            (len >= 2 && strcmp(key + len - 2, ":p") == 0) || (len >= 4 && strcmp(key + len - 4, ":rwp") == 0))
            continue;
        if (left++ == 0) snprintf(first, n, "%s", key);
    }
    if (keys) freeReplyObject(keys);
    return left;
}

/* A graceful CLUSTER FAILOVER of `slot` from master m to its replica r,
 * once r has every byte of m's (the tests' holds must survive it), asked
 * again every 5 s while r's link is up (a loaded machine lets one lapse:
 * Redis gives up after cluster-manual-failover-timeout), the loop running.
 * 1 when r serves the slot within ms. */
static inline int cluster_fail_over_to(clusterenv *e, unsigned slot, test_redis *m, test_redis *r, int ms) {
    if (!test_redis_caught_up(m, r, 5000)) return 0;
    long long t0 = test_now_ms(), sent = 0;
    while (test_cluster_master_of(&e->cl, slot) != r && test_now_ms() - t0 < ms) {
        if ((sent == 0 || test_now_ms() - sent > 5000) &&
            test_redis_says(r, "INFO replication", "master_link_status:up", NULL)) {
            cluster_run_on(r, "CLUSTER FAILOVER", NULL, NULL);
            sent = test_now_ms();
        }
        test_loop_for(e->base, 20);
    }
    return test_cluster_master_of(&e->cl, slot) == r;
}

/* ---- Contention with the exclusion invariant ------------------------------ */

/* Turns of acquire-hold-release on up to 8 names: two holders of one name
 * at once, or a fence that does not grow, is counted. */
typedef struct shared {
    int inside[8], overlaps, granted, errors, done;
    unsigned long long last[8];
    int regressions;
    unsigned char overlapped[8], regressed[8], lost[8]; /* per name */
    int hold_ms;       /* keep each grant this long (contention) */
    int first_error;
    char first_errstr[256];
    hilock_client *ca; /* whose errstr names the first error */
    struct event_base *base;
} shared;

typedef struct turn {
    shared *s;
    int idx;
    hilock_hold *h;
} turn;

static inline void turn_released(int status, void *data) {
    turn *t = data;
    shared *s = t->s;
    if (status == HILOCK_ELOST) s->lost[t->idx] = 1;
    if (status != 0 && s->errors++ == 0 && s->ca) {
        s->first_error = status;
        snprintf(s->first_errstr, sizeof(s->first_errstr), "release: %s", hilock_client_errstr(s->ca));
    }
    s->done++;
}

static inline void turn_release(evutil_socket_t fd, short what, void *data) {
    turn *t = data;
    (void)fd; (void)what;
    t->s->inside[t->idx]--;
    if (hilock_release(t->h, turn_released, t) != 0) { t->s->errors++; t->s->done++; }
}

static inline void turn_granted(hilock_hold *h, int status, void *data) {
    turn *t = data;
    shared *s = t->s;
    if (status != 0) {
        if (s->errors++ == 0 && s->ca) {
            s->first_error = status;
            snprintf(s->first_errstr, sizeof(s->first_errstr), "%s", hilock_client_errstr(s->ca));
        }
        s->done++;
        return;
    }
    s->granted++;
    if (s->inside[t->idx]++) s->overlaps++, s->overlapped[t->idx] = 1;
    if (hilock_hold_fence(h) <= s->last[t->idx]) s->regressions++, s->regressed[t->idx] = 1;
    s->last[t->idx] = hilock_hold_fence(h);
    t->h = h;
    if (s->hold_ms == 0) { turn_release(-1, 0, t); return; }
    struct timeval tv = {0, s->hold_ms * 1000};
    event_base_once(s->base, -1, EV_TIMEOUT, turn_release, t, &tv);
}

/* `redis-cli --cluster reshard` moves the first 48 slots of `src` to `dst`
 * while clients a and b take turns on 4 names ("STEM-i") in those slots,
 * 400 acquires holding 5 ms each, into *s; the names into names[]. Returns
 * redis-cli's exit status (-1: it did not end within 60 s), and checks the
 * run's books: every wait ended, one holder at a time, fences in order. */
static inline int cluster_reshard_contended(clusterenv *e, test_redis *src, test_redis *dst,
                                            hilock_client *a, hilock_client *b, const char *stem,
                                            char names[4][32], shared *s) {
    static turn turns[400];
    char src_id[64], dst_id[64], from[32], out[256], log[4096];
    cr_assert(src && dst);
    cluster_node_id(src, src_id, sizeof(src_id));
    cluster_node_id(dst, dst_id, sizeof(dst_id));
    for (int i = 0, n = 0; n < 4; i++) { /* names whose slots move */
        snprintf(names[n], 32, "%s-%d", stem, i);
        if (cluster_slot_of(names[n]) < 48) n++;
    }
    memset(s, 0, sizeof(*s));
    s->base = e->base;
    s->hold_ms = 5;
    s->ca = a;
    snprintf(from, sizeof(from), "127.0.0.1:%d", src->port);
    snprintf(out, sizeof(out), "%s/reshard.out", e->cl.node[0].dir);
    char *argv[] = {(char *)test_cli_bin(), "--cluster", "reshard", from, "--cluster-from", src_id,
                    "--cluster-to", dst_id, "--cluster-slots", "48", "--cluster-yes", NULL};
    pid_t pid = -1;
    for (int i = 0; i < 400; i++) {
        turns[i].s = s;
        turns[i].idx = i % 4;
        cr_assert_eq(hilock_acquire(i % 2 ? a : b, names[i % 4], NULL, turn_granted, &turns[i], NULL), 0);
        if (i == 40) {
            test_loop_for(e->base, 20);
            pid = test_spawn(argv, NULL, out, NULL);
        }
    }
    long long t0 = test_now_ms();
    int rc = -1;
    while ((s->done < 400 || rc == -1) && test_now_ms() - t0 < 60000) {
        test_loop_for(e->base, 20);
        if (rc == -1) rc = test_wait(pid, 0);
    }
    cr_expect_eq(rc, 0, "redis-cli --cluster reshard: %d\n%s", rc, test_slurp(out, log, sizeof(log)));
    cr_log_info("reshard under contention: %d granted, %d errors (%s %s), %d overlaps in %lld ms",
                s->granted, s->errors, hilock_strerror(s->first_error), s->first_errstr, s->overlaps,
                test_now_ms() - t0);
    cr_expect_eq(s->done, 400, "%d of 400 ended", s->done);
    cr_expect_eq(s->errors, 0, "%d errors, the first %s: %s", s->errors, hilock_strerror(s->first_error),
                 s->first_errstr);
    cr_expect_eq(s->overlaps, 0, "two holders at once");
    cr_expect_eq(s->regressions, 0, "fences out of order");
    return rc;
}

/* Holders and waiters on names of every master while one master is failed
 * over: the exclusion holds, every waiter ends, and the lock is served by
 * the promoted replica (MOVED from the old master, NOSCRIPT on the new).
 * hard: 0 CLUSTER FAILOVER, 1 kill -9 of the master, 2 kill -9 of the
 * first seed (a master). a and b: clients seeded at e->cl.url. */
static inline void cluster_failover_contended(clusterenv *e, hilock_client *a, hilock_client *b,
                                              int hard) {
    /* Both know the slot map before the fault: with one seed, a client whose
     * seed dies before it heard the map knows no other node. */
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof(name), "ex-%d", i);
        got ga = cluster_take(e, a, name);
        if (ga.status == 0) cluster_give_back(e, ga.hold);
        got gb = cluster_take(e, b, name);
        if (gb.status == 0) cluster_give_back(e, gb.hold);
    }
    static turn turns[600];
    shared s;
    memset(&s, 0, sizeof(s));
    s.base = e->base;
    s.hold_ms = 3; /* 600 grants on 8 names: about 250 ms of contention per name */
    s.ca = a;
    /* A master that serves some of the names: not the first seed (where
     * the clients' subscriptions live), or (hard == 2) the first seed. */
    test_redis *m = NULL, *r = NULL;
    for (int i = 0; i < 8 && m == NULL; i++) {
        char name[32];
        snprintf(name, sizeof(name), "ex-%d", i);
        test_redis *x = test_cluster_master_of(&e->cl, cluster_slot_of(name));
        if ((hard == 2) == (x == &e->cl.node[0])) m = x; /* 2: the first seed itself */
    }
    if (m) r = cluster_replica_of(&e->cl, m);
    cr_assert(m && r, "no master/replica pair");
    for (int i = 0; i < 600; i++) {
        char name[32];
        turns[i].s = &s;
        turns[i].idx = i % 8;
        snprintf(name, sizeof(name), "ex-%d", i % 8);
        cr_assert_eq(hilock_acquire(i % 2 ? a : b, name, NULL, turn_granted, &turns[i], NULL), 0);
        if (i == 300) { /* halfway: fail the master over */
            test_loop_for(e->base, 5);
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
    while (s.done < 600 && test_now_ms() - t0 < 60000) test_loop_for(e->base, 20);
    cr_log_info("failover (%s): %d granted, %d errors (first: %s, %s), %d overlaps in %lld ms",
                hard == 2 ? "kill -9 of the first seed" : hard ? "kill -9" : "CLUSTER FAILOVER", s.granted,
                s.errors, hilock_strerror(s.first_error), s.first_errstr, s.overlaps, test_now_ms() - t0);
    cr_expect_eq(s.done, 600, "%d of 600 ended", s.done);
    /* The requests wait for the new master (request_timeout_ms 6000). A
     * kill -9 may lose a grant that had not reached the replica: its
     * release then says so (HILOCK_ELOST), which is the truth. */
    if (!hard)
        cr_expect_eq(s.errors, 0, "%d errors, the first %s: %s", s.errors, hilock_strerror(s.first_error),
                     s.first_errstr);
    /* A grant lost so takes its fence with it: the promoted replica counts
     * from the last fence it had, and may grant the name while the lost
     * holder still thinks it holds it (guarantees.md). Either is allowed on
     * a name only when a hold of it was reported lost; never otherwise. */
    for (int i = 0; i < 8; i++) {
        int excused = hard && s.lost[i];
        cr_expect(!s.overlapped[i] || excused, "two holders at once of ex-%d, with no loss reported", i);
        cr_expect(!s.regressed[i] || excused, "fences of ex-%d out of order, with no loss reported", i);
    }
    /* Afterwards every name works, on the promoted replica too. */
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof(name), "ex-%d", i);
        got g = cluster_take(e, a, name);
        cr_expect_eq(g.status, 0, "%s after the failover: %s (%s)", name, hilock_strerror(g.status),
                     hilock_client_errstr(a));
        if (g.status == 0) cr_expect_eq(cluster_give_back(e, g.hold), 0);
    }
}

/* A held lock's slot migrates step by step (IMPORTING, MIGRATING, MIGRATE,
 * SETSLOT NODE) under its holder a, whose renewals follow ASK, and its
 * waiter b, served the moment the slot is the new master's for good. a and
 * b: clients of e->cl, without holds on `name`. port_offset: what the
 * nodes' client port (MIGRATE's target) is past the plain one (a TLS
 * cluster's). */
static inline void cluster_migrate_held(clusterenv *e, hilock_client *a, hilock_client *b,
                                        const char *name, int port_offset) {
    char slot[8], lock[64], fence[80], src_id[64], dst_id[64], dst_port[16];
    snprintf(slot, sizeof(slot), "%u", cluster_slot_of(name));
    hilock_key("hilock:", name, lock, sizeof(lock));
    snprintf(fence, sizeof(fence), "%s:fence", lock);
    test_redis *src = test_cluster_master_of(&e->cl, cluster_slot_of(name)), *dst = cluster_other_master(&e->cl, src);
    cr_assert(src && dst);
    cluster_node_id(src, src_id, sizeof(src_id));
    cluster_node_id(dst, dst_id, sizeof(dst_id));
    snprintf(dst_port, sizeof(dst_port), "%d", dst->port + port_offset);

    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 1500; /* renewed every 500 ms: renewals cross the migration */
    lostrec lost = {0, 0, 0};
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = {0, 0, NULL, 0}, gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(a, name, &o, got_cb, &ga, NULL), 0);
    cr_assert(test_loop_until(e->base, &ga.calls, 10000));
    cr_assert_eq(ga.status, 0, "%s", hilock_strerror(ga.status));
    cr_assert_eq(hilock_acquire(b, name, NULL, got_cb, &gb, NULL), 0);
    test_loop_for(e->base, 200);
    cr_assert_eq(gb.calls, 0, "granted while held");

    /* Step by step: IMPORTING, MIGRATING, then the keys move. */
    cr_assert(cluster_run_on(dst, "CLUSTER SETSLOT %s IMPORTING %s", slot, src_id));
    cr_assert(cluster_run_on(src, "CLUSTER SETSLOT %s MIGRATING %s", slot, dst_id));
    test_loop_for(e->base, 300);
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
    test_loop_for(e->base, 1700);
    cr_expect_eq(lost.calls, 0, "the holder lost the lock during the migration");
    cr_expect_eq(gb.calls, 0, "granted while held");

    /* The release finds the lock through ASK. The waiter's try meets the
     * migration (TRYAGAIN: its fence key must not be written on the
     * importing side while the slot moves) and goes through the moment the
     * slot is dst's for good. */
    cr_expect_eq(cluster_give_back(e, ga.hold), 0);
    test_loop_for(e->base, 300);
    cr_expect_eq(gb.calls, 0, "granted in the middle of the migration");
    long long t0 = test_now_ms();
    cluster_slot_to(&e->cl, slot, dst_id);
    cr_assert(test_loop_until(e->base, &gb.calls, 5000), "the waiter was not served");
    cr_expect_eq(gb.status, 0, "%s (%s)", hilock_strerror(gb.status), hilock_client_errstr(b));
    cr_expect_lt(gb.at_ms - t0, 1000, "served %lld ms after the slot moved", gb.at_ms - t0);
    test_loop_for(e->base, 300);
    if (gb.status == 0) cr_expect_eq(cluster_give_back(e, gb.hold), 0);
    got g3 = cluster_take(e, a, name);
    cr_expect_eq(g3.status, 0, "%s (%s)", hilock_strerror(g3.status), hilock_client_errstr(a));
    cr_expect_eq(lock_exists(dst, name), 1);
    if (g3.status == 0) cr_expect_eq(cluster_give_back(e, g3.hold), 0);
    cr_expect_eq(lock_exists(dst, name), 0, "a lock left behind");
    /* The renewals followed ASK; a's next try met its stale map (MOVED). */
    hilock_stats sa;
    hilock_stats_init(&sa);
    cr_assert_eq(hilock_client_stats(a, &sa), 0);
    cr_expect_geq(sa.redirects_ask, 1);
    cr_expect_geq(sa.redirects_moved, 1);
    cr_expect_geq(sa.nnodes, 2, "the slot's two masters");
    cr_expect_eq(sa.holds_lost, 0);
}


/* Is `key` one of the keys r holds in `slot`? (CLUSTER GETKEYSINSLOT: no
 * ASK, whatever the slot's state.) */
static inline int cluster_slot_has(test_redis *r, const char *slot, const char *key) {
    redisReply *keys = test_redis_cmd(r, "CLUSTER GETKEYSINSLOT %s 100", slot);
    int has = 0;
    for (size_t i = 0; keys && keys->type == REDIS_REPLY_ARRAY && i < keys->elements; i++)
        has |= strcmp(keys->element[i]->str, key) == 0;
    if (keys) freeReplyObject(keys);
    return has;
}

/* A slot migrated step by step, by hand: `name`'s slot, its master (src)
 * and another (dst). */
typedef struct cluster_migration {
    char slot[8], src_id[64], dst_id[64];
    test_redis *src, *dst;
} cluster_migration;

static inline void cluster_migration_of(clusterenv *e, const char *name, cluster_migration *m) {
    unsigned s = cluster_slot_of(name);
    snprintf(m->slot, sizeof(m->slot), "%u", s);
    m->src = test_cluster_master_of(&e->cl, s);
    m->dst = cluster_other_master(&e->cl, m->src);
    cr_assert(m->src && m->dst);
    cluster_node_id(m->src, m->src_id, sizeof(m->src_id));
    cluster_node_id(m->dst, m->dst_id, sizeof(m->dst_id));
}

/* IMPORTING on dst, MIGRATING on src: the keys stay on src. */
static inline void cluster_migration_begin(const cluster_migration *m) {
    cr_assert(cluster_run_on(m->dst, "CLUSTER SETSLOT %s IMPORTING %s", m->slot, m->src_id));
    cr_assert(cluster_run_on(m->src, "CLUSTER SETSLOT %s MIGRATING %s", m->slot, m->dst_id));
}

#endif
