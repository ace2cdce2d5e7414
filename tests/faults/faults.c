/* Fault injection against real redis-server processes: killed connections,
 * a stalled server, a restart on the same port, a server that comes up late,
 * and server-side refusals. Each test checks that every waiter ends with
 * exactly one callback, that no two holders overlap (fences in order), and
 * that nothing is left behind. */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/lockenv.h"

static lockenv e;


static void setup(void) { lockenv_start_debuggable(&e); }
static void teardown(void) { lockenv_stop(&e); }

TestSuite(faults, .init = setup, .fini = teardown, .timeout = 60);

/* A shared "resource" that checks the invariants for in-process waiters. */
typedef struct tally {
    int expected;
    int callbacks;
    int granted;
    int errors;
    int inside;
    int overlaps;
    uint64_t last_fence;
    int regressions;
    int hold_ms;             /* keep each hold this long before releasing */
    struct event_base *base;
    volatile int done;
} tally;

typedef struct slot {
    tally *t;
    hilock_hold *h;
    struct event *ev;
    int calls;
} slot;

static void finish_one(tally *t) {
    if (t->callbacks == t->expected) t->done = 1;
}

static void slot_release(evutil_socket_t fd, short what, void *arg) {
    slot *s = arg;
    (void)fd; (void)what;
    s->t->inside = 0;
    hilock_release(s->h, NULL, NULL);
    finish_one(s->t);
}

static void slot_acquired(hilock_hold *h, int status, void *data) {
    slot *s = data;
    tally *t = s->t;
    s->calls++;
    t->callbacks++;
    if (status != 0) {
        t->errors++;
        finish_one(t);
        return;
    }
    t->granted++;
    if (t->inside) t->overlaps++;
    t->inside = 1;
    if (hilock_hold_fence(h) <= t->last_fence) t->regressions++;
    t->last_fence = hilock_hold_fence(h);
    s->h = h;
    if (t->hold_ms == 0) { slot_release(-1, 0, s); return; }
    struct timeval tv = {0, t->hold_ms * 1000};
    s->ev = evtimer_new(t->base, slot_release, s);
    evtimer_add(s->ev, &tv);
}

static slot *start_waiters(hilock_client *c, tally *t, const char *name, int n) {
    slot *s = calloc((size_t)n, sizeof(*s));
    t->expected += n;
    for (int i = 0; i < n; i++) {
        s[i].t = t;
        cr_assert_eq(hilock_acquire(c, name, NULL, slot_acquired, &s[i], NULL), 0);
    }
    return s;
}

static void free_slots(slot *s, int n) {
    for (int i = 0; i < n; i++) {
        cr_expect_eq(s[i].calls, 1, "waiter %d got %d callbacks", i, s[i].calls);
        if (s[i].ev) event_free(s[i].ev);
    }
    free(s);
}

Test(faults, pubsub_killed_while_waiting) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = acquire_now(&e, a, "f1", NULL);
    tally t = {0};
    t.base = e.base;
    slot *s = start_waiters(b, &t, "f1", 300);
    test_loop_for(e.base, 100);
    long long subs = numsub(&e.r, "f1");
    cr_assert_eq(subs, 1, "NUMSUB %lld", subs);
    cr_expect_geq(test_redis_int(&e.r, "CLIENT KILL TYPE pubsub"), 1);
    /* Release while b's subscriber is down: b misses the message. */
    long long t0 = test_now_ms();
    cr_expect_eq(release_now(&e, ga.hold), 0);
    cr_assert(test_loop_until(e.base, &t.done, 20000));
    cr_expect_lt(test_now_ms() - t0, 5000, "woken by the resubscription, not the 30 s lease");
    cr_expect_eq(t.granted, 300);
    cr_expect_eq(t.errors, 0);
    cr_expect_eq(t.overlaps, 0);
    cr_expect_eq(t.regressions, 0);
    free_slots(s, 300);
    test_loop_for(e.base, 100);
    cr_expect_eq(lock_exists(&e.r, "f1"), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(faults, normal_killed_while_renewing_and_waiting) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 600;
    got ga = acquire_now(&e, a, "f2", &o);
    tally t = {0};
    t.base = e.base;
    slot *s = start_waiters(b, &t, "f2", 50);
    for (int i = 0; i < 8; i++) { /* kills across several renewals */
        test_loop_for(e.base, 150);
        test_redis_int(&e.r, "CLIENT KILL TYPE normal");
    }
    cr_expect_eq(hilock_hold_lost(ga.hold), 0, "reconnects keep the lease alive");
    cr_expect_eq(t.callbacks, 0);
    cr_expect_eq(release_now(&e, ga.hold), 0);
    cr_assert(test_loop_until(e.base, &t.done, 20000));
    cr_expect_eq(t.granted, 50);
    cr_expect_eq(t.overlaps + t.regressions, 0);
    free_slots(s, 50);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* Connections killed again and again while two clients hand a lock back and
 * forth with holds of a few ms: replies get lost, requests are re-sent with
 * the same token, and still nobody holds twice or gets two callbacks. */
static void kill_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    int *n = arg;
    test_redis_int(&e.r, (*n)++ % 2 ? "CLIENT KILL TYPE normal" : "CLIENT KILL TYPE pubsub");
}

