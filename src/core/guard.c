/* Guarded writes: a caller's Lua script run in Redis only while a hold's
 * token still holds its lock (hilock_hold_eval). The check and the
 * caller's script are one script, so Redis runs them as one step: no
 * other client's command comes between them. A holder that was paused or
 * cut off while its lease ran out is answered HILOCK_ELOST, and its write
 * is not applied, with no fenced resource needed for data kept in Redis.
 *
 * The script sent is the guard, on one line, followed on that same line
 * by the caller's text, so that the caller's line numbers in Redis's
 * errors are its own. The guard takes its own key and arguments off the
 * front of KEYS and ARGV (KEYS[1], the key its primitive names,
 * hl_prim.guard; ARGV[1] the token, ARGV[2] how to read that key): the
 * caller's script sees only its own. No function or table is made per
 * call: the guard costs Redis one read of the lock and a comparison.
 *
 * The caller's keys must share the lock's slot, on every server (a program
 * that works on one server then works on a cluster): hilock_hold_key()
 * makes such keys. */
#include <stdlib.h>
#include <string.h>
#include "core/core.h"

#define GUARD                                                                              \
    "local hl_k, hl_t, hl_m, hl_ok = table.remove(KEYS, 1), table.remove(ARGV, 1), "       \
    "table.remove(ARGV, 1) "                                                               \
    "if hl_m == 'h' then hl_ok = redis.call('HGET', hl_k, 'token') == hl_t "               \
    "elseif hl_m == 'z' then "                                                             \
    "local s, n = tonumber(redis.call('ZSCORE', hl_k, hl_t)), redis.call('TIME') "         \
    "hl_ok = s ~= nil and s > tonumber(n[1]) * 1000 + math.floor(tonumber(n[2]) / 1000) "  \
    "else local v = redis.pcall('GET', hl_k) "                                             \
    "hl_ok = type(v) == 'string' and (v == hl_t or string.sub(v, 1, #hl_t + 1) == hl_t .. ' ') " \
    "end if not hl_ok then return redis.error_reply(\"" LOST_TEXT "\") end "
#define LOST_TEXT "HILOCK_LOST the lock is no longer this hold's: the script did not run"

struct hilock_script {
    hl_script s;
    unsigned refs;   /* the caller's, and one per request in flight */
    char sha[41];
    char body[];     /* GUARD, then the caller's text */
};

int hilock_script_new(hilock_script **out, const char *body) {
    if (out == NULL) return HILOCK_EINVAL;
    *out = NULL;
    if (body == NULL || body[strspn(body, " \t\r\n")] == '\0') return HILOCK_EINVAL;
    /* A shebang's flags (#!lua flags=no-writes) must be the script's first
     * line, which is the guard's: a guarded write writes. */
    if (strncmp(body, "#!", 2) == 0) return HILOCK_EINVAL;
    size_t len = strlen(body), total = sizeof(GUARD) - 1 + len;
    hilock_script *s = malloc(sizeof(*s) + total + 1);
    if (s == NULL) return HILOCK_ENOMEM;
    memcpy(s->body, GUARD, sizeof(GUARD) - 1);
    memcpy(s->body + sizeof(GUARD) - 1, body, len + 1);
    hl_sha1_hex(s->body, total, s->sha);
    s->s.name = "a caller's script (hilock_hold_eval)";
    s->s.body = s->body;
    s->s.sha = s->sha;
    s->refs = 1;
    *out = s;
    return 0;
}

static void script_unref(hilock_script *s) {
    if (--s->refs == 0) free(s);
}

void hilock_script_free(hilock_script *s) {
    if (s != NULL) script_unref(s);
}

/* ---- A guarded write in flight ---------------------------------------------- */

typedef struct hl_evalop {
    hl_defer defer;
    hl_link link;          /* in hold->evals while its request is out */
    hilock_client *c;
    hilock_hold *hold;     /* NULL once the hold is gone */
    hilock_script *script;
    hilock_eval_cb cb;
    void *data;
    redisReply *reply;     /* a copy, freed after the callback */
    int status;
} hl_evalop;

void hl_hold_forget_evals(hilock_hold *h) {
    while (!hl_list_empty(&h->evals)) {
        hl_evalop *op = HL_CONTAINER(h->evals.next, hl_evalop, link);
        hl_list_remove(&op->link);
        op->hold = NULL;
    }
}

static void evalop_run(hl_defer *d, int cancel) {
    hl_evalop *op = HL_CONTAINER(d, hl_evalop, defer);
    int status = cancel ? HILOCK_ECANCELED : op->status;
    hl_count_status(&op->c->counts, status);
    if (op->cb && !op->c->loop.forked) op->cb(status, cancel ? NULL : op->reply, op->data);
    if (op->reply) freeReplyObject(op->reply);
    script_unref(op->script);
    free(op);
}

/* The guard's refusal: the lock is not the hold's any more. */
static int is_lost(const redisReply *reply) {
    return reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "HILOCK_LOST ", 12) == 0;
}

