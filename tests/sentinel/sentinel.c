/* hilock through Redis Sentinel (a master, its replica and three sentinels
 * on loopback, fresh for every test): the lock lands on the master the
 * sentinels name (a majority of them, not a stale one), holds, waiters and
 * the exclusion invariant survive a failover (SENTINEL FAILOVER or kill -9
 * of the master), holds renew in batches there and after a failover, sentinels that are down or unknown names fail cleanly,
 * and the CLI takes a redis-sentinel:// URL. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/clusterenv.h" /* shared, turn, turn_granted: the exclusion check */
#include "support/sentinelenv.h"

static test_sentinel s;
static test_redis stale[2]; /* an unrelated server and a sentinel that monitors it */
static struct event_base *base;
static hilock_loop loop;

static void setup(void) {
    base = event_base_new();
    cr_assert_not_null(base);
    hilock_libevent_init(&loop, base);
}

static void teardown(void) {
    test_sentinel_stop(&s);
    for (int i = 1; i >= 0; i--) test_redis_stop(&stale[i]);
    if (base) event_base_free(base);
    base = NULL;
}

TestSuite(sentinel, .init = setup, .fini = teardown, .timeout = 60);

/* The master, its replica and the sentinels, ready for a failover. */
static void up(void) {
    long long t0 = test_now_ms();
    cr_assert_eq(test_sentinel_start(&s), 0, "the sentinels did not start");
    cr_log_info("sentinel set-up: %lld ms (%s)", test_now_ms() - t0, s.url);
}

/* request_timeout_ms outlasts a failover (about 1 s for SENTINEL FAILOVER,
 * 2-4 s after kill -9 at down-after 1000 ms), so requests wait for the new
 * master. */
static hilock_client *client_tmo(const char *url, uint32_t request_timeout_ms) {
    hilock_config cfg;
    hilock_client *c = NULL;
    hilock_config_init(&cfg);
    cfg.url = url;
    cfg.request_timeout_ms = request_timeout_ms;
    cfg.connect_timeout_ms = 1000;
    cfg.linger_ms = 100;
    int rc = hilock_client_new(&c, &cfg, &loop);
    cr_assert_eq(rc, 0, "hilock_client_new(%s): %s", url, hilock_strerror(rc));
    return c;
}

static hilock_client *client(const char *url) { return client_tmo(url, 8000); }

static got take_opts(hilock_client *c, const char *name, const hilock_acquire_opts *o) {
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(c, name, o, got_cb, &g, NULL), 0);
    test_loop_until(base, &g.calls, 15000);
    cr_assert_eq(g.calls, 1, "no callback for %s", name);
    return g;
}

static got take(hilock_client *c, const char *name) { return take_opts(c, name, NULL); }

static int give_back(hilock_hold *h) {
    rel r = {0, 0};
    cr_assert_eq(hilock_release(h, rel_cb, &r), 0);
    test_loop_until(base, &r.calls, 15000);
    cr_assert_eq(r.calls, 1);
    return r.status;
}

/* ---- Looking at the servers --------------------------------------------------- */

static long long exists_in_db(const test_redis *r, int db, const char *name) {
    char key[256];
    hilock_key("hilock:", name, key, sizeof(key));
    redisContext *k = test_redis_connect(r);
    if (k == NULL) return -1;
    redisReply *sel = redisCommand(k, "SELECT %d", db);
    redisReply *rep = sel && sel->type == REDIS_REPLY_STATUS ? redisCommand(k, "EXISTS %s", key) : NULL;
    long long v = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
    if (sel) freeReplyObject(sel);
    if (rep) freeReplyObject(rep);
    redisFree(k);
    return v;
}

static long long exists_on(const test_redis *r, const char *name) { return exists_in_db(r, 0, name); }

/* The holder's "token" of the lock of `name`, or its "fence" (the fence
 * key's: the last one given); "" if none. */
static char *lock_field(const test_redis *r, const char *name, const char *f, char *out, size_t n) {
    char key[256];
    hilock_key("hilock:", name, key, sizeof(key));
    redisContext *k = test_redis_connect(r);
    redisReply *rep = k ? redisCommand(k, "GET %s%s", key, strcmp(f, "fence") == 0 ? ":fence" : "") : NULL;
    snprintf(out, n, "%.*s", rep && rep->type == REDIS_REPLY_STRING ? (int)strcspn(rep->str, " ") : 0,
             rep && rep->type == REDIS_REPLY_STRING ? rep->str : "");
    if (rep) freeReplyObject(rep);
    if (k) redisFree(k);
    return out;
}

static long long lock_pttl(const test_redis *r, const char *name) {
    char key[256];
    hilock_key("hilock:", name, key, sizeof(key));
    return test_redis_int(r, "PTTL %s", key);
}

/* s.url with `first` put before its sentinels ("host:port,") and `tail`
 * instead of its "#hlmaster" (NULL: kept). */
