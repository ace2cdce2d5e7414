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
#include "support/clusterenv.h"
#include "support/fairenv.h"
#include "support/semload.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(fair, .init = setup, .fini = teardown, .timeout = 90);

/* ---- Helpers ---------------------------------------------------------------- */

#define fair_now(c, name, o) fairenv_now(&e, c, name, o)
#define queued(name) fairenv_queued(&e.r, name)
#define held(name) fairenv_held(&e.r, name)

static long long script_calls(void) { return script_calls_of(&e.r); }
#define wait_opts opts_wait_lease

/* ---- The handoff ------------------------------------------------------------- */

/* Three waiters of three clients behind a holder: each release hands the
 * lock to the next in order, by the release's own message: two scripts per
 * handoff (the waiter's join, the holder's release), none by the new
 * holder. */
/* Four clients: c[0] holds `name` (g[0]), c[1..3] wait for it in that
 * order, each joined the queue before the next started. */
static void held_with_three_queued(const char *name, hilock_client *c[4], got g[4]) {
    for (int i = 0; i < 4; i++) c[i] = lockenv_client(&e);
    g[0] = fair_now(c[0], name, NULL);
    cr_assert_eq(g[0].status, 0, "%s", hilock_strerror(g[0].status));
    cr_expect_str_eq(hilock_hold_name(g[0].hold), name);
    for (int i = 1; i < 4; i++) {
        fair_start(c[i], name, NULL, &g[i], NULL);
        test_loop_for(e.base, 30);
    }
    test_loop_for(e.base, 200);
    cr_assert_eq(queued(name), 3, "every waiter joined the queue");
}

