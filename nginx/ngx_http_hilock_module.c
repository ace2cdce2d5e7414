/* ngx_http_hilock_module: hold a hilock distributed lock while a request is
 * served.
 *
 *   hilock_redis URL [timeout=TIME] [fence_ttl=TIME];  http, server: where the locks live
 *   hilock NAME [wait=TIME] [lease=TIME];  http, server, location (or "off")
 *   hilock_timeout_status CODE;            default 503
 *   hilock_error_status CODE;              default 503
 *   hilock_fail_open on|off;               default off
 *   $hilock_status  acquired, timeout, error, off
 *   $hilock_fence   the lock's fencing token (empty without a lock)
 *   $hilock_wait_ms how long the request waited for the lock
 *
 * One hilock client per hilock_redis URL in each worker process, made at
 * worker start on nginx's own event loop (<hilock/adapters/nginx.h>) and
 * freed at worker exit. The lock is taken in the precontent phase (after
 * access checks, before try_files and the content handler), by the main
 * request only; the request waits without blocking the worker, and the lock
 * is released from a cleanup of the request's pool, that is when the
 * request ends, whichever way it ends (served, client gone while waiting or
 * being served, internal redirects). After an internal redirect the lock
 * already taken (or the outcome of its wait) stays the request's: no
 * second lock is taken. */
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include <hilock/adapters/nginx.h>

#define NGX_HTTP_HILOCK_WAIT_DEFAULT 10000   /* ms */

/* One hilock_redis: a client per worker each. */
typedef struct {
    ngx_str_t url;                    /* NUL-terminated */
    ngx_msec_t timeout;               /* connect and request timeout; 0: hilock's */
    ngx_msec_t fence_ttl;             /* s; 0: hilock's (7 days) */
} ngx_http_hilock_redis_t;

typedef struct {
    ngx_array_t urls;                 /* ngx_http_hilock_redis_t */
} ngx_http_hilock_main_conf_t;

typedef struct {
    ngx_int_t redis;                  /* index into urls, -1: none */
} ngx_http_hilock_srv_conf_t;

typedef struct {
    ngx_http_complex_value_t *name;   /* NULL: off */
    ngx_msec_t wait;                  /* NGX_CONF_UNSET_MSEC with name: default */
    ngx_msec_t lease;                 /* 0: the client's default */
    ngx_uint_t timeout_status;
    ngx_uint_t error_status;
    ngx_flag_t fail_open;
} ngx_http_hilock_loc_conf_t;

enum {
    NGX_HTTP_HILOCK_WAITING = 1,
    NGX_HTTP_HILOCK_ACQUIRED,
    NGX_HTTP_HILOCK_TIMEOUT,
    NGX_HTTP_HILOCK_ERROR
};

typedef struct ngx_http_hilock_op_s ngx_http_hilock_op_t;

/* The request's lock; lives in a cleanup of the main request's pool. */
typedef struct {
    ngx_http_request_t *r;
    ngx_uint_t state;
    ngx_uint_t answered;              /* timeout/error status returned once */
    ngx_uint_t bad_name;              /* NAME unusable: never fail open */
    ngx_http_hilock_op_t *op;         /* the pending wait */
    hilock_hold *hold;
    uint64_t fence;
    ngx_msec_t start;
    ngx_msec_t waited;
} ngx_http_hilock_ctx_t;

/* A wait: malloc'd, as its callback may run after the request is gone. */
struct ngx_http_hilock_op_s {
    ngx_http_hilock_ctx_t *ctx;       /* NULL: the request is gone */
    hilock_wait *wait;
};

/* Per worker. */
static hilock_client **ngx_http_hilock_clients;
static ngx_uint_t ngx_http_hilock_nclients;
static ngx_uint_t ngx_http_hilock_exiting;
/* What needs the clients: waits in flight, holds of live requests and
 * releases in flight. While any is, and while clients are closing, a
 * non-cancelable timer stays armed, so that a worker that is shutting down
 * serves its waiting requests, releases, and closes its clients before it
 * exits. */
