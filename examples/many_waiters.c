/* many_waiters: thousands of waiters in one event loop, on a few lock names.
 *
 *     many_waiters [REDIS_URL [WAITERS [NAMES [HOLD_US]]]]
 *
 * Defaults: redis://127.0.0.1:6379, 5000 waiters, 4 names, HOLD_US 0.
 *
 * Every waiter asks for its lock at once (waiter i on name i % NAMES) and
 * waits forever. Whoever gets a lock holds it for HOLD_US microseconds (a
 * timer; 0 = release at once, from inside the acquire callback), then
 * releases it, which hands the lock to the next waiter on that name. hilock
 * queues waiters of one name locally and shares a single pub/sub
 * subscription per name, so a release costs one retry, not a herd of them.
 *
 * The program measures each handoff, from the hilock_release() call to the
 * next acquire callback on that name (monotonic clock), and checks the lock's
 * promises itself:
 *   - fencing tokens are strictly increasing per name;
 *   - holders of one name never overlap (a local `held` flag must be clear
 *     whenever a callback grants the lock);
 *   - every waiter gets exactly one callback, and it is a success.
 * It prints a short table and exits 1 if any promise was broken or anything
 * failed. At the end it asks Redis (PUBSUB NUMSUB, on a separate synchronous
 * hiredis connection) how many subscribers each name's channel has: one per
 * name is expected, however many waiters there were.
 *
 * Build: cc many_waiters.c $(pkg-config --cflags --libs hilock) -levent
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include <hilock/hilock.h>
#include <hilock/adapters/libevent.h>

#define NAME_LEN 64
#ifndef STALL_SECONDS
#define STALL_SECONDS 40 /* no acquisition for this long: report a stall */
#endif
#define MAX_REPORTS 10   /* violations printed in detail */

struct run;

/* One lock name and what we observed of it. */
struct name_state {
    struct run *run;
    char name[NAME_LEN];
    int held;              /* a local waiter holds it right now */
    hilock_hold *hold;     /* that hold */
    struct waiter *holder;
    size_t acquisitions;   /* grants so far */
    uint64_t first_fence, last_fence;
    uint64_t release_us;   /* when the last release was called; 0 = none pending */
    size_t queued;         /* waiters that asked for this name */
    int fifo;              /* granted in the order asked, so far */
    struct event *work;    /* the HOLD_US timer (one holder at a time) */
};

/* One waiter: one acquire request. */
struct waiter {
    struct run *run;
    unsigned idx;
    unsigned name;         /* index into run->names */
    size_t seq;            /* position among the waiters of its name */
    unsigned callbacks;    /* acquire callbacks received: must end as 1 */
    int status;            /* of the acquire */
    int released;          /* its release callback has run */
};

struct run {
    struct event_base *base;
    hilock_client *client;
    const char *url;
    struct name_state *names;
    struct waiter *waiters;
    size_t nwaiters, nnames;
    uint64_t hold_us;

    uint64_t *lat;          /* handoff latencies, us */
    size_t nlat;

    size_t granted, released, acquire_failed, release_failed;
    uint64_t t_start, t_end, last_progress;
    int violations;         /* broken promises, all kinds */
    int v_fence, v_overlap, v_callback; /* ... by kind */
    int v_lost;             /* holds reported lost (a failure, not a violation) */
    int errors;             /* failures that are not broken promises */
    int stopping;           /* finish() or the stall check has run */
    int stalled;            /* the stall check stopped the run */
    int closed;             /* the client's close callback has run */
    struct event *watchdog;

    long long numsub[64];   /* PUBSUB NUMSUB per name (first 64), -1 unknown */
    int numsub_ok;
};

