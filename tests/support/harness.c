/* Test harness: real redis-server processes on free loopback ports (see
 * harness.h). Each server runs in its own mkdtemp() directory, is started with
 * PR_SET_PDEATHSIG so that it dies with the test process, and is removed with
 * its directory by test_redis_stop().
 *
 * Environment:
 *   HILOCK_SERVER        "valkey": Valkey's programs in place of Redis's
 *   HILOCK_REDIS_SERVER  the server binary (default: redis-server or
 *                        valkey-server, from PATH)
 *   HILOCK_TEST_RUN_ID   tag put into the temp dir names, so that
 *                        scripts/run-tests.sh can find servers a run left behind
 *   TMPDIR               where the temp dirs go (default /tmp) */
#include "harness.h"
#include <event2/event.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define START_WAIT_MS 5000
#define START_TRIES 5      /* new ports to try when the server dies at start */
#define MAX_EXTRA_ARGS 64

/* Every test process ignores SIGPIPE, as docs/getting-started.md asks of programs that
 * use hilock: hiredis (and OpenSSL) write with write(2), and a write to a
 * connection that a test killed (CLIENT KILL, kill -9) would otherwise
 * kill the test. Processes the harness starts get the default back
 * (spawn_detached). */
__attribute__((constructor)) static void ignore_sigpipe(void) { signal(SIGPIPE, SIG_IGN); }

long long test_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

/* ---- Ports ---------------------------------------------------------------- */

int test_refused_port(void) {
    /* Bound, never listening: a connection there is refused, and no other
     * process (a server a parallel test starts) can take the port while
     * this one lives, as the socket stays open until the process ends. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0) return -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
        close(fd);
        return -1;
    }
    return ntohs(sa.sin_port);
}

int test_free_port(void) {
    /* Keep port + 10000 (the Redis Cluster bus port) a valid port too, so a
     * server started with --cluster-enabled yes can use the same helper. */
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return -1;
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof(sa));
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sa.sin_port = 0;
        socklen_t sl = sizeof(sa);
        int port = -1;
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
            port = ntohs(sa.sin_port);
        close(fd);
        if (port < 0) return -1;
        if (port <= 65535 - 10000) return port;
    }
    return -1;
}

/* ---- Temp dirs ------------------------------------------------------------ */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

static void rm_rf(const char *dir) {
    if (dir[0] != '\0') nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int make_dir(char *out, size_t n) {
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] != '/' || strlen(tmp) > 64) tmp = "/tmp";
    /* Only [A-Za-z0-9_] of the run id, at most 24 chars. */
    char id[25] = "";
    const char *env = getenv("HILOCK_TEST_RUN_ID");
    if (env != NULL) {
        size_t k = 0;
        for (const char *p = env; *p && k < sizeof(id) - 1; p++)
            if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                (*p >= '0' && *p <= '9') || *p == '_')
                id[k++] = *p;
        id[k] = '\0';
    }
    int w = snprintf(out, n, "%s/hilock-test-%s%sXXXXXX", tmp, id, id[0] ? "-" : "");
    if (w < 0 || (size_t)w >= n) return -1;
    return mkdtemp(out) ? 0 : -1;
}

int test_make_dir(char *out, size_t n) { return make_dir(out, n); }

void test_remove_dir(const char *dir) { rm_rf(dir); }

/* ---- Server processes ----------------------------------------------------- */

static void close_fds_from(int lowfd) {
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lowfd, ~0U, 0) == 0) return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536) max = 65536;
    for (int fd = lowfd; fd < max; fd++) close(fd);
}

static int server_is_valkey(void) {
    const char *s = getenv("HILOCK_SERVER");
    return s != NULL && strcmp(s, "valkey") == 0;
}

const char *test_server_bin(void) {
    const char *bin = getenv("HILOCK_REDIS_SERVER");
    if (bin != NULL && bin[0] != '\0') return bin;
    return server_is_valkey() ? "valkey-server" : "redis-server";
}

const char *test_cli_bin(void) { return server_is_valkey() ? "valkey-cli" : "redis-cli"; }

