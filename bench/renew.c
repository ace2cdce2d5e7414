/* The renewals scenario: what keeping many holds costs Redis.
 *
 * One client holds RN_HOLDS mutex names (100,000; 5,000 with -q) on
 * leases of RN_LEASE_MS, and the watchdog renews them. Over a window of
 * RN_WINDOW_MS, once every hold has renewed at least once: Redis's time
 * in the top-level commands (INFO commandstats: a script's time includes
 * its calls) and its CPU (INFO cpu) per renewal, the renewals counted by
 * the client, and per hold and second (a batched hold renews a little
 * more often: up to a twentieth of its lease early). Twice: every hold renewing alone (renew_batch 1), then
 * batched (the default), the same server in the same run.
 *
 * Then the least a batch can cost, on as many keys of the same shape, sent
 * by this program without the library, RN_BATCH keys per script call,
 * paced as the library's batches are: a script that only PEXPIREs each key (no check: what any hold
 * with a lease of its own must cost at the least), and hilock's
 * mutex_renew_many.lua driven the same way. A goal below the first is
 * out of reach of any renewal that keeps each hold's own lease. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hilock/hilock.h>

#include "bench.h"
#include "prim/prim.h" /* hl_script_mutex_renew_many */

#define RN_LEASE_MS 6000   /* renewed every 2 s alone, 1.7-2 s batched */
#define RN_WINDOW_MS 8000  /* four renewals of each hold */

static const char *const top_level[] = {"evalsha", "eval", NULL};

typedef struct rn_state {
    int granted, failed, lost;
    hilock_hold **holds;
} rn_state;

typedef struct rn_slot {
    rn_state *s;
    int i;
} rn_slot;

static void rn_granted(hilock_hold *h, int status, void *data) {
    rn_slot *sl = data;
    if (status == 0) sl->s->holds[sl->i] = h;
    else sl->s->failed++;
    sl->s->granted++;
}

static void rn_lost(hilock_hold *h, int why, void *data) {
    (void)h;
    (void)why;
    ((rn_state *)data)->lost++;
}

static hilock_client *rn_client(struct event_base *base, uint32_t renew_batch) {
    hilock_config cfg;
    hilock_config_init(&cfg);
    cfg.url = g_standalone.url;
    cfg.request_timeout_ms = 10000;
    cfg.renew_batch = renew_batch;
    return bench_hilock_client_cfg(base, &cfg);
}

typedef struct rn_result {
    double us, cpu_us;         /* per renewal */
    double us_hold_s;          /* Redis time per hold and second held */
    long long renewals, scripts;
    int lost;
} rn_result;

/* Hold n names through c, wait until each has renewed, then measure. */
static int rn_measure(struct event_base *base, redisContext *rc, uint32_t renew_batch, int n, rn_result *out) {
    static rn_slot *slots;
    static hilock_hold **holds;
    rn_state s;
    memset(&s, 0, sizeof(s));
    slots = calloc((size_t)n, sizeof(*slots));
    holds = calloc((size_t)n, sizeof(*holds));
    s.holds = holds;
    hilock_client *c = rn_client(base, renew_batch);
    int err = c == NULL || slots == NULL || holds == NULL;
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = RN_LEASE_MS;
    o.wait_ms = 0;
    o.lost_cb = rn_lost;
    o.lost_data = &s;
    for (int i = 0; !err && i < n; i++) {
        char name[48];
        snprintf(name, sizeof name, "hb-rn-%d-%d", (int)getpid(), i);
        slots[i].s = &s;
        slots[i].i = i;
        if (hilock_acquire(c, name, &o, rn_granted, &slots[i], NULL) != 0) err = 1;
        /* Spread the acquisitions over about a second (their renewals fall
         * due apart, as a server's holds do), the loop running. */
        if (i % (n / 100 > 0 ? n / 100 : 1) == 0) event_base_loop(base, EVLOOP_NONBLOCK), usleep(10000);
    }
    while (!err && s.granted < n) event_base_loop(base, EVLOOP_ONCE);
    if (s.failed) err = 1;
    int never = 0;
    if (!err) loop_until(base, &never, RN_LEASE_MS / 3 + 500); /* each has renewed once */
    static cmdstats before, after;
    hilock_stats st0, st1;
    hilock_stats_init(&st0);
    hilock_stats_init(&st1);
    double cpu0 = redis_cpu_seconds(rc);
    if (!err && (cmdstats_get(rc, &before) != 0 || hilock_client_stats(c, &st0) != 0)) err = 1;
    if (!err) loop_until(base, &never, RN_WINDOW_MS);
    double cpu1 = redis_cpu_seconds(rc);
    if (!err && (cmdstats_get(rc, &after) != 0 || hilock_client_stats(c, &st1) != 0)) err = 1;
    if (!err) {
        out->renewals = (long long)(st1.renewals - st0.renewals);
        out->scripts = cmdstats_delta(&before, &after, top_level);
        out->us = out->renewals > 0 ? (double)cmdstats_usec_delta(&before, &after, top_level) / (double)out->renewals : 0;
        out->cpu_us = out->renewals > 0 ? (cpu1 - cpu0) * 1e6 / (double)out->renewals : 0;
        out->us_hold_s = (double)cmdstats_usec_delta(&before, &after, top_level) / n / (RN_WINDOW_MS / 1000.0);
        out->lost = s.lost;
        if (out->renewals <= 0 || s.lost) err = 1;
    }
    if (c) hilock_client_free(c); /* the keys are deleted below */
    char pattern[64];
    snprintf(pattern, sizeof pattern, "hilock:{hb-rn-%d-*", (int)getpid());
    delete_keys(rc, pattern);
    free(slots);
    free(holds);
    return err ? -1 : 0;
}

