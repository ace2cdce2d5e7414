/* hilock-stress, redlock phase: the workers of worker.c on a redlock://
 * URL over five independent masters on loopback (no persistence, no
 * replication), while the parent injects random faults, never making more
 * than a minority (2 of 5) of the masters unavailable at once:
 *   kill9, kill9_pair  kill -9 of one master, or of two at once; each is
 *               restarted EMPTY on its port (a fresh dir: no data) after
 *               longer than the workers' lease, plus 0.5-3 s: Redlock's
 *               "delayed restart" (restart_empty counts them). Whatever it
 *               held has expired everywhere by then, so exclusion must hold
 *               with no limit window at all, and fences keep increasing
 *               (the restarted master draws them from its clock);
 *   stall       DEBUG SLEEP of one master for 0.2-3 s (at times longer than
 *               the request timeout, and nearly the lease): tries and
 *               renewals answered by the other four, a late answer (or none)
 *               from the sleeper;
 *   script_flush  SCRIPT FLUSH on one master: its next EVALSHA of each
 *               script meets NOSCRIPT and is sent again as EVAL, as after
 *               a restart, with the keys still there;
 *   kill_normal, kill_pubsub   CLIENT KILL TYPE normal|pubsub on one master.
 * Faults overlap in time (a master stays down while others stall or lose
 * their connections). Kills and stalls stay within the minority, counting
 * a master back for less than a second as still out (the clients are
 * reconnecting); connection kills do not: one on a third master while two
 * are out leaves the clients a minority for a moment, and requests then
 * wait for the masters or end in error (counted by cause). Overlaps and
 * fence regressions must be zero. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include "hilock/hilock.h"
#include "support/harness.h"
#include "stress/stress.h"

#define NM 5
#define MAX_DOWN 2                /* a minority of NM */
#define DRAIN_RESERVE_MS 8000
#define RESTART_TRIES_MS 10000    /* a restart on the same port, retried this long */
#define BACK_GRACE_MS 1000        /* a master back counts as out this long */

enum { UP, KILLED, STALLED };

static test_redis m[NM];
static int port[NM], state[NM];
static long long since[NM];       /* when it went down, or came back */
static long long back_at[NM];     /* KILLED: when it restarts (empty) */
static pid_t sleeper[NM];         /* STALLED: the DEBUG SLEEP child */
static const stress_cfg *wcfg;
static char logdir[64];
static stress_faults incidents;

static int rnd_in(unsigned *rnd, int lo, int hi) {
    return lo + (int)(rand_r(rnd) % (unsigned)(hi - lo + 1));
}

/* Out of reach for the clients: killed, stalled, or back less than a
 * second ago (their connections come back within reconnect_max_ms). */
static int out(int i) {
    return state[i] != UP || test_now_ms() - since[i] < BACK_GRACE_MS;
}

static int unavailable(void) {
    int n = 0;
    for (int i = 0; i < NM; i++) n += out(i);
    return n;
}

/* A master that is up (and has been for a second, if `settled`), at
 * random, or -1. */
static int pick_up(unsigned *rnd, int settled) {
    int up[NM], n = 0;
    for (int i = 0; i < NM; i++)
        if (settled ? !out(i) : state[i] == UP) up[n++] = i;
    return n ? up[rand_r(rnd) % (unsigned)n] : -1;
}

/* The node's log, appended to logdir/node-PORT.log before its dir goes. */
static void save_node_log(int i) {
    char from[256], to[128];
    if (m[i].dir[0] == '\0') return;
    snprintf(from, sizeof(from), "%s/redis.log", m[i].dir);
    snprintf(to, sizeof(to), "%s/node-%d.log", logdir, port[i]);
    stress_copy_file(from, to, 1);
}

static void kill_one(int i, unsigned *rnd) {
    test_redis_kill(&m[i]); /* SIGKILL */
    save_node_log(i);
    test_redis_stop(&m[i]); /* its dir goes: it comes back empty */
    state[i] = KILLED;
    since[i] = test_now_ms();
    back_at[i] = since[i] + wcfg->lease_ms + rnd_in(rnd, 500, 3000);
}

