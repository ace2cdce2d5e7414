/* The matrix: workloads, the faults (nemesis functions) and, for every
 * case, what hilock promises under it. The promises are here and nowhere
 * else: adjust a cell's bound in its row of nem_cases[].
 *
 * A nemesis function runs after the workers have warmed up; it waits for
 * the moment it needs (a holder, a waiter), injects its fault, lets it last
 * c->fault_ms, and heals (nem_heal: rules flushed, stopped processes
 * continued, clock rates back to 0). The victim, when there is one, is the
 * process whose recovery after the heal is measured. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "support/harness.h"
#include "nemesis/nemesis.h"

const char *const nem_topo_name[NTOPOS] = {"standalone", "sentinel", "redlock", "cluster"};

/* ---- Workloads ---------------------------------------------------------------- */

/* Process 0 holds for longer than the lease (so a fault on it outlasts its
 * lease); the others contend with short holds. Every hold does
 * read-modify-writes on the fenced resource. */
#define LONG_HOLDER(wait) {1, wait, 2500, 3500, 1500, 2500, 0}
#define CONTENDER(wait) {2, wait, 5, 40, 0, 30, 0}
static const nem_workload wl_mutex = {
    .prim = PRIM_MUTEX, .lease_ms = 2000, .fenced = 1, .rmw = 1, .nprocs = 4,
    .role = {LONG_HOLDER(8000), CONTENDER(8000), CONTENDER(8000), CONTENDER(8000)}};
static const nem_workload wl_mutex_nofence = {
    .prim = PRIM_MUTEX, .lease_ms = 2000, .fenced = 0, .rmw = 1, .nprocs = 4,
    .role = {LONG_HOLDER(8000), CONTENDER(8000), CONTENDER(8000), CONTENDER(8000)}};

/* Clock faults: process 0 holds past the lease; probers try once every 1-3
 * ms, so the lock is taken within milliseconds of expiring in Redis. */
#define PROBER {1, 0, 5, 20, 1, 3, 0}
static const nem_workload wl_clock3s = {
    .prim = PRIM_MUTEX, .lease_ms = 3000, .fenced = 1, .rmw = 1, .nprocs = 3,
    .role = {{1, 10000, 6000, 7000, 300, 600, 0}, PROBER, PROBER}};
static const nem_workload wl_clock3s_nofence = {
    .prim = PRIM_MUTEX, .lease_ms = 3000, .fenced = 0, .rmw = 1, .nprocs = 3,
    .role = {{1, 10000, 6000, 7000, 300, 600, 0}, PROBER, PROBER}};
static const nem_workload wl_clock30s = {
    .prim = PRIM_MUTEX, .lease_ms = 30000, .fenced = 1, .rmw = 1, .nprocs = 3,
    .role = {{1, 60000, 34000, 36000, 300, 600, 0}, PROBER, PROBER}};

/* A handoff: process 0 holds (for less than a third of its lease: no
 * renewal), releases and thinks; process 1 waits for it meanwhile, so each
 * release should serve it at once. Waits race (no queue in Redis), so only
 * the release message (pub/sub) or the fallback timer at the lease's end
 * (30 s) can wake process 1. */
static const nem_workload wl_handoff = {
    .prim = PRIM_MUTEX, .lease_ms = 30000, .fenced = 1, .rmw = 0, .starve_never = 1, .nprocs = 2,
    .role = {{1, 30000, 1500, 2500, 1500, 2500, 0}, {1, 30000, 100, 200, 300, 600, 0}}};

/* A semaphore of 2 permits, one each. */
static const nem_workload wl_sem = {
    .prim = PRIM_SEM, .permits = 2, .lease_ms = 2000, .fenced = 1, .rmw = 0, .nprocs = 4,
    .role = {LONG_HOLDER(8000), CONTENDER(8000), CONTENDER(8000), CONTENDER(8000)}};
static const nem_workload wl_sem_clock = {
    .prim = PRIM_SEM, .permits = 2, .lease_ms = 3000, .fenced = 1, .rmw = 0, .nprocs = 4,
    .role = {{1, 10000, 6000, 7000, 300, 600, 0}, {1, 10000, 6000, 7000, 300, 600, 0}, PROBER, PROBER}};

/* Failovers (Sentinel, Cluster): waits long enough to ride one through;
 * process 0 holds for long (renewing through the fault). */
static const nem_workload wl_failover = {
    .prim = PRIM_MUTEX, .lease_ms = 2000, .fenced = 1, .rmw = 1, .nprocs = 4,
    .role = {{1, 15000, 12000, 14000, 1500, 2500, 0}, CONTENDER(15000), CONTENDER(15000), CONTENDER(15000)}};

