/* The core layer: the client, lock names, the shared waiter queue, and
 * holds with their watchdog. Primitives (src/prim) plug in through
 * hl_prim; nodes come from the topology (src/topo). See docs/ARCHITECTURE.md. */
#ifndef HILOCK_CORE_H
#define HILOCK_CORE_H

#include "topo/topo.h"

#define HL_TOKEN_LEN 32 /* hex of 128 bits */

typedef struct hl_name hl_name;
typedef struct hl_prim hl_prim;

/* ---- The client ----------------------------------------------------------- */

typedef struct hl_names {
    hl_name **buckets;           /* by channel: unique per primitive and key */
    size_t nbuckets, nnames;
} hl_names;

/* What the core counts for hilock_client_stats() (src/stats.c adds the
 * gauges it can walk, and the nodes' and connections' own counters). */
typedef struct hl_counts {
    uint64_t acquires, granted, timeouts, busy, cancels, failed;
    uint64_t errors[HILOCK_STATS_CODES];
    uint64_t releases, holds_lost, tries, renewals, renewals_late, wakeups, fallbacks;
    uint64_t waiters, holds;     /* gauges, kept as they change */
    hilock_histogram wait, handoff, hold;
} hl_counts;

void hl_histogram_add(hilock_histogram *h, uint64_t us);
/* A callback's status, counted by code. */
static inline void hl_count_status(hl_counts *k, int status) {
    if (status < 0 && -status < HILOCK_STATS_CODES) k->errors[-status]++;
}

struct hilock_client {
    hl_loop loop;                /* timers, deferred callbacks, errors, log */
    hl_topo topo;                /* the nodes, and which one serves a name */
    hl_names names;
    hilock_config cfg;           /* as given, with defaults; url/prefix not kept */
    char *prefix;
    size_t prefix_len;
    int closing;                 /* hilock_client_close has started */
    hl_link closers;             /* the callbacks of hilock_client_close() */
    hl_defer close_defer;
    hl_link holds;               /* every live hold */
    hl_link owners;
    hl_link observers;           /* every hilock_observer (prim/election.c) */
    hl_link multis;              /* every multi-lock not yet released (prim/multi.c) */
    uint64_t token_id, token_salt, token_seq; /* see hl_token_new */
    hl_counts counts;
    uint64_t late_warned_at;     /* the last late renewal logged (hl_log_due) */
    uint64_t batch_warned_at;    /* the last batch of renewals refused, logged */
    /* renew.c: the batches open for holds due soon, by slot in a Cluster,
     * else all at 0 (HL_SLOTS of them; NULL until the first). */
    struct hl_renew_batch **renew_open;
    hl_link all;                 /* in fork.c's list of every client */
};

/* The check at every public entry point that acts. */
static inline int hl_client_refuses(const hilock_client *c) {
    return c->loop.forked ? HILOCK_EFORK : c->loop.freeing || c->closing ? HILOCK_ECLOSED : 0;
}
/* A new token: its second half (the first is the client's id), unique in
 * the client; hl_token_text writes it out as the scripts get it, and
 * hl_token_of reads such text back (1: a token of this client). */
uint64_t hl_token_new(hilock_client *c);
void hl_token_text(const hilock_client *c, uint64_t token, char *out);
int hl_token_of(const hilock_client *c, const char *text, uint64_t *token);
/* The client's id: the first HL_CLIENT_ID_LEN characters of its tokens. */
#define HL_CLIENT_ID_LEN 16
void hl_client_id(const hilock_client *c, char *out);
void hl_close_progress(void *client);

/* ---- Names ---------------------------------------------------------------- */

enum { HL_SUB_NONE, HL_SUB_PENDING, HL_SUB_ACTIVE, HL_SUB_LEAVING };

