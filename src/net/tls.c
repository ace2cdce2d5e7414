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
 * with hl_tls_step() before hiredis gets the SSL. `hilock inspect`'s
 * blocking connections use the same context and checks (net/tls.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "net/net.h"
#include "net/tls.h"

#ifdef HILOCK_HAVE_TLS

#include <arpa/inet.h>
#include <pthread.h>
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

/* Say what failed with OpenSSL's reason into why, and clear its error
 * queue (a later connection's failure must not read this one's). */
static void tls_error(char *why, size_t n, const char *what, const char *arg) {
    unsigned long e = ERR_peek_last_error();
    const char *reason = e ? ERR_reason_error_string(e) : NULL;
    snprintf(why, n, "TLS: %s%s%s%s", what, arg ? arg : "", reason ? ": " : "", reason ? reason : "");
    ERR_clear_error();
}

/* Where the server's certificate must lead: the given CA file and/or
 * directory, or the system's default CAs. */
static int tls_load_cas(SSL_CTX *ctx, const hilock_config *cfg, char *why, size_t n) {
    if (cfg->tls_ca_file == NULL && cfg->tls_ca_dir == NULL) {
        if (SSL_CTX_set_default_verify_paths(ctx) == 1) return 0;
        tls_error(why, n, "cannot load the system's default CAs", NULL);
        return HILOCK_ETLS;
    }
    if (SSL_CTX_load_verify_locations(ctx, cfg->tls_ca_file, cfg->tls_ca_dir) == 1) return 0;
    tls_error(why, n, "cannot load the CAs of ", cfg->tls_ca_file ? cfg->tls_ca_file : cfg->tls_ca_dir);
    return HILOCK_ETLS;
}

static int tls_load_cert(SSL_CTX *ctx, const hilock_config *cfg, char *why, size_t n) {
    if (cfg->tls_cert_file == NULL) return 0;
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert_file) != 1) {
        tls_error(why, n, "cannot load the client certificate ", cfg->tls_cert_file);
        return HILOCK_ETLS;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_key_file, SSL_FILETYPE_PEM) != 1) {
        tls_error(why, n, "cannot load the client key ", cfg->tls_key_file);
        return HILOCK_ETLS;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        tls_error(why, n, "the client key does not match its certificate ", cfg->tls_cert_file);
        return HILOCK_ETLS;
    }
    return 0;
}

/* Whether the server asked for our certificate (a CertificateRequest), kept
 * on each SSL: under TLS 1.3 that is what tells a server that refused our
 * certificate and closed from one that went down (hl_tls_why). The index
 * is made once for the process, whichever thread makes the first client. */
static int asked_index = -1;
static pthread_once_t asked_once = PTHREAD_ONCE_INIT;

static void asked_init(void) { asked_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL); }

static void tls_msg(int write_p, int version, int content_type, const void *buf, size_t len, SSL *ssl,
                    void *arg) {
    (void)version; (void)arg;
    if (!write_p && content_type == SSL3_RT_HANDSHAKE && len > 0 &&
        ((const unsigned char *)buf)[0] == SSL3_MT_CERTIFICATE_REQUEST)
        SSL_set_ex_data(ssl, asked_index, (void *)1);
}