/* fork + exec redis-server; returns the pid or -1. Never returns in the child. */
static pid_t spawn(const test_redis *r, const char *const *extra, int nextra) {
    char port[16], logfile[192], outfile[192];
    snprintf(port, sizeof(port), "%d", r->port);
    snprintf(logfile, sizeof(logfile), "%s/redis.log", r->dir);
    snprintf(outfile, sizeof(outfile), "%s/stdout.log", r->dir);

    const char *bin = test_server_bin();

    const char *argv[24 + MAX_EXTRA_ARGS];
    int a = 0;
    argv[a++] = bin;
    argv[a++] = "--port"; argv[a++] = port;
    argv[a++] = "--bind"; argv[a++] = "127.0.0.1";
    argv[a++] = "--save"; argv[a++] = "";
    argv[a++] = "--appendonly"; argv[a++] = "no";
    argv[a++] = "--dir"; argv[a++] = r->dir;
    argv[a++] = "--daemonize"; argv[a++] = "no";
    argv[a++] = "--logfile"; argv[a++] = logfile;
    for (int i = 0; i < nextra; i++) argv[a++] = extra[i];
    argv[a] = NULL;
    return test_spawn_server(argv, outfile, NULL);
}

static pid_t spawn_detached(const char *const *argv, char *const env[], const char *outfile,
                            const char *dir, int deathsig);

pid_t test_spawn_server(const char *const *argv, const char *outfile, const char *dir) {
    return spawn_detached(argv, NULL, outfile, dir, SIGKILL);
}

pid_t test_spawn_master(const char *const *argv, char *const env[], const char *outfile,
                        const char *dir) {
    return spawn_detached(argv, env, outfile, dir, SIGTERM);
}

static pid_t spawn_detached(const char *const *argv, char *const env[], const char *outfile,
                            const char *dir, int deathsig) {
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid > 0) return pid;

    /* Child: die with the test process (and close the race where it died
     * before the prctl). */
    prctl(PR_SET_PDEATHSIG, deathsig);
    if (getppid() != parent) _exit(127);
    signal(SIGPIPE, SIG_DFL);
    for (; env != NULL && *env != NULL; env++) putenv(*env);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int in = open("/dev/null", O_RDONLY);
    int out = open(outfile, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (in >= 0) dup2(in, 0);
    if (out >= 0) { dup2(out, 1); dup2(out, 2); }
    close_fds_from(3);
    if (dir != NULL && chdir(dir) != 0) _exit(127);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
}

static void reap(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
}

/* The value of "process_id:" in an INFO reply, or -1. */
static long info_pid(const char *info) {
    const char *p = strstr(info, "process_id:");
    return p ? strtol(p + 11, NULL, 10) : -1;
}

/* 1: our server answers; 0: not yet; -1: it died; -2: another server answers. */
static int probe(const test_redis *r) {
    int status;
    pid_t w = waitpid(r->pid, &status, WNOHANG);
    if (w == r->pid || (w < 0 && errno == ECHILD)) return -1;
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    if (c == NULL) return 0;
    if (c->err) { redisFree(c); return 0; }
    int ok = 0;
    redisReply *rep = redisCommand(c, "PING");
    if (rep != NULL) {
        if (rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_STRING) {
            ok = 1;
            /* Make sure it is our process that answers, not another server
             * that grabbed the port between test_free_port and our bind. */
            redisReply *info = redisCommand(c, "INFO server");
            if (info != NULL && info->type == REDIS_REPLY_STRING) {
                long p = info_pid(info->str);
                if (p > 0 && p != (long)r->pid) ok = -2;
            }
            if (info) freeReplyObject(info);
        } else if (rep->type == REDIS_REPLY_ERROR) {
            /* NOAUTH (--requirepass) means it is up; LOADING, not yet. */
            if (strncmp(rep->str, "LOADING", 7) != 0) ok = 1;
        }
        freeReplyObject(rep);
    }
    redisFree(c);
    if (ok == 1 && waitpid(r->pid, &status, WNOHANG) != 0) ok = -1;
    return ok;
}

int test_redis_probe(const test_redis *r) { return probe(r); }