Test(fair, handoff_by_message_in_order) {
    hilock_client *c[4];
    got g[4];
    held_with_three_queued("h", c, g);
    for (int i = 1; i < 4; i++) {
        long long calls0 = script_calls();
        long long t0 = test_now_ms();
        uint64_t before = hilock_hold_fence(g[i - 1].hold);
        cr_assert_eq(release_now(&e, g[i - 1].hold), 0);
        cr_assert(test_loop_until(e.base, &g[i].calls, 3000), "waiter %d never granted", i);
        cr_expect_eq(g[i].status, 0, "%s", hilock_strerror(g[i].status));
        for (int j = i + 1; j < 4; j++) cr_expect_eq(g[j].calls, 0, "waiter %d before %d", j, i);
        cr_expect_gt(hilock_hold_fence(g[i].hold), before);
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

static uint64_t wakeups_of(const hilock_client *c) {
    hilock_stats s;
    hilock_stats_init(&s);
    cr_assert_eq(hilock_client_stats(c, &s), 0);
    return s.wakeups;
}

/* No herd of wakeups: a grant goes to the grantee's client alone (its own
 * channel), so the other clients that wait on the name, and the releaser,
 * whose subscription lingers, are not woken by it. Four clients, each its
 * own subscriber connection as four processes would have; each release
 * must wake exactly one of them: the grantee. */
Test(fair, a_grant_wakes_its_grantee_alone) {
    hilock_client *c[4];
    got g[4];
    held_with_three_queued("wk", c, g);
    /* One channel per waiting client, one subscriber each. */
    redisReply *r = test_redis_cmd(&e.r, "PUBSUB CHANNELS %s*", fkey("wk", ":ch:"));
    cr_assert(r != NULL && r->type == REDIS_REPLY_ARRAY);
    cr_expect_eq(r->elements, 3, "%zu channels for 3 waiting clients", r->elements);
    freeReplyObject(r);
    for (int i = 1; i < 4; i++) {
        uint64_t before[4];
        for (int j = 0; j < 4; j++) before[j] = wakeups_of(c[j]);
        cr_assert_eq(release_now(&e, g[i - 1].hold), 0);
        cr_assert(test_loop_until(e.base, &g[i].calls, 3000), "waiter %d never granted", i);
        cr_assert_eq(g[i].status, 0, "%s", hilock_strerror(g[i].status));
        test_loop_for(e.base, 50); /* a copy of the grant sent elsewhere would be here by now */
        for (int j = 0; j < 4; j++)
            cr_expect_eq(wakeups_of(c[j]) - before[j], j == i, "handoff %d woke client %d %llu times", i, j,
                         (unsigned long long)(wakeups_of(c[j]) - before[j]));
    }
    cr_assert_eq(release_now(&e, g[3].hold), 0);
    cr_expect_eq(held("wk"), 0);
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

/* ---- Order and exclusion across processes ------------------------------------ */

#define FIFO_PROCS 4
#define FIFO_WAITS 6
#define FIFO_GAP_MS 25

typedef struct fifores {
    volatile long long t0;           /* when arrival 0 is due (test_now_ms) */
    volatile int ready, n, inside, overlaps, errors, first_error;
    volatile int order[FIFO_PROCS * FIFO_WAITS];
    volatile unsigned long long fence[FIFO_PROCS * FIFO_WAITS];
} fifores;

typedef struct fifowait {
    fifores *res;
    hilock_client *c;
    struct event_base *base;
    int arrival;                     /* its place in the global order */
    hilock_hold *h;
    volatile int *left;
} fifowait;

static void fifo_released(int status, void *data) {
    fifowait *w = data;
    if (status != 0 && __atomic_fetch_add(&w->res->errors, 1, __ATOMIC_SEQ_CST) == 0)
        w->res->first_error = status;
    --*w->left;
}

static void fifo_release(evutil_socket_t fd, short what, void *data) {
    fifowait *w = data;
    (void)fd; (void)what;
    __atomic_sub_fetch(&w->res->inside, 1, __ATOMIC_SEQ_CST);
    if (hilock_release(w->h, fifo_released, w) != 0) --*w->left;
}

static void fifo_granted(hilock_hold *h, int status, void *data) {
    fifowait *w = data;
    fifores *r = w->res;
    if (status != 0) {
        if (__atomic_fetch_add(&r->errors, 1, __ATOMIC_SEQ_CST) == 0) r->first_error = status;
        --*w->left;
        return;
    }
    if (__atomic_add_fetch(&r->inside, 1, __ATOMIC_SEQ_CST) > 1)
        __atomic_add_fetch(&r->overlaps, 1, __ATOMIC_SEQ_CST);
    int i = __atomic_fetch_add(&r->n, 1, __ATOMIC_SEQ_CST);
    r->order[i] = w->arrival;
    r->fence[i] = hilock_hold_fence(h);
    w->h = h;
    struct timeval tv = {0, 2000};
    event_base_once(w->base, -1, EV_TIMEOUT, fifo_release, w, &tv);
}

static void fifo_arrive(evutil_socket_t fd, short what, void *data) {
    fifowait *w = data;
    (void)fd; (void)what;
    if (hilock_fair_acquire(w->c, "fifo", NULL, fifo_granted, w, NULL) != 0) --*w->left;
}

/* Process p's waits arrive at t0 + (k * PROCS + p) * GAP. */
static void fifo_child(fifores *r, int p) {
    lockenv ce = lockenv_child(&e);
    struct event_base *b = ce.base;
    hilock_client *c = lockenv_client(&ce);
    fifowait w[FIFO_WAITS];
    volatile int left = FIFO_WAITS;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    __atomic_add_fetch(&r->ready, 1, __ATOMIC_SEQ_CST);
    while (r->t0 == 0) test_msleep(1);
    for (int k = 0; k < FIFO_WAITS; k++) {
        w[k] = (fifowait){r, c, b, k * FIFO_PROCS + p, NULL, &left};
        long long due = r->t0 + w[k].arrival * FIFO_GAP_MS - test_now_ms();
        struct timeval tv = {0, due > 0 ? (int)due * 1000 : 0};
        event_base_once(b, -1, EV_TIMEOUT, fifo_arrive, &w[k], &tv);
    }
    long long until = test_now_ms() + 30000;
    while (left > 0 && test_now_ms() < until) event_base_loop(b, EVLOOP_ONCE);
    hilock_client_free(c);
    event_base_free(b);
    _exit(left == 0 ? 0 : 3);
}

/* 24 waits of 4 processes arrive 25 ms apart, interleaved, behind a holder:
 * they are granted exactly in the order they arrived, one at a time, with
 * fences that grow in that order. (The ordinary lock fails this: after a
 * release, whichever process tries first wins.) */
Test(fair, first_come_first_served_across_processes) {
    fifores *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(r, MAP_FAILED);
    memset((void *)r, 0, sizeof(*r));
    hilock_client *c = lockenv_client(&e);
    got holder = fair_now(c, "fifo", NULL);
    cr_assert_eq(holder.status, 0);
    pid_t kids[FIFO_PROCS];
    for (int p = 0; p < FIFO_PROCS; p++) {
        kids[p] = fork();
        cr_assert_geq(kids[p], 0);
        if (kids[p] == 0) fifo_child(r, p);
    }
    while (r->ready < FIFO_PROCS) test_msleep(1);
    r->t0 = test_now_ms() + 100;
    test_loop_for(e.base, 100 + FIFO_PROCS * FIFO_WAITS * FIFO_GAP_MS + 300);
    cr_expect_eq(queued("fifo"), FIFO_PROCS * FIFO_WAITS);
    cr_assert_eq(release_now(&e, holder.hold), 0);
    int bad = 0;
    for (int p = 0; p < FIFO_PROCS; p++) {
        int st;
        waitpid(kids[p], &st, 0);
        bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    cr_expect_eq(bad, 0, "a process did not get all its grants");
    cr_expect_eq(r->errors, 0, "first error: %s", hilock_strerror(r->first_error));
    cr_expect_eq(r->overlaps, 0, "two holders at once");
    cr_assert_eq(r->n, FIFO_PROCS * FIFO_WAITS);
    char got_order[512] = "";
    int out_of_order = 0;
    for (int i = 0; i < r->n; i++) {
        out_of_order += r->order[i] != i;
        snprintf(got_order + strlen(got_order), sizeof(got_order) - strlen(got_order), " %d", r->order[i]);
        if (i > 0) cr_expect_gt(r->fence[i], r->fence[i - 1], "fence %d not above the one before", i);
    }
    cr_expect_eq(out_of_order, 0, "granted out of order:%s", got_order);
    cr_expect_eq(held("fifo"), 0);
    cr_expect_eq(queued("fifo"), 0);
    hilock_client_free(c);
    munmap((void *)r, sizeof(*r));
}

/* 4 processes of 4 waits each, 20 rounds of 1 ms holds on one name: never
 * two holders, every fence above all fences delivered before its acquire
 * and none twice. */
#define CPROCS 4
#define CSLOTS 4
#define CROUNDS 20

static void run_fair_slots(semres *res, hilock_client *c, struct event_base *base, const char *name,
                           int nslots, int rounds, int timeout_ms) {
    static semslot s[16];
    volatile int active = nslots, done = 0;
    for (int i = 0; i < nslots; i++)
        s[i] = (semslot){res, c, base, name, 0, 1, 1, rounds, 1, 0, NULL, &active, &done, 1};
    for (int i = 0; i < nslots; i++) semslot_go(&s[i]);
    test_loop_until(base, &done, timeout_ms);
}

Test(fair, exclusion_over_processes, .timeout = 120) {
    semres *res = mmap(NULL, sizeof(*res), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(res, MAP_FAILED);
    memset((void *)res, 0, sizeof(*res));
    pid_t kids[CPROCS];
    long long t0 = test_now_ms(), calls0 = script_calls();
    for (int p = 0; p < CPROCS; p++) {
        kids[p] = fork();
        cr_assert_geq(kids[p], 0);
        if (kids[p] == 0) {
            lockenv ce = lockenv_child(&e);
            struct event_base *b = ce.base;
            hilock_client *c = lockenv_client(&ce);
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            run_fair_slots(res, c, b, "procs", CSLOTS, CROUNDS, 90000);
            hilock_client_free(c);
            event_base_free(b);
            _exit(0);
        }
    }
    for (int p = 0; p < CPROCS; p++) waitpid(kids[p], NULL, 0);
    long total = CPROCS * CSLOTS * CROUNDS;
    double per = (double)(script_calls() - calls0) / (double)res->grants;
    cr_log_info("fair exclusion: %ld grants in %lld ms, %.2f scripts per grant", res->grants,
                test_now_ms() - t0, per);
    cr_expect_eq(res->errors, 0, "first error %s", hilock_strerror(res->first_error));
    cr_expect_eq(res->grants, total);
    cr_expect_eq(res->over, 0, "two holders at once");
    cr_expect_eq(res->stale, 0, "a fence below one delivered before its acquire");
    cr_expect_eq(semload_duplicates(res), 0, "two grants with one fence");
    cr_expect_leq(per, 3.0, "%.2f scripts per grant", per);
    cr_expect_eq(held("procs"), 0);
    cr_expect_eq(queued("procs"), 0);
    munmap((void *)res, sizeof(*res));
}

/* ---- Deaths ------------------------------------------------------------------ */

typedef struct deadkid {
    volatile int granted, joined;
} deadkid;

/* A child process that holds "name" (waits = 0), or has `waits` waits
 * queued on it, then stays until it is killed. */
static pid_t dead_child(deadkid *k, const char *name, int waits, uint32_t lease_ms) {
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid != 0) return kid;
    lockenv ce = lockenv_child(&e);
    struct event_base *b = ce.base;
    hilock_client *c = lockenv_client(&ce);
    hilock_acquire_opts o = wait_opts(HILOCK_WAIT_FOREVER, lease_ms);
    got g[8];
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (int i = 0; i < (waits ? waits : 1); i++) {
        memset(&g[i], 0, sizeof(g[i]));
        hilock_fair_acquire(c, name, &o, got_cb, &g[i], NULL);
    }
    if (waits == 0) {
        test_loop_until(b, &g[0].calls, 5000);
        k->granted = g[0].status == 0;
    } else {
        test_loop_for(b, 200);
        k->joined = 1;
    }
    test_loop_for(b, 30000); /* renewing, until killed */
    _exit(2);
}

static void wait_flag(volatile int *flag) {
    long long until = test_now_ms() + 5000;
    while (!*flag && test_now_ms() < until) test_msleep(5);
    cr_assert(*flag, "the child never got there");
}

/* A holder killed with SIGKILL: the next waiter gets the lock when its
 * lease runs out (900 ms), found by its once-a-second try. */
Test(fair, a_killed_holder_lapses_after_its_lease) {
    deadkid *k = mmap(NULL, sizeof(*k), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset((void *)k, 0, sizeof(*k));
    pid_t kid = dead_child(k, "dh", 0, 900);
    wait_flag(&k->granted);
    hilock_client *c = lockenv_client(&e);
    got g;
    fair_start(c, "dh", NULL, &g, NULL);
    test_loop_for(e.base, 300);
    if (g.calls != 0) kill(kid, SIGKILL);
    cr_assert_eq(g.calls, 0, "granted a live holder's lock");
    kill(kid, SIGKILL);
    long long killed = test_now_ms();
    waitpid(kid, NULL, 0);
    cr_assert(test_loop_until(e.base, &g.calls, 5000), "never granted");
    cr_expect_eq(g.status, 0, "%s", hilock_strerror(g.status));
    cr_log_info("killed holder: next granted %lld ms after the kill (lease 900)", g.at_ms - killed);
    cr_expect_lt(g.at_ms - killed, 2500);
    if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
    munmap((void *)k, sizeof(*k));
}

/* A process with 3 waits at the head of the queue is killed: the release
 * grants its first wait, the grant lapses after the 1 s claim window, and
 * the next live waiter gets the lock, with the dead one's two other waits
 * skipped at once (the lapsed grant cut their time). */
Test(fair, a_grant_to_a_dead_process_lapses_after_the_claim_window) {
    deadkid *k = mmap(NULL, sizeof(*k), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset((void *)k, 0, sizeof(*k));
    hilock_client *h = lockenv_client(&e), *c = lockenv_client(&e);
    got gh = fair_now(h, "dg", NULL);
    cr_assert_eq(gh.status, 0);
    pid_t kid = dead_child(k, "dg", 3, 0);
    wait_flag(&k->joined);
    got g;
    fair_start(c, "dg", NULL, &g, NULL);
    test_loop_for(e.base, 100);
    cr_expect_eq(queued("dg"), 4);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, gh.hold), 0);
    cr_assert(test_loop_until(e.base, &g.calls, 5000), "never granted");
    cr_expect_eq(g.status, 0, "%s", hilock_strerror(g.status));
    long long took = g.at_ms - t0;
    cr_log_info("grant to a dead process: next granted %lld ms after the release", took);
    cr_expect(took >= 900 && took < 2600, "granted %lld ms after the release", took);
    cr_expect_eq(queued("dg"), 0, "the dead process's waits are still queued");
    if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(h);
    hilock_client_free(c);
    munmap((void *)k, sizeof(*k));
}

/* Waits of a process dead for more than 5 s are skipped by the release
 * itself: the next live waiter gets the lock at once. */
Test(fair, waits_of_a_long_dead_process_are_skipped) {
    deadkid *k = mmap(NULL, sizeof(*k), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset((void *)k, 0, sizeof(*k));
    hilock_client *h = lockenv_client(&e), *c = lockenv_client(&e);
    got gh = fair_now(h, "dw", NULL);
    cr_assert_eq(gh.status, 0);
    pid_t kid = dead_child(k, "dw", 5, 0);
    wait_flag(&k->joined);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    got g;
    fair_start(c, "dw", NULL, &g, NULL);
    test_loop_for(e.base, 5300);
    cr_expect_eq(g.calls, 0);
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, gh.hold), 0);
    cr_assert(test_loop_until(e.base, &g.calls, 3000), "never granted");
    cr_expect_eq(g.status, 0, "%s", hilock_strerror(g.status));
    cr_expect_lt(g.at_ms - t0, 500, "granted %lld ms after the release", g.at_ms - t0);
    cr_expect_eq(queued("dw"), 0);
    if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(h);
    hilock_client_free(c);
    munmap((void *)k, sizeof(*k));
}

/* ---- Cancels, timeouts, reentrancy, close ---------------------------------------- */

/* The holder releases and the next waiter is cancelled at once, in every
 * order the two can meet: the lock always reaches the third, and nothing
 * stays behind. */
Test(fair, cancels_racing_grants_pass_the_lock_on) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e), *c = lockenv_client(&e);
    for (int round = 0; round < 24; round++) {
        got ga = fair_now(a, "cr", NULL), gb, gc;
        cr_assert_eq(ga.status, 0);
        hilock_wait *wb;
        fair_start(b, "cr", NULL, &gb, &wb);
        test_loop_for(e.base, 20);
        fair_start(c, "cr", NULL, &gc, NULL);
        test_loop_for(e.base, 20);
        rel r = {0, 0};
        cr_assert_eq(hilock_release(ga.hold, rel_cb, &r), 0);
        if (round % 3 == 1) event_base_loop(e.base, EVLOOP_NONBLOCK);
        if (round % 3 == 2) test_loop_for(e.base, round % 6 == 2 ? 1 : 0);
        int crc = gb.calls == 0 ? hilock_wait_cancel(wb) : HILOCK_EINVAL; /* wb is gone after */
        cr_assert(test_loop_until(e.base, &gb.calls, 3000));
        if (crc == 0) cr_expect_eq(gb.status, HILOCK_ECANCELED);
        else cr_expect_eq(gb.status, 0, "round %d: cancel said %d, status %d", round, crc, gb.status);
        if (gb.status == 0) cr_expect_eq(release_now(&e, gb.hold), 0);
        cr_assert(test_loop_until(e.base, &gc.calls, 5000), "round %d: the third never got it", round);
        cr_expect_eq(gc.status, 0);
        cr_expect_lt(gc.at_ms - ga.at_ms, 1000, "round %d: a lapsed grant, not a handoff", round);
        cr_expect_eq(release_now(&e, gc.hold), 0);
        cr_expect_eq(held("cr"), 0, "round %d", round);
        cr_expect_eq(queued("cr"), 0, "round %d", round);
    }
    hilock_client_free(a);
    hilock_client_free(b);
    hilock_client_free(c);
}

static void close_cb(void *data) { *(int *)data = 1; }

/* Waits that time out or are cancelled leave the queue; close removes the
 * places of waits still there. */
Test(fair, waits_that_end_leave_the_queue) {
    hilock_client *h = lockenv_client(&e), *c = lockenv_client(&e);
    got gh = fair_now(h, "lq", NULL);
    hilock_acquire_opts o = wait_opts(300, 0);
    got g1 = fair_now(c, "lq", &o);
    cr_expect_eq(g1.status, HILOCK_ETIMEDOUT);
    test_loop_for(e.base, 100);
    cr_expect_eq(queued("lq"), 0, "a timed out wait kept its place");
    got g[3];
    for (int i = 0; i < 3; i++) fair_start(c, "lq", NULL, &g[i], NULL);
    test_loop_for(e.base, 100);
    cr_expect_eq(queued("lq"), 3);
    int closed = 0;
    hilock_client_close(c, close_cb, &closed);
    test_loop_until(e.base, &closed, 3000);
    cr_assert(closed, "close never ended");
    for (int i = 0; i < 3; i++) cr_expect_eq(g[i].status, HILOCK_ECANCELED);
    cr_expect_eq(queued("lq"), 0, "close left places in the queue");
    cr_expect_eq(release_now(&e, gh.hold), 0);
    cr_expect_eq(held("lq"), 0);
    hilock_client_free(h);
}

/* An owner's waits queued behind another holder are all served by its one
 * grant (one hold, counted), and leave the queue. */
Test(fair, reentrant_with_an_owner) {
    hilock_client *h = lockenv_client(&e), *c = lockenv_client(&e);
    hilock_owner *own = hilock_owner_new(c);
    hilock_acquire_opts o = wait_opts(HILOCK_WAIT_FOREVER, 0);
    o.owner = own;
    got gh = fair_now(h, "re", NULL), g1, g2;
    fair_start(c, "re", &o, &g1, NULL);
    fair_start(c, "re", &o, &g2, NULL);
    test_loop_for(e.base, 100);
    cr_expect_eq(queued("re"), 2);
    cr_assert_eq(release_now(&e, gh.hold), 0);
    cr_assert(test_loop_until(e.base, &g2.calls, 3000));
    cr_expect_eq(g1.status, 0);
    cr_expect_eq(g2.status, 0);
    cr_expect_eq(g1.hold, g2.hold, "one hold for the owner");
    got g3 = fair_now(c, "re", &o);
    cr_expect_eq(g3.hold, g1.hold, "reentrant while held");
    test_loop_for(e.base, 100);
    cr_expect_eq(queued("re"), 0, "a served wait kept its place");
    for (int i = 0; i < 3; i++) cr_expect_eq(release_now(&e, g1.hold), 0);
    cr_expect_eq(held("re"), 0);
    hilock_owner_free(own);
    hilock_client_free(c);
    hilock_client_free(h);
}

/* ---- Missed messages, stalls, connection kills ------------------------------------ */

/* A client on a loop of its own, which the test runs only when it says. */
typedef struct side {
    struct event_base *base;
    lockenv env;
    hilock_client *c;
} side;

static void side_start(side *s) {
    s->env = lockenv_child(&e);
    s->base = s->env.base;
    s->c = lockenv_client(&s->env);
}

static void side_stop(side *s) {
    hilock_client_free(s->c);
    event_base_free(s->base);
}

/* The grant's message is lost (the waiter's subscriber connection was
 * killed just before the release): the try that follows the resubscription
 * finds the lock in the waiter's name, and the grant is claimed. */
Test(fair, a_missed_grant_message_is_found_after_resubscribing) {
    hilock_client *h = lockenv_client(&e);
    side s;
    side_start(&s);
    got gh = fair_now(h, "mm", NULL), g;
    fair_start(s.c, "mm", NULL, &g, NULL);
    test_loop_for(s.base, 150);
    cr_assert_gt(test_redis_int(&e.r, "CLIENT KILL TYPE pubsub"), 0);
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, gh.hold), 0);
    cr_assert(test_loop_until(s.base, &g.calls, 5000), "the missed grant was never found");
    cr_expect_eq(g.status, 0, "%s", hilock_strerror(g.status));
    cr_log_info("missed grant message: found %lld ms after the release", g.at_ms - t0);
    test_loop_for(s.base, 600);
    cr_expect_eq(hilock_hold_lost(g.hold), 0);
    long long pttl = test_redis_int(&e.r, "PTTL %s", fkey("mm", ""));
    cr_expect_gt(pttl, 20000, "the found grant was never claimed: pttl %lld", pttl);
    rel r = {0, 0};
    hilock_release(g.hold, rel_cb, &r);
    test_loop_until(s.base, &r.calls, 3000);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(held("mm"), 0);
    side_stop(&s);
    hilock_client_free(h);
}

