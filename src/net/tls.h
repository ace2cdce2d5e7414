/* TLS settings apart from a client: the parts of tls.c that need no hl_net
 * or hl_conn, for the library's connections and for the blocking ones of
 * `hilock inspect` (tools/inspect.c) alike, so that both verify the same
 * way. Without HILOCK_HAVE_TLS, hl_tls_make fails with HILOCK_ETLS and
 * hilock_strerror's text (what to build). */
#ifndef HILOCK_NET_TLS_H
#define HILOCK_NET_TLS_H

#include <stddef.h>
#include <hiredis/hiredis.h>
#include "hilock/hilock.h"

typedef struct hl_tls hl_tls;
struct ssl_st;

/* The OpenSSL context of cfg's TLS settings: the CAs (or the system's),
 * the client certificate and key, verification unless tls_insecure. 0, or
 * HILOCK_EINVAL / HILOCK_ENOMEM / HILOCK_ETLS with the reason in why (n
 * bytes). */
int hl_tls_make(const hilock_config *cfg, hl_tls **out, char *why, size_t n);
void hl_tls_destroy(hl_tls *t);

/* A blocking context c, connected to host:port: TLS on it, the handshake
 * run (within c's timeout) and the server's name checked. 0, or with the
 * reason in why: -1 (TLS refused, or no answer in time) or -2 (the socket
 * failed with no word from TLS: a server that is down; net.h's
 * HL_TLS_LOST). On success *ssl is c's SSL (c owns it), for
 * hl_tls_why until the first reply shows the server accepted us. */
int hl_tls_connect(const hl_tls *t, redisContext *c, const char *host, int port,
                   struct ssl_st **ssl, char *why, size_t n);

/* Whether TLS is why a connection to host:port broke before it was ready
 * (a certificate refused, an alert from the server), with the reason in
 * why. Clears OpenSSL's error queue. */
int hl_tls_why(struct ssl_st *ssl, const char *host, int port, char *why, size_t n);

#endif
