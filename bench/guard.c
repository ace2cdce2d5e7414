/* The guarded write (scenario "guarded_write"): hilock_hold_eval's round
 * trip and Redis's time per call, beside a plain EVALSHA of the same
 * script on a hiredis async connection of the same loop, alternated in
 * blocks (-r, 5; each `GW_CALLS` calls one at a time, 500 with -q). The
 * script is INCR of a key in the lock's slot: what the guard adds is one
 * GET of the lock and its comparison, and the caller's KEYS and ARGV moved
 * into the script's own tables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>

#include "bench.h"
#include "hilock/hilock.h"

#define GW_CALLS 5000
#define GW_BLOCKS_MAX SERIES_MAX
static const char INCR[] = "return redis.call('INCR', KEYS[1])";

typedef struct gw_run {
    struct event_base *base;
    int done, left, errors;
    uint64_t sent_ns;
    uint64_t *rtt;
    int n;
    /* the guarded side */
    hilock_hold *hold;
    hilock_script *script;
    const char *key;
    /* the plain side */
    redisAsyncContext *ac;
    char sha[41];
} gw_run;

static void gw_next(gw_run *r, int guarded);

static void gw_took(gw_run *r, int ok, int guarded) {
    r->rtt[r->n++] = now_ns() - r->sent_ns;
    if (!ok) r->errors++;
    if (--r->left == 0) r->done = 1;
    else gw_next(r, guarded);
}

static void on_guarded(int status, const struct redisReply *reply, void *data) {
    (void)reply;
    gw_took(data, status == 0, 1);
}

static void on_plain(redisAsyncContext *ac, void *reply, void *data) {
    (void)ac;
    const redisReply *rep = reply;
    gw_took(data, rep != NULL && rep->type == REDIS_REPLY_INTEGER, 0);
}

static void gw_next(gw_run *r, int guarded) {
    const char *keys[] = {r->key};
    r->sent_ns = now_ns();
    int rc = guarded ? hilock_hold_eval(r->hold, r->script, 1, keys, 0, NULL, NULL, on_guarded, r)
                     : redisAsyncCommand(r->ac, on_plain, r, "EVALSHA %s 1 %s", r->sha, r->key) ==
                               REDIS_OK ? 0 : -1;
    if (rc != 0) {
        r->errors++;
        r->done = 1;
    }
}

/* One block of one side: its p50 (us) and Redis's time per call (us). */
static int gw_block(gw_run *r, redisContext *side, int guarded, int calls, double *p50,
                    double *redis_us) {
    static const char *const evalsha[] = {"evalsha", NULL};
    cmdstats before, after;
    if (cmdstats_get(side, &before) != 0) return -1;
    r->done = 0;
    r->left = calls;
    r->n = 0;
    gw_next(r, guarded);
    loop_until(r->base, &r->done, 60000);
    if (!r->done || r->n != calls || cmdstats_get(side, &after) != 0) return -1;
    sort_u64(r->rtt, (size_t)r->n);
    *p50 = (double)pct_u64(r->rtt, (size_t)r->n, 50) / 1000.0;
    long long n = cmdstats_delta(&before, &after, evalsha);
    *redis_us = n > 0 ? (double)cmdstats_usec_delta(&before, &after, evalsha) / (double)n : 0;
    return 0;
}

static void on_acquired(hilock_hold *h, int status, void *data) {
    gw_run *r = data;
    r->hold = status == 0 ? h : NULL;
    r->done = 1;
}

/* The client, its hold and key, the script; the plain connection and its
 * script loaded. 0 or -1. */
