/* Bounded waiting for the mutex and the write lock against a real
 * redis-server: processes
 * that keep asking for one lock are served in turn (none starves, one
 * holder at a time, fences in order), a starving wait is handed the lock
 * ahead of the releaser's own next wait, and the queue survives what the
 * rest survives: a starving process that dies, cancels that race the
 * handoff, a killed subscriber connection, an older client that knows no
 * queue, Redlock (where waits race, as documented), and the threshold's
 * "never". */
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "prim/prim.h"
#include "support/boundedenv.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(bounded, .init = setup, .fini = teardown, .timeout = 90);

#define mkey(name, suffix) prim_key(name, suffix)

static void start(const bounded_kind *k, hilock_client *c, const char *name, got *g, hilock_wait **w) {
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 10000);
    memset(g, 0, sizeof(*g));
    cr_assert_eq(k->acquire(c, name, &o, got_cb, g, w), 0);
}

/* `name` held by c. */
static got take(const bounded_kind *k, hilock_client *c, const char *name) {
    return acquire_loop_with(e.base, k->acquire, c, name, NULL, 5000);
}

/* ---- Processes in turn ------------------------------------------------------ */

#define PROCS 3
#define LOOPS 10
#define HOLD_MS 5
#define RUN_MS 3000

/* What the processes share: the books of one lock. */
typedef struct book {
    atomic_int holders;
    atomic_int overlaps, regressions, errors;
    uint64_t last_fence;        /* read and written by the holder alone */
    atomic_long grants[PROCS];
    atomic_llong max_wait_ms[PROCS];
    atomic_int ready;
    atomic_int readers;         /* read holds of the parent's, beside writers */
} book;

typedef struct loop_ctx {
    struct proc *p;
    long long asked_at;
    hilock_hold *hold;
    struct event *timer;
} loop_ctx;

typedef struct proc {
    const bounded_kind *k;
    book *b;
    int idx;
    hilock_client *c;
    const char *name;
    long long until;
    int busy;                  /* loops with an acquire or hold out */
    loop_ctx loops[LOOPS];
} proc;

static void loop_ask(loop_ctx *l);

static void loop_released(int status, void *data) {
    loop_ctx *l = data;
    if (status != 0) atomic_fetch_add(&l->p->b->errors, 1);
    if (test_now_ms() < l->p->until) loop_ask(l);
    else l->p->busy--;
}

static void loop_hold_over(evutil_socket_t fd, short what, void *data) {
    loop_ctx *l = data;
    (void)fd;
    (void)what;
    atomic_fetch_sub(&l->p->b->holders, 1);
    if (hilock_release(l->hold, loop_released, l) != 0) {
        atomic_fetch_add(&l->p->b->errors, 1);
        l->p->busy--;
    }
}

static void loop_granted(hilock_hold *h, int status, void *data) {
    loop_ctx *l = data;
    book *b = l->p->b;
    if (status != 0) {
        atomic_fetch_add(&b->errors, 1);
        l->p->busy--;
        return;
    }
    if (atomic_fetch_add(&b->holders, 1) >= l->p->k->holders_max || atomic_load(&b->readers) != 0)
        atomic_fetch_add(&b->overlaps, 1);
    uint64_t f = hilock_hold_fence(h);
    if (l->p->k->holders_max == 1) { /* (a semaphore's holders may be told out of order) */
        if (f <= b->last_fence) atomic_fetch_add(&b->regressions, 1);
        b->last_fence = f;
    }
    long long waited = test_now_ms() - l->asked_at;
    if (waited > atomic_load(&b->max_wait_ms[l->p->idx])) atomic_store(&b->max_wait_ms[l->p->idx], waited);
    atomic_fetch_add(&b->grants[l->p->idx], 1);
    l->hold = h;
    struct timeval tv = {0, HOLD_MS * 1000};
    evtimer_add(l->timer, &tv);
}

static void loop_ask(loop_ctx *l) {
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 5000);
    l->asked_at = test_now_ms();
    if (l->p->k->acquire(l->p->c, l->p->name, &o, loop_granted, l, NULL) != 0) {
        atomic_fetch_add(&l->p->b->errors, 1);
        l->p->busy--;
    }
}

/* One process: LOOPS loops that acquire `name`, hold it HOLD_MS, release
 * and ask again, for RUN_MS from when every process is ready. */
