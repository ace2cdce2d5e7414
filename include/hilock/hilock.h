/* hilock: non-blocking distributed locks on Redis for event-driven servers.
 *
 * A request that needs a lock calls hilock_acquire() and returns to its event
 * loop at once; the callback runs when the lock is its own, when the wait
 * times out, or when the wait is cancelled. Waiters are woken by Redis pub/sub
 * (one subscription per lock name per client), never by polling.
 *
 * Callback contract (every callback in this API):
 *   - runs exactly once per request, with a status code (0 or a negative
 *     HILOCK_E* code);
 *   - never runs from inside the call that started the request: it is deferred
 *     to the event loop;
 *   - may call any hilock function, including hilock_client_free().
 *
 * Handles and requests:
 *   hilock_client  one Redis deployment (a server, a cluster, a Sentinel master
 *                  or Redlock's masters); two connections per server
 *                  (commands, pub/sub).
 *   hilock_wait    a pending acquire; valid until its callback has run.
 *   hilock_hold    a lock that is held; valid from the acquire callback until
 *                  the callback of its final hilock_release() has run (or the
 *                  client is freed).
 *   hilock_owner   an identity for reentrancy, e.g. one per callback chain.
 *
 * Processes, threads, signals:
 *   - A client belongs to the process that made it: make one per process,
 *     after fork(). In a forked child the copy is inert (it never reads the
 *     parent's connections), every call on it returns HILOCK_EFORK, and
 *     hilock_client_free() frees it without running callbacks.
 *   - A client and its handles are used from the thread that runs its loop;
 *     hilock takes no locks. hilock_strerror(), hilock_version(),
 *     hilock_key() and hilock_key_slot() may be called from any thread.
 *   - hiredis (and OpenSSL, over TLS) writes with write(2): ignore SIGPIPE
 *     in a server, or a write to a connection that Redis closed kills the
 *     process.
 */
#ifndef HILOCK_H
#define HILOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version, here and nowhere else (the Makefile reads it). Semantic
 * versioning (docs/compatibility.md). HILOCK_SOVERSION is the N of
 * libhilock.so.N: the major version, which alone may break the ABI. */
#define HILOCK_VERSION_MAJOR 1
#define HILOCK_VERSION_MINOR 0
#define HILOCK_VERSION_PATCH 0
#define HILOCK_SOVERSION     1
#define HILOCK_VERSION_STR_(x) #x
#define HILOCK_VERSION_STR(a, b, c) HILOCK_VERSION_STR_(a) "." HILOCK_VERSION_STR_(b) "." HILOCK_VERSION_STR_(c)
/* "MAJOR.MINOR.PATCH" of the header; hilock_version() is the library's. */
#define HILOCK_VERSION \
    HILOCK_VERSION_STR(HILOCK_VERSION_MAJOR, HILOCK_VERSION_MINOR, HILOCK_VERSION_PATCH)

#if defined(__GNUC__) && !defined(HILOCK_STATIC_ONLY)
#define HILOCK_API __attribute__((visibility("default")))
#else
#define HILOCK_API
#endif

/* ---- Error codes ------------------------------------------------------- */

/* Codes keep their values across 1.x; a minor version may add codes (treat
 * a negative status you do not know as a failure; hilock_strerror() names
 * every code). See docs/compatibility.md. */

#define HILOCK_OK          0
#define HILOCK_EINVAL     -1  /* bad argument (NULL/empty/oversized name, lease 0, ...) */
#define HILOCK_ENOMEM     -2  /* out of memory */
#define HILOCK_EURL       -3  /* malformed Redis URL */
#define HILOCK_ETIMEDOUT  -4  /* the wait time ran out before the lock was acquired */
#define HILOCK_ECANCELED  -5  /* the wait was cancelled, or the client was freed/closed */
#define HILOCK_ECONN      -6  /* Redis could not be reached, or the connection broke */
#define HILOCK_EREPLY     -7  /* Redis answered with an error (see hilock_client_errstr) */
#define HILOCK_EPROTO     -8  /* the peer does not speak the Redis protocol */
#define HILOCK_ELOST      -9  /* the lock was lost: expired or taken over before release */
#define HILOCK_EBUSY     -10  /* the lock is held elsewhere (try-once acquire) */
#define HILOCK_ECLOSED   -11  /* the client is closing; no new requests */
#define HILOCK_EAUTH     -12  /* authentication failed (NOAUTH, WRONGPASS), or the ACL
                                 refused a command, key or channel (NOPERM; see
                                 hilock_client_errstr and the
                                 least-privilege ACL in docs/tls-and-acl.md) */
#define HILOCK_ELOOP     -13  /* the event-loop adapter failed (attach, timer_new or
                                 io_new) */
#define HILOCK_EDEADLINE -14  /* Redis did not answer a request in time */
#define HILOCK_EREADONLY -15  /* the server is a read-only replica (READONLY) */
#define HILOCK_EOOM      -16  /* the server is out of memory (OOM, maxmemory) */
#define HILOCK_ELOADING  -17  /* the server was still loading its data set */
#define HILOCK_ESCRIPT   -18  /* a lock script failed on the server */
#define HILOCK_EEVICTION -19  /* the server may evict keys (maxmemory-policy is not
                                 noeviction) and require_noeviction is set */
#define HILOCK_EFORK     -20  /* the client was made in another process: make one per
                                 process, after fork() */
#define HILOCK_EREPLICAS -21  /* fewer replicas than wait_replicas confirmed the lock
                                 within wait_timeout_ms (see hilock_config) */
#define HILOCK_EPERMITS  -22  /* a semaphore's permits_total differs from the one its
                                 current holders acquired with (see
                                 hilock_semaphore_acquire) */
#define HILOCK_ETLS      -23  /* TLS failed: a CA, certificate or key that cannot be
                                 loaded, a handshake refused (server certificate
                                 not trusted or not for the server's name, client
                                 certificate missing or refused), or TLS not
                                 built in (rediss:// needs hilock built against
                                 hiredis >= 1.0 with SSL; see docs/tls-and-acl.md) */

/* A constant, human-readable message for an error code; never NULL. */
HILOCK_API const char *hilock_strerror(int err);

/* The version of the library linked at run time, "MAJOR.MINOR.PATCH"
 * (compare with HILOCK_VERSION, the header's). */
HILOCK_API const char *hilock_version(void);

/* 1 if this library was built with TLS (against hiredis >= 1.0 with SSL),
 * so that rediss://, rediss-sentinel:// and redlocks:// URLs work; 0 if
 * they fail with HILOCK_ETLS. */
HILOCK_API int hilock_tls_available(void);

/* ---- Event-loop adapter interface -------------------------------------- */

struct redisAsyncContext;

/* One timer of the event loop. hilock arms at most one at a time per client
 * (it keeps its own timer heap), so adapters need not be fast at scale. */
typedef struct hilock_loop_timer hilock_loop_timer;
/* One watched socket of the event loop. */
typedef struct hilock_loop_io hilock_loop_io;

/* What hilock needs from an event loop. Fill one with an adapter from
 * <hilock/adapters/> (e.g. hilock_libevent_init()) or write your own:
 * hilock_loop_init() first, then every member, each a plain function over
 * `data`. hilock copies the struct. */
typedef struct hilock_loop {
    size_t size;                 /* set by hilock_loop_init(); do not touch */
    void *data;
    /* Attach a hiredis async context to the loop (as hiredis's own adapters
     * do). Return 0, or -1 on failure. */
    int (*attach)(void *data, struct redisAsyncContext *ac);
    /* Create a one-shot timer that calls cb(arg) when it fires. NULL on failure. */
    hilock_loop_timer *(*timer_new)(void *data, void (*cb)(void *arg), void *arg);
    /* (Re)arm a timer to fire once after `ms` milliseconds (0 = next loop turn). */
    void (*timer_start)(hilock_loop_timer *t, uint64_t ms);
    /* Disarm a timer; harmless if it is not armed. */
    void (*timer_stop)(hilock_loop_timer *t);
    /* Disarm and free a timer. */
    void (*timer_free)(hilock_loop_timer *t);
    /* Watch socket `fd` (hilock's subscriber connections, which read
     * replies hiredis's async API cannot dispatch, e.g. SSUBSCRIBE's):
     * cb(arg, events) runs with HILOCK_IO_READ and/or HILOCK_IO_WRITE set
     * while the socket is ready for the events last asked with io_watch.
     * NULL on failure. */
    hilock_loop_io *(*io_new)(void *data, int fd, void (*cb)(void *arg, int events), void *arg);
    /* Watch for `events` from now on (HILOCK_IO_READ | HILOCK_IO_WRITE;
     * 0: none). */
    void (*io_watch)(hilock_loop_io *io, int events);
    /* Stop watching and free; hilock closes the socket afterwards. */
    void (*io_free)(hilock_loop_io *io);
} hilock_loop;

