/* hilock adapter for libuv 1.x. Header-only, in the manner of hiredis's
 * adapters: include it in the .c files of your program that set hilock up.
 *
 *     uv_loop_t *loop = uv_default_loop();
 *     hilock_loop hl;
 *     hilock_libuv_init(&hl, loop);
 *     hilock_client_new(&client, &cfg, &hl);
 *     uv_run(loop, UV_RUN_DEFAULT);
 *
 * Link with -luv. hilock's timer is one uv_timer_t per client; each Redis
 * connection is one uv_poll_t. (<uv.h> needs POSIX declarations: with
 * -std=c11, also define _POSIX_C_SOURCE=200809L, or use -std=gnu11.)
 *
 * The connections are attached here, not with hiredis's own
 * <hiredis/adapters/libuv.h>: the one in hiredis 0.14 drops the errors that
 * uv_poll reports (a refused connection, a reset), so hiredis would never
 * see them and the connection would hang until hilock's timeouts. This one
 * hands them to hiredis as readiness, as hiredis 1.x does, and works with
 * both (hilock does not use hiredis's own timeouts).
 *
 * libuv closes handles asynchronously: after hilock_client_free() or
 * hilock_client_close(), the memory of the timer and of the poll handles is
 * given back by close callbacks that run on a later turn of the loop. Run
 * the loop to its end (uv_run(loop, UV_RUN_DEFAULT) returns at once when
 * nothing else is active) before uv_loop_close(), which otherwise reports
 * UV_EBUSY. */
#ifndef HILOCK_ADAPTERS_LIBUV_H
#define HILOCK_ADAPTERS_LIBUV_H

#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hilock/hilock.h>

/* ---- Redis connections -------------------------------------------------- */

typedef struct hilock_libuv_conn_ {
    uv_poll_t poll;             /* poll.data points back here */
    redisAsyncContext *ac;      /* NULL once hiredis has let go */
    int events;                 /* UV_READABLE | UV_WRITABLE wanted by hiredis */
} hilock_libuv_conn_;

static void hilock_libuv_io_(uv_poll_t *h, int status, int events) {
    hilock_libuv_conn_ *p = (hilock_libuv_conn_ *)h->data;
    /* On an error (status < 0) libuv has stopped the handle: let hiredis
     * try what it was waiting for, so that it finds the error itself. */
    int ev = status < 0 ? p->events : events;
    if (p->ac != NULL && (ev & UV_READABLE)) redisAsyncHandleRead(p->ac);
    if (p->ac != NULL && (ev & UV_WRITABLE)) redisAsyncHandleWrite(p->ac);
}

static void hilock_libuv_update_(hilock_libuv_conn_ *p, int events) {
    if (events == p->events) return;
    p->events = events;
    if (events) uv_poll_start(&p->poll, events, hilock_libuv_io_);
    else uv_poll_stop(&p->poll);
}

static void hilock_libuv_add_read_(void *d) {
    hilock_libuv_conn_ *p = (hilock_libuv_conn_ *)d;
    hilock_libuv_update_(p, p->events | UV_READABLE);
}

static void hilock_libuv_del_read_(void *d) {
    hilock_libuv_conn_ *p = (hilock_libuv_conn_ *)d;
    hilock_libuv_update_(p, p->events & ~UV_READABLE);
}

static void hilock_libuv_add_write_(void *d) {
    hilock_libuv_conn_ *p = (hilock_libuv_conn_ *)d;
    hilock_libuv_update_(p, p->events | UV_WRITABLE);
}

static void hilock_libuv_del_write_(void *d) {
    hilock_libuv_conn_ *p = (hilock_libuv_conn_ *)d;
    hilock_libuv_update_(p, p->events & ~UV_WRITABLE);
}

static void hilock_libuv_closed_(uv_handle_t *h) {
    free(h->data);
}

/* hiredis is freeing the context: close the handle, free it when closed. */
static void hilock_libuv_cleanup_(void *d) {
    hilock_libuv_conn_ *p = (hilock_libuv_conn_ *)d;
    p->ac = NULL;
    uv_close((uv_handle_t *)&p->poll, hilock_libuv_closed_);
}

static int hilock_libuv_attach_(void *data, struct redisAsyncContext *ac) {
    hilock_libuv_conn_ *p;
    if (ac->ev.data != NULL) return -1;
    p = (hilock_libuv_conn_ *)malloc(sizeof(*p));
    if (p == NULL) return -1;
    memset(p, 0, sizeof(*p));
    if (uv_poll_init((uv_loop_t *)data, &p->poll, ac->c.fd) != 0) {
        free(p);
        return -1;
    }
    p->poll.data = p;
    p->ac = ac;
    ac->ev.addRead = hilock_libuv_add_read_;
    ac->ev.delRead = hilock_libuv_del_read_;
    ac->ev.addWrite = hilock_libuv_add_write_;
    ac->ev.delWrite = hilock_libuv_del_write_;
    ac->ev.cleanup = hilock_libuv_cleanup_;
    ac->ev.data = p;
    return 0;
}

/* ---- hilock's own sockets ----------------------------------------------- */

