/* Leader election (etcd's concurrency.Election: Campaign, Resign, Leader,
 * Observe; Curator's LeaderLatch). A campaign is a wait for the election's
 * lock, whose hold is the leadership: renewed by the watchdog, lost with
 * the same lost callback, resigned by its release. The lock's value names
 * the leader: "TOKEN EPOCH VALUE" (lua/_election.lua), its epoch being its
 * fence, which strictly increases with every new leader.
 *
 * Keys of election NAME under prefix P (none shared with the mutex NAME):
 * P{T}:el the lock, with the leader's lease as TTL; P{T}:el:fence the last
 * epoch; P{T}:el:ch the channel, which hears "l EPOCH LEASE_MS VALUE"
 * when a leader is elected and "r EPOCH" when one resigns. Campaigns wait
 * as the mutex's waits do (woken by those messages, or at the leader's
 * lease end), and always race: an election has no order to keep.
 * Observers (hilock_observe) keep the name subscribed (hl_name_listen) and
 * learn each change from its message, in the order Redis published them,
 * so a leader elected and gone between two reads is still reported. They
 * read the leader only where no message can tell: at every
 * (re)subscription (what went by while a connection was down) and at the
 * end of the leader's lease (a leader gone without resigning publishes
 * nothing). A read is older than a message it crossed when the last epoch
 * it saw is below one heard: it is then dropped, so epochs never go back.
 *
 * The value a campaign stands with is the name's (hl_name.payload): one
 * value per election per client at a time. Not over Redlock (no
 * fence_req). */
#include <stdlib.h>
#include <string.h>
#include "prim/prim.h"

static const hl_cmd acquire_cmd = {&hl_script_election_acquire, 2, {":el", ":el:fence"}};
static const hl_cmd release_cmd = {&hl_script_election_release, 1, {":el"}};
static const hl_cmd renew_cmd = {&hl_script_election_renew, 1, {":el"}};
static const hl_cmd leader_cmd = {&hl_script_election_leader, 2, {":el", ":el:fence"}};

/* campaign(lock, fence; token, lease_ms, fence_ttl_s, value, channel,
 * PUBLISH or SPUBLISH (added by net)) */
static hl_req *el_try_req(hl_name *n, const char *token, uint32_t lease_ms, hl_req_done done,
                          void *owner) {
    hl_req *r = hl_name_req(n, &acquire_cmd, HL_TOKEN_LEN + 2 * 20 + n->payload_len + n->chlen + 8,
                            done, owner);
    if (r == NULL) return NULL;
    hl_req_arg(r, token, HL_TOKEN_LEN, "", 0);
    hl_req_arg_u64(r, hl_key_ttl(n, lease_ms));
    hl_req_arg_u64(r, n->c->cfg.fence_ttl_s);
    hl_req_arg(r, n->payload ? n->payload : "", n->payload_len, "", 0);
    hl_req_arg(r, hl_name_channel(n), n->chlen, "", 0);
    r->publishes = 1;
    return r;
}

/* The epoch: ours; {0, pttl, leader}: another leads, for pttl ms at most. */
static int el_try_parse(hilock_client *c, const redisReply *reply, hl_try *out) {
    long long v[3];
    if (reply->type == REDIS_REPLY_INTEGER) {
        out->granted = reply->integer > 0;
        out->fence = out->granted ? (uint64_t)reply->integer : 0;
        return 0;
    }
    int rc = hl_prim_try_reply(c, reply, "the campaign script", 0, v);
    if (rc != 0) return rc;
    out->retry_ms = v[1] >= 0 ? (uint64_t)v[1] + 1 : v[1] == -2 ? 0 : c->cfg.default_lease_ms;
    return 0;
}

static hl_req *el_release_req(hl_name *n, const char *token, const hl_terms *terms, hl_req_done done,
                              void *owner) {
    (void)terms;
    return hl_prim_release_req(n, &release_cmd, token, done, owner);
}

static hl_req *el_renew_req(hl_name *n, const hilock_hold *h, uint32_t lease_ms, hl_req_done done,
                            void *owner) {
    return hl_prim_renew_req(n, &renew_cmd, h->token, hl_key_ttl(n, lease_ms), done, owner);
}

static const char *el_guard(const hl_terms *terms, char *kind) {
    (void)terms;
    *kind = 's'; /* "TOKEN EPOCH VALUE" */
    return ":el";
}

static void el_heard(hl_name *n, const char *msg, size_t len);