static ngx_int_t ngx_http_hilock_busy;
static ngx_uint_t ngx_http_hilock_draining;  /* a graceful shutdown began */
static ngx_uint_t ngx_http_hilock_closing;   /* clients whose close is under way */
static ngx_event_t ngx_http_hilock_guard;

static ngx_int_t ngx_http_hilock_preconf(ngx_conf_t *cf);
static ngx_int_t ngx_http_hilock_init(ngx_conf_t *cf);
static void *ngx_http_hilock_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_hilock_create_srv_conf(ngx_conf_t *cf);
static char *ngx_http_hilock_merge_srv_conf(ngx_conf_t *cf, void *parent, void *child);
static void *ngx_http_hilock_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_hilock_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child);
static char *ngx_http_hilock_redis(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_hilock(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_hilock_init_process(ngx_cycle_t *cycle);
static void ngx_http_hilock_exit_process(ngx_cycle_t *cycle);

static ngx_conf_num_bounds_t ngx_http_hilock_status_bounds = {
    ngx_conf_check_num_bounds, 400, 599
};

static ngx_command_t ngx_http_hilock_commands[] = {
    { ngx_string("hilock_redis"),
      NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_CONF_TAKE123,
      ngx_http_hilock_redis,
      NGX_HTTP_SRV_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("hilock"),
      NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE123,
      ngx_http_hilock,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("hilock_timeout_status"),
      NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_hilock_loc_conf_t, timeout_status),
      &ngx_http_hilock_status_bounds },

    { ngx_string("hilock_error_status"),
      NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_hilock_loc_conf_t, error_status),
      &ngx_http_hilock_status_bounds },

    { ngx_string("hilock_fail_open"),
      NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_hilock_loc_conf_t, fail_open),
      NULL },

    ngx_null_command
};

static ngx_http_module_t ngx_http_hilock_module_ctx = {
    ngx_http_hilock_preconf,            /* preconfiguration */
    ngx_http_hilock_init,               /* postconfiguration */
    ngx_http_hilock_create_main_conf,   /* create main configuration */
    NULL,                               /* init main configuration */
    ngx_http_hilock_create_srv_conf,    /* create server configuration */
    ngx_http_hilock_merge_srv_conf,     /* merge server configuration */
    ngx_http_hilock_create_loc_conf,    /* create location configuration */
    ngx_http_hilock_merge_loc_conf      /* merge location configuration */
};

ngx_module_t ngx_http_hilock_module = {
    NGX_MODULE_V1,
    &ngx_http_hilock_module_ctx,        /* module context */
    ngx_http_hilock_commands,           /* module directives */
    NGX_HTTP_MODULE,                    /* module type */
    NULL,                               /* init master */
    NULL,                               /* init module */
    ngx_http_hilock_init_process,       /* init process */
    NULL,                               /* init thread */
    NULL,                               /* exit thread */
    ngx_http_hilock_exit_process,       /* exit process */
    NULL,                               /* exit master */
    NGX_MODULE_V1_PADDING
};

/* ---- The busy guard ------------------------------------------------------ */

static ngx_uint_t ngx_http_hilock_needed(void) {
    return (ngx_http_hilock_busy > 0 || ngx_http_hilock_closing > 0) && !ngx_http_hilock_exiting;
}

static void ngx_http_hilock_guard_handler(ngx_event_t *ev) {
    if (ngx_http_hilock_needed()) ngx_add_timer(ev, 1000);
}

/* Keep the guard armed exactly while the clients are needed. */
static void ngx_http_hilock_guard_sync(void) {
    if (ngx_http_hilock_needed() && !ngx_http_hilock_guard.timer_set)
        ngx_add_timer(&ngx_http_hilock_guard, 1000);
    if (!ngx_http_hilock_needed() && ngx_http_hilock_guard.timer_set)
        ngx_del_timer(&ngx_http_hilock_guard);
}

static void ngx_http_hilock_closed(void *data) {
    *(hilock_client **)data = NULL;     /* hilock freed it */
    ngx_http_hilock_closing--;
    ngx_http_hilock_guard_sync();
}

/* Shutting down and nothing needs the clients any more: close them
 * gracefully. Tries still in flight (of waits that were cancelled or ran
 * out) get their replies, and what they won is released. */
