/* The read-write lock: many readers or one writer per name, on the shared
 * waiter engine. Read and write waits of a NAME share one hl_name (one local
 * FIFO, one subscription, one try in flight); the try script reads the
 * wait's mode (terms.write).
 *
 * Keys of read-write lock NAME under prefix P (see hilock.h), none shared
 * with the mutex or the semaphore of the same NAME: P{T}:rw the writer (a
 * hash {token, fence}, its lease as TTL), P{T}:rwr the readers (a sorted set,
 * token -> end of its lease in the server's ms, pruned by every script),
 * P{T}:rwf the last write fence, P{T}:rww the "writer waiting" marker, and
 * P{T}:rw:ch the channel of release messages.
 *
 * Writers are not starved by readers: a writer refused because readers hold
 * leaves the marker (rw_acquire.lua), which refuses new readers until the
 * writer is in; the writer's retries (its fallback timer, at most
 * HL_RW_MARK_MS / 3 apart, and release messages) refresh it, and it runs out
 * HL_RW_MARK_MS after the last one (or at the writer's deadline, if that is
 * sooner): a writer that died stops blocking readers then. One that gives
 * up or is cancelled removes it at once (rw_abandon). A try-once writer
 * leaves none.
 *
 * Readers queued together in this process: each gets its own reader entry
 * (its own token, lease, renewals, lost callback and release), and a read
 * grant lets the next head try at once (hl_try.more) instead of waiting for
 * a release, so a queue of readers goes in back to back, one round trip
 * each. Sharing one hold between unrelated requests (as reentrancy does)
 * would save those round trips but give them one lease, one lost callback
 * and one count, which is wrong for requests that end at different times.
 * What is shared is reentrancy: waits of the same owner queued behind a
 * grant (readers behind a reader; readers and writers behind a writer).
 *
 * Redlock is refused (HILOCK_EINVAL): readers of a quorum on N masters, the
 * marker and the fences would need their own undo and repair. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "prim/prim.h"

/* The marker's life. A waiting writer refreshes it at least every 1000 ms
 * (rw_acquire.lua caps its retry_ms there). */
#define HL_RW_MARK_MS 3000u

static const hl_cmd acquire_cmd = {&hl_script_rw_acquire, 4, {":rw", ":rwr", ":rwf", ":rww"}};
/* A starving writer's try, a starving reader's, and the handover of a
 * write lock that either marked (lua/_lock_rw.lua): the queue's keys
 * first, as lua/_queue.lua has them. */
static const hl_cmd join_cmd = {&hl_script_rw_join, 6, {":rw", ":rwq", ":rwp", ":rwf", ":rww", ":rwr"}};
static const hl_cmd read_join_cmd = {&hl_script_rw_read_join, 6, {":rw", ":rwq", ":rwp", ":rwf", ":rww", ":rwr"}};
static const hl_cmd handover_cmd = {&hl_script_rw_handover, 6, {":rw", ":rwq", ":rwp", ":rwf", ":rww", ":rwr"}};
/* A renewal or release declares only the key its token lives in: while the
 * name's slot migrates, a script with some declared keys missing (the
 * writer's hash while readers hold, the readers' set while a writer holds,
 * the marker nearly always) is answered TRYAGAIN until the slot has moved,
 * and a hold would run out meanwhile; with one key it follows ASK, as the
 * mutex's does. */
static const hl_cmd renew_write_cmd = {&hl_script_rw_renew, 1, {":rw"}};
static const hl_cmd renew_read_cmd = {&hl_script_rw_renew, 1, {":rwr"}};
static const hl_cmd release_write_cmd = {&hl_script_rw_release, 1, {":rw"}};
static const hl_cmd release_read_cmd = {&hl_script_rw_release, 1, {":rwr"}};
static const hl_cmd unmark_cmd = {&hl_script_rw_release, 1, {":rww"}};
/* A starving wait's leave names only the marker and the queue's keys, which
 * exist together while it has a place: it runs while the slot migrates. */
static const hl_cmd leave_cmd = {&hl_script_rw_leave, 3, {":rww", ":rwq", ":rwp"}};

/* acquire(writer, readers, fence, marker; token, lease_ms, fence_ttl_s,
 * "r" | "w" marker_ms). `owner`
 * is the wait: its terms say the mode. */
