/* Cooperative revocation, the holder's side: a revoke (hilock_revoke, or
 * `hilock revoke`) asks a mutex's holder to release it, and the holder's
 * callback decides (Curator's Revoker). It reaches the hold two ways: a
 * message "v TOKEN" on the name's channel, which the name keeps subscribed
 * while one of its holds listens (hl_name_listen), and the mark v that
 * the revoke leaves on the lock, which the hold's next renewal reports (2,
 * or '2' in a batch): a message missed during a reconnect is heard a third
 * of a lease later at the latest. The callback runs once per hold. */
#include <string.h>
#include "core/core.h"

static void revoke_run(hl_defer *d, int cancel) {
    hilock_hold *h = HL_CONTAINER(d, hilock_hold, revoke_defer);
    if (cancel || h->releasing || h->lost || h->revoke_cb == NULL || h->c->loop.forked) return;
    h->revoke_cb(h, h->revoke_data);
}

void hl_hold_revoke_asked(hilock_hold *h) {
    h->revoke_asked = 1;
    if (h->revoke_cb == NULL || h->revoke_told || h->releasing || h->lost || !h->delivered) return;
    h->revoke_told = 1;
    h->revoke_defer.run = revoke_run;
    hl_defer_push(&h->c->loop, &h->revoke_defer);
}

void hl_holds_revoke_msg(hl_name *n, const char *token, size_t len) {
    if (len != HL_TOKEN_LEN) return;
    for (hl_link *l = n->c->holds.next; l != &n->c->holds; l = l->next) {
        hilock_hold *h = HL_CONTAINER(l, hilock_hold, link);
        if (h->name == n && memcmp(h->token, token, len) == 0) hl_hold_revoke_asked(h);
    }
}

void hl_hold_revoke_end(hilock_hold *h) {
    hl_defer_cancel(&h->revoke_defer);
    if (h->revoke_cb == NULL) return;
    h->revoke_cb = NULL;
    if (h->c->loop.freeing) h->name->listeners--;
    else hl_name_listen(h->name, 0);
}

int hilock_hold_on_revoke(hilock_hold *h, hilock_revoke_cb cb, void *data) {
    if (h == NULL) return HILOCK_EINVAL;
    if (hl_client_refuses(h->c)) return hl_client_refuses(h->c);
    if (h->releasing) return HILOCK_EINVAL;
    if (!h->name->prim->revocable || h->group != NULL || hl_topo_quorum(&h->c->topo)) {
        hl_set_error(&h->c->loop, "hilock_hold_on_revoke: %s", hl_topo_quorum(&h->c->topo)
                     ? "not over Redlock" : "only a mutex's hold of one name can be revoked");
        return HILOCK_EINVAL;
    }
    if (cb != NULL && h->revoke_cb == NULL) hl_name_listen(h->name, 1);
    if (cb == NULL && h->revoke_cb != NULL) hl_hold_revoke_end(h);
    h->revoke_cb = cb;
    h->revoke_data = data;
    if (cb != NULL && h->revoke_asked && !h->revoke_told) hl_hold_revoke_asked(h);
    return 0;
}
