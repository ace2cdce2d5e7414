/* Tests of `hilock inspect`: the built CLI (BUILD/hilock, or $HILOCK_CLI)
 * run against real servers (standalone, a cluster, Sentinel, redlock
 * masters), with locks held and waited for by the library in this process
 * and by other hilock processes; every figure it prints is checked against
 * what the library or Redis says. */
#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "support/clusterenv.h"
#include "support/sentinelenv.h"
#include "support/tlsenv.h"

#define MAX_KIDS 8

static lockenv env;
static char cli[PATH_MAX];          /* the binary under test */
static char dir[128];               /* this test's scratch dir */
static pid_t kids[MAX_KIDS];        /* waiters to kill */
#ifdef HILOCK_HAVE_TLS
static test_tls certs;              /* TLS tests: their certificates, */
static test_tls_redis tls_srv[3], tls_sent; /* servers and sentinel */
#endif

/* ---- Helpers ------------------------------------------------------------ */

static const char *tmp(const char *file) {
    static char ring[4][PATH_MAX];
    static int next;
    char *p = ring[next++ % 4];
    snprintf(p, PATH_MAX, "%s/%s", dir, file);
    return p;
}

#define WAIT_UNTIL(cond, ms) do {                                   \
        long long until_ = test_now_ms() + (ms);                    \
        while (!(cond) && test_now_ms() < until_) test_msleep(5);   \
    } while (0)

/* Run `hilock inspect ARGS...` (args NULL-terminated) with the environment
 * envv ("K=V", NULL-terminated, or NULL: none): its exit status, its stdout
 * into out and its stderr into err. */
static int inspect_run_env(char *out, size_t n, char *err, size_t en, char *const *envv,
                           const char *const *args) {
    char *argv[32];
    int argc = 0, status;

    argv[argc++] = cli;
    argv[argc++] = "inspect";
    while (*args != NULL && argc < 31) argv[argc++] = (char *)*args++;
    argv[argc] = NULL;
    status = test_wait(test_spawn(argv, envv, tmp("out"), tmp("err")), 20000);
    test_slurp(tmp("out"), out, n);
    test_slurp(tmp("err"), err, en);
    return status;
}

static int inspect_run(char *out, size_t n, char *err, size_t en, const char *const *args) {
    return inspect_run_env(out, n, err, en, NULL, args);
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define INSPECT(out, err, ...) inspect_run(out, sizeof(out), err, sizeof(err), ARGS(__VA_ARGS__))

/* A hilock process waiting for NAME (mode "-f", "-x", "-n5", or "" for the
 * mutex), killed by the fixture. */
static void spawn_waiter(const char *url, const char *mode, const char *name) {
    char *argv[] = { cli, "-u", (char *)url, "-w", "20000", (char *)name, "--", "true", NULL, NULL };
    int i;

    if (*mode) { /* the mode before NAME */
        memmove(argv + 6, argv + 5, 4 * sizeof(char *));
        argv[5] = (char *)mode;
    }
    for (i = 0; i < MAX_KIDS && kids[i] != 0; i++) {}
    cr_assert_lt(i, MAX_KIDS);
    kids[i] = test_spawn(argv, NULL, tmp("waiter.out"), NULL);
    cr_assert_gt(kids[i], 0);
}

/* The text table's row for NAME and KIND, split at runs of two spaces or
 * more (cells have single spaces at most). */
typedef struct cells {
    char f[12][160];
    int n;
} cells;

static int row_of(const char *out, const char *name, const char *kind, cells *c) {
    for (const char *line = out; *line; ) {
        const char *nl = strchr(line, '\n'), *p = line;
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        memset(c, 0, sizeof(*c));
        while (p < line + len && c->n < 12) {
            const char *gap = strstr(p, "  ");
            size_t w = gap && gap < line + len ? (size_t)(gap - p) : (size_t)(line + len - p);
            snprintf(c->f[c->n++], sizeof(c->f[0]), "%.*s", (int)w, p);
            p += w;
            while (p < line + len && *p == ' ') p++;
        }
        if (c->n >= 2 && strcmp(c->f[0], name) == 0 && strcmp(c->f[1], kind) == 0) return 1;
        line = nl ? nl + 1 : line + len;
    }
    return 0;
}

/* The number of lines of a text. */
static int lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* The hold's token as Redis stores it (the lock's value up to its marks). */
static void token_of(const test_redis *r, const char *key, char *out, size_t n) {
    redisReply *rep = test_redis_cmd(r, "GET %s", key);
    cr_assert(rep != NULL && rep->type == REDIS_REPLY_STRING, "no token at %s", key);
    snprintf(out, n, "%.*s", (int)strcspn(rep->str, " "), rep->str);
    freeReplyObject(rep);
}

/* Its first 8 characters and U+2026, as the table shows a token. */
static const char *short_of(const char *token) {
    static char buf[32];
    snprintf(buf, sizeof(buf), "%.8s\xe2\x80\xa6", token);
    return buf;
}

/* "ttl_ms": digits -> "ttl_ms": T, the one field that moves between runs. */
static void mask_ttls(char *s) {
    char *p = s;
    while ((p = strstr(p, "\"ttl_ms\": ")) != NULL) {
        char *d = p + 10, *e = d;
        while (*e >= '0' && *e <= '9') e++;
        if (e > d) { *d = 'T'; memmove(d + 1, e, strlen(e) + 1); }
        p = d;
    }
}

/* Run e's loop until the lock NAME is on each of the n servers (a Redlock
 * grant comes with a quorum: the others answer a moment later). */
static void held_everywhere(lockenv *e, const test_redis *const *r, int n, const char *name) {
    for (int i = 0; i < n; i++) {
        for (long long until = test_now_ms() + 3000; lock_exists(r[i], name) != 1 && test_now_ms() < until; )
            test_loop_for(e->base, 10);
        cr_assert_eq(lock_exists(r[i], name), 1, "master %d never got the lock", i);
    }
}

/* Hold a primitive through the library on e's loop. */
static hilock_hold *hold_sem(lockenv *e, hilock_client *c, const char *name, unsigned total, unsigned n) {
    hilock_acquire_opts o = opts_wait_lease(5000, 20000);
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_semaphore_acquire(c, name, total, n, &o, got_cb, &g, NULL), 0);
    test_loop_until(e->base, &g.calls, 5000);
    cr_assert(g.calls == 1 && g.status == 0, "semaphore %s: %d", name, g.status);
    return g.hold;
}

static hilock_hold *hold_read(lockenv *e, hilock_client *c, const char *name) {
    hilock_acquire_opts o = opts_wait_lease(5000, 20000);
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_read_acquire(c, name, &o, got_cb, &g, NULL), 0);
    test_loop_until(e->base, &g.calls, 5000);
    cr_assert(g.calls == 1 && g.status == 0, "read %s: %d", name, g.status);
    return g.hold;
}

