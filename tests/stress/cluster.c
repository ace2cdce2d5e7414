/* hilock-stress, cluster phase: the workers of worker.c against a real
 * Redis Cluster of 3 masters and 3 replicas on loopback (the harness's),
 * while the parent injects one fault at a time, chosen at random:
 *   migrate     a busy slot (the slot of a name in use, preferably one whose
 *               lock is held) moved to another master step by step, with a
 *               pause in each window: IMPORTING/MIGRATING before any key
 *               moved (new locks are made on the target through ASK), the
 *               keys moved one by one (a lock and its fence key apart for a
 *               while), every key moved but the slot still MIGRATING, then
 *               SETSLOT NODE (MOVED from then on);
 *   reshard     `redis-cli --cluster reshard` of a few slots, which takes
 *               the lowest slots of its source: some names are chosen to
 *               live there (stress_cluster_names);
 *   failover    CLUSTER FAILOVER on the replica of a random master;
 *   kill9       kill -9 of a random master; its replica is promoted, then
 *               the killed one is restarted on its port and nodes.conf and
 *               rejoins as a replica;
 *   kill9_lagging  the same, its replication link cut a moment before, so
 *               that its last grants are lost (cut_replication);
 *   kill_normal, kill_pubsub   CLIENT KILL TYPE normal|pubsub on any node.
 * After each fault the parent waits until the cluster has settled (every
 * live node says cluster_state:ok, all agree on the slot map, no slot is
 * open, every replica is in sync), so faults do not pile up into a state
 * no operator would leave a cluster in.
 *
 * A fault is reported by kind; what went wrong around it without being a
 * fault of hilock (redis-cli refusing to reshard, a failover that did not
 * happen in time) is reported as an incident. */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
#include "hilock/hilock.h"
#include "support/harness.h"
#include "stress/stress.h"

#define NSLOTS 16384
#define MAX_VIEW 16          /* nodes in one CLUSTER NODES reply */
#define SETTLE_MS 30000
#define DRAIN_RESERVE_MS 12000 /* for the drain, before its rate is known */
#define BAND 12               /* the lowest slots of each initial master */

static test_cluster cl;
static const stress_cfg *wcfg;
static unsigned name_slot[MAX_NAMES];
static long long t0;
static char logdir[64];
static stress_faults incidents;

/* ---- Names ----------------------------------------------------------------- */

static unsigned slot_of(const char *name) {
    char key[256];
    hilock_key("hilock:", name, key, sizeof(key));
    return hilock_key_slot(key, strlen(key));
}

void stress_cluster_names(stress_cfg *cfg) {
    /* `redis-cli --cluster create` gives 3 masters 0-5460, 5461-10922 and
     * 10923-16383; a reshard moves the lowest slots of its source first. */
    static const unsigned band_start[3] = {0, 5461, 10923};
    unsigned k = 0;
    for (int i = 0; i < cfg->names; i++) {
        if (i % 2) {
            snprintf(cfg->name[i], sizeof(cfg->name[i]), "stress-%d", i);
            continue;
        }
        unsigned lo = band_start[(i / 2) % 3];
        do snprintf(cfg->name[i], sizeof(cfg->name[i]), "stress-low-%u", k++);
        while (slot_of(cfg->name[i]) < lo || slot_of(cfg->name[i]) >= lo + BAND);
    }
}

/* ---- Small things ---------------------------------------------------------- */

static double since_start(void) {
    return (double)(test_now_ms() - t0) / 1000.0;
}

static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("hilock-stress: [%6.1f s] ", since_start());
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

static int rnd_in(unsigned *rnd, int lo, int hi) {
    return lo + (int)(rand_r(rnd) % (unsigned)(hi - lo + 1));
}

static int live(int i) {
    return cl.node[i].pid > 0;
}

/* A command on node i over a fresh connection: its reply (caller frees),
 * or NULL when the node cannot be reached. */
#define on(i, ...) test_redis_cmd(&cl.node[i], __VA_ARGS__)

/* The same, for commands whose reply is only OK or an error: 1 if OK. */
static int ok_on(int i, const char *fmt, ...) {
    redisContext *k = live(i) ? test_redis_connect(&cl.node[i]) : NULL;
    if (k == NULL) return 0;
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(k, fmt, ap);
    va_end(ap);
    int ok = rep != NULL && rep->type != REDIS_REPLY_ERROR;
    if (rep != NULL && !ok) say("node :%d: %s: %s", cl.node[i].port, fmt, rep->str);
    if (rep) freeReplyObject(rep);
    redisFree(k);
    return ok;
}

