/* More attacks on the fair lock, at the moments tests/fair/fair.c and
 * tests/fair/reorder.c leave alone: a grant message still unread when its
 * wait is cancelled, times out or its client is freed; the lock's or the
 * queue's key deleted, or the whole server flushed or restarted, while
 * waits queue; a server that stalls past the claim window right after a
 * grant; names of odd bytes and of the largest size.
 *
 * "Unread" is made without timing: the waiting client runs on a loop of
 * its own (side), which the test runs only when it says, so a grant
 * published meanwhile waits in its socket. */
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/fairenv.h"

static lockenv e;
static void setup(void) { lockenv_start_debuggable(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(fair_edges, .init = setup, .fini = teardown, .timeout = 30);

/* ---- Helpers ------------------------------------------------------------------ */

#define fair_now(c, name, o) fairenv_now(&e, c, name, o)
#define queued(name) fairenv_queued(&e.r, name)
#define held(name) fairenv_held(&e.r, name)

#define held_fence(name) fairenv_fence(&e.r, name)

/* A client on a loop of its own, which the test runs only when it says:
 * what Redis sends it meanwhile waits in its sockets. */
typedef struct side {
    struct event_base *base;
    lockenv env;
    hilock_client *c;
} side;

static void side_start(side *s) {
    s->env = lockenv_child(&e);
    s->base = s->env.base;
    s->c = lockenv_client(&s->env);
}

static void side_stop(side *s) {
    if (s->c) hilock_client_free(s->c);
    event_base_free(s->base);
}

/* Run both loops, a few ms at a time, for ms. */
static void both_for(side *s, int ms) {
    long long until = test_now_ms() + ms;
    while (test_now_ms() < until) {
        test_loop_for(s->base, 2);
        test_loop_for(e.base, 2);
    }
}

/* Run both loops until *flag or ms: 1 if the flag was set. */
static int both_until(side *s, volatile int *flag, int ms) {
    long long until = test_now_ms() + ms;
    while (!*flag && test_now_ms() < until) {
        test_loop_for(s->base, 2);
        test_loop_for(e.base, 2);
    }
    return *flag != 0;
}

/* Release h, running both loops until its callback: its status. */
static int both_release(side *s, hilock_hold *h) {
    rel r = {0, 0};
    cr_assert_eq(hilock_release(h, rel_cb, &r), 0);
    cr_assert(both_until(s, &r.calls, 3000), "no release callback");
    return r.status;
}

/* ---- A grant still unread when its wait ends ------------------------------------ */

/* s's waits w1 and w2 queue behind m's hold; m releases, which grants w1
 * by message, and w1 is cancelled before s reads it (its loop has not
 * run since). The cancel's release finds w1 holding the lock and hands it
 * to the next entry, w2 (s's too): w2 holds it, w1 gets ECANCELED once,
 * and the message read after the cancel changes nothing. */
Test(fair_edges, a_wait_cancelled_with_its_grant_unread_passes_it_to_the_next) {
    hilock_client *m = lockenv_client(&e);
    side s;
    side_start(&s);
    got gm = fair_now(m, "cu", NULL), g1, g2;
    hilock_wait *w1;
    fair_start(s.c, "cu", NULL, &g1, &w1);
    fair_start(s.c, "cu", NULL, &g2, NULL);
    test_loop_for(s.base, 150);
    cr_assert_eq(queued("cu"), 2);
    cr_assert_eq(release_now(&e, gm.hold), 0); /* grants w1: s does not read it yet */
    cr_assert_eq(hilock_wait_cancel(w1), 0);
    long long t0 = test_now_ms();
    cr_assert(test_loop_until(s.base, &g2.calls, 3000), "w2 never got the lock");
    cr_expect_eq(g1.calls, 1);
    cr_expect_eq(g1.status, HILOCK_ECANCELED);
    cr_expect_eq(g2.status, 0, "%s", hilock_strerror(g2.status));
    cr_expect_lt(g2.at_ms - t0, 800, "w2 waited out the claim window: %lld ms", g2.at_ms - t0);
    test_loop_for(s.base, 500); /* claimed */
    cr_expect_eq(held_fence("cu"), hilock_hold_fence(g2.hold), "the lock is not w2's");
    cr_expect_eq(hilock_hold_lost(g2.hold), 0);
    rel r = {0, 0};
    hilock_release(g2.hold, rel_cb, &r);
    test_loop_until(s.base, &r.calls, 2000);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(held("cu"), 0);
    cr_expect_eq(queued("cu"), 0);
    side_stop(&s);
    hilock_client_free(m);
}

/* The same with a wait whose deadline passes while its grant is unread:
 * when s's loop runs, both the deadline and the message are due. Either
 * outcome is fine, but exactly one: w1 holds the lock (and Redis says
 * so), or w1 timed out and the lock went on to w2 at once. */
Test(fair_edges, a_deadline_due_with_the_grant_unread_has_one_outcome) {
    hilock_client *m = lockenv_client(&e);
    side s;
    side_start(&s);
    for (int round = 0; round < 2; round++) {
        char name[16];
        snprintf(name, sizeof(name), "du%d", round);
        hilock_acquire_opts o = opts_wait_lease(400, 0);
        got gm = fair_now(m, name, NULL), g1, g2;
        fair_start(s.c, name, &o, &g1, NULL);
        fair_start(s.c, name, NULL, &g2, NULL);
        test_loop_for(s.base, 150);
        cr_assert_eq(queued(name), 2);
        /* round 0: the grant comes before the deadline, read after it;
         * round 1: the other way round. */
        if (round == 1) test_msleep(300);
        cr_assert_eq(release_now(&e, gm.hold), 0);
        if (round == 0) test_msleep(300);
        test_loop_for(s.base, 100);
        cr_assert_eq(g1.calls, 1, "round %d: w1 had %d callbacks", round, g1.calls);
        if (g1.status == 0) {
            cr_expect_eq(g2.calls, 0);
            cr_expect_eq(held_fence(name), hilock_hold_fence(g1.hold), "round %d", round);
            rel r = {0, 0};
            hilock_release(g1.hold, rel_cb, &r);
            test_loop_until(s.base, &r.calls, 2000);
            cr_expect_eq(r.status, 0);
        } else {
            cr_expect_eq(g1.status, HILOCK_ETIMEDOUT, "round %d: %s", round, hilock_strerror(g1.status));
        }
        cr_assert(test_loop_until(s.base, &g2.calls, 2000), "round %d: w2 never got it", round);
        cr_expect_eq(g2.status, 0);
        cr_expect_eq(held_fence(name), hilock_hold_fence(g2.hold), "round %d", round);
        rel r = {0, 0};
        hilock_release(g2.hold, rel_cb, &r);
        test_loop_until(s.base, &r.calls, 2000);
        cr_expect_eq(held(name), 0);
        cr_expect_eq(queued(name), 0);
    }
    side_stop(&s);
    hilock_client_free(m);
}

/* s is freed with a grant to its first wait unread, and more waits
 * queued: nothing crashes, every wait gets ECANCELED once, and the lock
 * reaches x, queued behind them, within about the claim window (the
 * unclaimed grant lapses and cuts s's other places short). */
Test(fair_edges, a_client_freed_with_its_grant_unread_leaves_no_lock) {
    hilock_client *m = lockenv_client(&e), *x = lockenv_client(&e);
    side s;
    side_start(&s);
    got gm = fair_now(m, "fu", NULL), g[3], gx;
    for (int i = 0; i < 3; i++) fair_start(s.c, "fu", NULL, &g[i], NULL);
    test_loop_for(s.base, 150);
    fair_start(x, "fu", NULL, &gx, NULL);
    test_loop_for(e.base, 100);
    cr_assert_eq(queued("fu"), 4);
    cr_assert_eq(release_now(&e, gm.hold), 0); /* to s's first wait */
    long long t0 = test_now_ms();
    hilock_client_free(s.c);
    s.c = NULL;
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(g[i].calls, 1, "wait %d: %d callbacks", i, g[i].calls);
        cr_expect_eq(g[i].status, HILOCK_ECANCELED);
    }
    cr_assert(test_loop_until(e.base, &gx.calls, 4000), "x never got the lock");
    cr_expect_eq(gx.status, 0, "%s", hilock_strerror(gx.status));
    cr_expect_lt(gx.at_ms - t0, 3000, "the freed client held the lock %lld ms", gx.at_ms - t0);
    cr_expect_eq(queued("fu"), 0);
    cr_expect_eq(release_now(&e, gx.hold), 0);
    side_stop(&s);
    hilock_client_free(x);
    hilock_client_free(m);
}

/* ---- Two waits of one owner ----------------------------------------------------- */

/* An owner's two waits queue behind m; the first is cancelled with its
 * grant unread: the second, same owner, gets the lock (one hold, count 1),
 * and another client's wait queued between them does not jump ahead. */
Test(fair_edges, an_owners_first_wait_cancelled_at_its_grant_serves_the_second) {
    hilock_client *m = lockenv_client(&e), *x = lockenv_client(&e);
    side s;
    side_start(&s);
    hilock_owner *own = hilock_owner_new(s.c);
    hilock_acquire_opts o = opts_wait(HILOCK_WAIT_FOREVER);
    o.owner = own;
    got gm = fair_now(m, "oc", NULL), g1, g2, gx;
    hilock_wait *w1;
    fair_start(s.c, "oc", &o, &g1, &w1);
    test_loop_for(s.base, 100);
    fair_start(x, "oc", NULL, &gx, NULL);
    test_loop_for(e.base, 100);
    fair_start(s.c, "oc", &o, &g2, NULL);
    test_loop_for(s.base, 100);
    cr_assert_eq(queued("oc"), 3);
    cr_assert_eq(release_now(&e, gm.hold), 0); /* grants w1, unread */
    cr_assert_eq(hilock_wait_cancel(w1), 0);
    /* The cancel hands the lock to the next entry, x's, and x's release
     * to w2: never both at once, and x first. */
    cr_assert(both_until(&s, &gx.calls, 3000), "x never got the lock");
    cr_expect_eq(gx.status, 0);
    cr_expect_eq(g2.calls, 0, "w2 jumped ahead of x (or two holders)");
    cr_expect_eq(both_release(&s, gx.hold), 0);
    cr_assert(both_until(&s, &g2.calls, 3000), "w2 never got the lock");
    cr_expect_eq(g1.status, HILOCK_ECANCELED);
    cr_expect_eq(g2.status, 0, "%s", hilock_strerror(g2.status));
    cr_expect_eq(hilock_hold_count(g2.hold), 1);
    both_for(&s, 500);
    cr_expect_eq(held_fence("oc"), hilock_hold_fence(g2.hold));
    cr_expect_eq(both_release(&s, g2.hold), 0);
    cr_expect_eq(held("oc"), 0);
    cr_expect_eq(queued("oc"), 0);
    hilock_owner_free(own);
    side_stop(&s);
    hilock_client_free(x);
    hilock_client_free(m);
}

/* ---- Keys lost under waiters ------------------------------------------------------ */

/* m holds; s's wait and then x's queue. The lock's key is deleted (an
 * operator's DEL): the first live entry, s's, gets the lock by the next
 * try of anyone (within about a second), x stays behind it, and m finds
 * out at its next renewal. */
Test(fair_edges, the_lock_deleted_under_waiters_goes_to_the_first) {
    hilock_client *m = lockenv_client(&e), *s = lockenv_client(&e), *x = lockenv_client(&e);
    hilock_acquire_opts short_lease = opts_wait_lease(HILOCK_WAIT_FOREVER, 1500);
    lostrec lm = {0, 0, 0};
    short_lease.lost_cb = lost_cb;
    short_lease.lost_data = &lm;
    got gm = fair_now(m, "dl", &short_lease), gs, gx;
    fair_start(s, "dl", NULL, &gs, NULL);
    test_loop_for(e.base, 100);
    fair_start(x, "dl", NULL, &gx, NULL);
    test_loop_for(e.base, 100);
    cr_assert_eq(queued("dl"), 2);
    cr_assert_eq(test_redis_int(&e.r, "DEL %s", fkey("dl", "")), 1);
    cr_assert(test_loop_until(e.base, &gs.calls, 2500), "the first waiter never got the lock");
    cr_expect_eq(gs.status, 0, "%s", hilock_strerror(gs.status));
    cr_expect_eq(gx.calls, 0, "x jumped ahead of s");
    cr_assert(test_loop_until(e.base, &lm.calls, 2000), "m never heard its lock was gone");
    cr_expect_eq(lm.why, HILOCK_ELOST);
    cr_expect_gt(hilock_hold_fence(gs.hold), hilock_hold_fence(gm.hold));
    cr_expect_eq(release_now(&e, gm.hold), HILOCK_ELOST);
    cr_expect_eq(gx.calls, 0, "m's release of a lock it lost passed s's on");
    cr_expect_eq(held_fence("dl"), hilock_hold_fence(gs.hold));
    cr_expect_eq(release_now(&e, gs.hold), 0);
    cr_assert(test_loop_until(e.base, &gx.calls, 2000));
    cr_expect_eq(gx.status, 0);
    cr_expect_eq(release_now(&e, gx.hold), 0);
    cr_expect_eq(held("dl"), 0);
    cr_expect_eq(queued("dl"), 0);
    hilock_client_free(x);
    hilock_client_free(s);
    hilock_client_free(m);
}

/* The whole data set goes (FLUSHALL) while 3 clients queue behind m:
 * every wait is still served, one holder at a time, fences still grow,
 * and nothing is left in Redis at the end. */
Test(fair_edges, flushall_under_waiters_serves_everyone) {
    hilock_client *c[4];
    got g[4];
    for (int i = 0; i < 4; i++) c[i] = lockenv_client(&e);
    g[0] = fair_now(c[0], "fa", NULL);
    cr_assert_eq(g[0].status, 0);
    for (int i = 1; i < 4; i++) {
        fair_start(c[i], "fa", NULL, &g[i], NULL);
        test_loop_for(e.base, 50);
    }
    cr_assert_eq(queued("fa"), 3);
    unsigned long long f0 = hilock_hold_fence(g[0].hold);
    redisReply *r = test_redis_cmd(&e.r, "FLUSHALL");
    cr_assert_not_null(r);
    freeReplyObject(r);
    /* The lock is free in Redis now: one waiter takes it within about a
     * second (its refresh), and then one after the other. */
    int served = 0, seen[4] = {1, 0, 0, 0};
    unsigned long long last = f0;
    long long until = test_now_ms() + 8000;
    while (served < 3 && test_now_ms() < until) {
        test_loop_for(e.base, 10);
        int holders = 0;
        for (int i = 1; i < 4; i++) holders += g[i].calls == 1 && g[i].status == 0 && !seen[i];
        cr_assert_leq(holders, 1, "two waiters granted at once");
        for (int i = 1; i < 4; i++) {
            if (g[i].calls == 0 || seen[i]) continue;
            seen[i] = 1;
            served++;
            cr_expect_eq(g[i].status, 0, "wait %d: %s", i, hilock_strerror(g[i].status));
            if (g[i].status != 0) continue;
            cr_expect_gt(hilock_hold_fence(g[i].hold), last, "fences went back");
            last = hilock_hold_fence(g[i].hold);
            cr_expect_eq(release_now(&e, g[i].hold), 0);
        }
    }
    cr_expect_eq(served, 3, "only %d of 3 waiters served", served);
    cr_expect_eq(release_now(&e, g[0].hold), HILOCK_ELOST);
    test_loop_for(e.base, 100);
    cr_expect_eq(held("fa"), 0);
    cr_expect_eq(queued("fa"), 0);
    for (int i = 0; i < 4; i++) hilock_client_free(c[i]);
}

/* The server restarts without persistence (SHUTDOWN NOSAVE) while m
 * holds and s waits: m's hold is lost, s gets the lock once the server is
 * back, and its fence is larger than m's, though the fence key is gone
 * (the server's clock). */
Test(fair_edges, fences_grow_across_a_restart_without_persistence) {
    hilock_client *m = lockenv_client(&e), *s = lockenv_client(&e);
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 1500);
    lostrec lm = {0, 0, 0};
    o.lost_cb = lost_cb;
    o.lost_data = &lm;
    got gm = fair_now(m, "rs", &o), gs;
    cr_assert_eq(gm.status, 0);
    fair_start(s, "rs", NULL, &gs, NULL);
    test_loop_for(e.base, 100);
    int port = e.r.port;
    redisReply *r = test_redis_cmd(&e.r, "SHUTDOWN NOSAVE");
    if (r) freeReplyObject(r);
    test_redis_stop(&e.r); /* reaps it, removes its dir */
    test_loop_for(e.base, 200);
    cr_assert_eq(test_redis_start_debuggable(&e.r, port), 0, "the server did not come back");
    cr_assert(test_loop_until(e.base, &gs.calls, 5000), "s never got the lock");
    cr_expect_eq(gs.status, 0, "%s", hilock_strerror(gs.status));
    cr_expect_gt(hilock_hold_fence(gs.hold), hilock_hold_fence(gm.hold));
    cr_assert(test_loop_until(e.base, &lm.calls, 3000), "m never heard its lock was gone");
    cr_expect_eq(release_now(&e, gm.hold), HILOCK_ELOST);
    unsigned long long fs = hilock_hold_fence(gs.hold);
    cr_expect_eq(held_fence("rs"), fs);
    cr_expect_eq(release_now(&e, gs.hold), 0);
    got again = fair_now(m, "rs", NULL);
    cr_expect_eq(again.status, 0);
    cr_expect_gt(hilock_hold_fence(again.hold), fs);
    cr_expect_eq(release_now(&e, again.hold), 0);
    hilock_client_free(s);
    hilock_client_free(m);
}

