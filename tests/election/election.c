/* Leader election: hilock_campaign, hilock_resign, hilock_leader,
 * hilock_observe.
 *
 * election:         a campaign leads with a strictly larger epoch than the
 *                   leader before; others wait and lead at a resign at
 *                   once, or at a dead leader's lease end; the leader read
 *                   once; an observer reports every change once, in epoch
 *                   order, every tenure however short, also one missed
 *                   while its connection was down, every tenure in
 *                   order while its reads race the messages, a dead
 *                   leader whose fence key is gone; a cancel racing the
 *                   grant leaves no leader; stop and the client's end
 *                   (a stop inside the last call refused); the bad cases.
 * election_cluster: campaigns and an observer on a 3+3 cluster, and
 *                   through a failover of the election's master.
 * election_sentinel: a campaign, the leader read and observed, under
 *                   Sentinel. */
#include "support/lockenv.h"
#include "support/clusterenv.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

typedef struct seen {
    int calls;
    int status;
    uint64_t epoch[32];
    char value[32][64];
    long long at_ms[32];
} seen;

static void seen_cb(int status, uint64_t epoch, const char *value, size_t len, void *data) {
    seen *s = data;
    int i = s->calls < 32 ? s->calls : 31;
    s->status = status;
    s->epoch[i] = epoch;
    snprintf(s->value[i], sizeof(s->value[i]), "%.*s", (int)len, value);
    s->at_ms[i] = test_now_ms();
    s->calls++;
}

static got campaign_now(struct event_base *base, hilock_client *c, const char *name, const char *value,
                        const hilock_acquire_opts *o) {
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_campaign(c, name, value, o, got_cb, &g, NULL), 0);
    test_loop_until(base, &g.calls, 5000);
    cr_assert_eq(g.calls, 1);
    return g;
}

static seen leader_now(struct event_base *base, hilock_client *c, const char *name) {
    seen s;
    memset(&s, 0, sizeof(s));
    cr_assert_eq(hilock_leader(c, name, seen_cb, &s), 0);
    test_loop_until(base, &s.calls, 5000);
    cr_assert_eq(s.calls, 1);
    return s;
}

/* Run the loop until observer record s has n calls (or ms). */
static void wait_calls(struct event_base *base, seen *s, int n, int ms) {
    long long until = test_now_ms() + ms;
    while (s->calls < n && test_now_ms() < until) test_loop_for(base, 10);
}

/* Observe `name` from c into s (cleared) and run the loop until the
 * observer's first report, which never comes from inside the call. */
static hilock_observer *observe_now(struct event_base *base, hilock_client *c, const char *name, seen *s, int ms) {
    hilock_observer *ob = NULL;
    memset(s, 0, sizeof(*s));
    cr_assert_eq(hilock_observe(c, name, seen_cb, s, &ob), 0);
    cr_expect_eq(s->calls, 0, "never from inside the call");
    wait_calls(base, s, 1, ms);
    cr_assert_geq(s->calls, 1, "%s: no first report in %d ms", name, ms);
    return ob;
}

/* ... until its last report names `value`. */
static void wait_value(struct event_base *base, seen *s, const char *value, int ms) {
    long long until = test_now_ms() + ms;
    while ((s->calls == 0 || strcmp(s->value[(s->calls < 32 ? s->calls : 32) - 1], value) != 0) &&
           test_now_ms() < until)
        test_loop_for(base, 10);
}

TestSuite(election, .init = setup, .fini = teardown, .timeout = 60);

