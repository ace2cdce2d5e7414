/* stats_races: adversarial tests of observability: the stats'
 * invariants after races, closes, shares and failures; the Prometheus text
 * under odd addresses and sizes; the log callback's rate. */
#include <fcntl.h>
#include <unistd.h>
#include <sys/wait.h>
#include <event2/event.h>
#include "support/lockenv.h"
#include "support/promcheck.h"
#include "support/nginx.h"
#include "support/sentinelenv.h"
#include "support/clusterenv.h"

static lockenv e;
static void setup(void) { lockenv_start_debuggable(&e); }
static void teardown(void) { lockenv_stop(&e); }

/* Every accepted acquire has exactly one outcome once its callback ran;
 * each grant has one wait observation; the errors of acquires are in
 * errors[] (which may hold more: releases, extends, lost). */
static void check_outcomes(const hilock_stats *s, const char *where) {
    uint64_t ended = s->granted + s->timeouts + s->busy + s->cancels + s->failed;
    cr_assert_eq(ended, s->acquires,
                 "%s: acquires %llu, granted %llu + timeouts %llu + busy %llu + cancels %llu + "
                 "failed %llu",
                 where, (unsigned long long)s->acquires, (unsigned long long)s->granted,
                 (unsigned long long)s->timeouts, (unsigned long long)s->busy,
                 (unsigned long long)s->cancels, (unsigned long long)s->failed);
    cr_assert_eq(s->wait.count, s->granted, "%s: wait histogram %llu != granted %llu", where,
                 (unsigned long long)s->wait.count, (unsigned long long)s->granted);
    uint64_t b = 0;
    for (int i = 0; i <= HILOCK_STATS_BUCKETS; i++) b += s->wait.bucket[i];
    cr_assert_eq(b, s->wait.count, "%s: buckets", where);
    cr_assert_geq(s->errors[-HILOCK_ETIMEDOUT], s->timeouts, "%s", where);
    cr_assert_geq(s->errors[-HILOCK_EBUSY], s->busy, "%s", where);
    cr_assert_geq(s->errors[-HILOCK_ECANCELED], s->cancels, "%s", where);
}

/* Nothing pending, nothing held. */
static void check_idle(const hilock_stats *s, const char *where) {
    check_outcomes(s, where);
    cr_assert_eq(s->waiters, 0, "%s: waiters %llu", where, (unsigned long long)s->waiters);
    cr_assert_eq(s->holds, 0, "%s: holds %llu", where, (unsigned long long)s->holds);
    cr_assert_eq(s->hold.count, s->releases, "%s: hold histogram %llu, releases %llu", where,
                 (unsigned long long)s->hold.count, (unsigned long long)s->releases);
}

/* After the linger: no name kept, no channel. */
static void check_drained(hilock_client *c, const char *where) {
    test_loop_for(e.base, 400);
    hilock_stats s = stats_of(c);
    check_idle(&s, where);
    cr_assert_eq(s.names, 0, "%s: names %llu", where, (unsigned long long)s.names);
    cr_assert_eq(s.subscriptions, 0, "%s: subscriptions %llu", where,
                 (unsigned long long)s.subscriptions);
}

/* ---- Outcomes and gauges -------------------------------------------------- */

TestSuite(stats_races, .init = setup, .fini = teardown, .timeout = 40);

/* A callback that releases what it got, and cancels the other waits it
 * knows about (a cancel racing grants that are queued already). */
typedef struct racer {
    hilock_wait **waits;
    int n, calls, granted, canceled_ok;
    int status[32];
} racer;

typedef struct slot {
    racer *r;
    int i;
} slot;

static void racer_cb(hilock_hold *h, int status, void *data) {
    slot *s = data;
    racer *r = s->r;
    r->calls++;
    r->status[s->i] = status;
    r->waits[s->i] = NULL;
    if (status == 0) {
        r->granted++;
        for (int j = 0; j < r->n; j++)
            if (r->waits[j] && hilock_wait_cancel(r->waits[j]) == 0) {
                r->canceled_ok++;
                r->waits[j] = NULL;
            }
        cr_assert_eq(hilock_release(h, NULL, NULL), 0);
    }
}

/* Waits of one owner share a grant; the first grantee's callback cancels
 * everything else (some already granted, some queued) and releases. */
Test(stats_races, cancels_racing_shared_grants_keep_the_books) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = acquire_now(&e, a, "race", NULL);
    cr_assert_eq(ga.status, 0);
    hilock_owner *o = hilock_owner_new(b);
    hilock_wait *waits[16];
    slot slots[16];
    racer r = {waits, 16, 0, 0, 0, {0}};
    for (int i = 0; i < 16; i++) {
        hilock_acquire_opts op = opts_wait(5000);
        if (i % 2 == 0) op.owner = o; /* half share the owner's grant */
        slots[i] = (slot){&r, i};
        cr_assert_eq(hilock_acquire(b, "race", &op, racer_cb, &slots[i], &waits[i]), 0);
    }
    test_loop_for(e.base, 100);
    hilock_stats s = stats_of(b);
    cr_assert_eq(s.waiters, 16);
    cr_assert_eq(s.acquires, 16);
    release_now(&e, ga.hold);
    for (int t = 0; t < 50 && r.calls < 16; t++) test_loop_for(e.base, 20);
    cr_assert_eq(r.calls, 16);
    s = stats_of(b);
    check_idle(&s, "after the race");
    cr_assert_eq(s.granted, (uint64_t)r.granted);
    cr_assert_eq(s.cancels, (uint64_t)(16 - r.granted));
    hilock_owner_free(o);
    check_drained(b, "b drained");
    check_drained(a, "a drained");
    hilock_client_free(a);
    hilock_client_free(b);
}

typedef struct staler {
    int calls, granted;
    hilock_hold *held[4];
    int sleep_ms;
} staler;

static void staler_cb(hilock_hold *h, int status, void *data) {
    staler *s = data;
    s->calls++;
    if (status == 0) s->held[s->granted++] = h;
    if (s->sleep_ms) { test_msleep(s->sleep_ms); s->sleep_ms = 0; }
}

/* Two waits of one owner granted together with a 60 ms lease and no
 * renewal; the first callback stalls the loop past the lease: the second
 * grant is stale, and its wait tries again (wait_retry). The outcome books
 * still balance and the gauges come back to zero. */
