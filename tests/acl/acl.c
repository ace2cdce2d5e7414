/* The least-privilege ACL of docs/tls-and-acl.md ("Least-privilege ACL"), against
 * real servers: a user with exactly the documented rule passes the
 * exclusion check and a fault (its connections killed mid-contention), and
 * uses every primitive; a user missing any one permission of it gets
 * HILOCK_EAUTH, from the request that needs it, with a message that names
 * what was refused, one callback per request and no lock left behind. */
#include <ctype.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/lockenv.h"
#include "support/exclusion_procs.h"
#include "support/clusterenv.h"
#include "support/sentinelenv.h"

/* The standalone rule, as docs/tls-and-acl.md writes it (every permission a word;
 * "~hilock:*" and "&hilock:*" are the key and channel patterns). */
static const char *const standalone_rule[] = {
    "~hilock:*", "&hilock:*",
    "+eval", "+evalsha", "+info", "+subscribe", "+unsubscribe", "+publish",
    "+time", "+get", "+mget", "+set", "+incr", "+del", "+exists", "+pexpire", "+pexpireat", "+pttl",
    "+hget", "+hset", "+hmget", "+hdel", "+hexists", "+hincrby",
    "+zadd", "+zcard", "+zpopmin", "+zrange", "+zrangebyscore", "+zrem", "+zremrangebyscore",
    "+zscore",
    NULL};

/* Does hilock_client_errstr() name the refused permission: the key or
 * channel, Redis's 'cmd', or hilock's "CMD at line N of script S"? */
static int names_perm(const char *errstr, const char *perm) {
    char word[48];
    if (perm[0] == '~') return strstr(errstr, "key hilock:") != NULL;
    if (perm[0] == '&') return strstr(errstr, "channel hilock:") != NULL;
    snprintf(word, sizeof(word), "'%s'", perm + 1);
    if (strstr(errstr, word)) return 1;
    snprintf(word, sizeof(word), "%s at line ", perm + 1);
    for (char *p = word; *p != ' '; p++) *p = (char)toupper((unsigned char)*p);
    return strstr(errstr, word) != NULL;
}

/* The index of perm in rule, -1 if absent. */
static int rule_index(const char *const *rule, const char *perm) {
    for (int i = 0; rule[i]; i++)
        if (strcmp(rule[i], perm) == 0) return i;
    return -1;
}

/* ACL SETUSER `user` reset on >pw, then the rule without rule[skip] (-1:
 * all of it), then the extra words (NULL-terminated). */
static void acl_user(const test_redis *r, const char *user, const char *const *rule, int skip,
                     const char *const *extra) {
    const char *argv[80];
    int argc = 0;
    argv[argc++] = "ACL";
    argv[argc++] = "SETUSER";
    argv[argc++] = user;
    argv[argc++] = "reset";
    argv[argc++] = "on";
    argv[argc++] = ">pw";
    argv[argc++] = "-@all";
    for (int i = 0; rule[i]; i++)
        if (i != skip) argv[argc++] = rule[i];
    for (int i = 0; extra && extra[i]; i++) argv[argc++] = extra[i];
    redisContext *k = test_redis_connect(r);
    cr_assert_not_null(k);
    redisReply *rep = redisCommandArgv(k, argc, argv, NULL);
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "ACL SETUSER: %s", rep ? rep->str : "no reply");
    freeReplyObject(rep);
    redisFree(k);
}

static void user_url(char *out, size_t n, const char *user, const test_redis *r, const char *tail) {
    snprintf(out, n, "redis://%s:pw@127.0.0.1:%d%s", user, r->port, tail ? tail : "");
}

/* ---- Every primitive, contended: what a user with a rule goes through ----- */

#define NPRIMS 4
enum { P_MUTEX, P_SEM, P_RW, P_FAIR };

typedef struct outcome {
    int calls[2][NPRIMS];     /* acquire callbacks, client A and B */
    int status[2][NPRIMS];
    hilock_hold *hold[2][NPRIMS];
    int rel_calls, rel_expected;
    int eauth, other;         /* callbacks with HILOCK_EAUTH, with another error */
    int lost;                 /* lost callbacks */
    int unsub_refused;        /* warnings of a refused UNSUBSCRIBE */
    int info_refused;         /* warnings of a refused INFO */
    char first[512];          /* errstr at the first HILOCK_EAUTH */
    hilock_client *cl[2];
} outcome;

typedef struct cbref {
    outcome *o;
    int who, prim;
} cbref;

static void note(outcome *o, int who, int status) {
    if (status == HILOCK_EAUTH && o->eauth++ == 0)
        snprintf(o->first, sizeof(o->first), "%s", hilock_client_errstr(o->cl[who]));
    else if (status != 0 && status != HILOCK_EAUTH)
        o->other++;
}

static void out_acquired(hilock_hold *h, int status, void *data) {
    cbref *r = data;
    r->o->calls[r->who][r->prim]++;
    r->o->status[r->who][r->prim] = status;
    r->o->hold[r->who][r->prim] = status == 0 ? h : NULL;
    note(r->o, r->who, status);
}

static void out_released(int status, void *data) {
    cbref *r = data;
    r->o->rel_calls++;
    if (status != HILOCK_ELOST) note(r->o, r->who, status);
}

static void out_lost(hilock_hold *h, int why, void *data) {
    cbref *r = data;
    (void)h;
    r->o->lost++;
    note(r->o, r->who, why);
}

