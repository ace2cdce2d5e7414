/* ngx_http_hilock_module: hold a hilock distributed lock while a request is
 * served.
 *
 *   hilock_redis URL [timeout=TIME] [fence_ttl=TIME] [starve=TIME|off]
 *                [name=TEXT];              http, server: where the locks live
 *   hilock NAME [wait=TIME] [lease=TIME] [fair];
 *                                          http, server, location (or "off")
 *   hilock_timeout_status CODE;            default 503
 *   hilock_error_status CODE;              default 503
 *   hilock_fail_open on|off;               default off
 *   hilock_stats;                          location: every worker's statistics
 *                                          as Prometheus text
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
 * second lock is taken.
 *
 * Two kinds of lock (one per hilock directive). By default the mutex NAME:
 * after a release the lock goes to the first try that reaches Redis, which
 * is the fastest handoff but favours the nginx closest to Redis (or the
 * least loaded one); starve= bounds that: a wait that has waited that long
 * stops racing and queues in Redis for its turn (hilock_config.starve_ms,
 * one value per client, so per hilock_redis). With "fair", the fair lock
 * NAME (hilock_fair_acquire): every wait queues in Redis when it starts and
 * the lock goes strictly in arrival order over every nginx, at the cost of
 * a queue entry per waiting request and a handoff by message. The two are
 * separate locks: a mutex NAME and a fair NAME never exclude each other,
 * so every location that names a lock must agree on "fair". The fair lock
 * has no queue over Redlock's N masters: "fair" with a redlock:// Redis
 * fails `nginx -t`.
 *
 * Statistics (hilock_stats): each worker copies its clients' snapshots
 * (hilock_client_stats) into a shared zone, a slot per worker and client,
 * every second and whenever it serves the stats location itself; the
 * worker that serves it renders every live slot with
 * hilock_stats_prometheus(). */
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
    uint32_t starve;                  /* hilock_config.starve_ms; 0: hilock's */
    ngx_str_t label;                  /* redis="..." in the statistics */
} ngx_http_hilock_redis_t;

/* A slot of the statistics zone: one client of one worker. Written by its
 * owner and read by any worker, both under the zone's mutex, so that a
 * reader never sees half a snapshot. */
#define NGX_HTTP_HILOCK_LABEL_MAX 320
typedef struct {
    ngx_pid_t pid;                    /* its owner; 0: empty */
    u_char label[NGX_HTTP_HILOCK_LABEL_MAX];   /* worker="N",redis="..." */
    hilock_stats stats;
} ngx_http_hilock_slot_t;

typedef struct {
    ngx_uint_t workers;               /* slots: workers * clients */
    ngx_uint_t clients;
    ngx_http_hilock_slot_t slot[1];
} ngx_http_hilock_shctx_t;

typedef struct {
    ngx_array_t urls;                 /* ngx_http_hilock_redis_t */
    ngx_uint_t stats;                 /* a hilock_stats location exists */
    ngx_str_t stats_where;            /* the first one's file:line, for errors */
    ngx_uint_t sh_workers;            /* workers the zone has slots for */
    ngx_shm_zone_t *zone;
    ngx_http_hilock_shctx_t *sh;      /* in zone */
} ngx_http_hilock_main_conf_t;

typedef struct {
    ngx_int_t redis;                  /* index into urls, -1: none */
} ngx_http_hilock_srv_conf_t;

