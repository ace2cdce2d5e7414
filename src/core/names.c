/* Lock names: a chained hash table keyed by the name's channel (its
 * primitive's base key plus the primitive's channel suffix), which is also
 * how a release message finds its name. */
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "core/engine.h"

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 16777619u; }
    return h;
}

static hl_name *lookup(hl_names *t, const char *ch, size_t len, uint32_t h) {
    if (t->nbuckets == 0) return NULL;
    for (hl_name *n = t->buckets[h & (t->nbuckets - 1)]; n; n = n->next_in_bucket)
        if (n->hash == h && n->chlen == len && memcmp(n->buf, ch, len) == 0) return n;
    return NULL;
}

static int grow(hl_names *t) {
    size_t nb = t->nbuckets ? t->nbuckets * 2 : 64;
    hl_name **b = calloc(nb, sizeof(*b));
    if (b == NULL) return -1;
    for (size_t i = 0; i < t->nbuckets; i++) {
        hl_name *n = t->buckets[i], *next;
        for (; n; n = next) {
            next = n->next_in_bucket;
            n->next_in_bucket = b[n->hash & (nb - 1)];
            b[n->hash & (nb - 1)] = n;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = nb;
    return 0;
}

static hl_name *name_new(hilock_client *c, const hl_prim *p, const char *ch, size_t chlen,
                         size_t keylen, const char *name, size_t len, uint32_t h) {
    hl_names *t = &c->names;
    if (t->nnames >= t->nbuckets && grow(t) != 0) return NULL;
    hl_name *n = calloc(1, sizeof(*n) + chlen + 1 + len + 1);
    if (n == NULL) return NULL;
    memcpy(n->buf, ch, chlen);
    n->name = n->buf + chlen + 1;
    memcpy(n->name, name, len);
    n->chlen = chlen;
    n->keylen = keylen;
    n->hash = h;
    n->c = c;
    n->prim = p;
    /* Every key of the name carries the same hash tag: one slot for all. */
    n->slot = hl_crc16(ch + c->prefix_len + 1, keylen - c->prefix_len - 2) & 16383;
    hl_list_init(&n->waiters);
    hl_list_init(&n->observers);
    hl_engine_name_init(n);
    n->next_in_bucket = t->buckets[h & (t->nbuckets - 1)];
    t->buckets[h & (t->nbuckets - 1)] = n;
    t->nnames++;
    return n;
}

hl_name *hl_name_get(hilock_client *c, const hl_prim *p, const char *name, size_t len) {
    size_t keylen = c->prefix_len + 2 + hl_tag_len(name, len);
    size_t suflen = strlen(p->channel_suffix);
    size_t chlen = keylen + suflen + (p->client_channel ? HL_CLIENT_ID_LEN : 0);
    char stack[512], *ch = chlen < sizeof(stack) ? stack : malloc(chlen + 1);
    if (ch == NULL) return NULL;
    hl_key_write(ch, c->prefix, c->prefix_len, name, len);
    memcpy(ch + keylen, p->channel_suffix, suflen + 1);
    if (p->client_channel) {
        hl_client_id(c, ch + keylen + suflen);
        ch[chlen] = '\0';
    }
    uint32_t h = hash_bytes(ch, chlen);
    hl_name *n = lookup(&c->names, ch, chlen, h);
    if (n == NULL) n = name_new(c, p, ch, chlen, keylen, name, len, h);
    if (ch != stack) free(ch);
    return n;
}

size_t hl_name_channel_base_len(const hl_name *n) {
    return n->chlen - (n->prim->client_channel ? HL_CLIENT_ID_LEN : 0);
}

hl_name *hl_name_by_channel(hilock_client *c, const char *ch, size_t len) {
    return lookup(&c->names, ch, len, hash_bytes(ch, len));
}

hl_node *hl_name_node(const hl_name *n) {
    return hl_topo_route(&n->c->topo, n->slot);
}

hl_node *hl_name_sub_node(const hl_name *n) {
    return hl_topo_sub_route(&n->c->topo, n->slot);
}

static void name_unlink_free(hl_name *n) {
    hl_names *t = &n->c->names;
    hl_name **pp = &t->buckets[n->hash & (t->nbuckets - 1)];
    while (*pp != n) pp = &(*pp)->next_in_bucket;
    *pp = n->next_in_bucket;
    t->nnames--;
    hl_timer_stop(&n->c->loop, &n->fallback);
    hl_timer_stop(&n->c->loop, &n->linger);
    free(n->ride_why);
    free(n->payload);
    free(n);
}

void hl_name_maybe_free(hl_name *n) {
    if (n->nwaiters == 0 && n->refs == 0 && !n->trying && n->sub == HL_SUB_NONE &&
        !n->c->loop.freeing)
        name_unlink_free(n);
}

void hl_name_unref(hl_name *n) {
    n->refs--;
    hl_name_maybe_free(n);
}

hl_name *hl_names_first(hilock_client *c) {
    for (size_t i = 0; i < c->names.nbuckets; i++)
        if (c->names.buckets[i]) return c->names.buckets[i];
    return NULL;
}

hl_name *hl_names_next(hilock_client *c, hl_name *n) {
    if (n->next_in_bucket) return n->next_in_bucket;
    for (size_t i = (n->hash & (c->names.nbuckets - 1)) + 1; i < c->names.nbuckets; i++)
        if (c->names.buckets[i]) return c->names.buckets[i];
    return NULL;
}

void hl_names_free_all(hilock_client *c) {
    hl_name *n = hl_names_first(c), *next;
    for (; n; n = next) {
        next = hl_names_next(c, n);
        free(n->ride_why);
        free(n->payload);
        free(n);
    }
    free(c->names.buckets);
    memset(&c->names, 0, sizeof(c->names));
}

/* ---- Requests on a name's keys -------------------------------------------- */

hl_req *hl_name_req(hl_name *n, const hl_cmd *cmd, size_t tail, hl_req_done done, void *owner) {
    size_t bytes = tail;
    for (int i = 0; i < cmd->nkeys; i++) bytes += n->keylen + strlen(cmd->suffix[i]);
    hl_req *r = hl_req_new(&n->c->topo.net, cmd->script, cmd->nkeys, bytes, done, owner);
    if (r == NULL) return NULL;
    for (int i = 0; i < cmd->nkeys; i++)
        hl_req_arg(r, n->buf, n->keylen, cmd->suffix[i], strlen(cmd->suffix[i]));
    return r;
}

void hl_name_submit(hl_name *n, hl_req *r) {
    hl_name_submit_within(n, r, n->c->topo.net.request_timeout_ms);
}

void hl_name_submit_leased(hl_name *n, hl_req *r, uint32_t lease_ms) {
    r->wait_replicas = n->c->cfg.wait_replicas & 127;
    r->lease_ms = lease_ms;
    hl_name_submit(n, r);
}

void hl_name_submit_within(hl_name *n, hl_req *r, uint64_t ms) {
    r->slot = n->slot; /* so that the topology can send it elsewhere */
    hl_topo_submit(&n->c->topo, r, ms);
}