static void ngx_http_hilock_close_if_done(void) {
    ngx_uint_t i;
    if (!ngx_http_hilock_draining || ngx_http_hilock_busy > 0 || ngx_http_hilock_exiting) return;
    ngx_http_hilock_draining = 0;
    for (i = 0; i < ngx_http_hilock_nclients; i++) {
        if (ngx_http_hilock_clients[i] == NULL) continue;
        ngx_http_hilock_closing++;
        hilock_client_close(ngx_http_hilock_clients[i], ngx_http_hilock_closed, &ngx_http_hilock_clients[i]);
    }
    ngx_http_hilock_guard_sync();
}

static void ngx_http_hilock_shutdown(void *arg) {
    (void)arg;
    ngx_http_hilock_draining = 1;
    ngx_http_hilock_close_if_done();
}

static void ngx_http_hilock_busy_inc(void) {
    ngx_http_hilock_busy++;
    ngx_http_hilock_guard_sync();
}

static void ngx_http_hilock_busy_dec(void) {
    ngx_http_hilock_busy--;
    ngx_http_hilock_guard_sync();
    ngx_http_hilock_close_if_done();
}

/* ---- Requests ------------------------------------------------------------ */

static void ngx_http_hilock_cleanup(void *data);

/* The request's ctx, also after an internal redirect wiped module ctxs. */
static ngx_http_hilock_ctx_t *ngx_http_hilock_get_ctx(ngx_http_request_t *r) {
    ngx_http_hilock_ctx_t *ctx;
    ngx_pool_cleanup_t *cln;
    r = r->main;
    ctx = ngx_http_get_module_ctx(r, ngx_http_hilock_module);
    if (ctx != NULL) return ctx;
    for (cln = r->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_hilock_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(r, ctx, ngx_http_hilock_module);
            return ctx;
        }
    }
    return NULL;
}

static void ngx_http_hilock_released(int status, void *data) {
    (void)data;
    if (status != 0 && status != HILOCK_ECANCELED) {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0, "hilock: release: %s",
                      hilock_strerror(status));
    }
    ngx_http_hilock_busy_dec();
}

static void ngx_http_hilock_release(hilock_hold *hold) {
    int rc;
    if (ngx_http_hilock_exiting) return;      /* the client is gone */
    ngx_http_hilock_busy_inc();
    rc = hilock_release(hold, ngx_http_hilock_released, NULL);
    if (rc != 0) {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0, "hilock: release: %s",
                      hilock_strerror(rc));
        ngx_http_hilock_busy_dec();
    }
}

static void ngx_http_hilock_lost(hilock_hold *hold, int why, void *data) {
    (void)data;
    ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                  "hilock: the lock \"%s\" was lost while its request was served: %s",
                  hilock_hold_name(hold), hilock_strerror(why));
}

/* The request's pool goes: end its wait, release its lock. */
static void ngx_http_hilock_cleanup(void *data) {
    ngx_http_hilock_ctx_t *ctx = data;
    if (ctx->op != NULL) {
        ctx->op->ctx = NULL;
        /* EINVAL: the outcome is queued; its callback releases a grant. */
        if (!ngx_http_hilock_exiting) (void)hilock_wait_cancel(ctx->op->wait);
        ctx->op = NULL;
    }
    if (ctx->hold != NULL) {
        hilock_hold *h = ctx->hold;
        ctx->hold = NULL;
        ngx_http_hilock_release(h);
        ngx_http_hilock_busy_dec();     /* the hold's */
    }
}

