/* Attacks on the mutex core and the client's edges, against a real
 * redis-server: callbacks re-entering the API (release and close from a
 * lost callback, close from its own callback), leases that a stalled
 * server outlives, replies later than request_timeout_ms, connections
 * killed with releases and extensions in flight, a thousand waiters
 * cancelled in random order while the lock passes around, and reentrant
 * holds that are lost. Each checks callbacks exactly once, exclusion,
 * fences, and what is left in Redis. */
#include <sys/wait.h>
#include <unistd.h>
#include "support/lockenv.h"
#include "prim/prim.h" /* hl_script_mutex_release */

static lockenv e;

static void setup(void) { lockenv_start_debuggable(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(mutex_edges, .init = setup, .fini = teardown, .timeout = 40);

/* A client whose connections are up. */
static hilock_client *ready_client_cfg(const hilock_config *cfg) {
    hilock_client *c = lockenv_client_cfg(&e, cfg);
    got g = acquire_now(&e, c, "warm-up", NULL);
    cr_assert_eq(g.status, 0);
    cr_assert_eq(release_now(&e, g.hold), 0);
    return c;
}

static hilock_client *ready_client(void) {
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    return ready_client_cfg(&cfg);
}

/* Keys under the prefix that are not fence keys (SCAN). */
static long long nonfence_keys(void) {
    redisContext *k = test_redis_connect(&e.r);
    long long n = 0;
    char cursor[32] = "0";
    do {
        redisReply *rep = redisCommand(k, "SCAN %s MATCH hilock:* COUNT 1000", cursor);
        cr_assert(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2);
        snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
        for (size_t i = 0; i < rep->element[1]->elements; i++) {
            const char *key = rep->element[1]->element[i]->str;
            size_t len = strlen(key);
            if (len < 6 || strcmp(key + len - 6, ":fence") != 0) n++;
        }
        freeReplyObject(rep);
    } while (strcmp(cursor, "0") != 0);
    redisFree(k);
    return n;
}

static void ctl_check(redisReply *rep, const char *cmd) {
    cr_assert_not_null(rep, "%s: no reply", cmd);
    cr_assert_neq(rep->type, REDIS_REPLY_ERROR, "%s: %s", cmd, rep->str);
    freeReplyObject(rep);
}
/* A command whose words are split by hiredis (a literal format). */
#define ctl(cmd) ctl_check(test_redis_cmd(&e.r, cmd), cmd)

/* ---- Re-entering the API from callbacks ------------------------------- */

typedef struct relost {
    int lost_calls, lost_why, extend_rc, release_rc, again_rc;
    rel r;
} relost;

static void release_in_lost(hilock_hold *h, int why, void *data) {
    relost *x = data;
    x->lost_calls++;
    x->lost_why = why;
    x->extend_rc = hilock_hold_extend(h, 5000, NULL, NULL);
    x->release_rc = hilock_release(h, rel_cb, &x->r);
    x->again_rc = hilock_release(h, rel_cb, &x->r);
}

/* The lost callback releases its hold (and tries to extend it): the
 * release reports the loss once, and nothing is left behind. */
Test(mutex_edges, release_from_the_lost_callback) {
    hilock_client *c = ready_client();
    relost x;
    memset(&x, 0, sizeof(x));
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 300);
    o.lost_cb = release_in_lost;
    o.lost_data = &x;
    got g = acquire_now(&e, c, "rl", &o);
    cr_assert_eq(g.status, 0);
    cr_assert_eq(test_redis_int(&e.r, "DEL hilock:{rl}"), 1);
    cr_assert(test_loop_until(e.base, &x.r.calls, 3000));
    test_loop_for(e.base, 300);
    cr_expect_eq(x.lost_calls, 1);
    cr_expect_eq(x.lost_why, HILOCK_ELOST);
    cr_expect_eq(x.extend_rc, HILOCK_ELOST);
    cr_expect_eq(x.release_rc, 0);
    cr_expect_eq(x.again_rc, HILOCK_EINVAL);
    cr_expect_eq(x.r.calls, 1);
    cr_expect_eq(x.r.status, HILOCK_ELOST);
    hilock_stats s = stats_of(c);
    cr_expect_eq(s.holds, 0);
    cr_expect_eq(s.holds_lost, 1);
    hilock_client_free(c);
    cr_expect_eq(nonfence_keys(), 0);
}

typedef struct closes {
    hilock_client *c;
    int first, second, third;
} closes;

static void third_closed(void *data) { ((closes *)data)->third++; }
static void second_closed(void *data) { ((closes *)data)->second++; }

static void first_closed(void *data) {
    closes *k = data;
    k->first++;
    /* From inside its own callback: a close adds its callback (it runs
     * once, with this close's), and a free ends it all. */
    hilock_client_close(k->c, second_closed, k);
    hilock_client_free(k->c);
    hilock_client_close(k->c, third_closed, k); /* freeing: nothing */
}

Test(mutex_edges, close_and_free_from_the_close_callback) {
    closes k;
    memset(&k, 0, sizeof(k));
    k.c = ready_client();
    got g = acquire_now(&e, k.c, "cc", NULL);
    cr_assert_eq(g.status, 0);
    hilock_client_close(k.c, first_closed, &k);
    long long t0 = test_now_ms();
    while (k.first == 0 && test_now_ms() - t0 < 3000) test_loop_for(e.base, 10);
    test_loop_for(e.base, 100);
    cr_expect_eq(k.first, 1);
    cr_expect_eq(k.second, 1);
    cr_expect_eq(k.third, 0);
    cr_expect_eq(nonfence_keys(), 0);
}

typedef struct cl_in_cb {
    hilock_client *c;
    int acq, rel_calls, rel_status, closed, lost;
    int close_again_rc;
    hilock_hold *h;
} cl_in_cb;

static void count_close(void *data) { ((cl_in_cb *)data)->closed++; }

static void close_in_release(int status, void *data) {
    cl_in_cb *x = data;
    x->rel_calls++;
    x->rel_status = status;
    hilock_client_close(x->c, count_close, x);
    hilock_client_close(x->c, count_close, x);
}

/* A close begun from a release callback while another hold and a waiter
 * are live: each callback once, both closes' callbacks once each. */
Test(mutex_edges, close_twice_from_a_release_callback) {
    hilock_client *c = ready_client(), *other = ready_client();
    cl_in_cb x;
    memset(&x, 0, sizeof(x));
    x.c = c;
    got g1 = acquire_now(&e, c, "cr1", NULL), g2 = acquire_now(&e, c, "cr2", NULL);
    got go = acquire_now(&e, other, "cr3", NULL);
    cr_assert_eq(g1.status, 0);
    cr_assert_eq(g2.status, 0);
    got w = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(c, "cr3", NULL, got_cb, &w, NULL), 0);
    cr_assert_eq(hilock_release(g1.hold, close_in_release, &x), 0);
    long long t0 = test_now_ms();
    while (x.closed < 2 && test_now_ms() - t0 < 3000) test_loop_for(e.base, 10);
    test_loop_for(e.base, 100);
    cr_expect_eq(x.rel_calls, 1);
    cr_expect_eq(x.rel_status, 0);
    cr_expect_eq(x.closed, 2);
    cr_expect_eq(w.calls, 1);
    cr_expect_eq(w.status, HILOCK_ECANCELED);
    cr_expect_eq(lock_exists(&e.r, "cr1"), 0);
    cr_expect_eq(lock_exists(&e.r, "cr2"), 0);
    cr_expect_eq(release_now(&e, go.hold), 0);
    hilock_client_free(other);
    cr_expect_eq(nonfence_keys(), 0);
}

