/* ngx_http_hilock_module in a real nginx (Debian's, the module built by
 * `make nginx-module`), on a real redis-server, in front of a backend that
 * records overlaps per key and the fences it is given. */
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

#define NGX_MAX 3

static test_redis R;
static test_backend B;
static test_nginx N[NGX_MAX];

static void setup(void) {
    test_http_rlimit();
    cr_assert_eq(test_redis_start(&R, 0, NULL), 0, "redis-server did not start");
    cr_assert_eq(test_backend_start(&B), 0, "the backend did not start");
}

static void teardown(void) {
    for (int i = 0; i < NGX_MAX; i++) test_nginx_free(&N[i]);
    test_backend_stop(&B, 2000);
    test_redis_stop(&R);
}

TestSuite(nginx, .init = setup, .fini = teardown, .timeout = 90);

/* The headers every locked location adds, so a test sees the variables. */
#define SHOW                                                                   \
    "add_header X-Hilock-Status $hilock_status always;"                        \
    "add_header X-Hilock-Fence $hilock_fence always;"                          \
    "add_header X-Hilock-Wait $hilock_wait_ms always;"                         \
    "proxy_set_header X-Fence $hilock_fence;"

/* One server's locations: /k/ waits up to 20 s, /short/ 200 ms (429 when
 * it runs out), /try/ tries once (409), /lease/ holds with a 1 s lease,
 * /plain/ takes no lock; all proxy to the backend. `extra` goes into the
 * server too. */
static void start_nginx_with(test_nginx *n, int workers, const char *redis_url, const char *extra) {
    char http[256], server[4096];
    int bp = B.port;
    snprintf(http, sizeof(http), "hilock_redis %s;", redis_url);
    snprintf(server, sizeof(server),
             "location /k/ { hilock k:$arg_key wait=20s; " SHOW " proxy_pass http://127.0.0.1:%d; }\n"
             "location /short/ { hilock k:$arg_key wait=200ms; hilock_timeout_status 429; " SHOW
             " proxy_pass http://127.0.0.1:%d; }\n"
             "location /try/ { hilock k:$arg_key wait=0; hilock_timeout_status 409; " SHOW
             " proxy_pass http://127.0.0.1:%d; }\n"
             "location /lease/ { hilock k:$arg_key wait=20s lease=1s; " SHOW
             " proxy_pass http://127.0.0.1:%d; }\n"
             "location /err/ { hilock k:$arg_key wait=2s; hilock_error_status 502; " SHOW
             " proxy_pass http://127.0.0.1:%d; }\n"
             "location /open/ { hilock k:$arg_key wait=2s; hilock_fail_open on; " SHOW
             " proxy_pass http://127.0.0.1:%d; }\n"
             "location /r/ { hilock k:$arg_key wait=20s; try_files /nonexistent @up; }\n"
             "location @up { " SHOW " proxy_pass http://127.0.0.1:%d; }\n"
             "location /a/ { auth_request /auth; hilock k:$arg_key wait=20s; " SHOW
             " proxy_pass http://127.0.0.1:%d; }\n"
             "location = /auth { internal; hilock auth wait=20s; " SHOW
             " proxy_pass http://127.0.0.1:%d/auth?key=auth&ms=100; }\n"
             "location /plain/ { proxy_pass http://127.0.0.1:%d; }\n"
             "location /keep/ { hilock k:$arg_key wait=20s; proxy_ignore_client_abort on; " SHOW
             " proxy_pass http://127.0.0.1:%d; }\n%s",
             bp, bp, bp, bp, bp, bp, bp, bp, bp, bp, bp, extra);
    cr_assert_eq(test_nginx_start(n, workers, http, server), 0, "nginx did not start");
}

static void start_nginx(test_nginx *n, int workers, const char *redis_url) {
    start_nginx_with(n, workers, redis_url, "");
}

/* Send reqs[i] to path on N[i % nn]; */
static void send_all(test_http *h, int count, int nn, const char *fmt, const char *key, int ms) {
    char path[256];
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof(path), fmt, key, ms);
        cr_assert_eq(test_http_send(&h[i], N[i % nn].port, path), 0, "request %d not sent", i);
    }
}

static int count_status(const test_http *h, int count, int status) {
    int k = 0;
    for (int i = 0; i < count; i++) k += h[i].status == status;
    return k;
}

static long long key_exists(const char *name) {
    char key[HILOCK_NAME_MAX * 3 + 64];
    hilock_key("hilock:", name, key, sizeof(key));
    return test_redis_int(&R, "EXISTS %s", key);
}

/* Is the lock of `name` gone within a second? A request's reply goes out
 * before its pool's cleanup sends the release, so a client may see the
 * reply a moment before Redis sees the release. */
static int lock_gone(const char *name) {
    for (long long until = test_now_ms() + 1000; test_now_ms() < until; test_msleep(5))
        if (key_exists(name) == 0) return 1;
    return 0;
}

/* Stop every nginx gracefully; none may say anything went wrong. */
static void quit_clean(int nn) {
    char problems[2048];
    for (int i = 0; i < nn; i++) {
        cr_expect_eq(test_nginx_quit(&N[i], 15000), 0, "nginx %d did not quit within 15 s", i);
        cr_expect_eq(test_nginx_problems(&N[i], problems, sizeof(problems)), 0,
                     "nginx %d logged:\n%s", i, problems);
    }
}

/* Poll until key `name` has `n` requests at the backend. */
static int backend_inflight(const char *name, int n, int ms) {
    for (long long until = test_now_ms() + ms; test_now_ms() < until; test_msleep(5))
        if (test_backend_key_get(&B, name).inflight == n) return 1;
    return 0;
}

/* h[0] holds `key` at the backend for hold_ms (on N[0]), and h[1..w] wait
 * behind it, each to take ms there once its turn comes; `settle` ms later
 * the waiters are queued in nginx. */
static void hold_and_queue(test_http *h, int w, const char *key, int hold_ms, int ms, int settle) {
    char path[128];
    snprintf(path, sizeof(path), "/k/?key=%s&ms=%d", key, hold_ms);
    cr_assert_eq(test_http_send(&h[0], N[0].port, path), 0);
    cr_assert(backend_inflight(key, 1, 5000), "the holder never reached the backend");
    send_all(h + 1, w, 1, "/k/?key=%s&ms=%d", key, ms);
    test_msleep(settle);
}

