/* hilock-nemesis: real network faults against real redis-servers and real
 * client processes, in the manner of Jepsen. Run as root (network
 * namespaces, iptables); `make nemesis` runs it through scripts/nemesis.sh.
 *
 *   hilock-nemesis [-m short|full] [-c PATTERN] [-o results.json]
 *                  [-d docs/RELIABILITY.md] [-r N] [-M] [-k] [-l]
 *
 *   -m    the matrix: short (a few minutes, the most telling cases) or
 *         full (every case; the default)
 *   -c    only the cases whose id contains PATTERN (repeatable)
 *   -o    the results matrix as JSON (default build/nemesis/results.json)
 *   -d    also write the markdown table into this file, between its
 *         markers
 *   -r    run each selected cell N times (default 1): it fails when any
 *         run breaks a promise, and reports the worst figures of its runs
 *         (each run's dir is CASE.rK)
 *   -M    record every command the master runs (MONITOR, from the start;
 *         the master the case began with) into CASE/monitor.log, to pin
 *         down a sequence: which connection's command ran when
 *   -k    keep every case's dir (histories, logs); by default only those
 *         of cells that failed are kept
 *   -l    list the cases and exit
 *
 * Each case: a fresh network of namespaces (netns.c), the topology's
 * servers (topo.c), the fenced resource (resource.c), one client process
 * per host (worker.c) running the case's workload; warm-up, the fault
 * (cases.c), its heal, a settling time; then the workers stop, their
 * histories are checked (check.c) against the case's promise, and the
 * namespaces go. Everything started is stopped by pid and every namespace
 * removed by name, also on failure, SIGINT or SIGTERM.
 *
 * Exit status: 0 every promise kept; 1 a promise broken; 2 a case could not
 * be set up. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "support/harness.h"
#include "nemesis/nemesis.h"

#define WARMUP_MS 1500
#define STOP_WAIT_MS 8000

nem_shared *nem_sh;
volatile int nem_interrupted;
char nem_skewclock_path[256];

static char runid[8];
static char basedir[128];
static nem_run *current;     /* the case being run, for the cleanup */
static int subnet;
static int monitor;          /* -M */

int64_t nem_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int nem_sleep(int ms) {
    long long until = test_now_ms() + ms;
    while (!nem_interrupted) {
        long long left = until - test_now_ms();
        if (left <= 0) return 0;
        test_msleep(left > 20 ? 20 : (int)left);
    }
    return 1;
}

static void on_signal(int sig) {
    (void)sig;
    nem_interrupted = 1;
}

static void stop_pid(pid_t *pid, int sig) {
    if (*pid <= 0) return;
    kill(*pid, SIGCONT);
    kill(*pid, sig);
    if (test_wait(*pid, 3000) < 0) {
        kill(*pid, SIGKILL);
        while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR) {}
    }
    *pid = 0;
}

/* Stop everything of run r and remove its namespaces. */
static void teardown(nem_run *r) {
    for (int p = 0; p < NEM_MAX_PROCS; p++) stop_pid(&r->worker[p], SIGKILL);
    stop_pid(&r->resource, SIGKILL);
    stop_pid(&r->proxy, SIGKILL);
    stop_pid(&r->monitor, SIGKILL);
    for (int i = 0; i < r->nsrv; i++) nem_server_kill(&r->srv[i]);
    nem_net_down(&r->net);
}

static void cleanup_at_exit(void) {
    if (current) teardown(current);
    current = NULL;
    char prefix[16];
    snprintf(prefix, sizeof(prefix), "hln%s-", runid);
    nem_net_sweep(prefix);
}

/* SIGTERM the workers (continued first), wait for them to drain. */
static void stop_workers(nem_run *r) {
    int n = r->c->wl->nprocs;
    for (int p = 0; p < n; p++)
        if (r->worker[p] > 0) {
            kill(r->worker[p], SIGCONT);
            kill(r->worker[p], SIGTERM);
        }
    for (int p = 0; p < n; p++) {
        if (r->worker[p] <= 0) continue;
        if (test_wait(r->worker[p], STOP_WAIT_MS) < 0) {
            fprintf(stderr, "hilock-nemesis: c%d did not stop in time: killed\n", p + 1);
            kill(r->worker[p], SIGKILL);
            while (waitpid(r->worker[p], NULL, 0) < 0 && errno == EINTR) {}
        }
        r->worker[p] = 0;
    }
}

/* One run of a case, start to end, into cell (its figures, ran, note,
 * secs); run > 0 names its dir CASE.rRUN. 0, or -1 when it could not be
 * set up. */
