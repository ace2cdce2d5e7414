/* hilock-bench: how fast hilock hands a lock over, how it scales, and what
 * the machine itself can do, measured in the same run.
 *
 *     hilock-bench [-u redis://HOST:PORT] [-c redis://HOST:PORT,HOST:PORT...]
 *                  [-r redlock://HOST:PORT,HOST:PORT,...]
 *                  [-S rediss://HOST:PORT -C CA_FILE] [-s SCENARIOS] [-o DIR] [-q]
 *     hilock-bench -T    exit 0 if this build has TLS, 1 if not (and say so)
 *
 * Scenarios (comma-separated, default all, in this order):
 *   handoff     two processes hand one lock back and forth; beside it the
 *               PING round trip of the same processes
 *   fair_handoff  the same with the fair lock (hilock_fair_acquire)
 *               beside the mutex, alternated run by run with each other
 *               and with both floors: p50 over the mutex's, commands per
 *               handoff
 *   herd        P processes x W waiters on one name; Redis commands per
 *               handoff from INFO commandstats
 *   fair_herd   the same grid with the fair lock, each cell right after
 *               the mutex's (with herd)
 *   waiters     100,000 waiters on 1,000 names in one process: bytes per
 *               waiter, errors, subscriber connections
 *   throughput  uncontended acquire+release cycles, many in flight, beside
 *               redis-benchmark -P 16 running hilock's acquire script
 *   redis_cost  Redis's own time (INFO commandstats) and CPU (INFO cpu) per
 *               uncontended cycle of each primitive, and the calls its
 *               scripts make, beside the classic protocol's floor: SET NX
 *               PX and a compare-and-delete EVALSHA under redis-benchmark;
 *               Redis's memory per name (MEMORY USAGE); and the lock cycles
 *               a second of 1, 3 and 30 masters at 1, 10 and 100 waiters per
 *               name, hilock beside the polling baseline (see cost.c)
 *   renewals    100,000 holds kept by the watchdog: Redis's time and CPU per
 *               renewal, each hold renewing alone and batched (renew.c)
 *   fairness    P processes x W loops on one name, each loop acquiring,
 *               holding H ms and releasing for D s, once per primitive:
 *               the mutex, the mutex always racing (starve_ms
 *               HILOCK_STARVE_NEVER, as before bounded waiting), the write
 *               lock, a semaphore of 2 permits and the fair lock. Each
 *               process's share of the grants, its waits (p50, p99, max),
 *               the longest run of grants to one process, the grants per
 *               second; the mutex's and the write lock's against the fair
 *               lock's of the same run (see fairness.c). P, W, H and D
 *               come from BENCH_FAIR_P (3), BENCH_FAIR_W (20),
 *               BENCH_FAIR_HOLD_MS (5) and BENCH_FAIR_SECONDS (6; 1.5
 *               with -q)
 *   polling     handoff and herd with the polling baseline (SET NX PX,
 *               retry every 10 ms), written in C on the same loop
 *   cluster     (with -c, a Redis Cluster's seeds) cluster_handoff,
 *               cluster_throughput and cluster_bus, each in classic and
 *               sharded pub/sub, beside the -u server (see cluster.c);
 *               each of the three can also be named alone
 *   redlock     (with -r, the masters of a Redlock) redlock_acquire and
 *               redlock_handoff: acquire latency, uncontended, and the
 *               handoff, on the N masters beside the first of them alone
 *               (see redlock.c); each can also be named alone
 *   tls         (with -S, the -u server's TLS port, and -C, its CA) the
 *               handoff, the throughput window and PING over TLS, each
 *               beside the same over the plain port, alternated (see
 *               tls.c); skipped with a line saying so when this build has
 *               no TLS (hiredis 0.14)
 *
 * Each scenario prints one JSON object per line on stdout; progress and
 * the check of the targets go to stderr. -o DIR writes the raw handoff
 * latencies (handoff-CLIENT.dat) for plotting. The benchmark leaves no keys
 * behind (every name starts with "hb-"), but it loads the server: point it
 * at a throwaway redis-server (scripts/bench.sh starts one).
 *
 * Exit status: 0 when every scenario ran without errors (targets missed
 * are reported, not failed), 1 otherwise, 2 for a usage error. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "hilock/hilock.h"

bench_results g_res;

static void usage(FILE *f) {
    fprintf(f,
            "usage: hilock-bench [-u redis://HOST:PORT] [-c redis://HOST:PORT,HOST:PORT...]\n"
            "                    [-r redlock://HOST:PORT,HOST:PORT,...]\n"
            "                    [-S rediss://HOST:PORT -C CA_FILE] [-s SCENARIOS] [-o DIR] [-q]\n"
            "                    [-n HANDOFFS] [-w WAITERS] [-N NAMES] [-k IN_FLIGHT]\n"
            "                    [-t SECONDS] [-r REPS] [-b REDIS_BENCHMARK]\n"
            "  SCENARIOS: comma-separated of handoff,fair_handoff,herd,fair_herd,waiters,\n"
            "             throughput,redis_cost,renewals,primitives,guarded_write,election,multi_lock,\n"
            "             fairness,polling,\n"
            "             cluster (= cluster_handoff,cluster_throughput,cluster_bus),\n"
            "             redlock (= redlock_acquire,redlock_handoff), tls\n"
            "             (default all; the cluster ones need -c, the Redlock ones -r URL,\n"
            "             tls -S and -C)\n"
            "  -c URL  a Redis Cluster's seeds, for the cluster scenarios\n"
            "  -r redlock://H:P,...  the masters of a Redlock (e.g. 5), for the Redlock\n"
            "          scenarios, each figure beside the first master alone\n"
            "  -r REPS blocks / repetitions, the tls scenario's too (a number: not a URL)\n"
            "  -S rediss://H:P  the -u server's TLS port, for the tls scenario\n"
            "  -C FILE the CA (PEM) that the TLS port's certificate chains to\n"
            "  -T      exit 0 if this build has TLS (rediss://), 1 if not\n"
            "  -o DIR  write raw handoff latencies there (handoff-CLIENT.dat)\n"
            "  -q      quick: small counts, for a smoke test\n"
            "  fairness: BENCH_FAIR_P processes (3) x BENCH_FAIR_W loops (20), hold\n"
            "          BENCH_FAIR_HOLD_MS (5), BENCH_FAIR_SECONDS per primitive (6; -q 1.5)\n"
            "          from the environment\n");
}

/* "SCHEME://HOST:PORT" (the scheme optional) into a one-server target. */
static int parse_target(const char *url, const char *scheme, const char *label, bench_target *t) {
    const char *p = url;
    size_t slen = strlen(scheme);
    if (strncmp(p, scheme, slen) == 0 && strncmp(p + slen, "://", 3) == 0) p += slen + 3;
    const char *colon = strrchr(p, ':');
    size_t hlen = colon ? (size_t)(colon - p) : strcspn(p, "/");
    target_node *n = &t->node[0];
    if (hlen == 0 || hlen >= sizeof n->host) return -1;
    memcpy(n->host, p, hlen);
    n->host[hlen] = '\0';
    n->port = colon ? atoi(colon + 1) : 6379;
    if (n->port <= 0 || n->port > 65535) return -1;
    snprintf(t->url, sizeof t->url, "%s://%s:%d", scheme, n->host, n->port);
    t->label = label;
    t->pubsub = HILOCK_PUBSUB_AUTO;
    t->nnodes = 1;
    return 0;
}

