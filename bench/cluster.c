/* The cluster scenarios: hilock on a Redis Cluster (-c, 3 masters + 3
 * replicas from scripts/redis-cluster-throwaway.sh), each figure beside the
 * standalone server (-u) of the same run, and each in both pub/sub modes,
 * set explicitly (HILOCK_PUBSUB_CLASSIC, HILOCK_PUBSUB_SHARDED):
 *
 * cluster_handoff: the handoff of contend.c on one name. Its repetitions
 *   alternate standalone, classic, sharded, so that each ratio compares
 *   runs minutes apart at most; medians over the repetitions. The name is
 *   one whose master is not the first seed, where classic subscriptions
 *   live (two names in three): a classic release then reaches its waiter
 *   over the cluster bus, a sharded one on the master itself.
 *
 * cluster_throughput: the uncontended window of scale.c (IN_FLIGHT
 *   workers, a name each, so the names fall on all three masters),
 *   alternated with the same window on the standalone server; medians,
 *   and the share of the scripts each master ran.
 *
 * cluster_bus: cluster-bus messages per release, summed over all six
 *   nodes, from CLUSTER INFO. Redis 7 counts them per type
 *   (cluster_stats_messages_publish_sent, ..._publishshard_received), so
 *   the messages that releases cause are counted exactly; the totals of
 *   every type, less the idle gossip (ping/pong) measured right after over
 *   at least as long, say the same to within that gossip's noise. A
 *   classic PUBLISH goes from the master to every other node (5 sent and
 *   5 received per release); an SPUBLISH only to the master's replica. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "hilock/hilock.h"

#define CL_NODES_MAX 16
#define CL_MODES 2

/* ---- The cluster's nodes (CLUSTER NODES) -------------------------------- */

typedef struct cl_node {
    target_node addr;
    int master;
    int nranges;
    int range[16][2];          /* slots served, first..last */
} cl_node;

typedef struct cl_map {
    int n;
    cl_node node[CL_NODES_MAX];
    target_node seed;          /* the URL's first host: classic subscriptions */
} cl_map;

/* "redis://h:p,h:p": the i-th host, 0 or -1. */
static int seed_at(const char *url, int i, target_node *out) {
    const char *p = strncmp(url, "redis://", 8) == 0 ? url + 8 : url;
    for (; i > 0 && p; i--) p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
    if (p == NULL || *p == '\0') return -1;
    size_t len = strcspn(p, ",/");
    const char *colon = memchr(p, ':', len);
    size_t hlen = colon ? (size_t)(colon - p) : len;
    if (hlen == 0 || hlen >= sizeof out->host) return -1;
    memcpy(out->host, p, hlen);
    out->host[hlen] = '\0';
    out->port = colon ? atoi(colon + 1) : 6379;
    return out->port > 0 && out->port <= 65535 ? 0 : -1;
}

/* One line of CLUSTER NODES: "id ip:port@bus[,host] flags master ... slots". */
static int parse_node(char *line, cl_node *out) {
    char *save = NULL, *f[64];
    int nf = 0;
    for (char *t = strtok_r(line, " ", &save); t && nf < 64; t = strtok_r(NULL, " ", &save))
        f[nf++] = t;
    if (nf < 8 || strstr(f[2], "fail") || strstr(f[2], "handshake")) return -1;
    memset(out, 0, sizeof *out);
    f[1][strcspn(f[1], "@,")] = '\0'; /* ip:port[@bus[,hostname]] */
    char *colon = strrchr(f[1], ':');
    if (colon == NULL || (size_t)(colon - f[1]) >= sizeof out->addr.host) return -1;
    memcpy(out->addr.host, f[1], (size_t)(colon - f[1]));
    out->addr.port = atoi(colon + 1);
    if (out->addr.port <= 0) return -1; /* a node without an address yet */
    for (int i = 8; i < nf && out->nranges < 16; i++) {
        if (f[i][0] == '[') continue; /* a slot migrating or importing */
        char *dash = strchr(f[i], '-');
        out->range[out->nranges][0] = atoi(f[i]);
        out->range[out->nranges][1] = dash ? atoi(dash + 1) : atoi(f[i]);
        out->nranges++;
    }
    /* A master that serves slots: a node joins as a master, and the news
     * that it became a replica takes a while to reach the others. */
    out->master = strstr(f[2], "master") != NULL && out->nranges > 0;
    return 0;
}

