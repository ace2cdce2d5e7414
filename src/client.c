/* The client: configuration, life cycle (new, close, free), errors. It
 * wires the layers together: a loop, a topology with its nodes, and the
 * waiter engine that the topology's subscriber side reports to. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uuid/uuid.h>
#include "core/core.h"
#include "prim/prim.h"

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
    case HILOCK_EAUTH:      return "Redis authentication failed, or its ACL refused a command";
    case HILOCK_ELOOP:      return "the event-loop adapter failed";
    case HILOCK_EDEADLINE:  return "Redis did not answer in time";
    case HILOCK_EREADONLY:  return "Redis is a read-only replica";
    case HILOCK_EOOM:       return "Redis is out of memory";
    case HILOCK_ELOADING:   return "Redis is loading its data set";
    case HILOCK_ESCRIPT:    return "a lock script failed in Redis";
    case HILOCK_EFORK:      return "the client belongs to the process that made it (fork)";
    case HILOCK_EREPLICAS:  return "fewer replicas than wait_replicas confirmed the write in time";
    case HILOCK_EEVICTION:  return "Redis may evict locks (maxmemory-policy is not noeviction)";
    case HILOCK_EPERMITS:   return "semaphore permits differ from another client's";
    case HILOCK_ETLS:       return "TLS failed, or is not built in (rediss:// needs hilock built "
                                   "against hiredis >= 1.0 with SSL: scripts/hiredis1.sh)";
    default:                return "unknown error";
    }
}

const char *hilock_version(void) { return HILOCK_VERSION; }

const char *hilock_client_errstr(const hilock_client *c) {
    return c ? c->loop.errstr : "";
}

/* Tokens only have to be unique: 64 random bits per client (from one
 * libuuid call at client creation) and a counter passed through splitmix64,
 * a bijection, so no two tokens of a client repeat. One uuid per token cost
 * six system calls each (libuuid 2.38 reseeds every time). */
static void hex16(uint64_t v, char *out) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) out[i] = hex[(v >> (60 - 4 * i)) & 15];
}

