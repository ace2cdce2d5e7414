/* Attacks on the counting semaphore and the read-write lock at the API edge
 * and under faults: counts that differ under reentrancy, a writer cancelled
 * while its try is re-sent after a SCRIPT FLUSH, a client freed from a
 * callback with waiters of both primitives, a server stalled past the lease,
 * the subscriber connection killed at a release, odd names and extreme
 * counts. Every test ends with no key of a held or waited lock left behind
 * (fence keys outlive locks by design: fence_ttl_s). */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/lockenv.h"

static lockenv e;
static void setup(void) { lockenv_start_debuggable(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(prim_attack, .init = setup, .fini = teardown, .timeout = 30);

/* ---- Helpers ------------------------------------------------------------------ */

static void sem_start(hilock_client *c, const char *name, unsigned total, unsigned k,
                      const hilock_acquire_opts *o, got *g, hilock_wait **w) {
    memset(g, 0, sizeof(*g));
    cr_assert_eq(hilock_semaphore_acquire(c, name, total, k, o, got_cb, g, w), 0);
}

static got sem_now(hilock_client *c, const char *name, unsigned total, unsigned k,
                   const hilock_acquire_opts *o) {
    got g;
    sem_start(c, name, total, k, o, &g, NULL);
    test_loop_until(e.base, &g.calls, 5000);
    cr_assert_eq(g.calls, 1, "semaphore %s: no callback", name);
    return g;
}

static void rw_start(hilock_client *c, int write, const char *name, const hilock_acquire_opts *o,
                     got *g, hilock_wait **w) {
    memset(g, 0, sizeof(*g));
    cr_assert_eq(write ? hilock_write_acquire(c, name, o, got_cb, g, w)
                       : hilock_read_acquire(c, name, o, got_cb, g, w),
                 0);
}

static got rw_now(hilock_client *c, int write, const char *name, const hilock_acquire_opts *o) {
    got g;
    rw_start(c, write, name, o, &g, NULL);
    test_loop_until(e.base, &g.calls, 5000);
    cr_assert_eq(g.calls, 1, "%s of %s: no callback", write ? "write" : "read", name);
    return g;
}

static long long key_exists(const char *name, const char *suffix) {
    return test_redis_int(&e.r, "EXISTS %b", prim_key(name, suffix),
                          strlen(prim_key(name, suffix)));
}

/* Keys of the prefix that are not fence keys (a fence key outlives its lock
 * on purpose): what a test must not leave behind once everything is
 * released. */
static long long keys_left(void) {
    redisReply *r = test_redis_cmd(&e.r, "KEYS hilock:*");
    long long n = 0;
    cr_assert(r != NULL && r->type == REDIS_REPLY_ARRAY);
    for (size_t i = 0; i < r->elements; i++) {
        const char *k = r->element[i]->str;
        size_t len = r->element[i]->len;
        int fence = (len >= 6 && memcmp(k + len - 6, ":fence", 6) == 0) ||
                    (len >= 4 && memcmp(k + len - 4, ":rwf", 4) == 0);
        if (!fence) {
            n++;
            cr_log_warn("left behind: %.*s", (int)len, k);
        }
    }
    freeReplyObject(r);
    return n;
}

/* ---- Reentrancy and permits_total ------------------------------------------------ */

/* An owner that holds 1 of 3 asks for 1 of 5: the semaphore's holders (the
 * owner's hold among them) acquired it with 3, so the acquire must end with
 * HILOCK_EPERMITS as any other would, not be served by the owner's hold,
 * which would tell the caller that the semaphore is one of 5. */
Test(prim_attack, sem_reentrant_acquire_with_another_count_is_epermits) {
    hilock_client *c = lockenv_client(&e);
    hilock_owner *o = hilock_owner_new(c);
    hilock_acquire_opts op;
    hilock_acquire_opts_init(&op);
    op.owner = o;
    got g1 = sem_now(c, "cnt", 3, 1, &op);
    cr_assert_eq(g1.status, 0);
    got g2 = sem_now(c, "cnt", 5, 1, &op);
    cr_expect_eq(g2.status, HILOCK_EPERMITS, "served as 1 of 5 by a hold of 1 of 3: %s",
                 hilock_strerror(g2.status));
    cr_expect_eq(hilock_hold_count(g1.hold), 1);
    if (g2.status == 0 && g2.hold == g1.hold) release_now(&e, g2.hold);
    got g3 = sem_now(c, "cnt", 3, 1, &op);
    cr_expect_eq(g3.status, 0, "the same count is still reentrant");
    cr_expect_eq(g3.hold, g1.hold);
    cr_expect_eq(release_now(&e, g1.hold), 0);
    cr_expect_eq(release_now(&e, g1.hold), 0);
    cr_expect_eq(keys_left(), 0);
    hilock_owner_free(o);
    hilock_client_free(c);
}

/* Two waits of one owner queued behind another client's holder, for 1 of 3
 * and 1 of 5: the grant of the first must not serve the second (Redis would
 * refuse its count while the first holds). */
Test(prim_attack, sem_queued_waits_of_an_owner_with_other_counts_do_not_share) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got full = sem_now(a, "share", 3, 3, NULL);
    cr_assert_eq(full.status, 0);
    hilock_owner *o = hilock_owner_new(b);
    hilock_acquire_opts op;
    hilock_acquire_opts_init(&op);
    op.owner = o;
    got w1, w2;
    sem_start(b, "share", 3, 1, &op, &w1, NULL);
    sem_start(b, "share", 5, 1, &op, &w2, NULL);
    test_loop_for(e.base, 150);
    cr_expect_eq(w1.calls + w2.calls, 0);
    cr_assert_eq(release_now(&e, full.hold), 0);
    cr_assert(test_loop_until(e.base, &w1.calls, 3000));
    cr_assert(test_loop_until(e.base, &w2.calls, 3000));
    cr_expect_eq(w1.status, 0);
    cr_expect_eq(w2.status, HILOCK_EPERMITS, "1 of 5 shared a grant of 1 of 3: %s",
                 hilock_strerror(w2.status));
    cr_expect_eq(hilock_hold_count(w1.hold), 1);
    if (w2.status == 0) release_now(&e, w2.hold);
    cr_expect_eq(release_now(&e, w1.hold), 0);
    cr_expect_eq(keys_left(), 0);
    hilock_owner_free(o);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- A writer cancelled while its try is re-sent after SCRIPT FLUSH -------------- */

/* After SCRIPT FLUSH the writer's try (EVALSHA, its script loaded on the
 * connection before) fails with NOSCRIPT and is sent again as EVAL, behind
 * the release that the cancel sent (EVAL: that script's first use on the
 * connection), so the try runs last and leaves its "writer waiting" marker
 * for a wait that is gone. hilock.h: a writer that is cancelled removes its
 * marker at once; a marker left would hold readers off for 3 s. */
Test(prim_attack, rw_writer_cancelled_across_script_flush_leaves_no_marker) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got r = rw_now(a, 0, "flush", NULL); /* rw_acquire loaded on a's connection */
    cr_assert_eq(r.status, 0);
    cr_assert_eq(test_redis_int(&e.r, "SCRIPT FLUSH"), -1); /* +OK is no integer */
    got w;
    hilock_wait *ww;
    rw_start(a, 1, "flush", NULL, &w, &ww);
    cr_assert_eq(hilock_wait_cancel(ww), 0);
    cr_assert(test_loop_until(e.base, &w.calls, 2000));
    cr_expect_eq(w.status, HILOCK_ECANCELED);
    test_loop_for(e.base, 200); /* the re-sent try, and whatever follows it */
    cr_expect_eq(key_exists("flush", ":rww"), 0, "a cancelled writer's marker stays");
    hilock_acquire_opts once = opts_wait(0);
    got r2 = rw_now(b, 0, "flush", &once);
    cr_expect_eq(r2.status, 0, "a reader held off by a writer that is gone: %s",
                 hilock_strerror(r2.status));
    if (r2.status == 0) cr_expect_eq(release_now(&e, r2.hold), 0);
    cr_expect_eq(release_now(&e, r.hold), 0);
    test_loop_for(e.base, 50);
    cr_expect_eq(keys_left(), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}
