/* A client process of the suite: one hilock client on a libevent loop,
 * inside its own namespace (its own host), with role.slots loops that
 * think, acquire, hold and release, over and over. While it holds, a loop
 * does read-modify-writes on the fenced resource (read, a few ms of
 * "work", write the value + 1) without asking the lock again between its
 * read and its write, as an application does: what fences are for.
 *
 * What the process believes it holds: from the acquire callback to the
 * release call, the lost callback, or the first moment hilock_hold_lost()
 * says 1 (asked every millisecond and before each read-modify-write). The
 * last moment it said 0 ends the hold in the history ("end" records), so
 * a paused process believes nothing while it is stopped.
 *
 * The history: one line per event, appended with write(2) at once (a
 * SIGKILL loses nothing written before it):
 *     T_NS PROC SLOT OP PHASE A B
 *   acq invoke WAIT_MS READER | acq ok FENCE WAITED_MS | acq fail CODE 0
 *                               (READER: 1 for a read lock acquire)
 *   end info LAST_HELD_NS HOW   (HOW: 'r' release, 'l' lost callback,
 *                                'x' hilock_hold_lost() said 1, 's' stop)
 *   lost info WHY 0 | rel invoke 0 0 | rel ok 0 0 | rel fail CODE 0
 *   rd invoke FENCE 0 | rd ok VALUE 0 | rd fail WHY 0   (WHY: 1 stale,
 *   wr invoke FENCE VALUE | wr ok 0 0 | wr fail WHY 0     2 timeout, 3 conn) */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include "hilock/hilock.h"
#include <hilock/adapters/libevent.h>
#include "nemesis/nemesis.h"

#define MAX_SLOTS 8
#define OP_TIMEOUT_MS 1000     /* a resource request not answered by then fails */
#define DRAIN_MS 5000          /* at SIGTERM: time to release and close */
#define COMPUTE_MIN_MS 1
#define COMPUTE_MAX_MS 4

typedef struct wslot {
    struct wproc *p;
    int idx;
    int pending;               /* an acquire is out */
    hilock_hold *hold;         /* granted, not yet released */
    int believed;              /* between the grant and its "end" record */
    uint64_t fence;
    int64_t last_held;         /* the last time hilock_hold_lost() said 0 */
    int64_t hold_until;
    struct event *timer;       /* think, hold */
    struct event *work;        /* the work between a read and its write */
    unsigned long long wfence; /* the fence the read was sent with */
    struct event *op_timer;    /* the resource request's deadline */
    struct bufferevent *bev;   /* the resource connection */
    int op;                    /* 0 none, 'r' read out, 'w' write out */
    int fenced_out;            /* the resource refused this hold's fence */
    int reading;               /* a reader's work after its read: no write */
    long long value;
} wslot;

typedef struct wproc {
    const nem_worker_args *a;
    const nem_role *role;
    struct event_base *base;
    hilock_client *client;
    int hist, logfd;
    unsigned rnd;
    int stopping;
    struct sockaddr_in res;
    wslot slot[MAX_SLOTS];
} wproc;

static wproc P;

static void record(const wslot *s, const char *op, const char *phase, long long a, long long b) {
    char line[160];
    int n = snprintf(line, sizeof(line), "%lld %d %d %s %s %lld %lld\n", (long long)nem_now_ns(), P.a->proc,
                     s ? s->idx : -1, op, phase, a, b);
    if (write(P.hist, line, (size_t)n) < 0) { /* nothing to do: the check will miss it */ }
}

static int rnd_in(int lo, int hi) {
    return hi <= lo ? lo : lo + (int)(rand_r(&P.rnd) % (unsigned)(hi - lo + 1));
}

static void timer_in(struct event *ev, int ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}

static void acquire(wslot *s);
static void rmw_next(wslot *s);

/* ---- The end of a hold ------------------------------------------------------ */

/* The process stops believing it holds: once per grant. */
static void end_belief(wslot *s, char how) {
    if (!s->believed) return;
    s->believed = 0;
    nem_sh->holding[P.a->proc]--;
    record(s, "end", "info", s->last_held, how);
}