Test(election, a_campaign_leads_and_the_next_leads_at_the_resign) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    seen s = leader_now(e.base, b, "e");
    cr_expect_eq(s.status, 0);
    cr_expect_eq(s.epoch[0], 0, "nobody leads yet");
    cr_expect_str_eq(s.value[0], "");
    got ga = campaign_now(e.base, a, "e", "10.0.0.1:80", NULL);
    cr_assert_eq(ga.status, 0, "%s", hilock_strerror(ga.status));
    uint64_t epoch_a = hilock_hold_fence(ga.hold);
    s = leader_now(e.base, b, "e");
    cr_expect_eq(s.epoch[0], epoch_a);
    cr_expect_str_eq(s.value[0], "10.0.0.1:80");
    /* The election is not the mutex of the same name. */
    got m = acquire_now(&e, b, "e", NULL);
    cr_expect_eq(m.status, 0);
    release_now(&e, m.hold);
    /* b campaigns, waits, and leads at a's resign. */
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_campaign(b, "e", "10.0.0.2:80", NULL, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 200);
    cr_assert_eq(gb.calls, 0, "two leaders");
    long long t = test_now_ms();
    rel r = {0, 0};
    cr_assert_eq(hilock_resign(ga.hold, rel_cb, &r), 0);
    test_loop_until(e.base, &gb.calls, 5000);
    cr_assert_eq(gb.status, 0);
    cr_expect_lt(gb.at_ms - t, 500, "led %lld ms after the resign", gb.at_ms - t);
    cr_expect_gt(hilock_hold_fence(gb.hold), epoch_a, "epochs grow");
    s = leader_now(e.base, a, "e");
    cr_expect_str_eq(s.value[0], "10.0.0.2:80");
    /* A leader's guarded write. */
    hilock_script *sc = NULL;
    cr_assert_eq(hilock_script_new(&sc, "return redis.call('INCR', KEYS[1])"), 0);
    char k[256];
    hilock_hold_key(gb.hold, "n", k, sizeof(k));
    const char *keys[] = {k};
    cr_assert_eq(hilock_hold_eval(gb.hold, sc, 1, keys, 0, NULL, NULL, NULL, NULL), 0);
    hilock_script_free(sc);
    test_loop_for(e.base, 100);
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", k), 1, "the leader's write");
    cr_assert_eq(hilock_resign(gb.hold, NULL, NULL), 0);
    test_loop_for(e.base, 100);
    s = leader_now(e.base, a, "e");
    cr_expect_eq(s.epoch[0], 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* An observer reports who leads, then each change once: elected (its
 * message), resigned, elected again, a leader dead at its lease's end. */
Test(election, an_observer_reports_every_change_once) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e), *o = lockenv_client(&e);
    seen s;
    hilock_observer *ob = observe_now(e.base, o, "obs", &s, 3000);
    cr_assert_eq(s.calls, 1);
    cr_expect_eq(s.epoch[0], 0);
    test_loop_for(e.base, 100);
    cr_expect_eq(test_redis_int(&e.r, "PUBSUB NUMSUB %s", prim_key("obs", ":el:ch")), 1,
                 "an observer keeps the election's channel subscribed");
    long long t = test_now_ms();
    got ga = campaign_now(e.base, a, "obs", "a", NULL);
    wait_calls(e.base, &s, 2, 3000);
    cr_assert_eq(s.calls, 2);
    cr_expect_eq(s.epoch[1], hilock_hold_fence(ga.hold));
    cr_expect_str_eq(s.value[1], "a");
    cr_expect_lt(s.at_ms[1] - t, 500, "seen %lld ms after", s.at_ms[1] - t);
    cr_assert_eq(release_now(&e, ga.hold), 0);
    wait_calls(e.base, &s, 3, 3000);
    cr_expect_eq(s.epoch[2], 0, "resigned: nobody");
    /* A leader that dies: no renewal, lease 400 ms; b waits. */
    hilock_acquire_opts lease = opts_wait_lease(0, 400);
    lease.no_renew = 1;
    got gb = campaign_now(e.base, b, "obs", "b", &lease);
    wait_calls(e.base, &s, 4, 3000);
    cr_expect_str_eq(s.value[3], "b");
    got gc = {0, 0, NULL, 0};
    cr_assert_eq(hilock_campaign(a, "obs", "c", NULL, got_cb, &gc, NULL), 0);
    test_loop_until(e.base, &gc.calls, 5000);
    cr_assert_eq(gc.status, 0);
    wait_value(e.base, &s, "c", 3000);
    /* The dead leader's end and the new one may come as one change. */
    cr_expect_str_eq(s.value[s.calls - 1], "c");
    cr_expect_eq(s.epoch[s.calls - 1], hilock_hold_fence(gc.hold));
    for (int i = 2; i < s.calls; i++)
        if (s.epoch[i] != 0 && s.epoch[i - 1] != 0)
            cr_expect_gt(s.epoch[i], s.epoch[i - 1], "epochs out of order at %d", i);
    test_loop_for(e.base, 300);
    int calls = s.calls;
    cr_assert_eq(hilock_observe_stop(ob), 0);
    release_now(&e, gc.hold);
    release_now(&e, gb.hold);
    test_loop_for(e.base, 300);
    cr_expect_eq(s.calls, calls, "called after its stop");
    hilock_client_free(a);
    hilock_client_free(b);
    hilock_client_free(o);
}