static char *url_with(char *out, size_t n, const char *first, const char *tail) {
    const char *hosts = s.url + strlen("redis-sentinel://");
    const char *hash = strrchr(hosts, '#');
    snprintf(out, n, "redis-sentinel://%s%.*s%s", first ? first : "", (int)(hash - hosts), hosts,
             tail ? tail : hash);
    return out;
}

/* Run the loop until a majority of the sentinels name a new master (the
 * clients keep working meanwhile). */
static test_redis *loop_until_new_master(const test_redis *old, int timeout_ms) {
    long long deadline = test_now_ms() + timeout_ms;
    test_redis *m = NULL;
    while (m == NULL && test_now_ms() < deadline) {
        test_loop_for(base, 50);
        m = test_sentinel_wait_new_master(&s, old, 0);
    }
    return m;
}

/* ---- Basics ---------------------------------------------------------------------- */

/* The lock lands on the master the sentinels name; /db selects the db. */
Test(sentinel, lock_lands_on_the_master) {
    up();
    hilock_client *c = client(s.url);
    long long t0 = test_now_ms();
    got g = take(c, "basic");
    cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    cr_log_info("first acquire through the sentinels: %lld ms", g.at_ms - t0);
    cr_expect_eq(test_sentinel_master(&s), &s.node[0]);
    cr_expect_eq(exists_on(&s.node[0], "basic"), 1, "the lock is not on the master");
    cr_expect_eq(give_back(g.hold), 0);
    cr_expect_eq(exists_on(&s.node[0], "basic"), 0, "a lock left behind");
    hilock_client_free(c);

    char url[300];
    url_with(url, sizeof(url), NULL, "/3#" TEST_SENTINEL_NAME);
    c = client(url);
    g = take(c, "db-three");
    cr_assert_eq(g.status, 0, "%s: %s (%s)", url, hilock_strerror(g.status), hilock_client_errstr(c));
    cr_expect_eq(exists_in_db(&s.node[0], 3, "db-three"), 1, "the lock is not in db 3");
    cr_expect_eq(exists_in_db(&s.node[0], 0, "db-three"), 0, "the lock is in db 0");
    cr_expect_eq(give_back(g.hold), 0);
    cr_expect_eq(exists_in_db(&s.node[0], 3, "db-three"), 0);
    hilock_client_free(c);
}

/* ---- Failover under contention -------------------------------------------------- */

enum fault { FO_PAUSED, FO_RAW, FO_KILL };
#define TURNS 400
#define NAMES 8
#define BATCH 10 /* acquisitions issued every 100 ms: 4 s of contention */

/* Two clients, TURNS acquisitions of NAMES names with 10 ms holds, issued
 * BATCH at a time over 4 s; the fault halfway, in the middle of a batch.
 * Every callback ends, once; with a failover that loses no write (paused,
 * or a dead master), no two holders overlap and fences only grow (a fence
 * is also at least the server's clock in microseconds, and both servers
 * share this machine's clock: a lost increment hardly shows here);
 * afterwards every name works on the new master. */
