/* Breaking, checking and revoking a lock, from outside any hold's life:
 * an operator removes a mutex whoever holds it (hilock_break, or `hilock
 * unlock` in the CLI); a resource server reads the fence of its holder,
 * to refuse a stale one (hilock_check); anyone asks its holder to release
 * it (hilock_revoke, `hilock revoke`; the holder's side is core/revoke.c). */
#include <stdlib.h>
#include <string.h>
#include "prim/prim.h"

static const hl_cmd break_cmd = {&hl_script_mutex_break, 1, {""}};
static const hl_cmd check_cmd = {&hl_script_mutex_check, 1, {""}};
static const hl_cmd revoke_cmd = {&hl_script_mutex_revoke, 1, {""}};

typedef struct hl_breakop {
    hl_defer defer;
    hilock_client *c;
    void (*cb)(int status, uint64_t fence, void *data);
    void *data;
    int status;
    uint64_t fence;
} hl_breakop;

static void breakop_run(hl_defer *d, int cancel) {
    hl_breakop *op = HL_CONTAINER(d, hl_breakop, defer);
    int status = cancel ? HILOCK_ECANCELED : op->status;
    hl_count_status(&op->c->counts, status);
    if (!op->c->loop.forked) op->cb(status, cancel ? 0 : op->fence, op->data);
    free(op);
}

static void on_broken(hl_req *r, redisReply *reply, int err) {
    hl_breakop *op = r->owner;
    if (err == 0) {
        if (reply->type == REDIS_REPLY_INTEGER) op->fence = (uint64_t)reply->integer;
        else if (reply->type == REDIS_REPLY_ERROR) err = hl_reply_error(&op->c->loop, reply);
        else err = HILOCK_EPROTO;
    }
    op->status = err;
    if (op->c->loop.freeing) breakop_run(&op->defer, 1);
    else hl_defer_push(&op->c->loop, &op->defer);
}

/* cmd on the mutex `name`, whose reply is a fence for cb; a break and a
 * revoke also tell the channel. `no_redlock`: why it is refused over
 * Redlock, or NULL (it runs there). */
static int fence_op(hilock_client *c, const char *name, const hl_cmd *cmd, int tell,
                    const char *no_redlock, void (*cb)(int status, uint64_t fence, void *data),
                    void *data) {
    if (c == NULL || name == NULL || cb == NULL) return HILOCK_EINVAL;
    if (hl_client_refuses(c)) return hl_client_refuses(c);
    if (no_redlock != NULL && hl_topo_quorum(&c->topo)) {
        hl_set_error(&c->loop, "%s", no_redlock);
        return HILOCK_EINVAL;
    }
    size_t len = strnlen(name, HILOCK_NAME_MAX + 1);
    if (len == 0 || len > HILOCK_NAME_MAX) return HILOCK_EINVAL;
    hl_breakop *op = calloc(1, sizeof(*op));
    hl_name *n = op ? hl_name_get(c, &hl_mutex, name, len) : NULL;
    hl_req *r = n ? hl_name_req(n, cmd, n->chlen + 8, on_broken, op) : NULL;
    if (r != NULL && tell) {
        hl_req_arg(r, hl_name_channel(n), n->chlen, "", 0);
        r->publishes = 1; /* PUBLISH or SPUBLISH, as the client's pub/sub mode says */
        r->everywhere = 1;
    }
    if (r == NULL) {
        free(op);
        if (n) hl_name_maybe_free(n);
        return HILOCK_ENOMEM;
    }
    op->defer.run = breakop_run;
    op->c = c;
    op->cb = cb;
    op->data = data;
    r->fail_fast = 1; /* an operator wants an answer, not a wait for Redis */
    hl_name_submit(n, r);
    hl_name_maybe_free(n); /* the request carries its own keys */
    return 0;
}

int hilock_break(hilock_client *c, const char *name, hilock_break_cb cb, void *data) {
    return fence_op(c, name, &break_cmd, 1, NULL, cb, data);
}

int hilock_check(hilock_client *c, const char *name, hilock_fence_cb cb, void *data) {
    return fence_op(c, name, &check_cmd, 0,
                    "hilock_check: not over Redlock (each master counts its own fences; the "
                    "holder's is the largest of its quorum's)", cb, data);
}

int hilock_revoke(hilock_client *c, const char *name, hilock_fence_cb cb, void *data) {
    return fence_op(c, name, &revoke_cmd, 1, "hilock_revoke: not over Redlock", cb, data);
}
