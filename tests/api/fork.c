/* fork(): a client made in a parent and inherited by forked workers (the
 * nginx model, with event_reinit in each worker). The copies must refuse
 * work with HILOCK_EFORK, never read the parent's sockets (which would
 * steal its replies and make hiredis abort), never run the parent's
 * callbacks, and a client made in the worker must work. */
#include <sys/wait.h>
#include <unistd.h>
#include <event2/event.h>
#include "support/lockenv.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(fork, .init = setup, .fini = teardown, .timeout = 60);

static int parent_callbacks_in_child;
static void counting_cb(hilock_hold *h, int status, void *data) {
    (void)h; (void)status; (void)data;
    parent_callbacks_in_child++;
}

Test(fork, inherited_client_is_inert_and_the_parent_is_unharmed) {
    hilock_client *c = lockenv_client(&e);
    got g = acquire_now(&e, c, "fork-warm", NULL); /* both connections up */
    cr_assert_eq(g.status, 0);
    cr_assert_eq(release_now(&e, g.hold), 0);
    got held = acquire_now(&e, c, "fork-held", NULL);
    cr_assert_eq(held.status, 0);
    /* A wait in flight at fork time: the parent's, not the children's. */
    cr_assert_eq(hilock_acquire(c, "fork-held", NULL, counting_cb, NULL, NULL), 0);

    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        fflush(NULL);
        kids[k] = fork();
        cr_assert_geq(kids[k], 0);
        if (kids[k] == 0) {
            int code = 0;
            if (event_reinit(e.base) != 0) _exit(10);
            /* Everything on the inherited client refuses, clearly. */
            got cg = {0, 0, NULL, 0};
            if (hilock_acquire(c, "fork-x", NULL, got_cb, &cg, NULL) != HILOCK_EFORK) code = 12;
            if (hilock_release(held.hold, NULL, NULL) != HILOCK_EFORK) code = 13;
            if (hilock_owner_new(c) != NULL) code = 14;
            if (strstr(hilock_strerror(HILOCK_EFORK), "fork") == NULL) code = 15;
            if (hilock_client_close(c, NULL, NULL) != HILOCK_EFORK) code = 17;
            /* The loop runs over the inherited descriptors: no read of the
             * parent's traffic, no parent callback, no abort. */
            test_loop_for(e.base, 300);
            if (parent_callbacks_in_child != 0 || cg.calls != 0) code = 16;
            /* A client made here works. */
            hilock_client *mine = lockenv_client(&e);
            got mg = {0, 0, NULL, 0};
            char name[32];
            snprintf(name, sizeof(name), "fork-child-%d", k);
            if (hilock_acquire(mine, name, NULL, got_cb, &mg, NULL) != 0) code = 17;
            test_loop_until(e.base, &mg.calls, 5000);
            if (mg.calls != 1 || mg.status != 0) code = 18;
            rel r = {0, 0};
            if (mg.status == 0 && hilock_release(mg.hold, rel_cb, &r) == 0)
                test_loop_until(e.base, &r.calls, 5000);
            if (r.calls != 1 || r.status != 0) code = 19;
            hilock_client_free(mine);
            hilock_client_free(c); /* frees the copy; runs nothing */
            if (parent_callbacks_in_child != 0) code = 20;
            test_loop_for(e.base, 50);
            _exit(code);
        }
    }
    /* Meanwhile the parent keeps using its client: every reply must reach
     * it (a child reading its sockets would steal some). */
    for (int i = 0; i < 50; i++) {
        got pg = acquire_now(&e, c, "fork-parent", NULL);
        cr_assert_eq(pg.status, 0, "round %d: %s", i, hilock_strerror(pg.status));
        cr_assert_eq(release_now(&e, pg.hold), 0);
    }
    for (int k = 0; k < 2; k++) {
        int st = 0;
        cr_assert_eq(waitpid(kids[k], &st, 0), kids[k]);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker %d: %s %d", k,
                  WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    /* The parent's queued wait is still the parent's: release, and it comes. */
    parent_callbacks_in_child = 0;
    cr_assert_eq(release_now(&e, held.hold), 0);
    long long t0 = test_now_ms();
    while (parent_callbacks_in_child == 0 && test_now_ms() - t0 < 3000) test_loop_for(e.base, 10);
    cr_expect_eq(parent_callbacks_in_child, 1, "the parent's wait got no callback");
    hilock_client_free(c);
}