static void failover_under_contention(enum fault how) {
    static const char *what[] = {"SENTINEL FAILOVER, writes paused", "SENTINEL FAILOVER", "kill -9"};
    up();
    hilock_client *a = client(s.url), *b = client(s.url);
    for (int i = 0; i < NAMES; i++) { /* both connected before the fault */
        char name[32];
        snprintf(name, sizeof(name), "ex-%d", i);
        got ga = take(a, name);
        cr_assert_eq(ga.status, 0, "%s (%s)", hilock_strerror(ga.status), hilock_client_errstr(a));
        give_back(ga.hold);
        got gb = take(b, name);
        cr_assert_eq(gb.status, 0, "%s (%s)", hilock_strerror(gb.status), hilock_client_errstr(b));
        give_back(gb.hold);
    }
    test_redis *old = test_sentinel_master(&s);
    cr_assert_eq(old, &s.node[0]);

    static turn turns[TURNS];
    shared sh;
    memset(&sh, 0, sizeof(sh));
    sh.base = base;
    sh.hold_ms = 10;
    sh.ca = a;
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    /* Leases of 30 s (the default) outlast any failover. After a raw
     * SENTINEL FAILOVER, a release the old master took is missing on the new
     * one: 2 s leases let such stale keys go soon. */
    if (how == FO_RAW) o.lease_ms = 2000;
    long long t0 = test_now_ms(), t_fault = 0, t_new = 0, scripts = 0;
    test_redis *newm = NULL;
    for (int i = 0; i < TURNS; i++) {
        char name[32];
        turns[i].s = &sh;
        turns[i].idx = i % NAMES;
        snprintf(name, sizeof(name), "ex-%d", i % NAMES);
        cr_assert_eq(hilock_acquire(i % 2 ? a : b, name, &o, turn_granted, &turns[i], NULL), 0);
        if (i % BATCH == BATCH - 1) test_loop_for(base, 100);
        if (i == TURNS / 2 + BATCH / 2) { /* mid-batch: requests in flight, holds held */
            test_loop_for(base, 5);
            t_fault = test_now_ms();
            scripts = script_calls_of(old);
            if (how == FO_PAUSED) cr_assert_eq(test_sentinel_failover_paused(&s, 5000), 0);
            else if (how == FO_RAW) cr_assert_eq(test_sentinel_failover(&s), 0);
            else test_redis_kill(old);
        }
        if (newm == NULL && t_fault && i % BATCH == BATCH - 1 &&
            (newm = test_sentinel_wait_new_master(&s, old, 0)) != NULL)
            t_new = test_now_ms();
    }
    while (sh.done < TURNS && test_now_ms() - t0 < 60000) {
        test_loop_for(base, 20);
        if (newm == NULL && (newm = test_sentinel_wait_new_master(&s, old, 0)) != NULL)
            t_new = test_now_ms();
    }
    long long t_done = test_now_ms();
    test_loop_for(base, 300); /* every callback once: no late second one */
    if (newm == NULL && (newm = test_sentinel_wait_new_master(&s, old, 20000)) != NULL)
        t_new = test_now_ms();
    cr_log_info("failover (%s): %d of %d ended, %d granted, %d errors (first: %s, %s), %d overlaps, "
                "%d fence regressions; new master named %lld ms after the fault, all ended %lld ms "
                "after it (%lld ms in all)",
                what[how], sh.done, TURNS, sh.granted, sh.errors, hilock_strerror(sh.first_error),
                sh.first_errstr, sh.overlaps, sh.regressions, t_new - t_fault, t_done - t_fault,
                t_done - t0);
    if (how != FO_KILL) /* what the old master took after the fault: lost */
        cr_log_info("failover (%s): the old master ran %lld lock scripts after the fault", what[how],
                    script_calls_of(old) - scripts);
    cr_assert_not_null(newm, "no new master after the failover");
    cr_expect_eq(sh.done, TURNS, "%d of %d ended", sh.done, TURNS);
    if (how == FO_RAW) {
        /* Redis 7.0's Sentinel promotes the replica without stopping the
         * old master, which takes writes (lost) until the clients hear
         * +switch-master about 1 s later: two holders and a fence that
         * repeats are Redis's doing then, not the client's; a hold granted
         * there is lost (its release says HILOCK_ELOST). Counted only (and
         * not with cr_log_warn, which makes Criterion exit 1). */
        if (sh.overlaps || sh.regressions || sh.errors)
            cr_log_info("raw SENTINEL FAILOVER: %d overlaps, %d fence regressions, %d errors (writes "
                        "the old master took after the promotion)", sh.overlaps, sh.regressions, sh.errors);
    } else {
        cr_expect_eq(sh.errors, 0, "first error: %s (%s)", hilock_strerror(sh.first_error), sh.first_errstr);
        cr_expect_eq(sh.granted, TURNS);
        cr_expect_eq(sh.overlaps, 0, "two holders at once");
        cr_expect_eq(sh.regressions, 0, "fences out of order");
    }
    if (how == FO_KILL) /* the pair whole again: the old master, a replica of the new */
        cr_expect_eq(test_sentinel_node_restart(&s, old, newm), 0, "the old master did not rejoin");

    /* Afterwards every name works, on the new master. */
    for (int i = 0; i < NAMES; i++) {
        char name[32];
        snprintf(name, sizeof(name), "ex-%d", i);
        got g = take(i % 2 ? a : b, name);
        cr_expect_eq(g.status, 0, "%s after the failover: %s (%s)", name, hilock_strerror(g.status),
                     hilock_client_errstr(i % 2 ? a : b));
        if (g.status != 0) continue;
        cr_expect_eq(exists_on(newm, name), 1, "%s is not on the new master", name);
        cr_expect_eq(give_back(g.hold), 0);
    }
    hilock_client_free(a);
    hilock_client_free(b);
}

/* The failover an operator makes: writes paused on the old master until the
 * clients have moved, so none is lost. */
Test(sentinel, failover_under_contention, .timeout = 120) { failover_under_contention(FO_PAUSED); }

/* SENTINEL FAILOVER alone: every waiter ends and the names work after it. */
Test(sentinel, raw_failover_under_contention, .timeout = 120) { failover_under_contention(FO_RAW); }

/* kill -9 of the master: the sentinels fail over after down-after (1 s). */
Test(sentinel, master_killed_under_contention, .timeout = 120) { failover_under_contention(FO_KILL); }

/* ---- A hold across a failover ---------------------------------------------------- */

/* A hold with a 3 s lease, renewed by its watchdog, keeps its lock across
 * SENTINEL FAILOVER (its key was replicated): it is not lost, the new
 * master has its key (token and fence), renewals go on there, and its
 * release there wakes a waiter of another client. */