typedef struct {
    ngx_http_complex_value_t *name;   /* NULL: off */
    ngx_msec_t wait;                  /* NGX_CONF_UNSET_MSEC with name: default */
    ngx_msec_t lease;                 /* 0: the client's default */
    ngx_flag_t fair;                  /* the fair lock NAME, not the mutex */
    ngx_uint_t timeout_status;
    ngx_uint_t error_status;
    ngx_flag_t fail_open;
    ngx_flag_t stats;                 /* hilock_stats here */
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
/* The statistics: this worker's zone (NULL: no hilock_stats), its
 * publishing timer, and its slots' labels. */
static ngx_http_hilock_shctx_t *ngx_http_hilock_sh;
static ngx_shm_zone_t *ngx_http_hilock_zone;
static ngx_event_t ngx_http_hilock_stats_timer;
static u_char (*ngx_http_hilock_labels)[NGX_HTTP_HILOCK_LABEL_MAX];

static ngx_int_t ngx_http_hilock_preconf(ngx_conf_t *cf);
static ngx_int_t ngx_http_hilock_init(ngx_conf_t *cf);
static void *ngx_http_hilock_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_hilock_create_srv_conf(ngx_conf_t *cf);
static char *ngx_http_hilock_merge_srv_conf(ngx_conf_t *cf, void *parent, void *child);
static void *ngx_http_hilock_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_hilock_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child);
static char *ngx_http_hilock_redis(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_hilock(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_hilock_stats(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_hilock_init_process(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_hilock_init_module(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_hilock_stats_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_hilock_stats_zone(ngx_conf_t *cf);
static void ngx_http_hilock_stats_start(ngx_cycle_t *cycle);
static void ngx_http_hilock_stats_stop(void);
static void ngx_http_hilock_exit_process(ngx_cycle_t *cycle);

static ngx_conf_num_bounds_t ngx_http_hilock_status_bounds = {
    ngx_conf_check_num_bounds, 400, 599
};

static ngx_command_t ngx_http_hilock_commands[] = {
    { ngx_string("hilock_redis"),
      NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_CONF_1MORE,
      ngx_http_hilock_redis,
      NGX_HTTP_SRV_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("hilock"),
      NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1234,
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

    { ngx_string("hilock_stats"),
      NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS,
      ngx_http_hilock_stats,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
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
    ngx_http_hilock_init_module,        /* init module */
    ngx_http_hilock_init_process,       /* init process */
    NULL,                               /* init thread */
    NULL,                               /* exit thread */
    ngx_http_hilock_exit_process,       /* exit process */
    NULL,                               /* exit master */
    NGX_MODULE_V1_PADDING
};

/* ---- The busy guard ------------------------------------------------------ */

/* While draining with nothing of ours in flight, how often the guard looks
 * whether the worker still has other work (see close_if_done). */
#define NGX_HTTP_HILOCK_DRAIN_POLL 100   /* ms */

static void ngx_http_hilock_close_if_done(void);

static ngx_uint_t ngx_http_hilock_needed(void) {
    return (ngx_http_hilock_busy > 0 || ngx_http_hilock_closing > 0 || ngx_http_hilock_draining) &&
           !ngx_http_hilock_exiting;
}

static ngx_msec_t ngx_http_hilock_guard_every(void) {
    return ngx_http_hilock_draining && ngx_http_hilock_busy == 0 ? NGX_HTTP_HILOCK_DRAIN_POLL : 1000;
}

static void ngx_http_hilock_guard_handler(ngx_event_t *ev) {
    /* Out of the timer tree now: close_if_done sees the others' timers. */
    ngx_http_hilock_close_if_done();
    if (ngx_http_hilock_needed()) ngx_add_timer(ev, ngx_http_hilock_guard_every());
}

/* Keep the guard armed exactly while the clients are needed (sooner when
 * a drain has nothing of ours left in flight). */
static void ngx_http_hilock_guard_sync(void) {
    if (ngx_http_hilock_needed() &&
        (!ngx_http_hilock_guard.timer_set || ngx_http_hilock_guard_every() < 1000))
        ngx_add_timer(&ngx_http_hilock_guard, ngx_http_hilock_guard_every());
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
 * out) get their replies, and what they won is released.
 *
 * "Nothing" is not only our waits and holds: a request that the worker
 * had begun when the shutdown came but that has not reached the lock yet
 * (reading its header, in a slow auth_request, delayed by limit_req) will
 * ask for it, and closed clients would fail it (hilock_error_status on a
 * graceful reload). nginx keeps such a worker alive by the request's
 * timers (non-cancelable, as every timer of a live request is), and exits
 * when none is left: the clients are closed then, when no timer but
 * cancelable ones is left (the guard itself is out of the tree while its
 * handler runs, and is not armed at the shutdown's start when nothing of
 * ours is in flight). */
static void ngx_http_hilock_close_if_done(void) {
    ngx_uint_t i;
    if (!ngx_http_hilock_draining || ngx_http_hilock_busy > 0 || ngx_http_hilock_exiting) return;
    if (ngx_http_hilock_guard.timer_set || ngx_event_no_timers_left() != NGX_OK) return;
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
    ngx_http_hilock_guard_sync();     /* not done: look again soon */
}

static void ngx_http_hilock_busy_inc(void) {
    ngx_http_hilock_busy++;
    ngx_http_hilock_guard_sync();
}

/* The last of ours done while draining: the guard, made sooner, closes
 * the clients once the rest of the worker's requests are done too. */
static void ngx_http_hilock_busy_dec(void) {
    ngx_http_hilock_busy--;
    ngx_http_hilock_guard_sync();
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
    rc = (lcf->fair ? hilock_fair_acquire : hilock_acquire)(client, cname, &opts, ngx_http_hilock_acquired,
                                                            op, &op->wait);
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
    return ngx_http_hilock_stats_zone(cf);
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
    lcf->fair = NGX_CONF_UNSET;
    lcf->timeout_status = NGX_CONF_UNSET_UINT;
    lcf->error_status = NGX_CONF_UNSET_UINT;
    lcf->fail_open = NGX_CONF_UNSET;
    lcf->stats = NGX_CONF_UNSET;
    return lcf;
}

static char *ngx_http_hilock_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child) {
    ngx_http_hilock_loc_conf_t *prev = parent, *conf = child;
    ngx_http_hilock_main_conf_t *mcf;
    ngx_http_hilock_redis_t *redis;
    ngx_http_hilock_srv_conf_t *scf;
    /* hilock_stats is this location's own (not inherited), and a stats
     * location takes no lock from an outer hilock: a scrape must not wait
     * for, nor take, a lock named by the server's requests. */
    if (conf->stats == NGX_CONF_UNSET) conf->stats = 0;
    if (conf->stats && conf->name == NGX_CONF_UNSET_PTR) conf->name = NULL;
    /* NAME, wait=, lease= and fair come together. */
    if (conf->name == NGX_CONF_UNSET_PTR) {
        conf->name = prev->name == NGX_CONF_UNSET_PTR ? NULL : prev->name;
        conf->wait = prev->wait;
        conf->lease = prev->lease;
        conf->fair = prev->fair;
    }
    /* Locations are merged after their server (whose conf cf->ctx holds):
     * a lock with nowhere to live fails `nginx -t`, not every request. */
    scf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_hilock_module);
    if (conf->name != NULL && scf->redis < 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"hilock\" needs \"hilock_redis\" in its server or in http");
        return NGX_CONF_ERROR;
    }
    /* The fair lock is refused on a redlock:// client at every acquire
     * (no single queue over N masters): say so now, not per request. */
    if (conf->name != NULL && conf->fair == 1) {
        mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_hilock_module);
        redis = mcf->urls.elts;
        if (redis[scf->redis].url.len >= 10 && ngx_strncasecmp(redis[scf->redis].url.data,
                                                               (u_char *)"redlock://", 10) == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"hilock ... fair\" cannot use a redlock:// \"hilock_redis\" "
                               "(the fair lock has no queue over several masters)");
            return NGX_CONF_ERROR;
        }
    }
    if (conf->fair == NGX_CONF_UNSET) conf->fair = 0;
    if (conf->wait == NGX_CONF_UNSET_MSEC) conf->wait = NGX_HTTP_HILOCK_WAIT_DEFAULT;
    if (conf->lease == NGX_CONF_UNSET_MSEC) conf->lease = 0;
    ngx_conf_merge_uint_value(conf->timeout_status, prev->timeout_status,
                              NGX_HTTP_SERVICE_UNAVAILABLE);
    ngx_conf_merge_uint_value(conf->error_status, prev->error_status,
                              NGX_HTTP_SERVICE_UNAVAILABLE);
    ngx_conf_merge_value(conf->fail_open, prev->fail_open, 0);
    return NGX_CONF_OK;
}

/* The statistics' redis="..." of a hilock_redis without name=: its URL
 * without the user and password (all up to the last '@', as a password
 * may hold any character): a scrape must never show a password. */
static ngx_int_t ngx_http_hilock_url_label(ngx_pool_t *pool, ngx_str_t *url, ngx_str_t *label) {
    u_char *end = url->data + url->len, *p, *at = NULL, *q;
    *label = *url;
    p = ngx_strlcasestrn(url->data, end, (u_char *)"://", 3 - 1);
    if (p == NULL || ngx_strncmp(url->data, "unix://", 7) == 0) return NGX_OK;
    p += 3;
    for (q = p; q < end; q++)
        if (*q == '@') at = q;
    if (at == NULL) return NGX_OK;
    label->len = (size_t)(p - url->data) + (size_t)(end - (at + 1));
    label->data = ngx_pnalloc(pool, label->len);
    if (label->data == NULL) return NGX_ERROR;
    q = ngx_cpymem(label->data, url->data, (size_t)(p - url->data));
    ngx_memcpy(q, at + 1, (size_t)(end - (at + 1)));
    return NGX_OK;
}

/* A malformed URL (or a config hilock refuses with it) fails `nginx -t`,
 * not the first request; the message shows the URL without its user and
 * password (a log must not carry them). */
static ngx_int_t ngx_http_hilock_url_check(ngx_conf_t *cf, ngx_str_t *url, uint32_t starve) {
    hilock_config cfg;
    ngx_str_t shown; /* the URL in the message, without its password */
    int rc;
    u_char *s = ngx_pnalloc(cf->pool, url->len + 1);
    if (s == NULL) return NGX_ERROR;
    ngx_memcpy(s, url->data, url->len);
    s[url->len] = '\0';
    hilock_config_init(&cfg);
    cfg.url = (const char *)s;
    cfg.starve_ms = starve;
    rc = hilock_config_check(&cfg);
    if (rc == 0) return NGX_OK;
    if (ngx_http_hilock_url_label(cf->pool, url, &shown) != NGX_OK) return NGX_ERROR;
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "hilock_redis \"%V\": %s", &shown, hilock_strerror(rc));
    return NGX_ERROR;
}

/* A parameter KEY=TIME of a directive: its least value, and whether
 * KEY=off is allowed too (its value then NGX_HTTP_HILOCK_OFF). */
typedef struct {
    const char *key;                  /* with its '=' */
    ngx_msec_t min;
    ngx_uint_t off;
} ngx_http_hilock_key_t;

#define NGX_HTTP_HILOCK_OFF ((ngx_msec_t)-2)   /* not NGX_CONF_UNSET_MSEC */

/* A parameter "KEY=TIME" (ms): NGX_OK with *out set, NGX_DECLINED when the
 * parameter is not KEY=, NGX_ERROR (said, naming the parameter) when its
 * value is bad. */
static ngx_int_t ngx_http_hilock_param(ngx_conf_t *cf, ngx_str_t *v, const ngx_http_hilock_key_t *k,
                                       ngx_msec_t *out) {
    size_t klen = ngx_strlen(k->key);
    ngx_str_t t;
    ngx_msec_t ms;
    if (v->len < klen || ngx_strncmp(v->data, k->key, klen) != 0) return NGX_DECLINED;
    t.data = v->data + klen;
    t.len = v->len - klen;
    if (k->off && t.len == 3 && ngx_strncmp(t.data, "off", 3) == 0) {
        *out = NGX_HTTP_HILOCK_OFF;
        return NGX_OK;
    }
    ms = ngx_parse_time(&t, 0);
    if (ms == (ngx_msec_t)NGX_ERROR || ms < k->min || ms > (ngx_msec_t)NGX_MAX_INT32_VALUE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid time \"%V\" (at least %Mms%s)", v, k->min,
                           k->off ? ", or off" : "");
        return NGX_ERROR;
    }
    *out = ms;
    return NGX_OK;
}

