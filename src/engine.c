/* The waiter engine: per lock name, a local FIFO of waiters, one pub/sub
 * subscription and at most one try in flight.
 *
 *  - A new waiter joins the tail; only when it is alone does it try at once.
 *  - A failed try makes sure the name is subscribed; the subscription's
 *    confirmation triggers one more try (a release may have happened before
 *    the subscription existed), and a fallback timer at the lock's PTTL covers
 *    a holder that dies without releasing.
 *  - A release message wakes only the head of the queue: one release costs
 *    each process one try, however many waiters it has (no herd).
 *  - When the last waiter leaves, the subscription lingers a moment (a busy
 *    name would otherwise churn SUBSCRIBE/UNSUBSCRIBE) and is then dropped. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* ---- Names: a chained hash table keyed by the lock key ------------------ */

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 16777619u; }
    return h;
}

static hl_name *lookup(hilock_client *c, const char *key, size_t len, uint32_t h) {
    if (c->nbuckets == 0) return NULL;
    for (hl_name *n = c->buckets[h & (c->nbuckets - 1)]; n; n = n->next_in_bucket)
        if (n->hash == h && n->keylen == len && memcmp(n->buf, key, len) == 0) return n;
    return NULL;
}

static int grow(hilock_client *c) {
    size_t nb = c->nbuckets ? c->nbuckets * 2 : 64;
    hl_name **b = calloc(nb, sizeof(*b));
    if (b == NULL) return -1;
    for (size_t i = 0; i < c->nbuckets; i++) {
        hl_name *n = c->buckets[i], *next;
        for (; n; n = next) {
            next = n->next_in_bucket;
            n->next_in_bucket = b[n->hash & (nb - 1)];
            b[n->hash & (nb - 1)] = n;
        }
    }
    free(c->buckets);
    c->buckets = b;
    c->nbuckets = nb;
    return 0;
}

static void linger_fired(hl_timer *t);
static void fallback_fired(hl_timer *t);

hl_name *hl_name_get(hilock_client *c, const char *name, size_t len) {
    size_t keylen = c->prefix_len + 2 + hl_tag_len(name, len);
    char stack[512], *key = keylen < sizeof(stack) ? stack : malloc(keylen + 1);
    if (key == NULL) return NULL;
    hl_key_write(key, c->prefix, c->prefix_len, name, len);
    uint32_t h = hash_bytes(key, keylen);
    hl_name *n = lookup(c, key, keylen, h);
    if (n == NULL && (c->nnames < c->nbuckets || grow(c) == 0)) {
        n = calloc(1, sizeof(*n) + 3 * keylen + 12 + len + 1);
        if (n != NULL) {
            char *p = n->buf;
            memcpy(p, key, keylen); memcpy(p + keylen, "\0", 1); p += keylen + 1;
            memcpy(p, key, keylen); memcpy(p + keylen, ":fence", 7); p += keylen + 7;
            memcpy(p, key, keylen); memcpy(p + keylen, ":ch", 4); p += keylen + 4;
            memcpy(p, name, len); p[len] = '\0';
            n->name = p;
            n->keylen = keylen;
            n->hash = h;
            n->c = c;
            hl_list_init(&n->waiters);
            n->fallback.cb = fallback_fired;
            n->linger.cb = linger_fired;
            n->next_in_bucket = c->buckets[h & (c->nbuckets - 1)];
            c->buckets[h & (c->nbuckets - 1)] = n;
            c->nnames++;
        }
    }
    if (key != stack) free(key);
    return n;
}

hl_name *hl_name_by_channel(hilock_client *c, const char *ch, size_t len) {
    if (len < 3 || memcmp(ch + len - 3, ":ch", 3) != 0) return NULL;
    return lookup(c, ch, len - 3, hash_bytes(ch, len - 3));
}

static void name_unlink_free(hl_name *n) {
    hilock_client *c = n->c;
    hl_name **pp = &c->buckets[n->hash & (c->nbuckets - 1)];
    while (*pp != n) pp = &(*pp)->next_in_bucket;
    *pp = n->next_in_bucket;
    c->nnames--;
    hl_timer_stop(c, &n->fallback);
    hl_timer_stop(c, &n->linger);
    free(n);
}

void hl_name_maybe_free(hl_name *n) {
    if (n->nwaiters == 0 && n->refs == 0 && !n->trying && n->sub == HL_SUB_NONE &&
        !n->c->freeing)
        name_unlink_free(n);
}

void hl_name_unref(hl_name *n) {
    n->refs--;
    hl_name_maybe_free(n);
}