/* ---- A stalled server and the lease ------------------------------------ */

static void wait_child(pid_t p) {
    int st;
    cr_assert_eq(waitpid(p, &st, 0), p);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "DEBUG SLEEP failed");
}

/* A stall a little longer than the lease: lost once, the next holder's
 * fence is larger, the old release says ELOST. A stall a little shorter
 * (a lease three times as long): nothing is lost. */
Test(mutex_edges, stall_just_longer_and_just_shorter_than_the_lease) {
    hilock_client *a = ready_client(), *b = ready_client();
    lostrec la = {0, 0, 0}, lb = {0, 0, 0};
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 400);
    o.lost_cb = lost_cb;
    o.lost_data = &la;
    got ga = acquire_now(&e, a, "st", &o);
    cr_assert_eq(ga.status, 0);
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "st", NULL, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 50);
    pid_t p = test_redis_debug_sleep(&e.r, "0.6");
    cr_assert(test_loop_until(e.base, &la.calls, 3000));
    wait_child(p);
    cr_assert(test_loop_until(e.base, &gb.calls, 3000));
    cr_expect_eq(gb.status, 0);
    cr_expect_gt(hilock_hold_fence(gb.hold), hilock_hold_fence(ga.hold));
    cr_expect_eq(release_now(&e, ga.hold), HILOCK_ELOST);
    cr_expect_eq(release_now(&e, gb.hold), 0);
    cr_expect_eq(la.calls, 1);

    hilock_acquire_opts o2 = opts_wait_lease(HILOCK_WAIT_FOREVER, 900);
    o2.lost_cb = lost_cb;
    o2.lost_data = &lb;
    got g2 = acquire_now(&e, a, "st2", &o2);
    cr_assert_eq(g2.status, 0);
    test_loop_for(e.base, 20);
    p = test_redis_debug_sleep(&e.r, "0.25");
    test_loop_for(e.base, 1200);
    wait_child(p);
    cr_expect_eq(lb.calls, 0);
    cr_expect_eq(hilock_hold_lost(g2.hold), 0);
    cr_expect_eq(release_now(&e, g2.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
    cr_expect_eq(nonfence_keys(), 0);
}

/* A try (try-once: a wait with time left would try again) and a release
 * that the server answers after request_timeout_ms: each callback once
 * (EDEADLINE), the late replies go nowhere, and the lock the late try took
 * and the release that did not run are both put right in the background,
 * well before the 30 s lease. */
Test(mutex_edges, replies_later_than_the_request_timeout) {
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.request_timeout_ms = 300;
    hilock_client *a = ready_client_cfg(&cfg), *b = ready_client();
    got held = acquire_now(&e, a, "late-rel", NULL);
    cr_assert_eq(held.status, 0);
    pid_t p = test_redis_debug_sleep(&e.r, "0.8");
    test_msleep(50);
    got g = {0, 0, NULL, 0};
    rel r = {0, 0};
    hilock_acquire_opts once = opts_wait(0);
    cr_assert_eq(hilock_acquire(a, "late-try", &once, got_cb, &g, NULL), 0);
    cr_assert_eq(hilock_release(held.hold, rel_cb, &r), 0);
    cr_assert(test_loop_until(e.base, &g.calls, 3000));
    cr_assert(test_loop_until(e.base, &r.calls, 3000));
    cr_expect_eq(g.status, HILOCK_EDEADLINE, "try: %s", hilock_strerror(g.status));
    cr_expect_eq(r.status, HILOCK_EDEADLINE, "release: %s", hilock_strerror(r.status));
    wait_child(p);
    hilock_acquire_opts w = opts_wait(3000);
    got gb = acquire_now(&e, b, "late-rel", &w);
    cr_expect_eq(gb.status, 0, "late-rel: %s", hilock_strerror(gb.status));
    got gt = acquire_now(&e, b, "late-try", &w);
    cr_expect_eq(gt.status, 0, "late-try: %s", hilock_strerror(gt.status));
    if (gb.status == 0) release_now(&e, gb.hold);
    if (gt.status == 0) release_now(&e, gt.hold);
    test_loop_for(e.base, 200);
    cr_expect_eq(g.calls, 1);
    cr_expect_eq(r.calls, 1);
    hilock_client_free(a);
    hilock_client_free(b);
    cr_expect_eq(nonfence_keys(), 0);
}

/* ---- Connections killed with requests in flight ------------------------ */

/* CLIENT PAUSE WRITE holds the release (a write script) in the server; the
 * connection is killed under it, and the release is sent again on the next
 * one: it succeeds, once. The same for an extension. */
Test(mutex_edges, release_and_extend_across_a_killed_connection) {
    hilock_client *c = ready_client();
    got g1 = acquire_now(&e, c, "kr1", NULL), g2 = acquire_now(&e, c, "kr2", NULL);
    cr_assert_eq(g1.status, 0);
    cr_assert_eq(g2.status, 0);
    ctl("CLIENT PAUSE 400 WRITE");
    rel r = {0, 0}, x = {0, 0};
    cr_assert_eq(hilock_release(g1.hold, rel_cb, &r), 0);
    cr_assert_eq(hilock_hold_extend(g2.hold, 20000, rel_cb, &x), 0);
    test_loop_for(e.base, 100);
    cr_expect_eq(r.calls, 0);
    cr_assert_geq(test_redis_int(&e.r, "CLIENT KILL TYPE normal"), 1);
    cr_assert(test_loop_until(e.base, &r.calls, 3000));
    cr_assert(test_loop_until(e.base, &x.calls, 3000));
    test_loop_for(e.base, 100);
    cr_expect_eq(r.calls, 1);
    cr_expect_eq(r.status, 0, "release: %s", hilock_strerror(r.status));
    cr_expect_eq(x.calls, 1);
    cr_expect_eq(x.status, 0, "extend: %s", hilock_strerror(x.status));
    cr_expect_eq(lock_exists(&e.r, "kr1"), 0);
    cr_expect_gt(test_redis_int(&e.r, "PTTL hilock:{kr2}"), 15000);
    cr_expect_eq(release_now(&e, g2.hold), 0);
    hilock_client_free(c);
    cr_expect_eq(nonfence_keys(), 0);
}

/* ---- Many waiters, cancelled in random order ------------------------- */

#define NW 1000

typedef struct storm {
    int inside, overlaps, regressions, granted, cancelled, other, calls;
    uint64_t last_fence;
    int done;
} storm;

typedef struct waiter {
    storm *s;
    hilock_wait *w;
    int calls;
    int ended;
} waiter;

static void storm_cb(hilock_hold *h, int status, void *data) {
    waiter *wt = data;
    storm *s = wt->s;
    wt->calls++;
    wt->ended = 1;
    s->calls++;
    if (status == HILOCK_ECANCELED) { s->cancelled++; return; }
    if (status != 0) { s->other++; return; }
    s->granted++;
    if (s->inside) s->overlaps++;
    s->inside = 1;
    if (hilock_hold_fence(h) <= s->last_fence) s->regressions++;
    s->last_fence = hilock_hold_fence(h);
    s->inside = 0;
    cr_assert_eq(hilock_release(h, NULL, NULL), 0);
}

Test(mutex_edges, a_thousand_waiters_cancelled_in_random_order) {
    hilock_client *c[2] = {ready_client(), ready_client()};
    static waiter ws[NW];
    storm s;
    memset(&s, 0, sizeof(s));
    memset(ws, 0, sizeof(ws));
    for (int i = 0; i < NW; i++) {
        ws[i].s = &s;
        cr_assert_eq(hilock_acquire(c[i % 2], "storm", NULL, storm_cb, &ws[i], &ws[i].w), 0);
    }
    int order[NW];
    for (int i = 0; i < NW; i++) order[i] = i;
    srand(12345);
    for (int i = NW - 1; i > 0; i--) {
        int j = rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    /* Cancel two thirds, a few at a time, while the lock passes around. */
    for (int i = 0; i < NW * 2 / 3; i++) {
        waiter *wt = &ws[order[i]];
        if (!wt->ended) {
            int rc = hilock_wait_cancel(wt->w);
            cr_assert(rc == 0 || rc == HILOCK_EINVAL, "cancel: %d", rc);
        }
        if (i % 25 == 0) event_base_loop(e.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
    long long t0 = test_now_ms();
    while (s.calls < NW && test_now_ms() - t0 < 20000) test_loop_for(e.base, 20);
    test_loop_for(e.base, 200);
    cr_expect_eq(s.calls, NW, "%d callbacks", s.calls);
    for (int i = 0; i < NW; i++) cr_expect_eq(ws[i].calls, 1, "waiter %d: %d callbacks", i, ws[i].calls);
    cr_expect_eq(s.overlaps, 0);
    cr_expect_eq(s.regressions, 0);
    cr_expect_eq(s.other, 0);
    cr_expect_eq(s.granted + s.cancelled, NW);
    for (int k = 0; k < 2; k++) {
        hilock_stats st = stats_of(c[k]);
        cr_expect_eq(st.waiters, 0);
        cr_expect_eq(st.holds, 0);
    }
    test_loop_for(e.base, 300);
    cr_expect_eq(nonfence_keys(), 0);
    hilock_client_free(c[0]);
    hilock_client_free(c[1]);
}

/* ---- Reentrancy and loss ---------------------------------------------- */

/* An owner's hold taken twice is lost: the lost callback runs once, the
 * inner release drops a level (0), the outer says ELOST, and the owner's
 * next acquire goes to Redis for a new hold rather than re-using the lost
 * one. */
Test(mutex_edges, reentrant_hold_lost_then_released_inner_first) {
    hilock_client *c = ready_client();
    hilock_owner *ow = hilock_owner_new(c);
    lostrec l = {0, 0, 0};
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 300);
    o.owner = ow;
    o.lost_cb = lost_cb;
    o.lost_data = &l;
    got outer = acquire_now(&e, c, "re", &o), inner = acquire_now(&e, c, "re", &o);
    cr_assert_eq(outer.status, 0);
    cr_assert_eq(inner.hold, outer.hold);
    cr_assert_eq(hilock_hold_count(outer.hold), 2);
    cr_assert_eq(test_redis_int(&e.r, "DEL hilock:{re}"), 1);
    cr_assert(test_loop_until(e.base, &l.calls, 3000));
    got again = acquire_now(&e, c, "re", &o);
    cr_expect_eq(again.status, 0);
    cr_expect_neq(again.hold, outer.hold);
    cr_expect_gt(hilock_hold_fence(again.hold), hilock_hold_fence(outer.hold));
    cr_expect_eq(release_now(&e, inner.hold), 0);
    cr_expect_eq(release_now(&e, outer.hold), HILOCK_ELOST);
    cr_expect_eq(lock_exists(&e.r, "re"), 1); /* the new hold's */
    cr_expect_eq(release_now(&e, again.hold), 0);
    test_loop_for(e.base, 100);
    cr_expect_eq(l.calls, 1);
    hilock_owner_free(ow);
    hilock_client_free(c);
    cr_expect_eq(nonfence_keys(), 0);
}

typedef struct brec {
    int calls, status;
    uint64_t fence;
} brec;

static void brk_cb(int status, uint64_t fence, void *data) {
    brec *b = data;
    b->calls++;
    b->status = status;
    b->fence = fence;
}

/* A break while the holder's renewal is held up in the server: the
 * holder hears of it once, a waiter gets the lock with a larger fence. */
Test(mutex_edges, break_while_a_renewal_is_in_flight) {
    hilock_client *a = ready_client(), *b = ready_client(), *op = ready_client();
    lostrec l = {0, 0, 0};
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 600);
    o.lost_cb = lost_cb;
    o.lost_data = &l;
    got ga = acquire_now(&e, a, "brk", &o);
    cr_assert_eq(ga.status, 0);
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "brk", NULL, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 150);
    ctl("CLIENT PAUSE 250 WRITE");
    test_loop_for(e.base, 100); /* the renewal (at 200 ms) waits in the server */
    brec b0 = {0, 0, 0};
    cr_assert_eq(hilock_break(op, "brk", brk_cb, &b0), 0);
    cr_assert(test_loop_until(e.base, &b0.calls, 3000));
    cr_expect_eq(b0.status, 0);
    cr_expect_eq(b0.fence, hilock_hold_fence(ga.hold));
    cr_assert(test_loop_until(e.base, &gb.calls, 3000));
    cr_expect_eq(gb.status, 0);
    cr_expect_gt(hilock_hold_fence(gb.hold), hilock_hold_fence(ga.hold));
    cr_assert(test_loop_until(e.base, &l.calls, 3000));
    cr_expect_eq(release_now(&e, ga.hold), HILOCK_ELOST);
    cr_expect_eq(release_now(&e, gb.hold), 0);
    test_loop_for(e.base, 100);
    cr_expect_eq(l.calls, 1);
    cr_expect_eq(b0.calls, 1);
    hilock_client_free(a);
    hilock_client_free(b);
    hilock_client_free(op);
    cr_expect_eq(nonfence_keys(), 0);
}


/* Two acquires of one owner share a grant (count 2). The first callback
 * releases both levels and frees the owner, then makes a new owner (which
 * malloc may well put where the old one was). The second grant is stale
 * and is tried again: the hold it gets must not be the freed owner's, nor
 * the new owner's by accident of the address. */
typedef struct ownfree {
    hilock_client *c;
    hilock_owner *o, *o2;
    hilock_hold *h2;
    int calls1, calls2, status2;
} ownfree;

static void ownfree_first(hilock_hold *h, int status, void *data) {
    ownfree *x = data;
    x->calls1++;
    if (status != 0) return;
    unsigned n = hilock_hold_count(h);
    for (unsigned i = 0; i < n; i++) cr_expect_eq(hilock_release(h, NULL, NULL), 0);
    hilock_owner_free(x->o);
    x->o = NULL;
    x->o2 = hilock_owner_new(x->c);
}

static void ownfree_second(hilock_hold *h, int status, void *data) {
    ownfree *x = data;
    x->calls2++;
    x->status2 = status;
    x->h2 = h;
}

Test(mutex_edges, owner_freed_while_its_stale_grant_is_retried) {
    ownfree x;
    memset(&x, 0, sizeof(x));
    x.c = ready_client();
    hilock_client *other = ready_client();
    got go = acquire_now(&e, other, "of", NULL);
    cr_assert_eq(go.status, 0);
    x.o = hilock_owner_new(x.c);
    hilock_acquire_opts o = opts_wait(HILOCK_WAIT_FOREVER);
    o.owner = x.o;
    cr_assert_eq(hilock_acquire(x.c, "of", &o, ownfree_first, &x, NULL), 0);
    cr_assert_eq(hilock_acquire(x.c, "of", &o, ownfree_second, &x, NULL), 0);
    test_loop_for(e.base, 50);
    cr_assert_eq(release_now(&e, go.hold), 0);
    cr_assert(test_loop_until(e.base, &x.calls2, 3000));
    cr_expect_eq(x.calls1, 1);
    cr_expect_eq(x.status2, 0, "second: %s", hilock_strerror(x.status2));
    cr_assert_not_null(x.o2);
    /* The new owner holds nothing: its try-once acquire meets the second
     * wait's hold in Redis. */
    hilock_acquire_opts once = opts_wait(0);
    once.owner = x.o2;
    got g = acquire_now(&e, x.c, "of", &once);
    cr_expect_eq(g.status, HILOCK_EBUSY, "a fresh owner got %s", hilock_strerror(g.status));
    if (g.status == 0) cr_expect_neq(g.hold, x.h2, "a fresh owner re-entered another's hold");
    if (g.status == 0) release_now(&e, g.hold);
    if (x.status2 == 0) cr_expect_eq(release_now(&e, x.h2), 0);
    hilock_owner_free(x.o2);
    hilock_client_free(x.c);
    hilock_client_free(other);
    cr_expect_eq(nonfence_keys(), 0);
}

/* ---- Server-side refusals and flushes under contention ---------------- */

typedef struct chain {
    int calls, granted, inside, overlaps, regressions, other, last_err;
    uint64_t last_fence;
} chain;

static void chain_cb(hilock_hold *h, int status, void *data) {
    chain *s = data;
    s->calls++;
    if (status != 0) { s->other++; s->last_err = status; return; }
    s->granted++;
    if (s->inside) s->overlaps++;
    s->inside = 1;
    if (hilock_hold_fence(h) <= s->last_fence) s->regressions++;
    s->last_fence = hilock_hold_fence(h);
    s->inside = 0;
    cr_assert_eq(hilock_release(h, NULL, NULL), 0);
}

/* SCRIPT FLUSH every few ms while 200 waiters of two clients pass one
 * lock around: every script is re-sent as EVAL; all are granted, in turn,
 * each once. */
Test(mutex_edges, script_flush_during_contention) {
    hilock_client *c[2] = {ready_client(), ready_client()};
    chain s;
    memset(&s, 0, sizeof(s));
    for (int i = 0; i < 200; i++)
        cr_assert_eq(hilock_acquire(c[i % 2], "sf", NULL, chain_cb, &s, NULL), 0);
    redisContext *k = test_redis_connect(&e.r);
    long long t0 = test_now_ms();
    while (s.calls < 200 && test_now_ms() - t0 < 15000) {
        freeReplyObject(redisCommand(k, "SCRIPT FLUSH"));
        test_loop_for(e.base, 3);
    }
    redisFree(k);
    test_loop_for(e.base, 200);
    cr_expect_eq(s.calls, 200);
    cr_expect_eq(s.granted, 200, "%d granted, last error %s", s.granted, hilock_strerror(s.last_err));
    cr_expect_eq(s.overlaps, 0);
    cr_expect_eq(s.regressions, 0);
    cr_expect_eq(nonfence_keys(), 0);
    hilock_client_free(c[0]);
    hilock_client_free(c[1]);
}

/* maxmemory reached with noeviction while a hold renews and a waiter
 * waits: the hold is kept (renewals write no new key), the waiter's try,
 * which must write, ends with HILOCK_EOOM once, and nothing is left. The
 * waiter races (a starving one takes a place, a write: the next test). */
Test(mutex_edges, out_of_memory_with_a_hold_and_a_waiter) {
    hilock_config racing;
    lockenv_config(&racing, e.r.url);
    racing.starve_ms = HILOCK_STARVE_NEVER;
    hilock_client *a = ready_client(), *b = ready_client_cfg(&racing);
    lostrec l = {0, 0, 0};
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 300);
    o.lost_cb = lost_cb;
    o.lost_data = &l;
    got ga = acquire_now(&e, a, "oom", &o);
    cr_assert_eq(ga.status, 0);
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "oom", NULL, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 50);
    cr_assert_eq(test_redis_int(&e.r, "SET filler x"), -1);
    ctl("CONFIG SET maxmemory-policy noeviction");
    ctl("CONFIG SET maxmemory 1");
    test_loop_for(e.base, 700); /* a few renewals */
    cr_expect_eq(l.calls, 0, "lost under OOM: %s", hilock_strerror(l.why));
    cr_expect_eq(gb.calls, 0);
    cr_expect_eq(release_now(&e, ga.hold), l.calls ? HILOCK_ELOST : 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 3000));
    cr_expect_eq(gb.status, HILOCK_EOOM, "waiter: %s", hilock_strerror(gb.status));
    ctl("CONFIG SET maxmemory 0");
    got g2 = acquire_now(&e, b, "oom", NULL);
    cr_expect_eq(g2.status, 0);
    if (g2.status == 0) release_now(&e, g2.hold);
    test_loop_for(e.base, 100);
    cr_expect_eq(gb.calls, 1);
    cr_expect_eq(test_redis_int(&e.r, "DEL filler"), 1);
    cr_expect_eq(nonfence_keys(), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* The same with a waiter that starves (50 ms) while the server is out of
 * memory: taking its place is a write, which Redis refuses, and the wait
 * ends with HILOCK_EOOM at once; the hold goes on, its release works, and
 * nothing is left. */
Test(mutex_edges, out_of_memory_when_a_wait_starves) {
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.starve_ms = 50;
    hilock_client *a = ready_client(), *b = ready_client_cfg(&cfg);
    got ga = acquire_now(&e, a, "oom-s", NULL);
    cr_assert_eq(ga.status, 0);
    cr_assert_eq(test_redis_int(&e.r, "SET filler x"), -1);
    ctl("CONFIG SET maxmemory-policy noeviction");
    ctl("CONFIG SET maxmemory 1");
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "oom-s", NULL, got_cb, &gb, NULL), 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 3000));
    cr_expect_eq(gb.status, HILOCK_EOOM, "waiter: %s", hilock_strerror(gb.status));
    cr_expect_eq(release_now(&e, ga.hold), 0);
    ctl("CONFIG SET maxmemory 0");
    got g2 = acquire_now(&e, b, "oom-s", NULL);
    cr_expect_eq(g2.status, 0);
    if (g2.status == 0) release_now(&e, g2.hold);
    test_loop_for(e.base, 100);
    cr_expect_eq(test_redis_int(&e.r, "DEL filler"), 1);
    cr_expect_eq(nonfence_keys(), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* The password changes while connected, then the connections are killed:
 * the holder cannot renew and hears EAUTH once, its waiter and a new try
 * fail with EAUTH; once the password is back, all works again. */
Test(mutex_edges, password_changed_then_a_reconnect) {
    hilock_client *a = ready_client();
    lostrec l = {0, 0, 0};
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 600);
    o.lost_cb = lost_cb;
    o.lost_data = &l;
    got ga = acquire_now(&e, a, "pw", &o);
    cr_assert_eq(ga.status, 0);
    ctl("CONFIG SET requirepass sekrit");
    redisContext *k = test_redis_connect(&e.r);
    freeReplyObject(redisCommand(k, "AUTH sekrit"));
    freeReplyObject(redisCommand(k, "CLIENT KILL TYPE normal"));
    freeReplyObject(redisCommand(k, "CLIENT KILL TYPE pubsub"));
    cr_assert(test_loop_until(e.base, &l.calls, 3000));
    cr_expect_eq(l.why, HILOCK_EAUTH, "lost with %s", hilock_strerror(l.why));
    got gw = acquire_loop(e.base, a, "pw2", NULL, 3000);
    cr_expect_eq(gw.status, HILOCK_EAUTH, "acquire: %s", hilock_strerror(gw.status));
    freeReplyObject(redisCommand(k, "CONFIG SET requirepass %s", ""));
    redisFree(k);
    int st = release_now(&e, ga.hold);
    cr_expect(st == HILOCK_ELOST || st == HILOCK_EAUTH, "release: %s", hilock_strerror(st));
    hilock_acquire_opts w = opts_wait(3000);
    got g2 = acquire_now(&e, a, "pw", &w);
    cr_expect_eq(g2.status, 0, "after: %s", hilock_strerror(g2.status));
    if (g2.status == 0) release_now(&e, g2.hold);
    test_loop_for(e.base, 100);
    cr_expect_eq(l.calls, 1);
    hilock_client_free(a);
    cr_expect_eq(nonfence_keys(), 0);
}