static hilock_hold *hold_fair(lockenv *e, hilock_client *c, const char *name) {
    hilock_acquire_opts o = opts_wait_lease(5000, 20000);
    got g = {0, 0, NULL, 0};
    cr_assert_eq(hilock_fair_acquire(c, name, &o, got_cb, &g, NULL), 0);
    test_loop_until(e->base, &g.calls, 5000);
    cr_assert(g.calls == 1 && g.status == 0, "fair %s: %d", name, g.status);
    return g.hold;
}

static hilock_hold *hold_mutex(lockenv *e, hilock_client *c, const char *name) {
    hilock_acquire_opts o = opts_wait_lease(5000, 20000);
    got g = acquire_now(e, c, name, &o);
    cr_assert_eq(g.status, 0, "mutex %s: %d", name, g.status);
    return g.hold;
}

/* ---- Fixture ------------------------------------------------------------- */

static void setup(void) {
    cr_assert_not_null(test_build_path("HILOCK_CLI", "hilock", cli, sizeof(cli)));
    cr_assert_eq(access(cli, X_OK), 0, "no CLI binary at %s (set HILOCK_CLI)", cli);
    cr_assert_eq(test_make_dir(dir, sizeof(dir)), 0);
    lockenv_start(&env);
}

static void teardown(void) {
    for (int i = 0; i < MAX_KIDS; i++)
        if (kids[i] > 0) {
            kill(kids[i], SIGKILL);
            test_wait(kids[i], 5000);
            kids[i] = 0;
        }
    lockenv_stop(&env);
    test_remove_dir(dir);
#ifdef HILOCK_HAVE_TLS
    for (int i = 0; i < 3; i++) test_tls_redis_stop(&tls_srv[i]);
    test_tls_redis_stop(&tls_sent);
    test_tls_free(&certs);
#endif
}

TestSuite(inspect, .init = setup, .fini = teardown);

/* ---- Standalone ----------------------------------------------------------- */

Test(inspect, free_name_is_free_and_exits_0, .timeout = 30) {
    char out[4096], err[1024];

    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "nobody"), 0, "stderr: %s", err);
    cr_assert_str_eq(out, "NAME    KIND   STATE  HOLDER  FENCE  TTL_MS  LAST_FENCE  WAITING  DETAIL\n"
                          "nobody  mutex  free   -       -      -       -           0        -\n");
    cr_assert_str_eq(err, "");
    /* $HILOCK_URL is the default URL, as for the rest of the CLI. */
    {
        char envurl[128], *argv[] = { cli, "inspect", "--json", "nobody", NULL };
        char *envv[] = { envurl, NULL };
        snprintf(envurl, sizeof(envurl), "HILOCK_URL=%s", env.r.url);
        cr_assert_eq(test_wait(test_spawn(argv, envv, tmp("out"), NULL), 20000), 0);
        test_slurp(tmp("out"), out, sizeof(out));
        snprintf(err, sizeof(err), "[\n {\"name\": \"nobody\", \"kind\": \"mutex\", \"server\": \"127.0.0.1:%d\", "
                 "\"held\": false, \"token\": null, \"fence\": null, \"ttl_ms\": null, \"last_fence\": null, "
                 "\"waiting\": 0, \"queue\": 0}\n]\n", env.r.port);
        cr_assert_str_eq(out, err);
    }
}

Test(inspect, held_mutex_shows_the_holder_and_its_waiters, .timeout = 30) {
    hilock_client *c = lockenv_client(&env);
    hilock_hold *h = hold_mutex(&env, c, "orders:42");
    char out[4096], err[1024], token[64], fence[32];
    cells row;

    token_of(&env.r, prim_key("orders:42", ""), token, sizeof(token));
    /* Two processes wait for it: two subscribers of its channel. */
    spawn_waiter(env.r.url, "", "orders:42");
    spawn_waiter(env.r.url, "", "orders:42");
    /* Each has waited more than the threshold (100 ms) and starves: a
     * place in the queue each. */
    WAIT_UNTIL(numsub(&env.r, "orders:42") == 2 && test_redis_int(&env.r, "ZCARD %s", prim_key("orders:42", ":q")) == 2,
               5000);
    cr_assert_eq(numsub(&env.r, "orders:42"), 2);

    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "orders:42"), 0, "stderr: %s", err);
    cr_assert_eq(lines(out), 2, "only the mutex exists: %s", out);
    cr_assert(row_of(out, "orders:42", "mutex", &row), "%s", out);
    cr_assert_eq(row.n, 9, "%s", out);
    snprintf(fence, sizeof(fence), "%llu", (unsigned long long)hilock_hold_fence(h));
    cr_assert_str_eq(row.f[2], "held");
    cr_assert_str_eq(row.f[3], short_of(token));
    cr_assert_str_eq(row.f[4], fence);
    cr_assert(atoll(row.f[5]) > 15000 && atoll(row.f[5]) <= 20000, "TTL_MS %s of a 20 s lease", row.f[5]);
    cr_assert_str_eq(row.f[6], fence, "the fence counter is the holder's fence");
    cr_assert_str_eq(row.f[7], "2", "WAITING: %s", out);
    cr_assert_str_eq(row.f[8], "starving 2");

    /* --json: the whole token. */
    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "--json", "orders:42"), 0);
    snprintf(err, sizeof(err), "\"held\": true, \"token\": \"%s\", \"fence\": %s, ", token, fence);
    cr_assert_not_null(strstr(out, err), "want %s in %s", err, out);
    snprintf(err, sizeof(err), "\"last_fence\": %s, \"waiting\": 2, \"queue\": 2}", fence);
    cr_assert_not_null(strstr(out, err), "want %s in %s", err, out);

    /* Released (its waiters gone first): free, and the fence counter stays. */
    for (int i = 0; i < MAX_KIDS; i++)
        if (kids[i] > 0) { kill(kids[i], SIGKILL); test_wait(kids[i], 5000); kids[i] = 0; }
    cr_assert_eq(release_now(&env, h), 0);
    /* (The release hands the lock to the first starving place, a killed
     * process's: each such grant lapses after its 1 s claim window.) */
    WAIT_UNTIL(test_redis_int(&env.r, "EXISTS %s", prim_key("orders:42", "")) == 0, 5000);
    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "orders:42"), 0);
    cr_assert(row_of(out, "orders:42", "mutex", &row), "%s", out);
    cr_assert_str_eq(row.f[2], "free");
    cr_assert_str_eq(row.f[3], "-");
    cr_assert(atoll(row.f[6]) >= atoll(fence), "LAST_FENCE %s after %s", row.f[6], fence);
    hilock_client_free(c);
}

