/* Batched renewals: holds of one server (one slot, in a Cluster) due
 * within a window renew in one script call, each keeping its own lease
 * and its own loss.
 *
 * renew:         many holds share calls (counted on the server); with
 *                renew_batch 1 each renews alone; a hold whose key is gone
 *                or taken is lost alone; releases while batches are open;
 *                an extend meeting an open batch, or overtaking one sent
 *                again after NOSCRIPT; a late watchdog waits no window.
 * renew_cluster: holds of one slot batch together, holds of other slots
 *                apart (a script's keys share a slot), on a real cluster. */
#include <sys/wait.h>
#include <unistd.h>
#include "support/clusterenv.h"

#define LEASE 1200 /* renewed every 300-400 ms: a batch's window is 100 ms */

typedef struct holdrec {
    char name[32];
    got g;
    lostrec lost;
    rel r;
} holdrec;

/* Acquire every h[i].name with LEASE, one per loop turn of about 1 ms (so
 * that their renewals fall due apart), and wait for all. */
static void take_all(struct event_base *base, hilock_client *c, holdrec *h, int n) {
    for (int i = 0; i < n; i++) {
        hilock_acquire_opts o = opts_wait_lease(5000, LEASE);
        o.lost_cb = lost_cb;
        o.lost_data = &h[i].lost;
        cr_assert_eq(hilock_acquire(c, h[i].name, &o, got_cb, &h[i].g, NULL), 0);
        test_loop_for(base, 1);
    }
    long long until = test_now_ms() + 10000;
    for (int i = 0; i < n; i++) {
        while (h[i].g.calls == 0 && test_now_ms() < until) test_loop_for(base, 10);
        cr_assert_eq(h[i].g.status, 0, "%s: %s (%s)", h[i].name, hilock_strerror(h[i].g.status),
                     hilock_client_errstr(c));
    }
}

/* h[0..n) zeroed and named PREFIX-i. */
static void name_all(holdrec *h, int n, const char *prefix) {
    memset(h, 0, (size_t)n * sizeof(*h));
    for (int i = 0; i < n; i++) snprintf(h[i].name, sizeof(h[i].name), "%s-%d", prefix, i);
}

/* h[0..n) zeroed and named PREFIX-i for the first n values of i whose
 * names share the slot of PREFIX-0. */
static void name_one_slot(holdrec *h, int n, const char *prefix) {
    char name[32];
    snprintf(name, sizeof(name), "%s-0", prefix);
    unsigned slot = cluster_slot_of(name);
    int k = 0;
    memset(h, 0, (size_t)n * sizeof(*h));
    for (int i = 0; k < n && i < 10000000; i++) {
        snprintf(name, sizeof(name), "%s-%d", prefix, i);
        if (cluster_slot_of(name) == slot) snprintf(h[k++].name, sizeof(h[0].name), "%s", name);
    }
    cr_assert_eq(k, n, "only %d names of slot %u", k, slot);
}

static int lost_count(const holdrec *h, int n) {
    int lost = 0;
    for (int i = 0; i < n; i++) lost += h[i].lost.calls;
    return lost;
}

static void release_all(struct event_base *base, holdrec *h, int n) {
    for (int i = 0; i < n; i++)
        if (h[i].g.hold != NULL && h[i].r.calls == 0) hilock_release(h[i].g.hold, rel_cb, &h[i].r);
    long long until = test_now_ms() + 5000;
    for (int i = 0; i < n; i++)
        while (h[i].r.calls == 0 && test_now_ms() < until) test_loop_for(base, 10);
}

/* ---- renew ---------------------------------------------------------------- */

static lockenv e;
static void setup(void) { lockenv_start_debuggable(&e); }
static void teardown(void) { lockenv_stop(&e); }
TestSuite(renew, .init = setup, .fini = teardown, .timeout = 60);

static hilock_client *client_batch(uint32_t renew_batch) {
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.renew_batch = renew_batch;
    return lockenv_client_cfg(&e, &cfg);
}

/* 300 holds acquired over about 300 ms, kept for 3 s (eight renewals
 * each): far fewer script calls than renewals, none late, none lost, and
 * every key kept with most of its lease. Returns renewals per call. */