static void ngx_http_hilock_acquired(hilock_hold *hold, int status, void *data) {
    ngx_http_hilock_op_t *op = data;
    ngx_http_hilock_ctx_t *ctx = op->ctx;
    ngx_http_request_t *r;

    free(op);
    if (ctx == NULL || ngx_http_hilock_exiting) {
        /* The request is gone (or the worker is): a grant goes back. */
        if (hold != NULL && !ngx_http_hilock_exiting) ngx_http_hilock_release(hold);
        ngx_http_hilock_busy_dec();     /* the wait's */
        return;
    }
    if (hold != NULL) ngx_http_hilock_busy_inc();   /* the hold's, until the cleanup */
    ngx_http_hilock_busy_dec();         /* the wait's */
    ctx->op = NULL;
    r = ctx->r;
    if (hold != NULL) {
        ctx->state = NGX_HTTP_HILOCK_ACQUIRED;
        ctx->hold = hold;
        ctx->fence = hilock_hold_fence(hold);
        ctx->waited = (ngx_msec_t)hilock_hold_waited_ms(hold);
    } else {
        ctx->waited = ngx_current_msec - ctx->start;
        if (status == HILOCK_ETIMEDOUT || status == HILOCK_EBUSY) {
            ctx->state = NGX_HTTP_HILOCK_TIMEOUT;
        } else {
            ctx->state = NGX_HTTP_HILOCK_ERROR;
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0, "hilock: acquire: %s",
                          hilock_strerror(status));
        }
    }
    /* Resume the phases on the next turn, out of hilock's callback. */
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_post_event(r->connection->write, &ngx_posted_events);
}

static ngx_int_t ngx_http_hilock_outcome(ngx_http_request_t *r, ngx_http_hilock_ctx_t *ctx) {
    ngx_http_hilock_loc_conf_t *lcf = ngx_http_get_module_loc_conf(r, ngx_http_hilock_module);
    switch (ctx->state) {
    case NGX_HTTP_HILOCK_WAITING:
        return NGX_AGAIN;
    case NGX_HTTP_HILOCK_TIMEOUT:
        if (ctx->answered) return NGX_DECLINED;
        ctx->answered = 1;
        return lcf->timeout_status;
    case NGX_HTTP_HILOCK_ERROR:
        /* fail_open is for a Redis that fails, not for a NAME that no lock
         * can have: a client that stretches $arg_id past HILOCK_NAME_MAX
         * would be served unlocked, as often as it likes. */
        if (ctx->answered || (lcf->fail_open && !ctx->bad_name)) return NGX_DECLINED;
        ctx->answered = 1;
        return lcf->error_status;
    default:
        return NGX_DECLINED;
    }
}

static ngx_int_t ngx_http_hilock_handler(ngx_http_request_t *r) {
    ngx_http_hilock_loc_conf_t *lcf;
    ngx_http_hilock_srv_conf_t *scf;
    ngx_http_hilock_ctx_t *ctx;
    ngx_http_hilock_op_t *op;
    ngx_pool_cleanup_t *cln;
    hilock_client *client = NULL;
    hilock_acquire_opts opts;
    ngx_str_t name;
    char *cname;
    int rc;

    if (r != r->main) return NGX_DECLINED;
    ctx = ngx_http_hilock_get_ctx(r);
    if (ctx != NULL) return ngx_http_hilock_outcome(r, ctx);

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_hilock_module);
    if (lcf->name == NULL) return NGX_DECLINED;
    if (ngx_http_complex_value(r, lcf->name, &name) != NGX_OK) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    if (name.len == 0) return NGX_DECLINED;          /* no lock: "off" */

    cln = ngx_pool_cleanup_add(r->pool, sizeof(ngx_http_hilock_ctx_t));
    if (cln == NULL) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    ctx = cln->data;
    ngx_memzero(ctx, sizeof(*ctx));
    ctx->r = r;
    ctx->start = ngx_current_msec;
    cln->handler = ngx_http_hilock_cleanup;
    ngx_http_set_ctx(r, ctx, ngx_http_hilock_module);

    ctx->state = NGX_HTTP_HILOCK_ERROR;
    scf = ngx_http_get_module_srv_conf(r, ngx_http_hilock_module);
    if (scf->redis >= 0 && (ngx_uint_t)scf->redis < ngx_http_hilock_nclients)
        client = ngx_http_hilock_clients[scf->redis];
    if (client == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "hilock: no Redis for this server (hilock_redis)");
        return ngx_http_hilock_outcome(r, ctx);
    }
    if (name.len > HILOCK_NAME_MAX || ngx_strlchr(name.data, name.data + name.len, '\0') != NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "hilock: bad lock name \"%V\"", &name);
        ctx->bad_name = 1;
        return ngx_http_hilock_outcome(r, ctx);
    }
    cname = ngx_pnalloc(r->pool, name.len + 1);
    if (cname == NULL) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    ngx_memcpy(cname, name.data, name.len);
    cname[name.len] = '\0';

    op = calloc(1, sizeof(*op));
    if (op == NULL) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    op->ctx = ctx;
    hilock_acquire_opts_init(&opts);
    opts.wait_ms = (int64_t)lcf->wait;
    if (lcf->lease) opts.lease_ms = (uint32_t)lcf->lease;
    opts.lost_cb = ngx_http_hilock_lost;
    rc = hilock_acquire(client, cname, &opts, ngx_http_hilock_acquired, op, &op->wait);
    if (rc != 0) {
        free(op);
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0, "hilock: acquire \"%s\": %s",
                      cname, hilock_strerror(rc));
        return ngx_http_hilock_outcome(r, ctx);
    }
    ngx_http_hilock_busy_inc();
    ctx->op = op;
    ctx->state = NGX_HTTP_HILOCK_WAITING;
    /* Wait: notice a client that goes away meanwhile (as limit_req does). */
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;
    return NGX_AGAIN;
}