/* Each parameter of cf->args from `first` on must be one of keys[]; its
 * value goes to outs[]. With `name`, a parameter "name=TEXT" is allowed
 * too, its TEXT into *name; with `fair`, the flag "fair", *fair set. */
static char *ngx_http_hilock_params(ngx_conf_t *cf, ngx_uint_t first, const ngx_http_hilock_key_t *keys,
                                    ngx_msec_t *outs, ngx_uint_t nkeys, ngx_str_t *name, ngx_flag_t *fair) {
    ngx_str_t *value = cf->args->elts;
    ngx_uint_t i, k;
    ngx_int_t rc = NGX_DECLINED;
    for (i = first; i < cf->args->nelts; i++) {
        if (name != NULL && value[i].len > 5 && ngx_strncmp(value[i].data, "name=", 5) == 0) {
            name->data = value[i].data + 5;
            name->len = value[i].len - 5;
            continue;
        }
        if (fair != NULL && value[i].len == 4 && ngx_strncmp(value[i].data, "fair", 4) == 0) {
            *fair = 1;
            continue;
        }
        for (k = 0, rc = NGX_DECLINED; k < nkeys && rc == NGX_DECLINED; k++)
            rc = ngx_http_hilock_param(cf, &value[i], &keys[k], &outs[k]);
        if (rc == NGX_ERROR) return NGX_CONF_ERROR;
        if (rc == NGX_DECLINED) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid parameter \"%V\"", &value[i]);
            return NGX_CONF_ERROR;
        }
    }
    return NGX_CONF_OK;
}

