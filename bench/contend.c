/* The contended scenarios, run with any lock_impl (hilock's mutex, its fair
 * lock, or the polling baseline), each process with its own event loop and
 * client:
 *
 * handoff: two processes hand one lock back and forth. The holder tells
 *   the other process (a pipe) that it may queue; that process calls
 *   acquire and waits. The holder keeps the lock 1..11 ms (uniformly
 *   random, and at least 1 ms after the other process asked, so that its
 *   first try has failed and it is really waiting), then stamps the time in
 *   shared memory and calls release. The latency is from that release call
 *   to the other process's acquire callback: CLOCK_MONOTONIC is one clock
 *   for every process, and no Redis round trip is part of the measurement.
 *   The run is cut into blocks; at the start of each block the holder times
 *   PING round trips on a blocking connection: the machine's baseline,
 *   measured in the same run, by the same processes. Commands per handoff:
 *   INFO commandstats from when both processes are ready to when both have
 *   exited, less the PINGs of the baseline, over the handoffs.
 *
 * herd: P processes with W waiters each on one name, all asking at once.
 *   Each waiter holds the lock for a fixed time once, then releases it.
 *   Redis's INFO commandstats before and after give the commands sent per
 *   handoff. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define PING_N 300      /* PINGs per block */
#define MAX_BLOCKS 16
#define HO_MAX 20000    /* handoffs per run */
#define HERD_MAX 8192   /* acquisitions per herd run */
#define MIN_WAIT_NS 1000000u   /* the waiter asked at least this long before a release */

/* ---- handoff -------------------------------------------------------------- */

struct ho_shm {
    volatile int count;          /* acquisitions so far */
    volatile uint64_t t_release; /* when the last release was called */
    volatile int rel_count;      /* the acquisition it released */
    volatile uint64_t t_issue;   /* when the waiting process called acquire */
    volatile int issue_count;    /* for which acquisition it did */
    volatile int errors;
    int total;                   /* acquisitions: handoffs + 1 */
    int block;                   /* handoffs per block */
    int nlat;
    uint64_t lat[HO_MAX];        /* ns */
    int nping;
    uint64_t ping[MAX_BLOCKS * PING_N];
};

struct ho_proc {
    bench_waiter bw;
    int idx;
    const lock_impl *impl;
    const bench_target *target;  /* the clients' server(s); PINGs to node[0] */
    struct event_base *base;
    void *client;
    struct ho_shm *shm;
    int in_fd, peer_fd, parent_fd;
    struct event *pipe_ev, *hold_ev;
    redisContext *sync;
    void *hold;
    int held_k;                  /* the acquisition we hold */
    int releasing;               /* releases whose callback has not run */
    int finishing;
    volatile int done;
    int warm;                    /* warm-up: 1 acquiring, 2 releasing, 3 done */
    char name[64];
};

static void ho_error(struct ho_proc *p, const char *what, int status) {
    fprintf(stderr, "handoff[%s/%d]: %s (%d)\n", p->impl->name, p->idx, what, status);
    __atomic_add_fetch(&p->shm->errors, 1, __ATOMIC_SEQ_CST);
    write_byte(p->peer_fd, 'q');
    p->done = 1;
}

static void ho_arm_hold(struct ho_proc *p, uint64_t us) {
    struct timeval tv = {(time_t)(us / 1000000u), (suseconds_t)(us % 1000000u)};
    evtimer_add(p->hold_ev, &tv);
}

/* A release, counted until its callback runs: the process must not free
 * its client before that (the other process may say 'q' first). */
static int ho_release(struct ho_proc *p, void *hold) {
    int rc = p->impl->release(p->client, hold, &p->bw);
    if (rc == 0) p->releasing++;
    return rc;
}

static void ho_released(bench_waiter *bw, int status) {
    struct ho_proc *p = (struct ho_proc *)bw;
    if (p->warm == 2) { p->warm = 3; return; }
    p->releasing--;
    if (status != 0) ho_error(p, "release failed", status);
    if (p->finishing) p->done = 1;
}

static void ho_acquired(bench_waiter *bw, void *hold, int status) {
    struct ho_proc *p = (struct ho_proc *)bw;
    struct ho_shm *s = p->shm;
    uint64_t t = now_ns();
    if (status != 0) { ho_error(p, "acquire failed", status); return; }
    if (p->warm == 1) { /* the warm-up lock: give it back */
        p->warm = 2;
        p->impl->release(p->client, hold, &p->bw);
        return;
    }
    int k = ++s->count;
    if (k > 1) {
        if (s->rel_count != k - 1) ho_error(p, "granted before the release", k);
        else if (s->nlat < HO_MAX) s->lat[s->nlat++] = t - s->t_release;
    }
    p->hold = hold;
    p->held_k = k;
    if (k >= s->total) {
        p->finishing = 1;
        write_byte(p->peer_fd, 'q');
        if (ho_release(p, hold) != 0) ho_error(p, "release refused", 0);
        return;
    }
    if ((k - 1) % s->block == 0 && s->nping + PING_N <= MAX_BLOCKS * PING_N) {
        if (ping_rtts(p->sync, s->ping + s->nping, PING_N) == 0) s->nping += PING_N;
        else ho_error(p, "PING failed", 0);
    }
    write_byte(p->peer_fd, 'a');
    ho_arm_hold(p, 1000 + rnd(10000));
}

