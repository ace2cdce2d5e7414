/* The primitives: each is a set of scripts (src/prim/lua) and an hl_prim
 * for the waiter engine. Today: the mutex, the counting semaphore, the
 * read-write lock and the fair lock. */
#ifndef HILOCK_PRIM_H
#define HILOCK_PRIM_H
#include "core/core.h"

extern const hl_prim hl_mutex, hl_semaphore;
extern const hl_script hl_script_mutex_acquire, hl_script_mutex_join, hl_script_mutex_release,
    hl_script_mutex_handover, hl_script_mutex_renew, hl_script_mutex_renew_many,
    hl_script_mutex_break, hl_script_mutex_fence, hl_script_mutex_check,
    hl_script_mutex_revoke, hl_script_mutex_acquire_all;
extern const hl_script hl_script_sem_acquire, hl_script_sem_release, hl_script_sem_renew,
    hl_script_sem_join, hl_script_sem_leave;

/* An acquire of primitive `p` (acquire.c): checks, a wait whose terms are
 * the options plus what `ask` adds (the semaphore's permits, the
 * read-write lock's mode; NULL for the mutex), reentrancy (p->admit), and
 * hl_wait_start(). A primitive without fence_req does not run over
 * Redlock. The public acquire functions are this with their primitive. */
int hl_prim_acquire(hilock_client *c, const hl_prim *p, const char *name,
                    const hilock_acquire_opts *opts, const hl_terms *ask,
                    hilock_acquire_cb cb, void *data, hilock_wait **wait_out);

/* hl_prim.shares for a primitive whose waits share a hold with its
 * owner's (the mutex, the fair lock, the election): o is served by w's
 * grant when both have w's owner. */
int hl_prim_same_owner(const hilock_wait *w, const hilock_wait *o);

/* A try's reply, {a, b[, c]}: a and b integers, and c, when `third` is
 * set and it is there, an integer too (the mutex's third is the holder's
 * token, left alone). Fills v[0..2] (v[2] = 0 when absent). 0, the error
 * of an error reply, or HILOCK_EPROTO for another shape ("unexpected reply
 * to <what>"). */
int hl_prim_try_reply(hilock_client *c, const redisReply *reply, const char *what, int third,
                      long long v[3]);

/* The TTL of the lock key of a hold or try for lease_ms: the lease, and
 * the client's lock-delay after it (hilock_config.lock_delay_ms; the mutex
 * and the fair lock). The hold itself counts on the lease alone. */
static inline uint32_t hl_key_ttl(const hl_name *n, uint32_t lease_ms) {
    return lease_ms + n->c->cfg.lock_delay_ms;
}

/* The release every primitive sends: cmd(keys; token, channel, PUBLISH or
 * SPUBLISH (added by net)), to every node of a quorum. */
hl_req *hl_prim_release_req(hl_name *n, const hl_cmd *cmd, const char *token, hl_req_done done,
                            void *owner);
/* The renewal: cmd(keys; token, lease_ms), with room for one more number. */
hl_req *hl_prim_renew_req(hl_name *n, const hl_cmd *cmd, const char *token, uint32_t lease_ms,
                          hl_req_done done, void *owner);
extern const hl_prim hl_rwlock;
extern const hl_script hl_script_rw_acquire, hl_script_rw_release, hl_script_rw_renew,
    hl_script_rw_join, hl_script_rw_read_join, hl_script_rw_handover, hl_script_rw_leave;
extern const hl_prim hl_fair;
extern const hl_prim hl_election;
extern const hl_script hl_script_election_acquire, hl_script_election_release,
    hl_script_election_renew, hl_script_election_leader;
/* The client closes or is freed: every observer's last call (HILOCK_ECANCELED)
 * is queued; then, at the end, what is left of them is freed. */
void hl_observers_end(hilock_client *c);
void hl_observers_free_all(hilock_client *c);
/* The client is freed: the multi-locks left (their holds go with it). */
void hl_multis_free_all(hilock_client *c);

/* ---- The queue in Redis (queue.c, lua/_queue.lua) ---------------------------
 * The fair lock's waits, and the starving ones of the mutex, the
 * read-write lock and the semaphore, have a place in a queue in Redis,
 * which the release hands the lock to (the semaphore's first place takes
 * its permits itself). */

/* A waiting process's head tries at least this often while it has a place:
 * _queue.lua's ALIVE_MS (5000) must leave room for a few missed tries. */
#define HL_QUEUE_REFRESH_MS 1000u
/* A try in the queue: cmd(lock, queue, clients, fence; token, lease_ms,
 * fence_ttl_s, mode, the channel without a client's id, PUBLISH or
 * SPUBLISH (added by net)); mode as _queue_try.lua reads it. */
hl_req *hl_queue_try_req(hl_name *n, const hl_cmd *cmd, const char *token, uint32_t lease_ms,
                         char mode, hl_req_done done, void *owner);
/* hl_prim.bounded of the primitives whose every wait takes part in
 * bounded waiting (the mutex, the read-write lock, the semaphore). */
int hl_queue_every(const hl_terms *terms);
/* hl_prim.granted_out: the try out for a wait granted by message becomes
 * a try once, which never takes a place again. */
void hl_queue_try_moot(hl_req *r);
/* The release: cmd(lock, queue, clients, fence; token, fence_ttl_s, the
 * channel without a client's id, PUBLISH or SPUBLISH (added by net)), to
 * every node of a quorum; also how a wait leaves its place. */
hl_req *hl_queue_release_req(hl_name *n, const hl_cmd *cmd, const char *token, hl_req_done done,
                             void *owner);
/* Its reply, {granted, n, now, holder, its fence, flags}: ours with fence
 * n (flags & 1: ours already, renewed; flags & 4: a read grant, the next
 * reader may try at once), or held by `holder` for n ms more; flags & 2:
 * this client's other places were lost. */
int hl_queue_try_parse(hilock_client *c, const redisReply *reply, hl_try *out);
/* A grant by message, "g TOKEN FENCE NOW_MS CLAIM_MS": 1 and *out filled,
 * or 0 (another message: a wakeup). */
int hl_queue_grant_msg(const char *data, size_t len, hl_grant *out);
extern const hl_script hl_script_fair_acquire, hl_script_fair_release, hl_script_fair_renew,
    hl_script_fair_release_lock;

#endif