/* The settings into t, whose fields are NULL until set. */
static int tls_fill(hl_tls *t, const hilock_config *cfg, char *why, size_t n) {
    t->insecure = cfg->tls_insecure != 0;
    if (cfg->tls_server_name && (t->server_name = strdup(cfg->tls_server_name)) == NULL)
        return HILOCK_ENOMEM;
    if ((t->ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
        tls_error(why, n, "cannot make an OpenSSL context", NULL);
        return HILOCK_ETLS;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(t->ctx, t->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    pthread_once(&asked_once, asked_init);
    if (asked_index >= 0) SSL_CTX_set_msg_callback(t->ctx, tls_msg);
    int rc = t->insecure ? 0 : tls_load_cas(t->ctx, cfg, why, n);
    if (rc == 0) rc = tls_load_cert(t->ctx, cfg, why, n);
    return rc;
}

int hl_tls_make(const hilock_config *cfg, hl_tls **out, char *why, size_t n) {
    *out = NULL;
    snprintf(why, n, "%s", hilock_strerror(HILOCK_ENOMEM)); /* what an ENOMEM below says */
    if ((cfg->tls_cert_file == NULL) != (cfg->tls_key_file == NULL)) {
        snprintf(why, n, "TLS: a client certificate needs its key, and a key its certificate");
        return HILOCK_EINVAL;
    }
    /* OpenSSL >= 1.1 initialises itself; hiredis's call covers older ones. */
    redisInitOpenSSL();
    hl_tls *t = calloc(1, sizeof(*t));
    if (t == NULL) return HILOCK_ENOMEM;
    int rc = tls_fill(t, cfg, why, n);
    if (rc != 0) hl_tls_destroy(t);
    else *out = t;
    return rc;
}

void hl_tls_destroy(hl_tls *t) {
    if (t == NULL) return;
    if (t->ctx) SSL_CTX_free(t->ctx);
    free(t->server_name);
    free(t);
}

/* The name host's server must prove: SNI for a DNS name, and the
 * certificate checked against it (subjectAltName DNS or IP entries). */
static int tls_name(const hl_tls *t, const char *host, SSL *ssl) {
    const char *name = t->server_name ? t->server_name : host;
    unsigned char ip[16];
    int is_ip = inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1;
    if (!is_ip && SSL_set_tlsext_host_name(ssl, name) != 1) return -1;
    if (t->insecure) return 0;
    if (is_ip) return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1 ? 0 : -1;
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    return SSL_set1_host(ssl, name) == 1 ? 0 : -1;
}

/* A new SSL of t for a connection to host on socket fd: NULL with why. */
static SSL *tls_ssl(const hl_tls *t, const char *host, int fd, char *why, size_t n) {
    ERR_clear_error(); /* what is in the queue from now on is this connection's */
    SSL *ssl = SSL_new(t->ctx);
    if (ssl == NULL || tls_name(t, host, ssl) != 0 || SSL_set_fd(ssl, fd) != 1) {
        tls_error(why, n, "cannot set up the connection to ", host);
        if (ssl) SSL_free(ssl);
        return NULL;
    }
    SSL_set_connect_state(ssl);
    return ssl;
}

/* Hand ssl to c (hiredis then reads and writes through it, and frees it):
 * 0, or -1 (TLS refused) or HL_TLS_LOST with why (ssl still the
 * caller's). */
static int tls_initiate(redisContext *c, SSL *ssl, const char *host, int port, char *why, size_t n) {
    if (redisInitiateSSL(c, ssl) == REDIS_OK) return 0;
    /* The handshake may have run to its end already (on loopback; always
     * for a blocking c). */
    if (hl_tls_why(ssl, host, port, why, n)) return -1;
    if ((c->flags & REDIS_BLOCK) && (SSL_want_read(ssl) || SSL_want_write(ssl))) { /* its timeout */
        snprintf(why, n, "TLS handshake with %s:%d timed out: does the port speak TLS?", host, port);
        return -1;
    }
    /* The socket failed with no word from TLS (on loopback a refused
     * connect shows here, in the first write): a server that is down. */
    snprintf(why, n, "connect to %s:%d: %s", host, port, c->errstr);
    return HL_TLS_LOST;
}

int hl_tls_connect(const hl_tls *t, redisContext *c, const char *host, int port,
                   struct ssl_st **ssl, char *why, size_t n) {
    SSL *s = tls_ssl(t, host, c->fd, why, n);
    if (s == NULL) return -1;
    int rc = tls_initiate(c, s, host, port, why, n);
    if (rc != 0) {
        SSL_free(s);
        return rc;
    }
    *ssl = s;
    return 0;
}

int hl_tls_begin(hl_conn *k, redisContext *c) {
    char why[256];
    k->ssl = NULL;
    int rc = hl_tls_connect(k->net->tls, c, k->addr->host, k->addr->port, &k->ssl, why, sizeof(why));
    if (rc != 0) hl_set_error(k->net->loop, "%s", why);
    return rc;
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
    return k->ssl != NULL && hl_tls_why(k->ssl, k->addr->host, k->addr->port, why, n);
}

int hl_tls_why(SSL *ssl, const char *host, int port, char *why, size_t n) {
    long v = SSL_get_verify_result(ssl);
    unsigned long e = ERR_peek_last_error();
    ERR_clear_error();
    if (v != X509_V_OK) {
        /* Verification ran and refused: the CA, the name, the dates. */
        snprintf(why, n, "TLS: the certificate of %s:%d is refused: %s", host, port,
                 X509_verify_cert_error_string(v));
        return 1;
    }
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
    /* OpenSSL 3's word for a close without close_notify: no refusal in
     * itself (see below). */
    if (e != 0 && ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING) e = 0;
#endif
    if (e != 0 && ERR_GET_LIB(e) == ERR_LIB_SSL) {
        /* E.g. "tlsv13 alert certificate required": the server wanted a
         * client certificate; "wrong version number": the port does not
         * speak TLS. */
        snprintf(why, n, "TLS handshake with %s:%d failed: %s", host, port,
                 ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "unknown reason");
        return 1;
    }
    /* TLS 1.3 ends the client's side of the handshake before the server
     * has checked the client's certificate; a server that refuses it sends
     * an alert and closes, and the reset that our unread-by-it request
     * causes often destroys the alert before we read it. What is left to
     * see: the server asked for our certificate, showed one we accepted,
     * then closed before answering anything. (One that asked nothing and
     * closed went down: a lost connection, not a refusal.) */
    if (tls_peer_shown(ssl) && asked_index >= 0 && SSL_get_ex_data(ssl, asked_index) != NULL) {
        snprintf(why, n, "TLS: %s:%d closed the connection after the handshake: it refused "
                 "our certificate (none given, or not one it trusts)", host, port);
        return 1;
    }
    return 0;
}

#else /* !HILOCK_HAVE_TLS */

int hilock_tls_available(void) { return 0; }

int hl_tls_make(const hilock_config *cfg, hl_tls **out, char *why, size_t n) {
    (void)cfg;
    *out = NULL;
    snprintf(why, n, "%s", hilock_strerror(HILOCK_ETLS));
    return HILOCK_ETLS;
}

void hl_tls_destroy(hl_tls *t) { (void)t; }

int hl_tls_connect(const hl_tls *t, redisContext *c, const char *host, int port,
                   struct ssl_st **ssl, char *why, size_t n) {
    (void)t; (void)c; (void)host; (void)port; (void)ssl;
    snprintf(why, n, "%s", hilock_strerror(HILOCK_ETLS));
    return -1;
}

int hl_tls_why(struct ssl_st *ssl, const char *host, int port, char *why, size_t n) {
    (void)ssl; (void)host; (void)port; (void)why; (void)n;
    return 0;
}

int hl_tls_begin(hl_conn *k, redisContext *c) { (void)k; (void)c; return -1; }
int hl_tls_step(hl_conn *k, int *want) { (void)k; (void)want; return -1; }
int hl_tls_failed(hl_conn *k, char *why, size_t n) { (void)k; (void)why; (void)n; return 0; }

#endif

/* A client's settings: both builds, through hl_tls_make. */
int hl_tls_setup(hl_net *net, const hilock_config *cfg) {
    char why[256];
    if (!net->url.tls) return 0;
    int rc = hl_tls_make(cfg, &net->tls, why, sizeof(why));
    if (rc != 0 && net->loop) hl_set_error(net->loop, "%s", why);
    return rc;
}

void hl_tls_free(hl_net *net) {
    hl_tls_destroy(net->tls);
    net->tls = NULL;
}
