/* support/exclusion.h across processes, on libevent: the resource in
 * shared memory, processes of waiters forked with a fresh loop each, and
 * the books checked at the end. What the exclusion suites share (plain,
 * ACL, TLS); each adds its own faults in the parent. */
#ifndef HILOCK_TEST_EXCLUSION_PROCS_H
#define HILOCK_TEST_EXCLUSION_PROCS_H

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/lockenv.h"
#include "support/exclusion.h"

/* A zeroed resource that forked processes share; free with
 * exclusion_resource_free(). */
static inline resource *exclusion_resource(void) {
    resource *res = mmap(NULL, sizeof(*res), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(res, MAP_FAILED);
    memset((void *)res, 0, sizeof(*res));
    return res;
}

static inline void exclusion_resource_free(resource *res) { munmap((void *)res, sizeof(*res)); }

/* `waiters` acquires of `name` by one client of cfg on env's loop, each
 * through exclusion_acquired: 1 if every one had its single callback
 * within timeout_ms. */
static inline int exclusion_waiters(lockenv *env, const hilock_config *cfg, resource *res,
                                    const char *name, int waiters, int timeout_ms) {
    worker w = {res, waiters, 0, 0, 0};
    hilock_client *c = NULL;
    if (hilock_client_new(&c, cfg, &env->loop) != 0) return 0;
    for (int i = 0; i < waiters; i++) hilock_acquire(c, name, NULL, exclusion_acquired, &w, NULL);
    test_loop_until(env->base, &w.done, timeout_ms);
    hilock_client_free(c);
    return w.callbacks == waiters && w.done;
}

/* Fork n processes (pids into kids) that each run exclusion_waiters with a
 * fresh loop (libevent's state must not be shared across fork) and exit 0
 * if it returned 1. */
static inline void exclusion_fork(lockenv *e, const hilock_config *cfg, resource *res, const char *name,
                                  int waiters, int timeout_ms, pid_t *kids, int n) {
    for (int p = 0; p < n; p++) {
        fflush(NULL);
        kids[p] = fork();
        cr_assert_geq(kids[p], 0);
        if (kids[p] == 0) {
            lockenv ce = lockenv_child(e);
            int ok = exclusion_waiters(&ce, cfg, res, name, waiters, timeout_ms);
            event_base_free(ce.base);
            _exit(ok ? 0 : 1);
        }
    }
}

/* Wait for the n processes of exclusion_fork: each must have exited 0. */
static inline void exclusion_reap(const pid_t *kids, int n) {
    for (int p = 0; p < n; p++) {
        int st = 0;
        cr_assert_eq(waitpid(kids[p], &st, 0), kids[p]);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker process %d failed", p);
    }
}

/* The books after `total` grants: no error, one holder at a time, fences
 * in order, no lost increment. */
static inline void exclusion_check(const resource *res, long total) {
    cr_expect_eq(res->errors, 0);
    cr_expect_eq(res->overlaps, 0, "two holders at once");
    cr_expect_eq(res->fence_regressions, 0, "fencing tokens must strictly increase");
    cr_expect_eq(res->counter, total, "counter %ld, expected %ld", res->counter, total);
    cr_expect_gt(res->last_fence, 0);
}

#endif