Test(stats_races, stale_shared_grant_retried_keeps_the_books) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = acquire_now(&e, a, "stale", NULL);
    hilock_owner *o = hilock_owner_new(b);
    staler st = {0, 0, {NULL}, 150};
    for (int i = 0; i < 2; i++) {
        hilock_acquire_opts op = opts_wait_lease(3000, 60);
        op.owner = o;
        op.no_renew = 1;
        cr_assert_eq(hilock_acquire(b, "stale", &op, staler_cb, &st, NULL), 0);
    }
    test_loop_for(e.base, 50);
    release_now(&e, ga.hold);
    for (int t = 0; t < 100 && st.calls < 2; t++) test_loop_for(e.base, 20);
    cr_assert_eq(st.calls, 2);
    cr_assert_eq(st.granted, 2);
    hilock_stats s = stats_of(b);
    check_outcomes(&s, "stale");
    /* The second grant went stale and was tried again: the shared hold
     * was lost (the first callback's, too), and a second try went out. */
    cr_assert_eq(s.holds_lost, 1, "holds_lost %llu", (unsigned long long)s.holds_lost);
    cr_assert_geq(s.tries, 2);
    cr_assert_eq(s.granted, 2);
    for (int i = 0; i < st.granted; i++) hilock_release(st.held[i], NULL, NULL);
    test_loop_for(e.base, 100);
    s = stats_of(b);
    check_idle(&s, "stale released");
    hilock_owner_free(o);
    check_drained(b, "stale drained");
    hilock_client_free(a);
    hilock_client_free(b);
}

/* Readers granted together behind a writer, semaphore shares, a fair
 * queue granted by message: the books balance after each. */
typedef struct keeper {
    int calls, granted;
    int status;             /* the last callback's */
    hilock_hold *held[32];
} keeper;

static void keep_cb(hilock_hold *h, int status, void *data) {
    keeper *k = data;
    k->calls++;
    k->status = status;
    cr_assert_lt(k->granted, 32);
    if (status == 0) k->held[k->granted++] = h;
}

static void release_all(keeper *k) {
    for (int i = 0; i < k->granted; i++) cr_assert_eq(hilock_release(k->held[i], NULL, NULL), 0);
    k->granted = 0;
}

Test(stats_races, rwlock_semaphore_fair_keep_the_books) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    keeper ka = {0}, kb = {0};
    /* rwlock: a writer, then 5 readers (one canceled), then a try. */
    cr_assert_eq(hilock_write_acquire(a, "rw", NULL, keep_cb, &ka, NULL), 0);
    test_loop_until(e.base, &ka.calls, 3000);
    cr_assert_eq(ka.granted, 1);
    hilock_wait *w = NULL;
    for (int i = 0; i < 5; i++)
        cr_assert_eq(hilock_read_acquire(b, "rw", NULL, keep_cb, &kb, i == 2 ? &w : NULL), 0);
    hilock_acquire_opts now = opts_wait(0);
    cr_assert_eq(hilock_read_acquire(b, "rw", &now, keep_cb, &kb, NULL), 0);
    test_loop_for(e.base, 100);
    cr_assert_eq(hilock_wait_cancel(w), 0);
    release_all(&ka);
    for (int t = 0; t < 100 && kb.calls < 6; t++) test_loop_for(e.base, 20);
    cr_assert_eq(kb.calls, 6);
    cr_assert_eq(kb.granted, 4);
    hilock_stats s = stats_of(b);
    check_outcomes(&s, "rwlock");
    cr_assert_eq(s.holds, 4);
    release_all(&kb);
    test_loop_for(e.base, 100);

    /* semaphore of 3: a takes 2, b asks 3 x 1 (one granted at once, two
     * wait), then a 2-permit try that is busy. */
    ka.calls = kb.calls = 0;
    cr_assert_eq(hilock_semaphore_acquire(a, "sem", 3, 2, NULL, keep_cb, &ka, NULL), 0);
    test_loop_until(e.base, &ka.calls, 3000);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(hilock_semaphore_acquire(b, "sem", 3, 1, NULL, keep_cb, &kb, NULL), 0);
    cr_assert_eq(hilock_semaphore_acquire(b, "sem", 3, 2, &now, keep_cb, &kb, NULL), 0);
    test_loop_for(e.base, 200);
    release_all(&ka);
    for (int t = 0; t < 100 && kb.calls < 4; t++) test_loop_for(e.base, 20);
    cr_assert_eq(kb.calls, 4);
    s = stats_of(b);
    check_outcomes(&s, "semaphore");
    release_all(&kb);
    test_loop_for(e.base, 100);

    /* fair: a holds, b queues 4 (a timeout among them), grants by message. */
    ka.calls = kb.calls = 0;
    cr_assert_eq(hilock_fair_acquire(a, "fair", NULL, keep_cb, &ka, NULL), 0);
    test_loop_until(e.base, &ka.calls, 3000);
    for (int i = 0; i < 4; i++) {
        hilock_acquire_opts op = opts_wait(i == 1 ? 100 : 5000);
        cr_assert_eq(hilock_fair_acquire(b, "fair", &op, keep_cb, &kb, NULL), 0);
    }
    test_loop_for(e.base, 300);
    release_all(&ka);
    for (int t = 0; t < 200 && kb.calls < 4; t++) {
        test_loop_for(e.base, 20);
        if (kb.granted > 0) release_all(&kb);
    }
    cr_assert_eq(kb.calls, 4);
    test_loop_for(e.base, 100);
    s = stats_of(b);
    check_idle(&s, "fair");
    cr_assert_eq(s.timeouts, 1);
    s = stats_of(a);
    check_idle(&s, "a");
    check_drained(b, "b drained");
    hilock_client_free(a);
    hilock_client_free(b);
}

/* hilock_client_close with pending waits, undelivered grants and holds:
 * in its callback (the last moment the client can be read) every acquire
 * has its outcome, nothing waits and nothing is held. */
typedef struct closing {
    hilock_client *c;
    int done;
    hilock_stats s;
} closing;

static void closed_cb(void *data) {
    closing *k = data;
    k->s = stats_of(k->c);
    k->done = 1;
}