#define HILOCK_IO_READ  1
#define HILOCK_IO_WRITE 2

/* Clear `loop` and record its size (a macro: it records sizeof(*loop)), so
 * that members added at the end in a later version keep their defaults for
 * adapters compiled before them. The adapters call it; an adapter of your
 * own calls it before setting the members. */
#define hilock_loop_init(loop) hilock_loop_init_size((loop), sizeof(*(loop)))
HILOCK_API void hilock_loop_init_size(hilock_loop *loop, size_t size);

/* ---- Client ------------------------------------------------------------- */

typedef struct hilock_client hilock_client;
struct redisReply; /* hiredis's (include <hiredis/hiredis.h> to read one) */
typedef struct hilock_hold hilock_hold;
typedef struct hilock_wait hilock_wait;
typedef struct hilock_owner hilock_owner;

#define HILOCK_NAME_MAX    1024   /* bytes in a lock name */
#define HILOCK_PREFIX_MAX  256    /* bytes in a key prefix */

/* Levels of hilock_config.log_cb messages. */
#define HILOCK_LOG_ERROR   0
#define HILOCK_LOG_WARNING 1
#define HILOCK_LOG_INFO    2

/* A message about the client's state that belongs to no request, e.g. a
 * server that may evict locks. Runs from the event loop (deferred, like
 * every hilock callback); `msg` is valid during the call only. */
typedef void (*hilock_log_cb)(int level, const char *msg, void *data);

/* Caller-filled structs (hilock_config, hilock_acquire_opts) start with
 * `size`, which their init macro sets to the size the caller was compiled
 * with. A newer library then knows which fields the caller has (later ones
 * keep their defaults), and an older library refuses, with HILOCK_EINVAL,
 * a struct that sets fields it does not know. New fields are only ever
 * added at the end, so growing them is not an ABI break. Always fill them
 * with the init macro first.
 *
 * Every numeric field left 0 takes its default. Values out of range make
 * hilock_client_new() and hilock_config_check() return HILOCK_EINVAL: a
 * lease below HILOCK_LEASE_MIN or above INT32_MAX, health_ms below 100,
 * clock_rate_ppm above 100000 (10 %), wait_replicas above 64, an unknown
 * pubsub. */
typedef struct hilock_config {
    size_t size;                 /* set by hilock_config_init(); do not touch */
    /* "redis://[user:pass@]host[:port][,host[:port]...][/db]" (host may be
     * [ipv6]; several hosts are seeds of a Redis Cluster, and any node of a
     * cluster will do) or "unix:///path/to/socket[?db=N]". NULL means
     * redis://127.0.0.1:6379. A TCP server is asked CLUSTER SLOTS once:
     * without cluster support it is used as one server.
     * "redis-sentinel://[user:pass@]host[:port][,...][/db]#MASTER": the
     * master MASTER that these sentinels (port 26379 by default) name,
     * followed through failovers; the credentials and db are the master's.
     * "redlock://[user:pass@]host[:port],host[:port],...[/db]": Redlock
     * over independent masters (up to 16; a quorum of N/2+1 answers every
     * request). See docs/cluster.md, docs/sentinel.md and docs/redlock.md.
     * TLS: "rediss://" (one server or a cluster), "rediss-sentinel://"
     * (the sentinels and the master) and "redlocks://" (every master) are
     * the forms above over TLS, configured by the tls_* fields below. */
    const char *url;
    /* Prefix of every key and channel. Must not contain '{' or '}'. NULL
     * means "hilock:". */
    const char *prefix;
    uint32_t default_lease_ms;   /* lease when an acquire gives none; default 30000 */
    uint32_t connect_timeout_ms; /* per connection attempt; default 2000 */
    uint32_t request_timeout_ms; /* a Redis request not answered by then fails with
                                    HILOCK_EDEADLINE; default 2000 */
    uint32_t linger_ms;          /* keep a name's subscription this long after its
                                    last local waiter leaves; default 1000 */
    uint32_t reconnect_max_ms;   /* cap of the reconnect backoff; default 1000 */
    /* How long the fence key of a name lives from when it was made (a
     * counter: acquisitions add one to it, and do not renew it), so names
     * used once do not stay in Redis for ever; a name's fences then go on
     * from the server's clock. Default 604800 (7 days). See
     * hilock_hold_fence(). */
    uint32_t fence_ttl_s;
    /* Told, with a level, of what the library has to say; it never prints
     * anything itself. Warnings: a server whose maxmemory-policy may evict
     * keys (read from INFO at every connect), a ready connection lost (and,
     * at HILOCK_LOG_INFO, when it is back), a reply later than a third of
     * request_timeout_ms, a renewal confirmed with less than a third of the
     * lease left (these two at most once a second), a subscription refused;
     * Sentinel's switches of master at HILOCK_LOG_INFO. NULL: not told. */
    hilock_log_cb log_cb;
    void *log_data;
    /* 1: refuse a server whose maxmemory-policy is not noeviction, or whose
     * policy cannot be read: requests fail with HILOCK_EEVICTION. Evicting a
     * held lock lets a second client take it. Default 0 (warn only). */
    int require_noeviction;
    /* How waiters hear releases: HILOCK_PUBSUB_AUTO (the default) uses
     * sharded pub/sub (SSUBSCRIBE/SPUBLISH on the master of the lock's slot)
     * on a Redis Cluster of version 7 or later, and classic pub/sub
     * (SUBSCRIBE/PUBLISH) otherwise. Classic PUBLISH in a cluster is sent to
     * every node over the cluster bus; sharded is not. Every client of one
     * set of locks must use the same mode (AUTO chooses the same for all):
     * a waiter that listens in the other mode wakes only at its fallback
     * timer. */
    int pubsub;
    /* After an acquire and after each renewal, WAIT until this many replicas
     * have the write, for at most wait_timeout_ms (default 100). An acquire
     * that fewer replicas confirm is released and ends with
     * HILOCK_EREPLICAS; a renewal that fewer confirm counts as not done (it
     * is tried again, and the hold is lost if its lease runs out first).
     * Narrows, does not close, the window in which a failover to a replica
     * that lacks the lock lets a second client take it. Default 0 (no WAIT). */
    uint32_t wait_replicas;
    uint32_t wait_timeout_ms;
    /* TLS, for the rediss:// forms of the URL (ignored otherwise). The
     * server's certificate must chain to a CA of tls_ca_file (PEM, may hold
     * several) or tls_ca_dir (hashed, as c_rehash makes); with neither, the
     * system's default CAs. NULL: not used. Read at hilock_client_new():
     * the strings need not outlive the call. */
    const char *tls_ca_file;
    const char *tls_ca_dir;
    /* A client certificate and its key (PEM), both or neither: for servers
     * that ask for one (tls-auth-clients yes). */
    const char *tls_cert_file;
    const char *tls_key_file;
    /* The name the server's certificate must carry (a DNS name or an IP
     * address, checked against its subjectAltName), also sent as SNI when
     * it is a DNS name. NULL: the host each connection goes to. */
    const char *tls_server_name;
    /* 1: do not verify the server's certificate at all (neither its CA nor
     * its name). For self-signed test setups only: anyone in the path can
     * then pose as the server. Default 0. */
    int tls_insecure;
    /* Bounded waiting (the mutex, the read-write lock, the semaphore): a
     * wait that has waited starve_ms without
     * its lock stops racing for it. Its try then takes a place in a queue
     * in Redis, the release hands the lock to the first live place (by a
     * message to its client, as the fair lock does), and no other try takes
     * the lock past it: a process whose waits keep losing the race to
     * another's gets its turn among the starving processes, one grant each
     * in turn. Below the threshold a lock goes to the first try that
     * reaches Redis after a release (the fastest handoff). 0: the default,
     * 100 ms; HILOCK_STARVE_NEVER: always race (no bound). Not over Redlock,
     * where waits always race: see docs/redlock.md. */
    uint32_t starve_ms;
    /* Dead connections: a connection on which nothing has been heard for
     * health_ms is dropped and made again, and a quiet one is sent a PING
     * at a quarter of it (an answer of any kind counts, an ACL's refusal
     * too). Without it a connection that a firewall, a NAT or a partition
     * silently stopped carrying (no RST, no FIN) is never noticed, and a
     * waiter whose subscriber connection it was hears no release until
     * the holder's lease ends. A dead connection is found within health_ms
     * and a quarter, and a waiter that missed a release meanwhile tries as
     * soon as its subscription is back. 0: the default, 3000 (at least
     * 100; with wait_replicas, at least twice wait_timeout_ms, as a WAIT
     * holds its connection); HILOCK_HEALTH_OFF: never. Keep it above the
     * time the slowest command of the server takes (a long script stalls
     * every client). */
    uint32_t health_ms;
    /* Clocks: how much faster the Redis server's clock may run than this
     * machine's, in millionths. A hold believes its lease ends
     * lease x clock_rate_ppm / 1000000 + 2 ms before the lease it asked
     * for, on every topology, so that it sees its loss before Redis can
     * give the lock to another client while the server's clock runs up to
     * that rate fast (NTP slews at most 500 ppm). 0: the default, 10000
     * (1 %, Redlock's rule). A step of the server's clock (set by hand,
     * a VM restored) is not covered by any allowance: only fences catch
     * it (hilock_hold_fence). */
    uint32_t clock_rate_ppm;
    /* Renewals: the most holds renewed by one script call. The watchdog
     * renews a hold a third of the way into its lease; a mutex hold may go
     * up to 100 ms earlier (a twentieth of a lease under 2 s) and share
     * one call with the other holds of its server (of its slot, in a
     * Cluster) that are due by then. Each hold keeps its own lease and its own
     * loss: a hold found gone in a batch is lost alone, and a batch refused
     * as a whole (an ACL: a batch needs +mget) goes again as one renewal
     * per hold, with a warning. 0: the default,
     * 100; 1: every hold renews alone, at its own time. At most 1000.
     * Over Redlock, and for the other primitives, every hold renews alone. */
    uint32_t renew_batch;
    /* Lock-delay (Chubby's, Consul's): a mutex or fair lock of this client
     * that ends without a release (its lease ran out: the holder died, was
     * paused, or was cut off) cannot be taken by anyone for this many ms
     * more, so that a holder that is merely slow has time to see its loss
     * before the next holder acts. A release frees the lock at once, and
     * hilock_break() too. The holder believes its hold for its lease only;
     * Redis keeps the key for the lease plus the delay (each renewal
     * extends both), and waiters sleep until the key's end, woken then,
     * not by polling. 0: the default, none; at most 60000. */
    uint32_t lock_delay_ms;
} hilock_config;

