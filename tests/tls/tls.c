/* TLS: rediss:// and its sister forms. Built against hiredis >= 1.0 with
 * SSL (HILOCK_HAVE_TLS, e.g. make HIREDIS=/tmp/hiredis1 after
 * scripts/hiredis1.sh), the suite runs against redis-server's TLS port with
 * certificates openssl makes here; built without (Debian's hiredis 0.14),
 * it checks that every TLS URL is refused with HILOCK_ETLS. */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/clusterenv.h"
#include "support/exclusion_procs.h"
#include "support/tlsenv.h"
#include "support/sentinelenv.h"

static const char *const tls_urls[] = {
    "rediss://127.0.0.1:6379", "rediss://127.0.0.1:7000,127.0.0.1:7001",
    "rediss-sentinel://127.0.0.1:26379#mymaster", "redlocks://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
};

/* The ETLS message says what to install, whichever build this is: it is all
 * a caller has when hilock_client_new() refuses. */
Test(tls, strerror_says_what_to_build) {
    const char *m = hilock_strerror(HILOCK_ETLS);
    cr_expect_not_null(strstr(m, "TLS"), "%s", m);
    cr_expect_not_null(strstr(m, "hiredis >= 1.0 with SSL"), "%s", m);
    cr_expect_not_null(strstr(m, "scripts/hiredis1.sh"), "%s", m);
}

/* The plain forms are untouched by TLS's, and a near-miss is no URL. */
Test(tls, url_forms) {
    static const char *const bad[] = {"redisss://127.0.0.1", "rediss-://h", "redlocks:/h",
                                      "rediss-sentinel://127.0.0.1:26379"};
    hilock_config cfg;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        hilock_config_init(&cfg);
        cfg.url = bad[i];
        cr_expect_eq(hilock_config_check(&cfg), HILOCK_EURL, "%s", bad[i]);
    }
    hilock_config_init(&cfg);
    cfg.url = "redis://127.0.0.1:6379";
    cfg.tls_ca_file = "/nonexistent/ca.crt"; /* ignored without TLS in the URL */
    cr_expect_eq(hilock_config_check(&cfg), 0);
}

/* The CLI with argv[1..] (NULL-terminated) and env ("K=V", may be NULL):
 * its exit status, its stderr into err. */
static int run_cli(char *const *args, char *const *env, char *err, size_t n) {
    char cli[512], out[600], errf[600], dir[128];
    char *argv[24];
    int a = 0;
    cr_assert_not_null(test_build_path("HILOCK_CLI", "hilock", cli, sizeof(cli)));
    cr_assert_eq(test_make_dir(dir, sizeof(dir)), 0);
    snprintf(out, sizeof(out), "%s/out", dir);
    snprintf(errf, sizeof(errf), "%s/err", dir);
    argv[a++] = cli;
    for (; *args && a < 23; args++) argv[a++] = *args;
    argv[a] = NULL;
    pid_t pid = test_spawn(argv, env, out, errf);
    cr_assert_gt(pid, 0);
    int st = test_wait(pid, 20000);
    test_slurp(errf, err, n);
    test_remove_dir(dir);
    return st;
}

#ifndef HILOCK_HAVE_TLS

/* The CLI says what to build with, and exits 69 (Redis could not be used). */
Test(tls, cli_not_built_in, .timeout = 30) {
    char err[1024];
    char *args[] = {"-u", "rediss://127.0.0.1:6379", "-w", "0", "x", "--", "true", NULL};
    cr_expect_eq(run_cli(args, NULL, err, sizeof(err)), 69, "stderr: %s", err);
    cr_expect_not_null(strstr(err, "hiredis >= 1.0 with SSL"), "stderr: %s", err);
}

Test(tls, not_built_in_refuses_every_tls_url) {
    lockenv e;
    memset(&e, 0, sizeof(e));
    lockenv_loop(&e);
    cr_expect_eq(hilock_tls_available(), 0);
    for (size_t i = 0; i < sizeof(tls_urls) / sizeof(tls_urls[0]); i++) {
        hilock_config cfg;
        hilock_client *c = (hilock_client *)&cfg; /* must be reset to NULL */
        lockenv_config(&cfg, tls_urls[i]);
        cr_expect_eq(hilock_config_check(&cfg), HILOCK_ETLS, "%s", tls_urls[i]);
        cr_expect_eq(hilock_client_new(&c, &cfg, &e.loop), HILOCK_ETLS, "%s", tls_urls[i]);
        cr_expect_null(c);
    }
    event_base_free(e.base);
}

#else /* HILOCK_HAVE_TLS */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <openssl/ssl.h>

static test_tls certs;
static test_tls_redis srv;
static lockenv e;

