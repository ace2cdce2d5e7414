/* The Redlock scenarios: hilock on N independent masters (-r
 * redlock://H:P,H:P,..., 5 from scripts/redis-many-throwaway.sh), each
 * figure beside ONE master of the same run: the first of the N, as a plain
 * redis:// server (the same kind of server, started the same way, so that
 * the ratio is the price of the quorum alone). Runs alternate one master
 * and N masters, so that each ratio compares runs seconds apart; medians
 * over the repetitions, and the median of the per-repetition ratios.
 *
 * redlock_acquire: one process, one client, one name, nobody else: an
 *   acquire, then (once granted) its release, then a pause of RL_GAP_US
 *   (so that each acquire starts from a quiet client, as a lock taken now
 *   and then does, and the stragglers of the last fan-out, the nodes
 *   beyond the quorum and the fence raised after a grant, are done), and
 *   again. Latency of the acquire alone: from the hilock_acquire() call to
 *   its callback; of the release: from hilock_release() to its callback.
 *   Each run starts with PING round trips to the first master (the
 *   machine's baseline) and with one cycle of warm-up (connections,
 *   scripts). For the record, the same on a Redlock of ONE master
 *   (redlock://first): what the Redlock code path costs without the
 *   fan-out. client_cpu_us_per_cycle, client_csw_per_cycle: getrusage()
 *   of that process over its cycles, CPU time (the pauses cost none) and
 *   context switches (voluntary + involuntary; the pause is one);
 *   servers_cpu_us_per_cycle: the masters' used_cpu_user + used_cpu_sys
 *   (INFO cpu) over the run, summed over the masters, per cycle.
 *   And the floor of the fan-out on this machine, measured in the same
 *   run (as floor.c is for the handoff): hilock's acquire script sent with
 *   blocking hiredis contexts, no event loop, to every master at once (each
 *   command written before any reply is read), the time taken until a
 *   quorum of the replies is read (then the rest, and the release script
 *   the same way, all off the clock); and the same to the first master
 *   alone. floor_over_one_master is what the quorum costs with nothing of
 *   hilock's in the way.
 *
 * redlock_handoff: the handoff of contend.c (two processes, one name,
 *   release -> the waiter's grant) on the N masters and on one. Under
 *   Redlock a release runs on every master, and each publishes; the waiter
 *   is subscribed on every master and tries again on the first message:
 *   a fan-out of its own, answered by the quorum. PINGs go to the first
 *   master. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"
#include "hilock/hilock.h"
#include "prim/prim.h" /* hl_script_mutex_acquire, hl_script_mutex_release */

#define RL_REPS_MAX 16
#define RL_CYCLES_MAX 20000
#define RL_PING_N 300
#define RL_GAP_US 500

/* ---- The masters ----------------------------------------------------------- */

typedef struct rl_targets {
    bench_target many;     /* redlock:// of every master */
    bench_target one;      /* redis:// of the first */
    bench_target one_rl;   /* redlock:// of the first alone */
} rl_targets;

/* "redlock://h:p,h:p": the masters. 0 or -1. */
static int rl_parse(const char *url, rl_targets *t) {
    memset(t, 0, sizeof *t);
    if (strncmp(url, "redlock://", 10) != 0) return -1;
    bench_target *m = &t->many;
    for (const char *p = url + 10; *p;) {
        size_t len = strcspn(p, ",/?#");
        const char *colon = memchr(p, ':', len);
        size_t hlen = colon ? (size_t)(colon - p) : len;
        if (m->nnodes == TARGET_NODES_MAX || hlen == 0 || hlen >= sizeof m->node[0].host) return -1;
        target_node *n = &m->node[m->nnodes++];
        memcpy(n->host, p, hlen);
        n->host[hlen] = '\0';
        n->port = colon ? atoi(colon + 1) : 6379;
        if (n->port <= 0 || n->port > 65535) return -1;
        p += len;
        if (*p != ',') break;
        p++;
    }
    if (m->nnodes == 0) return -1;
    m->label = "redlock";
    snprintf(m->url, sizeof m->url, "%s", url);
    m->pubsub = HILOCK_PUBSUB_AUTO;
    t->one = *m;
    t->one.label = "one-master";
    t->one.nnodes = 1;
    snprintf(t->one.url, sizeof t->one.url, "redis://%s:%d", m->node[0].host, m->node[0].port);
    t->one_rl = t->one;
    t->one_rl.label = "redlock-of-one";
    snprintf(t->one_rl.url, sizeof t->one_rl.url, "redlock://%s:%d", m->node[0].host, m->node[0].port);
    return 0;
}

