/* Private declarations shared by the library's modules. */
#ifndef HILOCK_INTERNAL_H
#define HILOCK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include "hilock/hilock.h"

#define HL_TOKEN_LEN 32 /* hex of a random 128-bit uuid */

/* ---- Intrusive doubly linked list (circular, with a sentinel) ---------- */

typedef struct hl_link {
    struct hl_link *prev, *next;
} hl_link;

#define HL_CONTAINER(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

static inline void hl_list_init(hl_link *l) { l->prev = l->next = l; }
static inline int hl_list_empty(const hl_link *l) { return l->next == l; }
static inline int hl_linked(const hl_link *n) { return n->next != NULL && n->next != n; }
static inline void hl_list_push(hl_link *l, hl_link *n) {
    n->prev = l->prev; n->next = l;
    l->prev->next = n; l->prev = n;
}
static inline void hl_list_push_head(hl_link *l, hl_link *n) {
    n->next = l->next; n->prev = l;
    l->next->prev = n; l->next = n;
}
static inline void hl_list_remove(hl_link *n) {
    n->prev->next = n->next; n->next->prev = n->prev;
    n->prev = n->next = n;
}

/* ---- Time and timers ---------------------------------------------------- */

uint64_t hl_now_ms(void);

/* A timer in the client's heap. One loop timer drives the whole heap, so a
 * hundred thousand waiters cost no loop events. */
typedef struct hl_timer {
    uint64_t when;   /* monotonic ms */
    size_t slot;     /* 1 + index in the heap; 0 when not armed */
    void (*cb)(struct hl_timer *t);
} hl_timer;

void hl_timer_start(hilock_client *c, hl_timer *t, uint64_t delay_ms);
void hl_timer_stop(hilock_client *c, hl_timer *t);
int hl_timer_reserve(hilock_client *c, size_t more);
static inline int hl_timer_armed(const hl_timer *t) { return t->slot != 0; }

/* ---- Deferred callbacks ------------------------------------------------- */

/* A user callback waiting for the next loop turn, run by its own handler
 * (as nginx posts events): cancel = 1 when client_free ends it, which then
 * owes the user HILOCK_ECANCELED or nothing. The handler may free the item. */
typedef struct hl_defer hl_defer;
struct hl_defer {
    hl_link link;
    void (*run)(hl_defer *d, int cancel);
};

void hl_defer_push(hilock_client *c, hl_defer *d);
void hl_defer_cancel(hl_defer *d);

/* ---- URL ---------------------------------------------------------------- */

typedef struct hl_url {
    char *host;   /* TCP host, or NULL for a unix socket */
    int port;
    char *path;   /* unix socket path, or NULL */
    char *user;   /* ACL user, or NULL */
    char *pass;   /* password, or NULL */
    int db;
} hl_url;

int hl_url_parse(const char *s, hl_url *u);
void hl_url_free(hl_url *u);

/* ---- Keys --------------------------------------------------------------- */

/* Length of the hash tag for `name` (after escaping). */
size_t hl_tag_len(const char *name, size_t len);
/* Write prefix{tag} into out (which has room for plen + 2 + taglen + 1). */
size_t hl_key_write(char *out, const char *prefix, size_t plen,
                    const char *name, size_t len);
int hl_prefix_valid(const char *prefix);
uint16_t hl_crc16(const char *buf, size_t len);

/* ---- Scripts (embedded from src/lua at build time) --------------------- */

typedef struct hl_script {
    const char *name, *body, *sha;
} hl_script;

extern const hl_script hl_script_acquire, hl_script_release, hl_script_renew, hl_script_break;

/* ---- Connections and requests ------------------------------------------ */

enum { HL_CONN_DOWN, HL_CONN_CONNECTING, HL_CONN_HANDSHAKE, HL_CONN_READY };

typedef struct hl_conn {
    hilock_client *c;
    redisAsyncContext *ac;
    int is_sub;
    int state;
    int failures;       /* consecutive failed attempts, for the backoff */
    int last_err;       /* HILOCK_ECONN, HILOCK_EPROTO, HILOCK_EAUTH... */
    int handshake_left; /* AUTH/SELECT replies still due */
    hl_timer retry;     /* reconnect backoff */
    hl_timer connect_to;/* connect timeout */
    hl_link queue;      /* requests waiting for the connection */
    size_t inflight;    /* requests sent and not yet answered */
} hl_conn;

typedef struct hl_req hl_req;
/* The outcome of a request: a reply (never an error reply for NOSCRIPT),
 * or reply == NULL and err < 0. */
typedef void (*hl_req_done)(hl_req *r, redisReply *reply, int err);