/* ---- A server that stalls past the claim window ----------------------------------- */

/* s's wait is granted by message and its callback has run; the server
 * then stalls 1.5 s, past the 1 s claim window, before s's claim can run.
 * s must learn its hold is lost by the window's end (by its own clock),
 * its late claim must not take the lock back, and x, queued behind it,
 * gets the lock when the server wakes, with a larger fence. */
Test(fair_edges, a_stall_past_the_claim_window_loses_the_grant_cleanly) {
    hilock_client *m = lockenv_client(&e), *s = lockenv_client(&e), *x = lockenv_client(&e);
    hilock_acquire_opts o = opts_wait(HILOCK_WAIT_FOREVER);
    lostrec ls = {0, 0, 0};
    o.lost_cb = lost_cb;
    o.lost_data = &ls;
    got gm = fair_now(m, "sc", NULL), gs, gx;
    fair_start(s, "sc", &o, &gs, NULL);
    test_loop_for(e.base, 100);
    fair_start(x, "sc", NULL, &gx, NULL);
    test_loop_for(e.base, 100);
    cr_assert_eq(queued("sc"), 2);
    cr_assert_eq(release_now(&e, gm.hold), 0);
    cr_assert(test_loop_until(e.base, &gs.calls, 2000));
    cr_assert_eq(gs.status, 0);
    long long granted = gs.at_ms;
    pid_t k = test_redis_debug_sleep(&e.r, "1.5");
    cr_assert_gt(k, 0);
    cr_assert(test_loop_until(e.base, &ls.calls, 2500), "s never heard its grant lapsed");
    /* By its own clock, while the server still sleeps (1.5 s). */
    cr_expect_lt(ls.at_ms - granted, 1400, "lost %lld ms after the grant", ls.at_ms - granted);
    cr_expect_eq(hilock_hold_lost(gs.hold), 1);
    cr_assert(test_loop_until(e.base, &gx.calls, 4000), "x never got the lock");
    cr_expect_lt(ls.at_ms, gx.at_ms, "x got the lock before s heard it lost it");
    cr_expect_eq(gx.status, 0, "%s", hilock_strerror(gx.status));
    cr_expect_gt(hilock_hold_fence(gx.hold), hilock_hold_fence(gs.hold));
    test_loop_for(e.base, 500);
    cr_expect_eq(held_fence("sc"), hilock_hold_fence(gx.hold), "the lock is not x's");
    cr_expect_eq(hilock_hold_lost(gx.hold), 0);
    cr_expect_eq(release_now(&e, gs.hold), HILOCK_ELOST);
    cr_expect_eq(release_now(&e, gx.hold), 0);
    cr_expect_eq(test_wait(k, 3000), 0);
    hilock_client_free(x);
    hilock_client_free(s);
    hilock_client_free(m);
}