/* The waiter's loop stalls past the claim window while its grant message
 * sits unread: the grant lapses and the next waiter gets the lock. When
 * the loop runs again, the grant is dated from when Redis made it (by the
 * server's clock), so it is known stale: the wait joins again instead of
 * believing it holds the lock beside the other holder, and gets it after. */
Test(fair, a_stalled_grantee_does_not_believe_a_lapsed_grant) {
    hilock_client *h = lockenv_client(&e), *c = lockenv_client(&e);
    side s;
    side_start(&s);
    got gh = fair_now(h, "st", NULL), gx, gy;
    fair_start(s.c, "st", NULL, &gx, NULL);
    test_loop_for(s.base, 150);
    fair_start(c, "st", NULL, &gy, NULL);
    test_loop_for(e.base, 100);
    cr_expect_eq(queued("st"), 2);
    cr_assert_eq(release_now(&e, gh.hold), 0); /* granted to x, whose loop is stopped */
    cr_assert(test_loop_until(e.base, &gy.calls, 4000), "the lapsed grant never passed on");
    cr_expect_eq(gy.status, 0);
    test_loop_for(s.base, 300); /* x reads its old grant now */
    cr_expect_eq(gx.calls, 0, "the stalled waiter believed a grant that lapsed (status %d)", gx.status);
    cr_expect_eq(hilock_hold_lost(gy.hold), 0);
    cr_expect_eq(release_now(&e, gy.hold), 0);
    cr_assert(test_loop_until(s.base, &gx.calls, 3000), "the stalled waiter never got it after");
    cr_expect_eq(gx.status, 0, "%s", hilock_strerror(gx.status));
    rel r = {0, 0};
    hilock_release(gx.hold, rel_cb, &r);
    test_loop_until(s.base, &r.calls, 3000);
    cr_expect_eq(held("st"), 0);
    cr_expect_eq(queued("st"), 0);
    side_stop(&s);
    hilock_client_free(c);
    hilock_client_free(h);
}