static void setup_certs(void) {
    cr_assert_eq(test_tls_make(&certs), 0, "openssl could not make the certificates");
    memset(&e, 0, sizeof(e));
    lockenv_loop(&e);
}

static void start(const char *auth_clients) {
    cr_assert_eq(test_tls_redis_start(&srv, &certs, auth_clients), 0, "redis-server with TLS did not start");
    e.r = srv.r; /* the plain port: for inspection only */
}

static void teardown_all(void) {
    test_tls_redis_stop(&srv);
    memset(&e.r, 0, sizeof(e.r));
    if (e.base) event_base_free(e.base);
    e.base = NULL;
    test_tls_free(&certs);
}

static void log_stderr(int level, const char *msg, void *data) {
    (void)data;
    if (getenv("TLS_DEBUG")) fprintf(stderr, "log %d: %s\n", level, msg);
}

/* A TLS config with the test CA and short timings. */
static hilock_config tls_cfg(void) {
    hilock_config cfg;
    lockenv_config(&cfg, srv.url);
    cfg.log_cb = log_stderr;
    cfg.tls_ca_file = certs.ca;
    cfg.reconnect_max_ms = 200;
    return cfg;
}

/* One try-once acquire, then release: 0 or the first error. */
static int lock_once(const hilock_config *cfg, char *errstr, size_t n) {
    hilock_client *c = lockenv_client_cfg(&e, cfg);
    hilock_acquire_opts o = opts_wait(0);
    got g = acquire_now(&e, c, "tls", &o);
    int rc = g.status == 0 ? release_now(&e, g.hold) : g.status;
    snprintf(errstr, n, "%s", hilock_client_errstr(c));
    hilock_client_free(c);
    return rc;
}

Test(tls, available_and_checked_at_config, .init = setup_certs, .fini = teardown_all) {
    hilock_config cfg;
    cr_expect_eq(hilock_tls_available(), 1);
    for (size_t i = 0; i < sizeof(tls_urls) / sizeof(tls_urls[0]); i++) {
        lockenv_config(&cfg, tls_urls[i]);
        cfg.tls_ca_file = certs.ca;
        cr_expect_eq(hilock_config_check(&cfg), 0, "%s", tls_urls[i]);
    }
    lockenv_config(&cfg, "rediss://127.0.0.1:6379");
    cfg.tls_ca_file = "/nonexistent/ca.crt";
    cr_expect_eq(hilock_config_check(&cfg), HILOCK_ETLS, "a CA file that is not there");
    cfg.tls_ca_file = certs.ca;
    cfg.tls_cert_file = certs.client_cert;
    cr_expect_eq(hilock_config_check(&cfg), HILOCK_EINVAL, "a certificate without its key");
    cfg.tls_key_file = certs.server_key;
    cr_expect_eq(hilock_config_check(&cfg), HILOCK_ETLS, "a key that is not the certificate's");
    cfg.tls_key_file = certs.client_key;
    cr_expect_eq(hilock_config_check(&cfg), 0);
}

/* a lets go of `held`; b's waiter gb must then be granted by the release
 * message, within 500 ms. Returns gb's status (its hold is the caller's). */
static int handed_over(hilock_client *a, hilock_hold *held, hilock_client *b, got *gb) {
    long long released_at = test_now_ms();
    cr_assert_eq(release_now(&e, held), 0, "%s", hilock_client_errstr(a));
    test_loop_until(e.base, &gb->calls, 5000);
    cr_assert_eq(gb->calls, 1);
    cr_expect_eq(gb->status, 0, "%s: %s", hilock_strerror(gb->status), hilock_client_errstr(b));
    cr_expect_lt(gb->at_ms - released_at, 500, "woken %lld ms after the release: not by the message",
                 gb->at_ms - released_at);
    return gb->status;
}

/* Server-only TLS: a lock, and a waiter woken by the release (its
 * subscriber connection is TLS too). */