/* CLIENT PAUSE WRITE twice during a storm of 300 acquires from three
 * clients: every try waits in the server, then all are served in turn. */
Test(mutex_edges, client_pause_write_during_an_acquire_storm) {
    hilock_client *c[3] = {ready_client(), ready_client(), ready_client()};
    chain s;
    memset(&s, 0, sizeof(s));
    for (int i = 0; i < 150; i++)
        cr_assert_eq(hilock_acquire(c[i % 3], "pause", NULL, chain_cb, &s, NULL), 0);
    ctl("CLIENT PAUSE 300 WRITE");
    for (int i = 150; i < 300; i++)
        cr_assert_eq(hilock_acquire(c[i % 3], "pause", NULL, chain_cb, &s, NULL), 0);
    test_loop_for(e.base, 400);
    ctl("CLIENT PAUSE 300 WRITE");
    long long t0 = test_now_ms();
    while (s.calls < 300 && test_now_ms() - t0 < 15000) test_loop_for(e.base, 20);
    test_loop_for(e.base, 200);
    cr_expect_eq(s.calls, 300);
    cr_expect_eq(s.granted, 300, "%d granted, last error %s", s.granted, hilock_strerror(s.last_err));
    cr_expect_eq(s.overlaps, 0);
    cr_expect_eq(s.regressions, 0);
    cr_expect_eq(nonfence_keys(), 0);
    for (int i = 0; i < 3; i++) hilock_client_free(c[i]);
}