static uint64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A broken promise: count it (overall and in *kind), print the first few. */
static void violation(struct run *run, int *kind, const char *fmt, ...) {
    va_list ap;
    run->violations++;
    (*kind)++;
    if (run->violations > MAX_REPORTS)
        return;
    fprintf(stderr, "VIOLATION: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
}

/* ---- A synchronous look at Redis, for PUBSUB NUMSUB -------------------- */

/* A small parse of the URL forms hilock accepts, enough for one side query:
 * redis://[user:pass@]host[:port][/db] and unix:///path[?db=N]. Returns -1
 * for anything else (the query is then skipped). */
struct target {
    char host[256];
    int port;
    char path[512];
    char user[128];
    char pass[256];
};

static int copy_part(char *dst, size_t n, const char *src, size_t len) {
    if (len >= n)
        return -1;
    memcpy(dst, src, len);
    dst[len] = '\0';
    return 0;
}

static int parse_target(const char *url, struct target *t) {
    memset(t, 0, sizeof *t);
    t->port = 6379;
    if (url == NULL)
        return copy_part(t->host, sizeof t->host, "127.0.0.1", 9);
    if (strncmp(url, "unix://", 7) == 0)
        return copy_part(t->path, sizeof t->path, url + 7, strcspn(url + 7, "?"));
    if (strncmp(url, "redis://", 8) != 0)
        return -1;
    const char *p = url + 8;
    size_t alen = strcspn(p, "/?");
    const char *at = NULL;
    for (size_t i = 0; i < alen; i++)
        if (p[i] == '@')
            at = p + i;
    if (at != NULL) {
        size_t ulen = (size_t)(at - p);
        const char *colon = memchr(p, ':', ulen);
        if (colon != NULL) {
            if (copy_part(t->user, sizeof t->user, p, (size_t)(colon - p)) != 0 ||
                copy_part(t->pass, sizeof t->pass, colon + 1, (size_t)(at - colon - 1)) != 0)
                return -1;
        } else if (copy_part(t->pass, sizeof t->pass, p, ulen) != 0) {
            return -1;
        }
        alen -= ulen + 1;
        p = at + 1;
    }
    const char *end = p + alen, *hend;
    if (*p == '[') {
        hend = memchr(p, ']', alen);
        if (hend == NULL || copy_part(t->host, sizeof t->host, p + 1, (size_t)(hend - p - 1)) != 0)
            return -1;
        hend++;
    } else {
        hend = memchr(p, ':', alen);
        if (hend == NULL)
            hend = end;
        if (copy_part(t->host, sizeof t->host, p, (size_t)(hend - p)) != 0)
            return -1;
    }
    if (t->host[0] == '\0')
        return copy_part(t->host, sizeof t->host, "127.0.0.1", 9) == 0 && hend == end ? 0 : -1;
    if (hend < end) {
        if (*hend != ':')
            return -1;
        char *stop;
        long port = strtol(hend + 1, &stop, 10);
        if (stop != end || port < 1 || port > 65535)
            return -1;
        t->port = (int)port;
    }
    return 0;
}

static redisContext *sync_connect(const char *url) {
    struct target t;
    struct timeval tv = {2, 0};
    if (parse_target(url, &t) != 0)
        return NULL;
    redisContext *rc = t.path[0] != '\0' ? redisConnectUnixWithTimeout(t.path, tv)
                                         : redisConnectWithTimeout(t.host, t.port, tv);
    if (rc == NULL || rc->err) {
        if (rc != NULL)
            redisFree(rc);
        return NULL;
    }
    redisSetTimeout(rc, tv);
    if (t.pass[0] != '\0') {
        redisReply *r = t.user[0] != '\0'
                            ? redisCommand(rc, "AUTH %s %s", t.user, t.pass)
                            : redisCommand(rc, "AUTH %s", t.pass);
        int ok = r != NULL && r->type != REDIS_REPLY_ERROR;
        if (r != NULL)
            freeReplyObject(r);
        if (!ok) {
            redisFree(rc);
            return NULL;
        }
    }
    return rc;
}

/* The key of `name` plus a suffix (":ch", ":fence"), per hilock.h. */
static int name_key(const char *name, const char *suffix, char *buf, size_t n) {
    int len = hilock_key("hilock:", name, buf, n);
    if (len < 0 || (size_t)len + strlen(suffix) + 1 > n)
        return -1;
    strcat(buf, suffix);
    return 0;
}

/* Subscribers of each name's channel. Called just after the last release:
 * the subscriptions are still there (they linger after the last waiter). */
static void query_numsub(struct run *run) {
    size_t n = run->nnames < 64 ? run->nnames : 64;
    for (size_t i = 0; i < 64; i++)
        run->numsub[i] = -1;
    redisContext *rc = sync_connect(run->url);
    if (rc == NULL)
        return;
    const char *argv[2 + 64];
    char keys[64][NAME_LEN + 32];
    argv[0] = "PUBSUB";
    argv[1] = "NUMSUB";
    for (size_t i = 0; i < n; i++) {
        if (name_key(run->names[i].name, ":ch", keys[i], sizeof keys[i]) != 0) {
            redisFree(rc);
            return;
        }
        argv[2 + i] = keys[i];
    }
    redisReply *r = redisCommandArgv(rc, (int)(2 + n), argv, NULL);
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 * n) {
        run->numsub_ok = 1;
        for (size_t i = 0; i < n; i++)
            if (r->element[2 * i + 1]->type == REDIS_REPLY_INTEGER)
                run->numsub[i] = r->element[2 * i + 1]->integer;
    }
    if (r != NULL)
        freeReplyObject(r);
    redisFree(rc);
}

