/* Nodes: a command and a subscriber connection to one Redis server, and
 * the plumbing from the subscriber's pushes to the topology's owner. */
#include <stdlib.h>
#include <string.h>
#include "topo/topo.h"

/* An error reply on a subscriber connection: a MOVED to an SSUBSCRIBE
 * (the map was stale) patches the map and sends the slot's subscriptions
 * to its owner; anything else is logged (the names it concerns stay
 * pending, and their fallback timers keep them trying), and an ACL's
 * refusal (no &PREFIX*, no +subscribe) goes to the owner too: no waiter
 * there would ever be woken. */
static void sub_error(hl_node *n, const char *text) {
    hl_topo *t = n->topo;
    unsigned slot;
    int ask, port;
    char host[256];
    if (hl_parse_redirect(text, &ask, &slot, host, sizeof(host), &port) && !ask) {
        hl_topo_moved(t, slot, host, port);
        t->sub.resubscribe(t->sub.arg, n, (int)slot);
        return;
    }
    hl_log(t->net.loop, HILOCK_LOG_WARNING, "subscribe refused by %s:%d: %s",
           n->addr.host ? n->addr.host : n->addr.path, n->addr.port, text);
    if (hl_reply_is_acl(text) && t->sub.refused) t->sub.refused(t->sub.arg, n, text); /* its text */
    else hl_set_error(t->net.loop, "subscribe: %s", text);
}

/* Classic and sharded pushes alike: "message"/"smessage",
 * "subscribe"/"ssubscribe", "unsubscribe"/"sunsubscribe". */
static void sub_push(void *arg, const char *kind, const char *ch, size_t len, const char *data,
                     size_t dlen) {
    hl_node *n = arg;
    hl_sub_events *ev = &n->topo->sub;
    if (strcmp(kind, "error") == 0) {
        sub_error(n, ch);
        return;
    }
    if (kind[0] == 's' && kind[1] != 'u') kind++; /* smessage, ssubscribe, sunsubscribe */
    if (strcmp(kind, "message") == 0) ev->message(ev->arg, ch, len, data, dlen);
    else if (strcmp(kind, "subscribe") == 0) ev->acked(ev->arg, n, ch, len, 1);
    else if (strcmp(kind, "unsubscribe") == 0 || strcmp(kind, "sunsubscribe") == 0)
        ev->acked(ev->arg, n, ch, len, 0);
}

static void sub_ready(void *arg) {
    hl_node *n = arg;
    n->topo->sub.ready(n->topo->sub.arg, n);
}

static void sub_lost(void *arg) {
    hl_node *n = arg;
    n->topo->sub.lost(n->topo->sub.arg, n);
    if (n->topo->ops->sub_lost) n->topo->ops->sub_lost(n->topo, n);
}

hl_node *hl_node_new(hl_topo *t, const hl_addr *addr) {
    static const hl_conn_events cmd_ev = {NULL, NULL, NULL, NULL};
    hl_node *n = calloc(1, sizeof(*n));
    if (n == NULL) return NULL;
    n->addr.port = addr->port;
    n->addr.host = addr->host ? strdup(addr->host) : NULL;
    n->addr.path = addr->path ? strdup(addr->path) : NULL;
    if ((addr->host && !n->addr.host) || (addr->path && !n->addr.path)) {
        free(n->addr.host);
        free(n);
        return NULL;
    }
    hl_conn_events sub_ev = {sub_ready, sub_lost, sub_push, n};
    n->topo = t;
    hl_conn_init(&n->cmd, &t->net, &n->addr, 0, &cmd_ev);
    hl_conn_init(&n->sub, &t->net, &n->addr, 1, &sub_ev);
    hl_list_push(&t->nodes, &n->link);
    return n;
}

hl_node *hl_topo_find(hl_topo *t, const char *host, int port) {
    for (hl_node *n = hl_topo_first(t); n; n = hl_topo_next(t, n))
        if (n->addr.host && n->addr.port == port && strcmp(n->addr.host, host) == 0) return n;
    return NULL;
}

void hl_node_submit(hl_node *n, hl_req *r) { hl_req_submit(&n->cmd, r); }
void hl_node_submit_within(hl_node *n, hl_req *r, uint64_t ms) { hl_req_submit_within(&n->cmd, r, ms); }
void hl_node_subscribe(hl_node *n, const char *ch, size_t len, int on) {
    if (n->topo->ops->subscribe) n->topo->ops->subscribe(n->topo, n, ch, len, on);
    else hl_conn_subscribe(&n->sub, ch, len, on);
}

void hl_topo_submit(hl_topo *t, hl_req *r, uint64_t ms) {
    if (t->ops->submit) t->ops->submit(t, r, ms);
    else hl_node_submit_within(hl_topo_route(t, (uint16_t)r->slot), r, ms);
}
int hl_node_sub_ready(const hl_node *n) { return n->sub.state == HL_CONN_READY; }

void hl_node_sub_want(hl_node *n) {
    if (n->sub.state == HL_CONN_DOWN && !hl_timer_armed(&n->sub.retry)) hl_conn_connect(&n->sub);
}

hl_node *hl_topo_first(hl_topo *t) {
    return hl_list_empty(&t->nodes) ? NULL : HL_CONTAINER(t->nodes.next, hl_node, link);
}

hl_node *hl_topo_next(hl_topo *t, hl_node *n) {
    return n->link.next == &t->nodes ? NULL : HL_CONTAINER(n->link.next, hl_node, link);
}

void hl_topo_cancel_queues(hl_topo *t) {
    for (hl_node *n = hl_topo_first(t); n; n = hl_topo_next(t, n)) {
        hl_conn_cancel_queue(&n->cmd);
        hl_conn_cancel_queue(&n->sub);
    }
}

void hl_topo_teardown(hl_topo *t) {
    for (hl_node *n = hl_topo_first(t); n; n = hl_topo_next(t, n)) {
        hl_conn_teardown(&n->cmd); /* in-flight requests end here */
        hl_conn_teardown(&n->sub);
    }
}

void hl_topo_close_begin(hl_topo *t) {
    t->net.closing = 1;
    for (hl_node *n = hl_topo_first(t); n; n = hl_topo_next(t, n))
        if (n->cmd.state != HL_CONN_READY && n->cmd.failures > 0)
            hl_conn_cancel_queue(&n->cmd); /* the server is away: do not wait for it */
}

void hl_topo_free(hl_topo *t) {
    while (!hl_list_empty(&t->nodes)) {
        hl_node *n = HL_CONTAINER(t->nodes.next, hl_node, link);
        hl_list_remove(&n->link);
        free(n->addr.host);
        free(n->addr.path);
        free(n);
    }
    free(t->map);
    t->map = NULL;
    free(t->sentinels);
    t->sentinels = NULL;
    free(t->redlock);
    t->redlock = NULL;
    hl_url_free(&t->net.url);
}
