/* Attacks on the fair lock at its worst moments: a grant message that
 * overtakes the reply of a try or a join (Redis writes the replies of one
 * event-loop turn in the reverse order of their making, so the subscriber
 * connection's message can come before the command connection's reply of
 * a script that ran first), grants dated across those reorderings,
 * no_renew holds granted by message, the order of one client's waits after
 * it lost its places, and the engine paths the mutex shares.
 *
 * The reorderings are made on purpose: DEBUG SLEEP holds the server while
 * the clients write, so that what they wrote runs in one turn of its loop
 * when it wakes (see stall_begin). */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "core/engine.h"
#include "prim/prim.h"
#include "support/fairenv.h"

static lockenv e;
static void setup(void) { lockenv_start_debuggable(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(fair_reorder, .init = setup, .fini = teardown, .timeout = 60);

/* ---- Helpers ------------------------------------------------------------------ */

#define fair_now(c, name, o) fairenv_now(&e, c, name, o)
#define queued(name) fairenv_queued(&e.r, name)
#define held(name) fairenv_held(&e.r, name)

#define held_fence(name) fairenv_fence(&e.r, name)

static hilock_acquire_opts wait_opts(int64_t wait_ms, uint32_t lease_ms) {
    hilock_acquire_opts o = opts_wait(wait_ms);
    if (lease_ms) o.lease_ms = lease_ms;
    return o;
}

/* A client whose subscriptions linger for a minute: once it has waited on
 * a name, it hears that name's grants from the first instant of its next
 * wait. */
static hilock_client *lingering_client(void) {
    return lockenv_client_url(&e, e.r.url, 60000);
}

/* Make c subscribe to `name`'s channel (held by someone else) and leave
 * no place in its queue. */
static void subscribe_early(hilock_client *c, const char *name) {
    got g;
    hilock_wait *w;
    fair_start(c, name, NULL, &g, &w);
    test_loop_for(e.base, 150);
    cr_assert_eq(g.calls, 0, "%s was free", name);
    cr_assert_eq(hilock_wait_cancel(w), 0);
    test_loop_until(e.base, &g.calls, 1000);
    test_loop_for(e.base, 50);
    cr_assert_eq(queued(name), 0);
}

/* Stall the server: DEBUG SLEEP `secs` is written on a connection of its
 * own, and the caller goes on while it sleeps. What clients write
 * meanwhile runs in one turn of the server's loop when it wakes, in the
 * order it was written, and their replies and messages leave in the
 * reverse order of their making. */
static redisContext *stall_begin(const char *secs) {
    redisContext *k = test_redis_connect(&e.r);
    int done = 0;
    cr_assert_not_null(k);
    redisAppendCommand(k, "DEBUG SLEEP %s", secs);
    while (!done) cr_assert_eq(redisBufferWrite(k, &done), REDIS_OK);
    test_msleep(30); /* it sleeps now */
    return k;
}

/* Wait for the server to wake (DEBUG SLEEP's answer). */
static void stall_end(redisContext *k) {
    void *r = NULL;
    cr_expect_eq(redisGetReply(k, &r), REDIS_OK);
    if (r) freeReplyObject(r);
    redisFree(k);
}

/* ---- A grant message that overtakes a reply ----------------------------------- */

/* Client s has a try-once wait w0 at its head (its try in flight) and a
 * wait w1 whose join is in flight behind it; the holder releases while
 * both are on their way, and the server runs them in one turn: w0's try
 * (busy), w1's join (first in the queue), the release (which grants w1).
 * The grant message reaches s before the join's reply. w1 holds the lock:
 * the join's reply (not granted: it ran before the grant) must not make s
 * give it back, which would hand the lock to the next waiter while w1's
 * callback said it holds it. */
Test(fair_reorder, a_join_answered_after_its_grant_keeps_the_lock) {
    hilock_client *m = lockenv_client(&e), *s = lingering_client(), *x = lockenv_client(&e);
    hilock_acquire_opts once = wait_opts(0, 0);
    int bad = 0;
    for (int round = 0; round < 3; round++) {
        char name[32];
        snprintf(name, sizeof(name), "jg%d", round);
        got gm = fair_now(m, name, NULL), g0, g1;
        cr_assert_eq(gm.status, 0);
        subscribe_early(s, name);
        redisContext *k = stall_begin("0.2");
        fair_start(s, name, &once, &g0, NULL); /* its try: the name's */
        fair_start(s, name, NULL, &g1, NULL);  /* its join */
        test_loop_for(e.base, 10);
        rel r = {0, 0};
        cr_assert_eq(hilock_release(gm.hold, rel_cb, &r), 0);
        test_loop_for(e.base, 10);
        stall_end(k);
        cr_assert(test_loop_until(e.base, &g1.calls, 3000), "round %d: w1 never granted", round);
        test_loop_until(e.base, &r.calls, 1000);
        /* w0's answer may come after w1's grant: the grant message can
         * overtake the replies on the command connection. */
        cr_assert(test_loop_until(e.base, &g0.calls, 1000), "round %d: w0 never answered", round);
        cr_expect_eq(g0.status, HILOCK_EBUSY, "round %d: %s", round, hilock_strerror(g0.status));
        cr_assert_eq(g1.status, 0, "round %d: %s", round, hilock_strerror(g1.status));
        test_loop_for(e.base, 200); /* the join's reply, and whatever it sends */
        unsigned long long f = held_fence(name);
        got gx = fair_now(x, name, &once);
        if (f != hilock_hold_fence(g1.hold) || gx.status == 0 || hilock_hold_lost(g1.hold)) bad++;
        cr_expect_eq(f, hilock_hold_fence(g1.hold),
                     "round %d: the lock in Redis is not w1's (fence %llu, w1's %llu)", round, f,
                     (unsigned long long)hilock_hold_fence(g1.hold));
        cr_expect_neq(gx.status, 0, "round %d: a second holder while w1 holds", round);
        cr_expect_eq(hilock_hold_lost(g1.hold), 0, "round %d: w1's hold was lost", round);
        if (gx.status == 0) release_now(&e, gx.hold);
        release_now(&e, g1.hold);
        test_loop_for(e.base, 50);
        cr_expect_eq(held(name), 0);
        cr_expect_eq(queued(name), 0);
    }
    cr_expect_eq(bad, 0);
    hilock_client_free(x);
    hilock_client_free(s);
    hilock_client_free(m);
}

/* A join that ran after the grant of another wait of the same client, 10
 * ms later by the server's clock, is answered before the grant's message
 * (the server writes the two in the reverse order of their making). The
 * grant is no less fresh for that: the client's clock at the join's send,
 * minus those 10 ms, dates it no later than it was. Dating it instead
 * from when the granted wait began (long ago) makes the fresh grant look
 * lapsed: the wait gives it back, and the lock goes to the join's wait,
 * which came after it. */
Test(fair_reorder, a_grant_read_after_a_later_join_is_dated_from_the_server_clock) {
    hilock_client *m = lockenv_client(&e), *s = lingering_client();
    got gm = fair_now(m, "gt", NULL), g1, g2;
    cr_assert_eq(gm.status, 0);
    long long t0 = test_now_ms();
    fair_start(s, "gt", NULL, &g1, NULL);
    /* w1 waits 1.2 s (past the 1 s claim window), its head's refresh
     * tries at about 1.0 s and 2.0 s: the stall below falls between. */
    test_loop_for(e.base, (int)(t0 + 1200 - test_now_ms()));
    cr_assert_eq(g1.calls, 0);
    cr_assert_eq(queued("gt"), 1);
    redisContext *k2 = test_redis_connect(&e.r), *k = stall_begin("0.2");
    int done = 0;
    rel r = {0, 0};
    cr_assert_eq(hilock_release(gm.hold, rel_cb, &r), 0); /* grants w1 */
    test_loop_for(e.base, 10);
    redisAppendCommand(k2, "DEBUG SLEEP 0.01"); /* 10 ms between the grant and the join */
    while (!done) cr_assert_eq(redisBufferWrite(k2, &done), REDIS_OK);
    fair_start(s, "gt", NULL, &g2, NULL); /* w2's join */
    test_loop_for(e.base, 10);
    stall_end(k);
    stall_end(k2);
    test_loop_until(e.base, &g1.calls, 1000);
    test_loop_for(e.base, 100);
    cr_expect_eq(r.status, 0);
    cr_assert_eq(g1.calls, 1, "the grant to w1 was thrown away");
    cr_expect_eq(g1.status, 0, "%s", hilock_strerror(g1.status));
    cr_expect_eq(g2.calls, 0, "w2, which came later, got the lock first");
    cr_expect_eq(held_fence("gt"), hilock_hold_fence(g1.hold));
    test_loop_for(e.base, 500); /* claimed */
    cr_expect_eq(hilock_hold_lost(g1.hold), 0);
    cr_expect_eq(release_now(&e, g1.hold), 0);
    cr_assert(test_loop_until(e.base, &g2.calls, 3000));
    cr_expect_eq(g2.status, 0);
    cr_expect_eq(release_now(&e, g2.hold), 0);
    cr_expect_eq(held("gt"), 0);
    hilock_client_free(s);
    hilock_client_free(m);
}

/* ---- no_renew ------------------------------------------------------------------ */

/* A no_renew hold's key "expires after lease_ms" (hilock.h). Granted by
 * message, its key lives the 1 s claim window unless claimed: a no_renew
 * hold of 3 s must still be claimed once, or it is lost after 1 s and the
 * next waiter takes the lock while the holder was promised 3 s. */
Test(fair_reorder, a_no_renew_hold_granted_by_message_lives_its_lease) {
    hilock_client *m = lockenv_client(&e), *s = lockenv_client(&e), *o = lockenv_client(&e);
    hilock_acquire_opts nr = wait_opts(HILOCK_WAIT_FOREVER, 3000), once = wait_opts(0, 0);
    nr.no_renew = 1;
    got gm = fair_now(m, "nr", NULL), g, go;
    cr_assert_eq(gm.status, 0);
    fair_start(s, "nr", &nr, &g, NULL);
    test_loop_for(e.base, 100);
    fair_start(o, "nr", NULL, &go, NULL); /* next in line */
    test_loop_for(e.base, 100);
    cr_assert_eq(queued("nr"), 2);
    cr_assert_eq(release_now(&e, gm.hold), 0);
    cr_assert(test_loop_until(e.base, &g.calls, 2000));
    cr_assert_eq(g.status, 0);
    long long t0 = test_now_ms();
    test_loop_for(e.base, 1800);
    cr_expect_eq(go.calls, 0, "the next waiter got the lock %lld ms into a 3 s no_renew hold",
                 go.at_ms - t0);
    cr_expect_eq(hilock_hold_lost(g.hold), 0, "a 3 s no_renew hold lost after 1.8 s");
    cr_expect_eq(held_fence("nr"), hilock_hold_fence(g.hold));
    got gx = fair_now(m, "nr", &once);
    cr_expect_eq(gx.status, HILOCK_EBUSY);
    /* It is no_renew: it lapses after its lease, and the next one gets it. */
    cr_assert(test_loop_until(e.base, &go.calls, 3000), "never passed on");
    cr_expect_eq(go.status, 0);
    cr_expect_geq(go.at_ms - t0, 2500, "passed on %lld ms into a 3 s lease", go.at_ms - t0);
    cr_expect_eq(hilock_hold_lost(g.hold), 1);
    rel r = {0, 0};
    hilock_release(g.hold, rel_cb, &r);
    test_loop_until(e.base, &r.calls, 2000);
    cr_expect_eq(release_now(&e, go.hold), 0);
    hilock_client_free(o);
    hilock_client_free(s);
    hilock_client_free(m);
}

/* ---- Places lost: the order of one client's waits ------------------------------ */

/* The first 16 digits of the first token in `name`'s queue: its client. */
static void first_client(const char *name, char out[17]) {
    redisReply *r = test_redis_cmd(&e.r, "ZRANGE %s 0 0", fkey(name, ":q"));
    cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    memcpy(out, r->element[0]->str, 16);
    out[16] = '\0';
    freeReplyObject(r);
}

/* Wait until a or b is granted, release it, then wait for the other and
 * release it: 1 if a got the lock first, 0 if b did. */
static int a_before_b(got *a, got *b) {
    volatile int any = 0;
    long long until = test_now_ms() + 4000;
    while (!(any = a->calls + b->calls) && test_now_ms() < until) test_loop_for(e.base, 5);
    cr_assert(any, "nobody got the lock");
    int first_a = a->calls != 0;
    got *f = first_a ? a : b, *o = first_a ? b : a;
    cr_assert_eq(f->status, 0, "%s", hilock_strerror(f->status));
    cr_expect_eq(o->calls, 0, "both granted at once");
    cr_expect_eq(release_now(&e, f->hold), 0);
    cr_assert(test_loop_until(e.base, &o->calls, 3000), "the other never got the lock");
    cr_expect_eq(o->status, 0);
    cr_expect_eq(release_now(&e, o->hold), 0);
    return first_a;
}

/* Redis lost the queue (a restart without persistence) while w1 waits;
 * w2, called after it, joins before w1's next try and is the one that
 * learns it. "All its waits join again, in their order" (hilock.h): w1
 * comes before w2, not after. */
Test(fair_reorder, after_the_queue_is_lost_a_later_wait_learning_it_stays_behind) {
    hilock_client *m = lockenv_client(&e), *s = lockenv_client(&e);
    got gm = fair_now(m, "lo", NULL), g1, g2;
    fair_start(s, "lo", NULL, &g1, NULL);
    test_loop_for(e.base, 150);
    cr_assert_eq(queued("lo"), 1);
    test_redis_int(&e.r, "DEL %s %s", fkey("lo", ":q"), fkey("lo", ":p"));
    fair_start(s, "lo", NULL, &g2, NULL); /* learns that s's places were lost */
    test_loop_for(e.base, 150);
    cr_expect_eq(queued("lo"), 2);
    cr_assert_eq(release_now(&e, gm.hold), 0);
    cr_expect(a_before_b(&g1, &g2), "w2 got the lock before w1, which was called before it");
    cr_expect_eq(held("lo"), 0);
    cr_expect_eq(queued("lo"), 0);
    hilock_client_free(s);
    hilock_client_free(m);
}

/* s's waits w1 and w2 stand with another client's r1 between them. s goes
 * silent (as far as Redis knows: its time is gone), a release skips w1 as
 * dead and grants r1; w2's place, behind r1, is never looked at. When s
 * speaks again (w1's next try), its waits join again "in their order, at
 * the end of the queue" (hilock.h): w1 before w2, not w2 at its old place
 * and w1 behind it. */
Test(fair_reorder, after_a_silence_a_clients_waits_join_again_in_their_order) {
    hilock_client *m = lockenv_client(&e), *s = lockenv_client(&e), *q = lockenv_client(&e);
    got gm = fair_now(m, "ls", NULL), g1, g2, gr;
    char who[17];
    fair_start(s, "ls", NULL, &g1, NULL);
    test_loop_for(e.base, 100);
    fair_start(q, "ls", NULL, &gr, NULL);
    test_loop_for(e.base, 100);
    fair_start(s, "ls", NULL, &g2, NULL);
    test_loop_for(e.base, 100);
    cr_assert_eq(queued("ls"), 3);
    first_client("ls", who);
    cr_assert_eq(test_redis_int(&e.r, "ZREM %s %s", fkey("ls", ":p"), who), 1);
    cr_assert_eq(release_now(&e, gm.hold), 0); /* skips w1 (dead), grants r1 */
    cr_assert(test_loop_until(e.base, &gr.calls, 2000));
    cr_assert_eq(gr.status, 0);
    test_loop_for(e.base, 1200); /* w1's next try: s learns, and joins again */
    cr_expect_eq(queued("ls"), 2);
    cr_assert_eq(release_now(&e, gr.hold), 0);
    cr_expect(a_before_b(&g1, &g2), "w2 got the lock before w1, which was called before it");
    cr_expect_eq(held("ls"), 0);
    cr_expect_eq(queued("ls"), 0);
    hilock_client_free(q);
    hilock_client_free(s);
    hilock_client_free(m);
}

/* ---- A try that fails after its wait was granted -------------------------------- */

/* A client on a loop of its own, which the test runs when it says. */
typedef struct side {
    struct event_base *base;
    lockenv env;
    hilock_client *c;
} side;

static void side_start(side *s, uint32_t request_timeout_ms) {
    hilock_config cfg;
    s->base = event_base_new();
    s->env = e;
    s->env.base = s->base;
    hilock_libevent_init(&s->env.loop, s->base);
    lockenv_config(&cfg, e.r.url);
    cfg.linger_ms = 60000;
    if (request_timeout_ms) cfg.request_timeout_ms = request_timeout_ms;
    s->c = lockenv_client_cfg(&s->env, &cfg);
}

static void side_stop(side *s) {
    hilock_client_free(s->c);
    event_base_free(s->base);
}

/* Run both loops, a few ms at a time, for ms. */
static void both_for(side *s, int ms) {
    long long until = test_now_ms() + ms;
    while (test_now_ms() < until) {
        test_loop_for(s->base, 2);
        test_loop_for(e.base, 2);
    }
}

/* w1's try goes out (its fallback timer fired, say) just as the release
 * that grants it by message has run; the message is read at once, and
 * w1 holds the lock; then the server stalls past the try's request
 * timeout. The try's outcome is unknown: if it ran, it ran after the
 * grant and renewed it. Giving the token back "in case the try left a
 * lock" deletes the lock w1's hold was just given, and hands it to the
 * next waiter. */
Test(fair_reorder, a_try_that_fails_after_its_wait_was_granted_keeps_the_lock) {
    hilock_client *m = lockenv_client(&e), *n = lockenv_client(&e);
    side s;
    side_start(&s, 300);
    got gm = fair_now(m, "he", NULL), g1, gn;
    hilock_wait *w1;
    fair_start(s.c, "he", NULL, &g1, &w1);
    test_loop_for(s.base, 150); /* joined, subscribed */
    fair_start(n, "he", NULL, &gn, NULL);
    test_loop_for(e.base, 100);
    cr_assert_eq(queued("he"), 2);
    cr_assert_eq(release_now(&e, gm.hold), 0); /* grants w1; s has not read it */
    redisContext *k = stall_begin("0.6");
    hl_engine_kick(w1->name); /* w1's try, as if its fallback timer fired now */
    test_loop_for(s.base, 500);  /* the grant is read; the try times out */
    cr_assert_eq(g1.calls, 1);
    cr_assert_eq(g1.status, 0, "%s", hilock_strerror(g1.status));
    stall_end(k);
    both_for(&s, 600);
    cr_expect_eq(gn.calls, 0, "the next waiter got the lock while w1 holds it");
    cr_expect_eq(held_fence("he"), hilock_hold_fence(g1.hold), "the lock in Redis is not w1's");
    cr_expect_eq(hilock_hold_lost(g1.hold), 0);
    rel r = {0, 0};
    hilock_release(g1.hold, rel_cb, &r);
    test_loop_until(s.base, &r.calls, 2000);
    if (gn.calls == 0) cr_assert(test_loop_until(e.base, &gn.calls, 3000));
    if (gn.status == 0) release_now(&e, gn.hold);
    side_stop(&s);
    hilock_client_free(n);
    hilock_client_free(m);
}

/* ---- wait_replicas ------------------------------------------------------------- */

static hilock_client *replicas_client(struct lockenv *env, const char *url, uint32_t replicas,
                                     uint32_t wait_ms) {
    hilock_config cfg;
    lockenv_config(&cfg, url);
    cfg.wait_replicas = replicas;
    cfg.wait_timeout_ms = wait_ms;
    return lockenv_client_cfg(env, &cfg);
}

/* "An acquire that fewer replicas confirm is released and ends with
 * HILOCK_EREPLICAS" (hilock.h, wait_replicas). With no replica at all, a
 * client that asks for one never gets the lock; a grant by message is an
 * acquire too, and was delivered with nothing confirmed. */
Test(fair_reorder, a_grant_by_message_waits_for_the_replicas_too) {
    hilock_client *m = lockenv_client(&e), *s = replicas_client(&e, e.r.url, 1, 100);
    got gm = fair_now(m, "wr", NULL), g, gx;
    fair_start(s, "wr", NULL, &g, NULL);
    test_loop_for(e.base, 300);
    cr_assert_eq(g.calls, 0);
    cr_assert_eq(release_now(&e, gm.hold), 0);
    cr_assert(test_loop_until(e.base, &g.calls, 3000));
    cr_expect_eq(g.status, HILOCK_EREPLICAS, "got %s with no replica to confirm it",
                 hilock_strerror(g.status));
    if (g.status == 0) {
        rel r = {0, 0};
        hilock_release(g.hold, rel_cb, &r);
        test_loop_until(e.base, &r.calls, 2000);
    }
    test_loop_for(e.base, 100);
    cr_expect_eq(held("wr"), 0, "the unconfirmed grant was not given back");
    gx = fair_now(m, "wr", NULL);
    cr_expect_eq(gx.status, 0);
    if (gx.status == 0) release_now(&e, gx.hold);
    hilock_client_free(s);
    hilock_client_free(m);
}

/* With a replica that confirms, the handoff still works. */
Test(fair_reorder, a_grant_by_message_with_a_replica_that_confirms) {
    test_redis replica;
    char port[16];
    snprintf(port, sizeof(port), "%d", e.r.port);
    test_redis_int(&e.r, "CONFIG SET repl-diskless-sync-delay 0");
    cr_assert_eq(test_redis_start(&replica, 0, "--replicaof", "127.0.0.1", port, NULL), 0);
    long long until = test_now_ms() + 4000;
    while (!test_redis_says(&e.r, "INFO", "connected_slaves:1", "state=online", NULL) &&
           test_now_ms() < until)
        test_msleep(20);
    cr_assert(test_redis_says(&e.r, "INFO", "state=online", NULL), "the replica never synced");
    /* 1 s for the replica's ack: 100 ms was missed now and then on a
     * loaded 2-vCPU machine (make test's two jobs). */
    hilock_client *m = lockenv_client(&e), *s = replicas_client(&e, e.r.url, 1, 1000);
    got gm = fair_now(m, "wc", NULL), g;
    fair_start(s, "wc", NULL, &g, NULL);
    test_loop_for(e.base, 300);
    cr_assert_eq(g.calls, 0);
    cr_assert_eq(release_now(&e, gm.hold), 0);
    cr_assert(test_loop_until(e.base, &g.calls, 3000));
    cr_expect_eq(g.status, 0, "%s", hilock_strerror(g.status));
    if (g.status == 0) {
        test_loop_for(e.base, 500);
        cr_expect_eq(hilock_hold_lost(g.hold), 0);
        cr_expect_eq(held_fence("wc"), hilock_hold_fence(g.hold));
        cr_expect_eq(release_now(&e, g.hold), 0);
    }
    hilock_client_free(s);
    hilock_client_free(m);
    test_redis_stop(&replica);
}

/* ---- Churn: stalls, cancels, timeouts ------------------------------------------ */

#define CHURN_SLOTS 12
#define CHURN_ROUNDS 25

typedef struct churn {
    int inside, overlaps, grants, errors, lost_at_grant, active, done, first_error;
    unsigned seed;
} churn;

typedef struct cslot {
    churn *ch;
    hilock_client *c;
    int rounds;
    int called;
    hilock_wait *w;
    hilock_hold *h;
} cslot;

static void cslot_go(cslot *s);

static void cslot_next(cslot *s) {
    if (--s->rounds > 0) cslot_go(s);
    else if (--s->ch->active == 0) s->ch->done = 1;
}

static void cslot_released(int status, void *data) {
    cslot *s = data;
    if (status != 0 && s->ch->errors++ == 0) s->ch->first_error = status;
    cslot_next(s);
}

static void cslot_release(evutil_socket_t fd, short what, void *data) {
    cslot *s = data;
    (void)fd; (void)what;
    s->ch->inside--;
    if (hilock_release(s->h, cslot_released, s) != 0) cslot_next(s);
}

static void cslot_granted(hilock_hold *h, int status, void *data) {
    cslot *s = data;
    s->called = 1;
    if (status != 0) {
        if (status != HILOCK_ECANCELED && status != HILOCK_ETIMEDOUT && status != HILOCK_EBUSY &&
            s->ch->errors++ == 0)
            s->ch->first_error = status;
        cslot_next(s);
        return;
    }
    s->ch->grants++;
    if (hilock_hold_lost(h)) s->ch->lost_at_grant++;
    if (++s->ch->inside > 1) s->ch->overlaps++;
    s->h = h;
    struct timeval tv = {0, (rand_r(&s->ch->seed) % 3 + 1) * 1000};
    event_base_once(e.base, -1, EV_TIMEOUT, cslot_release, s, &tv);
}

static void cslot_cancel(evutil_socket_t fd, short what, void *data) {
    cslot *s = data;
    (void)fd; (void)what;
    if (!s->called) hilock_wait_cancel(s->w); /* still waiting: w is alive */
}

static void cslot_go(cslot *s) {
    static const int64_t waits[5] = {HILOCK_WAIT_FOREVER, HILOCK_WAIT_FOREVER, 0, 40, 150};
    hilock_acquire_opts o = wait_opts(waits[rand_r(&s->ch->seed) % 5], 5000);
    s->called = 0;
    if (hilock_fair_acquire(s->c, "churn", &o, cslot_granted, s, &s->w) != 0) {
        s->ch->errors++;
        cslot_next(s);
        return;
    }
    if (rand_r(&s->ch->seed) % 4 == 0) {
        struct timeval tv = {0, (rand_r(&s->ch->seed) % 20) * 1000};
        event_base_once(e.base, -1, EV_TIMEOUT, cslot_cancel, s, &tv);
    }
}

typedef struct stalls {
    redisContext *k;
    int sent;
} stalls;

static void stall_tick(evutil_socket_t fd, short what, void *data) {
    stalls *st = data;
    int done = 0;
    (void)fd; (void)what;
    redisAppendCommand(st->k, "DEBUG SLEEP 0.03");
    while (!done && redisBufferWrite(st->k, &done) == REDIS_OK) {}
    st->sent++;
}

/* 12 waits over 3 clients on one name, 25 rounds each, holds of 1-3 ms,
 * a quarter of the waits cancelled at a random moment and some with short
 * timeouts or tries once, while the server stalls 30 ms every 70 ms (so that what the
 * clients send meanwhile runs in one turn, and replies and grant messages
 * cross): never two holders, no grant delivered lost, and nothing left in
 * Redis at the end. */
Test(fair_reorder, churn_with_stalls_cancels_and_timeouts) {
    hilock_client *c[3];
    static cslot s[CHURN_SLOTS];
    churn ch = {0};
    stalls st = {test_redis_connect(&e.r), 0};
    ch.seed = 12345;
    ch.active = CHURN_SLOTS;
    for (int i = 0; i < 3; i++) c[i] = lingering_client();
    for (int i = 0; i < CHURN_SLOTS; i++) s[i] = (cslot){&ch, c[i % 3], CHURN_ROUNDS, 0, NULL, NULL};
    struct event *t = event_new(e.base, -1, EV_PERSIST, stall_tick, &st);
    struct timeval tv = {0, 70 * 1000};
    evtimer_add(t, &tv);
    for (int i = 0; i < CHURN_SLOTS; i++) cslot_go(&s[i]);
    cr_assert(test_loop_until(e.base, &ch.done, 30000), "the slots never ended (%d left)", ch.active);
    event_free(t);
    for (int i = 0; i < st.sent; i++) {
        void *r = NULL;
        if (redisGetReply(st.k, &r) == REDIS_OK && r) freeReplyObject(r);
    }
    redisFree(st.k);
    cr_log_info("churn: %d grants, %d stalls", ch.grants, st.sent);
    cr_expect_eq(ch.overlaps, 0, "two holders at once");
    cr_expect_eq(ch.lost_at_grant, 0);
    cr_expect_eq(ch.errors, 0, "first error %s", hilock_strerror(ch.first_error));
    cr_expect_gt(ch.grants, CHURN_SLOTS * CHURN_ROUNDS / 4);
    long long until = test_now_ms() + 2000;
    while ((held("churn") || queued("churn")) && test_now_ms() < until) test_loop_for(e.base, 20);
    cr_expect_eq(held("churn"), 0, "a lock left behind");
    cr_expect_eq(queued("churn"), 0, "places left in the queue");
    for (int i = 0; i < 3; i++) hilock_client_free(c[i]);
}

/* ---- A cancel that overtakes its try ------------------------------------------- */

/* After a SCRIPT FLUSH, w's try (EVALSHA) comes back NOSCRIPT and is sent
 * again as EVAL, behind the release that w's cancel sent meanwhile (the
 * first release of that connection: EVAL, which runs at once). The try
 * then runs after the release: it joins the queue for a wait that is
 * gone. Its answer must take that place back, or the next release grants
 * it to nobody and every waiter loses the claim window (1 s). */
Test(fair_reorder, a_cancel_overtaking_a_try_sent_again_after_noscript_leaves_no_place) {
    hilock_client *m = lockenv_client(&e), *c = lockenv_client(&e), *o = lockenv_client(&e);
    hilock_acquire_opts once = wait_opts(0, 0);
    got gm = fair_now(m, "ns", NULL), g, go;
    cr_assert_eq(fair_now(c, "ns", &once).status, HILOCK_EBUSY); /* c has loaded the try */
    cr_assert_eq(test_redis_int(&e.r, "SCRIPT FLUSH"), -1);
    hilock_wait *w;
    fair_start(c, "ns", NULL, &g, &w);
    cr_assert_eq(hilock_wait_cancel(w), 0);
    test_loop_for(e.base, 200);
    cr_expect_eq(g.status, HILOCK_ECANCELED);
    cr_expect_eq(queued("ns"), 0, "the cancelled wait has a place in the queue");
    fair_start(o, "ns", NULL, &go, NULL);
    test_loop_for(e.base, 100);
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, gm.hold), 0);
    cr_assert(test_loop_until(e.base, &go.calls, 3000));
    cr_expect_eq(go.status, 0);
    cr_expect_lt(go.at_ms - t0, 500, "the next waiter got the lock %lld ms after the release",
                 go.at_ms - t0);
    if (go.status == 0) release_now(&e, go.hold);
    hilock_client_free(o);
    hilock_client_free(c);
    hilock_client_free(m);
}

