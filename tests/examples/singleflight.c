/* examples/http_singleflight under real concurrent HTTP load: several server
 * processes on one Redis, ab(1) (Debian's apache2-utils) hammering each of
 * them for the same few keys at once. The backend must run exactly once per
 * key across all servers, and every request must get a 200.
 *
 * ab sends its first request alone and only then opens its other
 * connections, so the cold round also sends a burst of requests from here:
 * BURST connections per server and key, all written before any answer can
 * come back, so they all find the entry missing and queue on its lock.
 *
 * The servers are BUILD/examples/http_singleflight (next to this binary) or
 * $HILOCK_SINGLEFLIGHT; ab is found in PATH or given as $HILOCK_AB. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "hilock/hilock.h"
#include "support/harness.h"

#define SERVERS 3
#define KEYS 4
#define PER_AB 40        /* requests of one ab run (one server, one key) */
#define PER_AB_S "40"
#define AB_CONC "10"     /* concurrent requests of one ab run */
#define BACKEND_MS "500"
#define BURST 20         /* simultaneous requests per server and key */
#define AB_PER_PAIR 2    /* ab runs per server and key in each round */

static const char *const keys[KEYS] = {"alpha", "beta", "gamma", "delta"};

static char dir[64];
static char server_bin[PATH_MAX];
static char ab_bin[PATH_MAX];
static test_redis srv;
static pid_t servers[SERVERS];
static int ports[SERVERS];


static const char *path_in(const char *file) {
    static char ring[8][PATH_MAX];
    static int next;
    char *p = ring[next++ % 8];
    snprintf(p, PATH_MAX, "%s/%s", dir, file);
    return p;
}




static int find_in_path(const char *name, char *out, size_t n) {
    const char *env = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", env ? env : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, n, "%s/%s", d, name);
        if (access(out, X_OK) == 0) return 0;
    }
    return -1;
}

/* ---- A burst of simultaneous requests ---------------------------------- */

typedef struct burst {
    int fd[SERVERS * KEYS * BURST];
    char resp[SERVERS * KEYS * BURST][512];
    size_t len[SERVERS * KEYS * BURST];
    int n;
} burst;

static int connect_to(int port) {
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((unsigned short)port);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "connect: %s", strerror(errno));
    return fd;
}

/* Open every connection and send every request; answers are read later. */
static void burst_send(burst *b) {
    memset(b, 0, sizeof(*b));
    for (int s = 0; s < SERVERS; s++)
        for (int k = 0; k < KEYS; k++)
            for (int i = 0; i < BURST; i++) {
                char req[128];
                int fd = connect_to(ports[s]);
                int n = snprintf(req, sizeof(req), "GET /%s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", keys[k]);
                cr_assert_eq(write(fd, req, (size_t)n), n);
                b->fd[b->n++] = fd;
            }
}