Test(sentinel, hold_survives_failover, .timeout = 120) {
    const char *name = "kept";
    up();
    hilock_client *a = client(s.url), *b = client(s.url);
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 3000; /* renewed every second */
    lostrec lost = {0, 0, 0};
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = take_opts(a, name, &o);
    cr_assert_eq(ga.status, 0, "%s (%s)", hilock_strerror(ga.status), hilock_client_errstr(a));
    test_redis *old = &s.node[0];
    char token[128], fence[64], buf[128];
    lock_field(old, name, "token", token, sizeof(token));
    lock_field(old, name, "fence", fence, sizeof(fence));
    cr_assert_neq(token[0], '\0', "no lock on the master");
    cr_expect_eq(strtoull(fence, NULL, 10), hilock_hold_fence(ga.hold));

    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, name, NULL, got_cb, &gb, NULL), 0);
    test_loop_for(base, 300);
    cr_assert_eq(gb.calls, 0, "granted while held");

    /* Fail over just after a renewal (which the replica has): the old
     * master takes the next one, the new master has the key for 2 s more. */
    long long until = test_now_ms() + 2000;
    while (lock_pttl(old, name) < 2800 && test_now_ms() < until) test_loop_for(base, 5);
    long long t0 = test_now_ms();
    cr_assert_eq(test_sentinel_failover(&s), 0);
    test_redis *newm = loop_until_new_master(old, 20000);
    cr_assert_not_null(newm, "no new master after SENTINEL FAILOVER");
    cr_log_info("SENTINEL FAILOVER: the sentinels name the new master after %lld ms", test_now_ms() - t0);

    /* Renewals go on at the new master: past a whole lease there. */
    test_loop_for(base, 3500);
    cr_expect_eq(lost.calls, 0, "the hold was lost (%s)", hilock_strerror(lost.why));
    cr_expect_eq(hilock_hold_lost(ga.hold), 0);
    cr_expect_str_eq(lock_field(newm, name, "token", buf, sizeof(buf)), token, "not our token on the new master");
    cr_expect_str_eq(lock_field(newm, name, "fence", buf, sizeof(buf)), fence);
    long long pttl = lock_pttl(newm, name);
    cr_expect(pttl > 0 && pttl <= 3000, "PTTL %lld on the new master", pttl);
    cr_expect_eq(gb.calls, 0, "granted while held");

    /* The release on the new master wakes b's waiter there. */
    long long t1 = test_now_ms();
    cr_expect_eq(give_back(ga.hold), 0);
    cr_assert(test_loop_until(base, &gb.calls, 5000), "the waiter was not served");
    cr_expect_eq(gb.status, 0, "%s (%s)", hilock_strerror(gb.status), hilock_client_errstr(b));
    cr_expect_lt(gb.at_ms - t1, 1000, "served %lld ms after the release", gb.at_ms - t1);
    if (gb.status == 0) {
        cr_expect_gt(hilock_hold_fence(gb.hold), strtoull(fence, NULL, 10));
        cr_expect_eq(exists_on(newm, name), 1);
        cr_expect_eq(give_back(gb.hold), 0);
        cr_expect_eq(exists_on(newm, name), 0);
    }
    hilock_client_free(a);
    hilock_client_free(b);
}

/* Many holds renew in batches on the master the sentinels name, as on one
 * server: far fewer script calls than renewals; a hold whose key is gone
 * is lost alone; and after SENTINEL FAILOVER the batches go on at the new
 * master, none of the other holds lost. */
Test(sentinel, many_holds_renew_in_batches_through_a_failover, .timeout = 120) {
    enum { N = 30, GONE = 7 };
    up();
    hilock_client *a = client(s.url);
    static lostrec lost[N];
    got g[N];
    char name[32];
    memset(lost, 0, sizeof(lost));
    for (int i = 0; i < N; i++) {
        hilock_acquire_opts o;
        hilock_acquire_opts_init(&o);
        o.lease_ms = 3000; /* renewed every second */
        o.lost_cb = lost_cb;
        o.lost_data = &lost[i];
        snprintf(name, sizeof(name), "batch-%d", i);
        g[i] = take_opts(a, name, &o);
        cr_assert_eq(g[i].status, 0, "%s: %s", name, hilock_strerror(g[i].status));
    }
    test_redis *old = &s.node[0];
    hilock_stats s0 = stats_of(a);
    long long calls0 = script_calls_of(old);
    test_loop_for(base, 2500);
    hilock_stats s1 = stats_of(a);
    long long calls = script_calls_of(old) - calls0;
    uint64_t renewals = s1.renewals - s0.renewals;
    cr_expect_geq(renewals, (uint64_t)N * 2, "%llu renewals", (unsigned long long)renewals);
    cr_expect_lt(calls * 3, (long long)renewals, "%lld script calls for %llu renewals: not batched", calls,
                 (unsigned long long)renewals);

    char key[256];
    hilock_key("hilock:", "batch-7", key, sizeof(key));
    cr_assert_eq(test_redis_int(old, "DEL %s", key), 1);
    test_loop_for(base, 1300);
    for (int i = 0; i < N; i++) cr_expect_eq(lost[i].calls, i == GONE, "batch-%d: lost %d times", i, lost[i].calls);

    /* Fail over just after a renewal of the first hold (which the replica has). */
    long long until = test_now_ms() + 2000;
    while (lock_pttl(old, "batch-0") < 2800 && test_now_ms() < until) test_loop_for(base, 5);
    cr_assert_eq(test_sentinel_failover(&s), 0);
    test_redis *newm = loop_until_new_master(old, 20000);
    cr_assert_not_null(newm, "no new master after SENTINEL FAILOVER");
    test_loop_for(base, 1000); /* the batches find the new master */
    s0 = stats_of(a);
    calls0 = script_calls_of(newm);
    test_loop_for(base, 2500);
    s1 = stats_of(a);
    calls = script_calls_of(newm) - calls0;
    renewals = s1.renewals - s0.renewals;
    cr_expect_geq(renewals, (uint64_t)(N - 1) * 2, "%llu renewals at the new master", (unsigned long long)renewals);
    cr_expect_lt(calls * 3, (long long)renewals, "%lld script calls for %llu renewals at the new master", calls,
                 (unsigned long long)renewals);
    for (int i = 0; i < N; i++) {
        cr_expect_eq(lost[i].calls, i == GONE, "batch-%d: lost %d times", i, lost[i].calls);
        snprintf(name, sizeof(name), "batch-%d", i);
        long long pttl = lock_pttl(newm, name);
        if (i != GONE) cr_expect(pttl > 0 && pttl <= 3000, "%s: PTTL %lld on the new master", name, pttl);
    }
    for (int i = 0; i < N; i++) cr_expect_eq(give_back(g[i].hold), i == GONE ? HILOCK_ELOST : 0, "batch-%d", i);
    hilock_client_free(a);
}

