/* The waiter engine: per lock name, a local FIFO of waiters, one pub/sub
 * subscription and at most one try in flight, for every primitive.
 *
 *  - A new waiter joins the tail; only when it is alone does it try at once.
 *  - A failed try makes sure the name is subscribed; the subscription's
 *    confirmation triggers one more try (a release may have happened before
 *    the subscription existed), and a fallback timer at the lock's PTTL covers
 *    a holder that dies without releasing.
 *  - A release message wakes only the head of the queue: one release costs
 *    each process one try, however many waiters it has (no herd).
 *  - When the last waiter leaves, the subscription lingers a moment (a busy
 *    name would otherwise churn SUBSCRIBE/UNSUBSCRIBE) and is then dropped.
 *
 * What a try means and who may share a grant is the primitive's (hl_prim). */
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "core/engine.h"

static void try_send(hilock_wait *w);
static void try_submit(hilock_wait *w, int join);
static uint64_t starves_in(const hilock_wait *w, uint64_t now);
static int req_has_token(const hl_req *r, const hilock_wait *w);

/* ---- Subscription state -------------------------------------------------- */

/* Does n need its channel: waiters, or holds that listen for revokes
 * (hl_name_listen)? */
static int name_listens(const hl_name *n) { return n->nwaiters > 0 || n->listeners > 0; }

static void subscribe(hl_name *n, int on) {
    if (on) n->sub_node = hl_name_sub_node(n);
    hl_node_subscribe(n->sub_node, hl_name_channel(n), n->chlen, on);
}

static void ensure_subscribed(hl_name *n) {
    hl_timer_stop(&n->c->loop, &n->linger);
    if (n->sub != HL_SUB_NONE) return;
    hl_node *node = hl_name_sub_node(n);
    if (hl_node_sub_ready(node)) {
        n->sub = HL_SUB_PENDING;
        subscribe(n, 1);
    } else {
        hl_node_sub_want(node); /* on_sub_ready subscribes it */
    }
}

/* The last waiter left: linger, then unsubscribe (unless holds listen). */
static void name_idle(hl_name *n) {
    hl_timer_stop(&n->c->loop, &n->fallback);
    if (n->listeners > 0) return;
    if (n->sub == HL_SUB_PENDING || n->sub == HL_SUB_ACTIVE)
        hl_timer_start(&n->c->loop, &n->linger, n->c->cfg.linger_ms);
    else
        hl_name_maybe_free(n);
}

static void linger_fired(hl_timer *t) {
    hl_name *n = HL_CONTAINER(t, hl_name, linger);
    if (name_listens(n)) return;
    /* A subscribe still unanswered a whole linger on a ready connection
     * was refused (an ACL without the channel: the error names no
     * channel) or is about to be acked: either way the server answers an
     * unsubscribe after it, with the "unsubscribe" that ends the name.
     * Waiting for an ack that never comes kept the name forever. */
    if ((n->sub == HL_SUB_ACTIVE || n->sub == HL_SUB_PENDING) && hl_node_sub_ready(n->sub_node)) {
        n->sub = HL_SUB_LEAVING;
        subscribe(n, 0);
    } else if (n->sub == HL_SUB_PENDING) {
        hl_timer_start(&n->c->loop, &n->linger, n->c->cfg.linger_ms);
    }
}

void hl_name_listen(hl_name *n, int on) {
    if (on) {
        n->listeners++;
        ensure_subscribed(n);
    } else if (--n->listeners == 0 && n->nwaiters == 0) {
        name_idle(n);
    }
}

/* A fallback wakeup is counted only at the end of a holder's lease (a
 * release message missed, or a holder gone without one): the refresh of
 * a place in a queue, or of a writer's marker, is the way things work. */
static void fallback_fired(hl_timer *t) {
    hl_name *n = HL_CONTAINER(t, hl_name, fallback);
    if (n->fallback_lease) n->c->counts.fallbacks++;
    hl_engine_kick(n);
}

void hl_engine_name_init(hl_name *n) {
    n->fallback.cb = fallback_fired;
    n->linger.cb = linger_fired;
}

/* An unsubscribe: ours (LEAVING), or the server's own when a name's slot
 * moved to another master (sharded pub/sub; then the map is stale). Either
 * way, a name with waiters subscribes again, where the map says, and its
 * head tries at once: a release may have gone by meanwhile. After the
 * server's, the cluster is settling (a failover: the nodes learn the new
 * master over a second or so, and a release published meanwhile may
 * reach no subscriber), so for UNSETTLED_MS the head tries at least every
 * second instead of waiting out the holder's lease; a try redirected by
 * MOVED also brings the map that moves the subscription (sub_misplaced). */
#define UNSETTLED_MS 3000
#define UNSETTLED_RETRY_MS 1000
static void sub_ended(hl_name *n) {
    if (n->sub != HL_SUB_LEAVING) {
        hl_topo_moved(&n->c->topo, n->slot, NULL, 0);
        n->unsettled_until = hl_now_ms() + UNSETTLED_MS;
    }
    n->sub = HL_SUB_NONE;
    if (name_listens(n)) {
        ensure_subscribed(n);
        hl_engine_kick(n);
    } else {
        hl_timer_stop(&n->c->loop, &n->linger);
        hl_name_maybe_free(n);
    }
}

static void sub_acked(hl_name *n, int subscribed) {
    if (!subscribed) {
        sub_ended(n);
        return;
    }
    if (n->sub != HL_SUB_PENDING) return;
    n->sub = HL_SUB_ACTIVE;
    if (n->prim->heard != NULL) n->prim->heard(n, NULL, 0); /* what went by meanwhile */
    if (n->nwaiters > 0) hl_engine_kick(n); /* close the release-before-subscribe gap */
    else name_idle(n);
}

/* ---- Subscriber events, through the topology ---------------------------- */

static void grant_message(hl_name *n, const hl_grant *g);