const hl_prim hl_election = {
    .channel_suffix = ":el:ch",
    .try_req = el_try_req,
    .try_parse = el_try_parse,
    .shares = hl_prim_same_owner, /* reentrancy */
    .release_req = el_release_req,
    .renew_req = el_renew_req,
    .guard = el_guard,
    .heard = el_heard, /* no fence_req: no Redlock, refused at acquire */
};

/* ---- Campaign and resign ---------------------------------------------------- */

int hilock_campaign(hilock_client *c, const char *name, const char *value,
                    const hilock_acquire_opts *opts, hilock_acquire_cb cb, void *data,
                    hilock_wait **wait_out) {
    if (wait_out) *wait_out = NULL;
    if (c == NULL || name == NULL || value == NULL) return HILOCK_EINVAL;
    if (hl_client_refuses(c)) return hl_client_refuses(c);
    size_t len = strnlen(name, HILOCK_NAME_MAX + 1), vlen = strnlen(value, HILOCK_VALUE_MAX + 1);
    if (len == 0 || len > HILOCK_NAME_MAX || vlen > HILOCK_VALUE_MAX) return HILOCK_EINVAL;
    hl_name *n = hl_name_get(c, &hl_election, name, len);
    if (n == NULL) return HILOCK_ENOMEM;
    int rc = 0;
    if (n->payload != NULL && (n->nwaiters > 0 || n->refs > n->listeners) &&
        (n->payload_len != vlen || memcmp(n->payload, value, vlen) != 0)) {
        hl_set_error(&c->loop, "hilock_campaign: this client campaigns for %s with another value "
                     "already", name);
        rc = HILOCK_EINVAL;
    } else if (n->payload == NULL || n->payload_len != vlen || memcmp(n->payload, value, vlen) != 0) {
        char *p = malloc(vlen + 1);
        if (p == NULL) rc = HILOCK_ENOMEM;
        else {
            memcpy(p, value, vlen + 1);
            free(n->payload);
            n->payload = p;
            n->payload_len = vlen;
        }
    }
    if (rc != 0) {
        hl_name_maybe_free(n);
        return rc;
    }
    return hl_prim_acquire(c, &hl_election, name, opts, NULL, cb, data, wait_out);
}

int hilock_resign(hilock_hold *h, hilock_release_cb cb, void *data) {
    if (h != NULL && h->name->prim != &hl_election) return HILOCK_EINVAL;
    return hilock_release(h, cb, data);
}

/* ---- Reading the leader ------------------------------------------------------ */

/* A leader as read: epoch 0 when nobody leads; last, the last epoch given. */
typedef struct el_state {
    uint64_t epoch, ttl_ms, last;
    char *value;
    size_t len;
} el_state;

static uint64_t reply_u64(const redisReply *r) { return r->integer > 0 ? (uint64_t)r->integer : 0; }

/* leader's reply {epoch, value, pttl, last}: 0 and *s (value malloc'd), or
 * an error. */
static int leader_parse(hilock_client *c, const redisReply *reply, el_state *s) {
    memset(s, 0, sizeof(*s));
    if (reply->type == REDIS_REPLY_ERROR) return hl_reply_error(&c->loop, reply);
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 4 ||
        reply->element[0]->type != REDIS_REPLY_INTEGER || reply->element[1]->type != REDIS_REPLY_STRING ||
        reply->element[2]->type != REDIS_REPLY_INTEGER || reply->element[3]->type != REDIS_REPLY_INTEGER) {
        hl_set_error(&c->loop, "unexpected reply to the leader script");
        return HILOCK_EPROTO;
    }
    s->epoch = reply_u64(reply->element[0]);
    s->ttl_ms = reply_u64(reply->element[2]);
    s->last = reply_u64(reply->element[3]);
    s->len = reply->element[1]->len;
    if ((s->value = malloc(s->len + 1)) == NULL) return HILOCK_ENOMEM;
    memcpy(s->value, reply->element[1]->str, s->len + 1);
    return 0;
}

typedef struct hl_leaderop {
    hl_defer defer;
    hilock_client *c;
    hilock_leader_cb cb;
    void *data;
    int status;
    el_state s;
} hl_leaderop;

static void leaderop_run(hl_defer *d, int cancel) {
    hl_leaderop *op = HL_CONTAINER(d, hl_leaderop, defer);
    int status = cancel ? HILOCK_ECANCELED : op->status;
    hl_count_status(&op->c->counts, status);
    if (!op->c->loop.forked)
        op->cb(status, status == 0 ? op->s.epoch : 0, status == 0 && op->s.value ? op->s.value : "",
               status == 0 ? op->s.len : 0, op->data);
    free(op->s.value);
    free(op);
}