static double hold_many(uint32_t renew_batch) {
    enum { N = 300 };
    static holdrec h[N];
    name_all(h, N, "many");
    hilock_client *c = client_batch(renew_batch);
    take_all(e.base, c, h, N);
    hilock_stats s0 = stats_of(c);
    long long calls0 = script_calls_of(&e.r);
    test_loop_for(e.base, 3000);
    hilock_stats s1 = stats_of(c);
    long long calls = script_calls_of(&e.r) - calls0;
    uint64_t renewals = s1.renewals - s0.renewals;
    cr_expect_eq(lost_count(h, N), 0, "holds lost");
    cr_expect_eq(s1.renewals_late, 0, "renewals late");
    cr_expect_geq(renewals, (uint64_t)N * 7, "%llu renewals", (unsigned long long)renewals);
    long long least = LEASE;
    for (int i = 0; i < N; i++) {
        cr_expect_eq(hilock_hold_lost(h[i].g.hold), 0, "%s lost", h[i].name);
        long long pttl = test_redis_int(&e.r, "PTTL %s", prim_key(h[i].name, ""));
        if (pttl < least) least = pttl;
    }
    /* Renewed a third of the way in at the latest (two thirds left then). */
    cr_expect_gt(least, LEASE / 2, "a key with %lld ms left", least);
    cr_log_info("renew_batch %u: %llu renewals in %lld script calls (%.1f per call), least PTTL %lld ms",
                renew_batch, (unsigned long long)renewals, calls, (double)renewals / (double)calls, least);
    release_all(e.base, h, N);
    for (int i = 0; i < N; i++) cr_expect_eq(h[i].r.status, 0, "%s: %s", h[i].name, hilock_strerror(h[i].r.status));
    hilock_client_free(c);
    return (double)renewals / (double)calls;
}

Test(renew, many_holds_share_script_calls) {
    double per_call = hold_many(0);
    cr_expect_geq(per_call, 10.0, "%.1f renewals per script call", per_call);
}

Test(renew, renew_batch_one_renews_each_hold_alone) {
    double per_call = hold_many(1);
    cr_expect_leq(per_call, 1.05, "%.1f renewals per script call", per_call);
}

/* One hold's key deleted, another's taken by a foreign token: those two
 * are lost (HILOCK_ELOST), the others of their batches are not, and the
 * foreign lock is left as it is. */
Test(renew, a_hold_gone_from_a_batch_is_lost_alone) {
    enum { N = 40 };
    static holdrec h[N];
    name_all(h, N, "alone");
    hilock_client *c = client_batch(0);
    take_all(e.base, c, h, N);
    long long calls0 = script_calls_of(&e.r);
    cr_assert_eq(test_redis_int(&e.r, "DEL %s", prim_key(h[17].name, "")), 1);
    cr_assert_eq(test_redis_int(&e.r, "SET %s someone-else PX 60000", prim_key(h[23].name, "")), -1); /* +OK */
    cr_assert_gt(test_redis_int(&e.r, "PTTL %s", prim_key(h[23].name, "")), 50000);
    test_loop_for(e.base, 1500);
    cr_expect_lt(script_calls_of(&e.r) - calls0, N * 2, "not batched");
    for (int i = 0; i < N; i++) {
        int gone = i == 17 || i == 23;
        cr_expect_eq(h[i].lost.calls, gone, "%s: lost %d times", h[i].name, h[i].lost.calls);
        cr_expect_eq(hilock_hold_lost(h[i].g.hold), gone, "%s", h[i].name);
        if (gone) cr_expect_eq(h[i].lost.why, HILOCK_ELOST, "%s: %s", h[i].name, hilock_strerror(h[i].lost.why));
    }
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", prim_key(h[17].name, "")), 0, "renewed back");
    redisReply *tok = test_redis_cmd(&e.r, "GET %s", prim_key(h[23].name, ""));
    cr_expect(tok && tok->type == REDIS_REPLY_STRING && strcmp(tok->str, "someone-else") == 0,
              "the foreign lock was changed: %s", tok && tok->str ? tok->str : "(nil)");
    if (tok) freeReplyObject(tok);
    release_all(e.base, h, N);
    for (int i = 0; i < N; i++)
        cr_expect_eq(h[i].r.status, i == 17 || i == 23 ? HILOCK_ELOST : 0, "%s: %s", h[i].name,
                     hilock_strerror(h[i].r.status));
    hilock_client_free(c);
}

/* The batch reads each lock's value as its token, or its token, a space
 * and its marks. Holds marked by another client's failed tries renew (and
 * keep the marks); a foreign token that merely starts with the hold's, or
 * is the start of it, is not the hold's: those two are lost alone. */