/* Is the hold still live? Says so in last_held, or ends the belief. */
static int still_held(wslot *s) {
    if (!s->believed) return 0;
    if (hilock_hold_lost(s->hold)) {
        end_belief(s, 'x');
        return 0;
    }
    s->last_held = nem_now_ns();
    return 1;
}

static void think(wslot *s) {
    if (P.stopping) return;
    timer_in(s->timer, rnd_in(P.role->think_min, P.role->think_max));
}

static void released(int status, void *data) {
    wslot *s = data;
    record(s, "rel", status == 0 ? "ok" : "fail", status, 0);
    think(s);
}

static void release(wslot *s) {
    if (s->hold == NULL) return;
    if (still_held(s)) end_belief(s, P.stopping ? 's' : 'r');
    else end_belief(s, 'x');
    hilock_hold *h = s->hold;
    s->hold = NULL;
    evtimer_del(s->timer);
    record(s, "rel", "invoke", 0, 0);
    int rc = hilock_release(h, released, s);
    if (rc != 0) {
        record(s, "rel", "fail", rc, 0);
        think(s);
    }
}

static void lost_cb(hilock_hold *h, int why, void *data) {
    wslot *s = data;
    (void)h;
    record(s, "lost", "info", why, 0);
    end_belief(s, 'l');
}

/* ---- The resource ----------------------------------------------------------- */

static void drop_conn(wslot *s) {
    if (s->bev) bufferevent_free(s->bev);
    s->bev = NULL;
    evtimer_del(s->op_timer);
}

static void op_failed(wslot *s, int why) {
    char op = (char)s->op;
    s->op = 0;
    drop_conn(s);
    record(s, op == 'r' ? "rd" : "wr", "fail", why, 0);
    rmw_next(s);
}

static void on_reply(wslot *s, const char *line) {
    char op = (char)s->op;
    evtimer_del(s->op_timer);
    s->op = 0;
    if (line[0] == 'S') {
        /* Fenced out: a newer holder has been seen. The application
         * stops using the resource, but the hold's belief is hilock's
         * (what is measured): it ends at the release, when its time is
         * up, or when hilock says it is lost. */
        record(s, op == 'r' ? "rd" : "wr", "fail", 1, 0);
        if (s->hold) {
            s->fenced_out = 1;
            int64_t left = (s->hold_until - nem_now_ns()) / 1000000;
            timer_in(s->timer, left > 0 ? (int)left : 0);
        }
    } else if (op == 'r' && line[0] == 'V') {
        s->value = atoll(line + 2);
        record(s, "rd", "ok", s->value, 0);
        timer_in(s->work, rnd_in(COMPUTE_MIN_MS, COMPUTE_MAX_MS));
        s->reading = P.role->reader;
    } else if (op == 'w' && line[0] == 'K') {
        record(s, "wr", "ok", 0, 0);
        rmw_next(s);
    } else {
        s->op = op;
        op_failed(s, 3);
    }
}

static void bev_read(struct bufferevent *bev, void *arg) {
    wslot *s = arg;
    size_t n;
    char *line;
    while (s->bev == bev && (line = evbuffer_readln(bufferevent_get_input(bev), &n, EVBUFFER_EOL_LF)) != NULL) {
        if (s->op) on_reply(s, line);
        free(line);
    }
}

static void bev_event(struct bufferevent *bev, short what, void *arg) {
    wslot *s = arg;
    (void)bev;
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_EOF)) {
        if (s->op) op_failed(s, 3);
        else drop_conn(s);
    }
}

static void op_timeout(evutil_socket_t fd, short what, void *arg) {
    wslot *s = arg;
    (void)fd; (void)what;
    if (s->op) op_failed(s, 2);
}

static int send_op(wslot *s, int op, const char *text) {
    if (s->bev == NULL) {
        s->bev = bufferevent_socket_new(P.base, -1, BEV_OPT_CLOSE_ON_FREE);
        if (s->bev == NULL) return -1;
        bufferevent_setcb(s->bev, bev_read, NULL, bev_event, s);
        bufferevent_enable(s->bev, EV_READ | EV_WRITE);
        if (bufferevent_socket_connect(s->bev, (struct sockaddr *)&P.res, sizeof(P.res)) != 0) {
            drop_conn(s);
            return -1;
        }
    }
    s->op = op;
    timer_in(s->op_timer, OP_TIMEOUT_MS);
    bufferevent_write(s->bev, text, strlen(text));
    return 0;
}