static void on_message(void *arg, const char *ch, size_t len, const char *data, size_t dlen) {
    hl_name *n = hl_name_by_channel(arg, ch, len);
    hl_grant g;
    if (n == NULL) return;
    if (dlen > 2 && data[0] == 'v' && data[1] == ' ') { /* a revoke: for a holder, not the waiters */
        hl_holds_revoke_msg(n, data + 2, dlen - 2);
        return;
    }
    n->c->counts.wakeups++;
    if (n->prim->heard != NULL) n->prim->heard(n, data, dlen);
    if (n->nwaiters > 0) n->woke_us = hl_now_us();
    if (n->prim->grant_msg != NULL && n->prim->grant_msg(data, dlen, &g)) grant_message(n, &g);
    else hl_engine_kick(n);
}

static void on_acked(void *arg, hl_node *node, const char *ch, size_t len, int subscribed) {
    hl_name *n = hl_name_by_channel(arg, ch, len);
    if (n && n->sub != HL_SUB_NONE && n->sub_node == node) sub_acked(n, subscribed);
}

static void on_sub_ready(void *arg, hl_node *node) {
    hilock_client *c = arg;
    for (hl_name *n = hl_names_first(c); n; n = hl_names_next(c, n))
        /* Names whose try is in flight subscribe if it fails; the ack of the
         * others retries their head. */
        if (name_listens(n) && !n->trying && hl_name_sub_node(n) == node) ensure_subscribed(n);
}

static void on_sub_lost(void *arg, hl_node *node) {
    hilock_client *c = arg;
    hl_name *n = hl_names_first(c), *next;
    for (; n; n = next) {
        next = hl_names_next(c, n);
        if (n->sub_node != node) continue;
        n->sub = HL_SUB_NONE;
        n->sub_node = NULL;
        hl_timer_stop(&c->loop, &n->linger);
        hl_name_maybe_free(n);
    }
}

/* Redlock: send `to` what goes through `via`: the subscriptions, and the
 * unsubscriptions under way (a node that reconnected, or the new leader,
 * whose acks now stand for `via`). */
static void on_replay(void *arg, hl_node *via, hl_node *to) {
    hilock_client *c = arg;
    for (hl_name *n = hl_names_first(c); n; n = hl_names_next(c, n))
        if (n->sub_node == via && n->sub != HL_SUB_NONE)
            hl_node_subscribe(to, hl_name_channel(n), n->chlen, n->sub != HL_SUB_LEAVING);
}

/* A new map (sharded pub/sub) puts n's slot on another master than the
 * one its subscription went to: leave that one, so that the caller
 * subscribes again where the map says. After a failover the old master,
 * now a replica, tells its sharded subscribers "sunsubscribe", and they
 * subscribe again at once, before the map is new: to that same node,
 * which accepts (a replica serves its shard's channels) but missed what
 * the new master published until it knew it as its master; a release
 * then went unheard, and the waiter waited for its fallback timer (the
 * holder's lease). The ack of the new subscription has the head try, for
 * a release that went by meanwhile. */
static void sub_misplaced(hl_name *n) {
    if (!name_listens(n) || (n->sub != HL_SUB_ACTIVE && n->sub != HL_SUB_PENDING)) return;
    if (n->sub_node == hl_name_sub_node(n)) return;
    if (hl_node_sub_ready(n->sub_node)) subscribe(n, 0); /* its ack: no longer ours */
    n->sub = HL_SUB_NONE;
    n->sub_node = NULL;
}

static void on_resubscribe(void *arg, hl_node *node, int slot) {
    hilock_client *c = arg;
    hl_name *n = hl_names_first(c), *next;
    for (; n; n = next) {
        next = hl_names_next(c, n);
        if (slot >= 0 && n->slot != slot) continue;
        if (node != NULL && n->sub == HL_SUB_PENDING && n->sub_node == node) {
            n->sub = HL_SUB_NONE; /* refused there */
            n->sub_node = NULL;
        }
        if (node == NULL) sub_misplaced(n);
        if (n->sub != HL_SUB_NONE || n->trying) continue;
        if (name_listens(n)) ensure_subscribed(n);
        else hl_name_maybe_free(n);
    }
}

static void fail_all(hl_name *n, int err);

/* `node`'s ACL refused a subscription. Which one, Redis does not say (its
 * error names no channel, and comes in place of an ack), but the channels
 * of one client differ only after the prefix, which an ACL's &PREFIX*
 * covers or not: every name whose subscription is under way there fails,
 * its waiters with HILOCK_EAUTH, at once rather than at their fallback
 * timers (the wakeups would never come). Holders are not touched. A
 * refused UNSUBSCRIBE fails nobody: its names are forgotten. The next
 * wait of such a name subscribes again: it is refused again, or served
 * once the ACL allows it. */
static void on_refused(void *arg, hl_node *node, const char *text) {
    hilock_client *c = arg;
    hl_name *n = hl_names_first(c), *next;
    int unsub = strstr(text, "unsubscribe'") != NULL; /* 'unsubscribe', 'sunsubscribe' */
    for (; n; n = next) {
        next = hl_names_next(c, n);
        if (unsub && n->sub == HL_SUB_LEAVING && n->sub_node == node) {
            /* No -unsubscribe: the server keeps the channel until the
             * connection closes (its messages find no name); forget it. */
            n->sub = HL_SUB_NONE;
            n->sub_node = NULL;
            hl_name_maybe_free(n);
            continue;
        }
        if (unsub || n->sub != HL_SUB_PENDING || n->sub_node != node) continue;
        n->sub = HL_SUB_NONE;
        n->sub_node = NULL;
        hl_timer_stop(&c->loop, &n->fallback);
        hl_set_error(&c->loop, "%s (ACL: %sSUBSCRIBE of channel %.*s)", text,
                     c->topo.net.sharded ? "S" : "", (int)n->chlen, hl_name_channel(n));
        n->refs++; /* its waiters' ends must not free it under us */
        fail_all(n, HILOCK_EAUTH);
        hl_name_unref(n);
    }
}

const hl_sub_events hl_engine_sub_events = {on_message, on_acked, on_sub_ready, on_sub_lost,
                                            on_resubscribe, on_replay, on_refused, NULL};

/* ---- Waiters ------------------------------------------------------------- */

static void wait_free(hilock_wait *w) {
    free(w);
}

