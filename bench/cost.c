/* Redis's own cost per lock (scenario "redis_cost"). At scale the scarce
 * resource is the Redis server's one thread, which every process of a
 * fleet shares, so this measures the server, not the client:
 *
 *   floor      the classic protocol on the same server, driven by
 *              redis-benchmark (50 clients, random keys): SET key token NX
 *              PX 30000, and a compare-and-delete script by EVALSHA. Their
 *              time per call (INFO commandstats' usec / calls) summed is
 *              the floor of one lock cycle; their server CPU (INFO cpu)
 *              per call likewise.
 *   hilock     for each primitive, the throughput window of scale.c with
 *              every loop on a name of its own (nobody waits): the time
 *              of the commands the client sent (EVALSHA, EVAL: a script's
 *              time includes the calls it makes) per cycle (acquire +
 *              release), the server's CPU per cycle, and the calls the
 *              scripts made per cycle, by command.
 *
 * The target: the mutex's time per cycle at most 2x the floor's. The
 * ratios are what to compare; the absolute times move with the machine. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

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
    double set_us, cad_us, set_cpu_us, cad_cpu_us;
} floor_cost;

static int floor_measure_cost(redisContext *rc, long n, floor_cost *f) {
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", cad_script);
    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        if (r) freeReplyObject(r);
        return -1;
    }
    char sha[48];
    snprintf(sha, sizeof sha, "%s", r->str);
    freeReplyObject(r);
    const char *set[] = {"SET", "hb-cost:__rand_int__", "0123456789abcdef", "NX", "PX", "30000", NULL};
    const char *cad[] = {"EVALSHA", sha, "1", "hb-cost:__rand_int__", "0123456789abcdef", NULL};
    int rc1 = floor_call(rc, set, "set", n, &f->set_us, &f->set_cpu_us);
    int rc2 = floor_call(rc, cad, "evalsha", n, &f->cad_us, &f->cad_cpu_us);
    delete_keys(rc, "hb-cost:*");
    return rc1 == 0 && rc2 == 0 ? 0 : -1;
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

int scenario_redis_cost(void) {
    redisContext *rc = sync_connect();
    if (rc == NULL) return 1;
    floor_cost f;
    int errors = 0;
    long n = g_opts.quick ? 20000 : 200000;
    if (floor_measure_cost(rc, n, &f) != 0) {
        fprintf(stderr, "redis_cost: the floor could not be measured\n");
        redisFree(rc);
        return 1;
    }
    redisFree(rc);
    double floor_us = f.set_us + f.cad_us, floor_cpu = f.set_cpu_us + f.cad_cpu_us;
    json_begin("redis_cost");
    json_str("client", "floor");
    json_str("protocol", "SET NX PX 30000 + compare-and-delete EVALSHA (redis-benchmark -c 50)");
    json_num("set_us", f.set_us, 3);
    json_num("cad_us", f.cad_us, 3);
    json_num("redis_us_per_cycle", floor_us, 3);
    json_num("redis_cpu_us_per_cycle", floor_cpu, 3);
    json_end();
    fprintf(stderr, "  floor       %6.2f us per cycle (SET NX PX %.2f + compare-and-delete %.2f), "
            "CPU %.2f us\n", floor_us, f.set_us, f.cad_us, floor_cpu);
    int k = g_opts.inflight < 64 ? g_opts.inflight : 64;
    for (size_t p = 0; p < sizeof cost_prims / sizeof cost_prims[0]; p++) {
        tp_sample tp;
        static tp_redis r; /* two commandstats: not on the stack */
        if (tp_measure_cost(&g_standalone, cost_prims[p].kind, k, &tp, &r) != 0 || r.cycles <= 0) {
            fprintf(stderr, "redis_cost: %s: the window failed\n", cost_prims[p].label);
            errors++;
            continue;
        }
        double us = (double)cmdstats_usec_delta(&r.before, &r.after, top_level) / (double)r.cycles;
        double cpu = r.cpu_seconds * 1e6 / (double)r.cycles;
        double calls = (double)cmdstats_delta(&r.before, &r.after, top_level) / (double)r.cycles;
        char inner[1024];
        calls_per_cycle(&r, inner, sizeof inner);
        json_begin("redis_cost");
        json_str("client", "hilock");
        json_str("primitive", cost_prims[p].label);
        json_int("names", k);
        json_int("cycles", r.cycles);
        json_num("scripts_per_cycle", calls, 2);
        json_num("redis_us_per_cycle", us, 3);
        json_num("over_floor", floor_us > 0 ? us / floor_us : 0, 3);
        json_num("redis_cpu_us_per_cycle", cpu, 3);
        json_num("cpu_over_floor", floor_cpu > 0 ? cpu / floor_cpu : 0, 3);
        json_str("calls_per_cycle", inner);
        json_end();
        fprintf(stderr, "  %-10s  %6.2f us per cycle (%.2fx the floor), CPU %.2f us (%.2fx); %s\n",
                cost_prims[p].label, us, floor_us > 0 ? us / floor_us : 0, cpu,
                floor_cpu > 0 ? cpu / floor_cpu : 0, inner);
        if (p == 0) {
            g_res.cost_run = 1;
            g_res.cost_over_floor = floor_us > 0 ? us / floor_us : 0;
        }
    }
    return errors == 0 ? 0 : 1;
}