/* Three nginx, two workers each, on one Redis: requests for one key never
 * overlap at the backend, all get 200, fences strictly increase; another
 * key's requests run beside them. */
Test(nginx, serialises_across_three_instances) {
    enum { ONE = 90, TWO = 30 };
    static test_http h[ONE + TWO];
    for (int i = 0; i < 3; i++) start_nginx(&N[i], 2, R.url);
    send_all(h, ONE, 3, "/k/?key=%s&ms=%d", "one", 5);
    send_all(h + ONE, TWO, 3, "/k/?key=%s&ms=%d", "two", 5);
    cr_assert_eq(test_http_wait(h, ONE + TWO, 60000), 0, "requests still waiting after 60 s");
    cr_expect_eq(count_status(h, ONE + TWO, 200), ONE + TWO, "every request gets 200");
    test_backend_key one = test_backend_key_get(&B, "one"), two = test_backend_key_get(&B, "two");
    cr_expect_eq(one.served, ONE);
    cr_expect_eq(two.served, TWO);
    cr_expect_eq(one.overlaps, 0, "the backend saw %d overlaps of one key", one.overlaps);
    cr_expect_eq(two.overlaps, 0);
    cr_expect_eq(one.fence_errors + two.fence_errors, 0, "fences that did not increase");
    cr_expect_eq(B.no_fence, 0, "requests without a fence");
    cr_expect_geq(B.max_inflight, 2, "two keys are served at once");
    char v[64];
    cr_expect_str_eq(test_http_header(&h[0], "X-Hilock-Status", v, sizeof(v)), "acquired");
    cr_expect_neq(test_http_header(&h[0], "X-Hilock-Wait", v, sizeof(v))[0], '\0');
    cr_expect(lock_gone("k:one") && lock_gone("k:two"), "a lock left behind");
    quit_clean(3);
}

/* Thousands of waiting requests per worker: 500 here, in one worker. */
Test(nginx, many_waiters_in_one_worker) {
    enum { W = 500 };
    static test_http h[W + 1];
    start_nginx(&N[0], 1, R.url);
    hold_and_queue(h, W, "many", 1000, 0, 300);
    cr_expect_eq(test_backend_key_get(&B, "many").served, 0, "a waiter was served while the lock was held");
    cr_assert_eq(test_http_wait(h, W + 1, 60000), 0, "requests still waiting after 60 s");
    cr_expect_eq(count_status(h, W + 1, 200), W + 1);
    test_backend_key k = test_backend_key_get(&B, "many");
    cr_expect_eq(k.served, W + 1);
    cr_expect_eq(k.overlaps, 0);
    cr_expect_eq(k.fence_errors, 0);
    cr_expect(lock_gone("k:many"), "the lock of k:many is left behind");
    quit_clean(1);
}

/* A wait that runs out gives hilock_timeout_status; wait=0 tries once. */
Test(nginx, timeout_gives_the_configured_status) {
    test_http hold, t, once, after;
    char v[64];
    start_nginx(&N[0], 2, R.url);
    cr_assert_eq(test_http_send(&hold, N[0].port, "/k/?key=busy&ms=1500"), 0);
    cr_assert(backend_inflight("busy", 1, 5000));
    cr_expect_eq(test_http_get(&t, N[0].port, "/short/?key=busy", 5000), 429);
    cr_expect_str_eq(test_http_header(&t, "X-Hilock-Status", v, sizeof(v)), "timeout");
    cr_expect_geq(t.done_ms - t.sent_ms, 150, "ran out after %lld ms, before wait=200ms",
                  t.done_ms - t.sent_ms);
    cr_expect_eq(test_http_get(&once, N[0].port, "/try/?key=busy", 5000), 409);
    cr_expect_lt(once.done_ms - once.sent_ms, 1000, "wait=0 waited %lld ms", once.done_ms - once.sent_ms);
    cr_expect_eq(test_http_wait(&hold, 1, 10000), 0);
    cr_expect_eq(hold.status, 200);
    cr_expect_eq(test_http_get(&after, N[0].port, "/try/?key=busy", 5000), 200, "free again");
    cr_expect_eq(test_backend_key_get(&B, "busy").served, 2, "timed-out requests never reach the backend");
    cr_expect(lock_gone("k:busy"), "the lock of k:busy is left behind");
    quit_clean(1);
}

/* Redis is down: hilock_error_status, or served without the lock with
 * hilock_fail_open. */
