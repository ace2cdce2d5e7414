/* hilock adapter for nginx's event loop. Header-only, for nginx modules:
 * include it after nginx's own headers in the module's .c file.
 *
 *     #include <ngx_config.h>
 *     #include <ngx_core.h>
 *     #include <ngx_event.h>
 *     #include <hilock/adapters/nginx.h>
 *
 *     static ngx_int_t init_process(ngx_cycle_t *cycle) {   // in each worker
 *         hilock_loop loop;
 *         hilock_nginx_init(&loop, cycle->log);
 *         return hilock_client_new(&client, &cfg, &loop) == 0 ? NGX_OK : NGX_ERROR;
 *     }
 *     static void exit_process(ngx_cycle_t *cycle) {
 *         hilock_client_free(client);       // closes its sockets: no
 *     }                                     // "open socket left" alert
 *
 * Make the client in the worker (init_process), never in the master: a
 * client belongs to the process that made it.
 *
 * Each socket (hiredis's command connections, hilock's subscriber
 * connections) is an nginx connection (ngx_get_connection), so it counts
 * against worker_connections. nginx's epoll is edge-triggered: an event is
 * reported once when the socket becomes ready, and hiredis reads at most
 * 16 KB a call. So every handler here asks poll(2) (timeout 0) whether the
 * socket is still ready, and calls hiredis (or hilock) again while it is: a
 * reply never sits unread, and a write that hiredis asks for on a socket
 * that is already writable (no new edge will come) is done too. Level-
 * triggered event methods (poll, select) work as well: the events are added
 * and deleted as hiredis asks.
 *
 * Timers are ngx_event_t with cancelable = 1: a worker that is shutting
 * down (nginx -s quit) does not wait for hilock's timer.
 *
 * A graceful shutdown (nginx -s quit, a reload) is announced to nobody but
 * idle connections, which nginx closes then. hilock's sockets are marked
 * idle so that the adapter hears of it and calls the hook set with
 * hilock_nginx_on_shutdown(), once: that is when to start
 * hilock_client_close(), keeping the worker alive (a non-cancelable timer)
 * until its callback. hilock_client_free() in exit_process alone would drop
 * the replies of tries still in flight, and a lock such a try won would
 * stay in Redis for its lease. They are re-armed
 * exactly (ngx_add_timer keeps an armed timer whose new deadline is within
 * 300 ms of the old one: this adapter deletes it first). hilock keeps its
 * own monotonic clock (CLOCK_MONOTONIC); nginx's ngx_current_msec, on
 * which the timers run, is monotonic too but cached per loop turn, so a
 * timer may fire a little early, never late; hilock re-arms then. */
#ifndef HILOCK_ADAPTERS_NGINX_H
#define HILOCK_ADAPTERS_NGINX_H

#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hilock/hilock.h>

/* At most this many rounds per nginx event before the rest is posted to the
 * next turn (so one busy socket cannot starve the worker). Needs nginx
 * 1.17.5 or later (ngx_posted_next_events). */
#define HILOCK_NGINX_ROUNDS_ 64

/* One socket, either a hiredis async context (ac != NULL) or one of
 * hilock's own (cb != NULL). */
typedef struct hilock_nginx_sock_ {
    ngx_connection_t *c;        /* NULL once let go */
    redisAsyncContext *ac;      /* hiredis: NULL once hiredis has let go */
    void (*cb)(void *arg, int events);   /* hilock's socket watch */
    void *arg;
    int want;                   /* HILOCK_IO_* wanted */
    int busy;                   /* depth of handlers running on it */
    int dead;                   /* released while busy: free when not busy */
} hilock_nginx_sock_;

/* Level-triggered methods: keep nginx's events equal to what is wanted. */
static void hilock_nginx_sync_(hilock_nginx_sock_ *s) {
    ngx_connection_t *c = s->c;
    if (c == NULL || (ngx_event_flags & NGX_USE_CLEAR_EVENT)) return;
    if ((s->want & HILOCK_IO_READ) && !c->read->active) ngx_add_event(c->read, NGX_READ_EVENT, 0);
    if (!(s->want & HILOCK_IO_READ) && c->read->active) ngx_del_event(c->read, NGX_READ_EVENT, 0);
    if ((s->want & HILOCK_IO_WRITE) && !c->write->active) ngx_add_event(c->write, NGX_WRITE_EVENT, 0);
    if (!(s->want & HILOCK_IO_WRITE) && c->write->active) ngx_del_event(c->write, NGX_WRITE_EVENT, 0);
}

