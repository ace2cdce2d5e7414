/* The counting semaphore against a real redis-server: N holders and no
 * more, k permits at once, fences, dead holders, cancels, a count that
 * differs, reentrancy, connection kills, and processes contending. */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "prim/prim.h"
#include "support/clusterenv.h"
#include "support/semload.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(semaphore, .init = setup, .fini = teardown, .timeout = 60);

/* ---- Helpers ---------------------------------------------------------------- */

static got sem_now(hilock_client *c, const char *name, unsigned total, unsigned k,
                   const hilock_acquire_opts *o) {
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_semaphore_acquire(c, name, total, k, o, got_cb, &g, NULL), 0);
    test_loop_until(e.base, &g.calls, 5000);
    cr_assert_eq(g.calls, 1, "acquire of %s got no callback", name);
    return g;
}

static void sem_start(hilock_client *c, const char *name, unsigned total, unsigned k,
                      const hilock_acquire_opts *o, got *g, hilock_wait **w) {
    memset(g, 0, sizeof(*g));
    cr_assert_eq(hilock_semaphore_acquire(c, name, total, k, o, got_cb, g, w), 0);
}

/* The semaphore's key with `suffix` (":sem", ":sem:h", ...). */
#define skey prim_key

static long long holders(const char *name) {
    return test_redis_int(&e.r, "ZCARD %s", skey(name, ":sem"));
}

/* Permits in use by Redis's count (the hash's "u"); -1 when the hash is gone. */
static long long in_use(const char *name) {
    redisReply *r = test_redis_cmd(&e.r, "HGET %s u", skey(name, ":sem:h"));
    long long n = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    if (r) freeReplyObject(r);
    return n;
}

static long long script_calls(void) { return script_calls_of(&e.r); }
#define wait_opts opts_wait_lease

/* ---- N holders, k permits --------------------------------------------------- */

/* Three of three taken: a fourth is busy, times out, and is granted when
 * one is released (by the message: the leases are 30 s). */
Test(semaphore, n_holders_then_busy_then_woken_by_a_release) {
    hilock_client *c[4];
    got g[3];
    uint64_t last = 0;
    for (int i = 0; i < 4; i++) c[i] = lockenv_client(&e);
    for (int i = 0; i < 3; i++) {
        g[i] = sem_now(c[i], "s", 3, 1, NULL);
        cr_assert_eq(g[i].status, 0, "holder %d: %s", i, hilock_strerror(g[i].status));
        cr_expect_gt(hilock_hold_fence(g[i].hold), last, "fences grow");
        last = hilock_hold_fence(g[i].hold);
        cr_expect_str_eq(hilock_hold_name(g[i].hold), "s");
    }
    cr_expect_eq(holders("s"), 3);
    cr_expect_eq(in_use("s"), 3);
    hilock_acquire_opts o = wait_opts(0, 0);
    cr_expect_eq(sem_now(c[3], "s", 3, 1, &o).status, HILOCK_EBUSY);
    o = wait_opts(300, 0);
    long long t0 = test_now_ms();
    got gt = sem_now(c[3], "s", 3, 1, &o);
    cr_expect_eq(gt.status, HILOCK_ETIMEDOUT);
    cr_expect(gt.at_ms - t0 >= 290 && gt.at_ms - t0 < 1500, "timed out after %lld ms", gt.at_ms - t0);

    got gw;
    sem_start(c[3], "s", 3, 1, NULL, &gw, NULL);
    test_loop_for(e.base, 200);
    cr_expect_eq(gw.calls, 0, "granted a fourth permit of three");
    t0 = test_now_ms();
    cr_assert_eq(release_now(&e, g[1].hold), 0);
    cr_assert(test_loop_until(e.base, &gw.calls, 3000));
    cr_expect_eq(gw.status, 0);
    cr_expect_lt(gw.at_ms - t0, 1000, "woken after %lld ms", gw.at_ms - t0);
    cr_expect_gt(hilock_hold_fence(gw.hold), last);
    cr_expect_eq(release_now(&e, g[0].hold), 0);
    cr_expect_eq(release_now(&e, g[2].hold), 0);
    cr_expect_eq(release_now(&e, gw.hold), 0);
    cr_expect_eq(holders("s"), 0);
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", skey("s", ":sem:h")), 0, "the hash stays behind");
    for (int i = 0; i < 4; i++) hilock_client_free(c[i]);
}