Test(renew, marked_holds_renew_and_look_alike_tokens_do_not) {
    enum { N = 30 };
    static holdrec h[N];
    name_all(h, N, "marks");
    hilock_client *c = client_batch(0), *other = client_batch(0);
    take_all(e.base, c, h, N);
    got busy[2] = {{0}};
    for (int k = 0; k < 2; k++) {
        hilock_acquire_opts o = opts_wait_lease(0, LEASE);
        cr_assert_eq(hilock_acquire(other, h[5 + k].name, &o, got_cb, &busy[k], NULL), 0);
    }
    long long until = test_now_ms() + 5000;
    while ((busy[0].calls == 0 || busy[1].calls == 0) && test_now_ms() < until) test_loop_for(e.base, 10);
    cr_assert_eq(busy[0].status, HILOCK_EBUSY);
    cr_assert_eq(busy[1].status, HILOCK_EBUSY);
    char token[128];
    redisReply *v = test_redis_cmd(&e.r, "GET %s", prim_key(h[9].name, ""));
    cr_assert(v && v->type == REDIS_REPLY_STRING && v->len < sizeof(token) - 2);
    snprintf(token, sizeof(token), "%s", v->str);
    freeReplyObject(v);
    cr_assert_eq(test_redis_int(&e.r, "SET %s %sx KEEPTTL", prim_key(h[9].name, ""), token), -1);
    v = test_redis_cmd(&e.r, "GET %s", prim_key(h[13].name, ""));
    cr_assert(v && v->type == REDIS_REPLY_STRING && v->len > 4);
    cr_assert_eq(test_redis_int(&e.r, "SET %s %b KEEPTTL", prim_key(h[13].name, ""), v->str, v->len - 1), -1);
    freeReplyObject(v);
    test_loop_for(e.base, 1500);
    for (int i = 0; i < N; i++) {
        int gone = i == 9 || i == 13;
        cr_expect_eq(h[i].lost.calls, gone, "%s: lost %d times", h[i].name, h[i].lost.calls);
        if (!gone) cr_expect_gt(test_redis_int(&e.r, "PTTL %s", prim_key(h[i].name, "")), LEASE / 2, "%s", h[i].name);
    }
    for (int k = 0; k < 2; k++) {
        v = test_redis_cmd(&e.r, "GET %s", prim_key(h[5 + k].name, ""));
        cr_expect(v && v->type == REDIS_REPLY_STRING && strstr(v->str, " w") != NULL, "%s: the mark is gone",
                  h[5 + k].name);
        if (v) freeReplyObject(v);
    }
    release_all(e.base, h, N);
    for (int i = 0; i < N; i++)
        cr_expect_eq(h[i].r.status, i == 9 || i == 13 ? HILOCK_ELOST : 0, "%s: %s", h[i].name,
                     hilock_strerror(h[i].r.status));
    hilock_client_free(other);
    hilock_client_free(c);
}

/* Releases at every moment of the batches' life (waiting in an open
 * batch, in flight): each is answered 0, its key is gone for good (no
 * renewal puts it back), and the holds left keep theirs. */
Test(renew, releases_while_batches_are_open) {
    enum { N = 200 };
    static holdrec h[N];
    name_all(h, N, "rel");
    hilock_client *c = client_batch(0);
    take_all(e.base, c, h, N);
    for (int i = 0; i < N; i += 2) { /* every other one, one per 7 ms over 700 ms */
        cr_assert_eq(hilock_release(h[i].g.hold, rel_cb, &h[i].r), 0);
        test_loop_for(e.base, 7);
    }
    test_loop_for(e.base, 1500);
    cr_expect_eq(lost_count(h, N), 0);
    for (int i = 0; i < N; i++) {
        long long there = test_redis_int(&e.r, "EXISTS %s", prim_key(h[i].name, ""));
        if (i % 2 == 0) {
            cr_expect_eq(h[i].r.calls, 1, "%s: no release callback", h[i].name);
            cr_expect_eq(h[i].r.status, 0, "%s: %s", h[i].name, hilock_strerror(h[i].r.status));
            cr_expect_eq(there, 0, "%s is back after its release", h[i].name);
        } else {
            cr_expect_eq(there, 1, "%s is gone", h[i].name);
        }
    }
    release_all(e.base, h, N);
    hilock_client_free(c);
}

