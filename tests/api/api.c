/* API details: the version, structs safe to grow, breaking a
 * lock, extending a hold by hand, the time waited, and cancelling from
 * inside the wait's own callback. Against a real redis-server. */
#include <stddef.h>
#include "support/lockenv.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(api, .init = setup, .fini = teardown, .timeout = 60);

Test(api, version) {
    cr_expect_str_eq(hilock_version(), HILOCK_VERSION);
    char want[32];
    snprintf(want, sizeof(want), "%d.%d.%d", HILOCK_VERSION_MAJOR, HILOCK_VERSION_MINOR,
             HILOCK_VERSION_PATCH);
    cr_expect_str_eq(HILOCK_VERSION, want);
}

/* A caller compiled against an older, smaller hilock_config: the fields it
 * lacks keep their defaults. One compiled against a newer, larger one: its
 * unknown fields must be zero, or the library refuses. Not initialised
 * (size 0): refused. */
Test(api, structs_are_safe_to_grow) {
    hilock_client *c = NULL;
    struct { hilock_config cfg; char newer[16]; } big;
    memset(&big, 0, sizeof(big));
    hilock_config_init_size(&big.cfg, sizeof(big));
    cr_expect_eq(big.cfg.size, sizeof(big));
    big.cfg.url = e.r.url;
    cr_assert_eq(hilock_client_new(&c, &big.cfg, &e.loop), 0, "zero unknown fields are defaults");
    hilock_client_free(c);
    big.newer[3] = 1;
    cr_expect_eq(hilock_client_new(&c, &big.cfg, &e.loop), HILOCK_EINVAL, "an unknown field set");
    cr_expect_null(c);

    /* An older caller whose struct ended before log_cb: what lies beyond
     * (here require_noeviction, against a server that may evict) is not
     * read; the default (warn only) applies. */
    redisContext *k = test_redis_connect(&e.r);
    freeReplyObject(redisCommand(k, "CONFIG SET maxmemory-policy allkeys-lru"));
    hilock_config old;
    hilock_config_init_size(&old, offsetof(hilock_config, log_cb));
    old.url = e.r.url;
    old.require_noeviction = 1; /* beyond the old caller's struct */
    cr_assert_eq(hilock_client_new(&c, &old, &e.loop), 0);
    got g = acquire_now(&e, c, "grow", NULL);
    cr_assert_eq(g.status, 0, "a field beyond the caller's size was read: %s", hilock_strerror(g.status));
    cr_expect_eq(release_now(&e, g.hold), 0);
    freeReplyObject(redisCommand(k, "CONFIG SET maxmemory-policy noeviction"));
    redisFree(k);

    /* A size that splits a field is no struct's size. */
    hilock_config odd;
    hilock_config_init_size(&odd, sizeof(odd));
    odd.url = e.r.url;
    odd.size = 12;
    hilock_client *oc = NULL;
    cr_expect_eq(hilock_client_new(&oc, &odd, &e.loop), HILOCK_EINVAL, "size 12 accepted");

    hilock_config zero;
    memset(&zero, 0, sizeof(zero));
    hilock_client *z = NULL;
    cr_expect_eq(hilock_client_new(&z, &zero, &e.loop), HILOCK_EINVAL, "not initialised");

    hilock_acquire_opts o;
    memset(&o, 0, sizeof(o));
    got g2 = {0, 0, NULL, 0};
    cr_expect_eq(hilock_acquire(c, "grow", &o, got_cb, &g2, NULL), HILOCK_EINVAL);
    struct { hilock_acquire_opts o; long newer; } bigo;
    hilock_acquire_opts_init_size(&bigo.o, sizeof(bigo));
    bigo.newer = 7;
    cr_expect_eq(hilock_acquire(c, "grow", &bigo.o, got_cb, &g2, NULL), HILOCK_EINVAL);
    bigo.newer = 0;
    cr_assert_eq(hilock_acquire(c, "grow", &bigo.o, got_cb, &g2, NULL), 0);
    test_loop_until(e.base, &g2.calls, 5000);
    cr_expect_eq(g2.status, 0);
    cr_expect_eq(release_now(&e, g2.hold), 0);
    hilock_client_free(c);
}

/* The event-loop struct grows as the others do: an adapter compiled
 * against a later header (a larger struct, its new members zero) works,
 * one that sets a member this library does not know, or that skipped
 * hilock_loop_init(), is refused at once, and so is one with a member
 * missing. */
