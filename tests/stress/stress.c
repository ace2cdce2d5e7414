/* hilock-stress: several processes, thousands of waiters, random faults for
 * a bounded time, then a report. Not part of `make test`; run `make stress`.
 *
 *   hilock-stress [-m all|standalone|prims|cluster|sentinel|redlock|nginx|both]
 *                 [-s SECONDS] [-p PROCS] [-w WAITERS] [-n NAMES]
 *
 * SECONDS (at most 120) bounds the whole run. With -m all (the default)
 * every mode runs, one after the other, each until its share of the time
 * (standalone 10%, prims 15%, cluster 25%, sentinel 20%, redlock 20%, nginx
 * 10%); -m both is standalone and cluster alone (30% and 70%), as it was
 * before Sentinel and Redlock; one mode gets the whole time.
 *
 * Standalone: one server with appendfsync always, so a restart keeps the
 * locks and fence counters; faults are connection kills, stalls, restarts.
 * Prims (prims.c): the same server and faults, on names that are
 * semaphores (3 permits, 1 or 2 per acquire), read-write locks (one
 * writer in ten) and mutexes in turn.
 * Cluster (cluster.c): 3 masters + 3 replicas; faults are slot migrations
 * step by step, redis-cli reshards, CLUSTER FAILOVER, kill -9 of a master
 * (half of them with its last writes kept from its replica), connection
 * kills. Sentinel (sentinel.c): a master, its replica, three sentinels;
 * faults are SENTINEL FAILOVER with writes paused and plain, kill -9 of
 * the master (restarted as a replica) or of a sentinel (restarted later),
 * connection kills. Redlock (redlock.c): five independent masters and four
 * times the names (a contended hand-off costs a split vote there); faults
 * are kill -9 of one or two (restarted empty after more than a lease),
 * stalls, connection kills. Nginx (nginx.c): three nginx with the module
 * before a backend that records overlaps and fences; faults are reloads,
 * kill -9 of a worker, connection kills, clients that go away. Every
 * invariant must hold in each (worker.c, prims.c; the backend for nginx):
 *   - no two holders of a mutex at once,
 *   - fencing tokens strictly increasing per name, as a resource sees them
 *     (a read-write lock's: its writers'),
 *   - never more than its permits in use of a semaphore,
 *   - never a writer of a read-write lock beside another holder,
 *   - every acquire request ends with exactly one callback.
 * The one exception is the documented limit of asynchronous replication: an
 * overlap that starts right after a kill -9 of the master that served the
 * name (cluster, sentinel), or during a plain SENTINEL FAILOVER (whose old
 * master takes writes that are lost), is counted apart (see stress.h,
 * limit_from). Redlock has no such window. Errors (a request that met a
 * dead connection) are allowed and counted by cause; violations are not.
 * Exit status 0 only with zero violations in every phase; 1 on a
 * violation; 2 when a phase could not run to its end (a harness problem),
 * or when the prims phase's semaphores never had all their permits in use
 * at once, or its read-write locks never two readers or no writer (checks
 * that could not have failed). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "hilock/hilock.h"
#include "support/harness.h"
#include "stress/stress.h"

typedef struct phase {
    const char *mode;
    long long started_ms, ended_ms;
    stress_faults faults;
    long stranded;
    int bad_exits;
    int failed;        /* the phase could not run (a harness problem) */
} phase;

/* ---- Standalone phase -------------------------------------------------- */

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int start_server(test_redis *r, int port, const char *dir) {
    return test_redis_start(r, port, "--dir", dir, "--appendonly", "yes", "--appendfsync",
                            "always", "--enable-debug-command", "yes", NULL);
}

/* One random fault; 0, or -1 when the server could not be restarted. */
static int standalone_fault(test_redis *r, const char *dir, unsigned *rnd, stress_faults *f) {
    switch (rand_r(rnd) % 4) {
    case 0: test_redis_int(r, "CLIENT KILL TYPE normal"); stress_fault(f, "kill_normal"); return 0;
    case 1: test_redis_int(r, "CLIENT KILL TYPE pubsub"); stress_fault(f, "kill_pubsub"); return 0;
    case 2: test_redis_int(r, "DEBUG SLEEP 0.%d", 1 + rand_r(rnd) % 4); stress_fault(f, "stall"); return 0;
    default: {
        int port = r->port;
        test_redis_stop(r); /* SIGKILL; every write was fsynced */
        sleep_ms(100 + rand_r(rnd) % 300);
        if (start_server(r, port, dir) != 0) {
            fprintf(stderr, "hilock-stress: restart on port %d failed\n", port);
            return -1;
        }
        stress_fault(f, "restart");
        return 0;
    }
    }
}