/* The client freed with batches open and in flight: nothing leaks (the
 * sanitizer run checks) and no callback runs after. */
Test(renew, client_freed_with_batches_open) {
    enum { N = 100 };
    static holdrec h[N];
    name_all(h, N, "free");
    hilock_client *c = client_batch(0);
    take_all(e.base, c, h, N);
    test_loop_for(e.base, 330); /* some due, some in flight */
    hilock_client_free(c);
    test_loop_for(e.base, 200);
    cr_expect_eq(lost_count(h, N), 0);
}

/* Run the loop until c's watchdogs have put n more renewals in batches
 * (hilock_stats.renewals counts them as they join). */
static void wait_renewals(hilock_client *c, uint64_t n) {
    uint64_t want = stats_of(c).renewals + n;
    long long until = test_now_ms() + 5000;
    while (stats_of(c).renewals < want && test_now_ms() < until) test_loop_for(e.base, 1);
    cr_assert_geq(stats_of(c).renewals, want, "the watchdogs did not turn");
}

/* A hold extended while its renewal waits in an open batch: the batch
 * renews it with the extend's lease (read when the batch goes), so the
 * extend is not undone. */
Test(renew, an_extend_while_its_batch_is_open_keeps_its_lease) {
    enum { N = 2 };
    static holdrec h[N];
    name_all(h, N, "ext");
    hilock_client *c = client_batch(0);
    take_all(e.base, c, h, N);
    wait_renewals(c, N); /* both in a batch that goes within 60 ms */
    rel x = {0, 0};
    cr_assert_eq(hilock_hold_extend(h[0].g.hold, 60000, rel_cb, &x), 0);
    test_loop_until(e.base, &x.calls, 3000);
    cr_expect_eq(x.status, 0, "%s", hilock_strerror(x.status));
    test_loop_for(e.base, 200); /* the batch has gone and been answered */
    long long pttl = test_redis_int(&e.r, "PTTL %s", prim_key(h[0].name, ""));
    cr_expect_gt(pttl, 50000, "the extend to 60 s was undone: %lld ms left", pttl);
    cr_expect_leq(test_redis_int(&e.r, "PTTL %s", prim_key(h[1].name, "")), LEASE);
    cr_expect_eq(lost_count(h, N), 0);
    release_all(e.base, h, N);
    for (int i = 0; i < N; i++) cr_expect_eq(h[i].r.status, 0, "%s: %s", h[i].name, hilock_strerror(h[i].r.status));
    hilock_client_free(c);
}

/* After SCRIPT FLUSH, a batch's EVALSHA is refused (NOSCRIPT) and sent
 * again as EVAL, behind an extend sent meanwhile with a script the server
 * has again (another client loaded it): the batch runs last, so its lease
 * is the key's. The hold counts from it and renews in time, where it once
 * believed the extend's lease while the key expired under it. */
Test(renew, a_batch_sent_again_after_noscript_counts_from_then) {
    enum { N = 2 };
    static holdrec h[N], x1[1], b1[1];
    name_all(h, N, "nos");
    name_all(x1, 1, "nos-x");
    name_all(b1, 1, "nos-b");
    hilock_client *c = client_batch(0), *b = client_batch(0);
    /* Both scripts used on c's connection (each goes as EVAL once there,
     * then as EVALSHA): an extend, and a first batch. */
    take_all(e.base, c, x1, 1);
    rel ok = {0, 0};
    cr_assert_eq(hilock_hold_extend(x1[0].g.hold, LEASE, rel_cb, &ok), 0);
    test_loop_until(e.base, &ok.calls, 3000);
    release_all(e.base, x1, 1);
    take_all(e.base, c, h, N);
    wait_renewals(c, N);
    test_loop_for(e.base, 100);
    /* The server forgets its scripts; b's extend loads the single
     * renewal's again (NOSCRIPT, then EVAL), not the batch's. */
    take_all(e.base, b, b1, 1);
    cr_assert_eq(test_redis_int(&e.r, "SCRIPT FLUSH"), -1);
    rel bx = {0, 0};
    cr_assert_eq(hilock_hold_extend(b1[0].g.hold, LEASE, rel_cb, &bx), 0);
    test_loop_until(e.base, &bx.calls, 3000);
    cr_assert_eq(bx.status, 0, "%s", hilock_strerror(bx.status));
    /* The server sleeps while c's next batch goes (EVALSHA), then an
     * extend (EVALSHA): it wakes to NOSCRIPT for the batch, runs the
     * extend, then the batch sent again. */
    pid_t sleeper = test_redis_debug_sleep(&e.r, "1");
    test_loop_for(e.base, 50);
    wait_renewals(c, N);
    test_loop_for(e.base, 150);
    rel x = {0, 0};
    cr_assert_eq(hilock_hold_extend(h[0].g.hold, 60000, rel_cb, &x), 0);
    test_loop_until(e.base, &x.calls, 3000);
    cr_expect_eq(x.status, 0, "%s", hilock_strerror(x.status));
    int st = 0;
    cr_expect_eq(waitpid(sleeper, &st, 0), sleeper);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "DEBUG SLEEP failed");
    test_loop_for(e.base, 2 * LEASE);
    long long pttl = test_redis_int(&e.r, "PTTL %s", prim_key(h[0].name, ""));
    cr_expect_eq(hilock_hold_lost(h[0].g.hold), 0);
    cr_expect_gt(pttl, 50000, "held by its client, %lld ms left on the server", pttl);
    cr_expect_eq(lost_count(h, N), 0);
    release_all(e.base, h, N);
    release_all(e.base, b1, 1);
    for (int i = 0; i < N; i++) cr_expect_eq(h[i].r.status, 0, "%s: %s", h[i].name, hilock_strerror(h[i].r.status));
    hilock_client_free(b);
    hilock_client_free(c);
}

