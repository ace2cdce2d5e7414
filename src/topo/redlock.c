/* The Redlock topology: N independent masters (the URL's hosts), and a
 * quorum of them, N/2 + 1, answers every request.
 *
 * Requests (the fan-out). A request goes to every node at once, as a copy
 * with the same arguments; the caller's request is answered once, by the
 * copies' answers combined:
 *  - a quorum said yes (an integer 1, or an array whose first element is
 *    1) within the validity time: yes; an array's second element (the
 *    fence) is the largest of theirs. Validity: a request that sets a lease
 *    (r->lease_ms) must be answered by its quorum within lease - drift,
 *    drift = lease x clock_rate_ppm + 2 ms (hl_drift_ms: 1 % by default,
 *    Redlock's allowance for clock rates), on the monotonic clock from
 *    before the first copy was sent; the hold that counts its lease from
 *    there takes the same drift off (hl_hold_expiry), so it ends before the
 *    nodes' keys can expire.
 *  - otherwise, once every node has answered: no. If too many nodes failed
 *    for a quorum to be possible, the first node's error. A "no" that some
 *    nodes granted is marked `partial`: the caller undoes those grants. An
 *    array's second element becomes the time to look again: when one
 *    holder (the array's third element, its token) holds a quorum, when its
 *    quorum could lapse (the right one of its keys' PTTLs); when nobody
 *    does (a split vote), a short random delay, as Redlock prescribes.
 *  - while a quorum of nodes is connected, a node whose connection is
 *    down (and has failed to come back) counts as a failure at once, so a
 *    dead node never holds a decision up; its copy is not sent, unless the
 *    request must reach every node (r->everywhere: releases, fence raises)
 *    and then waits there for the node to come back. With fewer connected
 *    than a quorum, copies wait for their nodes like any request for its
 *    server, until their deadline.
 *
 * Subscriptions. Every node carries every channel (a release publishes on
 * each node it reaches, and any one may be down). `all`, a node without
 * connections, is what route and sub_route name: subscribing through it
 * subscribes on every node whose subscriber connection is up. One of
 * those, the leader, stands for `all` towards the engine: its acks are
 * `all`'s. A node that (re)connects and is not the leader has the engine's
 * channels replayed to it; so does a new leader, whose acks then answer
 * what is under way. Only when no node is up is it `all`'s loss. Messages from any node wake waiters.
 */
#include <stdlib.h>
#include <string.h>
#include "topo/topo.h"

#define FAN_MAX HL_URL_MAX_SEEDS
#define SPLIT_RETRY_MIN_MS 10
#define SPLIT_RETRY_SPAN_MS 50

struct hl_redlock {
    hl_node *node[FAN_MAX];
    int n, quorum;
    hl_node *all;         /* route's node: stands for every node */
    hl_node *leader;      /* whose subscriber connection speaks for `all` */
    hl_sub_events up;     /* the engine's events */
};

typedef struct refusal {
    long long pttl;
    char holder[48];
} refusal;

/* One request fanned out to every node. */
typedef struct hl_fan {
    hl_topo *t;
    hl_req *r;              /* the caller's, until answered */
    hl_req_done done;       /* r's own done and owner, while we hold r */
    void *owner;
    uint64_t start;
    int pending;            /* copies alive (f is freed with the last) */
    int awaited;            /* copies whose answer is still counted */
    int yes, no, errs, err, sending;
    int everywhere;         /* r->everywhere */
    int array;              /* the answers are arrays ({1, fence}, {0, pttl, holder}) */
    int ever_sent, lost_reply;
    uint64_t fence;
    int acked[FAN_MAX];     /* of the yes answers */
    refusal refused[FAN_MAX];
} hl_fan;

/* ---- Routing -------------------------------------------------------------------- */

static hl_node *redlock_route(hl_topo *t, uint16_t slot) {
    (void)slot;
    return t->redlock->all;
}

static int node_down(const hl_node *n) {
    return n->cmd.state != HL_CONN_READY && n->cmd.failures > 0;
}

static int quorum_connected(const hl_redlock *rl) {
    return rl->all->cmd.state == HL_CONN_READY;
}

/* ---- Combining the answers ------------------------------------------------------ */