/* A lock name as one primitive sees it: its waiters, its subscription, its
 * keys. Identified by its channel, which is the primitive's base key plus
 * the primitive's channel suffix (and, for a primitive whose messages are
 * each for one client, that client's id: hl_prim.client_channel), so a
 * semaphore and a mutex of the same name never share an entry. */
struct hl_name {
    hl_name *next_in_bucket;
    uint32_t hash;
    hilock_client *c;
    const hl_prim *prim;
    uint16_t slot;       /* the cluster slot of its keys */
    hl_link waiters;     /* FIFO of hilock_wait */
    size_t nwaiters;
    size_t refs;         /* holds and other users of its keys */
    size_t listeners;    /* holds that listen for revokes (hilock_hold_on_revoke),
                            and observers (hilock_observe): the name stays
                            subscribed for them */
    hl_link observers;   /* the election's observers (prim/election.c) */
    char *payload;       /* the election's value for this client's campaigns */
    size_t payload_len;
    int sub;             /* HL_SUB_* */
    hl_node *sub_node;   /* where its subscription was last sent */
    uint64_t unsettled_until; /* a server ended its subscription (its slot
                                 moved): its head tries every second until then */
    unsigned trying : 1; /* the head's try is in flight */
    unsigned woken : 1;  /* a wakeup came while trying */
    unsigned known_held : 1; /* the last try was answered: the lock is taken */
    unsigned fallback_lease : 1; /* the fallback timer is at the end of the
                                    holder's lease, not a refresh */
    uint32_t answers;    /* tries answered without error (see wait_seen_held) */
    /* The head's last try failed for a cause that passes (hl_err_passes):
     * its code, how many in a row (the backoff), and why, reported by the
     * waits that run out before a try succeeds. */
    int ride_err;
    uint8_t ride_failures;
    char *ride_why;
    /* The server's clock as the last try that reported it read it
     * (srv_ms), and when that try was sent (srv_at, ours): grants by
     * message are dated with it (see grant_time in engine.c). */
    uint64_t srv_at, srv_ms;
    uint64_t handover_until; /* a release of ours was answered 2 (hand it
                                over: hl_prim.handover_req) less than a
                                second before: the next ones send the
                                handover at once (ms) */
    uint64_t woke_us;    /* a release message came then, and no try has
                            been answered since (the handoff histogram) */
    hl_timer fallback;   /* the lock may have expired by then */
    hl_timer linger;     /* unsubscribe when it fires */
    size_t keylen;       /* the base key: the channel's first keylen bytes */
    size_t chlen;
    char *name;          /* the user's name (points into buf) */
    char buf[];          /* channel "\0" name "\0" */
};

static inline const char *hl_name_channel(const hl_name *n) { return n->buf; }
/* The channel without this client's id (hl_prim.client_channel): what the
 * scripts get, to name the channel of the client they write to. */
size_t hl_name_channel_base_len(const hl_name *n);
/* A hold of n starts (on) or stops listening for revokes on n's channel:
 * the name is subscribed while any does, waiters or not (engine.c). */
void hl_name_listen(hl_name *n, int on);
/* The node that serves n's keys, and the one that carries its channel. */
hl_node *hl_name_node(const hl_name *n);
hl_node *hl_name_sub_node(const hl_name *n);

/* The entry of `name` for primitive `p`, made if need be (NULL: no memory). */
hl_name *hl_name_get(hilock_client *c, const hl_prim *p, const char *name, size_t len);
hl_name *hl_name_by_channel(hilock_client *c, const char *ch, size_t len);
void hl_name_unref(hl_name *n);
/* Free the entry if nothing uses it any more. */
void hl_name_maybe_free(hl_name *n);
void hl_names_free_all(hilock_client *c);
/* Iterate: for (n = hl_names_first(c); n; n = hl_names_next(c, n)). Freeing
 * the current entry is allowed if the next one was taken first. */
hl_name *hl_names_first(hilock_client *c);
hl_name *hl_names_next(hilock_client *c, hl_name *n);

