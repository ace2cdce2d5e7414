/* Tests of the `hilock` command-line program. Each test runs the built binary
 * (BUILD/hilock, or $HILOCK_CLI) as a child process against a real
 * redis-server started by the harness, and checks what a script would see:
 * exit statuses, the environment COMMAND gets, and the keys left in Redis. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "hilock/hilock.h"
#include "support/harness.h"

#define MAX_KIDS 16

static test_redis srv;
static int srv_started;
static test_redis replica;          /* a second server, for the tests that need one */
static int replica_started;
static char cli[PATH_MAX];          /* the binary under test */
static char dir[64];                /* this test's scratch dir */
static pid_t kids[MAX_KIDS];        /* children still to reap */
static int own_group;               /* cli_start*: the CLI leads a process group */

/* ---- Helpers ------------------------------------------------------------ */


/* A path in the scratch dir. A ring of buffers, so a few can be alive. */
static const char *tmp(const char *file) {
    static char ring[16][PATH_MAX];
    static int next;
    char *p = ring[next++ % 16];
    snprintf(p, PATH_MAX, "%s/%s", dir, file);
    return p;
}

/* The lock key of NAME under the default prefix (names here need no escaping). */
static const char *key(const char *name) {
    static char ring[4][256];
    static int next;
    char *p = ring[next++ % 4];
    snprintf(p, 256, "hilock:{%s}", name);
    return p;
}

static int file_exists(const char *path) {
    return access(path, F_OK) == 0;
}


#define WAIT_UNTIL(cond, ms) do {                                   \
        long long until_ = test_now_ms() + (ms);                    \
        while (!(cond) && test_now_ms() < until_) test_msleep(5);        \
    } while (0)

/* A string reply ("" for nil or an error) from one command. */
static char *redis_str(char *out, size_t n, const char *fmt, ...) {
    redisContext *rc = test_redis_connect(&srv);
    redisReply *r = NULL;
    va_list ap;

    out[0] = '\0';
    if (rc == NULL) return out;
    va_start(ap, fmt);
    r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    if (r != NULL && r->type == REDIS_REPLY_STRING) snprintf(out, n, "%s", r->str);
    if (r != NULL) freeReplyObject(r);
    redisFree(rc);
    return out;
}

/* Whether a command that answers with a status (SET, CONFIG SET) said OK. */
static int redis_ok(const char *fmt, ...) {
    redisContext *rc = test_redis_connect(&srv);
    redisReply *r;
    va_list ap;
    int ok;

    if (rc == NULL) return 0;
    va_start(ap, fmt);
    r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    ok = r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (r != NULL) freeReplyObject(r);
    redisFree(rc);
    return ok;
}

/* Subscribers of NAME's release channel: a waiting hilock holds one. */
static long long numsub(const char *name) {
    redisContext *rc = test_redis_connect(&srv);
    redisReply *r;
    long long n = -1;
    char ch[256];

    if (rc == NULL) return -1;
    snprintf(ch, sizeof(ch), "hilock:{%s}:ch", name);
    r = redisCommand(rc, "PUBSUB NUMSUB %s", ch);
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        n = r->element[1]->integer;
    if (r != NULL) freeReplyObject(r);
    redisFree(rc);
    return n;
}

/* Hold NAME as someone else would: the lock with a foreign token. */
static void hold_key(const char *prefix, const char *name, int ttl_ms) {
    char k[256];
    snprintf(k, sizeof(k), "%s{%s}", prefix, name);
    cr_assert_eq(test_redis_int(&srv, "SET %s someone-else PX %d", k, ttl_ms), -1); /* +OK */
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", k), 1);
}

static void remember(pid_t pid) {
    int i;
    for (i = 0; i < MAX_KIDS; i++)
        if (kids[i] == 0) { kids[i] = pid; return; }
    cr_assert_fail("too many children");
}

/* Start the CLI with args (NULL-terminated, no argv[0]). Its stdout goes
 * to the scratch file `out`, its stderr to `err` (NULL: to `out` as well);
 * `env` ("K=V") may be NULL. The signals in `ignored` (may be NULL) start
 * out ignored, as nohup(1) or a shell's `&` leave them; the others start
 * with their default action. */
static pid_t cli_start_io(const sigset_t *ignored, const char *out, const char *err,
                          const char *env, const char *const *args) {
    char *argv[40];
    int n = 0, i;
    pid_t pid;

    argv[n++] = cli;
    while (*args != NULL && n < 39) argv[n++] = (char *)*args++;
    argv[n] = NULL;
    pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE };
        sigset_t none;
        int fd;
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        /* As a shell starts a job: a group whose parent shares its setsid() group of groups
         * but not in the group, so that its stop signals are not dropped. */
        if (own_group) setpgid(0, 0);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (i = 0; i < 5; i++)
            signal(sigs[i], ignored != NULL && sigismember(ignored, sigs[i]) ? SIG_IGN : SIG_DFL);
        fd = open(tmp(out), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); close(fd); }
        fd = err != NULL ? open(tmp(err), O_WRONLY | O_CREAT | O_TRUNC, 0600) : -1;
        if (fd >= 0) { dup2(fd, 2); close(fd); }
        /* The defaults of whoever runs the tests must not change what a
         * test asks for. */
        unsetenv("HILOCK_URL");
        unsetenv("HILOCK_STARVE");
        if (env != NULL) putenv((char *)env);
        execv(cli, argv);
        _exit(126);
    }
    remember(pid);
    return pid;
}

static pid_t cli_start_ignoring(const sigset_t *ignored, const char *out, const char *env,
                                const char *const *args) {
    return cli_start_io(ignored, out, NULL, env, args);
}

static pid_t cli_start(const char *out, const char *env, const char *const *args) {
    return cli_start_ignoring(NULL, out, env, args);
}

/* A set of the signals given (0-terminated). */
static sigset_t *sigs_of(sigset_t *set, ...) {
    va_list ap;
    int sig;

    sigemptyset(set);
    va_start(ap, set);
    while ((sig = va_arg(ap, int)) != 0) sigaddset(set, sig);
    va_end(ap);
    return set;
}

/* A signal mask field ("SigIgn", "SigCgt") of a /proc/PID/status text. */
#define SIGBIT(sig) (1ULL << ((sig) - 1))
static unsigned long long sig_field(const char *status, const char *field) {
    const char *p = strstr(status, field);
    return p != NULL ? strtoull(p + strlen(field) + 1, NULL, 16) : 0; /* after the ':' */
}

/* Whether process pid ignores sig, and whether it catches it. */
static void dispositions(pid_t pid, int sig, int *ignored, int *caught) {
    char path[64], status[4096];

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    test_slurp(path, status, sizeof(status));
    *ignored = (sig_field(status, "SigIgn") & SIGBIT(sig)) != 0;
    *caught = (sig_field(status, "SigCgt") & SIGBIT(sig)) != 0;
}

/* Wait up to ms for the child: its exit status (128+N for signal N), or -1
 * if it is still running. */
static int cli_wait(pid_t pid, int ms) {
    long long until = test_now_ms() + ms;
    int st, i;

    for (;;) {
        pid_t got = waitpid(pid, &st, WNOHANG);
        if (got == pid) break;
        if (got < 0 || test_now_ms() >= until) return -1;
        test_msleep(2);
    }
    for (i = 0; i < MAX_KIDS; i++)
        if (kids[i] == pid) kids[i] = 0;
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

static int cli_run_env(const char *env, const char *const *args) {
    return cli_wait(cli_start("out", env, args), 20000);
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })
/* Run the CLI to its end and return its exit status. */
#define RUN(...) cli_run_env(NULL, ARGS(__VA_ARGS__))

/* The fence that a command of the form FENCE_TO(file) wrote. */
#define FENCE_TO(file) "sh", "-c", "echo \"$HILOCK_FENCE\" > \"$0\"", tmp(file)
static long long fence_in(const char *file) {
    char buf[64];
    test_slurp(tmp(file), buf, sizeof(buf));
    return buf[0] ? atoll(buf) : -1;
}

/* A COMMAND that creates `ready`, then waits (10 s at most) for `go` to
 * appear, so that a test decides when it ends. */
#define UNTIL_GO(ready, go) "sh", "-c", \
    ": > \"$0\"; i=0; while [ ! -e \"$1\" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done", \
    tmp(ready), tmp(go)

/* A listener on a free loopback port; *port gets its number. */
static int listen_any(int *port) {
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    cr_assert_geq(fd, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(fd, 16), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* Run a program other than the CLI (argv[0] looked up in PATH), stdout
 * and stderr to the scratch file `out`: its exit status, 127 if it could
 * not be run. */
static int run_prog(char *const *argv, const char *out) {
    pid_t pid = fork();
    int fd;

    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        fd = open(tmp(out), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); close(fd); }
        execvp(argv[0], argv);
        _exit(127);
    }
    remember(pid);
    return cli_wait(pid, 60000);
}

/* A file of the source tree (rel to its top), or NULL: test_src_path in a
 * few buffers alive at once, as with tmp(). */
static const char *src_path(const char *rel) {
    static char ring[4][PATH_MAX];
    static int next;
    return test_src_path(rel, ring[next++ % 4], PATH_MAX);
}

/* ---- Fixture ------------------------------------------------------------- */

static void setup(void) {
    cr_assert_not_null(test_build_path("HILOCK_CLI", "hilock", cli, sizeof(cli)));
    cr_assert_eq(access(cli, X_OK), 0, "no CLI binary at %s (set HILOCK_CLI)", cli);
    snprintf(dir, sizeof(dir), "/tmp/hilock-cli-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(test_redis_start(&srv, 0, NULL), 0, "cannot start redis-server");
    srv_started = 1;
}

static void teardown(void) {
    DIR *d;
    struct dirent *e;
    int i;

    for (i = 0; i < MAX_KIDS; i++) {
        if (kids[i] == 0) continue;
        kill(kids[i], SIGKILL);
        waitpid(kids[i], NULL, 0);
        kids[i] = 0;
    }
    /* Grandchildren (background sleeps) left their pids in *.pid files. */
    d = opendir(dir);
    while (d != NULL && (e = readdir(d)) != NULL) {
        char buf[32];
        if (e->d_name[0] == '.') continue;
        if (strstr(e->d_name, ".pid") != NULL && atoi(test_slurp(tmp(e->d_name), buf, sizeof(buf))) > 0)
            kill(atoi(buf), SIGKILL);
        unlink(tmp(e->d_name));
    }
    if (d != NULL) closedir(d);
    rmdir(dir);
    if (srv_started) test_redis_stop(&srv);
    if (replica_started) test_redis_stop(&replica);
}

TestSuite(cli, .init = setup, .fini = teardown);

/* ---- Running COMMAND -------------------------------------------------- */

Test(cli, exit_status_passes_through, .timeout = 30) {
    cr_assert_eq(RUN("-u", srv.url, "st", "--", "sh", "-c", "exit 7"), 7);
    cr_assert_eq(RUN("-u", srv.url, "st", "--", "true"), 0);
    cr_assert_eq(RUN("-u", srv.url, "st", "--", "sh", "-c", "kill -KILL $$"), 128 + SIGKILL);
    cr_assert_eq(RUN("-u", srv.url, "st", "--", "/nonexistent/command"), 127);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("st")), 0, "the lock was left behind");
}

Test(cli, env_has_name_and_increasing_fence, .timeout = 30) {
    const char *cmd = "echo \"$HILOCK_NAME $HILOCK_FENCE\" >> \"$0\"";
    char buf[256], out[1024], want[64], name[64];
    long long fence, last = 0;
    FILE *f;
    int i, lines = 0;

    for (i = 0; i < 3; i++) {
        cr_assert_eq(RUN("-u", srv.url, "-v", "envlock", "--", "sh", "-c", cmd, tmp("env")), 0);
        cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("envlock")), 0, "key left after run %d", i);
    }
    f = fopen(tmp("env"), "r");
    cr_assert_not_null(f, "COMMAND did not run");
    while (fgets(buf, sizeof(buf), f) != NULL) {
        cr_assert_eq(sscanf(buf, "%63s %lld", name, &fence), 2, "bad line: %s", buf);
        cr_assert_str_eq(name, "envlock");
        cr_assert_gt(fence, last, "fence %lld after %lld", fence, last);
        last = fence;
        lines++;
    }
    fclose(f);
    cr_assert_eq(lines, 3);
    /* -v reports the acquisition with its fence, and the release. */
    test_slurp(tmp("out"), out, sizeof(out));
    snprintf(want, sizeof(want), "acquired envlock with fence %lld", last);
    cr_assert(strstr(out, want) != NULL, "-v output lacks '%s': %s", want, out);
    cr_assert(strstr(out, "released envlock") != NULL, "-v output: %s", out);
}

Test(cli, url_from_environment, .timeout = 30) {
    char env[128];
    snprintf(env, sizeof(env), "HILOCK_URL=%s", srv.url);
    cr_assert_eq(cli_run_env(env, ARGS("envurl", "--", FENCE_TO("f"))), 0);
    cr_assert_geq(fence_in("f"), 1);
}

Test(cli, prefix_names_the_keys, .timeout = 30) {
    hold_key("other:", "pfx", 10000);
    cr_assert_eq(RUN("-u", srv.url, "-p", "other:", "-w", "0", "pfx", "--", "true"), 75);
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "pfx", "--", "true"), 0);
}

Test(cli, lease_is_renewed_while_command_runs, .timeout = 30) {
    /* COMMAND outlives the 600 ms lease twice over: only the watchdog's
     * renewals keep the lock, and a lost lock would exit 74. */
    pid_t pid = cli_start("out", NULL, ARGS("-u", srv.url, "-l", "600", "renew", "--", "sleep", "1.5"));
    long long pttl;

    WAIT_UNTIL(test_redis_int(&srv, "EXISTS %s", key("renew")) == 1, 5000);
    pttl = test_redis_int(&srv, "PTTL %s", key("renew"));
    cr_assert(pttl > 0 && pttl <= 600, "PTTL %lld", pttl);
    cr_assert_eq(cli_wait(pid, 10000), 0);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("renew")), 0);
}

/* ---- Contention --------------------------------------------------------- */

Test(cli, try_once_on_a_held_lock_is_busy, .timeout = 30) {
    pid_t holder;

    /* Held through the key itself... */
    hold_key("hilock:", "busy", 10000);
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "busy", "--", "touch", tmp("ran")), 75);
    cr_assert(!file_exists(tmp("ran")), "COMMAND ran without the lock");
    {
        char tok[64];
        cr_assert_str_eq(redis_str(tok, sizeof(tok), "GET %s", key("busy")), "someone-else w"); /* marked by the try */
    }

    /* ...and by another hilock, which gets SIGTERM forwarded to its sleep. */
    holder = cli_start("holder", NULL, ARGS("-u", srv.url, "busy2", "--", "sleep", "10"));
    WAIT_UNTIL(test_redis_int(&srv, "EXISTS %s", key("busy2")) == 1, 5000);
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "busy2", "--", "touch", tmp("ran")), 75);
    cr_assert(!file_exists(tmp("ran")));
    kill(holder, SIGTERM);
    cr_assert_eq(cli_wait(holder, 5000), 128 + SIGTERM);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("busy2")), 0);
}