typedef struct hilock_libuv_sock_ {
    uv_poll_t poll;             /* poll.data points back here */
    int events;                 /* HILOCK_IO_* being watched */
    void (*cb)(void *arg, int events);
    void *arg;
} hilock_libuv_sock_;

static void hilock_libuv_io_fire_(uv_poll_t *h, int status, int events) {
    hilock_libuv_sock_ *io = (hilock_libuv_sock_ *)h->data;
    /* On an error libuv has stopped the handle: report what was watched,
     * so that hilock's read or write finds the error itself. */
    int ev = status < 0 ? io->events : ((events & UV_READABLE) ? HILOCK_IO_READ : 0) |
                                       ((events & UV_WRITABLE) ? HILOCK_IO_WRITE : 0);
    if (status < 0) io->events = 0;
    io->cb(io->arg, ev);
}

static hilock_loop_io *hilock_libuv_io_new_(void *data, int fd, void (*cb)(void *, int), void *arg) {
    hilock_libuv_sock_ *io = (hilock_libuv_sock_ *)malloc(sizeof(*io));
    if (io == NULL) return NULL;
    memset(io, 0, sizeof(*io));
    if (uv_poll_init((uv_loop_t *)data, &io->poll, fd) != 0) {
        free(io);
        return NULL;
    }
    io->poll.data = io;
    io->cb = cb;
    io->arg = arg;
    return (hilock_loop_io *)(void *)io;
}

static void hilock_libuv_io_watch_(hilock_loop_io *lio, int events) {
    hilock_libuv_sock_ *io = (hilock_libuv_sock_ *)(void *)lio;
    if (events == io->events) return;
    io->events = events;
    if (events)
        uv_poll_start(&io->poll, ((events & HILOCK_IO_READ) ? UV_READABLE : 0) |
                                 ((events & HILOCK_IO_WRITE) ? UV_WRITABLE : 0),
                      hilock_libuv_io_fire_);
    else
        uv_poll_stop(&io->poll);
}

/* Stops watching at once; the memory goes in the close callback. */
static void hilock_libuv_io_free_(hilock_loop_io *lio) {
    hilock_libuv_sock_ *io = (hilock_libuv_sock_ *)(void *)lio;
    uv_close((uv_handle_t *)&io->poll, hilock_libuv_closed_);
}

/* ---- hilock's timer ----------------------------------------------------- */

/* Its own tag (not struct hilock_loop_timer), so that this header can share
 * a file with the other adapters. */
typedef struct hilock_libuv_timer_ {
    uv_timer_t h;               /* h.data points back here */
    void (*cb)(void *arg);
    void *arg;
} hilock_libuv_timer_;

static void hilock_libuv_fire_(uv_timer_t *h) {
    hilock_libuv_timer_ *t = (hilock_libuv_timer_ *)h->data;
    t->cb(t->arg);
}

static hilock_loop_timer *hilock_libuv_timer_new_(void *data, void (*cb)(void *), void *arg) {
    hilock_libuv_timer_ *t = (hilock_libuv_timer_ *)malloc(sizeof(*t));
    if (t == NULL) return NULL;
    if (uv_timer_init((uv_loop_t *)data, &t->h) != 0) {
        free(t);
        return NULL;
    }
    t->h.data = t;
    t->cb = cb;
    t->arg = arg;
    return (hilock_loop_timer *)(void *)t;
}

static void hilock_libuv_timer_start_(hilock_loop_timer *lt, uint64_t ms) {
    hilock_libuv_timer_ *t = (hilock_libuv_timer_ *)(void *)lt;
    /* libuv counts from the loop's cached time, which may be a little old:
     * the timer can then fire early, and hilock simply re-arms it. */
    uv_timer_start(&t->h, hilock_libuv_fire_, ms, 0);
}

static void hilock_libuv_timer_stop_(hilock_loop_timer *lt) {
    hilock_libuv_timer_ *t = (hilock_libuv_timer_ *)(void *)lt;
    uv_timer_stop(&t->h);
}

/* Stops the timer at once; the memory goes in the close callback. */
static void hilock_libuv_timer_free_(hilock_loop_timer *lt) {
    hilock_libuv_timer_ *t = (hilock_libuv_timer_ *)(void *)lt;
    uv_timer_stop(&t->h);
    uv_close((uv_handle_t *)&t->h, hilock_libuv_closed_);
}

/* Fill `hl` so that hilock runs on the libuv loop `loop`. */
static inline void hilock_libuv_init(hilock_loop *hl, uv_loop_t *loop) {
    hilock_loop_init(hl);
    hl->data = loop;
    hl->attach = hilock_libuv_attach_;
    hl->timer_new = hilock_libuv_timer_new_;
    hl->timer_start = hilock_libuv_timer_start_;
    hl->timer_stop = hilock_libuv_timer_stop_;
    hl->timer_free = hilock_libuv_timer_free_;
    hl->io_new = hilock_libuv_io_new_;
    hl->io_watch = hilock_libuv_io_watch_;
    hl->io_free = hilock_libuv_io_free_;
}

#endif /* HILOCK_ADAPTERS_LIBUV_H */
