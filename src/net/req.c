/* Script requests. They live in our own queue until their connection is
 * ready, and carry their own deadline timer, since hiredis 0.14.1 has no
 * command timeouts. A request whose connection drops before it is answered
 * is sent again on the next connection: every script is idempotent for its
 * arguments, so a lost reply never grants a lock twice nor leaves one
 * behind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "net/net.h"
#include "net/conn_private.h"

static void req_free(hl_req *r) {
    hl_net *net = r->net;
    if (hl_linked(&r->link)) hl_list_remove(&r->link);
    hl_timer_stop(net->loop, &r->deadline);
    hl_timer_stop(net->loop, &r->backoff);
    hl_list_remove(&r->all);
    if (r->held) freeReplyObject(r->held);
    free(r);
    if (--net->nreqs == 0 && net->idle && !net->loop->freeing) net->idle(net->idle_arg);
}

/* The command on line `line` of a script's body, as its redis.call names
 * it: "HGET", or the publish command for a call through an argument. */
static void script_call_at(const hl_req *r, long line, char *out, size_t n) {
    const char *p = r->script->body, *call;
    for (long i = 1; i < line && p != NULL; i++)
        if ((p = strchr(p, '\n')) != NULL) p++;
    const char *eol = p ? strchr(p, '\n') : NULL;
    snprintf(out, n, "a command");
    if (p == NULL || (call = strstr(p, "call(")) == NULL || (eol && call > eol)) return;
    call += 5;
    if (*call == '\'') snprintf(out, n, "%.*s", (int)strcspn(call + 1, "'"), call + 1);
    else if (r->publishes) snprintf(out, n, "%s", r->net->sharded ? "SPUBLISH" : "PUBLISH");
}

/* A script's ACL refusal. Redis 7.0 says which command an ACL refused,
 * but never which key or channel, and inside a script not even the
 * command ("The user executing the script can't run this command or
 * subcommand script: SHA, on @user_script:LINE."). So the text gets what
 * hilock knows: the script, the command on that line, and the keys and
 * channel the request named; enough for an operator to see which
 * permission is missing (docs/tls-and-acl.md: the least-privilege ACL). */
static void req_explain_acl(hl_req *r, const char *text) {
    char what[160], cmd[32], names[320];
    size_t used = 0, tlen = strlen(text);
    const char *at = strstr(text, " script: "), *line = strstr(text, "@user_script:");
    if (at != NULL && strspn(at + 9, "0123456789abcdef") == 40)
        tlen = (size_t)(at - text); /* the SHA adds nothing */
    if (line != NULL) {
        long n = strtol(line + 13, NULL, 10);
        script_call_at(r, n, cmd, sizeof(cmd));
        snprintf(what, sizeof(what), "%s at line %ld of script %s", cmd, n, r->script->name);
    } else {
        snprintf(what, sizeof(what), "script %s", r->script->name);
    }
    names[0] = '\0';
    for (int i = 0; i < r->nargs && used + 8 < sizeof(names); i++) {
        int key = i < r->nkeys;
        /* Channels are arguments named P{T}...:ch (keys would pin a
         * cluster slot that may migrate, see mutex_release.lua). */
        if (!key && (r->argl[i] < 3 || memcmp(r->argv[i] + r->argl[i] - 3, ":ch", 3) != 0))
            continue;
        int w = snprintf(names + used, sizeof(names) - used, "%s%s %.*s", used ? ", " : "",
                         key ? "key" : "channel", (int)r->argl[i], r->argv[i]);
        if (w < 0 || (size_t)w >= sizeof(names) - used) break;
        used += (size_t)w;
    }
    hl_set_error(r->net->loop, "%.*s (ACL: %s%s%s)", (int)tlen, text, what, used ? "; " : "",
                 names);
}

void hl_req_finish(hl_req *r, redisReply *reply, int err) {
    if (r->finished) return;
    r->finished = 1;
    hl_timer_stop(r->net->loop, &r->deadline);
    hl_timer_stop(r->net->loop, &r->backoff);
    if (hl_linked(&r->link)) hl_list_remove(&r->link);
    r->done(r, reply, err);
    /* After `done`, whose reading of the reply kept its bare text: user
     * callbacks run later, from the loop, and read this one. */
    if (r->script != NULL && reply != NULL && reply->type == REDIS_REPLY_ERROR &&
        hl_reply_is_acl(reply->str))
        req_explain_acl(r, reply->str); /* (plain commands' owners explain their own) */
    if (!r->sent) req_free(r);
}

