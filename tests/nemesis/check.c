/* The checks of one case: read every worker's history (worker.c says what
 * a line is), merge them on the one CLOCK_MONOTONIC timeline, and measure
 *   - safety: believed-held intervals of the mutex or the fair lock that
 *     overlap (a hold ends at its "end" record: the last moment
 *     hilock_hold_lost() said 0), a writer of the read-write lock beside
 *     anyone, fences that do not strictly increase in grant order,
 *     semaphore holders beyond its permits, lost updates at the fenced
 *     resource (writes it accepted that its counter lacks);
 *   - order: fair lock grants while an older wait is pending;
 *   - liveness: waits that never ended, or ended later than wait_ms plus
 *     the promise's slack, or failed with a connection error while time
 *     was left; the longest time with no grant; the time from a release
 *     (with a wait pending elsewhere) to the next grant of such a wait, and
 *     to the next grant at all (idle); the time from the heal to the
 *     victim's first grant; one process's share of the grants;
 * and compare them with the case's promise. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hilock/hilock.h"
#include "nemesis/nemesis.h"

#define MAX_ITEMS 200000

typedef struct grant {
    int proc, slot;
    int reader;              /* a read hold (PRIM_RW) */
    int64_t at, end;         /* granted; last believed held */
    unsigned long long fence;
} grant;

typedef struct waitrec {
    int proc, slot;
    int reader;
    int64_t at, end;         /* end 0: never ended */
    int64_t wait_ms;
    int status;
} waitrec;

typedef struct rel {
    int proc;
    int64_t at;
    int ok;
} rel;

typedef struct hist {
    grant *g; int ng;
    waitrec *w; int nw;
    rel *r; int nr;
    long acked, lost_cbs;
    long codes[32];
} hist;

static int by_at(const void *a, const void *b) {
    const grant *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at;
}

static int rel_by_at(const void *a, const void *b) {
    const rel *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* One worker's history into h; open grants and waits by slot. */
static void read_history(const char *path, hist *h) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    int open_g[64], open_w[64], open_r[64];
    for (int i = 0; i < 64; i++) open_g[i] = open_w[i] = open_r[i] = -1;
    char line[256], op[8], phase[8];
    long long t, a, b;
    int proc, slot;
    int64_t last_t = 0;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "%lld %d %d %7s %7s %lld %lld", &t, &proc, &slot, op, phase, &a, &b) != 7) continue;
        if (slot < 0 || slot >= 64) continue;
        last_t = t;
        if (strcmp(op, "acq") == 0 && strcmp(phase, "invoke") == 0 && h->nw < MAX_ITEMS) {
            h->w[h->nw] = (waitrec){proc, slot, (int)b, t, 0, a, 0};
            open_w[slot] = h->nw++;
        } else if (strcmp(op, "acq") == 0 && open_w[slot] >= 0) {
            waitrec *w = &h->w[open_w[slot]];
            w->end = t;
            w->status = strcmp(phase, "ok") == 0 ? 0 : (int)a;
            open_w[slot] = -1;
            if (w->status < 0 && -w->status < 32) h->codes[-w->status]++;
            if (w->status == 0 && h->ng < MAX_ITEMS) {
                h->g[h->ng] = (grant){proc, slot, w->reader, t, 0, (unsigned long long)a};
                open_g[slot] = h->ng++;
            }
        } else if (strcmp(op, "end") == 0 && open_g[slot] >= 0) {
            h->g[open_g[slot]].end = a;
            open_g[slot] = -1;
        } else if (strcmp(op, "rel") == 0 && strcmp(phase, "invoke") == 0 && h->nr < MAX_ITEMS) {
            h->r[h->nr] = (rel){proc, t, 0};
            open_r[slot] = h->nr++;
        } else if (strcmp(op, "rel") == 0 && open_r[slot] >= 0) {
            h->r[open_r[slot]].ok = strcmp(phase, "ok") == 0;
            open_r[slot] = -1;
        } else if (strcmp(op, "wr") == 0 && strcmp(phase, "ok") == 0) {
            h->acked++;
        } else if (strcmp(op, "lost") == 0) {
            h->lost_cbs++;
        }
    }
    fclose(f);
    /* A hold with no end: the process died believing it; it ends with its
     * last word. */
    for (int s = 0; s < 64; s++)
        if (open_g[s] >= 0) h->g[open_g[s]].end = last_t;
}

