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

/* ---- Subscription state -------------------------------------------------- */

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

/* The last waiter left: linger, then unsubscribe. */
static void name_idle(hl_name *n) {
    hl_timer_stop(&n->c->loop, &n->fallback);
    if (n->sub == HL_SUB_PENDING || n->sub == HL_SUB_ACTIVE)
        hl_timer_start(&n->c->loop, &n->linger, n->c->cfg.linger_ms);
    else
        hl_name_maybe_free(n);
}

static void linger_fired(hl_timer *t) {
    hl_name *n = HL_CONTAINER(t, hl_name, linger);
    if (n->nwaiters > 0) return;
    if (n->sub == HL_SUB_ACTIVE && hl_node_sub_ready(n->sub_node)) {
        n->sub = HL_SUB_LEAVING;
        subscribe(n, 0);
    } else if (n->sub == HL_SUB_PENDING) {
        hl_timer_start(&n->c->loop, &n->linger, n->c->cfg.linger_ms);
    }
}

static void fallback_fired(hl_timer *t) {
    hl_engine_kick(HL_CONTAINER(t, hl_name, fallback));
}

void hl_engine_name_init(hl_name *n) {
    n->fallback.cb = fallback_fired;
    n->linger.cb = linger_fired;
}

/* An unsubscribe: ours (LEAVING), or the server's own when a name's slot
 * moved to another master (sharded pub/sub; then the map is stale). Either
 * way, a name with waiters subscribes again, where the map says, and its
 * head tries at once: a release may have gone by meanwhile. */
static void sub_ended(hl_name *n) {
    if (n->sub != HL_SUB_LEAVING) hl_topo_moved(&n->c->topo, n->slot, NULL, 0);
    n->sub = HL_SUB_NONE;
    if (n->nwaiters > 0) {
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
    if (n->nwaiters > 0) hl_engine_kick(n); /* close the release-before-subscribe gap */
    else name_idle(n);
}

/* ---- Subscriber events, through the topology ---------------------------- */

static void on_message(void *arg, const char *ch, size_t len) {
    hl_name *n = hl_name_by_channel(arg, ch, len);
    if (n) hl_engine_kick(n);
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
        if (n->nwaiters > 0 && !n->trying && hl_name_sub_node(n) == node) ensure_subscribed(n);
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
        if (n->sub != HL_SUB_NONE || n->trying) continue;
        if (n->nwaiters > 0) ensure_subscribed(n);
        else hl_name_maybe_free(n);
    }
}

const hl_sub_events hl_engine_sub_events = {on_message, on_acked, on_sub_ready, on_sub_lost,
                                            on_resubscribe, on_replay, NULL};

/* ---- Waiters ------------------------------------------------------------- */

static void wait_free(hilock_wait *w) {
    free(w);
}