/* ---- Names ---------------------------------------------------------------------------- */

/* Handoffs by message on names of odd bytes (braces, '%', spaces, CR LF,
 * bytes above 127) and of HILOCK_NAME_MAX bytes, all escaped (the key and
 * channel three times as long): each reaches the next waiter in order, and
 * the names are kept apart. */
Test(fair_edges, odd_and_longest_names_hand_over_by_message) {
    static char longest[HILOCK_NAME_MAX + 1], plain[HILOCK_NAME_MAX + 1];
    static const char odd[] = "a{b}c%d e\r\nf\xff\x01g}";
    memset(longest, '{', HILOCK_NAME_MAX);
    for (int i = 0; i < HILOCK_NAME_MAX; i += 3) longest[i] = i % 2 ? '%' : '}';
    memset(plain, 'n', HILOCK_NAME_MAX);
    const char *names[3] = {odd, longest, plain};
    hilock_client *c[3];
    for (int i = 0; i < 3; i++) c[i] = lockenv_client(&e);
    for (int k = 0; k < 3; k++) {
        got g[3];
        g[0] = fair_now(c[0], names[k], NULL);
        cr_assert_eq(g[0].status, 0, "name %d: %s", k, hilock_strerror(g[0].status));
        for (int i = 1; i < 3; i++) {
            fair_start(c[i], names[k], NULL, &g[i], NULL);
            test_loop_for(e.base, 50);
        }
        cr_expect_eq(queued(names[k]), 2, "name %d", k);
        for (int i = 1; i < 3; i++) {
            long long t0 = test_now_ms();
            cr_assert_eq(release_now(&e, g[i - 1].hold), 0);
            cr_assert(test_loop_until(e.base, &g[i].calls, 3000), "name %d: no handoff to %d", k, i);
            cr_expect_eq(g[i].status, 0);
            cr_expect_lt(g[i].at_ms - t0, 500, "name %d: the grant message was not heard", k);
            cr_expect_str_eq(hilock_hold_name(g[i].hold), names[k]);
        }
        cr_assert_eq(release_now(&e, g[2].hold), 0);
        cr_expect_eq(held(names[k]), 0);
    }
    for (int i = 0; i < 3; i++) hilock_client_free(c[i]);
}