/* A script call on a name's keys: key i is the base key + suffix[i]. */
typedef struct hl_cmd {
    const hl_script *script;
    int nkeys;
    const char *suffix[6];
} hl_cmd;

/* A request for `cmd` on n's keys, with room for `tail` more argument
 * bytes (the caller appends them); routed and submitted by hl_name_submit. */
hl_req *hl_name_req(hl_name *n, const hl_cmd *cmd, size_t tail, hl_req_done done, void *owner);
void hl_name_submit(hl_name *n, hl_req *r);
void hl_name_submit_within(hl_name *n, hl_req *r, uint64_t ms);
/* Submit a request that sets n's lease (a try, a renewal): WAIT for the
 * configured replicas follows it, and a quorum (Redlock) counts it only
 * within lease_ms. */
void hl_name_submit_leased(hl_name *n, hl_req *r, uint32_t lease_ms);

/* ---- What waits and holds share -------------------------------------------- */

typedef struct hl_terms {
    hilock_owner *owner;   /* reentrancy, or NULL */
    hilock_lost_cb lost_cb;
    void *lost_data;
    uint32_t lease_ms;
    /* What the primitive counts, read by its try_req and shares (the
     * semaphore: `permits` of `permits_total`); 0 for the mutex. */
    uint32_t permits, permits_total;
    unsigned no_renew : 1;
    unsigned write : 1;    /* the read-write lock: a write wait or hold (else read) */
} hl_terms;

/* ---- Primitives ----------------------------------------------------------- */

/* A try's outcome: granted with a fence, or not, and when to look again. */
typedef struct hl_try {
    int granted;
    uint64_t fence;        /* granted: ours; else the holder's, if `holder` */
    uint64_t retry_ms;     /* not granted: the lock may be free by then */
    int refresh;           /* not granted: retry_ms is when what the try
                              keeps (a writer's marker) needs refreshing,
                              not a holder's lease end */
    /* granted, and more is free now (a semaphore with permits left, a
     * read-write lock's read grant): the next head tries at once instead of
     * waiting for a release. */
    int more;
    /* not granted, and never will be on these terms (a semaphore's count
     * differs from Redis's): this waiter ends with this error, the others
     * go on. 0 otherwise. */
    int refused;
    /* granted, and the lock was this token's already (the try renewed
     * it), if the primitive says; else it was taken now. */
    int renewed;
    /* The primitive's queue lost this client's places (hl_prim.joins):
     * every queued wait joins again. */
    int rejoin;
    /* The server's clock (ms) when the try ran, if the primitive says. */
    uint64_t server_ms;
    /* Not granted: the token that holds the lock and for how much longer
     * (ms), if the primitive says. One of this name's waits here may hold
     * it (a grant by message that was missed). */
    const char *holder;
    uint64_t holder_ms;
} hl_try;

/* A grant by message (hl_prim.grant_msg): the lock is `token`'s, with
 * `fence`, since `server_ms` by the server's clock, for `ttl_ms`. */
typedef struct hl_grant {
    char token[HL_TOKEN_LEN + 1];
    uint64_t fence, server_ms;
    uint32_t ttl_ms;
} hl_grant;

/* A primitive: its scripts and the decisions that are its own. The waiter
 * engine does the rest (queue, subscription, one try in flight, deadlines,
 * cancel, holds, watchdog). See docs/ARCHITECTURE.md, "A new primitive". */