Test(cli, wait_times_out, .timeout = 30) {
    long long t0, took;

    hold_key("hilock:", "tmo", 10000);
    t0 = test_now_ms();
    cr_assert_eq(RUN("-u", srv.url, "-w", "300", "tmo", "--", "touch", tmp("ran")), 75);
    took = test_now_ms() - t0;
    cr_assert(took >= 280 && took < 2000, "gave up after %lld ms, want ~300", took);
    cr_assert(!file_exists(tmp("ran")));
}

/* -E CODE replaces 75, so that a COMMAND that exits 75 itself is told apart. */
Test(cli, busy_status_is_set_by_E, .timeout = 30) {
    hold_key("hilock:", "eb", 10000);
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "-E", "99", "eb", "--", "touch", tmp("ran")), 99);
    cr_assert_eq(RUN("-u", srv.url, "-w", "200", "-E", "99", "eb", "--", "touch", tmp("ran")), 99);
    cr_assert(!file_exists(tmp("ran")), "COMMAND ran without the lock");
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "eb", "--", "touch", tmp("ran")), 75, "the default");
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "-E", "99", "free", "--", "sh", "-c", "exit 75"), 75,
                 "COMMAND's own 75");
}

/* -v says "waiting" while the lock is held elsewhere, then how it ended,
 * in order. */
Test(cli, verbose_reports_waiting_then_acquired, .timeout = 30) {
    char out[4096], acquired[128];
    const char *conn, *waiting, *acq, *rel;
    pid_t pid;

    hold_key("hilock:", "vw", 20000);
    pid = cli_start("out", NULL, ARGS("-u", srv.url, "-v", "vw", "--", FENCE_TO("f")));
    WAIT_UNTIL(numsub("vw") == 1, 5000);
    cr_assert_eq(numsub("vw"), 1, "the waiter never subscribed");
    test_slurp(tmp("out"), out, sizeof(out));
    cr_assert_not_null(strstr(out, "hilock: waiting for vw\n"), "no waiting line: %s", out);
    cr_assert_null(strstr(out, "acquired"), "acquired a held lock: %s", out);

    /* Released: the rest of the story follows the waiting line. */
    cr_assert_eq(test_redis_int(&srv, "DEL %s", key("vw")), 1);
    cr_assert_eq(test_redis_int(&srv, "PUBLISH hilock:{vw}:ch r"), 1);
    cr_assert_eq(cli_wait(pid, 5000), 0);
    test_slurp(tmp("out"), out, sizeof(out));
    snprintf(acquired, sizeof(acquired), "hilock: acquired vw with fence %lld\n", fence_in("f"));
    conn = strstr(out, "hilock: connecting to ");
    waiting = strstr(out, "hilock: waiting for vw\n");
    acq = strstr(out, acquired);
    rel = strstr(out, "hilock: released vw\n");
    cr_assert(conn && waiting && acq && rel && conn < waiting && waiting < acq && acq < rel,
              "want connecting, waiting, '%s', released, in order: %s", acquired, out);

    /* Trying once, or with a limit, says so. */
    cr_assert_eq(RUN("-u", srv.url, "-v", "-w", "0", "vw", "--", "true"), 0);
    cr_assert_not_null(strstr(test_slurp(tmp("out"), out, sizeof(out)), "hilock: trying vw once\n"), "%s", out);
    cr_assert_eq(RUN("-u", srv.url, "-v", "-w", "500", "vw", "--", "true"), 0);
    cr_assert_not_null(strstr(test_slurp(tmp("out"), out, sizeof(out)), "hilock: waiting for vw, up to 500 ms\n"),
                       "%s", out);
}

Test(cli, waiter_gets_the_lock_when_it_is_released, .timeout = 30) {
    long long t0, took;
    pid_t holder;

    holder = cli_start("holder", NULL, ARGS("-u", srv.url, "wq", "--", "sh", "-c",
                                            "echo \"$HILOCK_FENCE\" > \"$0\"; sleep 1", tmp("h")));
    WAIT_UNTIL(file_exists(tmp("h")), 5000);
    cr_assert(file_exists(tmp("h")), "the holder did not start");
    t0 = test_now_ms();
    cr_assert_eq(RUN("-u", srv.url, "wq", "--", FENCE_TO("w")), 0);
    took = test_now_ms() - t0;
    /* Not before the holder's second is up; and woken by the release, not
     * by the expiry of the 30 s lease. */
    cr_assert(took >= 300 && took < 5000, "waited %lld ms", took);
    cr_assert_eq(cli_wait(holder, 5000), 0);
    cr_assert_gt(fence_in("w"), fence_in("h"));
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("wq")), 0);
}

/* -n N: at most N COMMANDs at once; the others wait for a permit, and a
 * different N is refused (78) while permits are held. */
Test(cli, semaphore_runs_at_most_n_commands, .timeout = 30) {
    static const char *const ready[3] = { "r0", "r1", "r2" }, *const logs[3] = { "l0", "l1", "l2" };
    pid_t pid[3];
    int i, running = 0;

    for (i = 0; i < 3; i++)
        pid[i] = cli_start(logs[i], NULL, ARGS("-u", srv.url, "-n", "2", "sem", "--", UNTIL_GO(ready[i], "go")));
    WAIT_UNTIL(file_exists(tmp(ready[0])) + file_exists(tmp(ready[1])) + file_exists(tmp(ready[2])) >= 2, 5000);
    test_msleep(300);
    for (i = 0; i < 3; i++) running += file_exists(tmp(ready[i]));
    cr_assert_eq(running, 2, "%d COMMANDs run with 2 permits", running);
    cr_assert_eq(test_redis_int(&srv, "ZCARD hilock:{sem}:sem"), 2);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("sem")), 0, "-n took the lock NAME");

    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "-n", "2", "sem", "--", "touch", tmp("ran")), 75);
    cr_assert_eq(RUN("-u", srv.url, "-n", "3", "sem", "--", "touch", tmp("ran")), 78);
    cr_assert(!file_exists(tmp("ran")), "COMMAND ran without a permit");
    {
        char out[1024];
        test_slurp(tmp("out"), out, sizeof(out));
        cr_assert_not_null(strstr(out, "permits"), "no word of the count: %s", out);
    }
    /* The lock NAME is another thing: free. */
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "sem", "--", "true"), 0);

    cr_assert_eq(open(tmp("go"), O_WRONLY | O_CREAT, 0600) >= 0, 1);
    for (i = 0; i < 3; i++) cr_assert_eq(cli_wait(pid[i], 10000), 0, "COMMAND %d", i);
    for (i = 0; i < 3; i++) cr_assert(file_exists(tmp(ready[i])), "COMMAND %d never ran", i);
    cr_assert_eq(test_redis_int(&srv, "EXISTS hilock:{sem}:sem"), 0, "permits left behind");
    /* Drained: another N is fine now. */
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "-n", "5", "sem", "--", "true"), 0);
}

/* ---- Losing the lock ---------------------------------------------------- */

Test(cli, lost_lock_terms_command_and_exits_74, .timeout = 30) {
    const char *script = "trap 'echo term > \"$1\"; exit 1' TERM; "
                         "sleep 10 & echo $! > \"$2\"; : > \"$3\"; wait";
    char buf[64];
    long long t0, took;
    pid_t pid;

    pid = cli_start("out", NULL, ARGS("-u", srv.url, "-l", "600", "lost", "--", "sh", "-c", script,
                                      "sh", tmp("sig"), tmp("sleep.pid"), tmp("ready")));
    WAIT_UNTIL(file_exists(tmp("ready")), 5000);
    cr_assert(file_exists(tmp("ready")), "COMMAND did not start");
    cr_assert_eq(test_redis_int(&srv, "DEL %s", key("lost")), 1);
    t0 = test_now_ms();
    cr_assert_eq(cli_wait(pid, 10000), 74);
    took = test_now_ms() - t0;
    /* The next renewal (every lease/3) finds the key gone. */
    cr_assert_lt(took, 600 + 1000, "noticed after %lld ms", took);
    cr_assert_str_eq(test_slurp(tmp("sig"), buf, sizeof(buf)), "term\n", "COMMAND got no SIGTERM");
}

/* The state letter of process pid (R, S, T, Z...) from /proc, 0 if there
 * is no such process; its process group in *pgrp (may be NULL). */
static char proc_state(pid_t pid, pid_t *pgrp) {
    char path[64], stat[1024];
    const char *p;
    int pg = 0;
    char state = 0;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    test_slurp(path, stat, sizeof(stat));
    /* "pid (comm) state ppid pgrp ...": comm may hold spaces, not the last ')'. */
    p = strrchr(stat, ')');
    if (p == NULL || sscanf(p + 1, " %c %*d %d", &state, &pg) != 2) return 0;
    if (pgrp != NULL) *pgrp = pg;
    return state;
}

/* Whether pid is a process that can still run (not gone, not a zombie). */
static int proc_alive(pid_t pid) {
    char st = proc_state(pid, NULL);
    return st != 0 && st != 'Z' && st != 'X';
}

/* The pid a COMMAND wrote into the scratch file `file`, or -1. */
static pid_t pid_in(const char *file) {
    char buf[64];
    test_slurp(tmp(file), buf, sizeof(buf));
    return buf[0] ? (pid_t)atoi(buf) : -1;
}

static long long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

/* `sh -c "writer | cat"`: SIGTERM to the shell alone ends the shell, and
 * its pipeline, in the same process group, writes on. After a loss the
 * whole group ends before hilock exits 74: no process of it is left and
 * the file the writer appends timestamps to stops growing. */
Test(cli, lost_lock_ends_the_whole_process_group, .timeout = 30) {
    static const char writer[] =
        "echo $$ > \"$2\"\n"
        "i=0; while [ $i -lt 1000 ]; do date +%s%N >> \"$1\"; sleep 0.02; i=$((i+1)); done\n";
    const char *script = "echo $$ > \"$4\"; "
                         "sh \"$0\" \"$1\" \"$2\" | sh -c 'echo $$ > \"$0\"; exec cat >/dev/null' \"$3\"";
    pid_t pid, sh, wr, ct, pg = 0;
    long long t0, took, size;
    FILE *f = fopen(tmp("writer.sh"), "w");

    cr_assert_not_null(f);
    fputs(writer, f);
    fclose(f);
    pid = cli_start("out", NULL, ARGS("-u", srv.url, "-l", "600", "grp", "--", "sh", "-c", script,
                                      tmp("writer.sh"), tmp("stamps"), tmp("writer.pid"),
                                      tmp("cat.pid"), tmp("sh.pid")));
    WAIT_UNTIL(file_size(tmp("stamps")) > 0 && pid_in("cat.pid") > 0 && pid_in("sh.pid") > 0, 5000);
    sh = pid_in("sh.pid");
    wr = pid_in("writer.pid");
    ct = pid_in("cat.pid");
    cr_assert(sh > 0 && wr > 0 && ct > 0 && file_size(tmp("stamps")) > 0, "COMMAND did not start");
    /* COMMAND leads a process group of its own, its pipeline in it. */
    cr_assert_neq(proc_state(wr, &pg), 0);
    cr_expect_eq(pg, sh, "the writer's group is %d, COMMAND is %d", (int)pg, (int)sh);

    cr_assert_eq(test_redis_int(&srv, "DEL %s", key("grp")), 1);
    t0 = test_now_ms();
    cr_assert_eq(cli_wait(pid, 10000), 74);
    took = test_now_ms() - t0;
    cr_assert_lt(took, 600 + 1000, "exited %lld ms after the loss", took);
    /* Nothing of COMMAND's group is left, not even a zombie. */
    cr_assert(!proc_alive(wr), "the writer (%d) outlived hilock", (int)wr);
    cr_assert(!proc_alive(ct), "cat (%d) outlived hilock", (int)ct);
    cr_assert(kill(-sh, 0) != 0 && errno == ESRCH, "COMMAND's group %d is still there", (int)sh);
    size = file_size(tmp("stamps"));
    test_msleep(300);
    cr_assert_eq(file_size(tmp("stamps")), size, "the file still grows after hilock exited");
}

/* A COMMAND that ignores SIGTERM, and the background process it started
 * (which ignores it too), get SIGKILL --kill-after MS later, and hilock
 * exits 74 only once they are gone; --kill-after 0 sends SIGKILL at once. */
Test(cli, lost_lock_kills_what_ignores_sigterm, .timeout = 30) {
    /* Loops bounded (20 s), as nothing ends them if the test dies. */
    const char *script = "trap '' TERM; echo $$ > \"$0\"; sleep 20 & echo $! > \"$1\"; : > \"$2\"; "
                         "i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done";
    const char *trapping = "trap 'echo term > \"$2\"; exit 1' TERM; echo $$ > \"$0\"; : > \"$1\"; "
                           "i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done";
    char err[2048];
    long long t0, took;
    pid_t pid, sh, bg;

    pid = cli_start_io(NULL, "out", "err", NULL,
                       ARGS("-u", srv.url, "-l", "600", "--kill-after", "1500", "ign", "--", "sh", "-c",
                            script, tmp("sh.pid"), tmp("sleep.pid"), tmp("ready")));
    WAIT_UNTIL(file_exists(tmp("ready")), 5000);
    cr_assert(file_exists(tmp("ready")), "COMMAND did not start");
    sh = pid_in("sh.pid");
    bg = pid_in("sleep.pid");
    cr_assert_eq(test_redis_int(&srv, "DEL %s", key("ign")), 1);
    t0 = test_now_ms();
    /* SIGTERM at the loss (within a third of the lease) does nothing... */
    test_msleep(600 / 3 + 1000);
    cr_assert_eq(cli_wait(pid, 0), -1, "hilock exited while COMMAND ran on");
    cr_assert(proc_alive(sh) && proc_alive(bg), "SIGTERM ended what ignores it");
    /* ...SIGKILL, 1500 ms later, does. */
    cr_assert_eq(cli_wait(pid, 10000), 74);
    took = test_now_ms() - t0;
    cr_assert_geq(took, 1500, "exited %lld ms after the loss, before --kill-after", took);
    cr_assert_lt(took, 1500 + 600 + 1000, "exited %lld ms after the loss", took);
    cr_assert(!proc_alive(sh), "COMMAND (%d) outlived hilock", (int)sh);
    cr_assert(!proc_alive(bg), "COMMAND's background sleep (%d) outlived hilock", (int)bg);
    test_slurp(tmp("err"), err, sizeof(err));
    cr_assert_not_null(strstr(err, "hilock: COMMAND's process group still runs 1500 ms after SIGTERM: "
                                   "sending SIGKILL\n"), "%s", err);

    /* 0: no SIGTERM for a handler to see, SIGKILL at once. */
    unlink(tmp("ready"));
    pid = cli_start_io(NULL, "out", "err", NULL,
                       ARGS("-u", srv.url, "-l", "600", "--kill-after", "0", "ign", "--", "sh", "-c",
                            trapping, tmp("sh.pid"), tmp("ready"), tmp("sig")));
    WAIT_UNTIL(file_exists(tmp("ready")), 5000);
    cr_assert(file_exists(tmp("ready")), "COMMAND did not start");
    sh = pid_in("sh.pid");
    cr_assert_eq(test_redis_int(&srv, "DEL %s", key("ign")), 1);
    t0 = test_now_ms();
    cr_assert_eq(cli_wait(pid, 10000), 74);
    took = test_now_ms() - t0;
    cr_assert_lt(took, 600 + 1000, "exited %lld ms after the loss", took);
    cr_assert(!proc_alive(sh), "COMMAND (%d) outlived hilock", (int)sh);
    cr_assert(!file_exists(tmp("sig")), "COMMAND got SIGTERM with --kill-after 0");
}