const char *hl_wait_token(const hilock_wait *w, char *out) {
    hl_token_text(w->c, w->token, out);
    return out;
}

/* A wait that ends without its own grant undoes what its tries may have
 * left in Redis (hl_prim.abandon), if it sent any. */
static void wait_abandon(hilock_wait *w) {
    char tok[HL_TOKEN_LEN + 1];
    if (w->c->loop.freeing) return;
    if (w->unknown) /* a try that may have run after all: for as long as it could hold */
        hl_release_token(w->name, hl_wait_token(w, tok), &w->terms, w->terms.lease_ms);
    w->unknown = 0;
    if (w->tried && w->name->prim->abandon != NULL) w->name->prim->abandon(w);
}

/* Give a waiter its outcome and queue its callback. */
void hl_wait_finish(hilock_wait *w, int status, hilock_hold *h) {
    hl_name *n = w->name;
    if (w->state == HL_WAIT_DONE) return;
    w->state = HL_WAIT_DONE;
    w->status = status;
    w->hold = h;
    hl_timer_stop(&w->c->loop, &w->timer);
    if (status != 0) wait_abandon(w);
    if (hl_linked(&w->link)) {
        hl_list_remove(&w->link);
        w->c->counts.waiters--;
        if (--n->nwaiters == 0) name_idle(n);
    }
    hl_defer_push(&w->c->loop, &w->defer);
}

/* Did a try answer, while `w` waited, that the lock is taken? Each answered
 * try counts in n->answers; a wait that joins others behind a lock already
 * known taken starts with that answer counted as seen. */
static int wait_seen_held(const hilock_wait *w) {
    return w->name->answers != w->answers_mark;
}

/* A wait that ran out is ETIMEDOUT only if the lock was seen taken: when no
 * try could be sent or answered, the cause is the connection, and a wrong
 * address must not look like a busy lock. */
static int wait_expired_status(hilock_wait *w) {
    const hl_name *n = w->name;
    if (n->ride_err != 0) { /* the last try failed: what it met is the cause */
        hl_set_error(&w->c->loop, "%s", n->ride_why ? n->ride_why : hilock_strerror(n->ride_err));
        return n->ride_err;
    }
    if (wait_seen_held(w)) return HILOCK_ETIMEDOUT;
    int err = hl_node_error(hl_name_node(w->name));
    if (err == HILOCK_EDEADLINE) hl_set_error(&w->c->loop, "no answer from Redis before the wait ran out");
    return err;
}

static void wait_deadline(hl_timer *t) {
    hilock_wait *w = HL_CONTAINER(t, hilock_wait, timer);
    hl_wait_finish(w, wait_expired_status(w), NULL);
}

/* Put `w` (queued) at the head of its name, or at the tail, and arm its
 * deadline. */
static void wait_enqueue(hilock_wait *w, int at_head) {
    hl_name *n = w->name;
    w->state = HL_WAIT_QUEUED;
    w->answers_mark = n->answers - (n->nwaiters > 0 && n->known_held);
    if (at_head) hl_list_push_head(&n->waiters, &w->link);
    else hl_list_push(&n->waiters, &w->link);
    n->nwaiters++;
    w->c->counts.waiters++;
    hl_timer_stop(&w->c->loop, &n->linger);
    if (hl_wait_deadline(w) != 0) hl_timer_start_at(&w->c->loop, &w->timer, hl_wait_deadline(w));
}

/* A grant went stale before its callback could run (its lease ran out, or
 * a sharer of the hold released every level of it). If the wait still has
 * time, it goes back to the head of its name with a new token and tries
 * again (returns 1); otherwise it ends with its own timeout (returns 0). A
 * stale hold is lost for anyone who shares it, and released if nobody does;
 * one being released already is its releaser's. */
static int wait_retry(hilock_wait *w, uint64_t now) {
    hilock_hold *h = w->hold;
    int releasing = h->releasing;
    int again = !w->try_once && (hl_wait_deadline(w) == 0 || now < hl_wait_deadline(w));
    w->hold = NULL;
    w->own_grant = 0; /* that grant was the old token's */
    if (again) {
        w->token = hl_token_new(w->c);
        w->placed = 0; /* the new token has no place yet */
        w->unknown = 0; /* that token had its grant */
        wait_enqueue(w, 1);
        hl_engine_kick(w->name);
        hl_name_check(w->name);
    } else {
        w->status = HILOCK_ETIMEDOUT;
    }
    if (!releasing) {
        hl_hold_mark_lost(h, HILOCK_ELOST);
        hl_hold_drop(h); /* last: it may free the name when w is done */
    }
    return again;
}

/* Count a wait's outcome, as its callback is about to get it (`now`, in
 * us, for a grant): a grant's wait, and the handoff since the release
 * message that led to it. */
static void wait_count(hilock_wait *w, uint64_t now) {
    hl_counts *k = &w->c->counts;
    hl_name *n = w->name;
    switch (w->status) {
    case 0:
        k->granted++;
        hl_histogram_add(&k->wait, now - w->started_us);
        if (n->woke_us != 0) hl_histogram_add(&k->handoff, now - n->woke_us);
        n->woke_us = 0;
        return;
    case HILOCK_ETIMEDOUT: k->timeouts++; break;
    case HILOCK_EBUSY: k->busy++; break;
    case HILOCK_ECANCELED: k->cancels++; break;
    default: k->failed++; break;
    }
    hl_count_status(k, w->status);
}

/* Run by the deferred queue (or by client_free with HILOCK_ECANCELED). */
static void wait_run(hl_defer *d, int cancel) {
    hilock_wait *w = HL_CONTAINER(d, hilock_wait, defer);
    uint64_t now_us = 0; /* read for a grant only */
    if ((cancel || w->c->closing) && w->status == 0) {
        /* Granted but never delivered before the client began to go away:
         * free abandons the hold, close is releasing it. */
        w->status = HILOCK_ECANCELED;
        w->hold = NULL;
    } else if (w->status == 0) {
        /* A grant is success only while its lease runs: a callback ahead of
         * it in this turn, or a stalled loop, may have used the time up. */
        now_us = hl_now_us();
        uint64_t now = now_us / 1000u; /* hl_now_ms() */
        hilock_hold *h = w->hold;
        if ((h->releasing || !hl_hold_live(h, now)) && wait_retry(w, now)) return;
        if (w->status == 0) h->delivered = 1;
    }
    wait_count(w, now_us);
    /* cb_done is set after the call: a client_free from inside the callback
     * must not free `w` under our feet (on_try_done frees only done waits). */
    if (!w->c->loop.forked) w->cb(w->hold, w->status, w->data);
    w->cb_done = 1;
    if (w->req == NULL) wait_free(w);
}