void hl_req_end(hl_req *r, redisReply *reply, int err) { hl_req_finish(r, reply, err); }

static void req_deadline(hl_timer *t) {
    hl_req *r = HL_CONTAINER(t, hl_req, deadline);
    hl_conn *k = r->conn;
    int sent = r->sent;
    if (k->state == HL_CONN_READY)
        hl_set_error(r->net->loop, "no reply from Redis within %u ms", r->net->request_timeout_ms);
    hl_req_finish(r, NULL, hl_conn_error(k));
    /* A connection that leaves a sent request unanswered this long is stuck
     * (or the peer is not Redis): drop it and let the backoff reconnect.
     * What it still owed fails the same way, for the same cause. */
    if (sent && k->ac != NULL) {
        k->last_err = HILOCK_EDEADLINE;
        hl_conn_set_why(k, "no reply to a request within %u ms", r->net->request_timeout_ms);
        hl_conn_teardown(k);
    }
}

/* Back off from a server that is still loading, then go again. */
static void req_resend(hl_timer *t) {
    hl_req_again(HL_CONTAINER(t, hl_req, backoff));
}

hl_req *hl_req_new(hl_net *net, const hl_script *s, int nkeys, size_t bytes,
                   hl_req_done done, void *owner) {
    return hl_req_new_n(net, s, nkeys, HL_REQ_MAXARGS, bytes, done, owner);
}

hl_req *hl_req_new_n(hl_net *net, const hl_script *s, int nkeys, int maxargs, size_t bytes,
                     hl_req_done done, void *owner) {
    size_t at = (bytes + sizeof(void *) - 1) / sizeof(void *) * sizeof(void *);
    hl_req *r = calloc(1, sizeof(*r) + at + (size_t)maxargs * (sizeof(*r->argv) + sizeof(*r->argl)));
    if (r == NULL) return NULL;
    r->argv = (const char **)(void *)(r->buf + at);
    r->argl = (size_t *)(void *)(r->argv + maxargs);
    r->maxargs = maxargs;
    r->net = net;
    r->script = s;
    r->nkeys = nkeys;
    r->cap = bytes;
    r->done = done;
    r->owner = owner;
    r->slot = -1;
    r->deadline.cb = req_deadline;
    r->backoff.cb = req_resend;
    hl_list_init(&r->link);
    hl_list_push(&net->reqs, &r->all);
    net->nreqs++;
    return r;
}

void hl_req_arg(hl_req *r, const char *a, size_t alen, const char *b, size_t blen) {
    char *p = r->buf + r->used;
    if (r->nargs == r->maxargs || r->used + alen + blen > r->cap) abort(); /* a caller's bug */
    memcpy(p, a, alen);
    memcpy(p + alen, b, blen);
    r->argv[r->nargs] = p;
    r->argl[r->nargs++] = alen + blen;
    r->used += alen + blen;
}

size_t hl_u64_text(char *out, uint64_t v) {
    char tmp[20];
    size_t n = sizeof(tmp);
    do tmp[--n] = (char)('0' + v % 10); while ((v /= 10) != 0);
    memcpy(out, tmp + n, sizeof(tmp) - n);
    return sizeof(tmp) - n;
}

void hl_req_arg_u64(hl_req *r, uint64_t v) {
    char num[20];
    hl_req_arg(r, num, hl_u64_text(num, v), "", 0);
}

void hl_req_ignore(hl_req *r, redisReply *reply, int err) {
    (void)r; (void)reply; (void)err;
}

hl_req *hl_req_copy(const hl_req *r, hl_req_done done, void *owner) {
    hl_req *c = hl_req_new_n(r->net, r->script, r->nkeys, r->maxargs, r->cap, done, owner);
    if (c == NULL) return NULL;
    c->slot = r->slot;
    c->publishes = r->publishes;
    c->everywhere = r->everywhere;
    for (int i = 0; i < r->nargs; i++) hl_req_arg(c, r->argv[i], r->argl[i], "", 0);
    return c;
}

