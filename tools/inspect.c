/* hilock inspect: what Redis holds for lock names, for an operator.
 *
 *     hilock inspect [-u URL] [-p PREFIX] [--json] NAME...
 *     hilock inspect [-u URL] [-p PREFIX] [--json] --scan PATTERN
 *
 * A one-shot tool, so it is synchronous hiredis with 2 s timeouts: connect,
 * pipeline a name's reads on the master of its slot, print, leave. It only
 * reads (never KEYS: --scan is SCAN on every master), and knows the key
 * layout of include/hilock/hilock.h ("Keys"). The URL is read by the
 * library's own parser (net/net.h), so that every form the library takes
 * (cluster seeds, redis-sentinel://, redlock://) means the same here; a
 * TLS form's connections are verified by the library's own TLS code
 * (net/tls.h), with the CLI's TLS options. */

#include <fnmatch.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <hiredis/hiredis.h>
#include "hilock/hilock.h"
#include "net/net.h"
#include "net/tls.h"
#include "tools/inspect.h"
#include "tools/urlshow.h"

#define NONE LLONG_MIN      /* a number that is not there ("-", null) */
#define MAX_NODES 64

const char inspect_usage[] =
"Usage: hilock inspect [-u URL] [-p PREFIX] [TLS OPTIONS] [--json] NAME...\n"
"       hilock inspect [-u URL] [-p PREFIX] [TLS OPTIONS] [--json] --scan PATTERN\n"
"Show what Redis holds for the locks NAME: per primitive found (the mutex\n"
"always, the semaphore, read-write lock and fair lock NAME when their keys\n"
"exist), held or free, the holder's token, its fence, the remaining lease,\n"
"the last fence given, and the processes waiting (subscribers of its channel;\n"
"the fair lock's: channels, one per process).\n"
"\n"
"  -u URL          Redis URL (default: $HILOCK_URL, else redis://127.0.0.1:6379);\n"
"                  a cluster is inspected on every master, redlock:// on each\n"
"  -p PREFIX       prefix of the Redis keys (default hilock:)\n"
"  --scan PATTERN  list the held locks whose NAME matches the shell PATTERN\n"
"                  (fnmatch(3)), found with SCAN on every master (never KEYS)\n"
"  --json          a JSON array of objects, one per primitive, for scripts\n"
"  -h, --help      show this help\n"
"\n"
"TLS options, for rediss://, rediss-sentinel:// and redlocks:// URLs, as for\n"
"the rest of hilock (each defaults to $HILOCK_CACERT, $HILOCK_CAPATH, ...):\n"
"  --cacert FILE   CA certificates (PEM) the server's must chain to\n"
"  --capath DIR    a directory of hashed CA certificates\n"
"  --cert FILE     client certificate (PEM) for mutual TLS, with --key\n"
"  --key FILE      its private key (PEM)\n"
"  --sni NAME      the name the server's certificate must carry\n"
"  --insecure      do not verify the server's certificate\n"
"\n"
"The options may come before `inspect` too, with the same meaning:\n"
"`hilock -u URL inspect NAME` is `hilock inspect -u URL NAME`; and after the\n"
"NAMEs. Those of the other forms (-w, -l, -n, -s, -x, -f, -E, -v, --starve,\n"
"--kill-after) are a usage error here.\n"
"\n"
"Exit status: 0 (also when a NAME is free), 64 usage error, 69 Redis could\n"
"not be used (unreachable, authentication failed, TLS refused, an error reply).\n";

/* ---- Output rows ------------------------------------------------------ */

typedef struct node {
    char *host;             /* TCP host, or NULL for a unix socket */
    int port;
    char *path;
    char addr[300];         /* "host:port" or the socket's path, for messages */
    redisContext *c;        /* NULL: unreachable */
    struct ssl_st *ssl;     /* TLS: c's SSL until the server first answers
                               (a refusal may show only then: hl_tls_why) */
    int master;
} node;

typedef struct holder {
    char *token;
    long long permits, fence, ttl_ms;
} holder;

/* One primitive of one name, as printed. */
typedef struct row {
    char *name;
    const char *kind;       /* "mutex", "semaphore", "rwlock", "fair" */
    const node *server;
    int held;
    char *token;            /* the holder's, or NULL */
    long long fence, ttl_ms, last_fence, waiting;
    char detail[64];
    long long permits_total, permits_held;  /* semaphore */
    holder *holders;
    size_t nholders;
    long long readers;                      /* rwlock */
    int writer_waiting;
    long long queue;                        /* fair: its waits; mutex, rwlock: the starving ones */
} row;

enum { T_ONE, T_CLUSTER, T_REDLOCK };

typedef struct ctx {
    hilock_config cfg;      /* the URL, prefix and TLS settings */
    hl_tls *tls;            /* the URL is a TLS form: every connection's */
    int json;
    int status;             /* 0, or EX_UNAVAILABLE once anything failed */
    hl_url url;
    int topo;               /* T_* */
    node nodes[MAX_NODES];
    int nnodes;
    short owner[16384];     /* cluster: the index of each slot's master, or -1 */
    row *rows;
    size_t nrows, cap;
} ctx;

static int usage_error(const char *fmt, ...) {
    va_list ap;
    fputs("hilock: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'hilock inspect --help' for more information.\n", stderr);
    return EX_USAGE;
}

/* A Redis failure: say where and what, and exit 69 in the end. */
static void fail(ctx *x, const node *n, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "hilock: inspect: %s: ", n != NULL ? n->addr : "redis");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    x->status = EX_UNAVAILABLE;
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (p == NULL) {
        fputs("hilock: out of memory\n", stderr);
        exit(EX_SOFTWARE);
    }
    return p;
}

static char *xstrndup(const char *s, size_t n) {
    char *p = xcalloc(n + 1, 1);
    memcpy(p, s, n);
    return p;
}

static row *new_row(ctx *x, const char *name, const char *kind, const node *server) {
    row *r;
    if (x->nrows == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 16;
        x->rows = realloc(x->rows, x->cap * sizeof(*r));
        if (x->rows == NULL) { fputs("hilock: out of memory\n", stderr); exit(EX_SOFTWARE); }
    }
    r = &x->rows[x->nrows++];
    memset(r, 0, sizeof(*r));
    r->name = xstrndup(name, strlen(name));
    r->kind = kind;
    r->server = server;
    r->fence = r->ttl_ms = r->last_fence = r->permits_total = NONE;
    return r;
}

