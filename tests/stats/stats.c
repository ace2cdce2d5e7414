/* Statistics and the log callback.
 *
 * stats:    hilock_client_stats() against a real server: every outcome,
 *           the gauges back at zero, histograms, the node; the Prometheus
 *           text judged by promtool; snprintf-like sizing.
 * warnings: what the library has to say goes through log_cb, with a
 *           level, and nothing goes to stderr: a lost connection and its
 *           return, a slow reply, a late renewal. */
#include <fcntl.h>
#include <unistd.h>
#include <sys/wait.h>
#include <event2/event.h>
#include "support/lockenv.h"
#include "support/promcheck.h"
#include "core/core.h" /* hl_histogram_add */

static lockenv e;
static void setup(void) { lockenv_start_debuggable(&e); }
static void teardown(void) { lockenv_stop(&e); }

/* ---- Pure logic ---------------------------------------------------------- */

TestSuite(stats_text, .timeout = 30);

Test(stats_text, buckets_take_their_upper_bound) {
    hilock_histogram h;
    memset(&h, 0, sizeof(h));
    hl_histogram_add(&h, 0);
    hl_histogram_add(&h, 100);      /* the first bound is inclusive */
    hl_histogram_add(&h, 101);
    hl_histogram_add(&h, 10000000); /* the last bound */
    hl_histogram_add(&h, 10000001); /* above every bound */
    cr_expect_eq(h.bucket[0], 2);
    cr_expect_eq(h.bucket[1], 1);
    cr_expect_eq(h.bucket[HILOCK_STATS_BUCKETS - 1], 1);
    cr_expect_eq(h.bucket[HILOCK_STATS_BUCKETS], 1);
    cr_expect_eq(h.count, 5);
    cr_expect_eq(h.sum_us, 20000202);
}

/* Two workers' snapshots, one with a node address that needs escaping:
 * valid text, one sample per worker, cumulative buckets. */
Test(stats_text, two_clients_pass_promtool) {
    hilock_stats a, b;
    hilock_stats_init(&a);
    hilock_stats_init(&b);
    a.granted = 7;
    a.timeouts = 2;
    a.errors[-HILOCK_ETIMEDOUT] = 2;
    a.errors[-HILOCK_ECONN] = 1;
    b.granted = 5;
    hl_histogram_add(&a.wait, 50);
    hl_histogram_add(&a.wait, 3000);
    hl_histogram_add(&a.wait, 20000000);
    a.nnodes = a.nodes_total = 1;
    snprintf(a.node[0].addr, sizeof(a.node[0].addr), "/tmp/we\"ird\\sock");
    a.node[0].cmd_up = 1;
    a.node[0].reconnects = 3;
    b.nnodes = b.nodes_total = 1;
    snprintf(b.node[0].addr, sizeof(b.node[0].addr), "127.0.0.1:6379");
    const hilock_stats *s[] = {&a, &b};
    const char *labels[] = {"worker=\"0\"", "worker=\"1\""};
    char *text = prom_exposition(s, labels, 2);
    cr_expect(strstr(text, "hilock_acquires_total{worker=\"0\",outcome=\"granted\"} 7\n"), "%s", text);
    cr_expect(strstr(text, "hilock_acquires_total{worker=\"1\",outcome=\"granted\"} 5\n"));
    cr_expect(strstr(text, "hilock_errors_total{worker=\"0\",code=\"ETIMEDOUT\"} 2\n"));
    cr_expect(strstr(text, "hilock_errors_total{worker=\"0\",code=\"ECONN\"} 1\n"));
    cr_expect(strstr(text, "hilock_wait_seconds_bucket{worker=\"0\",le=\"0.0001\"} 1\n"));
    cr_expect(strstr(text, "hilock_wait_seconds_bucket{worker=\"0\",le=\"0.005\"} 2\n"));
    cr_expect(strstr(text, "hilock_wait_seconds_bucket{worker=\"0\",le=\"10\"} 2\n"));
    cr_expect(strstr(text, "hilock_wait_seconds_bucket{worker=\"0\",le=\"+Inf\"} 3\n"));
    cr_expect(strstr(text, "hilock_wait_seconds_count{worker=\"0\"} 3\n"));
    cr_expect(strstr(text, "hilock_wait_seconds_sum{worker=\"0\"} 20.003050\n"));
    cr_expect(strstr(text, "hilock_node_reconnects_total{worker=\"0\",node=\"/tmp/we\\\"ird\\\\sock\"} 3\n"),
              "%s", text);
    cr_expect(strstr(text, "hilock_node_up{worker=\"1\",node=\"127.0.0.1:6379\",connection=\"command\"} 0\n"));
    /* One HELP per family, whatever the number of clients. */
    const char *p = strstr(text, "# HELP hilock_acquires_total");
    cr_expect(p && strstr(p + 1, "# HELP hilock_acquires_total") == NULL);
    free(text);
}

