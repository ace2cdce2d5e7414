/* The servers of each topology, in their namespaces, and the URL the
 * clients use:
 *   standalone  r1
 *   sentinel    r1 (master), r2 (its replica), s1..s3 (sentinels: quorum 2,
 *               down-after 1000 ms, failover-timeout 5000 ms)
 *   redlock     r1..r5, independent masters
 *   cluster     r1..r6, 3 masters + 3 replicas (cluster-node-timeout 2000)
 * Data servers are 10.77.y.11.., sentinels 10.77.y.21.. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "hilock/hilock.h"
#include "support/harness.h"
#include "nemesis/nemesis.h"

#define READY_MS 20000

static nem_server *add_server(nem_run *r, const char *name, int octet, int kind, int skew) {
    nem_host *h = nem_net_add(&r->net, name, octet);
    if (h == NULL) return NULL;
    nem_server *s = &r->srv[r->nsrv++];
    memset(s, 0, sizeof(*s));
    s->host = h;
    s->kind = kind;
    s->skew = skew;
    s->port = kind == SRV_SENTINEL ? NEM_SENTINEL_PORT : NEM_REDIS_PORT;
    snprintf(s->dir, sizeof(s->dir), "%s/%s", r->dir, name);
    mkdir(s->dir, 0755);
    return s;
}

/* Does the reply to cmd (a bulk string: INFO, CLUSTER INFO) contain needle? */
static int says(const nem_server *s, const char *cmd, const char *needle) {
    redisReply *rep = nem_cmd(s, cmd);
    int yes = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, needle) != NULL;
    if (rep) freeReplyObject(rep);
    return yes;
}

static int wait_for(int (*ok)(nem_run *r), nem_run *r, int ms) {
    long long until = test_now_ms() + ms;
    while (!ok(r)) {
        if (test_now_ms() > until || nem_interrupted) return -1;
        test_msleep(50);
    }
    return 0;
}

/* ---- Sentinel ---------------------------------------------------------------- */

static int sentinel_ready(nem_run *r) {
    if (!says(&r->srv[1], "INFO replication", "master_link_status:up")) return 0;
    for (int i = r->ndata; i < r->nsrv; i++) {
        redisReply *rep = nem_cmd(&r->srv[i], "SENTINEL MASTER %s", NEM_MASTER_NAME);
        int ok = 0;
        for (size_t k = 0; rep && rep->type == REDIS_REPLY_ARRAY && k + 1 < rep->elements; k += 2) {
            const char *f = rep->element[k]->str, *v = rep->element[k + 1]->str;
            if (f == NULL || v == NULL) continue;
            if (strcmp(f, "num-slaves") == 0 && atoi(v) >= 1) ok |= 1;
            if (strcmp(f, "num-other-sentinels") == 0 && atoi(v) >= NEM_SENTINELS - 1) ok |= 2;
            if (strcmp(f, "flags") == 0 && strcmp(v, "master") == 0) ok |= 4;
        }
        if (rep) freeReplyObject(rep);
        if (ok != 7) return 0;
    }
    return 1;
}

/* Which data server the sentinels name as master now (index), or -1. */
int nem_sentinel_master(nem_run *r) {
    for (int i = r->ndata; i < r->nsrv; i++) {
        redisReply *rep = nem_cmd(&r->srv[i], "SENTINEL get-master-addr-by-name %s", NEM_MASTER_NAME);
        int m = -1;
        if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->str)
            for (int k = 0; k < r->ndata; k++)
                if (strcmp(r->srv[k].host->ip, rep->element[0]->str) == 0) m = k;
        if (rep) freeReplyObject(rep);
        if (m >= 0) return m;
    }
    return -1;
}

static int setup_sentinel(nem_run *r, int skew, char *url, size_t n) {
    nem_server *m = add_server(r, "r1", 11, SRV_DATA, skew);
    nem_server *rp = add_server(r, "r2", 12, SRV_DATA, skew);
    if (!m || !rp) return -1;
    snprintf(m->extra, sizeof(m->extra), "--repl-diskless-sync-delay 0");
    snprintf(rp->extra, sizeof(rp->extra), "--repl-diskless-sync-delay 0 --replicaof %s %d", m->host->ip,
             NEM_REDIS_PORT);
    if (nem_server_start(m) != 0 || nem_server_start(rp) != 0) return -1;
    r->ndata = 2;
    size_t w = (size_t)snprintf(url, n, "redis-sentinel://");
    for (int i = 0; i < NEM_SENTINELS; i++) {
        char name[8];
        snprintf(name, sizeof(name), "s%d", i + 1);
        nem_server *s = add_server(r, name, 21 + i, SRV_SENTINEL, 0);
        if (s == NULL) return -1;
        snprintf(s->extra, sizeof(s->extra),
                 "sentinel monitor %s %s %d 2\nsentinel down-after-milliseconds %s 1000\n"
                 "sentinel failover-timeout %s 5000\nsentinel parallel-syncs %s 1",
                 NEM_MASTER_NAME, m->host->ip, NEM_REDIS_PORT, NEM_MASTER_NAME, NEM_MASTER_NAME, NEM_MASTER_NAME);
        if (nem_server_start(s) != 0) return -1;
        w += (size_t)snprintf(url + w, n - w, "%s%s:%d", i ? "," : "", s->host->ip, NEM_SENTINEL_PORT);
    }
    snprintf(url + w, n - w, "#%s", NEM_MASTER_NAME);
    r->master = 0;
    return wait_for(sentinel_ready, r, READY_MS);
}