/* The fair lock: as wl_mutex, every wait in one queue. */
static const nem_workload wl_fair = {
    .prim = PRIM_FAIR, .lease_ms = 2000, .fenced = 1, .rmw = 1, .nprocs = 4,
    .role = {LONG_HOLDER(8000), CONTENDER(8000), CONTENDER(8000), CONTENDER(8000)}};

/* The read-write lock: process 0 a writer that holds long, process 1 a
 * writer that contends, processes 2 and 3 readers (reads only, fenced with
 * the last write grant's fence). */
#define READER(wait) {2, wait, 5, 40, 0, 30, 1}
static const nem_workload wl_rw = {
    .prim = PRIM_RW, .lease_ms = 2000, .fenced = 1, .rmw = 1, .nprocs = 4,
    .role = {LONG_HOLDER(8000), CONTENDER(8000), READER(8000), READER(8000)}};

/* Three equal contenders, for a share of the grants (process 0's link is
 * slow); with bounded waiting, and without (pure racing). */
static const nem_workload wl_even = {
    .prim = PRIM_MUTEX, .lease_ms = 2000, .fenced = 1, .rmw = 1, .nprocs = 3,
    .role = {CONTENDER(8000), CONTENDER(8000), CONTENDER(8000)}};
static const nem_workload wl_even_race = {
    .prim = PRIM_MUTEX, .lease_ms = 2000, .fenced = 1, .rmw = 1, .starve_never = 1, .nprocs = 3,
    .role = {CONTENDER(8000), CONTENDER(8000), CONTENDER(8000)}};

/* ---- Fault actions ------------------------------------------------------------- */

int nem_wait_holder(nem_run *r, int proc, int ms) {
    long long until = test_now_ms() + ms;
    (void)r;
    while (!nem_interrupted && test_now_ms() < until) {
        for (int p = proc < 0 ? 0 : proc; p < (proc < 0 ? r->c->wl->nprocs : proc + 1); p++)
            if (nem_sh->holding[p] > 0) return p;
        test_msleep(1);
    }
    return -1;
}

int nem_wait_waiter(nem_run *r, int proc, int ms) {
    long long until = test_now_ms() + ms;
    (void)r;
    while (!nem_interrupted && test_now_ms() < until) {
        if (nem_sh->waiting[proc] > 0 && nem_sh->holding[proc] == 0) return proc;
        test_msleep(1);
    }
    return -1;
}

void nem_event(nem_run *r, const char *fmt, ...) {
    char path[220];
    snprintf(path, sizeof(path), "%s/events.log", r->dir);
    FILE *f = fopen(path, "a");
    if (f == NULL) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(f, "%lld ", (long long)nem_now_ns());
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    va_end(ap);
    fclose(f);
}

void nem_fault_begin(nem_run *r, int victim) {
    r->tl.fault_ns = nem_now_ns();
    r->tl.victim = victim;
    if (victim >= 0) nem_event(r, "fault %s, victim c%d", r->c->fault, victim + 1);
    else nem_event(r, "fault %s", r->c->fault);
}

void nem_heal(nem_run *r) {
    nem_heal_net(&r->net);
    for (int p = 0; p < r->c->wl->nprocs; p++)
        if (r->tl.stop_from[p] && !r->tl.stop_until[p]) {
            kill(r->worker[p], SIGCONT);
            r->tl.stop_until[p] = nem_now_ns();
        }
    for (int i = 0; i < r->nsrv; i++) {
        nem_server *s = &r->srv[i];
        if (s->stopped && s->pid > 0) kill(s->pid, SIGCONT);
        s->stopped = 0;
    }
    r->tl.heal_ns = nem_now_ns();
    nem_event(r, "heal");
}

static nem_server *master(nem_run *r) { return &r->srv[r->master]; }

/* The client's host is cut from every other host, at both ends. */
static void cut_all(nem_run *r, int proc) {
    nem_host *c = r->client[proc];
    r->tl.victim_cut = 1;
    nem_ipt(c, "-A INPUT -i eth0 -j DROP");
    nem_ipt(c, "-A OUTPUT -o eth0 -j DROP");
    for (int i = 0; i < r->net.nhosts; i++) {
        nem_host *h = &r->net.host[i];
        if (h == c) continue;
        nem_ipt(h, "-A INPUT -s %s -j DROP", c->ip);
        nem_ipt(h, "-A OUTPUT -d %s -j DROP", c->ip);
    }
}

/* Two hosts cannot reach each other (both ends). */
static void cut_pair(nem_host *a, nem_host *b) {
    nem_ipt(a, "-A INPUT -s %s -j DROP", b->ip);
    nem_ipt(a, "-A OUTPUT -d %s -j DROP", b->ip);
    nem_ipt(b, "-A INPUT -s %s -j DROP", a->ip);
    nem_ipt(b, "-A OUTPUT -d %s -j DROP", a->ip);
}

/* The port of proc's subscriber connection on server s (CLIENT LIST:
 * flags with P), or -1. */