/* ---- A no_renew grant shorter than the claim window --------------------------------- */

/* s's w1 (no_renew, lease 300 ms) and w2 queue, then x's x1. m's release
 * grants w1 by message, for its 300 ms: a hold that short and no_renew
 * sends nothing (no claim), so Redis hears nothing from s, whose time the
 * grant cut to those 300 ms. w1 is delivered and its key expires, as
 * no_renew says; s's loop then pauses 400 ms (well below the 5 s that
 * costs a client its places). The next script (y's try once) must find
 * w2 alive and grant it, not skip it as a dead client's and give x1,
 * which came after it, the lock. */
Test(fair_edges, a_short_no_renew_grant_keeps_its_clients_other_places) {
    hilock_client *m = lockenv_client(&e), *x = lockenv_client(&e), *y = lockenv_client(&e);
    side s;
    side_start(&s);
    hilock_acquire_opts nr = opts_wait_lease(HILOCK_WAIT_FOREVER, 300), once = opts_wait(0);
    nr.no_renew = 1;
    got gm = fair_now(m, "nr", NULL), g1, g2, gx;
    fair_start(s.c, "nr", &nr, &g1, NULL);
    test_loop_for(s.base, 50);
    fair_start(s.c, "nr", NULL, &g2, NULL);
    test_loop_for(s.base, 50);
    fair_start(x, "nr", NULL, &gx, NULL);
    test_loop_for(e.base, 100);
    cr_assert_eq(queued("nr"), 3);
    cr_assert_eq(release_now(&e, gm.hold), 0); /* grants w1 */
    cr_assert(test_loop_until(s.base, &g1.calls, 1000), "w1 never got the lock");
    cr_assert_eq(g1.status, 0, "%s", hilock_strerror(g1.status));
    test_loop_for(s.base, 20);
    test_loop_for(e.base, 400); /* w1's key expires; s's loop pauses */
    /* Free, or already granted on (x's refresh may have run). */
    cr_expect_neq(held_fence("nr"), hilock_hold_fence(g1.hold), "a no_renew hold of 300 ms still held");
    got gy = fair_now(y, "nr", &once); /* the lock is free: its script grants the next */
    cr_expect_eq(gy.status, HILOCK_EBUSY, "%s", hilock_strerror(gy.status));
    cr_assert(both_until(&s, &g2.calls, 3000) || gx.calls, "nobody got the lock");
    int x_first = gx.calls != 0;
    cr_expect_eq(x_first, 0, "x1 got the lock before w2, which came first: w2 was skipped as dead");
    if (x_first) {
        cr_expect_eq(both_release(&s, gx.hold), 0);
        cr_assert(both_until(&s, &g2.calls, 3000), "w2 never got the lock");
    }
    cr_expect_eq(g2.status, 0, "%s", hilock_strerror(g2.status));
    cr_expect_eq(both_release(&s, g2.hold), 0);
    if (!x_first) {
        cr_assert(both_until(&s, &gx.calls, 3000), "x1 never got the lock");
        cr_expect_eq(gx.status, 0);
        cr_expect_eq(both_release(&s, gx.hold), 0);
    }
    both_for(&s, 100);
    cr_expect_eq(held("nr"), 0);
    cr_expect_eq(queued("nr"), 0);
    side_stop(&s);
    hilock_client_free(y);
    hilock_client_free(x);
    hilock_client_free(m);
}

