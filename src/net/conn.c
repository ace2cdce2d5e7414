/* One connection's life cycle: connect, the handshake (AUTH, SELECT, and
 * the eviction check), reconnect with exponential backoff and jitter. A
 * command connection is hiredis's async API; a subscriber connection is
 * read by sub.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "net/net.h"
#include "net/conn_private.h"


static hl_conn *conn_of(const redisAsyncContext *ac) { return (hl_conn *)ac->data; }

/* ASKING refused (an ACL without +asking): the request behind it would be
 * sent back by MOVED, and bounce until the hop limit; its reply ends it
 * with HILOCK_EAUTH instead. Only an error reply touches r: hiredis runs
 * this before r's own callback, while r is sent (alive). */
static void on_asking(redisAsyncContext *ac, void *reply_, void *privdata) {
    redisReply *reply = reply_;
    hl_req *r = privdata;
    (void)ac;
    if (reply == NULL || reply->type != REDIS_REPLY_ERROR || !hl_reply_is_acl(reply->str)) return;
    r->asking_refused = 1;
    hl_set_error(r->net->loop, "%s (ACL: ASKING, sent before a request for a slot that is "
                 "migrating)", reply->str);
}

/* ASKING covers the next command only: again before each send (a
 * NOSCRIPT -> EVAL retry after an ASK hop needs it too). A request that
 * waits for replicas is followed by WAIT on the same connection, which
 * covers its write; its own reply is kept until WAIT's comes. */
/* Whether `s` went out on k as EVAL already; if not, it will now. */
static int script_loaded(hl_conn *k, const hl_script *s) {
    uint64_t id = 0;
    for (int i = 0; i < 16; i++) /* hex digits, lower case */
        id = id << 4 | (uint64_t)(s->sha[i] <= '9' ? s->sha[i] - '0' : s->sha[i] - 'a' + 10);
    for (int i = 0; i < k->nloaded; i++)
        if (k->loaded[i] == id) return 1;
    if (k->nloaded < (int)(sizeof(k->loaded) / sizeof(k->loaded[0]))) k->loaded[k->nloaded++] = id;
    return 0;
}

/* "$LEN\r\nARG\r\n" at p; returns its length. */
static size_t put_bulk(char *p, const char *a, size_t len) {
    size_t n = 1;
    p[0] = '$';
    n += hl_u64_text(p + n, len);
    memcpy(p + n, "\r\n", 2);
    memcpy(p + n + 2, a, len);
    memcpy(p + n + 2 + len, "\r\n", 2);
    return n + len + 4;
}

#define BULK_MAX_OVERHEAD 25 /* '$', 20 digits, two CRLFs */

/* The request in the protocol's own form, written here rather than by
 * hiredis's generic formatter (redisAsyncCommandArgv: sdscatfmt per
 * argument, the client's largest cost per lock): EVALSHA SHA NKEYS KEYS...
 * ARGS... [PUBLISH]. hiredis copies it. */
