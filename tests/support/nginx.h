/* Test harness for the nginx module: a real nginx (Debian's, with
 * ngx_http_hilock_module loaded) on a free loopback port, a backend that
 * records what it serves (overlaps per key, fences), and an HTTP/1.0
 * client that keeps many requests in flight at once. */
#ifndef HILOCK_TEST_NGINX_H
#define HILOCK_TEST_NGINX_H

#include <pthread.h>
#include <sys/types.h>

/* ---- nginx ---------------------------------------------------------------- */

typedef struct test_nginx {
    pid_t pid;          /* the master (daemon off), a child of ours */
    int port;           /* its server listens on 127.0.0.1:port */
    char dir[128];      /* prefix: nginx.conf, error.log, stderr.log */
    int killed_worker;  /* a test killed a worker: its alert is expected */
} test_nginx;

/* The module built beside the test binary ($(BUILD)/nginx/...so). */
const char *test_nginx_module(void);

/* Start nginx with `workers` worker processes. `http` goes into the http
 * block (e.g. "hilock_redis redis://...;"), `server` into its one server
 * block, whose listen directive the harness writes. Waits until the port
 * accepts and every worker runs. Under ASan the sanitizer runtimes are
 * preloaded, so the module (linked with an instrumented libhilock.a) is
 * checked too. Returns 0, or -1 with nginx's own words on stderr. */
int test_nginx_start(test_nginx *n, int workers, const char *http, const char *server);

/* `nginx -t` on such a config: its exit status; its output into out. */
int test_nginx_check(int workers, const char *http, const char *server, char *out, size_t size);

/* The master's worker processes now (those whose parent it is). */
int test_nginx_workers(const test_nginx *n, pid_t *out, int max);

/* Wait until the master has `want` workers none of which is in `old`
 * (after a reload); 0, or -1 after ms. */
int test_nginx_wait_new_workers(const test_nginx *n, const pid_t *old, int nold, int want, int ms);

/* Lines of error.log and of nginx's stderr that say something went wrong:
 * [alert], [crit], [emerg], a sanitizer report, valgrind's errors (an
 * expected "exited on signal 9" alert excepted when n->killed_worker). The
 * count; the lines (truncated) into out. */
int test_nginx_problems(const test_nginx *n, char *out, size_t size);

/* Stop gracefully (SIGQUIT, as `nginx -s quit`) and wait up to ms for the
 * master to exit; if it does not, SIGKILL it and its workers and return -1.
 * Else 0. The dir stays (for test_nginx_problems) until test_nginx_free. */
int test_nginx_quit(test_nginx *n, int ms);

/* Stop it if it runs (SIGKILL, workers too) and remove its dir. */
void test_nginx_free(test_nginx *n);

/* ---- A backend that records overlaps -------------------------------------- */

#define TEST_BACKEND_KEYS 64

typedef struct test_backend_key {
    char name[64];
    int inflight, served, overlaps, fence_errors;
    unsigned long long last_fence;
} test_backend_key;

/* An HTTP/1.0 server on a free loopback port, a thread per connection. A
 * request's line may carry `key=K` (its lock name) and `ms=N` (how long to
 * take); its X-Fence header is checked against the key's last one: fences
 * must strictly increase. Two requests of one key at once count as an
 * overlap. Every request gets 200 "ok". */
typedef struct test_backend {
    int fd, port;
    pthread_t acceptor;
    pthread_mutex_t mu;
    int stopping, live;
    int served, inflight, max_inflight, no_fence;
    test_backend_key keys[TEST_BACKEND_KEYS];
} test_backend;

int test_backend_start(test_backend *b);
/* Wait up to ms for its connections to end, then stop. */
void test_backend_stop(test_backend *b, int ms);
/* A copy of key `name`'s record (zeros if it never came). */
test_backend_key test_backend_key_get(test_backend *b, const char *name);
int test_backend_served(test_backend *b);

/* ---- An HTTP/1.0 client -------------------------------------------------- */

typedef struct test_http {
    int fd;             /* -1 when done */
    int status;         /* 0 while waiting; the status; -1: no reply */
    char buf[2048];     /* the reply's head (and body) */
    size_t len;
    long long sent_ms, done_ms;
} test_http;

/* Raise this process's open-file limit to its hard limit. */
void test_http_rlimit(void);

/* Connect to 127.0.0.1:port and send "GET path HTTP/1.0". 0 or -1. */
int test_http_send(test_http *h, int port, const char *path);

/* The same with a request of the caller's, e.g. pipelined HTTP/1.1
 * requests, the last with "Connection: close". */
int test_http_send_raw(test_http *h, int port, const char *req);

/* Read the replies of hs[0..n) until all are done or ms pass. The number
 * still waiting. */
int test_http_wait(test_http *hs, int n, int ms);

/* Close the connection without waiting for the reply (a client that goes
 * away): status -1. */
void test_http_abort(test_http *h);

/* send + wait: the status (-1: none within ms). */
int test_http_get(test_http *h, int port, const char *path, int ms);

/* Send the request `req` (as test_http_send_raw) and read the whole reply,
 * head and body, into out (at most size-1 bytes, NUL-terminated), for
 * replies larger than test_http's buffer. The status, -1 if none within
 * ms; *body points at the body in out (or at its end). */
int test_http_fetch(int port, const char *req, char *out, size_t size, char **body, int ms);

/* The value of header `name` of the reply, "" if absent. */
const char *test_http_header(const test_http *h, const char *name, char *out, size_t size);

#endif
