/* hilock-stress: several processes, thousands of waiters, random faults for
 * a bounded time, then a report. Not part of `make test`; run `make stress`.
 *
 *   hilock-stress [-s SECONDS] [-p PROCS] [-w WAITERS] [-n NAMES]
 *
 * The server runs with appendfsync always, so a restart keeps the locks and
 * fence counters and every invariant must still hold across it:
 *   - no two holders of a name at once (a shared "inside" flag per name),
 *   - fencing tokens strictly increasing per name, as a resource sees them,
 *   - every acquire request ends with exactly one callback.
 * Errors (a request that met a dead connection) are allowed and counted by
 * cause; violations are not. Exit status 0 only with zero violations. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "hilock/hilock.h"
#include <hilock/adapters/libevent.h>
#include "support/harness.h"

#define MAX_NAMES 64
#define NCODES 20

typedef struct shared {
    volatile int inside[MAX_NAMES];
    volatile unsigned long long last_fence[MAX_NAMES];
    volatile long acquisitions, overlaps, regressions, double_callbacks, lost;
    volatile long errors[NCODES];   /* by -code */
    volatile int stop;              /* workers stop issuing new requests */
} shared;

static shared *sh;
static int names = 8, per_proc = 1000;

/* ---- Worker process ------------------------------------------------------ */

typedef struct slot {
    struct worker *w;
    int name;
    int pending;
    hilock_hold *hold;
    struct event *hold_timer;
} slot;

typedef struct worker {
    hilock_client *client;
    struct event_base *base;
    slot *slots;
    long issued, ended;
    unsigned rnd;
} worker;

static void issue(slot *s);

static void lost_cb(hilock_hold *h, int why, void *data) {
    slot *s = data;
    (void)h; (void)why;
    __atomic_add_fetch(&sh->lost, 1, __ATOMIC_SEQ_CST);
    sh->inside[s->name] = 0; /* no longer ours: say so before another takes it */
}

static void released(int status, void *data) {
    slot *s = data;
    (void)status;
    if (!sh->stop) issue(s);
}

static void end_hold(evutil_socket_t fd, short what, void *arg) {
    slot *s = arg;
    (void)fd; (void)what;
    if (!hilock_hold_lost(s->hold)) sh->inside[s->name] = 0;
    hilock_release(s->hold, released, s);
}

static void acquired(hilock_hold *h, int status, void *data) {
    slot *s = data;
    worker *w = s->w;
    if (!s->pending) __atomic_add_fetch(&sh->double_callbacks, 1, __ATOMIC_SEQ_CST);
    s->pending = 0;
    w->ended++;
    if (status != 0) {
        int code = -status < NCODES ? -status : 0;
        __atomic_add_fetch(&sh->errors[code], 1, __ATOMIC_SEQ_CST);
        if (!sh->stop) issue(s);
        return;
    }
    __atomic_add_fetch(&sh->acquisitions, 1, __ATOMIC_SEQ_CST);
    if (__atomic_exchange_n(&sh->inside[s->name], 1, __ATOMIC_SEQ_CST))
        __atomic_add_fetch(&sh->overlaps, 1, __ATOMIC_SEQ_CST);
    unsigned long long f = hilock_hold_fence(h);
    if (f <= sh->last_fence[s->name]) __atomic_add_fetch(&sh->regressions, 1, __ATOMIC_SEQ_CST);
    sh->last_fence[s->name] = f;
    s->hold = h;
    struct timeval tv = {0, (long)(rand_r(&w->rnd) % 2000)}; /* hold 0-2 ms */
    evtimer_add(s->hold_timer, &tv);
}

static void issue(slot *s) {
    worker *w = s->w;
    hilock_acquire_opts o;
    char name[32];
    hilock_acquire_opts_init(&o);
    o.lease_ms = 3000;
    o.lost_cb = lost_cb;
    o.lost_data = s;
    s->name = (int)(rand_r(&w->rnd) % (unsigned)names);
    snprintf(name, sizeof(name), "stress-%d", s->name);
    s->pending = 1;
    w->issued++;
    if (hilock_acquire(w->client, name, &o, acquired, s, NULL) != 0) {
        s->pending = 0;
        w->ended++;
        __atomic_add_fetch(&sh->errors[0], 1, __ATOMIC_SEQ_CST);
    }
}

static void stop_check(evutil_socket_t fd, short what, void *arg) {
    worker *w = arg;
    (void)fd; (void)what;
    if (sh->stop && w->ended == w->issued) event_base_loopbreak(w->base);
}

static int run_worker(const char *url, unsigned seed) {
    worker w;
    memset(&w, 0, sizeof(w));
    w.rnd = seed;
    w.base = event_base_new_with_config(NULL);
    hilock_loop loop;
    hilock_libevent_init(&loop, w.base);
    hilock_config cfg;
    hilock_config_init(&cfg);
    cfg.url = url;
    cfg.request_timeout_ms = 1500;
    cfg.reconnect_max_ms = 200;
    if (hilock_client_new(&w.client, &cfg, &loop) != 0) return 2;
    w.slots = calloc((size_t)per_proc, sizeof(slot));
    for (int i = 0; i < per_proc; i++) {
        w.slots[i].w = &w;
        w.slots[i].hold_timer = evtimer_new(w.base, end_hold, &w.slots[i]);
        issue(&w.slots[i]);
    }
    struct event *tick = event_new(w.base, -1, EV_PERSIST, stop_check, &w);
    struct timeval tv = {0, 20000};
    evtimer_add(tick, &tv);
    event_base_dispatch(w.base);
    /* Let the last releases reach Redis before the client goes. */
    hilock_client_close(w.client, NULL, NULL);
    event_base_dispatch(w.base);
    event_free(tick);
    for (int i = 0; i < per_proc; i++) event_free(w.slots[i].hold_timer);
    free(w.slots);
    event_base_free(w.base);
    return w.ended == w.issued ? 0 : 3;
}