/* The port of `proc`'s connection to `s`: its subscriber connection
 * (flags P) when want_sub, else its command connection. */
static int conn_port(nem_run *r, int proc, const nem_server *s, int want_sub) {
    redisReply *rep = nem_cmd(s, "CLIENT LIST");
    int port = -1;
    if (rep && rep->type == REDIS_REPLY_STRING) {
        char needle[40];
        snprintf(needle, sizeof(needle), "addr=%s:", r->client[proc]->ip);
        for (char *line = strtok(rep->str, "\n"); line; line = strtok(NULL, "\n")) {
            char *a = strstr(line, needle), *f = strstr(line, " flags=");
            if (a == NULL || f == NULL) continue;
            int sub = 0;
            for (char *k = f + 7; *k && *k != ' '; k++) sub |= *k == 'P';
            if (sub == want_sub) port = atoi(a + strlen(needle));
        }
    }
    if (rep) freeReplyObject(rep);
    return port;
}

/* ---- Nemesis functions ----------------------------------------------------------- */

static void nz_none(nem_run *r) {
    nem_fault_begin(r, -1);
    nem_sleep(r->c->fault_ms);
}

/* Process 0, holding, is cut from everything (Redis, the resource, the
 * other clients) for longer than its lease. */
static void nz_partition_holder(nem_run *r) {
    int v = nem_wait_holder(r, 0, 15000);
    if (v < 0) return;
    nem_fault_begin(r, v);
    cut_all(r, v);
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
}

/* Process 0, holding, is cut from the master alone (the resource stays
 * reachable: it may go on writing there as long as it believes). */
static void nz_cut_holder_redis(nem_run *r) {
    int v = nem_wait_holder(r, 0, 15000);
    if (v < 0) return;
    nem_fault_begin(r, v);
    r->tl.victim_cut = 1;
    cut_pair(r->client[v], master(r)->host);
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
}

/* A contender, waiting, is cut from everything. */
static void nz_partition_waiter(nem_run *r) {
    int v = nem_wait_waiter(r, 1, 5000);
    if (v < 0) return;
    nem_fault_begin(r, v);
    cut_all(r, v);
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
}

/* One way only, between a contender and the master: what it sends is
 * dropped (arg 0), or what it receives (arg 1: its requests run, their
 * replies are lost). */
static void nz_one_way(nem_run *r) {
    int v = 1;
    nem_host *c = r->client[v];
    nem_fault_begin(r, v);
    r->tl.victim_cut = 1;
    if (r->c->arg == 0) nem_ipt(c, "-A OUTPUT -d %s -j DROP", master(r)->host->ip);
    else nem_ipt(c, "-A INPUT -s %s -j DROP", master(r)->host->ip);
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
}

/* One connection of process v to the master goes silent: both directions
 * of it dropped in its host (the subscriber connection when want_sub,
 * else the command connection; the other untouched). Not healed before
 * the end. */
static void blackhole_conn(nem_run *r, int v, int want_sub) {
    int port = -1;
    long long until = test_now_ms() + 3000;
    while (v >= 0 && (port = conn_port(r, v, master(r), want_sub)) < 0 && test_now_ms() < until) test_msleep(20);
    if (port < 0) {
        fprintf(stderr, "hilock-nemesis: no %s connection of c%d found\n", want_sub ? "subscriber" : "command",
                v + 1);
        return;
    }
    nem_host *c = r->client[v];
    nem_fault_begin(r, v);
    nem_ipt(c, "-A OUTPUT -p tcp -d %s --sport %d -j DROP", master(r)->host->ip, port);
    nem_ipt(c, "-A INPUT -p tcp -s %s --dport %d -j DROP", master(r)->host->ip, port);
    nem_sleep(r->c->fault_ms);
}

/* The subscriber connection of process 1, waiting. */
static void nz_blackhole_sub(nem_run *r) { blackhole_conn(r, nem_wait_waiter(r, 1, 10000), 1); }

/* The command connection of process 0, holding. */
static void nz_blackhole_cmd(nem_run *r) { blackhole_conn(r, nem_wait_holder(r, 0, 15000), 0); }

/* Random loss of arg % of the packets, both ways, at every client. */
static void nz_loss(nem_run *r) {
    nem_fault_begin(r, -1);
    for (int p = 0; p < r->c->wl->nprocs; p++) {
        nem_ipt(r->client[p], "-A INPUT -i eth0 -m statistic --mode random --probability 0.%02ld -j DROP", r->c->arg);
        nem_ipt(r->client[p], "-A OUTPUT -o eth0 -m statistic --mode random --probability 0.%02ld -j DROP", r->c->arg);
    }
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
}

static void stop_proc(nem_run *r, int p) {
    kill(r->worker[p], SIGSTOP);
    r->tl.stop_from[p] = nem_now_ns();
}

