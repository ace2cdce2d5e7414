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
    long long v[3];
    int rc = hl_prim_try_reply(c, reply, "the acquire script", 0, v);
    if (rc != 0) return rc;
    long long got = v[0], val = v[1];
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
static hl_req *mutex_release_req(hl_name *n, const char *token, const hl_terms *terms, hl_req_done done,
                                 void *owner) {
    (void)terms;
    return hl_prim_release_req(n, &release_cmd, token, done, owner);
}

/* renew(lock; token, lease_ms[, fence]). Redlock: with the fence, a master
 * that lost the key (restarted empty, or it expired there alone) gets it
 * back while the quorum holds, so the hold does not wear away master by
 * master. */
static hl_req *mutex_renew_req(hl_name *n, const hilock_hold *h, uint32_t lease_ms, hl_req_done done,
                               void *owner) {
    hl_req *r = hl_prim_renew_req(n, &renew_cmd, h->token, lease_ms, done, owner);
    if (r != NULL && hl_topo_quorum(&n->c->topo)) hl_req_arg_u64(r, h->fence);
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
    .channel_suffix = ":ch",
    .try_req = mutex_try_req,
    .try_parse = mutex_try_parse,
    .shares = mutex_shares,
    .release_req = mutex_release_req,
    .renew_req = mutex_renew_req,
    .fence_req = mutex_fence_req,
};

/* ---- The public API of the mutex ------------------------------------------ */

int hilock_acquire(hilock_client *c, const char *name, const hilock_acquire_opts *opts,
                   hilock_acquire_cb cb, void *data, hilock_wait **wait_out) {
    return hl_prim_acquire(c, &hl_mutex, name, opts, NULL, cb, data, wait_out);
}
