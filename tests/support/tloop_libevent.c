/* tloop over libevent 2. */
#include <time.h>
#include <event2/event.h>
#include <hilock/adapters/libevent.h>
#include "support/tloop.h"

static void tick(evutil_socket_t fd, short what, void *arg) {
    tloop *l = arg;
    (void)fd; (void)what;
    if (tloop_check(l)) event_base_loopbreak(l->impl);
}

static int le_init(tloop *l) {
    l->impl = event_base_new();
    if (l->impl == NULL) return -1;
    hilock_libevent_init(&l->hl, l->impl);
    return 0;
}

static int events_left(tloop *l) {
    return event_base_get_num_events(l->impl, EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE);
}

/* libevent has no "unref" for a timer: to see the loop drain, run it in
 * small steps and count what is left on it. */
static void le_run(tloop *l, int unref) {
    if (unref) {
        while (!tloop_check(l) && events_left(l) > 0) {
            event_base_loop(l->impl, EVLOOP_ONCE | EVLOOP_NONBLOCK);
            struct timespec ts = {0, 500000};
            nanosleep(&ts, NULL);
        }
        return;
    }
    struct event *t = event_new(l->impl, -1, EV_PERSIST, tick, l);
    struct timeval tv = {0, 2000};
    event_add(t, &tv);
    event_base_dispatch(l->impl);
    event_free(t);
}

static int le_destroy(tloop *l) {
    int left = events_left(l);
    event_base_free(l->impl);
    return left ? -1 : 0;
}

const tloop_ops tloop_libevent_ops = {le_init, le_run, le_destroy};
