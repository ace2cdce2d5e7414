/* The cluster topology: a Redis Cluster, or a single server found not to
 * be one.
 *
 * The URL's hosts are seeds. Until the slot map is known every request goes
 * to the first seed; when the seed's command connection is up, CLUSTER SLOTS
 * fills the map (a server without cluster support says so, and stays a
 * single server). A MOVED reply patches its slot at once, sends the request
 * on, and asks for a fresh map (one at a time, at most every 100 ms); an ASK
 * reply sends the request on with ASKING and leaves the map alone. Nodes are
 * made, and connect, as the map names them.
 *
 * While no map is known, a seed that cannot be reached hands over to the
 * URL's next host.
 *
 * Classic pub/sub: a PUBLISH reaches every node of a cluster, so every
 * channel is subscribed on one node (the first seed, or another that
 * answers), whatever its slot. Sharded pub/sub: a channel is subscribed on
 * the master of its slot, which SPUBLISH reaches; when the slot moves the
 * server ends the subscription (the engine subscribes again where the map
 * says), and a MOVED to an SSUBSCRIBE patches the map like a request's. */
#include <stdlib.h>
#include <string.h>
#include "topo/topo.h"

#define MAX_NODES 255
#define REFRESH_MIN_MS 100

struct hl_slotmap {
    uint8_t owner[16384];       /* 1 + index in node[], 0: not known */
    hl_node *node[MAX_NODES];
    int nnodes;
    int standalone;             /* the seed said it is no cluster */
    int known;                  /* a CLUSTER SLOTS answered */
    int seed_index;             /* which of the URL's hosts is the seed */
    int refreshing;             /* a CLUSTER SLOTS is under way */
    int acl_warned;             /* CLUSTER SLOTS refused by an ACL, said once */
    uint64_t refreshed_at;
};

static hl_node *cluster_route(hl_topo *t, uint16_t slot) {
    hl_slotmap *m = t->map;
    int i = m->owner[slot & 16383];
    return i ? m->node[i - 1] : t->seed;
}

static hl_node *cluster_sub_route(hl_topo *t, uint16_t slot) {
    return t->net.sharded ? cluster_route(t, slot) : t->subnode;
}

/* A node whose command connection is up, other than `not`, or NULL. */
static hl_node *live_node(hl_topo *t, const hl_node *not) {
    for (hl_node *n = hl_topo_first(t); n; n = hl_topo_next(t, n))
        if (n != not && hl_node_cmd_ready(n)) return n;
    return NULL;
}

/* The subscriber connection dropped: subscribe elsewhere if another node
 * answers (the engine resubscribes every waiting name when it is up). */
static void cluster_sub_lost(hl_topo *t, hl_node *n) {
    if (n != t->subnode || t->map->standalone || t->net.sharded) return;
    hl_node *other = live_node(t, n);
    if (other == NULL) return; /* keep reconnecting to this one */
    t->subnode = other;
    hl_conn_connect(&other->sub);
}

static void cluster_moved(hl_topo *t, unsigned slot, const char *host, int port);

static const hl_topo_ops cluster_ops = {cluster_route, cluster_sub_route, cluster_sub_lost,
                                        cluster_moved, NULL, NULL};

static void node_ready(void *arg);
static void node_lost(void *arg);
static void refresh(hl_topo *t);

/* The node at host:port, made (and its command connection started) if it
 * is new; NULL when there is no room or memory. */
static hl_node *node_at(hl_topo *t, const char *host, int port) {
    hl_slotmap *m = t->map;
    hl_node *n = hl_topo_find(t, host, port);
    if (n == NULL) {
        hl_addr a = {(char *)host, port, NULL};
        if ((n = hl_node_new(t, &a)) == NULL) return NULL;
        n->cmd.ev.ready = node_ready;
        n->cmd.ev.lost = node_lost;
        n->cmd.ev.arg = n;
        hl_conn_connect(&n->cmd);
    }
    if (n->index == 0 && m->nnodes < MAX_NODES) {
        m->node[m->nnodes++] = n;
        n->index = m->nnodes;
    }
    return n->index ? n : NULL;
}

/* ---- The slot map: CLUSTER SLOTS ----------------------------------------- */

/* One range: [start, end, [host, port, id], replicas...]. */
static void map_range(hl_topo *t, const redisReply *e) {
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) return;
    const redisReply *lo = e->element[0], *hi = e->element[1], *master = e->element[2];
    if (lo->type != REDIS_REPLY_INTEGER || hi->type != REDIS_REPLY_INTEGER ||
        master->type != REDIS_REPLY_ARRAY || master->elements < 2 ||
        master->element[0]->type != REDIS_REPLY_STRING ||
        master->element[1]->type != REDIS_REPLY_INTEGER)
        return;
    const char *host = master->element[0]->str;
    if (*host == '\0') host = t->seed->addr.host; /* "": the node we asked */
    hl_node *n = node_at(t, host, (int)master->element[1]->integer);
    if (n == NULL) return;
    for (long long s = lo->integer; s <= hi->integer && s < 16384; s++)
        if (s >= 0) t->map->owner[s] = (uint8_t)n->index;
}

/* Requests queued for a node that no longer owns their slot go to the
 * one that does (after a failover, the map names the promoted replica). */