static char *ngx_http_hilock_redis(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    /* starve=: at least 1ms, as 0 in hilock_config means "the default". */
    static const ngx_http_hilock_key_t keys[] = {
        {"timeout=", 1, 0}, {"fence_ttl=", 1000, 0}, {"starve=", 1, 1}};
    ngx_http_hilock_srv_conf_t *scf = conf;
    ngx_http_hilock_main_conf_t *mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_hilock_module);
    ngx_str_t *value = cf->args->elts;
    ngx_http_hilock_redis_t *have, *u;
    ngx_msec_t given[3] = {0, 0, 0};
    ngx_str_t name = ngx_null_string;
    uint32_t starve;
    ngx_uint_t i;
    (void)cmd;
    if (scf->redis != NGX_CONF_UNSET) return "is duplicate";
    /* URL and at most one of each parameter (1MORE: nginx has no TAKE5). */
    if (cf->args->nelts > 2 + 4) return "has too many parameters";
    if (value[1].len == 0) return "needs a URL";
    if (ngx_http_hilock_params(cf, 2, keys, given, 3, &name, NULL) != NGX_CONF_OK) return NGX_CONF_ERROR;
    starve = given[2] == NGX_HTTP_HILOCK_OFF ? HILOCK_STARVE_NEVER : (uint32_t)given[2];
    if (ngx_http_hilock_url_check(cf, &value[1], starve) != NGX_OK) return NGX_CONF_ERROR;
    if (name.len == 0 && ngx_http_hilock_url_label(cf->pool, &value[1], &name) != NGX_OK)
        return NGX_CONF_ERROR;
    /* Servers that name the same Redis the same way share a client. */
    have = mcf->urls.elts;
    for (i = 0; i < mcf->urls.nelts; i++) {
        if (have[i].url.len == value[1].len && have[i].timeout == given[0] &&
            have[i].fence_ttl == given[1] / 1000 && have[i].starve == starve &&
            have[i].label.len == name.len &&
            ngx_strncmp(have[i].label.data, name.data, name.len) == 0 &&
            ngx_strncmp(have[i].url.data, value[1].data, value[1].len) == 0) {
            scf->redis = (ngx_int_t)i;
            return NGX_CONF_OK;
        }
    }
    u = ngx_array_push(&mcf->urls);
    if (u == NULL) return NGX_CONF_ERROR;
    u->timeout = given[0];
    u->fence_ttl = given[1] / 1000;
    u->starve = starve;
    u->url.len = value[1].len;
    u->url.data = ngx_pnalloc(cf->pool, value[1].len + 1);
    if (u->url.data == NULL) return NGX_CONF_ERROR;
    ngx_memcpy(u->url.data, value[1].data, value[1].len);
    u->url.data[u->url.len] = '\0';
    u->label = name;
    scf->redis = (ngx_int_t)(mcf->urls.nelts - 1);
    return NGX_CONF_OK;
}