static int run_case(const nem_case *c, int run, nem_cell *cell) {
    nem_run *r = calloc(1, sizeof(*r));
    if (r == NULL) return -1;
    r->c = c;
    r->tl.victim = -1;
    r->tl.share_proc = c->proxy == PROXY_ONE ? 0 : -1;
    if (run > 0) snprintf(r->dir, sizeof(r->dir), "%s/%s.r%d", basedir, c->id, run);
    else snprintf(r->dir, sizeof(r->dir), "%s/%s", basedir, c->id);
    mkdir(r->dir, 0755);
    char path[300];
    snprintf(path, sizeof(path), "%s/run.log", r->dir);
    nem_log_to(path);
    current = r;
    memset(nem_sh, 0, sizeof(*nem_sh));
    int rc = -1;
    char url[512];
    long long t0 = test_now_ms();
    if (nem_net_init(&r->net, runid, subnet) != 0) goto out;
    if (nem_topo_setup(r, c->topo, c->clock, url, sizeof(url)) != 0) goto out;
    if (monitor) {
        snprintf(path, sizeof(path), "%s/monitor.log", r->dir);
        r->monitor = nem_monitor_start(&r->srv[r->master], path);
        if (r->monitor < 0) r->monitor = 0;
    }
    r->res_host = nem_net_add(&r->net, "res", 50);
    if (r->res_host == NULL) goto out;
    snprintf(r->res_sock, sizeof(r->res_sock), "%s/resource.sock", r->dir);
    r->resource = nem_resource_start(r->res_host->ns, r->res_host->ip, NEM_RESOURCE_PORT, r->res_sock);
    /* The proxy (standalone only): on a host of its own, relaying to the
     * master; link 0 is quiet until the fault sets it. */
    char px_url[64] = "";
    if (c->proxy != PROXY_NONE) {
        if (c->topo != TOPO_STANDALONE) goto out;
        if ((r->px_host = nem_net_add(&r->net, "px", 40)) == NULL) goto out;
        memset(&nem_sh->link[0], 0, sizeof(nem_sh->link[0]));
        r->proxy = nem_proxy_start(r->px_host->ns, r->px_host->ip, NEM_REDIS_PORT, r->srv[r->master].host->ip,
                                   NEM_REDIS_PORT, 0);
        if (r->proxy < 0) { r->proxy = 0; goto out; }
        snprintf(px_url, sizeof(px_url), "redis://%s:%d", r->px_host->ip, NEM_REDIS_PORT);
    }
    for (int p = 0; p < c->wl->nprocs; p++) {
        char name[16];
        snprintf(name, sizeof(name), "c%d", p + 1);
        if ((r->client[p] = nem_net_add(&r->net, name, 31 + p)) == NULL) goto out;
    }
    nem_resource_stats rs;
    for (int i = 0; i < 100 && nem_resource_stats_get(r->res_sock, &rs) != 0; i++) test_msleep(10);
    static nem_worker_args args[NEM_MAX_PROCS];
    r->tl.start_ns = nem_now_ns();
    for (int p = 0; p < c->wl->nprocs; p++) {
        nem_worker_args *a = &args[p];
        memset(a, 0, sizeof(*a));
        a->proc = p;
        a->wl = c->wl;
        a->ns = r->client[p]->ns;
        int proxied = c->proxy == PROXY_ALL || (c->proxy == PROXY_ONE && p == 0);
        snprintf(a->url, sizeof(a->url), "%s", proxied ? px_url : url);
        snprintf(a->resource, sizeof(a->resource), "%s:%d", r->res_host->ip, NEM_RESOURCE_PORT);
        snprintf(a->history, sizeof(a->history), "%s/h%d.log", r->dir, p);
        snprintf(a->log, sizeof(a->log), "%s/c%d.log", r->dir, p + 1);
        r->worker[p] = nem_worker_start(a);
        if (r->worker[p] < 0) { r->worker[p] = 0; goto out; }
    }
    if (nem_sleep(WARMUP_MS)) goto out;
    c->nemesis(r);
    if (r->tl.fault_ns == 0) snprintf(cell->note, sizeof(cell->note), "the fault found no moment to strike");
    if (nem_interrupted) goto out;
    nem_sleep(c->settle_ms);
    r->tl.end_ns = nem_now_ns();
    stop_workers(r);
    int have_rs = c->wl->rmw && nem_resource_stats_get(r->res_sock, &rs) == 0;
    teardown(r);
    nem_check(r->dir, c->wl, &r->tl, have_rs ? &rs : NULL, &c->promise, &cell->res);
    if (r->tl.fault_ns == 0) {
        cell->res.broken = 1;
        snprintf(cell->res.why, sizeof(cell->res.why), "%s", cell->note);
    }
    cell->ran = 1;
    rc = 0;
out:
    if (rc != 0 && !nem_interrupted)
        snprintf(cell->note, sizeof(cell->note), "could not be set up (see %.100s/run.log)", r->dir);
    teardown(r);
    current = NULL;
    cell->secs = (double)(test_now_ms() - t0) / 1000.0;
    free(r);
    return rc;
}