static void proc_run(const bounded_kind *k, book *b, int idx, const char *name, uint32_t starve_ms) {
    lockenv ce = lockenv_child(&e);
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.starve_ms = starve_ms;
    proc p = {.k = k, .b = b, .idx = idx, .name = name, .busy = LOOPS};
    p.c = lockenv_client_cfg(&ce, &cfg);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    atomic_fetch_add(&b->ready, 1);
    while (atomic_load(&b->ready) < PROCS) test_msleep(1);
    p.until = test_now_ms() + RUN_MS;
    for (int i = 0; i < LOOPS; i++) {
        p.loops[i].p = &p;
        p.loops[i].timer = evtimer_new(ce.base, loop_hold_over, &p.loops[i]);
        loop_ask(&p.loops[i]);
    }
    long long give_up = p.until + 5000;
    while (p.busy > 0 && test_now_ms() < give_up) event_base_loop(ce.base, EVLOOP_ONCE);
    if (p.busy > 0) atomic_fetch_add(&b->errors, 1);
    for (int i = 0; i < LOOPS; i++) event_free(p.loops[i].timer);
    hilock_client_free(p.c);
    event_base_free(ce.base);
    _exit(0);
}

/* PROCS processes running proc_run, their pids into kids. */
static book *start_procs(const bounded_kind *k, const char *name, uint32_t starve_ms, pid_t *kids) {
    book *b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(b, MAP_FAILED);
    memset(b, 0, sizeof(*b));
    for (int i = 0; i < PROCS; i++) {
        fflush(NULL);
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0) proc_run(k, b, i, name, starve_ms);
    }
    return b;
}

static book *run_procs(const bounded_kind *k, const char *name, uint32_t starve_ms) {
    pid_t kids[PROCS];
    book *b = start_procs(k, name, starve_ms, kids);
    for (int i = 0; i < PROCS; i++) cr_assert_eq(waitpid(kids[i], NULL, 0), kids[i]);
    return b;
}

/* Three processes of ten loops each on one name: every process gets a
 * share of the grants within 25 % of a third, no wait lasts longer than a few turns
 * of every loop (racing, one process kept the lock for seconds while the
 * others starved), one holder at a time, fences in order. */
static void no_process_starves(const bounded_kind *k) {
    book *b = run_procs(k, "turns", 0);
    long total = 0;
    long long worst = 0;
    for (int i = 0; i < PROCS; i++) {
        total += b->grants[i];
        if (b->max_wait_ms[i] > worst) worst = b->max_wait_ms[i];
    }
    cr_log_info("bounded (%s): grants %ld / %ld / %ld, max waits %lld / %lld / %lld ms", k->what, b->grants[0],
                b->grants[1], b->grants[2], b->max_wait_ms[0], b->max_wait_ms[1], b->max_wait_ms[2]);
    cr_expect_eq(b->errors, 0);
    cr_expect_eq(b->overlaps, 0, "more holders at once than allowed");
    cr_expect_eq(b->regressions, 0, "fencing tokens must strictly increase");
    cr_assert_gt(total, 3 * PROCS * LOOPS, "too few grants: %ld", total);
    for (int i = 0; i < PROCS; i++) /* within 25 % of a third */
        cr_expect(b->grants[i] * PROCS * 4 >= total * 3 && b->grants[i] * PROCS * 4 <= total * 5,
                  "process %d had %ld of %ld grants", i, b->grants[i], total);
    /* The longest wait: within a few turns of every loop of every process,
     * at the rate this run served them (a process left out of the queue
     * for a second, its next wait never placed, fails this). */
    long long turn_ms = (long long)PROCS * LOOPS * RUN_MS / (total > 0 ? total : 1);
    cr_expect_lt(worst, turn_ms * 5 / 2, "a wait of %lld ms, a turn of every loop %lld ms", worst, turn_ms);
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", prim_key("turns", k->lock)), 0, "a lock left behind");
    munmap(b, sizeof(*b));
}

Test(bounded, no_process_starves) { no_process_starves(&bounded_mutex); }

Test(bounded, no_writer_process_starves) { no_process_starves(&bounded_write); }

Test(bounded, no_semaphore_process_starves) { no_process_starves(&bounded_sem); }

/* ---- The handoff to a starving wait --------------------------------------- */

/* a holds `name`; b's wait *gb starves and takes its place in the queue. */
static got held_with_a_starving_wait(const bounded_kind *k, hilock_client *a, hilock_client *b, const char *name,
                                     got *gb) {
    got ga = take(k, a, name);
    cr_assert_eq(ga.status, 0);
    start(k, b, name, gb, NULL);
    test_loop_for(e.base, 300);
    cr_assert_eq(gb->calls, 0);
    cr_assert_eq(test_redis_int(&e.r, "ZCARD %s", mkey(name, k->queue)), 1, "the starving wait has no place");
    return ga;
}

