/* Fences that need no permanent key, and servers that may evict locks.
 *
 * fence:    a fence is max(last + 1, server TIME in µs); the fence key has a
 *           TTL renewed by each acquisition. Fences keep growing across a
 *           restart without persistence, a deleted key, an expired key.
 * eviction: the client reads maxmemory-policy at connect, warns through
 *           cfg.log_cb, and with require_noeviction refuses the server. */
#include <unistd.h>
#include "support/lockenv.h"

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

static void fence_key(const char *name, char *key, size_t n) {
    hilock_key("hilock:", name, key, n);
    strncat(key, ":fence", n - strlen(key) - 1);
}

/* The server's clock, in µs. */
static long long server_us(const test_redis *r) {
    redisContext *k = test_redis_connect(r);
    redisReply *rep = k ? redisCommand(k, "TIME") : NULL;
    long long us = -1;
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2)
        us = atoll(rep->element[0]->str) * 1000000LL + atoll(rep->element[1]->str);
    if (rep) freeReplyObject(rep);
    if (k) redisFree(k);
    return us;
}

static hilock_client *client_cfg(const char *url, uint32_t fence_ttl_s, hilock_log_cb log,
                                 void *log_data, int require) {
    hilock_config cfg;
    lockenv_config(&cfg, url);
    cfg.fence_ttl_s = fence_ttl_s;
    cfg.log_cb = log;
    cfg.log_data = log_data;
    cfg.require_noeviction = require;
    return lockenv_client_cfg(&e, &cfg);
}

/* Acquire and release `name` once; its fence. */
static unsigned long long take_once(hilock_client *c, const char *name) {
    got g = acquire_now(&e, c, name, NULL);
    cr_assert_eq(g.status, 0, "acquire %s: %s", name, hilock_strerror(g.status));
    unsigned long long f = hilock_hold_fence(g.hold);
    cr_assert_eq(release_now(&e, g.hold), 0);
    return f;
}

/* ---- fence -------------------------------------------------------------- */

TestSuite(fence, .init = setup, .fini = teardown, .timeout = 60);

Test(fence, follows_the_server_clock_and_stays_exact) {
    hilock_client *c = lockenv_client(&e);
    long long before = server_us(&e.r);
    unsigned long long f1 = take_once(c, "clock");
    long long after = server_us(&e.r);
    cr_expect_geq((long long)f1, before, "fence %llu before the clock %lld", f1, before);
    cr_expect_leq((long long)f1, after, "fence %llu after the clock %lld", f1, after);
    cr_expect_lt(f1, 1ULL << 53);
    /* Back to back, faster than the clock's resolution could separate. */
    unsigned long long last = f1;
    for (int i = 0; i < 200; i++) {
        unsigned long long f = take_once(c, "clock");
        cr_assert_gt(f, last, "fence %llu after %llu", f, last);
        last = f;
    }
    /* The fence key holds the same number, written in full (not 1.7e+15). */
    got g = acquire_now(&e, c, "clock", NULL);
    char key[128], want[32];
    hilock_key("hilock:", "clock", key, sizeof(key));
    redisContext *k = test_redis_connect(&e.r);
    redisReply *rep = redisCommand(k, "GET %s:fence", key);
    snprintf(want, sizeof(want), "%llu", (unsigned long long)hilock_hold_fence(g.hold));
    cr_expect_str_eq(rep->str, want);
    freeReplyObject(rep);
    redisFree(k);
    cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
}

/* The key lives fence_ttl_s from when it was made: acquisitions count on
 * it (one INCR) without writing its TTL again; once it is gone, the next
 * acquisition makes it anew, from the clock. */