static int rl_setup(rl_targets *t) {
    if (g_opts.redlock_url == NULL) return -1;
    if (rl_parse(g_opts.redlock_url, t) != 0) {
        fprintf(stderr, "redlock: bad URL (want redlock://HOST:PORT,HOST:PORT,...; at most %d): %s\n",
                TARGET_NODES_MAX, g_opts.redlock_url);
        return -1;
    }
    return 0;
}

/* Remove what the scenarios left on the masters (fence keys). */
static void rl_delete_keys(const rl_targets *t, const char *pattern) {
    for (int i = 0; i < t->many.nnodes; i++) {
        redisContext *rc = node_connect(t->many.node[i].host, t->many.node[i].port);
        if (rc == NULL) continue;
        delete_keys(rc, pattern);
        redisFree(rc);
    }
}

static int reps(void) {
    return g_opts.redlock_reps < 1 ? 1 : g_opts.redlock_reps > RL_REPS_MAX ? RL_REPS_MAX
                                                                           : g_opts.redlock_reps;
}

/* ---- redlock_acquire --------------------------------------------------------- */

struct acq_shm {
    int cycles, done, errors;
    double cpu_seconds;
    long csw;          /* context switches, voluntary + involuntary */
    uint64_t acq[RL_CYCLES_MAX], rel[RL_CYCLES_MAX];
    uint64_t ping[RL_PING_N];
};

struct acq_run {
    hilock_client *client;
    struct event_base *base;
    struct event *gap;
    struct acq_shm *s;
    const char *name;
    uint64_t t0, t1;
    int k, total;      /* cycles started; to run (a negative k: warm-up) */
    volatile int finished;
};

static void acq_next(struct acq_run *r);

static void acq_fail(struct acq_run *r, const char *what, int status) {
    fprintf(stderr, "redlock_acquire: %s: %s\n", what, hilock_strerror(status));
    r->s->errors++;
    r->finished = 1;
}

static void acq_released(int status, void *data) {
    struct acq_run *r = data;
    uint64_t t = now_ns();
    if (status != 0) { acq_fail(r, "release", status); return; }
    if (r->k >= 0) r->s->rel[r->k] = t - r->t1;
    if (++r->k >= r->total) { r->finished = 1; return; }
    struct timeval tv = {0, RL_GAP_US};
    evtimer_add(r->gap, &tv);
}

static void acq_acquired(hilock_hold *h, int status, void *data) {
    struct acq_run *r = data;
    r->t1 = now_ns();
    if (status != 0) { acq_fail(r, "acquire", status); return; }
    if (r->k >= 0) r->s->acq[r->k] = r->t1 - r->t0;
    int e = hilock_release(h, acq_released, r);
    if (e != 0) acq_fail(r, "hilock_release", e);
}

static void acq_next(struct acq_run *r) {
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.wait_ms = 0; /* nobody else: a try that fails is an error */
    r->t0 = now_ns();
    int e = hilock_acquire(r->client, r->name, &o, acq_acquired, r, NULL);
    if (e != 0) acq_fail(r, "hilock_acquire", e);
}

static void acq_gap_done(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    acq_next(arg);
}

static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static long csw_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_nvcsw + ru.ru_nivcsw;
}

static int acq_child(const bench_target *t, const char *name, struct acq_shm *s) {
    struct acq_run r;
    memset(&r, 0, sizeof r);
    r.s = s;
    r.name = name;
    r.base = base_new();
    redisContext *rc = node_connect(t->node[0].host, t->node[0].port);
    r.client = r.base ? bench_hilock_client(r.base, t) : NULL;
    if (r.client == NULL || rc == NULL) return 1;
    r.gap = evtimer_new(r.base, acq_gap_done, &r);
    /* Warm up: connections, scripts (one cycle, not counted). */
    r.k = -1;
    r.total = 0;
    acq_next(&r);
    loop_until(r.base, &r.finished, 10000);
    if (!r.finished || s->errors) { fprintf(stderr, "redlock_acquire: warm-up failed\n"); return 1; }
    if (ping_rtts(rc, s->ping, RL_PING_N) != 0) return 1;
    r.finished = 0;
    r.k = 0;
    r.total = s->cycles;
    double cpu0 = cpu_now();
    long csw0 = csw_now();
    acq_next(&r);
    loop_until(r.base, &r.finished, 60000 + s->cycles * 20);
    s->cpu_seconds = cpu_now() - cpu0;
    s->csw = csw_now() - csw0;
    s->done = r.k;
    event_free(r.gap);
    hilock_client_free(r.client);
    event_base_free(r.base);
    redisFree(rc);
    return s->done == s->cycles && s->errors == 0 ? 0 : 1;
}