/* Client a holds; client b's wait starves (50 ms) and takes a place in the
 * queue; a releases and asks again at once, as a releasing process's next
 * wait does: b gets the lock first, by the release's message. */
static void comes_before_the_releasers_next(const bounded_kind *k) {
    hilock_client *a = lockenv_client_starving(&e, 50), *b = lockenv_client_starving(&e, 50);
    got gb, ga2, ga = held_with_a_starving_wait(k, a, b, "sw", &gb);
    cr_expect(bounded_marked(&e.r, k, "sw"), "the lock is not marked");
    long long t0 = test_now_ms();
    rel r = {0, 0};
    uint64_t fa = hilock_hold_fence(ga.hold), fb = 0; /* (a hold is freed by its release) */
    cr_assert_eq(hilock_release(ga.hold, rel_cb, &r), 0);
    start(k, a, "sw", &ga2, NULL);
    cr_assert(test_loop_until(e.base, &gb.calls, 3000), "the starving wait was never served");
    cr_expect_eq(gb.status, 0, "%s", hilock_strerror(gb.status));
    cr_expect_eq(ga2.calls, 0, "the releaser's next wait came first");
    cr_log_info("handoff to a starving wait: %lld ms", gb.at_ms - t0);
    cr_expect_lt(gb.at_ms - t0, 500);
    fb = hilock_hold_fence(gb.hold);
    cr_expect_gt(fb, fa);
    test_loop_for(e.base, 500); /* past the claim (a third of the 1 s window) */
    cr_expect_gt(test_redis_int(&e.r, "PTTL %s", mkey("sw", k->lock)), 5000, "the grant was not claimed");
    cr_assert_eq(release_now(&e, gb.hold), 0);
    cr_assert(test_loop_until(e.base, &ga2.calls, 3000));
    cr_expect_eq(ga2.status, 0);
    cr_expect_gt(hilock_hold_fence(ga2.hold), fb);
    cr_assert_eq(release_now(&e, ga2.hold), 0);
    test_loop_for(e.base, 50);
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", mkey("sw", k->lock)), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(bounded, a_starving_wait_comes_before_the_releasers_next) { comes_before_the_releasers_next(&bounded_mutex); }

Test(bounded, a_starving_writer_comes_before_the_releasers_next) { comes_before_the_releasers_next(&bounded_write); }

/* Client b's first wait starves and takes its place; its second wait is
 * asked just before the release hands the first the lock by message: the
 * second takes its place when it starves in its turn, not at the first's
 * refresh timer up to a second later (while the process has no place, the
 * others are served ahead of it). */
static void the_next_wait_takes_its_place_when_it_starves(const bounded_kind *k) {
    hilock_client *a = lockenv_client_starving(&e, 100), *b = lockenv_client_starving(&e, 100);
    got g1, g2, ga = held_with_a_starving_wait(k, a, b, "nx", &g1);
    start(k, b, "nx", &g2, NULL);
    test_loop_for(e.base, 10);
    cr_assert_eq(release_now(&e, ga.hold), 0);
    cr_assert(test_loop_until(e.base, &g1.calls, 1000));
    cr_assert_eq(g1.status, 0);
    test_loop_for(e.base, 250); /* the second starves 100 ms after it was asked */
    cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", mkey("nx", k->queue)), 1,
                 "the second wait took no place when it starved");
    cr_assert_eq(release_now(&e, g1.hold), 0);
    cr_assert(test_loop_until(e.base, &g2.calls, 3000));
    cr_expect_eq(g2.status, 0);
    if (g2.status == 0) release_now(&e, g2.hold);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(bounded, the_next_wait_takes_its_place_when_it_starves) { the_next_wait_takes_its_place_when_it_starves(&bounded_mutex); }

Test(bounded, the_next_writer_takes_its_place_when_it_starves) { the_next_wait_takes_its_place_when_it_starves(&bounded_write); }

/* starve_ms HILOCK_STARVE_NEVER: waits race, and nothing joins a queue. */
Test(bounded, never_means_racing) {
    hilock_client *a = lockenv_client_starving(&e, HILOCK_STARVE_NEVER);
    hilock_client *b = lockenv_client_starving(&e, HILOCK_STARVE_NEVER);
    got ga = acquire_now(&e, a, "nv", NULL), gb;
    cr_assert_eq(ga.status, 0);
    start(&bounded_mutex, b, "nv", &gb, NULL);
    test_loop_for(e.base, 400);
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", mkey("nv", ":q")), 0, "a queue without starving");
    cr_assert_eq(release_now(&e, ga.hold), 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 3000));
    cr_expect_eq(gb.status, 0);
    cr_assert_eq(release_now(&e, gb.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- What it survives --------------------------------------------------------- */

typedef struct kid_flags {
    atomic_int placed;
} kid_flags;

/* A child whose wait on `name` starves (20 ms) and takes its place, then
 * stays until killed. */
static pid_t starving_child(const bounded_kind *bk, kid_flags *k, const char *name) {
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid != 0) return kid;
    lockenv ce = lockenv_child(&e);
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.starve_ms = 20;
    hilock_client *c = lockenv_client_cfg(&ce, &cfg);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    got g;
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 10000);
    bk->acquire(c, name, &o, got_cb, &g, NULL);
    test_loop_for(ce.base, 300);
    atomic_store(&k->placed, 1);
    test_loop_for(ce.base, 30000);
    _exit(2);
}

/* The starving process at the head of the queue is killed: the release
 * grants it, the grant lapses after the 1 s claim window, and the next
 * starving wait (a live one, behind it) gets the lock then; the dead
 * process's later entries, if any, count for nothing. */
static void dead_starving_process_lapses(const bounded_kind *bk) {
    kid_flags *k = mmap(NULL, sizeof(*k), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(k, 0, sizeof(*k));
    hilock_client *h = lockenv_client_starving(&e, 20), *c = lockenv_client_starving(&e, 20);
    got gh = take(bk, h, "dead"), g;
    cr_assert_eq(gh.status, 0);
    pid_t kid = starving_child(bk, k, "dead");
    long long until = test_now_ms() + 5000;
    while (!atomic_load(&k->placed) && test_now_ms() < until) test_msleep(5);
    start(bk, c, "dead", &g, NULL);
    test_loop_for(e.base, 300);
    cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", mkey("dead", bk->queue)), 2);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, gh.hold), 0);
    cr_assert(test_loop_until(e.base, &g.calls, 5000), "never granted");
    cr_expect_eq(g.status, 0, "%s", hilock_strerror(g.status));
    long long took = g.at_ms - t0;
    cr_log_info("grant to a dead starving process (%s): next granted %lld ms after the release", bk->what, took);
    cr_expect(took >= 900 && took < 2600, "granted %lld ms after the release", took);
    if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(h);
    hilock_client_free(c);
    munmap(k, sizeof(*k));
}

Test(bounded, a_dead_starving_process_lapses_after_the_claim_window) { dead_starving_process_lapses(&bounded_mutex); }

Test(bounded, a_dead_starving_writer_lapses_after_the_claim_window) { dead_starving_process_lapses(&bounded_write); }

/* A starving wait cancelled as the release hands it the lock (at every
 * offset around the release): the lock is never left to the cancelled
 * wait's token for its claim window; the next starving wait has it within
 * a few round trips, and nothing stays behind. */
static void cancels_racing_the_handoff(const bounded_kind *k) {
    hilock_client *h = lockenv_client_starving(&e, 20), *a = lockenv_client_starving(&e, 20), *b = lockenv_client_starving(&e, 20);
    for (int i = 0; i < 12; i++) {
        char name[32];
        snprintf(name, sizeof(name), "cr%d", i);
        got gh = take(k, h, name), ga, gb;
        cr_assert_eq(gh.status, 0);
        hilock_wait *wa = NULL;
        start(k, a, name, &ga, &wa);
        test_loop_for(e.base, 100);
        start(k, b, name, &gb, NULL);
        test_loop_for(e.base, 100);
        cr_assert_eq(test_redis_int(&e.r, "ZCARD %s", mkey(name, k->queue)), 2, "round %d", i);
        rel r = {0, 0};
        cr_assert_eq(hilock_release(gh.hold, rel_cb, &r), 0);
        test_loop_for(e.base, i / 2); /* 0..5 ms: before, at and after the grant's message */
        int cancelled = ga.calls == 0 && hilock_wait_cancel(wa) == 0; /* wa lives until its callback */
        long long t0 = test_now_ms();
        if (!cancelled) { /* a was granted first: it hands the lock on */
            cr_assert(test_loop_until(e.base, &ga.calls, 3000), "round %d: a never told", i);
            cr_assert_eq(ga.status, 0, "round %d: %s", i, hilock_strerror(ga.status));
            cr_expect_eq(gb.calls, 0, "round %d: b served while a held the lock", i);
            cr_expect_eq(release_now(&e, ga.hold), 0);
        }
        cr_assert(test_loop_until(e.base, &gb.calls, 3000), "round %d: b never granted", i);
        cr_expect_eq(gb.status, 0);
        if (cancelled) cr_expect_lt(gb.at_ms - t0, 800, "round %d: b waited %lld ms", i, gb.at_ms - t0);
        cr_log_info("round %d: a %s", i, cancelled ? "cancelled" : "served first");
        test_loop_until(e.base, &ga.calls, 1000);
        cr_expect_eq(release_now(&e, gb.hold), 0);
        test_loop_for(e.base, 30);
        cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", mkey(name, k->lock)), 0, "round %d: a lock left behind", i);
        cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", mkey(name, k->queue)), 0, "round %d: a place left", i);
    }
    hilock_client_free(h);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(bounded, cancels_racing_the_handoff_pass_the_lock_on) { cancels_racing_the_handoff(&bounded_mutex); }

Test(bounded, cancels_racing_the_writers_handoff_pass_the_lock_on) { cancels_racing_the_handoff(&bounded_write); }

/* The starving client's subscriber connection is killed just before the
 * release: the grant's message is lost, and its wait finds the grant with
 * its next try (within the 1 s refresh of a place), not at the lease. */
static void lost_grant_message(const bounded_kind *k) {
    hilock_client *h = lockenv_client_starving(&e, 20), *b = lockenv_client_starving(&e, 20);
    got gh = take(k, h, "lost-msg"), gb;
    cr_assert_eq(gh.status, 0);
    start(k, b, "lost-msg", &gb, NULL);
    test_loop_for(e.base, 200);
    cr_assert_eq(test_redis_int(&e.r, "ZCARD %s", mkey("lost-msg", k->queue)), 1);
    cr_assert_geq(test_redis_int(&e.r, "CLIENT KILL TYPE pubsub"), 1);
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, gh.hold), 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 5000), "never granted");
    cr_expect_eq(gb.status, 0, "%s", hilock_strerror(gb.status));
    cr_log_info("lost grant message: granted %lld ms after the release", gb.at_ms - t0);
    cr_expect_lt(gb.at_ms - t0, 2000);
    if (gb.status == 0) cr_expect_eq(release_now(&e, gb.hold), 0);
    hilock_client_free(h);
    hilock_client_free(b);
}

