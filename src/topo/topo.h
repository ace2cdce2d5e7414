/* The topology layer: nodes, and which node serves a lock's keys.
 *
 * A node is one Redis server as hilock uses it: a command connection and a
 * subscriber connection. A topology owns the nodes and routes a key's
 * cluster slot to one of them. Today there is one kind, standalone (one
 * node for everything); Redis Cluster (a slot map, MOVED/ASK), Sentinel
 * (the master that the sentinels name) and Redlock (N masters, a quorum)
 * are further kinds behind the same three calls. Uses the net layer; never
 * knows which primitive sent a request. */
#ifndef HILOCK_TOPO_H
#define HILOCK_TOPO_H

#include "net/net.h"

typedef struct hl_topo hl_topo;

typedef struct hl_node {
    hl_topo *topo;
    hl_link link;       /* in topo->nodes */
    hl_addr addr;       /* owned */
    int index;          /* 1 + its place in the slot map's node table */
    hl_conn cmd, sub;
} hl_node;

/* What the subscriber side tells the topology's owner (the waiter engine). */
typedef struct hl_sub_events {
    /* A message on channel ch: its payload is data (dlen bytes). */
    void (*message)(void *arg, const char *ch, size_t len, const char *data, size_t dlen);
    void (*acked)(void *arg, hl_node *node, const char *ch, size_t len, int subscribed);
    void (*ready)(void *arg, hl_node *node); /* (re)connected: subscribe again */
    void (*lost)(void *arg, hl_node *node);  /* every subscription on it is gone */
    /* Subscriptions may belong elsewhere now: those of `slot` (-1: any)
     * that `node` (NULL: none) refused go again, and so do those of names
     * that wait without one. After a MOVED to SSUBSCRIBE, and a new map. */
    void (*resubscribe)(void *arg, hl_node *node, int slot);
    /* Redlock: node `to` (re)connected; subscribe there too what is
     * subscribed through `via` (every node carries every channel). */
    void (*replay)(void *arg, hl_node *via, hl_node *to);
    /* `node` refused a subscription by its ACL (`text`, Redis's): the
     * subscriptions under way there will not come. */
    void (*refused)(void *arg, hl_node *node, const char *text);
    void *arg;
} hl_sub_events;

typedef struct hl_topo_ops {
    /* The node that serves `slot` (a name's cluster slot). Never NULL. */
    hl_node *(*route)(hl_topo *t, uint16_t slot);
    /* The node whose subscriber connection carries the channel of `slot`. */
    hl_node *(*sub_route)(hl_topo *t, uint16_t slot);
    /* Optional: n's subscriber connection dropped (after the owner heard). */
    void (*sub_lost)(hl_topo *t, hl_node *n);
    /* Optional: `slot` is served at host:port (a MOVED), or (host NULL) may
     * have moved (a sharded subscription the server ended). */
    void (*moved)(hl_topo *t, unsigned slot, const char *host, int port);
    /* Optional: take the request instead of route's node (Redlock: one copy
     * to every node, one answer from their quorum); ms: its deadline. */
    void (*submit)(hl_topo *t, hl_req *r, uint64_t ms);
    /* Optional: (un)subscribe a channel on route's node `n` (Redlock: on
     * every node). */
    void (*subscribe)(hl_topo *t, hl_node *n, const char *ch, size_t len, int on);
} hl_topo_ops;

typedef struct hl_slotmap hl_slotmap;
typedef struct hl_sentinels hl_sentinels;
typedef struct hl_redlock hl_redlock;

struct hl_topo {
    const hl_topo_ops *ops;
    hl_net net;           /* settings shared by every node's connections */
    hl_link nodes;
    hl_node *seed;        /* the first node of the URL */
    hl_node *subnode;     /* cluster.c: where classic subscriptions live */
    hl_sub_events sub;
    hl_slotmap *map;      /* cluster.c: which master owns each slot */
    hl_sentinels *sentinels; /* sentinel.c: whom to ask where the master is */
    hl_redlock *redlock;  /* redlock.c: the masters and their quorum */
    /* Sentinel: a hold is believed only while the sentinels vouch for its
     * master (hl_topo_vouched_until). epoch counts the masters followed;
     * word_at is when the last round that a majority of the sentinels
     * answered naming the current master began, word_prev_at the same for
     * the master before (what its holds go on with until renewed on the new
     * one). */
    int needs_word;
    uint32_t epoch;
    uint64_t word_at, word_prev_at;
};