Test(api, the_loop_struct_is_safe_to_grow) {
    hilock_config cfg;
    hilock_client *c = NULL;
    hilock_config_init(&cfg);
    cfg.url = e.r.url;

    struct { hilock_loop loop; void *newer[2]; } big;
    hilock_loop_init_size(&big.loop, sizeof(big));
    hilock_loop with = e.loop;
    memcpy((char *)&big.loop + sizeof(size_t), (char *)&with + sizeof(size_t),
           sizeof(with) - sizeof(size_t));
    cr_assert_eq(hilock_client_new(&c, &cfg, &big.loop), 0, "zero unknown members are defaults");
    got g = acquire_now(&e, c, "loopgrow", NULL);
    cr_expect_eq(g.status, 0);
    if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
    c = NULL;
    big.newer[1] = &big;
    cr_expect_eq(hilock_client_new(&c, &cfg, &big.loop), HILOCK_EINVAL, "an unknown member set");
    cr_expect_null(c);

    hilock_loop raw = e.loop;
    raw.size = 0; /* filled by hand, without hilock_loop_init() */
    cr_expect_eq(hilock_client_new(&c, &cfg, &raw), HILOCK_EINVAL, "not initialised");
    raw = e.loop;
    raw.io_free = NULL;
    cr_expect_eq(hilock_client_new(&c, &cfg, &raw), HILOCK_EINVAL, "a member missing");
    cr_expect_eq(hilock_client_new(&c, &cfg, NULL), HILOCK_EINVAL, "no loop");
    cr_expect_null(c);
}

typedef struct broke {
    int calls, status;
    uint64_t fence;
} broke;

static void broke_cb(int status, uint64_t fence, void *data) {
    broke *b = data;
    b->calls++;
    b->status = status;
    b->fence = fence;
}

Test(api, break_removes_the_lock_and_wakes_waiters) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e), *op = lockenv_client(&e);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    o.lease_ms = 3000;
    got ga = acquire_now(&e, a, "brk", &o);
    cr_assert_eq(ga.status, 0);
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "brk", NULL, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 100);
    cr_assert_eq(gb.calls, 0);

    broke k = {0, 0, 0};
    long long t0 = test_now_ms();
    cr_assert_eq(hilock_break(op, "brk", broke_cb, &k), 0);
    cr_expect_eq(k.calls, 0, "deferred");
    cr_assert(test_loop_until(e.base, &k.calls, 3000));
    cr_expect_eq(k.status, 0);
    cr_expect_eq(k.fence, hilock_hold_fence(ga.hold), "reports the fence it removed");
    /* The waiter is woken by the release message, not by the lease. */
    cr_assert(test_loop_until(e.base, &gb.calls, 3000));
    cr_expect_eq(gb.status, 0);
    cr_expect_lt(gb.at_ms - t0, 1000, "woken after %lld ms", gb.at_ms - t0);
    cr_expect_gt(hilock_hold_fence(gb.hold), k.fence);
    /* The broken holder learns at its next renewal (lease/3 = 1 s). */
    cr_assert(test_loop_until(e.base, &lost.calls, 3000));
    cr_expect_eq(lost.why, HILOCK_ELOST);
    cr_expect_eq(release_now(&e, ga.hold), HILOCK_ELOST);
    cr_expect_eq(release_now(&e, gb.hold), 0);

    /* A free lock: fence 0. Bad input: at once. */
    broke k2 = {0, 0, 0};
    cr_assert_eq(hilock_break(op, "brk", broke_cb, &k2), 0);
    cr_assert(test_loop_until(e.base, &k2.calls, 3000));
    cr_expect_eq(k2.status, 0);
    cr_expect_eq(k2.fence, 0);
    cr_expect_eq(hilock_break(op, "", broke_cb, &k2), HILOCK_EINVAL);
    cr_expect_eq(hilock_break(op, "x", NULL, NULL), HILOCK_EINVAL);
    hilock_client_free(a);
    hilock_client_free(b);
    hilock_client_free(op);
}