/* A watchdog that turns late (the loop stalled) has spent its window: its
 * renewal goes at once, as it would alone, not a window later. */
Test(renew, a_late_watchdog_renews_at_once) {
    enum { L = 3000 }; /* a window of 100 ms */
    static holdrec h[2];
    name_all(h, 2, "late");
    hilock_client *c = client_batch(0);
    take_all(e.base, c, h, 1); /* the connection is up */
    hilock_acquire_opts o = opts_wait_lease(5000, L);
    o.lost_cb = lost_cb;
    o.lost_data = &h[1].lost;
    long long t0 = test_now_ms();
    cr_assert_eq(hilock_acquire(c, h[1].name, &o, got_cb, &h[1].g, NULL), 0);
    test_loop_until(e.base, &h[1].g.calls, 3000);
    cr_assert_eq(h[1].g.status, 0);
    /* The loop stalls until 70 ms before the hold's end by its own clock
     * (the lease less the drift allowance): alone, the renewal makes it;
     * one that waited out a window of 100 ms would not. */
    long long resume = t0 + L - (L / 100 + 2) - 70;
    while (test_now_ms() < resume) usleep(1000);
    test_loop_for(e.base, 300);
    cr_expect_eq(h[1].lost.calls, 0, "lost: %s", hilock_strerror(h[1].lost.why));
    cr_expect_gt(test_redis_int(&e.r, "PTTL %s", prim_key(h[1].name, "")), L / 2);
    release_all(e.base, h, 2);
    hilock_client_free(c);
}

Test(renew, renew_batch_over_its_limit_is_refused) {
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.renew_batch = 1001;
    cr_expect_eq(hilock_config_check(&cfg), HILOCK_EINVAL);
    cfg.renew_batch = 1000;
    cr_expect_eq(hilock_config_check(&cfg), 0);
}

/* ---- renew_cluster --------------------------------------------------------- */

static clusterenv ce;
static void csetup(void) { clusterenv_start(&ce); }
static void cteardown(void) { clusterenv_stop(&ce); }
TestSuite(renew_cluster, .init = csetup, .fini = cteardown, .timeout = 90);

/* 60 names of one slot and 60 of other slots: none lost over 3 s, every
 * key on its slot's master, and the one slot's holds batched (a script's
 * keys across slots would be refused CROSSSLOT, and the hold lost). */