/* Both kinds of connection killed again and again under contention from 3
 * clients: never two holders, fences in order, nothing left behind. */
static void kill_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    int *n = arg;
    test_redis_int(&e.r, (*n)++ % 2 ? "CLIENT KILL TYPE normal" : "CLIENT KILL TYPE pubsub");
}

Test(fair, connection_kills_under_contention, .timeout = 90) {
    semres *res = calloc(1, sizeof(*res));
    hilock_client *c[3];
    static semslot s[12];
    volatile int active = 12, done = 0;
    for (int i = 0; i < 3; i++) c[i] = lockenv_client(&e);
    for (int i = 0; i < 12; i++)
        s[i] = (semslot){res, c[i % 3], e.base, "kills", 0, 1, 1, 20, 2, 0, NULL, &active, &done, 1};
    int kills = 0;
    struct event *k = event_new(e.base, -1, EV_PERSIST, kill_tick, &kills);
    struct timeval tv = {0, 40 * 1000};
    evtimer_add(k, &tv);
    for (int i = 0; i < 12; i++) semslot_go(&s[i]);
    cr_assert(test_loop_until(e.base, &done, 60000), "every slot must end");
    event_free(k);
    cr_log_info("fair, connection kills: %d kills, %ld grants, %ld errors (first %s)", kills,
                res->grants, res->errors, hilock_strerror(res->first_error));
    cr_expect_gt(kills, 3);
    cr_expect_eq(res->over, 0, "two holders at once");
    cr_expect_eq(res->stale, 0);
    cr_expect_eq(semload_duplicates(res), 0);
    cr_expect_gt(res->grants, 12 * 20 / 2, "too few grants: %ld", res->grants);
    long long until = test_now_ms() + 3000;
    while ((held("kills") != 0 || queued("kills") != 0) && test_now_ms() < until)
        test_loop_for(e.base, 50);
    cr_expect_eq(held("kills"), 0, "a lock left behind");
    cr_expect_eq(queued("kills"), 0, "places left in the queue");
    for (int i = 0; i < 3; i++) hilock_client_free(c[i]);
    free(res);
}

