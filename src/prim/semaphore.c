/* The counting semaphore: permits_total permits per name, each grant a
 * lease on `permits` of them, with its own token and fence.
 *
 * Keys of semaphore NAME under prefix P (see hilock.h), none shared with the
 * mutex of the same NAME: P{T}:sem the holders (a sorted set, token ->
 * expiry in the server's ms), P{T}:sem:h a hash ("n" -> permits_total,
 * token -> "permits fence"), P{T}:sem:fence the last fence, P{T}:sem:ch the
 * channel of release messages. The scripts drop the holders whose lease
 * ran out (by the server's clock) at every try, so a dead holder's permits
 * come back without anyone releasing them.
 *
 * Bounded waiting across processes: a wait that has waited
 * hilock_config.starve_ms (hl_prim.bounded) tries with sem_join.lua, which
 * takes a place in a queue (P{T}:sem:q, its clients P{T}:sem:p, as
 * lua/_queue.lua has them) and marks the hash ("q"): the tries of waits
 * that have not starved are refused, and the first live place takes its
 * permits when they are free. A release wakes every waiting process (the
 * name's one channel), so that place's next try follows it at once; no
 * grant by message is needed. A process has one place (its head's), so
 * starving processes are served in turn. A starving wait that ends without
 * its permits leaves its place (sem_leave.lua). */
#include <stdlib.h>
#include <string.h>
#include "prim/prim.h"

static const hl_cmd acquire_cmd = {&hl_script_sem_acquire, 3, {":sem", ":sem:h", ":sem:fence"}};
static const hl_cmd release_cmd = {&hl_script_sem_release, 2, {":sem", ":sem:h"}};
static const hl_cmd renew_cmd = {&hl_script_sem_renew, 2, {":sem", ":sem:h"}};
static const hl_cmd join_cmd = {&hl_script_sem_join, 5, {":sem", ":sem:q", ":sem:p", ":sem:fence", ":sem:h"}};
static const hl_cmd leave_cmd = {&hl_script_sem_leave, 3, {":sem:h", ":sem:q", ":sem:p"}};

/* acquire(holders, hash, fence; token, lease_ms, fence_ttl_s, total,
 * permits), or a starving wait's join(holders, queue, clients, fence, hash;
 * token, lease_ms, fence_ttl_s, "0", total, permits). `owner` is the wait:
 * its terms say how many permits of how many. */
static hl_req *sem_try_req(hl_name *n, const char *token, uint32_t lease_ms, hl_req_done done,
                           void *owner) {
    const hilock_wait *w = owner;
    hl_req *r = hl_name_req(n, w->starving ? &join_cmd : &acquire_cmd, HL_TOKEN_LEN + 5 * 20, done, owner);
    if (r == NULL) return NULL;
    hl_req_arg(r, token, HL_TOKEN_LEN, "", 0);
    hl_req_arg_u64(r, lease_ms);
    hl_req_arg_u64(r, n->c->cfg.fence_ttl_s);
    if (w->starving) hl_req_arg(r, "0", 1, "", 0); /* the mode, fourth (hl_queue_try_moot) */
    hl_req_arg_u64(r, w->terms.permits_total);
    hl_req_arg_u64(r, w->terms.permits);
    return r;
}

/* {1, fence, free}: ours, `free` permits left; {0, ms, free}: not enough
 * free, and the earliest lease runs out in ms; {-1, n}: the holders use n
 * permits in all, not ours. */
static int sem_try_parse(hilock_client *c, const redisReply *reply, hl_try *out) {
    long long v[3];
    int rc = hl_prim_try_reply(c, reply, "the semaphore's acquire script", 1, v);
    if (rc != 0) return rc;
    long long got = v[0], val = v[1], left = v[2];
    if (got == -1) {
        hl_set_error(&c->loop, "the semaphore's holders acquired it with %lld permits in all", val);
        out->refused = HILOCK_EPERMITS;
        return 0;
    }
    out->granted = got == 1;
    out->fence = out->granted ? (uint64_t)val : 0;
    out->more = out->granted && left > 0;
    out->retry_ms = out->granted ? 0 : val > 0 ? (uint64_t)val : 1;
    return 0;
}

/* Reentrancy: acquires by the same owner queued behind the winner that ask
 * for no more permits than it got, of the same permits_total (Redis would
 * refuse another count while the winner holds). */
static int sem_shares(const hilock_wait *w, const hilock_wait *o) {
    return w->terms.owner != NULL && o->terms.owner == w->terms.owner &&
           o->terms.permits <= w->terms.permits &&
           o->terms.permits_total == w->terms.permits_total;
}

/* An owner's hold of fewer permits cannot grow. */
static int sem_admit(const hilock_wait *w, const hilock_hold *mine) {
    return mine != NULL && mine->terms.permits < w->terms.permits ? HILOCK_EINVAL : 0;
}

/* release(holders, hash; token, channel, PUBLISH or SPUBLISH (added by net)) */
static hl_req *sem_release_req(hl_name *n, const char *token, const hl_terms *terms, hl_req_done done,
                               void *owner) {
    (void)terms;
    return hl_prim_release_req(n, &release_cmd, token, done, owner);
}

/* A starving wait that ends without its permits leaves its place:
 * leave(hash, queue, clients; token, channel, PUBLISH or SPUBLISH (added
 * by net)). (Permits that raced its end are given back by the engine, which
 * has the try's answer.) */
static void sem_abandon(hilock_wait *w) {
    if (!w->starving) return;
    /* Not waited for: a place left behind lapses with its client. */
    char tok[HL_TOKEN_LEN + 1];
    hl_req *r = hl_prim_release_req(w->name, &leave_cmd, hl_wait_token(w, tok), hl_req_ignore, NULL);
    if (r != NULL) hl_name_submit(w->name, r);
}

/* renew(holders, hash; token, lease_ms) */
static hl_req *sem_renew_req(hl_name *n, const hilock_hold *h, uint32_t lease_ms, hl_req_done done,
                             void *owner) {
    return hl_prim_renew_req(n, &renew_cmd, h->token, lease_ms, done, owner);
}

static const char *sem_guard(const hl_terms *terms, char *kind) {
    (void)terms;
    *kind = 'z';
    return ":sem";
}

const hl_prim hl_semaphore = {
    .guard = sem_guard,
    .channel_suffix = ":sem:ch",
    .try_req = sem_try_req,
    .try_parse = sem_try_parse,
    .shares = sem_shares,
    .release_req = sem_release_req,
    .renew_req = sem_renew_req,
    .admit = sem_admit, /* no fence_req: no Redlock, refused at acquire */
    .abandon = sem_abandon,
    .bounded = hl_queue_every,
    .refresh_ms = HL_QUEUE_REFRESH_MS,
};

/* ---- The public API of the semaphore --------------------------------------- */

int hilock_semaphore_acquire(hilock_client *c, const char *name, unsigned permits_total,
                             unsigned permits, const hilock_acquire_opts *opts,
                             hilock_acquire_cb cb, void *data, hilock_wait **wait_out) {
    if (wait_out) *wait_out = NULL;
    if (c == NULL) return HILOCK_EINVAL;
    if (hl_client_refuses(c)) return hl_client_refuses(c);
    if (permits_total == 0 || permits_total > HILOCK_PERMITS_MAX || permits == 0 ||
        permits > permits_total)
        return HILOCK_EINVAL;
    hl_terms ask = {0};
    ask.permits = permits;
    ask.permits_total = permits_total;
    return hl_prim_acquire(c, &hl_semaphore, name, opts, &ask, cb, data, wait_out);
}