void hl_names_free_all(hilock_client *c) {
    for (size_t i = 0; i < c->nbuckets; i++) {
        hl_name *n = c->buckets[i], *next;
        for (; n; n = next) {
            next = n->next_in_bucket;
            free(n);
        }
    }
    free(c->buckets);
    c->buckets = NULL;
    c->nbuckets = c->nnames = 0;
}

/* ---- Subscription state -------------------------------------------------- */

static void ensure_subscribed(hl_name *n) {
    hl_timer_stop(n->c, &n->linger);
    if (n->sub == HL_SUB_NONE && n->c->sub.state == HL_CONN_READY) {
        n->sub = HL_SUB_PENDING;
        hl_sub_send(n->c, n, 1);
    }
}

/* The last waiter left: linger, then unsubscribe. */
static void name_idle(hl_name *n) {
    hl_timer_stop(n->c, &n->fallback);
    if (n->sub == HL_SUB_PENDING || n->sub == HL_SUB_ACTIVE)
        hl_timer_start(n->c, &n->linger, n->c->cfg.linger_ms);
    else
        hl_name_maybe_free(n);
}

static void linger_fired(hl_timer *t) {
    hl_name *n = HL_CONTAINER(t, hl_name, linger);
    if (n->nwaiters > 0) return;
    if (n->sub == HL_SUB_ACTIVE && n->c->sub.state == HL_CONN_READY) {
        n->sub = HL_SUB_LEAVING;
        hl_sub_send(n->c, n, 0);
    } else if (n->sub == HL_SUB_PENDING) {
        hl_timer_start(n->c, &n->linger, n->c->cfg.linger_ms);
    }
}

void hl_engine_sub_ack(hl_name *n, int subscribed) {
    if (subscribed) {
        if (n->sub != HL_SUB_PENDING) return;
        n->sub = HL_SUB_ACTIVE;
        if (n->nwaiters > 0) hl_engine_kick(n); /* close the release-before-subscribe gap */
        else name_idle(n);
        return;
    }
    if (n->sub != HL_SUB_LEAVING) return;
    n->sub = HL_SUB_NONE;
    if (n->nwaiters > 0) {
        ensure_subscribed(n);
        hl_engine_kick(n);
    } else {
        hl_name_maybe_free(n);
    }
}

void hl_engine_sub_ready(hilock_client *c) {
    for (size_t i = 0; i < c->nbuckets; i++)
        for (hl_name *n = c->buckets[i]; n; n = n->next_in_bucket)
            /* Names whose try is in flight subscribe if it fails; the ack
             * of the others retries their head. */
            if (n->nwaiters > 0 && !n->trying) ensure_subscribed(n);
}

void hl_engine_sub_lost(hilock_client *c) {
    for (size_t i = 0; i < c->nbuckets; i++) {
        hl_name *n = c->buckets[i], *next;
        for (; n; n = next) {
            next = n->next_in_bucket;
            n->sub = HL_SUB_NONE;
            hl_timer_stop(c, &n->linger);
            hl_name_maybe_free(n);
        }
    }
}

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
    hl_timer_stop(w->c, &w->timer);
    if (hl_linked(&w->link)) {
        hl_list_remove(&w->link);
        if (--n->nwaiters == 0) name_idle(n);
    }
    hl_defer_push(w->c, &w->defer);
}

static void try_send(hilock_wait *w);
static int wait_retry(hilock_wait *w, uint64_t now);

/* Run by the deferred queue (or by client_free with HILOCK_ECANCELED). */
void hl_wait_run(hl_defer *d, int cancel) {
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
        if (!hl_hold_live(w->hold, now) && wait_retry(w, now)) return;
    }
    /* cb_done is set after the call: a client_free from inside the callback
     * must not free `w` under our feet (on_try_done frees only done waits). */
    if (!w->c->forked) w->cb(w->hold, w->status, w->data);
    w->cb_done = 1;
    if (w->req == NULL) wait_free(w);
}

void hl_engine_kick(hl_name *n) {
    if (n->nwaiters == 0) return;
    if (n->trying) { n->woken = 1; return; }
    hl_timer_stop(n->c, &n->fallback);
    try_send(HL_CONTAINER(n->waiters.next, hilock_wait, link));
}

static void fallback_fired(hl_timer *t) {
    hl_engine_kick(HL_CONTAINER(t, hl_name, fallback));
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
    int err = hl_conn_error(w->c);
    if (err == HILOCK_EDEADLINE) hl_set_error(w->c, "no answer from Redis before the wait ran out");
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
    hl_timer_stop(w->c, &n->linger);
    if (w->deadline_at != 0) hl_timer_start(w->c, &w->timer, w->deadline_at > now ? w->deadline_at - now : 0);
}

/* A grant went stale before its callback could run. If the wait still has
 * time, it goes back to the head of its name with a new token and tries
 * again (returns 1); otherwise it ends with its own timeout (returns 0). The
 * stale hold is lost for anyone who shares it, and released if nobody does. */
