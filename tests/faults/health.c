/* Dead connections, transient unavailability and clocks, on a real
 * redis-server: a connection blackholed by a relay (no RST, no FIN) is
 * found by the health check and replaced; a wait with time left rides
 * through a server that is away, and one that runs out says why; a hold
 * believes its lease ends early by the clock allowance. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include "support/lockenv.h"
#include "support/blackhole.h"

static lockenv e;

static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(health, .init = setup, .fini = teardown, .timeout = 60);

static hilock_client *client_at(const char *url, uint32_t health_ms, loglines *log) {
    hilock_config cfg;
    lockenv_config(&cfg, url);
    cfg.health_ms = health_ms;
    /* Waits that wake by message alone: a starving wait's place is kept
     * alive by tries every second, which would hide a deaf subscriber. */
    cfg.starve_ms = HILOCK_STARVE_NEVER;
    if (log) {
        cfg.log_cb = loglines_keep;
        cfg.log_data = log;
    }
    return lockenv_client_cfg(&e, &cfg);
}

/* The local port of the server's one subscriber connection (CLIENT LIST's
 * addr= of the line with sub=1), or 0. */
static int subscriber_port(const test_redis *r) {
    redisReply *rep = test_redis_cmd(r, "CLIENT LIST");
    int port = 0;
    for (char *line = rep && rep->type == REDIS_REPLY_STRING ? rep->str : NULL; line && *line;) {
        char *end = strchr(line, '\n'), *addr = strstr(line, "addr=");
        if (end) *end = '\0';
        if (strstr(line, " sub=1 ") && addr && strchr(addr, ':')) port = atoi(strchr(addr, ':') + 1);
        line = end ? end + 1 : NULL;
    }
    if (rep) freeReplyObject(rep);
    return port;
}

/* A waiter whose subscriber flow a relay silently stopped carrying: it
 * hears no release, and nothing would tell it so until the holder's lease
 * ends (20 s here). The health check finds the silence within 1.25 s, the
 * subscription comes back on a new connection, and the release 2.5 s after
 * the blackhole reaches the waiter; the log says why the connection went. */
Test(health, a_blackholed_subscriber_is_found_and_its_waiter_served) {
    test_blackhole bh;
    cr_assert_eq(test_blackhole_start(&bh, e.r.port), 0);
    loglines log = {{0}, 0};
    hilock_client *holder = lockenv_client(&e), *waiter = client_at(bh.url, 1000, &log);
    hilock_acquire_opts lease = opts_wait_lease(0, 20000);
    got h = acquire_now(&e, holder, "bh", &lease);
    cr_assert_eq(h.status, 0);
    got w = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(waiter, "bh", NULL, got_cb, &w, NULL), 0);
    long long t0 = test_now_ms();
    int port = 0;
    while (port == 0 && test_now_ms() - t0 < 3000) {
        test_loop_for(e.base, 20);
        port = subscriber_port(&e.r);
    }
    cr_assert_neq(port, 0, "the waiter did not subscribe");
    test_blackhole_drop(&bh, port);
    test_loop_for(e.base, 2500); /* past any early retry of the wait's own */
    cr_assert_eq(w.calls, 0);
    long long released = test_now_ms();
    cr_assert_eq(release_now(&e, h.hold), 0);
    test_loop_until(e.base, &w.calls, 15000);
    cr_assert_eq(w.calls, 1);
    cr_expect_eq(w.status, 0, "%s", hilock_strerror(w.status));
    cr_expect_lt(w.at_ms - released, 2000, "served %lld ms after the release (health 1000 ms)",
                 w.at_ms - released);
    cr_expect(strstr(log.text, "subscriber connection") && strstr(log.text, "health check"),
              "the log does not say the subscriber connection went silent:\n%s", log.text);
    if (w.status == 0) release_now(&e, w.hold);
    hilock_client_free(waiter);
    hilock_client_free(holder);
    test_blackhole_stop(&bh);
}

