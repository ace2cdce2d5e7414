/* Multi-locks (Redisson's RedissonMultiLock, Curator's
 * InterProcessMultiLock): hilock_acquire_multi takes the mutexes of n
 * names, all or none, and hands the caller one hold for them all.
 *
 * Deadlock-free by a global order: every client takes the names of a
 * multi-lock in the same order, by (slot, name), so no two multi-locks
 * ever wait for each other in a circle. Names that share a node (one
 * server, or Sentinel's master; on a Cluster, a slot) are taken at once by
 * one script when all of them are free (lua/mutex_acquire_all.lua: all or
 * none, one round trip for the lot, never seen half taken); when one is
 * held, the script takes none, and the names are waited for one mutex
 * wait at a time in the order (woken by pub/sub as any wait, with its
 * fence and its lease), the rest of the group tried at once again after
 * each. A multi-lock only ever waits for a name while holding names before
 * it in the order. One that fails, runs out or is cancelled gives back
 * what it took, at once. The caller's
 * hold is the hold of its first name (names[0]), whose group (hl_group,
 * core.h) takes release, extend and hilock_hold_lost for all the parts:
 * each part is renewed by its own watchdog, and the loss of any is the
 * loss of the whole, reported once through the caller's lost_cb.
 *
 * A part found lost when the last one is granted (a long wait for a later
 * name, while an earlier part's renewals failed) is not handed over: all
 * are given back and the multi-lock starts again within its deadline. */
#include <stdlib.h>
#include <string.h>
#include "prim/prim.h"

struct hilock_multi {
    hl_group group;            /* the calls on the caller's hold (core.h) */
    hl_link link;              /* in client->multis, until released */
    hl_defer defer;            /* the outcome's callback, from the loop */
    hilock_client *c;
    hilock_acquire_cb cb;
    void *data;
    hilock_acquire_opts opts;  /* each part's: lost_cb ours */
    hilock_lost_cb lost_cb;    /* the caller's */
    void *lost_data;
    uint64_t deadline;         /* hl_now_ms()'s clock; 0: none */
    uint64_t started_ms;
    size_t n, taken;           /* names; parts held so far, in order */
    hilock_wait *wait;         /* the part's wait in flight */
    uint32_t lease_ms;         /* each part's */
    uint64_t batch_token;      /* the second half of the batch's token (hl_token_new) */
    size_t batch;              /* names the batch in flight takes (0: none) */
    size_t *order;             /* order[k]: the caller's index of the k-th name to take */
    unsigned *slot;            /* slot[k]: the k-th name's Cluster slot */
    char **name;               /* by the caller's index */
    hilock_hold **part;        /* by the caller's index */
    uint64_t *fence;           /* by the caller's index, once granted */
    int status;                /* the outcome queued */
    int lost_why;              /* a part lost before the caller had the hold */
    unsigned cancelled : 1;    /* hilock_multi_cancel() */
    unsigned ended : 1;        /* the outcome is queued: no cancel */
    unsigned delivered : 1;    /* the caller has its hold */
    unsigned told_lost : 1;    /* its lost_cb has run */
    unsigned releasing : 1;
    unsigned lost_at_release : 1; /* hilock_hold_lost() while it is released */
};

static void multi_free(hilock_multi *m) {
    hl_list_remove(&m->link);
    for (size_t i = 0; m->name != NULL && i < m->n; i++) free(m->name[i]);
    free(m->name);
    free(m->order);
    free(m->slot);
    free(m->part);
    free(m->fence);
    free(m);
}

void hl_multis_free_all(hilock_client *c) {
    while (!hl_list_empty(&c->multis)) multi_free(HL_CONTAINER(c->multis.next, hilock_multi, link));
}

/* Give back every part taken, with no word to the caller. */
static void give_back(hilock_multi *m) {
    for (size_t k = 0; k < m->taken; k++) {
        hilock_hold **p = &m->part[m->order[k]];
        if (*p != NULL) hl_hold_release(*p, NULL, NULL); /* a closed client releases them itself */
        *p = NULL;
    }
    m->taken = 0;
}

