/* hilock-bench: clocks, statistics, JSON lines, processes, a synchronous
 * Redis side connection, and the hilock client behind the lock_impl
 * interface. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "hilock/hilock.h"
#include <hilock/adapters/libevent.h>
#ifdef HILOCK_HAVE_TLS
#include <hiredis/hiredis_ssl.h>
#endif

bench_opts g_opts;
bench_target g_standalone;
bench_target g_tls;

/* ---- Time and statistics ----------------------------------------------- */

uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void sort_u64(uint64_t *v, size_t n) { qsort(v, n, sizeof *v, cmp_u64); }

uint64_t pct_u64(const uint64_t *v, size_t n, double p) {
    if (n == 0) return 0;
    size_t rank = (size_t)(p / 100.0 * (double)n + 0.999999);
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return v[rank - 1];
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double median_d(double *v, size_t n) {
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double series_median(const double *v, int n) {
    double tmp[SERIES_MAX];
    if (n > SERIES_MAX) n = SERIES_MAX;
    if (n <= 0) return 0;
    memcpy(tmp, v, sizeof(double) * (size_t)n);
    return median_d(tmp, (size_t)n);
}

void ho_series_add(ho_series *s, const handoff_result *r, const handoff_result *base) {
    s->errors += r->errors;
    s->handoffs += r->handoffs;
    if (r->handoffs == 0 || s->n >= SERIES_MAX) return;
    int ok = base != NULL && base->errors == 0 && base->p50 > 0 && base->ping50 > 0;
    s->p50[s->n] = r->p50;
    s->p90[s->n] = r->p90;
    s->p99[s->n] = r->p99;
    s->ping[s->n] = r->ping50;
    s->ratio[s->n] = ok ? r->p50 / base->p50 : 0;
    s->ping_ratio[s->n] = ok ? r->ping50 / base->ping50 : 0;
    s->n++;
}

void tp_series_add(tp_series *s, const tp_sample *x, double base_locks) {
    s->errors += x->errors;
    if (x->errors || s->n >= SERIES_MAX) return;
    s->locks[s->n] = x->locks_per_s;
    s->ratio[s->n] = base_locks > 0 ? x->locks_per_s / base_locks : 0;
    s->cpu[s->n] = x->cpu_us_per_lock;
    s->scripts[s->n] = x->scripts_per_s;
    s->share_min[s->n] = x->node_share_min;
    s->share_max[s->n] = x->node_share_max;
    s->n++;
}

static uint64_t rng_state = 88172645463325252ull;

void rnd_seed(uint64_t s) { rng_state = s ? s : 88172645463325252ull; }

uint64_t rnd(uint64_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return n ? rng_state % n : 0;
}

/* ---- JSON lines ------------------------------------------------------- */

static char jbuf[4096];
static size_t jlen;

static void jput(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(jbuf + jlen, sizeof jbuf - jlen, fmt, ap);
    va_end(ap);
    if (w > 0) jlen += (size_t)w < sizeof jbuf - jlen ? (size_t)w : sizeof jbuf - jlen - 1;
}

static void jkey(const char *k) { jput("%s\"%s\":", jlen > 1 ? "," : "", k); }

void json_begin(const char *scenario) {
    jlen = 0;
    jput("{");
    json_str("scenario", scenario);
}

void json_str(const char *k, const char *v) {
    jkey(k);
    jput("\"");
    for (const char *p = v; *p; p++) {
        if (*p == '"' || *p == '\\') jput("\\%c", *p);
        else if ((unsigned char)*p < 0x20) jput("\\u%04x", (unsigned char)*p);
        else jput("%c", *p);
    }
    jput("\"");
}

void json_int(const char *k, long long v) { jkey(k); jput("%lld", v); }

void json_num(const char *k, double v, int decimals) {
    jkey(k);
    if (v != v) jput("null"); /* NaN */
    else jput("%.*f", decimals, v);
}

void json_bool(const char *k, int v) { jkey(k); jput(v ? "true" : "false"); }

void json_end(void) {
    jput("}");
    printf("%s\n", jbuf);
    fflush(stdout);
}

/* ---- Processes, shared memory, pipes ------------------------------------ */

void *shm_alloc(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void shm_free(void *p, size_t n) {
    if (p != NULL) munmap(p, n);
}

pid_t fork_child(void) {
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid != 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    rnd_seed(now_ns() ^ ((uint64_t)getpid() << 32));
    return 0;
}

int wait_child(pid_t pid, int timeout_ms) {
    uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000u;
    int status;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) return -1;
        if (now_ns() > deadline) {
            fprintf(stderr, "bench: child %ld did not finish in %d ms; killing it\n",
                    (long)pid, timeout_ms);
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
            return -1;
        }
        usleep(2000);
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    fprintf(stderr, "bench: child %ld died of signal %d\n", (long)pid,
            WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return -1;
}

int read_byte(int fd, int timeout_ms) {
    struct pollfd p = {fd, POLLIN, 0};
    uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000u;
    for (;;) {
        int left = (int)((deadline - now_ns()) / 1000000u);
        if (now_ns() >= deadline) return -1;
        int r = poll(&p, 1, left < 1 ? 1 : left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { if (r == 0) continue; return -1; }
        unsigned char b;
        ssize_t n = read(fd, &b, 1);
        if (n == 1) return b;
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        return -1;
    }
}

int write_byte(int fd, char b) {
    for (;;) {
        ssize_t n = write(fd, &b, 1);
        if (n == 1) return 0;
        if (n < 0 && errno == EINTR) continue;
        return -1;
    }
}

void set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* ---- Event loops -------------------------------------------------------- */

struct event_base *base_new(void) {
    struct event_config *cfg = event_config_new();
    struct event_base *b = NULL;
    if (cfg != NULL) {
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        b = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    return b;
}

static void on_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
}

int loop_until(struct event_base *base, volatile int *flag, int timeout_ms) {
    uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000u;
    struct event *tick = evtimer_new(base, on_tick, NULL);
    while (!*flag) {
        uint64_t now = now_ns();
        if (now >= deadline) break;
        uint64_t left = (deadline - now) / 1000u;
        struct timeval tv = {(time_t)(left / 1000000u), (suseconds_t)(left % 1000000u)};
        evtimer_add(tick, &tv);
        event_base_loop(base, EVLOOP_ONCE);
    }
    event_free(tick);
    return *flag;
}

/* ---- Synchronous side connection ---------------------------------------- */

redisContext *node_connect(const char *host, int port) {
    struct timeval tv = {5, 0};
    redisContext *rc = redisConnectWithTimeout(host, port, tv);
    if (rc == NULL || rc->err) {
        fprintf(stderr, "bench: cannot connect to %s:%d: %s\n", host, port,
                rc ? rc->errstr : "out of memory");
        if (rc) redisFree(rc);
        return NULL;
    }
    redisSetTimeout(rc, tv);
    return rc;
}

redisContext *sync_connect(void) { return node_connect(g_opts.host, g_opts.port); }

redisContext *target_connect(const bench_target *t, int i) {
    redisContext *rc = node_connect(t->node[i].host, t->node[i].port);
    if (rc == NULL || t->tls_ca == NULL) return rc;
#ifdef HILOCK_HAVE_TLS
    /* One context per process, made on first use (a fork's child inherits
     * it): the CA is read once, not per connection. One CA per run. */
    static redisSSLContext *ssl;
    redisSSLContextError err = REDIS_SSL_CTX_NONE;
    if (ssl == NULL) ssl = redisCreateSSLContext(t->tls_ca, NULL, NULL, NULL, NULL, &err);
    if (ssl == NULL) {
        fprintf(stderr, "bench: TLS context (CA %s): %s\n", t->tls_ca, redisSSLContextGetError(err));
    } else if (redisInitiateSSLWithContext(rc, ssl) != REDIS_OK) {
        fprintf(stderr, "bench: TLS to %s:%d: %s\n", t->node[i].host, t->node[i].port, rc->errstr);
    } else {
        return rc;
    }
#else
    fprintf(stderr, "bench: %s:%d: TLS is not built in\n", t->node[i].host, t->node[i].port);
#endif
    redisFree(rc);
    return NULL;
}

int ping_rtts(redisContext *rc, uint64_t *out, int n) {
    for (int i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        redisReply *r = redisCommand(rc, "PING");
        uint64_t t1 = now_ns();
        if (r == NULL) return -1;
        freeReplyObject(r);
        out[i] = t1 - t0;
    }
    return 0;
}

int cmdstats_get(redisContext *rc, cmdstats *out) {
    memset(out, 0, sizeof *out);
    redisReply *r = redisCommand(rc, "INFO commandstats");
    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        if (r) freeReplyObject(r);
        return -1;
    }
    /* cmdstat_<name>:calls=N,usec=... */
    for (char *p = strstr(r->str, "cmdstat_"); p && out->n < CMDSTAT_MAX;
         p = strstr(p + 1, "cmdstat_")) {
        char *colon = strchr(p, ':');
        char *calls = colon ? strstr(colon, "calls=") : NULL;
        char *usec = colon ? strstr(colon, "usec=") : NULL;
        if (colon == NULL || calls == NULL) break;
        size_t len = (size_t)(colon - p - 8);
        if (len >= sizeof out->name[0]) continue;
        memcpy(out->name[out->n], p + 8, len);
        out->name[out->n][len] = '\0';
        out->calls[out->n] = strtoll(calls + 6, NULL, 10);
        out->usec[out->n] = usec ? strtoll(usec + 5, NULL, 10) : 0;
        out->n++;
    }
    freeReplyObject(r);
    return 0;
}

long long cmdstats_calls(const cmdstats *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->name[i], name) == 0) return s->calls[i];
    return 0;
}

long long cmdstats_delta(const cmdstats *before, const cmdstats *after, const char *const *names) {
    long long d = 0;
    for (; *names; names++) d += cmdstats_calls(after, *names) - cmdstats_calls(before, *names);
    return d;
}

static long long cmdstats_usec(const cmdstats *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->name[i], name) == 0) return s->usec[i];
    return 0;
}