void hl_req_submit(hl_conn *k, hl_req *r) {
    hl_req_submit_within(k, r, k->net->request_timeout_ms);
}

void hl_req_submit_within(hl_conn *k, hl_req *r, uint64_t ms) {
    r->conn = k;
    r->submitted_at = hl_now_ms();
    hl_timer_start(k->net->loop, &r->deadline, ms);
    hl_req_again(r);
}

/* An ACL refusal: NOPERM for a command, key or channel of the command
 * itself; from inside a script, Redis 7.0's "ERR The user executing the
 * script can't ..." (7.2's "ERR ACL failure in script: ..."). */
int hl_reply_is_acl(const char *s) {
    return strncmp(s, "NOPERM", 6) == 0 ||
           strncmp(s, "ERR The user executing the script can't", 39) == 0 ||
           strncmp(s, "ERR ACL failure in script", 25) == 0;
}

/* Redis error replies start with a code word; map the ones a caller can act
 * on, keep the text for hilock_client_errstr(). */
int hl_reply_error(hl_loop *l, const redisReply *reply) {
    static const struct { const char *prefix; int err; } codes[] = {
        {"NOAUTH", HILOCK_EAUTH}, {"WRONGPASS", HILOCK_EAUTH}, {"NOPERM", HILOCK_EAUTH},
        {"ERR The user executing the script can't", HILOCK_EAUTH}, /* an ACL, in a script */
        {"ERR ACL failure in script", HILOCK_EAUTH},
        {"READONLY", HILOCK_EREADONLY}, {"OOM", HILOCK_EOOM}, {"LOADING", HILOCK_ELOADING},
        {"ERR Error running script", HILOCK_ESCRIPT}, {"ERR user_script", HILOCK_ESCRIPT},
        {"WRONGTYPE", HILOCK_ESCRIPT}, /* the key exists but is not one of ours */
    };
    hl_set_error(l, "%.*s", (int)reply->len, reply->str);
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (strncmp(reply->str, codes[i].prefix, strlen(codes[i].prefix)) == 0)
            return codes[i].err;
    return HILOCK_EREPLY;
}

/* LOADING (a server reading its data), TRYAGAIN (a slot migrating with
 * some of our keys on each side), CLUSTERDOWN (a failover under way) and
 * NOREPLICAS (min-replicas-to-write: a master cut off from its replicas,
 * e.g. one that Sentinel is replacing) pass: try again shortly, within the
 * request's deadline, by which time the client may have moved. */
static int req_retry_later(hl_req *r, const redisReply *reply) {
    static const struct { const char *word; uint64_t ms; } passing[] = {
        {"LOADING", 50}, {"TRYAGAIN", 25}, {"CLUSTERDOWN", 100}, {"NOREPLICAS", 100},
    };
    for (size_t i = 0; i < sizeof(passing) / sizeof(passing[0]); i++) {
        size_t n = strlen(passing[i].word);
        if (strncmp(reply->str, passing[i].word, n) != 0) continue;
        if (hl_now_ms() + passing[i].ms >= r->deadline.when) return 0;
        if (r->tryagain_ends && strcmp(passing[i].word, "TRYAGAIN") == 0) return 0;
        hl_set_error(r->net->loop, "%s", reply->str);
        hl_timer_start(r->net->loop, &r->backoff, passing[i].ms);
        return 1;
    }
    return 0;
}

int hl_err_passes(int err, const char *why) {
    static const char *const words[] = {"CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS", "MASTERDOWN"};
    switch (err) {
    case HILOCK_ECONN: case HILOCK_EDEADLINE: case HILOCK_EREADONLY: case HILOCK_ELOADING:
        return 1;
    case HILOCK_EREPLY:
        for (size_t i = 0; why && i < sizeof(words) / sizeof(words[0]); i++)
            if (strncmp(why, words[i], strlen(words[i])) == 0) return 1;
        return 0;
    default:
        return 0;
    }
}