/* Does node i's reply to `cmd` (a bulk string, as CLUSTER INFO and INFO
 * give) contain every needle of the NULL-terminated list? */
#define says(i, ...) test_redis_says(&cl.node[i], __VA_ARGS__)

/* ---- The slot map, as one node sees it (CLUSTER NODES) ---------------------- */

typedef struct cnode {
    int idx;                  /* in cl.node, or -1 */
    char id[48], master_id[48];
    int master, failed;
    unsigned long long epoch;   /* config epoch */
} cnode;

typedef struct cview {
    int n;
    cnode node[MAX_VIEW];
    signed char owner[NSLOTS]; /* index in node[], or -1 */
    int open;                  /* slots MIGRATING or IMPORTING */
    unsigned long long sig;    /* hash of who owns each slot, at which epoch */
} cview;

static int idx_of_port(int port) {
    for (int i = 0; i < TEST_CLUSTER_NODES; i++)
        if (cl.node[i].port == port) return i;
    return -1;
}

static void parse_slots(cview *v, int who, char *tok) {
    for (; tok != NULL; tok = strtok(NULL, " ")) {
        if (tok[0] == '[') { v->open++; continue; }
        char *dash = strchr(tok, '-');
        long a = strtol(tok, NULL, 10), b = dash ? strtol(dash + 1, NULL, 10) : a;
        for (long s = a; s <= b && s >= 0 && s < NSLOTS; s++) v->owner[s] = (signed char)who;
    }
}

