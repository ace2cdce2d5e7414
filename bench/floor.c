/* The floor of a pub/sub handoff on this machine, measured in the same run:
 * hilock's own scripts and protocol, driven by two processes with blocking
 * hiredis connections and no event loop, no timers, no allocation to speak
 * of. What hilock adds on top of this is hilock's (and libevent's and async
 * hiredis's) overhead; the rest is Redis, the kernel and the machine.
 *
 * Each process has a command connection and a subscriber connection. The
 * waiting process tries once (the try fails: the lock is held), blocks in
 * read() on its subscriber socket, and on the release message runs the
 * acquire script again: latency = the other process's release call to the
 * reply of that acquire. Two variants:
 *   self_sub 1  both processes stay subscribed, so the releaser also gets
 *               its own release message (hilock's steady state: the
 *               subscription lingers after the last local waiter leaves);
 *   self_sub 0  only the waiting process is subscribed (it subscribes
 *               before its first try and unsubscribes once it holds the
 *               lock, both off the measured path). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "hilock/hilock.h"
#include "prim/prim.h" /* hl_script_mutex_acquire, hl_script_mutex_release */

#define FL_MAX 4000

struct fl_shm {
    volatile int holder;         /* the process that holds the lock */
    volatile int queued;         /* the waiting process has tried once and is blocked */
    volatile uint64_t t_queued;
    volatile uint64_t t_release;
    volatile int count;
    volatile int errors;
    volatile int ready;
    int total;
    int nlat;
    uint64_t lat[FL_MAX];
};

struct fl_keys {
    char lock[128], fence[136], ch[136];
};

static redisReply *fl_script(redisContext *c, const hl_script *s, const struct fl_keys *k,
                             const char *token) {
    if (s == &hl_script_mutex_acquire)
        return redisCommand(c, "EVALSHA %s 2 %s %s %s 30000 604800", s->sha, k->lock, k->fence, token);
    return redisCommand(c, "EVALSHA %s 1 %s %s %s PUBLISH", s->sha, k->lock, token, k->ch);
}

/* 1 acquired, 0 held by another, -1 error */
static int fl_acquire(redisContext *c, const struct fl_keys *k, const char *token) {
    redisReply *r = fl_script(c, &hl_script_mutex_acquire, k, token);
    int got = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2) got = r->element[0]->integer == 1;
    if (r) freeReplyObject(r);
    return got;
}

static int fl_read_sub(redisContext *sub) {
    void *m = NULL;
    if (redisGetReply(sub, &m) != REDIS_OK) return -1;
    freeReplyObject(m);
    return 0;
}

static void fl_wait(volatile int *v, int want, volatile int *errors) {
    while (*v != want && *errors == 0) usleep(20);
}

static int fl_child(struct fl_shm *s, int me, int self_sub, const struct fl_keys *k) {
    redisContext *cmd = sync_connect(), *sub = sync_connect();
    if (cmd == NULL || sub == NULL) { s->errors++; return 1; }
    char token[40];
    snprintf(token, sizeof token, "floor-%d-%ld", me, (long)getpid());
    int subscribed = 0;
    if (self_sub) {
        redisReply *r = redisCommand(sub, "SUBSCRIBE %s", k->ch);
        if (r == NULL) { s->errors++; return 1; }
        freeReplyObject(r);
        subscribed = 1;
    }
    if (me == 0 && fl_acquire(cmd, k, token) != 1) { s->errors++; return 1; }
    __atomic_add_fetch(&s->ready, 1, __ATOMIC_SEQ_CST);
    while (s->ready < 2 && s->errors == 0) usleep(100);
    while (s->errors == 0) {
        if (s->holder == me) {
            if (s->count >= s->total) { /* the last one: give it back, done */
                redisReply *r = fl_script(cmd, &hl_script_mutex_release, k, token);
                if (r) freeReplyObject(r);
                break;
            }
            /* Wait until the other has queued, hold 1..11 ms (and at least
             * 1 ms after it queued), release. */
            fl_wait(&s->queued, 1, &s->errors);
            usleep((useconds_t)(1000 + rnd(10000)));
            while (now_ns() - s->t_queued < 1000000u) usleep(50);
            s->queued = 0;
            s->t_release = now_ns();
            redisReply *r = fl_script(cmd, &hl_script_mutex_release, k, token);
            int ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
            if (r) freeReplyObject(r);
            if (!ok) { s->errors++; break; }
            if (subscribed && fl_read_sub(sub) != 0) { s->errors++; break; } /* our own message */
            fl_wait(&s->holder, 1 - me, &s->errors); /* it is the other's now */
            continue;
        }
        /* Waiting: (subscribe,) try once, block on the subscriber socket. */
        if (s->count >= s->total) break;
        if (!subscribed) {
            redisReply *r = redisCommand(sub, "SUBSCRIBE %s", k->ch);
            if (r == NULL) { s->errors++; break; }
            freeReplyObject(r);
            subscribed = 1;
        }
        if (fl_acquire(cmd, k, token) != 0) { s->errors++; break; }
        s->t_queued = now_ns();
        s->queued = 1;
        if (fl_read_sub(sub) != 0) { s->errors++; break; } /* blocks until the release */
        int got = fl_acquire(cmd, k, token);
        uint64_t t = now_ns();
        if (got != 1) { s->errors++; break; }
        if (s->nlat < FL_MAX) s->lat[s->nlat++] = t - s->t_release;
        s->count++;
        if (!self_sub) {
            redisReply *r = redisCommand(sub, "UNSUBSCRIBE %s", k->ch);
            if (r) freeReplyObject(r);
            subscribed = 0;
        }
        s->holder = me;
    }
    redisFree(cmd);
    redisFree(sub);
    return s->errors ? 1 : 0;
}