/* The names are unique to this run; drop their fence keys afterwards so
 * that repeated runs leave nothing behind. (They would expire by themselves
 * after the client's fence_ttl_s, 7 days; fences of a name whose key is gone
 * still grow, from the server's clock.) */
static void cleanup_keys(struct run *run) {
    redisContext *rc = sync_connect(run->url);
    if (rc == NULL)
        return;
    for (size_t i = 0; i < run->nnames; i++) {
        char key[NAME_LEN + 32];
        if (name_key(run->names[i].name, ":fence", key, sizeof key) != 0)
            continue;
        redisReply *r = redisCommand(rc, "DEL %s", key);
        if (r != NULL)
            freeReplyObject(r);
    }
    redisFree(rc);
}

/* ---- The lock traffic --------------------------------------------------- */

static void on_closed(void *data) {
    struct run *run = data;
    run->closed = 1;
    run->client = NULL;
}

/* All waiters have had their outcome and every hold is released: stop. */
static void maybe_finish(struct run *run) {
    if (run->stopping || run->released + run->acquire_failed < run->nwaiters)
        return;
    run->stopping = 1;
    run->t_end = now_us();
    query_numsub(run);
    event_del(run->watchdog);
    /* Graceful close; once it is done nothing is left on the loop and
     * event_base_dispatch() returns. */
    hilock_client_close(run->client, on_closed, run);
}

static void on_released(int status, void *data) {
    struct waiter *w = data;
    struct run *run = w->run;
    if (w->released++)
        violation(run, &run->v_callback, "waiter %u: a second release callback", w->idx);
    run->released++;
    if (status != HILOCK_OK) {
        run->release_failed++;
        if (status == HILOCK_ELOST) {
            /* Not a broken promise (hilock told us), but the run failed:
             * the key expired or Redis lost it while it was held. */
            run->errors++;
            if (run->v_lost++ < MAX_REPORTS)
                fprintf(stderr, "LOST: waiter %u on %s: the lock was lost before release\n",
                        w->idx, run->names[w->name].name);
        } else if (run->errors++ < MAX_REPORTS)
            fprintf(stderr, "waiter %u: release failed: %s (%s)\n", w->idx,
                    hilock_strerror(status), hilock_client_errstr(run->client));
    }
    maybe_finish(run);
}

/* Give up the lock of `ns` (its current holder's). */
static void release_name(struct name_state *ns) {
    struct run *run = ns->run;
    hilock_hold *hold = ns->hold;
    struct waiter *w = ns->holder;
    ns->hold = NULL;
    ns->holder = NULL;
    ns->held = 0;            /* from here on we no longer use the resource */
    ns->release_us = now_us();
    int rc = hilock_release(hold, on_released, w);
    if (rc != HILOCK_OK) {
        fprintf(stderr, "hilock_release(%s): %s\n", ns->name, hilock_strerror(rc));
        run->errors++;
        run->release_failed++;
        run->released++;     /* no callback will come */
        ns->release_us = 0;
        maybe_finish(run);
    }
}

static void on_work_done(evutil_socket_t fd, short what, void *data) {
    (void)fd; (void)what;
    release_name(data);
}