/* ---- Cluster ------------------------------------------------------------------- */

static int cluster_ready(nem_run *r) {
    for (int i = 0; i < r->ndata; i++) {
        if (!says(&r->srv[i], "CLUSTER INFO", "cluster_state:ok")) return 0;
        if (!says(&r->srv[i], "INFO replication", "role:master") &&
            !says(&r->srv[i], "INFO replication", "master_link_status:up"))
            return 0;
    }
    return 1;
}

/* The data server that is master of the lock's slot now, or -1. */
int nem_cluster_master(nem_run *r) {
    char key[128];
    hilock_key("hilock:", NEM_LOCK, key, sizeof(key));
    unsigned slot = hilock_key_slot(key, strlen(key));
    for (int i = 0; i < r->ndata; i++) {
        redisReply *rep = nem_cmd(&r->srv[i], "CLUSTER SLOTS");
        const char *ip = NULL;
        for (size_t j = 0; rep && rep->type == REDIS_REPLY_ARRAY && j < rep->elements; j++) {
            redisReply *e = rep->element[j];
            if (e->elements >= 3 && (unsigned)e->element[0]->integer <= slot && slot <= (unsigned)e->element[1]->integer)
                ip = e->element[2]->element[0]->str;
        }
        int m = -1;
        for (int k = 0; ip && k < r->ndata; k++)
            if (strcmp(r->srv[k].host->ip, ip) == 0) m = k;
        if (rep) freeReplyObject(rep);
        if (m >= 0) return m;
    }
    return -1;
}

static int setup_cluster(nem_run *r, int skew, char *url, size_t n) {
    char addrs[512] = "";
    size_t w = (size_t)snprintf(url, n, "redis://");
    for (int i = 0; i < 6; i++) {
        char name[8];
        snprintf(name, sizeof(name), "r%d", i + 1);
        nem_server *s = add_server(r, name, 11 + i, SRV_DATA, skew);
        if (s == NULL) return -1;
        snprintf(s->extra, sizeof(s->extra),
                 "--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 "
                 "--cluster-port 16379 --cluster-replica-validity-factor 0 --repl-ping-replica-period 1 "
                 "--repl-diskless-sync-delay 0");
        if (nem_server_start(s) != 0) return -1;
        size_t k = strlen(addrs);
        snprintf(addrs + k, sizeof(addrs) - k, " %s:%d", s->host->ip, NEM_REDIS_PORT);
        if (i < 3) w += (size_t)snprintf(url + w, n - w, "%s%s:%d", i ? "," : "", s->host->ip, NEM_REDIS_PORT);
    }
    r->ndata = 6;
    if (nem_execf("ip netns exec %s %s --cluster create%s --cluster-replicas 1 --cluster-yes",
                 r->srv[0].host->ns, test_cli_bin(), addrs) != 0)
        return -1;
    if (wait_for(cluster_ready, r, READY_MS) != 0) return -1;
    r->master = nem_cluster_master(r);
    return r->master >= 0 ? 0 : -1;
}

/* ---- Every topology --------------------------------------------------------------- */

int nem_topo_setup(nem_run *r, int topo, int skew, char *url, size_t n) {
    switch (topo) {
    case TOPO_SENTINEL: return setup_sentinel(r, skew, url, n);
    case TOPO_CLUSTER: return setup_cluster(r, skew, url, n);
    case TOPO_REDLOCK: {
        size_t w = (size_t)snprintf(url, n, "redlock://");
        for (int i = 0; i < 5; i++) {
            char name[8];
            snprintf(name, sizeof(name), "r%d", i + 1);
            nem_server *s = add_server(r, name, 11 + i, SRV_DATA, skew);
            if (s == NULL || nem_server_start(s) != 0) return -1;
            w += (size_t)snprintf(url + w, n - w, "%s%s:%d", i ? "," : "", s->host->ip, NEM_REDIS_PORT);
        }
        r->ndata = 5;
        r->master = 0;
        return 0;
    }
    default: {
        nem_server *s = add_server(r, "r1", 11, SRV_DATA, skew);
        if (s == NULL || nem_server_start(s) != 0) return -1;
        r->ndata = 1;
        r->master = 0;
        snprintf(url, n, "redis://%s:%d", s->host->ip, NEM_REDIS_PORT);
        return 0;
    }
    }
}