Test(bounded, a_grant_whose_message_was_lost_is_found) { lost_grant_message(&bounded_mutex); }

Test(bounded, a_writers_grant_whose_message_was_lost_is_found) { lost_grant_message(&bounded_write); }

/* An older client, which knows no queue (the acquire script alone, and a
 * release on the lock's key alone), holds while ours starves: its release
 * frees the lock and says so, and our starving wait takes it at once. */
Test(bounded, an_older_clients_release_serves_a_starving_wait) {
    redisContext *k = test_redis_connect(&e.r);
    const char *lock = mkey("old", ""), *fence = mkey("old", ":fence");
    char ch[HILOCK_NAME_MAX * 3 + 64];
    snprintf(ch, sizeof(ch), "%s:ch", lock);
    redisReply *rep = redisCommand(k, "EVAL %s 2 %s %s oldtoken000000000000000000000000 30000 604800",
                                   hl_script_mutex_acquire.body, lock, fence);
    cr_assert(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer > 1, "the acquire's answer is its fence");
    freeReplyObject(rep);
    hilock_client *b = lockenv_client_starving(&e, 20);
    got gb;
    start(&bounded_mutex, b, "old", &gb, NULL);
    test_loop_for(e.base, 200);
    cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", mkey("old", ":q")), 1);
    long long t0 = test_now_ms();
    /* (The release of a lock that starts nothing, as an older client's:
     * mutex_release.lua's 'd'.) */
    rep = redisCommand(k, "EVAL %s 1 %s oldtoken000000000000000000000000 %s d PUBLISH",
                       hl_script_mutex_release.body, lock, ch);
    cr_assert(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1);
    freeReplyObject(rep);
    cr_assert(test_loop_until(e.base, &gb.calls, 3000), "never granted");
    cr_expect_eq(gb.status, 0);
    cr_expect_lt(gb.at_ms - t0, 500);
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", mkey("old", ":q")), 0, "the place stayed");
    if (gb.status == 0) cr_expect_eq(release_now(&e, gb.hold), 0);
    redisFree(k);
    hilock_client_free(b);
}

