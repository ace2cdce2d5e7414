/* What the primitives whose lock is handed over through a queue in Redis
 * share (lua/_queue.lua): the fair lock, every wait of which has a place,
 * and the mutex, the read-write lock and the semaphore, whose waits take
 * one when they starve. */
#include <string.h>
#include "prim/prim.h"

hl_req *hl_queue_try_req(hl_name *n, const hl_cmd *cmd, const char *token, uint32_t lease_ms,
                         char mode, hl_req_done done, void *owner) {
    hl_req *r = hl_name_req(n, cmd, HL_TOKEN_LEN + 3 * 20 + 1 + n->chlen, done, owner);
    if (r == NULL) return NULL;
    hl_req_arg(r, token, HL_TOKEN_LEN, "", 0);
    hl_req_arg_u64(r, lease_ms);
    hl_req_arg_u64(r, n->c->cfg.fence_ttl_s);
    hl_req_arg(r, &mode, 1, "", 0);
    hl_req_arg(r, hl_name_channel(n), hl_name_channel_base_len(n), "", 0);
    r->publishes = 1; /* a try that finds the lock free may grant the first waiter */
    return r;
}

hl_req *hl_queue_release_req(hl_name *n, const hl_cmd *cmd, const char *token, hl_req_done done,
                             void *owner) {
    hl_req *r = hl_name_req(n, cmd, HL_TOKEN_LEN + 20 + n->chlen, done, owner);
    if (r == NULL) return NULL;
    hl_req_arg(r, token, HL_TOKEN_LEN, "", 0);
    hl_req_arg_u64(r, n->c->cfg.fence_ttl_s);
    hl_req_arg(r, hl_name_channel(n), hl_name_channel_base_len(n), "", 0);
    r->publishes = 1;
    r->everywhere = 1;
    return r;
}

int hl_queue_every(const hl_terms *terms) {
    (void)terms;
    return 1;
}

/* A try once (mode 1) renews the lock if its token holds it, and never
 * takes a place: the mode is the fourth argument after the keys, in r's
 * own bytes, which a send (and a re-send) reads. (The mutex's try of a
 * wait that has not starved has no mode, and no place to take.) */
void hl_queue_try_moot(hl_req *r) {
    int mode = r->nkeys + 3;
    if (r->nargs > mode && r->argl[mode] == 1) ((char *)r->argv[mode])[0] = '1';
}

int hl_queue_try_parse(hilock_client *c, const redisReply *reply, hl_try *out) {
    static const int types[6] = {REDIS_REPLY_INTEGER, REDIS_REPLY_INTEGER, REDIS_REPLY_INTEGER,
                                 REDIS_REPLY_STRING, REDIS_REPLY_INTEGER, REDIS_REPLY_INTEGER};
    if (reply->type == REDIS_REPLY_ERROR) return hl_reply_error(&c->loop, reply);
    int ok = reply->type == REDIS_REPLY_ARRAY && reply->elements == 6;
    for (size_t i = 0; ok && i < 6; i++) ok = reply->element[i]->type == types[i];
    long long got = ok ? reply->element[0]->integer : 0, val = ok ? reply->element[1]->integer : 0;
    if (!ok) {
        hl_set_error(&c->loop, "unexpected reply to the queue's acquire script");
        return HILOCK_EPROTO;
    }
    long long flags = reply->element[5]->integer;
    out->granted = got == 1;
    out->server_ms = (uint64_t)reply->element[2]->integer;
    out->rejoin = (flags & 2) != 0;
    if (out->granted) {
        out->fence = (uint64_t)val;
        out->renewed = (flags & 1) != 0;
        out->more = (flags & 4) != 0; /* a read grant: the next reader may try */
        return 0;
    }
    /* The lock may be free by the end of its lease (-2: gone already;
     * -1, no TTL: not ours, look again soon). */
    out->retry_ms = val >= 0 ? (uint64_t)val + 1 : val == -2 ? 0 : HL_QUEUE_REFRESH_MS;
    /* (A token of another length is no client's of ours: the mutex's
     * lock may have been written by another tool.) */
    out->holder = reply->element[3]->len == HL_TOKEN_LEN ? reply->element[3]->str : NULL;
    out->holder_ms = val > 0 ? (uint64_t)val : 0;
    out->fence = (uint64_t)reply->element[4]->integer;
    return 0;
}

static int parse_u64(const char **p, const char *end, uint64_t *out) {
    const char *s = *p;
    uint64_t v = 0;
    if (s >= end || *s < '0' || *s > '9') return 0;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - 9) / 10) return 0;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    *p = s;
    return 1;
}

/* "g TOKEN FENCE NOW_MS CLAIM_MS" (_queue.lua's grant_by_message). */
int hl_queue_grant_msg(const char *data, size_t len, hl_grant *out) {
    const char *p = data, *end = data + len;
    uint64_t ttl;
    if (data == NULL || len < 3 + HL_TOKEN_LEN || p[0] != 'g' || p[1] != ' ') return 0;
    memcpy(out->token, p + 2, HL_TOKEN_LEN);
    out->token[HL_TOKEN_LEN] = '\0';
    p += 2 + HL_TOKEN_LEN;
    if (p >= end || *p++ != ' ' || !parse_u64(&p, end, &out->fence)) return 0;
    if (p >= end || *p++ != ' ' || !parse_u64(&p, end, &out->server_ms)) return 0;
    if (p >= end || *p++ != ' ' || !parse_u64(&p, end, &ttl) || p != end) return 0;
    out->ttl_ms = ttl > UINT32_MAX ? UINT32_MAX : (uint32_t)ttl;
    return 1;
}
