/* Attacks on the counting semaphore and the read-write lock at the API edge
 * and under faults: counts that differ under reentrancy, an owner's queued
 * waits after the one that was to serve them ended, a writer cancelled
 * while its try is re-sent after a SCRIPT FLUSH, contention across
 * flushes, a client freed from a callback (or closed) with waiters of both
 * primitives, cancels from a grant's callback, a server stalled past the
 * lease, the subscriber connection killed at a release, keys deleted under
 * holders, odd names and extreme counts. Every test ends with no key of a held or waited lock left behind
 * (fence keys outlive locks by design: fence_ttl_s). */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/lockenv.h"
#include "support/rwcheck.h"
#include "support/semload.h"

static lockenv e;
static void setup(void) { lockenv_start_debuggable(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(prim_edges, .init = setup, .fini = teardown, .timeout = 30);

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
static long long keys_left_said(int say) {
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
            if (say) cr_log_warn("left behind: %.*s", (int)len, k);
        }
    }
    freeReplyObject(r);
    return n;
}

static long long keys_left(void) { return keys_left_said(1); }
static long long keys_left_quiet(void) { return keys_left_said(0); }

/* ---- Reentrancy and permits_total ------------------------------------------------ */

/* An owner that holds 1 of 3 asks for 1 of 5: the semaphore's holders (the
 * owner's hold among them) acquired it with 3, so the acquire must end with
 * HILOCK_EPERMITS as any other would, not be served by the owner's hold,
 * which would tell the caller that the semaphore is one of 5. */
