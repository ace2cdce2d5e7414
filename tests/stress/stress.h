/* hilock-stress, shared between its parts: the workers (worker.c), the
 * primitives they ask for and their invariants (prims.c), the standalone
 * and cluster fault injectors (stress.c, cluster.c) and the report.
 * Workers are forked processes; everything they tell the parent lives in
 * one shared mapping (stress_shared), reset before each phase. */
#ifndef HILOCK_STRESS_H
#define HILOCK_STRESS_H

#include <stdint.h>
#include <sys/types.h>
#include "hilock/hilock.h"

#define MAX_NAMES 64
#define MAX_PROCS 32
#define NCODES 32      /* error counters, by -code (0: the call was refused) */
#define MAX_EVENTS 16  /* overlaps and fence regressions kept for the report */
#define MAX_FAULT_KINDS 16

#define TRACE_LEN 24    /* the last steps of each name, for the events */

/* The primitives a name may be (prims.c: stress_prims[], indexed by
 * stress_cfg.kind[name]); the mutex is 0, what every phase but prims uses. */
enum { PRIM_MUTEX, PRIM_SEMAPHORE, PRIM_RWLOCK, PRIM_FAIR, NPRIMS };
#define MAX_ASK 4      /* what one acquire of a primitive asks: 0..MAX_ASK-1 */
#define SEM_PERMITS 3  /* permits_total of the prims phase's semaphores */

/* One step of a name, as a worker saw it (the trace of an event). */
typedef struct stress_trace {
    long long at_ms;            /* test_now_ms() */
    int id;                     /* the waiter */
    char kind;                  /* 'g' granted, 'e' hold ended (release sent),
                                 * 'l' lost callback, 'r' release answered */
    int arg;                    /* 'g': the ask (permits, 1 = write); 'e': hilock_hold_lost()
                                 * then; 'l': why; 'r': status */
    unsigned long long fence;   /* 'g' */
} stress_trace;

/* One violation, as a worker saw it. */
typedef struct stress_event {
    char kind;                  /* 'o' overlap, 'r' fence regression, 'p' permits over
                                 * permits_total, 'w' a writer beside another holder */
    int name;
    int limit;                  /* 1: inside a kill -9 window (see limit_from) */
    int prev, next;             /* holder ids (proc * 100000 + waiter + 1) */
    long long at_ms;            /* test_now_ms() */
    unsigned long long fence, last_fence;
    long count;                 /* 'p': permits in use then; 'w': readers then */
    /* An overlap (or a 'w' after a writer): when and how the previous
     * holder left ('e' its hold ended, 'l' its lost callback; 0 not seen),
     * and whether hilock_hold_lost() said 1 then. */
    long long prev_since_ms;    /* when the previous holder was granted */
    volatile long long prev_left_ms;
    volatile char prev_left_how;
    volatile int prev_left_lost;
    int ntrace;                 /* the name's last steps up to the event */
    stress_trace trace[TRACE_LEN];
} stress_event;