static void fan_count(hl_fan *f, hl_req *c, const redisReply *reply, int err) {
    hl_loop *l = f->t->net.loop;
    f->ever_sent |= c->ever_sent;
    f->lost_reply |= c->lost_reply;
    if (err == 0 && reply->type == REDIS_REPLY_ERROR) err = hl_reply_error(l, reply);
    if (err == 0 && reply->type == REDIS_REPLY_INTEGER) { /* 1 (or a fence): yes, 0: no */
        if (reply->integer > 0) f->acked[f->yes++] = c->acked;
        else f->refused[f->no++].pttl = -2;
        if (reply->integer > 0 && (uint64_t)reply->integer > f->fence) f->fence = (uint64_t)reply->integer;
        return;
    }
    if (err == 0 && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 2 &&
        reply->element[0]->type == REDIS_REPLY_INTEGER && reply->element[1]->type == REDIS_REPLY_INTEGER) {
        f->array = 1;
        if (reply->element[0]->integer == 1) {
            uint64_t fence = (uint64_t)reply->element[1]->integer;
            if (fence > f->fence) f->fence = fence;
            f->acked[f->yes++] = c->acked;
            return;
        }
        refusal *x = &f->refused[f->no++];
        x->pttl = reply->element[1]->integer;
        x->holder[0] = '\0';
        if (reply->elements >= 3 && reply->element[2]->type == REDIS_REPLY_STRING &&
            reply->element[2]->len < sizeof(x->holder))
            memcpy(x->holder, reply->element[2]->str, reply->element[2]->len + 1);
        return;
    }
    if (err == 0) {
        hl_set_error(l, "unexpected reply from a Redlock node");
        err = HILOCK_EPROTO;
    }
    if (f->errs++ == 0) f->err = err;
}

static int cmp_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* When to look again after a "no": when the holder of a quorum could lose
 * it, or soon after a split vote that nobody won. */
static uint64_t fan_retry_ms(hl_fan *f) {
    hl_redlock *rl = f->t->redlock;
    long long pttl[FAN_MAX];
    for (int i = 0; i < f->no; i++) {
        int k = 0;
        for (int j = 0; j < f->no; j++)
            if (f->refused[i].holder[0] && strcmp(f->refused[i].holder, f->refused[j].holder) == 0)
                pttl[k++] = f->refused[j].pttl;
        if (k < rl->quorum) continue;
        qsort(pttl, (size_t)k, sizeof(pttl[0]), cmp_ll);
        long long p = pttl[k - rl->quorum]; /* its quorum lasts while this one does */
        return p >= 0 ? (uint64_t)p + 1 : p == -2 ? 0 : 1000;
    }
    return SPLIT_RETRY_MIN_MS + hl_net_random(&f->t->net) % SPLIT_RETRY_SPAN_MS;
}

/* The acked count a quorum of the yes answers reaches (WAIT per node). */
static int fan_acked(hl_fan *f, int quorum) {
    int a[FAN_MAX];
    memcpy(a, f->acked, sizeof(a[0]) * (size_t)f->yes);
    for (int i = 1; i < f->yes; i++) /* descending: few entries */
        for (int j = i; j > 0 && a[j] > a[j - 1]; j--) { int x = a[j]; a[j] = a[j - 1]; a[j - 1] = x; }
    return a[quorum - 1];
}

static void fan_answer(hl_fan *f, int won) {
    hl_redlock *rl = f->t->redlock;
    hl_req *r = f->r;
    redisReply top, el[2], *els[2] = {&el[0], &el[1]};
    memset(&top, 0, sizeof(top));
    memset(el, 0, sizeof(el));
    r->ever_sent = (unsigned)f->ever_sent;
    r->lost_reply = (unsigned)f->lost_reply;
    r->partial = !won && f->yes > 0;
    if (!won && f->errs > rl->n - rl->quorum) { /* more failures than a quorum survives */
        hl_req_end(r, NULL, f->err);
        return;
    }
    f->t->net.answered = 1; /* a quorum answered: the masters were there */
    if (won) r->acked = fan_acked(f, rl->quorum);
    if (f->array) {
        top.type = REDIS_REPLY_ARRAY;
        top.elements = 2;
        top.element = els;
        el[0].type = el[1].type = REDIS_REPLY_INTEGER;
        el[0].integer = won;
        el[1].integer = won ? (long long)f->fence : (long long)fan_retry_ms(f);
    } else {
        top.type = REDIS_REPLY_INTEGER;
        top.integer = won ? (long long)f->fence : 0; /* 1, or the largest fence (break) */
    }
    hl_req_end(r, &top, 0);
}