static void on_leader(hl_req *r, redisReply *reply, int err) {
    hl_leaderop *op = r->owner;
    op->status = err != 0 ? err : leader_parse(op->c, reply, &op->s);
    if (op->c->loop.freeing) leaderop_run(&op->defer, 1);
    else hl_defer_push(&op->c->loop, &op->defer);
}

/* The election `name`'s entry, checked; NULL and *rc when refused. */
static hl_name *election_name(hilock_client *c, const char *name, int *rc) {
    *rc = HILOCK_EINVAL;
    if (c == NULL || name == NULL) return NULL;
    if ((*rc = hl_client_refuses(c)) != 0) return NULL;
    *rc = HILOCK_EINVAL;
    if (hl_topo_quorum(&c->topo)) {
        hl_set_error(&c->loop, "elections do not run over Redlock");
        return NULL;
    }
    size_t len = strnlen(name, HILOCK_NAME_MAX + 1);
    if (len == 0 || len > HILOCK_NAME_MAX) return NULL;
    hl_name *n = hl_name_get(c, &hl_election, name, len);
    *rc = n ? 0 : HILOCK_ENOMEM;
    return n;
}

int hilock_leader(hilock_client *c, const char *name, hilock_leader_cb cb, void *data) {
    int rc;
    if (cb == NULL) return HILOCK_EINVAL;
    hl_name *n = election_name(c, name, &rc);
    if (n == NULL) return rc;
    hl_leaderop *op = calloc(1, sizeof(*op));
    hl_req *r = op ? hl_name_req(n, &leader_cmd, 0, on_leader, op) : NULL;
    if (r == NULL) {
        free(op);
        hl_name_maybe_free(n);
        return HILOCK_ENOMEM;
    }
    op->defer.run = leaderop_run;
    op->c = c;
    op->cb = cb;
    op->data = data;
    hl_name_submit(n, r);
    hl_name_maybe_free(n); /* the request carries its own keys */
    return 0;
}

/* ---- Observers ----------------------------------------------------------------- */

#define OBSERVE_RETRY_MS 1000 /* a read that failed is tried again */

/* A change to report: who leads from now (epoch 0: nobody). */
typedef struct el_change {
    hl_link link;
    uint64_t epoch;
    size_t len;
    char value[]; /* len bytes and a NUL */
} el_change;

struct hilock_observer {
    hl_link link;          /* in name->observers */
    hl_link all;           /* in client->observers */
    hl_name *name;         /* a reference, until the observer is freed */
    hilock_leader_cb cb;
    void *data;
    hl_req *req;           /* the read in flight, if any */
    hl_timer again;        /* the leader's lease end, or a retry */
    hl_defer defer;        /* the next report, or the last call (HILOCK_ECANCELED) */
    hl_link changes;       /* el_change to report, in order */
    uint64_t epoch;        /* the leader as last queued (0: nobody) */
    uint64_t newest;       /* the highest epoch heard of: reads older are dropped */
    uint64_t read_from;    /* newest when the read in flight was sent */
    unsigned known : 1;    /* a first state was queued */
    unsigned reread : 1;   /* read again when the one in flight is answered */
    unsigned resub : 1;    /* the next read is a (re)subscription's */
    unsigned read_resub : 1; /* the read in flight is one */
    unsigned stopped : 1;  /* hilock_observe_stop(), or its last call made */
    unsigned ending : 1;   /* the client closes: its last call is queued */
};

static void observe_read(hilock_observer *o);

static void observer_free(hilock_observer *o) {
    while (!hl_list_empty(&o->changes)) {
        el_change *ch = HL_CONTAINER(o->changes.next, el_change, link);
        hl_list_remove(&ch->link);
        free(ch);
    }
    hl_list_remove(&o->all);
    hl_name *n = o->name;
    free(o);
    hl_name_unref(n);
}

/* One report per turn, in order; a callback that stops the observer ends
 * them (observer_free drops the rest). */