typedef struct stress_shared {
    /* The id of the waiter that holds each name now, 0 when none does. A
     * holder clears only its own id, so a late lost callback never hides
     * the next holder. */
    volatile int inside[MAX_NAMES];
    volatile long long inside_since[MAX_NAMES]; /* when its holder was granted */
    volatile unsigned long long last_fence[MAX_NAMES];
    /* Asynchronous replication: a grant the killed master had not yet sent
     * to its replica is gone after the promotion, and the name can be
     * granted again while its first holder still believes it holds it.
     * The parent opens [from, until] for the names of a master it kills,
     * until its replica is promoted plus one lease; overlaps that start in
     * it are that documented limit, counted apart (test_now_ms clock). */
    volatile long long limit_from[MAX_NAMES], limit_until[MAX_NAMES];
    volatile long acquisitions, long_holds, lost;
    volatile long overlaps, overlaps_limit, regressions, regressions_limit;
    volatile long double_callbacks;
    /* The prims phase (prims.c), per name: the semaphore's permits in use
     * (added on grant, subtracted before release or at a loss), the
     * read-write lock's readers and its writer's id (0: none; cleared by
     * that writer only, as inside[]); and the most seen at once. */
    volatile long permits[MAX_NAMES], readers[MAX_NAMES];
    volatile int writer[MAX_NAMES];
    volatile long max_permits, max_readers;
    volatile long permit_overruns, permit_overruns_limit, rw_conflicts, rw_conflicts_limit;
    volatile long grants[NPRIMS][MAX_ASK]; /* by primitive and ask */
    volatile long errors[NCODES];          /* acquire callbacks, by -status */
    volatile long release_errors[NCODES];  /* release callbacks, by -status */
    volatile int sampled[NCODES];          /* err_sample[code] is written */
    char err_sample[NCODES][160];          /* hilock_client_errstr of the first */
    volatile long issued[MAX_PROCS], ended[MAX_PROCS];
    volatile int nevents;
    stress_event events[MAX_EVENTS];
    volatile unsigned trace_n[MAX_NAMES];  /* steps of each name so far */
    stress_trace trace[MAX_NAMES][TRACE_LEN];
    volatile int watch_id[MAX_NAMES];      /* a holder some overlap met, and */
    volatile int watch_ev[MAX_NAMES];      /* that event's index + 1 */
    volatile int stop;                     /* workers issue no new requests */
    volatile int crashed;                  /* workers that crashed (a fatal signal) */
} stress_shared;

extern stress_shared *sh;

/* What the workers do. */
typedef struct stress_cfg {
    char url[256];
    int procs, per_proc, names;
    char name[MAX_NAMES][40];
    unsigned char kind[MAX_NAMES];  /* PRIM_*: the primitive of each name */
    uint32_t lease_ms, request_timeout_ms;
    /* Per mille of grants held long (300..long_hold_max_ms ms instead of
     * 0..2): holds that span a migration or a failover, renewed through it. */
    int long_hold_permille, long_hold_max_ms;
} stress_cfg;

/* Fault counters of one phase, by kind, in the order first counted. */
typedef struct stress_faults {
    const char *kind[MAX_FAULT_KINDS];
    long n[MAX_FAULT_KINDS];
    int count;
} stress_faults;

void stress_fault(stress_faults *f, const char *kind);
long stress_faults_total(const stress_faults *f);

/* Clear the shared counters before a phase. */
void stress_reset(void);

/* Fork cfg->procs workers (each dies with the parent). Returns their pids
 * (free them with stress_workers_finish), or NULL. */
pid_t *stress_workers_start(const stress_cfg *cfg);

/* Stop the workers: no new requests, then wait up to drain_ms for every
 * pending request's callback. Workers still running then are killed (by
 * pid); their pending waiters are counted in *stranded. Returns how many
 * workers did not exit cleanly, and frees kids. */
int stress_workers_finish(pid_t *kids, int procs, int drain_ms, long *stranded);

/* The cluster phase: a 3+3 cluster, the workers, random migrations,
 * reshards, failovers, kills and connection kills until end_ms
 * (test_now_ms clock), then the workers drain. Fills *faults, *stranded
 * and *bad_exits; returns 0, or -1 when the cluster could not be run (it
 * did not start, or did not settle after a fault). */
int stress_cluster(stress_cfg *cfg, long long end_ms, stress_faults *faults, long *stranded,
                   int *bad_exits);

/* Names whose slots are the lowest of each master of a fresh cluster
 * (which `redis-cli --cluster reshard` moves first) alternate with plain
 * ones, so reshards move busy slots too. */
void stress_cluster_names(stress_cfg *cfg);

/* The Sentinel phase (sentinel.c): a master, its replica and three
 * sentinels, the workers on the redis-sentinel:// URL, random failovers
 * (writes paused, and plain), kill -9 of the master or of a sentinel,
 * connection kills, until end_ms. The same contract as stress_cluster. */
int stress_sentinel(stress_cfg *cfg, long long end_ms, stress_faults *faults, long *stranded,
                    int *bad_exits);

/* The Redlock phase (redlock.c): five independent masters, the workers on
 * the redlock:// URL, random kill -9 of a minority restarted empty after
 * more than a lease, stalls, connection kills, until end_ms. The same
 * contract as stress_cluster. */
