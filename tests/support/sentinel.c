/* Test harness for Redis Sentinel (see sentinelenv.h): a master, a replica
 * and three sentinels on loopback.
 *
 * Notes on Redis 7.0's Sentinel that shape this file:
 *  - A sentinel needs a config file it can rewrite (it saves what it learns
 *    there), so each one gets its own dir with its sentinel.conf, and runs
 *    as `redis-server sentinel.conf --sentinel` (the file must be the first
 *    argument, so harness.c's spawn, which puts its options first, is not
 *    used). `dir` makes it chdir there, where run-tests.sh looks for
 *    leftovers.
 *  - A sentinel learns the replicas from the master's INFO (at once on
 *    connect, then every 10 s), so the replica's link is up before the
 *    sentinels start; it learns the other sentinels from their hellos on
 *    the master's __sentinel__:hello channel, every 2 s. The whole start
 *    takes about 3 s.
 *  - The master syncs its replica at once only with repl-diskless-sync-delay
 *    0 (the default waits 5 s); both data nodes get it, as each may be the
 *    master. */
#include "support/sentinelenv.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define READY_WAIT_MS 15000
#define LINK_WAIT_MS 10000
#define SPAWN_WAIT_MS 5000

/* ---- Replies -------------------------------------------------------------- */

/* The value of `field` in a flat [field, value, ...] array, or NULL. */
static const char *field(const redisReply *a, const char *name) {
    if (a == NULL || a->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < a->elements; i += 2)
        if (a->element[i]->type == REDIS_REPLY_STRING && strcmp(a->element[i]->str, name) == 0 &&
            a->element[i + 1]->type == REDIS_REPLY_STRING)
            return a->element[i + 1]->str;
    return NULL;
}

int test_redis_role(const test_redis *r) {
    redisReply *rep = test_redis_cmd(r, "ROLE");
    int role = 0;
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
        rep->element[0]->type == REDIS_REPLY_STRING) {
        if (strcmp(rep->element[0]->str, "master") == 0) role = 'm';
        else if (strcmp(rep->element[0]->str, "slave") == 0) role = 's';
    }
    if (rep) freeReplyObject(rep);
    return role;
}

int test_sentinel_named_port(const test_redis *sent, const char *name) {
    redisReply *rep = test_redis_cmd(sent, "SENTINEL get-master-addr-by-name %s", name);
    int port = -1;
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
        rep->element[1]->type == REDIS_REPLY_STRING)
        port = atoi(rep->element[1]->str);
    if (rep) freeReplyObject(rep);
    return port;
}

/* ---- Sentinel processes ---------------------------------------------------- */

/* fork + exec `redis-server CONF --sentinel` in r->dir; the pid, or -1. */
static pid_t spawn_sentinel(const test_redis *r, const char *conf) {
    char out[192];
    snprintf(out, sizeof(out), "%s/stdout.log", r->dir);
    const char *bin = test_server_bin();
    const char *argv[] = {bin, conf, "--sentinel", NULL};
    return test_spawn_server(argv, out, r->dir);
}

int test_sentinel_spawn(test_redis *r, const char *name, int master_port, int quorum) {
    for (int attempt = 0; attempt < 3; attempt++) {
        memset(r, 0, sizeof(*r));
        r->port = test_free_port();
        if (r->port <= 0 || test_make_dir(r->dir, sizeof(r->dir)) != 0) {
            r->dir[0] = '\0';
            return -1;
        }
        snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
        char conf[192];
        snprintf(conf, sizeof(conf), "%s/sentinel.conf", r->dir);
        FILE *f = fopen(conf, "w");
        if (f == NULL) { test_redis_stop(r); return -1; }
        fprintf(f,
                "port %d\n"
                "bind 127.0.0.1\n"
                "daemonize no\n"
                "dir %s\n"
                "logfile %s/sentinel.log\n"
                "sentinel monitor %s 127.0.0.1 %d %d\n"
                "sentinel down-after-milliseconds %s 1000\n"
                "sentinel failover-timeout %s 5000\n"
                "sentinel parallel-syncs %s 1\n",
                r->port, r->dir, r->dir, name, master_port, quorum, name, name, name);
        fclose(f);
        r->pid = spawn_sentinel(r, conf);
        if (r->pid < 0) { r->pid = 0; test_redis_stop(r); return -1; }
        long long deadline = test_now_ms() + SPAWN_WAIT_MS;
        int st;
        while ((st = test_redis_probe(r)) == 0 && test_now_ms() < deadline) test_msleep(10);
        if (st == 1) return 0;
        char buf[2048];
        char path[192];
        snprintf(path, sizeof(path), "%s/sentinel.log", r->dir);
        fprintf(stderr, "harness: sentinel on port %d %s:\n%s\n", r->port,
                st == -2 ? "lost its port" : st == -1 ? "exited" : "did not answer PING",
                test_slurp(path, buf, sizeof(buf)));
        test_redis_stop(r);
    }
    return -1;
}

/* ---- Readiness ------------------------------------------------------------- */

/* The replica r is in step with its master: link up, and the master counts
 * it online. */