Test(prim_edges, sem_reentrant_acquire_with_another_count_is_epermits) {
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
Test(prim_edges, sem_queued_waits_of_an_owner_with_other_counts_do_not_share) {
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
Test(prim_edges, rw_writer_cancelled_across_script_flush_leaves_no_marker) {
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

/* ---- A server stalled longer than the lease ------------------------------------- */

/* A holds (1 of 1, or the write lock) with a 300 ms lease and B waits; the
 * server sleeps 1.2 s. A is told once that it lost the lock, before B gets
 * it; B's fence is above A's (a reader's is A's: the last write's); A's
 * release says HILOCK_ELOST; nothing is left. B's requests may wait the whole stall (request_timeout_ms 5000):
 * a waiter whose try times out fails by design. */
static void stall_past_the_lease(int rw) {
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.request_timeout_ms = 5000;
    hilock_client *a = lockenv_client(&e), *b = lockenv_client_cfg(&e, &cfg);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o = opts_wait_lease(2000, 300);
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = rw ? rw_now(a, 1, "stall", &o) : sem_now(a, "stall", 1, 1, &o);
    cr_assert_eq(ga.status, 0);
    got gb;
    if (rw) rw_start(b, 0, "stall", NULL, &gb, NULL);
    else sem_start(b, "stall", 1, 1, NULL, &gb, NULL);
    test_loop_for(e.base, 400); /* A renews meanwhile */
    cr_assert_eq(gb.calls, 0);
    cr_assert_eq(lost.calls, 0);
    pid_t sleeper = test_redis_debug_sleep(&e.r, "1.2");
    cr_assert(test_loop_until(e.base, &gb.calls, 6000));
    cr_expect_eq(gb.status, 0, "B: %s", hilock_strerror(gb.status));
    cr_expect_eq(lost.calls, 1, "A was not told before B held");
    cr_expect_eq(lost.why, HILOCK_ELOST);
    cr_expect_leq(lost.at_ms, gb.at_ms);
    cr_expect(hilock_hold_lost(ga.hold));
    /* A reader gets the last write's fence: A's. */
    if (gb.status == 0 && rw) cr_expect_eq(hilock_hold_fence(gb.hold), hilock_hold_fence(ga.hold));
    if (gb.status == 0 && !rw) cr_expect_gt(hilock_hold_fence(gb.hold), hilock_hold_fence(ga.hold));
    int st;
    cr_expect_eq(waitpid(sleeper, &st, 0), sleeper);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "DEBUG SLEEP failed");
    cr_expect_eq(release_now(&e, ga.hold), HILOCK_ELOST);
    test_loop_for(e.base, 300);
    cr_expect_eq(lost.calls, 1, "lost told %d times", lost.calls);
    if (gb.status == 0) {
        cr_expect(!hilock_hold_lost(gb.hold));
        cr_expect_eq(release_now(&e, gb.hold), 0);
    }
    cr_expect_eq(keys_left(), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(prim_edges, sem_server_stalled_past_the_lease) { stall_past_the_lease(0); }
Test(prim_edges, rw_server_stalled_past_the_lease) { stall_past_the_lease(1); }

/* ---- The subscriber connection killed at a release ------------------------------- */

/* B waits behind A's hold (30 s lease: B's fallback timer is that far);
 * B's subscriber connection is killed and A releases in the same instant,
 * so B's release message is lost. B must still get the lock at once: its
 * subscription comes back and its ack makes it try. */
static void sub_killed_at_release(int rw) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = rw ? rw_now(a, 1, "subkill", NULL) : sem_now(a, "subkill", 2, 2, NULL);
    cr_assert_eq(ga.status, 0);
    got gb;
    if (rw) rw_start(b, 0, "subkill", NULL, &gb, NULL);
    else sem_start(b, "subkill", 2, 1, NULL, &gb, NULL);
    test_loop_for(e.base, 200);
    cr_assert_eq(gb.calls, 0);
    cr_assert_geq(test_redis_int(&e.r, "CLIENT KILL TYPE pubsub"), 1);
    rel r = {0, 0};
    cr_assert_eq(hilock_release(ga.hold, rel_cb, &r), 0);
    long long t0 = test_now_ms();
    cr_assert(test_loop_until(e.base, &gb.calls, 5000), "the wakeup was lost");
    cr_expect_eq(gb.status, 0);
    cr_expect_lt(gb.at_ms - t0, 3000, "woken after %lld ms", gb.at_ms - t0);
    test_loop_until(e.base, &r.calls, 2000);
    cr_expect_eq(r.calls, 1);
    cr_expect_eq(r.status, 0);
    if (gb.status == 0) cr_expect_eq(release_now(&e, gb.hold), 0);
    cr_expect_eq(keys_left(), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(prim_edges, sem_subscriber_killed_at_a_release) { sub_killed_at_release(0); }
Test(prim_edges, rw_subscriber_killed_at_a_release) { sub_killed_at_release(1); }

/* ---- Freed from a callback, closed with everything pending ----------------------- */

typedef struct freer {
    hilock_client *c;
    got g;
} freer;

static void free_in_cb(hilock_hold *h, int status, void *data) {
    freer *f = data;
    got_cb(h, status, &f->g);
    hilock_client_free(f->c);
}

/* Client c waits on a semaphore (two waits, one of them for 2 permits) and
 * on a read-write lock (readers and a writer), all held off by x; the
 * grant of another of its waits frees c from its callback. Every other
 * wait gets HILOCK_ECANCELED once, before hilock_client_free returns. */
Test(prim_edges, freed_from_a_callback_with_waiters_of_both) {
    hilock_client *x = lockenv_client(&e), *c = lockenv_client(&e);
    got xs = sem_now(x, "fs", 2, 2, NULL);
    got xw = rw_now(x, 1, "fr", NULL);
    got xt = rw_now(x, 1, "ft", NULL);
    cr_assert(xs.status == 0 && xw.status == 0 && xt.status == 0);
    got w[5];
    sem_start(c, "fs", 2, 1, NULL, &w[0], NULL);
    sem_start(c, "fs", 2, 2, NULL, &w[1], NULL);
    rw_start(c, 0, "fr", NULL, &w[2], NULL);
    rw_start(c, 1, "fr", NULL, &w[3], NULL);
    rw_start(c, 0, "fr", NULL, &w[4], NULL);
    freer f = {c, {0, 0, NULL, 0}};
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 300);
    cr_assert_eq(hilock_write_acquire(c, "ft", &o, free_in_cb, &f, NULL), 0);
    test_loop_for(e.base, 200);
    for (int i = 0; i < 5; i++) cr_assert_eq(w[i].calls, 0);
    cr_assert_eq(release_now(&e, xt.hold), 0);
    cr_assert(test_loop_until(e.base, &f.g.calls, 3000));
    cr_expect_eq(f.g.status, 0);
    for (int i = 0; i < 5; i++) {
        cr_expect_eq(w[i].calls, 1, "wait %d: %d callbacks", i, w[i].calls);
        cr_expect_eq(w[i].status, HILOCK_ECANCELED, "wait %d: %s", i, hilock_strerror(w[i].status));
    }
    cr_expect_eq(release_now(&e, xs.hold), 0);
    cr_expect_eq(release_now(&e, xw.hold), 0);
    /* The abandoned hold's 300 ms lease; and the places that c's starving
     * waits took and c, freed, did not give up: x's release hands the
     * reader's the lock, for a claim window (1 s) that nobody claims, and
     * the semaphore's lapses with c's last word (5 s). */
    test_loop_for(e.base, 1300);
    for (int i = 0; i < 5; i++) cr_expect_eq(w[i].calls, 1);
    cr_expect_eq(f.g.calls, 1);
    for (long long until = test_now_ms() + 6000; keys_left_quiet() != 0 && test_now_ms() < until;)
        test_loop_for(e.base, 200);
    cr_expect_eq(keys_left(), 0);
    hilock_client_free(x);
}

static void closed_cb(void *data) { *(int *)data = 1; }

/* hilock_client_close with a semaphore hold and wait, a read hold, and a
 * writer that left its marker: the holds are released and the marker goes
 * with the writer's wait, at once (x's reader and x's permit stay). */
Test(prim_edges, close_releases_holds_and_markers_of_both) {
    hilock_client *x = lockenv_client(&e), *c = lockenv_client(&e), *y = lockenv_client(&e);
    got xs = sem_now(x, "cs", 2, 1, NULL);
    got xr = rw_now(x, 0, "cr", NULL);
    got cs = sem_now(c, "cs", 2, 1, NULL);
    got cr = rw_now(c, 0, "cr2", NULL);
    cr_assert(xs.status == 0 && xr.status == 0 && cs.status == 0 && cr.status == 0);
    got ws, ww;
    sem_start(c, "cs", 2, 1, NULL, &ws, NULL);
    rw_start(c, 1, "cr", NULL, &ww, NULL);
    test_loop_for(e.base, 200);
    cr_assert_eq(key_exists("cr", ":rww"), 1, "the writer left no marker");
    int closed = 0;
    hilock_client_close(c, closed_cb, &closed);
    cr_assert(test_loop_until(e.base, &closed, 3000));
    cr_expect_eq(ws.calls, 1);
    cr_expect_eq(ws.status, HILOCK_ECANCELED);
    cr_expect_eq(ww.calls, 1);
    cr_expect_eq(ww.status, HILOCK_ECANCELED);
    cr_expect_eq(key_exists("cr", ":rww"), 0, "the closed writer's marker stays");
    cr_expect_eq(key_exists("cr2", ":rwr"), 0, "the closed reader stays");
    hilock_acquire_opts once = opts_wait(0);
    got ys = sem_now(y, "cs", 2, 1, &once);
    cr_expect_eq(ys.status, 0, "the closed client's permit stays: %s", hilock_strerror(ys.status));
    got yr = rw_now(y, 0, "cr", &once);
    cr_expect_eq(yr.status, 0, "a reader held off: %s", hilock_strerror(yr.status));
    if (ys.status == 0) release_now(&e, ys.hold);
    if (yr.status == 0) release_now(&e, yr.hold);
    cr_expect_eq(release_now(&e, xs.hold), 0);
    cr_expect_eq(release_now(&e, xr.hold), 0);
    cr_expect_eq(keys_left(), 0);
    hilock_client_free(x);
    hilock_client_free(y);
}

/* ---- Names and counts at the edges --------------------------------------------------- */

/* A waiter is woken by the release message of a name whose bytes are
 * anything but NUL (braces, '%', controls, bytes >= 0x80), also at the
 * longest name, whose key and channel are three times as long. */
static void odd_name(const char *name) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    for (int rw = 0; rw < 2; rw++) {
        got ga = rw ? rw_now(a, 1, name, NULL) : sem_now(a, name, 1, 1, NULL);
        cr_assert_eq(ga.status, 0, "%s", hilock_strerror(ga.status));
        cr_expect_str_eq(hilock_hold_name(ga.hold), name);
        got gb;
        if (rw) rw_start(b, 0, name, NULL, &gb, NULL);
        else sem_start(b, name, 1, 1, NULL, &gb, NULL);
        test_loop_for(e.base, 150);
        cr_assert_eq(gb.calls, 0);
        long long t0 = test_now_ms();
        cr_assert_eq(release_now(&e, ga.hold), 0);
        cr_assert(test_loop_until(e.base, &gb.calls, 5000));
        cr_expect_eq(gb.status, 0);
        cr_expect_lt(gb.at_ms - t0, 2000, "not woken by the release message");
        cr_expect_eq(release_now(&e, gb.hold), 0);
    }
    cr_expect_eq(keys_left(), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(prim_edges, odd_bytes_in_names) {
    odd_name("a b\r\n\t*$3 {x}%7B%}{\x01\x7f\x80\xfe\xff");
}

Test(prim_edges, longest_name_of_braces) {
    static char name[HILOCK_NAME_MAX + 1];
    for (int i = 0; i < HILOCK_NAME_MAX; i++) name[i] = "{}%"[i % 3];
    odd_name(name);
    char longer[HILOCK_NAME_MAX + 2];
    memcpy(longer, name, HILOCK_NAME_MAX);
    longer[HILOCK_NAME_MAX] = 'y';
    longer[HILOCK_NAME_MAX + 1] = '\0';
    hilock_client *c = lockenv_client(&e);
    got g;
    cr_expect_eq(hilock_semaphore_acquire(c, longer, 1, 1, NULL, got_cb, &g, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_read_acquire(c, longer, NULL, got_cb, &g, NULL), HILOCK_EINVAL);
    hilock_client_free(c);
}

/* The largest count, all of it at once, one more refused; then a release
 * twice (the second refused, one callback). */
Test(prim_edges, sem_largest_count_and_release_twice) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = sem_now(a, "max", HILOCK_PERMITS_MAX, HILOCK_PERMITS_MAX, NULL);
    cr_assert_eq(ga.status, 0);
    hilock_acquire_opts once = opts_wait(0);
    cr_expect_eq(sem_now(b, "max", HILOCK_PERMITS_MAX, 1, &once).status, HILOCK_EBUSY);
    rel r1 = {0, 0}, r2 = {0, 0};
    cr_assert_eq(hilock_release(ga.hold, rel_cb, &r1), 0);
    cr_expect_eq(hilock_release(ga.hold, rel_cb, &r2), HILOCK_EINVAL);
    cr_assert(test_loop_until(e.base, &r1.calls, 2000));
    test_loop_for(e.base, 50);
    cr_expect_eq(r1.calls, 1);
    cr_expect_eq(r1.status, 0);
    cr_expect_eq(r2.calls, 0);
    got gb = sem_now(b, "max", HILOCK_PERMITS_MAX, HILOCK_PERMITS_MAX - 1, &once);
    cr_expect_eq(gb.status, 0);
    got gc = sem_now(a, "max", HILOCK_PERMITS_MAX, 1, &once);
    cr_expect_eq(gc.status, 0, "the last permit: %s", hilock_strerror(gc.status));
    cr_expect_eq(sem_now(a, "max", HILOCK_PERMITS_MAX, 1, &once).status, HILOCK_EBUSY);
    if (gb.status == 0) release_now(&e, gb.hold);
    if (gc.status == 0) release_now(&e, gc.hold);
    cr_expect_eq(keys_left(), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Keys deleted under a holder ------------------------------------------------------ */

/* The semaphore's hash (its count and its holders' permits) deleted under a
 * holder, as an operator or an eviction may: the holder learns at its next
 * renewal that it lost its permits (they cannot be counted any more), and
 * an acquire meanwhile must not end with HILOCK_EPERMITS ("acquired with 0
 * permits in all": nobody did), as the mutex whose key was deleted is
 * simply free. */
Test(prim_edges, sem_hash_deleted_under_a_holder) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 600);
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = sem_now(a, "gone", 1, 1, &o);
    cr_assert_eq(ga.status, 0);
    const char *h = prim_key("gone", ":sem:h");
    cr_assert_eq(test_redis_int(&e.r, "DEL %b", h, strlen(h)), 1);
    hilock_acquire_opts w = opts_wait(2000);
    got gb = sem_now(b, "gone", 1, 1, &w);
    cr_expect_eq(gb.status, 0, "after the hash went: %s (%s)", hilock_strerror(gb.status),
                 hilock_client_errstr(b));
    cr_assert(test_loop_until(e.base, &lost.calls, 2000), "the holder was not told");
    cr_expect_eq(lost.why, HILOCK_ELOST);
    cr_expect_eq(release_now(&e, ga.hold), HILOCK_ELOST);
    if (gb.status == 0) {
        cr_expect(!hilock_hold_lost(gb.hold));
        cr_expect_eq(release_now(&e, gb.hold), 0);
    }
    cr_expect_eq(keys_left(), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Cancel from inside a grant's callback ------------------------------------------- */

typedef struct canceller {
    got g;
    hilock_wait *victim;
    int rc;
} canceller;

static void cancel_in_cb(hilock_hold *h, int status, void *data) {
    canceller *k = data;
    got_cb(h, status, &k->g);
    k->rc = hilock_wait_cancel(k->victim);
}

/* Three waits of one client on a free semaphore of 3 go in one after the
 * other (each grant lets the next try at once); the first one's callback
 * cancels the second, whose try may be out already (or granted, not yet
 * delivered). Whatever it raced, Redis keeps exactly the permits of the
 * holds that were delivered. Then the same with readers. */
static void cancel_from_a_grant(int rw) {
    hilock_client *c = lockenv_client(&e);
    canceller k = {{0, 0, NULL, 0}, NULL, 99};
    got g2, g3;
    if (rw) {
        cr_assert_eq(hilock_read_acquire(c, "cancb", NULL, cancel_in_cb, &k, NULL), 0);
        rw_start(c, 0, "cancb", NULL, &g2, &k.victim);
        rw_start(c, 0, "cancb", NULL, &g3, NULL);
    } else {
        cr_assert_eq(hilock_semaphore_acquire(c, "cancb", 3, 1, NULL, cancel_in_cb, &k, NULL), 0);
        sem_start(c, "cancb", 3, 1, NULL, &g2, &k.victim);
        sem_start(c, "cancb", 3, 1, NULL, &g3, NULL);
    }
    cr_assert(test_loop_until(e.base, &g3.calls, 3000));
    test_loop_for(e.base, 200); /* a grant given back, if the cancel raced one */
    cr_expect_eq(k.g.status, 0);
    cr_expect_eq(g3.status, 0);
    cr_expect_eq(g2.calls, 1);
    int delivered = 2 + (g2.status == 0);
    if (k.rc == 0) cr_expect_eq(g2.status, HILOCK_ECANCELED);
    else cr_expect_eq(g2.status, 0, "the cancel said %d", k.rc);
    const char *key = prim_key("cancb", rw ? ":rwr" : ":sem");
    cr_expect_eq(test_redis_int(&e.r, "ZCARD %b", key, strlen(key)), delivered,
                 "holders in Redis for %d delivered holds", delivered);
    release_now(&e, k.g.hold);
    release_now(&e, g3.hold);
    if (g2.status == 0) release_now(&e, g2.hold);
    cr_expect_eq(keys_left(), 0);
    hilock_client_free(c);
}

Test(prim_edges, sem_cancel_from_a_grant_callback) { cancel_from_a_grant(0); }
Test(prim_edges, rw_cancel_from_a_grant_callback) { cancel_from_a_grant(1); }

/* ---- An owner's queued waits after the one that was to serve them ended --------------- */

/* An owner queues write, read, write behind another reader: no upgrade
 * (hilock.h), the first write's grant was to serve all three. That write
 * is cancelled: the read is then granted alone, and the second write would
 * wait for its own owner's read, its marker holding every other reader
 * off. It must end instead (HILOCK_EINVAL, the upgrade's refusal), and
 * leave no marker. */
Test(prim_edges, rw_owner_write_behind_its_read_after_its_first_write_ended) {
    hilock_client *a = lockenv_client(&e), *x = lockenv_client(&e);
    hilock_owner *o = hilock_owner_new(a);
    hilock_acquire_opts opt = opts_wait(HILOCK_WAIT_FOREVER);
    opt.owner = o;
    got xr = rw_now(x, 0, "upc", NULL);
    cr_assert_eq(xr.status, 0);
    got w1, r1, w2;
    hilock_wait *hw1;
    rw_start(a, 1, "upc", &opt, &w1, &hw1);
    rw_start(a, 0, "upc", &opt, &r1, NULL);
    rw_start(a, 1, "upc", &opt, &w2, NULL);
    test_loop_for(e.base, 100);
    cr_assert_eq(hilock_wait_cancel(hw1), 0);
    cr_assert(test_loop_until(e.base, &r1.calls, 2000));
    cr_expect_eq(r1.status, 0);
    cr_assert(test_loop_until(e.base, &w2.calls, 2000), "the owner's write waits for its own read");
    cr_expect_eq(w2.status, HILOCK_EINVAL, "%s", hilock_strerror(w2.status));
    test_loop_for(e.base, 100);
    cr_expect_eq(key_exists("upc", ":rww"), 0, "its marker holds readers off");
    hilock_acquire_opts once = opts_wait(0);
    got y = rw_now(x, 0, "upc", &once);
    cr_expect_eq(y.status, 0, "another reader: %s", hilock_strerror(y.status));
    if (y.status == 0) release_now(&e, y.hold);
    if (w2.status == 0) release_now(&e, w2.hold);
    cr_expect_eq(release_now(&e, r1.hold), 0);
    cr_expect_eq(release_now(&e, xr.hold), 0);
    cr_expect_eq(keys_left(), 0);
    hilock_owner_free(o);
    hilock_client_free(a);
    hilock_client_free(x);
}

/* The same for a semaphore of 3: an owner's waits for 1 and then 3, queued
 * behind a holder of all 3, were admitted (no hold yet). The 1 is granted;
 * the 3 would wait for its owner's own permit, for ever: it ends as an
 * acquire beside that hold does (HILOCK_EINVAL: a hold does not grow). */
Test(prim_edges, sem_owner_wait_for_more_behind_its_own_grant) {
    hilock_client *a = lockenv_client(&e), *x = lockenv_client(&e);
    hilock_owner *o = hilock_owner_new(a);
    hilock_acquire_opts opt = opts_wait(HILOCK_WAIT_FOREVER);
    opt.owner = o;
    got xs = sem_now(x, "grow", 3, 3, NULL);
    cr_assert_eq(xs.status, 0);
    got g1, g3;
    sem_start(a, "grow", 3, 1, &opt, &g1, NULL);
    sem_start(a, "grow", 3, 3, &opt, &g3, NULL);
    test_loop_for(e.base, 100);
    cr_assert_eq(release_now(&e, xs.hold), 0);
    cr_assert(test_loop_until(e.base, &g1.calls, 2000));
    cr_expect_eq(g1.status, 0);
    cr_assert(test_loop_until(e.base, &g3.calls, 2000), "3 of 3 waits for its owner's own permit");
    cr_expect_eq(g3.status, HILOCK_EINVAL, "%s", hilock_strerror(g3.status));
    if (g3.status == 0) release_now(&e, g3.hold);
    cr_expect_eq(release_now(&e, g1.hold), 0);
    cr_expect_eq(keys_left(), 0);
    hilock_owner_free(o);
    hilock_client_free(a);
    hilock_client_free(x);
}

/* The readers' set deleted under two readers: a writer gets in at once (as
 * after a mutex's key is deleted), and each reader is told once, at its
 * next renewal, that it lost the lock; its release says so. */
Test(prim_edges, rw_readers_deleted_under_them) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    lostrec l1 = {0, 0, 0}, l2 = {0, 0, 0};
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 600);
    o.lost_cb = lost_cb;
    o.lost_data = &l1;
    got r1 = rw_now(a, 0, "rdel", &o);
    o.lost_data = &l2;
    got r2 = rw_now(a, 0, "rdel", &o);
    cr_assert(r1.status == 0 && r2.status == 0);
    const char *k = prim_key("rdel", ":rwr");
    cr_assert_eq(test_redis_int(&e.r, "DEL %b", k, strlen(k)), 1);
    hilock_acquire_opts once = opts_wait(0);
    got w = rw_now(b, 1, "rdel", &once);
    cr_expect_eq(w.status, 0, "%s", hilock_strerror(w.status));
    cr_assert(test_loop_until(e.base, &l1.calls, 2000));
    cr_assert(test_loop_until(e.base, &l2.calls, 2000));
    test_loop_for(e.base, 400); /* more renewal rounds: told once */
    cr_expect_eq(l1.calls, 1);
    cr_expect_eq(l2.calls, 1);
    cr_expect_eq(l1.why, HILOCK_ELOST);
    cr_expect_eq(release_now(&e, r1.hold), HILOCK_ELOST);
    cr_expect_eq(release_now(&e, r2.hold), HILOCK_ELOST);
    if (w.status == 0) {
        cr_expect(!hilock_hold_lost(w.hold));
        cr_expect_eq(release_now(&e, w.hold), 0);
    }
    cr_expect_eq(keys_left(), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- SCRIPT FLUSH under contention ------------------------------------------------------ */

typedef struct flusher {
    struct event *ev;
    int flushes;
} flusher;

static void flush_tick(evutil_socket_t fd, short what, void *data) {
    flusher *f = data;
    (void)fd; (void)what;
    redisReply *r = test_redis_cmd(&e.r, "SCRIPT FLUSH");
    if (r) freeReplyObject(r);
    f->flushes++;
    struct timeval tv = {0, 40 * 1000};
    evtimer_add(f->ev, &tv);
}

/* Flush now (the clients' scripts are loaded from their first requests
 * on) and every 40 ms. */
static void flusher_start(flusher *f) {
    f->flushes = 0;
    f->ev = evtimer_new(e.base, flush_tick, f);
    struct timeval tv = {0, 0};
    evtimer_add(f->ev, &tv);
}

static void flusher_stop(flusher *f) {
    evtimer_del(f->ev);
    event_free(f->ev);
}

#define FL_CLIENTS 3
#define FL_SLOTS 3

/* Slots of 1 and 2 permits of 3 on three clients, scripts flushed every
 * 40 ms (each flush makes every client's next script NOSCRIPT, re-sent as
 * EVAL, possibly behind later requests): never more than 3 permits held,
 * no error, nothing left. */
Test(prim_edges, sem_contention_across_script_flushes) {
    static semres res;
    static semslot s[FL_CLIENTS * FL_SLOTS];
    hilock_client *c[FL_CLIENTS];
    volatile int active = FL_CLIENTS * FL_SLOTS, done = 0;
    memset(&res, 0, sizeof(res));
    for (int i = 0; i < FL_CLIENTS; i++) c[i] = lockenv_client(&e);
    for (int i = 0; i < FL_CLIENTS * FL_SLOTS; i++)
        s[i] = (semslot){&res, c[i % FL_CLIENTS], e.base, "flc", 0, 3, 1 + (unsigned)(i % 2), 12, 5,
                         0, NULL, &active, &done, 0};
    flusher f;
    flusher_start(&f);
    for (int i = 0; i < FL_CLIENTS * FL_SLOTS; i++) semslot_go(&s[i]);
    cr_assert(test_loop_until(e.base, &done, 20000), "the slots did not finish");
    flusher_stop(&f);
    cr_expect_geq(f.flushes, 2);
    cr_expect_eq(res.over, 0, "more than 3 permits held");
    cr_expect_eq(res.errors, 0, "%ld errors, the first %s", res.errors, hilock_strerror(res.first_error));
    cr_expect_eq(res.stale, 0);
    cr_expect_eq(semload_duplicates(&res), 0);
    test_loop_for(e.base, 100);
    cr_expect_eq(keys_left(), 0);
    for (int i = 0; i < FL_CLIENTS; i++) hilock_client_free(c[i]);
}

/* Readers and writers on three clients, scripts flushed every 40 ms:
 * never a writer beside anyone, write fences increasing, no error, no
 * marker or holder left. */
Test(prim_edges, rw_contention_across_script_flushes) {
    static rwshared sh;
    rwproc p = {&sh, e.base, 0, 0};
    static rwturn t[FL_CLIENTS * FL_SLOTS * 8];
    hilock_client *c[FL_CLIENTS];
    memset(&sh, 0, sizeof(sh));
    for (int i = 0; i < FL_CLIENTS; i++) c[i] = lockenv_client(&e);
    flusher f;
    flusher_start(&f);
    int n = (int)(sizeof(t) / sizeof(t[0]));
    for (int i = 0; i < n; i++) {
        t[i] = (rwturn){&p, i % 3 == 0, 5, NULL};
        cr_assert_eq(rwturn_start(c[i % FL_CLIENTS], "flrw", &t[i]), 0);
    }
    cr_assert(test_loop_until(e.base, &p.done, 20000), "%d turns left", p.left);
    flusher_stop(&f);
    cr_expect_geq(f.flushes, 2);
    cr_expect_eq(sh.violations, 0);
    cr_expect_eq(sh.fence_regressions, 0);
    cr_expect_eq(sh.stale_reads, 0);
    cr_expect_eq(sh.errors, 0, "%ld errors, the first %s", sh.errors, hilock_strerror(sh.first_error));
    cr_expect_eq(sh.writes, n / 3);
    test_loop_for(e.base, 100);
    cr_expect_eq(keys_left(), 0);
    for (int i = 0; i < FL_CLIENTS; i++) hilock_client_free(c[i]);
}

/* The SCRIPT FLUSH case again, the writer's wait ended by
 * hilock_client_close: the close ends, once, and leaves no marker (the
 * try, re-sent behind the close's release, is undone once answered). */
Test(prim_edges, rw_close_while_a_writer_try_is_resent_after_flush) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got r = rw_now(b, 0, "clflush", NULL);
    cr_assert_eq(r.status, 0);
    got r0 = rw_now(a, 0, "clflush0", NULL); /* rw_acquire loaded on a's connection */
    cr_assert_eq(r0.status, 0);
    cr_assert_eq(test_redis_int(&e.r, "SCRIPT FLUSH"), -1);
    got w;
    rw_start(a, 1, "clflush", NULL, &w, NULL);
    int closed = 0;
    hilock_client_close(a, closed_cb, &closed);
    cr_assert(test_loop_until(e.base, &closed, 3000));
    cr_expect_eq(w.calls, 1);
    cr_expect_eq(w.status, HILOCK_ECANCELED);
    test_loop_for(e.base, 100);
    cr_expect_eq(closed, 1);
    cr_expect_eq(key_exists("clflush", ":rww"), 0, "the closed writer's marker stays");
    cr_expect_eq(release_now(&e, r.hold), 0);
    cr_expect_eq(keys_left(), 0);
    hilock_client_free(b);
}