/* Decide as soon as a quorum said yes, or when every node has answered. */
static void fan_decide(hl_fan *f) {
    hl_redlock *rl = f->t->redlock;
    if (f->r == NULL || f->sending) return;
    int won = f->yes >= rl->quorum;
    if (!won && f->awaited > 0) return;
    if (won && f->r->lease_ms > 0) {
        uint64_t lease = f->r->lease_ms, elapsed = hl_now_ms() - f->start;
        if (elapsed + hl_drift_ms(f->t->net.clock_rate_ppm, lease) >= lease) {
            hl_set_error(f->t->net.loop, "Redlock: the quorum took %llu ms of a %llu ms lease",
                         (unsigned long long)elapsed, (unsigned long long)lease);
            won = 0; /* no validity left: undo, and look again soon */
        }
    }
    f->r->submitted_at = f->start; /* the hold takes the drift off (hl_hold_expiry) */
    fan_answer(f, won);
}

/* ---- The caller's request and its copies --------------------------------------------- */

static void fan_answered(hl_req *r, redisReply *reply, int err) {
    hl_fan *f = r->owner;
    r->done = f->done;
    r->owner = f->owner;
    f->r = NULL;
    r->done(r, reply, err);
    if (f->pending == 0) free(f);
}

/* A copy's answer: counted (c->rounds 0) unless it was counted already as
 * a failure of its node (c->rounds 1). */
static void fan_part_done(hl_req *c, redisReply *reply, int err) {
    hl_fan *f = c->owner;
    f->pending--;
    if (f->r != NULL && c->rounds == 0) {
        f->awaited--;
        fan_count(f, c, reply, err);
        fan_decide(f); /* may free f */
    } else if (f->r == NULL && f->pending == 0) {
        free(f);
    }
}

/* A node down: its copy counts as a failure now. */
static void fan_fail_copy(hl_fan *f, hl_req *c, int err) {
    c->rounds = 1;
    f->awaited--;
    if (f->r != NULL && f->errs++ == 0) f->err = err;
    fan_decide(f); /* never frees f: c is still alive */
}

static void redlock_submit(hl_topo *t, hl_req *r, uint64_t ms) {
    hl_redlock *rl = t->redlock;
    hl_fan *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        hl_req_end(r, NULL, HILOCK_ENOMEM);
        return;
    }
    f->t = t;
    f->r = r;
    f->done = r->done;
    f->owner = r->owner;
    f->everywhere = r->everywhere;
    r->done = fan_answered;
    r->owner = f;
    f->start = hl_now_ms();
    f->sending = 1;
    int skip_down = quorum_connected(rl);
    for (int i = 0; i < rl->n; i++) {
        hl_node *n = rl->node[i];
        int down = skip_down && node_down(n);
        hl_req *c = down && !f->everywhere ? NULL : hl_req_copy(r, fan_part_done, f);
        if (c == NULL) {
            if (f->errs++ == 0) f->err = down ? hl_node_error(n) : HILOCK_ENOMEM;
            continue;
        }
        c->wait_replicas = r->wait_replicas;
        c->fail_fast = r->fail_fast;
        f->pending++;
        f->awaited++;
        if (down) fan_fail_copy(f, c, hl_node_error(n)); /* sent if it comes back */
        hl_node_submit_within(n, c, ms);
    }
    f->sending = 0;
    fan_decide(f);
}

/* ---- Subscriptions ------------------------------------------------------------------ */

static void redlock_subscribe(hl_topo *t, hl_node *via, const char *ch, size_t len, int on) {
    hl_redlock *rl = t->redlock;
    if (via != rl->all) {
        hl_conn_subscribe(&via->sub, ch, len, on); /* a replay to one node */
        return;
    }
    for (int i = 0; i < rl->n; i++) hl_conn_subscribe(&rl->node[i]->sub, ch, len, on);
}

static void set_leader(hl_redlock *rl, hl_node *n) {
    rl->leader = n;
    rl->all->sub.state = n ? HL_CONN_READY : HL_CONN_DOWN;
}

static void rl_message(void *arg, const char *ch, size_t len, const char *data, size_t dlen) {
    hl_topo *t = arg;
    t->redlock->up.message(t->redlock->up.arg, ch, len, data, dlen);
}

static void rl_acked(void *arg, hl_node *node, const char *ch, size_t len, int subscribed) {
    hl_topo *t = arg;
    hl_redlock *rl = t->redlock;
    if (node == rl->leader) rl->up.acked(rl->up.arg, rl->all, ch, len, subscribed);
}