static void run_standalone(stress_cfg *cfg, long long end_ms, phase *ph) {
    char dir[] = "/tmp/hilock-stress-XXXXXX";
    test_redis r;
    if (mkdtemp(dir) == NULL) { perror("mkdtemp"); ph->failed = 1; return; }
    if (start_server(&r, 0, dir) != 0) {
        fprintf(stderr, "hilock-stress: cannot start redis-server\n");
        ph->failed = 1;
        rmdir(dir);
        return;
    }
    snprintf(cfg->url, sizeof(cfg->url), "%s", r.url);
    printf("hilock-stress: %s: %d processes x %d waiters on %d names, %lld s, redis on port %d\n",
           ph->mode, cfg->procs, cfg->per_proc, cfg->names, (end_ms - test_now_ms() + 999) / 1000, r.port);
    fflush(stdout);
    pid_t *kids = stress_workers_start(cfg);
    unsigned rnd = (unsigned)time(NULL);
    while (kids != NULL && test_now_ms() < end_ms) {
        sleep_ms(300 + rand_r(&rnd) % 1200);
        if (standalone_fault(&r, dir, &rnd, &ph->faults) != 0) { ph->failed = 1; break; }
    }
    if (kids != NULL) ph->bad_exits = stress_workers_finish(kids, cfg->procs, 30000, &ph->stranded);
    else ph->failed = 1;
    test_redis_stop(&r);
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) { /* a leftover temp dir is harmless */ }
}

/* ---- Report -------------------------------------------------------------- */

/* Violations of the lock's invariants. A phase that could not run to its
 * end (a server that would not restart, a cluster that would not settle)
 * is not one: it fails the run apart (exit status 2). */
static long phase_violations(const phase *ph) {
    return sh->overlaps + sh->regressions + sh->permit_overruns + sh->rw_conflicts + sh->double_callbacks +
           ph->stranded + ph->bad_exits;
}

static void print_codes(const char *label, volatile long *table) {
    int first = 1;
    printf(",\"%s\":{", label);
    for (int i = 0; i < NCODES; i++) {
        if (table[i] == 0) continue;
        printf("%s\"%s\":%ld", first ? "" : ",", i ? hilock_strerror(-i) : "refused", table[i]);
        first = 0;
    }
    printf("}");
}

static long sum_codes(volatile long *table) {
    long n = 0;
    for (int i = 0; i < NCODES; i++) n += table[i];
    return n;
}

static const char *event_kind(char kind) {
    switch (kind) {
    case 'o': return "overlap";
    case 'r': return "fence regression";
    case 'p': return "permits over the semaphore's";
    default: return "a writer beside another holder";
    }
}

/* What a grant in a trace asked, when it asked something. */
static const char *ask_text(const stress_cfg *cfg, int name, int ask) {
    static char buf[48];
    const char *label = ask > 0 && ask < MAX_ASK ? stress_prims[cfg->kind[name]].grant_label[ask] : NULL;
    snprintf(buf, sizeof(buf), " (%s)", label ? label : "?");
    return buf;
}

static void print_event_head(const stress_cfg *cfg, const phase *ph, const stress_event *e) {
    printf("hilock-stress:   [%6.1f s] %s on %s%s: ", (double)(e->at_ms - ph->started_ms) / 1000.0,
           event_kind(e->kind), cfg->name[e->name],
           e->limit ? " (within a limit window: asynchronous replication)" : "");
    if (e->kind == 'p')
        printf("holder %d came in, %ld permits in use of %d; fence %llu\n", e->next, e->count, SEM_PERMITS,
               e->fence);
    else if (e->kind == 'w' && e->prev == 0)
        printf("writer %d came in beside %ld readers; fence %llu\n", e->next, e->count, e->fence);
    else if (e->kind == 'w')
        printf("writer %d, then %d came in (%ld readers); fence %llu\n", e->prev, e->next, e->count, e->fence);
    else
        printf("holder %d, then %d; fence %llu after %llu\n", e->prev, e->next, e->fence, e->last_fence);
}