/* ---- Sentinels down, stale, or not knowing the name ----------------------------- */

/* Two of the three sentinels are behind a failover and name the old
 * master for a while (made here by having them monitor it afresh, as a
 * sentinel restarted from an old config would; they learn of the switch
 * from the hello messages of the one that made it, sent every 2 s). The
 * client heard +switch-master from that one: it stays on the new master
 * rather than going back on the stale majority's word (and forth again
 * later, each move costing the holds their sentinels' word), so a hold
 * taken before the failover is neither lost nor refused. */
static void remonitor(test_redis *sent, int port) {
    redisReply *a = test_redis_cmd(sent, "SENTINEL REMOVE %s", s.name);
    redisReply *b = test_redis_cmd(sent, "SENTINEL MONITOR %s 127.0.0.1 %d 2", s.name, port);
    cr_assert(b && b->type == REDIS_REPLY_STATUS, "SENTINEL MONITOR: %s", b && b->str ? b->str : "?");
    if (a) freeReplyObject(a);
    freeReplyObject(b);
}

Test(sentinel, stale_majority_after_a_switch, .timeout = 60) {
    up();
    hilock_client *c = client(s.url);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got g = take_opts(c, "switched", &o);
    cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    test_redis *old = &s.node[0];
    cr_assert_eq(test_sentinel_failover_paused(&s, 5000), 0); /* through sentinel 0 */
    test_redis *newm = loop_until_new_master(old, 10000);
    cr_assert_not_null(newm, "no new master after SENTINEL FAILOVER");
    test_loop_for(base, 100); /* the client hears +switch-master */
    remonitor(&s.sentinel[1], old->port);
    remonitor(&s.sentinel[2], old->port);
    int behind = test_sentinel_named_port(&s.sentinel[1], s.name) == old->port &&
                 test_sentinel_named_port(&s.sentinel[2], s.name) == old->port;
    cr_assert(behind, "the two sentinels do not name the old master");
    test_loop_for(base, 2500); /* rounds answered by the stale pair */
    cr_expect_eq(lost.calls, 0, "the hold was lost (%s)", hilock_strerror(lost.why));
    cr_expect_eq(hilock_hold_lost(g.hold), 0, "the hold was lost");
    cr_expect_eq(give_back(g.hold), 0, "%s", hilock_client_errstr(c));
    g = take(c, "switched");
    cr_expect_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    if (g.status == 0) {
        cr_expect_eq(exists_on(newm, "switched"), 1, "not on the new master");
        cr_expect_eq(give_back(g.hold), 0);
    }
    hilock_client_free(c);
}

/* Acquire and release `name` through `url` from a fresh client: the time
 * from the client's creation to the grant. */
static long long quick_lock(const char *url, const char *name) {
    long long t0 = test_now_ms();
    hilock_client *c = client(url);
    got g = take(c, name);
    cr_expect_eq(g.status, 0, "%s: %s (%s)", url, hilock_strerror(g.status), hilock_client_errstr(c));
    long long ms = g.at_ms - t0;
    if (g.status == 0) {
        cr_expect_eq(exists_on(&s.node[0], name), 1, "%s: the lock is not on the master", url);
        cr_expect_eq(give_back(g.hold), 0);
    }
    hilock_client_free(c);
    return ms;
}

