/* The link proxy: a userspace TCP relay on a host of its own, between
 * clients and a Redis server, for what the kernel cannot do here (no
 * sch_netem): delay with jitter.
 *
 * It accepts on its host's address and port and connects each accepted
 * connection to the target (the server). Each direction is a byte stream
 * cut into chunks of 1 to chunk_max bytes (what one read gave, cut again at
 * random), each chunk delivered at its own time: when it was read plus
 * delay_ms plus a uniform jitter in [-jitter_ms, +jitter_ms]. A chunk is
 * never delivered before the one before it (a TCP reader sees bytes in
 * order): a chunk whose own time comes first waits for its predecessor, as
 * a segment that overtook another waits in the receiver's queue. The
 * parameters (nem_sh->link[]) are read at every chunk, so the controller
 * turns the delay on and off while connections live.
 *
 * What reaches the application is what a delayed, jittered, reordered,
 * duplicated or lossy path gives a TCP reader: the same bytes, in order,
 * late by a varying amount, in pieces of any size, with stalls (a late
 * segment holds back those behind it) and bursts (they all arrive at
 * once). Not modelled: duplicate or reordered bytes themselves (TCP
 * discards and reorders them before the reader), the sender's congestion
 * window and retransmission timers (a stall here costs no more than its
 * delay, where a lost segment costs a retransmission timeout), and the
 * loss of a connection's packets (iptables does that). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>
#include "nemesis/nemesis.h"

#define MAX_PAIRS 64
#define READ_MAX 16384

typedef struct chunk {
    struct chunk *next;
    int64_t due;               /* CLOCK_MONOTONIC ns */
    size_t len, off;
    char data[];
} chunk;

/* One direction of a relayed connection: from fd `from` to fd `to`. */
typedef struct flow {
    int from, to;
    chunk *head, *tail;
    int64_t last_due;
    int eof;                   /* `from` said EOF: shut `to` down once drained */
    int shut;
} flow;

typedef struct pair {
    int used;
    int a, b;                  /* a: the client side, b: the server side */
    flow up, down;             /* up: a -> b, down: b -> a */
} pair;

static pair pairs[MAX_PAIRS];
static unsigned rnd;
static int link_no;

static int64_t jitter_ns(void) {
    const volatile nem_link *l = &nem_sh->link[link_no];
    int delay = l->delay_ms, jitter = l->jitter_ms;
    if (delay <= 0 && jitter <= 0) return 0;
    int j = jitter > 0 ? (int)(rand_r(&rnd) % (unsigned)(2 * jitter + 1)) - jitter : 0;
    int64_t ms = delay + j;
    return ms > 0 ? ms * 1000000LL : 0;
}

static void push(flow *f, const char *data, size_t len, int64_t now) {
    int max = nem_sh->link[link_no].chunk_max;
    while (len > 0) {
        size_t n = len;
        if (max > 0) {
            size_t cut = 1 + (size_t)(rand_r(&rnd) % (unsigned)max);
            if (cut < n) n = cut;
        }
        chunk *c = malloc(sizeof(*c) + n);
        if (c == NULL) _exit(3);
        c->next = NULL;
        c->len = n;
        c->off = 0;
        memcpy(c->data, data, n);
        c->due = now + jitter_ns();
        if (c->due < f->last_due) c->due = f->last_due;
        f->last_due = c->due;
        if (f->tail) f->tail->next = c;
        else f->head = c;
        f->tail = c;
        data += n;
        len -= n;
    }
}

static void drop_chunks(flow *f) {
    while (f->head) {
        chunk *c = f->head;
        f->head = c->next;
        free(c);
    }
    f->tail = NULL;
}

static void close_pair(pair *p) {
    close(p->a);
    close(p->b);
    drop_chunks(&p->up);
    drop_chunks(&p->down);
    p->used = 0;
}