Test(nginx, redis_down_gives_error_status_or_fails_open) {
    test_http e, o, k;
    char url[64], v[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d timeout=300ms", test_refused_port());
    start_nginx(&N[0], 1, url);
    cr_expect_eq(test_http_get(&e, N[0].port, "/err/?key=x", 10000), 502);
    cr_expect_str_eq(test_http_header(&e, "X-Hilock-Status", v, sizeof(v)), "error");
    cr_expect_eq(test_http_get(&o, N[0].port, "/open/?key=x", 10000), 200);
    cr_expect_str_eq(test_http_header(&o, "X-Hilock-Status", v, sizeof(v)), "error");
    cr_expect_str_eq(test_http_header(&o, "X-Hilock-Fence", v, sizeof(v)), "", "no fence without a lock");
    cr_expect_eq(test_http_get(&k, N[0].port, "/k/?key=x", 10000), 503, "the default error status");
    cr_expect_lt(k.done_ms - k.sent_ms, 1500, "timeout=300ms: the error came after %lld ms",
                 k.done_ms - k.sent_ms);
    cr_expect_eq(test_backend_key_get(&B, "x").served, 1, "only the fail-open request is served");
    quit_clean(1);
}

/* Clients that go away while waiting take nothing with them: the lock is
 * handed to the one that stayed, and nothing is left in Redis. */
Test(nginx, client_abort_while_waiting_leaves_no_lock) {
    enum { W = 50 };
    static test_http h[W + 1];
    start_nginx(&N[0], 2, R.url);
    hold_and_queue(h, W, "ab", 800, 0, 200);
    for (int i = 1; i < W; i++) test_http_abort(&h[i]);
    cr_assert_eq(test_http_wait(h, W + 1, 10000), 0);
    cr_expect_eq(h[0].status, 200);
    cr_expect_eq(h[W].status, 200, "the waiter that stayed is served");
    cr_expect_lt(h[W].done_ms - h[0].done_ms, 2000, "served %lld ms after the release",
                 h[W].done_ms - h[0].done_ms);
    cr_expect_eq(test_backend_key_get(&B, "ab").served, 2, "aborted waiters never reach the backend");
    cr_expect(lock_gone("k:ab"), "the lock of k:ab is left behind");
    quit_clean(1);
}

/* A client that goes away while its request is served frees the lock at
 * once, not when the backend is done. */
Test(nginx, client_abort_while_served_releases_at_once) {
    test_http hold, next;
    start_nginx(&N[0], 1, R.url);
    cr_assert_eq(test_http_send(&hold, N[0].port, "/k/?key=srv&ms=5000"), 0);
    cr_assert(backend_inflight("srv", 1, 5000));
    cr_expect_eq(key_exists("k:srv"), 1);
    long long t0 = test_now_ms();
    test_http_abort(&hold);
    cr_expect_eq(test_http_get(&next, N[0].port, "/k/?key=srv&ms=0", 10000), 200);
    cr_expect_lt(next.done_ms - t0, 2000, "the lock came back %lld ms after the abort", next.done_ms - t0);
    cr_expect(lock_gone("k:srv"), "the lock of k:srv is left behind");
    quit_clean(1);
}

/* With proxy_ignore_client_abort on, nginx lets the backend finish a
 * request whose client went away, and the lock stays until then: the next
 * request for the key never reaches the backend beside it. */
Test(nginx, client_abort_with_ignore_client_abort_keeps_the_lock_until_the_backend_is_done) {
    test_http hold, next;
    start_nginx(&N[0], 1, R.url);
    cr_assert_eq(test_http_send(&hold, N[0].port, "/keep/?key=keep&ms=1200"), 0);
    cr_assert(backend_inflight("keep", 1, 5000));
    long long t0 = test_now_ms();
    test_http_abort(&hold);
    cr_assert_eq(test_http_send(&next, N[0].port, "/keep/?key=keep&ms=0"), 0);
    test_msleep(400);
    cr_expect_eq(key_exists("k:keep"), 1, "the lock went with the client, not with the backend's work");
    cr_expect_eq(test_http_wait(&next, 1, 10000), 0);
    cr_expect_eq(next.status, 200);
    cr_expect_geq(next.done_ms - t0, 700, "the next request was served %lld ms after the abort, before "
                  "the backend was done", next.done_ms - t0);
    test_backend_key k = test_backend_key_get(&B, "keep");
    cr_expect_eq(k.served, 2);
    cr_expect_eq(k.overlaps, 0);
    cr_expect(lock_gone("k:keep"), "the lock of k:keep is left behind");
    quit_clean(1);
}

/* nginx -s reload while a request holds and others wait: every one is
 * served (by the old workers), the new workers lock too, nothing is left,
 * no alert. */
Test(nginx, reload_with_waiters) {
    enum { W = 20 };
    static test_http h[W + 1];
    test_http after;
    pid_t old[8];
    start_nginx(&N[0], 2, R.url);
    hold_and_queue(h, W, "rl", 800, 5, 100);
    int nold = test_nginx_workers(&N[0], old, 8);
    kill(N[0].pid, SIGHUP);
    cr_assert_eq(test_nginx_wait_new_workers(&N[0], old, nold, 2, 15000), 0,
                 "the old workers did not exit after the reload");
    cr_assert_eq(test_http_wait(h, W + 1, 10000), 0);
    cr_expect_eq(count_status(h, W + 1, 200), W + 1, "every waiter is served across the reload");
    test_backend_key k = test_backend_key_get(&B, "rl");
    cr_expect_eq(k.overlaps, 0);
    cr_expect_eq(k.fence_errors, 0);
    cr_expect_eq(test_http_get(&after, N[0].port, "/k/?key=rl&ms=0", 5000), 200, "the new workers lock");
    cr_expect(lock_gone("k:rl"), "the lock of k:rl is left behind");
    quit_clean(1);
}

/* nginx -s quit while a request holds and others wait: they are served
 * before the workers exit; nothing is left, no alert. */
Test(nginx, quit_with_waiters) {
    enum { W = 20 };
    static test_http h[W + 1];
    char problems[2048];
    start_nginx(&N[0], 2, R.url);
    hold_and_queue(h, W, "q", 800, 5, 100);
    kill(N[0].pid, SIGQUIT);
    cr_assert_eq(test_http_wait(h, W + 1, 15000), 0);
    cr_expect_eq(count_status(h, W + 1, 200), W + 1, "every waiter is served before the exit");
    cr_expect_eq(test_nginx_quit(&N[0], 15000), 0, "nginx did not exit");
    cr_expect_eq(test_nginx_problems(&N[0], problems, sizeof(problems)), 0, "nginx logged:\n%s", problems);
    cr_expect_eq(test_backend_key_get(&B, "q").overlaps, 0);
    cr_expect(lock_gone("k:q"), "the lock of k:q is left behind");
}

/* nginx -s quit while a hot key churns and every client goes away at
 * once (ab's exit): waits end with tries still in flight, and their
 * grants must be given back before the workers exit, not left for the
 * lease (30 s) to run out. */
Test(nginx, quit_while_clients_leave_a_hot_key_leaves_no_lock) {
    enum { C = 120, ROUNDS = 16 };
    static test_http h[C];
    for (int round = 0; round < ROUNDS; round++) {
        char problems[2048];
        start_nginx(&N[0], 2, R.url);
        send_all(h, C, 1, "/k/?key=%s&ms=%d", "qhot", 0);
        test_http_wait(h, C, 30 + round * 20);
        kill(N[0].pid, SIGQUIT);
        for (int i = 0; i < C; i++) test_http_abort(&h[i]);
        cr_assert_eq(test_nginx_quit(&N[0], 15000), 0, "round %d: nginx did not quit", round);
        cr_expect_eq(test_nginx_problems(&N[0], problems, sizeof(problems)), 0, "nginx logged:\n%s", problems);
        cr_assert(lock_gone("k:qhot"), "round %d: a lock is left for its lease after the workers exited", round);
        test_nginx_free(&N[0]);
    }
    cr_expect_eq(test_backend_key_get(&B, "qhot").overlaps, 0);
}

/* A worker killed (kill -9) while it holds: the others get the lock when
 * its lease runs out (lease=1s), with a larger fence; the master's new
 * worker locks again. */
Test(nginx, worker_killed_while_holding_frees_after_the_lease) {
    test_http hold, other, again;
    pid_t w[8];
    start_nginx(&N[0], 1, R.url);
    start_nginx(&N[1], 1, R.url);
    cr_assert_eq(test_http_send(&hold, N[0].port, "/lease/?key=kw&ms=8000"), 0);
    cr_assert(backend_inflight("kw", 1, 5000));
    cr_assert_eq(test_nginx_workers(&N[0], w, 8), 1);
    test_msleep(700); /* past a renewal: the lease was extended once */
    N[0].killed_worker = 1;
    long long t0 = test_now_ms();
    kill(w[0], SIGKILL);
    cr_expect_eq(test_http_get(&other, N[1].port, "/lease/?key=kw&ms=0", 10000), 200);
    long long took = other.done_ms - t0;
    cr_expect_geq(took, 200, "the lock was free %lld ms after the kill, within its lease", took);
    cr_expect_lt(took, 3000, "the lock came back %lld ms after the kill (lease 1 s)", took);
    cr_expect_eq(test_backend_key_get(&B, "kw").fence_errors, 0, "the next fence is larger");
    cr_expect_eq(test_http_wait(&hold, 1, 5000), 0);
    cr_expect_eq(hold.status, -1, "the killed worker's client got no reply");
    cr_assert_eq(test_nginx_wait_new_workers(&N[0], w, 1, 1, 10000), 0, "no new worker");
    cr_expect_eq(test_http_get(&again, N[0].port, "/lease/?key=kw2&ms=0", 10000), 200);
    quit_clean(2);
}

/* After an internal redirect the request keeps its one lock to the end;
 * subrequests (auth_request) take none. */
Test(nginx, internal_redirects_keep_the_lock_subrequests_take_none) {
    enum { C = 10 };
    static test_http h[C], a[C];
    start_nginx(&N[0], 1, R.url);
    send_all(h, C, 1, "/r/?key=%s&ms=%d", "redir", 20);
    cr_assert_eq(test_http_wait(h, C, 20000), 0);
    cr_expect_eq(count_status(h, C, 200), C);
    test_backend_key r = test_backend_key_get(&B, "redir");
    cr_expect_eq(r.served, C);
    cr_expect_eq(r.overlaps, 0, "the named location ran without the lock");
    cr_expect_eq(r.fence_errors, 0);
    cr_expect_eq(B.no_fence, 0, "the redirected request lost its fence");

    send_all(a, C, 1, "/a/?key=%s&ms=%d", "main", 20);
    cr_assert_eq(test_http_wait(a, C, 20000), 0);
    cr_expect_eq(count_status(a, C, 200), C);
    test_backend_key auth = test_backend_key_get(&B, "auth"), m = test_backend_key_get(&B, "main");
    cr_expect_eq(auth.served, C);
    cr_expect_gt(auth.overlaps, 0, "auth subrequests ran one at a time: they took a lock");
    cr_expect_eq(auth.last_fence, 0, "a subrequest had a fence");
    cr_expect_eq(m.overlaps, 0);
    cr_expect(lock_gone("auth"), "the lock of auth is left behind");
    cr_expect(lock_gone("k:redir") && lock_gone("k:main"), "a lock left behind");
    quit_clean(1);
}

/* Requests on one keepalive connection (pipelined here) each take and
 * release their own lock: the lock belongs to the request, not to the
 * connection. */
Test(nginx, keepalive_requests_each_take_their_own_lock) {
    test_http h;
    char url[96], fence[HILOCK_NAME_MAX * 3 + 64];
    snprintf(url, sizeof(url), "%s fence_ttl=1h", R.url);
    start_nginx(&N[0], 1, url);
    cr_assert_eq(test_http_send_raw(&h, N[0].port,
                                    "GET /k/?key=ka&ms=0 HTTP/1.1\r\nHost: t\r\n\r\n"
                                    "GET /k/?key=ka&ms=0 HTTP/1.1\r\nHost: t\r\n\r\n"
                                    "GET /k/?key=ka&ms=0 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
                 0);
    cr_assert_eq(test_http_wait(&h, 1, 10000), 0, "the pipelined requests hang");
    cr_expect_eq(h.status, 200);
    /* Three replies, three fences, each larger than the one before. */
    unsigned long long last = 0;
    int replies = 0;
    for (const char *p = strstr(h.buf, "X-Hilock-Fence: "); p != NULL; p = strstr(p + 1, "X-Hilock-Fence: ")) {
        unsigned long long f = strtoull(p + 16, NULL, 10);
        cr_expect_gt(f, last, "reply %d: fence %llu after %llu", replies, f, last);
        last = f;
        replies++;
    }
    cr_expect_eq(replies, 3, "replies with a fence:\n%s", h.buf);
    test_backend_key k = test_backend_key_get(&B, "ka");
    cr_expect_eq(k.served, 3);
    cr_expect_eq(k.fence_errors, 0);
    cr_expect(lock_gone("k:ka"), "the lock of k:ka is left behind");
    hilock_key("hilock:", "k:ka", fence, sizeof(fence));
    strcat(fence, ":fence");
    long long ttl = test_redis_int(&R, "TTL %s", fence);
    cr_expect(ttl > 3500 && ttl <= 3600, "fence_ttl=1h: the fence key lives %lld s", ttl);
    quit_clean(1);
}

/* Redis killed while one request holds and others wait, then started
 * again empty: every request ends (served, or the error status), no
 * worker crashes, and locking works again. */
Test(nginx, redis_killed_and_restarted_under_waiters) {
    enum { W = 30 };
    static test_http h[W + 1];
    test_http after;
    start_nginx(&N[0], 2, R.url);
    hold_and_queue(h, W, "rk", 600, 5, 100);
    int port = R.port;
    test_redis_stop(&R);
    test_msleep(300);
    cr_assert_eq(test_redis_start(&R, port, NULL), 0, "redis-server did not start again on %d", port);
    cr_assert_eq(test_http_wait(h, W + 1, 30000), 0, "requests still waiting 30 s after the restart");
    int ok = count_status(h, W + 1, 200), err = count_status(h, W + 1, 503);
    cr_expect_eq(ok + err, W + 1, "%d served, %d errors, of %d", ok, err, W + 1);
    cr_expect_gt(ok, 1, "waiters are served after the restart");
    cr_expect_eq(test_http_get(&after, N[0].port, "/k/?key=rk&ms=0", 10000), 200);
    cr_expect(lock_gone("k:rk"), "the lock of k:rk is left behind");
    quit_clean(1);
}

/* Mistakes in the configuration fail `nginx -t`, with the reason. */
Test(nginx, bad_configuration_fails_nginx_t) {
    static const struct { const char *http, *server, *says; } bad[] = {
        {"hilock_redis redis://h:99999;", "", "malformed Redis URL"},
        {"hilock_redis redis://127.0.0.1:1;", "location / { hilock a lease=1ms; }", "at least 10ms"},
        {"hilock_redis redis://127.0.0.1:1;", "location / { hilock a wait=soon; }", "invalid time"},
        {"hilock_redis redis://127.0.0.1:1;", "location / { hilock a color=red; }", "invalid parameter"},
        {"hilock_redis redis://127.0.0.1:1;", "location / { hilock a; hilock b; }", "is duplicate"},
        {"hilock_redis redis://127.0.0.1:1;", "location / { hilock_timeout_status 200; }", "must be"},
        {"hilock_redis redis://127.0.0.1:1 timeout=0;", "", "invalid time"},
        {"hilock_redis redis://127.0.0.1:1 fence_ttl=10ms;", "", "at least 1000ms"},
        {"hilock_redis redis://127.0.0.1:1 wait=1s;", "", "invalid parameter"},
        {"", "location / { hilock a; }", "needs \"hilock_redis\""},
        {"hilock_redis redis://127.0.0.1:1;", "location / { hilock off wait=1s; }", "no parameters after"},
        {"", "location = /m { hilock_stats; }", "\"hilock_stats\" in "},
        {"", "location = /m { hilock_stats; }", "needs a \"hilock_redis\""},
        {"hilock_redis redis://127.0.0.1:1;", "location = /m { hilock_stats on; }", "invalid number of arguments"},
        {"hilock_redis redis://127.0.0.1:1;", "hilock_stats;", "not allowed here"},
        {"hilock_redis redis://127.0.0.1:1;", "location = /m { hilock_stats; hilock_stats; }", "is duplicate"},
    };
    char out[4096];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_expect_eq(test_nginx_check(1, bad[i].http, bad[i].server, out, sizeof(out)), 1,
                     "case %zu passed nginx -t:\n%s", i, out);
        cr_expect(strstr(out, bad[i].says) != NULL, "case %zu: no \"%s\" in:\n%s", i, bad[i].says, out);
    }
    cr_expect_eq(test_nginx_check(1, "hilock_redis redis://127.0.0.1:1 timeout=1s fence_ttl=1d;",
                                  "location / { hilock k:$arg_id wait=5s lease=10s; }", out, sizeof(out)),
                 0, "a good configuration fails:\n%s", out);
    cr_expect_eq(test_nginx_check(2, "hilock_redis redis://127.0.0.1:1 name=orders;",
                                  "location = /metrics { hilock_stats; }", out, sizeof(out)),
                 0, "a good hilock_stats configuration fails:\n%s", out);
    /* The message names the URL, but never its password. */
    cr_expect_eq(test_nginx_check(1, "hilock_redis redis://u:s3cr@t@h:99999;", "", out, sizeof(out)), 1,
                 "a malformed URL passed nginx -t:\n%s", out);
    cr_expect(strstr(out, "\"redis://h:99999\"") != NULL, "no masked URL in:\n%s", out);
    cr_expect(strstr(out, "s3cr") == NULL, "the password is in:\n%s", out);
}

/* ---- The fair lock and bounded waiting ------------------------------------ */

/* A fair lock's keys (hilock.h, "Keys"): P{T}:fair (the lock) and
 * P{T}:fair:q (its queue), not the mutex's P{T}. */
static long long fair_key_exists(const char *name, const char *suffix) {
    char key[HILOCK_NAME_MAX * 3 + 64];
    hilock_key("hilock:", name, key, sizeof(key));
    strcat(key, suffix);
    return test_redis_int(&R, "EXISTS %s", key);
}

/* Neither the lock nor a place in its queue is left within a second. */
static int fair_lock_gone(const char *name) {
    for (long long until = test_now_ms() + 1000; test_now_ms() < until; test_msleep(5))
        if (fair_key_exists(name, ":fair") == 0 && fair_key_exists(name, ":fair:q") == 0) return 1;
    return 0;
}

#define FAIR_LOCATION "location /fair/ { hilock k:$arg_key wait=20s fair; " SHOW " proxy_pass http://127.0.0.1:%d; }\n"

/* The fence of a reply (0: none). */
static unsigned long long reply_fence(const test_http *h) {
    char v[64];
    return strtoull(test_http_header(h, "X-Hilock-Fence", v, sizeof(v)), NULL, 10);
}

/* `fair` takes the fair lock of NAME (its key, not the mutex's, is held
 * while a request is served). Waits queued one after the other, on two
 * nginx of two workers each, are granted in the order they arrived (their
 * fences grow in that order), and a burst of concurrent requests on both
 * never overlaps at the backend, with fences that increase. */
Test(nginx, fair_serialises_in_arrival_order_across_instances) {
    enum { Q = 24, BURST = 120 };
    static test_http h[Q + 1], b[BURST];
    char extra[512];
    snprintf(extra, sizeof(extra), FAIR_LOCATION, B.port);
    for (int i = 0; i < 2; i++) start_nginx_with(&N[i], 2, R.url, extra);

    cr_assert_eq(test_http_send(&h[0], N[0].port, "/fair/?key=fq&ms=1500"), 0);
    cr_assert(backend_inflight("fq", 1, 5000), "the holder never reached the backend");
    cr_expect_eq(fair_key_exists("k:fq", ":fair"), 1, "no fair lock is held for the request");
    cr_expect_eq(key_exists("k:fq"), 0, "the mutex of the name is held: \"fair\" was ignored");
    /* One waiter every 25 ms, alternating the instances: each has reached
     * Redis's queue before the next is sent. */
    for (int i = 1; i <= Q; i++) {
        cr_assert_eq(test_http_send(&h[i], N[i % 2].port, "/fair/?key=fq&ms=5"), 0);
        test_msleep(25);
    }
    cr_assert_eq(test_http_wait(h, Q + 1, 30000), 0, "requests still waiting after 30 s");
    cr_expect_eq(count_status(h, Q + 1, 200), Q + 1, "every request gets 200");
    char v[64];
    cr_expect_str_eq(test_http_header(&h[1], "X-Hilock-Status", v, sizeof(v)), "acquired");
    for (int i = 1; i <= Q; i++)
        cr_expect_gt(reply_fence(&h[i]), reply_fence(&h[i - 1]),
                     "request %d (nginx %d) was granted before request %d: fences %llu, %llu", i, i % 2,
                     i - 1, reply_fence(&h[i]), reply_fence(&h[i - 1]));
    cr_expect_geq(h[Q].done_ms - h[0].done_ms, Q * 5, "%d waiters of 5 ms each were served in %lld ms: "
                  "not one at a time", Q, h[Q].done_ms - h[0].done_ms);

    send_all(b, BURST, 2, "/fair/?key=%s&ms=%d", "fb", 2);
    cr_assert_eq(test_http_wait(b, BURST, 60000), 0, "requests still waiting after 60 s");
    cr_expect_eq(count_status(b, BURST, 200), BURST, "every request of the burst gets 200");
    test_backend_key q = test_backend_key_get(&B, "fq"), k = test_backend_key_get(&B, "fb");
    cr_expect_eq(q.served, Q + 1);
    cr_expect_eq(k.served, BURST);
    cr_expect_eq(q.overlaps + k.overlaps, 0, "the backend saw %d overlaps", q.overlaps + k.overlaps);
    cr_expect_eq(q.fence_errors + k.fence_errors, 0, "fences that did not increase");
    cr_expect_eq(B.no_fence, 0, "requests without a fence");
    cr_expect(fair_lock_gone("k:fq") && fair_lock_gone("k:fb"), "a fair lock or a place in its queue left behind");
    quit_clean(2);
}

/* Fair waiters whose clients go away give up their places: the one that
 * stayed, queued behind them, is served right after the holder, and no
 * fair lock is left. */
Test(nginx, fair_client_abort_while_waiting_leaves_no_lock) {
    enum { W = 40 };
    static test_http h[W + 1];
    char extra[512];
    snprintf(extra, sizeof(extra), FAIR_LOCATION, B.port);
    for (int i = 0; i < 2; i++) start_nginx_with(&N[i], 2, R.url, extra);
    cr_assert_eq(test_http_send(&h[0], N[0].port, "/fair/?key=fab&ms=800"), 0);
    cr_assert(backend_inflight("fab", 1, 5000), "the holder never reached the backend");
    send_all(h + 1, W, 2, "/fair/?key=%s&ms=%d", "fab", 0);
    test_msleep(200);
    for (int i = 1; i < W; i++) test_http_abort(&h[i]);
    cr_assert_eq(test_http_wait(h, W + 1, 10000), 0);
    cr_expect_eq(h[0].status, 200);
    cr_expect_eq(h[W].status, 200, "the waiter that stayed is served");
    cr_expect_lt(h[W].done_ms - h[0].done_ms, 1000, "served %lld ms after the release",
                 h[W].done_ms - h[0].done_ms);
    cr_expect_eq(test_backend_key_get(&B, "fab").served, 2, "aborted waiters never reach the backend");
    cr_expect(fair_lock_gone("k:fab"), "the fair lock of k:fab or a place in its queue is left behind");
    quit_clean(2);
}

/* starve= and fair are checked by `nginx -t`, each refusal naming the
 * parameter; starve=off and starve=TIME are accepted and lock as before. */
Test(nginx, starve_and_fair_parameters) {
    static const struct { const char *http, *server, *says; } bad[] = {
        {"hilock_redis redis://127.0.0.1:1 starve=soon;", "", "invalid time \"starve=soon\""},
        {"hilock_redis redis://127.0.0.1:1 starve=0;", "", "\"starve=0\" (at least 1ms, or off)"},
        {"hilock_redis redis://127.0.0.1:1 starve=;", "", "invalid time \"starve=\""},
        {"hilock_redis redis://127.0.0.1:1 starve=offf;", "", "invalid time \"starve=offf\""},
        {"hilock_redis redis://127.0.0.1:1 starve=9999999999;", "", "invalid time \"starve=9999999999\""},
        {"hilock_redis redis://127.0.0.1:1 starve;", "", "invalid parameter \"starve\""},
        {"hilock_redis redis://127.0.0.1:1 fair;", "", "invalid parameter \"fair\""},
        {"hilock_redis redis://127.0.0.1:1 timeout=1s fence_ttl=1d starve=1s name=a name=b;", "",
         "has too many parameters"},
        {"hilock_redis redis://127.0.0.1:1;", "location / { hilock a unfair; }", "invalid parameter \"unfair\""},
        {"hilock_redis redis://127.0.0.1:1;", "location / { hilock a fair=on; }", "invalid parameter \"fair=on\""},
        {"hilock_redis redis://127.0.0.1:1;", "location / { hilock a starve=1s; }",
         "invalid parameter \"starve=1s\""},
        {"hilock_redis redis://127.0.0.1:1;", "location / { hilock off fair; }", "no parameters after"},
        {"hilock_redis redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3;", "location / { hilock a fair; }",
         "cannot use a redlock://"},
        {"hilock_redis redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3;",
         "hilock a wait=1s fair; location / { }", "cannot use a redlock://"},
    };
    static const struct { const char *http, *server; } good[] = {
        {"hilock_redis redis://127.0.0.1:1 starve=off;", "location / { hilock a; }"},
        {"hilock_redis redis://127.0.0.1:1 starve=20ms;", "location / { hilock a fair; }"},
        {"hilock_redis redis://127.0.0.1:1 timeout=1s fence_ttl=1d starve=2s name=x;",
         "location / { hilock k:$arg_id fair wait=5s lease=10s; }"},
        {"hilock_redis redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3 starve=off;", "location / { hilock a; }"},
    };
    char out[4096];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_expect_eq(test_nginx_check(1, bad[i].http, bad[i].server, out, sizeof(out)), 1,
                     "case %zu passed nginx -t:\n%s", i, out);
        cr_expect(strstr(out, bad[i].says) != NULL, "case %zu: no \"%s\" in:\n%s", i, bad[i].says, out);
    }
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        cr_expect_eq(test_nginx_check(1, good[i].http, good[i].server, out, sizeof(out)), 0,
                     "good case %zu fails nginx -t:\n%s", i, out);

    /* Both thresholds make working clients: a hot key on two nginx, one
     * with starve=off and one with starve=20ms, serialised. */
    enum { C = 60 };
    static test_http h[C];
    char url[128], extra[512];
    snprintf(extra, sizeof(extra), FAIR_LOCATION, B.port);
    snprintf(url, sizeof(url), "%s starve=off", R.url);
    start_nginx_with(&N[0], 1, url, extra);
    snprintf(url, sizeof(url), "%s starve=20ms", R.url);
    start_nginx_with(&N[1], 1, url, extra);
    send_all(h, C, 2, "/k/?key=%s&ms=%d", "sv", 3);
    cr_assert_eq(test_http_wait(h, C, 30000), 0, "requests still waiting after 30 s");
    cr_expect_eq(count_status(h, C, 200), C, "every request gets 200");
    test_backend_key k = test_backend_key_get(&B, "sv");
    cr_expect_eq(k.served, C);
    cr_expect_eq(k.overlaps, 0, "the backend saw %d overlaps", k.overlaps);
    cr_expect_eq(k.fence_errors, 0);
    cr_expect(lock_gone("k:sv"), "the lock of k:sv is left behind");
    quit_clean(2);
}

