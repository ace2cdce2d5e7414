/* ngx_http_hilock_module under attack: what tests/test_nginx.c does not
 * cover (requests that reach the lock after a graceful shutdown began,
 * odd lock names, error_page on a timeout, keepalive with aborts, stats
 * under load). A real nginx with the module on a real redis-server, in
 * front of the harness's backend (overlaps per key, fences). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hilock/hilock.h"
#include "support/harness.h"
#include "support/promcheck.h"
#include "support/nginx.h"

static test_redis R;
static test_backend B;
static test_nginx N;

static void setup(void) {
    test_http_rlimit();
    cr_assert_eq(test_redis_start(&R, 0, NULL), 0, "redis-server did not start");
    cr_assert_eq(test_backend_start(&B), 0, "the backend did not start");
}

static void teardown(void) {
    test_nginx_free(&N);
    test_backend_stop(&B, 2000);
    test_redis_stop(&R);
}

TestSuite(nginx_attack, .init = setup, .fini = teardown, .timeout = 60);

#define SHOW                                                                   \
    "add_header X-Hilock-Status $hilock_status always;"                        \
    "add_header X-Hilock-Fence $hilock_fence always;"                          \
    "proxy_set_header X-Fence $hilock_fence;"

/* /sa/ asks a slow auth_request (the backend's key "sa", `ms` from the
 * main request's arg) before it takes its lock: the request is in the
 * access phase, not yet at the lock, for that long. */
static void start(int workers, const char *extra) {
    char http[256], server[4096];
    int bp = B.port;
    snprintf(http, sizeof(http), "hilock_redis %s;", R.url);
    snprintf(server, sizeof(server),
             "location /k/ { hilock k:$arg_key wait=20s; " SHOW " proxy_pass http://127.0.0.1:%d; }\n"
             "location /sa/ { auth_request /slowauth; hilock k:$arg_key wait=20s; " SHOW
             " proxy_pass http://127.0.0.1:%d; }\n"
             "location = /slowauth { internal; proxy_pass http://127.0.0.1:%d/auth?key=sa&ms=1000; }\n"
             "%s",
             bp, bp, bp, extra);
    cr_assert_eq(test_nginx_start(&N, workers, http, server), 0, "nginx did not start");
}

static long long key_exists(const char *name) {
    char key[HILOCK_NAME_MAX * 3 + 64];
    hilock_key("hilock:", name, key, sizeof(key));
    return test_redis_int(&R, "EXISTS %s", key);
}

static int lock_gone(const char *name) {
    for (long long until = test_now_ms() + 1000; test_now_ms() < until; test_msleep(5))
        if (key_exists(name) == 0) return 1;
    return 0;
}

static int backend_inflight(const char *name, int n, int ms) {
    for (long long until = test_now_ms() + ms; test_now_ms() < until; test_msleep(5))
        if (test_backend_key_get(&B, name).inflight == n) return 1;
    return 0;
}

static void no_problems(void) {
    char problems[2048];
    cr_expect_eq(test_nginx_problems(&N, problems, sizeof(problems)), 0, "nginx logged:\n%s", problems);
}

/* A request still in the access phase (a slow auth_request) when the
 * worker is told to shut down gracefully (here: a reload) reaches the
 * lock afterwards: the old worker must still lock it and serve it, as it
 * serves the requests that already waited or held. */
Test(nginx_attack, reload_while_a_request_is_before_the_lock_phase) {
    test_http h, after;
    char st[32];
    pid_t old[8];
    start(1, "");
    cr_assert_eq(test_http_send(&h, N.port, "/sa/?key=pre&ms=0"), 0);
    cr_assert(backend_inflight("sa", 1, 5000), "the auth subrequest never reached the backend");
    int nold = test_nginx_workers(&N, old, 8);
    kill(N.pid, SIGHUP);
    cr_assert_eq(test_http_wait(&h, 1, 10000), 0, "the request hangs across the reload");
    cr_expect_eq(h.status, 200, "the old worker answered %d (lock %s) to a request it had begun",
                 h.status, test_http_header(&h, "X-Hilock-Status", st, sizeof(st)));
    cr_expect_eq(test_backend_key_get(&B, "pre").served, 1);
    cr_assert_eq(test_nginx_wait_new_workers(&N, old, nold, 1, 15000), 0,
                 "the old worker did not exit after the reload");
    cr_expect(lock_gone("k:pre"), "the lock of k:pre is left behind");
    cr_expect_eq(test_http_get(&after, N.port, "/k/?key=pre&ms=0", 5000), 200, "the new worker locks");
    cr_expect_eq(test_nginx_quit(&N, 15000), 0);
    no_problems();
}

/* The same with nginx -s quit: the request is served before the worker
 * exits, with its lock. */
Test(nginx_attack, quit_while_a_request_is_before_the_lock_phase) {
    test_http h;
    char st[32];
    start(1, "");
    cr_assert_eq(test_http_send(&h, N.port, "/sa/?key=preq&ms=0"), 0);
    cr_assert(backend_inflight("sa", 1, 5000), "the auth subrequest never reached the backend");
    kill(N.pid, SIGQUIT);
    cr_assert_eq(test_http_wait(&h, 1, 10000), 0, "the request hangs across the quit");
    cr_expect_eq(h.status, 200, "the quitting worker answered %d (lock %s)", h.status,
                 test_http_header(&h, "X-Hilock-Status", st, sizeof(st)));
    cr_expect_eq(test_nginx_quit(&N, 15000), 0);
    cr_expect(lock_gone("k:preq"), "the lock of k:preq is left behind");
    no_problems();
}