/* ---- Elsewhere ------------------------------------------------------------------ */

Test(fair, refused_over_redlock) {
    hilock_client *c = lockenv_client_url(&e, "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", 0);
    got g = {0, 0, NULL, 0};
    cr_expect_eq(hilock_fair_acquire(c, "rl", NULL, got_cb, &g, NULL), HILOCK_EINVAL);
    cr_expect_neq(strstr(hilock_client_errstr(c), "Redlock"), NULL, "%s", hilock_client_errstr(c));
    test_loop_for(e.base, 50);
    cr_expect_eq(g.calls, 0);
    hilock_client_free(c);
}

Test(fair, separate_from_the_mutex_of_the_same_name) {
    hilock_client *c = lockenv_client(&e);
    got m = acquire_now(&e, c, "same", NULL);
    got f = fair_now(c, "same", NULL);
    cr_expect_eq(m.status, 0);
    cr_expect_eq(f.status, 0, "the mutex of the name held off the fair lock");
    cr_expect_eq(release_now(&e, f.hold), 0);
    cr_expect_eq(release_now(&e, m.hold), 0);
    hilock_client_free(c);
}

/* Four names over the three masters, two clients (sharded pub/sub): every
 * key of a name on its slot's master, never two holders of a name. */
Test(fair, contention_on_a_cluster, .timeout = 180) {
    test_cluster cl;
    cr_assert_eq(test_cluster_start(&cl), 0, "the cluster did not start");
    hilock_client *a, *b;
    cluster_client_pair(&cl, &e.loop, &a, &b);
    static const char *names[SEMLOAD_NAMES] = {"cf-0", "cf-1", "cf-2", "cf-3"};
    for (int i = 0; i < SEMLOAD_NAMES; i++) {
        got g = fair_now(a, names[i], NULL), w;
        cr_assert_eq(g.status, 0, "%s: %s (%s)", names[i], hilock_strerror(g.status), hilock_client_errstr(a));
        fair_start(b, names[i], NULL, &w, NULL);
        test_loop_for(e.base, 100);
        char key[256];
        snprintf(key, sizeof(key), "%s", fkey(names[i], ""));
        test_redis *m = test_cluster_master_of(&cl, hilock_key_slot(key, strlen(key)));
        cr_assert_not_null(m);
        cr_expect_eq(test_redis_int(m, "EXISTS %s", key), 1, "%s is not on its slot's master", key);
        cr_expect_eq(test_redis_int(m, "ZCARD %s", fkey(names[i], ":q")), 1);
        cr_expect_eq(release_now(&e, g.hold), 0);
        cr_assert(test_loop_until(e.base, &w.calls, 3000), "%s: no handoff", names[i]);
        cr_expect_eq(w.status, 0);
        cr_expect_eq(release_now(&e, w.hold), 0);
    }
    semres *res = calloc(1, sizeof(*res));
    static semslot s[16];
    volatile int active = 16, done = 0;
    for (int i = 0; i < 16; i++)
        s[i] = (semslot){res, i % 2 ? a : b, e.base, names[i % 4], i % 4, 1, 1, 15, 3, 0, NULL,
                         &active, &done, 1};
    long long t0 = test_now_ms();
    for (int i = 0; i < 16; i++) semslot_go(&s[i]);
    cr_assert(test_loop_until(e.base, &done, 90000), "every slot must end");
    cr_log_info("cluster fair lock: %ld grants in %lld ms", res->grants, test_now_ms() - t0);
    cr_expect_eq(res->errors, 0, "first error %s (%s)", hilock_strerror(res->first_error), hilock_client_errstr(a));
    cr_expect_eq(res->grants, 16 * 15);
    cr_expect_eq(res->over, 0, "two holders of a name at once");
    cr_expect_eq(res->stale, 0);
    cr_expect_eq(semload_duplicates(res), 0);
    free(res);
    hilock_client_free(a);
    hilock_client_free(b);
    test_cluster_stop(&cl);
}