/* Observer record whose callback stops its observer at its third call. */
typedef struct stopper {
    seen s;
    hilock_observer *ob;
} stopper;

static void stopper_cb(int status, uint64_t epoch, const char *value, size_t len, void *data) {
    stopper *st = data;
    seen_cb(status, epoch, value, len, &st->s);
    if (st->s.calls == 3) cr_expect_eq(hilock_observe_stop(st->ob), 0);
}

/* Tenures shorter than a read of the leader (elected and resigned back to
 * back, 10 times): each is reported, in order, with nobody between, as
 * the messages said; an observer that stops itself in its callback with
 * changes still queued gets no call after. */
Test(election, every_tenure_is_reported_however_short) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e), *o = lockenv_client(&e);
    seen s;
    static stopper st;
    memset(&s, 0, sizeof(s));
    memset(&st, 0, sizeof(st));
    hilock_observer *ob = NULL;
    cr_assert_eq(hilock_observe(o, "brief", seen_cb, &s, &ob), 0);
    cr_assert_eq(hilock_observe(o, "brief", stopper_cb, &st, &st.ob), 0);
    wait_calls(e.base, &s, 1, 3000);
    test_loop_for(e.base, 100);
    uint64_t epochs[10];
    for (int i = 0; i < 10; i++) {
        got g = campaign_now(e.base, i % 2 ? a : b, "brief", i % 2 ? "a" : "b", NULL);
        cr_assert_eq(g.status, 0);
        epochs[i] = hilock_hold_fence(g.hold);
        cr_assert_eq(release_now(&e, g.hold), 0);
    }
    wait_calls(e.base, &s, 21, 5000);
    test_loop_for(e.base, 200);
    cr_assert_eq(s.calls, 21, "%d reports of 21", s.calls);
    cr_expect_eq(s.epoch[0], 0);
    for (int i = 0; i < 10; i++) {
        cr_expect_eq(s.epoch[1 + 2 * i], epochs[i], "tenure %d", i);
        cr_expect_str_eq(s.value[1 + 2 * i], i % 2 ? "a" : "b");
        cr_expect_eq(s.epoch[2 + 2 * i], 0, "after tenure %d: nobody", i);
    }
    cr_expect_eq(st.s.calls, 3, "called %d times, stopped at 3", st.s.calls);
    cr_assert_eq(hilock_observe_stop(ob), 0);
    hilock_client_free(a);
    hilock_client_free(b);
    hilock_client_free(o);
}

/* A standby's campaign cancelled `turns` loop turns after the leader
 * resigned, at every point of its race for the leadership: its callback
 * runs once, ECANCELED unless it led first, and a cancelled campaign
 * leaves no leader behind. */