Test(faults, kills_during_handoffs) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    tally t = {0};
    t.base = e.base;
    t.hold_ms = 2;
    slot *sa = start_waiters(a, &t, "f3", 150);
    slot *sb = start_waiters(b, &t, "f3", 150);
    int kills = 0;
    struct event *k = event_new(e.base, -1, EV_PERSIST, kill_tick, &kills);
    struct timeval tv = {0, 40 * 1000};
    evtimer_add(k, &tv);
    cr_assert(test_loop_until(e.base, &t.done, 40000), "every waiter must end");
    event_free(k);
    cr_expect_gt(kills, 3);
    cr_expect_eq(t.overlaps, 0, "two holders at once");
    cr_expect_eq(t.regressions, 0, "fences out of order");
    cr_expect_eq(t.granted + t.errors, 300);
    cr_log_info("kills_during_handoffs: %d kills, %d granted, %d errors", kills, t.granted, t.errors);
    free_slots(sa, 150);
    free_slots(sb, 150);
    test_loop_for(e.base, 300);
    cr_expect_eq(lock_exists(&e.r, "f3"), 0, "no lock left behind");
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(faults, stall_longer_than_deadline) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e); /* deadline 1 s */
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 900;
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = acquire_now(&e, a, "f4", &o);
    cr_assert_eq(ga.status, 0);
    long long t0 = test_now_ms();
    pid_t sleeper = test_redis_debug_sleep(&e.r, "2.5");
    test_loop_for(e.base, 100);
    got gb = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(b, "f5", NULL, got_cb, &gb, NULL), 0);
    cr_assert(test_loop_until(e.base, &gb.calls, 5000));
    cr_expect_eq(gb.status, HILOCK_EDEADLINE, "got %s", hilock_strerror(gb.status));
    cr_assert(test_loop_until(e.base, &lost.calls, 5000));
    /* Lost no later than one lease after the last renewal that worked
     * (which was at most lease/3 before the stall began). */
    cr_expect_leq(lost.at_ms - t0, 900 + 50, "lost reported %lld ms into the stall", lost.at_ms - t0);
    int st;
    waitpid(sleeper, &st, 0);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "DEBUG SLEEP failed (is DEBUG enabled?)");
    /* After the stall everything works again. */
    got g2 = acquire_now(&e, b, "f5", NULL);
    cr_expect_eq(g2.status, 0);
    cr_expect_eq(release_now(&e, g2.hold), 0);
    cr_expect_eq(release_now(&e, ga.hold), HILOCK_ELOST);
    cr_expect_eq(lost.calls, 1);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(faults, restart_on_same_port) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = 1500;
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = acquire_now(&e, a, "f6", &o);
    tally t = {0};
    t.base = e.base;
    slot *s = start_waiters(b, &t, "f6", 100);
    test_loop_for(e.base, 100);
    int port = e.r.port;
    test_redis_int(&e.r, "SHUTDOWN NOSAVE"); /* the data is gone */
    test_redis_stop(&e.r);
    test_loop_for(e.base, 200);
    cr_assert_eq(test_redis_start_debuggable(&e.r, port), 0, "restart on port %d", port);
    /* The holder learns at its next renewal that the key is gone; the waiters
     * resubscribe, retry and get it (scripts reload via NOSCRIPT -> EVAL). */
    cr_assert(test_loop_until(e.base, &lost.calls, 5000));
    cr_expect_eq(lost.why, HILOCK_ELOST);
    cr_assert(test_loop_until(e.base, &t.done, 20000));
    cr_expect_eq(t.granted, 100);
    cr_expect_eq(t.overlaps, 0);
    free_slots(s, 100);
    cr_expect_eq(release_now(&e, ga.hold), HILOCK_ELOST);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(faults, server_comes_up_later) {
    int port = test_free_port();
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    test_redis r2;
    hilock_client *c = lockenv_client_url(&e, url, 0); /* request deadline 1 s */
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(c, "late", NULL, got_cb, &g, NULL), 0);
    test_loop_for(e.base, 250);
    cr_expect_eq(g.calls, 0);
    cr_assert_eq(test_redis_start(&r2, port, NULL), 0);
    cr_assert(test_loop_until(e.base, &g.calls, 3000));
    cr_expect_eq(g.status, 0, "got %s", hilock_strerror(g.status));
    cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
    test_redis_stop(&r2);
}

