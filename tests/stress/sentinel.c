/* hilock-stress, sentinel phase: the workers of worker.c on a
 * redis-sentinel:// URL, against the harness's master, replica and three
 * sentinels on loopback (tests/support/sentinel.c: quorum 2, down-after
 * 1000 ms), while the parent injects one fault at a time, chosen at random:
 *   failover_paused  CLIENT PAUSE WRITE on the master until its replica has
 *               every byte, then SENTINEL FAILOVER (the failover an operator
 *               makes: no write is lost, so no limit window);
 *   failover    a plain SENTINEL FAILOVER: Redis 7's Sentinel promotes the
 *               replica without stopping the old master, which takes (and
 *               loses) writes until the clients hear +switch-master, and is
 *               made a replica only about 10 s later. Grants made there are
 *               lost by Redis's design: a limit window (stress.h,
 *               limit_from) from the failover until one lease after the
 *               old master became a replica;
 *   kill9       kill -9 of the master; once the sentinels have promoted its
 *               replica it is restarted (empty) on its port as a replica of
 *               the new master. A grant it had not yet replicated is lost
 *               with it: a limit window from the kill to one lease after;
 *   sentinel_kill9  kill -9 of one sentinel (never two at once), restarted
 *               on its port from its own sentinel.conf 2-10 s later, so
 *               the faults in between meet two sentinels of three;
 *   kill_normal, kill_pubsub   CLIENT KILL TYPE normal|pubsub on the master.
 * After each fault the parent waits until the set has settled (one master,
 * its replica in step, every live sentinel naming that master with no
 * failover under way, knowing the replica and the other live sentinels),
 * so that the next fault finds a set an operator would leave running.
 * What went wrong around a fault without being hilock's doing (a failover
 * refused or not done in time) is counted as an incident. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "hilock/hilock.h"
#include "support/sentinelenv.h"
#include "stress/stress.h"

#define SETTLE_MS 40000
#define PROMOTE_MS 20000
#define PAUSE_MS 5000           /* CLIENT PAUSE WRITE of a paused failover */
#define DRAIN_RESERVE_MS 8000   /* for the drain, before its rate is known */
#define FOREVER (LLONG_MAX / 2)

static test_sentinel S;
static const stress_cfg *wcfg;
static char logdir[64];
static stress_faults incidents;
static long long sentinel_back_at[TEST_SENTINELS]; /* when a killed one restarts; 0: up */
static long long killed_at[TEST_SENTINELS];
static char why_not[256];                           /* why the set has not settled */

/* ---- Small things ------------------------------------------------------------ */

static int rnd_in(unsigned *rnd, int lo, int hi) {
    return lo + (int)(rand_r(rnd) % (unsigned)(hi - lo + 1));
}

static void pause_ms(unsigned *rnd, int lo, int hi) {
    test_msleep(rnd_in(rnd, lo, hi));
}

/* The value of `name` in a flat [field, value, ...] array, or "". */
static const char *field(const redisReply *a, const char *name) {
    if (a == NULL || a->type != REDIS_REPLY_ARRAY) return "";
    for (size_t i = 0; i + 1 < a->elements; i += 2)
        if (a->element[i]->type == REDIS_REPLY_STRING && strcmp(a->element[i]->str, name) == 0 &&
            a->element[i + 1]->type == REDIS_REPLY_STRING)
            return a->element[i + 1]->str;
    return "";
}

static char role_ch(const test_redis *r) {
    int c = test_redis_role(r);
    return c ? (char)c : '-';
}

static test_redis *other(test_redis *m) {
    return m == &S.node[0] ? &S.node[1] : &S.node[0];
}

static int live_sentinels(void) {
    int n = 0;
    for (int i = 0; i < TEST_SENTINELS; i++) n += S.sentinel[i].pid > 0;
    return n;
}

/* Limit windows (stress.h): every name lives on the one master. A window
 * that is still open keeps its start. */
static void open_window(long long from, long long until) {
    for (int k = 0; k < wcfg->names; k++) {
        if (sh->limit_from[k] == 0 || sh->limit_until[k] < from) sh->limit_from[k] = from;
        if (sh->limit_until[k] < until) sh->limit_until[k] = until;
    }
}

/* Close a window opened until FOREVER at `until` (not before an older
 * window's end). */