Test(fence, key_lives_its_ttl_from_when_it_was_made) {
    hilock_client *c = lockenv_client(&e);
    char key[128];
    fence_key("ttl", key, sizeof(key));
    unsigned long long f1 = take_once(c, "ttl");
    long long ttl = test_redis_int(&e.r, "TTL %s", key);
    cr_expect_gt(ttl, 7 * 24 * 3600 - 10, "fence key TTL %lld", ttl);
    cr_expect_leq(ttl, 7 * 24 * 3600);
    cr_assert_eq(test_redis_int(&e.r, "EXPIRE %s 100", key), 1);
    cr_expect_eq(take_once(c, "ttl"), f1 + 1, "one more");
    ttl = test_redis_int(&e.r, "TTL %s", key);
    cr_expect(ttl > 0 && ttl <= 100, "renewed by an acquisition: TTL %lld", ttl);
    cr_assert_eq(test_redis_int(&e.r, "DEL %s", key), 1);
    unsigned long long f3 = take_once(c, "ttl");
    cr_expect_gt(f3, f1 + 1);
    cr_expect_gt(test_redis_int(&e.r, "TTL %s", key), 7 * 24 * 3600 - 10, "made anew");
    hilock_client_free(c);
}

Test(fence, grows_after_the_key_is_deleted) {
    hilock_client *c = lockenv_client(&e);
    char key[128];
    fence_key("del", key, sizeof(key));
    unsigned long long f1 = take_once(c, "del");
    cr_assert_eq(test_redis_int(&e.r, "DEL %s", key), 1);
    unsigned long long f2 = take_once(c, "del");
    cr_expect_gt(f2, f1, "fence %llu after %llu with the key deleted", f2, f1);
    hilock_client_free(c);
}

Test(fence, grows_after_the_key_expired) {
    hilock_client *c = client_cfg(e.r.url, 1, NULL, NULL, 0);
    char key[128];
    fence_key("exp", key, sizeof(key));
    unsigned long long f1 = take_once(c, "exp");
    cr_expect_leq(test_redis_int(&e.r, "TTL %s", key), 1);
    test_loop_for(e.base, 1300);
    cr_assert_eq(test_redis_int(&e.r, "EXISTS %s", key), 0, "the fence key did not expire");
    unsigned long long f2 = take_once(c, "exp");
    cr_expect_gt(f2, f1, "fence %llu after %llu with the key expired", f2, f1);
    hilock_client_free(c);
}

Test(fence, grows_after_a_restart_without_persistence) {
    hilock_client *c = lockenv_client(&e);
    unsigned long long f1 = take_once(c, "restart");
    int port = e.r.port;
    test_redis_int(&e.r, "SHUTDOWN NOSAVE");
    test_redis_stop(&e.r);
    cr_assert_eq(test_redis_start(&e.r, port, NULL), 0, "restart on %d", port);
    cr_assert_eq(test_redis_int(&e.r, "DBSIZE"), 0, "the data should be gone");
    unsigned long long f2 = take_once(c, "restart");
    cr_expect_gt(f2, f1, "fence %llu after %llu across a restart", f2, f1);
    hilock_client_free(c);
}

/* A counter ahead of the clock (written by 0.1's INCR scheme, or after the
 * clock stepped back) is still followed by +1, and given a TTL. */
Test(fence, counter_ahead_of_the_clock_still_grows) {
    hilock_client *c = lockenv_client(&e);
    char key[128];
    fence_key("ahead", key, sizeof(key));
    long long ahead = server_us(&e.r) + 3600LL * 1000000;
    redisContext *k = test_redis_connect(&e.r);
    freeReplyObject(redisCommand(k, "SET %s %lld", key, ahead));
    redisFree(k);
    cr_expect_eq((long long)take_once(c, "ahead"), ahead + 1);
    cr_expect_eq((long long)take_once(c, "ahead"), ahead + 2);
    /* An old small counter without TTL: the clock takes over. */
    k = test_redis_connect(&e.r);
    freeReplyObject(redisCommand(k, "SET %s 5", key));
    redisFree(k);
    cr_expect_gt(take_once(c, "ahead"), 1000000000000000ULL);
    cr_expect_gt(test_redis_int(&e.r, "TTL %s", key), 0);
    hilock_client_free(c);
}

/* ---- eviction ------------------------------------------------------------ */

TestSuite(eviction, .init = setup, .fini = teardown, .timeout = 60);

typedef struct logbook {
    int n, warnings;   /* messages; warnings about the eviction policy */
    char last[512];    /* the last of those */
} logbook;

/* Counts the policy's warnings; a reconnect's own (the connection lost,
 * back) are not this suite's business. */