struct hl_req {
    hl_link link;              /* in conn->queue while unsent */
    hl_link all;               /* in client->reqs while alive */
    hilock_client *c;
    const hl_script *script;
    hl_req_done done;
    void *owner;               /* waiter, hold or release op */
    struct hl_name *name;      /* keys come from here (a ref is held) */
    char token[HL_TOKEN_LEN + 1];
    uint32_t lease_ms;
    uint64_t submitted_at;     /* the key's TTL started no earlier */
    hl_timer deadline;
    hl_timer backoff;          /* re-send after LOADING */
    unsigned sent : 1;         /* hiredis holds a callback for it */
    unsigned finished : 1;     /* `done` has run */
    unsigned use_eval : 1;     /* the server lacked the script: send EVAL */
    unsigned ever_sent : 1;    /* it may have reached Redis */
    unsigned lost_reply : 1;   /* a send of it may have run, unanswered */
    unsigned rounds : 2;       /* cleanup releases sent after an unknown outcome */
    unsigned fail_fast : 1;    /* a try-once: a failed connection attempt ends it */
};

int hl_conn_init(hilock_client *c, hl_conn *k, int is_sub);
void hl_conn_connect(hl_conn *k);
void hl_conn_teardown(hl_conn *k);
void hl_conn_cancel_queue(hl_conn *k);
void hl_reqs_cancel_all(hilock_client *c);
/* Queue or send a script request; its `done` runs exactly once. */
void hl_req_submit(hilock_client *c, hl_req *r);
/* The same with its own deadline (ms from now). */
void hl_req_submit_within(hilock_client *c, hl_req *r, uint64_t ms);
hl_req *hl_req_new(hilock_client *c, const hl_script *s, struct hl_name *n,
                   const char *token, uint32_t lease_ms, hl_req_done done, void *owner);
int hl_reply_error(hilock_client *c, const redisReply *reply);

/* Subscriber side: (un)subscribe a name's channel. */
void hl_sub_send(hilock_client *c, struct hl_name *n, int subscribe);

/* ---- Names and the waiter engine ---------------------------------------- */

enum { HL_SUB_NONE, HL_SUB_PENDING, HL_SUB_ACTIVE, HL_SUB_LEAVING };

typedef struct hl_name {
    struct hl_name *next_in_bucket;
    uint32_t hash;
    hilock_client *c;
    hl_link waiters;     /* FIFO of hilock_wait */
    size_t nwaiters;
    size_t refs;         /* holds and requests using the keys */
    int sub;             /* HL_SUB_* */
    unsigned trying : 1; /* the head's try is in flight */
    unsigned woken : 1;  /* a wakeup came while trying */
    unsigned resub : 1;  /* subscribe again once the unsubscribe is confirmed */
    unsigned known_held : 1; /* the last try was answered: the lock is taken */
    uint32_t answers;    /* tries answered without error (see hl_wait_seen_held) */
    hl_timer fallback;   /* the lock may have expired by then */
    hl_timer linger;     /* unsubscribe when it fires */
    size_t keylen;       /* strlen of the lock key */
    char *name;          /* the user's name (points into buf) */
    char buf[];          /* "P{T}" "\0" "P{T}:fence" "\0" "P{T}:ch" "\0" name "\0" */
} hl_name;

static inline const char *hl_name_key(const hl_name *n) { return n->buf; }
static inline const char *hl_name_fence(const hl_name *n) { return n->buf + n->keylen + 1; }
static inline const char *hl_name_channel(const hl_name *n) { return n->buf + 2 * n->keylen + 8; }

hl_name *hl_name_get(hilock_client *c, const char *name, size_t len);
hl_name *hl_name_by_channel(hilock_client *c, const char *ch, size_t len);
void hl_name_unref(hl_name *n);
void hl_name_maybe_free(hl_name *n);
void hl_names_free_all(hilock_client *c);

/* Engine events */
void hl_engine_kick(hl_name *n);                 /* message, subscribe ack, timer */
void hl_engine_sub_ready(hilock_client *c);      /* subscriber (re)connected */
void hl_engine_sub_lost(hilock_client *c);       /* subscriber dropped */
void hl_engine_sub_ack(hl_name *n, int subscribed);

enum { HL_WAIT_QUEUED, HL_WAIT_DONE };

struct hilock_wait {
    hl_link link;          /* in name->waiters while queued */
    hl_defer defer;
    hl_name *name;
    hilock_client *c;
    hilock_acquire_cb cb;
    void *data;
    hilock_owner *owner;
    hilock_lost_cb lost_cb;
    void *lost_data;
    hl_timer timer;        /* the wait deadline */
    uint64_t deadline_at;  /* when it ends (monotonic ms); 0 = never */
    uint64_t started_at;   /* when hilock_acquire() was called */
    uint32_t answers_mark; /* n->answers before this wait saw the lock held */
    hl_req *req;           /* the try in flight, if any */
    hilock_hold *hold;     /* the outcome */
    int status;
    uint32_t lease_ms;
    unsigned state : 2;
    unsigned try_once : 1;
    unsigned no_renew : 1;
    unsigned cb_done : 1;
    char token[HL_TOKEN_LEN + 1];
};