/* ---- Variables ----------------------------------------------------------- */

static ngx_int_t ngx_http_hilock_status_var(ngx_http_request_t *r, ngx_http_variable_value_t *v,
                                            uintptr_t data) {
    static const char *names[] = { "off", "waiting", "acquired", "timeout", "error" };
    ngx_http_hilock_ctx_t *ctx = ngx_http_hilock_get_ctx(r);
    const char *s = names[ctx != NULL ? ctx->state : 0];
    (void)data;
    v->data = (u_char *)s;
    v->len = ngx_strlen(s);
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    return NGX_OK;
}

static ngx_int_t ngx_http_hilock_num_var(ngx_http_request_t *r, ngx_http_variable_value_t *v,
                                         uintptr_t data) {
    ngx_http_hilock_ctx_t *ctx = ngx_http_hilock_get_ctx(r);
    uint64_t n;
    u_char *p;
    if (ctx == NULL || ctx->state == NGX_HTTP_HILOCK_WAITING ||
        (data == 0 && ctx->state != NGX_HTTP_HILOCK_ACQUIRED)) {
        v->not_found = 1;
        return NGX_OK;
    }
    n = data == 0 ? ctx->fence : (uint64_t)ctx->waited;
    p = ngx_pnalloc(r->pool, NGX_INT64_LEN);
    if (p == NULL) return NGX_ERROR;
    v->len = ngx_sprintf(p, "%uL", (unsigned long long)n) - p;
    v->data = p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    return NGX_OK;
}

static ngx_http_variable_t ngx_http_hilock_vars[] = {
    { ngx_string("hilock_status"), NULL, ngx_http_hilock_status_var, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },
    { ngx_string("hilock_fence"), NULL, ngx_http_hilock_num_var, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },
    { ngx_string("hilock_wait_ms"), NULL, ngx_http_hilock_num_var, 1,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },
    ngx_http_null_variable
};

static ngx_int_t ngx_http_hilock_preconf(ngx_conf_t *cf) {
    ngx_http_variable_t *var, *v;
    for (v = ngx_http_hilock_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) return NGX_ERROR;
        var->get_handler = v->get_handler;
        var->data = v->data;
    }
    return NGX_OK;
}

static ngx_int_t ngx_http_hilock_init(ngx_conf_t *cf) {
    ngx_http_core_main_conf_t *cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
    ngx_http_handler_pt *h = ngx_array_push(&cmcf->phases[NGX_HTTP_PRECONTENT_PHASE].handlers);
    if (h == NULL) return NGX_ERROR;
    *h = ngx_http_hilock_handler;
    return NGX_OK;
}

/* ---- Configuration ------------------------------------------------------- */

static void *ngx_http_hilock_create_main_conf(ngx_conf_t *cf) {
    ngx_http_hilock_main_conf_t *mcf = ngx_pcalloc(cf->pool, sizeof(*mcf));
    if (mcf == NULL) return NULL;
    if (ngx_array_init(&mcf->urls, cf->pool, 2, sizeof(ngx_http_hilock_redis_t)) != NGX_OK) return NULL;
    return mcf;
}