typedef struct lostclose {
    hilock_client *c;
    hilock_hold *h2, *h3;
    int lost, closed, ext_rc, ext_calls, ext_status, rel_rc, rel_calls, rel_status;
} lostclose;

static void lc_closed(void *data) { ((lostclose *)data)->closed++; }
static void lc_ext(int status, void *data) {
    lostclose *x = data;
    x->ext_calls++;
    x->ext_status = status;
}
static void lc_rel(int status, void *data) {
    lostclose *x = data;
    x->rel_calls++;
    x->rel_status = status;
}

/* Sends an extension of one hold and the release of another, then closes
 * the client with both in flight. */
static void close_in_lost(hilock_hold *h, int why, void *data) {
    lostclose *x = data;
    (void)h; (void)why;
    x->lost++;
    x->ext_rc = hilock_hold_extend(x->h2, 5000, lc_ext, x);
    x->rel_rc = hilock_release(x->h3, lc_rel, x);
    hilock_client_close(x->c, lc_closed, x);
    hilock_client_close(x->c, NULL, NULL);
}

/* The lost callback of one hold extends a second, releases a third and
 * closes the client: each callback once, the extension and the release
 * succeed, and every key is given back. */
Test(mutex_edges, close_from_the_lost_callback_with_requests_in_flight) {
    lostclose x;
    memset(&x, 0, sizeof(x));
    x.c = ready_client();
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 300);
    o.lost_cb = close_in_lost;
    o.lost_data = &x;
    got g1 = acquire_now(&e, x.c, "lc1", &o), g2 = acquire_now(&e, x.c, "lc2", NULL);
    got g3 = acquire_now(&e, x.c, "lc3", NULL);
    cr_assert_eq(g1.status + g2.status + g3.status, 0);
    x.h2 = g2.hold;
    x.h3 = g3.hold;
    cr_assert_eq(test_redis_int(&e.r, "DEL hilock:{lc1}"), 1);
    long long t0 = test_now_ms();
    while (x.closed == 0 && test_now_ms() - t0 < 3000) test_loop_for(e.base, 10);
    test_loop_for(e.base, 100);
    cr_expect_eq(x.lost, 1);
    cr_expect_eq(x.closed, 1);
    cr_expect_eq(x.ext_rc, 0);
    cr_expect_eq(x.ext_calls, 1);
    cr_expect_eq(x.ext_status, 0, "extend: %s", hilock_strerror(x.ext_status));
    cr_expect_eq(x.rel_rc, 0);
    cr_expect_eq(x.rel_calls, 1);
    cr_expect_eq(x.rel_status, 0, "release: %s", hilock_strerror(x.rel_status));
    cr_expect_eq(nonfence_keys(), 0);
}