/* Deliver what is due; -1 when the connection broke. */
static int deliver(flow *f, int64_t now) {
    while (f->head && f->head->due <= now) {
        chunk *c = f->head;
        ssize_t w = write(f->to, c->data + c->off, c->len - c->off);
        if (w < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        c->off += (size_t)w;
        if (c->off < c->len) return 0;
        f->head = c->next;
        if (f->head == NULL) f->tail = NULL;
        free(c);
    }
    if (f->eof && f->head == NULL && !f->shut) {
        shutdown(f->to, SHUT_WR);
        f->shut = 1;
    }
    return 0;
}

static void nonblock(int fd) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void accept_one(int lfd, const struct sockaddr_in *target) {
    int a = accept(lfd, NULL, NULL);
    if (a < 0) return;
    int slot = -1;
    for (int i = 0; i < MAX_PAIRS && slot < 0; i++)
        if (!pairs[i].used) slot = i;
    int b = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {2, 0};
    if (b >= 0) setsockopt(b, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (slot < 0 || b < 0 || connect(b, (const struct sockaddr *)target, sizeof(*target)) != 0) {
        close(a);
        if (b >= 0) close(b);
        return;
    }
    nonblock(a);
    nonblock(b);
    pair *p = &pairs[slot];
    memset(p, 0, sizeof(*p));
    p->used = 1;
    p->a = a;
    p->b = b;
    p->up = (flow){.from = a, .to = b};
    p->down = (flow){.from = b, .to = a};
}

static void run(int lfd, const struct sockaddr_in *target) {
    static char buf[READ_MAX];
    for (;;) {
        struct pollfd pf[1 + 2 * MAX_PAIRS];
        int map[1 + 2 * MAX_PAIRS];
        int n = 0;
        int64_t now = nem_now_ns(), next = INT64_MAX;
        pf[n++] = (struct pollfd){lfd, POLLIN, 0};
        for (int i = 0; i < MAX_PAIRS; i++) {
            pair *p = &pairs[i];
            if (!p->used) continue;
            flow *fl[2] = {&p->up, &p->down};
            for (int k = 0; k < 2; k++) {
                flow *f = fl[k];
                short ev = f->eof ? 0 : POLLIN;
                /* the other side of this fd is written when a chunk waits */
                flow *o = fl[1 - k];
                if (o->head && o->head->due <= now) ev |= POLLOUT;
                else if (o->head && o->head->due < next) next = o->head->due;
                map[n] = i * 2 + k;
                pf[n++] = (struct pollfd){f->from, ev, 0};
            }
        }
        int timeout = next == INT64_MAX ? 100 : (int)((next - now + 999999) / 1000000);
        if (timeout > 100) timeout = 100;
        if (poll(pf, (nfds_t)n, timeout) < 0 && errno != EINTR) _exit(1);
        if (pf[0].revents & POLLIN) accept_one(lfd, target);
        now = nem_now_ns();
        for (int j = 1; j < n; j++) {
            pair *p = &pairs[map[j] / 2];
            if (!p->used) continue;
            flow *f = map[j] % 2 == 0 ? &p->up : &p->down;
            if (pf[j].revents & (POLLIN | POLLHUP | POLLERR)) {
                ssize_t got = read(f->from, buf, sizeof(buf));
                if (got > 0) push(f, buf, (size_t)got, now);
                else if (got == 0) f->eof = 1;
                else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                    close_pair(p);
                    continue;
                }
            }
        }
        now = nem_now_ns();
        for (int i = 0; i < MAX_PAIRS; i++) {
            pair *p = &pairs[i];
            if (!p->used) continue;
            if (deliver(&p->up, now) != 0 || deliver(&p->down, now) != 0 || (p->up.shut && p->down.shut))
                close_pair(p);
        }
    }
}

pid_t nem_proxy_start(const char *ns, const char *ip, int port, const char *to_ip, int to_port, int link) {
    pid_t pid = nem_fork_into(ns);
    if (pid != 0) return pid;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, SIG_DFL);
    link_no = link;
    rnd = (unsigned)(nem_now_ns() ^ (link * 7919));
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a, t;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    memset(&t, 0, sizeof(t));
    t.sin_family = AF_INET;
    t.sin_port = htons((uint16_t)to_port);
    inet_pton(AF_INET, to_ip, &t.sin_addr);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 64) != 0) _exit(1);
    run(lfd, &t);
    _exit(0);
}
