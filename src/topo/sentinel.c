/* The Sentinel topology: one master, at the address its sentinels name.
 *
 * The URL's hosts are sentinels. Each gets a node of its own whose
 * connections are bare (no AUTH, SELECT or INFO: those are the master's):
 * the command connection asks SENTINEL get-master-addr-by-name, the
 * subscriber connection hears +switch-master. The master is one node
 * (t->seed) that serves every slot and carries every subscription, as a
 * standalone server does; what changes is its address.
 *
 *  - Asking: every sentinel at once. The address that a majority of the
 *    URL's sentinels name wins at once; otherwise, when all have answered
 *    (or failed), the one named most (the first answer on a tie). A stale
 *    or partitioned minority of sentinels cannot send us elsewhere; nor,
 *    for a few seconds after a +switch-master, can sentinels that still
 *    name the master it replaced (they have not heard of it yet, and on
 *    their word we would go back and forth, and the holds of both masters
 *    would lose their vouching).
 *  - Checking: the master's command connection is ready only when ROLE
 *    says master (net->check_role). A replica is dropped, and its loss
 *    makes us ask again.
 *  - Following: +switch-master from any sentinel moves the node at once;
 *    so does an answer that names another address. Moving tears down both
 *    connections of the node and opens them at the new address: requests
 *    in flight go again there with the same arguments (they are
 *    idempotent), the engine resubscribes every waiting name and its ack
 *    lets the head try, and holds are renewed there or reported lost by
 *    the watchdog when the failover lost their key.
 *  - Asking again: whenever the master's connection is lost or cannot be
 *    made (at most every SENTINEL_ASK_MIN_MS), while nobody named one, and
 *    every HL_SENTINEL_WATCH_MS in any case.
 *  - Vouching: a hold believes in its master only while a majority of the
 *    sentinels keep naming it (hl_topo_vouched_until): a holder cut off
 *    with a master that the others are replacing hears nothing wrong from
 *    that master, which goes on renewing its lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "topo/topo.h"

#define SENTINEL_ASK_MIN_MS 100
/* How long after a +switch-master the sentinels that still name the old
 * master are taken as not having heard of it yet: they learn it from the
 * leader's hello messages, sent every 2 s. */
#define SENTINEL_SWITCH_SETTLE_MS 5000
#define SENTINEL_CHANNEL "+switch-master"

typedef struct candidate {
    char host[256];
    int port;
    int votes;
} candidate;

struct hl_sentinels {
    hl_node *node[HL_URL_MAX_SEEDS];
    int n;
    int asking;             /* answers still due in this round */
    unsigned round;         /* which round (its low bits in each request's
                               `rounds`: a late answer of an older one is
                               not counted) */
    int decided;            /* this round has moved (or kept) the master */
    int moving;             /* tearing the master's connections down */
    candidate cand[HL_URL_MAX_SEEDS];
    int ncand;
    uint64_t asked_at;
    /* The master a +switch-master moved us from, not gone back to on the
     * word of sentinels that have not heard of the switch, until
     * left_until (a switch back is published too, and heard). */
    char left_host[256];
    int left_port;
    uint64_t left_until;
    unsigned failures;      /* rounds in a row that named no master */
    int refused;            /* answers of this round that the ACL refused */
    char refusal[200];      /* the first one's text */
    hl_timer again;
    hl_timer watch;         /* a round every HL_SENTINEL_WATCH_MS */
};

static hl_node *sentinel_route(hl_topo *t, uint16_t slot) {
    (void)slot;
    return t->seed;
}

static void ask(hl_topo *t);

/* The master's subscriber connection dropped: it may have moved. */
static void sentinel_sub_lost(hl_topo *t, hl_node *n) {
    if (n == t->seed) ask(t);
}

static const hl_topo_ops sentinel_ops = {sentinel_route, sentinel_route, sentinel_sub_lost, NULL,
                                         NULL, NULL};

static const char *master_name(const hl_topo *t) { return t->net.url.master; }

/* ---- Moving the master ------------------------------------------------------ */