static void end_window(long long until, const long long *before) {
    for (int k = 0; k < wcfg->names; k++) sh->limit_until[k] = until > before[k] ? until : before[k];
}

/* The node's log, appended to logdir/node-PORT.log before its dir goes. */
static void save_node_log(const test_redis *r) {
    char from[256], to[128];
    if (r->dir[0] == '\0') return;
    snprintf(from, sizeof(from), "%s/redis.log", r->dir);
    snprintf(to, sizeof(to), "%s/node-%d.log", logdir, r->port);
    stress_copy_file(from, to, 1);
}

/* ---- Settled ----------------------------------------------------------------- */

/* Sentinel `sent` names the master (no failover under way, not down), knows
 * the replica (up), and knows `peers` other sentinels up. */
static int sentinel_sees(const test_redis *sent, int mport, int rport, int peers) {
    if (test_sentinel_named_port(sent, S.name) != mport) {
        snprintf(why_not, sizeof(why_not), "sentinel :%d names :%d", sent->port,
                 test_sentinel_named_port(sent, S.name));
        return 0;
    }
    redisReply *m = test_redis_cmd(sent, "SENTINEL MASTER %s", S.name);
    redisReply *rs = test_redis_cmd(sent, "SENTINEL REPLICAS %s", S.name);
    redisReply *ss = test_redis_cmd(sent, "SENTINEL SENTINELS %s", S.name);
    int ok = strcmp(field(m, "flags"), "master") == 0, replica = 0, up = 0;
    if (!ok) snprintf(why_not, sizeof(why_not), "sentinel :%d: master flags %s", sent->port, field(m, "flags"));
    for (size_t i = 0; ok && rs && rs->type == REDIS_REPLY_ARRAY && i < rs->elements; i++) {
        const redisReply *e = rs->element[i];
        if (strcmp(field(e, "flags"), "slave") != 0) {
            snprintf(why_not, sizeof(why_not), "sentinel :%d: replica :%s flags %s", sent->port,
                     field(e, "port"), field(e, "flags"));
            ok = 0;
        }
        /* Its link status, as the sentinel saw it, may be up to 10 s old
         * (a replica's INFO period): the data nodes tell (settled). */
        if (atoi(field(e, "port")) == rport) replica = 1;
    }
    if (ok && !replica) {
        snprintf(why_not, sizeof(why_not), "sentinel :%d does not know the replica :%d", sent->port, rport);
        ok = 0;
    }
    for (size_t i = 0; ok && ss && ss->type == REDIS_REPLY_ARRAY && i < ss->elements; i++)
        up += strcmp(field(ss->element[i], "flags"), "sentinel") == 0;
    if (ok && up < peers) {
        snprintf(why_not, sizeof(why_not), "sentinel :%d knows %d sentinels up, not %d", sent->port, up, peers);
        ok = 0;
    }
    if (m) freeReplyObject(m);
    if (rs) freeReplyObject(rs);
    if (ss) freeReplyObject(ss);
    return ok;
}

static int settled(void) {
    test_redis *m = test_sentinel_master(&S), *r = m ? other(m) : NULL;
    if (m == NULL || r->pid <= 0) {
        snprintf(why_not, sizeof(why_not), "no single master (roles %c/%c)", role_ch(&S.node[0]),
                 role_ch(&S.node[1]));
        return 0;
    }
    char mport[32];
    snprintf(mport, sizeof(mport), "master_port:%d\r", m->port);
    if (!test_redis_says(r, "INFO replication", "role:slave", mport, "master_link_status:up", "master_sync_in_progress:0",
              NULL) ||
        !test_redis_says(m, "INFO replication", "connected_slaves:1", "state=online", NULL)) {
        snprintf(why_not, sizeof(why_not), "replica :%d not in step with :%d", r->port, m->port);
        return 0;
    }
    /* Link up is not enough: a replica applies nothing while it is paused
     * (the old master of a paused failover, made a replica before its
     * CLIENT PAUSE WRITE ends, leaves its master's stream unapplied). */
    long long mo = test_redis_repl_num(m, "master_repl_offset"), ro = test_redis_repl_num(r, "slave_repl_offset");
    if (mo < 0 || ro < mo) {
        snprintf(why_not, sizeof(why_not), "replica :%d has applied %lld of :%d's %lld bytes", r->port, ro,
                 m->port, mo);
        return 0;
    }
    int peers = live_sentinels() - 1;
    for (int i = 0; i < TEST_SENTINELS; i++)
        if (S.sentinel[i].pid > 0 && !sentinel_sees(&S.sentinel[i], m->port, r->port, peers)) return 0;
    return 1;
}