/* hilock_config.starve_ms: never hand the lock over to a starving wait. */
#define HILOCK_STARVE_NEVER UINT32_MAX
/* hilock_config.lock_delay_ms: the most it takes (Chubby's and Consul's). */
#define HILOCK_LOCK_DELAY_MAX 60000u
/* hilock_config.health_ms: never drop a connection for its silence. */
#define HILOCK_HEALTH_OFF UINT32_MAX

/* hilock_config.pubsub */
#define HILOCK_PUBSUB_AUTO    0
#define HILOCK_PUBSUB_SHARDED 1
#define HILOCK_PUBSUB_CLASSIC 2

/* Fill `cfg` with the defaults above (a macro: it records sizeof(*cfg)). */
#define hilock_config_init(cfg) hilock_config_init_size((cfg), sizeof(*(cfg)))
HILOCK_API void hilock_config_init_size(hilock_config *cfg, size_t size);

/* Check a config as hilock_client_new() would, without connecting or
 * needing a loop: 0, HILOCK_EURL for a malformed URL, HILOCK_ETLS for a TLS
 * URL when TLS is not built in or its CA, certificate or key cannot be
 * loaded, HILOCK_EINVAL for any other bad field (prefix, lease, pubsub,
 * wait_replicas, a certificate without its key). For programs that
 * read their settings long before they make a client, e.g. an nginx module
 * at `nginx -t`. */
HILOCK_API int hilock_config_check(const hilock_config *cfg);

/* Create a client. Validates the config (bad URL -> HILOCK_EURL, bad prefix
 * -> HILOCK_EINVAL, TLS not built in or its files not loadable ->
 * HILOCK_ETLS, whose hilock_strerror() says what to check, as there is no
 * client for hilock_client_errstr()) and starts connecting in the
 * background; connection errors, a failed TLS handshake among them, show up
 * in the callbacks of requests, not here. On success stores
 * the client in *out and returns 0. */
HILOCK_API int hilock_client_new(hilock_client **out, const hilock_config *cfg,
                                 const hilock_loop *loop);

/* Free a client at once. Every pending wait gets its callback with
 * HILOCK_ECANCELED before this returns (the one exception to deferral: the
 * client is gone afterwards), and so does a pending close's callback. Holds
 * are abandoned, not released: their keys expire after their lease. Nothing
 * is sent, so what waits leave in Redis stays until it expires too: a
 * waiting writer's marker (up to 3 s, new readers wait meanwhile), a fair
 * lock's queue places (skipped once the client has been silent 5 s). Use
 * hilock_client_close() to give all of it back at once. All
 * handles of the client become invalid. Safe to call from inside any hilock
 * callback. In a forked child it frees the copy and runs no callback. */
HILOCK_API void hilock_client_free(hilock_client *c);

typedef void (*hilock_close_cb)(void *data);

/* Close a client gracefully: pending waits end with HILOCK_ECANCELED, every
 * hold is released in Redis (its release callback, if one is pending, runs),
 * then both connections close, `cb` runs (may be NULL), and the client is
 * freed. New requests fail with HILOCK_ECLOSED meanwhile. A second close
 * while the first is under way just adds its `cb`, which runs then too. On
 * a client that hilock_client_free() is already freeing (from a callback
 * it runs) or in a forked child it does nothing, and `cb` does not run.
 * Returns 0 (`cb` will run exactly once), or at once, with nothing done
 * and `cb` never run: HILOCK_EINVAL (NULL client), HILOCK_ECLOSED (being
 * freed), HILOCK_EFORK (a forked child: free the copy instead) or
 * HILOCK_ENOMEM (no room to keep `cb`; a close not already under way has
 * not begun). */
HILOCK_API int hilock_client_close(hilock_client *c, hilock_close_cb cb, void *data);

/* The text of the last error reply or connection error seen, or "". */
HILOCK_API const char *hilock_client_errstr(const hilock_client *c);

/* ---- Owners (reentrancy) ---------------------------------------------- */

/* An owner makes acquisition reentrant: an acquire of a name that the owner
 * already holds (or is granted while the owner's earlier acquire is waiting)
 * succeeds at once with the same hold, counted in the client; nothing is sent
 * to Redis. Each acquire needs one matching hilock_release(). NULL for a
 * NULL client, one being freed, a forked child's copy, or no memory. An
 * owner belongs to its client and is freed with it: never use or free it
 * after hilock_client_free(). */
HILOCK_API hilock_owner *hilock_owner_new(hilock_client *c);

/* Free an owner. Its holds stay valid (they simply stop being reentrant). */
HILOCK_API void hilock_owner_free(hilock_owner *o);

/* ---- Acquire ------------------------------------------------------------ */

#define HILOCK_WAIT_FOREVER (-1)
#define HILOCK_LEASE_DEFAULT 0xFFFFFFFFu /* use the client's default_lease_ms */
#define HILOCK_LEASE_MIN     10u         /* shorter leases are refused */

/* Runs once when a lock held by `hold` was lost: its key expired, was
 * deleted, or was taken over (renewal failed). The hold stays valid and must
 * still be released (the release then reports HILOCK_ELOST). `why` is
 * HILOCK_ELOST, the connection error that kept renewals from working, or
 * HILOCK_EAUTH if Redis's ACL refused them (hilock_client_errstr says what). */
typedef void (*hilock_lost_cb)(hilock_hold *hold, int why, void *data);

typedef struct hilock_acquire_opts {
    size_t size;            /* set by hilock_acquire_opts_init(); do not touch */
    int64_t wait_ms;        /* HILOCK_WAIT_FOREVER (default), 0 = try once, or ms */
    uint32_t lease_ms;      /* key TTL, >= HILOCK_LEASE_MIN and <= INT32_MAX, or
                               HILOCK_LEASE_DEFAULT (default); 0 is an error */
    int no_renew;           /* 1 = no watchdog: the key expires after lease_ms */
    hilock_owner *owner;    /* NULL = not reentrant */
    hilock_lost_cb lost_cb; /* NULL = not told (hilock_hold_lost() still works) */
    void *lost_data;
} hilock_acquire_opts;

/* Fill `opts` with the defaults above (a macro: it records sizeof(*opts)). */
#define hilock_acquire_opts_init(opts) hilock_acquire_opts_init_size((opts), sizeof(*(opts)))
HILOCK_API void hilock_acquire_opts_init_size(hilock_acquire_opts *opts, size_t size);