struct hl_prim {
    const char *channel_suffix;
    /* Each message is for one client (the fair lock's grants): a client
     * listens on the channel suffix followed by its id, and the scripts,
     * given the channel without it, write to the grantee's client alone. A
     * grant then wakes one process, not every process that waits on the
     * name (on a small machine those wakeups run before the grantee's). */
    int client_channel;
    /* The try for a waiter: a request on n's keys with `token` and `lease`. */
    hl_req *(*try_req)(hl_name *n, const char *token, uint32_t lease_ms, hl_req_done done,
                       void *owner);
    /* Read a try's reply into *out; 0, or an error code. */
    int (*try_parse)(hilock_client *c, const redisReply *reply, hl_try *out);
    /* After head `w` was granted: may `o`, queued behind it, share it? */
    int (*shares)(const hilock_wait *w, const hilock_wait *o);
    /* The release of what `token` may hold, for a hold or wait of `terms`
     * (its mode: a primitive may keep modes in different keys); terms is
     * NULL only over a quorum, where no primitive has modes (a primitive
     * runs there only with fence_req). */
    hl_req *(*release_req)(hl_name *n, const char *token, const hl_terms *terms, hl_req_done done,
                           void *owner);
    /* NULL, or the release of a hold on the lock's key alone, for a slot
     * half moved: sent when release_req, which names keys that need not
     * exist beside the lock, was answered TRYAGAIN (some of them missing on
     * the node that has the lock). It frees the lock and wakes the
     * waiters, whose tries do the rest (the fair lock's: grant the queue's
     * first live entry once the slot has moved). */
    hl_req *(*release_lock_req)(hl_name *n, const char *token, hl_req_done done, void *owner);
    /* NULL, or the release of a lock that release_req answered 2 (a reply
     * of 2 means: the lock is still ours, and must be handed over; the
     * mutex's, marked by a starving wait), sent then on the keys it needs;
     * also how a starving wait leaves its place (hl_handover_token). */
    hl_req *(*handover_req)(hl_name *n, const char *token, hl_req_done done, void *owner);
    /* The renewal of hold h (its token, fence, terms) for lease_ms. */
    hl_req *(*renew_req)(hl_name *n, const hilock_hold *h, uint32_t lease_ms, hl_req_done done,
                         void *owner);
    /* NULL, or the renewal of `count` holds of this primitive whose keys
     * share a slot, each for its renew_lease, in one call answered by an
     * array of what renew_req answers, in their order (renew.c). Never
     * over a quorum. */
    hl_req *(*renew_many_req)(hilock_hold *const *h, int count, hl_req_done done, void *owner);
    /* Redlock: raise n's fence counter to at least `fence` (fire and forget). */
    hl_req *(*fence_req)(hl_name *n, uint64_t fence, hl_req_done done, void *owner);
    /* Optional: queued wait `w` ends without a grant (cancelled, timed out,
     * failed, busy): undo what its tries may have left in Redis besides a
     * lock (the read-write lock's "writer waiting" marker). Not called
     * while the client is being freed. */
    void (*abandon)(hilock_wait *w);
    /* Optional: may new wait `w` (its terms filled) start, given the live
     * hold of its owner on the name (`mine`, or NULL)? 0, or an error code
     * (a semaphore hold cannot grow; a reader cannot upgrade). */
    int (*admit)(const hilock_wait *w, const hilock_hold *mine);
    /* A queue in Redis (the fair lock): every wait joins it on arrival,
     * so a wait that is not its name's head sends its first try at once
     * too (a join, answered for that wait alone); any queued wait may be
     * granted, by a try or by message; a wait that ends without its own
     * token granted (also one served by its owner's grant) is abandoned. */
    int joins;
    /* Optional: bounded waiting (the mutex; the read-write lock): do waits
     * with these terms take part? A wait
     * that has waited the client's starve_ms is then marked starving
     * (w->starving, never over a quorum nor for a try-once) when its next
     * try is built, and the primitive's try_req then takes a place in its
     * queue in Redis, which the release hands the lock to (by a message
     * that grant_msg reads); its abandon leaves that place. A head that is
     * not starving yet sleeps no longer than until it is. */
    int (*bounded)(const hl_terms *terms);
    /* Optional: may the release of a hold with these terms be answered 2
     * (handover_req)? NULL: every hold's, if the primitive has a
     * handover_req (the read-write lock: a writer's, not a reader's). */
    int (*hands_over)(const hl_terms *terms);
    /* A name whose head has a place in the queue (every wait of a
     * primitive that joins; a starving one) tries at least this often
     * (ms; 0: no bound): the tries keep its process's entries alive. */
    uint32_t refresh_ms;
    /* Optional: read a message on the name's channel. 1: a grant, *out
     * filled; 0: a wakeup (the head tries, as after a release). */
    int (*grant_msg)(const char *data, size_t len, hl_grant *out);
    /* Optional: a wait was granted by message while a try of its token,
     * `r`, is out (held back by net's retry timer after NOREPLICAS,
     * LOADING, TRYAGAIN or CLUSTERDOWN, or not yet run): make r harmless
     * should it run after the hold's release (the queue's try: it must not
     * take a place again for a token whose wait is over). */
    void (*granted_out)(hl_req *r);
    /* Which key says that a hold of these terms is still its token's,
     * and how to read it there (the guard of hilock_hold_eval, guard.c):
     * *kind 's', a string: the token, then nothing or a space; 'h', a
     * hash whose field "token" is it; 'z', a sorted set of token -> end of
     * its lease (the server's Unix time in ms). Its key's suffix. */
    const char *(*guard)(const hl_terms *terms, char *kind);
    /* Its holds may be asked to release (hilock_revoke: the mutex's
     * scripts know the mark v). */
    int revocable;
    /* Optional: the name's channel carried `msg` (len bytes), or the name
     * was (re)subscribed (msg NULL: what went by meanwhile was not heard;
     * the election's observers read the leader again). */
    void (*heard)(hl_name *n, const char *msg, size_t len);
};

