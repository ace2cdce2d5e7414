/* Tests of the command line of `hilock` (tools/hilock.c): its three forms,
 * NAME -- COMMAND, `unlock NAME` and `inspect NAME...`; a subcommand's
 * options before or after its name, with the same meaning; an option of
 * one form given to another, refused by name; and every usage error, which
 * says what is missing or wrong (exit 64). Each test runs the built binary
 * (BUILD/hilock, or $HILOCK_CLI) against a real redis-server started by the
 * harness, and checks its exit status, its stdout and stderr to the byte,
 * and the keys in Redis. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "hilock/hilock.h"
#include "support/harness.h"

static test_redis srv;
static char cli[PATH_MAX];          /* the binary under test */
static char dir[128];               /* this test's scratch dir */
static char out[16384], err[16384]; /* the last run's stdout and stderr */

static const char hint[] = "Try 'hilock --help' for more information.\n";
static const char inspect_hint[] = "Try 'hilock inspect --help' for more information.\n";

/* ---- Helpers ------------------------------------------------------------ */

/* A path in the scratch dir; a ring of buffers, so a few can be alive. */
static const char *tmp(const char *file) {
    static char ring[8][PATH_MAX];
    static int next;
    char *p = ring[next++ % 8];
    snprintf(p, PATH_MAX, "%s/%s", dir, file);
    return p;
}

/* The placeholders of an argument list: "@URL" is the server's URL, "@RAN"
 * a file that COMMAND creates if it runs. */
static const char *arg_of(const char *a) {
    if (strcmp(a, "@URL") == 0) return srv.url;
    if (strcmp(a, "@RAN") == 0) return tmp("ran");
    return a;
}

/* Run the CLI with args (NULL-terminated, no argv[0]) and env ("K=V",
 * NULL-terminated, or NULL) to its end: its exit status, with its stdout
 * in `out` and its stderr in `err`. */
static int run_env(char *const *env, const char *const *args) {
    char *argv[48];
    int n = 0, st;

    argv[n++] = cli;
    while (*args != NULL && n < 47) argv[n++] = (char *)arg_of(*args++);
    argv[n] = NULL;
    st = test_wait(test_spawn(argv, env, tmp("out"), tmp("err")), 20000);
    test_slurp(tmp("out"), out, sizeof(out));
    test_slurp(tmp("err"), err, sizeof(err));
    return st;
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define RUN(...) run_env(NULL, ARGS(__VA_ARGS__))

/* The last run was the usage error `msg`: status 64, "hilock: msg", then
 * the hint (`help`), nothing else, nothing on stdout, and COMMAND (if any
 * was "@RAN"'s) did not run. */
static void expect_usage(int st, const char *msg, const char *help, const char *what) {
    char want[4096];

    snprintf(want, sizeof(want), "hilock: %s\n%s", msg, help);
    cr_expect_eq(st, 64, "%s: exit %d, stderr: %s", what, st, err);
    cr_expect_str_eq(err, want, "%s", what);
    cr_expect_str_eq(out, "", "%s: stdout", what);
    cr_expect_neq(access(tmp("ran"), F_OK), 0, "%s: COMMAND ran", what);
}

/* A usage error case: the arguments, the message, and whose help the hint
 * names (1: inspect's). */
typedef struct usage_case {
    const char *args[16];
    const char *msg;
    int inspect;
} usage_case;

static void expect_usage_cases(const usage_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof(what), "case %zu (%s)", i, cases[i].msg);
        expect_usage(run_env(NULL, cases[i].args), cases[i].msg, cases[i].inspect ? inspect_hint : hint, what);
    }
}

/* Hold NAME under prefix, as some other client would: the lock, with no
 * lease, so that inspect prints the same thing every time, and its fence
 * (the last one given). */
static void hold(const char *prefix, const char *name, int fence) {
    char k[256];
    snprintf(k, sizeof(k), "%s{%s}", prefix, name);
    cr_assert_eq(test_redis_int(&srv, "SET %s someone-else", k), -1); /* +OK */
    cr_assert_eq(test_redis_int(&srv, "SET %s:fence %d", k, fence), -1);
    cr_assert_eq(test_redis_int(&srv, "EXISTS %s %s:fence", k, k), 2);
}