static hl_req *rw_try_req(hl_name *n, const char *token, uint32_t lease_ms, hl_req_done done,
                          void *owner) {
    const hilock_wait *w = owner;
    uint64_t mark = 0;
    if (w->starving)
        return hl_queue_try_req(n, w->terms.write ? &join_cmd : &read_join_cmd, token, lease_ms, '0', done, owner);
    if (w->terms.write && !w->try_once) {
        mark = HL_RW_MARK_MS;
        uint64_t deadline = hl_wait_deadline(w);
        if (deadline != 0) { /* a writer that gives up stops blocking then */
            uint64_t now = hl_now_ms();
            uint64_t left = deadline > now ? deadline - now : 1;
            if (left < mark) mark = left;
        }
    }
    hl_req *r = hl_name_req(n, &acquire_cmd, HL_TOKEN_LEN + 1 + 3 * 20, done, owner);
    if (r == NULL) return NULL;
    hl_req_arg(r, token, HL_TOKEN_LEN, "", 0);
    hl_req_arg_u64(r, lease_ms);
    hl_req_arg_u64(r, n->c->cfg.fence_ttl_s);
    if (w->terms.write) {
        char num[24];
        int len = snprintf(num, sizeof(num), "%llu", (unsigned long long)mark);
        hl_req_arg(r, "w", 1, num, (size_t)len);
    } else {
        hl_req_arg(r, "r", 1, "", 0);
    }
    return r;
}

/* A starving writer's join: its reply is the queue's (see mutex.c). Else
 * {1, fence, more}: ours (more: a read grant, the next reader may go in at
 * once); {0, ms[, 1]}: refused, and the lock may be free in ms (1: or not,
 * but the writer's marker needs its refresh then). */
static int rw_try_parse(hilock_client *c, const redisReply *reply, hl_try *out) {
    long long v[3];
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 6) { /* a join's (hl_queue_try_parse) */
        int rc = hl_queue_try_parse(c, reply, out);
        out->rejoin = 0; /* a process has one place: nothing else to take back */
        return rc;
    }
    int rc = hl_prim_try_reply(c, reply, "the read-write lock's acquire script", 1, v);
    if (rc != 0) return rc;
    long long got = v[0], val = v[1];
    out->granted = got == 1;
    out->fence = out->granted && val > 0 ? (uint64_t)val : 0;
    out->more = out->granted && v[2] == 1;
    out->retry_ms = out->granted ? 0 : val > 0 ? (uint64_t)val : 1;
    out->refresh = !out->granted && v[2] == 1;
    return 0;
}

/* Reentrancy: the same owner's waits queued behind the winner; a read
 * grant serves only reads (a writer behind it was refused at its acquire:
 * see rw_acquire's upgrade check). */
static int rw_shares(const hilock_wait *w, const hilock_wait *o) {
    return w->terms.owner != NULL && o->terms.owner == w->terms.owner &&
           (w->terms.write || !o->terms.write);
}

/* release(writer or readers; token, channel, "w" or "r", PUBLISH or
 * SPUBLISH (added by net)): the key of the mode in `terms` only (see
 * release_write_cmd). */
static hl_req *rw_release_of(hl_name *n, const hl_cmd *cmd, const char *mode, const char *token,
                             hl_req_done done, void *owner) {
    hl_req *r = hl_prim_release_req(n, cmd, token, done, owner);
    if (r != NULL) hl_req_arg(r, mode, 1, "", 0);
    return r;
}

/* A writer's release may be answered 2 (hand it over: marked by a
 * starving writer). */
static hl_req *rw_release_req(hl_name *n, const char *token, const hl_terms *terms, hl_req_done done,
                              void *owner) {
    return terms->write ? rw_release_of(n, &release_write_cmd, "w", token, done, owner)
                        : rw_release_of(n, &release_read_cmd, "r", token, done, owner);
}

/* The handover answered TRYAGAIN (the slot is half moved): 'd', the
 * writer is deleted and the waiters told; the next starving try hands the
 * lock on. */
static hl_req *rw_release_lock_req(hl_name *n, const char *token, hl_req_done done, void *owner) {
    return rw_release_of(n, &release_write_cmd, "d", token, done, owner);
}

/* handover(the six keys; token, fence_ttl_s, channel, PUBLISH or
 * SPUBLISH (added by net)): also how a starving writer leaves its place. */
static hl_req *rw_handover_req(hl_name *n, const char *token, hl_req_done done, void *owner) {
    return hl_queue_release_req(n, &handover_cmd, token, done, owner);
}

/* Only a writer's release hands the lock over. */
static int rw_hands_over(const hl_terms *terms) {
    return terms->write;
}

/* renew(writer or readers; token, lease_ms, "w" or "r"): the hold's own key
 * only (see renew_write_cmd); the fence is not needed (no Redlock). */
