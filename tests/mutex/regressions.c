/* Regressions from an adversarial review, each against a real
 * redis-server: a stranded waiter, a grant delivered during close or after
 * its lease, close followed by free, an unreachable server reported as a
 * busy lock, and one stall reported under two codes. Every test here failed
 * before its fix. */
#include <sys/wait.h>
#include <unistd.h>
#include "support/lockenv.h"
#include "prim/prim.h" /* hl_script_mutex_release */

static lockenv e;

static void setup(void) { lockenv_start_debuggable(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(mutex_regress, .init = setup, .fini = teardown, .timeout = 60);

/* A client whose command connection is up, so that a try goes out from
 * inside hilock_acquire(). */
static hilock_client *ready_client(void) {
    hilock_client *c = lockenv_client(&e);
    got g = acquire_now(&e, c, "warm-up", NULL);
    cr_assert_eq(g.status, 0);
    cr_assert_eq(release_now(&e, g.hold), 0);
    return c;
}

static long long fence_in_redis(const char *name) {
    char key[HILOCK_NAME_MAX * 3 + 64];
    hilock_key("hilock:", name, key, sizeof(key));
    redisContext *k = test_redis_connect(&e.r);
    redisReply *rep = k ? redisCommand(k, "GET %s:fence", key) : NULL;
    long long f = rep && rep->type == REDIS_REPLY_STRING ? atoll(rep->str) : -1;
    if (rep) freeReplyObject(rep);
    if (k) redisFree(k);
    return f;
}

/* ---- 1. A stranded waiter ------------------------------------------------ */

/* A's try is in flight when A is cancelled; B queues behind it and sends
 * nothing. A's try wins: the lock must be given back AND B must be tried. */
Test(mutex_regress, waiter_behind_a_cancelled_try_is_tried) {
    static const int64_t waits[] = {0, HILOCK_WAIT_FOREVER, 3000};
    hilock_client *c = ready_client();
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof(name), "strand%d", i);
        got ga = {0, 0, NULL, 0}, gb = {0, 0, NULL, 0};
        hilock_wait *wa = NULL;
        cr_assert_eq(hilock_acquire(c, name, NULL, got_cb, &ga, &wa), 0);
        cr_assert_eq(hilock_wait_cancel(wa), 0);
        hilock_acquire_opts o = opts_wait(waits[i]);
        long long t0 = test_now_ms();
        cr_assert_eq(hilock_acquire(c, name, &o, got_cb, &gb, NULL), 0);
        cr_expect(test_loop_until(e.base, &gb.calls, 2000), "wait %lld: B got no callback",
                  (long long)waits[i]);
        cr_expect_eq(gb.status, 0, "wait %lld: B got %s", (long long)waits[i],
                     hilock_strerror(gb.status));
        cr_expect_lt(gb.at_ms - t0, 500, "wait %lld: B took %lld ms", (long long)waits[i],
                     gb.at_ms - t0);
        cr_expect_eq(ga.calls, 1);
        cr_expect_eq(ga.status, HILOCK_ECANCELED);
        if (gb.status == 0) cr_expect_eq(release_now(&e, gb.hold), 0);
        test_loop_for(e.base, 50);
        cr_expect_eq(lock_exists(&e.r, name), 0, "%s left behind", name);
    }
    hilock_client_free(c);
}

/* The same when A's own wait runs out while its try is in flight (the
 * server is stalled, so the try outlives A's 50 ms). */
Test(mutex_regress, waiter_behind_an_expired_try_is_tried) {
    hilock_client *c = ready_client();
    got ga = {0, 0, NULL, 0}, gb = {0, 0, NULL, 0};
    pid_t sleeper = test_redis_debug_sleep(&e.r, "0.4");
    test_loop_for(e.base, 50); /* the server is asleep now */
    hilock_acquire_opts o = opts_wait(50);
    cr_assert_eq(hilock_acquire(c, "strand-exp", &o, got_cb, &ga, NULL), 0);
    cr_assert(test_loop_until(e.base, &ga.calls, 2000));
    /* Redis never answered A: that is not a busy lock. */
    cr_expect_eq(ga.status, HILOCK_EDEADLINE, "A got %s", hilock_strerror(ga.status));
    o = opts_wait(3000);
    cr_assert_eq(hilock_acquire(c, "strand-exp", &o, got_cb, &gb, NULL), 0);
    cr_expect(test_loop_until(e.base, &gb.calls, 3000), "B got no callback");
    cr_expect_eq(gb.status, 0, "B got %s", hilock_strerror(gb.status));
    if (gb.status == 0) cr_expect_eq(release_now(&e, gb.hold), 0);
    int st;
    waitpid(sleeper, &st, 0);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "DEBUG SLEEP failed");
    test_loop_for(e.base, 50);
    cr_expect_eq(lock_exists(&e.r, "strand-exp"), 0);
    hilock_client_free(c);
}