Test(tls, server_only_lock_and_wake, .init = setup_certs, .fini = teardown_all, .timeout = 30) {
    start("no");
    hilock_config cfg = tls_cfg();
    cfg.linger_ms = 2000;
    hilock_client *a = lockenv_client_cfg(&e, &cfg), *b = lockenv_client_cfg(&e, &cfg);
    got ga = acquire_now(&e, a, "tls", NULL);
    cr_assert_eq(ga.status, 0, "%s: %s", hilock_strerror(ga.status), hilock_client_errstr(a));
    got gb = {0, 0, NULL, 0};
    hilock_acquire_opts o = opts_wait(10000);
    cr_assert_eq(hilock_acquire(b, "tls", &o, got_cb, &gb, NULL), 0);
    /* b listens (over its TLS subscriber connection) before a lets go. */
    long long until = test_now_ms() + 5000;
    while (numsub(&srv.r, "tls") < 1 && test_now_ms() < until) test_loop_for(e.base, 20);
    cr_assert_geq(numsub(&srv.r, "tls"), 1, "the waiter never subscribed: %s", hilock_client_errstr(b));
    cr_expect_eq(gb.calls, 0);
    if (handed_over(a, ga.hold, b, &gb) == 0) cr_expect_eq(release_now(&e, gb.hold), 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

Test(tls, mutual_with_client_certificate, .init = setup_certs, .fini = teardown_all, .timeout = 30) {
    char why[256];
    start("yes");
    hilock_config cfg = tls_cfg();
    cfg.tls_cert_file = certs.client_cert;
    cfg.tls_key_file = certs.client_key;
    int rc = lock_once(&cfg, why, sizeof(why));
    cr_expect_eq(rc, 0, "%s: %s", hilock_strerror(rc), why);
}

/* The default user with nothing but the one-server rule of docs/tls-and-acl.md (no
 * +ping): the TLS subscriber's greeting (HELLO, as any ACL allows) passes,
 * and the waiter is woken by the message. */
Test(tls, default_user_with_the_acl_rule, .init = setup_certs, .fini = teardown_all, .timeout = 30) {
    start("no");
    redisReply *rep = test_redis_cmd(&srv.r, "ACL SETUSER default on nopass resetkeys ~hilock:* resetchannels "
                                     "&hilock:* -@all +eval +evalsha +info +subscribe +unsubscribe +publish "
                                     "+time +get +mget +set +incr +del +exists +pexpire +pexpireat +pttl +hget +hset "
                                     "+hmget +hdel +hexists +hincrby +zadd +zcard +zpopmin +zrange "
                                     "+zrangebyscore +zrem +zremrangebyscore +zscore");
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "ACL SETUSER");
    freeReplyObject(rep);
    hilock_config cfg = tls_cfg();
    cfg.linger_ms = 2000;
    hilock_client *a = lockenv_client_cfg(&e, &cfg), *b = lockenv_client_cfg(&e, &cfg);
    got ga = acquire_now(&e, a, "tls-acl", NULL);
    cr_assert_eq(ga.status, 0, "%s: %s", hilock_strerror(ga.status), hilock_client_errstr(a));
    got gb = {0, 0, NULL, 0};
    hilock_acquire_opts o = opts_wait(10000);
    cr_assert_eq(hilock_acquire(b, "tls-acl", &o, got_cb, &gb, NULL), 0);
    test_loop_for(e.base, 300); /* b subscribes (PUBSUB is not ours to ask now) */
    cr_expect_eq(gb.calls, 0);
    if (handed_over(a, ga.hold, b, &gb) == 0) cr_expect_eq(release_now(&e, gb.hold), 0);
    hilock_stats st = stats_of(b);
    cr_expect_geq(st.wakeups, 1, "not woken by the message");
    hilock_client_free(a);
    hilock_client_free(b);
}

/* Each refusal ends the try at once with HILOCK_ETLS and says why; nothing
 * waits for a timeout. */
static void expect_refused(const hilock_config *cfg, const char *because, const char *says) {
    char why[256];
    long long t0 = test_now_ms();
    int rc = lock_once(cfg, why, sizeof(why));
    cr_expect_eq(rc, HILOCK_ETLS, "%s (%s): %s", hilock_strerror(rc), because, why);
    cr_expect_not_null(strstr(why, "TLS"), "errstr: %s", why);
    cr_expect_not_null(strstr(why, says), "errstr lacks '%s': %s", says, why);
    cr_log_info("%s: %s", because, why);
    cr_expect_lt(test_now_ms() - t0, 900, "%s took %lld ms", because, test_now_ms() - t0);
}

Test(tls, mutual_without_client_certificate, .init = setup_certs, .fini = teardown_all, .timeout = 30) {
    start("yes");
    hilock_config cfg = tls_cfg();
    expect_refused(&cfg, "no client certificate", "certificate");
}

Test(tls, wrong_ca, .init = setup_certs, .fini = teardown_all, .timeout = 30) {
    start("no");
    hilock_config cfg = tls_cfg();
    cfg.tls_ca_file = certs.other_ca;
    expect_refused(&cfg, "an unrelated CA", "is refused");
}

Test(tls, wrong_server_name, .init = setup_certs, .fini = teardown_all, .timeout = 30) {
    start("no");
    hilock_config cfg = tls_cfg();
    cfg.tls_server_name = "db.example.com";
    expect_refused(&cfg, "a name the certificate lacks", "hostname mismatch");
    /* The names it has pass. */
    char why[256];
    cfg.tls_server_name = "localhost";
    cr_expect_eq(lock_once(&cfg, why, sizeof(why)), 0, "localhost: %s", why);
}

Test(tls, insecure_skips_verification, .init = setup_certs, .fini = teardown_all, .timeout = 30) {
    char why[256];
    start("no");
    hilock_config cfg = tls_cfg();
    cfg.tls_ca_file = certs.other_ca;
    cfg.tls_server_name = "db.example.com";
    cfg.tls_insecure = 1;
    int rc = lock_once(&cfg, why, sizeof(why));
    cr_expect_eq(rc, 0, "%s: %s", hilock_strerror(rc), why);
}

/* Connections killed under a held lock and a waiter: both reconnect
 * through TLS, the release reaches Redis, the waiter gets the lock. */
Test(tls, reconnect_after_kill, .init = setup_certs, .fini = teardown_all, .timeout = 30) {
    start("no");
    hilock_config cfg = tls_cfg();
    cfg.linger_ms = 5000;
    hilock_client *a = lockenv_client_cfg(&e, &cfg), *b = lockenv_client_cfg(&e, &cfg);
    got ga = acquire_now(&e, a, "tls", NULL);
    cr_assert_eq(ga.status, 0, "%s: %s", hilock_strerror(ga.status), hilock_client_errstr(a));
    got gb = {0, 0, NULL, 0};
    hilock_acquire_opts o = opts_wait(15000);
    cr_assert_eq(hilock_acquire(b, "tls", &o, got_cb, &gb, NULL), 0);
    long long until = test_now_ms() + 5000;
    while (numsub(&srv.r, "tls") < 1 && test_now_ms() < until) test_loop_for(e.base, 20);
    cr_assert_geq(numsub(&srv.r, "tls"), 1, "the waiter never subscribed");
    /* Through the plain port: every TLS connection goes. */
    cr_assert_geq(test_redis_int(&srv.r, "CLIENT KILL TYPE pubsub"), 1);
    cr_assert_geq(test_redis_int(&srv.r, "CLIENT KILL TYPE normal"), 2);
    until = test_now_ms() + 5000;
    while (numsub(&srv.r, "tls") < 1 && test_now_ms() < until) test_loop_for(e.base, 20);
    cr_assert_geq(numsub(&srv.r, "tls"), 1, "the waiter did not subscribe again: %s",
                  hilock_client_errstr(b));
    if (handed_over(a, ga.hold, b, &gb) == 0) cr_expect_eq(release_now(&e, gb.hold), 0);
    hilock_stats st;
    hilock_stats_init(&st);
    cr_assert_eq(hilock_client_stats(b, &st), 0);
    cr_expect_geq(st.node[0].reconnects, 2, "the command and subscriber connections came back");
    hilock_client_free(a);
    hilock_client_free(b);
}

/* The CLI over TLS: options, the same from the environment, and a refusal
 * (69, with the reason). */
Test(tls, cli_options_and_environment, .init = setup_certs, .fini = teardown_all, .timeout = 60) {
    char err[1024], env_ca[256], env_cert[256], env_key[256];
    start("yes");
    char *opts[] = {"-u", srv.url, "-w", "5000", "--cacert", certs.ca, "--cert", certs.client_cert,
                    "--key", certs.client_key, "x", "--", "true", NULL};
    cr_expect_eq(run_cli(opts, NULL, err, sizeof(err)), 0, "options: %s", err);
    snprintf(env_ca, sizeof(env_ca), "HILOCK_CACERT=%s", certs.ca);
    snprintf(env_cert, sizeof(env_cert), "HILOCK_CERT=%s", certs.client_cert);
    snprintf(env_key, sizeof(env_key), "HILOCK_KEY=%s", certs.client_key);
    char *env[] = {env_ca, env_cert, env_key, NULL};
    char *plain[] = {"-u", srv.url, "-w", "5000", "x", "--", "true", NULL};
    cr_expect_eq(run_cli(plain, env, err, sizeof(err)), 0, "environment: %s", err);
    /* No client certificate: refused, 69, and why. */
    char *nocert[] = {"-u", srv.url, "-w", "0", "--cacert", certs.ca, "x", "--", "true", NULL};
    cr_expect_eq(run_cli(nocert, NULL, err, sizeof(err)), 69, "no certificate: %s", err);
    /* The alert's text when it arrives before the reset, else our guess. */
    cr_expect(strstr(err, "refused our certificate") || strstr(err, "alert certificate required"),
              "stderr: %s", err);
    /* --insecure with the wrong CA still works; without it, 69. */
    char *wrong[] = {"-u", srv.url, "-w", "0", "--cacert", certs.other_ca, "--cert", certs.client_cert,
                     "--key", certs.client_key, "x", "--", "true", NULL};
    cr_expect_eq(run_cli(wrong, NULL, err, sizeof(err)), 69, "wrong CA: %s", err);
    cr_expect_not_null(strstr(err, "is refused"), "stderr: %s", err);
    char *insecure[] = {"-u", srv.url, "-w", "0", "--cacert", certs.other_ca, "--insecure", "--cert",
                        certs.client_cert, "--key", certs.client_key, "x", "--", "true", NULL};
    cr_expect_eq(run_cli(insecure, NULL, err, sizeof(err)), 0, "--insecure: %s", err);
    /* A CA file that is not there: 69 at once, said so. */
    char *nofile[] = {"-u", srv.url, "--cacert", "/nonexistent.crt", "x", "--", "true", NULL};
    cr_expect_eq(run_cli(nofile, NULL, err, sizeof(err)), 69, "no CA file: %s", err);
    cr_expect_not_null(strstr(err, "cannot load"), "stderr: %s", err);
}

/* rediss:// to a port that speaks plain Redis: an error, in time. */
Test(tls, plain_port_is_refused, .init = setup_certs, .fini = teardown_all, .timeout = 30) {
    char why[256];
    start("no");
    hilock_config cfg = tls_cfg();
    char url[64];
    snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", srv.r.port);
    cfg.url = url;
    long long t0 = test_now_ms();
    int rc = lock_once(&cfg, why, sizeof(why));
    cr_expect_neq(rc, 0, "a TLS client got a lock from a plain port");
    cr_expect(rc == HILOCK_ETLS || rc == HILOCK_EDEADLINE || rc == HILOCK_ECONN, "%s: %s",
              hilock_strerror(rc), why);
    cr_expect_lt(test_now_ms() - t0, 2500, "took %lld ms", test_now_ms() - t0);
    cr_log_info("plain port: %s: %s", hilock_strerror(rc), why);
}

/* rediss:// to a port where nobody listens: on loopback the refusal shows
 * at once, in TLS's first write. It is a server that is down (ECONN, tried
 * again), not a refusal of TLS (ETLS). */
Test(tls, nobody_listening_is_econn, .init = setup_certs, .fini = teardown_all, .timeout = 30) {
    char url[64], why[256];
    start("no");
    hilock_config cfg = tls_cfg();
    snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", test_refused_port());
    cfg.url = url;
    int rc = lock_once(&cfg, why, sizeof(why));
    cr_expect_eq(rc, HILOCK_ECONN, "%s: %s", hilock_strerror(rc), why);
    cr_expect_not_null(strstr(why, "refused"), "errstr: %s", why);
}

/* A server that takes the TLS handshake (asking no client certificate),
 * then closes at once, as one that goes down at that moment: the process
 * on *port, to be stopped with test_reap-style kill by the caller. */
static pid_t tls_closer_start(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    cr_assert_geq(fd, 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(fd, 16), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
        if (ctx == NULL || SSL_CTX_use_certificate_chain_file(ctx, certs.server_cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx, certs.server_key, SSL_FILETYPE_PEM) != 1)
            _exit(2);
        for (;;) {
            int c = accept(fd, NULL, NULL);
            if (c < 0) continue;
            SSL *ssl = SSL_new(ctx);
            SSL_set_fd(ssl, c);
            SSL_accept(ssl);
            SSL_free(ssl); /* no close_notify: it just goes */
            close(c);
        }
    }
    close(fd);
    return pid;
}

/* A TLS 1.3 server that closes right after the handshake without having
 * asked for our certificate went down: ECONN (waited out, tried again),
 * not a refusal of our certificate (ETLS). One that asked is the refusal
 * (mutual_without_client_certificate). */
Test(tls, closed_after_handshake_without_asking_is_econn, .init = setup_certs, .fini = teardown_all,
     .timeout = 30) {
    char url[64], why[256];
    int port = 0;
    pid_t closer = tls_closer_start(&port);
    hilock_config cfg;
    lockenv_config(&cfg, NULL);
    snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", port);
    cfg.url = url;
    cfg.tls_ca_file = certs.ca;
    cfg.log_cb = log_stderr;
    int rc = lock_once(&cfg, why, sizeof(why));
    kill(closer, SIGKILL);
    waitpid(closer, NULL, 0);
    cr_expect(rc == HILOCK_ECONN || rc == HILOCK_EDEADLINE, "%s: %s", hilock_strerror(rc), why);
    /* Not a refusal on any connection, the subscriber's included. */
    cr_expect_null(strstr(why, "refused"), "errstr: %s", why);
    cr_expect_null(strstr(why, "failed"), "errstr: %s", why);
    cr_log_info("closed after the handshake: %s: %s", hilock_strerror(rc), why);
}

/* redlocks://: Redlock over three TLS masters. */
Test(tls, redlock_over_tls, .init = setup_certs, .fini = teardown_all, .timeout = 60) {
    test_tls_redis more[2];
    char url[160], why[256];
    start("no");
    for (int i = 0; i < 2; i++)
        cr_assert_eq(test_tls_redis_start(&more[i], &certs, "no"), 0);
    snprintf(url, sizeof(url), "redlocks://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", srv.tls_port,
             more[0].tls_port, more[1].tls_port);
    hilock_config cfg = tls_cfg();
    cfg.url = url;
    hilock_client *c = lockenv_client_cfg(&e, &cfg);
    got g = acquire_now(&e, c, "tls", NULL);
    snprintf(why, sizeof(why), "%s", hilock_client_errstr(c));
    cr_expect_eq(g.status, 0, "%s: %s", hilock_strerror(g.status), why);
    if (g.status == 0) {
        /* The key is on a quorum of the masters at least (the grant does
         * not wait for the third's answer). */
        cr_expect_geq(lock_exists(&srv.r, "tls") + lock_exists(&more[0].r, "tls") +
                      lock_exists(&more[1].r, "tls"), 2);
        cr_expect_eq(release_now(&e, g.hold), 0);
    }
    hilock_client_free(c);
    for (int i = 0; i < 2; i++) test_tls_redis_stop(&more[i]);
}

/* rediss-sentinel://: the sentinel and the master it names, both over TLS. */
Test(tls, sentinel_over_tls, .init = setup_certs, .fini = teardown_all, .timeout = 60) {
    test_tls_redis sent;
    char url[160];
    start("no");
    cr_assert_eq(test_tls_sentinel_start(&sent, &certs, "tlsmaster", srv.tls_port), 0);
    snprintf(url, sizeof(url), "rediss-sentinel://127.0.0.1:%d#tlsmaster", sent.tls_port);
    hilock_config cfg = tls_cfg();
    cfg.url = url;
    hilock_client *c = lockenv_client_cfg(&e, &cfg);
    hilock_acquire_opts o = opts_wait(5000);
    got g = acquire_now(&e, c, "tls", &o);
    cr_expect_eq(g.status, 0, "%s: %s", hilock_strerror(g.status), hilock_client_errstr(c));
    if (g.status == 0) {
        cr_expect_eq(lock_exists(&srv.r, "tls"), 1, "not held in the master");
        cr_expect_eq(release_now(&e, g.hold), 0);
    }
    hilock_client_free(c);
    test_tls_redis_stop(&sent);
}

/* The server restarts on its ports: the client comes back through TLS. */
Test(tls, server_restart, .init = setup_certs, .fini = teardown_all, .timeout = 60) {
    start("no");
    hilock_config cfg = tls_cfg();
    hilock_client *c = lockenv_client_cfg(&e, &cfg);
    got g = acquire_now(&e, c, "before", NULL);
    cr_assert_eq(g.status, 0, "%s: %s", hilock_strerror(g.status), hilock_client_errstr(c));
    cr_expect_eq(release_now(&e, g.hold), 0);
    cr_assert_eq(test_tls_redis_restart(&srv, &certs, "no"), 0, "the server did not start again");
    e.r = srv.r;
    hilock_acquire_opts o = opts_wait(10000);
    g = acquire_now(&e, c, "after", &o);
    cr_expect_eq(g.status, 0, "%s: %s", hilock_strerror(g.status), hilock_client_errstr(c));
    if (g.status == 0) {
        cr_expect_eq(lock_exists(&srv.r, "after"), 1, "not held in the restarted server");
        cr_expect_eq(release_now(&e, g.hold), 0);
    }
    hilock_stats st;
    hilock_stats_init(&st);
    cr_assert_eq(hilock_client_stats(c, &st), 0);
    cr_expect_geq(st.node[0].reconnects, 1, "no reconnect counted");
    hilock_client_free(c);
}

#define PROCS 2
#define PROC_WAITERS 300
#define LOCAL_WAITERS 600

/* support/exclusion.h over TLS: waiters here and in other processes. */
Test(tls, exclusion, .init = setup_certs, .fini = teardown_all, .timeout = 120) {
    pid_t kids[PROCS];
    start("no");
    hilock_config cfg = tls_cfg();
    resource *res = exclusion_resource();
    exclusion_fork(&e, &cfg, res, "exclusion", PROC_WAITERS, 60000, kids, PROCS);
    cr_expect(exclusion_waiters(&e, &cfg, res, "exclusion", LOCAL_WAITERS, 60000), "local waiters");
    exclusion_reap(kids, PROCS);
    exclusion_check(res, LOCAL_WAITERS + PROCS * PROC_WAITERS);
    exclusion_resource_free(res);
}

/* ---- A Redis Cluster over TLS (tls-cluster yes) -------------------------- */

static clusterenv tce; /* its loop is e's */

static void tls_cluster_setup(void) {
    setup_certs();
    cr_assert_eq(test_cluster_start_with(&tce.cl, test_tls_node_args, &certs), 0,
                 "the TLS cluster did not start");
    tce.base = e.base;
    tce.loop = e.loop;
}

static void tls_cluster_teardown(void) {
    test_cluster_stop(&tce.cl);
    tce.base = NULL;
    teardown_all();
}

/* A cluster client seeded at the TLS port of `seed`. */
static hilock_client *tls_cluster_client(const test_redis *seed) {
    char url[64];
    hilock_config cfg;
    snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", test_tls_port_of(seed->port));
    cluster_config(&cfg, url);
    cfg.log_cb = log_stderr;
    cfg.tls_ca_file = certs.ca;
    return cluster_client_cfg(&tce, &cfg);
}

TestSuite(tls_cluster, .init = tls_cluster_setup, .fini = tls_cluster_teardown, .timeout = 120);

/* Names on every master, from a client seeded at a replica: each lock on
 * the master of its slot (CLUSTER SLOTS named TLS ports), and a waiter
 * woken over its sharded TLS subscription within the handoff's time. */
Test(tls_cluster, every_master_and_wakeups) {
    hilock_client *a = tls_cluster_client(&tce.cl.node[0]), *b = tls_cluster_client(&tce.cl.node[3]);
    test_redis *seen[3] = {NULL, NULL, NULL};
    int nseen = 0;
    for (int i = 0; i < 64 && nseen < 3; i++) {
        char name[32];
        snprintf(name, sizeof(name), "tc-%d", i);
        test_redis *m = test_cluster_master_of(&tce.cl, cluster_slot_of(name));
        cr_assert_not_null(m);
        int known = 0;
        for (int j = 0; j < nseen; j++) known |= seen[j] == m;
        if (known) continue;
        seen[nseen++] = m;
        got ga = cluster_take(&tce, a, name);
        cr_assert_eq(ga.status, 0, "%s: %s (%s)", name, hilock_strerror(ga.status), hilock_client_errstr(a));
        cr_expect_eq(lock_exists(m, name), 1, "%s is not on the master of its slot", name);
        got gb = {0, 0, NULL, 0};
        hilock_acquire_opts o = opts_wait(10000);
        cr_assert_eq(hilock_acquire(b, name, &o, got_cb, &gb, NULL), 0);
        long long until = test_now_ms() + 5000;
        while (!cluster_subscribed_on(m, name, 0) && test_now_ms() < until) test_loop_for(e.base, 20);
        cr_assert(cluster_subscribed_on(m, name, 0), "%s: no sharded subscription on its master: %s", name,
                  hilock_client_errstr(b));
        if (handed_over(a, ga.hold, b, &gb) == 0) cr_expect_eq(cluster_give_back(&tce, gb.hold), 0);
    }
    cr_expect_eq(nseen, 3, "names on %d masters of 3", nseen);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* A held lock's slot moves (ASK, then MOVED, both naming TLS ports; MIGRATE
 * itself goes over TLS between the nodes) under its holder and waiter. */
Test(tls_cluster, held_lock_migrates) {
    hilock_client *a = tls_cluster_client(&tce.cl.node[0]), *b = tls_cluster_client(&tce.cl.node[0]);
    cluster_migrate_held(&tce, a, b, "tls-migrant", test_tls_port_of(0));
    hilock_client_free(a);
    hilock_client_free(b);
}

/* CLUSTER FAILOVER under contention: the exclusion holds and the promoted
 * replica serves the names over TLS. */
Test(tls_cluster, failover_under_contention) {
    hilock_client *a = tls_cluster_client(&tce.cl.node[0]), *b = tls_cluster_client(&tce.cl.node[0]);
    cluster_failover_contended(&tce, a, b, 0);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* A master killed with kill -9 under contention: its replica takes over. */
Test(tls_cluster, master_killed_under_contention) {
    hilock_client *a = tls_cluster_client(&tce.cl.node[0]), *b = tls_cluster_client(&tce.cl.node[0]);
    cluster_failover_contended(&tce, a, b, 1);
    hilock_client_free(a);
    hilock_client_free(b);
}

/* ---- Sentinel failover over TLS ------------------------------------------- */

static int replica_link_up(const test_redis *r) {
    redisContext *k = test_redis_connect(r);
    redisReply *rep = k ? redisCommand(k, "INFO replication") : NULL;
    int up = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "master_link_status:up") != NULL;
    if (rep) freeReplyObject(rep);
    if (k) redisFree(k);
    return up;
}

/* A master and its replica over TLS, and a sentinel that watches them over
 * TLS: a lock held across SENTINEL FAILOVER, its release sent to the new
 * master once the client has followed +switch-master (heard over its TLS
 * subscription to the sentinel), and the waiter, subscribed again on the
 * new master, woken by it. */
Test(tls, sentinel_failover, .init = setup_certs, .fini = teardown_all, .timeout = 90) {
    test_tls_redis replica, sent;
    char url[160];
    start("no");
    cr_assert_eq(test_tls_replica_start(&replica, &certs, srv.tls_port), 0);
    long long until = test_now_ms() + 10000;
    while (!replica_link_up(&replica.r) && test_now_ms() < until) test_msleep(50);
    cr_assert(replica_link_up(&replica.r), "the replica's TLS link did not come up");
    cr_assert_eq(test_tls_sentinel_start(&sent, &certs, "tlsfail", srv.tls_port), 0);
    until = test_now_ms() + 15000;
    while (!test_sentinel_replicas_ok(&sent.r, "tlsfail", 1) && test_now_ms() < until) test_msleep(100);
    cr_assert(test_sentinel_replicas_ok(&sent.r, "tlsfail", 1), "the sentinel never had the replica in step");

    snprintf(url, sizeof(url), "rediss-sentinel://127.0.0.1:%d#tlsfail", sent.tls_port);
    hilock_config cfg = tls_cfg();
    cfg.url = url;
    cfg.linger_ms = 5000;
    cfg.request_timeout_ms = 6000;
    hilock_client *a = lockenv_client_cfg(&e, &cfg), *b = lockenv_client_cfg(&e, &cfg);
    got ga = acquire_now(&e, a, "tls-fo", NULL);
    cr_assert_eq(ga.status, 0, "%s: %s", hilock_strerror(ga.status), hilock_client_errstr(a));
    got gb = {0, 0, NULL, 0};
    hilock_acquire_opts o = opts_wait(30000);
    cr_assert_eq(hilock_acquire(b, "tls-fo", &o, got_cb, &gb, NULL), 0);
    until = test_now_ms() + 5000;
    while (numsub(&srv.r, "tls-fo") < 1 && test_now_ms() < until) test_loop_for(e.base, 20);
    cr_assert_geq(numsub(&srv.r, "tls-fo"), 1, "the waiter never subscribed");
    /* The lock is on the replica before the switch (no write is lost; a
     * WAIT of ours would wait for our own writes only). */
    until = test_now_ms() + 5000;
    while (lock_exists(&replica.r, "tls-fo") != 1 && test_now_ms() < until) test_msleep(10);
    cr_assert_eq(lock_exists(&replica.r, "tls-fo"), 1, "the lock never reached the replica");

    redisContext *k = test_redis_connect(&sent.r);
    redisReply *rep = k ? redisCommand(k, "SENTINEL FAILOVER tlsfail") : NULL;
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "SENTINEL FAILOVER: %s",
              rep && rep->str ? rep->str : "no reply");
    freeReplyObject(rep);
    redisFree(k);
    /* a follows: a fresh name lands on the promoted replica. */
    int moved = 0;
    until = test_now_ms() + 20000;
    while (!moved && test_now_ms() < until) {
        hilock_acquire_opts once = opts_wait(0);
        got gp = acquire_now(&e, a, "tls-fo-probe", &once);
        if (gp.status == 0) {
            moved = lock_exists(&replica.r, "tls-fo-probe") == 1;
            cr_assert_eq(release_now(&e, gp.hold), 0);
        }
        if (!moved) test_loop_for(e.base, 100);
    }
    cr_assert(moved, "the client never followed the failover: %s", hilock_client_errstr(a));
    cr_expect_eq(gb.calls, 0, "granted while held");
    /* The waiter's subscription moves to the new master too. */
    until = test_now_ms() + 10000;
    while (numsub(&replica.r, "tls-fo") < 1 && test_now_ms() < until) test_loop_for(e.base, 20);
    cr_assert_geq(numsub(&replica.r, "tls-fo"), 1, "the waiter did not subscribe on the new master: %s",
                  hilock_client_errstr(b));
    if (handed_over(a, ga.hold, b, &gb) == 0) {
        cr_expect_eq(lock_exists(&replica.r, "tls-fo"), 1, "not held on the new master");
        cr_expect_eq(release_now(&e, gb.hold), 0);
    }
    hilock_client_free(a);
    hilock_client_free(b);
    test_tls_redis_stop(&sent);
    test_tls_redis_stop(&replica);
}

#endif