static void dump_file(const char *dir, const char *name) {
    char path[256], line[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    while (fgets(line, sizeof(line), f)) fprintf(stderr, "  | %s", line);
    fclose(f);
}

static int file_has(const char *dir, const char *name, const char *needle) {
    char path[256], line[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    int found = 0;
    while (!found && fgets(line, sizeof(line), f)) found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/* Did the server fail because its port (or cluster bus port) was taken? */
static int port_was_taken(const test_redis *r) {
    return file_has(r->dir, "redis.log", "already in use") ||
           file_has(r->dir, "stdout.log", "already in use") ||
           file_has(r->dir, "redis.log", "Failed listening");
}

static int redis_start_v(test_redis *r, int port, const char *const *extra, int nextra);

int test_redis_start(test_redis *r, int port, ...) {
    const char *extra[MAX_EXTRA_ARGS];
    int nextra = 0;
    va_list ap;
    va_start(ap, port);
    for (const char *s; (s = va_arg(ap, const char *)) != NULL;) {
        if (nextra == MAX_EXTRA_ARGS) { va_end(ap); return -1; }
        extra[nextra++] = s;
    }
    va_end(ap);
    return redis_start_v(r, port, extra, nextra);
}

static int redis_start_v(test_redis *r, int port, const char *const *extra, int nextra) {
    memset(r, 0, sizeof(*r));
    int tries = port > 0 ? 1 : START_TRIES;
    for (int t = 0; t < tries; t++) {
        memset(r, 0, sizeof(*r));
        r->port = port > 0 ? port : test_free_port();
        if (r->port <= 0) return -1;
        if (make_dir(r->dir, sizeof(r->dir)) < 0) {
            fprintf(stderr, "harness: mkdtemp: %s\n", strerror(errno));
            r->dir[0] = '\0';
            return -1;
        }
        snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
        r->pid = spawn(r, extra, nextra);
        if (r->pid < 0) {
            fprintf(stderr, "harness: fork: %s\n", strerror(errno));
            rm_rf(r->dir);
            memset(r, 0, sizeof(*r));
            return -1;
        }
        long long deadline = test_now_ms() + START_WAIT_MS;
        int st = 0;
        while ((st = probe(r)) == 0 && test_now_ms() < deadline) sleep_ms(10);
        if (st == 1) return 0;
        /* Only a lost port race is worth another port; a bad argument or a
         * missing binary fails the same way every time. */
        int retry = st == -2 || (st == -1 && port_was_taken(r));
        fprintf(stderr, "harness: redis-server on port %d %s%s\n", r->port,
                st == -2 ? "lost its port to another server"
                : st == -1 ? "exited" : "did not answer PING in time",
                retry && t + 1 < tries ? "; retrying on another port" : "");
        if (st == -1 && !file_has(r->dir, "stdout.log", "") && !file_has(r->dir, "redis.log", ""))
            fprintf(stderr, "harness: is redis-server installed? (set HILOCK_REDIS_SERVER)\n");
        dump_file(r->dir, "stdout.log");
        dump_file(r->dir, "redis.log");
        test_redis_stop(r);
        if (!retry) break;
    }
    return -1;
}

void test_redis_stop(test_redis *r) {
    if (r == NULL) return;
    if (r->pid > 0) reap(r->pid);
    r->pid = 0;
    rm_rf(r->dir);
    r->dir[0] = '\0';
}

redisContext *test_redis_connect(const test_redis *r) {
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    if (c == NULL) return NULL;
    if (c->err) { redisFree(c); return NULL; }
    redisSetTimeout(c, tv);
    return c;
}

/* One command on a fresh connection: its reply (caller frees), or NULL. */
static redisReply *vcmd(const test_redis *r, const char *fmt, va_list ap) {
    redisContext *c = test_redis_connect(r);
    if (c == NULL) return NULL;
    redisReply *rep = redisvCommand(c, fmt, ap);
    redisFree(c);
    return rep;
}

redisReply *test_redis_cmd(const test_redis *r, const char *fmt, ...) {
    if (r == NULL || r->pid <= 0) return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = vcmd(r, fmt, ap);
    va_end(ap);
    return rep;
}

int test_redis_says(const test_redis *r, const char *cmd, ...) {
    redisReply *rep = test_redis_cmd(r, cmd); /* cmd without arguments */
    int yes = rep != NULL && rep->type == REDIS_REPLY_STRING;
    va_list ap;
    va_start(ap, cmd);
    for (const char *n; yes && (n = va_arg(ap, const char *)) != NULL;) yes = strstr(rep->str, n) != NULL;
    va_end(ap);
    if (rep) freeReplyObject(rep);
    return yes;
}

long long test_redis_int(const test_redis *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = vcmd(r, fmt, ap);
    va_end(ap);
    long long v = -1;
    if (rep != NULL) {
        if (rep->type == REDIS_REPLY_INTEGER) {
            v = rep->integer;
        } else if (rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
                   rep->element[rep->elements - 1]->type == REDIS_REPLY_INTEGER) {
            /* PUBSUB NUMSUB ch -> [ch, n] */
            v = rep->element[rep->elements - 1]->integer;
        }
        freeReplyObject(rep);
    }
    return v;
}

long long test_redis_repl_num(const test_redis *r, const char *name) {
    redisReply *rep = test_redis_cmd(r, "INFO replication");
    char needle[64];
    snprintf(needle, sizeof(needle), "\n%s:", name);
    const char *p = rep && rep->type == REDIS_REPLY_STRING ? strstr(rep->str, needle) : NULL;
    long long v = p ? atoll(p + strlen(needle)) : -1;
    if (rep) freeReplyObject(rep);
    return v;
}

int test_redis_caught_up(const test_redis *m, const test_redis *r, int timeout_ms) {
    long long deadline = test_now_ms() + timeout_ms;
    for (;;) {
        long long mo = test_redis_repl_num(m, "master_repl_offset");
        long long ro = test_redis_repl_num(r, "slave_repl_offset");
        if (mo >= 0 && ro >= mo) return 1;
        if (test_now_ms() >= deadline) {
            fprintf(stderr, "harness: replica :%d has %lld of :%d's %lld bytes\n", r->port, ro, m->port, mo);
            return 0;
        }
        test_msleep(5);
    }
}

/* ---- Loop helpers --------------------------------------------------------- */

static void on_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
}

int test_loop_until(struct event_base *base, volatile int *flag, int timeout_ms) {
    long long deadline = test_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    struct event *tick = evtimer_new(base, on_tick, NULL);
    if (tick == NULL) return flag != NULL && *flag != 0;
    while (flag == NULL || *flag == 0) {
        long long left = deadline - test_now_ms();
        if (left <= 0) break;
        /* The timer bounds each turn, so EVLOOP_ONCE never blocks past the
         * deadline and never returns at once for lack of events. */
        struct timeval tv = {(time_t)(left / 1000), (suseconds_t)((left % 1000) * 1000)};
        evtimer_add(tick, &tv);
        event_base_loop(base, EVLOOP_ONCE);
    }
    event_free(tick);
    return flag != NULL && *flag != 0;
}

void test_loop_for(struct event_base *base, int ms) {
    test_loop_until(base, NULL, ms);
}

/* ---- Sanitizer builds ------------------------------------------------------ */

#if defined(__SANITIZE_ADDRESS__)
#define HARNESS_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HARNESS_LSAN 1
#endif
#endif

#ifdef HARNESS_LSAN
/* LeakSanitizer asks this at exit. Criterion 2.4's runner process (the one
 * that is not a test) leaks a few of its own allocations at exit, with no
 * test code on the stack, and would fail every sanitizer run; so skip the
 * leak check there only. Test processes, which BoxFort (Criterion's sandbox)
 * starts with BXFI_MAP in their environment, are still checked. */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) {
    return getenv("BXFI_MAP") == NULL;
}
#endif

int test_redis_start_debuggable(test_redis *r, int port) {
    if (test_redis_start(r, port, "--enable-debug-command", "yes", NULL) == 0) return 0;
    return test_redis_start(r, port, NULL);
}

pid_t test_redis_debug_sleep(const test_redis *r, const char *secs) {
    pid_t pid = fork();
    if (pid == 0) {
        redisContext *k = test_redis_connect(r);
        struct timeval tv = {30, 0};
        if (k) redisSetTimeout(k, tv);
        redisReply *rep = k ? redisCommand(k, "DEBUG SLEEP %s", secs) : NULL;
        _exit(rep && rep->type == REDIS_REPLY_STATUS ? 0 : 1);
    }
    return pid;
}

int test_listen_silent(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 64) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    getsockname(fd, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    return fd;
}

void test_msleep(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

char *test_slurp(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    size_t got = 0;
    if (f != NULL) {
        got = fread(buf, 1, n - 1, f);
        fclose(f);
    }
    buf[got] = '\0';
    return buf;
}

pid_t test_spawn(char *const argv[], char *const env[], const char *out, const char *err) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = err ? open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600) : o;
    int in = open("/dev/null", O_RDONLY);
    if (o >= 0) dup2(o, 1);
    if (e >= 0) dup2(e, 2);
    if (in >= 0) dup2(in, 0);
    signal(SIGPIPE, SIG_DFL);
    for (; env != NULL && *env != NULL; env++) putenv(*env);
    execvp(argv[0], argv);
    _exit(127);
}

