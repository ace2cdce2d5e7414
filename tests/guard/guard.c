/* Guarded writes (hilock_hold_eval): a caller's script runs in Redis only
 * while the hold's token still holds the lock, atomically with that check.
 *
 * guard:         on one server: the write lands while held; a lock broken
 *                or taken over, or a reader's lease run out, refuses it
 *                (HILOCK_ELOST, nothing written, the hold lost); the
 *                script sees its own KEYS and ARGV, binary arguments,
 *                errors with its own line numbers; keys outside the
 *                lock's slot are refused before anything is sent; an eval
 *                sent before the release runs before it; a script flushed
 *                from Redis is sent again by its text; every primitive.
 * guard_faults:  a reply lost with the connection: the script ran once,
 *                the caller is told the answer never came, and it is
 *                never sent twice.
 * guard_cluster: on a 3+3 cluster, the write goes to the slot's master.
 * guard_sentinel: under Sentinel, on the master, WAITed for with
 *                wait_replicas (HILOCK_EREPLICAS, with the reply, when the
 *                replica is gone); a check and a revoke there too.
 * check:         hilock_check, the fence of a mutex's current holder (0 when
 *                free) for a resource server; neither it nor a guarded
 *                write runs over Redlock. */
#include <unistd.h>
#include "support/lockenv.h"
#include "support/clusterenv.h"
#include "support/blackhole.h"

typedef struct evalrec {
    int calls;
    int status;
    int type;
    long long integer;
    char str[256];
    size_t len;
    size_t elements;
} evalrec;

static void eval_cb(int status, const struct redisReply *reply, void *data) {
    evalrec *r = data;
    r->calls++;
    r->status = status;
    r->type = reply ? reply->type : -1;
    if (reply && reply->type == REDIS_REPLY_INTEGER) r->integer = reply->integer;
    if (reply && reply->str) {
        r->len = reply->len < sizeof(r->str) ? reply->len : sizeof(r->str) - 1;
        memcpy(r->str, reply->str, r->len);
    }
    if (reply) r->elements = reply->elements;
}

/* Eval and run the loop until the callback came. */
static evalrec eval_now(struct event_base *base, hilock_hold *h, hilock_script *s, int nkeys,
                        const char *const *keys, int nargs, const char *const *args) {
    evalrec r;
    memset(&r, 0, sizeof(r));
    int rc = hilock_hold_eval(h, s, nkeys, keys, nargs, args, NULL, eval_cb, &r);
    cr_assert_eq(rc, 0, "hilock_hold_eval: %s", hilock_strerror(rc));
    test_loop_until(base, &r.calls, 5000);
    cr_assert_eq(r.calls, 1, "the eval's callback ran %d times", r.calls);
    return r;
}

static hilock_script *script(const char *body) {
    hilock_script *s = NULL;
    cr_assert_eq(hilock_script_new(&s, body), 0);
    return s;
}

static const char INCR[] = "return redis.call('INCRBY', KEYS[1], ARGV[1] or 1)";

/* The number at `key` on r (-1: none). */
static long long get_num(const test_redis *r, const char *key) {
    redisReply *rep = test_redis_cmd(r, "GET %s", key);
    long long v = rep && rep->type == REDIS_REPLY_STRING ? atoll(rep->str) : -1;
    if (rep) freeReplyObject(rep);
    return v;
}

/* Did r answer `cmd` (one argument, a) without an error? */
static int cmd_ok(const test_redis *r, const char *fmt, const char *a) {
    redisReply *rep = test_redis_cmd(r, fmt, a);
    int ok = rep && rep->type != REDIS_REPLY_ERROR;
    if (rep) freeReplyObject(rep);
    return ok;
}

static lockenv e;
static void setup(void) { lockenv_start(&e); }
static void teardown(void) { lockenv_stop(&e); }

/* ---- guard -------------------------------------------------------------- */

TestSuite(guard, .init = setup, .fini = teardown, .timeout = 60);