static void out_log(int level, const char *msg, void *data) {
    outcome *o = data;
    if (level == HILOCK_LOG_WARNING && strstr(msg, "subscribe refused") && strstr(msg, "'unsubscribe'"))
        o->unsub_refused++;
    if (level == HILOCK_LOG_WARNING && strstr(msg, "cannot read maxmemory-policy") && strstr(msg, "'info'"))
        o->info_refused++;
}

static int start(hilock_client *c, int prim, const char *name, hilock_acquire_opts *o, cbref *ref,
                 int reader) {
    switch (prim) {
    case P_MUTEX: return hilock_acquire(c, name, o, out_acquired, ref, NULL);
    case P_SEM: return hilock_semaphore_acquire(c, name, 1, 1, o, out_acquired, ref, NULL);
    case P_RW:
        return reader ? hilock_read_acquire(c, name, o, out_acquired, ref, NULL)
                      : hilock_write_acquire(c, name, o, out_acquired, ref, NULL);
    default: return hilock_fair_acquire(c, name, o, out_acquired, ref, NULL);
    }
}

static int all_called(const outcome *o, int who) {
    for (int p = 0; p < NPRIMS; p++)
        if (o->calls[who][p] == 0) return 0;
    return 1;
}

static void loop_until_called(lockenv *e, outcome *o, int who, int ms) {
    long long end = test_now_ms() + ms;
    while (!all_called(o, who) && test_now_ms() < end) test_loop_for(e->base, 10);
}

static void release_all(lockenv *e, outcome *o, int who, cbref refs[][NPRIMS]) {
    for (int p = 0; p < NPRIMS; p++) {
        if (o->hold[who][p] == NULL) continue;
        o->rel_expected++;
        cr_assert_eq(hilock_release(o->hold[who][p], out_released, &refs[who][p]), 0);
        o->hold[who][p] = NULL;
    }
    long long end = test_now_ms() + 2000;
    while (o->rel_calls < o->rel_expected && test_now_ms() < end) test_loop_for(e->base, 10);
}

/* Client A takes each primitive (the read side of the read-write lock),
 * with a lease of 300 ms that its watchdog renews; client B waits for each
 * (so it subscribes); A releases, B gets them by its wakeups, and releases.
 * Every callback is counted: each request gets exactly one. */
static void run_prims(lockenv *e, const char *url, outcome *o) {
    static const char *const names[NPRIMS] = {"acl-m", "acl-s", "acl-rw", "acl-f"};
    cbref refs[2][NPRIMS];
    memset(o, 0, sizeof(*o));
    for (int who = 0; who < 2; who++) {
        hilock_config cfg;
        lockenv_config(&cfg, url);
        cfg.log_cb = out_log;
        cfg.log_data = o;
        o->cl[who] = lockenv_client_cfg(e, &cfg);
        for (int p = 0; p < NPRIMS; p++) refs[who][p] = (cbref){o, who, p};
    }
    hilock_acquire_opts oa = opts_wait_lease(1000, 300), ob = opts_wait_lease(1500, 300);
    oa.lost_cb = ob.lost_cb = out_lost;
    for (int p = 0; p < NPRIMS; p++) {
        oa.lost_data = &refs[0][p];
        cr_assert_eq(start(o->cl[0], p, names[p], &oa, &refs[0][p], 1), 0);
    }
    loop_until_called(e, o, 0, 2000);
    for (int p = 0; p < NPRIMS; p++) {
        ob.lost_data = &refs[1][p];
        cr_assert_eq(start(o->cl[1], p, names[p], &ob, &refs[1][p], 0), 0);
    }
    test_loop_for(e->base, 400); /* B subscribed; A renewed, or its lease ran out */
    release_all(e, o, 0, refs);
    loop_until_called(e, o, 1, 2500);
    release_all(e, o, 1, refs);
    test_loop_for(e->base, 250); /* B's subscriptions linger 100 ms, then go */
    for (int who = 0; who < 2; who++) hilock_client_free(o->cl[who]);
    for (int who = 0; who < 2; who++)
        for (int p = 0; p < NPRIMS; p++)
            cr_expect_eq(o->calls[who][p], 1, "client %d, %s: %d acquire callbacks", who, names[p],
                         o->calls[who][p]);
    cr_expect_eq(o->rel_calls, o->rel_expected, "release callbacks");
}

/* Is `key` a lock (what a lease covers), not a fence, queue or marker? */
static int is_lock_key(const char *key) {
    static const char *const ends[] = {"}", "}:sem", "}:rw", "}:rwr", "}:fair"};
    size_t len = strlen(key);
    for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++)
        if (len > strlen(ends[i]) && strcmp(key + len - strlen(ends[i]), ends[i]) == 0) return 1;
    return 0;
}

/* Keys of `r` without a TTL; each lock key still there is counted in
 * *locks (every lease, 300 ms, has run out by now). */
static int keys_for_ever(const test_redis *r, int *locks, const char *why) {
    int n = 0;
    redisContext *k = test_redis_connect(r);
    cr_assert_not_null(k);
    redisReply *keys = redisCommand(k, "KEYS hilock:*");
    cr_assert(keys && keys->type == REDIS_REPLY_ARRAY);
    for (size_t i = 0; i < keys->elements; i++) {
        const char *key = keys->element[i]->str;
        redisReply *ttl = redisCommand(k, "PTTL %s", key);
        long long ms = ttl && ttl->type == REDIS_REPLY_INTEGER ? ttl->integer : -3;
        freeReplyObject(ttl);
        if (ms == -1) n++;
        if (is_lock_key(key)) {
            (*locks)++;
            cr_expect(0, "%s: lock %s left behind (PTTL %lld)", why, key, ms);
        }
    }
    freeReplyObject(keys);
    redisFree(k);
    return n;
}

