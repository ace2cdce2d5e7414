/* tloop over libuv 1. */
#include <stdlib.h>
#include <hilock/adapters/libuv.h>
#include "support/tloop.h"

static void tick(uv_timer_t *t) {
    if (tloop_check(t->data)) uv_stop(t->loop);
}

static void free_handle(uv_handle_t *h) { free(h); }

static int uv_init_(tloop *l) {
    l->impl = malloc(sizeof(uv_loop_t));
    if (l->impl == NULL || uv_loop_init(l->impl) != 0) return -1;
    hilock_libuv_init(&l->hl, l->impl);
    return 0;
}

static void uv_run_(tloop *l, int unref) {
    uv_timer_t *t = malloc(sizeof(*t));
    if (t == NULL) abort();
    uv_timer_init(l->impl, t);
    t->data = l;
    uv_timer_start(t, tick, 2, 2);
    if (unref) uv_unref((uv_handle_t *)t);
    uv_run(l->impl, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)t, free_handle);
    uv_run(l->impl, UV_RUN_NOWAIT); /* the close callback */
}

static void close_walk(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static int uv_destroy_(tloop *l) {
    uv_run(l->impl, UV_RUN_NOWAIT); /* pending close callbacks */
    int rc = uv_loop_close(l->impl);
    if (rc != 0) {
        /* Close what is left, so that the loop can go (the test fails). */
        uv_walk(l->impl, close_walk, NULL);
        uv_run(l->impl, UV_RUN_NOWAIT);
        uv_loop_close(l->impl);
    }
    free(l->impl);
    return rc;
}

const tloop_ops tloop_libuv_ops = {uv_init_, uv_run_, uv_destroy_};
