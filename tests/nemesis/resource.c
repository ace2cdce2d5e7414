/* The fenced resource: a counter behind a line protocol, in a namespace
 * of its own, which the workers update by read-modify-write while they
 * hold the lock:
 *
 *     R FENCE        -> V VALUE    (or S: a stale fence)
 *     W FENCE VALUE  -> K          (or S)
 *     STATS          -> COUNTER ACCEPTED STALE_READS STALE_WRITES LAST_FENCE
 *
 * A fence is accepted when it is >= the largest one accepted so far, which
 * it then becomes; fence 0 (the workload without fences) is always
 * accepted. The read carries the fence too: a holder whose read came
 * before a newer holder's cannot write the value it read after that newer
 * holder has been seen, which is what makes a read-modify-write safe
 * (with the write alone fenced, an old holder's write that lands before
 * the new holder's first write would still be lost under it).
 *
 * Every accepted write is an increment of a value read under the lock, so
 * with mutual exclusion (or fences) COUNTER == ACCEPTED at the end; each
 * accepted write that COUNTER lacks is a lost update. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>
#include "nemesis/nemesis.h"

#define MAX_CONNS 64

typedef struct conn {
    int fd;
    char buf[256];
    size_t len;
} conn;

static long long counter, accepted, stale_reads, stale_writes, last_fence;

static int fence_ok(long long f) {
    if (f == 0) return 1;
    if (f < last_fence) return 0;
    last_fence = f;
    return 1;
}

/* One request line; the answer into out. */
static void serve(const char *line, char *out, size_t n) {
    long long f, v;
    if (sscanf(line, "R %lld", &f) == 1) {
        if (fence_ok(f)) snprintf(out, n, "V %lld\n", counter);
        else { stale_reads++; snprintf(out, n, "S\n"); }
    } else if (sscanf(line, "W %lld %lld", &f, &v) == 2) {
        if (fence_ok(f)) { counter = v; accepted++; snprintf(out, n, "K\n"); }
        else { stale_writes++; snprintf(out, n, "S\n"); }
    } else if (strncmp(line, "STATS", 5) == 0) {
        snprintf(out, n, "%lld %lld %lld %lld %lld\n", counter, accepted, stale_reads, stale_writes, last_fence);
    } else {
        snprintf(out, n, "E\n");
    }
}

static int listen_tcp(const char *ip, int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 64) != 0) return -1;
    return fd;
}

static int listen_unix(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    unlink(path);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 8) != 0) return -1;
    return fd;
}

static void run(int tcp, int unx) {
    conn c[MAX_CONNS];
    int nc = 0;
    for (;;) {
        struct pollfd p[MAX_CONNS + 2];
        p[0] = (struct pollfd){tcp, POLLIN, 0};
        p[1] = (struct pollfd){unx, POLLIN, 0};
        for (int i = 0; i < nc; i++) p[i + 2] = (struct pollfd){c[i].fd, POLLIN, 0};
        if (poll(p, (nfds_t)nc + 2, -1) < 0) {
            if (errno == EINTR) continue;
            _exit(1);
        }
        for (int l = 0; l < 2; l++) {
            if (!(p[l].revents & POLLIN)) continue;
            int fd = accept(p[l].fd, NULL, NULL);
            if (fd < 0) continue;
            if (nc == MAX_CONNS) { close(fd); continue; }
            int one = 1;
            if (l == 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            c[nc++] = (conn){.fd = fd};
        }
        for (int i = nc - 1; i >= 0; i--) {
            if (!(p[i + 2].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            conn *k = &c[i];
            ssize_t got = read(k->fd, k->buf + k->len, sizeof(k->buf) - 1 - k->len);
            if (got <= 0) {
                close(k->fd);
                c[i] = c[--nc];
                continue;
            }
            k->len += (size_t)got;
            k->buf[k->len] = '\0';
            char *nl;
            while ((nl = strchr(k->buf, '\n')) != NULL) {
                char out[128];
                *nl = '\0';
                serve(k->buf, out, sizeof(out));
                if (write(k->fd, out, strlen(out)) < 0) { /* the peer went: its next read says so */ }
                size_t used = (size_t)(nl + 1 - k->buf);
                memmove(k->buf, nl + 1, k->len - used + 1);
                k->len -= used;
            }
            if (k->len == sizeof(k->buf) - 1) k->len = 0; /* no line that long */
        }
    }
}

pid_t nem_resource_start(const char *ns, const char *ip, int port, const char *sock) {
    pid_t pid = nem_fork_into(ns);
    if (pid != 0) return pid;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, SIG_DFL);
    int tcp = listen_tcp(ip, port), unx = listen_unix(sock);
    if (tcp < 0 || unx < 0) _exit(1);
    run(tcp, unx);
    _exit(0);
}

int nem_resource_stats_get(const char *sock, nem_resource_stats *st) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[256];
    ssize_t n = -1;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && write(fd, "STATS\n", 6) == 6)
        n = read(fd, buf, sizeof(buf) - 1);
    if (fd >= 0) close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    return sscanf(buf, "%lld %lld %lld %lld %lld", &st->counter, &st->accepted, &st->stale_reads,
                  &st->stale_writes, &st->last_fence) == 5
               ? 0
               : -1;
}