static void move_master(hl_topo *t, const char *host, int port) {
    hl_sentinels *s = t->sentinels;
    hl_node *m = t->seed;
    if (m->addr.host && m->addr.port == port && strcmp(m->addr.host, host) == 0) return;
    char *copy = strdup(host);
    if (copy == NULL) return; /* asked again on the next loss */
    hl_log(t->net.loop, HILOCK_LOG_INFO, "sentinel: master %s is at %s:%d%s", master_name(t), host,
           port, m->addr.host ? " (moved)" : "");
    /* The new master is vouched for from the round that named it; holds
     * of the old one keep its word until they are renewed on the new. */
    t->word_prev_at = t->word_at;
    t->word_at = 0;
    t->epoch++;
    s->moving = 1;
    /* Dropped at the old address (the log names it), opened at the new. */
    hl_conn_set_why(&m->cmd, "the sentinels name %s:%d as the master now", host, port);
    snprintf(m->sub.why, sizeof(m->sub.why), "%s", m->cmd.why);
    hl_conn_teardown(&m->cmd); /* requests in flight queue for the new address */
    hl_conn_teardown(&m->sub); /* the engine hears: its names resubscribe on ready */
    free(m->addr.host);
    m->addr.host = copy;
    m->addr.port = port;
    s->moving = 0;
    m->cmd.failures = m->sub.failures = 0;
    hl_conn_connect(&m->cmd);
    hl_conn_connect(&m->sub);
}

/* ---- Asking the sentinels --------------------------------------------------- */

static void vote(hl_sentinels *s, const char *host, int port) {
    for (int i = 0; i < s->ncand; i++)
        if (s->cand[i].port == port && strcmp(s->cand[i].host, host) == 0) {
            s->cand[i].votes++;
            return;
        }
    if (s->ncand == HL_URL_MAX_SEEDS || strlen(host) >= sizeof(s->cand[0].host)) return;
    candidate *c = &s->cand[s->ncand++];
    snprintf(c->host, sizeof(c->host), "%s", host);
    c->port = port;
    c->votes = 1;
}

/* A round with no address named: requests wait (until their deadline)
 * for the next round, with a backoff like a reconnect's. */
static void nobody_named(hl_topo *t) {
    hl_sentinels *s = t->sentinels;
    hl_node *m = t->seed;
    if (m->addr.host == NULL && s->refused > 0) {
        /* The sentinels' ACL: that will not fix itself by waiting (as a
         * refused AUTH), so what waits fails now; the rounds go on, for an
         * ACL that is mended. */
        m->cmd.last_err = HILOCK_EAUTH;
        hl_set_error(t->net.loop, "sentinel: %s (the sentinels' default user needs "
                     "+sentinel|get-master-addr-by-name)", s->refusal);
        hl_conn_fail_queue(&m->cmd, HILOCK_EAUTH);
    } else if (m->addr.host == NULL) {
        m->cmd.last_err = HILOCK_ECONN;
        hl_set_error(t->net.loop, "sentinel: no sentinel named a master \"%s\" (%d asked)",
                     master_name(t), s->n);
        hl_conn_fail_fast(&m->cmd, HILOCK_ECONN); /* a try-once has had its attempt */
    }
    uint64_t d = (uint64_t)SENTINEL_ASK_MIN_MS << (s->failures < 4 ? s->failures : 4);
    if (d > t->net.reconnect_max_ms && t->net.reconnect_max_ms >= SENTINEL_ASK_MIN_MS)
        d = t->net.reconnect_max_ms;
    s->failures++;
    hl_timer_start(t->net.loop, &s->again, d);
}

/* Move when a majority agrees, or when every sentinel has answered. */
static void decide(hl_topo *t) {
    hl_sentinels *s = t->sentinels;
    const candidate *best = NULL;
    if (s->decided) return;
    for (int i = 0; i < s->ncand; i++)
        if (best == NULL || s->cand[i].votes > best->votes) best = &s->cand[i];
    if ((best == NULL || best->votes <= s->n / 2) && s->asking > 0) return;
    s->decided = 1;
    if (best == NULL) {
        nobody_named(t);
        return;
    }
    s->failures = 0;
    if (hl_now_ms() < s->left_until && best->port == s->left_port &&
        strcmp(best->host, s->left_host) == 0) {
        /* Stale: the switch was published after the failover was made. */
        hl_timer_start(t->net.loop, &s->again, SENTINEL_ASK_MIN_MS);
        return;
    }
    move_master(t, best->host, best->port);
    if (best->votes > s->n / 2) t->word_at = s->asked_at; /* vouched for by a majority */
}