/* Namespaces left by a run whose controller is gone (killed with
 * SIGKILL: its servers and workers died with it, its namespaces did not):
 * each run keeps its pid in /tmp/hilock-nemesis-RUNID/pid. */
static void sweep_stale_runs(void) {
    DIR *d = opendir("/var/run/netns");
    if (d == NULL) return;
    char stale[32][16];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 32) {
        char id[8], path[96], buf[32];
        if (strncmp(e->d_name, "hln", 3) != 0 || strlen(e->d_name) < 9 || e->d_name[7] != '-') continue;
        memcpy(id, e->d_name + 3, 4);
        id[4] = '\0';
        snprintf(path, sizeof(path), "/tmp/hilock-nemesis-%s/pid", id);
        long pid = atol(test_slurp(path, buf, sizeof(buf)));
        if (pid > 0 && kill((pid_t)pid, 0) == 0) continue;
        int seen = 0;
        for (int i = 0; i < n; i++) seen |= strcmp(stale[i], id) == 0;
        if (!seen) snprintf(stale[n++], sizeof(stale[0]), "%s", id);
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        char prefix[16];
        snprintf(prefix, sizeof(prefix), "hln%s-", stale[i]);
        printf("hilock-nemesis: removing the namespaces of a dead run (%s*)\n", prefix);
        nem_net_sweep(prefix);
    }
}

static void rm_rf(const char *dir) {
    const char *argv[] = {"rm", "-rf", dir, NULL};
    nem_exec(argv);
}

static int wanted(const nem_case *c, const char *matrix, char **pat, int npat) {
    if (npat > 0) {
        for (int i = 0; i < npat; i++)
            if (strstr(c->id, pat[i])) return 1;
        return 0;
    }
    return strcmp(matrix, "short") != 0 || c->in_short;
}