Test(stats_races, close_with_waits_and_holds_balances) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = acquire_now(&e, a, "cl", NULL);
    keeper kb = {0};
    got g1 = acquire_now(&e, b, "cl-mine", NULL);
    cr_assert_eq(g1.status, 0);
    keeper ka = {0};
    cr_assert_eq(hilock_fair_acquire(a, "cl-fair", NULL, keep_cb, &ka, NULL), 0);
    cr_assert_eq(hilock_write_acquire(a, "cl-rw", NULL, keep_cb, &ka, NULL), 0);
    for (int t = 0; t < 100 && ka.calls < 2; t++) test_loop_for(e.base, 20);
    cr_assert_eq(ka.granted, 2);
    got g2 = acquire_now(&e, b, "cl-mine2", NULL); /* released by hand, reply not in yet */
    for (int i = 0; i < 5; i++)
        cr_assert_eq(hilock_acquire(b, "cl", NULL, keep_cb, &kb, NULL), 0);
    cr_assert_eq(hilock_fair_acquire(b, "cl-fair", NULL, keep_cb, &kb, NULL), 0);
    cr_assert_eq(hilock_read_acquire(b, "cl-rw", NULL, keep_cb, &kb, NULL), 0);
    test_loop_for(e.base, 100);
    cr_assert_eq(hilock_acquire(b, "cl-free", NULL, keep_cb, &kb, NULL), 0); /* grant in flight */
    rel r2 = {0, 0};
    cr_assert_eq(hilock_release(g2.hold, rel_cb, &r2), 0);
    closing k = {b, 0, {0}};
    hilock_client_close(b, closed_cb, &k);
    test_loop_until(e.base, &k.done, 5000);
    cr_assert_eq(k.done, 1);
    cr_assert_eq(kb.calls, 8);
    cr_assert_eq(r2.calls, 1);
    check_outcomes(&k.s, "in the close callback");
    cr_assert_eq(k.s.waiters, 0);
    cr_assert_eq(k.s.acquires, 10);
    cr_assert_eq(k.s.cancels, 8, "cancels %llu", (unsigned long long)k.s.cancels);
    cr_assert_eq(k.s.granted, 2);
    /* The close released the two holds in Redis (its own releases). */
    cr_assert_eq(k.s.holds, 0, "holds %llu in the close callback", (unsigned long long)k.s.holds);
    cr_assert_eq(k.s.hold.count, k.s.releases);
    cr_assert_geq(k.s.releases, 1);
    cr_expect_eq(lock_exists(&e.r, "cl-mine"), 0);
    release_now(&e, ga.hold);
    release_all(&ka);
    test_loop_for(e.base, 100);
    hilock_stats sa = stats_of(a);
    check_idle(&sa, "a");
    hilock_client_free(a);
}

typedef struct brkrec {
    int calls, status;
} brkrec;

static void brk_cb(int status, uint64_t fence, void *data) {
    brkrec *b = data;
    (void)fence;
    b->calls++;
    b->status = status;
}

/* A server that is down: every waiter, try or timed, fails; each has one
 * outcome, counted as failed with its code. */
Test(stats_races, econn_for_every_waiter) {
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", test_refused_port());
    hilock_client *c = lockenv_client_url(&e, url, 0);
    keeper k = {0};
    for (int i = 0; i < 8; i++) {
        hilock_acquire_opts op = opts_wait(i % 2 ? 0 : 300);
        char name[16];
        snprintf(name, sizeof(name), "d%d", i); /* a try behind a wait is EBUSY by design */
        cr_assert_eq(hilock_acquire(c, name, &op, keep_cb, &k, NULL), 0);
    }
    for (int t = 0; t < 100 && k.calls < 8; t++) test_loop_for(e.base, 20);
    cr_assert_eq(k.calls, 8);
    hilock_stats s = stats_of(c);
    check_idle(&s, "down");
    cr_assert_eq(s.failed, 8, "failed %llu busy %llu timeouts %llu", (unsigned long long)s.failed,
                 (unsigned long long)s.busy, (unsigned long long)s.timeouts);
    cr_assert_eq(s.errors[-HILOCK_ECONN], 8);
    /* A break's callback is counted by its code too. */
    brkrec b = {0, 0};
    cr_assert_eq(hilock_break(c, "d0", brk_cb, &b), 0);
    test_loop_until(e.base, &b.calls, 3000);
    cr_assert_eq(b.calls, 1);
    cr_assert_lt(b.status, 0);
    hilock_stats s2 = stats_of(c);
    cr_assert_eq(s2.errors[-b.status], s.errors[-b.status] + 1, "break's %s", hilock_strerror(b.status));
    cr_assert_eq(s2.acquires, s.acquires, "a break is no acquire");
    test_loop_for(e.base, 1200); /* the tries still queued fail after request_timeout_ms */
    check_drained(c, "down, drained");
    s2 = stats_of(c);
    cr_log_info("down: connections %llu, failures %llu", (unsigned long long)s2.connections,
                (unsigned long long)s2.node[0].connect_failures);
    cr_assert_eq(s.nnodes, 1);
    cr_assert_eq(s.nodes_total, 1);
    cr_assert_eq(s.connections_up, 0);
    cr_assert_gt(s.node[0].connect_failures, 0);
    cr_assert_eq(s.node[0].connects, 0);
    hilock_client_free(c);
}

/* errors[] counts every callback kind: a release and an extend of a lost
 * hold (ELOST), its lost callback (ELOST). */
static void ext_cb(int status, void *data) { rel_cb(status, data); }

Test(stats_races, errors_count_every_callback_kind) {
    hilock_client *c = lockenv_client(&e);
    lostrec lr = {0, 0, 0};
    hilock_acquire_opts op = opts_wait_lease(1000, 100);
    op.no_renew = 1;
    op.lost_cb = lost_cb;
    op.lost_data = &lr;
    got g = acquire_now(&e, c, "el", &op);
    cr_assert_eq(g.status, 0);
    got g2 = acquire_now(&e, c, "el2", &op);
    cr_assert_eq(g2.status, 0);
    /* Until both leases (100 ms) ran out and were told: a fixed 300 ms was
     * once too short under ASan on a loaded 2-vCPU machine. */
    for (int t = 0; t < 150 && lr.calls < 2; t++) test_loop_for(e.base, 20);
    cr_assert_eq(lr.calls, 2);
    rel x = {0, 0};
    int rc = hilock_hold_extend(g2.hold, 1000, ext_cb, &x);
    cr_assert(rc == HILOCK_ELOST || rc == 0);
    if (rc == 0) test_loop_until(e.base, &x.calls, 3000);
    cr_assert_eq(release_now(&e, g.hold), HILOCK_ELOST);
    cr_assert_eq(release_now(&e, g2.hold), HILOCK_ELOST);
    hilock_stats s = stats_of(c);
    check_idle(&s, "lost");
    cr_assert_eq(s.holds_lost, 2);
    cr_assert_eq(s.errors[-HILOCK_ELOST], 4u + (rc == 0 && x.status == HILOCK_ELOST),
                 "errors[ELOST] %llu", (unsigned long long)s.errors[-HILOCK_ELOST]);
    cr_assert_eq(s.releases, 2);
    hilock_client_free(c);
}