/* The map from the first seed that answers. 0 or -1. */
static int cl_map_load(cl_map *m) {
    memset(m, 0, sizeof *m);
    if (seed_at(g_opts.cluster_url, 0, &m->seed) != 0) return -1;
    redisReply *r = NULL;
    for (int i = 0; r == NULL; i++) {
        target_node s;
        if (seed_at(g_opts.cluster_url, i, &s) != 0) return -1;
        redisContext *rc = node_connect(s.host, s.port);
        if (rc == NULL) continue;
        r = redisCommand(rc, "CLUSTER NODES");
        redisFree(rc);
        if (r && r->type != REDIS_REPLY_STRING) {
            fprintf(stderr, "cluster: %s:%d: CLUSTER NODES: %s\n", s.host, s.port,
                    r->type == REDIS_REPLY_ERROR ? r->str : "not a string");
            freeReplyObject(r);
            return -1;
        }
    }
    char *save = NULL;
    for (char *line = strtok_r(r->str, "\n", &save); line && m->n < CL_NODES_MAX;
         line = strtok_r(NULL, "\n", &save))
        if (parse_node(line, &m->node[m->n]) == 0) m->n++;
    freeReplyObject(r);
    return m->n > 0 ? 0 : -1;
}

static const cl_node *cl_master_of(const cl_map *m, unsigned slot) {
    for (int i = 0; i < m->n; i++)
        for (int j = 0; m->node[i].master && j < m->node[i].nranges; j++)
            if ((int)slot >= m->node[i].range[j][0] && (int)slot <= m->node[i].range[j][1])
                return &m->node[i];
    return NULL;
}

static const cl_node *cl_master_of_name(const cl_map *m, const char *name) {
    char key[256];
    int len = hilock_key("hilock:", name, key, sizeof key);
    return len < 0 ? NULL : cl_master_of(m, hilock_key_slot(key, (size_t)len));
}

/* ---- Targets ----------------------------------------------------------- */

static const char *mode_label(int pubsub) {
    return pubsub == HILOCK_PUBSUB_SHARDED ? "sharded" : "classic";
}

/* The cluster in one pub/sub mode; node[] are its masters. */
static void cl_target(const cl_map *m, int pubsub, bench_target *t) {
    memset(t, 0, sizeof *t);
    t->label = mode_label(pubsub);
    snprintf(t->url, sizeof t->url, "%s", g_opts.cluster_url);
    t->pubsub = pubsub;
    t->cluster = 1;
    for (int i = 0; i < m->n && t->nnodes < TARGET_NODES_MAX; i++)
        if (m->node[i].master) t->node[t->nnodes++] = m->node[i].addr;
}

/* The modes this cluster can run: sharded pub/sub needs Redis 7. */
static int cl_modes(const cl_map *m, int *modes) {
    int n = 0;
    modes[n++] = HILOCK_PUBSUB_CLASSIC;
    redisContext *rc = node_connect(m->seed.host, m->seed.port);
    redisReply *r = rc ? redisCommand(rc, "INFO server") : NULL;
    const char *v = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "redis_version:") : NULL;
    if (v && atoi(v + 14) >= 7) modes[n++] = HILOCK_PUBSUB_SHARDED;
    else fprintf(stderr, "cluster: the server is older than Redis 7: no sharded pub/sub\n");
    if (r) freeReplyObject(r);
    if (rc) redisFree(rc);
    return n;
}

/* Remove what the scenarios left on the masters (fence keys). */
static void cl_delete_keys(const cl_map *m) {
    for (int i = 0; i < m->n; i++) {
        if (!m->node[i].master) continue;
        redisContext *rc = node_connect(m->node[i].addr.host, m->node[i].addr.port);
        if (rc == NULL) continue;
        delete_keys(rc, "hilock:{hb-*");
        redisFree(rc);
    }
}

static int cl_setup(cl_map *m, int *modes, int *nmodes) {
    if (g_opts.cluster_url == NULL) return -1;
    if (cl_map_load(m) != 0) {
        fprintf(stderr, "cluster: cannot read the map of %s\n", g_opts.cluster_url);
        return -1;
    }
    *nmodes = cl_modes(m, modes);
    return 0;
}

