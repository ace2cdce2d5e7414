/* Leader election: hilock_campaign, hilock_resign, hilock_leader,
 * hilock_observe.
 *
 * election:         a campaign leads with a strictly larger epoch than the
 *                   leader before; others wait and lead at a resign at
 *                   once, or at a dead leader's lease end; the leader read
 *                   once; an observer reports every change once, in epoch
 *                   order, every tenure however short, also one missed
 *                   while its connection was down; a cancel racing
 *                   the grant leaves no leader;
 *                   stop and the client's end; the bad cases.
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
    memset(&s, 0, sizeof(s));
    hilock_observer *ob = NULL;
    cr_assert_eq(hilock_observe(o, "obs", seen_cb, &s, &ob), 0);
    cr_expect_eq(s.calls, 0, "never from inside the call");
    wait_calls(e.base, &s, 1, 3000);
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
    memset(&s, 0, sizeof(s));
    hilock_observer *ob = NULL;
    cr_assert_eq(hilock_observe(o, "miss", seen_cb, &s, &ob), 0);
    wait_calls(e.base, &s, 1, 3000);
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
    memset(&s, 0, sizeof(s));
    hilock_observer *ob = NULL;
    cr_assert_eq(hilock_observe(o, "end", seen_cb, &s, &ob), 0);
    wait_calls(e.base, &s, 1, 3000);
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
        memset(&s, 0, sizeof(s));
        hilock_observer *ob = NULL;
        cr_assert_eq(hilock_observe(b, names[i], seen_cb, &s, &ob), 0);
        wait_calls(ce.base, &s, 1, 5000);
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
    memset(&s, 0, sizeof(s));
    hilock_observer *ob = NULL;
    cr_assert_eq(hilock_observe(cs[2], name, seen_cb, &s, &ob), 0);
    wait_calls(ce.base, &s, 1, 5000);
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
    memset(&s, 0, sizeof(s));
    hilock_observer *ob = NULL;
    cr_assert_eq(hilock_observe(o, "sel", seen_cb, &s, &ob), 0);
    wait_calls(e.base, &s, 1, 5000);
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
