/* The mutex: one holder at a time, reentrant per owner, with bounded
 * waiting across processes.
 *
 * Keys of lock NAME under prefix P (see hilock.h): P{T} the lock, a hash
 * {token, fence, q, w} with the lease as its TTL (w: a try found it taken,
 * so its release publishes); P{T}:fence the last fence, a counter;
 * P{T}:ch the channel of release messages (and grants); P{T}:q the queue
 * of starving waits and P{T}:p their clients (lua/_queue.lua).
 *
 * A wait tries with mutex_acquire.lua, which takes the lock if it is
 * free: after a release, the first try to reach Redis wins, which is the
 * fastest handoff, but favours the releasing process, whose next wait
 * tries at once while the others hear of the release a round trip later.
 * So a wait that has waited hilock_config.starve_ms (hl_prim.bounded: the
 * engine marks it w->starving) tries with mutex_join.lua instead, which is
 * the fair lock's try on this lock: it takes a place in the queue and
 * marks the lock (q), and the release (mutex_release.lua, answered 2 for
 * a marked lock, then mutex_handover.lua) hands a marked lock to the
 * queue's first live entry by message, as the fair lock's release does. Only a process's head tries, so a process has one place
 * at a time: the starving processes are served in turn. Not over Redlock
 * (the engine never marks a wait starving there): a queue per master does
 * not make one order. */
#include <stdlib.h>
#include <string.h>
#include "prim/prim.h"

static const hl_cmd acquire_cmd = {&hl_script_mutex_acquire, 2, {"", ":fence"}};
static const hl_cmd join_cmd = {&hl_script_mutex_join, 4, {"", ":q", ":p", ":fence"}};
/* The release names the lock alone: with nobody starving (the common
 * case) that is all it needs, and a script's keys cost Redis and the
 * client something at every call. A lock marked by a starving wait is
 * answered 2, and handed over by handover_cmd, which names the queue's
 * keys too. */
static const hl_cmd release_cmd = {&hl_script_mutex_release, 1, {""}};
static const hl_cmd handover_cmd = {&hl_script_mutex_handover, 4, {"", ":q", ":p", ":fence"}};
static const hl_cmd renew_cmd = {&hl_script_mutex_renew, 1, {""}};
static const hl_cmd fence_cmd = {&hl_script_mutex_fence, 1, {":fence"}};

/* After a Redlock try whose quorum came too late (no node refused it). */
#define REDLOCK_RETRY_MS 10

/* acquire(lock, fence; token, lease_ms, fence_ttl_s), or a starving
 * wait's join (hl_queue_try_req). Its mode is always a first try's: a
 * process has one place, so a place found gone (mode 3 would say so) has
 * no other places to take back with it. `owner` is the wait. */
static hl_req *mutex_try_req(hl_name *n, const char *token, uint32_t lease_ms,
                             hl_req_done done, void *owner) {
    const hilock_wait *w = owner;
    lease_ms = hl_key_ttl(n, lease_ms);
    if (w->starving) return hl_queue_try_req(n, &join_cmd, token, lease_ms, '0', done, owner);
    hl_req *r = hl_name_req(n, &acquire_cmd, HL_TOKEN_LEN + 2 * 20, done, owner);
    if (r == NULL) return NULL;
    hl_req_arg(r, token, HL_TOKEN_LEN, "", 0);
    hl_req_arg_u64(r, lease_ms);
    hl_req_arg_u64(r, n->c->cfg.fence_ttl_s);
    return r;
}

/* A fence: ours; {0, pttl, holder}: taken, and may expire in pttl ms (-2: gone
 * already; -1: a key without TTL, not ours: look again after a lease).
 * Redlock combines the answers (topo/redlock.c): 0 when every node that
 * answered granted but the quorum came too late, or errors left it short;
 * nobody is known to hold it, so look again soon. Or
 * a join's reply (hl_queue_try_parse), six elements, whose "places lost"
 * asks nothing of a process with one place. */
static int mutex_try_parse(hilock_client *c, const redisReply *reply, hl_try *out) {
    long long v[3];
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 6) {
        int rc = hl_queue_try_parse(c, reply, out);
        out->rejoin = 0;
        return rc;
    }
    if (reply->type == REDIS_REPLY_INTEGER) { /* the fence of a grant; Redlock: 0, no quorum */
        out->granted = reply->integer > 0;
        out->fence = out->granted ? (uint64_t)reply->integer : 0;
        out->retry_ms = out->granted ? 0 : REDLOCK_RETRY_MS;
        return 0;
    }
    int rc = hl_prim_try_reply(c, reply, "the acquire script", 0, v);
    if (rc != 0) return rc;
    long long got = v[0], val = v[1];
    out->granted = got == 1;
    out->fence = out->granted ? (uint64_t)val : 0;
    out->retry_ms = val >= 0 ? (uint64_t)val + 1 : val == -2 ? 0 : c->cfg.default_lease_ms;
    return 0;
}

