/* Holds: the watchdog that renews a lease, loss detection, release, and
 * extension by hand. The requests come from the hold's primitive.
 *
 * A hold counts as ours until `confirmed + lease - drift`, where `confirmed`
 * is when the last successful acquire or renew was *sent* (the key's TTL
 * started no earlier) and drift the allowance for a server clock that runs
 * fast (hl_drift_ms, hilock_config.clock_rate_ppm). Past that instant
 * another client may hold the lock, so the hold is reported lost then at
 * the latest, whatever the connection is doing. */
#include <stdlib.h>
#include <string.h>
#include "core/core.h"

/* A hold's name (a reference) and token, kept by a renewal or extension
 * whose answer may come after the hold is released or gone (see
 * renewal_outlived). */
typedef struct hl_hold_key {
    hl_name *name;
    char token[HL_TOKEN_LEN + 1];
} hl_hold_key;

/* A hilock_hold_extend() in flight (see "Extending by hand" below). */
typedef struct hl_extendop {
    hl_defer defer;
    hl_link link;        /* in hold->extends while its request is out */
    hilock_client *c;
    hilock_hold *hold;   /* NULL once the hold is gone */
    hl_hold_key key;     /* until the answer */
    hilock_release_cb cb;
    void *data;
    uint32_t lease_ms;
    int status;
} hl_extendop;

/* ---- Fire-and-forget release (cancel races, unknown outcomes, close) --- */

static void on_token_released(hl_req *r, redisReply *reply, int err);

/* A fire-and-forget release of n's, which keeps n until its answer. */
static void token_release_submit(hl_name *n, hl_req *r, uint64_t within_ms) {
    r->owner = n;
    n->refs++;
    if (within_ms > 0) hl_name_submit_within(n, r, within_ms);
    else hl_name_submit(n, r);
}

/* The request that a release's answer asks for next, or NULL: after
 * TRYAGAIN (its slot is half moved, and some of the keys it names are
 * missing beside the lock), the primitive's release on the lock's key
 * alone, which follows ASK; after 2 (the lock is still ours and must be
 * handed over), the primitive's handover, which may meet TRYAGAIN in its
 * turn. Both hilock_release() and the fire-and-forget releases follow it. */
static hl_req *release_follow_up(hl_name *n, const hl_req *r, const redisReply *reply, hl_req_done done,
                                 void *owner) {
    char token[HL_TOKEN_LEN + 1];
    int narrower = r->tryagain_ends && reply->type == REDIS_REPLY_ERROR &&
                   strncmp(reply->str, "TRYAGAIN", 8) == 0;
    int handover = n->prim->handover_req != NULL && reply->type == REDIS_REPLY_INTEGER && reply->integer == 2;
    if (!narrower && !handover) return NULL;
    memcpy(token, r->argv[r->nkeys], HL_TOKEN_LEN); /* the token: first after the keys */
    token[HL_TOKEN_LEN] = '\0';
    if (narrower) return n->prim->release_lock_req(n, token, done, owner);
    hl_req *h = n->prim->handover_req(n, token, done, owner);
    if (h != NULL) h->tryagain_ends = n->prim->release_lock_req != NULL;
    return h;
}

static void on_token_released(hl_req *r, redisReply *reply, int err) {
    hl_net *net = r->net;
    hl_name *n = r->owner;
    hl_req *next = NULL;
    if (net->loop->freeing) {
        n->refs--; /* names go with the client */
        return;
    }
    if (err == 0 && (next = release_follow_up(n, r, reply, on_token_released, NULL)) != NULL) {
        token_release_submit(n, next, 0);
    } else if (err == 0 && r->rounds == 1 && reply->type == REDIS_REPLY_INTEGER && reply->integer == 0) {
        /* After an unknown outcome, 0 is ambiguous: the unanswered try may
         * still sit unread in a dead connection's socket on the server.
         * Once this reply is here, the server has read what older
         * connections had sent before, so one more release settles it. */
        uint64_t now = hl_now_ms();
        hl_req *again = hl_req_copy(r, on_token_released, NULL);
        if (again != NULL) {
            again->rounds = 2;
            token_release_submit(n, again, r->deadline.when > now ? r->deadline.when - now
                                                                 : net->request_timeout_ms);
        }
    }
    hl_name_unref(n);
}