/* ---- Waits ---------------------------------------------------------------- */

enum { HL_WAIT_QUEUED, HL_WAIT_DONE };

/* A wait's bytes are most of a waiting client's memory (bench/scale.c:
 * 100,000 waiters, BENCHMARKS.md): 184 bytes is a 192-byte malloc chunk
 * with glibc's 8-byte header. A field that grows it past that costs
 * 16 bytes a waiter; make that a choice (and move the figure in
 * BENCHMARKS.md), not an accident. */
struct hilock_wait {
    /* A wait is in one list at a time: in name->waiters while queued
     * (HL_WAIT_QUEUED: wait_enqueue links it, hl_wait_finish unlinks it
     * before it queues the callback), in the loop's deferred queue from
     * then until wait_run (the loop unlinks an item before it runs it;
     * wait_run may queue it again, wait_retry). */
    union {
        hl_link link;      /* in name->waiters while queued */
        hl_defer defer;    /* its callback, queued once it is done */
    };
    hl_name *name;
    hilock_client *c;
    hilock_acquire_cb cb;
    void *data;
    hl_terms terms;
    hl_timer timer;        /* the wait deadline: timer.when is when it ends
                              (monotonic ms, hl_wait_deadline), 0 = never */
    uint64_t started_us;   /* when hilock_acquire() was called (us; /1000 is
                              hl_now_ms()'s clock: hl_wait_started_ms) */
    uint64_t token;        /* the second half of its token (hl_token_new);
                              the first is the client's id: hl_wait_token */
    hl_req *req;           /* the try in flight, if any */
    hilock_hold *hold;     /* the outcome (a try may still be out then) */
    uint32_t answers_mark; /* n->answers before this wait saw the lock held */
    int16_t status;        /* the outcome: 0 or a HILOCK_E* code */
    unsigned state : 2;    /* HL_WAIT_* */
    unsigned try_once : 1;
    unsigned cb_done : 1;
    unsigned tried : 1;    /* a try of it was sent (abandon has work) */
    unsigned joining : 1;  /* req is its join, not its name's try (hl_prim.joins) */
    unsigned own_grant : 1;/* granted with its own token (not shared) */
    unsigned placed : 1;   /* a try or join of its token was answered: it has
                              had a place in the queue (hl_prim.joins; read
                              by the prim's try_req) */
    unsigned rejoining : 1;/* the join being built goes to the queue's tail
                              (hl_try.rejoin; read by the prim's try_req) */
    unsigned starving : 1; /* it waited starve_ms: its tries go through the
                              queue (hl_prim.bounded; read by try_req) */
    unsigned unknown : 1;  /* a try of its token failed unanswered and may have
                              run: released if the wait ends without it */
};
_Static_assert(sizeof(void *) != 8 || sizeof(struct hilock_wait) <= 184,
               "hilock_wait outgrew its 192-byte malloc chunk (see above)");

