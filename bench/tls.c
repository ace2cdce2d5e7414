/* The tls scenario: what TLS costs hilock, on one redis-server that listens
 * on a plain port (-u) and a TLS port (-S rediss://, its certificate
 * checked against -C CA), so that only the transport differs. Each
 * repetition measures both sides back to back, in an order that flips
 * every repetition (TCP first, then TLS first), so that the machine's
 * drift weighs on both alike; the ratios are per repetition, TLS over the
 * TCP run beside it, and their medians are reported:
 *
 *   tls_handoff     contend.c's handoff of hilock's mutex (p50, p90)
 *   tls_ping        the baseline of the same runs: the PING round trips
 *                   that the handoff's processes time on their blocking
 *                   side connection, which is a TLS one on the TLS side;
 *                   and what a new connection costs (blocking hiredis:
 *                   connect, and on the TLS side the handshake too)
 *   tls_throughput  scale.c's uncontended window (locks/s, and the
 *                   client's CPU per lock, where the encryption shows)
 *
 * Every connection of the handoff and the throughput is made before the
 * measured part (the handoff's warm-up, the throughput's 0.5 s), so their
 * figures are the per-request cost of TLS (record encryption and
 * decryption on both ends); the handshake, paid once per connection, is
 * the connection figure's. Built without TLS (hiredis 0.14), the scenario says so and
 * is skipped. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "hilock/hilock.h"

static void tls_skip(const char *why) {
    fprintf(stderr, "== tls: skipped: %s\n", why);
    json_begin("tls");
    json_str("skipped", why);
    json_end();
}

#define CONNECTS 50 /* per side and repetition */

/* Connection setup p50 (us) to t's server: TCP connect, and on a TLS
 * target the handshake too (redisInitiateSSL completes it). -1 on error. */
static double connect_p50(const bench_target *t) {
    uint64_t v[CONNECTS];
    for (int i = 0; i < CONNECTS; i++) {
        uint64_t t0 = now_ns();
        redisContext *rc = target_connect(t, 0);
        v[i] = now_ns() - t0;
        if (rc == NULL) return -1;
        redisFree(rc);
    }
    sort_u64(v, CONNECTS);
    return (double)pct_u64(v, CONNECTS, 50) / 1000.0;
}

static void tls_print(const ho_series *hs, const ho_series *hp, const tp_series *ts,
                      const tp_series *tp, double conn[2][SERIES_MAX], int nconn, int reps) {
    double p50 = series_median(hs->p50, hs->n), tcp50 = series_median(hp->p50, hp->n);
    double ratio = series_median(hs->ratio, hs->n);
    json_begin("tls_handoff");
    json_str("client", "hilock");
    json_num("p50_us", p50, 1);
    json_num("p90_us", series_median(hs->p90, hs->n), 1);
    json_num("p99_us", series_median(hs->p99, hs->n), 1);
    json_num("tcp_p50_us", tcp50, 1);
    json_num("tcp_p90_us", series_median(hp->p90, hp->n), 1);
    json_num("tcp_p99_us", series_median(hp->p99, hp->n), 1);
    json_num("p50_over_tcp", ratio, 3);
    json_int("handoffs", hs->handoffs);
    json_int("reps", hs->n);
    json_str("hold_ms", "1..11 uniform");
    json_int("errors", hs->errors + hp->errors);
    json_end();

    double ping = series_median(hs->ping, hs->n), tcp_ping = series_median(hp->ping, hp->n);
    double ping_ratio = series_median(hs->ping_ratio, hs->n);
    json_begin("tls_ping");
    json_num("ping_rtt_p50_us", ping, 1);
    json_num("tcp_ping_rtt_p50_us", tcp_ping, 1);
    json_num("ping_over_tcp", ping_ratio, 3);
    json_str("measure", "blocking hiredis PING, the handoff processes' side connection");
    double setup = series_median(conn[1], nconn), tcp_setup = series_median(conn[0], nconn);
    json_num("connect_p50_us", setup, 1);
    json_num("tcp_connect_p50_us", tcp_setup, 1);
    json_str("connect_measure", "blocking hiredis: connect (TLS: and the handshake, EC P-256), 50 per rep");
    json_int("reps", hs->n);
    json_end();

    double locks = series_median(ts->locks, ts->n), tcp_locks = series_median(tp->locks, tp->n);
    double cpu = series_median(ts->cpu, ts->n), tcp_cpu = series_median(tp->cpu, tp->n);
    double tp_ratio = series_median(ts->ratio, ts->n);
    json_begin("tls_throughput");
    json_str("client", "hilock");
    json_num("locks_per_s", locks, 0);
    json_num("tcp_locks_per_s", tcp_locks, 0);
    json_num("locks_over_tcp", tp_ratio, 3);
    json_num("client_cpu_us_per_lock", cpu, 2);
    json_num("tcp_client_cpu_us_per_lock", tcp_cpu, 2);
    json_int("in_flight", g_opts.inflight);
    json_num("seconds", g_opts.tp_seconds, 1);
    json_int("reps", ts->n);
    json_int("errors", ts->errors + tp->errors);
    json_end();

    fprintf(stderr, "  tls handoff: p50 %.0f us = %.2fx TCP %.0f us (p90 %.0f us, TCP %.0f us)\n", p50,
            ratio, tcp50, series_median(hs->p90, hs->n), series_median(hp->p90, hp->n));
    fprintf(stderr, "  tls PING: p50 %.1f us = %.2fx TCP %.1f us; a new connection: %.0f us, TCP %.0f us\n",
            ping, ping_ratio, tcp_ping, setup, tcp_setup);
    fprintf(stderr, "  tls throughput: %.0f locks/s = %.2fx TCP %.0f (client CPU %.2f us/lock, "
            "TCP %.2f)\n", locks, tp_ratio, tcp_locks, cpu, tcp_cpu);
    fprintf(stderr, "  (medians of %d alternated repetitions, one server, same run)\n", reps);
}