/* A starving wait that runs out (and one cancelled) leaves its place: the
 * holder's release then frees the lock (nobody is handed it), and a try
 * once right after the release takes it. */
static void a_wait_that_ends_leaves_its_place(const bounded_kind *k) {
    hilock_client *h = lockenv_client_starving(&e, 50), *c = lockenv_client_starving(&e, 50);
    for (int cancel = 0; cancel < 2; cancel++) {
        const char *name = cancel ? "ends-c" : "ends-t";
        got gh = take(k, h, name), g;
        cr_assert_eq(gh.status, 0);
        hilock_acquire_opts o = opts_wait_lease(cancel ? HILOCK_WAIT_FOREVER : 200, 10000);
        hilock_wait *w = NULL;
        memset(&g, 0, sizeof(g));
        cr_assert_eq(k->acquire(c, name, &o, got_cb, &g, &w), 0);
        test_loop_for(e.base, 150);
        cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", mkey(name, k->queue)), 1, "%s: no place", name);
        if (cancel) cr_assert_eq(hilock_wait_cancel(w), 0);
        cr_assert(test_loop_until(e.base, &g.calls, 2000));
        cr_expect_eq(g.status, cancel ? HILOCK_ECANCELED : HILOCK_ETIMEDOUT);
        test_loop_for(e.base, 50);
        cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", mkey(name, k->queue)), 0, "%s: its place stayed", name);
        cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", mkey(name, k->procs)), 0, "%s: its client stayed", name);
        /* Nobody starves: the lock's mark went with the last place, and the
         * release is one script, which frees the lock at once (a release
         * that asked for a handover freed it a round trip later, and a try
         * sent as soon as the holder's work was done found it held). */
        /* (The write lock's leave does not name the lock, so that it runs
         * while the slot migrates: its mark stays, and costs the release
         * one handover that finds nobody.) */
        if (k->marker == NULL) cr_expect(!bounded_marked(&e.r, k, name), "%s: the lock is still marked", name);
        long long scripts = script_calls_of(&e.r);
        cr_assert_eq(release_now(&e, gh.hold), 0);
        if (k->marker == NULL)
            cr_expect_eq(script_calls_of(&e.r) - scripts, 1, "%s: the release took %lld scripts", name,
                         script_calls_of(&e.r) - scripts);
        cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", mkey(name, k->lock)), 0,
                     "%s: the release handed the lock to a wait that ended", name);
        hilock_acquire_opts once = opts_wait(0);
        got go = acquire_loop_with(e.base, k->acquire, c, name, &once, 2000);
        cr_expect_eq(go.status, 0, "%s: %s", name, hilock_strerror(go.status));
        if (go.status == 0) release_now(&e, go.hold);
    }
    hilock_client_free(h);
    hilock_client_free(c);
}

