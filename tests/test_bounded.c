/* Bounded waiting for the mutex against a real redis-server: processes
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
#include "support/lockenv.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(bounded, .init = setup, .fini = teardown, .timeout = 90);

#define mkey(name, suffix) prim_key(name, suffix)

static hilock_client *client_starving_after(uint32_t starve_ms) {
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.starve_ms = starve_ms;
    return lockenv_client_cfg(&e, &cfg);
}

static void start(hilock_client *c, const char *name, got *g, hilock_wait **w) {
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, 10000);
    memset(g, 0, sizeof(*g));
    cr_assert_eq(hilock_acquire(c, name, &o, got_cb, g, w), 0);
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
} book;

typedef struct loop_ctx {
    struct proc *p;
    long long asked_at;
    hilock_hold *hold;
    struct event *timer;
} loop_ctx;

typedef struct proc {
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
    if (atomic_fetch_add(&b->holders, 1) != 0) atomic_fetch_add(&b->overlaps, 1);
    uint64_t f = hilock_hold_fence(h);
    if (f <= b->last_fence) atomic_fetch_add(&b->regressions, 1);
    b->last_fence = f;
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
    if (hilock_acquire(l->p->c, l->p->name, &o, loop_granted, l, NULL) != 0) {
        atomic_fetch_add(&l->p->b->errors, 1);
        l->p->busy--;
    }
}

/* One process: LOOPS loops that acquire `name`, hold it HOLD_MS, release
 * and ask again, for RUN_MS from when every process is ready. */
static void proc_run(book *b, int idx, const char *name, uint32_t starve_ms) {
    lockenv ce = lockenv_child(&e);
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.starve_ms = starve_ms;
    proc p = {.b = b, .idx = idx, .name = name, .busy = LOOPS};
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

static book *run_procs(const char *name, uint32_t starve_ms) {
    book *b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(b, MAP_FAILED);
    memset(b, 0, sizeof(*b));
    pid_t kids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        fflush(NULL);
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0) proc_run(b, i, name, starve_ms);
    }
    for (int i = 0; i < PROCS; i++) cr_assert_eq(waitpid(kids[i], NULL, 0), kids[i]);
    return b;
}

/* Three processes of ten loops each on one name: every process gets a
 * share of the grants near a third, no wait lasts anywhere near the run
 * (racing, one process kept the lock for seconds while the others
 * starved), one holder at a time, fences in order. */
Test(bounded, no_process_starves) {
    book *b = run_procs("turns", 0);
    long total = 0;
    long long worst = 0;
    for (int i = 0; i < PROCS; i++) {
        total += b->grants[i];
        if (b->max_wait_ms[i] > worst) worst = b->max_wait_ms[i];
    }
    cr_log_info("bounded: grants %ld / %ld / %ld, max waits %lld / %lld / %lld ms", b->grants[0],
                b->grants[1], b->grants[2], b->max_wait_ms[0], b->max_wait_ms[1], b->max_wait_ms[2]);
    cr_expect_eq(b->errors, 0);
    cr_expect_eq(b->overlaps, 0, "two holders at once");
    cr_expect_eq(b->regressions, 0, "fencing tokens must strictly increase");
    cr_assert_gt(total, 3 * PROCS * LOOPS, "too few grants: %ld", total);
    for (int i = 0; i < PROCS; i++)
        cr_expect(b->grants[i] * PROCS * 2 >= total && b->grants[i] * PROCS <= total * 2,
                  "process %d had %ld of %ld grants", i, b->grants[i], total);
    cr_expect_lt(worst, RUN_MS / 2, "a wait of %lld ms", worst);
    cr_expect_eq(lock_exists(&e.r, "turns"), 0, "a lock left behind");
    munmap(b, sizeof(*b));
}

/* ---- The handoff to a starving wait --------------------------------------- */

/* Client a holds; client b's wait starves (50 ms) and takes a place in the
 * queue; a releases and asks again at once, as a releasing process's next
 * wait does: b gets the lock first, by the release's message. */