/* Stats read from inside callbacks are consistent, and in a forked child
 * the copy is readable. */
typedef struct inner {
    hilock_client *c;
    int calls;
    hilock_stats s;
} inner;

static void inner_cb(hilock_hold *h, int status, void *data) {
    inner *in = data;
    in->calls++;
    in->s = stats_of(in->c);
    cr_assert_eq(status, 0);
    cr_assert_eq(in->s.granted, 1);
    cr_assert_eq(in->s.holds, 1);
    cr_assert_eq(in->s.waiters, 0);
    (void)h;
}

Test(stats_races, stats_inside_callbacks_and_in_a_child) {
    hilock_client *c = lockenv_client(&e);
    inner in = {c, 0, {0}};
    cr_assert_eq(hilock_acquire(c, "in", NULL, inner_cb, &in, NULL), 0);
    test_loop_until(e.base, &in.calls, 3000);
    cr_assert_eq(in.calls, 1);
    pid_t pid = fork();
    if (pid == 0) {
        hilock_stats s;
        hilock_stats_init(&s);
        int ok = hilock_client_stats(c, &s) == 0 && s.granted == 1 && s.holds == 1 &&
                 s.acquires == 1;
        int len = hilock_stats_prometheus(NULL, 0, (const hilock_stats *const[]){&s}, NULL, 1);
        _exit(ok && len > 0 ? 0 : 1);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    hilock_client_free(c);
}

/* ---- The Prometheus text ---------------------------------------------------- */

static void promtool_ok(const hilock_stats *const *s, const char *const *labels, size_t n) {
    free(prom_exposition(s, labels, n));
}

/* Unix socket paths as long as they go, with UTF-8 characters across the
 * 80-byte cut of hilock_node_stats.addr, quotes, backslashes, newlines: the
 * text stays valid (UTF-8 label values). */
Test(stats_races, odd_unix_paths_stay_valid_prometheus) {
    static const char *const paths[] = {
        /* 78 ASCII bytes then "é" (2 bytes): cut in the middle */
        "/tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9xyz",
        /* "€" (3 bytes) across the cut */
        "/tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xe2\x82\xac",
        "/tmp/q\"u\\o\nte",
        "/tmp/\xff\xfe-not-utf8",
    };
    int made = 0;
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        char url[256];
        snprintf(url, sizeof(url), "unix://%s", paths[i]);
        hilock_config cfg;
        lockenv_config(&cfg, url);
        hilock_client *c = NULL;
        int rc = hilock_client_new(&c, &cfg, &e.loop);
        if (rc != 0) continue; /* a URL the parser refuses is fine */
        made++;
        hilock_stats s = stats_of(c);
        cr_assert_eq(s.nnodes, 1);
        const hilock_stats *sp[] = {&s};
        const char *labels[] = {"worker=\"\xc3\xa9\\\"\""};
        promtool_ok(sp, labels, 1);
        hilock_client_free(c);
    }
    cr_assert_geq(made, 2, "the cut paths were not even tried");
}

/* snprintf's contract at the edges: len 1, len exact (one short of the
 * NUL), len + 1. */
Test(stats_races, snprintf_edges) {
    hilock_client *c = lockenv_client(&e);
    got g = acquire_now(&e, c, "sn", NULL);
    release_now(&e, g.hold);
    hilock_stats s = stats_of(c);
    const hilock_stats *sp[] = {&s, &s};
    const char *labels[] = {"w=\"0\"", NULL};
    int len = hilock_stats_prometheus(NULL, 0, sp, labels, 2);
    cr_assert_gt(len, 0);
    char *full = malloc((size_t)len + 1), *buf = malloc((size_t)len + 2);
    cr_assert_eq(hilock_stats_prometheus(full, (size_t)len + 1, sp, labels, 2), len);
    memset(buf, 'Z', (size_t)len + 2);
    cr_assert_eq(hilock_stats_prometheus(buf, 1, sp, labels, 2), len);
    cr_assert_eq(buf[0], '\0');
    cr_assert_eq(buf[1], 'Z');
    memset(buf, 'Z', (size_t)len + 2);
    cr_assert_eq(hilock_stats_prometheus(buf, (size_t)len, sp, labels, 2), len);
    cr_assert_eq(buf[len - 1], '\0');
    cr_assert_eq(memcmp(buf, full, (size_t)len - 1), 0);
    cr_assert_eq(buf[len], 'Z');
    memset(buf, 'Z', (size_t)len + 2);
    cr_assert_eq(hilock_stats_prometheus(buf, (size_t)len + 1, sp, labels, 2), len);
    cr_assert_str_eq(buf, full);
    cr_assert_eq(buf[len + 1], 'Z');
    /* every cut is a prefix, NUL-terminated */
    for (size_t cut = 2; cut < (size_t)len; cut += 97) {
        memset(buf, 'Z', (size_t)len + 2);
        cr_assert_eq(hilock_stats_prometheus(buf, cut, sp, labels, 2), len);
        cr_assert_eq(strlen(buf), cut - 1);
        cr_assert_eq(memcmp(buf, full, cut - 1), 0);
    }
    promtool_ok(sp, labels, 2);
    free(full);
    free(buf);
    hilock_client_free(c);
}