/* Is `flag` one of the comma-separated `flags`? */
static int has_flag(const char *flags, const char *flag) {
    size_t n = strlen(flag);
    for (const char *p = flags; p != NULL; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, flag, n) == 0 && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

/* One line: id addr flags master ping pong epoch link slot... */
static void parse_line(cview *v, char *line) {
    if (v->n == MAX_VIEW) return;
    cnode *c = &v->node[v->n];
    char *id = strtok(line, " "), *addr = strtok(NULL, " "), *flags = strtok(NULL, " ");
    char *master = strtok(NULL, " ");
    strtok(NULL, " ");
    strtok(NULL, " "); /* ping-sent pong-recv */
    char *epoch = strtok(NULL, " ");
    strtok(NULL, " "); /* link-state */
    if (id == NULL || addr == NULL || flags == NULL || master == NULL || epoch == NULL) return;
    c->epoch = strtoull(epoch, NULL, 10);
    char *at = strchr(addr, '@'); /* "ip:port@bus[,hostname]" */
    if (at) *at = '\0';
    const char *colon = strrchr(addr, ':');
    c->idx = colon ? idx_of_port(atoi(colon + 1)) : -1;
    snprintf(c->id, sizeof(c->id), "%s", id);
    snprintf(c->master_id, sizeof(c->master_id), "%s", master);
    c->master = has_flag(flags, "master");
    c->failed = has_flag(flags, "fail") || has_flag(flags, "fail?");
    parse_slots(v, v->n, strtok(NULL, " "));
    v->n++;
}

static unsigned long long fnv(unsigned long long h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Node i's view; 0, or -1 when it does not answer. */
static int view_from(int i, cview *v) {
    redisReply *rep = on(i, "CLUSTER NODES");
    memset(v, 0, sizeof(*v));
    memset(v->owner, -1, sizeof(v->owner));
    if (rep == NULL || rep->type != REDIS_REPLY_STRING) {
        if (rep) freeReplyObject(rep);
        return -1;
    }
    for (char *save = NULL, *line = strtok_r(rep->str, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save))
        parse_line(v, line);
    freeReplyObject(rep);
    unsigned long long h[MAX_VIEW];
    for (int n = 0; n < v->n; n++) {
        char epoch[24];
        snprintf(epoch, sizeof(epoch), ":%llu", v->node[n].epoch);
        h[n] = fnv(fnv(14695981039346656037ULL, v->node[n].id), epoch);
    }
    v->sig = 14695981039346656037ULL;
    for (int s = 0; s < NSLOTS; s++) v->sig = (v->sig ^ (v->owner[s] < 0 ? 0 : h[v->owner[s]])) * 1099511628211ULL;
    return 0;
}

static const cnode *owner_of(const cview *v, unsigned slot) {
    return v->owner[slot] < 0 ? NULL : &v->node[(int)v->owner[slot]];
}

static const cnode *by_idx(const cview *v, int idx) {
    for (int n = 0; n < v->n; n++)
        if (v->node[n].idx == idx) return &v->node[n];
    return NULL;
}

static int has_slots(const cview *v, int n) {
    for (int s = 0; s < NSLOTS; s++)
        if (v->owner[s] == n) return 1;
    return 0;
}

/* The live, in-sync replica of master m (cl index), or -1. */
static int replica_of(const cview *v, int m) {
    const cnode *mc = by_idx(v, m);
    for (int n = 0; mc && n < v->n; n++) {
        const cnode *c = &v->node[n];
        if (!c->master && !c->failed && c->idx >= 0 && live(c->idx) && strcmp(c->master_id, mc->id) == 0 &&
            says(c->idx, "INFO replication", "master_link_status:up", "master_sync_in_progress:0", NULL))
            return c->idx;
    }
    return -1;
}

/* Masters that serve slots (cl indexes); returns how many. */
static int masters(const cview *v, int out[TEST_CLUSTER_NODES]) {
    int k = 0;
    for (int n = 0; n < v->n && k < TEST_CLUSTER_NODES; n++)
        if (v->node[n].master && !v->node[n].failed && v->node[n].idx >= 0 && has_slots(v, n))
            out[k++] = v->node[n].idx;
    return k;
}

/* ---- Settling ------------------------------------------------------------- */

static cview cur; /* the map of the last settled cluster */

/* Two masters that serve slots with one config epoch: a collision (say a
 * failover while a migrated slot was closed) that Redis has yet to resolve
 * by giving one of them a new epoch. */
static int epochs_collide(const cview *v) {
    for (int a = 0; a < v->n; a++)
        for (int b = a + 1; b < v->n; b++)
            if (v->node[a].master && v->node[b].master && v->node[a].epoch == v->node[b].epoch &&
                has_slots(v, a) && has_slots(v, b))
                return 1;
    return 0;
}

/* Settled: every live node is ok, sees every slot served and no slot open,
 * agrees with the others on the map and the epochs of its owners (no two
 * the same); every master has a live replica in sync (when all six nodes
 * are up); no live node is marked failed. */
static int settled(void) {
    static cview v;
    int first = 1;
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) {
        if (!live(i)) continue;
        if (!says(i, "CLUSTER INFO", "cluster_state:ok", "cluster_slots_ok:16384", NULL)) return 0;
        if (view_from(i, &v) != 0 || v.open) return 0;
        for (int n = 0; n < v.n; n++)
            if (v.node[n].failed && v.node[n].idx >= 0 && live(v.node[n].idx)) return 0;
        if (first) cur = v;
        else if (v.sig != cur.sig) return 0;
        if (epochs_collide(&v)) return 0;
        first = 0;
    }
    int all = 1, m[TEST_CLUSTER_NODES], nm = masters(&cur, m);
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) all &= live(i);
    for (int k = 0; all && k < nm; k++)
        if (replica_of(&cur, m[k]) < 0) return 0;
    return !first && nm > 0;
}

static int wait_settled(int ms) {
    long long until = test_now_ms() + ms;
    while (!settled()) {
        if (test_now_ms() > until) return 0;
        test_msleep(100);
    }
    return 1;
}

/* ---- redis-cli ---------------------------------------------------------------- */

/* fork + exec redis-cli with stdin from `in` (it answers the questions
 * that --cluster-yes does not cover) and its output into `out`. */
static pid_t spawn_cli(char **argv, const char *in, const char *out) {
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* it dies with us */
    if (getppid() != parent) _exit(127);
    int i = open(in, O_RDONLY), o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (i >= 0) dup2(i, 0);
    if (o >= 0) { dup2(o, 1); dup2(o, 2); }
    signal(SIGPIPE, SIG_DFL);
    execvp(argv[0], argv);
    _exit(127);
}

/* Run redis-cli with args (NULL-terminated, without the program), its
 * output into logdir/name.log; its exit status, -1 if it had to be killed. */
