/* tloop over libev 4. */
#include <hilock/adapters/libev.h>
#include "support/tloop.h"

static void tick(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)revents;
    if (tloop_check(w->data)) ev_break(loop, EVBREAK_ONE);
}

static int ev_init_(tloop *l) {
    l->impl = ev_loop_new(EVFLAG_AUTO);
    if (l->impl == NULL) return -1;
    hilock_libev_init(&l->hl, l->impl);
    return 0;
}

static void ev_run_(tloop *l, int unref) {
    ev_timer t;
    ev_timer_init(&t, tick, 0.002, 0.002);
    t.data = l;
    ev_timer_start(l->impl, &t);
    if (unref) ev_unref(l->impl);
    ev_run(l->impl, 0);
    if (unref) ev_ref(l->impl);
    ev_timer_stop(l->impl, &t);
}

static int ev_destroy_(tloop *l) {
    ev_loop_destroy(l->impl);
    return 0;
}

const tloop_ops tloop_libev_ops = {ev_init_, ev_run_, ev_destroy_};
