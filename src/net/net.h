/* The net layer: one hiredis connection (connect, AUTH/SELECT, the eviction
 * check, reconnect with backoff and jitter), and script requests on it with
 * their own deadlines, re-sent after a drop, NOSCRIPT -> EVAL, LOADING
 * retried. Uses the loop layer. Knows nothing of lock names, waiters or
 * primitives: a request carries its own arguments, and replies and
 * connection events reach their owners through callbacks. */
#ifndef HILOCK_NET_H
#define HILOCK_NET_H

#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include "loop/loop.h"

/* ---- Addresses ----------------------------------------------------------- */

/* One server's address: TCP host and port, or a unix socket path. */
typedef struct hl_addr {
    char *host;   /* TCP host, or NULL for a unix socket */
    int port;
    char *path;   /* unix socket path, or NULL */
} hl_addr;

/* "host:port", "[v6]:port", or the socket's path, into buf (n bytes,
 * truncated). Returns buf. */
const char *hl_addr_text(const hl_addr *a, char *buf, size_t n);

#define HL_URL_MAX_SEEDS 16

/* What a URL names: one server or a cluster's seeds (redis://, unix://),
 * the sentinels of a master (redis-sentinel://), or Redlock's independent
 * masters (redlock://). */
enum { HL_URL_REDIS, HL_URL_SENTINEL, HL_URL_REDLOCK };

/* redis://[user:pass@]host[:port][,host[:port]...][/db] or
 * unix:///path[?db=N]. Several hosts are seeds of one Redis Cluster.
 * redis-sentinel://[user:pass@]host[:port][,...][/db]#MASTER: the hosts
 * are sentinels (port 26379 by default), the credentials and db the
 * master's. redlock://[user:pass@]host[:port][,...][/db]: independent
 * masters. rediss://, rediss-sentinel:// and redlocks:// are the same
 * over TLS (every TCP connection of the client). */
typedef struct hl_url {
    int kind;     /* HL_URL_* */
    int tls;      /* rediss://, rediss-sentinel://, redlocks:// */
    char *master; /* redis-sentinel: the master's name */
    char *host;   /* the first address (the only one but for a cluster) */
    int port;
    char *path;
    char *user;   /* ACL user, or NULL */
    char *pass;   /* password, or NULL */
    int db;
    hl_addr more[HL_URL_MAX_SEEDS - 1]; /* further seeds */
    int nmore;
} hl_url;

int hl_url_parse(const char *s, hl_url *u);
/* The URL's i-th TCP address (0: host/port, then more[]), 0 <= i <= nmore. */
static inline hl_addr hl_url_addr(const hl_url *u, int i) {
    hl_addr a = {i == 0 ? u->host : u->more[i - 1].host, i == 0 ? u->port : u->more[i - 1].port, NULL};
    return a;
}
void hl_url_free(hl_url *u);

/* ---- Scripts (embedded from src/lua and src/prim at build time) --------- */

typedef struct hl_script {
    const char *name, *body, *sha;
} hl_script;

/* The SHA-1 of data, as EVALSHA names a script: 40 hex digits and a NUL. */
void hl_sha1_hex(const char *data, size_t len, char out[41]);

/* ---- Settings and state shared by a client's connections ---------------- */

typedef struct hl_req hl_req;