static int redis_cli(const char *name, int timeout_ms, char **args) {
    char *argv[24] = {(char *)test_cli_bin()}, in[128], out[128];
    int a = 1;
    for (; args[a - 1] != NULL && a < 23; a++) argv[a] = args[a - 1];
    argv[a] = NULL;
    snprintf(in, sizeof(in), "%s/yes", logdir);
    snprintf(out, sizeof(out), "%s/%s.log", logdir, name);
    pid_t pid = spawn_cli(argv, in, out);
    if (pid < 0) return -1;
    int st = test_wait(pid, timeout_ms);
    if (st < 0) { /* stopped by its pid, like every process started here */
        kill(pid, SIGKILL);
        test_wait(pid, 5000);
    }
    return st;
}

/* On a failure: each live node's CLUSTER NODES, for the report. */
static void show_views(void) {
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) {
        redisReply *rep = on(i, "CLUSTER NODES");
        printf("hilock-stress: node :%d sees:\n%s", cl.node[i].port,
               rep && rep->type == REDIS_REPLY_STRING ? rep->str : "(no answer)\n");
        if (rep) freeReplyObject(rep);
    }
    fflush(stdout);
}

/* On a failure: keep each node's log in logdir (the harness removes the
 * nodes' dirs when it stops them). */
static void keep_logs(void) {
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "cp %s/redis.log %s/node-%d.log 2>/dev/null", cl.node[i].dir, logdir,
                 cl.node[i].port);
        if (cl.node[i].dir[0] && system(cmd) != 0) { /* best effort */ }
    }
}

static void show_log(const char *name) {
    char path[128], buf[4096];
    snprintf(path, sizeof(path), "%s/%s.log", logdir, name);
    test_slurp(path, buf, sizeof(buf));
    const char *tail = strlen(buf) > 1200 ? buf + strlen(buf) - 1200 : buf;
    say("%s output (end):\n%s", name, tail);
}

static int any_live(void) {
    for (int i = 0; i < TEST_CLUSTER_NODES; i++)
        if (live(i)) return i;
    return 0;
}

/* `redis-cli --cluster fix`: closes slots left open. */
static void fix(void) {
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", cl.node[any_live()].port);
    char *args[] = {"--cluster", "fix", addr, "--cluster-yes", NULL};
    stress_fault(&incidents, "cluster_fix");
    if (redis_cli("fix", 60000, args) != 0) show_log("fix");
}

/* ---- Faults ----------------------------------------------------------------- */

static int other_master(const cview *v, int not, unsigned *rnd) {
    int m[TEST_CLUSTER_NODES], k = masters(v, m), pick[TEST_CLUSTER_NODES], np = 0;
    for (int j = 0; j < k; j++)
        if (m[j] != not) pick[np++] = m[j];
    return np ? pick[rand_r(rnd) % (unsigned)np] : -1;
}

/* A name in use, preferably one whose lock is held now. */
static int busy_name(const cview *v, unsigned *rnd) {
    int name = rnd_in(rnd, 0, wcfg->names - 1);
    for (int t = 0; t < 8; t++) {
        int k = rnd_in(rnd, 0, wcfg->names - 1);
        const cnode *o = owner_of(v, name_slot[k]);
        char key[256];
        hilock_key("hilock:", wcfg->name[k], key, sizeof(key));
        if (o && o->idx >= 0 && test_redis_int(&cl.node[o->idx], "EXISTS %s", key) == 1) return k;
    }
    return name;
}

static void pause_ms(unsigned *rnd, int lo, int hi) {
    test_msleep(rnd_in(rnd, lo, hi));
}

/* MIGRATE the slot's keys one at a time, with pauses, until none is left on
 * src. Returns how many moved, or -1 on an error. */
static int move_keys(int src, int dst, unsigned slot, unsigned *rnd) {
    char port[16];
    int moved = 0;
    snprintf(port, sizeof(port), "%d", cl.node[dst].port);
    for (int round = 0; round < 200; round++) {
        redisReply *keys = on(src, "CLUSTER GETKEYSINSLOT %u 1", slot);
        if (keys == NULL || keys->type != REDIS_REPLY_ARRAY) {
            if (keys) freeReplyObject(keys);
            return -1;
        }
        if (keys->elements == 0) { freeReplyObject(keys); return moved; }
        /* REPLACE: a lock made on dst through ASK may have written the
         * name's fence key there already; the one from src is older, and
         * a fence is max(last + 1, TIME in us), so it cannot go back. */
        const char *argv[] = {"MIGRATE", "127.0.0.1", port, "", "0", "5000", "REPLACE", "KEYS",
                              keys->element[0]->str};
        redisContext *k = test_redis_connect(&cl.node[src]);
        redisReply *rep = k ? redisCommandArgv(k, 9, argv, NULL) : NULL;
        int ok = rep != NULL && rep->type != REDIS_REPLY_ERROR;
        if (!ok) say("MIGRATE %s: %s", keys->element[0]->str, rep ? rep->str : "no answer");
        if (rep) freeReplyObject(rep);
        if (k) redisFree(k);
        freeReplyObject(keys);
        if (!ok) return -1;
        moved++;
        pause_ms(rnd, 0, 150); /* a lock and its fence key apart for a while */
    }
    return -1;
}