static void part_lost(hilock_hold *h, int why, void *data);

/* The outcome's callback, from the loop (never from inside a reply's
 * handler, where a callback that frees the client would pull the request
 * from under it), or at once while the client is freed (cancel: its
 * ECANCELED). The multi-lock is freed after a failure's callback, so that
 * a cancel inside it is refused, not a use after free. */
static void multi_run(hl_defer *d, int cancel) {
    hilock_multi *m = HL_CONTAINER(d, hilock_multi, defer);
    hilock_client *c = m->c;
    int forked = c->loop.forked;
    if (m->status != 0 || cancel) {
        if (!forked) m->cb(NULL, cancel ? HILOCK_ECANCELED : m->status, m->data);
        if (m->status != 0) multi_free(m); /* else the client frees it, with the parts */
        return;
    }
    hilock_hold *head = m->part[0];
    for (size_t i = 0; i < m->n; i++) m->fence[i] = m->part[i]->fence;
    head->group = &m->group;
    m->delivered = 1;
    if (!forked) m->cb(head, 0, m->data);
    if (m->lost_why != 0 && !c->loop.freeing) part_lost(head, m->lost_why, m); /* lost before it was had */
}

/* The outcome, from a part's callback (never from inside an API call):
 * what failed is given back at once, and the caller told from the loop. */
static void multi_end(hilock_multi *m, int status) {
    if (status != 0) give_back(m);
    m->status = status;
    m->ended = 1;
    if (m->c->loop.freeing) multi_run(&m->defer, 1);
    else hl_defer_push(&m->c->loop, &m->defer);
}

static void part_granted(hilock_hold *h, int status, void *data);
static int batch_send(hilock_multi *m, size_t k);

/* How many names from the k-th on share its node, and so one script: on a
 * Cluster those of its slot, on one server or Sentinel's master all (once
 * a redis:// client knows its server is no Cluster: until its first
 * answer, by slot); none over Redlock (a quorum of masters per name), or
 * when grants must be confirmed by replicas (wait_replicas: the single
 * waits do that). */
static size_t group_of(const hilock_multi *m, size_t k) {
    hilock_client *c = m->c;
    if (hl_topo_quorum(&c->topo) || (c->cfg.wait_replicas & 127) != 0) return 1;
    size_t g = 1;
    int slotted = hl_topo_slotted(&c->topo);
    while (k + g < m->n && (!slotted || m->slot[k + g] == m->slot[k])) g++;
    return g;
}

/* Ask for the next name in the order, with the rest of its group at once
 * when it has one (try: the batch may be sent): 0, or an error (nothing
 * sent). */
static int multi_next_try(hilock_multi *m, int try) {
    hilock_acquire_opts o = m->opts;
    if (m->deadline != 0) {
        uint64_t now = hl_now_ms();
        if (now >= m->deadline) return HILOCK_ETIMEDOUT;
        o.wait_ms = (int64_t)(m->deadline - now);
    }
    size_t g = try ? group_of(m, m->taken) : 1;
    if (g > 1 && batch_send(m, g) == 0) return 0;
    return hl_prim_acquire(m->c, &hl_mutex, m->name[m->order[m->taken]], &o, NULL, part_granted, m,
                           &m->wait);
}

static int multi_next(hilock_multi *m) { return multi_next_try(m, 1); }

/* Every part taken so far still held now? */
static int parts_live(const hilock_multi *m) {
    uint64_t now = hl_now_ms();
    for (size_t i = 0; i < m->n; i++)
        if (m->part[i] != NULL && !hl_hold_live(m->part[i], now)) return 0;
    return 1;
}