static long long held(const char *prefix, const char *name) {
    char k[256];
    snprintf(k, sizeof(k), "%s{%s}", prefix, name);
    return test_redis_int(&srv, "EXISTS %s", k);
}

/* A file of the source tree (rel to its top), read whole (to free); NULL
 * if there is none. */
static char *src_file(const char *rel) {
    char path[PATH_MAX];
    return test_src_path(rel, path, sizeof(path)) ? test_slurp_all(path) : NULL;
}

/* ---- Fixture ------------------------------------------------------------- */

static void setup(void) {
    static const char *const vars[] = { "HILOCK_URL", "HILOCK_STARVE", "HILOCK_CACERT", "HILOCK_CAPATH",
                                        "HILOCK_CERT", "HILOCK_KEY", "HILOCK_SNI", "HILOCK_INSECURE" };

    cr_assert_not_null(test_build_path("HILOCK_CLI", "hilock", cli, sizeof(cli)));
    cr_assert_eq(access(cli, X_OK), 0, "no CLI binary at %s (set HILOCK_CLI)", cli);
    cr_assert_eq(test_make_dir(dir, sizeof(dir)), 0);
    cr_assert_eq(test_redis_start(&srv, 0, NULL), 0, "cannot start redis-server");
    /* Whoever runs the tests must not change what a test asks for. */
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
}

static void teardown(void) {
    test_redis_stop(&srv);
    test_remove_dir(dir);
}

TestSuite(cli_grammar, .init = setup, .fini = teardown);

/* ---- Options before or after the subcommand's name ------------------------- */

/* Each arrangement of -u URL and -p PREFIX around `unlock NAME` breaks the
 * lock NAME under PREFIX, and only it: the same NAME under the default
 * prefix stays held. */
Test(cli_grammar, unlock_takes_its_options_before_and_after_its_name, .timeout = 60) {
    static const char *const ways[][8] = {
        { "-u", "@URL", "-p", "g:", "unlock", "n", NULL },
        { "unlock", "-u", "@URL", "-p", "g:", "n", NULL },
        { "-u", "@URL", "unlock", "-p", "g:", "n", NULL },
        { "-p", "g:", "unlock", "-u", "@URL", "n", NULL },
        { "unlock", "n", "-u", "@URL", "-p", "g:", NULL },
        { "unlock", "-u", "@URL", "n", "-p", "g:", NULL },
    };

    hold("hilock:", "n", 9);
    for (size_t i = 0; i < sizeof(ways) / sizeof(ways[0]); i++) {
        hold("g:", "n", 5);
        cr_assert_eq(run_env(NULL, ways[i]), 0, "way %zu: %s", i, err);
        cr_expect_str_eq(out, "hilock: removed the lock n (fence 5)\n", "way %zu", i);
        cr_expect_eq(held("g:", "n"), 0, "way %zu left g:{n}", i);
        cr_expect_eq(held("hilock:", "n"), 1, "way %zu broke hilock:{n}", i);
    }
    /* -v, before or after: the same progress line. */
    cr_assert_eq(RUN("-v", "unlock", "-u", "@URL", "-p", "g:", "n"), 0, "%s", err);
    cr_expect_not_null(strstr(err, "hilock: connecting to redis://127.0.0.1:"), "%s", err);
    cr_assert_eq(RUN("unlock", "-u", "@URL", "n", "-v", "-p", "g:"), 0, "%s", err);
    cr_expect_not_null(strstr(err, "hilock: connecting to redis://127.0.0.1:"), "%s", err);
}

/* Each arrangement of -u, -p and --json around `inspect NAME` prints what
 * `hilock inspect -u URL -p PREFIX --json NAME` does; --scan likewise. */