/* The slot is dst's: tell dst first, then src, then the other masters (the
 * order of the Redis Cluster specification, as redis-cli does). */
static void assign(unsigned slot, int src, int dst, const char *dst_id) {
    ok_on(dst, "CLUSTER SETSLOT %u NODE %s", slot, dst_id);
    ok_on(src, "CLUSTER SETSLOT %u NODE %s", slot, dst_id);
    int m[TEST_CLUSTER_NODES], k = masters(&cur, m);
    for (int j = 0; j < k; j++)
        if (m[j] != src && m[j] != dst) ok_on(m[j], "CLUSTER SETSLOT %u NODE %s", slot, dst_id);
}

static int fault_migrate(stress_faults *f, unsigned *rnd) {
    int name = busy_name(&cur, rnd);
    unsigned slot = name_slot[name];
    const cnode *s = owner_of(&cur, slot);
    int src = s ? s->idx : -1, dst = other_master(&cur, src, rnd);
    if (src < 0 || dst < 0) return 0;
    char src_id[48], dst_id[48];
    snprintf(src_id, sizeof(src_id), "%s", s->id);
    snprintf(dst_id, sizeof(dst_id), "%s", by_idx(&cur, dst)->id);
    if (!ok_on(dst, "CLUSTER SETSLOT %u IMPORTING %s", slot, src_id)) return -1;
    if (!ok_on(src, "CLUSTER SETSLOT %u MIGRATING %s", slot, dst_id)) return -1;
    pause_ms(rnd, 100, 600);   /* no key moved yet: new locks go to dst (ASK) */
    int moved = move_keys(src, dst, slot, rnd);
    if (moved < 0) return -1;  /* left open: the settle step will fix it */
    pause_ms(rnd, 0, 400);     /* every key on dst, the slot still MIGRATING */
    assign(slot, src, dst, dst_id);
    stress_fault(f, "migrate");
    say("migrate: slot %u (%s) :%d -> :%d, %d keys moved one by one", slot, wcfg->name[name],
        cl.node[src].port, cl.node[dst].port, moved);
    return 0;
}

/* The n lowest slots of master `who` (what redis-cli moves): how many of
 * them hold one of our names? */
static int busy_among_lowest(const cview *v, int who, int n) {
    int busy = 0;
    for (int s = 0; s < NSLOTS && n > 0; s++) {
        const cnode *o = owner_of(v, (unsigned)s);
        if (o == NULL || o->idx != who) continue;
        n--;
        for (int k = 0; k < wcfg->names; k++)
            if (name_slot[k] == (unsigned)s) { busy++; break; }
    }
    return busy;
}

static int fault_reshard(stress_faults *f, unsigned *rnd) {
    int m[TEST_CLUSTER_NODES], k = masters(&cur, m);
    if (k < 2) return 0;
    int src = m[rand_r(rnd) % (unsigned)k], dst = other_master(&cur, src, rnd), n = rnd_in(rnd, 1, 6);
    char from[48], to[48], slots[8], addr[32];
    snprintf(from, sizeof(from), "%s", by_idx(&cur, src)->id);
    snprintf(to, sizeof(to), "%s", by_idx(&cur, dst)->id);
    snprintf(slots, sizeof(slots), "%d", n);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", cl.node[src].port);
    int busy = busy_among_lowest(&cur, src, n);
    /* --cluster-replace: as in move_keys, a fence key may be on both. */
    char *args[] = {"--cluster", "reshard", addr, "--cluster-from", from, "--cluster-to", to,
                    "--cluster-slots", slots, "--cluster-yes", "--cluster-replace", NULL};
    int rc = redis_cli("reshard", 60000, args);
    if (rc != 0) {
        stress_fault(&incidents, "reshard_failed");
        say("reshard: redis-cli exited %d", rc);
        show_log("reshard");
        return 0;
    }
    stress_fault(f, "reshard");
    say("reshard: %d slots :%d -> :%d (%d of them busy)", n, cl.node[src].port, cl.node[dst].port, busy);
    return 0;
}