/* The next read-modify-write, or the release when the hold's time is up. */
static void rmw_next(wslot *s) {
    if (s->hold == NULL) return;
    if (P.stopping || !still_held(s) || nem_now_ns() >= s->hold_until) {
        release(s);
        return;
    }
    char text[64];
    unsigned long long f = P.a->wl->fenced ? s->fence : 0;
    snprintf(text, sizeof(text), "R %llu\n", f);
    s->wfence = f;
    record(s, "rd", "invoke", (long long)f, 0);
    if (send_op(s, 'r', text) != 0) op_failed(s, 3);
}

/* ---- Acquire ------------------------------------------------------------------ */

static void acquired(hilock_hold *h, int status, void *data) {
    wslot *s = data;
    s->pending = 0;
    nem_sh->waiting[P.a->proc]--;
    if (status != 0) {
        record(s, "acq", "fail", status, 0);
        think(s);
        return;
    }
    s->hold = h;
    s->fence = hilock_hold_fence(h);
    s->believed = 1;
    s->fenced_out = 0;
    s->last_held = nem_now_ns();
    nem_sh->holding[P.a->proc]++;
    nem_sh->grants[P.a->proc]++;
    record(s, "acq", "ok", (long long)s->fence, (long long)hilock_hold_waited_ms(h));
    s->hold_until = s->last_held + (int64_t)rnd_in(P.role->hold_min, P.role->hold_max) * 1000000;
    if (P.stopping) release(s);
    else if (P.a->wl->rmw) rmw_next(s);
    else timer_in(s->timer, rnd_in(P.role->hold_min, P.role->hold_max));
}

static void acquire(wslot *s) {
    if (P.stopping) return;
    const nem_workload *wl = P.a->wl;
    hilock_acquire_opts o;
    hilock_acquire_opts_init(&o);
    o.wait_ms = P.role->wait_ms;
    o.lease_ms = wl->lease_ms;
    o.lost_cb = lost_cb;
    o.lost_data = s;
    record(s, "acq", "invoke", (long long)o.wait_ms, P.role->reader);
    s->pending = 1;
    nem_sh->waiting[P.a->proc]++;
    int rc;
    switch (wl->prim) {
    case PRIM_SEM:
        rc = hilock_semaphore_acquire(P.client, NEM_LOCK, (unsigned)wl->permits, 1, &o, acquired, s, NULL);
        break;
    case PRIM_FAIR: rc = hilock_fair_acquire(P.client, NEM_LOCK, &o, acquired, s, NULL); break;
    case PRIM_RW:
        rc = P.role->reader ? hilock_read_acquire(P.client, NEM_LOCK, &o, acquired, s, NULL)
                            : hilock_write_acquire(P.client, NEM_LOCK, &o, acquired, s, NULL);
        break;
    default: rc = hilock_acquire(P.client, NEM_LOCK, &o, acquired, s, NULL); break;
    }
    if (rc != 0) {
        s->pending = 0;
        nem_sh->waiting[P.a->proc]--;
        record(s, "acq", "fail", rc, 0);
        think(s);
    }
}

/* The slot's timer: after thinking, acquire; at the end of a hold without
 * the resource, release. */
static void on_timer(evutil_socket_t fd, short what, void *arg) {
    wslot *s = arg;
    (void)fd; (void)what;
    if (s->hold == NULL) {
        if (!s->pending) acquire(s);
        return;
    }
    release(s);
}

/* The work is done: write what was read + 1, without asking the lock again
 * (an application that checked it before its read); a process stopped
 * during the work writes when it runs again, whatever happened meanwhile.
 * A reader (the read lock) writes nothing: it reads again. */