/* Like snprintf: the whole length whatever the room, and a buffer that is
 * too small gets a NUL-terminated start of the text. */
Test(stats_text, sizes_like_snprintf) {
    hilock_stats a;
    hilock_stats_init(&a);
    const hilock_stats *s[] = {&a};
    int len = hilock_stats_prometheus(NULL, 0, s, NULL, 1);
    cr_assert_gt(len, 100);
    char *full = malloc((size_t)len + 1), small[64];
    cr_assert_eq(hilock_stats_prometheus(full, (size_t)len + 1, s, NULL, 1), len);
    cr_expect_eq(hilock_stats_prometheus(small, sizeof(small), s, NULL, 1), len);
    cr_expect_eq(strlen(small), sizeof(small) - 1);
    cr_expect_eq(strncmp(small, full, sizeof(small) - 1), 0);
    cr_expect(strstr(full, "hilock_waiters 0\n"), "no labels: no braces");
    free(full);
    hilock_stats bad;
    memset(&bad, 0, sizeof(bad)); /* not set up by hilock_stats_init */
    const hilock_stats *sb[] = {&bad}, *none[] = {NULL};
    cr_expect_eq(hilock_stats_prometheus(NULL, 0, sb, NULL, 1), HILOCK_EINVAL);
    cr_expect_eq(hilock_stats_prometheus(NULL, 0, none, NULL, 1), HILOCK_EINVAL);
    cr_expect_eq(hilock_stats_prometheus(NULL, 10, s, NULL, 1), HILOCK_EINVAL);
    cr_expect_eq(hilock_client_stats(NULL, &a), HILOCK_EINVAL);
    cr_expect_gt(hilock_stats_prometheus(NULL, 0, NULL, NULL, 0), 0, "no clients: the heads alone");
}

/* ---- Against a real server ----------------------------------------------- */

TestSuite(stats, .init = setup, .fini = teardown, .timeout = 60);

/* Each granted wait gives its hold straight back. */
static void give_back_cb(hilock_hold *h, int status, void *data) {
    got_cb(h, status, data);
    if (status == 0) cr_assert_eq(hilock_release(h, NULL, NULL), 0);
}

