/* What every primitive's acquire shares: the options, the checks, the wait
 * and its token, reentrancy through an owner; and cancelling a wait. */
#include <stdlib.h>
#include <string.h>
#include "prim/prim.h"

static int acquire_check(hilock_client *c, const char *name, size_t *len,
                         const hilock_acquire_opts *opts, uint32_t *lease) {
    *len = strnlen(name, HILOCK_NAME_MAX + 1);
    if (*len == 0 || *len > HILOCK_NAME_MAX) return HILOCK_EINVAL;
    if (opts->wait_ms < HILOCK_WAIT_FOREVER) return HILOCK_EINVAL;
    if (opts->owner != NULL && opts->owner->c != c) return HILOCK_EINVAL;
    *lease = opts->lease_ms == HILOCK_LEASE_DEFAULT ? c->cfg.default_lease_ms : opts->lease_ms;
    if (*lease < HILOCK_LEASE_MIN || *lease > INT32_MAX) return HILOCK_EINVAL;
    return 0;
}

int hl_prim_acquire(hilock_client *c, const hl_prim *p, const char *name,
                    const hilock_acquire_opts *opts, const hl_terms *ask,
                    hilock_acquire_cb cb, void *data, hilock_wait **wait_out) {
    hilock_acquire_opts given;
    size_t len;
    uint32_t lease;
    if (wait_out) *wait_out = NULL;
    if (c == NULL || name == NULL || cb == NULL) return HILOCK_EINVAL;
    if (hl_client_refuses(c)) return hl_client_refuses(c);
    /* Only the mutex raises fences over a quorum; the others would not be
     * bounded by one (a semaphore of N over 3 masters: 3 holders of 2). */
    if (p->fence_req == NULL && hl_topo_quorum(&c->topo)) {
        hl_set_error(&c->loop, "only the mutex runs over Redlock");
        return HILOCK_EINVAL;
    }
    hilock_acquire_opts_init(&given);
    if (opts != NULL && hl_struct_import(&given, sizeof(given), opts, opts->size) != 0)
        return HILOCK_EINVAL;
    int rc = acquire_check(c, name, &len, &given, &lease);
    if (rc != 0) return rc;

    hilock_wait *w = calloc(1, sizeof(*w));
    hl_name *n = w ? hl_name_get(c, p, name, len) : NULL;
    if (n == NULL) { free(w); return HILOCK_ENOMEM; }
    uint64_t now_us = hl_now_us(), now = now_us / 1000u; /* hl_now_ms()'s clock */
    if (ask != NULL) w->terms = *ask;
    w->terms.owner = given.owner;
    w->terms.lost_cb = given.lost_cb;
    w->terms.lost_data = given.lost_data;
    w->terms.lease_ms = lease;
    w->terms.no_renew = given.no_renew != 0;
    w->name = n;
    w->c = c;
    w->cb = cb;
    w->data = data;
    /* Reentrancy: the owner's live hold of this name serves, if the
     * primitive admits the wait beside it. */
    hilock_hold *mine;
    rc = hl_wait_admit(w, now, &mine);
    if (rc != 0) {
        free(w);
        hl_name_maybe_free(n);
        return rc;
    }
    w->try_once = given.wait_ms == 0;
    w->started_us = now_us;
    c->counts.acquires++;
    if (given.wait_ms > 0) w->timer.when = now + (uint64_t)given.wait_ms; /* hl_wait_deadline */
    w->token = hl_token_new(c);
    if (wait_out) *wait_out = w;
    hl_wait_start(w, mine);
    return 0;
}

int hl_prim_same_owner(const hilock_wait *w, const hilock_wait *o) {
    return w->terms.owner != NULL && o->terms.owner == w->terms.owner;
}

int hl_prim_try_reply(hilock_client *c, const redisReply *reply, const char *what, int third,
                      long long v[3]) {
    if (reply->type == REDIS_REPLY_ERROR) return hl_reply_error(&c->loop, reply);
    int has_third = reply->type == REDIS_REPLY_ARRAY && reply->elements > 2;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
        reply->element[0]->type != REDIS_REPLY_INTEGER ||
        reply->element[1]->type != REDIS_REPLY_INTEGER ||
        (third && has_third && reply->element[2]->type != REDIS_REPLY_INTEGER)) {
        hl_set_error(&c->loop, "unexpected reply to %s", what);
        return HILOCK_EPROTO;
    }
    v[0] = reply->element[0]->integer;
    v[1] = reply->element[1]->integer;
    v[2] = third && has_third ? reply->element[2]->integer : 0;
    return 0;
}

hl_req *hl_prim_release_req(hl_name *n, const hl_cmd *cmd, const char *token, hl_req_done done,
                            void *owner) {
    hl_req *r = hl_name_req(n, cmd, HL_TOKEN_LEN + n->chlen + 8, done, owner);
    if (r == NULL) return NULL;
    hl_req_arg(r, token, HL_TOKEN_LEN, "", 0);
    hl_req_arg(r, hl_name_channel(n), n->chlen, "", 0);
    r->publishes = 1;
    r->everywhere = 1;
    return r;
}

hl_req *hl_prim_renew_req(hl_name *n, const hl_cmd *cmd, const char *token, uint32_t lease_ms,
                          hl_req_done done, void *owner) {
    hl_req *r = hl_name_req(n, cmd, HL_TOKEN_LEN + 2 * 20, done, owner);
    if (r == NULL) return NULL;
    hl_req_arg(r, token, HL_TOKEN_LEN, "", 0);
    hl_req_arg_u64(r, lease_ms);
    return r;
}

void hilock_acquire_opts_init_size(hilock_acquire_opts *o, size_t size) {
    hilock_acquire_opts d;
    if (o == NULL || size < sizeof(size_t)) return;
    memset(&d, 0, sizeof(d));
    d.size = size;
    d.wait_ms = HILOCK_WAIT_FOREVER;
    d.lease_ms = HILOCK_LEASE_DEFAULT;
    hl_struct_export(o, size, &d, sizeof(d));
}

int hilock_wait_cancel(hilock_wait *w) {
    if (w == NULL) return HILOCK_EINVAL;
    if (w->c->loop.forked) return HILOCK_EFORK;
    return hl_wait_cancel(w);
}