static void part_granted(hilock_hold *h, int status, void *data) {
    hilock_multi *m = data;
    m->wait = NULL;
    if (status == HILOCK_ECLOSED) status = HILOCK_ECANCELED; /* the next part's, at a close */
    if (status == 0) m->part[m->order[m->taken++]] = h;
    if (status == 0 && m->cancelled) status = HILOCK_ECANCELED;
    if (status == 0 && m->taken == m->n && !parts_live(m)) {
        give_back(m); /* a part lost on the way: all again */
        hl_log(&m->c->loop, HILOCK_LOG_WARNING, "multi-lock: a part was lost while a later one was "
               "awaited; taking them all again");
    }
    if (status == 0 && m->taken < m->n) status = multi_next(m);
    if (status != 0 || m->taken == m->n) multi_end(m, status);
}

/* A part's loss is the whole's: told once, with the caller's hold. */
static void part_lost(hilock_hold *h, int why, void *data) {
    hilock_multi *m = data;
    (void)h;
    if (!m->delivered && m->ended && m->status == 0 && m->lost_why == 0) m->lost_why = why;
    if (!m->delivered || m->told_lost || m->releasing) return;
    m->told_lost = 1;
    if (m->lost_cb != NULL) m->lost_cb(m->part[0], why, m->lost_data);
}

/* ---- A group of names in one script ---------------------------------------- */

/* The batch's answer: the fences of names taken..taken+batch (a hold
 * each, as a wait's grant makes), or 0: one is held, and the names are
 * waited for one at a time. An error, or a cancel, ends nothing: the
 * waits say what is wrong, and a cancel gives back what was taken. */
static void batch_answered(hl_req *r, redisReply *reply, int err) {
    hilock_multi *m = r->owner;
    hilock_client *c = m->c;
    size_t g = m->batch, k = m->taken;
    m->batch = 0;
    int got = err == 0 && reply->type == REDIS_REPLY_ARRAY && reply->elements == g;
    for (size_t i = 0; got && i < g; i++) got = reply->element[i]->type == REDIS_REPLY_INTEGER;
    if (got) { /* one hold per name, as if each were granted to a wait */
        hilock_wait w;
        char tok[HL_TOKEN_LEN + 1];
        memset(&w, 0, sizeof(w));
        w.c = c;
        w.terms.lost_cb = part_lost;
        w.terms.lost_data = m;
        w.terms.lease_ms = m->lease_ms;
        w.terms.no_renew = m->opts.no_renew != 0;
        w.started_us = m->started_ms * 1000u;
        hl_token_text(c, m->batch_token, tok);
        for (size_t i = 0; i < g; i++) {
            const char *name = m->name[m->order[k + i]];
            hl_name *n = hl_name_get(c, &hl_mutex, name, strlen(name));
            hilock_hold *h = n ? hl_hold_new(n, tok, (uint64_t)reply->element[i]->integer, r->submitted_at,
                                             m->lease_ms, &w) : NULL;
            if (h == NULL) { /* no memory: this one goes with its lease */
                if (n) hl_name_maybe_free(n);
                got = 0;
                continue;
            }
            h->delivered = 1;
            m->part[m->order[m->taken++]] = h;
        }
    } else if (err != 0 && !c->loop.freeing) {
        /* Unanswered: it may have run. What it may have taken goes back,
         * in the background, before the names are waited for one by one. */
        hl_terms terms = {.lease_ms = m->lease_ms};
        char tok[HL_TOKEN_LEN + 1];
        hl_token_text(c, m->batch_token, tok);
        for (size_t i = 0; i < g; i++) {
            const char *name = m->name[m->order[k + i]];
            hl_name *n = hl_name_get(c, &hl_mutex, name, strlen(name));
            if (n == NULL) continue;
            hl_release_token(n, tok, &terms, m->lease_ms);
            hl_name_maybe_free(n);
        }
    }
    int status = c->loop.freeing || c->closing || m->cancelled ? HILOCK_ECANCELED
                 : got && !parts_live(m) ? HILOCK_EDEADLINE /* answered after its lease */
                 : got && m->taken < m->n ? multi_next(m)
                 : got ? 0 : multi_next_try(m, 0);
    if (status == HILOCK_EDEADLINE) {
        give_back(m);
        status = multi_next(m);
    }
    if (status != 0 || m->taken == m->n) multi_end(m, status);
}