/* ---- The fan-out floor: blocking hiredis, no event loop ---------------------- */

struct fl_node {
    redisContext *c;
    redisReply *reply;
};

/* Write the command appended to each context (every one before any reply
 * is read), then read replies until `want` have come; the rest stay to be
 * read by fl_rest(). 0 or -1. */
static int fl_fan(struct fl_node *n, int nn, int want) {
    for (int i = 0; i < nn; i++) {
        int done = 0;
        while (!done)
            if (redisBufferWrite(n[i].c, &done) != REDIS_OK) return -1;
        n[i].reply = NULL;
    }
    struct pollfd pf[TARGET_NODES_MAX];
    int got = 0;
    while (got < want) {
        int np = 0, idx[TARGET_NODES_MAX];
        for (int i = 0; i < nn; i++)
            if (n[i].reply == NULL) {
                pf[np].fd = n[i].c->fd;
                pf[np].events = POLLIN;
                idx[np++] = i;
            }
        if (poll(pf, (nfds_t)np, 5000) <= 0) return -1;
        for (int j = 0; j < np; j++) {
            if (!(pf[j].revents & (POLLIN | POLLERR | POLLHUP))) continue;
            struct fl_node *x = &n[idx[j]];
            void *r = NULL;
            if (redisBufferRead(x->c) != REDIS_OK || redisGetReplyFromReader(x->c, &r) != REDIS_OK)
                return -1;
            if (r != NULL) {
                x->reply = r;
                got++;
            }
        }
    }
    return 0;
}

/* The replies fl_fan() left, read blocking; each checked by `ok`. */
static int fl_rest(struct fl_node *n, int nn, int (*ok)(const redisReply *)) {
    int bad = 0;
    for (int i = 0; i < nn; i++) {
        if (n[i].reply == NULL) {
            void *r = NULL;
            if (redisGetReply(n[i].c, &r) != REDIS_OK) return -1;
            n[i].reply = r;
        }
        bad |= !ok(n[i].reply);
        freeReplyObject(n[i].reply);
        n[i].reply = NULL;
    }
    return bad ? -1 : 0;
}

/* The mutex's grant is its fence (an integer); a refusal, an array. */
static int fl_granted(const redisReply *r) {
    return r && r->type == REDIS_REPLY_INTEGER && r->integer > 0;
}

static int fl_released(const redisReply *r) {
    return r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
}

static int fl_child(const bench_target *t, const char *name, struct acq_shm *s) {
    struct fl_node n[TARGET_NODES_MAX];
    int nn = t->nnodes, quorum = nn / 2 + 1;
    char lock[128], fence[136], ch[136], token[48];
    memset(n, 0, sizeof n);
    if (hilock_key("hilock:", name, lock, sizeof lock) < 0) return 1;
    snprintf(fence, sizeof fence, "%s:fence", lock);
    snprintf(ch, sizeof ch, "%s:ch", lock);
    snprintf(token, sizeof token, "floor-%ld", (long)getpid());
    for (int i = 0; i < nn; i++) {
        if ((n[i].c = node_connect(t->node[i].host, t->node[i].port)) == NULL) return 1;
        const hl_script *scripts[] = {&hl_script_mutex_acquire, &hl_script_mutex_release};
        for (int k = 0; k < 2; k++) {
            redisReply *r = redisCommand(n[i].c, "SCRIPT LOAD %s", scripts[k]->body);
            int ok = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, scripts[k]->sha) == 0;
            if (r) freeReplyObject(r);
            if (!ok) return 1;
        }
    }
    if (ping_rtts(n[0].c, s->ping, RL_PING_N) != 0) return 1;
    double cpu0 = 0;
    long csw0 = 0;
    for (int k = -1; k < s->cycles; k++) { /* k = -1: warm-up */
        if (k == 0) cpu0 = cpu_now(), csw0 = csw_now();
        for (int i = 0; i < nn; i++)
            redisAppendCommand(n[i].c, "EVALSHA %s 2 %s %s %s 30000 604800",
                               hl_script_mutex_acquire.sha, lock, fence, token);
        uint64_t t0 = now_ns();
        if (fl_fan(n, nn, quorum) != 0) { s->errors++; break; }
        uint64_t t1 = now_ns();
        if (fl_rest(n, nn, fl_granted) != 0) { s->errors++; break; }
        for (int i = 0; i < nn; i++)
            redisAppendCommand(n[i].c, "EVALSHA %s 1 %s %s %s PUBLISH",
                               hl_script_mutex_release.sha, lock, token, ch);
        uint64_t t2 = now_ns();
        if (fl_fan(n, nn, quorum) != 0) { s->errors++; break; }
        uint64_t t3 = now_ns();
        if (fl_rest(n, nn, fl_released) != 0) { s->errors++; break; }
        if (k >= 0) {
            s->acq[k] = t1 - t0;
            s->rel[k] = t3 - t2;
            s->done = k + 1;
        }
        usleep(RL_GAP_US);
    }
    s->cpu_seconds = cpu_now() - cpu0;
    s->csw = csw_now() - csw0;
    for (int i = 0; i < nn; i++) redisFree(n[i].c);
    return s->done == s->cycles && s->errors == 0 ? 0 : 1;
}

