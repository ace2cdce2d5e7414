/* leader: a leader election among candidates, and an observer that sees
 * every change of leader without polling.
 *
 *     leader [REDIS_URL [CANDIDATES [TERMS]]]
 *
 * Defaults: redis://127.0.0.1:6379, 3 candidates, 6 terms.
 *
 * Each candidate is a client of its own (as a process of its own would
 * be) that campaigns for the election "leader-demo" with its address as
 * its value (hilock_campaign). The one elected leads for a term of 50 ms
 * (a timer), then resigns (hilock_resign): one of the others, woken by
 * the resignation, is elected at once, and the one that resigned stands
 * again after a rest of a term. An observer (hilock_observe, on a client
 * of its own) prints each change as it comes: a new leader with its
 * epoch, or nobody. The candidates stand once the observer has made its
 * first report (who leads now), so that it sees every term.
 *
 * At the end of the last term the campaigns still waiting are withdrawn
 * (hilock_wait_cancel), the last leader resigns, and once the observer
 * has seen that, everything is closed. The program checks the promises
 * itself:
 *   - never two leaders at once (a local flag);
 *   - epochs (the leadership's fencing token) strictly increase;
 *   - the observer reports every term, in order, with nobody between:
 *     leader, nobody, leader, nobody...;
 *   - no leadership is lost.
 * It exits 1 if a promise was broken or anything failed.
 *
 * Build: cc leader.c $(pkg-config --cflags --libs hilock) -levent
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include <hilock/hilock.h>
#include <hilock/adapters/libevent.h>

#define ELECTION "leader-demo"
#define MAX_CANDIDATES 16
#define TERM_MS 50
#define STALL_SECONDS 30 /* not over by then: report a stall and stop */

struct election;

struct candidate {
    struct election *e;
    char value[32];          /* what it stands with: its address */
    hilock_client *client;
    hilock_wait *campaign;   /* while it waits to lead */
    hilock_hold *leadership; /* while it leads */
    struct event *term;      /* the term's timer */
};

struct election {
    struct event_base *base;
    hilock_loop loop;
    struct candidate cand[MAX_CANDIDATES];
    int ncand, terms, served;
    int ending;              /* the last term has ended: nobody stands again */
    int closing;             /* the clients are being closed */
    int leaders;             /* candidates that believe they lead: 0 or 1 */
    uint64_t last_epoch;     /* the last one granted */
    hilock_client *watcher;
    hilock_observer *observer;
    uint64_t seen_epoch;     /* the last one the observer reported */
    int watching;            /* the observer has made its first report */
    int reported;            /* leaders the observer reported */
    int expect_nobody;       /* its next report should be nobody */
    struct event *stall;     /* the STALL_SECONDS timer */
    int failed, broken;
};

static void campaign(struct candidate *c);

static void on_closed(void *data) { (void)data; }

/* The observer has seen the last term end: stop observing, close every
 * client; the loop then exits. */
static void finish(struct election *e) {
    e->closing = 1;
    event_free(e->stall);
    e->stall = NULL;
    hilock_observe_stop(e->observer);
    hilock_client_close(e->watcher, on_closed, e);
    for (int i = 0; i < e->ncand; i++) hilock_client_close(e->cand[i].client, on_closed, e);
}

static void on_rest_end(evutil_socket_t fd, short what, void *data) {
    struct candidate *c = data;
    (void)fd;
    (void)what;
    if (!c->e->ending) campaign(c);
}

/* Stepped down: stand again after a rest of a term (meanwhile one of the
 * others, woken by the resignation, is elected). */
static void on_resigned(int status, void *data) {
    struct candidate *c = data;
    struct timeval rest = {0, TERM_MS * 1000};
    if (status != 0 && !(status == HILOCK_ECANCELED && c->e->closing)) {
        fprintf(stderr, "%s: resign: %s\n", c->value, hilock_strerror(status));
        c->e->failed++;
    }
    if (!c->e->ending && event_base_once(c->e->base, -1, EV_TIMEOUT, on_rest_end, c, &rest) != 0) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
}

/* The term is over: step down. After the last one, the other campaigns
 * are withdrawn first, so that nobody leads once it has ended. */
static void on_term_end(evutil_socket_t fd, short what, void *data) {
    struct candidate *c = data;
    struct election *e = c->e;
    (void)fd;
    (void)what;
    event_free(c->term);
    c->term = NULL;
    e->leaders--;
    if (++e->served == e->terms) {
        e->ending = 1;
        for (int i = 0; i < e->ncand; i++)
            if (e->cand[i].campaign != NULL) hilock_wait_cancel(e->cand[i].campaign);
    }
    hilock_hold *h = c->leadership;
    c->leadership = NULL;
    if (hilock_resign(h, on_resigned, c) != 0) e->failed++;
}

static void on_elected(hilock_hold *h, int status, void *data) {
    struct candidate *c = data;
    struct election *e = c->e;
    c->campaign = NULL;
    if (status == HILOCK_ECANCELED && e->ending) return; /* withdrawn at the end */
    if (status != 0) {
        fprintf(stderr, "%s: campaign: %s\n", c->value, hilock_strerror(status));
        e->failed++;
        return;
    }
    uint64_t epoch = hilock_hold_fence(h);
    if (++e->leaders != 1) {
        fprintf(stderr, "BROKEN: %s elected while another leads\n", c->value);
        e->broken++;
    }
    if (epoch <= e->last_epoch) {
        fprintf(stderr, "BROKEN: epoch %llu after %llu\n", (unsigned long long)epoch,
                (unsigned long long)e->last_epoch);
        e->broken++;
    }
    e->last_epoch = epoch;
    c->leadership = h;
    struct timeval term = {0, TERM_MS * 1000};
    c->term = evtimer_new(e->base, on_term_end, c);
    if (c->term == NULL || evtimer_add(c->term, &term) != 0) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
}