void hl_conn_send(hl_conn *k, hl_req *r) {
    const hl_script *s = r->script;
    int eval = s != NULL && (!script_loaded(k, s) || r->use_eval);
    const char *head[2] = {eval ? "EVAL" : "EVALSHA", s ? (eval ? s->body : s->sha) : NULL};
    const char *pub = r->publishes ? (k->net->sharded ? "SPUBLISH" : "PUBLISH") : NULL;
    char nkeys[24], few[1024], *buf = few;
    size_t nk = hl_u64_text(nkeys, (uint64_t)r->nkeys), size = 16;
    int argc = (s ? 3 : 0) + r->nargs + (pub != NULL);
    if (s) size += strlen(head[0]) + strlen(head[1]) + nk + 3 * BULK_MAX_OVERHEAD;
    for (int i = 0; i < r->nargs; i++) size += r->argl[i] + BULK_MAX_OVERHEAD;
    if (pub) size += strlen(pub) + BULK_MAX_OVERHEAD;
    if (size > sizeof(few) && (buf = malloc(size)) == NULL) {
        hl_list_push(&k->queue, &r->link); /* sent when the connection is next ready */
        return;
    }
    size_t n = 1;
    buf[0] = '*';
    n += hl_u64_text(buf + n, (uint64_t)argc);
    memcpy(buf + n, "\r\n", 2);
    n += 2;
    if (s) {
        n += put_bulk(buf + n, head[0], strlen(head[0]));
        n += put_bulk(buf + n, head[1], strlen(head[1]));
        n += put_bulk(buf + n, nkeys, nk);
    }
    for (int i = 0; i < r->nargs; i++) n += put_bulk(buf + n, r->argv[i], r->argl[i]);
    if (pub) n += put_bulk(buf + n, pub, strlen(pub));
    if (r->asking) redisAsyncCommand(k->ac, on_asking, r, "ASKING");
    redisCallbackFn *fn = r->wait_replicas ? hl_req_on_stash : hl_req_on_reply;
    int ok = redisAsyncFormattedCommand(k->ac, fn, r, buf, n) == REDIS_OK;
    if (buf != few) free(buf);
    if (!ok) {
        hl_list_push(&k->queue, &r->link); /* disconnecting: next connection */
        return;
    }
    if (r->wait_replicas)
        redisAsyncCommand(k->ac, hl_req_on_wait, r, "WAIT %u %u", (unsigned)r->wait_replicas,
                          (unsigned)k->net->wait_timeout_ms);
    r->sent = 1;
    r->ever_sent = 1;
    r->sent_at = hl_now_coarse_ms();
}

int hl_conn_error(const hl_conn *k) {
    /* Connected (the handshake counts) but unanswered is a server that does
     * not answer in time; short of connected, the connection's fault. */
    if (k->state == HL_CONN_READY || k->state == HL_CONN_HANDSHAKE) return HILOCK_EDEADLINE;
    return k->last_err ? k->last_err : HILOCK_ECONN;
}

/* ---- Life cycle --------------------------------------------------------- */

/* A connection is ready again after one was lost: say so, once it works. */
static void conn_count_ready(hl_conn *k) {
    char at[96];
    k->connects++;
    if (k->down_at == 0) return;
    k->reconnects++;
    hl_log(k->net->loop, HILOCK_LOG_INFO, "%s connection to %s is back after %llu ms",
           k->is_sub ? "subscriber" : "command", hl_addr_text(k->addr, at, sizeof(at)),
           (unsigned long long)(hl_now_ms() - k->down_at));
    k->down_at = 0;
}

/* A ready connection was lost (a warning: requests wait or fail until it
 * is back), or an attempt failed (counted only: the first loss said it,
 * and a server that stays away would repeat it at every backoff). Not
 * while the client closes. */
static void conn_count_down(hl_conn *k, int was) {
    char at[96];
    if (was != HL_CONN_READY) {
        if (was != HL_CONN_DOWN) k->failed_attempts++;
        return;
    }
    k->drops++;
    k->down_at = hl_now_ms();
    if (k->net->closing) return;
    hl_log(k->net->loop, HILOCK_LOG_WARNING, "%s connection to %s lost (%s); reconnecting",
           k->is_sub ? "subscriber" : "command", hl_addr_text(k->addr, at, sizeof(at)),
           k->why[0] ? k->why : hilock_strerror(k->last_err ? k->last_err : HILOCK_ECONN));
}

void hl_conn_set_why(hl_conn *k, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->why, sizeof(k->why), fmt, ap);
    va_end(ap);
    hl_set_error(k->net->loop, "%s", k->why);
}

/* ---- Health: a connection gone silent -------------------------------------- */

/* A blackholed flow (a NAT or firewall that forgot an idle connection, a
 * partition that sends no RST or FIN) shows nothing to the socket, and a
 * subscriber that has nothing to send would wait for ever, hearing no
 * release. So a ready connection that has been quiet for a quarter of
 * health_ms is sent a PING (any answer counts: an ACL's NOPERM too), and
 * one that has heard nothing at all for health_ms is dropped and
 * reconnected, as a lost one: a dead connection is found within
 * health_ms and a quarter, whatever the traffic. */