/* ---- Redlock: a renewal re-sent behind the release --------------------- */

/* Redlock's renewal carries the fence, and puts the key back on a master
 * that lost it. When the renewal is answered NOSCRIPT (a SCRIPT FLUSH) and
 * the release right behind it is not (its script cached again meanwhile),
 * the renewal, re-sent as EVAL, lands after the release: it must not leave
 * the released lock in place for a lease on every master. */
static void redlock_resent_behind_the_release(int extend) {
    test_redis more[2];
    for (int i = 0; i < 2; i++) cr_assert_eq(test_redis_start(&more[i], 0, NULL), 0);
    test_redis *srv[3] = {&e.r, &more[0], &more[1]};
    char url[256];
    snprintf(url, sizeof(url), "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", srv[0]->port,
             srv[1]->port, srv[2]->port);
    hilock_config cfg;
    lockenv_config(&cfg, url);
    hilock_client *c = lockenv_client_cfg(&e, &cfg);
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 1500);
    got g = acquire_now(&e, c, "rz", &o);
    cr_assert_eq(g.status, 0, "%s", hilock_strerror(g.status));
    /* One renewal first: the client then sends the next (or an
     * extension, the same script) as EVALSHA. */
    uint64_t renewals = stats_of(c).renewals;
    long long t0 = test_now_ms();
    while (stats_of(c).renewals == renewals && test_now_ms() - t0 < 1500) test_loop_for(e.base, 5);
    test_loop_for(e.base, 50);
    for (int i = 0; i < 3; i++) {
        redisContext *k = test_redis_connect(srv[i]);
        freeReplyObject(redisCommand(k, "SCRIPT FLUSH"));
        freeReplyObject(redisCommand(k, "SCRIPT LOAD %s", hl_script_mutex_release.body));
        freeReplyObject(redisCommand(k, "CLIENT PAUSE 800 WRITE"));
        redisFree(k);
    }
    rel x = {0, 0};
    if (extend) {
        cr_assert_eq(hilock_hold_extend(g.hold, 1500, rel_cb, &x), 0);
        test_loop_for(e.base, 20);
    } else {
        renewals = stats_of(c).renewals;
        t0 = test_now_ms();
        while (stats_of(c).renewals == renewals && test_now_ms() - t0 < 1000)
            test_loop_for(e.base, 5);
        cr_assert_gt(stats_of(c).renewals, renewals, "no renewal sent");
    }
    rel r = {0, 0};
    cr_assert_eq(hilock_release(g.hold, rel_cb, &r), 0);
    cr_assert(test_loop_until(e.base, &r.calls, 3000));
    cr_expect_eq(r.status, 0, "release: %s", hilock_strerror(r.status));
    test_loop_for(e.base, 200);
    int left = 0;
    for (int i = 0; i < 3; i++) left += test_redis_int(srv[i], "EXISTS hilock:{rz}") == 1;
    cr_expect_eq(left, 0, "the released lock is back on %d of 3 masters", left);
    if (extend) cr_expect_eq(x.calls, 1);
    hilock_client_free(c);
    for (int i = 0; i < 2; i++) test_redis_stop(&more[i]);
}