static void log_to(int level, const char *msg, void *data) {
    logbook *b = data;
    if (strstr(msg, "connection to ") != NULL) return;
    b->n++;
    if (level == HILOCK_LOG_WARNING) b->warnings++;
    snprintf(b->last, sizeof(b->last), "%s", msg);
}

static void set_policy(const char *policy) {
    redisContext *k = test_redis_connect(&e.r);
    redisReply *rep = redisCommand(k, "CONFIG SET maxmemory-policy %s", policy);
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "CONFIG SET maxmemory-policy %s", policy);
    freeReplyObject(rep);
    redisFree(k);
}

Test(eviction, noeviction_is_quiet) {
    logbook b = {0, 0, ""};
    hilock_client *c = client_cfg(e.r.url, 0, log_to, &b, 1);
    take_once(c, "quiet");
    cr_expect_eq(b.n, 0, "logged: %s", b.last);
    hilock_client_free(c);
}

Test(eviction, evicting_policies_warn_once_and_still_work) {
    static const char *const policies[] = {"allkeys-lru", "volatile-ttl", "allkeys-random"};
    for (int i = 0; i < 3; i++) {
        set_policy(policies[i]);
        logbook b = {0, 0, ""};
        hilock_client *c = client_cfg(e.r.url, 0, log_to, &b, 0);
        take_once(c, "warned");
        take_once(c, "warned");
        cr_expect_eq(b.warnings, 1, "%s: %d warnings", policies[i], b.warnings);
        cr_expect_not_null(strstr(b.last, policies[i]), "%s not named in: %s", policies[i], b.last);
        /* A reconnect to the same policy does not repeat it. */
        test_redis_int(&e.r, "CLIENT KILL TYPE normal");
        test_loop_for(e.base, 100);
        take_once(c, "warned");
        cr_expect_eq(b.warnings, 1, "%s: warned again after a reconnect", policies[i]);
        hilock_client_free(c);
    }
}

Test(eviction, require_noeviction_refuses_the_server) {
    set_policy("allkeys-lru");
    logbook b = {0, 0, ""};
    hilock_client *c = client_cfg(e.r.url, 0, log_to, &b, 1);
    got g = acquire_now(&e, c, "refused", NULL);
    cr_expect_eq(g.status, HILOCK_EEVICTION, "got %s", hilock_strerror(g.status));
    cr_expect_not_null(strstr(hilock_client_errstr(c), "allkeys-lru"), "errstr: %s",
                       hilock_client_errstr(c));
    cr_expect_eq(b.warnings, 1);
    cr_expect_eq(lock_exists(&e.r, "refused"), 0, "nothing may be written");
    /* Fixed on the server: the next connection is accepted. */
    set_policy("noeviction");
    test_loop_for(e.base, 1200); /* the reconnect backoff */
    got g2 = acquire_now(&e, c, "refused", NULL);
    cr_expect_eq(g2.status, 0, "got %s", hilock_strerror(g2.status));
    if (g2.status == 0) cr_expect_eq(release_now(&e, g2.hold), 0);
    hilock_client_free(c);
}

/* INFO forbidden to the ACL user: the policy is unknown, which warns, and
 * which require_noeviction refuses. */
Test(eviction, unreadable_policy) {
    redisContext *k = test_redis_connect(&e.r);
    redisReply *rep = redisCommand(k, "ACL SETUSER noinfo on >pw ~* &* +@all -info");
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    redisFree(k);
    char url[128];
    snprintf(url, sizeof(url), "redis://noinfo:pw@127.0.0.1:%d", e.r.port);
    for (int require = 0; require < 2; require++) {
        logbook b = {0, 0, ""};
        hilock_client *c = client_cfg(url, 0, log_to, &b, require);
        got g = acquire_now(&e, c, "noinfo", NULL);
        cr_expect_eq(g.status, require ? HILOCK_EEVICTION : 0, "require %d: got %s", require,
                     hilock_strerror(g.status));
        if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
        cr_expect_eq(b.warnings, 1);
        cr_expect_not_null(strstr(b.last, "cannot read maxmemory-policy"), "%s", b.last);
        hilock_client_free(c);
    }
}