static void on_work(evutil_socket_t fd, short what, void *arg) {
    wslot *s = arg;
    (void)fd; (void)what;
    if (s->reading) {
        s->reading = 0;
        rmw_next(s);
        return;
    }
    char text[64];
    snprintf(text, sizeof(text), "W %llu %lld\n", s->wfence, s->value + 1);
    record(s, "wr", "invoke", (long long)s->wfence, s->value + 1);
    if (send_op(s, 'w', text) != 0) op_failed(s, 3);
}

/* Every millisecond: the holds whose lease ran out end their belief. */
static void on_poll(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    for (int i = 0; i < P.role->slots; i++) {
        wslot *s = &P.slot[i];
        if (s->hold && s->believed && !still_held(s) && s->op == 0 && !evtimer_pending(s->work, NULL)) release(s);
    }
}

/* ---- Start and stop ------------------------------------------------------------- */

static void closed(void *data) {
    (void)data;
    event_base_loopexit(P.base, NULL);
}

static void on_term(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    if (P.stopping) return;
    P.stopping = 1;
    for (int i = 0; i < P.role->slots; i++) {
        wslot *s = &P.slot[i];
        evtimer_del(s->timer);
        if (s->hold) release(s);
    }
    hilock_client_close(P.client, closed, NULL);
    struct timeval tv = {DRAIN_MS / 1000, 0};
    event_base_loopexit(P.base, &tv);
}

static void on_log(int level, const char *msg, void *data) {
    char line[512];
    (void)data;
    int n = snprintf(line, sizeof(line), "%lld %d %s\n", (long long)nem_now_ns(), level, msg);
    if (n > (int)sizeof(line) - 1) n = (int)sizeof(line) - 1;
    if (write(P.logfd, line, (size_t)n) < 0) { /* best effort */ }
}

static void worker_main(const nem_worker_args *a) {
    memset(&P, 0, sizeof(P));
    P.a = a;
    P.role = &a->wl->role[a->proc];
    P.rnd = (unsigned)(nem_now_ns() ^ (a->proc * 7919));
    P.hist = open(a->history, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    P.logfd = open(a->log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (P.hist < 0 || P.logfd < 0) _exit(2);
    char ip[32];
    int port = 0;
    if (sscanf(a->resource, "%31[^:]:%d", ip, &port) == 2) {
        P.res.sin_family = AF_INET;
        P.res.sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, ip, &P.res.sin_addr);
    }
    P.base = event_base_new();
    hilock_loop loop;
    hilock_libevent_init(&loop, P.base);
    hilock_config cfg;
    hilock_config_init(&cfg);
    cfg.url = a->url;
    cfg.default_lease_ms = a->wl->lease_ms;
    cfg.log_cb = on_log;
    if (a->wl->starve_never) cfg.starve_ms = HILOCK_STARVE_NEVER;
    int rc = hilock_client_new(&P.client, &cfg, &loop);
    if (rc != 0) {
        on_log(0, hilock_strerror(rc), NULL);
        _exit(3);
    }
    struct event *term = evsignal_new(P.base, SIGTERM, on_term, NULL);
    evsignal_add(term, NULL);
    struct event *poll = event_new(P.base, -1, EV_PERSIST, on_poll, NULL);
    struct timeval ms1 = {0, 1000};
    evtimer_add(poll, &ms1);
    for (int i = 0; i < P.role->slots && i < MAX_SLOTS; i++) {
        wslot *s = &P.slot[i];
        s->p = &P;
        s->idx = i;
        s->timer = evtimer_new(P.base, on_timer, s);
        s->work = evtimer_new(P.base, on_work, s);
        s->op_timer = evtimer_new(P.base, op_timeout, s);
        timer_in(s->timer, rnd_in(0, 50));
    }
    event_base_dispatch(P.base);
    /* Drained (or out of time): what was still believed ends now. */
    for (int i = 0; i < P.role->slots; i++) end_belief(&P.slot[i], 's');
    _exit(0);
}

pid_t nem_worker_start(const nem_worker_args *a) {
    pid_t pid = nem_fork_into(a->ns);
    if (pid != 0) return pid;
    signal(SIGINT, SIG_IGN); /* the controller stops us by SIGTERM */
    worker_main(a);
    _exit(0);
}