Test(stats, every_outcome_counted_and_gauges_back_to_zero) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = acquire_now(&e, a, "x", NULL);
    cr_assert_eq(ga.status, 0);

    enum { W = 5 };
    got gw[W], busy = {0}, late = {0}, gone = {0};
    memset(gw, 0, sizeof(gw));
    hilock_acquire_opts o5 = opts_wait(5000), o0 = opts_wait(0), o100 = opts_wait(100);
    for (int i = 0; i < W; i++) cr_assert_eq(hilock_acquire(b, "x", &o5, give_back_cb, &gw[i], NULL), 0);
    hilock_wait *w;
    cr_assert_eq(hilock_acquire(b, "x", &o0, got_cb, &busy, NULL), 0);
    cr_assert_eq(hilock_acquire(b, "x", &o100, got_cb, &late, NULL), 0);
    cr_assert_eq(hilock_acquire(b, "x", &o5, got_cb, &gone, &w), 0);
    test_loop_for(e.base, 300);
    cr_assert_eq(hilock_wait_cancel(w), 0);
    test_loop_for(e.base, 50);
    hilock_stats s = stats_of(b);
    cr_expect_eq(s.acquires, 8);
    cr_expect_eq(s.waiters, W, "waiters gauge %llu", (unsigned long long)s.waiters);
    cr_expect_eq(s.busy, 1);
    cr_expect_eq(s.timeouts, 1);
    cr_expect_eq(s.cancels, 1);
    cr_expect_eq(s.granted, 0);
    cr_expect_eq(s.names, 1);
    cr_expect_eq(s.subscriptions, 1);

    cr_assert_eq(release_now(&e, ga.hold), 0);
    for (int i = 0; i < W; i++) {
        test_loop_until(e.base, &gw[i].calls, 5000);
        cr_assert_eq(gw[i].status, 0, "waiter %d: %s", i, hilock_strerror(gw[i].status));
    }
    test_loop_for(e.base, 300); /* the releases, and the linger (100 ms) */
    s = stats_of(b);
    cr_expect_eq(s.granted, W);
    cr_expect_eq(s.failed, 0);
    cr_expect_eq(s.errors[-HILOCK_ETIMEDOUT], 1);
    cr_expect_eq(s.errors[-HILOCK_EBUSY], 1);
    cr_expect_eq(s.errors[-HILOCK_ECANCELED], 1);
    cr_expect_eq(s.releases, W);
    cr_expect_eq(s.waiters, 0);
    cr_expect_eq(s.holds, 0);
    cr_expect_eq(s.subscriptions, 0);
    cr_expect_eq(s.names, 0);
    cr_expect_eq(s.wait.count, W);
    cr_expect_eq(s.hold.count, W);
    cr_expect_geq(s.wait.sum_us, 300000ULL * W, "the waits lasted at least 300 ms each");
    cr_expect_geq(s.handoff.count, 1, "a's release message led to a grant");
    cr_expect_leq(s.handoff.count, W);
    cr_expect_geq(s.tries, 3, "the busy try, the timed-out wait's and the head's");
    cr_expect_geq(s.wakeups, 1);
    cr_expect_eq(s.holds_lost, 0);
    cr_expect_eq(s.nnodes, 1);
    cr_expect_eq(s.nodes_total, 1);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", e.r.port);
    cr_expect_str_eq(s.node[0].addr, addr);
    cr_expect_eq(s.node[0].cmd_up, 1);
    cr_expect_eq(s.node[0].sub_up, 1);
    cr_expect_eq(s.node[0].connects, 2, "one command and one subscriber connection");
    cr_expect_eq(s.node[0].reconnects, 0);
    cr_expect_eq(s.connections, 2);
    cr_expect_eq(s.connections_up, 2);

    hilock_stats sa = stats_of(a);
    cr_expect_eq(sa.acquires, 1);
    cr_expect_eq(sa.granted, 1);
    cr_expect_eq(sa.releases, 1);
    cr_expect_eq(sa.hold.count, 1);
    cr_expect_geq(sa.hold.sum_us, 300000, "a held for 300 ms at least");
    cr_expect_eq(sa.connections, 2, "both connections open from the start");
    cr_expect_eq(sa.subscriptions, 0);

    const hilock_stats *both[] = {&sa, &s};
    const char *labels[] = {"client=\"a\"", "client=\"b\""};
    free(prom_exposition(both, labels, 2));

    /* A forked child reads its copy. */
    pid_t pid = fork();
    if (pid == 0) {
        hilock_stats cs;
        hilock_stats_init(&cs);
        _exit(hilock_client_stats(b, &cs) == 0 && cs.granted == W ? 0 : 1);
    }
    int st = 0;
    cr_expect_eq(waitpid(pid, &st, 0), pid);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* An older caller's smaller struct gets the fields it has; a newer
 * caller's larger one gets zeros beyond ours. */