static void on_acquired(hilock_hold *hold, int status, void *data) {
    struct waiter *w = data;
    struct run *run = w->run;
    struct name_state *ns = &run->names[w->name];
    uint64_t t = now_us();

    if (w->callbacks++ > 0) {
        violation(run, &run->v_callback, "waiter %u on %s: a second acquire callback (status %d)",
                  w->idx, ns->name, status);
        return;
    }
    w->status = status;
    if (status != HILOCK_OK) {
        run->acquire_failed++;
        if (!run->stopping && run->errors++ < MAX_REPORTS)
            fprintf(stderr, "waiter %u on %s: acquire failed: %s (%s)\n", w->idx,
                    ns->name, hilock_strerror(status), hilock_client_errstr(run->client));
        maybe_finish(run);
        return;
    }
    run->granted++;
    run->last_progress = t;

    uint64_t fence = hilock_hold_fence(hold);
    if (ns->acquisitions > 0 && fence <= ns->last_fence)
        violation(run, &run->v_fence, "%s: fencing token %" PRIu64 " after %" PRIu64 " (waiter %u)",
                  ns->name, fence, ns->last_fence, w->idx);
    if (ns->acquisitions == 0)
        ns->first_fence = fence;
    ns->last_fence = fence;
    if (w->seq != ns->acquisitions)
        ns->fifo = 0;
    ns->acquisitions++;

    if (ns->held) {
        /* Someone in this process still holds it: mutual exclusion broken.
         * Record it, give this grant back, and carry on. */
        violation(run, &run->v_overlap, "%s: granted to waiter %u while waiter %u holds it",
                  ns->name, w->idx, ns->holder != NULL ? ns->holder->idx : 0u);
        if (hilock_release(hold, on_released, w) != HILOCK_OK) {
            run->released++;
            maybe_finish(run);
        }
        return;
    }
    if (ns->release_us != 0) {
        run->lat[run->nlat++] = t - ns->release_us;
        ns->release_us = 0;
    }
    ns->held = 1;
    ns->hold = hold;
    ns->holder = w;

    if (run->hold_us == 0) {
        release_name(ns);
    } else {
        struct timeval tv = {(time_t)(run->hold_us / 1000000u),
                             (suseconds_t)(run->hold_us % 1000000u)};
        evtimer_add(ns->work, &tv);
    }
}

/* Once a second: if nothing was acquired for STALL_SECONDS, a wakeup was
 * lost. Report it and stop. */
static void on_watchdog(evutil_socket_t fd, short what, void *data) {
    struct run *run = data;
    (void)fd; (void)what;
    if (run->stopping || now_us() - run->last_progress < STALL_SECONDS * 1000000ull)
        return;
    fprintf(stderr, "STALL: no acquisition for %d s; %zu of %zu waiters acquired, "
            "%zu released\n", STALL_SECONDS, run->granted, run->nwaiters, run->released);
    for (size_t i = 0; i < run->nnames; i++) {
        struct name_state *ns = &run->names[i];
        fprintf(stderr, "  %s: %zu of %zu acquired, %s\n", ns->name, ns->acquisitions,
                ns->queued, ns->held ? "held" : "free");
    }
    run->stopping = 1;
    run->stalled = 1;
    run->errors++;
    run->t_end = now_us();
    event_del(run->watchdog);
    for (size_t i = 0; i < run->nnames; i++)
        event_del(run->names[i].work);
    /* Ends every pending wait with HILOCK_ECANCELED, synchronously. */
    hilock_client_free(run->client);
    run->client = NULL;
    event_base_loopbreak(run->base);
}

/* ---- Report -------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted values. */
static uint64_t pct(const uint64_t *v, size_t n, double p) {
    if (n == 0)
        return 0;
    size_t rank = (size_t)(p / 100.0 * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1];
}

static const char *okfail(int ok) { return ok ? "ok" : "FAILED"; }

