/* TLS for the rediss:// forms of the URL, through hiredis >= 1.0's
 * hiredis_ssl (built in when the Makefile finds hiredis/hiredis_ssl.h and
 * defines HILOCK_HAVE_TLS).
 *
 * hilock makes its own OpenSSL context and SSL objects rather than
 * hiredis's redisSSLContext: hiredis sets SNI but never checks the server's
 * name against its certificate, and gives no way to tell a refused
 * certificate from a broken socket. An SSL of ours, handed to hiredis with
 * redisInitiateSSL(), lets us ask for both (SSL_set1_host, the verify
 * result). A command connection's handshake runs inside hiredis (its first
 * write drives SSL_connect); a subscriber connection's is driven by sub.c
 * with hl_tls_step() before hiredis gets the SSL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "net/net.h"

#ifdef HILOCK_HAVE_TLS

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <hiredis/hiredis_ssl.h>

struct hl_tls {
    SSL_CTX *ctx;
    char *server_name;  /* tls_server_name, or NULL: each connection's host */
    int insecure;
};

int hilock_tls_available(void) { return 1; }

/* Say what failed with OpenSSL's reason, and clear its error queue (a
 * later connection's failure must not read this one's). */
static void tls_error(hl_net *net, const char *fmt, const char *arg) {
    if (net->loop == NULL) { /* hilock_config_check: nowhere to say it */
        ERR_clear_error();
        return;
    }
    unsigned long e = ERR_peek_last_error();
    char why[160];
    snprintf(why, sizeof(why), "%s", e ? ERR_reason_error_string(e) : "");
    ERR_clear_error();
    hl_set_error(net->loop, "TLS: %s%s%s%s", fmt, arg ? arg : "", *why ? ": " : "", why);
}

/* Where the server's certificate must lead: the given CA file and/or
 * directory, or the system's default CAs. */
static int tls_load_cas(hl_net *net, SSL_CTX *ctx, const hilock_config *cfg) {
    if (cfg->tls_ca_file == NULL && cfg->tls_ca_dir == NULL) {
        if (SSL_CTX_set_default_verify_paths(ctx) == 1) return 0;
        tls_error(net, "cannot load the system's default CAs", NULL);
        return HILOCK_ETLS;
    }
    if (SSL_CTX_load_verify_locations(ctx, cfg->tls_ca_file, cfg->tls_ca_dir) == 1) return 0;
    tls_error(net, "cannot load the CAs of ",
              cfg->tls_ca_file ? cfg->tls_ca_file : cfg->tls_ca_dir);
    return HILOCK_ETLS;
}

static int tls_load_cert(hl_net *net, SSL_CTX *ctx, const hilock_config *cfg) {
    if (cfg->tls_cert_file == NULL) return 0;
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert_file) != 1) {
        tls_error(net, "cannot load the client certificate ", cfg->tls_cert_file);
        return HILOCK_ETLS;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_key_file, SSL_FILETYPE_PEM) != 1) {
        tls_error(net, "cannot load the client key ", cfg->tls_key_file);
        return HILOCK_ETLS;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        tls_error(net, "the client key does not match its certificate ", cfg->tls_cert_file);
        return HILOCK_ETLS;
    }
    return 0;
}