Test(stats, struct_size_decides_what_is_written) {
    hilock_client *c = lockenv_client(&e);
    got g = acquire_now(&e, c, "sz", NULL);
    cr_assert_eq(g.status, 0);
    struct { hilock_stats s; uint64_t later[4]; } big;
    memset(&big, 0xAB, sizeof(big));
    big.s.size = sizeof(big); /* as hilock_stats_init would in a newer header */
    cr_assert_eq(hilock_client_stats(c, &big.s), 0);
    cr_expect_eq(big.s.granted, 1);
    cr_expect_eq(big.later[0], 0);
    cr_expect_eq(big.later[3], 0);
    hilock_stats old;
    memset(&old, 0xCD, sizeof(old));
    hilock_stats_init_size(&old, offsetof(hilock_stats, releases));
    cr_assert_eq(hilock_client_stats(c, &old), 0);
    cr_expect_eq(old.granted, 1);
    cr_expect_eq(old.size, offsetof(hilock_stats, releases));
    unsigned char *rest = (unsigned char *)&old.releases;
    cr_expect_eq(rest[0], 0xCD, "written beyond the caller's struct");
    release_now(&e, g.hold);
    hilock_client_free(c);
}

/* ---- Warnings through the log callback ---------------------------------- */

typedef struct logbook {
    int n;
    int level[64];
    char msg[64][256];
} logbook;

static void log_to_book(int level, const char *msg, void *data) {
    logbook *b = data;
    if (b->n == 64) return;
    b->level[b->n] = level;
    snprintf(b->msg[b->n++], sizeof(b->msg[0]), "%s", msg);
}

/* The first message at `level` containing `part`, or NULL. */
static const char *logged(const logbook *b, int level, const char *part) {
    for (int i = 0; i < b->n; i++)
        if (b->level[i] == level && strstr(b->msg[i], part)) return b->msg[i];
    return NULL;
}

static hilock_client *logging_client(logbook *book, uint32_t request_timeout_ms) {
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.log_cb = log_to_book;
    cfg.log_data = book;
    if (request_timeout_ms) cfg.request_timeout_ms = request_timeout_ms;
    return lockenv_client_cfg(&e, &cfg);
}

/* Stderr into a file for the test's duration: the library prints nothing. */
static int stderr_to(const char *path) {
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    return saved;
}

static long stderr_back(int saved, const char *path) {
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[4096];
    long n = (long)strlen(test_slurp(path, buf, sizeof(buf)) ? buf : "");
    unlink(path);
    return n;
}

Test(stats, lost_connection_is_a_warning_and_its_return_is_counted) {
    logbook book = {0};
    const char *err_path = "/tmp/hilock-stats-stderr";
    int saved = stderr_to(err_path);
    hilock_client *c = logging_client(&book, 0);
    got g = acquire_now(&e, c, "k", NULL);
    cr_assert_eq(g.status, 0);
    cr_assert_eq(release_now(&e, g.hold), 0);
    cr_assert_geq(test_redis_int(&e.r, "CLIENT KILL TYPE normal SKIPME yes"), 1, "nothing killed");
    test_loop_for(e.base, 300);
    g = acquire_now(&e, c, "k", NULL); /* after the reconnect */
    cr_expect_eq(g.status, 0, "%s", hilock_strerror(g.status));
    if (g.status == 0) release_now(&e, g.hold);
    hilock_stats s = stats_of(c);
    hilock_client_free(c);
    long printed = stderr_back(saved, err_path);
    cr_expect_geq(s.node[0].disconnects, 1);
    cr_expect_geq(s.node[0].reconnects, 1);
    cr_expect_geq(s.node[0].connects, 2);
    cr_expect_eq(s.node[0].connect_failures, 0);
    char at[64];
    snprintf(at, sizeof(at), "command connection to 127.0.0.1:%d lost", e.r.port);
    cr_expect(logged(&book, HILOCK_LOG_WARNING, at), "no warning '%s' (%d messages)", at, book.n);
    snprintf(at, sizeof(at), "command connection to 127.0.0.1:%d is back", e.r.port);
    cr_expect(logged(&book, HILOCK_LOG_INFO, at), "no note '%s'", at);
    cr_expect_eq(printed, 0, "the library wrote to stderr");
}