static void observer_run(hl_defer *d, int cancel) {
    hilock_observer *o = HL_CONTAINER(d, hilock_observer, defer);
    hilock_client *c = o->name->c;
    int forked = c->loop.forked;
    if (cancel || o->ending) {
        /* The client's end: a last call, once (stopped first: a stop
         * inside it is refused, not a second free). */
        o->stopped = 1;
        if (!forked) o->cb(HILOCK_ECANCELED, 0, "", 0, o->data);
        if (o->req == NULL) observer_free(o);
        return;
    }
    if (hl_list_empty(&o->changes)) return;
    el_change *ch = HL_CONTAINER(o->changes.next, el_change, link);
    hl_list_remove(&ch->link);
    if (!hl_list_empty(&o->changes)) hl_defer_push(&c->loop, &o->defer);
    if (!forked) o->cb(0, ch->epoch, ch->value, ch->len, o->data);
    free(ch);
}

/* Who leads is now `epoch` (0: nobody) with `value`, for ttl_ms more:
 * queue a report if that is a change, and read again at the lease's end
 * (a leader that dies publishes nothing). */
static void observe_change(hilock_observer *o, uint64_t epoch, const char *value, size_t len, uint64_t ttl_ms) {
    hl_loop *l = &o->name->c->loop;
    if (epoch != 0) hl_timer_start(l, &o->again, ttl_ms + 1);
    else hl_timer_stop(l, &o->again);
    if (o->known && epoch == o->epoch) return;
    el_change *ch = malloc(sizeof(*ch) + len + 1);
    if (ch == NULL) { /* reported at the next read */
        hl_timer_start(l, &o->again, OBSERVE_RETRY_MS);
        return;
    }
    ch->epoch = epoch;
    ch->len = len;
    memcpy(ch->value, value, len);
    ch->value[len] = '\0';
    o->known = 1;
    o->epoch = epoch;
    if (!hl_linked(&o->defer.link)) hl_defer_push(l, &o->defer);
    hl_list_push(&o->changes, &ch->link);
}

/* A read's answer, placed among the messages. The states come in one
 * order: epoch E leads, then nobody after E, then E+1 leads... A leader
 * read is (its epoch, leading); nobody is (the last epoch given, ended),
 * and never before what the observer knew when it sent the read (the fence
 * key, which says the last epoch, may have expired meanwhile). The reply
 * comes on another connection than the messages, so it may overtake them
 * or be overtaken:
 * - behind what the messages said (it ran before a message handled since):
 *   dropped;
 * - the same: the leader renewed; its lease is timed again;
 * - ahead, from a read at a lease's end or for a message not understood:
 *   the messages of what it saw are on their way, and will tell it in
 *   order; the read only says that the leader known has ended;
 * - ahead, from a (re)subscription's read: what went by unheard, reported
 *   as the latest. */
static void observe_answer(hilock_observer *o, const el_state *s) {
    int ended = s->epoch == 0, was_ended = o->epoch == 0;
    uint64_t at = ended ? (s->last > o->read_from ? s->last : o->read_from) : s->epoch;
    if (o->known && (at < o->newest || (at == o->newest && ended < was_ended))) return;
    if (o->known && at == o->newest && ended == was_ended) {
        if (!ended) observe_change(o, s->epoch, s->value, s->len, s->ttl_ms);
        return;
    }
    if (o->known && !o->read_resub && at > o->newest) {
        if (!was_ended) observe_change(o, 0, "", 0, 0);
        return;
    }
    o->newest = at;
    observe_change(o, s->epoch, s->value, s->len, s->ttl_ms);
}

/* A read answered. */
static void on_observed(hl_req *r, redisReply *reply, int err) {
    hilock_observer *o = r->owner;
    hilock_client *c = o->name->c;
    el_state s;
    o->req = NULL;
    if (o->stopped || o->ending || c->loop.freeing) {
        if (!hl_linked(&o->defer.link)) observer_free(o);
        return;
    }
    if (err == 0) err = leader_parse(c, reply, &s);
    if (err != 0) {
        hl_timer_start(&c->loop, &o->again, OBSERVE_RETRY_MS);
        return;
    }
    if (o->reread) {
        o->reread = 0;
        o->resub |= o->read_resub; /* a (re)subscription's read stays one */
        observe_read(o);
    } else {
        observe_answer(o, &s);
    }
    free(s.value);
}

static void observe_read(hilock_observer *o) {
    if (o->stopped || o->ending) return;
    if (o->req != NULL) {
        o->reread = 1;
        return;
    }
    hl_req *r = hl_name_req(o->name, &leader_cmd, 0, on_observed, o);
    if (r == NULL) {
        hl_timer_start(&o->name->c->loop, &o->again, OBSERVE_RETRY_MS);
        return;
    }
    o->req = r;
    o->read_from = o->newest;
    o->read_resub = o->resub;
    o->resub = 0;
    hl_name_submit(o->name, r);
}

