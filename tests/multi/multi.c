/* Multi-locks: hilock_acquire_multi, hilock_multi_cancel,
 * hilock_hold_fence_at.
 *
 * multi:         all the names or none: a hold of them all with each
 *                name's fence, released together; a name held elsewhere
 *                (try once: EBUSY; a wait: granted at its release, woken
 *                by it; a deadline: ETIMEDOUT) leaves nothing behind;
 *                three clients taking overlapping sets in opposite orders
 *                never deadlock, one holder per name, fences growing;
 *                cancels racing the grants at every point; a name lost
 *                reported once; extend; the client's end; the bad cases;
 *                a fresh client's slot groups; callbacks from the loop
 *                (the client freed, the handle cancelled inside them);
 *                the hold alive until its release's callback; 1 ms.
 * multi_cluster: the same on a 3+3 cluster, names over the three masters,
 *                and through a master's failover.
 * multi_sentinel: one script on the master; one by one, confirmed, with
 *                wait_replicas. (Over Redlock: one by one, in multi.) */
#include "support/lockenv.h"
#include "support/clusterenv.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(multi, .init = setup, .fini = teardown, .timeout = 60);

/* Acquire names[0..n) as one multi-lock and run the loop to its callback. */
static got multi_now(struct event_base *base, hilock_client *c, const char *const *names, size_t n,
                     const hilock_acquire_opts *o, int ms) {
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire_multi(c, names, n, o, got_cb, &g, NULL), 0);
    test_loop_until(base, &g.calls, ms);
    cr_assert_eq(g.calls, 1, "the multi-lock got no callback");
    return g;
}

static int held_count(const test_redis *r, const char *const *names, size_t n) {
    int held = 0;
    for (size_t i = 0; i < n; i++) held += (int)lock_exists(r, names[i]);
    return held;
}

Test(multi, takes_every_name_with_its_fence_and_releases_them_together) {
    hilock_client *a = lockenv_client(&e);
    const char *names[] = {"m-c", "m-a", "m-b"};
    got g = multi_now(e.base, a, names, 3, NULL, 5000);
    cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(a));
    cr_expect_eq(held_count(&e.r, names, 3), 3);
    cr_expect_str_eq(hilock_hold_name(g.hold), "m-c", "the hold is names[0]'s");
    cr_expect_eq(hilock_hold_fence(g.hold), hilock_hold_fence_at(g.hold, 0));
    for (size_t i = 0; i < 3; i++) {
        cr_expect_gt(hilock_hold_fence_at(g.hold, i), 0);
        redisReply *f = test_redis_cmd(&e.r, "GET %s", prim_key(names[i], ":fence"));
        cr_assert(f && f->type == REDIS_REPLY_STRING);
        cr_expect_eq(hilock_hold_fence_at(g.hold, i), strtoull(f->str, NULL, 10), "%s's fence", names[i]);
        freeReplyObject(f);
    }
    cr_expect_eq(hilock_hold_fence_at(g.hold, 3), 0);
    cr_expect_eq(hilock_hold_lost(g.hold), 0);
    cr_expect_eq(release_now(&e, g.hold), 0);
    cr_expect_eq(held_count(&e.r, names, 3), 0, "released together");
    /* On one server the free names are taken by one script, at once. */
    long long scripts = script_calls_of(&e.r);
    got again = multi_now(e.base, a, names, 3, NULL, 5000);
    cr_assert_eq(again.status, 0);
    cr_expect_eq(script_calls_of(&e.r) - scripts, 1, "%lld scripts for 3 free names",
                 script_calls_of(&e.r) - scripts);
    cr_expect_eq(release_now(&e, again.hold), 0);
    /* One name is a multi-lock too; the same names again. */
    got one = multi_now(e.base, a, names, 1, NULL, 5000);
    cr_assert_eq(one.status, 0);
    cr_expect_eq(hilock_hold_fence_at(one.hold, 0), hilock_hold_fence(one.hold));
    cr_expect_eq(release_now(&e, one.hold), 0);
    hilock_client_free(a);
}