/* The same grant made by s's own try: s's w1 stands behind its other
 * waits in the queue (moved there by hand: it keeps a place, so nothing
 * says the queue was lost), so its next try finds the lock free with s's
 * w2 (no_renew, 300 ms) first, grants it by message in that script and
 * names it as the holder (the client grants it from the reply). s's w3
 * and then x's x1 queue behind w2. When w2's key expires, a third
 * client's try (y's, while s's loop pauses 400 ms) must grant w3, not
 * skip it for x1. */
Test(fair_edges, a_short_no_renew_grant_found_by_a_try_keeps_the_other_places) {
    hilock_client *m = lockenv_client(&e), *x = lockenv_client(&e), *y = lockenv_client(&e);
    side s;
    side_start(&s);
    hilock_acquire_opts nr = opts_wait_lease(HILOCK_WAIT_FOREVER, 300), once = opts_wait(0);
    nr.no_renew = 1;
    got gm = fair_now(m, "nt", NULL), g1, g2, g3, gx;
    fair_start(s.c, "nt", NULL, &g1, NULL);
    test_loop_for(s.base, 50);
    fair_start(s.c, "nt", &nr, &g2, NULL);
    fair_start(s.c, "nt", NULL, &g3, NULL);
    test_loop_for(s.base, 100);
    fair_start(x, "nt", NULL, &gx, NULL);
    test_loop_for(e.base, 100);
    cr_assert_eq(queued("nt"), 4);
    redisReply *first = test_redis_cmd(&e.r, "ZRANGE %s 0 0", fkey("nt", ":q"));
    redisReply *last = test_redis_cmd(&e.r, "ZRANGE %s -1 -1 WITHSCORES", fkey("nt", ":q"));
    cr_assert(first && first->type == REDIS_REPLY_ARRAY && first->elements == 1);
    cr_assert(last && last->type == REDIS_REPLY_ARRAY && last->elements == 2);
    /* w1's place moves to the tail (a place is its number * 1024 + its
     * claim window). */
    long long tail = strtoll(last->element[1]->str, NULL, 10) / 1024 + 1;
    cr_assert_eq(test_redis_int(&e.r, "ZADD %s XX CH %lld %s", fkey("nt", ":q"), tail * 1024 + 1000,
                                first->element[0]->str), 1);
    freeReplyObject(first);
    freeReplyObject(last);
    cr_assert_eq(test_redis_int(&e.r, "DEL %s", fkey("nt", "")), 1); /* free, and nobody told */
    cr_assert(test_loop_until(s.base, &g2.calls, 2000), "w1's try never granted w2");
    cr_assert_eq(g2.status, 0, "%s", hilock_strerror(g2.status));
    cr_expect_eq(g1.calls + g3.calls, 0);
    test_loop_for(s.base, 20);
    test_loop_for(e.base, 400); /* w2's key expires; s's loop pauses */
    cr_expect_neq(held_fence("nt"), hilock_hold_fence(g2.hold), "a no_renew hold of 300 ms still held");
    got gy = fair_now(y, "nt", &once);
    cr_expect_eq(gy.status, HILOCK_EBUSY, "%s", hilock_strerror(gy.status));
    cr_assert(both_until(&s, &g3.calls, 3000) || gx.calls, "nobody got the lock");
    int x_first = gx.calls != 0;
    cr_expect_eq(x_first, 0, "x1 got the lock before w3, which came first: w3 was skipped as dead");
    if (x_first) cr_expect_eq(both_release(&s, gx.hold), 0);
    cr_assert(both_until(&s, &g3.calls, 3000), "w3 never got the lock");
    cr_expect_eq(g3.status, 0, "%s", hilock_strerror(g3.status));
    cr_expect_eq(both_release(&s, g3.hold), 0);
    /* x1 and w1 (at the tail since its place was lost) in some order. */
    if (!x_first) {
        cr_assert(both_until(&s, &gx.calls, 3000), "x1 never got the lock");
        cr_expect_eq(gx.status, 0);
        cr_expect_eq(both_release(&s, gx.hold), 0);
    }
    cr_assert(both_until(&s, &g1.calls, 3000), "w1 never got the lock");
    cr_expect_eq(g1.status, 0);
    cr_expect_eq(both_release(&s, g1.hold), 0);
    both_for(&s, 100);
    cr_expect_eq(held("nt"), 0);
    cr_expect_eq(queued("nt"), 0);
    cr_expect_eq(release_now(&e, gm.hold), HILOCK_ELOST); /* its key was deleted */
    side_stop(&s);
    hilock_client_free(y);
    hilock_client_free(x);
    hilock_client_free(m);
}