#define HEALTH_TICKS 4

static void on_pong(redisAsyncContext *ac, void *reply, void *privdata) {
    (void)privdata;
    if (reply != NULL && ac->data != NULL) hl_conn_heard(ac->data);
}

static void health_tick(hl_timer *t) {
    hl_conn *k = HL_CONTAINER(t, hl_conn, health);
    hl_net *net = k->net;
    uint64_t now = hl_now_coarse_ms(), quiet = now - k->heard_at, every = net->health_ms / HEALTH_TICKS;
    uint64_t late = now > k->health_due ? now - k->health_due : 0;
    if (k->state != HL_CONN_READY || net->loop->freeing || net->loop->forked) return;
    /* A tick that comes a period late says that we were away (the process
     * stopped, the loop stalled), not the server: what it sent meanwhile
     * may be in the socket, unread. Judge at the next tick. */
    if (late >= every && quiet >= net->health_ms) quiet = net->health_ms - 1;
    if (quiet >= net->health_ms) {
        k->last_err = HILOCK_ECONN;
        hl_conn_set_why(k, "nothing heard for %llu ms, PING unanswered (health check: the "
                        "connection is dead or blackholed)", (unsigned long long)quiet);
        hl_conn_teardown(k);
        return;
    }
    if (quiet >= every && !k->ping_out) {
        k->ping_out = 1;
        if (k->is_sub) hl_sub_ping(k);
        else redisAsyncCommand(k->ac, on_pong, NULL, "PING");
    }
    k->health_due = now + every;
    hl_timer_start(net->loop, &k->health, every);
}

static void health_start(hl_conn *k) {
    uint64_t every = k->net->health_ms / HEALTH_TICKS;
    hl_conn_heard(k);
    k->health_due = k->heard_at + every;
    if (k->net->health_ms != 0) hl_timer_start(k->net->loop, &k->health, every);
}

void hl_conn_ready(hl_conn *k) {
    conn_count_ready(k);
    k->why[0] = '\0';
    health_start(k);
    k->state = HL_CONN_READY;
    k->failures = 0;
    k->last_err = 0;
    hl_timer_stop(k->net->loop, &k->connect_to);
    while (!hl_list_empty(&k->queue) && k->state == HL_CONN_READY) {
        hl_req *r = HL_CONTAINER(k->queue.next, hl_req, link);
        hl_list_remove(&r->link);
        hl_conn_send(k, r);
    }
    if (k->ev.ready) k->ev.ready(k->ev.arg);
}

void hl_conn_fail_queue(hl_conn *k, int err) {
    while (!hl_list_empty(&k->queue)) {
        hl_req *r = HL_CONTAINER(k->queue.next, hl_req, link);
        hl_req_finish(r, NULL, err);
    }
}

/* A handshake step failed in a way that will not fix itself (a wrong
 * password or db, a refused server): fail what waits at once. */
static void handshake_failed(hl_conn *k, redisAsyncContext *ac, int err) {
    k->last_err = err;
    hl_conn_fail_queue(k, err);
    redisAsyncDisconnect(ac);
}

static void on_handshake(redisAsyncContext *ac, void *reply_, void *privdata) {
    redisReply *reply = reply_;
    hl_conn *k = conn_of(ac);
    if (reply == NULL || k->net->loop->freeing) return;
    if (reply->type == REDIS_REPLY_ERROR) {
        int err = hl_reply_error(k->net->loop, reply);
        if (privdata == &k->handshake_left) err = HILOCK_EAUTH; /* any AUTH refusal */
        else if (hl_reply_is_acl(reply->str)) /* SELECT */
            hl_set_error(k->net->loop, "%s (ACL: SELECT, sent at every connect as the URL names "
                         "db %d)", reply->str, k->net->url.db);
        handshake_failed(k, ac, err);
        return;
    }
    if (--k->handshake_left == 0) hl_conn_ready(k);
}