Test(guard, writes_while_held_and_the_script_sees_its_own_keys_and_args) {
    hilock_client *c = lockenv_client(&e);
    got g = acquire_now(&e, c, "g", NULL);
    cr_assert_eq(g.status, 0);
    char k1[256], k2[256];
    cr_assert_gt(hilock_hold_key(g.hold, "count", k1, sizeof(k1)), 0);
    cr_assert_gt(hilock_hold_key(g.hold, "other", k2, sizeof(k2)), 0);
    char lock[256];
    hilock_key("hilock:", "g", lock, sizeof(lock));
    cr_expect(strncmp(k1, lock, strlen(lock)) == 0 && strcmp(k1 + strlen(lock), ":u:count") == 0,
              "hilock_hold_key: %s", k1);
    hilock_script *s = script(INCR);
    const char *keys[] = {k1}, *args[] = {"5"};
    evalrec r = eval_now(e.base, g.hold, s, 1, keys, 1, args);
    cr_expect_eq(r.status, 0, "%s: %s", hilock_strerror(r.status), hilock_client_errstr(c));
    cr_expect_eq(r.type, REDIS_REPLY_INTEGER);
    cr_expect_eq(r.integer, 5);
    cr_expect_eq(get_num(&e.r, k1), 5);
    /* KEYS and ARGV are the caller's: the guard's own are not visible. */
    hilock_script *shape = script("return #KEYS .. ' ' .. #ARGV .. ' ' .. KEYS[1] .. ' ' .. "
                                  "KEYS[2] .. ' ' .. ARGV[1] .. ' ' .. ARGV[2]");
    const char *keys2[] = {k1, k2}, *args2[] = {"a", "b"};
    r = eval_now(e.base, g.hold, shape, 2, keys2, 2, args2);
    char want[600];
    snprintf(want, sizeof(want), "2 2 %s %s a b", k1, k2);
    cr_expect_eq(r.status, 0);
    cr_expect_str_eq(r.str, want);
    /* No keys, no arguments. */
    hilock_script *none = script("return #KEYS + #ARGV");
    r = eval_now(e.base, g.hold, none, 0, NULL, 0, NULL);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.integer, 0);
    /* Binary arguments, with their lengths. */
    hilock_script *len = script("return string.len(ARGV[1])");
    const char bin[] = {'a', '\0', 'b'};
    const char *bargs[] = {bin};
    size_t blen[] = {3};
    evalrec b;
    memset(&b, 0, sizeof(b));
    cr_assert_eq(hilock_hold_eval(g.hold, len, 0, NULL, 1, bargs, blen, eval_cb, &b), 0);
    test_loop_until(e.base, &b.calls, 5000);
    cr_expect_eq(b.status, 0);
    cr_expect_eq(b.integer, 3);
    hilock_script_free(s);
    hilock_script_free(shape);
    hilock_script_free(none);
    hilock_script_free(len);
    cr_assert_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
}

/* The embarrassing case: the lock was broken (an operator, or a lease that
 * ran out while the holder was paused) and someone else holds it. The
 * holder still believes it holds: its write must not land. */