Test(cli_grammar, inspect_takes_its_options_before_and_after_its_name, .timeout = 60) {
    static const char *const ways[][10] = {
        { "-u", "@URL", "-p", "g:", "--json", "inspect", "n", NULL },
        { "-u", "@URL", "inspect", "-p", "g:", "n", "--json", NULL },
        { "--json", "inspect", "n", "-u", "@URL", "-p", "g:", NULL },
        { "-p", "g:", "inspect", "--json", "-u", "@URL", "n", NULL },
    };
    static const char *const scans[][10] = {
        { "--scan", "*", "-u", "@URL", "-p", "g:", "inspect", NULL },
        { "-u", "@URL", "inspect", "-p", "g:", "--scan", "*", NULL },
    };
    char want[sizeof(out)];

    hold("g:", "n", 5);
    cr_assert_eq(RUN("inspect", "-u", "@URL", "-p", "g:", "--json", "n"), 0, "%s", err);
    cr_assert_not_null(strstr(out, "\"name\": \"n\", \"kind\": \"mutex\""), "%s", out);
    cr_assert_not_null(strstr(out, "\"held\": true, \"token\": \"someone-else\", \"fence\": 5"), "%s", out);
    snprintf(want, sizeof(want), "%s", out);
    for (size_t i = 0; i < sizeof(ways) / sizeof(ways[0]); i++) {
        cr_assert_eq(run_env(NULL, ways[i]), 0, "way %zu: %s", i, err);
        cr_expect_str_eq(out, want, "way %zu", i);
        cr_expect_str_eq(err, "", "way %zu", i);
    }

    cr_assert_eq(RUN("inspect", "-u", "@URL", "-p", "g:", "--scan", "*"), 0, "%s", err);
    cr_assert_not_null(strstr(out, "\nn     mutex  held   someone-"), "%s", out);
    snprintf(want, sizeof(want), "%s", out);
    for (size_t i = 0; i < sizeof(scans) / sizeof(scans[0]); i++) {
        cr_assert_eq(run_env(NULL, scans[i]), 0, "scan %zu: %s", i, err);
        cr_expect_str_eq(out, want, "scan %zu", i);
    }
}

/* A COMMAND that prints $HILOCK_NAME (printf: echo would take "-n" for an
 * option of its own). */
#define SAY_NAME "printf '%s\\n' \"$HILOCK_NAME\""

/* NAME -- COMMAND takes its options before NAME, as ever; `unlock --` and
 * `inspect --`, options before or not, are locks of those names. */
Test(cli_grammar, lock_takes_its_options_before_name, .timeout = 60) {
    cr_assert_eq(RUN("-u", "@URL", "-p", "g:", "-w", "0", "n", "--", "sh", "-c", SAY_NAME), 0,
                 "%s", err);
    cr_expect_str_eq(out, "n\n");
    /* -- may end the options, for a NAME that begins with '-'. */
    cr_assert_eq(RUN("-u", "@URL", "--", "-n", "--", "sh", "-c", SAY_NAME), 0, "%s", err);
    cr_expect_str_eq(out, "-n\n");
    cr_assert_eq(RUN("-u", "@URL", "-w", "0", "unlock", "--", "sh", "-c", SAY_NAME), 0, "%s", err);
    cr_expect_str_eq(out, "unlock\n");
    cr_assert_eq(RUN("-w", "0", "-u", "@URL", "inspect", "--", "sh", "-c", SAY_NAME), 0, "%s", err);
    cr_expect_str_eq(out, "inspect\n");
    hold("hilock:", "inspect", 3);
    cr_assert_eq(RUN("-u", "@URL", "-w", "0", "inspect", "--", "touch", "@RAN"), 75, "%s", err);
    cr_expect_neq(access(tmp("ran"), F_OK), 0, "COMMAND ran under a held lock");
}

/* -h shows the help of the form, given before the subcommand's name or
 * after it; -V is the version anywhere. */
Test(cli_grammar, help_is_the_forms_wherever_given, .timeout = 30) {
    static const char *const inspect_help[][4] = { { "-h", "inspect", NULL }, { "inspect", "-h", NULL },
                                                   { "inspect", "n", "--help", NULL } };
    static const char *const main_help[][5] = { { "-h", NULL }, { "unlock", "-h", NULL }, { "-h", "unlock", NULL },
                                                { "--help", "n", "--", "true", NULL } };

    for (size_t i = 0; i < sizeof(inspect_help) / sizeof(inspect_help[0]); i++) {
        cr_assert_eq(run_env(NULL, inspect_help[i]), 0, "inspect %zu", i);
        cr_expect_eq(strncmp(out, "Usage: hilock inspect ", 22), 0, "inspect %zu: %s", i, out);
    }
    for (size_t i = 0; i < sizeof(main_help) / sizeof(main_help[0]); i++) {
        cr_assert_eq(run_env(NULL, main_help[i]), 0, "main %zu", i);
        cr_expect_eq(strncmp(out, "Usage: hilock [-u URL]", 22), 0, "main %zu: %s", i, out);
    }
    cr_assert_eq(RUN("inspect", "-V"), 0);
    cr_expect_eq(strncmp(out, "hilock " HILOCK_VERSION, strlen("hilock " HILOCK_VERSION)), 0, "%s", out);
}