Test(multi, a_name_held_elsewhere_busy_waited_for_or_timed_out_leaves_nothing_behind) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    const char *names[] = {"w-1", "w-2", "w-3", "w-4"};
    got other = acquire_now(&e, b, "w-3", NULL);
    cr_assert_eq(other.status, 0);
    hilock_acquire_opts once = opts_wait(0);
    got busy = multi_now(e.base, a, names, 4, &once, 5000);
    cr_expect_eq(busy.status, HILOCK_EBUSY, "%s", hilock_strerror(busy.status));
    hilock_acquire_opts brief = opts_wait(300);
    long long t0 = test_now_ms();
    got late = multi_now(e.base, a, names, 4, &brief, 5000);
    cr_expect_eq(late.status, HILOCK_ETIMEDOUT, "%s", hilock_strerror(late.status));
    cr_expect_geq(late.at_ms - t0, 290);
    test_loop_for(e.base, 100);
    cr_expect_eq(held_count(&e.r, names, 4), 1, "only the other client's name is held");
    /* A wait: granted when the name is released, woken by its release. */
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire_multi(a, names, 4, NULL, got_cb, &g, NULL), 0);
    test_loop_for(e.base, 300);
    cr_expect_eq(g.calls, 0, "granted while a name is held elsewhere");
    long long released = test_now_ms();
    cr_assert_eq(release_now(&e, other.hold), 0);
    test_loop_until(e.base, &g.calls, 5000);
    cr_assert_eq(g.status, 0);
    cr_expect_lt(g.at_ms - released, 500, "granted %lld ms after the release", g.at_ms - released);
    cr_expect_eq(held_count(&e.r, names, 4), 4);
    cr_expect_eq(release_now(&e, g.hold), 0);
    cr_expect_eq(held_count(&e.r, names, 4), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Contention: no deadlock, one holder per name, fences in order ------- */

#define NNAMES 6

typedef struct board {
    int inside[NNAMES], overlaps, regressions, errors, first_error, done, granted;
    uint64_t last[NNAMES];
    struct event_base *base;
    int hold_ms;
} board;

typedef struct mturn {
    board *b;
    int idx[4];
    size_t n;
    hilock_hold *h;
} mturn;

static void mturn_released(int status, void *data) {
    mturn *t = data;
    if (status != 0 && t->b->errors++ == 0) t->b->first_error = status;
    t->b->done++;
}

static void mturn_release(evutil_socket_t fd, short what, void *data) {
    mturn *t = data;
    (void)fd; (void)what;
    for (size_t i = 0; i < t->n; i++) t->b->inside[t->idx[i]]--;
    if (hilock_release(t->h, mturn_released, t) != 0) { t->b->errors++; t->b->done++; }
}

static void mturn_granted(hilock_hold *h, int status, void *data) {
    mturn *t = data;
    board *b = t->b;
    if (status != 0) {
        if (b->errors++ == 0) b->first_error = status;
        b->done++;
        return;
    }
    b->granted++;
    for (size_t i = 0; i < t->n; i++) {
        int k = t->idx[i];
        if (b->inside[k]++) b->overlaps++;
        if (hilock_hold_fence_at(h, i) <= b->last[k]) b->regressions++;
        b->last[k] = hilock_hold_fence_at(h, i);
    }
    t->h = h;
    struct timeval tv = {0, b->hold_ms * 1000};
    event_base_once(b->base, -1, EV_TIMEOUT, mturn_release, t, &tv);
}

/* `turns` multi-locks of 2 to 4 of NNAMES names ("STEM-k"), in shuffled
 * orders, by the clients in turn, with single locks of one name between:
 * every one ends granted, one holder per name, fences growing. */
static void contend(struct event_base *base, hilock_client **cs, int ncs, const char *stem, int turns) {
    static mturn t[400];
    static char names[NNAMES][32];
    board b;
    memset(&b, 0, sizeof(b));
    b.base = base;
    b.hold_ms = 2;
    cr_assert(turns <= 400);
    for (int k = 0; k < NNAMES; k++) snprintf(names[k], sizeof(names[k]), "%s-%d", stem, k);
    unsigned seed = 12345;
    for (int i = 0; i < turns; i++) {
        const char *pick[4];
        t[i] = (mturn){&b, {0}, 0, NULL};
        t[i].n = i % 7 == 6 ? 1 : 2 + (seed = seed * 1103515245u + 12345u) % 3;
        for (size_t j = 0; j < t[i].n; j++) {
            int k;
            do {
                seed = seed * 1103515245u + 12345u;
                k = (int)((seed >> 8) % NNAMES);
                for (size_t x = 0; x < j; x++)
                    if (t[i].idx[x] == k) k = -1;
            } while (k < 0);
            t[i].idx[j] = k;
            pick[j] = names[k];
        }
        cr_assert_eq(hilock_acquire_multi(cs[i % ncs], pick, t[i].n, NULL, mturn_granted, &t[i], NULL), 0);
    }
    long long t0 = test_now_ms();
    while (b.done < turns && test_now_ms() - t0 < 60000) test_loop_for(base, 20);
    cr_log_info("multi-lock contention: %d of %d granted in %lld ms", b.granted, turns, test_now_ms() - t0);
    cr_expect_eq(b.done, turns, "%d of %d ended: a deadlock", b.done, turns);
    cr_expect_eq(b.errors, 0, "errors, the first %s", hilock_strerror(b.first_error));
    cr_expect_eq(b.overlaps, 0, "two holders of a name at once");
    cr_expect_eq(b.regressions, 0, "fences out of order");
}

Test(multi, overlapping_sets_in_opposite_orders_never_deadlock) {
    hilock_client *cs[3] = {lockenv_client(&e), lockenv_client(&e), lockenv_client(&e)};
    contend(e.base, cs, 3, "dl", 300);
    for (int i = 0; i < 3; i++) hilock_client_free(cs[i]);
    for (int k = 0; k < NNAMES; k++) {
        char name[32];
        snprintf(name, sizeof(name), "dl-%d", k);
        cr_expect_eq(lock_exists(&e.r, name), 0, "%s left behind", name);
    }
}

/* ---- Cancels racing the grants --------------------------------------------- */

/* A cancel after `turns` loop turns, at every point of a multi-lock of 3
 * names (one held elsewhere for the first half): the callback runs once,
 * ECANCELED unless it came first, and nothing is left behind. */
Test(multi, a_cancel_at_any_moment_ends_it_once_and_leaves_nothing) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    const char *names[] = {"cx-1", "cx-2", "cx-3"};
    int cancelled = 0, granted = 0;
    for (int turns = 0; turns < 24; turns++) {
        got other = {0, 0, NULL, 0};
        if (turns < 12) {
            other = acquire_now(&e, b, "cx-2", NULL);
            cr_assert_eq(other.status, 0);
        }
        got g = {0, 0, NULL, 0};
        hilock_multi *m = NULL;
        cr_assert_eq(hilock_acquire_multi(a, names, 3, NULL, got_cb, &g, &m), 0);
        for (int i = 0; i < turns % 12 && g.calls == 0; i++) event_base_loop(e.base, EVLOOP_ONCE);
        int rc = g.calls ? HILOCK_EINVAL : hilock_multi_cancel(m);
        cr_expect(rc == 0 || rc == HILOCK_EINVAL);
        if (other.hold) cr_assert_eq(release_now(&e, other.hold), 0);
        test_loop_until(e.base, &g.calls, 5000);
        test_loop_for(e.base, 50);
        cr_expect_eq(g.calls, 1, "turn %d: %d callbacks", turns, g.calls);
        if (rc == 0) {
            cr_expect_eq(g.status, HILOCK_ECANCELED, "turn %d: %s", turns, hilock_strerror(g.status));
            cancelled++;
        }
        if (g.status == 0) {
            granted++;
            cr_expect_eq(release_now(&e, g.hold), 0);
        }
        test_loop_for(e.base, 50);
        cr_expect_eq(held_count(&e.r, names, 3), 0, "turn %d: names left behind", turns);
    }
    cr_log_info("multi-lock cancels: %d cancelled, %d granted first", cancelled, granted);
    cr_expect_gt(cancelled, 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Loss, extend ------------------------------------------------------------ */

Test(multi, a_name_lost_is_the_whole_lost_once) {
    hilock_client *a = lockenv_client(&e);
    const char *names[] = {"ls-1", "ls-2", "ls-3"};
    lostrec lr = {0, 0, 0};
    hilock_acquire_opts o = opts_wait_lease(-1, 600);
    o.lost_cb = lost_cb;
    o.lost_data = &lr;
    got g = multi_now(e.base, a, names, 3, &o, 5000);
    cr_assert_eq(g.status, 0);
    /* Two of its names taken away (an operator's DEL): the next renewals
     * find them gone. */
    cr_assert_eq(test_redis_int(&e.r, "DEL %s %s", prim_key("ls-2", ""), prim_key("ls-3", "")), 2);
    long long t0 = test_now_ms();
    while (lr.calls == 0 && test_now_ms() - t0 < 3000) test_loop_for(e.base, 20);
    test_loop_for(e.base, 500);
    cr_expect_eq(lr.calls, 1, "lost told %d times", lr.calls);
    cr_expect_eq(lr.why, HILOCK_ELOST);
    cr_expect_eq(hilock_hold_lost(g.hold), 1);
    cr_expect_eq(hilock_hold_extend(g.hold, 5000, NULL, NULL), HILOCK_ELOST);
    cr_expect_eq(release_now(&e, g.hold), HILOCK_ELOST);
    cr_expect_eq(held_count(&e.r, names, 3), 0, "the name still held is released too");
    hilock_client_free(a);
}

Test(multi, extend_extends_every_name) {
    hilock_client *a = lockenv_client(&e);
    const char *names[] = {"ex-1", "ex-2"};
    hilock_acquire_opts o = opts_wait_lease(-1, 2000);
    o.no_renew = 1;
    got g = multi_now(e.base, a, names, 2, &o, 5000);
    cr_assert_eq(g.status, 0);
    rel r = {0, 0};
    cr_assert_eq(hilock_hold_extend(g.hold, 20000, rel_cb, &r), 0);
    test_loop_until(e.base, &r.calls, 5000);
    test_loop_for(e.base, 50);
    cr_expect_eq(r.calls, 1);
    cr_expect_eq(r.status, 0);
    for (int i = 0; i < 2; i++) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "PTTL %s", prim_key(names[i], ""));
        cr_expect_gt(test_redis_int(&e.r, cmd), 15000, "%s not extended", names[i]);
    }
    cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(a);
}