int test_wait(pid_t pid, int ms) {
    long long until = test_now_ms() + ms;
    int st;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (w < 0 || test_now_ms() >= until) return -1;
        test_msleep(2);
    }
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

/* ---- Redis Cluster --------------------------------------------------------- */

/* The cluster says ok to `r`, a replica has its master's data, and a
 * master counts its replica online (so WAIT and failovers find replicas in
 * step from the first test on). */
static int cluster_ok(const test_redis *r) {
    redisContext *k = test_redis_connect(r);
    redisReply *rep = k ? redisCommand(k, "CLUSTER INFO") : NULL;
    redisReply *repl = k ? redisCommand(k, "INFO replication") : NULL;
    int ok = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "cluster_state:ok") != NULL &&
             repl && repl->type == REDIS_REPLY_STRING &&
             (strstr(repl->str, "role:master") ? strstr(repl->str, "state=online") != NULL
                                                : strstr(repl->str, "master_link_status:up") != NULL);
    if (rep) freeReplyObject(rep);
    if (repl) freeReplyObject(repl);
    if (k) redisFree(k);
    return ok;
}

/* A cluster node's options (the same at every start: a restart reads its
 * nodes.conf with them), then the test's own (cl->args) for that port.
 * Returns how many are in argv (at most MAX_EXTRA_ARGS), bus: its buffer. */