/* ---- 2. A grant not yet delivered when close starts ---------------------- */

typedef struct closer {
    hilock_client *c;
    got g[2];
    int closed;
} closer;

static void on_closed(void *data) { ((closer *)data)->closed++; }

static void first_then_close(hilock_hold *h, int status, void *data) {
    closer *k = data;
    got_cb(h, status, &k->g[0]);
    hilock_client_close(k->c, on_closed, k);
}

static void second(hilock_hold *h, int status, void *data) {
    closer *k = data;
    got_cb(h, status, &k->g[1]);
    /* A hold handed out here would be one close is already releasing. */
    if (status == 0) cr_expect_eq(hilock_release(h, NULL, NULL), 0, "a grant that close releases");
}

Test(mutex_regress, close_cancels_grants_not_yet_delivered) {
    for (int round = 0; round < 20; round++) {
        closer k;
        memset(&k, 0, sizeof(k));
        k.c = ready_client();
        char a[32], b[32];
        snprintf(a, sizeof(a), "close%da", round);
        snprintf(b, sizeof(b), "close%db", round);
        cr_assert_eq(hilock_acquire(k.c, a, NULL, first_then_close, &k, NULL), 0);
        cr_assert_eq(hilock_acquire(k.c, b, NULL, second, &k, NULL), 0);
        cr_assert(test_loop_until(e.base, &k.closed, 5000), "close did not finish");
        cr_expect_eq(k.g[0].calls, 1);
        cr_expect_eq(k.g[0].status, 0);
        cr_expect_eq(k.g[1].calls, 1);
        cr_expect_eq(k.g[1].status, HILOCK_ECANCELED, "round %d: the second got %s", round,
                     hilock_strerror(k.g[1].status));
        cr_expect_eq(lock_exists(&e.r, a), 0, "close left %s", a);
        cr_expect_eq(lock_exists(&e.r, b), 0, "close left %s", b);
        cr_expect_eq(k.closed, 1);
    }
}

/* ---- 3. A grant delivered after its lease ran out ------------------------ */

typedef struct stale {
    got g[2];
    int work_ms;          /* the first callback works this long */
    hilock_hold *first;   /* the first hold, looked at by the second */
    int first_lost_seen;  /* hilock_hold_lost(first) in the second callback */
    long long fence_seen; /* the lock's fence in Redis when the second ran */
    const char *name2;
} stale;

static void busy_first(hilock_hold *h, int status, void *data) {
    stale *s = data;
    got_cb(h, status, &s->g[0]);
    s->first = h;
    usleep((useconds_t)s->work_ms * 1000);
}

static void check_second(hilock_hold *h, int status, void *data) {
    stale *s = data;
    got_cb(h, status, &s->g[1]);
    if (s->first) s->first_lost_seen = hilock_hold_lost(s->first);
    if (status == 0) {
        cr_expect_eq(hilock_hold_lost(h), 0);
        s->fence_seen = fence_in_redis(s->name2);
    }
}

/* A callback ahead of the grant in the same turn uses up its 50 ms lease:
 * the grant must not be delivered as success with the key gone. */
Test(mutex_regress, grant_after_lease_is_retried) {
    hilock_client *c = ready_client();
    stale s;
    memset(&s, 0, sizeof(s));
    s.work_ms = 120;
    s.name2 = "stale-b";
    hilock_acquire_opts o = opts_wait(HILOCK_WAIT_FOREVER);
    cr_assert_eq(hilock_acquire(c, "stale-a", &o, busy_first, &s, NULL), 0);
    o.lease_ms = 50;
    cr_assert_eq(hilock_acquire(c, "stale-b", &o, check_second, &s, NULL), 0);
    cr_assert(test_loop_until(e.base, &s.g[1].calls, 5000));
    cr_expect_eq(s.g[1].calls, 1);
    cr_expect_eq(s.g[1].status, 0, "got %s", hilock_strerror(s.g[1].status));
    cr_expect_eq(s.fence_seen, (long long)hilock_hold_fence(s.g[1].hold),
                 "delivered as held, but Redis has fence %lld", s.fence_seen);
    if (s.g[1].status == 0) cr_expect_eq(release_now(&e, s.g[1].hold), 0);
    cr_expect_eq(release_now(&e, s.g[0].hold), 0);
    hilock_client_free(c);
}