/* Take the g names from the taken-th on in one script: 0 if sent. */
static int batch_send(hilock_multi *m, size_t g) {
    hilock_client *c = m->c;
    const char *name0 = m->name[m->order[m->taken]];
    size_t bytes = HL_TOKEN_LEN + 3 * 20, keymax = c->prefix_len + 3 * HILOCK_NAME_MAX + 16;
    for (size_t i = 0; i < g; i++) bytes += 2 * (c->prefix_len + 3 * strlen(m->name[m->order[m->taken + i]]) + 16);
    char *key = malloc(keymax);
    hl_name *first = key ? hl_name_get(c, &hl_mutex, name0, strlen(name0)) : NULL;
    hl_req *r = first ? hl_req_new_n(&c->topo.net, &hl_script_mutex_acquire_all, (int)(2 * g), (int)(2 * g + 5),
                                     bytes, batch_answered, m)
                      : NULL;
    if (r == NULL) {
        if (first) hl_name_maybe_free(first);
        free(key);
        return HILOCK_ENOMEM;
    }
    for (size_t i = 0; i < g; i++) {
        const char *name = m->name[m->order[m->taken + i]];
        size_t len = hl_key_write(key, c->prefix, c->prefix_len, name, strlen(name));
        hl_req_arg(r, key, len, "", 0);
        hl_req_arg(r, key, len, ":fence", 6);
    }
    free(key);
    char tok[HL_TOKEN_LEN + 1];
    m->batch_token = hl_token_new(c);
    hl_token_text(c, m->batch_token, tok);
    hl_req_arg(r, tok, HL_TOKEN_LEN, "", 0);
    hl_req_arg_u64(r, hl_key_ttl(first, m->lease_ms));
    hl_req_arg_u64(r, c->cfg.fence_ttl_s);
    m->batch = g;
    hl_name_submit(first, r);
    hl_name_maybe_free(first); /* the request carries its own keys */
    return 0;
}

/* ---- The calls on the caller's hold ---------------------------------------- */

/* A release or extend of every part: one callback for them all, with the
 * first error (HILOCK_ELOST before any other). */
typedef struct fanout {
    hilock_multi *m;           /* a release: freed with the last answer */
    hilock_hold *head;         /* ... and the caller's hold, kept until then */
    size_t pending;
    int status;
    hilock_release_cb cb;
    void *data;
} fanout;

static void part_done(int status, void *data) {
    fanout *f = data;
    if (status != 0 && (f->status == 0 || status == HILOCK_ELOST)) f->status = status;
    if (--f->pending > 0) return;
    if (f->cb != NULL) f->cb(f->status, f->data);
    if (f->m != NULL) {
        hilock_client *c = f->head->c;
        multi_free(f->m);
        if (!c->loop.freeing) hl_hold_free(f->head); /* else with the client's holds */
    }
    free(f);
}

typedef int (*part_op)(hilock_hold *h, uint32_t lease_ms, hilock_release_cb cb, void *data);

static int op_release(hilock_hold *h, uint32_t lease_ms, hilock_release_cb cb, void *data) {
    (void)lease_ms;
    return hl_hold_release(h, cb, data);
}

/* op on every part; 0 if any was sent (the callback comes once they all
 * answered), else the first's error and nothing sent. */