static void ho_hold_done(evutil_socket_t fd, short what, void *arg) {
    struct ho_proc *p = arg;
    struct ho_shm *s = p->shm;
    (void)fd; (void)what;
    if (s->issue_count != p->held_k || now_ns() - s->t_issue < MIN_WAIT_NS) {
        ho_arm_hold(p, 200); /* the other process has not been waiting long enough */
        return;
    }
    s->rel_count = p->held_k;
    s->t_release = now_ns();
    if (ho_release(p, p->hold) != 0) ho_error(p, "release refused", 0);
}

static void ho_pipe(evutil_socket_t fd, short what, void *arg) {
    struct ho_proc *p = arg;
    char buf[16];
    (void)what;
    ssize_t n = read(fd, buf, sizeof buf);
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == 'q') {
            p->done = 1;
        } else if (buf[i] == 'a' || buf[i] == 'g') {
            p->shm->t_issue = now_ns();
            p->shm->issue_count = p->shm->count;
            if (p->impl->acquire(p->client, p->name, &p->bw) != 0) ho_error(p, "acquire refused", 0);
        }
    }
}

static int ho_child(struct ho_proc *p) {
    p->base = base_new();
    p->client = p->base ? p->impl->client_new(p->base, p->target) : NULL;
    p->sync = target_connect(p->target, 0); /* TLS too on a TLS target */
    if (p->client == NULL || p->sync == NULL) return 1;
    p->bw.acquired = ho_acquired;
    p->bw.released = ho_released;
    set_nonblock(p->in_fd);
    p->pipe_ev = event_new(p->base, p->in_fd, EV_READ | EV_PERSIST, ho_pipe, p);
    p->hold_ev = evtimer_new(p->base, ho_hold_done, p);
    event_add(p->pipe_ev, NULL);

    /* Warm up: connect, load the scripts, on a name of our own. */
    char warm[64];
    snprintf(warm, sizeof warm, "hb-warm:%ld", (long)getpid());
    p->warm = 1;
    p->impl->acquire(p->client, warm, &p->bw);
    volatile int *flag = &p->done;
    uint64_t deadline = now_ns() + 10000000000ull;
    while (p->warm != 3 && !*flag && now_ns() < deadline) event_base_loop(p->base, EVLOOP_ONCE);
    if (p->warm != 3) { fprintf(stderr, "handoff: warm-up failed\n"); return 1; }
    p->warm = 0;
    write_byte(p->parent_fd, 'r');

    loop_until(p->base, &p->done, 120000);
    uint64_t drain = now_ns() + 5000000000ull;
    while (p->releasing > 0 && now_ns() < drain) event_base_loop(p->base, EVLOOP_ONCE);
    int ok = p->done && p->releasing == 0 && p->shm->errors == 0;
    event_free(p->pipe_ev);
    event_free(p->hold_ev);
    p->impl->client_free(p->client);
    redisFree(p->sync);
    event_base_free(p->base);
    return ok ? 0 : 1;
}

void write_latencies(const char *tag, const uint64_t *sorted, size_t n) {
    if (g_opts.lat_dir == NULL || n == 0) return;
    char path[512];
    snprintf(path, sizeof path, "%s/handoff-%s.dat", g_opts.lat_dir, tag);
    FILE *f = fopen(path, "w");
    if (f == NULL) { fprintf(stderr, "bench: %s: %s\n", path, strerror(errno)); return; }
    fprintf(f, "# handoff latency (us) and cumulative fraction, client %s\n", tag);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%.1f %.6f\n", (double)sorted[i] / 1000.0, (double)(i + 1) / (double)n);
    fclose(f);
}

/* What the lock's clients sent during a run (see ho_run). */
struct ho_cmds {
    int ok;
    long long cmds;   /* the impl's own commands (impl->commands) */
    long long calls;  /* every call, those made inside scripts too */
    long long usec;   /* Redis's time in the impl's commands (scripts: their calls too) */
};

/* Fork the two processes and let them hand `name` over `handoffs` times.
 * Returns the shared memory with the latencies and PINGs (the caller frees
 * it), or NULL; *rc is 0 when every handoff was made without error. With
 * `cmds`, the commands of t->node[0] from when both processes are ready
 * (warmed up) to when both have exited, less the PINGs of the baseline. */
