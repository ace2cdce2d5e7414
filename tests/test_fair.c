/* The fair lock against a real redis-server: grants in the order of
 * arrival across processes, the handoff by message (no command of the new
 * holder's), dead holders, dead grantees and dead waiters, cancels that
 * race a grant, reentrancy, missed messages, connection kills, a cluster. */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "prim/prim.h"
#include "support/lockenv.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(fair, .init = setup, .fini = teardown, .timeout = 90);

/* ---- Helpers ---------------------------------------------------------------- */

static got fair_now(hilock_client *c, const char *name, const hilock_acquire_opts *o) {
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_fair_acquire(c, name, o, got_cb, &g, NULL), 0);
    test_loop_until(e.base, &g.calls, 5000);
    cr_assert_eq(g.calls, 1, "acquire of %s got no callback", name);
    return g;
}

static void fair_start(hilock_client *c, const char *name, const hilock_acquire_opts *o, got *g,
                       hilock_wait **w) {
    memset(g, 0, sizeof(*g));
    cr_assert_eq(hilock_fair_acquire(c, name, o, got_cb, g, w), 0);
}

/* The fair lock's key with `suffix` ("", ":q", ":p", ":fence"). */
static const char *fkey(const char *name, const char *suffix) {
    static char ring[4][256];
    static int next;
    char *p = ring[next++ % 4];
    hilock_key("hilock:", name, p, 200);
    strcat(p, ":fair");
    strcat(p, suffix);
    return p;
}

static long long queued(const char *name) {
    return test_redis_int(&e.r, "ZCARD %s", fkey(name, ":q"));
}

static long long held(const char *name) {
    return test_redis_int(&e.r, "EXISTS %s", fkey(name, ""));
}

static long long script_calls(void) {
    return stat_calls(&e.r, "evalsha") + stat_calls(&e.r, "eval");
}

static hilock_acquire_opts wait_opts(int64_t wait_ms, uint32_t lease_ms) {
    hilock_acquire_opts o = opts_wait(wait_ms);
    if (lease_ms) o.lease_ms = lease_ms;
    return o;
}

/* ---- The handoff ------------------------------------------------------------- */

/* Three waiters of three clients behind a holder: each release hands the
 * lock to the next in order, by the release's own message: two scripts per
 * handoff (the waiter's join, the holder's release), none by the new
 * holder. */
Test(fair, handoff_by_message_in_order) {
    hilock_client *c[4];
    got g[4];
    for (int i = 0; i < 4; i++) c[i] = lockenv_client(&e);
    g[0] = fair_now(c[0], "h", NULL);
    cr_assert_eq(g[0].status, 0, "%s", hilock_strerror(g[0].status));
    cr_expect_str_eq(hilock_hold_name(g[0].hold), "h");
    for (int i = 1; i < 4; i++) {
        fair_start(c[i], "h", NULL, &g[i], NULL);
        test_loop_for(e.base, 30);
    }
    test_loop_for(e.base, 200);
    cr_expect_eq(queued("h"), 3, "every waiter joined the queue");
    for (int i = 1; i < 4; i++) {
        long long calls0 = script_calls();
        long long t0 = test_now_ms();
        cr_assert_eq(release_now(&e, g[i - 1].hold), 0);
        cr_assert(test_loop_until(e.base, &g[i].calls, 3000), "waiter %d never granted", i);
        cr_expect_eq(g[i].status, 0, "%s", hilock_strerror(g[i].status));
        for (int j = i + 1; j < 4; j++) cr_expect_eq(g[j].calls, 0, "waiter %d before %d", j, i);
        cr_expect_gt(hilock_hold_fence(g[i].hold), hilock_hold_fence(g[i - 1].hold));
        cr_expect_eq(hilock_hold_lost(g[i].hold), 0);
        cr_expect_eq(script_calls() - calls0, 1, "handoff %d took %lld scripts", i,
                     script_calls() - calls0);
        cr_log_info("handoff %d: %lld ms", i, g[i].at_ms - t0);
    }
    /* The claim: a renewal within a third of the 1 s window makes the
     * hold's lease the 30 s asked for. */
    test_loop_for(e.base, 600);
    long long pttl = test_redis_int(&e.r, "PTTL %s", fkey("h", ""));
    cr_expect_gt(pttl, 20000, "the grant was never claimed: pttl %lld", pttl);
    cr_expect_eq(hilock_hold_lost(g[3].hold), 0);
    cr_assert_eq(release_now(&e, g[3].hold), 0);
    cr_expect_eq(held("h"), 0);
    cr_expect_eq(queued("h"), 0);
    for (int i = 0; i < 4; i++) hilock_client_free(c[i]);
}

/* Waits of one client, and try once: EBUSY while anyone waits. */
Test(fair, one_client_many_waits_and_try_once) {
    hilock_client *c = lockenv_client(&e), *o = lockenv_client(&e);
    got first = fair_now(c, "m", NULL);
    cr_assert_eq(first.status, 0);
    got g[20];
    for (int i = 0; i < 20; i++) fair_start(c, "m", NULL, &g[i], NULL);
    test_loop_for(e.base, 200);
    cr_expect_eq(queued("m"), 20);
    hilock_acquire_opts once = wait_opts(0, 0);
    cr_expect_eq(fair_now(o, "m", &once).status, HILOCK_EBUSY);
    cr_expect_eq(queued("m"), 20, "a try once joined the queue");
    hilock_hold *h = first.hold;
    for (int i = 0; i < 20; i++) {
        cr_assert_eq(release_now(&e, h), 0);
        cr_assert(test_loop_until(e.base, &g[i].calls, 3000), "waiter %d never granted", i);
        cr_assert_eq(g[i].status, 0);
        for (int j = i + 1; j < 20; j++) cr_expect_eq(g[j].calls, 0, "waiter %d before %d", j, i);
        h = g[i].hold;
    }
    cr_assert_eq(release_now(&e, h), 0);
    got again = fair_now(o, "m", &once);
    cr_expect_eq(again.status, 0, "free, and nobody waits: %s", hilock_strerror(again.status));
    if (again.status == 0) release_now(&e, again.hold);
    hilock_client_free(c);
    hilock_client_free(o);
}