/* Release a lock that `token` may hold, with nobody to tell. unknown_lease_ms
 * > 0 means we do not know whether the try ran: keep at it through
 * reconnects for as long as the lock could live, in two rounds. */
void hl_release_token(hl_name *n, const char *token, const hl_terms *terms, uint32_t unknown_lease_ms) {
    hl_req *r = n->prim->release_req(n, token, terms, on_token_released, NULL);
    uint32_t timeout = n->c->topo.net.request_timeout_ms;
    if (r == NULL) return;
    r->tryagain_ends = n->prim->release_lock_req != NULL;
    if (unknown_lease_ms > 0) r->rounds = 1;
    token_release_submit(n, r, unknown_lease_ms == 0 ? 0 : unknown_lease_ms > timeout ? unknown_lease_ms : timeout);
}

void hl_handover_token(hl_name *n, const char *token) {
    hl_req *r = n->prim->handover_req(n, token, on_token_released, NULL);
    if (r == NULL) return;
    r->tryagain_ends = n->prim->release_lock_req != NULL;
    token_release_submit(n, r, 0);
}

void hl_release_quiet(hl_name *n, const char *token, const hl_terms *terms) {
    hl_req *r = n->prim->release_req(n, token, terms, on_token_released, NULL);
    if (r == NULL) return;
    r->publishes = 0; /* the script publishes only when given the command */
    token_release_submit(n, r, 0);
}

void hl_fence_raise(hl_name *n, uint64_t fence) {
    if (!hl_topo_quorum(&n->c->topo) || n->prim->fence_req == NULL) return;
    hl_req *r = n->prim->fence_req(n, fence, hl_req_ignore, NULL); /* a node that missed it has the clock */
    if (r != NULL) hl_name_submit(n, r);
}

/* ---- Loss and the watchdog --------------------------------------------- */

/* A hold that no callback has had yet (a grant gone stale before its
 * callback, which tries again: engine.c's wait_retry) is lost without a
 * word: nobody has it to lose, and holds_lost counts what users saw. */
void hl_hold_mark_lost(hilock_hold *h, int why) {
    if (h->lost) return;
    h->lost = 1;
    h->lost_why = why;
    hl_timer_stop(&h->c->loop, &h->watchdog);
    if (!h->delivered) return;
    h->c->counts.holds_lost++;
    if (h->terms.lost_cb != NULL && !h->releasing) hl_defer_push(&h->c->loop, &h->lost_defer);
}

static void lost_run(hl_defer *d, int cancel) {
    hilock_hold *h = HL_CONTAINER(d, hilock_hold, lost_defer);
    if (cancel || h->releasing || h->c->loop.forked) return;
    hl_count_status(&h->c->counts, h->lost_why);
    h->terms.lost_cb(h, h->lost_why, h->terms.lost_data);
}

/* The next renewal a third of the lease on, or, with no_renew, none: the
 * key expires at the end of the lease. But a hold whose key was set for
 * less than its lease (a grant by message: the fair lock's claim window)
 * is claimed even then, once, to the lease it asked for. */
static void watchdog_arm(hilock_hold *h) {
    uint64_t now = hl_now_ms(), expiry = hl_hold_expiry(h);
    int claim = hl_hold_unclaimed(h);
    uint32_t lease = claim ? h->confirmed_lease : h->terms.lease_ms;
    uint64_t next = h->terms.no_renew && !claim ? expiry : now + lease / 3 - hl_renew_window(h);
    if (next > expiry) next = expiry;
    hl_timer_start(&h->c->loop, &h->watchdog, next > now ? next - now : 0);
}

/* Redis confirmed a renewal (or extension) sent at `sent` with `lease`.
 * Requests on one connection run in the order they were sent, so the one
 * sent last decides the key's TTL: keep its send time with its own lease. */