/* ---- Options of one form given to another ---------------------------------- */

/* Refused by name, before or after the subcommand's name, and nothing
 * happens: the lock stays, COMMAND does not run. */
Test(cli_grammar, options_of_another_form_are_refused_by_name, .timeout = 60) {
    static const usage_case cases[] = {
        { { "-u", "@URL", "-w", "0", "unlock", "n", NULL }, "-w does not apply to unlock", 0 },
        { { "-u", "@URL", "unlock", "-w", "0", "n", NULL }, "-w does not apply to unlock", 0 },
        { { "unlock", "n", "-u", "@URL", "-E", "9", NULL }, "-E does not apply to unlock", 0 },
        { { "unlock", "-x", "-u", "@URL", "n", NULL }, "-x does not apply to unlock", 0 },
        { { "-u", "@URL", "unlock", "--kill-after", "5", "n", NULL }, "--kill-after does not apply to unlock", 0 },
        { { "-u", "@URL", "unlock", "--json", "n", NULL }, "--json does not apply to unlock (only to inspect)", 0 },
        { { "--scan", "*", "-u", "@URL", "unlock", "n", NULL }, "--scan does not apply to unlock (only to inspect)", 0 },
        { { "-u", "@URL", "inspect", "-w", "0", "n", NULL }, "-w does not apply to inspect", 1 },
        { { "-s", "-u", "@URL", "inspect", "n", NULL }, "-s does not apply to inspect", 1 },
        { { "-u", "@URL", "inspect", "n", "-n", "3", NULL }, "-n does not apply to inspect", 1 },
        { { "--starve", "20", "inspect", "-u", "@URL", "n", NULL }, "--starve does not apply to inspect", 1 },
        { { "-u", "@URL", "inspect", "-v", "n", NULL }, "-v does not apply to inspect", 1 },
        { { "-u", "@URL", "--json", "n", "--", "touch", "@RAN", NULL },
          "--json does not apply to NAME -- COMMAND (only to inspect)", 0 },
        { { "-u", "@URL", "--scan", "*", "n", "--", "touch", "@RAN", NULL },
          "--scan does not apply to NAME -- COMMAND (only to inspect)", 0 },
    };

    hold("hilock:", "n", 4);
    expect_usage_cases(cases, sizeof(cases) / sizeof(cases[0]));
    cr_expect_eq(held("hilock:", "n"), 1, "an unlock ran");
}

/* ---- Usage errors say what is missing or wrong ----------------------------- */