/* ---- cluster_handoff ------------------------------------------------------ */

/* A name whose master is not the first seed (see the top of the file). */
static const cl_node *cl_pick_name(const cl_map *m, char *name, size_t n) {
    for (int i = 0; i < 1000; i++) {
        snprintf(name, n, "hb-chandoff:%ld:%d", (long)getpid(), i);
        const cl_node *master = cl_master_of_name(m, name);
        if (master && (master->addr.port != m->seed.port ||
                       strcmp(master->addr.host, m->seed.host) != 0))
            return master;
    }
    return NULL;
}

static void cl_handoff_print(const ho_series *c, const ho_series *s, const bench_target *t,
                             const cl_node *master, const cl_map *m) {
    ho_series cs = *c, sa = *s; /* median_d sorts */
    double p50 = median_d(cs.p50, (size_t)cs.n), sa50 = median_d(sa.p50, (size_t)sa.n);
    json_begin("cluster_handoff");
    json_str("client", "hilock");
    json_str("pubsub", t->label);
    json_num("p50_us", p50, 1);
    json_num("p99_us", median_d(cs.p99, (size_t)cs.n), 1);
    json_num("standalone_p50_us", sa50, 1);
    json_num("standalone_p99_us", median_d(sa.p99, (size_t)sa.n), 1);
    json_num("p50_over_standalone", median_d(cs.ratio, (size_t)cs.n), 2);
    json_num("ping_rtt_p50_us", median_d(cs.ping, (size_t)cs.n), 1);
    json_num("standalone_ping_rtt_p50_us", median_d(sa.ping, (size_t)sa.n), 1);
    json_int("handoffs", cs.handoffs);
    json_int("reps", cs.n);
    json_int("name_master_port", master->addr.port);
    json_int("classic_subscriber_port", m->seed.port);
    json_str("hold_ms", "1..11 uniform");
    json_int("errors", cs.errors);
    json_end();
    fprintf(stderr, "  cluster handoff, %s: p50 %.0f us = %.2fx standalone %.0f us (same run)\n",
            t->label, p50, median_d(cs.ratio, (size_t)cs.n), sa50);
}

int scenario_cluster_handoff(void) {
    cl_map m;
    int modes[CL_MODES], nmodes;
    if (cl_setup(&m, modes, &nmodes) != 0) return 1;
    char name[64];
    const cl_node *master = cl_pick_name(&m, name, sizeof name);
    if (master == NULL) {
        fprintf(stderr, "cluster: no master serving slots apart from the first seed\n");
        return 1;
    }
    bench_target t[CL_MODES];
    for (int k = 0; k < nmodes; k++) {
        cl_target(&m, modes[k], &t[k]);
        t[k].node[0] = master->addr; /* PINGs to the name's master */
    }
    int reps = g_opts.cluster_reps > SERIES_MAX ? SERIES_MAX : g_opts.cluster_reps;
    ho_series sa, cl[CL_MODES];
    memset(&sa, 0, sizeof sa);
    memset(cl, 0, sizeof cl);
    int failed = 0;
    for (int r = 0; r < reps; r++) {
        handoff_result base, res;
        failed |= handoff_measure(&hilock_impl, &g_standalone, name, g_opts.cluster_handoffs, &base);
        ho_series_add(&sa, &base, &base);
        for (int k = 0; k < nmodes; k++) {
            failed |= handoff_measure(&hilock_impl, &t[k], name, g_opts.cluster_handoffs, &res);
            ho_series_add(&cl[k], &res, &base);
        }
    }
    for (int k = 0; k < nmodes; k++) cl_handoff_print(&cl[k], &sa, &t[k], master, &m);
    cl_delete_keys(&m);
    redisContext *rc = sync_connect(); /* and the standalone runs' fence key */
    if (rc) {
        delete_keys(rc, "hilock:{hb-chandoff:*");
        redisFree(rc);
    }
    return failed;
}

/* ---- cluster_throughput ----------------------------------------------------- */