/* ---- Order across processes ------------------------------------------------------------ */

#define XP_PROCS 3
#define XP_WAITS 4
#define XP_N (XP_PROCS * XP_WAITS)
#define XP_GAP_MS 30
/* Arrival a is cancelled while it waits when a % 4 == 1; a no_renew hold
 * of 300 ms left to expire (never released) when a % 5 == 3. */
#define XP_CANCELLED(a) ((a) % 4 == 1)
#define XP_SHORT(a) ((a) % 5 == 3)

typedef struct xpres {
    volatile long long t0;
    volatile int ready, n, inside, overlaps, errors, first_error, cancels;
    volatile int order[XP_N];
    volatile unsigned long long fence[XP_N];
} xpres;

typedef struct xpwait {
    xpres *res;
    hilock_client *c;
    struct event_base *base;
    int arrival;
    hilock_wait *w;
    hilock_hold *h;
    volatile int *left;
} xpwait;

static void xp_error(xpres *r, int status) {
    if (__atomic_fetch_add(&r->errors, 1, __ATOMIC_SEQ_CST) == 0) r->first_error = status;
}

static void xp_released(int status, void *data) {
    xpwait *w = data;
    if (status != 0) xp_error(w->res, status);
    --*w->left;
}

static void xp_release(evutil_socket_t fd, short what, void *data) {
    xpwait *w = data;
    (void)fd; (void)what;
    __atomic_sub_fetch(&w->res->inside, 1, __ATOMIC_SEQ_CST);
    if (hilock_release(w->h, xp_released, w) != 0) --*w->left;
}

static void xp_granted(hilock_hold *h, int status, void *data) {
    xpwait *w = data;
    xpres *r = w->res;
    if (status == HILOCK_ECANCELED && XP_CANCELLED(w->arrival)) {
        __atomic_add_fetch(&r->cancels, 1, __ATOMIC_SEQ_CST);
        --*w->left;
        return;
    }
    if (status != 0) {
        xp_error(r, status);
        --*w->left;
        return;
    }
    int i = __atomic_fetch_add(&r->n, 1, __ATOMIC_SEQ_CST);
    r->order[i] = w->arrival;
    r->fence[i] = hilock_hold_fence(h);
    w->h = h;
    if (XP_SHORT(w->arrival)) { /* left to expire: no overlap count for it */
        --*w->left;
        return;
    }
    if (__atomic_add_fetch(&r->inside, 1, __ATOMIC_SEQ_CST) > 1)
        __atomic_add_fetch(&r->overlaps, 1, __ATOMIC_SEQ_CST);
    struct timeval tv = {0, 2000};
    event_base_once(w->base, -1, EV_TIMEOUT, xp_release, w, &tv);
}

static void xp_cancel(evutil_socket_t fd, short what, void *data) {
    xpwait *w = data;
    (void)fd; (void)what;
    if (hilock_wait_cancel(w->w) != 0) xp_error(w->res, HILOCK_EINVAL);
}

