/* The read-write invariant, checked on every grant by turns of acquire,
 * hold, release: at any time either readers only or exactly one writer.
 * The counters may live in shared memory (mmap MAP_SHARED) for processes
 * of one test: they are updated atomically. Write fences must strictly
 * increase; a reader's fence is the last write's (never an older one).
 * Turns hold with a libevent timer, so readers of one loop overlap. */
#ifndef HILOCK_TEST_RWCHECK_H
#define HILOCK_TEST_RWCHECK_H

#include <event2/event.h>
#include "hilock/hilock.h"

typedef struct rwshared {
    volatile long readers, writers;
    volatile long max_readers;
    volatile long violations;        /* a writer beside anyone, a reader beside a writer */
    volatile unsigned long long last_write_fence;
    volatile long fence_regressions; /* a write fence not above the last one */
    volatile long stale_reads;       /* a read fence below the last write's */
    volatile long reads, writes, errors;
    volatile int first_error;
} rwshared;

/* The turns of one process (not shared). */
typedef struct rwproc {
    rwshared *s;
    struct event_base *base;
    int left;                /* turns not finished */
    volatile int done;
} rwproc;

typedef struct rwturn {
    rwproc *p;
    int write;
    int hold_ms;
    hilock_hold *h;
} rwturn;

#define RW_ADD(x, v) __atomic_add_fetch(&(x), (v), __ATOMIC_SEQ_CST)
#define RW_GET(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)

static inline void rwturn_end(rwproc *p) {
    if (--p->left == 0) p->done = 1;
}

static inline void rwturn_released(int status, void *data) {
    rwturn *t = data;
    if (status != 0) RW_ADD(t->p->s->errors, 1);
    rwturn_end(t->p);
}

static inline void rwturn_release(evutil_socket_t fd, short what, void *data) {
    rwturn *t = data;
    (void)fd; (void)what;
    if (t->write) RW_ADD(t->p->s->writers, -1);
    else RW_ADD(t->p->s->readers, -1);
    if (hilock_release(t->h, rwturn_released, t) != 0) {
        RW_ADD(t->p->s->errors, 1);
        rwturn_end(t->p);
    }
}

static inline void rwturn_granted(hilock_hold *h, int status, void *data) {
    rwturn *t = data;
    rwshared *s = t->p->s;
    if (status != 0) {
        if (RW_ADD(s->errors, 1) == 1) s->first_error = status;
        rwturn_end(t->p);
        return;
    }
    unsigned long long f = hilock_hold_fence(h);
    if (t->write) {
        long w = RW_ADD(s->writers, 1);
        if (w != 1 || RW_GET(s->readers) != 0) RW_ADD(s->violations, 1);
        if (f <= s->last_write_fence) RW_ADD(s->fence_regressions, 1);
        s->last_write_fence = f;
        RW_ADD(s->writes, 1);
    } else {
        long r = RW_ADD(s->readers, 1);
        if (RW_GET(s->writers) != 0) RW_ADD(s->violations, 1);
        long m = RW_GET(s->max_readers);
        while (r > m && !__atomic_compare_exchange_n(&s->max_readers, &m, r, 0, __ATOMIC_SEQ_CST,
                                                     __ATOMIC_SEQ_CST)) {
        }
        if (f < s->last_write_fence) RW_ADD(s->stale_reads, 1);
        RW_ADD(s->reads, 1);
    }
    t->h = h;
    struct timeval tv = {0, t->hold_ms * 1000};
    event_base_once(t->p->base, -1, EV_TIMEOUT, rwturn_release, t, &tv);
}

/* Queue turn t (mode and hold time set) on client c. */
static inline int rwturn_start(hilock_client *c, const char *name, rwturn *t) {
    int rc = t->write ? hilock_write_acquire(c, name, NULL, rwturn_granted, t, NULL)
                      : hilock_read_acquire(c, name, NULL, rwturn_granted, t, NULL);
    if (rc == 0) t->p->left++;
    return rc;
}

#endif