Test(guard, a_lock_taken_over_refuses_the_write_and_the_hold_is_lost) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    lostrec lost = {0, 0, 0};
    hilock_acquire_opts o = opts_wait(0);
    o.lost_cb = lost_cb;
    o.lost_data = &lost;
    got ga = acquire_now(&e, a, "taken", &o);
    cr_assert_eq(ga.status, 0);
    char k[256];
    hilock_hold_key(ga.hold, "v", k, sizeof(k));
    char lock[256];
    hilock_key("hilock:", "taken", lock, sizeof(lock));
    cr_assert_eq(test_redis_int(&e.r, "DEL %s", lock), 1);
    got gb = acquire_now(&e, b, "taken", NULL);
    cr_assert_eq(gb.status, 0);
    cr_assert_eq(hilock_hold_lost(ga.hold), 0, "a still believes it holds");
    hilock_script *s = script(INCR);
    const char *keys[] = {k};
    evalrec r = eval_now(e.base, ga.hold, s, 1, keys, 0, NULL);
    cr_expect_eq(r.status, HILOCK_ELOST, "%s", hilock_strerror(r.status));
    cr_expect_eq(r.type, -1, "no reply with ELOST");
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", k), 0, "the write landed");
    cr_expect(strstr(hilock_client_errstr(a), "no longer"), "%s", hilock_client_errstr(a));
    cr_expect_eq(hilock_hold_lost(ga.hold), 1);
    test_loop_for(e.base, 50);
    cr_expect_eq(lost.calls, 1, "the lost callback ran %d times", lost.calls);
    /* Lost already: refused at once. */
    cr_expect_eq(hilock_hold_eval(ga.hold, s, 1, keys, 0, NULL, NULL, eval_cb, &r), HILOCK_ELOST);
    /* The new holder writes. */
    r = eval_now(e.base, gb.hold, s, 1, keys, 0, NULL);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(get_num(&e.r, k), 1);
    hilock_script_free(s);
    release_now(&e, ga.hold);
    cr_assert_eq(release_now(&e, gb.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* A free lock (released by someone else's break, nobody took it) refuses
 * too: a holder is its token in the key, not the key's absence. */
Test(guard, a_broken_lock_nobody_took_refuses_the_write) {
    hilock_client *a = lockenv_client(&e);
    got g = acquire_now(&e, a, "broken", NULL);
    char k[256], lock[256];
    hilock_hold_key(g.hold, "v", k, sizeof(k));
    hilock_key("hilock:", "broken", lock, sizeof(lock));
    test_redis_int(&e.r, "DEL %s", lock);
    hilock_script *s = script(INCR);
    const char *keys[] = {k};
    evalrec r = eval_now(e.base, g.hold, s, 1, keys, 0, NULL);
    cr_expect_eq(r.status, HILOCK_ELOST);
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", k), 0);
    hilock_script_free(s);
    release_now(&e, g.hold);
    hilock_client_free(a);
}

Test(guard, bad_arguments_are_refused_before_anything_is_sent) {
    hilock_client *c = lockenv_client(&e);
    got g = acquire_now(&e, c, "args", NULL);
    hilock_script *s = script(INCR);
    const char *keys[] = {"elsewhere"}, *nul[] = {NULL};
    long long before = script_calls_of(&e.r);
    cr_expect_eq(hilock_hold_eval(g.hold, s, 1, keys, 0, NULL, NULL, eval_cb, NULL), HILOCK_EINVAL);
    cr_expect(strstr(hilock_client_errstr(c), "slot"), "%s", hilock_client_errstr(c));
    cr_expect_eq(hilock_hold_eval(NULL, s, 0, NULL, 0, NULL, NULL, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_hold_eval(g.hold, NULL, 0, NULL, 0, NULL, NULL, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_hold_eval(g.hold, s, -1, NULL, 0, NULL, NULL, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_hold_eval(g.hold, s, 1, NULL, 0, NULL, NULL, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_hold_eval(g.hold, s, 1, nul, 0, NULL, NULL, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_hold_eval(g.hold, s, 0, NULL, 1, nul, NULL, NULL, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_hold_eval(g.hold, s, 0, NULL, HILOCK_EVAL_ARGS_MAX + 1, keys, NULL, NULL,
                                  NULL), HILOCK_EINVAL);
    /* A key with the lock's hash tag but not made by hilock_hold_key is in
     * the slot: accepted. */
    char lock[256], k[300];
    hilock_key("hilock:", "args", lock, sizeof(lock));
    snprintf(k, sizeof(k), "app:%s", strchr(lock, '{'));
    const char *tagged[] = {k};
    evalrec r = eval_now(e.base, g.hold, s, 1, tagged, 0, NULL);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(script_calls_of(&e.r) - before, 1, "a refused eval reached Redis");
    hilock_script *bad = NULL;
    cr_expect_eq(hilock_script_new(&bad, NULL), HILOCK_EINVAL);
    cr_expect_eq(hilock_script_new(&bad, " \n\t"), HILOCK_EINVAL);
    cr_expect_eq(hilock_script_new(&bad, "#!lua flags=no-writes\nreturn 1"), HILOCK_EINVAL);
    cr_expect_eq(hilock_script_new(NULL, "return 1"), HILOCK_EINVAL);
    cr_expect_null(bad);
    char small[8];
    cr_expect_eq(hilock_hold_key(g.hold, "x", small, sizeof(small)), HILOCK_EINVAL);
    cr_expect_eq(hilock_hold_key(NULL, "x", k, sizeof(k)), HILOCK_EINVAL);
    hilock_script_free(NULL);
    /* Being released: refused. */
    rel rl = {0, 0};
    cr_assert_eq(hilock_release(g.hold, rel_cb, &rl), 0);
    cr_expect_eq(hilock_hold_eval(g.hold, s, 1, tagged, 0, NULL, NULL, NULL, NULL), HILOCK_EINVAL);
    test_loop_until(e.base, &rl.calls, 5000);
    hilock_script_free(s);
    hilock_client_free(c);
}

Test(guard, a_failing_script_reports_its_own_error_and_line) {
    hilock_client *c = lockenv_client(&e);
    got g = acquire_now(&e, c, "err", NULL);
    char k[256];
    hilock_hold_key(g.hold, "v", k, sizeof(k));
    const char *keys[] = {k};
    hilock_script *s = script("redis.call('SET', KEYS[1], 'x')\nreturn redis.call('INCR', KEYS[1])");
    evalrec r = eval_now(e.base, g.hold, s, 1, keys, 0, NULL);
    cr_expect_eq(r.status, HILOCK_EREPLY, "%s", hilock_strerror(r.status));
    cr_expect_eq(r.type, REDIS_REPLY_ERROR);
    cr_expect(strstr(r.str, "not an integer"), "%s", r.str);
    cr_expect(strstr(hilock_client_errstr(c), "not an integer"), "%s", hilock_client_errstr(c));
    cr_expect_eq(test_redis_int(&e.r, "EXISTS %s", k), 1, "what ran before the error stays");
    /* A syntax error, and a runtime error, name the caller's own line. */
    hilock_script *syn = script("local a = 1\nlocal b = = 2\nreturn a");
    r = eval_now(e.base, g.hold, syn, 0, NULL, 0, NULL);
    cr_expect_eq(r.status, HILOCK_EREPLY);
    cr_expect(strstr(r.str, ":2:"), "not line 2: %s", r.str);
    hilock_script *rt = script("local a = 1\n\nreturn a + nil");
    r = eval_now(e.base, g.hold, rt, 0, NULL, 0, NULL);
    cr_expect_eq(r.status, HILOCK_EREPLY);
    cr_expect(strstr(r.str, ":3:"), "not line 3: %s", r.str);
    /* The hold is fine after the script's errors. */
    cr_expect_eq(hilock_hold_lost(g.hold), 0);
    hilock_script_free(s);
    hilock_script_free(syn);
    hilock_script_free(rt);
    cr_assert_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
}

/* An eval sent before the release runs before it (one connection, in
 * order); the script may be freed at once; a flushed script cache is
 * refilled from the text. */
Test(guard, runs_in_order_with_the_release_and_outlives_a_freed_or_flushed_script) {
    hilock_client *c = lockenv_client(&e);
    got g = acquire_now(&e, c, "order", NULL);
    char k[256];
    hilock_hold_key(g.hold, "v", k, sizeof(k));
    const char *keys[] = {k};
    hilock_script *s = script(INCR);
    evalrec r;
    memset(&r, 0, sizeof(r));
    rel rl = {0, 0};
    cr_assert_eq(hilock_hold_eval(g.hold, s, 1, keys, 0, NULL, NULL, eval_cb, &r), 0);
    hilock_script_free(s); /* the eval keeps it */
    cr_assert_eq(hilock_release(g.hold, rel_cb, &rl), 0);
    test_loop_until(e.base, &rl.calls, 5000);
    test_loop_until(e.base, &r.calls, 5000);
    cr_expect_eq(r.calls, 1);
    cr_expect_eq(r.status, 0, "%s", hilock_strerror(r.status));
    cr_expect_eq(rl.status, 0);
    cr_expect_eq(get_num(&e.r, k), 1);
    /* SCRIPT FLUSH: EVALSHA finds nothing, the text is sent, once. */
    g = acquire_now(&e, c, "order", NULL);
    s = script(INCR);
    eval_now(e.base, g.hold, s, 1, keys, 0, NULL);
    cr_assert(cmd_ok(&e.r, "SCRIPT FLUSH", NULL));
    r = eval_now(e.base, g.hold, s, 1, keys, 0, NULL);
    cr_expect_eq(r.status, 0, "%s", hilock_strerror(r.status));
    cr_expect_eq(get_num(&e.r, k), 3);
    hilock_script_free(s);
    cr_assert_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
}

/* Every primitive's hold guards its writes with its own key. */
Test(guard, every_primitive_guards_with_its_own_key) {
    hilock_client *c = lockenv_client(&e);
    hilock_script *s = script(INCR);
    acquire_fn fns[] = {hilock_fair_acquire, hilock_write_acquire, hilock_read_acquire};
    const char *names[] = {"fair", "write", "read"};
    const char *own[] = {":fair", ":rw", ":rwr"};
    for (int i = 0; i < 3; i++) {
        got g = acquire_loop_with(e.base, fns[i], c, names[i], NULL, 5000);
        cr_assert_eq(g.status, 0);
        char k[256];
        hilock_hold_key(g.hold, "v", k, sizeof(k));
        const char *keys[] = {k};
        evalrec r = eval_now(e.base, g.hold, s, 1, keys, 0, NULL);
        cr_expect_eq(r.status, 0, "%s: %s", names[i], hilock_strerror(r.status));
        /* Its own key gone: refused. */
        test_redis_int(&e.r, "DEL %s", prim_key(names[i], own[i]));
        r = eval_now(e.base, g.hold, s, 1, keys, 0, NULL);
        cr_expect_eq(r.status, HILOCK_ELOST, "%s: %s", names[i], hilock_strerror(r.status));
        cr_expect_eq(get_num(&e.r, k), 1, "%s", names[i]);
        release_now(&e, g.hold);
    }
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_semaphore_acquire(c, "sem", 3, 1, NULL, got_cb, &g, NULL), 0);
    test_loop_until(e.base, &g.calls, 5000);
    cr_assert_eq(g.status, 0);
    char k[256];
    hilock_hold_key(g.hold, "v", k, sizeof(k));
    const char *keys[] = {k};
    evalrec r = eval_now(e.base, g.hold, s, 1, keys, 0, NULL);
    cr_expect_eq(r.status, 0, "semaphore: %s", hilock_strerror(r.status));
    /* A permit whose lease ran out by the server's clock (its score in
     * the past) no longer guards, though the key is there. */
    cr_assert_eq(test_redis_int(&e.r, "ZADD %s XX 1 %s", prim_key("sem", ":sem"), "x"), 0);
    redisReply *m = test_redis_cmd(&e.r, "ZRANGE %s 0 -1", prim_key("sem", ":sem"));
    cr_assert(m && m->elements == 1);
    test_redis_int(&e.r, "ZADD %s XX 1 %s", prim_key("sem", ":sem"), m->element[0]->str);
    freeReplyObject(m);
    r = eval_now(e.base, g.hold, s, 1, keys, 0, NULL);
    cr_expect_eq(r.status, HILOCK_ELOST, "semaphore: %s", hilock_strerror(r.status));
    cr_expect_eq(get_num(&e.r, k), 1);
    release_now(&e, g.hold);
    hilock_script_free(s);
    hilock_client_free(c);
}

/* Many evals of many holds in flight, then the client freed: each
 * callback runs once (HILOCK_ECANCELED for those not answered). */
Test(guard, a_client_freed_with_evals_in_flight_calls_each_back_once) {
    hilock_client *c = lockenv_client(&e);
    got g = acquire_now(&e, c, "free", NULL);
    char k[256];
    hilock_hold_key(g.hold, "v", k, sizeof(k));
    const char *keys[] = {k};
    hilock_script *s = script(INCR);
    evalrec r[50];
    memset(r, 0, sizeof(r));
    for (int i = 0; i < 50; i++)
        cr_assert_eq(hilock_hold_eval(g.hold, s, 1, keys, 0, NULL, NULL, eval_cb, &r[i]), 0);
    hilock_script_free(s);
    hilock_client_free(c);
    for (int i = 0; i < 50; i++) {
        cr_expect_eq(r[i].calls, 1, "eval %d: %d callbacks", i, r[i].calls);
        cr_expect_eq(r[i].status, HILOCK_ECANCELED);
    }
}

/* ---- check -------------------------------------------------------------- */

static fencerec check_now(struct event_base *base, hilock_client *c, const char *name) {
    return fence_call(base, hilock_check, c, name);
}

TestSuite(check, .init = setup, .fini = teardown, .timeout = 60);

Test(check, reads_the_fence_of_the_current_holder) {
    hilock_client *c = lockenv_client(&e), *d = lockenv_client(&e);
    fencerec r = check_now(e.base, d, "res");
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.fence, 0, "free: 0, not %llu", (unsigned long long)r.fence);
    got g = acquire_now(&e, c, "res", NULL);
    r = check_now(e.base, d, "res");
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.fence, hilock_hold_fence(g.hold));
    uint64_t stale = hilock_hold_fence(g.hold);
    cr_assert_eq(release_now(&e, g.hold), 0);
    r = check_now(e.base, d, "res");
    cr_expect_eq(r.fence, 0, "released: free");
    g = acquire_now(&e, c, "res", NULL);
    r = check_now(e.base, d, "res");
    cr_expect_gt(r.fence, stale, "the next holder's fence is larger");
    /* Held, its fence key gone: 1, never a fence that was given. */
    test_redis_int(&e.r, "DEL %s", prim_key("res", ":fence"));
    r = check_now(e.base, d, "res");
    cr_expect_eq(r.fence, 1);
    release_now(&e, g.hold);
    /* An older hilock's hold (a hash): its fence field. */
    cr_assert_eq(test_redis_int(&e.r, "HSET %s token t fence 77", prim_key("old", "")), 2);
    r = check_now(e.base, d, "old");
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.fence, 77);
    cr_expect_eq(hilock_check(NULL, "x", fence_cb, &r), HILOCK_EINVAL);
    cr_expect_eq(hilock_check(d, "", fence_cb, &r), HILOCK_EINVAL);
    cr_expect_eq(hilock_check(d, "x", NULL, NULL), HILOCK_EINVAL);
    hilock_client_free(c);
    hilock_client_free(d);
}

Test(check, neither_a_check_nor_a_guarded_write_runs_over_redlock) {
    char url[96];
    snprintf(url, sizeof(url), "redlock://127.0.0.1:%d", e.r.port);
    hilock_client *c = lockenv_client_url(&e, url, 0);
    fencerec r = {0, 0, 0};
    cr_expect_eq(hilock_check(c, "rl", fence_cb, &r), HILOCK_EINVAL);
    cr_expect(strstr(hilock_client_errstr(c), "Redlock"), "%s", hilock_client_errstr(c));
    got g = acquire_now(&e, c, "rl", NULL);
    cr_assert_eq(g.status, 0);
    hilock_script *s = script(INCR);
    char k[256];
    hilock_hold_key(g.hold, "v", k, sizeof(k));
    const char *keys[] = {k};
    cr_expect_eq(hilock_hold_eval(g.hold, s, 1, keys, 0, NULL, NULL, eval_cb, NULL), HILOCK_EINVAL);
    cr_expect(strstr(hilock_client_errstr(c), "Redlock"), "%s", hilock_client_errstr(c));
    hilock_script_free(s);
    release_now(&e, g.hold);
    hilock_client_free(c);
    cr_expect_eq(r.calls, 0);
}

/* ---- guard_faults ------------------------------------------------------- */

TestSuite(guard_faults, .timeout = 60);

/* The server runs the script, and the reply is lost with the connection
 * (a relay stops carrying it; the health check drops it). The caller is
 * told the answer never came; the script is not sent again on the next
 * connection (it would count twice). */
Test(guard_faults, a_lost_reply_is_never_sent_twice) {
    lockenv_start_debuggable(&e);
    test_blackhole bh;
    cr_assert_eq(test_blackhole_start(&bh, e.r.port), 0);
    hilock_config cfg;
    lockenv_config(&cfg, bh.url);
    cfg.health_ms = 300;
    cfg.request_timeout_ms = 10000;
    hilock_client *c = lockenv_client_cfg(&e, &cfg);
    hilock_acquire_opts o = opts_wait_lease(0, 30000);
    got g = acquire_now(&e, c, "once", &o);
    cr_assert_eq(g.status, 0);
    char k[256];
    hilock_hold_key(g.hold, "v", k, sizeof(k));
    const char *keys[] = {k};
    hilock_script *s = script(INCR);
    evalrec r = eval_now(e.base, g.hold, s, 1, keys, 0, NULL); /* loaded: EVALSHA next */
    cr_assert_eq(r.status, 0);
    pid_t sleeper = test_redis_debug_sleep(&e.r, "0.6");
    test_msleep(100);
    memset(&r, 0, sizeof(r));
    cr_assert_eq(hilock_hold_eval(g.hold, s, 1, keys, 0, NULL, NULL, eval_cb, &r), 0);
    test_loop_for(e.base, 100); /* sent, and relayed to the sleeping server */
    test_blackhole_drop(&bh, 0);
    test_loop_until(e.base, &r.calls, 5000);
    cr_assert_eq(r.calls, 1);
    cr_expect(r.status == HILOCK_ECONN || r.status == HILOCK_EDEADLINE, "%s",
              hilock_strerror(r.status));
    test_wait(sleeper, 5000);
    test_loop_for(e.base, 1500); /* reconnected through the relay meanwhile */
    cr_expect_eq(get_num(&e.r, k), 2, "ran %lld times in all (once before)",
                 get_num(&e.r, k));
    cr_expect_eq(r.calls, 1);
    hilock_script_free(s);
    hilock_client_free(c);
    test_blackhole_stop(&bh);
    lockenv_stop(&e);
}

/* ---- guard_cluster ------------------------------------------------------ */

static clusterenv ce;
static void csetup(void) { clusterenv_start(&ce); }
static void cteardown(void) { clusterenv_stop(&ce); }

TestSuite(guard_cluster, .init = csetup, .fini = cteardown, .timeout = 120);

Test(guard_cluster, writes_on_the_slots_master_and_refuses_other_slots) {
    hilock_client *a = NULL, *b = NULL;
    cluster_client_pair(&ce.cl, &ce.loop, &a, &b);
    hilock_script *s = script(INCR);
    const char *names[] = {"alpha", "beta", "gamma", "delta"};
    for (int i = 0; i < 4; i++) {
        got g = acquire_loop(ce.base, i % 2 ? b : a, names[i], NULL, 10000);
        cr_assert_eq(g.status, 0, "%s: %s", names[i], hilock_strerror(g.status));
        char k[256];
        hilock_hold_key(g.hold, "n", k, sizeof(k));
        const char *keys[] = {k};
        evalrec r = eval_now(ce.base, g.hold, s, 1, keys, 0, NULL);
        cr_expect_eq(r.status, 0, "%s: %s", names[i], hilock_strerror(r.status));
        test_redis *m = test_cluster_master_of(&ce.cl, cluster_slot_of(names[i]));
        cr_expect_eq(get_num(m, k), 1, "%s", names[i]);
        /* The lock taken over on its master: refused there. */
        char lock[256];
        hilock_key("hilock:", names[i], lock, sizeof(lock));
        cr_assert(cmd_ok(m, "SET %s someone-else", lock));
        r = eval_now(ce.base, g.hold, s, 1, keys, 0, NULL);
        cr_expect_eq(r.status, HILOCK_ELOST, "%s: %s", names[i], hilock_strerror(r.status));
        cr_expect_eq(get_num(m, k), 1);
        test_redis_int(m, "DEL %s", lock);
        release_loop(ce.base, g.hold, 5000);
    }
    /* A key of another slot: refused before it is sent (Redis would say
     * CROSSSLOT). And the holder's fence, read from the other client. */
    got g = acquire_loop(ce.base, a, "alpha", NULL, 10000);
    fencerec cr = {0, 0, 0};
    cr_assert_eq(hilock_check(b, "alpha", fence_cb, &cr), 0);
    test_loop_until(ce.base, &cr.calls, 5000);
    cr_expect_eq(cr.status, 0);
    cr_expect_eq(cr.fence, hilock_hold_fence(g.hold));
    const char *other[] = {"hilock:{beta}:u:n"};
    cr_expect_eq(hilock_hold_eval(g.hold, s, 1, other, 0, NULL, NULL, NULL, NULL), HILOCK_EINVAL);
    release_loop(ce.base, g.hold, 5000);
    hilock_script_free(s);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* The master of the hold's slot fails over (graceful): the hold lives
 * on, and its guarded writes go to the promoted replica (which had the
 * data and the lock, but not the script: NOSCRIPT, then EVAL); a lock
 * taken over there refuses them. */
Test(guard_cluster, writes_follow_the_slot_through_a_failover) {
    hilock_client *a = cluster_client_within(&ce, ce.cl.url, 15000);
    const char *name = "gw-failover";
    unsigned slot = cluster_slot_of(name);
    test_redis *m = NULL, *r = NULL;
    cr_assert(cluster_settled_pair(&ce.cl, slot, 20000, &m, &r));
    hilock_script *s = script(INCR);
    hilock_acquire_opts o = opts_wait_lease(-1, 20000);
    got g = acquire_loop(ce.base, a, name, &o, 10000);
    cr_assert_eq(g.status, 0);
    char k[256];
    hilock_hold_key(g.hold, "n", k, sizeof(k));
    const char *keys[] = {k};
    evalrec e1 = eval_now(ce.base, g.hold, s, 1, keys, 0, NULL);
    cr_expect_eq(e1.status, 0, "%s", hilock_strerror(e1.status));
    cr_assert(cluster_fail_over_to(&ce, slot, m, r, 30000), "slot %u did not fail over to its replica", slot);
    cr_assert(cmd_ok(r, "SCRIPT FLUSH", NULL), "the new master forgets the scripts");
    evalrec e2 = eval_now(ce.base, g.hold, s, 1, keys, 0, NULL);
    cr_expect_eq(e2.status, 0, "%s (%s)", hilock_strerror(e2.status), hilock_client_errstr(a));
    cr_expect_eq(e2.integer, 2, "the write before the failover was kept");
    cr_expect_eq(get_num(r, k), 2, "not on the new master");
    cr_expect_eq(hilock_hold_lost(g.hold), 0);
    char lock[256];
    hilock_key("hilock:", name, lock, sizeof(lock));
    cr_assert(cmd_ok(r, "SET %s someone-else", lock));
    evalrec e3 = eval_now(ce.base, g.hold, s, 1, keys, 0, NULL);
    cr_expect_eq(e3.status, HILOCK_ELOST, "%s", hilock_strerror(e3.status));
    cr_expect_eq(get_num(r, k), 2, "written while taken over");
    test_redis_int(r, "DEL %s", lock);
    release_loop(ce.base, g.hold, 10000);
    hilock_script_free(s);
    hilock_client_free(a);
}

/* ---- guard_sentinel ------------------------------------------------------ */

static test_sentinel sn;
static void ssetup(void) { lockenv_start_sentinels(&e, &sn); }
static void steardown(void) { lockenv_stop_sentinels(&e, &sn); }

TestSuite(guard_sentinel, .init = ssetup, .fini = steardown, .timeout = 90);

Test(guard_sentinel, writes_on_the_master_and_waits_for_the_replica) {
    hilock_config cfg;
    lockenv_config(&cfg, sn.url);
    cfg.request_timeout_ms = 8000;
    cfg.wait_replicas = 1;
    cfg.wait_timeout_ms = 300;
    hilock_client *c = lockenv_client_cfg(&e, &cfg);
    got g = acquire_now(&e, c, "sg", NULL);
    cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    char k[256];
    hilock_hold_key(g.hold, "n", k, sizeof(k));
    const char *keys[] = {k};
    hilock_script *s = script(INCR);
    evalrec r = eval_now(e.base, g.hold, s, 1, keys, 0, NULL);
    cr_expect_eq(r.status, 0, "%s (%s)", hilock_strerror(r.status), hilock_client_errstr(c));
    cr_expect_eq(get_num(&sn.node[0], k), 1, "not on the master");
    cr_expect_eq(get_num(&sn.node[1], k), 1, "WAIT said the replica has it");
    fencerec f = fence_call(e.base, hilock_check, c, "sg");
    cr_expect_eq(f.fence, hilock_hold_fence(g.hold));
    /* The replica gone: the write lands on the master, unconfirmed. */
    test_redis_stop(&sn.node[1]);
    r = eval_now(e.base, g.hold, s, 1, keys, 0, NULL);
    cr_expect_eq(r.status, HILOCK_EREPLICAS, "%s", hilock_strerror(r.status));
    cr_expect_eq(r.type, REDIS_REPLY_INTEGER, "its reply comes with it");
    cr_expect_eq(r.integer, 2);
    cr_expect_eq(get_num(&sn.node[0], k), 2);
    hilock_script_free(s);
    release_now(&e, g.hold);
    hilock_client_free(c);
}
