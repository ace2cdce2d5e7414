/* `make install` and `make uninstall`, as a packager or a user would run
 * them: install this build (the directory holding this test binary) with
 * DESTDIR into a temporary directory and PREFIX=/usr/local; check the
 * layout (libraries, soname and links, exported symbols, headers, adapters,
 * hilock.pc, the CLI, man pages); build programs against the installed copy
 * with pkg-config (shared and static, on each event loop) and run them
 * against a real redis-server; then uninstall and check that nothing is
 * left. The installed man pages are found and render (`man -M` of the
 * install's share/man, a function's page and a ".so" link to one), and the
 * tree's render with `man -l`, without a warning.
 *
 * The make variables that chose this build (BUILD, SANITIZE, HIREDIS, CC,
 * CFLAGS) come from BUILD/make-args, which mk/ecosystem.mk writes, so that
 * `make install` uses this very build directory. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "hilock/hilock.h"
#include "support/harness.h"
#include "support/promcheck.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define VERSION HILOCK_VERSION
#define SOVER STR(HILOCK_SOVERSION)

static char root[PATH_MAX];      /* the source tree */
static char build[PATH_MAX];     /* BUILD, relative to root */
static char tmp[64];             /* scratch dir */
static char dest[128];           /* DESTDIR */
static char margs[16][512];      /* make VAR=value arguments */
static int nmargs;
static int sanitized;            /* SANITIZE=1 build */
static char hiredis[PATH_MAX];   /* HIREDIS=, or "" */
static char cc[256] = "cc";
static test_redis srv;
static int srv_started;

/* ---- Helpers ------------------------------------------------------------ */

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static const char *at(const char *fmt, ...) {
    static char ring[8][PATH_MAX];
    static int next;
    char *p = ring[next++ % 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, PATH_MAX, fmt, ap);
    va_end(ap);
    return p;
}


/* Run argv (NULL-terminated) with stdout into `out` and stderr into `err`
 * (the same file if err is NULL), extra environment `env` ("K=V" strings,
 * NULL-terminated, may be NULL). The make variables of a parent make are
 * dropped. Returns the exit status, 128+N for signal N, -1 on timeout. */
static int run(char *const argv[], char *const env[], const char *out, const char *err, int ms) {
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = err ? open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600) : o;
        int in = open("/dev/null", O_RDONLY);
        if (o >= 0) dup2(o, 1);
        if (e >= 0) dup2(e, 2);
        if (in >= 0) dup2(in, 0);
        unsetenv("MAKEFLAGS");
        unsetenv("MFLAGS");
        unsetenv("MAKELEVEL");
        unsetenv("MAKEOVERRIDES");
        unsetenv("GNUMAKEFLAGS");
        for (; env != NULL && *env != NULL; env++) putenv(*env);
        execvp(argv[0], argv);
        _exit(127);
    }
    long long until = test_now_ms() + ms;
    int st;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (w < 0 || test_now_ms() >= until) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return -1;
        }
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

/* sh -c CMD in the scratch dir; output (both streams) in tmp/log. */
static int sh(char *const env[], const char *cmd, char *log, size_t n) {
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    int rc = run(argv, env, at("%s/log", tmp), NULL, 120000);
    test_slurp(at("%s/log", tmp), log, n);
    return rc;
}

/* `make -C root <build args> DESTDIR=dest PREFIX=/usr/local GOAL`. */
static int make(const char *goal, char *log, size_t n) {
    char *argv[32];
    char destarg[sizeof(dest) + 16];
    int a = 0;
    snprintf(destarg, sizeof(destarg), "DESTDIR=%s", dest);
    argv[a++] = "make";
    argv[a++] = "-C";
    argv[a++] = root;
    argv[a++] = "--no-print-directory";
    for (int i = 0; i < nmargs; i++) argv[a++] = margs[i];
    argv[a++] = destarg;
    argv[a++] = "PREFIX=/usr/local";
    argv[a++] = (char *)goal;
    argv[a] = NULL;
    int rc = run(argv, NULL, at("%s/make.log", tmp), NULL, 300000);
    test_slurp(at("%s/make.log", tmp), log, n);
    return rc;
}

