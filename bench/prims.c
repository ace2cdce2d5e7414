/* The primitives beside each other (scenario "primitives"): the throughput
 * window of scale.c (tp_measure_kind: K = -k acquire + release loops in
 * flight in one client), every loop on ONE name, for
 *   mutex_names   the mutex, each loop its own name (the uncontended rate)
 *   mutex         the mutex (one holder at a time: the handoff rate)
 *   semaphore     a semaphore of K permits (K holders at once)
 *   read          the read lock (any number of readers)
 *   write         the write lock of a read-write lock (one at a time)
 *   fair          the fair lock (one at a time, handed over in Redis)
 * Reported: grants per second (median over the repetitions) and scripts per
 * grant (EVALSHA + EVAL from INFO commandstats, over the window), against
 * the same server in the same run. */
#include <stdio.h>

#include "bench.h"

static const char *const pr_label[TP_KINDS] = {"mutex_names", "mutex", "semaphore", "read", "write",
                                               "fair"};

int scenario_primitives(void) {
    int k = g_opts.inflight < 64 ? g_opts.inflight : 64;
    int reps = g_opts.reps < 1 ? 1 : g_opts.reps > 8 ? 8 : g_opts.reps;
    double rate[TP_KINDS][8], spg[TP_KINDS][8];
    int n[TP_KINDS] = {0}, errors = 0;
    for (int rep = 0; rep < reps; rep++)
        for (int kind = 0; kind < TP_KINDS; kind++) {
            tp_sample tp;
            if (tp_measure_kind(&g_standalone, kind, k, &tp) != 0) {
                errors++;
                continue;
            }
            rate[kind][n[kind]] = tp.locks_per_s;
            spg[kind][n[kind]++] = tp.scripts_per_s / tp.locks_per_s;
        }
    double base = n[TP_MUTEX_NAMES] ? median_d(rate[TP_MUTEX_NAMES], (size_t)n[TP_MUTEX_NAMES]) : 0;
    for (int kind = 0; kind < TP_KINDS; kind++) {
        double r = n[kind] ? median_d(rate[kind], (size_t)n[kind]) : 0;
        json_begin("primitives");
        json_str("primitive", pr_label[kind]);
        json_int("in_flight", k);
        json_str("names", kind == TP_MUTEX_NAMES ? "one per loop" : "one");
        json_num("grants_per_s", r, 0);
        json_num("over_mutex_names", base > 0 ? r / base : 0, 3);
        json_num("scripts_per_grant", n[kind] ? median_d(spg[kind], (size_t)n[kind]) : 0, 2);
        json_int("reps", n[kind]);
        json_end();
        fprintf(stderr, "  %-12s %9.0f grants/s  %.3f x mutex_names\n", pr_label[kind], r,
                base > 0 ? r / base : 0);
    }
    return errors == 0 ? 0 : 1;
}