static void print_events(const stress_cfg *cfg, const phase *ph) {
    int n = sh->nevents < MAX_EVENTS ? sh->nevents : MAX_EVENTS;
    for (int i = 0; i < n; i++) {
        const stress_event *e = &sh->events[i];
        print_event_head(cfg, ph, e);
        if ((e->kind == 'o' || e->kind == 'w') && e->prev != 0)
            printf("hilock-stress:     holder %d, granted %lld ms before, %s\n", e->prev, e->at_ms - e->prev_since_ms,
                   e->prev_left_how == 0 ? "was not seen leaving"
                   : e->prev_left_how == 'l' ? "left by its lost callback"
                   : e->prev_left_lost ? "left when its hold ended, hilock_hold_lost() saying 1"
                                       : "left when its hold ended, hilock_hold_lost() saying 0");
        if ((e->kind == 'o' || e->kind == 'w') && e->prev_left_how)
            printf("hilock-stress:     ... %+lld ms after the overlap began\n", e->prev_left_ms - e->at_ms);
        for (int k = e->ntrace > 10 ? e->ntrace - 10 : 0; k < e->ntrace; k++) {
            const stress_trace *t = &e->trace[k];
            printf("hilock-stress:     %+7lld ms  %-6d %s", t->at_ms - e->at_ms, t->id,
                   t->kind == 'g' ? "granted" : t->kind == 'e' ? "hold ended" : t->kind == 'l' ? "lost callback"
                                                                  : "release answered");
            if (t->kind == 'g') printf(", fence %llu%s", t->fence, t->arg ? ask_text(cfg, e->name, t->arg) : "");
            if (t->kind == 'e') printf(", hilock_hold_lost() %d", t->arg);
            if (t->kind == 'l' || t->kind == 'r') printf(", %s", t->arg ? hilock_strerror(t->arg) : "ok");
            printf("\n");
        }
    }
}

/* One JSON line per phase, then a sentence. */
static long report(const stress_cfg *cfg, const phase *ph) {
    long violations = phase_violations(ph);
    double secs = (double)(ph->ended_ms - ph->started_ms) / 1000.0;
    printf("{\"mode\":\"%s\",\"seconds\":%.1f,\"processes\":%d,\"waiters\":%d,\"names\":%d,"
           "\"acquisitions\":%ld,\"long_holds\":%ld,\"faults\":{",
           ph->mode, secs, cfg->procs, cfg->procs * cfg->per_proc, cfg->names, sh->acquisitions,
           sh->long_holds);
    for (int i = 0; i < ph->faults.count; i++)
        printf("%s\"%s\":%ld", i ? "," : "", ph->faults.kind[i], ph->faults.n[i]);
    printf("},\"violations\":%ld,\"overlaps\":%ld,\"fence_regressions\":%ld,\"double_callbacks\":%ld,"
           "\"stranded_waiters\":%ld,\"workers_unfinished\":%d,\"workers_crashed\":%d,\"phase_failed\":%d,"
           "\"async_replication_overlaps\":%ld,\"async_replication_regressions\":%ld,\"lost_holds\":%ld,"
           "\"permit_overruns\":%ld,\"rw_conflicts\":%ld",
           violations, sh->overlaps, sh->regressions, sh->double_callbacks, ph->stranded,
           ph->bad_exits, sh->crashed, ph->failed, sh->overlaps_limit, sh->regressions_limit, sh->lost,
           sh->permit_overruns, sh->rw_conflicts);
    if (stress_prims_used(cfg)) stress_prims_json(cfg);
    print_codes("errors", sh->errors);
    print_codes("release_errors", sh->release_errors);
    printf("}\n");
    printf("hilock-stress: %s: %ld acquisitions, %ld faults, %ld violations, %ld requests ended in "
           "error, %.1f s\n",
           ph->mode, sh->acquisitions, stress_faults_total(&ph->faults), violations,
           sum_codes(sh->errors), secs);
    if (stress_prims_used(cfg)) stress_prims_summary(cfg, ph->mode);
    if (sh->crashed)
        printf("hilock-stress: %s: %d workers crashed (their stacks are above: `addr2line -f -i -e\n"
               "  hilock-stress +0x...` names the functions); the phase stopped there\n", ph->mode, sh->crashed);
    if (ph->failed)
        printf("hilock-stress: %s: the phase could not run to its end (see above): not a violation\n"
               "  of the lock, but the run fails\n", ph->mode);
    if (sh->overlaps_limit + sh->regressions_limit + sh->permit_overruns_limit + sh->rw_conflicts_limit > 0)
        printf("hilock-stress: %s: %ld overlaps began within one lease after a kill -9 of the master\n"
               "  that served the name (or, under Sentinel, of the end of a plain SENTINEL FAILOVER,\n"
               "  whose old master takes writes until it is made a replica): a grant that master had\n"
               "  not replicated is lost with it, and the new master grants the name again. That is\n"
               "  the documented limit of asynchronous replication (docs/cluster.md, docs/sentinel.md),\n"
               "  not counted as a violation; fencing tokens are what protects a resource\n"
               "  then.\n",
               ph->mode, sh->overlaps_limit + sh->regressions_limit + sh->permit_overruns_limit +
                             sh->rw_conflicts_limit);
    for (int i = 0; i < NCODES; i++)
        if (sh->sampled[i] && sh->errors[i])
            printf("hilock-stress: %s: first \"%s\": %s\n", ph->mode, i ? hilock_strerror(-i) : "refused",
                   sh->err_sample[i]);
    print_events(cfg, ph);
    fflush(stdout);
    return violations;
}