static void cl_tp_print(const tp_series *cs, const tp_series *s, const bench_target *t) {
    tp_series cc = *cs, sc = *s; /* median_d sorts */
    tp_series *c = &cc, *sa = &sc;
    double locks = median_d(c->locks, (size_t)c->n), sal = median_d(sa->locks, (size_t)sa->n);
    json_begin("cluster_throughput");
    json_str("client", "hilock");
    json_str("pubsub", t->label);
    json_num("locks_per_s", locks, 0);
    json_num("standalone_locks_per_s", sal, 0);
    json_num("locks_over_standalone", median_d(c->ratio, (size_t)c->n), 3);
    json_num("scripts_per_s", median_d(c->scripts, (size_t)c->n), 0);
    json_num("client_cpu_us_per_lock", median_d(c->cpu, (size_t)c->n), 2);
    json_num("standalone_client_cpu_us_per_lock", median_d(sa->cpu, (size_t)sa->n), 2);
    json_int("masters", t->nnodes);
    json_num("master_share_min", median_d(c->share_min, (size_t)c->n), 3);
    json_num("master_share_max", median_d(c->share_max, (size_t)c->n), 3);
    json_int("in_flight", g_opts.inflight);
    json_int("names", g_opts.inflight);
    json_num("seconds", g_opts.tp_seconds, 1);
    json_int("reps", c->n);
    json_int("errors", c->errors);
    json_end();
    fprintf(stderr, "  cluster throughput, %s: %.0f locks/s = %.2fx standalone %.0f (same run)\n",
            t->label, locks, median_d(c->ratio, (size_t)c->n), sal);
}

int scenario_cluster_throughput(void) {
    cl_map m;
    int modes[CL_MODES], nmodes;
    if (cl_setup(&m, modes, &nmodes) != 0) return 1;
    bench_target t[CL_MODES];
    for (int k = 0; k < nmodes; k++) cl_target(&m, modes[k], &t[k]);
    int reps = g_opts.cluster_reps > SERIES_MAX ? SERIES_MAX : g_opts.cluster_reps;
    tp_series sa, cl[CL_MODES];
    memset(&sa, 0, sizeof sa);
    memset(cl, 0, sizeof cl);
    for (int r = 0; r < reps; r++) {
        tp_sample x;
        tp_measure(&g_standalone, &x);
        tp_series_add(&sa, &x, x.locks_per_s);
        double base = x.errors ? 0 : x.locks_per_s;
        for (int k = 0; k < nmodes; k++) {
            tp_measure(&t[k], &x);
            tp_series_add(&cl[k], &x, base);
        }
    }
    int failed = sa.errors != 0 || sa.n == 0;
    for (int k = 0; k < nmodes; k++) {
        cl_tp_print(&cl[k], &sa, &t[k]);
        failed |= cl[k].errors != 0 || cl[k].n == 0;
    }
    return failed;
}

/* ---- cluster_bus ------------------------------------------------------------ */

typedef struct bus_stats {
    long long sent, received;          /* every type */
    long long pub_sent, pub_received;  /* publish */
    long long shard_sent, shard_received; /* publishshard */
} bus_stats;

static long long info_field(const char *info, const char *field) {
    char key[96];
    snprintf(key, sizeof key, "\n%s:", field);
    const char *p = strstr(info, key);
    return p ? strtoll(p + strlen(key), NULL, 10) : 0;
}

/* CLUSTER INFO of every node, summed. 0 or -1. */
static int bus_stats_get(const cl_map *m, bus_stats *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < m->n; i++) {
        redisContext *rc = node_connect(m->node[i].addr.host, m->node[i].addr.port);
        redisReply *r = rc ? redisCommand(rc, "CLUSTER INFO") : NULL;
        int ok = r && r->type == REDIS_REPLY_STRING;
        if (ok) {
            out->sent += info_field(r->str, "cluster_stats_messages_sent");
            out->received += info_field(r->str, "cluster_stats_messages_received");
            out->pub_sent += info_field(r->str, "cluster_stats_messages_publish_sent");
            out->pub_received += info_field(r->str, "cluster_stats_messages_publish_received");
            out->shard_sent += info_field(r->str, "cluster_stats_messages_publishshard_sent");
            out->shard_received += info_field(r->str, "cluster_stats_messages_publishshard_received");
        }
        if (r) freeReplyObject(r);
        if (rc) redisFree(rc);
        if (!ok) return -1;
    }
    return 0;
}