/* Redlock's 16 masters (all down): every node listed and counted. */
Test(stats_races, many_nodes_listed_and_counted) {
    char url[1024];
    size_t off = (size_t)snprintf(url, sizeof(url), "redlock://");
    for (int i = 0; i < 16; i++)
        off += (size_t)snprintf(url + off, sizeof(url) - off, "%s127.0.0.1:%d", i ? "," : "",
                                test_refused_port());
    hilock_client *c = lockenv_client_url(&e, url, 0);
    keeper k = {0};
    hilock_acquire_opts op = opts_wait(0);
    cr_assert_eq(hilock_acquire(c, "rl", &op, keep_cb, &k, NULL), 0);
    for (int t = 0; t < 100 && k.calls < 1; t++) test_loop_for(e.base, 20);
    cr_assert_eq(k.calls, 1);
    hilock_stats s = stats_of(c);
    check_idle(&s, "redlock down");
    cr_assert_eq(s.nodes_total, 16, "nodes_total %u nnodes %u", s.nodes_total, s.nnodes);
    cr_assert_eq(s.nnodes, 16);
    for (unsigned i = 0; i < s.nnodes; i++) {
        cr_assert_eq(s.node[i].cmd_up, 0);
        cr_assert_neq(s.node[i].addr[0], '\0');
    }
    const hilock_stats *sp[] = {&s};
    promtool_ok(sp, NULL, 1);
    hilock_client_free(c);
}

/* ---- The log callback's rate ---------------------------------------------- */

typedef struct counter {
    int n, warnings;
    char last[256];
} counter;

static void count_log(int level, const char *msg, void *data) {
    counter *k = data;
    k->n++;
    k->warnings += level == HILOCK_LOG_WARNING;
    snprintf(k->last, sizeof(k->last), "%s", msg);
}

/* A server that goes away and stays away while a waiter waits: a loss is
 * said once per connection, not at every reconnect attempt. */
Test(stats_races, a_server_that_stays_down_is_not_spam) {
    counter k = {0, 0, ""};
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.log_cb = count_log;
    cfg.log_data = &k;
    /* A waiter that sends nothing while the server is away (a starving one
     * would refresh its place, meet the dead server and end). */
    cfg.starve_ms = HILOCK_STARVE_NEVER;
    hilock_client *a = lockenv_client(&e), *c = lockenv_client_cfg(&e, &cfg);
    got ga = acquire_now(&e, a, "down", NULL);
    cr_assert_eq(ga.status, 0);
    keeper kw = {0};
    cr_assert_eq(hilock_acquire(c, "down", NULL, keep_cb, &kw, NULL), 0);
    test_loop_for(e.base, 200);
    test_redis_kill(&e.r);
    test_loop_for(e.base, 2500);
    cr_assert_leq(k.n, 2, "%d messages in 2.5 s, last: %s", k.n, k.last);
    hilock_stats s = stats_of(c);
    cr_assert_gt(s.node[0].connect_failures, 0);
    cr_assert_eq(s.node[0].disconnects, 2);
    cr_assert_eq(s.connections_up, 0);
    cr_assert_eq(s.waiters, 1);
    hilock_client_free(c);
    hilock_client_free(a);
}

/* A server that stalls for 2.5 s with many requests queued: slow replies
 * are counted each, warned at most once a second. */
Test(stats_races, slow_replies_warned_once_a_second) {
    counter k = {0, 0, ""};
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.request_timeout_ms = 6000;
    cfg.log_cb = count_log;
    cfg.log_data = &k;
    hilock_client *c = lockenv_client_cfg(&e, &cfg);
    got g = acquire_now(&e, c, "warm", NULL);
    release_now(&e, g.hold);
    keeper kk = {0};
    pid_t p = test_redis_debug_sleep(&e.r, "2.5");
    test_msleep(100);
    for (int i = 0; i < 20; i++) {
        char name[16];
        snprintf(name, sizeof(name), "slow%d", i);
        cr_assert_eq(hilock_acquire(c, name, NULL, keep_cb, &kk, NULL), 0);
    }
    for (int t = 0; t < 300 && kk.calls < 20; t++) test_loop_for(e.base, 20);
    cr_assert_eq(kk.calls, 20);
    int st;
    waitpid(p, &st, 0);
    hilock_stats s = stats_of(c);
    cr_assert_geq(s.slow_replies, 20);
    cr_assert_leq(k.warnings, 1, "%d warnings, last: %s", k.warnings, k.last);
    release_all(&kk);
    test_loop_for(e.base, 100);
    s = stats_of(c);
    check_idle(&s, "slow");
    hilock_client_free(c);
}

/* A user that may not subscribe (ACL channels): the wait ends at once with
 * HILOCK_EAUTH naming the refusal (tests/acl/acl.c checks the text), counted as
 * failed, and the refusal is not a warning per attempt. */
Test(stats_races, subscribe_refused_is_not_spam) {
    redisReply *rep = test_redis_cmd(&e.r, "ACL SETUSER nosub on >pw ~* resetchannels +@all");
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "ACL SETUSER refused");
    freeReplyObject(rep);
    char url[128];
    snprintf(url, sizeof(url), "redis://nosub:pw@127.0.0.1:%d", e.r.port);
    counter k = {0, 0, ""};
    hilock_config cfg;
    lockenv_config(&cfg, url);
    cfg.log_cb = count_log;
    cfg.log_data = &k;
    hilock_client *a = lockenv_client(&e), *c = lockenv_client_cfg(&e, &cfg);
    got ga = acquire_now(&e, a, "nosub", NULL);
    cr_assert_eq(ga.status, 0);
    keeper kw = {0};
    hilock_acquire_opts op = opts_wait(2500);
    cr_assert_eq(hilock_acquire(c, "nosub", &op, keep_cb, &kw, NULL), 0);
    test_loop_until(e.base, &kw.calls, 3500);
    cr_assert_eq(kw.calls, 1);
    cr_assert_eq(kw.status, HILOCK_EAUTH, "%s", hilock_strerror(kw.status));
    test_loop_for(e.base, 500); /* the name's linger, and any retry */
    cr_assert_leq(k.warnings, 3, "%d warnings, last: %s", k.warnings, k.last);
    hilock_stats s = stats_of(c);
    check_idle(&s, "nosub");
    cr_assert_eq(s.failed, 1);
    cr_assert_eq(s.errors[-HILOCK_EAUTH], 1);
    release_now(&e, ga.hold);
    check_drained(c, "nosub drained");
    hilock_client_free(c);
    hilock_client_free(a);
}

/* ---- nginx's hilock_stats ------------------------------------------------- */

static test_nginx ngx;
static char scrape[1 << 20];

static void ngx_setup(void) {
    test_http_rlimit();
    lockenv_start(&e);
}
static void ngx_teardown(void) {
    test_nginx_free(&ngx);
    lockenv_stop(&e);
}