/* status 0: `hold` is the lock, and its lease is running: a grant is
 * delivered as success only before (send time of the try that won it) +
 * lease. A grant that went stale before its callback could run (another
 * callback of the same loop turn took the time, or the loop stalled) is
 * tried again within the wait's deadline, or ends with HILOCK_ETIMEDOUT.
 * Otherwise hold is NULL and status is:
 *   HILOCK_EBUSY      try once (wait_ms 0): the lock is held elsewhere, or
 *                     a wait of this client queued ahead for the name comes
 *                     first (known once a try of the name was answered:
 *                     until then, the try waits for that answer, and a
 *                     server that is down gives its error, not EBUSY);
 *   HILOCK_ETIMEDOUT  the wait ran out while the lock was seen held;
 *   HILOCK_ECONN, HILOCK_EDEADLINE, HILOCK_EPROTO, HILOCK_EAUTH,
 *   HILOCK_ETLS, HILOCK_EEVICTION
 *                     no try could be sent or answered (the wait's time
 *                     ran out first, or the connection failed): a wrong
 *                     address never looks like a busy lock;
 *   HILOCK_EREADONLY, HILOCK_EOOM, HILOCK_ELOADING, HILOCK_ESCRIPT,
 *   HILOCK_EREPLY     Redis refused the try;
 *   HILOCK_EREPLICAS  fewer replicas than wait_replicas confirmed the
 *                     grant (it was given back);
 *   HILOCK_EINVAL     an owner's queued wait that its owner's hold, granted
 *                     meanwhile, cannot serve (a semaphore's or read-write
 *                     lock's: see there);
 *   HILOCK_ECANCELED  hilock_wait_cancel(), or the client was closed or freed
 *                     (also for a grant not yet delivered when that began). */
typedef void (*hilock_acquire_cb)(hilock_hold *hold, int status, void *data);

/* Ask for the lock `name` (1..HILOCK_NAME_MAX bytes, any bytes but NUL).
 * `opts` may be NULL for the defaults; a struct must be filled by
 * hilock_acquire_opts_init() first. Returns 0 and, if wait_out is not NULL, the wait handle; or
 * a negative code at once, in which case nothing was sent and `cb` will
 * not run: HILOCK_EINVAL (a bad name, no `cb`, opts not set up, wait_ms
 * below HILOCK_WAIT_FOREVER, a lease out of range, an owner of another
 * client), HILOCK_ENOMEM, HILOCK_ECLOSED (the client is closing) or
 * HILOCK_EFORK (a forked child's copy of the client).
 *
 * Who gets the lock after a release: this client's waits of the name in
 * the order they were made (one tries at a time). Across clients, a wait
 * that has waited less than hilock_config.starve_ms (100 ms by default)
 * races: the first try to reach Redis after a release wins, which is the
 * fastest handoff but favours the releasing process (its next wait tries
 * at once; the others hear of the release a round trip later). A wait
 * that has waited longer starves: it takes a place in a queue in Redis,
 * and from then on every release hands the lock to the first place, by a
 * message to its client, and no racing try takes a released lock past it.
 * A process has one place at a time (its first wait's), so processes that
 * starve are served one grant each in turn: no wait of a live process
 * waits while other processes keep being served, beyond the threshold and
 * one turn of the others. The cost shows only under contention: the
 * starving wait's try per grant, and a message per handoff that every
 * waiting process hears. A starving client that dies is skipped after
 * its grant's 1 s claim window, or 5 s after its last word. Over Redlock
 * waits always race (a queue on each master would make no one order). */
HILOCK_API int hilock_acquire(hilock_client *c, const char *name,
                              const hilock_acquire_opts *opts,
                              hilock_acquire_cb cb, void *data,
                              hilock_wait **wait_out);

/* Cancel a pending wait: its callback runs (deferred) with HILOCK_ECANCELED.
 * If a try was in flight and wins the lock, that lock is released in Redis:
 * a cancel never leaks a lock. Returns 0, or HILOCK_EINVAL if the wait has
 * already been given its outcome (its callback is queued, or is running).
 * The handle is valid until its callback has returned (cancelling from
 * inside that callback is safe, and says HILOCK_EINVAL); after that it is
 * freed and must not be used. */
HILOCK_API int hilock_wait_cancel(hilock_wait *w);

/* ---- Counting semaphore ------------------------------------------------- */

#define HILOCK_PERMITS_MAX 1000000u /* largest permits_total */

/* Ask for `permits` (1..permits_total) of the permits_total permits
 * (1..HILOCK_PERMITS_MAX) of the semaphore `name`: at most permits_total
 * permits are held at any time, by all clients together. A semaphore is
 * not the mutex of the same name: their keys and waiters are separate.
 *
 * Everything else is as for hilock_acquire(): the options, the callback
 * and its statuses, hilock_wait_cancel(), and the hold, which is released
 * with hilock_release() (all its permits at once), renewed by the watchdog,
 * extended with hilock_hold_extend() and reported lost by its lost_cb. Each
 * grant is a lease of its own: the permits of a holder that dies come back
 * when its lease runs out, and a waiter then takes them without being told
 * (its fallback timer is set at the earliest lease's end). A release wakes
 * one try per waiting client; a grant that leaves permits free lets this
 * client's next waiter try at once. hilock_hold_fence() is strictly
 * increasing over the grants of the name, in the order Redis made them
 * (holders at once hold different fences).
 *
 * permits_total is kept in Redis with the holders. An acquire that gives
 * another count while any holder is there ends with HILOCK_EPERMITS (its
 * callback; the client's other waiters go on). When no holder is left
 * (released, or leases run out), the count is forgotten and the next grant
 * sets it: a semaphore's size changes once it has drained.
 *
 * With an owner, an acquire of a semaphore that the owner holds re-uses
 * that hold (counted, nothing sent) if it asks for no more permits than
 * the hold has, of the same permits_total; asking for more returns
 * HILOCK_EINVAL at once (a hold does not grow), and another permits_total
 * is sent to Redis, which ends it with HILOCK_EPERMITS as it would any
 * other's while the hold is there. A wait of the owner queued before its
 * hold was granted (say for 1, then 3) is asked the same when its turn
 * comes: one for more permits than the owner's hold ends with
 * HILOCK_EINVAL (its callback) rather than wait for that hold. With try
 * once (wait_ms 0), HILOCK_EBUSY also when waiters of this client are
 * queued ahead for the name (see hilock_acquire_cb). Fairness: this client's
 * waiters are served in order (one that asks for many permits holds back
 * those behind it). Across clients, waiting is bounded
 * (hilock_config.starve_ms): a wait that has waited that long takes a
 * place in a queue in Redis, waits that have not starved are refused while
 * places are taken, and the first place takes its permits as soon as they
 * are free; one place per client, so starving clients are served in turn.
 *
 * Returns as hilock_acquire() does; HILOCK_EINVAL also for a count out of
 * range, and on a redlock:// client (N grants on each of a quorum of
 * independent masters do not bound the holders to N). */
HILOCK_API int hilock_semaphore_acquire(hilock_client *c, const char *name,
                                        unsigned permits_total, unsigned permits,
                                        const hilock_acquire_opts *opts,
                                        hilock_acquire_cb cb, void *data,
                                        hilock_wait **wait_out);

/* ---- Read-write lock ---------------------------------------------------- */

