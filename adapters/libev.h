/* hilock adapter for libev 4.x. Header-only, in the manner of hiredis's
 * adapters: include it in the .c files of your program that set hilock up.
 *
 *     struct ev_loop *loop = EV_DEFAULT;        (or ev_loop_new(0))
 *     hilock_loop hl;
 *     hilock_libev_init(&hl, loop);
 *     hilock_client_new(&client, &cfg, &hl);
 *     ev_run(loop, 0);
 *
 * Link with -lev. The Redis connections are attached with hiredis's own
 * <hiredis/adapters/libev.h> (redisLibevAttach, the same in hiredis 0.14 and
 * 1.x); hilock's timer is one ev_timer per client. An open client keeps
 * ev_run() going (its connections are watched); once hilock_client_close()
 * has called back, hilock has nothing left on the loop, so ev_run() returns
 * when the rest of the program is done too.
 *
 * A libev built without EV_MULTIPLICITY has a single loop: pass EV_DEFAULT
 * (NULL is accepted and means the default loop in that case). */
#ifndef HILOCK_ADAPTERS_LIBEV_H
#define HILOCK_ADAPTERS_LIBEV_H

#include <stdlib.h>
#include <ev.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libev.h>
#include <hilock/hilock.h>

/* One hilock loop timer. Its own tag (not struct hilock_loop_timer), so this
 * header can share a file with the other adapters. */
typedef struct hilock_libev_timer_ {
    ev_timer w;                 /* first: the watcher's address is the timer's */
    struct ev_loop *loop;
    void (*cb)(void *arg);
    void *arg;
} hilock_libev_timer_;

static void hilock_libev_fire_(EV_P_ ev_timer *w, int revents) {
    hilock_libev_timer_ *t = (hilock_libev_timer_ *)w->data;
#if EV_MULTIPLICITY
    (void)loop;
#endif
    (void)revents;
    t->cb(t->arg);
}

static int hilock_libev_attach_(void *data, struct redisAsyncContext *ac) {
#if EV_MULTIPLICITY
    return redisLibevAttach((struct ev_loop *)data, ac) == REDIS_OK ? 0 : -1;
#else
    (void)data;
    return redisLibevAttach(ac) == REDIS_OK ? 0 : -1;
#endif
}

static hilock_loop_timer *hilock_libev_timer_new_(void *data, void (*cb)(void *), void *arg) {
    hilock_libev_timer_ *t = (hilock_libev_timer_ *)malloc(sizeof(*t));
    if (t == NULL) return NULL;
    t->loop = (struct ev_loop *)data;
    t->cb = cb;
    t->arg = arg;
    ev_timer_init(&t->w, hilock_libev_fire_, 0., 0.);
    t->w.data = t;
    return (hilock_loop_timer *)(void *)t;
}

static void hilock_libev_timer_stop_(hilock_loop_timer *lt) {
    hilock_libev_timer_ *t = (hilock_libev_timer_ *)(void *)lt;
#if EV_MULTIPLICITY
    struct ev_loop *loop = t->loop;
#endif
    ev_timer_stop(EV_A_ &t->w);
}

static void hilock_libev_timer_start_(hilock_loop_timer *lt, uint64_t ms) {
    hilock_libev_timer_ *t = (hilock_libev_timer_ *)(void *)lt;
#if EV_MULTIPLICITY
    struct ev_loop *loop = t->loop;
#endif
    /* libev counts from the loop's cached time, which may be a little old:
     * the timer can then fire early, and hilock simply re-arms it. */
    ev_timer_stop(EV_A_ &t->w);
    ev_timer_set(&t->w, (ev_tstamp)ms / 1000., 0.);
    ev_timer_start(EV_A_ &t->w);
}

static void hilock_libev_timer_free_(hilock_loop_timer *lt) {
    hilock_libev_timer_stop_(lt);
    free(lt);
}

/* One watched socket: one ev_io, re-set when the events change. */
typedef struct hilock_libev_io_ {
    ev_io w;
    struct ev_loop *loop;
    int events;                 /* HILOCK_IO_* being watched */
    void (*cb)(void *arg, int events);
    void *arg;
} hilock_libev_io_;

static void hilock_libev_io_fire_(EV_P_ ev_io *w, int revents) {
    hilock_libev_io_ *io = (hilock_libev_io_ *)w->data;
#if EV_MULTIPLICITY
    (void)loop;
#endif
    io->cb(io->arg, ((revents & EV_READ) ? HILOCK_IO_READ : 0) |
                    ((revents & EV_WRITE) ? HILOCK_IO_WRITE : 0));
}

static hilock_loop_io *hilock_libev_io_new_(void *data, int fd, void (*cb)(void *, int), void *arg) {
    hilock_libev_io_ *io = (hilock_libev_io_ *)malloc(sizeof(*io));
    if (io == NULL) return NULL;
    io->loop = (struct ev_loop *)data;
    io->events = 0;
    io->cb = cb;
    io->arg = arg;
    ev_io_init(&io->w, hilock_libev_io_fire_, fd, 0);
    io->w.data = io;
    return (hilock_loop_io *)(void *)io;
}

static void hilock_libev_io_watch_(hilock_loop_io *lio, int events) {
    hilock_libev_io_ *io = (hilock_libev_io_ *)(void *)lio;
#if EV_MULTIPLICITY
    struct ev_loop *loop = io->loop;
#endif
    if (events == io->events) return;
    io->events = events;
    ev_io_stop(EV_A_ &io->w);
    ev_io_set(&io->w, io->w.fd, ((events & HILOCK_IO_READ) ? EV_READ : 0) |
                                ((events & HILOCK_IO_WRITE) ? EV_WRITE : 0));
    if (events) ev_io_start(EV_A_ &io->w);
}

static void hilock_libev_io_free_(hilock_loop_io *lio) {
    hilock_libev_io_watch_(lio, 0);
    free(lio);
}

/* Fill `hl` so that hilock runs on the libev loop `loop`. */
static inline void hilock_libev_init(hilock_loop *hl, struct ev_loop *loop) {
    hilock_loop_init(hl);
#if !EV_MULTIPLICITY
    (void)loop;
    loop = NULL;
#endif
    hl->data = loop;
    hl->attach = hilock_libev_attach_;
    hl->timer_new = hilock_libev_timer_new_;
    hl->timer_start = hilock_libev_timer_start_;
    hl->timer_stop = hilock_libev_timer_stop_;
    hl->timer_free = hilock_libev_timer_free_;
    hl->io_new = hilock_libev_io_new_;
    hl->io_watch = hilock_libev_io_watch_;
    hl->io_free = hilock_libev_io_free_;
}

#endif /* HILOCK_ADAPTERS_LIBEV_H */