/* ---- hilock_stats --------------------------------------------------------- */

#define METRICS "location = /metrics { hilock_stats; }\n"
#define CONTENT_TYPE "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"

static char metrics_reply[1 << 20];

/* GET /metrics from port: the status; *body in metrics_reply. */
static int get_metrics(int port, char **body) {
    return test_http_fetch(port, "GET /metrics HTTP/1.0\r\nHost: t\r\n\r\n", metrics_reply,
                           sizeof(metrics_reply), body, 5000);
}

/* The samples of metric `name` whose labels contain `has` (NULL: any):
 * their sum; their count into *count; a bit per worker="N" into *workers. */
static long long metric_sum(const char *body, const char *name, const char *has, int *count,
                            unsigned *workers) {
    long long sum = 0;
    size_t nl = strlen(name);
    *count = 0;
    *workers = 0;
    for (const char *line = body; line != NULL && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        const char *end = strchr(line, '\n'), *close, *w;
        if (strncmp(line, name, nl) != 0 || line[nl] != '{') continue;
        close = strchr(line, '}');
        if (close == NULL || (end != NULL && close > end)) continue;
        if (has != NULL) {
            char labels[512];
            snprintf(labels, sizeof(labels), "%.*s", (int)(close - line), line);
            if (strstr(labels, has) == NULL) continue;
        }
        w = strstr(line, "worker=\"");
        if (w != NULL && w < close) *workers |= 1u << (atoi(w + 8) & 31);
        sum += strtoll(close + 2, NULL, 10);
        (*count)++;
    }
    return sum;
}