static void rl_sub_ready(void *arg, hl_node *node) {
    hl_topo *t = arg;
    hl_redlock *rl = t->redlock;
    if (rl->leader == NULL) {
        set_leader(rl, node);
        rl->up.ready(rl->up.arg, rl->all);
    } else {
        rl->up.replay(rl->up.arg, rl->all, node);
    }
}

/* The leader's loss: another node that is up leads, and gets what is under
 * way sent again so that its acks answer it (the other nodes keep their
 * subscriptions). With none up, it is `all`'s loss: the engine forgets
 * its subscriptions and subscribes again when a node is back. */
static void rl_sub_lost(void *arg, hl_node *node) {
    hl_topo *t = arg;
    hl_redlock *rl = t->redlock;
    if (node != rl->leader) return;
    set_leader(rl, NULL);
    for (int i = 0; i < rl->n && rl->leader == NULL; i++)
        if (rl->node[i] != node && hl_node_sub_ready(rl->node[i])) set_leader(rl, rl->node[i]);
    if (rl->leader) rl->up.replay(rl->up.arg, rl->all, rl->leader);
    else rl->up.lost(rl->up.arg, rl->all);
}

static void rl_refused(void *arg, hl_node *node, const char *text) {
    hl_topo *t = arg;
    hl_redlock *rl = t->redlock;
    if (node == rl->leader) rl->up.refused(rl->up.arg, rl->all, text);
}

static void rl_resubscribe(void *arg, hl_node *node, int slot) {
    hl_topo *t = arg;
    (void)node;
    t->redlock->up.resubscribe(t->redlock->up.arg, NULL, slot);
}

/* `all`'s command side is up while a quorum of nodes is; its error is the
 * last node's that went down (why a wait could not be served). A node that
 * went down, or could not be reached, answers its copies now with its
 * error: the others decide without it. */
static void rl_cmd_changed(void *arg) {
    hl_node *n = arg;
    hl_redlock *rl = n->topo->redlock;
    int up = 0;
    for (int i = 0; i < rl->n; i++) up += hl_node_cmd_ready(rl->node[i]);
    rl->all->cmd.state = up >= rl->quorum ? HL_CONN_READY : HL_CONN_DOWN;
    if (hl_node_cmd_ready(n) || n->topo->net.loop->freeing) return;
    int err = n->cmd.last_err ? n->cmd.last_err : HILOCK_ECONN;
    rl->all->cmd.last_err = err;
    if (!quorum_connected(rl)) return; /* the copies wait for their nodes */
    hl_link *l = n->cmd.queue.next;
    while (l != &n->cmd.queue) {
        hl_req *c = HL_CONTAINER(l, hl_req, link);
        hl_fan *f = c->owner;
        l = l->next;
        if (c->done != fan_part_done) continue;
        if (c->rounds == 0) fan_fail_copy(f, c, err);
        if (!f->everywhere) hl_req_end(c, NULL, err);
    }
}

static const hl_topo_ops redlock_ops = {redlock_route, redlock_route, NULL, NULL,
                                        redlock_submit, redlock_subscribe};

int hl_topo_redlock(hl_topo *t, const hl_sub_events *sub) {
    const hl_url *u = &t->net.url;
    hl_addr none = {NULL, 0, NULL};
    static const hl_sub_events translate = {rl_message, rl_acked, rl_sub_ready, rl_sub_lost,
                                            rl_resubscribe, NULL, rl_refused, NULL};
    t->ops = &redlock_ops;
    t->net.quorum = 1;
    if ((t->redlock = calloc(1, sizeof(*t->redlock))) == NULL) return HILOCK_ENOMEM;
    hl_redlock *rl = t->redlock;
    rl->up = *sub;
    t->sub = translate;
    t->sub.arg = t;
    if ((rl->all = hl_node_new(t, &none)) == NULL) return HILOCK_ENOMEM;
    t->seed = rl->all;
    for (int i = 0; i <= u->nmore; i++) {
        hl_addr at = hl_url_addr(u, i);
        hl_node *n = hl_node_new(t, &at);
        if (n == NULL) return HILOCK_ENOMEM;
        n->cmd.ev.ready = n->cmd.ev.lost = rl_cmd_changed;
        n->cmd.ev.arg = n;
        rl->node[rl->n++] = n;
    }
    rl->quorum = rl->n / 2 + 1;
    for (int i = 0; i < rl->n; i++) {
        hl_conn_connect(&rl->node[i]->cmd);
        hl_conn_connect(&rl->node[i]->sub);
    }
    return 0;
}
