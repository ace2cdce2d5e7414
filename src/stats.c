/* Statistics: hilock_client_stats() gathers what each layer counts (the
 * core's hl_counts, the net's redirects and slow replies, each
 * connection's connects and losses) and the gauges it can walk;
 * hilock_stats_prometheus() writes any number of such snapshots as
 * Prometheus text, so that a multi-process server (nginx's workers) can
 * copy them to shared memory and expose them together. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "core/core.h"

static const uint64_t bounds_us[HILOCK_STATS_BUCKETS] = HILOCK_STATS_BOUNDS_US;

void hl_histogram_add(hilock_histogram *h, uint64_t us) {
    unsigned i = 0;
    while (i < HILOCK_STATS_BUCKETS && us > bounds_us[i]) i++;
    h->bucket[i]++;
    h->count++;
    h->sum_us += us;
}

void hilock_stats_init_size(hilock_stats *s, size_t size) {
    if (s == NULL || size < sizeof(size_t)) return;
    memset(s, 0, size);
    s->size = size;
}

/* ---- Gathering ------------------------------------------------------------ */

static void conn_add(hilock_node_stats *o, const hl_conn *k, int *up) {
    *up = k->state == HL_CONN_READY;
    o->connects += k->connects;
    o->reconnects += k->reconnects;
    o->connect_failures += k->failed_attempts;
    o->disconnects += k->drops;
}

/* A connection counts as open while it is up or being (re)made: a
 * subscriber connection that was never wanted is neither. */
static int conn_open(const hl_conn *k) {
    return k->state != HL_CONN_DOWN || hl_timer_armed(&k->retry);
}

static void nodes_gather(hilock_client *c, hilock_stats *s) {
    for (hl_node *n = hl_topo_first(&c->topo); n; n = hl_topo_next(&c->topo, n)) {
        /* A node with no address is no server: Redlock's `all`, which
         * stands for every master (its states mirror theirs), or a
         * Sentinel's master not named yet. */
        if (n->addr.host == NULL && n->addr.path == NULL) continue;
        hilock_node_stats one, *o = s->nnodes < HILOCK_STATS_NODES ? &s->node[s->nnodes++] : &one;
        memset(o, 0, sizeof(*o));
        hl_addr_text(&n->addr, o->addr, sizeof(o->addr));
        conn_add(o, &n->cmd, &o->cmd_up);
        conn_add(o, &n->sub, &o->sub_up);
        s->nodes_total++;
        s->connections += (uint64_t)conn_open(&n->cmd) + (uint64_t)conn_open(&n->sub);
        s->connections_up += (uint64_t)o->cmd_up + (uint64_t)o->sub_up;
    }
}

int hilock_client_stats(const hilock_client *cc, hilock_stats *out) {
    if (cc == NULL || out == NULL || out->size < sizeof(size_t)) return HILOCK_EINVAL;
    hilock_client *c = (hilock_client *)cc; /* the walks below only read */
    const hl_counts *k = &c->counts;
    const hl_net *net = &c->topo.net;
    hilock_stats s;
    memset(&s, 0, sizeof(s));
    s.size = out->size;
    s.acquires = k->acquires;
    s.granted = k->granted;
    s.timeouts = k->timeouts;
    s.busy = k->busy;
    s.cancels = k->cancels;
    s.failed = k->failed;
    memcpy(s.errors, k->errors, sizeof(s.errors));
    s.releases = k->releases;
    s.holds_lost = k->holds_lost;
    s.tries = k->tries;
    s.renewals = k->renewals;
    s.renewals_late = k->renewals_late;
    s.wakeups = k->wakeups;
    s.fallbacks = k->fallbacks;
    s.redirects_moved = net->moved;
    s.redirects_ask = net->asked;
    s.slow_replies = net->slow_replies;
    s.waiters = k->waiters;
    s.holds = k->holds;
    s.names = c->names.nnames;
    for (hl_name *n = hl_names_first(c); n; n = hl_names_next(c, n))
        s.subscriptions += n->sub == HL_SUB_PENDING || n->sub == HL_SUB_ACTIVE;
    s.wait = k->wait;
    s.handoff = k->handoff;
    s.hold = k->hold;
    nodes_gather(c, &s);
    hl_struct_export(out, out->size, &s, sizeof(s));
    return 0;
}

