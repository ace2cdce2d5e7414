/* One Redis node: a command connection and a subscriber connection.
 *
 * Requests (script calls) live in our own queue until a connection is ready,
 * and carry their own deadline timer, since hiredis 0.14.1 has no command
 * timeouts. A request whose connection drops before it is answered is sent
 * again on the next connection: every script is idempotent for a given
 * token, so a lost reply never grants a lock twice nor leaves one behind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

static void conn_schedule_retry(hl_conn *k);
static void conn_fail_queue(hl_conn *k, int err);
void hl_req_again(hl_req *r);
static void conn_send(hl_conn *k, hl_req *r);

static hl_conn *conn_of(const redisAsyncContext *ac) { return (hl_conn *)ac->data; }

/* ---- Requests ----------------------------------------------------------- */

static void req_free(hl_req *r) {
    hilock_client *c = r->c;
    if (hl_linked(&r->link)) hl_list_remove(&r->link);
    hl_timer_stop(c, &r->deadline);
    hl_timer_stop(c, &r->backoff);
    hl_list_remove(&r->all);
    if (r->name) hl_name_unref(r->name);
    free(r);
    c->nreqs--;
    if (c->closing && !c->freeing) hl_close_progress(c);
}

static void req_finish(hl_req *r, redisReply *reply, int err) {
    if (r->finished) return;
    r->finished = 1;
    hl_timer_stop(r->c, &r->deadline);
    hl_timer_stop(r->c, &r->backoff);
    if (hl_linked(&r->link)) hl_list_remove(&r->link);
    r->done(r, reply, err);
    if (!r->sent) req_free(r);
}

static void req_deadline(hl_timer *t) {
    hl_req *r = HL_CONTAINER(t, hl_req, deadline);
    hl_conn *k = &r->c->cmd;
    int sent = r->sent;
    if (k->state == HL_CONN_READY)
        hl_set_error(r->c, "no reply from Redis within %u ms", r->c->cfg.request_timeout_ms);
    req_finish(r, NULL, hl_conn_error(r->c));
    /* A connection that leaves a sent request unanswered this long is stuck
     * (or the peer is not Redis): drop it and let the backoff reconnect.
     * What it still owed fails the same way, for the same cause. */
    if (sent && k->ac != NULL) {
        k->last_err = HILOCK_EDEADLINE;
        hl_conn_teardown(k);
    }
}

/* Connected (the handshake counts) but unanswered is a server that does not
 * answer in time; anything short of connected is the connection's fault. */
int hl_conn_error(hilock_client *c) {
    hl_conn *k = &c->cmd;
    if (k->state == HL_CONN_READY || k->state == HL_CONN_HANDSHAKE) return HILOCK_EDEADLINE;
    return k->last_err ? k->last_err : HILOCK_ECONN;
}

/* Back off from a server that is still loading, then go again. */
static void req_resend(hl_timer *t) {
    hl_req_again(HL_CONTAINER(t, hl_req, backoff));
}

hl_req *hl_req_new(hilock_client *c, const hl_script *s, hl_name *n,
                   const char *token, uint32_t lease_ms, hl_req_done done, void *owner) {
    hl_req *r = calloc(1, sizeof(*r));
    if (r == NULL) return NULL;
    r->c = c;
    r->script = s;
    r->done = done;
    r->owner = owner;
    r->name = n;
    n->refs++;
    memcpy(r->token, token, HL_TOKEN_LEN + 1);
    r->lease_ms = lease_ms;
    r->deadline.cb = req_deadline;
    r->backoff.cb = req_resend;
    hl_list_init(&r->link);
    hl_list_push(&c->reqs, &r->all);
    c->nreqs++;
    return r;
}

void hl_req_submit(hilock_client *c, hl_req *r) {
    hl_req_submit_within(c, r, c->cfg.request_timeout_ms);
}

void hl_req_submit_within(hilock_client *c, hl_req *r, uint64_t ms) {
    r->submitted_at = hl_now_ms();
    hl_timer_start(c, &r->deadline, ms);
    hl_req_again(r);
}