long long cmdstats_usec_delta(const cmdstats *before, const cmdstats *after, const char *const *names) {
    long long d = 0;
    for (; *names; names++) d += cmdstats_usec(after, *names) - cmdstats_usec(before, *names);
    return d;
}

long long cmdstats_delta_all(const cmdstats *before, const cmdstats *after) {
    long long d = 0;
    for (int i = 0; i < after->n; i++)
        if (strcmp(after->name[i], "info") != 0)
            d += after->calls[i] - cmdstats_calls(before, after->name[i]);
    return d;
}

int subscriber_connections(redisContext *rc) {
    redisReply *r = redisCommand(rc, "CLIENT LIST");
    int n = 0;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        for (char *p = strstr(r->str, " sub="); p; p = strstr(p + 1, " sub="))
            if (strtol(p + 5, NULL, 10) > 0) n++;
    } else {
        n = -1;
    }
    if (r) freeReplyObject(r);
    return n;
}

void delete_keys(redisContext *rc, const char *pattern) {
    char cursor[32] = "0";
    do {
        redisReply *r = redisCommand(rc, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            if (r) freeReplyObject(r);
            return;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        redisReply *keys = r->element[1];
        if (keys->elements > 0) {
            const char **argv = malloc((keys->elements + 1) * sizeof *argv);
            size_t *lens = malloc((keys->elements + 1) * sizeof *lens);
            if (argv && lens) {
                argv[0] = "UNLINK";
                lens[0] = 6;
                for (size_t i = 0; i < keys->elements; i++) {
                    argv[i + 1] = keys->element[i]->str;
                    lens[i + 1] = keys->element[i]->len;
                }
                redisReply *d = redisCommandArgv(rc, (int)keys->elements + 1, argv, lens);
                if (d) freeReplyObject(d);
            }
            free(argv);
            free(lens);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
}

long long redis_int(redisContext *rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    long long v = -1;
    if (r != NULL && r->type == REDIS_REPLY_INTEGER) v = r->integer;
    if (r) freeReplyObject(r);
    return v;
}

/* ---- hilock behind lock_impl -------------------------------------------- */

static void hl_acquired(hilock_hold *hold, int status, void *data) {
    bench_waiter *w = data;
    w->acquired(w, hold, status);
}

static void hl_released(int status, void *data) {
    bench_waiter *w = data;
    if (w->released) w->released(w, status);
}

hilock_client *bench_hilock_client_cfg(struct event_base *base, const hilock_config *cfg) {
    hilock_loop loop;
    hilock_libevent_init(&loop, base);
    hilock_client *c = NULL;
    int rc = hilock_client_new(&c, cfg, &loop);
    if (rc != HILOCK_OK) {
        fprintf(stderr, "bench: hilock_client_new(%s): %s\n", cfg->url, hilock_strerror(rc));
        return NULL;
    }
    return c;
}

hilock_client *bench_hilock_client(struct event_base *base, const bench_target *t) {
    hilock_config cfg;
    hilock_config_init(&cfg);
    cfg.url = t->url;
    cfg.pubsub = t->pubsub;
    cfg.tls_ca_file = t->tls_ca;
    return bench_hilock_client_cfg(base, &cfg);
}

static void *hl_client_new(struct event_base *base, const bench_target *t) {
    return bench_hilock_client(base, t);
}

static void hl_client_free(void *c) { hilock_client_free(c); }

static int hl_acquire(void *c, const char *name, bench_waiter *w) {
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.wait_ms = HILOCK_WAIT_FOREVER;
    return hilock_acquire(c, name, &o, hl_acquired, w, NULL);
}

/* The fair lock (hilock_fair_acquire), behind the same interface: the
 * scenarios take the primitive as their lock_impl. */
static int hl_fair_acquire(void *c, const char *name, bench_waiter *w) {
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.wait_ms = HILOCK_WAIT_FOREVER;
    return hilock_fair_acquire(c, name, &o, hl_acquired, w, NULL);
}

static int hl_release(void *c, void *hold, bench_waiter *w) {
    (void)c;
    return hilock_release(hold, hl_released, w);
}

static unsigned long long hl_messages(void *c) {
    hilock_stats s;
    hilock_stats_init(&s);
    return hilock_client_stats(c, &s) == 0 ? (unsigned long long)s.wakeups : 0;
}

static const char *const hl_commands[] = {"evalsha", "eval", "subscribe", "unsubscribe", "ping", NULL};

const lock_impl hilock_impl = {
    "hilock", hl_commands, hl_client_new, hl_client_free, hl_acquire, hl_release, hl_messages,
};

const lock_impl hilock_fair_impl = {
    "hilock-fair", hl_commands, hl_client_new, hl_client_free, hl_fair_acquire, hl_release, hl_messages,
};

double redis_cpu_seconds(redisContext *rc) {
    redisReply *r = redisCommand(rc, "INFO cpu");
    double cpu = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        const char *sys = strstr(r->str, "used_cpu_sys:"), *user = strstr(r->str, "used_cpu_user:");
        if (sys != NULL && user != NULL) cpu = strtod(sys + 13, NULL) + strtod(user + 14, NULL);
    }
    if (r) freeReplyObject(r);
    return cpu;
}

double redis_benchmark_run(const char *const *cmd, long n, int pipeline) {
    char port[16], nreq[32], pipe_n[16];
    const char *argv[48];
    int a = 0;
    snprintf(port, sizeof port, "%d", g_opts.port);
    snprintf(nreq, sizeof nreq, "%ld", n);
    snprintf(pipe_n, sizeof pipe_n, "%d", pipeline > 0 ? pipeline : 1);
    const char *head[] = {g_opts.redis_benchmark, "-h", g_opts.host, "-p", port, "-P", pipe_n,
                          "-c", "50", "-n", nreq, "-r", "100000000", "--csv"};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) argv[a++] = head[i];
    while (*cmd && a < 47) argv[a++] = *cmd++;
    argv[a] = NULL;
    int out[2];
    if (pipe(out)) return -1;
    pid_t pid = fork_child();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        close(out[1]);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 2);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    char buf[8192];
    size_t len = 0;
    ssize_t m;
    while ((m = read(out[0], buf + len, sizeof buf - 1 - len)) > 0 || (m < 0 && errno == EINTR))
        if (m > 0) len += (size_t)m;
    buf[len] = '\0';
    close(out[0]);
    if (wait_child(pid, 60000) != 0) {
        fprintf(stderr, "%s failed\n", g_opts.redis_benchmark);
        return -1;
    }
    /* --csv: a header line ("test","rps",...) then "COMMAND ...","12345.67",... */
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (line[0] != '"' || strncmp(line, "\"test\"", 6) == 0) continue;
        char *q = strstr(line, "\",\"");
        if (q) return strtod(q + 3, NULL);
    }
    fprintf(stderr, "no rate in redis-benchmark's output: %.200s\n", buf);
    return -1;
}