int hl_wait_admit(const hilock_wait *w, uint64_t now, hilock_hold **mine) {
    hilock_owner *o = w->terms.owner;
    *mine = o != NULL ? hl_owner_hold(o, w->name, now) : NULL;
    /* A semaphore hold of another permits_total does not serve: the wait
     * goes to Redis, which refuses the count (HILOCK_EPERMITS, by its
     * callback) while that hold is among the holders. 0 for the others. */
    if (*mine != NULL && (*mine)->terms.permits_total != w->terms.permits_total) *mine = NULL;
    return w->name->prim->admit != NULL ? w->name->prim->admit(w, *mine) : 0;
}

/* A head that its owner's hold does not admit any more ends with the
 * primitive's error (1), instead of waiting for that hold, which its owner
 * may keep until this wait ends. It was admitted beside a queued wait of
 * the same owner whose grant was to serve it, and that ended without one:
 * a read-write lock's write queued behind its owner's write and read (the
 * read, granted alone, is then an upgrade's), a semaphore's wait for more
 * permits than its owner's earlier wait got (a hold does not grow). */
static int head_refused(hilock_wait *w) {
    hilock_hold *mine;
    int rc = w->terms.owner != NULL ? hl_wait_admit(w, hl_now_ms(), &mine) : 0;
    if (rc == 0) return 0;
    hl_name *n = w->name;
    int more = n->nwaiters > 1; /* else n may go with w's end */
    hl_wait_finish(w, rc, NULL);
    if (more) hl_engine_kick(n);
    return 1;
}

void hl_engine_kick(hl_name *n) {
    if (n->nwaiters == 0) return;
    if (n->trying) { n->woken = 1; return; }
    hl_timer_stop(&n->c->loop, &n->fallback);
    hilock_wait *head = HL_CONTAINER(n->waiters.next, hilock_wait, link);
    if (head->joining) {
        /* Its join is still out (hl_prim.joins): that answer is as good as
         * a try, and is the name's try now. */
        head->joining = 0;
        n->trying = 1;
        n->woken = 0;
        return;
    }
    if (head_refused(head)) return;
    try_send(head);
}

/* ---- Tries and grants -------------------------------------------------------- */

/* `w` won with its own token: it gets a hold (its key set for lease_ms no
 * earlier than sent_at), and so does every waiter queued behind it that
 * the primitive lets share it (a mutex: the same owner). */
static void grant(hilock_wait *w, uint64_t fence, uint64_t sent_at, uint32_t lease_ms) {
    hl_name *n = w->name;
    char tok[HL_TOKEN_LEN + 1];
    hilock_hold *h = hl_hold_new(n, hl_wait_token(w, tok), fence, sent_at, lease_ms, w);
    if (h == NULL) {
        hl_release_token(n, tok, &w->terms, 0);
        hl_wait_finish(w, HILOCK_ENOMEM, NULL);
        return;
    }
    w->own_grant = 1;
    hl_wait_finish(w, 0, h); /* the grantee's callback first */
    hl_link *l = n->waiters.next;
    while (l != &n->waiters) {
        hilock_wait *o = HL_CONTAINER(l, hilock_wait, link);
        l = l->next;
        if (n->prim->shares(w, o)) {
            h->count++;
            hl_wait_finish(o, 0, h);
            if (n->prim->joins) wait_abandon(o); /* its own place in the queue */
        }
    }
}

static uint32_t min_lease(uint64_t ms, const hilock_wait *w) {
    return ms < w->terms.lease_ms ? (uint32_t)ms : w->terms.lease_ms;
}

/* The queued wait of n whose token is `token` (HL_TOKEN_LEN bytes), or
 * NULL. Every token of this client starts with the same 16 digits, its id
 * (hl_token_of), so another process's token is told apart at once, however
 * many wait here. */
static hilock_wait *wait_by_token(hl_name *n, const char *token) {
    uint64_t t;
    if (n->nwaiters == 0 || !hl_token_of(n->c, token, &t)) return NULL;
    for (hl_link *l = n->waiters.next; l != &n->waiters; l = l->next) {
        hilock_wait *w = HL_CONTAINER(l, hilock_wait, link);
        if (w->token == t) return w;
    }
    return NULL;
}

/* When a grant by message began, by our clock: the server's time of the
 * grant, moved onto our clock by the last try that read the server's
 * clock (sent at srv_at, it read srv_ms no earlier), so no later than the
 * grant really was (the two clocks running at the same rate). That holds
 * on either side of srv_ms: a grant made before that try ran (its message
 * read after the try's reply, which the server may write first) began
 * srv_ms - server_ms before the try ran, so no later than that much
 * before srv_at. Never before the wait began, nor after the message came
 * (`now`: a server clock that stepped forward must not stretch the
 * lease). */
static uint64_t grant_time(const hl_name *n, const hilock_wait *w, uint64_t server_ms,
                           uint64_t now) {
    uint64_t at = hl_wait_started_ms(w), mapped = 0;
    if (n->srv_at != 0 && server_ms >= n->srv_ms)
        mapped = n->srv_at + (server_ms - n->srv_ms);
    else if (n->srv_at != 0 && n->srv_ms - server_ms < n->srv_at)
        mapped = n->srv_at - (n->srv_ms - server_ms);
    if (mapped > at) at = mapped;
    return at < now ? at : now;
}

/* The head of n's waits sends a try after this instant: a join of its
 * that is out, adopted as the name's try, may have run before it. */