static int cluster_node_args(const test_cluster *cl, int port, char bus[16], const char **argv) {
    static const char *const base[] = {
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout", "2000", "--enable-debug-command", "yes",
        /* A replica may take over however long it has been idle (the
         * default refuses after 10 node timeouts without news from its
         * master). */
        "--cluster-replica-validity-factor", "0", "--repl-ping-replica-period", "1",
        /* Replicas sync at once (the default waits 5 s). */
        "--repl-diskless-sync-delay", "0"};
    int n = 0;
    snprintf(bus, 16, "%d", port + 10000);
    argv[n++] = "--cluster-port";
    argv[n++] = bus;
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) argv[n++] = base[i];
    if (cl->args != NULL) n += cl->args(port, argv + n, MAX_EXTRA_ARGS - n, cl->args_data);
    return n;
}

static int cluster_node_start(const test_cluster *cl, test_redis *r) {
    for (int attempt = 0; attempt < 5; attempt++) {
        int port = test_free_port(); /* keeps port + 10000 free for the bus */
        const char *argv[MAX_EXTRA_ARGS];
        char bus[16];
        int n = cluster_node_args(cl, port, bus, argv);
        if (redis_start_v(r, port, argv, n) == 0) return 0;
    }
    return -1;
}

int test_cluster_start(test_cluster *cl) { return test_cluster_start_with(cl, NULL, NULL); }

int test_cluster_start_with(test_cluster *cl, test_node_args args, void *data) {
    char addr[TEST_CLUSTER_NODES][32];
    char *argv[8 + TEST_CLUSTER_NODES] = {(char *)test_cli_bin(), "--cluster", "create"};
    int a = 3;
    memset(cl, 0, sizeof(*cl));
    cl->args = args;
    cl->args_data = data;
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) {
        if (cluster_node_start(cl, &cl->node[i]) != 0) { test_cluster_stop(cl); return -1; }
        snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", cl->node[i].port);
        argv[a++] = addr[i];
    }
    argv[a++] = "--cluster-replicas";
    argv[a++] = "1";
    argv[a++] = "--cluster-yes";
    argv[a] = NULL;
    char out[160];
    snprintf(out, sizeof(out), "%s/cluster-create.log", cl->node[0].dir);
    if (test_wait(test_spawn(argv, NULL, out, NULL), 30000) != 0) {
        fprintf(stderr, "harness: redis-cli --cluster create failed (see %s)\n", out);
        test_cluster_stop(cl);
        return -1;
    }
    long long deadline = test_now_ms() + 20000;
    for (int i = 0; i < TEST_CLUSTER_NODES; i++)
        while (!cluster_ok(&cl->node[i])) {
            if (test_now_ms() > deadline) { test_cluster_stop(cl); return -1; }
            test_msleep(50);
        }
    snprintf(cl->url, sizeof(cl->url), "%s", cl->node[0].url);
    return 0;
}

