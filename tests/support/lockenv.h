/* Shared set-up for the library's integration tests: a real redis-server,
 * a libevent loop, clients, and a look at Redis's own counters. */
#ifndef HILOCK_TEST_LOCKENV_H
#define HILOCK_TEST_LOCKENV_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hilock/hilock.h"
#include <hilock/adapters/libevent.h>
#include "support/harness.h"
#include "support/sentinelenv.h"

typedef struct lockenv {
    test_redis r;
    struct event_base *base;
    hilock_loop loop;
} lockenv;

static inline void lockenv_loop(lockenv *e) {
    e->base = event_base_new();
    cr_assert_not_null(e->base);
    hilock_libevent_init(&e->loop, e->base);
}

/* In a forked child: the parent's server, a fresh loop (libevent's state
 * must not be shared across fork). */
static inline lockenv lockenv_child(const lockenv *parent) {
    lockenv c = *parent;
    lockenv_loop(&c);
    return c;
}

static inline void lockenv_start(lockenv *e) {
    cr_assert_eq(test_redis_start(&e->r, 0, NULL), 0, "redis-server did not start");
    lockenv_loop(e);
}

/* The same, with DEBUG enabled on the server (DEBUG SLEEP stalls). */
static inline void lockenv_start_debuggable(lockenv *e) {
    cr_assert_eq(test_redis_start_debuggable(&e->r, 0), 0, "redis-server did not start");
    lockenv_loop(e);
}

/* A suite under Sentinel: a loop, and s (a master, its replica, three
 * sentinels) started; e's own server is not. */
static inline void lockenv_start_sentinels(lockenv *e, test_sentinel *s) {
    memset(s, 0, sizeof(*s));
    lockenv_loop(e);
    cr_assert_eq(test_sentinel_start(s), 0, "the sentinels did not start");
}

static inline void lockenv_stop_sentinels(lockenv *e, test_sentinel *s) {
    test_sentinel_stop(s);
    if (e->base) event_base_free(e->base);
    e->base = NULL;
}

static inline void lockenv_stop(lockenv *e) {
    test_redis_stop(&e->r);
    if (e->base) event_base_free(e->base);
    e->base = NULL;
}

/* A config with short timings suited to tests. */
static inline void lockenv_config(hilock_config *cfg, const char *url) {
    hilock_config_init(cfg);
    cfg->url = url;
    cfg->request_timeout_ms = 1000;
    cfg->connect_timeout_ms = 1000;
    cfg->linger_ms = 100;
}

static inline hilock_client *lockenv_client_cfg(lockenv *e, const hilock_config *cfg) {
    hilock_client *c = NULL;
    cr_assert_eq(hilock_client_new(&c, cfg, &e->loop), 0);
    return c;
}

/* A client with short timings suited to tests. */
static inline hilock_client *lockenv_client_url(lockenv *e, const char *url, uint32_t linger_ms) {
    hilock_config cfg;
    lockenv_config(&cfg, url);
    if (linger_ms) cfg.linger_ms = linger_ms;
    return lockenv_client_cfg(e, &cfg);
}

/* A client of e's server whose waits starve (take a place in the queue)
 * after starve_ms (HILOCK_STARVE_NEVER: they always race). */
static inline hilock_client *lockenv_client_starving(lockenv *e, uint32_t starve_ms) {
    hilock_config cfg;
    lockenv_config(&cfg, e->r.url);
    cfg.starve_ms = starve_ms;
    return lockenv_client_cfg(e, &cfg);
}

static inline hilock_client *lockenv_client(lockenv *e) {
    return lockenv_client_url(e, e->r.url, 0);
}

/* The client's statistics now (hilock_client_stats). */
static inline hilock_stats stats_of(const hilock_client *c) {
    hilock_stats s;
    hilock_stats_init(&s);
    cr_assert_eq(hilock_client_stats(c, &s), 0);
    return s;
}

/* A field of INFO commandstats, e.g. stat_calls(r, "evalsha"); 0 if absent. */
static inline long long stat_calls(const test_redis *r, const char *cmd) {
    redisContext *k = test_redis_connect(r);
    long long n = 0;
    redisReply *rep = k ? redisCommand(k, "INFO commandstats") : NULL;
    if (rep && rep->type == REDIS_REPLY_STRING) {
        char needle[64];
        snprintf(needle, sizeof(needle), "cmdstat_%s:calls=", cmd);
        const char *p = strstr(rep->str, needle);
        if (p) n = atoll(p + strlen(needle));
    }
    if (rep) freeReplyObject(rep);
    if (k) redisFree(k);
    return n;
}

/* Subscribers of a lock's channel (PUBSUB NUMSUB). */
static inline long long numsub(const test_redis *r, const char *name) {
    char key[HILOCK_NAME_MAX * 3 + 64];
    long long n = -1;
    hilock_key("hilock:", name, key, sizeof(key));
    strcat(key, ":ch");
    redisContext *k = test_redis_connect(r);
    redisReply *rep = k ? redisCommand(k, "PUBSUB NUMSUB %s", key) : NULL;
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2)
        n = rep->element[1]->integer;
    if (rep) freeReplyObject(rep);
    if (k) redisFree(k);
    return n;
}

/* 1 if the lock key of `name` exists. */
static inline long long lock_exists(const test_redis *r, const char *name) {
    char key[HILOCK_NAME_MAX * 3 + 64];
    hilock_key("hilock:", name, key, sizeof(key));
    return test_redis_int(r, "EXISTS %s", key);
}

/* 1 if the mutex lock of `name` carries mark `m` (its value is "TOKEN" or
 * "TOKEN MARKS": 'w', a try found it taken; 'q', a wait may starve). */