static void kick_fresh(hl_name *n) {
    if (n->nwaiters == 0) return;
    hilock_wait *head = HL_CONTAINER(n->waiters.next, hilock_wait, link);
    int adopts = head->joining && !n->trying;
    hl_engine_kick(n); /* a try out already: woken, another follows it */
    if (adopts) n->woken = 1;
}

/* A grant made in Redis for a window (a grant by message, found by its
 * message or by a try that names its holder): it cut this client's time
 * in the queue to that window, which the hold's claim gives back
 * (_fair.lua). A hold that sends nothing in it (no_renew, its whole lease
 * within the window) claims nothing: the head of the waits left tries
 * now (its refresh, brought forward), or their places count as a dead
 * client's once that hold's key expires, and a later waiter goes first. */
static void grant_windowed(hilock_wait *w, uint64_t fence, uint64_t at, uint64_t window_ms) {
    hl_name *n = w->name;
    int silent = w->terms.no_renew && window_ms >= w->terms.lease_ms;
    if (w->req != NULL && req_has_token(w->req, w) && n->prim->granted_out != NULL)
        n->prim->granted_out(w->req);
    grant(w, fence, at, min_lease(window_ms, w));
    if (silent) kick_fresh(n);
}

/* A grant by message served a starving head (hl_prim.bounded), whose
 * place it took: the next head, if it has starved too, takes its place now,
 * else when it starves, rather than at the timer of the head before (a
 * place's refresh, up to a second later), so that this process stays in
 * turn. */
static void place_next(hl_name *n, uint64_t now) {
    if (n->nwaiters == 0 || n->trying || n->prim->joins) return;
    hilock_wait *head = HL_CONTAINER(n->waiters.next, hilock_wait, link);
    uint64_t due = starves_in(head, now);
    if (due == 0) {
        hl_engine_kick(n);
    } else if (due != UINT64_MAX && (!n->fallback.armed || n->fallback.when > now + due)) {
        n->fallback_lease = 0;
        hl_timer_start(&n->c->loop, &n->fallback, due);
    }
}

/* A grant by message (the fair lock): the releaser's script gave the lock
 * to one of our waits, for a short claim window; the hold's watchdog
 * claims it with its first renewal. A token that is not waiting here is
 * another process's, or a wait that ended (its abandon gives it back).
 * With wait_replicas, nothing says the replicas have that grant: the
 * head tries at once instead, and its try's WAIT (which covers every
 * write the server made before it) confirms it, or not (the try renews
 * it, or names it as the holder: try_found_holder). */
static void grant_message(hl_name *n, const hl_grant *g) {
    hilock_wait *w = wait_by_token(n, g->token);
    if (w == NULL) return;
    if (n->c->cfg.wait_replicas != 0) {
        hl_engine_kick(n);
        return;
    }
    uint64_t now = hl_now_ms();
    grant_windowed(w, g->fence, grant_time(n, w, g->server_ms, now), g->ttl_ms);
    place_next(n, now);
    hl_name_check(n);
}

/* Every waiter of the name shares the fate of a try that failed for a
 * cause that stays (a refusal): the next one would meet the same. */
static void fail_all(hl_name *n, int err) {
    while (n->nwaiters > 0) {
        hilock_wait *o = HL_CONTAINER(n->waiters.next, hilock_wait, link);
        hl_wait_finish(o, err, NULL);
    }
}

/* The head's try failed. A cause that passes (a failover, a restart, a
 * server that loads, a read-only former master, a cluster down for a
 * moment: hl_err_passes), from servers that have answered before (else it
 * is more likely the wrong address, or a replica named as the master,
 * which waiting will not mend), ends only the try-once waits, which asked for
 * one attempt: the others keep their place and time, and the name tries
 * again after a backoff (25 ms doubling up to reconnect_max_ms, jittered),
 * until a try succeeds or their wait_ms runs out (then with this error,
 * not ETIMEDOUT: wait_expired_status). Any other cause ends them all. */
static void ride_or_fail(hl_name *n, int err) {
    hilock_client *c = n->c;
    if (!hl_err_passes(err, c->loop.errstr) || !c->topo.net.answered || c->closing) {
        fail_all(n, err);
        return;
    }
    n->ride_err = err;
    free(n->ride_why);
    n->ride_why = strdup(c->loop.errstr[0] ? c->loop.errstr : hilock_strerror(err));
    hl_link *l = n->waiters.next;
    while (l != &n->waiters) {
        hilock_wait *o = HL_CONTAINER(l, hilock_wait, link);
        l = l->next;
        if (o->try_once) hl_wait_finish(o, err, NULL);
    }
    if (n->nwaiters == 0) return;
    uint64_t cap = c->cfg.reconnect_max_ms ? c->cfg.reconnect_max_ms : 1;
    uint64_t d = n->ride_failures >= 16 ? cap : (uint64_t)25 << n->ride_failures;
    if (d > cap) d = cap;
    if (n->ride_failures < 255) n->ride_failures++;
    n->fallback_lease = 0;
    d = d / 2 + hl_net_random(&c->topo.net) % (d / 2 + 1);
    hl_timer_start(&c->loop, &n->fallback, d);
}

/* A try was answered: whatever failed before has passed. */
static void ride_over(hl_name *n) {
    n->ride_err = 0;
    n->ride_failures = 0;
}

/* Bounded waiting (hl_prim.bounded): ms until `w` starves and its next
 * try takes a place in the queue (0: it has, or does now), or UINT64_MAX:
 * never (a try-once, starve_ms HILOCK_STARVE_NEVER, Redlock). */
static uint64_t starves_in(const hilock_wait *w, uint64_t now) {
    const hilock_client *c = w->c;
    if (w->starving) return 0;
    if (w->name->prim->bounded == NULL || !w->name->prim->bounded(&w->terms) || w->try_once || c->cfg.starve_ms == HILOCK_STARVE_NEVER ||
        hl_topo_quorum(&c->topo))
        return UINT64_MAX;
    uint64_t due = hl_wait_started_ms(w) + c->cfg.starve_ms;
    return due > now ? due - now : 0;
}

/* Does `w` have (or take, with its next try) a place in the queue? */
static int head_has_place(const hilock_wait *w) {
    return w->name->prim->joins || w->starving;
}

