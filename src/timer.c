/* The client's clock: a binary heap of timers and a FIFO of deferred user
 * callbacks, both driven by one loop timer. Every user callback runs from
 * hl_tick(), never from inside a hiredis callback or an API call, which is
 * what makes "exactly once, never re-entrantly" cheap to keep. */
#include <stdlib.h>
#include <time.h>
#include "internal.h"

uint64_t hl_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Arm the loop timer for `when` unless it already fires sooner. While
 * hl_tick runs, it re-arms at the end, so nothing is done here. */
static void arm(hilock_client *c, uint64_t when) {
    if (c->dispatching || when >= c->armed_at) return;
    uint64_t now = hl_now_ms();
    c->armed_at = when;
    c->loop.timer_start(c->ltimer, when > now ? when - now : 0);
}

static void heap_set(hilock_client *c, size_t i, hl_timer *t) {
    c->heap[i] = t;
    t->slot = i + 1;
}

static void sift_up(hilock_client *c, size_t i) {
    hl_timer *t = c->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (c->heap[p]->when <= t->when) break;
        heap_set(c, i, c->heap[p]);
        i = p;
    }
    heap_set(c, i, t);
}

static void sift_down(hilock_client *c, size_t i) {
    hl_timer *t = c->heap[i];
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        uint64_t best = t->when;
        if (l < c->nheap && c->heap[l]->when < best) { m = l; best = c->heap[l]->when; }
        if (l + 1 < c->nheap && c->heap[l + 1]->when < best) m = l + 1;
        if (m == i) break;
        heap_set(c, i, c->heap[m]);
        i = m;
    }
    heap_set(c, i, t);
}

void hl_timer_stop(hilock_client *c, hl_timer *t) {
    if (t->slot == 0) return;
    size_t i = t->slot - 1;
    t->slot = 0;
    hl_timer *last = c->heap[--c->nheap];
    if (last == t) return;
    heap_set(c, i, last);
    sift_up(c, i);
    sift_down(c, last->slot - 1);
}

/* Make room for `more` timers, so that requests can fail with ENOMEM up
 * front rather than lose a deadline later. */
int hl_timer_reserve(hilock_client *c, size_t more) {
    if (c->nheap + more <= c->capheap) return 0;
    size_t cap = c->capheap ? c->capheap * 2 : 64;
    while (cap < c->nheap + more) cap *= 2;
    hl_timer **h = realloc(c->heap, cap * sizeof(*h));
    if (h == NULL) return -1;
    c->heap = h;
    c->capheap = cap;
    return 0;
}

void hl_timer_start(hilock_client *c, hl_timer *t, uint64_t delay_ms) {
    hl_timer_stop(c, t);
    if (hl_timer_reserve(c, 1) != 0) return; /* out of memory: stays unarmed */
    t->when = hl_now_ms() + delay_ms;
    c->heap[c->nheap] = t;
    t->slot = ++c->nheap;
    sift_up(c, c->nheap - 1);
    arm(c, t->when);
}

void hl_defer_push(hilock_client *c, hl_defer *d) {
    hl_list_push(&c->defers, &d->link);
    arm(c, 0);
}

void hl_defer_cancel(hl_defer *d) {
    if (hl_linked(&d->link)) hl_list_remove(&d->link);
}

void hl_client_destroy(hilock_client *c);

static void marker_run(hl_defer *d, int cancel) { (void)d; (void)cancel; }

/* The loop timer fired: run due callbacks, then expired timers, then re-arm.
 * Items queued while this runs wait for the next turn, so a callback that
 * keeps queueing work cannot starve the loop. */
void hl_tick(void *arg) {
    hilock_client *c = arg;
    hl_defer marker; /* items queued after it wait for the next turn */
    c->armed_at = UINT64_MAX;
    if (c->forked) return; /* the parent's callbacks and timers, not ours */
    c->dispatching = 1;

    marker.run = marker_run;
    hl_list_push(&c->defers, &marker.link);
    while (!c->freeing) {
        hl_defer *d = HL_CONTAINER(c->defers.next, hl_defer, link);
        hl_list_remove(&d->link);
        if (d == &marker) break;
        d->run(d, 0);
    }
    if (c->freeing) { hl_client_destroy(c); return; }

    uint64_t now = hl_now_ms();
    while (c->nheap > 0 && c->heap[0]->when <= now && !c->freeing) {
        hl_timer *t = c->heap[0];
        hl_timer_stop(c, t);
        t->cb(t);
    }
    if (c->freeing) { hl_client_destroy(c); return; }

    c->dispatching = 0;
    hl_names_check(c);
    if (!hl_list_empty(&c->defers)) arm(c, 0);
    else if (c->nheap > 0) arm(c, c->heap[0]->when);
}