/* Quiet is not dead: connections with nothing to do for many health
 * intervals stay up, PING answered; under an ACL that refuses PING too (the
 * refusal is an answer). */
Test(health, quiet_connections_stay_up_even_when_ping_is_refused) {
    redisReply *rep = test_redis_cmd(&e.r, "ACL SETUSER noping on >pw ~* &* +@all -ping");
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "ACL SETUSER: %s", rep ? rep->str : "no reply");
    freeReplyObject(rep);
    char url[96];
    snprintf(url, sizeof(url), "redis://noping:pw@127.0.0.1:%d", e.r.port);
    for (int acl = 0; acl < 2; acl++) {
        loglines log = {{0}, 0};
        hilock_client *holder = lockenv_client(&e), *waiter = client_at(acl ? url : e.r.url, 200, &log);
        got h = acquire_now(&e, holder, "quiet", NULL);
        cr_assert_eq(h.status, 0);
        got w = {0, 0, NULL, 0};
        cr_assert_eq(hilock_acquire(waiter, "quiet", NULL, got_cb, &w, NULL), 0);
        test_loop_for(e.base, 2000); /* ten health intervals, nothing to say */
        hilock_stats st = stats_of(waiter);
        cr_expect_eq(st.node[0].disconnects, 0, "acl %d: %llu connections dropped:\n%s", acl,
                     (unsigned long long)st.node[0].disconnects, log.text);
        cr_assert_eq(release_now(&e, h.hold), 0);
        test_loop_until(e.base, &w.calls, 3000);
        cr_expect_eq(w.status, 0);
        if (w.status == 0) release_now(&e, w.hold);
        hilock_client_free(waiter);
        hilock_client_free(holder);
    }
}

/* kill -9 of the server under a held lock and a waiting one, restarted
 * empty on its port 1.5 s later: the wait (10 s) rides through and gets
 * the lock, which is free on the new server. */
Test(health, a_wait_rides_through_a_server_restart) {
    hilock_client *holder = lockenv_client(&e), *waiter = lockenv_client(&e);
    hilock_acquire_opts lease = opts_wait_lease(0, 30000), patient = opts_wait(10000);
    got h = acquire_now(&e, holder, "restart", &lease);
    cr_assert_eq(h.status, 0);
    got w = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(waiter, "restart", &patient, got_cb, &w, NULL), 0);
    test_loop_for(e.base, 200);
    int port = e.r.port;
    test_redis_kill(&e.r);
    test_loop_for(e.base, 1500);
    cr_expect_eq(w.calls, 0, "the wait ended while the server was away: %s", hilock_strerror(w.status));
    cr_assert_eq(test_redis_start(&e.r, port, NULL), 0);
    test_loop_until(e.base, &w.calls, 9000);
    cr_assert_eq(w.calls, 1);
    cr_expect_eq(w.status, 0, "%s (%s)", hilock_strerror(w.status), hilock_client_errstr(waiter));
    if (w.status == 0) release_now(&e, w.hold);
    hilock_client_free(waiter);
    hilock_client_free(holder);
}

/* A server that stays away: a try-once still ends at once, and a wait ends
 * when its time is up, with what the tries met (not ETIMEDOUT: nobody was
 * seen holding the lock). */