/* Until settled, at most ms. A wait longer than a second is told, with
 * what it waited on (the first reasons). */
static int wait_settled(int ms) {
    long long t = test_now_ms(), until = t + ms;
    char seen[4][sizeof(why_not)];
    int nseen = 0, ok;
    while (!(ok = settled()) && test_now_ms() <= until) {
        if (nseen == 0 || (nseen < 4 && strcmp(seen[nseen - 1], why_not) != 0))
            snprintf(seen[nseen++], sizeof(seen[0]), "%s", why_not);
        test_msleep(100);
    }
    long long took = test_now_ms() - t;
    if (!ok || took > 1000) {
        char list[4 * sizeof(why_not) + 16] = "";
        for (int i = 0; i < nseen; i++) {
            strcat(list, i ? "; then " : "");
            strcat(list, seen[i]);
        }
        stress_say("  (%s after %lld ms, waiting on: %s)", ok ? "settled" : "NOT settled", took, list);
    }
    return ok;
}

/* On a failure: who says what. */
static void show_state(void) {
    for (int i = 0; i < 2; i++)
        stress_say("node :%d: %s, role %c", S.node[i].port, S.node[i].pid > 0 ? "running" : "down",
                   role_ch(&S.node[i]));
    for (int i = 0; i < TEST_SENTINELS; i++)
        stress_say("sentinel :%d: %s, names :%d", S.sentinel[i].port, S.sentinel[i].pid > 0 ? "running" : "down",
                   test_sentinel_named_port(&S.sentinel[i], S.name));
}

/* ---- Faults ------------------------------------------------------------------ */

/* The old master still says master after a SENTINEL FAILOVER: the
 * sentinels make it a replica only when they see it in an INFO (every 10 s)
 * more than 8 s after the failover, so 10-20 s later. Three times in four
 * we do what they would do, sooner (0-2 s after the new master is named),
 * as an operator might; then the next fault comes sooner too. */
static void demote(test_redis *old, const test_redis *nm, unsigned *rnd, int *by_us) {
    *by_us = rand_r(rnd) % 4 != 0;
    if (!*by_us) return;
    pause_ms(rnd, 0, 2000);
    redisReply *rep = test_redis_cmd(old, "REPLICAOF 127.0.0.1 %d", nm->port);
    if (rep == NULL || rep->type == REDIS_REPLY_ERROR) *by_us = 0;
    if (rep) freeReplyObject(rep);
}

static int fault_failover(stress_faults *f, unsigned *rnd, int paused) {
    test_redis *old = test_sentinel_master(&S);
    if (old == NULL) return -1;
    long long before[MAX_NAMES], t = test_now_ms();
    for (int k = 0; k < wcfg->names; k++) before[k] = sh->limit_until[k];
    if (!paused) open_window(t, FOREVER);
    int rc = paused ? test_sentinel_failover_paused(&S, PAUSE_MS) : test_sentinel_failover(&S);
    if (rc != 0) {
        if (!paused) end_window(test_now_ms() + wcfg->lease_ms + 1000, before);
        stress_fault(&incidents, "failover_refused");
        stress_say("%s: refused (see above)", paused ? "failover_paused" : "failover");
        return 0;
    }
    test_redis *nm = test_sentinel_wait_new_master(&S, old, PROMOTE_MS);
    long long named = test_now_ms() - t, demoted = -1;
    int by_us = 0;
    if (nm != NULL) demote(old, nm, rnd, &by_us);
    /* The old master takes writes until it is a replica. */
    long long until = test_now_ms() + SETTLE_MS;
    while (test_redis_role(old) != 's' && test_now_ms() < until) test_msleep(50);
    if (test_redis_role(old) == 's') demoted = test_now_ms() - t;
    if (!paused) end_window(test_now_ms() + wcfg->lease_ms + 1000, before);
    if (nm == NULL) {
        stress_fault(&incidents, "failover_not_done");
        stress_say("%s: no new master after %d ms", paused ? "failover_paused" : "failover", PROMOTE_MS);
        return 0;
    }
    stress_fault(f, paused ? "failover_paused" : "failover");
    stress_say("%s: %s:%d named master after %lld ms; the old master :%d a replica after %lld ms (%s)%s",
               paused ? "failover_paused" : "failover", paused ? "writes paused, " : "", nm->port, named,
               old->port, demoted, by_us ? "REPLICAOF from us" : "by the sentinels",
               paused ? "" : "; limit window until a lease later");
    return 0;
}