TestSuite(stats_races_nginx, .init = ngx_setup, .fini = ngx_teardown, .timeout = 40);

/* GET /metrics, checked by promtool; the body. */
static char *scrape_checked(void) {
    char *body, said[4096];
    int st = test_http_fetch(ngx.port, "GET /metrics HTTP/1.0\r\nHost: t\r\n\r\n", scrape,
                             sizeof(scrape), &body, 5000);
    cr_assert_eq(st, 200, "GET /metrics: %d", st);
    int rc = promcheck(body, strlen(body), said, sizeof(said));
    cr_assert_eq(rc, 0, "promtool: %d: %s\n%.2000s", rc, said, body);
    return body;
}

/* Lines of `body` that start with `prefix`, and whether two are the same
 * series (the same name and labels): Prometheus drops such a scrape's
 * samples ("duplicate sample"), which promtool does not check. */
static int duplicate_series(const char *body, const char *prefix, char *dup, size_t n) {
    const char *lines[64];
    size_t lens[64];
    int k = 0;
    for (const char *l = body; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        if (strncmp(l, prefix, strlen(prefix)) != 0) continue;
        const char *sp = strchr(l, '}');
        if (sp == NULL || k == 64) continue;
        lens[k] = (size_t)(sp - l);
        lines[k++] = l;
    }
    for (int i = 0; i < k; i++)
        for (int j = i + 1; j < k; j++)
            if (lens[i] == lens[j] && memcmp(lines[i], lines[j], lens[i]) == 0) {
                snprintf(dup, n, "%.*s", (int)lens[i], lines[i]);
                return 1;
            }
    return 0;
}

/* A hilock_redis name= of 200 "é" (400 bytes): the label is cut to fit its
 * slot, and must not be cut inside a character (promtool rejects invalid
 * UTF-8); nor may a byte that is not UTF-8 pass. */
Test(stats_races_nginx, long_utf8_name_label_stays_valid) {
    static const char *const tails[] = {"", "x"}; /* both parities of the cut */
    for (int t = 0; t < 2; t++) {
        char http[1024], *p = http;
        p += sprintf(p, "hilock_redis %s name=%s", e.r.url, tails[t]);
        for (int i = 0; i < 200; i++) p += sprintf(p, "\xc3\xa9");
        sprintf(p, ";");
        cr_assert_eq(test_nginx_start(&ngx, 1, http, "location = /metrics { hilock_stats; }"), 0);
        scrape_checked();
        cr_assert_eq(test_nginx_quit(&ngx, 10000), 0);
        test_nginx_free(&ngx);
    }
    char http[256];
    snprintf(http, sizeof(http), "hilock_redis %s name=bad\xff\xfe;", e.r.url);
    cr_assert_eq(test_nginx_start(&ngx, 1, http, "location = /metrics { hilock_stats; }"), 0);
    scrape_checked();
}

/* Two hilock_redis of one URL (http's, and a server's with its own
 * timeout) are two clients per worker: with one label they would be two
 * samples of one series (a scrape Prometheus rejects; promtool does not
 * see it), so nginx -t refuses that; with a name= each, two series. */
Test(stats_races_nginx, two_clients_of_one_url_are_two_series) {
    char http[256], server[512], dup[512], out[4096];
    snprintf(http, sizeof(http), "hilock_redis %s timeout=1s;", e.r.url);
    snprintf(server, sizeof(server),
             "hilock_redis %s timeout=2s; location = /metrics { hilock_stats; }", e.r.url);
    cr_assert_neq(test_nginx_check(1, http, server, out, sizeof(out)), 0,
                  "nginx -t accepts two clients with one label");
    cr_assert(strstr(out, "share the label") != NULL, "nginx -t said:\n%s", out);
    snprintf(http, sizeof(http), "hilock_redis %s timeout=1s name=one;", e.r.url);
    snprintf(server, sizeof(server),
             "hilock_redis %s timeout=2s name=two; location = /metrics { hilock_stats; }", e.r.url);
    cr_assert_eq(test_nginx_start(&ngx, 2, http, server), 0);
    const char *body = NULL;
    int k = 0;
    /* each worker publishes when it starts: wait for all four samples */
    for (long long until = test_now_ms() + 5000; test_now_ms() < until; test_msleep(100)) {
        body = scrape_checked();
        k = 0;
        for (const char *l = strstr(body, "\nhilock_waiters{"); l; l = strstr(l + 1, "\nhilock_waiters{"))
            k++;
        if (k == 4) break;
    }
    cr_assert_eq(k, 4, "hilock_waiters samples: %d", k);
    cr_assert_not(duplicate_series(body, "hilock_waiters{", dup, sizeof(dup)),
                  "two samples of one series: %s", dup);
    cr_assert_eq(test_nginx_quit(&ngx, 10000), 0);
    cr_assert_eq(test_nginx_problems(&ngx, out, sizeof(out)), 0, "%s", out);
}

/* ---- The handoff histogram ------------------------------------------------- */

/* A release message that led to no grant (the lock was taken again before
 * the try, here: a message with the lock still held, and the wait that
 * heard it timing out) must not be "the release message" of a later
 * grant that no message led to: a free lock taken at once is no handoff. */
Test(stats_races, handoff_is_not_measured_from_a_stale_message) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client_url(&e, e.r.url, 5000);
    got ga = acquire_now(&e, a, "ho", NULL);
    keeper kb = {0};
    hilock_acquire_opts op = opts_wait(400);
    cr_assert_eq(hilock_acquire(b, "ho", &op, keep_cb, &kb, NULL), 0);
    test_loop_for(e.base, 100);
    char ch[300];
    hilock_key("hilock:", "ho", ch, sizeof(ch) - 4);
    strcat(ch, ":ch");
    cr_assert_eq(test_redis_int(&e.r, "PUBLISH %s x", ch), 1); /* a release message, no release */
    test_loop_until(e.base, &kb.calls, 2000);
    cr_assert_eq(kb.calls, 1);
    hilock_stats s = stats_of(b);
    cr_assert_eq(s.timeouts, 1);
    cr_assert_eq(s.wakeups, 1);
    release_now(&e, ga.hold);
    test_loop_for(e.base, 300); /* b keeps the name (linger 5 s) */
    cr_assert_eq(stats_of(b).names, 1);
    got gb = acquire_now(&e, b, "ho", NULL); /* free: granted at once */
    cr_assert_eq(gb.status, 0);
    s = stats_of(b);
    cr_assert_eq(s.granted, 1);
    cr_assert_eq(s.handoff.count, 0, "a handoff of %llu us measured from a message 700 ms old",
                 (unsigned long long)s.handoff.sum_us);
    release_now(&e, gb.hold);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Sentinel: which nodes are listed ------------------------------------ */