/* No lock left behind once the leases have run out. A script that the ACL
 * stopped halfway (Redis does not roll it back) may leave a helper key
 * without a TTL (a semaphore's :sem:h, a fair lock's :fair:p): the next
 * acquire of that name by a user with the whole rule must clean it. */
static void expect_nothing_left(lockenv *e, const char *why) {
    int locks = 0;
    test_msleep(400);
    if (keys_for_ever(&e->r, &locks, why) == 0) return;
    outcome o;
    char url[128];
    acl_user(&e->r, "healer", standalone_rule, -1, NULL);
    user_url(url, sizeof(url), "healer", &e->r, NULL);
    run_prims(e, url, &o);
    cr_expect_eq(o.eauth + o.other, 0, "%s: the full rule failed after it: %s", why, o.first);
    test_msleep(400);
    cr_expect_eq(keys_for_ever(&e->r, &locks, why), 0,
                 "%s: keys without a TTL stay after the names were used again", why);
}

/* Exactly the rule: every primitive works, no error at all. */
Test(acl, standalone_rule_serves_every_primitive, .timeout = 30) {
    lockenv e;
    outcome o;
    char url[128];
    lockenv_start(&e);
    acl_user(&e.r, "hilock", standalone_rule, -1, NULL);
    user_url(url, sizeof(url), "hilock", &e.r, NULL);
    run_prims(&e, url, &o);
    cr_expect_eq(o.eauth + o.other + o.lost, 0, "errors with the full rule: %d EAUTH (%s), %d other, %d lost",
                 o.eauth, o.first, o.other, o.lost);
    for (int who = 0; who < 2; who++)
        for (int p = 0; p < NPRIMS; p++) cr_expect_eq(o.status[who][p], 0);
    expect_nothing_left(&e, "full rule");
    lockenv_stop(&e);
}

/* Each permission in turn taken away: some request ends with HILOCK_EAUTH
 * naming it, no other error hides it, and nothing is left in Redis. */
static void check_missing(int from, int to) {
    lockenv e;
    lockenv_start(&e);
    for (int i = from; i < to && standalone_rule[i]; i++) {
        outcome o;
        char user[32], url[128];
        snprintf(user, sizeof(user), "no%d", i);
        acl_user(&e.r, user, standalone_rule, i, NULL);
        user_url(url, sizeof(url), user, &e.r, NULL);
        run_prims(&e, url, &o);
        if (strcmp(standalone_rule[i], "+unsubscribe") == 0) {
            /* Nothing fails: subscriptions stay until the connection goes. */
            cr_expect_gt(o.unsub_refused, 0, "without +unsubscribe: no warning");
            cr_expect_eq(o.eauth + o.other, 0, "without +unsubscribe: %s", o.first);
        } else if (strcmp(standalone_rule[i], "+mget") == 0) {
            /* Only a batch of renewals calls it (one mutex hold here renews
             * alone): a_rule_without_mget_renews_each_hold_alone_and_warns. */
            cr_expect_eq(o.eauth + o.other, 0, "without +mget: %s", o.first);
        } else if (strcmp(standalone_rule[i], "+info") == 0) {
            /* A check that cannot be made: warned at connect, and served. */
            cr_expect_gt(o.info_refused, 0, "without +info: no warning");
            cr_expect_eq(o.eauth + o.other, 0, "without +info: %s", o.first);
        } else {
            cr_expect_gt(o.eauth, 0, "without %s: no HILOCK_EAUTH (%d other errors)",
                         standalone_rule[i], o.other);
            cr_expect(names_perm(o.first, standalone_rule[i]),
                      "without %s, the error does not name it: \"%s\"", standalone_rule[i], o.first);
        }
        expect_nothing_left(&e, standalone_rule[i]);
        redisReply *rep = test_redis_cmd(&e.r, "FLUSHALL"); /* the next user starts afresh */
        if (rep) freeReplyObject(rep);
    }
    lockenv_stop(&e);
}

Test(acl, missing_patterns_and_commands, .timeout = 60) { check_missing(0, 8); }
Test(acl, missing_script_commands_1, .timeout = 60) { check_missing(8, 19); }
Test(acl, missing_script_commands_2, .timeout = 60) { check_missing(19, 40); }

/* ---- The exclusion check and a fault, with exactly the rule --------------- */

#define EX_PROCS 2
#define EX_WAITERS 1500

static void ex_run(lockenv *e, const char *url, resource *res, int waiters, int kill_every_ms) {
    worker w = {res, waiters, 0, 0, 0};
    hilock_client *c = lockenv_client_url(e, url, 0);
    for (int i = 0; i < waiters; i++)
        cr_assert_eq(hilock_acquire(c, "acl-exclusion", NULL, exclusion_acquired, &w, NULL), 0);
    long long end = test_now_ms() + 30000, next_kill = test_now_ms() + kill_every_ms;
    int kills = 0;
    while (!w.done && test_now_ms() < end) {
        test_loop_for(e->base, 5);
        if (kill_every_ms && test_now_ms() >= next_kill) {
            /* Every connection of the user, command and subscriber alike:
             * requests go again on new connections, AUTH and all. */
            kills += test_redis_int(&e->r, "CLIENT KILL USER hilock") > 0;
            next_kill = test_now_ms() + kill_every_ms;
        }
    }
    cr_expect_geq(kills, 3, "only %d kills under contention", kills);
    cr_assert_eq(w.callbacks, waiters, "each waiter gets exactly one callback");
    hilock_client_free(c);
}

/* Processes and waiters contend for one name as the user "hilock" with
 * exactly the rule, while this process kills all of that user's
 * connections every 40 ms: one holder at a time, fences in order, no
 * error, nothing left. */