/* The maxmemory-policy line of an INFO reply, or "" if there is none. */
static void info_policy(const redisReply *reply, char *out, size_t n) {
    static const char field[] = "maxmemory_policy:";
    const char *p = reply->type == REDIS_REPLY_STRING ? strstr(reply->str, field) : NULL;
    size_t len = 0;
    if (p != NULL) {
        p += sizeof(field) - 1;
        while (p[len] != '\0' && p[len] != '\r' && p[len] != '\n' && len + 1 < n) len++;
        memcpy(out, p, len);
    }
    out[len] = '\0';
}

/* The number of the INFO line `field` (its name and colon, at the start
 * of a line) in `info`, or -1. */
static long info_field(const char *info, const char *field) {
    size_t len = strlen(field);
    for (const char *p = info; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, field, len) == 0) return strtol(p + len, NULL, 10);
    return -1;
}

static long info_number(const redisReply *reply, const char *field) {
    return reply->type == REDIS_REPLY_STRING ? info_field(reply->str, field) : -1;
}

int hl_info_sharded_pubsub(const char *info) {
    return info_field(info, "cluster_enabled:") == 1 &&
           (info_field(info, "redis_version:") >= 7 || info_field(info, "valkey_version:") >= 7);
}

/* HILOCK_PUBSUB_AUTO: sharded pub/sub as hl_info_sharded_pubsub says,
 * decided by the first server that answers (every client of a cluster
 * decides the same). */
void hl_net_pubsub_decide(hl_net *net, const redisReply *info) {
    if (net->sharded_known) return;
    net->sharded_known = 1;
    if (net->pubsub == HILOCK_PUBSUB_AUTO)
        net->sharded = info->type == REDIS_REPLY_STRING && hl_info_sharded_pubsub(info->str);
}

/* Warn, once per policy seen, that the server may evict locks. */
static void warn_eviction(hl_net *net, const char *policy, const char *why) {
    const char *seen = *policy ? policy : "?";
    if (strcmp(seen, net->policy_warned) == 0) return;
    snprintf(net->policy_warned, sizeof(net->policy_warned), "%s", seen);
    if (*policy)
        hl_log(net->loop, HILOCK_LOG_WARNING,
               "Redis has maxmemory-policy %s: it may evict a held lock (then two clients hold "
               "it) or a fence key; set maxmemory-policy noeviction", policy);
    else
        hl_log(net->loop, HILOCK_LOG_WARNING,
               "cannot read maxmemory-policy from INFO memory (%s): whether Redis may evict "
               "locks is unknown%s", why,
               net->pubsub == HILOCK_PUBSUB_AUTO && !net->sharded
                   ? "; pub/sub is classic (on a Redis Cluster 7, allow +info or set "
                     "hilock_config.pubsub to sharded, as its other clients use)"
                   : "");
}

/* Eviction breaks a lock: an evicted lock key lets a second client take it,
 * an evicted fence key makes fences lean on the clock alone. Any policy but
 * noeviction may evict our keys (they all have a TTL, so volatile-* too).
 * CONFIG may be renamed or forbidden, so the policy is read from INFO (the
 * default sections: memory, and server and cluster for the pub/sub mode). */
static void on_info(redisAsyncContext *ac, void *reply_, void *privdata) {
    redisReply *reply = reply_;
    hl_conn *k = conn_of(ac);
    hl_net *net = k->net;
    char policy[64];
    (void)privdata;
    if (reply == NULL || net->loop->freeing || (ac->c.flags & REDIS_DISCONNECTING)) return;
    /* INFO refused (an ACL without +info) goes on, warned: refusing would
     * reconnect for ever for what is a check. The policy is unknown
     * (require_noeviction refuses that), and so is the pub/sub mode. */
    net->cluster_enabled = reply->type == REDIS_REPLY_ERROR ? -1
                           : info_number(reply, "cluster_enabled:") == 1;
    hl_net_pubsub_decide(net, reply);
    info_policy(reply, policy, sizeof(policy));
    if (strcmp(policy, "noeviction") != 0) {
        warn_eviction(net, policy, reply->type == REDIS_REPLY_ERROR ? reply->str : "no such field");
        if (net->require_noeviction) {
            hl_set_error(net->loop, "maxmemory-policy is %s, and require_noeviction is set",
                         *policy ? policy : "unknown");
            handshake_failed(k, ac, HILOCK_EEVICTION);
            return;
        }
    }
    if (--k->handshake_left == 0) hl_conn_ready(k);
}