static char *ngx_http_hilock(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    static const ngx_http_hilock_key_t keys[] = {{"wait=", 0, 0}, {"lease=", HILOCK_LEASE_MIN, 0}};
    ngx_http_hilock_loc_conf_t *lcf = conf;
    ngx_str_t *value = cf->args->elts;
    ngx_http_compile_complex_value_t ccv;
    ngx_msec_t given[2] = {NGX_CONF_UNSET_MSEC, NGX_CONF_UNSET_MSEC};
    ngx_flag_t fair = 0;
    (void)cmd;
    if (lcf->name != NGX_CONF_UNSET_PTR) return "is duplicate";
    if (ngx_strcmp(value[1].data, "off") == 0) {
        if (cf->args->nelts > 2) return "takes no parameters after \"off\"";
        lcf->name = NULL;
        return NGX_CONF_OK;
    }
    if (ngx_http_hilock_params(cf, 2, keys, given, 2, NULL, &fair) != NGX_CONF_OK) return NGX_CONF_ERROR;
    lcf->wait = given[0];
    lcf->lease = given[1];
    lcf->fair = fair;
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
        cfg.starve_ms = redis[i].starve;
        rc = hilock_client_new(&ngx_http_hilock_clients[i], &cfg, &loop);
        if (rc != 0) {
            ngx_str_t shown = redis[i].url;
            (void)ngx_http_hilock_url_label(cycle->pool, &redis[i].url, &shown);
            ngx_log_error(NGX_LOG_EMERG, cycle->log, 0, "hilock: client for \"%V\": %s",
                          &shown, hilock_strerror(rc));
            ngx_http_hilock_clients[i] = NULL;
        }
    }
    ngx_http_hilock_stats_start(cycle);
    return NGX_OK;
}

static void ngx_http_hilock_exit_process(ngx_cycle_t *cycle) {
    ngx_uint_t i;
    (void)cycle;
    ngx_http_hilock_exiting = 1;
    ngx_http_hilock_stats_stop();
    if (ngx_http_hilock_guard.timer_set) ngx_del_timer(&ngx_http_hilock_guard);
    for (i = 0; i < ngx_http_hilock_nclients; i++) {
        if (ngx_http_hilock_clients[i] != NULL) hilock_client_free(ngx_http_hilock_clients[i]);
        ngx_http_hilock_clients[i] = NULL;
    }
    ngx_http_hilock_nclients = 0;
}

/* ---- Statistics ---------------------------------------------------------- *
 *
 * A zone "hilock_stats" holds a slot per worker and client (worker w's
 * client c in slot w * clients + c). A worker publishes its clients'
 * snapshots every second (a cancelable timer: it never keeps a worker that
 * is shutting down) and before it serves a scrape; it empties its slots at
 * exit. A slot carries its owner's pid: a worker respawned after a crash
 * takes its number's slots over, and the crashed one's are overwritten.
 *
 * A reload makes a new zone (noreuse): the new workers publish into it and
 * the old ones, while they drain, into the old zone, which only they still
 * map. A scrape therefore shows the workers of the running configuration
 * only, never an old and a new worker under one number, and never counts
 * one twice; the old workers' counters leave the exposition at the reload
 * (a counter reset for Prometheus, as a restart is). */

#define NGX_HTTP_HILOCK_STATS_EVERY 1000   /* ms */

static ngx_str_t ngx_http_hilock_zone_name = ngx_string("hilock_stats");
static ngx_str_t ngx_http_hilock_content_type = ngx_string("text/plain; version=0.0.4; charset=utf-8");

