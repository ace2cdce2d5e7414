/* libuv_basic: take a distributed lock on a libuv loop, work, release.
 *
 *     libuv_basic [REDIS_URL [LOCK_NAME]]
 *
 * REDIS_URL defaults to redis://127.0.0.1:6379 and LOCK_NAME to "example".
 * The same program as libevent_basic.c, on libuv: only the loop calls differ.
 *
 *     main           the loop, the client, ask for the lock, uv_run()
 *     on_acquired    we hold the lock: print the fencing token, start "work"
 *     on_work_done   the work (a 100 ms uv_timer_t) is over: release
 *     on_released    the lock is free: close the client gracefully
 *     on_closed      the client is gone; nothing is left on the loop, so
 *                    uv_run() returns and main exits
 *
 * libuv frees handles in close callbacks, on a later turn of the loop. The
 * loop is therefore run to its end before uv_loop_close(), and the work
 * timer is closed (not only stopped) once it is done.
 *
 * Build: cc libuv_basic.c $(pkg-config --cflags --libs hilock) -luv
 *        (in this tree: make, which builds build/examples/libuv_basic)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include <hilock/hilock.h>
#include <hilock/adapters/libuv.h>

struct app {
    uv_loop_t loop;
    hilock_client *client;
    uv_timer_t work;      /* stands in for real work */
    int work_open;        /* work has been uv_timer_init()ed, not yet closed */
    hilock_hold *hold;    /* the lock, while we have it */
    const char *name;
    int exit_code;
};

static void on_closed(void *data) {
    struct app *app = data;
    app->client = NULL;
    printf("client closed\n");
}

/* Pending waits end, holds are released, connections close, on_closed runs. */
static void finish(struct app *app, int exit_code) {
    if (exit_code != 0) app->exit_code = exit_code;
    if (app->work_open) {
        uv_close((uv_handle_t *)&app->work, NULL);
        app->work_open = 0;
    }
    hilock_client_close(app->client, on_closed, app);
}

static void on_released(int status, void *data) {
    struct app *app = data;
    app->hold = NULL; /* invalid once this callback has run */
    if (status != HILOCK_OK) {
        /* HILOCK_ELOST: it had expired or was taken over. Otherwise Redis
         * was unreachable, and the key expires after its lease. */
        fprintf(stderr, "release failed: %s\n", hilock_strerror(status));
        finish(app, 1);
        return;
    }
    printf("released \"%s\"\n", app->name);
    finish(app, 0);
}

static void on_work_done(uv_timer_t *t) {
    struct app *app = t->data;
    if (hilock_hold_lost(app->hold))
        fprintf(stderr, "warning: the lock was lost while working\n");
    printf("work done, releasing\n");
    int rc = hilock_release(app->hold, on_released, app);
    if (rc != HILOCK_OK) {
        fprintf(stderr, "hilock_release: %s\n", hilock_strerror(rc));
        finish(app, 1);
    }
}

static void on_acquired(hilock_hold *hold, int status, void *data) {
    struct app *app = data;
    if (status != HILOCK_OK) {
        /* HILOCK_ETIMEDOUT: held elsewhere for all 5 s; HILOCK_ECONN...:
         * Redis trouble, with details in hilock_client_errstr(). */
        fprintf(stderr, "could not acquire \"%s\": %s %s\n", app->name,
                hilock_strerror(status), hilock_client_errstr(app->client));
        finish(app, 1);
        return;
    }
    app->hold = hold;
    /* Hand the fencing token to the resource you protect. */
    printf("acquired \"%s\", fencing token %llu\n", hilock_hold_name(hold),
           (unsigned long long)hilock_hold_fence(hold));
    /* 100 ms of "work" on a timer, not a sleep: the loop keeps running and
     * the watchdog keeps renewing the lease. */
    if (uv_timer_init(&app->loop, &app->work) != 0) {
        finish(app, 1); /* closing the client releases the hold */
        return;
    }
    app->work_open = 1;
    app->work.data = app;
    uv_timer_start(&app->work, on_work_done, 100, 0);
    printf("working...\n");
}

int main(int argc, char **argv) {
    const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    const char *name = argc > 2 ? argv[2] : "example";
    if (argc > 3) {
        fprintf(stderr, "usage: %s [REDIS_URL [LOCK_NAME]]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    struct app app;
    memset(&app, 0, sizeof app);
    app.name = name;
    if (uv_loop_init(&app.loop) != 0) { /* or uv_default_loop() */
        fprintf(stderr, "uv_loop_init failed\n");
        return 1;
    }

    /* hilock's view of the loop, then the client (it connects in the
     * background: an unreachable Redis shows up in on_acquired). */
    hilock_loop hl;
    hilock_libuv_init(&hl, &app.loop);
    hilock_config cfg;
    hilock_config_init(&cfg);
    cfg.url = url;
    int rc = hilock_client_new(&app.client, &cfg, &hl);
    if (rc == HILOCK_OK) {
        hilock_acquire_opts opts;
        hilock_acquire_opts_init(&opts);
        opts.wait_ms = 5000;
        rc = hilock_acquire(app.client, name, &opts, on_acquired, &app, NULL);
        if (rc != HILOCK_OK) {
            fprintf(stderr, "hilock_acquire(\"%s\"): %s\n", name, hilock_strerror(rc));
            hilock_client_free(app.client);
            app.client = NULL;
            app.exit_code = 1;
        } else {
            printf("waiting for \"%s\" on %s\n", name, url);
        }
    } else {
        fprintf(stderr, "hilock_client_new(\"%s\"): %s\n", url, hilock_strerror(rc));
        app.exit_code = 1;
    }

    /* Runs until nothing is left: after on_closed, and after the close
     * callbacks of every handle (also those of a freed client). */
    uv_run(&app.loop, UV_RUN_DEFAULT);

    if (app.client != NULL) { /* only if the loop stopped early */
        hilock_client_free(app.client);
        uv_run(&app.loop, UV_RUN_DEFAULT);
        app.exit_code = 1;
    }
    if (uv_loop_close(&app.loop) != 0) {
        fprintf(stderr, "uv_loop_close: handles left open\n");
        app.exit_code = 1;
    }
    return app.exit_code;
}