Test(semaphore, k_permits_at_once) {
    /* (b never starves: a wait that starved would hold c's 2 of 5 back
     * until its own 3 are free, see bounded::*semaphore*.) */
    hilock_config never;
    lockenv_config(&never, e.r.url);
    never.starve_ms = HILOCK_STARVE_NEVER;
    hilock_client *a = lockenv_client(&e), *b = lockenv_client_cfg(&e, &never), *c = lockenv_client(&e);
    got ga = sem_now(a, "k", 5, 3, NULL);
    cr_assert_eq(ga.status, 0);
    got gb;
    sem_start(b, "k", 5, 3, NULL, &gb, NULL);
    test_loop_for(e.base, 200);
    cr_expect_eq(gb.calls, 0, "3 + 3 permits of 5");
    hilock_acquire_opts once = wait_opts(0, 0);
    got gc = sem_now(c, "k", 5, 2, &once);
    cr_assert_eq(gc.status, 0, "3 + 2 of 5: %s", hilock_strerror(gc.status));
    cr_expect_eq(in_use("k"), 5);
    cr_expect_eq(sem_now(c, "k", 5, 1, &once).status, HILOCK_EBUSY);
    cr_expect_eq(release_now(&e, ga.hold), 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 3000));
    cr_expect_eq(gb.status, 0);
    cr_expect_eq(in_use("k"), 5);
    cr_expect_eq(holders("k"), 2);
    cr_expect_eq(release_now(&e, gb.hold), 0);
    cr_expect_eq(in_use("k"), 2);
    cr_expect_eq(release_now(&e, gc.hold), 0);
    cr_expect_eq(holders("k"), 0);

    /* Counts out of range, and no callback for them. */
    cr_expect_eq(hilock_semaphore_acquire(a, "k", 5, 0, NULL, got_cb, &ga, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_semaphore_acquire(a, "k", 5, 6, NULL, got_cb, &ga, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_semaphore_acquire(a, "k", 0, 0, NULL, got_cb, &ga, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_semaphore_acquire(a, "k", HILOCK_PERMITS_MAX + 1, 1, NULL, got_cb, &ga, NULL),
                 HILOCK_EINVAL);
    cr_expect_eq(hilock_semaphore_acquire(a, "", 5, 1, NULL, got_cb, &ga, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_semaphore_acquire(a, "k", 5, 1, NULL, NULL, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_semaphore_acquire(NULL, "k", 5, 1, NULL, got_cb, &ga, NULL), HILOCK_EINVAL);
    hilock_client_free(a);
    hilock_client_free(b);
    hilock_client_free(c);
}

/* Waiters of one client queued at once on a free semaphore: each grant that
 * leaves permits lets the next try at once, not at a release or a lease. */
Test(semaphore, permits_left_go_to_the_next_waiter_at_once) {
    hilock_client *c = lockenv_client(&e);
    got g[5];
    long long t0 = test_now_ms();
    for (int i = 0; i < 5; i++) sem_start(c, "more", 4, 1, NULL, &g[i], NULL);
    test_loop_for(e.base, 500);
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(g[i].calls, 1, "waiter %d not granted within 500 ms", i);
        cr_expect_eq(g[i].status, 0);
        cr_expect_lt(g[i].at_ms - t0, 400);
    }
    cr_expect_eq(g[4].calls, 0, "a fifth permit of four");
    cr_assert_eq(release_now(&e, g[2].hold), 0);
    cr_assert(test_loop_until(e.base, &g[4].calls, 2000));
    cr_expect_eq(g[4].status, 0);
    for (int i = 0; i < 5; i++)
        if (i != 2 && g[i].calls == 1 && g[i].status == 0) release_now(&e, g[i].hold);
    cr_expect_eq(holders("more"), 0);
    hilock_client_free(c);
}

/* A waiter on a taken semaphore sends nothing until a release or the
 * earliest lease's end. */
Test(semaphore, a_waiter_does_not_poll) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = sem_now(a, "quiet", 1, 1, NULL);
    cr_assert_eq(ga.status, 0);
    got gb;
    sem_start(b, "quiet", 1, 1, NULL, &gb, NULL);
    test_loop_for(e.base, 200);
    long long before = script_calls();
    test_loop_for(e.base, 1500);
    long long during = script_calls() - before;
    cr_expect_leq(during, 1, "%lld script calls in 1.5 s of waiting (renewals of a 30 s lease: 0)", during);
    cr_expect_eq(gb.calls, 0);
    cr_expect_eq(release_now(&e, ga.hold), 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 2000));
    cr_expect_eq(gb.status, 0);
    cr_expect_eq(release_now(&e, gb.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Leases: the watchdog, loss, dead holders ------------------------------ */

Test(semaphore, renewed_while_held_and_lost_when_taken_away) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o = wait_opts(HILOCK_WAIT_FOREVER, 300);
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = sem_now(a, "lease", 2, 2, &o);
    cr_assert_eq(ga.status, 0);
    test_loop_for(e.base, 1000); /* three leases */
    cr_expect_eq(hilock_hold_lost(ga.hold), 0, "the watchdog keeps the permits");
    cr_expect_eq(lost.calls, 0);
    hilock_acquire_opts once = wait_opts(0, 0);
    cr_expect_eq(sem_now(b, "lease", 2, 1, &once).status, HILOCK_EBUSY, "the permits ran out");
    cr_expect_eq(test_redis_int(&e.r, "DEL %s", skey("lease", ":sem")), 1);
    long long t0 = test_now_ms();
    test_loop_for(e.base, 400);
    cr_expect_eq(lost.calls, 1, "no lost callback after the holders were deleted");
    cr_expect_eq(lost.why, HILOCK_ELOST);
    cr_expect_lt(lost.at_ms - t0, 400);
    cr_expect_eq(release_now(&e, ga.hold), HILOCK_ELOST);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* Without the watchdog a grant lasts its lease, unless extended by hand;
 * a lapsed one is lost and its permits are someone else's. */
Test(semaphore, no_renew_lapses_and_extend_keeps) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o = wait_opts(HILOCK_WAIT_FOREVER, 250);
    o.no_renew = 1;
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got kept = sem_now(a, "nr", 2, 1, &o);
    got lapsed = sem_now(a, "nr", 2, 1, &o);
    cr_assert(kept.status == 0 && lapsed.status == 0);
    rel x = {0, 0};
    cr_assert_eq(hilock_hold_extend(kept.hold, 3000, rel_cb, &x), 0);
    cr_assert(test_loop_until(e.base, &x.calls, 2000));
    cr_expect_eq(x.status, 0, "extend: %s", hilock_strerror(x.status));
    test_loop_for(e.base, 500);
    cr_expect_eq(hilock_hold_lost(kept.hold), 0, "the extended hold lapsed");
    cr_expect_eq(hilock_hold_lost(lapsed.hold), 1);
    cr_expect_eq(lost.calls, 1, "one lost callback, for the lapsed hold");
    hilock_acquire_opts once = wait_opts(0, 0);
    got gb = sem_now(b, "nr", 2, 1, &once);
    cr_expect_eq(gb.status, 0, "the lapsed permit is free: %s", hilock_strerror(gb.status));
    cr_expect_eq(sem_now(b, "nr", 2, 1, &once).status, HILOCK_EBUSY, "the extended one is not");
    cr_expect_eq(release_now(&e, lapsed.hold), HILOCK_ELOST);
    cr_expect_eq(in_use("nr"), 2, "the release of a lapsed grant freed another's permit");
    cr_expect_eq(release_now(&e, kept.hold), 0);
    if (gb.status == 0) cr_expect_eq(release_now(&e, gb.hold), 0);
    cr_expect_eq(holders("nr"), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

typedef struct deadkid {
    volatile int granted;
    volatile unsigned long long fence;
} deadkid;

/* A holder process killed with SIGKILL: its permits come back when its
 * lease runs out, and the waiter gets them by its fallback timer (set at
 * the earliest lease's end), not by polling, and not before. */
Test(semaphore, permits_of_a_killed_holder_come_back_after_its_lease) {
    deadkid *k = mmap(NULL, sizeof(*k), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(k, MAP_FAILED);
    memset((void *)k, 0, sizeof(*k));
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid == 0) {
        lockenv ce = lockenv_child(&e);
        struct event_base *b = ce.base;
        hilock_client *c = lockenv_client(&ce);
        got g = {0, 0, NULL, 0};
        hilock_acquire_opts o = wait_opts(HILOCK_WAIT_FOREVER, 900);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        hilock_semaphore_acquire(c, "dead", 3, 2, &o, got_cb, &g, NULL);
        test_loop_until(b, &g.calls, 5000);
        if (g.status != 0) _exit(1);
        k->fence = hilock_hold_fence(g.hold);
        k->granted = 1;
        test_loop_for(b, 20000); /* renewing, until killed */
        _exit(2);
    }
    long long until = test_now_ms() + 5000;
    while (!k->granted && test_now_ms() < until) test_msleep(5);
    cr_assert(k->granted, "the holder process got no permits");

    /* A live holder keeps the holders' key alive: only pruning by lease
     * gives the dead one's permits back. */
    hilock_client *live = lockenv_client(&e), *c = lockenv_client(&e);
    got gl = sem_now(live, "dead", 3, 1, NULL);
    got g;
    sem_start(c, "dead", 3, 1, NULL, &g, NULL);
    test_loop_for(e.base, 300);
    if (gl.status != 0 || g.calls != 0) kill(kid, SIGKILL);
    cr_assert_eq(gl.status, 0);
    cr_assert_eq(g.calls, 0, "granted a permit of a live holder's");
    long long calls0 = script_calls();
    kill(kid, SIGKILL);
    long long killed = test_now_ms();
    waitpid(kid, NULL, 0);
    cr_assert(test_loop_until(e.base, &g.calls, 5000), "the permits never came back");
    long long took = g.at_ms - killed, calls = script_calls() - calls0;
    cr_log_info("killed holder: permits back after %lld ms (lease 900), %lld script calls", took, calls);
    cr_expect_eq(g.status, 0, "%s", hilock_strerror(g.status));
    /* Its last renewal was at most 300 ms before the kill. */
    cr_expect(took >= 550 && took < 1600, "granted %lld ms after the kill, lease 900", took);
    cr_expect_leq(calls, 4, "%lld script calls while waiting out a lease", calls);
    cr_expect_gt(hilock_hold_fence(g.hold), k->fence);
    cr_expect_eq(holders("dead"), 2, "the dead holder was not pruned");
    cr_expect_eq(in_use("dead"), 2);
    cr_expect_eq(release_now(&e, g.hold), 0);
    cr_expect_eq(release_now(&e, gl.hold), 0);
    hilock_client_free(c);
    hilock_client_free(live);
    munmap((void *)k, sizeof(*k));
}

/* A client freed without releasing: the same, within one process. */
Test(semaphore, permits_of_a_freed_client_come_back_after_its_lease) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    hilock_acquire_opts o = wait_opts(HILOCK_WAIT_FOREVER, 500);
    got ga = sem_now(a, "freed", 2, 1, &o);
    cr_assert_eq(ga.status, 0);
    got gl = sem_now(b, "freed", 2, 1, NULL); /* lives on: the key does not expire */
    cr_assert_eq(gl.status, 0);
    got gb;
    sem_start(b, "freed", 2, 1, NULL, &gb, NULL);
    test_loop_for(e.base, 100);
    long long t0 = test_now_ms();
    hilock_client_free(a); /* abandons the hold */
    cr_assert(test_loop_until(e.base, &gb.calls, 3000));
    cr_expect_eq(gb.status, 0);
    cr_expect(gb.at_ms - t0 >= 200 && gb.at_ms - t0 < 1200, "granted after %lld ms", gb.at_ms - t0);
    cr_expect_eq(release_now(&e, gb.hold), 0);
    cr_expect_eq(release_now(&e, gl.hold), 0);
    hilock_client_free(b);
}

/* ---- Cancels ---------------------------------------------------------------- */

/* The first try goes out inside the acquire; a cancel at once races it, and
 * the permits it won are given back. */
Test(semaphore, cancel_racing_a_grant_leaves_no_permit) {
    hilock_client *c = lockenv_client(&e);
    got g[40];
    for (int i = 0; i < 40; i++) {
        hilock_wait *w;
        sem_start(c, "race", 3, 1 + i % 3, NULL, &g[i], &w);
        cr_assert_eq(hilock_wait_cancel(w), 0);
    }
    test_loop_for(e.base, 500);
    for (int i = 0; i < 40; i++) {
        cr_expect_eq(g[i].calls, 1);
        cr_expect_eq(g[i].status, HILOCK_ECANCELED);
    }
    cr_expect_eq(holders("race"), 0, "cancelled grants kept permits");
    hilock_acquire_opts once = wait_opts(0, 0);
    got all = sem_now(c, "race", 3, 3, &once);
    cr_expect_eq(all.status, 0, "every permit is free again: %s", hilock_strerror(all.status));
    if (all.status == 0) release_now(&e, all.hold);
    hilock_client_free(c);
}

/* Waiters cancelled while a release wakes them and while the chain of
 * grants (permits left: the next tries at once) runs through them. */
typedef struct canceller {
    hilock_wait *w[20];
} canceller;

static void cancel_half(int status, void *data) {
    canceller *x = data;
    (void)status;
    for (int i = 0; i < 20; i += 2) hilock_wait_cancel(x->w[i]); /* EINVAL if decided */
}

Test(semaphore, cancels_racing_wakeups_leave_no_permit) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    for (int round = 0; round < 10; round++) {
        got ga = sem_now(a, "wake", 3, 3, NULL);
        cr_assert_eq(ga.status, 0);
        static got gb[20];
        canceller x;
        for (int i = 0; i < 20; i++) sem_start(b, "wake", 3, 1, NULL, &gb[i], &x.w[i]);
        test_loop_for(e.base, 20);
        cr_assert_eq(hilock_release(ga.hold, cancel_half, &x), 0);
        /* Each grant is released as soon as it is seen, so all 20 end. */
        int ended = 0;
        long long until = test_now_ms() + 5000;
        while (ended < 20 && test_now_ms() < until) {
            test_loop_for(e.base, 5);
            ended = 0;
            for (int i = 0; i < 20; i++) {
                if (gb[i].calls == 1 && gb[i].status == 0 && gb[i].hold) {
                    hilock_release(gb[i].hold, NULL, NULL);
                    gb[i].hold = NULL;
                }
                ended += gb[i].calls;
            }
        }
        cr_assert_eq(ended, 20, "round %d: %d of 20 waiters ended", round, ended);
        test_loop_for(e.base, 100);
        cr_expect_eq(holders("wake"), 0, "round %d left permits taken", round);
    }
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- The count -------------------------------------------------------------- */

Test(semaphore, a_different_count_is_an_error_until_the_holders_are_gone) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = sem_now(a, "count", 3, 1, NULL);
    cr_assert_eq(ga.status, 0);
    got g4, g3;
    sem_start(b, "count", 4, 1, NULL, &g4, NULL);
    sem_start(b, "count", 3, 1, NULL, &g3, NULL); /* queued behind: not failed with it */
    cr_assert(test_loop_until(e.base, &g3.calls, 3000));
    cr_expect_eq(g4.calls, 1);
    cr_expect_eq(g4.status, HILOCK_EPERMITS, "%s", hilock_strerror(g4.status));
    cr_expect_str_eq(hilock_strerror(HILOCK_EPERMITS), "semaphore permits differ from another client's");
    cr_expect_eq(g3.status, 0, "%s", hilock_strerror(g3.status));
    cr_expect_eq(release_now(&e, g3.hold), 0);
    got again = sem_now(b, "count", 4, 1, NULL);
    cr_expect_eq(again.status, HILOCK_EPERMITS);
    cr_expect_neq(strstr(hilock_client_errstr(b), "3 permits"), NULL, "errstr: %s", hilock_client_errstr(b));

    /* Drained: the next acquirer sets the count. */
    cr_expect_eq(release_now(&e, ga.hold), 0);
    got g5 = sem_now(b, "count", 5, 4, NULL);
    cr_expect_eq(g5.status, 0, "a drained semaphore takes a new count: %s", hilock_strerror(g5.status));
    cr_expect_eq(sem_now(a, "count", 3, 1, NULL).status, HILOCK_EPERMITS);
    hilock_acquire_opts once = wait_opts(0, 0);
    got g5b = sem_now(a, "count", 5, 1, &once);
    cr_expect_eq(g5b.status, 0, "%s", hilock_strerror(g5b.status));
    cr_expect_eq(in_use("count"), 5);
    cr_expect_eq(release_now(&e, g5.hold), 0);
    cr_expect_eq(release_now(&e, g5b.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Idempotence of the scripts --------------------------------------------- */

static long long eval_int(redisReply *r, size_t i) {
    return r && r->type == REDIS_REPLY_ARRAY && r->elements > i ? r->element[i]->integer : -99;
}

Test(semaphore, scripts_are_idempotent_per_token) {
    redisContext *k = test_redis_connect(&e.r);
    cr_assert_not_null(k);
    const char *acq = hl_script_sem_acquire.body, *relb = hl_script_sem_release.body;
    char z[256], h[256], f[256]; /* skey's ring is reused below */
    snprintf(z, sizeof(z), "%s", skey("idem", ":sem"));
    snprintf(h, sizeof(h), "%s", skey("idem", ":sem:h"));
    snprintf(f, sizeof(f), "%s", skey("idem", ":sem:fence"));
#define ACQ(tok, n, want) redisCommand(k, "EVAL %s 3 %s %s %s %s 10000 60 %s %s", acq, z, h, f, tok, n, want)
#define REL(tok) redisCommand(k, "EVAL %s 2 %s %s %s ch PUBLISH", relb, z, h, tok)
    redisReply *r1 = ACQ("t1", "3", "2"), *r2 = ACQ("t1", "3", "2");
    cr_expect_eq(eval_int(r1, 0), 1);
    cr_expect_eq(eval_int(r2, 0), 1, "a re-sent try is granted again");
    cr_expect_eq(eval_int(r2, 1), eval_int(r1, 1), "with the same fence");
    cr_expect_eq(eval_int(r2, 2), 1, "and the same permits: one left");
    cr_expect_eq(in_use("idem"), 2);
    redisReply *r3 = ACQ("t2", "3", "2");
    cr_expect_eq(eval_int(r3, 0), 0, "2 + 2 of 3");
    cr_expect(eval_int(r3, 1) > 9000 && eval_int(r3, 1) <= 10001, "retry in %lld ms", eval_int(r3, 1));
    redisReply *r4 = ACQ("t3", "3", "1");
    cr_expect_eq(eval_int(r4, 0), 1);
    cr_expect_gt(eval_int(r4, 1), eval_int(r1, 1));
    redisReply *x1 = REL("t1"), *x2 = REL("t1"), *x3 = REL("nobody");
    cr_expect_eq(x1 ? x1->integer : -1, 1);
    cr_expect_eq(x2 ? x2->integer : -1, 0, "a repeated release finds nothing");
    cr_expect_eq(x3 ? x3->integer : -1, 0);
    cr_expect_eq(in_use("idem"), 1, "a repeated release freed someone else's permit");
    cr_expect_eq(holders("idem"), 1);
    redisReply *y = REL("t3");
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", h), 0, "no holder: the count goes");
    redisReply *all[] = {r1, r2, r3, r4, x1, x2, x3, y};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i]) freeReplyObject(all[i]);
    redisFree(k);
#undef ACQ
#undef REL
}

/* ---- Owners, and the mutex of the same name ------------------------------- */

Test(semaphore, reentrant_with_an_owner) {
    hilock_client *c = lockenv_client(&e);
    hilock_owner *o = hilock_owner_new(c);
    hilock_acquire_opts op;
    hilock_acquire_opts_init(&op);
    op.owner = o;
    got g1 = sem_now(c, "re", 3, 2, &op);
    cr_assert_eq(g1.status, 0);
    long long before = script_calls();
    got g2 = sem_now(c, "re", 3, 1, &op);
    cr_expect_eq(g2.status, 0);
    cr_expect_eq(g2.hold, g1.hold, "the owner's hold serves again");
    cr_expect_eq(script_calls(), before, "nothing sent");
    cr_expect_eq(hilock_hold_count(g1.hold), 2);
    got no;
    cr_expect_eq(hilock_semaphore_acquire(c, "re", 3, 3, &op, got_cb, &no, NULL), HILOCK_EINVAL,
                 "a hold of 2 permits cannot serve 3");
    cr_expect_eq(in_use("re"), 2);
    cr_expect_eq(release_now(&e, g1.hold), 0);
    cr_expect_eq(holders("re"), 1, "one level released the permits");
    cr_expect_eq(release_now(&e, g1.hold), 0);
    cr_expect_eq(holders("re"), 0);
    hilock_owner_free(o);
    hilock_client_free(c);
}

Test(semaphore, separate_from_the_mutex_of_the_same_name) {
    hilock_client *c = lockenv_client(&e);
    got m = acquire_now(&e, c, "both", NULL);
    cr_assert_eq(m.status, 0);
    hilock_acquire_opts once = wait_opts(0, 0);
    got s = sem_now(c, "both", 1, 1, &once);
    cr_expect_eq(s.status, 0, "the mutex took the semaphore: %s", hilock_strerror(s.status));
    cr_expect_eq(lock_exists(&e.r, "both"), 1);
    cr_expect_eq(holders("both"), 1);
    cr_expect_eq(acquire_now(&e, c, "both", &once).status, HILOCK_EBUSY);
    cr_expect_eq(release_now(&e, s.hold), 0);
    cr_expect_eq(lock_exists(&e.r, "both"), 1, "the semaphore's release took the mutex");
    cr_expect_eq(release_now(&e, m.hold), 0);
    hilock_client_free(c);
}

Test(semaphore, refused_over_redlock) {
    hilock_client *c = lockenv_client_url(&e, "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", 0);
    got g = {0, 0, NULL, 0};
    cr_expect_eq(hilock_semaphore_acquire(c, "rl", 2, 1, NULL, got_cb, &g, NULL), HILOCK_EINVAL);
    cr_expect_neq(strstr(hilock_client_errstr(c), "Redlock"), NULL, "%s", hilock_client_errstr(c));
    test_loop_for(e.base, 50);
    cr_expect_eq(g.calls, 0);
    hilock_client_free(c);
}

/* ---- Contention ------------------------------------------------------------- */

#define PROCS 4
#define SLOTS 4
#define ROUNDS 25

/* SLOTS slots of permits 1 and 2 of 3, ROUNDS rounds each, in this process
 * (on `base`, clients made by the caller). */
static void run_slots(semres *res, hilock_client *c, struct event_base *base, const char *name,
                      int idx, int hold_ms, int timeout_ms) {
    static semslot s[SLOTS];
    volatile int active = SLOTS, done = 0;
    for (int i = 0; i < SLOTS; i++) {
        s[i] = (semslot){res, c, base, name, idx, 3, 1 + (unsigned)(i % 2), ROUNDS, hold_ms, 0, NULL,
                         &active, &done, 0};
    }
    for (int i = 0; i < SLOTS; i++) semslot_go(&s[i]);
    test_loop_until(base, &done, timeout_ms);
}

/* At most 3 permits of 3 held at any time by 5 processes, and all 3 in use
 * at some point; fences unique and ordered. */
Test(semaphore, at_most_n_over_processes, .timeout = 120) {
    semres *res = mmap(NULL, sizeof(*res), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(res, MAP_FAILED);
    memset((void *)res, 0, sizeof(*res));
    pid_t kids[PROCS];
    long long t0 = test_now_ms();
    for (int p = 0; p < PROCS; p++) {
        kids[p] = fork();
        cr_assert_geq(kids[p], 0);
        if (kids[p] == 0) {
            lockenv ce = lockenv_child(&e);
            struct event_base *b = ce.base;
            hilock_client *c = lockenv_client(&ce);
            run_slots(res, c, b, "procs", 0, 3, 90000);
            hilock_client_free(c);
            event_base_free(b);
            _exit(0);
        }
    }
    hilock_client *c = lockenv_client(&e);
    run_slots(res, c, e.base, "procs", 0, 3, 90000);
    for (int p = 0; p < PROCS; p++) waitpid(kids[p], NULL, 0);
    long total = (PROCS + 1) * SLOTS * ROUNDS;
    cr_log_info("at_most_n_over_processes: %ld grants in %lld ms, max in use %ld", res->grants,
                test_now_ms() - t0, res->max_in_use[0]);
    cr_expect_eq(res->errors, 0, "first error %s", hilock_strerror(res->first_error));
    cr_expect_eq(res->grants, total);
    cr_expect_eq(res->over, 0, "more than 3 permits held at once");
    cr_expect_eq(res->max_in_use[0], 3, "never all 3 permits in use: not a semaphore");
    cr_expect_eq(res->stale, 0, "a fence below one delivered before its acquire");
    cr_expect_eq(semload_duplicates(res), 0, "two grants with one fence");
    cr_expect_eq(holders("procs"), 0, "permits left behind");
    hilock_client_free(c);
    munmap((void *)res, sizeof(*res));
}

/* Both kinds of connection killed again and again under contention:
 * re-sent tries and releases never take or free permits twice. */
static void kill_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    int *n = arg;
    test_redis_int(&e.r, (*n)++ % 2 ? "CLIENT KILL TYPE normal" : "CLIENT KILL TYPE pubsub");
}

Test(semaphore, connection_kills_under_contention, .timeout = 90) {
    semres *res = calloc(1, sizeof(*res));
    hilock_client *c[3];
    static semslot s[12];
    volatile int active = 12, done = 0;
    for (int i = 0; i < 3; i++) c[i] = lockenv_client(&e);
    for (int i = 0; i < 12; i++)
        s[i] = (semslot){res, c[i % 3], e.base, "kills", 0, 3, 1 + (unsigned)(i % 2), 20, 2, 0, NULL,
                         &active, &done, 0};
    int kills = 0;
    struct event *k = event_new(e.base, -1, EV_PERSIST, kill_tick, &kills);
    struct timeval tv = {0, 40 * 1000};
    evtimer_add(k, &tv);
    for (int i = 0; i < 12; i++) semslot_go(&s[i]);
    cr_assert(test_loop_until(e.base, &done, 60000), "every slot must end");
    event_free(k);
    cr_log_info("connection kills: %d kills, %ld grants, %ld errors (first %s)", kills, res->grants,
                res->errors, hilock_strerror(res->first_error));
    cr_expect_gt(kills, 3);
    cr_expect_eq(res->over, 0, "more than 3 permits held at once");
    cr_expect_eq(res->stale, 0);
    cr_expect_eq(semload_duplicates(res), 0);
    cr_expect_gt(res->grants, 12 * 20 / 2, "too few grants: %ld", res->grants);
    /* Releases whose outcome was unknown go on in the background. */
    long long until = test_now_ms() + 3000;
    while (holders("kills") != 0 && test_now_ms() < until) test_loop_for(e.base, 50);
    cr_expect_eq(holders("kills"), 0, "permits left behind");
    for (int i = 0; i < 3; i++) hilock_client_free(c[i]);
    free(res);
}

/* ---- On a Redis Cluster ----------------------------------------------------- */

/* Four names over the three masters, two clients: every key of a name on
 * the master of its slot, and at most 2 permits of 2 held per name. */
Test(semaphore, contention_on_a_cluster, .timeout = 180) {
    test_cluster cl;
    cr_assert_eq(test_cluster_start(&cl), 0, "the cluster did not start");
    hilock_client *a, *b;
    cluster_client_pair(&cl, &e.loop, &a, &b);
    static const char *names[SEMLOAD_NAMES] = {"cs-0", "cs-1", "cs-2", "cs-3"};

    for (int i = 0; i < SEMLOAD_NAMES; i++) {
        got g = sem_now(a, names[i], 2, 1, NULL);
        cr_assert_eq(g.status, 0, "%s: %s (%s)", names[i], hilock_strerror(g.status), hilock_client_errstr(a));
        char key[256];
        snprintf(key, sizeof(key), "%s", skey(names[i], ":sem"));
        test_redis *m = test_cluster_master_of(&cl, hilock_key_slot(key, strlen(key)));
        cr_assert_not_null(m);
        cr_expect_eq(test_redis_int(m, "ZCARD %s", key), 1, "%s is not on its slot's master", key);
        cr_expect_eq(test_redis_int(m, "EXISTS %s", skey(names[i], ":sem:h")), 1);
        cr_expect_eq(release_now(&e, g.hold), 0);
    }

    semres *res = calloc(1, sizeof(*res));
    static semslot s[16];
    volatile int active = 16, done = 0;
    for (int i = 0; i < 16; i++)
        s[i] = (semslot){res, i % 2 ? a : b, e.base, names[i % 4], i % 4, 2, 1, 15, 3, 0, NULL,
                         &active, &done, 0};
    long long t0 = test_now_ms();
    for (int i = 0; i < 16; i++) semslot_go(&s[i]);
    cr_assert(test_loop_until(e.base, &done, 90000), "every slot must end");
    cr_log_info("cluster semaphore: %ld grants in %lld ms", res->grants, test_now_ms() - t0);
    cr_expect_eq(res->errors, 0, "first error %s (%s)", hilock_strerror(res->first_error), hilock_client_errstr(a));
    cr_expect_eq(res->grants, 16 * 15);
    cr_expect_eq(res->over, 0, "more than 2 permits of a name held at once");
    for (int i = 0; i < SEMLOAD_NAMES; i++)
        cr_expect_eq(res->max_in_use[i], 2, "%s never had both permits in use", names[i]);
    cr_expect_eq(res->stale, 0);
    cr_expect_eq(semload_duplicates(res), 0);
    free(res);
    hilock_client_free(a);
    hilock_client_free(b);
    test_cluster_stop(&cl);
}
