/* http_singleflight: an HTTP cache in front of a slow backend, where a
 * missing entry is computed once, however many requests want it at the same
 * moment and however many server processes share the cache.
 *
 *     http_singleflight [-p PORT] [-u REDIS_URL] [-d BACKEND_MS] [-t TTL_S]
 *
 * GET /KEY answers the value of KEY from the cache in Redis (`cache:KEY`).
 * On a miss, the request waits for the hilock lock "cache:KEY" without
 * blocking the loop; requests for the same key queue on that lock, in this
 * process and in every other process on the same Redis. Whoever gets the lock
 * first looks at the cache again and, still missing, calls the backend (a
 * timer standing in for a slow database, BACKEND_MS, default 500 ms), stores
 * the value, and releases. Each later holder finds the value and releases
 * at once. The response header X-Cache says which path a request took:
 *
 *     hit    found in the cache at once
 *     wait   waited for the lock, then found the value someone else stored
 *     miss   held the lock and ran the backend
 *
 * Each backend call prints "backend KEY" on stdout. SIGINT or SIGTERM stops
 * accepting, lets the requests in progress finish, prints a "stats" line and
 * exits. PORT 0 (the default) picks a free port; "listening on HOST:PORT" is
 * printed once the server is ready. REDIS_URL is redis://HOST[:PORT] (the
 * cache connection here is plain hiredis; hilock itself takes any of its URL
 * forms). TTL_S (default 60) is how long a cached value lives.
 *
 * Try it: start two servers, then ask both for one key at once:
 *     build/examples/http_singleflight -p 8081 & build/examples/http_singleflight -p 8082 &
 *     ab -n 200 -c 50 http://127.0.0.1:8081/k & ab -n 200 -c 50 http://127.0.0.1:8082/k
 * and "backend k" is printed once.
 *
 * Build: cc http_singleflight.c $(pkg-config --cflags --libs hilock) -levent
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>

#include <hilock/hilock.h>
#include <hilock/adapters/libevent.h>

#define KEY_MAX 200

struct app {
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *listener;
    struct event *sigint, *sigterm;
    hilock_client *locks;
    redisAsyncContext *cache;     /* NULL while disconnected */
    char redis_host[256];
    int redis_port;
    int backend_ms, ttl_s;
    int active;                   /* requests not yet finished */
    int stopping;
    long requests, hits, waited, computed, errors;
};

/* One HTTP request, from arrival to the release of its lock. */
struct req {
    struct app *app;
    struct evhttp_request *http;  /* NULL once answered */
    hilock_hold *hold;            /* the lock, while we hold it */
    struct event *backend;        /* the slow backend call in progress */
    char key[KEY_MAX + 1];
};

static void cache_connect(struct app *app);
static void shut_down(struct app *app);

/* ---- Answering and finishing ------------------------------------------ */

static void answer(struct req *rq, int code, const char *body, const char *how) {
    struct evbuffer *buf = evbuffer_new();
    struct evkeyvalq *hdr = evhttp_request_get_output_headers(rq->http);
    evhttp_add_header(hdr, "Content-Type", "text/plain");
    evhttp_add_header(hdr, "X-Cache", how);
    if (buf != NULL) evbuffer_add_printf(buf, "%s\n", body);
    evhttp_send_reply(rq->http, code, code == 200 ? "OK" : "Unavailable", buf);
    if (buf != NULL) evbuffer_free(buf);
    rq->http = NULL;
    if (code != 200) rq->app->errors++;
}

/* The request is done: answered, and its lock (if any) released. */
static void finish(struct req *rq) {
    struct app *app = rq->app;
    if (rq->http != NULL) answer(rq, 503, "unavailable", "error");
    if (rq->backend != NULL) event_free(rq->backend);
    free(rq);
    if (--app->active == 0 && app->stopping) shut_down(app);
}

static void on_released(int status, void *data) {
    struct req *rq = data;
    if (status != HILOCK_OK) /* the key expires after its lease anyway */
        fprintf(stderr, "release of %s: %s\n", rq->key, hilock_strerror(status));
    rq->hold = NULL;
    finish(rq);
}

/* Give the lock back (if we have it), then finish. */
static void release_and_finish(struct req *rq) {
    if (rq->hold == NULL || hilock_release(rq->hold, on_released, rq) != HILOCK_OK)
        finish(rq);
}

/* ---- The cache (plain hiredis on the same loop) ----------------------- */

static void on_cache_connect(const redisAsyncContext *ac, int status) {
    struct app *app = ac->data;
    if (status != REDIS_OK) {
        fprintf(stderr, "cache: %s\n", ac->errstr);
        if (app->cache == ac) app->cache = NULL; /* hiredis frees it */
    }
}