int scenario_tls(void) {
    if (!hilock_tls_available()) {
        tls_skip("this build has no TLS (build against hiredis >= 1.0 with hiredis_ssl: "
                 "make HIREDIS=/tmp/hiredis1)");
        return 0;
    }
    if (g_tls.nnodes == 0) {
        tls_skip("no TLS port given (-S rediss://HOST:PORT -C CA)");
        return 0;
    }
    fprintf(stderr, "== tls: %s beside %s, alternated, %d x %d handoffs and %d x %.0f s of "
            "throughput each\n", g_tls.url, g_standalone.url, g_opts.tls_reps, g_opts.tls_handoffs,
            g_opts.tls_reps, g_opts.tp_seconds);
    char name[64];
    snprintf(name, sizeof name, "hb-tls:%ld", (long)getpid());
    const bench_target *side[2] = {&g_standalone, &g_tls}; /* TCP, TLS */
    int reps = g_opts.tls_reps > SERIES_MAX ? SERIES_MAX : g_opts.tls_reps;
    ho_series ho[2];
    tp_series tp[2];
    double conn[2][SERIES_MAX];
    int nconn = 0;
    memset(ho, 0, sizeof ho);
    memset(tp, 0, sizeof tp);
    int failed = 0;
    for (int r = 0; r < reps; r++) {
        /* TCP first on even repetitions, TLS first on odd ones; each
         * measurement of one side right beside the other's. */
        const int order[2] = {r % 2, 1 - r % 2};
        handoff_result h[2];
        tp_sample x[2];
        double c[2];
        for (int i = 0; i < 2; i++)
            failed |= handoff_measure(&hilock_impl, side[order[i]], name, g_opts.tls_handoffs,
                                      &h[order[i]]);
        for (int i = 0; i < 2; i++) failed |= tp_measure(side[order[i]], &x[order[i]]);
        for (int i = 0; i < 2; i++) c[order[i]] = connect_p50(side[order[i]]);
        if (c[0] > 0 && c[1] > 0) {
            conn[0][nconn] = c[0];
            conn[1][nconn++] = c[1];
        } else {
            failed = 1;
        }
        for (int k = 0; k < 2; k++) {
            ho_series_add(&ho[k], &h[k], &h[0]);
            tp_series_add(&tp[k], &x[k], x[0].errors ? 0 : x[0].locks_per_s);
        }
        /* Each repetition's pair too: the spread says how noisy the run was. */
        fprintf(stderr, "  rep %d (%s first): handoff p50 TCP %.0f us, TLS %.0f us; PING p50 TCP "
                "%.1f us, TLS %.1f us; TCP %.0f locks/s, TLS %.0f; connect TCP %.0f us, TLS %.0f\n",
                r + 1, r % 2 ? "TLS" : "TCP", h[0].p50, h[1].p50, h[0].ping50, h[1].ping50,
                x[0].locks_per_s, x[1].locks_per_s, c[0], c[1]);
    }
    tls_print(&ho[1], &ho[0], &tp[1], &tp[0], conn, nconn, reps);
    redisContext *rc = sync_connect(); /* the fence key and the warm-ups' */
    if (rc) {
        delete_keys(rc, "hilock:{hb-tls:*");
        delete_keys(rc, "hilock:{hb-warm:*");
        redisFree(rc);
    }
    return failed || ho[0].n == 0 || ho[1].n == 0 || tp[0].n == 0 || tp[1].n == 0;
}