/* A sentinel down, or hanging, costs nothing: the others are a majority. */
Test(sentinel, one_sentinel_down) {
    char url[300], first[64];
    up();
    snprintf(first, sizeof(first), "127.0.0.1:%d,", test_refused_port());
    long long ms = quick_lock(url_with(url, sizeof(url), first, NULL), "refused-first");
    cr_expect_lt(ms, 1000, "a refused sentinel first: %lld ms", ms);
    cr_log_info("a refused sentinel first: %lld ms", ms);

    int port, fd = test_listen_silent(&port); /* accepts, never answers */
    cr_assert_geq(fd, 0);
    snprintf(first, sizeof(first), "127.0.0.1:%d,", port);
    ms = quick_lock(url_with(url, sizeof(url), first, NULL), "silent-first");
    cr_expect_lt(ms, 1000, "a silent sentinel first: %lld ms", ms);
    cr_log_info("a silent sentinel first: %lld ms", ms);
    close(fd);

    test_redis_kill(&s.sentinel[0]);
    ms = quick_lock(s.url, "killed-first");
    cr_expect_lt(ms, 1000, "the first sentinel killed: %lld ms", ms);
    cr_log_info("the first sentinel killed: %lld ms", ms);
}

/* A sentinel that names another server under the same name (stale, or
 * partitioned), listed first: the majority wins. */
Test(sentinel, stale_sentinel_is_outvoted) {
    up();
    cr_assert_eq(test_redis_start(&stale[0], 0, NULL), 0);
    cr_assert_eq(test_sentinel_spawn(&stale[1], TEST_SENTINEL_NAME, stale[0].port, 1), 0);
    cr_assert_eq(test_sentinel_named_port(&stale[1], TEST_SENTINEL_NAME), stale[0].port);
    char url[300], first[64];
    snprintf(first, sizeof(first), "127.0.0.1:%d,", stale[1].port);
    url_with(url, sizeof(url), first, NULL);
    for (int i = 0; i < 3; i++) {
        hilock_client *c = client(url);
        got g = take(c, "voted");
        cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
        cr_expect_eq(exists_on(&s.node[0], "voted"), 1, "the lock is not on the real master");
        cr_expect_eq(exists_on(&stale[0], "voted"), 0, "the lock went where the stale sentinel said");
        cr_expect_eq(give_back(g.hold), 0);
        hilock_client_free(c);
    }
}

/* Acquire through `url` with a 2 s request timeout: the callback, bounded. */
static got acquire_failing(const char *url, int64_t wait_ms, hilock_client **out) {
    hilock_client *c = client_tmo(url, 2000);
    hilock_acquire_opts o = opts_wait(wait_ms);
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(c, "nowhere", &o, got_cb, &g, NULL), 0);
    test_loop_until(base, &g.calls, 10000);
    cr_assert_eq(g.calls, 1, "no callback within 10 s");
    *out = c;
    return g;
}

/* No sentinel answers: the acquire ends with a connection error within
 * the request timeout, and the client frees cleanly. */
Test(sentinel, all_sentinels_down) {
    char url[200];
    snprintf(url, sizeof(url), "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d#%s",
             test_refused_port(), test_refused_port(), test_refused_port(), TEST_SENTINEL_NAME);
    int64_t waits[] = {HILOCK_WAIT_FOREVER, 0};
    for (int i = 0; i < 2; i++) {
        hilock_client *c;
        long long t0 = test_now_ms();
        got g = acquire_failing(url, waits[i], &c);
        cr_expect(g.status == HILOCK_ECONN || g.status == HILOCK_EDEADLINE, "wait %lld: %s (%s)",
                  (long long)waits[i], hilock_strerror(g.status), hilock_client_errstr(c));
        cr_expect_lt(g.at_ms - t0, 4000, "wait %lld: ended after %lld ms", (long long)waits[i], g.at_ms - t0);
        /* A try-once has had its attempt when no sentinel answered. */
        if (waits[i] == 0) cr_expect_lt(g.at_ms - t0, 1000, "try-once ended after %lld ms", g.at_ms - t0);
        cr_log_info("all sentinels down, wait %lld: %s after %lld ms (%s)", (long long)waits[i],
                    hilock_strerror(g.status), g.at_ms - t0, hilock_client_errstr(c));
        long long t1 = test_now_ms();
        hilock_client_free(c);
        cr_expect_lt(test_now_ms() - t1, 500, "hilock_client_free took %lld ms", test_now_ms() - t1);
        test_loop_for(base, 100); /* nothing of the client left to run */
    }
}

/* A master name no sentinel knows: a clear error that names it. */
Test(sentinel, unknown_master_name) {
    char url[300];
    up();
    url_with(url, sizeof(url), NULL, "#nosuch");
    hilock_client *c;
    long long t0 = test_now_ms();
    got g = acquire_failing(url, HILOCK_WAIT_FOREVER, &c);
    cr_expect_neq(g.status, 0);
    cr_expect_lt(g.at_ms - t0, 4000, "ended after %lld ms", g.at_ms - t0);
    cr_expect_not_null(strstr(hilock_client_errstr(c), "nosuch"), "errstr: %s", hilock_client_errstr(c));
    cr_log_info("unknown master name: %s after %lld ms (%s)", hilock_strerror(g.status), g.at_ms - t0,
                hilock_client_errstr(c));
    hilock_client_free(c);
}