/* The loop stalls while the grant's reply sits in the socket. */
Test(mutex_regress, grant_read_after_a_stall_is_retried) {
    hilock_client *c = ready_client();
    stale s;
    memset(&s, 0, sizeof(s));
    s.name2 = "stale-c";
    hilock_acquire_opts o = opts_wait(HILOCK_WAIT_FOREVER);
    o.lease_ms = 50;
    lostrec lost = {0, 0, 0};
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    cr_assert_eq(hilock_acquire(c, "stale-c", &o, check_second, &s, NULL), 0);
    usleep(120 * 1000);
    cr_assert(test_loop_until(e.base, &s.g[1].calls, 5000));
    /* The stale grant was nobody's: no lost callback, no lost hold counted
     * (they were, for a hold no callback had had). */
    cr_expect_eq(lost.calls, 0, "a lost callback for a hold never delivered");
    cr_expect_eq(stats_of(c).holds_lost, 0, "a hold never delivered counted as lost");
    cr_expect_eq(s.g[1].status, 0, "got %s", hilock_strerror(s.g[1].status));
    cr_expect_eq(s.fence_seen, (long long)hilock_hold_fence(s.g[1].hold),
                 "delivered as held, but Redis has fence %lld", s.fence_seen);
    if (s.g[1].status == 0) cr_expect_eq(release_now(&e, s.g[1].hold), 0);
    test_loop_for(e.base, 50);
    cr_expect_eq(lock_exists(&e.r, "stale-c"), 0);
    hilock_client_free(c);
}

/* A wait with no time left ends with its own error instead: a try-once,
 * and a 100 ms wait whose grant is read in the same turn as a callback that
 * works 150 ms. */
Test(mutex_regress, stale_grant_past_the_wait_times_out) {
    hilock_client *c = ready_client();
    stale s;
    memset(&s, 0, sizeof(s));
    s.work_ms = 150;
    s.name2 = "stale-t1";
    hilock_acquire_opts o = opts_wait(0);
    o.lease_ms = 50;
    cr_assert_eq(hilock_acquire(c, "stale-t0", &o, got_cb, &s.g[0], NULL), 0);
    usleep(120 * 1000);
    cr_assert(test_loop_until(e.base, &s.g[0].calls, 3000));
    cr_expect_eq(s.g[0].status, HILOCK_ETIMEDOUT, "try once got %s", hilock_strerror(s.g[0].status));
    cr_expect_null(s.g[0].hold);

    memset(&s.g, 0, sizeof(s.g));
    o = opts_wait(HILOCK_WAIT_FOREVER);
    cr_assert_eq(hilock_acquire(c, "stale-a", &o, busy_first, &s, NULL), 0);
    o = opts_wait(100);
    o.lease_ms = 50;
    cr_assert_eq(hilock_acquire(c, "stale-t1", &o, check_second, &s, NULL), 0);
    cr_assert(test_loop_until(e.base, &s.g[1].calls, 3000));
    cr_expect_eq(s.g[1].status, HILOCK_ETIMEDOUT, "wait 100 got %s", hilock_strerror(s.g[1].status));
    cr_expect_null(s.g[1].hold);
    cr_expect_eq(release_now(&e, s.g[0].hold), 0);
    test_loop_for(e.base, 100);
    cr_expect_eq(lock_exists(&e.r, "stale-t0"), 0, "stale-t0 left behind");
    cr_expect_eq(lock_exists(&e.r, "stale-t1"), 0, "stale-t1 left behind");
    cr_expect_eq(s.g[1].calls, 1);
    hilock_client_free(c);
}

/* A hold delivered live, then observed by a later callback of the same turn
 * after its lease ran out: it must read as lost, before any timer ran. */