/* Process 0 is stopped (SIGSTOP) while it holds, longer than its lease. */
static void nz_stop_holder(nem_run *r) {
    int v = nem_wait_holder(r, 0, 15000);
    if (v < 0) return;
    nem_sleep(5); /* inside a read-modify-write, most likely */
    nem_fault_begin(r, v);
    stop_proc(r, v);
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
}

/* A contender is stopped while it waits, once it has waited 300 ms: past
 * starve_ms, so its wait has a place in the queue (the fair lock's waits
 * have one at once). */
static void nz_stop_waiter(nem_run *r) {
    long long until = test_now_ms() + 10000;
    int v = -1;
    while (v < 0 && !nem_interrupted && test_now_ms() < until) {
        if (nem_wait_waiter(r, 1, 5000) < 0) return;
        nem_sleep(300);
        if (nem_sh->waiting[1] > 0 && nem_sh->holding[1] == 0) v = 1;
    }
    if (v < 0) return;
    nem_fault_begin(r, v);
    stop_proc(r, v);
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
}

/* The master is stopped (SIGSTOP), then continued. */
static void nz_stop_master(nem_run *r) {
    nem_fault_begin(r, -1);
    kill(master(r)->pid, SIGSTOP);
    master(r)->stopped = 1;
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
}

/* kill -9 of the master, restarted empty (no persistence) after fault_ms. */
static void nz_kill_master(nem_run *r) {
    nem_fault_begin(r, -1);
    nem_server_kill(master(r));
    nem_sleep(r->c->fault_ms);
    nem_server_restart(master(r));
    nem_heal(r);
}

/* The master's clock runs arg ppm fast (or slow); then process 0, holding,
 * is cut from the master past its lease (its renewals stop), while the
 * probers try every few ms. */
static void nz_clock_rate(nem_run *r) {
    nem_clock_set(master(r), r->c->arg, 0);
    int v = nem_wait_holder(r, 0, 20000);
    if (v < 0) return;
    nem_sleep(200);
    nem_fault_begin(r, v);
    r->tl.victim_cut = 1;
    cut_pair(r->client[v], master(r)->host);
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
    nem_clock_set(master(r), 0, 0);
}

/* The master's clock steps by arg ms while process 0 holds. */
static void nz_clock_step(nem_run *r) {
    int v = nem_wait_holder(r, 0, 15000);
    if (v < 0) return;
    nem_sleep(100);
    nem_fault_begin(r, v);
    nem_clock_set(master(r), 0, r->c->arg);
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
}

/* Process 0, holding, and the master are cut off together from every
 * other server and client (a minority side); the resource stays
 * reachable from both sides. */
static void nz_minority_master(nem_run *r) {
    int v = nem_wait_holder(r, 0, 15000);
    if (v < 0) return;
    nem_host *side[2] = {r->client[v], master(r)->host};
    nem_fault_begin(r, v);
    r->tl.victim_cut = 1;
    for (int i = 0; i < r->net.nhosts; i++) {
        nem_host *h = &r->net.host[i];
        if (h == side[0] || h == side[1] || h == r->res_host) continue;
        cut_pair(side[0], h);
        cut_pair(side[1], h);
    }
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
}

/* kill -9 of the master while process 0 holds; restarted (empty) after
 * fault_ms: a cluster node rejoins as a replica. */
static void nz_kill_master_holding(nem_run *r) {
    int v = nem_wait_holder(r, 0, 15000);
    if (v < 0) return;
    nem_fault_begin(r, -1);
    nem_event(r, "kill -9 of %s", master(r)->host->name);
    nem_server_kill(master(r));
    nem_sleep(r->c->fault_ms);
    nem_server_restart(master(r));
    nem_heal(r);
}

/* Redlock: two masters of five (a minority) cut from every client. */
static void nz_redlock_minority(nem_run *r) {
    nem_fault_begin(r, -1);
    for (int m = 0; m < 2; m++)
        for (int p = 0; p < r->c->wl->nprocs; p++) cut_pair(r->srv[m].host, r->client[p]);
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
}

/* Redlock: the clocks of three masters of five (a majority) run arg ppm
 * fast; then process 0, holding, is cut from them past its lease. */
static void nz_redlock_clock(nem_run *r) {
    for (int m = 0; m < 3; m++) nem_clock_set(&r->srv[m], r->c->arg, 0);
    int v = nem_wait_holder(r, 0, 20000);
    if (v < 0) return;
    nem_sleep(200);
    nem_fault_begin(r, v);
    r->tl.victim_cut = 1;
    for (int m = 0; m < 3; m++) cut_pair(r->client[v], r->srv[m].host);
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
    for (int m = 0; m < 3; m++) nem_clock_set(&r->srv[m], 0, 0);
}