/* WAIT applies under Sentinel: with the replica up an acquire that waits
 * for it is granted; with the replica gone it ends with HILOCK_EREPLICAS
 * and leaves no lock on the master. */
Test(sentinel, wait_replicas) {
    up();
    hilock_config cfg;
    hilock_client *c = NULL;
    hilock_config_init(&cfg);
    cfg.url = s.url;
    cfg.request_timeout_ms = 8000;
    cfg.wait_replicas = 1;
    cfg.wait_timeout_ms = 300;
    cr_assert_eq(hilock_client_new(&c, &cfg, &loop), 0);
    got g = take(c, "waited");
    cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    cr_expect_eq(give_back(g.hold), 0);
    test_redis *replica = &s.node[1];
    cr_assert_eq(test_sentinel_master(&s), &s.node[0]);
    test_redis_stop(replica);
    g = take(c, "waited-alone");
    cr_expect_eq(g.status, HILOCK_EREPLICAS, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    /* The release of the unconfirmed lock was sent before the callback ran;
     * it may still be on its way. */
    long long until = test_now_ms() + 2000;
    while (exists_on(&s.node[0], "waited-alone") != 0 && test_now_ms() < until) test_loop_for(base, 20);
    cr_expect_eq(exists_on(&s.node[0], "waited-alone"), 0, "a lock left behind");
    hilock_client_free(c);
}

/* ---- The CLI ----------------------------------------------------------------------- */

Test(sentinel, cli) {
    char cli[600], cmd[256], out[256], log[2048];
    up();
    cr_assert_not_null(test_build_path("HILOCK_CLI", "hilock", cli, sizeof(cli)));
    /* COMMAND sees its fence, and the lock on the master. */
    snprintf(cmd, sizeof(cmd), "test -n \"$HILOCK_FENCE\" && %s -p %d EXISTS 'hilock:{cli-lock}'",
             test_cli_bin(), s.node[0].port);
    char *argv[] = {cli, "-u", s.url, "cli-lock", "--", "sh", "-c", cmd, NULL};
    snprintf(out, sizeof(out), "%s/cli.out", s.node[0].dir);
    int rc = test_wait(test_spawn(argv, NULL, out, NULL), 20000);
    cr_expect_eq(rc, 0, "hilock exited %d: %s", rc, test_slurp(out, log, sizeof(log)));
    cr_expect_not_null(strstr(test_slurp(out, log, sizeof(log)), "1"), "not on the master: %s", log);
    cr_expect_eq(exists_on(&s.node[0], "cli-lock"), 0, "the CLI left its lock");

    char *unlock[] = {cli, "-u", s.url, "unlock", "cli-lock", NULL};
    rc = test_wait(test_spawn(unlock, NULL, out, NULL), 20000);
    cr_expect_eq(rc, 0, "hilock unlock exited %d: %s", rc, test_slurp(out, log, sizeof(log)));
}

/* ---- The sentinels' word ---------------------------------------------------- */

/* A holder whose master goes on answering while no sentinel vouches for it
 * any more (all three stopped with SIGSTOP: what a partition that leaves
 * the holder with its master, away from the sentinels and the replica,
 * looks like from the holder's side): it stops believing it holds within
 * one renewal interval of the sentinels' overdue word (the last round at
 * most 1 s before, overdue 1 s later, then a third of the 3 s lease),
 * though every renewal on the old master succeeds. With the sentinels
 * back, locks are taken again. */
Test(sentinel, a_holder_cut_off_from_the_sentinels_stops_believing) {
    up();
    hilock_client *c = client(s.url);
    hilock_acquire_opts o = opts_wait_lease(0, 3000);
    lostrec lost = {0, 0, 0};
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got g = take_opts(c, "cut", &o);
    cr_assert_eq(g.status, 0);
    test_loop_for(base, 2500); /* renewed, vouched for */
    cr_assert_eq(lost.calls, 0, "lost while the sentinels vouched: %s", hilock_strerror(lost.why));
    long long t0 = test_now_ms();
    for (int i = 0; i < TEST_SENTINELS; i++) kill(s.sentinel[i].pid, SIGSTOP);
    test_loop_until(base, &lost.calls, 8000);
    for (int i = 0; i < TEST_SENTINELS; i++) kill(s.sentinel[i].pid, SIGCONT);
    cr_assert_eq(lost.calls, 1, "still believed held %lld ms after the sentinels fell silent",
                 test_now_ms() - t0);
    cr_log_info("sentinels silent: the hold believed lost after %lld ms (lease 3000)", lost.at_ms - t0);
    cr_expect_leq(lost.at_ms - t0, 2000 + 300, "lost %lld ms after the sentinels fell silent",
                  lost.at_ms - t0);
    release_loop(base, g.hold, 5000);
    test_loop_for(base, 1500);
    got again = take_opts(c, "cut-again", &o);
    cr_expect_eq(again.status, 0, "%s", hilock_strerror(again.status));
    if (again.status == 0) {
        test_loop_for(base, 2500);
        cr_expect_eq(lost.calls, 1, "a new hold lost with the sentinels back");
        give_back(again.hold);
    }
    hilock_client_free(c);
}

/* A switch of master is logged with its cause: the connections to the old
 * master are dropped because the sentinels name another, not "lost
 * (success)". */
Test(sentinel, a_switch_is_logged_with_its_cause, .timeout = 120) {
    up();
    loglines log = {{0}, 0};
    hilock_config cfg;
    hilock_client *c = NULL;
    hilock_config_init(&cfg);
    cfg.url = s.url;
    cfg.request_timeout_ms = 8000;
    cfg.log_cb = loglines_keep;
    cfg.log_data = &log;
    cr_assert_eq(hilock_client_new(&c, &cfg, &loop), 0);
    got w = take(c, "switch");
    cr_assert_eq(w.status, 0);
    got waiting = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(c, "switch-wait", NULL, got_cb, &waiting, NULL), 0); /* a subscriber */
    test_loop_for(base, 200);
    cr_assert_eq(test_sentinel_failover(&s), 0);
    long long t0 = test_now_ms();
    while (!strstr(log.text, "name") && test_now_ms() - t0 < 15000) test_loop_for(base, 50);
    test_loop_for(base, 500);
    cr_expect(strstr(log.text, "lost (the sentinels name 127.0.0.1:"),
              "the drop does not say why:\n%s", log.text);
    cr_expect(!strstr(log.text, "(success)"), "a loss logged as success:\n%s", log.text);
    if (waiting.calls && waiting.status == 0) give_back(waiting.hold);
    give_back(w.hold);
    hilock_client_free(c);
}