Test(health, a_wait_that_runs_out_while_redis_is_away_says_why) {
    hilock_client *c = lockenv_client(&e);
    got warm = acquire_now(&e, c, "away", NULL); /* connected first */
    cr_assert_eq(warm.status, 0);
    release_now(&e, warm.hold);
    test_redis_kill(&e.r);
    hilock_acquire_opts once = opts_wait(0), patient = opts_wait(2500);
    long long t0 = test_now_ms();
    got g = acquire_now(&e, c, "away", &once);
    cr_expect_eq(g.status, HILOCK_ECONN, "try-once: %s", hilock_strerror(g.status));
    cr_expect_lt(g.at_ms - t0, 1500, "a try-once waited %lld ms", g.at_ms - t0);
    t0 = test_now_ms();
    g = acquire_now(&e, c, "away", &patient);
    cr_expect_eq(g.status, HILOCK_ECONN, "wait: %s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    cr_expect_geq(g.at_ms - t0, 2400, "the wait ended after %lld ms of its 2500", g.at_ms - t0);
    hilock_client_free(c);
}

/* No renewal, a 5 s lease: the hold is lost by its own clock 1 % + 2 ms
 * before the lease (Redis's clock may run that much fast), or 2 ms before
 * with a clock_rate_ppm of 1. */
Test(health, a_hold_ends_early_by_the_clock_allowance) {
    for (int exact = 0; exact < 2; exact++) {
        hilock_config cfg;
        lockenv_config(&cfg, e.r.url);
        if (exact) cfg.clock_rate_ppm = 1;
        hilock_client *c = lockenv_client_cfg(&e, &cfg);
        hilock_acquire_opts o = opts_wait_lease(0, 5000);
        lostrec lost = {0, 0, 0};
        o.no_renew = 1;
        o.lost_cb = lost_cb;
        o.lost_data = &lost;
        long long t0 = test_now_ms();
        got g = acquire_now(&e, c, "drift", &o);
        cr_assert_eq(g.status, 0);
        test_loop_until(e.base, &lost.calls, 7000);
        cr_assert_eq(lost.calls, 1);
        long long held = lost.at_ms - t0;
        if (exact) cr_expect(held >= 4985 && held <= 5050, "lost after %lld ms (lease 5000, exact)", held);
        else cr_expect(held >= 4930 && held <= 4960, "lost after %lld ms (lease 5000 - 52)", held);
        release_now(&e, g.hold);
        hilock_client_free(c);
        freeReplyObject(test_redis_cmd(&e.r, "FLUSHALL"));
    }
}

/* A starving wait (a place in the queue in Redis) whose tries meet
 * READONLY for a while (the server made a replica of a port that refuses,
 * then a master again) keeps its one place, with its token: the release
 * hands it the lock at once, not to a place left behind by a token that
 * the wait no longer has. */
Test(health, a_starving_wait_keeps_its_one_place_through_a_readonly_spell) {
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.starve_ms = 50;
    hilock_client *a = lockenv_client(&e), *b = lockenv_client_cfg(&e, &cfg);
    char queue[300];
    snprintf(queue, sizeof(queue), "%s", prim_key("spell", ":q"));
    hilock_acquire_opts lease = opts_wait_lease(0, 30000), patient = opts_wait(30000);
    got ga = acquire_now(&e, a, "spell", &lease);
    cr_assert_eq(ga.status, 0);
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "spell", &patient, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 1500);
    cr_assert_eq(test_redis_int(&e.r, "ZCARD %s", queue), 1, "the starving wait has no place");
    freeReplyObject(test_redis_cmd(&e.r, "REPLICAOF 127.0.0.1 %d", test_refused_port()));
    test_loop_for(e.base, 1300); /* its refreshing tries meet READONLY */
    freeReplyObject(test_redis_cmd(&e.r, "REPLICAOF NO ONE"));
    test_loop_for(e.base, 1500);
    cr_expect_eq(test_redis_int(&e.r, "ZCARD %s", queue), 1, "one wait, %lld places",
                 test_redis_int(&e.r, "ZCARD %s", queue));
    long long t0 = test_now_ms();
    cr_assert_eq(release_now(&e, ga.hold), 0);
    test_loop_until(e.base, &gb.calls, 10000);
    cr_assert_eq(gb.calls, 1);
    cr_expect_eq(gb.status, 0, "%s", hilock_strerror(gb.status));
    cr_expect_lt(gb.at_ms - t0, 500, "served %lld ms after the release", gb.at_ms - t0);
    if (gb.status == 0) release_now(&e, gb.hold);
    hilock_client_free(b);
    hilock_client_free(a);
}

/* Redlock: a wait (8 s) rides through two of three masters down for 2.5 s
 * (no quorum meanwhile) and gets the lock when they are back. */