/* After a try, a name that still has waiters must try again: at once when
 * a wakeup came meanwhile, the head only tries once, or the lock is free
 * (retry_ms 0); else on a release message, or when the fallback timer at
 * retry_ms fires (a lock that expires without a release still wakes us),
 * or the primitive's refresh_ms while the head has a place, or when the
 * head starves, if sooner. `refresh`: retry_ms is itself a refresh (a
 * writer's marker), not a holder's lease end (see fallback_fired). */
static void try_later_refresh(hl_name *n, uint64_t retry_ms, int refresh) {
    if (n->nwaiters == 0) return;
    hilock_wait *head = HL_CONTAINER(n->waiters.next, hilock_wait, link);
    uint64_t now = hl_now_ms(), lease_end = refresh ? UINT64_MAX : retry_ms;
    if (!n->woken) n->woke_us = 0; /* that release went to another client */
    ensure_subscribed(n);
    if (head_has_place(head) && n->prim->refresh_ms != 0 && retry_ms > n->prim->refresh_ms)
        retry_ms = n->prim->refresh_ms;
    if (!head->starving && retry_ms > starves_in(head, now)) retry_ms = starves_in(head, now);
    if (retry_ms > UNSETTLED_RETRY_MS && now < n->unsettled_until) retry_ms = UNSETTLED_RETRY_MS;
    if (n->woken || head->try_once || retry_ms == 0) {
        hl_engine_kick(n);
    } else {
        n->fallback_lease = retry_ms == lease_end;
        hl_timer_start(&n->c->loop, &n->fallback, retry_ms);
    }
}

static void try_later(hl_name *n, uint64_t retry_ms) {
    try_later_refresh(n, retry_ms, 0);
}

/* The answer to `w`'s try or join says this client had no time left in
 * the queue in Redis (it was silent too long, or the server lost its
 * keys; or it never spoke there: its first try). The places of the other
 * queued waits without a try out may be lost, or kept where a release did
 * not look (it skips dead entries only up to the first live one): their
 * last try or join was answered, so it ran before w's (one connection,
 * in order). Waits with a try out sent theirs after w's: fresh. From the
 * first such other wait in local order on, every queued wait without a
 * try out joins again, moved to the tail (w included: it may be a join of
 * a later wait), so that they end up in the order the user called them,
 * not in that of what Redis kept. A client's first try has no such wait
 * before it, and moves nothing. */
static void rejoin_all(hl_name *n, const hilock_wait *w) {
    int moving = 0;
    hl_link *l = n->waiters.next;
    while (l != &n->waiters) {
        hilock_wait *o = HL_CONTAINER(l, hilock_wait, link);
        l = l->next;
        if (o->req != NULL || o->try_once) continue;
        if (o != w) moving = 1;
        if (!moving) continue;
        o->rejoining = 1;
        try_submit(o, 1);
        o->rejoining = 0;
    }
}

/* A try said the lock is `w`'s. A wait that ended meanwhile gives it back,
 * unless the lock is its hold's (granted by message while this try was
 * out, which only renewed it). A wait granted so, whose try took the lock
 * anew, had lost or released that hold before the try ran (sent again
 * after a drop, behind the release): the lock goes back too. */
static void try_won(hilock_wait *w, const hl_try *t, uint64_t sent_at) {
    char tok[HL_TOKEN_LEN + 1];
    if (w->state == HL_WAIT_QUEUED) grant(w, t->fence, sent_at, w->terms.lease_ms);
    else if (!w->own_grant || !t->renewed)
        hl_release_token(w->name, hl_wait_token(w, tok), &w->terms, 0);
}

/* Did the WAIT that followed r miss replicas (wait_replicas)? Then only
 * the master has what r wrote, and a failover would hand the lock to
 * another: the error says so. */
static int replicas_short(hilock_client *c, const hl_req *r) {
    if (r->acked >= (int)r->wait_replicas) return 0;
    hl_set_error(&c->loop, "WAIT: %d of %u replicas confirmed the lock within %u ms", r->acked,
                 (unsigned)r->wait_replicas, c->cfg.wait_timeout_ms);
    return 1;
}

/* A try that was not granted may name a holder that is one of our waits,
 * granted by a message we missed (a reconnect), or not taken from it
 * (wait_replicas): it is theirs for the holder_ms left, from when the try
 * was sent, if the try's WAIT confirmed it (replicas_short); else it is
 * given back, and that wait ends with HILOCK_EREPLICAS, as a try's own
 * unconfirmed grant does. */
static void try_found_holder(hl_name *n, const hl_try *t, const hl_req *r) {
    hilock_wait *o = t->holder ? wait_by_token(n, t->holder) : NULL;
    if (o == NULL || t->holder_ms == 0) return;
    if (replicas_short(n->c, r)) hl_wait_finish(o, HILOCK_EREPLICAS, NULL); /* abandon gives it back */
    else grant_windowed(o, t->fence, r->submitted_at, t->holder_ms);
}

/* A try of n was answered: the waits queued to try once behind its head
 * (see hl_wait_start) are busy, unless the answer left room for more
 * (then each tries in its turn). */
static void busy_behind(hl_name *n, const hl_try *t) {
    if (t->granted && t->more) return;
    hl_link *l = n->waiters.next;
    while (l != &n->waiters) {
        hilock_wait *o = HL_CONTAINER(l, hilock_wait, link);
        l = l->next;
        if (o->try_once && !o->tried) hl_wait_finish(o, HILOCK_EBUSY, NULL); /* (none sent) */
    }
}