static void bus_delta(const bus_stats *a, const bus_stats *b, bus_stats *d) {
    d->sent = b->sent - a->sent;
    d->received = b->received - a->received;
    d->pub_sent = b->pub_sent - a->pub_sent;
    d->pub_received = b->pub_received - a->pub_received;
    d->shard_sent = b->shard_sent - a->shard_sent;
    d->shard_received = b->shard_received - a->shard_received;
}

/* The releasing process: BUS_INFLIGHT workers, a name each, acquire and
 * release back to back until `total` cycles were started. */
#define BUS_INFLIGHT 16

struct bus_shm {
    volatile int released;   /* releases that succeeded, after the go */
    volatile int errors;
};

struct bus_worker {
    struct bus_run *run;
    char name[48];
};

struct bus_run {
    hilock_client *client;
    struct bus_shm *shm;
    struct bus_worker w[BUS_INFLIGHT];
    int issued, total, outstanding, counting;
    volatile int done;
};

static void bus_acquired(hilock_hold *h, int status, void *data);

/* The worker's next cycle, or its end. */
static void bus_go(struct bus_worker *w) {
    struct bus_run *r = w->run;
    if (r->issued < r->total && hilock_acquire(r->client, w->name, NULL, bus_acquired, w, NULL) == 0) {
        r->issued++;
        return;
    }
    if (r->issued < r->total) r->shm->errors++;
    if (--r->outstanding == 0) r->done = 1;
}

static void bus_released(int status, void *data) {
    struct bus_worker *w = data;
    if (status != 0) w->run->shm->errors++;
    else if (w->run->counting) w->run->shm->released++;
    bus_go(w);
}

static void bus_acquired(hilock_hold *h, int status, void *data) {
    struct bus_worker *w = data;
    if (status != 0 || hilock_release(h, bus_released, w) != 0) {
        w->run->shm->errors++;
        if (--w->run->outstanding == 0) w->run->done = 1;
    }
}

/* Run `total` cycles on the loop; 0 when they all ended. */
static int bus_cycles(struct event_base *base, struct bus_run *r, int total) {
    r->issued = 0;
    r->total = total;
    r->done = 0;
    r->outstanding = BUS_INFLIGHT;
    for (int i = 0; i < BUS_INFLIGHT; i++) bus_go(&r->w[i]);
    return loop_until(base, &r->done, 60000) ? 0 : -1;
}

/* Warm up (connections, scripts) with one cycle per name, say 'r'; on 'g'
 * release `releases` times, say 'd'. */
static int bus_child(const bench_target *t, struct bus_shm *s, int in_fd, int out_fd, int releases) {
    struct event_base *base = base_new();
    struct bus_run r;
    memset(&r, 0, sizeof r);
    r.shm = s;
    r.client = base ? bench_hilock_client(base, t) : NULL;
    if (r.client == NULL) return 1;
    for (int i = 0; i < BUS_INFLIGHT; i++) {
        r.w[i].run = &r;
        snprintf(r.w[i].name, sizeof r.w[i].name, "hb-bus:%ld:%d", (long)getpid(), i);
    }
    if (bus_cycles(base, &r, BUS_INFLIGHT) != 0 || s->errors) return 1;
    write_byte(out_fd, 'r');
    if (read_byte(in_fd, 30000) != 'g') return 1;
    r.counting = 1;
    int rc = bus_cycles(base, &r, releases);
    write_byte(out_fd, 'd');
    hilock_client_free(r.client);
    event_base_free(base);
    return rc == 0 && s->errors == 0 ? 0 : 1;
}

/* The counters once every publish message sent has been received (each
 * goes to one node), so none of a phase is counted in the next; or after
 * 1 s. 0 or -1. */
static int bus_quiet(const cl_map *m, bus_stats *out) {
    uint64_t until = now_ns() + 1000000000ull;
    for (;;) {
        if (bus_stats_get(m, out) != 0) return -1;
        if ((out->pub_sent == out->pub_received && out->shard_sent == out->shard_received) ||
            now_ns() > until)
            return 0;
        usleep(10000);
    }
}

typedef struct bus_result {
    bus_stats busy, idle;
    double busy_s, idle_s;
    int releases, errors;
} bus_result;