static char *ngx_http_hilock_stats(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
    ngx_http_hilock_loc_conf_t *lcf = conf;
    ngx_http_hilock_main_conf_t *mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_hilock_module);
    ngx_http_core_loc_conf_t *clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    (void)cmd;
    if (lcf->stats != NGX_CONF_UNSET) return "is duplicate";
    lcf->stats = 1;
    clcf->handler = ngx_http_hilock_stats_handler;
    if (!mcf->stats) {
        /* Whether any hilock_redis exists is known only after the whole
         * http block: remember where to point the error. */
        mcf->stats = 1;
        mcf->stats_where.data = ngx_pnalloc(cf->pool, cf->conf_file->file.name.len + NGX_INT_T_LEN + 1);
        if (mcf->stats_where.data == NULL) return NGX_CONF_ERROR;
        mcf->stats_where.len = ngx_sprintf(mcf->stats_where.data, "%V:%ui", &cf->conf_file->file.name,
                                           cf->conf_file->line) - mcf->stats_where.data;
    }
    return NGX_CONF_OK;
}

static ngx_int_t ngx_http_hilock_zone_init(ngx_shm_zone_t *zone, void *data) {
    ngx_http_hilock_main_conf_t *mcf = zone->data;
    ngx_slab_pool_t *sp = (ngx_slab_pool_t *)zone->shm.addr;
    ngx_uint_t workers = mcf->sh_workers, n = workers * mcf->urls.nelts;
    size_t size = offsetof(ngx_http_hilock_shctx_t, slot) + n * sizeof(ngx_http_hilock_slot_t);
    (void)data;                       /* never reused (noreuse) */
    mcf->sh = ngx_slab_calloc(sp, size);
    if (mcf->sh == NULL) return NGX_ERROR;
    mcf->sh->workers = workers;
    mcf->sh->clients = mcf->urls.nelts;
    return NGX_OK;
}

/* After the http block (every hilock_redis known): the zone, sized for
 * worker_processes (or the CPUs, if worker_processes comes later in the
 * file or not at all: "auto" would be that, and 1 is less) times the
 * clients. */
static ngx_int_t ngx_http_hilock_stats_zone(ngx_conf_t *cf) {
    ngx_http_hilock_main_conf_t *mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_hilock_module);
    ngx_core_conf_t *ccf = (ngx_core_conf_t *)ngx_get_conf(cf->cycle->conf_ctx, ngx_core_module);
    ngx_http_hilock_redis_t *redis = mcf->urls.elts;
    ngx_uint_t i, j;
    size_t size;
    if (!mcf->stats) return NGX_OK;
    if (mcf->urls.nelts == 0) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"hilock_stats\" in %V needs a \"hilock_redis\" in http or in a server",
                      &mcf->stats_where);
        return NGX_ERROR;
    }
    /* Each client's samples are one series per worker: two clients with
     * one label would be two samples of a series, and a scrape that
     * Prometheus rejects ("duplicate sample"). */
    for (i = 0; i < mcf->urls.nelts; i++)
        for (j = i + 1; j < mcf->urls.nelts; j++)
            if (redis[i].label.len == redis[j].label.len &&
                ngx_strncmp(redis[i].label.data, redis[j].label.data, redis[i].label.len) == 0) {
                ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                              "\"hilock_stats\" in %V: two \"hilock_redis\" (one URL with other "
                              "parameters, or one name=) share the label redis=\"%V\": give "
                              "each its own name=",
                              &mcf->stats_where, &redis[i].label);
                return NGX_ERROR;
            }
    mcf->sh_workers = ccf->worker_processes != NGX_CONF_UNSET ? (ngx_uint_t)ccf->worker_processes
                                                              : (ngx_uint_t)ngx_max(ngx_ncpu, 1);
    size = offsetof(ngx_http_hilock_shctx_t, slot) +
           mcf->sh_workers * mcf->urls.nelts * sizeof(ngx_http_hilock_slot_t);
    /* The slab pool's own header and page table, and rounding to pages. */
    size = ngx_align(size, ngx_pagesize) + size / 32 + 8 * ngx_pagesize;
    mcf->zone = ngx_shared_memory_add(cf, &ngx_http_hilock_zone_name, size, &ngx_http_hilock_module);
    if (mcf->zone == NULL) return NGX_ERROR;
    if (mcf->zone->data != NULL) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0, "hilock_stats: zone \"%V\" is taken",
                      &ngx_http_hilock_zone_name);
        return NGX_ERROR;
    }
    mcf->zone->init = ngx_http_hilock_zone_init;
    mcf->zone->data = mcf;
    mcf->zone->noreuse = 1;           /* a zone per configuration: see above */
    return NGX_OK;
}

