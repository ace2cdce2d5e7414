/* Mutual exclusion under load: 10,000 waiters in this process and 4 more
 * processes contending for one name, checked by support/exclusion.h. */
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/lockenv.h"
#include "support/exclusion.h"

#define LOCAL_WAITERS 10000
#define PROCS 4
#define PROC_WAITERS 500

static void run_worker(lockenv *e, resource *res, int waiters) {
    worker w = {res, waiters, 0, 0, 0};
    hilock_client *c = lockenv_client(e);
    for (int i = 0; i < waiters; i++)
        cr_assert_eq(hilock_acquire(c, "exclusion", NULL, exclusion_acquired, &w, NULL), 0);
    test_loop_until(e->base, &w.done, 100000);
    cr_assert_eq(w.callbacks, waiters, "each waiter gets exactly one callback");
    hilock_client_free(c);
}

Test(exclusion, many_waiters_and_processes, .timeout = 180) {
    lockenv e;
    lockenv_start(&e);
    resource *res = mmap(NULL, sizeof(*res), PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(res, MAP_FAILED);
    memset((void *)res, 0, sizeof(*res));

    pid_t kids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        kids[p] = fork();
        cr_assert_geq(kids[p], 0);
        if (kids[p] == 0) {
            /* A fresh loop: libevent state must not be shared across fork. */
            lockenv ce = lockenv_child(&e);
            struct event_base *b = ce.base;
            worker w = {res, PROC_WAITERS, 0, 0, 0};
            hilock_client *c = lockenv_client(&ce);
            for (int i = 0; i < PROC_WAITERS; i++)
                hilock_acquire(c, "exclusion", NULL, exclusion_acquired, &w, NULL);
            test_loop_until(b, &w.done, 100000);
            hilock_client_free(c);
            event_base_free(b);
            _exit(w.callbacks == PROC_WAITERS && w.done ? 0 : 1);
        }
    }
    run_worker(&e, res, LOCAL_WAITERS);
    for (int p = 0; p < PROCS; p++) {
        int st = 0;
        cr_assert_eq(waitpid(kids[p], &st, 0), kids[p]);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker process %d failed", p);
    }
    long total = LOCAL_WAITERS + PROCS * PROC_WAITERS;
    cr_expect_eq(res->errors, 0);
    cr_expect_eq(res->overlaps, 0, "two holders at once");
    cr_expect_eq(res->fence_regressions, 0, "fencing tokens must strictly increase");
    cr_expect_eq(res->counter, total, "counter %ld, expected %ld", res->counter, total);
    cr_expect_gt(res->last_fence, 0);
    cr_expect_eq(lock_exists(&e.r, "exclusion"), 0, "no lock left behind");
    munmap((void *)res, sizeof(*res));
    lockenv_stop(&e);
}

/* Many names at once in one process: each name's fences increase and no
 * two holders of a name overlap. */
typedef struct multi {
    int held[16];
    unsigned long long last[16];
    int grants[16];
    int bad;
    int left;
    volatile int done;
} multi;

typedef struct mreq {
    multi *m;
    int idx;
} mreq;

static void m_released(int status, void *data) {
    mreq *r = data;
    if (status != 0) r->m->bad++;
    if (--r->m->left == 0) r->m->done = 1;
}

static void m_acquired(hilock_hold *h, int status, void *data) {
    mreq *r = data;
    multi *m = r->m;
    if (status != 0) { m->bad++; if (--m->left == 0) m->done = 1; return; }
    if (m->held[r->idx]) m->bad++;
    if (hilock_hold_fence(h) <= m->last[r->idx]) m->bad++;
    m->last[r->idx] = hilock_hold_fence(h);
    m->grants[r->idx]++;
    hilock_release(h, m_released, r);
}

Test(exclusion, many_names, .timeout = 60) {
    lockenv e;
    lockenv_start(&e);
    hilock_client *c = lockenv_client(&e);
    static mreq reqs[4000];
    multi m;
    memset(&m, 0, sizeof(m));
    m.left = 4000;
    for (int i = 0; i < 4000; i++) {
        char name[32];
        reqs[i].m = &m;
        reqs[i].idx = i % 16;
        snprintf(name, sizeof(name), "multi-%d", i % 16);
        cr_assert_eq(hilock_acquire(c, name, NULL, m_acquired, &reqs[i], NULL), 0);
    }
    cr_assert(test_loop_until(e.base, &m.done, 50000));
    cr_expect_eq(m.bad, 0);
    for (int i = 0; i < 16; i++) cr_expect_eq(m.grants[i], 250);
    hilock_client_free(c);
    lockenv_stop(&e);
}