static void hold_confirmed(hilock_hold *h, uint64_t sent, uint32_t lease) {
    if (sent < h->confirmed) return;
    h->confirmed = sent;
    h->confirmed_lease = lease;
    h->epoch = h->c->topo.epoch; /* the master that answered is the one of now */
}

/* The lease ran out by our clock: why we could not renew in time. */
static void hold_expired(hilock_hold *h) {
    hl_node *node = hl_name_node(h->name);
    int why = h->terms.no_renew || hl_node_cmd_ready(node) ? HILOCK_ELOST
              : (node->cmd.last_err ? node->cmd.last_err : HILOCK_ECONN);
    if (h->renew_refused && !h->terms.no_renew) why = h->renew_refused; /* the ACL's doing */
    hl_hold_mark_lost(h, why);
}

/* A renewal confirmed when less than a third of the lease it extends was
 * left: the watchdog renews a third of the way in, so the loop stalled or
 * Redis was slow, and a little more would have lost the lock. */
static void renewal_check(hilock_hold *h) {
    hilock_client *c = h->c;
    uint64_t now = hl_now_ms(), left = hl_hold_expiry(h) - now; /* now < expiry */
    char name[128];
    if (left * 3 >= h->confirmed_lease) return;
    c->counts.renewals_late++;
    if (hl_log_due(&c->late_warned_at, now))
        hl_log(&c->loop, HILOCK_LOG_WARNING,
               "lock \"%s\": its lease was renewed with %llu of %u ms left (the event loop "
               "stalled or Redis is slow; a little later and it would have been lost)",
               hl_log_quote(name, sizeof(name), h->name->name), (unsigned long long)left,
               (unsigned)h->confirmed_lease);
}

/* A renewal answered after its hold's release began. Over a quorum the
 * renewal carries the fence and puts the key back where it is missing:
 * one re-sent as EVAL after NOSCRIPT runs behind the release, and would
 * leave the released lock on every master for a lease. Release again. */
static void renewal_outlived(hl_name *n, const char *token) {
    if (hl_topo_quorum(&n->c->topo)) hl_release_token(n, token, NULL, 0); /* (no modes there) */
}

static void hold_key_keep(hl_hold_key *k, const hilock_hold *h) {
    k->name = h->name;
    h->name->refs++;
    memcpy(k->token, h->token, sizeof(k->token));
}

/* The answer came: release again if the renewal `outlived` its hold's
 * release, and let the name go. */
static void hold_key_done(hl_hold_key *k, int outlived) {
    if (outlived) renewal_outlived(k->name, k->token);
    hl_name_unref(k->name);
}

/* A renewal, from the watchdog's turn (waiting in a batch, renew.c) to
 * its answer. Its request's done and owner may be wrapped by the topology
 * (Redlock's fan-out keeps its own until the answer), so the hold's end is
 * told here, never by rewriting the request. */
struct hl_renewal {
    hilock_hold *hold;             /* NULL once the hold is gone */
    hl_hold_key key;               /* then, over a quorum (else key.name NULL) */
};

hilock_hold *hl_renewal_hold(const hl_renewal *rn) { return rn->hold; }

/* The hold goes while its renewal is out: its answer must not find it. */
static void renewal_orphan(hilock_hold *h) {
    hl_renewal *rn = h->renew;
    rn->hold = NULL;
    if (hl_topo_quorum(&h->c->topo)) hold_key_keep(&rn->key, h);
}

/* The answer to a renewal whose hold is gone. */
static void renewal_orphaned(hl_req *r, hl_renewal *rn) {
    if (rn->key.name != NULL) hold_key_done(&rn->key, !r->net->loop->freeing);
    free(rn);
}

void hl_renewal_drop(hl_renewal *rn) {
    if (rn->hold != NULL) rn->hold->renew = NULL;
    else if (rn->key.name != NULL) hold_key_done(&rn->key, 0);
    free(rn);
}