static void *ngx_http_hilock_create_srv_conf(ngx_conf_t *cf) {
    ngx_http_hilock_srv_conf_t *scf = ngx_pcalloc(cf->pool, sizeof(*scf));
    if (scf == NULL) return NULL;
    scf->redis = NGX_CONF_UNSET;
    return scf;
}

static char *ngx_http_hilock_merge_srv_conf(ngx_conf_t *cf, void *parent, void *child) {
    ngx_http_hilock_srv_conf_t *prev = parent, *conf = child;
    (void)cf;
    ngx_conf_merge_value(conf->redis, prev->redis, -1);
    return NGX_CONF_OK;
}

static void *ngx_http_hilock_create_loc_conf(ngx_conf_t *cf) {
    ngx_http_hilock_loc_conf_t *lcf = ngx_pcalloc(cf->pool, sizeof(*lcf));
    if (lcf == NULL) return NULL;
    lcf->name = NGX_CONF_UNSET_PTR;
    lcf->wait = NGX_CONF_UNSET_MSEC;
    lcf->lease = NGX_CONF_UNSET_MSEC;
    lcf->timeout_status = NGX_CONF_UNSET_UINT;
    lcf->error_status = NGX_CONF_UNSET_UINT;
    lcf->fail_open = NGX_CONF_UNSET;
    return lcf;
}

static char *ngx_http_hilock_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child) {
    ngx_http_hilock_loc_conf_t *prev = parent, *conf = child;
    ngx_http_hilock_srv_conf_t *scf;
    /* NAME, wait= and lease= come together. */
    if (conf->name == NGX_CONF_UNSET_PTR) {
        conf->name = prev->name == NGX_CONF_UNSET_PTR ? NULL : prev->name;
        conf->wait = prev->wait;
        conf->lease = prev->lease;
    }
    /* Locations are merged after their server (whose conf cf->ctx holds):
     * a lock with nowhere to live fails `nginx -t`, not every request. */
    scf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_hilock_module);
    if (conf->name != NULL && scf->redis < 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"hilock\" needs \"hilock_redis\" in its server or in http");
        return NGX_CONF_ERROR;
    }
    if (conf->wait == NGX_CONF_UNSET_MSEC) conf->wait = NGX_HTTP_HILOCK_WAIT_DEFAULT;
    if (conf->lease == NGX_CONF_UNSET_MSEC) conf->lease = 0;
    ngx_conf_merge_uint_value(conf->timeout_status, prev->timeout_status,
                              NGX_HTTP_SERVICE_UNAVAILABLE);
    ngx_conf_merge_uint_value(conf->error_status, prev->error_status,
                              NGX_HTTP_SERVICE_UNAVAILABLE);
    ngx_conf_merge_value(conf->fail_open, prev->fail_open, 0);
    return NGX_CONF_OK;
}

/* A malformed URL fails `nginx -t`, not the first request. */
static ngx_int_t ngx_http_hilock_url_check(ngx_conf_t *cf, ngx_str_t *url) {
    hilock_config cfg;
    int rc;
    u_char *s = ngx_pnalloc(cf->pool, url->len + 1);
    if (s == NULL) return NGX_ERROR;
    ngx_memcpy(s, url->data, url->len);
    s[url->len] = '\0';
    hilock_config_init(&cfg);
    cfg.url = (const char *)s;
    rc = hilock_config_check(&cfg);
    if (rc == 0) return NGX_OK;
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "hilock_redis \"%V\": %s", url, hilock_strerror(rc));
    return NGX_ERROR;
}

/* A parameter "KEY=TIME" (ms; `min` the least allowed): NGX_OK with *out
 * set, NGX_DECLINED when the parameter is not KEY=, NGX_ERROR (said) when
 * its time is bad. */