/* ---- The client's end, the bad cases ---------------------------------------- */

static void closed_cb(void *data) { ++*(int *)data; }

Test(multi, the_clients_end_cancels_a_wait_and_releases_a_hold) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e), *c = lockenv_client(&e);
    const char *names[] = {"end-1", "end-2"};
    got other = acquire_now(&e, b, "end-2", NULL);
    got w = {0, 0, NULL, 0};
    hilock_acquire_opts brief = opts_wait_lease(-1, 500);
    cr_assert_eq(hilock_acquire_multi(a, names, 2, &brief, got_cb, &w, NULL), 0);
    test_loop_for(e.base, 200);
    cr_expect_eq(lock_exists(&e.r, "end-1"), 1, "the first name is held while the second is awaited");
    hilock_client_free(a);
    cr_expect_eq(w.calls, 1, "the wait ended before hilock_client_free returned");
    cr_expect_eq(w.status, HILOCK_ECANCELED);
    cr_assert_eq(release_now(&e, other.hold), 0);
    /* The freed client's first name is abandoned, as a freed client's
     * holds are: free at its lease's end. Then a held multi-lock, and
     * hilock_client_close: both names released. */
    got h = multi_now(e.base, c, names, 2, NULL, 5000);
    cr_assert_eq(h.status, 0);
    int closed = 0;
    cr_assert_eq(hilock_client_close(c, closed_cb, &closed), 0);
    cr_expect_eq(hilock_release(h.hold, NULL, NULL), HILOCK_EINVAL, "released by the close");
    test_loop_until(e.base, &closed, 5000);
    cr_expect_eq(held_count(&e.r, names, 2), 0);
    cr_expect_eq(lock_exists(&e.r, "end-1"), 0, "the freed client's first name");
    hilock_client_free(b);
}