void hl_renewal_answer(hl_renewal *rn, hl_req *r, const redisReply *reply, int err) {
    hilock_hold *h = rn->hold;
    if (h == NULL) {
        renewal_orphaned(r, rn);
        return;
    }
    free(rn);
    h->renew = NULL;
    if (h->c->loop.freeing) return;
    if (h->releasing) {
        renewal_outlived(h->name, h->token);
        return;
    }
    if (h->lost) return;
    /* Past the lease already, hilock_hold_lost() may have said 1 to a
     * callback: lost stays lost, even if this renewal made it in time. */
    if (hl_now_ms() >= hl_hold_expiry(h)) {
        hold_expired(h);
        return;
    }
    if (err == 0 && reply->type == REDIS_REPLY_INTEGER) {
        int renewed = reply->integer == 1 || reply->integer == 2;
        if (reply->integer == 2) hl_hold_revoke_asked(h); /* a revoke (mutex_revoke.lua) */
        if (renewed && r->acked < (int)r->wait_replicas) {
            /* Only the master has the new lease: not renewed yet. */
            hl_set_error(&h->c->loop, "WAIT: %d of %u replicas confirmed the renewal", r->acked,
                         (unsigned)r->wait_replicas);
        } else if (renewed) {
            h->renew_refused = 0;
            renewal_check(h);
            hold_confirmed(h, r->submitted_at, h->renew_lease);
        } else {
            hl_hold_mark_lost(h, HILOCK_ELOST); /* expired or taken over */
            return;
        }
    } else if (err == 0 && reply->type == REDIS_REPLY_ERROR) {
        /* Keep trying until the lease runs out (an ACL may be fixed meanwhile). */
        h->renew_refused = hl_reply_error(&h->c->loop, reply) == HILOCK_EAUTH ? HILOCK_EAUTH : 0;
    }
    watchdog_arm(h);
}

static void on_renewed(hl_req *r, redisReply *reply, int err) {
    hl_renewal_answer(r->owner, r, reply, err);
}

/* The lease a renewal sent now asks for: that of the last extend still out,
 * which Redis runs before it and whose caller is promised that lease from
 * then on, else the hold's own. Read when the renewal is sent, not when it
 * joins a batch: an extend may come in between. */
uint32_t hl_hold_renew_lease(const hilock_hold *h) {
    if (hl_list_empty(&h->extends)) return h->terms.lease_ms;
    return HL_CONTAINER(h->extends.prev, hl_extendop, link)->lease_ms;
}

void hl_renewal_send(hl_renewal *rn) {
    hilock_hold *h = rn->hold;
    hl_name *n = h->name;
    h->renew_lease = hl_hold_renew_lease(h);
    hl_fence_raise(n, h->fence);
    hl_req *r = n->prim->renew_req(n, h, h->renew_lease, on_renewed, rn);
    if (r == NULL) hl_renewal_drop(rn); /* tried again at the next turn of the watchdog */
    else hl_name_submit_leased(n, r, h->renew_lease);
}

/* Batched: a mutex hold (a primitive with renew_many_req) renewed to its
 * lease (not a claim, which goes at once), not over a quorum (each master
 * answers for itself there). Up to HL_RENEW_WINDOW_MS early (a twentieth
 * of a shorter lease): where renewals are many, a batch fills in far less
 * (100 of 10,000 a second: 10 ms), and where they are few, they cost
 * little; each renewal that goes early makes the hold renew a little more
 * often (1 % at most for a lease of 30 s). */
uint32_t hl_renew_window(const hilock_hold *h) {
    const hilock_client *c = h->c;
    if (c->cfg.renew_batch <= 1 || h->name->prim->renew_many_req == NULL ||
        hl_topo_quorum(&c->topo) || hl_hold_unclaimed(h) || h->terms.no_renew)
        return 0;
    return h->terms.lease_ms / 20 < HL_RENEW_WINDOW_MS ? h->terms.lease_ms / 20 : HL_RENEW_WINDOW_MS;
}