Test(health, a_redlock_wait_rides_through_a_lost_quorum) {
    test_redis m[2];
    memset(m, 0, sizeof(m));
    cr_assert_eq(test_redis_start(&m[0], 0, NULL), 0);
    cr_assert_eq(test_redis_start(&m[1], 0, NULL), 0);
    char url[200];
    snprintf(url, sizeof(url), "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", e.r.port, m[0].port,
             m[1].port);
    hilock_client *c = lockenv_client_url(&e, url, 0);
    got warm = acquire_now(&e, c, "rl", NULL);
    cr_assert_eq(warm.status, 0, "%s", hilock_strerror(warm.status));
    release_now(&e, warm.hold);
    int p0 = m[0].port, p1 = m[1].port;
    test_redis_kill(&m[0]);
    test_redis_kill(&m[1]);
    hilock_acquire_opts o = opts_wait(8000);
    got g = {0, 0, NULL, 0};
    long long t0 = test_now_ms();
    cr_assert_eq(hilock_acquire(c, "rl", &o, got_cb, &g, NULL), 0);
    test_loop_for(e.base, 2500);
    cr_expect_eq(g.calls, 0, "the wait ended after %lld ms: %s", g.at_ms - t0, hilock_strerror(g.status));
    cr_assert_eq(test_redis_start(&m[0], p0, NULL), 0);
    cr_assert_eq(test_redis_start(&m[1], p1, NULL), 0);
    test_loop_until(e.base, &g.calls, 9000);
    cr_expect_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    if (g.calls && g.status == 0) release_now(&e, g.hold);
    hilock_client_free(c);
    test_redis_stop(&m[0]);
    test_redis_stop(&m[1]);
}

/* WAIT holds its connection for up to wait_timeout_ms (here 2 s, no
 * replica: it always runs out): that is not a dead connection, whatever
 * health_ms says (1 s here): the acquire ends with HILOCK_EREPLICAS, and
 * no connection is dropped. */
Test(health, a_long_wait_for_replicas_is_not_silence) {
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.request_timeout_ms = 9000;
    cfg.wait_replicas = 1;
    cfg.wait_timeout_ms = 2000;
    cfg.health_ms = 1000;
    hilock_client *c = lockenv_client_cfg(&e, &cfg);
    hilock_acquire_opts once = opts_wait(0);
    got g = acquire_now(&e, c, "wr", &once);
    cr_expect_eq(g.status, HILOCK_EREPLICAS, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    cr_expect_eq(stats_of(c).node[0].disconnects, 0, "connections dropped under WAIT");
    hilock_client_free(c);
}

static void stall_loop(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    usleep((useconds_t)(*(int *)arg) * 1000); /* the process away: a pause, a stop */
}

/* A loop that stalls (or a process stopped) longer than health_ms: when it
 * runs again, its health ticks come late, and what the server sent
 * meanwhile is still unread in the sockets: no connection is dropped for
 * a silence that was our own. */
Test(health, our_own_stall_is_not_the_servers_silence) {
    loglines log = {{0}, 0};
    hilock_client *holder = lockenv_client(&e), *waiter = client_at(e.r.url, 400, &log);
    got h = acquire_now(&e, holder, "stall", NULL);
    cr_assert_eq(h.status, 0);
    got w = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(waiter, "stall", NULL, got_cb, &w, NULL), 0);
    test_loop_for(e.base, 300);
    int ms = 1500;
    struct timeval now = {0, 0};
    event_base_once(e.base, -1, EV_TIMEOUT, stall_loop, &ms, &now);
    test_loop_for(e.base, 100); /* the stall */
    test_loop_for(e.base, 600); /* then the ticks, late */
    cr_expect_eq(stats_of(waiter).node[0].disconnects, 0, "dropped after our own stall:\n%s", log.text);
    cr_assert_eq(release_now(&e, h.hold), 0);
    test_loop_until(e.base, &w.calls, 3000);
    cr_expect_eq(w.status, 0);
    if (w.status == 0) release_now(&e, w.hold);
    hilock_client_free(waiter);
    hilock_client_free(holder);
}
