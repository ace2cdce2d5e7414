/* Redis's own cost per lock (scenario "redis_cost"). At scale the scarce
 * resource is the Redis server's one thread, which every process of a
 * fleet shares, so this measures the server, not the client:
 *
 *   floor      the classic protocol on the same server, driven by
 *              redis-benchmark (50 clients, random keys among 10^8): SET
 *              key token NX PX 30000, and a compare-and-delete script by
 *              EVALSHA. Their time per call (INFO commandstats' usec /
 *              calls) summed is the floor of one lock cycle; their server
 *              CPU (INFO cpu) per call likewise (unpipelined clients, as a
 *              polling fleet's: the fleet table's). Its compare-and-delete
 *              finds no key to delete (the keys are random), so a second
 *              floor is measured beside it:
 *   cycles     the same two commands in whole cycles on 64 keys, pipelined
 *              as hilock's 64 names are: each SET takes its key and each
 *              compare-and-delete deletes it, as in a lock's life.
 *   hilock     for each primitive, the throughput window of scale.c with
 *              every loop on a name of its own (nobody waits): the time
 *              of the commands the client sent (EVALSHA, EVAL: a script's
 *              time includes the calls it makes) per cycle (acquire +
 *              release), the server's CPU per cycle, and the calls the
 *              scripts made per cycle, by command.
 *
 *   memory     Redis's memory (MEMORY USAGE) for one name of each
 *              primitive: held, with a wait besides, and idle after the
 *              releases; beside the classic protocol's one key.
 *   fleet      lock cycles a second of one Redis core, 3 and 30 masters,
 *              for hilock and a polling client at 1, 10 and 100 waiters
 *              per name, from Redis's CPU per cycle measured here.
 *
 * The floor and the mutex are measured in alternating blocks, the figures
 * are the blocks' medians (cost_blocks); the other primitives once each,
 * against the median floor.
 *
 * The target: the mutex's time per cycle at most 2x the floor's. The
 * ratios are what to compare; the absolute times move with the machine. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "hilock/hilock.h"
#include "prim/prim.h" /* hl_script_mutex_acquire, hl_script_mutex_release */