Test(mutex_edges, redlock_renewal_resent_behind_the_release) {
    redlock_resent_behind_the_release(0);
}

Test(mutex_edges, redlock_extension_resent_behind_the_release) {
    redlock_resent_behind_the_release(1);
}

/* ---- A try behind a wait -------------------------------------------------- */

/* A try once behind a wait of the same client on a server that is down:
 * it was HILOCK_EBUSY at once, though nothing had said the lock was taken
 * (a wrong address must never look like a busy lock). It now shares the
 * outcome of the wait's try in flight: the connection's error. */
Test(mutex_edges, a_try_behind_a_wait_on_a_dead_server_is_no_busy_lock) {
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", test_refused_port());
    hilock_client *c = lockenv_client_url(&e, url, 0);
    hilock_acquire_opts wait = opts_wait(3000), once = opts_wait(0);
    got gw = {0, 0, NULL, 0}, gt = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(c, "down", &wait, got_cb, &gw, NULL), 0);
    cr_assert_eq(hilock_acquire(c, "down", &once, got_cb, &gt, NULL), 0);
    cr_assert(test_loop_until(e.base, &gt.calls, 5000));
    cr_expect_eq(gt.status, HILOCK_ECONN, "the try: %s", hilock_strerror(gt.status));
    cr_assert(test_loop_until(e.base, &gw.calls, 5000));
    cr_expect_eq(gw.status, HILOCK_ECONN, "the wait: %s", hilock_strerror(gw.status));
    hilock_client_free(c);
}

