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
 * reply of that acquire (and msg: to the release message's arrival, the
 * first half of it). Two variants:
 *   self_sub 1  both processes stay subscribed, so the releaser also gets
 *               its own release message (hilock's steady state: the
 *               subscription lingers after the last local waiter leaves);
 *   self_sub 0  only the waiting process is subscribed (it subscribes
 *               before its first try and unsubscribes once it holds the
 *               lock, both off the measured path).
 * And the same for the fair lock (floor_measure with fair 1, self_sub 1):
 * its scripts; the waiting process's try joins the queue, and the release
 * message that names its token is the grant (latency = the release call to
 * that message), with no command after it. Each process listens on its own
 * channel of grants (the name's, followed by its client's id, which is the
 * first 16 characters of its token), as hilock's clients do, so the
 * releaser gets no copy of a grant. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "hilock/hilock.h"
#include "prim/prim.h" /* hl_script_{mutex,fair}_{acquire,release} */

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
    uint64_t msg[FL_MAX];        /* the release call to the message's arrival */
};

/* The lock's keys; fair: the fair lock's (its queue and processes too),
 * whose release message is the grant. */
struct fl_keys {
    int fair;
    char lock[136], fence[144], ch[144], queue[144], procs[144];
};

static redisReply *fl_script(redisContext *c, int release, const struct fl_keys *k,
                             const char *token) {
    if (k->fair && !release)
        return redisCommand(c, "EVALSHA %s 4 %s %s %s %s %s 30000 604800 0 %s PUBLISH",
                            hl_script_fair_acquire.sha, k->lock, k->queue, k->procs, k->fence, token,
                            k->ch);
    if (k->fair)
        return redisCommand(c, "EVALSHA %s 4 %s %s %s %s %s 604800 %s PUBLISH", hl_script_fair_release.sha,
                            k->lock, k->queue, k->procs, k->fence, token, k->ch);
    if (!release)
        return redisCommand(c, "EVALSHA %s 2 %s %s %s 30000 604800", hl_script_mutex_acquire.sha,
                            k->lock, k->fence, token);
    return redisCommand(c, "EVALSHA %s 1 %s %s %s h PUBLISH", hl_script_mutex_release.sha, k->lock, token,
                        k->ch);
}

/* 1 acquired, 0 held by another, -1 error */
static int fl_acquire(redisContext *c, const struct fl_keys *k, const char *token) {
    redisReply *r = fl_script(c, 0, k, token);
    int got = -1;
    if (r && r->type == REDIS_REPLY_INTEGER) got = r->integer > 0; /* the mutex's grant: its fence */
    else if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2) got = r->element[0]->integer == 1;
    if (r) freeReplyObject(r);
    return got;
}

/* Read one message: 1 if it grants `token` by name (the fair lock's
 * "g TOKEN ..."), else 0; -1 on error. */
static int fl_read_sub(redisContext *sub, const char *token) {
    void *m = NULL;
    if (redisGetReply(sub, &m) != REDIS_OK) return -1;
    redisReply *r = m;
    size_t n = strlen(token);
    int named = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                r->element[2]->type == REDIS_REPLY_STRING && r->element[2]->len > n + 2 &&
                memcmp(r->element[2]->str, "g ", 2) == 0 && memcmp(r->element[2]->str + 2, token, n) == 0;
    freeReplyObject(m);
    return named;
}

static void fl_wait(volatile int *v, int want, volatile int *errors) {
    while (*v != want && *errors == 0) usleep(20);
}

static int fl_child(struct fl_shm *s, int me, int self_sub, const struct fl_keys *k) {
    redisContext *cmd = sync_connect(), *sub = sync_connect();
    if (cmd == NULL || sub == NULL) { s->errors++; return 1; }
    char token[40]; /* as hilock's: its first 16 characters name the process */
    snprintf(token, sizeof token, "%016lx%016x", (unsigned long)getpid(), (unsigned)me);
    char ch[sizeof k->ch + 16];
    snprintf(ch, sizeof ch, "%s%.*s", k->ch, k->fair ? 16 : 0, token);
    int subscribed = 0;
    if (self_sub) {
        redisReply *r = redisCommand(sub, "SUBSCRIBE %s", ch);
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
                redisReply *r = fl_script(cmd, 1, k, token);
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
            redisReply *r = fl_script(cmd, 1, k, token);
            int ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
            if (r) freeReplyObject(r);
            if (!ok) { s->errors++; break; }
            if (subscribed && !k->fair && fl_read_sub(sub, token) != 0) { s->errors++; break; } /* our own message */
            fl_wait(&s->holder, 1 - me, &s->errors); /* it is the other's now */
            continue;
        }
        /* Waiting: (subscribe,) try once, block on the subscriber socket. */
        if (s->count >= s->total) break;
        if (!subscribed) {
            redisReply *r = redisCommand(sub, "SUBSCRIBE %s", ch);
            if (r == NULL) { s->errors++; break; }
            freeReplyObject(r);
            subscribed = 1;
        }
        if (fl_acquire(cmd, k, token) != 0) { s->errors++; break; }
        s->t_queued = now_ns();
        s->queued = 1;
        /* Blocks until the release; the fair lock's message is the grant. */
        int named = fl_read_sub(sub, token);
        uint64_t t_msg = now_ns();
        int got = k->fair ? named : named == 0 ? fl_acquire(cmd, k, token) : -1;
        uint64_t t = now_ns();
        if (got != 1) { s->errors++; break; }
        if (s->nlat < FL_MAX) {
            s->msg[s->nlat] = t_msg - s->t_release;
            s->lat[s->nlat++] = t - s->t_release;
        }
        s->count++;
        if (!self_sub) {
            redisReply *r = redisCommand(sub, "UNSUBSCRIBE %s", ch);
            if (r) freeReplyObject(r);
            subscribed = 0;
        }
        s->holder = me;
    }
    redisFree(cmd);
    redisFree(sub);
    return s->errors ? 1 : 0;
}

