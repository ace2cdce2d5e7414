/* What the fair lock's suites share (tests/fair/fair.c, tests/fair/reorder.c):
 * acquire and wait for the callback, start an acquire, and the lock's keys
 * in Redis. */
#ifndef HILOCK_TEST_FAIRENV_H
#define HILOCK_TEST_FAIRENV_H

#include "support/lockenv.h"

/* Acquire the fair lock `name` and run e's loop until the callback came. */
static inline got fairenv_now(lockenv *e, hilock_client *c, const char *name,
                              const hilock_acquire_opts *o) {
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_fair_acquire(c, name, o, got_cb, &g, NULL), 0);
    test_loop_until(e->base, &g.calls, 5000);
    cr_assert_eq(g.calls, 1, "acquire of %s got no callback", name);
    return g;
}

static inline void fair_start(hilock_client *c, const char *name, const hilock_acquire_opts *o,
                              got *g, hilock_wait **w) {
    memset(g, 0, sizeof(*g));
    cr_assert_eq(hilock_fair_acquire(c, name, o, got_cb, g, w), 0);
}

/* The fair lock's key with `suffix` ("", ":q", ":p", ":fence"). */
#define fkey(name, suffix) prim_key(name, ":fair" suffix)

/* Waits in the queue of `name`, and whether its lock is held. */
static inline long long fairenv_queued(const test_redis *r, const char *name) {
    return test_redis_int(r, "ZCARD %s", fkey(name, ":q"));
}

static inline long long fairenv_held(const test_redis *r, const char *name) {
    return test_redis_int(r, "EXISTS %s", fkey(name, ""));
}

/* The fence of the lock in Redis, a string "TOKEN FENCE" (0: not held). */
static inline unsigned long long fairenv_fence(const test_redis *r, const char *name) {
    redisReply *rep = test_redis_cmd(r, "GET %s", fkey(name, ""));
    const char *sp = rep && rep->type == REDIS_REPLY_STRING ? strchr(rep->str, ' ') : NULL;
    unsigned long long f = sp ? strtoull(sp + 1, NULL, 10) : 0;
    if (rep) freeReplyObject(rep);
    return f;
}

#endif