static int gw_open(gw_run *r, hilock_client **c, redisContext *side, char *key, size_t keylen) {
    if ((*c = bench_hilock_client(r->base, &g_standalone)) == NULL) return -1;
    r->done = 0;
    if (hilock_acquire(*c, "bench-guarded-write", NULL, on_acquired, r, NULL) != 0) return -1;
    loop_until(r->base, &r->done, 10000);
    if (r->hold == NULL || hilock_hold_key(r->hold, "n", key, keylen) < 0) return -1;
    r->key = key;
    if (hilock_script_new(&r->script, INCR) != 0) return -1;
    redisReply *rep = redisCommand(side, "SCRIPT LOAD %s", INCR);
    int ok = rep && rep->type == REDIS_REPLY_STRING && rep->len == 40;
    if (ok) memcpy(r->sha, rep->str, 41);
    if (rep) freeReplyObject(rep);
    r->ac = redisAsyncConnect(g_standalone.node[0].host, g_standalone.node[0].port);
    if (!ok || r->ac == NULL || r->ac->err || redisLibeventAttach(r->ac, r->base) != REDIS_OK) return -1;
    return 0;
}

int scenario_guarded_write(void) {
    int blocks = g_opts.reps < 1 ? 1 : g_opts.reps > GW_BLOCKS_MAX ? GW_BLOCKS_MAX : g_opts.reps;
    int calls = g_opts.quick ? 500 : GW_CALLS;
    double g50[GW_BLOCKS_MAX], p50[GW_BLOCKS_MAX], gus[GW_BLOCKS_MAX], pus[GW_BLOCKS_MAX];
    double lat_ratio[GW_BLOCKS_MAX], redis_ratio[GW_BLOCKS_MAX];
    char key[512];
    gw_run r;
    memset(&r, 0, sizeof(r));
    hilock_client *c = NULL;
    redisContext *side = sync_connect();
    r.base = base_new();
    r.rtt = malloc(sizeof(*r.rtt) * (size_t)calls);
    int n = 0, failed = side == NULL || r.base == NULL || r.rtt == NULL ||
                        gw_open(&r, &c, side, key, sizeof(key)) != 0;
    for (int b = 0; b < blocks && !failed; b++) {
        /* Each side first in turn: neither always runs on a warmer server. */
        int first = b % 2;
        double x[2][2];
        for (int s = 0; s < 2 && !failed; s++) {
            int guarded = s == first;
            failed = gw_block(&r, side, guarded, calls, &x[guarded][0], &x[guarded][1]) != 0;
        }
        if (failed) break;
        g50[n] = x[1][0], gus[n] = x[1][1], p50[n] = x[0][0], pus[n] = x[0][1];
        lat_ratio[n] = p50[n] > 0 ? g50[n] / p50[n] : 0;
        redis_ratio[n] = pus[n] > 0 ? gus[n] / pus[n] : 0;
        n++;
    }
    if (r.ac) redisAsyncFree(r.ac);
    if (r.hold) {
        r.done = 0;
        hilock_release(r.hold, NULL, NULL);
        loop_until(r.base, &r.done, 200);
    }
    if (c) hilock_client_free(c);
    hilock_script_free(r.script);
    if (side) {
        delete_keys(side, "hilock:{bench-guarded-write}*");
        redisFree(side);
    }
    if (r.base) event_base_free(r.base);
    free(r.rtt);
    if (failed || n == 0 || r.errors) {
        fprintf(stderr, "  guarded_write: failed (%d errors)\n", r.errors);
        return 1;
    }
    json_begin("guarded_write");
    json_int("calls_per_block", calls);
    json_int("blocks", n);
    json_num("guarded_p50_us", median_d(g50, (size_t)n), 1);
    json_num("plain_p50_us", median_d(p50, (size_t)n), 1);
    json_num("latency_ratio", median_d(lat_ratio, (size_t)n), 3);
    json_num("guarded_redis_us", median_d(gus, (size_t)n), 2);
    json_num("plain_redis_us", median_d(pus, (size_t)n), 2);
    json_num("redis_ratio", median_d(redis_ratio, (size_t)n), 3);
    json_end();
    fprintf(stderr, "  guarded write p50 %.1f us vs plain EVALSHA %.1f us (%.3fx); Redis %.2f vs "
            "%.2f us per call (%.3fx)\n", median_d(g50, (size_t)n), median_d(p50, (size_t)n),
            median_d(lat_ratio, (size_t)n), median_d(gus, (size_t)n), median_d(pus, (size_t)n),
            median_d(redis_ratio, (size_t)n));
    return 0;
}