/* Redis error replies start with a code word; map the ones a caller can act
 * on, keep the text for hilock_client_errstr(). */
int hl_reply_error(hilock_client *c, const redisReply *reply) {
    static const struct { const char *prefix; int err; } codes[] = {
        {"NOAUTH", HILOCK_EAUTH}, {"WRONGPASS", HILOCK_EAUTH}, {"NOPERM", HILOCK_EAUTH},
        {"READONLY", HILOCK_EREADONLY}, {"OOM", HILOCK_EOOM}, {"LOADING", HILOCK_ELOADING},
        {"ERR Error running script", HILOCK_ESCRIPT}, {"ERR user_script", HILOCK_ESCRIPT},
        {"WRONGTYPE", HILOCK_ESCRIPT}, /* the key exists but is not a hilock lock */
    };
    hl_set_error(c, "%.*s", (int)reply->len, reply->str);
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (strncmp(reply->str, codes[i].prefix, strlen(codes[i].prefix)) == 0)
            return codes[i].err;
    return HILOCK_EREPLY;
}

static void on_reply(redisAsyncContext *ac, void *reply_, void *privdata) {
    hl_req *r = privdata;
    hl_conn *k = conn_of(ac);
    redisReply *reply = reply_;
    r->sent = 0;
    k->inflight--;
    if (r->finished) { req_free(r); return; }
    if (r->c->freeing) { req_finish(r, NULL, HILOCK_ECANCELED); return; }
    if (reply == NULL) {
        /* The connection dropped: send again once it is back. */
        r->lost_reply = 1;
        hl_list_push(&k->queue, &r->link);
        return;
    }
    if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "LOADING", 7) == 0 &&
        hl_now_ms() + 50 < r->deadline.when) {
        hl_set_error(r->c, "%s", reply->str);
        hl_timer_start(r->c, &r->backoff, 50);
        return;
    }
    if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0 && !r->use_eval) {
        r->use_eval = 1; /* e.g. after a server restart or SCRIPT FLUSH */
        conn_send(k, r);
        return;
    }
    req_finish(r, reply, 0);
}

/* Send a request again on the command connection (or queue it). */
void hl_req_again(hl_req *r) {
    hl_conn *k = &r->c->cmd;
    if (k->state == HL_CONN_READY) conn_send(k, r);
    else hl_list_push(&k->queue, &r->link);
}

static void conn_send(hl_conn *k, hl_req *r) {
    const hl_script *s = r->script;
    char lease[16], fence_ttl[16];
    const char *argv[8];
    size_t lens[8];
    int argc = 0;
    hl_name *n = r->name;

    argv[argc] = r->use_eval ? "EVAL" : "EVALSHA"; lens[argc] = strlen(argv[argc]); argc++;
    argv[argc] = r->use_eval ? s->body : s->sha; lens[argc] = strlen(argv[argc]); argc++;
    int two_keys = s != &hl_script_renew;
    argv[argc] = two_keys ? "2" : "1"; lens[argc] = 1; argc++;
    argv[argc] = hl_name_key(n); lens[argc] = n->keylen; argc++;
    if (s == &hl_script_acquire) {
        argv[argc] = hl_name_fence(n); lens[argc] = n->keylen + 6; argc++;
    } else if (two_keys) { /* release, break */
        argv[argc] = hl_name_channel(n); lens[argc] = n->keylen + 3; argc++;
    }
    argv[argc] = r->token; lens[argc] = HL_TOKEN_LEN; argc++;
    if (s == &hl_script_acquire || s == &hl_script_renew) {
        lens[argc] = (size_t)snprintf(lease, sizeof(lease), "%u", (unsigned)r->lease_ms);
        argv[argc] = lease; argc++;
    }
    if (s == &hl_script_acquire) {
        lens[argc] = (size_t)snprintf(fence_ttl, sizeof(fence_ttl), "%u",
                                      (unsigned)r->c->cfg.fence_ttl_s);
        argv[argc] = fence_ttl; argc++;
    }
    if (redisAsyncCommandArgv(k->ac, on_reply, r, argc, argv, lens) != REDIS_OK) {
        hl_list_push(&k->queue, &r->link); /* disconnecting: next connection */
        return;
    }
    r->sent = 1;
    r->ever_sent = 1;
    k->inflight++;
}