static void watchdog_fired(hl_timer *t) {
    hilock_hold *h = HL_CONTAINER(t, hilock_hold, watchdog);
    if (hl_now_ms() >= hl_hold_expiry(h)) {
        hold_expired(h);
        return;
    }
    if (h->terms.no_renew && !hl_hold_unclaimed(h)) {
        watchdog_arm(h); /* its expiry moved (Sentinel's word): wait for it */
        return;
    }
    if (h->renew == NULL) {
        hl_renewal *rn = calloc(1, sizeof(*rn));
        uint32_t window = hl_renew_window(h);
        uint64_t now = hl_now_ms(), late = now > t->when ? now - t->when : 0; /* a stall spent it */
        if (rn != NULL) { /* else tried again at the next turn of the watchdog */
            rn->hold = h;
            h->renew = rn; /* before the submit, which may answer at once */
            h->c->counts.renewals++;
            if (window == 0 || hl_renew_join(rn, late < window ? window - (uint32_t)late : 0) != 0)
                hl_renewal_send(rn);
        }
    }
    watchdog_arm(h);
}

static void lost_defer_init(hilock_hold *h) {
    h->lost_defer.run = lost_run;
    hl_list_init(&h->lost_defer.link);
}

hilock_hold *hl_hold_new(hl_name *n, const char *token, uint64_t fence, uint64_t sent_at,
                         uint32_t lease_ms, const hilock_wait *w) {
    hilock_hold *h = calloc(1, sizeof(*h));
    if (h == NULL) return NULL;
    h->c = n->c;
    h->name = n;
    n->refs++;
    memcpy(h->token, token, HL_TOKEN_LEN + 1);
    h->fence = fence;
    h->confirmed = sent_at;
    h->confirmed_lease = lease_ms;
    h->epoch = n->c->topo.epoch;
    hl_list_init(&h->extends);
    hl_list_init(&h->evals);
    h->granted_us = hl_now_us();
    h->waited_ms = h->granted_us / 1000u - hl_wait_started_ms(w);
    h->count = 1;
    h->terms = w->terms;
    h->watchdog.cb = watchdog_fired;
    lost_defer_init(h);
    hl_list_init(&h->revoke_defer.link);
    hl_list_push(&n->c->holds, &h->link);
    n->c->counts.holds++;
    if (h->terms.owner) hl_list_push(&h->terms.owner->holds, &h->olink);
    else hl_list_init(&h->olink);
    watchdog_arm(h);
    return h;
}

void hl_hold_drop(hilock_hold *h) {
    if (--h->count > 0) return;
    hl_hold_begin_release(h);
    hl_release_token(h->name, h->token, &h->terms, 0);
    hl_hold_free(h);
}

void hl_hold_free(hilock_hold *h) {
    hl_timer_stop(&h->c->loop, &h->watchdog);
    hl_defer_cancel(&h->lost_defer);
    if (h->renew) renewal_orphan(h);
    while (!hl_list_empty(&h->extends)) { /* nor theirs */
        hl_extendop *op = HL_CONTAINER(h->extends.next, hl_extendop, link);
        hl_list_remove(&op->link);
        op->hold = NULL;
    }
    hl_hold_forget_evals(h);
    hl_hold_revoke_end(h);
    hl_list_remove(&h->link);
    h->c->counts.holds--;
    if (hl_linked(&h->olink)) hl_list_remove(&h->olink);
    hl_name *n = h->name;
    free(h);
    hl_name_unref(n);
}

/* ---- Release ------------------------------------------------------------- */

typedef struct hl_relop {
    hl_defer defer;
    hilock_client *c;
    hilock_hold *hold;   /* freed after the callback when last is set; may be
                            gone before it runs when last is not */
    hilock_release_cb cb;
    void *data;
    int status;
    int last;
} hl_relop;

static void relop_run(hl_defer *d, int cancel) {
    hl_relop *op = HL_CONTAINER(d, hl_relop, defer);
    int status = cancel ? HILOCK_ECANCELED : op->status;
    /* A multi-lock's hold (its group's) is freed by the group, once every
     * part has answered: the caller's hold lives until its callback. */
    hilock_hold *gone = op->last && !cancel && op->hold->group == NULL ? op->hold : NULL;
    hl_count_status(&op->c->counts, status);
    if (op->cb && !op->c->loop.forked) op->cb(status, op->data);
    if (gone != NULL) hl_hold_free(gone);
    free(op);
}

static void on_released(hl_req *r, redisReply *reply, int err);