/* The missed grant went to a wait that is not its client's first (the
 * first one's place was lost, as after a stall): the first wait's try,
 * after the resubscription, names the holder, and the client grants that
 * other wait; the first one has joined again and comes next. */
Test(fair, a_missed_grant_to_a_later_wait_is_found_by_the_first) {
    hilock_client *h = lockenv_client(&e);
    side s;
    side_start(&s);
    got gh = fair_now(h, "mm2", NULL), g1, g2;
    fair_start(s.c, "mm2", NULL, &g1, NULL);
    fair_start(s.c, "mm2", NULL, &g2, NULL);
    test_loop_for(s.base, 150);
    cr_assert_eq(queued("mm2"), 2);
    redisReply *first = test_redis_cmd(&e.r, "ZRANGE %s 0 0", fkey("mm2", ":q"));
    cr_assert(first && first->type == REDIS_REPLY_ARRAY && first->elements == 1);
    test_redis_int(&e.r, "ZREM %s %s", fkey("mm2", ":q"), first->element[0]->str);
    freeReplyObject(first);
    cr_assert_gt(test_redis_int(&e.r, "CLIENT KILL TYPE pubsub"), 0);
    cr_assert_eq(release_now(&e, gh.hold), 0); /* to the second wait, unheard */
    cr_assert(test_loop_until(s.base, &g2.calls, 5000), "the missed grant was never found");
    cr_expect_eq(g2.status, 0, "%s", hilock_strerror(g2.status));
    cr_expect_eq(g1.calls, 0, "the first wait got a lock it was not given");
    test_loop_for(s.base, 600);
    cr_expect_eq(hilock_hold_lost(g2.hold), 0);
    cr_expect_gt(test_redis_int(&e.r, "PTTL %s", fkey("mm2", "")), 20000, "never claimed");
    cr_expect_eq(queued("mm2"), 1, "the first wait did not join again");
    rel r = {0, 0};
    hilock_release(g2.hold, rel_cb, &r);
    cr_assert(test_loop_until(s.base, &g1.calls, 3000), "the first wait never got it");
    cr_expect_eq(g1.status, 0);
    memset(&r, 0, sizeof(r));
    hilock_release(g1.hold, rel_cb, &r);
    test_loop_until(s.base, &r.calls, 3000);
    cr_expect_eq(held("mm2"), 0);
    side_stop(&s);
    hilock_client_free(h);
}