int stress_redlock(stress_cfg *cfg, long long end_ms, stress_faults *faults, long *stranded,
                   int *bad_exits);

/* The nginx phase (nginx.c): three nginx with the module on one Redis
 * before a recording backend, batches of requests while reloads, worker
 * kills, connection kills and client aborts land, until end_ms. Overlaps
 * and fence regressions go to sh; requests that never ended and locks left
 * to *stranded; alerts and nginx that would not quit to *bad_exits.
 * Returns 0, or -1 when nginx could not be started. */
int stress_nginx(stress_cfg *cfg, long long end_ms, stress_faults *faults, long *stranded, int *bad_exits);

/* What one grant of a primitive is, for its invariant. */
typedef struct stress_grant {
    int name, id, ask;
    unsigned long long fence;
} stress_grant;

/* A primitive of the workers: a table entry (prims.c). To add one: its
 * PRIM_* above, an entry in stress_prims[], and a place among the names of
 * the prims phase (stress_prims_names). */
typedef struct stress_prim {
    const char *label;
    /* The report's name of a grant of each ask (NULL: never asked). */
    const char *grant_label[MAX_ASK];
    /* What one acquire asks, at random (NULL: always 0). */
    int (*pick)(unsigned *rnd);
    /* The acquire: hilock_acquire()'s signature (a mutex, or any primitive
     * that asks nothing more), or acquire_ask's, given the ask. */
    int (*acquire)(hilock_client *c, const char *name, const hilock_acquire_opts *opts,
                   hilock_acquire_cb cb, void *data, hilock_wait **wait_out);
    int (*acquire_ask)(hilock_client *c, const char *name, int ask, const hilock_acquire_opts *opts,
                       hilock_acquire_cb cb, void *data);
    /* The invariant: enter on a grant, before the hold is used; leave once
     * when it ends (before its release is sent, or at its lost callback). */
    void (*enter)(const stress_grant *g);
    void (*leave)(const stress_grant *g);
} stress_prim;

extern const stress_prim stress_prims[NPRIMS];

/* The names of the prims phase: semaphores, read-write locks and mutexes
 * in turn (stress_cfg.kind). */
void stress_prims_names(stress_cfg *cfg);
/* Does the phase use a primitive besides the mutex? */
int stress_prims_used(const stress_cfg *cfg);
/* The prims' part of a phase's JSON line (",\"key\":..."), and of its
 * summary (lines). */
void stress_prims_json(const stress_cfg *cfg);
void stress_prims_summary(const stress_cfg *cfg, const char *mode);
/* NULL when the phase's semaphores reached permits_total in use at once
 * and its read-write locks two readers at once and a writer (their checks
 * could have failed); else which did not. */
const char *stress_prims_unexercised(const stress_cfg *cfg);

/* A violation seen by a worker (kind as in stress_event), counted apart
 * inside a limit window (see limit_from), with the name's trace. */
void stress_violation(char kind, int name, int prev, int next, unsigned long long fence,
                      unsigned long long last, long count);
/* *max = v if v is larger (atomically). */
void stress_note_max(volatile long *max, long v);

/* Shared by the sentinel and redlock phases (worker.c). */
/* Lines of the phase's event log: on stdout, "[  12.3 s] ..." from t0, and
 * into the file `path` (NULL: none) until stress_log_close. */
void stress_log_open(long long t0, const char *path);
void stress_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void stress_log_close(void);
/* A line with the acquire requests that ended in error since it last said
 * so, if any: which faults the errors follow. */
void stress_say_errors(void);
/* Acquire requests issued and not yet ended, over the workers. */
long stress_pending(int procs);
/* How long the workers will take to drain once stopped: the pending
 * requests at the grant rate since `since`, times `slowdown`, + 2 s, in
 * 3..30 s; reserve_ms for the first 3 s. */
long long stress_drain_estimate(const stress_cfg *cfg, long long since, double slowdown, long long reserve_ms);
/* Copy (or append) a file, best effort: the servers' logs kept. */
void stress_copy_file(const char *from, const char *to, int append);
/* rm -rf of one of our /tmp/hilock-stress-* dirs. */
void stress_rm_rf(const char *dir);

#endif
