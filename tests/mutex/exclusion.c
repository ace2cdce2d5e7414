/* Mutual exclusion under load: 10,000 waiters in this process and 4 more
 * processes contending for one name, checked by support/exclusion.h. */
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/lockenv.h"
#include "support/exclusion_procs.h"

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
    resource *res = exclusion_resource();

    pid_t kids[PROCS];
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    exclusion_fork(&e, &cfg, res, "exclusion", PROC_WAITERS, 100000, kids, PROCS);
    run_worker(&e, res, LOCAL_WAITERS);
    exclusion_reap(kids, PROCS);
    exclusion_check(res, LOCAL_WAITERS + PROCS * PROC_WAITERS);
    cr_expect_eq(lock_exists(&e.r, "exclusion"), 0, "no lock left behind");
    exclusion_resource_free(res);
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