static int fault_kill(stress_faults *f, unsigned *rnd) {
    test_redis *m = test_sentinel_master(&S);
    if (m == NULL) return -1;
    long long t = test_now_ms();
    open_window(t, t + wcfg->lease_ms + 1000);
    test_redis_kill(m); /* SIGKILL; its dir (and log) kept */
    save_node_log(m);
    test_redis *nm = test_sentinel_wait_new_master(&S, m, PROMOTE_MS);
    long long took = test_now_ms() - t;
    if (nm == NULL) {
        stress_fault(&incidents, "kill9_not_promoted");
        stress_say("kill9: master :%d killed, no new master after %lld ms", m->port, took);
        return -1;
    }
    pause_ms(rnd, 200, 1500);
    int port = m->port;
    if (test_sentinel_node_restart(&S, m, nm) != 0) {
        stress_fault(&incidents, "restart_failed");
        stress_say("kill9: :%d promoted after %lld ms; :%d did not come back as its replica", nm->port,
                   took, port);
        return -1;
    }
    stress_fault(f, "kill9");
    stress_say("kill9: master :%d killed, :%d promoted after %lld ms; :%d restarted as its replica", port,
               nm->port, took, port);
    return 0;
}

static int fault_client_kill(stress_faults *f, unsigned *rnd) {
    test_redis *m = test_sentinel_master(&S);
    if (m == NULL) return -1;
    int pubsub = rand_r(rnd) % 2;
    long long n = test_redis_int(m, pubsub ? "CLIENT KILL TYPE pubsub" : "CLIENT KILL TYPE normal");
    stress_fault(f, pubsub ? "kill_pubsub" : "kill_normal");
    stress_say("%s: %lld connections of the master :%d", pubsub ? "kill_pubsub" : "kill_normal", n, m->port);
    return 0;
}

static int fault_sentinel_kill(stress_faults *f, unsigned *rnd) {
    if (live_sentinels() < TEST_SENTINELS) return fault_client_kill(f, rnd);
    int i = rnd_in(rnd, 0, TEST_SENTINELS - 1);
    test_redis_kill(&S.sentinel[i]); /* its dir, with its sentinel.conf, kept */
    killed_at[i] = test_now_ms();
    sentinel_back_at[i] = killed_at[i] + rnd_in(rnd, 2000, 10000);
    stress_fault(f, "sentinel_kill9");
    stress_say("sentinel_kill9: sentinel :%d killed, back in %lld ms", S.sentinel[i].port,
               sentinel_back_at[i] - killed_at[i]);
    return 0;
}

/* Restart the sentinels whose time has come (all of them if `all`).
 * Returns how many, or -1 if one would not come back. */
static int restart_sentinels(int all) {
    int n = 0;
    for (int i = 0; i < TEST_SENTINELS; i++) {
        if (sentinel_back_at[i] == 0 || (!all && test_now_ms() < sentinel_back_at[i])) continue;
        sentinel_back_at[i] = 0;
        if (test_sentinel_respawn(&S.sentinel[i]) != 0) {
            stress_fault(&incidents, "sentinel_restart_failed");
            stress_say("sentinel :%d did not come back", S.sentinel[i].port);
            return -1;
        }
        stress_say("sentinel :%d restarted, %lld ms after its kill", S.sentinel[i].port,
                   test_now_ms() - killed_at[i]);
        n++;
    }
    return n;
}

/* One fault, among those that fit in the time left (a failover and the
 * settling after it take 3-20 s, see demote; a kill -9 about 5 s). */
static int one_fault(stress_faults *f, unsigned *rnd, long long left_ms) {
    int roll = rnd_in(rnd, 0, 99);
    if (roll < 25 && left_ms > 16000) return fault_failover(f, rnd, 1);
    if (roll < 35 && left_ms > 16000) return fault_failover(f, rnd, 0);
    if (roll < 55 && left_ms > 12000) return fault_kill(f, rnd);
    if (roll < 70) return fault_sentinel_kill(f, rnd);
    return fault_client_kill(f, rnd);
}