uint64_t hl_token_new(hilock_client *c) {
    uint64_t z = c->token_seq++ + c->token_salt;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void hl_token_text(const hilock_client *c, uint64_t token, char *out) {
    hex16(c->token_id, out);
    hex16(token, out + HL_CLIENT_ID_LEN);
    out[HL_TOKEN_LEN] = '\0';
}

/* The inverse of hl_token_text: the same 16 digits of the client's id,
 * then 16 lowercase hex digits (no other spelling of a number is ours). */
int hl_token_of(const hilock_client *c, const char *text, uint64_t *token) {
    char id[HL_CLIENT_ID_LEN];
    uint64_t v = 0;
    hex16(c->token_id, id);
    if (memcmp(text, id, HL_CLIENT_ID_LEN) != 0) return 0;
    for (int i = HL_CLIENT_ID_LEN; i < HL_TOKEN_LEN; i++) {
        char d = text[i];
        if (d >= '0' && d <= '9') v = v << 4 | (uint64_t)(d - '0');
        else if (d >= 'a' && d <= 'f') v = v << 4 | (uint64_t)(d - 'a' + 10);
        else return 0;
    }
    *token = v;
    return 1;
}

void hl_client_id(const hilock_client *c, char *out) {
    hex16(c->token_id, out);
}

/* ---- Configuration ---------------------------------------------------------- */

/* Copy a caller's struct of `from_size` bytes into ours of `size` bytes,
 * which holds the defaults: fields the caller does not have keep them, and
 * fields we do not know must be zero (their default), or the caller wants
 * something this library cannot do. */
int hl_struct_import(void *to, size_t size, const void *from, size_t from_size) {
    /* Not initialised, or not the size of any struct (they all end on a
     * pointer's alignment). */
    if (from_size < sizeof(size_t) || from_size % sizeof(void *) != 0) return HILOCK_EINVAL;
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
    d.wait_timeout_ms = 100;
    d.starve_ms = 100;
    d.health_ms = 3000;
    d.clock_rate_ppm = 10000;
    d.renew_batch = HL_RENEW_BATCH;
    hl_struct_export(cfg, size, &d, sizeof(d));
}

static uint32_t or_default(uint32_t v, uint32_t d) { return v ? v : d; }

/* The caller's config with defaults for what it left 0; HILOCK_EINVAL for
 * what cannot be. */
static int config_take(hilock_config *out, const hilock_config *cfg) {
    hilock_config d;
    hilock_config_init(&d);
    *out = d;
    if (cfg != NULL && hl_struct_import(out, sizeof(*out), cfg, cfg->size) != 0) return HILOCK_EINVAL;
    if (out->url == NULL) out->url = d.url;
    if (out->prefix == NULL) out->prefix = d.prefix;
    if (!hl_prefix_valid(out->prefix)) return HILOCK_EINVAL;
    if ((out->default_lease_ms != 0 && out->default_lease_ms < HILOCK_LEASE_MIN) ||
        out->default_lease_ms > INT32_MAX)
        return HILOCK_EINVAL;
    out->default_lease_ms = or_default(out->default_lease_ms, d.default_lease_ms);
    out->connect_timeout_ms = or_default(out->connect_timeout_ms, d.connect_timeout_ms);
    out->request_timeout_ms = or_default(out->request_timeout_ms, d.request_timeout_ms);
    out->linger_ms = or_default(out->linger_ms, d.linger_ms);
    out->reconnect_max_ms = or_default(out->reconnect_max_ms, d.reconnect_max_ms);
    out->fence_ttl_s = or_default(out->fence_ttl_s, d.fence_ttl_s);
    out->wait_timeout_ms = or_default(out->wait_timeout_ms, d.wait_timeout_ms);
    out->starve_ms = or_default(out->starve_ms, d.starve_ms);
    out->health_ms = or_default(out->health_ms, d.health_ms);
    out->clock_rate_ppm = or_default(out->clock_rate_ppm, d.clock_rate_ppm);
    if (out->health_ms < 100) return HILOCK_EINVAL;
    if (out->clock_rate_ppm > 100000) return HILOCK_EINVAL; /* 10 %: a broken clock */
    out->renew_batch = or_default(out->renew_batch, d.renew_batch);
    if (out->renew_batch > HL_RENEW_BATCH_MAX) return HILOCK_EINVAL;
    if (out->pubsub < HILOCK_PUBSUB_AUTO || out->pubsub > HILOCK_PUBSUB_CLASSIC) return HILOCK_EINVAL;
    if (out->wait_replicas > 64) return HILOCK_EINVAL;
    if (out->lock_delay_ms > HILOCK_LOCK_DELAY_MAX) return HILOCK_EINVAL;
    return 0;
}

int hilock_config_check(const hilock_config *cfg) {
    hilock_config given;
    int rc = config_take(&given, cfg);
    if (rc != 0) return rc;
    /* A net of its own, without a loop: the URL, then TLS's files. */
    hl_net net;
    memset(&net, 0, sizeof(net));
    rc = hl_url_parse(given.url, &net.url);
    if (rc == 0) rc = hl_tls_setup(&net, &given);
    hl_tls_free(&net);
    hl_url_free(&net.url);
    return rc;
}

static int loop_valid(const hilock_loop *l) {
    return l != NULL && l->attach && l->timer_new && l->timer_start && l->timer_stop &&
           l->timer_free && l->io_new && l->io_watch && l->io_free;
}

/* ---- Life cycle ------------------------------------------------------------- */

/* A callback of hilock_client_close(). */
typedef struct hl_closer {
    hl_link link;
    hilock_close_cb cb;
    void *data;
} hl_closer;

/* Run (once) and free every close callback; none in a forked child. */
static void closers_run(hilock_client *c) {
    while (!hl_list_empty(&c->closers)) {
        hl_closer *k = HL_CONTAINER(c->closers.next, hl_closer, link);
        hl_list_remove(&k->link);
        if (!c->loop.forked) k->cb(k->data);
        free(k);
    }
}

static void client_destroy(hl_loop *l);
static void close_run(hl_defer *d, int cancel);

static void net_setup(hilock_client *c, const hilock_config *cfg) {
    hl_net *net = &c->topo.net;
    hl_net_init(net, &c->loop);
    net->connect_timeout_ms = cfg->connect_timeout_ms;
    net->request_timeout_ms = cfg->request_timeout_ms;
    net->reconnect_max_ms = cfg->reconnect_max_ms;
    net->require_noeviction = cfg->require_noeviction;
    net->pubsub = cfg->pubsub;
    net->sharded = cfg->pubsub == HILOCK_PUBSUB_SHARDED;
    net->sharded_known = cfg->pubsub != HILOCK_PUBSUB_AUTO;
    net->wait_timeout_ms = cfg->wait_timeout_ms;
    net->health_ms = cfg->health_ms == HILOCK_HEALTH_OFF ? 0 : cfg->health_ms;
    /* A WAIT blocks its connection for up to wait_timeout_ms: not silence. */
    if (cfg->wait_replicas && net->health_ms && net->health_ms < 2 * cfg->wait_timeout_ms)
        net->health_ms = 2 * cfg->wait_timeout_ms;
    net->clock_rate_ppm = cfg->clock_rate_ppm;
    net->rng = c->token_salt | 1; /* backoff jitter; xorshift needs non-zero */
    net->idle = hl_close_progress;
    net->idle_arg = c;
}

#ifdef HILOCK_DEBUG
static void check_names(hl_loop *l) { hl_names_check(HL_CONTAINER(l, hilock_client, loop)); }
#endif

static int client_init(hilock_client *c, const hilock_config *cfg, const hilock_loop *ev) {
    uuid_t id;
    uuid_generate_random(id);
    memcpy(&c->token_id, id, 8);
    memcpy(&c->token_salt, id + 8, 8);
    c->cfg = *cfg;
    c->cfg.url = NULL; /* not kept: the caller's strings may go away */
    c->cfg.prefix = NULL;
    c->cfg.tls_ca_file = c->cfg.tls_ca_dir = NULL;
    c->cfg.tls_cert_file = c->cfg.tls_key_file = c->cfg.tls_server_name = NULL;
    c->prefix = strdup(cfg->prefix);
    c->prefix_len = strlen(cfg->prefix);
    hl_list_init(&c->holds);
    hl_list_init(&c->owners);
    hl_list_init(&c->observers);
    hl_list_init(&c->multis);
    hl_list_init(&c->closers);
    hl_list_init(&c->topo.nodes);
    c->close_defer.run = close_run;
    hl_list_init(&c->close_defer.link);
    c->loop.destroy = client_destroy;
    c->loop.log_cb = cfg->log_cb;
    c->loop.log_data = cfg->log_data;
#ifdef HILOCK_DEBUG
    c->loop.after_tick = check_names;
#endif
    net_setup(c, cfg);
    int rc = hl_url_parse(cfg->url, &c->topo.net.url);
    if (rc != 0) return rc;
    if (c->prefix == NULL) return HILOCK_ENOMEM;
    if ((rc = hl_tls_setup(&c->topo.net, cfg)) != 0) return rc;
    return hl_loop_init(&c->loop, ev);
}

/* The topology the URL names. A unix socket is one server; a TCP address
 * may be a cluster's seed. */
static int topo_start(hl_topo *t, const hl_sub_events *sub) {
    switch (t->net.url.kind) {
    case HL_URL_SENTINEL: return hl_topo_sentinel(t, sub);
    case HL_URL_REDLOCK:  return hl_topo_redlock(t, sub);
    default:              return t->net.url.path ? hl_topo_standalone(t, sub) : hl_topo_cluster(t, sub);
    }
}

void hilock_loop_init_size(hilock_loop *loop, size_t size) {
    if (loop == NULL || size < sizeof(size_t)) return;
    memset(loop, 0, size);
    loop->size = size;
}

int hilock_client_new(hilock_client **out, const hilock_config *cfg, const hilock_loop *loop) {
    hilock_config given;
    hilock_loop ev = {0};
    if (out == NULL) return HILOCK_EINVAL;
    *out = NULL;
    /* A loop not set up by hilock_loop_init(), or with a member missing. */
    if (loop == NULL || hl_struct_import(&ev, sizeof(ev), loop, loop->size) != 0 || !loop_valid(&ev))
        return HILOCK_EINVAL;
    int rc = config_take(&given, cfg);
    if (rc != 0) return rc;
    hilock_client *c = calloc(1, sizeof(*c));
    if (c == NULL) return HILOCK_ENOMEM;
    hl_sub_events sub = hl_engine_sub_events;
    sub.arg = c;
    rc = client_init(c, &given, &ev);
    if (rc == 0) rc = topo_start(&c->topo, &sub);
    if (rc != 0) {
        hl_loop_close(&c->loop);
        hl_topo_free(&c->topo);
        hl_tls_free(&c->topo.net);
        free(c->prefix);
        free(c);
        return rc;
    }
    hl_fork_watch(c);
    *out = c;
    return 0;
}

void hilock_client_free(hilock_client *c) {
    if (c == NULL || c->loop.freeing) return;
    c->loop.freeing = 1;
    /* End every request that has not had its callback, now and in order:
     * the waits still in line, the observers, then every queued callback. */
    hl_waits_cancel_all(c);
    hl_observers_end(c);
    hl_defer_cancel_all(&c->loop);
    hl_topo_cancel_queues(&c->topo);
    hl_topo_teardown(&c->topo); /* in-flight requests end here */
    hl_net_cancel_all(&c->topo.net);
    closers_run(c); /* freed while a close was under way: they still run once */
    if (!c->loop.dispatching) client_destroy(&c->loop);
}

static void client_destroy(hl_loop *l) {
    hilock_client *c = HL_CONTAINER(l, hilock_client, loop);
    hl_fork_unwatch(c);
    hl_renew_batches_free(c);
    hl_holds_free_all(c);
    hl_observers_free_all(c);
    hl_multis_free_all(c);
    hl_names_free_all(c);
    hl_loop_close(&c->loop);
    hl_topo_free(&c->topo);
    hl_tls_free(&c->topo.net);
    free(c->prefix);
    free(c);
}

/* ---- Graceful close --------------------------------------------------------- */

/* The close is complete: tell the user, then free. */
static void close_run(hl_defer *d, int cancel) {
    hilock_client *c = HL_CONTAINER(d, hilock_client, close_defer);
    closers_run(c);
    if (!cancel) hilock_client_free(c);
}

void hl_close_progress(void *client) {
    hilock_client *c = client;
    if (c->closing && c->topo.net.nreqs == 0 && !hl_linked(&c->close_defer.link))
        hl_defer_push(&c->loop, &c->close_defer);
}

int hilock_client_close(hilock_client *c, hilock_close_cb cb, void *data) {
    if (c == NULL) return HILOCK_EINVAL;
    if (c->loop.forked) return HILOCK_EFORK;
    if (c->loop.freeing) return HILOCK_ECLOSED;
    if (cb != NULL) {
        /* A callback that could not be kept would never run: say so
         * before anything starts, so the caller can free instead. */
        hl_closer *k = malloc(sizeof(*k));
        if (k == NULL) return HILOCK_ENOMEM;
        k->cb = cb;
        k->data = data;
        hl_list_push(&c->closers, &k->link);
    }
    if (c->closing) return 0; /* under way: this cb runs with the first's */
    c->closing = 1;
    hl_waits_cancel_all(c);
    hl_observers_end(c);
    hl_holds_release_all(c);
    hl_topo_close_begin(&c->topo);
    hl_close_progress(c);
    return 0;
}