/* Each of bad[] (n strings: pairs of a value and why it is refused) as the
 * value of option `opt` is refused with the usage status and `want` (a
 * format for the value and the why), and COMMAND does not run; so is `opt`
 * without a value, and `opt` with unlock, which it does not apply to (the
 * lock `name` stays). */
static void bad_values_refused(const char *opt, const char *const *bad, size_t n, const char *want,
                               const char *name) {
    static const char hint[] = "Try 'hilock --help' for more information.\n";
    char out[2048], line[256], full[400];
    for (size_t i = 0; i + 1 < n; i += 2) {
        cr_assert_eq(RUN("-u", srv.url, opt, bad[i], name, "--", "touch", tmp("ran")), 64, "%s '%s'", opt,
                     bad[i]);
        snprintf(line, sizeof(line), want, bad[i], bad[i + 1]);
        snprintf(full, sizeof(full), "%s\n%s", line, hint);
        cr_assert_str_eq(test_slurp(tmp("out"), out, sizeof(out)), full);
        cr_assert(!file_exists(tmp("ran")), "%s '%s' ran COMMAND", opt, bad[i]);
    }
    cr_assert_eq(RUN("-u", srv.url, opt), 64);
    snprintf(full, sizeof(full), "hilock: option %s needs a value\n%s", opt, hint);
    cr_assert_str_eq(test_slurp(tmp("out"), out, sizeof(out)), full);
    hold_key("hilock:", name, 10000);
    cr_assert_eq(RUN("-u", srv.url, opt, "100", "unlock", name), 64);
    snprintf(full, sizeof(full), "hilock: %s does not apply to unlock\n%s", opt, hint);
    cr_assert_str_eq(test_slurp(tmp("out"), out, sizeof(out)), full);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key(name)), 1, "unlock ran anyway");
    cr_assert_eq(test_redis_int(&srv, "DEL %s", key(name)), 1);
}

/* A bad MS is refused with the usage status, by a message that names
 * --kill-after and what it wants, and COMMAND does not run; 0 and the
 * largest are good; unlock has no COMMAND to kill. */
Test(cli, kill_after_bad_values_are_refused, .timeout = 30) {
    static const char *const bad[] = { "x", "not a decimal number", "-1", "negative", "", "empty",
                                       "5s", "not a decimal number", " 5", "not a decimal number",
                                       "+5", "not a decimal number", "2147483648", "too large",
                                       "1e3", "not a decimal number", "0x10", "not a decimal number" };
    bad_values_refused("--kill-after", bad, sizeof(bad) / sizeof(bad[0]),
                       "hilock: bad --kill-after MS '%s': %s; want milliseconds, 0 to 2147483647 "
                       "(0: SIGKILL at once)", "ka");
    cr_assert_eq(RUN("-u", srv.url, "--kill-after", "0", "ka", "--", "true"), 0);
    cr_assert_eq(RUN("-u", srv.url, "--kill-after", "2147483647", "ka", "--", "true"), 0);
}

/* SIGTSTP sent to hilock stops COMMAND's group, and then hilock; SIGCONT
 * continues both. Stopped alone, hilock would leave COMMAND running while
 * it renews nothing. */
Test(cli, sigtstp_stops_command_then_hilock, .timeout = 30) {
    /* One process that never forks: see terminal_keys_reach_command. */
    const char *script = "echo $$ > \"$0\"; : > \"$1\"; exec sleep 30";
    pid_t pid, sh;
    int st = 0;
    long long until;

    own_group = 1;
    pid = cli_start("out", NULL, ARGS("-u", srv.url, "tstp", "--", "sh", "-c", script,
                                      tmp("sh.pid"), tmp("ready")));
    own_group = 0;
    WAIT_UNTIL(file_exists(tmp("ready")), 5000);
    cr_assert(file_exists(tmp("ready")), "COMMAND did not start");
    sh = pid_in("sh.pid");
    kill(pid, SIGTSTP);
    until = test_now_ms() + 5000;
    while (waitpid(pid, &st, WNOHANG | WUNTRACED) == 0 && test_now_ms() < until) test_msleep(5);
    cr_assert(WIFSTOPPED(st), "hilock did not stop (status %#x)", st);
    cr_assert_eq(proc_state(sh, NULL), 'T', "COMMAND was not stopped first");
    kill(pid, SIGCONT);
    WAIT_UNTIL(proc_state(sh, NULL) != 'T', 5000);
    cr_assert_neq(proc_state(sh, NULL), 'T', "COMMAND was not continued");
    cr_assert_neq(proc_state(pid, NULL), 'T', "hilock was not continued");
    kill(pid, SIGTERM);
    cr_assert_eq(cli_wait(pid, 5000), 128 + SIGTERM);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("tstp")), 0);
}

/* A signal sent to hilock while COMMAND runs reaches COMMAND's whole
 * group: here the shell and the background sleep it waits for. */
Test(cli, sigterm_is_forwarded_to_the_whole_group, .timeout = 30) {
    const char *script = "sleep 20 & echo $! > \"$0\"; : > \"$1\"; wait";
    pid_t pid, bg;

    pid = cli_start("out", NULL, ARGS("-u", srv.url, "fwg", "--", "sh", "-c", script,
                                      tmp("sleep.pid"), tmp("ready")));
    WAIT_UNTIL(file_exists(tmp("ready")), 5000);
    cr_assert(file_exists(tmp("ready")), "COMMAND did not start");
    bg = pid_in("sleep.pid");
    kill(pid, SIGTERM);
    cr_assert_eq(cli_wait(pid, 5000), 128 + SIGTERM);
    WAIT_UNTIL(!proc_alive(bg), 2000);
    cr_assert(!proc_alive(bg), "the background sleep (%d) did not get SIGTERM", (int)bg);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("fwg")), 0);
}

/* A hilock that is killed leaves no COMMAND running without the lock:
 * COMMAND gets SIGTERM. */
Test(cli, command_gets_sigterm_when_hilock_dies, .timeout = 30) {
    const char *script = "trap 'echo term > \"$1\"; exit 1' TERM; echo $$ > \"$0\"; : > \"$2\"; "
                         "i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done";
    char buf[64];
    pid_t pid, sh;

    pid = cli_start("out", NULL, ARGS("-u", srv.url, "die", "--", "sh", "-c", script,
                                      tmp("sh.pid"), tmp("sig"), tmp("ready")));
    WAIT_UNTIL(file_exists(tmp("ready")), 5000);
    cr_assert(file_exists(tmp("ready")), "COMMAND did not start");
    sh = pid_in("sh.pid");
    kill(pid, SIGKILL);
    cr_assert_eq(cli_wait(pid, 5000), 128 + SIGKILL);
    WAIT_UNTIL(file_exists(tmp("sig")) && !proc_alive(sh), 5000);
    cr_assert_str_eq(test_slurp(tmp("sig"), buf, sizeof(buf)), "term\n", "COMMAND got no SIGTERM");
    cr_assert(!proc_alive(sh), "COMMAND (%d) runs on", (int)sh);
}

/* ---- A terminal --------------------------------------------------------- */

/* A line appended to the scratch file `file` (from a forked child: no
 * stdio buffers shared with the test). */
static void log_line(const char *file, const char *fmt, ...) {
    char line[256];
    va_list ap;
    int fd = open(tmp(file), O_WRONLY | O_CREAT | O_APPEND, 0600);

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (fd >= 0) {
        if (write(fd, line, strlen(line)) < 0) { /* the test sees the line missing */ }
        close(fd);
    }
}

/* In a child of the test: a job-control shell of the least kind on the
 * terminal `slave`. It calls setsid() and takes that terminal as its controlling one, starts the
 * CLI with args as a foreground job (a group of its own that has the
 * terminal), and logs to "jobs": "job PID", then "stopped SIG" whenever the
 * job stops (it then takes the terminal back, waits for the file "fg" and
 * does what `fg` does: the terminal to the job, SIGCONT), and at last
 * "exit STATUS signaled 0|1 fg PGID", PGID being the terminal's foreground
 * group as the job left it. */
static void job_shell(const char *slave, const char *const *args) {
    char *argv[40];
    int n = 0, fd, st, i;
    pid_t job;

    argv[n++] = cli;
    while (*args != NULL && n < 39) argv[n++] = (char *)*args++;
    argv[n] = NULL;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setsid();
    fd = open(slave, O_RDWR);
    if (fd < 0 || ioctl(fd, TIOCSCTTY, 0) != 0) _exit(125);
    dup2(fd, 0);
    dup2(fd, 1);
    close(fd);
    fd = open(tmp("err"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) { dup2(fd, 2); close(fd); }
    signal(SIGTTOU, SIG_IGN); /* as shells: to take the terminal back */
    job = fork();
    if (job == 0) {
        static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU };
        sigset_t none;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        setpgid(0, 0);
        tcsetpgrp(0, getpid());
        for (i = 0; i < 8; i++) signal(sigs[i], SIG_DFL);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        unsetenv("HILOCK_URL");
        unsetenv("HILOCK_STARVE");
        execv(cli, argv);
        _exit(126);
    }
    setpgid(job, job);
    tcsetpgrp(0, job);
    log_line("jobs", "job %d\n", (int)job);
    for (;;) {
        if (waitpid(job, &st, WUNTRACED) != job) _exit(124);
        if (WIFSTOPPED(st)) {
            long long until = test_now_ms() + 10000;
            tcsetpgrp(0, getpgrp());
            log_line("jobs", "stopped %d\n", WSTOPSIG(st));
            while (!file_exists(tmp("fg")) && test_now_ms() < until) test_msleep(5);
            unlink(tmp("fg"));
            tcsetpgrp(0, job);
            killpg(job, SIGCONT);
            continue;
        }
        log_line("jobs", "exit %d signaled %d fg %d\n",
                 WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st), WIFSIGNALED(st) != 0,
                 (int)tcgetpgrp(0));
        _exit(0);
    }
}

/* Typed at the terminal, Ctrl-Z and Ctrl-C reach COMMAND, which hilock
 * made the terminal's foreground: Ctrl-Z stops COMMAND, then hilock, so
 * that the shell sees its job stopped; `fg` gives COMMAND the terminal
 * again; after Ctrl-C the terminal is hilock's group's again, and hilock,
 * once it has released the lock, ends by SIGINT as its job would have. */
Test(cli, terminal_keys_reach_command, .timeout = 30) {
    /* COMMAND ends as one process that never forks: a shell that forks
     * (dash vforks) when Ctrl-Z comes may wait forever for a child stopped
     * before its exec, never stopping itself, as it would in any shell's
     * job. */
    const char *script = "read -r _ _ _ _ pg _ _ tpg _ < /proc/$$/stat; echo \"$$ $pg $tpg\" > \"$0\"; "
                         ": > \"$1\"; exec sleep 30";
    char buf[256];
    const char *at;
    int master, sh = 0, pg = 0, tpg = 0, job = 0, status = -1, signaled = -1, fg = -1;
    pid_t shell;

    master = posix_openpt(O_RDWR | O_NOCTTY);
    cr_assert_geq(master, 0, "posix_openpt: %s", strerror(errno));
    cr_assert(grantpt(master) == 0 && unlockpt(master) == 0 && ptsname(master) != NULL);
    shell = fork();
    cr_assert_geq(shell, 0);
    if (shell == 0)
        job_shell(ptsname(master), ARGS("-u", srv.url, "tty", "--", "sh", "-c", script,
                                        tmp("sh.pid"), tmp("ready")));
    remember(shell);
    WAIT_UNTIL(file_exists(tmp("ready")), 5000);
    cr_assert(file_exists(tmp("ready")), "COMMAND did not start: %s", test_slurp(tmp("err"), buf, sizeof(buf)));
    cr_assert_eq(sscanf(test_slurp(tmp("jobs"), buf, sizeof(buf)), "job %d", &job), 1, "%s", buf);
    cr_assert_eq(sscanf(test_slurp(tmp("sh.pid"), buf, sizeof(buf)), "%d %d %d", &sh, &pg, &tpg), 3);
    cr_assert_eq(pg, sh, "COMMAND's group is %d, not its own (%d); hilock's is %d", pg, sh, job);
    cr_assert_eq(tpg, sh, "the terminal's foreground is %d, not COMMAND's group %d", tpg, sh);

    /* Ctrl-Z */
    cr_assert_eq(write(master, "\032", 1), 1);
    WAIT_UNTIL(strstr(test_slurp(tmp("jobs"), buf, sizeof(buf)), "stopped") != NULL, 5000);
    cr_assert_not_null(strstr(buf, "stopped 20\n"), "the job did not stop: %s (COMMAND %c, hilock %c, "
                       "the terminal's group %d)", buf, proc_state(sh, NULL), proc_state(job, NULL),
                       (int)tcgetpgrp(master));
    cr_assert_eq(proc_state(sh, NULL), 'T', "COMMAND is not stopped");
    cr_assert_eq(proc_state(job, NULL), 'T', "hilock is not stopped");
    /* fg */
    close(open(tmp("fg"), O_WRONLY | O_CREAT, 0600));
    WAIT_UNTIL(proc_state(sh, NULL) != 'T' && tcgetpgrp(master) == sh, 5000);
    cr_assert_neq(proc_state(sh, NULL), 'T', "COMMAND was not continued");
    cr_assert_eq(tcgetpgrp(master), sh, "COMMAND did not get the terminal back");
    /* Ctrl-C */
    cr_assert_eq(write(master, "\003", 1), 1);
    WAIT_UNTIL((at = strstr(test_slurp(tmp("jobs"), buf, sizeof(buf)), "exit ")) != NULL, 5000);
    cr_assert_not_null(at, "hilock did not exit: %s", buf);
    cr_assert_eq(sscanf(at, "exit %d signaled %d fg %d", &status, &signaled, &fg), 3, "%s", buf);
    cr_assert_eq(status, 128 + SIGINT);
    cr_assert_eq(signaled, 1, "hilock exited 130 instead of ending by SIGINT");
    cr_assert_eq(fg, job, "hilock left the terminal to %d, not its own group %d", fg, job);
    cr_assert_eq(cli_wait(shell, 5000), 0);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("tty")), 0);
    close(master);
}