Test(multi, bad_cases_are_refused) {
    hilock_client *a = lockenv_client(&e);
    const char *two[] = {"bad-1", "bad-2"}, *dup[] = {"bad-1", "bad-2", "bad-1"}, *hole[] = {"bad-1", NULL};
    const char *empty[] = {"bad-1", ""};
    got g = {0, 0, NULL, 0};
    cr_expect_eq(hilock_acquire_multi(NULL, two, 2, NULL, got_cb, &g, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_acquire_multi(a, NULL, 2, NULL, got_cb, &g, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_acquire_multi(a, two, 0, NULL, got_cb, &g, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_acquire_multi(a, two, HILOCK_MULTI_MAX + 1, NULL, got_cb, &g, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_acquire_multi(a, two, 2, NULL, NULL, &g, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_acquire_multi(a, dup, 3, NULL, got_cb, &g, NULL), HILOCK_EINVAL);
    cr_expect_not_null(strstr(hilock_client_errstr(a), "twice"), "%s", hilock_client_errstr(a));
    cr_expect_eq(hilock_acquire_multi(a, hole, 2, NULL, got_cb, &g, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_acquire_multi(a, empty, 2, NULL, got_cb, &g, NULL), HILOCK_EINVAL);
    hilock_owner *ow = hilock_owner_new(a);
    hilock_acquire_opts o = opts_wait(-1);
    o.owner = ow;
    cr_expect_eq(hilock_acquire_multi(a, two, 2, &o, got_cb, &g, NULL), HILOCK_EINVAL);
    hilock_owner_free(ow);
    cr_expect_eq(hilock_multi_cancel(NULL), HILOCK_EINVAL);
    test_loop_for(e.base, 100);
    cr_expect_eq(g.calls, 0, "a refused call has no callback");
    /* What a multi-lock's hold does not do. */
    got h = multi_now(e.base, a, two, 2, NULL, 5000);
    cr_assert_eq(h.status, 0);
    hilock_script *s = NULL;
    cr_assert_eq(hilock_script_new(&s, "return 1"), 0);
    cr_expect_eq(hilock_hold_eval(h.hold, s, 0, NULL, 0, NULL, NULL, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_hold_on_revoke(h.hold, NULL, NULL), HILOCK_EINVAL);
    hilock_script_free(s);
    cr_expect_eq(release_now(&e, h.hold), 0);
    hilock_client_free(a);
}

/* Over Redlock (here one master) the names are taken one at a time, each
 * through its quorum: all of them, released together. */
/* A client that does not know yet that its server is no Cluster groups
 * names by slot: two names of one slot, then one of another, are a group
 * of two among three. Taken, not a crash. */
Test(multi, a_fresh_client_takes_a_slots_group_and_then_the_rest) {
    cr_assert_eq(cluster_slot_of("s410"), cluster_slot_of("s3018"), "the names no longer share a slot");
    cr_assert_neq(cluster_slot_of("s410"), cluster_slot_of("zz"));
    const char *names[] = {"s410", "s3018", "zz"};
    hilock_client *a = lockenv_client(&e);
    got g = multi_now(e.base, a, names, 3, NULL, 5000);
    cr_assert_eq(g.status, 0, "%s", hilock_strerror(g.status));
    cr_expect_eq(held_count(&e.r, names, 3), 3);
    cr_expect_eq(release_now(&e, g.hold), 0);
    cr_expect_eq(held_count(&e.r, names, 3), 0);
    hilock_client_free(a);
}

/* The callback runs from the loop, so it may free the client, however the
 * outcome came (the names' one script, or a single wait, or a failure). */
static hilock_client *freed_in_cb;
static int free_cb_calls;
static void free_in_cb(hilock_hold *h, int status, void *data) {
    (void)h;
    (void)status;
    (void)data;
    free_cb_calls++;
    hilock_client_free(freed_in_cb);
}

Test(multi, the_callback_may_free_the_client) {
    hilock_client *b = lockenv_client(&e);
    for (int kind = 0; kind < 3; kind++) {
        /* names of their own: a freed client's keys stay for their lease */
        char na[16], nb[16];
        snprintf(na, sizeof(na), "fc-a-%d", kind);
        snprintf(nb, sizeof(nb), "fc-b-%d", kind);
        const char *names[] = {na, nb};
        freed_in_cb = lockenv_client(&e);
        got warm = acquire_now(&e, freed_in_cb, "fc-warm", NULL); /* it knows its server now */
        cr_assert_eq(release_now(&e, warm.hold), 0);
        got other = {0, 0, NULL, 0};
        if (kind > 0) other = acquire_now(&e, b, nb, NULL);
        hilock_acquire_opts o = opts_wait(kind == 2 ? 0 : 5000);
        free_cb_calls = 0;
        cr_assert_eq(hilock_acquire_multi(freed_in_cb, names, 2, &o, free_in_cb, NULL, NULL), 0);
        if (kind == 1) {
            test_loop_for(e.base, 100);
            cr_assert_eq(release_now(&e, other.hold), 0); /* the wait for fc-b is granted */
        }
        test_loop_until(e.base, &free_cb_calls, 5000);
        cr_expect_eq(free_cb_calls, 1, "kind %d: %d calls", kind, free_cb_calls);
        test_loop_for(e.base, 100);
        if (kind == 2) cr_expect_eq(release_now(&e, other.hold), 0);
    }
    hilock_client_free(b);
}

/* The caller's hold lives until its release's callback: its name, fences
 * and loss can be read there, and a second release meanwhile is refused. */
typedef struct relcheck {
    hilock_hold *h;
    uint64_t fence[3];
    int calls, status, lost;
    char name[16];
} relcheck;

static void relcheck_cb(int status, void *data) {
    relcheck *rc = data;
    rc->calls++;
    rc->status = status;
    snprintf(rc->name, sizeof(rc->name), "%s", hilock_hold_name(rc->h));
    for (size_t i = 0; i < 3; i++) rc->fence[i] = hilock_hold_fence_at(rc->h, i);
    rc->lost = hilock_hold_lost(rc->h);
}

Test(multi, the_hold_lives_until_its_release_callback) {
    const char *names[] = {"hl-c", "hl-a", "hl-b"};
    hilock_client *a = lockenv_client(&e);
    got g = multi_now(e.base, a, names, 3, NULL, 5000);
    cr_assert_eq(g.status, 0);
    uint64_t fence[3];
    for (size_t i = 0; i < 3; i++) fence[i] = hilock_hold_fence_at(g.hold, i);
    relcheck rc;
    memset(&rc, 0, sizeof(rc));
    rc.h = g.hold;
    cr_assert_eq(hilock_release(g.hold, relcheck_cb, &rc), 0);
    cr_expect_eq(hilock_release(g.hold, NULL, NULL), HILOCK_EINVAL, "a second release while the first is out");
    cr_expect_eq(hilock_hold_fence_at(g.hold, 2), fence[2]);
    test_loop_until(e.base, &rc.calls, 5000);
    cr_assert_eq(rc.calls, 1);
    cr_expect_eq(rc.status, 0);
    cr_expect_str_eq(rc.name, "hl-c");
    for (size_t i = 0; i < 3; i++) cr_expect_eq(rc.fence[i], fence[i], "name %zu's fence in the callback", i);
    cr_expect_eq(rc.lost, 0);
    cr_expect_eq(held_count(&e.r, names, 3), 0);
    hilock_client_free(a);
}

/* A failure's callback may cancel its own handle: refused, nothing freed
 * twice. */
static hilock_multi *cancel_me;
static int cancel_rc = 1;
static void cancel_in_cb(hilock_hold *h, int status, void *data) {
    (void)h;
    *(int *)data = status;
    cancel_rc = hilock_multi_cancel(cancel_me);
}

Test(multi, a_cancel_inside_its_callback_is_refused) {
    const char *names[] = {"cc-a", "cc-b", "cc-c"};
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got other = acquire_now(&e, b, "cc-b", NULL);
    hilock_acquire_opts once = opts_wait(0);
    int status = 1;
    cr_assert_eq(hilock_acquire_multi(a, names, 3, &once, cancel_in_cb, &status, &cancel_me), 0);
    test_loop_for(e.base, 300);
    cr_expect_eq(status, HILOCK_EBUSY, "%s", hilock_strerror(status));
    cr_expect_eq(cancel_rc, HILOCK_EINVAL);
    cr_expect_eq(held_count(&e.r, names, 3), 1, "only the other client's name");
    cr_expect_eq(release_now(&e, other.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* A deadline of 1 ms never fails the call itself: its end is told by the
 * callback, as any (the clock may tick between the call and its try):
 * ETIMEDOUT, or EDEADLINE when the try was still out at the deadline. */
Test(multi, a_deadline_of_one_ms_is_told_by_the_callback) {
    const char *names[] = {"dl-a", "dl-b"};
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got other = acquire_now(&e, b, "dl-a", NULL);
    hilock_acquire_opts o = opts_wait(1);
    static got g[400];
    memset(g, 0, sizeof(g));
    for (int i = 0; i < 400; i++) {
        cr_assert_eq(hilock_acquire_multi(a, names, 2, &o, got_cb, &g[i], NULL), 0, "call %d", i);
        if (i % 50 == 0) test_loop_for(e.base, 1);
    }
    long long until = test_now_ms() + 10000;
    int done = 0;
    while (done < 400 && test_now_ms() < until) {
        test_loop_for(e.base, 10);
        done = 0;
        for (int i = 0; i < 400; i++) done += g[i].calls;
    }
    for (int i = 0; i < 400; i++) {
        cr_expect_eq(g[i].calls, 1, "call %d: %d callbacks", i, g[i].calls);
        /* the wait ran out, or the try it had out did not come back within 1 ms */
        cr_expect(g[i].status == HILOCK_ETIMEDOUT || g[i].status == HILOCK_EDEADLINE, "call %d: %s", i,
                  hilock_strerror(g[i].status));
    }
    cr_expect_eq(release_now(&e, other.hold), 0);
    cr_expect_eq(held_count(&e.r, names, 2), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(multi, over_redlock_the_names_are_taken_one_at_a_time) {
    char url[96];
    snprintf(url, sizeof(url), "redlock://127.0.0.1:%d", e.r.port);
    hilock_client *a = lockenv_client_url(&e, url, 0);
    const char *names[] = {"rl-1", "rl-2", "rl-3"};
    long long scripts = script_calls_of(&e.r);
    got g = multi_now(e.base, a, names, 3, NULL, 5000);
    cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(a));
    cr_expect_eq(held_count(&e.r, names, 3), 3);
    cr_expect_geq(script_calls_of(&e.r) - scripts, 3, "one try per name");
    cr_expect_eq(release_now(&e, g.hold), 0);
    cr_expect_eq(held_count(&e.r, names, 3), 0);
    hilock_client_free(a);
}

/* ---- multi_cluster ------------------------------------------------------------ */

static clusterenv ce;
static void csetup(void) { clusterenv_start(&ce); }
static void cteardown(void) { clusterenv_stop(&ce); }

TestSuite(multi_cluster, .init = csetup, .fini = cteardown, .timeout = 120);

Test(multi_cluster, names_over_three_masters_taken_together_without_deadlock) {
    hilock_client *cs[3];
    for (int i = 0; i < 3; i++) cs[i] = cluster_client_within(&ce, ce.cl.node[i].url, 0);
    const char *names[] = {"cm-0", "cm-1", "cm-2", "cm-3", "cm-4", "cm-5", "cm-6", "cm-7"};
    test_redis *masters[8];
    int distinct = 0;
    for (int i = 0; i < 8; i++) {
        masters[i] = test_cluster_master_of(&ce.cl, cluster_slot_of(names[i]));
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= masters[j] == masters[i];
        distinct += !seen;
    }
    cr_assert_eq(distinct, 3, "the names are on %d masters", distinct);
    got g = multi_now(ce.base, cs[0], names, 8, NULL, 10000);
    cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(cs[0]));
    for (int i = 0; i < 8; i++) cr_expect_eq(lock_exists(masters[i], names[i]), 1, "%s", names[i]);
    cr_expect_eq(cluster_give_back(&ce, g.hold), 0);
    for (int i = 0; i < 8; i++) cr_expect_eq(lock_exists(masters[i], names[i]), 0, "%s", names[i]);
    contend(ce.base, cs, 3, "cdl", 240);
    for (int i = 0; i < 3; i++) hilock_client_free(cs[i]);
}

/* An acquire callback that records and releases at once. */
static void got_and_give_back(hilock_hold *h, int status, void *data) {
    got_cb(h, status, data);
    if (status == 0) cr_expect_eq(hilock_release(h, NULL, NULL), 0);
}

/* A multi-lock held, and others waiting, while the master of one of its
 * names fails over (graceful): the hold lives on, every wait ends
 * granted, one holder per name. */
Test(multi_cluster, a_failover_under_held_and_waiting_multi_locks) {
    hilock_client *cs[2];
    for (int i = 0; i < 2; i++) cs[i] = cluster_client_within(&ce, ce.cl.url, 15000);
    const char *names[] = {"fo-0", "fo-1", "fo-2", "fo-3"};
    unsigned slot = cluster_slot_of(names[1]);
    test_redis *m = NULL, *r = NULL;
    cr_assert(cluster_settled_pair(&ce.cl, slot, 20000, &m, &r));
    lostrec lr = {0, 0, 0};
    hilock_acquire_opts o = opts_wait_lease(-1, 20000);
    o.lost_cb = lost_cb;
    o.lost_data = &lr;
    got g = multi_now(ce.base, cs[0], names, 4, &o, 10000);
    cr_assert_eq(g.status, 0);
    got w[3] = {{0, 0, NULL, 0}, {0, 0, NULL, 0}, {0, 0, NULL, 0}};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(hilock_acquire_multi(cs[1], names + i, 2, NULL, got_and_give_back, &w[i], NULL), 0);
    test_loop_for(ce.base, 200);
    cr_assert(cluster_fail_over_to(&ce, slot, m, r, 30000), "slot %u did not fail over to its replica", slot);
    test_loop_for(ce.base, 1000);
    cr_expect_eq(hilock_hold_lost(g.hold), 0, "the hold lived through the failover");
    cr_expect_eq(lr.calls, 0);
    for (int i = 0; i < 3; i++) cr_expect_eq(w[i].calls, 0, "wait %d granted while held", i);
    cr_expect_eq(cluster_give_back(&ce, g.hold), 0);
    for (int i = 0; i < 3; i++) {
        test_loop_until(ce.base, &w[i].calls, 15000);
        cr_expect_eq(w[i].status, 0, "wait %d: %s", i, hilock_strerror(w[i].status));
    }
    test_loop_for(ce.base, 300);
    for (int i = 0; i < 4; i++) {
        test_redis *at = test_cluster_master_of(&ce.cl, cluster_slot_of(names[i]));
        cr_expect_eq(lock_exists(at, names[i]), 0, "%s left behind", names[i]);
    }
    for (int i = 0; i < 2; i++) hilock_client_free(cs[i]);
}

/* ---- multi_sentinel ----------------------------------------------------------- */

static test_sentinel sn;
static void ssetup(void) { lockenv_start_sentinels(&e, &sn); }
static void steardown(void) { lockenv_stop_sentinels(&e, &sn); }

TestSuite(multi_sentinel, .init = ssetup, .fini = steardown, .timeout = 90);

/* Under Sentinel the master is one node: free names are taken by one
 * script there; and with wait_replicas, one at a time, each confirmed. */
Test(multi_sentinel, on_the_master_at_once_or_one_by_one_with_wait_replicas) {
    hilock_config cfg;
    lockenv_config(&cfg, sn.url);
    cfg.request_timeout_ms = 8000;
    hilock_client *a = lockenv_client_cfg(&e, &cfg);
    const char *names[] = {"sn-1", "sn-2", "sn-3"};
    got warm = multi_now(e.base, a, names, 1, NULL, 8000); /* the client knows its master */
    cr_assert_eq(warm.status, 0, "%s (%s)", hilock_strerror(warm.status), hilock_client_errstr(a));
    cr_assert_eq(release_now(&e, warm.hold), 0);
    long long scripts = script_calls_of(&sn.node[0]);
    got g = multi_now(e.base, a, names, 3, NULL, 8000);
    cr_assert_eq(g.status, 0);
    cr_expect_eq(script_calls_of(&sn.node[0]) - scripts, 1, "one script for the three");
    cr_expect_eq(held_count(&sn.node[0], names, 3), 3);
    cr_expect_eq(release_now(&e, g.hold), 0);
    cr_expect_eq(held_count(&sn.node[0], names, 3), 0);
    cfg.wait_replicas = 1;
    cfg.wait_timeout_ms = 1000;
    hilock_client *b = lockenv_client_cfg(&e, &cfg);
    got h = multi_now(e.base, b, names, 3, NULL, 8000);
    cr_assert_eq(h.status, 0, "%s (%s)", hilock_strerror(h.status), hilock_client_errstr(b));
    cr_expect_eq(held_count(&sn.node[1], names, 3), 3, "the replica has every name");
    cr_expect_eq(release_now(&e, h.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}