/* ---- Ends at awkward moments ----------------------------------------------------- */

/* A fresh client's first waits, called together: its first try says the
 * client had no time in the queue (it never spoke there), which must not
 * reorder the waits whose joins ran after it. */
Test(fair_reorder, a_fresh_clients_first_waits_keep_their_order) {
    hilock_client *m = lockenv_client(&e), *s = lockenv_client(&e);
    got gm = fair_now(m, "fw", NULL), g[4];
    for (int i = 0; i < 4; i++) fair_start(s, "fw", NULL, &g[i], NULL);
    test_loop_for(e.base, 200);
    cr_assert_eq(queued("fw"), 4);
    hilock_hold *h = gm.hold;
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(release_now(&e, h), 0);
        cr_assert(test_loop_until(e.base, &g[i].calls, 3000), "wait %d never granted", i);
        cr_assert_eq(g[i].status, 0);
        for (int j = i + 1; j < 4; j++) cr_expect_eq(g[j].calls, 0, "wait %d before %d", j, i);
        h = g[i].hold;
    }
    cr_expect_eq(release_now(&e, h), 0);
    hilock_client_free(s);
    hilock_client_free(m);
}

/* Waits cancelled, or timed out, while their joins are still on the way:
 * none keeps a place, and the lock passes on at once. */