/* A fleet being upgraded: a hilock older than 1.1 holds a mutex as a hash
 * (its token and fence in fields), which GET answers WRONGTYPE. */
Test(inspect, an_older_hilocks_hold_shows_its_holder, .timeout = 30) {
    const char *token = "0123456789abcdef0123456789abcdef";
    char out[4096], err[1024];
    cells row;

    cr_assert_eq(test_redis_int(&env.r, "HSET %s token %s fence 7", prim_key("old:1", ""), token), 2);
    cr_assert_eq(test_redis_int(&env.r, "PEXPIRE %s 20000", prim_key("old:1", "")), 1);
    freeReplyObject(test_redis_cmd(&env.r, "SET %s 7", prim_key("old:1", ":fence")));
    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "old:1"), 0, "stderr: %s", err);
    cr_assert(row_of(out, "old:1", "mutex", &row), "%s", out);
    cr_assert_str_eq(row.f[2], "held");
    cr_assert_str_eq(row.f[3], short_of(token));
    cr_assert_str_eq(row.f[4], "7");
    cr_assert(atoll(row.f[5]) > 15000 && atoll(row.f[5]) <= 20000, "TTL_MS %s of a 20 s lease", row.f[5]);
    cr_assert_str_eq(row.f[8], "held by hilock 1.0");
    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "--json", "old:1"), 0);
    snprintf(err, sizeof(err), "\"held\": true, \"token\": \"%s\", \"fence\": 7, ", token);
    cr_assert_not_null(strstr(out, err), "want %s in %s", err, out);
}

Test(inspect, semaphore_rwlock_and_fair_lines, .timeout = 30) {
    hilock_client *c = lockenv_client(&env);
    hilock_hold *s1 = hold_sem(&env, c, "mix", 5, 1), *s2 = hold_sem(&env, c, "mix", 5, 2);
    hilock_hold *f = hold_fair(&env, c, "mix");
    char out[4096], err[1024], token[64], fence[32], fair[128];
    cells row;

    (void)s1; (void)s2;
    hold_read(&env, c, "mix");
    hold_read(&env, c, "mix");
    /* A writer waits (the marker, a subscriber), and two fair waiters queue. */
    spawn_waiter(env.r.url, "-x", "mix");
    spawn_waiter(env.r.url, "-f", "mix");
    spawn_waiter(env.r.url, "-f", "mix");
    WAIT_UNTIL(test_redis_int(&env.r, "EXISTS %s", prim_key("mix", ":rww")) == 1 &&
               test_redis_int(&env.r, "ZCARD %s", prim_key("mix", ":fair:q")) == 2, 5000);
    cr_assert_eq(test_redis_int(&env.r, "ZCARD %s", prim_key("mix", ":fair:q")), 2);

    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "mix"), 0, "stderr: %s", err);
    cr_assert_eq(lines(out), 5, "mutex, semaphore, rwlock, fair: %s", out);
    cr_assert(row_of(out, "mix", "mutex", &row), "%s", out);
    cr_assert_str_eq(row.f[2], "free");
    cr_assert(row_of(out, "mix", "semaphore", &row), "%s", out);
    cr_assert_str_eq(row.f[2], "held");
    cr_assert_str_eq(row.f[3], "-", "two holders: no one token");
    cr_assert_str_eq(row.f[8], "permits 3/5, 2 holders");
    cr_assert(row_of(out, "mix", "rwlock", &row), "%s", out);
    cr_assert_str_eq(row.f[2], "held");
    cr_assert_str_eq(row.f[7], "1", "the waiting writer: %s", out);
    cr_assert(strncmp(row.f[8], "2 readers, writer waiting", 25) == 0, "%s", row.f[8]);
    cr_assert(row_of(out, "mix", "fair", &row), "%s", out);
    {
        redisReply *rep = test_redis_cmd(&env.r, "GET %s", prim_key("mix", ":fair"));
        cr_assert(rep != NULL && rep->type == REDIS_REPLY_STRING);
        snprintf(fair, sizeof(fair), "%s", rep->str);
        freeReplyObject(rep);
    }
    snprintf(token, sizeof(token), "%.*s", (int)strcspn(fair, " "), fair);
    snprintf(fence, sizeof(fence), "%llu", (unsigned long long)hilock_hold_fence(f));
    cr_assert_str_eq(row.f[3], short_of(token));
    cr_assert_str_eq(row.f[4], fence);
    cr_assert_str_eq(row.f[6], fence);
    cr_assert_str_eq(row.f[7], "2");
    cr_assert_str_eq(row.f[8], "queue 2");

    /* --json carries the semaphore's holders and the counts. */
    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "--json", "mix"), 0);
    cr_assert_not_null(strstr(out, "\"permits_total\": 5, \"permits_held\": 3, \"holders\": [{\"token\": "), "%s", out);
    cr_assert_not_null(strstr(out, "\"readers\": 2, \"writer_waiting\": true, \"queue\": "), "%s", out);
    cr_assert_not_null(strstr(out, "\"waiting\": 2, \"queue\": 2}"), "%s", out);
    hilock_client_free(c);
}

/* The fair lock's waiters are counted by their channels, one per process
 * (P{T}:fair:ch:ID), matched by a PUBSUB pattern: glob characters in the
 * name are escaped (unescaped, "g?" would count "gx"'s waiter too). And
 * the monitoring rule of docs/tls-and-acl.md is enough for it. */