static void try_answered(hilock_wait *w, const hl_try *t, const hl_req *r) {
    uint64_t sent_at = r->submitted_at;
    hl_name *n = w->name;
    n->answers++;
    n->known_held = 1;
    if (t->granted) {
        int kept = w->state == HL_WAIT_QUEUED || w->own_grant;
        try_won(w, t, sent_at);
        n->woken = 0; /* that wakeup was for the lock we now hold */
        /* A mutex is taken now: the next head waits for its release. What
         * still has room (a semaphore's permits, readers beside a reader)
         * lets it try at once, and so does a lock given back (its wait
         * ended meanwhile, and the next one sent nothing while it tried). */
        try_later(n, t->more || !kept ? 0 : w->terms.lease_ms + 1);
    } else if (t->refused) {
        /* This waiter's terms can never be met; those behind it may be. */
        if (w->state == HL_WAIT_QUEUED) hl_wait_finish(w, t->refused, NULL);
        try_later(n, 0);
    } else {
        if (w->state == HL_WAIT_QUEUED && w->try_once) hl_wait_finish(w, HILOCK_EBUSY, NULL);
        /* A wait that ended without a grant while its try was out: the
         * try may have run after its abandon (sent again after NOSCRIPT,
         * behind it) and left what the abandon undoes: a place
         * (hl_prim.joins), a writer's marker (the read-write lock). */
        else if (w->state == HL_WAIT_DONE && !w->own_grant) wait_abandon(w);
        try_found_holder(n, t, r);
        try_later_refresh(n, t->retry_ms, t->refresh);
    }
    if (!t->refused) busy_behind(n, t);
    if (t->rejoin) rejoin_all(n, w);
}

/* A join's answer (hl_prim.joins: the first try of a wait that was not its
 * name's head). It speaks for that wait alone: granted (the lock was free
 * and it came first), or not, and nothing else changes; an error leaves
 * the wait in place (its head's tries add it to the queue if it is not).
 * A wait granted with its own token meanwhile (by message, which can
 * overtake this reply: it comes on the other connection) holds the lock
 * with that token: nothing of it is given back here, its hold's release
 * does it (a join not granted ran before that grant, which took its place
 * off the queue). */
static void join_answered(hilock_wait *w, const hl_try *t, uint64_t sent_at, int err,
                          const hl_req *r) {
    hl_name *n = w->name;
    char tok[HL_TOKEN_LEN + 1];
    if (err != 0) {
        if (r->ever_sent && w->state == HL_WAIT_DONE && !w->own_grant) /* its place, if it ran */
            hl_release_token(n, hl_wait_token(w, tok), &w->terms, w->terms.lease_ms);
        return;
    }
    n->answers++;
    if (t->granted && w->state == HL_WAIT_QUEUED && replicas_short(n->c, r)) {
        hl_wait_finish(w, HILOCK_EREPLICAS, NULL); /* its abandon gives the lock back */
    } else if (t->granted) {
        try_won(w, t, sent_at);
    } else if (w->state == HL_WAIT_DONE && !w->own_grant)
        wait_abandon(w); /* it may have joined after it left */
    if (t->rejoin) rejoin_all(n, w);
}

/* The answer to a try sent with a token its wait no longer has (granted by
 * message meanwhile, then stale, and queued again with a new one): a lock
 * it got with the old one goes back. */
static void stale_answered(hl_name *n, const hl_req *r, const hl_try *t, int err,
                           const hl_terms *terms) {
    char token[HL_TOKEN_LEN + 1];
    if (err == 0 && !t->granted) return;
    memcpy(token, r->argv[r->nkeys], HL_TOKEN_LEN);
    token[HL_TOKEN_LEN] = '\0';
    hl_release_token(n, token, terms, err != 0 && r->ever_sent ? terms->lease_ms : 0);
}

/* Was r sent with w's token, as it is now (every primitive's try has it
 * as its first argument after the keys)? */
static int req_has_token(const hl_req *r, const hilock_wait *w) {
    char tok[HL_TOKEN_LEN + 1];
    return r->argl[r->nkeys] == HL_TOKEN_LEN &&
           memcmp(r->argv[r->nkeys], hl_wait_token(w, tok), HL_TOKEN_LEN) == 0;
}

/* The answer to the name's try: the head's outcome, and what the name does
 * next. */
static void head_answered(hilock_wait *w, hl_req *r, hl_try *t, int err) {
    hl_name *n = w->name;
    hilock_client *c = w->c;
    char tok[HL_TOKEN_LEN + 1]; /* r's, as on_try_done checked */
    hl_wait_token(w, tok);
    /* Redlock: some nodes granted, short of a quorum. Undo it without a
     * message (nothing was free for anyone else), and try again with a new
     * token: an undo that a node runs late (re-sent after NOSCRIPT, behind
     * the next try) must not delete the next grant. */
    if (err == 0 && !t->granted && r->partial) {
        hl_release_quiet(n, tok, &w->terms);
        w->token = hl_token_new(c);
        w->unknown = 0;
    }
    if (err != 0) {
        /* If the try may have run, its outcome is unknown. A wait that goes
         * on (ride_or_fail) tries again with the same token: the scripts
         * answer a token's own lock as granted, and its place stays its
         * own. One that has ended, or ends without the lock, makes sure no
         * lock of that token stays behind (wait_abandon); unless w holds
         * the lock with that token (granted by message while the try was
         * out): that lock is its hold's, which releases it. */
        if (r->ever_sent && !w->own_grant) {
            if (w->state == HL_WAIT_DONE) hl_release_token(n, tok, &w->terms, w->terms.lease_ms);
            else w->unknown = 1;
        }
        n->known_held = 0;
        ride_or_fail(n, err); /* w first, if it still waits: it is the head */
    } else if (t->granted && replicas_short(c, r)) {
        hl_release_token(n, tok, &w->terms, 0);
        if (w->state == HL_WAIT_QUEUED) hl_wait_finish(w, HILOCK_EREPLICAS, NULL);
        try_later(n, 0);
    } else {
        try_answered(w, t, r);
    }
}