#define RN_BATCH 100      /* hilock_config.renew_batch's default */
#define RN_PASSES 2

static const char pexpire_only[] =
    "local k, a = KEYS, ARGV for i = 1, #k do redis.call('PEXPIRE', k[i], a[2 * i]) end return 1";

/* n keys hb-rnb-PID-i holding a token, on a long TTL, pipelined. */
static int rn_keys_make(redisContext *rc, int n) {
    int sent = 0, got = 0, err = 0;
    while (got < n && !err) {
        for (; sent < n && sent - got < 1000; sent++)
            redisAppendCommand(rc, "SET hilock:{hb-rnb-%d-%d} 0123456789abcdef0123456789abcdef PX 600000",
                               (int)getpid(), sent);
        for (; got < sent; got++) {
            redisReply *r = NULL;
            if (redisGetReply(rc, (void **)&r) != REDIS_OK || r == NULL || r->type == REDIS_REPLY_ERROR) err = 1;
            if (r) freeReplyObject(r);
        }
    }
    return err ? -1 : 0;
}

/* EVALSHA sha on keys [from, from + RN_BATCH): each key with its token
 * and RN_LEASE_MS, as the library sends a batch. */
static void rn_batch_append(redisContext *rc, const char *sha, int from) {
    static char keys[RN_BATCH][48];
    const char *argv[3 + 3 * RN_BATCH];
    int c = 0;
    argv[c++] = "EVALSHA";
    argv[c++] = sha;
    argv[c++] = "100";
    for (int i = 0; i < RN_BATCH; i++) {
        snprintf(keys[i], sizeof keys[i], "hilock:{hb-rnb-%d-%d}", (int)getpid(), from + i);
        argv[c++] = keys[i];
    }
    for (int i = 0; i < RN_BATCH; i++) {
        argv[c++] = "0123456789abcdef0123456789abcdef";
        argv[c++] = "6000";
    }
    redisAppendCommandArgv(rc, c, argv, NULL);
}

/* The script `body` over n keys (n a multiple of RN_BATCH), RN_BATCH per
 * call, one call at a time, paced as the library's batches come: n
 * renewals every RN_LEASE_MS / 3, twice over. Redis's time and CPU per key
 * renewed. (Sent back to back instead, the same calls cost Redis about
 * half as much: its caches stay warm; the library's renewals are spread
 * out, and so are these.) */
static int rn_scripted(redisContext *rc, const char *body, int n, double *us, double *cpu_us) {
    static cmdstats before, after;
    const char *const evalsha[] = {"evalsha", NULL};
    char sha[48];
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", body);
    int err = r == NULL || r->type != REDIS_REPLY_STRING;
    if (!err) snprintf(sha, sizeof sha, "%s", r->str);
    if (r) freeReplyObject(r);
    if (err || rn_keys_make(rc, n) != 0 || cmdstats_get(rc, &before) != 0) return -1;
    double cpu0 = redis_cpu_seconds(rc);
    int calls = n / RN_BATCH;
    uint64_t every_ns = (uint64_t)RN_LEASE_MS / 3 * 1000000u / (uint64_t)calls, t0 = now_ns();
    for (int k = 0; k < RN_PASSES * calls && !err; k++) {
        uint64_t at = t0 + (uint64_t)k * every_ns, now = now_ns();
        if (at > now) usleep((useconds_t)((at - now) / 1000u));
        rn_batch_append(rc, sha, k % calls * RN_BATCH);
        r = NULL;
        if (redisGetReply(rc, (void **)&r) != REDIS_OK || r == NULL || r->type == REDIS_REPLY_ERROR) err = 1;
        if (r) freeReplyObject(r);
    }
    double cpu1 = redis_cpu_seconds(rc);
    if (err || cmdstats_get(rc, &after) != 0) return -1;
    *us = (double)cmdstats_usec_delta(&before, &after, evalsha) / (double)(RN_PASSES * n);
    *cpu_us = (cpu1 - cpu0) * 1e6 / (double)(RN_PASSES * n);
    char pattern[64];
    snprintf(pattern, sizeof pattern, "hilock:{hb-rnb-%d-*", (int)getpid());
    delete_keys(rc, pattern);
    return 0;
}