typedef struct hl_net {
    hl_loop *loop;
    hl_url url;                  /* the seeds; AUTH and SELECT on every connection */
    uint32_t connect_timeout_ms, request_timeout_ms, reconnect_max_ms;
    int require_noeviction;      /* refuse a server that may evict keys */
    int pubsub;                  /* HILOCK_PUBSUB_*, from the config */
    int sharded;                 /* SSUBSCRIBE/SPUBLISH (decided at the first INFO
                                    for HILOCK_PUBSUB_AUTO) */
    int sharded_known;           /* `sharded` is decided */
    int cluster_enabled;         /* the last INFO said cluster_enabled:1 (1), or
                                    not (0), or was refused (-1) */
    uint32_t wait_timeout_ms;    /* of a request's WAIT (hl_req.wait_replicas) */
    uint32_t health_ms;          /* a ready connection silent this long is dropped
                                    (hl_conn's health check); 0: never */
    uint32_t clock_rate_ppm;     /* how much faster a server's clock may run (hl_drift_ms) */
    int answered;                /* a request got a reply that is not an error: the
                                    servers were there (a failure then passes) */
    int quorum;                  /* Redlock: only a quorum's answer counts as one
                                    (redlock.c sets `answered`) */
    int closing;                 /* the client is closing: do not wait for a
                                    server that is away */
    int check_role;              /* a command connection is ready only when
                                    ROLE says master (Sentinel) */
    uint64_t rng;                /* backoff jitter (xorshift) */
    struct hl_tls *tls;          /* the URL is a TLS form: its settings (tls.c) */
    char policy_warned[64];      /* the eviction policy last warned about */
    hl_link reqs;                /* every live request */
    size_t nreqs;
    void (*idle)(void *arg);     /* nreqs fell to 0 (for a graceful close) */
    void *idle_arg;
    /* A cluster node answered MOVED or ASK: the topology says where the
     * request goes now (hl_req_redirect), or ends it. */
    void (*redirect)(void *arg, hl_req *r, int ask, unsigned slot, const char *host, int port);
    void *redirect_arg;
    /* Counted for hilock_client_stats(). */
    uint64_t moved, asked;       /* redirects followed */
    uint64_t slow_replies;       /* later than request_timeout_ms / 3 */
    uint64_t slow_warned_at;     /* hl_log_due */
} hl_net;

void hl_net_init(hl_net *net, hl_loop *loop);

/* Does an INFO text (its server and cluster sections) say the server is a
 * cluster node that takes sharded pub/sub (SSUBSCRIBE, SPUBLISH)? Redis 7
 * or later, or Valkey's (7.2 on; Valkey 8 also reports redis_version
 * 7.2.4, its compatibility version, which later ones may drop). */
int hl_info_sharded_pubsub(const char *info);
/* HILOCK_PUBSUB_AUTO: decide sharded or classic pub/sub from an INFO reply
 * (an error: classic), once per client, by the first that answers. */
void hl_net_pubsub_decide(hl_net *net, const redisReply *info);
/* The next number of the client's jitter source (xorshift64). */
uint64_t hl_net_random(hl_net *net);

/* ---- Connections ---------------------------------------------------------- */

enum { HL_CONN_DOWN, HL_CONN_CONNECTING, HL_CONN_HANDSHAKE, HL_CONN_READY };

/* What a connection tells its owner. `push` is for subscriber
 * connections: kind is the first element of the pushed array ("message",
 * "smessage", "subscribe", "ssubscribe", "unsubscribe", "sunsubscribe")
 * and ch its channel; for an error reply kind is "error" and ch its text. */
typedef struct hl_conn_events {
    void (*ready)(void *arg);
    void (*lost)(void *arg);
    /* data: a message's payload (NULL for the others) */
    void (*push)(void *arg, const char *kind, const char *ch, size_t len, const char *data,
                 size_t dlen);
    void *arg;
} hl_conn_events;