static int report(struct run *run) {
    /* Callbacks: at least one each (a second one was reported as it came),
     * and every one a success. */
    size_t none = 0, bad = 0, unreleased = 0;
    for (size_t i = 0; i < run->nwaiters; i++) {
        struct waiter *w = &run->waiters[i];
        if (w->callbacks == 0)
            none++;
        else if (w->status != HILOCK_OK)
            bad++;
        else if (!w->released)
            unreleased++;
    }
    if (none > 0)
        violation(run, &run->v_callback, "%zu waiters never got a callback", none);
    int fifo = 1;
    for (size_t i = 0; i < run->nnames; i++)
        fifo &= run->names[i].fifo;

    double secs = (double)(run->t_end - run->t_start) / 1e6;
    qsort(run->lat, run->nlat, sizeof *run->lat, cmp_u64);

    printf("\n  %-32s %10s  %s\n", "name", "acquired", "fencing tokens");
    for (size_t i = 0; i < run->nnames; i++) {
        struct name_state *ns = &run->names[i];
        if (ns->acquisitions > 0)
            printf("  %-32s %10zu  %" PRIu64 "..%" PRIu64 "\n", ns->name, ns->acquisitions,
                   ns->first_fence, ns->last_fence);
        else
            printf("  %-32s %10zu  -\n", ns->name, ns->acquisitions);
    }
    printf("\n");
    printf("  %-24s %zu\n", "waiters", run->nwaiters);
    printf("  %-24s %zu\n", "names", run->nnames);
    printf("  %-24s %" PRIu64 "\n", "hold (us)", run->hold_us);
    printf("  %-24s %.3f s\n", "total time", secs);
    printf("  %-24s %.0f\n", "acquisitions/s", secs > 0 ? (double)run->granted / secs : 0.0);
    printf("  %-24s %zu\n", "handoffs measured", run->nlat);
    printf("  %-24s p50 %" PRIu64 "  p90 %" PRIu64 "  p99 %" PRIu64 "  max %" PRIu64 "\n",
           "handoff latency (us)", pct(run->lat, run->nlat, 50), pct(run->lat, run->nlat, 90),
           pct(run->lat, run->nlat, 99), run->nlat ? run->lat[run->nlat - 1] : 0);
    printf("  %-24s %s\n", "granted in request order", fifo ? "yes" : "no");
    if (run->numsub_ok) {
        printf("  %-24s", "subscribers per channel");
        for (size_t i = 0; i < run->nnames && i < 64; i++)
            printf(" %lld", run->numsub[i]);
        printf("%s (PUBSUB NUMSUB; at most 1 per name expected)\n", run->nnames > 64 ? " ..." : "");
    } else {
        printf("  %-24s %s\n", "subscribers per channel", "(not queried)");
    }
    printf("\n");
    printf("  %-44s %s\n", "fencing tokens strictly increasing per name", okfail(run->v_fence == 0));
    printf("  %-44s %s\n", "holders of a name never overlapped", okfail(run->v_overlap == 0));
    printf("  %-44s %s\n", "exactly one callback per waiter", okfail(run->v_callback == 0));
    printf("  %-44s %s\n", "every waiter acquired and released",
           okfail(bad == 0 && unreleased == 0 && none == 0 && run->release_failed == 0));
    printf("  %-44s %s\n", "no hold was lost", okfail(run->v_lost == 0));

    int fail = run->violations > 0 || run->errors > 0 || bad > 0 || unreleased > 0 ||
               run->release_failed > 0;
    if (run->violations > 0)
        printf("\nFAIL: %d violation(s) of the lock's guarantees\n", run->violations);
    else if (run->stalled)
        printf("\nFAIL: stalled (a wakeup was lost?); the waits left were cancelled\n");
    else if (fail)
        printf("\nFAIL: %zu acquire and %zu release failure(s)\n",
               run->acquire_failed, run->release_failed);
    else
        printf("\nPASS\n");
    return fail ? 1 : 0;
}

/* ---- Main ---------------------------------------------------------------- */