Test(acl, standalone_rule_exclusion_under_client_kill, .timeout = 60) {
    lockenv e;
    char url[128];
    lockenv_start(&e);
    acl_user(&e.r, "hilock", standalone_rule, -1, NULL);
    user_url(url, sizeof(url), "hilock", &e.r, NULL);
    resource *res = exclusion_resource();
    pid_t kids[EX_PROCS];
    hilock_config cfg;
    lockenv_config(&cfg, url);
    exclusion_fork(&e, &cfg, res, "acl-exclusion", EX_WAITERS, 30000, kids, EX_PROCS);
    ex_run(&e, url, res, EX_WAITERS, 40);
    exclusion_reap(kids, EX_PROCS);
    exclusion_check(res, (EX_PROCS + 1) * EX_WAITERS);
    cr_expect_eq(lock_exists(&e.r, "acl-exclusion"), 0, "no lock left behind");
    exclusion_resource_free(res);
    lockenv_stop(&e);
}

/* ---- db != 0 needs +select, wait_replicas needs +wait -------------------- */

static got acquire_cfg(lockenv *e, const hilock_config *cfg, hilock_client **out) {
    *out = lockenv_client_cfg(e, cfg);
    hilock_acquire_opts o = opts_wait_lease(800, 300);
    return acquire_now(e, *out, "acl-extra", &o);
}