static void reroute(hl_topo *t) {
    for (hl_node *n = hl_topo_first(t); n; n = hl_topo_next(t, n)) {
        hl_link *l = n->cmd.queue.next;
        while (l != &n->cmd.queue) {
            hl_req *r = HL_CONTAINER(l, hl_req, link);
            l = l->next;
            hl_node *to = r->slot >= 0 ? cluster_route(t, (uint16_t)r->slot) : n;
            if (to == n) continue;
            hl_req_move(r, &to->cmd);
        }
    }
}

static void on_slots(hl_req *r, redisReply *reply, int err) {
    hl_topo *t = r->owner;
    hl_slotmap *m = t->map;
    m->refreshing = 0;
    m->refreshed_at = hl_now_ms();
    if (err != 0 || t->net.loop->freeing) return;
    if (reply->type == REDIS_REPLY_ERROR) {
        /* "ERR This instance has cluster support disabled" */
        if (strstr(reply->str, "cluster support disabled")) m->standalone = 1;
        else if (hl_reply_is_acl(reply->str) && t->net.cluster_enabled == 0) m->standalone = 1;
        else if (hl_reply_is_acl(reply->str) && !m->acl_warned) {
            /* Requests still find their node, by MOVED, one slot at a time. */
            m->acl_warned = 1;
            hl_log(t->net.loop, HILOCK_LOG_WARNING, "CLUSTER SLOTS refused (%s): the slot map is "
                   "learned from MOVED replies only; allow +cluster|slots", reply->str);
        }
        return;
    }
    if (reply->type != REDIS_REPLY_ARRAY) return;
    for (size_t i = 0; i < reply->elements; i++) map_range(t, reply->element[i]);
    m->known = 1;
    reroute(t);
    if (t->net.sharded) t->sub.resubscribe(t->sub.arg, NULL, -1);
}

static void refresh(hl_topo *t) {
    hl_slotmap *m = t->map;
    if (m->standalone || m->refreshing || t->net.loop->freeing) return;
    if (hl_now_ms() < m->refreshed_at + REFRESH_MIN_MS) return;
    hl_req *r = hl_req_new(&t->net, NULL, 0, 32, on_slots, t);
    if (r == NULL) return;
    hl_req_arg(r, "CLUSTER", 7, "", 0);
    hl_req_arg(r, "SLOTS", 5, "", 0);
    m->refreshing = 1;
    hl_node *ask = hl_node_cmd_ready(t->seed) ? t->seed : live_node(t, NULL);
    hl_req_submit(&(ask ? ask : t->seed)->cmd, r);
}

/* The seed's command connection is up (again): ask it for the map. */
static void node_ready(void *arg) {
    hl_node *n = arg;
    if (n == n->topo->seed) refresh(n->topo);
}

/* The seed cannot be reached and no map is known yet: try the URL's next
 * host (round the list), and send it what waited for the seed. */
static void next_seed(hl_topo *t) {
    const hl_url *u = &t->net.url;
    hl_slotmap *m = t->map;
    if (u->nmore == 0 || m->known || m->standalone) return;
    m->seed_index = (m->seed_index + 1) % (u->nmore + 1);
    hl_addr a = hl_url_addr(u, m->seed_index);
    hl_node *n = node_at(t, a.host, a.port);
    if (n == NULL || n == t->seed) return;
    if (t->subnode == t->seed && !hl_node_sub_ready(t->seed)) {
        t->subnode = n;
        hl_conn_connect(&n->sub);
    }
    hl_node *old = t->seed;
    t->seed = n;
    while (!hl_list_empty(&old->cmd.queue)) /* the map request too */
        hl_req_move(HL_CONTAINER(old->cmd.queue.next, hl_req, link), &n->cmd);
}

/* A node went away or cannot be reached: the map may have changed. */
static void node_lost(void *arg) {
    hl_node *n = arg;
    hl_topo *t = n->topo;
    if (n == t->seed) next_seed(t);
    t->map->refreshed_at = 0; /* a lost node is news: no rate limit */
    refresh(t);
}

/* ---- Redirects ------------------------------------------------------------ */

/* MOVED: the slot is served at host:port now; the rest of the map may have
 * changed too. host NULL: something moved, ask for the map. */
static void cluster_moved(hl_topo *t, unsigned slot, const char *host, int port) {
    hl_node *n = host ? node_at(t, host, port) : NULL;
    if (n != NULL) t->map->owner[slot & 16383] = (uint8_t)n->index;
    refresh(t);
}

static void on_redirect(void *arg, hl_req *r, int ask, unsigned slot, const char *host, int port) {
    hl_topo *t = arg;
    hl_node *n = node_at(t, host, port);
    if (n == NULL) {
        hl_req_redirect(r, &t->seed->cmd, 0); /* no room: let the seed redirect */
        return;
    }
    if (!ask) cluster_moved(t, slot, host, port);
    hl_req_redirect(r, &n->cmd, ask);
}

int hl_topo_slotted(const hl_topo *t) { return t->map != NULL && !t->map->standalone; }

int hl_topo_cluster(hl_topo *t, const hl_sub_events *sub) {
    const hl_url *u = &t->net.url;
    t->ops = &cluster_ops;
    t->sub = *sub;
    t->net.redirect = on_redirect;
    t->net.redirect_arg = t;
    if ((t->map = calloc(1, sizeof(*t->map))) == NULL) return HILOCK_ENOMEM;
    if ((t->seed = node_at(t, u->host, u->port)) == NULL) return HILOCK_ENOMEM;
    t->subnode = t->seed;
    hl_conn_connect(&t->seed->sub);
    return 0;
}