/* The read-write lock `name`: at any time either any number of readers
 * (hilock_read_acquire) or one writer (hilock_write_acquire) hold it, over
 * all clients. It is not the mutex of the same name (hilock_acquire): their
 * keys and waiters are separate, and neither excludes the other.
 *
 * Everything else is as for hilock_acquire(): the options, the callback and
 * its statuses, hilock_wait_cancel() (a grant that races the cancel is
 * released), and the hold, released with hilock_release(), renewed by the
 * watchdog, extended with hilock_hold_extend() and reported lost by its
 * lost_cb. Each holder, reader or writer, has its own lease: the entry of a
 * reader that dies is dropped by the next script that runs after its lease
 * (every try prunes them), and a waiter's fallback timer is set at the end
 * of the lease it waits for, so waiters go on without being told.
 *
 * Writers are not starved by readers: a writer that finds readers holding
 * leaves a "writer waiting" marker in Redis, and while it is there new
 * readers wait (readers already in keep their hold until they release or
 * their lease runs out); the writer gets in when the last reader leaves.
 * The writer's retries refresh the marker (at least every second); it runs
 * out 3 s after the last refresh (or at the writer's deadline, if sooner),
 * so a writer that died stops blocking readers then; one that times out,
 * fails or is cancelled removes it at once. A try-once writer (wait_ms 0)
 * leaves no marker. Writers are preferred, within a bound (below).
 *
 * Writers of different processes are served in turn, as the mutex's waits
 * are (hilock_config.starve_ms): a writer that has waited starve_ms takes a
 * place in a queue in Redis, and the writer's release hands the lock to the
 * first live place; while a writer starves the marker says 'q', and new
 * readers and the writers that have not starved wait, so the lock freed by
 * the last reader goes to the queue in order. A starving writer that ends
 * without the lock leaves its place, and the readers it held off are told.
 * A reader that has waited starve_ms takes a place in the same queue and
 * goes in as soon as no writer holds and no live writer's place comes
 * before its own; a writer's release that hands the lock to a reader's
 * place lets in the readers whose places follow it. So a reader waits for
 * the writers queued before it, not for every writer that comes.
 *
 * Readers waiting in one client go in one after the other, without waiting
 * for a release: each read grant lets the client's next waiter try at once
 * (one round trip each); every reader gets a hold of its own. Across
 * clients, a release that leaves the lock free (a writer's, or the last
 * reader's) wakes one waiter per client.
 *
 * Fences (hilock_hold_fence): each write grant gets a fence strictly larger
 * than every fence given for the name before it (as the mutex's: see
 * hilock_hold_fence). A read grant gets the fence of the last write grant
 * (0 if the fence key is gone: it lives fence_ttl_s from when it was
 * made): readers that hold together share
 * it, and a resource can tell which write a reader comes after.
 *
 * Reentrancy (an owner): an owner that holds the write lock gets the read
 * lock or the write lock again at once, as a level of its write hold (the
 * same hilock_hold, whose count grows; release each level). An owner that
 * holds the read lock gets the read lock again the same way. An owner that
 * holds the read lock, or has a read acquire queued, and asks for the
 * write lock is refused at once with HILOCK_EINVAL (no upgrade: it would
 * wait for its own read; release the read lock first). A write queued
 * behind the owner's own queued write and read is no upgrade (that write's
 * grant serves all three); but if that first write ends without a grant
 * (cancelled, timed out), the read goes in alone, and the later write then
 * ends with HILOCK_EINVAL (its callback) when its turn comes. Without an owner,
 * nested acquires are independent: a reader that asks for the read lock
 * again while a writer waits waits behind that writer, which waits for the
 * first read: use an owner for nested reads.
 *
 * Returns as hilock_acquire() does, and HILOCK_EINVAL on a redlock://
 * client (not supported). */
HILOCK_API int hilock_read_acquire(hilock_client *c, const char *name,
                                   const hilock_acquire_opts *opts,
                                   hilock_acquire_cb cb, void *data,
                                   hilock_wait **wait_out);
HILOCK_API int hilock_write_acquire(hilock_client *c, const char *name,
                                    const hilock_acquire_opts *opts,
                                    hilock_acquire_cb cb, void *data,
                                    hilock_wait **wait_out);

/* ---- Fair lock ------------------------------------------------------------ */

/* The fair lock `name`: one holder at a time, as the mutex, and granted in
 * the order the waits reached Redis, over all clients (first come, first
 * served), not to whichever client tries first after a release. It is not
 * the mutex of the same name (hilock_acquire): their keys and waiters are
 * separate, and neither excludes the other.
 *
 * Everything else is as for hilock_acquire(): the options, the callback
 * and its statuses, hilock_wait_cancel() (a grant that races the cancel is
 * given back to the next waiter), reentrancy through an owner, and the
 * hold, released with hilock_release(), renewed by the watchdog, extended
 * with hilock_hold_extend() and reported lost by its lost_cb; fences
 * strictly increase over the grants of the name.
 *
 * How it hands over: every wait joins a queue in Redis when it starts (one
 * command). hilock_release() runs one script that gives the lock to the
 * first waiter in the queue and names it in the release message, so the
 * next holder learns that it holds the lock from the message alone, with
 * no command of its own: a handoff costs two commands in all, whatever
 * the number of clients and waiters (with wait_replicas, one more: the
 * new holder's try, whose WAIT confirms the grant; HILOCK_EREPLICAS and
 * the lock passed on if too few replicas do). That grant lasts a claim
 * window of 1 s; the new holder's watchdog renews it to the hold's lease
 * a third of that later, if it still holds it (a hold shorter than that
 * sends nothing more; a no_renew hold is claimed so too, once). A waiting
 * client also tries once a second, whatever the number of its waiters:
 * that keeps its waiters' places in the queue and finds a grant whose
 * message it missed (a reconnect).
 *
 * Limits, in plain words:
 *  - A waiter's place counts from when its first try reached Redis. The
 *    waits of one client join in the order hilock_fair_acquire() was
 *    called; clients that call at the same moment are ordered by Redis.
 *  - A grant to a client that died (after its wait reached Redis) holds the
 *    lock for the claim window, 1 s, or less if the lease is shorter, then
 *    the next waiter gets it, within a second more. The places of a client
 *    that died (or stopped its loop for more than 5 s) are dropped; when
 *    one whose loop only stalled tries again, or Redis lost the queue (a
 *    restart without persistence), all its waits join again, in their
 *    order, at the end of the queue.
 *  - A grant by message counts its lease from the server's clock, moved
 *    onto this client's clock by its last try: a hold is never thought
 *    longer than the key lives in Redis, unless the server's clock steps
 *    between that try and the grant (never by more than the message's
 *    time in transit).
 *  - hilock_client_free() with waiters leaves their places for up to 5 s
 *    (their client goes quiet); hilock_client_close() removes them.
 *  - With try once (wait_ms 0), the lock is granted only when nobody waits
 *    in the queue (HILOCK_EBUSY otherwise), and the wait joins no queue.
 *
 * Returns as hilock_acquire() does, and HILOCK_EINVAL on a redlock://
 * client (a queue on each of N masters makes no single order). */
HILOCK_API int hilock_fair_acquire(hilock_client *c, const char *name,
                                   const hilock_acquire_opts *opts,
                                   hilock_acquire_cb cb, void *data,
                                   hilock_wait **wait_out);

/* ---- Multi-locks ----------------------------------------------------------- */

/* The most names in one multi-lock. */
#define HILOCK_MULTI_MAX 256

/* A multi-lock's wait (hilock_acquire_multi). */
typedef struct hilock_multi hilock_multi;

/* Take the mutexes of the n names (1..HILOCK_MULTI_MAX, distinct), all
 * or none: cb runs once, deferred, with one hold for them all, or with
 * NULL and the status of the part that failed (as hilock_acquire's: EBUSY,
 * ETIMEDOUT, ECANCELED, a connection error...), after whatever was taken
 * has been given back. Every client takes the names of a multi-lock in
 * one global order (by Cluster slot, then by name), one wait at a time,
 * each woken by its release as any wait is: two multi-locks never
 * deadlock, whatever their names' order in the call. wait_ms counts for
 * them all (0: each is tried once); lease_ms, no_renew and lost_cb apply
 * to each; an owner is refused (a multi-lock is not reentrant). Works on
 * every topology the mutex does.
 *
 * The hold: hilock_release() releases every name (its callback once,
 * HILOCK_ELOST if any had been lost), hilock_hold_extend() extends every
 * lease, hilock_hold_lost() says whether any is lost, and lost_cb runs
 * once, with this hold, when any is. hilock_hold_name() and
 * hilock_hold_fence() are names[0]'s; hilock_hold_fence_at() gives each
 * name's fence. Not for hilock_hold_eval() or hilock_hold_on_revoke()
 * (HILOCK_EINVAL): each name has its own lock, in its own slot.
 *
 * While it waits for a name it holds the names before it in the order, as
 * Redisson's and Curator's multi-locks do; a name lost on the way (an
 * earlier one's renewals failing during a long wait for a later one) is
 * not handed over: all are given back and taken again within wait_ms.
 * Returns 0 and, if out is not NULL, the wait's handle; or at once
 * HILOCK_EINVAL (no names, too many, a bad name or one twice, no cb, an
 * owner, bad opts), HILOCK_ENOMEM, HILOCK_ECLOSED or HILOCK_EFORK. */
HILOCK_API int hilock_acquire_multi(hilock_client *c, const char *const names[], size_t n,
                                    const hilock_acquire_opts *opts, hilock_acquire_cb cb,
                                    void *data, hilock_multi **out);

/* Cancel a multi-lock's wait: its callback runs (deferred) with
 * HILOCK_ECANCELED, and what it took is given back. Returns 0, or
 * HILOCK_EINVAL once its callback has had the hold or the cancel was
 * asked already. The handle is valid until its callback has returned. */