/* What the socket is ready for now, among s->want (errors and hang-ups
 * count as ready for everything wanted, so the read or write finds them). */
static int hilock_nginx_ready_(hilock_nginx_sock_ *s) {
    struct pollfd p;
    int ev = 0;
    if (s->c == NULL || s->want == 0) return 0;
    p.fd = s->c->fd;
    p.events = (short)(((s->want & HILOCK_IO_READ) ? POLLIN : 0) |
                       ((s->want & HILOCK_IO_WRITE) ? POLLOUT : 0));
    p.revents = 0;
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return s->want;
    if (p.revents & POLLIN) ev |= HILOCK_IO_READ;
    if (p.revents & POLLOUT) ev |= HILOCK_IO_WRITE;
    return ev & s->want;
}

static void hilock_nginx_free_sock_(hilock_nginx_sock_ *s);

/* The hook of a graceful shutdown, and whether it ran. */
static void (*hilock_nginx_shutdown_cb_)(void *arg);
static void *hilock_nginx_shutdown_arg_;
static int hilock_nginx_shutdown_told_;

/* The handler of both nginx events of a socket. */
static void hilock_nginx_event_(ngx_event_t *e) {
    ngx_connection_t *c = (ngx_connection_t *)e->data;
    hilock_nginx_sock_ *s = (hilock_nginx_sock_ *)c->data;
    int round, ev;
    s->busy++;
    /* nginx closes idle connections: the worker is shutting down. */
    if (c->close) {
        c->close = 0;
        if (!hilock_nginx_shutdown_told_ && hilock_nginx_shutdown_cb_ != NULL) {
            hilock_nginx_shutdown_told_ = 1;
            hilock_nginx_shutdown_cb_(hilock_nginx_shutdown_arg_);
        }
    }
    for (round = 0; round < HILOCK_NGINX_ROUNDS_ && !s->dead; round++) {
        ev = hilock_nginx_ready_(s);
        if (ev == 0) break;
        if (s->ac != NULL) {
            if (ev & HILOCK_IO_READ) redisAsyncHandleRead(s->ac);
            if (s->ac != NULL && (ev & HILOCK_IO_WRITE) && (s->want & HILOCK_IO_WRITE))
                redisAsyncHandleWrite(s->ac);
        } else if (s->cb != NULL) {
            s->cb(s->arg, ev);
        }
    }
    /* Still ready after many rounds: come back on the next turn. Not on
     * ngx_posted_events: this handler may be running from that queue, which
     * nginx drains until it is empty, so a socket that stays readable would
     * be read again and again in this turn (no epoll_wait, no timers, no
     * other connection) for as long as data keeps coming. nginx moves
     * ngx_posted_next_events to ngx_posted_events after its next
     * epoll_wait, which it then makes with a timeout of 0. */
    if (round == HILOCK_NGINX_ROUNDS_ && !s->dead && s->c != NULL) {
        ngx_post_event(s->c->read, &ngx_posted_next_events);
    }
    if (--s->busy == 0 && s->dead) free(s);
}

/* (ngx_post_event and ngx_delete_posted_event are macros of several
 * statements: always in braces.) */

/* Something new is wanted: it may be ready already, and an edge-triggered
 * method would not say so again. Look on this turn's posted events. */
static void hilock_nginx_want_(hilock_nginx_sock_ *s, int want) {
    int more = want & ~s->want;
    s->want = want;
    hilock_nginx_sync_(s);
    if (more && s->c != NULL && !s->busy) {
        ngx_post_event(s->c->read, &ngx_posted_events);
    }
}