static void on_cache_disconnect(const redisAsyncContext *ac, int status) {
    struct app *app = ac->data;
    (void)status;
    if (app->cache == ac) app->cache = NULL; /* reconnect on the next request */
}

static void cache_connect(struct app *app) {
    redisAsyncContext *ac = redisAsyncConnect(app->redis_host, app->redis_port);
    if (ac == NULL) return;
    if (ac->err || redisLibeventAttach(ac, app->base) != REDIS_OK) {
        fprintf(stderr, "cache: %s\n", ac->err ? ac->errstr : "cannot attach");
        redisAsyncFree(ac);
        return;
    }
    ac->data = app;
    redisAsyncSetConnectCallback(ac, on_cache_connect);
    redisAsyncSetDisconnectCallback(ac, on_cache_disconnect);
    app->cache = ac;
}

/* GET cache:KEY; `cb` gets the reply (NULL if the connection failed). */
static int cache_get(struct req *rq, redisCallbackFn *cb) {
    if (rq->app->cache == NULL) cache_connect(rq->app);
    if (rq->app->cache == NULL) return -1;
    return redisAsyncCommand(rq->app->cache, cb, rq, "GET cache:%s", rq->key) == REDIS_OK ? 0 : -1;
}

/* ---- The request's steps ---------------------------------------------- */

/* 5. The value is stored: answer, and only then let the next holder in. */
static void on_stored(redisAsyncContext *ac, void *reply, void *data) {
    struct req *rq = data;
    redisReply *r = reply;
    (void)ac;
    if (r != NULL && r->type == REDIS_REPLY_STATUS) {
        char value[KEY_MAX + 32];
        snprintf(value, sizeof(value), "value of %s", rq->key);
        answer(rq, 200, value, "miss");
    }
    release_and_finish(rq);
}

/* 4. The slow backend has answered: store its value, with a TTL. */
static void on_backend_done(evutil_socket_t fd, short what, void *data) {
    struct req *rq = data;
    char value[KEY_MAX + 32];
    (void)fd; (void)what;
    snprintf(value, sizeof(value), "value of %s", rq->key);
    if (rq->app->cache == NULL ||
        redisAsyncCommand(rq->app->cache, on_stored, rq, "SET cache:%s %s EX %d",
                          rq->key, value, rq->app->ttl_s) != REDIS_OK)
        release_and_finish(rq);
}

/* 3. We hold the lock: the value may have been stored while we waited. */
static void on_second_look(redisAsyncContext *ac, void *reply, void *data) {
    struct req *rq = data;
    redisReply *r = reply;
    (void)ac;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        rq->app->waited++;
        answer(rq, 200, r->str, "wait");
        release_and_finish(rq);
    } else if (r != NULL && r->type == REDIS_REPLY_NIL) {
        /* Still missing, and we hold the lock: we are the one to compute.
         * The watchdog renews the lease however long the backend takes. */
        struct timeval tv = {rq->app->backend_ms / 1000, (rq->app->backend_ms % 1000) * 1000};
        rq->app->computed++;
        printf("backend %s\n", rq->key);
        rq->backend = evtimer_new(rq->app->base, on_backend_done, rq);
        if (rq->backend == NULL || evtimer_add(rq->backend, &tv) != 0) release_and_finish(rq);
    } else {
        release_and_finish(rq);
    }
}

/* 2. The outcome of the wait for the lock. */
static void on_locked(hilock_hold *hold, int status, void *data) {
    struct req *rq = data;
    if (status != HILOCK_OK) { /* e.g. HILOCK_ETIMEDOUT, HILOCK_ECONN */
        fprintf(stderr, "lock %s: %s\n", rq->key, hilock_strerror(status));
        finish(rq);
        return;
    }
    rq->hold = hold;
    if (cache_get(rq, on_second_look) != 0) release_and_finish(rq);
}

/* 1. First look at the cache. */
static void on_first_look(redisAsyncContext *ac, void *reply, void *data) {
    struct req *rq = data;
    redisReply *r = reply;
    (void)ac;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        rq->app->hits++;
        answer(rq, 200, r->str, "hit");
        finish(rq);
    } else if (r != NULL && r->type == REDIS_REPLY_NIL) {
        /* A miss: queue on the key's lock. The loop serves other requests
         * meanwhile; a release anywhere wakes the next waiter. */
        char name[KEY_MAX + 8];
        hilock_acquire_opts opts;
        hilock_acquire_opts_init(&opts);
        opts.wait_ms = 10000;
        opts.lease_ms = 5000;
        snprintf(name, sizeof(name), "cache:%s", rq->key);
        if (hilock_acquire(rq->app->locks, name, &opts, on_locked, rq, NULL) != HILOCK_OK)
            finish(rq);
    } else {
        finish(rq);
    }
}

