/* promtool check metrics on a Prometheus text: the tests' judge of the
 * exposition format (Debian's `prometheus` package; scripts/deps.sh
 * installs it). A missing promtool fails the check: it never skips. */
#ifndef HILOCK_TEST_PROMCHECK_H
#define HILOCK_TEST_PROMCHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <criterion/criterion.h>
#include "hilock/hilock.h"

/* Run `promtool check metrics` on `text` (len bytes). Returns its exit
 * status (0: valid and lint-clean; -1: it could not be run) and what it
 * printed, in out (n bytes). */
static inline int promcheck(const char *text, size_t len, char *out, size_t n) {
    char in_path[] = "/tmp/hilock-prom-XXXXXX", out_path[64];
    int fd = mkstemp(in_path);
    if (fd < 0) return -1;
    int ok = write(fd, text, len) == (ssize_t)len;
    close(fd);
    snprintf(out_path, sizeof(out_path), "%s.out", in_path);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s > %s 2>&1", in_path, out_path);
    int st = ok ? system(cmd) : -1;
    FILE *f = fopen(out_path, "r");
    size_t nread = f ? fread(out, 1, n - 1, f) : 0;
    out[nread] = '\0';
    if (f) fclose(f);
    unlink(in_path);
    unlink(out_path);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st) == 127 ? -1 : WEXITSTATUS(st);
}

/* hilock_stats_prometheus() of `n` snapshots, sized as snprintf is, and
 * checked by promtool (a failure stops the test); the caller frees it. */
static inline char *prom_exposition(const hilock_stats *const *s, const char *const *labels, size_t n) {
    int len = hilock_stats_prometheus(NULL, 0, s, labels, n);
    cr_assert_gt(len, 0);
    char *text = malloc((size_t)len + 1), out[4096];
    cr_assert_eq(hilock_stats_prometheus(text, (size_t)len + 1, s, labels, n), len);
    cr_assert_eq(strlen(text), (size_t)len);
    int st = promcheck(text, (size_t)len, out, sizeof(out));
    cr_assert_eq(st, 0, "promtool check metrics: status %d: %s\n%s", st, out, text);
    return text;
}

#endif