static int wait_retry(hilock_wait *w, uint64_t now) {
    hilock_hold *h = w->hold;
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
    hl_hold_mark_lost(h, HILOCK_ELOST);
    hl_hold_drop(h); /* last: it may free the name when w is done */
    return again;
}

/* The head won: it gets a hold, and so does every waiter queued behind it
 * with the same owner (reentrancy for requests made while it waited). */
static void grant(hilock_wait *w, uint64_t fence, uint64_t sent_at) {
    hl_name *n = w->name;
    hilock_hold *h = hl_hold_new(n, w->token, fence, sent_at, w);
    if (h == NULL) {
        hl_release_token(w->c, n, w->token, 0);
        hl_wait_finish(w, HILOCK_ENOMEM, NULL);
        return;
    }
    if (w->owner != NULL) {
        hl_link *l = n->waiters.next;
        while (l != &n->waiters) {
            hilock_wait *o = HL_CONTAINER(l, hilock_wait, link);
            l = l->next;
            if (o != w && o->owner == w->owner) {
                h->count++;
                hl_wait_finish(o, 0, h);
            }
        }
    }
    hl_wait_finish(w, 0, h);
}

/* Every waiter of the name shares the fate of a try that got no answer:
 * the next one would meet the same dead connection. */
static void fail_all(hl_name *n, int err) {
    while (n->nwaiters > 0) {
        hilock_wait *o = HL_CONTAINER(n->waiters.next, hilock_wait, link);
        hl_wait_finish(o, err, NULL);
    }
}

/* The acquire script answers {1, fence} (ours) or {0, pttl} (taken). */
static int parse_try(hilock_client *c, const redisReply *reply, long long *got, long long *val) {
    if (reply->type == REDIS_REPLY_ERROR) return hl_reply_error(c, reply);
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[0]->type == REDIS_REPLY_INTEGER &&
        reply->element[1]->type == REDIS_REPLY_INTEGER) {
        *got = reply->element[0]->integer;
        *val = reply->element[1]->integer;
        return 0;
    }
    hl_set_error(c, "unexpected reply to the acquire script");
    return HILOCK_EPROTO;
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
    else hl_timer_start(n->c, &n->fallback, retry_ms);
}

/* How long a lock said to be taken may still live: pttl -2 means it is gone
 * already, -1 a key without TTL (not ours: look again after a lease). */
static uint64_t retry_after(hilock_client *c, long long pttl) {
    return pttl >= 0 ? (uint64_t)pttl + 1 : pttl == -2 ? 0 : c->cfg.default_lease_ms;
}

static void on_try_done(hl_req *r, redisReply *reply, int err) {
    hilock_wait *w = r->owner;
    hl_name *n = w->name;
    hilock_client *c = w->c;
    long long got = 0, val = 0;

    n->trying = 0;
    w->req = NULL;
    if (c->freeing) {
        if (w->cb_done) wait_free(w);
        return;
    }
    if (err == 0) err = parse_try(c, reply, &got, &val);
    if (err != 0) {
        /* If the try may have run, its outcome is unknown: make sure no lock
         * of ours stays behind. */
        if (r->ever_sent) hl_release_token(c, n, w->token, w->lease_ms);
        n->known_held = 0;
        fail_all(n, err); /* w first, if it still waits: it is the head */
    } else {
        n->answers++;
        n->known_held = 1;
        if (got == 1 && w->state == HL_WAIT_QUEUED) {
            grant(w, (uint64_t)val, r->submitted_at);
            n->woken = 0; /* that wakeup was for the lock we now hold */
            try_later(n, w->lease_ms + 1);
        } else if (got == 1) {
            /* Cancelled or timed out meanwhile: never leak the lock, and
             * let the next waiter (who sent nothing while we tried) go. */
            hl_release_token(c, n, w->token, 0);
            try_later(n, 0);
        } else {
            if (w->state == HL_WAIT_QUEUED && w->try_once) hl_wait_finish(w, HILOCK_EBUSY, NULL);
            try_later(n, retry_after(c, val));
        }
    }
    hl_name_check(n);
    if (w->state == HL_WAIT_DONE && w->cb_done) wait_free(w);
}

static void try_send(hilock_wait *w) {
    hl_name *n = w->name;
    hl_req *r = hl_req_new(w->c, &hl_script_acquire, n, w->token, w->lease_ms, on_try_done, w);
    if (r == NULL) {
        fail_all(n, HILOCK_ENOMEM); /* nobody behind w could try either */
        return;
    }
    n->trying = 1;
    n->woken = 0;
    r->fail_fast = w->try_once;
    w->req = r;
    hl_req_submit(w->c, r);
}