static int fan_out(hilock_multi *m, part_op op, uint32_t lease_ms, hilock_release_cb cb, void *data,
                   int release) {
    fanout *f = calloc(1, sizeof(*f));
    if (f == NULL) return HILOCK_ENOMEM;
    f->cb = cb;
    f->data = data;
    f->pending = m->n + 1; /* one more until every part is sent */
    int first = 0;
    for (size_t i = 0; i < m->n; i++) {
        int rc = op(m->part[i], lease_ms, part_done, f);
        if (rc == 0) continue;
        if (first == 0) first = rc;
        if (rc == HILOCK_ELOST || f->status == 0) f->status = rc;
        f->pending--;
    }
    if (f->pending == 1) { /* none sent */
        free(f);
        return first;
    }
    if (release) {
        m->releasing = 1;
        /* freed with the last answer, unless a part is left held (its
         * lost_data): then with the client. The caller's hold too: its
         * own release's answer leaves it to us (core.h, hl_group), so
         * that it stays valid until the callback. */
        f->m = first == 0 ? m : NULL;
        f->head = m->part[0];
    }
    f->pending--;
    return 0;
}

static int multi_release(hl_group *g, hilock_release_cb cb, void *data) {
    hilock_multi *m = HL_CONTAINER(g, hilock_multi, group);
    hilock_hold *head = m->part[0];
    if (head->c->loop.forked) return HILOCK_EFORK;
    if (m->releasing || head->releasing) return HILOCK_EINVAL;
    if (head->c->loop.freeing) return HILOCK_ECLOSED;
    m->lost_at_release = !parts_live(m);
    return fan_out(m, op_release, 0, cb, data, 1);
}

static int multi_extend(hl_group *g, uint32_t lease_ms, hilock_release_cb cb, void *data) {
    hilock_multi *m = HL_CONTAINER(g, hilock_multi, group);
    hilock_hold *head = m->part[0];
    if (hl_client_refuses(head->c)) return hl_client_refuses(head->c);
    if (m->releasing || head->releasing || lease_ms < HILOCK_LEASE_MIN || lease_ms > INT32_MAX)
        return HILOCK_EINVAL;
    if (g->lost(g)) return HILOCK_ELOST;
    return fan_out(m, hl_hold_extend, lease_ms, cb, data, 0);
}

static int multi_lost(const hl_group *g) {
    const hilock_multi *m = HL_CONTAINER(g, hilock_multi, group);
    return m->releasing ? m->lost_at_release : !parts_live(m); /* parts go as their releases end */
}

uint64_t hilock_hold_fence_at(const hilock_hold *h, size_t i) {
    if (h == NULL) return 0;
    if (h->group == NULL || h->group->release != multi_release) return i == 0 ? h->fence : 0;
    const hilock_multi *m = HL_CONTAINER(h->group, hilock_multi, group);
    return i < m->n ? m->fence[i] : 0;
}

/* ---- Acquire and cancel ------------------------------------------------------ */

/* The order every client takes names in: by slot, then by name. */
typedef struct ordered {
    unsigned slot;
    size_t idx;
    const char *name;
} ordered;

static int by_order(const void *a, const void *b) {
    const ordered *x = a, *y = b;
    return x->slot != y->slot ? (x->slot < y->slot ? -1 : 1) : strcmp(x->name, y->name);
}

static unsigned name_slot(const char *name) {
    char key[HILOCK_NAME_MAX * 3 + 16]; /* every byte written as %XX at most */
    int len = hilock_key(NULL, name, key, sizeof(key));
    return len > 0 ? hilock_key_slot(key, (size_t)len) : 0;
}

/* m's names copied and put in order: 0, HILOCK_EINVAL (a bad name, or a
 * name twice) or HILOCK_ENOMEM. */