static void on_evaluated(hl_req *r, redisReply *reply, int err) {
    hl_evalop *op = r->owner;
    if (err == 0 && is_lost(reply)) {
        err = HILOCK_ELOST;
        hl_set_error(&op->c->loop, "%s", reply->str + 12);
        if (op->hold != NULL) hl_hold_mark_lost(op->hold, HILOCK_ELOST);
    } else if (err == 0) {
        if (reply->type == REDIS_REPLY_ERROR) err = hl_reply_error(&op->c->loop, reply);
        else if (r->acked < (int)r->wait_replicas) err = HILOCK_EREPLICAS;
        if ((op->reply = hl_reply_dup(reply)) == NULL) err = HILOCK_ENOMEM;
        else if (err == HILOCK_ESCRIPT) err = HILOCK_EREPLY; /* the caller's script failed */
    }
    if (hl_linked(&op->link)) hl_list_remove(&op->link);
    op->status = err;
    if (op->c->loop.freeing) evalop_run(&op->defer, 1);
    else hl_defer_push(&op->c->loop, &op->defer);
}

/* 0, or why the eval cannot be sent (the reason in the client's errstr). */
static int eval_check(hilock_hold *h, const hilock_script *s, int nkeys, const char *const *keys,
                      int nargs, const char *const *args) {
    hilock_client *c = h->c;
    if (s == NULL || nkeys < 0 || nargs < 0 || nkeys + nargs > HILOCK_EVAL_ARGS_MAX ||
        (nkeys > 0 && keys == NULL) || (nargs > 0 && args == NULL) || h->releasing)
        return HILOCK_EINVAL;
    if (hl_topo_quorum(&c->topo)) {
        hl_set_error(&c->loop, "hilock_hold_eval: not over Redlock (the data would be on "
                     "one master of several)");
        return HILOCK_EINVAL;
    }
    for (int i = 0; i < nkeys; i++) {
        if (keys[i] == NULL) return HILOCK_EINVAL;
        if (hilock_key_slot(keys[i], strlen(keys[i])) != h->name->slot) {
            hl_set_error(&c->loop, "hilock_hold_eval: key \"%.64s\" is not in the lock's slot "
                         "(hilock_hold_key makes keys that are)", keys[i]);
            return HILOCK_EINVAL;
        }
    }
    for (int i = 0; i < nargs; i++)
        if (args[i] == NULL) return HILOCK_EINVAL;
    return 0;
}

int hilock_hold_eval(hilock_hold *h, hilock_script *s, int nkeys, const char *const *keys,
                     int nargs, const char *const *args, const size_t *arglen,
                     hilock_eval_cb cb, void *data) {
    if (h == NULL) return HILOCK_EINVAL;
    if (hl_client_refuses(h->c)) return hl_client_refuses(h->c);
    if (h->group != NULL) {
        hl_set_error(&h->c->loop, "hilock_hold_eval: a multi-lock's names are in several slots; "
                     "guard with a lock of one name");
        return HILOCK_EINVAL;
    }
    int rc = eval_check(h, s, nkeys, keys, nargs, args);
    if (rc != 0) return rc;
    if (!hl_hold_live(h, hl_now_ms())) return HILOCK_ELOST;
    hl_name *n = h->name;
    char kind;
    const char *suffix = n->prim->guard(&h->terms, &kind);
    size_t bytes = n->keylen + strlen(suffix) + HL_TOKEN_LEN + 1;
    for (int i = 0; i < nkeys; i++) bytes += strlen(keys[i]);
    for (int i = 0; i < nargs; i++) bytes += arglen ? arglen[i] : strlen(args[i]);
    hl_evalop *op = calloc(1, sizeof(*op));
    hl_req *r = op ? hl_req_new_n(&h->c->topo.net, &s->s, 1 + nkeys, 3 + nkeys + nargs, bytes,
                                  on_evaluated, op)
                   : NULL;
    if (r == NULL) {
        free(op);
        return HILOCK_ENOMEM;
    }
    hl_req_arg(r, n->buf, n->keylen, suffix, strlen(suffix));
    for (int i = 0; i < nkeys; i++) hl_req_arg(r, keys[i], strlen(keys[i]), "", 0);
    hl_req_arg(r, h->token, HL_TOKEN_LEN, "", 0);
    hl_req_arg(r, &kind, 1, "", 0);
    for (int i = 0; i < nargs; i++) hl_req_arg(r, args[i], arglen ? arglen[i] : strlen(args[i]), "", 0);
    r->at_most_once = 1;
    r->wait_replicas = h->c->cfg.wait_replicas & 127;
    op->defer.run = evalop_run;
    op->c = h->c;
    op->hold = h;
    op->script = s;
    s->refs++;
    op->cb = cb;
    op->data = data;
    hl_list_push(&h->evals, &op->link);
    hl_name_submit(n, r);
    return 0;
}

/* ---- Keys in the lock's slot -------------------------------------------------- */

int hilock_hold_key(const hilock_hold *h, const char *suffix, char *buf, size_t n) {
    if (h == NULL || suffix == NULL || buf == NULL) return HILOCK_EINVAL;
    size_t slen = strlen(suffix), klen = h->name->keylen;
    if (klen + 3 + slen + 1 > n) return HILOCK_EINVAL;
    memcpy(buf, h->name->buf, klen);
    memcpy(buf + klen, ":u:", 3);
    memcpy(buf + klen + 3, suffix, slen + 1);
    return (int)(klen + 3 + slen);
}