Test(acl, select_and_wait, .timeout = 30) {
    static const char *const with_select[] = {"+select", NULL};
    static const char *const with_wait[] = {"+wait", NULL};
    lockenv e;
    hilock_config cfg;
    hilock_client *c;
    char url[128];
    lockenv_start(&e);

    /* db 1 with +select: served there; without: refused at connect. */
    acl_user(&e.r, "sel", standalone_rule, -1, with_select);
    user_url(url, sizeof(url), "sel", &e.r, "/1");
    lockenv_config(&cfg, url);
    got g = acquire_cfg(&e, &cfg, &c);
    cr_expect_eq(g.status, 0, "db 1 with +select: %s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
    hilock_client_free(c);
    acl_user(&e.r, "nosel", standalone_rule, -1, NULL);
    user_url(url, sizeof(url), "nosel", &e.r, "/1");
    lockenv_config(&cfg, url);
    g = acquire_cfg(&e, &cfg, &c);
    cr_expect_eq(g.status, HILOCK_EAUTH, "db 1 without +select: %s", hilock_strerror(g.status));
    cr_expect(strstr(hilock_client_errstr(c), "'select'") != NULL, "%s", hilock_client_errstr(c));
    hilock_client_free(c);

    /* wait_replicas 1 (there is no replica) with +wait: WAIT ran and
     * counted none; without +wait: HILOCK_EAUTH naming it. Either way the
     * lock was given back. */
    acl_user(&e.r, "wt", standalone_rule, -1, with_wait);
    user_url(url, sizeof(url), "wt", &e.r, NULL);
    lockenv_config(&cfg, url);
    cfg.wait_replicas = 1;
    cfg.wait_timeout_ms = 10;
    g = acquire_cfg(&e, &cfg, &c);
    cr_expect_eq(g.status, HILOCK_EREPLICAS, "with +wait: %s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    test_loop_for(e.base, 100); /* the give-back */
    cr_expect_eq(lock_exists(&e.r, "acl-extra"), 0, "the lock too few replicas confirmed is given back");
    hilock_client_free(c);
    acl_user(&e.r, "nowt", standalone_rule, -1, NULL);
    user_url(url, sizeof(url), "nowt", &e.r, NULL);
    lockenv_config(&cfg, url);
    cfg.wait_replicas = 1;
    g = acquire_cfg(&e, &cfg, &c);
    cr_expect_eq(g.status, HILOCK_EAUTH, "without +wait: %s", hilock_strerror(g.status));
    cr_expect(strstr(hilock_client_errstr(c), "'wait'") != NULL, "%s", hilock_client_errstr(c));
    test_loop_for(e.base, 100); /* the give-back */
    cr_expect_eq(lock_exists(&e.r, "acl-extra"), 0, "the lock WAIT was refused for is given back (PTTL %lld)",
                 test_redis_int(&e.r, "PTTL %s", prim_key("acl-extra", "")));
    hilock_client_free(c);
    lockenv_stop(&e);
}

/* ---- Renewals in batches ------------------------------------------------- */

#define BATCH_N 6

typedef struct batchrun {
    got g[BATCH_N];
    lostrec lost[BATCH_N];
    rel r[BATCH_N];
    long long calls;          /* script calls once the batches go wrong */
    int warned;               /* warnings that a batch was refused */
    char warning[512];
} batchrun;

static const char *const batch_names[BATCH_N] = {"ok-0", "ok-1", "ok-2", "ok-3", "ok-4", "bad"};

static void batch_log(int level, const char *msg, void *data) {
    batchrun *b = data;
    if (level == HILOCK_LOG_WARNING && strstr(msg, "renewals in one call") && b->warned++ == 0)
        snprintf(b->warning, sizeof(b->warning), "%s", msg);
}

/* A user with `rule` less rule[skip] holds six mutexes (leases of 900 ms,
 * renewed in batches), then (if `keys` is not NULL) its key pattern
 * becomes `keys`, and the holds are kept 1.5 s more, then released. */
static void batch_run(lockenv *e, const char *const *rule, int skip, const char *keys, batchrun *b) {
    hilock_config cfg;
    char url[128];
    memset(b, 0, sizeof(*b));
    acl_user(&e->r, "batch", rule, skip, NULL);
    user_url(url, sizeof(url), "batch", &e->r, NULL);
    lockenv_config(&cfg, url);
    cfg.log_cb = batch_log;
    cfg.log_data = b;
    hilock_client *c = lockenv_client_cfg(e, &cfg);
    for (int i = 0; i < BATCH_N; i++) {
        hilock_acquire_opts o = opts_wait_lease(3000, 900);
        o.lost_cb = lost_cb;
        o.lost_data = &b->lost[i];
        cr_assert_eq(hilock_acquire(c, batch_names[i], &o, got_cb, &b->g[i], NULL), 0);
    }
    for (int i = 0; i < BATCH_N; i++) {
        test_loop_until(e->base, &b->g[i].calls, 5000);
        cr_assert_eq(b->g[i].status, 0, "%s: %s", batch_names[i], hilock_strerror(b->g[i].status));
    }
    if (keys != NULL) {
        long long calls0 = script_calls_of(&e->r);
        test_loop_for(e->base, 700);
        long long calls = script_calls_of(&e->r) - calls0;
        cr_assert_lt(calls, BATCH_N, "the renewals did not share calls (%lld calls)", calls);
        redisReply *rep = test_redis_cmd(&e->r, "ACL SETUSER batch resetkeys %s", keys);
        cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "ACL SETUSER: %s", rep && rep->str ? rep->str : "");
        freeReplyObject(rep);
    }
    long long calls0 = script_calls_of(&e->r);
    test_loop_for(e->base, 1500);
    b->calls = script_calls_of(&e->r) - calls0;
    for (int i = 0; i < BATCH_N; i++) cr_assert_eq(hilock_release(b->g[i].hold, rel_cb, &b->r[i]), 0);
    for (int i = 0; i < BATCH_N; i++) test_loop_until(e->base, &b->r[i].calls, 5000);
    hilock_client_free(c);
}

/* The ACL comes to refuse one hold's key while its renewals share script
 * calls with others': the call is refused as a whole, and each member then
 * goes alone, so only that hold is refused (lost with HILOCK_EAUTH at its
 * lease's end); the others keep their leases, and a warning says why. */
Test(acl, a_key_refused_in_a_batch_of_renewals_fails_its_hold_alone, .timeout = 30) {
    lockenv e;
    static batchrun b;
    lockenv_start(&e);
    batch_run(&e, standalone_rule, -1, "~hilock:{ok-*", &b);
    for (int i = 0; i < BATCH_N; i++) {
        int refused = i == BATCH_N - 1;
        cr_expect_eq(b.lost[i].calls, refused, "%s: lost %d times (%s)", batch_names[i], b.lost[i].calls,
                     hilock_strerror(b.lost[i].why));
        if (refused) cr_expect_eq(b.lost[i].why, HILOCK_EAUTH, "%s", hilock_strerror(b.lost[i].why));
        else cr_expect_eq(b.r[i].status, 0, "%s: %s", batch_names[i], hilock_strerror(b.r[i].status));
    }
    cr_expect_gt(b.warned, 0, "no warning");
    lockenv_stop(&e);
}

/* A rule without +mget: a batch of renewals is refused, each
 * of its holds renews alone, none is lost, and a warning names +mget. */
Test(acl, a_rule_without_mget_renews_each_hold_alone_and_warns, .timeout = 30) {
    lockenv e;
    static batchrun b;
    int skip = rule_index(standalone_rule, "+mget");
    cr_assert_geq(skip, 0);
    lockenv_start(&e);
    batch_run(&e, standalone_rule, skip, NULL, &b);
    for (int i = 0; i < BATCH_N; i++) {
        cr_expect_eq(b.lost[i].calls, 0, "%s: lost (%s)", batch_names[i], hilock_strerror(b.lost[i].why));
        cr_expect_eq(b.r[i].status, 0, "%s: %s", batch_names[i], hilock_strerror(b.r[i].status));
    }
    cr_expect_geq(b.calls, 4 * BATCH_N, "%lld calls in 1.5 s: not renewed alone", b.calls);
    cr_expect_gt(b.warned, 0, "no warning");
    cr_expect(strstr(b.warning, "+mget") != NULL, "the warning does not name +mget: %s", b.warning);
    lockenv_stop(&e);
}

/* ---- The operator: hilock_break ------------------------------------------- */

static const char *const break_rule[] = {"~hilock:*", "&hilock:*", "+eval", "+evalsha", "+info",
                                         "+get", "+del", "+publish", NULL};

static void broke(int status, uint64_t fence, void *data) {
    got *g = data;
    (void)fence;
    g->calls++;
    g->status = status;
}

Test(acl, break_rule, .timeout = 30) {
    lockenv e;
    char url[128];
    lockenv_start(&e);
    hilock_client *holder = lockenv_client(&e);
    hilock_acquire_opts o = opts_wait_lease(1000, 5000);
    got held = acquire_now(&e, holder, "acl-break", &o);
    cr_assert_eq(held.status, 0);
    for (int skip = -1; break_rule[skip + 1] != NULL || skip == -1; skip++) {
        char user[16];
        snprintf(user, sizeof(user), "op%d", skip + 1);
        acl_user(&e.r, user, break_rule, skip, NULL);
        user_url(url, sizeof(url), user, &e.r, NULL);
        hilock_client *op = lockenv_client_url(&e, url, 0);
        got g = {0, 0, NULL, 0}, g2 = {0, 0, NULL, 0};
        cr_assert_eq(hilock_break(op, "acl-break", broke, &g), 0);
        test_loop_until(e.base, &g.calls, 3000);
        cr_expect_eq(g.calls, 1);
        /* A second break on the connection goes as EVALSHA (the first was
         * EVAL): its refusal counts if the first passed. */
        cr_assert_eq(hilock_break(op, "acl-break", broke, &g2), 0);
        test_loop_until(e.base, &g2.calls, 3000);
        cr_expect_eq(g2.calls, 1);
        if (g.status == 0) g.status = g2.status;
        if (skip == -1 || strcmp(break_rule[skip], "+info") == 0) { /* +info: a warning only */
            cr_expect_eq(g.status, 0, "the operator's rule: %s (%s)", hilock_strerror(g.status),
                         hilock_client_errstr(op));
            cr_expect_eq(lock_exists(&e.r, "acl-break"), 0);
        } else {
            cr_expect_eq(g.status, HILOCK_EAUTH, "without %s: %s (%s)", break_rule[skip],
                         hilock_strerror(g.status), hilock_client_errstr(op));
            cr_expect(names_perm(hilock_client_errstr(op), break_rule[skip]),
                      "without %s: \"%s\"", break_rule[skip], hilock_client_errstr(op));
        }
        hilock_client_free(op);
        if (lock_exists(&e.r, "acl-break") == 0) { /* take it again */
            if (held.hold) hilock_client_free(holder), holder = lockenv_client(&e);
            held = acquire_now(&e, holder, "acl-break", &o);
            cr_assert_eq(held.status, 0);
        }
    }
    hilock_client_free(holder);
    lockenv_stop(&e);
}

/* ---- Redis Cluster, sharded pub/sub -------------------------------------- */

static int give_back_in(struct event_base *base, hilock_hold *h) {
    rel r = {0, 0};
    cr_assert_eq(hilock_release(h, rel_cb, &r), 0);
    test_loop_until(base, &r.calls, 5000);
    cr_assert_eq(r.calls, 1);
    return r.status;
}

/* The cluster rule: the standalone one with sharded pub/sub in place of
 * classic, and the slot map (CLUSTER SLOTS) and ASKING. */
static const char *const cluster_rule[] = {
    "~hilock:*", "&hilock:*",
    "+eval", "+evalsha", "+info", "+cluster|slots", "+asking",
    "+ssubscribe", "+sunsubscribe", "+spublish",
    "+time", "+get", "+mget", "+set", "+incr", "+del", "+exists", "+pexpire", "+pexpireat", "+pttl",
    "+hget", "+hset", "+hmget", "+hdel", "+hexists", "+hincrby",
    "+zadd", "+zcard", "+zpopmin", "+zrange", "+zrangebyscore", "+zrem", "+zremrangebyscore",
    "+zscore",
    NULL};

static void cluster_user(test_cluster *cl, const char *user, int skip) {
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) acl_user(&cl->node[i], user, cluster_rule, skip, NULL);
}

