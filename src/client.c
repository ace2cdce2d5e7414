/* The client: configuration, life cycle, deferred callbacks, errors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uuid/uuid.h>
#include "internal.h"

void hl_tick(void *arg);
void hl_client_destroy(hilock_client *c);
static void close_run(hl_defer *d, int cancel);

const char *hilock_strerror(int err) {
    switch (err) {
    case HILOCK_OK:         return "success";
    case HILOCK_EINVAL:     return "invalid argument";
    case HILOCK_ENOMEM:     return "out of memory";
    case HILOCK_EURL:       return "malformed Redis URL";
    case HILOCK_ETIMEDOUT:  return "timed out waiting for the lock";
    case HILOCK_ECANCELED:  return "cancelled";
    case HILOCK_ECONN:      return "cannot reach Redis";
    case HILOCK_EREPLY:     return "Redis replied with an error";
    case HILOCK_EPROTO:     return "the server does not speak the Redis protocol";
    case HILOCK_ELOST:      return "the lock was lost";
    case HILOCK_EBUSY:      return "the lock is held by another owner";
    case HILOCK_ECLOSED:    return "the client is closing";
    case HILOCK_EAUTH:      return "Redis authentication failed";
    case HILOCK_ELOOP:      return "the event-loop adapter failed";
    case HILOCK_EDEADLINE:  return "Redis did not answer in time";
    case HILOCK_EREADONLY:  return "Redis is a read-only replica";
    case HILOCK_EOOM:       return "Redis is out of memory";
    case HILOCK_ELOADING:   return "Redis is loading its data set";
    case HILOCK_ESCRIPT:    return "a lock script failed in Redis";
    case HILOCK_EFORK:      return "the client belongs to the process that made it (fork)";
    case HILOCK_EEVICTION:  return "Redis may evict locks (maxmemory-policy is not noeviction)";
    default:                return "unknown error";
    }
}

const char *hilock_version(void) { return HILOCK_VERSION; }

void hl_set_error(hilock_client *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof(c->errstr), fmt, ap);
    va_end(ap);
}

typedef struct hl_logmsg {
    hl_defer defer;
    hilock_client *c;
    int level;
    char msg[];
} hl_logmsg;

static void log_run(hl_defer *d, int cancel) {
    hl_logmsg *m = HL_CONTAINER(d, hl_logmsg, defer);
    if (!cancel && !m->c->forked) m->c->cfg.log_cb(m->level, m->msg, m->c->cfg.log_data);
    free(m);
}

void hl_log(hilock_client *c, int level, const char *fmt, ...) {
    va_list ap;
    if (c->cfg.log_cb == NULL) return;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    hl_logmsg *m = len < 0 ? NULL : malloc(sizeof(*m) + (size_t)len + 1);
    if (m == NULL) return;
    va_start(ap, fmt);
    vsnprintf(m->msg, (size_t)len + 1, fmt, ap);
    va_end(ap);
    m->level = level;
    m->c = c;
    m->defer.run = log_run;
    hl_defer_push(c, &m->defer);
}

void hl_warn_eviction(hilock_client *c, const char *policy, const char *why) {
    const char *seen = *policy ? policy : "?";
    if (strcmp(seen, c->policy_warned) == 0) return;
    snprintf(c->policy_warned, sizeof(c->policy_warned), "%s", seen);
    if (*policy)
        hl_log(c, HILOCK_LOG_WARNING,
               "Redis has maxmemory-policy %s: it may evict a held lock (then two clients hold "
               "it) or a fence key; set maxmemory-policy noeviction", policy);
    else
        hl_log(c, HILOCK_LOG_WARNING,
               "cannot read maxmemory-policy from INFO memory (%s): whether Redis may evict "
               "locks is unknown", why);
}

const char *hilock_client_errstr(const hilock_client *c) {
    return c ? c->errstr : "";
}

/* Copy a caller's struct of `from_size` bytes into ours of `size` bytes,
 * which holds the defaults: fields the caller does not have keep them, and
 * fields we do not know must be zero (their default), or the caller wants
 * something this library cannot do. */