static hilock_nginx_sock_ *hilock_nginx_sock_new_(ngx_log_t *log, int fd) {
    hilock_nginx_sock_ *s = (hilock_nginx_sock_ *)calloc(1, sizeof(*s));
    ngx_connection_t *c;
    if (s == NULL) return NULL;
    c = ngx_get_connection((ngx_socket_t)fd, log);
    if (c == NULL) { free(s); return NULL; }
    c->data = s;
    c->read->handler = hilock_nginx_event_;
    c->write->handler = hilock_nginx_event_;
    c->read->log = log;
    c->write->log = log;
    c->idle = 1;                /* told of a graceful shutdown (see above) */
    s->c = c;
    /* Edge-triggered: both directions stay registered; the handler asks
     * poll(2) what is ready. */
    if (ngx_event_flags & NGX_USE_CLEAR_EVENT) {
        if (ngx_add_conn != NULL && (ngx_event_flags & NGX_USE_EPOLL_EVENT)) {
            if (ngx_add_conn(c) != NGX_OK) goto fail;
        } else if (ngx_handle_read_event(c->read, 0) != NGX_OK ||
                   ngx_handle_write_event(c->write, 0) != NGX_OK) {
            goto fail;
        }
    }
    return s;
fail:
    hilock_nginx_free_sock_(s);
    return NULL;
}

/* Let go of the socket (the caller closes it afterwards). */
static void hilock_nginx_free_sock_(hilock_nginx_sock_ *s) {
    ngx_connection_t *c = s->c;
    if (c != NULL) {
        if (c->read->timer_set) ngx_del_timer(c->read);
        if (c->write->timer_set) ngx_del_timer(c->write);
        if (c->read->posted) {
            ngx_delete_posted_event(c->read);
        }
        if (c->write->posted) {
            ngx_delete_posted_event(c->write);
        }
        /* An explicit delete (not NGX_CLOSE_EVENT): the fd is closed by its
         * owner, after this. */
        if (ngx_del_conn != NULL && (ngx_event_flags & NGX_USE_EPOLL_EVENT)) {
            if (c->read->active || c->write->active) ngx_del_conn(c, 0);
        } else {
            if (c->read->active) ngx_del_event(c->read, NGX_READ_EVENT, 0);
            if (c->write->active) ngx_del_event(c->write, NGX_WRITE_EVENT, 0);
        }
        ngx_free_connection(c);
        c->fd = (ngx_socket_t)-1;   /* ngx_free_connection leaves it */
        s->c = NULL;
    }
    s->ac = NULL;
    s->cb = NULL;
    s->want = 0;
    if (s->busy) s->dead = 1;
    else free(s);
}

/* ---- hiredis command connections ---------------------------------------- */

static void hilock_nginx_add_read_(void *d) {
    hilock_nginx_sock_ *s = (hilock_nginx_sock_ *)d;
    hilock_nginx_want_(s, s->want | HILOCK_IO_READ);
}

static void hilock_nginx_del_read_(void *d) {
    hilock_nginx_sock_ *s = (hilock_nginx_sock_ *)d;
    hilock_nginx_want_(s, s->want & ~HILOCK_IO_READ);
}

static void hilock_nginx_add_write_(void *d) {
    hilock_nginx_sock_ *s = (hilock_nginx_sock_ *)d;
    hilock_nginx_want_(s, s->want | HILOCK_IO_WRITE);
}

static void hilock_nginx_del_write_(void *d) {
    hilock_nginx_sock_ *s = (hilock_nginx_sock_ *)d;
    hilock_nginx_want_(s, s->want & ~HILOCK_IO_WRITE);
}

/* hiredis frees the context (and closes the socket right after). */
static void hilock_nginx_cleanup_(void *d) {
    hilock_nginx_free_sock_((hilock_nginx_sock_ *)d);
}

static int hilock_nginx_attach_(void *data, struct redisAsyncContext *ac) {
    hilock_nginx_sock_ *s;
    if (ac->ev.data != NULL) return -1;
    s = hilock_nginx_sock_new_((ngx_log_t *)data, ac->c.fd);
    if (s == NULL) return -1;
    s->ac = ac;
    ac->ev.addRead = hilock_nginx_add_read_;
    ac->ev.delRead = hilock_nginx_del_read_;
    ac->ev.addWrite = hilock_nginx_add_write_;
    ac->ev.delWrite = hilock_nginx_del_write_;
    ac->ev.cleanup = hilock_nginx_cleanup_;
    ac->ev.data = s;
    return 0;
}