static ngx_int_t ngx_http_hilock_param(ngx_conf_t *cf, ngx_str_t *v, const char *key, ngx_msec_t min,
                                       ngx_msec_t *out) {
    size_t klen = ngx_strlen(key);
    ngx_str_t t;
    ngx_msec_t ms;
    if (v->len < klen || ngx_strncmp(v->data, key, klen) != 0) return NGX_DECLINED;
    t.data = v->data + klen;
    t.len = v->len - klen;
    ms = ngx_parse_time(&t, 0);
    if (ms == (ngx_msec_t)NGX_ERROR || ms < min || ms > (ngx_msec_t)NGX_MAX_INT32_VALUE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid time \"%V\" (at least %Mms)", v, min);
        return NGX_ERROR;
    }
    *out = ms;
    return NGX_OK;
}

/* Each parameter of cf->args from `first` on must be one of keys[] (with
 * its least value in mins[]); its value goes to outs[]. */
static char *ngx_http_hilock_params(ngx_conf_t *cf, ngx_uint_t first, const char *const *keys,
                                    const ngx_msec_t *mins, ngx_msec_t *outs, ngx_uint_t nkeys) {
    ngx_str_t *value = cf->args->elts;
    ngx_uint_t i, k;
    ngx_int_t rc = NGX_DECLINED;
    for (i = first; i < cf->args->nelts; i++) {
        for (k = 0, rc = NGX_DECLINED; k < nkeys && rc == NGX_DECLINED; k++)
            rc = ngx_http_hilock_param(cf, &value[i], keys[k], mins[k], &outs[k]);
        if (rc == NGX_ERROR) return NGX_CONF_ERROR;
        if (rc == NGX_DECLINED) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid parameter \"%V\"", &value[i]);
            return NGX_CONF_ERROR;
        }
    }
    return NGX_CONF_OK;
}

static char *ngx_http_hilock_redis(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    static const char *const keys[] = {"timeout=", "fence_ttl="};
    static const ngx_msec_t mins[] = {1, 1000};
    ngx_http_hilock_srv_conf_t *scf = conf;
    ngx_http_hilock_main_conf_t *mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_hilock_module);
    ngx_str_t *value = cf->args->elts;
    ngx_http_hilock_redis_t *have, *u;
    ngx_msec_t given[2] = {0, 0};
    ngx_uint_t i;
    (void)cmd;
    if (scf->redis != NGX_CONF_UNSET) return "is duplicate";
    if (value[1].len == 0) return "needs a URL";
    if (ngx_http_hilock_url_check(cf, &value[1]) != NGX_OK) return NGX_CONF_ERROR;
    if (ngx_http_hilock_params(cf, 2, keys, mins, given, 2) != NGX_CONF_OK) return NGX_CONF_ERROR;
    /* Servers that name the same Redis the same way share a client. */
    have = mcf->urls.elts;
    for (i = 0; i < mcf->urls.nelts; i++) {
        if (have[i].url.len == value[1].len && have[i].timeout == given[0] &&
            have[i].fence_ttl == given[1] / 1000 &&
            ngx_strncmp(have[i].url.data, value[1].data, value[1].len) == 0) {
            scf->redis = (ngx_int_t)i;
            return NGX_CONF_OK;
        }
    }
    u = ngx_array_push(&mcf->urls);
    if (u == NULL) return NGX_CONF_ERROR;
    u->timeout = given[0];
    u->fence_ttl = given[1] / 1000;
    u->url.len = value[1].len;
    u->url.data = ngx_pnalloc(cf->pool, value[1].len + 1);
    if (u->url.data == NULL) return NGX_CONF_ERROR;
    ngx_memcpy(u->url.data, value[1].data, value[1].len);
    u->url.data[u->url.len] = '\0';
    scf->redis = (ngx_int_t)(mcf->urls.nelts - 1);
    return NGX_CONF_OK;
}