/* On a live server, a try once behind a wait of its client is busy: at
 * once when a try has said the lock is taken, else as soon as the wait's
 * first try is answered (held elsewhere, or won by the wait, which comes
 * first); and it is served with the wait's grant when it shares it (the
 * same owner). Nothing is left behind. */
Test(mutex_edges, a_try_behind_a_wait_is_busy_after_the_first_answer) {
    hilock_client *a = ready_client(), *b = ready_client();
    hilock_acquire_opts once = opts_wait(0);
    /* Held elsewhere: b's wait's first try is in flight when b tries. */
    got ha = acquire_now(&e, a, "behind", NULL);
    cr_assert_eq(ha.status, 0);
    got gw = {0, 0, NULL, 0}, gt = {0, 0, NULL, 0}, gt2 = {0, 0, NULL, 0};
    hilock_wait *w = NULL;
    cr_assert_eq(hilock_acquire(b, "behind", NULL, got_cb, &gw, &w), 0);
    cr_assert_eq(hilock_acquire(b, "behind", &once, got_cb, &gt, NULL), 0);
    cr_assert(test_loop_until(e.base, &gt.calls, 3000));
    cr_expect_eq(gt.status, HILOCK_EBUSY);
    cr_expect_eq(gw.calls, 0);
    cr_assert_eq(hilock_acquire(b, "behind", &once, got_cb, &gt2, NULL), 0);
    test_loop_for(e.base, 1); /* deferred: busy at once, the answer known */
    cr_expect_eq(gt2.calls, 1);
    cr_expect_eq(gt2.status, HILOCK_EBUSY);
    cr_expect_eq(hilock_wait_cancel(w), 0);
    cr_assert(test_loop_until(e.base, &gw.calls, 3000));
    cr_assert_eq(release_now(&e, ha.hold), 0);
    /* Free: b's wait wins with its first try, the try behind it is busy;
     * one of the same owner behind it shares the grant. */
    hilock_owner *o = hilock_owner_new(b);
    cr_assert_not_null(o);
    hilock_acquire_opts mine = opts_wait(5000), mine_once = opts_wait(0);
    mine.owner = o;
    mine_once.owner = o;
    got g1 = {0, 0, NULL, 0}, g2 = {0, 0, NULL, 0}, g3 = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "behind2", &mine, got_cb, &g1, NULL), 0);
    cr_assert_eq(hilock_acquire(b, "behind2", &once, got_cb, &g2, NULL), 0);
    cr_assert_eq(hilock_acquire(b, "behind2", &mine_once, got_cb, &g3, NULL), 0);
    cr_assert(test_loop_until(e.base, &g3.calls, 3000));
    cr_assert(test_loop_until(e.base, &g2.calls, 3000));
    cr_expect_eq(g1.status, 0);
    cr_expect_eq(g2.status, HILOCK_EBUSY);
    cr_expect_eq(g3.status, 0, "the owner's try: %s", hilock_strerror(g3.status));
    cr_expect_eq(g3.hold, g1.hold, "one hold, two levels");
    if (g3.status == 0) cr_expect_eq(release_now(&e, g3.hold), 0);
    if (g1.status == 0) cr_expect_eq(release_now(&e, g1.hold), 0);
    cr_expect_eq(nonfence_keys(), 0);
    hilock_owner_free(o);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* A release publishes only when a try found the lock taken (the lock's w):
 * with nobody waiting, nothing; a client that waits is woken by the
 * release, long before the lease's end. */
Test(mutex_edges, a_release_tells_only_when_someone_waits) {
    hilock_client *a = ready_client(), *b = ready_client();
    long long p0 = stat_calls(&e.r, "publish");
    for (int i = 0; i < 5; i++) {
        got g = acquire_now(&e, a, "told", NULL);
        cr_assert_eq(g.status, 0);
        cr_assert_eq(release_now(&e, g.hold), 0);
    }
    cr_expect_eq(stat_calls(&e.r, "publish") - p0, 0, "a release with nobody waiting published");
    hilock_acquire_opts lease = opts_wait_lease(0, 20000), w = opts_wait(10000);
    got g = acquire_now(&e, a, "told", &lease), gb = {0, 0, NULL, 0};
    cr_assert_eq(g.status, 0);
    cr_assert_eq(hilock_acquire(b, "told", &w, got_cb, &gb, NULL), 0);
    for (int i = 0; i < 100 && !lock_marked(&e.r, "told", 'w'); i++) test_loop_for(e.base, 20);
    cr_assert(lock_marked(&e.r, "told", 'w'), "the waiter's try did not mark the lock");
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, g.hold), 0);
    test_loop_until(e.base, &gb.calls, 5000);
    cr_assert_eq(gb.calls, 1);
    cr_assert_eq(gb.status, 0);
    cr_expect_lt(gb.at_ms - t0, 1000, "woken %lld ms after the release", gb.at_ms - t0);
    cr_expect_eq(stat_calls(&e.r, "publish") - p0, 1);
    cr_assert_eq(release_now(&e, gb.hold), 0);
    cr_expect_eq(stat_calls(&e.r, "publish") - p0, 1, "the waiter's own release published");
    hilock_client_free(a);
    hilock_client_free(b);
}