static int stopped_during(const nem_timeline *tl, int proc, int64_t from, int64_t to) {
    return tl->stop_from[proc] != 0 && tl->stop_from[proc] < to && (tl->stop_until[proc] == 0 || tl->stop_until[proc] > from);
}

/* A fair lock's waits that joined no later than this after another are
 * not told apart (the joins race to Redis). */
#define ORDER_SLACK_MS 20

/* After a stop or a cut, a client may learn that its places lapsed only
 * at its next try (within a second). */
#define REJOIN_NS 2000000000LL

/* Was proc stopped, or cut off as the victim, at some time in [from, to]
 * (or so shortly before from that its places may have lapsed)? */
static int silenced(const nem_timeline *tl, int proc, int64_t from, int64_t to) {
    if (stopped_during(tl, proc, from - REJOIN_NS, to)) return 1;
    return tl->victim_cut && proc == tl->victim && tl->fault_ns && tl->fault_ns < to &&
           (tl->heal_ns == 0 || tl->heal_ns + REJOIN_NS > from);
}

static void say(nem_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(nem_result *r, const char *fmt, ...) {
    size_t n = strlen(r->why);
    if (n + 3 >= sizeof(r->why)) return;
    if (n) { strcat(r->why, "; "); n += 2; }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why + n, sizeof(r->why) - n, fmt, ap);
    va_end(ap);
    r->broken = 1;
}

static const char *code_name(int k) {
    switch (k) {
    case HILOCK_ETIMEDOUT: return "ETIMEDOUT";
    case HILOCK_ECANCELED: return "ECANCELED";
    case HILOCK_ECONN: return "ECONN";
    case HILOCK_EDEADLINE: return "EDEADLINE";
    case HILOCK_EBUSY: return "EBUSY";
    case HILOCK_EREADONLY: return "EREADONLY";
    case HILOCK_ELOADING: return "ELOADING";
    case HILOCK_EREPLY: return "EREPLY";
    case HILOCK_ELOST: return "ELOST";
    default: return NULL;
    }
}

void nem_result_codes(nem_result *acc) {
    size_t n = 0;
    acc->codes[0] = '\0';
    for (int k = 1; k < 32; k++) {
        const char *name = code_name(-k);
        if (acc->code_count[k] == 0 || k == -HILOCK_ETIMEDOUT || k == -HILOCK_ECANCELED || k == -HILOCK_EBUSY)
            continue;
        n += (size_t)snprintf(acc->codes + n, sizeof(acc->codes) - n, "%s%s:%ld", n ? " " : "",
                              name ? name : hilock_strerror(-k), acc->code_count[k]);
        if (n >= sizeof(acc->codes)) break;
    }
}

#define WORST_MAX(f) if (x->f > acc->f) acc->f = x->f
#define WORST_MIN(f) if (x->f < acc->f) acc->f = x->f

/* The worst of the runs: the fewest operations and grants, the most of
 * everything that goes wrong, the longest times; a share furthest from
 * 1; the reasons of every run that broke a promise, with its number
 * (run > 0; 0 for a cell run once). */
void nem_result_worst(nem_result *acc, const nem_result *x, int run, int first) {
    if (first) {
        *acc = *x;
        acc->why[0] = '\0';
    } else {
        WORST_MIN(ops); WORST_MIN(grants);
        WORST_MAX(timeouts); WORST_MAX(errors); WORST_MAX(busy);
        WORST_MAX(overlaps); WORST_MAX(max_overlap_ms); WORST_MAX(fence_regressions);
        WORST_MAX(over_permits); WORST_MAX(max_holders); WORST_MAX(stranded); WORST_MAX(late_waits);
        WORST_MAX(max_wait_over_ms); WORST_MAX(early_fails); WORST_MAX(stale_refused);
        WORST_MAX(lost_updates); WORST_MAX(max_gap_ms); WORST_MAX(max_handoff_ms); WORST_MAX(handoffs);
        WORST_MAX(max_idle_ms); WORST_MAX(max_handoff_free_ms);
        WORST_MAX(lost_holds); WORST_MAX(order_violations); WORST_MAX(max_order_ms); WORST_MAX(repl_overlaps);
        WORST_MIN(acked); WORST_MIN(accepted); WORST_MIN(counter);
        if (x->recovery_ms < 0 || (acc->recovery_ms >= 0 && x->recovery_ms > acc->recovery_ms))
            acc->recovery_ms = x->recovery_ms;
        if (x->share >= 0 && (acc->share < 0 || x->share < acc->share)) acc->share = x->share;
        for (int k = 0; k < 32; k++) WORST_MAX(code_count[k]);
        for (int p = 0; p < NEM_MAX_PROCS; p++) WORST_MIN(proc_grants[p]);
        acc->broken |= x->broken;
    }
    if (x->broken) {
        size_t n = strlen(acc->why);
        if (run > 0) snprintf(acc->why + n, sizeof(acc->why) - n, "%srun %d: %s", n ? "; " : "", run, x->why);
        else snprintf(acc->why + n, sizeof(acc->why) - n, "%s%s", n ? "; " : "", x->why);
    }
    nem_result_codes(acc);
}