/* CPU seconds the masters of `t` have used (INFO cpu, summed), or -1. */
static double nodes_cpu(const bench_target *t) {
    double sum = 0;
    for (int i = 0; i < t->nnodes; i++) {
        redisContext *rc = node_connect(t->node[i].host, t->node[i].port);
        redisReply *r = rc ? redisCommand(rc, "INFO cpu") : NULL;
        const char *u = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "used_cpu_user:") : NULL;
        const char *y = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "used_cpu_sys:") : NULL;
        if (u && y) sum += atof(u + 14) + atof(y + 13);
        if (r) freeReplyObject(r);
        if (rc) redisFree(rc);
        if (!u || !y) return -1;
    }
    return sum;
}

typedef struct acq_result {
    double p50, p99, rel50, ping50, cpu_us, csw, server_cpu_us;
    int cycles, errors;
} acq_result;

static int acq_measure(const bench_target *t, const char *name, int cycles, int floor,
                       acq_result *out) {
    memset(out, 0, sizeof *out);
    out->errors = 1;
    struct acq_shm *s = shm_alloc(sizeof *s);
    if (s == NULL) return 1;
    s->cycles = cycles > RL_CYCLES_MAX ? RL_CYCLES_MAX : cycles;
    double cpu0 = nodes_cpu(t);
    pid_t pid = fork_child();
    if (pid < 0) { shm_free(s, sizeof *s); return 1; }
    if (pid == 0) _exit(floor ? fl_child(t, name, s) : acq_child(t, name, s));
    int st = wait_child(pid, 120000 + s->cycles * 20);
    double cpu1 = nodes_cpu(t);
    size_t n = (size_t)s->done;
    sort_u64(s->acq, n);
    sort_u64(s->rel, n);
    sort_u64(s->ping, RL_PING_N);
    out->p50 = (double)pct_u64(s->acq, n, 50) / 1000.0;
    out->p99 = (double)pct_u64(s->acq, n, 99) / 1000.0;
    out->rel50 = (double)pct_u64(s->rel, n, 50) / 1000.0;
    out->ping50 = (double)pct_u64(s->ping, RL_PING_N, 50) / 1000.0;
    out->cpu_us = n ? s->cpu_seconds * 1e6 / (double)n : 0;
    out->csw = n ? (double)s->csw / (double)n : 0;
    /* The masters' CPU over the whole run (warm-up and PINGs too: a few
     * hundred commands beside the cycles' thousands). */
    out->server_cpu_us = n && cpu0 >= 0 && cpu1 >= 0 ? (cpu1 - cpu0) * 1e6 / (double)n : 0;
    out->cycles = (int)n;
    out->errors = s->errors + (st != 0);
    shm_free(s, sizeof *s);
    return out->errors ? 1 : 0;
}