/* ---- hilock's own sockets ----------------------------------------------- */

static hilock_loop_io *hilock_nginx_io_new_(void *data, int fd, void (*cb)(void *, int), void *arg) {
    hilock_nginx_sock_ *s = hilock_nginx_sock_new_((ngx_log_t *)data, fd);
    if (s == NULL) return NULL;
    s->cb = cb;
    s->arg = arg;
    return (hilock_loop_io *)(void *)s;
}

static void hilock_nginx_io_watch_(hilock_loop_io *io, int events) {
    hilock_nginx_want_((hilock_nginx_sock_ *)(void *)io, events);
}

static void hilock_nginx_io_free_(hilock_loop_io *io) {
    hilock_nginx_free_sock_((hilock_nginx_sock_ *)(void *)io);
}

/* ---- Timers ------------------------------------------------------------- */

struct hilock_loop_timer {
    ngx_event_t ev;
    void (*cb)(void *arg);
    void *arg;
};

static void hilock_nginx_fire_(ngx_event_t *ev) {
    struct hilock_loop_timer *t = (struct hilock_loop_timer *)ev->data;
    ev->timedout = 0;
    t->cb(t->arg);
}

static hilock_loop_timer *hilock_nginx_timer_new_(void *data, void (*cb)(void *), void *arg) {
    struct hilock_loop_timer *t = (struct hilock_loop_timer *)calloc(1, sizeof(*t));
    if (t == NULL) return NULL;
    t->cb = cb;
    t->arg = arg;
    t->ev.handler = hilock_nginx_fire_;
    t->ev.data = t;
    t->ev.log = (ngx_log_t *)data;
    t->ev.cancelable = 1;       /* a worker shutting down does not wait */
    return t;
}

static void hilock_nginx_timer_stop_(hilock_loop_timer *t) {
    if (t->ev.timer_set) ngx_del_timer(&t->ev);
}

static void hilock_nginx_timer_start_(hilock_loop_timer *t, uint64_t ms) {
    /* Exactly: ngx_add_timer would keep an armed timer due within 300 ms
     * of the new deadline (NGX_TIMER_LAZY_DELAY). A 0 ms timer armed from
     * a socket or posted event fires at this turn's (or the next turn's)
     * timers; one armed from a timer handler (hilock's tick re-arming for
     * callbacks queued during the tick) fires at once, in the same
     * ngx_event_expire_timers() loop, before any socket event: a callback
     * that queued work on every tick would keep nginx in that loop. */
    hilock_nginx_timer_stop_(t);
    if (ms > (uint64_t)NGX_MAX_INT32_VALUE) ms = NGX_MAX_INT32_VALUE;
    ngx_add_timer(&t->ev, (ngx_msec_t)ms);
}

static void hilock_nginx_timer_free_(hilock_loop_timer *t) {
    hilock_nginx_timer_stop_(t);
    if (t->ev.posted) {
        ngx_delete_posted_event(&t->ev);
    }
    free(t);
}

/* Have cb(arg) called once, when this worker starts a graceful shutdown
 * (from inside the event handler of one of hilock's sockets). */
static ngx_inline void hilock_nginx_on_shutdown(void (*cb)(void *arg), void *arg) {
    hilock_nginx_shutdown_cb_ = cb;
    hilock_nginx_shutdown_arg_ = arg;
    hilock_nginx_shutdown_told_ = 0;
}

/* Fill `loop` so that hilock runs on the event loop of this nginx process
 * (a worker); `log` is where the sockets' and timers' events log, e.g.
 * cycle->log. */
static ngx_inline void hilock_nginx_init(hilock_loop *loop, ngx_log_t *log) {
    hilock_loop_init(loop);
    loop->data = log;
    loop->attach = hilock_nginx_attach_;
    loop->timer_new = hilock_nginx_timer_new_;
    loop->timer_start = hilock_nginx_timer_start_;
    loop->timer_stop = hilock_nginx_timer_stop_;
    loop->timer_free = hilock_nginx_timer_free_;
    loop->io_new = hilock_nginx_io_new_;
    loop->io_watch = hilock_nginx_io_watch_;
    loop->io_free = hilock_nginx_io_free_;
}

#endif /* HILOCK_ADAPTERS_NGINX_H */
