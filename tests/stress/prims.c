/* hilock-stress's primitives: what a worker's waiter asks for on a name,
 * and the invariant checked in the shared mapping on each grant and when
 * the hold ends. One entry of stress_prims[] per primitive:
 *   mutex      no two holders of a name at once (inside[]), fences strictly
 *              increasing per name;
 *   fair       the fair lock, with the mutex's checks;
 *   semaphore  SEM_PERMITS permits, each acquire asking 1 or 2: the
 *              permits in use (permits[]) never above SEM_PERMITS;
 *   rwlock     mostly readers, some writers: never a writer beside anyone
 *              (readers[], writer[]), write fences strictly increasing, and
 *              a reader's fence (the last write's) never below the fence
 *              of a writer that came in before it.
 * A hold counts from its grant until it ends (before its release is sent)
 * or its lost callback runs, whichever is first (worker.c), as the mutex's
 * always did; a violation inside a limit window is counted apart.
 *
 * The prims phase is the standalone phase (one server: connection kills,
 * stalls, restarts; stress.c) on names that are semaphores, read-write
 * locks, fair locks and mutexes in turn (stress_prims_names). A fourth primitive is a
 * PRIM_* in stress.h, an entry below (a lock with hilock_acquire()'s
 * signature takes .acquire and the mutex's checks as they are), and its
 * place in `cycle`. */
#include <stdio.h>
#include <stdlib.h>
#include "hilock/hilock.h"
#include "support/harness.h"
#include "stress/stress.h"

/* ---- The mutex: one holder ------------------------------------------------ */

/* Fences strictly increasing per name, for holders that exclude others. */
static void fence_check(const stress_grant *g, int prev) {
    unsigned long long last = sh->last_fence[g->name];
    if (g->fence <= last) stress_violation('r', g->name, prev, g->id, g->fence, last, 0);
    sh->last_fence[g->name] = g->fence;
}

static void mutex_enter(const stress_grant *g) {
    int prev = __atomic_exchange_n(&sh->inside[g->name], g->id, __ATOMIC_SEQ_CST);
    if (prev != 0) stress_violation('o', g->name, prev, g->id, g->fence, sh->last_fence[g->name], 0);
    sh->inside_since[g->name] = test_now_ms();
    fence_check(g, prev);
}