Test(mutex_regress, hold_reads_lost_once_its_lease_ran_out) {
    hilock_client *c = ready_client();
    stale s;
    memset(&s, 0, sizeof(s));
    s.work_ms = 120;
    s.name2 = "obs-b";
    hilock_acquire_opts o = opts_wait(HILOCK_WAIT_FOREVER);
    o.lease_ms = 50;
    o.no_renew = 1;
    cr_assert_eq(hilock_acquire(c, "obs-a", &o, busy_first, &s, NULL), 0);
    o = opts_wait(HILOCK_WAIT_FOREVER);
    cr_assert_eq(hilock_acquire(c, "obs-b", &o, check_second, &s, NULL), 0);
    cr_assert(test_loop_until(e.base, &s.g[1].calls, 5000));
    cr_expect_eq(s.g[0].status, 0);
    cr_expect_eq(s.first_lost_seen, 1, "a hold past its lease read as live");
    cr_expect_eq(release_now(&e, s.g[0].hold), HILOCK_ELOST);
    cr_expect_eq(release_now(&e, s.g[1].hold), 0);
    hilock_client_free(c);
}

/* ---- 4. Close, then free ------------------------------------------------- */

static void count_closed(void *data) { (*(int *)data)++; }

Test(mutex_regress, free_after_close_runs_the_close_callback) {
    for (int variant = 0; variant < 3; variant++) {
        hilock_client *c = ready_client();
        char name[16];
        snprintf(name, sizeof(name), "cf%d", variant); /* free abandons the lock */
        got g = acquire_now(&e, c, name, NULL);
        cr_assert_eq(g.status, 0);
        rel r = {0, 0};
        if (variant == 1) cr_assert_eq(hilock_release(g.hold, rel_cb, &r), 0); /* in flight */
        int closed = 0;
        hilock_client_close(c, count_closed, &closed);
        if (variant == 2) test_loop_for(e.base, 0); /* the close's release goes out */
        hilock_client_free(c);
        cr_expect_eq(closed, 1, "variant %d: the close callback ran %d times", variant, closed);
        if (variant == 1) cr_expect_eq(r.calls, 1);
        test_loop_for(e.base, 100);
        cr_expect_eq(closed, 1);
        if (variant == 1) cr_expect_eq(r.calls, 1);
    }
}

/* ---- 5. Unreachable is not busy ------------------------------------------ */

static got acquire_url(const char *url, int64_t wait_ms) {
    hilock_client *c = lockenv_client_url(&e, url, 0);
    hilock_acquire_opts o = opts_wait(wait_ms);
    got g = acquire_now(&e, c, "unreachable", &o);
    hilock_client_free(c);
    return g;
}

