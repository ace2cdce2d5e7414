/* One test environment over three event loops: a tloop is a libevent,
 * libev or libuv loop with its hilock adapter, so that one suite of checks
 * (tests/adapters/adapters.c) runs unchanged on each. The loops live in their
 * own files: libevent and libev cannot share one (both define EV_READ). */
#ifndef HILOCK_TEST_TLOOP_H
#define HILOCK_TEST_TLOOP_H

#include "hilock/hilock.h"

enum { K_LIBEVENT, K_LIBEV, K_LIBUV };

typedef struct tloop tloop;

typedef struct tloop_ops {
    int (*init)(tloop *l);            /* make the loop, fill l->hl; 0 or -1 */
    /* Run until tloop_check() says stop; with `unref`, the check timer does
     * not keep the loop alive (the run also ends when nothing is left). */
    void (*run)(tloop *l, int unref);
    int (*destroy)(tloop *l);         /* 0 if nothing was left open on it */
} tloop_ops;

struct tloop {
    int kind;
    const tloop_ops *ops;
    void *impl;                       /* the loop itself */
    hilock_loop hl;
    volatile int *flag;
    long long deadline;
    int timed_out;
};

extern const tloop_ops tloop_libevent_ops, tloop_libev_ops, tloop_libuv_ops;

void tloop_init(tloop *l, int kind);
/* For the implementations: 1 when the run must stop (flag set or time up). */
int tloop_check(tloop *l);
/* Run until *flag != 0 (flag may be NULL: run for ms) or ms pass. Returns
 * 1 unless the time ran out. */
int tloop_run(tloop *l, volatile int *flag, int ms, int unref);
static inline int tloop_until(tloop *l, volatile int *flag, int ms) { return tloop_run(l, flag, ms, 0); }
static inline void tloop_for(tloop *l, int ms) { tloop_run(l, 0, ms, 0); }
/* 1 if the loop ended by itself (nothing left on it) within ms. */
static inline int tloop_drains(tloop *l, int ms) { return tloop_run(l, 0, ms, 1); }
int tloop_destroy(tloop *l);

#endif