/* The figures of one kind of target over the repetitions. */
typedef struct acq_series {
    double p50[RL_REPS_MAX], p99[RL_REPS_MAX], rel50[RL_REPS_MAX], ping[RL_REPS_MAX];
    double cpu[RL_REPS_MAX], csw[RL_REPS_MAX], scpu[RL_REPS_MAX], ratio[RL_REPS_MAX], ratio99[RL_REPS_MAX];
    int n, cycles, errors;
} acq_series;

static void acq_add(acq_series *s, const acq_result *r, const acq_result *one) {
    s->errors += r->errors;
    s->cycles += r->cycles;
    if (r->errors || r->cycles == 0) return;
    s->p50[s->n] = r->p50;
    s->p99[s->n] = r->p99;
    s->rel50[s->n] = r->rel50;
    s->ping[s->n] = r->ping50;
    s->cpu[s->n] = r->cpu_us;
    s->csw[s->n] = r->csw;
    s->scpu[s->n] = r->server_cpu_us;
    s->ratio[s->n] = one && one->p50 > 0 ? r->p50 / one->p50 : 0;
    s->ratio99[s->n] = one && one->p99 > 0 ? r->p99 / one->p99 : 0;
    s->n++;
}

#define MED(s, f) median_d((s).f, (size_t)(s).n) /* sorts a copy's array */

int scenario_redlock_acquire(void) {
    rl_targets t;
    if (rl_setup(&t) != 0) return 1;
    char name[64];
    snprintf(name, sizeof name, "hb-rlacq:%ld", (long)getpid());
    acq_series one, many, one_rl, fl_one, fl_many;
    memset(&one, 0, sizeof one);
    memset(&many, 0, sizeof many);
    memset(&one_rl, 0, sizeof one_rl);
    memset(&fl_one, 0, sizeof fl_one);
    memset(&fl_many, 0, sizeof fl_many);
    int failed = 0, cycles = g_opts.redlock_cycles;
    for (int i = 0; i < reps(); i++) {
        acq_result a, b, c, d, e;
        failed |= acq_measure(&t.one, name, cycles, 0, &a);
        failed |= acq_measure(&t.many, name, cycles, 0, &b);
        failed |= acq_measure(&t.one_rl, name, cycles, 0, &c);
        failed |= acq_measure(&t.one, name, cycles, 1, &d);
        failed |= acq_measure(&t.many, name, cycles, 1, &e);
        acq_add(&one, &a, NULL);
        acq_add(&many, &b, a.errors ? NULL : &a);
        acq_add(&one_rl, &c, a.errors ? NULL : &a);
        acq_add(&fl_one, &d, NULL);
        acq_add(&fl_many, &e, d.errors ? NULL : &d);
    }
    /* median_d sorts: copies */
    acq_series m = many, o = one, r1 = one_rl, f1 = fl_one, fm = fl_many;
    double p50 = MED(m, p50), one50 = MED(o, p50), ratio = MED(m, ratio);
    json_begin("redlock_acquire");
    json_str("client", "hilock");
    json_int("masters", t.many.nnodes);
    json_int("quorum", t.many.nnodes / 2 + 1);
    json_num("p50_us", p50, 1);
    json_num("p99_us", MED(m, p99), 1);
    json_num("one_master_p50_us", one50, 1);
    json_num("one_master_p99_us", MED(o, p99), 1);
    json_num("p50_over_one_master", ratio, 2);
    json_num("p99_over_one_master", MED(m, ratio99), 2);
    json_num("release_p50_us", MED(m, rel50), 1);
    json_num("one_master_release_p50_us", MED(o, rel50), 1);
    json_num("redlock_of_one_p50_us", MED(r1, p50), 1);
    json_num("redlock_of_one_over_one_master", MED(r1, ratio), 2);
    json_num("client_cpu_us_per_cycle", MED(m, cpu), 1);
    json_num("one_master_client_cpu_us_per_cycle", MED(o, cpu), 1);
    json_num("redlock_of_one_client_cpu_us_per_cycle", MED(r1, cpu), 1);
    json_num("client_csw_per_cycle", MED(m, csw), 1);
    json_num("one_master_client_csw_per_cycle", MED(o, csw), 1);
    json_num("servers_cpu_us_per_cycle", MED(m, scpu), 1);
    json_num("one_master_server_cpu_us_per_cycle", MED(o, scpu), 1);
    json_num("floor_p50_us", MED(fm, p50), 1);
    json_num("floor_one_master_p50_us", MED(f1, p50), 1);
    json_num("floor_over_one_master", MED(fm, ratio), 2);
    json_num("floor_client_cpu_us_per_cycle", MED(fm, cpu), 1);
    json_num("floor_one_master_client_cpu_us_per_cycle", MED(f1, cpu), 1);
    json_num("floor_client_csw_per_cycle", MED(fm, csw), 1);
    json_num("floor_one_master_client_csw_per_cycle", MED(f1, csw), 1);
    json_num("floor_servers_cpu_us_per_cycle", MED(fm, scpu), 1);
    json_num("floor_one_master_server_cpu_us_per_cycle", MED(f1, scpu), 1);
    json_num("ping_rtt_p50_us", MED(o, ping), 1);
    json_int("cycles", m.cycles);
    json_int("reps", m.n);
    json_int("gap_us", RL_GAP_US);
    json_num("goal_p50_over_one_master", 1.3, 1);
    json_int("errors", m.errors + o.errors + r1.errors + f1.errors + fm.errors);
    json_end();
    fprintf(stderr, "  redlock acquire: p50 %.0f us on %d masters = %.2fx one master %.0f us "
            "(same run; Redlock of one: %.0f us; the fan-out floor, blocking hiredis: %.0f us "
            "vs %.0f us = %.2fx)\n", p50, t.many.nnodes, ratio, one50, MED(r1, p50), MED(fm, p50),
            MED(f1, p50), MED(fm, ratio));
    g_res.rl_acq_run = m.n > 0 && o.n > 0;
    g_res.rl_acq_p50 = p50;
    g_res.rl_acq_one_p50 = one50;
    g_res.rl_acq_ratio = ratio;
    g_res.rl_masters = t.many.nnodes;
    rl_delete_keys(&t, "hilock:{hb-rlacq:*");
    return failed || m.n == 0 || o.n == 0 || fm.n == 0 || f1.n == 0;
}