int scenario_floor(int handoffs, int self_sub, double *p50_out) {
    if (handoffs > FL_MAX) handoffs = FL_MAX;
    redisContext *rc = sync_connect();
    if (rc == NULL) return 1;
    const hl_script *scripts[] = {&hl_script_mutex_acquire, &hl_script_mutex_release};
    for (int i = 0; i < 2; i++) {
        redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", scripts[i]->body);
        int ok = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, scripts[i]->sha) == 0;
        if (r) freeReplyObject(r);
        if (!ok) { redisFree(rc); return 1; }
    }
    struct fl_keys k;
    char name[64];
    snprintf(name, sizeof name, "hb-floor:%ld:%d", (long)getpid(), self_sub);
    if (hilock_key("hilock:", name, k.lock, sizeof k.lock) < 0) { redisFree(rc); return 1; }
    snprintf(k.fence, sizeof k.fence, "%s:fence", k.lock);
    snprintf(k.ch, sizeof k.ch, "%s:ch", k.lock);

    struct fl_shm *s = shm_alloc(sizeof *s);
    if (s == NULL) { redisFree(rc); return 1; }
    s->total = handoffs;
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        pids[i] = fork_child();
        if (pids[i] == 0) _exit(fl_child(s, i, self_sub, &k));
    }
    int st0 = wait_child(pids[0], 60000 + handoffs * 30);
    if (st0 != 0) s->errors++; /* the other one must not wait forever */
    int st1 = wait_child(pids[1], 5000 + handoffs * 30);
    redisReply *r = redisCommand(rc, "DEL %s %s", k.lock, k.fence);
    if (r) freeReplyObject(r);
    redisFree(rc);

    sort_u64(s->lat, (size_t)s->nlat);
    size_t n = (size_t)s->nlat;
    double p50 = (double)pct_u64(s->lat, n, 50) / 1000.0;
    json_begin("handoff_floor");
    json_str("client", self_sub ? "blocking-hiredis" : "blocking-hiredis-nosub");
    json_int("self_sub", self_sub);
    json_num("p50_us", p50, 1);
    json_num("p90_us", (double)pct_u64(s->lat, n, 90) / 1000.0, 1);
    json_num("p99_us", (double)pct_u64(s->lat, n, 99) / 1000.0, 1);
    json_int("handoffs", (long long)n);
    json_str("hold_ms", "1..11 uniform");
    json_int("errors", s->errors);
    json_end();
    if (p50_out) *p50_out = p50;
    if (self_sub) write_latencies("floor", s->lat, n);
    int rcode = st0 == 0 && st1 == 0 && s->errors == 0 && (int)n == handoffs ? 0 : 1;
    shm_free(s, sizeof *s);
    return rcode;
}