static struct ho_shm *ho_run(const lock_impl *impl, const bench_target *t, const char *name,
                             int handoffs, int *rc, struct ho_cmds *cmds) {
    int reps = g_opts.reps < 1 ? 1 : g_opts.reps > MAX_BLOCKS ? MAX_BLOCKS : g_opts.reps;
    if (handoffs > HO_MAX) handoffs = HO_MAX;
    if (handoffs < reps) handoffs = reps;
    *rc = 1;
    struct ho_shm *s = shm_alloc(sizeof *s);
    if (s == NULL) return NULL;
    s->total = handoffs + 1;
    s->block = handoffs / reps;
    s->issue_count = -1;
    s->rel_count = -1;

    int in[2][2], ready[2];
    if (pipe(in[0]) || pipe(in[1]) || pipe(ready)) { perror("pipe"); return s; }
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        pids[i] = fork_child();
        if (pids[i] < 0) { perror("fork"); return s; }
        if (pids[i] == 0) {
            struct ho_proc p;
            memset(&p, 0, sizeof p);
            p.idx = i;
            p.impl = impl;
            p.target = t;
            p.shm = s;
            p.in_fd = in[i][0];
            p.peer_fd = in[1 - i][1];
            p.parent_fd = ready[1];
            snprintf(p.name, sizeof p.name, "%s", name);
            _exit(ho_child(&p));
        }
    }
    int ok = read_byte(ready[0], 15000) == 'r' && read_byte(ready[0], 15000) == 'r';
    redisContext *sc = NULL;
    cmdstats before, after;
    if (cmds != NULL) {
        memset(cmds, 0, sizeof *cmds);
        sc = target_connect(t, 0);
        cmds->ok = sc != NULL && cmdstats_get(sc, &before) == 0;
    }
    if (ok) write_byte(in[0][1], 'g');
    else write_byte(in[0][1], 'q'), write_byte(in[1][1], 'q');
    int timeout = 60000 + handoffs * 30;
    int st0 = wait_child(pids[0], timeout), st1 = wait_child(pids[1], timeout);
    if (cmds != NULL && cmds->ok && cmdstats_get(sc, &after) == 0) {
        long long pings = s->nping; /* the baseline's, on the processes' side connections */
        int lists_ping = 0;
        for (const char *const *c = impl->commands; *c; c++) lists_ping |= strcmp(*c, "ping") == 0;
        cmds->cmds = cmdstats_delta(&before, &after, impl->commands) - (lists_ping ? pings : 0);
        cmds->calls = cmdstats_delta_all(&before, &after) - pings;
        cmds->usec = cmdstats_usec_delta(&before, &after, impl->commands);
    } else if (cmds != NULL) {
        cmds->ok = 0;
    }
    if (sc) redisFree(sc);
    for (int i = 0; i < 2; i++) { close(in[i][0]); close(in[i][1]); }
    close(ready[0]);
    close(ready[1]);
    *rc = ok && st0 == 0 && st1 == 0 && s->errors == 0 && s->nlat == handoffs ? 0 : 1;
    return s;
}

/* Per block: p50 of the handoffs and of the PINGs; their medians (the
 * machines are noisy), and p90/p99 of all handoffs pooled. Sorts s->lat. */
static void ho_summarize(struct ho_shm *s, handoff_result *out) {
    int blocks = s->nping / PING_N;
    double hp50[MAX_BLOCKS], pp50[MAX_BLOCKS], ratio[MAX_BLOCKS];
    int nb = 0;
    uint64_t *tmp = malloc(sizeof(uint64_t) * (size_t)(s->nlat + PING_N));
    for (int b = 0; b < blocks && tmp; b++) {
        int from = b * s->block, to = b + 1 == blocks ? s->nlat : (b + 1) * s->block;
        if (to > s->nlat) to = s->nlat;
        if (to <= from) break;
        memcpy(tmp, s->lat + from, sizeof(uint64_t) * (size_t)(to - from));
        sort_u64(tmp, (size_t)(to - from));
        hp50[nb] = (double)pct_u64(tmp, (size_t)(to - from), 50) / 1000.0;
        memcpy(tmp, s->ping + b * PING_N, sizeof(uint64_t) * PING_N);
        sort_u64(tmp, PING_N);
        pp50[nb] = (double)pct_u64(tmp, PING_N, 50) / 1000.0;
        ratio[nb] = pp50[nb] > 0 ? hp50[nb] / pp50[nb] : 0;
        nb++;
    }
    free(tmp);
    sort_u64(s->lat, (size_t)s->nlat);
    sort_u64(s->ping, (size_t)s->nping);
    size_t n = (size_t)s->nlat;
    memset(out, 0, sizeof *out);
    out->p50 = median_d(hp50, (size_t)nb);
    out->p90 = (double)pct_u64(s->lat, n, 90) / 1000.0;
    out->p99 = (double)pct_u64(s->lat, n, 99) / 1000.0;
    out->max = n ? (double)s->lat[n - 1] / 1000.0 : 0;
    out->ping50 = median_d(pp50, (size_t)nb);
    out->ping99 = (double)pct_u64(s->ping, (size_t)s->nping, 99) / 1000.0;
    out->over_ping = median_d(ratio, (size_t)nb);
    out->handoffs = (int)n;
    out->blocks = nb;
    out->errors = s->errors;
}