HILOCK_API int hilock_multi_cancel(hilock_multi *m);

/* The fence of names[i] of a multi-lock's hold (0 past the last); of any
 * other hold, hilock_hold_fence() for i 0 and 0 for the rest. */
HILOCK_API uint64_t hilock_hold_fence_at(const hilock_hold *h, size_t i);

/* ---- Holds -------------------------------------------------------------- */

/* The fencing token of this acquisition: strictly increasing per name (a
 * reentrant acquire shares its hold's token; a read hold of a read-write
 * lock has the fence of the last write grant, which the readers share: see
 * hilock_read_acquire). Pass it to the resource you protect so it can
 * reject a stale holder.
 *
 * A fence is the previous fence + 1, kept in a key that expires
 * fence_ttl_s after it was made (see hilock_config); with no key, the
 * server's clock in microseconds from TIME. Fences grow by one per acquisition, slower than the clock, so they keep
 * growing when that key is gone (expired, deleted, evicted, or a restart
 * without persistence), provided the Redis server's wall clock has not
 * stepped back past the last fence in the meantime. Values stay below 2^53
 * (exact in Lua and in a double) until the year 2255. */
HILOCK_API uint64_t hilock_hold_fence(const hilock_hold *h);

/* How long the acquisition that created this hold waited: from
 * hilock_acquire() to the grant, in ms (reentrant acquisitions share the
 * first one's). */
HILOCK_API uint64_t hilock_hold_waited_ms(const hilock_hold *h);

/* The lock name (NUL-terminated, as given to hilock_acquire). */
HILOCK_API const char *hilock_hold_name(const hilock_hold *h);

/* 1 if the hold is lost (see hilock_lost_cb), or its lease has run out
 * since the last renewal Redis confirmed, even if the lost callback has not
 * run yet: a callback that runs late in a loop turn never sees an expired
 * hold as live. Else 0. */
HILOCK_API int hilock_hold_lost(const hilock_hold *h);

/* Reentrancy depth: how many releases this hold still needs. */
HILOCK_API unsigned hilock_hold_count(const hilock_hold *h);

/* status 0: released (or one reentrancy level dropped). HILOCK_ELOST: the
 * key was no longer ours (expired or taken over), so nothing was deleted.
 * HILOCK_ECANCELED: the client was freed before the answer was delivered.
 * Or a connection/reply error: the key then expires after its lease. */
typedef void (*hilock_release_cb)(int status, void *data);

/* Release one level of `h`. The last level deletes the key (only if it is
 * still ours) and wakes a waiter; `h` is invalid after `cb` has run (cb may
 * be NULL). Returns 0, or at once HILOCK_EINVAL for a hold already being
 * released, HILOCK_ENOMEM, HILOCK_ECLOSED (the client is being freed) or
 * HILOCK_EFORK (in a forked child). */
HILOCK_API int hilock_release(hilock_hold *h, hilock_release_cb cb, void *data);

/* Extend the hold's lease by hand: the key's TTL becomes lease_ms from now,
 * and the watchdog (if on) renews with lease_ms from then on. For no_renew
 * holds this is the only way to keep them longer. cb (may be NULL) gets 0,
 * HILOCK_ELOST if the key was no longer ours (the hold is then lost), or a
 * connection/reply error (the lease is unchanged). Returns 0, HILOCK_ELOST
 * at once for a hold already lost, HILOCK_EINVAL for a hold being released
 * or a lease out of range, HILOCK_ENOMEM, or HILOCK_EFORK/HILOCK_ECLOSED. */
HILOCK_API int hilock_hold_extend(hilock_hold *h, uint32_t lease_ms, hilock_release_cb cb,
                                  void *data);

/* ---- Leader election --------------------------------------------------------- */

/* The longest value a campaign stands with (hilock_campaign). */
#define HILOCK_VALUE_MAX 4096

/* Become the leader of the election `name`, standing with `value` (e.g.
 * the leader's address; up to HILOCK_VALUE_MAX bytes, NUL-terminated):
 * a wait, as hilock_acquire's (same options, callback and statuses),
 * whose hold is the leadership. Its fence (hilock_hold_fence) is the
 * leader's epoch, which strictly increases with every new leader. The
 * leadership is renewed and lost as a hold is (lost_cb), and ends with
 * hilock_resign(). The election NAME is not the mutex NAME. One value per
 * election per client at a time: a campaign with another value while
 * this client campaigns or leads is HILOCK_EINVAL. Not over Redlock. */
HILOCK_API int hilock_campaign(hilock_client *c, const char *name, const char *value,
                               const hilock_acquire_opts *opts, hilock_acquire_cb cb, void *data,
                               hilock_wait **wait_out);

/* Resign a leadership (hilock_release of a campaign's hold): the
 * election's observers and campaigns hear it at once. HILOCK_EINVAL for
 * a hold that is not a campaign's. */
HILOCK_API int hilock_resign(hilock_hold *h, hilock_release_cb cb, void *data);

/* status 0: `epoch` and `value` (len bytes, NUL-terminated, valid during
 * the call) are the leader's; epoch 0 and "" when nobody leads. Otherwise
 * an error, or HILOCK_ECANCELED (the client was freed or closed). */
typedef void (*hilock_leader_cb)(int status, uint64_t epoch, const char *value, size_t len,
                                 void *data);

/* Read who leads the election `name`, once: cb runs once, deferred.
 * Returns 0, or HILOCK_EINVAL (NULL, a bad name, over Redlock) /
 * HILOCK_ENOMEM / HILOCK_ECLOSED / HILOCK_EFORK at once. */
HILOCK_API int hilock_leader(hilock_client *c, const char *name, hilock_leader_cb cb, void *data);

/* An observer of an election (hilock_observe). */
typedef struct hilock_observer hilock_observer;

/* Observe the election `name`: cb runs first with who leads now, then at
 * every change of leader (a new epoch, or nobody), deferred, in order,
 * without polling: the name stays subscribed and each change comes in
 * its message (a leader elected and resigned at once is reported, then
 * nobody). The leader is read only at every resubscription after a
 * reconnect or a failover (a change missed meanwhile is reported then:
 * tenures that came and went while the connection was down or being
 * subscribed again are reported as the latest) and at the end of the
 * leader's lease (a leader that died publishes nothing); a read is placed
 * among the messages it races, never reported out of their order. Epochs
 * only grow: a skipped one is a leader nobody saw while connected. The
 * channel is trusted: a client that may PUBLISH on it can mislead
 * observers. Until hilock_observe_stop();
 * if the client is closed or freed first, a last call with
 * HILOCK_ECANCELED. Returns 0 and *out, or HILOCK_EINVAL / HILOCK_ENOMEM /
 * HILOCK_ECLOSED / HILOCK_EFORK at once. */
HILOCK_API int hilock_observe(hilock_client *c, const char *name, hilock_leader_cb cb, void *data,
                              hilock_observer **out);

/* Stop observing: no call after this; `o` is freed. Not during or after
 * the last call (HILOCK_EINVAL). */
HILOCK_API int hilock_observe_stop(hilock_observer *o);

/* A revoke (hilock_revoke) asks the holder of `h` to release it. The
 * holder decides: release it (hilock_release), or not. */
typedef void (*hilock_revoke_cb)(hilock_hold *h, void *data);

/* Listen for revokes of the mutex hold `h`: cb(h, data) runs once, the
 * first time a revoke asks for it (also one asked before this call), and
 * never after the hold's release or loss. The hold's name stays
 * subscribed while it listens, so the request comes at once; a request
 * missed while a connection was down comes with the next renewal. cb
 * NULL: stop listening. Set it in the acquire callback (a setting of the
 * hold, not an acquire option: it costs waiters nothing). Returns 0, or
 * HILOCK_EINVAL (NULL, a hold being released, not a mutex's, or over
 * Redlock), HILOCK_ECLOSED or HILOCK_EFORK. */
HILOCK_API int hilock_hold_on_revoke(hilock_hold *h, hilock_revoke_cb cb, void *data);

/* ---- Guarded writes -------------------------------------------------------- */

/* A Lua script of the caller's, for hilock_hold_eval(): made once (its
 * text is kept with the guard in front, and its SHA-1 computed), used by
 * any number of evals and clients of one thread. */
typedef struct hilock_script hilock_script;

/* Make a script from `body`, Lua as EVAL takes it: it sees its own KEYS
 * and ARGV (the ones given to hilock_hold_eval) and returns what EVAL
 * would. Returns 0 and *out, HILOCK_EINVAL (NULL or blank text, or a
 * "#!" first line: a script with flags cannot be guarded) or
 * HILOCK_ENOMEM. A syntax error shows at the first eval (HILOCK_EREPLY). */