/* Give a waiter its outcome and queue its callback. */
void hl_wait_finish(hilock_wait *w, int status, hilock_hold *h) {
    hl_name *n = w->name;
    if (w->state == HL_WAIT_DONE) return;
    w->state = HL_WAIT_DONE;
    w->status = status;
    w->hold = h;
    hl_timer_stop(&w->c->loop, &w->timer);
    if (status != 0 && n->prim->abandon != NULL && !w->c->loop.freeing) n->prim->abandon(w);
    if (hl_linked(&w->link)) {
        hl_list_remove(&w->link);
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
static void wait_enqueue(hilock_wait *w, int at_head, uint64_t now) {
    hl_name *n = w->name;
    w->state = HL_WAIT_QUEUED;
    w->answers_mark = n->answers - (n->nwaiters > 0 && n->known_held);
    if (at_head) hl_list_push_head(&n->waiters, &w->link);
    else hl_list_push(&n->waiters, &w->link);
    n->nwaiters++;
    hl_timer_stop(&w->c->loop, &n->linger);
    if (w->deadline_at != 0)
        hl_timer_start(&w->c->loop, &w->timer, w->deadline_at > now ? w->deadline_at - now : 0);
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
    int again = !w->try_once && (w->deadline_at == 0 || now < w->deadline_at);
    w->hold = NULL;
    if (again) {
        hl_token_new(w->c, w->token);
        wait_enqueue(w, 1, now);
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

/* Run by the deferred queue (or by client_free with HILOCK_ECANCELED). */
static void wait_run(hl_defer *d, int cancel) {
    hilock_wait *w = HL_CONTAINER(d, hilock_wait, defer);
    if ((cancel || w->c->closing) && w->status == 0) {
        /* Granted but never delivered before the client began to go away:
         * free abandons the hold, close is releasing it. */
        w->status = HILOCK_ECANCELED;
        w->hold = NULL;
    } else if (w->status == 0) {
        /* A grant is success only while its lease runs: a callback ahead of
         * it in this turn, or a stalled loop, may have used the time up. */
        uint64_t now = hl_now_ms();
        hilock_hold *h = w->hold;
        if ((h->releasing || !hl_hold_live(h, now)) && wait_retry(w, now)) return;
    }
    /* cb_done is set after the call: a client_free from inside the callback
     * must not free `w` under our feet (on_try_done frees only done waits). */
    if (!w->c->loop.forked) w->cb(w->hold, w->status, w->data);
    w->cb_done = 1;
    if (w->req == NULL) wait_free(w);
}

void hl_engine_kick(hl_name *n) {
    if (n->nwaiters == 0) return;
    if (n->trying) { n->woken = 1; return; }
    hl_timer_stop(&n->c->loop, &n->fallback);
    try_send(HL_CONTAINER(n->waiters.next, hilock_wait, link));
}

/* ---- Tries and grants -------------------------------------------------------- */

/* The head won: it gets a hold, and so does every waiter queued behind it
 * that the primitive lets share it (a mutex: the same owner). */
static void grant(hilock_wait *w, uint64_t fence, uint64_t sent_at) {
    hl_name *n = w->name;
    hilock_hold *h = hl_hold_new(n, w->token, fence, sent_at, w);
    if (h == NULL) {
        hl_release_token(n, w->token, 0);
        hl_wait_finish(w, HILOCK_ENOMEM, NULL);
        return;
    }
    hl_wait_finish(w, 0, h); /* the head's callback first */
    hl_link *l = n->waiters.next;
    while (l != &n->waiters) {
        hilock_wait *o = HL_CONTAINER(l, hilock_wait, link);
        l = l->next;
        if (n->prim->shares(w, o)) {
            h->count++;
            hl_wait_finish(o, 0, h);
        }
    }
}

/* Every waiter of the name shares the fate of a try that got no answer:
 * the next one would meet the same dead connection. */
static void fail_all(hl_name *n, int err) {
    while (n->nwaiters > 0) {
        hilock_wait *o = HL_CONTAINER(n->waiters.next, hilock_wait, link);
        hl_wait_finish(o, err, NULL);
    }
}

/* After a try, a name that still has waiters must try again: at once when
 * a wakeup came meanwhile, the head only tries once, or the lock is free
 * (retry_ms 0); else on a release message, or when the fallback timer at
 * retry_ms fires (a lock that expires without a release still wakes us). */
static void try_later(hl_name *n, uint64_t retry_ms) {
    if (n->nwaiters == 0) return;
    hilock_wait *head = HL_CONTAINER(n->waiters.next, hilock_wait, link);
    ensure_subscribed(n);
    if (n->woken || head->try_once || retry_ms == 0) hl_engine_kick(n);
    else hl_timer_start(&n->c->loop, &n->fallback, retry_ms);
}

static void try_answered(hilock_wait *w, const hl_try *t, uint64_t sent_at) {
    hl_name *n = w->name;
    n->answers++;
    n->known_held = 1;
    if (t->granted && w->state == HL_WAIT_QUEUED) {
        grant(w, t->fence, sent_at);
        n->woken = 0; /* that wakeup was for the lock we now hold */
        /* A mutex is taken now: the next head waits for its release. What
         * still has room (a semaphore's permits, readers beside a reader)
         * lets it try at once. */
        try_later(n, t->more ? 0 : w->terms.lease_ms + 1);
    } else if (t->refused) {
        /* This waiter's terms can never be met; those behind it may be. */
        if (w->state == HL_WAIT_QUEUED) hl_wait_finish(w, t->refused, NULL);
        try_later(n, 0);
    } else if (t->granted) {
        /* Cancelled or timed out meanwhile: never leak the lock, and let
         * the next waiter (who sent nothing while we tried) go. */
        hl_release_token(n, w->token, 0);
        try_later(n, 0);
    } else {
        if (w->state == HL_WAIT_QUEUED && w->try_once) hl_wait_finish(w, HILOCK_EBUSY, NULL);
        try_later(n, t->retry_ms);
    }
}

static void on_try_done(hl_req *r, redisReply *reply, int err) {
    hilock_wait *w = r->owner;
    hl_name *n = w->name;
    hilock_client *c = w->c;
    hl_try t = {0, 0, 0, 0, 0};

    n->trying = 0;
    w->req = NULL;
    if (c->loop.freeing) {
        n->refs--; /* names go with the client */
        if (w->cb_done) wait_free(w);
        return;
    }
    if (err == 0) err = n->prim->try_parse(c, reply, &t);
    /* Redlock: some nodes granted, short of a quorum. Undo it without a
     * message (nothing was free for anyone else), and try again with a new
     * token: an undo that a node runs late (re-sent after NOSCRIPT, behind
     * the next try) must not delete the next grant. */
    if (err == 0 && !t.granted && r->partial) {
        hl_release_quiet(n, w->token);
        hl_token_new(c, w->token);
    }
    if (err != 0) {
        /* If the try may have run, its outcome is unknown: make sure no lock
         * of ours stays behind. */
        if (r->ever_sent) hl_release_token(n, w->token, w->terms.lease_ms);
        n->known_held = 0;
        fail_all(n, err); /* w first, if it still waits: it is the head */
    } else if (t.granted && r->acked < (int)r->wait_replicas) {
        /* Only the master has it: a failover now would hand it to another. */
        hl_set_error(&c->loop, "WAIT: %d of %u replicas confirmed the lock within %u ms", r->acked,
                     (unsigned)r->wait_replicas, c->cfg.wait_timeout_ms);
        hl_release_token(n, w->token, 0);
        if (w->state == HL_WAIT_QUEUED) hl_wait_finish(w, HILOCK_EREPLICAS, NULL);
        try_later(n, 0);
    } else {
        try_answered(w, &t, r->submitted_at);
    }
    hl_name_check(n);
    if (w->state == HL_WAIT_DONE && w->cb_done) wait_free(w);
    hl_name_unref(n); /* last: the try kept n alive through its waiters' ends */
}

static void try_send(hilock_wait *w) {
    hl_name *n = w->name;
    hl_req *r = n->prim->try_req(n, w->token, w->terms.lease_ms, on_try_done, w);
    if (r == NULL) {
        fail_all(n, HILOCK_ENOMEM); /* nobody behind w could try either */
        return;
    }
    n->trying = 1;
    n->woken = 0;
    n->refs++; /* until on_try_done has finished with n */
    r->fail_fast = w->try_once;
    w->req = r;
    hl_name_submit_leased(n, r, w->terms.lease_ms);
}

/* ---- Starting and ending waits ------------------------------------------------ */

void hl_wait_start(hilock_wait *w, hilock_hold *reentrant, uint64_t now) {
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
    wait_enqueue(w, 0, now);
    if (n->nwaiters == 1) {
        if (!n->trying) try_send(w); /* else it goes when the try in flight ends */
    } else if (w->try_once) {
        /* Others wait already: the lock is not free for us now, and they
         * come first. */
        hl_wait_finish(w, HILOCK_EBUSY, NULL);
    }
    hl_name_check(n);
}

int hl_wait_cancel(hilock_wait *w) {
    if (w->state != HL_WAIT_QUEUED || w->c->loop.freeing) return HILOCK_EINVAL;
    hl_wait_finish(w, HILOCK_ECANCELED, NULL);
    return 0;
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