static int link_up(const test_redis *r, const test_redis *master) {
    redisReply *a = test_redis_cmd(r, "INFO replication"), *b = test_redis_cmd(master, "INFO replication");
    int ok = a && a->type == REDIS_REPLY_STRING && strstr(a->str, "master_link_status:up") &&
             b && b->type == REDIS_REPLY_STRING && strstr(b->str, "state=online");
    if (a) freeReplyObject(a);
    if (b) freeReplyObject(b);
    return ok;
}

static int wait_link(const test_redis *r, const test_redis *master, int ms) {
    long long deadline = test_now_ms() + ms;
    while (!link_up(r, master)) {
        if (test_now_ms() > deadline) return -1;
        test_msleep(20);
    }
    return 0;
}

/* Each entry of a SENTINEL REPLICAS/SENTINELS reply is fine, and there are n. */
static int entries_ok(const redisReply *rep, size_t n, const char *flags) {
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != n) return 0;
    for (size_t i = 0; i < n; i++) {
        const char *fl = field(rep->element[i], "flags");
        if (fl == NULL || strcmp(fl, flags) != 0) return 0;
        const char *link = field(rep->element[i], "master-link-status");
        if (strcmp(flags, "slave") == 0 && (link == NULL || strcmp(link, "ok") != 0)) return 0;
    }
    return 1;
}

int test_sentinel_replicas_ok(const test_redis *sent, const char *name, size_t n) {
    redisReply *rep = test_redis_cmd(sent, "SENTINEL REPLICAS %s", name);
    int ok = entries_ok(rep, n, "slave");
    if (rep) freeReplyObject(rep);
    return ok;
}

/* Sentinel `sent` knows `master` as the master, its replica in step and
 * the two other sentinels, all connected: a failover can be authorised. */
static int sentinel_ready(const test_sentinel *s, const test_redis *sent, const test_redis *master) {
    if (test_sentinel_named_port(sent, s->name) != master->port) return 0;
    redisReply *m = test_redis_cmd(sent, "SENTINEL MASTER %s", s->name);
    redisReply *rs = test_redis_cmd(sent, "SENTINEL REPLICAS %s", s->name);
    redisReply *ss = test_redis_cmd(sent, "SENTINEL SENTINELS %s", s->name);
    const char *fl = field(m, "flags");
    int ok = fl && strcmp(fl, "master") == 0 && entries_ok(rs, 1, "slave") &&
             entries_ok(ss, TEST_SENTINELS - 1, "sentinel");
    if (m) freeReplyObject(m);
    if (rs) freeReplyObject(rs);
    if (ss) freeReplyObject(ss);
    return ok;
}

/* ---- The set-up -------------------------------------------------------------- */

static int data_node_start(test_redis *r, int port, const test_redis *master) {
    char mport[16];
    snprintf(mport, sizeof(mport), "%d", master ? master->port : 0);
    for (int debug = 1; debug >= 0; debug--) {
        /* DEBUG enabled where the server knows the option (7.0 on). */
        const char *dbg = debug ? "--enable-debug-command" : NULL;
        int rc = master
                     ? test_redis_start(r, port, "--repl-diskless-sync-delay", "0", "--replicaof",
                                        "127.0.0.1", mport, dbg, "yes", NULL)
                     : test_redis_start(r, port, "--repl-diskless-sync-delay", "0", dbg, "yes", NULL);
        if (rc == 0) return 0;
    }
    return -1;
}

int test_sentinel_start(test_sentinel *s) {
    memset(s, 0, sizeof(*s));
    snprintf(s->name, sizeof(s->name), "%s", TEST_SENTINEL_NAME);
    if (data_node_start(&s->node[0], 0, NULL) != 0 || data_node_start(&s->node[1], 0, &s->node[0]) != 0)
        goto fail;
    if (wait_link(&s->node[1], &s->node[0], LINK_WAIT_MS) != 0) {
        fprintf(stderr, "harness: the replica's link did not come up\n");
        goto fail;
    }
    int w = snprintf(s->url, sizeof(s->url), "redis-sentinel://");
    for (int i = 0; i < TEST_SENTINELS; i++) {
        if (test_sentinel_spawn(&s->sentinel[i], s->name, s->node[0].port, 2) != 0) goto fail;
        w += snprintf(s->url + w, sizeof(s->url) - (size_t)w, "%s127.0.0.1:%d", i ? "," : "",
                      s->sentinel[i].port);
    }
    snprintf(s->url + w, sizeof(s->url) - (size_t)w, "#%s", s->name);
    long long deadline = test_now_ms() + READY_WAIT_MS;
    for (int i = 0; i < TEST_SENTINELS; i++)
        while (!sentinel_ready(s, &s->sentinel[i], &s->node[0])) {
            if (test_now_ms() > deadline) {
                fprintf(stderr, "harness: sentinel %d (port %d) not ready after %d ms (see %s)\n", i,
                        s->sentinel[i].port, READY_WAIT_MS, s->sentinel[i].dir);
                goto fail;
            }
            test_msleep(50);
        }
    return 0;
fail:
    test_sentinel_stop(s);
    return -1;
}

