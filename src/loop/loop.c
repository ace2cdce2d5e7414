/* The client's clock: a heap of timers and a FIFO of deferred user
 * callbacks, both driven by one loop timer. Every user callback runs from
 * hl_loop_tick(), never from inside a hiredis callback or an API call, which
 * is what makes "exactly once, never re-entrantly" cheap to keep. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "loop/heap.h"

uint64_t hl_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* CLOCK_MONOTONIC_COARSE costs a fifth of CLOCK_MONOTONIC here (no
 * hardware read) and lags it by a tick at most (a few ms): enough for
 * thresholds of hundreds of ms, on every request. */
uint64_t hl_now_coarse_ms(void) {
#ifdef CLOCK_MONOTONIC_COARSE
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
#else
    return hl_now_ms();
#endif
}

uint64_t hl_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Arm the loop timer for `when` unless it already fires sooner. While a
 * tick runs, it re-arms at its end, so nothing is done here. */
static void arm(hl_loop *l, uint64_t when) {
    if (l->dispatching || when >= l->armed_at) return;
    uint64_t now = hl_now_ms();
    l->armed_at = when;
    l->ev.timer_start(l->ltimer, when > now ? when - now : 0);
}

void hl_timer_stop(hl_loop *l, hl_timer *t) {
    if (!t->armed) return;
    t->armed = 0;
    hl_heap_remove(&l->heap, t);
}

void hl_timer_start(hl_loop *l, hl_timer *t, uint64_t delay_ms) {
    hl_timer_start_at(l, t, hl_now_ms() + delay_ms);
}

void hl_timer_start_at(hl_loop *l, hl_timer *t, uint64_t when) {
    hl_timer_stop(l, t);
    t->when = when;
    t->armed = 1;
    hl_heap_insert(&l->heap, t);
    arm(l, t->when);
}

void hl_defer_push(hl_loop *l, hl_defer *d) {
    hl_list_push(&l->defers, &d->link);
    arm(l, 0);
}

void hl_defer_cancel(hl_defer *d) {
    if (hl_linked(&d->link)) hl_list_remove(&d->link);
}

void hl_defer_cancel_all(hl_loop *l) {
    while (!hl_list_empty(&l->defers)) {
        hl_defer *d = HL_CONTAINER(l->defers.next, hl_defer, link);
        hl_list_remove(&d->link);
        d->run(d, 1);
    }
}

static void marker_run(hl_defer *d, int cancel) { (void)d; (void)cancel; }

/* Run the callbacks queued before this turn began: items queued meanwhile
 * wait for the next turn, so a callback that keeps queueing work cannot
 * starve the loop. */
static void run_defers(hl_loop *l) {
    hl_defer marker;
    marker.run = marker_run;
    hl_list_push(&l->defers, &marker.link);
    while (!l->freeing) {
        hl_defer *d = HL_CONTAINER(l->defers.next, hl_defer, link);
        hl_list_remove(&d->link);
        if (d == &marker) return;
        d->run(d, 0);
    }
    hl_defer_cancel(&marker);
}

static void run_timers(hl_loop *l) {
    uint64_t now = hl_now_ms();
    while (l->heap != NULL && l->heap->when <= now && !l->freeing) {
        hl_timer *t = l->heap;
        hl_timer_stop(l, t);
        t->cb(t);
    }
}

/* The loop timer fired: due callbacks, then expired timers, then re-arm. */
static void hl_loop_tick(void *arg) {
    hl_loop *l = arg;
    l->armed_at = UINT64_MAX;
    if (l->forked) return; /* the parent's callbacks and timers, not ours */
    l->dispatching = 1;
    run_defers(l);
    if (!l->freeing) run_timers(l);
    if (l->freeing) { l->destroy(l); return; }
    l->dispatching = 0;
    if (l->after_tick) l->after_tick(l);
    if (!hl_list_empty(&l->defers)) arm(l, 0);
    else if (l->heap != NULL) arm(l, l->heap->when);
}

int hl_loop_init(hl_loop *l, const hilock_loop *ev) {
    l->ev = *ev;
    l->armed_at = UINT64_MAX;
    hl_list_init(&l->defers);
    l->ltimer = ev->timer_new(ev->data, hl_loop_tick, l);
    return l->ltimer ? 0 : HILOCK_ELOOP;
}

void hl_loop_close(hl_loop *l) {
    if (l->ltimer) l->ev.timer_free(l->ltimer);
    l->ltimer = NULL;
}

void hl_set_error(hl_loop *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->errstr, sizeof(l->errstr), fmt, ap);
    va_end(ap);
}

typedef struct hl_logmsg {
    hl_defer defer;
    hl_loop *loop;
    int level;
    char msg[];
} hl_logmsg;

static void log_run(hl_defer *d, int cancel) {
    hl_logmsg *m = HL_CONTAINER(d, hl_logmsg, defer);
    if (!cancel && !m->loop->forked) m->loop->log_cb(m->level, m->msg, m->loop->log_data);
    free(m);
}

const char *hl_log_quote(char *out, size_t n, const char *s) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        int plain = ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\';
        if (o + (plain ? 1 : 4) + 4 > n) { /* room for this, "..." and the NUL */
            memcpy(out + o, "...", 4);
            return out;
        }
        if (plain) {
            out[o++] = (char)ch;
            continue;
        }
        out[o++] = '\\';
        out[o++] = 'x';
        out[o++] = hex[ch >> 4];
        out[o++] = hex[ch & 15];
    }
    out[o] = '\0';
    return out;
}

void hl_log(hl_loop *l, int level, const char *fmt, ...) {
    va_list ap;
    if (l->log_cb == NULL) return;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    hl_logmsg *m = len < 0 ? NULL : malloc(sizeof(*m) + (size_t)len + 1);
    if (m == NULL) return;
    va_start(ap, fmt);
    vsnprintf(m->msg, (size_t)len + 1, fmt, ap);
    va_end(ap);
    m->loop = l;
    m->level = level;
    m->defer.run = log_run;
    hl_defer_push(l, &m->defer);
}