/* The compare-and-delete of the classic protocol's release. */
static const char cad_script[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

static const char *const top_level[] = {"evalsha", "eval", NULL};

/* Time (us) and server CPU (us) per call of `command` while redis-benchmark
 * runs `cmd` n times; 0 on success. */
static int floor_call(redisContext *rc, const char *const *cmd, const char *command, long n,
                      double *us, double *cpu_us) {
    cmdstats a, b;
    double cpu0 = redis_cpu_seconds(rc);
    if (cmdstats_get(rc, &a) != 0 || cpu0 < 0) return -1;
    if (redis_benchmark_run(cmd, n, 1) <= 0) return -1;
    double cpu1 = redis_cpu_seconds(rc);
    if (cmdstats_get(rc, &b) != 0 || cpu1 < 0) return -1;
    const char *names[] = {command, NULL};
    long long calls = cmdstats_delta(&a, &b, names);
    if (calls <= 0) return -1;
    *us = (double)cmdstats_usec_delta(&a, &b, names) / (double)calls;
    *cpu_us = (cpu1 - cpu0) * 1e6 / (double)calls;
    return 0;
}

typedef struct floor_cost {
    double set_us, cad_us, set_cpu_us, cad_cpu_us; /* redis-benchmark's */
    double cycle_set_us, cycle_cad_us, cycle_cpu_us; /* whole cycles, pipelined */
    double fenced_us, fenced_cpu_us; /* whole cycles of the fenced lock */
    double scripts_us, scripts_cpu_us; /* whole cycles of hilock's own scripts */
} floor_cost;

/* The least a lock with fencing tokens asks of Redis: the take and the
 * count in one step (a script: the fence must be the one of the grant),
 * then the compare-and-delete. */
static const char fenced_script[] =
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end "
    "return 0";

/* How a whole cycle takes and gives back its key: the classic protocol
 * (SET NX PX, then the compare-and-delete), the fenced lock (fenced_script,
 * then the compare-and-delete), or hilock's mutex scripts themselves
 * (mutex_acquire.lua, then mutex_release.lua), sent as the library sends
 * them when nobody waits. */
enum { CYCLE_PLAIN, CYCLE_FENCED, CYCLE_HILOCK };

static void cycle_append(redisContext *rc, int how, const char *take_sha, const char *give_sha, const char *key) {
    static const char tok[] = "0123456789abcdef0123456789abcdef";
    if (how == CYCLE_PLAIN) redisAppendCommand(rc, "SET %s %s NX PX 30000", key, tok);
    if (how == CYCLE_FENCED) redisAppendCommand(rc, "EVALSHA %s 2 %s %s:f %s 30000", take_sha, key, key, tok);
    if (how == CYCLE_HILOCK) {
        redisAppendCommand(rc, "EVALSHA %s 2 %s %s:fence %s 30000 604800", take_sha, key, key, tok);
        redisAppendCommand(rc, "EVALSHA %s 1 %s %s %s:ch h PUBLISH", give_sha, key, tok, key);
    } else {
        redisAppendCommand(rc, "EVALSHA %s 1 %s %s", give_sha, key, tok);
    }
}

/* `rounds` rounds of whole cycles on FLOOR_KEYS keys, pipelined as
 * hilock's 64 names are, every reply checked (each take took its key, each
 * release deleted it). In us: the Redis time per cycle of the top-level
 * commands, the plain SET's part of it, and the server's CPU per cycle. 0
 * on success. */
#define FLOOR_KEYS 64
static int whole_cycles(redisContext *rc, int how, const char *take_sha, const char *give_sha, long rounds,
                        double *us, double *set_us, double *cpu_us) {
    cmdstats a, b;
    char key[FLOOR_KEYS][32];
    for (int i = 0; i < FLOOR_KEYS; i++) snprintf(key[i], sizeof key[i], "hb-cycle:{%d}", i);
    double cpu0 = redis_cpu_seconds(rc);
    if (cmdstats_get(rc, &a) != 0 || cpu0 < 0) return -1;
    int bad = 0;
    for (long r = 0; r < rounds && !bad; r++) {
        for (int i = 0; i < FLOOR_KEYS; i++) cycle_append(rc, how, take_sha, give_sha, key[i]);
        for (int i = 0; i < 2 * FLOOR_KEYS; i++) {
            redisReply *rep = NULL;
            if (redisGetReply(rc, (void **)&rep) != REDIS_OK || rep == NULL) return -1;
            if (i % 2) bad |= rep->type != REDIS_REPLY_INTEGER || rep->integer != 1;
            else if (how != CYCLE_PLAIN) bad |= rep->type != REDIS_REPLY_INTEGER || rep->integer < 1;
            else bad |= rep->type != REDIS_REPLY_STATUS;
            freeReplyObject(rep);
        }
    }
    double cpu1 = redis_cpu_seconds(rc);
    if (bad || cmdstats_get(rc, &b) != 0 || cpu1 < 0) return -1;
    const char *set[] = {"set", NULL}, *evalsha[] = {"evalsha", NULL};
    long long cycles = rounds * FLOOR_KEYS, scripts = cmdstats_delta(&a, &b, evalsha);
    if (scripts != (how == CYCLE_PLAIN ? 1 : 2) * cycles) return -1;
    /* a script's calls count under their own names too: only the classic
     * protocol's SET is a top-level command */
    *set_us = how == CYCLE_PLAIN ? (double)cmdstats_usec_delta(&a, &b, set) / (double)cycles : 0;
    *us = *set_us + (double)cmdstats_usec_delta(&a, &b, evalsha) / (double)cycles;
    *cpu_us = (cpu1 - cpu0) * 1e6 / (double)cycles;
    return 0;
}

/* SCRIPT LOAD of `script`: its sha in out (48 bytes), 0 on success. */
static int script_load(redisContext *rc, const char *script, char *out) {
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", script);
    int ok = r && r->type == REDIS_REPLY_STRING;
    if (ok) snprintf(out, 48, "%s", r->str);
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
}

static int floor_measure_cost(redisContext *rc, long n, floor_cost *f) {
    char sha[48], fenced_sha[48], take_sha[48], give_sha[48];
    if (script_load(rc, cad_script, sha) != 0 || script_load(rc, fenced_script, fenced_sha) != 0 ||
        script_load(rc, hl_script_mutex_acquire.body, take_sha) != 0 ||
        script_load(rc, hl_script_mutex_release.body, give_sha) != 0)
        return -1;
    const char *set[] = {"SET", "hb-cost:__rand_int__", "0123456789abcdef", "NX", "PX", "30000", NULL};
    const char *cad[] = {"EVALSHA", sha, "1", "hb-cost:__rand_int__", "0123456789abcdef", NULL};
    int rc1 = floor_call(rc, set, "set", n, &f->set_us, &f->set_cpu_us);
    int rc2 = floor_call(rc, cad, "evalsha", n, &f->cad_us, &f->cad_cpu_us);
    delete_keys(rc, "hb-cost:*");
    double us, unused;
    long rounds = n / FLOOR_KEYS;
    int rc3 = whole_cycles(rc, CYCLE_PLAIN, NULL, sha, rounds, &us, &f->cycle_set_us, &f->cycle_cpu_us);
    f->cycle_cad_us = us - f->cycle_set_us;
    int rc4 = whole_cycles(rc, CYCLE_FENCED, fenced_sha, sha, rounds, &f->fenced_us, &unused, &f->fenced_cpu_us);
    int rc5 = whole_cycles(rc, CYCLE_HILOCK, take_sha, give_sha, rounds, &f->scripts_us, &unused,
                           &f->scripts_cpu_us);
    delete_keys(rc, "hb-cycle:*");
    return rc1 == 0 && rc2 == 0 && rc3 == 0 && rc4 == 0 && rc5 == 0 ? 0 : -1;
}

/* The start of a JSON line of whole cycles without a split (the caller
 * may add fields, then ends it). */
static void cycles_json(const char *client, const char *protocol, double us, double cpu_us) {
    json_begin("redis_cost");
    json_str("client", client);
    json_str("protocol", protocol);
    json_num("redis_us_per_cycle", us, 3);
    json_num("redis_cpu_us_per_cycle", cpu_us, 3);
}

/* One floor's JSON line. */
static void floor_json(const char *client, const char *protocol, double set_us, double cad_us, double cpu_us) {
    json_begin("redis_cost");
    json_str("client", client);
    json_str("protocol", protocol);
    json_num("set_us", set_us, 3);
    json_num("cad_us", cad_us, 3);
    json_num("redis_us_per_cycle", set_us + cad_us, 3);
    json_num("redis_cpu_us_per_cycle", cpu_us, 3);
    json_end();
}

/* The calls the scripts made per cycle, by command ("hset 1.00 pexpire
 * 1.00 ..."), most first, in `out`. */
static void calls_per_cycle(const tp_redis *r, char *out, size_t len) {
    int used[CMDSTAT_MAX] = {0};
    out[0] = '\0';
    for (;;) {
        int best = -1;
        long long best_d = 0;
        for (int i = 0; i < r->after.n; i++) {
            const char *name = r->after.name[i];
            if (used[i] || strcmp(name, "info") == 0 || strcmp(name, "evalsha") == 0 ||
                strcmp(name, "eval") == 0)
                continue;
            long long d = r->after.calls[i] - cmdstats_calls(&r->before, name);
            if (d > best_d) { best = i; best_d = d; }
        }
        if (best < 0) return;
        used[best] = 1;
        size_t at = strlen(out);
        snprintf(out + at, len - at, "%s%s %.2f", at ? " " : "", r->after.name[best],
                 (double)best_d / (double)r->cycles);
    }
}

static const struct {
    const char *label;
    int kind;
} cost_prims[] = {
    {"mutex", TP_MUTEX | TP_OWN_NAMES},
    {"fair", TP_FAIR | TP_OWN_NAMES},
    {"semaphore", TP_SEMAPHORE | TP_OWN_NAMES},
    {"read", TP_READ | TP_OWN_NAMES},
    {"write", TP_WRITE | TP_OWN_NAMES},
};

/* ---- Redis's memory per name ----------------------------------------------- */

/* One acquire of a primitive, without its wait handle. */
typedef int (*mem_acquire_fn)(hilock_client *c, const char *name, const hilock_acquire_opts *o,
                              hilock_acquire_cb cb, void *data);

static int mem_mutex(hilock_client *c, const char *name, const hilock_acquire_opts *o,
                     hilock_acquire_cb cb, void *data) {
    return hilock_acquire(c, name, o, cb, data, NULL);
}
static int mem_fair(hilock_client *c, const char *name, const hilock_acquire_opts *o,
                    hilock_acquire_cb cb, void *data) {
    return hilock_fair_acquire(c, name, o, cb, data, NULL);
}
static int mem_semaphore(hilock_client *c, const char *name, const hilock_acquire_opts *o,
                         hilock_acquire_cb cb, void *data) {
    return hilock_semaphore_acquire(c, name, 1, 1, o, cb, data, NULL); /* one permit: the second waits */
}
static int mem_read(hilock_client *c, const char *name, const hilock_acquire_opts *o,
                    hilock_acquire_cb cb, void *data) {
    return hilock_read_acquire(c, name, o, cb, data, NULL);
}
static int mem_write(hilock_client *c, const char *name, const hilock_acquire_opts *o,
                     hilock_acquire_cb cb, void *data) {
    return hilock_write_acquire(c, name, o, cb, data, NULL);
}

typedef struct mem_got {
    int done, status;
    hilock_hold *hold;
} mem_got;

static void mem_got_cb(hilock_hold *h, int status, void *data) {
    mem_got *g = data;
    g->done = 1;
    g->status = status;
    g->hold = h;
}

static void mem_released(int status, void *data) {
    (void)status;
    *(int *)data = 1;
}

/* The keys of NAME (every primitive's, under the default prefix) and their
 * MEMORY USAGE summed. */
static long long name_bytes(redisContext *rc, const char *name, int *keys) {
    char pattern[160], cursor[32] = "0";
    long long bytes = 0;
    snprintf(pattern, sizeof pattern, "hilock:{%s}*", name);
    *keys = 0;
    do {
        redisReply *r = redisCommand(rc, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            if (r) freeReplyObject(r);
            return -1;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            bytes += redis_int(rc, "MEMORY USAGE %s SAMPLES 0", r->element[1]->element[i]->str);
            (*keys)++;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return bytes;
}

static int release_wait(struct event_base *base, hilock_hold *h) {
    int done = 0;
    if (hilock_release(h, mem_released, &done) != 0) return -1;
    return loop_until(base, &done, 5000) ? 0 : -1;
}

static const struct {
    const char *label;
    mem_acquire_fn acquire;
} mem_prims[] = {
    {"mutex", mem_mutex}, {"fair", mem_fair}, {"semaphore", mem_semaphore},
    {"read", mem_read},   {"write", mem_write},
};

/* Redis's memory for one name of each primitive: held (one holder), with
 * a wait besides that has waited past starve_ms (so a starving wait's
 * queue keys count), and idle after both released (what stays: the fence
 * key). Beside it, the classic protocol's one key (SET NX PX). Pub/sub
 * subscriptions are not keys, and are not counted. */
static int redis_memory(redisContext *rc) {
    int errors = 0;
    freeReplyObject(redisCommand(rc, "SET hb-mem-floor 0123456789abcdef0123456789abcdef NX PX 30000"));
    long long floor_bytes = redis_int(rc, "MEMORY USAGE hb-mem-floor SAMPLES 0");
    freeReplyObject(redisCommand(rc, "DEL hb-mem-floor"));
    json_begin("redis_memory");
    json_str("client", "floor");
    json_int("held_bytes", floor_bytes);
    json_end();
    fprintf(stderr, "  memory: floor (SET NX PX, a 32-byte token): %lld B held, 0 B idle\n", floor_bytes);
    struct event_base *base = base_new();
    hilock_client *a = bench_hilock_client(base, &g_standalone);
    hilock_client *b = bench_hilock_client(base, &g_standalone);
    for (size_t p = 0; a && b && p < sizeof mem_prims / sizeof mem_prims[0]; p++) {
        char name[64];
        int hk, wk, ik;
        snprintf(name, sizeof name, "hb-mem-%s-%d", mem_prims[p].label, (int)getpid());
        hilock_acquire_opts o;
        hilock_acquire_opts_init(&o);
        o.lease_ms = 30000;
        o.wait_ms = 10000;
        mem_got ga = {0, 0, NULL}, gb = {0, 0, NULL};
        if (mem_prims[p].acquire(a, name, &o, mem_got_cb, &ga) != 0 || !loop_until(base, &ga.done, 5000) ||
            ga.status != 0) {
            errors++;
            continue;
        }
        long long held = name_bytes(rc, name, &hk);
        /* A read lock: the waiter is a writer (readers share). */
        mem_acquire_fn second = mem_prims[p].acquire == mem_read ? mem_write : mem_prims[p].acquire;
        if (second(b, name, &o, mem_got_cb, &gb) != 0) errors++;
        loop_until(base, &gb.done, 400); /* past starve_ms: the wait takes its place */
        long long waiting = name_bytes(rc, name, &wk);
        if (release_wait(base, ga.hold) != 0 || !loop_until(base, &gb.done, 5000) || gb.status != 0 ||
            release_wait(base, gb.hold) != 0) {
            errors++;
            continue;
        }
        int never = 0;
        loop_until(base, &never, 50); /* let the loop settle */
        long long idle = name_bytes(rc, name, &ik);
        if (held < 0 || waiting < 0 || idle < 0) errors++;
        json_begin("redis_memory");
        json_str("client", "hilock");
        json_str("primitive", mem_prims[p].label);
        json_int("held_bytes", held);
        json_int("held_keys", hk);
        json_int("waiting_bytes", waiting);
        json_int("waiting_keys", wk);
        json_int("idle_bytes", idle);
        json_int("idle_keys", ik);
        json_end();
        fprintf(stderr, "  memory: %-10s held %lld B in %d keys, with a wait %lld B in %d, idle %lld B in %d\n",
                mem_prims[p].label, held, hk, waiting, wk, idle, ik);
        delete_keys(rc, "hilock:{hb-mem-*");
    }
    if (a == NULL || b == NULL) errors++;
    if (a) hilock_client_free(a);
    if (b) hilock_client_free(b);
    event_base_free(base);
    return errors;
}

/* ---- A fleet on paper ---------------------------------------------------------- */

/* Lock cycles a second that Redis sustains, from its CPU per cycle
 * measured here, the same arithmetic for hilock's mutex and a polling
 * client: with 1 waiter per name (nobody waits: the uncontended cycle
 * above; the floor's for polling), 10 and 100 (the herd, steady: 2
 * processes x 5 and x 50 waiters on one name, each holding 1 ms and
 * acquiring again at once, for 3 s; the polling baseline retries every
 * 10 ms). One core sustains 1e6 / (CPU us per
 * cycle); a cluster of M masters, M times that, its names spread over the
 * slots (a cluster node's throughput is a standalone server's: see the
 * cluster scenarios). */
static int fleet(double hilock_cpu, double floor_cpu) {
    static const int per_name[] = {1, 10, 100}, masters[] = {1, 3, 30};
    const lock_impl *impl[2] = {&hilock_impl, &polling_impl};
    const char *label[2] = {"hilock", "polling"};
    double cpu[2][3] = {{hilock_cpu, 0, 0}, {floor_cpu, 0, 0}};
    int errors = 0;
    g_opts.herd_repeat_ms = g_opts.quick ? 500 : 3000;
    for (int i = 1; i < 3; i++)
        for (int k = 0; k < 2; k++) {
            if (scenario_herd(impl[k], 2, per_name[i] / 2, "fleet_herd") != 0 || g_res.herd_cpu_us <= 0)
                errors++;
            cpu[k][i] = g_res.herd_cpu_us;
        }
    g_opts.herd_repeat_ms = 0;
    if (errors) return -1;
    fprintf(stderr, "  fleet: lock cycles/s (Redis CPU us per cycle), by waiters per name 1 / 10 / 100\n");
    for (int k = 0; k < 2; k++)
        for (int m = 0; m < 3; m++) {
            json_begin("fleet");
            json_str("client", label[k]);
            json_int("masters", masters[m]);
            fprintf(stderr, "    %-8s %2d master%s", label[k], masters[m], masters[m] > 1 ? "s" : " ");
            for (int i = 0; i < 3; i++) {
                char key[48];
                double per_s = 1e6 * masters[m] / cpu[k][i];
                snprintf(key, sizeof key, "cycles_per_s_%d_per_name", per_name[i]);
                json_num(key, per_s, 0);
                snprintf(key, sizeof key, "cpu_us_per_cycle_%d_per_name", per_name[i]);
                json_num(key, cpu[k][i], 2);
                fprintf(stderr, "  %10.0f (%.1f us)", per_s, cpu[k][i]);
            }
            fprintf(stderr, "\n");
            json_end();
        }
    return 0;
}

/* One primitive's window: its time, CPU and scripts per cycle, and the
 * calls the scripts made. */
typedef struct prim_cost {
    double us, cpu, scripts;
    long long cycles;
    char calls[1024];
} prim_cost;

static int prim_cost_measure(int kind, int names, prim_cost *out) {
    tp_sample tp;
    static tp_redis r; /* two commandstats: not on the stack */
    if (tp_measure_cost(&g_standalone, kind, names, &tp, &r) != 0 || r.cycles <= 0) return -1;
    out->us = (double)cmdstats_usec_delta(&r.before, &r.after, top_level) / (double)r.cycles;
    out->cpu = r.cpu_seconds * 1e6 / (double)r.cycles;
    out->scripts = (double)cmdstats_delta(&r.before, &r.after, top_level) / (double)r.cycles;
    out->cycles = r.cycles;
    calls_per_cycle(&r, out->calls, sizeof out->calls);
    return 0;
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

/* Its time and CPU over each floor's: the floor, the cycles, the fenced. */
#define OVERS 6

/* A primitive's JSON line and summary. */
static void prim_cost_print(const char *label, int names, const prim_cost *c, const double over[OVERS]) {
    json_begin("redis_cost");
    json_str("client", "hilock");
    json_str("primitive", label);
    json_int("names", names);
    json_int("cycles", c->cycles);
    json_num("scripts_per_cycle", c->scripts, 2);
    json_num("redis_us_per_cycle", c->us, 3);
    json_num("over_floor", over[0], 3);
    json_num("redis_cpu_us_per_cycle", c->cpu, 3);
    json_num("cpu_over_floor", over[1], 3);
    json_num("over_cycles", over[2], 3);
    json_num("cpu_over_cycles", over[3], 3);
    json_num("over_fenced", over[4], 3);
    json_num("cpu_over_fenced", over[5], 3);
    json_str("calls_per_cycle", c->calls);
    json_end();
    fprintf(stderr, "  %-10s  %6.2f us per cycle (%.2fx the floor, %.2fx the cycles', %.2fx the fenced), CPU %.2f us "
            "(%.2fx, %.2fx, %.2fx); %s\n", label, c->us, over[0], over[2], over[4], c->cpu, over[1], over[3],
            over[5], c->calls);
}

/* Measured once each, minutes apart, the floor and the mutex drift apart
 * with whatever else a 2-core machine does. So they are measured in
 * alternating blocks, a floor then the mutex's window, and every figure
 * is the median of its blocks: the mutex's ratios are the medians of the
 * blocks' ratios (each block's mutex over the floor just before it). */
#define COST_BLOCKS 5

/* The medians of the blocks: the floors, the mutex's window and its
 * ratios (over), and hilock's scripts in whole cycles over the floor's and
 * the fenced lock's (scripts_over). Returns the blocks, or -1. */
static int cost_blocks(redisContext *rc, long n, int names, floor_cost *f, prim_cost *mutex, double over[OVERS],
                       double scripts_over[2]) {
    enum { FLOORS = 11, COLS = FLOORS + 3 + OVERS + 2 };
    int blocks = g_opts.quick ? 3 : COST_BLOCKS;
    prim_cost m[COST_BLOCKS];
    double col[COLS][COST_BLOCKS], med[COLS];
    for (int b = 0; b < blocks; b++) {
        floor_cost x;
        if (floor_measure_cost(rc, n, &x) != 0 || prim_cost_measure(cost_prims[0].kind, names, &m[b]) != 0)
            return -1;
        double fu = x.set_us + x.cad_us, cu = x.cycle_set_us + x.cycle_cad_us;
        double row[COLS] = {x.set_us, x.cad_us, x.set_cpu_us, x.cad_cpu_us, x.cycle_set_us, x.cycle_cad_us,
                            x.cycle_cpu_us, x.fenced_us, x.fenced_cpu_us, x.scripts_us, x.scripts_cpu_us,
                            m[b].us, m[b].cpu, m[b].scripts,
                            ratio(m[b].us, fu), ratio(m[b].cpu, x.set_cpu_us + x.cad_cpu_us), ratio(m[b].us, cu),
                            ratio(m[b].cpu, x.cycle_cpu_us), ratio(m[b].us, x.fenced_us),
                            ratio(m[b].cpu, x.fenced_cpu_us), ratio(x.scripts_us, fu),
                            ratio(x.scripts_us, x.fenced_us)};
        for (int i = 0; i < COLS; i++) col[i][b] = row[i];
        fprintf(stderr, "  block %d: floor %.2f us, cycles %.2f, fenced %.2f, hilock's scripts %.2f (%.2fx, %.2fx "
                "the fenced); mutex %.2f us: %.2fx, %.2fx, %.2fx\n", b + 1, fu, cu, x.fenced_us, x.scripts_us,
                row[COLS - 2], row[COLS - 1], m[b].us, row[FLOORS + 3], row[FLOORS + 5], row[FLOORS + 7]);
    }
    for (int i = 0; i < COLS; i++) med[i] = series_median(col[i], blocks);
    *f = (floor_cost){med[0], med[1], med[2], med[3], med[4], med[5], med[6], med[7], med[8], med[9], med[10]};
    *mutex = m[blocks - 1]; /* its calls and cycles: the last block's */
    mutex->us = med[FLOORS];
    mutex->cpu = med[FLOORS + 1];
    mutex->scripts = med[FLOORS + 2];
    for (int i = 0; i < OVERS; i++) over[i] = med[FLOORS + 3 + i];
    scripts_over[0] = med[COLS - 2];
    scripts_over[1] = med[COLS - 1];
    return blocks;
}

int scenario_redis_cost(void) {
    redisContext *rc = sync_connect();
    if (rc == NULL) return 1;
    floor_cost f;
    prim_cost mutex;
    double over[OVERS], scripts_over[2];
    int errors = 0, k = g_opts.inflight < 64 ? g_opts.inflight : 64;
    int blocks = cost_blocks(rc, g_opts.quick ? 20000 : 100000, k, &f, &mutex, over, scripts_over);
    redisFree(rc);
    if (blocks < 0) {
        fprintf(stderr, "redis_cost: the floor or the mutex's window failed\n");
        return 1;
    }
    double floor_us = f.set_us + f.cad_us, floor_cpu = f.set_cpu_us + f.cad_cpu_us;
    double cyc_us = f.cycle_set_us + f.cycle_cad_us, cyc_cpu = f.cycle_cpu_us;
    floor_json("floor", "SET NX PX 30000 + compare-and-delete EVALSHA (redis-benchmark -c 50)", f.set_us, f.cad_us,
               floor_cpu);
    floor_json("floor_cycles", "SET NX PX 30000 + compare-and-delete EVALSHA, whole cycles on 64 keys, pipelined",
               f.cycle_set_us, f.cycle_cad_us, cyc_cpu);
    cycles_json("floor_fenced", "a script: SET NX PX 30000 and INCR of a fence key; compare-and-delete EVALSHA; "
                "whole cycles on 64 keys, pipelined", f.fenced_us, f.fenced_cpu_us);
    json_end();
    cycles_json("hilock_scripts", "mutex_acquire.lua + mutex_release.lua as sent when nobody waits, whole cycles on "
                "64 keys, pipelined", f.scripts_us, f.scripts_cpu_us);
    json_num("over_floor", scripts_over[0], 3);
    json_num("over_fenced", scripts_over[1], 3);
    json_end();
    fprintf(stderr, "  medians of %d blocks:\n", blocks);
    fprintf(stderr, "  floor       %6.2f us per cycle (SET NX PX %.2f + compare-and-delete %.2f), "
            "CPU %.2f us\n", floor_us, f.set_us, f.cad_us, floor_cpu);
    fprintf(stderr, "  cycles      %6.2f us per cycle (SET NX PX %.2f + compare-and-delete %.2f, whole cycles, "
            "pipelined), CPU %.2f us\n", cyc_us, f.cycle_set_us, f.cycle_cad_us, cyc_cpu);
    fprintf(stderr, "  fenced      %6.2f us per cycle (a script: SET NX PX and INCR; compare-and-delete; whole cycles, "
            "pipelined), CPU %.2f us\n", f.fenced_us, f.fenced_cpu_us);
    fprintf(stderr, "  scripts     %6.2f us per cycle (hilock's mutex scripts driven as the floors are: %.2fx the "
            "floor, %.2fx the fenced), CPU %.2f us\n", f.scripts_us, scripts_over[0], scripts_over[1],
            f.scripts_cpu_us);
    prim_cost_print(cost_prims[0].label, k, &mutex, over);
    g_res.cost_run = 1;
    g_res.cost_over_floor = over[0];
    g_res.cost_over_cycles = over[2];
    g_res.cost_over_fenced = over[4];
    g_res.cost_scripts_over_fenced = scripts_over[1];
    g_res.cost_fenced_over_floor = ratio(f.fenced_us, floor_us);
    for (size_t p = 1; p < sizeof cost_prims / sizeof cost_prims[0]; p++) {
        prim_cost c;
        if (prim_cost_measure(cost_prims[p].kind, k, &c) != 0) {
            fprintf(stderr, "redis_cost: %s: the window failed\n", cost_prims[p].label);
            errors++;
            continue;
        }
        double o[OVERS] = {ratio(c.us, floor_us), ratio(c.cpu, floor_cpu), ratio(c.us, cyc_us), ratio(c.cpu, cyc_cpu),
                           ratio(c.us, f.fenced_us), ratio(c.cpu, f.fenced_cpu_us)};
        prim_cost_print(cost_prims[p].label, k, &c, o);
    }
    rc = sync_connect();
    if (rc == NULL || redis_memory(rc) != 0) {
        fprintf(stderr, "redis_cost: Redis's memory per name could not be measured\n");
        errors++;
    }
    if (rc) redisFree(rc);
    if (fleet(mutex.cpu, floor_cpu) != 0) {
        fprintf(stderr, "redis_cost: the fleet's herds failed\n");
        errors++;
    }
    return errors == 0 ? 0 : 1;
}