Test(inspect, fair_waiters_counted_by_their_channels_with_the_monitor_rule, .timeout = 30) {
    static const char *const rule[] = {
        "ACL", "SETUSER", "hilock-monitor", "reset", "on", ">pw", "%R~hilock:*", "resetchannels", "-@all",
        "+info", "+time", "+get", "+hmget", "+hgetall", "+pttl", "+exists", "+zrange", "+zcard", "+scan",
        "+pubsub|numsub", "+pubsub|shardnumsub", "+pubsub|channels", "+pubsub|shardchannels"};
    hilock_client *c = lockenv_client(&env);
    char out[4096], err[1024], url[128];
    cells row;
    redisContext *k = test_redis_connect(&env.r);
    redisReply *rep = redisCommandArgv(k, (int)(sizeof(rule) / sizeof(rule[0])), (const char **)rule, NULL);
    cr_assert(rep != NULL && rep->type == REDIS_REPLY_STATUS, "ACL SETUSER: %s", rep ? rep->str : "no reply");
    freeReplyObject(rep);
    redisFree(k);
    snprintf(url, sizeof(url), "redis://hilock-monitor:pw@127.0.0.1:%d", env.r.port);

    hold_fair(&env, c, "g?");
    hold_fair(&env, c, "gx");
    hold_mutex(&env, c, "g?");
    spawn_waiter(env.r.url, "-f", "g?");
    spawn_waiter(env.r.url, "-f", "g?");
    spawn_waiter(env.r.url, "-f", "gx");
    spawn_waiter(env.r.url, "", "g?");
    WAIT_UNTIL(test_redis_int(&env.r, "ZCARD %s", prim_key("g?", ":fair:q")) == 2 &&
               test_redis_int(&env.r, "ZCARD %s", prim_key("gx", ":fair:q")) == 1, 5000);
    cr_assert_eq(test_redis_int(&env.r, "ZCARD %s", prim_key("g?", ":fair:q")), 2);
    WAIT_UNTIL(INSPECT(out, err, "-u", url, "g?") == 0 && row_of(out, "g?", "mutex", &row) &&
               strcmp(row.f[7], "1") == 0, 5000); /* the CLI waiter subscribes after its first try */

    cr_assert_eq(INSPECT(out, err, "-u", url, "g?", "gx"), 0, "stderr: %s", err);
    cr_assert(row_of(out, "g?", "fair", &row), "%s", out);
    cr_expect_str_eq(row.f[7], "2", "the two waiting processes of g?: %s", out);
    cr_assert(row_of(out, "gx", "fair", &row), "%s", out);
    cr_expect_str_eq(row.f[7], "1", "%s", out);
    cr_assert(row_of(out, "g?", "mutex", &row), "%s", out);
    cr_expect_str_eq(row.f[7], "1", "%s", out);
    hilock_client_free(c);
}

Test(inspect, odd_names_are_escaped_in_text_and_json, .timeout = 30) {
    static const char odd[] = "a{b%c} d";
    static const char bad[] = "\x01q\"\\\xff\xc3\xa9";     /* control, quote, backslash, not UTF-8, é */
    hilock_client *c = lockenv_client(&env);
    hilock_hold *h = hold_mutex(&env, c, odd);
    char out[4096], err[1024], want[2048], token[64];
    cells row;

    token_of(&env.r, prim_key(odd, ""), token, sizeof(token));
    cr_assert_str_eq(prim_key(odd, ""), "hilock:{a%7Bb%25c%7D d}", "the escaped key");
    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, odd, bad), 0, "stderr: %s", err);
    cr_assert(row_of(out, odd, "mutex", &row), "%s", out);
    cr_assert_str_eq(row.f[2], "held");
    cr_assert(row_of(out, "\\x01q\"\\x5c\\xff\xc3\xa9", "mutex", &row), "bytes a terminal must not get: %s", out);

    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "--json", odd, bad), 0);
    rename(tmp("out"), tmp("json"));    /* for the parser below */
    mask_ttls(out);
    snprintf(want, sizeof(want),
             "[\n"
             " {\"name\": \"a{b%%c} d\", \"kind\": \"mutex\", \"server\": \"127.0.0.1:%d\", \"held\": true, "
             "\"token\": \"%s\", \"fence\": %llu, \"ttl_ms\": T, \"last_fence\": %llu, \"waiting\": 0, \"queue\": 0},\n"
             " {\"name\": \"\\u0001q\\\"\\\\\\u00ff\xc3\xa9\", \"name_hex\": \"0171225cffc3a9\", \"kind\": \"mutex\", "
             "\"server\": \"127.0.0.1:%d\", \"held\": false, \"token\": null, \"fence\": null, \"ttl_ms\": null, "
             "\"last_fence\": null, \"waiting\": 0, \"queue\": 0}\n"
             "]\n",
             env.r.port, token, (unsigned long long)hilock_hold_fence(h), (unsigned long long)hilock_hold_fence(h),
             env.r.port);
    cr_assert_str_eq(out, want);
    /* And a JSON parser takes it, when there is one to ask. */
    if (access("/usr/bin/python3", X_OK) == 0) {
        char *argv[] = { "python3", "-c",
                         "import json,sys; a=json.load(open(sys.argv[1])); "
                         "sys.exit(0 if len(a)==2 and a[0]['name']=='a{b%c} d' and a[1]['held'] is False else 3)",
                         (char *)tmp("json"), NULL };
        cr_assert_eq(test_wait(test_spawn(argv, NULL, tmp("py"), NULL), 20000), 0, "python3 json.load refused it");
    }
    hilock_client_free(c);
}

Test(inspect, scan_lists_held_locks_by_pattern_with_scan_not_keys, .timeout = 30) {
    hilock_client *c = lockenv_client(&env);
    char out[8192], err[1024];
    cells row;
    long long scans;

    hold_mutex(&env, c, "job:1");
    hold_mutex(&env, c, "job:2");
    hold_fair(&env, c, "job:3");
    hold_read(&env, c, "job:5");
    hold_sem(&env, c, "other:1", 2, 1);
    release_now(&env, hold_mutex(&env, c, "job:4"));   /* only its fence key is left */
    /* Enough other keys that SCAN takes several rounds of COUNT 1000. */
    cr_assert_eq(test_redis_int(&env.r, "EVAL %s 0",
                                "for i = 1, 3000 do redis.call('SET', 'filler:' .. i, i) end return 1"), 1);
    freeReplyObject(test_redis_cmd(&env.r, "CONFIG RESETSTAT"));
    cr_assert_eq(stat_calls(&env.r, "scan"), 0);

    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "--scan", "job:*"), 0, "stderr: %s", err);
    cr_assert_eq(lines(out), 5, "the header and job:1, 2, 3, 5: %s", out);
    cr_assert(row_of(out, "job:1", "mutex", &row) && strcmp(row.f[2], "held") == 0, "%s", out);
    cr_assert(row_of(out, "job:2", "mutex", &row) && strcmp(row.f[2], "held") == 0, "%s", out);
    cr_assert(row_of(out, "job:3", "fair", &row) && strcmp(row.f[2], "held") == 0, "%s", out);
    cr_assert(row_of(out, "job:5", "rwlock", &row) && strcmp(row.f[8], "1 reader") == 0, "%s", out);
    cr_assert(!row_of(out, "job:4", "mutex", &row), "a free lock listed: %s", out);
    cr_assert_null(strstr(out, "other:1"), "%s", out);
    cr_assert(strstr(out, "job:1") < strstr(out, "job:2") && strstr(out, "job:2") < strstr(out, "job:3"),
              "sorted by name: %s", out);
    scans = stat_calls(&env.r, "scan");
    cr_assert_geq(scans, 4, "3000+ keys by COUNT 1000: %lld SCANs", scans);
    cr_assert_eq(stat_calls(&env.r, "keys"), 0, "KEYS ran");

    /* Another pattern, and one that matches nothing: a header alone, 0. */
    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "--scan", "other:?"), 0);
    cr_assert(row_of(out, "other:1", "semaphore", &row) && strcmp(row.f[8], "permits 1/2, 1 holder") == 0, "%s", out);
    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "--json", "--scan", "none*"), 0);
    cr_assert_str_eq(out, "[]\n");
    cr_assert_eq(stat_calls(&env.r, "keys"), 0, "KEYS ran");
    hilock_client_free(c);
}