Test(election, a_cancel_racing_the_grant_leaves_no_leader_behind) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    int cancelled = 0, led = 0;
    for (int turns = 0; turns < 12; turns++) {
        got ga = campaign_now(e.base, a, "race", "a", NULL);
        cr_assert_eq(ga.status, 0);
        got gb = {0, 0, NULL, 0};
        hilock_wait *w = NULL;
        cr_assert_eq(hilock_campaign(b, "race", "b", NULL, got_cb, &gb, &w), 0);
        test_loop_for(e.base, 50);
        cr_assert_eq(hilock_resign(ga.hold, NULL, NULL), 0);
        for (int i = 0; i < turns && gb.calls == 0; i++) event_base_loop(e.base, EVLOOP_ONCE);
        int rc = gb.calls ? HILOCK_EINVAL : hilock_wait_cancel(w);
        test_loop_until(e.base, &gb.calls, 5000);
        test_loop_for(e.base, 100);
        cr_expect_eq(gb.calls, 1, "turn %d: %d callbacks", turns, gb.calls);
        if (rc == 0) {
            cr_expect_eq(gb.status, HILOCK_ECANCELED, "turn %d: %s", turns, hilock_strerror(gb.status));
            seen now = leader_now(e.base, a, "race");
            cr_expect_eq(now.epoch[0], 0, "turn %d: a cancelled campaign leads", turns);
            cancelled++;
        } else if (gb.status == 0) {
            led++;
            cr_expect_eq(release_now(&e, gb.hold), 0);
        }
    }
    cr_log_info("campaign cancels: %d cancelled, %d led first", cancelled, led);
    cr_expect_gt(cancelled, 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* A change while the observer's subscriber connection is down: read
 * again when it is subscribed again. */
Test(election, a_change_missed_while_disconnected_is_reported_after) {
    hilock_client *a = lockenv_client(&e), *o = lockenv_client(&e);
    seen s;
    hilock_observer *ob = observe_now(e.base, o, "miss", &s, 3000);
    test_loop_for(e.base, 100);
    cr_assert(test_redis_int(&e.r, "CLIENT KILL TYPE pubsub") >= 1);
    got ga = campaign_now(e.base, a, "miss", "a", NULL);
    wait_calls(e.base, &s, 2, 5000);
    cr_assert_eq(s.calls, 2);
    cr_expect_eq(s.epoch[1], hilock_hold_fence(ga.hold));
    release_now(&e, ga.hold);
    wait_calls(e.base, &s, 3, 5000);
    cr_expect_eq(s.epoch[2], 0);
    cr_assert_eq(hilock_observe_stop(ob), 0);
    hilock_client_free(a);
    hilock_client_free(o);
}

Test(election, the_clients_end_is_a_last_call_and_the_bad_cases_are_refused) {
    hilock_client *a = lockenv_client(&e), *o = lockenv_client(&e);
    seen s;
    hilock_observer *ob = observe_now(e.base, o, "end", &s, 3000);
    hilock_client_free(o);
    cr_expect_eq(s.calls, 2);
    cr_expect_eq(s.status, HILOCK_ECANCELED);
    /* Freed before the first read was answered. */
    o = lockenv_client(&e);
    memset(&s, 0, sizeof(s));
    cr_assert_eq(hilock_observe(o, "end", seen_cb, &s, &ob), 0);
    hilock_client_free(o);
    cr_expect_eq(s.calls, 1);
    cr_expect_eq(s.status, HILOCK_ECANCELED);
    /* Bad cases. */
    char big[HILOCK_VALUE_MAX + 2];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cr_expect_eq(hilock_campaign(a, "x", big, NULL, got_cb, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_campaign(a, "x", NULL, NULL, got_cb, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_campaign(a, "", "v", NULL, got_cb, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_leader(a, "x", NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_observe(a, "x", seen_cb, &s, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_observe_stop(NULL), HILOCK_EINVAL);
    got g = campaign_now(e.base, a, "x", "one", NULL);
    cr_assert_eq(g.status, 0);
    cr_expect_eq(hilock_campaign(a, "x", "two", NULL, got_cb, NULL, NULL), HILOCK_EINVAL,
                 "another value while leading");
    cr_expect(strstr(hilock_client_errstr(a), "another value"), "%s", hilock_client_errstr(a));
    got m = acquire_now(&e, a, "x", NULL);
    cr_expect_eq(hilock_resign(m.hold, NULL, NULL), HILOCK_EINVAL, "not a campaign's hold");
    release_now(&e, m.hold);
    cr_assert_eq(hilock_resign(g.hold, NULL, NULL), 0);
    test_loop_for(e.base, 100);
    char url[96];
    snprintf(url, sizeof(url), "redlock://127.0.0.1:%d", e.r.port);
    hilock_client *rl = lockenv_client_url(&e, url, 0);
    cr_expect_eq(hilock_campaign(rl, "x", "v", NULL, got_cb, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_leader(rl, "x", seen_cb, &s), HILOCK_EINVAL);
    cr_expect_eq(hilock_observe(rl, "x", seen_cb, &s, &ob), HILOCK_EINVAL);
    hilock_client_free(rl);
    hilock_client_free(a);
}

/* An observer whose callback stops it on any error, as a generic handler
 * would: inside the client's last call (HILOCK_ECANCELED) the stop is
 * refused, not a second free; on both ways a client ends. */
typedef struct stop_on_error {
    hilock_observer *ob;
    int calls, stop_rc;
} stop_on_error;

static void stop_on_error_cb(int status, uint64_t epoch, const char *value, size_t len, void *data) {
    stop_on_error *st = data;
    (void)epoch;
    (void)value;
    (void)len;
    st->calls++;
    if (status != 0) st->stop_rc = hilock_observe_stop(st->ob);
}

Test(election, a_stop_inside_the_last_call_is_refused) {
    for (int close = 0; close < 2; close++) {
        hilock_client *o = lockenv_client(&e);
        stop_on_error st = {NULL, 0, 0};
        cr_assert_eq(hilock_observe(o, "last-call", stop_on_error_cb, &st, &st.ob), 0);
        test_loop_for(e.base, 200);
        cr_assert_eq(st.calls, 1);
        if (close) {
            cr_assert_eq(hilock_client_close(o, NULL, NULL), 0);
            test_loop_for(e.base, 300);
        } else {
            hilock_client_free(o);
        }
        cr_expect_eq(st.calls, 2, "%s: %d calls", close ? "close" : "free", st.calls);
        cr_expect_eq(st.stop_rc, HILOCK_EINVAL, "%s: stop inside the last call: %s", close ? "close" : "free",
                     hilock_strerror(st.stop_rc));
    }
}

/* A leader that dies after its fence key is gone (it expires fence_ttl_s
 * after it was made, or is deleted): the observer's read at the lease end
 * finds nobody, and reports it, though the read cannot say the last epoch. */
Test(election, a_dead_leader_is_reported_once_the_fence_key_is_gone) {
    hilock_client *a = lockenv_client(&e), *o = lockenv_client(&e);
    seen s;
    hilock_observer *ob = observe_now(e.base, o, "unfenced", &s, 3000);
    hilock_acquire_opts opts = opts_wait_lease(5000, 1000);
    got g = campaign_now(e.base, a, "unfenced", "a", &opts);
    cr_assert_eq(g.status, 0);
    wait_calls(e.base, &s, 2, 3000);
    cr_assert_eq(s.epoch[1], hilock_hold_fence(g.hold));
    char key[256];
    hilock_key("hilock:", "unfenced", key, sizeof(key));
    cr_assert_eq(test_redis_int(&e.r, "DEL %s:el:fence", key), 1);
    test_loop_for(e.base, 700); /* a renewal or two: the leader lives on */
    cr_expect_eq(s.calls, 2);
    hilock_client_free(a); /* dies without resigning */
    long long t0 = test_now_ms();
    wait_calls(e.base, &s, 3, 4000);
    cr_assert_eq(s.calls, 3, "the dead leader was never reported gone");
    cr_expect_eq(s.epoch[2], 0);
    cr_log_info("a dead leader without its fence key: nobody reported %lld ms after its end", test_now_ms() - t0);
    cr_assert_eq(hilock_observe_stop(ob), 0);
    hilock_client_free(o);
}

/* Rapid terms, two candidates that resign as soon as they are elected,
 * and three observers whose reads (forced by messages they cannot parse,
 * or by leases of 30 ms ending) race the channel's messages: each
 * observer reports every tenure, in order, each followed by nobody, and
 * all three the same. */
#define RT_TERMS 400 /* the most terms of a run */
typedef struct rapid {
    hilock_client *cand[2];
    int terms, want, stopping, lease_ms, linger_us;
    hilock_hold *held[2];
    uint64_t elected[RT_TERMS + 8];
    int nel;
    struct event_base *base;
} rapid;

typedef struct rapid_seen {
    uint64_t epoch[2 * RT_TERMS + 16];
    int n;
} rapid_seen;

static rapid rt;

static void rapid_seen_cb(int status, uint64_t epoch, const char *value, size_t len, void *data) {
    rapid_seen *s = data;
    (void)value;
    (void)len;
    if (status == 0 && s->n < (int)(sizeof(s->epoch) / sizeof(s->epoch[0]))) s->epoch[s->n++] = epoch;
}

static void rapid_campaign(int i);

static void rapid_resigned(int status, void *data) {
    (void)status;
    if (!rt.stopping) rapid_campaign((int)(intptr_t)data);
}

static const int rapid_index[2] = {0, 1};

static void rapid_term_end(evutil_socket_t fd, short what, void *data) {
    int i = *(const int *)data;
    (void)fd;
    (void)what;
    hilock_resign(rt.held[i], rapid_resigned, (void *)(intptr_t)i);
}

static void rapid_elected(hilock_hold *h, int status, void *data) {
    int i = (int)(intptr_t)data;
    if (status != 0) return;
    rt.held[i] = h;
    if (rt.nel < RT_TERMS + 8) rt.elected[rt.nel++] = hilock_hold_fence(h);
    if (++rt.terms >= rt.want) rt.stopping = 1;
    struct timeval tv = {0, rt.linger_us ? rt.linger_us + rand() % rt.linger_us : 0};
    if (rt.linger_us == 0) hilock_resign(h, rapid_resigned, data);
    else event_base_once(rt.base, -1, EV_TIMEOUT, rapid_term_end, (void *)&rapid_index[i], &tv);
}

static void rapid_campaign(int i) {
    hilock_acquire_opts o = opts_wait_lease(HILOCK_WAIT_FOREVER, (uint32_t)rt.lease_ms);
    char v[16];
    snprintf(v, sizeof(v), "c%d", i);
    cr_assert_eq(hilock_campaign(rt.cand[i], "rapid", v, &o, rapid_elected, (void *)(intptr_t)i, NULL), 0);
}

static void rapid_run(int garbage, int lease_ms, int linger_us, int terms) {
    static rapid_seen seen3[3];
    hilock_observer *ob[3];
    hilock_client *w = lockenv_client(&e);
    memset(&rt, 0, sizeof(rt));
    memset(seen3, 0, sizeof(seen3));
    rt.base = e.base;
    rt.lease_ms = lease_ms;
    rt.linger_us = linger_us;
    rt.want = terms;
    for (int i = 0; i < 3; i++) cr_assert_eq(hilock_observe(w, "rapid", rapid_seen_cb, &seen3[i], &ob[i]), 0);
    test_loop_for(e.base, 200);
    for (int i = 0; i < 2; i++) rt.cand[i] = lockenv_client(&e);
    for (int i = 0; i < 2; i++) rapid_campaign(i);
    char ch[256];
    hilock_key("hilock:", "rapid", ch, sizeof(ch));
    long long until = test_now_ms() + 30000;
    while (!rt.stopping && test_now_ms() < until) {
        if (garbage) test_redis_int(&e.r, "PUBLISH %s:el:ch garbage", ch);
        test_loop_for(e.base, 1);
    }
    test_loop_for(e.base, 500);
    cr_assert(rt.stopping, "only %d terms in 30 s", rt.terms);
    for (int i = 0; i < 3; i++) {
        const rapid_seen *s = &seen3[i];
        int j = s->n > 0 && s->epoch[0] == 0 ? 1 : 0; /* the first state: nobody yet */
        for (int k = 0; k < rt.nel; k++, j += 2) {
            cr_assert_lt(j + 1, s->n, "observer %d: %d reports for %d tenures", i, s->n, rt.nel);
            cr_assert_eq(s->epoch[j], rt.elected[k], "observer %d, report %d: epoch %llu, tenure %d was %llu", i, j,
                         (unsigned long long)s->epoch[j], k, (unsigned long long)rt.elected[k]);
            cr_assert_eq(s->epoch[j + 1], 0, "observer %d, report %d: %llu after tenure %d, not nobody", i, j + 1,
                         (unsigned long long)s->epoch[j + 1], k);
        }
    }
    for (int i = 0; i < 3; i++) hilock_observe_stop(ob[i]);
    for (int i = 0; i < 2; i++) hilock_client_free(rt.cand[i]);
    hilock_client_free(w);
}

Test(election, reads_racing_the_messages_keep_every_tenure_in_order) { rapid_run(1, 2000, 0, 400); }

Test(election, lease_end_reads_racing_the_messages_keep_every_tenure_in_order) { rapid_run(0, 30, 20000, 150); }

/* ---- election_cluster ---------------------------------------------------- */

static clusterenv ce;
static void csetup(void) { clusterenv_start(&ce); }
static void cteardown(void) { clusterenv_stop(&ce); }

TestSuite(election_cluster, .init = csetup, .fini = cteardown, .timeout = 120);

Test(election_cluster, campaigns_and_an_observer) {
    hilock_client *a = NULL, *b = NULL;
    cluster_client_pair(&ce.cl, &ce.loop, &a, &b);
    const char *names[] = {"alpha", "beta", "gamma"};
    for (int i = 0; i < 3; i++) {
        seen s;
        hilock_observer *ob = observe_now(ce.base, b, names[i], &s, 5000);
        cr_assert_eq(s.calls, 1, "%s", names[i]);
        got g = campaign_now(ce.base, a, names[i], "a", NULL);
        cr_assert_eq(g.status, 0);
        wait_calls(ce.base, &s, 2, 5000);
        cr_expect_eq(s.epoch[1], hilock_hold_fence(g.hold), "%s", names[i]);
        got w = {0, 0, NULL, 0};
        cr_assert_eq(hilock_campaign(b, names[i], "b", NULL, got_cb, &w, NULL), 0);
        cr_assert_eq(hilock_resign(g.hold, NULL, NULL), 0);
        test_loop_until(ce.base, &w.calls, 5000);
        cr_assert_eq(w.status, 0, "%s", names[i]);
        /* a's resign, then b's election: two changes, in order. */
        wait_value(ce.base, &s, "b", 5000);
        cr_expect_eq(s.calls, 4, "%s: %d reports", names[i], s.calls);
        cr_expect_eq(s.epoch[2], 0, "%s: a's resign", names[i]);
        cr_expect_str_eq(s.value[s.calls - 1], "b", "%s", names[i]);
        cr_expect_eq(s.epoch[s.calls - 1], hilock_hold_fence(w.hold), "%s", names[i]);
        cr_assert_eq(hilock_observe_stop(ob), 0);
        release_loop(ce.base, w.hold, 5000);
    }
    hilock_client_free(a);
    hilock_client_free(b);
}

/* The master of the election's slot fails over (graceful) under a
 * leader, a waiting campaign and an observer: the leader keeps leading,
 * the observer reports nothing new (its resubscription's read finds the
 * same leader), and a resign after it hands over, seen in order. */
Test(election_cluster, a_failover_under_a_leader_a_campaign_and_an_observer) {
    hilock_client *cs[3];
    for (int i = 0; i < 3; i++) cs[i] = cluster_client_within(&ce, ce.cl.node[i].url, 15000);
    const char *name = "el-failover";
    unsigned slot = cluster_slot_of(name);
    test_redis *m = NULL, *r = NULL;
    cr_assert(cluster_settled_pair(&ce.cl, slot, 20000, &m, &r));
    seen s;
    hilock_observer *ob = observe_now(ce.base, cs[2], name, &s, 5000);
    lostrec lr = {0, 0, 0};
    hilock_acquire_opts o = opts_wait_lease(-1, 20000);
    o.lost_cb = lost_cb;
    o.lost_data = &lr;
    got g = campaign_now(ce.base, cs[0], name, "a", &o);
    cr_assert_eq(g.status, 0);
    got w = {0, 0, NULL, 0};
    cr_assert_eq(hilock_campaign(cs[1], name, "b", NULL, got_cb, &w, NULL), 0);
    wait_calls(ce.base, &s, 2, 5000);
    cr_assert_eq(s.calls, 2, "the leader not observed: %d reports, the last epoch %llu", s.calls,
                 (unsigned long long)s.epoch[s.calls ? s.calls - 1 : 0]);
    test_loop_for(ce.base, 300);
    cr_assert(cluster_fail_over_to(&ce, slot, m, r, 30000), "slot %u did not fail over to its replica", slot);
    test_loop_for(ce.base, 2000);
    cr_expect_eq(hilock_hold_lost(g.hold), 0, "the leader lost its lease in the failover");
    cr_expect_eq(lr.calls, 0);
    cr_expect_eq(w.calls, 0, "the standby led beside the leader");
    cr_expect_eq(s.calls, 2, "%d reports: a failover is no change of leader", s.calls);
    seen now = leader_now(ce.base, cs[2], name);
    uint64_t first = hilock_hold_fence(g.hold);
    cr_expect_eq(now.epoch[0], first, "the promoted replica names the leader");
    cr_assert_eq(hilock_resign(g.hold, NULL, NULL), 0); /* g.hold is gone once it is done */
    test_loop_until(ce.base, &w.calls, 10000);
    cr_assert_eq(w.status, 0, "%s", hilock_strerror(w.status));
    cr_expect_gt(hilock_hold_fence(w.hold), first, "epochs grow across the failover");
    wait_value(ce.base, &s, "b", 5000);
    cr_expect_eq(s.calls, 4, "%d reports", s.calls);
    cr_expect_eq(s.epoch[2], 0);
    cr_expect_eq(s.epoch[3], hilock_hold_fence(w.hold));
    cr_assert_eq(hilock_observe_stop(ob), 0);
    release_loop(ce.base, w.hold, 10000);
    for (int i = 0; i < 3; i++) hilock_client_free(cs[i]);
}

/* ---- election_sentinel ------------------------------------------------------ */

static test_sentinel sn;
static void ssetup(void) { lockenv_start_sentinels(&e, &sn); }
static void steardown(void) { lockenv_stop_sentinels(&e, &sn); }

TestSuite(election_sentinel, .init = ssetup, .fini = steardown, .timeout = 90);

Test(election_sentinel, a_campaign_leads_on_the_master) {
    hilock_config cfg;
    lockenv_config(&cfg, sn.url);
    cfg.request_timeout_ms = 8000;
    hilock_client *a = lockenv_client_cfg(&e, &cfg), *o = lockenv_client_cfg(&e, &cfg);
    seen s;
    hilock_observer *ob = observe_now(e.base, o, "sel", &s, 5000);
    got g = campaign_now(e.base, a, "sel", "a", NULL);
    cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(a));
    wait_value(e.base, &s, "a", 5000);
    cr_expect_eq(s.epoch[s.calls - 1], hilock_hold_fence(g.hold));
    cr_expect_eq(test_redis_int(&sn.node[0], "EXISTS %s", prim_key("sel", ":el")), 1, "not on the master");
    seen l = leader_now(e.base, o, "sel");
    cr_expect_str_eq(l.value[0], "a");
    cr_assert_eq(hilock_resign(g.hold, NULL, NULL), 0);
    wait_value(e.base, &s, "", 5000);
    cr_expect_eq(s.epoch[s.calls - 1], 0);
    cr_assert_eq(hilock_observe_stop(ob), 0);
    hilock_client_free(a);
    hilock_client_free(o);
}