static int fault_kill(stress_faults *f, unsigned *rnd) {
    int room = MAX_DOWN - unavailable(), two = room >= 2 && rand_r(rnd) % 3 == 0;
    int a = room > 0 ? pick_up(rnd, 1) : -1;
    if (a < 0) return 0;
    kill_one(a, rnd);
    int b = two ? pick_up(rnd, 1) : -1;
    if (b >= 0) kill_one(b, rnd);
    stress_fault(f, b >= 0 ? "kill9_pair" : "kill9");
    if (b >= 0)
        stress_say("kill9_pair: masters :%d and :%d killed, back empty in %lld and %lld ms", port[a], port[b],
                   back_at[a] - since[a], back_at[b] - since[b]);
    else
        stress_say("kill9: master :%d killed, back empty in %lld ms", port[a], back_at[a] - since[a]);
    return 0;
}

static int fault_stall(stress_faults *f, unsigned *rnd) {
    int i = unavailable() < MAX_DOWN ? pick_up(rnd, 1) : -1;
    if (i < 0) return 0;
    int ms = rnd_in(rnd, 200, 3000);
    char secs[16];
    snprintf(secs, sizeof(secs), "%d.%03d", ms / 1000, ms % 1000);
    sleeper[i] = test_redis_debug_sleep(&m[i], secs);
    if (sleeper[i] < 0) { sleeper[i] = 0; return 0; }
    state[i] = STALLED;
    since[i] = test_now_ms();
    stress_fault(f, "stall");
    stress_say("stall: DEBUG SLEEP %s on :%d", secs, port[i]);
    return 0;
}

static int fault_client_kill(stress_faults *f, unsigned *rnd) {
    int i = pick_up(rnd, 0), pubsub = rand_r(rnd) % 3 == 0;
    if (i < 0) return 0;
    long long n = test_redis_int(&m[i], pubsub ? "CLIENT KILL TYPE pubsub" : "CLIENT KILL TYPE normal");
    stress_fault(f, pubsub ? "kill_pubsub" : "kill_normal");
    stress_say("%s: %lld connections of :%d", pubsub ? "kill_pubsub" : "kill_normal", n, port[i]);
    return 0;
}

/* Stalls that ended; killed masters whose time has come, restarted empty
 * on their port. Returns -1 when one would not come back. */
static int tend(stress_faults *f) {
    for (int i = 0; i < NM; i++) {
        if (state[i] == STALLED) {
            int st = test_wait(sleeper[i], 0);
            if (st < 0) continue;
            if (st != 0) stress_fault(&incidents, "stall_not_ok");
            state[i] = UP;
            sleeper[i] = 0;
            stress_say("stall: :%d awake after %lld ms", port[i], test_now_ms() - since[i]);
            since[i] = test_now_ms();
        } else if (state[i] == KILLED && test_now_ms() >= back_at[i]) {
            if (test_redis_start_debuggable(&m[i], port[i]) != 0) {
                if (test_now_ms() - back_at[i] < RESTART_TRIES_MS) continue; /* the port, busy a moment */
                stress_fault(&incidents, "restart_failed");
                stress_say("master :%d could not be restarted on its port", port[i]);
                return -1;
            }
            state[i] = UP;
            stress_fault(f, "restart_empty");
            stress_say("restart_empty: :%d back, empty, %lld ms after its kill", port[i], test_now_ms() - since[i]);
            since[i] = test_now_ms();
        }
    }
    return 0;
}

/* SCRIPT FLUSH: the next EVALSHA of each script there meets NOSCRIPT and
 * goes again as EVAL, as after a restart, but with every key still there. */
static int fault_script_flush(stress_faults *f, unsigned *rnd) {
    int i = pick_up(rnd, 0);
    if (i < 0) return 0;
    redisContext *k = test_redis_connect(&m[i]);
    redisReply *rep = k ? redisCommand(k, "SCRIPT FLUSH") : NULL;
    if (rep) freeReplyObject(rep);
    if (k) redisFree(k);
    stress_fault(f, "script_flush");
    stress_say("script_flush: SCRIPT FLUSH on :%d", port[i]);
    return 0;
}

/* One fault, among those whose masters are back before the drain (with
 * two of five out, every grant needs all three others, and the drain
 * would take twice as long). */
