/* See tlsenv.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "support/tlsenv.h"

/* The whole set in one shell run: a CA, a server and a client certificate
 * it signs, and a second CA that signs nothing of ours. */
static const char make_script[] =
    "set -e\n"
    "cd \"$1\"\n"
    "key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out \"$1\"; }\n"
    "ca() { key \"$1.key\"; openssl req -x509 -new -key \"$1.key\" -days 2 -subj \"/CN=$2\" -out \"$1.crt\"; }\n"
    "leaf() {\n"
    "  key \"$1.key\"\n"
    "  openssl req -new -key \"$1.key\" -subj \"/CN=$2\" -out \"$1.csr\"\n"
    "  printf '%s\\n' \"$3\" > \"$1.ext\"\n"
    "  openssl x509 -req -in \"$1.csr\" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \\\n"
    "    -extfile \"$1.ext\" -out \"$1.crt\"\n"
    "}\n"
    "ca ca 'hilock test CA'\n"
    "ca other-ca 'hilock unrelated CA'\n"
    "leaf server localhost 'subjectAltName=IP:127.0.0.1,DNS:localhost\n"
    "extendedKeyUsage=serverAuth,clientAuth'\n"
    "leaf client 'hilock test client' 'extendedKeyUsage=clientAuth'\n";

int test_tls_make(test_tls *t) {
    char log[256], out[4096];
    memset(t, 0, sizeof(*t));
    if (test_make_dir(t->dir, sizeof(t->dir)) != 0) return -1;
    snprintf(log, sizeof(log), "%s/openssl.log", t->dir);
    char *argv[] = {"sh", "-c", (char *)make_script, "sh", t->dir, NULL};
    pid_t pid = test_spawn(argv, NULL, log, NULL);
    int st = pid > 0 ? test_wait(pid, 30000) : -1;
    if (st != 0) {
        fprintf(stderr, "tlsenv: openssl failed (%d):\n%s\n", st, test_slurp(log, out, sizeof(out)));
        test_tls_free(t);
        return -1;
    }
    snprintf(t->ca, sizeof(t->ca), "%s/ca.crt", t->dir);
    snprintf(t->other_ca, sizeof(t->other_ca), "%s/other-ca.crt", t->dir);
    snprintf(t->server_cert, sizeof(t->server_cert), "%s/server.crt", t->dir);
    snprintf(t->server_key, sizeof(t->server_key), "%s/server.key", t->dir);
    snprintf(t->client_cert, sizeof(t->client_cert), "%s/client.crt", t->dir);
    snprintf(t->client_key, sizeof(t->client_key), "%s/client.key", t->dir);
    return 0;
}

void test_tls_free(test_tls *t) {
    if (t->dir[0]) test_remove_dir(t->dir);
    t->dir[0] = '\0';
}

/* master_tls_port > 0: a replica of that TLS master. */
static int start_on(test_tls_redis *s, int port, int tls_port, const test_tls *t,
                    const char *auth_clients, int master_tls_port) {
    char tport[16], mport[16];
    memset(s, 0, sizeof(*s));
    s->tls_port = tls_port;
    if (s->tls_port <= 0) return -1;
    snprintf(tport, sizeof(tport), "%d", s->tls_port);
    snprintf(mport, sizeof(mport), "%d", master_tls_port);
    snprintf(s->url, sizeof(s->url), "rediss://127.0.0.1:%d", s->tls_port);
    return test_redis_start(&s->r, port, "--tls-port", tport, "--tls-cert-file", t->server_cert,
                            "--tls-key-file", t->server_key, "--tls-ca-cert-file", t->ca,
                            "--tls-auth-clients", auth_clients, "--tls-replication", "yes",
                            "--repl-diskless-sync-delay", "0",
                            master_tls_port > 0 ? "--replicaof" : NULL, "127.0.0.1", mport, NULL);
}

int test_tls_redis_start(test_tls_redis *s, const test_tls *t, const char *auth_clients) {
    return start_on(s, 0, test_free_port(), t, auth_clients, 0);
}

int test_tls_redis_restart(test_tls_redis *s, const test_tls *t, const char *auth_clients) {
    int port = s->r.port, tls_port = s->tls_port;
    test_tls_redis_stop(s);
    return start_on(s, port, tls_port, t, auth_clients, 0);
}

void test_tls_redis_stop(test_tls_redis *s) { test_redis_stop(&s->r); }

int test_tls_sentinel_start(test_tls_redis *s, const test_tls *t, const char *name,
                            int master_tls_port) {
    char conf[192], out[192];
    memset(s, 0, sizeof(*s));
    s->r.port = test_free_port();
    s->tls_port = test_free_port();
    if (s->r.port <= 0 || s->tls_port <= 0 || test_make_dir(s->r.dir, sizeof(s->r.dir)) != 0) {
        s->r.dir[0] = '\0';
        return -1;
    }
    snprintf(s->r.url, sizeof(s->r.url), "redis://127.0.0.1:%d", s->r.port);
    snprintf(s->url, sizeof(s->url), "rediss://127.0.0.1:%d", s->tls_port);
    snprintf(conf, sizeof(conf), "%s/sentinel.conf", s->r.dir);
    snprintf(out, sizeof(out), "%s/stdout.log", s->r.dir);
    FILE *f = fopen(conf, "w");
    if (f == NULL) { test_redis_stop(&s->r); return -1; }
    fprintf(f,
            "port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile %s/sentinel.log\n"
            "tls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n"
            "tls-auth-clients no\ntls-replication yes\n"
            "sentinel monitor %s 127.0.0.1 %d 1\n",
            s->r.port, s->r.dir, s->r.dir, s->tls_port, t->server_cert, t->server_key, t->ca, name,
            master_tls_port);
    fclose(f);
    const char *bin = test_server_bin();
    const char *argv[] = {bin, conf, "--sentinel", NULL};
    s->r.pid = test_spawn_server(argv, out, s->r.dir);
    if (s->r.pid < 0) { s->r.pid = 0; test_redis_stop(&s->r); return -1; }
    long long deadline = test_now_ms() + 5000;
    int st;
    while ((st = test_redis_probe(&s->r)) == 0 && test_now_ms() < deadline) test_msleep(10);
    if (st == 1) return 0;
    char buf[2048], path[192];
    snprintf(path, sizeof(path), "%s/sentinel.log", s->r.dir);
    fprintf(stderr, "tlsenv: sentinel did not start:\n%s\n", test_slurp(path, buf, sizeof(buf)));
    test_redis_stop(&s->r);
    return -1;
}

int test_tls_replica_start(test_tls_redis *s, const test_tls *t, int master_tls_port) {
    return start_on(s, 0, test_free_port(), t, "no", master_tls_port);
}

int test_tls_node_args(int port, const char **argv, int max, void *data) {
    static char tport[16]; /* valid until the next call, as the harness asks */
    const test_tls *t = data;
    const char *args[] = {"--tls-port", tport, "--tls-cluster", "yes", "--tls-replication", "yes",
                          "--tls-cert-file", t->server_cert, "--tls-key-file", t->server_key,
                          "--tls-ca-cert-file", t->ca, "--tls-auth-clients", "no"};
    int n = (int)(sizeof(args) / sizeof(args[0]));
    if (n > max) return 0;
    snprintf(tport, sizeof(tport), "%d", test_tls_port_of(port));
    memcpy(argv, args, sizeof(args));
    return n;
}