/* For a second after a release of a name was answered 2, this client's
 * releases of it send the handover at once (release_first): while waits
 * starve, the lock is handed over at every release, and a round trip per
 * handoff would slow them all. */
#define HANDOVER_MEMORY_MS 1000

/* A hold's release whose answer asks for a follow-up (release_follow_up):
 * send it. Returns 1 if sent. */
static int release_next(hl_req *r, const redisReply *reply) {
    hl_relop *op = r->owner;
    hl_name *n = op->hold->name;
    hl_req *next = release_follow_up(n, r, reply, on_released, op);
    if (next == NULL) return 0;
    if (reply->type == REDIS_REPLY_INTEGER) n->handover_until = hl_now_ms() + HANDOVER_MEMORY_MS;
    hl_name_submit(n, next);
    return 1;
}

static void on_released(hl_req *r, redisReply *reply, int err) {
    hl_relop *op = r->owner;
    hl_loop *l = r->net->loop;
    if (err == 0 && !l->freeing && release_next(r, reply)) return;
    if (err == 0) {
        /* 0 after a lost reply: most likely our own first send deleted it. */
        if (reply->type == REDIS_REPLY_INTEGER)
            err = reply->integer == 1 || r->lost_reply ? 0 : HILOCK_ELOST;
        else if (reply->type == REDIS_REPLY_ERROR)
            err = hl_reply_error(l, reply);
        else
            err = HILOCK_EPROTO;
    }
    /* A hold already found lost, or past its lease when the release was
     * sent, reports it, even if the key happened to be still in our hands. */
    if (err == 0 && !hl_hold_live(op->hold, r->submitted_at)) err = HILOCK_ELOST;
    /* No answer (a dead or stalled node, a failover under way): tell the
     * user, and keep releasing in the background for as long as the lock
     * could live, so that waiters do not wait out the lease. */
    if ((err == HILOCK_ECONN || err == HILOCK_EDEADLINE) && !l->freeing) {
        hilock_hold *h = op->hold;
        uint64_t now = hl_now_ms(), until = h->confirmed + h->confirmed_lease; /* the key's own life */
        if (until > now) hl_release_token(h->name, h->token, &h->terms, (uint32_t)(until - now));
    }
    op->status = err;
    if (l->freeing) { relop_run(&op->defer, 1); return; }
    hl_defer_push(l, &op->defer);
}

/* From here on the hold is neither renewed, reported lost, nor reentrant. */
void hl_hold_begin_release(hilock_hold *h) {
    hl_fence_raise(h->name, h->fence); /* ahead of the release, on each connection */
    h->releasing = 1;
    hl_timer_stop(&h->c->loop, &h->watchdog);
    hl_defer_cancel(&h->lost_defer);
    hl_hold_revoke_end(h);
    if (hl_linked(&h->olink)) hl_list_remove(&h->olink);
}

/* The user's final release, or close's: counted (a release, and how
 * long the hold lasted), then begun. */
static void final_release_begin(hilock_hold *h) {
    h->c->counts.releases++;
    hl_histogram_add(&h->c->counts.hold, hl_now_us() - h->granted_us);
    hl_hold_begin_release(h);
}

/* The release of hold h: the handover itself, if a release of its name
 * was answered 2 within HANDOVER_MEMORY_MS. */
static hl_req *release_first(hilock_hold *h, hl_relop *op) {
    hl_name *n = h->name;
    if (n->prim->handover_req != NULL && (n->prim->hands_over == NULL || n->prim->hands_over(&h->terms)) &&
        n->handover_until > hl_now_ms())
        return n->prim->handover_req(n, h->token, on_released, op);
    return n->prim->release_req(n, h->token, &h->terms, on_released, op);
}

int hilock_release(hilock_hold *h, hilock_release_cb cb, void *data) {
    if (h != NULL && h->group != NULL) return h->group->release(h->group, cb, data);
    return hl_hold_release(h, cb, data);
}