Test(inspect, prefix_and_db_from_the_options, .timeout = 30) {
    hilock_config cfg;
    hilock_client *c;
    char url[128], out[4096], err[1024];
    cells row;

    /* A prefix with glob characters (MATCH must not take them as a glob), in db 2. */
    snprintf(url, sizeof(url), "%s/2", env.r.url);
    lockenv_config(&cfg, url);
    cfg.prefix = "a*[x]:";
    c = lockenv_client_cfg(&env, &cfg);
    hold_mutex(&env, c, "pfx");
    cr_assert_eq(INSPECT(out, err, "-u", url, "-p", "a*[x]:", "--scan", "*"), 0, "stderr: %s", err);
    cr_assert(row_of(out, "pfx", "mutex", &row) && strcmp(row.f[2], "held") == 0, "%s", out);
    cr_assert_eq(INSPECT(out, err, "-u", url, "pfx"), 0);
    cr_assert(row_of(out, "pfx", "mutex", &row) && strcmp(row.f[2], "free") == 0, "the default prefix: %s", out);
    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "-p", "a*[x]:", "pfx"), 0);
    cr_assert(row_of(out, "pfx", "mutex", &row) && strcmp(row.f[2], "free") == 0, "db 0: %s", out);
    hilock_client_free(c);
}

Test(inspect, redis_errors_exit_69, .timeout = 30) {
    test_redis secured;
    char url[160], out[4096], err[1024];

    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", test_refused_port());
    cr_assert_eq(INSPECT(out, err, "-u", url, "x"), 69);
    cr_assert_not_null(strstr(err, "cannot connect: Connection refused"), "%s", err);
    cr_assert_str_eq(out, "");

    /* A key of another type where the lock should be. */
    cr_assert_eq(test_redis_int(&env.r, "RPUSH %s x", prim_key("wrongtype", "")), 1);
    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "wrongtype"), 69);
    cr_assert_not_null(strstr(err, "WRONGTYPE"), "%s", err);
    /* Nothing to show: no header alone, no [] (it would read as "free"). */
    cr_assert_str_eq(out, "");
    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "--json", "wrongtype"), 69);
    cr_assert_str_eq(out, "");
    /* --scan that finds nothing held, and fails nowhere: the header alone. */
    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, "--scan", "nothing*"), 0, "%s", err);
    cr_assert_eq(strncmp(out, "NAME  ", 6), 0, "%s", out);
    cr_assert_eq(lines(out), 1, "%s", out);

    /* Authentication: none given, and a wrong password. */
    cr_assert_eq(test_redis_start(&secured, 0, "--requirepass", "sekrit", NULL), 0);
    cr_assert_eq(INSPECT(out, err, "-u", secured.url, "x"), 69);
    cr_assert_not_null(strstr(err, "NOAUTH"), "%s", err);
    cr_assert_str_eq(out, "");
    snprintf(url, sizeof(url), "redis://:wrong@127.0.0.1:%d", secured.port);
    cr_assert_eq(INSPECT(out, err, "-u", url, "x"), 69);
    cr_assert_not_null(strstr(err, "AUTH: WRONGPASS"), "%s", err);
    snprintf(url, sizeof(url), "redis://:sekrit@127.0.0.1:%d", secured.port);
    cr_assert_eq(INSPECT(out, err, "-u", url, "x"), 0, "%s", err);
    test_redis_stop(&secured);
}

Test(inspect, usage_errors_exit_64, .timeout = 30) {
    static char longname[HILOCK_NAME_MAX + 2];
    const char *cases[][6] = {
        { NULL },
        { "-u", env.r.url, NULL },                        /* no NAME */
        { "-u", env.r.url, "--bogus", "x", NULL },
        { "-u", env.r.url, "-q", "x", NULL },
        { "-u", "http://x", "x", NULL },                   /* bad URL */
        { "-u", env.r.url, longname, NULL },              /* NAME too long */
        { "-u", env.r.url, "", NULL },
        { "-u", env.r.url, "-p", "a{b", "x", NULL },
        { "-u", env.r.url, "--scan", "*", "x", NULL },    /* both */
        { "-u", env.r.url, "--scan", NULL },
        { "-u", NULL },
        { "-u", env.r.url, "x", "--cacert", NULL },        /* TLS options as the CLI's */
        { "-u", env.r.url, "--key", "k.pem", "x", NULL },  /* a key without its certificate */
    };
    static const char hint[] = "Try 'hilock inspect --help' for more information.\n";
    char out[4096], err[4096];
    const char *nl;

    memset(longname, 'n', HILOCK_NAME_MAX + 1);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cr_assert_eq(inspect_run(out, sizeof(out), err, sizeof(err), cases[i]), 64, "case %zu", i);
        nl = strchr(err, '\n');
        cr_assert(strncmp(err, "hilock: ", 8) == 0 && nl != NULL && strcmp(nl + 1, hint) == 0,
                  "case %zu: want one message line and the hint, got: %s", i, err);
        cr_assert_str_eq(out, "", "case %zu", i);
    }
    /* A NAME of the longest length is fine. */
    longname[HILOCK_NAME_MAX] = '\0';
    cr_assert_eq(INSPECT(out, err, "-u", env.r.url, longname), 0, "%s", err);
    /* Options before inspect mean what they mean after it
     * (tests/cli/grammar.c has the rest of that grammar). */
    {
        char *argv[] = { cli, "-u", env.r.url, "inspect", "x", NULL };
        cr_assert_eq(test_wait(test_spawn(argv, NULL, tmp("out"), NULL), 20000), 0);
        cr_assert_not_null(strstr(test_slurp(tmp("out"), out, sizeof(out)), "\nx     mutex  free "), "%s", out);
    }
    cr_assert_eq(INSPECT(out, err, "--help"), 0);
    cr_assert(strncmp(out, "Usage: hilock inspect", 21) == 0, "%s", out);
}

/* ---- Redlock: each master on its own line --------------------------------- */