/* ---- unlock NAME ---------------------------------------------------------- */

static const char unlock_warning[] =
    "hilock: warning: forced %s open; its holder, if alive, keeps acting as the owner "
    "until its next renewal fails\n";

/* Run `hilock -u URL unlock NAME`: its status; stdout in "out", stderr in "err". */
static int unlock_run(const char *url, const char *name) {
    return cli_wait(cli_start_io(NULL, "out", "err", NULL, ARGS("-u", url, "unlock", name)), 20000);
}

/* The holder, a live hilock running `sleep 30` under a 30 s lease, is
 * forced open: its waiter gets the lock at once, not when the lease ends. */
Test(cli, unlock_frees_a_held_lock_and_wakes_its_waiter, .timeout = 30) {
    char out[4096], want[256];
    long long fence = -1, t0, took;
    const char *at;
    pid_t holder, waiter;

    holder = cli_start("holder", NULL, ARGS("-u", srv.url, "-v", "brk", "--", "sleep", "30"));
    WAIT_UNTIL(strstr(test_slurp(tmp("holder"), out, sizeof(out)), "acquired brk with fence ") != NULL, 5000);
    at = strstr(out, "acquired brk with fence ");
    cr_assert_not_null(at, "the holder did not get the lock: %s", out);
    fence = atoll(at + strlen("acquired brk with fence "));
    waiter = cli_start("waiter", NULL, ARGS("-u", srv.url, "brk", "--", FENCE_TO("w")));
    WAIT_UNTIL(numsub("brk") == 1, 5000);
    cr_assert_eq(numsub("brk"), 1, "the waiter never subscribed");

    t0 = test_now_ms();
    cr_assert_eq(unlock_run(srv.url, "brk"), 0);
    snprintf(want, sizeof(want), "hilock: removed the lock brk (fence %lld)\n", fence);
    cr_assert_str_eq(test_slurp(tmp("out"), out, sizeof(out)), want);
    snprintf(want, sizeof(want), unlock_warning, "brk");
    cr_assert_str_eq(test_slurp(tmp("err"), out, sizeof(out)), want);
    cr_assert_eq(cli_wait(waiter, 5000), 0, "the waiter did not get the lock promptly");
    took = test_now_ms() - t0;
    cr_assert_lt(took, 5000, "the waiter got it after %lld ms", took);
    cr_assert_gt(fence_in("w"), fence);

    /* As warned, the holder goes on; it learns at the latest when it
     * releases, and says the lock was lost. */
    cr_assert_eq(cli_wait(holder, 0), -1, "the holder stopped");
    kill(holder, SIGTERM);
    cr_assert_eq(cli_wait(holder, 5000), 74);
}

Test(cli, unlock_of_a_free_lock_says_not_held, .timeout = 30) {
    char out[256], want[256];

    cr_assert_eq(unlock_run(srv.url, "free"), 0);
    cr_assert_str_eq(test_slurp(tmp("out"), out, sizeof(out)), "hilock: free was not held\n");
    /* No holder, so nobody to warn about. */
    cr_assert_str_eq(test_slurp(tmp("err"), out, sizeof(out)), "");

    /* A holder that is not a hilock at all, under another prefix. */
    hold_key("other:", "foreign", 20000);
    cr_assert_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL,
                                       ARGS("-u", srv.url, "-p", "other:", "unlock", "foreign")), 20000), 0);
    cr_assert_str_eq(test_slurp(tmp("out"), out, sizeof(out)), "hilock: removed the lock foreign (fence 1)\n");
    snprintf(want, sizeof(want), unlock_warning, "foreign");
    cr_assert_str_eq(test_slurp(tmp("err"), out, sizeof(out)), want);
    cr_assert_eq(test_redis_int(&srv, "EXISTS other:{foreign}"), 0);
}

/* `unlock` followed by -- is a lock name, as it was before the subcommand. */
Test(cli, unlock_then_dashdash_is_a_lock_named_unlock, .timeout = 30) {
    char buf[64];

    cr_assert_eq(RUN("-u", srv.url, "unlock", "--", "true"), 0);
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "unlock", "--", "sh", "-c",
                     "echo \"$HILOCK_NAME\" > \"$0\"", tmp("name")), 0);
    cr_assert_str_eq(test_slurp(tmp("name"), buf, sizeof(buf)), "unlock\n");
    hold_key("hilock:", "unlock", 10000);
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "unlock", "--", "touch", tmp("ran")), 75);
    cr_assert(!file_exists(tmp("ran")));
}

Test(cli, unlock_without_redis_exits_69, .timeout = 30) {
    char url[64], err[1024];

    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", test_refused_port());
    cr_assert_eq(unlock_run(url, "nope"), 69);
    cr_assert_not_null(strstr(test_slurp(tmp("err"), err, sizeof(err)), "hilock: cannot unlock nope: "), "%s", err);
}

/* ---- revoke NAME, --on-revoke SIGNAL --------------------------------------- */

/* Run `hilock -u URL revoke NAME`: its status; stdout in "out", stderr in "err". */
static int revoke_run(const char *url, const char *name) {
    return cli_wait(cli_start_io(NULL, "out", "err", NULL, ARGS("-u", url, "revoke", name)), 20000);
}

/* The holder's COMMAND gets the signal it asked for, and decides: here it
 * ends, the lock is released, and a waiter gets it. */
Test(cli, revoke_signals_the_holders_command_which_decides, .timeout = 30) {
    char out[4096], want[256];
    const char *at;

    pid_t holder = cli_start("holder", NULL, ARGS("-u", srv.url, "-v", "--on-revoke", "USR1", "rv", "--",
                                                  "sh", "-c", "trap 'echo asked > \"$0\"; exit 7' USR1; "
                                                  "while :; do sleep 0.05; done", tmp("asked")));
    WAIT_UNTIL(strstr(test_slurp(tmp("holder"), out, sizeof(out)), "acquired rv with fence ") != NULL, 5000);
    at = strstr(out, "acquired rv with fence ");
    cr_assert_not_null(at, "the holder did not get the lock: %s", out);
    long long fence = atoll(at + strlen("acquired rv with fence "));
    pid_t waiter = cli_start("waiter", NULL, ARGS("-u", srv.url, "rv", "--", FENCE_TO("w")));
    WAIT_UNTIL(numsub("rv") >= 1, 5000);
    cr_assert_eq(revoke_run(srv.url, "rv"), 0);
    snprintf(want, sizeof(want), "hilock: asked the holder of rv (fence %lld) to release it\n", fence);
    cr_assert_str_eq(test_slurp(tmp("out"), out, sizeof(out)), want);
    cr_assert_eq(cli_wait(holder, 5000), 7, "COMMAND's own status");
    cr_assert_str_eq(test_slurp(tmp("asked"), out, sizeof(out)), "asked\n");
    cr_assert_eq(cli_wait(waiter, 5000), 0);
    cr_assert_gt(fence_in("w"), fence);
}

/* Without --on-revoke a holder is asked and goes on; a free lock is asked
 * nothing. */
Test(cli, revoke_is_ignored_without_on_revoke_and_a_free_lock_is_not_held, .timeout = 30) {
    char out[256];

    cr_assert_eq(revoke_run(srv.url, "nobody"), 0);
    cr_assert_str_eq(test_slurp(tmp("out"), out, sizeof(out)), "hilock: nobody was not held\n");
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("nobody")), 0);
    pid_t holder = cli_start("holder", NULL, ARGS("-u", srv.url, "deaf", "--", "sleep", "30"));
    WAIT_UNTIL(test_redis_int(&srv, "EXISTS %s", key("deaf")) == 1, 5000);
    cr_assert_eq(revoke_run(srv.url, "deaf"), 0);
    test_msleep(300);
    cr_assert_eq(cli_wait(holder, 0), -1, "the holder stopped");
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("deaf")), 1);
    kill(holder, SIGTERM);
    cr_assert_eq(cli_wait(holder, 5000), 128 + SIGTERM);
}

Test(cli, revoke_usage_errors, .timeout = 30) {
    char err[1024];

    cr_assert_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL, ARGS("-u", srv.url, "revoke")), 5000), 64);
    cr_assert_not_null(strstr(test_slurp(tmp("err"), err, sizeof(err)), "missing NAME after revoke"), "%s", err);
    cr_assert_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL,
                                       ARGS("-u", srv.url, "--on-revoke", "NOPE", "x", "--", "true")), 5000), 64);
    cr_assert_not_null(strstr(test_slurp(tmp("err"), err, sizeof(err)), "bad --on-revoke SIGNAL 'NOPE'"), "%s", err);
    cr_assert_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL,
                                       ARGS("-u", srv.url, "-x", "--on-revoke", "TERM", "x", "--", "true")), 5000), 64);
    cr_assert_not_null(strstr(test_slurp(tmp("err"), err, sizeof(err)), "--on-revoke is for the mutex only"), "%s", err);
    cr_assert_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL,
                                       ARGS("-u", srv.url, "revoke", "--on-revoke", "TERM", "x")), 5000), 64);
    cr_assert_not_null(strstr(test_slurp(tmp("err"), err, sizeof(err)), "--on-revoke does not apply to revoke"), "%s", err);
    /* `revoke --` is a lock named "revoke". */
    cr_assert_eq(RUN("-u", srv.url, "revoke", "--", "true"), 0);
}

/* ---- -m NAME: multi-locks ------------------------------------------------- */

/* COMMAND runs holding every -m NAME, with the first's name and fence and
 * every fence in the -m order; all are released at its exit. */
Test(cli, multi_runs_command_holding_every_name, .timeout = 30) {
    char out[1024], b[64], a[64], c[64], want[512];

    pid_t p = cli_start("log", NULL, ARGS("-u", srv.url, "-m", "mb", "-m", "ma", "-m", "mc", "--", "sh", "-c",
                                          "echo \"$HILOCK_NAME $HILOCK_FENCE $HILOCK_FENCES\" > \"$0.tmp\"; "
                                          "mv \"$0.tmp\" \"$0\"; sleep 0.5", tmp("env")));
    WAIT_UNTIL(file_exists(tmp("env")), 5000);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s %s %s", key("ma"), key("mb"), key("mc")), 3, "held while it runs");
    cr_assert_eq(cli_wait(p, 5000), 0);
    test_slurp(tmp("env"), out, sizeof(out));
    redis_str(b, sizeof(b), "GET %s:fence", key("mb"));
    redis_str(a, sizeof(a), "GET %s:fence", key("ma"));
    redis_str(c, sizeof(c), "GET %s:fence", key("mc"));
    snprintf(want, sizeof(want), "mb %s %s %s %s\n", b, b, a, c);
    cr_assert_str_eq(out, want);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s %s %s", key("ma"), key("mb"), key("mc")), 0, "released");
}

/* A name held elsewhere: -w 0 exits 75 (or -E's) and leaves the others
 * free; a wait is served at the release. */
Test(cli, multi_busy_leaves_nothing_and_a_wait_is_served, .timeout = 30) {
    pid_t holder = cli_start("holder", NULL, ARGS("-u", srv.url, "-m", "hb", "--", "sleep", "30"));
    WAIT_UNTIL(test_redis_int(&srv, "EXISTS %s", key("hb")) == 1, 5000);
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "-E", "9", "-m", "ha", "-m", "hb", "-m", "hc", "--", "true"), 9);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s %s", key("ha"), key("hc")), 0, "a name left behind");
    pid_t waiter = cli_start("waiter", NULL, ARGS("-u", srv.url, "-m", "hc", "-m", "hb", "--", "true"));
    test_msleep(200);
    cr_assert_eq(cli_wait(waiter, 0), -1, "served while a name is held");
    kill(holder, SIGTERM);
    cr_assert_eq(cli_wait(holder, 5000), 128 + SIGTERM);
    cr_assert_eq(cli_wait(waiter, 5000), 0);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s %s", key("hb"), key("hc")), 0);
}

Test(cli, multi_usage_errors, .timeout = 30) {
    char err[1024];
    const struct { const char *const *args; const char *says; } bad[] = {
        {ARGS("-m", "a", "x", "--", "true"), "NAME 'x' beside -m"},
        {ARGS("-m", "a", "-s", "--", "true"), "-m and -s exclude each other"},
        {ARGS("-m", "a", "-m", "a", "--", "true"), "-m NAME 'a' given twice"},
        {ARGS("-m", "a", "--on-revoke", "TERM", "--", "true"), "--on-revoke is for a lock of one NAME"},
        {ARGS("-m", "a"), "missing -- and COMMAND after the -m NAMEs"},
        {ARGS("-m", "a", "--"), "missing COMMAND after --"},
        {ARGS("-m", "", "--", "true"), "empty lock NAME"},
        {ARGS("unlock", "-m", "a", "x"), "-m does not apply to unlock"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *argv[16] = {"-u", srv.url};
        size_t n = 2;
        for (const char *const *p = bad[i].args; *p && n < 15; p++) argv[n++] = *p;
        argv[n] = NULL;
        cr_expect_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL, argv), 5000), 64, "case %zu", i);
        cr_expect_not_null(strstr(test_slurp(tmp("err"), err, sizeof(err)), bad[i].says), "case %zu: %s", i, err);
    }
    /* After -m, -- ends the options: COMMAND may be called unlock. */
    cr_assert_eq(RUN("-u", srv.url, "-m", "a", "--", "sh", "-c", "exit 3"), 3);
}

/* ---- elect, leader, observe ----------------------------------------------- */

/* Two campaigns: the first leads and runs its COMMAND with its epoch; the
 * second leads when it ends, with a larger one; `leader` prints who leads
 * (exit 1 when nobody does), `observe` a line per change. */