static inline int lock_marked(const test_redis *r, const char *name, char m) {
    char key[HILOCK_NAME_MAX * 3 + 64];
    hilock_key("hilock:", name, key, sizeof(key));
    redisReply *v = test_redis_cmd(r, "GET %s", key);
    int marked = v && v->type == REDIS_REPLY_STRING && strchr(v->str + strcspn(v->str, " "), m) != NULL;
    if (v) freeReplyObject(v);
    return marked;
}

/* What a client's log callback said (loglines_keep as cfg.log_cb, the book as
 * cfg.log_data), joined in lines. */
typedef struct loglines {
    char text[8192];
    size_t len;
} loglines;

static inline void loglines_keep(int level, const char *msg, void *data) {
    loglines *b = data;
    (void)level;
    int n = snprintf(b->text + b->len, sizeof(b->text) - b->len, "%s\n", msg);
    if (n > 0 && b->len + (size_t)n < sizeof(b->text)) b->len += (size_t)n;
}

/* A record of one acquire callback. */
typedef struct got {
    int calls;
    int status;
    hilock_hold *hold;
    long long at_ms;
} got;

static inline void got_cb(hilock_hold *h, int status, void *data) {
    got *g = data;
    g->calls++;
    g->status = status;
    g->hold = h;
    g->at_ms = test_now_ms();
}

typedef struct rel {
    int calls;
    int status;
} rel;

static inline void rel_cb(int status, void *data) {
    rel *r = data;
    r->calls++;
    r->status = status;
}

/* A record of a hold's lost callback. */
typedef struct lostrec {
    int calls;
    int why;
    long long at_ms;
} lostrec;

static inline void lost_cb(hilock_hold *h, int why, void *data) {
    lostrec *l = data;
    (void)h;
    l->calls++;
    l->why = why;
    l->at_ms = test_now_ms();
}

/* A record of a fence callback (hilock_check, hilock_revoke). */
typedef struct fencerec {
    int calls;
    int status;
    uint64_t fence;
} fencerec;

static inline void fence_cb(int status, uint64_t fence, void *data) {
    fencerec *r = data;
    r->calls++;
    r->status = status;
    r->fence = fence;
}

/* hilock_check or hilock_revoke of `name`, and base's loop run until its
 * callback came. */
typedef int (*fence_fn)(hilock_client *c, const char *name, hilock_fence_cb cb, void *data);
static inline fencerec fence_call(struct event_base *base, fence_fn fn, hilock_client *c, const char *name) {
    fencerec r = {0, 0, 0};
    cr_assert_eq(fn(c, name, fence_cb, &r), 0);
    test_loop_until(base, &r.calls, 5000);
    cr_assert_eq(r.calls, 1);
    return r;
}

static inline hilock_acquire_opts opts_wait(int64_t wait_ms) {
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.wait_ms = wait_ms;
    return o;
}

/* A wait of wait_ms with a lease of lease_ms (0: the client's default). */
static inline hilock_acquire_opts opts_wait_lease(int64_t wait_ms, uint32_t lease_ms) {
    hilock_acquire_opts o = opts_wait(wait_ms);
    if (lease_ms) o.lease_ms = lease_ms;
    return o;
}

/* Scripts the server ran so far (EVALSHA and EVAL). */
static inline long long script_calls_of(const test_redis *r) {
    return stat_calls(r, "evalsha") + stat_calls(r, "eval");
}

/* The key of primitive NAME under the tests' prefix with `suffix`
 * (":sem", ":fair:q", ...), in one of 4 buffers used in turn. */
static inline const char *prim_key(const char *name, const char *suffix) {
    static char ring[4][HILOCK_NAME_MAX * 3 + 64];
    static int next;
    char *p = ring[next++ % 4];
    hilock_key("hilock:", name, p, HILOCK_NAME_MAX * 3 + 32);
    strcat(p, suffix);
    return p;
}

/* An acquire of one primitive: hilock_acquire, hilock_write_acquire... */
typedef int (*acquire_fn)(hilock_client *c, const char *name, const hilock_acquire_opts *opts,
                          hilock_acquire_cb cb, void *data, hilock_wait **wait_out);

/* Acquire with `fn` and run base's loop until the callback came (or ms). */
static inline got acquire_loop_with(struct event_base *base, acquire_fn fn, hilock_client *c, const char *name,
                                    const hilock_acquire_opts *o, int ms) {
    got g = {0, 0, NULL, 0};
    cr_assert_eq(fn(c, name, o, got_cb, &g, NULL), 0);
    test_loop_until(base, &g.calls, ms);
    cr_assert_eq(g.calls, 1, "acquire of %s got no callback", name);
    return g;
}

/* The mutex's (hilock_acquire). */
static inline got acquire_loop(struct event_base *base, hilock_client *c, const char *name,
                               const hilock_acquire_opts *o, int ms) {
    return acquire_loop_with(base, hilock_acquire, c, name, o, ms);
}

/* Release and run base's loop until the callback came (or ms): its status. */
static inline int release_loop(struct event_base *base, hilock_hold *h, int ms) {
    rel r = {0, 0};
    cr_assert_eq(hilock_release(h, rel_cb, &r), 0);
    test_loop_until(base, &r.calls, ms);
    cr_assert_eq(r.calls, 1);
    return r.status;
}

static inline got acquire_now(lockenv *e, hilock_client *c, const char *name,
                              const hilock_acquire_opts *o) {
    return acquire_loop(e->base, c, name, o, 5000);
}

static inline int release_now(lockenv *e, hilock_hold *h) { return release_loop(e->base, h, 5000); }

#endif