int hl_parse_redirect(const char *s, int *ask, unsigned *slot, char *host, size_t hostlen, int *port) {
    char fmt[32];
    *ask = strncmp(s, "ASK ", 4) == 0;
    if (!*ask && strncmp(s, "MOVED ", 6) != 0) return 0;
    snprintf(fmt, sizeof(fmt), "%%u %%%zu[^ ]", hostlen - 1);
    if (sscanf(s + (*ask ? 4 : 6), fmt, slot, host) != 2) return 0;
    char *colon = strrchr(host, ':');
    if (colon == NULL || *slot > 16383) return 0;
    *colon = '\0';
    *port = atoi(colon + 1);
    return 1;
}

/* "MOVED <slot> <host>:<port>" or "ASK ...": the topology decides. */
static int req_redirected(hl_req *r, const redisReply *reply) {
    unsigned slot;
    int ask, port;
    char host[256];
    if (r->net->redirect == NULL) return 0;
    if (!hl_parse_redirect(reply->str, &ask, &slot, host, sizeof(host), &port)) return 0;
    hl_set_error(r->net->loop, "%s", reply->str);
    if (ask) r->net->asked++;
    else r->net->moved++;
    r->net->redirect(r->net->redirect_arg, r, ask, slot, host, port);
    return 1;
}

void hl_req_move(hl_req *r, hl_conn *k) {
    if (hl_linked(&r->link)) hl_list_remove(&r->link);
    r->conn = k;
    hl_req_again(r);
}

void hl_req_redirect(hl_req *r, hl_conn *k, int asking) {
    if (r->redirects == 16) { /* a loop between nodes that disagree */
        hl_set_error(r->net->loop, "more than 16 cluster redirects");
        hl_req_finish(r, NULL, HILOCK_EREPLY);
        return;
    }
    r->redirects++;
    r->asking = asking;
    r->conn = k;
    hl_req_again(r);
}

/* A reply later than a third of the request timeout: the server is slow
 * (a long script, a fork, DEBUG SLEEP) or our loop stalled. Worth a
 * warning well before requests start failing with HILOCK_EDEADLINE. */
static void req_check_slow(const hl_req *r, const hl_conn *k) {
    hl_net *net = r->net;
    uint64_t now = hl_now_coarse_ms(), took = now - r->sent_at;
    char at[96];
    if (took * 3 <= net->request_timeout_ms) return;
    net->slow_replies++;
    if (hl_log_due(&net->slow_warned_at, now))
        hl_log(net->loop, HILOCK_LOG_WARNING,
               "%s answered after %llu ms (request_timeout_ms %u): the server is slow, or "
               "the event loop stalled", hl_addr_text(k->addr, at, sizeof(at)),
               (unsigned long long)took, (unsigned)net->request_timeout_ms);
}

/* A reply, or NULL when the connection went away with the request in it. */
void hl_req_on_reply(redisAsyncContext *ac, void *reply_, void *privdata) {
    hl_req *r = privdata;
    hl_conn *k = ac->data;
    redisReply *reply = reply_;
    r->sent = 0;
    if (reply != NULL && k != NULL) {
        hl_conn_heard(k);
        if (reply->type != REDIS_REPLY_ERROR && !k->bare && !r->net->quorum)
            r->net->answered = 1; /* a data node's (not a sentinel's, not one of a quorum) */
    }
    if (r->finished) { req_free(r); return; }
    if (r->net->loop->freeing) { hl_req_finish(r, NULL, HILOCK_ECANCELED); return; }
    if (reply == NULL && r->at_most_once) { /* it may have run: never twice */
        r->lost_reply = 1;
        hl_req_finish(r, NULL, hl_conn_error(k));
        return;
    }
    if (reply == NULL) { /* send again once it is back */
        r->lost_reply = 1;
        hl_list_push(&k->queue, &r->link);
        return;
    }
    req_check_slow(r, k);
    if (r->asking_refused) { /* its text is the last error already */
        hl_req_finish(r, NULL, HILOCK_EAUTH);
        return;
    }
    if (reply->type == REDIS_REPLY_ERROR && req_retry_later(r, reply)) return;
    if (reply->type == REDIS_REPLY_ERROR && req_redirected(r, reply)) return;
    if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0 && !r->use_eval) {
        r->use_eval = 1; /* e.g. after a server restart or SCRIPT FLUSH */
        /* It did not run, and runs now behind whatever was sent since (an
         * extend, by another script, overtakes a batch of renewals): a
         * key's TTL set by it starts no earlier than now, and requests
         * still run in the order of their submitted_at. */
        r->submitted_at = hl_now_ms();
        hl_conn_send(k, r);
        return;
    }
    hl_req_finish(r, reply, 0);
}