static void xp_arrive(evutil_socket_t fd, short what, void *data) {
    xpwait *w = data;
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, XP_SHORT(w->arrival) ? 300 : 0);
    (void)fd; (void)what;
    o.no_renew = XP_SHORT(w->arrival);
    if (hilock_fair_acquire(w->c, "xp", &o, xp_granted, w, &w->w) != 0) {
        --*w->left;
        return;
    }
    struct timeval tv = {0, 40 * 1000};
    if (XP_CANCELLED(w->arrival)) event_base_once(w->base, -1, EV_TIMEOUT, xp_cancel, w, &tv);
}

/* Process p's waits arrive at t0 + (k * PROCS + p) * GAP. */
static void xp_child(xpres *r, int p) {
    lockenv ce = lockenv_child(&e);
    hilock_client *c = lockenv_client(&ce);
    xpwait w[XP_WAITS];
    volatile int left = XP_WAITS;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    __atomic_add_fetch(&r->ready, 1, __ATOMIC_SEQ_CST);
    while (r->t0 == 0) test_msleep(1);
    for (int k = 0; k < XP_WAITS; k++) {
        w[k] = (xpwait){r, c, ce.base, k * XP_PROCS + p, NULL, NULL, &left};
        long long due = r->t0 + w[k].arrival * XP_GAP_MS - test_now_ms();
        struct timeval tv = {0, due > 0 ? (int)due * 1000 : 0};
        event_base_once(ce.base, -1, EV_TIMEOUT, xp_arrive, &w[k], &tv);
    }
    long long until = test_now_ms() + 15000;
    while (left > 0 && test_now_ms() < until) event_base_loop(ce.base, EVLOOP_ONCE);
    /* Stay on until every process is served: this one's places (and the
     * grants it may still get) must not outlive it. */
    while (r->n + r->cancels + r->errors < XP_N && test_now_ms() < until)
        event_base_loop(ce.base, EVLOOP_NONBLOCK), test_msleep(2);
    hilock_client_free(c);
    event_base_free(ce.base);
    _exit(left == 0 ? 0 : 3);
}

/* 12 waits of 3 processes arrive 30 ms apart, interleaved, behind a
 * holder; a quarter are cancelled while they wait, and two get no_renew
 * holds of 300 ms that they leave to expire (the next grant then comes
 * from a refresh). The others are granted exactly in the order they
 * arrived, with growing fences, one at a time. */