/* ---- Prometheus text ------------------------------------------------------ */

/* An snprintf-like writer: counts what it would write past the end. */
typedef struct text {
    char *buf;
    size_t len, pos;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    va_list ap;
    size_t room = t->pos < t->len ? t->len - t->pos : 0;
    va_start(ap, fmt);
    int n = vsnprintf(room ? t->buf + t->pos : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) t->pos += (size_t)n;
}

/* The length of the valid UTF-8 sequence at s (1 to 4), or 0. */
static size_t utf8_seq(const unsigned char *s) {
    size_t len;
    uint32_t cp;
    if (s[0] < 0x80) return 1;
    if ((s[0] & 0xe0) == 0xc0) len = 2, cp = s[0] & 0x1f;
    else if ((s[0] & 0xf0) == 0xe0) len = 3, cp = s[0] & 0x0f;
    else if ((s[0] & 0xf8) == 0xf0) len = 4, cp = s[0] & 0x07;
    else return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0; /* the NUL too */
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

/* A label value, escaped as the format asks (\\, \", \n). Label values
 * are UTF-8: a byte that is not (a socket path's, or a multi-byte character
 * cut by hilock_node_stats.addr's size) is written as U+FFFD. */
static void put_value(text *t, const char *v) {
    while (*v) {
        size_t k = utf8_seq((const unsigned char *)v);
        if (k == 0) { put(t, "\xef\xbf\xbd"); v++; continue; }
        if (*v == '\\') put(t, "\\\\");
        else if (*v == '"') put(t, "\\\"");
        else if (*v == '\n') put(t, "\\n");
        else put(t, "%.*s", (int)k, v);
        v += k;
    }
}

/* "name{labels,own} " : the caller's labels, then the sample's own (`own`
 * is already label syntax, or NULL). */
static void put_name(text *t, const char *name, const char *labels, const char *own) {
    int a = labels && *labels, b = own && *own;
    put(t, "%s", name);
    if (a || b) put(t, "{%s%s%s}", a ? labels : "", a && b ? "," : "", b ? own : "");
    put(t, " ");
}

static void head(text *t, const char *name, const char *type, const char *help) {
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

typedef struct family {
    const char *name, *type, *help;
    size_t offset; /* of a uint64_t in hilock_stats */
    const char *own;
} family;

#define F(name, type, field, own, help) {name, type, help, offsetof(hilock_stats, field), own}
static const family plain[] = {
    F("hilock_acquire_calls_total", "counter", acquires, NULL,
      "Acquires accepted (every primitive, reentrant ones too)."),
    F("hilock_releases_total", "counter", releases, NULL, "Final releases sent to Redis."),
    F("hilock_holds_lost_total", "counter", holds_lost, NULL,
      "Holds found lost: expired, taken over, or not renewed in time."),
    F("hilock_tries_total", "counter", tries, NULL, "Try scripts sent (acquire attempts, fair joins)."),
    F("hilock_renewals_total", "counter", renewals, NULL, "Watchdog renewals sent."),
    F("hilock_renewals_late_total", "counter", renewals_late, NULL,
      "Renewals confirmed with less than a third of the lease left."),
    F("hilock_wakeups_total", "counter", wakeups, NULL, "Release and grant messages received."),
    F("hilock_fallback_wakeups_total", "counter", fallbacks, NULL,
      "Waits woken by their fallback timer (a lease that may have run out)."),
    F("hilock_slow_replies_total", "counter", slow_replies, NULL,
      "Replies later than a third of request_timeout_ms."),
    F("hilock_waiters", "gauge", waiters, NULL, "Pending waits."),
    F("hilock_names", "gauge", names, NULL, "Lock names the client keeps."),
    F("hilock_holds", "gauge", holds, NULL, "Live holds."),
    F("hilock_subscriptions", "gauge", subscriptions, NULL, "Channels subscribed or being subscribed."),
    F("hilock_connections", "gauge", connections, NULL, "Connections open or being opened."),
    F("hilock_connections_up", "gauge", connections_up, NULL, "Connections ready."),
};
static const family outcomes[] = {
    F("hilock_acquires_total", "counter", granted, "outcome=\"granted\"",
      "Acquires ended, by outcome (the callback's status)."),
    F(NULL, NULL, timeouts, "outcome=\"timeout\"", NULL),
    F(NULL, NULL, busy, "outcome=\"busy\"", NULL),
    F(NULL, NULL, cancels, "outcome=\"canceled\"", NULL),
    F(NULL, NULL, failed, "outcome=\"failed\"", NULL),
};
static const family redirects[] = {
    F("hilock_redirects_total", "counter", redirects_moved, "kind=\"moved\"",
      "Redis Cluster redirects followed, by kind."),
    F(NULL, NULL, redirects_ask, "kind=\"ask\"", NULL),
};
#undef F

static uint64_t field(const hilock_stats *s, size_t offset) {
    uint64_t v;
    memcpy(&v, (const char *)s + offset, sizeof(v));
    return v;
}

/* One family (its first entry names it; the rest add samples with their
 * own labels), one sample per client per entry. */
static void put_family(text *t, const family *f, size_t nf, const hilock_stats *const *s,
                       const char *const *labels, size_t n) {
    head(t, f[0].name, f[0].type, f[0].help);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < nf; j++) {
            put_name(t, f[0].name, labels ? labels[i] : NULL, f[j].own);
            put(t, "%llu\n", (unsigned long long)field(s[i], f[j].offset));
        }
}

static const char *const code_names[HILOCK_STATS_CODES] = {
    NULL, "EINVAL", "ENOMEM", "EURL", "ETIMEDOUT", "ECANCELED", "ECONN", "EREPLY", "EPROTO",
    "ELOST", "EBUSY", "ECLOSED", "EAUTH", "ELOOP", "EDEADLINE", "EREADONLY", "EOOM",
    "ELOADING", "ESCRIPT", "EEVICTION", "EFORK", "EREPLICAS", "EPERMITS", "ETLS"};

static void put_errors(text *t, const hilock_stats *const *s, const char *const *labels, size_t n) {
    head(t, "hilock_errors_total", "counter",
         "Callbacks (acquire, release, extend, break, lost) that got an error, by code.");
    for (size_t i = 0; i < n; i++)
        for (int k = 1; k < HILOCK_STATS_CODES; k++) {
            if (s[i]->errors[k] == 0) continue;
            char own[48];
            if (code_names[k]) snprintf(own, sizeof(own), "code=\"%s\"", code_names[k]);
            else snprintf(own, sizeof(own), "code=\"%d\"", -k);
            put_name(t, "hilock_errors_total", labels ? labels[i] : NULL, own);
            put(t, "%llu\n", (unsigned long long)s[i]->errors[k]);
        }
}

static void put_histogram(text *t, const char *name, const char *help, size_t offset,
                          const hilock_stats *const *s, const char *const *labels, size_t n) {
    char full[64], own[32];
    head(t, name, "histogram", help);
    for (size_t i = 0; i < n; i++) {
        const hilock_histogram *h = (const hilock_histogram *)(const void *)((const char *)s[i] + offset);
        const char *l = labels ? labels[i] : NULL;
        uint64_t cum = 0;
        snprintf(full, sizeof(full), "%s_bucket", name);
        for (int b = 0; b <= HILOCK_STATS_BUCKETS; b++) {
            cum += h->bucket[b];
            if (b < HILOCK_STATS_BUCKETS) snprintf(own, sizeof(own), "le=\"%g\"", (double)bounds_us[b] / 1e6);
            else snprintf(own, sizeof(own), "le=\"+Inf\"");
            put_name(t, full, l, own);
            put(t, "%llu\n", (unsigned long long)cum);
        }
        snprintf(full, sizeof(full), "%s_sum", name);
        put_name(t, full, l, NULL);
        put(t, "%.6f\n", (double)h->sum_us / 1e6);
        snprintf(full, sizeof(full), "%s_count", name);
        put_name(t, full, l, NULL);
        put(t, "%llu\n", (unsigned long long)h->count);
    }
}

typedef struct node_family {
    const char *name, *type, *help;
    size_t offset; /* in hilock_node_stats */
} node_family;

static const node_family node_families[] = {
    {"hilock_node_connects_total", "counter", "Connections made to the node (both kinds).",
     offsetof(hilock_node_stats, connects)},
    {"hilock_node_reconnects_total", "counter", "Connections made again after one was lost.",
     offsetof(hilock_node_stats, reconnects)},
    {"hilock_node_connect_failures_total", "counter", "Connection attempts that failed.",
     offsetof(hilock_node_stats, connect_failures)},
    {"hilock_node_disconnects_total", "counter", "Ready connections lost.",
     offsetof(hilock_node_stats, disconnects)},
};

static void put_node_label(char *own, size_t len, const hilock_node_stats *o, const char *extra) {
    text t = {own, len, 0};
    char addr[sizeof(o->addr) + 1]; /* NUL-terminated whatever the snapshot says */
    memcpy(addr, o->addr, sizeof(o->addr));
    addr[sizeof(o->addr)] = '\0';
    put(&t, "node=\"");
    put_value(&t, addr);
    put(&t, "\"%s", extra ? extra : "");
}

static void put_nodes(text *t, const hilock_stats *const *s, const char *const *labels, size_t n) {
    char own[512]; /* an address of 80 bytes, each written as U+FFFD: 240, and the rest */
    for (size_t f = 0; f < sizeof(node_families) / sizeof(node_families[0]); f++) {
        const node_family *nf = &node_families[f];
        head(t, nf->name, nf->type, nf->help);
        for (size_t i = 0; i < n; i++)
            for (unsigned j = 0; j < s[i]->nnodes && j < HILOCK_STATS_NODES; j++) {
                uint64_t v;
                memcpy(&v, (const char *)&s[i]->node[j] + nf->offset, sizeof(v));
                put_node_label(own, sizeof(own), &s[i]->node[j], NULL);
                put_name(t, nf->name, labels ? labels[i] : NULL, own);
                put(t, "%llu\n", (unsigned long long)v);
            }
    }
    head(t, "hilock_node_up", "gauge", "1 if the connection to the node is ready, by kind.");
    for (size_t i = 0; i < n; i++)
        for (unsigned j = 0; j < s[i]->nnodes && j < HILOCK_STATS_NODES; j++) {
            const hilock_node_stats *o = &s[i]->node[j];
            put_node_label(own, sizeof(own), o, ",connection=\"command\"");
            put_name(t, "hilock_node_up", labels ? labels[i] : NULL, own);
            put(t, "%d\n", o->cmd_up);
            put_node_label(own, sizeof(own), o, ",connection=\"subscriber\"");
            put_name(t, "hilock_node_up", labels ? labels[i] : NULL, own);
            put(t, "%d\n", o->sub_up);
        }
}

int hilock_stats_prometheus(char *buf, size_t len, const hilock_stats *const *stats,
                            const char *const *labels, size_t n) {
    if ((buf == NULL && len > 0) || (stats == NULL && n > 0)) return HILOCK_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (stats[i] == NULL || stats[i]->size < sizeof(hilock_stats)) return HILOCK_EINVAL;
    text t = {buf, len, 0};
    if (len > 0) buf[0] = '\0';
    put_family(&t, outcomes, sizeof(outcomes) / sizeof(outcomes[0]), stats, labels, n);
    for (size_t f = 0; f < sizeof(plain) / sizeof(plain[0]); f++)
        put_family(&t, &plain[f], 1, stats, labels, n);
    put_family(&t, redirects, sizeof(redirects) / sizeof(redirects[0]), stats, labels, n);
    put_errors(&t, stats, labels, n);
    put_histogram(&t, "hilock_wait_seconds", "Time from an acquire call to its grant.",
                  offsetof(hilock_stats, wait), stats, labels, n);
    put_histogram(&t, "hilock_handoff_seconds",
                  "Time from a release message to the grant it led to, in this client.",
                  offsetof(hilock_stats, handoff), stats, labels, n);
    put_histogram(&t, "hilock_hold_seconds", "Time from a grant to its final release.",
                  offsetof(hilock_stats, hold), stats, labels, n);
    put_nodes(&t, stats, labels, n);
    return t.pos > (size_t)INT32_MAX ? HILOCK_ENOMEM : (int)t.pos;
}