static void observe_again(hl_timer *t) {
    observe_read(HL_CONTAINER(t, hilock_observer, again));
}

/* A number and the space after it, from *p (below end); 0 if none. */
static uint64_t msg_u64(const char **p, const char *end) {
    uint64_t v = 0;
    const char *s = *p;
    while (s < end && *s >= '0' && *s <= '9' && v < UINT64_MAX / 10) v = v * 10 + (uint64_t)(*s++ - '0');
    if (s == *p || (s < end && *s != ' ')) return 0;
    *p = s < end ? s + 1 : s;
    return v;
}

/* A message of the channel: "l EPOCH LEASE_MS VALUE" or "r EPOCH". */
static void observe_message(hilock_observer *o, const char *msg, size_t len) {
    const char *p = msg + 2, *end = msg + len;
    uint64_t epoch = len > 2 && msg[1] == ' ' ? msg_u64(&p, end) : 0;
    if (epoch != 0 && msg[0] == 'l') {
        uint64_t ttl = msg_u64(&p, end);
        if (epoch <= o->newest) return; /* a read already saw past it */
        o->newest = epoch;
        observe_change(o, epoch, p, (size_t)(end - p), ttl);
    } else if (epoch != 0 && msg[0] == 'r') {
        if (epoch < o->newest || (epoch == o->newest && o->epoch == 0)) return; /* known already */
        o->newest = epoch;
        observe_change(o, 0, "", 0, 0);
    } else {
        observe_read(o); /* not ours to parse: read who leads */
    }
}

/* The engine heard the name's channel (msg), or (re)subscribed it (NULL):
 * what went by while it was not subscribed is read. */
static void el_heard(hl_name *n, const char *msg, size_t len) {
    for (hl_link *l = n->observers.next; l != &n->observers; l = l->next) {
        hilock_observer *o = HL_CONTAINER(l, hilock_observer, link);
        if (msg != NULL) {
            observe_message(o, msg, len);
        } else {
            o->resub = 1;
            observe_read(o);
        }
    }
}

int hilock_observe(hilock_client *c, const char *name, hilock_leader_cb cb, void *data,
                   hilock_observer **out) {
    int rc;
    if (out) *out = NULL;
    if (cb == NULL || out == NULL) return HILOCK_EINVAL;
    hl_name *n = election_name(c, name, &rc);
    if (n == NULL) return rc;
    hilock_observer *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        hl_name_maybe_free(n);
        return HILOCK_ENOMEM;
    }
    o->name = n;
    n->refs++;
    o->cb = cb;
    o->data = data;
    o->again.cb = observe_again;
    o->defer.run = observer_run;
    hl_list_init(&o->defer.link);
    hl_list_init(&o->changes);
    hl_list_push(&n->observers, &o->link);
    hl_list_push(&c->observers, &o->all);
    hl_name_listen(n, 1);
    o->resub = 1; /* the first read: what is, whatever came before */
    observe_read(o);
    *out = o;
    return 0;
}

/* o no longer listens: out of its name's observers, its timer stopped. */
static void observer_detach(hilock_observer *o) {
    hilock_client *c = o->name->c;
    hl_timer_stop(&c->loop, &o->again);
    if (!hl_linked(&o->link)) return;
    hl_list_remove(&o->link);
    if (c->loop.freeing || c->closing) o->name->listeners--;
    else hl_name_listen(o->name, 0);
}

int hilock_observe_stop(hilock_observer *o) {
    if (o == NULL || o->stopped) return HILOCK_EINVAL;
    if (o->name->c->loop.forked) return HILOCK_EFORK;
    o->stopped = 1;
    observer_detach(o);
    hl_defer_cancel(&o->defer);
    if (o->req == NULL) observer_free(o);
    return 0;
}

void hl_observers_end(hilock_client *c) {
    for (hl_link *l = c->observers.next; l != &c->observers; l = l->next) {
        hilock_observer *o = HL_CONTAINER(l, hilock_observer, all);
        if (o->stopped || o->ending) continue;
        o->ending = 1;
        observer_detach(o);
        hl_defer_cancel(&o->defer);
        hl_defer_push(&c->loop, &o->defer); /* its last call */
    }
}

void hl_observers_free_all(hilock_client *c) {
    while (!hl_list_empty(&c->observers)) {
        hilock_observer *o = HL_CONTAINER(c->observers.next, hilock_observer, all);
        o->req = NULL; /* ended with the connections */
        observer_free(o);
    }
}
