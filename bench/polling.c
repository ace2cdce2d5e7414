/* The polling baseline: the classic Redis lock recipe, non-blocking.
 *
 *   acquire: SET key token NX PX lease; if the lock is taken, try again in
 *            10 ms (a timer per waiter), until it is ours;
 *   release: EVALSHA of "if GET key == token then DEL key", so that a
 *            holder never deletes someone else's lock.
 *
 * It runs on the same libevent loop and hiredis async connection as hilock,
 * so that the difference measured is the wakeup design (pub/sub and one try
 * per process vs. every waiter polling), not the language or the library.
 * The same recipe is what npm's redis-semaphore Mutex does (retryInterval
 * 10 ms by default). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>

#include "bench.h"

#define PL_RETRY_US 10000
#define PL_LEASE_MS 30000

static const char pl_release_lua[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end "
    "return 0";

typedef struct pl_req pl_req;

typedef struct pl_client {
    struct event_base *base;
    redisAsyncContext *ac;
    char sha[48];
    unsigned long long seq;
    int closing;
    pl_req *reqs; /* every live request, to free them with the client */
} pl_client;

struct pl_req {
    pl_req *prev, *next;
    pl_client *c;
    bench_waiter *w;
    struct event *retry;
    int held;
    char key[300];
    char token[48];
};

static void req_unlink_free(pl_req *r) {
    pl_client *c = r->c;
    if (r->prev) r->prev->next = r->next;
    else c->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    if (r->retry) event_free(r->retry);
    free(r);
}

static void send_set(pl_req *r);

static void on_set(redisAsyncContext *ac, void *reply_, void *data) {
    pl_req *r = data;
    redisReply *reply = reply_;
    (void)ac;
    if (reply == NULL || r->c->closing) return; /* the client is going away */
    if (reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0) {
        r->held = 1;
        r->w->acquired(r->w, r, 0);
    } else if (reply->type == REDIS_REPLY_NIL) {
        struct timeval tv = {0, PL_RETRY_US};
        evtimer_add(r->retry, &tv);
    } else {
        fprintf(stderr, "polling: SET: unexpected reply (type %d %s)\n", reply->type,
                reply->type == REDIS_REPLY_ERROR ? reply->str : "");
        bench_waiter *w = r->w;
        req_unlink_free(r);
        w->acquired(w, NULL, -1);
    }
}

static void send_set(pl_req *r) {
    redisAsyncCommand(r->c->ac, on_set, r, "SET %s %s NX PX %d", r->key, r->token, PL_LEASE_MS);
}

static void on_retry(evutil_socket_t fd, short what, void *data) {
    (void)fd; (void)what;
    send_set(data);
}

static void on_del(redisAsyncContext *ac, void *reply_, void *data) {
    pl_req *r = data;
    redisReply *reply = reply_;
    (void)ac;
    if (reply == NULL || r->c->closing) return;
    int status = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1 ? 0 : -1;
    bench_waiter *w = r->w;
    req_unlink_free(r);
    if (w->released) w->released(w, status);
}

static void on_connect(const redisAsyncContext *ac, int status) {
    if (status != REDIS_OK) fprintf(stderr, "polling: connect: %s\n", ac->errstr);
}

static void *pl_client_new(struct event_base *base, const bench_target *t) {
    pl_client *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->base = base;
    /* One server: the key's node is node[0] (the baseline is not run on a
     * cluster). */
    redisContext *rc = node_connect(t->node[0].host, t->node[0].port);
    if (rc == NULL) { free(c); return NULL; }
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", pl_release_lua);
    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "polling: SCRIPT LOAD failed\n");
        if (r) freeReplyObject(r);
        redisFree(rc);
        free(c);
        return NULL;
    }
    snprintf(c->sha, sizeof c->sha, "%s", r->str);
    freeReplyObject(r);
    redisFree(rc);
    c->ac = redisAsyncConnect(t->node[0].host, t->node[0].port);
    if (c->ac == NULL || c->ac->err) {
        fprintf(stderr, "polling: connect failed\n");
        free(c);
        return NULL;
    }
    redisLibeventAttach(c->ac, base);
    redisAsyncSetConnectCallback(c->ac, on_connect);
    return c;
}

static void pl_client_free(void *c_) {
    pl_client *c = c_;
    c->closing = 1;
    if (c->ac) redisAsyncFree(c->ac); /* runs pending callbacks with NULL */
    while (c->reqs) req_unlink_free(c->reqs);
    free(c);
}

static int pl_acquire(void *c_, const char *name, bench_waiter *w) {
    pl_client *c = c_;
    pl_req *r = calloc(1, sizeof *r);
    if (r == NULL) return -1;
    r->c = c;
    r->w = w;
    r->retry = evtimer_new(c->base, on_retry, r);
    snprintf(r->key, sizeof r->key, "pl:{%s}", name);
    snprintf(r->token, sizeof r->token, "%ld-%llu", (long)getpid(), ++c->seq);
    r->next = c->reqs;
    if (c->reqs) c->reqs->prev = r;
    c->reqs = r;
    send_set(r);
    return 0;
}

static int pl_release(void *c_, void *hold, bench_waiter *w) {
    pl_client *c = c_;
    pl_req *r = hold;
    r->w = w;
    redisAsyncCommand(c->ac, on_del, r, "EVALSHA %s 1 %s %s", c->sha, r->key, r->token);
    return 0;
}

static const char *const pl_commands[] = {"set", "evalsha", "eval", NULL};

const lock_impl polling_impl = {
    "polling", pl_commands, pl_client_new, pl_client_free, pl_acquire, pl_release, NULL,
};