static test_sentinel sen;
static void sen_setup(void) { lockenv_start_sentinels(&e, &sen); }
static void sen_teardown(void) { lockenv_stop_sentinels(&e, &sen); }

TestSuite(stats_races_sentinel, .init = sen_setup, .fini = sen_teardown, .timeout = 40);

/* The nodes of a Sentinel client: the master the sentinels name and the
 * sentinels; the address-less "to be asked" seed never. Every listed
 * node's address is a real one, and the totals add up. */
Test(stats_races_sentinel, nodes_are_the_master_and_the_sentinels) {
    hilock_config cfg;
    lockenv_config(&cfg, sen.url);
    cfg.request_timeout_ms = 4000;
    hilock_client *c = lockenv_client_cfg(&e, &cfg);
    hilock_stats s = stats_of(c); /* before the master is known */
    for (unsigned i = 0; i < s.nnodes; i++)
        cr_assert(strncmp(s.node[i].addr, "?", 1) != 0, "node %u: %s", i, s.node[i].addr);
    got g = acquire_now(&e, c, "sn", NULL);
    cr_assert_eq(g.status, 0);
    s = stats_of(c);
    char master[64], list[1024] = "";
    snprintf(master, sizeof(master), "127.0.0.1:%d", sen.node[0].port);
    int found = 0;
    uint64_t up = 0;
    for (unsigned i = 0; i < s.nnodes; i++) {
        found += strcmp(s.node[i].addr, master) == 0;
        up += (uint64_t)s.node[i].cmd_up + (uint64_t)s.node[i].sub_up;
        size_t l = strlen(list);
        snprintf(list + l, sizeof(list) - l, " %s(%d,%d)", s.node[i].addr, s.node[i].cmd_up,
                 s.node[i].sub_up);
    }
    cr_assert_eq(found, 1, "the master %s is listed %d times:%s", master, found, list);
    cr_assert_eq(s.nnodes, s.nodes_total);
    cr_assert_eq(up, s.connections_up, "connections_up %llu, nodes say %llu:%s",
                 (unsigned long long)s.connections_up, (unsigned long long)up, list);
    /* The master and the three sentinels (the documented list, since the
     * docs were corrected: they said the master alone). */
    cr_assert_eq(s.nnodes, 1 + TEST_SENTINELS, "nodes:%s", list);
    for (int i = 0; i < TEST_SENTINELS; i++) {
        char at[64];
        snprintf(at, sizeof(at), "127.0.0.1:%d", sen.sentinel[i].port);
        cr_assert(strstr(list, at) != NULL, "sentinel %s not listed:%s", at, list);
    }
    release_now(&e, g.hold);
    hilock_client_free(c);
}

/* ---- Cluster: the nodes listed -------------------------------------------- */

static clusterenv ce;
static void ce_setup(void) { clusterenv_start(&ce); }
static void ce_teardown(void) { clusterenv_stop(&ce); }

TestSuite(stats_races_cluster, .init = ce_setup, .fini = ce_teardown, .timeout = 40);

/* A client seeded at a replica, by the name "localhost": 30 names over the
 * three masters, each taken and given back; the books balance, every node
 * is listed once (no address twice, whatever the seed was called), and
 * the totals are the nodes' sums. */
Test(stats_races_cluster, nodes_listed_once_books_balance) {
    char url[64];
    snprintf(url, sizeof(url), "redis://localhost:%d", ce.cl.node[3].port);
    hilock_config cfg;
    cluster_config(&cfg, url);
    hilock_client *c = cluster_client_cfg(&ce, &cfg);
    keeper k = {0};
    for (int round = 0; round < 3; round++) {
        k.calls = 0;
        for (int i = 0; i < 10; i++) {
            char name[16];
            snprintf(name, sizeof(name), "cn%d", round * 10 + i);
            cr_assert_eq(hilock_acquire(c, name, NULL, keep_cb, &k, NULL), 0);
        }
        for (int t = 0; t < 250 && k.calls < 10; t++) event_base_loop(ce.base, EVLOOP_ONCE);
        cr_assert_eq(k.calls, 10);
        release_all(&k);
    }
    for (int t = 0; t < 50; t++) {
        struct timeval tv = {0, 10000};
        event_base_loopexit(ce.base, &tv);
        event_base_dispatch(ce.base);
    }
    hilock_stats s = stats_of(c);
    check_idle(&s, "cluster");
    cr_assert_eq(s.acquires, 30);
    cr_assert_eq(s.granted, 30);
    cr_assert_eq(s.nnodes, s.nodes_total);
    char list[1024] = "";
    uint64_t up = 0;
    for (unsigned i = 0; i < s.nnodes; i++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof(list) - l, " %s(%d,%d)", s.node[i].addr, s.node[i].cmd_up,
                 s.node[i].sub_up);
        up += (uint64_t)s.node[i].cmd_up + (uint64_t)s.node[i].sub_up;
        for (unsigned j = 0; j < i; j++)
            cr_assert_str_neq(s.node[i].addr, s.node[j].addr, "listed twice:%s", list);
    }
    cr_log_info("cluster client's nodes:%s", list);
    cr_assert_eq(up, s.connections_up, "connections_up %llu, nodes %llu:%s",
                 (unsigned long long)s.connections_up, (unsigned long long)up, list);
    cr_assert_geq(s.nnodes, 3, "%s", list);
    const hilock_stats *sp[] = {&s};
    promtool_ok(sp, NULL, 1);
    hilock_client_free(c);
}

/* ---- Freeing from inside callbacks ------------------------------------------ */

typedef struct freer {
    hilock_client *c;
    int calls, freed, canceled;
    hilock_stats before;
} freer;

static void free_in_cb(hilock_hold *h, int status, void *data) {
    freer *f = data;
    (void)h;
    f->calls++;
    if (status == HILOCK_ECANCELED) f->canceled++;
    if (status == 0 && !f->freed) {
        f->before = stats_of(f->c);
        f->freed = 1;
        hilock_client_free(f->c); /* the others get ECANCELED before it returns */
    }
}

