/* The loop layer: a client's timers, deferred callbacks, error text and log,
 * all driven by ONE timer of the user's event loop (hilock_loop). Knows
 * nothing of Redis. Every layer above reports and schedules through it. */
#ifndef HILOCK_LOOP_H
#define HILOCK_LOOP_H

#include "base.h"

/* A timer: intrusive, so starting one never allocates and never fails.
 * The timers of a client form a pairing heap ordered by `when`. */
typedef struct hl_timer hl_timer;
struct hl_timer {
    uint64_t when;                 /* monotonic ms */
    hl_timer *child, *next, *prev; /* heap links; prev is the parent for a first child */
    unsigned armed : 1;
    void (*cb)(hl_timer *t);
};

/* A user callback waiting for the next loop turn, run by its own handler
 * (as nginx posts events): cancel = 1 when the client is being freed, when
 * the handler owes the user HILOCK_ECANCELED or nothing. The handler may
 * free the item. */
typedef struct hl_defer hl_defer;
struct hl_defer {
    hl_link link;
    void (*run)(hl_defer *d, int cancel);
};

typedef struct hl_loop {
    hilock_loop ev;              /* the user's event loop (an adapter) */
    hilock_loop_timer *ltimer;   /* drives the heap and the deferred queue */
    uint64_t armed_at;           /* when ltimer fires; UINT64_MAX if idle */
    hl_timer *heap;              /* the earliest timer */
    hl_link defers;              /* deferred user callbacks, FIFO */
    int dispatching;             /* hl_loop_tick is running */
    int freeing;                 /* the client is being freed: no new work */
    int forked;                  /* a copy in a forked child: run nothing */
    void (*destroy)(struct hl_loop *l); /* frees the client, after a tick */
    void (*after_tick)(struct hl_loop *l); /* debug builds: check invariants */
    hilock_log_cb log_cb;
    void *log_data;
    char errstr[512];            /* the last error reply or connection error */
} hl_loop;

int hl_loop_init(hl_loop *l, const hilock_loop *ev);
void hl_loop_close(hl_loop *l);

void hl_timer_start(hl_loop *l, hl_timer *t, uint64_t delay_ms);
/* Start (or move) t to fire at `when` (monotonic ms; a past one fires at
 * the next tick). t->when keeps it after the timer fires or stops. */
void hl_timer_start_at(hl_loop *l, hl_timer *t, uint64_t when);
void hl_timer_stop(hl_loop *l, hl_timer *t);
static inline int hl_timer_armed(const hl_timer *t) { return t->armed; }

void hl_defer_push(hl_loop *l, hl_defer *d);
void hl_defer_cancel(hl_defer *d);
/* Run every deferred item with cancel = 1 (client teardown). */
void hl_defer_cancel_all(hl_loop *l);

void hl_set_error(hl_loop *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Rate limit for warnings that a bad moment repeats (one per hold or
 * request): 1, and *last = now, if the last one was HL_LOG_EVERY_MS ago or
 * more (or never). */
#define HL_LOG_EVERY_MS 1000
static inline int hl_log_due(uint64_t *last, uint64_t now) {
    if (*last != 0 && now - *last < HL_LOG_EVERY_MS) return 0;
    *last = now;
    return 1;
}
/* `s` (a lock name: any bytes) made safe for a log line into out (n
 * bytes): printable ASCII as is, '"' and '\\' and every other byte as
 * \xHH, cut with "..." when it does not fit (n >= 4). Returns out. */
const char *hl_log_quote(char *out, size_t n, const char *s);
/* Queue a message for the log callback (nothing when there is none). */
void hl_log(hl_loop *l, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