/* Clear its own id only, never that of a holder that came in meanwhile. */
static void mutex_leave(const stress_grant *g) {
    int mine = g->id;
    __atomic_compare_exchange_n(&sh->inside[g->name], &mine, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* ---- The semaphore: SEM_PERMITS permits, 1 or 2 per acquire --------------- */

static int sem_pick(unsigned *rnd) {
    return rand_r(rnd) % 3 == 0 ? 2 : 1;
}

static int sem_acquire(hilock_client *c, const char *name, int ask, const hilock_acquire_opts *o,
                       hilock_acquire_cb cb, void *data) {
    return hilock_semaphore_acquire(c, name, SEM_PERMITS, (unsigned)ask, o, cb, data, NULL);
}

static void sem_enter(const stress_grant *g) {
    long used = __atomic_add_fetch(&sh->permits[g->name], g->ask, __ATOMIC_SEQ_CST);
    stress_note_max(&sh->max_permits, used);
    if (used > SEM_PERMITS) stress_violation('p', g->name, 0, g->id, g->fence, 0, used);
}

static void sem_leave(const stress_grant *g) {
    __atomic_sub_fetch(&sh->permits[g->name], g->ask, __ATOMIC_SEQ_CST);
}

/* ---- The read-write lock: readers, or one writer (ask 1) ------------------ */

static int rw_pick(unsigned *rnd) {
    return rand_r(rnd) % 10 == 0; /* one writer in ten */
}

static int rw_acquire(hilock_client *c, const char *name, int ask, const hilock_acquire_opts *o,
                      hilock_acquire_cb cb, void *data) {
    return ask ? hilock_write_acquire(c, name, o, cb, data, NULL)
               : hilock_read_acquire(c, name, o, cb, data, NULL);
}

/* A reader counts itself in, then looks for a writer; a writer puts its id
 * in, then looks for readers: of two that overlap, one sees the other. A
 * writer's fence is larger than every fence before it; a reader's is the
 * last write's, so at least that of every writer that has come in (a
 * later writer waits for this reader to leave). */
static void rw_enter(const stress_grant *g) {
    if (g->ask) {
        int prev = __atomic_exchange_n(&sh->writer[g->name], g->id, __ATOMIC_SEQ_CST);
        long readers = __atomic_load_n(&sh->readers[g->name], __ATOMIC_SEQ_CST);
        if (prev != 0 || readers > 0)
            stress_violation('w', g->name, prev, g->id, g->fence, sh->last_fence[g->name], readers);
        sh->inside_since[g->name] = test_now_ms();
        fence_check(g, prev);
        return;
    }
    long readers = __atomic_add_fetch(&sh->readers[g->name], 1, __ATOMIC_SEQ_CST);
    stress_note_max(&sh->max_readers, readers);
    int writer = __atomic_load_n(&sh->writer[g->name], __ATOMIC_SEQ_CST);
    unsigned long long last = sh->last_fence[g->name];
    if (writer != 0) stress_violation('w', g->name, writer, g->id, g->fence, last, readers);
    else if (g->fence < last) stress_violation('r', g->name, 0, g->id, g->fence, last, 0);
}

static void rw_leave(const stress_grant *g) {
    int mine = g->id;
    if (g->ask)
        __atomic_compare_exchange_n(&sh->writer[g->name], &mine, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    else
        __atomic_sub_fetch(&sh->readers[g->name], 1, __ATOMIC_SEQ_CST);
}

/* ---- The table ------------------------------------------------------------- */

const stress_prim stress_prims[NPRIMS] = {
    [PRIM_MUTEX] = {.label = "mutex", .grant_label = {"mutex"}, .acquire = hilock_acquire,
                    .enter = mutex_enter, .leave = mutex_leave},
    [PRIM_SEMAPHORE] = {.label = "semaphore", .grant_label = {NULL, "semaphore_1", "semaphore_2"},
                        .pick = sem_pick, .acquire_ask = sem_acquire, .enter = sem_enter,
                        .leave = sem_leave},
    [PRIM_RWLOCK] = {.label = "rwlock", .grant_label = {"read", "write"}, .pick = rw_pick,
                     .acquire_ask = rw_acquire, .enter = rw_enter, .leave = rw_leave},
    [PRIM_FAIR] = {.label = "fair", .grant_label = {"fair"}, .acquire = hilock_fair_acquire,
                   .enter = mutex_enter, .leave = mutex_leave},
};

/* The primitives of the prims phase's names, in turn. */
static const int cycle[] = {PRIM_SEMAPHORE, PRIM_RWLOCK, PRIM_FAIR, PRIM_MUTEX};

void stress_prims_names(stress_cfg *cfg) {
    int n = (int)(sizeof(cycle) / sizeof(cycle[0]));
    for (int i = 0; i < cfg->names; i++) {
        cfg->kind[i] = (unsigned char)cycle[i % n];
        snprintf(cfg->name[i], sizeof(cfg->name[i]), "stress-%s-%d", stress_prims[cfg->kind[i]].label, i);
    }
}

static int names_of(const stress_cfg *cfg, int kind) {
    int n = 0;
    for (int i = 0; i < cfg->names; i++) n += cfg->kind[i] == kind;
    return n;
}

int stress_prims_used(const stress_cfg *cfg) {
    return names_of(cfg, PRIM_MUTEX) < cfg->names;
}

/* ---- The report ------------------------------------------------------------ */

void stress_prims_json(const stress_cfg *cfg) {
    const char *sep = "";
    printf(",\"prims\":{\"names\":{");
    for (int k = 0; k < NPRIMS; k++) {
        printf("%s\"%s\":%d", sep, stress_prims[k].label, names_of(cfg, k));
        sep = ",";
    }
    printf("},\"grants\":{");
    sep = "";
    for (int k = 0; k < NPRIMS; k++)
        for (int a = 0; a < MAX_ASK; a++)
            if (stress_prims[k].grant_label[a] != NULL) {
                printf("%s\"%s\":%ld", sep, stress_prims[k].grant_label[a], sh->grants[k][a]);
                sep = ",";
            }
    printf("},\"permits_total\":%d,\"max_permits\":%ld,\"max_readers\":%ld,"
           "\"limit_permit_overruns\":%ld,\"limit_rw_conflicts\":%ld,\"exercised\":%d}",
           SEM_PERMITS, sh->max_permits, sh->max_readers, sh->permit_overruns_limit,
           sh->rw_conflicts_limit, stress_prims_unexercised(cfg) == NULL);
}

void stress_prims_summary(const stress_cfg *cfg, const char *mode) {
    printf("hilock-stress: %s: grants:", mode);
    for (int k = 0; k < NPRIMS; k++) {
        if (names_of(cfg, k) == 0) continue;
        printf(" %s (%d names)", stress_prims[k].label, names_of(cfg, k));
        for (int a = 0; a < MAX_ASK; a++)
            if (stress_prims[k].grant_label[a] != NULL)
                printf(" %s %ld", stress_prims[k].grant_label[a], sh->grants[k][a]);
        printf(";");
    }
    printf("\nhilock-stress: %s: semaphores: at most %ld of %d permits in use at once, %ld times over;"
           " read-write locks: at most %ld readers at once, %ld times a writer beside another holder\n",
           mode, sh->max_permits, SEM_PERMITS, sh->permit_overruns, sh->max_readers, sh->rw_conflicts);
    const char *weak = stress_prims_unexercised(cfg);
    if (weak != NULL)
        printf("hilock-stress: %s: %s: that check could not have failed, and the run fails\n", mode, weak);
}

const char *stress_prims_unexercised(const stress_cfg *cfg) {
    if (names_of(cfg, PRIM_SEMAPHORE) > 0 && sh->max_permits < SEM_PERMITS)
        return "the semaphores never had all their permits in use at once";
    if (names_of(cfg, PRIM_RWLOCK) > 0 && sh->max_readers < 2)
        return "the read-write locks never had two readers at once";
    if (names_of(cfg, PRIM_RWLOCK) > 0 && sh->grants[PRIM_RWLOCK][1] == 0)
        return "the read-write locks never had a writer";
    return NULL;
}