Test(bounded, a_wait_that_ends_leaves_its_place) { a_wait_that_ends_leaves_its_place(&bounded_mutex); }

Test(bounded, a_writer_that_ends_leaves_its_place) { a_wait_that_ends_leaves_its_place(&bounded_write); }

/* ---- The write lock's readers ------------------------------------------------ */

static got take_read(hilock_client *c, const char *name) {
    return acquire_loop_with(e.base, hilock_read_acquire, c, name, NULL, 5000);
}

static void start_read(hilock_client *c, const char *name, got *g, hilock_wait **w) {
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 10000);
    memset(g, 0, sizeof(*g));
    cr_assert_eq(hilock_read_acquire(c, name, &o, got_cb, g, w), 0);
}

/* Is the "writer waiting" marker of `name` the queue's ('q')? */
static int queue_marker(const char *name) {
    redisReply *m = test_redis_cmd(&e.r, "GET %s", mkey(name, ":rww"));
    int q = m && m->type == REDIS_REPLY_STRING && strcmp(m->str, "q") == 0;
    if (m) freeReplyObject(m);
    return q;
}

/* A reader holds; a writer starves waiting for it and takes a place, the
 * marker says so, and a new reader and a writer that never starves (an
 * older client's wait, say) both stay out. The reader leaves: the
 * starving writer goes first, then the others. */