/* Wait until node r says it is a master, up to ms; 1 if it did. */
static int wait_master(int r, int ms) {
    long long until = test_now_ms() + ms;
    while (test_now_ms() < until) {
        if (says(r, "INFO replication", "role:master", NULL) &&
            says(r, "CLUSTER INFO", "cluster_state:ok", NULL))
            return 1;
        test_msleep(50);
    }
    return 0;
}

/* A master with a replica in sync (cl indexes), or 0 if there is none. */
static int pick_pair(unsigned *rnd, int *m, int *r) {
    int ms[TEST_CLUSTER_NODES], k = masters(&cur, ms);
    for (int t = 0; k > 0 && t < 8; t++) {
        *m = ms[rand_r(rnd) % (unsigned)k];
        *r = replica_of(&cur, *m);
        if (*r >= 0) return 1;
    }
    return 0;
}

static int fault_failover(stress_faults *f, unsigned *rnd) {
    int m, r;
    if (!pick_pair(rnd, &m, &r)) return 0;
    long long t = test_now_ms();
    if (!ok_on(r, "CLUSTER FAILOVER") || !wait_master(r, 15000)) {
        stress_fault(&incidents, "failover_not_done");
        say("failover: :%d did not take over from :%d", cl.node[r].port, cl.node[m].port);
        return 0;
    }
    stress_fault(f, "failover");
    say("failover: CLUSTER FAILOVER on :%d, master instead of :%d after %lld ms", cl.node[r].port,
        cl.node[m].port, test_now_ms() - t);
    return 0;
}

/* The names the killed master served get the asynchronous replication
 * window: a grant it made from `from` on may be lost, and its holder
 * believes it holds the lock for at most one lease after its last acquire
 * or renewal sent to that master, so only an overlap that starts by then
 * can be that limit (+ 1 s for a busy loop to run the lost callback). */
static void open_limit(const cview *v, int m, long long from, long long killed) {
    for (int k = 0; k < wcfg->names; k++) {
        const cnode *o = owner_of(v, name_slot[k]);
        if (o == NULL || o->idx != m) continue;
        sh->limit_until[k] = killed + wcfg->lease_ms + 1000;
        sh->limit_from[k] = from;
    }
}

/* The fence key of name k on node i, 0 if it has none. */
static unsigned long long fence_on(int i, int k) {
    char key[256];
    hilock_key("hilock:", wcfg->name[k], key, sizeof(key));
    redisReply *rep = on(i, "GET %s:fence", key);
    unsigned long long f = rep && rep->type == REDIS_REPLY_STRING ? strtoull(rep->str, NULL, 10) : 0;
    if (rep) freeReplyObject(rep);
    return f;
}

/* How many names of master m have a fence on the promoted replica r older
 * than the last one a worker was granted before the kill (`last`): their
 * last grants were lost with m. Fences still increase, from TIME. */
static int names_behind(const cview *v, int m, int r, const unsigned long long *last) {
    int behind = 0;
    for (int k = 0; k < wcfg->names; k++) {
        const cnode *o = owner_of(v, name_slot[k]);
        if (o && o->idx == m && fence_on(r, k) < last[k]) behind++;
    }
    return behind;
}

/* Half the kills lose the master's last writes on purpose: its replica is
 * stalled (DEBUG SLEEP 1.5, below the node timeout), the master's link to
 * it cut (CLIENT KILL TYPE replica), and the master killed 0.3-1 s later,
 * before the replica could reconnect and resynchronise. On loopback a
 * write reaches the replica well within a millisecond, so a plain kill
 * almost never finds one in flight; this makes the asynchronous
 * replication limit happen. Returns the stalling child's pid, or -1. */
static pid_t cut_replication(int m, int r, unsigned *rnd) {
    pid_t sleeper = test_redis_debug_sleep(&cl.node[r], "1.5");
    test_msleep(50); /* DEBUG SLEEP has begun */
    test_redis_int(&cl.node[m], "CLIENT KILL TYPE replica");
    pause_ms(rnd, 300, 1000);
    return sleeper;
}

