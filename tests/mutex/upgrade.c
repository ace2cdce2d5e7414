/* A fleet being upgraded: the mutex's lock was a hash {token, fence, w,
 * q} before 1.1 and is a string now ("TOKEN" or "TOKEN MARKS"). While both
 * versions run on one name, a hold of either kind excludes the other:
 * this version waits for an older hold (and marks it w, so that the older
 * release publishes), never overwrites it, renews and releases nothing of
 * it; an older try on a lock of this version fails with WRONGTYPE. The
 * older client is played here by its own commands on the hash. */
#include "support/lockenv.h"

static lockenv e;

static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(upgrade, .init = setup, .fini = teardown, .timeout = 60);

#define OLD_TOKEN "0123456789abcdef0123456789abcdef"

/* An older hilock's release: delete its hash if it is still its own, and
 * publish if a try marked it (w). */
static const char old_release[] =
    "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end "
    "local w = redis.call('HGET', KEYS[1], 'w') redis.call('DEL', KEYS[1]) "
    "if w then redis.call('PUBLISH', KEYS[1] .. ':ch', 'r') end return 1";

/* Hold `name` as an older hilock does: its hash, with a lease. */
static void old_hold(const char *name, int lease_ms) {
    cr_assert_eq(test_redis_int(&e.r, "HSET %s token %s fence 7", prim_key(name, ""), OLD_TOKEN), 2);
    cr_assert_eq(test_redis_int(&e.r, "PEXPIRE %s %d", prim_key(name, ""), lease_ms), 1);
}

static long long old_release_now(const char *name) {
    return test_redis_int(&e.r, "EVAL %s 1 %s %s", old_release, prim_key(name, ""), OLD_TOKEN);
}

/* A wait behind an older hold (racing, and starving into the queue):
 * not granted while the hash stands, the hash left as it was but for the
 * mark w; the older release wakes it at once. */
static void waits_for_an_older_hold(uint32_t starve_ms, const char *name) {
    hilock_client *c = lockenv_client_starving(&e, starve_ms);
    old_hold(name, 20000);
    got g = {0, 0, NULL, 0};
    hilock_acquire_opts o = opts_wait(10000);
    cr_assert_eq(hilock_acquire(c, name, &o, got_cb, &g, NULL), 0);
    test_loop_for(e.base, 400);
    cr_assert_eq(g.calls, 0, "granted over an older hold");
    redisReply *t = test_redis_cmd(&e.r, "HGET %s token", prim_key(name, ""));
    cr_assert(t && t->type == REDIS_REPLY_STRING && strcmp(t->str, OLD_TOKEN) == 0, "the older hold was changed");
    freeReplyObject(t);
    cr_assert_eq(test_redis_int(&e.r, "HEXISTS %s w", prim_key(name, "")), 1, "the older hold was not marked");
    long long t0 = test_now_ms();
    cr_assert_eq(old_release_now(name), 1);
    cr_assert(test_loop_until(e.base, &g.calls, 5000), "never granted");
    cr_assert_eq(g.status, 0, "%s", hilock_strerror(g.status));
    cr_expect_lt(g.at_ms - t0, 1000, "granted %lld ms after the older release", g.at_ms - t0);
    cr_expect_gt(hilock_hold_fence(g.hold), 7);
    cr_expect(lock_exists(&e.r, name));
    cr_expect_eq(release_now(&e, g.hold), 0);
    cr_expect_eq(lock_exists(&e.r, name), 0);
    hilock_client_free(c);
}

Test(upgrade, a_wait_waits_for_an_older_hold) { waits_for_an_older_hold(HILOCK_STARVE_NEVER, "old-race"); }

Test(upgrade, a_starving_wait_waits_for_an_older_hold) { waits_for_an_older_hold(20, "old-starve"); }

/* A hold of this version whose key an older client took after it lapsed:
 * its renewal and its release find it lost and leave the hash alone. */
Test(upgrade, a_lapsed_hold_leaves_an_older_hold_alone) {
    hilock_client *c = lockenv_client(&e);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o = opts_wait_lease(0, 600);
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got g = acquire_now(&e, c, "old-took", &o);
    cr_assert_eq(g.status, 0);
    cr_assert_eq(test_redis_int(&e.r, "DEL %s", prim_key("old-took", "")), 1);
    old_hold("old-took", 20000);
    test_loop_for(e.base, 700);
    cr_expect_eq(lost.calls, 1, "the renewal did not find the hold lost");
    cr_expect_eq(release_now(&e, g.hold), HILOCK_ELOST);
    cr_expect_eq(test_redis_int(&e.r, "HEXISTS %s token", prim_key("old-took", "")), 1, "the older hold was removed");
    cr_expect_gt(test_redis_int(&e.r, "PTTL %s", prim_key("old-took", "")), 15000);
    hilock_client_free(c);
}

/* An older try on a lock of this version is refused (WRONGTYPE, its first
 * read: HMGET), and the lock stays as it is. */
Test(upgrade, an_older_try_is_refused) {
    hilock_client *c = lockenv_client(&e);
    got g = acquire_now(&e, c, "new", NULL);
    cr_assert_eq(g.status, 0);
    redisReply *r = test_redis_cmd(&e.r, "EVAL %s 1 %s", "return redis.call('HMGET', KEYS[1], 'token', 'fence', 'w')",
                                   prim_key("new", ""));
    cr_assert(r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "WRONGTYPE"), "an older try was not refused");
    freeReplyObject(r);
    cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
}