/* A client's next wait, behind a wait of its own that was granted, waits
 * for the release's message, not for a try of its own to fail: the
 * release must publish although no try marked the lock ('t'), or that
 * wait sleeps to the lease's end (two nginx on one hot key lost requests
 * so). */
Test(mutex_edges, a_release_tells_the_releasers_own_waits) {
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.starve_ms = HILOCK_STARVE_NEVER; /* no grant by message: it would keep the lock, and its mark */
    hilock_client *a = ready_client_cfg(&cfg), *b = ready_client();
    hilock_acquire_opts lease = opts_wait_lease(10000, 20000);
    got gb = acquire_now(&e, b, "own", &lease), g1 = {0, 0, NULL, 0}, g2 = {0, 0, NULL, 0};
    cr_assert_eq(gb.status, 0);
    cr_assert_eq(hilock_acquire(a, "own", &lease, got_cb, &g1, NULL), 0);
    cr_assert_eq(hilock_acquire(a, "own", &lease, got_cb, &g2, NULL), 0);
    test_loop_for(e.base, 200);
    cr_assert_eq(release_now(&e, gb.hold), 0);
    test_loop_until(e.base, &g1.calls, 5000);
    cr_assert_eq(g1.status, 0);
    test_loop_for(e.base, 200);
    cr_assert_eq(g2.calls, 0);
    cr_assert(!lock_marked(&e.r, "own", 'w'), "a try of the second wait marked it");
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, g1.hold), 0);
    test_loop_until(e.base, &g2.calls, 5000);
    cr_assert_eq(g2.calls, 1);
    cr_assert_eq(g2.status, 0);
    cr_expect_lt(g2.at_ms - t0, 1000, "served %lld ms after the release", g2.at_ms - t0);
    cr_assert_eq(release_now(&e, g2.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}