static void on_lost(hilock_hold *h, int why, void *data) {
    struct candidate *c = data;
    (void)h;
    fprintf(stderr, "%s: leadership lost: %s\n", c->value, hilock_strerror(why));
    c->e->failed++;
}

static void campaign(struct candidate *c) {
    hilock_acquire_opts opts;
    hilock_acquire_opts_init(&opts);
    opts.wait_ms = HILOCK_WAIT_FOREVER;
    opts.lost_cb = on_lost;
    opts.lost_data = c;
    int rc = hilock_campaign(c->client, ELECTION, c->value, &opts, on_elected, c, &c->campaign);
    if (rc != 0) {
        fprintf(stderr, "%s: hilock_campaign: %s\n", c->value, hilock_strerror(rc));
        c->e->failed++;
    }
}

static void on_stall(evutil_socket_t fd, short what, void *data) {
    struct election *e = data;
    (void)fd;
    (void)what;
    fprintf(stderr, "stalled: %d terms served, %d leaders seen in %d s\n", e->served, e->reported, STALL_SECONDS);
    e->failed++;
    finish(e);
}

/* The observer: who leads now, then every change, in order. */
static void on_leader(int status, uint64_t epoch, const char *value, size_t len, void *data) {
    struct election *e = data;
    (void)len;
    if (status != 0) {
        if (!(status == HILOCK_ECANCELED && e->closing)) {
            fprintf(stderr, "observer: %s\n", hilock_strerror(status));
            e->failed++;
        }
        return;
    }
    if (!e->watching) {
        /* The first report, of who leads before anyone here stands: the
         * candidates stand now, so that every term is seen. (A leader left
         * by an earlier run that died leads until its lease ends.) */
        e->watching = 1;
        if (epoch != 0) printf("observer: %s leads, from before (epoch %llu)\n", value, (unsigned long long)epoch);
        else printf("observer: nobody leads\n");
        e->seen_epoch = epoch;
        e->expect_nobody = epoch != 0;
        for (int i = 0; i < e->ncand; i++) campaign(&e->cand[i]);
        return;
    }
    if (epoch != 0) {
        printf("observer: %s leads, epoch %llu\n", value, (unsigned long long)epoch);
        if (e->expect_nobody || epoch <= e->seen_epoch) {
            fprintf(stderr, "BROKEN: a leader reported out of order (epoch %llu after %llu)\n",
                    (unsigned long long)epoch, (unsigned long long)e->seen_epoch);
            e->broken++;
        }
        e->seen_epoch = epoch;
        e->expect_nobody = 1;
        e->reported++;
        return;
    }
    printf("observer: nobody leads\n");
    if (!e->expect_nobody) {
        fprintf(stderr, "BROKEN: nobody reported twice\n");
        e->broken++;
    }
    e->expect_nobody = 0;
    if (e->ending && e->reported == e->terms) finish(e); /* the last term's end, seen */
}

int main(int argc, char **argv) {
    static struct election e;
    const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    e.ncand = argc > 2 ? atoi(argv[2]) : 3;
    e.terms = argc > 3 ? atoi(argv[3]) : 6;
    if (e.ncand < 1 || e.ncand > MAX_CANDIDATES || e.terms < 1) {
        fprintf(stderr, "usage: leader [REDIS_URL [CANDIDATES (1-%d) [TERMS]]]\n", MAX_CANDIDATES);
        return 2;
    }
    e.base = event_base_new();
    if (e.base == NULL) return 1;
    hilock_libevent_init(&e.loop, e.base);
    hilock_config cfg;
    hilock_config_init(&cfg);
    cfg.url = url;
    int rc = hilock_client_new(&e.watcher, &cfg, &e.loop);
    for (int i = 0; rc == 0 && i < e.ncand; i++) {
        struct candidate *c = &e.cand[i];
        c->e = &e;
        snprintf(c->value, sizeof c->value, "10.0.0.%d:8080", i + 1);
        rc = hilock_client_new(&c->client, &cfg, &e.loop);
    }
    if (rc != 0) {
        fprintf(stderr, "hilock_client_new(%s): %s\n", url, hilock_strerror(rc));
        return 1;
    }
    rc = hilock_observe(e.watcher, ELECTION, on_leader, &e, &e.observer);
    if (rc != 0) {
        fprintf(stderr, "hilock_observe: %s\n", hilock_strerror(rc));
        return 1;
    }
    struct timeval stall = {STALL_SECONDS, 0};
    e.stall = evtimer_new(e.base, on_stall, &e);
    if (e.stall == NULL || evtimer_add(e.stall, &stall) != 0) return 1;
    event_base_dispatch(e.base); /* until every client has closed */

    printf("%d terms among %d candidates, last epoch %llu; the observer saw %d leaders; %d failed, "
           "%d promises broken\n", e.served, e.ncand, (unsigned long long)e.last_epoch, e.reported,
           e.failed, e.broken);
    event_base_free(e.base);
    int complete = e.closing && e.served == e.terms && e.reported == e.terms;
    if (!complete) fprintf(stderr, "incomplete: %d terms, %d leaders seen\n", e.served, e.reported);
    return e.failed || e.broken || !complete ? 1 : 0;
}
