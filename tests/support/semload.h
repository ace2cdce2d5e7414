/* Load on counting semaphores (and on fair locks, as semaphores of one), with the invariants checked in memory that
 * several processes share: slots acquire `k` permits of a name, hold them a
 * few ms, release, and go again. Checked:
 *   - at most `total` permits of a name held at once (permits counted in
 *     use from the grant's callback until just before its release is sent,
 *     so that a count above total is a real overlap);
 *   - the count did reach `total` (a semaphore that granted one at a time
 *     would pass the first check);
 *   - every fence is above every fence delivered anywhere before the
 *     acquire that got it was called (a grant delivered before our try was
 *     sent was made first, and fences grow in the order Redis grants), and
 *     no two grants share a fence. */
#ifndef HILOCK_TEST_SEMLOAD_H
#define HILOCK_TEST_SEMLOAD_H

#include <event2/event.h>
#include <stdlib.h>
#include "hilock/hilock.h"

#define SEMLOAD_NAMES 4
#define SEMLOAD_FENCES 8192

typedef struct semres {
    volatile long in_use[SEMLOAD_NAMES];
    volatile long max_in_use[SEMLOAD_NAMES];
    volatile unsigned long long max_seen[SEMLOAD_NAMES]; /* largest fence delivered */
    volatile long over, grants, errors, stale, nfences;
    volatile int first_error;
    const char *first_where; /* "fair release", "semaphore acquire", ... */
    int lapse_ok;           /* see semload_lapsed */
    volatile long lapsed;
    /* Every grant's fence and name: fences are unique per name (names on
     * different masters of a cluster count on their own, and may meet). */
    struct semload_fence { unsigned long long fence; int idx; } fences[SEMLOAD_FENCES];
} semres;

typedef struct semslot {
    semres *res;
    hilock_client *c;
    struct event_base *base;
    const char *name;
    int idx;
    unsigned total, k;
    int rounds;             /* left to run */
    int hold_ms;
    unsigned long long snapshot;
    hilock_hold *h;
    volatile int *active;   /* slots still running in this process */
    volatile int *done;     /* set when *active reaches 0 */
    int fair;               /* the fair lock NAME (total 1, k 1), not the semaphore */
} semslot;

/* A fair lock's release that says HILOCK_ELOST: its grant by message
 * lapsed unclaimed (docs/primitives.md: "A short claim window"), which a failover's
 * write pause may cause; counted in res->lapsed when res->lapse_ok, else
 * an error. */
static inline int semload_lapsed(semslot *s, int status) {
    if (!s->fair || status != HILOCK_ELOST || !s->res->lapse_ok) return 0;
    __atomic_add_fetch(&s->res->lapsed, 1, __ATOMIC_SEQ_CST);
    return 1;
}

static inline void semslot_go(semslot *s);

static inline void semload_error(semres *r, int status, const semslot *s, const char *where) {
    if (__atomic_fetch_add(&r->errors, 1, __ATOMIC_SEQ_CST) != 0) return;
    r->first_error = status;
    r->first_where = s->fair ? (where[0] == 'r' ? "fair release" : "fair acquire")
                             : (where[0] == 'r' ? "semaphore release" : "semaphore acquire");
}

static inline void semslot_next(semslot *s) {
    if (--s->rounds > 0) {
        semslot_go(s);
    } else if (--*s->active == 0) {
        *s->done = 1;
    }
}

static inline void semslot_released(int status, void *data) {
    semslot *s = data;
    if (status != 0 && !semload_lapsed(s, status)) semload_error(s->res, status, s, "release");
    semslot_next(s);
}

static inline void semslot_release(evutil_socket_t fd, short what, void *data) {
    semslot *s = data;
    (void)fd; (void)what;
    __atomic_sub_fetch(&s->res->in_use[s->idx], (long)s->k, __ATOMIC_SEQ_CST);
    if (hilock_release(s->h, semslot_released, s) != 0) {
        semload_error(s->res, -1000, s, "release");
        semslot_next(s);
    }
}

static inline void semslot_granted(hilock_hold *h, int status, void *data) {
    semslot *s = data;
    semres *r = s->res;
    if (status != 0) {
        semload_error(r, status, s, "acquire");
        semslot_next(s);
        return;
    }
    __atomic_add_fetch(&r->grants, 1, __ATOMIC_SEQ_CST);
    long v = __atomic_add_fetch(&r->in_use[s->idx], (long)s->k, __ATOMIC_SEQ_CST);
    if (v > (long)s->total) __atomic_add_fetch(&r->over, 1, __ATOMIC_SEQ_CST);
    long m = r->max_in_use[s->idx];
    while (m < v && !__atomic_compare_exchange_n(&r->max_in_use[s->idx], &m, v, 0,
                                                 __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    unsigned long long f = hilock_hold_fence(h);
    if (f <= s->snapshot) __atomic_add_fetch(&r->stale, 1, __ATOMIC_SEQ_CST);
    unsigned long long seen = r->max_seen[s->idx];
    while (seen < f && !__atomic_compare_exchange_n(&r->max_seen[s->idx], &seen, f, 0,
                                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    long i = __atomic_fetch_add(&r->nfences, 1, __ATOMIC_SEQ_CST);
    if (i < SEMLOAD_FENCES) {
        r->fences[i].fence = f;
        r->fences[i].idx = s->idx;
    }
    s->h = h;
    struct timeval tv = {0, s->hold_ms * 1000};
    event_base_once(s->base, -1, EV_TIMEOUT, semslot_release, s, &tv);
}

static inline void semslot_go(semslot *s) {
    s->snapshot = __atomic_load_n(&s->res->max_seen[s->idx], __ATOMIC_SEQ_CST);
    int rc = s->fair ? hilock_fair_acquire(s->c, s->name, NULL, semslot_granted, s, NULL)
                     : hilock_semaphore_acquire(s->c, s->name, s->total, s->k, NULL, semslot_granted, s,
                                                NULL);
    if (rc != 0) {
        semload_error(s->res, rc, s, "acquire");
        semslot_next(s);
    }
}

static inline int semload_cmp(const void *a, const void *b) {
    const struct semload_fence *x = a, *y = b;
    if (x->idx != y->idx) return x->idx < y->idx ? -1 : 1;
    return x->fence < y->fence ? -1 : x->fence > y->fence;
}

/* Fences given twice for one name (0 when every grant had its own). */
static inline long semload_duplicates(semres *r) {
    long n = r->nfences < SEMLOAD_FENCES ? r->nfences : SEMLOAD_FENCES, dups = 0;
    qsort(r->fences, (size_t)n, sizeof(r->fences[0]), semload_cmp);
    for (long i = 1; i < n; i++)
        dups += r->fences[i].idx == r->fences[i - 1].idx && r->fences[i].fence == r->fences[i - 1].fence;
    return dups;
}

#endif