/* The proxy's link delays every chunk by arg ms +- LINK_JITTER_MS, in
 * chunks of at most LINK_CHUNK bytes, for fault_ms (every client's link,
 * or process 0's alone: the case's proxy). */
#define LINK_JITTER_MS 40
#define LINK_CHUNK 64
static void nz_link(nem_run *r) {
    nem_fault_begin(r, r->c->proxy == PROXY_ONE ? 0 : -1);
    nem_event(r, "link: %ld ms +- %d ms, chunks of 1-%d bytes", r->c->arg, LINK_JITTER_MS, LINK_CHUNK);
    nem_sh->link[0].chunk_max = LINK_CHUNK;
    nem_sh->link[0].jitter_ms = LINK_JITTER_MS;
    nem_sh->link[0].delay_ms = (int)r->c->arg;
    nem_sleep(r->c->fault_ms);
    nem_sh->link[0].delay_ms = 0;
    nem_sh->link[0].jitter_ms = 0;
    nem_sh->link[0].chunk_max = 0;
    nem_heal(r);
}

/* Sentinel: the master fails while process 0 holds and the others wait,
 * killed (kill -9; restarted empty after fault_ms, and the sentinels make
 * it a replica) or stopped (SIGSTOP past the failover, down-after 1000 ms;
 * continued at the heal, it comes back believing it is the master until
 * the sentinels make it a replica). Overlaps that begin from the fault
 * until a lease after the sentinels name the new master are asynchronous
 * replication's limit (a renewal the replica missed). */
static void sentinel_failover(nem_run *r, int stop) {
    int v = nem_wait_holder(r, 0, 15000);
    if (v < 0) return;
    int old = r->master;
    nem_fault_begin(r, -1);
    r->tl.repl_from = nem_now_ns();
    nem_event(r, "%s of %s (holder c%d)", stop ? "SIGSTOP" : "kill -9", master(r)->host->name, v + 1);
    if (stop) {
        kill(master(r)->pid, SIGSTOP);
        master(r)->stopped = 1; /* continued by nem_heal */
    } else {
        nem_server_kill(master(r));
    }
    long long until = test_now_ms() + r->c->fault_ms;
    int m = old;
    while (!nem_interrupted && test_now_ms() < until && (m = nem_sentinel_master(r)) == old) test_msleep(20);
    r->tl.repl_until = nem_now_ns() + (int64_t)r->c->wl->lease_ms * 1000000;
    if (m >= 0 && m != old) nem_event(r, "the sentinels name %s", r->srv[m].host->name);
    else nem_event(r, "no new master named in %d ms", r->c->fault_ms);
    long long left = until - test_now_ms();
    if (left > 0) nem_sleep((int)left);
    if (!stop) nem_server_restart(&r->srv[old]);
    if (m >= 0) r->master = m;
    nem_heal(r);
}

static void nz_sentinel_kill(nem_run *r) { sentinel_failover(r, 0); }
static void nz_sentinel_stop(nem_run *r) { sentinel_failover(r, 1); }

/* Redlock: process 0, holding, sees 2 masters of 5 (cut from the other
 * three, a majority): it cannot renew on a quorum. */
static void nz_redlock_sees_two(nem_run *r) {
    int v = nem_wait_holder(r, 0, 15000);
    if (v < 0) return;
    nem_fault_begin(r, v);
    r->tl.victim_cut = 1;
    for (int m = 2; m < 5; m++) cut_pair(r->client[v], r->srv[m].host);
    nem_sleep(r->c->fault_ms);
    nem_heal(r);
}

/* ---- The matrix -------------------------------------------------------------------- */

/* A dead connection is found within health_ms (3 s by default) and a
 * quarter; the waiter tries as soon as its subscription is back. The
 * waits race (starve_never): a newcomer may take the lock first, and its
 * hold is not the waiter's to count (the handoff promise counts the time
 * the lock lay free). */
#define HEALTH_BOUND_MS 4000

/* A wait ends by its wait_ms plus this: a try may be out when the wait's
 * time runs out, answered or not within request_timeout_ms (2 s). */
#define WAIT_SLACK_MS 2000

/* The usual promise: mutual exclusion as believed (no overlap at all),
 * fences keep the resource whole, a wait ends by wait_ms + 2 s, and after
 * a heal the victim is served again within 5 s. */
#define SAFE {0, 0, NEM_ANY, 5000, WAIT_SLACK_MS, 0, 0, NEM_ANY}
/* Exclusion not promised (a documented limit), fences still hold. */
#define FENCED_ONLY {NEM_ANY, 0, NEM_ANY, 5000, WAIT_SLACK_MS, 0, 0, NEM_ANY}
/* A clock step has no heal: nothing to recover from. */
#define STEP_SAFE {0, 0, NEM_ANY, NEM_ANY, WAIT_SLACK_MS, 0, 0, NEM_ANY}
#define STEP_FENCED_ONLY {NEM_ANY, 0, NEM_ANY, NEM_ANY, WAIT_SLACK_MS, 0, 0, NEM_ANY}
/* No fences: exclusion as believed is promised, the resource is not. */
#define NOFENCE {0, NEM_ANY, NEM_ANY, 5000, WAIT_SLACK_MS, 0, 0, NEM_ANY}
/* A stopped waiter's place: a grant it cannot claim lapses after the claim
 * window (1 s), and the next waiter is served within a second more. The
 * lock stays free no longer than that after a release while a running
 * process waits (the idle time; the handoff, which a newcomer's grant does
 * not end, also counts the holds of whoever won the race). */