/* How long a hold of `lease` ms may believe in its master, on what the
 * sentinels last said: one renewal interval (a third of the lease) after
 * their word is overdue (HL_SENTINEL_WATCH_MS after the last), so that a
 * holder cut off with a master that the majority is replacing stops
 * believing before the replica it promotes can let the lease run out;
 * UINT64_MAX on the other topologies. */
#define HL_SENTINEL_WATCH_MS 1000
static inline uint64_t hl_topo_vouched_until(const hl_topo *t, uint32_t epoch, uint32_t lease) {
    if (!t->needs_word) return UINT64_MAX;
    /* A hold confirmed by an older master than the last but one: none. */
    uint64_t word = epoch + 1 == t->epoch ? t->word_prev_at : 0;
    if (epoch == t->epoch) /* until a majority names it (a +switch-master moved us) */
        word = t->word_at ? t->word_at : t->word_prev_at;
    return word + HL_SENTINEL_WATCH_MS + lease / 3;
}

/* One node for every slot, at t->net.url (t->net set up by hl_net_init and
 * the caller). Connects at once. Returns 0 or HILOCK_ENOMEM. */
int hl_topo_standalone(hl_topo *t, const hl_sub_events *sub);
/* A Redis Cluster, or a single server found not to be one: the URL's hosts
 * are seeds; the slot map comes from CLUSTER SLOTS and MOVED replies. */
int hl_topo_cluster(hl_topo *t, const hl_sub_events *sub);
/* One master, at the address the URL's sentinels name (t->net.url.master),
 * followed through failovers. */
int hl_topo_sentinel(hl_topo *t, const hl_sub_events *sub);
/* Redlock: N independent masters (the URL's hosts); every request goes to
 * all of them and is answered by their quorum, N/2 + 1. */
int hl_topo_redlock(hl_topo *t, const hl_sub_events *sub);
/* Whether requests are answered by a quorum of nodes (Redlock). */
static inline int hl_topo_quorum(const hl_topo *t) { return t->redlock != NULL; }
/* Must the keys of one request share a slot (a Redis Cluster, or a server
 * not yet known not to be one)? */
int hl_topo_slotted(const hl_topo *t);
static inline hl_node *hl_topo_route(hl_topo *t, uint16_t slot) { return t->ops->route(t, slot); }
static inline hl_node *hl_topo_sub_route(hl_topo *t, uint16_t slot) {
    return t->ops->sub_route(t, slot);
}
/* Iterate over the nodes: for (n = first(t); n; n = next(t, n)). */
hl_node *hl_topo_first(hl_topo *t);
hl_node *hl_topo_next(hl_topo *t, hl_node *n);

/* A node at `addr` (copied), not connected yet; NULL: no memory. */
hl_node *hl_node_new(hl_topo *t, const hl_addr *addr);
/* The node at host:port, or NULL. */
hl_node *hl_topo_find(hl_topo *t, const char *host, int port);
void hl_node_submit(hl_node *n, hl_req *r);
/* Submit a request on `slot`'s keys: to its node, or as the topology says. */
void hl_topo_submit(hl_topo *t, hl_req *r, uint64_t ms);
/* The topology whose settings `net` is. */
static inline hl_topo *hl_topo_of(hl_net *net) { return HL_CONTAINER(net, hl_topo, net); }
void hl_node_submit_within(hl_node *n, hl_req *r, uint64_t ms);
void hl_node_subscribe(hl_node *n, const char *ch, size_t len, int on);
int hl_node_sub_ready(const hl_node *n);
/* Connect n's subscriber connection if it is down and not backing off
 * (sharded subscriptions connect to a master when a name needs it). */
void hl_node_sub_want(hl_node *n);
static inline void hl_topo_moved(hl_topo *t, unsigned slot, const char *host, int port) {
    if (t->ops->moved) t->ops->moved(t, slot, host, port);
}
/* The error of a request to `n` that got no answer (see hl_conn_error). */
static inline int hl_node_error(const hl_node *n) { return hl_conn_error(&n->cmd); }
static inline int hl_node_cmd_ready(const hl_node *n) { return n->cmd.state == HL_CONN_READY; }

/* Teardown: end queued requests, close both connections of every node. */
void hl_topo_cancel_queues(hl_topo *t);
void hl_topo_teardown(hl_topo *t);
void hl_topo_free(hl_topo *t);
/* A graceful close does not wait for a node that is away. */
void hl_topo_close_begin(hl_topo *t);

#endif