Test(inspect, redlock_url_shows_each_master, .timeout = 30) {
    test_redis m[2];
    char url[160], out[4096], err[1024], addr[32];
    hilock_client *c;
    cells row;
    int i;

    for (i = 0; i < 2; i++) cr_assert_eq(test_redis_start(&m[i], 0, NULL), 0);
    snprintf(url, sizeof(url), "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", env.r.port, m[0].port, m[1].port);
    c = lockenv_client_url(&env, url, 0);
    hold_mutex(&env, c, "rl");
    held_everywhere(&env, (const test_redis *const[]){ &env.r, &m[0], &m[1] }, 3, "rl");
    cr_assert_eq(INSPECT(out, err, "-u", url, "rl"), 0, "stderr: %s", err);
    cr_assert_eq(lines(out), 4, "a row per master: %s", out);
    cr_assert_eq(strncmp(out, "NAME  SERVER", 12), 0, "%s", out);
    for (i = 0; i < 3; i++) {
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", i == 0 ? env.r.port : m[i - 1].port);
        cr_assert(row_of(out, "rl", addr, &row), "no row for %s: %s", addr, out);
        cr_assert_str_eq(row.f[3], "held", "%s", out);
    }
    /* A master down: the others are shown, and the status says so. */
    test_redis_stop(&m[1]);
    cr_assert_eq(INSPECT(out, err, "-u", url, "rl"), 69);
    cr_assert_eq(lines(out), 3, "%s", out);
    cr_assert_not_null(strstr(err, "cannot connect"), "%s", err);
    hilock_client_free(c);
    test_redis_stop(&m[0]);
}

/* ---- Cluster and Sentinel --------------------------------------------------- */

/* Names, one per master of the cluster. */
static void names_per_master(test_cluster *cl, char names[3][16], test_redis *masters[3]) {
    int found = 0;
    for (int i = 0; found < 3 && i < 1000; i++) {
        char name[16];
        test_redis *m;
        int seen = 0;
        snprintf(name, sizeof(name), "c:%d", i);
        m = test_cluster_master_of(cl, cluster_slot_of(name));
        for (int k = 0; k < found; k++) seen |= masters[k] == m;
        if (m == NULL || seen) continue;
        masters[found] = m;
        snprintf(names[found++], 16, "%s", name);
    }
    cr_assert_eq(found, 3, "no name on each of 3 masters");
}

Test(inspect, cluster_routes_each_name_and_scans_every_master, .timeout = 60) {
    clusterenv e;
    lockenv le;
    hilock_config cfg;
    hilock_client *c, *classic;
    hilock_hold *h[3];
    test_redis *masters[3];
    char names[3][16], out[8192], err[1024], want[128];
    hilock_acquire_opts o = opts_wait_lease(20000, 20000);
    got g = {0, 0, NULL, 0};
    cells row;
    int sharded = 0, classics = 0;

    memset(&e, 0, sizeof(e));
    clusterenv_start(&e);
    le.base = e.base;
    le.loop = e.loop;
    cluster_config(&cfg, e.cl.url);
    c = cluster_client_cfg(&e, &cfg);
    names_per_master(&e.cl, names, masters);
    for (int i = 0; i < 3; i++) h[i] = hold_mutex(&le, c, names[i]);

    /* Waiters of names[0]: a hilock process (sharded pub/sub, on the slot's
     * master) and a client of classic pub/sub (on some node, any). */
    spawn_waiter(e.cl.url, "", names[0]);
    cfg.pubsub = HILOCK_PUBSUB_CLASSIC;
    classic = cluster_client_cfg(&e, &cfg);
    cr_assert_eq(hilock_acquire(classic, names[0], &o, got_cb, &g, NULL), 0);
    for (long long until = test_now_ms() + 5000; test_now_ms() < until && sharded + classics < 2; ) {
        test_loop_for(e.base, 20);
        sharded = cluster_subscribed_on(masters[0], names[0], 0);
        classics = 0;
        for (int n = 0; n < TEST_CLUSTER_NODES; n++) classics += cluster_subscribed_on(&e.cl.node[n], names[0], 1);
    }
    cr_assert(sharded == 1 && classics == 1, "want one sharded and one classic subscriber: %d, %d", sharded, classics);

    cr_assert_eq(INSPECT(out, err, "-u", e.cl.url, "--json", names[0], names[1], names[2]), 0, "stderr: %s", err);
    for (int i = 0; i < 3; i++) {
        snprintf(want, sizeof(want), "{\"name\": \"%s\", \"kind\": \"mutex\", \"server\": \"127.0.0.1:%d\", \"held\": true",
                 names[i], masters[i]->port);
        cr_assert_not_null(strstr(out, want), "want %s in %s", want, out);
        snprintf(want, sizeof(want), "\"fence\": %llu,", (unsigned long long)hilock_hold_fence(h[i]));
        cr_assert_not_null(strstr(strstr(out, names[i]), want), "%s: want %s in %s", names[i], want, out);
    }
    snprintf(want, sizeof(want), "\"waiting\": 2, \"queue\": ");
    cr_assert_not_null(strstr(strstr(out, names[0]), want), "both kinds of subscribers: %s", out);

    /* Seeded at a replica, --scan finds the locks of every master. */
    cr_assert_eq(INSPECT(out, err, "-u", e.cl.node[3].url, "--scan", "c:*"), 0, "stderr: %s", err);
    cr_assert_eq(lines(out), 4, "%s", out);
    for (int i = 0; i < 3; i++) {
        cr_assert(row_of(out, names[i], "mutex", &row), "%s missing: %s", names[i], out);
        cr_assert_str_eq(row.f[2], "held");
    }
    for (int n = 0; n < TEST_CLUSTER_NODES; n++) cr_assert_eq(stat_calls(&e.cl.node[n], "keys"), 0);
    for (int i = 0; i < 3; i++) cr_assert_geq(stat_calls(masters[i], "scan"), 1, "a master not scanned");
    hilock_client_free(classic);
    hilock_client_free(c);
    clusterenv_stop(&e);
}

Test(inspect, sentinel_url_inspects_the_master, .timeout = 60) {
    test_sentinel s;
    lockenv le;
    hilock_client *c;
    hilock_hold *h;
    test_redis *m;
    char out[4096], err[1024], want[256];

    memset(&s, 0, sizeof(s));
    cr_assert_eq(test_sentinel_start(&s), 0, "sentinels did not start");
    le = env;
    c = lockenv_client_url(&le, s.url, 0);
    h = hold_mutex(&le, c, "sent");
    m = test_sentinel_master(&s);
    cr_assert_not_null(m);
    cr_assert_eq(INSPECT(out, err, "-u", s.url, "--json", "sent"), 0, "stderr: %s", err);
    snprintf(want, sizeof(want), "{\"name\": \"sent\", \"kind\": \"mutex\", \"server\": \"127.0.0.1:%d\", \"held\": true",
             m->port);
    cr_assert_not_null(strstr(out, want), "want %s in %s", want, out);
    snprintf(want, sizeof(want), "\"fence\": %llu,", (unsigned long long)hilock_hold_fence(h));
    cr_assert_not_null(strstr(out, want), "want %s in %s", want, out);
    /* A master name the sentinels do not know. */
    snprintf(want, sizeof(want), "%.*s#nosuch", (int)(strchr(s.url, '#') - s.url), s.url);
    cr_assert_eq(INSPECT(out, err, "-u", want, "sent"), 69);
    cr_assert_not_null(strstr(err, "knows no master named nosuch"), "%s", err);
    hilock_client_free(c);
    test_sentinel_stop(&s);
}