/* The queue's keys are lost (a restart without persistence, a failover
 * that lost them) while 10 waits of one client are queued: that client's
 * next try learns it, and every wait joins again, so they are served one
 * handoff after another, not one per second as each becomes the first. */
static void serve_and_release(hilock_hold *h, int status, void *data) {
    got *g = data;
    got_cb(h, status, data);
    if (status == 0) hilock_release(h, NULL, NULL);
    (void)g;
}

Test(fair, waits_whose_places_were_lost_join_again) {
    hilock_client *h = lockenv_client(&e), *c = lockenv_client(&e);
    got gh = fair_now(h, "lost", NULL), g[10];
    memset(g, 0, sizeof(g));
    for (int i = 0; i < 10; i++)
        cr_assert_eq(hilock_fair_acquire(c, "lost", NULL, serve_and_release, &g[i], NULL), 0);
    test_loop_for(e.base, 150);
    cr_assert_eq(queued("lost"), 10);
    test_redis_int(&e.r, "DEL %s %s", fkey("lost", ":q"), fkey("lost", ":p"));
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, gh.hold), 0);
    cr_assert(test_loop_until(e.base, &g[9].calls, 8000), "the last wait never got it");
    long long took = g[9].at_ms - t0;
    cr_log_info("places lost: 10 waits served in %lld ms after the release", took);
    for (int i = 0; i < 10; i++) cr_expect_eq(g[i].status, 0, "wait %d: %s", i, hilock_strerror(g[i].status));
    cr_expect_lt(took, 2500, "served one per second: %lld ms", took);
    test_loop_for(e.base, 100);
    cr_expect_eq(held("lost"), 0);
    cr_expect_eq(queued("lost"), 0);
    hilock_client_free(c);
    hilock_client_free(h);
}