Test(cli, elect_runs_command_while_leading_and_leader_and_observe_say_who, .timeout = 30) {
    char out[4096];

    cr_assert_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL, ARGS("-u", srv.url, "leader", "el")), 5000), 1);
    cr_assert_str_eq(test_slurp(tmp("out"), out, sizeof(out)), "");
    pid_t obs = cli_start_io(NULL, "obs", "obs.err", NULL, ARGS("-u", srv.url, "observe", "el"));
    WAIT_UNTIL(strcmp(test_slurp(tmp("obs"), out, sizeof(out)), "0\n") == 0, 5000);
    cr_assert_str_eq(out, "0\n", "observe did not say nobody leads");
    pid_t a = cli_start("a", NULL, ARGS("-u", srv.url, "elect", "el", "--value", "host-a", "--", "sh", "-c",
                                        "echo \"$HILOCK_EPOCH\" > \"$0\"; sleep 1", tmp("epoch-a")));
    WAIT_UNTIL(file_exists(tmp("epoch-a")) && test_slurp(tmp("epoch-a"), out, sizeof(out))[0] != '\0', 5000);
    long long ea = atoll(test_slurp(tmp("epoch-a"), out, sizeof(out)));
    cr_assert_gt(ea, 0);
    char want[256];
    snprintf(want, sizeof(want), "%lld host-a\n", ea);
    cr_assert_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL, ARGS("-u", srv.url, "leader", "el")), 5000), 0);
    cr_assert_str_eq(test_slurp(tmp("out"), out, sizeof(out)), want);
    pid_t b = cli_start("b", NULL, ARGS("-u", srv.url, "-w", "5000", "elect", "--value", "host-b", "el", "--",
                                        "sh", "-c", "echo \"$HILOCK_EPOCH\" > \"$0\"", tmp("epoch-b")));
    cr_assert_eq(cli_wait(a, 5000), 0);
    cr_assert_eq(cli_wait(b, 5000), 0);
    long long eb = atoll(test_slurp(tmp("epoch-b"), out, sizeof(out)));
    cr_assert_gt(eb, ea, "epochs grow");
    /* Every change, in order: b's tenure lasts one echo, which a read
     * would miss; the messages carry it. */
    snprintf(want, sizeof(want), "0\n%lld host-a\n0\n%lld host-b\n0\n", ea, eb);
    WAIT_UNTIL(strcmp(test_slurp(tmp("obs"), out, sizeof(out)), want) == 0, 5000);
    cr_assert_str_eq(out, want, "observe printed:\n%s", out);
    kill(obs, SIGTERM);
    cli_wait(obs, 5000);
    /* Nobody leads: the election is not the lock of the same name. */
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "el", "--", "true"), 0);
}

Test(cli, elect_usage_errors, .timeout = 30) {
    char err[1024];

    cr_assert_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL,
                                       ARGS("-u", srv.url, "elect", "el", "extra", "--", "true")), 5000), 64);
    cr_assert_not_null(strstr(test_slurp(tmp("err"), err, sizeof(err)), "extra operand 'extra'"), "%s", err);
    cr_assert_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL,
                                       ARGS("-u", srv.url, "elect", "-s", "el", "--", "true")), 5000), 64);
    cr_assert_not_null(strstr(test_slurp(tmp("err"), err, sizeof(err)), "-s does not apply to elect"), "%s", err);
    cr_assert_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL,
                                       ARGS("-u", srv.url, "--value", "v", "el", "--", "true")), 5000), 64);
    cr_assert_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL, ARGS("-u", srv.url, "elect", "el", "--")), 5000), 64);
    cr_assert_not_null(strstr(test_slurp(tmp("err"), err, sizeof(err)), "missing COMMAND"), "%s", err);
    cr_assert_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL, ARGS("-u", srv.url, "leader")), 5000), 64);
    cr_assert_eq(cli_wait(cli_start_io(NULL, "out", "err", NULL, ARGS("-u", srv.url, "observe", "a", "b")), 5000), 64);
    /* `elect --` is a lock named "elect". */
    cr_assert_eq(RUN("-u", srv.url, "elect", "--", "true"), 0);
}

/* ---- Redis not there ---------------------------------------------------- */

Test(cli, unreachable_server_exits_69, .timeout = 30) {
    char url[64], out[1024];
    long long t0, took;

    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", test_refused_port());
    t0 = test_now_ms();
    cr_assert_eq(RUN("-u", url, "nope", "--", "touch", tmp("ran")), 69);
    took = test_now_ms() - t0;
    cr_assert_lt(took, 4000, "took %lld ms", took);
    cr_assert(!file_exists(tmp("ran")));
    cr_assert(strstr(test_slurp(tmp("out"), out, sizeof(out)), "hilock: cannot lock nope") != NULL,
              "message: %s", out);
}

Test(cli, peer_speaking_http_exits_69, .timeout = 30) {
    char url[64];
    long long t0, took;
    int port, fd = listen_any(&port);
    pid_t peer = fork();

    cr_assert_geq(peer, 0);
    if (peer == 0) {
        static const char reply[] = "HTTP/1.0 400 Bad\r\n\r\n";
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;) {
            int s = accept(fd, NULL, NULL);
            if (s < 0) continue;
            if (write(s, reply, sizeof(reply) - 1) < 0) {}
            close(s);
        }
    }
    remember(peer);
    close(fd);
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    t0 = test_now_ms();
    cr_assert_eq(RUN("-u", url, "http", "--", "touch", tmp("ran")), 69);
    took = test_now_ms() - t0;
    cr_assert_lt(took, 5000, "took %lld ms", took);
    cr_assert(!file_exists(tmp("ran")));
}

Test(cli, silent_peer_exits_69, .timeout = 30) {
    char url[64];
    long long t0, took;
    int port, fd = listen_any(&port); /* never accepted: the kernel completes connects */

    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    t0 = test_now_ms();
    cr_assert_eq(RUN("-u", url, "silent", "--", "touch", tmp("ran")), 69);
    took = test_now_ms() - t0;
    cr_assert_lt(took, 5000, "took %lld ms", took);
    cr_assert(!file_exists(tmp("ran")));
    close(fd);
}

Test(cli, unreachable_server_with_a_wait_exits_69, .timeout = 30) {
    /* Nothing listens on port 1: a refused connection is "Redis is down"
     * (69) whatever -w is, never "busy" (75), and never silent. This needs
     * the library to end the wait with HILOCK_ECONN, not HILOCK_ETIMEDOUT. */
    const char *waits[] = { "500", "0" };
    char out[1024];
    size_t i;

    for (i = 0; i < 2; i++) {
        cr_assert_eq(RUN("-u", "redis://127.0.0.1:1", "-w", waits[i], "p1", "--", "touch", tmp("ran")),
                     69, "-w %s", waits[i]);
        cr_assert(!file_exists(tmp("ran")));
        cr_assert(strstr(test_slurp(tmp("out"), out, sizeof(out)), "hilock: cannot lock p1") != NULL,
                  "-w %s: message: %s", waits[i], out);
    }
}

/* ---- Redis refusing ----------------------------------------------------- */

/* The run just done (how: "-w 0", "waiting") exited 69, with a message
 * that has `want` in it, and did not run COMMAND. */
static void check_69(int st, const char *name, const char *how, const char *want) {
    char out[2048];

    test_slurp(tmp("out"), out, sizeof(out));
    cr_assert_eq(st, 69, "%s (%s): exit %d, said: %s", name, how, st, out);
    cr_assert(!file_exists(tmp("ran")), "%s (%s): COMMAND ran", name, how);
    cr_assert(strstr(out, "hilock: cannot lock ") != NULL && strstr(out, want) != NULL,
              "%s (%s): want a message with '%s', got: %s", name, how, want, out);
}

/* A refusal must be 69 whether hilock tries once or would wait. */
static void refused_with_69(const char *url, const char *name, const char *want) {
    check_69(RUN("-u", url, "-w", "0", name, "--", "touch", tmp("ran")), name, "-w 0", want);
    check_69(RUN("-u", url, name, "--", "touch", tmp("ran")), name, "waiting", want);
}

Test(cli, read_only_replica_exits_69, .timeout = 30) {
    char master[16];

    snprintf(master, sizeof(master), "%d", srv.port);
    cr_assert_eq(test_redis_start(&replica, 0, "--replicaof", "127.0.0.1", master,
                                  "--replica-read-only", "yes", NULL), 0, "cannot start the replica");
    replica_started = 1;
    refused_with_69(replica.url, "ro", "READONLY");
}

Test(cli, out_of_memory_exits_69, .timeout = 30) {
    cr_assert(redis_ok("CONFIG SET maxmemory-policy noeviction"));
    cr_assert(redis_ok("SET filler %s", "some bytes to be over the limit"));
    cr_assert(redis_ok("CONFIG SET maxmemory 1"));
    refused_with_69(srv.url, "oom", "OOM");
}

Test(cli, foreign_value_at_the_lock_key_exits_69, .timeout = 30) {
    /* A list where the lock belongs: the lock script fails. */
    cr_assert_eq(test_redis_int(&srv, "RPUSH %s not-a-lock", key("str")), 1);
    refused_with_69(srv.url, "str", "WRONGTYPE");
}

/* A server that may evict locks: the CLI says so on stderr, and still works. */
Test(cli, evicting_server_warns_on_stderr, .timeout = 30) {
    char out[2048];

    cr_assert(redis_ok("CONFIG SET maxmemory-policy allkeys-lru"));
    cr_assert_eq(RUN("-u", srv.url, "evict", "--", "touch", tmp("ran")), 0);
    test_slurp(tmp("out"), out, sizeof(out));
    cr_expect(file_exists(tmp("ran")), "COMMAND did not run");
    cr_expect_not_null(strstr(out, "hilock: warning: Redis has maxmemory-policy allkeys-lru"),
                       "no warning in: %s", out);
    cr_assert(redis_ok("CONFIG SET maxmemory-policy noeviction"));
    unlink(tmp("ran"));
    cr_assert_eq(RUN("-u", srv.url, "evict", "--", "touch", tmp("ran")), 0);
    test_slurp(tmp("out"), out, sizeof(out));
    cr_expect_str_eq(out, "", "a noeviction server warns: %s", out);
}

/* `hilock unlock` without a NAME says so, not "missing --". */
Test(cli, unlock_without_a_name, .timeout = 30) {
    char out[2048];
    cr_assert_eq(RUN("-u", srv.url, "unlock"), 64);
    test_slurp(tmp("out"), out, sizeof(out));
    cr_expect_not_null(strstr(out, "missing NAME after unlock"), "said: %s", out);
}

/* A URL's user and password never reach stderr, which ends up in logs: not
 * in the usage error of a bad URL (hilock and hilock inspect, the URL
 * given or from $HILOCK_URL), and not in -v's "connecting to", also when
 * the password holds an '@' (the userinfo ends at the last '@'). */
Test(cli, url_password_is_never_printed, .timeout = 30) {
    char out[4096];

    cr_assert_eq(RUN("-u", "redis://u:s3cr3t@127.0.0.1:99999", "pw", "--", "true"), 64);
    test_slurp(tmp("out"), out, sizeof(out));
    cr_assert_not_null(strstr(out, "hilock: bad Redis URL 'redis://***@127.0.0.1:99999': the port is not a "
                                   "number from 1 to 65535\n"), "%s", out);
    cr_assert_null(strstr(out, "s3cr3t"), "the password was printed: %s", out);

    cr_assert_eq(cli_run_env("HILOCK_URL=redis://u:s3cr3t@127.0.0.1:99999", ARGS("pw", "--", "true")), 64);
    cr_assert_null(strstr(test_slurp(tmp("out"), out, sizeof(out)), "s3cr3t"), "the password was printed: %s", out);

    cr_assert_eq(RUN("inspect", "-u", "redis://u:s3cr3t@127.0.0.1:99999", "pw"), 64);
    test_slurp(tmp("out"), out, sizeof(out));
    cr_assert_not_null(strstr(out, "bad Redis URL 'redis://***@127.0.0.1:99999'"), "%s", out);
    cr_assert_null(strstr(out, "s3cr3t"), "inspect printed the password: %s", out);

    cr_assert_eq(RUN("-u", "redis://u:p@s3cr3t@127.0.0.1:1", "-v", "pw", "--", "true"), 69);
    test_slurp(tmp("out"), out, sizeof(out));
    cr_assert_not_null(strstr(out, "hilock: connecting to redis://***@127.0.0.1:1\n"), "%s", out);
    cr_assert_null(strstr(out, "s3cr3t"), "-v printed a piece of the password: %s", out);
}

/* ---- Usage --------------------------------------------------------------- */