static void on_master_addr(hl_req *r, redisReply *reply, int err) {
    hl_topo *t = r->owner;
    hl_sentinels *s = t->sentinels;
    if (t->net.loop->freeing || r->rounds != (s->round & 3)) return; /* a round gone by */
    s->asking--;
    if (err == 0 && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[0]->type == REDIS_REPLY_STRING && reply->element[1]->type == REDIS_REPLY_STRING) {
        int port = atoi(reply->element[1]->str);
        if (port > 0 && port < 65536) vote(s, reply->element[0]->str, port);
    } else if (err == 0 && reply->type == REDIS_REPLY_ERROR) {
        hl_log(t->net.loop, HILOCK_LOG_WARNING, "sentinel: %s", reply->str);
        if (hl_reply_is_acl(reply->str) && s->refused++ == 0)
            snprintf(s->refusal, sizeof(s->refusal), "%s", reply->str);
    }
    decide(t);
}

static void ask(hl_topo *t) {
    hl_sentinels *s = t->sentinels;
    hl_loop *l = t->net.loop;
    uint64_t now = hl_now_ms();
    /* A round waits for its slowest sentinel only so long: one that is
     * silent (it accepts, never answers) must not keep the word from being
     * renewed, so a round half a watch old gives way to the next. */
    if ((s->asking > 0 && now < s->asked_at + HL_SENTINEL_WATCH_MS / 2) || s->moving || l->freeing ||
        t->net.closing)
        return;
    if (now < s->asked_at + SENTINEL_ASK_MIN_MS) {
        if (!hl_timer_armed(&s->again)) hl_timer_start(l, &s->again, s->asked_at + SENTINEL_ASK_MIN_MS - now);
        return;
    }
    hl_timer_stop(l, &s->again);
    s->asked_at = now;
    s->round++;
    s->asking = 0;
    s->ncand = 0;
    s->decided = 0;
    s->refused = 0;
    size_t namelen = strlen(master_name(t));
    for (int i = 0; i < s->n; i++) {
        hl_req *r = hl_req_new(&t->net, NULL, 0, 40 + namelen, on_master_addr, t);
        if (r == NULL) break;
        hl_req_arg(r, "SENTINEL", 8, "", 0);
        hl_req_arg(r, "get-master-addr-by-name", 23, "", 0);
        hl_req_arg(r, master_name(t), namelen, "", 0);
        r->fail_fast = 1; /* a sentinel that is down does not hold up the round */
        r->rounds = s->round & 3;
        s->asking++;
        /* Three rounds at most (`rounds` tells four apart). */
        hl_node_submit_within(s->node[i], r, 3 * HL_SENTINEL_WATCH_MS);
    }
    if (s->asking == 0) decide(t); /* no memory: nobody named, try later */
}

static void ask_again(hl_timer *tm) {
    hl_sentinels *s = HL_CONTAINER(tm, hl_sentinels, again);
    ask(s->node[0]->topo);
}

/* The sentinels' word is asked for every HL_SENTINEL_WATCH_MS, not only
 * when the master's connection breaks: a master cut off from them with its
 * holders (a partition that leaves it running) breaks nothing on our side,
 * and only their silence, or their naming another master, tells. */
static void watch_fired(hl_timer *tm) {
    hl_sentinels *s = HL_CONTAINER(tm, hl_sentinels, watch);
    hl_topo *t = s->node[0]->topo;
    if (t->net.loop->freeing || t->net.closing) return;
    ask(t);
    hl_timer_start(t->net.loop, &s->watch, HL_SENTINEL_WATCH_MS);
}

/* ---- Events ------------------------------------------------------------------ */

/* The master's command connection is down, or could not be made. */
static void master_lost(void *arg) {
    hl_topo *t = arg;
    if (!t->sentinels->moving) ask(t);
}