Test(cli_grammar, usage_errors_name_what_is_missing, .timeout = 60) {
    static char longname[HILOCK_NAME_MAX + 2];
    static char too_long[64];
    static const usage_case cases[] = {
        { { NULL }, "missing NAME, -- and COMMAND", 0 },
        { { "-u", "@URL", NULL }, "missing NAME, -- and COMMAND", 0 },
        /* The options ended at a -- that was the one before COMMAND. */
        { { "-u", "@URL", "--", "touch", "@RAN", NULL }, "missing NAME before --", 0 },
        { { "-u", "@URL", "--", NULL }, "missing NAME before -- and COMMAND after it", 0 },
        { { "-u", "@URL", "--", "--", "touch", "@RAN", NULL }, "missing NAME before --", 0 },
        { { "-u", "@URL", "n", NULL }, "missing -- and COMMAND after NAME", 0 },
        { { "-u", "@URL", "n", "touch", "@RAN", NULL }, "missing -- between NAME and COMMAND", 0 },
        { { "-u", "@URL", "n", "--", NULL }, "missing COMMAND after --", 0 },
        { { "-u", "@URL", "n", "extra", "--", "touch", "@RAN", NULL },
          "extra operand 'extra' between NAME and --: NAME is one argument (quote it)", 0 },
        { { "-u", "@URL", "n", "-w", "0", "--", "touch", "@RAN", NULL },
          "option -w after NAME: options go before NAME", 0 },
        { { "-u", "@URL", "", "--", "touch", "@RAN", NULL }, "empty lock NAME", 0 },
        { { "-u", "@URL", longname, "--", "touch", "@RAN", NULL }, too_long, 0 },
        { { "-u", "@URL", "unlock", NULL }, "missing NAME after unlock", 0 },
        { { "unlock", "-u", "@URL", NULL }, "missing NAME after unlock", 0 },
        { { "-u", "@URL", "unlock", "n", "touch", "@RAN", NULL },
          "extra operand 'touch' after unlock NAME: unlock takes one NAME", 0 },
        { { "unlock", "-u", "@URL", "", NULL }, "empty lock NAME", 0 },
        { { "-u", "@URL", "inspect", NULL }, "missing NAME (or --scan PATTERN) after inspect", 1 },
        { { "inspect", "-u", "@URL", "--scan", "*", "n", NULL }, "--scan PATTERN takes no NAME, but 'n' follows", 1 },
        { { "inspect", "-u", "@URL", "n", longname, NULL }, too_long, 1 },
    };

    memset(longname, 'n', HILOCK_NAME_MAX + 1);
    snprintf(too_long, sizeof(too_long), "lock NAME of %d bytes is too long: at most %d", HILOCK_NAME_MAX + 1,
             HILOCK_NAME_MAX);
    expect_usage_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

Test(cli_grammar, usage_errors_name_the_bad_option, .timeout = 60) {
    static const usage_case cases[] = {
        { { "-u", "@URL", "-q", "n", "--", "touch", "@RAN", NULL }, "unknown option -q", 0 },
        { { "-u", "@URL", "-vq", "n", "--", "touch", "@RAN", NULL }, "unknown option -q", 0 },
        { { "-u", "@URL", "--bogus", "n", "--", "touch", "@RAN", NULL }, "unknown option --bogus", 0 },
        { { "-u", "@URL", "--bogus=1", "n", "--", "touch", "@RAN", NULL }, "unknown option --bogus", 0 },
        { { "-u", "@URL", "unlock", "-q", "n", NULL }, "unknown option -q", 0 },
        { { "inspect", "-u", "@URL", "--bogus", "n", NULL }, "unknown option --bogus", 1 },
        { { "--s", "5", "-u", "@URL", "n", "--", "touch", "@RAN", NULL },
          "ambiguous option --s: --sni, --starve or --scan?", 0 },
        { { "-u", "@URL", "--json=1", "inspect", "n", NULL }, "option --json takes no value", 1 },
        { { "-u", "@URL", "--insecure=yes", "n", "--", "touch", "@RAN", NULL }, "option --insecure takes no value", 0 },
        { { "-u", "@URL", "-w", NULL }, "option -w needs a value", 0 },
        { { "-u", "@URL", "--kill-after", NULL }, "option --kill-after needs a value", 0 },
        { { "unlock", "n", "-u", NULL }, "option -u needs a value", 0 },
        { { "inspect", "-u", "@URL", "n", "--scan", NULL }, "option --scan needs a value", 1 },
        { { "inspect", "-u", "@URL", "n", "--cacert", NULL }, "option --cacert needs a value", 1 },
        { { "-u", "@URL", "-s", "-x", "n", "--", "touch", "@RAN", NULL },
          "-s and -x exclude each other: give one of -n, -s, -x and -f", 0 },
        { { "-u", "@URL", "-n", "2", "-f", "n", "--", "touch", "@RAN", NULL },
          "-n and -f exclude each other: give one of -n, -s, -x and -f", 0 },
        { { "-u", "@URL", "--cert", "c.pem", "n", "--", "touch", "@RAN", NULL },
          "--cert and --key go together: --key FILE (or $HILOCK_KEY) is missing", 0 },
        { { "inspect", "-u", "@URL", "--key", "k.pem", "n", NULL },
          "--cert and --key go together: --cert FILE (or $HILOCK_CERT) is missing", 1 },
    };

    expect_usage_cases(cases, sizeof(cases) / sizeof(cases[0]));
    /* -s twice, or -n twice, is no conflict. */
    cr_expect_eq(RUN("-u", "@URL", "-s", "-s", "-w", "0", "n", "--", "true"), 0, "%s", err);
    cr_expect_eq(RUN("-u", "@URL", "-n", "2", "-n", "3", "-w", "0", "n", "--", "true"), 0, "%s", err);
}

/* A bad value says why, and what is wanted. */
Test(cli_grammar, bad_values_say_why, .timeout = 60) {
    static char lease_small[128];
    static const usage_case cases[] = {
        { { "-u", "@URL", "-w", "abc", "n", "--", "touch", "@RAN", NULL },
          "bad -w WAIT_MS 'abc': not a decimal number; want milliseconds, 0 to 9223372036854775807 (0: try once)", 0 },
        { { "-u", "@URL", "-w", "-5", "n", "--", "touch", "@RAN", NULL },
          "bad -w WAIT_MS '-5': negative; want milliseconds, 0 to 9223372036854775807 (0: try once)", 0 },
        { { "-u", "@URL", "-w", "", "n", "--", "touch", "@RAN", NULL },
          "bad -w WAIT_MS '': empty; want milliseconds, 0 to 9223372036854775807 (0: try once)", 0 },
        { { "-u", "@URL", "-w", "99999999999999999999", "n", "--", "touch", "@RAN", NULL },
          "bad -w WAIT_MS '99999999999999999999': too large; want milliseconds, 0 to 9223372036854775807 "
          "(0: try once)", 0 },
        { { "-u", "@URL", "-l", "5", "n", "--", "touch", "@RAN", NULL }, lease_small, 0 },
        { { "-u", "@URL", "-l", "10 s", "n", "--", "touch", "@RAN", NULL },
          "bad -l LEASE_MS '10 s': not a decimal number; want milliseconds, 10 to 2147483647", 0 },
        { { "-u", "@URL", "-E", "0", "n", "--", "touch", "@RAN", NULL },
          "bad -E CODE '0': too small; want an exit status, 1 to 255 (0 would read as success)", 0 },
        { { "-u", "@URL", "-E", "256", "n", "--", "touch", "@RAN", NULL },
          "bad -E CODE '256': too large; want an exit status, 1 to 255 (0 would read as success)", 0 },
        { { "-u", "@URL", "-n", "0", "n", "--", "touch", "@RAN", NULL },
          "bad -n N '0': too small; want a number of permits, 1 to 1000000", 0 },
        { { "-u", "@URL", "-n", "1000001", "n", "--", "touch", "@RAN", NULL },
          "bad -n N '1000001': too large; want a number of permits, 1 to 1000000", 0 },
        { { "-u", "@URL", "--starve", "0", "n", "--", "touch", "@RAN", NULL },
          "bad --starve MS '0': too small; want milliseconds, 1 to 2147483647, or off", 0 },
        { { "-u", "http://x", "n", "--", "touch", "@RAN", NULL },
          "bad Redis URL 'http://x': unknown scheme: want redis://, rediss://, unix://, redis-sentinel://, "
          "rediss-sentinel://, redlock:// or redlocks://", 0 },
        { { "-u", "127.0.0.1:6379", "n", "--", "touch", "@RAN", NULL },
          "bad Redis URL '127.0.0.1:6379': no scheme: want redis://HOST[:PORT] or another form of hilock(1)", 0 },
        { { "-u", "", "n", "--", "touch", "@RAN", NULL }, "bad Redis URL '': empty", 0 },
        { { "-u", "redis://127.0.0.1:0", "unlock", "n", NULL },
          "bad Redis URL 'redis://127.0.0.1:0': the port is not a number from 1 to 65535", 0 },
        { { "unlock", "n", "-u", "redis://127.0.0.1/x", NULL },
          "bad Redis URL 'redis://127.0.0.1/x': the database after / is not a number from 0 to 1048576", 0 },
        { { "-u", "redis://a,,b", "n", "--", "touch", "@RAN", NULL },
          "bad Redis URL 'redis://a,,b': an empty HOST (two commas, or one at an end)", 0 },
        { { "-u", "redis-sentinel://127.0.0.1:26379", "n", "--", "touch", "@RAN", NULL },
          "bad Redis URL 'redis-sentinel://127.0.0.1:26379': no #MASTER at its end: want "
          "redis-sentinel://HOST[:PORT][,HOST[:PORT]...]#MASTER", 0 },
        { { "-u", "unix://run/redis.sock", "n", "--", "touch", "@RAN", NULL },
          "bad Redis URL 'unix://run/redis.sock': want unix:///path/to/socket, an absolute path", 0 },
        { { "inspect", "-u", "http://x", "n", NULL },
          "bad Redis URL 'http://x': unknown scheme: want redis://, rediss://, unix://, redis-sentinel://, "
          "rediss-sentinel://, redlock:// or redlocks://", 1 },
        /* The password stays out of the message, whatever is wrong. */
        { { "-u", "redis://u:s3cr3t@127.0.0.1:99999", "inspect", "n", NULL },
          "bad Redis URL 'redis://***@127.0.0.1:99999': the port is not a number from 1 to 65535", 1 },
    };

    snprintf(lease_small, sizeof(lease_small),
             "bad -l LEASE_MS '5': too small; want milliseconds, %u to 2147483647", HILOCK_LEASE_MIN);
    expect_usage_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

/* From the environment, the message names the variable. */
Test(cli_grammar, bad_values_from_the_environment_name_it, .timeout = 30) {
    char *starve[] = { "HILOCK_STARVE=5x", NULL }, *url[] = { "HILOCK_URL=ftp://x", NULL };

    expect_usage(run_env(starve, ARGS("-u", "@URL", "n", "--", "touch", "@RAN")),
                 "bad $HILOCK_STARVE '5x': not a decimal number; want milliseconds, 1 to 2147483647, or off", hint,
                 "$HILOCK_STARVE");
    expect_usage(run_env(url, ARGS("n", "--", "touch", "@RAN")),
                 "bad Redis URL 'ftp://x' (from $HILOCK_URL): unknown scheme: want redis://, rediss://, unix://, "
                 "redis-sentinel://, rediss-sentinel://, redlock:// or redlocks://", hint, "$HILOCK_URL");
    expect_usage(run_env(url, ARGS("inspect", "n")),
                 "bad Redis URL 'ftp://x' (from $HILOCK_URL): unknown scheme: want redis://, rediss://, unix://, "
                 "redis-sentinel://, rediss-sentinel://, redlock:// or redlocks://", inspect_hint,
                 "$HILOCK_URL, inspect");
    /* -u overrides it: the bad variable is not read. */
    cr_expect_eq(run_env(url, ARGS("-u", "@URL", "n", "--", "true")), 0, "%s", err);
}

/* -p with braces says that braces are the fault, in every form, before or
 * after the subcommand's name; too long says so; an empty PREFIX is one
 * the library takes. */
Test(cli_grammar, prefix_with_braces_says_braces_are_not_allowed, .timeout = 60) {
    static char long_prefix[HILOCK_PREFIX_MAX + 2];
    static char too_long[96];
    static const char braces[] = "bad -p PREFIX 'my{pfx': braces are not allowed (the keys put NAME between "
                                 "braces, as their Redis Cluster hash tag)";
    static const usage_case cases[] = {
        { { "-u", "@URL", "-p", "my{pfx", "n", "--", "touch", "@RAN", NULL }, braces, 0 },
        { { "-u", "@URL", "-p", "my{pfx", "unlock", "n", NULL }, braces, 0 },
        { { "-u", "@URL", "unlock", "n", "-p", "my{pfx", NULL }, braces, 0 },
        { { "-p", "my{pfx", "inspect", "-u", "@URL", "n", NULL }, braces, 1 },
        { { "inspect", "-u", "@URL", "-p", "my{pfx", "n", NULL }, braces, 1 },
        { { "-u", "@URL", "-p", "a}", "n", "--", "touch", "@RAN", NULL },
          "bad -p PREFIX 'a}': braces are not allowed (the keys put NAME between braces, as their Redis Cluster "
          "hash tag)", 0 },
        { { "-u", "@URL", "-p", long_prefix, "n", "--", "touch", "@RAN", NULL }, too_long, 0 },
    };

    memset(long_prefix, 'p', HILOCK_PREFIX_MAX + 1);
    snprintf(too_long, sizeof(too_long), "bad -p PREFIX of %d bytes: too long, at most %d", HILOCK_PREFIX_MAX + 1,
             HILOCK_PREFIX_MAX);
    hold("my{pfx", "n", 2);
    expect_usage_cases(cases, sizeof(cases) / sizeof(cases[0]));
    cr_expect_eq(held("my{pfx", "n"), 1, "an unlock ran");
    long_prefix[HILOCK_PREFIX_MAX] = '\0';
    cr_expect_eq(RUN("-u", "@URL", "-p", long_prefix, "-w", "0", "n", "--", "true"), 0, "%s", err);
    cr_expect_eq(RUN("-u", "@URL", "-p", "", "-w", "0", "n", "--", "true"), 0, "%s", err);
}

/* ---- unlock on a free lock -------------------------------------------------- */

/* No holder, no warning: only that NAME was not held, on stdout, and exit
 * 0 as for a lock removed (NAME is free either way), options before or
 * after the name. A held one still gets the warning. */
Test(cli_grammar, unlock_of_a_free_lock_says_not_held_without_the_warning, .timeout = 30) {
    static const char warning[] = "hilock: warning: forced held open; its holder, if alive, keeps acting as the "
                                  "owner until its next renewal fails\n";

    cr_assert_eq(RUN("-u", "@URL", "unlock", "free"), 0, "%s", err);
    cr_expect_str_eq(out, "hilock: free was not held\n");
    cr_expect_str_eq(err, "");
    cr_assert_eq(RUN("unlock", "free", "-u", "@URL"), 0, "%s", err);
    cr_expect_str_eq(out, "hilock: free was not held\n");
    cr_expect_str_eq(err, "");

    hold("hilock:", "held", 12);
    cr_assert_eq(RUN("unlock", "-u", "@URL", "held"), 0, "%s", err);
    cr_expect_str_eq(out, "hilock: removed the lock held (fence 12)\n");
    cr_expect_str_eq(err, warning);
    /* Now free: said so, quietly, still 0. */
    cr_assert_eq(RUN("unlock", "-u", "@URL", "held"), 0, "%s", err);
    cr_expect_str_eq(out, "hilock: held was not held\n");
    cr_expect_str_eq(err, "");
}

/* ---- Documented --------------------------------------------------------------- */

/* --help, the man page and inspect's help say where the options go, and
 * the man page what unlock of a free lock does and exits with. */
Test(cli_grammar, grammar_is_documented, .timeout = 30) {
    static const char *const in_help[] = {
        "       hilock unlock [-u URL] [-p PREFIX] [TLS OPTIONS] [-v] NAME\n",
        "       hilock revoke [-u URL] [-p PREFIX] [TLS OPTIONS] [-v] NAME\n",
        "[-v] -m NAME [-m NAME...]\n",
        "The options of unlock, revoke and inspect go before or after the\nsubcommand's name (and its NAMEs)",
        "`hilock -u URL\nunlock NAME` is `hilock unlock -u URL NAME`",
        "or that NAME was not held. It exits 0 either way (NAME is free), 64 (usage)\n",
    };
    static const char *const in_man[] = {
        ".B hilock unlock\n", ".SH DIAGNOSTICS\n", "before or after the name of its subcommand",
        "does not apply to", "braces are not allowed", "missing NAME before \\-\\-",
        "It exits 0 whether it removed a lock or", "only when it removed a lock",
        ".SH REVOKE\n", "It never takes the lock away", ".B HILOCK_FENCES\n", ".BI \\-m \" NAME\"\n",
    };
    char *page = src_file("man/hilock.1");

    cr_assert_eq(RUN("--help"), 0);
    for (size_t i = 0; i < sizeof(in_help) / sizeof(in_help[0]); i++)
        cr_expect_not_null(strstr(out, in_help[i]), "--help lacks \"%s\":\n%s", in_help[i], out);
    cr_assert_eq(RUN("inspect", "--help"), 0);
    cr_expect_not_null(strstr(out, "`hilock -u URL inspect NAME` is `hilock inspect -u URL NAME`"), "%s", out);
    cr_assert_not_null(page, "no man/hilock.1 above the test binary");
    for (size_t i = 0; i < sizeof(in_man) / sizeof(in_man[0]); i++)
        cr_expect_not_null(strstr(page, in_man[i]), "man/hilock.1 lacks \"%s\"", in_man[i]);
    free(page);
}
