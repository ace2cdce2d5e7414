/* The fair lock: one holder at a time, granted in the order the waits
 * reached Redis, over all clients; the releaser's own script hands the
 * lock to the next waiter and names it in the release message, so the
 * next holder learns it holds the lock from the message alone.
 *
 * Keys of fair lock NAME under prefix P (see hilock.h), none shared with
 * the mutex of the same NAME: P{T}:fair the lock (a string "TOKEN FENCE",
 * its lease as TTL), P{T}:fair:q the queue (a sorted set, token -> place),
 * P{T}:fair:p the clients that wait (a sorted set: the first 16 digits of
 * their tokens -> until when their entries count, server ms),
 * P{T}:fair:fence the last fence, and P{T}:fair:ch:ID the channel of the
 * grants to the client whose id (the first 16 digits of its tokens) is ID:
 * a grant wakes the grantee's process alone.
 * The scripts are lua/fair_*.lua; _queue.lua says how they keep the queue,
 * which the mutex's starving waits use too (queue.c).
 *
 * On the engine (hl_prim.joins): every wait joins the queue with its first
 * try, sent at once in this client's order of arrival, so the queue keeps
 * it; the head of this client's waits tries again at least every
 * HL_QUEUE_REFRESH_MS, which keeps all of this client's entries alive (one
 * refresh per client and name, none per waiter) and finds a grant whose
 * message was lost. A release grants the first live entry for a claim
 * window of 1 s and publishes "g TOKEN FENCE NOW_MS 1000" to the
 * grantee's client; the waiting
 * client grants that wait (hl_queue_grant_msg), dating the lease by the
 * server's clock, and the hold's watchdog claims it (renews it to its
 * lease) a third of the window later, if it is still held. A grant to a
 * client that died lapses after the window, and the next script that
 * runs (a try or a release) grants the next entry.
 *
 * Redlock is refused (no fence_req): a queue per master does not make one
 * order. */
#include <stdlib.h>
#include <string.h>
#include "prim/prim.h"

static const hl_cmd acquire_cmd = {&hl_script_fair_acquire, 4,
                                   {":fair", ":fair:q", ":fair:p", ":fair:fence"}};
static const hl_cmd release_cmd = {&hl_script_fair_release, 4,
                                   {":fair", ":fair:q", ":fair:p", ":fair:fence"}};
/* The release while the slot is half moved (hl_prim.release_lock_req): the
 * queue is missing beside the lock when nobody waits, and the clients' key
 * 5 s after the last word, so the release above is answered TRYAGAIN
 * until the slot has moved; this one names the lock alone. */
static const hl_cmd release_lock_cmd = {&hl_script_fair_release_lock, 1, {":fair"}};
/* The claim of a grant by message gives the client back the time in the
 * queue that the grant cut to the claim window (_queue.lua), so it declares
 * the clients' key too, which the grant has just written. A later renewal
 * declares only the lock: the clients' key runs out 5 s after the last
 * word on the name, and while the slot migrates a script with a declared
 * key missing is answered TRYAGAIN until the slot has moved (the hold
 * would run out meanwhile), while one key follows ASK. The client's other
 * waits, if any, keep its places alive by their tries. */
static const hl_cmd claim_cmd = {&hl_script_fair_renew, 2, {":fair", ":fair:p"}};
static const hl_cmd renew_cmd = {&hl_script_fair_renew, 1, {":fair"}};

/* acquire(lock, queue, clients, fence; token, lease_ms, fence_ttl_s, once
 * (or 2: join again at the tail, w->rejoining; 3: a try of a token that
 * has had its place, w->placed, so that a place found gone is a queue
 * lost; 0: a first try), the channel without a client's id, PUBLISH or
 * SPUBLISH (added by net)). `owner` is the wait. */
static hl_req *fair_try_req(hl_name *n, const char *token, uint32_t lease_ms, hl_req_done done,
                            void *owner) {
    const hilock_wait *w = owner;
    char mode = w->try_once ? '1' : w->rejoining ? '2' : w->placed ? '3' : '0';
    return hl_queue_try_req(n, &acquire_cmd, token, hl_key_ttl(n, lease_ms), mode, done, owner);
}

/* release(lock, queue, clients, fence; token, fence_ttl_s, the channel
 * without a client's id, PUBLISH or SPUBLISH (added by net)): also how a
 * waiter leaves. */
static hl_req *fair_release_req(hl_name *n, const char *token, const hl_terms *terms, hl_req_done done,
                                void *owner) {
    (void)terms;
    return hl_queue_release_req(n, &release_cmd, token, done, owner);
}

/* release_lock(lock; token, this client's channel, PUBLISH or SPUBLISH
 * (added by net)): it wakes this client's waits of the name; the others'
 * refresh finds the lock free within HL_QUEUE_REFRESH_MS. */
static hl_req *fair_release_lock_req(hl_name *n, const char *token, hl_req_done done, void *owner) {
    return hl_prim_release_req(n, &release_lock_cmd, token, done, owner);
}

/* renew(lock[, clients]; token, lease_ms): the claim of a grant by
 * message (its key set for less than the hold's lease: see claim_cmd), or
 * a renewal. */
static hl_req *fair_renew_req(hl_name *n, const hilock_hold *h, uint32_t lease_ms, hl_req_done done,
                              void *owner) {
    return hl_prim_renew_req(n, hl_hold_unclaimed(h) ? &claim_cmd : &renew_cmd, h->token,
                             hl_key_ttl(n, lease_ms), done, owner);
}

/* A wait that ends without its own grant leaves the queue, and gives back
 * a grant that raced its end (the release script does both). */
static void fair_abandon(hilock_wait *w) {
    char tok[HL_TOKEN_LEN + 1];
    if (!w->try_once) hl_release_token(w->name, hl_wait_token(w, tok), &w->terms, 0);
}

static const char *fair_guard(const hl_terms *terms, char *kind) {
    (void)terms;
    *kind = 's'; /* "TOKEN FENCE" */
    return ":fair";
}

const hl_prim hl_fair = {
    .guard = fair_guard,
    .channel_suffix = ":fair:ch:",
    .client_channel = 1,
    .try_req = fair_try_req,
    .try_parse = hl_queue_try_parse,
    .shares = hl_prim_same_owner, /* reentrancy: they leave the queue (hl_prim.joins) */
    .release_req = fair_release_req,
    .release_lock_req = fair_release_lock_req,
    .renew_req = fair_renew_req,
    .abandon = fair_abandon, /* no fence_req: no Redlock, refused at acquire */
    .joins = 1,
    .refresh_ms = HL_QUEUE_REFRESH_MS,
    .grant_msg = hl_queue_grant_msg,
    .granted_out = hl_queue_try_moot,
};

/* ---- The public API of the fair lock --------------------------------------- */

int hilock_fair_acquire(hilock_client *c, const char *name, const hilock_acquire_opts *opts,
                        hilock_acquire_cb cb, void *data, hilock_wait **wait_out) {
    return hl_prim_acquire(c, &hl_fair, name, opts, NULL, cb, data, wait_out);
}