/* When w ends (monotonic ms; 0: never). */
static inline uint64_t hl_wait_deadline(const hilock_wait *w) { return w->timer.when; }
/* When hilock_acquire() made w (monotonic ms, hl_now_ms()'s clock). */
static inline uint64_t hl_wait_started_ms(const hilock_wait *w) { return w->started_us / 1000u; }
/* w's token as text, HL_TOKEN_LEN hex digits and a NUL, in out (returned). */
const char *hl_wait_token(const hilock_wait *w, char *out);

/* Queue a new wait (filled by the caller) on its name and try if it is
 * alone. A reentrant grant (hold != NULL) is delivered without a try. */
void hl_wait_start(hilock_wait *w, hilock_hold *reentrant);
/* May `w` (its terms filled) wait beside its owner's live hold of its name
 * (hl_prim.admit)? 0 and that hold, if it serves w, in *mine (else NULL),
 * or the primitive's error. Asked at the acquire, and again before each
 * try of a head with an owner. */
int hl_wait_admit(const hilock_wait *w, uint64_t now, hilock_hold **mine);
void hl_wait_finish(hilock_wait *w, int status, hilock_hold *h);
int hl_wait_cancel(hilock_wait *w);
/* hilock_owner_free(): the waits of `o`, queued or with their outcome
 * not yet delivered, go on without an owner. */
void hl_waits_forget_owner(hilock_client *c, const hilock_owner *o);
/* Client teardown: every queued wait ends with HILOCK_ECANCELED. */
void hl_waits_cancel_all(hilock_client *c);
/* What the topology's subscriber side reports (hl_sub_events). */
extern const hl_sub_events hl_engine_sub_events;

/* ---- Holds ---------------------------------------------------------------- */

/* A hold that stands for several: hilock_acquire_multi's (prim/multi.c)
 * hands the caller the hold of its first name, whose group takes the
 * public calls that concern them all. Such a hold's own release leaves it
 * to the group to free, once the caller's callback has run. */
typedef struct hl_group hl_group;
struct hl_group {
    int (*release)(hl_group *g, hilock_release_cb cb, void *data);
    int (*extend)(hl_group *g, uint32_t lease_ms, hilock_release_cb cb, void *data);
    int (*lost)(const hl_group *g); /* is any of them lost? */
};

struct hilock_hold {
    hl_link link;          /* in client->holds */
    hl_link olink;         /* in owner->holds */
    hl_defer lost_defer;
    hilock_client *c;
    hl_name *name;
    hl_terms terms;
    uint64_t fence;
    uint64_t confirmed;    /* send time of the last acquire/renewal Redis confirmed */
    uint32_t confirmed_lease; /* the lease that one set (Redis counts from it) */
    uint32_t epoch;      /* the master that confirmed it (hl_topo.epoch, Sentinel) */
    uint32_t renew_lease;  /* the lease of the renewal in flight */
    uint64_t waited_ms;    /* from hilock_acquire() to the grant */
    uint64_t granted_us;   /* when (the hold histogram) */
    hl_timer watchdog;
    struct hl_renewal *renew; /* renewal in flight (hold.c) */
    hl_link extends;       /* hilock_hold_extend() requests in flight */
    unsigned count;
    int lost_why;
    int renew_refused;     /* the last renewal's ACL refusal (HILOCK_EAUTH), or 0 */
    hl_link evals;         /* hilock_hold_eval() requests in flight (guard.c) */
    hilock_revoke_cb revoke_cb; /* hilock_hold_on_revoke(), or NULL (revoke.c) */
    void *revoke_data;
    hl_defer revoke_defer;
    hl_group *group;       /* the multi-lock it stands for, or NULL */
    unsigned lost : 1;
    unsigned releasing : 1;
    unsigned revoke_asked : 1; /* a revoke asked it to release (revoke.c) */
    unsigned revoke_told : 1;  /* ... and its revoke_cb has been called */
    unsigned delivered : 1; /* an acquire callback has had it */
    char token[HL_TOKEN_LEN + 1];
};

