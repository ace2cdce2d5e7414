/* hilock-stress's nginx phase: three nginx (two workers each) with the
 * module, on one redis-server, in front of a backend that records overlaps
 * per key and the fences it is given (tests/support/nginx.c). Batches of
 * requests for a few keys go to all three at once while faults land:
 * reloads, kill -9 of a worker, Redis connection kills, clients that go
 * away. Invariants: no two requests of one key at the backend at once,
 * fences strictly increasing per key, every request ends (served, the
 * error status, or dropped with a killed worker or an aborted client), no
 * lock left once the leases have run out, no alert in nginx's logs but the
 * expected "exited on signal 9". */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hilock/hilock.h"
#include "support/harness.h"
#include "support/nginx.h"
#include "stress/stress.h"

#define NGX 3
#define BATCH 240
#define LEASE_MS 2000

static void nginx_fault(test_redis *r, test_nginx *n, test_http *h, unsigned *rnd, stress_faults *f) {
    test_nginx *one = &n[rand_r(rnd) % NGX];
    pid_t w[16];
    switch (rand_r(rnd) % 5) {
    case 0: kill(one->pid, SIGHUP); stress_fault(f, "reload"); break;
    case 1: {
        int k = test_nginx_workers(one, w, 16);
        if (k == 0) break;
        one->killed_worker = 1;
        kill(w[rand_r(rnd) % k], SIGKILL);
        stress_fault(f, "kill_worker");
        break;
    }
    case 2: test_redis_int(r, "CLIENT KILL TYPE normal"); stress_fault(f, "kill_normal"); break;
    case 3: test_redis_int(r, "CLIENT KILL TYPE pubsub"); stress_fault(f, "kill_pubsub"); break;
    default:
        for (int i = 0; i < BATCH / 10; i++) test_http_abort(&h[rand_r(rnd) % BATCH]);
        stress_fault(f, "client_aborts");
        break;
    }
}

static int locks_left(test_redis *r, const stress_cfg *cfg) {
    int left = 0;
    for (int i = 0; i < cfg->names; i++) {
        char name[64], key[HILOCK_NAME_MAX * 3 + 64];
        snprintf(name, sizeof(name), "k:%s", cfg->name[i]);
        hilock_key("hilock:", name, key, sizeof(key));
        left += test_redis_int(r, "EXISTS %s", key) == 1;
    }
    return left;
}

int stress_nginx(stress_cfg *cfg, long long end_ms, stress_faults *faults, long *stranded, int *bad_exits) {
    static test_http h[BATCH];
    static test_backend b;
    test_nginx n[NGX];
    test_redis r;
    char http[160], server[512], problems[4096];
    long served = 0, errors = 0, dropped = 0, other = 0, batches = 0;
    int rc = 0;
    unsigned rnd = (unsigned)time(NULL);

    memset(n, 0, sizeof(n));
    test_http_rlimit();
    if (test_redis_start(&r, 0, NULL) != 0 || test_backend_start(&b) != 0) {
        fprintf(stderr, "hilock-stress: nginx: cannot start redis-server or the backend\n");
        test_redis_stop(&r);
        return -1;
    }
    snprintf(http, sizeof(http), "hilock_redis %s timeout=1s;", r.url);
    snprintf(server, sizeof(server),
             "location /k/ { hilock k:$arg_key wait=10s lease=%dms; proxy_set_header X-Fence $hilock_fence;"
             " proxy_ignore_client_abort on; proxy_pass http://127.0.0.1:%d; }",
             LEASE_MS, b.port);
    for (int i = 0; i < NGX && rc == 0; i++) rc = test_nginx_start(&n[i], 2, http, server);
    if (rc != 0) goto out;
    printf("hilock-stress: nginx: %d nginx x 2 workers, batches of %d requests on %d names, %lld s, "
           "redis on port %d\n", NGX, BATCH, cfg->names, (end_ms - test_now_ms() + 999) / 1000, r.port);
    fflush(stdout);

    while (test_now_ms() < end_ms) {
        char path[128];
        for (int i = 0; i < BATCH; i++) {
            snprintf(path, sizeof(path), "/k/?key=%s&ms=%d", cfg->name[rand_r(&rnd) % cfg->names], rand_r(&rnd) % 3);
            if (test_http_send(&h[i], n[rand_r(&rnd) % NGX].port, path) != 0) h[i].status = -1;
        }
        test_http_wait(h, BATCH, 100 + rand_r(&rnd) % 200);
        nginx_fault(&r, n, h, &rnd, faults);
        int open = test_http_wait(h, BATCH, 30000);
        for (int i = 0; i < BATCH; i++) {
            if (h[i].fd >= 0) test_http_abort(&h[i]);
            served += h[i].status == 200;
            errors += h[i].status == 503;
            dropped += h[i].status == -1;
            other += h[i].status != 200 && h[i].status != 503 && h[i].status != -1;
        }
        *stranded += open;
        batches++;
    }
    /* Every lease has run out by now: nothing may be left. */
    test_msleep(LEASE_MS + 500);
    int left = locks_left(&r, cfg);
    *stranded += left;
    for (int i = 0; i < NGX; i++) {
        if (test_nginx_quit(&n[i], 15000) != 0) {
            fprintf(stderr, "hilock-stress: nginx %d did not quit within 15 s\n", i);
            (*bad_exits)++;
        }
        if (test_nginx_problems(&n[i], problems, sizeof(problems)) != 0) {
            fprintf(stderr, "hilock-stress: nginx %d logged:\n%s", i, problems);
            (*bad_exits)++;
        }
    }
    for (int i = 0; i < cfg->names; i++) {
        test_backend_key k = test_backend_key_get(&b, cfg->name[i]);
        sh->overlaps += k.overlaps;
        sh->regressions += k.fence_errors;
    }
    sh->acquisitions = test_backend_served(&b);
    printf("hilock-stress: nginx: %ld batches: %ld served, %ld error status, %ld dropped (aborted or a\n"
           "  killed worker's), %ld other statuses, %ld still waiting after 30 s, %d locks left\n",
           batches, served, errors, dropped, other, *stranded - left, left);
    if (other > 0) (*bad_exits)++;
out:
    for (int i = 0; i < NGX; i++) test_nginx_free(&n[i]);
    test_backend_stop(&b, 2000);
    test_redis_stop(&r);
    return rc;
}
