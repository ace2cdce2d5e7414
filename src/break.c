/* Breaking a lock: an operator removes a lock whoever holds it (hilock
 * break, or `hilock unlock` in the CLI). Not part of any hold's life. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

typedef struct hl_breakop {
    hl_defer defer;
    hilock_client *c;
    hilock_break_cb cb;
    void *data;
    int status;
    uint64_t fence;
} hl_breakop;

static void breakop_run(hl_defer *d, int cancel) {
    hl_breakop *op = HL_CONTAINER(d, hl_breakop, defer);
    if (!op->c->forked) op->cb(cancel ? HILOCK_ECANCELED : op->status, cancel ? 0 : op->fence, op->data);
    free(op);
}

static void on_broken(hl_req *r, redisReply *reply, int err) {
    hl_breakop *op = r->owner;
    if (err == 0) {
        if (reply->type == REDIS_REPLY_INTEGER) op->fence = (uint64_t)reply->integer;
        else if (reply->type == REDIS_REPLY_ERROR) err = hl_reply_error(r->c, reply);
        else err = HILOCK_EPROTO;
    }
    op->status = err;
    if (r->c->freeing) breakop_run(&op->defer, 1);
    else hl_defer_push(r->c, &op->defer);
}

int hilock_break(hilock_client *c, const char *name, hilock_break_cb cb, void *data) {
    if (c == NULL || name == NULL || cb == NULL) return HILOCK_EINVAL;
    if (hl_client_refuses(c)) return hl_client_refuses(c);
    size_t len = strnlen(name, HILOCK_NAME_MAX + 1);
    if (len == 0 || len > HILOCK_NAME_MAX) return HILOCK_EINVAL;
    hl_breakop *op = calloc(1, sizeof(*op));
    hl_name *n = op && hl_timer_reserve(c, 2) == 0 ? hl_name_get(c, name, len) : NULL;
    if (n == NULL) { free(op); return HILOCK_ENOMEM; }
    static const char no_token[HL_TOKEN_LEN + 1] = "00000000000000000000000000000000";
    hl_req *r = hl_req_new(c, &hl_script_break, n, no_token, 0, on_broken, op);
    if (r == NULL) { free(op); hl_name_maybe_free(n); return HILOCK_ENOMEM; }
    op->defer.run = breakop_run;
    op->c = c;
    op->cb = cb;
    op->data = data;
    r->fail_fast = 1; /* an operator wants an answer, not a wait for Redis */
    hl_req_submit(c, r);
    return 0;
}