typedef struct hl_conn {
    hl_net *net;
    const hl_addr *addr;  /* where it connects (its node's) */
    hl_conn_events ev;
    redisAsyncContext *ac;   /* command connections: hiredis's async API */
    redisContext *rc;        /* subscriber connections: read by sub.c */
    hilock_loop_io *io;      /* rc's socket, watched by the event loop */
    unsigned gen;            /* bumped when rc goes */
    int wpending;            /* rc has output not written yet */
    struct ssl_st *ssl;      /* TLS: the connection's SSL, rc's or ac's (hiredis
                                owns and frees it), NULL when there is none */
    int tls_want;            /* sub.c's TLS handshake waits for HILOCK_IO_* */
    int is_sub;
    int bare;           /* a sentinel's: no handshake (AUTH, SELECT, INFO are the
                           master's), classic SUBSCRIBE */
    int sub_info;       /* sub.c: the handshake's last step is an INFO that
                           decides the pub/sub mode (hl_net_pubsub_decide) */
    int state;
    int failures;       /* consecutive failed attempts, for the backoff */
    int last_err;       /* HILOCK_ECONN, HILOCK_EPROTO, HILOCK_EAUTH... */
    int handshake_left; /* AUTH/SELECT/INFO replies still due */
    /* Scripts this connection has sent with EVAL: the server has them for
     * what follows on it (EVALSHA). Sending EVAL first, rather than waiting
     * for NOSCRIPT, keeps a pipeline in order: a NOSCRIPT's EVAL would go
     * out behind requests sent after it (a release behind the next try). */
    uint64_t loaded[32];     /* each one's first 16 hex digits of SHA-1 (a
                                caller's script may be freed, and another
                                made at its address) */
    int nloaded;
    /* Counted for hilock_client_stats(): handshakes done (the ones after
     * the first: reconnects), attempts that failed, ready ones lost. */
    uint64_t connects, reconnects, failed_attempts, drops;
    uint64_t down_at;   /* when a ready connection was last lost (ms) */
    char why[160];      /* why it was dropped, for the log ("" : last_err says) */
    uint64_t heard_at;  /* when it last read a reply (hl_now_coarse_ms) */
    int ping_out;       /* the health check's PING is unanswered */
    hl_timer health;    /* the health check (net->health_ms) */
    uint64_t health_due;/* when it should fire next (a late one: we were away) */
    hl_timer retry;     /* reconnect backoff */
    hl_timer connect_to;/* connect timeout */
    hl_timer failed_at_once; /* tells the owner of an attempt that failed at once */
    hl_link queue;      /* requests waiting for the connection */
} hl_conn;

void hl_conn_init(hl_conn *k, hl_net *net, const hl_addr *addr, int is_sub,
                  const hl_conn_events *ev);
void hl_conn_connect(hl_conn *k);
/* Drop the connection now (never from inside a hiredis callback). */
void hl_conn_teardown(hl_conn *k);
/* k read a reply: it is alive (the health check). */
static inline void hl_conn_heard(hl_conn *k) {
    k->heard_at = hl_now_coarse_ms();
    k->ping_out = 0;
}
/* The health check's PING was answered on a subscriber connection: its
 * reply ("pong", or an ACL's refusal of PING) is not the owner's. */
int hl_sub_is_pong(const redisReply *r);
/* What a lease of `lease` ms is worth to its holder: Redis may count it
 * out this much earlier, its clock running up to ppm millionths faster
 * than ours, plus 2 ms of timer granularity (Redlock's allowance). */