/* ---- Server refusals ------------------------------------------------------ */

static got acquire_on(test_redis *r, const char *name) {
    hilock_client *c = lockenv_client_url(&e, r->url, 0);
    got g = acquire_now(&e, c, name, NULL);
    hilock_client_free(c);
    return g;
}

Test(faults, out_of_memory) {
    cr_assert_eq(test_redis_int(&e.r, "SET %s %s", "filler", "x"), -1); /* status reply */
    redisContext *k = test_redis_connect(&e.r);
    freeReplyObject(redisCommand(k, "CONFIG SET maxmemory-policy noeviction"));
    freeReplyObject(redisCommand(k, "CONFIG SET maxmemory 1"));
    got g = acquire_on(&e.r, "oom");
    cr_expect_eq(g.status, HILOCK_EOOM, "got %s", hilock_strerror(g.status));
    freeReplyObject(redisCommand(k, "CONFIG SET maxmemory 0"));
    redisFree(k);
    g = acquire_on(&e.r, "oom");
    cr_expect_eq(g.status, 0);
}

Test(faults, read_only_replica) {
    test_redis replica;
    char port[16];
    snprintf(port, sizeof(port), "%d", e.r.port);
    cr_assert_eq(test_redis_start(&replica, 0, "--replicaof", "127.0.0.1", port, NULL), 0);
    got g = acquire_on(&replica, "ro");
    cr_expect_eq(g.status, HILOCK_EREADONLY, "got %s", hilock_strerror(g.status));
    test_redis_stop(&replica);
}

Test(faults, not_a_lock_key) {
    cr_assert_eq(test_redis_int(&e.r, "RPUSH %s %s", "hilock:{str}", "x"), 1); /* a list: no lock */
    got g = acquire_on(&e.r, "str");
    cr_expect_eq(g.status, HILOCK_ESCRIPT, "got %s", hilock_strerror(g.status));
}

Test(faults, no_auth) {
    test_redis r2;
    cr_assert_eq(test_redis_start(&r2, 0, "--requirepass", "pw", NULL), 0);
    got g = acquire_on(&r2, "na");
    cr_expect_eq(g.status, HILOCK_EAUTH, "got %s", hilock_strerror(g.status));
    test_redis_stop(&r2);
}

Test(faults, acl_user) {
    test_redis r2;
    cr_assert_eq(test_redis_start(&r2, 0, NULL), 0);
    cr_assert_eq(test_redis_int(&r2, "ACL SETUSER locker on >s3cret ~hilock:* &* +@all"), -1);
    char url[96];
    snprintf(url, sizeof(url), "redis://locker:s3cret@127.0.0.1:%d", r2.port);
    hilock_client *c = lockenv_client_url(&e, url, 0);
    got g = acquire_now(&e, c, "acl", NULL);
    cr_expect_eq(g.status, 0, "got %s: %s", hilock_strerror(g.status), hilock_client_errstr(c));
    if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
    snprintf(url, sizeof(url), "redis://locker:nope@127.0.0.1:%d", r2.port);
    c = lockenv_client_url(&e, url, 0);
    g = acquire_now(&e, c, "acl", NULL);
    cr_expect_eq(g.status, HILOCK_EAUTH);
    hilock_client_free(c);
    test_redis_stop(&r2);
}