/* The final worker_processes is known now: say so if it came after the
 * http block and is larger than the zone's room. */
static ngx_int_t ngx_http_hilock_init_module(ngx_cycle_t *cycle) {
    ngx_http_hilock_main_conf_t *mcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_hilock_module);
    ngx_core_conf_t *ccf = (ngx_core_conf_t *)ngx_get_conf(cycle->conf_ctx, ngx_core_module);
    if (mcf == NULL || mcf->zone == NULL) return NGX_OK;
    if ((ngx_uint_t)ccf->worker_processes > mcf->sh_workers) {
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                      "hilock_stats has room for %ui workers of %i: workers from %ui on are "
                      "left out; put \"worker_processes\" before the http block",
                      mcf->sh_workers, ccf->worker_processes, mcf->sh_workers);
    }
    return NGX_OK;
}

/* Slot i of this worker's clients, or NULL (no zone, or no room). */
static ngx_http_hilock_slot_t *ngx_http_hilock_slot(ngx_uint_t i) {
    ngx_http_hilock_shctx_t *sh = ngx_http_hilock_sh;
    if (sh == NULL || ngx_worker >= sh->workers || i >= sh->clients) return NULL;
    return &sh->slot[ngx_worker * sh->clients + i];
}

/* Copy this worker's snapshots into its slots; a client that is closed
 * (or closing) empties its slot. */
static void ngx_http_hilock_stats_publish(void) {
    static hilock_stats snap;         /* 5 KB: not on the stack */
    ngx_slab_pool_t *sp;
    ngx_http_hilock_slot_t *slot;
    ngx_uint_t i;
    if (ngx_http_hilock_sh == NULL) return;
    sp = (ngx_slab_pool_t *)ngx_http_hilock_zone->shm.addr;
    for (i = 0; i < ngx_http_hilock_nclients; i++) {
        slot = ngx_http_hilock_slot(i);
        if (slot == NULL) return;
        hilock_stats_init(&snap);
        if (ngx_http_hilock_exiting || ngx_http_hilock_clients[i] == NULL ||
            hilock_client_stats(ngx_http_hilock_clients[i], &snap) != 0) {
            ngx_shmtx_lock(&sp->mutex);
            if (slot->pid == ngx_pid) slot->pid = 0;
            ngx_shmtx_unlock(&sp->mutex);
            continue;
        }
        ngx_shmtx_lock(&sp->mutex);
        slot->pid = ngx_pid;
        ngx_memcpy(slot->label, ngx_http_hilock_labels[i], NGX_HTTP_HILOCK_LABEL_MAX);
        ngx_memcpy(&slot->stats, &snap, sizeof(snap));
        ngx_shmtx_unlock(&sp->mutex);
    }
}

static void ngx_http_hilock_stats_tick(ngx_event_t *ev) {
    ngx_http_hilock_stats_publish();
    if (!ngx_http_hilock_exiting) ngx_add_timer(ev, NGX_HTTP_HILOCK_STATS_EVERY);
}

/* The length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t ngx_http_hilock_utf8_seq(const u_char *s, size_t n) {
    size_t len, i;
    uint32_t cp;
    if (s[0] < 0x80) return 1;
    if ((s[0] & 0xe0) == 0xc0) { len = 2; cp = s[0] & 0x1f; }
    else if ((s[0] & 0xf0) == 0xe0) { len = 3; cp = s[0] & 0x0f; }
    else if ((s[0] & 0xf8) == 0xf0) { len = 4; cp = s[0] & 0x07; }
    else return 0;
    if (n < len) return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

/* A label value as the exposition format wants it (\\, \", \n escaped;
 * UTF-8, a byte that is not written as U+FFFD), into p (at most last),
 * cut only between characters; the end. */
static u_char *ngx_http_hilock_label_value(u_char *p, u_char *last, ngx_str_t *v) {
    ngx_uint_t i = 0;
    while (i < v->len) {
        u_char c = v->data[i];
        size_t k = ngx_http_hilock_utf8_seq(v->data + i, v->len - i);
        int esc = c == '\\' || c == '"' || c == '\n';
        size_t need = k == 0 ? 3 : esc ? 2 : k;
        if (p + need > last) break;
        if (k == 0) {
            p = ngx_cpymem(p, "\xef\xbf\xbd", 3);
            i++;
        } else if (esc) {
            *p++ = '\\';
            *p++ = c == '\n' ? 'n' : c;
            i++;
        } else {
            p = ngx_cpymem(p, v->data + i, k);
            i += k;
        }
    }
    return p;
}

/* At worker start (the clients made): the labels, the first snapshot, the
 * timer. */