typedef struct metrics_now {
    int status, samples;
    unsigned workers;
    long long granted, timeouts, waiters, holds;
} metrics_now;

static metrics_now metrics_read(int port, char **body) {
    metrics_now m;
    int k;
    unsigned w;
    memset(&m, 0, sizeof(m));
    m.status = get_metrics(port, body);
    m.granted = metric_sum(*body, "hilock_acquires_total", "outcome=\"granted\"", &k, &w);
    m.timeouts = metric_sum(*body, "hilock_acquires_total", "outcome=\"timeout\"", &k, &w);
    m.holds = metric_sum(*body, "hilock_holds", NULL, &k, &w);
    m.waiters = metric_sum(*body, "hilock_waiters", NULL, &m.samples, &m.workers);
    return m;
}

/* Poll /metrics until it counts `granted` and `timeouts` with nothing
 * waiting or held, in one sample per worker of `workers` (the other
 * workers publish every second; a worker that has only just been forked
 * publishes when it starts), or 5 s pass: the last reading. */
static metrics_now metrics_settle(int port, int workers, long long granted, long long timeouts, char **body) {
    metrics_now m;
    long long until = test_now_ms() + 5000;
    do {
        m = metrics_read(port, body);
        if (m.status == 200 && m.samples == workers && m.granted == granted && m.timeouts == timeouts &&
            m.waiters == 0 && m.holds == 0)
            break;
        test_msleep(100);
    } while (test_now_ms() < until);
    return m;
}