int hl_tls_setup(hl_net *net, const hilock_config *cfg) {
    if (!net->url.tls) return 0;
    if ((cfg->tls_cert_file == NULL) != (cfg->tls_key_file == NULL)) {
        if (net->loop) hl_set_error(net->loop, "TLS: a client certificate needs its key, and a key its certificate");
        return HILOCK_EINVAL;
    }
    /* OpenSSL >= 1.1 initialises itself; hiredis's call covers older ones. */
    redisInitOpenSSL();
    struct hl_tls *t = calloc(1, sizeof(*t));
    if (t == NULL) return HILOCK_ENOMEM;
    net->tls = t;
    t->insecure = cfg->tls_insecure != 0;
    if (cfg->tls_server_name && (t->server_name = strdup(cfg->tls_server_name)) == NULL)
        return HILOCK_ENOMEM;
    if ((t->ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
        tls_error(net, "cannot make an OpenSSL context", NULL);
        return HILOCK_ETLS;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(t->ctx, t->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    int rc = t->insecure ? 0 : tls_load_cas(net, t->ctx, cfg);
    if (rc == 0) rc = tls_load_cert(net, t->ctx, cfg);
    return rc;
}

void hl_tls_free(hl_net *net) {
    struct hl_tls *t = net->tls;
    if (t == NULL) return;
    if (t->ctx) SSL_CTX_free(t->ctx);
    free(t->server_name);
    free(t);
    net->tls = NULL;
}

/* The name k's server must prove: SNI for a DNS name, and the certificate
 * checked against it (subjectAltName DNS or IP entries). */
static int tls_name(hl_conn *k, SSL *ssl) {
    const struct hl_tls *t = k->net->tls;
    const char *name = t->server_name ? t->server_name : k->addr->host;
    unsigned char ip[16];
    int is_ip = inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1;
    if (!is_ip && SSL_set_tlsext_host_name(ssl, name) != 1) return -1;
    if (t->insecure) return 0;
    if (is_ip) return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1 ? 0 : -1;
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    return SSL_set1_host(ssl, name) == 1 ? 0 : -1;
}

int hl_tls_new(hl_conn *k, int fd) {
    hl_tls_drop(k);
    ERR_clear_error(); /* what is in the queue from now on is this connection's */
    SSL *ssl = SSL_new(k->net->tls->ctx);
    if (ssl == NULL || tls_name(k, ssl) != 0 || SSL_set_fd(ssl, fd) != 1) {
        tls_error(k->net, "cannot set up the connection to ", k->addr->host);
        if (ssl) SSL_free(ssl);
        return -1;
    }
    SSL_set_connect_state(ssl);
    k->ssl = ssl;
    k->ssl_owned = 1;
    return 0;
}

int hl_tls_step(hl_conn *k, int *want) {
    char why[200];
    int r = SSL_connect(k->ssl);
    if (r == 1) return 1;
    switch (SSL_get_error(k->ssl, r)) {
    case SSL_ERROR_WANT_READ:  *want = HILOCK_IO_READ;  return 0;
    case SSL_ERROR_WANT_WRITE: *want = HILOCK_IO_WRITE; return 0;
    default:
        if (hl_tls_failed(k, why, sizeof(why))) {
            hl_set_error(k->net->loop, "%s", why);
            return -1;
        }
        hl_set_error(k->net->loop, "TLS handshake with %s:%d: the connection closed", k->addr->host,
                     k->addr->port);
        return HL_TLS_LOST;
    }
}

int hl_tls_attach(hl_conn *k, redisContext *c) {
    char why[256];
    if (redisInitiateSSL(c, k->ssl) != REDIS_OK) {
        /* The handshake may have run to its end already (on loopback), or
         * the connect failed at once (a server that is down): still ours,
         * hl_tls_drop frees it. */
        if (hl_tls_failed(k, why, sizeof(why))) {
            hl_set_error(k->net->loop, "%s", why);
            return -1;
        }
        hl_set_error(k->net->loop, "connect: %s", c->errstr);
        return HL_TLS_LOST;
    }
    k->ssl_owned = 0;
    return 0;
}

void hl_tls_drop(hl_conn *k) {
    if (k->ssl != NULL && k->ssl_owned) SSL_free(k->ssl);
    k->ssl = NULL;
    k->ssl_owned = 0;
}

/* Whether the server presented its certificate on this connection. */
static int tls_peer_shown(const SSL *ssl) {
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    return SSL_get0_peer_certificate(ssl) != NULL;
#else
    X509 *x = SSL_get_peer_certificate(ssl);
    if (x) X509_free(x);
    return x != NULL;
#endif
}

int hl_tls_failed(hl_conn *k, char *why, size_t n) {
    if (k->ssl == NULL) return 0;
    long v = SSL_get_verify_result(k->ssl);
    unsigned long e = ERR_peek_last_error();
    ERR_clear_error();
    if (v != X509_V_OK) {
        /* Verification ran and refused: the CA, the name, the dates. */
        snprintf(why, n, "TLS: the certificate of %s:%d is refused: %s", k->addr->host,
                 k->addr->port, X509_verify_cert_error_string(v));
        return 1;
    }
    if (e != 0 && ERR_GET_LIB(e) == ERR_LIB_SSL) {
        /* E.g. "tlsv13 alert certificate required": the server wanted a
         * client certificate; "wrong version number": the port does not
         * speak TLS. */
        snprintf(why, n, "TLS handshake with %s:%d failed: %s", k->addr->host, k->addr->port,
                 ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "unknown reason");
        return 1;
    }
    /* TLS 1.3 ends the client's side of the handshake before the server
     * has checked the client's certificate; a server that refuses it sends
     * an alert and closes, and the reset that our unread-by-it request
     * causes often destroys the alert before we read it. What is left to
     * see: the server showed a certificate we accepted, then closed before
     * answering anything. */
    if (tls_peer_shown(k->ssl)) {
        snprintf(why, n, "TLS: %s:%d closed the connection after the handshake: it refused "
                 "our certificate (none given, or not one it trusts)", k->addr->host, k->addr->port);
        return 1;
    }
    return 0;
}

#else /* !HILOCK_HAVE_TLS */

int hilock_tls_available(void) { return 0; }

int hl_tls_setup(hl_net *net, const hilock_config *cfg) {
    (void)cfg;
    if (!net->url.tls) return 0;
    if (net->loop) hl_set_error(net->loop, "%s", hilock_strerror(HILOCK_ETLS));
    return HILOCK_ETLS;
}

void hl_tls_free(hl_net *net) { (void)net; }
int hl_tls_new(hl_conn *k, int fd) { (void)k; (void)fd; return -1; }
int hl_tls_step(hl_conn *k, int *want) { (void)k; (void)want; return -1; }
int hl_tls_attach(hl_conn *k, redisContext *c) { (void)k; (void)c; return -1; }
void hl_tls_drop(hl_conn *k) { k->ssl = NULL; k->ssl_owned = 0; }
int hl_tls_failed(hl_conn *k, char *why, size_t n) { (void)k; (void)why; (void)n; return 0; }

#endif