Test(stats, refused_attempts_are_counted_not_logged_each_time) {
    logbook book = {0};
    hilock_config cfg;
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", test_refused_port());
    lockenv_config(&cfg, url);
    cfg.log_cb = log_to_book;
    cfg.log_data = &book;
    cfg.reconnect_max_ms = 50;
    hilock_client *c = lockenv_client_cfg(&e, &cfg);
    hilock_acquire_opts o = opts_wait(600);
    got g = acquire_now(&e, c, "k", &o);
    cr_expect_eq(g.status, HILOCK_ECONN, "%s", hilock_strerror(g.status));
    hilock_stats s = stats_of(c);
    cr_expect_geq(s.node[0].connect_failures, 3, "the backoff tried again (%llu)",
                  (unsigned long long)s.node[0].connect_failures);
    cr_expect_eq(s.node[0].connects, 0);
    cr_expect_eq(s.node[0].cmd_up, 0);
    cr_expect_eq(s.connections_up, 0);
    cr_expect_eq(s.failed, 1);
    cr_expect_eq(s.errors[-HILOCK_ECONN], 1);
    cr_expect_eq(book.n, 0, "a server that was never up is the requests' error, not a log line: %s",
                 book.n ? book.msg[0] : "");
    hilock_client_free(c);
}

Test(stats, slow_reply_is_a_warning) {
    logbook book = {0};
    hilock_client *c = logging_client(&book, 900);
    got g = acquire_now(&e, c, "warm", NULL); /* connected */
    cr_assert_eq(g.status, 0);
    release_now(&e, g.hold);
    pid_t sleeper = test_redis_debug_sleep(&e.r, "0.5");
    test_msleep(50);
    g = acquire_now(&e, c, "slow", NULL);
    cr_expect_eq(g.status, 0, "%s", hilock_strerror(g.status));
    if (g.status == 0) release_now(&e, g.hold);
    test_wait(sleeper, 5000);
    hilock_stats s = stats_of(c);
    cr_expect_geq(s.slow_replies, 1);
    cr_expect(logged(&book, HILOCK_LOG_WARNING, "answered after"), "no slow-reply warning (%d messages)",
              book.n);
    hilock_client_free(c);
}

/* The loop stalls past the renewal's due time: the renewal goes late, and
 * is confirmed with little of the lease left. */
static void stall(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    usleep(170 * 1000);
}

Test(stats, late_renewal_is_a_warning) {
    logbook book = {0};
    hilock_client *c = logging_client(&book, 0);
    hilock_acquire_opts o = opts_wait_lease(2000, 300); /* renewed every 100 ms */
    got g = acquire_now(&e, c, "late\n\"x", &o); /* the name goes into the log quoted */
    cr_assert_eq(g.status, 0);
    struct event *ev = evtimer_new(e.base, stall, NULL);
    struct timeval tv = {0, 60 * 1000};
    evtimer_add(ev, &tv);
    test_loop_for(e.base, 400);
    event_free(ev);
    hilock_stats s = stats_of(c);
    cr_expect_eq(hilock_hold_lost(g.hold), 0, "the hold was lost");
    cr_expect_geq(s.renewals, 2);
    cr_expect_geq(s.renewals_late, 1);
    cr_expect(logged(&book, HILOCK_LOG_WARNING, "lock \"late\\x0a\\x22x\": its lease was renewed with"),
              "no late-renewal warning (%d messages%s%s)", book.n, book.n ? ": " : "", book.n ? book.msg[0] : "");
    release_now(&e, g.hold);
    hilock_client_free(c);
}

/* A lock name is any bytes: in a log line, only printable ASCII stays as
 * it is (a newline cannot forge a second line), and a long one is cut. */