#define CLAIM_BOUND_MS 2500
#define STOPPED_PLACE {0, 0, NEM_ANY, 5000, WAIT_SLACK_MS, 0, 0, CLAIM_BOUND_MS}
/* A slow link: as SAFE, and the slow client's share of the grants during
 * the fault at least min % of an equal share. */
#define SLOW_SHARE(min) {0, 0, NEM_ANY, 5000, WAIT_SLACK_MS, 0, min, NEM_ANY}

const nem_case nem_cases[] = {
    /* id, topology, fault, short, workload, nemesis, fault_ms, settle_ms, arg, clock, promise, promise text */
    {"sa-mutex-none", TOPO_STANDALONE, "none", 1, &wl_mutex, nz_none, 4000, 500, 0, 0, SAFE,
     "no overlap, no lost update", 0},
    {"sa-mutex-partition-holder", TOPO_STANDALONE, "holder partitioned", 1, &wl_mutex, nz_partition_holder, 4000,
     4000, 0, 0, SAFE, "holder sees its loss before anyone is granted; recovery within 5 s", 0},
    {"sa-mutex-cut-holder-redis", TOPO_STANDALONE, "holder cut from Redis only", 0, &wl_mutex, nz_cut_holder_redis,
     4000, 4000, 0, 0, SAFE, "as above; it may still reach the resource", 0},
    {"sa-mutex-partition-waiter", TOPO_STANDALONE, "waiter partitioned", 0, &wl_mutex, nz_partition_waiter, 4000,
     4000, 0, 0, SAFE, "its waits end by wait_ms + 1 s; recovery within 5 s", 0},
    {"sa-mutex-drop-requests", TOPO_STANDALONE, "one-way: client->Redis dropped", 0, &wl_mutex, nz_one_way, 4000,
     4000, 0, 0, SAFE, "as a partition", 0},
    {"sa-mutex-drop-replies", TOPO_STANDALONE, "one-way: Redis->client dropped", 0, &wl_mutex, nz_one_way, 4000,
     4000, 1, 0, SAFE, "tries run unanswered: no double grant, released after", 0},
    {"sa-mutex-blackhole-sub", TOPO_STANDALONE, "subscriber connection blackholed", 1, &wl_handoff,
     nz_blackhole_sub, 14000, 0, 0, 0, {0, 0, HEALTH_BOUND_MS, NEM_ANY, WAIT_SLACK_MS, 0, 0, NEM_ANY},
     "a wait pending at a release is served within the health bound (4 s) of the lock being free", 0},
    {"sa-mutex-blackhole-cmd", TOPO_STANDALONE, "holder's command connection blackholed", 0, &wl_mutex,
     nz_blackhole_cmd, 6000, 0, 0, 0, SAFE,
     "no overlap: its renewals go over a new connection, or it sees its loss", 0},
    {"sa-mutex-loss-10", TOPO_STANDALONE, "10% packet loss", 0, &wl_mutex, nz_loss, 5000, 3000, 10, 0,
     {0, 0, NEM_ANY, NEM_ANY, WAIT_SLACK_MS, 0, 0, NEM_ANY}, "no overlap, no lost update", 0},
    {"sa-mutex-loss-30", TOPO_STANDALONE, "30% packet loss", 0, &wl_mutex, nz_loss, 5000, 3000, 30, 0,
     {0, 0, NEM_ANY, NEM_ANY, WAIT_SLACK_MS, 0, 0, NEM_ANY}, "no overlap, no lost update", 0},
    {"sa-mutex-stop-holder", TOPO_STANDALONE, "holder SIGSTOPped past its lease", 1, &wl_mutex, nz_stop_holder, 4000,
     3000, 0, 0, SAFE, "no overlap as believed; its stale writes refused by fence", 0},
    {"sa-mutex-nofence-stop-holder", TOPO_STANDALONE, "holder SIGSTOPped, no fences", 1, &wl_mutex_nofence,
     nz_stop_holder, 4000, 3000, 0, 0, NOFENCE, "no overlap as believed; the resource may lose updates", 0},
    {"sa-mutex-stop-waiter", TOPO_STANDALONE, "waiter SIGSTOPped (queued)", 0, &wl_mutex, nz_stop_waiter, 4000, 3000,
     0, 0, STOPPED_PLACE, "its place holds the lock idle for its claim window at most (2.5 s)", 0},
    {"sa-mutex-stop-redis", TOPO_STANDALONE, "Redis SIGSTOPped 3 s", 1, &wl_mutex, nz_stop_master, 3000, 4000, 0, 0,
     SAFE, "holders see their loss; recovery within 5 s", 0},
    {"sa-mutex-kill-redis", TOPO_STANDALONE, "Redis kill -9, restarted empty", 1, &wl_mutex, nz_kill_master, 1000,
     4000, 0, 0, FENCED_ONLY, "locks lost with the data (documented); fences keep the resource whole", 0},
    {"sa-mutex-clock-fast-1pct", TOPO_STANDALONE, "Redis clock +1 %, holder cut", 1, &wl_clock3s, nz_clock_rate,
     4500, 2000, 10000, 1, SAFE, "no overlap", 0},
    {"sa-mutex-clock-fast-500ppm", TOPO_STANDALONE, "Redis clock +500 ppm, 30 s lease, holder cut", 0, &wl_clock30s,
     nz_clock_rate, 31500, 2000, 500, 1, SAFE, "no overlap", 0},
    {"sa-mutex-clock-slow-1pct", TOPO_STANDALONE, "Redis clock -1 %, holder cut", 0, &wl_clock3s, nz_clock_rate,
     4500, 2000, -10000, 1, SAFE, "no overlap", 0},
    {"sa-mutex-clock-step-fwd", TOPO_STANDALONE, "Redis clock steps +1 lease", 0, &wl_clock3s, nz_clock_step, 3000,
     2000, 3000, 1, STEP_FENCED_ONLY, "leases are about time (documented); fences keep the resource whole", 0},
    {"sa-mutex-nofence-clock-step-fwd", TOPO_STANDALONE, "Redis clock steps +1 lease, no fences", 0,
     &wl_clock3s_nofence, nz_clock_step, 3000, 2000, 3000, 1, {NEM_ANY, NEM_ANY, NEM_ANY, NEM_ANY, WAIT_SLACK_MS, 0, 0, NEM_ANY},
     "nothing promised: shows what fences prevent", 0},
    {"sa-mutex-clock-step-back", TOPO_STANDALONE, "Redis clock steps -1 lease", 0, &wl_clock3s, nz_clock_step, 3000,
     2000, -3000, 1, STEP_SAFE, "no overlap; fences still grow", 0},
    {"sa-sem-partition-holder", TOPO_STANDALONE, "holder partitioned", 0, &wl_sem, nz_partition_holder, 4000, 4000,
     0, 0, SAFE, "never more holders than permits", 0},
    {"sa-sem-stop-holder", TOPO_STANDALONE, "holder SIGSTOPped past its lease", 0, &wl_sem, nz_stop_holder, 4000,
     3000, 0, 0, SAFE, "never more holders than permits", 0},
    {"sa-sem-clock-fast-1pct", TOPO_STANDALONE, "Redis clock +1 %, holder cut", 0, &wl_sem_clock, nz_clock_rate, 4500,
     2000, 10000, 1, SAFE, "never more holders than permits", 0},


    /* Through the proxy (proxy.c): every chunk of the byte stream late by
     * 50 ms +- 40 ms. */
    {"sa-mutex-link-delay", TOPO_STANDALONE, "every link 50 ms +- 40 ms (proxy)", 0, &wl_mutex, nz_link, 5000,
     3000, 50, 0, {0, 0, NEM_ANY, NEM_ANY, WAIT_SLACK_MS, 0, 0, NEM_ANY}, "no overlap, no lost update, waits end in time",
     PROXY_ALL},
    {"sa-mutex-slow-link", TOPO_STANDALONE, "one client's link 50 ms +- 40 ms (proxy)", 1, &wl_even, nz_link, 6000,
     2000, 50, 0, SLOW_SHARE(50), "no overlap; bounded waiting gives the slow client half its share at least",
     PROXY_ONE},
    {"sa-mutex-race-slow-link", TOPO_STANDALONE, "one client's link slow, no bounded waiting", 0, &wl_even_race,
     nz_link, 6000, 2000, 50, 0, {0, 0, NEM_ANY, NEM_ANY, WAIT_SLACK_MS, 0, 0, NEM_ANY}, "no overlap; its share shows what racing costs a slow client",
     PROXY_ONE},

    /* The fair lock and the read-write lock. */
    {"sa-fair-partition-holder", TOPO_STANDALONE, "holder partitioned", 0, &wl_fair, nz_partition_holder, 4000,
     4000, 0, 0, SAFE, "no overlap; grants in the queue's order", 0},
    {"sa-fair-partition-waiter", TOPO_STANDALONE, "waiter partitioned", 0, &wl_fair, nz_partition_waiter, 4000,
     4000, 0, 0, SAFE, "no overlap; the others' grants in the queue's order", 0},
    {"sa-fair-stop-waiter", TOPO_STANDALONE, "waiter SIGSTOPped", 1, &wl_fair, nz_stop_waiter, 4000, 3000, 0, 0,
     STOPPED_PLACE, "its place holds the lock idle for its claim window at most (2.5 s); order kept", 0},
    {"sa-rw-stop-writer", TOPO_STANDALONE, "writer SIGSTOPped past its lease", 1, &wl_rw, nz_stop_holder, 4000,
     3000, 0, 0, SAFE, "a writer never beside anyone (readers share); its stale writes refused by fence", 0},

    /* Redlock: five independent masters. */
    {"rl-mutex-minority-down", TOPO_REDLOCK, "2 of 5 masters cut from the clients", 0, &wl_mutex,
     nz_redlock_minority, 4000, 3000, 0, 0, {0, 0, NEM_ANY, NEM_ANY, WAIT_SLACK_MS, 1, 0, NEM_ANY},
     "a quorum is left: no overlap, waits ride through", 0},
    {"rl-mutex-partition-holder", TOPO_REDLOCK, "holder partitioned", 0, &wl_mutex, nz_partition_holder, 4000,
     4000, 0, 0, SAFE, "holder sees its loss before anyone is granted", 0},
    {"rl-mutex-holder-sees-two", TOPO_REDLOCK, "holder sees 2 of 5 masters", 0, &wl_mutex, nz_redlock_sees_two,
     4000, 3000, 0, 0, SAFE, "the holder sees its loss before anyone is granted on a quorum", 0},
    {"rl-mutex-kill-restart", TOPO_REDLOCK, "kill -9 of a master, restarted empty at once", 0, &wl_mutex,
     nz_kill_master, 200, 4000, 0, 0, FENCED_ONLY,
     "Redlock needs delayed restarts (documented); fences keep the resource whole", 0},
    {"rl-mutex-clock-fast-1pct", TOPO_REDLOCK, "3 of 5 clocks +1 %, holder cut from them", 0, &wl_clock3s,
     nz_redlock_clock, 4500, 2000, 10000, 1, SAFE, "no overlap (Redlock's drift allowance)", 0},

    /* Sentinel: a master, its replica, three sentinels. */
    {"sn-mutex-minority-master", TOPO_SENTINEL, "holder and master cut off (minority)", 1, &wl_failover,
     nz_minority_master, 10000, 6000, 0, 0, {0, 0, NEM_ANY, NEM_ANY, WAIT_SLACK_MS, 0, 0, NEM_ANY},
     "the holder sees its loss before the promoted replica grants the lock", 0},

    {"sn-mutex-stop-master", TOPO_SENTINEL, "master SIGSTOPped past the failover, then continued", 0,
     &wl_failover, nz_sentinel_stop, 8000, 5000, 0, 0, {0, 0, NEM_ANY, NEM_ANY, WAIT_SLACK_MS, 1, 0, NEM_ANY},
     "no wait ends early; the old master, back, gives nobody a hold that overlaps beyond replication's window",
     0},
    {"sn-mutex-cut-holder-master", TOPO_SENTINEL, "holder cut from the master only (it sees the sentinels)", 0,
     &wl_mutex, nz_cut_holder_redis, 4000, 4000, 0, 0, SAFE,
     "the holder sees its loss before anyone is granted; recovery within 5 s", 0},
    {"sn-mutex-kill-master", TOPO_SENTINEL, "kill -9 of the master under a holder and waiters", 1, &wl_failover,
     nz_sentinel_kill, 8000, 5000, 0, 0, {0, 0, NEM_ANY, NEM_ANY, WAIT_SLACK_MS, 1, 0, NEM_ANY},
     "no wait ends early; no overlap beyond asynchronous replication's window", 0},

    /* Cluster: 3 masters, 3 replicas. */
    {"cl-mutex-kill-master", TOPO_CLUSTER, "kill -9 of the slot's master (failover)", 1, &wl_failover,
     nz_kill_master_holding, 6000, 5000, 0, 0, {NEM_ANY, 0, NEM_ANY, NEM_ANY, WAIT_SLACK_MS, 1, 0, NEM_ANY},
     "waits with time left ride the failover through; fences keep the resource whole", 0},
    {"cl-mutex-minority-master", TOPO_CLUSTER, "holder and slot's master cut off (minority)", 0, &wl_failover,
     nz_minority_master, 8000, 5000, 0, 0, {0, 0, NEM_ANY, NEM_ANY, WAIT_SLACK_MS, 0, 0, NEM_ANY},
     "the holder sees its loss before the promoted replica grants the lock", 0},
};
const int nem_ncases = (int)(sizeof(nem_cases) / sizeof(nem_cases[0]));