Test(cli, usage_errors_exit_64, .timeout = 60) {
    static char longname[HILOCK_NAME_MAX + 2];
    char ran[PATH_MAX];
    const char *cases[][10] = {
        { NULL },
        { "-u", srv.url, "name", "touch", ran, NULL },          /* missing -- */
        { "-u", srv.url, "name", "--", NULL },                   /* missing COMMAND */
        { "-u", srv.url, "name", NULL },
        { "-u", srv.url, "", "--", "touch", ran, NULL },         /* empty NAME */
        { "-u", "http://x", "name", "--", "touch", ran, NULL },  /* bad URL */
        { "-u", srv.url, "-w", "abc", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-w", "-5", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-l", "0", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-l", "10x", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-l", "5", "name", "--", "touch", ran, NULL },   /* under HILOCK_LEASE_MIN */
        { "-u", srv.url, "-p", "a{b", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, longname, "--", "touch", ran, NULL },  /* NAME too long */
        { "-u", srv.url, "-q", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-s", "-x", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-x", "unlock", "name", NULL },
        { "-u", srv.url, "-w", NULL },
        { "-u", srv.url, "--bogus", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-E", "0", "name", "--", "touch", ran, NULL },   /* busy = success? */
        { "-u", srv.url, "-E", "256", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-E", "x", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-E", NULL },
        { "-u", srv.url, "-w", "0", "unlock", "name", NULL },     /* lock-only options */
        { "-u", srv.url, "-E", "9", "unlock", "name", NULL },
        { "-u", srv.url, "unlock", "", NULL },
        { "-u", srv.url, "unlock", "--", NULL },                 /* the lock "unlock", no COMMAND */
        { "-u", srv.url, "unlock", "name", "touch", ran, NULL }, /* unlock takes one NAME */
        { "-u", srv.url, "-n", "0", "name", "--", "touch", ran, NULL },   /* no permits */
        { "-u", srv.url, "-n", "1000001", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-n", "x", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-n", "2", "unlock", "name", NULL },
        { "-u", srv.url, "-f", "-s", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-n", "2", "-f", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-f", "unlock", "name", NULL },
        { "-u", srv.url, "-s", "unlock", "name", NULL },
        { "-u", srv.url, "-n", "-1", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-n", "3x", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-n", "", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-s", "-n", "2", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-x", "-f", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "-n", NULL },
        { "-u", srv.url, "-f", "name", "--", NULL },              /* missing COMMAND */
        { "-u", srv.url, "--starve", "0", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "--starve", "x", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "--starve", "-5", "name", "--", "touch", ran, NULL },
        { "-u", srv.url, "--starve", NULL },
        { "-u", srv.url, "--starve", "20", "unlock", "name", NULL },
        /* Redlock serves the mutex only. */
        { "-u", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "-n", "2", "name", "--", "touch", ran, NULL },
        { "-u", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "-s", "name", "--", "touch", ran, NULL },
        { "-u", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "-x", "name", "--", "touch", ran, NULL },
        { "-u", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "-f", "name", "--", "touch", ran, NULL },
    };
    static const char hint[] = "Try 'hilock --help' for more information.\n";
    char out[4096];
    const char *nl;
    size_t i;

    snprintf(ran, sizeof(ran), "%s", tmp("ran"));
    memset(longname, 'n', HILOCK_NAME_MAX + 1);
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cr_assert_eq(cli_run_env(NULL, cases[i]), 64, "case %zu", i);
        cr_assert(!file_exists(ran), "case %zu ran COMMAND", i);
        /* One line that says what is wrong, then the hint; no usage text. */
        test_slurp(tmp("out"), out, sizeof(out));
        nl = strchr(out, '\n');
        cr_assert(strncmp(out, "hilock: ", 8) == 0 && nl != NULL && strcmp(nl + 1, hint) == 0,
                  "case %zu: want one message line and the hint, got: %s", i, out);
    }
    cr_assert_eq(cli_run_env(NULL, cases[1]), 64);
    cr_assert_str_eq(test_slurp(tmp("out"), out, sizeof(out)),
                     "hilock: missing -- between NAME and COMMAND\n"
                     "Try 'hilock --help' for more information.\n");
    cr_assert_eq(cli_run_env(NULL, cases[sizeof(cases) / sizeof(cases[0]) - 1]), 64); /* -f over Redlock */
    cr_assert_str_eq(test_slurp(tmp("out"), out, sizeof(out)),
                     "hilock: -f does not work over Redlock (a redlock:// URL): only the plain mutex does\n"
                     "Try 'hilock --help' for more information.\n");
    cr_assert_eq(RUN("--help"), 0);
    cr_assert(strncmp(test_slurp(tmp("out"), out, sizeof(out)), "Usage: hilock", 13) == 0, "%s", out);
    cr_assert_eq(RUN("-h"), 0);
}

Test(cli, version_is_the_headers, .timeout = 30) {
    char out[256], both[128], *page;
    const char *man = src_path("man/hilock.1");

    /* Static or matching shared library: one version; else both. */
    snprintf(both, sizeof(both), "hilock %s (library %s)\n", HILOCK_VERSION, hilock_version());
    cr_assert_eq(RUN("--version"), 0);
    test_slurp(tmp("out"), out, sizeof(out));
    cr_assert(strcmp(out, "hilock " HILOCK_VERSION "\n") == 0 || strcmp(out, both) == 0, "%s", out);
    cr_assert_eq(RUN("-V"), 0);
    cr_assert(strcmp(test_slurp(tmp("out"), out, sizeof(out)), "hilock " HILOCK_VERSION "\n") == 0 ||
              strcmp(out, both) == 0, "%s", out);
    /* The man page's footer names the same version. */
    cr_assert_not_null(man, "no man/hilock.1 above the test binary");
    page = test_slurp_all(man);
    cr_assert_not_null(page);
    cr_expect_not_null(strstr(page, "\"hilock " HILOCK_VERSION "\""),
                       "man/hilock.1's .TH does not say hilock %s", HILOCK_VERSION);
    free(page);
}

/* The exit statuses as one document lists them: each row's tag ("64",
 * "COMMAND's") and its text. */
#define XT_ROWS 16
typedef struct xtable {
    const char *what;
    int n;
    char tag[XT_ROWS][16];
    char text[XT_ROWS][2048];
} xtable;

static void xt_row(xtable *t, const char *tag, size_t len) {
    cr_assert_lt(t->n, XT_ROWS, "%s: too many exit statuses", t->what);
    /* "COMMAND's", "<COMMAND's>" (roff: ".RI < COMMAND 's>"): one tag. */
    if (memmem(tag, len, "COMMAND", 7) != NULL) snprintf(t->tag[t->n], 16, "COMMAND's");
    else snprintf(t->tag[t->n], 16, "%.*s", (int)len, tag);
    t->text[t->n][0] = '\0';
    t->n++;
}

/* Append a line of text to the last row; roff escapes dropped ("\-E"). */
static void xt_text(xtable *t, const char *s, size_t len) {
    char *text = t->text[t->n - 1];
    size_t n = strlen(text), i;

    cr_assert_gt(t->n, 0, "%s: text before the first exit status", t->what);
    for (i = 0; i < len && n + 2 < sizeof(t->text[0]); i++)
        if (s[i] != '\\') text[n++] = s[i];
    text[n++] = ' ';
    text[n] = '\0';
}

/* --help: "  TAG   text" rows under "Exit status:", continued by deeper indents. */
static void xt_from_help(xtable *t, const char *help) {
    const char *p = strstr(help, "\nExit status:\n"), *nl;

    cr_assert_not_null(p, "--help has no Exit status");
    for (p = strchr(p + 1, '\n') + 1; *p == ' '; p = nl + 1) {
        size_t tl;
        nl = strchr(p, '\n');
        if (nl == NULL) nl = p + strlen(p);
        if (p[2] != ' ') {
            tl = strcspn(p + 2, " \n");
            xt_row(t, p + 2, tl);
            xt_text(t, p + 2 + tl, (size_t)(nl - p - 2 - tl));
        } else {
            xt_text(t, p, (size_t)(nl - p));
        }
        if (*nl == '\0') break;
    }
}

/* hilock.1: under .SH EXIT STATUS, each .TP's next line is the tag. */
static void xt_from_man(xtable *t, const char *page) {
    const char *p = strstr(page, "\n.SH EXIT STATUS\n"), *end, *nl;
    int tag_next = 0;

    cr_assert_not_null(p, "hilock.1 has no EXIT STATUS");
    p = strchr(p + 1, '\n') + 1;
    end = strstr(p, "\n.SH ");
    cr_assert_not_null(end);
    for (; p < end; p = nl + 1) {
        nl = strchr(p, '\n');
        if (strncmp(p, ".TP\n", 4) == 0) {
            tag_next = 1;
        } else if (tag_next) {
            /* ".B 64", ".RI < COMMAND 's>": the tag is after the macro. */
            const char *tag = p + strcspn(p, " ") + 1;
            char clean[16];
            size_t n = 0;
            for (; tag < nl && n + 1 < sizeof(clean); tag++)
                if (*tag != ' ' && *tag != '<' && *tag != '>') clean[n++] = *tag;
            xt_row(t, clean, n);
            tag_next = 0;
        } else {
            xt_text(t, p, (size_t)(nl - p));
        }
    }
}

/* docs/cli.md: the "| exit | meaning |" table of its "Exit status" section. */
static void xt_from_readme(xtable *t, const char *readme) {
    const char *p = strstr(readme, "\n## Exit status\n"), *end, *nl;

    cr_assert_not_null(p, "docs/cli.md has no Exit status section");
    end = strstr(p + 1, "\n## ");
    if (end == NULL) end = p + strlen(p);
    for (p = strchr(p + 1, '\n') + 1; p < end; p = nl + 1) {
        nl = strchr(p, '\n');
        if (strncmp(p, "| ", 2) == 0 && strncmp(p, "| exit ", 7) != 0) {
            size_t tl = strcspn(p + 2, "|");
            while (tl > 0 && p[2 + tl - 1] == ' ') tl--;
            xt_row(t, p + 2, tl);
            xt_text(t, p + 2 + tl, (size_t)(nl - p - 2 - tl));
        }
    }
}

/* The HILOCK_E* names in a text, sorted, one space after each. */
static void error_names(const char *text, char *out, size_t n) {
    char names[32][32];
    int count = 0, i, j;

    for (const char *p = text; (p = strstr(p, "HILOCK_E")) != NULL && count < 32; ) {
        size_t len = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789");
        snprintf(names[count++], sizeof(names[0]), "%.*s", (int)len, p);
        p += len;
    }
    for (i = 1; i < count; i++)         /* a few names: insertion sort */
        for (j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char swap[32];
            memcpy(swap, names[j], 32); memcpy(names[j], names[j - 1], 32); memcpy(names[j - 1], swap, 32);
        }
    out[0] = '\0';
    for (i = 0; i < count; i++)
        if (i == 0 || strcmp(names[i], names[i - 1]) != 0)
            snprintf(out + strlen(out), n - strlen(out), "%s ", names[i]);
}

/* --help, hilock(1) and docs/cli.md list the same exit statuses, in the same
 * order, with the same HILOCK_E* codes under each; and the codes are those
 * the CLI maps (unreachable_server_exits_69 and the tests after it check
 * the mapping itself). */
Test(cli, exit_statuses_agree_in_help_man_and_readme, .timeout = 60) {
    static const char *const tags[] = { "COMMAND's", "1", "64", "69", "70", "71", "74", "75", "78", "128+N" };
    static const char want69[] = "HILOCK_EAUTH HILOCK_ECONN HILOCK_EDEADLINE HILOCK_EEVICTION "
                                 "HILOCK_ELOADING HILOCK_EOOM HILOCK_EPROTO HILOCK_EREADONLY "
                                 "HILOCK_EREPLY HILOCK_ESCRIPT HILOCK_ETLS ";
    static xtable t[3] = { { .what = "--help" }, { .what = "hilock.1" }, { .what = "docs/cli.md" } };
    const char *man = src_path("man/hilock.1"), *readme = src_path("docs/cli.md");
    char *help, *page, *md, names[512], help_names[512];
    size_t i, r;
    int k;

    cr_assert_eq(RUN("--help"), 0);
    help = test_slurp_all(tmp("out"));
    cr_assert(man != NULL && (page = test_slurp_all(man)) != NULL, "no man/hilock.1 above the test binary");
    cr_assert(readme != NULL && (md = test_slurp_all(readme)) != NULL, "no docs/cli.md above the test binary");
    xt_from_help(&t[0], help);
    xt_from_man(&t[1], page);
    xt_from_readme(&t[2], md);

    for (k = 0; k < 3; k++) {
        cr_assert_eq(t[k].n, (int)(sizeof(tags) / sizeof(tags[0])), "%s lists %d exit statuses",
                     t[k].what, t[k].n);
        for (r = 0; r < sizeof(tags) / sizeof(tags[0]); r++) {
            cr_assert_str_eq(t[k].tag[r], tags[r], "%s, row %zu", t[k].what, r);
            error_names(t[0].text[r], help_names, sizeof(help_names));
            error_names(t[k].text[r], names, sizeof(names));
            cr_assert_str_eq(names, help_names, "%s and --help differ on the codes of %s: '%s', '%s'",
                             t[k].what, tags[r], names, help_names);
            if (strcmp(tags[r], "69") == 0)
                cr_assert_str_eq(names, want69, "%s: the codes that exit 69", t[k].what);
            else if (strcmp(tags[r], "70") == 0)
                cr_assert_str_eq(names, "HILOCK_ELOOP HILOCK_ENOMEM ", "%s: the codes that exit 70", t[k].what);
        }
        /* COMMAND's own statuses, and -E's, in each. */
        for (i = 0; i < 3; i++) {
            static const char *const own[] = { "126", "127", "128+N" };
            cr_assert_not_null(strstr(t[k].text[0], own[i]), "%s: COMMAND's row lacks %s: %s",
                               t[k].what, own[i], t[k].text[0]);
        }
        cr_assert_not_null(strstr(t[k].text[7], "-E"), "%s: 75 does not mention -E: %s",
                           t[k].what, t[k].text[7]);
    }
    free(help);
    free(md);

    /* And the page, rendered, shows every number (when man is installed). */
    {
        char *argv[] = { "man", "-l", (char *)man, NULL };
        static const char *const nums[] = { "64", "69", "70", "71", "74", "75", "78", "126", "127", "128+N" };
        char *shown, *sect;
        setenv("MANPAGER", "cat", 1);
        setenv("MANWIDTH", "80", 1);
        if (run_prog(argv, "man.out") != 127) {
            shown = test_slurp_all(tmp("man.out"));
            sect = shown != NULL ? strstr(shown, "EXIT STATUS") : NULL;
            cr_assert_not_null(sect, "man -l %s shows no EXIT STATUS: %s", man, shown);
            for (i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
                cr_assert_not_null(strstr(sect, nums[i]), "man -l: no %s under EXIT STATUS", nums[i]);
            free(shown);
        }
    }
    free(page);
}

/* ---- Signals ------------------------------------------------------------- */

Test(cli, sigterm_while_waiting_leaves_nothing, .timeout = 30) {
    char tok[64];
    pid_t pid;

    hold_key("hilock:", "sw", 20000);
    pid = cli_start("out", NULL, ARGS("-u", srv.url, "sw", "--", "touch", tmp("ran")));
    WAIT_UNTIL(numsub("sw") == 1, 5000);
    cr_assert_eq(numsub("sw"), 1, "the waiter never subscribed");
    kill(pid, SIGTERM);
    cr_assert_eq(cli_wait(pid, 5000), 128 + SIGTERM);
    cr_assert(!file_exists(tmp("ran")));
    cr_assert_str_eq(redis_str(tok, sizeof(tok), "GET %s", key("sw")), "someone-else w"); /* marked by the try */
    cr_assert_eq(test_redis_int(&srv, "EXISTS hilock:{sw}:fence"), 0, "the waiter took the lock");
    WAIT_UNTIL(numsub("sw") == 0, 2000);
    cr_assert_eq(numsub("sw"), 0, "a subscription outlived the waiter");
}

Test(cli, sigint_racing_a_release_leaves_no_lock, .timeout = 30) {
    pid_t pid;

    /* Free the lock and signal at once: the waiter's retry and its cancel
     * race, and either way the lock must not stay behind. */
    hold_key("hilock:", "race", 20000);
    pid = cli_start("out", NULL, ARGS("-u", srv.url, "race", "--", "sleep", "10"));
    WAIT_UNTIL(numsub("race") == 1, 5000);
    cr_assert_eq(numsub("race"), 1, "the waiter never subscribed");
    cr_assert_eq(test_redis_int(&srv, "DEL %s", key("race")), 1);
    cr_assert_eq(test_redis_int(&srv, "PUBLISH hilock:{race}:ch r"), 1);
    kill(pid, SIGINT);
    cr_assert_eq(cli_wait(pid, 5000), 128 + SIGINT);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("race")), 0, "the lock leaked");
}

