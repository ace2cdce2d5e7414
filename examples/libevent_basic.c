/* libevent_basic: take a distributed lock, do some work, release it.
 *
 *     libevent_basic [REDIS_URL [LOCK_NAME]]
 *
 * REDIS_URL defaults to redis://127.0.0.1:6379 and LOCK_NAME to "example".
 *
 * The whole program is a chain of callbacks on one libevent loop:
 *
 *     main           create the loop, the client, and ask for the lock
 *     on_acquired    we hold the lock: print its fencing token, start "work"
 *     on_work_done   the work (a 100 ms timer) is over: release the lock
 *     on_released    the lock is free again: close the client gracefully
 *     on_closed      the client is gone; nothing is left on the loop, so
 *                    event_base_dispatch() returns and main exits
 *
 * No call blocks: while we wait for the lock (up to 5 s) or work, the loop is
 * free to serve anything else the program does.
 *
 * Build: cc libevent_basic.c $(pkg-config --cflags --libs hilock) -levent
 * (in the source tree, `make` builds it as build/examples/libevent_basic).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include <hilock/hilock.h>
#include <hilock/adapters/libevent.h> /* hilock_libevent_init() */

/* Everything the callbacks share. One per program here; one per request in a
 * real server. */
struct app {
    struct event_base *base;
    hilock_client *client;
    struct event *work;   /* the timer that stands in for real work */
    hilock_hold *hold;    /* the lock, while we have it */
    const char *name;
    int exit_code;        /* what main returns */
};

/* Step 5: the client has closed both of its connections and freed itself.
 * It armed nothing more on the loop, so event_base_dispatch() returns. */
static void on_closed(void *data) {
    struct app *app = data;
    app->client = NULL;
    printf("client closed\n");
}

/* Close the client: pending waits end, holds are released, connections
 * close, then on_closed runs. The loop exits by itself afterwards. */
static void finish(struct app *app, int exit_code) {
    if (exit_code != 0)
        app->exit_code = exit_code;
    hilock_client_close(app->client, on_closed, app);
}

/* Step 4: the release has been answered by Redis. */
static void on_released(int status, void *data) {
    struct app *app = data;
    app->hold = NULL; /* the hold is invalid once this callback has run */
    if (status == HILOCK_OK) {
        printf("released \"%s\"\n", app->name);
        finish(app, 0);
    } else {
        /* HILOCK_ELOST: the key had expired or was taken over before we
         * released it. Anything else: Redis was unreachable; the key then
         * expires by itself after its lease. */
        fprintf(stderr, "release failed: %s (%s)\n", hilock_strerror(status),
                hilock_client_errstr(app->client));
        finish(app, 1);
    }
}

/* Step 3: the work is done; give the lock back. */
static void on_work_done(evutil_socket_t fd, short what, void *data) {
    struct app *app = data;
    (void)fd; (void)what;
    event_free(app->work);
    app->work = NULL;

    /* A real program would check this before committing its work: the
     * watchdog renews the lease, but a long outage can still lose it. */
    if (hilock_hold_lost(app->hold))
        fprintf(stderr, "warning: the lock was lost while working\n");

    printf("work done, releasing\n");
    int rc = hilock_release(app->hold, on_released, app);
    if (rc != HILOCK_OK) {
        fprintf(stderr, "hilock_release: %s\n", hilock_strerror(rc));
        finish(app, 1);
    }
}

/* Step 2: the outcome of the acquire. */
static void on_acquired(hilock_hold *hold, int status, void *data) {
    struct app *app = data;
    if (status != HILOCK_OK) {
        /* HILOCK_ETIMEDOUT: someone else held the lock for all 5 s.
         * HILOCK_ECONN, HILOCK_EAUTH...: Redis trouble. */
        fprintf(stderr, "could not acquire \"%s\": %s", app->name,
                hilock_strerror(status));
        if (*hilock_client_errstr(app->client) != '\0')
            fprintf(stderr, " (%s)", hilock_client_errstr(app->client));
        fprintf(stderr, "\n");
        finish(app, 1);
        return;
    }
    app->hold = hold;
    /* The fencing token grows with every acquisition of this name. Hand it
     * to the resource you protect, so that it can refuse a stale holder. */
    printf("acquired \"%s\", fencing token %llu\n", hilock_hold_name(hold),
           (unsigned long long)hilock_hold_fence(hold));

    /* "Do work" for 100 ms. It is a timer, not a sleep: the loop keeps
     * running (and the hilock watchdog keeps renewing the lease). */
    struct timeval tv = {0, 100 * 1000};
    app->work = evtimer_new(app->base, on_work_done, app);
    if (app->work == NULL || evtimer_add(app->work, &tv) != 0) {
        fprintf(stderr, "cannot start the work timer\n");
        if (app->work != NULL) {
            event_free(app->work);
            app->work = NULL;
        }
        /* Closing the client releases the hold for us. */
        app->hold = NULL;
        finish(app, 1);
        return;
    }
    printf("working...\n");
}

int main(int argc, char **argv) {
    const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    const char *name = argc > 2 ? argv[2] : "example";
    if (argc > 3) {
        fprintf(stderr, "usage: %s [REDIS_URL [LOCK_NAME]]\n", argv[0]);
        return 2;
    }

    setvbuf(stdout, NULL, _IOLBF, 0); /* keep stdout and stderr in order */
    struct app app;
    memset(&app, 0, sizeof app);
    app.name = name;

    /* Step 1a: the event loop, and hilock's view of it. */
    app.base = event_base_new();
    if (app.base == NULL) {
        fprintf(stderr, "event_base_new failed\n");
        return 1;
    }
    hilock_loop loop;
    hilock_libevent_init(&loop, app.base);

    /* Step 1b: the client. It connects in the background: a Redis that
     * cannot be reached shows up as an error in on_acquired, not here. */
    hilock_config cfg;
    hilock_config_init(&cfg);
    cfg.url = url;
    int rc = hilock_client_new(&app.client, &cfg, &loop);
    if (rc != HILOCK_OK) {
        fprintf(stderr, "hilock_client_new(\"%s\"): %s\n", url, hilock_strerror(rc));
        event_base_free(app.base);
        return 1;
    }

    /* Step 1c: ask for the lock. Wait at most 5 s. The lease stays at
     * HILOCK_LEASE_DEFAULT, the client's default_lease_ms (30 s), renewed by
     * the watchdog while we hold the lock. */
    hilock_acquire_opts opts;
    hilock_acquire_opts_init(&opts);
    opts.wait_ms = 5000;
    rc = hilock_acquire(app.client, name, &opts, on_acquired, &app, NULL);
    if (rc != HILOCK_OK) {
        /* Bad input is refused at once; the callback will not run. */
        fprintf(stderr, "hilock_acquire(\"%s\"): %s\n", name, hilock_strerror(rc));
        hilock_client_free(app.client);
        event_base_free(app.base);
        return 1;
    }
    printf("waiting for \"%s\" on %s\n", name, url);

    /* Run until nothing is left on the loop: on_closed is the last step. */
    event_base_dispatch(app.base);

    if (app.client != NULL) {
        /* Only if the loop stopped early (it should not). */
        fprintf(stderr, "the loop stopped before the client closed\n");
        hilock_client_free(app.client);
        app.exit_code = 1;
    }
    event_base_free(app.base);
    return app.exit_code;
}
