/* The mutual-exclusion check shared by the libevent, libev and libuv suites.
 * The protected resource lives in shared memory: a counter incremented
 * non-atomically (read, yield, write) and the last fencing token it
 * accepted. Two holders at once show up as a lost increment, an "inside"
 * flag already set, or a fence out of order. Loop-agnostic: the callbacks
 * only use the hilock API. */
#ifndef HILOCK_TEST_EXCLUSION_H
#define HILOCK_TEST_EXCLUSION_H

#include <sched.h>
#include "hilock/hilock.h"

typedef struct resource {
    volatile long counter;
    volatile long inside;
    volatile unsigned long long last_fence;
    volatile long overlaps;
    volatile long fence_regressions;
    volatile long errors;
} resource;

/* The waiters of one process. */
typedef struct worker {
    resource *res;
    int expected;
    int callbacks;
    int released;
    volatile int done;
} worker;

static inline void exclusion_released(int status, void *data) {
    worker *w = data;
    if (status != 0) __atomic_add_fetch(&w->res->errors, 1, __ATOMIC_SEQ_CST);
    if (++w->released == w->expected) w->done = 1;
}

/* The acquire callback: the critical section, then release. */
static inline void exclusion_acquired(hilock_hold *h, int status, void *data) {
    worker *w = data;
    resource *res = w->res;
    w->callbacks++;
    if (status != 0) {
        __atomic_add_fetch(&res->errors, 1, __ATOMIC_SEQ_CST);
        if (++w->released == w->expected) w->done = 1;
        return;
    }
    if (res->inside) res->overlaps++;
    res->inside = 1;
    unsigned long long f = hilock_hold_fence(h);
    if (f <= res->last_fence) res->fence_regressions++;
    res->last_fence = f;
    long v = res->counter; /* deliberately not atomic */
    sched_yield();
    res->counter = v + 1;
    res->inside = 0;
    hilock_release(h, exclusion_released, w);
}

#endif