static int multi_names(hilock_multi *m, const char *const names[]) {
    m->name = calloc(m->n, sizeof(*m->name));
    m->order = calloc(m->n, sizeof(*m->order));
    m->slot = calloc(m->n, sizeof(*m->slot));
    m->part = calloc(m->n, sizeof(*m->part));
    m->fence = calloc(m->n, sizeof(*m->fence));
    ordered *o = calloc(m->n, sizeof(*o));
    int rc = m->name && m->order && m->slot && m->part && m->fence && o ? 0 : HILOCK_ENOMEM;
    for (size_t i = 0; rc == 0 && i < m->n; i++) {
        size_t len = names[i] ? strnlen(names[i], HILOCK_NAME_MAX + 1) : 0;
        if (len == 0 || len > HILOCK_NAME_MAX) rc = HILOCK_EINVAL;
        else if ((m->name[i] = strdup(names[i])) == NULL) rc = HILOCK_ENOMEM;
        else o[i] = (ordered){name_slot(names[i]), i, m->name[i]};
    }
    if (rc == 0) qsort(o, m->n, sizeof(*o), by_order);
    for (size_t k = 0; rc == 0 && k < m->n; k++) {
        m->order[k] = o[k].idx;
        m->slot[k] = o[k].slot;
        if (k > 0 && strcmp(o[k].name, o[k - 1].name) == 0) {
            hl_set_error(&m->c->loop, "hilock_acquire_multi: a name given twice");
            rc = HILOCK_EINVAL;
        }
    }
    free(o);
    return rc;
}

int hilock_acquire_multi(hilock_client *c, const char *const names[], size_t n,
                         const hilock_acquire_opts *opts, hilock_acquire_cb cb, void *data,
                         hilock_multi **out) {
    if (out) *out = NULL;
    if (c == NULL || names == NULL || n == 0 || n > HILOCK_MULTI_MAX || cb == NULL) return HILOCK_EINVAL;
    if (hl_client_refuses(c)) return hl_client_refuses(c);
    hilock_multi *m = calloc(1, sizeof(*m));
    if (m == NULL) return HILOCK_ENOMEM;
    hl_list_init(&m->link);
    hl_list_init(&m->defer.link);
    m->defer.run = multi_run;
    m->c = c;
    m->n = n;
    hilock_acquire_opts_init(&m->opts);
    int rc = opts != NULL && hl_struct_import(&m->opts, sizeof(m->opts), opts, opts->size) != 0
                 ? HILOCK_EINVAL : multi_names(m, names);
    if (rc == 0 && m->opts.owner != NULL) {
        hl_set_error(&c->loop, "hilock_acquire_multi: no owner (a multi-lock is not reentrant)");
        rc = HILOCK_EINVAL;
    }
    m->lease_ms = m->opts.lease_ms == HILOCK_LEASE_DEFAULT ? c->cfg.default_lease_ms : m->opts.lease_ms;
    if (rc == 0 && (m->opts.wait_ms < HILOCK_WAIT_FOREVER || m->lease_ms < HILOCK_LEASE_MIN ||
                    m->lease_ms > INT32_MAX))
        rc = HILOCK_EINVAL;
    if (rc != 0) {
        multi_free(m);
        return rc;
    }
    m->group = (hl_group){multi_release, multi_extend, multi_lost};
    m->cb = cb;
    m->data = data;
    m->lost_cb = m->opts.lost_cb;
    m->lost_data = m->opts.lost_data;
    m->opts.lost_cb = part_lost;
    m->opts.lost_data = m;
    m->started_ms = hl_now_ms();
    if (m->opts.wait_ms > 0) m->deadline = m->started_ms + (uint64_t)m->opts.wait_ms;
    rc = multi_next(m);
    if (rc != 0 && rc != HILOCK_ETIMEDOUT) {
        multi_free(m);
        return rc;
    }
    hl_list_push(&c->multis, &m->link);
    if (rc == HILOCK_ETIMEDOUT) multi_end(m, rc); /* a tick ran past a wait_ms of 1: told as any */
    if (out) *out = m;
    return 0;
}

int hilock_multi_cancel(hilock_multi *m) {
    if (m == NULL || m->ended || m->delivered || m->cancelled) return HILOCK_EINVAL;
    if (m->c->loop.forked) return HILOCK_EFORK;
    m->cancelled = 1;
    if (m->wait != NULL) hl_wait_cancel(m->wait); /* else its grant is on its way: given back */
    return 0;
}