int handoff_measure(const lock_impl *impl, const bench_target *t, const char *name,
                    int handoffs, handoff_result *out) {
    int rc;
    struct ho_shm *s = ho_run(impl, t, name, handoffs, &rc, NULL);
    memset(out, 0, sizeof *out);
    if (s == NULL) return 1;
    ho_summarize(s, out);
    if (rc != 0 && out->errors == 0) out->errors = 1;
    shm_free(s, sizeof *s);
    return rc;
}

int scenario_handoff(const lock_impl *impl, int handoffs, const char *scenario_name) {
    char name[64];
    snprintf(name, sizeof name, "hb-handoff:%s:%ld", impl->name, (long)getpid());
    int rc;
    struct ho_cmds c;
    struct ho_shm *s = ho_run(impl, &g_standalone, name, handoffs, &rc, &c);
    if (s == NULL) return 1;
    handoff_result r;
    ho_summarize(s, &r);
    double per = c.ok && r.handoffs > 0 ? (double)c.cmds / r.handoffs : -1;

    json_begin(scenario_name);
    if (strcmp(scenario_name, "handoff") != 0) json_str("of", "handoff");
    json_str("client", impl->name);
    json_num("p50_us", r.p50, 1);
    json_num("p99_us", r.p99, 1);
    json_num("ping_rtt_p50_us", r.ping50, 1);
    json_num("p50_over_ping", r.over_ping, 2);
    json_int("handoffs", r.handoffs);
    json_num("p90_us", r.p90, 1);
    json_num("max_us", r.max, 1);
    json_num("ping_rtt_p99_us", r.ping99, 1);
    if (g_res.floor_p50 > 0) {
        json_num("floor_p50_us", g_res.floor_p50, 1);
        json_num("p50_over_floor", r.p50 / g_res.floor_p50, 2);
    }
    json_int("blocks", r.blocks);
    if (c.ok && r.handoffs > 0) {
        json_num("commands_per_handoff", per, 2);
        json_num("redis_calls_per_handoff", (double)c.calls / r.handoffs, 2);
        json_num("redis_us_per_handoff", (double)c.usec / r.handoffs, 1);
    }
    json_str("hold_ms", "1..11 uniform");
    json_int("errors", s->errors);
    json_end();
    write_latencies(impl->name, s->lat, (size_t)s->nlat);
    if (impl == &hilock_impl) {
        g_res.handoff_run = 1;
        g_res.ho_p50 = r.p50;
        g_res.ho_p99 = r.p99;
        g_res.ho_ping = r.ping50;
        g_res.ho_ratio = r.ping50 > 0 ? r.p50 / r.ping50 : 0;
    } else {
        g_res.poll_p50 = r.p50;
        g_res.poll_p99 = r.p99;
    }
    shm_free(s, sizeof *s);
    return rc;
}

/* ---- fair_handoff: the fair lock beside the mutex --------------------------- */

/* One lock's side of fair_handoff: the runs' figures, the handoffs pooled. */
struct fh_side {
    const lock_impl *impl;
    int fair;                         /* floor_measure's */
    double p50[MAX_BLOCKS], floor50[MAX_BLOCKS], msg50[MAX_BLOCKS];
    int n, nfloor, errors, cmds_ok;
    long long handoffs, cmds, calls, usec;
    uint64_t *lat;                    /* every handoff of every run (ns), HO_MAX at most */
    size_t nlat;
};

/* One run of `handoffs` for one side, after one of its floor (`floor_n`
 * handoffs). 0 on success. */
static int fh_run(struct fh_side *f, int handoffs, int floor_n) {
    floor_result fl;
    int bad = floor_measure(floor_n, f->fair, &fl) != 0;
    f->errors += fl.errors;
    if (!bad) {
        f->floor50[f->nfloor] = fl.p50;
        f->msg50[f->nfloor++] = fl.msg50;
    }
    char name[64];
    snprintf(name, sizeof name, "hb-fairho:%s:%ld", f->impl->name, (long)getpid());
    int rc;
    struct ho_cmds c;
    struct ho_shm *s = ho_run(f->impl, &g_standalone, name, handoffs, &rc, &c);
    if (s == NULL) { f->errors++; return 1; }
    handoff_result r;
    ho_summarize(s, &r); /* sorts s->lat */
    f->errors += r.errors + (rc != 0 && r.errors == 0);
    if (rc == 0 && r.handoffs > 0) {
        f->p50[f->n++] = r.p50;
        f->cmds_ok &= c.ok;
        f->handoffs += r.handoffs;
        f->cmds += c.cmds;
        f->calls += c.calls;
        f->usec += c.usec;
        size_t room = HO_MAX - f->nlat, k = (size_t)s->nlat < room ? (size_t)s->nlat : room;
        memcpy(f->lat + f->nlat, s->lat, k * sizeof *s->lat);
        f->nlat += k;
    }
    shm_free(s, sizeof *s);
    return bad || rc != 0 || r.handoffs == 0;
}