HILOCK_API int hilock_script_new(hilock_script **out, const char *body);

/* Free a script made by hilock_script_new(). Evals of it in flight keep
 * what they need: it may be freed at once after hilock_hold_eval(). */
HILOCK_API void hilock_script_free(hilock_script *s);

/* status 0: the script ran while the hold's token still held the lock,
 * and `reply` is its reply (hiredis's, valid during the callback only).
 * HILOCK_ELOST: the lock was no longer the hold's (its lease ran out, or
 * it was broken or taken over): the script did not run, and the hold is
 * lost. HILOCK_EREPLY: the script ran and failed, or returned an error
 * (`reply` is that error; the text is also in hilock_client_errstr):
 * what it wrote before the error stays written, as with EVAL.
 * HILOCK_EREPLICAS: it ran (`reply` is its reply), but fewer than
 * wait_replicas replicas confirmed it in time. HILOCK_ECONN,
 * HILOCK_EDEADLINE or HILOCK_ECANCELED (the client was freed): the
 * answer never came, and the script may or may not have run; it is never
 * sent twice. Other codes: Redis refused it before it ran (HILOCK_EAUTH,
 * HILOCK_EOOM, HILOCK_EREADONLY...). `reply` is NULL but for 0,
 * HILOCK_EREPLY and HILOCK_EREPLICAS. */
typedef void (*hilock_eval_cb)(int status, const struct redisReply *reply, void *data);

/* The most keys and arguments together that one eval takes. */
#define HILOCK_EVAL_ARGS_MAX 4096

/* Run `s` in Redis, atomically, only if `h`'s token still holds its
 * lock: the check and the script are one script, so no other command
 * comes between them. A holder that was paused or cut off past its lease
 * gets HILOCK_ELOST and its write is not applied: safety without a
 * fenced resource, for data kept in Redis. Every key must be in the
 * lock's Redis Cluster slot, on any server (hilock_hold_key makes such
 * keys), so that what works on one server works on a cluster. `args` are
 * NUL-terminated unless `arglen` gives their lengths (NULL: strlen).
 * Works on every primitive's hold (a read hold checks its own reader's
 * lease); under Sentinel on the master, followed by WAIT when
 * wait_replicas is set; not over Redlock (HILOCK_EINVAL: the data would
 * be on one master of several). Runs in order with the hold's other
 * requests on its connection: an eval sent before hilock_release() runs
 * before the release. cb (may be NULL) runs once, deferred. Returns 0,
 * or at once HILOCK_ELOST (the hold is lost already), HILOCK_EINVAL (bad
 * arguments, a key outside the slot, a hold being released; the reason
 * in hilock_client_errstr), HILOCK_ENOMEM, HILOCK_ECLOSED or HILOCK_EFORK. */
HILOCK_API int hilock_hold_eval(hilock_hold *h, hilock_script *s, int nkeys,
                                const char *const *keys, int nargs, const char *const *args,
                                const size_t *arglen, hilock_eval_cb cb, void *data);

/* Write a key for the caller's data in `h`'s lock slot: the lock's key
 * (hilock_key), then ":u:" and `suffix` ("P{T}:u:SUFFIX"; hilock's own
 * keys never use ":u:"). Into buf (size n), NUL-terminated. Returns its
 * length, or HILOCK_EINVAL (NULL, or the buffer is too small). */
HILOCK_API int hilock_hold_key(const hilock_hold *h, const char *suffix, char *buf, size_t n);

/* ---- Statistics ------------------------------------------------------------ */

/* Histograms have these fixed bucket bounds, in microseconds (100 us to
 * 10 s), and one bucket above the last. */
#define HILOCK_STATS_BUCKETS 16
#define HILOCK_STATS_BOUNDS_US \
    {100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, \
     1000000, 2500000, 5000000, 10000000}

typedef struct hilock_histogram {
    uint64_t count;  /* observations */
    uint64_t sum_us; /* their sum, in microseconds */
    /* bucket[i]: observations above bound i-1 and at most bound i (not
     * cumulative); bucket[HILOCK_STATS_BUCKETS]: those above the last. */
    uint64_t bucket[HILOCK_STATS_BUCKETS + 1];
} hilock_histogram;

/* One Redis server the client talks to: a cluster's masters and the seed
 * it was given (as the URL names it, even when that is a replica or
 * another name of a master), the master the sentinels name and each
 * sentinel, each Redlock master, or the one server. */
typedef struct hilock_node_stats {
    char addr[80];             /* "host:port", or the unix socket's path */
    int cmd_up;                /* its command connection is ready now (1) */
    int sub_up;                /* its subscriber connection is ready now (1) */
    uint64_t connects;         /* connections made (handshake done), both kinds */
    uint64_t reconnects;       /* of those, made again after one was lost */
    uint64_t connect_failures; /* attempts that failed (refused, timed out, AUTH) */
    uint64_t disconnects;      /* ready connections lost */
} hilock_node_stats;

#define HILOCK_STATS_NODES 32 /* nodes listed in hilock_stats.node */
#define HILOCK_STATS_CODES 32 /* errors[k] counts status -k, 0 < k < 32 */

/* A client's statistics: counters since it was made, gauges of now. */
typedef struct hilock_stats {
    size_t size;               /* set by hilock_stats_init(); do not touch */
    /* Acquires (every primitive; reentrant ones too), and their outcomes. */
    uint64_t acquires;         /* calls that returned 0 (their callback runs) */
    uint64_t granted;          /* callbacks with status 0 */
    uint64_t timeouts;         /* ... HILOCK_ETIMEDOUT */
    uint64_t busy;             /* ... HILOCK_EBUSY (try once) */
    uint64_t cancels;          /* ... HILOCK_ECANCELED */
    uint64_t failed;           /* ... any other status */
    /* Every callback's negative status (acquire, release, extend, break,
     * lost), by code: errors[k] counts HILOCK code -k. */
    uint64_t errors[HILOCK_STATS_CODES];
    uint64_t releases;         /* final releases sent to Redis */
    uint64_t holds_lost;       /* holds found lost (hilock_lost_cb) */
    uint64_t tries;            /* try scripts sent (acquire attempts, fair joins) */
    uint64_t renewals;         /* watchdog renewals sent */
    uint64_t renewals_late;    /* renewals confirmed with less than a third of
                                  the lease left (logged as warnings) */
    uint64_t wakeups;          /* release and grant messages received */
    uint64_t fallbacks;        /* waits woken by their fallback timer instead */
    uint64_t redirects_moved;  /* cluster MOVED replies followed */
    uint64_t redirects_ask;    /* cluster ASK replies followed */
    uint64_t slow_replies;     /* replies later than a third of request_timeout_ms
                                  (logged as warnings) */
    /* Gauges. */
    uint64_t waiters;          /* pending waits */
    uint64_t names;            /* lock names the client keeps (waited on, held,
                                  or lingering) */
    uint64_t holds;            /* live holds */
    uint64_t subscriptions;    /* channels subscribed or being subscribed */
    uint64_t connections;      /* connections open or being opened */
    uint64_t connections_up;   /* of those, ready */
    /* Histograms. */
    hilock_histogram wait;     /* acquire call to grant, granted acquires */
    hilock_histogram handoff;  /* a release message received to the grant it
                                  led to: this client's share of a handoff */
    hilock_histogram hold;     /* grant to final release */
    /* Nodes: the first HILOCK_STATS_NODES of nodes_total (the totals above
     * count every node). */
    unsigned nnodes, nodes_total;
    hilock_node_stats node[HILOCK_STATS_NODES];
} hilock_stats;

/* Fill `s`'s size field (a macro: it records sizeof(*s)); call it once
 * before hilock_client_stats(). */
#define hilock_stats_init(s) hilock_stats_init_size((s), sizeof(*(s)))
HILOCK_API void hilock_stats_init_size(hilock_stats *s, size_t size);

/* Fill `out` (set up by hilock_stats_init) with the client's statistics.
 * Cheap enough for every scrape: it copies counters and walks the names
 * and nodes once (no Redis command, no allocation). Returns 0, or
 * HILOCK_EINVAL (NULL, or a struct not set up). Works in a forked child
 * too (it reads the copy). */
HILOCK_API int hilock_client_stats(const hilock_client *c, hilock_stats *out);

