/* hilock adapter for libevent 2.x. Header-only, in the manner of hiredis's
 * adapters: include it in one or more .c files of your program.
 *
 *     struct event_base *base = event_base_new();
 *     hilock_loop loop;
 *     hilock_libevent_init(&loop, base);
 *     hilock_client_new(&client, &cfg, &loop);
 *
 * libevent's time cache: after a callback of yours that blocked the loop,
 * every timer (the watchdog's too) fires late by up to what was left until
 * it when the block began. End such a callback with
 * event_base_update_cache_time(base), or make the base with
 * EVENT_BASE_FLAG_NO_CACHE_TIME (docs/guarantees.md, "A lease is a promise
 * about time"). */
#ifndef HILOCK_ADAPTERS_LIBEVENT_H
#define HILOCK_ADAPTERS_LIBEVENT_H

#include <stdlib.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>
#include <hilock/hilock.h>

struct hilock_loop_timer {
    struct event *ev;
    void (*cb)(void *arg);
    void *arg;
};

/* The timer whose callback runs on this thread now, only ever compared
 * (the callback may free it: hilock_client_free from a user callback). */
#if defined(__cplusplus)
static thread_local const void *hilock_libevent_firing_;
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
static _Thread_local const void *hilock_libevent_firing_;
#else
static __thread const void *hilock_libevent_firing_;
#endif

static void hilock_libevent_fire_(evutil_socket_t fd, short what, void *arg) {
    struct hilock_loop_timer *t = (struct hilock_loop_timer *)arg;
    const void *outer = hilock_libevent_firing_;
    (void)fd; (void)what;
    hilock_libevent_firing_ = t;
    t->cb(t->arg);
    hilock_libevent_firing_ = outer;
}

static int hilock_libevent_attach_(void *data, struct redisAsyncContext *ac) {
    return redisLibeventAttach(ac, (struct event_base *)data) == REDIS_OK ? 0 : -1;
}

static hilock_loop_timer *hilock_libevent_timer_new_(void *data, void (*cb)(void *), void *arg) {
    struct hilock_loop_timer *t = (struct hilock_loop_timer *)malloc(sizeof(*t));
    if (t == NULL) return NULL;
    t->cb = cb;
    t->arg = arg;
    t->ev = evtimer_new((struct event_base *)data, hilock_libevent_fire_, t);
    if (t->ev == NULL) { free(t); return NULL; }
    return t;
}

/* A timer due now (hilock's deferred callbacks, after a reply or a message
 * was read) is made active instead: libevent runs it in this turn of the
 * loop, once the callback that armed it returns, with no epoll_wait
 * first. Armed again from its own run, it waits for the next turn as a
 * timer does, so a chain of callbacks never keeps the loop from its
 * sockets. */
static void hilock_libevent_timer_start_(hilock_loop_timer *t, uint64_t ms) {
    struct timeval tv;
    evtimer_del(t->ev);
    if (ms == 0 && hilock_libevent_firing_ != (const void *)t) {
        event_active(t->ev, EV_TIMEOUT, 1);
        return;
    }
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    evtimer_add(t->ev, &tv);
}

static void hilock_libevent_timer_stop_(hilock_loop_timer *t) {
    evtimer_del(t->ev);
}

static void hilock_libevent_timer_free_(hilock_loop_timer *t) {
    event_free(t->ev);
    free(t);
}

/* One watched socket: a persistent event per direction. Its own tag, so
 * this header can share a file with the other adapters. */
typedef struct hilock_libevent_io_ {
    struct event *rd, *wr;
    int events;                 /* HILOCK_IO_* being watched */
    void (*cb)(void *arg, int events);
    void *arg;
} hilock_libevent_io_;

static void hilock_libevent_io_fire_(evutil_socket_t fd, short what, void *arg) {
    hilock_libevent_io_ *io = (hilock_libevent_io_ *)arg;
    (void)fd;
    io->cb(io->arg, ((what & EV_READ) ? HILOCK_IO_READ : 0) | ((what & EV_WRITE) ? HILOCK_IO_WRITE : 0));
}

static hilock_loop_io *hilock_libevent_io_new_(void *data, int fd, void (*cb)(void *, int), void *arg) {
    struct event_base *base = (struct event_base *)data;
    hilock_libevent_io_ *io = (hilock_libevent_io_ *)calloc(1, sizeof(*io));
    if (io == NULL) return NULL;
    io->cb = cb;
    io->arg = arg;
    io->rd = event_new(base, fd, EV_READ | EV_PERSIST, hilock_libevent_io_fire_, io);
    io->wr = event_new(base, fd, EV_WRITE | EV_PERSIST, hilock_libevent_io_fire_, io);
    if (io->rd == NULL || io->wr == NULL) {
        if (io->rd) event_free(io->rd);
        if (io->wr) event_free(io->wr);
        free(io);
        return NULL;
    }
    return (hilock_loop_io *)(void *)io;
}

static void hilock_libevent_io_watch_(hilock_loop_io *lio, int events) {
    hilock_libevent_io_ *io = (hilock_libevent_io_ *)(void *)lio;
    int on = events & ~io->events, off = io->events & ~events;
    if (on & HILOCK_IO_READ) event_add(io->rd, NULL);
    if (on & HILOCK_IO_WRITE) event_add(io->wr, NULL);
    if (off & HILOCK_IO_READ) event_del(io->rd);
    if (off & HILOCK_IO_WRITE) event_del(io->wr);
    io->events = events;
}

static void hilock_libevent_io_free_(hilock_loop_io *lio) {
    hilock_libevent_io_ *io = (hilock_libevent_io_ *)(void *)lio;
    event_free(io->rd);
    event_free(io->wr);
    free(io);
}

/* Fill `loop` so that hilock runs on `base`. */
static inline void hilock_libevent_init(hilock_loop *loop, struct event_base *base) {
    hilock_loop_init(loop);
    loop->data = base;
    loop->attach = hilock_libevent_attach_;
    loop->timer_new = hilock_libevent_timer_new_;
    loop->timer_start = hilock_libevent_timer_start_;
    loop->timer_stop = hilock_libevent_timer_stop_;
    loop->timer_free = hilock_libevent_timer_free_;
    loop->io_new = hilock_libevent_io_new_;
    loop->io_watch = hilock_libevent_io_watch_;
    loop->io_free = hilock_libevent_io_free_;
}

#endif /* HILOCK_ADAPTERS_LIBEVENT_H */