static int parse_url(const char *url) {
    /* The same server as a target, for the code shared with the cluster. */
    if (parse_target(url, "redis", "standalone", &g_standalone) != 0) return -1;
    snprintf(g_opts.host, sizeof g_opts.host, "%s", g_standalone.node[0].host);
    g_opts.port = g_standalone.node[0].port;
    snprintf(g_opts.url, sizeof g_opts.url, "%s", g_standalone.url);
    return 0;
}

static int has(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, name, n) == 0) return 1;
        p += len;
        if (*p == ',') p++;
    }
    return 0;
}

static int positive(const char *s, const char *what, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v <= 0 || v > 10000000) {
        fprintf(stderr, "hilock-bench: bad %s: %s\n", what, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* A number in [min, max] from the environment (unset: *out is kept); a
 * whole number if `integer`. */
static int env_num(const char *name, double min, double max, int integer, double *out) {
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return 0;
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || *end || !(d >= min && d <= max) || (integer && d != (double)(long)d)) {
        fprintf(stderr, "hilock-bench: bad %s: %s\n", name, v);
        return -1;
    }
    *out = d;
    return 0;
}

static const char *verdict(int met) { return met ? "met" : "MISSED"; }

/* The targets, checked against this run's figures. */
static void targets(void) {
    json_begin("targets");
    fprintf(stderr, "\n== targets (this run; the baseline measured beside each)\n");
    if (g_res.handoff_run) {
        int a = g_res.ho_p50 <= 4 * g_res.ho_ping, b = g_res.ho_p99 <= 1000;
        fprintf(stderr, "  handoff p50 %.0f us <= 4 x ping p50 %.0f us = %.0f us: %s (%.2fx)\n",
                g_res.ho_p50, g_res.ho_ping, 4 * g_res.ho_ping, verdict(a), g_res.ho_ratio);
        fprintf(stderr, "  handoff p99 %.0f us <= 1000 us: %s\n", g_res.ho_p99, verdict(b));
        if (g_res.floor_p50 > 0)
            fprintf(stderr, "  (the floor, blocking hiredis with hilock's scripts: p50 %.0f us, "
                    "%.0f us when the releaser is not subscribed; hilock = %.2fx the floor)\n",
                    g_res.floor_p50, g_res.floor_nosub_p50, g_res.ho_p50 / g_res.floor_p50);
        json_bool("handoff_p50_le_4x_ping", a);
        json_bool("handoff_p99_le_1ms", b);
    }
    if (g_res.cost_run) {
        int a = g_res.cost_over_floor <= 2;
        fprintf(stderr, "  Redis time per uncontended mutex cycle = %.2fx the classic protocol's "
                "(SET NX PX + compare-and-delete), goal <= 2x: %s (%.2fx its whole cycles, pipelined); "
                "%.2fx the least fenced lock's (its take a script: SET NX PX and INCR), whose own cycle is "
                "%.2fx the classic's; hilock's scripts driven as the floors: %.2fx the fenced lock's\n",
                g_res.cost_over_floor, verdict(a), g_res.cost_over_cycles, g_res.cost_over_fenced,
                g_res.cost_fenced_over_floor, g_res.cost_scripts_over_fenced);
        json_bool("redis_cost_mutex_le_2x_floor", a);
    }
    if (g_res.renew_run) {
        int a = g_res.renew_batched < 1;
        fprintf(stderr, "  renewals: batched, Redis time per renewal %.2fx one alone's, below 1: %s; the least a "
                "renewal keeping each hold's own lease costs (one PEXPIRE per key, batched): %.2fx, so 1/20 is out "
                "of reach of any such renewal\n", g_res.renew_batched, verdict(a), g_res.renew_least);
        json_bool("renewals_batched_below_alone", a);
    }
    if (g_res.herd_runs) {
        int a = g_res.herd_worst_excess <= 0;
        fprintf(stderr, "  herd: worst %.2f commands/handoff at P=%d W=%d, target <= P+2 = %d: %s\n",
                g_res.herd_worst_cmds, g_res.herd_worst_p, g_res.herd_worst_w,
                g_res.herd_worst_p + 2, verdict(a));
        json_bool("herd_commands_le_p_plus_2", a);
    }
    if (g_res.fair_ho_run) {
        int a = g_res.fair_ho_ratio <= 0.75;
        fprintf(stderr, "  fair handoff p50 %.0f us = %.2fx the mutex's %.0f us (alternated, median of "
                "the runs' ratios), goal <= 0.75x: %s (p99 %.0f us, the mutex's %.0f us; "
                "%.2f commands/handoff)\n", g_res.fair_ho_p50, g_res.fair_ho_ratio,
                g_res.fair_ho_mutex_p50, verdict(a), g_res.fair_ho_p99, g_res.fair_ho_mutex_p99,
                g_res.fair_ho_cmds);
        if (g_res.fair_floor_p50 > 0 && g_res.fair_mutex_floor_p50 > 0)
            fprintf(stderr, "  (the floors, blocking hiredis with each lock's scripts, alternated too: fair "
                    "p50 %.0f us = %.2fx the mutex's %.0f us, whose release message alone takes %.0f us)\n",
                    g_res.fair_floor_p50, g_res.fair_floor_p50 / g_res.fair_mutex_floor_p50,
                    g_res.fair_mutex_floor_p50, g_res.fair_mutex_floor_msg_p50);
        json_bool("fair_handoff_p50_le_0_75x_handoff", a);
    }
    if (g_res.fair_herd_runs) {
        int a = g_res.fair_herd_worst_cmds <= 3;
        fprintf(stderr, "  fair herd: worst %.2f commands/handoff at P=%d W=%d, goal <= 3: %s\n",
                g_res.fair_herd_worst_cmds, g_res.fair_herd_worst_p, g_res.fair_herd_worst_w,
                verdict(a));
        json_bool("fair_commands_per_handoff_le_3", a);
    }
    if (g_res.waiters_run) {
        int a = g_res.wv_bytes <= 512, b = g_res.wv_errors == 0, c = g_res.wv_subs == 1;
        fprintf(stderr, "  waiters: %.0f bytes/waiter <= 512: %s; errors %d: %s; "
                "subscriber connections %d == 1: %s (%d waiters)\n",
                g_res.wv_bytes, verdict(a), g_res.wv_errors, verdict(b), g_res.wv_subs,
                verdict(c), g_res.wv_waiters);
        json_bool("waiters_bytes_le_512", a);
        json_bool("waiters_no_errors", b);
        json_bool("waiters_one_subscriber_connection", c);
    }
    if (g_res.throughput_run) {
        int a = g_res.tp_ratio >= 0.5;
        fprintf(stderr, "  throughput: %.0f scripts/s (%.0f locks/s) = %.0f%% of redis-benchmark's "
                "%.0f EVALSHA/s, target >= 50%%: %s\n", g_res.tp_scripts, g_res.tp_locks,
                100 * g_res.tp_ratio, g_res.tp_rb, verdict(a));
        json_bool("throughput_ge_half_redis_benchmark", a);
    }
    if (g_res.rl_acq_run) {
        int a = g_res.rl_acq_ratio <= 1.3;
        fprintf(stderr, "  redlock acquire p50 %.0f us on %d masters = %.2fx one master %.0f us, "
                "goal <= 1.3x: %s\n", g_res.rl_acq_p50, g_res.rl_masters, g_res.rl_acq_ratio,
                g_res.rl_acq_one_p50, verdict(a));
        json_bool("redlock_acquire_p50_le_1_3x_one_master", a);
    }
    if (g_res.rl_ho_run) {
        int a = g_res.rl_ho_ratio <= 1.3;
        fprintf(stderr, "  redlock handoff p50 %.0f us on %d masters = %.2fx one master %.0f us, "
                "goal <= 1.3x: %s\n", g_res.rl_ho_p50, g_res.rl_masters, g_res.rl_ho_ratio,
                g_res.rl_ho_one_p50, verdict(a));
        json_bool("redlock_handoff_p50_le_1_3x_one_master", a);
    }
    if (g_res.fa_run) {
        static const char *const what[3] = {"mutex", "write lock", "mutex always racing (before)"};
        static const char *const key[2] = {"fairness_mutex", "fairness_write"};
        double fair = 1.0 / g_res.fa_procs;
        for (int i = 0; i < 3; i++) {
            fprintf(stderr, "  fairness %s: shares %.3f..%.3f within 1/P %.3f +-25%%: %s; max wait "
                    "%.0f ms <= 2 x the fair lock's %.0f ms: %s; %.1f grants/s >= 0.9 x the fair "
                    "lock's %.1f: %s (longest run %d)\n", what[i], g_res.fa_share_min[i],
                    g_res.fa_share_max[i], fair, verdict(g_res.fa_share_ok[i]), g_res.fa_wait[i],
                    g_res.fa_fair_wait, verdict(g_res.fa_wait_ok[i]), g_res.fa_tp[i], g_res.fa_fair_tp,
                    verdict(g_res.fa_tp_ok[i]), g_res.fa_run_len[i]);
            if (i == 2) break; /* the before: printed, not a target */
            char k[64];
            snprintf(k, sizeof k, "%s_share_within_25pct", key[i]);
            json_bool(k, g_res.fa_share_ok[i]);
            snprintf(k, sizeof k, "%s_max_wait_le_2x_fair", key[i]);
            json_bool(k, g_res.fa_wait_ok[i]);
            snprintf(k, sizeof k, "%s_throughput_ge_0_9x_fair", key[i]);
            json_bool(k, g_res.fa_tp_ok[i]);
        }
    }
    if (g_res.poll_p50 > 0 && g_res.handoff_run)
        fprintf(stderr, "  polling baseline: handoff p50 %.0f us, p99 %.0f us (hilock: %.0f, %.0f)\n",
                g_res.poll_p50, g_res.poll_p99, g_res.ho_p50, g_res.ho_p99);
    if (g_res.poll_herd_worst_cmds > 0)
        fprintf(stderr, "  polling baseline: up to %.1f commands/handoff in the herd\n",
                g_res.poll_herd_worst_cmds);
    json_end();
}

int main(int argc, char **argv) {
    const char *url = "redis://127.0.0.1:6379";
    const char *scen = "handoff,fair_handoff,herd,fair_herd,waiters,throughput,redis_cost,renewals,primitives,guarded_write,election,multi_lock,fairness,polling,"
                       "cluster,redlock,tls";
    int scen_given = 0;
    g_opts.redis_benchmark = getenv("REDIS_BENCHMARK") ? getenv("REDIS_BENCHMARK") : "redis-benchmark";
    g_opts.handoffs = 1500;
    g_opts.poll_handoffs = 400;
    g_opts.reps = 5;
    g_opts.waiters = 100000;
    g_opts.names = 1000;
    g_opts.inflight = 256;
    g_opts.tp_seconds = 2.0;
    g_opts.herd_hold_us = 1000;
    g_opts.cluster_handoffs = 250;
    g_opts.cluster_reps = 3;
    g_opts.bus_releases = 2000;
    g_opts.redlock_reps = 5;
    g_opts.redlock_cycles = 1000;
    g_opts.redlock_handoffs = 300;
    g_opts.tls_reps = 7; /* short runs, many pairs: the ratios' median is what counts */
    g_opts.tls_handoffs = 200;
    g_opts.fair_procs = 3;
    g_opts.fair_loops = 20;
    g_opts.fair_hold_ms = 5;
    g_opts.fair_seconds = 6.0;
    int n = 0, w = 0, N = 0, k = 0, r = 0, t = 0, opt;
    while ((opt = getopt(argc, argv, "u:c:s:o:qn:w:N:k:t:r:b:S:C:Th")) != -1) {
        switch (opt) {
        case 'u': url = optarg; break;
        case 'c': g_opts.cluster_url = optarg; break;
        case 's': scen = optarg; scen_given = 1; break;
        case 'o': g_opts.lat_dir = optarg; break;
        case 'q': g_opts.quick = 1; break;
        case 'n': if (positive(optarg, "-n", &n)) return 2; break;
        case 'w': if (positive(optarg, "-w", &w)) return 2; break;
        case 'N': if (positive(optarg, "-N", &N)) return 2; break;
        case 'k': if (positive(optarg, "-k", &k)) return 2; break;
        case 't': if (positive(optarg, "-t", &t)) return 2; break;
        case 'r': /* a Redlock's masters, or the repetitions */
            if (strncmp(optarg, "redlock://", 10) == 0) g_opts.redlock_url = optarg;
            else if (positive(optarg, "-r", &r)) return 2;
            break;
        case 'b': g_opts.redis_benchmark = optarg; break;
        case 'S': g_opts.tls_url = optarg; break;
        case 'C': g_opts.tls_ca = optarg; break;
        case 'T': /* for scripts/bench.sh: whether to start a TLS port */
            printf("TLS: %s\n", hilock_tls_available() ? "yes" : "no (hiredis >= 1.0 with hiredis_ssl needed)");
            return hilock_tls_available() ? 0 : 1;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc || parse_url(url) != 0) { usage(stderr); return 2; }
    int cluster_all = has(scen, "cluster");
    int cl_handoff = cluster_all || has(scen, "cluster_handoff");
    int cl_tp = cluster_all || has(scen, "cluster_throughput");
    int cl_bus = cluster_all || has(scen, "cluster_bus");
    if ((cl_handoff || cl_tp || cl_bus) && g_opts.cluster_url == NULL) {
        if (scen_given) {
            fprintf(stderr, "hilock-bench: the cluster scenarios need -c\n");
            return 2;
        }
        cl_handoff = cl_tp = cl_bus = 0; /* the default list: no cluster given */
    }
    int rl_all = has(scen, "redlock");
    int rl_acq = rl_all || has(scen, "redlock_acquire");
    int rl_ho = rl_all || has(scen, "redlock_handoff");
    if ((rl_acq || rl_ho) && g_opts.redlock_url == NULL) {
        if (scen_given) {
            fprintf(stderr, "hilock-bench: the Redlock scenarios need -r redlock://...\n");
            return 2;
        }
        rl_acq = rl_ho = 0; /* the default list: no Redlock given */
    }
    int tls = has(scen, "tls");
    if (g_opts.tls_url != NULL &&
        (g_opts.tls_ca == NULL || parse_target(g_opts.tls_url, "rediss", "tls", &g_tls) != 0)) {
        fprintf(stderr, "hilock-bench: -S needs a rediss://HOST:PORT and -C CA_FILE\n");
        return 2;
    }
    g_tls.tls_ca = g_opts.tls_ca;
    if (tls && scen_given && g_opts.tls_url == NULL && hilock_tls_available()) {
        fprintf(stderr, "hilock-bench: the tls scenario needs -S rediss://... and -C\n");
        return 2;
    }
    if (g_opts.quick) {
        g_opts.handoffs = 200;
        g_opts.poll_handoffs = 60;
        g_opts.reps = 2;
        g_opts.waiters = 10000;
        g_opts.names = 100;
        g_opts.tp_seconds = 1.0;
        g_opts.cluster_handoffs = 50;
        g_opts.cluster_reps = 2;
        g_opts.bus_releases = 300;
        g_opts.redlock_reps = 2;
        g_opts.redlock_cycles = 200;
        g_opts.redlock_handoffs = 50;
        g_opts.tls_reps = 3;
        g_opts.tls_handoffs = 100;
        g_opts.fair_seconds = 1.5;
    }
    double fp = g_opts.fair_procs, fw = g_opts.fair_loops, fh = g_opts.fair_hold_ms;
    if (env_num("BENCH_FAIR_P", 1, 64, 1, &fp) || env_num("BENCH_FAIR_W", 1, 10000, 1, &fw) ||
        env_num("BENCH_FAIR_HOLD_MS", 0, 60000, 1, &fh) ||
        env_num("BENCH_FAIR_SECONDS", 0.1, 3600, 0, &g_opts.fair_seconds))
        return 2;
    g_opts.fair_procs = (int)fp;
    g_opts.fair_loops = (int)fw;
    g_opts.fair_hold_ms = (int)fh;
    if (n) g_opts.handoffs = n;
    if (w) g_opts.waiters = w;
    if (N) g_opts.names = N;
    if (k) g_opts.inflight = k;
    if (t) g_opts.tp_seconds = t;
    if (r) g_opts.reps = g_opts.tls_reps = r;
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    static const int herd_grid[][2] = {{2, 16}, {2, 128}, {4, 16}, {4, 128}, {4, 512}};
    static const int herd_quick[][2] = {{2, 16}, {4, 16}};
    const int (*grid)[2] = g_opts.quick ? herd_quick : herd_grid;
    int ngrid = g_opts.quick ? 2 : (int)(sizeof herd_grid / sizeof herd_grid[0]);

    int failed = 0;
    uint64_t t0 = now_ns();
    int ho = has(scen, "handoff"), fair_ho = has(scen, "fair_handoff");
    if (ho) {
        fprintf(stderr, "== handoff floor: blocking hiredis, hilock's scripts, %d handoffs x 2\n",
                g_opts.poll_handoffs);
        failed |= scenario_floor(g_opts.poll_handoffs, 1, &g_res.floor_p50);
        failed |= scenario_floor(g_opts.poll_handoffs, 0, &g_res.floor_nosub_p50);
    }
    if (ho) {
        fprintf(stderr, "== handoff: hilock, %d handoffs\n", g_opts.handoffs);
        failed |= scenario_handoff(&hilock_impl, g_opts.handoffs, "handoff");
    }
    if (fair_ho) {
        fprintf(stderr, "== fair handoff: hilock_fair_acquire beside the mutex, alternated, "
                "%d x %d handoffs each\n", g_opts.reps, g_opts.handoffs / (g_opts.reps > 0 ? g_opts.reps : 1));
        failed |= scenario_fair_handoff(g_opts.handoffs);
    }
    int herd = has(scen, "herd"), fair_herd = has(scen, "fair_herd");
    for (int i = 0; i < ngrid && (herd || fair_herd); i++) {
        if (herd) {
            fprintf(stderr, "== herd: hilock, %d processes x %d waiters\n", grid[i][0], grid[i][1]);
            failed |= scenario_herd(&hilock_impl, grid[i][0], grid[i][1], "herd");
        }
        if (fair_herd) { /* beside the mutex's cell */
            fprintf(stderr, "== fair herd: hilock_fair_acquire, %d processes x %d waiters\n",
                    grid[i][0], grid[i][1]);
            failed |= scenario_herd(&hilock_fair_impl, grid[i][0], grid[i][1], "fair_herd");
        }
    }
    if (has(scen, "waiters")) {
        fprintf(stderr, "== waiters: %d waiters on %d names\n", g_opts.waiters, g_opts.names);
        failed |= scenario_waiters();
    }
    if (has(scen, "throughput")) {
        fprintf(stderr, "== throughput: %d in flight, %d x %.0f s, beside redis-benchmark\n",
                g_opts.inflight, g_opts.reps, g_opts.tp_seconds);
        failed |= scenario_throughput();
    }
    if (has(scen, "redis_cost")) {
        fprintf(stderr, "== redis_cost: Redis's time and CPU per uncontended cycle of each primitive, "
                "beside SET NX PX + compare-and-delete (redis-benchmark)\n");
        failed |= scenario_redis_cost();
    }
    if (has(scen, "renewals")) {
        fprintf(stderr, "== renewals: Redis's time and CPU per renewal of many holds, alone and batched\n");
        failed |= scenario_renewals();
    }
    if (has(scen, "primitives")) {
        fprintf(stderr, "== primitives: mutex, semaphore, read and write lock, fair lock on one name, %d x %.0f s\n",
                g_opts.reps, g_opts.tp_seconds);
        failed |= scenario_primitives();
    }
    if (has(scen, "guarded_write")) {
        fprintf(stderr, "== guarded_write: hilock_hold_eval beside a plain EVALSHA, %d blocks alternated\n",
                g_opts.reps);
        failed |= scenario_guarded_write();
    }
    if (has(scen, "election")) {
        fprintf(stderr, "== election: a leader killed or resigned, to the new leader observed, %d rounds\n",
                g_opts.reps);
        failed |= scenario_election();
    }
    if (has(scen, "multi_lock")) {
        fprintf(stderr, "== multi_lock: a multi-lock of 2 and 8 names beside that many single locks, "
                "%d blocks alternated\n", g_opts.reps);
        failed |= scenario_multi_lock();
    }
    if (has(scen, "fairness")) {
        fprintf(stderr, "== fairness: %d processes x %d loops on one name, hold %d ms, %.1f s per "
                "primitive\n", g_opts.fair_procs, g_opts.fair_loops, g_opts.fair_hold_ms,
                g_opts.fair_seconds);
        failed |= scenario_fairness();
    }
    if (has(scen, "polling")) {
        fprintf(stderr, "== polling baseline: handoff, %d handoffs\n", g_opts.poll_handoffs);
        failed |= scenario_handoff(&polling_impl, g_opts.poll_handoffs, "polling_baseline");
        for (int i = 0; i < ngrid; i++) {
            if (grid[i][0] * grid[i][1] > 512) continue; /* polls 100x/s per waiter */
            fprintf(stderr, "== polling baseline: herd, %d processes x %d waiters\n", grid[i][0], grid[i][1]);
            failed |= scenario_herd(&polling_impl, grid[i][0], grid[i][1], "polling_baseline");
        }
    }
    if (cl_handoff) {
        fprintf(stderr, "== cluster handoff: standalone, classic, sharded alternated, %d x %d handoffs each\n",
                g_opts.cluster_reps, g_opts.cluster_handoffs);
        failed |= scenario_cluster_handoff();
    }
    if (cl_tp) {
        fprintf(stderr, "== cluster throughput: %d in flight, standalone, classic, sharded alternated, "
                "%d x %.0f s each\n", g_opts.inflight, g_opts.cluster_reps, g_opts.tp_seconds);
        failed |= scenario_cluster_throughput();
    }
    if (cl_bus) {
        fprintf(stderr, "== cluster bus: %d releases per mode, CLUSTER INFO of every node\n",
                g_opts.bus_releases);
        failed |= scenario_cluster_bus();
    }
    if (rl_acq) {
        fprintf(stderr, "== redlock acquire: uncontended, one master, %s, a Redlock of one alternated, "
                "%d x %d cycles each\n", g_opts.redlock_url, g_opts.redlock_reps, g_opts.redlock_cycles);
        failed |= scenario_redlock_acquire();
    }
    if (rl_ho) {
        fprintf(stderr, "== redlock handoff: one master, %s alternated, %d x %d handoffs each\n",
                g_opts.redlock_url, g_opts.redlock_reps, g_opts.redlock_handoffs);
        failed |= scenario_redlock_handoff();
    }
    if (tls) failed |= scenario_tls(); /* it says what it runs, or why not */
    targets();
    fprintf(stderr, "== %.1f s%s\n", (double)(now_ns() - t0) / 1e9,
            failed ? "; some scenario had errors (see above)" : "");
    return failed ? 1 : 0;
}