Test(fair_edges, order_across_processes_with_cancels_and_short_holds) {
    xpres *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(r, MAP_FAILED);
    memset((void *)r, 0, sizeof(*r));
    hilock_client *c = lockenv_client(&e);
    got holder = fair_now(c, "xp", NULL);
    cr_assert_eq(holder.status, 0);
    pid_t kids[XP_PROCS];
    for (int p = 0; p < XP_PROCS; p++) {
        kids[p] = fork();
        cr_assert_geq(kids[p], 0);
        if (kids[p] == 0) xp_child(r, p);
    }
    while (r->ready < XP_PROCS) test_msleep(1);
    r->t0 = test_now_ms() + 100;
    test_loop_for(e.base, 100 + XP_N * XP_GAP_MS + 300);
    int expect[XP_N], nexpect = 0;
    for (int a = 0; a < XP_N; a++)
        if (!XP_CANCELLED(a)) expect[nexpect++] = a;
    cr_expect_eq(queued("xp"), nexpect);
    cr_assert_eq(release_now(&e, holder.hold), 0);
    int bad = 0;
    for (int p = 0; p < XP_PROCS; p++) {
        int st;
        waitpid(kids[p], &st, 0);
        bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    cr_expect_eq(bad, 0, "a process did not see all its waits end");
    cr_expect_eq(r->errors, 0, "first error: %s", hilock_strerror(r->first_error));
    cr_expect_eq(r->overlaps, 0, "two holders at once");
    cr_expect_eq(r->cancels, XP_N - nexpect);
    cr_assert_eq(r->n, nexpect);
    char order[256] = "";
    int wrong = 0;
    for (int i = 0; i < r->n; i++) {
        wrong += r->order[i] != expect[i];
        snprintf(order + strlen(order), sizeof(order) - strlen(order), " %d", r->order[i]);
        if (i > 0) cr_expect_gt(r->fence[i], r->fence[i - 1], "fence %d not above the one before", i);
    }
    cr_expect_eq(wrong, 0, "granted out of order:%s", order);
    cr_expect_eq(queued("xp"), 0);
    hilock_client_free(c);
    munmap((void *)r, sizeof(*r));
}

/* ---- A grant message lost with the subscriber connection ------------------------------ */

/* s's subscriber connection is killed just before the release that
 * grants s's wait, with x queued behind it: the grant's message is lost,
 * and s's resubscription's try must find the lock in its name within the
 * claim window, so that the grant neither lapses nor passes to x. */
Test(fair_edges, a_grant_lost_with_the_subscriber_is_found_before_it_lapses) {
    hilock_client *m = lockenv_client(&e), *s = lockenv_client(&e), *x = lockenv_client(&e);
    for (int round = 0; round < 3; round++) {
        char name[16];
        snprintf(name, sizeof(name), "gl%d", round);
        got gm = fair_now(m, name, NULL), gs, gx;
        fair_start(s, name, NULL, &gs, NULL);
        test_loop_for(e.base, 100);
        fair_start(x, name, NULL, &gx, NULL);
        test_loop_for(e.base, 100 + 250 * round); /* at different points of s's refresh */
        cr_assert_eq(queued(name), 2);
        redisReply *k = test_redis_cmd(&e.r, "CLIENT KILL TYPE pubsub");
        cr_assert(k != NULL);
        freeReplyObject(k);
        long long t0 = test_now_ms();
        rel r = {0, 0};
        cr_assert_eq(hilock_release(gm.hold, rel_cb, &r), 0); /* before anyone reconnects */
        cr_assert(test_loop_until(e.base, &gs.calls, 3000), "round %d: s never got it", round);
        cr_expect_eq(gs.status, 0, "round %d: %s", round, hilock_strerror(gs.status));
        cr_expect_lt(gs.at_ms - t0, 1000, "round %d: found %lld ms after the release", round,
                     gs.at_ms - t0);
        cr_expect_eq(gx.calls, 0, "round %d: x got the lock first", round);
        test_loop_for(e.base, 500); /* claimed */
        cr_expect_eq(held_fence(name), hilock_hold_fence(gs.hold), "round %d", round);
        cr_expect_eq(hilock_hold_lost(gs.hold), 0);
        cr_expect_eq(release_now(&e, gs.hold), 0);
        cr_assert(test_loop_until(e.base, &gx.calls, 3000), "round %d: x never got it", round);
        cr_expect_eq(gx.status, 0);
        cr_expect_eq(release_now(&e, gx.hold), 0);
        cr_expect_eq(held(name), 0);
        cr_expect_eq(queued(name), 0);
    }
    hilock_client_free(x);
    hilock_client_free(s);
    hilock_client_free(m);
}

/* The queue's key alone is lost (DEL; or a failover to a replica that
 * had the clients' alive times but not the latest joins) while s's w1 and
 * w2 and then y's y1 queue. Every wait learns it at its client's next
 * try, and all of a client's waits join again in their order (hilock.h):
 * w2, called before y1, is not left out of the queue until it is s's head
 * (when y1 would have gone ahead of it). */
Test(fair_edges, after_the_queue_key_alone_is_lost_every_wait_joins_again) {
    hilock_client *m = lockenv_client(&e), *s = lockenv_client(&e), *y = lockenv_client(&e);
    got gm = fair_now(m, "ql", NULL), g1, g2, gy;
    fair_start(s, "ql", NULL, &g1, NULL);
    fair_start(s, "ql", NULL, &g2, NULL);
    test_loop_for(e.base, 100);
    fair_start(y, "ql", NULL, &gy, NULL);
    test_loop_for(e.base, 100);
    cr_assert_eq(queued("ql"), 3);
    cr_assert_eq(test_redis_int(&e.r, "DEL %s", fkey("ql", ":q")), 1);
    test_loop_for(e.base, 1300); /* every client's head tries again */
    cr_expect_eq(queued("ql"), 3, "a wait is left out of the queue");
    cr_assert_eq(release_now(&e, gm.hold), 0);
    cr_assert(test_loop_until(e.base, &g1.calls, 3000), "w1 never got the lock");
    cr_assert_eq(g1.status, 0);
    cr_expect_eq(release_now(&e, g1.hold), 0);
    cr_assert(test_loop_until(e.base, &g2.calls, 3000) || gy.calls, "nobody got the lock");
    int y_first = gy.calls != 0;
    cr_expect_eq(y_first, 0, "y1 got the lock before w2, which came first");
    if (y_first) cr_expect_eq(release_now(&e, gy.hold), 0);
    cr_assert(test_loop_until(e.base, &g2.calls, 3000), "w2 never got the lock");
    cr_expect_eq(g2.status, 0);
    cr_expect_eq(release_now(&e, g2.hold), 0);
    if (!y_first) {
        cr_assert(test_loop_until(e.base, &gy.calls, 3000), "y1 never got the lock");
        cr_expect_eq(gy.status, 0);
        cr_expect_eq(release_now(&e, gy.hold), 0);
    }
    cr_expect_eq(held("ql"), 0);
    cr_expect_eq(queued("ql"), 0);
    hilock_client_free(y);
    hilock_client_free(s);
    hilock_client_free(m);
}

/* ---- Close with a grant unread -------------------------------------------------------- */

static void closed_cb(void *data) { *(int *)data = 1; }

/* s closes (gracefully) with a grant to its first wait unread and a second
 * wait queued: both end with ECANCELED, their releases hand the lock on
 * (the first's to s's second, the second's to x) in one round trip each,
 * not after a claim window, and nothing of s stays in Redis. */
Test(fair_edges, a_close_with_a_grant_unread_hands_the_lock_on_at_once) {
    hilock_client *m = lockenv_client(&e), *x = lockenv_client(&e);
    side s;
    side_start(&s);
    got gm = fair_now(m, "cl", NULL), g1, g2, gx;
    fair_start(s.c, "cl", NULL, &g1, NULL);
    fair_start(s.c, "cl", NULL, &g2, NULL);
    test_loop_for(s.base, 100);
    fair_start(x, "cl", NULL, &gx, NULL);
    test_loop_for(e.base, 100);
    cr_assert_eq(queued("cl"), 3);
    cr_assert_eq(release_now(&e, gm.hold), 0); /* grants w1, unread */
    int closed = 0;
    long long t0 = test_now_ms();
    hilock_client_close(s.c, closed_cb, &closed);
    cr_assert(both_until(&s, &closed, 3000), "the close never ended");
    s.c = NULL; /* freed by the close */
    cr_expect_eq(g1.calls, 1);
    cr_expect_eq(g1.status, HILOCK_ECANCELED);
    cr_expect_eq(g2.calls, 1);
    cr_expect_eq(g2.status, HILOCK_ECANCELED);
    cr_assert(test_loop_until(e.base, &gx.calls, 3000), "x never got the lock");
    cr_expect_eq(gx.status, 0);
    cr_expect_lt(gx.at_ms - t0, 800, "x waited out a claim window: %lld ms", gx.at_ms - t0);
    cr_expect_eq(queued("cl"), 0);
    cr_expect_eq(release_now(&e, gx.hold), 0);
    cr_expect_eq(held("cl"), 0);
    side_stop(&s);
    hilock_client_free(x);
    hilock_client_free(m);
}