/* Find the tree and the build: this binary is ROOT/BUILD/hilock-tests. */
static void find_build(void) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    cr_assert_gt(n, 0);
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(root, sizeof(root), "%s", self);
    for (;;) {
        if (is_file(at("%s/Makefile", root)) && is_file(at("%s/include/hilock/hilock.h", root)))
            break;
        char *slash = strrchr(root, '/');
        cr_assert(slash != NULL && slash != root, "no source tree above %s", self);
        *slash = '\0';
    }
    snprintf(build, sizeof(build), "%s", self + strlen(root) + 1);

    /* The make variables of this build. */
    char text[4096];
    nmargs = 0;
    test_slurp(at("%s/make-args", self), text, sizeof(text));
    if (text[0] != '\0') {
        for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && nmargs < 16;
             line = strtok_r(NULL, "\n", &save)) {
            snprintf(margs[nmargs++], sizeof(margs[0]), "%s", line);
            if (strcmp(line, "SANITIZE=1") == 0) sanitized = 1;
            if (strncmp(line, "HIREDIS=", 8) == 0) snprintf(hiredis, sizeof(hiredis), "%s", line + 8);
            if (strncmp(line, "CC=", 3) == 0 && line[3]) snprintf(cc, sizeof(cc), "%s", line + 3);
        }
    } else {
        /* Built without mk/ecosystem.mk's help: guess from the name. */
        cr_assert(strlen(build) < 3 || strcmp(build + strlen(build) - 3, "/h1") != 0,
                  "%s/make-args is missing: cannot tell which hiredis this build uses", self);
        snprintf(margs[nmargs++], sizeof(margs[0]), "BUILD=%s", build);
        if (strcmp(build, "build/san") == 0) {
            snprintf(margs[nmargs++], sizeof(margs[0]), "SANITIZE=1");
            sanitized = 1;
        }
    }
}