/* ---- Main ---------------------------------------------------------------- */

/* Mutexes, all of them. */
static void plain_names(stress_cfg *cfg) {
    memset(cfg->kind, PRIM_MUTEX, sizeof(cfg->kind));
    for (int i = 0; i < cfg->names; i++) snprintf(cfg->name[i], sizeof(cfg->name[i]), "stress-%d", i);
}

static int usage(const char *argv0) {
    fprintf(stderr, "usage: %s [-m all|standalone|prims|cluster|sentinel|redlock|nginx|both] [-s SECONDS<=120] [-p PROCS] "
                    "[-w WAITERS/PROC] [-n NAMES<=%d]\n", argv0, MAX_NAMES);
    return 64;
}

/* The modes, in the order they run, and their shares of the time when
 * several run (the cluster's is the largest: six servers to start, and a
 * settle after each fault). `both` is standalone + cluster, as before
 * Sentinel and Redlock came: 30% and 70%. */
enum { STANDALONE, PRIMS, CLUSTER, SENTINEL, REDLOCK, NGINX, NMODES };
static const char *const mode_name[NMODES] = {"standalone", "prims", "cluster", "sentinel", "redlock", "nginx"};
static const int mode_share[NMODES] = {10, 15, 25, 20, 20, 10};

static int parse_mode(const char *mode, int run[NMODES]) {
    memset(run, 0, NMODES * sizeof(int));
    if (strcmp(mode, "all") == 0) {
        for (int i = 0; i < NMODES; i++) run[i] = 1;
        return 0;
    }
    if (strcmp(mode, "both") == 0) {
        run[STANDALONE] = run[CLUSTER] = 1;
        return 0;
    }
    for (int i = 0; i < NMODES; i++)
        if (strcmp(mode, mode_name[i]) == 0) {
            run[i] = 1;
            return 0;
        }
    return -1;
}