void test_sentinel_stop(test_sentinel *s) {
    for (int i = 0; i < TEST_SENTINELS; i++) test_redis_stop(&s->sentinel[i]);
    for (int i = 0; i < 2; i++) test_redis_stop(&s->node[i]);
}

/* ---- Who is master ------------------------------------------------------------- */

test_redis *test_sentinel_master(test_sentinel *s) {
    test_redis *m = NULL;
    for (int i = 0; i < 2; i++) {
        if (s->node[i].pid <= 0 || test_redis_role(&s->node[i]) != 'm') continue;
        if (m != NULL) return NULL;
        m = &s->node[i];
    }
    return m;
}

int test_sentinel_failover(test_sentinel *s) {
    for (int i = 0; i < TEST_SENTINELS; i++) {
        redisReply *rep = test_redis_cmd(&s->sentinel[i], "SENTINEL FAILOVER %s", s->name);
        int ok = rep && rep->type == REDIS_REPLY_STATUS;
        if (rep && !ok) fprintf(stderr, "harness: SENTINEL FAILOVER on %d: %s\n", s->sentinel[i].port,
                                rep->type == REDIS_REPLY_ERROR ? rep->str : "?");
        if (rep) freeReplyObject(rep);
        if (ok) return 0;
    }
    return -1;
}

/* The replica of m that is alive, or NULL. */
static test_redis *other_node(test_sentinel *s, const test_redis *m) {
    test_redis *o = m == &s->node[0] ? &s->node[1] : &s->node[0];
    return o->pid > 0 ? o : NULL;
}

int test_sentinel_failover_paused(test_sentinel *s, int pause_ms) {
    test_redis *m = test_sentinel_master(s), *r = m ? other_node(s, m) : NULL;
    if (r == NULL) {
        fprintf(stderr, "harness: no master/replica pair to fail over\n");
        return -1;
    }
    redisReply *rep = test_redis_cmd(m, "CLIENT PAUSE %d WRITE", pause_ms);
    int ok = rep && rep->type == REDIS_REPLY_STATUS;
    if (rep) freeReplyObject(rep);
    if (!ok) {
        fprintf(stderr, "harness: CLIENT PAUSE WRITE refused\n");
        return -1;
    }
    /* The replica has every byte of the master's stream. */
    if (!test_redis_caught_up(m, r, 2000)) return -1;
    return test_sentinel_failover(s);
}

test_redis *test_sentinel_wait_new_master(test_sentinel *s, const test_redis *old, int timeout_ms) {
    long long deadline = test_now_ms() + timeout_ms;
    for (;;) {
        int live = 0, port[TEST_SENTINELS], votes[TEST_SENTINELS], n = 0;
        for (int i = 0; i < TEST_SENTINELS; i++) {
            if (s->sentinel[i].pid <= 0) continue;
            live++;
            int p = test_sentinel_named_port(&s->sentinel[i], s->name);
            if (p <= 0 || (old && p == old->port)) continue;
            int k = 0;
            while (k < n && port[k] != p) k++;
            if (k == n) { port[n] = p; votes[n++] = 0; }
            votes[k]++;
        }
        for (int k = 0; k < n; k++) {
            if (votes[k] <= live / 2) continue;
            for (int i = 0; i < 2; i++)
                if (s->node[i].pid > 0 && s->node[i].port == port[k] && test_redis_role(&s->node[i]) == 'm')
                    return &s->node[i];
        }
        if (test_now_ms() >= deadline) return NULL; /* timeout 0: one look, no sleep */
        test_msleep(50);
    }
}

int test_sentinel_node_restart(test_sentinel *s, test_redis *r, const test_redis *master) {
    int port = r->port;
    if (master == NULL) master = test_sentinel_master(s);
    if (master == NULL || master == r || port <= 0) return -1;
    test_redis_stop(r); /* reaps it if it still runs; a fresh dir, as a replica has no data to keep */
    if (data_node_start(r, port, master) != 0) return -1;
    return wait_link(r, master, LINK_WAIT_MS);
}

int test_sentinel_respawn(test_redis *r) {
    char conf[192], path[192], buf[2048];
    if (r->pid > 0 || r->port <= 0 || r->dir[0] == '\0') return -1;
    snprintf(conf, sizeof(conf), "%s/sentinel.conf", r->dir);
    r->pid = spawn_sentinel(r, conf); /* the file names its port, and what it learned */
    if (r->pid < 0) { r->pid = 0; return -1; }
    long long deadline = test_now_ms() + SPAWN_WAIT_MS;
    int st;
    while ((st = test_redis_probe(r)) == 0 && test_now_ms() < deadline) test_msleep(10);
    if (st == 1) return 0;
    snprintf(path, sizeof(path), "%s/sentinel.log", r->dir);
    fprintf(stderr, "harness: sentinel on port %d %s after a restart:\n%s\n", r->port,
            st == -2 ? "lost its port" : st == -1 ? "exited" : "did not answer PING",
            test_slurp(path, buf, sizeof(buf)));
    test_redis_kill(r); /* its dir stays, for test_sentinel_stop */
    return -1;
}
