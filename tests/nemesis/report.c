/* The results matrix: JSON (one object per cell) and a markdown table,
 * printed and written into docs/RELIABILITY.md between its markers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hilock/hilock.h"
#include "nemesis/nemesis.h"

#define MARK_BEGIN "<!-- nemesis:begin -->"
#define MARK_END "<!-- nemesis:end -->"

static const char *prim_name(int prim) {
    switch (prim) {
    case PRIM_SEM: return "semaphore";
    case PRIM_FAIR: return "fair lock";
    case PRIM_RW: return "read-write lock";
    default: return "mutex";
    }
}

static const char *verdict(const nem_cell *cell) {
    static char buf[128];
    char runs[48] = "";
    if (!cell->ran) return "SKIP";
    if (!cell->res.broken) return "PASS";
    if (cell->ran > 1) snprintf(runs, sizeof(runs), "%d of %d runs", cell->broken_runs, cell->ran);
    snprintf(buf, sizeof(buf), runs[0] ? "FAIL (%s)" : "FAIL", runs);
    return buf;
}

void nem_result_more(const nem_case *c, const nem_result *x, char *out, size_t n) {
    size_t k = 0;
    out[0] = '\0';
#define MORE(...) if (k < n) k += (size_t)snprintf(out + k, n - k, __VA_ARGS__)
    if (x->share >= 0) {
        MORE("share of c1 %.2f in the fault (grants of the run", x->share);
        for (int p = 0; p < c->wl->nprocs && p < NEM_MAX_PROCS; p++) MORE("%s%ld", p ? "/" : " ", x->proc_grants[p]);
        MORE(")");
    }
    if (c->wl->prim == PRIM_FAIR) MORE("%sout of order %ld", k ? ", " : "", x->order_violations);
    if (x->repl_overlaps) MORE("%s%ld overlaps in the replication window", k ? ", " : "", x->repl_overlaps);
    if (c->promise.idle_ms != NEM_ANY) MORE("%sidle %.0f ms", k ? ", " : "", x->max_idle_ms);
    if (c->promise.handoff_ms != NEM_ANY)
        MORE("%sthe lock free %.0f ms of a handoff", k ? ", " : "", x->max_handoff_free_ms);
    if (c->proxy == PROXY_ALL) MORE("%sproxied", k ? ", " : "");
#undef MORE
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

void nem_report_json(const char *path, const nem_cell *cells, int n, const char *matrix) {
    FILE *f = fopen(path, "w");
    if (f == NULL) { perror(path); return; }
    fprintf(f, "{\"matrix\":\"%s\",\"cells\":[\n", matrix);
    for (int i = 0; i < n; i++) {
        const nem_cell *cell = &cells[i];
        const nem_case *c = cell->c;
        const nem_result *x = &cell->res;
        const nem_promise *p = &c->promise;
        fprintf(f, "  {\"id\":\"%s\",\"topology\":\"%s\",\"primitive\":\"%s\",\"fault\":", c->id,
                nem_topo_name[c->topo], prim_name(c->wl->prim));
        json_str(f, c->fault);
        fprintf(f, ",\"fenced\":%d,\"lease_ms\":%u,\"verdict\":\"%s\",\"seconds\":%.1f,"
                   "\"runs\":%d,\"broken_runs\":%d,",
                c->wl->fenced, c->wl->lease_ms, verdict(cell), cell->secs, cell->ran,
                cell->broken_runs);
        fprintf(f, "\"promise\":{\"text\":");
        json_str(f, c->promise_text);
        fprintf(f, ",\"overlap_ms\":%d,\"lost_updates\":%d,\"handoff_ms\":%d,\"recovery_ms\":%d,"
                   "\"wait_slack_ms\":%d,\"ride_through\":%d,\"min_share_pct\":%d,\"idle_ms\":%d},",
                p->overlap_ms, p->lost_updates, p->handoff_ms, p->recovery_ms, p->wait_slack_ms, p->ride_through,
                p->min_share_pct, p->idle_ms);
        fprintf(f, "\"operations\":%ld,\"grants\":%ld,\"timeouts\":%ld,\"busy\":%ld,\"errors\":%ld,\"error_codes\":",
                x->ops, x->grants, x->timeouts, x->busy, x->errors);
        json_str(f, x->codes);
        fprintf(f, ",\"overlaps\":%ld,\"max_overlap_ms\":%.3f,\"fence_regressions\":%ld,\"max_holders\":%d,"
                   "\"over_permits\":%ld,\"stranded\":%ld,\"late_waits\":%ld,\"max_wait_over_ms\":%.1f,"
                   "\"early_fails\":%ld,\"lost_holds\":%ld,",
                x->overlaps, x->max_overlap_ms, x->fence_regressions, x->max_holders, x->over_permits, x->stranded,
                x->late_waits, x->max_wait_over_ms, x->early_fails, x->lost_holds);
        fprintf(f, "\"writes_acked\":%ld,\"writes_accepted\":%ld,\"counter\":%ld,\"stale_refused\":%ld,"
                   "\"lost_updates\":%ld,\"longest_no_grant_ms\":%.1f,\"max_handoff_ms\":%.1f,\"handoffs\":%ld,"
                   "\"recovery_ms\":%.1f,\"max_idle_ms\":%.1f,\"max_handoff_free_ms\":%.1f,\"order_violations\":%ld,\"max_order_ms\":%.1f,"
                   "\"replication_window_overlaps\":%ld,\"share\":%.3f,\"grants_by_process\":[",
                x->acked, x->accepted, x->counter, x->stale_refused, x->lost_updates, x->max_gap_ms,
                x->max_handoff_ms, x->handoffs, x->recovery_ms, x->max_idle_ms, x->max_handoff_free_ms, x->order_violations,
                x->max_order_ms, x->repl_overlaps, x->share);
        for (int q = 0; q < c->wl->nprocs && q < NEM_MAX_PROCS; q++) fprintf(f, "%s%ld", q ? "," : "", x->proc_grants[q]);
        fprintf(f, "],\"violations\":");
        json_str(f, cell->ran ? x->why : cell->note);
        fprintf(f, "}%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, "]}\n");
    fclose(f);
}

static void ms(FILE *f, double v) {
    if (v < 0) fprintf(f, " - |");
    else if (v < 10) fprintf(f, " %.1f |", v);
    else fprintf(f, " %.0f |", v);
}

void nem_report_markdown(FILE *f, const nem_cell *cells, int n, const char *matrix) {
    int runs = 1;
    for (int i = 0; i < n; i++)
        if (cells[i].ran > runs) runs = cells[i].ran;
    fprintf(f, "\nMatrix `%s`: %d cells, hilock %s", matrix, n, hilock_version());
    if (runs > 1) fprintf(f, "; each cell run %d times, its worst figures shown", runs);
    fprintf(f, ".\n\n");
    fprintf(f, "| case | topology | primitive | fault | promise | ops | grants | errors | overlap max ms "
               "| stale refused | lost updates | longest no grant ms | max handoff ms | recovery ms | more | result |\n");
    fprintf(f, "|---|---|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---|\n");
    for (int i = 0; i < n; i++) {
        const nem_cell *cell = &cells[i];
        const nem_case *c = cell->c;
        const nem_result *x = &cell->res;
        fprintf(f, "| `%s` | %s | %s%s | %s | %s |", c->id, nem_topo_name[c->topo],
                prim_name(c->wl->prim), c->wl->fenced ? "" : " (no fences)", c->fault,
                c->promise_text);
        if (!cell->ran) {
            fprintf(f, " | | | | | | | | | | SKIP: %s |\n", cell->note);
            continue;
        }
        fprintf(f, " %ld | %ld | %s |", x->ops, x->grants, x->codes[0] ? x->codes : "-");
        if (x->overlaps) ms(f, x->max_overlap_ms);
        else fprintf(f, " 0 |");
        if (c->wl->rmw) fprintf(f, " %ld | %ld |", x->stale_refused, x->lost_updates);
        else fprintf(f, " - | - |");
        ms(f, x->max_gap_ms);
        ms(f, x->handoffs ? x->max_handoff_ms : -1);
        ms(f, x->recovery_ms);
        char more[160];
        nem_result_more(c, x, more, sizeof(more));
        fprintf(f, " %s |", more[0] ? more : "-");
        fprintf(f, " **%s**%s%s |\n", verdict(cell), x->broken ? ": " : "", x->broken ? x->why : "");
    }
    fprintf(f, "\n");
}

int nem_report_doc(const char *path, const nem_cell *cells, int n, const char *matrix) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) fwrite(buf, 1, got, m);
    fclose(f);
    fclose(m);
    char *b = strstr(text, MARK_BEGIN), *e = b ? strstr(b, MARK_END) : NULL;
    if (b == NULL || e == NULL) { free(text); return -1; }
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *o = fopen(tmp, "w");
    if (o == NULL) { free(text); return -1; }
    fwrite(text, 1, (size_t)(b - text) + strlen(MARK_BEGIN), o);
    fputc('\n', o);
    nem_report_markdown(o, cells, n, matrix);
    fputs(e, o);
    fclose(o);
    free(text);
    return rename(tmp, path);
}