Test(bounded, a_starving_writer_waits_for_the_readers_in_and_goes_first) {
    hilock_client *r = lockenv_client_starving(&e, 50), *w = lockenv_client_starving(&e, 50);
    hilock_client *racer = lockenv_client_starving(&e, HILOCK_STARVE_NEVER);
    got gr = take_read(r, "rdw"), gw, gr2, gx;
    cr_assert_eq(gr.status, 0);
    start(&bounded_write, w, "rdw", &gw, NULL);
    test_loop_for(e.base, 300);
    cr_assert_eq(gw.calls, 0, "a writer went in beside a reader");
    cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", mkey("rdw", ":rwq")), 1, "the starving writer has no place");
    cr_expect(queue_marker("rdw"), "the marker is not the queue's");
    start_read(r, "rdw", &gr2, NULL);
    start(&bounded_write, racer, "rdw", &gx, NULL);
    test_loop_for(e.base, 200);
    cr_expect_eq(gr2.calls, 0, "a reader came in past a starving writer");
    cr_expect_eq(gx.calls, 0, "a writer went in beside a reader");
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, gr.hold), 0);
    cr_assert(test_loop_until(e.base, &gw.calls, 3000), "the starving writer was never served");
    cr_expect_eq(gw.status, 0, "%s", hilock_strerror(gw.status));
    cr_expect_eq(gx.calls, 0, "the writer that never starved came first");
    cr_expect_eq(gr2.calls, 0, "a reader came in beside the writer");
    cr_log_info("a starving writer behind a reader: served %lld ms after its release", gw.at_ms - t0);
    cr_expect_lt(gw.at_ms - t0, 500);
    if (gw.status == 0) cr_assert_eq(release_now(&e, gw.hold), 0);
    int both = test_loop_until(e.base, &gr2.calls, 3000);
    if (gx.calls == 0 && gr2.calls == 1 && gr2.status == 0) release_now(&e, gr2.hold);
    cr_assert(test_loop_until(e.base, &gx.calls, 3000), "the other writer was never served");
    cr_expect(both, "the reader was never served");
    if (gx.status == 0) release_now(&e, gx.hold);
    if (gr2.calls == 1 && gr2.status == 0 && gx.calls == 1 && gx.status != 0) release_now(&e, gr2.hold);
    test_loop_for(e.base, 50);
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s %s %s", mkey("rdw", ":rw"), mkey("rdw", ":rwr"), mkey("rdw", ":rww")),
                 0, "a hold or a marker left behind");
    hilock_client_free(r);
    hilock_client_free(w);
    hilock_client_free(racer);
}

/* A starving writer that gives up, while only readers hold, takes its
 * place and the queue's marker away and says so: a reader it held off
 * comes in at once, not when the marker would have run out. */
Test(bounded, a_starving_writer_that_gives_up_lets_the_readers_in) {
    hilock_client *r = lockenv_client_starving(&e, 50), *w = lockenv_client_starving(&e, 20), *r2 = lockenv_client_starving(&e, 50);
    got gr = take_read(r, "gup"), gw, gr2;
    cr_assert_eq(gr.status, 0);
    hilock_wait *ww = NULL;
    start(&bounded_write, w, "gup", &gw, &ww);
    test_loop_for(e.base, 200);
    cr_assert(queue_marker("gup"), "the starving writer did not mark the lock");
    start_read(r2, "gup", &gr2, NULL);
    test_loop_for(e.base, 200);
    cr_assert_eq(gr2.calls, 0, "a reader came in past a starving writer");
    long long t0 = test_now_ms();
    cr_assert_eq(hilock_wait_cancel(ww), 0);
    cr_assert(test_loop_until(e.base, &gr2.calls, 3000), "the reader was never let in");
    cr_expect_eq(gr2.status, 0);
    cr_log_info("a reader held off by a writer that gave up: in %lld ms after", gr2.at_ms - t0);
    cr_expect_lt(gr2.at_ms - t0, 500, "the reader waited for the marker to run out");
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s %s", mkey("gup", ":rwq"), mkey("gup", ":rww")), 0,
                 "a place or the marker stayed");
    if (gr2.status == 0) release_now(&e, gr2.hold);
    cr_assert_eq(release_now(&e, gr.hold), 0);
    hilock_client_free(r);
    hilock_client_free(w);
    hilock_client_free(r2);
}

/* A client whose write release was just answered "hand it over" (it sends
 * the handover at once for a while after) releases a read hold of the
 * same name, which it waited for meanwhile: the reader leaves, as any
 * reader's release. */
Test(bounded, a_read_release_after_a_handover_frees_the_reader) {
    hilock_client *a = lockenv_client_starving(&e, 20), *b = lockenv_client_starving(&e, 20);
    got ga = take(&bounded_write, a, "hr"), gb, gr;
    cr_assert_eq(ga.status, 0);
    start(&bounded_write, b, "hr", &gb, NULL);
    test_loop_for(e.base, 200);
    start_read(a, "hr", &gr, NULL); /* keeps a's name, and what it remembers */
    test_loop_for(e.base, 100);
    cr_assert(bounded_marked(&e.r, &bounded_write, "hr"), "the starving writer did not mark the lock");
    cr_assert_eq(release_now(&e, ga.hold), 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 3000));
    cr_assert_eq(gb.status, 0);
    cr_assert_eq(release_now(&e, gb.hold), 0);
    cr_assert(test_loop_until(e.base, &gr.calls, 3000), "the reader was never let in");
    cr_assert_eq(gr.status, 0, "%s", hilock_strerror(gr.status));
    cr_expect_eq(release_now(&e, gr.hold), 0);
    cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", mkey("hr", ":rwr")), 0, "the reader stayed after its release");
    hilock_client_free(a);
    hilock_client_free(b);
}