/* ---- Connection life cycle -------------------------------------------- */

static void conn_ready(hl_conn *k) {
    k->state = HL_CONN_READY;
    k->failures = 0;
    k->last_err = 0;
    hl_timer_stop(k->c, &k->connect_to);
    if (k->is_sub) {
        hl_engine_sub_ready(k->c);
        return;
    }
    while (!hl_list_empty(&k->queue) && k->state == HL_CONN_READY) {
        hl_req *r = HL_CONTAINER(k->queue.next, hl_req, link);
        hl_list_remove(&r->link);
        conn_send(k, r);
    }
}

/* A wrong password or db will not fix itself: fail what waits at once. */
static void conn_fail_queue(hl_conn *k, int err) {
    while (!hl_list_empty(&k->queue)) {
        hl_req *r = HL_CONTAINER(k->queue.next, hl_req, link);
        req_finish(r, NULL, err);
    }
}

static void on_handshake(redisAsyncContext *ac, void *reply_, void *privdata) {
    redisReply *reply = reply_;
    hl_conn *k = conn_of(ac);
    if (reply == NULL || k->c->freeing) return;
    if (reply->type == REDIS_REPLY_ERROR) {
        int err = hl_reply_error(k->c, reply);
        if (privdata == &k->handshake_left) err = HILOCK_EAUTH; /* any AUTH refusal */
        k->last_err = err;
        if (!k->is_sub) conn_fail_queue(k, err);
        redisAsyncDisconnect(ac);
        return;
    }
    if (--k->handshake_left == 0) conn_ready(k);
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

/* Eviction breaks a lock: an evicted lock key lets a second client take it,
 * an evicted fence key makes fences lean on the clock alone. Any policy but
 * noeviction may evict our keys (they all have a TTL, so volatile-* too).
 * CONFIG may be renamed or forbidden, so the policy is read from INFO. */
static void on_info(redisAsyncContext *ac, void *reply_, void *privdata) {
    redisReply *reply = reply_;
    hl_conn *k = conn_of(ac);
    hilock_client *c = k->c;
    char policy[64];
    (void)privdata;
    if (reply == NULL || c->freeing || (ac->c.flags & REDIS_DISCONNECTING)) return;
    info_policy(reply, policy, sizeof(policy));
    if (strcmp(policy, "noeviction") != 0) {
        hl_warn_eviction(c, policy, reply->type == REDIS_REPLY_ERROR ? reply->str : "no such field");
        if (c->cfg.require_noeviction) {
            hl_set_error(c, "maxmemory-policy is %s, and require_noeviction is set",
                         *policy ? policy : "unknown");
            k->last_err = HILOCK_EEVICTION;
            conn_fail_queue(k, HILOCK_EEVICTION);
            redisAsyncDisconnect(ac);
            return;
        }
    }
    if (--k->handshake_left == 0) conn_ready(k);
}

static void on_connect(const redisAsyncContext *ac, int status) {
    hl_conn *k = conn_of(ac);
    hilock_client *c = k->c;
    if (status != REDIS_OK) {
        /* hiredis frees the context after this returns. */
        hl_set_error(c, "connect: %s", ac->errstr);
        k->ac = NULL;
        k->state = HL_CONN_DOWN;
        k->last_err = HILOCK_ECONN;
        hl_timer_stop(c, &k->connect_to);
        if (!c->freeing) conn_schedule_retry(k);
        return;
    }
    k->state = HL_CONN_HANDSHAKE;
    k->handshake_left = 0;
    redisAsyncContext *wac = k->ac;
    if (c->url.pass) {
        if (c->url.user)
            redisAsyncCommand(wac, on_handshake, &k->handshake_left, "AUTH %s %s",
                              c->url.user, c->url.pass);
        else
            redisAsyncCommand(wac, on_handshake, &k->handshake_left, "AUTH %s", c->url.pass);
        k->handshake_left++;
    }
    if (c->url.db != 0 && !k->is_sub) { /* pub/sub ignores the db */
        redisAsyncCommand(wac, on_handshake, NULL, "SELECT %d", c->url.db);
        k->handshake_left++;
    }
    if (!k->is_sub) {
        redisAsyncCommand(wac, on_info, NULL, "INFO memory");
        k->handshake_left++;
    }
    if (k->handshake_left == 0) conn_ready(k);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    hl_conn *k = conn_of(ac);
    hilock_client *c = k->c;
    if (status != REDIS_OK) {
        if (ac->err == REDIS_ERR_PROTOCOL) k->last_err = HILOCK_EPROTO;
        else if (k->last_err == 0) k->last_err = HILOCK_ECONN;
        hl_set_error(c, "connection lost: %s", ac->errstr);
    } else if (k->last_err == 0) {
        k->last_err = HILOCK_ECONN;
    }
    k->ac = NULL;
    k->state = HL_CONN_DOWN;
    k->inflight = 0;
    hl_timer_stop(c, &k->connect_to);
    if (c->freeing) return;
    if (k->is_sub) hl_engine_sub_lost(c);
    conn_schedule_retry(k);
}

static void on_sub(redisAsyncContext *ac, void *reply_, void *privdata) {
    redisReply *reply = reply_;
    hilock_client *c = conn_of(ac)->c;
    (void)privdata;
    /* One callback serves every channel: hiredis 0.14.1 may hand us a reply
     * meant for another channel's callback, so route by the reply itself. */
    if (reply == NULL || c->freeing) return;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 3) return;
    redisReply *kind = reply->element[0], *ch = reply->element[1];
    if (kind->type != REDIS_REPLY_STRING || ch->type != REDIS_REPLY_STRING) return;
    hl_name *n = hl_name_by_channel(c, ch->str, ch->len);
    if (n == NULL) return;
    if (strcmp(kind->str, "message") == 0) hl_engine_kick(n);
    else if (strcmp(kind->str, "subscribe") == 0) hl_engine_sub_ack(n, 1);
    else if (strcmp(kind->str, "unsubscribe") == 0) hl_engine_sub_ack(n, 0);
}