static void on_try_done(hl_req *r, redisReply *reply, int err) {
    hilock_wait *w = r->owner;
    hl_name *n = w->name;
    hilock_client *c = w->c;
    hl_try t;
    int joined = w->joining;

    memset(&t, 0, sizeof(t));
    if (!joined) n->trying = 0;
    w->joining = 0;
    w->req = NULL;
    if (c->loop.freeing) {
        n->refs--; /* names go with the client */
        if (w->cb_done) wait_free(w);
        return;
    }
    if (err == 0) err = n->prim->try_parse(c, reply, &t);
    if (err == 0) ride_over(n);
    if (err == 0 && t.server_ms != 0) {
        n->srv_at = r->submitted_at;
        n->srv_ms = t.server_ms;
    }
    int own = req_has_token(r, w);
    if (err == 0 && own) w->placed = 1;
    if (!own) {
        stale_answered(n, r, &t, err, &w->terms);
        if (!joined) try_later(n, 0);
    } else if (joined) {
        join_answered(w, &t, r->submitted_at, err, r);
    } else {
        head_answered(w, r, &t, err);
    }
    hl_name_check(n);
    if (w->state == HL_WAIT_DONE && w->cb_done) wait_free(w);
    hl_name_unref(n); /* last: the try kept n alive through its waiters' ends */
}

/* Send w's try: the name's (the head's), or w's join (hl_prim.joins). */
static void try_submit(hilock_wait *w, int join) {
    hl_name *n = w->name;
    hl_topo *t = &n->c->topo;
    /* Sentinel: while no majority of the sentinels vouches for the master
     * named (their word overdue, or never given), a hold would be dead on
     * arrival (hl_hold_expiry): rather than spin through grants nobody may
     * keep, the head's try waits as for a server that is away. */
    if (t->epoch > 0 && hl_topo_vouched_until(t, t->epoch, w->terms.lease_ms) <= hl_now_ms()) {
        if (join) return; /* the head's next try has it join */
        hl_set_error(&n->c->loop, "sentinel: no majority of the sentinels vouches for the master now");
        ride_or_fail(n, HILOCK_ECONN);
        return;
    }
    if (!w->starving && starves_in(w, hl_now_ms()) == 0) w->starving = 1;
    char tok[HL_TOKEN_LEN + 1];
    hl_req *r = n->prim->try_req(n, hl_wait_token(w, tok), w->terms.lease_ms, on_try_done, w);
    if (r == NULL) {
        if (join) hl_wait_finish(w, HILOCK_ENOMEM, NULL);
        else fail_all(n, HILOCK_ENOMEM); /* nobody behind w could try either */
        return;
    }
    if (!join) {
        n->trying = 1;
        n->woken = 0;
    }
    w->joining = join != 0;
    w->tried = 1;
    n->refs++; /* until on_try_done has finished with n */
    r->fail_fast = w->try_once;
    w->req = r;
    n->c->counts.tries++;
    hl_name_submit_leased(n, r, w->terms.lease_ms);
}

static void try_send(hilock_wait *w) {
    try_submit(w, 0);
}

/* ---- Starting and ending waits ------------------------------------------------ */

void hl_wait_start(hilock_wait *w, hilock_hold *reentrant) {
    hl_name *n = w->name;
    w->defer.run = wait_run;
    w->timer.cb = wait_deadline;
    w->state = HL_WAIT_QUEUED;
    hl_list_init(&w->link);
    if (reentrant != NULL) { /* counted here, nothing sent */
        reentrant->count++;
        hl_wait_finish(w, 0, reentrant);
        return;
    }
    wait_enqueue(w, 0);
    if (n->nwaiters == 1 && !n->trying) {
        try_send(w);
    } else if (w->try_once) {
        /* Others wait already: the lock is not free for us now, and they
         * come first; but before any try of the name was answered (the
         * server may be down: a wrong address never looks like a busy
         * lock), it waits for the answer to the one in flight
         * (busy_behind). Alone behind a try in flight: it goes when that
         * ends. */
        if (n->nwaiters > 1 && (n->known_held || !n->trying)) hl_wait_finish(w, HILOCK_EBUSY, NULL);
    } else if (n->prim->joins) {
        try_submit(w, 1); /* its place in the queue, in the order of arrival */
    } /* else it goes when it is the head and the try in flight ends */
    hl_name_check(n);
}


int hl_wait_cancel(hilock_wait *w) {
    if (w->state != HL_WAIT_QUEUED || w->c->loop.freeing) return HILOCK_EINVAL;
    hl_wait_finish(w, HILOCK_ECANCELED, NULL);
    return 0;
}

void hl_waits_forget_owner(hilock_client *c, const hilock_owner *o) {
    for (hl_name *n = hl_names_first(c); n; n = hl_names_next(c, n))
        for (hl_link *l = n->waiters.next; l != &n->waiters; l = l->next) {
            hilock_wait *w = HL_CONTAINER(l, hilock_wait, link);
            if (w->terms.owner == o) w->terms.owner = NULL;
        }
    /* A wait whose outcome is queued is in no name's list, but wait_run
     * may queue it again (wait_retry) and grant it a hold of its terms. */
    for (hl_link *l = c->loop.defers.next; l != &c->loop.defers; l = l->next) {
        hl_defer *d = HL_CONTAINER(l, hl_defer, link);
        hilock_wait *w = HL_CONTAINER(d, hilock_wait, defer);
        if (d->run == wait_run && w->terms.owner == o) w->terms.owner = NULL;
    }
}

void hl_waits_cancel_all(hilock_client *c) {
    hl_name *n = hl_names_first(c), *next;
    for (; n; n = next) {
        n->refs++; /* keep it while its waiters leave */
        while (n->nwaiters > 0)
            hl_wait_finish(HL_CONTAINER(n->waiters.next, hilock_wait, link), HILOCK_ECANCELED, NULL);
        next = hl_names_next(c, n);
        hl_name_unref(n);
    }
}

#ifdef HILOCK_DEBUG
#include <stdio.h>
/* The liveness invariant: a name with waiters has a try in flight, or a
 * fallback timer that will send one (release messages and subscription
 * acks only bring it forward). */
void hl_name_check(const hl_name *n) {
    if (n->nwaiters > 0 && !n->trying && !hl_timer_armed(&n->fallback) && !n->c->loop.freeing) {
        fprintf(stderr, "hilock: stranded waiters on \"%s\" (%zu waiting, sub %d)\n",
                n->name, n->nwaiters, n->sub);
        abort();
    }
}

void hl_names_check(hilock_client *c) {
    for (hl_name *n = hl_names_first(c); n; n = hl_names_next(c, n)) hl_name_check(n);
}
#endif