Test(faults, scripts_reload_after_flush) {
    hilock_client *c = lockenv_client(&e);
    got g = acquire_now(&e, c, "fl", NULL);
    cr_assert_eq(release_now(&e, g.hold), 0);
    long long evals = stat_calls(&e.r, "eval");
    cr_assert_eq(test_redis_int(&e.r, "SCRIPT FLUSH"), -1); /* status reply */
    g = acquire_now(&e, c, "fl", NULL);
    cr_expect_eq(g.status, 0, "NOSCRIPT must fall back to EVAL");
    cr_expect_eq(stat_calls(&e.r, "eval"), evals + 1, "one EVAL reloads the script");
    cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
}

Test(faults, unix_socket) {
    test_redis r2;
    char dir[] = "/tmp/hilock-sock-XXXXXX", sock[200], url[220];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(sock, sizeof(sock), "%s/redis.sock", dir);
    cr_assert_eq(test_redis_start(&r2, 0, "--unixsocket", sock, NULL), 0);
    snprintf(url, sizeof(url), "unix://%s?db=2", sock);
    hilock_client *c = lockenv_client_url(&e, url, 0);
    got g = acquire_now(&e, c, "ux", NULL);
    cr_expect_eq(g.status, 0, "got %s: %s", hilock_strerror(g.status), hilock_client_errstr(c));
    redisContext *k = test_redis_connect(&r2);
    freeReplyObject(redisCommand(k, "SELECT 2"));
    redisReply *rep = redisCommand(k, "EXISTS hilock:{ux}");
    cr_expect_eq(rep->integer, 1, "the lock lives in db 2");
    freeReplyObject(rep);
    redisFree(k);
    if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
    test_redis_stop(&r2);
    unlink(sock); /* SIGKILL leaves it behind */
    rmdir(dir);
}

/* A server still loading its data set answers LOADING: requests are retried
 * until their deadline, then end with HILOCK_ELOADING. Loading is slowed
 * with Redis's own test knobs (key-load-delay). */
static pid_t start_loading(const char *dir, int port) {
    char p[16];
    snprintf(p, sizeof(p), "%d", port);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execlp(test_server_bin(), test_server_bin(), "--port", p, "--bind", "127.0.0.1", "--dir", dir,
               "--save", "", "--appendonly", "no", "--key-load-delay", "50",
               "--loading-process-events-interval-bytes", "1024", "--logfile", "loading.log",
               (char *)NULL);
        _exit(127);
    }
    return pid;
}

Test(faults, loading_is_retried) {
    cr_assert_eq(test_redis_int(&e.r, "DEBUG POPULATE 20000"), -1);
    cr_assert_eq(test_redis_int(&e.r, "SAVE"), -1);
    int port = test_free_port();
    pid_t pid = start_loading(e.r.dir, port);
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    redisContext *k = NULL;
    for (int i = 0; i < 100 && k == NULL; i++) { /* wait until it listens */
        k = redisConnect("127.0.0.1", port);
        if (k && k->err) { redisFree(k); k = NULL; usleep(20000); }
    }
    cr_assert_not_null(k);
    redisReply *rep = redisCommand(k, "SET probe 1");
    int loading = rep && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "LOADING", 7) == 0;
    if (rep) freeReplyObject(rep);
    redisFree(k);
    cr_assert(loading, "the server should still be loading");

    /* A short deadline: the loading outlasts it. */
    hilock_config cfg;
    hilock_config_init(&cfg);
    cfg.url = url;
    cfg.request_timeout_ms = 200;
    hilock_client *fast = NULL;
    cr_assert_eq(hilock_client_new(&fast, &cfg, &e.loop), 0);
    got g = acquire_now(&e, fast, "ld", NULL);
    cr_expect_eq(g.status, HILOCK_ELOADING, "got %s", hilock_strerror(g.status));
    hilock_client_free(fast);

    /* A long one: retried until the data set is in. */
    cfg.request_timeout_ms = 20000;
    hilock_client *patient = NULL;
    cr_assert_eq(hilock_client_new(&patient, &cfg, &e.loop), 0);
    got g2 = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(patient, "ld", NULL, got_cb, &g2, NULL), 0);
    cr_assert(test_loop_until(e.base, &g2.calls, 25000));
    cr_expect_eq(g2.status, 0, "got %s", hilock_strerror(g2.status));
    if (g2.status == 0) cr_expect_eq(release_now(&e, g2.hold), 0);
    hilock_client_free(patient);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}