static void row_free(row *r) {
    for (size_t h = 0; h < r->nholders; h++) free(r->holders[h].token);
    free(r->holders);
    free(r->token);
    free(r->name);
}

static void drop_last_row(ctx *x) {
    row_free(&x->rows[--x->nrows]);
}

static void free_rows(ctx *x) {
    for (size_t i = 0; i < x->nrows; i++) row_free(&x->rows[i]);
    free(x->rows);
}

/* ---- Connections ------------------------------------------------------ */

/* A number from an integer or a decimal string reply; NONE otherwise. */
static long long num(const redisReply *r) {
    if (r == NULL) return NONE;
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING && r->str[0] >= '0' && r->str[0] <= '9') return strtoll(r->str, NULL, 10);
    return NONE;
}

static const char *str(const redisReply *r) {
    return r != NULL && r->type == REDIS_REPLY_STRING ? r->str : NULL;
}

static redisReply *elem(const redisReply *r, size_t i) {
    return r != NULL && r->type == REDIS_REPLY_ARRAY && i < r->elements ? r->element[i] : NULL;
}

static void node_set(node *n, const char *host, int port, const char *path) {
    memset(n, 0, sizeof(*n));
    n->host = host ? xstrndup(host, strlen(host)) : NULL;
    n->port = port;
    n->path = path ? xstrndup(path, strlen(path)) : NULL;
    if (path) snprintf(n->addr, sizeof(n->addr), "%s", path);
    else if (strchr(host, ':')) snprintf(n->addr, sizeof(n->addr), "[%s]:%d", host, port);
    else snprintf(n->addr, sizeof(n->addr), "%s:%d", host, port);
}

static void node_close(node *n) {
    if (n->c) redisFree(n->c);
    free(n->host);
    free(n->path);
    memset(n, 0, sizeof(*n));
}

/* n's connection broke: say why (TLS's reason when the server never
 * answered on it) and drop it. */
static void lost(ctx *x, node *n) {
    char why[256];
    if (n->ssl != NULL && hl_tls_why(n->ssl, n->host, n->port, why, sizeof(why)))
        fail(x, n, "%s", why);
    else
        fail(x, n, "%s", n->c->errstr[0] ? n->c->errstr : "connection lost");
    redisFree(n->c);
    n->c = NULL;
    n->ssl = NULL;
}

/* One command, checked: the reply, or NULL after saying why (an error
 * reply is freed and reported). */