int main(int argc, char **argv) {
    int seconds = 60, opt, run[NMODES];
    const char *mode = "all";
    stress_cfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.procs = 4;
    cfg.per_proc = 1000;
    cfg.names = 8;
    while ((opt = getopt(argc, argv, "m:s:p:w:n:h")) != -1) {
        switch (opt) {
        case 'm': mode = optarg; break;
        case 's': seconds = atoi(optarg); break;
        case 'p': cfg.procs = atoi(optarg); break;
        case 'w': cfg.per_proc = atoi(optarg); break;
        case 'n': cfg.names = atoi(optarg); break;
        default: return usage(argv[0]);
        }
    }
    if (parse_mode(mode, run) != 0) return usage(argv[0]);
    if (seconds < 1 || seconds > 120 || cfg.procs < 1 || cfg.procs > MAX_PROCS || cfg.per_proc < 1 ||
        cfg.per_proc > 99999 || cfg.names < 1 || cfg.names > MAX_NAMES) {
        fprintf(stderr, "hilock-stress: out of range (seconds 1..120, procs 1..%d, waiters 1..99999, "
                        "names 1..%d)\n", MAX_PROCS, MAX_NAMES);
        return 64;
    }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    long long start = test_now_ms();
    long violations = 0;
    int names = cfg.names;
    int failed = 0, total = 0, upto = 0;
    for (int i = 0; i < NMODES; i++) total += run[i] ? mode_share[i] : 0;

    for (int i = 0; i < NMODES; i++) {
        if (!run[i]) continue;
        upto += mode_share[i];
        /* Each phase ends at its share of the whole, counted from the
         * start: one that ran over (a drain) takes from the next. */
        long long end = start + seconds * 1000LL * upto / total;
        phase ph = {.mode = mode_name[i], .started_ms = test_now_ms()};
        stress_reset();
        plain_names(&cfg);
        switch (i) {
        case STANDALONE:
            cfg.lease_ms = 3000;
            cfg.request_timeout_ms = 1500;
            cfg.long_hold_permille = 0;
            run_standalone(&cfg, end, &ph);
            break;
        case PRIMS:
            /* The standalone phase's server, faults and lease, on
             * semaphores, read-write locks and mutexes; a few holds of up
             * to 2.5 s, renewed (every lease / 3) through the faults. */
            stress_prims_names(&cfg);
            cfg.lease_ms = 3000;
            cfg.request_timeout_ms = 1500;
            cfg.long_hold_permille = 1;
            cfg.long_hold_max_ms = 2500;
            run_standalone(&cfg, end, &ph);
            break;
        case CLUSTER:
            stress_cluster_names(&cfg);
            /* Longer than a failover (about 3 s at node timeout 2000), as a
             * cluster deployment should set it; a lease that outlives most
             * failovers, so long holds (some longer than the lease, some
             * longer than a failover) are renewed on the promoted replica. */
            cfg.request_timeout_ms = 6000;
            cfg.lease_ms = 5000;
            cfg.long_hold_permille = 1;
            cfg.long_hold_max_ms = 5000;
            ph.failed = stress_cluster(&cfg, end, &ph.faults, &ph.stranded, &ph.bad_exits) != 0;
            break;
        case SENTINEL:
            /* Above a failover (down-after 1000 ms + the election, 2-4 s
             * after a kill -9), as docs/sentinel.md says to set it; long holds
             * renewed across failovers. */
            cfg.request_timeout_ms = 8000;
            cfg.lease_ms = 5000;
            cfg.long_hold_permille = 1;
            cfg.long_hold_max_ms = 5000;
            ph.failed = stress_sentinel(&cfg, end, &ph.faults, &ph.stranded, &ph.bad_exits) != 0;
            break;
        case REDLOCK:
            /* Four times the names: a hand-off under contention is
             * slower here (the woken processes split the vote more often
             * than not, and Redlock retries after 10-60 ms), so the rate
             * grows with the names, and the drain, which must fit in the
             * phase, shrinks with it. */
            cfg.names = cfg.names * 4 < MAX_NAMES ? cfg.names * 4 : MAX_NAMES;
            plain_names(&cfg);
            /* A short lease, so killed masters come back (after more than
             * a lease) within the phase; long holds, some longer than the
             * lease, renewed while masters die and stall; a request
             * timeout that some stalls outlast. */
            cfg.request_timeout_ms = 2000;
            cfg.lease_ms = 3000;
            cfg.long_hold_permille = 1;
            cfg.long_hold_max_ms = 4000;
            ph.failed = stress_redlock(&cfg, end, &ph.faults, &ph.stranded, &ph.bad_exits) != 0;
            break;
        case NGINX:
            ph.failed = stress_nginx(&cfg, end, &ph.faults, &ph.stranded, &ph.bad_exits) != 0;
            break;
        }
        ph.ended_ms = test_now_ms();
        violations += report(&cfg, &ph);
        /* A check that never met its limit could not have failed. */
        failed |= ph.failed || (stress_prims_used(&cfg) && stress_prims_unexercised(&cfg) != NULL);
        cfg.names = names;
    }
    printf("hilock-stress: %ld violations in %.1f s%s\n", violations, (double)(test_now_ms() - start) / 1000.0,
           failed ? "; a phase could not run to its end, or its checks never met their limits" : "");
    return violations ? 1 : failed ? 2 : 0;
}
