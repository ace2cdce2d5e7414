/* The loop-independent half of tloop.h. */
#include <criterion/criterion.h>
#include <string.h>
#include "support/harness.h"
#include "support/tloop.h"

void tloop_init(tloop *l, int kind) {
    static const tloop_ops *const ops[] = {&tloop_libevent_ops, &tloop_libev_ops, &tloop_libuv_ops};
    memset(l, 0, sizeof(*l));
    l->kind = kind;
    l->ops = ops[kind];
    cr_assert_eq(l->ops->init(l), 0, "cannot make a loop of kind %d", kind);
}

int tloop_check(tloop *l) {
    if (l->flag != NULL && *l->flag) return 1;
    if (test_now_ms() >= l->deadline) { l->timed_out = 1; return 1; }
    return 0;
}

int tloop_run(tloop *l, volatile int *flag, int ms, int unref) {
    l->flag = flag;
    l->deadline = test_now_ms() + ms;
    l->timed_out = 0;
    if (flag != NULL && *flag) return 1;
    l->ops->run(l, unref);
    return !l->timed_out;
}

int tloop_destroy(tloop *l) { return l->ops->destroy(l); }
