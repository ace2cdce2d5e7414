/* The mutex: one holder at a time, reentrant per owner.
 *
 * Keys of lock NAME under prefix P (see hilock.h): P{T} the lock, a hash
 * {token, fence} with the lease as its TTL; P{T}:fence the last fence;
 * P{T}:ch the channel of release messages. */
#include <stdlib.h>
#include <string.h>
#include "prim/prim.h"

static const hl_cmd acquire_cmd = {&hl_script_mutex_acquire, 2, {"", ":fence"}};
static const hl_cmd release_cmd = {&hl_script_mutex_release, 1, {""}};
static const hl_cmd renew_cmd = {&hl_script_mutex_renew, 1, {""}};
static const hl_cmd fence_cmd = {&hl_script_mutex_fence, 1, {":fence"}};

/* acquire(lock, fence; token, lease_ms, fence_ttl_s) */
static hl_req *mutex_try_req(hl_name *n, const char *token, uint32_t lease_ms,
                             hl_req_done done, void *owner) {
    hl_req *r = hl_name_req(n, &acquire_cmd, HL_TOKEN_LEN + 2 * 20, done, owner);
    if (r == NULL) return NULL;
    hl_req_arg(r, token, HL_TOKEN_LEN, "", 0);
    hl_req_arg_u64(r, lease_ms);
    hl_req_arg_u64(r, n->c->cfg.fence_ttl_s);
    return r;
}

/* {1, fence}: ours; {0, pttl, holder}: taken, and may expire in pttl ms (-2: gone
 * already; -1: a key without TTL, not ours: look again after a lease). */
static int mutex_try_parse(hilock_client *c, const redisReply *reply, hl_try *out) {
    if (reply->type == REDIS_REPLY_ERROR) return hl_reply_error(&c->loop, reply);
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
        reply->element[0]->type != REDIS_REPLY_INTEGER ||
        reply->element[1]->type != REDIS_REPLY_INTEGER) {
        hl_set_error(&c->loop, "unexpected reply to the acquire script");
        return HILOCK_EPROTO;
    }
    long long got = reply->element[0]->integer, val = reply->element[1]->integer;
    out->granted = got == 1;
    out->fence = out->granted ? (uint64_t)val : 0;
    out->retry_ms = val >= 0 ? (uint64_t)val + 1 : val == -2 ? 0 : c->cfg.default_lease_ms;
    return 0;
}

/* Reentrancy: acquires by the same owner that queued behind the winner. */
static int mutex_shares(const hilock_wait *w, const hilock_wait *o) {
    return w->terms.owner != NULL && o->terms.owner == w->terms.owner;
}

/* release(lock; token, channel, PUBLISH or SPUBLISH (added by net)) */
static hl_req *mutex_release_req(hl_name *n, const char *token, hl_req_done done, void *owner) {
    hl_req *r = hl_name_req(n, &release_cmd, HL_TOKEN_LEN + n->chlen + 8, done, owner);
    if (r == NULL) return NULL;
    hl_req_arg(r, token, HL_TOKEN_LEN, "", 0);
    hl_req_arg(r, hl_name_channel(n), n->chlen, "", 0);
    r->publishes = 1;
    r->everywhere = 1;
    return r;
}

/* renew(lock; token, lease_ms[, fence]). Redlock: with the fence, a master
 * that lost the key (restarted empty, or it expired there alone) gets it
 * back while the quorum holds, so the hold does not wear away master by
 * master. */
static hl_req *mutex_renew_req(hl_name *n, const char *token, uint64_t fence, uint32_t lease_ms,
                               hl_req_done done, void *owner) {
    hl_req *r = hl_name_req(n, &renew_cmd, HL_TOKEN_LEN + 2 * 20, done, owner);
    if (r == NULL) return NULL;
    hl_req_arg(r, token, HL_TOKEN_LEN, "", 0);
    hl_req_arg_u64(r, lease_ms);
    if (hl_topo_quorum(&n->c->topo)) hl_req_arg_u64(r, fence);
    return r;
}

/* fence(fence; fence, fence_ttl_s) */
static hl_req *mutex_fence_req(hl_name *n, uint64_t fence, hl_req_done done, void *owner) {
    hl_req *r = hl_name_req(n, &fence_cmd, 2 * 20, done, owner);
    if (r == NULL) return NULL;
    hl_req_arg_u64(r, fence);
    hl_req_arg_u64(r, n->c->cfg.fence_ttl_s);
    r->everywhere = 1; /* ahead of the release there */
    return r;
}

const hl_prim hl_mutex = {
    ":ch",
    mutex_try_req,
    mutex_try_parse,
    mutex_shares,
    mutex_release_req,
    mutex_renew_req,
    mutex_fence_req,
    NULL,
};

/* ---- The public API of the mutex ------------------------------------------ */

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

int hilock_acquire(hilock_client *c, const char *name, const hilock_acquire_opts *opts,
                   hilock_acquire_cb cb, void *data, hilock_wait **wait_out) {
    hilock_acquire_opts given;
    size_t len;
    uint32_t lease;
    if (wait_out) *wait_out = NULL;
    if (c == NULL || name == NULL || cb == NULL) return HILOCK_EINVAL;
    if (hl_client_refuses(c)) return hl_client_refuses(c);
    hilock_acquire_opts_init(&given);
    if (opts != NULL && hl_struct_import(&given, sizeof(given), opts, opts->size) != 0)
        return HILOCK_EINVAL;
    int rc = acquire_check(c, name, &len, &given, &lease);
    if (rc != 0) return rc;

    hilock_wait *w = calloc(1, sizeof(*w));
    hl_name *n = w ? hl_name_get(c, &hl_mutex, name, len) : NULL;
    if (n == NULL) { free(w); return HILOCK_ENOMEM; }
    uint64_t now = hl_now_ms();
    w->name = n;
    w->c = c;
    w->cb = cb;
    w->data = data;
    w->terms = (hl_terms){given.owner, given.lost_cb, given.lost_data, lease, given.no_renew != 0, 0};
    w->try_once = given.wait_ms == 0;
    w->started_at = now;
    if (given.wait_ms > 0) w->deadline_at = now + (uint64_t)given.wait_ms;
    hl_token_new(c, w->token);
    if (wait_out) *wait_out = w;
    hl_wait_start(w, given.owner ? hl_owner_hold(given.owner, n, now) : NULL, now);
    return 0;
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