int scenario_renewals(void) {
    int n = g_opts.quick ? 5000 : 100000;
    redisContext *rc = sync_connect();
    struct event_base *base = base_new();
    rn_result alone, batched;
    int errors = 0;
    if (rc == NULL || base == NULL || rn_measure(base, rc, 1, n, &alone) != 0 ||
        rn_measure(base, rc, 0, n, &batched) != 0) {
        fprintf(stderr, "renewals: the window failed\n");
        errors = 1;
    }
    for (int k = 0; !errors && k < 2; k++) {
        const rn_result *r = k ? &batched : &alone;
        json_begin("renewals");
        json_str("mode", k ? "batched" : "alone");
        json_int("holds", n);
        json_int("lease_ms", RN_LEASE_MS);
        json_int("renewals", r->renewals);
        json_num("renewals_per_script", r->scripts > 0 ? (double)r->renewals / (double)r->scripts : 0, 1);
        json_num("redis_us_per_renewal", r->us, 3);
        json_num("redis_cpu_us_per_renewal", r->cpu_us, 3);
        json_num("redis_us_per_hold_second", r->us_hold_s, 3);
        if (k) {
            json_num("per_hold_second_over_alone", alone.us_hold_s > 0 ? r->us_hold_s / alone.us_hold_s : 0, 3);
            json_num("us_over_alone", alone.us > 0 ? r->us / alone.us : 0, 3);
            json_num("cpu_over_alone", alone.cpu_us > 0 ? r->cpu_us / alone.cpu_us : 0, 3);
        }
        json_end();
        fprintf(stderr, "  renewals %-8s %d holds: %lld renewals in %lld scripts, %.2f us each "
                "(CPU %.2f us); %.3f us per hold and second\n", k ? "batched" : "alone", n, r->renewals,
                r->scripts, r->us, r->cpu_us, r->us_hold_s);
    }
    if (!errors)
        fprintf(stderr, "  renewals: batched, a renewal costs %.3fx the time and %.3fx the CPU of one alone; "
                "a hold kept a second, %.3fx\n", alone.us > 0 ? batched.us / alone.us : 0,
                alone.cpu_us > 0 ? batched.cpu_us / alone.cpu_us : 0,
                alone.us_hold_s > 0 ? batched.us_hold_s / alone.us_hold_s : 0);
    double least_us = 0, least_cpu = 0, script_us = 0, script_cpu = 0;
    if (!errors && (rn_scripted(rc, pexpire_only, n, &least_us, &least_cpu) != 0 ||
                    rn_scripted(rc, hl_script_mutex_renew_many.body, n, &script_us, &script_cpu) != 0)) {
        fprintf(stderr, "renewals: the scripted batches failed\n");
        errors = 1;
    }
    if (!errors) {
        json_begin("renewals");
        json_str("mode", "least");
        json_int("holds", n);
        json_int("batch", RN_BATCH);
        json_num("redis_us_per_renewal", least_us, 3);
        json_num("redis_cpu_us_per_renewal", least_cpu, 3);
        json_num("us_over_alone", alone.us > 0 ? least_us / alone.us : 0, 3);
        json_num("script_us_per_renewal", script_us, 3);
        json_num("script_cpu_us_per_renewal", script_cpu, 3);
        json_num("script_us_over_alone", alone.us > 0 ? script_us / alone.us : 0, 3);
        json_end();
        g_res.renew_run = 1;
        g_res.renew_batched = alone.us > 0 ? batched.us / alone.us : 0;
        g_res.renew_least = alone.us > 0 ? least_us / alone.us : 0;
        fprintf(stderr, "  renewals: the least a hold with its own lease costs, one PEXPIRE per key, %d keys per "
                "script: %.2f us (CPU %.2f us), %.3fx one alone; mutex_renew_many.lua sent the same way: %.2f us "
                "(CPU %.2f us), %.3fx\n", RN_BATCH, least_us, least_cpu, alone.us > 0 ? least_us / alone.us : 0,
                script_us, script_cpu, alone.us > 0 ? script_us / alone.us : 0);
    }
    if (base) event_base_free(base);
    if (rc) redisFree(rc);
    return errors ? 1 : 0;
}