/* Two workers serve locked requests (some time out); /metrics shows both
 * workers, valid Prometheus text, and counts exactly the grants and the
 * timeouts the clients saw, with nothing left waiting or held. */
Test(nginx, stats_count_every_worker_s_acquires) {
    enum { C = 300, T = 20 };
    static test_http h[C + T + 1];
    char path[128], said[4096], *body;
    start_nginx_with(&N[0], 2, R.url, METRICS);
    for (int i = 0; i < C; i++) {
        snprintf(path, sizeof(path), "/k/?key=st%d&ms=0", i % 8);
        cr_assert_eq(test_http_send(&h[i], N[0].port, path), 0, "request %d not sent", i);
    }
    cr_assert_eq(test_http_send(&h[C], N[0].port, "/k/?key=stb&ms=1200"), 0);
    cr_assert(backend_inflight("stb", 1, 5000), "the holder never reached the backend");
    send_all(h + C + 1, T, 1, "/short/?key=%s&ms=%d", "stb", 0);
    cr_assert_eq(test_http_wait(h, C + T + 1, 20000), 0, "requests still waiting after 20 s");
    int ok = count_status(h, C + T + 1, 200), late = count_status(h, C + T + 1, 429);
    cr_assert_eq(ok + late, C + T + 1, "%d served, %d timed out, of %d", ok, late, C + T + 1);
    cr_expect_geq(late, T, "the waits behind the holder ran out");

    /* A worker that serves no scrape publishes on its timer: one scrape,
     * more than a second after the last reply, counts everything. */
    test_msleep(1500);
    metrics_now m = metrics_read(N[0].port, &body);
    cr_expect(m.granted == ok && m.timeouts == late, "the first scrape, 1.5 s after the last reply: %lld "
              "granted, %lld timeouts, of %d and %d", m.granted, m.timeouts, ok, late);
    m = metrics_settle(N[0].port, 2, ok, late, &body);
    cr_assert_eq(m.status, 200, "GET /metrics: %d", m.status);
    cr_expect(strstr(metrics_reply, CONTENT_TYPE) != NULL, "the content type:\n%.400s", metrics_reply);
    int rc = promcheck(body, strlen(body), said, sizeof(said)); /* -1: no promtool, a failure */
    cr_expect_eq(rc, 0, "promtool check metrics exited %d:\n%s", rc, said);
    cr_expect_eq(m.workers, 3u, "samples of workers 0 and 1 (bits %#x)", m.workers);
    cr_expect_eq(m.samples, 2, "one sample per worker (one hilock_redis): %d", m.samples);
    cr_expect_eq(m.granted, ok, "granted: %lld in /metrics, %d replies 200", m.granted, ok);
    cr_expect_eq(m.timeouts, late, "timeouts: %lld in /metrics, %d replies 429", m.timeouts, late);
    cr_expect_eq(m.waiters, 0, "waiters at rest: %lld", m.waiters);
    cr_expect_eq(m.holds, 0, "holds at rest: %lld", m.holds);
    char redis[96];
    snprintf(redis, sizeof(redis), "redis=\"%s\"", R.url);
    cr_expect(strstr(body, redis) != NULL, "no %s in:\n%.600s", redis, body);
    quit_clean(1);
}