Test(mutex_regress, unreachable_is_a_connection_error) {
    /* Nothing listens on port 1. */
    got g = acquire_url("redis://127.0.0.1:1", 500);
    cr_expect_eq(g.status, HILOCK_ECONN, "wait 500 got %s", hilock_strerror(g.status));
    long long t0 = test_now_ms();
    g = acquire_url("redis://127.0.0.1:1", 0);
    cr_expect_eq(g.status, HILOCK_ECONN, "try once got %s", hilock_strerror(g.status));
    /* Trying once means one connection attempt, not a request deadline. */
    cr_expect_lt(g.at_ms - t0, 500, "try once took %lld ms", g.at_ms - t0);
    /* A port that accepts and never answers: Redis did not answer. */
    int port, fd = test_listen_silent(&port);
    cr_assert_geq(fd, 0);
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    g = acquire_url(url, 300);
    cr_expect_eq(g.status, HILOCK_EDEADLINE, "silent port got %s", hilock_strerror(g.status));
    close(fd);
    /* A lock that is truly held still times out. */
    hilock_client *a = ready_client();
    got ga = acquire_now(&e, a, "unreachable", NULL);
    g = acquire_url(e.r.url, 300);
    cr_expect_eq(g.status, HILOCK_ETIMEDOUT, "a held lock got %s", hilock_strerror(g.status));
    /* And so does a waiter that queued behind one that saw it held. */
    hilock_client *b = ready_client();
    hilock_acquire_opts o = opts_wait(300);
    got gb1 = {0, 0, NULL, 0}, gb2 = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "unreachable", &o, got_cb, &gb1, NULL), 0);
    test_loop_for(e.base, 50);
    o = opts_wait(100);
    cr_assert_eq(hilock_acquire(b, "unreachable", &o, got_cb, &gb2, NULL), 0);
    cr_assert(test_loop_until(e.base, &gb1.calls, 2000));
    cr_expect_eq(gb2.status, HILOCK_ETIMEDOUT, "queued waiter got %s", hilock_strerror(gb2.status));
    cr_expect_eq(gb1.status, HILOCK_ETIMEDOUT);
    cr_expect_eq(release_now(&e, ga.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- 6. One stall, one code ---------------------------------------------- */

typedef struct tally {
    int calls, deadline, other, last_other;
} tally;

static void tally_cb(hilock_hold *h, int status, void *data) {
    tally *t = data;
    (void)h;
    t->calls++;
    if (status == HILOCK_EDEADLINE) t->deadline++;
    else { t->other++; t->last_other = status; }
}

/* DEBUG SLEEP beyond the 1 s request deadline, with 200 waiters on 200
 * names and 200 on one name, each waiting 1.5 s (tries that get no answer
 * are tried again while a wait has time left): every one of them reports
 * HILOCK_EDEADLINE, what their tries met. */
Test(mutex_regress, stall_reports_one_code) {
    hilock_client *c = ready_client();
    tally t = {0, 0, 0, 0};
    hilock_acquire_opts o = opts_wait(1500);
    pid_t sleeper = test_redis_debug_sleep(&e.r, "2");
    test_loop_for(e.base, 50);
    for (int i = 0; i < 400; i++) {
        char name[32];
        snprintf(name, sizeof(name), "stall%d", i < 200 ? i : 200);
        cr_assert_eq(hilock_acquire(c, name, &o, tally_cb, &t, NULL), 0);
    }
    long long t0 = test_now_ms();
    while (t.calls < 400 && test_now_ms() - t0 < 8000) test_loop_for(e.base, 20);
    cr_expect_eq(t.calls, 400);
    cr_expect_eq(t.deadline, 400, "%d others, e.g. %s", t.other, hilock_strerror(t.last_other));
    int st;
    waitpid(sleeper, &st, 0);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "DEBUG SLEEP failed");
    got g = acquire_now(&e, c, "stall0", NULL); /* and it works again */
    cr_expect_eq(g.status, 0);
    if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
}

/* ---- From the adversarial review of 0.2.0 -------------------------------- */

/* Two acquires of one owner share a grant (count 2). The head's callback
 * works past the 30 ms lease and releases its level; the other's grant is
 * then stale: it is tried again, and nothing touches the freed hold. */
typedef struct pair {
    hilock_hold *h[2];
    int calls[2], status[2], order[2], n;
    int release_all;   /* the head releases every level it sees */
    rel r;
    int second_count, second_key_fence_ok;
} pair;

static void pair_first(hilock_hold *h, int status, void *data) {
    pair *p = data;
    p->calls[0]++; p->status[0] = status; p->h[0] = h; p->order[p->n++] = 0;
    if (status != 0) return;
    if (p->release_all) {
        unsigned n = hilock_hold_count(h);
        for (unsigned i = 0; i < n; i++) hilock_release(h, i + 1 == n ? rel_cb : NULL, &p->r);
        return;
    }
    usleep(60 * 1000);
    cr_expect_eq(hilock_release(h, rel_cb, &p->r), 0);
}

static void pair_second(hilock_hold *h, int status, void *data) {
    pair *p = data;
    p->calls[1]++; p->status[1] = status; p->h[1] = h; p->order[p->n++] = 1;
    if (status == 0) {
        p->second_count = (int)hilock_hold_count(h);
        p->second_key_fence_ok = fence_in_redis("shared") == (long long)hilock_hold_fence(h);
    }
}

static void run_pair(pair *p, uint32_t lease, int no_renew) {
    hilock_client *c = ready_client();
    hilock_owner *o = hilock_owner_new(c);
    hilock_acquire_opts opts = opts_wait(HILOCK_WAIT_FOREVER);
    opts.owner = o;
    opts.lease_ms = lease;
    opts.no_renew = no_renew;
    cr_assert_eq(hilock_acquire(c, "shared", &opts, pair_first, p, NULL), 0);
    cr_assert_eq(hilock_acquire(c, "shared", &opts, pair_second, p, NULL), 0);
    long long t0 = test_now_ms();
    while ((p->calls[1] == 0 || p->r.calls == 0) && test_now_ms() - t0 < 5000) test_loop_for(e.base, 10);
    cr_expect_eq(p->calls[0], 1);
    cr_expect_eq(p->calls[1], 1);
    cr_expect_eq(p->order[0], 0, "the head's callback must run first");
    cr_expect_eq(p->r.calls, 1);
    cr_expect_eq(p->status[1], 0, "the second got %s", hilock_strerror(p->status[1]));
    cr_expect_geq(p->second_count, 1, "delivered a hold with no level left");
    cr_expect(p->second_key_fence_ok, "delivered as held, but Redis has another fence");
    if (p->status[1] == 0) cr_expect_eq(release_now(&e, p->h[1]), 0);
    test_loop_for(e.base, 50);
    cr_expect_eq(lock_exists(&e.r, "shared"), 0, "a lock left behind");
    hilock_owner_free(o);
    hilock_client_free(c);
}

Test(mutex_regress, shared_grant_stale_after_a_level_released) {
    pair p;
    memset(&p, 0, sizeof(p));
    run_pair(&p, 30, 1);
}

Test(mutex_regress, shared_grant_whose_levels_were_all_released) {
    pair p;
    memset(&p, 0, sizeof(p));
    p.release_all = 1;
    run_pair(&p, 5000, 0);
}

/* An extension whose reply comes after the hold's release: the extension
 * is re-sent as EVAL (NOSCRIPT) behind a release whose script is cached. */
Test(mutex_regress, extend_answered_after_the_release) {
    hilock_client *c = ready_client();
    got g = acquire_now(&e, c, "ext-rel", NULL);
    cr_assert_eq(g.status, 0);
    redisContext *k = test_redis_connect(&e.r);
    freeReplyObject(redisCommand(k, "SCRIPT FLUSH"));
    freeReplyObject(redisCommand(k, "SCRIPT LOAD %s", hl_script_mutex_release.body));
    redisFree(k);
    rel x = {0, 0}, r = {0, 0};
    cr_assert_eq(hilock_hold_extend(g.hold, 5000, rel_cb, &x), 0);
    cr_assert_eq(hilock_release(g.hold, rel_cb, &r), 0);
    long long t0 = test_now_ms();
    while ((x.calls == 0 || r.calls == 0) && test_now_ms() - t0 < 3000) test_loop_for(e.base, 10);
    cr_expect_eq(r.calls, 1);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(x.calls, 1);
    cr_expect(x.status == 0 || x.status == HILOCK_ELOST, "extend got %s", hilock_strerror(x.status));
    cr_expect_eq(lock_exists(&e.r, "ext-rel"), 0);
    hilock_client_free(c);
}

/* An extension to 30 s answered before a renewal with the old 300 ms lease
 * that was sent after it (both held up by a stalled server): the renewal's
 * lease is the one Redis keeps, so the client must renew again in time, and
 * nobody else may get the lock. */
Test(mutex_regress, extend_then_a_renewal_with_the_old_lease) {
    hilock_client *c = ready_client(), *other = ready_client();
    hilock_acquire_opts o = opts_wait(HILOCK_WAIT_FOREVER);
    o.lease_ms = 300;
    got g = acquire_now(&e, c, "ext-wd", &o);
    cr_assert_eq(g.status, 0);
    test_loop_for(e.base, 20);
    pid_t sleeper = test_redis_debug_sleep(&e.r, "0.25");
    test_msleep(20); /* the server is asleep: what we send now waits */
    rel x = {0, 0};
    cr_assert_eq(hilock_hold_extend(g.hold, 30000, rel_cb, &x), 0);
    cr_assert(test_loop_until(e.base, &x.calls, 3000)); /* the watchdog renews meanwhile */
    cr_expect_eq(x.status, 0);
    int st;
    waitpid(sleeper, &st, 0);
    test_loop_for(e.base, 1200);
    cr_expect_eq(hilock_hold_lost(g.hold), 0);
    cr_expect_gt(test_redis_int(&e.r, "PTTL hilock:{ext-wd}"), 20000, "the 30 s lease did not hold");
    hilock_acquire_opts once = opts_wait(0);
    got g2 = acquire_now(&e, other, "ext-wd", &once);
    cr_expect_eq(g2.status, HILOCK_EBUSY, "a second holder: %s", hilock_strerror(g2.status));
    if (g2.status == 0) release_now(&e, g2.hold);
    cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
    hilock_client_free(other);
}

/* A second hilock_client_close() gets its callback too, once. */
Test(mutex_regress, second_close_gets_its_callback) {
    hilock_client *c = ready_client();
    got g = acquire_now(&e, c, "close2", NULL);
    cr_assert_eq(g.status, 0);
    int first = 0, second = 0;
    hilock_client_close(c, count_closed, &first);
    hilock_client_close(c, count_closed, &second);
    long long t0 = test_now_ms();
    while ((first == 0 || second == 0) && test_now_ms() - t0 < 3000) test_loop_for(e.base, 10);
    cr_expect_eq(first, 1);
    cr_expect_eq(second, 1);
    test_loop_for(e.base, 50);
    cr_expect_eq(first + second, 2);
    cr_expect_eq(lock_exists(&e.r, "close2"), 0);
}
