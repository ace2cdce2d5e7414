/* The election's failover (scenario "election"): a leader on a lease of
 * EL_LEASE_MS, a standby campaigning, and an observer, each a client of
 * its own on one loop. Two ways for the leader to go, alternated:
 *   kill    its client is freed without resigning (a process killed): the
 *           standby leads at the lease's end, and the observer sees it then
 *           (its timer at the leader's lease end; nothing is published);
 *   resign  hilock_resign(): the standby and the observer hear it at once.
 * Reported: from the leader's end to the observer's report of the new
 * leader, medians over -r rounds (5; 2 with -q); the kill's beside the
 * lease, which bounds it (the leader renews every third of it, so 2/3 to
 * all of the lease is left when it dies). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "hilock/hilock.h"

#define EL_LEASE_MS 1000
#define EL_ROUNDS_MAX SERIES_MAX

typedef struct el_run {
    struct event_base *base;
    hilock_hold *hold[2];  /* [0] the leader's, [1] the standby's */
    int got[2], status[2];
    uint64_t seen_epoch;   /* the observer's last report */
    uint64_t seen_ns;
    int seen;
} el_run;

static el_run *g_el;

static void on_led(hilock_hold *h, int status, void *data) {
    int i = (int)(intptr_t)data;
    g_el->hold[i] = status == 0 ? h : NULL;
    g_el->status[i] = status;
    g_el->got[i] = 1;
}

static void on_seen(int status, uint64_t epoch, const char *value, size_t len, void *data) {
    el_run *r = data;
    (void)value;
    (void)len;
    if (status != 0) return;
    r->seen_epoch = epoch;
    r->seen_ns = now_ns();
    r->seen++;
}

/* One round: a leader, a standby, the leader's end (kill or resign), and
 * when the observer saw the standby lead (ms after the end), or -1. */
static double el_round(el_run *r, int kill) {
    hilock_client *lead = bench_hilock_client(r->base, &g_standalone);
    hilock_client *standby = bench_hilock_client(r->base, &g_standalone);
    double took = -1;
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.lease_ms = EL_LEASE_MS;
    memset(r->got, 0, sizeof(r->got));
    if (lead == NULL || standby == NULL ||
        hilock_campaign(lead, "bench-election", "leader", &o, on_led, (void *)(intptr_t)0, NULL) != 0)
        goto out;
    loop_until(r->base, &r->got[0], 5000);
    if (r->hold[0] == NULL ||
        hilock_campaign(standby, "bench-election", "standby", &o, on_led, (void *)(intptr_t)1, NULL) != 0)
        goto out;
    /* The observer has seen the leader; the standby waits. */
    uint64_t until = now_ns() + 2000000000ull;
    while (now_ns() < until && r->seen_epoch != hilock_hold_fence(r->hold[0])) event_base_loop(r->base, EVLOOP_ONCE);
    if (r->seen_epoch != hilock_hold_fence(r->hold[0])) goto out;
    /* A moment into the lease, as a real leader's end would be. */
    uint64_t pause = now_ns() + (uint64_t)rnd(EL_LEASE_MS / 3) * 1000000ull;
    while (now_ns() < pause) event_base_loop(r->base, EVLOOP_NONBLOCK);
    uint64_t end_ns = now_ns();
    if (kill) {
        hilock_client_free(lead);
        lead = NULL;
    } else if (hilock_resign(r->hold[0], NULL, NULL) != 0) {
        goto out;
    }
    loop_until(r->base, &r->got[1], EL_LEASE_MS * 3);
    if (r->hold[1] == NULL) goto out;
    until = now_ns() + 3000000000ull;
    while (now_ns() < until && r->seen_epoch != hilock_hold_fence(r->hold[1])) event_base_loop(r->base, EVLOOP_ONCE);
    if (r->seen_epoch == hilock_hold_fence(r->hold[1])) took = (double)(r->seen_ns - end_ns) / 1e6;
    hilock_resign(r->hold[1], NULL, NULL);
out:
    if (lead) hilock_client_free(lead);
    if (standby) hilock_client_free(standby);
    r->hold[0] = r->hold[1] = NULL;
    return took;
}

int scenario_election(void) {
    int rounds = g_opts.reps < 1 ? 1 : g_opts.reps > EL_ROUNDS_MAX ? EL_ROUNDS_MAX : g_opts.reps;
    double kill[EL_ROUNDS_MAX], resign[EL_ROUNDS_MAX];
    int nk = 0, nr = 0, errors = 0;
    el_run r;
    memset(&r, 0, sizeof(r));
    g_el = &r;
    r.base = base_new();
    hilock_client *obs = r.base ? bench_hilock_client(r.base, &g_standalone) : NULL;
    hilock_observer *ob = NULL;
    if (obs == NULL || hilock_observe(obs, "bench-election", on_seen, &r, &ob) != 0) errors++;
    for (int i = 0; i < rounds && errors == 0; i++) {
        double k = el_round(&r, 1), s = el_round(&r, 0);
        if (k < 0 || s < 0) errors++;
        if (k >= 0) kill[nk++] = k;
        if (s >= 0) resign[nr++] = s;
    }
    if (ob) hilock_observe_stop(ob);
    if (obs) hilock_client_free(obs);
    if (r.base) event_base_free(r.base);
    if (errors || nk == 0 || nr == 0) {
        fprintf(stderr, "  election: failed\n");
        return 1;
    }
    double k50 = median_d(kill, (size_t)nk), r50 = median_d(resign, (size_t)nr);
    json_begin("election");
    json_int("lease_ms", EL_LEASE_MS);
    json_int("rounds", nk);
    json_num("kill_to_observed_ms", k50, 1);
    json_num("kill_over_lease", k50 / EL_LEASE_MS, 3);
    json_num("resign_to_observed_ms", r50, 3);
    json_end();
    fprintf(stderr, "  leader killed -> new leader observed: %.1f ms (lease %d ms, %.3fx); resigned -> "
            "observed: %.3f ms\n", k50, EL_LEASE_MS, k50 / EL_LEASE_MS, r50);
    return 0;
}