Test(fair_reorder, waits_that_end_before_their_join_is_answered_leave_no_place) {
    hilock_client *m = lockenv_client(&e), *s = lockenv_client(&e), *o = lockenv_client(&e);
    hilock_acquire_opts tiny = wait_opts(1, 0);
    got gm = fair_now(m, "ej", NULL), g[8], go;
    hilock_wait *w[8];
    fair_start(s, "ej", NULL, &g[0], &w[0]); /* the head */
    for (int i = 1; i < 8; i++) fair_start(s, "ej", i % 2 ? NULL : &tiny, &g[i], &w[i]);
    for (int i = 1; i < 8; i += 2) cr_assert_eq(hilock_wait_cancel(w[i]), 0);
    test_loop_for(e.base, 200);
    /* The timed-out ones: HILOCK_EDEADLINE, as nothing was answered yet. */
    for (int i = 1; i < 8; i++)
        cr_expect(i % 2 ? g[i].status == HILOCK_ECANCELED
                        : g[i].status == HILOCK_ETIMEDOUT || g[i].status == HILOCK_EDEADLINE,
                  "wait %d: %s", i, hilock_strerror(g[i].status));
    cr_expect_eq(queued("ej"), 1, "only the head keeps a place");
    fair_start(o, "ej", NULL, &go, NULL);
    test_loop_for(e.base, 100);
    cr_assert_eq(release_now(&e, gm.hold), 0);
    cr_assert(test_loop_until(e.base, &g[0].calls, 1000));
    cr_expect_eq(g[0].status, 0);
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, g[0].hold), 0);
    cr_assert(test_loop_until(e.base, &go.calls, 3000));
    cr_expect_lt(go.at_ms - t0, 500, "a grant went to a place of an ended wait");
    cr_expect_eq(release_now(&e, go.hold), 0);
    cr_expect_eq(queued("ej"), 0);
    hilock_client_free(o);
    hilock_client_free(s);
    hilock_client_free(m);
}

