/* Multi-locks (scenario "multi_lock"): a multi-lock of K names (2 and 8)
 * taken and released, one cycle at a time with nobody else on the names,
 * beside K single locks taken one after the other and released together
 * (what a caller without multi-locks writes: the same round trips, without
 * the global order or the give-back), alternated in blocks (-r, 5; each
 * ML_CYCLES cycles, 100 with -q). Reports each side's p50 per cycle and
 * their ratio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "hilock/hilock.h"

#define ML_CYCLES 1000
#define ML_NAMES_MAX 8
#define ML_BLOCKS_MAX SERIES_MAX

typedef struct ml_run {
    struct event_base *base;
    hilock_client *c;
    const char *names[ML_NAMES_MAX];
    int k;                  /* names per cycle */
    int multi;              /* this block's side */
    hilock_hold *holds[ML_NAMES_MAX];
    int taken, released, left, done, errors;
    uint64_t started_ns;
    uint64_t *cycle;
    int n;
} ml_run;

static void ml_cycle(ml_run *r);

static void ml_released(int status, void *data) {
    ml_run *r = data;
    if (status != 0) r->errors++;
    if (--r->released > 0) return;
    r->cycle[r->n++] = now_ns() - r->started_ns;
    if (--r->left == 0 || r->errors) r->done = 1;
    else ml_cycle(r);
}

static void ml_release_all(ml_run *r) {
    int holds = r->multi ? 1 : r->k;
    r->released = holds;
    for (int i = 0; i < holds; i++)
        if (hilock_release(r->holds[i], ml_released, r) != 0) {
            r->errors++;
            r->done = 1;
        }
}

static void ml_granted(hilock_hold *h, int status, void *data) {
    ml_run *r = data;
    if (status != 0) {
        r->errors++;
        r->done = 1;
        return;
    }
    r->holds[r->taken++] = h;
    if (r->multi || r->taken == r->k) {
        ml_release_all(r);
        return;
    }
    if (hilock_acquire(r->c, r->names[r->taken], NULL, ml_granted, r, NULL) != 0) {
        r->errors++;
        r->done = 1;
    }
}

static void ml_cycle(ml_run *r) {
    r->taken = 0;
    r->started_ns = now_ns();
    int rc = r->multi ? hilock_acquire_multi(r->c, r->names, (size_t)r->k, NULL, ml_granted, r, NULL)
                      : hilock_acquire(r->c, r->names[0], NULL, ml_granted, r, NULL);
    if (rc != 0) {
        r->errors++;
        r->done = 1;
    }
}

/* One block of one side: its p50 per cycle (us), or -1. */
static double ml_block(ml_run *r, int multi, int cycles) {
    r->multi = multi;
    r->done = 0;
    r->left = cycles;
    r->n = 0;
    ml_cycle(r);
    loop_until(r->base, &r->done, 60000);
    if (!r->done || r->errors || r->n != cycles) return -1;
    sort_u64(r->cycle, (size_t)r->n);
    return (double)pct_u64(r->cycle, (size_t)r->n, 50) / 1000.0;
}

/* K names: blocks alternated; 0 or 1 (failed). */
static int ml_scenario(ml_run *r, int k, int blocks, int cycles) {
    double m50[ML_BLOCKS_MAX], s50[ML_BLOCKS_MAX], ratio[ML_BLOCKS_MAX];
    int n = 0;
    r->k = k;
    for (int b = 0; b < blocks; b++) {
        double x[2];
        for (int s = 0; s < 2; s++) {
            int multi = s == b % 2; /* each side first in turn */
            if ((x[multi] = ml_block(r, multi, cycles)) < 0) return 1;
        }
        m50[n] = x[1], s50[n] = x[0];
        ratio[n] = s50[n] > 0 ? m50[n] / s50[n] : 0;
        n++;
    }
    char key[32];
    json_begin("multi_lock");
    json_int("names", k);
    json_int("cycles_per_block", cycles);
    json_int("blocks", n);
    json_num("multi_p50_us", median_d(m50, (size_t)n), 1);
    json_num("singles_p50_us", median_d(s50, (size_t)n), 1);
    json_num("ratio", median_d(ratio, (size_t)n), 3);
    json_end();
    snprintf(key, sizeof(key), "%d names", k);
    fprintf(stderr, "  %s: a multi-lock cycle p50 %.1f us vs %d single locks %.1f us (%.3fx)\n", key,
            median_d(m50, (size_t)n), k, median_d(s50, (size_t)n), median_d(ratio, (size_t)n));
    return 0;
}

int scenario_multi_lock(void) {
    static const char *const names[ML_NAMES_MAX] = {"bench-ml-0", "bench-ml-1", "bench-ml-2", "bench-ml-3",
                                                    "bench-ml-4", "bench-ml-5", "bench-ml-6", "bench-ml-7"};
    int blocks = g_opts.reps < 1 ? 1 : g_opts.reps > ML_BLOCKS_MAX ? ML_BLOCKS_MAX : g_opts.reps;
    int cycles = g_opts.quick ? 100 : ML_CYCLES;
    ml_run r;
    memset(&r, 0, sizeof(r));
    memcpy(r.names, names, sizeof(names));
    r.base = base_new();
    r.cycle = malloc(sizeof(*r.cycle) * (size_t)cycles);
    r.c = r.base ? bench_hilock_client(r.base, &g_standalone) : NULL;
    int failed = r.c == NULL || r.cycle == NULL;
    if (!failed) failed = ml_scenario(&r, 2, blocks, cycles) || ml_scenario(&r, 8, blocks, cycles);
    if (failed) fprintf(stderr, "  multi_lock: failed (%d errors)\n", r.errors);
    if (r.c) hilock_client_free(r.c);
    redisContext *side = sync_connect();
    if (side) {
        delete_keys(side, "hilock:{bench-ml-*");
        redisFree(side);
    }
    if (r.base) event_base_free(r.base);
    free(r.cycle);
    return failed;
}