struct hilock_owner {
    hl_link link;          /* in client->owners */
    hl_link holds;
    hilock_client *c;
};

/* A hold of `w`'s terms: Redis set its key for lease_ms no earlier than
 * sent_at. */
hilock_hold *hl_hold_new(hl_name *n, const char *token, uint64_t fence, uint64_t sent_at,
                         uint32_t lease_ms, const hilock_wait *w);
void hl_hold_free(hilock_hold *h);
/* hilock_release() and hilock_hold_extend() of this hold alone (a part
 * of a group, or the group's first). */
int hl_hold_release(hilock_hold *h, hilock_release_cb cb, void *data);
int hl_hold_extend(hilock_hold *h, uint32_t lease_ms, hilock_release_cb cb, void *data);
/* The instant after which the key may be another client's: the send time of
 * the last acquire or renewal that Redis confirmed, plus the lease. */
/* When the hold stops believing it holds: its last confirmed lease, less
 * the allowance for a server clock that runs fast (hl_drift_ms), and under
 * Sentinel no later than the sentinels vouch for its master. */
static inline uint64_t hl_hold_expiry(const hilock_hold *h) {
    uint64_t until = h->confirmed + h->confirmed_lease -
                     hl_drift_ms(h->c->topo.net.clock_rate_ppm, h->confirmed_lease);
    uint64_t vouched = hl_topo_vouched_until(&h->c->topo, h->epoch, h->terms.lease_ms);
    return vouched < until ? vouched : until;
}
/* Whether a callback may still be told the lock is held at `now`. */
static inline int hl_hold_live(const hilock_hold *h, uint64_t now) {
    return !h->lost && now < hl_hold_expiry(h);
}
void hl_hold_mark_lost(hilock_hold *h, int why);
/* Was h's key set for less than its lease (a grant by message: the fair
 * lock's claim window), and not yet renewed to it? */
static inline int hl_hold_unclaimed(const hilock_hold *h) { return h->confirmed_lease < h->terms.lease_ms; }
/* One acquisition of `h` was never delivered: drop its level, and the hold
 * itself (releasing the key) when it was the last. */
void hl_hold_drop(hilock_hold *h);
void hl_hold_begin_release(hilock_hold *h);
/* A live hold of `o` on `n` (reentrancy), or NULL. */
hilock_hold *hl_owner_hold(hilock_owner *o, hl_name *n, uint64_t now);
/* hl_release_token without a release message (Redlock's undo of a try
 * short of a quorum: the lock was not free for anyone). */
void hl_release_quiet(hl_name *n, const char *token, const hl_terms *terms);
/* Redlock: make every node's next fence of `n` larger than `fence` (the
 * nodes' counters differ; a grant's fence is the largest of its quorum's).
 * Sent ahead of each renewal and of the release, on the same connections,
 * so that a node the next holder takes after a release has it; nothing in
 * other modes. */
void hl_fence_raise(hl_name *n, uint64_t fence);
/* Release a lock that `token` (of a hold or wait of `terms`) may hold, with
 * nobody to tell. unknown_lease_ms > 0: the try's outcome is unknown; keep
 * at it for that long. */