/* The releases in one mode, then the idle bus over at least as long. */
static int bus_measure(const cl_map *m, const bench_target *t, bus_result *out) {
    memset(out, 0, sizeof *out);
    struct bus_shm *s = shm_alloc(sizeof *s);
    int go[2], back[2];
    if (s == NULL || pipe(go) || pipe(back)) return 1;
    pid_t pid = fork_child();
    if (pid < 0) return 1;
    if (pid == 0) _exit(bus_child(t, s, go[0], back[1], g_opts.bus_releases));
    bus_stats a, b, c;
    uint64_t t0 = 0, t1 = 0;
    int ok = read_byte(back[0], 30000) == 'r' && bus_quiet(m, &a) == 0;
    if (ok) {
        t0 = now_ns();
        write_byte(go[1], 'g');
        ok = read_byte(back[0], 90000) == 'd' && bus_quiet(m, &b) == 0;
        t1 = now_ns();
    }
    if (!ok) write_byte(go[1], 'q'); /* the child stops waiting for the go */
    int st = wait_child(pid, 30000);
    if (ok) {
        /* Idle: no client is left; only the gossip runs. */
        double idle_s = (double)(t1 - t0) / 1e9 < 1.0 ? 1.0 : (double)(t1 - t0) / 1e9;
        usleep((useconds_t)(idle_s * 1e6));
        ok = bus_stats_get(m, &c) == 0;
        bus_delta(&a, &b, &out->busy);
        bus_delta(&b, &c, &out->idle);
        out->busy_s = (double)(t1 - t0) / 1e9;
        out->idle_s = (double)(now_ns() - t1) / 1e9;
    }
    out->releases = s->released;
    out->errors = s->errors + !ok + (st != 0);
    close(go[0]), close(go[1]), close(back[0]), close(back[1]);
    shm_free(s, sizeof *s);
    return out->errors ? 1 : 0;
}

static void bus_print(const bus_result *b, const bench_target *t, int nodes) {
    double n = b->releases > 0 ? b->releases : 1;
    double idle_rate = b->idle_s > 0 ? (double)(b->idle.sent + b->idle.received) / b->idle_s : 0;
    double all = (double)(b->busy.sent + b->busy.received) - idle_rate * b->busy_s;
    long long pub = b->busy.pub_sent + b->busy.pub_received;
    long long shard = b->busy.shard_sent + b->busy.shard_received;
    json_begin("cluster_bus");
    json_str("client", "hilock");
    json_str("pubsub", t->label);
    json_int("releases", b->releases);
    json_num("bus_msgs_per_release", (double)(pub + shard) / n, 2);
    json_num("publish_sent_per_release", (double)b->busy.pub_sent / n, 2);
    json_num("publish_received_per_release", (double)b->busy.pub_received / n, 2);
    json_num("publishshard_sent_per_release", (double)b->busy.shard_sent / n, 2);
    json_num("publishshard_received_per_release", (double)b->busy.shard_received / n, 2);
    json_num("all_types_msgs_per_release_less_idle", all / n, 2);
    json_num("idle_msgs_per_s", idle_rate, 1);
    json_str("seen", shard > 0 ? (pub > 0 ? "both" : "publishshard") : pub > 0 ? "publish" : "none");
    json_num("busy_seconds", b->busy_s, 3);
    json_num("idle_seconds", b->idle_s, 3);
    json_int("nodes", nodes);
    json_str("measure", "CLUSTER INFO cluster_stats_messages_*_sent+received deltas, all nodes");
    json_int("errors", b->errors);
    json_end();
    fprintf(stderr, "  cluster bus, %s: %.2f messages per release (sent+received, %d nodes; "
            "all types less idle gossip: %.2f)\n", t->label, (double)(pub + shard) / n, nodes, all / n);
    if (t->pubsub == HILOCK_PUBSUB_SHARDED && shard == 0)
        fprintf(stderr, "  (no SPUBLISH seen: this build of hilock publishes classic in sharded mode)\n");
}

int scenario_cluster_bus(void) {
    cl_map m;
    int modes[CL_MODES], nmodes;
    if (cl_setup(&m, modes, &nmodes) != 0) return 1;
    int failed = 0;
    for (int k = 0; k < nmodes; k++) {
        bench_target t;
        cl_target(&m, modes[k], &t);
        bus_result b;
        failed |= bus_measure(&m, &t, &b);
        bus_print(&b, &t, m.n);
    }
    cl_delete_keys(&m);
    return failed;
}