int hl_hold_release(hilock_hold *h, hilock_release_cb cb, void *data) {
    if (h == NULL) return HILOCK_EINVAL;
    if (h->c->loop.forked) return HILOCK_EFORK;
    if (h->releasing) return HILOCK_EINVAL;
    if (h->c->loop.freeing) return HILOCK_ECLOSED;
    hl_relop *op = calloc(1, sizeof(*op));
    if (op == NULL) return HILOCK_ENOMEM;
    op->defer.run = relop_run;
    op->c = h->c;
    op->hold = h;
    op->cb = cb;
    op->data = data;
    if (h->count > 1) { /* one reentrant level: nothing to send */
        h->count--;
        hl_defer_push(&h->c->loop, &op->defer);
        return 0;
    }
    hl_req *r = release_first(h, op);
    if (r == NULL) { free(op); return HILOCK_ENOMEM; }
    r->tryagain_ends = h->name->prim->release_lock_req != NULL;
    op->last = 1;
    h->count = 0;
    final_release_begin(h);
    hl_name_submit(h->name, r);
    return 0;
}

uint64_t hilock_hold_fence(const hilock_hold *h) { return h ? h->fence : 0; }
uint64_t hilock_hold_waited_ms(const hilock_hold *h) { return h ? h->waited_ms : 0; }
const char *hilock_hold_name(const hilock_hold *h) { return h ? h->name->name : NULL; }
/* Computed, not only flagged: a hold is lost from the instant its lease may
 * have run out, even before the watchdog's timer has had its turn. */
int hilock_hold_lost(const hilock_hold *h) {
    if (h != NULL && h->group != NULL) return h->group->lost(h->group);
    return h ? !hl_hold_live(h, hl_now_ms()) : 0;
}
unsigned hilock_hold_count(const hilock_hold *h) { return h ? h->count : 0; }

/* ---- Extending by hand ------------------------------------------------- */


static void extendop_run(hl_defer *d, int cancel) {
    hl_extendop *op = HL_CONTAINER(d, hl_extendop, defer);
    int status = cancel ? HILOCK_ECANCELED : op->status;
    hl_count_status(&op->c->counts, status);
    if (op->cb && !op->c->loop.forked) op->cb(status, op->data);
    free(op);
}

/* The reply may come after the hold's release did (a NOSCRIPT -> EVAL
 * re-send overtakes nothing, but lands behind it): then only tell the user. */
static int extend_apply(hl_extendop *op, hl_req *r, const redisReply *reply, int err) {
    hilock_hold *h = op->hold;
    if (err == 0 && reply->type == REDIS_REPLY_ERROR) err = hl_reply_error(r->net->loop, reply);
    else if (err == 0 && reply->type != REDIS_REPLY_INTEGER) err = HILOCK_EPROTO;
    int renewed = err == 0 && (reply->integer == 1 || reply->integer == 2);
    if (h == NULL) return err == 0 && !renewed ? HILOCK_ELOST : err;
    if (err == 0 && reply->integer == 2) hl_hold_revoke_asked(h);
    if (err == 0 && (!renewed || !hl_hold_live(h, hl_now_ms()))) err = HILOCK_ELOST;
    if (err == 0 && r->acked < (int)r->wait_replicas) err = HILOCK_EREPLICAS; /* the old lease stands */
    if (err == HILOCK_ELOST) hl_hold_mark_lost(h, HILOCK_ELOST);
    if (err == 0 && !h->releasing) {
        h->terms.lease_ms = op->lease_ms; /* renewals use it from now on */
        hold_confirmed(h, r->submitted_at, op->lease_ms);
        watchdog_arm(h);
    }
    return err;
}

static void on_extended(hl_req *r, redisReply *reply, int err) {
    hl_extendop *op = r->owner;
    err = extend_apply(op, r, reply, err);
    /* An extension is a renewal: over a quorum it may have put the key
     * back behind the release (see renewal_outlived). */
    hold_key_done(&op->key, !r->net->loop->freeing && (op->hold == NULL || op->hold->releasing));
    if (hl_linked(&op->link)) hl_list_remove(&op->link);
    op->status = err;
    if (r->net->loop->freeing) extendop_run(&op->defer, 1);
    else hl_defer_push(r->net->loop, &op->defer);
}