/* The side's figures, each key after `prefix`. Sorts its arrays. */
static void fh_json(const char *prefix, struct fh_side *f) {
    char k[64];
    double per = f->handoffs > 0 ? 1.0 / (double)f->handoffs : 0;
    double p50 = median_d(f->p50, (size_t)f->n), fl50 = median_d(f->floor50, (size_t)f->nfloor);
#define FH_KEY(s) (snprintf(k, sizeof k, "%s%s", prefix, s), k)
    sort_u64(f->lat, f->nlat);
    json_num(FH_KEY("p50_us"), p50, 1);
    json_num(FH_KEY("p90_us"), (double)pct_u64(f->lat, f->nlat, 90) / 1000.0, 1);
    json_num(FH_KEY("p99_us"), (double)pct_u64(f->lat, f->nlat, 99) / 1000.0, 1);
    if (f->cmds_ok && f->handoffs > 0) {
        json_num(FH_KEY("commands_per_handoff"), (double)f->cmds * per, 2);
        json_num(FH_KEY("redis_calls_per_handoff"), (double)f->calls * per, 2);
        json_num(FH_KEY("redis_us_per_handoff"), (double)f->usec * per, 1);
    }
    json_num(FH_KEY("floor_p50_us"), fl50, 1);
    if (!f->fair) json_num(FH_KEY("floor_message_p50_us"), median_d(f->msg50, (size_t)f->nfloor), 1);
    json_num(FH_KEY("p50_over_floor"), fl50 > 0 ? p50 / fl50 : 0, 2);
#undef FH_KEY
}