static redisReply *command(ctx *x, node *n, const char *fmt, ...) {
    redisReply *r;
    va_list ap;

    va_start(ap, fmt);
    r = redisvCommand(n->c, fmt, ap);
    va_end(ap);
    if (r == NULL) {
        lost(x, n);
        return NULL;
    }
    n->ssl = NULL; /* it answered: TLS is no longer in question */
    if (r->type == REDIS_REPLY_ERROR) {
        fail(x, n, "%.*s: %s", (int)strcspn(fmt, " "), fmt, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* Connect with 2 s timeouts (the TLS handshake's too), over TLS for a TLS
 * URL; `what` names the server in a message ("" or " to the sentinel"). 0,
 * or -1 after saying why. */
static int node_connect(ctx *x, node *n, const char *what) {
    struct timeval tv = { 2, 0 };
    char why[256];

    n->c = n->path ? redisConnectUnixWithTimeout(n->path, tv) : redisConnectWithTimeout(n->host, n->port, tv);
    if (n->c == NULL || n->c->err) {
        fail(x, n, "cannot connect%s: %s", what, n->c ? n->c->errstr : "out of memory");
    } else if (redisSetTimeout(n->c, tv) != REDIS_OK) {
        fail(x, n, "cannot set a timeout: %s", n->c->errstr);
    } else if (x->tls != NULL && n->host != NULL &&
               hl_tls_connect(x->tls, n->c, n->host, n->port, &n->ssl, why, sizeof(why)) != 0) {
        fail(x, n, "%s", why);
    } else {
        return 0;
    }
    if (n->c) redisFree(n->c);
    n->c = NULL;
    return -1;
}

/* Connect, AUTH and SELECT as the URL says (SELECT not in a cluster: db 0
 * is the only one). 0, or -1 after saying why. */
static int node_open(ctx *x, node *n, int select_db) {
    redisReply *r = NULL;

    if (node_connect(x, n, "") != 0) return -1;
    if (x->url.user)
        r = command(x, n, "AUTH %s %s", x->url.user, x->url.pass ? x->url.pass : "");
    else if (x->url.pass)
        r = command(x, n, "AUTH %s", x->url.pass);
    else
        r = command(x, n, "PING");
    if (r == NULL) goto fail;
    freeReplyObject(r);
    if (select_db && x->url.db != 0) {
        if ((r = command(x, n, "SELECT %d", x->url.db)) == NULL) goto fail;
        freeReplyObject(r);
    }
    return 0;
fail:
    if (n->c) redisFree(n->c);
    n->c = NULL;
    return -1;
}

static int add_node(ctx *x, const char *host, int port, int master) {
    for (int i = 0; i < x->nnodes; i++)
        if (x->nodes[i].host && strcmp(x->nodes[i].host, host) == 0 && x->nodes[i].port == port) {
            x->nodes[i].master |= master;
            return i;
        }
    if (x->nnodes == MAX_NODES) return -1;
    node_set(&x->nodes[x->nnodes], host, port, NULL);
    x->nodes[x->nnodes].master = master;
    return x->nnodes++;
}

/* The cluster's nodes from CLUSTER SLOTS on `seed`: every master, and the
 * replicas too (classic subscribers may sit on any node). */
static int load_cluster(ctx *x, node *seed) {
    redisReply *r = command(x, seed, "CLUSTER SLOTS");

    if (r == NULL) return -1;
    for (int s = 0; s < 16384; s++) x->owner[s] = -1;
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *range = r->element[i];
        if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
        for (size_t j = 2; j < range->elements; j++) {
            redisReply *a = range->element[j];
            const char *host;
            int idx;
            if (a->type != REDIS_REPLY_ARRAY || a->elements < 2) continue;
            host = a->element[0]->str != NULL && a->element[0]->str[0] ? a->element[0]->str : seed->host;
            idx = add_node(x, host, (int)a->element[1]->integer, j == 2);
            if (idx < 0) continue;
            if (j == 2)
                for (long long s = range->element[0]->integer; s <= range->element[1]->integer && s < 16384; s++)
                    x->owner[s] = (short)idx;
        }
    }
    freeReplyObject(r);
    for (int i = 0; i < x->nnodes; i++) node_open(x, &x->nodes[i], 0);
    return 0;
}

/* A server that says cluster_enabled:1 is a cluster node. */
static int is_cluster(ctx *x, node *n) {
    redisReply *r = command(x, n, "INFO cluster");
    int yes = r != NULL && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_enabled:1") != NULL;
    if (r) freeReplyObject(r);
    return yes;
}

/* redis:// or unix://: the first seed that answers; a cluster if it is one. */
static int open_redis(ctx *x) {
    node seed;
    int i;

    for (i = 0; i <= x->url.nmore; i++) {
        hl_addr a = hl_url_addr(&x->url, i);
        node_set(&seed, x->url.path ? NULL : a.host, a.port, x->url.path);
        if (node_open(x, &seed, 1) == 0) break;
        node_close(&seed);
    }
    if (i > x->url.nmore) return -1;
    x->status = 0; /* a seed that did not answer is no failure now */
    if (seed.path == NULL && is_cluster(x, &seed)) {
        int rc;
        x->topo = T_CLUSTER;
        rc = load_cluster(x, &seed);
        node_close(&seed);
        return rc;
    }
    x->nodes[0] = seed;
    x->nodes[0].master = 1;
    x->nnodes = 1;
    return 0;
}

/* The master's address from one sentinel; 0 or -1. */
static int ask_sentinel(ctx *x, const hl_addr *a, node *master) {
    node s;
    redisReply *r;
    int rc = -1;

    node_set(&s, a->host, a->port, NULL);
    if (node_connect(x, &s, " to the sentinel") != 0) {
        node_close(&s);
        return -1;
    }
    r = command(x, &s, "SENTINEL get-master-addr-by-name %s", x->url.master);
    if (str(elem(r, 0)) != NULL && str(elem(r, 1)) != NULL) {
        node_set(master, r->element[0]->str, atoi(r->element[1]->str), NULL);
        rc = 0;
    } else if (r != NULL) {
        fail(x, &s, "the sentinel knows no master named %s", x->url.master);
    }
    if (r) freeReplyObject(r);
    node_close(&s);
    return rc;
}

/* A node whose ROLE says master: a sentinel may name an old master for a
 * moment after a failover. */
static int says_master(ctx *x, node *n) {
    redisReply *r = command(x, n, "ROLE");
    int yes = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
              r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;
    if (r != NULL && !yes) fail(x, n, "the sentinels' master is not a master (ROLE)");
    if (r) freeReplyObject(r);
    return yes;
}

static int open_sentinel(ctx *x) {
    for (int i = 0; i <= x->url.nmore; i++) {
        hl_addr a = hl_url_addr(&x->url, i);
        node *m = &x->nodes[0];
        if (ask_sentinel(x, &a, m) != 0) continue;
        if (node_open(x, m, 1) == 0 && says_master(x, m)) {
            x->status = 0; /* a sentinel that did not answer is no failure now */
            m->master = 1;
            x->nnodes = 1;
            return 0;
        }
        node_close(m);
    }
    return -1;
}

/* redlock://: every master on its own; one that is down is reported, the
 * others are still shown. */
static int open_redlock(ctx *x) {
    int up = 0;
    x->topo = T_REDLOCK;
    for (int i = 0; i <= x->url.nmore && i < MAX_NODES; i++) {
        hl_addr a = hl_url_addr(&x->url, i);
        node *n = &x->nodes[x->nnodes++];
        node_set(n, a.host, a.port, NULL);
        n->master = 1;
        if (node_open(x, n, 1) == 0) up++;
    }
    return up > 0 ? 0 : -1;
}

/* ---- Reading one name -------------------------------------------------- */

/* The keys of one name (include/hilock/hilock.h, "Keys"). */
enum { K_LOCK, K_FENCE, K_CH, K_Q, K_SEM, K_SEMH, K_SEMFENCE, K_SEMCH, K_RW, K_RWR, K_RWF, K_RWW,
       K_RWQ, K_RWCH, K_FAIR, K_FAIRQ, K_FAIRFENCE, K_FAIRCH, NKEYS };
static const char *const suffixes[NKEYS] = {
    "", ":fence", ":ch", ":q", ":sem", ":sem:h", ":sem:fence", ":sem:ch", ":rw", ":rwr", ":rwf", ":rww",
    ":rwq", ":rw:ch", ":fair", ":fair:q", ":fair:fence", ":fair:ch:",
};

/* The reads of one name, sent in one pipeline to the master of its slot
 * (every key shares the slot), then the subscriber counts. */
enum { Q_TIME, Q_LOCK, Q_LOCK_TTL, Q_FENCE, Q_Q, Q_SEM, Q_SEMH, Q_SEMFENCE, Q_RW, Q_RW_TTL, Q_RWR,
       Q_RWF, Q_RWW, Q_RWQ, Q_FAIR, Q_FAIR_TTL, Q_FAIRFENCE, Q_FAIRQ, NQ };
static const struct { const char *fmt; int key; } queries[NQ] = {
    [Q_TIME] = { "TIME", -1 },
    [Q_LOCK] = { "GET %b", K_LOCK },
    [Q_LOCK_TTL] = { "PTTL %b", K_LOCK },
    [Q_FENCE] = { "GET %b", K_FENCE },
    [Q_Q] = { "ZCARD %b", K_Q },
    [Q_SEM] = { "ZRANGE %b 0 -1 WITHSCORES", K_SEM },
    [Q_SEMH] = { "HGETALL %b", K_SEMH },
    [Q_SEMFENCE] = { "GET %b", K_SEMFENCE },
    [Q_RW] = { "HMGET %b token fence", K_RW },
    [Q_RW_TTL] = { "PTTL %b", K_RW },
    [Q_RWR] = { "ZRANGE %b 0 -1 WITHSCORES", K_RWR },
    [Q_RWF] = { "GET %b", K_RWF },
    [Q_RWW] = { "EXISTS %b", K_RWW },
    [Q_RWQ] = { "ZCARD %b", K_RWQ },
    [Q_FAIR] = { "GET %b", K_FAIR },
    [Q_FAIR_TTL] = { "PTTL %b", K_FAIR },
    [Q_FAIRFENCE] = { "GET %b", K_FAIRFENCE },
    [Q_FAIRQ] = { "ZCARD %b", K_FAIRQ },
};
/* The channels whose subscribers are counted, per primitive. The fair
 * lock's is the prefix of one channel per client (its grants go to the
 * grantee's process alone): its channels are counted, not subscribers. */
enum { CH_MUTEX, CH_SEM, CH_RW, CH_FAIR, NCH };
static const int channels[NCH] = { K_CH, K_SEMCH, K_RWCH, K_FAIRCH };

typedef struct lookup {
    const char *name;
    char *key[NKEYS];
    size_t len[NKEYS];
    redisReply *rep[NQ];
    long long now_ms;       /* the server's clock (leases in sorted sets are on it) */
    long long waiting[NCH];
} lookup;

static int lookup_keys(lookup *l, const char *prefix, const char *name) {
    size_t cap = strlen(prefix) + 3 * strlen(name) + 32;
    char *base = xcalloc(cap, 1);
    int n = hilock_key(prefix, name, base, cap);

    memset(l, 0, sizeof(*l));
    l->name = name;
    if (n < 0) { free(base); return -1; }
    for (int k = 0; k < NKEYS; k++) {
        l->len[k] = (size_t)n + strlen(suffixes[k]);
        l->key[k] = xcalloc(l->len[k] + 1, 1);
        memcpy(l->key[k], base, (size_t)n);
        strcpy(l->key[k] + n, suffixes[k]);
    }
    free(base);
    return 0;
}

static void lookup_free(lookup *l) {
    for (int k = 0; k < NKEYS; k++) free(l->key[k]);
    for (int q = 0; q < NQ; q++)
        if (l->rep[q]) freeReplyObject(l->rep[q]);
}

/* Read every reply of the pipeline; -1 when the connection failed. */
static int read_replies(ctx *x, node *n, redisReply **rep, int count) {
    for (int i = 0; i < count; i++) {
        void *r = NULL;
        if (redisGetReply(n->c, &r) != REDIS_OK) {
            lost(x, n);
            return -1;
        }
        rep[i] = r;
    }
    return 0;
}

/* The PUBSUB pattern of the fair lock's channels: its prefix, glob
 * characters escaped, then a client's 16 hex digits. */
static char *fair_channels_pattern(const lookup *l) {
    const char *k = l->key[K_FAIRCH];
    char *p = xcalloc(2 * l->len[K_FAIRCH] + 16 * 8 + 1, 1), *o = p;
    for (size_t i = 0; i < l->len[K_FAIRCH]; i++) {
        if (strchr("*?[]\\", k[i])) *o++ = '\\';
        *o++ = k[i];
    }
    for (int i = 0; i < 16; i++) o += sprintf(o, "[0-9a-f]");
    return p;
}

/* PUBSUB NUMSUB (or SHARDNUMSUB) of the name's channels, and CHANNELS (or
 * SHARDCHANNELS) of the fair lock's, added to l->waiting. A server older
 * than Redis 7 has no sharded pub/sub: its error replies count 0. */
static int count_subs(ctx *x, node *n, lookup *l, const char *sub, int optional) {
    redisReply *r[2];
    int rc = 0, sharded = strncmp(sub, "SHARD", 5) == 0;
    const char *argv[2 + NCH] = { "PUBSUB", sub };
    size_t argl[2 + NCH] = { 6, strlen(sub) };
    char *pattern = fair_channels_pattern(l);

    for (int c = 0; c < CH_FAIR; c++) {
        argv[2 + c] = l->key[channels[c]];
        argl[2 + c] = l->len[channels[c]];
    }
    if (n->c == NULL) { free(pattern); return -1; }
    redisAppendCommandArgv(n->c, 2 + CH_FAIR, argv, argl);
    redisAppendCommand(n->c, "PUBSUB %s %s", sharded ? "SHARDCHANNELS" : "CHANNELS", pattern);
    free(pattern);
    if (read_replies(x, n, r, 2) != 0) return -1;
    if (r[0]->type == REDIS_REPLY_ERROR || r[1]->type == REDIS_REPLY_ERROR) {
        if (!optional) {
            fail(x, n, "PUBSUB %s: %s", sub, (r[0]->type == REDIS_REPLY_ERROR ? r[0] : r[1])->str);
            rc = -1;
        }
    } else {
        for (int c = 0; c < CH_FAIR; c++) {
            long long v = num(elem(r[0], 2 * (size_t)c + 1));
            if (v != NONE) l->waiting[c] += v;
        }
        if (r[1]->type == REDIS_REPLY_ARRAY) l->waiting[CH_FAIR] += (long long)r[1]->elements;
    }
    freeReplyObject(r[0]);
    freeReplyObject(r[1]);
    return rc;
}

/* A hash in the mutex's key is the hold of a hilock older than 1.1 (a
 * fleet being upgraded), which GET answers WRONGTYPE: read its token and
 * fence from the hash instead (an array in place of GET's string). */
static int older_mutex(ctx *x, node *n, lookup *l) {
    if (l->rep[Q_LOCK]->type != REDIS_REPLY_ERROR || strncmp(l->rep[Q_LOCK]->str, "WRONGTYPE", 9) != 0) return 0;
    redisReply *h = redisCommand(n->c, "HMGET %b token fence", l->key[K_LOCK], l->len[K_LOCK]);
    if (h == NULL || h->type != REDIS_REPLY_ARRAY) {
        fail(x, n, "HMGET %s: %s", l->key[K_LOCK], h ? h->str : n->c->errstr);
        if (h) freeReplyObject(h);
        return -1;
    }
    freeReplyObject(l->rep[Q_LOCK]);
    l->rep[Q_LOCK] = h;
    return 0;
}

/* Every read of the name on `n`, and its subscribers: classic ones on
 * every node of a cluster (a classic subscription lives on one node,
 * any), sharded ones on the slot's master. */
static int lookup_run(ctx *x, node *n, lookup *l) {
    if (n->c == NULL) { fail(x, n, "not connected: cannot inspect %s", l->name); return -1; }
    for (int q = 0; q < NQ; q++) {
        int k = queries[q].key;
        if (k < 0) redisAppendCommand(n->c, queries[q].fmt);
        else redisAppendCommand(n->c, queries[q].fmt, l->key[k], l->len[k]);
    }
    if (read_replies(x, n, l->rep, NQ) != 0) return -1;
    if (older_mutex(x, n, l) != 0) return -1;
    for (int q = 0; q < NQ; q++)
        if (l->rep[q]->type == REDIS_REPLY_ERROR) {
            fail(x, n, "%.*s %s: %s", (int)strcspn(queries[q].fmt, " "), queries[q].fmt,
                 queries[q].key < 0 ? "" : l->key[queries[q].key], l->rep[q]->str);
            return -1;
        }
    l->now_ms = num(elem(l->rep[Q_TIME], 0)) * 1000 + num(elem(l->rep[Q_TIME], 1)) / 1000;
    if (count_subs(x, n, l, "SHARDNUMSUB", 1) != 0) return -1;
    if (x->topo != T_CLUSTER) return count_subs(x, n, l, "NUMSUB", 0);
    for (int i = 0; i < x->nnodes; i++)
        if (x->nodes[i].c != NULL && count_subs(x, &x->nodes[i], l, "NUMSUB", 0) != 0) return -1;
    return 0;
}

/* ---- From replies to rows ---------------------------------------------- */

static int exists(const redisReply *r) {
    return r != NULL && (r->type == REDIS_REPLY_STRING || (r->type == REDIS_REPLY_ARRAY && r->elements > 0) ||
                         (r->type == REDIS_REPLY_INTEGER && r->integer > 0));
}

static row *add_mutex(ctx *x, const node *n, lookup *l) {
    row *r = new_row(x, l->name, "mutex", n);
    const redisReply *lock = l->rep[Q_LOCK];
    int older = lock->type == REDIS_REPLY_ARRAY; /* older_mutex's token and fence */
    const char *token = older ? str(elem(lock, 0)) : str(lock); /* "TOKEN" or "TOKEN MARKS" */

    r->last_fence = num(l->rep[Q_FENCE]);
    r->held = token != NULL;
    if (r->held) {
        r->token = xstrndup(token, strcspn(token, " "));
        r->fence = older ? num(elem(lock, 1)) : r->last_fence; /* the last fence given is the holder's */
        r->ttl_ms = num(l->rep[Q_LOCK_TTL]);
    }
    r->waiting = l->waiting[CH_MUTEX];
    r->queue = num(l->rep[Q_Q]);
    if (r->queue > 0) snprintf(r->detail, sizeof(r->detail), "starving %lld", r->queue);
    else if (older && r->held) snprintf(r->detail, sizeof(r->detail), "held by hilock 1.0");
    return r;
}

/* The value of field `f` in an HGETALL reply, or NULL. */
static const char *hash_get(const redisReply *h, const char *f) {
    for (size_t i = 0; h != NULL && i + 1 < h->elements; i += 2)
        if (strcmp(h->element[i]->str, f) == 0) return h->element[i + 1]->str;
    return NULL;
}

/* The semaphore's live holders: those of P{T}:sem whose lease ends after
 * the server's now (dead ones stay until the next acquire drops them). */
static row *add_semaphore(ctx *x, const node *n, lookup *l) {
    row *r = new_row(x, l->name, "semaphore", n);
    const redisReply *z = l->rep[Q_SEM], *h = l->rep[Q_SEMH];
    long long last_end = NONE;

    r->holders = xcalloc(z->elements / 2, sizeof(holder));
    r->permits_held = 0;
    for (size_t i = 0; i + 1 < z->elements; i += 2) {
        long long end = (long long)strtod(z->element[i + 1]->str, NULL);
        const char *v = hash_get(h, z->element[i]->str);
        holder *o;
        if (end <= l->now_ms) continue;
        o = &r->holders[r->nholders++];
        o->token = xstrndup(z->element[i]->str, strlen(z->element[i]->str));
        o->permits = v ? strtoll(v, NULL, 10) : NONE;
        o->fence = v && strchr(v, ' ') ? strtoll(strchr(v, ' ') + 1, NULL, 10) : NONE;
        o->ttl_ms = end - l->now_ms;
        if (o->permits != NONE) r->permits_held += o->permits;
        if (end > last_end) last_end = end;
    }
    r->held = r->nholders > 0;
    if (r->nholders == 1) {
        r->token = xstrndup(r->holders[0].token, strlen(r->holders[0].token));
        r->fence = r->holders[0].fence;
    }
    if (r->held) r->ttl_ms = last_end - l->now_ms;
    r->permits_total = hash_get(h, "n") ? strtoll(hash_get(h, "n"), NULL, 10) : NONE;
    r->last_fence = num(l->rep[Q_SEMFENCE]);
    r->waiting = l->waiting[CH_SEM];
    if (r->permits_total != NONE)
        snprintf(r->detail, sizeof(r->detail), "permits %lld/%lld, %zu holder%s", r->permits_held,
                 r->permits_total, r->nholders, r->nholders == 1 ? "" : "s");
    return r;
}

static row *add_rwlock(ctx *x, const node *n, lookup *l) {
    row *r = new_row(x, l->name, "rwlock", n);
    const char *token = str(elem(l->rep[Q_RW], 0));
    const redisReply *z = l->rep[Q_RWR];
    long long last_end = NONE;

    for (size_t i = 0; i + 1 < z->elements; i += 2) {
        long long end = (long long)strtod(z->element[i + 1]->str, NULL);
        if (end <= l->now_ms) continue;
        r->readers++;
        if (end > last_end) last_end = end;
    }
    r->writer_waiting = exists(l->rep[Q_RWW]);
    r->held = token != NULL || r->readers > 0;
    if (token != NULL) {
        r->token = xstrndup(token, strlen(token));
        r->fence = num(elem(l->rep[Q_RW], 1));
        r->ttl_ms = num(l->rep[Q_RW_TTL]);
        snprintf(r->detail, sizeof(r->detail), "writer");
    } else if (r->readers > 0) {
        r->ttl_ms = last_end - l->now_ms;
        snprintf(r->detail, sizeof(r->detail), "%lld reader%s", r->readers, r->readers == 1 ? "" : "s");
    }
    r->queue = num(l->rep[Q_RWQ]);
    if (r->writer_waiting)
        snprintf(r->detail + strlen(r->detail), sizeof(r->detail) - strlen(r->detail), "%swriter waiting",
                 r->detail[0] ? ", " : "");
    if (r->queue > 0)
        snprintf(r->detail + strlen(r->detail), sizeof(r->detail) - strlen(r->detail), "%sstarving %lld",
                 r->detail[0] ? ", " : "", r->queue);
    r->last_fence = num(l->rep[Q_RWF]);
    r->waiting = l->waiting[CH_RW];
    return r;
}

/* The fair lock is a string "TOKEN FENCE". */
static row *add_fair(ctx *x, const node *n, lookup *l) {
    row *r = new_row(x, l->name, "fair", n);
    const char *v = str(l->rep[Q_FAIR]);

    r->held = v != NULL;
    if (r->held) {
        const char *sp = strchr(v, ' ');
        r->token = xstrndup(v, sp ? (size_t)(sp - v) : strlen(v));
        r->fence = sp ? strtoll(sp + 1, NULL, 10) : NONE;
        r->ttl_ms = num(l->rep[Q_FAIR_TTL]);
    }
    r->queue = num(l->rep[Q_FAIRQ]);
    r->last_fence = num(l->rep[Q_FAIRFENCE]);
    r->waiting = l->waiting[CH_FAIR];
    snprintf(r->detail, sizeof(r->detail), "queue %lld", r->queue);
    return r;
}

/* Which primitives of the name to show. */
enum { F_MUTEX = 1, F_SEM = 2, F_RW = 4, F_FAIR = 8, F_ALL = 15 };

/* The primitives other than the mutex that have any key, or a waiter. */
static unsigned present(const lookup *l) {
    redisReply *const *q = l->rep;
    unsigned f = F_MUTEX;
    if (exists(q[Q_SEM]) || exists(q[Q_SEMH]) || exists(q[Q_SEMFENCE]) || l->waiting[CH_SEM]) f |= F_SEM;
    if (exists(elem(q[Q_RW], 0)) || exists(q[Q_RWR]) || exists(q[Q_RWF]) || exists(q[Q_RWW]) || l->waiting[CH_RW])
        f |= F_RW;
    if (exists(q[Q_FAIR]) || exists(q[Q_FAIRQ]) || exists(q[Q_FAIRFENCE]) || l->waiting[CH_FAIR]) f |= F_FAIR;
    return f;
}

/* Rows for the primitives of `name` on `n` in `want`; held ones only if
 * held_only (--scan). */
static void inspect_on(ctx *x, node *n, const char *name, unsigned want, int held_only) {
    row *(*const add[])(ctx *, const node *, lookup *) = { add_mutex, add_semaphore, add_rwlock, add_fair };
    lookup l;

    if (lookup_keys(&l, x->cfg.prefix, name) != 0) return; /* checked before */
    if (lookup_run(x, n, &l) == 0) {
        want &= present(&l);
        for (unsigned k = 0; k < 4; k++) {
            if (!(want & (1u << k))) continue;
            row *r = add[k](x, n, &l);
            if (held_only && !r->held) drop_last_row(x);
        }
    }
    lookup_free(&l);
}

/* The node of NAME's slot: a cluster's master of it, else the one server. */
static void inspect_name(ctx *x, const char *name) {
    if (x->topo == T_REDLOCK) {
        for (int i = 0; i < x->nnodes; i++)
            if (x->nodes[i].c != NULL) inspect_on(x, &x->nodes[i], name, F_ALL, 0);
        return;
    }
    if (x->topo == T_CLUSTER) {
        lookup l;
        int m;
        lookup_keys(&l, x->cfg.prefix, name);
        m = x->owner[hilock_key_slot(l.key[K_LOCK], l.len[K_LOCK])];
        lookup_free(&l);
        if (m < 0) { fail(x, NULL, "no master serves the slot of %s", name); return; }
        inspect_on(x, &x->nodes[m], name, F_ALL, 0);
        return;
    }
    inspect_on(x, &x->nodes[0], name, F_ALL, 0);
}

/* ---- --scan ---------------------------------------------------------------- */

typedef struct found {
    char *name;
    int node;
    unsigned kind;          /* F_* */
} found;

typedef struct founds {
    found *v;
    size_t n, cap;
} founds;

/* NAME from the hash tag T of a key P{T}SUFFIX, and which primitive's lock
 * key it is (0 for the fence, queue, hash and marker keys). */
static unsigned decode_key(const char *key, size_t len, size_t plen, char **name) {
    static const struct { const char *suffix; unsigned kind; } locks[] = {
        { "", F_MUTEX }, { ":sem", F_SEM }, { ":rw", F_RW }, { ":rwr", F_RW }, { ":fair", F_FAIR },
    };
    const char *t = key + plen + 1, *end;
    unsigned kind = 0;
    char *out, *o;

    if (len < plen + 3 || key[plen] != '{') return 0;
    end = memchr(t, '}', len - plen - 1);
    if (end == NULL || end == t) return 0;
    for (size_t i = 0; i < sizeof(locks) / sizeof(locks[0]); i++)
        if (strlen(locks[i].suffix) == (size_t)(key + len - end - 1) && memcmp(end + 1, locks[i].suffix, strlen(locks[i].suffix)) == 0)
            kind = locks[i].kind;
    if (kind == 0) return 0;
    out = o = xcalloc((size_t)(end - t) + 1, 1);
    for (const char *p = t; p < end; p++) {
        if (*p == '%' && end - p >= 3 && strncmp(p, "%25", 3) == 0) { *o++ = '%'; p += 2; }
        else if (*p == '%' && end - p >= 3 && strncmp(p, "%7B", 3) == 0) { *o++ = '{'; p += 2; }
        else if (*p == '%' && end - p >= 3 && strncmp(p, "%7D", 3) == 0) { *o++ = '}'; p += 2; }
        else if (*p == '\0') { free(out); return 0; }
        else *o++ = *p;
    }
    *name = out;
    return kind;
}

static void add_found(founds *f, char *name, int idx, unsigned kind) {
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 64;
        f->v = realloc(f->v, f->cap * sizeof(*f->v));
        if (f->v == NULL) { fputs("hilock: out of memory\n", stderr); exit(EX_SOFTWARE); }
    }
    f->v[f->n++] = (found){ name, idx, kind };
}

/* MATCH takes a glob: the prefix's own glob characters are escaped. */
static char *match_of(const char *prefix) {
    char *m = xcalloc(2 * strlen(prefix) + 3, 1), *o = m;
    for (const char *p = prefix; *p; p++) {
        if (strchr("*?[]\\", *p)) *o++ = '\\';
        *o++ = *p;
    }
    strcpy(o, "{*");
    return m;
}

/* SCAN one master (cursor, MATCH, COUNT 1000) for the lock keys of the
 * prefix whose NAME matches the pattern. */
static int scan_node(ctx *x, int idx, const char *match, const char *pattern, founds *f) {
    node *n = &x->nodes[idx];
    char cursor[32] = "0";
    size_t plen = strlen(x->cfg.prefix);

    do {
        redisReply *r = command(x, n, "SCAN %s MATCH %s COUNT 1000", cursor, match);
        redisReply *keys = elem(r, 1);
        if (r == NULL) return -1;
        snprintf(cursor, sizeof(cursor), "%s", str(elem(r, 0)) ? str(elem(r, 0)) : "0");
        for (size_t i = 0; keys != NULL && i < keys->elements; i++) {
            char *name = NULL;
            unsigned kind = decode_key(keys->element[i]->str, (size_t)keys->element[i]->len, plen, &name);
            if (kind == 0) continue;
            if (fnmatch(pattern, name, 0) == 0) add_found(f, name, idx, kind);
            else free(name);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

static int found_cmp(const void *a, const void *b) {
    const found *p = a, *q = b;
    int c = strcmp(p->name, q->name);
    return c != 0 ? c : p->node - q->node;
}

/* Every master's held locks whose NAME matches, each name once per master
 * (SCAN may return a key twice; a read-write lock has two lock keys). */
static void scan_all(ctx *x, const char *pattern) {
    char *match = match_of(x->cfg.prefix);
    founds f = { NULL, 0, 0 };
    size_t i, j;

    for (int k = 0; k < x->nnodes; k++)
        if (x->nodes[k].master && x->nodes[k].c != NULL) scan_node(x, k, match, pattern, &f);
        else if (x->nodes[k].master) fail(x, &x->nodes[k], "not connected: cannot scan it");
    free(match);
    if (f.n > 0) qsort(f.v, f.n, sizeof(*f.v), found_cmp);
    for (i = 0; i < f.n; i = j) {
        unsigned kinds = 0;
        for (j = i; j < f.n && found_cmp(&f.v[i], &f.v[j]) == 0; j++) kinds |= f.v[j].kind;
        inspect_on(x, &x->nodes[f.v[i].node], f.v[i].name, kinds, 1);
    }
    for (i = 0; i < f.n; i++) free(f.v[i].name);
    free(f.v);
}

/* ---- Printing -------------------------------------------------------------- */

/* The length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    size_t len, i;
    unsigned cp;

    if (s[0] < 0x80) return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) { len = 2; cp = s[0] & 0x1fu; }
    else if ((s[0] & 0xf0) == 0xe0) { len = 3; cp = s[0] & 0x0fu; }
    else if (s[0] >= 0xf0 && s[0] <= 0xf4) { len = 4; cp = s[0] & 0x07u; }
    else return 0;
    if (n < len) return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    if (len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) return 0;
    if (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) return 0;
    return len;
}

static int valid_utf8(const char *s) {
    size_t n = strlen(s), i, k;
    for (i = 0; i < n; i += k)
        if ((k = utf8_len((const unsigned char *)s + i, n - i)) == 0) return 0;
    return 1;
}

/* For a terminal: control bytes, '\' and invalid UTF-8 as \xHH, so that a
 * name cannot move the cursor or hide in the table. */
static char *text_of(const char *s) {
    size_t n = strlen(s), i, k;
    char *out = xcalloc(4 * n + 1, 1), *o = out;

    for (i = 0; i < n; i += k) {
        const unsigned char *p = (const unsigned char *)s + i;
        k = utf8_len(p, n - i);
        if (k == 0 || *p < 0x20 || *p == 0x7f || *p == '\\') {
            o += sprintf(o, "\\x%02x", *p);
            k = 1;
        } else {
            memcpy(o, p, k);
            o += k;
        }
    }
    return out;
}

/* Width on a terminal: one column per character (UTF-8 lead byte). */
static size_t width(const char *s) {
    size_t w = 0;
    for (; *s; s++) w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

static char *num_text(long long v) {
    char buf[32];
    if (v == NONE) return xstrndup("-", 1);
    snprintf(buf, sizeof(buf), "%lld", v);
    return xstrndup(buf, strlen(buf));
}

/* A token's first 8 characters and "…": enough to tell holders apart. */
static char *short_token(const char *token) {
    char *t, *out;
    size_t i = 0, chars = 0;
    if (token == NULL) return xstrndup("-", 1);
    t = text_of(token);
    if (width(t) <= 9) return t;
    while (chars < 8) { /* past 8 characters, each a lead byte and its continuations */
        i++;
        while (((unsigned char)t[i] & 0xc0) == 0x80) i++;
        chars++;
    }
    out = xcalloc(i + 4, 1);
    memcpy(out, t, i);
    strcpy(out + i, "\xe2\x80\xa6"); /* U+2026 HORIZONTAL ELLIPSIS */
    free(t);
    return out;
}

enum { C_NAME, C_SERVER, C_KIND, C_STATE, C_HOLDER, C_FENCE, C_TTL, C_LAST, C_WAITING, C_DETAIL, NCOL };
static const char *const headers[NCOL] = {
    "NAME", "SERVER", "KIND", "STATE", "HOLDER", "FENCE", "TTL_MS", "LAST_FENCE", "WAITING", "DETAIL",
};

static void cells_of(const row *r, char **cell) {
    cell[C_NAME] = text_of(r->name);
    cell[C_SERVER] = xstrndup(r->server->addr, strlen(r->server->addr));
    cell[C_KIND] = xstrndup(r->kind, strlen(r->kind));
    cell[C_STATE] = xstrndup(r->held ? "held" : "free", 4);
    cell[C_HOLDER] = short_token(r->token);
    cell[C_FENCE] = num_text(r->fence);
    cell[C_TTL] = num_text(r->ttl_ms);
    cell[C_LAST] = num_text(r->last_fence);
    cell[C_WAITING] = num_text(r->waiting);
    cell[C_DETAIL] = xstrndup(r->detail[0] ? r->detail : "-", r->detail[0] ? strlen(r->detail) : 1);
}

/* Aligned columns, two spaces apart; SERVER only for redlock://, where each
 * master has its own copy of a lock. */
static void print_text(ctx *x) {
    size_t w[NCOL], i;
    char **cells = xcalloc(x->nrows * NCOL + 1, sizeof(char *));
    int c;

    for (c = 0; c < NCOL; c++) w[c] = strlen(headers[c]);
    for (i = 0; i < x->nrows; i++) {
        cells_of(&x->rows[i], cells + i * NCOL);
        for (c = 0; c < NCOL; c++)
            if (width(cells[i * NCOL + c]) > w[c]) w[c] = width(cells[i * NCOL + c]);
    }
    for (i = 0; i <= x->nrows; i++) {
        for (c = 0; c < NCOL; c++) {
            const char *s = i == 0 ? headers[c] : cells[(i - 1) * NCOL + c];
            if (c == C_SERVER && x->topo != T_REDLOCK) continue;
            if (c == NCOL - 1) printf("%s\n", s);
            else printf("%s%*s", s, (int)(w[c] - width(s) + 2), "");
        }
    }
    for (i = 0; i < x->nrows * NCOL; i++) free(cells[i]);
    free(cells);
}

/* A JSON string: '"', '\', control bytes and every byte that is not part
 * of valid UTF-8 escaped (\u00XX: the byte as a code point). */
static void json_str(const char *s) {
    size_t n = strlen(s), i, k;

    putchar('"');
    for (i = 0; i < n; i += k) {
        const unsigned char *p = (const unsigned char *)s + i;
        k = utf8_len(p, n - i);
        if (k == 0 || *p < 0x20 || *p == 0x7f) { printf("\\u%04x", *p); k = 1; }
        else if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else fwrite(p, 1, k, stdout);
    }
    putchar('"');
}

static void json_num(const char *key, long long v) {
    if (v == NONE) printf(", \"%s\": null", key);
    else printf(", \"%s\": %lld", key, v);
}

static void json_row(const row *r) {
    printf("{\"name\": ");
    json_str(r->name);
    if (!valid_utf8(r->name)) {
        printf(", \"name_hex\": \"");
        for (const unsigned char *p = (const unsigned char *)r->name; *p; p++) printf("%02x", *p);
        putchar('"');
    }
    printf(", \"kind\": \"%s\", \"server\": ", r->kind);
    json_str(r->server->addr);
    printf(", \"held\": %s, \"token\": ", r->held ? "true" : "false");
    if (r->token) json_str(r->token);
    else printf("null");
    json_num("fence", r->fence);
    json_num("ttl_ms", r->ttl_ms);
    json_num("last_fence", r->last_fence);
    json_num("waiting", r->waiting);
    if (strcmp(r->kind, "semaphore") == 0) {
        json_num("permits_total", r->permits_total);
        json_num("permits_held", r->permits_held);
        printf(", \"holders\": [");
        for (size_t h = 0; h < r->nholders; h++) {
            printf("%s{\"token\": ", h ? ", " : "");
            json_str(r->holders[h].token);
            json_num("permits", r->holders[h].permits);
            json_num("fence", r->holders[h].fence);
            json_num("ttl_ms", r->holders[h].ttl_ms);
            putchar('}');
        }
        putchar(']');
    } else if (strcmp(r->kind, "rwlock") == 0) {
        json_num("readers", r->readers);
        printf(", \"writer_waiting\": %s", r->writer_waiting ? "true" : "false");
        json_num("queue", r->queue);
    } else {
        json_num("queue", r->queue);
    }
    putchar('}');
}

/* One array, one object a line. */
static void print_json(ctx *x) {
    putchar('[');
    for (size_t i = 0; i < x->nrows; i++) {
        fputs(i ? ",\n " : "\n ", stdout);
        json_row(&x->rows[i]);
    }
    fputs(x->nrows ? "\n]\n" : "]\n", stdout);
}

/* ---- main -------------------------------------------------------------------- */

static int open_target(ctx *x) {
    if (x->url.kind == HL_URL_SENTINEL) return open_sentinel(x);
    if (x->url.kind == HL_URL_REDLOCK) return open_redlock(x);
    return open_redis(x);
}

/* The TLS context of a TLS URL, made as the library makes a client's
 * (hl_tls_make): 0, or -1 after saying why (a file that cannot be loaded;
 * TLS not built in, and what to build). */
static int open_tls(ctx *x) {
    char why[256];
    if (!x->url.tls || hl_tls_make(&x->cfg, &x->tls, why, sizeof(why)) == 0) return 0;
    fprintf(stderr, "hilock: inspect: %s\n", why);
    return -1;
}

/* The table or the JSON: not when it failed with nothing to show, where a
 * header alone, or [], would read as "nothing held". */
static void print_rows(ctx *x) {
    if (x->nrows == 0 && x->status != 0) return;
    if (x->json) print_json(x);
    else print_text(x);
}

int inspect_run(const inspect_args *a) {
    ctx *x = xcalloc(1, sizeof(*x));
    char shown[4096];
    int rc;

    x->cfg = a->cfg;
    x->json = a->json;
    if (hl_url_parse(x->cfg.url, &x->url) != 0) {
        rc = usage_error("bad Redis URL '%s'%s: %s", url_shown(x->cfg.url, shown, sizeof(shown)),
                         a->url_from_env ? " (from $HILOCK_URL)" : "", url_why(x->cfg.url));
        free(x);
        return rc;
    }
    if (open_tls(x) != 0 || open_target(x) != 0) {
        x->status = EX_UNAVAILABLE;
    } else {
        if (a->scan != NULL) scan_all(x, a->scan);
        for (int i = 0; a->scan == NULL && i < a->nnames; i++) inspect_name(x, a->names[i]);
    }
    print_rows(x);
    rc = x->status;
    for (int i = 0; i < x->nnodes; i++) node_close(&x->nodes[i]);
    hl_tls_destroy(x->tls);
    hl_url_free(&x->url);
    free_rows(x);
    free(x);
    return rc;
}
