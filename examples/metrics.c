/* metrics: what a server would expose at /metrics, after some contention.
 *
 *     metrics [REDIS_URL [LOCK_NAME [WAITERS]]]
 *
 * REDIS_URL defaults to redis://127.0.0.1:6379, LOCK_NAME to "metrics" and
 * WAITERS to 20. WAITERS requests ask for the lock at once; each holds it
 * for 2 ms and gives it back, so all but the first wait their turn. When
 * the last is done, the program prints the client's statistics as
 * Prometheus text (hilock_client_stats, hilock_stats_prometheus) and
 * closes the client. Warnings the library has (a lost connection, a slow
 * server) come through the log callback, on stderr here.
 *
 * Build: cc metrics.c $(pkg-config --cflags --libs hilock) -levent
 * (in the source tree, `make` builds it as build/examples/metrics).
 */
#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>

#include <hilock/hilock.h>
#include <hilock/adapters/libevent.h>

struct app {
    struct event_base *base;
    hilock_client *client;
    int left;      /* requests not done yet */
    int failed;
};

/* One request: it waits, holds the lock for 2 ms, gives it back. */
struct req {
    struct app *app;
    struct event *work;
    hilock_hold *hold;
};

static void on_log(int level, const char *msg, void *data) {
    (void)data;
    fprintf(stderr, "hilock %s: %s\n", level == HILOCK_LOG_ERROR ? "error"
                                       : level == HILOCK_LOG_WARNING ? "warning" : "info", msg);
}

/* Print the statistics: size the text, then write it. */
static void print_metrics(hilock_client *c) {
    hilock_stats s;
    hilock_stats_init(&s);
    if (hilock_client_stats(c, &s) != 0) return;
    const hilock_stats *all[] = {&s};
    const char *labels[] = {"app=\"metrics\""};
    int len = hilock_stats_prometheus(NULL, 0, all, labels, 1);
    char *text = len > 0 ? malloc((size_t)len + 1) : NULL;
    if (text == NULL) return;
    hilock_stats_prometheus(text, (size_t)len + 1, all, labels, 1);
    fputs(text, stdout);
    free(text);
}

static void request_done(struct req *q, int ok) {
    struct app *app = q->app;
    if (q->work) event_free(q->work);
    free(q);
    if (!ok) app->failed++;
    if (--app->left > 0) return;
    print_metrics(app->client);
    hilock_client_close(app->client, NULL, NULL); /* the loop ends after it */
}

static void on_released(int status, void *data) {
    request_done(data, status == 0);
}

static void on_work_done(evutil_socket_t fd, short what, void *data) {
    struct req *q = data;
    (void)fd; (void)what;
    if (hilock_release(q->hold, on_released, q) != 0) request_done(q, 0);
}

static void on_acquired(hilock_hold *hold, int status, void *data) {
    struct req *q = data;
    if (status != 0) {
        fprintf(stderr, "metrics: %s (%s)\n", hilock_strerror(status), hilock_client_errstr(q->app->client));
        request_done(q, 0);
        return;
    }
    struct timeval two_ms = {0, 2000};
    q->hold = hold;
    q->work = evtimer_new(q->app->base, on_work_done, q);
    if (q->work == NULL || evtimer_add(q->work, &two_ms) != 0) on_work_done(-1, 0, q);
}

int main(int argc, char **argv) {
    struct app app = {0};
    const char *name = argc > 2 ? argv[2] : "metrics";
    int waiters = argc > 3 ? atoi(argv[3]) : 20;
    hilock_config cfg;
    hilock_loop loop;
    hilock_acquire_opts opts;

    if (waiters < 1) waiters = 1;
    app.base = event_base_new();
    if (app.base == NULL) return 1;
    hilock_libevent_init(&loop, app.base);
    hilock_config_init(&cfg);
    cfg.url = argc > 1 ? argv[1] : NULL;
    cfg.log_cb = on_log;
    int rc = hilock_client_new(&app.client, &cfg, &loop);
    if (rc != 0) {
        fprintf(stderr, "metrics: %s\n", hilock_strerror(rc));
        event_base_free(app.base);
        return 1;
    }
    hilock_acquire_opts_init(&opts);
    opts.wait_ms = 10000;
    app.left = waiters;
    for (int i = 0; i < waiters; i++) {
        struct req *q = calloc(1, sizeof(*q));
        if (q != NULL) q->app = &app;
        if (q == NULL || hilock_acquire(app.client, name, &opts, on_acquired, q, NULL) != 0) {
            free(q);
            app.failed++;
            if (--app.left == 0) hilock_client_close(app.client, NULL, NULL);
        }
    }
    event_base_dispatch(app.base);
    event_base_free(app.base);
    return app.failed ? 1 : 0;
}