static int parse_count(const char *s, const char *what, unsigned long long max,
                       unsigned long long *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v > max || s[0] == '-') {
        fprintf(stderr, "bad %s: \"%s\" (0..%llu)\n", what, s, max);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    unsigned long long nwaiters = 5000, nnames = 4, hold_us = 0;
    const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    if (argc > 5 || (argc > 1 && strcmp(argv[1], "-h") == 0)) {
        fprintf(stderr, "usage: %s [REDIS_URL [WAITERS=5000 [NAMES=4 [HOLD_US=0]]]]\n", argv[0]);
        return 2;
    }
    if ((argc > 2 && parse_count(argv[2], "WAITERS", 10000000, &nwaiters) != 0) ||
        (argc > 3 && parse_count(argv[3], "NAMES", 100000, &nnames) != 0) ||
        (argc > 4 && parse_count(argv[4], "HOLD_US", 60000000, &hold_us) != 0))
        return 2;
    if (nwaiters == 0 || nnames == 0) {
        fprintf(stderr, "WAITERS and NAMES must be at least 1\n");
        return 2;
    }

    setvbuf(stdout, NULL, _IOLBF, 0); /* keep stdout and stderr in order */
    struct run run;
    memset(&run, 0, sizeof run);
    run.url = url;
    run.nwaiters = (size_t)nwaiters;
    run.nnames = (size_t)nnames;
    run.hold_us = hold_us;
    run.names = calloc(run.nnames, sizeof *run.names);
    run.waiters = calloc(run.nwaiters, sizeof *run.waiters);
    run.lat = calloc(run.nwaiters, sizeof *run.lat);
    /* Precise timers: by default libevent reads CLOCK_MONOTONIC_COARSE,
     * whose resolution is a kernel tick (often 4 ms), far too coarse for a
     * HOLD_US of a few hundred microseconds. */
    struct event_config *ecfg = event_config_new();
    if (ecfg != NULL) {
        event_config_set_flag(ecfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        run.base = event_base_new_with_config(ecfg);
        event_config_free(ecfg);
    }
    if (run.names == NULL || run.waiters == NULL || run.lat == NULL || run.base == NULL) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    run.watchdog = event_new(run.base, -1, EV_PERSIST, on_watchdog, &run);
    for (size_t i = 0; i < run.nnames; i++) {
        struct name_state *ns = &run.names[i];
        ns->run = &run;
        ns->fifo = 1;
        /* Names unique to this process, so that concurrent runs on one
         * Redis do not meet each other. */
        snprintf(ns->name, sizeof ns->name, "many_waiters:%ld:%zu", (long)getpid(), i);
        ns->work = evtimer_new(run.base, on_work_done, ns);
        if (ns->work == NULL) {
            fprintf(stderr, "evtimer_new failed\n");
            return 1;
        }
    }

    hilock_loop loop;
    hilock_libevent_init(&loop, run.base);
    hilock_config cfg;
    hilock_config_init(&cfg);
    cfg.url = url;
    int rc = hilock_client_new(&run.client, &cfg, &loop);
    if (rc != HILOCK_OK) {
        fprintf(stderr, "hilock_client_new(\"%s\"): %s\n", url, hilock_strerror(rc));
        return 1;
    }

    printf("many_waiters: %zu waiters on %zu names, hold %llu us, %s\n",
           run.nwaiters, run.nnames, hold_us, url);
    fflush(stdout);

    /* All acquires at once, waiting forever. They return at once; the
     * callbacks run from the loop below. */
    hilock_acquire_opts opts;
    hilock_acquire_opts_init(&opts);
    opts.wait_ms = HILOCK_WAIT_FOREVER;
    run.t_start = run.last_progress = now_us();
    for (size_t i = 0; i < run.nwaiters; i++) {
        struct waiter *w = &run.waiters[i];
        w->run = &run;
        w->idx = (unsigned)i;
        w->name = (unsigned)(i % run.nnames);
        w->seq = run.names[w->name].queued++;
        rc = hilock_acquire(run.client, run.names[w->name].name, &opts, on_acquired, w, NULL);
        if (rc != HILOCK_OK) {
            fprintf(stderr, "hilock_acquire #%zu: %s\n", i, hilock_strerror(rc));
            hilock_client_free(run.client); /* ends the earlier waits */
            return 1;
        }
    }
    struct timeval second = {1, 0};
    event_add(run.watchdog, &second);

    event_base_dispatch(run.base);

    if (run.client != NULL) {
        /* The loop stopped early (it should not): make sure we do not leak. */
        fprintf(stderr, "the loop stopped before the client closed\n");
        hilock_client_free(run.client);
        run.errors++;
    }
    int status = report(&run);
    cleanup_keys(&run);

    for (size_t i = 0; i < run.nnames; i++)
        event_free(run.names[i].work);
    event_free(run.watchdog);
    event_base_free(run.base);
    free(run.lat);
    free(run.waiters);
    free(run.names);
    return status;
}