/* GET and HEAD only; the URL's password never shows; a stats location
 * takes no lock from the server's hilock. */
Test(nginx, stats_methods_labels_and_no_lock) {
    test_http post;
    char url[128], want[96], *body;
    int port = test_refused_port();
    snprintf(url, sizeof(url), "redis://hl:s3cret@127.0.0.1:%d/0 timeout=200ms", port);
    start_nginx_with(&N[0], 1, url, "hilock srvlock; " METRICS);
    /* Redis is down: a lock would answer 503 (hilock_error_status). */
    cr_assert_eq(test_http_get(&post, N[0].port, "/metrics", 5000), 200, "GET with Redis down");
    cr_expect_eq(test_http_send_raw(&post, N[0].port,
                                    "POST /metrics HTTP/1.0\r\nHost: t\r\nContent-Length: 2\r\n\r\nab"),
                 0);
    cr_expect_eq(test_http_wait(&post, 1, 5000), 0);
    cr_expect_eq(post.status, 405, "POST /metrics: %d", post.status);
    int st = test_http_fetch(N[0].port, "HEAD /metrics HTTP/1.0\r\nHost: t\r\n\r\n", metrics_reply,
                             sizeof(metrics_reply), &body, 5000);
    cr_expect_eq(st, 200, "HEAD /metrics: %d", st);
    cr_expect_str_eq(body, "", "HEAD has no body");
    cr_expect(strstr(metrics_reply, CONTENT_TYPE) != NULL, "the content type:\n%s", metrics_reply);
    metrics_now m = metrics_read(N[0].port, &body);
    cr_assert_eq(m.status, 200);
    cr_expect(strstr(body, "s3cret") == NULL && strstr(body, "hl:") == NULL, "the password shows:\n%.800s",
              body);
    snprintf(want, sizeof(want), "redis=\"redis://127.0.0.1:%d/0\"", port);
    cr_expect(strstr(body, want) != NULL, "no %s in:\n%.800s", want, body);
    quit_clean(1);
}