void hl_sub_send(hilock_client *c, hl_name *n, int subscribe) {
    hl_conn *k = &c->sub;
    if (k->state != HL_CONN_READY) return; /* resubscribed when ready */
    redisAsyncCommand(k->ac, on_sub, NULL, subscribe ? "SUBSCRIBE %b" : "UNSUBSCRIBE %b",
                      hl_name_channel(n), n->keylen + 3);
}

static void connect_timeout(hl_timer *t) {
    hl_conn *k = HL_CONTAINER(t, hl_conn, connect_to);
    hl_set_error(k->c, "connect: no answer within %u ms", k->c->cfg.connect_timeout_ms);
    k->last_err = k->state == HL_CONN_HANDSHAKE ? HILOCK_EDEADLINE : HILOCK_ECONN;
    hl_conn_teardown(k);
}

static void conn_retry(hl_timer *t) {
    hl_conn_connect(HL_CONTAINER(t, hl_conn, retry));
}

/* A try-once that has not gone out yet asked for one attempt: a failed
 * connection attempt is its answer, not a reason to wait for the next. */
static void conn_fail_fast(hl_conn *k, int err) {
    hl_link *l = k->queue.next;
    while (l != &k->queue) {
        hl_req *r = HL_CONTAINER(l, hl_req, link);
        l = l->next;
        if (r->fail_fast && !r->ever_sent) req_finish(r, NULL, err);
    }
}

/* Exponential backoff with jitter, so that many clients do not reconnect
 * in lockstep after a server restart. */