Test(cli, sigint_is_forwarded_to_command, .timeout = 30) {
    const char *script = "trap 'echo int > \"$1\"; exit 5' INT; "
                         "sleep 10 & echo $! > \"$2\"; : > \"$3\"; wait";
    char buf[64];
    pid_t pid;

    pid = cli_start("out", NULL, ARGS("-u", srv.url, "fw", "--", "sh", "-c", script,
                                      "sh", tmp("sig"), tmp("sleep.pid"), tmp("ready")));
    WAIT_UNTIL(file_exists(tmp("ready")), 5000);
    cr_assert(file_exists(tmp("ready")), "COMMAND did not start");
    kill(pid, SIGINT);
    /* hilock stays until COMMAND has handled it, then passes on its status. */
    cr_assert_eq(cli_wait(pid, 5000), 5);
    cr_assert_str_eq(test_slurp(tmp("sig"), buf, sizeof(buf)), "int\n");
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("fw")), 0);
}

Test(cli, sighup_while_waiting_exits_129, .timeout = 30) {
    pid_t pid;

    hold_key("hilock:", "hw", 20000);
    pid = cli_start("out", NULL, ARGS("-u", srv.url, "hw", "--", "touch", tmp("ran")));
    WAIT_UNTIL(numsub("hw") == 1, 5000);
    cr_assert_eq(numsub("hw"), 1, "the waiter never subscribed");
    kill(pid, SIGHUP);
    cr_assert_eq(cli_wait(pid, 5000), 128 + SIGHUP);
    cr_assert(!file_exists(tmp("ran")));
}

/* `nohup hilock NAME -- COMMAND &`: the SIGHUP that hangs up the terminal
 * must neither stop the wait nor reach COMMAND. */
Test(cli, ignored_sighup_does_not_stop_the_wait, .timeout = 30) {
    sigset_t hup;
    pid_t holder, pid;
    int ign, cgt;

    holder = cli_start("holder", NULL, ARGS("-u", srv.url, "nh", "--", UNTIL_GO("held", "go")));
    WAIT_UNTIL(file_exists(tmp("held")), 5000);
    cr_assert(file_exists(tmp("held")), "the holder did not start");
    pid = cli_start_ignoring(sigs_of(&hup, SIGHUP, 0), "out", NULL,
                             ARGS("-u", srv.url, "nh", "--", "touch", tmp("ran")));
    WAIT_UNTIL(numsub("nh") == 1, 5000);
    cr_assert_eq(numsub("nh"), 1, "the waiter never subscribed");
    kill(pid, SIGHUP);
    test_msleep(200);
    cr_assert_eq(cli_wait(pid, 0), -1, "an ignored SIGHUP stopped the wait");
    cr_assert_eq(numsub("nh"), 1, "the waiter stopped waiting");
    dispositions(pid, SIGHUP, &ign, &cgt);
    cr_assert(ign && !cgt, "while waiting, SIGHUP ignored %d, caught %d", ign, cgt);

    /* Released: the waiter gets the lock and runs COMMAND as if nothing happened. */
    close(open(tmp("go"), O_WRONLY | O_CREAT, 0600));
    cr_assert_eq(cli_wait(holder, 5000), 0);
    cr_assert_eq(cli_wait(pid, 5000), 0);
    cr_assert(file_exists(tmp("ran")), "COMMAND did not run");
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("nh")), 0);
}

Test(cli, ignored_signals_stay_ignored_while_command_runs, .timeout = 30) {
    sigset_t set;
    pid_t pid;
    int ign, cgt;

    /* SIGCHLD ignored too: hilock still needs it to see COMMAND end. */
    pid = cli_start_ignoring(sigs_of(&set, SIGHUP, SIGCHLD, 0), "out", NULL,
                             ARGS("-u", srv.url, "ni", "--", UNTIL_GO("ready", "go")));
    WAIT_UNTIL(file_exists(tmp("ready")), 5000);
    cr_assert(file_exists(tmp("ready")), "COMMAND did not start");
    kill(pid, SIGHUP);
    test_msleep(100);
    cr_assert_eq(cli_wait(pid, 0), -1, "an ignored SIGHUP stopped hilock");
    /* Not caught, so not passed on either (COMMAND, a shell, would not
     * show it: it ignores SIGHUP too). */
    dispositions(pid, SIGHUP, &ign, &cgt);
    cr_assert(ign && !cgt, "while COMMAND runs, SIGHUP ignored %d, caught %d", ign, cgt);
    dispositions(pid, SIGCHLD, &ign, &cgt);
    cr_assert(cgt, "SIGCHLD not caught");
    close(open(tmp("go"), O_WRONLY | O_CREAT, 0600));
    cr_assert_eq(cli_wait(pid, 5000), 0, "COMMAND's end went unseen");
}

Test(cli, command_inherits_the_ignored_signals, .timeout = 30) {
    char out[4096];
    unsigned long long ign;
    sigset_t set;
    pid_t pid;

    /* COMMAND reports its own dispositions (no shell in between: sh would
     * catch SIGCHLD itself). */
    pid = cli_start_ignoring(sigs_of(&set, SIGHUP, SIGCHLD, 0), "out", NULL,
                             ARGS("-u", srv.url, "ci", "--", "grep", "^SigIgn", "/proc/self/status"));
    cr_assert_eq(cli_wait(pid, 10000), 0);
    test_slurp(tmp("out"), out, sizeof(out));
    ign = sig_field(out, "SigIgn");
    cr_assert(ign & SIGBIT(SIGHUP), "COMMAND does not ignore SIGHUP: %s", out);
    cr_assert(ign & SIGBIT(SIGCHLD), "COMMAND does not ignore SIGCHLD: %s", out);
    /* What hilock ignores for itself is not handed on. */
    cr_assert(!(ign & SIGBIT(SIGPIPE)), "COMMAND ignores SIGPIPE: %s", out);
    cr_assert(!(ign & SIGBIT(SIGINT)) && !(ign & SIGBIT(SIGTERM)), "COMMAND ignores more: %s", out);
}

/* ---- The read-write lock: -s and -x --------------------------------------- */

/* -s holders run together; -x runs alone, holds off new -s holders while
 * it waits, and gets a fence that -s holders after it see; the plain mutex
 * NAME is another lock. */
Test(cli, shared_holders_together_exclusive_alone, .timeout = 60) {
    char rkey[128];
    pid_t s1, s2, x;

    snprintf(rkey, sizeof(rkey), "%s:rwr", key("rwl"));
    s1 = cli_start("s1", NULL, ARGS("-u", srv.url, "-s", "rwl", "--", UNTIL_GO("r1", "go")));
    s2 = cli_start("s2", NULL, ARGS("-u", srv.url, "-s", "rwl", "--", UNTIL_GO("r2", "go")));
    WAIT_UNTIL(file_exists(tmp("r1")) && file_exists(tmp("r2")), 5000);
    cr_assert(file_exists(tmp("r1")) && file_exists(tmp("r2")), "two -s holders run at once");
    cr_assert_eq(test_redis_int(&srv, "ZCARD %s", rkey), 2);

    cr_assert_eq(RUN("-u", srv.url, "-x", "-w", "0", "rwl", "--", "touch", tmp("ran")), 75,
                 "-x is busy beside -s holders");
    cr_assert(!file_exists(tmp("ran")));
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "rwl", "--", "true"), 0,
                 "the mutex rwl is another lock");

    x = cli_start("x", NULL, ARGS("-u", srv.url, "-x", "rwl", "--", FENCE_TO("fx")));
    test_msleep(300);
    cr_assert_eq(cli_wait(x, 0), -1, "-x waits for the -s holders");
    cr_assert_eq(RUN("-u", srv.url, "-s", "-w", "300", "rwl", "--", "touch", tmp("ran")), 75,
                 "a new -s waits behind the waiting -x");
    cr_assert(!file_exists(tmp("ran")));

    cr_assert_eq(close(open(tmp("go"), O_WRONLY | O_CREAT, 0600)), 0);
    cr_assert_eq(cli_wait(s1, 5000), 0);
    cr_assert_eq(cli_wait(s2, 5000), 0);
    cr_assert_eq(cli_wait(x, 5000), 0, "-x runs once the -s holders are gone");
    cr_assert_gt(fence_in("fx"), 0);
    cr_assert_eq(RUN("-u", srv.url, "-s", "rwl", "--", FENCE_TO("fs")), 0);
    cr_assert_eq(fence_in("fs"), fence_in("fx"), "-s sees the last -x holder's fence");
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", rkey), 0);
}

/* --help says that the default is the plain mutex. */
Test(cli, help_tells_mutex_from_rwlock, .timeout = 30) {
    char out[8192];
    cr_assert_eq(RUN("--help"), 0);
    test_slurp(tmp("out"), out, sizeof(out));
    cr_assert_not_null(strstr(out, "[-n N | -s | -x | -f]"), "%s", out);
    cr_assert_not_null(strstr(out, "Without -n, -s, -x or -f, NAME is a plain mutex"), "%s", out);
}

/* ---- The fair lock: -f ---------------------------------------------------- */

/* Three -f waiters started 150 ms apart behind a -f holder run in the order
 * they started; the plain mutex NAME is another lock. */
Test(cli, fair_waiters_run_in_order, .timeout = 60) {
    char order[64];
    pid_t h, w[3];
    h = cli_start("h", NULL, ARGS("-u", srv.url, "-f", "fl", "--", UNTIL_GO("held", "go")));
    WAIT_UNTIL(file_exists(tmp("held")), 5000);
    cr_assert(file_exists(tmp("held")));
    cr_assert_eq(RUN("-u", srv.url, "-f", "-w", "0", "fl", "--", "true"), 75, "-f is busy");
    cr_assert_eq(RUN("-u", srv.url, "-w", "0", "fl", "--", "true"), 0, "the mutex fl is another lock");
    for (int i = 0; i < 3; i++) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "printf %d >> \"$0\"", i + 1);
        w[i] = cli_start(i == 0 ? "w0" : i == 1 ? "w1" : "w2", NULL,
                         ARGS("-u", srv.url, "-f", "fl", "--", "sh", "-c", cmd, tmp("order")));
        test_msleep(150);
    }
    cr_assert_eq(close(open(tmp("go"), O_WRONLY | O_CREAT, 0600)), 0);
    cr_assert_eq(cli_wait(h, 5000), 0);
    for (int i = 0; i < 3; i++) cr_assert_eq(cli_wait(w[i], 5000), 0, "waiter %d", i);
    test_slurp(tmp("order"), order, sizeof(order));
    cr_assert_str_eq(order, "123", "ran in the order %s", order);
}

/* ---- A wait of -n, -x or -f given up ------------------------------------- */

/* Subscribers of a channel (a waiting hilock holds one). */
static long long numsub_of(const char *channel) {
    redisContext *rc = test_redis_connect(&srv);
    redisReply *r;
    long long n = -1;

    if (rc == NULL) return -1;
    r = redisCommand(rc, "PUBSUB NUMSUB %s", channel);
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        n = r->element[1]->integer;
    if (r != NULL) freeReplyObject(r);
    redisFree(rc);
    return n;
}

/* SIGTERM while waiting ends -n, -x and -f waits as it ends the mutex's
 * (128+15, COMMAND not run), and what the wait had put in Redis goes at
 * once: a -f waiter's place in the queue (else the next -f -w 0 would be
 * busy for up to 5 s), a -x waiter's "writer waiting" marker (else new -s
 * holders would wait up to 3 s), and a -n waiter takes no permit. */
Test(cli, sigterm_ends_a_wait_of_every_kind_and_leaves_nothing, .timeout = 60) {
    static const struct {
        const char *holder, *waiter; /* their mode options */
        const char *n;               /* -n's N, or NULL */
        const char *name, *channel;
    } kinds[] = {
        { "-f", "-f", NULL, "kf", "hilock:{kf}:fair:ch" },
        { "-s", "-x", NULL, "kx", "hilock:{kx}:rw:ch" },
        { "-n", "-n", "1", "kn", "hilock:{kn}:sem:ch" },
    };
    size_t i;

    for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        const char *name = kinds[i].name;
        char ready[16], go[16];
        pid_t h, w;

        snprintf(ready, sizeof(ready), "ready%zu", i);
        snprintf(go, sizeof(go), "go%zu", i);
        if (kinds[i].n != NULL) {
            h = cli_start("h", NULL, ARGS("-u", srv.url, "-n", kinds[i].n, name, "--", UNTIL_GO(ready, go)));
        } else {
            h = cli_start("h", NULL, ARGS("-u", srv.url, kinds[i].holder, name, "--", UNTIL_GO(ready, go)));
        }
        WAIT_UNTIL(file_exists(tmp(ready)), 5000);
        cr_assert(file_exists(tmp(ready)), "%s: the holder never ran", name);
        if (kinds[i].n != NULL)
            w = cli_start("w", NULL, ARGS("-u", srv.url, "-n", kinds[i].n, name, "--", "touch", tmp("ran")));
        else
            w = cli_start("w", NULL, ARGS("-u", srv.url, kinds[i].waiter, name, "--", "touch", tmp("ran")));
        if (i == 0) {
            WAIT_UNTIL(test_redis_int(&srv, "ZCARD hilock:{kf}:fair:q") == 1, 5000);
            cr_assert_eq(test_redis_int(&srv, "ZCARD hilock:{kf}:fair:q"), 1, "the -f waiter never queued");
        } else if (i == 1) {
            WAIT_UNTIL(test_redis_int(&srv, "EXISTS hilock:{kx}:rww") == 1, 5000);
            cr_assert_eq(test_redis_int(&srv, "EXISTS hilock:{kx}:rww"), 1, "the -x waiter left no marker");
        } else {
            WAIT_UNTIL(numsub_of(kinds[i].channel) >= 1, 5000);
            cr_assert_geq(numsub_of(kinds[i].channel), 1, "the -n waiter never subscribed");
        }
        kill(w, SIGTERM);
        cr_assert_eq(cli_wait(w, 5000), 128 + SIGTERM, "%s: the waiter's status", name);
        cr_assert(!file_exists(tmp("ran")), "%s: COMMAND ran", name);
        if (i == 0) {
            cr_assert_eq(test_redis_int(&srv, "ZCARD hilock:{kf}:fair:q"), 0, "a place outlived the -f waiter");
        } else if (i == 1) {
            cr_assert_eq(test_redis_int(&srv, "EXISTS hilock:{kx}:rww"), 0, "the marker outlived the -x waiter");
            cr_assert_eq(RUN("-u", srv.url, "-s", "-w", "0", name, "--", "true"), 0,
                         "a new -s is held off by a -x that is gone");
        } else {
            cr_assert_eq(test_redis_int(&srv, "ZCARD hilock:{kn}:sem"), 1, "the -n waiter took a permit");
        }
        cr_assert_eq(close(open(tmp(go), O_WRONLY | O_CREAT, 0600)), 0);
        cr_assert_eq(cli_wait(h, 5000), 0, "%s: the holder's status", name);
        if (i == 0)
            cr_assert_eq(RUN("-u", srv.url, "-f", "-w", "0", name, "--", "true"), 0,
                         "-f -w 0 is busy behind a waiter that is gone");
        else if (i == 2)
            cr_assert_eq(test_redis_int(&srv, "EXISTS hilock:{kn}:sem"), 0, "permits left behind");
    }
}