static void reap_child(pid_t pid) {
    if (pid <= 0) return;
    if (test_wait(pid, 10000) < 0) {
        kill(pid, SIGKILL);
        test_wait(pid, 5000);
    }
}

static int fault_kill(stress_faults *f, unsigned *rnd) {
    int m, r, lag = rand_r(rnd) % 2;
    if (!pick_pair(rnd, &m, &r)) return 0;
    long long from = test_now_ms();
    pid_t sleeper = -1;
    if (lag) {
        open_limit(&cur, m, from, LLONG_MAX / 2);
        sleeper = cut_replication(m, r, rnd);
    }
    unsigned long long last[MAX_NAMES];
    for (int k = 0; k < wcfg->names; k++) last[k] = sh->last_fence[k];
    long long t = test_now_ms();
    open_limit(&cur, m, from, t);
    test_redis_kill(&cl.node[m]);
    reap_child(sleeper);
    int promoted = wait_master(r, 30000);
    long long took = test_now_ms() - t;
    int behind = promoted ? names_behind(&cur, m, r, last) : 0;
    for (int k = 0; k < behind; k++) stress_fault(&incidents, "names_whose_last_grant_was_lost");
    if (!promoted) stress_fault(&incidents, "kill9_not_promoted");
    pause_ms(rnd, 200, 1000);
    int back = test_cluster_node_restart(&cl, m) == 0;
    if (!back) stress_fault(&incidents, "restart_failed");
    stress_fault(f, lag ? "kill9_lagging" : "kill9");
    say("%s: master :%d killed%s, :%d %s after %lld ms, %d names lost their last grant; :%d %s",
        lag ? "kill9_lagging" : "kill9", cl.node[m].port, lag ? " after its replication link was cut" : "",
        cl.node[r].port, promoted ? "promoted" : "NOT promoted", took, behind, cl.node[m].port,
        back ? "restarted (rejoins as a replica)" : "could not restart");
    return 0;
}

/* CLIENT KILL on a random node that has such connections (with classic
 * pub/sub, the subscriptions are all on one node). */
static int fault_client_kill(stress_faults *f, unsigned *rnd) {
    int first = rnd_in(rnd, 0, TEST_CLUSTER_NODES - 1), pubsub = rand_r(rnd) % 2, i = first;
    long long n = 0;
    for (int t = 0; t < TEST_CLUSTER_NODES && n <= 0; t++) {
        i = (first + t) % TEST_CLUSTER_NODES;
        if (live(i))
            n = test_redis_int(&cl.node[i], pubsub ? "CLIENT KILL TYPE pubsub" : "CLIENT KILL TYPE normal");
    }
    stress_fault(f, pubsub ? "kill_pubsub" : "kill_normal");
    say("%s: %lld connections of :%d", pubsub ? "kill_pubsub" : "kill_normal", n, cl.node[i].port);
    return 0;
}

/* One fault, chosen at random among those that fit in the time left (a
 * kill -9 with its failover, restart and resync takes the longest).
 * Returns 0, or -1 when the cluster was left in a state to repair. */
static int one_fault(stress_faults *f, unsigned *rnd, long long left_ms) {
    int roll = rnd_in(rnd, 0, 99);
    if (roll < 30 && left_ms > 6000) return fault_migrate(f, rnd);
    if (roll < 45 && left_ms > 10000) return fault_reshard(f, rnd);
    if (roll < 60 && left_ms > 12000) return fault_failover(f, rnd);
    if (roll < 75 && left_ms > 18000) return fault_kill(f, rnd);
    return fault_client_kill(f, rnd);
}

/* ---- The phase ---------------------------------------------------------------- */

static void seeds_url(stress_cfg *cfg) {
    size_t n = (size_t)snprintf(cfg->url, sizeof(cfg->url), "redis://");
    for (int i = 0; i < TEST_CLUSTER_NODES && n < sizeof(cfg->url); i++)
        n += (size_t)snprintf(cfg->url + n, sizeof(cfg->url) - n, "%s127.0.0.1:%d", i ? "," : "",
                              cl.node[i].port);
}

/* How long the workers will take to drain once stopped: the waiters
 * pending now at the rate grants have come since `since`, with a margin.
 * Hand-offs are slower than on one server (a release reaches the waiters
 * through the cluster bus), and the queues drain at a half to a third of
 * the rate they are served at while every waiter comes back, so this is
 * 10-20 s with the default 4000 waiters. */