/* Run the floor; the shared memory with the sorted latencies (the caller
 * frees it) or NULL; *rcode is 0 when every handoff was made. */
static struct fl_shm *fl_run(int handoffs, int self_sub, int fair, int *rcode) {
    *rcode = 1;
    if (handoffs > FL_MAX) handoffs = FL_MAX;
    redisContext *rc = sync_connect();
    if (rc == NULL) return NULL;
    const hl_script *scripts[] = {&hl_script_mutex_acquire, &hl_script_mutex_release,
                                  &hl_script_fair_acquire, &hl_script_fair_release};
    for (int i = 0; i < 4; i++) {
        redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", scripts[i]->body);
        int ok = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, scripts[i]->sha) == 0;
        if (r) freeReplyObject(r);
        if (!ok) { redisFree(rc); return NULL; }
    }
    struct fl_keys k;
    char name[64], base[128];
    snprintf(name, sizeof name, "hb-floor:%ld:%d:%d", (long)getpid(), self_sub, fair);
    if (hilock_key("hilock:", name, base, sizeof base) < 0) { redisFree(rc); return NULL; }
    k.fair = fair;
    snprintf(k.lock, sizeof k.lock, "%s%s", base, fair ? ":fair" : "");
    snprintf(k.fence, sizeof k.fence, "%s:fence", k.lock);
    snprintf(k.ch, sizeof k.ch, "%s:ch%s", k.lock, fair ? ":" : "");
    snprintf(k.queue, sizeof k.queue, "%s:q", k.lock);
    snprintf(k.procs, sizeof k.procs, "%s:p", k.lock);

    struct fl_shm *s = shm_alloc(sizeof *s);
    if (s == NULL) { redisFree(rc); return NULL; }
    s->total = handoffs;
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        pids[i] = fork_child();
        if (pids[i] == 0) _exit(fl_child(s, i, self_sub, &k));
    }
    int st0 = wait_child(pids[0], 60000 + handoffs * 30);
    if (st0 != 0) s->errors++; /* the other one must not wait forever */
    int st1 = wait_child(pids[1], 5000 + handoffs * 30);
    redisReply *r = fair ? redisCommand(rc, "DEL %s %s %s %s", k.lock, k.fence, k.queue, k.procs)
                         : redisCommand(rc, "DEL %s %s", k.lock, k.fence);
    if (r) freeReplyObject(r);
    redisFree(rc);

    sort_u64(s->lat, (size_t)s->nlat);
    sort_u64(s->msg, (size_t)s->nlat);
    *rcode = st0 == 0 && st1 == 0 && s->errors == 0 && s->nlat == handoffs ? 0 : 1;
    return s;
}

int floor_measure(int handoffs, int fair, floor_result *out) {
    int rc;
    struct fl_shm *s = fl_run(handoffs, 1, fair, &rc);
    memset(out, 0, sizeof *out);
    if (s == NULL) return 1;
    size_t n = (size_t)s->nlat;
    out->p50 = (double)pct_u64(s->lat, n, 50) / 1000.0;
    out->msg50 = (double)pct_u64(s->msg, n, 50) / 1000.0;
    out->handoffs = (int)n;
    out->errors = s->errors + (rc != 0 && s->errors == 0);
    shm_free(s, sizeof *s);
    return rc;
}

int scenario_floor(int handoffs, int self_sub, double *p50_out) {
    int rcode; /* the mutex's (the fair lock's: floor_measure, in fair_handoff) */
    struct fl_shm *s = fl_run(handoffs, self_sub, 0, &rcode);
    if (s == NULL) return 1;
    size_t n = (size_t)s->nlat;
    double p50 = (double)pct_u64(s->lat, n, 50) / 1000.0;
    double msg50 = (double)pct_u64(s->msg, n, 50) / 1000.0;
    json_begin("handoff_floor");
    json_str("client", self_sub ? "blocking-hiredis" : "blocking-hiredis-nosub");
    json_int("self_sub", self_sub);
    json_num("p50_us", p50, 1);
    json_num("p90_us", (double)pct_u64(s->lat, n, 90) / 1000.0, 1);
    json_num("p99_us", (double)pct_u64(s->lat, n, 99) / 1000.0, 1);
    json_num("message_p50_us", msg50, 1);
    json_int("handoffs", (long long)n);
    json_str("hold_ms", "1..11 uniform");
    json_int("errors", s->errors);
    json_end();
    if (p50_out) *p50_out = p50;
    if (self_sub) write_latencies("floor", s->lat, n);
    shm_free(s, sizeof *s);
    return rcode;
}