int hl_struct_import(void *to, size_t size, const void *from, size_t from_size) {
    if (from_size < sizeof(size_t)) return HILOCK_EINVAL; /* not initialised */
    for (size_t i = size; i < from_size; i++)
        if (((const unsigned char *)from)[i] != 0) return HILOCK_EINVAL;
    memcpy((char *)to + sizeof(size_t), (const char *)from + sizeof(size_t),
           (from_size < size ? from_size : size) - sizeof(size_t));
    return 0;
}

/* Write the defaults `d` into the caller's struct of `size` bytes. */
void hl_struct_export(void *to, size_t size, const void *d, size_t dsize) {
    memcpy(to, d, size < dsize ? size : dsize);
    /* A caller built against a newer header has fields we do not know. */
    if (size > dsize) memset((char *)to + dsize, 0, size - dsize);
}

void hilock_config_init_size(hilock_config *cfg, size_t size) {
    hilock_config d;
    if (cfg == NULL || size < sizeof(size_t)) return;
    memset(&d, 0, sizeof(d));
    d.size = size;
    d.url = "redis://127.0.0.1:6379";
    d.prefix = "hilock:";
    d.default_lease_ms = 30000;
    d.connect_timeout_ms = 2000;
    d.request_timeout_ms = 2000;
    d.linger_ms = 1000;
    d.reconnect_max_ms = 1000;
    d.fence_ttl_s = 7 * 24 * 3600;
    hl_struct_export(cfg, size, &d, sizeof(d));
}

static uint32_t or_default(uint32_t v, uint32_t d) { return v ? v : d; }

int hilock_client_new(hilock_client **out, const hilock_config *cfg, const hilock_loop *loop) {
    hilock_config defaults, given;
    if (out == NULL) return HILOCK_EINVAL;
    *out = NULL;
    if (loop == NULL || loop->attach == NULL || loop->timer_new == NULL ||
        loop->timer_start == NULL || loop->timer_stop == NULL || loop->timer_free == NULL)
        return HILOCK_EINVAL;
    hilock_config_init(&defaults);
    given = defaults;
    if (cfg != NULL && hl_struct_import(&given, sizeof(given), cfg, cfg->size) != 0)
        return HILOCK_EINVAL;
    cfg = &given;
    const char *prefix = cfg->prefix ? cfg->prefix : defaults.prefix;
    if (!hl_prefix_valid(prefix)) return HILOCK_EINVAL;
    if ((cfg->default_lease_ms != 0 && cfg->default_lease_ms < HILOCK_LEASE_MIN) ||
        cfg->default_lease_ms > INT32_MAX)
        return HILOCK_EINVAL;

    hilock_client *c = calloc(1, sizeof(*c));
    if (c == NULL) return HILOCK_ENOMEM;
    int rc = hl_url_parse(cfg->url, &c->url);
    if (rc != 0) { free(c); return rc; }
    c->cfg = *cfg;
    c->cfg.url = NULL; /* not kept: the caller's string may go away */
    c->cfg.prefix = NULL;
    c->cfg.default_lease_ms = or_default(cfg->default_lease_ms, defaults.default_lease_ms);
    c->cfg.connect_timeout_ms = or_default(cfg->connect_timeout_ms, defaults.connect_timeout_ms);
    c->cfg.request_timeout_ms = or_default(cfg->request_timeout_ms, defaults.request_timeout_ms);
    c->cfg.linger_ms = or_default(cfg->linger_ms, defaults.linger_ms);
    c->cfg.reconnect_max_ms = or_default(cfg->reconnect_max_ms, defaults.reconnect_max_ms);
    c->cfg.fence_ttl_s = or_default(cfg->fence_ttl_s, defaults.fence_ttl_s);
    c->prefix = strdup(prefix);
    c->prefix_len = strlen(prefix);
    c->loop = *loop;
    c->armed_at = UINT64_MAX;
    uuid_t id;
    uuid_generate_random(id);
    memcpy(&c->token_id, id, 8);
    memcpy(&c->token_salt, id + 8, 8);
    c->rng = c->token_salt | 1; /* backoff jitter; xorshift needs non-zero */
    hl_list_init(&c->defers);
    hl_list_init(&c->holds);
    hl_list_init(&c->owners);
    hl_list_init(&c->reqs);
    c->close_defer.run = close_run;
    hl_list_init(&c->close_defer.link);
    c->ltimer = c->prefix ? loop->timer_new(loop->data, hl_tick, c) : NULL;
    if (c->ltimer == NULL) {
        rc = c->prefix ? HILOCK_ELOOP : HILOCK_ENOMEM;
        hl_url_free(&c->url);
        free(c->prefix);
        free(c);
        return rc;
    }
    hl_conn_init(c, &c->cmd, 0);
    hl_conn_init(c, &c->sub, 1);
    hl_fork_watch(c);
    hl_conn_connect(&c->cmd);
    hl_conn_connect(&c->sub);
    *out = c;
    return 0;
}