/* Sentinel: the node the sentinels named must say it is the master. A
 * replica (a failover under way, or a sentinel that lags) is dropped
 * without failing what waits: the topology asks the sentinels again when
 * it hears of the loss, and the reconnect goes where they say. */
static void on_role(redisAsyncContext *ac, void *reply_, void *privdata) {
    redisReply *reply = reply_;
    hl_conn *k = conn_of(ac);
    (void)privdata;
    if (reply == NULL || k->net->loop->freeing || (ac->c.flags & REDIS_DISCONNECTING)) return;
    if (reply->type == REDIS_REPLY_ERROR && hl_reply_is_acl(reply->str)) {
        /* Without ROLE a replica the sentinels named in passing would be
         * taken for the master: refuse until the ACL allows it. */
        hl_set_error(k->net->loop, "%s (ACL: ROLE, asked at every connect to a master that "
                     "Sentinel names)", reply->str);
        handshake_failed(k, ac, HILOCK_EAUTH);
        return;
    }
    int master = reply->type != REDIS_REPLY_ARRAY || reply->elements == 0 ||
                 reply->element[0]->type != REDIS_REPLY_STRING ||
                 strcmp(reply->element[0]->str, "master") == 0; /* ROLE refused: cannot tell */
    if (!master) {
        hl_set_error(k->net->loop, "%s:%d is a %s, not the master", k->addr->host, k->addr->port,
                     reply->element[0]->str);
        k->last_err = HILOCK_EREADONLY;
        redisAsyncDisconnect(ac);
        return;
    }
    if (--k->handshake_left == 0) hl_conn_ready(k);
}

static void send_handshake(hl_conn *k) {
    const hl_url *u = &k->net->url;
    redisAsyncContext *ac = k->ac;
    k->handshake_left = 0;
    if (k->bare) return;
    if (u->pass) {
        if (u->user)
            redisAsyncCommand(ac, on_handshake, &k->handshake_left, "AUTH %s %s", u->user, u->pass);
        else
            redisAsyncCommand(ac, on_handshake, &k->handshake_left, "AUTH %s", u->pass);
        k->handshake_left++;
    }
    if (u->db != 0) {
        redisAsyncCommand(ac, on_handshake, NULL, "SELECT %d", u->db);
        k->handshake_left++;
    }
    redisAsyncCommand(ac, on_info, NULL, "INFO");
    k->handshake_left++;
    if (k->net->check_role) {
        redisAsyncCommand(ac, on_role, NULL, "ROLE");
        k->handshake_left++;
    }
}

int hl_conn_tls_refused(hl_conn *k) {
    char why[256];
    if (k->ssl == NULL || k->state == HL_CONN_READY || !hl_tls_failed(k, why, sizeof(why)))
        return 0;
    hl_set_error(k->net->loop, "%s", why);
    k->last_err = HILOCK_ETLS;
    hl_conn_fail_queue(k, HILOCK_ETLS);
    return 1;
}

static void on_connect(const redisAsyncContext *ac, int status) {
    hl_conn *k = conn_of(ac);
    hl_loop *l = k->net->loop;
    k->nloaded = 0; /* maybe another server process: load again */
    if (status != REDIS_OK) {
        /* hiredis frees the context after this returns. hiredis 1.x may
         * see the TCP connect done only after TLS ran (and failed). */
        if (!hl_conn_tls_refused(k)) {
            hl_set_error(l, "connect: %s", ac->errstr);
            k->last_err = HILOCK_ECONN;
        }
        k->ac = NULL;
        k->ssl = NULL; /* freed with the context */
        conn_count_down(k, k->state);
        k->state = HL_CONN_DOWN;
        hl_timer_stop(l, &k->connect_to);
        if (k->ev.lost && !l->freeing && !l->forked) k->ev.lost(k->ev.arg);
        hl_conn_retry_later(k);
        return;
    }
    k->state = HL_CONN_HANDSHAKE;
    send_handshake(k);
    if (k->handshake_left == 0) hl_conn_ready(k);
}