/* Read every answer to its end (HTTP/1.0: the server closes). */
static void burst_collect(burst *b, int ms) {
    struct pollfd pf[SERVERS * KEYS * BURST];
    long long until = test_now_ms() + ms;
    int open_n = b->n;
    while (open_n > 0 && test_now_ms() < until) {
        int m = 0, idx[SERVERS * KEYS * BURST];
        for (int i = 0; i < b->n; i++) {
            if (b->fd[i] < 0) continue;
            pf[m].fd = b->fd[i];
            pf[m].events = POLLIN;
            idx[m++] = i;
        }
        if (poll(pf, (nfds_t)m, 100) <= 0) continue;
        for (int j = 0; j < m; j++) {
            if (!(pf[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            int i = idx[j];
            size_t room = sizeof(b->resp[i]) - 1 - b->len[i];
            ssize_t r = room > 0 ? read(b->fd[i], b->resp[i] + b->len[i], room) : 0;
            if (r > 0) { b->len[i] += (size_t)r; continue; }
            if (r < 0 && errno == EINTR) continue;
            close(b->fd[i]);
            b->fd[i] = -1;
            open_n--;
        }
    }
    for (int i = 0; i < b->n; i++)
        if (b->fd[i] >= 0) { close(b->fd[i]); b->fd[i] = -1; }
}

/* ---- Fixture ------------------------------------------------------------ */

static void setup(void) {
    cr_assert_not_null(test_build_path("HILOCK_SINGLEFLIGHT", "examples/http_singleflight", server_bin,
                                       sizeof(server_bin)));
    const char *env;
    cr_assert_eq(access(server_bin, X_OK), 0, "%s is not built (make all builds it)", server_bin);
    env = getenv("HILOCK_AB");
    if (env != NULL && *env) snprintf(ab_bin, sizeof(ab_bin), "%s", env);
    else cr_assert_eq(find_in_path("ab", ab_bin, sizeof(ab_bin)), 0,
                      "ab not found: apt-get install apache2-utils (make test does)");
    snprintf(dir, sizeof(dir), "/tmp/hilock-sf-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(test_redis_start(&srv, 0, NULL), 0, "cannot start redis-server");
}

static void teardown(void) {
    char cmd[PATH_MAX + 16];
    for (int i = 0; i < SERVERS; i++) {
        if (servers[i] > 0) {
            kill(servers[i], SIGKILL);
            waitpid(servers[i], NULL, 0);
            servers[i] = 0;
        }
    }
    test_redis_stop(&srv);
    if (dir[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
}

/* Start server i and wait for its "listening on 127.0.0.1:PORT" line. */
static void start_server(int i) {
    char out[32], buf[4096];
    snprintf(out, sizeof(out), "server%d.out", i);
    char *argv[] = {server_bin, "-p", "0", "-u", srv.url, "-d", BACKEND_MS, "-t", "60", NULL};
    servers[i] = test_spawn(argv, NULL, path_in(out), NULL);
    long long until = test_now_ms() + 10000;
    const char *p = NULL;
    while (test_now_ms() < until) {
        test_slurp(path_in(out), buf, sizeof(buf));
        if ((p = strstr(buf, "listening on 127.0.0.1:")) != NULL && strchr(p, '\n')) break;
        p = NULL;
        cr_assert_eq(test_wait(servers[i], 0), -1, "server %d exited:\n%s", i, buf);
        test_msleep(10);
    }
    cr_assert_not_null(p, "server %d did not start:\n%s", i, buf);
    ports[i] = atoi(p + strlen("listening on 127.0.0.1:"));
    cr_assert_gt(ports[i], 0);
}

/* ab's "Label: N" value, or -1. */
static long ab_field(const char *text, const char *label) {
    const char *p = strstr(text, label);
    return p ? strtol(p + strlen(label), NULL, 10) : -1;
}

#define NAB (SERVERS * KEYS * AB_PER_PAIR)

/* One round: AB_PER_PAIR ab runs per (server, key), all at once, and with
 * `with_burst` a burst of simultaneous requests too; every request a 200.
 * Returns how many burst requests were answered after a wait for the lock
 * (X-Cache: wait) and how many ran the backend (X-Cache: miss). */
static void round_of_load(int round, int with_burst, long *burst_waited, long *burst_missed) {
    pid_t ab[NAB];
    char url[NAB][128], out[NAB][32];
    static burst b;
    for (int s = 0; s < SERVERS; s++) {
        for (int k = 0; k < KEYS; k++) {
            for (int a = 0; a < AB_PER_PAIR; a++) {
                int j = (s * KEYS + k) * AB_PER_PAIR + a;
                snprintf(url[j], sizeof(url[j]), "http://127.0.0.1:%d/%s", ports[s], keys[k]);
                snprintf(out[j], sizeof(out[j]), "ab%d-%d.out", round, j);
                char *argv[] = {ab_bin, "-q", "-n", (char *)PER_AB_S, "-c", (char *)AB_CONC,
                                "-s", "30", url[j], NULL};
                ab[j] = test_spawn(argv, NULL, path_in(out[j]), NULL);
            }
        }
    }
    if (with_burst) {
        burst_send(&b);
        burst_collect(&b, 60000);
        for (int i = 0; i < b.n; i++) {
            const char *r = b.resp[i];
            const char *key = keys[(i / BURST) % KEYS];
            char body[64];
            cr_expect(strncmp(r, "HTTP/1.", 7) == 0 && strncmp(r + 8, " 200 ", 5) == 0,
                      "burst request %d for %s got:\n%s", i, key, r);
            snprintf(body, sizeof(body), "\r\n\r\nvalue of %s\n", key);
            cr_expect_not_null(strstr(r, body), "burst request %d: wrong body:\n%s", i, r);
            if (strstr(r, "X-Cache: wait")) (*burst_waited)++;
            if (strstr(r, "X-Cache: miss")) (*burst_missed)++;
        }
    }
    for (int j = 0; j < NAB; j++) {
        char buf[8192];
        int st = test_wait(ab[j], 90000);
        if (st < 0) { kill(ab[j], SIGKILL); waitpid(ab[j], NULL, 0); }
        test_slurp(path_in(out[j]), buf, sizeof(buf));
        cr_expect_eq(st, 0, "ab %s (round %d) exited with %d:\n%s", url[j], round, st, buf);
        cr_expect_eq(ab_field(buf, "Complete requests:"), PER_AB, "%s:\n%s", url[j], buf);
        cr_expect_eq(ab_field(buf, "Failed requests:"), 0, "%s:\n%s", url[j], buf);
        cr_expect_null(strstr(buf, "Non-2xx responses:"), "%s:\n%s", url[j], buf);
    }
}

/* ---- The test ----------------------------------------------------------- */

Test(singleflight, one_backend_call_per_key, .init = setup, .fini = teardown, .timeout = 240) {
    char buf[1 << 16];
    for (int i = 0; i < SERVERS; i++) start_server(i);

    long burst_waited = 0, burst_missed = 0;
    round_of_load(1, 1, &burst_waited, &burst_missed); /* every key missing */
    round_of_load(2, 0, NULL, NULL);                    /* every key cached */

    /* Stop: each server finishes, prints its stats and exits 0. */
    for (int i = 0; i < SERVERS; i++) kill(servers[i], SIGTERM);
    long requests = 0, hits = 0, waited = 0, computed = 0, errors = 0;
    int backend[KEYS] = {0};
    for (int i = 0; i < SERVERS; i++) {
        char out[32];
        int st = test_wait(servers[i], 20000);
        snprintf(out, sizeof(out), "server%d.out", i);
        test_slurp(path_in(out), buf, sizeof(buf));
        cr_expect_eq(st, 0, "server %d exited with %d:\n%s", i, st, buf);
        if (st < 0) kill(servers[i], SIGKILL);
        servers[i] = 0;

        for (const char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
            for (int k = 0; k < KEYS; k++) {
                size_t n = strlen(keys[k]);
                if (strncmp(line, "backend ", 8) == 0 && strncmp(line + 8, keys[k], n) == 0 &&
                    line[8 + n] == '\n')
                    backend[k]++;
            }
        }
        long rq = -1, h = -1, w = -1, c = -1, e = -1;
        const char *st_line = strstr(buf, "stats ");
        cr_assert_not_null(st_line, "server %d printed no stats:\n%s", i, buf);
        cr_assert_eq(sscanf(st_line, "stats requests=%ld hits=%ld waited=%ld computed=%ld errors=%ld",
                            &rq, &h, &w, &c, &e), 5);
        cr_expect_eq(rq, h + w + c + e, "server %d: %s", i, st_line);
        requests += rq; hits += h; waited += w; computed += c; errors += e;
    }

    cr_log_info("singleflight: requests=%ld hits=%ld waited=%ld computed=%ld errors=%ld; "
                "burst: %ld waited, %ld ran the backend",
                requests, hits, waited, computed, errors, burst_waited, burst_missed);
    for (int k = 0; k < KEYS; k++)
        cr_expect_eq(backend[k], 1, "the backend ran %d times for %s", backend[k], keys[k]);
    cr_expect_eq(computed, KEYS);
    cr_expect_eq(errors, 0);
    cr_expect_eq(requests, 2L * NAB * PER_AB + (long)SERVERS * KEYS * BURST);
    /* Round 2 alone is NAB * PER_AB hits. */
    cr_expect_geq(hits, (long)NAB * PER_AB);
    /* The burst was all in flight before any value existed: one request per
     * key ran the backend (unless an ab request beat it to it), the others
     * queued on the lock and were answered from the cache when it freed. */
    cr_expect_leq(burst_missed, KEYS);
    cr_expect_geq(burst_waited, (long)SERVERS * KEYS * BURST / 2,
                  "only %ld of the burst's %d requests waited for a lock",
                  burst_waited, SERVERS * KEYS * BURST);
    cr_expect_geq(waited, burst_waited);

    /* What Redis kept: the values, and no lock. */
    for (int k = 0; k < KEYS; k++) {
        char lockname[64];
        cr_expect_eq(test_redis_int(&srv, "EXISTS cache:%s", keys[k]), 1);
        snprintf(lockname, sizeof(lockname), "cache:%s", keys[k]);
        char key[256];
        hilock_key("hilock:", lockname, key, sizeof(key));
        cr_expect_eq(test_redis_int(&srv, "EXISTS %s", key), 0, "lock %s left behind", key);
    }
}