void hl_release_token(hl_name *n, const char *token, const hl_terms *terms, uint32_t unknown_lease_ms);
/* hl_release_token with the primitive's handover_req: a starving wait
 * that ends leaves its place (and hands on a lock granted to it meanwhile). */
void hl_handover_token(hl_name *n, const char *token);
/* A revoke asked hold h to release (a renewal answered so, or a message
 * named its token): its revoke callback runs once, deferred (revoke.c). */
void hl_hold_revoke_asked(hilock_hold *h);
/* A revoke message on n's channel named `token`. */
void hl_holds_revoke_msg(hl_name *n, const char *token, size_t len);
/* The hold is going: it stops listening, its callback is not run. */
void hl_hold_revoke_end(hilock_hold *h);
/* The hold is going: its evals in flight forget it (guard.c). */
void hl_hold_forget_evals(hilock_hold *h);
/* Client close: release every hold in Redis. */
void hl_holds_release_all(hilock_client *c);
void hl_holds_free_all(hilock_client *c);

/* ---- Renewals (hold.c, renew.c) -------------------------------------------- */

#define HL_SLOTS 16384
#define HL_RENEW_BATCH 100      /* hilock_config.renew_batch's default */
#define HL_RENEW_BATCH_MAX 1000
#define HL_RENEW_WINDOW_MS 100  /* how early a renewal may go to share a call */
/* A hold's renewal, from its watchdog's turn to its answer; hold.c. */
typedef struct hl_renewal hl_renewal;
/* The hold it renews; NULL once the hold has gone. */
hilock_hold *hl_renewal_hold(const hl_renewal *rn);
/* Send it alone (the primitive's renew_req). */
void hl_renewal_send(hl_renewal *rn);
/* The lease a renewal of h sent now asks for (an extend's still out, else h's). */
uint32_t hl_hold_renew_lease(const hilock_hold *h);
/* Its answer (reply NULL when err != 0): the hold is renewed, lost, or
 * tried again at its watchdog's next turn. Frees rn. */
void hl_renewal_answer(hl_renewal *rn, hl_req *r, const redisReply *reply, int err);
/* It was never sent: the watchdog tries again at its next turn. Frees rn. */
void hl_renewal_drop(hl_renewal *rn);
/* How much earlier than its own time h's renewal may go to share a call
 * with others (0: it goes alone). */
uint32_t hl_renew_window(const hilock_hold *h);
/* Put rn in the open batch of its slot, sent `window` ms from now at the
 * latest (what is left of its hl_renew_window after a late watchdog; 0:
 * the batch goes now). 0, or -1 when out of memory (nothing done). */
int hl_renew_join(hl_renewal *rn, uint32_t window);
/* Client teardown: free the batches not sent. */
void hl_renew_batches_free(hilock_client *c);

/* Debug builds (-DHILOCK_DEBUG): abort if a name with waiters has neither a
 * try in flight nor a timer that will retry (a stranded waiter). */
#ifdef HILOCK_DEBUG
void hl_name_check(const hl_name *n);
void hl_names_check(hilock_client *c);
#else
static inline void hl_name_check(const hl_name *n) { (void)n; }
static inline void hl_names_check(hilock_client *c) { (void)c; }
#endif

/* ---- Keys (keys.c) and structs (client.c) ---------------------------------- */

size_t hl_tag_len(const char *name, size_t len);
size_t hl_key_write(char *out, const char *prefix, size_t plen, const char *name, size_t len);
int hl_prefix_valid(const char *prefix);
uint16_t hl_crc16(const char *buf, size_t len);
int hl_struct_import(void *to, size_t size, const void *from, size_t from_size);
void hl_struct_export(void *to, size_t size, const void *d, size_t dsize);
void hl_fork_watch(hilock_client *c);
void hl_fork_unwatch(hilock_client *c);

#endif