/* The connection is gone (hiredis's disconnect callback, or our teardown
 * when hiredis did not call it). */
void hl_conn_down(hl_conn *k) {
    int was = k->state;
    k->ac = NULL;
    k->ssl = NULL; /* hiredis freed it with the context */
    k->state = HL_CONN_DOWN;
    hl_timer_stop(k->net->loop, &k->connect_to);
    hl_timer_stop(k->net->loop, &k->health);
    if (k->net->loop->freeing || k->net->loop->forked) return;
    conn_count_down(k, was);
    if (k->ev.lost) k->ev.lost(k->ev.arg);
    hl_conn_retry_later(k);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    hl_conn *k = conn_of(ac);
    if (status != REDIS_OK && hl_conn_tls_refused(k)) {
        /* said why */
    } else if (status != REDIS_OK) {
        if (ac->err == REDIS_ERR_PROTOCOL) k->last_err = HILOCK_EPROTO;
        else if (k->last_err == 0) k->last_err = HILOCK_ECONN;
        snprintf(k->why, sizeof(k->why), "%s", ac->errstr);
        hl_set_error(k->net->loop, "connection lost: %s", ac->errstr);
    } else if (k->last_err == 0) {
        k->last_err = HILOCK_ECONN;
    }
    hl_conn_down(k);
}

int hl_conn_fd(const hl_conn *k) {
    if (k->ac != NULL) return k->ac->c.fd;
    return k->rc != NULL ? k->rc->fd : -1;
}

static void connect_timeout(hl_timer *t) {
    hl_conn *k = HL_CONTAINER(t, hl_conn, connect_to);
    hl_set_error(k->net->loop, "connect: no answer within %u ms", k->net->connect_timeout_ms);
    k->last_err = k->state == HL_CONN_HANDSHAKE ? HILOCK_EDEADLINE : HILOCK_ECONN;
    hl_conn_teardown(k);
}

static void conn_retry(hl_timer *t) {
    hl_conn_connect(HL_CONTAINER(t, hl_conn, retry));
}

/* A try-once that has not gone out yet asked for one attempt: a failed
 * connection attempt is its answer, not a reason to wait for the next. */
void hl_conn_fail_fast(hl_conn *k, int err) {
    hl_link *l = k->queue.next;
    while (l != &k->queue) {
        hl_req *r = HL_CONTAINER(l, hl_req, link);
        l = l->next;
        if (r->fail_fast && !r->ever_sent) hl_req_finish(r, NULL, err);
    }
}

/* Exponential backoff with jitter, so that many clients do not reconnect
 * in lockstep after a server restart. */
void hl_conn_retry_later(hl_conn *k) {
    hl_net *net = k->net;
    if (net->loop->freeing || net->loop->forked) return;
    int err = k->last_err ? k->last_err : HILOCK_ECONN;
    hl_conn_fail_fast(k, err);
    if (net->closing) {
        /* Closing does not wait for a server that is away. */
        hl_conn_fail_queue(k, err);
        if (k->is_sub || net->nreqs == 0) return;
    }
    uint64_t cap = net->reconnect_max_ms ? net->reconnect_max_ms : 1;
    uint64_t d = k->failures >= 16 ? cap : (uint64_t)25 << k->failures;
    if (d > cap) d = cap;
    d = d / 2 + hl_net_random(net) % (d / 2 + 1);
    k->failures++;
    hl_timer_start(net->loop, &k->retry, d);
}

/* A connection could not even be started (on loopback a refused connect
 * can show at once, in TLS's first write): say why, and try again later.
 * The owner hears `lost` as for an attempt that fails later (a cluster then
 * asks another node for the map, Sentinel asks where the master went), but
 * from the loop: hl_conn_connect's caller may be its own lost handler. */