/* ---- Public API -------------------------------------------------------- */

void hilock_acquire_opts_init_size(hilock_acquire_opts *o, size_t size) {
    hilock_acquire_opts d;
    if (o == NULL || size < sizeof(size_t)) return;
    memset(&d, 0, sizeof(d));
    d.size = size;
    d.wait_ms = HILOCK_WAIT_FOREVER;
    d.lease_ms = HILOCK_LEASE_DEFAULT;
    hl_struct_export(o, size, &d, sizeof(d));
}

static hilock_hold *owner_hold(hilock_owner *o, hl_name *n, uint64_t now) {
    for (hl_link *l = o->holds.next; l != &o->holds; l = l->next) {
        hilock_hold *h = HL_CONTAINER(l, hilock_hold, olink);
        if (h->name == n && !h->releasing && hl_hold_live(h, now)) return h;
    }
    return NULL;
}

int hilock_acquire(hilock_client *c, const char *name, const hilock_acquire_opts *opts,
                   hilock_acquire_cb cb, void *data, hilock_wait **wait_out) {
    hilock_acquire_opts given;
    size_t len;
    if (wait_out) *wait_out = NULL;
    if (c == NULL || name == NULL || cb == NULL) return HILOCK_EINVAL;
    if (hl_client_refuses(c)) return hl_client_refuses(c);
    len = strnlen(name, HILOCK_NAME_MAX + 1);
    if (len == 0 || len > HILOCK_NAME_MAX) return HILOCK_EINVAL;
    hilock_acquire_opts_init(&given);
    if (opts != NULL && hl_struct_import(&given, sizeof(given), opts, opts->size) != 0)
        return HILOCK_EINVAL;
    opts = &given;
    if (opts->wait_ms < HILOCK_WAIT_FOREVER) return HILOCK_EINVAL;
    if (opts->owner != NULL && opts->owner->c != c) return HILOCK_EINVAL;
    uint32_t lease = opts->lease_ms == HILOCK_LEASE_DEFAULT ? c->cfg.default_lease_ms : opts->lease_ms;
    if (lease < HILOCK_LEASE_MIN || lease > INT32_MAX) return HILOCK_EINVAL;

    hilock_wait *w = calloc(1, sizeof(*w));
    if (w == NULL || hl_timer_reserve(c, 4) != 0) { free(w); return HILOCK_ENOMEM; }
    hl_name *n = hl_name_get(c, name, len);
    if (n == NULL) { free(w); return HILOCK_ENOMEM; }
    w->name = n;
    w->c = c;
    w->cb = cb;
    w->data = data;
    w->owner = opts->owner;
    w->lost_cb = opts->lost_cb;
    w->lost_data = opts->lost_data;
    w->lease_ms = lease;
    w->no_renew = opts->no_renew ? 1 : 0;
    w->try_once = opts->wait_ms == 0;
    w->defer.run = hl_wait_run;
    w->timer.cb = wait_deadline;
    w->state = HL_WAIT_QUEUED;
    hl_list_init(&w->link);
    hl_token_new(c, w->token);
    if (wait_out) *wait_out = w;
    uint64_t now = hl_now_ms();
    w->started_at = now;
    if (opts->wait_ms > 0) w->deadline_at = now + (uint64_t)opts->wait_ms;

    hilock_hold *h = opts->owner ? owner_hold(opts->owner, n, now) : NULL;
    if (h != NULL) { /* reentrant: counted here, nothing sent */
        h->count++;
        hl_wait_finish(w, 0, h);
        return 0;
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
    return 0;
}

int hilock_wait_cancel(hilock_wait *w) {
    if (w == NULL) return HILOCK_EINVAL;
    if (w->c->forked) return HILOCK_EFORK;
    if (w->state != HL_WAIT_QUEUED || w->c->freeing) return HILOCK_EINVAL;
    hl_wait_finish(w, HILOCK_ECANCELED, NULL);
    return 0;
}

#ifdef HILOCK_DEBUG
#include <stdio.h>
/* The liveness invariant: a name with waiters has a try in flight, or a
 * fallback timer that will send one (release messages and subscription
 * acks only bring it forward). */
void hl_name_check(const hl_name *n) {
    if (n->nwaiters > 0 && !n->trying && !hl_timer_armed(&n->fallback) && !n->c->freeing) {
        fprintf(stderr, "hilock: stranded waiters on \"%s\" (%zu waiting, sub %d)\n",
                n->name, n->nwaiters, n->sub);
        abort();
    }
}

void hl_names_check(hilock_client *c) {
    for (size_t i = 0; i < c->nbuckets; i++)
        for (hl_name *n = c->buckets[i]; n; n = n->next_in_bucket) hl_name_check(n);
}
#endif
