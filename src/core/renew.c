/* Batched renewals: the holds of one server (of one slot, in a Cluster)
 * that are due within a short window renew in one script call.
 *
 * A batchable hold's watchdog turns a window early (hl_renew_window: 100
 * ms, or a twentieth of a shorter lease) and puts its renewal in the open
 * batch of its slot; the batch is sent when it is full
 * (hilock_config.renew_batch), or when the window of its most pressing
 * member ends, so that no hold is renewed later than it would be alone.
 * One script call then costs Redis its fixed part once for the batch, and
 * each hold its own key's check (one MGET reads them all) and PEXPIRE.
 * That PEXPIRE is the least a hold with a lease of its own can cost:
 * about 0.4x a renewal alone, measured by the bench's renewals scenario,
 * where batching saves a third or more of Redis's time, and all but one
 * in a hundred requests. Each member keeps its own lease
 * (its renew_lease), its own answer (a character of the reply) and so its
 * own loss. A batch of one goes as a single renewal. */
#include <stdlib.h>
#include <string.h>
#include "core/core.h"

typedef struct hl_renew_batch {
    hilock_client *c;
    const hl_prim *prim;
    hl_timer flush;
    uint64_t flush_at;         /* when the earliest member's window ends */
    uint32_t key;              /* its place in c->renew_open */
    int n;
    hl_renewal *item[];        /* c->cfg.renew_batch of them */
} hl_renew_batch;

/* An error for the whole call: each member goes alone then, so that each
 * gets an answer of its own. TRYAGAIN: the slot is half moved, some of the
 * keys on each side, and a single renewal follows ASK to wherever its key
 * is, so that no hold waits for the whole slot to move. An ACL refusing
 * one key (NOPERM, or the script's error): only that hold is refused. */
static int split_after_error(hl_renew_batch *b, const redisReply *reply) {
    if (reply->type != REDIS_REPLY_ERROR || b->c->loop.freeing) return 0;
    if (hl_reply_is_acl(reply->str) && hl_log_due(&b->c->batch_warned_at, hl_now_ms()))
        hl_log(&b->c->loop, HILOCK_LOG_WARNING,
               "renewals in one call refused by the ACL (%.*s): each of the %d renews alone; a batch "
               "needs +mget beside what a renewal needs (docs/tls-and-acl.md)",
               (int)(reply->len < 200 ? reply->len : 200), reply->str, b->n);
    for (int i = 0; i < b->n; i++) {
        if (hl_renewal_hold(b->item[i]) != NULL) hl_renewal_send(b->item[i]);
        else hl_renewal_drop(b->item[i]);
    }
    free(b);
    return 1;
}

/* The answer: one character per member, '1' renewed, '2' renewed and
 * asked to release (a revoke), '0' not ours. */
static void on_renewed_many(hl_req *r, redisReply *reply, int err) {
    hl_renew_batch *b = r->owner;
    redisReply one = {.type = REDIS_REPLY_INTEGER};
    if (err == 0 && split_after_error(b, reply)) return;
    if (err == 0 && reply->type == REDIS_REPLY_STRING && reply->len != (size_t)b->n) err = HILOCK_EPROTO;
    else if (err == 0 && reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_ERROR) err = HILOCK_EPROTO;
    for (int i = 0; i < b->n; i++) {
        const redisReply *ri = reply;
        if (err == 0 && reply->type == REDIS_REPLY_STRING) {
            one.integer = reply->str[i] == '1' ? 1 : reply->str[i] == '2' ? 2 : 0;
            ri = &one;
        }
        hl_renewal_answer(b->item[i], r, err == 0 ? ri : NULL, err);
    }
    free(b);
}

/* Send b: its members whose holds are still here, in one call. */
static void batch_send(hl_renew_batch *b) {
    hilock_client *c = b->c;
    hilock_hold *h[HL_RENEW_BATCH_MAX];
    int n = 0;
    c->renew_open[b->key] = NULL;
    hl_timer_stop(&c->loop, &b->flush);
    for (int i = 0; i < b->n; i++) {
        h[n] = hl_renewal_hold(b->item[i]);
        if (h[n] == NULL) hl_renewal_drop(b->item[i]); /* released while it waited */
        else b->item[n++] = b->item[i];
    }
    b->n = n;
    if (n <= 1) {
        if (n == 1) hl_renewal_send(b->item[0]);
        free(b);
        return;
    }
    uint32_t lease = 0;
    for (int i = 0; i < n; i++) {
        h[i]->renew_lease = hl_hold_renew_lease(h[i]);
        lease = h[i]->renew_lease > lease ? h[i]->renew_lease : lease;
    }
    hl_req *r = b->prim->renew_many_req(h, n, on_renewed_many, b);
    if (r == NULL) { /* each tries again at its watchdog's next turn */
        for (int i = 0; i < n; i++) hl_renewal_drop(b->item[i]);
        free(b);
        return;
    }
    r->tryagain_ends = 1; /* split_after_error */
    hl_name_submit_leased(h[0]->name, r, lease);
}

static void flush_fired(hl_timer *t) { batch_send(HL_CONTAINER(t, hl_renew_batch, flush)); }

int hl_renew_join(hl_renewal *rn, uint32_t window) {
    hilock_hold *h = hl_renewal_hold(rn);
    hilock_client *c = h->c;
    uint32_t key = hl_topo_slotted(&c->topo) ? h->name->slot : 0; /* any slot elsewhere */
    uint64_t due = hl_now_ms() + window;
    if (c->renew_open == NULL && (c->renew_open = calloc(HL_SLOTS, sizeof(*c->renew_open))) == NULL)
        return -1;
    hl_renew_batch *b = c->renew_open[key];
    if (b != NULL && b->prim != h->name->prim) batch_send(b); /* one script per call */
    if ((b = c->renew_open[key]) == NULL) {
        b = malloc(sizeof(*b) + c->cfg.renew_batch * sizeof(b->item[0]));
        if (b == NULL) return -1;
        b->c = c;
        b->prim = h->name->prim;
        b->key = key;
        b->n = 0;
        b->flush_at = UINT64_MAX;
        memset(&b->flush, 0, sizeof(b->flush));
        b->flush.cb = flush_fired;
        c->renew_open[key] = b;
    }
    b->item[b->n++] = rn;
    if ((uint32_t)b->n == c->cfg.renew_batch || window == 0) { /* full, or one is due now */
        batch_send(b);
    } else if (due < b->flush_at) {
        b->flush_at = due;
        hl_timer_start(&c->loop, &b->flush, window);
    }
    return 0;
}

void hl_renew_batches_free(hilock_client *c) {
    if (c->renew_open == NULL) return;
    for (uint32_t k = 0; k < HL_SLOTS; k++) {
        hl_renew_batch *b = c->renew_open[k];
        if (b == NULL) continue;
        hl_timer_stop(&c->loop, &b->flush);
        for (int i = 0; i < b->n; i++) hl_renewal_drop(b->item[i]);
        free(b);
    }
    free(c->renew_open);
    c->renew_open = NULL;
}