static hilock_client *cluster_user_client(clusterenv *e, const char *user, const test_redis *seed,
                                          hilock_log_cb log, void *log_data) {
    hilock_config cfg;
    char url[128];
    user_url(url, sizeof(url), user, seed, NULL);
    cluster_config(&cfg, url);
    cfg.log_cb = log;
    cfg.log_data = log_data;
    return cluster_client_cfg(e, &cfg);
}

static void count_slots_refused(int level, const char *msg, void *data) {
    if (level == HILOCK_LOG_WARNING && strstr(msg, "CLUSTER SLOTS refused")) (*(int *)data)++;
}

/* Two clients of the user "hilock" with exactly the cluster rule (sharded
 * pub/sub: AUTO picks it on a cluster of 7.0) contend for 4 names while 48
 * slots, theirs, migrate from one master to another (ASK, ASKING, MOVED):
 * one holder at a time, fences in order, no error. Then a user without
 * +ssubscribe has its waiters fail with HILOCK_EAUTH naming it, and one
 * without +cluster|slots is warned and still served (by MOVED). */
Test(acl, cluster_rule_exclusion_during_reshard, .timeout = 90) {
    clusterenv e;
    clusterenv_start(&e);
    cluster_user(&e.cl, "hilock", -1);
    test_redis *src = test_cluster_master_of(&e.cl, 0), *dst = cluster_other_master(&e.cl, src);
    char names[4][32];
    hilock_client *a = cluster_user_client(&e, "hilock", &e.cl.node[0], NULL, NULL);
    hilock_client *b = cluster_user_client(&e, "hilock", &e.cl.node[3], NULL, NULL);
    shared s;
    cluster_reshard_contended(&e, src, dst, a, b, "acl-rs", names, &s);
    cr_expect_eq(s.granted, 400);
    cr_log_info("reshard as an ACL user: %lld ASKING", stat_calls(dst, "asking"));
    hilock_client_free(a);
    hilock_client_free(b);

    /* Without +ssubscribe: the holder is served, its waiter is not woken
     * (it could never be): HILOCK_EAUTH, at once, naming the command. */
    cluster_user(&e.cl, "nossub", rule_index(cluster_rule, "+ssubscribe"));
    a = cluster_user_client(&e, "nossub", &e.cl.node[0], NULL, NULL);
    b = cluster_user_client(&e, "nossub", &e.cl.node[0], NULL, NULL);
    got ga = {0, 0, NULL, 0}, gb = {0, 0, NULL, 0};
    hilock_acquire_opts o = opts_wait(5000);
    cr_assert_eq(hilock_acquire(a, "acl-ss", &o, got_cb, &ga, NULL), 0);
    test_loop_until(e.base, &ga.calls, 5000);
    cr_assert_eq(ga.status, 0, "%s (%s)", hilock_strerror(ga.status), hilock_client_errstr(a));
    long long t1 = test_now_ms();
    cr_assert_eq(hilock_acquire(b, "acl-ss", &o, got_cb, &gb, NULL), 0);
    test_loop_until(e.base, &gb.calls, 6000);
    cr_expect_eq(gb.calls, 1);
    cr_expect_eq(gb.status, HILOCK_EAUTH, "without +ssubscribe: %s", hilock_strerror(gb.status));
    cr_expect_lt(gb.at_ms - t1, 2000, "the waiter waited %lld ms for a wakeup that cannot come",
                 gb.at_ms - t1);
    cr_expect(strstr(hilock_client_errstr(b), "'ssubscribe'") && strstr(hilock_client_errstr(b), "channel hilock:"),
              "\"%s\"", hilock_client_errstr(b));
    if (ga.status == 0) cr_expect_eq(give_back_in(e.base, ga.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);

    /* Without +cluster|slots: a warning, and the locks still work. */
    int warned = 0;
    cluster_user(&e.cl, "noslots", rule_index(cluster_rule, "+cluster|slots"));
    a = cluster_user_client(&e, "noslots", &e.cl.node[0], count_slots_refused, &warned);
    for (int i = 0; i < 4; i++) {
        got g = {0, 0, NULL, 0};
        cr_assert_eq(hilock_acquire(a, names[i], &o, got_cb, &g, NULL), 0);
        test_loop_until(e.base, &g.calls, 5000);
        cr_expect_eq(g.status, 0, "without +cluster|slots: %s (%s)", hilock_strerror(g.status),
                     hilock_client_errstr(a));
        if (g.status == 0) cr_expect_eq(give_back_in(e.base, g.hold), 0);
    }
    cr_expect_eq(warned, 1, "%d warnings of a refused CLUSTER SLOTS", warned);
    hilock_client_free(a);

    /* A slot that migrates, where the name's key is on neither side: its
     * owner answers ASK, and the request goes to the importing node behind
     * ASKING. With the rule: served. Without +asking: HILOCK_EAUTH naming
     * it, not a bounce until the hop limit. (A break, whose script has one
     * key: with several, all missing, the importing node says TRYAGAIN
     * until the migration ends.) */
    char slot[8];
    unsigned sl = cluster_slot_of("acl-ask");
    snprintf(slot, sizeof(slot), "%u", sl);
    test_redis *owner = test_cluster_master_of(&e.cl, sl), *to = cluster_other_master(&e.cl, owner);
    char owner_id[64], to_id[64];
    cluster_node_id(owner, owner_id, sizeof(owner_id));
    cluster_node_id(to, to_id, sizeof(to_id));
    cr_assert(cluster_run_on(to, "CLUSTER SETSLOT %s IMPORTING %s", slot, owner_id));
    cr_assert(cluster_run_on(owner, "CLUSTER SETSLOT %s MIGRATING %s", slot, to_id));
    cluster_user(&e.cl, "noasking", rule_index(cluster_rule, "+asking"));
    const char *ask_users[2] = {"hilock", "noasking"};
    for (int u = 0; u < 2; u++) {
        long long asked = stat_calls(to, "asking");
        a = cluster_user_client(&e, ask_users[u], &e.cl.node[0], NULL, NULL);
        got g = {0, 0, NULL, 0};
        cr_assert_eq(hilock_break(a, "acl-ask", broke, &g), 0);
        test_loop_until(e.base, &g.calls, 6000);
        cr_expect_eq(g.calls, 1);
        if (u == 0) {
            cr_expect_eq(g.status, 0, "ASK with the rule: %s (%s)", hilock_strerror(g.status), hilock_client_errstr(a));
            cr_expect_gt(stat_calls(to, "asking"), asked, "no ASKING sent");
        } else {
            cr_expect_eq(g.status, HILOCK_EAUTH, "ASK without +asking: %s (%s)", hilock_strerror(g.status),
                         hilock_client_errstr(a));
            cr_expect(strstr(hilock_client_errstr(a), "'asking'") != NULL, "\"%s\"", hilock_client_errstr(a));
        }
        hilock_client_free(a);
    }
    clusterenv_stop(&e);
}

/* ---- Sentinel --------------------------------------------------------------- */

/* The master's rule under Sentinel is the standalone one and +role (hilock
 * checks that the node the sentinels name says master). Without +role:
 * HILOCK_EAUTH naming it. The sentinels are asked without credentials (as
 * their default user). */
Test(acl, sentinel_rule, .timeout = 60) {
    static const char *const with_role[] = {"+role", NULL};
    test_sentinel s;
    lockenv e;
    memset(&s, 0, sizeof(s));
    memset(&e, 0, sizeof(e));
    cr_assert_eq(test_sentinel_start(&s), 0, "the sentinels did not start");
    lockenv_loop(&e);
    const char *users[2] = {"hilock", "norole"};
    for (int u = 0; u < 2; u++) {
        for (int i = 0; i < 2; i++) acl_user(&s.node[i], users[u], standalone_rule, -1, u == 0 ? with_role : NULL);
        char url[320];
        /* redis-sentinel://user:pw@S1,S2,S3#hlmaster */
        snprintf(url, sizeof(url), "redis-sentinel://%s:pw@%s", users[u], s.url + strlen("redis-sentinel://"));
        hilock_client *c = lockenv_client_url(&e, url, 0);
        hilock_acquire_opts o = opts_wait_lease(1500, 2000);
        got g = acquire_now(&e, c, "acl-sentinel", &o);
        if (u == 0) {
            cr_expect_eq(g.status, 0, "the Sentinel rule: %s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
            if (g.status == 0) cr_expect_eq(release_now(&e, g.hold), 0);
        } else {
            cr_expect_eq(g.status, HILOCK_EAUTH, "without +role: %s", hilock_strerror(g.status));
            cr_expect(strstr(hilock_client_errstr(c), "'role'") != NULL, "\"%s\"", hilock_client_errstr(c));
        }
        hilock_client_free(c);
    }
    test_sentinel_stop(&s);
    event_base_free(e.base);
}

/* The sentinels' side: hilock asks them as their `default` user, which the
 * line of docs/tls-and-acl.md restricts to what hilock sends (PING, SENTINEL
 * get-master-addr-by-name, SUBSCRIBE +switch-master), the sentinels' own
 * links going as a user of theirs (sentinel-user). With it, hilock finds
 * the master, and hears +switch-master: after a SENTINEL FAILOVER (sent as
 * an admin) its requests go to the new master. Without
 * +sentinel|get-master-addr-by-name, a request ends with HILOCK_EAUTH naming
 * it, in time. */
static const char *const sentinel_side_rule =
    "ACL SETUSER default on nopass resetchannels &+switch-master -@all +ping "
    "+sentinel|get-master-addr-by-name +subscribe +unsubscribe";

/* One command as the admin user of sentinel r; 1 if Redis said OK. */
static int sentinel_admin(const test_redis *r, const char *cmd) {
    redisContext *k = test_redis_connect(r);
    redisReply *rep = k ? redisCommand(k, "AUTH admin adminpw") : NULL;
    if (rep) freeReplyObject(rep);
    rep = k ? redisCommand(k, cmd) : NULL;
    int ok = rep && rep->type == REDIS_REPLY_STATUS;
    if (rep && !ok) cr_log_warn("%s: %s", cmd, rep->type == REDIS_REPLY_ERROR ? rep->str : "?");
    if (rep) freeReplyObject(rep);
    if (k) redisFree(k);
    return ok;
}

static void sentinels_restrict(test_sentinel *s, const char *rule) {
    for (int i = 0; i < TEST_SENTINELS; i++) {
        redisReply *rep = test_redis_cmd(&s->sentinel[i], "ACL SETUSER admin on >adminpw ~* &* +@all");
        cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "admin user on sentinel %d", i);
        freeReplyObject(rep);
        /* The sentinels' links to each other (votes) go as admin. */
        cr_assert(sentinel_admin(&s->sentinel[i], "SENTINEL CONFIG SET sentinel-user admin"));
        cr_assert(sentinel_admin(&s->sentinel[i], "SENTINEL CONFIG SET sentinel-pass adminpw"));
        cr_assert(sentinel_admin(&s->sentinel[i], rule), "%s", rule);
    }
}

Test(acl, sentinel_side_rule, .timeout = 90) {
    test_sentinel s;
    lockenv e;
    memset(&s, 0, sizeof(s));
    memset(&e, 0, sizeof(e));
    cr_assert_eq(test_sentinel_start(&s), 0, "the sentinels did not start");
    lockenv_loop(&e);
    sentinels_restrict(&s, sentinel_side_rule);
    hilock_config cfg;
    lockenv_config(&cfg, s.url);
    cfg.request_timeout_ms = 6000; /* longer than the failover */
    hilock_client *c = lockenv_client_cfg(&e, &cfg);
    got g = acquire_now(&e, c, "acl-sside", NULL);
    cr_assert_eq(g.status, 0, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    test_redis *old = test_sentinel_master(&s);
    cr_assert_not_null(old);
    cr_expect_eq(lock_exists(old, "acl-sside"), 1);
    cr_expect_eq(release_now(&e, g.hold), 0);
    cr_assert(sentinel_admin(&s.sentinel[0], "SENTINEL FAILOVER " TEST_SENTINEL_NAME));
    test_redis *nm = test_sentinel_wait_new_master(&s, old, 15000);
    cr_assert_not_null(nm, "no new master");
    /* hilock heard +switch-master (or found it by asking): a fresh name is
     * taken on the new master. */
    int moved = 0;
    long long until = test_now_ms() + 15000;
    while (!moved && test_now_ms() < until) {
        hilock_acquire_opts once = opts_wait(0);
        g = acquire_now(&e, c, "acl-sside-2", &once);
        if (g.status == 0) {
            moved = lock_exists(nm, "acl-sside-2") == 1;
            cr_assert_eq(release_now(&e, g.hold), 0);
        }
        if (!moved) test_loop_for(e.base, 100);
    }
    cr_expect(moved, "the client never followed the failover: %s", hilock_client_errstr(c));
    hilock_client_free(c);

    /* Without +sentinel|get-master-addr-by-name: refused, said so, in time. */
    for (int i = 0; i < TEST_SENTINELS; i++)
        cr_assert(sentinel_admin(&s.sentinel[i], "ACL SETUSER default -sentinel|get-master-addr-by-name"));
    lockenv_config(&cfg, s.url);
    c = lockenv_client_cfg(&e, &cfg);
    long long t0 = test_now_ms();
    g = acquire_now(&e, c, "acl-sside-3", NULL);
    cr_expect_eq(g.status, HILOCK_EAUTH, "%s (%s)", hilock_strerror(g.status), hilock_client_errstr(c));
    cr_expect(strstr(hilock_client_errstr(c), "get-master-addr-by-name") != NULL, "\"%s\"",
              hilock_client_errstr(c));
    cr_expect_lt(test_now_ms() - t0, 3000, "took %lld ms", test_now_ms() - t0);
    if (g.status == 0) release_now(&e, g.hold);
    hilock_client_free(c);
    test_sentinel_stop(&s);
    event_base_free(e.base);
}