/* A grant by message lives the waiter's lease when that is shorter than
 * the 1 s claim window: a waiter that asked for 300 ms blocks nobody
 * longer if it never claims. */
Test(fair, the_claim_window_is_never_longer_than_the_lease) {
    hilock_client *h = lockenv_client(&e);
    side s;
    side_start(&s);
    hilock_acquire_opts o = wait_opts(HILOCK_WAIT_FOREVER, 300);
    got gh = fair_now(h, "cw", NULL), g;
    fair_start(s.c, "cw", &o, &g, NULL);
    test_loop_for(s.base, 150);
    cr_assert_eq(release_now(&e, gh.hold), 0); /* s's loop is not running */
    long long pttl = test_redis_int(&e.r, "PTTL %s", fkey("cw", ""));
    cr_expect(pttl > 0 && pttl <= 300, "a grant for a 300 ms lease lives %lld ms", pttl);
    cr_assert(test_loop_until(s.base, &g.calls, 3000));
    cr_expect_eq(g.status, 0);
    test_loop_for(s.base, 500);
    cr_expect_eq(hilock_hold_lost(g.hold), 0, "renewals of a 300 ms lease did not keep it");
    rel r = {0, 0};
    hilock_release(g.hold, rel_cb, &r);
    test_loop_until(s.base, &r.calls, 3000);
    cr_expect_eq(r.status, 0);
    side_stop(&s);
    hilock_client_free(h);
}

/* ---- A try held back past its wait's grant ----------------------------------- */

typedef struct release_at_once {
    got g;
    rel r;
} release_at_once;

static void release_at_once_cb(hilock_hold *h, int status, void *data) {
    release_at_once *x = data;
    got_cb(h, status, &x->g);
    if (status == 0) hilock_release(h, rel_cb, &x->r);
}

/* B's first wait W1 is queued behind A's hold, then C's X1, then B's W2.
 * Writes are refused for 1.2 s (min-replicas-to-write with no replica:
 * NOREPLICAS), so B's refresh try for W1 waits in net's retry timer.
 * Writes come back and A releases: W1 is granted by message and released
 * in its callback, before that held-back try runs. The try must find
 * nothing to do: it once joined W1's dead token again at the tail and
 * said "places lost", so W2 moved behind it, and after X1 the lock went
 * to the dead token for its whole claim window (W2 a second late). */
Test(fair, a_try_held_back_past_its_grant_does_not_join_again) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e), *c = lockenv_client(&e);
    got ga = fair_now(a, "held-back", NULL), gx, gw2;
    release_at_once w1;
    memset(&w1, 0, sizeof(w1));
    cr_assert_eq(hilock_fair_acquire(b, "held-back", NULL, release_at_once_cb, &w1, NULL), 0);
    test_loop_for(e.base, 50);
    fair_start(c, "held-back", NULL, &gx, NULL);
    test_loop_for(e.base, 50);
    fair_start(b, "held-back", NULL, &gw2, NULL);
    test_loop_for(e.base, 100);
    cr_assert_eq(queued("held-back"), 3);
    redisReply *rep = test_redis_cmd(&e.r, "CONFIG SET min-replicas-to-write 1");
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    test_loop_for(e.base, 1200); /* B's and C's refresh tries meet NOREPLICAS */
    rep = test_redis_cmd(&e.r, "CONFIG SET min-replicas-to-write 0");
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    cr_assert_eq(release_now(&e, ga.hold), 0);
    cr_assert(test_loop_until(e.base, &w1.r.calls, 3000), "W1 never granted and released");
    cr_expect_eq(w1.g.status, 0);
    cr_assert(test_loop_until(e.base, &gx.calls, 3000), "X1 never granted");
    cr_expect_eq(gx.status, 0);
    test_loop_for(e.base, 300); /* the held-back tries have run */
    cr_expect_eq(queued("held-back"), 1, "the queue holds more than W2");
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, gx.hold), 0);
    cr_assert(test_loop_until(e.base, &gw2.calls, 3000), "W2 never granted");
    cr_expect_eq(gw2.status, 0);
    cr_log_info("held-back try: W2 granted %lld ms after X1's release", gw2.at_ms - t0);
    cr_expect_lt(gw2.at_ms - t0, 500, "W2 waited for a dead grant");
    if (gw2.status == 0) release_now(&e, gw2.hold);
    hilock_client_free(a);
    hilock_client_free(b);
    hilock_client_free(c);
}
