/* Redis servers and sentinels inside the suite's namespaces. Each runs as
 * `ip netns exec NS [env LD_PRELOAD=libskewclock.so ...] redis-server ...`
 * (ip and env exec in turn, so the pid we get is the server's), listens on
 * its host's address for the clients and on a unix socket in its dir for
 * the controller: commands of the controller never cross a fault. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/harness.h"
#include "nemesis/nemesis.h"

#define START_WAIT_MS 8000

extern char nem_skewclock_path[256];

static const char *redis_bin(void) { return test_server_bin(); }

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f == NULL) return -1;
    fputs(text, f);
    return fclose(f);
}

/* A sentinel's config: it rewrites the file, so it must be its own; its
 * own lines (sentinel monitor ...) are s->extra, one a line. */
static int sentinel_conf(const nem_server *s, const char *path) {
    char text[2048];
    snprintf(text, sizeof(text),
             "port %d\nbind %s\nprotected-mode no\ndaemonize no\ndir %s\nlogfile %s/redis.log\n"
             "unixsocket %s\nunixsocketperm 700\n%s\n",
             s->port, s->host->ip, s->dir, s->dir, s->sock, s->extra);
    return write_file(path, text);
}

static pid_t spawn(nem_server *s) {
    const char *argv[96];
    char port[16], logfile[260], conf[260], preload[300], skewfile[300];
    char extra[sizeof(s->extra)];
    int a = 0;
    snprintf(port, sizeof(port), "%d", s->port);
    snprintf(logfile, sizeof(logfile), "%s/redis.log", s->dir);
    argv[a++] = "ip"; argv[a++] = "netns"; argv[a++] = "exec"; argv[a++] = s->host->ns;
    if (s->skew) {
        snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", nem_skewclock_path);
        snprintf(skewfile, sizeof(skewfile), "SKEWCLOCK_FILE=%s", s->clock);
        argv[a++] = "env"; argv[a++] = preload; argv[a++] = skewfile;
    }
    argv[a++] = redis_bin();
    if (s->kind == SRV_SENTINEL) {
        snprintf(conf, sizeof(conf), "%s/sentinel.conf", s->dir);
        if (sentinel_conf(s, conf) != 0) return -1;
        argv[a++] = conf;
        argv[a++] = "--sentinel";
    } else {
        argv[a++] = "--port"; argv[a++] = port;
        argv[a++] = "--bind"; argv[a++] = s->host->ip;
        argv[a++] = "--protected-mode"; argv[a++] = "no";
        argv[a++] = "--save"; argv[a++] = "";
        argv[a++] = "--appendonly"; argv[a++] = "no";
        argv[a++] = "--dir"; argv[a++] = s->dir;
        argv[a++] = "--logfile"; argv[a++] = logfile;
        argv[a++] = "--unixsocket"; argv[a++] = s->sock;
        argv[a++] = "--unixsocketperm"; argv[a++] = "700";
        argv[a++] = "--enable-debug-command"; argv[a++] = "yes";
        argv[a++] = "--daemonize"; argv[a++] = "no";
        snprintf(extra, sizeof(extra), "%s", s->extra);
        for (char *save = NULL, *w = strtok_r(extra, " ", &save); w && a < 94; w = strtok_r(NULL, " ", &save))
            argv[a++] = w;
    }
    argv[a] = NULL;
    char out[260];
    snprintf(out, sizeof(out), "%s/stdout.log", s->dir);
    return test_spawn_server(argv, out, s->dir);
}

static int answers(const nem_server *s) {
    redisReply *rep = nem_cmd(s, "PING");
    int ok = rep && (rep->type == REDIS_REPLY_STATUS ||
                     (rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "LOADING", 7) != 0));
    if (rep) freeReplyObject(rep);
    return ok;
}

int nem_server_start(nem_server *s) {
    snprintf(s->sock, sizeof(s->sock), "%s/redis.sock", s->dir);
    snprintf(s->clock, sizeof(s->clock), "%s/clock", s->dir);
    if (s->skew && write_file(s->clock, "0 0\n") != 0) return -1;
    s->stopped = 0;
    s->pid = spawn(s);
    if (s->pid < 0) { s->pid = 0; return -1; }
    long long until = test_now_ms() + START_WAIT_MS;
    while (!answers(s)) {
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid || test_now_ms() > until) {
            fprintf(stderr, "hilock-nemesis: %s on %s:%d did not start (see %s)\n",
                    s->kind == SRV_SENTINEL ? "sentinel" : "redis-server", s->host->ip, s->port, s->dir);
            nem_server_kill(s);
            return -1;
        }
        test_msleep(10);
    }
    return 0;
}

void nem_server_kill(nem_server *s) {
    if (s->pid <= 0) return;
    kill(s->pid, SIGKILL);
    kill(s->pid, SIGCONT);
    while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {}
    s->pid = 0;
    s->stopped = 0;
}

int nem_server_restart(nem_server *s) {
    nem_server_kill(s);
    char path[260];
    snprintf(path, sizeof(path), "%s/dump.rdb", s->dir);
    unlink(path);
    return nem_server_start(s);
}

static redisReply *vcmd(const nem_server *s, const char *fmt, va_list ap) {
    if (s->pid <= 0) return NULL;
    struct timeval tv = {2, 0};
    redisContext *k = redisConnectUnixWithTimeout(s->sock, tv);
    if (k == NULL) return NULL;
    if (k->err) { redisFree(k); return NULL; }
    redisSetTimeout(k, tv);
    redisReply *rep = redisvCommand(k, fmt, ap);
    redisFree(k);
    return rep;
}

redisReply *nem_cmd(const nem_server *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = vcmd(s, fmt, ap);
    va_end(ap);
    return rep;
}

int nem_cmd_ok(const nem_server *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = vcmd(s, fmt, ap);
    va_end(ap);
    int ok = rep && rep->type != REDIS_REPLY_ERROR;
    if (rep) freeReplyObject(rep);
    return ok ? 0 : -1;
}

pid_t nem_monitor_start(const nem_server *s, const char *path) {
    pid_t pid = nem_fork_into(NULL);
    if (pid != 0) return pid;
    signal(SIGINT, SIG_DFL);
    FILE *f = fopen(path, "a");
    redisContext *k = redisConnectUnix(s->sock);
    if (f == NULL || k == NULL || k->err) _exit(1);
    redisReply *rep = redisCommand(k, "MONITOR");
    if (rep == NULL) _exit(1);
    freeReplyObject(rep);
    void *r;
    while (redisGetReply(k, &r) == REDIS_OK) {
        rep = r;
        if (rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_STRING)
            fprintf(f, "%lld %s\n", (long long)nem_now_ns(), rep->str);
        fflush(f);
        freeReplyObject(rep);
    }
    _exit(0);
}

int nem_clock_set(nem_server *s, long ppm, long long offset_ms) {
    char text[64];
    snprintf(text, sizeof(text), "%ld %lld\n", ppm, offset_ms);
    char tmp[260];
    snprintf(tmp, sizeof(tmp), "%s.tmp", s->clock);
    if (write_file(tmp, text) != 0) return -1;
    return rename(tmp, s->clock);
}