/* ---- TLS --------------------------------------------------------------------- */

#ifndef HILOCK_HAVE_TLS

/* Built without TLS (hiredis 0.14): every TLS form is refused, with what
 * to build, before anything is sent to a TLS port in plain text. */
Test(inspect, tls_url_not_built_in_says_what_to_build, .timeout = 30) {
    static const char *const urls[] = { "rediss://127.0.0.1:6379", "rediss-sentinel://127.0.0.1:26379#m",
                                        "redlocks://127.0.0.1:1,127.0.0.1:2" };
    char out[4096], err[1024];

    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
        cr_expect_eq(INSPECT(out, err, "-u", urls[i], "x"), 69, "%s: %s", urls[i], err);
        cr_expect_not_null(strstr(err, "hiredis >= 1.0 with SSL"), "%s: %s", urls[i], err);
        cr_expect_str_eq(out, "", "%s", urls[i]);
    }
}

#else /* HILOCK_HAVE_TLS */

/* The certificates (support/tlsenv.h), and n TLS servers. */
static void tls_start(int n, const char *auth_clients) {
    cr_assert_eq(test_tls_make(&certs), 0, "openssl could not make the certificates");
    for (int i = 0; i < n; i++)
        cr_assert_eq(test_tls_redis_start(&tls_srv[i], &certs, auth_clients), 0,
                     "redis-server with TLS did not start");
}

/* The same table for NAME's mutex but for TTL_MS, which moves. */
static void same_table(const char *want, const char *have, const char *name) {
    cells w, h;
    cr_assert_eq(lines(have), lines(want), "want:\n%s\ngot:\n%s", want, have);
    cr_assert(row_of(want, name, "mutex", &w), "%s", want);
    cr_assert(row_of(have, name, "mutex", &h), "%s", have);
    cr_assert_eq(h.n, w.n, "%s", have);
    for (int i = 0; i < w.n; i++)
        if (i != 5) cr_expect_str_eq(h.f[i], w.f[i], "column %d: want:\n%s\ngot:\n%s", i, want, have);
}

/* A run that TLS refuses: 69 at once, why on stderr, nothing on stdout. */
static void expect_refused(const char *says, const char *const *args) {
    char out[4096], err[1024];
    long long t0 = test_now_ms();
    cr_expect_eq(inspect_run(out, sizeof(out), err, sizeof(err), args), 69, "stderr: %s", err);
    cr_expect_not_null(strstr(err, says), "want '%s' in: %s", says, err);
    cr_expect_str_eq(out, "", "nothing to show, not even the header");
    cr_expect_lt(test_now_ms() - t0, 1500, "%s: took %lld ms", says, test_now_ms() - t0);
    cr_log_info("%s: %s", says, err);
}

Test(inspect, tls_rediss_shows_a_held_lock_as_plain_does, .timeout = 30) {
    char plain[4096], out[4096], err[1024], env_ca[256];
    char *envv[] = { env_ca, NULL };
    hilock_client *c;

    tls_start(1, "no");
    c = lockenv_client_url(&env, tls_srv[0].r.url, 0);
    hold_mutex(&env, c, "tl");
    cr_assert_eq(INSPECT(plain, err, "-u", tls_srv[0].r.url, "tl"), 0, "stderr: %s", err);
    cr_assert_eq(INSPECT(out, err, "-u", tls_srv[0].url, "--cacert", certs.ca, "tl"), 0, "stderr: %s", err);
    same_table(plain, out, "tl");
    /* The CA from the environment, as for the rest of the CLI. */
    snprintf(env_ca, sizeof(env_ca), "HILOCK_CACERT=%s", certs.ca);
    cr_assert_eq(inspect_run_env(out, sizeof(out), err, sizeof(err), envv, ARGS("-u", tls_srv[0].url, "tl")), 0,
                 "stderr: %s", err);
    same_table(plain, out, "tl");
    hilock_client_free(c);
}

Test(inspect, tls_refusals_exit_69_and_say_why, .timeout = 30) {
    const char *u;
    char out[4096], err[1024];
    cells row;

    tls_start(1, "no");
    u = tls_srv[0].url;
    expect_refused("is refused", ARGS("-u", u, "--cacert", certs.other_ca, "x"));
    expect_refused("hostname mismatch", ARGS("-u", u, "--cacert", certs.ca, "--sni", "db.example.com", "x"));
    expect_refused("cannot load the CAs of /nonexistent.crt", ARGS("-u", u, "--cacert", "/nonexistent.crt", "x"));
    /* A name the certificate has passes; --insecure passes anything. */
    cr_expect_eq(INSPECT(out, err, "-u", u, "--cacert", certs.ca, "--sni", "localhost", "x"), 0, "%s", err);
    cr_expect_eq(INSPECT(out, err, "-u", u, "--cacert", certs.other_ca, "--sni", "db.example.com", "--insecure", "x"),
                 0, "%s", err);
    cr_expect(row_of(out, "x", "mutex", &row), "%s", out);
}

Test(inspect, tls_mutual_needs_the_client_certificate, .timeout = 30) {
    const char *u;
    char out[4096], err[1024];

    tls_start(1, "yes");
    u = tls_srv[0].url;
    cr_expect_eq(INSPECT(out, err, "-u", u, "--cacert", certs.ca, "--cert", certs.client_cert,
                         "--key", certs.client_key, "x"), 0, "%s", err);
    /* Without it: the alert's text when it arrives before the reset, else
     * the library's guess (support/tlsenv.h's server closes either way). */
    cr_expect_eq(INSPECT(out, err, "-u", u, "--cacert", certs.ca, "x"), 69, "%s", err);
    cr_expect(strstr(err, "refused our certificate") || strstr(err, "alert certificate required"), "%s", err);
    cr_expect_str_eq(out, "");
    cr_log_info("no client certificate: %s", err);
    /* A certificate without its key is a usage error, as for locks. */
    cr_expect_eq(INSPECT(out, err, "-u", u, "--cert", certs.client_cert, "x"), 64, "%s", err);
    cr_expect_not_null(strstr(err, "--cert and --key go together"), "%s", err);
}