/* A grantee frees its client with other waits pending, a hold of a second
 * name live, and a release in flight: every other callback runs once
 * (ECANCELED) and nothing is touched after the free (ASan). */
Test(stats_races, free_from_a_grant_callback) {
    hilock_client *a = lockenv_client(&e), *b = lockenv_client(&e);
    got ga = acquire_now(&e, a, "fr", NULL);
    got gb = acquire_now(&e, b, "fr-held", NULL);
    got gr = acquire_now(&e, b, "fr-rel", NULL);
    freer f = {b, 0, 0, 0, {0}};
    for (int i = 0; i < 4; i++) cr_assert_eq(hilock_acquire(b, "fr", NULL, free_in_cb, &f, NULL), 0);
    /* Less than starve_ms (100 ms): the grant then comes by b's own try,
     * after the release's answer; a grant by message to a starving wait
     * may overtake it. */
    test_loop_for(e.base, 50);
    rel r = {0, 0};
    cr_assert_eq(hilock_release(gr.hold, rel_cb, &r), 0);
    release_now(&e, ga.hold);
    for (int t = 0; t < 100 && f.calls < 4; t++) test_loop_for(e.base, 20);
    cr_assert_eq(f.calls, 4);
    cr_assert_eq(f.freed, 1);
    cr_assert_eq(f.canceled, 3);
    /* Read in the grantee's callback: its own grant counted, three waiting. */
    cr_assert_eq(f.before.granted, 3);
    cr_assert_eq(f.before.waiters, 3);
    cr_assert_eq(r.calls, 1, "the release of fr-rel was told before the free");
    cr_assert_eq(f.before.holds, 2, "fr-held and fr: %llu", (unsigned long long)f.before.holds);
    cr_assert_eq(f.before.acquires, 6);
    (void)gb;
    hilock_client_free(a);
}

static hilock_client *log_victim;
static int log_freed;

static void free_in_log(int level, const char *msg, void *data) {
    (void)level; (void)msg; (void)data;
    if (log_victim == NULL) return;
    hilock_stats s = stats_of(log_victim);
    cr_assert_eq(s.connections_up, 0, "connections_up %llu as the loss is told",
                 (unsigned long long)s.connections_up);
    hilock_client_free(log_victim);
    log_victim = NULL;
    log_freed++;
}

/* The log callback is a hilock callback: it may read the statistics and
 * free the client (here on the warning of a lost connection). */
Test(stats_races, free_from_the_log_callback) {
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.log_cb = free_in_log;
    hilock_client *c = lockenv_client_cfg(&e, &cfg);
    keeper k = {0};
    got g = acquire_now(&e, c, "lg", NULL);
    cr_assert_eq(g.status, 0);
    cr_assert_eq(hilock_acquire(c, "lg2", NULL, keep_cb, &k, NULL), 0);
    cr_assert_eq(hilock_acquire(c, "lg", NULL, keep_cb, &k, NULL), 0);
    test_loop_for(e.base, 100);
    log_victim = c;
    test_redis_kill(&e.r);
    for (int t = 0; t < 100 && !log_freed; t++) test_loop_for(e.base, 20);
    cr_assert_eq(log_freed, 1);
    cr_assert_eq(k.calls, 2, "every pending wait's callback ran");
    test_loop_for(e.base, 200);
}

/* A server that goes away and comes back on its port, under a waiter:
 * each connection's loss is one warning and its return one info; the
 * node's counters and the gauges say the same; the waiter is served. */
Test(stats_races, server_back_counts_match_the_log) {
    counter k = {0, 0, ""};
    hilock_config cfg;
    lockenv_config(&cfg, e.r.url);
    cfg.log_cb = count_log;
    cfg.log_data = &k;
    hilock_client *c = lockenv_client_cfg(&e, &cfg);
    keeper kw = {0};
    hilock_acquire_opts op = opts_wait(8000);
    cr_assert_eq(hilock_acquire(c, "back", &op, keep_cb, &kw, NULL), 0);
    test_loop_until(e.base, &kw.calls, 3000);
    release_all(&kw);
    kw.calls = 0;
    /* someone else holds it (no persistence: the restart frees it) */
    char key[256];
    hilock_key("hilock:", "back", key, sizeof(key));
    test_loop_for(e.base, 100);
    cr_assert_eq(test_redis_int(&e.r, "SET %s other", key), -1); /* +OK: not an integer */
    cr_assert_eq(test_redis_int(&e.r, "EXISTS %s", key), 1);
    cr_assert_eq(hilock_acquire(c, "back", &op, keep_cb, &kw, NULL), 0);
    test_loop_for(e.base, 200);
    hilock_stats s = stats_of(c);
    cr_assert_eq(s.connections_up, 2);
    cr_assert_eq(s.subscriptions, 1);
    int port = e.r.port;
    test_redis_kill(&e.r);
    test_loop_for(e.base, 500);
    s = stats_of(c);
    cr_assert_eq(s.connections_up, 0);
    cr_assert_eq(s.connections, 2, "both being made again");
    cr_assert_eq(s.node[0].disconnects, 2);
    cr_assert_eq(s.waiters, 1);
    test_redis_stop(&e.r);
    cr_assert_eq(test_redis_start(&e.r, port, NULL), 0);
    test_loop_until(e.base, &kw.calls, 5000);
    cr_assert_eq(kw.calls, 1);
    cr_assert_eq(kw.granted, 1);
    /* (The subscriber connection comes back on its own backoff: on a
     * loaded machine, later than the grant.) */
    long long until = test_now_ms() + 3000;
    do {
        test_loop_for(e.base, 50);
        s = stats_of(c);
    } while (s.connections_up != 2 && test_now_ms() < until);
    cr_assert_eq(s.connections_up, 2);
    cr_assert_eq(s.node[0].reconnects, 2);
    cr_assert_eq(s.node[0].connects, 4);
    cr_assert_eq(s.node[0].disconnects, 2);
    cr_assert_eq(k.warnings, 2, "%d warnings of %d messages, last: %s", k.warnings, k.n, k.last);
    cr_assert_eq(k.n, 4, "%d messages, last: %s", k.n, k.last);
    release_all(&kw);
    check_drained(c, "back drained");
    hilock_client_free(c);
}
