/* The results matrix: JSON (one object per cell) and a markdown table,
 * printed and written into docs/RELIABILITY.md between its markers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hilock/hilock.h"
#include "nemesis/nemesis.h"

#define MARK_BEGIN "<!-- nemesis:begin -->"
#define MARK_END "<!-- nemesis:end -->"

static const char *verdict(const nem_cell *cell) {
    static char buf[64];
    if (!cell->ran) return "SKIP";
    if (!cell->res.broken) return "PASS";
    if (!cell->c->known) return "FAIL";
    snprintf(buf, sizeof(buf), "FAIL (known: %s)", nem_known_name[cell->c->known]);
    return buf;
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
                nem_topo_name[c->topo], c->wl->prim == PRIM_SEM ? "semaphore" : "mutex");
        json_str(f, c->fault);
        fprintf(f, ",\"fenced\":%d,\"lease_ms\":%u,\"verdict\":\"%s\",\"known_defect\":\"%s\",\"seconds\":%.1f,",
                c->wl->fenced, c->wl->lease_ms, verdict(cell), nem_known_name[c->known], cell->secs);
        fprintf(f, "\"promise\":{\"text\":");
        json_str(f, c->promise_text);
        fprintf(f, ",\"overlap_ms\":%d,\"lost_updates\":%d,\"handoff_ms\":%d,\"recovery_ms\":%d,"
                   "\"wait_slack_ms\":%d,\"ride_through\":%d},",
                p->overlap_ms, p->lost_updates, p->handoff_ms, p->recovery_ms, p->wait_slack_ms, p->ride_through);
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
                   "\"recovery_ms\":%.1f,\"violations\":",
                x->acked, x->accepted, x->counter, x->stale_refused, x->lost_updates, x->max_gap_ms,
                x->max_handoff_ms, x->handoffs, x->recovery_ms);
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
    fprintf(f, "\nMatrix `%s`: %d cells, hilock %s.\n\n", matrix, n, hilock_version());
    fprintf(f, "| case | topology | primitive | fault | promise | ops | grants | errors | overlap max ms "
               "| stale refused | lost updates | longest no grant ms | max handoff ms | recovery ms | result |\n");
    fprintf(f, "|---|---|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|\n");
    for (int i = 0; i < n; i++) {
        const nem_cell *cell = &cells[i];
        const nem_case *c = cell->c;
        const nem_result *x = &cell->res;
        fprintf(f, "| `%s` | %s | %s%s | %s | %s |", c->id, nem_topo_name[c->topo],
                c->wl->prim == PRIM_SEM ? "semaphore" : "mutex", c->wl->fenced ? "" : " (no fences)", c->fault,
                c->promise_text);
        if (!cell->ran) {
            fprintf(f, " | | | | | | | | | SKIP: %s |\n", cell->note);
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
        fprintf(f, " **%s**%s%s |\n", verdict(cell), x->broken ? ": " : "", x->broken ? x->why : "");
    }
    int known[NKNOWN] = {0};
    for (int i = 0; i < n; i++)
        if (cells[i].ran && cells[i].res.broken && cells[i].c->known) known[cells[i].c->known] = 1;
    for (int k = 1; k < NKNOWN; k++)
        if (known[k]) fprintf(f, "\nKnown defect, %s: %s.\n", nem_known_name[k], nem_known_text[k]);
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