/* The client is freed from inside a grant's callback while its other
 * waits' joins and a renewal may be out: every other wait gets
 * HILOCK_ECANCELED once, nothing is used after it is freed (ASan), and
 * the places it leaves lapse (hilock.h: up to 5 s) without holding the
 * lock for longer than a claim window each. */
typedef struct freer {
    hilock_client *c;
    got g;
} freer;

static void free_in_cb(hilock_hold *h, int status, void *data) {
    freer *f = data;
    got_cb(h, status, &f->g);
    if (status == 0) hilock_client_free(f->c);
}

Test(fair_reorder, client_freed_in_a_grant_callback) {
    hilock_client *m = lockenv_client(&e), *s = lockenv_client(&e);
    got gm = fair_now(m, "fc", NULL), g[5];
    freer f = {s, {0, 0, NULL, 0}};
    cr_assert_eq(hilock_fair_acquire(s, "fc", NULL, free_in_cb, &f, NULL), 0);
    for (int i = 0; i < 5; i++) fair_start(s, "fc", NULL, &g[i], NULL);
    test_loop_for(e.base, 150);
    cr_assert_eq(release_now(&e, gm.hold), 0);
    cr_assert(test_loop_until(e.base, &f.g.calls, 3000));
    cr_expect_eq(f.g.status, 0);
    for (int i = 0; i < 5; i++) {
        cr_expect_eq(g[i].calls, 1, "wait %d: %d callbacks", i, g[i].calls);
        cr_expect_eq(g[i].status, HILOCK_ECANCELED);
    }
    /* The freed client's grant lapses after its claim window, and its
     * places go with it (the grant cut its client's time to the window). */
    long long t0 = test_now_ms();
    got gx = fair_now(m, "fc", NULL);
    cr_expect_eq(gx.status, 0);
    cr_expect_lt(gx.at_ms - t0, 2500, "the freed client's places held the lock %lld ms",
                 gx.at_ms - t0);
    cr_expect_eq(queued("fc"), 0);
    if (gx.status == 0) release_now(&e, gx.hold);
    hilock_client_free(m);
}