static inline uint64_t hl_drift_ms(uint32_t ppm, uint64_t lease) {
    return lease * ppm / 1000000 + 2;
}
/* Say why k is dropped (the log's "lost (why)"), also as the last error. */
void hl_conn_set_why(hl_conn *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* End the queued try-once requests that never went out with `err`: the
 * attempt they asked for has failed. */
void hl_conn_fail_fast(hl_conn *k, int err);
/* End every request that waits for k with err (a refusal that waiting
 * will not mend). */
void hl_conn_fail_queue(hl_conn *k, int err);
/* End every queued request with HILOCK_ECANCELED and stop reconnecting. */
void hl_conn_cancel_queue(hl_conn *k);
/* The error of a request on `k` that got no answer: the connection's, or
 * HILOCK_EDEADLINE when it is up but Redis did not answer. */
int hl_conn_error(const hl_conn *k);
/* Subscriber connections: (un)subscribe a channel, classic or sharded as
 * net->sharded says (nothing when down: the owner subscribes again on
 * `ready`). */
void hl_conn_subscribe(hl_conn *k, const char *ch, size_t len, int on);
/* The connection's socket, or -1. */
int hl_conn_fd(const hl_conn *k);

/* ---- TLS (tls.c; without HILOCK_HAVE_TLS every TLS URL fails) ---------- */
/* (net/tls.h: the parts that need no hl_net or hl_conn, for inspect too.) */

/* Load the config's CA, certificate and key for net->url's TLS form (a
 * no-op for other URLs): 0, or HILOCK_ETLS / HILOCK_EINVAL with the reason
 * in net->loop's errstr (when `net->loop` is set). */
int hl_tls_setup(hl_net *net, const hilock_config *cfg);
void hl_tls_free(hl_net *net);
/* TLS on hiredis's context c, just connected (or connecting) for k: a new
 * SSL with k's server name to check, handed to c (k->ssl; hiredis reads
 * and writes through it, starts the handshake at once, and frees it). 0,
 * -1 TLS refused, or HL_TLS_LOST, with the reason in errstr (k->ssl NULL). */
int hl_tls_begin(hl_conn *k, redisContext *c);
/* Drive k->ssl's handshake: 1 done, 0 waiting for *want (HILOCK_IO_*), -1
 * TLS refused (HILOCK_ETLS), or HL_TLS_LOST, with the reason in errstr. */
int hl_tls_step(hl_conn *k, int *want);
/* The socket under a handshake failed or closed with no word from TLS (a
 * refused connect, a server going down): a lost connection, as over TCP
 * (HILOCK_ECONN, tried again), not a refusal. */
#define HL_TLS_LOST (-2)
/* A TLS connection k that broke before it was ready, because of TLS (a
 * certificate refused either way, a port that does not speak TLS): that
 * will not fix itself at the next attempt, so what waits fails now, with
 * the reason in errstr and HILOCK_ETLS in last_err, as after a refused
 * AUTH; 1. Else 0, nothing done. The reconnects go on with their backoff
 * (a certificate may be fixed on the server). */
int hl_conn_tls_refused(hl_conn *k);
/* A TLS connection that broke before it was ready: whether TLS is why (a
 * certificate refused, an alert from the server), with the reason in
 * `why`. Clears OpenSSL's error queue. */
int hl_tls_failed(hl_conn *k, char *why, size_t n);

/* ---- Requests ---------------------------------------------------------- */

/* The outcome of a request: a reply (never an error reply for NOSCRIPT),
 * or reply == NULL and err < 0. Runs exactly once. */
typedef void (*hl_req_done)(hl_req *r, redisReply *reply, int err);

/* The done of a request whose outcome nobody waits for: what it leaves
 * undone in Redis runs out by itself (a place, a marker, a fence). */
void hl_req_ignore(hl_req *r, redisReply *reply, int err);

#define HL_REQ_MAXARGS 12

struct hl_req {
    hl_link link;              /* in conn->queue while unsent */
    hl_link all;               /* in net->reqs while alive */
    hl_net *net;
    hl_conn *conn;             /* where it goes (set by submit) */
    const hl_script *script;
    hl_req_done done;
    void *owner;
    uint64_t submitted_at;     /* a key's TTL set by it started no earlier */
    uint64_t sent_at;          /* its last send (slow replies; hl_now_coarse_ms) */
    hl_timer deadline;
    hl_timer backoff;          /* re-send after LOADING */
    unsigned sent : 1;         /* hiredis holds a callback for it */
    unsigned finished : 1;     /* `done` has run */
    unsigned use_eval : 1;     /* the server lacked the script: send EVAL */
    unsigned ever_sent : 1;    /* it may have reached Redis */
    unsigned lost_reply : 1;   /* a send of it may have run, unanswered */
    unsigned fail_fast : 1;    /* a failed connection attempt ends it (try once) */
    unsigned tryagain_ends : 1; /* TRYAGAIN is its answer, not retried: its owner
                                   has a request on fewer keys to send instead */
    unsigned rounds : 2;       /* for its owner's use */
    unsigned asking : 1;       /* send ASKING first (an ASK redirect) */
    unsigned asking_refused : 1; /* ... and an ACL refused it */
    unsigned redirects : 5;    /* MOVED/ASK hops so far */
    unsigned publishes : 1;    /* its last argument is the publish command,
                                  PUBLISH or SPUBLISH, added at each send */
    unsigned wait_replicas : 7;/* then WAIT for this many replicas */
    unsigned partial : 1;      /* Redlock: a try some nodes granted, short of a
                                  quorum (its grants must be undone) */
    unsigned everywhere : 1;   /* Redlock: to a node that is down too, sent when
                                  it is back (a release must leave no key) */
    unsigned at_most_once : 1; /* not idempotent (a caller's script): a send
                                  that may have run is never sent again; a
                                  drop ends it with the connection's error */
    uint32_t lease_ms;         /* the lease it sets, if any: a quorum counts
                                  only within it (Redlock's validity) */
    int acked;                 /* replicas that WAIT said have its write */
    redisReply *held;          /* its reply, kept until WAIT's comes */
    int slot;                  /* the cluster slot of its keys, or -1 */
    int nkeys, nargs, maxargs; /* argv: the keys, then the other arguments */
    const char **argv;         /* maxargs of them, after buf */
    size_t *argl;
    size_t used, cap;
    char buf[];                /* the argument bytes, then argv and argl */
};

/* A request for `s` with `nkeys` keys, room for `bytes` argument bytes
 * (add 20 per number); the arguments follow with hl_req_arg(). With s NULL,
 * a plain command: the arguments are the command and its arguments. */
hl_req *hl_req_new(hl_net *net, const hl_script *s, int nkeys, size_t bytes,
                   hl_req_done done, void *owner);
/* hl_req_new for up to `maxargs` arguments (keys included), more than
 * HL_REQ_MAXARGS: a batch. */
hl_req *hl_req_new_n(hl_net *net, const hl_script *s, int nkeys, int maxargs, size_t bytes,
                     hl_req_done done, void *owner);
/* v in decimal at out (room for 20), without snprintf; its length. */
size_t hl_u64_text(char *out, uint64_t v);
/* Append one argument: a followed by b (either may be empty). */
void hl_req_arg(hl_req *r, const char *a, size_t alen, const char *b, size_t blen);
void hl_req_arg_u64(hl_req *r, uint64_t v);
/* A new request with the same script, arguments, slot, and publish and
 * everywhere flags. */
hl_req *hl_req_copy(const hl_req *r, hl_req_done done, void *owner);
/* Queue or send on `k`; its deadline is request_timeout_ms, or `ms`. */
void hl_req_submit(hl_conn *k, hl_req *r);
void hl_req_submit_within(hl_conn *k, hl_req *r, uint64_t ms);
/* Send `r` to `k` instead (after MOVED or ASK); asking: precede it with
 * ASKING there. Ends it with HILOCK_EREPLY after too many hops. */
void hl_req_redirect(hl_req *r, hl_conn *k, int asking);
/* End a request that was never submitted to a connection (the one a
 * Redlock fan-out answers for): `done` runs once, then it is freed. */
void hl_req_end(hl_req *r, redisReply *reply, int err);
/* Move a queued (unsent) request to `k`: sent at once if k is up. */
void hl_req_move(hl_req *r, hl_conn *k);
/* Client teardown: end whatever is left (requests backing off). */
void hl_net_cancel_all(hl_net *net);
/* "MOVED <slot> <host>:<port>" or "ASK ...": 1 and the parts, else 0. */
int hl_parse_redirect(const char *s, int *ask, unsigned *slot, char *host, size_t hostlen, int *port);
/* A copy of a reply that outlives hiredis's callback (freeReplyObject
 * frees it); NULL when out of memory. */
redisReply *hl_reply_dup(const redisReply *in);
/* Map an error reply to a code; keep its text as the last error. */
int hl_reply_error(hl_loop *l, const redisReply *reply);
/* Does an error pass with time (a server away, restarting, loading, a
 * failover under way, a read-only former master, a cluster down for a
 * moment), so that a wait with time left should try again? `why`: the
 * error text (an error reply's, for HILOCK_EREPLY). */
int hl_err_passes(int err, const char *why);
/* Is this error text an ACL refusal (HILOCK_EAUTH)? */
int hl_reply_is_acl(const char *s);

#endif