/* ---- The phase ------------------------------------------------------------------ */

static int fault_loop(stress_faults *f, long long end_ms) {
    unsigned rnd = (unsigned)time(NULL) ^ (unsigned)getpid();
    long long since = test_now_ms();
    stress_say("seed %u", rnd);
    for (;;) {
        pause_ms(&rnd, 300, 1500);
        stress_say_errors();
        int back = restart_sentinels(0);
        if (back < 0) return -1;
        if (back > 0 && !wait_settled(SETTLE_MS)) {
            stress_say("the set has not settled after a sentinel restart: %s", why_not);
            return -1;
        }
        long long left = end_ms - stress_drain_estimate(wcfg, since, 2.5, DRAIN_RESERVE_MS) - 1000 - test_now_ms();
        if (left <= 0) break;
        if (sh->crashed) {
            stress_say("a worker crashed: no more faults");
            break;
        }
        if (one_fault(f, &rnd, left) == 0 && wait_settled(SETTLE_MS)) continue;
        stress_say("the set has not settled: %s", why_not);
        return -1;
    }
    return restart_sentinels(1) < 0 ? -1 : 0;
}

static void print_incidents(void) {
    if (incidents.count == 0) return;
    printf("hilock-stress: sentinel: incidents (not faults of hilock):");
    for (int i = 0; i < incidents.count; i++) printf(" %s=%ld", incidents.kind[i], incidents.n[i]);
    printf("\n");
}

/* On a violation or a failure: every server's log into logdir. */
static void keep_logs(void) {
    char from[256], to[128];
    for (int i = 0; i < 2; i++) save_node_log(&S.node[i]);
    for (int i = 0; i < TEST_SENTINELS; i++) {
        if (S.sentinel[i].dir[0] == '\0') continue;
        snprintf(from, sizeof(from), "%s/sentinel.log", S.sentinel[i].dir);
        snprintf(to, sizeof(to), "%s/sentinel-%d.log", logdir, S.sentinel[i].port);
        stress_copy_file(from, to, 0);
        snprintf(from, sizeof(from), "%s/sentinel.conf", S.sentinel[i].dir);
        snprintf(to, sizeof(to), "%s/sentinel-%d.conf", logdir, S.sentinel[i].port);
        stress_copy_file(from, to, 0);
    }
}

int stress_sentinel(stress_cfg *cfg, long long end_ms, stress_faults *faults, long *stranded,
                    int *bad_exits) {
    long long t0 = test_now_ms();
    char events[96];
    wcfg = cfg;
    memset(&incidents, 0, sizeof(incidents));
    memset(sentinel_back_at, 0, sizeof(sentinel_back_at));
    snprintf(logdir, sizeof(logdir), "/tmp/hilock-stress-sentinel-XXXXXX");
    if (mkdtemp(logdir) == NULL) { perror("mkdtemp"); return -1; }
    snprintf(events, sizeof(events), "%s/events.log", logdir);
    stress_log_open(t0, events);
    if (test_sentinel_start(&S) != 0) {
        fprintf(stderr, "hilock-stress: the sentinels did not start\n");
        stress_log_close();
        stress_rm_rf(logdir);
        return -1;
    }
    snprintf(cfg->url, sizeof(cfg->url), "%s", S.url);
    stress_say("sentinel: %d processes x %d waiters on %d names, %lld s, master :%d, replica :%d, %s",
               cfg->procs, cfg->per_proc, cfg->names, (end_ms - test_now_ms() + 999) / 1000, S.node[0].port,
               S.node[1].port, S.url);
    pid_t *kids = stress_workers_start(cfg);
    int rc = kids ? fault_loop(faults, end_ms) : -1;
    if (rc != 0) show_state();
    if (kids) {
        long long t = test_now_ms();
        *bad_exits = stress_workers_finish(kids, cfg->procs, 30000, stranded);
        stress_say("the workers drained in %lld ms", test_now_ms() - t);
    }
    print_incidents();
    int keep = rc != 0 || *stranded || *bad_exits || sh->overlaps || sh->regressions || sh->double_callbacks;
    if (keep) {
        keep_logs();
        stress_say("the servers' logs and the event log are kept in %s", logdir);
    }
    stress_log_close();
    test_sentinel_stop(&S); /* every server, by pid */
    if (!keep) stress_rm_rf(logdir);
    return rc;
}