static long long drain_estimate(long long since) {
    long pending = 0;
    for (int p = 0; p < wcfg->procs; p++) pending += sh->issued[p] - sh->ended[p];
    long long elapsed = test_now_ms() - since;
    if (elapsed < 1000 || sh->acquisitions == 0) return DRAIN_RESERVE_MS;
    double per_ms = (double)sh->acquisitions / (double)elapsed;
    long long est = (long long)((double)pending / per_ms * 2.5) + 2000; /* drains at 1/2..1/3 the rate */
    return est < 5000 ? 5000 : est > 30000 ? 30000 : est;
}

/* Faults until the drain must begin to end by end_ms; 0, or -1 if the
 * cluster would not settle. */
static int fault_loop(stress_faults *f, long long end_ms) {
    unsigned rnd = (unsigned)time(NULL) ^ (unsigned)getpid();
    long long since = test_now_ms();
    for (;;) {
        pause_ms(&rnd, 300, 1200);
        long long left = end_ms - drain_estimate(since) - 1000 - test_now_ms(); /* 1 s: the last settle */
        if (left <= 0) break;
        int rc = one_fault(f, &rnd, left);
        if (rc == 0 && wait_settled(SETTLE_MS)) continue;
        say("the cluster has not settled%s; redis-cli --cluster fix", rc ? " after a failed fault" : "");
        show_views();
        fix();
        if (!wait_settled(SETTLE_MS)) {
            say("the cluster did not settle: the phase stops here");
            return -1;
        }
    }
    return 0;
}

static void print_incidents(void) {
    if (incidents.count == 0) return;
    printf("hilock-stress: cluster: incidents (not faults of hilock):");
    for (int i = 0; i < incidents.count; i++) printf(" %s=%ld", incidents.kind[i], incidents.n[i]);
    printf("\n");
    for (int i = 0; i < incidents.count; i++)
        if (strcmp(incidents.kind[i], "names_whose_last_grant_was_lost") == 0)
            printf("hilock-stress: cluster: after a kill -9 the promoted replica lacked the last grant of\n"
                   "  %ld names (asynchronous replication); their next fences came from TIME and still\n"
                   "  increased (fence_regressions counts any that did not).\n", incidents.n[i]);
}

int stress_cluster(stress_cfg *cfg, long long end_ms, stress_faults *faults, long *stranded,
                   int *bad_exits) {
    t0 = test_now_ms();
    wcfg = cfg;
    memset(&incidents, 0, sizeof(incidents));
    snprintf(logdir, sizeof(logdir), "/tmp/hilock-stress-cluster-XXXXXX");
    if (mkdtemp(logdir) == NULL) { perror("mkdtemp"); return -1; }
    char yes[96];
    snprintf(yes, sizeof(yes), "%s/yes", logdir);
    FILE *y = fopen(yes, "w");
    for (int i = 0; y && i < 100; i++) fputs("yes\n", y);
    if (y) fclose(y);
    for (int k = 0; k < cfg->names; k++) name_slot[k] = slot_of(cfg->name[k]);
    if (test_cluster_start(&cl) != 0 || !wait_settled(SETTLE_MS)) {
        fprintf(stderr, "hilock-stress: the cluster did not start\n");
        test_cluster_stop(&cl);
        return -1;
    }
    seeds_url(cfg);
    say("cluster: %d processes x %d waiters on %d names, %lld s, nodes %s", cfg->procs, cfg->per_proc,
        cfg->names, (end_ms - test_now_ms() + 999) / 1000, cfg->url + 8);
    pid_t *kids = stress_workers_start(cfg);
    int rc = kids ? fault_loop(faults, end_ms) : -1;
    if (kids) {
        long long t = test_now_ms();
        *bad_exits = stress_workers_finish(kids, cfg->procs, 30000, stranded);
        say("the workers drained in %lld ms", test_now_ms() - t);
    }
    print_incidents();
    int keep = rc != 0 || *stranded || *bad_exits || sh->overlaps || sh->regressions ||
               sh->double_callbacks;
    if (keep) {
        show_views();
        keep_logs();
        say("the servers' logs are kept in %s", logdir);
    }
    test_cluster_stop(&cl); /* every server, by pid */
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", logdir);
    if (!keep && system(cmd) != 0) { /* a leftover temp dir is harmless */ }
    return rc;
}