Test(bounded, a_starving_wait_comes_before_the_releasers_next) {
    hilock_client *a = client_starving_after(50), *b = client_starving_after(50);
    got ga = acquire_now(&e, a, "sw", NULL), gb, ga2;
    cr_assert_eq(ga.status, 0);
    start(b, "sw", &gb, NULL);
    test_loop_for(e.base, 300);
    cr_assert_eq(gb.calls, 0);
    cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", mkey("sw", ":q")), 1, "the starving wait has no place");
    redisReply *q = test_redis_cmd(&e.r, "HGET %s q", mkey("sw", ""));
    cr_expect(q && q->type == REDIS_REPLY_STRING && strcmp(q->str, "1") == 0, "the lock is not marked");
    if (q) freeReplyObject(q);
    long long t0 = test_now_ms();
    rel r = {0, 0};
    uint64_t fa = hilock_hold_fence(ga.hold), fb = 0; /* (a hold is freed by its release) */
    cr_assert_eq(hilock_release(ga.hold, rel_cb, &r), 0);
    start(a, "sw", &ga2, NULL);
    cr_assert(test_loop_until(e.base, &gb.calls, 3000), "the starving wait was never served");
    cr_expect_eq(gb.status, 0, "%s", hilock_strerror(gb.status));
    cr_expect_eq(ga2.calls, 0, "the releaser's next wait came first");
    cr_log_info("handoff to a starving wait: %lld ms", gb.at_ms - t0);
    cr_expect_lt(gb.at_ms - t0, 500);
    fb = hilock_hold_fence(gb.hold);
    cr_expect_gt(fb, fa);
    test_loop_for(e.base, 500); /* past the claim (a third of the 1 s window) */
    cr_expect_gt(test_redis_int(&e.r, "PTTL %s", mkey("sw", "")), 5000, "the grant was not claimed");
    cr_assert_eq(release_now(&e, gb.hold), 0);
    cr_assert(test_loop_until(e.base, &ga2.calls, 3000));
    cr_expect_eq(ga2.status, 0);
    cr_expect_gt(hilock_hold_fence(ga2.hold), fb);
    cr_assert_eq(release_now(&e, ga2.hold), 0);
    test_loop_for(e.base, 50);
    cr_expect_eq(lock_exists(&e.r, "sw"), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* starve_ms HILOCK_STARVE_NEVER: waits race, and nothing joins a queue. */
Test(bounded, never_means_racing) {
    hilock_client *a = client_starving_after(HILOCK_STARVE_NEVER);
    hilock_client *b = client_starving_after(HILOCK_STARVE_NEVER);
    got ga = acquire_now(&e, a, "nv", NULL), gb;
    cr_assert_eq(ga.status, 0);
    start(b, "nv", &gb, NULL);
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
static pid_t starving_child(kid_flags *k, const char *name) {
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
    hilock_acquire(c, name, &o, got_cb, &g, NULL);
    test_loop_for(ce.base, 300);
    atomic_store(&k->placed, 1);
    test_loop_for(ce.base, 30000);
    _exit(2);
}

/* The starving process at the head of the queue is killed: the release
 * grants it, the grant lapses after the 1 s claim window, and the next
 * starving wait (a live one, behind it) gets the lock then; the dead
 * process's later entries, if any, count for nothing. */
Test(bounded, a_dead_starving_process_lapses_after_the_claim_window) {
    kid_flags *k = mmap(NULL, sizeof(*k), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(k, 0, sizeof(*k));
    hilock_client *h = client_starving_after(20), *c = client_starving_after(20);
    got gh = acquire_now(&e, h, "dead", NULL), g;
    cr_assert_eq(gh.status, 0);
    pid_t kid = starving_child(k, "dead");
    long long until = test_now_ms() + 5000;
    while (!atomic_load(&k->placed) && test_now_ms() < until) test_msleep(5);
    start(c, "dead", &g, NULL);
    test_loop_for(e.base, 300);
    cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", mkey("dead", ":q")), 2);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, gh.hold), 0);
    cr_assert(test_loop_until(e.base, &g.calls, 5000), "never granted");
    cr_expect_eq(g.status, 0, "%s", hilock_strerror(g.status));
    long long took = g.at_ms - t0;
    cr_log_info("grant to a dead starving process: next granted %lld ms after the release", took);
    cr_expect(took >= 900 && took < 2600, "granted %lld ms after the release", took);
    if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(h);
    hilock_client_free(c);
    munmap(k, sizeof(*k));
}

/* A starving wait cancelled as the release hands it the lock (at every
 * offset around the release): the lock is never left to the cancelled
 * wait's token for its claim window; the next starving wait has it within
 * a few round trips, and nothing stays behind. */
Test(bounded, cancels_racing_the_handoff_pass_the_lock_on) {
    hilock_client *h = client_starving_after(20), *a = client_starving_after(20), *b = client_starving_after(20);
    for (int i = 0; i < 12; i++) {
        char name[32];
        snprintf(name, sizeof(name), "cr%d", i);
        got gh = acquire_now(&e, h, name, NULL), ga, gb;
        cr_assert_eq(gh.status, 0);
        hilock_wait *wa = NULL;
        start(a, name, &ga, &wa);
        test_loop_for(e.base, 100);
        start(b, name, &gb, NULL);
        test_loop_for(e.base, 100);
        cr_assert_eq(test_redis_int(&e.r, "ZCARD %s", mkey(name, ":q")), 2, "round %d", i);
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
        cr_expect_eq(lock_exists(&e.r, name), 0, "round %d: a lock left behind", i);
        cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", mkey(name, ":q")), 0, "round %d: a place left", i);
    }
    hilock_client_free(h);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* The starving client's subscriber connection is killed just before the
 * release: the grant's message is lost, and its wait finds the grant with
 * its next try (within the 1 s refresh of a place), not at the lease. */
Test(bounded, a_grant_whose_message_was_lost_is_found) {
    hilock_client *h = client_starving_after(20), *b = client_starving_after(20);
    got gh = acquire_now(&e, h, "lost-msg", NULL), gb;
    cr_assert_eq(gh.status, 0);
    start(b, "lost-msg", &gb, NULL);
    test_loop_for(e.base, 200);
    cr_assert_eq(test_redis_int(&e.r, "ZCARD %s", mkey("lost-msg", ":q")), 1);
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
    cr_assert(rep && rep->type == REDIS_REPLY_ARRAY && rep->element[0]->integer == 1);
    freeReplyObject(rep);
    hilock_client *b = client_starving_after(20);
    got gb;
    start(b, "old", &gb, NULL);
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
Test(bounded, a_wait_that_ends_leaves_its_place) {
    hilock_client *h = client_starving_after(50), *c = client_starving_after(50);
    for (int cancel = 0; cancel < 2; cancel++) {
        const char *name = cancel ? "ends-c" : "ends-t";
        got gh = acquire_now(&e, h, name, NULL), g;
        cr_assert_eq(gh.status, 0);
        hilock_acquire_opts o = opts_wait_lease(cancel ? HILOCK_WAIT_FOREVER : 200, 10000);
        hilock_wait *w = NULL;
        memset(&g, 0, sizeof(g));
        cr_assert_eq(hilock_acquire(c, name, &o, got_cb, &g, &w), 0);
        test_loop_for(e.base, 150);
        cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", mkey(name, ":q")), 1, "%s: no place", name);
        if (cancel) cr_assert_eq(hilock_wait_cancel(w), 0);
        cr_assert(test_loop_until(e.base, &g.calls, 2000));
        cr_expect_eq(g.status, cancel ? HILOCK_ECANCELED : HILOCK_ETIMEDOUT);
        test_loop_for(e.base, 50);
        cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", mkey(name, ":q")), 0, "%s: its place stayed", name);
        cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", mkey(name, ":p")), 0, "%s: its client stayed", name);
        /* Nobody starves: the lock's mark went with the last place, and the
         * release is one script, which frees the lock at once (a release
         * that asked for a handover freed it a round trip later, and a try
         * sent as soon as the holder's work was done found it held). */
        redisReply *q = test_redis_cmd(&e.r, "HGET %s q", mkey(name, ""));
        cr_expect(q && (q->type == REDIS_REPLY_NIL || (q->type == REDIS_REPLY_STRING && strcmp(q->str, "1") != 0)),
                  "%s: the lock is still marked", name);
        if (q) freeReplyObject(q);
        long long scripts = script_calls_of(&e.r);
        cr_assert_eq(release_now(&e, gh.hold), 0);
        cr_expect_eq(script_calls_of(&e.r) - scripts, 1, "%s: the release took %lld scripts", name,
                     script_calls_of(&e.r) - scripts);
        cr_expect_eq(lock_exists(&e.r, name), 0, "%s: the release handed the lock to a wait that ended", name);
        hilock_acquire_opts once = opts_wait(0);
        got go = acquire_loop(e.base, c, name, &once, 2000);
        cr_expect_eq(go.status, 0, "%s: %s", name, hilock_strerror(go.status));
        if (go.status == 0) release_now(&e, go.hold);
    }
    hilock_client_free(h);
    hilock_client_free(c);
}