/* ---- Bounded waiting: --starve ------------------------------------------- */

/* --starve MS (1 up to the top of its range, also as --starve=MS) and
 * --starve off run COMMAND under the lock. */
Test(cli, starve_option_is_accepted, .timeout = 30) {
    cr_assert_eq(RUN("-u", srv.url, "--starve", "20", "stv", "--", FENCE_TO("a")), 0);
    cr_assert_geq(fence_in("a"), 1, "COMMAND did not run");
    cr_assert_eq(RUN("-u", srv.url, "--starve", "off", "stv", "--", FENCE_TO("b")), 0);
    cr_assert_gt(fence_in("b"), fence_in("a"), "COMMAND did not run with --starve off");
    cr_assert_eq(RUN("-u", srv.url, "--starve=1", "-w", "0", "stv", "--", "true"), 0);
    cr_assert_eq(RUN("-u", srv.url, "--starve", "2147483647", "stv", "--", "true"), 0);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("stv")), 0, "the lock was left behind");
}

/* A wait that has starved far past its --starve threshold behind another
 * hilock gets the lock when that one releases it: woken by the release,
 * not by the end of the 30 s lease. */
Test(cli, starving_wait_gets_the_lock_at_the_release, .timeout = 30) {
    pid_t holder, waiter;
    long long t0, took;

    holder = cli_start("holder", NULL, ARGS("-u", srv.url, "stw", "--", UNTIL_GO("ready", "go")));
    WAIT_UNTIL(file_exists(tmp("ready")), 5000);
    cr_assert(file_exists(tmp("ready")), "the holder did not start");
    waiter = cli_start("waiter", NULL, ARGS("-u", srv.url, "--starve", "20", "-w", "10000", "stw", "--",
                                            FENCE_TO("w")));
    test_msleep(300);
    cr_assert_eq(cli_wait(waiter, 0), -1, "the waiter did not wait for the holder");
    cr_assert(!file_exists(tmp("w")), "COMMAND ran while the lock was held");
    t0 = test_now_ms();
    cr_assert_eq(close(open(tmp("go"), O_WRONLY | O_CREAT, 0600)), 0);
    cr_assert_eq(cli_wait(holder, 5000), 0, "the holder's status");
    cr_assert_eq(cli_wait(waiter, 5000), 0, "the starving waiter's status");
    took = test_now_ms() - t0;
    cr_assert_lt(took, 5000, "the waiter got the lock %lld ms after the release", took);
    cr_assert_geq(fence_in("w"), 1, "the waiter's COMMAND did not run");
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("stw")), 0, "the lock was left behind");
}

/* How many keys NAME has under the default prefix: the lock and its fence,
 * and more once a wait has starved and taken a place in the queue. */
static long long keys_of(const char *name) {
    char pattern[256];
    snprintf(pattern, sizeof(pattern), "hilock:{%s}*", name);
    return test_redis_int(&srv, "EVAL %s 0 %s", "return #redis.call('KEYS', ARGV[1])", pattern);
}

/* The threshold reaches the library, from --starve and $HILOCK_STARVE: a
 * wait behind a holder for 300 ms leaves nothing in Redis with off (it
 * races), and takes a place in the queue with 20 ms. Each run has a name
 * of its own, so that none sees what an earlier one left. */
Test(cli, starve_threshold_reaches_the_library, .timeout = 60) {
    static const struct {
        const char *env, *opt; /* "HILOCK_STARVE=..." or NULL; --starve's MS or NULL */
        int queued;            /* whether the wait is to take a place */
    } runs[] = {
        { NULL, "off", 0 },
        { "HILOCK_STARVE=off", NULL, 0 },
        { "HILOCK_STARVE=off", "20", 1 },
        { NULL, "20", 1 },
        { "HILOCK_STARVE=20", NULL, 1 },
        { "HILOCK_STARVE=20", "off", 0 },
    };
    size_t i;

    for (i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        char name[16], ready[16], go[16];
        long long held;
        pid_t holder, waiter;

        snprintf(name, sizeof(name), "stq%zu", i);
        snprintf(ready, sizeof(ready), "ready%zu", i);
        snprintf(go, sizeof(go), "go%zu", i);
        holder = cli_start("holder", NULL, ARGS("-u", srv.url, name, "--", UNTIL_GO(ready, go)));
        WAIT_UNTIL(file_exists(tmp(ready)), 5000);
        cr_assert(file_exists(tmp(ready)), "run %zu: the holder did not start", i);
        held = keys_of(name);
        if (runs[i].opt != NULL)
            waiter = cli_start("waiter", runs[i].env, ARGS("-u", srv.url, "--starve", runs[i].opt, name, "--",
                                                           "touch", tmp("ran")));
        else
            waiter = cli_start("waiter", runs[i].env, ARGS("-u", srv.url, name, "--", "touch", tmp("ran")));
        if (runs[i].queued) WAIT_UNTIL(keys_of(name) > held, 2000);
        else test_msleep(300);
        cr_assert_eq(keys_of(name) > held, runs[i].queued, "run %zu (%s, --starve %s): %lld keys, %lld held",
                     i, runs[i].env ? runs[i].env : "no env", runs[i].opt ? runs[i].opt : "not given",
                     keys_of(name), held);
        cr_assert_eq(cli_wait(waiter, 0), -1, "run %zu: the waiter did not wait", i);
        kill(waiter, SIGTERM);
        cr_assert_eq(cli_wait(waiter, 5000), 128 + SIGTERM, "run %zu: the waiter's status", i);
        cr_assert_eq(close(open(tmp(go), O_WRONLY | O_CREAT, 0600)), 0);
        cr_assert_eq(cli_wait(holder, 5000), 0, "run %zu: the holder's status", i);
    }
    cr_assert(!file_exists(tmp("ran")), "a waiter ran COMMAND while the lock was held");
}

/* Only the mutex has bounded waiting: --starve with -n, -s, -x or -f, and
 * over Redlock (one master here), is ignored, not a usage error. */
Test(cli, starve_is_ignored_where_it_does_not_apply, .timeout = 30) {
    char redlock[64];

    snprintf(redlock, sizeof(redlock), "redlock://127.0.0.1:%d", srv.port);
    cr_assert_eq(RUN("-u", redlock, "--starve", "20", "stl", "--", FENCE_TO("r")), 0, "over Redlock");
    cr_assert_geq(fence_in("r"), 1, "COMMAND did not run over Redlock");
    cr_assert_eq(RUN("-u", srv.url, "--starve", "20", "-n", "2", "stl", "--", "true"), 0, "with -n");
    cr_assert_eq(RUN("-u", srv.url, "--starve", "20", "-s", "stl", "--", "true"), 0, "with -s");
    cr_assert_eq(RUN("-u", srv.url, "--starve", "off", "-x", "stl", "--", "true"), 0, "with -x");
    cr_assert_eq(RUN("-u", srv.url, "-f", "--starve", "20", "stl", "--", "true"), 0, "with -f");
}

/* A bad MS is refused with the usage status, by a message that names
 * --starve and what it wants, and COMMAND does not run; unlock never
 * waits: --starve is refused there as -w is. */
Test(cli, starve_bad_values_are_refused, .timeout = 30) {
    static const char *const bad[] = { "0", "too small", "x", "not a decimal number", "-5", "negative",
                                       "", "empty", "20x", "not a decimal number", " 20", "not a decimal number",
                                       "2147483648", "too large", "OFF", "not a decimal number", "-1", "negative" };
    bad_values_refused("--starve", bad, sizeof(bad) / sizeof(bad[0]),
                       "hilock: bad --starve MS '%s': %s; want milliseconds, 1 to 2147483647, or off", "stb");
}

/* $HILOCK_STARVE is --starve's default: a good one runs, an empty one is
 * unset, a bad one is a usage error naming it, unless --starve overrides
 * it or the command is unlock, which does not use it. */
Test(cli, starve_default_from_environment, .timeout = 30) {
    char out[2048];

    cr_assert_eq(cli_run_env("HILOCK_STARVE=20", ARGS("-u", srv.url, "ste", "--", FENCE_TO("a"))), 0);
    cr_assert_geq(fence_in("a"), 1, "COMMAND did not run");
    cr_assert_eq(cli_run_env("HILOCK_STARVE=off", ARGS("-u", srv.url, "ste", "--", "true")), 0);
    cr_assert_eq(cli_run_env("HILOCK_STARVE=", ARGS("-u", srv.url, "ste", "--", "true")), 0);

    cr_assert_eq(cli_run_env("HILOCK_STARVE=x", ARGS("-u", srv.url, "ste", "--", "touch", tmp("ran"))), 64);
    cr_assert_str_eq(test_slurp(tmp("out"), out, sizeof(out)),
                     "hilock: bad $HILOCK_STARVE 'x': not a decimal number; want milliseconds, 1 to 2147483647, "
                     "or off\n"
                     "Try 'hilock --help' for more information.\n");
    cr_assert(!file_exists(tmp("ran")), "COMMAND ran with a bad $HILOCK_STARVE");
    cr_assert_eq(cli_run_env("HILOCK_STARVE=0", ARGS("-u", srv.url, "ste", "--", "touch", tmp("ran"))), 64);
    cr_assert(!file_exists(tmp("ran")), "COMMAND ran with $HILOCK_STARVE=0");

    cr_assert_eq(cli_run_env("HILOCK_STARVE=x", ARGS("-u", srv.url, "--starve", "20", "ste", "--",
                                                     "touch", tmp("ran"))), 0, "--starve overrides it");
    cr_assert(file_exists(tmp("ran")));
    hold_key("hilock:", "ste", 10000);
    cr_assert_eq(cli_run_env("HILOCK_STARVE=x", ARGS("-u", srv.url, "unlock", "ste")), 0, "unlock");
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s", key("ste")), 0, "unlock did not remove the lock");
}

/* --help and the man page both say what --starve is, its default, off, and
 * where it does not apply. */
Test(cli, starve_is_documented, .timeout = 30) {
    static const char *const in_help[] = { "[--starve MS]", "  --starve MS    ", "$HILOCK_STARVE",
                                           "else 100", "off:", "Redlock" };
    static const char *const in_man[] = { ".IR MS ]", ".BI \\-\\-starve \" MS\"", "else 100.",
                                          ".B off\n", "ignores it", ".B HILOCK_STARVE\n",
                                          ".BR \\-\\-starve ,\n" };
    const char *man = src_path("man/hilock.1");
    char out[8192], *page, *opt;
    size_t i;

    cr_assert_eq(RUN("--help"), 0);
    test_slurp(tmp("out"), out, sizeof(out));
    for (i = 0; i < sizeof(in_help) / sizeof(in_help[0]); i++)
        cr_expect_not_null(strstr(out, in_help[i]), "--help lacks \"%s\":\n%s", in_help[i], out);
    cr_assert_not_null(man, "no man/hilock.1 above the test binary");
    page = test_slurp_all(man);
    cr_assert_not_null(page);
    opt = strstr(page, ".BI \\-\\-starve \" MS\"");
    cr_expect(opt != NULL && strstr(page, ".SH OPTIONS") < opt && opt < strstr(page, ".SH UNLOCK"),
              "man/hilock.1 has no --starve entry in OPTIONS");
    for (i = 0; i < sizeof(in_man) / sizeof(in_man[0]); i++)
        cr_expect_not_null(strstr(page, in_man[i]), "man/hilock.1 lacks \"%s\"", in_man[i]);
    free(page);
}

/* --help, the man page and docs/cli.md say what --kill-after is, its
 * default, what 0 does, and that COMMAND has a process group of its own. */
Test(cli, kill_after_is_documented, .timeout = 30) {
    static const char *const in_help[] = { "[--kill-after MS]", "  --kill-after MS\n", "(default\n"
                                           "                 5000; 0: SIGKILL at once)",
                                           "COMMAND runs in a process group of its own" };
    static const char *const in_man[] = { ".RB [ \\-\\-kill\\-after\n.IR MS ]", "Default: 5000.",
                                          ".SH PROCESS GROUP\n", ".BR \\-\\-kill\\-after ,\n" };
    static const char *const in_readme[] = { "[--kill-after MS]", "`--kill-after MS`",
                                             "5000; `0` sends SIGKILL at once",
                                             "COMMAND runs in a process group of its own" };
    const char *man = src_path("man/hilock.1"), *readme = src_path("docs/cli.md");
    char out[8192], *page, *whole, *md, *opt;
    size_t i;

    cr_assert_eq(RUN("--help"), 0);
    test_slurp(tmp("out"), out, sizeof(out));
    for (i = 0; i < sizeof(in_help) / sizeof(in_help[0]); i++)
        cr_expect_not_null(strstr(out, in_help[i]), "--help lacks \"%s\":\n%s", in_help[i], out);
    cr_assert(man != NULL && (page = test_slurp_all(man)) != NULL, "no man/hilock.1 above the test binary");
    opt = strstr(page, ".BI \\-\\-kill\\-after \" MS\"");
    cr_expect(opt != NULL && strstr(page, ".SH OPTIONS") < opt && opt < strstr(page, ".SH UNLOCK"),
              "man/hilock.1 has no --kill-after entry in OPTIONS");
    for (i = 0; i < sizeof(in_man) / sizeof(in_man[0]); i++)
        cr_expect_not_null(strstr(page, in_man[i]), "man/hilock.1 lacks \"%s\"", in_man[i]);
    cr_assert(readme != NULL && (whole = test_slurp_all(readme)) != NULL, "no docs/cli.md above the test binary");
    md = strstr(whole, "# The `hilock` command\n");
    cr_assert_not_null(md, "docs/cli.md has no \"# The `hilock` command\" heading");
    for (i = 0; i < sizeof(in_readme) / sizeof(in_readme[0]); i++)
        cr_expect_not_null(strstr(md, in_readme[i]), "docs/cli.md lacks \"%s\"", in_readme[i]);
    free(page);
    free(whole);
}