Test(stats_text, log_quote) {
    char out[16];
    cr_expect_str_eq(hl_log_quote(out, sizeof(out), "a\n\"\\\x7f\xc3\xa9"), "a\\x0a\\x22...");
    char big[64];
    cr_expect_str_eq(hl_log_quote(big, sizeof(big), "a\n\"\\\x7f\xc3\xa9"),
                     "a\\x0a\\x22\\x5c\\x7f\\xc3\\xa9");
    cr_expect_str_eq(hl_log_quote(out, sizeof(out), "orders:42"), "orders:42");
    cr_expect_str_eq(hl_log_quote(out, sizeof(out), "0123456789abcdef"), "0123456789ab...");
    cr_expect_str_eq(hl_log_quote(out, 4, "abc"), "...");
    cr_expect_str_eq(hl_log_quote(out, sizeof(out), ""), "");
}

/* fallbacks counts the wakeups at the end of a holder's lease only: a fair
 * wait, a writer waiting for a reader and a starving mutex wait, each
 * behind a holder with a long lease for 3.5 s, refresh their places or
 * marker every second, which is no fallback (it was counted as one, so an
 * alert on it fired for any waiting name). A holder that dies without a
 * release is: its waiter counts one when the lease ends. */
Test(stats, fallbacks_count_lease_ends_only) {
    hilock_client *h = lockenv_client(&e), *c = lockenv_client(&e);
    hilock_acquire_opts lo = opts_wait_lease(0, 20000);
    got g[3], w[3];
    memset(g, 0, sizeof(g));
    cr_assert_eq(hilock_fair_acquire(h, "fb-fair", &lo, got_cb, &g[0], NULL), 0);
    cr_assert_eq(hilock_read_acquire(h, "fb-rw", &lo, got_cb, &g[1], NULL), 0);
    cr_assert_eq(hilock_acquire(h, "fb-mutex", &lo, got_cb, &g[2], NULL), 0);
    for (int i = 0; i < 3; i++) {
        cr_assert(test_loop_until(e.base, &g[i].calls, 3000));
        cr_assert_eq(g[i].status, 0);
    }
    hilock_acquire_opts wo = opts_wait_lease(4000, 1000);
    memset(w, 0, sizeof(w));
    cr_assert_eq(hilock_fair_acquire(c, "fb-fair", &wo, got_cb, &w[0], NULL), 0);
    cr_assert_eq(hilock_write_acquire(c, "fb-rw", &wo, got_cb, &w[1], NULL), 0);
    cr_assert_eq(hilock_acquire(c, "fb-mutex", &wo, got_cb, &w[2], NULL), 0);
    test_loop_for(e.base, 3500);
    hilock_stats s = stats_of(c);
    cr_expect_gt(s.tries, 6, "the waits did not refresh (%llu tries)", (unsigned long long)s.tries);
    cr_expect_eq(s.fallbacks, 0, "%llu fallback wakeups with nothing wrong", (unsigned long long)s.fallbacks);
    hilock_client_free(h); /* holds abandoned: no release, the leases run out */
    test_loop_until(e.base, &w[2].calls, 1000);
    hilock_client_free(c);

    /* A holder gone without a release: its waiter's wakeup at the lease's end. */
    h = lockenv_client(&e);
    c = lockenv_client(&e);
    hilock_acquire_opts so = opts_wait_lease(0, 600);
    got gh = {0, 0, NULL, 0}, gw = {0, 0, NULL, 0};
    cr_assert_eq(hilock_acquire(h, "fb-gone", &so, got_cb, &gh, NULL), 0);
    cr_assert(test_loop_until(e.base, &gh.calls, 3000));
    hilock_client_free(h);
    hilock_acquire_opts go = opts_wait_lease(3000, 1000);
    cr_assert_eq(hilock_acquire(c, "fb-gone", &go, got_cb, &gw, NULL), 0);
    cr_assert(test_loop_until(e.base, &gw.calls, 3000));
    cr_expect_eq(gw.status, 0);
    cr_expect_geq(stats_of(c).fallbacks, 1);
    if (gw.status == 0) release_now(&e, gw.hold);
    hilock_client_free(c);
}