/* A TLS URL to a plain port, and a plain URL to a TLS port: 69 within the
 * 2 s timeouts, never a hang. */
Test(inspect, tls_and_plain_ports_mixed_up_fail_in_time, .timeout = 30) {
    char url[64], out[4096], err[1024];
    long long t0;

    tls_start(1, "no");
    snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", tls_srv[0].r.port);
    t0 = test_now_ms();
    cr_expect_eq(INSPECT(out, err, "-u", url, "--cacert", certs.ca, "x"), 69, "%s", err);
    cr_expect_not_null(strstr(err, "TLS handshake with"), "%s", err);
    cr_expect_lt(test_now_ms() - t0, 3000, "rediss:// to a plain port: %lld ms", test_now_ms() - t0);
    cr_log_info("rediss:// to a plain port: %s", err);
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", tls_srv[0].tls_port);
    t0 = test_now_ms();
    cr_expect_eq(INSPECT(out, err, "-u", url, "x"), 69, "%s", err);
    cr_expect_lt(test_now_ms() - t0, 3000, "redis:// to a TLS port: %lld ms", test_now_ms() - t0);
    cr_expect_str_eq(out, "");
    cr_log_info("redis:// to a TLS port: %s", err);
}

/* rediss-sentinel://: the sentinel and the master it names, both over TLS. */
Test(inspect, tls_sentinel_url_inspects_the_master, .timeout = 60) {
    char url[160], out[4096], err[1024], want[256];
    hilock_client *c;

    tls_start(1, "no");
    cr_assert_eq(test_tls_sentinel_start(&tls_sent, &certs, "tlsmaster", tls_srv[0].tls_port), 0);
    c = lockenv_client_url(&env, tls_srv[0].r.url, 0);
    hold_mutex(&env, c, "ts");
    snprintf(url, sizeof(url), "rediss-sentinel://127.0.0.1:%d#tlsmaster", tls_sent.tls_port);
    cr_assert_eq(INSPECT(out, err, "-u", url, "--cacert", certs.ca, "--json", "ts"), 0, "stderr: %s", err);
    snprintf(want, sizeof(want), "{\"name\": \"ts\", \"kind\": \"mutex\", \"server\": \"127.0.0.1:%d\", \"held\": true",
             tls_srv[0].tls_port);
    cr_assert_not_null(strstr(out, want), "want %s in %s", want, out);
    /* The sentinel's own certificate is checked too. */
    expect_refused("is refused", ARGS("-u", url, "--cacert", certs.other_ca, "ts"));
    hilock_client_free(c);
}

static int cluster_state_ok(const test_redis *r) {
    redisReply *rep = test_redis_cmd(r, "CLUSTER INFO");
    int ok = rep != NULL && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "cluster_state:ok") != NULL;
    if (rep) freeReplyObject(rep);
    return ok;
}

/* A cluster over TLS, of one master with every slot (tls-cluster: CLUSTER
 * SLOTS names its TLS port to a TLS client): the seed and the node found
 * from CLUSTER SLOTS are both TLS connections. */
Test(inspect, tls_cluster_nodes_from_cluster_slots, .timeout = 30) {
    test_redis *r = &tls_srv[0].r;
    char tport[16], url[64], out[4096], err[1024], want[160];
    redisReply *rep;

    cr_assert_eq(test_tls_make(&certs), 0, "openssl could not make the certificates");
    tls_srv[0].tls_port = test_free_port();
    snprintf(tport, sizeof(tport), "%d", tls_srv[0].tls_port);
    cr_assert_eq(test_redis_start(r, 0, "--tls-port", tport, "--tls-cert-file", certs.server_cert,
                                  "--tls-key-file", certs.server_key, "--tls-ca-cert-file", certs.ca,
                                  "--tls-auth-clients", "no", "--tls-cluster", "yes", "--cluster-enabled", "yes",
                                  "--cluster-config-file", "nodes.conf", NULL), 0);
    rep = test_redis_cmd(r, "CLUSTER ADDSLOTSRANGE 0 16383");
    cr_assert(rep != NULL && rep->type == REDIS_REPLY_STATUS, "CLUSTER ADDSLOTSRANGE refused");
    freeReplyObject(rep);
    WAIT_UNTIL(cluster_state_ok(r), 5000);
    cr_assert(cluster_state_ok(r), "the cluster is not ok");
    /* A holder, written as the mutex's script would. */
    cr_assert_eq(test_redis_int(r, "SET %s t0k3n PX 20000", prim_key("tc", "")), -1); /* +OK */
    cr_assert_eq(test_redis_int(r, "SET %s 7", prim_key("tc", ":fence")), -1);
    cr_assert_eq(test_redis_int(r, "EXISTS %s %s", prim_key("tc", ""), prim_key("tc", ":fence")), 2);
    snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", tls_srv[0].tls_port);
    cr_assert_eq(INSPECT(out, err, "-u", url, "--cacert", certs.ca, "--json", "tc"), 0, "stderr: %s", err);
    snprintf(want, sizeof(want), "{\"name\": \"tc\", \"kind\": \"mutex\", \"server\": \"127.0.0.1:%d\", "
             "\"held\": true, \"token\": \"t0k3n\", \"fence\": 7,", tls_srv[0].tls_port);
    cr_assert_not_null(strstr(out, want), "want %s in %s", want, out);
}

/* redlocks://: every master over TLS, one row each. */
Test(inspect, tls_redlocks_url_shows_each_master, .timeout = 60) {
    char plain[160], url[160], out[4096], err[1024], addr[32];
    hilock_client *c;
    cells row;

    tls_start(3, "no");
    snprintf(plain, sizeof(plain), "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", tls_srv[0].r.port,
             tls_srv[1].r.port, tls_srv[2].r.port);
    snprintf(url, sizeof(url), "redlocks://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", tls_srv[0].tls_port,
             tls_srv[1].tls_port, tls_srv[2].tls_port);
    c = lockenv_client_url(&env, plain, 0);
    hold_mutex(&env, c, "rl");
    held_everywhere(&env, (const test_redis *const[]){ &tls_srv[0].r, &tls_srv[1].r, &tls_srv[2].r }, 3, "rl");
    cr_assert_eq(INSPECT(out, err, "-u", url, "--cacert", certs.ca, "rl"), 0, "stderr: %s", err);
    cr_assert_eq(lines(out), 4, "a row per master: %s", out);
    for (int i = 0; i < 3; i++) {
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", tls_srv[i].tls_port);
        cr_assert(row_of(out, "rl", addr, &row), "no row for %s: %s", addr, out);
        cr_assert_str_eq(row.f[3], "held", "%s", out);
    }
    hilock_client_free(c);
}

#endif