static hl_req *rw_renew_req(hl_name *n, const hilock_hold *h, uint32_t lease_ms, hl_req_done done,
                            void *owner) {
    int write = h->terms.write;
    hl_req *r = hl_prim_renew_req(n, write ? &renew_write_cmd : &renew_read_cmd, h->token, lease_ms, done, owner);
    if (r != NULL) hl_req_arg(r, write ? "w" : "r", 1, "", 0);
    return r;
}

/* A wait that waited and gave up (cancelled, timed out, failed): a
 * starving one leaves its place (rw_leave.lua), and gives back a grant
 * that raced its end (the release of its token, on its mode's key); a
 * writer that had not starved gives back such a grant and takes its
 * marker away at once, so the readers it held off are told. Each request
 * names keys that exist together (see release_write_cmd). */
static void rw_abandon(hilock_wait *w) {
    hl_req *r = NULL;
    char tok[HL_TOKEN_LEN + 1];
    if (w->try_once || (!w->terms.write && !w->starving)) return;
    hl_release_token(w->name, hl_wait_token(w, tok), &w->terms, 0);
    if (w->starving) r = hl_prim_release_req(w->name, &leave_cmd, tok, hl_req_ignore, NULL);
    else r = rw_release_of(w->name, &unmark_cmd, "m", tok, hl_req_ignore, NULL);
    if (r != NULL) hl_name_submit(w->name, r);
}

static int rw_admit(const hilock_wait *w, const hilock_hold *mine);

static const char *rw_guard(const hl_terms *terms, char *kind) {
    *kind = terms->write ? 'h' : 'z';
    return terms->write ? ":rw" : ":rwr";
}

const hl_prim hl_rwlock = {
    .guard = rw_guard,
    .channel_suffix = ":rw:ch",
    .try_req = rw_try_req,
    .try_parse = rw_try_parse,
    .shares = rw_shares,
    .release_req = rw_release_req,
    .release_lock_req = rw_release_lock_req,
    .handover_req = rw_handover_req,
    .renew_req = rw_renew_req,
    .abandon = rw_abandon,
    .admit = rw_admit, /* no fence_req: no Redlock, refused at acquire */
    .bounded = hl_queue_every,
    .hands_over = rw_hands_over,
    .refresh_ms = HL_QUEUE_REFRESH_MS,
    .grant_msg = hl_queue_grant_msg,
    .granted_out = hl_queue_try_moot,
};

/* ---- The public API of the read-write lock --------------------------------- */

/* Would `o` (an owner asking for the write lock of n) wait behind its own
 * read: a read hold, or a read wait queued (not behind a write wait of the
 * same owner, whose grant serves both)? Then the write could only be
 * granted after that read is released, which the owner may never do while
 * it waits: an upgrade, refused. */
static int rw_upgrade(hilock_owner *o, const hl_name *n, const hilock_hold *mine) {
    if (mine != NULL) return !mine->terms.write;
    for (hl_link *l = n->waiters.next; l != &n->waiters; l = l->next) {
        const hilock_wait *q = HL_CONTAINER(l, hilock_wait, link);
        if (q->terms.owner == o) return !q->terms.write; /* its first wait decides */
    }
    return 0;
}

/* A write by an owner that reads is an upgrade: refused, never a deadlock.
 * Asked again when the wait is its name's head (core: hl_wait_admit): a
 * write queued behind its owner's write and read becomes an upgrade when
 * that first write ends without a grant and the read goes in alone. */
static int rw_admit(const hilock_wait *w, const hilock_hold *mine) {
    if (!w->terms.write || w->terms.owner == NULL || !rw_upgrade(w->terms.owner, w->name, mine))
        return 0;
    hl_set_error(&w->c->loop, "a reader cannot take the write lock (no upgrade)");
    return HILOCK_EINVAL;
}

static int rw_acquire(hilock_client *c, const char *name, const hilock_acquire_opts *opts,
                      int write, hilock_acquire_cb cb, void *data, hilock_wait **wait_out) {
    hl_terms ask = {0};
    ask.write = write != 0;
    return hl_prim_acquire(c, &hl_rwlock, name, opts, &ask, cb, data, wait_out);
}

int hilock_read_acquire(hilock_client *c, const char *name, const hilock_acquire_opts *opts,
                        hilock_acquire_cb cb, void *data, hilock_wait **wait_out) {
    return rw_acquire(c, name, opts, 0, cb, data, wait_out);
}

int hilock_write_acquire(hilock_client *c, const char *name, const hilock_acquire_opts *opts,
                         hilock_acquire_cb cb, void *data, hilock_wait **wait_out) {
    return rw_acquire(c, name, opts, 1, cb, data, wait_out);
}