redisReply *hl_reply_dup(const redisReply *in) {
    redisReply *r = malloc(sizeof(*r));
    if (r == NULL) return NULL;
    memcpy(r, in, sizeof(*r));
    r->str = NULL;
    r->element = NULL;
    r->elements = 0;
    if (in->str != NULL && (r->str = malloc(in->len + 1)) == NULL) goto oom;
    if (in->str != NULL) memcpy(r->str, in->str, in->len + 1);
    if (in->elements > 0) {
        if ((r->element = calloc(in->elements, sizeof(*r->element))) == NULL) goto oom;
        for (; r->elements < in->elements; r->elements++)
            if ((r->element[r->elements] = hl_reply_dup(in->element[r->elements])) == NULL) goto oom;
    }
    return r;
oom:
    freeReplyObject(r);
    return NULL;
}

/* The request's own reply, when a WAIT follows it: kept for hl_req_on_wait
 * (the request stays sent until then). */
void hl_req_on_stash(redisAsyncContext *ac, void *reply, void *privdata) {
    hl_req *r = privdata;
    if (reply != NULL && ac->data != NULL) hl_conn_heard(ac->data);
    if (reply != NULL && !r->finished) r->held = hl_reply_dup(reply);
}

/* WAIT's reply: how many replicas have the write; then the request's own
 * reply takes the usual path. Without both replies (a drop, no memory),
 * the request is sent again: it is idempotent. */
void hl_req_on_wait(redisAsyncContext *ac, void *reply_, void *privdata) {
    hl_req *r = privdata;
    redisReply *reply = reply_, *own = r->held;
    r->held = NULL;
    r->acked = reply != NULL && reply->type == REDIS_REPLY_INTEGER ? (int)reply->integer : 0;
    if (reply != NULL && reply->type == REDIS_REPLY_ERROR && hl_reply_is_acl(reply->str) &&
        !r->finished) {
        /* WAIT itself refused (an ACL without +wait): not a count of
         * replicas, and no use trying again. What the request did is
         * undone by its owner, as for any error after a send. (Other
         * errors count no replica, as before.) */
        int err = hl_reply_error(r->net->loop, reply);
        hl_set_error(r->net->loop, "%s (ACL: WAIT, sent after each acquire and renewal "
                     "as wait_replicas is set)", reply->str);
        r->sent = 0;
        if (own) freeReplyObject(own);
        hl_req_finish(r, NULL, err);
        return;
    }
    if (reply != NULL && own == NULL && !r->finished) {
        r->sent = 0;
        hl_req_finish(r, NULL, HILOCK_ENOMEM);
        return;
    }
    hl_req_on_reply(ac, reply != NULL ? own : NULL, r);
    if (own) freeReplyObject(own);
}

/* Send (again) on the request's connection, or queue it there. */
void hl_req_again(hl_req *r) {
    hl_conn *k = r->conn;
    if (k->state == HL_CONN_READY) hl_conn_send(k, r);
    else hl_list_push(&k->queue, &r->link);
}

void hl_net_cancel_all(hl_net *net) {
    while (!hl_list_empty(&net->reqs)) {
        hl_req *r = HL_CONTAINER(net->reqs.next, hl_req, all);
        r->sent = 0;
        if (r->finished) req_free(r);
        else hl_req_finish(r, NULL, HILOCK_ECANCELED);
    }
}

uint64_t hl_net_random(hl_net *net) {
    net->rng ^= net->rng << 13;
    net->rng ^= net->rng >> 7;
    net->rng ^= net->rng << 17;
    return net->rng;
}

void hl_net_init(hl_net *net, hl_loop *loop) {
    memset(net, 0, sizeof(*net));
    net->loop = loop;
    hl_list_init(&net->reqs);
}