static void conn_schedule_retry(hl_conn *k) {
    hilock_client *c = k->c;
    if (c->freeing || c->forked) return;
    conn_fail_fast(k, k->last_err ? k->last_err : HILOCK_ECONN);
    if (c->closing) {
        /* Closing does not wait for a server that is away. */
        conn_fail_queue(&c->cmd, k->last_err ? k->last_err : HILOCK_ECONN);
        if (k->is_sub || c->nreqs == 0) return;
    }
    uint64_t cap = c->cfg.reconnect_max_ms ? c->cfg.reconnect_max_ms : 1;
    uint64_t d = k->failures >= 16 ? cap : (uint64_t)25 << k->failures;
    if (d > cap) d = cap;
    c->rng ^= c->rng << 13; c->rng ^= c->rng >> 7; c->rng ^= c->rng << 17; /* xorshift */
    d = d / 2 + c->rng % (d / 2 + 1);
    k->failures++;
    hl_timer_start(c, &k->retry, d);
}

void hl_conn_connect(hl_conn *k) {
    hilock_client *c = k->c;
    redisAsyncContext *ac;
    if (k->ac != NULL || c->freeing) return;
    ac = c->url.path ? redisAsyncConnectUnix(c->url.path)
                     : redisAsyncConnect(c->url.host, c->url.port);
    if (ac == NULL || ac->err) {
        hl_set_error(c, "connect: %s", ac ? ac->errstr : "out of memory");
        k->last_err = HILOCK_ECONN;
        if (ac) redisAsyncFree(ac);
        conn_schedule_retry(k);
        return;
    }
    ac->data = k;
    if (c->loop.attach(c->loop.data, ac) != 0) {
        hl_set_error(c, "event loop adapter refused the connection");
        k->last_err = HILOCK_ELOOP;
        redisAsyncFree(ac);
        conn_schedule_retry(k);
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    k->ac = ac;
    k->state = HL_CONN_CONNECTING;
    hl_timer_start(c, &k->connect_to, c->cfg.connect_timeout_ms);
}

/* Drop the connection now (never from inside a hiredis callback). Requests
 * in flight go back to the queue (or end, when the client is freeing). */
void hl_conn_teardown(hl_conn *k) {
    redisAsyncContext *ac = k->ac;
    if (ac == NULL) return;
    int connected = k->state != HL_CONN_CONNECTING;
    redisAsyncFree(ac); /* runs on_reply(NULL) and, if connected, on_disconnect */
    if (!connected || k->ac != NULL) {
        /* on_disconnect did not run: do its part. */
        k->ac = NULL;
        k->state = HL_CONN_DOWN;
        k->inflight = 0;
        hl_timer_stop(k->c, &k->connect_to);
        if (!k->c->freeing) {
            if (k->is_sub) hl_engine_sub_lost(k->c);
            conn_schedule_retry(k);
        }
    }
}

int hl_conn_init(hilock_client *c, hl_conn *k, int is_sub) {
    memset(k, 0, sizeof(*k));
    k->c = c;
    k->is_sub = is_sub;
    k->state = HL_CONN_DOWN;
    k->retry.cb = conn_retry;
    k->connect_to.cb = connect_timeout;
    hl_list_init(&k->queue);
    return 0;
}

/* Used by client teardown: end every queued request. */
void hl_conn_cancel_queue(hl_conn *k) {
    conn_fail_queue(k, HILOCK_ECANCELED);
    hl_timer_stop(k->c, &k->retry);
    hl_timer_stop(k->c, &k->connect_to);
}

/* Client teardown, after both connections are gone: end whatever is left
 * (requests backing off from a loading server). */
void hl_reqs_cancel_all(hilock_client *c) {
    while (!hl_list_empty(&c->reqs)) {
        hl_req *r = HL_CONTAINER(c->reqs.next, hl_req, all);
        r->sent = 0;
        if (r->finished) req_free(r);
        else req_finish(r, NULL, HILOCK_ECANCELED);
    }
}