/* Three processes keep writing (ten loops each, writers starving and
 * served in turn) while this one reads, one read after another: each read
 * waits for the writers queued before it, not for the stream of writers
 * to stop (the writer-waiting marker alone held readers off for as long
 * as any writer waited, which here is the whole run). */
Test(bounded, a_reader_waits_for_the_writers_before_it_not_for_all) {
    pid_t kids[PROCS];
    book *b = start_procs(&bounded_write, "wstream", 0, kids);
    hilock_client *r = lockenv_client_starving(&e, 100);
    while (atomic_load(&b->ready) < PROCS) test_msleep(1);
    test_loop_for(e.base, 400); /* the writers starve and queue */
    long long worst = 0, reads = 0, t_end = test_now_ms() + RUN_MS - 1000;
    while (test_now_ms() < t_end) {
        got g;
        hilock_acquire_opts o = opts_wait_lease(3000, 5000);
        long long t0 = test_now_ms();
        g = acquire_loop_with(e.base, hilock_read_acquire, r, "wstream", &o, 4000);
        cr_assert_eq(g.status, 0, "read %lld: %s", reads, hilock_strerror(g.status));
        if (g.at_ms - t0 > worst) worst = g.at_ms - t0;
        reads++;
        atomic_fetch_add(&b->readers, 1);
        if (atomic_load(&b->holders) != 0) atomic_fetch_add(&b->overlaps, 1);
        test_loop_for(e.base, HOLD_MS);
        if (atomic_load(&b->holders) != 0) atomic_fetch_add(&b->overlaps, 1);
        atomic_fetch_sub(&b->readers, 1);
        cr_assert_eq(release_now(&e, g.hold), 0);
    }
    for (int i = 0; i < PROCS; i++) cr_assert_eq(waitpid(kids[i], NULL, 0), kids[i]);
    long total = b->grants[0] + b->grants[1] + b->grants[2];
    cr_log_info("a reader among writers: %lld reads, the longest wait %lld ms; %ld write grants", reads, worst, total);
    cr_expect_eq(b->errors, 0);
    cr_expect_eq(b->overlaps, 0, "a reader and a writer held at once");
    cr_expect_gt(total, 3 * PROCS * LOOPS, "the writers were not served meanwhile: %ld grants", total);
    cr_expect_lt(worst, 1000, "a read waited %lld ms", worst);
    hilock_client_free(r);
    munmap(b, sizeof(*b));
}

/* A semaphore's wait that starves takes a place and marks the semaphore
 * (the tries of waits that have not starved are refused); cancelled, it
 * leaves its place and the mark, and a try once gets the permit freed
 * next. */
Test(bounded, a_starving_semaphore_wait_leaves_its_place) {
    hilock_client *x = lockenv_client_starving(&e, 50), *c = lockenv_client_starving(&e, 50);
    got g1 = take(&bounded_sem, x, "sq"), g2 = take(&bounded_sem, x, "sq"), gc;
    cr_assert(g1.status == 0 && g2.status == 0);
    hilock_wait *w = NULL;
    start(&bounded_sem, c, "sq", &gc, &w);
    test_loop_for(e.base, 200);
    cr_assert_eq(gc.calls, 0);
    cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", mkey("sq", ":sem:q")), 1, "the starving wait has no place");
    cr_expect_eq(test_redis_int(&e.r, "HEXISTS %s q", mkey("sq", ":sem:h")), 1, "the semaphore is not marked");
    cr_assert_eq(hilock_wait_cancel(w), 0);
    cr_assert(test_loop_until(e.base, &gc.calls, 1000));
    cr_expect_eq(gc.status, HILOCK_ECANCELED);
    test_loop_for(e.base, 50);
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s %s", mkey("sq", ":sem:q"), mkey("sq", ":sem:p")), 0,
                 "its place or its client stayed");
    cr_expect_eq(test_redis_int(&e.r, "HEXISTS %s q", mkey("sq", ":sem:h")), 0, "the mark stayed");
    cr_assert_eq(release_now(&e, g1.hold), 0);
    hilock_acquire_opts once = opts_wait(0);
    got go = acquire_loop_with(e.base, bounded_sem_acquire, c, "sq", &once, 2000);
    cr_expect_eq(go.status, 0, "%s", hilock_strerror(go.status));
    if (go.status == 0) release_now(&e, go.hold);
    cr_assert_eq(release_now(&e, g2.hold), 0);
    test_loop_for(e.base, 50);
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s %s", mkey("sq", ":sem"), mkey("sq", ":sem:h")), 0, "keys left behind");
    hilock_client_free(x);
    hilock_client_free(c);
}