static void on_request(struct evhttp_request *http, void *data) {
    struct app *app = data;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(http));
    struct req *rq;
    app->requests++;
    if (path == NULL || path[0] != '/' || path[1] == '\0' || strlen(path + 1) > KEY_MAX ||
        strpbrk(path + 1, " \r\n") != NULL) {
        evhttp_send_error(http, HTTP_BADREQUEST, "GET /KEY");
        app->errors++;
        return;
    }
    if (app->stopping || (rq = calloc(1, sizeof(*rq))) == NULL) {
        evhttp_send_error(http, 503, "Unavailable");
        app->errors++;
        return;
    }
    rq->app = app;
    rq->http = http;
    strcpy(rq->key, path + 1);
    app->active++;
    if (cache_get(rq, on_first_look) != 0) finish(rq);
}

/* ---- Start and stop ---------------------------------------------------- */

static void on_locks_closed(void *data) {
    struct app *app = data;
    app->locks = NULL;
    printf("stats requests=%ld hits=%ld waited=%ld computed=%ld errors=%ld\n",
           app->requests, app->hits, app->waited, app->computed, app->errors);
    evhttp_free(app->http);
    app->http = NULL;
    if (app->cache != NULL) redisAsyncDisconnect(app->cache);
    event_free(app->sigint);
    event_free(app->sigterm);
    /* Nothing is left on the loop now: event_base_dispatch() returns. */
}

/* No request is in progress: close hilock (gracefully), then the rest. */
static void shut_down(struct app *app) {
    if (app->locks != NULL) hilock_client_close(app->locks, on_locks_closed, app);
}

static void on_signal(evutil_socket_t sig, short what, void *data) {
    struct app *app = data;
    (void)sig; (void)what;
    if (app->stopping) return;
    app->stopping = 1;
    evhttp_del_accept_socket(app->http, app->listener); /* no new connections */
    app->listener = NULL;
    if (app->active == 0) shut_down(app);
}

int main(int argc, char **argv) {
    struct app app;
    const char *url = "redis://127.0.0.1:6379";
    int port = 0, opt;
    memset(&app, 0, sizeof(app));
    app.backend_ms = 500;
    app.ttl_s = 60;
    while ((opt = getopt(argc, argv, "p:u:d:t:")) != -1) {
        switch (opt) {
        case 'p': port = atoi(optarg); break;
        case 'u': url = optarg; break;
        case 'd': app.backend_ms = atoi(optarg); break;
        case 't': app.ttl_s = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-p PORT] [-u REDIS_URL] [-d BACKEND_MS] [-t TTL_S]\n", argv[0]);
            return 2;
        }
    }
    app.redis_port = 6379;
    if (sscanf(url, "redis://%255[^:/]:%d", app.redis_host, &app.redis_port) < 1 ||
        app.backend_ms < 0 || app.ttl_s <= 0) {
        fprintf(stderr, "want -u redis://HOST[:PORT], -d >= 0, -t > 0\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN); /* a client that hangs up must not kill us */

    app.base = event_base_new();
    hilock_loop loop;
    hilock_libevent_init(&loop, app.base);
    hilock_config cfg;
    hilock_config_init(&cfg);
    cfg.url = url;
    if (hilock_client_new(&app.locks, &cfg, &loop) != HILOCK_OK) {
        fprintf(stderr, "bad Redis URL %s\n", url);
        return 2;
    }
    cache_connect(&app);

    app.http = evhttp_new(app.base);
    app.listener = evhttp_bind_socket_with_handle(app.http, "127.0.0.1", (ev_uint16_t)port);
    if (app.listener == NULL) {
        fprintf(stderr, "cannot listen on 127.0.0.1:%d\n", port);
        return 1;
    }
    evhttp_set_allowed_methods(app.http, EVHTTP_REQ_GET);
    evhttp_set_gencb(app.http, on_request, &app);

    app.sigint = evsignal_new(app.base, SIGINT, on_signal, &app);
    app.sigterm = evsignal_new(app.base, SIGTERM, on_signal, &app);
    evsignal_add(app.sigint, NULL);
    evsignal_add(app.sigterm, NULL);

    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    getsockname(evhttp_bound_socket_get_fd(app.listener), (struct sockaddr *)&sa, &len);
    printf("listening on 127.0.0.1:%d\n", ntohs(sa.sin_port));

    event_base_dispatch(app.base);
    event_base_free(app.base);
    return 0;
}