static void print_cell(const nem_cell *cell) {
    const nem_result *x = &cell->res;
    const nem_case *c = cell->c;
    if (!cell->ran) {
        printf("hilock-nemesis: %-30s SKIP  %s\n", c->id, cell->note);
        return;
    }
    char verdict[128], runs[48] = "";
    if (cell->ran > 1) snprintf(runs, sizeof(runs), ", %d of %d runs broke", cell->broken_runs, cell->ran);
    if (x->broken) snprintf(verdict, sizeof(verdict), "FAIL%s%s%s", runs[0] ? " (" : "", runs[0] ? runs + 2 : "",
                            runs[0] ? ")" : "");
    else snprintf(verdict, sizeof(verdict), "PASS");
    char more[160];
    nem_result_more(c, x, more, sizeof(more));
    printf("hilock-nemesis: %-30s %s  %.0f s: %ld ops, %ld grants, overlap %ld (max %.1f ms), stale refused %ld, "
           "lost updates %ld, no grant %.0f ms, handoff %.0f ms, idle %.0f ms, recovery %.0f ms%s%s%s%s%s%s\n",
           c->id, verdict,
           cell->secs, x->ops, x->grants, x->overlaps, x->max_overlap_ms, x->stale_refused, x->lost_updates,
           x->max_gap_ms, x->max_handoff_ms, x->max_idle_ms, x->recovery_ms, more[0] ? "; " : "", more,
           x->codes[0] ? "; errors " : "", x->codes, x->broken ? "\nhilock-nemesis:     broken: " : "",
           x->broken ? x->why : "");
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *matrix = "full", *json = "build/nemesis/results.json", *doc = NULL;
    char *pat[16];
    int npat = 0, keep = 0, list = 0, repeat = 1, opt;
    while ((opt = getopt(argc, argv, "m:c:o:d:r:Mkl")) != -1) {
        switch (opt) {
        case 'm': matrix = optarg; break;
        case 'c': if (npat < 16) pat[npat++] = optarg; break;
        case 'o': json = optarg; break;
        case 'd': doc = optarg; break;
        case 'r': repeat = atoi(optarg); break;
        case 'M': monitor = 1; break;
        case 'k': keep = 1; break;
        case 'l': list = 1; break;
        default:
            fprintf(stderr, "usage: hilock-nemesis [-m short|full] [-c PATTERN] [-o FILE] [-d FILE] [-r N] [-M] [-k] [-l]\n");
            return 2;
        }
    }
    if (repeat < 1 || repeat > 1000) {
        fprintf(stderr, "hilock-nemesis: -r 1 to 1000\n");
        return 2;
    }
    if (strcmp(matrix, "short") != 0 && strcmp(matrix, "full") != 0) {
        fprintf(stderr, "hilock-nemesis: -m short or full\n");
        return 2;
    }
    if (list) {
        for (int i = 0; i < nem_ncases; i++)
            printf("%-30s %-10s %s%s\n", nem_cases[i].id, nem_topo_name[nem_cases[i].topo], nem_cases[i].fault,
                   nem_cases[i].in_short ? " (short)" : "");
        return 0;
    }
    if (geteuid() != 0) {
        fprintf(stderr, "hilock-nemesis: needs root (network namespaces, iptables)\n");
        return 2;
    }
    if (test_build_path("HILOCK_SKEWCLOCK", "nemesis/libskewclock.so", nem_skewclock_path,
                        sizeof(nem_skewclock_path)) == NULL || access(nem_skewclock_path, R_OK) != 0) {
        fprintf(stderr, "hilock-nemesis: %s missing (make nemesis builds it)\n", nem_skewclock_path);
        return 2;
    }
    srand((unsigned)(time(NULL) ^ getpid()));
    snprintf(runid, sizeof(runid), "%04x", (unsigned)(rand() & 0xffff));
    subnet = 1 + rand() % 250;
    snprintf(basedir, sizeof(basedir), "/tmp/hilock-nemesis-%s", runid);
    if (mkdir(basedir, 0755) != 0) { perror(basedir); return 2; }
    char pidfile[160];
    snprintf(pidfile, sizeof(pidfile), "%s/pid", basedir);
    FILE *pf = fopen(pidfile, "w");
    if (pf) { fprintf(pf, "%ld\n", (long)getpid()); fclose(pf); }
    sweep_stale_runs();
    nem_sh = mmap(NULL, sizeof(*nem_sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (nem_sh == MAP_FAILED) { perror("mmap"); return 2; }
    atexit(cleanup_at_exit);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    nem_cell *cells = calloc((size_t)nem_ncases, sizeof(*cells));
    int n = 0, broken = 0, unset = 0;
    for (int i = 0; i < nem_ncases; i++)
        if (wanted(&nem_cases[i], matrix, pat, npat)) n++;
    printf("hilock-nemesis: %s matrix, %d cases%s%.0d%s, run %s (logs in %s)\n", matrix, n,
           repeat > 1 ? ", each run " : "", repeat > 1 ? repeat : 0, repeat > 1 ? " times" : "", runid, basedir);
    fflush(stdout);
    n = 0;
    for (int i = 0; i < nem_ncases && !nem_interrupted; i++) {
        const nem_case *c = &nem_cases[i];
        if (!wanted(c, matrix, pat, npat)) continue;
        nem_cell *cell = &cells[n++];
        cell->c = c;
        for (int k = 1; k <= repeat && !nem_interrupted; k++) {
            nem_cell one;
            memset(&one, 0, sizeof(one));
            one.c = c;
            int rc = run_case(c, repeat > 1 ? k : 0, &one);
            if (nem_interrupted) break;
            cell->secs += one.secs;
            if (rc != 0 || !one.ran) {
                snprintf(cell->note, sizeof(cell->note), "%s", one.note);
                unset++;
                continue;
            }
            nem_result_worst(&cell->res, &one.res, repeat > 1 ? k : 0, cell->ran == 0);
            cell->ran++;
            cell->broken_runs += one.res.broken != 0;
            if (one.note[0]) snprintf(cell->note, sizeof(cell->note), "%s", one.note);
            if (repeat > 1 && one.res.broken) printf("hilock-nemesis:   %s run %d broke: %s\n", c->id, k, one.res.why);
            if (!keep && !one.res.broken) {
                char dir[300];
                if (repeat > 1) snprintf(dir, sizeof(dir), "%s/%s.r%d", basedir, c->id, k);
                else snprintf(dir, sizeof(dir), "%s/%s", basedir, c->id);
                rm_rf(dir);
            }
        }
        if (nem_interrupted) { n--; break; }
        print_cell(cell);
        if (cell->ran && cell->res.broken) broken++;
    }
    nem_log_to("/dev/null");
    cleanup_at_exit();
    if (nem_interrupted) {
        printf("hilock-nemesis: interrupted; everything started was stopped\n");
        return 2;
    }
    nem_report_markdown(stdout, cells, n, matrix);
    nem_report_json(json, cells, n, matrix);
    printf("hilock-nemesis: results in %s\n", json);
    if (doc != NULL) {
        if (nem_report_doc(doc, cells, n, matrix) == 0) printf("hilock-nemesis: table written into %s\n", doc);
        else fprintf(stderr, "hilock-nemesis: %s has no markers; table not written\n", doc);
    }
    unlink(pidfile);
    if (!keep && !broken && !unset) rmdir(basedir);
    else printf("hilock-nemesis: histories and logs of the %s in %s\n", keep ? "cells" : "failed cells", basedir);
    free(cells);
    return unset ? 2 : broken ? 1 : 0;
}