/* ---- redlock_handoff ------------------------------------------------------- */

int scenario_redlock_handoff(void) {
    rl_targets t;
    if (rl_setup(&t) != 0) return 1;
    char name[64];
    snprintf(name, sizeof name, "hb-rlhandoff:%ld", (long)getpid());
    ho_series one, many;
    memset(&one, 0, sizeof one);
    memset(&many, 0, sizeof many);
    int failed = 0;
    for (int i = 0; i < reps(); i++) {
        handoff_result a, b;
        failed |= handoff_measure(&hilock_impl, &t.one, name, g_opts.redlock_handoffs, &a);
        ho_series_add(&one, &a, &a);
        failed |= handoff_measure(&hilock_impl, &t.many, name, g_opts.redlock_handoffs, &b);
        ho_series_add(&many, &b, &a);
    }
    ho_series m = many, o = one; /* median_d sorts */
    double p50 = MED(m, p50), one50 = MED(o, p50), ratio = MED(m, ratio);
    json_begin("redlock_handoff");
    json_str("client", "hilock");
    json_int("masters", t.many.nnodes);
    json_int("quorum", t.many.nnodes / 2 + 1);
    json_num("p50_us", p50, 1);
    json_num("p99_us", MED(m, p99), 1);
    json_num("one_master_p50_us", one50, 1);
    json_num("one_master_p99_us", MED(o, p99), 1);
    json_num("p50_over_one_master", ratio, 2);
    json_num("ping_rtt_p50_us", MED(m, ping), 1);
    json_num("one_master_ping_rtt_p50_us", MED(o, ping), 1);
    json_int("handoffs", m.handoffs);
    json_int("reps", m.n);
    json_str("hold_ms", "1..11 uniform");
    json_num("goal_p50_over_one_master", 1.3, 1);
    json_int("errors", m.errors + o.errors);
    json_end();
    fprintf(stderr, "  redlock handoff: p50 %.0f us on %d masters = %.2fx one master %.0f us (same run)\n",
            p50, t.many.nnodes, ratio, one50);
    g_res.rl_ho_run = m.n > 0 && o.n > 0;
    g_res.rl_ho_p50 = p50;
    g_res.rl_ho_one_p50 = one50;
    g_res.rl_ho_ratio = ratio;
    g_res.rl_masters = t.many.nnodes;
    rl_delete_keys(&t, "hilock:{hb-rlhandoff:*");
    rl_delete_keys(&t, "hilock:{hb-warm:*");
    return failed || m.n == 0 || o.n == 0;
}