/* "+switch-master NAME OLDIP OLDPORT NEWIP NEWPORT", from any sentinel. */
static void sentinel_push(void *arg, const char *kind, const char *ch, size_t len, const char *data,
                          size_t dlen) {
    hl_node *sn = arg;
    hl_topo *t = sn->topo;
    char name[256], host[256];
    int port;
    if (strcmp(kind, "error") == 0) { /* e.g. the sentinel's ACL: no &+switch-master */
        hl_log(t->net.loop, HILOCK_LOG_WARNING, "sentinel %s:%d refused SUBSCRIBE %s: %s; "
               "failovers are then found only when the master's connection breaks",
               sn->addr.host, sn->addr.port, SENTINEL_CHANNEL, ch);
        return;
    }
    if (strcmp(kind, "message") != 0 || data == NULL || dlen >= 600 ||
        len != strlen(SENTINEL_CHANNEL) || memcmp(ch, SENTINEL_CHANNEL, len) != 0)
        return;
    char msg[600];
    memcpy(msg, data, dlen);
    msg[dlen] = '\0';
    if (sscanf(msg, "%255s %*s %*s %255s %d", name, host, &port) != 3) return;
    if (strcmp(name, master_name(t)) != 0 || port <= 0 || port > 65535) return;
    hl_log(t->net.loop, HILOCK_LOG_INFO, "sentinel %s:%d: +switch-master %s", sn->addr.host,
           sn->addr.port, msg);
    hl_sentinels *s = t->sentinels;
    hl_node *m = t->seed;
    if (m->addr.host && (m->addr.port != port || strcmp(m->addr.host, host) != 0) &&
        strlen(m->addr.host) < sizeof(s->left_host)) {
        snprintf(s->left_host, sizeof(s->left_host), "%s", m->addr.host);
        s->left_port = m->addr.port;
        s->left_until = hl_now_ms() + SENTINEL_SWITCH_SETTLE_MS;
    }
    move_master(t, host, port);
    /* One sentinel said so: ask for the majority's word (for the holds)
     * in a round of its own: the answers of one already out may predate
     * the switch, and would send us back. */
    s->round++;
    s->asking = 0;
    ask(t);
}

/* A sentinel's subscriber connection is up: listen, and ask again if the
 * master is not reachable now (a switch may have gone by unheard). */
static void sentinel_sub_ready(void *arg) {
    hl_node *sn = arg;
    hl_topo *t = sn->topo;
    hl_conn_subscribe(&sn->sub, SENTINEL_CHANNEL, strlen(SENTINEL_CHANNEL), 1);
    if (t->seed->addr.host != NULL && !hl_node_cmd_ready(t->seed)) ask(t);
}

/* ---- Set-up ------------------------------------------------------------------- */

static hl_node *sentinel_node(hl_topo *t, const hl_addr *a) {
    hl_node *n = hl_node_new(t, a);
    if (n == NULL) return NULL;
    hl_conn_events sub_ev = {sentinel_sub_ready, NULL, sentinel_push, n};
    n->cmd.bare = n->sub.bare = 1;
    n->sub.ev = sub_ev;
    return n;
}

int hl_topo_sentinel(hl_topo *t, const hl_sub_events *sub) {
    const hl_url *u = &t->net.url;
    hl_addr none = {NULL, 0, NULL};
    t->ops = &sentinel_ops;
    t->sub = *sub;
    t->net.check_role = 1;
    if ((t->sentinels = calloc(1, sizeof(*t->sentinels))) == NULL) return HILOCK_ENOMEM;
    hl_sentinels *s = t->sentinels;
    s->again.cb = ask_again;
    s->watch.cb = watch_fired;
    t->needs_word = 1;
    if ((t->seed = hl_node_new(t, &none)) == NULL) return HILOCK_ENOMEM; /* where: to be asked */
    t->seed->cmd.ev.lost = master_lost;
    t->seed->cmd.ev.arg = t;
    for (int i = 0; i <= u->nmore; i++) {
        hl_addr a = hl_url_addr(u, i);
        if ((s->node[i] = sentinel_node(t, &a)) == NULL)
            return HILOCK_ENOMEM;
        s->n++;
    }
    for (int i = 0; i < s->n; i++) {
        hl_conn_connect(&s->node[i]->cmd);
        hl_conn_connect(&s->node[i]->sub);
    }
    ask(t);
    hl_timer_start(t->net.loop, &s->watch, HL_SENTINEL_WATCH_MS);
    return 0;
}