/* release(lock; token, channel, mode, PUBLISH or SPUBLISH (added by net)) */
static hl_req *release_req_of(hl_name *n, const char *token, const char *mode, hl_req_done done,
                              void *owner) {
    hl_req *r = hl_prim_release_req(n, &release_cmd, token, done, owner);
    if (r != NULL) hl_req_arg(r, mode, 1, "", 0);
    return r;
}

/* The release: it may be answered 2 (hand it over). It tells the waiters
 * ('r') only if one of their tries found the lock taken and marked it, or,
 * 't', if this client has waits of the name: those wait behind our hold
 * for the message (our own subscriber hears it), not for a try of theirs
 * to fail. With nobody waiting, nothing is published. */
static hl_req *mutex_release_req(hl_name *n, const char *token, const hl_terms *terms, hl_req_done done,
                                 void *owner) {
    (void)terms;
    return release_req_of(n, token, n->nwaiters > 0 ? "t" : "h", done, owner);
}

/* The handover answered TRYAGAIN (the slot is half moved, the queue
 * missing beside the lock): 'd', the lock is deleted and the waiters told;
 * the next starving try hands it on. */
static hl_req *mutex_release_lock_req(hl_name *n, const char *token, hl_req_done done, void *owner) {
    return release_req_of(n, token, "d", done, owner);
}

/* handover(lock, queue, clients, fence; token, fence_ttl_s, channel,
 * PUBLISH or SPUBLISH (added by net)): also how a starving wait leaves
 * its place. */
static hl_req *mutex_handover_req(hl_name *n, const char *token, hl_req_done done, void *owner) {
    return hl_queue_release_req(n, &handover_cmd, token, done, owner);
}

/* A starving wait that ends without its own grant leaves the queue, and
 * gives back a grant that raced its end (the release script does both). */
static void mutex_abandon(hilock_wait *w) {
    char tok[HL_TOKEN_LEN + 1];
    if (w->starving) hl_handover_token(w->name, hl_wait_token(w, tok));
}

/* renew(lock; token, lease_ms[, fence]). Redlock: with the fence, a master
 * that lost the key (restarted empty, or it expired there alone) gets it
 * back while the quorum holds, so the hold does not wear away master by
 * master. */
static hl_req *mutex_renew_req(hl_name *n, const hilock_hold *h, uint32_t lease_ms, hl_req_done done,
                               void *owner) {
    hl_req *r = hl_prim_renew_req(n, &renew_cmd, h->token, hl_key_ttl(n, lease_ms), done, owner);
    if (r != NULL && hl_topo_quorum(&n->c->topo)) hl_req_arg_u64(r, h->fence);
    return r;
}

/* renew_many(lock...; token, lease_ms, ...) */
static hl_req *mutex_renew_many_req(hilock_hold *const *h, int count, hl_req_done done, void *owner) {
    size_t bytes = 0;
    for (int i = 0; i < count; i++) bytes += h[i]->name->keylen + HL_TOKEN_LEN + 20;
    hl_req *r = hl_req_new_n(&h[0]->c->topo.net, &hl_script_mutex_renew_many, count, 3 * count, bytes,
                             done, owner);
    if (r == NULL) return NULL;
    for (int i = 0; i < count; i++) hl_req_arg(r, h[i]->name->buf, h[i]->name->keylen, "", 0);
    for (int i = 0; i < count; i++) {
        hl_req_arg(r, h[i]->token, HL_TOKEN_LEN, "", 0);
        hl_req_arg_u64(r, hl_key_ttl(h[i]->name, h[i]->renew_lease));
    }
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

static const char *mutex_guard(const hl_terms *terms, char *kind) {
    (void)terms;
    *kind = 's';
    return "";
}

const hl_prim hl_mutex = {
    .guard = mutex_guard,
    .revocable = 1,
    .channel_suffix = ":ch",
    .try_req = mutex_try_req,
    .try_parse = mutex_try_parse,
    .shares = hl_prim_same_owner, /* reentrancy */
    .release_req = mutex_release_req,
    .release_lock_req = mutex_release_lock_req,
    .handover_req = mutex_handover_req,
    .renew_req = mutex_renew_req,
    .renew_many_req = mutex_renew_many_req,
    .fence_req = mutex_fence_req,
    .abandon = mutex_abandon,
    .bounded = hl_queue_every,
    .refresh_ms = HL_QUEUE_REFRESH_MS,
    .grant_msg = hl_queue_grant_msg,
    .granted_out = hl_queue_try_moot,
};

/* ---- The public API of the mutex ------------------------------------------ */

int hilock_acquire(hilock_client *c, const char *name, const hilock_acquire_opts *opts,
                   hilock_acquire_cb cb, void *data, hilock_wait **wait_out) {
    return hl_prim_acquire(c, &hl_mutex, name, opts, NULL, cb, data, wait_out);
}
