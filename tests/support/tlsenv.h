/* TLS for the tests: certificates made by openssl at test time, and
 * redis-server with a TLS port beside its plain one (the harness probes and
 * inspects a server on the plain port; clients under test use the TLS
 * port). */
#ifndef HILOCK_TEST_TLSENV_H
#define HILOCK_TEST_TLSENV_H

#include "support/harness.h"

typedef struct test_tls {
    char dir[128];          /* a test_make_dir dir, removed by test_tls_free */
    char ca[192];           /* the CA that signed server.crt and client.crt */
    char server_cert[192], server_key[192];  /* SAN IP:127.0.0.1, DNS:localhost */
    char client_cert[192], client_key[192];  /* for mutual TLS */
    char other_ca[192];     /* an unrelated CA: trusting it alone must fail */
} test_tls;

/* Make the certificates (openssl req / x509, EC P-256, valid 2 days).
 * Returns 0, or -1 with openssl's output on stderr. */
int test_tls_make(test_tls *t);
void test_tls_free(test_tls *t);

typedef struct test_tls_redis {
    test_redis r;           /* r.port: the plain port, for the harness */
    int tls_port;
    char url[80];           /* "rediss://127.0.0.1:TLS_PORT" */
} test_tls_redis;

/* Start redis-server with --tls-port and t's server certificate;
 * auth_clients: "yes" (a client certificate of t's CA is required), "no"
 * or "optional". Returns 0 or -1. */
int test_tls_redis_start(test_tls_redis *s, const test_tls *t, const char *auth_clients);
void test_tls_redis_stop(test_tls_redis *s);
/* Stop it and start it again on the same two ports. Returns 0 or -1. */
int test_tls_redis_restart(test_tls_redis *s, const test_tls *t, const char *auth_clients);

/* A sentinel with a TLS port beside its plain one, that monitors the
 * master `name` at 127.0.0.1:master_tls_port over TLS (tls-replication
 * yes), quorum 1, so that it names the master's TLS port. Returns 0 or -1;
 * stop it with test_tls_redis_stop(). */
int test_tls_sentinel_start(test_tls_redis *s, const test_tls *t, const char *name,
                            int master_tls_port);

/* A replica of the TLS master on master_tls_port, replicating over TLS
 * (tls-replication yes: it announces its TLS port, which is what the
 * master's INFO and so Sentinel name). Returns 0 or -1. */
int test_tls_replica_start(test_tls_redis *s, const test_tls *t, int master_tls_port);

/* For test_cluster_start_with(cl, test_tls_node_args, t): every node gets
 * a TLS port, test_tls_port_of(its plain port), and speaks TLS on the
 * cluster bus and for replication (tls-cluster, tls-replication), so that
 * CLUSTER SLOTS and MOVED name TLS ports to TLS clients (plain ones to
 * plain clients: the harness and redis-cli keep the plain ports). */
int test_tls_node_args(int port, const char **argv, int max, void *t);
static inline int test_tls_port_of(int port) { return port + 1; }

#endif