static double fh_min(const double *v, int n) {
    double m = n ? v[0] : 0;
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

static double fh_max(const double *v, int n) {
    double m = n ? v[0] : 0;
    for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

/* The fair lock's handoff beside the mutex's: `reps` repetitions of the
 * mutex's floor and run, then the fair lock's, so that both meet the same
 * machine (on a shared VM, the speed of a run, and which vCPUs its processes
 * land on, vary from one run to the next). The goal is on the median of the
 * repetitions' ratios of fair p50 over mutex p50. */
int scenario_fair_handoff(int handoffs) {
    int reps = g_opts.reps < 1 ? 1 : g_opts.reps > MAX_BLOCKS ? MAX_BLOCKS : g_opts.reps;
    int per = handoffs / reps > 0 ? handoffs / reps : 1;
    int floor_n = g_opts.poll_handoffs / reps > 20 ? g_opts.poll_handoffs / reps : 20;
    struct fh_side side[2]; /* the mutex, the fair lock */
    memset(side, 0, sizeof side);
    side[0].impl = &hilock_impl;
    side[1].impl = &hilock_fair_impl;
    side[1].fair = 1;
    double ratio[MAX_BLOCKS], fratio[MAX_BLOCKS];
    int nratio = 0, nfratio = 0, failed = 0;
    for (int i = 0; i < 2; i++) {
        side[i].cmds_ok = 1;
        side[i].lat = malloc(sizeof(uint64_t) * HO_MAX);
        if (side[i].lat == NULL) { free(side[0].lat); return 1; }
    }
    for (int rep = 0; rep < reps; rep++) {
        int nf0 = side[0].nfloor, nf1 = side[1].nfloor;
        int bad = fh_run(&side[0], per, floor_n);
        bad |= fh_run(&side[1], per, floor_n);
        failed |= bad;
        if (side[0].nfloor > nf0 && side[1].nfloor > nf1)
            fratio[nfratio++] = side[1].floor50[nf1] / side[0].floor50[nf0];
        if (bad) continue;
        ratio[nratio++] = side[1].p50[side[1].n - 1] / side[0].p50[side[0].n - 1];
        fprintf(stderr, "  run %d: mutex p50 %.1f us (floor %.1f), fair p50 %.1f us (floor %.1f): %.3fx\n",
                rep + 1, side[0].p50[side[0].n - 1], side[0].floor50[nf0], side[1].p50[side[1].n - 1],
                side[1].floor50[nf1], ratio[nratio - 1]);
    }
    double rmin = fh_min(ratio, nratio), rmax = fh_max(ratio, nratio);
    double r50 = median_d(ratio, (size_t)nratio);

    json_begin("fair_handoff");
    json_str("of", "handoff");
    json_str("client", "hilock-fair");
    fh_json("", &side[1]);
    fh_json("mutex_", &side[0]);
    json_num("p50_over_mutex", r50, 3);
    json_num("p50_over_mutex_min", rmin, 3);
    json_num("p50_over_mutex_max", rmax, 3);
    json_num("floor_over_mutex_floor", median_d(fratio, (size_t)nfratio), 3);
    json_int("handoffs", side[1].handoffs);
    json_int("mutex_handoffs", side[0].handoffs);
    json_int("floor_handoffs_per_run", floor_n);
    json_int("reps", nratio);
    json_str("hold_ms", "1..11 uniform");
    json_int("errors", side[0].errors + side[1].errors);
    json_end();
    write_latencies("hilock-fair", side[1].lat, side[1].nlat); /* sorted by fh_json */

    double fair50 = median_d(side[1].p50, (size_t)side[1].n);
    double mutex50 = median_d(side[0].p50, (size_t)side[0].n);
    fprintf(stderr, "  fair handoff p50 %.1f us, the mutex's %.1f us (alternated, %d x %d handoffs each): "
            "%.3fx (runs %.2f..%.2f)\n", fair50, mutex50, nratio, per, r50, rmin, rmax);
    g_res.fair_ho_run = nratio > 0;
    g_res.fair_ho_p50 = fair50;
    g_res.fair_ho_p99 = (double)pct_u64(side[1].lat, side[1].nlat, 99) / 1000.0;
    g_res.fair_ho_mutex_p50 = mutex50;
    g_res.fair_ho_mutex_p99 = (double)pct_u64(side[0].lat, side[0].nlat, 99) / 1000.0;
    g_res.fair_ho_ratio = r50;
    g_res.fair_ho_cmds = side[1].cmds_ok && side[1].handoffs ? (double)side[1].cmds / side[1].handoffs : -1;
    g_res.fair_floor_p50 = median_d(side[1].floor50, (size_t)side[1].nfloor);
    g_res.fair_mutex_floor_p50 = median_d(side[0].floor50, (size_t)side[0].nfloor);
    g_res.fair_mutex_floor_msg_p50 = median_d(side[0].msg50, (size_t)side[0].nfloor);
    free(side[0].lat);
    free(side[1].lat);
    return failed || nratio == 0;
}

/* ---- herd ----------------------------------------------------------------- */

struct herd_shm {
    volatile int count;
    volatile unsigned long long messages; /* received by every process (impl->messages) */
    volatile int held;
    volatile uint64_t t_release;
    volatile int errors;
    volatile int overlaps;
    int total;                     /* acquisitions to come (0: repeating) */
    uint64_t until_ns;             /* repeating: acquire again until then */
    int nlat;
    uint64_t lat[HERD_MAX];
};

struct herd_waiter {
    bench_waiter bw;
    struct herd_proc *p;
    void *hold;
};

struct herd_proc {
    const lock_impl *impl;
    struct event_base *base;
    void *client;
    struct herd_shm *shm;
    int in_fd, parent_fd;
    int nwaiters, released;
    struct herd_waiter *waiters;
    struct herd_waiter *holder;
    struct event *pipe_ev, *hold_ev;
    volatile int done;
    int warm;
    bench_waiter warm_bw;
    char name[64];
};

static void herd_fail(struct herd_proc *p, const char *what, int status) {
    fprintf(stderr, "herd[%s]: %s (%d)\n", p->impl->name, what, status);
    __atomic_add_fetch(&p->shm->errors, 1, __ATOMIC_SEQ_CST);
}

static void herd_released(bench_waiter *bw, int status) {
    struct herd_waiter *w = (struct herd_waiter *)bw;
    struct herd_proc *p = w->p;
    if (status != 0) herd_fail(p, "release failed", status);
    if (status == 0 && now_ns() < p->shm->until_ns) {
        if (p->impl->acquire(p->client, p->name, &w->bw) == 0) return;
        herd_fail(p, "acquire refused", 0);
    }
    if (++p->released == p->nwaiters) write_byte(p->parent_fd, 'd');
}

static void herd_acquired(bench_waiter *bw, void *hold, int status) {
    struct herd_waiter *w = (struct herd_waiter *)bw;
    struct herd_proc *p = w->p;
    struct herd_shm *s = p->shm;
    uint64_t t = now_ns();
    if (status != 0) {
        herd_fail(p, "acquire failed", status);
        if (++p->released == p->nwaiters) write_byte(p->parent_fd, 'd');
        return;
    }
    if (__atomic_exchange_n(&s->held, 1, __ATOMIC_SEQ_CST) != 0) {
        __atomic_add_fetch(&s->overlaps, 1, __ATOMIC_SEQ_CST);
        herd_fail(p, "two holders at once", 0);
    }
    int k = __atomic_add_fetch(&s->count, 1, __ATOMIC_SEQ_CST);
    if (k > 1 && s->nlat < HERD_MAX) s->lat[s->nlat++] = t - s->t_release;
    w->hold = hold;
    p->holder = w;
    struct timeval tv = {0, g_opts.herd_hold_us};
    evtimer_add(p->hold_ev, &tv);
}

static void herd_hold_done(evutil_socket_t fd, short what, void *arg) {
    struct herd_proc *p = arg;
    struct herd_waiter *w = p->holder;
    (void)fd; (void)what;
    p->holder = NULL;
    __atomic_store_n(&p->shm->held, 0, __ATOMIC_SEQ_CST);
    p->shm->t_release = now_ns();
    if (p->impl->release(p->client, w->hold, &w->bw) != 0) herd_fail(p, "release refused", 0);
}

static void herd_pipe(evutil_socket_t fd, short what, void *arg) {
    struct herd_proc *p = arg;
    char buf[16];
    (void)what;
    ssize_t n = read(fd, buf, sizeof buf);
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == 'q') {
            p->done = 1;
        } else if (buf[i] == 'g') {
            for (int j = 0; j < p->nwaiters; j++)
                if (p->impl->acquire(p->client, p->name, &p->waiters[j].bw) != 0) {
                    herd_fail(p, "acquire refused", 0);
                    if (++p->released == p->nwaiters) write_byte(p->parent_fd, 'd');
                }
        }
    }
}