static void ngx_http_hilock_stats_start(ngx_cycle_t *cycle) {
    ngx_http_hilock_main_conf_t *mcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_hilock_module);
    ngx_http_hilock_redis_t *redis = mcf->urls.elts;
    u_char *p, *last;
    ngx_uint_t i;
    if (mcf->sh == NULL) return;
    if (ngx_worker >= mcf->sh->workers) return;    /* said by init_module */
    ngx_http_hilock_labels = ngx_pcalloc(cycle->pool, mcf->urls.nelts * NGX_HTTP_HILOCK_LABEL_MAX);
    if (ngx_http_hilock_labels == NULL) return;
    for (i = 0; i < mcf->urls.nelts; i++) {
        last = ngx_http_hilock_labels[i] + NGX_HTTP_HILOCK_LABEL_MAX - 2;   /* '"', NUL */
        p = ngx_snprintf(ngx_http_hilock_labels[i], last - ngx_http_hilock_labels[i],
                         "worker=\"%ui\",redis=\"", ngx_worker);
        p = ngx_http_hilock_label_value(p, last, &redis[i].label);
        *p++ = '"';
        *p = '\0';
    }
    ngx_http_hilock_zone = mcf->zone;
    ngx_http_hilock_sh = mcf->sh;
    ngx_http_hilock_stats_publish();
    ngx_http_hilock_stats_timer.handler = ngx_http_hilock_stats_tick;
    ngx_http_hilock_stats_timer.log = cycle->log;
    ngx_http_hilock_stats_timer.data = &ngx_http_hilock_stats_timer;
    ngx_http_hilock_stats_timer.cancelable = 1;
    ngx_add_timer(&ngx_http_hilock_stats_timer, NGX_HTTP_HILOCK_STATS_EVERY);
}

/* At worker exit: this worker's slots are empty (a new worker set is
 * not counted with a gone one's). */
static void ngx_http_hilock_stats_stop(void) {
    if (ngx_http_hilock_stats_timer.timer_set) ngx_del_timer(&ngx_http_hilock_stats_timer);
    ngx_http_hilock_stats_publish();  /* exiting: every slot emptied */
    ngx_http_hilock_sh = NULL;
}

/* Copy every live slot out of the zone (under its mutex, so that no
 * snapshot is half written), into the request's pool. The count, or -1. */
static ngx_int_t ngx_http_hilock_stats_collect(ngx_http_request_t *r, const hilock_stats ***stats,
                                               const char ***labels) {
    ngx_http_hilock_main_conf_t *mcf = ngx_http_get_module_main_conf(r, ngx_http_hilock_module);
    ngx_http_hilock_shctx_t *sh = mcf->sh;
    ngx_slab_pool_t *sp = (ngx_slab_pool_t *)mcf->zone->shm.addr;
    ngx_http_hilock_slot_t *copy;
    ngx_uint_t i, n = sh->workers * sh->clients, live = 0;
    copy = ngx_palloc(r->pool, n * sizeof(*copy));
    *stats = ngx_palloc(r->pool, n * sizeof(**stats));
    *labels = ngx_palloc(r->pool, n * sizeof(**labels));
    if (copy == NULL || *stats == NULL || *labels == NULL) return -1;
    ngx_shmtx_lock(&sp->mutex);
    for (i = 0; i < n; i++)
        if (sh->slot[i].pid != 0) ngx_memcpy(&copy[live++], &sh->slot[i], sizeof(*copy));
    ngx_shmtx_unlock(&sp->mutex);
    for (i = 0; i < live; i++) {
        (*stats)[i] = &copy[i].stats;
        (*labels)[i] = (const char *)copy[i].label;
    }
    return (ngx_int_t)live;
}

static ngx_int_t ngx_http_hilock_stats_handler(ngx_http_request_t *r) {
    const hilock_stats **stats;
    const char **labels;
    ngx_int_t n, rc;
    ngx_buf_t *b;
    ngx_chain_t out;
    int len;

    if (!(r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD))) return NGX_HTTP_NOT_ALLOWED;
    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) return rc;
    ngx_http_hilock_stats_publish();  /* this worker's own: as of now */
    n = ngx_http_hilock_stats_collect(r, &stats, &labels);
    if (n < 0) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    len = hilock_stats_prometheus(NULL, 0, stats, labels, (size_t)n);
    if (len < 0) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    b = ngx_create_temp_buf(r->pool, (size_t)len + 1);     /* + its NUL */
    if (b == NULL) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    if (hilock_stats_prometheus((char *)b->pos, (size_t)len + 1, stats, labels, (size_t)n) != len)
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    b->last = b->pos + len;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = len;
    r->headers_out.content_type = ngx_http_hilock_content_type;
    r->headers_out.content_type_len = ngx_http_hilock_content_type.len;
    r->headers_out.content_type_lowcase = NULL;
    if (r->method == NGX_HTTP_HEAD) r->header_only = 1;
    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) return rc;
    out.buf = b;
    out.next = NULL;
    return ngx_http_output_filter(r, &out);
}