Test(api, extend_a_hold_by_hand) {
    hilock_client *c = lockenv_client(&e);
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.no_renew = 1;
    o.lease_ms = 300;
    got g = acquire_now(&e, c, "ext", &o);
    cr_assert_eq(g.status, 0);
    rel r = {0, 0};
    cr_assert_eq(hilock_hold_extend(g.hold, 2000, rel_cb, &r), 0);
    cr_assert(test_loop_until(e.base, &r.calls, 3000));
    cr_expect_eq(r.status, 0);
    cr_expect_gt(test_redis_int(&e.r, "PTTL hilock:{ext}"), 1500);
    test_loop_for(e.base, 600); /* past the first lease */
    cr_expect_eq(hilock_hold_lost(g.hold), 0, "extended, yet lost");
    cr_expect_eq(lock_exists(&e.r, "ext"), 1);
    cr_expect_eq(hilock_hold_extend(g.hold, 5, rel_cb, &r), HILOCK_EINVAL);
    /* Taken away: the extension says ELOST, and the hold is lost. */
    test_redis_int(&e.r, "DEL hilock:{ext}");
    rel r2 = {0, 0};
    cr_assert_eq(hilock_hold_extend(g.hold, 2000, rel_cb, &r2), 0);
    cr_assert(test_loop_until(e.base, &r2.calls, 3000));
    cr_expect_eq(r2.status, HILOCK_ELOST);
    cr_expect_eq(hilock_hold_lost(g.hold), 1);
    cr_expect_eq(hilock_hold_extend(g.hold, 2000, rel_cb, &r2), HILOCK_ELOST);
    cr_expect_eq(release_now(&e, g.hold), HILOCK_ELOST);
    hilock_client_free(c);
}

Test(api, time_waited) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = acquire_now(&e, a, "waited", NULL);
    cr_expect_lt(hilock_hold_waited_ms(ga.hold), 200);
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "waited", NULL, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 300);
    cr_expect_eq(release_now(&e, ga.hold), 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 3000));
    cr_expect_geq(hilock_hold_waited_ms(gb.hold), 290);
    cr_expect_lt(hilock_hold_waited_ms(gb.hold), 2000);
    cr_expect_eq(release_now(&e, gb.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* A wait handle is valid until its callback has returned: cancelling it
 * from inside that callback is safe and says EINVAL (the outcome is given). */
static hilock_wait *self_wait;
static int self_cancel_rc = 1;
static void cancel_self(hilock_hold *h, int status, void *data) {
    got_cb(h, status, data);
    self_cancel_rc = hilock_wait_cancel(self_wait);
}

Test(api, cancel_inside_own_callback) {
    hilock_client *c = lockenv_client(&e);
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(c, "selfcancel", NULL, cancel_self, &g, &self_wait), 0);
    cr_assert(test_loop_until(e.base, &g.calls, 3000));
    cr_expect_eq(self_cancel_rc, HILOCK_EINVAL);
    cr_expect_eq(g.status, 0);
    cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
}

/* hilock_client_close() says when its callback will not run: a NULL
 * client, and a client that hilock_client_free() is freeing (a close from
 * one of the callbacks it runs); a close that returns 0 runs its callback
 * exactly once, a second close's too. */
typedef struct closing {
    hilock_client *c;
    int rc, calls;
} closing;

static void closed_count(void *data) { ((closing *)data)->calls++; }

static void close_from_a_free(hilock_hold *h, int status, void *data) {
    closing *k = data;
    (void)h;
    (void)status;
    k->rc = hilock_client_close(k->c, closed_count, k);
}

Test(api, close_says_when_its_callback_will_not_run) {
    closing k = {NULL, 1, 0};
    cr_expect_eq(hilock_client_close(NULL, closed_count, &k), HILOCK_EINVAL);

    hilock_client *holder = lockenv_client(&e);
    got g = acquire_now(&e, holder, "closecb", NULL);
    cr_assert_eq(g.status, 0);
    k.c = lockenv_client(&e);
    cr_assert_eq(hilock_acquire(k.c, "closecb", NULL, close_from_a_free, &k, NULL), 0);
    test_loop_for(e.base, 100);
    hilock_client_free(k.c);
    cr_expect_eq(k.rc, HILOCK_ECLOSED, "a close from inside a free: %d", k.rc);
    cr_expect_eq(k.calls, 0, "its callback ran");

    closing twice = {lockenv_client(&e), 0, 0};
    cr_expect_eq(hilock_client_close(twice.c, closed_count, &twice), 0);
    cr_expect_eq(hilock_client_close(twice.c, closed_count, &twice), 0);
    test_loop_until(e.base, &twice.calls, 5000);
    test_loop_for(e.base, 50);
    cr_expect_eq(twice.calls, 2, "two closes, %d callbacks", twice.calls);
    cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(holder);
}
