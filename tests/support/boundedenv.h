/* The primitives whose waits are bounded across processes (a wait that
 * has waited starve_ms takes a place in a queue in Redis): their acquire
 * and the keys the tests look at, so that one test serves each. */
#ifndef HILOCK_TEST_BOUNDEDENV_H
#define HILOCK_TEST_BOUNDEDENV_H

#include "support/lockenv.h"

typedef struct bounded_kind {
    const char *what;
    acquire_fn acquire;
    /* Key suffixes: the lock (with the q mark), the queue, its
     * processes, the last fence, and a marker that lives beside the queue
     * (the write lock's "writer waiting"), or NULL. */
    const char *lock, *queue, *procs, *fence, *marker;

    /* How many may hold at once (the semaphore's permits). */
    int holders_max;
} bounded_kind;

/* One of two permits of the semaphore NAME, as an acquire_fn. */
static inline int bounded_sem_acquire(hilock_client *c, const char *name, const hilock_acquire_opts *opts,
                                      hilock_acquire_cb cb, void *data, hilock_wait **wait_out) {
    return hilock_semaphore_acquire(c, name, 2, 1, opts, cb, data, wait_out);
}

static const bounded_kind bounded_mutex = {"mutex", hilock_acquire, "", ":q", ":p", ":fence", NULL, 1};
static const bounded_kind bounded_write = {"write lock", hilock_write_acquire, ":rw", ":rwq", ":rwp", ":rwf", ":rww", 1};
static const bounded_kind bounded_sem = {"semaphore", bounded_sem_acquire, ":sem", ":sem:q", ":sem:p", ":sem:fence",
                                         NULL, 2};

/* Is the lock of `name` marked (q: its release hands it over)? The
 * mutex's is a string, "TOKEN MARKS"; the write lock's a hash, q = 1. */
static inline int bounded_marked(const test_redis *r, const bounded_kind *k, const char *name) {
    if (k->lock[0] == '\0') return lock_marked(r, name, 'q');
    redisReply *q = test_redis_cmd(r, "HGET %s q", prim_key(name, k->lock));
    int marked = q && q->type == REDIS_REPLY_STRING && strcmp(q->str, "1") == 0;
    if (q) freeReplyObject(q);
    return marked;
}

#endif