static void herd_warm_acquired(bench_waiter *bw, void *hold, int status) {
    struct herd_proc *p = (struct herd_proc *)((char *)bw - offsetof(struct herd_proc, warm_bw));
    if (status != 0) { p->warm = -1; return; }
    p->warm = 2;
    p->impl->release(p->client, hold, bw);
}

static void herd_warm_released(bench_waiter *bw, int status) {
    struct herd_proc *p = (struct herd_proc *)((char *)bw - offsetof(struct herd_proc, warm_bw));
    p->warm = status == 0 ? 3 : -1;
}

static int herd_child(struct herd_proc *p) {
    p->base = base_new();
    p->client = p->base ? p->impl->client_new(p->base, &g_standalone) : NULL;
    p->waiters = calloc((size_t)p->nwaiters, sizeof *p->waiters);
    if (p->client == NULL || p->waiters == NULL) return 1;
    for (int j = 0; j < p->nwaiters; j++) {
        p->waiters[j].p = p;
        p->waiters[j].bw.acquired = herd_acquired;
        p->waiters[j].bw.released = herd_released;
    }
    set_nonblock(p->in_fd);
    p->pipe_ev = event_new(p->base, p->in_fd, EV_READ | EV_PERSIST, herd_pipe, p);
    p->hold_ev = evtimer_new(p->base, herd_hold_done, p);
    event_add(p->pipe_ev, NULL);

    char warm[64];
    snprintf(warm, sizeof warm, "hb-warm:%ld", (long)getpid());
    p->warm = 1;
    p->warm_bw.acquired = herd_warm_acquired;
    p->warm_bw.released = herd_warm_released;
    p->impl->acquire(p->client, warm, &p->warm_bw);
    uint64_t deadline = now_ns() + 10000000000ull;
    while (p->warm > 0 && p->warm != 3 && now_ns() < deadline)
        event_base_loop(p->base, EVLOOP_ONCE);
    if (p->warm != 3) { fprintf(stderr, "herd: warm-up failed\n"); return 1; }
    write_byte(p->parent_fd, 'r');

    loop_until(p->base, &p->done, 300000);
    if (p->impl->messages != NULL)
        __atomic_add_fetch(&p->shm->messages, p->impl->messages(p->client), __ATOMIC_SEQ_CST);
    event_free(p->pipe_ev);
    event_free(p->hold_ev);
    p->impl->client_free(p->client);
    event_base_free(p->base);
    free(p->waiters);
    return p->shm->errors == 0 ? 0 : 1;
}