static int one_fault(stress_faults *f, unsigned *rnd, long long left_ms) {
    int roll = rnd_in(rnd, 0, 99);
    if (roll < 30 && left_ms > wcfg->lease_ms + 4000) return fault_kill(f, rnd);
    if (roll < 50 && left_ms > 4000) return fault_stall(f, rnd);
    if (roll < 60) return fault_script_flush(f, rnd);
    return fault_client_kill(f, rnd);
}

static int fault_loop(stress_faults *f, long long end_ms) {
    unsigned rnd = (unsigned)time(NULL) ^ (unsigned)getpid();
    long long start = test_now_ms();
    stress_say("seed %u", rnd);
    for (;;) {
        test_msleep(rnd_in(&rnd, 200, 1000));
        stress_say_errors();
        if (tend(f) != 0) return -1;
        long long left = end_ms - stress_drain_estimate(wcfg, start, 2.5, DRAIN_RESERVE_MS) - 500 - test_now_ms();
        if (left <= 0) break;
        if (sh->crashed) {
            stress_say("a worker crashed: no more faults");
            break;
        }
        one_fault(f, &rnd, left);
    }
    return 0;
}

static void print_incidents(void) {
    if (incidents.count == 0) return;
    printf("hilock-stress: redlock: incidents (not faults of hilock):");
    for (int i = 0; i < incidents.count; i++) printf(" %s=%ld", incidents.kind[i], incidents.n[i]);
    printf("\n");
}

int stress_redlock(stress_cfg *cfg, long long end_ms, stress_faults *faults, long *stranded,
                   int *bad_exits) {
    long long t0 = test_now_ms();
    char events[96];
    int rc = 0;
    wcfg = cfg;
    memset(&incidents, 0, sizeof(incidents));
    memset(m, 0, sizeof(m));
    memset(state, 0, sizeof(state));
    memset(sleeper, 0, sizeof(sleeper));
    memset(since, 0, sizeof(since));
    snprintf(logdir, sizeof(logdir), "/tmp/hilock-stress-redlock-XXXXXX");
    if (mkdtemp(logdir) == NULL) { perror("mkdtemp"); return -1; }
    snprintf(events, sizeof(events), "%s/events.log", logdir);
    stress_log_open(t0, events);
    size_t n = (size_t)snprintf(cfg->url, sizeof(cfg->url), "redlock://");
    for (int i = 0; i < NM && rc == 0; i++) {
        if (test_redis_start_debuggable(&m[i], 0) != 0) {
            fprintf(stderr, "hilock-stress: cannot start redis-server\n");
            rc = -1;
            break;
        }
        port[i] = m[i].port;
        n += (size_t)snprintf(cfg->url + n, sizeof(cfg->url) - n, "%s127.0.0.1:%d", i ? "," : "", port[i]);
    }
    pid_t *kids = NULL;
    if (rc == 0) {
        stress_say("redlock: %d processes x %d waiters on %d names, %lld s, %s", cfg->procs, cfg->per_proc,
                   cfg->names, (end_ms - test_now_ms() + 999) / 1000, cfg->url);
        kids = stress_workers_start(cfg);
        rc = kids ? fault_loop(faults, end_ms) : -1;
    }
    if (kids) {
        long long t = test_now_ms();
        *bad_exits = stress_workers_finish(kids, cfg->procs, 30000, stranded);
        stress_say("the workers drained in %lld ms", test_now_ms() - t);
    }
    for (int i = 0; i < NM; i++) /* the DEBUG SLEEP children, by pid */
        if (sleeper[i] > 0 && test_wait(sleeper[i], 5000) < 0) {
            kill(sleeper[i], SIGKILL);
            test_wait(sleeper[i], 5000);
        }
    print_incidents();
    int keep = rc != 0 || *stranded || *bad_exits || sh->overlaps || sh->regressions || sh->double_callbacks;
    if (keep) {
        for (int i = 0; i < NM; i++) save_node_log(i);
        stress_say("the servers' logs and the event log are kept in %s", logdir);
    }
    stress_log_close();
    for (int i = 0; i < NM; i++) test_redis_stop(&m[i]); /* by pid */
    if (!keep) stress_rm_rf(logdir);
    return rc;
}