static char *ngx_http_hilock(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    static const char *const keys[] = {"wait=", "lease="};
    static const ngx_msec_t mins[] = {0, HILOCK_LEASE_MIN};
    ngx_http_hilock_loc_conf_t *lcf = conf;
    ngx_str_t *value = cf->args->elts;
    ngx_http_compile_complex_value_t ccv;
    ngx_msec_t given[2] = {NGX_CONF_UNSET_MSEC, NGX_CONF_UNSET_MSEC};
    (void)cmd;
    if (lcf->name != NGX_CONF_UNSET_PTR) return "is duplicate";
    if (ngx_strcmp(value[1].data, "off") == 0) {
        if (cf->args->nelts > 2) return "takes no parameters after \"off\"";
        lcf->name = NULL;
        return NGX_CONF_OK;
    }
    if (ngx_http_hilock_params(cf, 2, keys, mins, given, 2) != NGX_CONF_OK) return NGX_CONF_ERROR;
    lcf->wait = given[0];
    lcf->lease = given[1];
    lcf->name = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (lcf->name == NULL) return NGX_CONF_ERROR;
    ngx_memzero(&ccv, sizeof(ccv));
    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = lcf->name;
    return ngx_http_compile_complex_value(&ccv) == NGX_OK ? NGX_CONF_OK : NGX_CONF_ERROR;
}

/* ---- Worker processes ---------------------------------------------------- */

static void ngx_http_hilock_log(int level, const char *msg, void *data) {
    ngx_uint_t lvl = NGX_LOG_INFO;
    (void)data;
    if (level == HILOCK_LOG_ERROR) lvl = NGX_LOG_ERR;
    else if (level == HILOCK_LOG_WARNING) lvl = NGX_LOG_WARN;
    ngx_log_error(lvl, ngx_cycle->log, 0, "hilock: %s", msg);
}

static ngx_int_t ngx_http_hilock_init_process(ngx_cycle_t *cycle) {
    ngx_http_hilock_main_conf_t *mcf;
    ngx_http_hilock_redis_t *redis;
    hilock_config cfg;
    hilock_loop loop;
    ngx_uint_t i;
    int rc;

    if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE) return NGX_OK;
    mcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_hilock_module);
    if (mcf == NULL || mcf->urls.nelts == 0) return NGX_OK;

    ngx_http_hilock_guard.handler = ngx_http_hilock_guard_handler;
    ngx_http_hilock_guard.log = cycle->log;
    ngx_http_hilock_guard.data = &ngx_http_hilock_guard;
    ngx_http_hilock_guard.cancelable = 0;

    ngx_http_hilock_clients = ngx_pcalloc(cycle->pool, mcf->urls.nelts * sizeof(hilock_client *));
    if (ngx_http_hilock_clients == NULL) return NGX_ERROR;
    ngx_http_hilock_nclients = mcf->urls.nelts;
    hilock_nginx_init(&loop, cycle->log);
    hilock_nginx_on_shutdown(ngx_http_hilock_shutdown, NULL);
    redis = mcf->urls.elts;
    for (i = 0; i < mcf->urls.nelts; i++) {
        hilock_config_init(&cfg);
        cfg.url = (const char *)redis[i].url.data;
        cfg.log_cb = ngx_http_hilock_log;
        if (redis[i].timeout) {
            cfg.connect_timeout_ms = (uint32_t)redis[i].timeout;
            cfg.request_timeout_ms = (uint32_t)redis[i].timeout;
        }
        if (redis[i].fence_ttl) cfg.fence_ttl_s = (uint32_t)redis[i].fence_ttl;
        rc = hilock_client_new(&ngx_http_hilock_clients[i], &cfg, &loop);
        if (rc != 0) {
            ngx_log_error(NGX_LOG_EMERG, cycle->log, 0, "hilock: client for \"%V\": %s",
                          &redis[i].url, hilock_strerror(rc));
            ngx_http_hilock_clients[i] = NULL;
        }
    }
    return NGX_OK;
}

static void ngx_http_hilock_exit_process(ngx_cycle_t *cycle) {
    ngx_uint_t i;
    (void)cycle;
    ngx_http_hilock_exiting = 1;
    if (ngx_http_hilock_guard.timer_set) ngx_del_timer(&ngx_http_hilock_guard);
    for (i = 0; i < ngx_http_hilock_nclients; i++) {
        if (ngx_http_hilock_clients[i] != NULL) hilock_client_free(ngx_http_hilock_clients[i]);
        ngx_http_hilock_clients[i] = NULL;
    }
    ngx_http_hilock_nclients = 0;
}