Test(renew_cluster, holds_of_one_slot_share_calls) {
    enum { SAME = 60, N = 120 };
    static holdrec h[N];
    name_one_slot(h, SAME, "batch");
    unsigned slot = cluster_slot_of(h[0].name);
    for (int i = SAME; i < N; i++) snprintf(h[i].name, sizeof(h[i].name), "apart-%d", i);
    hilock_config cfg;
    cluster_config(&cfg, ce.cl.url);
    hilock_client *c = cluster_client_cfg(&ce, &cfg);
    take_all(ce.base, c, h, N);
    test_redis *m = cluster_agreed_master_of(&ce.cl, slot);
    cr_assert_not_null(m);
    hilock_stats s0 = stats_of(c);
    long long total0 = 0, total = 0;
    for (int i = 0; i < 3; i++) total0 += script_calls_of(&ce.cl.node[i]);
    test_loop_for(ce.base, 3000);
    hilock_stats s1 = stats_of(c);
    for (int i = 0; i < 3; i++) total += script_calls_of(&ce.cl.node[i]);
    uint64_t renewals = s1.renewals - s0.renewals;
    cr_expect_eq(lost_count(h, N), 0, "holds lost (%s)", hilock_client_errstr(c));
    cr_expect_eq(s1.renewals_late, 0);
    for (int i = 0; i < N; i++) {
        test_redis *mi = cluster_agreed_master_of(&ce.cl, cluster_slot_of(h[i].name));
        cr_expect_eq(mi ? lock_exists(mi, h[i].name) : 0, 1, "%s not on its master", h[i].name);
    }
    /* The apart names renew about alone, the one slot's together. */
    cr_expect_lt((double)(total - total0), 0.7 * (double)renewals, "%lld script calls for %llu renewals",
                 total - total0, (unsigned long long)renewals);
    cr_log_info("cluster: %llu renewals in %lld script calls", (unsigned long long)renewals, total - total0);
    release_all(ce.base, h, N);
    for (int i = 0; i < N; i++) cr_expect_eq(h[i].r.status, 0, "%s: %s", h[i].name, hilock_strerror(h[i].r.status));
    hilock_client_free(c);
}

/* MIGRATE the keys of `h` (lock keys) from src to dst, one at a time;
 * every key of the slot when h is NULL. */
static void move_keys(const cluster_migration *m, const holdrec *h, int n) {
    char port[16];
    snprintf(port, sizeof(port), "%d", m->dst->port);
    redisContext *k = test_redis_connect(m->src);
    cr_assert_not_null(k);
    redisReply *keys = h ? NULL : test_redis_cmd(m->src, "CLUSTER GETKEYSINSLOT %s 1000", m->slot);
    int count = h ? n : (int)keys->elements;
    for (int i = 0; i < count; i++) {
        const char *key = h ? prim_key(h[i].name, "") : keys->element[i]->str;
        redisReply *rep = redisCommand(k, "MIGRATE 127.0.0.1 %s %s 0 5000", port, key);
        cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "MIGRATE: %s", rep && rep->str ? rep->str : "?");
        freeReplyObject(rep);
    }
    if (keys) freeReplyObject(keys);
    redisFree(k);
}

/* A slot half moved (MIGRATING, half of its locks on the importing node)
 * for longer than a lease: a batch of its holds is answered TRYAGAIN (its
 * keys are on both sides), and each then renews alone, following ASK to
 * its key: none is lost, before or after the slot has moved. */
Test(renew_cluster, holds_of_a_half_moved_slot_renew_alone) {
    enum { N = 40 };
    static holdrec h[N];
    name_one_slot(h, N, "moved");
    hilock_config cfg;
    cluster_config(&cfg, ce.cl.url);
    hilock_client *c = cluster_client_cfg(&ce, &cfg);
    take_all(ce.base, c, h, N);
    cluster_migration m;
    cluster_migration_of(&ce, h[0].name, &m);
    cluster_migration_begin(&m);
    move_keys(&m, h, N / 2);
    long long tries0 = script_calls_of(m.dst);
    test_loop_for(ce.base, 2 * LEASE);
    cr_expect_eq(lost_count(h, N), 0, "holds lost in the half-moved slot (%s)", hilock_client_errstr(c));
    cr_expect_gt(script_calls_of(m.dst) - tries0, 0,
                 "no renewal followed ASK");
    move_keys(&m, NULL, 0);
    cluster_slot_to(&ce.cl, m.slot, m.dst_id);
    test_loop_for(ce.base, LEASE);
    cr_expect_eq(lost_count(h, N), 0, "holds lost after the slot moved (%s)", hilock_client_errstr(c));
    for (int i = 0; i < N; i++) cr_expect_eq(lock_exists(m.dst, h[i].name), 1, "%s not on dst", h[i].name);
    release_all(ce.base, h, N);
    for (int i = 0; i < N; i++) cr_expect_eq(h[i].r.status, 0, "%s: %s", h[i].name, hilock_strerror(h[i].r.status));
    hilock_client_free(c);
}