/* ---- The fault injector (parent) ----------------------------------------- */

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int start_server(test_redis *r, int port, const char *dir) {
    return test_redis_start(r, port, "--dir", dir, "--appendonly", "yes", "--appendfsync",
                            "always", "--enable-debug-command", "yes", NULL);
}

int main(int argc, char **argv) {
    int seconds = 60, procs = 4, opt;
    while ((opt = getopt(argc, argv, "s:p:w:n:h")) != -1) {
        switch (opt) {
        case 's': seconds = atoi(optarg); break;
        case 'p': procs = atoi(optarg); break;
        case 'w': per_proc = atoi(optarg); break;
        case 'n': names = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-s SECONDS<=120] [-p PROCS] [-w WAITERS/PROC] [-n NAMES<=%d]\n",
                    argv[0], MAX_NAMES);
            return 64;
        }
    }
    if (seconds < 1 || seconds > 120 || procs < 1 || procs > 32 || per_proc < 1 ||
        names < 1 || names > MAX_NAMES) {
        fprintf(stderr, "hilock-stress: out of range (seconds 1..120, procs 1..32, names 1..%d)\n",
                MAX_NAMES);
        return 64;
    }
    char dir[] = "/tmp/hilock-stress-XXXXXX";
    if (mkdtemp(dir) == NULL) { perror("mkdtemp"); return 1; }
    test_redis r;
    if (start_server(&r, 0, dir) != 0) { fprintf(stderr, "cannot start redis-server\n"); return 1; }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset((void *)sh, 0, sizeof(*sh));
    printf("hilock-stress: %d processes x %d waiters on %d names, %d s of faults, redis on port %d\n",
           procs, per_proc, names, seconds, r.port);
    fflush(stdout);

    pid_t *kids = calloc((size_t)procs, sizeof(pid_t));
    for (int p = 0; p < procs; p++) {
        kids[p] = fork();
        if (kids[p] == 0) _exit(run_worker(r.url, (unsigned)(p * 7919 + 1)));
    }

    long kills_normal = 0, kills_pubsub = 0, stalls = 0, restarts = 0;
    unsigned rnd = (unsigned)time(NULL);
    long long end = test_now_ms() + seconds * 1000LL;
    while (test_now_ms() < end) {
        sleep_ms(300 + rand_r(&rnd) % 1200);
        switch (rand_r(&rnd) % 4) {
        case 0: test_redis_int(&r, "CLIENT KILL TYPE normal"); kills_normal++; break;
        case 1: test_redis_int(&r, "CLIENT KILL TYPE pubsub"); kills_pubsub++; break;
        case 2: test_redis_int(&r, "DEBUG SLEEP 0.%d", 1 + rand_r(&rnd) % 4); stalls++; break;
        case 3: {
            int port = r.port;
            test_redis_stop(&r); /* SIGKILL; every write was fsynced */
            sleep_ms(100 + rand_r(&rnd) % 300);
            if (start_server(&r, port, dir) != 0) {
                fprintf(stderr, "restart on port %d failed\n", port);
                sh->stop = 1;
                break;
            }
            restarts++;
            break;
        }
        }
    }
    sh->stop = 1;
    int bad_exits = 0;
    for (int p = 0; p < procs; p++) {
        int st = 0;
        waitpid(kids[p], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad_exits++;
    }
    test_redis_stop(&r);
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) { /* a leftover temp dir is harmless */ }

    long violations = sh->overlaps + sh->regressions + sh->double_callbacks + bad_exits;
    long errors = 0;
    printf("{\"seconds\":%d,\"processes\":%d,\"waiters\":%d,\"names\":%d,\"acquisitions\":%ld,"
           "\"faults\":{\"kill_normal\":%ld,\"kill_pubsub\":%ld,\"stall\":%ld,\"restart\":%ld},"
           "\"violations\":%ld,\"overlaps\":%ld,\"fence_regressions\":%ld,\"double_callbacks\":%ld,"
           "\"workers_unfinished\":%d,\"lost_holds\":%ld,\"errors\":{",
           seconds, procs, procs * per_proc, names, sh->acquisitions, kills_normal, kills_pubsub,
           stalls, restarts, violations, sh->overlaps, sh->regressions, sh->double_callbacks,
           bad_exits, sh->lost);
    int first = 1;
    for (int i = 0; i < NCODES; i++) {
        if (sh->errors[i] == 0) continue;
        printf("%s\"%s\":%ld", first ? "" : ",", i ? hilock_strerror(-i) : "refused", sh->errors[i]);
        errors += sh->errors[i];
        first = 0;
    }
    printf("}}\n");
    printf("hilock-stress: %ld acquisitions, %ld faults, %ld violations, %ld requests ended in error\n",
           sh->acquisitions, kills_normal + kills_pubsub + stalls + restarts, violations, errors);
    free(kids);
    return violations == 0 ? 0 : 1;
}