/* One sentinel of four accepts and never answers: the three others still
 * vouch for the master every second (a round does not wait for the silent
 * one's request), and a hold of 6 s lives on through 12 s. */
Test(sentinel, a_silent_sentinel_does_not_silence_the_others, .timeout = 60) {
    up();
    int port, fd = test_listen_silent(&port);
    cr_assert_geq(fd, 0);
    char url[400];
    snprintf(url, sizeof(url), "redis-sentinel://127.0.0.1:%d,%s", port, s.url + strlen("redis-sentinel://"));
    hilock_client *c = client(url);
    hilock_acquire_opts o = opts_wait_lease(0, 6000);
    lostrec lost = {0, 0, 0};
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got g = take_opts(c, "silent", &o);
    cr_assert_eq(g.status, 0, "%s", hilock_strerror(g.status));
    long long t0 = test_now_ms();
    test_loop_until(base, &lost.calls, 12000);
    cr_expect_eq(lost.calls, 0, "the hold was lost after %lld ms (%s)", lost.at_ms - t0,
                 hilock_strerror(lost.why));
    give_back(g.hold);
    hilock_client_free(c);
    close(fd);
}

/* With the sentinels silent (SIGSTOP), an acquire of a free lock does not
 * spin through grants it may not keep: it waits (a few tries a second at
 * most) and ends at its time with the cause, not ETIMEDOUT; a no_renew
 * hold taken before is not renewed. */
Test(sentinel, no_word_from_the_sentinels_no_spin, .timeout = 60) {
    up();
    hilock_client *c = client_tmo(s.url, 2000);
    hilock_acquire_opts nr = opts_wait_lease(0, 4000);
    nr.no_renew = 1;
    got held = take_opts(c, "no-renew", &nr);
    cr_assert_eq(held.status, 0);
    for (int i = 0; i < TEST_SENTINELS; i++) kill(s.sentinel[i].pid, SIGSTOP);
    test_loop_for(base, 3000); /* the word is overdue */
    long long s0 = script_calls_of(&s.node[0]);
    hilock_acquire_opts o = opts_wait_lease(3000, 3000);
    got g = take_opts(c, "spin", &o);
    long long s1 = script_calls_of(&s.node[0]);
    for (int i = 0; i < TEST_SENTINELS; i++) kill(s.sentinel[i].pid, SIGCONT);
    cr_log_info("unvouched acquire: %s, %lld scripts on the master (%s)", hilock_strerror(g.status), s1 - s0,
                hilock_client_errstr(c));
    cr_expect_eq(g.status, HILOCK_ECONN, "%s", hilock_strerror(g.status));
    cr_expect_lt(s1 - s0, 20, "%lld scripts for one acquire in 3 s", s1 - s0);
    test_loop_for(base, 3000); /* past the no_renew lease, the sentinels back */
    char key[256];
    hilock_key("hilock:", "no-renew", key, sizeof(key));
    cr_expect_leq(test_redis_int(&s.node[0], "PTTL %s", key), 0, "the no_renew hold was renewed");
    release_loop(base, held.hold, 5000);
    hilock_client_free(c);
}
