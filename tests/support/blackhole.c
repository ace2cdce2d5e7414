/* The blackholing relay (blackhole.h): one child process, poll(2) over the
 * listening socket, the control pipe and every relayed pair. A blackholed
 * pair is no longer polled, read or written, and never closed: its client
 * sees a connection that simply goes quiet. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include "support/blackhole.h"

#define MAX_PAIRS 64

typedef struct pair {
    int down, up;  /* the client's side, the server's side; -1: closed */
    int up_port;   /* the server side's local port */
    int dead;      /* blackholed */
} pair;

static int connect_to(int port, int *local_port) {
    struct sockaddr_in a = {0};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    getsockname(fd, (struct sockaddr *)&a, &len);
    *local_port = ntohs(a.sin_port);
    return fd;
}

/* Copy what `from` has to `to`; 0 when either side closed. */
static int relay(int from, int to) {
    char buf[16384];
    ssize_t n = read(from, buf, sizeof(buf));
    if (n <= 0) return 0;
    for (ssize_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, (size_t)(n - off));
        if (w <= 0) return 0;
        off += w;
    }
    return 1;
}

static void pair_close(pair *p) {
    if (p->down >= 0) close(p->down);
    if (p->up >= 0) close(p->up);
    p->down = p->up = -1;
}

/* A control line: a port to blackhole (0: all). Acknowledged on `ack`. */
static void control(int ctl, int ack, pair *pairs, int n) {
    char line[32];
    ssize_t len = read(ctl, line, sizeof(line) - 1);
    if (len <= 0) _exit(0); /* the test is gone */
    line[len] = '\0';
    int port = atoi(line);
    for (int i = 0; i < n; i++)
        if (pairs[i].down >= 0 && (port == 0 || pairs[i].up_port == port)) pairs[i].dead = 1;
    if (write(ack, "k", 1) != 1) _exit(0);
}

static void run(int lfd, int ctl, int ack, int target) {
    pair pairs[MAX_PAIRS];
    int n = 0;
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        struct pollfd pf[2 + 2 * MAX_PAIRS];
        int who[2 + 2 * MAX_PAIRS], np = 0;
        pf[np] = (struct pollfd){lfd, POLLIN, 0}, who[np++] = -1;
        pf[np] = (struct pollfd){ctl, POLLIN, 0}, who[np++] = -2;
        for (int i = 0; i < n; i++) {
            if (pairs[i].down < 0 || pairs[i].dead) continue;
            pf[np] = (struct pollfd){pairs[i].down, POLLIN, 0}, who[np++] = 2 * i;
            pf[np] = (struct pollfd){pairs[i].up, POLLIN, 0}, who[np++] = 2 * i + 1;
        }
        if (poll(pf, (nfds_t)np, -1) < 0 && errno != EINTR) _exit(1);
        for (int j = 0; j < np; j++) {
            if (pf[j].revents == 0) continue;
            if (who[j] == -2) {
                control(ctl, ack, pairs, n);
            } else if (who[j] == -1) {
                int fd = accept(lfd, NULL, NULL), up_port = 0;
                if (fd < 0) continue;
                int up = n < MAX_PAIRS ? connect_to(target, &up_port) : -1;
                if (up < 0) {
                    close(fd);
                    continue;
                }
                pairs[n++] = (pair){fd, up, up_port, 0};
            } else {
                pair *p = &pairs[who[j] / 2];
                if (p->down < 0 || p->dead) continue;
                int ok = who[j] % 2 ? relay(p->up, p->down) : relay(p->down, p->up);
                if (!ok) pair_close(p);
            }
        }
    }
}

int test_blackhole_start(test_blackhole *b, int target) {
    struct sockaddr_in a = {0};
    socklen_t len = sizeof(a);
    int ctl[2], ack[2];
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 64) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &len) != 0 || pipe(ctl) != 0) {
        if (lfd >= 0) close(lfd);
        return -1;
    }
    if (pipe(ack) != 0) {
        close(lfd), close(ctl[0]), close(ctl[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(ctl[1]);
        close(ack[0]);
        run(lfd, ctl[0], ack[1], target);
        _exit(0);
    }
    close(lfd);
    close(ctl[0]);
    close(ack[1]);
    if (pid < 0) {
        close(ctl[1]), close(ack[0]);
        return -1;
    }
    b->pid = pid;
    b->port = ntohs(a.sin_port);
    b->ctl = ctl[1];
    b->ctl_ack = ack[0];
    snprintf(b->url, sizeof(b->url), "redis://127.0.0.1:%d", b->port);
    return 0;
}

void test_blackhole_drop(test_blackhole *b, int upstream_port) {
    char line[32], k;
    int len = snprintf(line, sizeof(line), "%d\n", upstream_port);
    if (write(b->ctl, line, (size_t)len) == len && read(b->ctl_ack, &k, 1) == 1) return;
}

void test_blackhole_stop(test_blackhole *b) {
    if (b->pid <= 0) return;
    kill(b->pid, SIGKILL);
    waitpid(b->pid, NULL, 0);
    close(b->ctl);
    close(b->ctl_ack);
    b->pid = 0;
}