struct hilock_hold {
    hl_link link;          /* in client->holds */
    hl_link olink;         /* in owner->holds */
    hl_defer lost_defer;
    hilock_client *c;
    hl_name *name;
    hilock_owner *owner;
    hilock_lost_cb lost_cb;
    void *lost_data;
    uint64_t fence;
    uint64_t confirmed;    /* when the key was last known ours (send time) */
    uint64_t waited_ms;    /* from hilock_acquire() to the grant */
    hl_timer watchdog;
    hl_req *renew;         /* renewal in flight */
    unsigned count;
    uint32_t lease_ms;
    int lost_why;
    unsigned no_renew : 1;
    unsigned lost : 1;
    unsigned releasing : 1;
    char token[HL_TOKEN_LEN + 1];
};

struct hilock_owner {
    hl_link link;          /* in client->owners */
    hl_link holds;
    hilock_client *c;
};

hilock_hold *hl_hold_new(hl_name *n, const char *token, uint64_t fence,
                         uint64_t sent_at, const hilock_wait *w);
void hl_hold_free(hilock_hold *h);
/* The instant after which the key may be another client's: the send time of
 * the last acquire or renewal that Redis confirmed, plus the lease. */
static inline uint64_t hl_hold_expiry(const hilock_hold *h) { return h->confirmed + h->lease_ms; }
/* Whether a callback may still be told the lock is held at `now`. */
static inline int hl_hold_live(const hilock_hold *h, uint64_t now) {
    return !h->lost && now < hl_hold_expiry(h);
}
void hl_hold_mark_lost(hilock_hold *h, int why);
/* One acquisition of `h` was never delivered: drop its level, and the hold
 * itself (releasing the key) when it was the last. */
void hl_hold_drop(hilock_hold *h);
void hl_hold_begin_release(hilock_hold *h);
void hl_release_token(hilock_client *c, hl_name *n, const char *token, uint32_t lease_ms);
void hl_token_new(hilock_client *c, char *out);
void hl_wait_finish(hilock_wait *w, int status, hilock_hold *h);
void hl_wait_run(hl_defer *d, int cancel);
/* The error of a request that got no answer: the connection's, or
 * HILOCK_EDEADLINE when it is up but Redis did not answer. */
int hl_conn_error(hilock_client *c);
/* Debug builds (-DHILOCK_DEBUG): abort if a name with waiters has neither a
 * try in flight nor a timer that will retry (a stranded waiter). */
#ifdef HILOCK_DEBUG
void hl_name_check(const hl_name *n);
void hl_names_check(hilock_client *c);
#else
static inline void hl_name_check(const hl_name *n) { (void)n; }
static inline void hl_names_check(hilock_client *c) { (void)c; }
#endif

/* ---- The client --------------------------------------------------------- */

struct hilock_client {
    hilock_loop loop;
    hilock_loop_timer *ltimer;   /* drives the heap and the deferred queue */
    uint64_t armed_at;           /* when ltimer fires; UINT64_MAX if idle */
    hl_timer **heap;
    size_t nheap, capheap;
    hl_link defers;              /* deferred user callbacks, FIFO */
    int dispatching;
    int freeing;                 /* hilock_client_free has started */
    int closing;                 /* hilock_client_close has started */
    int forked;                  /* a copy in a forked child: inert (see fork.c) */
    hl_link all;                 /* in fork.c's list of every client */
    hilock_close_cb close_cb;
    void *close_data;
    hl_defer close_defer;

    hilock_config cfg;
    char *prefix;
    size_t prefix_len;
    hl_url url;
    hl_conn cmd, sub;

    hl_name **buckets;           /* names by lock key */
    size_t nbuckets, nnames;

    hl_link holds;               /* every live hold */
    hl_link owners;
    size_t nreqs;                /* requests alive (for close) */
    hl_link reqs;                /* and the list of them */
    uint64_t rng;                /* backoff jitter */
    uint64_t token_id, token_salt, token_seq; /* see hl_token_new */
    char errstr[256];
    char policy_warned[64];      /* the eviction policy last warned about */
};

void hl_set_error(hilock_client *c, const char *fmt, ...);
/* Caller-filled structs that start with their size (see hilock.h). */
int hl_struct_import(void *to, size_t size, const void *from, size_t from_size);
void hl_struct_export(void *to, size_t size, const void *d, size_t dsize);
/* fork.c: make the copies of `c` in forked children inert. */
void hl_fork_watch(hilock_client *c);
void hl_fork_unwatch(hilock_client *c);
/* The check at every public entry point that acts. */
static inline int hl_client_refuses(const hilock_client *c) {
    return c->forked ? HILOCK_EFORK : c->freeing || c->closing ? HILOCK_ECLOSED : 0;
}
/* Queue a message for cfg.log_cb (nothing when there is none). */
void hl_log(hilock_client *c, int level, const char *fmt, ...);
/* Warn, once per policy seen, that the server may evict locks. */
void hl_warn_eviction(hilock_client *c, const char *policy, const char *why);
void hl_close_progress(hilock_client *c);

#endif