int hilock_hold_extend(hilock_hold *h, uint32_t lease_ms, hilock_release_cb cb, void *data) {
    if (h != NULL && h->group != NULL) return h->group->extend(h->group, lease_ms, cb, data);
    return hl_hold_extend(h, lease_ms, cb, data);
}

int hl_hold_extend(hilock_hold *h, uint32_t lease_ms, hilock_release_cb cb, void *data) {
    if (h == NULL) return HILOCK_EINVAL;
    if (hl_client_refuses(h->c)) return hl_client_refuses(h->c);
    if (h->releasing || lease_ms < HILOCK_LEASE_MIN || lease_ms > INT32_MAX) return HILOCK_EINVAL;
    if (!hl_hold_live(h, hl_now_ms())) return HILOCK_ELOST;
    hl_extendop *op = calloc(1, sizeof(*op));
    if (op == NULL) return HILOCK_ENOMEM;
    hl_req *r = h->name->prim->renew_req(h->name, h, lease_ms, on_extended, op);
    if (r == NULL) { free(op); return HILOCK_ENOMEM; }
    op->defer.run = extendop_run;
    op->c = h->c;
    op->hold = h;
    hold_key_keep(&op->key, h);
    hl_list_push(&h->extends, &op->link);
    op->cb = cb;
    op->data = data;
    op->lease_ms = lease_ms;
    hl_name_submit_leased(h->name, r, lease_ms);
    return 0;
}

/* ---- Owners ----------------------------------------------------------- */

hilock_owner *hilock_owner_new(hilock_client *c) {
    if (c == NULL || c->loop.freeing || c->loop.forked) return NULL;
    hilock_owner *o = calloc(1, sizeof(*o));
    if (o == NULL) return NULL;
    o->c = c;
    hl_list_init(&o->holds);
    hl_list_push(&c->owners, &o->link);
    return o;
}

void hilock_owner_free(hilock_owner *o) {
    if (o == NULL) return;
    hilock_client *c = o->c;
    /* Waits still queued for this owner, or granted and not yet told (a
     * stale grant queues again with its terms), carry on without
     * reentrancy; so do holds already being released. */
    hl_waits_forget_owner(c, o);
    for (hl_link *l = c->holds.next; l != &c->holds; l = l->next) {
        hilock_hold *h = HL_CONTAINER(l, hilock_hold, link);
        if (h->terms.owner == o) h->terms.owner = NULL;
    }
    while (!hl_list_empty(&o->holds)) {
        hilock_hold *h = HL_CONTAINER(o->holds.next, hilock_hold, olink);
        hl_list_remove(&h->olink);
        h->terms.owner = NULL;
    }
    hl_list_remove(&o->link);
    free(o);
}

hilock_hold *hl_owner_hold(hilock_owner *o, hl_name *n, uint64_t now) {
    for (hl_link *l = o->holds.next; l != &o->holds; l = l->next) {
        hilock_hold *h = HL_CONTAINER(l, hilock_hold, olink);
        if (h->name == n && !h->releasing && hl_hold_live(h, now)) return h;
    }
    return NULL;
}

/* ---- Client teardown -------------------------------------------------------- */

void hl_holds_release_all(hilock_client *c) {
    for (hl_link *l = c->holds.next; l != &c->holds; l = l->next) {
        hilock_hold *h = HL_CONTAINER(l, hilock_hold, link);
        if (h->releasing) continue;
        /* No longer a live hold: it stays allocated until the client is
         * freed, where nothing counts any more. */
        c->counts.holds--;
        final_release_begin(h);
        hl_release_token(h->name, h->token, &h->terms, 0);
    }
}

void hl_holds_free_all(hilock_client *c) {
    while (!hl_list_empty(&c->holds)) {
        hilock_hold *h = HL_CONTAINER(c->holds.next, hilock_hold, link);
        hl_list_remove(&h->link);
        free(h);
    }
    while (!hl_list_empty(&c->owners)) {
        hilock_owner *o = HL_CONTAINER(c->owners.next, hilock_owner, link);
        hl_list_remove(&o->link);
        free(o);
    }
}