void hl_conn_open_failed(hl_conn *k, int err, const char *why) {
    hl_set_error(k->net->loop, "%s", why);
    k->failed_attempts++;
    k->last_err = err;
    hl_conn_retry_later(k);
    if (k->ev.lost) hl_timer_start(k->net->loop, &k->failed_at_once, 0);
}

static void conn_failed_at_once(hl_timer *t) {
    hl_conn *k = HL_CONTAINER(t, hl_conn, failed_at_once);
    hl_loop *l = k->net->loop;
    if (k->ev.lost && !l->freeing && !l->forked) k->ev.lost(k->ev.arg);
}

static redisAsyncContext *conn_open(const hl_addr *a) {
    return a->path ? redisAsyncConnectUnix(a->path) : redisAsyncConnect(a->host, a->port);
}

void hl_conn_connect(hl_conn *k) {
    hl_net *net = k->net;
    hl_loop *l = net->loop;
    if (k->ac != NULL || k->rc != NULL || l->freeing) return;
    if (k->addr->host == NULL && k->addr->path == NULL) return; /* not known yet (Sentinel) */
    hl_timer_stop(l, &k->retry);
    if (k->is_sub) {
        hl_sub_connect(k);
        return;
    }
    redisAsyncContext *ac = conn_open(k->addr);
    if (ac == NULL || ac->err) {
        char why[160];
        snprintf(why, sizeof(why), "connect: %s", ac ? ac->errstr : "out of memory");
        if (ac) redisAsyncFree(ac);
        hl_conn_open_failed(k, HILOCK_ECONN, why);
        return;
    }
    ac->data = k;
    if (l->ev.attach(l->ev.data, ac) != 0) {
        redisAsyncFree(ac);
        hl_conn_open_failed(k, HILOCK_ELOOP, "event loop adapter refused the connection");
        return;
    }
    /* TLS before the TCP connect completes: hiredis's first write after it
     * runs the handshake (SSL_connect wants to write until then). */
    int rc = net->tls != NULL && k->addr->host != NULL ? hl_tls_begin(k, &ac->c) : 0;
    if (rc != 0) {
        char why[sizeof(l->errstr)];
        snprintf(why, sizeof(why), "%s", l->errstr);
        redisAsyncFree(ac);
        hl_conn_open_failed(k, rc == HL_TLS_LOST ? HILOCK_ECONN : HILOCK_ETLS, why);
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    k->ac = ac;
    k->state = HL_CONN_CONNECTING;
    hl_timer_start(l, &k->connect_to, net->connect_timeout_ms);
}

void hl_conn_teardown(hl_conn *k) {
    redisAsyncContext *ac = k->ac;
    if (k->rc != NULL) {
        hl_sub_close(k);
        hl_conn_down(k);
        return;
    }
    if (ac == NULL) return;
    int connected = k->state != HL_CONN_CONNECTING;
    redisAsyncFree(ac); /* runs the reply callbacks and, if connected, on_disconnect */
    if (!connected || k->ac != NULL) hl_conn_down(k); /* on_disconnect did not run */
}

void hl_conn_init(hl_conn *k, hl_net *net, const hl_addr *addr, int is_sub,
                  const hl_conn_events *ev) {
    memset(k, 0, sizeof(*k));
    k->net = net;
    k->addr = addr;
    k->is_sub = is_sub;
    k->state = HL_CONN_DOWN;
    if (ev) k->ev = *ev;
    k->retry.cb = conn_retry;
    k->connect_to.cb = connect_timeout;
    k->failed_at_once.cb = conn_failed_at_once;
    k->health.cb = health_tick;
    hl_list_init(&k->queue);
}

void hl_conn_cancel_queue(hl_conn *k) {
    hl_conn_fail_queue(k, HILOCK_ECANCELED);
    hl_timer_stop(k->net->loop, &k->retry);
    hl_timer_stop(k->net->loop, &k->connect_to);
    hl_timer_stop(k->net->loop, &k->failed_at_once);
    hl_timer_stop(k->net->loop, &k->health);
}