static void setup(void) {
    find_build();
    snprintf(tmp, sizeof(tmp), "/tmp/hilock-install-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp));
    snprintf(dest, sizeof(dest), "%s/root", tmp);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

static void teardown(void) {
    if (srv_started) test_redis_stop(&srv);
    srv_started = 0;
    if (tmp[0] != '\0') nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Files (not directories) left under DESTDIR, listed into `list`. */
static char *leftovers;
static size_t leftovers_n;
static int count_files(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)ftw;
    if (flag != FTW_D && flag != FTW_DP) {
        size_t used = strlen(leftovers);
        snprintf(leftovers + used, leftovers_n - used, "  %s\n", path);
    }
    return 0;
}

/* ---- The program built against the installed copy ---------------------- */

static const char prog_c[] =
    "#include <stdio.h>\n"
    "#include <hilock/hilock.h>\n"
    "#if defined(USE_LIBEV)\n"
    "#include <hilock/adapters/libev.h>\n"
    "#elif defined(USE_LIBUV)\n"
    "#include <hilock/adapters/libuv.h>\n"
    "#else\n"
    "#include <event2/event.h>\n"
    "#include <hilock/adapters/libevent.h>\n"
    "#endif\n"
    "static hilock_client *client;\n"
    "static int rc = 1;\n"
    "static void on_closed(void *d) { (void)d; }\n"
    "static void on_released(int status, void *d) {\n"
    "    (void)d;\n"
    "    if (status == 0) rc = 0;\n"
    "    hilock_client_close(client, on_closed, NULL);\n"
    "}\n"
    "static void on_locked(hilock_hold *h, int status, void *d) {\n"
    "    (void)d;\n"
    "    if (status != 0) {\n"
    "        fprintf(stderr, \"acquire: %s\\n\", hilock_strerror(status));\n"
    "        hilock_client_close(client, on_closed, NULL);\n"
    "        return;\n"
    "    }\n"
    "    printf(\"fence %llu\\n\", (unsigned long long)hilock_hold_fence(h));\n"
    "    hilock_release(h, on_released, NULL);\n"
    "}\n"
    "int main(int argc, char **argv) {\n"
    "    hilock_loop loop;\n"
    "    hilock_config cfg;\n"
    "    if (argc != 3) return 2;\n"
    "#if defined(USE_LIBEV)\n"
    "    struct ev_loop *base = ev_loop_new(0);\n"
    "    hilock_libev_init(&loop, base);\n"
    "#elif defined(USE_LIBUV)\n"
    "    uv_loop_t base;\n"
    "    uv_loop_init(&base);\n"
    "    hilock_libuv_init(&loop, &base);\n"
    "#else\n"
    "    struct event_base *base = event_base_new();\n"
    "    hilock_libevent_init(&loop, base);\n"
    "#endif\n"
    "    hilock_config_init(&cfg);\n"
    "    cfg.url = argv[1];\n"
    "    if (hilock_client_new(&client, &cfg, &loop) != 0) return 3;\n"
    "    if (hilock_acquire(client, argv[2], NULL, on_locked, NULL, NULL) != 0) return 4;\n"
    "#if defined(USE_LIBEV)\n"
    "    ev_run(base, 0);\n"
    "    ev_loop_destroy(base);\n"
    "#elif defined(USE_LIBUV)\n"
    "    uv_run(&base, UV_RUN_DEFAULT);\n"
    "    if (uv_loop_close(&base) != 0) rc = 5;\n"
    "#else\n"
    "    event_base_dispatch(base);\n"
    "    event_base_free(base);\n"
    "#endif\n"
    "    return rc;\n"
    "}\n";

/* Compile prog.c into `out`: `defs` picks the adapter, `link` is what the
 * program itself links (its event loop); the static build links
 * libhilock.a with `pkg-config --static --libs`. */
static void build_prog_from(const char *src, const char *out, const char *defs, const char *link,
                            int use_static) {
    char cmd[8192], log[16384], extra[PATH_MAX * 3 + 128] = "";
    if (hiredis[0] != '\0') /* the same hiredis as the library, first */
        snprintf(extra, sizeof(extra), "-I%s/include -L%s/lib -Wl,-rpath,%s/lib",
                 hiredis, hiredis, hiredis);
    const char *libdir = at("%s/usr/local/lib", dest);
    if (use_static)
        snprintf(cmd, sizeof(cmd),
                 "%s -std=c11 -Wall -Wextra -Werror %s %s %s -o %s %s "
                 "$(pkg-config --cflags hilock) %s/libhilock.a "
                 "$(pkg-config --static --libs hilock | sed 's/-lhilock\\b//') %s",
                 cc, sanitized ? "-fsanitize=address,undefined" : "", extra, defs, out, src,
                 libdir, link);
    else
        snprintf(cmd, sizeof(cmd),
                 "%s -Wall -Wextra -Werror %s %s %s -o %s %s "
                 "$(pkg-config --cflags --libs hilock) %s -Wl,-rpath,%s",
                 cc, sanitized ? "-fsanitize=address,undefined" : "", extra, defs, out, src,
                 link, libdir);
    char pcpath[PATH_MAX + 32], sysroot[sizeof(dest) + 32];
    snprintf(pcpath, sizeof(pcpath), "PKG_CONFIG_PATH=%s/pkgconfig", libdir);
    snprintf(sysroot, sizeof(sysroot), "PKG_CONFIG_SYSROOT_DIR=%s", dest);
    char *env[] = {pcpath, sysroot, NULL};
    char full[sizeof(cmd) + 128];
    snprintf(full, sizeof(full), "cd %s && %s", tmp, cmd);
    cr_assert_eq(sh(env, full, log, sizeof(log)), 0, "cannot build %s:\n%s\n%s", out, full, log);
}

static void build_prog(const char *out, const char *defs, const char *link, int use_static) {
    build_prog_from("prog.c", out, at("-std=c11 %s", defs), link, use_static);
}

/* An example of the source tree, unchanged, built as its comment says:
 * `cc FILE.c $(pkg-config --cflags --libs hilock) -lLOOP`. */
static void build_example(const char *name, const char *link) {
    char src[PATH_MAX + 64];
    snprintf(src, sizeof(src), "%s/examples/%s.c", root, name);
    build_prog_from(src, at("ex_%s", name), "", link, 0);
}

/* Run a program of prog_c: its fence must be above `*last`, which it becomes. */
static void run_prog(const char *prog, const char *name, unsigned long long *last) {
    char log[4096];
    unsigned long long fence = 0;
    char *argv[] = {(char *)at("%s/%s", tmp, prog), srv.url, (char *)name, NULL};
    int rc = run(argv, NULL, at("%s/prog.out", tmp), NULL, 30000);
    test_slurp(at("%s/prog.out", tmp), log, sizeof(log));
    cr_expect_eq(rc, 0, "%s exited with %d:\n%s", prog, rc, log);
    const char *at_fence = strstr(log, "fence ");
    cr_expect(at_fence && sscanf(at_fence, "fence %llu", &fence) == 1, "%s: no fence in:\n%s", prog, log);
    cr_expect_gt(fence, *last, "%s: fence %llu after %llu", prog, fence, *last);
    *last = fence;
}

/* The C program in README.md (the first ```c block of "A first program")
 * or in hilock(3) (the first .EX block of EXAMPLES, unescaped), written to
 * tmp/`out` exactly as a reader would paste it. */
static void extract_snippet(const char *doc, const char *after, const char *open,
                            const char *close, int groff, const char *out) {
    static char text[262144];
    test_slurp(at("%s/%s", root, doc), text, sizeof(text));
    char *p = strstr(text, after);
    cr_assert_not_null(p, "%s: no \"%s\"", doc, after);
    p = strstr(p, open);
    cr_assert_not_null(p, "%s: no code after \"%s\"", doc, after);
    p += strlen(open);
    char *end = strstr(p, close);
    cr_assert_not_null(end, "%s: unterminated code block", doc);
    *end = '\0';
    FILE *f = fopen(at("%s/%s", tmp, out), "w");
    cr_assert_not_null(f);
    for (; *p; p++) {
        if (groff && p[0] == '\\' && p[1] == 'e') { fputc('\\', f); p++; }
        else if (groff && p[0] == '\\' && p[1] == '-') { fputc('-', f); p++; }
        else if (groff && p[0] == '\\' && p[1] == '&') p++;
        else fputc(*p, f);
    }
    fclose(f);
}

/* A documented program against the server: it must lock and exit 0. */
static void run_snippet(const char *prog) {
    char log[4096];
    char *argv[] = {(char *)at("%s/%s", tmp, prog), srv.url, NULL};
    int rc = run(argv, NULL, at("%s/snippet.out", tmp), NULL, 30000);
    test_slurp(at("%s/snippet.out", tmp), log, sizeof(log));
    cr_expect_eq(rc, 0, "%s exited with %d:\n%s", prog, rc, log);
    cr_expect_not_null(strstr(log, "locked, fence "), "%s:\n%s", prog, log);
}

/* An example against the server: it must take and release its lock. */
static void run_example(const char *prog) {
    char log[8192];
    char *argv[] = {(char *)at("%s/%s", tmp, prog), srv.url, "example", NULL};
    int rc = run(argv, NULL, at("%s/ex.out", tmp), NULL, 30000);
    test_slurp(at("%s/ex.out", tmp), log, sizeof(log));
    cr_expect_eq(rc, 0, "%s exited with %d:\n%s", prog, rc, log);
    cr_expect_not_null(strstr(log, "released \"example\""), "%s:\n%s", prog, log);
}

/* `man -M MANDIR --warnings 3 NAME` shows the installed page of NAME (a
 * ".so" link is followed), with every string of `want` and without a
 * warning. Returns 0, or 127 when man is not installed (nothing checked). */
static int check_installed_man(const char *mandir, const char *name, const char *const *want) {
    static char out[262144];
    char err[8192];
    char *argv[] = {"man", "--warnings", "-M", (char *)mandir, "3", (char *)name, NULL};
    char *env[] = {"MANWIDTH=80", "MANPAGER=cat", "PAGER=cat", "LC_ALL=C.UTF-8", NULL};
    int rc = run(argv, env, at("%s/man.out", tmp), at("%s/man.err", tmp), 60000);
    if (rc == 127) return 127;
    test_slurp(at("%s/man.out", tmp), out, sizeof(out));
    test_slurp(at("%s/man.err", tmp), err, sizeof(err));
    cr_expect_eq(rc, 0, "man -M %s 3 %s exited with %d:\n%s", mandir, name, rc, err);
    cr_expect_str_eq(err, "", "man -M %s 3 %s warns:\n%s", mandir, name, err);
    for (; *want; want++)
        cr_expect_not_null(strstr(out, *want), "man -M %s 3 %s: no \"%s\" in:\n%s", mandir, name, *want, out);
    return 0;
}

/* ---- Tests ---------------------------------------------------------------- */

Test(install, prefix_and_destdir, .init = setup, .fini = teardown, .timeout = 400) {
    char log[65536];
    const char *usr = at("%s/usr/local", dest);
    char usrdir[PATH_MAX];
    snprintf(usrdir, sizeof(usrdir), "%s", usr);

    int rc = make("install", log, sizeof(log));
    cr_assert_eq(rc, 0, "make install failed (%d):\n%s", rc, log);

    /* The layout. */
    static const char *const files[] = {
        "bin/hilock", "lib/libhilock.a", "lib/libhilock.so." VERSION,
        "lib/pkgconfig/hilock.pc", "include/hilock/hilock.h",
        "include/hilock/adapters/libevent.h", "include/hilock/adapters/libev.h",
        "include/hilock/adapters/libuv.h", "share/man/man1/hilock.1",
        "share/man/man3/hilock.3", "share/man/man3/hilock_acquire.3",
        "share/man/man3/hilock_wait_cancel.3", NULL};
    for (const char *const *f = files; *f; f++)
        cr_expect(is_file(at("%s/%s", usrdir, *f)), "not installed: %s", *f);

    /* Every page of man/man3/ (the ".so" links too, as files), unchanged;
     * then the installed pages as `man 3 NAME` shows them. */
    cr_expect_eq(sh(NULL, at("cd %s/man/man3 && for f in *.3; do cmp -s \"$f\" %s/share/man/man3/\"$f\" "
                             "|| echo \"not installed as it is: man/man3/$f\"; done", root, usrdir),
                    log, sizeof(log)), 0, "%s", log);
    cr_expect_str_eq(log, "", "%s", log);
    {
        static const char *const acquire[] = {"HILOCK_ACQUIRE(3)", "SYNOPSIS",
                                               "int hilock_acquire(hilock_client *c", "SEE ALSO", NULL};
        static const char *const cancel[] = {"HILOCK_ACQUIRE(3)", "hilock_wait_cancel",
                                              "int hilock_wait_cancel(hilock_wait *w);", NULL};
        const char *mandir = at("%s/share/man", usrdir);
        char mdir[PATH_MAX];
        snprintf(mdir, sizeof(mdir), "%s", mandir);
        if (check_installed_man(mdir, "hilock_acquire", acquire) == 0)
            check_installed_man(mdir, "hilock_wait_cancel", cancel);
    }
    cr_expect_eq(access(at("%s/bin/hilock", usrdir), X_OK), 0);

    char link[PATH_MAX];
    ssize_t n = readlink(at("%s/lib/libhilock.so", usrdir), link, sizeof(link) - 1);
    cr_expect_gt(n, 0, "lib/libhilock.so is not a symlink");
    link[n > 0 ? n : 0] = '\0';
    cr_expect_str_eq(link, "libhilock.so." SOVER);
    n = readlink(at("%s/lib/libhilock.so." SOVER, usrdir), link, sizeof(link) - 1);
    cr_expect_gt(n, 0, "lib/libhilock.so." SOVER " is not a symlink");
    link[n > 0 ? n : 0] = '\0';
    cr_expect_str_eq(link, "libhilock.so." VERSION);

    /* The soname, and only the public API exported. */
    cr_expect_eq(sh(NULL, at("readelf -d %s/lib/libhilock.so." VERSION " | grep SONAME", usrdir),
                    log, sizeof(log)), 0, "%s", log);
    cr_expect_not_null(strstr(log, "[libhilock.so." SOVER "]"), "soname: %s", log);
    cr_expect_eq(sh(NULL, at("nm -D --defined-only %s/lib/libhilock.so." VERSION
                             " | awk '{print $3}' | grep -v '^hilock_.*@@HILOCK_1\\.[01]$'"
                             " | grep -v '^HILOCK_1\\.[01]$' | grep -v '^$' || true",
                             usrdir), log, sizeof(log)), 0);
    cr_expect_str_eq(log, "", "exported beyond the public API, or not versioned:\n%s", log);
    cr_expect_eq(sh(NULL, at("nm -D --defined-only %s/lib/libhilock.so." VERSION
                             " | grep -c ' T hilock_acquire@@HILOCK_1\\.0$'", usrdir), log, sizeof(log)), 0,
                 "hilock_acquire is not exported as hilock_acquire@@HILOCK_1.0");
    /* What 1.1 added is under its own node: a program that uses it needs
     * that version at load time. */
    cr_expect_eq(sh(NULL, at("nm -D --defined-only %s/lib/libhilock.so." VERSION
                             " | grep -c ' T hilock_hold_eval@@HILOCK_1\\.1$'", usrdir), log, sizeof(log)), 0,
                 "hilock_hold_eval is not exported as hilock_hold_eval@@HILOCK_1.1");

    /* hilock.pc names the install paths, never DESTDIR. */
    test_slurp(at("%s/lib/pkgconfig/hilock.pc", usrdir), log, sizeof(log));
    cr_expect_not_null(strstr(log, "prefix=/usr/local\n"), "hilock.pc:\n%s", log);
    cr_expect_null(strstr(log, dest), "DESTDIR leaked into hilock.pc:\n%s", log);
    cr_expect_not_null(strstr(log, "Version: " VERSION "\n"), "hilock.pc:\n%s", log);

    /* Programs built with pkg-config against the installed copy. */
    FILE *f = fopen(at("%s/prog.c", tmp), "w");
    cr_assert_not_null(f);
    fputs(prog_c, f);
    fclose(f);
    build_prog("prog_libevent", "", "-levent", 0);
    build_prog("prog_libev", "-DUSE_LIBEV", "-lev", 0);
    /* <uv.h> needs POSIX declarations that -std=c11 alone hides. */
    build_prog("prog_libuv", "-DUSE_LIBUV -D_POSIX_C_SOURCE=200809L", "-luv", 0);
    build_prog("prog_static", "", "-levent", 1);
    cr_expect_eq(sh(NULL, at("readelf -d %s/prog_libevent | grep NEEDED", tmp), log, sizeof(log)), 0);
    cr_expect_not_null(strstr(log, "[libhilock.so." SOVER "]"), "not linked to the shared library:\n%s", log);
    sh(NULL, at("readelf -d %s/prog_static | grep NEEDED || true", tmp), log, sizeof(log));
    cr_expect_null(strstr(log, "libhilock"), "the static build needs libhilock.so:\n%s", log);

    /* The examples themselves, unchanged: a user copies them out of the
     * tree and builds them against the installed copy. */
    build_example("libevent_basic", "-levent");
    build_example("libev_basic", "-lev");
    build_example("libuv_basic", "-luv");
    build_example("many_waiters", "-levent");
    build_example("http_singleflight", "-levent");
    build_example("metrics", "-levent");
    build_example("transfers", "-levent");
    build_example("leader", "-levent");

    /* The programs in the README and in hilock(3), as pasted. */
    extract_snippet("README.md", "## A first program", "```c\n", "```\n", 0, "readme.c");
    extract_snippet("man/hilock.3", ".SH EXAMPLES", ".EX\n", ".EE\n", 1, "manpage.c");
    build_prog_from("readme.c", "readme", "-std=c11", "-levent", 0);
    build_prog_from("manpage.c", "manpage", "-std=c11", "-levent", 0);

    cr_assert_eq(test_redis_start(&srv, 0, NULL), 0);
    srv_started = 1;
    run_snippet("readme");
    run_snippet("manpage");
    run_example("ex_libevent_basic");
    run_example("ex_libev_basic");
    run_example("ex_libuv_basic");
    char metrics[65536], out[4096];
    char *margv[] = {(char *)at("%s/ex_metrics", tmp), srv.url, "installed-metrics", "5", NULL};
    rc = run(margv, NULL, at("%s/metrics.out", tmp), NULL, 30000);
    test_slurp(at("%s/metrics.out", tmp), metrics, sizeof(metrics));
    cr_expect_eq(rc, 0, "ex_metrics exited with %d:\n%s", rc, metrics);
    cr_expect_not_null(strstr(metrics, "hilock_acquires_total{app=\"metrics\",outcome=\"granted\"} 5\n"),
                       "%s", metrics);
    rc = promcheck(metrics, strlen(metrics), out, sizeof(out));
    cr_expect_eq(rc, 0, "promtool: %s", out);
    /* The multi-lock and election examples check their own promises. */
    char *targv[] = {(char *)at("%s/ex_transfers", tmp), srv.url, "4", "60", "2", NULL};
    rc = run(targv, NULL, at("%s/transfers.out", tmp), NULL, 30000);
    test_slurp(at("%s/transfers.out", tmp), out, sizeof(out));
    cr_expect_eq(rc, 0, "ex_transfers exited with %d:\n%s", rc, out);
    char *largv[] = {(char *)at("%s/ex_leader", tmp), srv.url, "2", "4", NULL};
    rc = run(largv, NULL, at("%s/leader.out", tmp), NULL, 30000);
    test_slurp(at("%s/leader.out", tmp), out, sizeof(out));
    cr_expect_eq(rc, 0, "ex_leader exited with %d:\n%s", rc, out);
    cr_expect_not_null(strstr(out, "4 terms among 2 candidates"), "%s", out);
    unsigned long long fence = 0;
    run_prog("prog_libevent", "installed", &fence);
    run_prog("prog_libev", "installed", &fence);
    run_prog("prog_libuv", "installed", &fence);
    run_prog("prog_static", "installed", &fence);

    /* The installed CLI. */
    char *argv[] = {(char *)at("%s/bin/hilock", usrdir), "-u", srv.url, "installed", "--",
                    "sh", "-c", "echo \"fence=$HILOCK_FENCE\"", NULL};
    rc = run(argv, NULL, at("%s/cli.out", tmp), NULL, 30000);
    test_slurp(at("%s/cli.out", tmp), log, sizeof(log));
    cr_expect_eq(rc, 0, "installed hilock exited with %d:\n%s", rc, log);
    const char *cli_fence = strstr(log, "fence=");
    unsigned long long f5 = 0;
    cr_expect(cli_fence && sscanf(cli_fence, "fence=%llu", &f5) == 1 && f5 > fence,
              "installed hilock: want a fence above %llu:\n%s", fence, log);

    /* Uninstall: no file is left, nor hilock's own directories. */
    rc = make("uninstall", log, sizeof(log));
    cr_assert_eq(rc, 0, "make uninstall failed (%d):\n%s", rc, log);
    char left[8192] = "";
    leftovers = left;
    leftovers_n = sizeof(left);
    nftw(dest, count_files, 16, FTW_PHYS);
    cr_expect_str_eq(left, "", "left behind by make uninstall:\n%s", left);
    struct stat st;
    cr_expect_neq(stat(at("%s/include/hilock", usrdir), &st), 0, "include/hilock is still there");
}

/* man -l renders both pages, without a warning from groff. */
static void check_man(const char *page, const char *const *want) {
    char out[65536], err[8192];
    char *argv[] = {"man", "--warnings", "-l", (char *)at("%s/man/%s", root, page), NULL};
    char *env[] = {"MANWIDTH=80", "MANPAGER=cat", "PAGER=cat", "LC_ALL=C.UTF-8", NULL};
    int rc = run(argv, env, at("%s/man.out", tmp), at("%s/man.err", tmp), 60000);
    test_slurp(at("%s/man.out", tmp), out, sizeof(out));
    test_slurp(at("%s/man.err", tmp), err, sizeof(err));
    cr_assert_neq(rc, 127, "man is not installed: apt-get install man-db (make test does)");
    cr_expect_eq(rc, 0, "man -l %s exited with %d:\n%s", page, rc, err);
    cr_expect_str_eq(err, "", "man -l %s warns:\n%s", page, err);
    for (; *want; want++)
        cr_expect_not_null(strstr(out, *want), "man -l %s: no \"%s\" in:\n%s", page, *want, out);
}

Test(install, man_pages_render, .init = setup, .fini = teardown, .timeout = 120) {
    static const char *const one[] = {"NAME", "SYNOPSIS", "EXIT STATUS", "HILOCK_FENCE",
                                      "hilock(3)", NULL};
    static const char *const three[] = {"NAME", "SYNOPSIS", "hilock_acquire", "HILOCK_ETIMEDOUT",
                                        "pkg-config", "hilock(1)", NULL};
    check_man("hilock.1", one);
    check_man("hilock.3", three);
}