void test_cluster_stop(test_cluster *cl) {
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) test_redis_stop(&cl->node[i]);
}

test_redis *test_cluster_master_of(test_cluster *cl, unsigned slot) {
    for (int i = 0; i < TEST_CLUSTER_NODES; i++) {
        redisContext *k = cl->node[i].pid > 0 ? test_redis_connect(&cl->node[i]) : NULL;
        redisReply *rep = k ? redisCommand(k, "CLUSTER SLOTS") : NULL;
        int port = -1;
        for (size_t j = 0; rep && rep->type == REDIS_REPLY_ARRAY && j < rep->elements; j++) {
            redisReply *e = rep->element[j];
            if ((unsigned)e->element[0]->integer <= slot && slot <= (unsigned)e->element[1]->integer)
                port = (int)e->element[2]->element[1]->integer;
        }
        if (rep) freeReplyObject(rep);
        if (k) redisFree(k);
        if (port < 0) continue;
        for (int m = 0; m < TEST_CLUSTER_NODES; m++)
            if (cl->node[m].port == port) return &cl->node[m];
        return NULL;
    }
    return NULL;
}

/* ---- Restarting a cluster node (hilock-stress) ---------------------------- */

void test_redis_kill(test_redis *r) {
    if (r == NULL) return;
    if (r->pid > 0) reap(r->pid);
    r->pid = 0;
}

int test_cluster_node_restart(test_cluster *cl, int i) {
    test_redis *r = &cl->node[i];
    const char *argv[MAX_EXTRA_ARGS];
    char bus[16];
    if (r->pid > 0 || r->dir[0] == '\0') return -1;
    int n = cluster_node_args(cl, r->port, bus, argv);
    r->pid = spawn(r, argv, n);
    if (r->pid < 0) { r->pid = 0; return -1; }
    long long deadline = test_now_ms() + START_WAIT_MS;
    int st = 0;
    while ((st = probe(r)) == 0 && test_now_ms() < deadline) sleep_ms(10);
    if (st == 1) return 0;
    fprintf(stderr, "harness: cluster node on port %d did not come back\n", r->port);
    dump_file(r->dir, "redis.log");
    test_redis_kill(r);
    return -1;
}

const char *test_build_path(const char *env, const char *rel, char *out, size_t n) {
    const char *given = env ? getenv(env) : NULL;
    char self[4096];
    if (given != NULL && *given) {
        snprintf(out, n, "%s", given);
        return out;
    }
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) return NULL;
    self[len] = '\0';
    char *slash = strrchr(self, '/');
    if (slash != NULL) *slash = '\0';
    snprintf(out, n, "%s/%s", self, rel);
    return out;
}

const char *test_src_path(const char *rel, char *out, size_t n) {
    char top[4096], *slash;
    ssize_t len = readlink("/proc/self/exe", top, sizeof(top) - 1);
    if (len <= 0) return NULL;
    top[len] = '\0';
    while ((slash = strrchr(top, '/')) != NULL && slash != top) {
        *slash = '\0';
        int w = snprintf(out, n, "%s/%s", top, rel);
        if (w > 0 && (size_t)w < n && access(out, F_OK) == 0) return out;
    }
    return NULL;
}

char *test_slurp_all(const char *path) {
    FILE *f = fopen(path, "r");
    size_t n = 0, cap = 65536, got;
    char *buf = f != NULL ? malloc(cap) : NULL;
    if (buf == NULL) {
        if (f != NULL) fclose(f);
        return NULL;
    }
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 4096) {
            char *more = realloc(buf, cap * 2);
            if (more == NULL) { free(buf); fclose(f); return NULL; }
            buf = more;
            cap *= 2;
        }
    }
    fclose(f);
    buf[n] = '\0';
    return buf;
}