int scenario_herd(const lock_impl *impl, int procs, int waiters, const char *scenario_name) {
    if (procs < 1 || procs > 64 || waiters < 1 || procs * waiters > HERD_MAX) return 1;
    struct herd_shm *s = shm_alloc(sizeof *s);
    redisContext *rc = sync_connect();
    if (s == NULL || rc == NULL) return 1;
    s->total = procs * waiters;
    int ready[2], in[64][2];
    if (pipe(ready)) { perror("pipe"); return 1; }
    char name[64];
    snprintf(name, sizeof name, "hb-herd:%s:%ld:%d:%d", impl->name, (long)getpid(), procs, waiters);
    pid_t pids[64];
    for (int i = 0; i < procs; i++) {
        if (pipe(in[i])) { perror("pipe"); return 1; }
        pids[i] = fork_child();
        if (pids[i] < 0) { perror("fork"); return 1; }
        if (pids[i] == 0) {
            struct herd_proc p;
            memset(&p, 0, sizeof p);
            p.impl = impl;
            p.shm = s;
            p.in_fd = in[i][0];
            p.parent_fd = ready[1];
            p.nwaiters = waiters;
            snprintf(p.name, sizeof p.name, "%s", name);
            _exit(herd_child(&p));
        }
    }
    int ok = 1;
    for (int i = 0; i < procs && ok; i++) ok = read_byte(ready[0], 15000) == 'r';
    cmdstats before, after;
    uint64_t t0 = now_ns(), t1 = t0;
    int finished = 0;
    double cpu0 = ok ? redis_cpu_seconds(rc) : -1, cpu1 = -1;
    if (ok && cmdstats_get(rc, &before) == 0) {
        t0 = now_ns();
        if (g_opts.herd_repeat_ms > 0) {
            s->until_ns = t0 + (uint64_t)g_opts.herd_repeat_ms * 1000000u;
            s->total = 0;
        }
        for (int i = 0; i < procs; i++) write_byte(in[i][1], 'g');
        int budget = 30000 + s->total * 40;
        for (; finished < procs; finished++)
            if (read_byte(ready[0], budget) != 'd') break;
        t1 = now_ns();
        cpu1 = redis_cpu_seconds(rc);
        if (cmdstats_get(rc, &after) != 0) ok = 0;
    } else {
        ok = 0;
    }
    for (int i = 0; i < procs; i++) write_byte(in[i][1], 'q');
    int bad = 0;
    for (int i = 0; i < procs; i++) {
        if (wait_child(pids[i], 20000) != 0) bad++;
        close(in[i][0]);
        close(in[i][1]);
    }
    close(ready[0]);
    close(ready[1]);
    redisFree(rc);
    int rcode = ok && finished == procs && bad == 0 && s->errors == 0 && (s->total == 0 || s->count == s->total) ? 0 : 1;

    long long handoffs = s->count > 0 ? s->count - 1 : 0;
    long long cmds = ok ? cmdstats_delta(&before, &after, impl->commands) : -1;
    long long calls = ok ? cmdstats_delta_all(&before, &after) : -1;
    sort_u64(s->lat, (size_t)s->nlat);
    double secs = (double)(t1 - t0) / 1e9;
    /* The fair lock's goal is a constant: its release grants the next
     * waiter by message, whatever P and W. */
    int target = impl == &hilock_fair_impl ? 3 : procs + 2;
    json_begin(scenario_name);
    if (strcmp(scenario_name, "herd") != 0) json_str("of", "herd");
    json_str("client", impl->name);
    json_int("processes", procs);
    json_int("waiters", waiters);
    json_int("handoffs", handoffs);
    json_num("commands_per_handoff", handoffs > 0 ? (double)cmds / (double)handoffs : 0, 2);
    json_num("redis_calls_per_handoff", handoffs > 0 ? (double)calls / (double)handoffs : 0, 2);
    g_res.herd_cpu_us = ok && handoffs > 0 && cpu0 >= 0 && cpu1 >= cpu0 ? (cpu1 - cpu0) * 1e6 / (double)handoffs : -1;
    json_num("redis_cpu_us_per_handoff", g_res.herd_cpu_us, 2);
    json_int("target_commands_per_handoff", target);
    /* Processes woken per handoff: the mutex's release tells every process
     * that waits (each then tries once, P + 1 commands), the fair lock's
     * grant the grantee's alone (the warm-up's messages are in, a few). */
    if (impl->messages != NULL && handoffs > 0)
        json_num("messages_per_handoff", (double)s->messages / (double)handoffs, 2);
    json_num("p50_us", (double)pct_u64(s->lat, (size_t)s->nlat, 50) / 1000.0, 1);
    json_num("p99_us", (double)pct_u64(s->lat, (size_t)s->nlat, 99) / 1000.0, 1);
    json_int("hold_us", g_opts.herd_hold_us);
    json_num("seconds", secs, 2);
    json_int("errors", s->errors + (rcode != 0 && s->errors == 0));
    json_end();
    double per = handoffs > 0 ? (double)cmds / (double)handoffs : 0;
    fprintf(stderr, "  %s: %.2f commands/handoff (target %d), p50 %.1f us, p99 %.1f us\n", impl->name,
            per, target, (double)pct_u64(s->lat, (size_t)s->nlat, 50) / 1000.0,
            (double)pct_u64(s->lat, (size_t)s->nlat, 99) / 1000.0);
    if (impl == &hilock_fair_impl) {
        if (g_res.fair_herd_runs++ == 0 || per > g_res.fair_herd_worst_cmds) {
            g_res.fair_herd_worst_cmds = per;
            g_res.fair_herd_worst_p = procs;
            g_res.fair_herd_worst_w = waiters;
        }
    } else if (impl == &hilock_impl) {
        double excess = per - (procs + 2);
        if (g_res.herd_runs++ == 0 || excess > g_res.herd_worst_excess) {
            g_res.herd_worst_excess = excess;
            g_res.herd_worst_cmds = per;
            g_res.herd_worst_p = procs;
            g_res.herd_worst_w = waiters;
        }
    } else if (per > g_res.poll_herd_worst_cmds) {
        g_res.poll_herd_worst_cmds = per;
    }
    shm_free(s, sizeof *s);
    return rcode;
}