/* ---- Deferred callbacks ------------------------------------------------ */

/* The close is complete: tell the user, then free. */
static void close_run(hl_defer *d, int cancel) {
    hilock_client *c = HL_CONTAINER(d, hilock_client, close_defer);
    hilock_close_cb cb = c->close_cb;
    c->close_cb = NULL;
    if (cb && !c->forked) cb(c->close_data);
    if (!cancel) hilock_client_free(c);
}

/* ---- Teardown ------------------------------------------------------------ */

/* Give every wait still in line its HILOCK_ECANCELED (deferred). */
static void cancel_waits(hilock_client *c) {
    for (size_t i = 0; i < c->nbuckets; i++) {
        hl_name *n = c->buckets[i], *next;
        for (; n; n = next) {
            n->refs++; /* keep it while its waiters leave */
            while (n->nwaiters > 0)
                hl_wait_finish(HL_CONTAINER(n->waiters.next, hilock_wait, link),
                               HILOCK_ECANCELED, NULL);
            next = n->next_in_bucket;
            hl_name_unref(n);
        }
    }
}

void hilock_client_free(hilock_client *c) {
    if (c == NULL || c->freeing) return;
    c->freeing = 1;
    /* End every request that has not had its callback, now and in order:
     * queued callbacks first, then the waits still in line. */
    cancel_waits(c);
    while (!hl_list_empty(&c->defers)) {
        hl_defer *d = HL_CONTAINER(c->defers.next, hl_defer, link);
        hl_list_remove(&d->link);
        d->run(d, 1);
    }
    hl_conn_cancel_queue(&c->cmd);
    hl_conn_cancel_queue(&c->sub);
    hl_conn_teardown(&c->cmd); /* in-flight requests end here */
    hl_conn_teardown(&c->sub);
    hl_reqs_cancel_all(c);
    if (c->close_cb != NULL && !c->forked) {
        /* Freed while a close was under way: its callback still runs once. */
        hilock_close_cb cb = c->close_cb;
        c->close_cb = NULL;
        cb(c->close_data);
    }
    if (!c->dispatching) hl_client_destroy(c);
}

void hl_client_destroy(hilock_client *c) {
    hl_fork_unwatch(c);
    while (!hl_list_empty(&c->holds)) {
        hilock_hold *h = HL_CONTAINER(c->holds.next, hilock_hold, link);
        hl_list_remove(&h->link);
        free(h);
    }
    while (!hl_list_empty(&c->owners)) {
        hilock_owner *o = HL_CONTAINER(c->owners.next, hilock_owner, link);
        hl_list_remove(&o->link);
        free(o);
    }
    hl_names_free_all(c);
    c->loop.timer_free(c->ltimer);
    free(c->heap);
    hl_url_free(&c->url);
    free(c->prefix);
    free(c);
}

/* ---- Graceful close ------------------------------------------------------ */

void hl_close_progress(hilock_client *c) {
    if (c->nreqs == 0 && !hl_linked(&c->close_defer.link)) hl_defer_push(c, &c->close_defer);
}

void hilock_client_close(hilock_client *c, hilock_close_cb cb, void *data) {
    if (c == NULL || hl_client_refuses(c)) return;
    c->closing = 1;
    c->close_cb = cb;
    c->close_data = data;
    cancel_waits(c);
    for (hl_link *l = c->holds.next; l != &c->holds; l = l->next) {
        hilock_hold *h = HL_CONTAINER(l, hilock_hold, link);
        if (h->releasing) continue;
        hl_hold_begin_release(h);
        hl_release_token(c, h->name, h->token, 0);
    }
    if (c->cmd.state != HL_CONN_READY && c->cmd.failures > 0)
        hl_conn_cancel_queue(&c->cmd); /* the server is away: do not wait for it */
    hl_close_progress(c);
}