/* Write the statistics of `n` clients (stats[i], each with the label text
 * labels[i] in Prometheus syntax, e.g. "worker=\"3\"", or NULL; `labels`
 * itself may be NULL; snapshots must come from hilock_client_stats() of
 * this library or a newer one) in the Prometheus text
 * exposition format (version 0.0.4): metrics named hilock_*, each with its
 * HELP and TYPE lines and one sample per client; nodes and codes as
 * labels; histograms in seconds. Like snprintf: writes at most `len` bytes
 * with the NUL, and returns the length of the whole text (call again with
 * a larger buffer if it is >= len), or HILOCK_EINVAL. */
HILOCK_API int hilock_stats_prometheus(char *buf, size_t len, const hilock_stats *const *stats,
                                       const char *const *labels, size_t n);

/* ---- Breaking, checking and revoking a lock ------------------------------ */

/* status 0: done; `fence` is the fence of the lock that was removed, or 0
 * if nobody held it (Redlock: the largest fence among the quorum of
 * masters that answered first, 0 if fewer than a quorum held it); 1 for a
 * lock removed whose fence is not known (its fence key was gone: it lives
 * fence_ttl_s from when it was made). No fence given is ever 1.
 * Otherwise a connection or reply error, or HILOCK_ECANCELED if the client
 * was freed first. */
typedef void (*hilock_break_cb)(int status, uint64_t fence, void *data);

/* Remove the mutex `name` (hilock_acquire's) whoever holds it, and wake
 * its waiters (the semaphore, read-write and fair locks of that name are
 * not touched: their holders' leases run out by themselves): an
 * operator's last resort for a lock whose holder is known dead, when its
 * lease is too long to wait out. The holder, if alive, finds out at its
 * next renewal (its lost callback runs) but may act as the owner until
 * then: fencing tokens are what protects the resource. Returns 0 (cb runs
 * once, deferred), or HILOCK_EINVAL / HILOCK_ENOMEM / HILOCK_ECLOSED at once. */
HILOCK_API int hilock_break(hilock_client *c, const char *name, hilock_break_cb cb, void *data);

/* status 0: `fence` is the fence of the mutex's current holder, or 0 if
 * nobody holds it (1: held, but its fence is not known: the fence key was
 * gone). Otherwise a connection or reply error, or HILOCK_ECANCELED if
 * the client was freed first. */
typedef void (*hilock_fence_cb)(int status, uint64_t fence, void *data);

/* Read the fence of the current holder of the mutex `name`, for a
 * resource server that refuses a stale holder: a request that carries a
 * fence lower than this comes from a holder whose lock has passed on; one
 * that carries a fence while the lock is free (0) comes from a holder
 * whose lease ran out. The answer is Redis's at one instant: the lock may
 * change hands right after, so a server should also keep the largest
 * fence it has accepted and refuse anything lower (the fencing check that
 * needs no Redis at all). Reads only; the mutex only (the other
 * primitives' holders carry their fences in their holds). Not over
 * Redlock (HILOCK_EINVAL: each master counts its own fences). Returns 0
 * (cb runs once, deferred), or HILOCK_EINVAL / HILOCK_ENOMEM /
 * HILOCK_ECLOSED / HILOCK_EFORK at once. */
HILOCK_API int hilock_check(hilock_client *c, const char *name, hilock_fence_cb cb, void *data);

/* Ask the holder of the mutex `name` to release it (cooperative
 * revocation, Curator's Revoker): its hold's revoke callback
 * (hilock_hold_on_revoke) decides. cb gets the fence of the holder asked,
 * 0 if nobody held the lock (nothing is asked then), or an error. The
 * request reaches the holder at once by a message on the lock's channel
 * while its client listens, and in any case at its next renewal (a third
 * of its lease at most), through a mark on the lock; a holder without a
 * revoke callback is asked, and does nothing. The lock stays held until
 * the holder releases it: a revoke never takes a lock away (hilock_break
 * does). Not over Redlock. Returns 0 (cb runs once, deferred), or
 * HILOCK_EINVAL / HILOCK_ENOMEM / HILOCK_ECLOSED / HILOCK_EFORK at once. */
HILOCK_API int hilock_revoke(hilock_client *c, const char *name, hilock_fence_cb cb, void *data);

/* ---- Keys (documented for interop and tooling) ------------------------ */

/* hilock stores lock NAME under prefix P in these keys, all hash-tagged so
 * that they share one Redis Cluster slot:
 *     P{T}        the lock (a string: the holder's token, then, after a
 *                 space, its marks if any: w once a try found it taken,
 *                 so that its release publishes; q while a wait may
 *                 starve in the queue; v once a revoke asked its holder
 *                 to release it), with a TTL of the lease (of the
 *                 claim window, for a grant by message not yet claimed);
 *                 the holder's fence is P{T}:fence's value
 *     P{T}:fence  the last fence (an integer), with a TTL of fence_ttl_s
 *                 from when it was made
 *     P{T}:ch     the pub/sub channel on which releases ("r") and grants
 *                 to starving waits ("g TOKEN FENCE NOW_MS CLAIM_MS") are
 *                 announced
 *     P{T}:q      the starving waits: as P{T}:fair:q below, 5 s at most
 *                 after the last word of a starving client
 *     P{T}:p      their clients: as P{T}:fair:p below
 * and the semaphore NAME in these (none shared with the mutex NAME):
 *     P{T}:sem        its holders: a sorted set of token -> end of lease
 *                     (the server's Unix time in ms); it expires with the
 *                     last lease
 *     P{T}:sem:h      a hash: "n" -> permits_total, "u" -> permits held,
 *                     "q" -> until when starving waits have places (the
 *                     server's Unix time in ms), token -> "permits
 *                     fence"; expires with P{T}:sem, or at q
 *     P{T}:sem:q, P{T}:sem:p  the starving waits' queue and their clients
 *                     (as the fair lock's :fair:q and :fair:p)
 *     P{T}:sem:fence  the last fence, with a TTL of fence_ttl_s from when it was made
 *     P{T}:sem:ch     the channel of its releases
 * and the read-write lock NAME in these (none shared with the mutex NAME):
 *     P{T}:rw     the writer (a hash: token, fence, q: 1 while a writer may
 *                 starve in the queue), with a TTL of its lease
 *     P{T}:rwr    the readers: a sorted set of token -> end of its lease
 *                 (the server's Unix time in ms); it expires with the last
 *     P{T}:rwf    the last write fence, with a TTL of fence_ttl_s from when it was made
 *     P{T}:rww    the "writer waiting" marker (a writer's token), up to 3 s;
 *                 "q" while writers starve, up to 5 s after the last one
 *     P{T}:rwq, P{T}:rwp  the starving waits' queue (a reader's place has
 *                 1023 as its claim window) and their clients (as the
 *                 fair lock's :fair:q and :fair:p)
 *     P{T}:rw:ch  the channel of its releases
 * and the election NAME (hilock_campaign) in these:
 *     P{T}:el       the leader: a string "TOKEN EPOCH VALUE", with a TTL
 *                   of its lease
 *     P{T}:el:fence the last epoch, with a TTL of fence_ttl_s from when it
 *                   was made
 *     P{T}:el:ch    the channel that hears "l EPOCH LEASE_MS VALUE" (a
 *                   leader elected) and "r EPOCH" (one resigned)
 * and the fair lock NAME in these (none shared with the mutex NAME):
 *     P{T}:fair        the lock (a string "TOKEN FENCE"), with a TTL of
 *                      the lease (of the claim window, for a grant by
 *                      message not yet claimed)
 *     P{T}:fair:q      the queue: a sorted set of token -> place * 1024 +
 *                      claim window (ms)
 *     P{T}:fair:p      the waiting clients: a sorted set of the first 16
 *                      hex digits of their tokens -> until when their
 *                      places count (the server's Unix time in ms)
 *     P{T}:fair:fence  the last fence, with a TTL of fence_ttl_s from when it was made
 *     P{T}:fair:ch:ID  the channel of the grants ("g TOKEN FENCE NOW_MS
 *                      CLAIM_MS") to the client whose tokens begin with
 *                      the 16 hex digits ID: a grant wakes one process
 * where T is NAME with '%', '{' and '}' written as "%25", "%7B", "%7D".
 * That keeps T brace-free and non-empty, so the hash tag is exactly T, and
 * distinct names never share keys. */

/* Write the lock key for `name` under `prefix` (NULL: "hilock:") into buf
 * (size n), NUL-terminated. Returns
 * its length, or a negative code (HILOCK_EINVAL bad args or buffer too small). */
HILOCK_API int hilock_key(const char *prefix, const char *name, char *buf, size_t n);

/* The Redis Cluster slot (0..16383) of a key, per Redis's hash-tag rule. */
HILOCK_API unsigned hilock_key_slot(const char *key, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* HILOCK_H */