void nem_check(const char *dir, const nem_workload *wl, const nem_timeline *tl,
               const nem_resource_stats *rs, const nem_promise *p, nem_result *out) {
    hist h;
    memset(&h, 0, sizeof(h));
    memset(out, 0, sizeof(*out));
    out->share = -1;
    h.g = calloc(MAX_ITEMS, sizeof(*h.g));
    h.w = calloc(MAX_ITEMS, sizeof(*h.w));
    h.r = calloc(MAX_ITEMS, sizeof(*h.r));
    if (!h.g || !h.w || !h.r) { free(h.g); free(h.w); free(h.r); out->broken = 1; snprintf(out->why, sizeof(out->why), "out of memory"); return; }
    for (int i = 0; i < wl->nprocs; i++) {
        char path[300];
        snprintf(path, sizeof(path), "%s/h%d.log", dir, i);
        read_history(path, &h);
    }
    qsort(h.g, (size_t)h.ng, sizeof(*h.g), by_at);
    qsort(h.r, (size_t)h.nr, sizeof(*h.r), rel_by_at);

    /* Safety: overlaps and fences (mutex, fair lock), holders at once
     * (semaphore), a writer beside anyone (read-write lock). An overlap
     * whose newcomer was granted in the replication window (tl->repl_*)
     * is counted apart. */
    int64_t max_end = 0;
    unsigned long long max_fence = 0;
    int exclusive = wl->prim == PRIM_MUTEX || wl->prim == PRIM_FAIR;
    for (int i = 0; i < h.ng; i++) {
        grant *g = &h.g[i];
        int64_t o = 0;
        if (exclusive) {
            /* how long an earlier holder went on believing after this
             * grant: "the newcomer acquired X ms before the holder saw
             * its loss" */
            if (max_end > g->at) o = max_end - g->at;
            if (i > 0 && g->fence <= max_fence) out->fence_regressions++;
        } else if (wl->prim == PRIM_RW) {
            for (int k = 0; k < i; k++)
                if (h.g[k].end > g->at && (!g->reader || !h.g[k].reader) && h.g[k].end - g->at > o)
                    o = h.g[k].end - g->at;
            if (i > 0 && (g->reader ? g->fence < max_fence : g->fence <= max_fence)) out->fence_regressions++;
        } else {
            int at_once = 1;
            for (int k = 0; k < i; k++)
                if (h.g[k].end > g->at) at_once++;
            if (at_once > out->max_holders) out->max_holders = at_once;
            if (at_once > wl->permits) out->over_permits++;
            for (int k = 0; k < i; k++)
                if (h.g[k].fence == g->fence) out->fence_regressions++;
        }
        if (o > 0 && tl->repl_from && g->at >= tl->repl_from && g->at <= tl->repl_until) {
            out->repl_overlaps++;
        } else if (o > 0) {
            out->overlaps++;
            if (o / 1e6 > out->max_overlap_ms) out->max_overlap_ms = (double)o / 1e6;
        }
        if (g->end > max_end) max_end = g->end;
        if (g->fence > max_fence) max_fence = g->fence;
    }
    if (wl->prim != PRIM_SEM) out->max_holders = out->overlaps ? 2 : h.ng > 0;

    /* Order (fair lock): a grant while another wait, made more than
     * ORDER_SLACK_MS earlier, is still pending is out of order:
     * that wait joined the queue first. Waits of a process that was
     * stopped or cut off while they were pending are left out: their
     * client went silent, and its places may be skipped (documented). */
    if (wl->prim == PRIM_FAIR)
        for (int i = 0; i < h.ng; i++) {
            grant *g = &h.g[i];
            int64_t g_inv = 0;
            for (int k = 0; k < h.nw; k++)
                if (h.w[k].proc == g->proc && h.w[k].slot == g->slot && h.w[k].end == g->at) g_inv = h.w[k].at;
            if (g_inv == 0 || silenced(tl, g->proc, g_inv, g->at)) continue;
            double worst = 0;
            for (int k = 0; k < h.nw; k++) {
                waitrec *w = &h.w[k];
                if ((w->proc == g->proc && w->slot == g->slot) || w->at >= g_inv - (int64_t)ORDER_SLACK_MS * 1000000)
                    continue;
                if (w->end != 0 && w->end <= g->at) continue;
                if (silenced(tl, w->proc, w->at, g->at)) continue;
                if ((double)(g_inv - w->at) / 1e6 > worst) worst = (double)(g_inv - w->at) / 1e6;
            }
            if (worst > 0) {
                out->order_violations++;
                if (worst > out->max_order_ms) out->max_order_ms = worst;
            }
        }

    /* The share of tl->share_proc among the grants of the fault. */
    if (tl->share_proc >= 0 && tl->fault_ns > 0) {
        int64_t until = tl->heal_ns ? tl->heal_ns : tl->end_ns;
        long all = 0, mine = 0;
        for (int i = 0; i < h.ng; i++)
            if (h.g[i].at >= tl->fault_ns && h.g[i].at < until) {
                all++;
                mine += h.g[i].proc == tl->share_proc;
            }
        if (all > 0) out->share = (double)mine * wl->nprocs / (double)all;
    }
    for (int i = 0; i < h.ng; i++)
        if (h.g[i].proc >= 0 && h.g[i].proc < NEM_MAX_PROCS) out->proc_grants[h.g[i].proc]++;

    /* Waits. */
    for (int i = 0; i < h.nw; i++) {
        waitrec *w = &h.w[i];
        out->ops++;
        if (w->end == 0) { out->stranded++; continue; }
        if (w->status == 0) out->grants++;
        else if (w->status == HILOCK_ETIMEDOUT) out->timeouts++;
        else if (w->status == HILOCK_EBUSY) out->busy++;
        else if (w->status != HILOCK_ECANCELED) out->errors++;
        if (w->status == HILOCK_ECANCELED || w->wait_ms < 0) continue;
        if (stopped_during(tl, w->proc, w->at, w->end)) continue;
        double over = (double)(w->end - w->at) / 1e6 - (double)w->wait_ms;
        if (over > out->max_wait_over_ms) out->max_wait_over_ms = over;
        if (over > p->wait_slack_ms) out->late_waits++;
        if ((w->status == HILOCK_ECONN || w->status == HILOCK_EDEADLINE) && over < -200) out->early_fails++;
    }
    out->lost_holds = h.lost_cbs;
    out->acked = h.acked;

    /* Liveness: gaps, handoffs, recovery. */
    int64_t prev = tl->start_ns;
    for (int i = 0; i < h.ng; i++) {
        int64_t gap = h.g[i].at - prev;
        if (gap / 1e6 > out->max_gap_ms) out->max_gap_ms = (double)gap / 1e6;
        prev = h.g[i].at;
    }
    if (tl->end_ns > prev && (tl->end_ns - prev) / 1e6 > out->max_gap_ms) out->max_gap_ms = (double)(tl->end_ns - prev) / 1e6;
    /* A release while waits of other processes were pending: how long
     * until one of those waits was served (a newcomer's grant does not
     * count; a wait never served counts as served at the end). */
    for (int i = 0; i < h.nr; i++) {
        rel *r = &h.r[i];
        if (!r->ok || r->at > tl->end_ns) continue;
        int64_t best = INT64_MAX;
        for (int k = 0; k < h.nw; k++) {
            waitrec *w = &h.w[k];
            if (w->proc == r->proc || w->at >= r->at || (w->end != 0 && w->end <= r->at) ||
                stopped_during(tl, w->proc, w->at, r->at + 1))
                continue;
            /* The victim cannot be served while the fault lasts. */
            if (tl->victim_cut && w->proc == tl->victim && r->at >= tl->fault_ns &&
                (tl->heal_ns == 0 || r->at < tl->heal_ns))
                continue;
            int64_t served = w->end != 0 && w->status == 0 ? w->end : tl->end_ns;
            if (served < best) best = served;
        }
        if (best == INT64_MAX) continue;
        double ms = (double)(best - r->at) / 1e6;
        out->handoffs++;
        if (ms > out->max_handoff_ms) out->max_handoff_ms = ms;
        /* less the holds of the grants made meanwhile (newcomers that won
         * the race): how long the lock lay free while those waits were
         * not served */
        int64_t held = 0;
        for (int k = 0; k < h.ng; k++) {
            grant *g = &h.g[k];
            if (g->at <= r->at || g->at >= best) continue;
            held += (g->end < best ? g->end : best) - g->at;
        }
        double free_ms = (double)(best - r->at - held) / 1e6;
        if (free_ms > out->max_handoff_free_ms) out->max_handoff_free_ms = free_ms;
        /* idle: to the next grant to anyone (the grants are sorted) */
        int lo = 0, hi = h.ng;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (h.g[mid].at <= r->at) lo = mid + 1;
            else hi = mid;
        }
        int64_t next = lo < h.ng ? h.g[lo].at : tl->end_ns;
        if (next > tl->end_ns) next = tl->end_ns;
        if ((double)(next - r->at) / 1e6 > out->max_idle_ms) out->max_idle_ms = (double)(next - r->at) / 1e6;
    }
    out->recovery_ms = -1;
    if (tl->heal_ns > 0)
        for (int i = 0; i < h.ng; i++)
            if (h.g[i].at >= tl->heal_ns && (tl->victim < 0 || h.g[i].proc == tl->victim)) {
                out->recovery_ms = (double)(h.g[i].at - tl->heal_ns) / 1e6;
                break;
            }

    /* The resource. */
    if (rs != NULL) {
        out->accepted = rs->accepted;
        out->counter = rs->counter;
        out->stale_refused = rs->stale_reads + rs->stale_writes;
        out->lost_updates = rs->accepted - rs->counter;
    }

    memcpy(out->code_count, h.codes, sizeof(out->code_count));
    nem_result_codes(out);

    /* The promise. */
    if (p->overlap_ms != NEM_ANY && out->overlaps > 0 && out->max_overlap_ms > p->overlap_ms)
        say(out, "overlap %.1f ms > %d ms", out->max_overlap_ms, p->overlap_ms);
    if (out->order_violations > 0)
        say(out, "%ld grants out of order (a wait %.0f ms older pending)", out->order_violations, out->max_order_ms);
    if (p->min_share_pct > 0 && out->share >= 0 && out->share * 100 < p->min_share_pct)
        say(out, "share %.2f < %.2f", out->share, p->min_share_pct / 100.0);
    if (wl->prim == PRIM_SEM && p->overlap_ms != NEM_ANY && out->over_permits > 0)
        say(out, "%ld grants beyond the %d permits", out->over_permits, wl->permits);
    if (wl->prim != PRIM_SEM && out->fence_regressions > 0 && p->lost_updates != NEM_ANY)
        say(out, "%ld fence regressions", out->fence_regressions);
    if (p->lost_updates != NEM_ANY && out->lost_updates > p->lost_updates)
        say(out, "%ld lost updates > %d", out->lost_updates, p->lost_updates);
    if (out->stranded > 0) say(out, "%ld waits never ended", out->stranded);
    if (out->late_waits > 0)
        say(out, "a wait ended %.0f ms past its wait_ms (slack %d ms)", out->max_wait_over_ms, p->wait_slack_ms);
    if (p->ride_through && out->early_fails > 0)
        say(out, "%ld waits failed on a connection error with time left", out->early_fails);
    if (p->idle_ms != NEM_ANY && out->max_idle_ms > p->idle_ms)
        say(out, "the lock idle %.0f ms after a release with a wait pending > %d ms", out->max_idle_ms, p->idle_ms);
    if (p->handoff_ms != NEM_ANY && out->max_handoff_free_ms > p->handoff_ms)
        say(out, "handoff %.0f ms (the lock free %.0f ms of it) > %d ms", out->max_handoff_ms,
            out->max_handoff_free_ms, p->handoff_ms);
    if (p->recovery_ms != NEM_ANY && tl->heal_ns > 0 && (out->recovery_ms < 0 || out->recovery_ms > p->recovery_ms)) {
        /* Not served at all: broken only if the run went on that long. */
        if (out->recovery_ms >= 0) say(out, "recovery %.0f ms > %d ms", out->recovery_ms, p->recovery_ms);
        else if ((double)(tl->end_ns - tl->heal_ns) / 1e6 >= p->recovery_ms)
            say(out, "no grant to the victim after the heal (bound %d ms)", p->recovery_ms);
    }
    free(h.g);
    free(h.w);
    free(h.r);
}