/* After nginx -s reload, /metrics shows the new workers only (one sample
 * each, the old ones' counters gone with them), labelled with name=. */
Test(nginx, stats_after_reload_show_the_new_workers_only) {
    enum { C = 40 };
    static test_http h[C];
    char url[128], *body;
    pid_t old[8];
    snprintf(url, sizeof(url), "%s name=orders", R.url);
    start_nginx_with(&N[0], 2, url, METRICS);
    send_all(h, C, 1, "/k/?key=%s&ms=%d", "rs", 0);
    cr_assert_eq(test_http_wait(h, C, 10000), 0);
    metrics_now m = metrics_settle(N[0].port, 2, C, 0, &body);
    cr_expect_eq(m.granted, C, "before the reload: %lld", m.granted);
    int nold = test_nginx_workers(&N[0], old, 8);
    kill(N[0].pid, SIGHUP);
    cr_assert_eq(test_nginx_wait_new_workers(&N[0], old, nold, 2, 15000), 0, "no new workers");
    send_all(h, 10, 1, "/k/?key=%s&ms=%d", "rs", 0);
    cr_assert_eq(test_http_wait(h, 10, 10000), 0);
    m = metrics_settle(N[0].port, 2, 10, 0, &body);
    cr_expect_eq(m.granted, 10, "after the reload: %lld granted (the old workers' %d are gone)", m.granted, C);
    cr_expect_eq(m.samples, 2, "samples: %d, of 2 workers", m.samples);
    cr_expect_eq(m.workers, 3u, "workers (bits %#x)", m.workers);
    cr_expect(strstr(body, "redis=\"orders\"") != NULL, "name=orders is not the label:\n%.600s", body);
    quit_clean(1);
}
